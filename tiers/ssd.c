/*
 * ssd.c — the SSD tier under the engine lock: requests for the mover,
 * index deletions, read errors, flush.
 *
 * Callers never do SSD I/O. Under the engine lock they mark a page
 * (XFER_SSD_READ / XFER_SSD_WRITE), queue a request (e->ssd_tier.queue) and
 * wake the mover, whose pipeline (ssd_pipe.c) does the I/O without the lock
 * and finishes the requests into the pages. Waiters watch
 * e->ssd_tier.progress (kvt_wait_on).
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

#include "tiers/tiers.h"

/* ------------------------------------------------------------- open/close */

struct load_ctx {
    kvt_engine *e;
    int err;
};

/* A record the store kept becomes a page record valid on SSD only. */
static int load_page(void *ctx, const struct kvt_store_rec *v)
{
    const kvt_key *k = &v->key;
    uint32_t slot = v->slot;
    struct load_ctx *lc = ctx;
    kvt_engine *e = lc->e;
    uint32_t pg = kvt_page_new(e);
    if (pg == KVT_NONE)
        return -ENOMEM;
    kvt_page_key(e, pg, *k);
    kvt_pg(&e->pt, pg)->ssd_slot = slot;
    int r = kvt_ptable_insert(&e->pt, pg);
    if (r < 0) {
        kvt_ptable_delete(&e->pt, pg);
        return r;
    }
    kvt_page_now_valid(e, pg, KVT_TIER_SSD);
    kvt_page_sync(e, pg, false);
    kvt_page_indexed(e, pg);
    e->ssd_tier.meta[slot] = (struct kvt_ssd_meta){ v->generation, v->stored_len, v->crc,
                                                    v->codec };
    kvt_ssd_pipe_seen(e, v->generation);
    return 0;
}

/* Bytes in the disk's queue at most. On this project's NVMe 8–16 MiB in
 * flight reach the read speed of any deeper queue; more only makes the
 * pieces of large pages finish together, so that their checksums run after
 * the disk went idle (docs/performance.md#pieces). Pages up to 512 KiB are
 * never held back by it at the default depth of 32. */
#define SSD_INFLIGHT_BYTES ((size_t)16 << 20)

/* The I/O back-end: the one the opener handed in (tests: the faulty one,
 * with its plan), or the one the config names. */
