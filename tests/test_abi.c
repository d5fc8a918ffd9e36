/*
 * test_abi.c — the growable ABI of include/kvtier.h ("growable structs"):
 * the *_sized calls read and write exactly the caller's size, refuse sizes
 * that are no layout, and refuse a newer caller's config that sets a field
 * this library does not know; the VER0 part is the layout of the first
 * published API (docs/api.md#the-first-published-api); its prototypes
 * still declare the same functions; the version macros and the library
 * agree.
 *
 * The other halves: tests/abi/old_caller.c (a program built against older
 * headers), tests/abi/exports.cmake (nothing exported that the header does
 * not declare).
 */
#include "helpers.h"

/* Every prototype of the first published API, verbatim (generated from
 * tests/abi/design3.h by from_design3.cmake): each must still declare the
 * function kvtier.h declares, or this file does not compile. */
#include "design3_protos.h"
#include "tests/abi/design3_layout.h"

#define GUARD 0xA5
#define GUARD_BYTES 256

/* A caller's struct of any size, followed by guard bytes. */
static union {
    max_align_t align;
    unsigned char b[KVT_STRUCT_SIZE_MAX + GUARD_BYTES];
} frame;

static void frame_fill(void) { memset(frame.b, GUARD, sizeof(frame.b)); }

