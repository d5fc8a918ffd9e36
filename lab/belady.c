/*
 * belady.c — Belady's MIN: evict the candidate used furthest in the future.
 *
 * The trace is loaded once (kvt_belady_load): each use gets the key's number
 * and the position of the same key's next use, so "when is page p used next"
 * is one array read, knext[key of p]. Positions are absolute: when the run
 * passes a use, only that key's next use changes; every other candidate keeps
 * its value. That is why a binary heap per tier works: one O(log n) fix per
 * passed use, none for the pages not touched, and the furthest candidate is
 * the root. (A decode trace of llama3-8b, batch 4, 8k context has a million
 * uses in 16 steps, so nothing here scans the candidates or the trace per
 * call.)
 *
 * Ties (pages never used again, or no trace loaded at all) go to the least
 * recently used, by a stamp per page.
 *
 * victim() with a usable() filter walks the heap best-first with a small
 * side heap of heap indices: O(k log k) for k candidates skipped, without
 * disturbing the heap.
 *
 * Memory: 24 bytes per page number plus 4 per page and tier in the heaps;
 * 8 per use of the trace and 32 per distinct key.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lab/belady.h"

#define T KVT_POLICY_TIERS
#define NEVER UINT32_MAX /* no next use (positions are below 2^32 - 1) */

struct bpage {
    uint64_t stamp;    /* last insert or access: older leaves first on ties */
    uint32_t key;      /* key number in the trace, KVT_NONE when not in it */
    uint32_t hpos[T];  /* index in each tier's heap, KVT_NONE when not a candidate */
};

struct belady {
    uint64_t *meta;
    struct kvt_policy_host host;
    uint32_t cap;
    struct bpage *pg;
    uint32_t *heaps;   /* tier t's heap is heaps[t * cap .. t * cap + hn[t]) */
    uint32_t hn[T];
    uint64_t clock;
    uint32_t *side;    /* victim()'s best-first walk */
    uint32_t side_cap;

    /* The trace. */
    bool loaded;
    uint32_t n, pos;   /* uses, and the next one not yet passed */
    uint32_t *acc;     /* [n] key number of each use */
    uint32_t *nxt;     /* [n] position of the same key's next use, NEVER */
    uint32_t nkeys, kcap;
    kvt_key *kkey;     /* [kcap], the first nkeys used */
    uint32_t *knext;   /* [nkeys] next use at or after pos, NEVER */
    uint32_t *kpage;   /* [nkeys] the page holding the key, KVT_NONE */
    uint32_t *tab;     /* open addressing: key number + 1, 0 = empty */
    uint32_t tmask;
};

#define HEAP(b, t) ((b)->heaps + (size_t)(t) * (b)->cap)

/* ------------------------------------------------------------- keys */

/* The key number of k in the trace, or KVT_NONE. */
static uint32_t key_find(const struct belady *b, const kvt_key *k)
{
    if (!b->loaded || !k || !b->nkeys)
        return KVT_NONE;
    for (uint32_t i = (uint32_t)kvt_key_hash(k) & b->tmask;; i = (i + 1) & b->tmask) {
        uint32_t v = b->tab[i];
        if (!v)
            return KVT_NONE;
        if (kvt_key_eq(&b->kkey[v - 1], k))
            return v - 1;
    }
}

/* When pg is used next, as an absolute position (NEVER for none). */
static uint32_t next_of(const struct belady *b, uint32_t pg)
{
    uint32_t k = b->pg[pg].key;
    return k == KVT_NONE ? NEVER : b->knext[k];
}

/* Whether x should leave before y: later next use, then less recent. */
static bool leaves_first(const struct belady *b, uint32_t x, uint32_t y)
{
    uint32_t nx = next_of(b, x), ny = next_of(b, y);
    if (nx != ny)
        return nx > ny;
    return b->pg[x].stamp < b->pg[y].stamp;
}

/* ------------------------------------------------------------- heaps */

static void hset(struct belady *b, int t, uint32_t i, uint32_t pg)
{
    HEAP(b, t)[i] = pg;
    b->pg[pg].hpos[t] = i;
}

static void sift_up(struct belady *b, int t, uint32_t i)
{
    uint32_t *h = HEAP(b, t), pg = h[i];
    while (i > 0) {
        uint32_t up = (i - 1) / 2;
        if (!leaves_first(b, pg, h[up]))
            break;
        hset(b, t, i, h[up]);
        i = up;
    }
    hset(b, t, i, pg);
}

