/*
 * prefetch.c — bringing pages up ahead of use, for policies that know the
 * future (decode).
 *
 * Runs on the mover, under the lock, after the decode position moves. Two
 * stages: DRAM->HBM for the pages used soonest that are in DRAM, and one
 * stage further ahead SSD->DRAM for the soonest ones only on SSD. Each stage
 * is bounded by bytes in flight (prefetch_bytes), and a page is brought only
 * into a free slot or over a candidate whose next use is later than its own:
 * a prefetch never displaces a page needed sooner (no thrashing), and never
 * forces a write-back (only clean candidates make room).
 *
 * What a prefetch costs: a page brought early holds a slot that, under
 * Belady's MIN, would still hold a page the cycle needs. Free slots and
 * dead or unscheduled pages cost nothing; displacing a live page costs up
 * to one extra miss per step. So live pages are displaced only for a depth
 * of 1/128 of the misses a step must take anyway (pages beyond capacity),
 * which bounds the extra traffic over MIN to that fraction
 * (docs/design.md#prefetch-depth).
 */
#include <errno.h>

#include "residency/residency.h"

#define MAXBATCH 64

static bool want_up(void *ctx, uint32_t pg)
{
    return kvt_page_can_come(kvt_pg(&((kvt_engine *)ctx)->pt, pg), KVT_TIER_HBM);
}

static bool want_dram(void *ctx, uint32_t pg)
{
    return kvt_page_can_come(kvt_pg(&((kvt_engine *)ctx)->pt, pg), KVT_TIER_DRAM);
}

/* Candidates that can leave their tier for free: a copy elsewhere is current. */
static bool clean_hbm(void *ctx, uint32_t pg)
{
    return kvt_page_can_leave(kvt_pg(&((kvt_engine *)ctx)->pt, pg), KVT_TIER_HBM, KVT_LEAVE_FREE);
}

static bool clean_dram(void *ctx, uint32_t pg)
{
    return kvt_page_can_leave(kvt_pg(&((kvt_engine *)ctx)->pt, pg), KVT_TIER_DRAM, KVT_LEAVE_FREE);
}

/* Frees a slot of tier for page x by dropping the clean candidate used
 * furthest ahead, if that is later than x's own next use; a live one only
 * while live_ok. */
static bool room_for(kvt_engine *e, int tier, uint32_t x, bool live_ok)
{
    if (tier == KVT_TIER_DRAM && kvt_dram_drop_third_copy(e, x))
        return true; /* no I/O now, none later while HBM keeps it */
    uint32_t v = e->pol->victim(e->pol_priv, tier, tier == KVT_TIER_HBM ? clean_hbm : clean_dram, e);
    if (v == KVT_NONE)
        return false;
    uint64_t nv = e->pol->next_use(e->pol_priv, v);
    if (nv <= e->pol->next_use(e->pol_priv, x) || (nv < KVT_USE_UNKNOWN && !live_ok))
        return false;
    kvt_page_drop_copy(e, v, tier);
    return true;
}

/* Pages a stage may have in flight: prefetch_bytes when set, else 1/8 of
 * HBM for DRAM->HBM and 1/4 of DRAM for SSD->DRAM (a disk read is slower
 * than a copy, so the disk stage must run further ahead to keep the disk
 * busy through the caller's compute, docs/design.md#prefetch; live_depth()
 * bounds it by what that compute can hide). */
static uint32_t budget_pages(const kvt_engine *e, int tier)
{
    size_t b = e->cfg.prefetch_bytes ? e->cfg.prefetch_bytes
               : tier == KVT_TIER_HBM ? e->cfg.hbm_bytes / 8
                                      : e->cfg.dram_bytes / 4;
    size_t n = b / e->page_bytes;
    /* A page count past 32 bits is no limit, not its low bits (which may be 0). */
    return n > UINT32_MAX ? UINT32_MAX : n ? (uint32_t)n : 1;
}

/* How many pages in flight may have displaced live pages, for a step that
 * reads `pages`: 1/128 of the pages a step must miss anyway (those beyond
 * the tier's capacity).
 *
 * For SSD->DRAM, up to one group's share of those misses when the caller
 * computes long enough to hide them: as many as the disk reads while the
 * caller computes one group (kvt_advance and the SSD pipeline measure both
 * times), and no more than the disk's queue depth. With the 1/128 depth alone a group's reads start only when it is
 * acquired, and the caller's compute and the disk take turns instead of
 * overlapping. Reading further ahead than one compute interval hides nothing
 * more; reading more than a group's share of the misses would displace
 * pages the step still needs. A caller that computes next to nothing
 * between acquires (a replay) keeps the 1/128 depth.
 *
 * Only with the default budget (prefetch_bytes 0): the deeper reads buy
 * time with bytes (up to a group's share more per step than MIN), and a
 * caller that sets prefetch_bytes asked for the byte-frugal behaviour, which
 * tests/test_decode.c compares with MIN: a depth that followed timings would
 * make that comparison depend on the machine's load.
 * Why, and the evidence: docs/design.md#prefetch-depth,
 * docs/performance.md#prefetch-depth. */
