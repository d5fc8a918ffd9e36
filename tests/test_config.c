/*
 * test_config.c — kvt_config_init defaults, kvt_open's validation of every
 * field (KVT_ECONFIG naming the field, KVT_ENOTSUP for parts not built yet),
 * kvt_strerror coverage, kvt_last_error, and the version functions.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include "helpers.h"
#include "kvt_build.h"
#include "api/api.h"

/* A config that opens: 4 KiB pages, 4 HBM slots, 8 DRAM slots. */
static kvt_config good_config(void)
{
    return t_config(T_PAGE, 4, 8);
}

/* Opens cfg expecting failure err; checks *out is NULL afterwards and, when
 * field is given, that kvt_last_error() names it. */
static void expect_open_fails(const kvt_config *cfg, int err, const char *field)
{
    kvt_engine *e = (kvt_engine *)(uintptr_t)0x1; /* a poisoned value: open must clear it */
    int r = kvt_open(cfg, &e);
    if (r != err)
        print_error("kvt_open returned %d (%s), expected %d; last error: \"%s\"\n", r,
                    kvt_strerror(r), err, kvt_last_error());
    assert_int_equal(r, err);
    assert_null(e);
    if (field) {
        const char *msg = kvt_last_error();
        assert_non_null(msg);
        if (!strstr(msg, field))
            print_error("kvt_last_error() = \"%s\" does not name \"%s\"\n", msg, field);
        assert_non_null(strstr(msg, field));
    }
}

/* ------------------------------------------------------------- defaults */

static void test_config_init_defaults(void **state)
{
    kvt_config c;
    memset(&c, 0xA5, sizeof(c)); /* init must set every field it documents */
    kvt_config_init(&c);
    assert_int_equal(c.page_bytes, 256u * 1024);
    assert_int_equal(c.hbm_bytes, (size_t)1 << 30);
    assert_int_equal(c.dram_bytes, (size_t)4 << 30);
    assert_int_equal(c.ssd_bytes, 0);
    assert_int_equal(c.device, KVT_DEVICE_AUTO);
    assert_non_null(c.policy);
    assert_string_equal(c.policy, "decode");
    assert_int_equal(c.codec, KVT_CODEC_NONE);
    assert_int_equal(c.persist, 0);
    assert_true(c.fingerprint == 0);
    assert_int_equal(c.io_backend, KVT_IO_AUTO);
    assert_int_equal(c.queue_depth, 32);
    assert_true(c.host_link_gbps == 0.0);
}

static void test_open_minimal_config(void **state)
{
    kvt_config c = t_config(T_PAGE, 1, 1); /* the smallest legal engine */
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    assert_non_null(e);
    assert_int_equal(kvt_page_bytes(e), T_PAGE);
    assert_non_null(kvt_device_name(e));
    const char *dev = kvt_device_name(e);
    if (t_device() == KVT_DEVICE_AUTO) /* CUDA where it opens, else the host */
        assert_true(!strcmp(dev, "cuda") || !strcmp(dev, "host"));
    else
        assert_string_equal(dev, t_device() == KVT_DEVICE_HOST ? "host" : "cuda");
    kvt_stats s = t_stats(e);
    assert_int_equal(s.capacity_pages[KVT_TIER_HBM], 1);
    assert_int_equal(s.capacity_pages[KVT_TIER_DRAM], 1);
    assert_int_equal(s.capacity_pages[KVT_TIER_SSD], 0);
    assert_int_equal(s.pages, 0);
    assert_int_equal(s.pinned_pages, 0);
    kvt_close(e);
}

/* Capacities that are not whole pages round down to whole slots. */
static void test_open_partial_pages_round_down(void **state)
{
    kvt_config c = t_config(4 * T_PAGE, 3, 5);
    c.hbm_bytes += 2 * T_PAGE;  /* 3.5 pages */
    c.dram_bytes += 4 * T_PAGE - 1;
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.capacity_pages[KVT_TIER_HBM], 3);
    assert_int_equal(s.capacity_pages[KVT_TIER_DRAM], 5);
    assert_int_equal(kvt_page_bytes(e), 4 * T_PAGE);
    kvt_close(e);
}

/* The config is read during the call only: changing or freeing it (and its
 * strings) after open does not affect the engine. */
