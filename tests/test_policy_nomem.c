/*
 * test_policy_nomem.c — the policies when memory runs out: every allocation
 * of create() and reserve() made to fail in turn (the program is linked
 * with --wrap=realloc,--wrap=calloc), and the metadata count they keep
 * (kvt_stats.meta_bytes) must come back to where it was once the policy is
 * destroyed: a half-done reserve that leaves an array larger than the
 * policy's capacity must still count and free that array at its size. And
 * an engine whose policy could not grow with its page table hands out no
 * page number the policy has no room for.
 */
#include "tests/helpers.h"
#include "policy/policy.h"
#include "policy/prefix_duel.h"

void *__real_realloc(void *p, size_t n);
void *__real_calloc(size_t a, size_t n);

static int fail_at = -1, calls;

void *__wrap_realloc(void *p, size_t n)
{
    if (calls++ == fail_at)
        return NULL;
    return __real_realloc(p, n);
}

void *__wrap_calloc(size_t a, size_t n)
{
    if (calls++ == fail_at)
        return NULL;
    return __real_calloc(a, n);
}

static const struct kvt_policy_ops *const ops[] = {
    &kvt_policy_lru_ops,
    &kvt_policy_arc_ops,
    &kvt_policy_prefix_ops,
};

/* create() failing at each allocation in turn: -ENOMEM, and the count back
 * where it was; past the last allocation it succeeds. */
static void test_create_fails_cleanly(void **state)
{
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        bool succeeded = false;
        for (fail_at = 0; fail_at < 64 && !succeeded; fail_at++) {
            uint64_t meta = 1000;
            struct kvt_policy_params pp = { .page_cap = 64, .slots = { 4, 16, 64 }, .meta = &meta };
            void *priv = NULL;
            calls = 0;
            int r = ops[o]->create(&pp, &priv);
            if (r == 0) {
                succeeded = true;
                ops[o]->destroy(priv);
            } else {
                assert_int_equal(r, -ENOMEM);
            }
            assert_int_equal(meta, 1000);
        }
        fail_at = -1;
        assert_true(succeeded);
    }
}

/* reserve() failing at each allocation in turn, then a reserve that works,
 * then destroy: the count is back where it was. */
static void test_reserve_fails_cleanly(void **state)
{
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        for (int k = 0; k < 8; k++) {
            uint64_t meta = 1000;
            struct kvt_policy_params pp = { .page_cap = 64, .slots = { 4, 16, 64 }, .meta = &meta };
            void *priv = NULL;
            assert_int_equal(ops[o]->create(&pp, &priv), 0);
            calls = 0;
            fail_at = k;
            int r = ops[o]->reserve(priv, 4096);
            fail_at = -1;
            assert_true(r == 0 || r == -ENOMEM);
            assert_int_equal(ops[o]->reserve(priv, 8192), 0);
            kvt_key key = t_key(1, 0, 8000);
            ops[o]->insert(priv, KVT_TIER_DRAM, 8000, &key); /* the grown arrays are usable */
            assert_int_equal(ops[o]->victim(priv, KVT_TIER_DRAM, NULL, NULL), 8000);
            ops[o]->remove(priv, KVT_TIER_DRAM, 8000);
            ops[o]->destroy(priv);
            assert_int_equal(meta, 1000);
        }
    }
}

/* The duel's own create, small (exact shadows) and large (sampled). */
static void test_duel_create_fails_cleanly(void **state)
{
    static const uint64_t slots[] = { 1, 100, 8192, 1000000 };
    for (size_t s = 0; s < sizeof(slots) / sizeof(slots[0]); s++) {
        bool succeeded = false;
        for (fail_at = 0; fail_at < 64 && !succeeded; fail_at++) {
            uint64_t meta = 1000;
            struct kvt_duel *d = NULL;
            calls = 0;
            int r = kvt_duel_create(slots[s], 5, &meta, &d);
            if (r == 0) {
                succeeded = true;
                kvt_duel_destroy(d);
            } else {
                assert_int_equal(r, -ENOMEM);
            }
            assert_int_equal(meta, 1000);
        }
        fail_at = -1;
        assert_true(succeeded);
    }
}

/* An engine (prefix policy, SSD tier, a cache) with the k-th allocation
 * after it opened failing, for each k: puts answer 0 or an error, and every
 * page a get finds holds its own bytes. The page table grows past the
 * policy's room during these puts; when the policy's reserve was the one
 * refused, the record given back heads the free list, and the next put
 * used it without reserving again, past the end of the policy's arrays (the
 * ASan run of this test caught it: a heap overflow). */
static void test_engine_after_a_refused_reserve(void **state)
{
    static uint64_t buf[T_PAGE / 8], out[T_PAGE / 8];
    for (int k = 0; k < 64; k++) {
        char dir[] = "/tmp/kvt_nomem_XXXXXX";
        assert_non_null(mkdtemp(dir));
        kvt_config c = t_config(T_PAGE, 4, 8);
        c.ssd_bytes = 256 * T_PAGE;
        c.ssd_dir = dir;
        c.policy = "prefix";
        c.flags |= KVT_FLAG_EVICT;
        kvt_engine *e;
        assert_int_equal(kvt_open(&c, &e), 0);
        calls = 0;
        fail_at = k;
        bool stored[60] = { 0 };
        for (uint64_t i = 0; i < 60; i++) {
            kvt_key key = t_key(i, 0, 0);
            const void *src = buf;
            t_fill(buf, T_PAGE, key, 1);
            int r = kvt_put(e, &key, 1, &src, 0);
            assert_true(r <= 0);
            stored[i] = r == 0;
        }
        fail_at = -1;
        for (uint64_t i = 0; i < 60; i++) {
            kvt_key key = t_key(i, 0, 0);
            void *dst = out;
            int found = 0;
            int r = kvt_get(e, &key, 1, &dst, 0, &found);
            assert_true(r <= 0);
            if (found)
                assert_true(stored[i] && t_check(out, T_PAGE, key, 1));
        }
        kvt_close(e);
        t_rmtree(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_fails_cleanly),
        cmocka_unit_test(test_reserve_fails_cleanly),
        cmocka_unit_test(test_duel_create_fails_cleanly),
        cmocka_unit_test(test_engine_after_a_refused_reserve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
