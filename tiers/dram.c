/*
 * dram.c — DRAM slots: who gets one, which copy gives one up, room on DRAM.
 *
 * DRAM holds copies of pages HBM holds (inclusive caching), pages only DRAM
 * holds, and with an SSD tier copies that SSD backs. A slot is given up for
 * free when another tier holds the page current; a DRAM-only page must be
 * written to SSD first (ssd.c queues it, the mover writes it). Under the
 * engine lock.
 *
 * The arena has one slot more than the configured capacity, the spare: only
 * evictions (KVT_SLOT_SPARE) may take the last free slot. That spare is what
 * lets an engine whose every slot is full still swap a DRAM-only page with
 * a dirty HBM page (write B down into the spare, then bring A up into B's
 * slot); without it the two copies would wait on each other. Settling gives
 * it back (kvt_dram_restore_spare) as soon as a copy can go for free.
 */
#include <errno.h>
#include <string.h>

#include "tiers/tiers.h"

static bool can_leave(kvt_engine *e, uint32_t pg, enum kvt_leave how)
{
    return kvt_page_can_leave(kvt_pg(&e->pt, pg), KVT_TIER_DRAM, how);
}

static bool movable_dram(void *ctx, uint32_t pg)
{
    return can_leave(ctx, pg, KVT_LEAVE_ANY);
}

/* ------------------------------------------------------------- victims */

/* The oldest redundant DRAM copy (HBM holds the page) that no copy or
 * reader is using, or KVT_NONE. O(1) unless the oldest are busy. */
static uint32_t redundant_victim(kvt_engine *e)
{
    for (uint32_t pg = e->pages.red_head; pg != KVT_NONE; pg = kvt_pg(&e->pt, pg)->red_next)
        if (can_leave(e, pg, KVT_LEAVE_ANY))
            return pg;
    return KVT_NONE;
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
 * them (docs/design.md#third-copies; the evidence:
 * docs/performance.md#third-copies). The price: a page HBM lets go of before
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
    for (uint32_t pg = e->pages.red_head; pg != KVT_NONE && seen < 32;
         pg = kvt_pg(&e->pt, pg)->red_next) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!can_leave(e, pg, KVT_LEAVE_ANY) || p->pins || !(p->flags & PG_VALID_SSD) ||
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
 * first if it must be, by the callers' own path: a third copy dropped ahead
 * of it is a read a sliding window pays for again
 * (docs/performance.md#third-copies). */
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
    kvt_page_drop_copy(e, t, KVT_TIER_DRAM);
    return true;
}

/* With an SSD tier: the DRAM copy the policy would drop first, if it can go
 * now (SSD or HBM also holds the page). When the policy's first choice is a
 * page only in DRAM, none: that one must be written down
 * (kvt_make_room_dram) rather than a page needed sooner dropped in its
 * place. Copies of pages in HBM are not taken first-in first-out here: a
 * page whose DRAM copy goes while SSD still has it would be read from SSD
 * again the next time it leaves HBM (sink pages, read first, would pay most). */
static uint32_t ssd_backed_victim(kvt_engine *e)
{
    uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, movable_dram, e);
    uint32_t t = never_used(e, v) ? KVT_NONE : third_copy(e);
    if (t != KVT_NONE)
        return t;
    if (v == KVT_NONE)
        return KVT_NONE;
    return (kvt_pg(&e->pt, v)->flags & (PG_VALID_SSD | PG_VALID_HBM)) ? v : KVT_NONE;
}

/* A DRAM copy that can go for free now, or KVT_NONE: without an SSD tier
 * the oldest copy of a page HBM holds; with one, in the policy's order. */
static uint32_t free_victim(kvt_engine *e)
{
    return e->ssd ? ssd_backed_victim(e) : redundant_victim(e);
}

void kvt_dram_restore_spare(kvt_engine *e)
{
    uint32_t v = free_victim(e);
    if (v != KVT_NONE)
        kvt_page_drop_copy(e, v, KVT_TIER_DRAM);
}

/* ------------------------------------------------------------- slots */

/* A DRAM slot for page pg: a free one, or (KVT_SLOT_STEAL) the slot of a
 * copy that can go for free: pages SSD also holds in the policy's order (no
 * I/O now, a read later), then copies of pages current in HBM (no I/O now,
 * a write-back when that page leaves HBM). Stealing from HBM turns that
 * page dirty again, so write-back for its own sake (flush, the mover) must
 * not steal: it would only move the dirt around. */
uint32_t kvt_dram_slot(kvt_engine *e, uint32_t pg, int how)
{
    KVT_ASSERT_LOCKED(e);
    if (e->dram.arena.nfree > 1)
        return kvt_page_take_slot(e, pg, KVT_TIER_DRAM);
    if (how & KVT_SLOT_STEAL) {
        uint32_t v = free_victim(e);
        if (v != KVT_NONE) {
            kvt_page_drop_copy(e, v, KVT_TIER_DRAM);
            return kvt_page_take_slot(e, pg, KVT_TIER_DRAM);
        }
    }
    return (how & KVT_SLOT_SPARE) ? kvt_page_take_slot(e, pg, KVT_TIER_DRAM) : KVT_NONE;
}

/* ------------------------------------------------------------- room */

static bool usable_dram_evict(void *ctx, uint32_t pg)
{
    kvt_engine *e = ctx;
    return can_leave(e, pg, e->ssd ? KVT_LEAVE_ANY : KVT_LEAVE_FREE);
}

/* Whether a DRAM copy with these flags goes for free: SSD holds the page,
 * or HBM does and no flush is bringing dirty pages down (dropping it then
 * makes the HBM copy dirty again: it is written to SSD instead). */
static bool goes_free(const kvt_engine *e, uint16_t f)
{
    return (f & PG_VALID_SSD) || ((f & PG_VALID_HBM) && !(e->dram.flushing && e->ssd));
}

static bool usable_dram_free(void *ctx, uint32_t pg)
{
    kvt_engine *e = ctx;
    return can_leave(e, pg, KVT_LEAVE_FREE) && goes_free(e, kvt_pg(&e->pt, pg)->flags);
}

void kvt_dram_flushing(kvt_engine *e, bool on)
{
    e->dram.flushing = on;
}

static bool usable_dram_write(void *ctx, uint32_t pg)
{
    return can_leave(ctx, pg, KVT_LEAVE_WRITE);
}

uint32_t kvt_dram_room(const kvt_engine *e)
{
    uint32_t n = e->dram.arena.nfree;
    return n ? n - 1 : 0;
}

/* Room in the policy's order: third copies and copies that go for free are
 * dropped, DRAM-only pages queued to SSD as evictions. *coming counts slots
 * on their way; returns the error that stopped it (KVT_EFULL: none). */
static int evict_in_order(kvt_engine *e, uint32_t need, uint32_t *coming)
{
    while (kvt_dram_room(e) + *coming < need) {
        if (kvt_dram_drop_third_copy(e, KVT_NONE))
            continue;
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, usable_dram_evict, e);
        if (v == KVT_NONE)
            break;
        if (goes_free(e, kvt_pg(&e->pt, v)->flags)) {
            kvt_page_drop_copy(e, v, KVT_TIER_DRAM);
            continue;
        }
        int q = kvt_ssd_queue_write(e, v, true);
        if (q == -EAGAIN) {
            (*coming)++; /* a slot is being freed for it: wait and try again */
            break;
        }
        if (q < 0)
            return q;
        (*coming)++;
    }
    return KVT_EFULL;
}

