/*
 * stage.c — making a page that lives only on SSD valid in DRAM: a DRAM slot
 * (free, or stolen from a redundant copy), else room made for the pages the
 * call needs, else the spare slot; then the read queued for the mover. One
 * way for kvt_get and kvt_acquire alike (prefetch takes only a free slot or
 * one its policy frees, and queues the same read). What the caller waits
 * on, when it must, is set in its struct kvt_wait.
 */
#include <errno.h>

#include "residency/residency.h"

int kvt_stage_ssd_read(kvt_engine *e, uint32_t pg, uint32_t need, struct kvt_wait *w)
{
    uint32_t s = kvt_dram_slot(e, pg, KVT_SLOT_STEAL);
    if (s == KVT_NONE) {
        if (w->kind != KVT_WAIT_NONE)
            return -EAGAIN; /* the call waits for room already */
        int r = kvt_make_room_dram(e, need ? need : 1, w);
        if (r == -EAGAIN)
            return r;
        s = kvt_dram_slot(e, pg, r == 0 ? KVT_SLOT_STEAL : KVT_SLOT_SPARE);
        if (s == KVT_NONE)
            return r < 0 ? r : KVT_EFULL;
    }
    kvt_ssd_queue_read(e, pg);
    return 0;
}
