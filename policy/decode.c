/*
 * decode.c — the decode-position policy: evict behind, prefetch ahead.
 *
 * Decode is a cyclic scan: every step reads every page of every
 * (sequence, layer) in an order the engine knows and tells us
 * (kvt_set_schedule), and kvt_advance says where in that order it is. On a
 * cycle, Belady's MIN — evict the page whose next use is furthest — evicts
 * the group that was just used; LRU evicts the one needed next, and misses
 * every access once the cycle is larger than the cache.
 *
 * Groups: the schedule's (sequence, layer) pairs numbered in compute order,
 * g = layer * n_ids + seq (layer-major) or seq * n_layers + layer
 * (sequence-major); S groups a step. With the position at group P, a page of
 * group g is next used (g - P) mod S groups from now: P itself is 0 (it is
 * being computed), P - 1 is the furthest.
 *
 * Candidates of each tier sit in buckets: one per group, one for dead pages
 * (outside the sliding window: never used again) and one, in LRU order, for
 * pages of sequences outside the schedule. victim() takes a dead page, then
 * the least recently used unscheduled page, then walks the groups from the
 * furthest (P - 1) towards P. prefetch() walks the other way, from P.
 *
 * Lists are circular with sentinels (node ids with the top bit set), so a
 * page is unlinked without knowing its bucket: 24 bytes a page, as LRU.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

#define SENT 0x80000000u
#define T KVT_POLICY_TIERS

struct decode {
    uint32_t cap;
    uint64_t *meta;
    struct kvt_policy_host host;
    uint32_t *link;              /* [page][tier][prev, next]; prev KVT_NONE = not listed */
    /* the schedule */
    bool have;
    int order;
    uint32_t n_ids, n_layers, window, sinks, S;
    uint64_t *ids;               /* seq -> id */
    uint32_t *id_map, id_mask;   /* open addressing: id -> seq + 1, 0 = empty */
    uint32_t *maxidx;            /* [S] highest page index seen per group, +1 (0 = none) */
    uint32_t P;                  /* current group */
    uint32_t nb;                 /* buckets per tier: S + 2 */
    uint32_t *bkt;               /* [tier][nb][prev, next] sentinel links */
};

#define B_DEAD(d) ((d)->S)
#define B_UNSCHED(d) ((d)->S + 1)

/* ------------------------------------------------------------- links */

static inline uint32_t *lk(struct decode *d, int t, uint32_t node)
{
    if (node & SENT)
        return &d->bkt[((size_t)t * d->nb + (node & ~SENT)) * 2];
    return &d->link[((size_t)node * T + (size_t)t) * 2];
}

static void list_init(struct decode *d)
{
    for (int t = 0; t < T; t++)
        for (uint32_t b = 0; b < d->nb; b++) {
            uint32_t *s = lk(d, t, SENT | b);
            s[0] = s[1] = SENT | b;
        }
}

static void list_add_tail(struct decode *d, int t, uint32_t b, uint32_t pg)
{
    uint32_t s = SENT | b, last = lk(d, t, s)[0];
    uint32_t *n = lk(d, t, pg);
    n[0] = last;
    n[1] = s;
    lk(d, t, last)[1] = pg;
    lk(d, t, s)[0] = pg;
}

static void list_del(struct decode *d, int t, uint32_t pg)
{
    uint32_t *n = lk(d, t, pg);
    lk(d, t, n[0])[1] = n[1];
    lk(d, t, n[1])[0] = n[0];
    n[0] = n[1] = KVT_NONE;
}

/* ------------------------------------------------------------- schedule */

static uint32_t id_hash(uint64_t id)
{
    id *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(id >> 32);
}

/* Sequence number of id in the schedule, or KVT_NONE. */
static uint32_t seq_of(const struct decode *d, uint64_t id)
{
    if (!d->have)
        return KVT_NONE;
    for (uint32_t i = id_hash(id) & d->id_mask;; i = (i + 1) & d->id_mask) {
        uint32_t v = d->id_map[i];
        if (!v)
            return KVT_NONE;
        if (d->ids[v - 1] == id)
            return v - 1;
    }
}

static uint32_t group_of(const struct decode *d, uint32_t seq, uint32_t layer)
{
    if (layer == KVT_ALL_LAYERS)
        layer = 0; /* page-first layouts: used from the sequence's first layer on */
    if (layer >= d->n_layers)
        return KVT_NONE;
    return d->order == KVT_ORDER_LAYER_MAJOR ? layer * d->n_ids + seq : seq * d->n_layers + layer;
}

static bool dead(const struct decode *d, uint32_t g, uint32_t index)
{
    return d->window && index >= d->sinks && d->maxidx[g] &&
           (uint64_t)index + d->window < d->maxidx[g];
}

