/*
 * json.c — the command's JSON out, through jansson (json.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/util/json.h"

json_t *util_json_str(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    /* Not UTF-8 (or no memory): the bytes jansson refused, as '?'. */
    char *c = strdup(s);
    if (!c)
        return NULL;
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

json_t *util_json_real(double v)
{
    if (!isfinite(v))
        return json_null();
    /* Integral: an integer, as printf's %g wrote it ("50", where jansson
     * writes a real "50.0"), so that what compares the figures as text
     * (tests/cli_*.cmake, scripts) reads the same. Exact below 2^53. */
    if (v == trunc(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

void util_json_set_u64(json_t *o, const char *key, uint64_t v)
{
    /* jansson's integers are signed: past 2^63 - 1 the nearest real, not a
     * negative number. */
    json_t *j = v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
    json_object_set_new(o, key, j);
}

void util_json_set_real(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, util_json_real(v));
}

void util_json_set_bool(json_t *o, const char *key, bool v)
{
    json_object_set_new(o, key, json_boolean(v));
}

void util_json_set_str(json_t *o, const char *key, const char *s)
{
    json_object_set_new(o, key, util_json_str(s));
}

int util_json_print(FILE *f, json_t *o)
{
    return util_json_print_digits(f, o, 6);
}

int util_json_print_digits(FILE *f, json_t *o, int digits)
{
    if (!o)
        return -ENOMEM;
    int r = json_dumpf(o, f, JSON_REAL_PRECISION(digits) | JSON_ENCODE_ANY);
    json_decref(o);
    if (r < 0 || fputc('\n', f) == EOF || fflush(f))
        return -EIO;
    return 0;
}
