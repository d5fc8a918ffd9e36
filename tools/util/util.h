/*
 * util.h — what the command (tools/) and the tests share, one copy each:
 * the monotonic clock (clock.c) and the median (median.c). Built as kvtier_util, a static library beside libkvtier,
 * never in it. The library keeps its own clock (core/base.h kvt_now_ns):
 * it must not depend on the tools.
 */
#ifndef KVT_TOOLS_UTIL_H
#define KVT_TOOLS_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- clock.c */

/* CLOCK_MONOTONIC, in seconds and in nanoseconds: the same clock, so that
 * the two may be compared (and with pthread_cond_timedwait on a condition
 * variable set to CLOCK_MONOTONIC). */
double util_now(void);
uint64_t util_now_ns(void);

/* ------------------------------------------------------------- median.c */

/* The median of v[0..n): the middle value, or the mean of the two middle
 * ones when n is even; 0 when n is 0. Sorts v in place (NaNs last). lo and
 * hi, when not NULL, get the smallest and largest value (0 when n is 0). */
double util_median(double *v, size_t n, double *lo, double *hi);

#endif /* KVT_TOOLS_UTIL_H */
