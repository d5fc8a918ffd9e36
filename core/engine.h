/*
 * engine.h — the engine's hub (internal): every module's state in struct
 * kvt_engine, the lock, and the core layer's calls (page records, copies,
 * arenas, the page table). The layers above add their own headers:
 * tiers/tiers.h, residency/residency.h, api/api.h, each including the one
 * below, so a file sees the calls of its layer and of the layers below only
 * (tests/layering checks the includes as it checks the calls).
 *
 * Locking. One engine lock (e->lock) guards the engine and every page.
 *   Order: e->lock, then a back-end's own mutexes (device_host.c's d->mu,
 *   device_cuda.c's locks, the I/O back-ends' pools, the faulty back-ends'
 *   plans), never the other way:
 *   back-ends never call into the engine, and settling is lazy (kvt_settle
 *   polls fences) so the device never calls back. cfg.on_transfer and the
 *   policy are called under e->lock and must not call the engine (the lock
 *   is not recursive; KVT_DEBUG builds abort on a relock, see KVT_LOCK).
 *   e->lock is never held across a wait: callers queue copies, drop it
 *   (kvt_wait_on, kvt_wait_fence), take it again and settle.
 * Owned without the lock:
 *   - e->pipe (struct kvt_ssd_pipe) by the mover thread, with or without
 *     the lock; open and close touch it only while no mover runs. Others
 *     see the SSD pipeline only through e->ssd_tier (under the lock).
 *   - a page marked busy (get/put) or pinned (acquire/create): its slots do
 *     not move, so its bytes may be copied unlocked by that caller.
 *   - a job's DRAM slot, from take to finish (the page's xfer says so).
 *   - a kvt_get record (struct kvt_get_rec) off e->gets.free, by the call
 *     that took it, until it gives it back.
 * KVT_DEBUG builds assert both (KVT_ASSERT_LOCKED, KVT_ASSERT_MOVER).
 *
 * Files, by what they own (writes to a struct's fields are made by the
 * functions of its file; others call them):
 *   page.h/page.c   a page's flags, slot[] and xfer, every transition
 *   copy.c          e->copy: the HBM<->DRAM copies in flight, settle, waits
 *   hbm.c           room in HBM, write-back (e->hbm)
 *   dram.c          DRAM slots, victims, third copies, the spare slot
 *   ssd.c           e->ssd_tier: the SSD tier under the lock (queue, drops,
 *                   read errors, flush)
 *   ssd_pipe.c      e->pipe: the mover's SSD pipeline
 *   prefetch.c      bringing pages up ahead of use (e->pace)
 *   mover.c         the mover thread (e->mover)
 *   manager.c, buffers.c   the page API; engine.c open/close
 */
#ifndef KVT_ENGINE_H
#define KVT_ENGINE_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "include/kvtier.h"
#include "io/codec.h"
#include "io/io.h"
#include "policy/policy.h"
#include "devices/device.h"
#include "core/page.h"

struct kvt_store;  /* store/store.h: the engine holds its SSD store by the table */

#if KVT_DEBUG
/* Aborts with msg: a broken lock rule (invariants.c). */
_Noreturn void kvt_lock_abort(const char *msg);
#endif

/* ------------------------------------------------------------- arena */

/* Fixed page slots over one allocation; O(1) alloc and free through a stack
 * of free slot numbers; owner[] doubles as the allocated map (double free
 * and foreign slots are caught). */
struct kvt_arena {
    uint8_t *base;
    size_t page_bytes;
    uint32_t nslots;
    uint32_t nfree;
    uint32_t *free_stack;   /* nfree entries valid */
    uint32_t *owner;        /* slot -> page index, KVT_NONE when free */
};

int kvt_arena_init(struct kvt_arena *a, void *base, size_t page_bytes, uint32_t nslots,
                   uint64_t *meta);
void kvt_arena_fini(struct kvt_arena *a, uint64_t *meta);
/* Returns a free slot owned by page, or KVT_NONE when full. */
uint32_t kvt_arena_alloc(struct kvt_arena *a, uint32_t page);
/* 0, or -EINVAL for a slot that is out of range or not allocated. */
int kvt_arena_free(struct kvt_arena *a, uint32_t slot);
static inline void *kvt_arena_ptr(const struct kvt_arena *a, uint32_t slot)
{
    return a->base + (size_t)slot * a->page_bytes;
}

/* ------------------------------------------------------------- page table (page_table.c) */

/* The page table: records plus an open-addressing index by key (linear
 * probing, backward-shift deletion, no tombstones, load <= 1/2). */
