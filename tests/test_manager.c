/*
 * test_manager.c — the tier manager through the public API on the host
 * back-end: create/acquire/release, promotion and demotion, pins, dirty
 * write-back, capacity limits, put/get/exists, drop, async acquire, flush and
 * the statistics that show the moves really happened.
 *
 * Every page's content comes from t_fill(key, version), so any page served
 * under the wrong key, at a stale version or torn is caught by t_check().
 */
#include <errno.h>

#include "helpers.h"

#define PB ((size_t)T_PAGE)

/* ---------------------------------------------------------------- fixtures */

static int open_engine(void **state, size_t hbm_pages, size_t dram_pages)
{
    kvt_config c = t_config(PB, hbm_pages, dram_pages);
    kvt_engine *e = NULL;
    int r = kvt_open(&c, &e);
    if (r) {
        print_error("kvt_open: %s (%s)\n", kvt_strerror(r), kvt_last_error());
        return -1;
    }
    *state = e;
    return 0;
}

static int close_engine(void **state)
{
    kvt_close(*state);
    *state = NULL;
    return 0;
}

#define SETUP(name, h, d)                                                                \
    static int name(void **state) { return open_engine(state, h, d); }

SETUP(setup_h4_d8, 4, 8)
SETUP(setup_h2_d8, 2, 8)
SETUP(setup_h2_d4, 2, 4)
SETUP(setup_h4_d2, 4, 2)
SETUP(setup_h4_d16, 4, 16)
SETUP(setup_h256_d768, 256, 768)

/* ---------------------------------------------------------------- helpers */

static void *page_new(void)
{
    void *p = aligned_alloc(4096, PB);
    assert_non_null(p);
    return p;
}

/* create + fill + release(dirty); asserts each step. */
static void create_page(kvt_engine *e, kvt_key k, uint32_t v)
{
    void *p = NULL;
    int r = kvt_create(e, k, &p);
    if (r)
        print_error("kvt_create(%llu,%u,%u): %s\n", (unsigned long long)k.id, k.layer,
                    k.index, kvt_strerror(r));
    assert_int_equal(r, 0);
    assert_non_null(p);
    t_fill_page(e, p, PB, k, v);
    assert_int_equal(kvt_release(e, &k, 1, 1), 0);
}

static int put_page(kvt_engine *e, kvt_key k, uint32_t v)
{
    void *b = page_new();
    t_fill(b, PB, k, v);
    const void *src[1] = { b };
    int r = kvt_put(e, &k, 1, src, 0);
    free(b);
    return r;
}

/* kvt_get of one key: asserts success, that it is found and exact. */
static void assert_get(kvt_engine *e, kvt_key k, uint32_t v)
{
    void *b = page_new();
    memset(b, 0, PB);
    int found = -1;
    void *dst[1] = { b };
    assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
    if (found != 1 || !t_check(b, PB, k, v))
        print_error("get (%llu,%u,%u) v%u: found=%d exact=%d\n", (unsigned long long)k.id,
                    k.layer, k.index, v, found, t_check(b, PB, k, v));
    assert_int_equal(found, 1);
    assert_true(t_check(b, PB, k, v));
    free(b);
}

static void assert_missing(kvt_engine *e, kvt_key k)
{
    void *b = page_new();
    memset(b, 0x5C, PB);
    int found = -1;
    void *dst[1] = { b };
    assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
    assert_int_equal(found, 0);
    const uint8_t *u = b;
    for (size_t i = 0; i < PB; i++)
        assert_int_equal(u[i], 0x5C); /* dst untouched on a miss */
    kvt_tier w = KVT_TIER_HBM;
    assert_int_equal(kvt_exists(e, &k, 1, &w), 0);
    assert_int_equal(w, KVT_TIER_NONE);
    free(b);
}

/* acquire + check + release(clean). */
static void assert_acquire(kvt_engine *e, kvt_key k, uint32_t v)
{
    void *p = NULL;
    int r = kvt_acquire(e, &k, 1, &p);
    if (r)
        print_error("acquire (%llu,%u,%u): %s\n", (unsigned long long)k.id, k.layer, k.index,
                    kvt_strerror(r));
    assert_int_equal(r, 0);
    assert_non_null(p);
    assert_true(t_check_page(e, p, PB, k, v));
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
}

/* Invariants that hold for every snapshot. */
static void assert_stats_consistent(const kvt_stats *s)
{
    assert_true(s->resident_pages[KVT_TIER_HBM] <= s->capacity_pages[KVT_TIER_HBM]);
    assert_true(s->resident_pages[KVT_TIER_DRAM] <= s->capacity_pages[KVT_TIER_DRAM]);
    assert_int_equal(s->resident_pages[KVT_TIER_SSD], 0);
    assert_true(s->pinned_pages <= s->resident_pages[KVT_TIER_HBM]); /* pinned means in HBM */
    assert_true(s->pinned_pages <= s->pages);
    /* every page has at least one copy; no page has more than two */
    assert_true(s->resident_pages[KVT_TIER_HBM] + s->resident_pages[KVT_TIER_DRAM] >= s->pages);
    assert_true(s->resident_pages[KVT_TIER_HBM] + s->resident_pages[KVT_TIER_DRAM] <= 2 * s->pages);
}

/* ------------------------------------------------- create/acquire/release */

static void test_create_release_acquire(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(1, 2, 3);
    void *p = NULL;
    assert_int_equal(kvt_create(e, k, &p), 0);
    assert_non_null(p);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pinned_pages, 1);
    assert_int_equal(s.pages, 1);
    assert_int_equal(s.resident_pages[KVT_TIER_HBM], 1);
    t_fill_page(e, p, PB, k, 1);
    assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);

    void *q = NULL;
    assert_int_equal(kvt_acquire(e, &k, 1, &q), 0);
    assert_true(t_check_page(e, q, PB, k, 1));
    assert_int_equal(t_stats(e).pinned_pages, 1);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_get(e, k, 1);
    assert_int_equal(t_where(e, k), KVT_TIER_HBM);
}