static void test_open_copies_config(void **state)
{
    kvt_config c = good_config();
    char *pol = strdup("lru");
    assert_non_null(pol);
    c.policy = pol;
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    memset(pol, 'x', 3);
    free(pol);
    c.page_bytes = 0;
    assert_int_equal(kvt_page_bytes(e), T_PAGE);
    void *p = NULL;
    kvt_key k = t_key(1, 0, 0);
    assert_int_equal(kvt_create(e, k, &p), 0);
    t_fill_page(e, p, T_PAGE, k, 1);
    assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    kvt_close(e);
}

/* ------------------------------------------------------ invalid fields */

static void test_page_bytes_zero(void **state)
{
    kvt_config c = good_config();
    c.page_bytes = 0;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");
}

static void test_page_bytes_not_multiple_of_4096(void **state)
{
    kvt_config c = good_config();
    c.page_bytes = 4096 + 512;
    c.hbm_bytes = c.dram_bytes = 16 * c.page_bytes;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");
    c.page_bytes = 1000;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");
    c.page_bytes = 2048;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");
}

static void test_hbm_smaller_than_a_page(void **state)
{
    kvt_config c = good_config();
    c.hbm_bytes = c.page_bytes - 1;
    expect_open_fails(&c, KVT_ECONFIG, "hbm_bytes");
    c.hbm_bytes = 0;
    expect_open_fails(&c, KVT_ECONFIG, "hbm_bytes");
}

static void test_dram_smaller_than_a_page(void **state)
{
    kvt_config c = good_config();
    c.dram_bytes = c.page_bytes - 1;
    expect_open_fails(&c, KVT_ECONFIG, "dram_bytes");
    c.dram_bytes = 0;
    expect_open_fails(&c, KVT_ECONFIG, "dram_bytes");
}

static void test_unknown_policy(void **state)
{
    kvt_config c = good_config();
    c.policy = "fifo";
    expect_open_fails(&c, KVT_ECONFIG, "policy");
    c.policy = "";
    expect_open_fails(&c, KVT_ECONFIG, "policy");
    c.policy = "LRUX";
    expect_open_fails(&c, KVT_ECONFIG, "policy");
}

static void test_bad_codec(void **state)
{
    kvt_config c = good_config();
    c.codec = 99;
    expect_open_fails(&c, KVT_ECONFIG, "codec");
    c.codec = -1;
    expect_open_fails(&c, KVT_ECONFIG, "codec");
}

static void test_bad_io_backend(void **state)
{
    kvt_config c = good_config();
    c.io_backend = 99;
    expect_open_fails(&c, KVT_ECONFIG, "io_backend");
    c.io_backend = -1;
    expect_open_fails(&c, KVT_ECONFIG, "io_backend");
}

static void test_bad_device_number(void **state)
{
    kvt_config c = good_config();
    c.device = -7;
    expect_open_fails(&c, KVT_ECONFIG, "device");
    c.device = INT_MIN;
    expect_open_fails(&c, KVT_ECONFIG, "device");
}

/* Sizes that each pass alone but whose products do not fit what the engine
 * computes from them are refused as config errors, before anything is
 * allocated or created. */
static void test_sizes_past_what_fits(void **state)
{
    /* DRAM keeps a spare slot: (dram_bytes / page_bytes + 1) * page_bytes
     * wrapped to 0 bytes of arena for 2^30 - 1 pages of 16 GiB. */
    kvt_config c = good_config();
    c.page_bytes = (size_t)1 << 34;
    c.hbm_bytes = c.page_bytes;
    c.dram_bytes = SIZE_MAX;
    expect_open_fails(&c, KVT_ECONFIG, "dram_bytes");

    /* Page records are numbered in 32 bits across HBM and DRAM. */
    c = good_config();
    c.hbm_bytes = c.dram_bytes = (((size_t)1 << 30) - 1) * c.page_bytes;
    expect_open_fails(&c, KVT_ECONFIG, "hbm_bytes and dram_bytes");

    /* The SSD index keeps a page's stored and raw lengths in 32 bits: a
     * 4 GiB page would be stored as 0 bytes, and read back as whatever its
     * DRAM slot held. */
    char dir[] = "/tmp/kvt_test_config_XXXXXX";
    assert_non_null(mkdtemp(dir));
    c = good_config();
    c.page_bytes = (size_t)4 << 30;
    c.hbm_bytes = c.dram_bytes = c.page_bytes;
    c.ssd_bytes = 2 * c.page_bytes;
    c.ssd_dir = dir;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");
    assert_int_equal(rmdir(dir), 0);  /* still empty: nothing was made */
    c.page_bytes -= 4096;             /* the largest page an SSD tier takes */
    c.hbm_bytes = c.dram_bytes = c.page_bytes;
    c.ssd_bytes = 2 * c.page_bytes;
    assert_int_equal(kvt_config_check(&c), 0);
}