struct kvt_ptable {
    struct kvt_page *pages;
    uint32_t cap;               /* records allocated */
    uint32_t used;              /* records ever handed out (high-water mark) */
    uint32_t live;              /* records in use now (keys, reservations, dropped-but-busy) */
    uint32_t free_head;         /* free records chained through slot[0] */
    uint32_t *index;            /* page numbers, KVT_NONE = empty */
    uint32_t index_mask;
    uint32_t count;             /* keys in the index */
    uint32_t births;            /* records handed out, ever (kvt_page.birth; wraps) */
    uint64_t *meta;             /* counter for kvt_stats.meta_bytes */
};

int kvt_ptable_init(struct kvt_ptable *t, uint32_t expect, uint64_t *meta);
void kvt_ptable_fini(struct kvt_ptable *t);
/* A fresh record (zeroed, slots KVT_NONE), or KVT_NONE when out of memory. */
uint32_t kvt_ptable_new(struct kvt_ptable *t);
void kvt_ptable_delete(struct kvt_ptable *t, uint32_t pg);
uint32_t kvt_ptable_find(const struct kvt_ptable *t, const kvt_key *k);
/* Indexes record pg under its key. -EEXIST if the key is there, -ENOMEM. */
int kvt_ptable_insert(struct kvt_ptable *t, uint32_t pg);
void kvt_ptable_remove(struct kvt_ptable *t, uint32_t pg);
static inline struct kvt_page *kvt_pg(const struct kvt_ptable *t, uint32_t pg)
{
    return &t->pages[pg];
}

/* ------------------------------------------------------------- tickets */

struct kvt_ticket_rec {
    uint32_t gen;           /* ticket id = gen << 32 | (slot + 1) */
    uint32_t live;
    uint32_t n;
    uint32_t *pages;        /* the pinned pages, n entries */
    uint64_t fence;         /* H2D fence covering every load of the ticket */
};

/* ------------------------------------------------------------- copies (copy.c) */

/* Device copies in flight of one direction, in fence order (a ring). */
struct kvt_inflight {
    uint32_t *page;
    uint64_t *fence;
    uint64_t *t_ns;      /* when queued (kept only with cfg.on_transfer) */
    uint32_t cap, head, len;
};

/* What a call that found no room waits for before it tries again. */
enum kvt_wait_kind { KVT_WAIT_NONE = 0, KVT_WAIT_D2H, KVT_WAIT_H2D, KVT_WAIT_SSD };
struct kvt_wait {
    enum kvt_wait_kind kind;
    uint64_t v;             /* the fence, or the SSD progress count seen */
};

struct kvt_copies {
    struct kvt_inflight ring[KVT_DIRS];
    kvt_stats st;                   /* HBM link bytes, device errors, stalls */
};

/* ------------------------------------------------------------- HBM, DRAM */

/* The device tier. Its back-end also allocates the DRAM arena (pinned host
 * memory) and runs the copies between the two (copy.c). */
struct kvt_hbm {
    const struct kvt_device_ops *dev;
    void *dev_priv;
    struct kvt_arena arena;         /* base and slots fixed at open */
    size_t alloc_bytes;
    uint32_t watermark;             /* slots the mover keeps free or clean (fixed at open) */
    uint32_t room_waiters;          /* callers waiting for HBM slots being freed for them */
};

#define KVT_AHEAD_COUNTS 4
struct kvt_dram {
    struct kvt_arena arena;         /* one spare slot beyond the configured size */
    size_t alloc_bytes;
    /* A flush is bringing dirty HBM pages down (kvt_dram_flushing): room in
     * DRAM comes from writing to SSD the DRAM copies HBM also holds, not
     * from dropping them, which would make those pages dirty again (more
     * dirty pages than DRAM slots then never went down). */
    bool flushing;
    /* Write-ahead (kvt_dram_write_ahead): the next arena slot to look at,
     * the slots looked at since a page was a candidate, the counts at that
     * sweep's start, and those of the last sweep that found none (no wake
     * until they change: kvt_dram_ahead_due). */
    uint32_t ahead_at, ahead_seen;
    uint64_t ahead_start[KVT_AHEAD_COUNTS], ahead_none[KVT_AHEAD_COUNTS];
    bool ahead_off;                 /* none (the opener asked so), or no more: one could
                                       not be queued (no blocks for a segment) */
};

/* ------------------------------------------------------------- SSD (ssd.c) */

/* The stored form of a page on SSD, per slot (the index holds the same;
 * kept in memory so a read needs no index lookup). */
