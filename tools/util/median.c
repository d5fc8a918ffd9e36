/*
 * median.c — the median the benchmarks report (util.h).
 */
#include <math.h>
#include <stdlib.h>

#include "tools/util/util.h"

/* Ascending, NaNs last: a total order, so qsort's result is defined. */
static int median_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y))
        return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}

double util_median(double *v, size_t n, double *lo, double *hi)
{
    if (lo)
        *lo = 0;
    if (hi)
        *hi = 0;
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), median_cmp);
    if (lo)
        *lo = v[0];
    if (hi)
        *hi = v[n - 1];
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
