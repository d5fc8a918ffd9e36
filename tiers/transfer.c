/*
 * transfer.c — page state changes and the copies between HBM and DRAM.
 *
 * Everything here runs under e->lock. Copies are queued on the device and
 * recorded in a per-direction ring in fence order; kvt_settle() retires the
 * ones that completed. Settling is lazy (any call that needs an up-to-date
 * view settles first), so the device never calls back into the manager and no
 * lock order between the two exists.
 *
 * A page's bytes are trusted only after its copy's fence completed without
 * error: a failed fence fails the engine and leaves the target copy invalid,
 * so nothing a failed transfer touched is ever served.
 */
#include <errno.h>

#include "tiers/tiers.h"

#define LOWER_VALID (PG_VALID_DRAM | PG_VALID_SSD)

static inline bool pg_dirty_flags(uint16_t f)
{
    return (f & PG_VALID_HBM) && !(f & LOWER_VALID);
}

/* A DRAM copy whose page is also current in HBM: it can go at no cost
 * now (the page just turns dirty in HBM). DRAM copies backed by SSD are not
 * on this list: those leave in the policy's order (kvt_dram_slot). */
static inline bool pg_redundant_dram(uint16_t f)
{
    return (f & PG_VALID_DRAM) && (f & PG_VALID_HBM);
}

static void red_link(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->red_next = KVT_NONE;
    p->red_prev = e->red_tail;
    if (e->red_tail != KVT_NONE)
        kvt_pg(&e->pt, e->red_tail)->red_next = pg;
    else
        e->red_head = pg;
    e->red_tail = pg;
}

static void red_unlink(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (p->red_prev != KVT_NONE)
        kvt_pg(&e->pt, p->red_prev)->red_next = p->red_next;
    else
        e->red_head = p->red_next;
    if (p->red_next != KVT_NONE)
        kvt_pg(&e->pt, p->red_next)->red_prev = p->red_prev;
    else
        e->red_tail = p->red_prev;
}

/* Sets and clears flags of a page, keeping the resident and dirty counters. */
static void page_flags(kvt_engine *e, uint32_t pg, uint16_t set, uint16_t clear)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    uint16_t old = p->flags, nf = (uint16_t)((old | set) & ~clear);
    /* A prefetched page leaving HBM unused: the prefetch was wasted. */
    if ((old & PG_PREFETCHED) && (old & PG_VALID_HBM) && !(nf & PG_VALID_HBM)) {
        e->st.prefetch_wasted++;
        nf &= (uint16_t)~PG_PREFETCHED;
    }
    static const uint16_t valid[3] = { PG_VALID_HBM, PG_VALID_DRAM, PG_VALID_SSD };
    for (int t = 0; t < 3; t++) {
        if ((nf & valid[t]) && !(old & valid[t]))
            e->st.resident_pages[t]++;
        else if (!(nf & valid[t]) && (old & valid[t]))
            e->st.resident_pages[t]--;
    }
    e->hbm_dirty += (uint64_t)pg_dirty_flags(nf) - (uint64_t)pg_dirty_flags(old);
    p->flags = nf;
    if (pg_redundant_dram(nf) && !pg_redundant_dram(old))
        red_link(e, pg);
    else if (!pg_redundant_dram(nf) && pg_redundant_dram(old))
        red_unlink(e, pg);
}

void kvt_page_set(kvt_engine *e, uint32_t pg, uint16_t set, uint16_t clear)
{
    page_flags(e, pg, set, clear);
}

/* Keeps the policy's candidate sets equal to what the page's state says:
 * an HBM candidate is valid there, unpinned and not being evicted; a DRAM
 * candidate is valid there. touch reports a use. */