struct kvt_ssd_meta {
    uint64_t generation;    /* with the key and fingerprint, what the crc binds */
    uint32_t stored_len;
    uint32_t crc;           /* as struct kvt_ssd_entry's: bound to the key */
    uint8_t codec;
};

/* A page waiting for the mover: a read into its DRAM slot (or a transient
 * buffer), or a write of its DRAM copy to `slot`, an SSD slot allocated for
 * it; evict: the DRAM copy goes once the write is committed. */
struct kvt_ssd_req {
    uint32_t pg;
    uint32_t slot;          /* writes: the new slot */
    bool write, evict;
    void *buf;              /* a transient read: the caller's buffer (else NULL) */
    uint8_t tries;          /* tries already made (a caller's own read that failed) */
    bool written;           /* a write its caller made already (kvt_ssd_queue_written):
                               the pipe only commits it, with this crc and generation */
    uint32_t crc;
    uint64_t generation;
};

/* A read of an SSD page into a buffer of a kvt_get, when no DRAM slot can
 * be had: the page's state does not change, the caller copies out. */
struct kvt_transient {
    uint32_t pg;
    void *buf;
    int res;                /* 1 while pending, then 0 or the error */
    bool kept;              /* a failed read that left the page on SSD (never sent, ...) */
};

struct kvt_ssd_del {
    kvt_key key;
    uint32_t slot;
};

/* The SSD tier's state under the lock (ssd.c; the pipe finishes into it). */
struct kvt_ssd_tier {
    struct kvt_ssd_meta *meta;      /* per SSD slot */
    struct kvt_ssd_req *queue;      /* requests waiting for the pipe */
    uint32_t queued, queue_cap;
    struct kvt_ssd_del *dels;       /* index deletions waiting for the mover */
    uint32_t ndels, dels_cap;
    struct kvt_transient *trans;    /* transient reads in progress */
    uint32_t ntrans, trans_cap;
    uint64_t busy;                  /* requests queued or in the pipe */
    uint64_t progress;              /* pipe steps that finished jobs or freed slots:
                                       what SSD waiters watch */
    uint32_t flushes;               /* flushes between kvt_ssd_flush_begin and _end */
    uint64_t takes;                 /* times the pipe took from the queue */
    uint32_t take_waiters;          /* flushes waiting for the next take (flush_queue) */
    int read_err;                   /* the last read error that kept its page (PG_READ_ERR) */
    int write_err;                  /* the last write error, for kvt_flush's answer */
    int evict_err;                  /* an eviction's write failed: the next room maker says so */
    pthread_cond_t cv;              /* broadcast when progress moves */
    kvt_stats st;                   /* ssd.c's counts (errors queueing writes) */
};

/* I/O contexts that kvt_get callers read SSD pages with, in their own
 * threads (ssd_caller.c); under the lock. */
#define KVT_CALLER_IOS 8
struct kvt_callers {
    void *idle[KVT_CALLER_IOS];     /* open and free */
    uint32_t nidle;
    uint32_t nopen;                 /* open in all (idle or in a caller's hands) */
    struct kvt_io_params params;    /* the mover's, with owner_reaps and no byte cap */
    size_t read_bytes;              /* a caller's reads keep this much on the disk at most
                                       (the mover's cap) */
    uint64_t reading;               /* pages kvt_get callers are reading themselves:
                                       SSD waiters wait for these too (ssd.c) */
    kvt_stats st;                   /* the callers' reads: bytes up, errors */
};

/* A page a kvt_get reads itself (ssd_caller.c): the caller fills pg and
 * dst; the rest is kvt_ssd_caller_read's. */
struct kvt_caller_read {
    uint32_t pg;
    void *dst;              /* 4 KiB-aligned host memory of page_bytes */
    size_t from;            /* the caller's, untouched */
    int res;                /* KVT_CALLER_SKIP: not read here (the mover's, as before);
                               0: read and verified into dst; KVT_ECORRUPT: its copy on
                               SSD failed the checksum, the page is gone; another error:
                               the page is as it was, one try made (kvt_ssd_caller_retry) */
    uint32_t slot, crc;
    int fd;
    uint64_t off, generation;
    kvt_key key;
    uint32_t pending;       /* pieces not back yet */
};
#define KVT_CALLER_SKIP 1

/* A page a kvt_put writes to SSD itself as it copies it into DRAM
 * (ssd_caller.c): the caller fills pg and buf; the rest is
 * kvt_ssd_caller_write's. */
