/*
 * test_policy_prefix.c — the prefix-cache policies behind the policy
 * interface: prefix (reuse classes) and arc.
 */
#include "tests/helpers.h"
#include "policy/policy.h"
#include "policy/prefix_duel.h"
#include "api/api.h"

#define T KVT_TIER_SSD

static uint64_t meta;

static void *mk(const struct kvt_policy_ops *ops, uint32_t cap, uint32_t slots)
{
    struct kvt_policy_params p = { .page_cap = cap, .slots = { 0, 0, slots }, .meta = &meta };
    void *priv = NULL;
    assert_int_equal(ops->create(&p, &priv), 0);
    assert_true(kvt_policy_ops_ok(ops));
    return priv;
}

static const struct kvt_policy_ops *P = &kvt_policy_prefix_ops;

/* Stores the chain of keys (id0 .. id0+n-1, positions from depth) as one
 * put on pages pg0 .. pg0+n-1. */
static void put_chain(void *p, uint32_t pg0, uint64_t id0, uint32_t depth, uint32_t n)
{
    uint32_t pgs[64];
    for (uint32_t i = 0; i < n; i++) {
        kvt_key k = t_key(id0 + i, KVT_ALL_LAYERS, depth + i);
        P->insert(p, T, pg0 + i, &k);
        pgs[i] = pg0 + i;
    }
    P->batch(p, KVT_BATCH_PUT, pgs, n);
}

static void get_chain(void *p, uint32_t pg0, uint32_t n)
{
    uint32_t pgs[64];
    for (uint32_t i = 0; i < n; i++) {
        P->access(p, T, pg0 + i);
        pgs[i] = pg0 + i;
    }
    P->batch(p, KVT_BATCH_GET, pgs, n);
}

static void drop(void *p, uint32_t pg)
{
    P->remove(p, T, pg);
}

/* A chain two requests used outlives a fresh chain stored after it; a fresh
 * chain leaves from its deep end, and a request's tail block first. */
static void test_shared_outlives_fresh(void **state)
{
    void *p = mk(P, 64, 16);
    put_chain(p, 0, 100, 0, 4);   /* request 1: chain A, pages 0..3 */
    get_chain(p, 0, 4);           /* request 2 hits all of A: shared */
    put_chain(p, 10, 200, 0, 4);  /* request 3: chain B, fresh, pages 10..13 */
    /* B's tail (13) goes first, then B from its deep end, A last. */
    uint32_t want[] = { 13, 12, 11, 10, 3, 2, 1, 0 };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        uint32_t v = P->victim(p, T, NULL, NULL);
        assert_int_equal(v, want[i]);
        drop(p, v);
    }
    assert_int_equal(P->victim(p, T, NULL, NULL), KVT_NONE);
    P->destroy(p);
}

static bool not_13(void *ctx, uint32_t pg) { return pg != 13; }

static void test_victim_skips_unusable(void **state)
{
    void *p = mk(P, 64, 16);
    put_chain(p, 10, 200, 0, 4);
    assert_int_equal(P->victim(p, T, not_13, NULL), 12);
    /* Tiers are separate: nothing on DRAM. */
    assert_int_equal(P->victim(p, KVT_TIER_DRAM, NULL, NULL), KVT_NONE);
    P->destroy(p);
}

/* A chain evicted and stored again is known from its ghost: its blocks are
 * shared, and outlive a fresh chain stored later. */
static void test_ghost_remembers_evicted_chain(void **state)
{
    void *p = mk(P, 64, 16);
    put_chain(p, 0, 100, 0, 3);
    for (uint32_t pg = 0; pg < 3; pg++)
        drop(p, pg);                 /* evicted */
    put_chain(p, 20, 100, 0, 3);     /* the same keys again, other pages */
    put_chain(p, 30, 300, 0, 3);     /* a fresh chain */
    uint32_t v = P->victim(p, T, NULL, NULL);
    assert_true(v >= 30 && v < 33);
    P->destroy(p);
}

/* The class order follows the evidence: when blocks used twice are never
 * used a third time and fresh blocks always come back once, fresh blocks
 * end up kept over shared ones. */
