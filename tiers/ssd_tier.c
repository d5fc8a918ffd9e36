/*
 * ssd_tier.c — the SSD tier inside the engine: jobs, rounds, DRAM eviction.
 *
 * Callers never do SSD I/O. Under the engine lock they mark a page
 * (xfer = XFER_SSD_READ / XFER_SSD_WRITE), queue it and wake the mover; the
 * mover runs a round: it takes every queued job, drops the lock, encodes,
 * submits the reads and writes through io/ at the configured depth, verifies
 * and decodes what it read, makes the written data durable (persist), commits
 * all the round's index entries in one LMDB transaction (group commit), then
 * takes the lock again, applies the results and wakes the waiters.
 *
 * Durability order, per round: data written -> (persist) fdatasync of the
 * segments written -> index commit -> the old slots of rewritten pages freed.
 * A crash anywhere leaves the index naming slots that hold complete data of
 * the version it names. Deletions commit in their own transaction before the
 * round's writes, so a key dropped and written again ends up present.
 *
 * A page read back is trusted only if the CRC32C of its binding header (key,
 * fingerprint, generation) and stored bytes matches the index, and it
 * decodes to exactly page_bytes: otherwise it is lost (KVT_ECORRUPT,
 * counted), never served. An index entry goes only when its data is proven
 * bad (or the medium failed, -EIO); a read that fails because the file
 * cannot be opened or read right now (permissions, resources) keeps the
 * page on SSD and reports the error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "tiers/tiers.h"

#define ALIGN4K(n) (((n) + 4095) & ~(size_t)4095)

/* ------------------------------------------------------------- open/close */

struct load_ctx {
    kvt_engine *e;
    int err;
};

/* A kept index entry becomes a page record valid on SSD only. */
static int load_page(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v, uint32_t slot)
{
    struct load_ctx *lc = ctx;
    kvt_engine *e = lc->e;
    uint32_t pg = kvt_record_new(e);
    if (pg == KVT_NONE)
        return -ENOMEM;
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->key = *k;
    p->ssd_slot = slot;
    int r = kvt_ptable_insert(&e->pt, pg);
    if (r < 0) {
        kvt_ptable_delete(&e->pt, pg);
        return r;
    }
    kvt_page_set(e, pg, PG_VALID_SSD, 0);
    kvt_page_sync(e, pg, false);
    kvt_page_indexed(e, pg);
    e->ssd_meta[slot] = (struct kvt_ssd_meta){ v->generation, v->stored_len, v->crc, v->codec };
    if (v->generation >= e->generation)
        e->generation = v->generation + 1;
    return 0;
}

static const struct kvt_io_ops *forced_io;

void kvt_test_force_io(const struct kvt_io_ops *ops)
{
    forced_io = ops;
}

static int open_io(kvt_engine *e)
{
    if (forced_io) {
        struct kvt_io_params fp = { .depth = e->cfg.queue_depth,
                                    .fixed_base = e->dram_base,
                                    .fixed_len = e->dram_alloc_bytes };
        e->io = forced_io;
        int fr = forced_io->open(&fp, &e->io_priv);
        if (fr < 0)
            e->io = NULL;
        return fr;
    }
    struct kvt_io_params p = { .depth = e->cfg.queue_depth,
                               .fixed_base = e->dram_base,
                               .fixed_len = e->dram_alloc_bytes };
    int r = kvt_io_open(e->cfg.io_backend, &p, &e->io, &e->io_priv, e->io_note, sizeof(e->io_note));
    if (r < 0)
        return kvt_fail(r, "cannot set up SSD I/O: %s", e->io_note[0] ? e->io_note : kvt_strerror(r));
    /* Pages then go through the kernel's copy of the buffer each time: slower,
     * still correct. Say so once (RLIMIT_MEMLOCK is the usual cause). */
    const char *how = e->io->describe(e->io_priv);
    static _Atomic int told;
    if (how && strstr(how, "unregistered buffers:") && !atomic_exchange(&told, 1))
        fprintf(stderr, "kvtier: SSD I/O runs with %s\n", strstr(how, "unregistered"));
    return 0;
}

