/*
 * manager.c — the page API on caller-owned pins: acquire (and its async
 * form and waits), create, release, drop, exists, the schedule (set,
 * advance) and flush. kvt_put and kvt_get, on engine-owned buffers, are in
 * buffers.c.
 *
 * Pattern of every call: take e->lock, settle finished copies, decide and
 * queue, drop the lock to wait, take it again and finish. Pages are pinned
 * before the lock is dropped, which is what keeps them and their slots from
 * moving meanwhile.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

#define BATCH 64

static void *hbm_ptr(kvt_engine *e, uint32_t pg)
{
    return kvt_arena_ptr(&e->hbm.arena, kvt_pg(&e->pt, pg)->slot[KVT_TIER_HBM]);
}

/* ------------------------------------------------------------- loading */

/* The error for a page whose only copy could not be read. */
static int lost_error(const struct kvt_page *p)
{
    int r = (p->flags & PG_LOST_IO) ? -EIO : KVT_ECORRUPT;
    return kvt_fail(r, "page (%llu,%u,%u) could not be read back from SSD (%s); it is gone",
                    (unsigned long long)p->key.id, p->key.layer, p->key.index,
                    r == -EIO ? "I/O error" : "checksum mismatch");
}

/* Queues SSD reads for pages that exist only on SSD and need a DRAM copy.
 * Sets *w when it must wait for room. Returns how many are still without
 * a DRAM copy or a read in flight, or a negative error. */
static int stage_ssd_reads(kvt_engine *e, const uint32_t *pages, size_t n, struct kvt_wait *w)
{
    int missing = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvt_page *p = kvt_pg(&e->pt, pages[i]);
        if (p->flags & PG_LOST)
            return lost_error(p);
        if (p->flags & PG_READ_ERR)
            return kvt_ssd_read_error(e, pages[i], 0);
        if (p->slot[KVT_TIER_HBM] != KVT_NONE || (p->flags & PG_VALID_DRAM) ||
            p->xfer != XFER_NONE)
            continue;
        if (!(p->flags & PG_VALID_SSD))
            return kvt_fail(-EIO, "page (%llu,%u,%u) has no valid copy to load",
                            (unsigned long long)p->key.id, p->key.layer, p->key.index);
        /* KVT_EFULL: DRAM holds this acquire's own pages; they free their
         * slots once copied up (load_pages waits for that, or says
         * KVT_EFULL when nothing is on its way). */
        int r = kvt_stage_ssd_read(e, pages[i], 1, w);
        if (r == -EAGAIN || r == KVT_EFULL)
            missing++;
        else if (r < 0)
            return r;
    }
    return missing;
}

/* Queues DRAM->HBM copies for pages that have a DRAM copy and no HBM slot,
 * as far as free HBM slots go. */
static int stage_up(kvt_engine *e, const uint32_t *pages, size_t n)
{
    uint32_t batch[BATCH], k = 0;
    struct kvt_copy c[BATCH];
    for (size_t i = 0; i < n && e->hbm.arena.nfree; i++) {
        const struct kvt_page *p = kvt_pg(&e->pt, pages[i]);
        if (p->slot[KVT_TIER_HBM] != KVT_NONE || !(p->flags & PG_VALID_DRAM) ||
            p->xfer != XFER_NONE)
            continue;
        if (!kvt_copy_claim_up(e, pages[i], false, &c[k]))
            break;
        batch[k] = pages[i];
        if (++k == BATCH) {
            int r = kvt_copy_submit_up(e, batch, c, k);
            if (r < 0)
                return r;
            k = 0;
        }
    }
    return k ? kvt_copy_submit_up(e, batch, c, k) : 0;
}

/* Makes every page of an acquire have an HBM slot (valid, or a copy in
 * flight): SSD-only pages are read into DRAM first, then everything with a
 * DRAM copy is queued up. Waits (unlocked) only for what makes room or
 * brings pages from SSD. Pages must be pinned. */