static int open_io(kvt_engine *e, const struct kvt_open_with *with)
{
    struct kvt_io_params p = { .depth = e->cfg.queue_depth,
                               .fixed_base = e->dram.arena.base,
                               .fixed_len = e->dram.alloc_bytes,
                               .arg = with->io_arg,
                               .max_bytes = SSD_INFLIGHT_BYTES };
    kvt_callers_init(e, &p);
    if (with->io) {
        e->io = with->io;
        int fr = e->io->open(&p, &e->io_priv);
        if (fr < 0)
            e->io = NULL;
        return fr;
    }
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

int kvt_ssd_tier_open(kvt_engine *e, const struct kvt_open_with *with)
{
    size_t pb = e->page_bytes;
    uint32_t nslots = (uint32_t)(e->cfg.ssd_bytes / pb);
    int r;
    e->ssd_tier.meta = kvt_meta_alloc(&e->meta_bytes, (size_t)nslots * sizeof(*e->ssd_tier.meta));
    if (!e->ssd_tier.meta)
        return kvt_fail(-ENOMEM, "out of memory for the SSD tier");
    if ((r = kvt_ssd_pipe_init(e)) < 0)
        return r;
    struct kvt_store_open_info info = { 0 };
    struct load_ctx lc = { e, 0 };
    struct kvt_store_params sp = { .page_bytes = pb, .fingerprint = e->cfg.fingerprint,
                                   .dir = e->ssd_dir, .capacity = e->cfg.ssd_bytes,
                                   .durable = e->cfg.persist != 0, .found = load_page,
                                   .found_ctx = &lc, .info = &info,
                                   /* tests: a power-loss model sees the syncs */
                                   .sync = &with->sync };
    char why[256] = "";
    /* Nobody else sees the engine yet; the lock is for the page transitions'
     * checks (KVT_ASSERT_LOCKED). */
    kvt_lock(e);
    r = kvt_ssd_store_ops.open(&sp, &e->ssd, why, sizeof(why));
    kvt_unlock(e);
    if (r < 0) {
        e->ssd = NULL;
        if (!kvt_last_error()[0])
            kvt_fail(r, "cannot open ssd_dir %s: %s", e->ssd_dir, why[0] ? why : kvt_strerror(r));
        return r;
    }
    if (info.message[0])
        fprintf(stderr, "kvtier: %s\n", info.message);
    if (with->no_write_ahead)
        kvt_dram_write_ahead_off(e);
    return open_io(e, with);
}

void kvt_ssd_tier_close(kvt_engine *e)
{
    kvt_callers_close(e);
    if (e->io)
        e->io->close(e->io_priv);
    if (e->ssd)
        e->ssd->ops->close(e->ssd);
    kvt_ssd_pipe_fini(e);
    kvt_meta_free(&e->meta_bytes, e->ssd_tier.meta,
                  (size_t)(e->cfg.ssd_bytes / e->page_bytes) * sizeof(*e->ssd_tier.meta));
    free(e->ssd_tier.trans);
    free(e->ssd_tier.queue);
    free(e->ssd_tier.dels);
    e->io = NULL;
    e->ssd = NULL;
    e->ssd_tier.meta = NULL;
}

/* ------------------------------------------------------------- queueing */

uint64_t kvt_ssd_durable_room(const kvt_engine *e)
{
    uint64_t usable = kvt_slots(e)->usable(e->ssd);
    uint64_t spare = e->cfg.queue_depth < usable / 16 ? e->cfg.queue_depth : usable / 16;
    if (spare < 1)
        spare = 1;
    return usable > spare ? usable - spare : 0;
}

bool kvt_ssd_waiting(const kvt_engine *e)
{
    return e->ssd_tier.busy || e->ssd_tier.ndels || e->callers.reading;
}

static int queue_push(kvt_engine *e, struct kvt_ssd_req req)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    KVT_ASSERT_LOCKED(e);
    if (t->queued == t->queue_cap) {
        uint32_t nc = t->queue_cap ? t->queue_cap * 2 : 64;
        struct kvt_ssd_req *nq = realloc(t->queue, nc * sizeof(*nq));
        if (!nq)
            return -ENOMEM;
        t->queue = nq;
        t->queue_cap = nc;
    }
    t->queue[t->queued++] = req;
    if (!t->busy++)
        kvt_ssd_pipe_disk_starts(e); /* the disk starts working */
    e->up.wake_mover(e);
    return 0;
}

void kvt_ssd_queue_read(kvt_engine *e, uint32_t pg)
{
    kvt_page_xfer_begin(e, pg, XFER_SSD_READ, false);
    if (queue_push(e, (struct kvt_ssd_req){ .pg = pg, .slot = KVT_NONE }) < 0)
        kvt_page_xfer_cancel(e, pg); /* the caller sees no progress and fails with EFULL */
}

/* A transient read is its page and its buffer: two callers may read the
 * same page, one after the other, before the first has taken its result. */
struct kvt_transient *kvt_ssd_transient_of(kvt_engine *e, uint32_t pg, void *buf)
{
    for (uint32_t i = 0; i < e->ssd_tier.ntrans; i++)
        if (e->ssd_tier.trans[i].pg == pg && e->ssd_tier.trans[i].buf == buf)
            return &e->ssd_tier.trans[i];
    return NULL;
}

static int queue_transient(kvt_engine *e, uint32_t pg, void *buf, uint8_t tries)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    if (t->ntrans == t->trans_cap) {
        uint32_t nc = t->trans_cap ? t->trans_cap * 2 : 8;
        struct kvt_transient *nt = realloc(t->trans, nc * sizeof(*nt));
        if (!nt)
            return -ENOMEM;
        t->trans = nt;
        t->trans_cap = nc;
    }
    t->trans[t->ntrans++] = (struct kvt_transient){ pg, buf, 1, false };
    kvt_page_xfer_begin(e, pg, XFER_SSD_READ, false);
    if (queue_push(e, (struct kvt_ssd_req){ .pg = pg, .slot = KVT_NONE, .buf = buf,
                                            .tries = tries }) < 0) {
        kvt_page_xfer_cancel(e, pg);
        t->ntrans--;
        return -ENOMEM;
    }
    return 0;
}

