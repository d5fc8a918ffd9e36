/*
 * buffers.c — kvt_put and kvt_get: pages in and out of engine-owned buffers
 * (the storage-backend shape of HiCache and LMCache).
 *
 * put reserves every slot first, copies with the lock dropped, and only then
 * makes the new pages visible under their keys: a concurrent get sees the
 * old page or the new one, never a half-copied slot. get marks its pages
 * busy so that no slot it reads is freed or reused under it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/codec.h"
#include "api/api.h"

struct reservation {
    uint32_t pg;
    int tier;
    void *dst;  /* the slot's memory, resolved under the lock: the page table may be
                   reallocated by another thread while the copy runs unlocked */
    bool crc;   /* put_copy_in took the CRC32C of the bytes, in page_crc */
    uint32_t page_crc;
    struct kvt_caller_write *w; /* the put's own write of it to SSD (res 0), or NULL */
};

/* What one kvt_put works in: its batch's reservations, and with writes of
 * its own (kvt_ssd_caller_writes) their records and requests. */
struct put_work {
    struct reservation *res;
    struct kvt_caller_write *w;     /* NULL: the put writes nothing itself */
    struct kvt_caller_scratch io;   /* batch x pieces of a page */
};

/* Whether the policy sees calls (it has batch): only then do kvt_put and
 * kvt_get gather their pages for it. */
static bool policy_sees_calls(const kvt_engine *e)
{
    return e->pol->batch != NULL;
}

/* Tells such a policy which pages one call used, in the caller's order; a
 * page gone meanwhile is KVT_NONE, and so is one whose record now holds
 * another key (keys[i] is pgs[i]'s; NULL: not checked). pgs is scratch. */
static void report_batch(kvt_engine *e, int kind, uint32_t *pgs, const kvt_key *keys, size_t n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n; i++) {
        if (pgs[i] == KVT_NONE)
            continue;
        const struct kvt_page *p = kvt_pg(&e->pt, pgs[i]);
        if (!(p->flags & PG_HASHED) || (keys && !kvt_key_eq(&p->key, &keys[i])))
            pgs[i] = KVT_NONE;
    }
    e->pol->batch(e->pol_priv, kind, pgs, n);
}

/* A put batch found the slots it needs held by other calls (KVT_SLOTS_CALLS,
 * judged with its own reservations set apart) and has given its own back:
 * whether to start the batch again, after waiting for one to be let go. It
 * never waits for other calls holding a reservation: two puts each holding
 * half of DRAM and waiting for the other's would wait for ever. */
static bool put_wait_slots(kvt_engine *e, enum kvt_slot_hold hold, uint64_t *waited)
{
    return hold == KVT_SLOTS_CALLS && kvt_room_wait_let_go(e, waited);
}

/* The key whose existing page another call is reading (a kvt_get holds it
 * busy for the call's time), or NULL. *pinned: the first key whose page is
 * pinned instead (kvt_acquire: held until its caller lets go), or NULL. */
static const kvt_key *key_read_by_others(kvt_engine *e, const kvt_key *keys, size_t n,
                                         const kvt_key **pinned)
{
    const kvt_key *busy = NULL;
    *pinned = NULL;
    for (size_t i = 0; i < n && !*pinned; i++) {
        uint32_t old = kvt_ptable_find(&e->pt, &keys[i]);
        const struct kvt_page *p = old == KVT_NONE ? NULL : kvt_pg(&e->pt, old);
        if (p && p->pins)
            *pinned = &keys[i];
        else if (p && p->busy && !busy)
            busy = &keys[i];
    }
    return busy;
}

/* Before a put (or a batch of it) reserves anything (locked; may wait
 * unlocked, holding nothing): a key whose page is pinned is -EBUSY at once;
 * one being read by another call is waited for, the reader keeping the old
 * version. *waited: as wait_let_go's, one for the whole kvt_put. */
static int put_wait_readers(kvt_engine *e, const kvt_key *keys, size_t n, uint64_t *waited)
{
    for (;;) {
        const kvt_key *pinned, *busy = key_read_by_others(e, keys, n, &pinned);
        const kvt_key *k = pinned ? pinned : busy;
        if (!k)
            return 0;
        if (!pinned && kvt_room_wait_let_go(e, waited))
            continue; /* every key again: the table may have changed */
        if (e->failed)
            return kvt_check_failed(e);
        return kvt_fail(-EBUSY, "page (%llu,%u,%u) is %s", (unsigned long long)k->id, k->layer,
                        k->index, pinned ? "pinned"
                                         : "still being read by another call after the put "
                                           "waited for it");
    }
}

static void unreserve(kvt_engine *e, struct reservation *res, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (res[i].w)
            kvt_ssd_caller_write_cancel(e, res[i].w, 1);
        res[i].w = NULL;
        kvt_page_abandon(e, res[i].pg);
    }
}

static void *slot_ptr(kvt_engine *e, uint32_t pg, int tier)
{
    return kvt_arena_ptr(kvt_arena_of(e, tier), kvt_pg(&e->pt, pg)->slot[tier]);
}