int kvt_ssd_tier_open(kvt_engine *e)
{
    size_t pb = e->page_bytes;
    uint32_t nslots = (uint32_t)(e->cfg.ssd_bytes / pb);
    int r;
    e->generation = 1;
    e->ssd_meta = kvt_meta_alloc(&e->meta_bytes, (size_t)nslots * sizeof(*e->ssd_meta));
    /* A round is a barrier (all its I/O completes before the next starts),
     * so it must be long next to its tail: 8 x depth keeps the disk busy
     * for all but the last depth requests. Bounce buffers are address space
     * until a codec touches them. */
    e->round_max = 8 * e->cfg.queue_depth;
    size_t bb = (size_t)e->round_max * pb;
    e->bounce = mmap(NULL, bb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!e->ssd_meta || e->bounce == MAP_FAILED) {
        e->bounce = NULL;
        return kvt_fail(-ENOMEM, "out of memory for the SSD tier");
    }
    (void)madvise(e->bounce, bb, MADV_HUGEPAGE); /* DMA targets: see device_host.c */
    if ((r = kvt_ssd_pipeline_init(e)) < 0)
        return kvt_fail(r, "out of memory for the SSD pipeline");
    if ((r = kvt_codec_new(e->cfg.codec, 0, pb, &e->codec)) < 0)
        return kvt_fail(r, "cannot set up codec %d", e->cfg.codec);
    struct kvt_ssd_open_info info;
    struct load_ctx lc = { e, 0 };
    r = kvt_ssd_open(e->ssd_dir, pb, e->cfg.ssd_bytes, e->cfg.persist, e->cfg.fingerprint,
                     load_page, &lc, &e->ssd, &info);
    if (r < 0) {
        if (!kvt_last_error()[0])
            kvt_fail(r, "cannot open ssd_dir %s: %s", e->ssd_dir, kvt_strerror(r));
        return r;
    }
    if (info.message[0])
        fprintf(stderr, "kvtier: %s\n", info.message);
    return open_io(e);
}

void kvt_ssd_tier_close(kvt_engine *e)
{
    if (e->io)
        e->io->close(e->io_priv);
    kvt_ssd_close(e->ssd);
    kvt_codec_free(e->codec);
    if (e->bounce)
        munmap(e->bounce, (size_t)e->round_max * e->page_bytes);
    kvt_meta_free(&e->meta_bytes, e->ssd_meta,
                  (size_t)(e->cfg.ssd_bytes / e->page_bytes) * sizeof(*e->ssd_meta));
    kvt_ssd_pipeline_fini(e);
    free(e->trans);
    free(e->ssd_queue);
    free(e->dels);
    e->io = NULL;
    e->ssd = NULL;
    e->codec = NULL;
    e->bounce = NULL;
    e->ssd_meta = NULL;
}

/* ------------------------------------------------------------- queueing */

static int queue_push(kvt_engine *e, uint32_t pg)
{
    if (e->ssd_queued == e->ssd_queue_cap) {
        uint32_t nc = e->ssd_queue_cap ? e->ssd_queue_cap * 2 : 64;
        uint32_t *nq = realloc(e->ssd_queue, nc * sizeof(*nq));
        if (!nq)
            return -ENOMEM;
        e->ssd_queue = nq;
        e->ssd_queue_cap = nc;
    }
    e->ssd_queue[e->ssd_queued++] = pg;
    if (!e->ssd_busy++)
        e->ssd_mark_ns = kvt_now_ns(); /* the disk starts working: see pipe_pace() */
    kvt_mover_wake(e);
    return 0;
}

void kvt_ssd_queue_read(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = XFER_SSD_READ;
    if (queue_push(e, pg) < 0)
        p->xfer = XFER_NONE; /* the caller sees no progress and fails with EFULL */
}

static struct kvt_transient *transient_of(kvt_engine *e, uint32_t pg)
{
    for (uint32_t i = 0; i < e->ntrans; i++)
        if (e->trans[i].pg == pg)
            return &e->trans[i];
    return NULL;
}

int kvt_ssd_queue_read_transient(kvt_engine *e, uint32_t pg, void *buf)
{
    if (e->ntrans == e->trans_cap) {
        uint32_t nc = e->trans_cap ? e->trans_cap * 2 : 8;
        struct kvt_transient *nt = realloc(e->trans, nc * sizeof(*nt));
        if (!nt)
            return -ENOMEM;
        e->trans = nt;
        e->trans_cap = nc;
    }
    e->trans[e->ntrans++] = (struct kvt_transient){ pg, buf, 1 };
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = XFER_SSD_READ;
    if (queue_push(e, pg) < 0) {
        p->xfer = XFER_NONE;
        e->ntrans--;
        return -ENOMEM;
    }
    return 0;
}

int kvt_ssd_transient_result(kvt_engine *e, uint32_t pg)
{
    struct kvt_transient *t = transient_of(e, pg);
    if (!t)
        return -ENOENT;
    int r = t->res;
    if (r != 1)
        *t = e->trans[--e->ntrans];
    return r;
}

/* The new slot travels in the page's fence field while the write is queued:
 * a page has one transfer at a time, so the field is free. */
/* Every SSD slot is taken: give up the SSD copy of a page that is current in
 * DRAM or HBM too. Its index entry is deleted by the mover, which frees the
 * slot; the caller waits for that (-EAGAIN). Costs a scan: only a full
 * engine comes here. */
static int release_redundant_ssd(kvt_engine *e, uint32_t except)
{
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (pg == except || !(p->flags & PG_HASHED) || p->xfer != XFER_NONE || p->busy ||
            !(p->flags & PG_VALID_SSD) || !(p->flags & (PG_VALID_DRAM | PG_VALID_HBM)))
            continue;
        kvt_page_set(e, pg, 0, PG_VALID_SSD);
        kvt_page_sync(e, pg, false);
        kvt_ssd_forget(e, pg);
        return -EAGAIN;
    }
    return e->ndels ? -EAGAIN : KVT_EFULL; /* deletions in flight free slots too */
}