static int load_pages(kvt_engine *e, const uint32_t *pages, size_t n)
{
    for (;;) {
        struct kvt_wait w = { KVT_WAIT_NONE, 0 };
        int missing = e->ssd ? stage_ssd_reads(e, pages, n, &w) : 0;
        if (missing < 0)
            return missing;
        uint32_t need = 0, from_ssd = 0;
        for (size_t i = 0; i < n; i++) {
            const struct kvt_page *p = kvt_pg(&e->pt, pages[i]);
            if (p->slot[KVT_TIER_HBM] != KVT_NONE)
                continue;
            need++;
            from_ssd += p->xfer == XFER_SSD_READ || p->xfer == XFER_SSD_WRITE ||
                        !(p->flags & PG_VALID_DRAM);
        }
        if (!need)
            return 0;
        int room = 0;
        if (need > from_ssd) {
            struct kvt_wait hw = { KVT_WAIT_NONE, 0 };
            room = kvt_make_room_hbm(e, need - from_ssd, &hw);
            if (room < 0 && room != -EAGAIN && room != KVT_EFULL)
                return room;
            int r = stage_up(e, pages, n);
            if (r < 0)
                return r;
            if (room == -EAGAIN)
                w = hw;
        }
        /* A wait must be for something that will happen: SSD jobs, or
         * copies up whose completion lets DRAM give up their pages' copies
         * for the reads still to stage. With none in flight and pages still
         * to read, more waiting cannot help (DRAM is too small for them). */
        if (w.kind == KVT_WAIT_SSD && !kvt_ssd_waiting(e))
            w.kind = KVT_WAIT_NONE;
        if (w.kind == KVT_WAIT_NONE && from_ssd) {
            if (kvt_ssd_waiting(e))
                w = (struct kvt_wait){ KVT_WAIT_SSD, e->ssd_tier.progress };
            else if (!kvt_copy_wait(e, &w))
                return kvt_fail(KVT_EFULL, "%u of the %zu pages to acquire are on SSD only and "
                                "DRAM (%u slots) cannot stage them beside what it holds",
                                from_ssd, n, e->dram.arena.nslots);
        }
        if (w.kind == KVT_WAIT_NONE) {
            if (room == KVT_EFULL)
                return KVT_EFULL;
            continue; /* stage_up used the room: look again */
        }
        /* The prefetcher stands back only while the caller waits for room:
         * HBM slots being freed for it (room == -EAGAIN), or DRAM slots for
         * reads still to stage (missing). A caller waiting for its own reads
         * and copies, queued ahead of anything a prefetch adds, lets it read
         * on: standing back then left the disk idle while the caller waited
         * for a page being decoded, and the codec's thread waited for the
         * disk after (docs/performance.md#prefetch-during-waits). */
        bool for_room = room == -EAGAIN || missing > 0;
        int r = for_room ? kvt_hbm_wait_room(e, &w) : kvt_wait_on(e, &w, true);
        if (r < 0)
            return kvt_fail(r, "a transfer that makes room failed: %s", kvt_strerror(r));
        if (e->failed)
            return kvt_check_failed(e);
    }
}

/* ------------------------------------------------------------- tickets */

static int ticket_new(kvt_engine *e, uint32_t *pages, uint32_t n, uint64_t fence, kvt_ticket *t)
{
    uint32_t i;
    for (i = 0; i < e->n_tickets && e->tickets[i].live; i++)
        ;
    if (i == e->n_tickets) {
        uint32_t nn = e->n_tickets ? e->n_tickets * 2 : 8;
        struct kvt_ticket_rec *nt = realloc(e->tickets, nn * sizeof(*nt));
        if (!nt)
            return -ENOMEM;
        memset(nt + e->n_tickets, 0, (nn - e->n_tickets) * sizeof(*nt));
        e->tickets = nt;
        e->n_tickets = nn;
    }
    struct kvt_ticket_rec *r = &e->tickets[i];
    r->gen++;
    r->live = 1;
    r->n = n;
    r->pages = pages;
    r->fence = fence;
    *t = ((uint64_t)r->gen << 32) | (i + 1);
    return 0;
}