int kvt_ssd_queue_read_transient(kvt_engine *e, uint32_t pg, void *buf)
{
    return queue_transient(e, pg, buf, 0);
}

int kvt_ssd_caller_retry(kvt_engine *e, uint32_t pg, void *buf)
{
    return queue_transient(e, pg, buf, 1);
}

int kvt_ssd_transient_result(kvt_engine *e, uint32_t pg, void *buf, bool *kept)
{
    struct kvt_transient *t = kvt_ssd_transient_of(e, pg, buf);
    if (!t)
        return -ENOENT;
    int r = t->res;
    if (kept)
        *kept = t->kept;
    if (r != 1)
        *t = e->ssd_tier.trans[--e->ssd_tier.ntrans];
    return r;
}

/* Every SSD slot is taken: give up the SSD copy of a page that is current in
 * DRAM or HBM too. Its index entry is deleted by the mover, which frees the
 * slot; the caller waits for that (-EAGAIN). Costs a scan of the pages, so
 * only when some page has such a copy (second_copies): a full cache comes
 * here for about every page it stores, and mostly there is none
 * (docs/replay.md#measurements). */
static int release_redundant_ssd(kvt_engine *e, uint32_t except)
{
    for (uint32_t pg = 0; e->pages.second_copies && pg < e->pt.used; pg++) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (pg == except || !(p->flags & PG_HASHED) || !kvt_page_idle(p) ||
            !kvt_page_second_copy(p->flags))
            continue;
        kvt_page_drop_copy(e, pg, KVT_TIER_SSD);
        kvt_ssd_forget(e, pg);
        return -EAGAIN;
    }
    return e->ssd_tier.ndels ? -EAGAIN : KVT_EFULL; /* deletions in flight free slots too */
}

int kvt_ssd_queue_write(kvt_engine *e, uint32_t pg, bool evict)
{
    int err = 0;
    uint32_t slot = kvt_slots(e)->take(e->ssd, &err);
    /* Only an eviction may take another page's SSD copy, and only without
     * persist: a flush doing so would undo its own work, and with persist
     * a durable copy given up for room let a crash lose a flushed page or
     * serve its older version. There the capacity is what the SSD holds
     * durably (kvt_ssd_durable_room), so a slot is always coming: from a
     * rewrite's commit, which frees its old slot, or a deletion
     * (docs/design.md#when-the-engine-is-full). */
    if (slot == KVT_NONE && err == KVT_EFULL && evict && !e->cfg.persist)
        return release_redundant_ssd(e, pg);
    if (slot == KVT_NONE && err == KVT_EFULL)
        return kvt_ssd_waiting(e) ? -EAGAIN : KVT_EFULL; /* commits and deletions free slots */
    if (slot == KVT_NONE) {
        e->ssd_tier.st.errors_io++;
        return err;
    }
    kvt_page_xfer_begin(e, pg, XFER_SSD_WRITE, false);
    if (queue_push(e, (struct kvt_ssd_req){ .pg = pg, .slot = slot, .write = true,
                                            .evict = evict }) < 0) {
        kvt_page_xfer_cancel(e, pg);
        kvt_slots(e)->give(e->ssd, slot);
        return -ENOMEM;
    }
    return 0;
}

int kvt_ssd_queue_written(kvt_engine *e, uint32_t pg, const struct kvt_caller_write *w,
                          uint32_t page_crc)
{
    uint32_t crc = kvt_ssd_raw_crc(e, &kvt_pg(&e->pt, pg)->key, w->generation, page_crc);
    kvt_page_xfer_begin(e, pg, XFER_SSD_WRITE, false);
    if (queue_push(e, (struct kvt_ssd_req){ .pg = pg, .slot = w->slot, .write = true,
                                            .written = true, .crc = crc,
                                            .generation = w->generation }) < 0) {
        kvt_page_xfer_cancel(e, pg);
        kvt_slots(e)->give(e->ssd, w->slot);
        return -ENOMEM;
    }
    return 0;
}