int kvt_ssd_queue_write(kvt_engine *e, uint32_t pg, bool evict)
{
    int err = 0;
    uint32_t slot = kvt_ssd_alloc(e->ssd, &err);
    /* Only an eviction may take another page's SSD copy: a flush doing so
     * would undo its own work. And never with persist: that copy is what
     * survives a close or a crash, so a full persisted engine says EFULL. */
    if (slot == KVT_NONE && err == KVT_EFULL)
        return evict && !e->cfg.persist ? release_redundant_ssd(e, pg) : KVT_EFULL;
    if (slot == KVT_NONE) {
        e->st.errors_io++;
        return err;
    }
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = XFER_SSD_WRITE;
    p->fence = slot | (evict ? (1ull << 32) : 0);
    if (queue_push(e, pg) < 0) {
        p->xfer = XFER_NONE;
        kvt_ssd_free(e->ssd, slot);
        return -ENOMEM;
    }
    return 0;
}

void kvt_ssd_forget(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (!e->ssd || p->ssd_slot == KVT_NONE)
        return;
    if (e->ndels == e->dels_cap) {
        uint32_t nc = e->dels_cap ? e->dels_cap * 2 : 64;
        struct kvt_ssd_del *nd = realloc(e->dels, nc * sizeof(*nd));
        if (!nd) {
            /* Cannot remember the deletion: keep the slot out of use rather
             * than risk a stale index entry naming a reused slot. */
            kvt_ssd_mark_bad(e->ssd, p->ssd_slot);
            p->ssd_slot = KVT_NONE;
            return;
        }
        e->dels = nd;
        e->dels_cap = nc;
    }
    e->dels[e->ndels++] = (struct kvt_ssd_del){ p->key, p->ssd_slot };
    p->ssd_slot = KVT_NONE;
    kvt_mover_wake(e);
}

/* ------------------------------------------------------------- DRAM room */

static bool usable_dram_evict(void *ctx, uint32_t pg)
{
    kvt_engine *e = ctx;
    const struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (p->xfer != XFER_NONE || p->busy)
        return false;
    /* A pinned page not yet in HBM is on its way up for an acquire: taking
     * its DRAM copy would undo that acquire's read (with DRAM smaller than
     * the acquire, two pages took each other's slot for ever). */
    if (p->pins && !(p->flags & PG_VALID_HBM))
        return false;
    return e->ssd || (p->flags & (PG_VALID_HBM | PG_VALID_SSD));
}

/* DRAM copies that can go now: the page is current in HBM or on SSD too. */
static bool usable_dram_clean(void *ctx, uint32_t pg)
{
    kvt_engine *e = ctx;
    const struct kvt_page *p = kvt_pg(&e->pt, pg);
    return p->xfer == XFER_NONE && !p->busy && (p->flags & (PG_VALID_HBM | PG_VALID_SSD)) &&
           !(p->pins && !(p->flags & PG_VALID_HBM));
}

/* DRAM-only pages: the ones a write-back turns clean. */
static bool usable_dram_dirty(void *ctx, uint32_t pg)
{
    kvt_engine *e = ctx;
    const struct kvt_page *p = kvt_pg(&e->pt, pg);
    return p->xfer == XFER_NONE && !p->busy && !(p->flags & (PG_VALID_HBM | PG_VALID_SSD));
}

int kvt_make_room_dram(kvt_engine *e, uint32_t need, struct kvt_wait *w)
{
    struct kvt_arena *d = &e->arena[KVT_TIER_DRAM];
    uint32_t coming = 0;
    int err = KVT_EFULL;
    /* An eviction's write failed since the last call (a full disk, a file
     * refused): its caller hears of it, once, instead of queueing the same
     * page again for ever. */
    if (e->evict_err) {
        err = e->evict_err;
        e->evict_err = 0;
        return kvt_fail(err, "cannot write pages to SSD to make room in DRAM: %s",
                        kvt_strerror(err));
    }
    /* nfree counts the spare slot, which only evictions may take. */
    while ((d->nfree ? d->nfree - 1 : 0) + coming < need) {
        if (kvt_dram_drop_third_copy(e, KVT_NONE))
            continue;
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, usable_dram_evict, e);
        if (v == KVT_NONE)
            break;
        struct kvt_page *p = kvt_pg(&e->pt, v);
        if (p->flags & (PG_VALID_HBM | PG_VALID_SSD)) {
            kvt_page_set(e, v, 0, PG_VALID_DRAM);
            kvt_page_sync(e, v, false);
            kvt_page_trim(e, v);
            continue;
        }
        int q = kvt_ssd_queue_write(e, v, true);
        if (q == -EAGAIN) {
            coming++; /* a slot is being freed for it: wait and try again */
            break;
        }
        if (q < 0) {
            err = q;
            break;
        }
        coming++;
    }
    /* The SSD cannot take the policy's choice: pages with a copy elsewhere
     * can still go, even if used sooner. */
    while ((d->nfree ? d->nfree - 1 : 0) + coming < need) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, usable_dram_clean, e);
        if (v == KVT_NONE)
            break;
        kvt_page_set(e, v, 0, PG_VALID_DRAM);
        kvt_page_sync(e, v, false);
        kvt_page_trim(e, v);
    }
    /* Going to SSD costs a round trip: while at it, write a batch more of the
     * coldest DRAM-only pages (up to a queue depth, at most 1/8 of DRAM), but
     * keep them: they turn clean, so the next callers drop them for free, in
     * the policy's order, instead of being evicted early here. */
    uint32_t batch = e->cfg.queue_depth < d->nslots / 8 ? e->cfg.queue_depth : d->nslots / 8;
    for (uint32_t extra = 0; coming && extra < batch; extra++) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, usable_dram_dirty, e);
        if (v == KVT_NONE || kvt_ssd_queue_write(e, v, false) < 0)
            break;
    }
    if ((d->nfree ? d->nfree - 1 : 0) >= need)
        return 0;
    if (e->ssd_busy || e->ndels) {
        *w = (struct kvt_wait){ KVT_WAIT_SSD, e->ssd_rounds };
        return -EAGAIN;
    }
    return err == KVT_EFULL ? KVT_EFULL
                            : kvt_fail(err, "cannot write pages to SSD to make room in DRAM: %s",
                                       kvt_strerror(err));
}