/* Takes the ticket out of the table; NULL if it is unknown or was used. */
static struct kvt_ticket_rec *ticket_take(kvt_engine *e, kvt_ticket t, struct kvt_ticket_rec *out)
{
    uint32_t i = (uint32_t)(t & 0xffffffffu);
    if (i == 0 || i > e->n_tickets)
        return NULL;
    struct kvt_ticket_rec *r = &e->tickets[i - 1];
    if (!r->live || r->gen != (uint32_t)(t >> 32))
        return NULL;
    *out = *r;
    r->live = 0;
    r->pages = NULL;
    return out;
}

/* ------------------------------------------------------------- acquire */

static int lookup_all(kvt_engine *e, const kvt_key *keys, size_t n, uint32_t *pages)
{
    for (size_t i = 0; i < n; i++) {
        pages[i] = kvt_ptable_find(&e->pt, &keys[i]);
        if (pages[i] == KVT_NONE)
            return kvt_fail(KVT_ENOTFOUND, "page (%llu,%u,%u) is in no tier",
                            (unsigned long long)keys[i].id, keys[i].layer, keys[i].index);
    }
    return 0;
}

static void count_lookup(kvt_engine *e, uint32_t pg)
{
    struct kvt_page *p = kvt_pg(&e->pt, pg);
    if ((p->flags & PG_VALID_HBM) || p->xfer == XFER_UP) {
        e->st_pins.hits[KVT_TIER_HBM]++;
        return;
    }
    e->st_pins.misses[KVT_TIER_HBM]++;
    if (p->flags & PG_VALID_DRAM) {
        e->st_pins.hits[KVT_TIER_DRAM]++;
        return;
    }
    e->st_pins.misses[KVT_TIER_DRAM]++;
    if (p->flags & PG_VALID_SSD)
        e->st_pins.hits[KVT_TIER_SSD]++;
    else
        e->st_pins.misses[KVT_TIER_SSD]++;
}

KVT_API int kvt_acquire_async(kvt_engine *e, const kvt_key *keys, size_t n, void **dev_ptrs,
                              kvt_ticket *t)
{
    if (!t || (n && (!keys || !dev_ptrs)) || n > UINT32_MAX)
        return kvt_fail(-EINVAL, "keys, dev_ptrs and t must not be NULL");
    KVT_ENTER(e);
    int r;
    uint32_t *pages = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!pages) {
        r = kvt_fail(-ENOMEM, "out of memory");
        goto out_unlock;
    }
    if ((r = kvt_check_failed(e)) < 0 || (r = lookup_all(e, keys, n, pages)) < 0)
        goto out_free;
    for (size_t i = 0; i < n; i++) {
        count_lookup(e, pages[i]);
        kvt_page_pin(e, pages[i]);
    }
    /* Every pinned page needs an HBM slot of its own at once: more than
     * HBM has can never be served, however long it waits. */
    if (e->pages.st.pinned_pages > e->hbm.arena.nslots) {
        r = kvt_fail(KVT_EFULL, "acquiring %zu pages would pin %llu pages in HBM, which has %u "
                     "slots", n, (unsigned long long)e->pages.st.pinned_pages,
                     e->hbm.arena.nslots);
        goto out_unpin;
    }
    if ((r = load_pages(e, pages, n)) < 0)
        goto out_unpin;
    uint64_t fence = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvt_page *p = kvt_pg(&e->pt, pages[i]);
        if (p->xfer == XFER_UP && p->fence > fence)
            fence = p->fence;
        dev_ptrs[i] = hbm_ptr(e, pages[i]);
    }
    if ((r = ticket_new(e, pages, (uint32_t)n, fence, t)) < 0)
        goto out_unpin;
    if (e->pol->prefetch) {
        /* The caller computes now: that is when the disk and the links
         * should be bringing up what comes next (the mover would otherwise
         * sleep until the next advance, and reads would wait for demand).
         * A caller that takes its group in chunks computes from the first
         * one on: timed from the last chunk, the compute looks short and the
         * disk's read-ahead shrinks to match (docs/design.md#prefetch-depth,
         * docs/performance.md#prefetch-depth). */
        if (!e->pace.acquired_ns)
            e->pace.acquired_ns = kvt_now_ns();
        kvt_mover_wake(e);
    }
    kvt_unlock(e);
    return 0;

