/*
 * json.h — the command's JSON out (--json), through jansson: the helpers
 * that turn the command's values into jansson's and print an object the
 * way the reports always have ("key": value, ", " between, one line).
 * Traces are read with jansson too (tools/prefix/trace.c).
 */
#ifndef KVT_TOOLS_JSON_H
#define KVT_TOOLS_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A JSON string of s: s itself when it is UTF-8, else s with every byte
 * from 0x80 up as '?' (paths come from argv and need not be UTF-8; JSON
 * must be). A new reference; NULL only when out of memory (json_pack and
 * json_object_set_new then fail, and util_json_print says so). */
json_t *util_json_str(const char *s);

/* A JSON number of v: an integer when v is integral (below 2^53), else a
 * real; null when v is not finite (JSON cannot say NaN or infinity). A new
 * reference, NULL when out of memory. */
json_t *util_json_real(double v);

/* o[key] = v: an integer (a uint64_t past 2^63 - 1, which jansson cannot
 * hold, as the nearest real: fine for counts and byte totals, wrong for
 * 64-bit ids and fingerprints, which must not come here), a number (null
 * when not finite), true/false, or a string (util_json_str). Out of memory,
 * the key is left out. */
void util_json_set_u64(json_t *o, const char *key, uint64_t v);
void util_json_set_real(json_t *o, const char *key, double v);
void util_json_set_bool(json_t *o, const char *key, bool v);
void util_json_set_str(json_t *o, const char *key, const char *s);

/* Prints o to f as one line ("key": value, ", " between items, reals with
 * six significant digits as "%.6g" but for the exponent, "3.5e8"), then
 * '\n', and flushes f. Takes the reference to o, even on
 * error. Returns 0, -ENOMEM when o is NULL (a constructor failed), or -EIO. */
int util_json_print(FILE *f, json_t *o);
/* The same with digits significant digits for the reals (1 to 17): for
 * reports whose figures always had more than six ("%.9g"). */
int util_json_print_digits(FILE *f, json_t *o, int digits);

#endif /* KVT_TOOLS_JSON_H */
