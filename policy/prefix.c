/*
 * prefix.c — eviction for prefix-cache pages: blocks of token chains that an
 * engine stores with kvt_put and looks up again by chain (LMCache, SGLang
 * HiCache, vLLM's offloading tiers). There is no decode schedule to plan by,
 * so the policy predicts reuse from what a prefix cache shows it.
 *
 * The idea. In a prefix cache a block's future depends on how it entered:
 *   - a block that two or more requests have used (a shared document, a
 *     conversation that came back) is very likely to be used again, and one
 *     that four or more have used (a popular document, a system prompt)
 *     likelier still;
 *   - a block that a request stored beyond a prefix it hit (the new turn's
 *     own text, after a shared document) is rarely used again: the next
 *     request diverges there too;
 *   - the last block of a request holds its partial block of tokens, whose
 *     hash no later request repeats unless it continues that exact text;
 *   - a block of a fresh chain lies in between.
 * Each block belongs to one of these classes (its "entry class"), and the
 * policy learns, while it runs, the fraction of each class's blocks that
 * were used again (the "reuse odds", counts halved now and then so they
 * follow the workload; a prior keeps the order above until there is
 * evidence against it). A block's priority is its recency shifted by its
 * class's odds: last use + T·ln(odds). So a block of a class reused half
 * as often as another's is kept as if it had been used 0.69·T earlier:
 * shared blocks outlive a burst of fresh documents, a request's tail goes
 * first, and within a class the order is LRU's. The blocks of one call
 * share a clock and the deepest is linked first, so chains leave from their
 * deep end: losing a shallow block would strand the deeper ones.
 *
 * How large T should be, and whether the blocks used by four or more
 * requests are a class apart or ranked with those used by two, depends on
 * the workload: a chat, whose new turn is the next turn's prefix, wants
 * recency to decide; a cache of shared documents wants the classes to; a
 * few documents asked about again and again want the popular ones apart.
 * So shadow caches run on the same stream with each ranking (T of 0, 4, 16
 * and 64 times the blocks the engine holds, the popular class pooled or
 * apart), and the policy ranks as the one with the most hits lately
 * (prefix_duel.h).
 * docs/sim.md#prefix-cache-policies has the figures, beside LRU, ARC and
 * Belady MIN, and the ideas tried on the way.
 *
 * What the policy sees. insert/remove/access as every policy, and batch()
 * (it sees calls): the pages of one kvt_get or kvt_put call, in call order,
 * which a prefix cache makes one chain (the hit prefix, then the new
 * blocks). The classes come from batch(); a page never seen in one (a
 * caller that does not use kvt_put/kvt_get) is a fresh block, and the
 * policy is then LRU. Use counts outlive a page: a ghost table remembers
 * the keys of recent blocks (two generations, each turned over after 4x
 * the engine's pages of keys looked up: a key looked up and not yet used
 * counts too, each time, so about 2 to 3.5x the pages are remembered), so
 * a chain evicted and stored again is known for what it is.
 *
 * Cost: per page 40 bytes plus 8 per tier; per ghost 24 bytes; the duel's
 * shadows at most about 2.7 MiB. insert, remove, access O(1); batch O(n),
 * each block also one use in each shadow; victim O(classes + skipped).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/dlist.h"
#include "policy/prefix_duel.h"

enum { C_SHARED, C_FRESH, C_CONT, C_TAIL, C_HOT, NCLS };

struct ghost {
    kvt_key key;
    uint32_t count;     /* requests that used it (0 = empty slot) */
    uint8_t cls;        /* its class when last classified; NCLS = none yet */
};

struct ghost_gen {
    struct ghost *g;
    size_t cap, n;      /* cap a power of two; n <= cap / 2 */
};

struct pstate {
    kvt_key key;
    uint64_t last;      /* clock of the last use */
    uint32_t count;     /* requests that used it */
    uint8_t cls;
    uint8_t tiers;      /* bit t: a candidate of tier t */
    uint8_t known;      /* key below is this page's (else a new life) */
};

struct prefix {
    uint32_t cap;
    uint64_t *meta;
    uint64_t clock;                     /* blocks used so far */
    double slots;                       /* the engine's blocks: the class shift T is a
                                           multiple of them */
    struct kvt_duel *duel;              /* the ranking: T, and C_HOT apart from C_SHARED
                                           or pooled (prefix_duel.h) */
    double ins[NCLS], reused[NCLS];     /* learned odds: reused / ins */
    struct pstate *st;
    uint32_t *link;                     /* [page][tier][prev,next] */
    uint32_t link_cap;                  /* pages link has room for: may pass cap when a
                                           reserve failed half way */
    uint32_t head[KVT_POLICY_TIERS][NCLS], tail[KVT_POLICY_TIERS][NCLS];
    struct ghost_gen gen[2];            /* [0] current, [1] previous */
    size_t ghost_cap;
};

