/*
 * tiers.h — the tier manager's internal types (not installed).
 *
 * One engine lock (e->lock) guards every structure below. It is never held
 * across a wait for a copy: callers queue copies under the lock, drop it,
 * wait on the device fence, take it again and settle what completed.
 *
 * Page states. A page is one record (struct kvt_page) and up to one copy per
 * tier. For tier t: slot[t] != KVT_NONE means a slot is allocated to it;
 * PG_VALID_<t> means the slot holds the page's current bytes. A slot that is
 * allocated but not valid is the target of a copy in flight (xfer), a put in
 * progress, or a stale copy still being read (busy) and freed by page_trim().
 *
 * Caching is inclusive downwards: a page promoted to HBM keeps its DRAM copy.
 * With an SSD tier and a policy that knows next uses, that copy (when SSD
 * backs the page too) is the first to go when DRAM needs room, so that DRAM
 * holds other pages than HBM (kvt_dram_drop_third_copy).
 * "Dirty" is derived, not stored: the HBM copy is valid and no lower copy is.
 * A dirty release invalidates the lower copies at once, so there is never a
 * lower copy that is valid but older than HBM.
 */
#ifndef KVT_TIERS_H
#define KVT_TIERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/base.h"
#include "include/kvtier.h"
#include "io/codec.h"
#include "io/io.h"
#include "policy/policy.h"
#include "tiers/device.h"
#include "tiers/ssd_store.h"

#define KVT_ARENAS 2 /* HBM and DRAM hold slots in memory; SSD has its own store */

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

/* ------------------------------------------------------------- pages */

enum {
    PG_VALID_HBM = 1u << 0,
    PG_VALID_DRAM = 1u << 1,
    PG_VALID_SSD = 1u << 2,
    PG_LISTED_HBM = 1u << 3,  /* the policy holds it as an HBM candidate */
    PG_LISTED_DRAM = 1u << 4, /* the policy holds it as a DRAM candidate */
    PG_STALE = 1u << 5,       /* a dirty release overtook the D2H copy in flight */
    PG_EVICTING = 1u << 6,    /* the D2H in flight frees the HBM slot when done */
    PG_ZOMBIE = 1u << 7,      /* dropped while busy; freed when the last user leaves */
    PG_HASHED = 1u << 8,      /* in the key index */
    PG_LOST = 1u << 9,        /* its only copy failed to read: checksum (or I/O, with LOST_IO) */
    PG_LOST_IO = 1u << 10,
    PG_LISTED_SSD = 1u << 11, /* the policy holds it as an SSD candidate (for prefetch) */
    PG_PREFETCHED = 1u << 12, /* brought into HBM by a prefetch and not acquired since */
    PG_READ_ERR = 1u << 13,   /* its last SSD read failed with the file unreadable, not the
                                 data bad (permissions, resources): the copy stays; the next
                                 load reports ssd_read_err once, later ones try again */
};

enum kvt_xfer {
    XFER_NONE = 0,
    XFER_UP = 1,        /* DRAM -> HBM (device) */
    XFER_DOWN = 2,      /* HBM -> DRAM (device) */
    XFER_SSD_READ = 3,  /* SSD -> DRAM slot (mover) */
    XFER_SSD_WRITE = 4, /* DRAM slot -> a new SSD slot (mover) */
};

/* One page record: 56 bytes. Records live in one array indexed by a 32-bit
 * page number; pointers into it are valid only under the lock and until the
 * next record allocation (the array may move). */
struct kvt_page {
    kvt_key key;
    uint32_t slot[KVT_ARENAS];  /* HBM, DRAM; KVT_NONE when none */
    uint32_t pins;              /* engine pins (acquire/create) */
    uint16_t flags;
    uint8_t xfer;               /* enum kvt_xfer in flight */
    uint8_t busy;               /* get/put copies in progress */
    uint64_t fence;             /* device fence of xfer */
    uint32_t red_prev, red_next; /* list of redundant DRAM copies (see e->red_head) */
    uint32_t ssd_slot;          /* the slot the committed index names, or KVT_NONE;
                                   PG_VALID_SSD says whether its bytes are current */
};

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

/* ------------------------------------------------------------- in flight */

/* Device copies in flight of one direction, in fence order (a ring). */
struct kvt_inflight {
    uint32_t *page;
    uint64_t *fence;
    uint64_t *t_ns;      /* when queued (kept only with cfg.on_transfer) */
    uint32_t cap, head, len;
};

/* ------------------------------------------------------------- waits */