static void test_create_existing_key(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(1, 0, 0);
    create_page(e, k, 1);
    void *p = (void *)(uintptr_t)0x1;
    assert_int_equal(kvt_create(e, k, &p), -EEXIST);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    assert_int_equal(t_stats(e).pages, 1);
    assert_get(e, k, 1);

    kvt_key q = t_key(2, 0, 0); /* existing because put, not created */
    assert_int_equal(put_page(e, q, 4), 0);
    assert_int_equal(kvt_create(e, q, &p), -EEXIST);
    assert_get(e, q, 4);
}

/* ------------------------------------------------------- promote / demote */

static void test_promote_from_dram(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(5, 1, 0);
    assert_int_equal(put_page(e, k, 1), 0);
    assert_int_equal(t_where(e, k), KVT_TIER_DRAM);

    kvt_stats s0 = t_stats(e);
    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
    assert_true(t_check_page(e, p, PB, k, 1));
    kvt_stats s1 = t_stats(e);
    assert_int_equal(s1.bytes_up[KVT_TIER_HBM] - s0.bytes_up[KVT_TIER_HBM], PB);
    assert_int_equal(s1.misses[KVT_TIER_HBM] - s0.misses[KVT_TIER_HBM], 1);
    assert_int_equal(s1.hits[KVT_TIER_HBM], s0.hits[KVT_TIER_HBM]);
    assert_int_equal(s1.resident_pages[KVT_TIER_HBM], s0.resident_pages[KVT_TIER_HBM] + 1);
    /* inclusive: the clean page keeps its DRAM copy */
    assert_int_equal(s1.resident_pages[KVT_TIER_DRAM], s0.resident_pages[KVT_TIER_DRAM]);
    assert_int_equal(s1.pinned_pages, 1);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_int_equal(t_where(e, k), KVT_TIER_HBM);

    kvt_stats s2 = t_stats(e);
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
    assert_true(t_check_page(e, p, PB, k, 1));
    kvt_stats s3 = t_stats(e);
    assert_int_equal(s3.hits[KVT_TIER_HBM] - s2.hits[KVT_TIER_HBM], 1);
    assert_int_equal(s3.misses[KVT_TIER_HBM], s2.misses[KVT_TIER_HBM]);
    assert_int_equal(s3.bytes_up[KVT_TIER_HBM], s2.bytes_up[KVT_TIER_HBM]);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_stats_consistent(&s3);
}

/* More pages than HBM slots: the older ones go down and all stay exact. */
static void test_demote_when_hbm_full(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 16 DRAM */
    enum { N = 12 };
    for (uint32_t i = 0; i < N; i++)
        create_page(e, t_key(9, 0, i), 100 + i);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, N);
    assert_true(s.resident_pages[KVT_TIER_HBM] <= 4);
    assert_true(s.bytes_down[KVT_TIER_HBM] >= (uint64_t)(N - 4) * PB);
    assert_stats_consistent(&s);

    for (uint32_t i = 0; i < N; i++)
        assert_get(e, t_key(9, 0, i), 100 + i);
    kvt_stats s0 = t_stats(e);
    for (uint32_t i = 0; i < N; i++)
        assert_acquire(e, t_key(9, 0, i), 100 + i);
    kvt_stats s1 = t_stats(e);
    assert_true(s1.bytes_up[KVT_TIER_HBM] - s0.bytes_up[KVT_TIER_HBM] >= (uint64_t)(N - 4) * PB);
    assert_true(s1.misses[KVT_TIER_HBM] - s0.misses[KVT_TIER_HBM] >= N - 4);
    for (uint32_t i = 0; i < N; i++)
        assert_get(e, t_key(9, 0, i), 100 + i);
    assert_stats_consistent(&s1);
}

/* Pinned pages stay put (same address, same bytes) while others cycle
 * through the remaining HBM slots. */
static void test_evict_around_pins(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 16 DRAM */
    kvt_key a = t_key(1, 0, 0), b = t_key(1, 0, 1);
    void *pa = NULL, *pb = NULL;
    assert_int_equal(kvt_create(e, a, &pa), 0);
    t_fill_page(e, pa, PB, a, 1);
    assert_int_equal(put_page(e, b, 2), 0);
    assert_int_equal(kvt_acquire(e, &b, 1, &pb), 0);
    assert_true(t_check_page(e, pb, PB, b, 2));

    kvt_stats s0 = t_stats(e);
    for (uint32_t i = 0; i < 10; i++)
        create_page(e, t_key(2, 0, i), i);
    for (int round = 0; round < 2; round++)
        for (uint32_t i = 0; i < 10; i++)
            assert_acquire(e, t_key(2, 0, i), i);
    kvt_stats s1 = t_stats(e);
    assert_true(s1.bytes_down[KVT_TIER_HBM] - s0.bytes_down[KVT_TIER_HBM] >= 8 * PB);
    assert_true(s1.bytes_up[KVT_TIER_HBM] - s0.bytes_up[KVT_TIER_HBM] >= 10 * PB);
    assert_int_equal(s1.pinned_pages, 2);

    assert_true(t_check_page(e, pa, PB, a, 1));
    assert_true(t_check_page(e, pb, PB, b, 2));
    void *pa2 = NULL;
    assert_int_equal(kvt_acquire(e, &a, 1, &pa2), 0); /* a second pin: same address */
    assert_ptr_equal(pa2, pa);
    assert_int_equal(kvt_release(e, &a, 1, 0), 0);

    assert_int_equal(kvt_release(e, &a, 1, 1), 0);
    assert_int_equal(kvt_release(e, &b, 1, 0), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    for (uint32_t i = 0; i < 10; i++)
        assert_acquire(e, t_key(2, 0, i), i);
    assert_get(e, a, 1);
    assert_get(e, b, 2);
}

/* ---------------------------------------------------------------- dirty */

/* A rewritten page is written back before it leaves HBM, however often. */
static void test_dirty_writeback_survives_eviction(void **state)
{
    kvt_engine *e = *state; /* 2 HBM, 8 DRAM */
    kvt_key k = t_key(3, 0, 0);
    kvt_key f[3] = { t_key(4, 0, 0), t_key(4, 0, 1), t_key(4, 0, 2) };
    create_page(e, k, 1);
    for (int i = 0; i < 3; i++)
        create_page(e, f[i], 50);

    for (uint32_t v = 2; v <= 6; v++) {
        void *p = NULL;
        kvt_stats s0 = t_stats(e);
        assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
        assert_true(t_check_page(e, p, PB, k, v - 1));
        t_fill_page(e, p, PB, k, v);
        assert_int_equal(kvt_release(e, &k, 1, 1), 0);
        /* Other pages through the two slots until k leaves HBM. Usually
         * three do it; but k's write-back is asynchronous, and while it is
         * in flight the engine evicts a clean page instead, so under load
         * k was still in HBM after three (2 of 400 runs four at a time;
         * once in a ctest -j4 soak). The bound only ends a broken engine's
         * loop. */
        unsigned n = 0;
        do
            assert_acquire(e, f[n % 3], 50);
        while (++n < 3 || (t_where(e, k) == KVT_TIER_HBM && n < 100000));
        assert_int_equal(t_where(e, k), KVT_TIER_DRAM); /* it really left HBM */
        kvt_stats s1 = t_stats(e);
        assert_true(s1.bytes_down[KVT_TIER_HBM] - s0.bytes_down[KVT_TIER_HBM] >= PB);
        assert_get(e, k, v);
    }
    assert_acquire(e, k, 6);
}

/* A dirty release makes the DRAM copy kept by inclusive caching stale: it
 * must never be served again. */
static void test_dirty_release_supersedes_dram_copy(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    kvt_key k = t_key(6, 0, 0);
    assert_int_equal(put_page(e, k, 1), 0);
    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0); /* HBM copy + DRAM copy */
    assert_true(t_check_page(e, p, PB, k, 1));
    t_fill_page(e, p, PB, k, 2);
    assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    assert_get(e, k, 2);
    assert_int_equal(t_where(e, k), KVT_TIER_HBM);
    assert_acquire(e, k, 2);

    /* clean pin/unpin does not disturb it */
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_get(e, k, 2);

    /* force it out and back */
    for (uint32_t i = 0; i < 6; i++)
        create_page(e, t_key(7, 0, i), i);
    assert_int_equal(t_where(e, k), KVT_TIER_DRAM);
    assert_get(e, k, 2);
    assert_acquire(e, k, 2);
}