static enum kvt_copy_kind copy_kind(bool from_dev, bool to_dev)
{
    if (from_dev)
        return to_dev ? KVT_COPY_D2D : KVT_COPY_D2H;
    return to_dev ? KVT_COPY_H2D : KVT_COPY_H2H;
}

/* Makes the reserved, filled pages visible under their keys. No old page
 * of theirs is pinned, read or on its way to or from SSD (put_batch saw to
 * it, the lock held since). */
static int put_commit(kvt_engine *e, const kvt_key *keys, struct reservation *res, size_t n)
{
    int r = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t old = kvt_ptable_find(&e->pt, &keys[i]);
        if (old != KVT_NONE) {
            /* The old version's index entry stays until the new version's
             * replaces it (copy-on-write, as for a dirty release): deleting
             * it now would let a crash lose a flushed page to an overwrite
             * that never reached SSD. The new page takes over the slot. */
            kvt_ssd_slot_move(e, old, res[i].pg);
            kvt_page_destroy(e, old);
        }
        kvt_page_busy_end(e, res[i].pg);
        int ins = kvt_ptable_insert(&e->pt, res[i].pg);
        if (ins < 0) {
            r = kvt_fail(ins, "out of memory for the page index");
            unreserve(e, &res[i], 1);
            continue;
        }
        kvt_page_now_valid(e, res[i].pg, res[i].tier);
        if (res[i].crc)
            kvt_page_put_crc(e, res[i].pg, res[i].page_crc);
        kvt_page_indexed(e, res[i].pg);
        kvt_page_sync(e, res[i].pg, true);
        e->gets.st.bytes_put += e->page_bytes;
        if (res[i].w && res[i].w->res == 0)
            (void)kvt_ssd_queue_written(e, res[i].pg, res[i].w, res[i].page_crc);
        res[i].w = NULL; /* handed on, or given back with the -ENOMEM */
    }
    return r;
}

/* Whether the page under one of keys[0..n) is being written to or read
 * from SSD. Locked. */
static bool old_on_the_move(kvt_engine *e, const kvt_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t old = kvt_ptable_find(&e->pt, &keys[i]);
        uint8_t x = old == KVT_NONE ? XFER_NONE : kvt_pg(&e->pt, old)->xfer;
        if (x == XFER_SSD_WRITE || x == XFER_SSD_READ)
            return true;
    }
    return false;
}

/* Whether an overwrite keeps its old page until the new one replaces it,
 * full or not: with persist and no KVT_FLAG_EVICT, where giving the old
 * page up for room would let a crash before the new version is written
 * lose a flushed key. It needs no room of its own: the record it adds goes
 * at the commit, and the capacity keeps SSD slots spare for the rewrite
 * (kvt_ssd_durable_room). A cache may lose a key for room anyway. */
static bool keeps_old(const kvt_engine *e, uint32_t old)
{
    return old != KVT_NONE && kvt_persisted(e) && !(e->cfg.flags & KVT_FLAG_EVICT);
}

/* Reserves a record and a slot for each of the batch's n pages (locked; may
 * wait unlocked): waits first for other calls reading its keys, and starts
 * again, holding nothing, when other calls hold the slots it needs. 0 with
 * all n reserved in res[], or an error with none. */
static int put_reserve(kvt_engine *e, const kvt_key *keys, size_t n, struct reservation *res,
                       uint64_t *waited)
{
    for (;;) {
        int r = put_wait_readers(e, keys, n, waited);
        if (r < 0)
            return r;
        bool tight;
        enum kvt_slot_hold hold = KVT_SLOTS_HELD;
        uint32_t coming = kvt_room_ahead(e, keys, n, &tight);
        size_t k = 0;
        for (; k < n && r == 0; k++) {
            uint32_t old = kvt_ptable_find(&e->pt, &keys[k]);
            if (keeps_old(e, old) && e->pt.live > kvt_capacity(e)) {
                /* More pages than the SSD holds durably (a store reopened
                 * with less room, slots gone bad): a rewrite could not be
                 * made durable. Refused; the old version stays. */
                r = kvt_fail(KVT_EFULL, "every tier is full: %u pages held, more than the %llu "
                             "the SSD holds durably; an overwrite is refused", e->pt.live,
                             (unsigned long long)kvt_capacity(e));
                break;
            }
            if (!keeps_old(e, old) && (tight || kvt_admit(e) < 0)) {
                /* Full (or room_ahead's room is the new keys'): an overwrite
                 * may give up the old page to make room. If the put then
                 * fails the key is absent, never half-written. */
                if (old != KVT_NONE && !kvt_page_in_use(kvt_pg(&e->pt, old)))
                    kvt_page_destroy(e, old);
                while ((r = kvt_admit(e)) < 0 && kvt_evict_one(e) == 0)
                    ;
                if (r < 0)
                    break;
            }
            uint32_t pg = kvt_page_new(e);
            if (pg == KVT_NONE) {
                r = kvt_fail(-ENOMEM, "out of memory for a page record");
                break;
            }
            kvt_page_key(e, pg, keys[k]);
            (void)kvt_page_busy_begin(e, pg); /* a fresh record: never at the limit */
            res[k] = (struct reservation){ .pg = pg };
            if ((r = kvt_room_slot(e, pg, &res[k].tier, &coming, k, &hold)) < 0) {
                kvt_page_abandon(e, pg);
                break;
            }
        }
        if (r == 0)
            return 0;
        unreserve(e, res, k);
        if (r != KVT_EFULL || !put_wait_slots(e, hold, waited))
            return e->failed ? kvt_check_failed(e) : r; /* failed while it waited: that error */
        kvt_clear_error();
    }
}

