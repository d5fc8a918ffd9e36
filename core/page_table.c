/*
 * page_table.c — page records and the index by key.
 *
 * Records sit in one array so that a page is named by a 32-bit number
 * everywhere (arena owners, policy lists, in-flight rings): that keeps the
 * per-page metadata small (the budget is 128 bytes a page). The array grows by
 * doubling, so record pointers must not be kept across kvt_ptable_new().
 *
 * The index is open addressing with linear probing and backward-shift
 * deletion: no tombstones, so heavy drop/re-create churn (every finished
 * sequence) never degrades lookups. Load is kept at or under one half.
 */
#include <errno.h>
#include <string.h>

#include "core/engine.h"

static int index_alloc(struct kvt_ptable *t, uint32_t nb)
{
    uint32_t *ix = kvt_meta_alloc(t->meta, (size_t)nb * sizeof(uint32_t));
    if (!ix)
        return -ENOMEM;
    memset(ix, 0xff, (size_t)nb * sizeof(uint32_t));
    t->index = ix;
    t->index_mask = nb - 1;
    return 0;
}

static uint32_t pow2_at_least(uint32_t n)
{
    uint32_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

int kvt_ptable_init(struct kvt_ptable *t, uint32_t expect, uint64_t *meta)
{
    memset(t, 0, sizeof(*t));
    t->meta = meta;
    t->free_head = KVT_NONE;
    t->cap = expect ? expect : 16;
    t->pages = kvt_meta_alloc(meta, (size_t)t->cap * sizeof(struct kvt_page));
    if (!t->pages)
        return -ENOMEM;
    if (index_alloc(t, pow2_at_least(t->cap * 2)) < 0) {
        kvt_meta_free(meta, t->pages, (size_t)t->cap * sizeof(struct kvt_page));
        t->pages = NULL;
        return -ENOMEM;
    }
    return 0;
}

void kvt_ptable_fini(struct kvt_ptable *t)
{
    kvt_meta_free(t->meta, t->pages, (size_t)t->cap * sizeof(struct kvt_page));
    kvt_meta_free(t->meta, t->index, ((size_t)t->index_mask + 1) * sizeof(uint32_t));
    t->pages = NULL;
    t->index = NULL;
}

uint32_t kvt_ptable_new(struct kvt_ptable *t)
{
    uint32_t pg;
    if (t->free_head != KVT_NONE) {
        pg = t->free_head;
        t->free_head = kvt_page_record_next(&t->pages[pg]);
    } else {
        if (t->used == t->cap) {
            if (t->cap >= KVT_NONE / 2)
                return KVT_NONE;
            uint32_t ncap = t->cap * 2;
            void *np = kvt_meta_realloc(t->meta, t->pages, (size_t)t->cap * sizeof(struct kvt_page),
                                        (size_t)ncap * sizeof(struct kvt_page));
            if (!np)
                return KVT_NONE;
            t->pages = np;
            t->cap = ncap;
        }
        pg = t->used++;
    }
    t->live++;
    kvt_page_record_init(&t->pages[pg]);
    t->pages[pg].birth = ++t->births;
    return pg;
}

void kvt_ptable_delete(struct kvt_ptable *t, uint32_t pg)
{
    kvt_page_record_free(&t->pages[pg], t->free_head);
    t->free_head = pg;
    t->live--;
}

uint32_t kvt_ptable_find(const struct kvt_ptable *t, const kvt_key *k)
{
    uint32_t i = (uint32_t)kvt_key_hash(k) & t->index_mask;
    for (;;) {
        uint32_t pg = t->index[i];
        if (pg == KVT_NONE)
            return KVT_NONE;
        if (kvt_key_eq(&t->pages[pg].key, k))
            return pg;
        i = (i + 1) & t->index_mask;
    }
}

static void index_place(struct kvt_ptable *t, uint32_t pg)
{
    uint32_t i = (uint32_t)kvt_key_hash(&t->pages[pg].key) & t->index_mask;
    while (t->index[i] != KVT_NONE)
        i = (i + 1) & t->index_mask;
    t->index[i] = pg;
}

static int index_grow(struct kvt_ptable *t)
{
    uint32_t *old = t->index;
    uint32_t old_n = t->index_mask + 1;
    if (old_n >= (1u << 31))
        return -ENOMEM;
    if (index_alloc(t, old_n * 2) < 0) {
        t->index = old;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < old_n; i++)
        if (old[i] != KVT_NONE)
            index_place(t, old[i]);
    kvt_meta_free(t->meta, old, (size_t)old_n * sizeof(uint32_t));
    return 0;
}

int kvt_ptable_insert(struct kvt_ptable *t, uint32_t pg)
{
    if (kvt_ptable_find(t, &t->pages[pg].key) != KVT_NONE)
        return -EEXIST;
    if ((uint64_t)(t->count + 1) * 2 > (uint64_t)t->index_mask + 1 && index_grow(t) < 0)
        return -ENOMEM;
    index_place(t, pg);
    t->count++;
    kvt_page_record_hashed(&t->pages[pg], true);
    return 0;
}

void kvt_ptable_remove(struct kvt_ptable *t, uint32_t pg)
{
    uint32_t m = t->index_mask;
    uint32_t i = (uint32_t)kvt_key_hash(&t->pages[pg].key) & m;
    while (t->index[i] != pg) {
        if (t->index[i] == KVT_NONE)
            return; /* not indexed */
        i = (i + 1) & m;
    }
    /* Backward shift: move later members of the cluster into the hole when
     * their home bucket is not inside (hole, their position]. */
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & m; t->index[j] != KVT_NONE; j = (j + 1) & m) {
        uint32_t home = (uint32_t)kvt_key_hash(&t->pages[t->index[j]].key) & m;
        bool movable = (hole <= j) ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            t->index[hole] = t->index[j];
            hole = j;
        }
    }
    t->index[hole] = KVT_NONE;
    t->count--;
    kvt_page_record_hashed(&t->pages[pg], false);
}
