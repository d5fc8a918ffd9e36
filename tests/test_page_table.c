/*
 * test_page_table.c — records and the key index.
 */
#include "tests/helpers.h"
#include "api/api.h"

static uint64_t meta;

static uint32_t add(struct kvt_ptable *t, kvt_key k)
{
    uint32_t pg = kvt_ptable_new(t);
    assert_int_not_equal(pg, KVT_NONE);
    kvt_pg(t, pg)->key = k;
    assert_int_equal(kvt_ptable_insert(t, pg), 0);
    return pg;
}

static void test_insert_find_remove(void **state)
{
    struct kvt_ptable t;
    assert_int_equal(kvt_ptable_init(&t, 4, &meta), 0);
    uint32_t a = add(&t, t_key(1, 0, 0)), b = add(&t, t_key(1, 0, 1)), c = add(&t, t_key(2, 3, 0));
    kvt_key k = t_key(1, 0, 1);
    assert_int_equal(kvt_ptable_find(&t, &k), b);
    k = t_key(2, 3, 0);
    assert_int_equal(kvt_ptable_find(&t, &k), c);
    k = t_key(2, 0, 3); /* same numbers, other fields: must not match */
    assert_int_equal(kvt_ptable_find(&t, &k), KVT_NONE);
    kvt_ptable_remove(&t, a);
    k = t_key(1, 0, 0);
    assert_int_equal(kvt_ptable_find(&t, &k), KVT_NONE);
    k = t_key(1, 0, 1);
    assert_int_equal(kvt_ptable_find(&t, &k), b);
    assert_int_equal(t.count, 2);
    kvt_ptable_fini(&t);
}

static void test_duplicate_key(void **state)
{
    struct kvt_ptable t;
    assert_int_equal(kvt_ptable_init(&t, 4, &meta), 0);
    add(&t, t_key(7, 7, 7));
    uint32_t pg = kvt_ptable_new(&t);
    kvt_pg(&t, pg)->key = t_key(7, 7, 7);
    assert_int_equal(kvt_ptable_insert(&t, pg), -EEXIST);
    assert_int_equal(t.count, 1);
    kvt_ptable_fini(&t);
}

/* Heavy churn with growth: the index must find exactly the live keys after
 * every mix of inserts and backward-shift deletions. */
static void test_churn_against_model(void **state)
{
    struct kvt_ptable t;
    enum { N = 5000 };
    static uint32_t where[N];
    assert_int_equal(kvt_ptable_init(&t, 8, &meta), 0);
    for (int i = 0; i < N; i++)
        where[i] = KVT_NONE;
    uint64_t x = 12345;
    for (int step = 0; step < 60000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((x >> 33) % N);
        kvt_key k = t_key((uint64_t)i * 7919, (uint32_t)(i % 3), (uint32_t)(i / 3));
        if (where[i] == KVT_NONE) {
            where[i] = add(&t, k);
        } else {
            assert_int_equal(kvt_ptable_find(&t, &k), where[i]);
            kvt_ptable_remove(&t, where[i]);
            kvt_ptable_delete(&t, where[i]);
            where[i] = KVT_NONE;
        }
    }
    uint32_t live = 0;
    for (int i = 0; i < N; i++) {
        kvt_key k = t_key((uint64_t)i * 7919, (uint32_t)(i % 3), (uint32_t)(i / 3));
        assert_int_equal(kvt_ptable_find(&t, &k), where[i]);
        live += where[i] != KVT_NONE;
    }
    assert_int_equal(t.count, live);
    /* Load factor stays at or under one half. */
    assert_true((uint64_t)t.count * 2 <= (uint64_t)t.index_mask + 1);
    kvt_ptable_fini(&t);
}

static void test_records_reused(void **state)
{
    struct kvt_ptable t;
    assert_int_equal(kvt_ptable_init(&t, 2, &meta), 0);
    uint32_t a = kvt_ptable_new(&t), b = kvt_ptable_new(&t);
    assert_int_not_equal(a, b);
    kvt_ptable_delete(&t, a);
    uint32_t c = kvt_ptable_new(&t);
    assert_int_equal(c, a); /* freed records come back first */
    assert_int_equal(kvt_pg(&t, c)->slot[0], KVT_NONE);
    assert_int_equal(kvt_pg(&t, c)->pins, 0);
    uint32_t d = kvt_ptable_new(&t); /* grows past the initial 2 */
    assert_int_not_equal(d, KVT_NONE);
    assert_true(t.cap >= 3);
    kvt_ptable_fini(&t);
}

static void test_meta_accounted(void **state)
{
    uint64_t m = 0;
    struct kvt_ptable t;
    assert_int_equal(kvt_ptable_init(&t, 1000, &m), 0);
    assert_true(m >= 1000 * sizeof(struct kvt_page));
    /* 64 since the put's checksum (kvt_page.crc): within the 128-byte budget
     * per page with everything else (test_meta). */
    assert_true(sizeof(struct kvt_page) <= 64);
    assert_true(m >= 1000 * 40);
    kvt_ptable_fini(&t);
    assert_int_equal(m, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_find_remove),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_churn_against_model),
        cmocka_unit_test(test_records_reused),
        cmocka_unit_test(test_meta_accounted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
