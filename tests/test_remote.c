/*
 * test_remote.c — the shared tier above the wire: frames, the publish
 * queue, loads and lookups, over the lab's in-memory transport
 * (lab/kv_mem.h), where every fault can be made on demand. The same code
 * on a real Redis Cluster: tests/test_remote_cluster.c.
 */
#include "tests/helpers.h"

#include "lab/kv_mem.h"
#include "lab/lab.h"
#include "store/remote_frame.h"

#define PAGE T_PAGE
#define FP 0xfeedfacecafef00dull

static kvt_config remote_config(size_t hbm, size_t dram)
{
    kvt_config c = t_config(PAGE, hbm, dram);
    c.policy = NULL;
    c.flags = KVT_FLAG_EVICT;
    c.fingerprint = FP;
    c.remote_url = "redis://lab:1";
    return c;
}

static kvt_engine *open_on(struct kvt_kv_mem *m, kvt_config *c)
{
    struct kvt_test_hooks h = { .remote = m };
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open_with_hooks(c, &h, &e), 0);
    return e;
}

static void put_pages(kvt_engine *e, uint64_t id, uint32_t n, uint64_t v)
{
    uint8_t *buf = malloc(PAGE);
    for (uint32_t i = 0; i < n; i++) {
        kvt_key k = t_key(id, 0, i);
        util_pattern_fill(buf, PAGE, k, v);
        const void *src = buf;
        int r = kvt_put(e, &k, 1, &src, 0);
        if (r)
            fprintf(stderr, "put %u: %s\n", i, kvt_last_error());
        assert_int_equal(r, 0);
    }
    free(buf);
}

/* Reads id's n pages through e: how many came back right; a wrong byte fails. */
static uint32_t read_pages(kvt_engine *e, uint64_t id, uint32_t n, uint64_t v)
{
    uint8_t *buf = aligned_alloc(4096, PAGE);
    uint32_t ok = 0;
    for (uint32_t i = 0; i < n; i++) {
        kvt_key k = t_key(id, 0, i);
        int found = 0;
        void *dst = buf;
        assert_int_equal(kvt_get(e, &k, 1, &dst, 0, &found), 0);
        if (found) {
            assert_true(util_pattern_check(buf, PAGE, k, v));
            ok++;
        }
    }
    free(buf);
    return ok;
}

/* kvt_flush, its message shown when it fails. */
static void flush_ok(kvt_engine *e)
{
    int r = kvt_flush(e);
    if (r)
        fprintf(stderr, "flush: %s\n", kvt_last_error());
    assert_int_equal(r, 0);
}

static kvt_stats stats_of(kvt_engine *e)
{
    kvt_stats s;
    assert_int_equal(kvt_get_stats(e, &s), 0);
    return s;
}

static void test_a_page_put_by_one_engine_is_read_by_another(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(4, 8);
    kvt_engine *a = open_on(m, &c), *b = open_on(m, &c);
    put_pages(a, 7, 20, 1);
    flush_ok(a); /* the queue is sent */
    assert_int_equal(kvt_kv_mem_count(m), 20);

    kvt_key keys[20];
    kvt_tier where[20];
    for (uint32_t i = 0; i < 20; i++)
        keys[i] = t_key(7, 0, i);
    assert_int_equal(kvt_exists(b, keys, 20, where), 20);
    for (int i = 0; i < 20; i++)
        assert_int_equal(where[i], KVT_TIER_REMOTE);
    assert_int_equal(read_pages(b, 7, 20, 1), 20);
    kvt_stats s = stats_of(b);
    assert_int_equal(s.remote_hits, 20);
    assert_int_equal(s.remote_corrupt, 0);
    assert_int_equal(s.remote_lost, 0);
    /* Loaded pages are kept locally: b's DRAM (8 pages) holds the last ones. */
    assert_int_equal(kvt_exists(b, &keys[19], 1, where), 1);
    assert_true(where[0] == KVT_TIER_DRAM || where[0] == KVT_TIER_HBM);
    /* and are not published again. */
    assert_int_equal(stats_of(b).remote_published, 0);
    assert_int_equal(stats_of(a).remote_published, 20);
    kvt_close(a);
    kvt_close(b);
    kvt_kv_mem_free(m);
}