static void sift_down(struct belady *b, int t, uint32_t i)
{
    uint32_t *h = HEAP(b, t), pg = h[i], n = b->hn[t];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && leaves_first(b, h[c + 1], h[c]))
            c++;
        if (!leaves_first(b, h[c], pg))
            break;
        hset(b, t, i, h[c]);
        i = c;
    }
    hset(b, t, i, pg);
}

/* pg's priority changed: restore the heap property around it, every tier. */
static void fix(struct belady *b, uint32_t pg)
{
    for (int t = 0; t < T; t++) {
        uint32_t i = b->pg[pg].hpos[t];
        if (i == KVT_NONE)
            continue;
        sift_up(b, t, i);
        sift_down(b, t, b->pg[pg].hpos[t]);
    }
}

static void heapify(struct belady *b, int t)
{
    for (uint32_t i = b->hn[t] / 2; i-- > 0;)
        sift_down(b, t, i);
}

/* ------------------------------------------------------------- trace position */

/* Passes every use up to and including position last: each passed key's next
 * use moves on, and its page (if a candidate) is re-placed. */
static void pass_to(struct belady *b, uint32_t last, uint32_t self)
{
    for (; b->pos <= last && b->pos < b->n; b->pos++) {
        uint32_t k = b->acc[b->pos];
        b->knext[k] = b->nxt[b->pos];
        uint32_t other = b->kpage[k];
        if (other != KVT_NONE && other != self)
            fix(b, other);
    }
}

/* pg was used: the trace moves past this use of it (re-synchronising to
 * pg's next use when the run and the trace disagree). */
static void use(struct belady *b, uint32_t pg)
{
    uint32_t k = b->pg[pg].key;
    if (k == KVT_NONE || b->knext[k] == NEVER)
        return;
    pass_to(b, b->knext[k], pg);
}

/* Records that pg holds key (from insert or page_new). */
static void bind(struct belady *b, uint32_t pg, const kvt_key *key)
{
    uint32_t k = key_find(b, key);
    b->pg[pg].key = k;
    if (k != KVT_NONE)
        b->kpage[k] = pg;
}

/* ------------------------------------------------------------- lifecycle */

static void trace_free(struct belady *b)
{
    size_t n = b->n ? b->n : 1, nk = b->nkeys ? b->nkeys : 1;
    if (!b->loaded)
        return;
    kvt_meta_free(b->meta, b->acc, n * sizeof(uint32_t));
    kvt_meta_free(b->meta, b->nxt, n * sizeof(uint32_t));
    kvt_meta_free(b->meta, b->kkey, (size_t)b->kcap * sizeof(kvt_key));
    kvt_meta_free(b->meta, b->knext, nk * sizeof(uint32_t));
    kvt_meta_free(b->meta, b->kpage, nk * sizeof(uint32_t));
    kvt_meta_free(b->meta, b->tab, ((size_t)b->tmask + 1) * sizeof(uint32_t));
    b->acc = b->nxt = b->knext = b->kpage = b->tab = NULL;
    b->kkey = NULL;
    b->n = b->nkeys = b->kcap = b->pos = b->tmask = 0;
    b->loaded = false;
}

static void belady_destroy(void *priv)
{
    struct belady *b = priv;
    trace_free(b);
    kvt_meta_free(b->meta, b->pg, (size_t)b->cap * sizeof(struct bpage));
    kvt_meta_free(b->meta, b->heaps, (size_t)b->cap * T * sizeof(uint32_t));
    free(b->side);
    free(b);
}

/* Both arrays are made anew and copied, so that a failure leaves the old
 * ones (and the metadata counter) exactly as they were. */
static int belady_reserve(void *priv, uint32_t cap)
{
    struct belady *b = priv;
    if (cap <= b->cap)
        return 0;
    struct bpage *np = kvt_meta_alloc(b->meta, (size_t)cap * sizeof(struct bpage));
    uint32_t *nh = kvt_meta_alloc(b->meta, (size_t)cap * T * sizeof(uint32_t));
    if (!np || !nh) {
        kvt_meta_free(b->meta, np, (size_t)cap * sizeof(struct bpage));
        kvt_meta_free(b->meta, nh, (size_t)cap * T * sizeof(uint32_t));
        return -ENOMEM;
    }
    if (b->cap)
        memcpy(np, b->pg, (size_t)b->cap * sizeof(struct bpage));
    for (uint32_t i = b->cap; i < cap; i++) {
        np[i].key = KVT_NONE;
        for (int t = 0; t < T; t++)
            np[i].hpos[t] = KVT_NONE;
    }
    for (int t = 0; t < T; t++)
        if (b->hn[t])
            memcpy(nh + (size_t)t * cap, HEAP(b, t), b->hn[t] * sizeof(uint32_t));
    kvt_meta_free(b->meta, b->pg, (size_t)b->cap * sizeof(struct bpage));
    kvt_meta_free(b->meta, b->heaps, (size_t)b->cap * T * sizeof(uint32_t));
    b->pg = np;
    b->heaps = nh;
    b->cap = cap;
    return 0;
}

