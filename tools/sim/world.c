/*
 * world.c — a trace checked and indexed once (its pages, which of them exist
 * before it starts, each id's pages, the future uses Belady needs), shared by
 * every policy's run.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sim/sim_priv.h"

static uint32_t id_hash(uint64_t id)
{
    id *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(id >> 32);
}

uint32_t sim_world_find(const struct sim_world *w, const kvt_key *k)
{
    for (uint32_t i = (uint32_t)kvt_key_hash(k) & w->tmask;; i = (i + 1) & w->tmask) {
        uint32_t v = w->tab[i];
        if (!v)
            return KVT_NONE;
        const kvt_key *o = &w->keys[v - 1];
        if (kvt_key_eq(o, k))
            return v - 1;
    }
}

uint32_t sim_world_id(const struct sim_world *w, uint64_t id)
{
    for (uint32_t i = id_hash(id) & w->id_mask;; i = (i + 1) & w->id_mask) {
        uint32_t v = w->id_tab[i];
        if (!v)
            return KVT_NONE;
        if (w->id_val[v - 1] == id)
            return v - 1;
    }
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t m = 64;
    while (m < n)
        m <<= 1;
    return m;
}

void sim_world_free(struct sim_world *w)
{
    if (!w)
        return;
    free(w->keys);
    free(w->pre);
    free(w->tab);
    free(w->rec_pg);
    free(w->acc_keys);
    free(w->id_val);
    free(w->id_head);
    free(w->id_tab);
    free(w->pg_next);
    free(w->sched_ids);
    free(w);
}

uint64_t sim_world_pages(const struct sim_world *w) { return w->np; }
uint64_t sim_world_max_group(const struct sim_world *w) { return w->max_group; }

/* Upper bounds (records that may name a page or an id) size the tables once. */
static int world_alloc(struct sim_world *w)
{
    const struct sim_trace *t = w->t;
    size_t named = 0;
    for (size_t i = 0; i < t->n; i++)
        named += t->rec[i].kind == SIM_ACCESS || t->rec[i].kind == SIM_NEW;
    if (named >= UINT32_MAX - 1)
        named = UINT32_MAX - 2; /* more pages than that is refused while indexing */
    size_t np = named ? named : 1;
    w->tmask = pow2_at_least(2 * (uint64_t)np) - 1;
    w->id_mask = pow2_at_least(2 * (uint64_t)np + 2 * t->n_ids) - 1;
    w->keys = malloc(np * sizeof(kvt_key));
    w->pre = calloc(np, 1);
    w->pg_next = malloc(np * sizeof(uint32_t));
    w->tab = calloc((size_t)w->tmask + 1, sizeof(uint32_t));
    w->id_tab = calloc((size_t)w->id_mask + 1, sizeof(uint32_t));
    w->id_val = malloc((np + t->n_ids) * sizeof(uint64_t));
    w->id_head = malloc((np + t->n_ids) * sizeof(uint32_t));
    w->rec_pg = malloc((t->n ? t->n : 1) * sizeof(uint32_t));
    w->acc_keys = malloc((t->accesses ? t->accesses : 1) * sizeof(kvt_key));
    w->sched_ids = malloc((t->n_ids ? t->n_ids : 1) * sizeof(uint64_t));
    if (!w->keys || !w->pre || !w->pg_next || !w->tab || !w->id_tab || !w->id_val ||
        !w->id_head || !w->rec_pg || !w->acc_keys || !w->sched_ids)
        return -ENOMEM;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The page of k, numbered now if new. */
static uint32_t world_add(struct sim_world *w, const kvt_key *k, bool *fresh)
{
    uint32_t i = (uint32_t)kvt_key_hash(k) & w->tmask;
    for (uint32_t v; (v = w->tab[i]); i = (i + 1) & w->tmask) {
        const kvt_key *o = &w->keys[v - 1];
        if (kvt_key_eq(o, k)) {
            *fresh = false;
            return v - 1;
        }
    }
    uint32_t pg = w->np++;
    w->keys[pg] = *k;
    w->tab[i] = pg + 1;
    /* Chain it to its id. */
    uint32_t s = id_hash(k->id) & w->id_mask;
    while (w->id_tab[s] && w->id_val[w->id_tab[s] - 1] != k->id)
        s = (s + 1) & w->id_mask;
    if (!w->id_tab[s]) {
        w->id_val[w->n_idv] = k->id;
        w->id_head[w->n_idv] = KVT_NONE;
        w->id_tab[s] = ++w->n_idv;
    }
    uint32_t slot = w->id_tab[s] - 1;
    w->pg_next[pg] = w->id_head[slot];
    w->id_head[slot] = pg;
    *fresh = true;
    return pg;
}

/* What the checks keep while walking the records once. */
struct wcheck {
    uint8_t *alive;       /* [np] */
    uint64_t *group_mark; /* [np] the group that last counted the page */
    uint64_t *dropped;    /* ids dropped: their unseen pages need a new record */
    size_t n_dropped, cap_dropped;
    uint64_t group, group_pages;
};

static bool is_dropped(const struct wcheck *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_dropped; i++)
        if (c->dropped[i] == id)
            return true;
    return false;
}