struct kvt_caller_write {
    uint32_t pg;
    void *buf;              /* the page's DRAM slot, which the put fills */
    int res;                /* KVT_CALLER_SKIP: not written here (the mover writes the page
                               down later, as before); 0: written whole to slot, which the
                               caller hands on (kvt_ssd_queue_written) or gives back
                               (kvt_ssd_caller_write_cancel) */
    uint32_t slot;
    int fd;
    uint64_t off, generation;
    uint32_t pending;       /* pieces sent and not back yet */
};

/* kvt_ssd_caller_read's scratch for n pages, each n x kvt_ssd_pieces(e,
 * page_bytes) long: the caller's, so that a read allocates nothing. */
struct kvt_caller_scratch {
    struct kvt_io_req *reqs;
    struct kvt_io_req **rp;
    uint32_t *crc;
};

/* What one kvt_get chunk works in (buffers.c), kept on e->gets.free between
 * calls: a get allocates only when more of them run at once, or with more
 * pages, than any before. */
struct kvt_get_rec;
/* buffers.c's records: the free kvt_get records, under the lock. */
struct kvt_gets {
    struct kvt_get_rec *free;
    kvt_stats st;                   /* put/get bytes, hits, misses, evictions */
};

/* ------------------------------------------------------------- SSD pipe (ssd_pipe.c) */

struct kvt_ssd_job {
    uint32_t pg;
    uint32_t slot;          /* the SSD slot read, or the new slot written */
    bool write, evict;
    int res;
    uint32_t stored_len, crc;
    uint64_t generation;    /* the page's write number, bound into crc */
    uint8_t codec;
    bool put_crc;           /* a write of a put's page: page_crc is its bytes' CRC32C */
    bool put_crc_used;      /* job_crc took crc from it */
    uint32_t page_crc;      /* (seed 0), taken by the put (kvt_page.crc) */
    void *buf;              /* what the I/O moves: the DRAM slot or a bounce buffer */
    void *dram;             /* the page's DRAM slot */
    int bounce;             /* bounce buffer index, or -1 */
    kvt_key key;
    int fd;
    uint64_t off;
    uint32_t pieces;        /* I/O requests it moves in (ssd_pipe.c: PIECE_BYTES) */
    uint32_t pending;       /* of them, submitted and not yet reaped */
    uint64_t t_ns;          /* when taken into the pipeline (with cfg.on_transfer) */
    uint64_t codec_ns;      /* its encode or decode took this long (added to the pipe's
                               count when it finishes, under the lock) */
    uint64_t codec_cpu_ns;  /* of that, CPU time (the decoding thread's clock) */
    uint64_t crc_cpu_ns;    /* CPU time its checksums took (thread clock) */
    bool transient;         /* read into a caller's buffer, not a DRAM slot */
    uint8_t tries;          /* submissions made of this job (ssd_pipe.c: SSD_TRIES) */
    bool unsent;            /* res is the back-end's refusal: the disk never saw it */
    bool written;           /* its caller wrote it (kvt_ssd_req.written): commit only */
};

/* The mover's SSD pipeline: owned by the mover thread (see Locking). Jobs go
 * free -> taken -> submitted -> (writes) uncommitted -> finished -> free;
 * a job that failed and may be tried again goes submitted -> retry ->
 * submitted. */
struct kvt_ssd_pipe {
    uint32_t max_jobs;              /* jobs in the pipeline at most */
    struct kvt_ssd_job *jobs;       /* max_jobs */
    size_t piece_bytes;             /* a page moves in I/O requests of this many bytes */
    uint32_t max_pieces;            /* I/O requests of one page at most */
    struct kvt_io_req *reqs;        /* max_jobs x max_pieces: job j's are from j x max_pieces */
    uint32_t *piece_crc;            /* the same shape: CRC32C of each piece read or written */
    uint8_t *bounce;                /* max_jobs buffers of page_bytes, one per job */
    uint32_t *job_free, njob_free;  /* free job numbers */
    uint32_t *uncommitted, nuncommitted; /* written, waiting for the group commit */
    uint32_t *finished, nfinished;  /* done (read verified / write committed) */
    struct kvt_slot_order *order;   /* max_jobs: scratch of the write slots' ordering */
    uint32_t *order_slot;           /* max_jobs: its slots, sorted */
    uint32_t inflight;              /* I/O requests submitted and not yet reaped */
    uint32_t *retry, nretry;        /* failed jobs to submit again on the next step */
    uint64_t retried_errors;        /* errors seen by jobs then retried, not yet counted
                                       in e->pipe.st.errors_io */
    struct kvt_codec *codec;
    /* With a codec and more than one CPU: the decode team (ssd_team.c) and
     * its helper's own codec (a codec keeps scratch state); else NULL. */
    struct kvt_team *team;
    struct kvt_codec *codec_helper;
    uint32_t decoders;              /* threads that decode reads: 1, or 2 with the team */
    uint32_t *verify, nverify;      /* reads back whole, to verify and decode this step */
    uint64_t generation;            /* of the next SSD write; under the lock (a caller's
                                       own write takes one too: kvt_ssd_generation_take) */
    uint64_t ssd_mark_ns;           /* last time the pipeline's work was counted */
    uint64_t ssd_ns_per_page;       /* smoothed busy time per finished SSD job; 0 = unknown */
    kvt_stats st;                   /* SSD link bytes and errors */
    uint64_t disk_read, disk_written; /* bytes the disk moved for finished jobs: the stored
                                       form padded to 4 KiB, what a codec saves (st counts
                                       page bytes) */
    uint64_t codec_ns;              /* time finished jobs spent encoding and decoding */
    uint64_t codec_cpu_ns;          /* of that, CPU time (not waits for a core) */
    uint64_t crc_cpu_ns;            /* CPU time finished jobs' checksums took */
};

