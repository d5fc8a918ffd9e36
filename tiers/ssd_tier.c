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
 * A page read back is trusted only if the CRC32C of its stored bytes matches
 * the index and it decodes to exactly page_bytes: otherwise it is lost
 * (KVT_ECORRUPT, counted), never served.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    e->ssd_meta[slot] = (struct kvt_ssd_meta){ v->stored_len, v->crc, v->codec };
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
    return 0;
}

int kvt_ssd_tier_open(kvt_engine *e)
{
    size_t pb = e->page_bytes;
    uint32_t nslots = (uint32_t)(e->cfg.ssd_bytes / pb);
    int r;
    e->generation = 1;
    e->ssd_meta = kvt_meta_alloc(&e->meta_bytes, (size_t)nslots * sizeof(*e->ssd_meta));
    e->round_max = 2 * e->cfg.queue_depth;
    size_t bb = (size_t)e->round_max * pb;
    e->bounce = mmap(NULL, bb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!e->ssd_meta || e->bounce == MAP_FAILED) {
        e->bounce = NULL;
        return kvt_fail(-ENOMEM, "out of memory for the SSD tier");
    }
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
    e->ssd_busy++;
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

/* The new slot travels in the page's fence field while the write is queued:
 * a page has one transfer at a time, so the field is free. */
int kvt_ssd_queue_write(kvt_engine *e, uint32_t pg, bool evict)
{
    int err = 0;
    uint32_t slot = kvt_ssd_alloc(e->ssd, &err);
    if (slot == KVT_NONE) {
        if (err != KVT_EFULL)
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
    return e->ssd || (p->flags & (PG_VALID_HBM | PG_VALID_SSD));
}

int kvt_make_room_dram(kvt_engine *e, uint32_t need, struct kvt_wait *w)
{
    struct kvt_arena *d = &e->arena[KVT_TIER_DRAM];
    uint32_t coming = 0;
    /* nfree counts the spare slot, which only evictions may take. */
    while ((d->nfree ? d->nfree - 1 : 0) + coming < need) {
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
        if (kvt_ssd_queue_write(e, v, true) < 0)
            break;
        coming++;
    }
    if ((d->nfree ? d->nfree - 1 : 0) >= need)
        return 0;
    if (e->ssd_busy) {
        *w = (struct kvt_wait){ KVT_WAIT_SSD, e->ssd_rounds };
        return -EAGAIN;
    }
    return KVT_EFULL;
}

/* ------------------------------------------------------------- the round */

/* Takes the queued jobs (at most round_max) and resolves where each goes.
 * Locked. Jobs whose page went away while queued are finished at once. */
static uint32_t round_take(kvt_engine *e, struct kvt_ssd_job *jobs)
{
    uint32_t n = 0, nb = 0, k = 0;
    for (; k < e->ssd_queued && n < e->round_max; k++) {
        uint32_t pg = e->ssd_queue[k];
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        struct kvt_ssd_job *j = &jobs[n++];
        memset(j, 0, sizeof(*j));
        j->pg = pg;
        j->bounce = -1;
        j->dram = kvt_arena_ptr(&e->arena[KVT_TIER_DRAM], p->slot[KVT_TIER_DRAM]);
        j->write = p->xfer == XFER_SSD_WRITE;
        if (j->write) {
            j->slot = (uint32_t)p->fence;
            j->evict = p->fence >> 32;
        } else {
            j->slot = p->ssd_slot;
            const struct kvt_ssd_meta *m = &e->ssd_meta[j->slot];
            j->stored_len = m->stored_len;
            j->crc = m->crc;
            j->codec = m->codec;
        }
        /* Compressed pages go through a bounce buffer; raw ones move
         * straight between the registered DRAM arena and the disk. */
        bool bounce = j->write ? e->cfg.codec != KVT_CODEC_NONE : j->codec != KVT_CODEC_NONE;
        if (bounce) {
            j->bounce = (int)nb;
            j->buf = e->bounce + (size_t)nb++ * e->page_bytes;
        } else {
            j->buf = j->dram;
        }
    }
    memmove(e->ssd_queue, e->ssd_queue + k, (e->ssd_queued - k) * sizeof(uint32_t));
    e->ssd_queued -= k;
    return n;
}

/* Encodes the pages to write (unlocked: their DRAM slots are theirs). */
static void round_encode(kvt_engine *e, struct kvt_ssd_job *jobs, uint32_t n)
{
    size_t pb = e->page_bytes;
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &jobs[i];
        if (!j->write)
            continue;
        size_t out = pb;
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
        j->crc = kvt_crc32c(0, j->buf, out);
    }
}

/* Submits every job's I/O and waits for all of them. The back-end keeps
 * `queue_depth` requests in flight and blocks submit() only while that many
 * are, so one call for the whole round keeps the disk busy. */
static void round_io(kvt_engine *e, struct kvt_ssd_job *jobs, uint32_t n,
                     struct kvt_io_req *reqs, struct kvt_io_req **rp, const int *fds,
                     const uint64_t *offs)
{
    uint32_t ns = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (fds[i] < 0) {
            jobs[i].res = -EIO; /* its segment could not be opened */
            continue;
        }
        reqs[i] = (struct kvt_io_req){ .fd = fds[i], .write = jobs[i].write, .buf = jobs[i].buf,
                                       .len = ALIGN4K(jobs[i].stored_len), .off = offs[i],
                                       .user = &jobs[i] };
        jobs[i].res = 1; /* pending */
        rp[ns++] = &reqs[i];
    }
    if (!ns)
        return;
    int r = e->io->submit(e->io_priv, rp, ns);
    if (r < 0) {
        for (uint32_t i = 0; i < ns; i++)
            ((struct kvt_ssd_job *)rp[i]->user)->res = r;
        return;
    }
    for (uint32_t got = 0; got < ns;) {
        struct kvt_io_req *done[64];
        int m = e->io->reap(e->io_priv, done, 64, 1);
        if (m < 0) {
            /* The context is broken: whatever has not completed failed. */
            for (uint32_t i = 0; i < ns; i++)
                if (((struct kvt_ssd_job *)rp[i]->user)->res == 1)
                    ((struct kvt_ssd_job *)rp[i]->user)->res = m;
            return;
        }
        for (int i = 0; i < m; i++)
            ((struct kvt_ssd_job *)done[i]->user)->res = done[i]->res;
        got += (uint32_t)m;
    }
}