static void test_odds_overturn_the_prior(void **state)
{
    void *p = mk(P, 64, 16);
    uint64_t id = 1000;
    for (int round = 0; round < 4000; round++, id += 2) {
        put_chain(p, 0, id, 0, 2);   /* fresh pair */
        get_chain(p, 0, 2);          /* used again once: now shared */
        drop(p, 0);
        drop(p, 1);                  /* never seen again */
    }
    put_chain(p, 0, 1, 0, 2);        /* a fresh pair: pages 0, 1 */
    put_chain(p, 2, 3, 0, 2);        /* another: pages 2, 3 */
    get_chain(p, 2, 2);              /* used again: shared, and more recent */
    uint32_t v = P->victim(p, T, NULL, NULL);
    assert_true(v == 2 || v == 3);   /* the shared pair goes first now */
    P->destroy(p);
}

/* A page number reused for another key starts a new life. */
static void test_page_reuse_is_a_new_page(void **state)
{
    void *p = mk(P, 64, 16);
    put_chain(p, 0, 100, 0, 2);
    get_chain(p, 0, 2);              /* shared */
    drop(p, 0);
    drop(p, 1);
    put_chain(p, 0, 500, 0, 2);      /* pages 0, 1 now hold a fresh chain */
    put_chain(p, 5, 100, 0, 2);      /* the shared chain comes back on 5, 6 */
    uint32_t v = P->victim(p, T, NULL, NULL);
    assert_true(v == 0 || v == 1);
    P->destroy(p);
}

/* leaves_first is victim()'s order, across tiers: a shared chain on SSD
 * outranks a fresh one in DRAM stored after it, whose tail ranks lowest;
 * it is a strict order (never both ways). */
static void test_leaves_first_orders_across_tiers(void **state)
{
    void *p = mk(P, 64, 16);
    put_chain(p, 0, 100, 0, 4);      /* on SSD (T) */
    get_chain(p, 0, 4);              /* shared */
    uint32_t pgs[4];
    for (uint32_t i = 0; i < 4; i++) {
        kvt_key k = t_key(200 + i, KVT_ALL_LAYERS, i);
        P->insert(p, KVT_TIER_DRAM, 10 + i, &k);
        pgs[i] = 10 + i;
    }
    P->batch(p, KVT_BATCH_PUT, pgs, 4); /* fresh, in DRAM, newer */
    uint32_t d = P->victim(p, KVT_TIER_DRAM, NULL, NULL), s = P->victim(p, T, NULL, NULL);
    assert_int_equal(d, 13);         /* the fresh chain's tail */
    assert_int_equal(s, 3);          /* the shared chain's deep end */
    assert_true(P->leaves_first(p, d, s));
    assert_false(P->leaves_first(p, s, d));
    assert_false(P->leaves_first(p, d, d));
    assert_true(P->leaves_first(p, 13, 12)); /* the tail before its own chain */
    P->destroy(p);
}

/* ------------------------------------------------------------- arc */

static const struct kvt_policy_ops *A = &kvt_policy_arc_ops;

/* A page used again goes to T2; a new one is taken from T1 first while T1
 * is over its target (0 at the start). */
static void test_arc_frequency_protects(void **state)
{
    void *a = mk(A, 64, 4);
    kvt_key k;
    for (uint32_t pg = 0; pg < 4; pg++) {
        k = t_key(pg, KVT_ALL_LAYERS, 0);
        A->insert(a, T, pg, &k);
    }
    A->access(a, T, 0); /* 0 -> T2 */
    assert_int_equal(A->victim(a, T, NULL, NULL), 1);
    A->remove(a, T, 1); /* 1 -> B1 */
    /* 1 comes back: a ghost hit in B1 lands in T2 and grows T1's target to
     * 1; T1 (2, 3) gives up 2, and then, at its target, T1 keeps 3 and T2
     * gives up its least recent, 0. */
    k = t_key(1, KVT_ALL_LAYERS, 0);
    A->insert(a, T, 9, &k);
    assert_int_equal(A->victim(a, T, NULL, NULL), 2);
    A->remove(a, T, 2);
    assert_int_equal(A->victim(a, T, NULL, NULL), 0);
    A->destroy(a);
}

