/*
 * replay_priv.h — what the files of tools/replay/ share (internal).
 *
 * Threads: the caller's thread owns struct replay_ctx; kvtier's threads
 * reach only the trace (trace_json's own lock) through on_transfer.
 */
#ifndef KVT_REPLAY_PRIV_H
#define KVT_REPLAY_PRIV_H

#include "tiers/tool.h"
#include "tools/cli.h"
#include "tools/prefix/trace.h"
#include "tools/replay/replay.h"
#include "tools/run/trace_json.h"

/* The caller's recency list of the blocks it stored (evict.c), for the one
 * case the engine leaves to its caller: a put into a full engine. Indexed by
 * the trace's dense block ids. */
struct replay_lru {
    uint32_t *prev, *next;   /* KVT_NONE ends; head = most recent */
    uint32_t *stamp;         /* the last request that uses the block, + 1 */
    uint8_t *held;           /* stored, as far as the caller knows */
    uint32_t head, tail;
    uint64_t n;
};

struct replay_ctx {
    const struct replay_opts *o;
    struct replay_result *r;
    struct pfx_trace tr;
    uint64_t *hash_of;        /* per dense block: its hash id */
    uint32_t *depth;          /* per dense block: the index of its key (first position seen) */
    uint32_t *line_of;        /* per dense block: the line it was first seen on */
    size_t bb;                /* block bytes */
    kvt_engine *e;
    const char *ssd_dir;
    char tmpdir[4096];        /* the temporary spill directory we made, or "" */
    /* per request, sized for the longest chain */
    kvt_key *keys;
    kvt_tier *where;
    int *found;
    uint32_t *sel;            /* chain positions of one get call */
    kvt_key *ckeys;           /* the keys of one call (chunk of them) */
    int *cfound;
    kvt_tier *cwhere;
    void **ptrs;              /* chunk buffers, then the ones one call uses */
    unsigned char *buf;       /* chunk blocks of bb bytes, in huge pages */
    struct cli_huge buf_map;  /* the mapping buf lies in */
    uint32_t chunk;           /* blocks buf holds */
    float *ttft_load, *ttft_recompute; /* per request, seconds */
    struct replay_lru lru;
    struct trace_json trace;
    /* The SSD-served gets' blocks as they lay (first segment), per call:
     * replayed raw after the run (raw.c, the same reads). */
    uint64_t *same_offs;
    uint32_t *same_sizes;
    size_t nsame_offs, same_offs_cap, nsame_sizes, same_sizes_cap;
    bool said;                /* an error message has been printed */
};

/* size.c: the capacities in blocks and the engine's configuration. */
int replay_size(struct replay_ctx *x);
void replay_engine_config(const struct replay_ctx *x, kvt_config *c);
int replay_check_config(const struct replay_ctx *x);

/* raw.c: the disk raw at the block size, before the engine opens the
 * directory and over its own segment after the replay. */
void replay_raw_before(struct replay_ctx *x);
void replay_raw_after(struct replay_ctx *x);

/* loop.c: every request of the trace; 0, or an error after its message. */
int replay_requests(struct replay_ctx *x);

/* evict.c */
int replay_lru_init(struct replay_lru *l, uint32_t blocks);
void replay_lru_free(struct replay_lru *l);
/* Block b was used by request req (0-based) and is stored. */
void replay_lru_touch(struct replay_lru *l, uint32_t b, uint64_t req);
/* Block b is not stored (the engine let it go, or the caller dropped it). */
void replay_lru_forget(struct replay_lru *l, uint32_t b);
/* The engine refused a put: drops up to need blocks from it, least recently
 * used first, never one request req uses. Returns how many it dropped (0:
 * none could go), or a negative error after its message. */
int replay_evict(struct replay_ctx *x, uint32_t need, uint64_t req);

/* trace_out.c */
void replay_trace_span(struct replay_ctx *x, const char *name, double t0, double t1,
                       uint64_t req, uint32_t hit, uint32_t blocks);
int replay_trace_write(const struct replay_ctx *x, const char *path);

/* Seconds of CPU this thread has used. */
double replay_thread_cpu(void);

#endif