/* ---------------------------------------------------------------- limits */

/* Every HBM slot pinned: new pages cannot come up, nothing is corrupted. */
static void test_all_pinned_hbm_full(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    kvt_key pk = t_key(20, 0, 0);
    assert_int_equal(put_page(e, pk, 9), 0);
    kvt_key a[4];
    void *pa[4];
    for (uint32_t i = 0; i < 4; i++) {
        a[i] = t_key(21, 0, i);
        assert_int_equal(kvt_create(e, a[i], &pa[i]), 0);
        t_fill_page(e, pa[i], PB, a[i], 1 + i);
    }
    assert_int_equal(t_stats(e).pinned_pages, 4);

    kvt_key x = t_key(22, 0, 0);
    void *px = NULL;
    assert_int_equal(kvt_create(e, x, &px), KVT_EFULL);
    assert_int_equal(t_where(e, x), KVT_TIER_NONE);

    void *pp[2] = { NULL, NULL };
    assert_int_equal(kvt_acquire(e, &pk, 1, pp), KVT_EFULL);
    kvt_key mix[2] = { a[0], pk };
    assert_int_equal(kvt_acquire(e, mix, 2, pp), KVT_EFULL);
    kvt_ticket t = 0;
    assert_int_equal(kvt_acquire_async(e, &pk, 1, pp, &t), KVT_EFULL);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pinned_pages, 4);
    assert_int_equal(s.pages, 5);

    /* an already pinned page can be pinned again; DRAM still works */
    void *again = NULL;
    assert_int_equal(kvt_acquire(e, &a[1], 1, &again), 0);
    assert_ptr_equal(again, pa[1]);
    assert_int_equal(kvt_release(e, &a[1], 1, 0), 0);
    assert_get(e, pk, 9);
    kvt_key y = t_key(23, 0, 0);
    assert_int_equal(put_page(e, y, 3), 0);
    assert_get(e, y, 3);

    for (uint32_t i = 0; i < 4; i++)
        assert_true(t_check_page(e, pa[i], PB, a[i], 1 + i));
    assert_int_equal(kvt_release(e, a, 4, 1), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    /* the failed acquire of {a[0], pk} left no pin behind */
    assert_int_equal(kvt_release(e, &a[0], 1, 0), -EINVAL);
    assert_int_equal(kvt_release(e, &pk, 1, 0), -EINVAL);

    for (uint32_t i = 0; i < 4; i++)
        assert_get(e, a[i], 1 + i);
    assert_acquire(e, pk, 9);
    create_page(e, x, 5);
    assert_get(e, x, 5);
    for (uint32_t i = 0; i < 4; i++)
        assert_acquire(e, a[i], 1 + i);
}

/* Keys may repeat in one acquire: each occurrence is one pin. */
static void test_repeated_keys_pin_twice(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(30, 0, 0);
    create_page(e, k, 1);
    kvt_key kk[2] = { k, k };
    void *p[2] = { NULL, NULL };
    assert_int_equal(kvt_acquire(e, kk, 2, p), 0);
    assert_ptr_equal(p[0], p[1]);
    assert_true(t_check_page(e, p[0], PB, k, 1));
    assert_int_equal(t_stats(e).pinned_pages, 1);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_int_equal(t_stats(e).pinned_pages, 1);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    assert_int_equal(kvt_release(e, &k, 1, 0), -EINVAL);

    assert_int_equal(kvt_acquire(e, kk, 2, p), 0);
    assert_int_equal(kvt_release(e, kk, 2, 0), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    /* a release that names a page more often than it is pinned does nothing */
    assert_int_equal(kvt_acquire(e, &k, 1, p), 0);
    assert_int_equal(kvt_release(e, kk, 2, 0), -EINVAL);
    assert_int_equal(t_stats(e).pinned_pages, 1);
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_get(e, k, 1);
}

/* HBM + DRAM slots is the capacity; one more page is KVT_EFULL. */
static void test_total_capacity_create(void **state)
{
    kvt_engine *e = *state; /* 2 HBM, 4 DRAM */
    for (uint32_t i = 0; i < 6; i++)
        create_page(e, t_key(40, 0, i), i + 1);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, 6);
    assert_int_equal(s.resident_pages[KVT_TIER_HBM], 2);
    assert_int_equal(s.resident_pages[KVT_TIER_DRAM], 4);

    kvt_key x = t_key(40, 0, 6);
    void *p = NULL;
    assert_int_equal(kvt_create(e, x, &p), KVT_EFULL);
    assert_int_equal(put_page(e, x, 1), KVT_EFULL);
    assert_int_equal(t_where(e, x), KVT_TIER_NONE);
    s = t_stats(e);
    assert_int_equal(s.pages, 6);
    assert_int_equal(s.pinned_pages, 0);
    for (uint32_t i = 0; i < 6; i++)
        assert_get(e, t_key(40, 0, i), i + 1);

    /* room again after a drop */
    kvt_key d = t_key(40, 0, 0);
    assert_int_equal(kvt_drop(e, &d, 1), 0);
    create_page(e, x, 77);
    assert_get(e, x, 77);
    for (uint32_t i = 1; i < 6; i++)
        assert_get(e, t_key(40, 0, i), i + 1);
}