out_unpin:
    for (size_t i = 0; i < n; i++)
        kvt_page_unpin(e, pages[i]);
out_free:
    free(pages);
out_unlock:
    kvt_unlock(e);
    return r;
}

/* Finishes a taken ticket: waits for its copies (or not, for stream waits)
 * and, on error, drops its pins. Called locked; may unlock to wait. */
static int ticket_finish(kvt_engine *e, struct kvt_ticket_rec *tr, void *stream, bool on_stream)
{
    int r = 0;
    if (tr->fence) {
        if (on_stream && e->hbm.dev->poll(e->hbm.dev_priv, KVT_H2D, tr->fence) == -EINPROGRESS) {
            kvt_unlock(e);
            r = e->hbm.dev->stream_wait(e->hbm.dev_priv, KVT_H2D, tr->fence, stream);
            kvt_lock(e);
            kvt_settle(e);
        } else {
            r = kvt_wait_fence(e, KVT_H2D, tr->fence, true);
        }
    }
    if (r == 0 && !on_stream) {
        for (uint32_t i = 0; i < tr->n; i++)
            if (!(kvt_pg(&e->pt, tr->pages[i])->flags & PG_VALID_HBM))
                r = e->failed ? e->failed : KVT_EDEVICE;
    }
    if (r == 0 && e->failed)
        r = e->failed;
    if (r < 0) {
        kvt_fail(r, "a DRAM->HBM copy failed: %s", kvt_strerror(r));
        for (uint32_t i = 0; i < tr->n; i++)
            kvt_page_unpin(e, tr->pages[i]);
    }
    free(tr->pages);
    return r;
}

static int wait_common(kvt_engine *e, kvt_ticket t, void *stream, bool on_stream)
{
    KVT_ENTER(e);
    struct kvt_ticket_rec tr;
    int r;
    if (!ticket_take(e, t, &tr))
        r = kvt_fail(-EINVAL, "ticket %llu is unknown or was already waited for",
                     (unsigned long long)t);
    else
        r = ticket_finish(e, &tr, stream, on_stream);
    kvt_unlock(e);
    return r;
}

KVT_API int kvt_wait(kvt_engine *e, kvt_ticket t)
{
    return wait_common(e, t, NULL, false);
}

KVT_API int kvt_wait_stream(kvt_engine *e, kvt_ticket t, void *cuda_stream)
{
    return wait_common(e, t, cuda_stream, true);
}

KVT_API int kvt_acquire(kvt_engine *e, const kvt_key *keys, size_t n, void **dev_ptrs)
{
    kvt_ticket t;
    int r = kvt_acquire_async(e, keys, n, dev_ptrs, &t);
    if (r < 0)
        return r;
    return kvt_wait(e, t);
}

/* ------------------------------------------------------------- create */

