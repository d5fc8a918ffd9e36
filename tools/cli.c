/*
 * cli.c — argument parsing and formatting helpers for the kvtier command.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "lab/tool.h"
#include "tools/cli.h"
#include "tools/util/json.h"

/* 1024^k for the suffix at *p (k, m, g, t in any case, then optionally "b"
 * or "ib"), advancing *p past it; 1 for no suffix; 0 for a bad one. */
static uint64_t parse_suffix(const char **p, bool allow_t)
{
    static const char units[] = "kmgt";
    const char *u = **p ? strchr(units, tolower((unsigned char)**p)) : NULL;
    if (!u)
        return 1;
    if (u - units == 3 && !allow_t)
        return 0;
    (*p)++;
    if (strcasecmp(*p, "ib") == 0 || strcasecmp(*p, "b") == 0)
        *p += strlen(*p);
    return 1ull << (10 * (u - units + 1));
}

/* Digits, an optional fraction of at most 18 digits, an optional suffix.
 * Integer arithmetic throughout: a double would round sizes above 2^53
 * and let "1e400" or "nan" through to a cast. */
static int parse_scaled(const char *s, uint64_t *out, bool allow_t)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    const char *p = s;
    uint64_t whole = 0, frac = 0, scale = 1;
    for (; isdigit((unsigned char)*p); p++)
        if (__builtin_mul_overflow(whole, 10, &whole) ||
            __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
            return -EINVAL;
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p))
            return -EINVAL;
        for (; isdigit((unsigned char)*p); p++) {
            if (scale == 1000000000000000000ull)
                return -EINVAL;
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    uint64_t mul = parse_suffix(&p, allow_t), v;
    if (!mul || *p || __builtin_mul_overflow(whole, mul, &v))
        return -EINVAL;
    unsigned __int128 f = (unsigned __int128)frac * mul;
    if (f % scale || __builtin_add_overflow(v, (uint64_t)(f / scale), &v))
        return -EINVAL; /* not a whole number, or past 2^64 - 1 */
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out) { return parse_scaled(s, out, true); }
int cli_parse_count(const char *s, uint64_t *out) { return parse_scaled(s, out, false); }

int cli_parse_real(const char *s, double *out)
{
    if (!s || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
        return -EINVAL;
    /* Decimal only: strtod would also take hex floats. */
    if (s[strspn(s, "0123456789.eE+-")])
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v))
        return -EINVAL;
    *out = v;
    return 0;
}

int cli_split_list(const char *val, char *buf, size_t n, char **items, int max, int *count)
{
    size_t len = strlen(val);
    if (len >= n)
        return -EINVAL;
    memcpy(buf, val, len + 1);
    *count = 0;
    for (char *p = buf;; p++) {
        char *end = p + strcspn(p, ",");
        bool last = !*end;
        if (end == p)
            return -EINVAL; /* "a,,b", ",a", "a," or "": strtok would skip it */
        if (*count == max)
            return -E2BIG;
        *end = '\0';
        items[(*count)++] = p;
        if (last)
            return 0;
        p = end;
    }
}

int cli_parse_device(const char *s, int *out)
{
    if (!strcmp(s, "auto")) {
        *out = KVT_DEVICE_AUTO;
        return 0;
    }
    if (!strcmp(s, "host")) {
        *out = KVT_DEVICE_HOST;
        return 0;
    }
    uint64_t v;
    if (s[strspn(s, "0123456789")] || parse_scaled(s, &v, false) || v >= 1024)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

const char *cli_bytes(char *buf, size_t n, double b)
{
    static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    if (b == (double)(uint64_t)b)
        snprintf(buf, n, "%llu %s", (unsigned long long)b, u[i]);
    else
        snprintf(buf, n, "%.1f %s", b, u[i]);
    return buf;
}

const char *cli_secs(char *buf, size_t n, double s)
{
    if (s == 0 || s >= 1)
        snprintf(buf, n, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, n, "%.3g ms", s * 1e3);
    else
        snprintf(buf, n, "%.3g us", s * 1e6);
    return buf;
}

/* --json: an error is also one JSON object on stdout. The first message
 * cli_error prints is kept, and stdout counts what goes through it, so that
 * a command that printed its report (and exits 1 on what it found) gets no
 * second object. Written by the main thread before and after the command;
 * by cli_error, which the commands call from it. */
static struct {
    bool on;
    char cmd[64];
    char msg[1024];
    unsigned long long out_bytes;
} json_err;

static ssize_t json_out_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return done ? (ssize_t)done : -1;
        done += (size_t)w;
    }
    json_err.out_bytes += n;
    return (ssize_t)n;
}

/* "--json", "--json=...", or a start of it getopt_long would take. */
static bool is_json_flag(const char *a)
{
    if (strncmp(a, "--", 2) || !a[2])
        return false;
    size_t n = strcspn(a + 2, "=");
    return n <= 4 && !strncmp(a + 2, "json", n);
}