void kvt_page_sync(kvt_engine *e, uint32_t pg, bool touch)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    bool live = !(p->flags & PG_ZOMBIE);
    bool want[KVT_TIERS] = {
        live && (p->flags & PG_VALID_HBM) && p->pins == 0 && !(p->flags & PG_EVICTING),
        live && (p->flags & PG_VALID_DRAM),
        live && (p->flags & PG_VALID_SSD),
    };
    static const uint16_t listed[KVT_TIERS] = { PG_LISTED_HBM, PG_LISTED_DRAM, PG_LISTED_SSD };
    for (int t = 0; t < KVT_TIERS; t++) {
        bool is = p->flags & listed[t];
        if (want[t] && !is) {
            e->pol->insert(e->pol_priv, t, pg, &p->key);
            p->flags |= listed[t];
        } else if (!want[t] && is) {
            e->pol->remove(e->pol_priv, t, pg);
            p->flags &= (uint16_t)~listed[t];
        } else if (want[t] && touch) {
            e->pol->access(e->pol_priv, t, pg);
        }
    }
}

/* Frees slots that hold nothing valid and that no copy or reader uses, and
 * the record of a dropped page once it has no slot left. A slot is never
 * freed under a reader (busy) or a copy in flight: that is what keeps a slot
 * from being handed to another page while its bytes are still being read. */
void kvt_page_trim(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (p->busy)
        return;
    if (p->slot[KVT_TIER_HBM] != KVT_NONE && !(p->flags & PG_VALID_HBM) && p->xfer == XFER_NONE) {
        kvt_arena_free(&e->arena[KVT_TIER_HBM], p->slot[KVT_TIER_HBM]);
        p->slot[KVT_TIER_HBM] = KVT_NONE;
    }
    if (p->slot[KVT_TIER_DRAM] != KVT_NONE && !(p->flags & PG_VALID_DRAM) && p->xfer == XFER_NONE) {
        kvt_arena_free(&e->arena[KVT_TIER_DRAM], p->slot[KVT_TIER_DRAM]);
        p->slot[KVT_TIER_DRAM] = KVT_NONE;
    }
    /* A page whose only copy could not be read goes once nobody holds it. */
    if ((p->flags & (PG_HASHED | PG_LOST)) == (PG_HASHED | PG_LOST) && !p->pins &&
        p->xfer == XFER_NONE && !(p->flags & (PG_VALID_HBM | PG_VALID_DRAM | PG_VALID_SSD))) {
        kvt_page_destroy(e, pg);
        return;
    }
    if ((p->flags & PG_ZOMBIE) && p->xfer == XFER_NONE && p->slot[0] == KVT_NONE &&
        p->slot[1] == KVT_NONE) {
        kvt_page_sync(e, pg, false);
        kvt_ptable_delete(&e->pt, pg);
    }
}

int kvt_inflight_push(kvt_engine *e, enum kvt_dir dir, uint32_t pg, uint64_t fence)
{
    struct kvt_inflight *q = &e->inflight[dir];
    if (q->len == q->cap)
        return -EOVERFLOW; /* cannot happen: one entry per HBM slot */
    uint32_t i = (q->head + q->len) % q->cap;
    q->page[i] = pg;
    q->fence[i] = fence;
    if (q->t_ns)
        q->t_ns[i] = kvt_now_ns();
    q->len++;
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = dir == KVT_H2D ? XFER_UP : XFER_DOWN;
    p->fence = fence;
    return 0;
}

/* Queues one batch of DRAM->HBM copies (HBM slots set, xfer = XFER_UP). On
 * error the pages are as before: no copy, slot freed. */
int kvt_submit_up(kvt_engine *e, const uint32_t *pages, const struct kvt_copy *c, uint32_t k)
{
    uint64_t f;
    int r = e->dev->submit(e->dev_priv, KVT_H2D, c, k, &f);
    for (uint32_t j = 0; j < k; j++) {
        if (r == 0) {
            kvt_inflight_push(e, KVT_H2D, pages[j], f);
        } else {
            struct kvt_page *p = kvt_pg(&e->pt, pages[j]);
            p->xfer = XFER_NONE;
            p->flags &= (uint16_t)~PG_PREFETCHED;
            kvt_page_trim(e, pages[j]);
        }
    }
    if (r < 0)
        return kvt_fail(r, "queueing a DRAM->HBM copy failed: %s", kvt_strerror(r));
    return 0;
}