KVT_API int kvt_create(kvt_engine *e, kvt_key key, void **dev_ptr)
{
    if (!dev_ptr)
        return kvt_fail(-EINVAL, "dev_ptr is NULL");
    KVT_ENTER(e);
    int r;
    uint32_t pg = KVT_NONE;
    if ((r = kvt_check_failed(e)) < 0)
        goto out;
    if (kvt_ptable_find(&e->pt, &key) != KVT_NONE) {
        r = kvt_fail(-EEXIST, "page (%llu,%u,%u) exists", (unsigned long long)key.id, key.layer,
                     key.index);
        goto out;
    }
    if ((r = kvt_admit(e)) < 0)
        goto out;
    /* Announce the key before making room: a new tail page pushes an old one
     * out of a sliding window, and that one should be the page evicted. */
    if (e->pol->page_new)
        e->pol->page_new(e->pol_priv, KVT_NONE, &key);
    for (;;) {
        if (e->hbm.arena.nfree)
            break;
        struct kvt_wait w = { KVT_WAIT_NONE, 0 };
        r = kvt_make_room_hbm(e, 1, &w);
        if (r == -EAGAIN)
            r = kvt_hbm_wait_room(e, &w);
        if (r == 0 && e->failed)
            r = kvt_check_failed(e);
        if (r < 0)
            goto out;
    }
    /* A waiter may have created the same key while we were unlocked. */
    if (kvt_ptable_find(&e->pt, &key) != KVT_NONE) {
        r = kvt_fail(-EEXIST, "page (%llu,%u,%u) exists", (unsigned long long)key.id, key.layer,
                     key.index);
        goto out;
    }
    if ((pg = kvt_page_new(e)) == KVT_NONE) {
        r = kvt_fail(-ENOMEM, "out of memory for a page record");
        goto out;
    }
    kvt_page_key(e, pg, key);
    kvt_page_take_slot(e, pg, KVT_TIER_HBM); /* one is free: checked above, locked since */
    if ((r = kvt_ptable_insert(&e->pt, pg)) < 0) {
        kvt_page_abandon(e, pg);
        kvt_fail(r, "out of memory for the page index");
        goto out;
    }
    kvt_page_now_valid(e, pg, KVT_TIER_HBM);
    kvt_page_indexed(e, pg);
    kvt_page_pin(e, pg);
    kvt_page_created(e, pg);
    *dev_ptr = hbm_ptr(e, pg);
    kvt_mover_kick(e);
out:
    kvt_unlock(e);
    return r;
}

/* ------------------------------------------------------------- release */

KVT_API int kvt_release(kvt_engine *e, const kvt_key *keys, size_t n, int dirty)
{
    if (n && !keys)
        return kvt_fail(-EINVAL, "keys is NULL");
    KVT_ENTER(e);
    int r = 0;
    size_t i;
    /* Validate by taking the pins tentatively, so a key given twice needs two
     * pins; on a bad key every tentative release is put back. */
    for (i = 0; i < n; i++) {
        uint32_t pg = kvt_ptable_find(&e->pt, &keys[i]);
        if (pg == KVT_NONE || !kvt_page_pin_take(e, pg)) {
            r = kvt_fail(pg == KVT_NONE ? KVT_ENOTFOUND : -EINVAL,
                         "page (%llu,%u,%u) is not %s", (unsigned long long)keys[i].id,
                         keys[i].layer, keys[i].index, pg == KVT_NONE ? "held" : "pinned");
            break;
        }
    }
    for (size_t j = 0; j < i; j++)
        kvt_page_pin_give(e, kvt_ptable_find(&e->pt, &keys[j]));
    if (r < 0)
        goto out;

    for (i = 0; i < n; i++) {
        uint32_t pg = kvt_ptable_find(&e->pt, &keys[i]);
        /* The caller wrote HBM: every lower copy is now stale, and a copy
         * down in flight read bytes being rewritten. */
        if (dirty)
            kvt_page_rewritten(e, pg);
        kvt_page_unpin(e, pg);
    }
    if (dirty)
        kvt_mover_kick(e);
out:
    kvt_unlock(e);
    return r;
}

/* ------------------------------------------------------------- drop */

/* Whether the pages to drop (keys[0..n), or with keys NULL every page of
 * id) may go now: 0; -EBUSY (its message set) when one is pinned or being
 * read by another call; 1 when one is being read up from SSD ahead of use,
 * which the drop waits for. Locked. */
