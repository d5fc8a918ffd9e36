/*
 * prefix_duel.c — shadow caches that choose how the prefix policy ranks.
 * See prefix_duel.h for why this works; here, how.
 *
 * Each shadow is a cache of the engine's size (or of a sample of its keys,
 * scaled down alike) ranked as the prefix policy ranks, last use +
 * T·ln(odds), with its own candidate: T of 0 (LRU order, classes ignored),
 * 4, 16 or 64 times the engine's blocks (in the policy's clock, which ticks
 * about twice per block used: about 2, 8 and 32 turnovers of the cache),
 * each with the classes "used by 2 or 3 requests" and "by 4 or more" ranked
 * as one (their reuse odds pooled) or apart. A shadow scores the blocks it
 * held when they were used (a hit fraction: the prefix hits would need each
 * request's calls told apart, which the policy cannot do when a get finds
 * nothing and sends no batch, or when requests interleave; in these shadows
 * a block held is nearly always in the prefix held, docs/sim.md#the-duel).
 * Scores fade by half every DUEL_MEMORY turnovers of a shadow (counted in
 * blocks looked up), so the duel follows a workload that changes, and the
 * candidate with the most is ahead; ties keep the one ahead where it is.
 * Before any evidence it is T = 16 with the classes pooled, the policy's
 * fixed ranking before the duel.
 *
 * Sampling: a key is in the shadows when a hash of it falls below
 * DUEL_MAX_BLOCKS / slots, and each shadow then holds that fraction of the
 * engine's blocks (SHARDS: a spatial sample of a cache behaves as the whole
 * one does, scaled). Up to DUEL_MAX_BLOCKS slots the shadows are exact.
 * The clock is the policy's, over every block, so T stays in the whole
 * engine's blocks either way.
 *
 * Why the memory is long (32 turnovers): a switch costs a turnover of hits
 * while the cache's contents move to the new ranking, and candidates differ
 * by a few tenths of a point, so a short memory switched on noise
 * (docs/sim.md#the-duel has the sweep).
 *
 * Cost: per shadow block 40 bytes plus 8 to 16 of hash table; DUEL_N shadows
 * of at most DUEL_MAX_BLOCKS blocks (about 2.7 MiB). A use is O(1) per shadow,
 * plus an eviction's scan of the class tails.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "policy/prefix_duel.h"

#define DUEL_N 7
#define DUEL_START 2                     /* cands[DUEL_START] before any evidence */
#define DUEL_MAX_BLOCKS 8192u
#define DUEL_MEMORY 32                   /* turnovers of a shadow between halvings */
#define DUEL_CLASSES 8
#define SAMPLE_ONE ((uint64_t)1 << 24)   /* the sample rate's unit */

static const struct cand {
    double scale;                        /* T in multiples of the engine's blocks */
    int split;                           /* the row of lnodds: 0 pooled, 1 apart */
} cands[DUEL_N] = {
    { 0, 0 }, { 4, 0 }, { 16, 0 }, { 64, 0 }, { 4, 1 }, { 16, 1 }, { 64, 1 },
};

struct sentry {
    kvt_key key;
    uint64_t last;
    uint32_t prev, next;
    uint8_t cls;
};

struct shadow {
    double T;                            /* in blocks of the whole engine */
    int split;
    double score;                        /* fading */
    uint64_t hits;                       /* block hits ever (tests) */
    uint32_t cap, n;
    struct sentry *e;
    uint32_t *tab;                       /* entry + 1, 0 = empty; linear probing */
    uint32_t mask;
    uint32_t head[DUEL_CLASSES], tail[DUEL_CLASSES];
};

struct kvt_duel {
    uint64_t *meta;
    int classes;
    uint64_t sample;                     /* of SAMPLE_ONE */
    uint64_t looks, period;
    int lead;
    struct shadow s[DUEL_N];
};

/* ------------------------------------------------------------- lists */