static uint64_t inflight_last(const struct kvt_inflight *q)
{
    return q->len ? q->fence[(q->head + q->len - 1) % q->cap] : 0;
}

bool kvt_copy_wait(kvt_engine *e, struct kvt_wait *w)
{
    if (e->inflight[KVT_H2D].len)
        *w = (struct kvt_wait){ KVT_WAIT_H2D, inflight_last(&e->inflight[KVT_H2D]) };
    else if (e->inflight[KVT_D2H].len)
        *w = (struct kvt_wait){ KVT_WAIT_D2H, inflight_last(&e->inflight[KVT_D2H]) };
    else
        return false;
    return true;
}

static void complete_up(kvt_engine *e, uint32_t pg, bool ok)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = XFER_NONE;
    if (ok && !(p->flags & PG_ZOMBIE)) {
        page_flags(e, pg, PG_VALID_HBM, 0);
        e->st.bytes_up[KVT_TIER_HBM] += e->page_bytes;
    }
    kvt_page_sync(e, pg, false);
    kvt_page_trim(e, pg);
}

static void complete_down(kvt_engine *e, uint32_t pg, bool ok)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = XFER_NONE;
    bool stale = p->flags & PG_STALE;
    p->flags &= (uint16_t)~(PG_STALE);
    if (ok && !stale && !(p->flags & PG_ZOMBIE)) {
        page_flags(e, pg, PG_VALID_DRAM, 0);
        e->st.bytes_down[KVT_TIER_HBM] += e->page_bytes;
    }
    p = kvt_pg(&e->pt, pg);
    if (p->flags & PG_EVICTING) {
        p->flags &= (uint16_t)~PG_EVICTING;
        /* An acquire that came while the copy ran keeps the page in HBM. */
        if (p->pins == 0 && p->busy == 0 && (p->flags & LOWER_VALID))
            page_flags(e, pg, 0, PG_VALID_HBM);
    }
    kvt_page_sync(e, pg, false);
    kvt_page_trim(e, pg);
}

static void engine_fail(kvt_engine *e, int err)
{
    if (!e->failed)
        e->failed = KVT_EDEVICE;
    e->st.errors_device++;
    (void)err;
}

static void restore_spare(kvt_engine *e);

void kvt_report(kvt_engine *e, int kind, uint32_t pages, uint64_t start_ns, uint64_t end_ns)
{
    if (!e->cfg.on_transfer || !pages)
        return;
    kvt_transfer_event ev = { kind, pages, (uint64_t)pages * e->page_bytes, start_ns, end_ns };
    e->cfg.on_transfer(e->cfg.on_transfer_arg, &ev);
}

void kvt_settle(kvt_engine *e)
{
    for (int d = 0; d < KVT_DIRS; d++) {
        struct kvt_inflight *q = &e->inflight[d];
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
            int r = e->dev->poll(e->dev_priv, (enum kvt_dir)d, q->fence[q->head]);
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
                engine_fail(e, r);
            if (d == KVT_H2D)
                complete_up(e, pg, r == 0);
            else
                complete_down(e, pg, r == 0);
        }
        kvt_report(e, kind, run_pages, run_start, now);
    }
    if (e->arena[KVT_TIER_DRAM].nfree == 0)
        restore_spare(e);
}

int kvt_wait_fence(kvt_engine *e, enum kvt_dir dir, uint64_t f, bool stall)
{
    uint64_t t0 = kvt_now_ns();
    pthread_mutex_unlock(&e->lock);
    int r = e->dev->wait(e->dev_priv, dir, f);
    pthread_mutex_lock(&e->lock);
    if (stall)
        e->st.stall_ns += kvt_now_ns() - t0;
    kvt_settle(e);
    return r;
}

/* Capacity is counted in pages, not slots: every page needs one slot
 * somewhere, and a second copy is a cache that can always be given up.
 * Records in use (keys, put reservations, dropped pages still being read)
 * may not exceed the configured HBM + DRAM pages. */
