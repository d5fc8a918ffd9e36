/*
 * test_cli.c — tools/cli.c's parsers take a whole, plain number or nothing:
 * no space, sign, hex, exponent in a size, inf or nan, nothing after the
 * suffix, nothing past 2^64 - 1, exact above 2^53; and the option checks
 * name the option and the value when they refuse one.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "include/kvtier.h"
#include "tools/cli.h"

struct size_case {
    const char *s;
    uint64_t want; /* ignored where bad */
    bool bad;
};

static void check_sizes(const struct size_case *c, size_t n, int (*parse)(const char *, uint64_t *))
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 12345;
        int r = parse(c[i].s, &v);
        if (c[i].bad && (r != -EINVAL || v != 12345))
            fail_msg("'%s' was taken as %llu", c[i].s, (unsigned long long)v);
        if (!c[i].bad && (r != 0 || v != c[i].want))
            fail_msg("'%s': %d, %llu, want %llu", c[i].s, r, (unsigned long long)v,
                     (unsigned long long)c[i].want);
    }
}

static void test_size(void **state)
{
    (void)state;
    static const struct size_case c[] = {
        { "4096", 4096, false },
        { "0", 0, false },
        { "256K", 256 << 10, false },
        { "256kib", 256 << 10, false },
        { "512MB", 512ull << 20, false },
        { "1.5M", 3ull << 19, false },
        { "4G", 4ull << 30, false },
        { "1T", 1ull << 40, false },
        { "9007199254740993", 9007199254740993ull, false }, /* 2^53 + 1: no double */
        { "18446744073709551615", UINT64_MAX, false },
        { "18446744073709551616", 0, true }, /* 2^64 */
        { "16777216T", 0, true },            /* 2^64 too */
        { "", 0, true },
        { " 1M", 0, true },
        { "1M ", 0, true },
        { "+1", 0, true },
        { "-1", 0, true },
        { "-0", 0, true },
        { "0x10", 0, true },
        { "1e3", 0, true },
        { "inf", 0, true },
        { "nan", 0, true },
        { "1.5", 0, true },   /* not a whole number of bytes */
        { "1.", 0, true },
        { ".5K", 0, true },
        { "1X", 0, true },
        { "1Mx", 0, true },
        { "1b", 0, true },    /* a unit only after a multiplier */
        { "1.0000000000000000001K", 0, true },
    };
    check_sizes(c, sizeof(c) / sizeof(c[0]), cli_parse_size);
}

static void test_count(void **state)
{
    (void)state;
    static const struct size_case c[] = {
        { "32k", 32768, false },
        { "1m", 1 << 20, false },
        { "17", 17, false },
        { "1t", 0, true }, /* counts stop at g */
        { "abc", 0, true },
        { "1.5", 0, true },
        { "1e1", 0, true },
    };
    check_sizes(c, sizeof(c) / sizeof(c[0]), cli_parse_count);
}

static void test_real(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        double want;
    } good[] = { { "2", 2 }, { "0.5", 0.5 }, { ".5", 0.5 }, { "1e3", 1000 }, { "0", 0 } };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        double v = -1;
        assert_int_equal(cli_parse_real(good[i].s, &v), 0);
        assert_true(v == good[i].want);
    }
    static const char *const bad[] = { "",     "abc", "inf",    "nan",   "infinity", "-1",
                                       " 1",   "1 ",  "0x10",   "1e400", "1e-400",   "1,5",
                                       "1e",   ".",   "1.2.3" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        double v = -1;
        if (cli_parse_real(bad[i], &v) != -EINVAL || v != -1)
            fail_msg("'%s' was taken as %g", bad[i], v);
    }
}

static void test_device(void **state)
{
    (void)state;
    int d = 99;
    assert_int_equal(cli_parse_device("host", &d), 0);
    assert_int_equal(d, KVT_DEVICE_HOST);
    assert_int_equal(cli_parse_device("auto", &d), 0);
    assert_int_equal(d, KVT_DEVICE_AUTO);
    assert_int_equal(cli_parse_device("3", &d), 0);
    assert_int_equal(d, 3);
    static const char *const bad[] = { "", "-1", "+1", " 1", "1k", "1.0", "1024", "0x1", "gpu" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        d = 99;
        if (cli_parse_device(bad[i], &d) != -EINVAL || d != 99)
            fail_msg("'%s' was taken as device %d", bad[i], d);
    }
}

/* What an option check printed on stderr, with its return. */
static int captured(char *buf, size_t n, int (*fn)(void *), void *arg)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    int r = fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t got = fread(buf, 1, n - 1, tmp);
    buf[got] = '\0';
    fclose(tmp);
    return r;
}

static int bad_count(void *arg)
{
    uint64_t v;
    return cli_opt_count("run", "batch", arg, 1, 4096, &v);
}

static int bad_real(void *arg)
{
    double v;
    return cli_opt_real("bench hbm", "link-gbps", arg, 0, false, 1e6, &v);
}