/* ------------------------------------------------------------- the pipeline */

/* The mover keeps up to round_max jobs in a pipeline: taken from the queue
 * under the lock, encoded and submitted unlocked, reaped as they complete,
 * reads verified at once, writes committed to the index in groups, and the
 * results applied under the lock. The disk never waits for a whole batch to
 * drain: new jobs go in as old ones come out. */

bool kvt_ssd_pending(const kvt_engine *e)
{
    return e->ssd && (e->ssd_queued || e->ndels || e->ssd_inflight || e->nuncommitted ||
                      e->nfinished);
}

/* pipe_take's scratch for order_write_slots() (below). */
struct kvt_slot_order {
    kvt_key key;
    uint32_t job;
};

int kvt_ssd_pipeline_init(kvt_engine *e)
{
    uint32_t n = e->round_max;
    e->jobs = calloc(n, sizeof(*e->jobs));
    e->reqs = calloc(n, sizeof(*e->reqs));
    e->job_free = malloc(n * sizeof(uint32_t));
    e->uncommitted = malloc(n * sizeof(uint32_t));
    e->finished = malloc(n * sizeof(uint32_t));
    e->order = malloc(n * sizeof(*e->order));
    e->order_slot = malloc(n * sizeof(uint32_t));
    if (!e->jobs || !e->reqs || !e->job_free || !e->uncommitted || !e->finished || !e->order ||
        !e->order_slot)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        e->job_free[i] = n - 1 - i;
    e->njob_free = n;
    return 0;
}

void kvt_ssd_pipeline_fini(kvt_engine *e)
{
    free(e->jobs);
    free(e->reqs);
    free(e->job_free);
    free(e->uncommitted);
    free(e->finished);
    free(e->order);
    free(e->order_slot);
    e->order = NULL;
    e->order_slot = NULL;
    e->jobs = NULL;
    e->reqs = NULL;
    e->job_free = e->uncommitted = e->finished = NULL;
}

static int by_key(const void *x, const void *y)
{
    return kvt_key_cmp(&((const struct kvt_slot_order *)x)->key,
                       &((const struct kvt_slot_order *)y)->key);
}

static int by_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* Gives the write jobs among got[0..n) their slots in key order. Slots are
 * allocated in eviction order, which is the policy's (the decode policy
 * gives up a group's pages from its end), so a group's pages landed in
 * descending or interleaved slots, and every later read of the group, in
 * page order, walked the file backwards: ~1.0 GB/s here where forward
 * reads of the same file run at 1.5-1.8. Permuting the batch's slots puts
 * each run of a group's pages in ascending slots. */
static void order_write_slots(kvt_engine *e, const uint32_t *got, uint32_t n)
{
    struct kvt_slot_order *o = e->order;
    uint32_t *slot = e->order_slot, k = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct kvt_ssd_job *j = &e->jobs[got[i]];
        if (j->write) {
            o[k] = (struct kvt_slot_order){ j->key, got[i] };
            slot[k++] = j->slot;
        }
    }
    if (k < 2)
        return;
    qsort(slot, k, sizeof(*slot), by_u32);
    qsort(o, k, sizeof(*o), by_key);
    for (uint32_t i = 0; i < k; i++)
        e->jobs[o[i].job].slot = slot[i];
}

/* Takes queued jobs into free pipeline slots and resolves where each goes.
 * Locked. Returns how many, their numbers in got[]. */
