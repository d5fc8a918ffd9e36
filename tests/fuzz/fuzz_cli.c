/*
 * fuzz_cli.c — the command's strict parsers (tools/cli.c) and one
 * subcommand's whole option parsing (`kvtier sim`, tools/sim/options.c
 * sim_parse: getopt_long, then cli_opt_* style checks on every value).
 *
 * Input: the first byte picks the check, the rest is the text. For the
 * number parsers the text up to the first NUL is one argument; for sim it
 * is argv, NUL-separated, after "sim".
 *
 * Rules: cli_parse_size/count accept exactly what an independent reference
 * (below: digits, a fraction of at most 18 digits, a K/M/G/T suffix with
 * B or iB, the value a whole number of bytes below 2^64) accepts, with the
 * same value, and leave *out alone on error; cli_parse_real gives a finite
 * number >= 0 equal to strtod's, from decimal text only; cli_parse_device
 * gives auto, host or 0..1023; sim_parse returns 0, 1 (--help) or -EINVAL
 * (and leaves no argument unread on 0). Their messages go to stderr
 * (run with -close_fd_mask=3).
 */
#include <ctype.h>
#include <math.h>
#include <strings.h>

#include "include/kvtier.h"
#include "tests/fuzz/fuzz.h"
#include "tools/cli.h"
#include "tools/sim/command.h"

#define MAX_ARGS 64

/* The reference: what a size or count is, written from cli.h's words and
 * not from cli.c. 0 and *out, or -1. */
static int ref_scaled(const char *s, bool allow_t, uint64_t *out)
{
    const char *p = s;
    unsigned __int128 whole = 0, frac = 0, scale = 1;
    if (!isdigit((unsigned char)*p))
        return -1;
    while (isdigit((unsigned char)*p)) {
        whole = whole * 10 + (unsigned)(*p++ - '0');
        if (whole > UINT64_MAX)
            return -1;
    }
    if (*p == '.') {
        p++;
        int digits = 0;
        while (isdigit((unsigned char)*p)) {
            if (++digits > 18)
                return -1;
            frac = frac * 10 + (unsigned)(*p++ - '0');
            scale *= 10;
        }
        if (!digits)
            return -1;
    }
    unsigned __int128 mul = 1;
    const char *units = allow_t ? "kmgt" : "kmg", *u;
    if (*p && (u = strchr(units, tolower((unsigned char)*p))) != NULL) {
        mul = (unsigned __int128)1 << (10 * (u - units + 1));
        p++;
        if (!strcasecmp(p, "b") || !strcasecmp(p, "ib"))
            p += strlen(p);
    }
    if (*p)
        return -1;
    unsigned __int128 v = whole * mul, f = frac * mul;
    if (f % scale)
        return -1;
    v += f / scale;
    if (v > UINT64_MAX)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static void check_scaled(const char *s, bool size)
{
    const uint64_t untouched = 0x5a5a5a5a5a5a5a5aull;
    uint64_t got = untouched, want = 0;
    int r = size ? cli_parse_size(s, &got) : cli_parse_count(s, &got);
    int rr = ref_scaled(s, size, &want);
    fuzz_check(r == 0 || r == -EINVAL, "a size is parsed or refused");
    fuzz_check((r == 0) == (rr == 0), "cli.c accepts exactly what the reference accepts");
    fuzz_check(r ? got == untouched : got == want, "the same value; *out untouched on error");
}

static void check_real(const char *s)
{
    double v = -1;
    int r = cli_parse_real(s, &v);
    fuzz_check(r == 0 || r == -EINVAL, "a real is parsed or refused");
    if (r) {
        fuzz_check(v == -1, "*out untouched on error");
        return;
    }
    fuzz_check(isfinite(v) && v >= 0 && v == strtod(s, NULL), "a finite decimal, strtod's value");
    fuzz_check(!strpbrk(s, "xXnNiIpP"), "no hex, inf or nan text accepted");
}

static void check_device(const char *s)
{
    int d = 12345;
    int r = cli_parse_device(s, &d);
    fuzz_check(r == 0 || r == -EINVAL, "a device is parsed or refused");
    if (r) {
        fuzz_check(d == 12345, "*out untouched on error");
        return;
    }
    fuzz_check((d == KVT_DEVICE_AUTO && !strcmp(s, "auto")) ||
                   (d == KVT_DEVICE_HOST && !strcmp(s, "host")) ||
                   (d >= 0 && d < 1024 && s[strspn(s, "0123456789")] == 0),
               "auto, host, or an ordinal 0..1023 in digits");
}

static void check_sim(char *text, size_t n)
{
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "sim";
    for (size_t at = 0; at < n && argc <= MAX_ARGS; at += strlen(text + at) + 1)
        argv[argc++] = text + at;
    argv[argc] = NULL;
    struct sim_opts o;
    int r = sim_parse(argc, argv, &o);
    fuzz_check(r == 0 || r == 1 || r == -EINVAL, "sim's options: run, --help, or a usage error");
    if (r == 0)
        fuzz_check(o.n_pol >= 1 && o.n_pol <= SIM_MAX_POL && o.gen.page_tokens >= 1 &&
                       (o.hbm_pages || (o.hbm_frac > 0 && o.hbm_frac <= 1)),
                   "accepted options are in range");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    char *text = malloc(size + 1);  /* the text plus its NUL */
    fuzz_check(text != NULL, "memory");
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    switch (data[0] % 5) {
    case 0: check_scaled(text, true); break;
    case 1: check_scaled(text, false); break;
    case 2: check_real(text); break;
    case 3: check_device(text); break;
    default: check_sim(text, size - 1); break;
    }
    free(text);
    return 0;
}