static void push_head(struct shadow *s, uint32_t x)
{
    struct sentry *e = &s->e[x];
    uint32_t *h = &s->head[e->cls], *t = &s->tail[e->cls];
    e->prev = KVT_NONE;
    e->next = *h;
    if (*h != KVT_NONE)
        s->e[*h].prev = x;
    else
        *t = x;
    *h = x;
}

static void unlink_entry(struct shadow *s, uint32_t x)
{
    struct sentry *e = &s->e[x];
    if (e->prev != KVT_NONE)
        s->e[e->prev].next = e->next;
    else
        s->head[e->cls] = e->next;
    if (e->next != KVT_NONE)
        s->e[e->next].prev = e->prev;
    else
        s->tail[e->cls] = e->prev;
}

/* ------------------------------------------------------------- table */

/* The table slot holding k, or the empty one where it would go. */
static uint32_t tab_find(const struct shadow *s, const kvt_key *k, uint64_t h)
{
    uint32_t i = (uint32_t)h & s->mask;
    while (s->tab[i] && !kvt_key_eq(&s->e[s->tab[i] - 1].key, k))
        i = (i + 1) & s->mask;
    return i;
}

/* Empties table slot i, moving back the entries after it that probed past
 * it, so every key stays reachable from its home slot. */
static void tab_del(struct shadow *s, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        if (!s->tab[j])
            break;
        uint32_t home = (uint32_t)kvt_key_hash(&s->e[s->tab[j] - 1].key) & s->mask;
        /* The entry at j stays when its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            s->tab[i] = s->tab[j];
            i = j;
        }
    }
    s->tab[i] = 0;
}

/* ------------------------------------------------------------- a shadow */

/* The shadow's block that leaves first: each class's least recently used,
 * its last use shifted by T·ln(odds), the smallest (prefix.c, score). As
 * in the engine, the blocks of the call being served stay (their last use
 * is now) unless the call alone fills the shadow. */
static uint32_t shadow_victim(const struct shadow *s, int classes, uint64_t now,
                              const double *lnodds)
{
    uint32_t best = KVT_NONE;
    double best_score = 0;
    for (int pass = 0; pass < 2 && best == KVT_NONE; pass++)
        for (int c = 0; c < classes; c++) {
            uint32_t x = s->tail[c];
            if (x == KVT_NONE || (pass == 0 && s->e[x].last == now))
                continue;
            double sc = (double)s->e[x].last + s->T * lnodds[c];
            if (best == KVT_NONE || sc < best_score) {
                best = x;
                best_score = sc;
            }
        }
    return best;
}

static void shadow_use(struct shadow *s, int classes, const kvt_key *k, uint64_t h, int cls,
                       uint64_t now, const double *lnodds)
{
    uint32_t i = tab_find(s, k, h), x;
    if (s->tab[i]) {
        x = s->tab[i] - 1;
        s->hits++;
        unlink_entry(s, x);
    } else {
        if (s->n < s->cap) {
            x = s->n++;
        } else {
            x = shadow_victim(s, classes, now, lnodds);
            unlink_entry(s, x);
            const kvt_key *vk = &s->e[x].key;
            tab_del(s, tab_find(s, vk, kvt_key_hash(vk)));
            i = tab_find(s, k, h); /* the deletion may have moved the empty slot */
        }
        s->tab[i] = x + 1;
        s->e[x].key = *k;
    }
    s->e[x].last = now;
    s->e[x].cls = (uint8_t)cls;
    push_head(s, x);
}

static int shadow_alloc(struct kvt_duel *d, struct shadow *s, uint32_t cap, double T, int split)
{
    uint32_t tc = 16;
    while (tc < 2 * cap)
        tc <<= 1;
    *s = (struct shadow){ .T = T, .split = split, .cap = cap, .mask = tc - 1 };
    for (int c = 0; c < DUEL_CLASSES; c++)
        s->head[c] = s->tail[c] = KVT_NONE;
    s->e = kvt_meta_realloc(d->meta, NULL, 0, (size_t)cap * sizeof(*s->e));
    s->tab = kvt_meta_realloc(d->meta, NULL, 0, (size_t)tc * sizeof(*s->tab));
    if (!s->e || !s->tab)
        return -ENOMEM;
    memset(s->tab, 0, (size_t)tc * sizeof(*s->tab));
    return 0;
}

static void shadow_free(struct kvt_duel *d, struct shadow *s)
{
    if (s->e)
        kvt_meta_free(d->meta, s->e, (size_t)s->cap * sizeof(*s->e));
    if (s->tab)
        kvt_meta_free(d->meta, s->tab, (size_t)(s->mask + 1) * sizeof(*s->tab));
    s->e = NULL;
    s->tab = NULL;
}

/* ------------------------------------------------------------- the duel */

void kvt_duel_destroy(struct kvt_duel *d)
{
    if (!d)
        return;
    for (int k = 0; k < DUEL_N; k++)
        shadow_free(d, &d->s[k]);
    free(d);
}

int kvt_duel_create(uint64_t slots, int classes, uint64_t *meta, struct kvt_duel **out)
{
    if (classes < 1 || classes > DUEL_CLASSES)
        return -EINVAL;
    struct kvt_duel *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    if (!slots)
        slots = 1;
    d->meta = meta;
    d->classes = classes;
    d->lead = DUEL_START;
    d->sample = slots <= DUEL_MAX_BLOCKS ? SAMPLE_ONE : SAMPLE_ONE * DUEL_MAX_BLOCKS / slots;
    uint32_t cap = (uint32_t)((slots * d->sample + SAMPLE_ONE - 1) / SAMPLE_ONE);
    d->period = (uint64_t)DUEL_MEMORY * cap;
    for (int k = 0; k < DUEL_N; k++)
        if (shadow_alloc(d, &d->s[k], cap, cands[k].scale * (double)slots, cands[k].split) < 0) {
            kvt_duel_destroy(d);
            return -ENOMEM;
        }
    *out = d;
    return 0;
}

/* Whether key is in the shadows' sample; its hash in *h. */
static bool sampled(const struct kvt_duel *d, const kvt_key *key, uint64_t *h)
{
    *h = kvt_key_hash(key);
    return d->sample == SAMPLE_ONE || ((*h * 0x9E3779B97F4A7C15ull) >> 40) < d->sample;
}

void kvt_duel_look(struct kvt_duel *d, const kvt_key *key)
{
    uint64_t h;
    if (!sampled(d, key, &h))
        return;
    for (int k = 0; k < DUEL_N; k++) {
        struct shadow *s = &d->s[k];
        s->score += s->tab[tab_find(s, key, h)] != 0;
    }
    if (++d->looks % d->period == 0)
        for (int k = 0; k < DUEL_N; k++)
            d->s[k].score /= 2;
    for (int k = 0; k < DUEL_N; k++)
        if (d->s[k].score > d->s[d->lead].score)
            d->lead = k;
}

void kvt_duel_use(struct kvt_duel *d, const kvt_key *key, int cls, uint64_t now,
                  const double *lnodds)
{
    uint64_t h;
    if (!sampled(d, key, &h) || cls < 0 || cls >= d->classes) /* no class: not ranked */
        return;
    for (int k = 0; k < DUEL_N; k++)
        shadow_use(&d->s[k], d->classes, key, h, cls, now,
                   lnodds + (size_t)d->s[k].split * (size_t)d->classes);
}

double kvt_duel_scale(const struct kvt_duel *d)
{
    return cands[d->lead].scale;
}

int kvt_duel_split(const struct kvt_duel *d)
{
    return cands[d->lead].split;
}

uint64_t kvt_duel_test_hits(const struct kvt_duel *d, double scale, int split, uint32_t *cap)
{
    for (int k = 0; k < DUEL_N; k++)
        if (cands[k].scale == scale && cands[k].split == split) {
            if (cap)
                *cap = d->s[k].cap;
            return d->s[k].hits;
        }
    return UINT64_MAX;
}