int kvt_admit(kvt_engine *e)
{
    uint64_t cap = (uint64_t)e->arena[KVT_TIER_HBM].nslots + e->arena[KVT_TIER_DRAM].nslots - 1 +
                   (e->ssd ? kvt_ssd_nslots(e->ssd) : 0);
    if (e->pt.live < cap)
        return 0;
    return kvt_fail(KVT_EFULL, "every tier is full: %u pages held, capacity %llu pages (HBM + "
                               "DRAM + SSD)", e->pt.live, (unsigned long long)cap);
}

int kvt_wait_on(kvt_engine *e, const struct kvt_wait *w, bool stall)
{
    if (w->kind == KVT_WAIT_D2H || w->kind == KVT_WAIT_H2D)
        return kvt_wait_fence(e, w->kind == KVT_WAIT_D2H ? KVT_D2H : KVT_H2D, w->v, stall);
    if (w->kind != KVT_WAIT_SSD)
        return 0;
    uint64_t t0 = kvt_now_ns();
    while (e->ssd_rounds == w->v && (e->ssd_busy || e->ndels) && !e->failed)
        pthread_cond_wait(&e->xfer_cv, &e->lock);
    if (stall)
        e->st.stall_ns += kvt_now_ns() - t0;
    kvt_settle(e);
    return 0;
}

struct usable_ctx {
    kvt_engine *e;
    bool dirty_only;     /* HBM: only pages without a lower copy */
};

static bool usable_hbm(void *ctx, uint32_t pg)
{
    struct usable_ctx *u = ctx;
    const struct kvt_page *p = kvt_pg(&u->e->pt, pg);
    if (p->xfer != XFER_NONE || p->busy)
        return false;
    return !u->dirty_only || !(p->flags & LOWER_VALID);
}

/* The spare DRAM slot (see kvt_dram_slot) is in use: give it back by
 * dropping the DRAM copy of a page that also lives in HBM, once one exists.
 * The page turns dirty; that is the price of a full engine. */
/* The oldest redundant DRAM copy that no copy or reader is using, or
 * KVT_NONE. O(1) unless the oldest are busy. */
static uint32_t redundant_victim(kvt_engine *e)
{
    for (uint32_t pg = e->red_head; pg != KVT_NONE; pg = kvt_pg(&e->pt, pg)->red_next) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        /* A pinned page not yet in HBM is about to be copied up from DRAM. */
        if (p->xfer == XFER_NONE && !p->busy && !(p->pins && !(p->flags & PG_VALID_HBM)))
            return pg;
    }
    return KVT_NONE;
}

static bool movable_dram(void *ctx, uint32_t pg);

/* Drops v's DRAM copy (another tier holds v's bytes) and frees its slot. */
static void drop_dram_copy(kvt_engine *e, uint32_t v)
{
    page_flags(e, v, 0, PG_VALID_DRAM);
    kvt_page_sync(e, v, false);
    kvt_page_trim(e, v);
}

/* A third copy: the DRAM copy of a page that HBM holds and SSD backs, that
 * no copy, reader or pin is using, and that has been acquired since it came
 * up (HBM may still let go of a prefetched page unused); KVT_NONE when none
 * is found. Only with an SSD tier and a policy that knows next uses. Of the
 * first 32 such copies (oldest first), the one used furthest ahead.
 *
 * Such a copy goes before the policy's own DRAM victim (unless that one is
 * never used again): dropping it costs no I/O now, and DRAM then holds
 * pages HBM does not, so that the two tiers keep more of the KV between
 * them. kvtier run's defaults: DRAM held 90-170 copies of HBM's 258 pages;
 * dropping them first cut the SSD bytes 8% (1.19 against 1.29 GB a run,
 * 10 alternating runs each) and test_decode's SSD->DRAM bytes from
 * 0.96-1.04x MIN to 0.91-0.98x. The price: a page HBM lets go of before
 * its next use comes from SSD. A policy that ranks by next use lets go of
 * the pages used furthest ahead, which DRAM would drop first anyway (a
 * prefetched page is the exception, hence not those); an LRU's victims may
 * be needed again soon, and there the DRAM copy is what saves the read, so
 * under LRU caching stays inclusive. */
