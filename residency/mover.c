/*
 * mover.c — the engine's one background thread. Each time it is woken, in
 * this order: settle finished copies, prefetch (prefetch.c), with persist
 * the DRAM-only pages written ahead while the disk has room (dram.c), one
 * step of the SSD pipeline (ssd_pipe.c, whose state this thread owns), and
 * write-back.
 * Callers wait on fences and on the SSD tier's progress, never on this
 * thread itself.
 *
 * Write-back: an eviction of a dirty page must wait for its D2H copy before
 * the slot can be reused. The mover keeps at least the HBM watermark of slots
 * free or clean by writing the coldest dirty, unpinned pages back ahead of
 * need, so that a caller's eviction is usually a clean drop that costs
 * nothing. It only works under pressure: with room in HBM, dirty pages stay
 * where they are (no D2H bandwidth spent on pages that may be rewritten or
 * dropped). Why each: docs/design.md#write-back, docs/design.md#prefetch,
 * docs/design.md#ssd-pipeline.
 */
#include <errno.h>

#include "residency/residency.h"

static uint32_t mover_deficit(kvt_engine *e)
{
    uint64_t clean = e->pages.st.resident_pages[KVT_TIER_HBM] - e->pages.dirty_hbm;
    uint64_t ok = e->hbm.arena.nfree + clean;
    return ok >= e->hbm.watermark ? 0 : (uint32_t)(e->hbm.watermark - ok);
}

static void *mover_main(void *arg)
{
    kvt_engine *e = arg;
    kvt_mover_mark_self(e);
    pthread_setname_np(pthread_self(), "kvt-mover");
    /* It hands the disk its work and the callers their pages: it should not
     * wait behind the caller's compute when woken (io/sched_hint.c). */
    (void)kvt_io_short_slice();
    kvt_lock(e);
    /* On stop, SSD jobs still queued are run first: their callers wait. */
    while (!e->mover.stop || kvt_ssd_pipe_pending(e)) {
        if (!e->mover.kick && !kvt_ssd_pipe_pending(e)) {
            pthread_cond_wait(&e->mover.cv, &e->lock);
            continue;
        }
        e->mover.kick = false;
        kvt_settle(e);
        kvt_prefetch(e);
        if (!e->mover.stop)
            kvt_dram_write_ahead(e); /* with persist, while the disk has room */
        /* SSD work first: callers wait on it, while write-back is ahead of need. */
        if (kvt_ssd_pipe_step(e)) {
            e->mover.kick = true;
            continue;
        }
        uint32_t want = mover_deficit(e);
        if (e->failed || !want || !e->pages.dirty_hbm)
            continue;
        uint64_t fence = 0;
        kvt_writeback(e, want, false, &fence);
        if (fence) {
            /* Look again once these land: more may be needed by then. */
            kvt_wait_fence(e, KVT_D2H, fence, false);
            e->mover.kick = true;
        }
    }
    kvt_unlock(e);
    return NULL;
}

int kvt_mover_start(kvt_engine *e)
{
    int r = pthread_create(&e->mover.thread, NULL, mover_main, e);
    if (r)
        return -r;
    e->mover.started = true;
    return 0;
}

void kvt_mover_stop(kvt_engine *e)
{
    if (!e->mover.started)
        return;
    kvt_lock(e);
    e->mover.stop = true;
    pthread_cond_signal(&e->mover.cv);
    kvt_unlock(e);
    pthread_join(e->mover.thread, NULL);
    e->mover.started = false;
}

void kvt_mover_wake(kvt_engine *e)
{
    e->mover.kick = true;
    pthread_cond_signal(&e->mover.cv);
}

/* Called under the lock after pages turned dirty or were put. */
void kvt_mover_kick(kvt_engine *e)
{
    if (e->mover.kick || (!mover_deficit(e) && !kvt_dram_ahead_due(e)))
        return;
    e->mover.kick = true;
    pthread_cond_signal(&e->mover.cv);
}

/* The mover's condition variable lives from engine_alloc to engine_free,
 * longer than the thread (kvt_mover_wake may come before it starts). */
void kvt_mover_init(kvt_engine *e)
{
    pthread_cond_init(&e->mover.cv, NULL);
}

void kvt_mover_fini(kvt_engine *e)
{
    pthread_cond_destroy(&e->mover.cv);
}