static uint32_t live_depth(const kvt_engine *e, int tier, uint64_t pages)
{
    uint64_t cap = tier == KVT_TIER_HBM ? e->hbm.arena.nslots
                                        : e->dram.arena.nslots - 1;
    uint64_t depth = pages > cap ? (pages - cap) / 128 : 0;
    uint64_t groups = (uint64_t)e->sched.n_ids * e->sched.n_layers;
    if (tier == KVT_TIER_DRAM && !e->cfg.prefetch_bytes && pages > cap && groups &&
        e->pipe.ssd_ns_per_page) {
        uint64_t overlap = e->pace.compute_ns / e->pipe.ssd_ns_per_page;
        uint64_t share = (pages - cap) / groups;
        if (overlap > share)
            overlap = share;
        /* No more than the disk's queue holds: reads beyond it only wait,
         * in the disk's queue or, with a codec, read and waiting to be
         * decoded, each holding the DRAM slot of a page DRAM would have
         * kept, so a step reads more pages and decodes more too
         * (docs/performance.md#read-ahead-in-flight). */
        if (overlap > e->cfg.queue_depth)
            overlap = e->cfg.queue_depth;
        if (overlap > depth)
            depth = overlap;
    }
    return (uint32_t)depth;
}

static void prefetch_hbm(kvt_engine *e, uint32_t budget, uint64_t ws)
{
    uint32_t inflight = e->copy.ring[KVT_H2D].len, live = live_depth(e, KVT_TIER_HBM, ws);
    /* Slots freed by write-backs belong to the callers waiting for them: a
     * prefetch taking one would make the caller evict a second page. */
    if (inflight >= budget || e->hbm.room_waiters)
        return;
    uint32_t cand[MAXBATCH], batch[MAXBATCH], k = 0;
    struct kvt_copy c[MAXBATCH];
    uint32_t want = budget - inflight < MAXBATCH ? budget - inflight : MAXBATCH;
    uint32_t n = e->pol->prefetch(e->pol_priv, KVT_TIER_DRAM, want_up, e, cand, want);
    struct kvt_arena *h = &e->hbm.arena;
    for (uint32_t i = 0; i < n; i++) {
        if (!h->nfree && !room_for(e, KVT_TIER_HBM, cand[i], inflight + k < live))
            break;
        if (!kvt_copy_claim_up(e, cand[i], true, &c[k]))
            break;
        batch[k++] = cand[i];
    }
    if (!k || kvt_copy_submit_up(e, batch, c, k) < 0)
        return;
    e->prefetch.st.prefetch_pages += k;
    if (e->copy.ring[KVT_H2D].len > e->prefetch.st.prefetch_inflight_max)
        e->prefetch.st.prefetch_inflight_max = e->copy.ring[KVT_H2D].len;
}

/* How far ahead a disk read may reach: the next use, and in *group its
 * group (policy.h, use_at), of the page the schedule reads two
 * groups' worth of pages from the start of the current group, or four
 * in-flight budgets when groups are small; KVT_USE_UNKNOWN for no limit
 * (also when that reaches past a whole step: every page is within it).
 *
 * Bounding the pages in flight alone does not bound how far ahead they go.
 * Each read displaces the page used furthest ahead, the group just computed,
 * for one needed sooner, and the reads go on while any such page is left:
 * DRAM becomes a window over the next DRAM-capacity pages of the cycle, and
 * every page is read from SSD every step however large DRAM is. Within the
 * horizon the reads are the misses MIN would take anyway, only earlier
 * (docs/design.md#read-horizon, docs/performance.md#read-horizon). */
static uint64_t read_horizon(const kvt_engine *e, uint32_t budget, uint64_t ws, uint64_t *group)
{
    uint64_t groups = (uint64_t)e->sched.n_ids * e->sched.n_layers;
    *group = KVT_USE_UNKNOWN;
    if (!groups || !ws)
        return KVT_USE_UNKNOWN;
    uint64_t ahead = 2 * ((ws + groups - 1) / groups);
    if (ahead < 4 * (uint64_t)budget)
        ahead = 4 * (uint64_t)budget;
    return e->pol->use_at(e->pol_priv, ahead, group);
}

/* SSD->DRAM: bounded by the live depth for every page, free slots included,
 * and by the read horizon. DRAM free slots come and go with write-backs; one
 * a prefetch takes is one a demand read in between must make by evicting
 * (docs/design.md#prefetch-depth). */
static void prefetch_dram(kvt_engine *e, uint32_t budget, uint64_t ws)
{
    uint32_t live = live_depth(e, KVT_TIER_DRAM, ws);
    if (live < budget)
        budget = live;
    if (!e->ssd || e->ssd_tier.busy >= budget || e->hbm.room_waiters)
        return;
    uint32_t cand[MAXBATCH];
    uint32_t want = budget - (uint32_t)e->ssd_tier.busy;
    want = want < MAXBATCH ? want : MAXBATCH;
    uint32_t n = e->pol->prefetch(e->pol_priv, KVT_TIER_SSD, want_dram, e, cand, want);
    uint64_t hgroup, horizon = read_horizon(e, budget, ws, &hgroup);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t nu = horizon != KVT_USE_UNKNOWN ? e->pol->next_use(e->pol_priv, cand[i]) : 0;
        if (nu > horizon) {
            /* Candidates come a group at a time, soonest group first, but
             * a group's pages in no particular order: past the horizon's
             * group every candidate is further still. */
            if (e->pol->group_of(e->pol_priv, cand[i]) > hgroup)
                break;
            continue;
        }
        uint32_t s = kvt_dram_slot(e, cand[i], 0);
        if (s == KVT_NONE && room_for(e, KVT_TIER_DRAM, cand[i], true))
            s = kvt_dram_slot(e, cand[i], 0);
        if (s == KVT_NONE)
            break;
        kvt_ssd_queue_read(e, cand[i]);
    }
}

void kvt_prefetch(kvt_engine *e)
{
    if (!e->pol->prefetch || e->failed)
        return;
    /* Pages a step reads (0: unknown): both stages size their depth by it. */
    uint64_t ws = e->pol->working_set(e->pol_priv);
    prefetch_hbm(e, budget_pages(e, KVT_TIER_HBM), ws);
    prefetch_dram(e, budget_pages(e, KVT_TIER_DRAM), ws);
}