/* What a call that found no room waits for before it tries again. */
enum kvt_wait_kind { KVT_WAIT_NONE = 0, KVT_WAIT_D2H, KVT_WAIT_H2D, KVT_WAIT_SSD };
struct kvt_wait {
    enum kvt_wait_kind kind;
    uint64_t v;             /* the fence, or the SSD round count seen */
};

/* ------------------------------------------------------------- SSD jobs */

/* The stored form of a page on SSD, per slot (the index holds the same;
 * kept in memory so a read needs no index lookup). */
struct kvt_ssd_meta {
    uint64_t generation;    /* with the key and fingerprint, what the crc binds */
    uint32_t stored_len;
    uint32_t crc;           /* as struct kvt_ssd_entry's: bound to the key */
    uint8_t codec;
};

struct kvt_ssd_job {
    uint32_t pg;
    uint32_t slot;          /* the SSD slot read, or the new slot written */
    bool write, evict;
    int res;
    uint32_t stored_len, crc;
    uint64_t generation;    /* the page's write number, bound into crc */
    uint8_t codec;
    void *buf;              /* what the I/O moves: the DRAM slot or a bounce buffer */
    void *dram;             /* the page's DRAM slot */
    int bounce;             /* bounce buffer index, or -1 */
    kvt_key key;
    int fd;
    uint64_t off;
    bool submitted;         /* in the I/O back-end now */
    uint64_t t_ns;          /* when taken into the pipeline (with cfg.on_transfer) */
    bool transient;         /* read into a caller's buffer, not a DRAM slot */
};

/* A read of an SSD page into a buffer of a kvt_get, when no DRAM slot can
 * be had: the page's state does not change, the caller copies out. */
struct kvt_transient {
    uint32_t pg;
    void *buf;
    int res;                /* 1 while pending, then 0 or the error */
};

struct kvt_ssd_del {
    kvt_key key;
    uint32_t slot;
};

/* ------------------------------------------------------------- tickets */

struct kvt_ticket_rec {
    uint32_t gen;           /* ticket id = gen << 32 | (slot + 1) */
    uint32_t live;
    uint32_t n;
    uint32_t *pages;        /* the pinned pages, n entries */
    uint64_t fence;         /* H2D fence covering every load of the ticket */
};

/* ------------------------------------------------------------- engine */

struct kvt_engine {
    pthread_mutex_t lock;
    size_t page_bytes;
    kvt_config cfg;                 /* strings point into names below */
    char *ssd_dir, *policy_name;

    const struct kvt_device_ops *dev;
    void *dev_priv;
    void *hbm_base, *dram_base;
    size_t hbm_alloc_bytes, dram_alloc_bytes;
    struct kvt_arena arena[KVT_ARENAS];
    struct kvt_ptable pt;
    struct kvt_inflight inflight[KVT_DIRS];

    const struct kvt_policy_ops *pol;
    void *pol_priv;
    kvt_schedule sched;             /* last schedule (ids owned) */

    struct kvt_ticket_rec *tickets;
    uint32_t n_tickets;

    int failed;                     /* 0, or the error that failed the engine */
    kvt_stats st;                   /* counters (under lock) */
    uint64_t meta_bytes;
    uint64_t hbm_dirty;             /* dirty pages in HBM */
    /* Pages whose DRAM copy is redundant (valid in HBM or on SSD too), oldest
     * first: the DRAM copies that can be given up for free. A list, not a
     * walk of the DRAM candidates, because in a full engine every eviction
     * asks for one and the DRAM-only pages would be walked past each time. */
    uint32_t red_head, red_tail;

    /* SSD tier (NULL without one) */
    struct kvt_ssd *ssd;
    const struct kvt_io_ops *io;
    void *io_priv;
    char io_note[192];
    struct kvt_codec *codec;
    struct kvt_ssd_meta *ssd_meta;  /* per SSD slot */
    uint8_t *bounce;                /* round_max buffers of slot_bytes, one per job */
    uint32_t round_max;             /* jobs in the pipeline at most */
    struct kvt_ssd_job *jobs;       /* round_max; mover-owned between take and finish */
    struct kvt_io_req *reqs;        /* round_max, one per job */
    uint32_t *job_free, njob_free;  /* free job numbers */
    uint32_t *uncommitted, nuncommitted; /* written, waiting for the group commit */
    uint32_t *finished, nfinished;  /* done (read verified / write committed) */
    struct kvt_slot_order *order;   /* round_max: scratch of pipe_take's slot ordering */
    uint32_t *order_slot;           /* round_max: its slots, sorted */
    uint32_t ssd_inflight;          /* jobs submitted and not yet reaped */
    uint32_t *ssd_queue, ssd_queued, ssd_queue_cap;  /* pages with an SSD job waiting */
    struct kvt_ssd_del *dels;       /* index deletions waiting for the mover */
    uint32_t ndels, dels_cap;
    uint64_t ssd_rounds;            /* mover passes that finished jobs: what SSD waiters watch */
    uint64_t ssd_busy;              /* jobs queued or in the pipeline */
    uint64_t generation;            /* of the next SSD write (the mover's) */
    int ssd_read_err;               /* the last read error that kept its page (PG_READ_ERR) */
    int ssd_write_err;              /* the last write error, for kvt_flush's answer */
    int evict_err;                  /* an eviction's write failed: the next room maker says so */
    struct kvt_transient *trans;    /* transient reads in progress */
    uint32_t ntrans, trans_cap;
    pthread_cond_t xfer_cv;         /* broadcast when a round finishes */