static void test_opt_messages(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(captured(err, sizeof err, bad_count, "4097"), -EINVAL);
    assert_non_null(strstr(err, "kvtier run: bad value '4097' for --batch"));
    assert_non_null(strstr(err, "1 to 4096"));
    assert_int_equal(captured(err, sizeof err, bad_real, "inf"), -EINVAL);
    assert_non_null(strstr(err, "bad value 'inf' for --link-gbps"));
    uint64_t v = 7;
    assert_int_equal(cli_opt_size("x", "hbm", "1G", 1, UINT64_MAX, &v), 0);
    assert_true(v == 1ull << 30);
}

/* A list is cut at every comma; an empty item is refused, not skipped. */
static void test_split_list(void **state)
{
    (void)state;
    char buf[32], *items[3];
    int n = -1;
    assert_int_equal(cli_split_list("lru,0.1,x", buf, sizeof buf, items, 3, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(items[0], "lru");
    assert_string_equal(items[1], "0.1");
    assert_string_equal(items[2], "x");
    assert_int_equal(cli_split_list("a", buf, sizeof buf, items, 3, &n), 0);
    assert_int_equal(n, 1);
    static const char *const bad[] = { "", ",", "a,,b", ",a", "a,", "a,b,,", "0.05,,0.1" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (cli_split_list(bad[i], buf, sizeof buf, items, 3, &n) != -EINVAL)
            fail_msg("'%s' was taken as a list", bad[i]);
    assert_int_equal(cli_split_list("a,b,c,d", buf, sizeof buf, items, 3, &n), -E2BIG);
    char longer[40];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    assert_int_equal(cli_split_list(longer, buf, sizeof buf, items, 3, &n), -EINVAL);
}

static int json_nums(void *arg)
{
    (void)arg;
    static const double v[] = { 1.5, 0, 1e300 * 1e300, -1e300 * 1e300, 0.0 / 0.0 };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        cli_json_num("%.6g", v[i]);
        putchar(' ');
    }
    fflush(stdout);
    return 0;
}

/* What a call printed on stdout. */
static void captured_out(char *buf, size_t n, int (*fn)(void *))
{
    fflush(stdout);
    int saved = dup(1);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 1);
    fn(NULL);
    dup2(saved, 1);
    close(saved);
    rewind(tmp);
    size_t got = fread(buf, 1, n - 1, tmp);
    buf[got] = '\0';
    fclose(tmp);
}

/* JSON has no inf or nan: they print as null. */
static void test_json_num(void **state)
{
    (void)state;
    char out[128];
    captured_out(out, sizeof out, json_nums);
    assert_string_equal(out, "1.5 0 null null null ");
}

/* What a child that ran body between cli_json_errors_begin(argv) and
 * _end(rc) printed on stdout, and its exit status. */
static int json_errors_child(char *buf, size_t n, char **argv, int argc, void (*body)(void),
                             int rc)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        if (!freopen("/dev/null", "w", stderr)) /* the messages: not in the test's output */
            _exit(99);
        cli_json_errors_begin(argc, argv);
        body();
        int code = cli_json_errors_end(rc);
        fflush(NULL);
        _exit(code);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t r;
    while (got < n - 1 && (r = read(p[0], buf + got, n - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = '\0';
    close(p[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void fails_quietly(void) { cli_error("run", 1, "first \"why\""); cli_error("run", 1, "then"); }
static void reports_then_fails(void) { printf("{\"report\": 1}\n"); cli_error("fsck", 1, "bad"); }
static void says_nothing(void) {}

/* --json: an error is one JSON object on stdout with the first message,
 * unless the command printed its report; without --json, nothing. */
static void test_json_errors(void **state)
{
    (void)state;
    char out[512];
    char *json[] = { "kvtier", "run", "--batch", "0", "--json", NULL };
    char *plain[] = { "kvtier", "run", "--batch", "0", NULL };
    char *abbrev[] = { "kvtier", "run", "--js", NULL };
    char *after[] = { "kvtier", "run", "--", "--json", NULL };
    assert_int_equal(json_errors_child(out, sizeof out, json, 5, fails_quietly, 2), 2);
    assert_string_equal(out, "{\"error\": \"first \\\"why\\\"\", \"command\": \"run\", "
                             "\"exit\": 2}\n");
    assert_int_equal(json_errors_child(out, sizeof out, json, 5, reports_then_fails, 1), 1);
    assert_string_equal(out, "{\"report\": 1}\n");
    assert_int_equal(json_errors_child(out, sizeof out, abbrev, 3, says_nothing, 1), 1);
    assert_string_equal(out, "{\"error\": \"exit status 1 (the reason is on stderr)\", "
                             "\"command\": \"run\", \"exit\": 1}\n");
    assert_int_equal(json_errors_child(out, sizeof out, json, 5, says_nothing, 0), 0);
    assert_string_equal(out, "");
    assert_int_equal(json_errors_child(out, sizeof out, plain, 4, fails_quietly, 2), 2);
    assert_string_equal(out, "");
    assert_int_equal(json_errors_child(out, sizeof out, after, 4, fails_quietly, 2), 2);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size),     cmocka_unit_test(test_count),
        cmocka_unit_test(test_real),     cmocka_unit_test(test_device),
        cmocka_unit_test(test_opt_messages), cmocka_unit_test(test_split_list),
        cmocka_unit_test(test_json_num),      cmocka_unit_test(test_json_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
