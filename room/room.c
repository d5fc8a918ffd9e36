/*
 * room.c — room in a full engine: capacity and admission, evicting the
 * policy's victim, a slot for a new page (or what to wait for), and the
 * waits of puts for other calls to let go.
 *
 * The API's put and acquire ask here; the tiers below make room in their
 * own arena (hbm.c, dram.c), and this file decides which page leaves the
 * engine and when a caller waits. It owns e->slots (struct kvt_slot_wait).
 */
#include <errno.h>
#include <time.h>

#include "room/room.h"

/* Capacity is counted in pages, not slots: every page needs one slot
 * somewhere, and a second copy is a cache that can always be given up.
 * Records in use (keys, put reservations, dropped pages still being read)
 * may not exceed it. With persist the SSD is the store of record and HBM
 * and DRAM cache it: every page must fit there at once, or kvt_flush could
 * not make them all durable and kvt_close would lose some; with HBM + DRAM
 * + SSD pages, a flushed copy given up for room came back older or not at
 * all after a crash (docs/design.md#when-the-engine-is-full). */
uint64_t kvt_capacity(const kvt_engine *e)
{
    if (kvt_persisted(e))
        return kvt_ssd_durable_room(e);
    return (uint64_t)e->hbm.arena.nslots + e->dram.arena.nslots - 1 +
           (e->ssd ? kvt_slots(e)->usable(e->ssd) : 0);
}

uint64_t kvt_room(const kvt_engine *e)
{
    uint64_t cap = kvt_capacity(e);
    return e->pt.live < cap ? cap - e->pt.live : 0;
}

int kvt_admit(kvt_engine *e)
{
    uint64_t cap = kvt_capacity(e);
    if (e->pt.live < cap)
        return 0;
    return kvt_fail(KVT_EFULL, "every tier is full: %u pages held, capacity %llu pages (%s)",
                    e->pt.live, (unsigned long long)cap,
                    kvt_persisted(e) ? "what the SSD holds durably, with persist"
                                     : "HBM + DRAM + SSD");
}

/* A page that a cache may drop to make room: indexed, unpinned, no reader,
 * no copy in flight. */
static bool droppable(void *ctx, uint32_t pg)
{
    const struct kvt_page *p = kvt_pg(&((kvt_engine *)ctx)->pt, pg);
    return (p->flags & PG_HASHED) && !p->pins && kvt_page_idle(p);
}

/* KVT_PUBLISH_EVICT: a page the cache drops goes to the shared tier, if its
 * bytes are in DRAM (a copy under the lock, never a wait) and did not come
 * from there; one only on SSD or in HBM is not published (counted). */
static void publish_victim(kvt_engine *e, uint32_t v)
{
    const struct kvt_page *p = kvt_pg(&e->pt, v);
    if (kvt_remote_was_loaded(e->remote, &p->key))
        return; /* it came from there */
    if (p->flags & PG_VALID_DRAM)
        kvt_remote_offer(e->remote, &p->key, kvt_arena_ptr(&e->dram.arena, p->slot[KVT_TIER_DRAM]));
    else
        kvt_remote_skip(e->remote);
}

/* KVT_FLAG_EVICT: room for one page by dropping a whole page, the policy's
 * victim from the bottom tier up (a page on SSD costs nothing but its slot
 * to lose; one only in DRAM or HBM is still the policy's choice when no SSD
 * page can go). A policy that ranks across tiers (leaves_first) also weighs
 * the DRAM tier's victim against the SSD's and the lower goes: otherwise
 * the SSD's victim leaves and the DRAM page, which the policy values less,
 * is written to SSD in its place to make room in DRAM, a write for a block
 * that leaves next (SSD admission: docs/sim.md#ssd-admission). 0, or
 * KVT_EFULL when the flag is off or every page is held. */
int kvt_evict_one(kvt_engine *e)
{
    if (!(e->cfg.flags & KVT_FLAG_EVICT))
        return KVT_EFULL;
    uint32_t v = KVT_NONE;
    int t = KVT_TIERS - 1;
    for (; t >= 0 && v == KVT_NONE; t--)
        v = e->pol->victim(e->pol_priv, t, droppable, e);
    if (v == KVT_NONE)
        return KVT_EFULL;
    if (t + 1 == KVT_TIER_SSD && e->pol->leaves_first) {
        uint32_t d = e->pol->victim(e->pol_priv, KVT_TIER_DRAM, droppable, e);
        if (d != KVT_NONE && d != v && e->pol->leaves_first(e->pol_priv, d, v))
            v = d;
    }
    if (e->remote && kvt_remote_publish_mode(e->remote) == KVT_PUBLISH_EVICT)
        publish_victim(e, v);
    kvt_page_destroy(e, v);
    e->slots.st.evicted_pages++;
    return 0;
}

