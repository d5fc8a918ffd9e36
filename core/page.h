/*
 * page.h — the page record and its state machine (internal).
 *
 * A page is one record (struct kvt_page) and up to one copy per tier. For
 * tier t: slot[t] != KVT_NONE means a slot is allocated to it; PG_VALID_<t>
 * means that copy holds the page's current bytes. A slot that is allocated
 * but not valid is the target of a copy in flight (xfer), a put in progress,
 * or a stale copy still being read (busy), and is freed by kvt_page_settle().
 *
 * Caching is inclusive downwards: a page promoted to HBM keeps its DRAM copy
 * (dram.c may give that copy up first: a "third copy"). "Dirty" is derived,
 * not stored: the HBM copy is valid and no lower copy is. A dirty release
 * invalidates the lower copies at once, and a copy down in flight from it is
 * marked stale, so there is never a lower copy that is valid but older than
 * HBM.
 *
 * Ownership: page.c is the only code that writes a record's flags, slot[]
 * and xfer (the inline helpers below are page.c's too, for page_table.c);
 * every change goes through a named transition, which keeps the resident
 * and dirty counters, the redundant-copy list and the policy's candidate
 * sets in step with the flags. Everything here runs under the engine lock.
 *
 * The transitions (page.c), as SQLite's pager lists its states: what each
 * requires, and what it sets (+) and clears (-). V = PG_VALID_*, x = xfer.
 * Every one ends by syncing the policy's candidate sets (PG_LISTED_*) and,
 * where a slot may have been freed, trimming (kvt_page_trim).
 *
 *   transition            requires                      flags and fields
 *   kvt_page_new          -                             a zeroed record, no slot
 *   kvt_page_indexed      PG_HASHED (page_table.c)      (the policy told)
 *   kvt_page_take_slot    no slot in t                  slot[t] = arena slot
 *   kvt_page_now_valid    slot[t] holds the bytes       +V_t
 *   kvt_page_drop_copy    the copy may leave            -V_t; slot freed if idle
 *   kvt_page_rewritten    pinned in HBM, dirty release  -V_DRAM -V_SSD -PUT_CRC;
 *                                                       +STALE if a copy down runs
 *   kvt_page_put_crc      a put wrote DRAM              +PUT_CRC, crc
 *   kvt_page_put_crc_used a write-back took the crc     -PUT_CRC
 *   kvt_page_pin          V_HBM (or coming up)          pins++, -PREFETCHED
 *   kvt_page_created      pinned by kvt_create          +CREATED
 *   kvt_page_unpin        pins > 0                      pins--, -CREATED
 *   kvt_page_busy_begin   -                             busy++ (a get/put reads)
 *   kvt_page_busy_end     busy > 0                      busy--
 *   kvt_page_xfer_begin   x == NONE                     x = SSD_READ | SSD_WRITE | UP;
 *                                                       +PREFETCHED if a prefetch
 *   kvt_page_copy_queued  x set, a device copy queued   x = UP | DOWN, fence;
 *                                                       +EVICTING if the HBM slot goes
 *   kvt_page_xfer_cancel  x set, nothing queued         x = NONE, -PREFETCHED if UP
 *   kvt_page_up_done      x == UP                       x = NONE, -STALE; +V_HBM if ok
 *                                                       and not ZOMBIE
 *   kvt_page_down_done    x == DOWN                     x = NONE, -STALE; +V_DRAM if ok,
 *                                                       not stale, not ZOMBIE;
 *                                                       with EVICTING: -EVICTING, and
 *                                                       -V_HBM unless in use or dirty
 *   kvt_page_xfer_end     x set (an SSD job ends)       x = NONE, -STALE (returned)
 *   kvt_page_read_ok      an SSD read landed            +V_DRAM unless ZOMBIE, -READ_ERR
 *   kvt_page_read_failed  the read's file unreadable    +READ_ERR
 *   kvt_page_read_failure_told                          -READ_ERR
 *   kvt_page_read_end     the read is over              a ZOMBIE's SSD slot forgotten
 *   kvt_page_lost         its only copy failed a read   +LOST (+LOST_IO), -V_SSD
 *   kvt_page_destroy      unhashed by the caller        +ZOMBIE -V_*; SSD slot
 *                                                       forgotten unless read; freed
 *                                                       when idle and slotless
 *   kvt_page_abandon      a put's record, never valid   busy = 0, +ZOMBIE, trimmed
 *
 * ssd_slot and PG_VALID_SSD's meaning are the SSD tier's (ssd.c, ssd_pipe.c:
 * the slot the committed index names), and red_prev/red_next the DRAM
 * tier's redundant-copy list, kept here because only these transitions see
 * every flag change (tests/layering/rules.txt lists what still writes a
 * record from outside page.c).
 */