static uint32_t pipe_take(kvt_engine *e, uint32_t *got)
{
    uint32_t n = 0, k = 0;
    for (; k < e->ssd_queued && e->njob_free; k++) {
        uint32_t pg = e->ssd_queue[k], ji = e->job_free[--e->njob_free];
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        struct kvt_ssd_job *j = &e->jobs[ji];
        memset(j, 0, sizeof(*j));
        j->pg = pg;
        j->key = p->key;
        if (e->cfg.on_transfer)
            j->t_ns = kvt_now_ns();
        if (p->xfer == XFER_SSD_READ && p->slot[KVT_TIER_DRAM] == KVT_NONE) {
            j->transient = true;
            j->dram = transient_of(e, pg)->buf;
        } else {
            j->dram = kvt_arena_ptr(&e->arena[KVT_TIER_DRAM], p->slot[KVT_TIER_DRAM]);
        }
        j->write = p->xfer == XFER_SSD_WRITE;
        if (j->write) {
            j->slot = (uint32_t)p->fence;
            j->evict = p->fence >> 32;
        } else {
            j->slot = p->ssd_slot;
            const struct kvt_ssd_meta *m = &e->ssd_meta[j->slot];
            j->stored_len = m->stored_len;
            j->crc = m->crc;
            j->generation = m->generation;
            j->codec = m->codec;
        }
        /* Compressed pages go through the job's bounce buffer; raw ones move
         * straight between the registered DRAM arena and the disk. */
        bool bounce = j->write ? e->cfg.codec != KVT_CODEC_NONE : j->codec != KVT_CODEC_NONE;
        j->bounce = bounce ? (int)ji : -1;
        j->buf = bounce ? e->bounce + (size_t)ji * e->page_bytes : j->dram;
        got[n++] = ji;
    }
    order_write_slots(e, got, n);
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &e->jobs[got[i]];
        if (j->write)
            kvt_ssd_dirty(e->ssd, j->slot);
        int r = kvt_ssd_locate(e->ssd, j->slot, j->write, &j->fd, &j->off);
        if (r < 0) {
            j->fd = -1;
            j->res = r;
        }
    }
    if (k) /* (the queue may not be allocated yet: memmove(NULL, ...) is undefined) */
        memmove(e->ssd_queue, e->ssd_queue + k, (e->ssd_queued - k) * sizeof(uint32_t));
    e->ssd_queued -= k;
    return n;
}

/* Encodes a page to write (unlocked: its DRAM slot is the job's). */
static void job_encode(kvt_engine *e, struct kvt_ssd_job *j)
{
    size_t pb = e->page_bytes, out = pb;
    int used = KVT_CODEC_NONE;
    if (j->bounce >= 0) {
        int r = kvt_codec_encode(e->codec, j->dram, pb, j->buf, pb, &out, &used);
        if (r < 0 || used == KVT_CODEC_NONE) {
            memcpy(j->buf, j->dram, pb); /* stored raw */
            out = pb;
            used = KVT_CODEC_NONE;
        }
    }
    j->stored_len = (uint32_t)out;
    j->codec = (uint8_t)used;
    memset((uint8_t *)j->buf + out, 0, ALIGN4K(out) - out);
    j->generation = e->generation++;
    j->crc = kvt_crc32c(kvt_ssd_bind(&j->key, e->cfg.fingerprint, j->generation), j->buf, out);
}

/* Verifies and decodes a page read (unlocked). */
static void job_verify(kvt_engine *e, struct kvt_ssd_job *j)
{
    if (j->res < 0)
        return;
    uint32_t seed = kvt_ssd_bind(&j->key, e->cfg.fingerprint, j->generation);
    if (kvt_crc32c(seed, j->buf, j->stored_len) != j->crc)
        j->res = KVT_ECORRUPT;
    else if (j->bounce >= 0 &&
             kvt_codec_decode(e->codec, j->codec, j->buf, j->stored_len, j->dram, e->page_bytes) < 0)
        j->res = KVT_ECORRUPT;
}

/* Encodes and submits the jobs just taken (unlocked). The back-end blocks
 * submit() only while `depth` requests are in the kernel, so the pipeline
 * holds more jobs than the disk does and refills it as requests complete. */
static void pipe_submit(kvt_engine *e, const uint32_t *got, uint32_t n)
{
    struct kvt_io_req *rp[64];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &e->jobs[got[i]];
        if (j->write)
            job_encode(e, j);
        if (j->fd < 0) { /* its segment could not be opened: j->res says why */
            e->finished[e->nfinished++] = got[i];
            continue;
        }
        e->reqs[got[i]] = (struct kvt_io_req){ .fd = j->fd, .write = j->write, .buf = j->buf,
                                               .len = ALIGN4K(j->stored_len), .off = j->off,
                                               .user = j };
        rp[k++] = &e->reqs[got[i]];
        /* Small groups: the first requests reach the disk while later pages
         * are still being encoded. */
        if (k == 64 || (k == 8 && i + 1 < n) || i + 1 == n) {
            int r = e->io->submit(e->io_priv, rp, k);
            for (uint32_t q = 0; q < k; q++) {
                struct kvt_ssd_job *qj = rp[q]->user;
                if (r < 0) {
                    qj->res = r;
                    e->finished[e->nfinished++] = (uint32_t)(qj - e->jobs);
                } else {
                    qj->submitted = true;
                    e->ssd_inflight++;
                }
            }
            k = 0;
        }
    }
}