void kvt_ssd_forget(kvt_engine *e, uint32_t pg)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (!e->ssd || p->ssd_slot == KVT_NONE)
        return;
    if (t->ndels == t->dels_cap) {
        uint32_t nc = t->dels_cap ? t->dels_cap * 2 : 64;
        struct kvt_ssd_del *nd = realloc(t->dels, nc * sizeof(*nd));
        if (!nd) {
            /* Cannot remember the deletion: keep the slot out of use rather
             * than risk a stale index entry naming a reused slot. */
            kvt_slots(e)->retire(e->ssd, p->ssd_slot);
            p->ssd_slot = KVT_NONE;
            return;
        }
        t->dels = nd;
        t->dels_cap = nc;
    }
    t->dels[t->ndels++] = (struct kvt_ssd_del){ p->key, p->ssd_slot };
    p->ssd_slot = KVT_NONE;
    e->up.wake_mover(e);
}

/* ------------------------------------------------------------- read errors */

bool kvt_ssd_read_keeps_page(int res)
{
    return res != KVT_ECORRUPT && res != -EIO;
}

int kvt_ssd_read_error(kvt_engine *e, uint32_t pg, int err)
{
    const struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (!err)
        err = e->ssd_tier.read_err ? e->ssd_tier.read_err : -EIO;
    kvt_page_read_failure_told(e, pg); /* the next load tries again */
    return kvt_fail(err, "page (%llu,%u,%u) could not be read from SSD (%s); its copy there is "
                    "kept", (unsigned long long)p->key.id, p->key.layer, p->key.index,
                    kvt_strerror(err));
}

/* ------------------------------------------------------------- bulk moves */

/* Waits (unlocked) until the pipe has run everything queued, deletions
 * included, or the engine failed. */
static void wait_idle(kvt_engine *e)
{
    while (kvt_ssd_waiting(e) && !e->failed) {
        struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_tier.progress };
        kvt_wait_on(e, &w, false);
    }
}

/* Reads every page that is only on SSD into DRAM, as far as free DRAM slots
 * go, and waits. Returns how many were read. */
uint64_t kvt_ssd_read_all(kvt_engine *e)
{
    uint64_t n = 0;
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!(p->flags & PG_HASHED) || p->xfer != XFER_NONE ||
            (p->flags & (PG_VALID_HBM | PG_VALID_DRAM)) || !(p->flags & PG_VALID_SSD))
            continue;
        if (kvt_dram_slot(e, pg, 0) == KVT_NONE)
            break;
        kvt_ssd_queue_read(e, pg);
        n++;
    }
    while (e->ssd_tier.busy && !e->failed) {
        struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_tier.progress };
        kvt_wait_on(e, &w, false);
    }
    return n;
}

/* ------------------------------------------------------------- flush */

/* A page the flush must see on SSD: held in HBM or DRAM without a current
 * SSD copy when the flush began. Its DRAM copy may be given up while the
 * flush waits (a DRAM copy that HBM also holds is a cache other calls take
 * for room), so "still missing" is "still no SSD copy", not "still in
 * DRAM": counting only DRAM copies let a flush return 0 for an overwrite
 * that was only in HBM, and a crash then served the version before it
 * (docs/design.md#when-the-engine-is-full).
 *
 * A page put after that (a new key, or a new version that replaced the
 * page) is not the flush's to wait for: counting it would let a caller
 * that keeps putting make every flush fail. A replaced page's record may
 * be handed out again to a newer version of the same key, so the record's
 * birth, not its key, says it is the same page (the hammer's flushes failed
 * with -EIO that way while puts kept replacing a hot key). */
static bool needs_ssd_copy(const struct kvt_page *p)
{
    return (p->flags & PG_HASHED) && (p->flags & (PG_VALID_HBM | PG_VALID_DRAM)) &&
           !(p->flags & (PG_VALID_SSD | PG_CREATED));
}

static bool still_missing(kvt_engine *e, const struct kvt_flush_item *it)
{
    if (it->pg >= e->pt.used)
        return false;
    const struct kvt_page *p = kvt_pg(&e->pt, it->pg);
    return needs_ssd_copy(p) && p->birth == it->birth;
}

int kvt_ssd_flush_begin(kvt_engine *e, struct kvt_flush_set *fs)
{
    size_t n = 0;
    for (uint32_t pg = 0; pg < e->pt.used; pg++)
        n += needs_ssd_copy(kvt_pg(&e->pt, pg));
    *fs = (struct kvt_flush_set){ malloc((n ? n : 1) * sizeof(*fs->items)), 0, 0, 0 };
    if (!fs->items)
        return kvt_fail(-ENOMEM, "out of memory");
    for (uint32_t pg = 0; pg < e->pt.used; pg++)
        if (needs_ssd_copy(kvt_pg(&e->pt, pg)))
            fs->items[fs->n++] = (struct kvt_flush_item){ pg, kvt_pg(&e->pt, pg)->birth };
    e->ssd_tier.flushes++;
    return 0;
}