#ifndef KVT_PAGE_H
#define KVT_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

#define KVT_ARENAS 2 /* HBM and DRAM hold slots in memory; SSD has its own store */

enum {
    PG_VALID_HBM = 1u << 0,
    PG_VALID_DRAM = 1u << 1,
    PG_VALID_SSD = 1u << 2,
    PG_LISTED_HBM = 1u << 3,  /* the policy holds it as an HBM candidate */
    PG_LISTED_DRAM = 1u << 4, /* the policy holds it as a DRAM candidate */
    PG_STALE = 1u << 5,       /* a dirty release overtook the copy down in flight */
    PG_EVICTING = 1u << 6,    /* the D2H in flight frees the HBM slot when done */
    PG_ZOMBIE = 1u << 7,      /* dropped while busy; freed when the last user leaves */
    PG_HASHED = 1u << 8,      /* in the key index */
    PG_LOST = 1u << 9,        /* its only copy failed to read: checksum (or I/O, with LOST_IO) */
    PG_LOST_IO = 1u << 10,
    PG_LISTED_SSD = 1u << 11, /* the policy holds it as an SSD candidate (for prefetch) */
    PG_PREFETCHED = 1u << 12, /* brought into HBM by a prefetch and not acquired since */
    PG_READ_ERR = 1u << 13,   /* its last SSD read failed with the file unreadable, not the
                                 data bad (permissions, resources): the copy stays; the next
                                 load reports ssd_read_err once, later ones try again */
    PG_PUT_CRC = 1u << 14,    /* crc holds the CRC32C of the page's bytes: see crc */
    PG_CREATED = 1u << 15,    /* made by kvt_create and not released yet: its bytes are the
                                 caller's to write (the slot's old bytes until then), so no
                                 flush or write-back takes them down */
};

#define PG_VALID_ALL (PG_VALID_HBM | PG_VALID_DRAM | PG_VALID_SSD)

enum kvt_xfer {
    XFER_NONE = 0,
    XFER_UP = 1,        /* DRAM -> HBM (device) */
    XFER_DOWN = 2,      /* HBM -> DRAM (device) */
    XFER_SSD_READ = 3,  /* SSD -> DRAM slot (mover) */
    XFER_SSD_WRITE = 4, /* DRAM slot -> a new SSD slot (mover) */
};

/* One page record: 64 bytes. Records live in one array indexed by a 32-bit
 * page number; pointers into it are valid only under the lock and until the
 * next record allocation (the array may move). */
struct kvt_page {
    kvt_key key;
    uint32_t slot[KVT_ARENAS];  /* HBM, DRAM; KVT_NONE when none */
    uint32_t pins;              /* engine pins (acquire/create) */
    uint16_t flags;
    uint8_t xfer;               /* enum kvt_xfer in flight */
    uint8_t busy;               /* get/put copies in progress */
    uint64_t fence;             /* device fence of a device xfer */
    uint32_t red_prev, red_next; /* list of redundant DRAM copies (e->dram) */
    uint32_t ssd_slot;          /* the slot the committed index names, or KVT_NONE;
                                   PG_VALID_SSD says whether its bytes are current */
    uint32_t birth;             /* which use of the record this is (kvt_ptable_new): a
                                   record freed and handed out again, even under the
                                   same key, is another page */
    uint32_t crc;               /* with PG_PUT_CRC: CRC32C (seed 0) of the page's bytes,
                                   taken by the kvt_put that wrote them while they were
                                   in cache, so that the write-back need not read them
                                   again (ssd_pipe.c, job_crc). A put page's bytes change
                                   only by a dirty release of a pin, which makes its DRAM
                                   copy stale; the flag goes with the DRAM copy, and when
                                   a write-back used it, each counted (kvt_put_crc_odds) */
};

_Static_assert(sizeof(struct kvt_page) == 64, "a page record's size (docs/performance.md#metadata-per-page)");

/* ------------------------------------------------------------- predicates */

static inline bool kvt_page_in_use(const struct kvt_page *p)
{
    return p->pins || p->busy;
}

/* No copy in flight and no reader: its copies may change. */
static inline bool kvt_page_idle(const struct kvt_page *p)
{
    return p->xfer == XFER_NONE && !p->busy;
}