void cli_json_errors_begin(int argc, char **argv)
{
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        json_err.on |= is_json_flag(argv[i]);
    if (!json_err.on)
        return;
    snprintf(json_err.cmd, sizeof json_err.cmd, "%s", argc > 1 ? argv[1] : "");
    fflush(stdout);
    FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){ .write = json_out_write });
    if (f)
        stdout = f; /* glibc's stdout is a variable: printf and putchar follow it */
    else
        json_err.on = false;
}

int cli_json_errors_end(int rc)
{
    if (!json_err.on)
        return rc;
    fflush(stdout);
    if (rc != 0 && json_err.out_bytes == 0) {
        char why[64];
        snprintf(why, sizeof why, "exit status %d (the reason is on stderr)", rc);
        util_json_print(stdout, json_pack("{s:o, s:o, s:i}", "error",
                                          util_json_str(json_err.msg[0] ? json_err.msg : why),
                                          "command", util_json_str(json_err.cmd), "exit", rc));
    }
    return rc;
}

int cli_error(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    if (json_err.on && !json_err.msg[0]) {
        va_start(ap, fmt);
        vsnprintf(json_err.msg, sizeof json_err.msg, fmt, ap);
        va_end(ap);
        snprintf(json_err.cmd, sizeof json_err.cmd, "%s", cmd);
    }
    fprintf(stderr, "kvtier %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

void cli_json_str(const char *s)
{
    json_t *j = util_json_str(s);
    if (!j || json_dumpf(j, stdout, JSON_ENCODE_ANY) < 0)
        fputs("null", stdout); /* out of memory: still JSON */
    json_decref(j);
}

void cli_json_num(const char *fmt, double v)
{
    if (isfinite(v))
        printf(fmt, v);
    else
        fputs("null", stdout);
}

/* The long options of lo that --name (its first n bytes) names: exactly, or
 * as the start of one or more (getopt_long takes a unique start). *count
 * says how many; the first is returned, or NULL. */
static const struct option *long_named(const struct option *lo, const char *name, size_t n,
                                       int *count)
{
    const struct option *first = NULL;
    *count = 0;
    for (; lo && lo->name; lo++) {
        if (strncmp(lo->name, name, n))
            continue;
        if (!lo->name[n]) { /* exact: no other counts */
            *count = 1;
            return lo;
        }
        if (!(*count)++)
            first = lo;
    }
    return first;
}

int cli_getopt_error(const char *cmd, int c, char **argv, const struct option *lo)
{
    const char *arg = argv[optind - 1];
    if (c == ':') {
        cli_error(cmd, 2, "option '%s' needs a value", arg);
        return -EINVAL;
    }
    /* optopt is the option's val for a long option given a value it does
     * not take, 0 for one unknown or ambiguous, and the letter for a short
     * one (arg is then not always its word: "-ab" stays at optind). */
    if (!strncmp(arg, "--", 2)) {
        size_t n = strcspn(arg + 2, "=");
        int count;
        const struct option *l = long_named(lo, arg + 2, n, &count);
        if (optopt && l && count == 1 && l->val == optopt && arg[2 + n] == '=') {
            cli_error(cmd, 2, "option '--%s' takes no value (given '%s')", l->name, arg);
            return -EINVAL;
        }
        if (!optopt) {
            if (count > 1)
                cli_error(cmd, 2, "option '--%.*s' is ambiguous: it starts --%s and others "
                          "(see kvtier %s --help)", (int)n, arg + 2, l->name, cmd);
            else
                cli_error(cmd, 2, "unknown option '--%.*s' (see kvtier %s --help)", (int)n,
                          arg + 2, cmd);
            return -EINVAL;
        }
    }
    if (optopt > 0 && optopt < 128 && isgraph(optopt))
        cli_error(cmd, 2, "unknown option '-%c' (see kvtier %s --help)", optopt, cmd);
    else
        cli_error(cmd, 2, "unknown option '%s' (see kvtier %s --help)", arg, cmd);
    return -EINVAL;
}

int cli_bad_value(const char *cmd, const char *opt, const char *val, const char *want)
{
    cli_error(cmd, 2, "bad value '%s' for --%s: expected %s", val, opt, want);
    return -EINVAL;
}

int cli_opt_count(const char *cmd, const char *opt, const char *val, uint64_t lo, uint64_t hi,
                  uint64_t *out)
{
    uint64_t v;
    if (cli_parse_count(val, &v) == 0 && v >= lo && v <= hi) {
        *out = v;
        return 0;
    }
    char want[96];
    if (hi == UINT64_MAX)
        snprintf(want, sizeof want, "a whole number, %llu or more", (unsigned long long)lo);
    else
        snprintf(want, sizeof want, "a whole number from %llu to %llu", (unsigned long long)lo,
                 (unsigned long long)hi);
    return cli_bad_value(cmd, opt, val, want);
}

int cli_opt_size(const char *cmd, const char *opt, const char *val, uint64_t lo, uint64_t hi,
                 uint64_t *out)
{
    uint64_t v;
    if (cli_parse_size(val, &v) == 0 && v >= lo && v <= hi) {
        *out = v;
        return 0;
    }
    char want[128], a[32], b[32];
    cli_bytes(a, sizeof a, (double)lo);
    if (hi >= (1ull << 60)) /* an exabyte: no bound worth stating */
        snprintf(want, sizeof want, "a size such as 512M, %s or more", a);
    else
        snprintf(want, sizeof want, "a size such as 512M, from %s to %s", a,
                 cli_bytes(b, sizeof b, (double)hi));
    return cli_bad_value(cmd, opt, val, want);
}

int cli_opt_real(const char *cmd, const char *opt, const char *val, double lo, bool lo_open,
                 double hi, double *out)
{
    double v;
    if (cli_parse_real(val, &v) == 0 && (lo_open ? v > lo : v >= lo) && v <= hi) {
        *out = v;
        return 0;
    }
    char want[96];
    if (lo_open)
        snprintf(want, sizeof want, "a number above %g, at most %g", lo, hi);
    else
        snprintf(want, sizeof want, "a number from %g to %g", lo, hi);
    return cli_bad_value(cmd, opt, val, want);
}

int cli_opt_path(const char *cmd, const char *opt, const char *val)
{
    return *val ? 0 : cli_bad_value(cmd, opt, val, "a path (not an empty string)");
}

const char *cli_kvt_why(int rc)
{
    const char *msg = kvt_last_error();
    return msg && *msg ? msg : kvt_strerror(rc);
}

/* The option whose field starts msg ("hbm_bytes (0) is smaller ..."), or NULL. */
static const char *config_option(const struct cli_field *map, const char *msg)
{
    for (; map && map->field; map++) {
        size_t n = strlen(map->field);
        if (!strncmp(msg, map->field, n) && (msg[n] == ' ' || msg[n] == '\0'))
            return map->option;
    }
    return NULL;
}

int cli_config_check(const char *cmd, const struct kvt_config *c, const struct cli_field *map)
{
    int r = kvt_config_check(c);
    if (r == 0)
        return 0;
    const char *msg = kvt_last_error(), *opt = config_option(map, msg);
    if (opt)
        cli_error(cmd, 2, "bad value for --%s: %s", opt, msg);
    else
        cli_error(cmd, 2, "these settings cannot run: %s", msg);
    return -EINVAL;
}

unsigned char *cli_huge_alloc(size_t len, struct cli_huge *h)
{
    void *p;
    *h = (struct cli_huge){ 0 };
    if (kvt_tool_huge_map(len, &p) < 0)
        return NULL;
    *h = (struct cli_huge){ p, len };
    return p;
}

void cli_huge_free(struct cli_huge *h)
{
    if (h->map)
        kvt_tool_huge_unmap(h->map, h->map_len);
    *h = (struct cli_huge){ 0 };
}

/* ------------------------------------------------------------- stopping */

/* The signal caught, 0 for none. A lock-free atomic: storing it is
 * async-signal-safe, and the command's threads read it without a race. */
static atomic_int stop_sig;
static const int stop_sigs[2] = { SIGINT, SIGTERM };
static struct sigaction stop_old[2];
static bool stop_set[2];

/* Only the flag: the loops see it at their next check and leave through the
 * command's normal close path, which removes what it made. SA_RESETHAND:
 * a second signal has its default effect, for a user who will not wait. */
static void stop_handler(int sig)
{
    atomic_store_explicit(&stop_sig, sig, memory_order_relaxed);
}

void cli_stop_catch(void)
{
    struct sigaction sa = { .sa_handler = stop_handler, .sa_flags = SA_RESTART | SA_RESETHAND };
    sigemptyset(&sa.sa_mask);
    atomic_store(&stop_sig, 0);
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        /* A signal the caller ignores (SIGINT in a script's background job)
         * stays ignored. */
        stop_set[i] = sigaction(stop_sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN &&
                      sigaction(stop_sigs[i], &sa, &stop_old[i]) == 0;
    }
}

int cli_stopped(void)
{
    return atomic_load_explicit(&stop_sig, memory_order_relaxed);
}

int cli_stop_check(void)
{
    return cli_stopped() ? -EINTR : 0;
}

int cli_stop_end(const char *cmd)
{
    for (int i = 0; i < 2; i++)
        if (stop_set[i])
            sigaction(stop_sigs[i], &stop_old[i], NULL);
    int sig = cli_stopped();
    if (!sig)
        return 0;
    cli_error(cmd, 1, "stopped by %s; the temporary files it made are removed",
              sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stdout);
    raise(sig);
    return 128 + sig;
}

/* Up to a deadline on the monotonic clock: the slices' own overshoot does
 * not add up (replay --speed counts a request started 1 ms late). */
void cli_sleep(double s)
{
    double end = util_now() + s, left;
    while (!cli_stopped() && (left = end - util_now()) > 0) {
        double d = left < 0.05 ? left : 0.05;
        struct timespec ts = { 0, (long)(d * 1e9) };
        nanosleep(&ts, NULL);
    }
}