static int belady_create(const struct kvt_policy_params *pp, void **priv)
{
    struct belady *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    b->meta = pp->meta;
    b->host = pp->host;
    if (belady_reserve(b, pp->page_cap ? pp->page_cap : 1) < 0) {
        belady_destroy(b);
        return -ENOMEM;
    }
    *priv = b;
    return 0;
}

/* ------------------------------------------------------------- load */

/* The new trace being built, swapped in only when complete. */
struct build {
    uint64_t *meta;
    uint32_t n, nkeys, kcap, tmask;
    uint32_t *acc, *nxt, *tab, *knext, *kpage;
    kvt_key *kkey;
};

/* Sizes as build_trace allocates them: at least one element each. */
static void build_free(struct build *w)
{
    size_t n = w->n ? w->n : 1, nk = w->nkeys ? w->nkeys : 1;
    kvt_meta_free(w->meta, w->acc, n * sizeof(uint32_t));
    kvt_meta_free(w->meta, w->nxt, n * sizeof(uint32_t));
    kvt_meta_free(w->meta, w->tab, ((size_t)w->tmask + 1) * sizeof(uint32_t));
    kvt_meta_free(w->meta, w->kkey, (size_t)w->kcap * sizeof(kvt_key));
    kvt_meta_free(w->meta, w->knext, nk * sizeof(uint32_t));
    kvt_meta_free(w->meta, w->kpage, nk * sizeof(uint32_t));
}

/* Doubles the hash table and re-places every key. */
static int build_grow_table(struct build *w)
{
    uint32_t size = (w->tmask + 1) * 2;
    uint32_t *t = kvt_meta_alloc(w->meta, (size_t)size * sizeof(uint32_t));
    if (!t)
        return -ENOMEM;
    for (uint32_t k = 0; k < w->nkeys; k++) {
        uint32_t i = (uint32_t)kvt_key_hash(&w->kkey[k]) & (size - 1);
        while (t[i])
            i = (i + 1) & (size - 1);
        t[i] = k + 1;
    }
    kvt_meta_free(w->meta, w->tab, ((size_t)w->tmask + 1) * sizeof(uint32_t));
    w->tab = t;
    w->tmask = size - 1;
    return 0;
}

/* The key number of k, adding it when new; KVT_NONE when out of memory. */
static uint32_t build_key(struct build *w, const kvt_key *k)
{
    uint32_t i = (uint32_t)kvt_key_hash(k) & w->tmask;
    for (; w->tab[i]; i = (i + 1) & w->tmask)
        if (kvt_key_eq(&w->kkey[w->tab[i] - 1], k))
            return w->tab[i] - 1;
    if (w->nkeys == w->kcap) {
        uint32_t nc = w->kcap ? w->kcap * 2 : 64;
        kvt_key *nk = kvt_meta_realloc(w->meta, w->kkey, (size_t)w->kcap * sizeof(kvt_key),
                                       (size_t)nc * sizeof(kvt_key));
        if (!nk)
            return KVT_NONE;
        w->kkey = nk;
        w->kcap = nc;
    }
    w->kkey[w->nkeys] = *k;
    w->tab[i] = ++w->nkeys;
    if (2 * (uint64_t)w->nkeys > w->tmask && build_grow_table(w) < 0)
        return KVT_NONE; /* the key is in; the caller fails the load anyway */
    return w->nkeys - 1;
}