static void test_arc_many_ghosts(void **state)
{
    /* Far more keys than the ghost map holds: sweeps keep it bounded and
     * the policy keeps answering. */
    void *a = mk(A, 8, 4);
    for (uint32_t i = 0; i < 200000; i++) {
        kvt_key k = t_key(i, KVT_ALL_LAYERS, 0);
        uint32_t pg = i % 4;
        if (i >= 4)
            A->remove(a, T, pg);
        A->insert(a, T, pg, &k);
    }
    assert_int_not_equal(A->victim(a, T, NULL, NULL), KVT_NONE);
    A->destroy(a);
}

/* ------------------------------------------------------------- the duel */

/* ln .75 .5 .25 .125, pooled and apart alike */
static const double lnodds[8] = { -0.2877, -0.6931, -1.3863, -2.0794,
                                  -0.2877, -0.6931, -1.3863, -2.0794 };

/* Reference LRU of cap keys, by a scan: whether k was held; uses it. */
struct ref_lru {
    kvt_key k[128];
    uint64_t t[128];
    uint32_t n, cap;
};

static bool ref_use(struct ref_lru *r, const kvt_key *k, uint64_t now)
{
    uint32_t old = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        if (kvt_key_eq(&r->k[i], k)) {
            r->t[i] = now;
            return true;
        }
        if (r->t[i] < r->t[old])
            old = i;
    }
    uint32_t x = r->n < r->cap ? r->n++ : old;
    r->k[x] = *k;
    r->t[x] = now;
    return false;
}

/* One request of one block through the duel, as the policy drives it. */
static void duel_req(struct kvt_duel *d, const kvt_key *k, int cls, uint64_t now,
                     const double *rows)
{
    kvt_duel_look(d, k);
    kvt_duel_use(d, k, cls, now, rows);
}

/* 4000 steps of a hot block of class hot_cls (32 of them, in turn: each
 * back after 192 uses, three times a 64-block cache) and 5 blocks of a scan
 * of class scan_cls, never used again. */
static void hot_and_scan(struct kvt_duel *d, int hot_cls, int scan_cls, const double *rows)
{
    uint64_t now = 0, fresh = 1000000;
    for (int step = 0; step < 4000; step++) {
        kvt_key hot = t_key((uint64_t)(step % 32), KVT_ALL_LAYERS, 0);
        duel_req(d, &hot, hot_cls, ++now, rows);
        for (int j = 0; j < 5; j++) {
            kvt_key scan = t_key(fresh++, KVT_ALL_LAYERS, 1);
            duel_req(d, &scan, scan_cls, ++now, rows);
        }
    }
}

/* The shadow at scale 0 ranks by last use alone: it is LRU, hit for hit,
 * whatever the classes, through thousands of evictions (each one a table
 * deletion that must keep every other key reachable). */
static void test_duel_scale_0_is_lru(void **state)
{
    struct kvt_duel *d;
    assert_int_equal(kvt_duel_create(64, 4, &meta, &d), 0);
    struct ref_lru r = { .cap = 64 };
    uint64_t rng = 7, hits = 0, fresh = 1000000;
    for (uint64_t now = 1; now <= 40000; now++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t id = (rng >> 33) % 2 ? (rng >> 40) % 96 : fresh++;
        kvt_key k = t_key(id, KVT_ALL_LAYERS, (uint32_t)(id % 7));
        hits += ref_use(&r, &k, now);
        kvt_duel_use(d, &k, (int)((rng >> 20) % 4), now, lnodds);
    }
    uint32_t cap = 0;
    assert_true(hits > 1000);
    assert_int_equal(kvt_duel_test_hits(d, 0, 0, &cap), hits);
    assert_int_equal(cap, 64);
    kvt_duel_destroy(d);
}

/* Where the classes mislead (the blocks of the "likely" class never come
 * back, the "unlikely" ones come back soon), recency wins the duel. */