static uint32_t third_copy(kvt_engine *e)
{
    if (!e->ssd || !e->pol->next_use)
        return KVT_NONE;
    uint32_t best = KVT_NONE, seen = 0;
    uint64_t far = 0;
    for (uint32_t pg = e->red_head; pg != KVT_NONE && seen < 32;
         pg = kvt_pg(&e->pt, pg)->red_next) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (p->xfer != XFER_NONE || p->busy || p->pins || !(p->flags & PG_VALID_SSD) ||
            (p->flags & PG_PREFETCHED))
            continue;
        uint64_t nu = e->pol->next_use(e->pol_priv, pg);
        if (best == KVT_NONE || nu > far)
            best = pg, far = nu;
        seen++;
    }
    return best;
}

/* v (KVT_NONE: none) is a page the policy knows is never used again (dead
 * or unscheduled). Such a page goes before any third copy, written down
 * first if it must be, by the callers' own path: with third copies first,
 * a window that slides went to 1.56x MIN. */
static bool never_used(kvt_engine *e, uint32_t v)
{
    return v != KVT_NONE && e->pol->next_use &&
           e->pol->next_use(e->pol_priv, v) >= KVT_USE_UNKNOWN;
}

bool kvt_dram_drop_third_copy(kvt_engine *e, uint32_t x)
{
    uint32_t t = third_copy(e);
    if (t == KVT_NONE ||
        never_used(e, e->pol->victim(e->pol_priv, KVT_TIER_DRAM, movable_dram, e)) ||
        (x != KVT_NONE && e->pol->next_use(e->pol_priv, t) <= e->pol->next_use(e->pol_priv, x)))
        return false;
    drop_dram_copy(e, t);
    return true;
}

static bool movable_dram(void *ctx, uint32_t pg)
{
    const struct kvt_page *p = kvt_pg(&((kvt_engine *)ctx)->pt, pg);
    return p->xfer == XFER_NONE && !p->busy && !(p->pins && !(p->flags & PG_VALID_HBM));
}

/* With an SSD tier: the DRAM copy the policy would drop first, if it can go
 * now (SSD or HBM also holds the page). When the policy's first choice is a
 * page only in DRAM, none: that one must be written down
 * (kvt_make_room_dram) rather than a page needed sooner dropped in its
 * place. Copies of pages in HBM are not taken first-in first-out here: a
 * page whose DRAM copy goes while SSD still has it would be read from SSD
 * again the next time it leaves HBM (sink pages, read first, suffered most). */
static uint32_t ssd_backed_victim(kvt_engine *e)
{
    if (!e->ssd)
        return KVT_NONE;
    uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, movable_dram, e);
    uint32_t t = never_used(e, v) ? KVT_NONE : third_copy(e);
    if (t != KVT_NONE)
        return t;
    if (v == KVT_NONE)
        return KVT_NONE;
    const struct kvt_page *p = kvt_pg(&e->pt, v);
    return (p->flags & (PG_VALID_SSD | PG_VALID_HBM)) ? v : KVT_NONE;
}

static void restore_spare(kvt_engine *e)
{
    uint32_t v = e->ssd ? ssd_backed_victim(e) : redundant_victim(e);
    if (v == KVT_NONE)
        return;
    drop_dram_copy(e, v);
}

/* A DRAM slot for page pg: a free one, or (KVT_SLOT_STEAL) the slot of a
 * page that keeps a copy on SSD or in HBM. Stealing from HBM turns that page
 * dirty again, so
 * write-back for its own sake (flush, the mover) must not steal: it would
 * only move the dirt around. KVT_NONE when there is no room.
 *
 * The DRAM arena has one slot more than the configured capacity, and only
 * evictions (KVT_SLOT_SPARE) may take the last free one. That spare is what lets
 * an engine whose every slot is full still swap a DRAM-only page with a
 * dirty HBM page (write B down into the spare, then bring A up into B's
 * slot); without it the two copies would wait on each other. */