/* A put's copy into DRAM moves this much at a time, checksummed just
 * before: the checksum's read brings the step into the cache (1 MiB: within
 * any server core's L2 + its share of L3), where the copy then reads it,
 * and the copy streams into the slot past the cache (device_host.c), so
 * the source is read from memory once and the slot written once. The
 * checksum is of the source's bytes as the put read them: a caller that
 * rewrites its buffer during the call (kvt_put reads it during the call)
 * can leave a slot that does not match it, which a read from SSD then
 * counts bad and serves nothing from. */
#define PUT_CRC_CHUNK ((size_t)1 << 20)

/* Where a put's copy into its slots has got to: its pass (0: the pages it
 * writes down itself, in the order of its writes; 1: the others), page i
 * of res, its bytes before at copied, crc their CRC32C so far (seed 0), r
 * the first error; done: bytes of the pages of pass 0 in place. */
struct copy_cursor {
    kvt_engine *e;
    struct reservation *res;
    const void *const *src;
    size_t n, i, at, done;
    int pass;
    int src_on_device;
    uint32_t crc;
    int r;
};

/* The cursor on the next page of its pass, or past the last (i == n). */
static void cursor_seek(struct copy_cursor *k)
{
    for (;;) {
        while (k->i < k->n && (k->res[k->i].w != NULL) != (k->pass == 0))
            k->i++;
        if (k->i < k->n || k->pass == 1)
            return;
        k->pass = 1;
        k->i = 0;
    }
}

/* Copies the next step of the put's pages in (unlocked: the slots are the
 * batch's own); false once every page is in, or a copy failed. *ready:
 * bytes of the pages the put writes down itself (pass 0) now in place. A
 * page from host memory bound for DRAM, in an engine that writes pages
 * down raw, goes PUT_CRC_CHUNK at a time, each step checksummed right
 * before its copy (res.crc): the write to SSD then needs no pass of its
 * own over the bytes, and the copy reads the bytes the checksum just
 * brought into the cache (docs/performance.md#put-checksum,
 * #put-copy-traffic). While the put writes its own pages
 * down, it looks at their completions after each step: in steps of a whole
 * 4 MiB piece the disk waited about 0.5 ms a piece for the next look. Any
 * other page goes whole: a copy from the device in pieces would wait for
 * the device once a piece, and a codec's checksum is of the encoded bytes. */
static bool copy_step(void *arg, size_t *ready)
{
    struct copy_cursor *k = arg;
    kvt_engine *e = k->e;
    cursor_seek(k);
    if (k->r < 0 || k->i == k->n) {
        *ready = k->done;
        return false;
    }
    struct reservation *x = &k->res[k->i];
    enum kvt_copy_kind kind = copy_kind(k->src_on_device, x->tier == KVT_TIER_HBM);
    size_t pb = e->page_bytes, left = pb - k->at;
    size_t len = x->crc && left > PUT_CRC_CHUNK ? PUT_CRC_CHUNK : left;
    uint8_t *dst = (uint8_t *)x->dst + k->at;
    const uint8_t *src = (const uint8_t *)k->src[k->i] + k->at;
    if (x->crc)
        k->crc = kvt_crc32c(k->crc, src, len);
    k->r = e->hbm.dev->copy_sync(e->hbm.dev_priv, kind, dst, src, len);
    if (k->r == 0) {
        k->at += len;
        k->done += k->pass == 0 ? len : 0;
    }
    *ready = k->done;
    if (k->r == 0 && k->at == pb) {
        x->page_crc = k->crc;
        k->i++;
        k->at = 0;
        k->crc = 0;
        cursor_seek(k);
    }
    return k->r == 0 && k->i < k->n;
}

/* The copy without writes of the put's own (locked; unlocks to copy). */
static void copy_all(struct copy_cursor *k)
{
    size_t ready;
    kvt_unlock(k->e);
    while (copy_step(k, &ready))
        ;
    kvt_lock(k->e);
}

/* Copies the n pages in (unlocked while copying), checksummed where
 * copy_step says, while the write-backs use enough of the checksums
 * (kvt_put_crc_odds). With persist, a page from host memory bound for DRAM
 * is also written down by the put itself, each piece as soon as it is
 * copied (kvt_ssd_caller_write); its checksum is then always taken, the
 * record's. */