static void test_duel_follows_recency(void **state)
{
    struct kvt_duel *d;
    assert_int_equal(kvt_duel_create(64, 4, &meta, &d), 0);
    uint64_t now = 0, fresh = 1000000;
    for (int step = 0; step < 4000; step++) {
        kvt_key junk = t_key(fresh++, KVT_ALL_LAYERS, 0);
        kvt_key loop = t_key((uint64_t)(step % 16), KVT_ALL_LAYERS, 0);
        duel_req(d, &junk, 0, ++now, lnodds);
        duel_req(d, &loop, 3, ++now, lnodds);
    }
    assert_true(kvt_duel_test_hits(d, 0, 0, NULL) > kvt_duel_test_hits(d, 16, 0, NULL));
    assert_true(kvt_duel_scale(d) == 0);
    kvt_duel_destroy(d);
}

/* Where a scan of one-use blocks would flush LRU of blocks that come back
 * after more than a cache's worth of uses, the class shift wins. */
static void test_duel_follows_classes(void **state)
{
    struct kvt_duel *d;
    assert_int_equal(kvt_duel_create(64, 4, &meta, &d), 0);
    hot_and_scan(d, 0, 3, lnodds);
    assert_int_equal(kvt_duel_test_hits(d, 0, 0, NULL), 0);
    assert_true(kvt_duel_test_hits(d, 16, 0, NULL) > 3000);
    assert_true(kvt_duel_scale(d) > 0);
    kvt_duel_destroy(d);
}

/* Where two classes differ in reuse but the pooled odds say they are alike,
 * the shadows that rank them apart win, and the duel says so. lnodds rows:
 * pooled (both classes the same odds), then apart (class 0 likely, class 1
 * not), over hot_and_scan with the hot blocks in class 0 and the scan in
 * class 1. */
static void test_duel_follows_split_classes(void **state)
{
    static const double rows[4] = { -0.6931, -0.6931, -0.2877, -2.0794 };
    struct kvt_duel *d;
    assert_int_equal(kvt_duel_create(64, 2, &meta, &d), 0);
    hot_and_scan(d, 0, 1, rows);
    assert_true(kvt_duel_test_hits(d, 16, 1, NULL) > 3000);
    assert_true(kvt_duel_test_hits(d, 16, 0, NULL) < 100);
    assert_int_equal(kvt_duel_split(d), 1);
    assert_true(kvt_duel_scale(d) > 0);
    kvt_duel_destroy(d);
}

/* A large engine's shadows hold a sample of its keys: memory stays bounded
 * and counted, and a sampled key still hits. */
static void test_duel_samples_a_large_engine(void **state)
{
    uint64_t before = meta;
    struct kvt_duel *d;
    assert_int_equal(kvt_duel_create(1000000, 4, &meta, &d), 0);
    uint32_t cap = 0;
    kvt_duel_test_hits(d, 0, 0, &cap);
    assert_true(cap >= 8000 && cap <= 8193);
    assert_true(meta - before > 0 && meta - before < ((uint64_t)3 << 20));
    uint64_t now = 0;
    for (uint64_t id = 0; id < 100000; id++) { /* every key used twice in a row */
        kvt_key k = t_key(id, KVT_ALL_LAYERS, 0);
        kvt_duel_use(d, &k, 1, ++now, lnodds);
        kvt_duel_use(d, &k, 1, ++now, lnodds);
    }
    uint64_t h = kvt_duel_test_hits(d, 0, 0, NULL);
    assert_true(h > 100000 / 400 && h < 100000 / 20); /* about 0.8% of the keys */
    kvt_duel_destroy(d);
    assert_int_equal(meta, before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_outlives_fresh),
        cmocka_unit_test(test_victim_skips_unusable),
        cmocka_unit_test(test_ghost_remembers_evicted_chain),
        cmocka_unit_test(test_odds_overturn_the_prior),
        cmocka_unit_test(test_page_reuse_is_a_new_page),
        cmocka_unit_test(test_leaves_first_orders_across_tiers),
        cmocka_unit_test(test_arc_frequency_protects),
        cmocka_unit_test(test_arc_many_ghosts),
        cmocka_unit_test(test_duel_scale_0_is_lru),
        cmocka_unit_test(test_duel_follows_recency),
        cmocka_unit_test(test_duel_follows_classes),
        cmocka_unit_test(test_duel_follows_split_classes),
        cmocka_unit_test(test_duel_samples_a_large_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
