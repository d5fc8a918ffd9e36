/*
 * arena.c — fixed page slots over one allocation, O(1) alloc and free.
 *
 * The arena does not own its memory (the device back-end does); it only hands
 * out slot numbers. owner[] maps a slot to its page and is KVT_NONE for a free
 * slot, which is how double frees and frees of foreign slots are caught: those
 * are bugs that would let two pages share bytes, so they are checked in every
 * build, not only with KVT_DEBUG.
 */
#include <errno.h>

#include "core/engine.h"

int kvt_arena_init(struct kvt_arena *a, void *base, size_t page_bytes, uint32_t nslots,
                   uint64_t *meta)
{
    a->base = base;
    a->page_bytes = page_bytes;
    a->nslots = nslots;
    a->free_stack = kvt_meta_alloc(meta, (size_t)nslots * sizeof(uint32_t));
    a->owner = kvt_meta_alloc(meta, (size_t)nslots * sizeof(uint32_t));
    if (!a->free_stack || !a->owner) {
        kvt_arena_fini(a, meta);
        return -ENOMEM;
    }
    /* Lowest slots on top of the stack: a fresh arena fills from its start,
     * which keeps small working sets in few (huge) pages. */
    for (uint32_t i = 0; i < nslots; i++) {
        a->free_stack[i] = nslots - 1 - i;
        a->owner[i] = KVT_NONE;
    }
    a->nfree = nslots;
    return 0;
}

void kvt_arena_fini(struct kvt_arena *a, uint64_t *meta)
{
    kvt_meta_free(meta, a->free_stack, (size_t)a->nslots * sizeof(uint32_t));
    kvt_meta_free(meta, a->owner, (size_t)a->nslots * sizeof(uint32_t));
    a->free_stack = NULL;
    a->owner = NULL;
    a->nfree = 0;
}

uint32_t kvt_arena_alloc(struct kvt_arena *a, uint32_t page)
{
    if (a->nfree == 0)
        return KVT_NONE;
    uint32_t s = a->free_stack[--a->nfree];
    a->owner[s] = page;
    return s;
}

int kvt_arena_free(struct kvt_arena *a, uint32_t slot)
{
    if (slot >= a->nslots || a->owner[slot] == KVT_NONE)
        return -EINVAL;
    a->owner[slot] = KVT_NONE;
    a->free_stack[a->nfree++] = slot;
    return 0;
}
