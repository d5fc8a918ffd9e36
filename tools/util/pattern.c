/*
 * pattern.c — a page's bytes as a function of its key and a version
 * (util.h), the one pattern every test, the replay, the crash loop and the
 * soak hammer write and check.
 */
#include <string.h>

#include "tools/util/util.h"

static uint64_t pattern_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The key's share of the pattern: the whole key, mixed. */
static uint64_t pattern_key(kvt_key k)
{
    uint64_t x = pattern_mix(k.id + 0x9E3779B97F4A7C15ull);
    return pattern_mix(x ^ (((uint64_t)k.layer << 32) | k.index));
}

uint64_t util_pattern_seed(kvt_key k, uint64_t v)
{
    return pattern_mix(pattern_key(k) ^ v);
}

/* Words 1 .. end are util_pattern_word(seed, i); for a compressible page
 * (z) end is the first quarter, and word i past it repeats word i % 64. */
static size_t pattern_end(size_t n, bool z)
{
    return z ? n / 4 : n;
}

static uint64_t pattern_want(uint64_t seed, uint64_t w0, size_t i, size_t end)
{
    size_t j = i < end ? i : i % 64;
    return j ? util_pattern_word(seed, j) : w0;
}

static void pattern_write(uint64_t *w, size_t n, uint64_t seed, uint64_t w0, bool z)
{
    size_t end = pattern_end(n, z), i = 1;
    if (n)
        w[0] = w0;
    for (; i < end; i++)
        w[i] = util_pattern_word(seed, i);
    for (; i < n; i++)
        w[i] = pattern_want(seed, w0, i, end);
}

void util_pattern_fill(void *p, size_t bytes, kvt_key k, uint64_t v)
{
    pattern_write(p, bytes / 8, util_pattern_seed(k, v), v ^ pattern_key(k), false);
}

void util_pattern_fill_z(void *p, size_t bytes, kvt_key k, uint64_t v)
{
    pattern_write(p, bytes / 8, util_pattern_seed(k, v), v ^ pattern_key(k), true);
}

/* Every word's difference from the pattern, or'ed: 0 when p holds it.
 * Accumulates only (the first loop vectorizes); where the first mismatch
 * is, is looked for only on a mismatch. */
static uint64_t pattern_xor(const uint64_t *w, size_t n, uint64_t seed, uint64_t w0, bool z)
{
    size_t end = pattern_end(n, z), i = 1;
    uint64_t d = n ? w[0] ^ w0 : 0;
    for (; i < end; i++)
        d |= w[i] ^ util_pattern_word(seed, i);
    for (; i < n; i++)
        d |= w[i] ^ pattern_want(seed, w0, i, end);
    return d;
}

/* The first byte of word i that differs from want. */
static size_t pattern_byte(const uint64_t *w, size_t i, uint64_t want)
{
    const unsigned char *a = (const unsigned char *)&w[i], *b = (const unsigned char *)&want;
    size_t j = 0;
    while (j < 8 && a[j] == b[j])
        j++;
    return i * 8 + j;
}

size_t util_pattern_diff(const void *p, size_t bytes, kvt_key k, uint64_t v, bool z)
{
    const uint64_t *w = p, seed = util_pattern_seed(k, v), w0 = v ^ pattern_key(k);
    size_t n = bytes / 8, end = pattern_end(n, z);
    if (!pattern_xor(w, n, seed, w0, z))
        return bytes;
    for (size_t i = 0; i < n; i++) {
        uint64_t want = pattern_want(seed, w0, i, end);
        if (w[i] != want)
            return pattern_byte(w, i, want);
    }
    return bytes;
}

uint64_t util_pattern_version(const void *p, size_t bytes, kvt_key k)
{
    uint64_t v;
    if (bytes < 8)
        return 0;
    memcpy(&v, p, sizeof(v));
    v ^= pattern_key(k);
    return v && util_pattern_check(p, bytes, k, v) ? v : 0;
}
