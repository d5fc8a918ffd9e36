/*
 * copy.c — copies between HBM and DRAM in flight, settling them, and waits.
 *
 * Copies are queued on the device and recorded in a per-direction ring in
 * fence order (e->copy); kvt_settle() retires the ones that completed.
 * Settling is lazy (any call that needs an up-to-date view settles first),
 * so the device never calls back into the engine: e->lock is taken before
 * a device back-end's own locks, never after (tiers.h, Locking).
 *
 * A page's bytes are trusted only after its copy's fence completed without
 * error: a failed fence fails the engine and leaves the target copy invalid,
 * so nothing a failed transfer touched is ever served.
 */
#include <errno.h>

#include "core/engine.h"

/* ------------------------------------------------------------- rings */

int kvt_copy_open(kvt_engine *e)
{
    /* Only pages with an HBM slot have a device copy in flight (the target of
     * an H2D, the source of a D2H), so each ring needs one entry per HBM slot. */
    uint32_t cap = e->hbm.arena.nslots;
    for (int d = 0; d < KVT_DIRS; d++) {
        struct kvt_inflight *q = &e->copy.ring[d];
        q->cap = cap;
        q->page = kvt_meta_alloc(&e->meta_bytes, (size_t)cap * sizeof(uint32_t));
        q->fence = kvt_meta_alloc(&e->meta_bytes, (size_t)cap * sizeof(uint64_t));
        if (e->cfg.on_transfer)
            q->t_ns = kvt_meta_alloc(&e->meta_bytes, (size_t)cap * sizeof(uint64_t));
        if (!q->page || !q->fence || (e->cfg.on_transfer && !q->t_ns))
            return -ENOMEM;
    }
    return 0;
}

void kvt_copy_close(kvt_engine *e)
{
    for (int d = 0; d < KVT_DIRS; d++) {
        struct kvt_inflight *q = &e->copy.ring[d];
        kvt_meta_free(&e->meta_bytes, q->page, (size_t)q->cap * sizeof(uint32_t));
        kvt_meta_free(&e->meta_bytes, q->fence, (size_t)q->cap * sizeof(uint64_t));
        if (q->t_ns)
            kvt_meta_free(&e->meta_bytes, q->t_ns, (size_t)q->cap * sizeof(uint64_t));
        q->page = NULL;
        q->fence = NULL;
        q->t_ns = NULL;
    }
}

uint64_t kvt_copy_last(const kvt_engine *e, enum kvt_dir dir)
{
    const struct kvt_inflight *q = &e->copy.ring[dir];
    return q->len ? q->fence[(q->head + q->len - 1) % q->cap] : 0;
}

/* Waits for every copy in flight so no back-end thread touches memory that
 * is about to be freed. */
void kvt_copy_drain(kvt_engine *e)
{
    for (int d = 0; d < KVT_DIRS; d++)
        if (e->copy.ring[d].len)
            e->hbm.dev->wait(e->hbm.dev_priv, (enum kvt_dir)d, kvt_copy_last(e, (enum kvt_dir)d));
}

static void ring_push(kvt_engine *e, enum kvt_dir dir, uint32_t pg, uint64_t fence, bool evict)
{
    struct kvt_inflight *q = &e->copy.ring[dir];
    /* Never full: one entry per HBM slot, and a page is in one copy at a time. */
    uint32_t i = (q->head + q->len) % q->cap;
    q->page[i] = pg;
    q->fence[i] = fence;
    if (q->t_ns)
        q->t_ns[i] = kvt_now_ns();
    q->len++;
    kvt_page_copy_queued(e, pg, dir, fence, evict);
}

/* ------------------------------------------------------------- queueing */

bool kvt_copy_claim_up(kvt_engine *e, uint32_t pg, bool prefetch, struct kvt_copy *c)
{
    uint32_t s = kvt_page_take_slot(e, pg, KVT_TIER_HBM);
    if (s == KVT_NONE)
        return false;
    kvt_page_xfer_begin(e, pg, XFER_UP, prefetch);
    *c = (struct kvt_copy){ kvt_arena_ptr(&e->hbm.arena, s),
                            kvt_arena_ptr(&e->dram.arena,
                                          kvt_pg(&e->pt, pg)->slot[KVT_TIER_DRAM]),
                            e->page_bytes };
    return true;
}

int kvt_copy_submit_up(kvt_engine *e, const uint32_t *pages, const struct kvt_copy *c, uint32_t k)
{
    uint64_t f;
    int r = e->hbm.dev->submit(e->hbm.dev_priv, KVT_H2D, c, k, &f);
    for (uint32_t j = 0; j < k; j++) {
        if (r == 0)
            ring_push(e, KVT_H2D, pages[j], f, false);
        else
            kvt_page_xfer_cancel(e, pages[j]);
    }
    if (r < 0)
        return kvt_fail(r, "queueing a DRAM->HBM copy failed: %s", kvt_strerror(r));
    return 0;
}

/* The pages carry XFER_DOWN and a DRAM slot (hbm.c claimed them). On error
 * they are as before: no copy, DRAM slot freed. */