/* ------------------------------------------------------------- mover, pace */

struct kvt_mover {
    pthread_t thread;
    pthread_cond_t cv;
    bool started, stop, kick;
};

/* Puts waiting for other calls to let go (an HBM or DRAM slot, a key's page
 * they read) wait here (room.c, kvt_room_wait_let_go) until page.c's
 * e->pages.let_go moves: whenever a page stops being busy, pinned or in
 * transfer, or a slot is freed. cv runs on CLOCK_MONOTONIC. */
struct kvt_slot_wait {              /* room.c's */
    pthread_cond_t cv;
    uint32_t waiters;
    kvt_stats st;                   /* pages evicted for room */
};

/* How long the caller computes between acquires, and how long the disk takes
 * per page, both measured as they happen (prefetch.c sizes its depth by them). */
struct kvt_pace {                   /* the caller's compute, as manager.c sees it */
    uint64_t acquired_ns;           /* when the first acquire since the last advance returned; 0 = none */
    uint64_t compute_ns;            /* smoothed gap from an acquire to the next advance */
};

struct kvt_prefetch {               /* prefetch.c's */
    kvt_stats st;                   /* prefetch counts */
};

/* ------------------------------------------------------------- engine */

/* Whether kvt_put should take its pages' checksum as it copies them in
 * (kvt_page.crc): it pays when the pages then go down to SSD, whose
 * write-back uses it instead of reading them again, and is wasted on pages
 * that leave DRAM unwritten, as most of a prefix cache's do. Counted per
 * put page with the checksum, once its fate is known, halved every
 * KVT_PUT_CRC_WINDOW outcomes; the puts take it while used >= wasted
 * (from 0 and 0: an engine starts by taking it), and otherwise one page in
 * KVT_PUT_CRC_PROBE, so that the odds still learn when the workload turns.
 * Under the lock. */
#define KVT_PUT_CRC_WINDOW 1024
#define KVT_PUT_CRC_PROBE 16
struct kvt_put_crc_odds {
    uint32_t used;    /* a write-back stored it */
    uint32_t wasted;  /* the page left DRAM, or went, unwritten */
    uint32_t probe;   /* pages put while it did not pay */
};

/* What the page transitions keep in step with the flags (page.c's, read by
 * the tiers): counters, and the list of redundant DRAM copies. */
struct kvt_pages {
    kvt_stats st;                   /* resident and pinned pages, prefetches wasted */
    uint64_t dirty_hbm;             /* dirty pages in HBM */
    uint32_t second_copies;         /* pages valid on SSD and in DRAM or HBM too: none,
                                       and a full SSD has no copy to give up */
    /* Pages whose DRAM copy is redundant (valid in HBM too), oldest first:
     * the DRAM copies that can be given up for free. A list kept as flags
     * change, not a walk of the DRAM candidates, because in a full engine
     * every eviction asks for one and the DRAM-only pages would be walked
     * past each time. */
    uint32_t red_head, red_tail;
    uint64_t let_go;                /* moves when a slot may be had that could not before
                                       (page.c, page_let_go) */
};

/* ------------------------------------------------------------- page.c (first) */

/* The page state's empty lists (engine_alloc). */
void kvt_pages_init(kvt_engine *e);

/* What the lower layers tell the upper ones, registered at open by the
 * API layer (engine.c) before anything else runs: the core and the tiers
 * never name a file above them (tests/layering/rules.txt). Each is called
 * under the engine lock. */
