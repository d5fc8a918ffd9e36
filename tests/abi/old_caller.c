/*
 * old_caller.c — a program built against an older kvtier header and run
 * against this library. The library must never write past the caller's
 * kvt_config or kvt_stats, nor read past its kvt_config.
 *
 * Built twice (tests/CMakeLists.txt), each time against one OLD_HEADER:
 *  - design3.h: the first published API, verbatim (docs/api.md). It has no sizes,
 *    so the calls bind to the plain symbols, which take the VER0 layout.
 *  - kvtier_ver0.h: include/kvtier.h with kvt_config and kvt_stats cut back
 *    to their design3.h fields (ver0_header.cmake). The calls are its inline
 *    wrappers and pass the smaller sizeof to the *_sized functions.
 * Each struct lies in a frame whose guard bytes follow it directly and are
 * checked after every call that is given the struct. The guard's pattern
 * read as a later config field would refuse the open (host_link_gbps < 0)
 * or crash the first transfer report (on_transfer), so a read past the
 * struct fails the test too. The rest is code as design3.h writes it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include OLD_HEADER

/* design3.h names KVT_DEVICE_HOST but does not define it; this is kvtier.h's value. */
#ifndef KVT_DEVICE_HOST
#define KVT_DEVICE_HOST (-1)
#endif

#define GUARD 0xA5
#define GUARD_BYTES 512
#define PAGE 4096u
#define HBM_PAGES 4u
#define PAGES 12u /* three times HBM: pages go down to DRAM and come back */

struct config_frame {
    kvt_config c;
    unsigned char guard[GUARD_BYTES];
};

struct stats_frame {
    kvt_stats s;
    unsigned char guard[GUARD_BYTES];
};

static void assert_guard(const unsigned char *g)
{
    for (size_t i = 0; i < GUARD_BYTES; i++) {
        if (g[i] != GUARD)
            print_error("byte %zu past the struct was written (0x%02x)\n", i, g[i]);
        assert_int_equal(g[i], GUARD);
    }
}

static kvt_key key(uint32_t index)
{
    kvt_key k = {7, 0, index};
    return k;
}

static void fill(unsigned char *p, uint32_t index)
{
    for (size_t i = 0; i < PAGE; i++)
        p[i] = (unsigned char)(index * 31 + i);
}

static int holds(const unsigned char *p, uint32_t index)
{
    for (size_t i = 0; i < PAGE; i++)
        if (p[i] != (unsigned char)(index * 31 + i))
            return 0;
    return 1;
}

static void test_config_init_writes_only_the_struct(void **state)
{
    struct config_frame f;
    memset(&f, GUARD, sizeof(f));
    kvt_config_init(&f.c);
    assert_guard(f.guard);
    /* The defaults kvtier.h documents, for the fields this caller has. */
    assert_int_equal(f.c.page_bytes, 256 << 10);
    assert_int_equal(f.c.hbm_bytes, (size_t)1 << 30);
    assert_int_equal(f.c.ssd_bytes, 0);
    assert_null(f.c.ssd_dir);
    assert_string_equal(f.c.policy, "decode");
    assert_int_equal(f.c.codec, 0);
    assert_int_equal(f.c.persist, 0);
    assert_int_equal(f.c.queue_depth, 32);
}

static void test_engine_runs_and_stats_write_only_the_struct(void **state)
{
    struct config_frame f;
    memset(&f, GUARD, sizeof(f));
    kvt_config_init(&f.c);
    f.c.page_bytes = PAGE;
    f.c.hbm_bytes = HBM_PAGES * PAGE;
    f.c.dram_bytes = 2 * PAGES * PAGE;
    f.c.device = KVT_DEVICE_HOST;
    f.c.policy = "lru";
    kvt_engine *e = NULL;
    int r = kvt_open(&f.c, &e);
    if (r)
        print_error("kvt_open: %s\n", kvt_strerror(r));
    assert_int_equal(r, 0);
    assert_guard(f.guard);

    /* Written in HBM, pushed down by the pages after them, read back up. */
    for (uint32_t i = 0; i < PAGES; i++) {
        void *p = NULL;
        kvt_key k = key(i);
        assert_int_equal(kvt_create(e, k, &p), 0);
        fill(p, i);
        assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    }
    for (uint32_t i = 0; i < PAGES; i++) {
        void *p = NULL;
        kvt_key k = key(i);
        assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
        assert_true(holds(p, i));
        assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    }
    assert_int_equal(kvt_flush(e), 0);

    struct stats_frame sf;
    memset(&sf, GUARD, sizeof(sf));
    assert_int_equal(kvt_get_stats(e, &sf.s), 0);
    assert_guard(sf.guard);
    assert_true(sf.s.resident_pages[KVT_TIER_HBM] <= HBM_PAGES);
    assert_int_equal(sf.s.resident_pages[KVT_TIER_DRAM], PAGES);
    assert_int_equal(sf.s.resident_pages[KVT_TIER_SSD], 0);
    assert_true(sf.s.bytes_down[KVT_TIER_HBM] >= (PAGES - HBM_PAGES) * PAGE);
    assert_true(sf.s.bytes_up[KVT_TIER_HBM] >= (PAGES - HBM_PAGES) * PAGE);
    assert_true(sf.s.misses[KVT_TIER_HBM] >= PAGES - HBM_PAGES);
    assert_int_equal(sf.s.errors_io, 0);
    assert_int_equal(sf.s.errors_corrupt, 0);

    assert_int_equal(kvt_drop_id(e, 7), 0);
    kvt_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_init_writes_only_the_struct),
        cmocka_unit_test(test_engine_runs_and_stats_write_only_the_struct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