/* Reaps completions: reads are verified and finished, writes wait for the
 * group commit. Waits for one completion when asked to. */
static int pipe_reap(kvt_engine *e, bool wait)
{
    struct kvt_io_req *done[64];
    int m = e->io->reap(e->io_priv, done, 64, wait && e->ssd_inflight ? 1 : 0);
    if (m < 0)
        return m;
    for (int i = 0; i < m; i++) {
        struct kvt_ssd_job *j = done[i]->user;
        uint32_t ji = (uint32_t)(j - e->jobs);
        j->res = done[i]->res;
        j->submitted = false;
        e->ssd_inflight--;
        if (!j->write) {
            job_verify(e, j);
            e->finished[e->nfinished++] = ji;
        } else if (j->res < 0) {
            e->finished[e->nfinished++] = ji;
        } else {
            e->uncommitted[e->nuncommitted++] = ji;
        }
    }
    return m;
}

/* Group commit of the written pages: data durable (persist), then one index
 * transaction. Only after it may their old slots be reused. */
static void pipe_commit(kvt_engine *e)
{
    uint32_t n = e->nuncommitted;
    kvt_key *k = malloc(n * sizeof(*k));
    struct kvt_ssd_entry *v = malloc(n * sizeof(*v));
    int r = k && v ? 0 : -ENOMEM;
    for (uint32_t i = 0; i < n && !r; i++) {
        const struct kvt_ssd_job *j = &e->jobs[e->uncommitted[i]];
        k[i] = j->key;
        v[i] = (struct kvt_ssd_entry){ .version = KVT_SSD_ENTRY_VERSION, .codec = j->codec,
                                       .stored_len = j->stored_len,
                                       .raw_len = (uint32_t)e->page_bytes, .crc = j->crc,
                                       .fingerprint = e->cfg.fingerprint,
                                       .generation = j->generation };
        kvt_ssd_where(e->ssd, j->slot, &v[i].segment, &v[i].offset);
    }
    if (!r && e->cfg.persist)
        r = kvt_ssd_sync(e->ssd);
    if (!r)
        r = kvt_index_commit(kvt_ssd_index(e->ssd), k, v, n, NULL, 0, e->cfg.persist != 0);
    for (uint32_t i = 0; i < n; i++) {
        /* Not indexed: as far as anyone will ever know, the write did not happen. */
        if (r < 0)
            e->jobs[e->uncommitted[i]].res = r;
        e->finished[e->nfinished++] = e->uncommitted[i];
    }
    e->nuncommitted = 0;
    free(k);
    free(v);
}

bool kvt_ssd_read_keeps_page(int res)
{
    return res != KVT_ECORRUPT && res != -EIO;
}

int kvt_ssd_read_error(kvt_engine *e, uint32_t pg, int err)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (!err)
        err = e->ssd_read_err ? e->ssd_read_err : -EIO;
    kvt_page_set(e, pg, 0, PG_READ_ERR);  /* the next load tries again */
    return kvt_fail(err, "page (%llu,%u,%u) could not be read from SSD (%s); its copy there is "
                    "kept", (unsigned long long)p->key.id, p->key.layer, p->key.index,
                    kvt_strerror(err));
}

static void finish_read(kvt_engine *e, struct kvt_ssd_job *j)
{
    struct kvt_page *p = kvt_pg(&e->pt, j->pg);
    p->xfer = XFER_NONE;
    if (j->transient)
        transient_of(e, j->pg)->res = j->res;
    if (j->res == 0 && j->transient) {
        e->st.bytes_up[KVT_TIER_DRAM] += e->page_bytes;
    } else if (j->res == 0) {
        kvt_page_set(e, j->pg, PG_VALID_DRAM, PG_READ_ERR);
        e->st.bytes_up[KVT_TIER_DRAM] += e->page_bytes;
    } else if (kvt_ssd_read_keeps_page(j->res)) {
        e->st.errors_io++;
        e->ssd_read_err = j->res;
        if (!j->transient)
            kvt_page_set(e, j->pg, PG_READ_ERR, 0);
    } else {
        /* The only copy is unreadable: the page is lost, never served. */
        if (j->res == KVT_ECORRUPT)
            e->st.errors_corrupt++;
        else
            e->st.errors_io++;
        if (j->res != KVT_ECORRUPT)
            kvt_ssd_mark_bad(e->ssd, j->slot);
        kvt_page_set(e, j->pg, PG_LOST | (j->res == KVT_ECORRUPT ? 0 : PG_LOST_IO), PG_VALID_SSD);
        kvt_ssd_forget(e, j->pg);
    }
    kvt_page_sync(e, j->pg, false);
    kvt_page_trim(e, j->pg);
}