static int drop_state(kvt_engine *e, const kvt_key *keys, size_t n, uint64_t id)
{
    int st = 0;
    size_t count = keys ? n : e->pt.used;
    for (size_t i = 0; i < count; i++) {
        uint32_t pg = keys ? kvt_ptable_find(&e->pt, &keys[i]) : (uint32_t)i;
        if (pg == KVT_NONE)
            continue;
        const struct kvt_page *p = kvt_pg(&e->pt, pg);
        if (!keys && !((p->flags & PG_HASHED) && p->key.id == id))
            continue;
        if (kvt_page_in_use(p))
            return kvt_fail(-EBUSY, "page (%llu,%u,%u) is pinned or being read",
                            (unsigned long long)p->key.id, p->key.layer, p->key.index);
        st |= p->xfer == XFER_SSD_READ;
    }
    return st;
}

/* A page being read up from SSD ahead of use (a prefetch) is dropped once
 * the read is over, as a put waits for an old version's: the read's end
 * then finds a live page, and the drop a settled one. (A page dropped
 * while read anyway, on a failed engine or by a full put giving an old
 * version up, keeps its SSD slot until the read ends: kvt_page_destroy.)
 * Waits with the lock released. 0, or -EBUSY as drop_state. */
static int drop_wait(kvt_engine *e, const kvt_key *keys, size_t n, uint64_t id)
{
    int st;
    while ((st = drop_state(e, keys, n, id)) == 1 && !e->failed) {
        struct kvt_wait w = { KVT_WAIT_SSD, e->ssd_tier.progress };
        kvt_wait_on(e, &w, false);
    }
    return st < 0 ? st : 0;
}

KVT_API int kvt_drop(kvt_engine *e, const kvt_key *keys, size_t n)
{
    if (n && !keys)
        return kvt_fail(-EINVAL, "keys is NULL");
    KVT_ENTER(e);
    int r = drop_wait(e, keys, n, 0);
    for (size_t i = 0; i < n && r == 0; i++) {
        uint32_t pg = kvt_ptable_find(&e->pt, &keys[i]);
        if (pg != KVT_NONE)
            kvt_page_destroy(e, pg);
    }
    kvt_unlock(e);
    return r;
}

KVT_API int kvt_drop_id(kvt_engine *e, uint64_t id)
{
    KVT_ENTER(e);
    int r = drop_wait(e, NULL, 0, id);
    for (uint32_t pg = 0; pg < e->pt.used && r == 0; pg++) {
        struct kvt_page *p = kvt_pg(&e->pt, pg);
        if ((p->flags & PG_HASHED) && p->key.id == id)
            kvt_page_destroy(e, pg);
    }
    kvt_unlock(e);
    return r;
}

/* ------------------------------------------------------------- exists */

int kvt_exists_local(kvt_engine *e, const kvt_key *keys, size_t n, kvt_tier *where)
{
    if (n && !keys)
        return kvt_fail(-EINVAL, "keys is NULL");
    if (n > INT32_MAX)
        return kvt_fail(-EINVAL, "n is too large");
    KVT_ENTER(e);
    int prefix = -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t pg = kvt_ptable_find(&e->pt, &keys[i]);
        kvt_tier t = pg == KVT_NONE ? KVT_TIER_NONE : kvt_page_tier(kvt_pg(&e->pt, pg));
        if (where)
            where[i] = t;
        if (t == KVT_TIER_NONE && prefix < 0)
            prefix = (int)i;
        if (!where && prefix >= 0)
            break;
    }
    kvt_unlock(e);
    return prefix < 0 ? (int)n : prefix;
}

/* ------------------------------------------------------------- schedule */