/* Verifies and decodes what was read (unlocked). */
static void round_verify(kvt_engine *e, struct kvt_ssd_job *jobs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &jobs[i];
        if (j->write || j->res < 0)
            continue;
        if (kvt_crc32c(0, j->buf, j->stored_len) != j->crc) {
            j->res = KVT_ECORRUPT;
            continue;
        }
        if (j->bounce >= 0 &&
            kvt_codec_decode(e->codec, j->codec, j->buf, j->stored_len, j->dram, e->page_bytes) < 0)
            j->res = KVT_ECORRUPT;
    }
}

/* Data durable, then one index transaction for the round's writes. */
static int round_commit(kvt_engine *e, struct kvt_ssd_job *jobs, uint32_t n, const kvt_key *keys)
{
    kvt_key *k = malloc((n ? n : 1) * sizeof(*k));
    struct kvt_ssd_entry *v = malloc((n ? n : 1) * sizeof(*v));
    uint32_t m = 0;
    int r = 0;
    if (!k || !v) {
        r = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &jobs[i];
        if (!j->write || j->res < 0)
            continue;
        k[m] = keys[i];
        v[m] = (struct kvt_ssd_entry){ .version = KVT_SSD_ENTRY_VERSION, .codec = j->codec,
                                       .stored_len = j->stored_len,
                                       .raw_len = (uint32_t)e->page_bytes, .crc = j->crc,
                                       .fingerprint = e->cfg.fingerprint,
                                       .generation = e->generation + i };
        kvt_ssd_where(e->ssd, j->slot, &v[m].segment, &v[m].offset);
        m++;
    }
    if (!m)
        goto out;
    if (e->cfg.persist && (r = kvt_ssd_sync(e->ssd)) < 0)
        goto out;
    r = kvt_index_commit(kvt_ssd_index(e->ssd), k, v, m, NULL, 0, e->cfg.persist != 0);
out:
    if (r < 0) /* not indexed: the writes did not happen, as far as anyone knows */
        for (uint32_t i = 0; i < n; i++)
            if (jobs[i].write && jobs[i].res >= 0)
                jobs[i].res = r;
    free(k);
    free(v);
    return r;
}