static int put_copy_in(kvt_engine *e, struct put_work *pw, size_t n, const void *const *src,
                       int src_on_device)
{
    struct reservation *res = pw->res;
    bool crc = e->ssd && e->cfg.codec == KVT_CODEC_NONE && !src_on_device;
    size_t nw = 0;
    for (size_t i = 0; i < n; i++) {
        res[i].dst = slot_ptr(e, res[i].pg, res[i].tier);
        res[i].w = NULL;
        if (pw->w && res[i].tier == KVT_TIER_DRAM) {
            pw->w[nw] = (struct kvt_caller_write){ .pg = res[i].pg, .buf = res[i].dst };
            res[i].w = &pw->w[nw++];
            res[i].crc = true;
        } else {
            res[i].crc = crc && res[i].tier == KVT_TIER_DRAM && kvt_put_crc_take(e);
        }
    }
    struct copy_cursor k = { .e = e, .res = res, .src = src, .n = n,
                             .src_on_device = src_on_device };
    if (!nw || !kvt_ssd_caller_write(e, pw->w, nw, &pw->io, copy_step, &k))
        copy_all(&k);
    for (size_t i = 0; i < n; i++)
        if (res[i].w && res[i].w->res != 0)
            res[i].w = NULL; /* not written here: the mover writes it down later */
    return k.r < 0 ? kvt_fail(k.r, "copying a page in failed: %s", kvt_strerror(k.r)) : 0;
}

/* One batch of a put (locked; unlocks to copy): reserves a slot for every
 * page, copies, then makes them visible. All or nothing for the batch. */
static int put_batch(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src,
                     int src_on_device, struct put_work *pw, uint32_t *pgs, uint64_t *waited)
{
    struct reservation *res = pw->res;
    int r;
    for (;;) {
        if ((r = put_reserve(e, keys, n, res, waited)) < 0)
            return r;
        if ((r = put_copy_in(e, pw, n, src, src_on_device)) < 0)
            break;
        /* An old version being written to or read from SSD finishes first:
         * its slot and index entry pass to the new page only when they are
         * settled. Every key is looked at again after each wait: while the
         * lock was let go, the mover may have started a read of one
         * already passed. */
        while (!e->failed && old_on_the_move(e, keys, n)) {
            struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_tier.progress };
            kvt_wait_on(e, &w, false);
        }
        if ((r = kvt_check_failed(e)) < 0)
            break; /* the engine failed while the put waited */
        /* A get that began reading an old version while we copied, or a
         * pin that came meanwhile: the batch gives its slots back, all of
         * it (a batch is all or nothing), and starts again, waiting for the
         * reader holding nothing; a pin is -EBUSY then, nothing stored. */
        const kvt_key *pinned;
        if (!key_read_by_others(e, keys, n, &pinned) && !pinned)
            break;
        unreserve(e, res, n);
    }
    if (r < 0) {
        unreserve(e, res, n);
        return r;
    }
    r = put_commit(e, keys, res, n);
    if (pgs)
        for (size_t i = 0; i < n; i++)
            pgs[i] = res[i].pg;
    kvt_mover_kick(e);
    return r;
}

/* Pages of one put batch: every page of a batch holds a slot in HBM or DRAM
 * until the batch is committed, so a put larger than that goes in batches
 * of half of DRAM (at least one page), each written down to SSD as the next
 * needs room. */
static size_t put_batch_pages(const kvt_engine *e)
{
    size_t b = (e->dram.arena.nslots - 1) / 2;
    return b ? b : 1;
}

static void put_work_free(struct put_work *pw)
{
    free(pw->res);
    free(pw->w);
    free(pw->io.reqs);
    free(pw->io.rp);
    *pw = (struct put_work){ 0 };
}

/* pw for batches of up to batch pages; the writes' part only where the put
 * may write its own pages (kvt_ssd_caller_writes: persist), and without
 * memory for it the put goes without (the mover writes them down). 0 or
 * -ENOMEM (kvt_fail'ed). */
static int put_work_alloc(const kvt_engine *e, struct put_work *pw, size_t batch, int src_on_device)
{
    pw->res = malloc(batch * sizeof(*pw->res));
    if (!pw->res)
        return kvt_fail(-ENOMEM, "out of memory");
    if (src_on_device || !kvt_ssd_caller_writes(e))
        return 0;
    size_t per = kvt_ssd_pieces(e, e->page_bytes);
    pw->w = malloc(batch * sizeof(*pw->w));
    pw->io.reqs = malloc(batch * per * sizeof(*pw->io.reqs));
    pw->io.rp = malloc(batch * per * sizeof(*pw->io.rp));
    if (!pw->w || !pw->io.reqs || !pw->io.rp) {
        free(pw->w);
        free(pw->io.reqs);
        free(pw->io.rp);
        pw->w = NULL;
        pw->io.reqs = NULL;
        pw->io.rp = NULL;
    }
    return 0;
}

