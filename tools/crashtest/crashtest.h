/*
 * crashtest.h — what the crash loop's parent (crashtest.c) and its writer
 * child (child.c) share: the options, the intent log's records, and the
 * pages, whose bytes derive from (key, version) so that any page read back
 * says whether it is exact.
 */
#ifndef KVT_CRASHTEST_H
#define KVT_CRASHTEST_H

#include <stdbool.h>
#include <stdint.h>

#include "include/kvtier.h"

#define CT_PB ((size_t)16384)
#define CT_FP 0xC4A5E7E5700001ull
#define CT_CHILD_ALARM 30   /* seconds: a child that hangs dies with SIGALRM */
#define CT_MAX_KEYS 4096
#define CT_MAX_THREADS 8
#define CT_FILLER_KEYS 64   /* per filler thread */

struct ct_opts {
    uint64_t cycles, seed, keys, max_ms, threads;
    const char *dir;
    bool json, progress, seed_given;
    bool full;    /* the engine full: filler threads, an SSD smaller than the keys in use */
    bool evict;   /* KVT_FLAG_EVICT (with full) */
};

/* The child logs each record before the operation it names (an intent log),
 * and R_FLUSH after kvt_flush returned 0. */
enum rec_type { R_PUT = 1, R_WRITE, R_DROP, R_FLUSH };
struct rec {
    uint8_t type, pad;
    uint16_t key;
    uint32_t ver;
};

/* The checked keys 0..keys-1 (the log's) and the fillers' keys, apart. */
kvt_key ct_key(unsigned i);
kvt_key ct_filler_key(unsigned j);
unsigned ct_filler_count(const struct ct_opts *o);

/* Checked key i's page at version ver: the page pattern (tools/util/util.h). */
void ct_fill(void *p, unsigned key, uint32_t ver);
bool ct_check(const void *p, unsigned key, uint32_t ver);
/* Whether p is filler key j's page at some version, whole (the pattern
 * says its version). */
bool ct_filler_ok(const void *p, unsigned j);

/* The engine of a cycle, the child's and the check's alike. */
kvt_config ct_config(const struct ct_opts *o, uint64_t cycle);

/* The writer: cur0 is the state the parent found; versions start at base.
 * Runs until killed; exits with a code ct_exit_why explains on a failure. */
_Noreturn void ct_child(const struct ct_opts *o, uint64_t cycle, const uint32_t *cur0,
                        uint32_t base, unsigned seed, int wfd);
const char *ct_exit_why(int code);

#endif /* KVT_CRASHTEST_H */
