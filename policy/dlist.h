/*
 * dlist.h — the intrusive doubly-linked lists of page numbers that the
 * list-based policies (lru.c, arc.c, prefix.c) keep per tier.
 *
 * Links live in one array, [page][tier][prev, next] (KVT_POLICY_TIERS tiers),
 * so that growing it is one realloc that either happens or leaves everything
 * as it was; a list is its head (most recent) and tail. KVT_NONE ends a list.
 * O(1) each.
 */
#ifndef KVT_POLICY_DLIST_H
#define KVT_POLICY_DLIST_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

#define DL_LINKS (2 * KVT_POLICY_TIERS)
#define DL_PREV(link, t, pg) ((link)[(size_t)(pg) * DL_LINKS + 2 * (t)])
#define DL_NEXT(link, t, pg) ((link)[(size_t)(pg) * DL_LINKS + 2 * (t) + 1])

/* Grows *link from pages old to pages cap (counted in *meta). 0, or
 * -ENOMEM with *link as it was. */
static inline int dl_grow(uint64_t *meta, uint32_t **link, uint32_t old, uint32_t cap)
{
    uint32_t *nl = kvt_meta_realloc(meta, *link, (size_t)old * DL_LINKS * sizeof(uint32_t),
                                    (size_t)cap * DL_LINKS * sizeof(uint32_t));
    if (!nl)
        return -ENOMEM;
    *link = nl;
    return 0;
}

/* Frees a link array of cap pages (counted in *meta). */
static inline void dl_free(uint64_t *meta, uint32_t *link, uint32_t cap)
{
    kvt_meta_free(meta, link, (size_t)cap * DL_LINKS * sizeof(uint32_t));
}

/* Puts pg at the head of the list (head, tail) of tier t. */
static inline void dl_push_head(uint32_t *link, int t, uint32_t *head, uint32_t *tail, uint32_t pg)
{
    DL_PREV(link, t, pg) = KVT_NONE;
    DL_NEXT(link, t, pg) = *head;
    if (*head != KVT_NONE)
        DL_PREV(link, t, *head) = pg;
    else
        *tail = pg;
    *head = pg;
}

/* Takes pg out of the list (head, tail) of tier t that holds it. */
static inline void dl_unlink(uint32_t *link, int t, uint32_t *head, uint32_t *tail, uint32_t pg)
{
    uint32_t pv = DL_PREV(link, t, pg), nx = DL_NEXT(link, t, pg);
    if (pv != KVT_NONE)
        DL_NEXT(link, t, pv) = nx;
    else
        *head = nx;
    if (nx != KVT_NONE)
        DL_PREV(link, t, nx) = pv;
    else
        *tail = pv;
}

#endif /* KVT_POLICY_DLIST_H */