int kvt_put_local(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src,
                  int src_on_device)
{
    if (n && (!keys || !src))
        return kvt_fail(-EINVAL, "keys and src must not be NULL");
    for (size_t i = 0; i < n; i++)
        if (!src[i])
            return kvt_fail(-EINVAL, "src[%zu] is NULL", i);
    KVT_ENTER(e);
    int r = kvt_check_failed(e);
    uint64_t waited = 0; /* the call's waits for other calls, together */
    size_t batch = n < put_batch_pages(e) ? n : put_batch_pages(e);
    /* Every key before anything is stored: a put in one batch has its
     * batch's check (put_reserve) do that; one in several checks them all
     * here, before the first batch stores its own. */
    if (r == 0 && n > batch)
        r = put_wait_readers(e, keys, n, &waited);
    struct put_work pw = { 0 };
    if (r == 0)
        r = put_work_alloc(e, &pw, batch ? batch : 1, src_on_device);
    /* The policy hears of the call once, after its last batch: a chain
     * stored in several batches is one chain to it (a batch's last block
     * is not the request's tail). Without memory it misses one hint. */
    uint32_t *pgs = r == 0 && policy_sees_calls(e) ? malloc((n ? n : 1) * sizeof(*pgs)) : NULL;
    for (size_t i = 0; pgs && i < n; i++)
        pgs[i] = KVT_NONE; /* a batch that fails before its commit stores nothing */
    for (size_t i = 0; i < n && r == 0; i += batch) {
        size_t m = n - i < batch ? n - i : batch;
        r = put_batch(e, keys + i, m, src + i, src_on_device, &pw, pgs ? pgs + i : NULL, &waited);
    }
    if (pgs)
        report_batch(e, KVT_BATCH_PUT, pgs, keys, n);
    kvt_unlock(e);
    free(pgs);
    put_work_free(&pw);
    return r;
}

struct get_src {
    uint32_t pg;
    int tier;               /* KVT_TIER_SSD: read into tbuf, copy from there */
    void *tbuf;             /* transient read buffer of ours, or NULL */
    void *direct;           /* the caller's dst, read into straight from SSD, or NULL */
    const void *src;        /* where the copy out reads: resolved under the lock, since
                               the page table may be reallocated once it is dropped */
    int tstate;             /* 0 none, 1 queued, 2 done */
    int tres;
    bool resolved;          /* tier and src known, hits counted */
    bool copied;            /* copied out (or nothing to copy) */
};

struct kvt_get_rec {
    struct kvt_get_rec *next;       /* on e->gets.free while free */
    size_t cap;                     /* pages each array below holds */
    struct get_src *g;
    uint32_t *pgs;                  /* the pages served, for the policy */
    struct kvt_caller_read *rd;     /* with an SSD tier: the pages read by the caller */
    struct kvt_caller_scratch io;   /* and their I/O (cap x pieces of a page) */
};

/* Frees rec's arrays (cap 0 after). */
static void get_rec_clear(struct kvt_get_rec *rec)
{
    free(rec->g);
    free(rec->pgs);
    free(rec->rd);
    free(rec->io.reqs);
    free(rec->io.rp);
    free(rec->io.crc);
    *rec = (struct kvt_get_rec){ .next = rec->next };
}

/* Sizes rec's arrays for n pages, doubling: a batch size seen once costs no
 * allocation again. -ENOMEM leaves rec without any (cap 0). */
static int get_rec_fit(const kvt_engine *e, struct kvt_get_rec *rec, size_t n)
{
    if (n <= rec->cap)
        return 0;
    size_t cap = rec->cap * 2 > n ? rec->cap * 2 : n;
    size_t per = e->ssd ? kvt_ssd_pieces(e, e->page_bytes) : 0;
    get_rec_clear(rec);
    rec->g = malloc(cap * sizeof(*rec->g));
    rec->pgs = malloc(cap * sizeof(*rec->pgs));
    bool ok = rec->g && rec->pgs;
    if (per) {
        rec->rd = malloc(cap * sizeof(*rec->rd));
        rec->io.reqs = malloc(cap * per * sizeof(*rec->io.reqs));
        rec->io.rp = malloc(cap * per * sizeof(*rec->io.rp));
        rec->io.crc = malloc(cap * per * sizeof(*rec->io.crc));
        ok = ok && rec->rd && rec->io.reqs && rec->io.rp && rec->io.crc;
    }
    if (!ok) {
        get_rec_clear(rec);
        return -ENOMEM;
    }
    rec->cap = cap;
    return 0;
}

/* A record for a chunk of n pages (n >= 1), off the free list or new
 * (locked), or NULL without memory. The caller gives it back. */
static struct kvt_get_rec *get_rec_take(kvt_engine *e, size_t n)
{
    struct kvt_get_rec *rec = e->gets.free;
    if (rec)
        e->gets.free = rec->next;
    else if (!(rec = calloc(1, sizeof(*rec))))
        return NULL;
    rec->next = NULL;
    if (get_rec_fit(e, rec, n ? n : 1) == 0)
        return rec;
    free(rec);
    return NULL;
}

