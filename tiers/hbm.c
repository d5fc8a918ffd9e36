/*
 * hbm.c — room in HBM and write-back of dirty pages to DRAM.
 *
 * HBM holds pinned pages and a cache of the rest. Room is made in the
 * policy's order: a victim with a current copy below goes for free; a dirty
 * one is written down to DRAM first (a D2H copy), and its slot is free once
 * that copy lands (PG_EVICTING). The mover writes back ahead of need
 * (kvt_writeback) so that a caller's eviction is usually a free drop.
 * Under the engine lock.
 */
#include <errno.h>

#include "tiers/tiers.h"

/* Batches are built in small stack arrays: the device takes them in one
 * submit, and 64 pages of 256 KiB are already 16 MiB in flight. */
#define BATCH 64

struct usable_ctx {
    kvt_engine *e;
    enum kvt_leave how;
};

static bool usable_hbm(void *ctx, uint32_t pg)
{
    struct usable_ctx *u = ctx;
    return kvt_page_can_leave(kvt_pg(&u->e->pt, pg), KVT_TIER_HBM, u->how);
}

/* The copy of v's HBM slot into its DRAM slot (both allocated). */
static struct kvt_copy claim_down(kvt_engine *e, uint32_t v)
{
    const struct kvt_page *p = kvt_pg(&e->pt, v);
    return (struct kvt_copy){ kvt_arena_ptr(&e->dram.arena, p->slot[KVT_TIER_DRAM]),
                              kvt_arena_ptr(&e->hbm.arena, p->slot[KVT_TIER_HBM]),
                              e->page_bytes };
}

/* A DRAM slot for dirty victim v (stored in the page): free, stolen from a
 * copy that lives elsewhere too, the spare, or made by writing DRAM pages
 * down to SSD. 0 when it has one; -EAGAIN when the SSD will make one
 * (*ssd_wait says what to wait for); KVT_EFULL; or the SSD's own error. */
static int slot_for_victim(kvt_engine *e, uint32_t v, struct kvt_wait *ssd_wait)
{
    if (kvt_dram_slot(e, v, KVT_SLOT_STEAL | KVT_SLOT_SPARE) != KVT_NONE)
        return 0;
    if (!e->ssd)
        return KVT_EFULL;
    int r = kvt_make_room_dram(e, 1, ssd_wait);
    if (r == 0)
        return kvt_dram_slot(e, v, KVT_SLOT_STEAL | KVT_SLOT_SPARE) != KVT_NONE ? 0 : KVT_EFULL;
    return r; /* -EAGAIN (ssd_wait says for what), KVT_EFULL, or the SSD's own error */
}

int kvt_make_room_hbm(kvt_engine *e, uint32_t need, struct kvt_wait *w)
{
    struct kvt_arena *h = &e->hbm.arena;
    struct usable_ctx u = { e, KVT_LEAVE_ANY };
    uint32_t pages[BATCH] = { 0 }, n = 0, coming = 0;
    struct kvt_copy c[BATCH];
    struct kvt_wait ssd_wait = { KVT_WAIT_NONE, 0 };
    int r;

    KVT_ASSERT_LOCKED(e);
    while (h->nfree + coming < need) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_HBM, usable_hbm, &u);
        if (v == KVT_NONE)
            break;
        if (kvt_pg(&e->pt, v)->flags & (PG_VALID_DRAM | PG_VALID_SSD)) {
            /* Clean: a copy below is current, dropping HBM costs no write. */
            kvt_page_drop_copy(e, v, KVT_TIER_HBM);
            continue;
        }
        int s = slot_for_victim(e, v, &ssd_wait);
        if (s == -EAGAIN || s == KVT_EFULL)
            break; /* DRAM is full: wait for the SSD (ssd_wait) or give up */
        if (s < 0)
            return s; /* the SSD refused (a full disk...): said, not hidden behind "full" */
        kvt_page_xfer_begin(e, v, XFER_DOWN, false); /* out of victim() until submitted */
        pages[n] = v;
        c[n++] = claim_down(e, v);
        coming++;
        if (n == BATCH) {
            if ((r = kvt_copy_submit_down(e, pages, c, n, true)) < 0)
                return r;
            n = 0;
        }
    }
    if ((r = kvt_copy_submit_down(e, pages, c, n, true)) < 0)
        return r;
    if (h->nfree >= need)
        return 0;
    if (e->copy.ring[KVT_D2H].len) {
        *w = (struct kvt_wait){ KVT_WAIT_D2H, kvt_copy_last(e, KVT_D2H) };
        return -EAGAIN;
    }
    if (ssd_wait.kind != KVT_WAIT_NONE) {
        *w = ssd_wait;
        return -EAGAIN;
    }
    /* Pages on their way up (the prefetcher's H2D copies) hold slots no
     * victim can give back yet; once they land they are the caller's own or
     * can leave. Failing here made a decode's acquire of a group as large
     * as HBM fail now and then on a loaded machine, with 16-43 pages in
     * flight and every other slot pinned by that acquire. */
    if (e->copy.ring[KVT_H2D].len) {
        *w = (struct kvt_wait){ KVT_WAIT_H2D, kvt_copy_last(e, KVT_H2D) };
        return -EAGAIN;
    }
    return kvt_fail(KVT_EFULL, "HBM is full: %u of %u slots are pinned or in use and nothing "
                               "below can take a page", h->nslots - h->nfree, h->nslots);
}