void kvt_ssd_flush_end(kvt_engine *e, struct kvt_flush_set *fs)
{
    e->ssd_tier.flushes--;
    free(fs->items);
    fs->items = NULL;
}

bool kvt_ssd_flushing(const kvt_engine *e)
{
    return e->ssd_tier.flushes != 0;
}

/* Whether the flush queues a write of it now: still missing, with a DRAM
 * copy and nothing in flight. */
static bool flush_queues(kvt_engine *e, const struct kvt_flush_item *it)
{
    if (!still_missing(e, it))
        return false;
    const struct kvt_page *p = kvt_pg(&e->pt, it->pg);
    return p->xfer == XFER_NONE && (p->flags & PG_VALID_DRAM);
}

/* Waits (unlocked) until the pipe has taken from the queue once more, if it
 * holds anything: what was queued so far goes to the disk while the rest is
 * queued. */
static void hand_over(kvt_engine *e)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    uint64_t seen = t->takes;
    t->take_waiters++;
    while (t->takes == seen && t->queued && !e->failed)
        pthread_cond_wait(&t->cv, &e->lock);
    t->take_waiters--;
}

/* Queues a write of every listed page still missing that has a DRAM copy
 * and nothing in flight; fs->err gets why one could not be queued.
 *
 * The slots come first, all of them in one allocation (the store's
 * prepare): ext4 makes a file's allocation wait for the direct I/O in
 * flight on it, so blocks taken once the writes have started would stall
 * the queueing. And the pipe gets the first queue depth of writes before
 * the rest are queued: each costs about a microsecond under the lock the
 * mover needs to start, and the disk sat idle through all of it, 2-3 ms at
 * the head of a 256 MiB flush (docs/performance.md#the-flushs-head). */
static void flush_queue(kvt_engine *e, struct kvt_flush_set *fs)
{
    uint32_t n = 0, k = 0;
    for (size_t i = 0; i < fs->n; i++)
        n += flush_queues(e, &fs->items[i]);
    kvt_slots_prepare(e, n);
    for (size_t i = 0; i < fs->n; i++) {
        if (!flush_queues(e, &fs->items[i]))
            continue;
        int q = kvt_ssd_queue_write(e, fs->items[i].pg, false);
        if (q < 0 && q != -EAGAIN)
            fs->err = q;
        if (q == 0 && ++k == e->cfg.queue_depth && k < n)
            hand_over(e);
    }
}

int64_t kvt_ssd_flush_pass(kvt_engine *e, struct kvt_flush_set *fs)
{
    /* Waited for even with nothing to write: deletions being committed
     * keep the tier busy, and a flush covers them too. */
    flush_queue(e, fs);
    wait_idle(e);
    if (e->failed)
        return kvt_check_failed(e);
    int64_t missing = 0;
    fs->on_device = 0;
    for (size_t i = 0; i < fs->n; i++) {
        if (!still_missing(e, &fs->items[i]))
            continue;
        uint8_t x = kvt_pg(&e->pt, fs->items[i].pg)->xfer;
        fs->on_device += x == XFER_UP || x == XFER_DOWN;
        missing++;
    }
    return missing;
}

int kvt_ssd_flush_error(kvt_engine *e, const struct kvt_flush_set *fs, int64_t missing)
{
    /* The error as it happened: a full tier, a full disk, a refused file;
     * -EIO only when the writes themselves failed on the medium. */
    int err = fs->err ? fs->err : e->ssd_tier.write_err;
    if (!err) /* no write failed: the pages stayed in other calls' hands */
        return kvt_fail(-EBUSY, "%lld pages could not be written to SSD: other calls kept them "
                        "busy (copies in flight) through every pass", (long long)missing);
    return kvt_fail(err, "%lld pages could not be written to SSD (%s)", (long long)missing,
                    kvt_strerror(err));
}