static void get_rec_give(kvt_engine *e, struct kvt_get_rec *rec)
{
    rec->next = e->gets.free;
    e->gets.free = rec;
}

void kvt_get_recs_free(kvt_engine *e)
{
    while (e->gets.free) {
        struct kvt_get_rec *rec = e->gets.free;
        e->gets.free = rec->next;
        get_rec_clear(rec);
        free(rec);
    }
}

/* Where page g stands (locked): 0 when its outcome is known (a copy in HBM
 * or DRAM, a transient read done, lost, gone, or a read error recorded in
 * *err), 1 while an SSD read of it is queued or waits for room (its read is
 * queued here when it can be; *w says what to wait for when it waits for
 * room, made for `need` pages), or a negative error that ends the call. */
static int get_stage_page(kvt_engine *e, struct get_src *g, uint32_t need, struct kvt_wait *w,
                          int *err, void *dst)
{
    if (g->pg == KVT_NONE || g->tstate == 2)
        return 0;
    struct kvt_page *p = kvt_pg(&e->pt, g->pg);
    if (g->tstate == 1) {
        bool kept = false;
        int tr = kvt_ssd_transient_result(e, g->pg, g->direct ? g->direct : g->tbuf, &kept);
        if (tr == 1)
            return 1;
        g->tstate = 2;
        g->tres = tr;
        if (tr < 0 && kept && !*err)
            *err = kvt_ssd_read_error(e, g->pg, tr);
        return 0;
    }
    if (p->flags & (PG_VALID_HBM | PG_VALID_DRAM | PG_LOST))
        return 0;
    if (p->flags & PG_READ_ERR) {
        int r = kvt_ssd_read_error(e, g->pg, 0);
        *err = *err ? *err : r;
        return 0;
    }
    if (p->xfer == XFER_SSD_READ)
        return 1;
    if (!(p->flags & PG_VALID_SSD) || p->xfer != XFER_NONE)
        return 0;
    /* Only on SSD, and the caller's buffer can take a direct read: read it
     * there. No DRAM slot to find (a full DRAM would make each read wait
     * for a write-back), no copy out; the page stays where it was. */
    if (dst) {
        if (kvt_ssd_queue_read_transient(e, g->pg, dst) < 0)
            return kvt_fail(-ENOMEM, "out of memory for a read");
        g->direct = dst;
        g->tstate = 1;
        return 1;
    }
    /* Room for every page of the chunk still without a slot at once (need):
     * their write-backs go to the disk together, not one per wait. A read
     * staged in the spare slot leaves a redundant DRAM copy (the page keeps
     * its SSD copy), given back once copied out. */
    int r = kvt_stage_ssd_read(e, g->pg, need, w);
    if (r == 0 || r == -EAGAIN)
        return 1;
    /* Not even the spare: read it straight into a buffer of ours. */
    if (posix_memalign(&g->tbuf, 4096, e->page_bytes) ||
        kvt_ssd_queue_read_transient(e, g->pg, g->tbuf) < 0)
        return kvt_fail(-ENOMEM, "out of memory for a read buffer");
    g->tstate = 1;
    return 1;
}

/* The tier that serves page g now that its outcome is known, where the copy
 * out reads, and the hit or misses it counts (locked). */
static void get_resolve(kvt_engine *e, struct get_src *g)
{
    const struct kvt_page *p = g->pg == KVT_NONE ? NULL : kvt_pg(&e->pt, g->pg);
    g->tier = !p ? KVT_TIER_NONE
                 : (p->flags & PG_VALID_HBM) ? KVT_TIER_HBM
                 : (p->flags & PG_VALID_DRAM) ? KVT_TIER_DRAM
                 : (g->tstate == 2 && g->tres == 0) ? KVT_TIER_SSD : KVT_TIER_NONE;
    if (g->tier == KVT_TIER_SSD)
        g->src = g->direct ? g->direct : g->tbuf;
    else if (g->tier != KVT_TIER_NONE)
        g->src = slot_ptr(e, g->pg, g->tier); /* busy: the slot stays */
    for (int t = 0; t < KVT_TIERS; t++) {
        if (t == g->tier) {
            e->gets.st.hits[t]++;
            break;
        }
        e->gets.st.misses[t]++;
    }
    g->resolved = true;
}

/* Copies out the pages resolved and not yet copied (called locked; copies
 * unlocked: their pages are busy, so no slot of theirs moves). Returns 0 or
 * the copy's error; *lost is set for a page present but unreadable. */
static int get_copy_ready(kvt_engine *e, struct get_src *g, size_t n, void *const *dst,
                          int dst_on_device, int *found, bool *lost)
{
    int cr = 0;
    kvt_unlock(e);
    for (size_t i = 0; i < n && cr == 0; i++) {
        if (!g[i].resolved || g[i].copied)
            continue;
        g[i].copied = true;
        if (g[i].tier == KVT_TIER_NONE) {
            *lost |= g[i].pg != KVT_NONE;
            continue;
        }
        if (g[i].src == dst[i]) { /* read straight into it */
            if (found)
                found[i] = 1;
            continue;
        }
        cr = e->hbm.dev->copy_sync(e->hbm.dev_priv,
                                   copy_kind(g[i].tier == KVT_TIER_HBM, dst_on_device), dst[i],
                                   g[i].src, e->page_bytes);
        if (found)
            found[i] = cr == 0;
    }
    kvt_lock(e);
    return cr;
}