static inline bool kvt_page_dirty_flags(uint16_t f)
{
    return (f & PG_VALID_HBM) && !(f & (PG_VALID_DRAM | PG_VALID_SSD));
}

/* Valid on SSD and in DRAM or HBM too: an SSD copy a full SSD may give up
 * (kvt_ssd_tier.second_copies counts them). */
static inline bool kvt_page_second_copy(uint16_t f)
{
    return (f & PG_VALID_SSD) && (f & (PG_VALID_DRAM | PG_VALID_HBM));
}

/* The valid bit of tier t (KVT_TIER_HBM, _DRAM or _SSD). */
static inline uint16_t kvt_page_valid_bit(int t)
{
    return (uint16_t)(PG_VALID_HBM << t);
}

/* How a copy of tier t may leave (kvt_page_can_leave). */
enum kvt_leave {
    KVT_LEAVE_ANY = 0,
    KVT_LEAVE_FREE = 1,  /* only if another tier holds the page current: no write */
    KVT_LEAVE_WRITE = 2, /* only if no other tier does: a write turns it clean */
};

/* Whether the copy of tier t (HBM or DRAM) may leave now: no copy in flight,
 * no reader, and for DRAM not a pinned page still on its way up to HBM
 * (taking that copy would undo the acquire's read: with DRAM smaller than
 * the acquire, two pages took each other's slot for ever). how narrows it
 * to copies that go for free or only by a write. The victim filters of
 * hbm.c, dram.c and prefetch.c are this with one `how` each. */
static inline bool kvt_page_can_leave(const struct kvt_page *p, int t, enum kvt_leave how)
{
    if (!kvt_page_idle(p))
        return false;
    if (t == KVT_TIER_DRAM && p->pins && !(p->flags & PG_VALID_HBM))
        return false;
    uint16_t others = (uint16_t)(PG_VALID_ALL & ~kvt_page_valid_bit(t));
    if (how == KVT_LEAVE_FREE)
        return p->flags & others;
    if (how == KVT_LEAVE_WRITE)
        return !(p->flags & others);
    return true;
}

/* Whether a prefetch may bring the page into tier t (HBM from DRAM, DRAM
 * from SSD) now: current one tier below, nothing above, no slot in t yet,
 * idle, not dropped. A page whose SSD file could not be read is left to the
 * demand load, which reports it (prefetch would retry it on every wake). */
static inline bool kvt_page_can_come(const struct kvt_page *p, int t)
{
    if (!kvt_page_idle(p) || (p->flags & PG_ZOMBIE) || p->slot[t] != KVT_NONE)
        return false;
    if (t == KVT_TIER_HBM)
        return p->flags & PG_VALID_DRAM;
    return (p->flags & PG_VALID_SSD) &&
           !(p->flags & (PG_VALID_DRAM | PG_VALID_HBM | PG_READ_ERR));
}

/* The fastest tier holding the page current, or KVT_TIER_NONE. */
static inline kvt_tier kvt_page_tier(const struct kvt_page *p)
{
    for (int t = KVT_TIER_HBM; t <= KVT_TIER_SSD; t++)
        if (p->flags & kvt_page_valid_bit(t))
            return (kvt_tier)t;
    return KVT_TIER_NONE;
}

/* ------------------------------------------------------------- records (page_table.c) */

/* A fresh record: zeroed, no slots. */
static inline void kvt_page_record_init(struct kvt_page *p)
{
    *p = (struct kvt_page){ 0 };
    for (int i = 0; i < KVT_ARENAS; i++)
        p->slot[i] = KVT_NONE;
    p->ssd_slot = KVT_NONE;
    p->red_prev = p->red_next = KVT_NONE;
}

/* A freed record: zeroed and chained to the next free one through slot[0]
 * (a free record has no slot). */
static inline void kvt_page_record_free(struct kvt_page *p, uint32_t next)
{
    *p = (struct kvt_page){ 0 };
    p->slot[0] = next;
}

static inline uint32_t kvt_page_record_next(const struct kvt_page *p)
{
    return p->slot[0];
}

/* In the key index or not (the page table's bit of the flags). */
static inline void kvt_page_record_hashed(struct kvt_page *p, bool on)
{
    if (on)
        p->flags |= PG_HASHED;
    else
        p->flags &= (uint16_t)~PG_HASHED;
}

#endif /* KVT_PAGE_H */