/* Which bucket a page belongs in now. */
static uint32_t classify(const struct decode *d, const kvt_key *k, uint32_t *group)
{
    uint32_t s = seq_of(d, k->id), g = s == KVT_NONE ? KVT_NONE : group_of(d, s, k->layer);
    *group = g;
    if (g == KVT_NONE)
        return B_UNSCHED(d);
    return dead(d, g, k->index) ? B_DEAD(d) : g;
}

/* ------------------------------------------------------------- lifecycle */

static void decode_free_schedule(struct decode *d)
{
    free(d->ids);
    free(d->id_map);
    free(d->maxidx);
    free(d->bkt);
    d->ids = NULL;
    d->id_map = NULL;
    d->maxidx = NULL;
    d->bkt = NULL;
}

static void decode_destroy(void *priv)
{
    struct decode *d = priv;
    kvt_meta_free(d->meta, d->link, (size_t)d->cap * T * 2 * sizeof(uint32_t));
    decode_free_schedule(d);
    free(d);
}

static int decode_reserve(void *priv, uint32_t cap)
{
    struct decode *d = priv;
    if (cap <= d->cap)
        return 0;
    size_t old = (size_t)d->cap * T * 2 * sizeof(uint32_t), nw = (size_t)cap * T * 2 * sizeof(uint32_t);
    uint32_t *nl = kvt_meta_realloc(d->meta, d->link, old, nw);
    if (!nl)
        return -ENOMEM;
    memset((uint8_t *)nl + old, 0xff, nw - old); /* KVT_NONE: not listed */
    d->link = nl;
    d->cap = cap;
    return 0;
}

/* No schedule yet: one group, everything "unscheduled" in LRU order. */
static int decode_alloc_buckets(struct decode *d)
{
    d->nb = d->S + 2;
    d->bkt = malloc((size_t)T * d->nb * 2 * sizeof(uint32_t));
    if (!d->bkt)
        return -ENOMEM;
    list_init(d);
    return 0;
}

static int decode_create(const struct kvt_policy_params *pp, void **priv)
{
    struct decode *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->meta = pp->meta;
    d->host = pp->host;
    if (decode_alloc_buckets(d) < 0 || decode_reserve(d, pp->page_cap ? pp->page_cap : 1) < 0) {
        decode_destroy(d);
        return -ENOMEM;
    }
    *priv = d;
    return 0;
}

/* ------------------------------------------------------------- candidates */

static void decode_insert(void *priv, int tier, uint32_t pg, const kvt_key *key)
{
    struct decode *d = priv;
    uint32_t g;
    list_add_tail(d, tier, classify(d, key, &g), pg);
}

static void decode_remove(void *priv, int tier, uint32_t pg)
{
    list_del(priv, tier, pg);
}

/* A use moves an unscheduled page to the recent end (LRU); a scheduled page
 * is re-filed in case the window moved past it. */
static void decode_access(void *priv, int tier, uint32_t pg)
{
    struct decode *d = priv;
    list_del(d, tier, pg);
    uint32_t g;
    list_add_tail(d, tier, classify(d, d->host.key_of(d->host.ctx, pg), &g), pg);
}

static uint32_t first_usable(struct decode *d, int t, uint32_t b, kvt_usable_fn usable, void *ctx)
{
    uint32_t s = SENT | b;
    for (uint32_t n = lk(d, t, s)[1]; n != s; n = lk(d, t, n)[1])
        if (!usable || usable(ctx, n))
            return n;
    return KVT_NONE;
}

/* Within a group the pages are read in index order, so the furthest use is
 * the highest index (sink pages, read first, are kept longest). Buckets are
 * not sorted: look at up to 64 usable candidates and take the highest, which
 * bounds the cost on groups of thousands of pages. */
static uint32_t furthest_usable(struct decode *d, int t, uint32_t b, kvt_usable_fn usable,
                                void *ctx)
{
    uint32_t s = SENT | b, best = KVT_NONE, best_idx = 0, seen = 0;
    for (uint32_t n = lk(d, t, s)[0]; n != s && seen < 64; n = lk(d, t, n)[0]) {
        if (usable && !usable(ctx, n))
            continue;
        uint32_t idx = d->host.key_of(d->host.ctx, n)->index;
        if (best == KVT_NONE || idx > best_idx) {
            best = n;
            best_idx = idx;
        }
        seen++;
    }
    return best;
}

static uint32_t decode_victim(void *priv, int tier, kvt_usable_fn usable, void *ctx)
{
    struct decode *d = priv;
    uint32_t v = first_usable(d, tier, B_DEAD(d), usable, ctx);
    if (v == KVT_NONE)
        v = first_usable(d, tier, B_UNSCHED(d), usable, ctx);
    /* Furthest next use first: the group just computed, then backwards. */
    for (uint32_t k = 1; v == KVT_NONE && k <= d->S; k++)
        v = furthest_usable(d, tier, (d->P + d->S - k) % d->S, usable, ctx);
    return v;
}