static void test_total_capacity_put(void **state)
{
    kvt_engine *e = *state; /* 2 HBM, 4 DRAM */
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(put_page(e, t_key(41, 0, i), i + 1), 0);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, 6);
    assert_int_equal(s.resident_pages[KVT_TIER_DRAM], 4); /* DRAM first, then HBM */
    assert_int_equal(s.resident_pages[KVT_TIER_HBM], 2);

    kvt_key x = t_key(41, 0, 6);
    assert_int_equal(put_page(e, x, 1), KVT_EFULL);
    assert_int_equal(t_where(e, x), KVT_TIER_NONE);
    void *p = NULL;
    assert_int_equal(kvt_create(e, x, &p), KVT_EFULL);
    /* overwriting an existing key needs no new slot */
    assert_int_equal(put_page(e, t_key(41, 0, 0), 50), 0);
    assert_int_equal(put_page(e, t_key(41, 0, 5), 55), 0);
    assert_get(e, t_key(41, 0, 0), 50);
    assert_get(e, t_key(41, 0, 5), 55);
    for (uint32_t i = 1; i < 5; i++)
        assert_get(e, t_key(41, 0, i), i + 1);

    /* a batch that does not fit as a whole stores nothing */
    kvt_key d = t_key(41, 0, 1);
    assert_int_equal(kvt_drop(e, &d, 1), 0);
    kvt_key two[2] = { t_key(41, 1, 0), t_key(41, 1, 1) };
    void *b0 = page_new(), *b1 = page_new();
    t_fill(b0, PB, two[0], 1);
    t_fill(b1, PB, two[1], 1);
    const void *src[2] = { b0, b1 };
    assert_int_equal(kvt_put(e, two, 2, src, 0), KVT_EFULL);
    assert_int_equal(t_where(e, two[0]), KVT_TIER_NONE);
    assert_int_equal(t_where(e, two[1]), KVT_TIER_NONE);
    assert_int_equal(t_stats(e).pages, 5);
    assert_int_equal(kvt_put(e, two, 1, src, 0), 0);
    assert_get(e, two[0], 1);
    free(b0);
    free(b1);
}

/* With every slot holding an unpinned page, a DRAM-only page can still be
 * acquired: the contract's KVT_EFULL is only for pages that do not fit
 * beside the pinned ones (nothing is pinned here). */
static void test_acquire_when_every_slot_full(void **state)
{
    kvt_engine *e = *state; /* 2 HBM, 4 DRAM */
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(put_page(e, t_key(42, 0, i), i + 1), 0);
    kvt_key k = t_key(42, 0, 0);
    assert_int_equal(t_where(e, k), KVT_TIER_DRAM);
    void *p = NULL;
    int r = kvt_acquire(e, &k, 1, &p);
    if (r)
        print_error("acquire of a DRAM page in a full, unpinned engine: %s\n", kvt_strerror(r));
    assert_int_equal(r, 0);
    assert_true(t_check_page(e, p, PB, k, 1));
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    for (uint32_t i = 0; i < 6; i++)
        assert_get(e, t_key(42, 0, i), i + 1);
    for (uint32_t i = 0; i < 6; i++)
        assert_acquire(e, t_key(42, 0, i), i + 1);
}

/* ---------------------------------------------------- put / get / exists */

static void test_put_get_roundtrip(void **state)
{
    kvt_engine *e = *state;
    enum { N = 5 };
    kvt_key k[N];
    void *src[N], *dst[N];
    for (uint32_t i = 0; i < N; i++) {
        k[i] = t_key(50, i % 2 ? KVT_ALL_LAYERS : 3, i);
        src[i] = page_new();
        dst[i] = page_new();
        t_fill(src[i], PB, k[i], 7);
        memset(dst[i], 0, PB);
    }
    kvt_stats s0 = t_stats(e);
    assert_int_equal(kvt_put(e, k, N, (const void *const *)src, 0), 0);
    kvt_stats s1 = t_stats(e);
    assert_int_equal(s1.bytes_put - s0.bytes_put, N * PB);
    assert_int_equal(s1.pages, N);
    for (uint32_t i = 0; i < N; i++)
        memset(src[i], 0xEE, PB); /* src is read during the call only */

    int found[N];
    memset(found, 0xFF, sizeof(found));
    assert_int_equal(kvt_get(e, k, N, dst, 0, found), 0);
    kvt_stats s2 = t_stats(e);
    assert_int_equal(s2.bytes_get - s1.bytes_get, N * PB);
    for (uint32_t i = 0; i < N; i++) {
        assert_int_equal(found[i], 1);
        assert_true(t_check(dst[i], PB, k[i], 7));
        memset(dst[i], 0, PB);
    }
    assert_int_equal(kvt_get(e, k, N, dst, 0, NULL), 0); /* found may be NULL */
    for (uint32_t i = 0; i < N; i++) {
        assert_true(t_check(dst[i], PB, k[i], 7));
        free(src[i]);
        free(dst[i]);
    }
}

