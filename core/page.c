/*
 * page.c — every change of a page's state: flags, slots and transfers.
 *
 * The only code that writes a record's flags, slot[] and xfer (page.h says
 * what they mean). Each transition below is named for what happened to the
 * page; each keeps, as one step, what the flags imply elsewhere: the
 * resident and dirty counters (kvt_stats), the list of redundant DRAM
 * copies (e->dram) and the policy's candidate sets (kvt_page_sync). Under
 * the engine lock.
 */
#include <errno.h>

#include "core/engine.h"

/* ------------------------------------------------------------- flags */

/* A DRAM copy whose page is also current in HBM: it can go at no cost now
 * (the page just turns dirty in HBM). DRAM copies backed by SSD are not on
 * this list: those leave in the policy's order (dram.c). */
static inline bool redundant_dram(uint16_t f)
{
    return (f & PG_VALID_DRAM) && (f & PG_VALID_HBM);
}

static void red_link(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->red_next = KVT_NONE;
    p->red_prev = e->pages.red_tail;
    if (e->pages.red_tail != KVT_NONE)
        kvt_pg(&e->pt, e->pages.red_tail)->red_next = pg;
    else
        e->pages.red_head = pg;
    e->pages.red_tail = pg;
}

static void red_unlink(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (p->red_prev != KVT_NONE)
        kvt_pg(&e->pt, p->red_prev)->red_next = p->red_next;
    else
        e->pages.red_head = p->red_next;
    if (p->red_next != KVT_NONE)
        kvt_pg(&e->pt, p->red_next)->red_prev = p->red_prev;
    else
        e->pages.red_tail = p->red_prev;
}

/* One more outcome of a put's checksum (kvt_put_crc_odds). */
static void put_crc_count(struct kvt_put_crc_odds *o, uint32_t *which)
{
    (*which)++;
    if (o->used + o->wasted >= KVT_PUT_CRC_WINDOW) {
        o->used /= 2;
        o->wasted /= 2;
    }
}

bool kvt_put_crc_take(kvt_engine *e)
{
    struct kvt_put_crc_odds *o = &e->put_crc;
    return o->used >= o->wasted || ++o->probe % KVT_PUT_CRC_PROBE == 0;
}

/* Sets and clears flags, keeping the resident, dirty and second-copy
 * counters and the redundant-copy list. Every flag change goes through
 * here. */
static void page_flags(kvt_engine *e, uint32_t pg, uint16_t set, uint16_t clear)
{
    KVT_ASSERT_LOCKED(e);
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    uint16_t old = p->flags, nf = (uint16_t)((old | set) & ~clear);
    /* A put's checksum not yet used when its DRAM copy goes: wasted. */
    if ((old & PG_PUT_CRC) && (old & PG_VALID_DRAM) && !(nf & PG_VALID_DRAM)) {
        put_crc_count(&e->put_crc, &e->put_crc.wasted);
        nf &= (uint16_t)~PG_PUT_CRC;
    }
    /* A prefetched page leaving HBM unused: the prefetch was wasted. */
    if ((old & PG_PREFETCHED) && (old & PG_VALID_HBM) && !(nf & PG_VALID_HBM)) {
        e->pages.st.prefetch_wasted++;
        nf &= (uint16_t)~PG_PREFETCHED;
    }
    for (int t = 0; t < KVT_TIERS; t++) {
        uint16_t v = kvt_page_valid_bit(t);
        if ((nf & v) && !(old & v))
            e->pages.st.resident_pages[t]++;
        else if (!(nf & v) && (old & v))
            e->pages.st.resident_pages[t]--;
    }
    e->pages.dirty_hbm += (uint64_t)kvt_page_dirty_flags(nf) - (uint64_t)kvt_page_dirty_flags(old);
    e->pages.second_copies += (uint32_t)kvt_page_second_copy(nf) - (uint32_t)kvt_page_second_copy(old);
    p->flags = nf;
    if (redundant_dram(nf) && !redundant_dram(old))
        red_link(e, pg);
    else if (!redundant_dram(nf) && redundant_dram(old))
        red_unlink(e, pg);
}

/* Keeps the policy's candidate sets equal to what the page's state says:
 * an HBM candidate is valid there, unpinned and not being evicted; a DRAM
 * or SSD candidate is valid there. touch reports a use. */
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

/* A slot may be had now that could not be a moment ago: freed, or its page
 * no longer busy, pinned or in transfer (so it can be dropped or written
 * down). The epoch moves (room.c's waits and dram.c's write-ahead watch
 * it); the puts waiting for one are woken through the room layer's
 * up-call, only when some wait: a get's every page lets go twice. */
