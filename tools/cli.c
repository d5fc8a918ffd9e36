/*
 * cli.c — argument parsing and formatting helpers for the kvtier command.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/kvtier.h"
#include "tools/cli.h"

static int parse_scaled(const char *s, uint64_t *out, int allow_t)
{
    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -EINVAL;
    uint64_t mul = 1;
    switch (tolower((unsigned char)*end)) {
    case 'k': mul = 1ull << 10; end++; break;
    case 'm': mul = 1ull << 20; end++; break;
    case 'g': mul = 1ull << 30; end++; break;
    case 't': if (!allow_t) return -EINVAL; mul = 1ull << 40; end++; break;
    default: break;
    }
    if (mul > 1 && (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0))
        end += strlen(end);
    if (*end)
        return -EINVAL;
    double r = v * (double)mul;
    if (r > 1.8e19 || r != (double)(uint64_t)r)
        return -EINVAL;
    *out = (uint64_t)r;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out) { return parse_scaled(s, out, 1); }
int cli_parse_count(const char *s, uint64_t *out) { return parse_scaled(s, out, 0); }

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
    char *end;
    long v = strtol(s, &end, 10);
    if (*s && !*end && v >= 0 && v < 1024) {
        *out = (int)v;
        return 0;
    }
    return -EINVAL;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

int cli_error(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kvtier %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

void cli_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

int cli_getopt_error(const char *cmd, int c, char **argv)
{
    if (c == ':')
        cli_error(cmd, 2, "option '%s' needs a value", argv[optind - 1]);
    else if (optopt)
        cli_error(cmd, 2, "unknown option '-%c' (see kvtier %s --help)", optopt, cmd);
    else
        cli_error(cmd, 2, "unknown option '%s' (see kvtier %s --help)", argv[optind - 1], cmd);
    return -EINVAL;
}