static void test_a_value_that_is_not_ours_reads_as_a_miss_counted(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    kvt_engine *a = open_on(m, &c);
    put_pages(a, 1, 4, 3);
    flush_ok(a);
    kvt_close(a);

    char n0[KVT_RFRAME_KEY_MAX], n1[KVT_RFRAME_KEY_MAX], n2[KVT_RFRAME_KEY_MAX],
        n3[KVT_RFRAME_KEY_MAX];
    kvt_key k0 = t_key(1, 0, 0), k1 = t_key(1, 0, 1), k2 = t_key(1, 0, 2), k3 = t_key(1, 0, 3);
    assert_true(kvt_rframe_name(n0, sizeof(n0), "kvtier", FP, &k0) > 0);
    assert_true(kvt_rframe_name(n1, sizeof(n1), "kvtier", FP, &k1) > 0);
    assert_true(kvt_rframe_name(n2, sizeof(n2), "kvtier", FP, &k2) > 0);
    assert_true(kvt_rframe_name(n3, sizeof(n3), "kvtier", FP, &k3) > 0);
    size_t vlen = KVT_RFRAME_HDR + PAGE;
    uint8_t *v = malloc(vlen);
    /* 0: garbage; 1: page 2's value under page 1's name; 2: truncated;
     * 3: one payload bit flipped. */
    memset(v, 0xA5, vlen);
    assert_int_equal(kvt_kv_mem_set_raw(m, n0, v, vlen), 0);
    assert_int_equal(kvt_kv_mem_get_raw(m, n2, v, vlen), (long)vlen);
    assert_int_equal(kvt_kv_mem_set_raw(m, n1, v, vlen), 0);
    assert_int_equal(kvt_kv_mem_set_raw(m, n2, v, vlen - 1), 0);
    assert_int_equal(kvt_kv_mem_get_raw(m, n3, v, vlen), (long)vlen);
    v[KVT_RFRAME_HDR + 100] ^= 0x10;
    assert_int_equal(kvt_kv_mem_set_raw(m, n3, v, vlen), 0);

    kvt_engine *b = open_on(m, &c);
    assert_int_equal(read_pages(b, 1, 4, 3), 0);
    kvt_stats s = stats_of(b);
    assert_int_equal(s.remote_corrupt, 4);
    assert_int_equal(s.remote_misses, 4);
    assert_int_equal(s.remote_hits, 0);
    kvt_close(b);

    /* Another model's engine never even meets these keys. */
    kvt_config other = c;
    other.fingerprint = FP + 1;
    kvt_engine *o = open_on(m, &other);
    put_pages(o, 1, 4, 9);
    flush_ok(o);
    kvt_close(o);
    assert_int_equal(kvt_kv_mem_count(m), 8);
    b = open_on(m, &c);
    assert_int_equal(read_pages(b, 1, 4, 3), 0);
    kvt_close(b);
    free(v);
    kvt_kv_mem_free(m);
}

static void test_a_cluster_that_does_not_answer_is_a_miss_not_an_error(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    kvt_engine *a = open_on(m, &c), *b = open_on(m, &c);
    put_pages(a, 5, 3, 2);
    flush_ok(a);
    kvt_kv_mem_fail(m, -ETIMEDOUT, 2); /* exists and get time out */
    kvt_key k = t_key(5, 0, 0);
    kvt_tier w;
    assert_int_equal(kvt_exists(b, &k, 1, &w), 0);
    assert_int_equal(w, KVT_TIER_NONE);
    assert_int_equal(read_pages(b, 5, 1, 2), 0);
    kvt_stats s = stats_of(b);
    assert_int_equal(s.remote_timeouts, 2);
    /* It answers again: the page is there. */
    assert_int_equal(read_pages(b, 5, 3, 2), 3);
    /* A publish that fails is counted, the put itself succeeds. */
    kvt_kv_mem_fail(m, -ECONNREFUSED, 1);
    put_pages(a, 6, 1, 1);
    flush_ok(a);
    s = stats_of(a);
    assert_int_equal(s.remote_unpublished, 1);
    assert_int_equal(s.remote_errors, 1);
    kvt_close(a);
    kvt_close(b);
    kvt_kv_mem_free(m);
}