KVT_API int kvt_set_schedule(kvt_engine *e, const kvt_schedule *s)
{
    if (!s || !s->ids || !s->n_ids || !s->n_layers ||
        (s->order != KVT_ORDER_LAYER_MAJOR && s->order != KVT_ORDER_SEQ_MAJOR))
        return kvt_fail(-EINVAL, "schedule needs ids, n_ids > 0, n_layers > 0 and a known order");
    /* Checked before n_ids is used as a size: the copy below would wrap. */
    if (s->n_ids > KVT_MAX_SCHEDULE_GROUPS / s->n_layers)
        return kvt_fail(-EINVAL, "schedule of %zu ids x %u layers: more than %u groups",
                        s->n_ids, s->n_layers, KVT_MAX_SCHEDULE_GROUPS);
    uint64_t *ids = malloc(s->n_ids * sizeof(uint64_t));
    if (!ids)
        return kvt_fail(-ENOMEM, "out of memory");
    memcpy(ids, s->ids, s->n_ids * sizeof(uint64_t));
    KVT_ENTER(e);
    free((void *)e->sched.ids);
    e->sched = *s;
    e->sched.ids = ids;
    if (e->pol->schedule)
        e->pol->schedule(e->pol_priv, &e->sched);
    kvt_unlock(e);
    return 0;
}

KVT_API int kvt_advance(kvt_engine *e, uint64_t id, uint32_t layer)
{
    if (!e)
        return kvt_fail(-EINVAL, "engine is NULL");
    if (!e->pol->advance)
        return 0; /* the policy ignores the position: no need to take the lock */
    kvt_lock(e);
    if (e->pace.acquired_ns) {
        /* The caller's compute on the last group: what prefetch can hide. */
        e->pace.compute_ns = kvt_smooth(e->pace.compute_ns, kvt_now_ns() - e->pace.acquired_ns);
        e->pace.acquired_ns = 0;
    }
    e->pol->advance(e->pol_priv, id, layer);
    /* The position moved: what should come up next changed. */
    if (e->pol->prefetch)
        kvt_mover_wake(e);
    kvt_unlock(e);
    return 0;
}

/* ------------------------------------------------------------- flush */

#define FLUSH_STUCK_ROUNDS 64
#define FLUSH_STUCK_PASSES 16

/* Gives every dirty HBM page a DRAM copy; with an SSD tier, makes room in
 * DRAM by pushing DRAM-only pages down as needed. Locked.
 *
 * A round that moves no dirty page down is stuck unless it waited for the
 * SSD with no write failing: room made by dropping a DRAM copy that HBM
 * also holds makes that page dirty again (two dirty pages took one DRAM
 * slot in turn for ever), and a disk that refuses every write would have
 * the loop retire its slots one failed write at a time. After
 * FLUSH_STUCK_ROUNDS such rounds a cache (KVT_FLAG_EVICT) drops the
 * policy's victim, as a put would, and goes on; any other engine says what
 * stops it. */
static int flush_hbm_rounds(kvt_engine *e);

/* Whether a flush that finds no room below may drop a cache's victim. With
 * persist the capacity leaves the SSD room for every page held, so only an
 * engine over it (reopened with less room) drops any: a flush that dropped
 * pages it did not need to lost them. */
static bool may_evict(const kvt_engine *e)
{
    return !kvt_persisted(e) || kvt_room(e) == 0;
}

static int flush_hbm(kvt_engine *e)
{
    kvt_dram_flushing(e, true);
    int r = flush_hbm_rounds(e);
    kvt_dram_flushing(e, false);
    return r;
}