static void finish_write(kvt_engine *e, struct kvt_ssd_job *j)
{
    struct kvt_page *p = kvt_pg(&e->pt, j->pg);
    bool stale = p->flags & PG_STALE;
    p->xfer = XFER_NONE;
    p->flags &= (uint16_t)~PG_STALE;
    if (j->res < 0) {
        /* The page stays where it was. Only a slot whose write failed on
         * the medium (-EIO) is never used again: a full disk or a refused
         * file says nothing about the slot. */
        e->st.errors_io++;
        e->ssd_write_err = j->res;
        if (j->evict && j->res != -EIO)
            e->evict_err = j->res;  /* -EIO retired the slot: the next try goes elsewhere */
        if (j->res == -EIO)
            kvt_ssd_mark_bad(e->ssd, j->slot);
        else
            kvt_ssd_free(e->ssd, j->slot);
        goto out;
    }
    e->ssd_meta[j->slot] = (struct kvt_ssd_meta){ j->generation, j->stored_len, j->crc, j->codec };
    e->st.bytes_down[KVT_TIER_DRAM] += e->page_bytes;
    if (p->flags & PG_ZOMBIE) {
        /* Dropped while written: the new entry goes too. */
        p->ssd_slot = j->slot;
        kvt_ssd_forget(e, j->pg);
        goto out;
    }
    /* Copy-on-write: the old slot was named by the index until this group's
     * commit; only now may it be reused. */
    if (p->ssd_slot != KVT_NONE)
        kvt_ssd_free(e->ssd, p->ssd_slot);
    p->ssd_slot = j->slot;
    if (!stale)
        kvt_page_set(e, j->pg, PG_VALID_SSD, 0);
    p = kvt_pg(&e->pt, j->pg);
    if (j->evict && !stale && !p->pins && !p->busy)
        kvt_page_set(e, j->pg, 0, PG_VALID_DRAM);
out:
    kvt_page_sync(e, j->pg, false);
    kvt_page_trim(e, j->pg);
}

/* Deletions queued by drops: one transaction, committed before any write
 * taken after them, so a key dropped and written again ends up present. */
static int pipe_deletes(kvt_engine *e, struct kvt_ssd_del *dels, uint32_t n)
{
    kvt_key *k = malloc((n ? n : 1) * sizeof(*k));
    if (!k)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        k[i] = dels[i].key;
    int r = kvt_index_commit(kvt_ssd_index(e->ssd), NULL, NULL, 0, k, n, false);
    free(k);
    return r;
}

/* The disk's pace: busy time per finished job, for sizing how far ahead
 * prefetch reads (prefetch.c). Time counts only while jobs were waiting the
 * whole interval (e->ssd_busy was non-zero at its start), so idle gaps do
 * not make the disk look slow. Called under the lock with n jobs finished. */
static void pipe_pace(kvt_engine *e, uint32_t n)
{
    uint64_t now = kvt_now_ns();
    if (e->ssd_mark_ns && now > e->ssd_mark_ns)
        e->ssd_ns_per_page = kvt_smooth(e->ssd_ns_per_page, (now - e->ssd_mark_ns) / n);
    e->ssd_mark_ns = e->ssd_busy > n ? now : 0;
}

bool kvt_ssd_round(kvt_engine *e)
{
    if (!kvt_ssd_pending(e))
        return false;
    uint32_t got[e->round_max ? e->round_max : 1];
    uint32_t n = pipe_take(e, got);
    struct kvt_ssd_del *dels = e->dels;
    uint32_t ndels = e->ndels;
    e->dels = NULL;
    e->ndels = e->dels_cap = 0;
    pthread_mutex_unlock(&e->lock);

    int dr = ndels ? pipe_deletes(e, dels, ndels) : 0;
    pipe_submit(e, got, n);
    /* Block for a completion only when there is nothing new to hand the
     * disk: new work is taken on the next pass. */
    if (pipe_reap(e, n == 0) < 0) {
        /* The I/O context broke: every request still in it failed. */
        for (uint32_t i = 0; i < e->round_max; i++) {
            if (!e->jobs[i].submitted)
                continue;
            e->jobs[i].submitted = false;
            e->jobs[i].res = -EIO;
            e->finished[e->nfinished++] = i;
        }
        e->ssd_inflight = 0;
    }
    /* Commit when the writes have gathered into a group, or when nothing
     * else is coming (so a lone write is not left waiting). */
    if (e->nuncommitted && (e->nuncommitted >= e->cfg.queue_depth || !e->ssd_inflight))
        pipe_commit(e);

    pthread_mutex_lock(&e->lock);
    for (uint32_t i = 0; i < ndels; i++) {
        if (dr == 0)
            kvt_ssd_free(e->ssd, dels[i].slot);
        else
            kvt_ssd_mark_bad(e->ssd, dels[i].slot); /* still named: never reuse */
    }
    free(dels);
    if (ndels && !e->nfinished) {
        e->ssd_rounds++; /* freed slots: waiters look again */
        pthread_cond_broadcast(&e->xfer_cv);
    }
    uint32_t done[2] = { 0, 0 };
    uint64_t first[2] = { UINT64_MAX, UINT64_MAX };
    for (uint32_t i = 0; i < e->nfinished; i++) {
        struct kvt_ssd_job *j = &e->jobs[e->finished[i]];
        if (j->res == 0) {
            done[j->write]++;
            first[j->write] = j->t_ns < first[j->write] ? j->t_ns : first[j->write];
        }
        if (j->write)
            finish_write(e, j);
        else
            finish_read(e, j);
        e->job_free[e->njob_free++] = e->finished[i];
    }
    if (e->cfg.on_transfer && (done[0] || done[1])) {
        /* One report per direction per round: the jobs that finished in it,
         * from the earliest one's start. */
        uint64_t now = kvt_now_ns();
        kvt_report(e, KVT_XFER_SSD_TO_DRAM, done[0], first[0], now);
        kvt_report(e, KVT_XFER_DRAM_TO_SSD, done[1], first[1], now);
    }
    if (e->nfinished) {
        pipe_pace(e, e->nfinished);
        e->ssd_busy -= e->nfinished;
        e->nfinished = 0;
        e->ssd_rounds++;
        pthread_cond_broadcast(&e->xfer_cv);
    }
    return true;
}

