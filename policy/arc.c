/*
 * arc.c — Adaptive Replacement Cache (Megiddo and Modha, FAST'03), per tier:
 * the other classic baseline for prefix caches (vLLM offers it beside LRU).
 *
 * Per tier: T1 (pages used once since they came), T2 (used again), and the
 * ghosts B1, B2 (keys of pages that left T1, T2: no data). A page that comes
 * back while its key is in B1 says T1 was too small: the target size p of T1
 * grows; back from B2, it shrinks. victim() takes T1's cold end while T1 is
 * over p, else T2's. Ghost lists hold up to the tier's slots each.
 *
 * Ghosts are kept as sequence numbers: a key is a ghost of its list while
 * its number is among the list's last ARC allows (|T1| + |B1| <= c,
 * everything <= 2c), so a key leaves a ghost list without being searched
 * for; a sweep drops the dead ones when the map fills.
 * Cost: per page 24 bytes per tier; per ghost 24 bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy/dlist.h"

enum { L_T1, L_T2 };

struct gentry {
    kvt_key key;
    uint64_t seq;       /* 0 = empty; list in the low bit: seq = n << 1 | list */
};

struct ghosts {
    struct gentry *map;
    size_t cap, used;   /* open addressing, cap a power of two, used <= cap / 2 */
    uint64_t next[2];   /* the next sequence number of B1, B2 (from 1) */
    uint64_t limit;     /* a list holds its last `limit` keys */
};

struct arc {
    uint32_t cap;
    uint64_t *meta;
    uint32_t *link;                             /* [page][tier][prev,next] */
    uint8_t *list;                              /* [page][tier]: L_T1 / L_T2 */
    uint32_t link_cap, list_cap;                /* pages each has room for: may pass cap
                                                   when a reserve failed half way */
    kvt_key *key;                               /* [page] */
    uint32_t head[KVT_POLICY_TIERS][2], tail[KVT_POLICY_TIERS][2];
    uint32_t n[KVT_POLICY_TIERS][2];
    double p[KVT_POLICY_TIERS];                 /* target size of T1 */
    uint32_t slots[KVT_POLICY_TIERS];
    struct ghosts g[KVT_POLICY_TIERS];
};

#define LIST(a, t, pg) ((a)->list[(size_t)(pg) * KVT_POLICY_TIERS + (t)])

static void arc_destroy(void *priv)
{
    struct arc *a = priv;
    dl_free(a->meta, a->link, a->link_cap);
    kvt_meta_free(a->meta, a->list, (size_t)a->list_cap * KVT_POLICY_TIERS);
    kvt_meta_free(a->meta, a->key, (size_t)a->cap * sizeof(kvt_key));
    for (int t = 0; t < KVT_POLICY_TIERS; t++)
        kvt_meta_free(a->meta, a->g[t].map, a->g[t].cap * sizeof(struct gentry));
    free(a);
}

static int arc_reserve(void *priv, uint32_t cap)
{
    struct arc *a = priv;
    if (cap <= a->cap)
        return 0;
    if (a->link_cap < cap) {
        if (dl_grow(a->meta, &a->link, a->link_cap, cap) < 0)
            return -ENOMEM;
        a->link_cap = cap;
    }
    if (a->list_cap < cap) {
        uint8_t *ns = kvt_meta_realloc(a->meta, a->list, (size_t)a->list_cap * KVT_POLICY_TIERS,
                                       (size_t)cap * KVT_POLICY_TIERS);
        if (!ns)
            return -ENOMEM;
        a->list = ns;
        a->list_cap = cap;
    }
    kvt_key *nk = kvt_meta_realloc(a->meta, a->key, (size_t)a->cap * sizeof(kvt_key),
                                   (size_t)cap * sizeof(kvt_key));
    if (!nk)
        return -ENOMEM;
    a->key = nk;
    a->cap = cap;
    return 0;
}

static int ghosts_init(struct arc *a, struct ghosts *g, uint32_t slots)
{
    g->limit = slots ? slots : 1;
    g->cap = 1024;
    while (g->cap < 4 * 2 * g->limit)
        g->cap <<= 1;
    g->map = kvt_meta_realloc(a->meta, NULL, 0, g->cap * sizeof(*g->map));
    if (!g->map)
        return -ENOMEM;
    memset(g->map, 0, g->cap * sizeof(*g->map));
    g->next[0] = g->next[1] = 1;
    return 0;
}

static int arc_create(const struct kvt_policy_params *pp, void **priv)
{
    struct arc *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->meta = pp->meta;
    for (int t = 0; t < KVT_POLICY_TIERS; t++) {
        a->slots[t] = pp->slots[t];
        for (int l = 0; l < 2; l++)
            a->head[t][l] = a->tail[t][l] = KVT_NONE;
    }
    int r = arc_reserve(a, pp->page_cap ? pp->page_cap : 1);
    for (int t = 0; t < KVT_POLICY_TIERS && r == 0; t++)
        r = ghosts_init(a, &a->g[t], pp->slots[t]);
    if (r < 0) {
        arc_destroy(a);
        return -ENOMEM;
    }
    *priv = a;
    return 0;
}

/* ------------------------------------------------------------- ghosts */

/* How many keys ghost list l of tier t holds now: ARC's bounds, |T1| + |B1|
 * <= c and |T1| + |T2| + |B1| + |B2| <= 2c, with c the tier's slots. */
static uint64_t ghost_limit(const struct arc *a, int t, int l)
{
    const struct ghosts *g = &a->g[t];
    uint64_t c = g->limit, t1 = a->n[t][L_T1], t2 = a->n[t][L_T2];
    uint64_t b1max = t1 < c ? c - t1 : 0;
    uint64_t b1 = g->next[0] - 1 < b1max ? g->next[0] - 1 : b1max;
    if (l == 0)
        return b1;
    uint64_t used = t1 + t2 + b1;
    return used < 2 * c ? 2 * c - used : 0;
}