/* The first invalid field is reported even when later ones are fine, and a
 * good config still opens after failures (no state left behind). */
static void test_good_config_opens_after_failures(void **state)
{
    kvt_config c = good_config();
    c.page_bytes = 0;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");
    c = good_config();
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    assert_non_null(e);
    kvt_close(e);
}

/* ------------------------------------------------ parts not built yet */

/* The SSD tier's fields: a directory is required, capacity is at least a
 * page, and a directory in use by another engine is refused. */
static void test_ssd_config(void **state)
{
    char dir[] = "/tmp/kvt_test_config_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kvt_config c = good_config();
    c.ssd_bytes = 64 * c.page_bytes;
    c.ssd_dir = NULL;
    expect_open_fails(&c, KVT_ECONFIG, "ssd_dir");
    c.ssd_dir = dir;
    c.ssd_bytes = c.page_bytes - 1;
    expect_open_fails(&c, KVT_ECONFIG, "ssd_bytes");
    c.ssd_bytes = 64 * c.page_bytes;
    kvt_engine *e = NULL, *e2 = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    assert_int_equal(kvt_open(&c, &e2), -EBUSY);
    assert_null(e2);
    assert_non_null(strstr(kvt_last_error(), dir));
    kvt_close(e);
    t_rmtree(dir);
}

/* Both built policies open; belady is offline-only (the simulator) and
 * a config naming it gets KVT_ENOTSUP, not "unknown". */
static void test_policies_open(void **state)
{
    kvt_config c = good_config();
    const char *names[] = { "decode", "lru" };
    for (int i = 0; i < 2; i++) {
        c.policy = names[i];
        kvt_engine *e = NULL;
        assert_int_equal(kvt_open(&c, &e), 0);
        kvt_close(e);
    }
    c.policy = "belady";
    expect_open_fails(&c, KVT_ENOTSUP, NULL);
}

static void test_device_auto_and_cuda_ordinal(void **state)
{
    kvt_config c = good_config();
    c.device = KVT_DEVICE_AUTO;
    kvt_engine *e = NULL;
    int r = kvt_open(&c, &e);
#if KVT_HAVE_CUDA
    /* With CUDA built, AUTO picks CUDA when usable, else host. */
    assert_int_equal(r, 0);
    assert_true(strcmp(kvt_device_name(e), "host") == 0 || strcmp(kvt_device_name(e), "cuda") == 0);
    kvt_close(e);
#else
    assert_int_equal(r, 0);
    assert_string_equal(kvt_device_name(e), "host");
    kvt_close(e);
    /* A CUDA ordinal on a build without CUDA: that part is not built. */
    c.device = 0;
    expect_open_fails(&c, KVT_ENOTSUP, NULL);
#endif
}

/* --------------------------------------------------------- errors, misc */