static void test_a_page_the_store_dropped_after_a_lookup_is_counted_lost(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    kvt_engine *a = open_on(m, &c), *b = open_on(m, &c);
    put_pages(a, 9, 2, 1);
    flush_ok(a);
    kvt_key keys[2] = { t_key(9, 0, 0), t_key(9, 0, 1) };
    assert_int_equal(kvt_exists(b, keys, 2, NULL), 2);
    kvt_kv_mem_clear(m); /* Redis evicted them in between */
    assert_int_equal(read_pages(b, 9, 2, 1), 0);
    kvt_stats s = stats_of(b);
    assert_int_equal(s.remote_lost, 2);
    assert_int_equal(s.remote_misses, 2);
    kvt_close(a);
    kvt_close(b);
    kvt_kv_mem_free(m);
}

static void test_publish_on_evict_sends_only_what_the_cache_drops(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    c.remote_publish = KVT_PUBLISH_EVICT;
    kvt_engine *a = open_on(m, &c);
    put_pages(a, 3, 4, 1);
    flush_ok(a);
    assert_int_equal(kvt_kv_mem_count(m), 0); /* all 4 still fit */
    put_pages(a, 4, 6, 1);                    /* 6 more: 4 dropped */
    flush_ok(a);
    kvt_stats s = stats_of(a);
    assert_int_equal(s.evicted_pages, s.remote_published + s.remote_unpublished);
    assert_true(s.remote_published > 0);
    assert_int_equal(kvt_kv_mem_count(m), s.remote_published);
    kvt_engine *b = open_on(m, &c);
    assert_int_equal(read_pages(b, 3, 4, 1) + read_pages(b, 4, 6, 1), s.remote_published);
    kvt_close(a);
    kvt_close(b);
    kvt_kv_mem_free(m);
}

static void test_a_page_from_the_store_is_not_sent_back_when_dropped(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    kvt_engine *w = open_on(m, &c);
    put_pages(w, 30, 4, 1);
    flush_ok(w);
    kvt_close(w);
    c.remote_publish = KVT_PUBLISH_EVICT;
    kvt_engine *r = open_on(m, &c);
    assert_int_equal(read_pages(r, 30, 4, 1), 4); /* loaded, kept locally */
    uint64_t sets = kvt_kv_mem_sets(m);
    put_pages(r, 31, 12, 1);                      /* everything else is dropped */
    flush_ok(r);
    kvt_stats s = stats_of(r);
    assert_true(s.evicted_pages >= 10);
    assert_int_equal(kvt_kv_mem_sets(m) - sets, s.remote_published);
    /* The four loaded pages went without being sent back. */
    assert_int_equal(s.evicted_pages - s.remote_published - s.remote_unpublished, 4);
    kvt_close(r);
    kvt_kv_mem_free(m);
}

static void test_explicit_publishing_sends_only_what_is_named(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 8);
    c.remote_publish = KVT_PUBLISH_EXPLICIT;
    kvt_engine *a = open_on(m, &c);
    put_pages(a, 2, 4, 5);
    kvt_key keys[3] = { t_key(2, 0, 1), t_key(2, 0, 3), t_key(99, 0, 0) };
    assert_int_equal(kvt_publish(a, keys, 3), 2); /* the third is in no tier */
    flush_ok(a);
    assert_int_equal(kvt_kv_mem_count(m), 2);
    kvt_engine *b = open_on(m, &c);
    assert_int_equal(read_pages(b, 2, 4, 5), 2);
    kvt_close(a);
    kvt_close(b);
    kvt_kv_mem_free(m);
}

static void test_an_overwrite_replaces_the_shared_page(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    kvt_engine *a = open_on(m, &c);
    put_pages(a, 8, 1, 1);
    put_pages(a, 8, 1, 2); /* the same key, a new version */
    flush_ok(a);
    kvt_engine *b = open_on(m, &c);
    assert_int_equal(read_pages(b, 8, 1, 2), 1);
    kvt_close(a);
    kvt_close(b);
    kvt_kv_mem_free(m);
}