    /* mover: background write-back so evictions seldom wait */
    pthread_t mover;
    pthread_cond_t mover_cv;
    bool mover_started, mover_stop, mover_kick;
    uint32_t watermark;             /* HBM slots kept free or clean */
    uint32_t room_waiters;          /* callers waiting for HBM slots being freed for them */

    /* Overlap (prefetch.c): how long the caller computes between acquires,
     * and how long the disk takes per page, both measured as they happen. */
    uint64_t acquired_ns;           /* when the first acquire since the last advance returned; 0 = none */
    uint64_t compute_ns;            /* smoothed gap from an acquire to the next advance */
    uint64_t ssd_mark_ns;           /* last time the SSD pipeline's work was counted */
    uint64_t ssd_ns_per_page;       /* smoothed busy time per finished SSD job; 0 = unknown */
};

/* Reports a completed batch to cfg.on_transfer, if set (locked). */
void kvt_report(kvt_engine *e, int kind, uint32_t pages, uint64_t start_ns, uint64_t end_ns);

/* Opens with an explicit device back-end (tests inject the faulty one). */
int kvt_open_with_device(const kvt_config *cfg, const struct kvt_device_ops *dev,
                         kvt_engine **out);
/* Validates cfg; KVT_ECONFIG with a message naming the field. */
int kvt_config_check(const kvt_config *cfg);
/* The back-end's private state (tests arm host faults through it). */
void *kvt_engine_device_priv(kvt_engine *e);

/* Every API entry: a valid engine, a clean error slot, the lock, settled. */
#define KVT_ENTER(e)                                                            \
    do {                                                                        \
        if (!(e))                                                               \
            return kvt_fail(-EINVAL, "engine is NULL");                         \
        kvt_clear_error();                                                      \
        pthread_mutex_lock(&(e)->lock);                                         \
        kvt_settle(e);                                                          \
        kvt_check_invariants(e);                                                \
    } while (0)

static inline bool kvt_page_in_use(const struct kvt_page *p)
{
    return p->pins || p->busy;
}

/* manager.c / transfer.c (all under e->lock) */
uint32_t kvt_record_new(kvt_engine *e);
/* The page is now findable under its key: tells the policy. */
void kvt_page_indexed(kvt_engine *e, uint32_t pg);
void kvt_page_destroy(kvt_engine *e, uint32_t pg);
void kvt_settle(kvt_engine *e);
/* Sets and clears page flags, keeping resident/dirty counters exact. */
void kvt_page_set(kvt_engine *e, uint32_t pg, uint16_t set, uint16_t clear);
enum {
    KVT_SLOT_STEAL = 1, /* may take the DRAM slot of a page whose HBM copy stays */
    KVT_SLOT_SPARE = 2, /* may take the last free slot (evictions only) */
};
uint32_t kvt_dram_slot(kvt_engine *e, uint32_t pg, int how);
/* Drops one DRAM copy of a page that HBM holds and SSD backs (see
 * transfer.c) to make room for page x: for x KVT_NONE (a page needed now)
 * any such copy, else only one used later than x. false when none goes. */
bool kvt_dram_drop_third_copy(kvt_engine *e, uint32_t x);
/* 0 when one more page fits in the engine's capacity, else KVT_EFULL. */
int kvt_admit(kvt_engine *e);
void kvt_page_sync(kvt_engine *e, uint32_t pg, bool touch);
void kvt_page_trim(kvt_engine *e, uint32_t pg);
int kvt_inflight_push(kvt_engine *e, enum kvt_dir dir, uint32_t pg, uint64_t fence);
int kvt_submit_up(kvt_engine *e, const uint32_t *pages, const struct kvt_copy *c, uint32_t k);
int kvt_make_room_hbm(kvt_engine *e, uint32_t need, struct kvt_wait *w);
/* Waits (unlocked) for w; stall adds the time to stall_ns. */
int kvt_wait_on(kvt_engine *e, const struct kvt_wait *w, bool stall);
/* Sets *w to wait for the newest device copy in flight (up first); false
 * when none is. */