#define HALVE_AFTER 65536.0 /* classifications between halvings of the odds' counts */

/* ------------------------------------------------------------- ghosts */

static int gen_alloc(struct prefix *p, struct ghost_gen *g, size_t cap)
{
    g->g = kvt_meta_realloc(p->meta, NULL, 0, cap * sizeof(*g->g));
    if (!g->g)
        return -ENOMEM;
    memset(g->g, 0, cap * sizeof(*g->g));
    g->cap = cap;
    g->n = 0;
    return 0;
}

static void gen_free(struct prefix *p, struct ghost_gen *g)
{
    kvt_meta_free(p->meta, g->g, g->cap * sizeof(*g->g));
    memset(g, 0, sizeof(*g));
}

static struct ghost *gen_slot(struct ghost_gen *g, const kvt_key *k)
{
    size_t j = kvt_key_hash(k) & (g->cap - 1);
    while (g->g[j].count && !kvt_key_eq(&g->g[j].key, k))
        j = (j + 1) & (g->cap - 1);
    return &g->g[j];
}

/* The ghost of k in the current generation, made (count 0) if absent; NULL
 * only when a new generation cannot be allocated (the key is then treated
 * as never seen: a fresh block, which costs hits, never correctness). */
static struct ghost *ghost_get(struct prefix *p, const kvt_key *k)
{
    struct ghost *cur = gen_slot(&p->gen[0], k);
    if (cur->count)
        return cur;
    struct ghost old = { .cls = NCLS };
    if (p->gen[1].g) {
        struct ghost *o = gen_slot(&p->gen[1], k);
        if (o->count)
            old = *o;
    }
    if (p->gen[0].n + 1 > p->gen[0].cap / 2) {
        /* The current generation is full: it becomes the previous one. */
        struct ghost_gen fresh;
        if (gen_alloc(p, &fresh, p->ghost_cap) < 0)
            return NULL;
        gen_free(p, &p->gen[1]);
        p->gen[1] = p->gen[0];
        p->gen[0] = fresh;
        cur = gen_slot(&p->gen[0], k);
    }
    *cur = old;
    cur->key = *k;
    p->gen[0].n++;
    return cur;
}

/* ------------------------------------------------------------- lists */

static void link_head(struct prefix *p, int t, uint32_t pg)
{
    int c = p->st[pg].cls;
    dl_push_head(p->link, t, &p->head[t][c], &p->tail[t][c], pg);
}

static void unlink_pg(struct prefix *p, int t, uint32_t pg)
{
    int c = p->st[pg].cls;
    dl_unlink(p->link, t, &p->head[t][c], &p->tail[t][c], pg);
}

/* Marks pg used at clock `now`, as class c: to the head of its class's list
 * in every tier that holds it. */
static void touch(struct prefix *p, uint32_t pg, int c, uint64_t now)
{
    struct pstate *s = &p->st[pg];
    for (int t = 0; t < KVT_POLICY_TIERS; t++)
        if (s->tiers & (1u << t))
            unlink_pg(p, t, pg);
    s->cls = (uint8_t)c;
    s->last = now;
    for (int t = 0; t < KVT_POLICY_TIERS; t++)
        if (s->tiers & (1u << t))
            link_head(p, t, pg);
}

/* ------------------------------------------------------------- ops */

static void prefix_destroy(void *priv)
{
    struct prefix *p = priv;
    dl_free(p->meta, p->link, p->link_cap);
    kvt_meta_free(p->meta, p->st, (size_t)p->cap * sizeof(*p->st));
    gen_free(p, &p->gen[0]);
    gen_free(p, &p->gen[1]);
    kvt_duel_destroy(p->duel);
    free(p);
}

static int prefix_reserve(void *priv, uint32_t cap)
{
    struct prefix *p = priv;
    if (cap <= p->cap)
        return 0;
    if (p->link_cap < cap) {
        if (dl_grow(p->meta, &p->link, p->link_cap, cap) < 0)
            return -ENOMEM;
        p->link_cap = cap;
    }
    struct pstate *ns = kvt_meta_realloc(p->meta, p->st, (size_t)p->cap * sizeof(*ns),
                                         (size_t)cap * sizeof(*ns));
    if (!ns)
        return -ENOMEM; /* link grew: harmless, cap stays */
    memset(ns + p->cap, 0, (size_t)(cap - p->cap) * sizeof(*ns));
    p->st = ns;
    p->cap = cap;
    return 0;
}