struct kvt_up_calls {
    /* The page core forgets pg's SSD slot (its record goes, or a read that
     * kept the slot ends): the SSD tier queues the slot's deletion. */
    void (*ssd_forget)(kvt_engine *e, uint32_t pg);
    /* Copies were settled and DRAM has no free slot: the DRAM tier gives
     * back its spare slot if a copy can go for free. */
    void (*dram_settled)(kvt_engine *e);
    /* Whether SSD work is queued or on the disk, which a wait for SSD
     * progress waits on. */
    bool (*ssd_busy)(const kvt_engine *e);
    /* The tiers queued work for the mover thread. */
    void (*wake_mover)(kvt_engine *e);
    /* The page core freed a slot, or a page stopped being busy, pinned or
     * in transfer, while puts wait for a slot: they look again (room.c). */
    void (*slot_let_go)(kvt_engine *e);
};

struct kvt_engine {
    pthread_mutex_t lock;
    size_t page_bytes;
    kvt_config cfg;                 /* strings point into names below */
    char *ssd_dir, *policy_name;
    int failed;                     /* 0, or the error that failed the engine */
    /* Counters: each module keeps its own kvt_stats beside its state
     * (e->copy.st, e->pipe.st, ...); kvt_engine_stats sums them. */
    kvt_stats st_pins;              /* manager.c: acquire's hits and misses */
    struct kvt_pages pages;         /* page.c: counters, the redundant DRAM copies */
    uint64_t meta_bytes;

    /* SSD I/O back-end (NULL without an SSD tier); the pipe's */
    const struct kvt_io_ops *io;
    void *io_priv;
    char io_note[192];
    struct kvt_callers callers;     /* more contexts of io's, for kvt_get's own reads */

    struct kvt_ptable pt;

    const struct kvt_policy_ops *pol;
    void *pol_priv;
    uint32_t pol_cap;               /* page numbers below this the policy has room for */
    kvt_schedule sched;             /* last schedule (ids owned) */

    struct kvt_ticket_rec *tickets;
    uint32_t n_tickets;

    struct kvt_hbm hbm;
    struct kvt_dram dram;
    struct kvt_copies copy;
    struct kvt_store *ssd;          /* the SSD store, through its table (store/store.h): NULL
                                       without an SSD tier */
    struct kvt_ssd_tier ssd_tier;
    struct kvt_ssd_pipe pipe;
    struct kvt_mover mover;
    struct kvt_slot_wait slots;
    struct kvt_pace pace;
    struct kvt_prefetch prefetch;
    struct kvt_put_crc_odds put_crc;
    struct kvt_up_calls up;         /* set once at open (engine.c), then read only */
    struct kvt_gets gets;           /* buffers.c's free kvt_get records */
    struct kvt_remote *remote;      /* the shared tier (remote.c); NULL without one */
    char *remote_url, *remote_prefix, *remote_auth_file; /* cfg's strings, copied */
};

/* The arena of tier (KVT_TIER_HBM or KVT_TIER_DRAM), for code that takes
 * the tier as a value. */
static inline struct kvt_arena *kvt_arena_of(kvt_engine *e, int tier)
{
    return tier == KVT_TIER_HBM ? &e->hbm.arena : &e->dram.arena;
}

/* ------------------------------------------------------------- lock checks */

/* Takes the engine lock. KVT_DEBUG builds use an error-checking mutex: a
 * thread that takes it twice (a callback calling the engine) aborts here
 * instead of hanging. */
static inline void kvt_lock(kvt_engine *e)
{
    int r = pthread_mutex_lock(&e->lock);
#if KVT_DEBUG
    if (r == EDEADLK)
        kvt_lock_abort("the engine was called back under its own lock (from on_transfer or "
                       "a policy?)");
#endif
    (void)r;
}

static inline void kvt_unlock(kvt_engine *e)
{
    pthread_mutex_unlock(&e->lock);
}

/* The calling thread is e's mover from now on (mover.c, at its start);
 * whether the calling thread is e's mover (KVT_ASSERT_MOVER). Kept here,
 * below the layers that assert it (invariants.c). */
void kvt_mover_mark_self(const kvt_engine *e);
bool kvt_mover_is_self(const kvt_engine *e);

#if KVT_DEBUG
void kvt_assert_locked(kvt_engine *e, const char *fn);
void kvt_assert_mover(kvt_engine *e, const char *fn);
#define KVT_ASSERT_LOCKED(e) kvt_assert_locked((e), __func__)
#define KVT_ASSERT_MOVER(e) kvt_assert_mover((e), __func__)
#else
#define KVT_ASSERT_LOCKED(e) ((void)(e))
#define KVT_ASSERT_MOVER(e) ((void)(e))
#endif

