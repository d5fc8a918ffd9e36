/*
 * invariants.c — kvt_check_invariants(): the page-state rules of page.h,
 * checked over the whole engine, and the lock rules of tiers.h. Compiled in with KVT_DEBUG (the sanitizer
 * build of the test command turns it on); O(pages + slots) per call.
 *
 * A broken rule here is the kind of bug that serves one page's bytes under
 * another key, so it aborts with the page and the rule rather than
 * returning an error.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/engine.h"

/* The engine whose mover this thread is, NULL elsewhere: a thread-local,
 * because e->mover.thread may be written by pthread_create after the mover
 * already runs. */
static _Thread_local const kvt_engine *mover_of;

void kvt_mover_mark_self(const kvt_engine *e)
{
    mover_of = e;
}

bool kvt_mover_is_self(const kvt_engine *e)
{
    return mover_of == e;
}

#if KVT_DEBUG

#define CHECK(cond, pg, what)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "kvtier: invariant broken at page %u: %s\n", (pg), (what)); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static bool record_live(const struct kvt_page *p)
{
    return (p->flags & (PG_HASHED | PG_ZOMBIE)) || p->busy;
}

struct tally {
    uint64_t resident[3], dirty, pinned, live, owned[KVT_ARENAS], redundant, second_copies;
};

static void check_page(kvt_engine *e, uint32_t pg, struct tally *t)
{
    const struct kvt_page *p = kvt_pg(&e->pt, pg);
    static const uint16_t valid[KVT_ARENAS] = { PG_VALID_HBM, PG_VALID_DRAM };
    bool zombie = p->flags & PG_ZOMBIE;
    t->live++;
    for (int a = 0; a < KVT_ARENAS; a++) {
        if (p->slot[a] != KVT_NONE) {
            CHECK(p->slot[a] < kvt_arena_of(e, a)->nslots, pg, "slot out of range");
            CHECK(kvt_arena_of(e, a)->owner[p->slot[a]] == pg, pg, "arena owner is another page");
            t->owned[a]++;
        }
        if (p->flags & valid[a])
            CHECK(p->slot[a] != KVT_NONE, pg, "valid copy without a slot");
    }
    bool want_hbm = !zombie && (p->flags & PG_VALID_HBM) && !p->pins && !(p->flags & PG_EVICTING);
    CHECK(want_hbm == !!(p->flags & PG_LISTED_HBM), pg, "HBM candidate set disagrees with state");
    bool want_dram = !zombie && (p->flags & PG_VALID_DRAM);
    CHECK(want_dram == !!(p->flags & PG_LISTED_DRAM), pg, "DRAM candidate set disagrees with state");
    bool want_ssd = !zombie && (p->flags & PG_VALID_SSD);
    CHECK(want_ssd == !!(p->flags & PG_LISTED_SSD), pg, "SSD candidate set disagrees with state");
    if (p->xfer == XFER_UP)
        CHECK(p->slot[0] != KVT_NONE && !(p->flags & PG_VALID_HBM) && p->slot[1] != KVT_NONE, pg,
              "H2D in flight without its slots");
    if (p->xfer == XFER_DOWN)
        CHECK(p->slot[0] != KVT_NONE && p->slot[1] != KVT_NONE && !(p->flags & PG_VALID_DRAM), pg,
              "D2H in flight without its slots");
    if (p->flags & PG_HASHED)
        CHECK(kvt_ptable_find(&e->pt, &p->key) == pg, pg, "index does not find the page");
    CHECK(!zombie || !(p->flags & PG_VALID_ALL), pg, "a dropped page holds a valid copy");
    if (p->xfer == XFER_SSD_READ)
        CHECK(p->ssd_slot != KVT_NONE, pg, "SSD read in flight without its slot");
    for (int v = 0; v < 3; v++)
        t->resident[v] += !!(p->flags & (PG_VALID_HBM << v));
    t->dirty += (p->flags & PG_VALID_HBM) && !(p->flags & (PG_VALID_DRAM | PG_VALID_SSD));
    t->pinned += p->pins > 0;
    t->redundant += (p->flags & PG_VALID_DRAM) && (p->flags & PG_VALID_HBM);
    t->second_copies += kvt_page_second_copy(p->flags);
}

void kvt_check_invariants(kvt_engine *e)
{
    /* O(pages) a call would make a test that fills 64K pages quadratic:
     * above 4096 live pages, check one call in live/64. */
    static _Thread_local uint64_t calls;
    if (e->pt.live > 4096 && ++calls % (e->pt.live / 64))
        return;
    struct tally t = { 0 };
    uint64_t red = 0;
    for (uint32_t pg = e->pages.red_head; pg != KVT_NONE; pg = kvt_pg(&e->pt, pg)->red_next) {
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        CHECK((p->flags & PG_VALID_DRAM) && (p->flags & PG_VALID_HBM), pg,
              "listed as a redundant DRAM copy but is not one");
        red++;
    }
    for (uint32_t pg = 0; pg < e->pt.used; pg++)
        if (record_live(kvt_pg(&e->pt, pg)))
            check_page(e, pg, &t);
    for (int v = 0; v < 3; v++)
        CHECK(t.resident[v] == e->pages.st.resident_pages[v], KVT_NONE, "resident count drifted");
    CHECK(t.dirty == e->pages.dirty_hbm, KVT_NONE, "dirty count drifted");
    CHECK(t.pinned == e->pages.st.pinned_pages, KVT_NONE, "pinned count drifted");
    CHECK(t.live == e->pt.live, KVT_NONE, "live record count drifted");
    CHECK(t.redundant == red, KVT_NONE, "redundant DRAM copy list misses a page");
    CHECK(t.second_copies == e->pages.second_copies, KVT_NONE, "second-copy count drifted");
    for (int a = 0; a < KVT_ARENAS; a++)
        CHECK(t.owned[a] == kvt_arena_of(e, a)->nslots - kvt_arena_of(e, a)->nfree, KVT_NONE,
              "slots owned by no page (leak)");
}

void kvt_lock_abort(const char *msg)
{
    fprintf(stderr, "kvtier: lock rule broken: %s\n", msg);
    abort();
}

/* Catches state changed without the engine lock: a trylock that succeeds
 * means nobody, this thread included, held it. (Held by another thread
 * cannot be told from held by this one without tracking the owner on every
 * lock; the tests' single-threaded paths find the missing lock.) */
void kvt_assert_locked(kvt_engine *e, const char *fn)
{
    if (pthread_mutex_trylock(&e->lock) == 0) {
        pthread_mutex_unlock(&e->lock);
        fprintf(stderr, "kvtier: %s called without the engine lock\n", fn);
        abort();
    }
}

void kvt_assert_mover(kvt_engine *e, const char *fn)
{
    if (!kvt_mover_is_self(e)) {
        fprintf(stderr, "kvtier: %s touches the SSD pipe outside the mover thread\n", fn);
        abort();
    }
}

#endif /* KVT_DEBUG */