static void test_get_miss_leaves_dst(void **state)
{
    kvt_engine *e = *state;
    kvt_key k[3] = { t_key(51, 0, 0), t_key(51, 0, 1), t_key(51, 0, 2) };
    assert_int_equal(put_page(e, k[0], 1), 0);
    create_page(e, k[2], 3);
    void *dst[3] = { page_new(), page_new(), page_new() };
    for (int i = 0; i < 3; i++)
        memset(dst[i], 0xAB, PB);
    int found[3] = { -1, -1, -1 };
    kvt_stats s0 = t_stats(e);
    assert_int_equal(kvt_get(e, k, 3, dst, 0, found), 0);
    assert_int_equal(found[0], 1);
    assert_int_equal(found[1], 0);
    assert_int_equal(found[2], 1);
    assert_true(t_check(dst[0], PB, k[0], 1));
    assert_true(t_check(dst[2], PB, k[2], 3));
    const uint8_t *u = dst[1];
    for (size_t i = 0; i < PB; i++)
        assert_int_equal(u[i], 0xAB);
    kvt_stats s1 = t_stats(e);
    assert_int_equal(s1.bytes_get - s0.bytes_get, 2 * PB);
    assert_int_equal(s1.pages, 2); /* a miss creates nothing */

    kvt_key none[2] = { t_key(52, 0, 0), t_key(52, 0, 1) };
    found[0] = found[1] = -1;
    assert_int_equal(kvt_get(e, none, 2, dst, 0, found), 0);
    assert_int_equal(found[0], 0);
    assert_int_equal(found[1], 0);
    for (int i = 0; i < 3; i++)
        free(dst[i]);
}

/* put over an existing key replaces it in every tier, including a clean HBM
 * copy left by an earlier acquire. */
static void test_put_overwrite(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    kvt_key k = t_key(53, 0, 0);
    assert_int_equal(put_page(e, k, 1), 0);
    assert_int_equal(put_page(e, k, 2), 0);
    assert_get(e, k, 2);
    assert_int_equal(t_stats(e).pages, 1);

    assert_acquire(e, k, 2); /* now HBM (clean) + DRAM */
    assert_int_equal(t_where(e, k), KVT_TIER_HBM);
    assert_int_equal(put_page(e, k, 3), 0);
    assert_get(e, k, 3);
    assert_acquire(e, k, 3);

    /* over a dirty HBM page (created, never written back) */
    kvt_key c = t_key(53, 0, 1);
    create_page(e, c, 1);
    assert_int_equal(put_page(e, c, 2), 0);
    assert_get(e, c, 2);
    assert_acquire(e, c, 2);
    for (uint32_t i = 0; i < 8; i++) /* push both out and back */
        create_page(e, t_key(54, 0, i), i);
    assert_get(e, k, 3);
    assert_get(e, c, 2);
    assert_acquire(e, k, 3);
    assert_acquire(e, c, 2);
    assert_int_equal(t_stats(e).pages, 10);
}

static void test_put_pinned_busy(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(55, 0, 0);
    assert_int_equal(put_page(e, k, 1), 0);
    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
    assert_int_equal(put_page(e, k, 2), -EBUSY);
    assert_true(t_check_page(e, p, PB, k, 1));
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    assert_get(e, k, 1);
    assert_int_equal(put_page(e, k, 2), 0);
    assert_get(e, k, 2);
}

static void test_exists_where_and_prefix(void **state)
{
    kvt_engine *e = *state; /* 2 HBM, 8 DRAM */
    kvt_key a = t_key(60, 0, 0), b = t_key(60, 0, 1), m = t_key(60, 0, 2), c = t_key(60, 0, 3);
    assert_int_equal(put_page(e, a, 1), 0);
    create_page(e, b, 1);
    assert_int_equal(put_page(e, c, 1), 0);
    kvt_key ks[4] = { a, b, m, c };
    kvt_tier w[4] = { 99, 99, 99, 99 };
    assert_int_equal(kvt_exists(e, ks, 4, w), 2);
    assert_int_equal(w[0], KVT_TIER_DRAM);
    assert_int_equal(w[1], KVT_TIER_HBM);
    assert_int_equal(w[2], KVT_TIER_NONE);
    assert_int_equal(w[3], KVT_TIER_DRAM);
    assert_int_equal(kvt_exists(e, ks, 4, NULL), 2);
    assert_int_equal(kvt_exists(e, ks, 0, NULL), 0);
    kvt_key ks2[3] = { m, a, b };
    assert_int_equal(kvt_exists(e, ks2, 3, NULL), 0);
    kvt_key ks3[3] = { c, a, b };
    assert_int_equal(kvt_exists(e, ks3, 3, w), 3);

    assert_acquire(e, a, 1); /* promoted: fastest copy is HBM now */
    assert_int_equal(t_where(e, a), KVT_TIER_HBM);
    assert_acquire(e, c, 1); /* two slots: b leaves (written back) */
    assert_int_equal(t_where(e, b), KVT_TIER_DRAM);
    assert_int_equal(t_where(e, c), KVT_TIER_HBM);
    assert_get(e, b, 1);
}

/* ------------------------------------------------------------------ drop */

static void test_drop(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    kvt_key c = t_key(70, 0, 0), p = t_key(70, 0, 1), m = t_key(70, 0, 2), q = t_key(70, 0, 3);
    create_page(e, c, 1);               /* HBM, dirty */
    assert_int_equal(put_page(e, p, 1), 0);
    assert_acquire(e, p, 1);            /* HBM + DRAM */
    assert_int_equal(put_page(e, q, 1), 0); /* DRAM */
    kvt_key ks[4] = { c, p, m, q };
    assert_int_equal(kvt_drop(e, ks, 4), 0);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, 0);
    assert_int_equal(s.resident_pages[KVT_TIER_HBM], 0);
    assert_int_equal(s.resident_pages[KVT_TIER_DRAM], 0);
    for (int i = 0; i < 4; i++) {
        assert_missing(e, ks[i]);
        void *ptr = NULL;
        assert_int_equal(kvt_acquire(e, &ks[i], 1, &ptr), KVT_ENOTFOUND);
        kvt_ticket t = 0;
        assert_int_equal(kvt_acquire_async(e, &ks[i], 1, &ptr, &t), KVT_ENOTFOUND);
    }
    assert_int_equal(t_stats(e).pinned_pages, 0);
    assert_int_equal(kvt_drop(e, ks, 4), 0); /* dropping again: ignored */

    create_page(e, c, 7); /* a dropped key can be reused */
    assert_get(e, c, 7);
    assert_int_equal(put_page(e, p, 8), 0);
    assert_get(e, p, 8);
    assert_acquire(e, p, 8);
}