/* Every API entry: a valid engine, a clean error slot, the lock, settled. */
#define KVT_ENTER(e)                                                            \
    do {                                                                        \
        if (!(e))                                                               \
            return kvt_fail(-EINVAL, "engine is NULL");                         \
        kvt_clear_error();                                                      \
        kvt_lock(e);                                                            \
        kvt_settle(e);                                                          \
        kvt_check_invariants(e);                                                \
    } while (0)

/* ------------------------------------------------------------- engine.c */

/* Back-ends handed in by the opener instead of those the config names: how
 * the test-support library opens an engine over its fault-injecting device
 * and I/O (lab/hooks.c kvt_open_with_hooks); the product never names them.
 * NULL ops: the config's. The args are the back-ends' own (their params'
 * faulty fields) and must outlive the engine. */
struct kvt_open_with {
    const struct kvt_device_ops *device;
    void *device_arg;
    const struct kvt_io_ops *io;
    void *io_arg;
    struct kvt_syncer sync;         /* the SSD store's and index's syncs */
    const struct kvt_kv_ops *remote_kv; /* the shared tier's transport (store/remote_kv.h) */
    void *remote_kv_arg;
    bool no_write_ahead;            /* no page goes down ahead (kvt_dram_write_ahead, nor a
                                       put's own: kvt_ssd_caller_writes): tests that look at
                                       a page between its put and a flush */
};
/* 0, or the error that failed the engine, said again (kvt_last_error). */
static inline int kvt_check_failed(kvt_engine *e)
{
    if (!e->failed)
        return 0;
    return kvt_fail(e->failed, "the engine failed earlier (%s); close it",
                    kvt_strerror(e->failed));
}
/* With persist and an SSD tier, the SSD is the store of record: the
 * capacity is what it holds durably, flush and close make every page held
 * durable (docs/design.md#when-the-engine-is-full). */
static inline bool kvt_persisted(const kvt_engine *e)
{
    return e->ssd && e->cfg.persist;
}

/* ------------------------------------------------------------- page.c (page.h) */

/* A fresh record (policy told of the new capacity), or KVT_NONE. */
uint32_t kvt_page_new(kvt_engine *e);
/* A new record's key, before it goes into the index. */
void kvt_page_key(kvt_engine *e, uint32_t pg, kvt_key key);
/* The page is now findable under its key: tells the policy. */
void kvt_page_indexed(kvt_engine *e, uint32_t pg);
/* Out of the index, every copy invalid; the record goes when unused. */
void kvt_page_destroy(kvt_engine *e, uint32_t pg);
/* A put's reservation given up: the record goes once unused. */
void kvt_page_abandon(kvt_engine *e, uint32_t pg);
/* Policy candidate sets from the flags (touch: a use); kvt_page_trim frees
 * unused slots and a dropped record; settle is both. */
void kvt_page_sync(kvt_engine *e, uint32_t pg, bool touch);
void kvt_page_trim(kvt_engine *e, uint32_t pg);
void kvt_page_settle(kvt_engine *e, uint32_t pg);
/* A slot of tier (HBM or DRAM) for pg from the free ones, stored; KVT_NONE
 * when none is free. */
uint32_t kvt_page_take_slot(kvt_engine *e, uint32_t pg, int tier);
/* A page kvt_create made: not written down until its release (PG_CREATED). */
void kvt_page_created(kvt_engine *e, uint32_t pg);
void kvt_page_now_valid(kvt_engine *e, uint32_t pg, int tier);
/* The copy of tier is given up (another tier holds the page, or it goes). */
void kvt_page_drop_copy(kvt_engine *e, uint32_t pg, int tier);
/* A dirty release: HBM was written, lower copies are stale. */
void kvt_page_rewritten(kvt_engine *e, uint32_t pg);
/* A put's page: crc is the CRC32C (seed 0) of the bytes it copied in
 * (kvt_page.crc). */
void kvt_page_put_crc(kvt_engine *e, uint32_t pg, uint32_t crc);
/* A write-back stored the put's checksum of pg (kvt_put_crc_odds.used). */
void kvt_page_put_crc_used(kvt_engine *e, uint32_t pg);
/* Whether the next page put should take its checksum (kvt_put_crc_odds). */
bool kvt_put_crc_take(kvt_engine *e);
void kvt_page_pin(kvt_engine *e, uint32_t pg);
void kvt_page_unpin(kvt_engine *e, uint32_t pg);
/* A release's check, pin by pin (a key given twice needs two pins): take
 * drops one of pg's pins with no other effect, false if it has none; give
 * puts one back. Every taken pin is given back before the release proper. */