/* Pages only in DRAM (the benchmark's), so no pass needs HBM's help. */
int kvt_ssd_flush(kvt_engine *e)
{
    struct kvt_flush_set fs;
    int r = kvt_ssd_flush_begin(e, &fs);
    if (r < 0)
        return r;
    int64_t prev = INT64_MAX, missing = 0;
    for (int pass = 0; pass < 8; pass++) {
        missing = kvt_ssd_flush_pass(e, &fs);
        if (missing <= 0 || missing >= prev)
            break;
        prev = missing;
    }
    r = missing < 0 ? (int)missing : missing ? kvt_ssd_flush_error(e, &fs, missing) : 0;
    kvt_ssd_flush_end(e, &fs);
    return r;
}

/* The condition variable waits for SSD progress use (kvt_wait_on), with or
 * without an SSD tier: engine_alloc to engine_free. */
void kvt_ssd_tier_init(kvt_engine *e)
{
    pthread_cond_init(&e->ssd_tier.cv, NULL);
}

void kvt_ssd_tier_fini(kvt_engine *e)
{
    pthread_cond_destroy(&e->ssd_tier.cv);
}

/* ------------------------------------------------------------- the tier's state */

/* What the pipe (ssd_pipe.c), the callers' reads (ssd_caller.c) and the
 * DRAM tier change of struct kvt_ssd_tier, which this file owns: the queue,
 * the deletions, the busy count and the progress waiters watch, the errors
 * to report. All locked. */

void kvt_ssd_queue_drain(kvt_engine *e, kvt_ssd_take_fn take, void *ctx)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    uint32_t kept = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < t->queued; k++) {
            const struct kvt_ssd_req *q = &t->queue[k];
            if (q->pg == KVT_NONE || q->write != (pass == 1))
                continue;
            if (!take(e, q, ctx))
                break;
            t->queue[k].pg = KVT_NONE; /* taken */
        }
    }
    for (uint32_t k = 0; k < t->queued; k++) /* the rest, in their order */
        if (t->queue[k].pg != KVT_NONE)
            t->queue[kept++] = t->queue[k];
    t->queued = kept;
    t->takes++;
    if (t->take_waiters)
        pthread_cond_broadcast(&t->cv);
}

struct kvt_ssd_del *kvt_ssd_take_dels(kvt_engine *e, uint32_t *n)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    struct kvt_ssd_del *dels = t->dels;
    *n = t->ndels;
    t->dels = NULL;
    t->ndels = t->dels_cap = 0;
    /* Deletions being committed keep the tier busy (kvt_ssd_done ends it),
     * so a flush that waits for the tier to go idle returns only after the
     * drops it must make durable are in the index. */
    t->busy += *n != 0;
    return dels;
}

void kvt_ssd_done(kvt_engine *e, uint64_t jobs, bool progress)
{
    struct kvt_ssd_tier *t = &e->ssd_tier;
    t->busy -= jobs;
    if (progress) {
        t->progress++;
        pthread_cond_broadcast(&t->cv);
    }
}

void kvt_ssd_callers_done(kvt_engine *e)
{
    /* Others waiting on these pages look again (as after the mover's). */
    e->ssd_tier.progress++;
    pthread_cond_broadcast(&e->ssd_tier.cv);
}

void kvt_ssd_slot_meta(kvt_engine *e, uint32_t slot, struct kvt_ssd_meta m)
{
    e->ssd_tier.meta[slot] = m;
}

void kvt_ssd_read_kept(kvt_engine *e, int err)
{
    e->ssd_tier.read_err = err;
}

void kvt_ssd_write_failed(kvt_engine *e, int err, bool evict)
{
    e->ssd_tier.write_err = err;
    if (evict)
        e->ssd_tier.evict_err = err;
}

int kvt_ssd_take_evict_err(kvt_engine *e)
{
    int err = e->ssd_tier.evict_err;
    e->ssd_tier.evict_err = 0;
    return err;
}

void kvt_ssd_slot_set(kvt_engine *e, uint32_t pg, uint32_t slot)
{
    kvt_pg(&e->pt, pg)->ssd_slot = slot;
}

void kvt_ssd_slot_move(kvt_engine *e, uint32_t from, uint32_t to)
{
    kvt_pg(&e->pt, to)->ssd_slot = kvt_pg(&e->pt, from)->ssd_slot;
    kvt_pg(&e->pt, from)->ssd_slot = KVT_NONE;
}
