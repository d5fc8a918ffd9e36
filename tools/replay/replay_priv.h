/*
 * replay_priv.h — what the files of tools/replay/ share (internal).
 *
 * Threads: --concurrency worker threads serve the requests (loop.c), each
 * with a struct replay_worker of its own; what they share of struct
 * replay_ctx is under its mu, or read-only while they run. kvtier's threads
 * reach only the trace (trace_json's own lock) through on_transfer.
 */
#ifndef KVT_REPLAY_PRIV_H
#define KVT_REPLAY_PRIV_H

#include <pthread.h>

#include "lab/tool.h"
#include "tools/cli.h"
#include "tools/prefix/trace.h"
#include "tools/replay/replay.h"
#include "tools/run/trace_json.h"

/* The caller's recency list of the blocks it stored (evict.c), for the one
 * case the engine leaves to its caller: a put into a full engine. Indexed by
 * the trace's dense block ids. */
struct replay_lru {
    uint32_t *prev, *next;   /* KVT_NONE ends; head = most recent */
    uint32_t *users;         /* requests being served that use the block */
    uint8_t *held;           /* stored, as far as the caller knows */
    uint32_t head, tail;
    uint64_t n;
};

/* What one request's service needs of its own, sized for the longest chain
 * (keys, where, found, sel) or the chunk (the rest): one per worker thread
 * (--concurrency). part collects the request's counters, added to the
 * shared result under replay_ctx.mu once the request is served. */
struct replay_worker {
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
    struct replay_result part;
    uint32_t tid;             /* its track in --trace */
    struct replay_ctx *x;
    pthread_t thread;
};

/* Calls of one kind (enum replay_span) running at once: its clock in the
 * result counts the time while at least one runs, so that overlapping
 * requests' calls are timed once (bytes / that time is what the engine
 * delivered). */
enum replay_span { SPAN_EXISTS, SPAN_GET_DRAM, SPAN_GET_SSD, SPAN_PUT, SPANS };
struct replay_busy {
    unsigned running[SPANS];
    double since[SPANS];
};

struct replay_ctx {
    const struct replay_opts *o;
    struct replay_result *r;  /* under mu while the workers run */
    struct pfx_trace tr;
    uint64_t *hash_of;        /* per dense block: its hash id */
    uint32_t *depth;          /* per dense block: the index of its key (first position seen) */
    uint32_t *line_of;        /* per dense block: the line it was first seen on */
    size_t bb;                /* block bytes */
    kvt_engine *e;
    const char *ssd_dir;
    char tmpdir[4096];        /* the temporary spill directory we made, or "" */
    bool discard;             /* --ssd-dir held the engine's pages: discarded at the end */
    uint32_t longest;         /* blocks in the longest chain */
    uint32_t chunk;           /* blocks a worker's buf holds */
    struct replay_worker *w;  /* nw of them */
    unsigned nw;              /* o->concurrency, at least 1; 0 until w is allocated */
    float *ttft_load, *ttft_recompute; /* per request, seconds */
    /* Shared by the workers, under mu: the requests handed out, the first
     * error, the clocks of running calls, the caller's recency list, the
     * raw replay's record, the result. */
    pthread_mutex_t mu;
    uint64_t next, done;      /* the next request to serve; requests served */
    double start, shown;      /* when the requests began; the last progress line */
    int rc;                   /* the first error; no request starts after it */
    struct replay_busy busy;
    struct replay_lru lru;
    struct trace_json trace;  /* its own lock */
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
/* Seconds after the replay's start at which a request stamped t_ms is due
 * under --speed speed (> 0): its time since the first request's, divided
 * by speed. One stamped earlier than the first (the format allows it) is
 * due at once, never 2^64 ms later. */
double replay_due_s(uint64_t t_ms, uint64_t first_ms, double speed);

/* evict.c */
int replay_lru_init(struct replay_lru *l, uint32_t blocks);
void replay_lru_free(struct replay_lru *l);
/* Block b was used and is stored. */
void replay_lru_touch(struct replay_lru *l, uint32_t b);
/* Block b is not stored (the engine let it go, or the caller dropped it). */
void replay_lru_forget(struct replay_lru *l, uint32_t b);
/* The engine refused a put: drops up to need blocks from it, least recently
 * used first, never one a request being served uses (under x->mu). Returns
 * how many it dropped (0: none could go), or a negative error after its
 * message. */
int replay_evict(struct replay_ctx *x, uint32_t need);

/* trace_out.c */
void replay_trace_span(struct replay_ctx *x, const struct replay_worker *w, const char *name,
                       double t0, double t1, uint64_t req, uint32_t hit, uint32_t blocks);
int replay_trace_write(const struct replay_ctx *x, const char *path);

#endif