/* ------------------------------------------------------------- bulk moves */

/* Drops every DRAM copy that SSD also holds (bench: empty DRAM without I/O). */
void kvt_dram_drop_redundant(kvt_engine *e)
{
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!(p->flags & PG_HASHED) || p->xfer != XFER_NONE || p->busy ||
            (p->flags & (PG_VALID_DRAM | PG_VALID_SSD)) != (PG_VALID_DRAM | PG_VALID_SSD))
            continue;
        kvt_page_set(e, pg, 0, PG_VALID_DRAM);
        kvt_page_sync(e, pg, false);
        kvt_page_trim(e, pg);
    }
}

/* Reads every page that is only on SSD into DRAM, as far as free DRAM slots
 * go, and waits. Returns how many were read. */
uint64_t kvt_ssd_read_all(kvt_engine *e)
{
    uint64_t n = 0;
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!(p->flags & PG_HASHED) || p->xfer != XFER_NONE ||
            (p->flags & (PG_VALID_HBM | PG_VALID_DRAM)) || !(p->flags & PG_VALID_SSD))
            continue;
        uint32_t s = kvt_dram_slot(e, pg, 0);
        if (s == KVT_NONE)
            break;
        kvt_pg(&e->pt, pg)->slot[KVT_TIER_DRAM] = s;
        kvt_ssd_queue_read(e, pg);
        n++;
    }
    while (e->ssd_busy && !e->failed) {
        struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_rounds };
        kvt_wait_on(e, &w, false);
    }
    return n;
}

/* ------------------------------------------------------------- flush */

static bool needs_ssd_copy(const struct kvt_page *p)
{
    return (p->flags & PG_HASHED) && (p->flags & PG_VALID_DRAM) && !(p->flags & PG_VALID_SSD);
}

/* Queues a write of every page with a DRAM copy and no current SSD copy;
 * *err gets why one could not be queued. */
static void flush_queue(kvt_engine *e, int *err)
{
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!needs_ssd_copy(p) || p->xfer != XFER_NONE)
            continue;
        int q = kvt_ssd_queue_write(e, pg, false);
        if (q < 0)
            *err = q;
    }
}

static uint64_t flush_missing(kvt_engine *e)
{
    uint64_t n = 0;
    for (uint32_t pg = 0; pg < e->pt.used; pg++)
        n += needs_ssd_copy(kvt_pg(&e->pt, pg));
    return n;
}

/* Writes every page without a current SSD copy and waits. A write that
 * fails (its slot is then retired) is tried again on another slot while
 * that makes progress; what still is not on SSD is reported, never hidden
 * behind a 0. */
int kvt_ssd_flush(kvt_engine *e)
{
    int err = 0;
    uint64_t prev = UINT64_MAX, missing = 0;
    for (int pass = 0; pass < 8; pass++) {
        flush_queue(e, &err);
        /* Wait until the mover has run everything queued, deletions included. */
        while ((e->ssd_busy || e->ndels) && !e->failed) {
            struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_rounds };
            kvt_wait_on(e, &w, false);
        }
        if (e->failed)
            return kvt_check_failed(e);
        missing = flush_missing(e);
        if (!missing || missing >= prev)
            break;
        prev = missing;
    }
    if (!missing)
        return 0;
    /* The error as it happened: a full tier, a full disk, a refused file;
     * -EIO only when the writes themselves failed on the medium. */
    if (!err)
        err = e->ssd_write_err ? e->ssd_write_err : -EIO;
    return kvt_fail(err, "%llu pages could not be written to SSD (%s)",
                    (unsigned long long)missing, kvt_strerror(err));
}