bool kvt_copy_wait(kvt_engine *e, struct kvt_wait *w);
int kvt_writeback(kvt_engine *e, uint32_t max_pages, bool evict, uint64_t *fence);
/* Releases the lock while waiting for fence f of dir; adds to stall_ns when
 * stall is set. Returns the fence's status. */
int kvt_wait_fence(kvt_engine *e, enum kvt_dir dir, uint64_t f, bool stall);
int kvt_check_failed(kvt_engine *e);

/* ssd_tier.c (under e->lock unless said otherwise) */
int kvt_ssd_tier_open(kvt_engine *e);
void kvt_ssd_tier_close(kvt_engine *e);
/* Frees DRAM slots (beyond the spare) for need pages: drops redundant
 * copies, queues SSD write-backs of DRAM-only pages. 0, -EAGAIN with *w,
 * or KVT_EFULL. */
int kvt_make_room_dram(kvt_engine *e, uint32_t need, struct kvt_wait *w);
/* Queues an SSD read of pg into its (allocated) DRAM slot. */
void kvt_ssd_queue_read(kvt_engine *e, uint32_t pg);
/* Queues an SSD read of pg into buf (4096-aligned, page_bytes), leaving the
 * page's tiers as they are; kvt_ssd_transient_result() says when it is done. */
int kvt_ssd_queue_read_transient(kvt_engine *e, uint32_t pg, void *buf);
/* 1 while pending; then 0 or the error, and the entry is gone. */
int kvt_ssd_transient_result(kvt_engine *e, uint32_t pg);
/* Queues a write of pg's DRAM copy to a new SSD slot. 0, KVT_EFULL or
 * -ENOSPC (no slot). */
int kvt_ssd_queue_write(kvt_engine *e, uint32_t pg, bool evict);
/* The page is going away: its index entry is deleted by the mover. */
/* Whether a failed SSD read leaves the page and its index entry in place:
 * every error but a proven-bad page (KVT_ECORRUPT) or the medium's (-EIO). */
bool kvt_ssd_read_keeps_page(int res);
/* The error of a page whose last read failed that way (err, or the one
 * recorded): clears PG_READ_ERR so that the next load tries again, and
 * names the page in kvt_last_error(). */
int kvt_ssd_read_error(kvt_engine *e, uint32_t pg, int err);
void kvt_ssd_forget(kvt_engine *e, uint32_t pg);
/* One pass of the mover's SSD pipeline: takes queued jobs, submits them,
 * reaps, verifies, group-commits, finishes. Called locked; unlocks around
 * the I/O. Returns true while there is SSD work in the pipeline. */
bool kvt_ssd_round(kvt_engine *e);
/* Whether the SSD pipeline has anything queued or in flight. */
bool kvt_ssd_pending(const kvt_engine *e);
int kvt_ssd_pipeline_init(kvt_engine *e);
void kvt_ssd_pipeline_fini(kvt_engine *e);
/* Tests: engines opened from now on use these I/O ops (NULL: back to config). */
void kvt_test_force_io(const struct kvt_io_ops *ops);
/* Writes every page without a current SSD copy to SSD and waits (flush with
 * persist). */
int kvt_ssd_flush(kvt_engine *e);
/* Bulk moves for benchmarks and warm-up (locked): drop DRAM copies that SSD
 * also holds; read every SSD-only page into free DRAM slots and wait. */
void kvt_dram_drop_redundant(kvt_engine *e);
uint64_t kvt_ssd_read_all(kvt_engine *e);

/* prefetch.c: brings the soonest-used pages up ahead of use (locked). */
void kvt_prefetch(kvt_engine *e);

/* mover.c */
int kvt_mover_start(kvt_engine *e);
void kvt_mover_stop(kvt_engine *e);
void kvt_mover_kick(kvt_engine *e);
/* Wakes the mover for SSD work. */
void kvt_mover_wake(kvt_engine *e);

#if KVT_DEBUG
void kvt_check_invariants(kvt_engine *e);
#else
static inline void kvt_check_invariants(kvt_engine *e) { (void)e; }
#endif

#endif /* KVT_TIERS_H */