/* Marks the pages of keys busy (so no slot of theirs moves while we copy). */
static int get_begin(kvt_engine *e, const kvt_key *keys, size_t n, struct get_src *g)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t pg = kvt_ptable_find(&e->pt, &keys[i]);
        if (pg == KVT_NONE)
            continue;
        if (!kvt_page_busy_begin(e, pg))
            return kvt_fail(-EBUSY, "page (%llu,%u,%u) has too many readers",
                            (unsigned long long)keys[i].id, keys[i].layer, keys[i].index);
        g[i].pg = pg;
    }
    return 0;
}

/* Whether a page can be read from SSD straight into the caller's dst: host
 * memory aligned as direct I/O needs. */
static bool direct_ok(const kvt_engine *e, const void *dst, int dst_on_device)
{
    return !dst_on_device && ((uintptr_t)dst & 4095) == 0 && (e->page_bytes & 4095) == 0;
}

/* Whether page pg is only on SSD, with no transfer of it running: a read
 * of it is this get's to stage. */
static bool ssd_only(const kvt_engine *e, uint32_t pg)
{
    const struct kvt_page *p = kvt_pg(&e->pt, pg);
    return (p->flags & PG_VALID_SSD) && p->xfer == XFER_NONE &&
           !(p->flags & (PG_VALID_HBM | PG_VALID_DRAM | PG_LOST | PG_READ_ERR));
}

/* The chunk's pages that are only on SSD and bound for buffers direct I/O
 * can fill, read by this thread itself (ssd_caller.c; a chunk with none
 * does not go there). A page read is done (transient, straight into dst);
 * one whose read failed is handed to the mover with that try counted; one
 * gone (a checksum mismatch) is a miss. Locked. 0, or -ENOMEM. */
static int get_own_reads(kvt_engine *e, struct kvt_get_rec *rec, size_t n, void *const *dst,
                         int dst_on_device)
{
    struct get_src *g = rec->g;
    struct kvt_caller_read *rd = rec->rd;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (g[i].pg != KVT_NONE && ssd_only(e, g[i].pg) && direct_ok(e, dst[i], dst_on_device))
            rd[m++] = (struct kvt_caller_read){ .pg = g[i].pg, .dst = dst[i], .from = i };
    if (m)
        kvt_ssd_caller_read(e, rd, m, &rec->io);
    int r = 0;
    for (size_t k = 0; k < m && r == 0; k++) {
        struct get_src *gi = &g[rd[k].from];
        if (rd[k].res == KVT_CALLER_SKIP)
            continue;
        gi->direct = rd[k].dst;
        if (rd[k].res == 0 || rd[k].res == KVT_ECORRUPT) {
            gi->tstate = 2;
            gi->tres = rd[k].res;
        } else if (kvt_ssd_caller_retry(e, gi->pg, rd[k].dst) == 0) {
            gi->tstate = 1;
        } else {
            gi->direct = NULL;
            r = kvt_fail(-ENOMEM, "out of memory for a read");
        }
    }
    return r;
}

/* Loads the chunk's busy pages and copies each out as soon as it has a
 * copy in HBM or DRAM: the SSD reads of the whole chunk are queued in the
 * first pass, so the disk has them all at once, and each page read is
 * copied out while the later ones are still on the disk (the copy would
 * otherwise add its whole time to the call's). Locked; waits unlocked.
 * Returns 0, a read error that kept its page (reported, not a miss: the
 * call fails), or a copy's error in *cr. */
static int get_load(kvt_engine *e, struct kvt_get_rec *rec, size_t n, void *const *dst,
                    int dst_on_device, int *found, bool *lost, int *cr)
{
    struct get_src *g = rec->g;
    int err = 0;
    if (e->ssd && (err = get_own_reads(e, rec, n, dst, dst_on_device)) < 0)
        return err;
    for (;;) {
        struct kvt_wait w = { KVT_WAIT_NONE, 0 };
        bool pending = false, ready = false;
        uint32_t need = 0; /* pages that will want a DRAM slot for their read */
        for (size_t i = 0; i < n; i++) {
            const struct kvt_page *p = g[i].pg == KVT_NONE ? NULL : kvt_pg(&e->pt, g[i].pg);
            need += !g[i].resolved && p && !g[i].tstate && !direct_ok(e, dst[i], dst_on_device) &&
                    ssd_only(e, g[i].pg);
        }
        for (size_t i = 0; i < n; i++) {
            if (g[i].resolved)
                continue;
            int s = e->ssd ? get_stage_page(e, &g[i], need, &w, &err,
                                            direct_ok(e, dst[i], dst_on_device) ? dst[i] : NULL)
                           : 0;
            if (s < 0)
                return s;
            if (s) {
                pending = true;
                continue;
            }
            get_resolve(e, &g[i]);
            ready = true;
        }
        if (ready) {
            /* Look again after the copies: more reads landed meanwhile. */
            if ((*cr = get_copy_ready(e, g, n, dst, dst_on_device, found, lost)) < 0)
                return err;
            continue;
        }
        if (!pending)
            return err;
        if (w.kind == KVT_WAIT_NONE)
            w = (struct kvt_wait){ KVT_WAIT_SSD, e->ssd_tier.progress };
        kvt_wait_on(e, &w, true);
        if (e->failed)
            return kvt_check_failed(e);
    }
}