static void test_drop_pinned_busy(void **state)
{
    kvt_engine *e = *state;
    kvt_key a = t_key(71, 0, 0), b = t_key(71, 0, 1);
    create_page(e, a, 1);
    assert_int_equal(put_page(e, b, 2), 0);
    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &a, 1, &p), 0);
    kvt_key ks[2] = { b, a };
    assert_int_equal(kvt_drop(e, ks, 2), -EBUSY);
    assert_int_equal(t_stats(e).pages, 2); /* b was not dropped either */
    assert_get(e, b, 2);
    assert_true(t_check_page(e, p, PB, a, 1));
    assert_int_equal(kvt_release(e, &a, 1, 0), 0);
    assert_get(e, a, 1);

    /* a created page not yet released is pinned too */
    kvt_key c = t_key(71, 0, 2);
    void *pc = NULL;
    assert_int_equal(kvt_create(e, c, &pc), 0);
    t_fill_page(e, pc, PB, c, 3);
    assert_int_equal(kvt_drop(e, &c, 1), -EBUSY);
    assert_int_equal(kvt_release(e, &c, 1, 1), 0);
    assert_get(e, c, 3);

    assert_int_equal(kvt_drop(e, ks, 2), 0);
    assert_missing(e, a);
    assert_missing(e, b);
    assert_get(e, c, 3);
}

static void test_drop_id(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    kvt_key s7[5] = { t_key(7, 0, 0), t_key(7, 1, 0), t_key(7, KVT_ALL_LAYERS, 1),
                      t_key(7, 0, 2), t_key(7, 5, 9) };
    kvt_key s8[3] = { t_key(8, 0, 0), t_key(8, 1, 0), t_key(8, KVT_ALL_LAYERS, 1) };
    create_page(e, s7[0], 1);
    create_page(e, s7[1], 1);
    assert_int_equal(put_page(e, s7[2], 1), 0);
    assert_int_equal(put_page(e, s7[3], 1), 0);
    assert_acquire(e, s7[3], 1);
    create_page(e, s7[4], 1);
    for (int i = 0; i < 3; i++)
        create_page(e, s8[i], 2);
    assert_int_equal(t_stats(e).pages, 8);

    assert_int_equal(kvt_drop_id(e, 7), 0);
    for (int i = 0; i < 5; i++)
        assert_missing(e, s7[i]);
    assert_int_equal(t_stats(e).pages, 3);
    for (int i = 0; i < 3; i++)
        assert_get(e, s8[i], 2);
    assert_int_equal(kvt_drop_id(e, 99), 0);
    assert_int_equal(kvt_drop_id(e, 7), 0);

    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &s8[1], 1, &p), 0);
    assert_int_equal(kvt_drop_id(e, 8), -EBUSY);
    assert_int_equal(t_stats(e).pages, 3);
    for (int i = 0; i < 3; i++)
        assert_get(e, s8[i], 2);
    assert_int_equal(kvt_release(e, &s8[1], 1, 0), 0);
    assert_int_equal(kvt_drop_id(e, 8), 0);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, 0);
    assert_int_equal(s.resident_pages[KVT_TIER_HBM] + s.resident_pages[KVT_TIER_DRAM], 0);
    for (int i = 0; i < 3; i++)
        assert_missing(e, s8[i]);
}

/* ----------------------------------------------- acquire errors, tickets */

static void test_acquire_missing(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(80, 0, 0), m = t_key(80, 0, 1);
    create_page(e, k, 1);
    kvt_key ks[2] = { k, m };
    void *p[2] = { NULL, NULL };
    assert_int_equal(kvt_acquire(e, ks, 2, p), KVT_ENOTFOUND);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    assert_int_equal(kvt_release(e, &k, 1, 0), -EINVAL);
    kvt_ticket t = 0;
    assert_int_equal(kvt_acquire_async(e, ks, 2, p, &t), KVT_ENOTFOUND);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    assert_int_equal(t_stats(e).pages, 1);
    assert_get(e, k, 1);
}

static void test_acquire_async_wait(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    enum { N = 3 };
    kvt_key k[N];
    for (uint32_t i = 0; i < N; i++) {
        k[i] = t_key(81, 0, i);
        assert_int_equal(put_page(e, k[i], 10 + i), 0);
    }
    kvt_stats s0 = t_stats(e);
    void *p[N] = { NULL };
    kvt_ticket t = 0;
    assert_int_equal(kvt_acquire_async(e, k, N, p, &t), 0);
    assert_true(t != 0);
    for (int i = 0; i < N; i++)
        assert_non_null(p[i]);
    assert_int_equal(t_stats(e).pinned_pages, N); /* pins held from the call on */
    assert_int_equal(kvt_wait(e, t), 0);
    for (uint32_t i = 0; i < N; i++)
        assert_true(t_check_page(e, p[i], PB, k[i], 10 + i));
    kvt_stats s1 = t_stats(e);
    assert_int_equal(s1.bytes_up[KVT_TIER_HBM] - s0.bytes_up[KVT_TIER_HBM], N * PB);
    assert_int_equal(kvt_wait(e, t), -EINVAL);      /* already waited */
    assert_int_equal(kvt_wait(e, 0), -EINVAL);      /* never valid */
    assert_int_equal(kvt_wait(e, t + 12345), -EINVAL);
    assert_int_equal(kvt_wait(e, ~(kvt_ticket)0), -EINVAL);
    assert_int_equal(kvt_release(e, k, N, 0), 0);

    /* two tickets outstanding, waited in reverse order; one already resident */
    kvt_key x = t_key(81, 1, 0);
    assert_int_equal(put_page(e, x, 5), 0);
    void *px = NULL, *pk = NULL;
    kvt_ticket t1 = 0, t2 = 0;
    assert_int_equal(kvt_acquire_async(e, &x, 1, &px, &t1), 0);
    assert_int_equal(kvt_acquire_async(e, &k[0], 1, &pk, &t2), 0);
    assert_true(t1 != 0 && t2 != 0 && t1 != t2);
    assert_int_equal(kvt_wait(e, t2), 0);
    assert_int_equal(kvt_wait(e, t1), 0);
    assert_true(t_check_page(e, px, PB, x, 5));
    assert_true(t_check_page(e, pk, PB, k[0], 10));
    assert_int_equal(kvt_wait(e, t1), -EINVAL);
    assert_int_equal(kvt_wait(e, t2), -EINVAL);
    assert_int_equal(kvt_release(e, &x, 1, 0), 0);
    assert_int_equal(kvt_release(e, &k[0], 1, 0), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);
}