static int build_trace(struct build *w, const kvt_key *accesses, size_t n)
{
    w->n = (uint32_t)n;
    w->acc = kvt_meta_alloc(w->meta, (n ? n : 1) * sizeof(uint32_t));
    w->nxt = kvt_meta_alloc(w->meta, (n ? n : 1) * sizeof(uint32_t));
    w->tab = kvt_meta_alloc(w->meta, 64 * sizeof(uint32_t));
    w->tmask = 63;
    if (!w->acc || !w->nxt || !w->tab)
        return -ENOMEM;
    for (uint32_t p = 0; p < w->n; p++)
        if ((w->acc[p] = build_key(w, &accesses[p])) == KVT_NONE)
            return -ENOMEM;
    size_t nk = w->nkeys ? w->nkeys : 1;
    w->knext = kvt_meta_alloc(w->meta, nk * sizeof(uint32_t));
    w->kpage = kvt_meta_alloc(w->meta, nk * sizeof(uint32_t));
    if (!w->knext || !w->kpage)
        return -ENOMEM;
    /* Backwards, knext holds "the nearest use seen so far": at the end, each
     * key's first use. */
    memset(w->knext, 0xff, nk * sizeof(uint32_t));
    memset(w->kpage, 0xff, nk * sizeof(uint32_t));
    for (uint32_t p = w->n; p-- > 0;) {
        w->nxt[p] = w->knext[w->acc[p]];
        w->knext[w->acc[p]] = p;
    }
    return 0;
}

int kvt_belady_load(void *priv, const kvt_key *accesses, size_t n)
{
    struct belady *b = priv;
    if (n >= NEVER)
        return -EOVERFLOW;
    struct build w = { .meta = b->meta };
    int r = build_trace(&w, accesses, n);
    if (r < 0) {
        build_free(&w);
        return r;
    }
    trace_free(b);
    b->loaded = true;
    b->n = w.n;
    b->pos = 0;
    b->acc = w.acc;
    b->nxt = w.nxt;
    b->nkeys = w.nkeys;
    b->kcap = w.kcap;
    b->kkey = w.kkey;
    b->knext = w.knext;
    b->kpage = w.kpage;
    b->tab = w.tab;
    b->tmask = w.tmask;
    /* Candidates already held: their keys, then their order, anew. */
    for (uint32_t pg = 0; pg < b->cap; pg++)
        b->pg[pg].key = KVT_NONE;
    for (int t = 0; t < T; t++)
        for (uint32_t i = 0; i < b->hn[t]; i++) {
            uint32_t pg = HEAP(b, t)[i];
            if (b->host.key_of)
                bind(b, pg, b->host.key_of(b->host.ctx, pg));
        }
    for (int t = 0; t < T; t++)
        heapify(b, t);
    return 0;
}

/* ------------------------------------------------------------- candidates */

static void belady_insert(void *priv, int tier, uint32_t pg, const kvt_key *key)
{
    struct belady *b = priv;
    bind(b, pg, key);
    b->pg[pg].stamp = ++b->clock;
    fix(b, pg); /* other tiers: the key, hence the priority, may be new */
    hset(b, tier, b->hn[tier]++, pg);
    sift_up(b, tier, b->hn[tier] - 1);
}

static void belady_remove(void *priv, int tier, uint32_t pg)
{
    struct belady *b = priv;
    uint32_t i = b->pg[pg].hpos[tier], last = HEAP(b, tier)[--b->hn[tier]];
    b->pg[pg].hpos[tier] = KVT_NONE;
    if (last == pg)
        return;
    hset(b, tier, i, last);
    sift_up(b, tier, i);
    sift_down(b, tier, b->pg[last].hpos[tier]);
}

static void belady_access(void *priv, int tier, uint32_t pg)
{
    struct belady *b = priv;
    b->pg[pg].stamp = ++b->clock;
    if (tier == KVT_TIER_HBM)
        use(b, pg);
    fix(b, pg);
}

/* Side heap of heap indices for the best-first walk. */
static bool side_push(struct belady *b, uint32_t *n, uint32_t idx, int t)
{
    if (*n == b->side_cap) {
        uint32_t nc = b->side_cap ? b->side_cap * 2 : 64;
        uint32_t *ns = realloc(b->side, (size_t)nc * sizeof(uint32_t));
        if (!ns)
            return false;
        b->side = ns;
        b->side_cap = nc;
    }
    const uint32_t *h = HEAP(b, t);
    uint32_t i = (*n)++;
    while (i > 0 && leaves_first(b, h[idx], h[b->side[(i - 1) / 2]])) {
        b->side[i] = b->side[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    b->side[i] = idx;
    return true;
}

static uint32_t side_pop(struct belady *b, uint32_t *n, int t)
{
    const uint32_t *h = HEAP(b, t);
    uint32_t top = b->side[0], last = b->side[--*n], i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && leaves_first(b, h[b->side[c + 1]], h[b->side[c]]))
            c++;
        if (!leaves_first(b, h[b->side[c]], h[last]))
            break;
        b->side[i] = b->side[c];
        i = c;
    }
    if (*n)
        b->side[i] = last;
    return top;
}