/* A full cache storing n pages makes room for all of them before the first
 * (locked; may wait unlocked): the pages that must leave are dropped at once
 * (their SSD slots come back in one deletion of the mover), then the DRAM
 * victims' writes go to the disk together. Page by page, each page waited
 * for its own deletion and its own write: two round trips through the
 * mover per page, most of a prefix cache's put time
 * (docs/replay.md#measurements). Returns the DRAM slots still short once
 * those writes are queued (at most that many are on their way): while the
 * SSD is busy, the pages wait for them instead of queueing writes of their
 * own (kvt_room_slot). 0 when there is nothing to do or it cannot be done:
 * each page then makes its own room, and says what stops it. *tight: the
 * engine has room for the new keys only, so an overwrite in the batch gives
 * its old page up before its own record is made (the put). */
uint32_t kvt_room_ahead(kvt_engine *e, const kvt_key *keys, size_t n, bool *tight)
{
    *tight = false;
    /* A failed eviction write is told once, by the page that meets it;
     * nothing is dropped for a put that then fails with it. */
    if (!(e->cfg.flags & KVT_FLAG_EVICT) || !e->ssd || n < 2 || e->failed ||
        e->ssd_tier.evict_err)
        return 0;
    size_t fresh = 0; /* keys not present: the records this put adds */
    for (size_t i = 0; i < n; i++)
        fresh += kvt_ptable_find(&e->pt, &keys[i]) == KVT_NONE;
    uint32_t usable = e->dram.arena.nslots > 1 ? e->dram.arena.nslots - 1 : 0;
    uint32_t want = n < usable ? (uint32_t)n : usable;
    if (kvt_room(e) >= n && kvt_dram_room(e) >= want)
        return 0;
    bool dropped = false;
    while (kvt_room(e) < fresh && kvt_evict_one(e) == 0)
        dropped = true;
    *tight = kvt_room(e) < n;
    /* The dropped pages' SSD slots, freed by the mover's deletion. A few
     * waits at most: other callers' deletions may keep coming. */
    for (int i = 0; dropped && e->ssd_tier.ndels && !e->failed && i < 4; i++) {
        struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_tier.progress };
        kvt_wait_on(e, &w, false);
    }
    if (e->failed || e->ssd_tier.evict_err || kvt_dram_room(e) >= want)
        return 0;
    struct kvt_wait w = { KVT_WAIT_NONE, 0 };
    return kvt_make_room_dram(e, want, &w) == -EAGAIN ? want - kvt_dram_room(e) : 0;
}


/* Looks at the pages holding DRAM slots, then HBM slots (locked; on the way
 * to KVT_EFULL only: a full cache that evicts finds a droppable page early).
 * own: slots the calling put's batch reserved itself, which are not other
 * calls'. *tier: the tier of the droppable page found (FREEABLE). */
static enum kvt_slot_hold slots_held(kvt_engine *e, size_t own, int *tier)
{
    bool evicts = e->cfg.flags & KVT_FLAG_EVICT;
    size_t transient = 0;
    for (int t = KVT_TIER_DRAM; t >= KVT_TIER_HBM; t--) {
        const struct kvt_arena *a = kvt_arena_of(e, t);
        for (uint32_t s = 0; s < a->nslots; s++) {
            uint32_t pg = a->owner[s];
            if (pg == KVT_NONE)
                continue;
            const struct kvt_page *p = kvt_pg(&e->pt, pg);
            if (evicts && droppable(e, pg)) {
                /* A page only in HBM goes down to DRAM once other calls let
                 * go of DRAM's slots: while they hold them, wait for that
                 * rather than drop it (a cache with room lost pages to
                 * four threads' puts and gets). */
                if (t == KVT_TIER_HBM && transient > own)
                    return KVT_SLOTS_CALLS;
                *tier = t;
                return KVT_SLOTS_FREEABLE;
            }
            transient += !p->pins && !kvt_page_idle(p);
        }
    }
    return transient > own ? KVT_SLOTS_CALLS : KVT_SLOTS_HELD;
}

/* Drops the policy's victim among the pages that hold a slot of tier t. */
static int evict_holder(kvt_engine *e, int t)
{
    uint32_t v = e->pol->victim(e->pol_priv, t, droppable, e);
    if (v == KVT_NONE)
        return KVT_EFULL;
    if (e->remote && kvt_remote_publish_mode(e->remote) == KVT_PUBLISH_EVICT)
        publish_victim(e, v);
    kvt_page_destroy(e, v);
    e->slots.st.evicted_pages++;
    return 0;
}

/* A slot for a new page: DRAM first (that is what storage is for), else HBM.
 * May wait (unlocked) for write-backs that make room; *coming counts the
 * slots kvt_room_ahead set on their way; own is how many slots the batch holds.
 *
 * A cache drops pages for a slot only while an idle page holds one. An idle
 * page in DRAM can go down once the SSD has room: the policy's victims go
 * from the bottom tier up (kvt_evict_one), so the SSD's own victim makes that
 * room. An idle page only in HBM cannot (DRAM is what it would go to): it
 * goes itself, unless other calls hold DRAM's slots, whose end lets it go
 * down instead (the put waits). When every slot is held by calls or pins,
 * dropping pages that live on SSD frees none: a put that did so emptied the
 * SSD tier and then failed anyway. KVT_EFULL then, *hold saying why
 * (the put may wait). */