static void test_wait_stream_host(void **state)
{
    kvt_engine *e = *state;
    kvt_key k = t_key(82, 0, 0);
    assert_int_equal(put_page(e, k, 3), 0);
    void *p = NULL;
    kvt_ticket t = 0;
    assert_int_equal(kvt_acquire_async(e, &k, 1, &p, &t), 0);
    /* host: the caller waits; cuda: the default stream does, not the host */
    assert_int_equal(kvt_wait_stream(e, t, NULL), 0);
    assert_int_equal(kvt_wait(e, t), -EINVAL); /* consumed */
    assert_int_equal(kvt_wait_stream(e, t, NULL), -EINVAL);
    if (!t_hbm_cpu(e)) {
        /* The copy may still be in flight, and t_check_page reads on a
         * stream of its own: a second pin's kvt_acquire waits on the host
         * for the same copy, and returns the same page. */
        void *p2 = NULL;
        assert_int_equal(kvt_acquire(e, &k, 1, &p2), 0);
        assert_ptr_equal(p2, p);
        assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    }
    assert_true(t_check_page(e, p, PB, k, 3));
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
}

static void test_release_unpinned(void **state)
{
    kvt_engine *e = *state;
    kvt_key a = t_key(83, 0, 0), b = t_key(83, 0, 1), m = t_key(83, 0, 2);
    create_page(e, a, 1);
    assert_int_equal(put_page(e, b, 2), 0);
    assert_int_equal(kvt_release(e, &a, 1, 0), -EINVAL);
    assert_int_equal(kvt_release(e, &b, 1, 1), -EINVAL);

    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &a, 1, &p), 0);
    kvt_key ab[2] = { a, b };
    assert_int_equal(kvt_release(e, ab, 2, 1), -EINVAL);
    assert_int_equal(t_stats(e).pinned_pages, 1); /* a is still pinned */
    int r = kvt_release(e, &m, 1, 0);
    assert_true(r == KVT_ENOTFOUND || r == -EINVAL);
    assert_int_equal(t_stats(e).pinned_pages, 1);
    assert_int_equal(kvt_release(e, &a, 1, 0), 0);
    assert_int_equal(t_stats(e).pinned_pages, 0);
    assert_get(e, a, 1);
    assert_get(e, b, 2);
    /* the failed dirty release did not make b's copy stale */
    assert_acquire(e, b, 2);
}

/* ------------------------------------------------------------------ flush */