int kvt_make_room_dram(kvt_engine *e, uint32_t need, struct kvt_wait *w)
{
    uint32_t coming = 0;
    KVT_ASSERT_LOCKED(e);
    /* An eviction's write failed since the last call (a full disk, a file
     * refused): its caller hears of it, once, instead of queueing the same
     * page again for ever. */
    int err = kvt_ssd_take_evict_err(e);
    if (err)
        return kvt_fail(err, "cannot write pages to SSD to make room in DRAM: %s",
                        kvt_strerror(err));
    err = evict_in_order(e, need, &coming);
    /* The SSD cannot take the policy's choice: pages with a copy elsewhere
     * can still go, even if used sooner. */
    while (kvt_dram_room(e) + coming < need) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, usable_dram_free, e);
        if (v == KVT_NONE)
            break;
        kvt_page_drop_copy(e, v, KVT_TIER_DRAM);
    }
    /* Going to SSD costs a round trip: while at it, write a batch more of the
     * coldest DRAM-only pages (up to a queue depth, at most 1/8 of DRAM), but
     * keep them: they turn clean, so the next callers drop them for free, in
     * the policy's order, instead of being evicted early here. */
    uint32_t nslots = e->dram.arena.nslots;
    uint32_t batch = e->cfg.queue_depth < nslots / 8 ? e->cfg.queue_depth : nslots / 8;
    for (uint32_t extra = 0; coming && extra < batch; extra++) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, usable_dram_write, e);
        if (v == KVT_NONE || kvt_ssd_queue_write(e, v, false) < 0)
            break;
    }
    if (kvt_dram_room(e) >= need)
        return 0;
    if (kvt_ssd_waiting(e)) {
        *w = (struct kvt_wait){ KVT_WAIT_SSD, e->ssd_tier.progress };
        return -EAGAIN;
    }
    if (err == KVT_EFULL)
        return kvt_fail(KVT_EFULL, "DRAM (%u slots) is full and the SSD tier can take none of "
                        "its pages%s", e->dram.arena.nslots,
                        e->ssd_tier.write_err == -ENOSPC ? " (the disk is full)" : "");
    return kvt_fail(err, "cannot write pages to SSD to make room in DRAM: %s", kvt_strerror(err));
}