static uint64_t decode_next_use(void *priv, uint32_t pg)
{
    struct decode *d = priv;
    const kvt_key *k = d->host.key_of(d->host.ctx, pg);
    uint32_t g, b = classify(d, k, &g);
    if (b == B_UNSCHED(d))
        return KVT_USE_UNKNOWN;
    if (b == B_DEAD(d))
        return KVT_USE_NEVER;
    return ((uint64_t)((g + d->S - d->P) % d->S) << 32) | k->index;
}

/* next_use() keeps the group distance in its high 32 bits. */
static uint64_t decode_group_of(void *priv, uint32_t pg)
{
    uint64_t nu = decode_next_use(priv, pg);
    return nu >= KVT_USE_UNKNOWN ? nu : nu >> 32;
}

static uint32_t decode_prefetch(void *priv, int from, kvt_usable_fn wanted, void *ctx,
                                uint32_t *out, uint32_t max)
{
    struct decode *d = priv;
    uint32_t n = 0;
    for (uint32_t k = 0; k < d->S && n < max; k++) {
        uint32_t s = SENT | ((d->P + k) % d->S);
        for (uint32_t pg = lk(d, from, s)[1]; pg != s && n < max; pg = lk(d, from, pg)[1])
            if (!wanted || wanted(ctx, pg))
                out[n++] = pg;
    }
    return n;
}

static uint64_t decode_working_set(void *priv)
{
    struct decode *d = priv;
    uint64_t n = 0;
    for (uint32_t g = 0; d->have && g < d->S; g++) {
        uint64_t len = d->maxidx[g];
        n += d->window && len > (uint64_t)d->window + d->sinks ? (uint64_t)d->window + d->sinks : len;
    }
    return n;
}

static uint64_t decode_use_at(void *priv, uint64_t ahead, uint64_t *group)
{
    struct decode *d = priv;
    for (uint32_t k = 0; d->have && k < d->S; k++) {
        uint32_t g = (d->P + k) % d->S;
        uint64_t len = d->maxidx[g], first = 0; /* index of the group's first read after the sinks */
        if (d->window && len > (uint64_t)d->window + d->sinks) {
            first = len - d->window;
            len = (uint64_t)d->window + d->sinks;
        }
        if (ahead < len) {
            uint64_t idx = ahead < d->sinks || !first ? ahead : first + (ahead - d->sinks);
            *group = k;
            return ((uint64_t)k << 32) | idx;
        }
        ahead -= len;
    }
    *group = KVT_USE_UNKNOWN;
    return KVT_USE_UNKNOWN;
}

/* ------------------------------------------------------------- position */

/* Re-files every candidate of every tier (the schedule changed). */
static int refile_all(struct decode *d, uint32_t old_nb, uint32_t *old_bkt)
{
    for (int t = 0; t < T; t++) {
        for (uint32_t b = 0; b < old_nb; b++) {
            uint32_t s = SENT | b;
            uint32_t n = old_bkt[((size_t)t * old_nb + b) * 2 + 1];
            while (n != s) {
                uint32_t next = d->link[((size_t)n * T + (size_t)t) * 2 + 1];
                uint32_t g;
                list_add_tail(d, t, classify(d, d->host.key_of(d->host.ctx, n), &g), n);
                n = next;
            }
        }
    }
    return 0;
}

static int build_id_map(struct decode *d, const kvt_schedule *s)
{
    uint32_t m = 16;
    while (m < 2 * s->n_ids)
        m <<= 1;
    d->id_map = calloc(m, sizeof(uint32_t));
    d->ids = malloc(s->n_ids * sizeof(uint64_t));
    if (!d->id_map || !d->ids)
        return -ENOMEM;
    d->id_mask = m - 1;
    memcpy(d->ids, s->ids, s->n_ids * sizeof(uint64_t));
    for (uint32_t i = 0; i < s->n_ids; i++) {
        uint32_t h = id_hash(s->ids[i]) & d->id_mask;
        while (d->id_map[h] && d->ids[d->id_map[h] - 1] != s->ids[i])
            h = (h + 1) & d->id_mask;
        if (!d->id_map[h])
            d->id_map[h] = i + 1; /* a repeated id keeps its first position */
    }
    return 0;
}

/* Highest index per group, from the candidates we hold. Pinned pages (the
 * tail) are not candidates: the window then starts one page early, which
 * keeps a page resident rather than calling a live page dead. */