static int flush_hbm_rounds(kvt_engine *e)
{
    unsigned stuck = 0;
    for (;;) {
        uint64_t fence = 0, dirty = e->pages.dirty_hbm;
        int r = kvt_writeback(e, UINT32_MAX, true, &fence);
        if (fence) {
            int w = kvt_wait_fence(e, KVT_D2H, fence, false);
            if (w < 0)
                return kvt_fail(w, "a write-back failed: %s", kvt_strerror(w));
        }
        if (r != KVT_EFULL)
            return r;
        /* No room in DRAM and no SSD to make some: a cache drops its
         * victims, one a round; anything else has nowhere to put a page. */
        if (!e->ssd) {
            if (!may_evict(e) || kvt_evict_one(e) != 0)
                return r;
            kvt_clear_error();
            continue;
        }
        struct kvt_wait w = { KVT_WAIT_NONE, 0 };
        int m = kvt_make_room_dram(e, (uint32_t)(e->pages.dirty_hbm ? e->pages.dirty_hbm : 1), &w);
        if (m == -EAGAIN)
            kvt_wait_on(e, &w, false);
        else if (m == KVT_EFULL && may_evict(e) && kvt_evict_one(e) == 0)
            kvt_clear_error(); /* a full cache drops the policy's victim, as a put does */
        else if (m < 0 && e->pages.dirty_hbm >= dirty)
            return r; /* no room anywhere and no progress */
        if (e->failed)
            return kvt_check_failed(e);
        if (e->pages.dirty_hbm < dirty)
            stuck = 0;
        else if (m != -EAGAIN || e->ssd_tier.write_err)
            stuck++;
        if (stuck < FLUSH_STUCK_ROUNDS)
            continue;
        if (may_evict(e) && kvt_evict_one(e) == 0) {
            stuck = 0;
            continue;
        }
        if (e->ssd_tier.write_err)
            return kvt_fail(e->ssd_tier.write_err, "%llu dirty HBM pages cannot go down: DRAM "
                            "is full and the SSD refuses writes (%s)",
                            (unsigned long long)e->pages.dirty_hbm,
                            kvt_strerror(e->ssd_tier.write_err));
        return kvt_fail(KVT_EFULL, "%llu dirty HBM pages cannot go down: DRAM is full and "
                        "nothing below can take its pages", (unsigned long long)e->pages.dirty_hbm);
    }
}

/* With persist: every page held in HBM or DRAM without an SSD copy when the
 * call began is made durable. Each pass brings dirty HBM pages down first:
 * the DRAM copy a listed page was to be written from may have been given up
 * while the pass before waited (its HBM copy is then the only one). A pass
 * that leaves no fewer pages missing than the one before is stuck; after
 * FLUSH_STUCK_PASSES of those in a row the pages left are reported. */
static int flush_persist(kvt_engine *e)
{
    struct kvt_flush_set fs;
    int r = kvt_ssd_flush_begin(e, &fs);
    if (r < 0)
        return r;
    int64_t prev = INT64_MAX, missing = 0;
    for (unsigned stuck = 0; stuck < FLUSH_STUCK_PASSES;) {
        r = flush_hbm(e);
        if (r < 0 && r != KVT_EFULL)
            break;
        if ((missing = kvt_ssd_flush_pass(e, &fs)) <= 0)
            break;
        if (fs.on_device) { /* copies up or down in flight hold them: wait for the device */
            int w = kvt_wait_fence(e, KVT_H2D, kvt_copy_last(e, KVT_H2D), false);
            if (w == 0)
                w = kvt_wait_fence(e, KVT_D2H, kvt_copy_last(e, KVT_D2H), false);
            if (w < 0) {
                r = kvt_fail(w, "a copy failed: %s", kvt_strerror(w));
                missing = 0;
                break;
            }
        }
        stuck = missing < prev || fs.on_device ? 0 : stuck + 1;
        prev = missing;
    }
    if (missing < 0)
        r = (int)missing;
    else if (missing == 0 && r == KVT_EFULL)
        r = 0; /* every listed page is durable; what HBM could not give down came later */
    else if (missing > 0 && r >= 0)
        r = kvt_ssd_flush_error(e, &fs, missing);
    kvt_ssd_flush_end(e, &fs);
    return r;
}

KVT_API int kvt_flush(kvt_engine *e)
{
    KVT_ENTER(e);
    int r = kvt_check_failed(e);
    /* With persist, every page goes to SSD and the index is synced. */
    if (r == 0)
        r = kvt_persisted(e) ? flush_persist(e) : flush_hbm(e);
    kvt_unlock(e);
    /* And what is queued for the shared tier is sent: a page put before a
     * flush is there for other engines after it. The cluster is a cache,
     * so a send that runs out of time is not this call's error. */
    if (r == 0 && e->remote)
        (void)kvt_remote_drain(e->remote, 4 * (e->cfg.remote_timeout_ms
                                                   ? e->cfg.remote_timeout_ms : 200));
    return r;
}
