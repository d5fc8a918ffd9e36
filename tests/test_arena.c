/*
 * test_arena.c — slot allocation: full, double free, reuse.
 */
#include "tests/helpers.h"
#include "api/api.h"

static uint64_t meta;
static uint8_t mem[8 * 4096];

static void test_alloc_until_full(void **state)
{
    struct kvt_arena a;
    assert_int_equal(kvt_arena_init(&a, mem, 4096, 8, &meta), 0);
    int seen[8] = { 0 };
    for (int i = 0; i < 8; i++) {
        uint32_t s = kvt_arena_alloc(&a, (uint32_t)i);
        assert_true(s < 8);
        assert_int_equal(seen[s], 0);
        seen[s] = 1;
        assert_ptr_equal(kvt_arena_ptr(&a, s), mem + s * 4096);
    }
    assert_int_equal(kvt_arena_alloc(&a, 99), KVT_NONE);
    assert_int_equal(a.nfree, 0);
    kvt_arena_fini(&a, &meta);
}

static void test_double_free_and_foreign(void **state)
{
    struct kvt_arena a;
    assert_int_equal(kvt_arena_init(&a, mem, 4096, 8, &meta), 0);
    uint32_t s = kvt_arena_alloc(&a, 1);
    assert_int_equal(kvt_arena_free(&a, s), 0);
    assert_int_equal(kvt_arena_free(&a, s), -EINVAL);   /* double free */
    assert_int_equal(kvt_arena_free(&a, 8), -EINVAL);   /* out of range */
    assert_int_equal(kvt_arena_free(&a, 3), -EINVAL);   /* never allocated */
    assert_int_equal(a.nfree, 8);
    kvt_arena_fini(&a, &meta);
}

static void test_reuse_and_owner(void **state)
{
    struct kvt_arena a;
    assert_int_equal(kvt_arena_init(&a, mem, 4096, 4, &meta), 0);
    uint32_t s0 = kvt_arena_alloc(&a, 10), s1 = kvt_arena_alloc(&a, 11);
    assert_int_equal(a.owner[s0], 10);
    assert_int_equal(a.owner[s1], 11);
    assert_int_equal(kvt_arena_free(&a, s0), 0);
    assert_int_equal(a.owner[s0], KVT_NONE);
    uint32_t s2 = kvt_arena_alloc(&a, 12);
    assert_int_equal(s2, s0); /* the freed slot comes back first (warm) */
    assert_int_equal(a.owner[s2], 12);
    kvt_arena_fini(&a, &meta);
}

static void test_meta_returns_to_zero(void **state)
{
    uint64_t m = 0;
    struct kvt_arena a;
    assert_int_equal(kvt_arena_init(&a, mem, 4096, 8, &m), 0);
    assert_int_equal(m, 8 * 2 * sizeof(uint32_t));
    kvt_arena_fini(&a, &m);
    assert_int_equal(m, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_until_full),
        cmocka_unit_test(test_double_free_and_foreign),
        cmocka_unit_test(test_reuse_and_owner),
        cmocka_unit_test(test_meta_returns_to_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