static int wc_access(struct sim_world *w, struct wcheck *c, const struct sim_rec *r, size_t i,
                     char *err, size_t errlen)
{
    kvt_key k = { r->id, r->layer, r->index };
    bool fresh;
    uint32_t pg = world_add(w, &k, &fresh);
    if (r->kind == SIM_ACCESS) {
        if (fresh && is_dropped(c, r->id))
            return sim_seterr(err, errlen, "line %u: access to a page of sequence %llu, which was "
                          "dropped (a new record must create it first)",
                          r->line, (unsigned long long)r->id);
        if (!fresh && !c->alive[pg])
            return sim_seterr(err, errlen, "line %u: access to page %llu %u %u after its sequence "
                          "was dropped", r->line, (unsigned long long)r->id, r->layer, r->index);
        if (fresh)
            w->pre[pg] = 1;
    } else {
        /* The id stays on the dropped list: a page of it that was never
         * seen cannot have existed before the trace (the drop would have
         * removed it), so only a new record can make it. */
        if (!fresh && c->alive[pg])
            return sim_seterr(err, errlen, "line %u: new %llu %u %u: the page exists already",
                          r->line, (unsigned long long)r->id, r->layer, r->index);
    }
    c->alive[pg] = 1;
    w->rec_pg[i] = pg;
    if (c->group && c->group_mark[pg] != c->group) {
        c->group_mark[pg] = c->group;
        if (++c->group_pages > w->max_group)
            w->max_group = c->group_pages;
    }
    return 0;
}

static int wc_drop(struct sim_world *w, struct wcheck *c, uint64_t id)
{
    uint32_t s = sim_world_id(w, id);
    for (uint32_t pg = s == KVT_NONE ? KVT_NONE : w->id_head[s]; pg != KVT_NONE; pg = w->pg_next[pg])
        c->alive[pg] = 0;
    if (is_dropped(c, id))
        return 0;
    if (c->n_dropped == c->cap_dropped) {
        size_t nc = c->cap_dropped ? c->cap_dropped * 2 : 16;
        uint64_t *nd = realloc(c->dropped, nc * sizeof(uint64_t));
        if (!nd)
            return -ENOMEM;
        c->dropped = nd;
        c->cap_dropped = nc;
    }
    c->dropped[c->n_dropped++] = id;
    return 0;
}

static int wc_advance(const struct sim_world *w, const struct sim_rec *r, char *err, size_t errlen)
{
    const struct sim_trace *t = w->t;
    if (!t->has_schedule)
        return 0;
    if (!bsearch(&r->id, w->sched_ids, t->n_ids, sizeof(uint64_t), cmp_u64))
        return sim_seterr(err, errlen, "line %u: advance to sequence %llu, which the schedule does "
                      "not list", r->line, (unsigned long long)r->id);
    if (r->layer >= t->layers && r->layer != KVT_ALL_LAYERS)
        return sim_seterr(err, errlen, "line %u: advance to layer %u, but the schedule has %u layers",
                      r->line, r->layer, t->layers);
    return 0;
}

static int world_walk(struct sim_world *w, char *err, size_t errlen)
{
    const struct sim_trace *t = w->t;
    size_t np = t->n ? t->n : 1;
    struct wcheck c = { .alive = calloc(np, 1), .group_mark = calloc(np, sizeof(uint64_t)) };
    int e = c.alive && c.group_mark ? 0 : -ENOMEM;
    uint64_t groups = 0, acc = 0;
    for (size_t i = 0; !e && i < t->n; i++) {
        const struct sim_rec *r = &t->rec[i];
        w->rec_pg[i] = KVT_NONE;
        switch (r->kind) {
        case SIM_ACCESS:
        case SIM_NEW:
            if (w->np >= UINT32_MAX - 2) {
                e = sim_seterr(err, errlen, "line %u: more than 2^32 - 2 pages", r->line);
                break;
            }
            if (!(e = wc_access(w, &c, r, i, err, errlen)) && r->kind == SIM_ACCESS)
                w->acc_keys[acc++] = (kvt_key){ r->id, r->layer, r->index };
            break;
        case SIM_ADVANCE:
            e = wc_advance(w, r, err, errlen);
            c.group = ++groups;
            c.group_pages = 0;
            break;
        case SIM_DROP:
            e = wc_drop(w, &c, r->id);
            c.group = 0;
            break;
        default:
            c.group = 0;
            break;
        }
    }
    if (e == -ENOMEM)
        sim_seterr(err, errlen, "out of memory");
    free(c.alive);
    free(c.group_mark);
    free(c.dropped);
    return e;
}

int sim_world_build(const struct sim_trace *t, struct sim_world **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sim_world *w = calloc(1, sizeof(*w));
    if (!w) {
        sim_seterr(err, errlen, "out of memory");
        return -ENOMEM;
    }
    w->t = t;
    int e = world_alloc(w);
    if (e) {
        sim_seterr(err, errlen, "out of memory");
    } else {
        if (t->n_ids)
            memcpy(w->sched_ids, t->ids, t->n_ids * sizeof(uint64_t));
        qsort(w->sched_ids, t->n_ids, sizeof(uint64_t), cmp_u64);
        e = world_walk(w, err, errlen);
    }
    if (e) {
        sim_world_free(w);
        return e;
    }
    *out = w;
    return 0;
}
