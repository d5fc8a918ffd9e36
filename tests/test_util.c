/*
 * test_util.c — the helpers the command and the tests share (tools/util/).
 */
#include <math.h>

#include "helpers.h"

static void test_clock(void **state)
{
    double s0 = util_now();
    uint64_t n0 = util_now_ns();
    double s1 = util_now();
    uint64_t n1 = util_now_ns();
    assert_true(s1 >= s0 && n1 >= n0);
    /* One clock: seconds and nanoseconds agree (to well under a second). */
    assert_true(fabs((double)n0 * 1e-9 - s0) < 0.5);
}

static void test_median(void **state)
{
    double lo = -1, hi = -1;
    assert_true(util_median(NULL, 0, &lo, &hi) == 0 && lo == 0 && hi == 0);
    double one[] = { 7 };
    assert_true(util_median(one, 1, &lo, &hi) == 7 && lo == 7 && hi == 7);
    double odd[] = { 5, 1, 3 };
    assert_true(util_median(odd, 3, &lo, &hi) == 3 && lo == 1 && hi == 5);
    assert_true(odd[0] == 1 && odd[1] == 3 && odd[2] == 5); /* sorted in place */
    double even[] = { 4, 1, 3, 2 };
    assert_true(util_median(even, 4, NULL, NULL) == 2.5);
    double nan_last[] = { NAN, 2, 1 };
    assert_true(util_median(nan_last, 3, &lo, NULL) == 2 && lo == 1);
    assert_true(isnan(nan_last[2]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_median),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
