/*
 * test_util.c — the helpers the command and the tests share (tools/util/).
 */
#include <math.h>

#include "helpers.h"
#include "tools/util/json.h"

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

/* The page pattern: a page says its key and version in every word. */
static void test_pattern(void **state)
{
    enum { N = 64 << 10, W = N / 8 };
    uint64_t *p = malloc(N), *q = malloc(N);
    assert_non_null(p);
    assert_non_null(q);
    kvt_key k = t_key(0x1234, 2, 5);
    util_pattern_fill(p, N, k, 7);
    assert_true(util_pattern_check(p, N, k, 7));
    assert_int_equal(util_pattern_version(p, N, k), 7);
    /* one flipped bit anywhere: found, at its byte */
    static const size_t at[] = { 0, 7, 8, 4095, 4096, N / 2 + 3, N - 1 };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        ((unsigned char *)p)[at[i]] ^= 0x10;
        assert_int_equal(util_pattern_diff(p, N, k, 7, false), at[i]);
        assert_int_equal(util_pattern_version(p, N, k), 0);
        ((unsigned char *)p)[at[i]] ^= 0x10;
    }
    /* another version, another key (each field), the page shifted by a
     * word: every word differs */
    kvt_key others[] = { t_key(0x1235, 2, 5), t_key(0x1234, 3, 5), t_key(0x1234, 2, 6) };
    for (int c = 0; c < 4; c++) {
        if (c < 3)
            util_pattern_fill(q, N, others[c], 7);
        else
            util_pattern_fill(q, N, k, 8);
        for (size_t i = 0; i < W; i++)
            assert_true(q[i] != p[i]);
        assert_int_equal(util_pattern_diff(q, N, k, 7, false), 0);
    }
    memmove(q, p + 1, N - 8);
    for (size_t i = 0; i + 1 < W; i++)
        assert_true(q[i] != p[i]);
    /* zeros (never written) and a torn page (new version's first half) */
    memset(q, 0, N);
    assert_int_equal(util_pattern_diff(q, N, k, 7, false), 0);
    assert_int_equal(util_pattern_version(q, N, k), 0);
    util_pattern_fill(q, N / 2, k, 8);
    memcpy((char *)q + N / 2, (char *)p + N / 2, N / 2);
    assert_int_equal(util_pattern_version(q, N, k), 0);
    /* the compressible form: a quarter unique, then the first 64 words again */
    util_pattern_fill_z(q, N, k, 7);
    assert_int_equal(util_pattern_diff(q, N, k, 7, true), N);
    assert_memory_equal(q, p, N / 4);
    assert_true(q[W / 4] == q[(W / 4) % 64] && q[W - 1] == q[(W - 1) % 64]);
    size_t d = util_pattern_diff(q, N, k, 7, false);
    assert_true(d >= (W / 4) * 8 && d < (W / 4 + 1) * 8);
    /* bytes past the last whole word are left alone */
    memset(q, 0xAB, 16);
    util_pattern_fill(q, 12, k, 7);
    assert_true(q[0] == p[0] && ((unsigned char *)q)[8] == 0xAB);
    free(p);
    free(q);
}

/* The --json helpers: what they print, through a memory stream. */
static void test_json(void **state)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    json_t *o = json_object();
    util_json_set_real(o, "int", 50.0);
    util_json_set_real(o, "real", 0.1234567);
    util_json_set_real(o, "nan", NAN);
    util_json_set_u64(o, "u64", 1ull << 40);
    util_json_set_u64(o, "big", 1ull << 63);
    util_json_set_bool(o, "b", true);
    util_json_set_str(o, "s", "a\"b\xff\x01");
    assert_int_equal(util_json_print(f, o), 0);
    fclose(f);
    assert_string_equal(buf, "{\"int\": 50, \"real\": 0.123457, \"nan\": null, "
                             "\"u64\": 1099511627776, \"big\": 9.22337e18, \"b\": true, \"s\": \"a\\\"b?\\u0001\"}\n");
    free(buf);
    assert_int_equal(util_json_print(stdout, NULL), -ENOMEM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_pattern),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