/* Drops every DRAM copy that SSD also holds (bench: empty DRAM without I/O). */
void kvt_dram_drop_redundant(kvt_engine *e)
{
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!(p->flags & PG_HASHED) || !kvt_page_idle(p) ||
            (p->flags & (PG_VALID_DRAM | PG_VALID_SSD)) != (PG_VALID_DRAM | PG_VALID_SSD))
            continue;
        kvt_page_drop_copy(e, pg, KVT_TIER_DRAM);
    }
}

/* ------------------------------------------------------------- write-ahead */

/* With persist every page must reach SSD before kvt_flush returns, so time
 * the disk idles while puts fill DRAM is time the flush pays for later:
 * storing 32 MiB pages, the disk idled while the first half of DRAM filled
 * and the flush then wrote the pages still only in DRAM with nothing else
 * left to overlap (docs/performance.md#durable-store). While the SSD has
 * little queued, the mover writes DRAM-only pages down ahead. They stay in
 * DRAM, clean: an eviction later drops them for free, and the flush finds
 * them done.
 *
 * Only pages nobody may still change: a page valid in HBM may be rewritten
 * there (a decode step appending to its tail page), which would make the
 * write wasted, so only DRAM-only pages, idle, unpinned, not being created.
 * Never a second try of a failed write (the callers' evictions and the
 * flush meet that error and report it), and not while a flush waits: pages
 * put meanwhile are not its to wait for. */

/* Bytes of SSD work queued or in flight below which the disk counts as
 * having room: two of the tier's in-flight windows (ssd.c,
 * SSD_INFLIGHT_BYTES), so that a write ahead keeps the disk busy without
 * holding a caller's read behind much. */
#define AHEAD_BYTES ((uint64_t)32 << 20)

/* Arena slots one call looks at, at most. */
#define AHEAD_SCAN 256u

static bool ahead_wanted(const kvt_engine *e)
{
    return e->cfg.persist && e->ssd && !e->failed && !e->ssd_tier.write_err &&
           !e->dram.ahead_off && !kvt_ssd_flushing(e);
}

/* Whether DRAM is short of room: evictions are making it, in the policy's
 * order, and a page written ahead is passed over while in flight (a copy in
 * flight cannot leave) for a newer one. Ahead of a long store of small
 * pages, with up to 32 MiB written ahead from anywhere in DRAM whenever an
 * eviction had just freed a slot, pages older than DRAM's worth were still
 * in DRAM at the end (tests/cli_bench_ssd.cmake, --api get, about one run
 * in 25). Short: no more free slots than an eviction writes in a batch
 * (kvt_make_room_dram). */
static bool ahead_tight(const kvt_engine *e)
{
    uint32_t eighth = e->dram.arena.nslots / 8;
    return kvt_dram_room(e) <= (eighth ? eighth : 1);
}

/* Pages the disk has room for now: with DRAM short, one at a time and only
 * on an idle disk, the policy's next victim (kvt_dram_write_ahead), which
 * moves the order of evictions by one page at most. */
static uint64_t ahead_room(const kvt_engine *e)
{
    if (ahead_tight(e))
        return e->ssd_tier.busy ? 0 : 1;
    uint64_t queued = e->ssd_tier.busy * e->page_bytes;
    return queued >= AHEAD_BYTES ? 0 : (AHEAD_BYTES - queued + e->page_bytes - 1) / e->page_bytes;
}

static bool ahead_candidate(const struct kvt_page *p)
{
    return (p->flags & PG_HASHED) && !(p->flags & (PG_ZOMBIE | PG_CREATED)) &&
           (p->flags & PG_VALID_ALL) == PG_VALID_DRAM && !p->pins &&
           kvt_page_can_leave(p, KVT_TIER_DRAM, KVT_LEAVE_WRITE);
}

/* What changes when a page may have become a candidate: a slot taken or
 * given up in either arena, a copy made valid or dropped, a page let go by
 * a call, a copy or a pin (page.c moves e->pages.let_go). */
static void ahead_counts(const kvt_engine *e, uint64_t c[KVT_AHEAD_COUNTS])
{
    c[0] = (uint64_t)e->dram.arena.nfree << 32 | e->hbm.arena.nfree;
    c[1] = e->pages.st.resident_pages[KVT_TIER_DRAM];
    c[2] = e->pages.st.resident_pages[KVT_TIER_SSD];
    c[3] = e->pages.let_go;
}