/* Ends what get_begin started: not busy, lost pages reaped. */
static void get_end(kvt_engine *e, struct get_src *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (g[i].tstate == 1) {
            /* Still queued (the call failed): the mover owns the buffer until
             * the read completes, so wait for it. */
            while (kvt_ssd_transient_result(e, g[i].pg, g[i].direct ? g[i].direct : g[i].tbuf,
                                            NULL) == 1) {
                struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_tier.progress };
                kvt_wait_on(e, &w, false);
            }
        }
        free(g[i].tbuf);
        if (g[i].pg == KVT_NONE)
            continue;
        kvt_page_busy_end(e, g[i].pg);
        kvt_page_sync(e, g[i].pg, true);
        kvt_page_trim(e, g[i].pg);
    }
}

static int get_chunk(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                     int dst_on_device, int *found);

/* Pages read from SSD are staged in DRAM and held there until copied out, so
 * a get takes at most a quarter of DRAM at a time. */
int kvt_get_local(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                  int dst_on_device, int *found)
{
    if (!e)
        return kvt_fail(-EINVAL, "engine is NULL");
    if (n && (!keys || !dst))
        return kvt_fail(-EINVAL, "keys and dst must not be NULL");
    size_t chunk = e->dram.arena.nslots / 4;
    if (chunk == 0)
        chunk = 1;
    int r = 0;
    for (size_t at = 0; at < n || (n == 0 && at == 0); at += chunk) {
        size_t k = n - at < chunk ? n - at : chunk;
        int cr = get_chunk(e, keys + at, k, dst + at, dst_on_device, found ? found + at : NULL);
        if (cr < 0 && !r)
            r = cr;
        if (cr < 0 && cr != KVT_ECORRUPT) {
            if (found) /* a failed call reports nothing found */
                memset(found, 0, n * sizeof(*found));
            return cr;
        }
        if (n == 0)
            break;
    }
    return r;
}

/* kvt_get lives beside its local half: without a shared tier (the common
 * case) a get goes straight in, one call fewer on its hot path; with one,
 * shared.c asks the cluster for what the local tiers lack. */
KVT_API int kvt_get(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                    int dst_on_device, int *found)
{
    if (e && e->remote)
        return kvt_get_shared(e, keys, n, dst, dst_on_device, found);
    return kvt_get_local(e, keys, n, dst, dst_on_device, found);
}

static int get_chunk(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                     int dst_on_device, int *found)
{
    if (found)
        memset(found, 0, n * sizeof(*found));
    KVT_ENTER(e);
    struct kvt_get_rec *rec = get_rec_take(e, n);
    if (!rec) {
        kvt_unlock(e);
        return kvt_fail(-ENOMEM, "out of memory");
    }
    struct get_src *g = rec->g;
    for (size_t i = 0; i < n; i++)
        g[i] = (struct get_src){ .pg = KVT_NONE, .tier = KVT_TIER_NONE };
    int r = e->failed ? kvt_check_failed(e) : 0, cr = 0;
    bool lost = false;
    if (r == 0)
        r = get_begin(e, keys, n, g);
    if (r == 0)
        r = get_load(e, rec, n, dst, dst_on_device, found, &lost, &cr);
    /* A failed call reports nothing found: the caller must not have to
     * work out which of its buffers hold complete pages. */
    if ((r < 0 || cr < 0) && found)
        memset(found, 0, n * sizeof(*found));
    if (r < 0)
        goto out_end;
    size_t served = 0;
    for (size_t i = 0; i < n && cr == 0; i++)
        if (g[i].tier != KVT_TIER_NONE) {
            e->gets.st.bytes_get += e->page_bytes;
            rec->pgs[served++] = g[i].pg;
        }
    if (policy_sees_calls(e))
        report_batch(e, KVT_BATCH_GET, rec->pgs, NULL, served);
    if (cr < 0)
        r = kvt_fail(cr, "copying a page out failed: %s", kvt_strerror(cr));
    else if (lost && !found)
        r = kvt_fail(KVT_ECORRUPT, "a page failed its checksum on SSD and is gone");
out_end:
    get_end(e, g, n);
    get_rec_give(e, rec);
    kvt_unlock(e);
    return r;
}