bool kvt_page_pin_take(kvt_engine *e, uint32_t pg);
void kvt_page_pin_give(kvt_engine *e, uint32_t pg);
/* A get or put copies the page's bytes with the lock dropped: while busy,
 * none of its slots is freed or reused (kvt_page_trim). begin is false when
 * the page has as many users as busy can count; end does not trim (the
 * caller syncs and trims when it is done with the page). */
bool kvt_page_busy_begin(kvt_engine *e, uint32_t pg);
void kvt_page_busy_end(kvt_engine *e, uint32_t pg);
/* Transfers: begin marks the page (prefetch: PG_PREFETCHED); copy_queued
 * records the device fence (evict: the HBM copy goes when it lands); cancel
 * undoes a begin that was never queued; end clears xfer and says whether a
 * rewrite made the result stale. up_done/down_done apply a device copy's
 * result and say whether the target turned valid. */
void kvt_page_xfer_begin(kvt_engine *e, uint32_t pg, enum kvt_xfer x, bool prefetch);
void kvt_page_copy_queued(kvt_engine *e, uint32_t pg, enum kvt_dir d, uint64_t fence, bool evict);
void kvt_page_xfer_cancel(kvt_engine *e, uint32_t pg);
bool kvt_page_xfer_end(kvt_engine *e, uint32_t pg);
bool kvt_page_up_done(kvt_engine *e, uint32_t pg, bool ok);
bool kvt_page_down_done(kvt_engine *e, uint32_t pg, bool ok);
/* SSD reads: the DRAM copy is current; a read failed but the copy stays
 * (PG_READ_ERR), and that was reported; the only copy is unreadable. */
void kvt_page_read_ok(kvt_engine *e, uint32_t pg);
/* Any SSD read's end, after its result: a record dropped during the read
 * lets go of the SSD slot kvt_page_destroy left it. */
void kvt_page_read_end(kvt_engine *e, uint32_t pg);
void kvt_page_read_failed(kvt_engine *e, uint32_t pg);
void kvt_page_read_failure_told(kvt_engine *e, uint32_t pg);
void kvt_page_lost(kvt_engine *e, uint32_t pg, bool io);

/* ------------------------------------------------------------- copy.c */

/* Reports a completed batch to cfg.on_transfer, if set. */
void kvt_report(kvt_engine *e, int kind, uint32_t pages, uint64_t start_ns, uint64_t end_ns);
/* Retires the device copies that completed (and gives the spare DRAM slot back). */
void kvt_settle(kvt_engine *e);
/* Claims pg for a copy up: an HBM slot taken, xfer UP, *c filled. false
 * when HBM has no free slot. */
bool kvt_copy_claim_up(kvt_engine *e, uint32_t pg, bool prefetch, struct kvt_copy *c);
/* Queues claimed copies as one batch. On error the pages are as before. */
int kvt_copy_submit_up(kvt_engine *e, const uint32_t *pages, const struct kvt_copy *c, uint32_t k);
int kvt_copy_submit_down(kvt_engine *e, const uint32_t *pages, struct kvt_copy *c, uint32_t n,
                         bool evict);
/* The newest fence queued in dir (0 when none). */
uint64_t kvt_copy_last(const kvt_engine *e, enum kvt_dir dir);
/* Sets *w to wait for the newest device copy in flight (up first); false
 * when none is. */
bool kvt_copy_wait(kvt_engine *e, struct kvt_wait *w);
/* Releases the lock while waiting for fence f of dir; adds to stall_ns when
 * stall is set. Returns the fence's status. */
int kvt_wait_fence(kvt_engine *e, enum kvt_dir dir, uint64_t f, bool stall);
/* Waits (unlocked) for w; stall adds the time to stall_ns. */
int kvt_wait_on(kvt_engine *e, const struct kvt_wait *w, bool stall);
/* Waits for every copy in flight (close). */
void kvt_copy_drain(kvt_engine *e);
int kvt_copy_open(kvt_engine *e);
void kvt_copy_close(kvt_engine *e);

#if KVT_DEBUG
void kvt_check_invariants(kvt_engine *e);
#else
static inline void kvt_check_invariants(kvt_engine *e) { (void)e; }
#endif

#endif /* KVT_ENGINE_H */