uint32_t kvt_dram_slot(kvt_engine *e, uint32_t pg, int how)
{
    struct kvt_arena *d = &e->arena[KVT_TIER_DRAM];
    if (d->nfree > 1)
        return kvt_arena_alloc(d, pg);
    if (how & KVT_SLOT_STEAL) {
        /* Pages SSD also holds go in the policy's order (no I/O now, a read
         * later); then copies of pages current in HBM (no I/O now, a
         * write-back when that page leaves HBM). */
        uint32_t v = e->ssd ? ssd_backed_victim(e) : redundant_victim(e);
        if (v != KVT_NONE) {
            drop_dram_copy(e, v);
            return kvt_arena_alloc(d, pg);
        }
    }
    return (how & KVT_SLOT_SPARE) ? kvt_arena_alloc(d, pg) : KVT_NONE;
}

/* Queues the D2H copies of pages[0..n) (DRAM slots already set) as one batch.
 * On error the pages are left as they were before (DRAM slots freed). */
static int submit_down(kvt_engine *e, const uint32_t *pages, struct kvt_copy *c, uint32_t n,
                       bool evict)
{
    if (!n)
        return 0;
    uint64_t f;
    int r = e->dev->submit(e->dev_priv, KVT_D2H, c, n, &f);
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_page *p = kvt_pg(&e->pt, pages[i]);
        if (r < 0) {
            kvt_arena_free(&e->arena[KVT_TIER_DRAM], p->slot[KVT_TIER_DRAM]);
            p->slot[KVT_TIER_DRAM] = KVT_NONE;
            continue;
        }
        if (evict)
            p->flags |= PG_EVICTING;
        kvt_inflight_push(e, KVT_D2H, pages[i], f);
        kvt_page_sync(e, pages[i], false);
    }
    if (r < 0)
        return kvt_fail(r, "queueing a write-back to DRAM failed: %s", kvt_strerror(r));
    return 0;
}

/* Batches are built in small stack arrays: the device takes them in one
 * submit, and 64 pages of 256 KiB are already 16 MiB in flight. */
#define BATCH 64

int kvt_make_room_hbm(kvt_engine *e, uint32_t need, struct kvt_wait *w)
{
    struct kvt_arena *h = &e->arena[KVT_TIER_HBM];
    struct usable_ctx u = { e, false };
    uint32_t pages[BATCH] = { 0 }, n = 0, coming = 0;
    struct kvt_copy c[BATCH];
    struct kvt_wait ssd_wait = { KVT_WAIT_NONE, 0 };
    int r = 0;

    while (h->nfree + coming < need) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_HBM, usable_hbm, &u);
        if (v == KVT_NONE)
            break;
        struct kvt_page *p = kvt_pg(&e->pt, v);
        if (p->flags & LOWER_VALID) {
            /* Clean: a copy below is current, dropping HBM costs no write. */
            page_flags(e, v, 0, PG_VALID_HBM);
            kvt_page_sync(e, v, false);
            kvt_page_trim(e, v);
            continue;
        }
        uint32_t ds = kvt_dram_slot(e, v, KVT_SLOT_STEAL | KVT_SLOT_SPARE);
        if (ds == KVT_NONE && e->ssd && kvt_make_room_dram(e, 1, &ssd_wait) == 0)
            ds = kvt_dram_slot(e, v, KVT_SLOT_STEAL | KVT_SLOT_SPARE);
        if (ds == KVT_NONE)
            break; /* DRAM is full: wait for the SSD (ssd_wait) or give up */
        p = kvt_pg(&e->pt, v);
        p->slot[KVT_TIER_DRAM] = ds;
        p->xfer = XFER_DOWN; /* keeps it out of victim() until submitted */
        pages[n] = v;
        c[n] = (struct kvt_copy){ kvt_arena_ptr(&e->arena[KVT_TIER_DRAM], ds),
                                  kvt_arena_ptr(h, p->slot[KVT_TIER_HBM]), e->page_bytes };
        n++;
        coming++;
        if (n == BATCH) {
            if ((r = submit_down(e, pages, c, n, true)) < 0)
                goto out_undo;
            n = 0;
        }
    }
    if ((r = submit_down(e, pages, c, n, true)) < 0)
        goto out_undo;
    if (h->nfree >= need)
        return 0;
    if (e->inflight[KVT_D2H].len) {
        *w = (struct kvt_wait){ KVT_WAIT_D2H, inflight_last(&e->inflight[KVT_D2H]) };
        return -EAGAIN;
    }
    if (ssd_wait.kind != KVT_WAIT_NONE) {
        *w = ssd_wait;
        return -EAGAIN;
    }
    return kvt_fail(KVT_EFULL, "HBM is full: %u of %u slots are pinned or in use and nothing "
                               "below can take a page", h->nslots - h->nfree, h->nslots);