static void page_let_go(kvt_engine *e)
{
    e->pages.let_go++;
    if (e->slots.waiters)
        e->up.slot_let_go(e);
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
    for (int t = 0; t < KVT_ARENAS; t++) {
        if (p->slot[t] != KVT_NONE && !(p->flags & kvt_page_valid_bit(t)) &&
            p->xfer == XFER_NONE) {
            kvt_arena_free(kvt_arena_of(e, t), p->slot[t]);
            p->slot[t] = KVT_NONE;
            page_let_go(e);
        }
    }
    /* A page whose only copy could not be read goes once nobody holds it. */
    if ((p->flags & (PG_HASHED | PG_LOST)) == (PG_HASHED | PG_LOST) && !p->pins &&
        p->xfer == XFER_NONE && !(p->flags & PG_VALID_ALL)) {
        kvt_page_destroy(e, pg);
        return;
    }
    if ((p->flags & PG_ZOMBIE) && p->xfer == XFER_NONE && p->slot[0] == KVT_NONE &&
        p->slot[1] == KVT_NONE) {
        kvt_page_sync(e, pg, false);
        kvt_ptable_delete(&e->pt, pg);
    }
}

void kvt_page_settle(kvt_engine *e, uint32_t pg)
{
    kvt_page_sync(e, pg, false);
    kvt_page_trim(e, pg);
}

/* ------------------------------------------------------------- records */

void kvt_pages_init(kvt_engine *e)
{
    e->pages.red_head = e->pages.red_tail = KVT_NONE;
}

/* A record for a new page, one the policy has room for. The table may
 * have grown in an earlier call whose policy reserve failed: the record
 * then given back heads the free list, beyond what the policy holds, so
 * the test is the page number against the policy's room, not whether the
 * table grew in this call. */
uint32_t kvt_page_new(kvt_engine *e)
{
    uint32_t pg = kvt_ptable_new(&e->pt);
    if (pg == KVT_NONE)
        return KVT_NONE;
    if (pg >= e->pol_cap) {
        if (e->pol->reserve(e->pol_priv, e->pt.cap) < 0) {
            kvt_ptable_delete(&e->pt, pg);
            return KVT_NONE;
        }
        e->pol_cap = e->pt.cap;
    }
    return pg;
}

void kvt_page_key(kvt_engine *e, uint32_t pg, kvt_key key)
{
    kvt_pg(&e->pt, pg)->key = key;
}

void kvt_page_indexed(kvt_engine *e, uint32_t pg)
{
    if (e->pol->page_new)
        e->pol->page_new(e->pol_priv, pg, &kvt_pg(&e->pt, pg)->key);
}

void kvt_page_destroy(kvt_engine *e, uint32_t pg)
{
    if (e->pol->page_gone)
        e->pol->page_gone(e->pol_priv, pg);
    /* A read in flight (queued or on the disk) keeps the SSD slot it reads
     * until it ends (kvt_page_read_end): forgotten now, the slot would be
     * freed, and written again, under it. */
    if (kvt_pg(&e->pt, pg)->xfer != XFER_SSD_READ)
        e->up.ssd_forget(e, pg);
    kvt_ptable_remove(&e->pt, pg);
    page_flags(e, pg, PG_ZOMBIE, PG_VALID_ALL);
    kvt_page_settle(e, pg);
}

void kvt_page_abandon(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->busy = 0;
    page_let_go(e);
    page_flags(e, pg, PG_ZOMBIE, 0);
    kvt_page_trim(e, pg);
}

/* ------------------------------------------------------------- slots */

uint32_t kvt_page_take_slot(kvt_engine *e, uint32_t pg, int tier)
{
    uint32_t s = kvt_arena_alloc(kvt_arena_of(e, tier), pg);
    if (s != KVT_NONE)
        kvt_pg(&e->pt, pg)->slot[tier] = s;
    return s;
}

/* ------------------------------------------------------------- copies */

void kvt_page_now_valid(kvt_engine *e, uint32_t pg, int tier)
{
    page_flags(e, pg, kvt_page_valid_bit(tier), 0);
}

void kvt_page_drop_copy(kvt_engine *e, uint32_t pg, int tier)
{
    page_flags(e, pg, 0, kvt_page_valid_bit(tier));
    kvt_page_settle(e, pg);
}

/* A copy down in flight (to DRAM or to SSD) read bytes being rewritten:
 * its result is discarded when it lands (PG_STALE). */
void kvt_page_rewritten(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    uint16_t stale = p->xfer == XFER_DOWN || p->xfer == XFER_SSD_WRITE ? PG_STALE : 0;
    page_flags(e, pg, stale, PG_VALID_DRAM | PG_VALID_SSD); /* PG_PUT_CRC goes with DRAM */
}

void kvt_page_put_crc(kvt_engine *e, uint32_t pg, uint32_t crc)
{
    kvt_pg(&e->pt, pg)->crc = crc;
    page_flags(e, pg, PG_PUT_CRC, 0);
}

void kvt_page_put_crc_used(kvt_engine *e, uint32_t pg)
{
    if (!(kvt_pg(&e->pt, pg)->flags & PG_PUT_CRC))
        return; /* counted already: dropped while it was written */
    put_crc_count(&e->put_crc, &e->put_crc.used);
    page_flags(e, pg, 0, PG_PUT_CRC);
}