static bool live(const struct arc *a, int t, uint64_t seq)
{
    const struct ghosts *g = &a->g[t];
    int l = (int)(seq & 1);
    uint64_t n = seq >> 1;
    return seq && n + ghost_limit(a, t, l) >= g->next[l];
}

static uint64_t ghost_size(const struct arc *a, int t, int l)
{
    uint64_t n = a->g[t].next[l] - 1, lim = ghost_limit(a, t, l);
    return n < lim ? n : lim;
}

/* Drops the entries no list holds any more (rehash into the same size). */
static void ghosts_sweep(struct arc *a, int t)
{
    struct ghosts *g = &a->g[t];
    size_t keep = 0;
    for (size_t i = 0; i < g->cap; i++)
        if (live(a, t, g->map[i].seq))
            g->map[keep++] = g->map[i];
    memset(g->map + keep, 0, (g->cap - keep) * sizeof(*g->map));
    struct gentry *tmp = malloc(keep * sizeof(*tmp));
    if (!tmp) { /* cannot rehash: forget the ghosts (ARC then starts over) */
        memset(g->map, 0, g->cap * sizeof(*g->map));
        g->used = 0;
        return;
    }
    memcpy(tmp, g->map, keep * sizeof(*tmp));
    memset(g->map, 0, keep * sizeof(*g->map));
    for (size_t i = 0; i < keep; i++) {
        size_t j = kvt_key_hash(&tmp[i].key) & (g->cap - 1);
        while (g->map[j].seq)
            j = (j + 1) & (g->cap - 1);
        g->map[j] = tmp[i];
    }
    g->used = keep;
    free(tmp);
}

static struct gentry *ghost_find(struct ghosts *g, const kvt_key *k)
{
    size_t j = kvt_key_hash(k) & (g->cap - 1);
    while (g->map[j].seq && !kvt_key_eq(&g->map[j].key, k))
        j = (j + 1) & (g->cap - 1);
    return &g->map[j];
}

static void ghost_add(struct arc *a, int t, const kvt_key *k, int l)
{
    struct ghosts *g = &a->g[t];
    if (g->used + 1 > g->cap / 2)
        ghosts_sweep(a, t);
    struct gentry *e = ghost_find(g, k);
    if (!e->seq)
        g->used++;
    e->key = *k;
    e->seq = g->next[l]++ << 1 | (uint64_t)l;
}

/* ------------------------------------------------------------- lists */

static void link_head(struct arc *a, int t, int l, uint32_t pg)
{
    LIST(a, t, pg) = (uint8_t)l;
    dl_push_head(a->link, t, &a->head[t][l], &a->tail[t][l], pg);
    a->n[t][l]++;
}

static void unlink_pg(struct arc *a, int t, uint32_t pg)
{
    int l = LIST(a, t, pg);
    dl_unlink(a->link, t, &a->head[t][l], &a->tail[t][l], pg);
    a->n[t][l]--;
}

static void arc_insert(void *priv, int t, uint32_t pg, const kvt_key *key)
{
    struct arc *a = priv;
    struct ghosts *g = &a->g[t];
    struct gentry *e = ghost_find(g, key);
    int l = L_T1;
    if (live(a, t, e->seq)) {
        double b1 = (double)ghost_size(a, t, 0), b2 = (double)ghost_size(a, t, 1);
        if ((e->seq & 1) == 0) { /* back from B1: T1 deserved more room */
            double d = b2 > b1 ? b2 / b1 : 1;
            a->p[t] = a->p[t] + d < a->slots[t] ? a->p[t] + d : a->slots[t];
        } else {                 /* back from B2: T2 did */
            double d = b1 > b2 ? b1 / b2 : 1;
            a->p[t] = a->p[t] > d ? a->p[t] - d : 0;
        }
        e->seq = 0;  /* stays in the map until a sweep; no longer live */
        l = L_T2;
    }
    a->key[pg] = *key;
    link_head(a, t, l, pg);
}

static void arc_remove(void *priv, int t, uint32_t pg)
{
    struct arc *a = priv;
    int l = LIST(a, t, pg);
    unlink_pg(a, t, pg);
    ghost_add(a, t, &a->key[pg], l);
}

static void arc_access(void *priv, int t, uint32_t pg)
{
    struct arc *a = priv;
    unlink_pg(a, t, pg);
    link_head(a, t, L_T2, pg);
}

static uint32_t cold_usable(struct arc *a, int t, int l, kvt_usable_fn usable, void *ctx)
{
    for (uint32_t pg = a->tail[t][l]; pg != KVT_NONE; pg = DL_PREV(a->link, t, pg))
        if (!usable || usable(ctx, pg))
            return pg;
    return KVT_NONE;
}

static uint32_t arc_victim(void *priv, int t, kvt_usable_fn usable, void *ctx)
{
    struct arc *a = priv;
    int first = a->n[t][L_T1] > 0 && (a->n[t][L_T1] > a->p[t] || !a->n[t][L_T2]) ? L_T1 : L_T2;
    uint32_t v = cold_usable(a, t, first, usable, ctx);
    return v != KVT_NONE ? v : cold_usable(a, t, !first, usable, ctx);
}

const struct kvt_policy_ops kvt_policy_arc_ops = {
    .name = "arc",
    .version = KVT_POLICY_OPS_VERSION,
    .create = arc_create,
    .destroy = arc_destroy,
    .reserve = arc_reserve,
    .insert = arc_insert,
    .remove = arc_remove,
    .access = arc_access,
    .victim = arc_victim,
};