static void finish_read(kvt_engine *e, struct kvt_ssd_job *j)
{
    struct kvt_page *p = kvt_pg(&e->pt, j->pg);
    p->xfer = XFER_NONE;
    if (j->res == 0) {
        kvt_page_set(e, j->pg, PG_VALID_DRAM, 0);
        e->st.bytes_up[KVT_TIER_DRAM] += e->page_bytes;
    } else {
        /* The only copy is unreadable: the page is lost, never served. */
        if (j->res == KVT_ECORRUPT)
            e->st.errors_corrupt++;
        else
            e->st.errors_io++;
        if (j->res == -EIO)
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
        /* The page stays where it was; a bad slot is never reused. */
        e->st.errors_io++;
        if (j->res == -EIO)
            kvt_ssd_mark_bad(e->ssd, j->slot);
        else
            kvt_ssd_free(e->ssd, j->slot);
        goto out;
    }
    e->ssd_meta[j->slot] = (struct kvt_ssd_meta){ j->stored_len, j->crc, j->codec };
    e->st.bytes_down[KVT_TIER_DRAM] += e->page_bytes;
    if (p->flags & PG_ZOMBIE) {
        /* Dropped while written: the new entry goes too. */
        p->ssd_slot = j->slot;
        kvt_ssd_forget(e, j->pg);
        goto out;
    }
    /* Copy-on-write: the old slot was named by the index until this round's
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

/* Deletions queued by drops: one transaction, before the round's writes. */
static int round_deletes(kvt_engine *e, struct kvt_ssd_del *dels, uint32_t n)
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

bool kvt_ssd_round(kvt_engine *e)
{
    if (!e->ssd || (!e->ssd_queued && !e->ndels))
        return false;
    uint32_t cap = e->round_max;
    struct kvt_ssd_job *jobs = calloc(cap, sizeof(*jobs));
    struct kvt_io_req *reqs = calloc(cap, sizeof(*reqs));
    struct kvt_io_req **rp = calloc(cap, sizeof(*rp));
    kvt_key *keys = calloc(cap, sizeof(*keys));
    int *fds = calloc(cap, sizeof(*fds));
    uint64_t *offs = calloc(cap, sizeof(*offs));
    struct kvt_ssd_del *dels = e->dels;
    uint32_t ndels = e->ndels;
    if (!jobs || !reqs || !rp || !keys || !fds || !offs)
        goto out; /* try again next time; nothing was taken */
    e->dels = NULL;
    e->ndels = e->dels_cap = 0;
    uint32_t n = round_take(e, jobs);
    for (uint32_t i = 0; i < n; i++) {
        keys[i] = kvt_pg(&e->pt, jobs[i].pg)->key;
        if (kvt_ssd_locate(e->ssd, jobs[i].slot, &fds[i], &offs[i]) < 0)
            fds[i] = -1;
        if (jobs[i].write)
            kvt_ssd_dirty(e->ssd, jobs[i].slot);
    }
    pthread_mutex_unlock(&e->lock);

    int dr = ndels ? round_deletes(e, dels, ndels) : 0;
    round_encode(e, jobs, n);
    round_io(e, jobs, n, reqs, rp, fds, offs);
    round_verify(e, jobs, n);
    round_commit(e, jobs, n, keys);

    pthread_mutex_lock(&e->lock);
    for (uint32_t i = 0; i < ndels; i++) {
        if (dr == 0)
            kvt_ssd_free(e->ssd, dels[i].slot);
        else
            kvt_ssd_mark_bad(e->ssd, dels[i].slot); /* still named: never reuse */
    }
    e->generation += n;
    for (uint32_t i = 0; i < n; i++) {
        if (jobs[i].write)
            finish_write(e, &jobs[i]);
        else
            finish_read(e, &jobs[i]);
    }
    e->ssd_busy -= n;
    e->ssd_rounds++;
    pthread_cond_broadcast(&e->xfer_cv);
    free(dels);
    dels = NULL;
out:
    free(jobs);
    free(reqs);
    free(rp);
    free(keys);
    free(fds);
    free(offs);
    return true;
}

/* ------------------------------------------------------------- flush */

int kvt_ssd_flush(kvt_engine *e)
{
    int r = 0;
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!(p->flags & PG_HASHED) || p->xfer != XFER_NONE || !(p->flags & PG_VALID_DRAM) ||
            (p->flags & PG_VALID_SSD))
            continue;
        int q = kvt_ssd_queue_write(e, pg, false);
        if (q < 0 && !r)
            r = kvt_fail(q == KVT_EFULL ? KVT_EFULL : q, "the SSD tier has no room for a page");
    }
    /* Wait until the mover has run everything queued, deletions included. */
    while ((e->ssd_busy || e->ndels) && !e->failed) {
        struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_rounds };
        kvt_wait_on(e, &w, false);
    }
    return r;
}
