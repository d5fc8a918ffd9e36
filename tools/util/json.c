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
    return isfinite(v) ? json_real(v) : json_null();
}

void util_json_set_u64(json_t *o, const char *key, uint64_t v)
{
    json_object_set_new(o, key, json_integer((json_int_t)v));
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
    if (!o)
        return -ENOMEM;
    int r = json_dumpf(o, f, JSON_REAL_PRECISION(6) | JSON_ENCODE_ANY);
    json_decref(o);
    if (r < 0 || fputc('\n', f) == EOF || fflush(f))
        return -EIO;
    return 0;
}