/* 1 when no byte from `from` to the end of the frame was written. */
static int frame_untouched_from(size_t from)
{
    for (size_t i = from; i < sizeof(frame.b); i++)
        if (frame.b[i] != GUARD) {
            print_error("byte %zu written (0x%02x), the caller's struct ends at %zu\n", i,
                        frame.b[i], from);
            return 0;
        }
    return 1;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* The sizes a caller may have, by index: each published layout, then newer
 * and larger ones up to the largest taken. */
#define N_SIZES 8

static size_t config_size(int which)
{
    switch (which) {
    case 0: return KVT_CONFIG_SIZE_VER0;
    case 1: return KVT_CONFIG_SIZE_VER1;
    case 2: return KVT_CONFIG_SIZE_VER2;
    case 3: return KVT_CONFIG_SIZE_VER3;
    case 4: return KVT_CONFIG_SIZE_VER4;
    case 5: return sizeof(kvt_config) + 8;
    case 6: return sizeof(kvt_config) + 1024;
    default: return KVT_STRUCT_SIZE_MAX;
    }
}

static size_t stats_size(int which)
{
    switch (which) {
    case 0: return KVT_STATS_SIZE_VER0;
    case 1: return KVT_STATS_SIZE_VER1;
    case 2: return KVT_STATS_SIZE_VER2;
    case 3: return KVT_STATS_SIZE_VER3;
    case 4: return sizeof(kvt_stats) + 8;
    case 5: return sizeof(kvt_stats) + 512;
    case 6: return sizeof(kvt_stats) + 1024;
    default: return KVT_STRUCT_SIZE_MAX;
    }
}

/* ---------------------------------------------------------------- layout */

#define NEW_CONFIG_OFFSET(f) offsetof(kvt_config, f),
#define NEW_STATS_OFFSET(f) offsetof(kvt_stats, f),

static void test_ver0_is_the_design3_layout(void **state)
{
    static const size_t config[] = {DESIGN3_CONFIG_FIELDS(NEW_CONFIG_OFFSET)};
    static const size_t stats[] = {DESIGN3_STATS_FIELDS(NEW_STATS_OFFSET)};
    for (size_t i = 0; i < DESIGN3_CONFIG_NFIELDS; i++)
        assert_int_equal(config[i], design3_config_offsets[i]);
    for (size_t i = 0; i < DESIGN3_STATS_NFIELDS; i++)
        assert_int_equal(stats[i], design3_stats_offsets[i]);
    assert_int_equal(KVT_CONFIG_SIZE_VER0, design3_config_size);
    assert_int_equal(KVT_STATS_SIZE_VER0, design3_stats_size);
    /* This header's structs are their last published layout. */
    assert_int_equal(KVT_CONFIG_SIZE_VER4, sizeof(kvt_config));
    assert_int_equal(KVT_STATS_SIZE_VER3, sizeof(kvt_stats));
    assert_true(sizeof(kvt_config) <= KVT_STRUCT_SIZE_MAX);
    assert_true(sizeof(kvt_stats) <= KVT_STRUCT_SIZE_MAX);
}

/* ---------------------------------------------------------------- config */

static void test_config_init_writes_exactly_the_callers_size(void **state)
{
    kvt_config ref;
    memset(&ref, 0x5A, sizeof(ref));
    kvt_config_init(&ref); /* the inline wrapper: this header's size */
    assert_int_equal(ref.queue_depth, 32);
    assert_int_equal(ref.prefetch_bytes, 0);
    assert_null(ref.on_transfer);

    for (size_t w = 0; w < N_SIZES; w++) {
        size_t size = config_size((int)w), known = size < sizeof(ref) ? size : sizeof(ref);
        frame_fill();
        assert_int_equal(kvt_config_init_sized((kvt_config *)frame.b, size), 0);
        assert_memory_equal(frame.b, &ref, known);
        assert_true(all_zero(frame.b + known, size - known)); /* fields we do not know: 0 */
        assert_true(frame_untouched_from(size));
    }
}

static void test_config_sizes_that_are_no_layout_are_refused(void **state)
{
    const size_t bad[] = {0, 8, KVT_CONFIG_SIZE_VER0 - 8, KVT_CONFIG_SIZE_VER0 + 8,
                          KVT_CONFIG_SIZE_VER1 - 8, KVT_STRUCT_SIZE_MAX + 1, SIZE_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        frame_fill();
        kvt_engine *e = (kvt_engine *)(uintptr_t)1;
        assert_int_equal(kvt_config_init_sized((kvt_config *)frame.b, bad[i]), -EINVAL);
        assert_non_null(strstr(kvt_last_error(), "kvt_config of"));
        assert_true(frame_untouched_from(0));
        assert_int_equal(kvt_config_check_sized((kvt_config *)frame.b, bad[i]), -EINVAL);
        assert_int_equal(kvt_open_sized((kvt_config *)frame.b, bad[i], &e), -EINVAL);
        assert_null(e);
    }
    assert_int_equal(kvt_config_init_sized(NULL, sizeof(kvt_config)), -EINVAL);
    assert_int_equal(kvt_config_check_sized(NULL, sizeof(kvt_config)), -EINVAL);
}

/* A caller with only VER0: the library reads nothing past it. The bytes
 * there (the guard) read as host_link_gbps would be negative (refused) and
 * as on_transfer a wild pointer (called on the first transfer). */
static void test_open_reads_only_the_callers_size(void **state)
{
    frame_fill();
    kvt_config *c = (kvt_config *)frame.b;
    assert_int_equal(kvt_config_init_sized(c, KVT_CONFIG_SIZE_VER0), 0);
    assert_true(frame_untouched_from(KVT_CONFIG_SIZE_VER0));
    c->page_bytes = T_PAGE;
    c->hbm_bytes = 2 * T_PAGE;
    c->dram_bytes = 8 * T_PAGE;
    c->device = KVT_DEVICE_HOST;
    c->policy = "lru";
    assert_int_equal(kvt_config_check_sized(c, KVT_CONFIG_SIZE_VER0), 0);
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open_sized(c, KVT_CONFIG_SIZE_VER0, &e), 0);
    assert_true(frame_untouched_from(KVT_CONFIG_SIZE_VER0));
    for (uint32_t i = 0; i < 4; i++) { /* twice HBM: write-backs are reported */
        kvt_key k = t_key(1, 0, i);
        void *p;
        assert_int_equal(kvt_create(e, k, &p), 0);
        t_fill(p, T_PAGE, k, 0);
        assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    }
    assert_int_equal(kvt_flush(e), 0);
    kvt_stats s = t_stats(e);
    assert_true(s.bytes_down[KVT_TIER_HBM] >= 2 * T_PAGE);
    kvt_close(e);
}

/* A caller newer than this library: its extra bytes must be 0. */
static void test_newer_config_with_an_unknown_field_set_is_refused(void **state)
{
    size_t size = sizeof(kvt_config) + 64;
    frame_fill();
    kvt_config *c = (kvt_config *)frame.b;
    assert_int_equal(kvt_config_init_sized(c, size), 0);
    *c = t_config(T_PAGE, 2, 4);
    kvt_engine *e = NULL;
    assert_int_equal(kvt_config_check_sized(c, size), 0);
    assert_int_equal(kvt_open_sized(c, size, &e), 0);
    kvt_close(e);

    frame.b[sizeof(kvt_config) + 17] = 1;
    assert_int_equal(kvt_config_check_sized(c, size), KVT_ECONFIG);
    char want[64];
    snprintf(want, sizeof(want), "byte %zu is set", sizeof(kvt_config) + 17);
    assert_non_null(strstr(kvt_last_error(), want));
    e = (kvt_engine *)(uintptr_t)1;
    assert_int_equal(kvt_open_sized(c, size, &e), KVT_ECONFIG);
    assert_null(e);
    /* Read as this library's own size, the same struct opens. */
    assert_int_equal(kvt_open_sized(c, sizeof(kvt_config), &e), 0);
    kvt_close(e);
}

