/*
 * lru.c — least-recently-used eviction: the baseline that peers use.
 *
 * One intrusive doubly-linked list per tier over page numbers: O(1) insert,
 * remove and access; victim() walks from the cold end past candidates that
 * are not usable right now (in flight or being read), O(skipped).
 * 8 bytes per page per tier.
 */
#include <errno.h>
#include <stdlib.h>

#include "policy/dlist.h"

/* Links of all tiers in one array, [page][tier][prev,next], so that growth
 * is one realloc that either fully happens or leaves everything as it was. */
struct lru {
    uint32_t cap;
    uint64_t *meta;
    uint32_t head[KVT_POLICY_TIERS], tail[KVT_POLICY_TIERS]; /* head = most recent */
    uint32_t *link;
};

#define PREV(p, t, pg) DL_PREV((p)->link, t, pg)

static void lru_destroy(void *priv)
{
    struct lru *p = priv;
    dl_free(p->meta, p->link, p->cap);
    free(p);
}

static int lru_reserve(void *priv, uint32_t cap)
{
    struct lru *p = priv;
    if (cap <= p->cap)
        return 0;
    if (dl_grow(p->meta, &p->link, p->cap, cap) < 0)
        return -ENOMEM;
    p->cap = cap;
    return 0;
}

static int lru_create(const struct kvt_policy_params *pp, void **priv)
{
    struct lru *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->meta = pp->meta;
    for (int t = 0; t < KVT_POLICY_TIERS; t++)
        p->head[t] = p->tail[t] = KVT_NONE;
    if (lru_reserve(p, pp->page_cap ? pp->page_cap : 1) < 0) {
        lru_destroy(p);
        return -ENOMEM;
    }
    *priv = p;
    return 0;
}

static void lru_link_head(struct lru *p, int t, uint32_t pg)
{
    dl_push_head(p->link, t, &p->head[t], &p->tail[t], pg);
}

static void lru_unlink(struct lru *p, int t, uint32_t pg)
{
    dl_unlink(p->link, t, &p->head[t], &p->tail[t], pg);
}

static void lru_insert(void *priv, int tier, uint32_t pg, const kvt_key *key)
{
    lru_link_head(priv, tier, pg);
}

static void lru_remove(void *priv, int tier, uint32_t pg)
{
    lru_unlink(priv, tier, pg);
}

static void lru_access(void *priv, int tier, uint32_t pg)
{
    struct lru *p = priv;
    if (p->head[tier] == pg)
        return;
    lru_unlink(p, tier, pg);
    lru_link_head(p, tier, pg);
}

static uint32_t lru_victim(void *priv, int tier, kvt_usable_fn usable, void *ctx)
{
    struct lru *p = priv;
    for (uint32_t pg = p->tail[tier]; pg != KVT_NONE; pg = PREV(p, tier, pg))
        if (!usable || usable(ctx, pg))
            return pg;
    return KVT_NONE;
}

const struct kvt_policy_ops kvt_policy_lru_ops = {
    .name = "lru",
    .version = KVT_POLICY_OPS_VERSION,
    .create = lru_create,
    .destroy = lru_destroy,
    .reserve = lru_reserve,
    .insert = lru_insert,
    .remove = lru_remove,
    .access = lru_access,
    .victim = lru_victim,
};