static void scan_maxidx(struct decode *d)
{
    for (int t = 0; t < T; t++)
        for (uint32_t b = 0; b < d->S; b++) {
            uint32_t s = SENT | b;
            for (uint32_t n = lk(d, t, s)[1]; n != s; n = lk(d, t, n)[1]) {
                uint32_t idx = d->host.key_of(d->host.ctx, n)->index;
                if (idx + 1 > d->maxidx[b])
                    d->maxidx[b] = idx + 1;
            }
        }
}

static void decode_schedule(void *priv, const kvt_schedule *s)
{
    struct decode *d = priv;
    uint32_t old_nb = d->nb, *old_bkt = d->bkt;
    d->bkt = NULL;
    free(d->ids);
    free(d->id_map);
    free(d->maxidx);
    d->ids = NULL;
    d->id_map = NULL;
    d->have = false;
    /* Too many groups for 32-bit group numbers (see KVT_MAX_SCHEDULE_GROUPS):
     * run as if there were no schedule, as when out of memory. */
    bool fits = s->n_ids && s->n_layers && s->n_ids <= KVT_MAX_SCHEDULE_GROUPS / s->n_layers;
    d->S = fits ? (uint32_t)(s->n_ids * s->n_layers) : 0;
    d->order = s->order;
    d->n_ids = fits ? (uint32_t)s->n_ids : 0;
    d->n_layers = fits ? s->n_layers : 0;
    d->window = s->window_pages;
    d->sinks = s->sink_pages;
    d->P = 0;
    d->maxidx = fits ? calloc(d->S + 1, sizeof(uint32_t)) : NULL;
    if (!d->maxidx || build_id_map(d, s) < 0 || decode_alloc_buckets(d) < 0) {
        /* Out of memory: behave as LRU (everything unscheduled). */
        d->S = 0;
        free(d->bkt);
        decode_alloc_buckets(d);
    } else {
        d->have = true;
    }
    /* First pass files by group ignoring the window (maxidx unknown), then
     * the window is applied once maxidx is known. */
    refile_all(d, old_nb, old_bkt);
    free(old_bkt);
    if (d->have)
        scan_maxidx(d); /* pages made before the schedule: lengths, working set */
    if (d->have && d->window) {
        uint32_t *again = malloc((size_t)T * d->nb * 2 * sizeof(uint32_t));
        if (again) {
            memcpy(again, d->bkt, (size_t)T * d->nb * 2 * sizeof(uint32_t));
            list_init(d);
            refile_all(d, d->nb, again);
            free(again);
        }
    }
}

static void decode_advance(void *priv, uint64_t id, uint32_t layer)
{
    struct decode *d = priv;
    uint32_t s = seq_of(d, id), g = s == KVT_NONE ? KVT_NONE : group_of(d, s, layer);
    if (g != KVT_NONE)
        d->P = g;
}

/* A new page may push an older one of its group out of the window: that
 * one is re-filed as dead wherever it is a candidate. */
static void decode_page_new(void *priv, uint32_t pg, const kvt_key *key)
{
    struct decode *d = priv;
    uint32_t s = seq_of(d, key->id), g = s == KVT_NONE ? KVT_NONE : group_of(d, s, key->layer);
    if (g == KVT_NONE || key->index + 1 <= d->maxidx[g])
        return;
    uint32_t old = d->maxidx[g];
    d->maxidx[g] = key->index + 1;
    if (!d->window)
        return;
    for (uint64_t j = old > d->window ? old - d->window - 1 : 0;
         j + d->window + 1 <= d->maxidx[g] && j <= UINT32_MAX; j++) {
        if (j < d->sinks)
            continue;
        kvt_key k = { key->id, key->layer, (uint32_t)j };
        uint32_t v = d->host.find(d->host.ctx, &k);
        if (v == KVT_NONE || v == pg)
            continue;
        for (int t = 0; t < T; t++)
            if (lk(d, t, v)[0] != KVT_NONE) {
                list_del(d, t, v);
                list_add_tail(d, t, B_DEAD(d), v);
            }
    }
}

/* A page's candidacy ends with remove(); its number is forgotten by then. */
static void decode_page_gone(void *priv, uint32_t pg)
{
    (void)priv;
    (void)pg;
}

const struct kvt_policy_ops kvt_policy_decode_ops = {
    .name = "decode",
    .version = KVT_POLICY_OPS_VERSION,
    .create = decode_create,
    .destroy = decode_destroy,
    .reserve = decode_reserve,
    .insert = decode_insert,
    .remove = decode_remove,
    .access = decode_access,
    .victim = decode_victim,
    .schedule = decode_schedule,
    .advance = decode_advance,
    .page_new = decode_page_new,
    .page_gone = decode_page_gone,
    .next_use = decode_next_use,
    .group_of = decode_group_of,
    .prefetch = decode_prefetch,
    .working_set = decode_working_set,
    .use_at = decode_use_at,
};