/* ----------------------------------------------------------------- stats */

static void test_stats_write_exactly_the_callers_size(void **state)
{
    kvt_config c = t_config(T_PAGE, 2, 8);
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    for (uint32_t i = 0; i < 5; i++) {
        kvt_key k = t_key(2, 0, i);
        void *p;
        assert_int_equal(kvt_create(e, k, &p), 0);
        assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    }
    assert_int_equal(kvt_flush(e), 0);
    kvt_stats ref = t_stats(e); /* the inline wrapper: this header's size */
    assert_int_equal(ref.capacity_pages[KVT_TIER_HBM], 2);
    assert_int_equal(ref.pages, 5);

    for (size_t w = 0; w < N_SIZES; w++) {
        size_t size = stats_size((int)w), known = size < sizeof(ref) ? size : sizeof(ref);
        frame_fill();
        assert_int_equal(kvt_get_stats_sized(e, (kvt_stats *)frame.b, size), 0);
        assert_true(frame_untouched_from(size));
        assert_true(all_zero(frame.b + known, size - known));
        kvt_stats got;
        memset(&got, 0, sizeof(got));
        memcpy(&got, frame.b, known);
        /* Counters that nothing moves once flushed with no call running. */
        assert_memory_equal(got.resident_pages, ref.resident_pages, sizeof(ref.resident_pages));
        assert_int_equal(got.errors_io, 0);
        if (size >= KVT_STATS_SIZE_VER1) {
            assert_memory_equal(got.capacity_pages, ref.capacity_pages,
                                sizeof(ref.capacity_pages));
            assert_int_equal(got.pages, ref.pages);
        }
    }

    const size_t bad[] = {0, KVT_STATS_SIZE_VER0 - 8, KVT_STATS_SIZE_VER0 + 8,
                          KVT_STATS_SIZE_VER1 - 8, KVT_STRUCT_SIZE_MAX + 1};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        frame_fill();
        assert_int_equal(kvt_get_stats_sized(e, (kvt_stats *)frame.b, bad[i]), -EINVAL);
        assert_true(frame_untouched_from(0));
    }
    assert_int_equal(kvt_get_stats_sized(NULL, &ref, sizeof(ref)), -EINVAL);
    assert_int_equal(kvt_get_stats_sized(e, NULL, sizeof(ref)), -EINVAL);
    kvt_close(e);
}

/* ----------------------------------------------- the design3.h names */

/* The design3.h names are functions: their addresses can be taken and
 * called, and pass this header's size. */
static void test_design3_names_are_functions(void **state)
{
    void (*init)(kvt_config *) = kvt_config_init;
    int (*check)(const kvt_config *) = &kvt_config_check;
    int (*open)(const kvt_config *, kvt_engine **) = &kvt_open;
    int (*stats)(kvt_engine *, kvt_stats *) = kvt_get_stats;
    kvt_config c;
    init(&c);
    c.page_bytes = T_PAGE;
    c.hbm_bytes = 2 * T_PAGE;
    c.dram_bytes = 4 * T_PAGE;
    c.device = KVT_DEVICE_HOST;
    c.queue_depth = 0;
    assert_int_equal(check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "queue_depth"));
    c.queue_depth = 8;
    assert_int_equal(check(&c), 0);
    kvt_engine *e = NULL;
    assert_int_equal(open(&c, &e), 0);
    kvt_stats s;
    memset(&s, 0xFF, sizeof(s));
    assert_int_equal(stats(e, &s), 0);
    assert_int_equal(s.capacity_pages[KVT_TIER_DRAM], 4);
    assert_int_equal(s.prefetch_pages, 0); /* a field past VER0, written */
    kvt_close(e);
}

/* --------------------------------------------------------------- version */

static void test_version_comes_from_the_macros(void **state)
{
    assert_string_equal(kvt_version_string(), KVT_VERSION_STRING);
    assert_int_equal(kvt_version_number(), KVT_VERSION_NUMBER);
    /* CMake's project version (the shared library's file name) is the same. */
    assert_string_equal(KVT_VERSION_STRING, KVT_PROJECT_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ver0_is_the_design3_layout),
        cmocka_unit_test(test_config_init_writes_exactly_the_callers_size),
        cmocka_unit_test(test_config_sizes_that_are_no_layout_are_refused),
        cmocka_unit_test(test_open_reads_only_the_callers_size),
        cmocka_unit_test(test_newer_config_with_an_unknown_field_set_is_refused),
        cmocka_unit_test(test_stats_write_exactly_the_callers_size),
        cmocka_unit_test(test_design3_names_are_functions),
        cmocka_unit_test(test_version_comes_from_the_macros),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