static int prefix_create(const struct kvt_policy_params *pp, void **priv)
{
    struct prefix *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->meta = pp->meta;
    uint64_t slots = 0;
    for (int t = 0; t < KVT_POLICY_TIERS; t++) {
        slots += pp->slots[t];
        for (int c = 0; c < NCLS; c++)
            p->head[t][c] = p->tail[t][c] = KVT_NONE;
    }
    size_t gc = 1024;
    while (gc < 8 * slots && gc < ((size_t)1 << 32))
        gc <<= 1;
    p->ghost_cap = gc;
    p->slots = (double)(slots ? slots : 1);
    if (prefix_reserve(p, pp->page_cap ? pp->page_cap : 1) < 0 ||
        gen_alloc(p, &p->gen[0], gc) < 0 || kvt_duel_create(slots, NCLS, p->meta, &p->duel) < 0) {
        prefix_destroy(p);
        return -ENOMEM;
    }
    *priv = p;
    return 0;
}

/* The class of a block `count` requests have used; `other` if fewer than
 * two. Popular: four, the next doubling after shared. */
static int cls_of_count(uint32_t count, int other)
{
    return count >= 4 ? C_HOT : count >= 2 ? C_SHARED : other;
}

/* A page's state for this life of it: a page number reused for another key
 * starts again (V1 policies get no page_gone). */
static struct pstate *life(struct prefix *p, uint32_t pg, const kvt_key *key)
{
    struct pstate *s = &p->st[pg];
    if (!s->tiers && (!s->known || !kvt_key_eq(&s->key, key))) {
        struct ghost *g = ghost_get(p, key);
        *s = (struct pstate){ .key = *key, .known = 1, .last = ++p->clock,
                              .count = g ? g->count : 0,
                              .cls = cls_of_count(g ? g->count : 0, C_FRESH) };
    }
    return s;
}

static void prefix_insert(void *priv, int tier, uint32_t pg, const kvt_key *key)
{
    struct prefix *p = priv;
    struct pstate *s = life(p, pg, key);
    s->tiers |= (uint8_t)(1u << tier);
    link_head(p, tier, pg);
}

static void prefix_remove(void *priv, int tier, uint32_t pg)
{
    struct prefix *p = priv;
    unlink_pg(p, tier, pg);
    p->st[pg].tiers &= (uint8_t)~(1u << tier);
}

static void prefix_access(void *priv, int tier, uint32_t pg)
{
    struct prefix *p = priv;
    touch(p, pg, p->st[pg].cls, ++p->clock);
}

/* The odds that a block of class c is used again: what the policy has
 * seen, pulled toward the structural prior by PRIOR_WEIGHT pretend blocks.
 * The prior's order is the idea above; its values only break the tie
 * before there is evidence. The weight is large because the evidence is
 * biased while it is young: blocks stored recently have not had their
 * chance to come back yet, and a small class (a few hundred tails) swings;
 * a class whose blocks really come back more often than the prior says
 * (turns that extend a chat: every suffix is the next turn's prefix) takes
 * its place after some thousands of blocks. With the popular class pooled
 * (split 0), its blocks and the shared ones have the odds of both together
 * and the shared class's prior. */
#define PRIOR_WEIGHT 1024.0
static double odds_v(const struct prefix *p, int c, int split)
{
    static const double prior[NCLS] = { 0.75, 0.5, 0.25, 0.125, 0.875 };
    if (!split && (c == C_SHARED || c == C_HOT))
        return (p->reused[C_SHARED] + p->reused[C_HOT] + PRIOR_WEIGHT * prior[C_SHARED]) /
               (p->ins[C_SHARED] + p->ins[C_HOT] + PRIOR_WEIGHT);
    return (p->reused[c] + PRIOR_WEIGHT * prior[c]) / (p->ins[c] + PRIOR_WEIGHT);
}

/* The odds as the policy ranks now (the duel's choice). */
static double odds(const struct prefix *p, int c)
{
    return odds_v(p, c, kvt_duel_split(p->duel));
}

/* The candidate of tier that should leave first: each class's least
 * recently used usable page, its last use shifted back by T·ln(odds) (T in
 * blocks, as the duel last chose it), the smallest. A class reused half as
 * often as another is kept as if used 0.69·T blocks earlier: with T of many
 * turnovers, where the classes' odds differ widely a block of the likelier
 * class outlives a whole turnover of the cache; with T small, or where the
 * odds are close, recency decides, as LRU. */
static double score(const struct prefix *p, uint32_t pg)
{
    double T = kvt_duel_scale(p->duel) * p->slots;
    return (double)p->st[pg].last + T * log(odds(p, p->st[pg].cls));
}

