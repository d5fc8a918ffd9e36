/*
 * test_get_alloc.c — kvt_get makes no allocation in steady state: of pages
 * resident in DRAM, and of pages only on SSD, read straight into aligned
 * buffers (the caller reads them itself) or staged in DRAM for unaligned
 * ones (the mover reads them).
 *
 * The library's allocations are counted through the linker (--wrap of
 * malloc, calloc, realloc, posix_memalign and aligned_alloc on this program,
 * tests/CMakeLists.txt): every call that kvtier_static's objects make, from
 * any thread (the caller's, the mover's, the I/O back-end's), while a test
 * has the counter armed. Allocations inside shared libraries (liburing,
 * LMDB, libc's own) are not seen; the library's are what a hot path
 * controls. The wrapped functions forward to the real ones, which under
 * ASan and TSan are the sanitizer's: the count holds in those builds too.
 *
 * Steady state: after a warm-up call of the same batch size (which may open
 * an I/O context and size the engine's scratch). Where the caller reads
 * the pages itself (resident, or SSD-only into aligned buffers) no thread
 * may allocate; where the mover reads them (unaligned buffers), only the
 * calling thread's count must be 0: the I/O back-end's queues grow
 * (doubling, kept) with the most requests the pipeline ever held at once,
 * which the timing of the rounds decides, not the call.
 */
#include <stdatomic.h>

#include "helpers.h"
#include "api/api.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static atomic_bool armed;
static atomic_ulong counted;        /* every thread's, while armed */
static _Thread_local unsigned long mine; /* this thread's, while armed */

static void count(void)
{
    if (atomic_load_explicit(&armed, memory_order_relaxed)) {
        atomic_fetch_add(&counted, 1);
        mine++;
    }
}

void *__wrap_malloc(size_t n)
{
    count();
    return __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    count();
    return __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    count();
    return __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    count();
    return __real_posix_memalign(p, a, n);
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
    count();
    return __real_aligned_alloc(a, n);
}

#define PB ((size_t)16 << 10)
#define NPAGES 32
#define ROUNDS 8

struct fx {
    char dir[64];
    kvt_engine *e;
    kvt_key keys[NPAGES];
    void *dst[NPAGES];
    uint8_t *bufs;  /* NPAGES pages, 4 KiB-aligned, and one page more */
};

static int fx_open(void **state, const char *policy)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f || t_tmpdir(f->dir, sizeof(f->dir), "get-alloc") ||
        posix_memalign((void **)&f->bufs, 4096, (NPAGES + 1) * PB)) {
        free(f);
        return -1;
    }
    kvt_config c = t_config(PB, 4, 4 * NPAGES);
    c.ssd_dir = f->dir;
    c.ssd_bytes = 4 * NPAGES * PB;
    c.policy = policy;
    c.flags = KVT_FLAG_EVICT;
    if (kvt_open(&c, &f->e) < 0) {
        t_rmtree(f->dir);
        free(f->bufs);
        free(f);
        return -1;
    }
    for (uint32_t i = 0; i < NPAGES; i++) {
        f->keys[i] = t_key(7, KVT_ALL_LAYERS, i);
        t_fill(f->bufs, PB, f->keys[i], 1);
        const void *src = f->bufs;
        if (kvt_put(f->e, &f->keys[i], 1, &src, 0) < 0)
            return -1;
    }
    *state = f;
    return 0;
}

static int fx_lru(void **state) { return fx_open(state, "lru"); }
static int fx_prefix(void **state) { return fx_open(state, "prefix"); }

static int fx_close(void **state)
{
    struct fx *f = *state;
    kvt_close(f->e);
    t_rmtree(f->dir);
    free(f->bufs);
    free(f);
    return 0;
}

/* dst[i]: page i of bufs, shifted by off bytes (0: 4 KiB-aligned). */
static void aim(struct fx *f, size_t off)
{
    for (uint32_t i = 0; i < NPAGES; i++)
        f->dst[i] = f->bufs + i * PB + off;
}