static void test_flush_writes_down(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    for (uint32_t i = 0; i < 4; i++)
        create_page(e, t_key(90, 0, i), i + 1);
    kvt_stats s0 = t_stats(e);
    assert_int_equal(kvt_flush(e), 0);
    kvt_stats s1 = t_stats(e);
    assert_int_equal(s1.pages, 4);
    assert_int_equal(s1.resident_pages[KVT_TIER_DRAM], 4); /* a copy below HBM for each */
    assert_int_equal(s1.resident_pages[KVT_TIER_HBM], 4);  /* flush does not evict */
    assert_true(s1.bytes_down[KVT_TIER_HBM] >= 4 * PB);
    assert_true(s1.bytes_down[KVT_TIER_HBM] >= s0.bytes_down[KVT_TIER_HBM]);

    /* rewrite one: flush writes it again */
    kvt_key k = t_key(90, 0, 2);
    void *p = NULL;
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
    t_fill_page(e, p, PB, k, 33);
    assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    assert_int_equal(kvt_flush(e), 0);
    kvt_stats s2 = t_stats(e);
    assert_int_equal(s2.resident_pages[KVT_TIER_DRAM], 4);
    assert_true(s2.bytes_down[KVT_TIER_HBM] - s1.bytes_down[KVT_TIER_HBM] >= PB);
    assert_int_equal(kvt_flush(e), 0);

    /* the DRAM copies are current: push everything out, read back */
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(put_page(e, t_key(91, 0, i), 0), 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_acquire(e, t_key(91, 0, i), 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_get(e, t_key(90, 0, i), i == 2 ? 33 : i + 1);
}

static void test_flush_dram_full(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 2 DRAM */
    for (uint32_t i = 0; i < 4; i++)
        create_page(e, t_key(92, 0, i), i + 1);
    assert_int_equal(kvt_flush(e), KVT_EFULL);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.resident_pages[KVT_TIER_DRAM], 2); /* the rest are written */
    assert_int_equal(s.pages, 4);
    for (uint32_t i = 0; i < 4; i++)
        assert_get(e, t_key(92, 0, i), i + 1);
    for (uint32_t i = 0; i < 4; i++)
        assert_acquire(e, t_key(92, 0, i), i + 1);
}

/* ------------------------------------------------------------------ stats */

static void test_stats_sanity(void **state)
{
    kvt_engine *e = *state; /* 4 HBM, 8 DRAM */
    kvt_stats s = t_stats(e);
    assert_int_equal(s.capacity_pages[KVT_TIER_HBM], 4);
    assert_int_equal(s.capacity_pages[KVT_TIER_DRAM], 8);
    assert_int_equal(s.capacity_pages[KVT_TIER_SSD], 0);
    assert_int_equal(s.pages, 0);
    assert_int_equal(s.pinned_pages, 0);
    for (int t = 0; t < KVT_TIERS; t++) {
        assert_int_equal(s.resident_pages[t], 0);
        assert_int_equal(s.bytes_up[t], 0);
        assert_int_equal(s.bytes_down[t], 0);
    }
    assert_int_equal(s.errors_device, 0);
    assert_true(s.meta_bytes > 0);

    for (uint32_t i = 0; i < 6; i++)
        create_page(e, t_key(100, 0, i), i);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(put_page(e, t_key(101, 0, i), i), 0);
    kvt_key pin[2] = { t_key(100, 0, 0), t_key(101, 0, 3) };
    void *p[2];
    assert_int_equal(kvt_acquire(e, pin, 2, p), 0);
    s = t_stats(e);
    assert_int_equal(s.pages, 10);
    assert_int_equal(s.pinned_pages, 2);
    assert_stats_consistent(&s);
    assert_true(s.bytes_down[KVT_TIER_HBM] >= 2 * PB); /* 6 created in 4 slots */
    assert_true(s.hits[KVT_TIER_HBM] + s.misses[KVT_TIER_HBM] >= 2);
    assert_true(s.bytes_put >= 4 * PB);
    assert_int_equal(s.errors_device, 0);
    assert_int_equal(kvt_release(e, pin, 2, 0), 0);

    kvt_key d[3] = { t_key(100, 0, 1), t_key(100, 0, 2), t_key(101, 0, 0) };
    assert_int_equal(kvt_drop(e, d, 3), 0);
    s = t_stats(e);
    assert_int_equal(s.pages, 7);
    assert_int_equal(s.pinned_pages, 0);
    assert_stats_consistent(&s);
    assert_int_equal(kvt_drop_id(e, 100), 0);
    s = t_stats(e);
    assert_int_equal(s.pages, 3);
    assert_stats_consistent(&s);
}

/* Metadata per page slot stays within the budget (128 bytes) once every
 * slot holds a page. */
static void test_meta_budget(void **state)
{
    kvt_engine *e = *state; /* 256 HBM, 768 DRAM */
    enum { SLOTS = 1024, BATCH = 64 };
    kvt_key k[BATCH];
    void *src[BATCH];
    void *buf = page_new();
    for (int i = 0; i < BATCH; i++)
        src[i] = buf;
    memset(buf, 0x11, PB);
    for (uint32_t b = 0; b < SLOTS / BATCH; b++) {
        for (uint32_t i = 0; i < BATCH; i++)
            k[i] = t_key(1000 + b, i % 3, i);
        assert_int_equal(kvt_put(e, k, BATCH, (const void *const *)src, 0), 0);
    }
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, SLOTS);
    assert_int_equal(s.capacity_pages[KVT_TIER_HBM] + s.capacity_pages[KVT_TIER_DRAM], SLOTS);
    assert_int_equal(s.resident_pages[KVT_TIER_HBM] + s.resident_pages[KVT_TIER_DRAM], SLOTS);
    kvt_key one = t_key(5000, 0, 0);
    assert_int_equal(kvt_put(e, &one, 1, (const void *const *)src, 0), KVT_EFULL);
    print_message("meta_bytes %llu for %d slots: %.1f bytes/slot\n",
                  (unsigned long long)s.meta_bytes, SLOTS, (double)s.meta_bytes / SLOTS);
    assert_true(s.meta_bytes > 0);
    assert_true(s.meta_bytes <= 128u * SLOTS);
    free(buf);
}

static void test_schedule_args(void **state)
{
    kvt_engine *e = *state;
    uint64_t ids[2] = { 1, 2 };
    kvt_schedule s = { ids, 2, 4, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    assert_int_equal(kvt_set_schedule(e, &s), 0);
    kvt_schedule bad = s;
    bad.n_ids = 0;
    assert_int_equal(kvt_set_schedule(e, &bad), -EINVAL);
    bad = s;
    bad.ids = NULL;
    assert_int_equal(kvt_set_schedule(e, &bad), -EINVAL);
    bad = s;
    bad.n_layers = 0;
    assert_int_equal(kvt_set_schedule(e, &bad), -EINVAL);
    bad = s;
    bad.order = 7;
    assert_int_equal(kvt_set_schedule(e, &bad), -EINVAL);
    s.order = KVT_ORDER_SEQ_MAJOR;
    assert_int_equal(kvt_set_schedule(e, &s), 0);
    ids[0] = 99; /* s is copied: changing the caller's array is harmless */
    assert_int_equal(kvt_advance(e, 1, 0), 0);
    assert_int_equal(kvt_advance(e, 2, 3), 0);
    /* the lru policy ignores it; pages still work */
    create_page(e, t_key(1, 0, 0), 1);
    assert_get(e, t_key(1, 0, 0), 1);
}

#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, close_engine)

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        T(test_create_release_acquire, setup_h4_d8),
        T(test_create_existing_key, setup_h4_d8),
        T(test_promote_from_dram, setup_h4_d8),
        T(test_demote_when_hbm_full, setup_h4_d16),
        T(test_evict_around_pins, setup_h4_d16),
        T(test_dirty_writeback_survives_eviction, setup_h2_d8),
        T(test_dirty_release_supersedes_dram_copy, setup_h4_d8),
        T(test_all_pinned_hbm_full, setup_h4_d8),
        T(test_repeated_keys_pin_twice, setup_h4_d8),
        T(test_total_capacity_create, setup_h2_d4),
        T(test_total_capacity_put, setup_h2_d4),
        T(test_acquire_when_every_slot_full, setup_h2_d4),
        T(test_put_get_roundtrip, setup_h4_d8),
        T(test_get_miss_leaves_dst, setup_h4_d8),
        T(test_put_overwrite, setup_h4_d8),
        T(test_put_pinned_busy, setup_h4_d8),
        T(test_exists_where_and_prefix, setup_h2_d8),
        T(test_drop, setup_h4_d8),
        T(test_drop_pinned_busy, setup_h4_d8),
        T(test_drop_id, setup_h4_d8),
        T(test_acquire_missing, setup_h4_d8),
        T(test_acquire_async_wait, setup_h4_d8),
        T(test_wait_stream_host, setup_h4_d8),
        T(test_release_unpinned, setup_h4_d8),
        T(test_flush_writes_down, setup_h4_d8),
        T(test_flush_dram_full, setup_h4_d2),
        T(test_stats_sanity, setup_h4_d8),
        T(test_meta_budget, setup_h256_d768),
        T(test_schedule_args, setup_h4_d8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