bool kvt_dram_ahead_due(const kvt_engine *e)
{
    if (!ahead_wanted(e) || !ahead_room(e))
        return false;
    uint64_t c[KVT_AHEAD_COUNTS];
    ahead_counts(e, c);
    return memcmp(c, e->dram.ahead_none, sizeof(c)) != 0;
}

void kvt_dram_write_ahead_off(kvt_engine *e)
{
    e->dram.ahead_off = true;
}

bool kvt_dram_writes_ahead(const kvt_engine *e)
{
    return !e->dram.ahead_off;
}

static bool ahead_usable(void *ctx, uint32_t pg)
{
    kvt_engine *e = ctx;
    return ahead_candidate(kvt_pg(&e->pt, pg));
}

/* Queues pg's write ahead: false when it cannot be queued now. */
static bool ahead_queue(kvt_engine *e, uint32_t pg)
{
    int r = kvt_ssd_queue_write(e, pg, false);
    if (r < 0 && r != -EAGAIN && r != KVT_EFULL)
        e->dram.ahead_off = true; /* the disk refuses: the callers' own writes say so */
    return r == 0; /* else no slot free now: one comes with a commit or a deletion */
}

/* Looks at the arena from where the last call stopped. A sweep of every
 * slot that finds none leaves the counts of its start in ahead_none: a
 * page that became a candidate after that start changed them. A sweep
 * spans calls only while the counts stay as at its start: a page may have
 * become a candidate since, in a slot the sweep had passed, and a sweep
 * that ended there would hold nothing up to the next kick, which may never
 * come (the mover slept with pages never written; tests/test_ssd.c,
 * test_write_ahead_sweep_starts_again). So it starts again. */
void kvt_dram_write_ahead(kvt_engine *e)
{
    KVT_ASSERT_LOCKED(e);
    if (!kvt_dram_ahead_due(e))
        return;
    struct kvt_dram *d = &e->dram;
    if (d->ahead_seen) {
        uint64_t c[KVT_AHEAD_COUNTS];
        ahead_counts(e, c);
        if (memcmp(c, d->ahead_start, sizeof(c)) != 0)
            d->ahead_seen = 0;
    }
    uint64_t room = ahead_room(e);
    if (room && ahead_tight(e)) {
        uint32_t v = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, ahead_usable, e);
        if (v == KVT_NONE) /* the policy looked at every DRAM page: none until they change */
            ahead_counts(e, d->ahead_none);
        else
            (void)ahead_queue(e, v);
        return;
    }
    for (uint32_t k = 0; room && k < AHEAD_SCAN && k < d->arena.nslots; k++) {
        uint32_t s = d->ahead_at, pg = d->arena.owner[s];
        d->ahead_at = s + 1 < d->arena.nslots ? s + 1 : 0;
        if (!d->ahead_seen)
            ahead_counts(e, d->ahead_start);
        if (pg == KVT_NONE || !ahead_candidate(kvt_pg(&e->pt, pg))) {
            if (++d->ahead_seen == d->arena.nslots) {
                memcpy(d->ahead_none, d->ahead_start, sizeof(d->ahead_none));
                d->ahead_seen = 0;
                return;
            }
            continue;
        }
        d->ahead_seen = 0;
        if (!ahead_queue(e, pg))
            return;
        room--;
    }
}

/* ------------------------------------------------------------- open, close */

int kvt_dram_open(kvt_engine *e)
{
    const struct kvt_device_ops *dev = e->hbm.dev;
    size_t pb = e->page_bytes;
    /* One spare slot: see kvt_dram_slot(). */
    uint32_t n = (uint32_t)(e->cfg.dram_bytes / pb) + 1;
    void *base;
    e->dram.alloc_bytes = (size_t)n * pb;
    int r = dev->host_alloc(e->hbm.dev_priv, e->dram.alloc_bytes, &base);
    if (r < 0)
        return kvt_fail(r, "could not allocate the DRAM arena (%zu bytes): %s",
                        e->dram.alloc_bytes, kvt_strerror(r));
    if ((r = kvt_arena_init(&e->dram.arena, base, pb, n, &e->meta_bytes)) < 0) {
        dev->host_free(e->hbm.dev_priv, base, e->dram.alloc_bytes);
        return r;
    }
    return 0;
}

void kvt_dram_close(kvt_engine *e)
{
    void *base = e->dram.arena.base;
    kvt_arena_fini(&e->dram.arena, &e->meta_bytes);
    e->hbm.dev->host_free(e->hbm.dev_priv, base, e->dram.alloc_bytes);
}