/* Every page on SSD only: written, its DRAM copy dropped (as the
 * benchmarks do). */
static void to_ssd_only(struct fx *f)
{
    pthread_mutex_lock(&f->e->lock);
    assert_int_equal(kvt_ssd_flush(f->e), 0);
    kvt_dram_drop_redundant(f->e);
    pthread_mutex_unlock(&f->e->lock);
    for (uint32_t i = 0; i < NPAGES; i++)
        assert_int_equal(t_where(f->e, f->keys[i]), KVT_TIER_SSD);
}

/* One kvt_get of every page (n at a time), counted; then each page checked. */
static unsigned long counted_get(struct fx *f, size_t n, unsigned long *own)
{
    int found[NPAGES];
    int r = 0;
    atomic_store(&counted, 0);
    mine = 0;
    atomic_store(&armed, true);
    for (size_t at = 0; at < NPAGES && r == 0; at += n)
        r = kvt_get(f->e, f->keys + at, n, f->dst + at, 0, found + at);
    atomic_store(&armed, false);
    assert_int_equal(r, 0);
    for (uint32_t i = 0; i < NPAGES; i++) {
        assert_true(found[i]);
        assert_true(t_check(f->dst[i], PB, f->keys[i], 1));
    }
    *own = mine;
    return atomic_load(&counted);
}

/* ROUNDS gets after a warm-up; ssd_only: the pages go back to SSD only
 * before each (not counted). With off (unaligned, the mover reads SSD-only
 * pages) only the calling thread's allocations count. */
static void run(struct fx *f, size_t n, size_t off, bool ssd_only, const char *what)
{
    aim(f, off);
    if (ssd_only)
        to_ssd_only(f);
    unsigned long own, all = counted_get(f, n, &own);
    unsigned long total = 0, total_own = 0;
    for (int k = 0; k < ROUNDS; k++) {
        if (ssd_only)
            to_ssd_only(f);
        else
            for (uint32_t i = 0; i < NPAGES; i++)
                assert_int_equal(t_where(f->e, f->keys[i]), KVT_TIER_DRAM);
        total += counted_get(f, n, &own);
        total_own += own;
    }
    printf("  %s, %zu a call, %s: warm-up %lu allocations; then %lu in %d rounds "
           "(%lu by the calling thread)\n", what, n, off ? "unaligned" : "aligned", all, total,
           ROUNDS, total_own);
    assert_int_equal(ssd_only && off ? total_own : total, 0);
}

static void test_resident_aligned(void **state)
{
    run(*state, NPAGES, 0, false, "resident");
    run(*state, 1, 0, false, "resident");
}

static void test_resident_unaligned(void **state)
{
    run(*state, NPAGES, 64, false, "resident");
}

static void test_ssd_only_aligned(void **state)
{
    run(*state, NPAGES, 0, true, "SSD-only");
    run(*state, 4, 0, true, "SSD-only");
}

static void test_ssd_only_unaligned(void **state)
{
    run(*state, NPAGES, 64, true, "SSD-only");
}

static void test_resident_aligned_prefix(void **state) { test_resident_aligned(state); }
static void test_ssd_only_aligned_prefix(void **state) { test_ssd_only_aligned(state); }
static void test_ssd_only_unaligned_prefix(void **state) { test_ssd_only_unaligned(state); }

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resident_aligned, fx_lru, fx_close),
        cmocka_unit_test_setup_teardown(test_resident_unaligned, fx_lru, fx_close),
        cmocka_unit_test_setup_teardown(test_ssd_only_aligned, fx_lru, fx_close),
        cmocka_unit_test_setup_teardown(test_ssd_only_unaligned, fx_lru, fx_close),
        cmocka_unit_test_setup_teardown(test_resident_aligned_prefix, fx_prefix, fx_close),
        cmocka_unit_test_setup_teardown(test_ssd_only_aligned_prefix, fx_prefix, fx_close),
        cmocka_unit_test_setup_teardown(test_ssd_only_unaligned_prefix, fx_prefix, fx_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
