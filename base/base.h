/*
 * base.h — what every layer of kvtier may use (not installed): page keys
 * compared and hashed, KVT_NONE, errors with a message, counted metadata
 * allocation, memory for DMA in huge pages, the clock.
 *
 * Layering: core/ depends on include/kvtier.h only. policy/ and io/ build on
 * core/; tiers/ builds on all three; tools/ use the public API plus
 * lab/tool.h. Nothing here may include a header of tiers/, policy/ or io/.
 */
#ifndef KVT_BASE_H
#define KVT_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "include/kvtier.h"

/* No page, slot or record: every 32-bit page and slot number is below it. */
#define KVT_NONE UINT32_MAX

/* Marks a symbol of the public API (the library is built -fvisibility=hidden). */
#define KVT_API __attribute__((visibility("default")))

/* ------------------------------------------------------------- errors (base/error.c) */

/* Records a detailed message for kvt_last_error() (per thread) and returns err. */
int kvt_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kvt_clear_error(void);

/* ------------------------------------------------------------- metadata (base/error.c) */

/* Allocations of page metadata, counted into *counter so that
 * kvt_stats.meta_bytes is exact. alloc zeroes; realloc zeroes the growth and
 * on failure leaves p and the count as they were; free(NULL) does nothing. */
void *kvt_meta_alloc(uint64_t *counter, size_t bytes);
void *kvt_meta_realloc(uint64_t *counter, void *p, size_t old_bytes, size_t new_bytes);
void kvt_meta_free(uint64_t *counter, void *p, size_t bytes);

/* ------------------------------------------------------------- memory (base/huge.c) */

/* Anonymous read-write memory for DMA: at least bytes, starting on a 2 MiB
 * boundary and asking for transparent huge pages, so that a disk request
 * from it is one scatter segment per huge page. 0 with *out set, or -errno.
 * The caller owns the mapping and gives it back with kvt_huge_unmap(p,
 * bytes), bytes as asked for. */
int kvt_huge_map(size_t bytes, void **out);
void kvt_huge_unmap(void *p, size_t bytes);

/* ------------------------------------------------------------- keys */

/* n rounded up to a multiple of 4096: what O_DIRECT moves for n bytes. */
static inline size_t kvt_round4k(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

static inline bool kvt_key_eq(const kvt_key *a, const kvt_key *b)
{
    return a->id == b->id && a->layer == b->layer && a->index == b->index;
}

/* Order by id, then layer, then index (the SSD index's key order). */
static inline int kvt_key_cmp(const kvt_key *a, const kvt_key *b)
{
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* A well-mixed hash for open-addressing tables keyed by kvt_key. */
static inline uint64_t kvt_key_hash(const kvt_key *k)
{
    uint64_t h = k->id * 0x9E3779B97F4A7C15ull;
    h ^= (((uint64_t)k->layer << 32) | k->index) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

/* ------------------------------------------------------------- clock */

static inline uint64_t kvt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time: what it computed, without the time another
 * thread held its core (kvt_now_ns counts both). */
static inline uint64_t kvt_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Exponential smoothing with weight 1/4 for the new sample (0 = no history). */
static inline uint64_t kvt_smooth(uint64_t avg, uint64_t sample)
{
    return avg ? (3 * avg + sample) / 4 : sample;
}

#endif /* KVT_BASE_H */