out_undo:
    for (uint32_t i = 0; i < n; i++)
        kvt_pg(&e->pt, pages[i])->xfer = XFER_NONE;
    return r;
}

/* Writes back up to max dirty pages, coldest first (or, with all, every dirty
 * page including pinned ones, for flush). Sets *fence to the last D2H fence
 * to wait for (0 when nothing is in flight). KVT_EFULL when DRAM had no room
 * for one of them. */
static int writeback_pages(kvt_engine *e, const uint32_t *cand, uint32_t n)
{
    uint32_t pages[BATCH] = { 0 }, k = 0;
    struct kvt_copy c[BATCH];
    int r = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ds = kvt_dram_slot(e, cand[i], 0);
        struct kvt_page *p = kvt_pg(&e->pt, cand[i]);
        if (ds == KVT_NONE) {
            p->xfer = XFER_NONE;
            r = kvt_fail(KVT_EFULL, "DRAM has no free slot for a dirty page");
            continue;
        }
        p->slot[KVT_TIER_DRAM] = ds;
        pages[k] = cand[i];
        c[k] = (struct kvt_copy){ kvt_arena_ptr(&e->arena[KVT_TIER_DRAM], ds),
                                  kvt_arena_ptr(&e->arena[KVT_TIER_HBM], p->slot[KVT_TIER_HBM]),
                                  e->page_bytes };
        k++;
    }
    int s = submit_down(e, pages, c, k, false);
    if (s < 0) {
        for (uint32_t i = 0; i < k; i++)
            kvt_pg(&e->pt, pages[i])->xfer = XFER_NONE;
        return s;
    }
    return r;
}

int kvt_writeback(kvt_engine *e, uint32_t max_pages, bool all, uint64_t *fence)
{
    uint32_t cand[BATCH], n = 0, done = 0;
    int r = 0, s;
    struct usable_ctx u = { e, true };

    if (all) {
        for (uint32_t pg = 0; pg < e->pt.used && done < max_pages; pg++) {
            struct kvt_page *p = kvt_pg(&e->pt, pg);
            if (!(p->flags & PG_HASHED) || p->xfer != XFER_NONE || !pg_dirty_flags(p->flags))
                continue;
            p->xfer = XFER_DOWN;
            cand[n++] = pg;
            done++;
            if (n == BATCH) {
                if ((s = writeback_pages(e, cand, n)) < 0)
                    r = s;
                n = 0;
            }
        }
    } else {
        while (done < max_pages) {
            uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_HBM, usable_hbm, &u);
            if (v == KVT_NONE)
                break;
            kvt_pg(&e->pt, v)->xfer = XFER_DOWN;
            cand[n++] = v;
            done++;
            if (n == BATCH) {
                if ((s = writeback_pages(e, cand, n)) < 0)
                    r = s;
                n = 0;
            }
        }
    }
    if (n && (s = writeback_pages(e, cand, n)) < 0)
        r = s;
    *fence = inflight_last(&e->inflight[KVT_D2H]);
    return r;
}