/* Copies claimed pages (XFER_DOWN set) down into free DRAM slots, as one
 * batch; a page DRAM has no free slot for is let go (KVT_EFULL). */
static int writeback_pages(kvt_engine *e, const uint32_t *cand, uint32_t n)
{
    uint32_t pages[BATCH] = { 0 }, k = 0;
    struct kvt_copy c[BATCH];
    int r = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (kvt_dram_slot(e, cand[i], 0) == KVT_NONE) {
            kvt_page_xfer_cancel(e, cand[i]);
            r = kvt_fail(KVT_EFULL, "DRAM has no free slot for a dirty page");
            continue;
        }
        pages[k] = cand[i];
        c[k++] = claim_down(e, cand[i]);
    }
    int s = kvt_copy_submit_down(e, pages, c, k, false);
    return s < 0 ? s : r;
}

/* The next dirty page to write back: with all, the next hashed dirty page
 * from *at on (pinned ones too); else the policy's coldest. */
static uint32_t next_dirty(kvt_engine *e, bool all, uint32_t *at, struct usable_ctx *u)
{
    if (!all)
        return e->pol->victim(e->pol_priv, KVT_TIER_HBM, usable_hbm, u);
    for (; *at < e->pt.used; (*at)++) {
        const struct kvt_page *p = kvt_pg(&e->pt, *at);
        if ((p->flags & PG_HASHED) && p->xfer == XFER_NONE && kvt_page_dirty_flags(p->flags) &&
            !(p->flags & PG_CREATED))
            return (*at)++;
    }
    return KVT_NONE;
}

int kvt_writeback(kvt_engine *e, uint32_t max_pages, bool all, uint64_t *fence)
{
    uint32_t cand[BATCH], n = 0, done = 0, at = 0;
    int r = 0, s;
    struct usable_ctx u = { e, KVT_LEAVE_WRITE };

    KVT_ASSERT_LOCKED(e);
    while (done < max_pages) {
        uint32_t v = next_dirty(e, all, &at, &u);
        if (v == KVT_NONE)
            break;
        kvt_page_xfer_begin(e, v, XFER_DOWN, false); /* out of victim() from now on */
        cand[n++] = v;
        done++;
        if (n == BATCH) {
            if ((s = writeback_pages(e, cand, n)) < 0)
                r = s;
            n = 0;
        }
    }
    if (n && (s = writeback_pages(e, cand, n)) < 0)
        r = s;
    *fence = kvt_copy_last(e, KVT_D2H);
    return r;
}

/* ------------------------------------------------------------- open, close */

int kvt_hbm_open(kvt_engine *e)
{
    const struct kvt_device_ops *dev = e->hbm.dev;
    size_t pb = e->page_bytes;
    uint32_t n = (uint32_t)(e->cfg.hbm_bytes / pb);
    void *base;
    e->hbm.alloc_bytes = (size_t)n * pb;
    int r = dev->hbm_alloc(e->hbm.dev_priv, e->hbm.alloc_bytes, &base);
    if (r < 0)
        return kvt_fail(r, "could not allocate the HBM arena (%zu bytes): %s",
                        e->hbm.alloc_bytes, kvt_strerror(r));
    if ((r = kvt_arena_init(&e->hbm.arena, base, pb, n, &e->meta_bytes)) < 0) {
        dev->hbm_free(e->hbm.dev_priv, base, e->hbm.alloc_bytes);
        return r;
    }
    /* Write back ahead of need while fewer than 1/8 of HBM slots are free
     * or clean, so that an eviction seldom waits for a D2H copy. */
    e->hbm.watermark = n / 8 + 1;
    return 0;
}

void kvt_hbm_close(kvt_engine *e)
{
    void *base = e->hbm.arena.base;
    kvt_arena_fini(&e->hbm.arena, &e->meta_bytes);
    e->hbm.dev->hbm_free(e->hbm.dev_priv, base, e->hbm.alloc_bytes);
}

/* ------------------------------------------------------------- waiting for room */

int kvt_hbm_wait_room(kvt_engine *e, struct kvt_wait *w)
{
    /* Slots freed while we wait are ours: the prefetcher stands back. */
    e->hbm.room_waiters++;
    int r = kvt_wait_on(e, w, true);
    e->hbm.room_waiters--;
    return r;
}