/* Out of memory for the walk: the best usable candidate by a plain scan. */
static uint32_t victim_scan(struct belady *b, int t, kvt_usable_fn usable, void *ctx)
{
    uint32_t best = KVT_NONE;
    for (uint32_t i = 0; i < b->hn[t]; i++) {
        uint32_t pg = HEAP(b, t)[i];
        if ((best == KVT_NONE || leaves_first(b, pg, best)) && usable(ctx, pg))
            best = pg;
    }
    return best;
}

static uint32_t belady_victim(void *priv, int tier, kvt_usable_fn usable, void *ctx)
{
    struct belady *b = priv;
    const uint32_t *h = HEAP(b, tier);
    if (b->hn[tier] == 0)
        return KVT_NONE;
    if (!usable || usable(ctx, h[0]))
        return h[0];
    /* The heap's nodes in priority order: a node's children come after it. */
    uint32_t n = 0;
    for (uint32_t c = 1; c <= 2; c++)
        if (c < b->hn[tier] && !side_push(b, &n, c, tier))
            return victim_scan(b, tier, usable, ctx);
    while (n) {
        uint32_t i = side_pop(b, &n, tier);
        if (usable(ctx, h[i]))
            return h[i];
        for (uint32_t c = 2 * i + 1; c <= 2 * i + 2; c++)
            if (c < b->hn[tier] && !side_push(b, &n, c, tier))
                return victim_scan(b, tier, usable, ctx);
    }
    return KVT_NONE;
}

/* ------------------------------------------------------------- lifecycle of pages */

static void belady_page_new(void *priv, uint32_t pg, const kvt_key *key)
{
    bind(priv, pg, key);
}

static void belady_page_gone(void *priv, uint32_t pg)
{
    struct belady *b = priv;
    uint32_t k = b->pg[pg].key;
    if (k != KVT_NONE && b->kpage[k] == pg)
        b->kpage[k] = KVT_NONE;
    b->pg[pg].key = KVT_NONE;
}

/* In uses from the current position: 0 = the next use in the trace. */
static uint64_t belady_next_use(void *priv, uint32_t pg)
{
    struct belady *b = priv;
    if (!b->loaded)
        return KVT_USE_UNKNOWN;
    uint32_t nx = next_of(b, pg);
    return nx == NEVER ? KVT_USE_NEVER : (uint64_t)(nx - b->pos);
}

/* The trace is the whole future: no decode position, no groups, and no
 * prefetch (the simulator models demand paging against it). */
static void belady_schedule(void *priv, const kvt_schedule *s)
{
    (void)priv;
    (void)s;
}

static void belady_advance(void *priv, uint64_t id, uint32_t layer)
{
    (void)priv;
    (void)id;
    (void)layer;
}

static uint64_t belady_group_of(void *priv, uint32_t pg)
{
    (void)priv;
    (void)pg;
    return KVT_USE_UNKNOWN;
}

static uint32_t belady_prefetch(void *priv, int from, kvt_usable_fn wanted, void *ctx,
                                uint32_t *out, uint32_t max)
{
    (void)priv, (void)from, (void)wanted, (void)ctx, (void)out, (void)max;
    return 0;
}

static uint64_t belady_working_set(void *priv)
{
    (void)priv;
    return 0;
}

static uint64_t belady_use_at(void *priv, uint64_t ahead, uint64_t *group)
{
    (void)priv;
    (void)ahead;
    *group = KVT_USE_UNKNOWN;
    return KVT_USE_UNKNOWN;
}

const struct kvt_policy_ops kvt_policy_belady_ops = {
    .name = "belady",
    .version = KVT_POLICY_OPS_VERSION,
    .create = belady_create,
    .destroy = belady_destroy,
    .reserve = belady_reserve,
    .insert = belady_insert,
    .remove = belady_remove,
    .access = belady_access,
    .victim = belady_victim,
    .schedule = belady_schedule,
    .advance = belady_advance,
    .page_new = belady_page_new,
    .page_gone = belady_page_gone,
    .next_use = belady_next_use,
    .group_of = belady_group_of,
    .prefetch = belady_prefetch,
    .working_set = belady_working_set,
    .use_at = belady_use_at,
};
