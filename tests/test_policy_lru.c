/*
 * test_policy_lru.c — the LRU policy behind the policy interface.
 */
#include "tests/helpers.h"
#include "policy/policy.h"
#include "api/api.h"

static uint64_t meta;

static void *mk(uint32_t cap)
{
    struct kvt_policy_params p = { .page_cap = cap, .slots = { 4, 8, 0 }, .meta = &meta };
    void *priv = NULL;
    assert_int_equal(kvt_policy_lru_ops.create(&p, &priv), 0);
    return priv;
}

static bool not_two(void *ctx, uint32_t pg) { return pg != 2; }

static void test_victim_is_least_recent(void **state)
{
    void *l = mk(16);
    kvt_key k = t_key(0, 0, 0);
    for (uint32_t pg = 0; pg < 5; pg++)
        kvt_policy_lru_ops.insert(l, KVT_TIER_HBM, pg, &k);
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_HBM, NULL, NULL), 0);
    kvt_policy_lru_ops.access(l, KVT_TIER_HBM, 0);
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_HBM, NULL, NULL), 1);
    kvt_policy_lru_ops.remove(l, KVT_TIER_HBM, 1);
    /* 2 is next but not usable: the walk skips it. */
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_HBM, not_two, NULL), 3);
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_HBM, NULL, NULL), 2);
    /* Tiers are independent lists. */
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_DRAM, NULL, NULL), KVT_NONE);
    kvt_policy_lru_ops.insert(l, KVT_TIER_DRAM, 4, &k);
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_DRAM, NULL, NULL), 4);
    kvt_policy_lru_ops.destroy(l);
}

static void test_cyclic_scan_is_lru_worst_case(void **state)
{
    /* On a cycle larger than the cache, LRU always evicts the page needed
     * next: the reason the decode policy exists. 4 slots, 5 pages. */
    void *l = mk(8);
    kvt_key k = t_key(0, 0, 0);
    bool resident[5] = { false };
    uint32_t n = 0, misses = 0;
    for (int step = 0; step < 50; step++) {
        uint32_t pg = (uint32_t)(step % 5);
        if (resident[pg]) {
            kvt_policy_lru_ops.access(l, KVT_TIER_HBM, pg);
            continue;
        }
        misses++;
        if (n == 4) {
            uint32_t v = kvt_policy_lru_ops.victim(l, KVT_TIER_HBM, NULL, NULL);
            kvt_policy_lru_ops.remove(l, KVT_TIER_HBM, v);
            resident[v] = false;
            n--;
        }
        kvt_policy_lru_ops.insert(l, KVT_TIER_HBM, pg, &k);
        resident[pg] = true;
        n++;
    }
    assert_int_equal(misses, 50);
    kvt_policy_lru_ops.destroy(l);
}

static void test_reserve_grows(void **state)
{
    uint64_t before = meta;
    void *l = mk(4);
    assert_true(meta > before);
    assert_int_equal(kvt_policy_lru_ops.reserve(l, 1000), 0);
    kvt_key k = t_key(0, 0, 0);
    kvt_policy_lru_ops.insert(l, KVT_TIER_HBM, 999, &k);
    kvt_policy_lru_ops.insert(l, KVT_TIER_HBM, 3, &k);
    assert_int_equal(kvt_policy_lru_ops.victim(l, KVT_TIER_HBM, NULL, NULL), 999);
    kvt_policy_lru_ops.destroy(l);
    assert_int_equal(meta, before);
}

static void test_lookup_by_name(void **state)
{
    assert_ptr_equal(kvt_policy_find("lru"), &kvt_policy_lru_ops);
    assert_ptr_equal(kvt_policy_find("decode"), &kvt_policy_decode_ops);
    assert_null(kvt_policy_find("fifo"));
}

/* A policy is what it fills in: the prefix cache neither follows a decode
 * position nor plans (so nothing asks it what to bring up, and an acquire
 * wakes no mover for it); a capability filled in part is refused. */
static void test_capabilities_are_the_ops_filled(void **state)
{
    const struct kvt_policy_ops *all[] = { &kvt_policy_lru_ops, &kvt_policy_arc_ops,
                                           &kvt_policy_decode_ops, &kvt_policy_prefix_ops };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        assert_true(kvt_policy_ops_ok(all[i]));
    const struct kvt_policy_ops *p = &kvt_policy_prefix_ops;
    assert_null(p->advance);
    assert_null(p->prefetch);
    assert_null(p->next_use);
    assert_null(p->page_new);
    assert_non_null(p->batch);
    assert_non_null(p->leaves_first);
    assert_null(kvt_policy_lru_ops.batch);
    assert_non_null(kvt_policy_decode_ops.prefetch);

    struct kvt_policy_ops o = kvt_policy_decode_ops;
    o.prefetch = NULL; /* a plan in part */
    assert_false(kvt_policy_ops_ok(&o));
    o = kvt_policy_decode_ops;
    o.schedule = NULL; /* a position in part */
    assert_false(kvt_policy_ops_ok(&o));
    o = kvt_policy_decode_ops;
    o.schedule = NULL, o.advance = NULL; /* a plan with no position to plan from */
    assert_false(kvt_policy_ops_ok(&o));
    o = kvt_policy_decode_ops;
    o.page_gone = NULL;
    assert_false(kvt_policy_ops_ok(&o));
    o = kvt_policy_lru_ops;
    o.victim = NULL;
    assert_false(kvt_policy_ops_ok(&o));
    o = kvt_policy_lru_ops;
    o.version = KVT_POLICY_OPS_VERSION - 1;
    assert_false(kvt_policy_ops_ok(&o));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_victim_is_least_recent),
        cmocka_unit_test(test_cyclic_scan_is_lru_worst_case),
        cmocka_unit_test(test_reserve_grows),
        cmocka_unit_test(test_lookup_by_name),
        cmocka_unit_test(test_capabilities_are_the_ops_filled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