bool kvt_page_busy_begin(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (p->busy == UINT8_MAX)
        return false;
    p->busy++;
    return true;
}

void kvt_page_busy_end(kvt_engine *e, uint32_t pg)
{
    if (--kvt_pg(&e->pt, pg)->busy == 0)
        page_let_go(e);
}

void kvt_page_pin(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    page_flags(e, pg, 0, PG_PREFETCHED); /* used: the prefetch paid off */
    if (p->pins++ == 0)
        e->pages.st.pinned_pages++;
    kvt_page_sync(e, pg, true);
}

bool kvt_page_pin_take(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if (!p->pins)
        return false;
    p->pins--;
    return true;
}

void kvt_page_pin_give(kvt_engine *e, uint32_t pg)
{
    kvt_pg(&e->pt, pg)->pins++;
}

void kvt_page_created(kvt_engine *e, uint32_t pg)
{
    page_flags(e, pg, PG_CREATED, 0);
}

void kvt_page_unpin(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    page_flags(e, pg, 0, PG_CREATED); /* released: the caller's bytes are the page's */
    if (--p->pins == 0) {
        e->pages.st.pinned_pages--;
        page_let_go(e);
    }
    kvt_page_sync(e, pg, true);
    kvt_page_trim(e, pg);
}

/* ------------------------------------------------------------- transfers */

void kvt_page_xfer_begin(kvt_engine *e, uint32_t pg, enum kvt_xfer x, bool prefetch)
{
    kvt_pg(&e->pt, pg)->xfer = (uint8_t)x;
    if (prefetch)
        page_flags(e, pg, PG_PREFETCHED, 0);
}

void kvt_page_copy_queued(kvt_engine *e, uint32_t pg, enum kvt_dir d, uint64_t fence, bool evict)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    p->xfer = d == KVT_H2D ? XFER_UP : XFER_DOWN;
    p->fence = fence;
    if (evict)
        page_flags(e, pg, PG_EVICTING, 0);
}

void kvt_page_xfer_cancel(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    bool up = p->xfer == XFER_UP;
    p->xfer = XFER_NONE;
    if (up)
        page_flags(e, pg, 0, PG_PREFETCHED);
    page_let_go(e);
    kvt_page_trim(e, pg);
}

bool kvt_page_xfer_end(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    bool stale = p->flags & PG_STALE;
    p->xfer = XFER_NONE;
    page_flags(e, pg, 0, PG_STALE);
    page_let_go(e);
    return stale;
}

bool kvt_page_up_done(kvt_engine *e, uint32_t pg, bool ok)
{
    kvt_page_xfer_end(e, pg);
    bool valid = ok && !(kvt_pg(&e->pt, pg)->flags & PG_ZOMBIE);
    if (valid)
        page_flags(e, pg, PG_VALID_HBM, 0);
    kvt_page_settle(e, pg);
    return valid;
}

bool kvt_page_down_done(kvt_engine *e, uint32_t pg, bool ok)
{
    bool stale = kvt_page_xfer_end(e, pg);
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    bool valid = ok && !stale && !(p->flags & PG_ZOMBIE);
    if (valid)
        page_flags(e, pg, PG_VALID_DRAM, 0);
    if (p->flags & PG_EVICTING) {
        /* An acquire that came while the copy ran keeps the page in HBM. */
        bool go = !kvt_page_in_use(p) && (p->flags & (PG_VALID_DRAM | PG_VALID_SSD));
        page_flags(e, pg, 0, PG_EVICTING | (go ? PG_VALID_HBM : 0));
    }
    kvt_page_settle(e, pg);
    return valid;
}

void kvt_page_read_ok(kvt_engine *e, uint32_t pg)
{
    /* A record dropped during the read stays invalid, so that it goes. */
    bool zombie = kvt_pg(&e->pt, pg)->flags & PG_ZOMBIE;
    page_flags(e, pg, zombie ? 0 : PG_VALID_DRAM, PG_READ_ERR);
}

void kvt_page_read_end(kvt_engine *e, uint32_t pg)
{
    if (kvt_pg(&e->pt, pg)->flags & PG_ZOMBIE)
        e->up.ssd_forget(e, pg); /* the slot kvt_page_destroy left for the read */
}

void kvt_page_read_failed(kvt_engine *e, uint32_t pg)
{
    page_flags(e, pg, PG_READ_ERR, 0);
}

void kvt_page_read_failure_told(kvt_engine *e, uint32_t pg)
{
    page_flags(e, pg, 0, PG_READ_ERR);
}

void kvt_page_lost(kvt_engine *e, uint32_t pg, bool io)
{
    page_flags(e, pg, PG_LOST | (io ? PG_LOST_IO : 0), PG_VALID_SSD);
}
