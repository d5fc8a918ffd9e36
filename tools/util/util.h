/*
 * util.h — what the command (tools/) and the tests share, one copy each:
 * the monotonic clock (clock.c), the median (median.c) and the page
 * pattern, a page's bytes as a function of its key and a version
 * (pattern.c). Built as kvtier_util, a static library beside libkvtier,
 * never in it. The library keeps its own clock (base/base.h kvt_now_ns):
 * it must not depend on the tools.
 */
#ifndef KVT_TOOLS_UTIL_H
#define KVT_TOOLS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/kvtier.h"

/* ------------------------------------------------------------- clock.c */

/* CLOCK_MONOTONIC, in seconds and in nanoseconds: the same clock, so that
 * the two may be compared (and with pthread_cond_timedwait on a condition
 * variable set to CLOCK_MONOTONIC). */
double util_now(void);
uint64_t util_now_ns(void);

/* CPU time in seconds: the calling thread's (what it computed, not the
 * time another thread held its core), and every thread's of the process. */
double util_thread_cpu(void);
double util_process_cpu(void);

/* ------------------------------------------------------------- median.c */

/* The median of v[0..n): the middle value, or the mean of the two middle
 * ones when n is even; 0 when n is 0. Sorts v in place (NaNs last). lo and
 * hi, when not NULL, get the smallest and largest value (0 when n is 0). */
double util_median(double *v, size_t n, double *lo, double *hi);

/* ------------------------------------------------------------- pattern.c */

/* The content of a page of key k at version v, 8-byte word by word: word
 * 0 is v xor a hash of k (a page says which version it claims to be, to
 * whoever knows its key), word i > 0 is
 * util_pattern_word(util_pattern_seed(k, v), i). The seed mixes the whole
 * key and the whole version, so a page served under another key or at
 * another version differs in every word; the words differ from each other,
 * so a page copied to the wrong offset or torn differs too. A word costs a
 * multiply by a constant and an xor (fills and checks vectorize): a replay
 * at GB/s can check every page it reads. Bytes past the last whole word are
 * left alone and not checked. */
uint64_t util_pattern_seed(kvt_key k, uint64_t v);

static inline uint64_t util_pattern_word(uint64_t seed, size_t i)
{
    return seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
}

/* Writes the pattern of (k, v) into p[0..bytes). */
void util_pattern_fill(void *p, size_t bytes, kvt_key k, uint64_t v);

/* The same, compressible: words past the first quarter repeat the first 64
 * (a codec stores such a page shorter than its slot); the first quarter
 * alone tells keys and versions apart. */
void util_pattern_fill_z(void *p, size_t bytes, kvt_key k, uint64_t v);

/* The byte offset of the first byte of p[0..bytes) that differs from the
 * pattern of (k, v) (util_pattern_fill's, or util_pattern_fill_z's when z),
 * or bytes when none does. */
size_t util_pattern_diff(const void *p, size_t bytes, kvt_key k, uint64_t v, bool z);

/* True when p[0..bytes) holds exactly the pattern of (k, v). */
static inline bool util_pattern_check(const void *p, size_t bytes, kvt_key k, uint64_t v)
{
    return util_pattern_diff(p, bytes, k, v, false) == bytes;
}

/* The version a page of key k is an exact copy of, or 0 when it is none
 * (torn, another key's, garbage): for pages written with versions from 1. */
uint64_t util_pattern_version(const void *p, size_t bytes, kvt_key k);

#endif /* KVT_TOOLS_UTIL_H */