static void test_strerror_covers_every_code(void **state)
{
    const char *texts[KVT_EBASE - KVT_ELAST + 1];
    for (int err = KVT_EBASE; err >= KVT_ELAST; err--) {
        const char *s = kvt_strerror(err);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        assert_null(strstr(s, "unknown"));
        texts[KVT_EBASE - err] = s;
    }
    /* Each library code has its own text. */
    for (int i = 0; i <= KVT_EBASE - KVT_ELAST; i++)
        for (int j = i + 1; j <= KVT_EBASE - KVT_ELAST; j++)
            assert_string_not_equal(texts[i], texts[j]);

    int os[] = { -ENOMEM, -EINVAL, -EBUSY, -EEXIST, -EIO, -ENOSPC };
    for (size_t i = 0; i < sizeof(os) / sizeof(os[0]); i++) {
        const char *s = kvt_strerror(os[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (int j = 0; j <= KVT_EBASE - KVT_ELAST; j++)
            assert_string_not_equal(s, texts[j]);
    }
    assert_string_not_equal(kvt_strerror(-ENOMEM), kvt_strerror(-EINVAL));

    int unknown[] = { 1, 12345, -99999, KVT_EBASE + 1, KVT_ELAST - 1, INT_MIN, INT_MAX, -4096 };
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        const char *s = kvt_strerror(unknown[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
    }
    assert_non_null(kvt_strerror(0));
}

static void test_error_block_far_from_errno(void **state)
{
    assert_true(KVT_EBASE < -4096);
    assert_true(KVT_ELAST <= KVT_EBASE);
    int codes[] = { KVT_ECORRUPT, KVT_EFINGERPRINT, KVT_ENOTFOUND, KVT_EFULL,
                    KVT_EDEVICE, KVT_ECONFIG, KVT_ENOTSUP, KVT_EFAILED };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        assert_true(codes[i] <= KVT_EBASE && codes[i] >= KVT_ELAST);
        for (size_t j = i + 1; j < sizeof(codes) / sizeof(codes[0]); j++)
            assert_int_not_equal(codes[i], codes[j]);
    }
}

static void test_close_null(void **state)
{
    kvt_close(NULL);
}

struct last_error_arg {
    char seen[512];
};

static void *fail_hbm_in_thread(void *p)
{
    struct last_error_arg *a = p;
    kvt_config c = good_config();
    c.hbm_bytes = 0;
    kvt_engine *e = NULL;
    int r = kvt_open(&c, &e);
    snprintf(a->seen, sizeof(a->seen), "%d %s", r == KVT_ECONFIG && !e, kvt_last_error());
    return NULL;
}

/* kvt_last_error() is per thread: another thread's failure does not
 * overwrite this thread's message. */
static void test_last_error_is_thread_local(void **state)
{
    kvt_config c = good_config();
    c.page_bytes = 0;
    expect_open_fails(&c, KVT_ECONFIG, "page_bytes");

    struct last_error_arg a;
    memset(&a, 0, sizeof(a));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fail_hbm_in_thread, &a), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(strncmp(a.seen, "1 ", 2) == 0);
    assert_non_null(strstr(a.seen, "hbm_bytes"));

    assert_non_null(strstr(kvt_last_error(), "page_bytes"));
    assert_null(strstr(kvt_last_error(), "hbm_bytes"));
}

static void test_version(void **state)
{
    assert_int_equal(kvt_version_number(), KVT_VERSION_NUMBER);
    assert_int_equal(KVT_VERSION_NUMBER,
                     KVT_VERSION_MAJOR * 10000 + KVT_VERSION_MINOR * 100 + KVT_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof(want), "%d.%d.%d", KVT_VERSION_MAJOR, KVT_VERSION_MINOR,
             KVT_VERSION_PATCH);
    assert_non_null(kvt_version_string());
    assert_string_equal(kvt_version_string(), want);
    assert_ptr_equal(kvt_version_string(), kvt_version_string());
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_init_defaults),
        cmocka_unit_test(test_open_minimal_config),
        cmocka_unit_test(test_open_partial_pages_round_down),
        cmocka_unit_test(test_open_copies_config),
        cmocka_unit_test(test_page_bytes_zero),
        cmocka_unit_test(test_page_bytes_not_multiple_of_4096),
        cmocka_unit_test(test_hbm_smaller_than_a_page),
        cmocka_unit_test(test_dram_smaller_than_a_page),
        cmocka_unit_test(test_unknown_policy),
        cmocka_unit_test(test_bad_codec),
        cmocka_unit_test(test_bad_io_backend),
        cmocka_unit_test(test_bad_device_number),
        cmocka_unit_test(test_sizes_past_what_fits),
        cmocka_unit_test(test_good_config_opens_after_failures),
        cmocka_unit_test(test_ssd_config),
        cmocka_unit_test(test_policies_open),
        cmocka_unit_test(test_device_auto_and_cuda_ordinal),
        cmocka_unit_test(test_strerror_covers_every_code),
        cmocka_unit_test(test_error_block_far_from_errno),
        cmocka_unit_test(test_close_null),
        cmocka_unit_test(test_last_error_is_thread_local),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