static void test_a_full_queue_drops_publishing_never_the_put(void **state)
{
    struct kvt_kv_mem *m = kvt_kv_mem_new();
    kvt_config c = remote_config(2, 4);
    c.remote_queue_bytes = PAGE; /* the smallest queue (two batches' room) */
    kvt_engine *a = open_on(m, &c);
    kvt_kv_mem_fail(m, -ETIMEDOUT, 0);
    put_pages(a, 4, 200, 1);
    flush_ok(a);
    kvt_stats s = stats_of(a);
    assert_int_equal(s.remote_published + s.remote_unpublished, 200);
    assert_int_equal(kvt_kv_mem_count(m), s.remote_published);
    kvt_close(a);
    kvt_kv_mem_free(m);
}

static void test_remote_fields_are_checked_at_open(void **state)
{
    kvt_config c = t_config(PAGE, 2, 4);
    c.remote_prefix = "x";
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "remote_url"));
    c = t_config(PAGE, 2, 4);
    c.remote_url = "http://127.0.0.1:1";
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    c.remote_url = "redis://127.0.0.1:1";
    c.remote_prefix = "a{b}";
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "remote_prefix"));
    c.remote_prefix = NULL;
    c.remote_publish = 7;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    c.remote_publish = 0;
    assert_int_equal(kvt_config_check(&c), 0);
    kvt_engine *e = NULL;
    assert_int_equal(kvt_publish(e, NULL, 0), -EINVAL);
}

static void test_a_frame_fails_on_any_damaged_byte(void **state)
{
    uint8_t page[PAGE], val[KVT_RFRAME_HDR + PAGE];
    kvt_key k = t_key(11, 2, 3);
    util_pattern_fill(page, PAGE, k, 1);
    kvt_rframe_header(val, &k, FP, page, PAGE);
    memcpy(val + KVT_RFRAME_HDR, page, PAGE);
    assert_int_equal(kvt_rframe_check(val, sizeof(val), &k, FP, PAGE), 0);
    /* Every header byte, and a payload byte at every 97th offset. */
    for (size_t i = 0; i < sizeof(val); i += i < KVT_RFRAME_HDR ? 1 : 97) {
        val[i] ^= 1;
        assert_int_equal(kvt_rframe_check(val, sizeof(val), &k, FP, PAGE), KVT_ECORRUPT);
        val[i] ^= 1;
    }
    kvt_key other = t_key(11, 2, 4);
    assert_int_equal(kvt_rframe_check(val, sizeof(val), &other, FP, PAGE), KVT_ECORRUPT);
    assert_int_equal(kvt_rframe_check(val, sizeof(val), &k, FP ^ 1, PAGE), KVT_ECORRUPT);
    assert_int_equal(kvt_rframe_check(val, sizeof(val) - 1, &k, FP, PAGE), KVT_ECORRUPT);
    assert_int_equal(kvt_rframe_check(val, 10, &k, FP, PAGE), KVT_ECORRUPT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_page_put_by_one_engine_is_read_by_another),
        cmocka_unit_test(test_a_value_that_is_not_ours_reads_as_a_miss_counted),
        cmocka_unit_test(test_a_cluster_that_does_not_answer_is_a_miss_not_an_error),
        cmocka_unit_test(test_a_page_the_store_dropped_after_a_lookup_is_counted_lost),
        cmocka_unit_test(test_publish_on_evict_sends_only_what_the_cache_drops),
        cmocka_unit_test(test_a_page_from_the_store_is_not_sent_back_when_dropped),
        cmocka_unit_test(test_explicit_publishing_sends_only_what_is_named),
        cmocka_unit_test(test_an_overwrite_replaces_the_shared_page),
        cmocka_unit_test(test_a_full_queue_drops_publishing_never_the_put),
        cmocka_unit_test(test_remote_fields_are_checked_at_open),
        cmocka_unit_test(test_a_frame_fails_on_any_damaged_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