static uint32_t prefix_victim(void *priv, int tier, kvt_usable_fn usable, void *ctx)
{
    struct prefix *p = priv;
    uint32_t best = KVT_NONE;
    double best_score = 0;
    for (int c = 0; c < NCLS; c++) {
        uint32_t pg = p->tail[tier][c];
        while (pg != KVT_NONE && usable && !usable(ctx, pg))
            pg = DL_PREV(p->link, tier, pg);
        if (pg == KVT_NONE)
            continue;
        double sc = score(p, pg);
        if (best == KVT_NONE || sc < best_score) {
            best = pg;
            best_score = sc;
        }
    }
    return best;
}

static void learn(struct prefix *p, int c, bool reused_class)
{
    if (reused_class)
        p->reused[c] += 1.0;
    else
        p->ins[c] += 1.0;
    double total = 0;
    for (int i = 0; i < NCLS; i++)
        total += p->ins[i];
    if (total > HALVE_AFTER) /* follow the workload: old evidence weighs half */
        for (int i = 0; i < NCLS; i++) {
            p->ins[i] /= 2;
            p->reused[i] /= 2;
        }
}

/* One use of page pg by a request, as block i of a call of n, at now. */
static void use_one(struct prefix *p, uint32_t pg, int kind, size_t i, size_t n, bool cont,
                    uint64_t now, const double *lnodds)
{
    struct pstate *s = &p->st[pg];
    struct ghost *g = ghost_get(p, &s->key);
    uint32_t before = g ? g->count : s->count;
    if (before && g && g->cls < NCLS)
        learn(p, g->cls, true);         /* its class was right to keep it */
    s->count = before + 1;
    int c = cls_of_count(s->count, kind == KVT_BATCH_GET ? C_FRESH
                                   : i + 1 == n          ? C_TAIL
                                   : cont                ? C_CONT
                                                         : C_FRESH);
    learn(p, c, false);
    if (g) {
        g->count = s->count;
        g->cls = (uint8_t)c;
    }
    touch(p, pg, c, now);
    kvt_duel_use(p->duel, &s->key, c, now, lnodds);
}

/* Whether page pg of a batch is one the policy knows (an entry may be
 * KVT_NONE, or a page it never saw inserted). */
static bool known(const struct prefix *p, uint32_t pg)
{
    return pg != KVT_NONE && pg < p->cap && p->st[pg].known;
}

static void prefix_batch(void *priv, int kind, const uint32_t *pgs, size_t n)
{
    struct prefix *p = priv;
    if (!n)
        return;
    /* A put that does not start a chain, or starts again one seen before,
     * stores a continuation: the blocks after a prefix somebody has. */
    bool cont = false;
    if (kind == KVT_BATCH_PUT && known(p, pgs[0])) {
        const struct pstate *s0 = &p->st[pgs[0]];
        struct ghost *g = ghost_get(p, &s0->key);
        cont = s0->key.index > 0 || (g && g->count > 0);
    }
    /* One clock for the call, the deepest block linked first: a chain
     * leaves from its deep end, and a shallow block, which every deeper one
     * needs, goes last. */
    p->clock += n;
    uint64_t now = p->clock;
    /* The shadows score the call first: whether each held the call's
     * blocks is known before any of them is used. */
    for (size_t i = 0; i < n; i++)
        if (known(p, pgs[i]))
            kvt_duel_look(p->duel, &p->st[pgs[i]].key);
    double lnodds[2 * NCLS]; /* for the shadows: pooled, then apart */
    for (int c = 0; c < NCLS; c++) {
        lnodds[c] = log(odds_v(p, c, 0));
        lnodds[NCLS + c] = log(odds_v(p, c, 1));
    }
    for (size_t i = n; i-- > 0;)
        if (known(p, pgs[i]))
            use_one(p, pgs[i], kind, i, n, cont, now, lnodds);
}

/* The victims' order (prefix_victim) across tiers: a block's class-shifted
 * last use. */
static bool prefix_leaves_first(void *priv, uint32_t a, uint32_t b)
{
    const struct prefix *p = priv;
    return score(p, a) < score(p, b);
}

/* No decode position, no plan: the prefix policy only evicts, sees calls
 * and ranks across tiers. */
const struct kvt_policy_ops kvt_policy_prefix_ops = {
    .name = "prefix",
    .version = KVT_POLICY_OPS_VERSION,
    .create = prefix_create,
    .destroy = prefix_destroy,
    .reserve = prefix_reserve,
    .insert = prefix_insert,
    .remove = prefix_remove,
    .access = prefix_access,
    .victim = prefix_victim,
    .batch = prefix_batch,
    .leaves_first = prefix_leaves_first,
};