int kvt_room_slot(kvt_engine *e, uint32_t pg, int *tier, uint32_t *coming, size_t own,
                  enum kvt_slot_hold *hold)
{
    for (;;) {
        if (kvt_dram_slot(e, pg, KVT_SLOT_STEAL) != KVT_NONE) {
            *coming -= *coming > 0;
            *tier = KVT_TIER_DRAM;
            return 0;
        }
        struct kvt_wait w = { KVT_WAIT_NONE, 0 };
        int r;
        if (*coming && kvt_ssd_waiting(e)) {
            /* At most one wait per slot on its way: the SSD may stay busy
             * with other work while other callers take the slots. */
            (*coming)--;
            w = (struct kvt_wait){ KVT_WAIT_SSD, e->ssd_tier.progress };
            r = -EAGAIN;
        } else {
            *coming = 0;
            r = e->ssd ? kvt_make_room_dram(e, 1, &w) : KVT_EFULL;
        }
        if (r == 0)
            continue; /* DRAM has room now */
        if (r == -EAGAIN) {
            kvt_wait_on(e, &w, false);
            if (e->failed)
                return kvt_check_failed(e);
            continue;
        }
        if (r != KVT_EFULL)
            return r;   /* the SSD refused the write-back: its error, as it is */
        r = e->hbm.arena.nfree ? 0 : kvt_make_room_hbm(e, 1, &w);
        if (r == 0) {
            kvt_page_take_slot(e, pg, KVT_TIER_HBM);
            *tier = KVT_TIER_HBM;
            return 0;
        }
        if (r != -EAGAIN) {
            int t = KVT_TIER_DRAM;
            *hold = slots_held(e, own, &t);
            if (*hold == KVT_SLOTS_FREEABLE &&
                (t == KVT_TIER_DRAM ? kvt_evict_one(e) : evict_holder(e, t)) == 0)
                continue; /* a page dropped: its slots are free, or free once written */
            return kvt_fail(KVT_EFULL, "no tier can hold another page: the HBM %u and DRAM %u "
                            "slots are all %s", e->hbm.arena.nslots, e->dram.arena.nslots,
                            *hold == KVT_SLOTS_CALLS ? "in use, some by other calls"
                                                 : "in use");
        }
        if ((r = kvt_wait_on(e, &w, false)) < 0)
            return r;
        if (e->failed)
            return kvt_check_failed(e);
    }
}

/* How long a put waits in all for other calls to let go of what it needs
 * (slots, or the old page of a key it stores) before it gives up: those
 * calls normally end within milliseconds; one that does not (a disk that
 * stopped answering) must not hang the put for ever. */
#define PUT_LET_GO_MAX_NS 10000000000ull

/* Tests set this to give up sooner; 0 = PUT_LET_GO_MAX_NS. */
uint64_t kvt_test_let_go_max_ns;

/* How long one wait lasts at most: a page let go wakes it at once (page.c,
 * page_let_go); the bound is for a slot freed some other way. */
#define PUT_LET_GO_WAIT_NS 20000000ull

/* The CLOCK_MONOTONIC time ns from now, as pthread_cond_timedwait takes it
 * (e->slots.cv runs on that clock: engine.c). */
static struct timespec mono_after(uint64_t ns)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    ns += (uint64_t)t.tv_nsec;
    t.tv_sec += (time_t)(ns / 1000000000ull);
    t.tv_nsec = (long)(ns % 1000000000ull);
    return t;
}

/* Waits (locked; unlocked while waiting) until a page is let go
 * (page_let_go) or a moment has passed, and adds the time to *waited, the
 * whole kvt_put's. False, without waiting, once the put has waited
 * PUT_LET_GO_MAX_NS in all (only the time spent here counts: a put that
 * writes many batches down to SSD is not the worse for it); false too when
 * the engine failed. */
bool kvt_room_wait_let_go(kvt_engine *e, uint64_t *waited)
{
    if (e->failed ||
        *waited >= (kvt_test_let_go_max_ns ? kvt_test_let_go_max_ns : PUT_LET_GO_MAX_NS))
        return false;
    uint64_t t0 = kvt_now_ns(), epoch = e->pages.let_go;
    struct timespec until = mono_after(PUT_LET_GO_WAIT_NS);
    e->slots.waiters++;
    while (e->pages.let_go == epoch && !e->failed &&
           pthread_cond_timedwait(&e->slots.cv, &e->lock, &until) == 0)
        ;
    e->slots.waiters--;
    *waited += kvt_now_ns() - t0;
    kvt_settle(e);
    return !e->failed;
}

/* The condition variable puts wait on for a slot to be let go (page.c's
 * page_let_go broadcasts it): engine_alloc to engine_free. */
void kvt_slots_init(kvt_engine *e)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* kvt_room_wait_let_go's timed waits */
    pthread_cond_init(&e->slots.cv, &ca);
    pthread_condattr_destroy(&ca);
}

void kvt_slots_let_go(kvt_engine *e)
{
    if (e->slots.waiters)
        pthread_cond_broadcast(&e->slots.cv);
}

void kvt_slots_fini(kvt_engine *e)
{
    pthread_cond_destroy(&e->slots.cv);
}