int kvt_copy_submit_down(kvt_engine *e, const uint32_t *pages, struct kvt_copy *c, uint32_t n,
                         bool evict)
{
    if (!n)
        return 0;
    uint64_t f;
    int r = e->hbm.dev->submit(e->hbm.dev_priv, KVT_D2H, c, n, &f);
    for (uint32_t i = 0; i < n; i++) {
        if (r < 0) {
            kvt_page_xfer_cancel(e, pages[i]);
            continue;
        }
        ring_push(e, KVT_D2H, pages[i], f, evict);
        kvt_page_sync(e, pages[i], false);
    }
    if (r < 0)
        return kvt_fail(r, "queueing a write-back to DRAM failed: %s", kvt_strerror(r));
    return 0;
}

bool kvt_copy_wait(kvt_engine *e, struct kvt_wait *w)
{
    if (e->copy.ring[KVT_H2D].len)
        *w = (struct kvt_wait){ KVT_WAIT_H2D, kvt_copy_last(e, KVT_H2D) };
    else if (e->copy.ring[KVT_D2H].len)
        *w = (struct kvt_wait){ KVT_WAIT_D2H, kvt_copy_last(e, KVT_D2H) };
    else
        return false;
    return true;
}

/* ------------------------------------------------------------- settle */

static void engine_fail(kvt_engine *e)
{
    if (!e->failed)
        e->failed = KVT_EDEVICE;
    e->copy.st.errors_device++;
}

void kvt_report(kvt_engine *e, int kind, uint32_t pages, uint64_t start_ns, uint64_t end_ns)
{
    if (!e->cfg.on_transfer || !pages)
        return;
    kvt_transfer_event ev = { kind, pages, (uint64_t)pages * e->page_bytes, start_ns, end_ns };
    e->cfg.on_transfer(e->cfg.on_transfer_arg, &ev);
}

/* Retires the completed copies of one direction, in fence order. */
static void settle_ring(kvt_engine *e, enum kvt_dir d)
{
    struct kvt_inflight *q = &e->copy.ring[d];
    /* Reports go out per fence (one submitted batch). */
    uint64_t run_fence = UINT64_MAX, run_start = 0, now = 0;
    uint32_t run_pages = 0;
    int kind = d == KVT_H2D ? KVT_XFER_DRAM_TO_HBM : KVT_XFER_HBM_TO_DRAM;
    while (q->len) {
        uint32_t pg = q->page[q->head];
        if (q->t_ns && q->fence[q->head] != run_fence) {
            kvt_report(e, kind, run_pages, run_start, now);
            run_fence = q->fence[q->head];
            run_start = q->t_ns[q->head];
            run_pages = 0;
        }
        int r = e->hbm.dev->poll(e->hbm.dev_priv, d, q->fence[q->head]);
        if (r == -EINPROGRESS && !e->failed)
            break;
        if (r == -EINPROGRESS) {
            /* Failed engine: a copy that may never complete is abandoned
             * as failed; its target is never marked valid. */
            r = KVT_EDEVICE;
        }
        if (q->t_ns) {
            now = now ? now : kvt_now_ns();
            run_pages += r == 0;
        }
        q->head = (q->head + 1) % q->cap;
        q->len--;
        if (r < 0)
            engine_fail(e);
        bool landed = d == KVT_H2D ? kvt_page_up_done(e, pg, r == 0)
                                   : kvt_page_down_done(e, pg, r == 0);
        if (landed && d == KVT_H2D)
            e->copy.st.bytes_up[KVT_TIER_HBM] += e->page_bytes;
        else if (landed)
            e->copy.st.bytes_down[KVT_TIER_HBM] += e->page_bytes;
    }
    kvt_report(e, kind, run_pages, run_start, now);
}

void kvt_settle(kvt_engine *e)
{
    KVT_ASSERT_LOCKED(e);
    settle_ring(e, KVT_H2D);
    settle_ring(e, KVT_D2H);
    if (e->dram.arena.nfree == 0)
        e->up.dram_settled(e);
}

/* ------------------------------------------------------------- waits */

int kvt_wait_fence(kvt_engine *e, enum kvt_dir dir, uint64_t f, bool stall)
{
    uint64_t t0 = kvt_now_ns();
    kvt_unlock(e);
    int r = e->hbm.dev->wait(e->hbm.dev_priv, dir, f);
    kvt_lock(e);
    if (stall)
        e->copy.st.stall_ns += kvt_now_ns() - t0;
    kvt_settle(e);
    return r;
}

int kvt_wait_on(kvt_engine *e, const struct kvt_wait *w, bool stall)
{
    if (w->kind == KVT_WAIT_D2H || w->kind == KVT_WAIT_H2D)
        return kvt_wait_fence(e, w->kind == KVT_WAIT_D2H ? KVT_D2H : KVT_H2D, w->v, stall);
    if (w->kind != KVT_WAIT_SSD)
        return 0;
    uint64_t t0 = kvt_now_ns();
    while (e->ssd_tier.progress == w->v && e->up.ssd_busy(e) && !e->failed)
        pthread_cond_wait(&e->ssd_tier.cv, &e->lock);
    if (stall)
        e->copy.st.stall_ns += kvt_now_ns() - t0;
    kvt_settle(e);
    return 0;
}
