/*
 * test_device_host.c — the host back-end's asynchronous contract: submit only
 * queues, fences complete in order per direction, both directions run,
 * errors are sticky, the link cap holds.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tests/helpers.h"
#include "api/api.h"

struct fix {
    void *priv;
    uint8_t *a, *b;
};

#define BYTES (4u << 20)

static int setup_capped(void **state, double gbps)
{
    struct fix *f = calloc(1, sizeof(*f));
    struct kvt_device_params p = { .ordinal = 0, .link_gbps = gbps };
    assert_int_equal(kvt_device_host_ops.open(&p, &f->priv), 0);
    assert_int_equal(kvt_device_host_ops.hbm_alloc(f->priv, BYTES, (void **)&f->a), 0);
    assert_int_equal(kvt_device_host_ops.host_alloc(f->priv, BYTES, (void **)&f->b), 0);
    assert_int_equal((uintptr_t)f->b % 4096, 0);
    *state = f;
    return 0;
}

static int setup(void **state) { return setup_capped(state, 0); }
/* 4 MiB at 0.008 GB/s takes half a second: long enough that a fence seen
 * complete right after submit could only mean an inline copy. */
static int setup_slow(void **state) { return setup_capped(state, 0.008); }

static int teardown(void **state)
{
    struct fix *f = *state;
    kvt_device_host_ops.hbm_free(f->priv, f->a, BYTES);
    kvt_device_host_ops.host_free(f->priv, f->b, BYTES);
    kvt_device_host_ops.close(f->priv);
    free(f);
    return 0;
}

static void test_submit_is_not_inline(void **state)
{
    struct fix *f = *state;
    kvt_key k = t_key(1, 2, 3);
    t_fill(f->b, BYTES, k, 1);
    struct kvt_copy c = { f->a, f->b, BYTES };
    uint64_t fence = 0;
    double t0 = util_now();
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, &c, 1, &fence), 0);
    assert_int_equal(kvt_device_host_ops.poll(f->priv, KVT_H2D, fence), -EINPROGRESS);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, fence), 0);
    /* The cap is a floor on duration (behaviour, not speed): 4 MiB at
     * 8 MB/s cannot take less than ~0.52 s. */
    assert_true(util_now() - t0 >= 0.5);
    assert_int_equal(kvt_device_host_ops.poll(f->priv, KVT_H2D, fence), 0);
    assert_true(t_check(f->a, BYTES, k, 1));
}

static void test_fences_in_order_per_direction(void **state)
{
    struct fix *f = *state;
    uint64_t prev = 0;
    /* 200 batches rewriting the same 4 KiB: the last one queued must win. */
    for (uint32_t i = 0; i < 200; i++) {
        t_fill(f->b + (size_t)i * 4096 % (BYTES / 2), 4096, t_key(9, 0, i), i);
        struct kvt_copy c = { f->a, f->b + (size_t)i * 4096 % (BYTES / 2), 4096 };
        uint64_t fence;
        assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, &c, 1, &fence), 0);
        assert_int_equal(fence, prev + 1);
        prev = fence;
    }
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, prev), 0);
    for (uint64_t x = 1; x <= prev; x++)
        assert_int_equal(kvt_device_host_ops.poll(f->priv, KVT_H2D, x), 0);
    assert_true(t_check(f->a, 4096, t_key(9, 0, 199), 199));
    /* The other direction has its own sequence. */
    struct kvt_copy c = { f->b, f->a, 4096 };
    uint64_t fd;
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_D2H, &c, 1, &fd), 0);
    assert_int_equal(fd, 1);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_D2H, fd), 0);
}

static void test_both_directions_batches(void **state)
{
    struct fix *f = *state;
    size_t half = BYTES / 2;
    struct kvt_copy up[8], down[8];
    for (int i = 0; i < 8; i++) {
        t_fill(f->b + i * 4096, 4096, t_key(1, 1, (uint32_t)i), 7);
        t_fill(f->a + half + i * 4096, 4096, t_key(2, 2, (uint32_t)i), 8);
        up[i] = (struct kvt_copy){ f->a + i * 4096, f->b + i * 4096, 4096 };
        down[i] = (struct kvt_copy){ f->b + half + i * 4096, f->a + half + i * 4096, 4096 };
    }
    uint64_t fu, fd;
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, up, 8, &fu), 0);
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_D2H, down, 8, &fd), 0);
    assert_int_equal(kvt_device_host_ops.stream_wait(f->priv, KVT_D2H, fd, NULL), 0);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, fu), 0);
    for (int i = 0; i < 8; i++) {
        assert_true(t_check(f->a + i * 4096, 4096, t_key(1, 1, (uint32_t)i), 7));
        assert_true(t_check(f->b + half + i * 4096, 4096, t_key(2, 2, (uint32_t)i), 8));
    }
}

/* Every shape a copy can have, through the streaming path (whole aligned
 * 64-byte blocks of 4 KiB and more) and through memcpy (short, ragged or
 * misaligned): each destination holds exactly the source bytes, and the
 * bytes just outside it are untouched. */
static void test_copy_shapes(void **state)
{
    struct fix *f = *state;
    static const struct { size_t dst_off, src_off, bytes; } shape[] = {
        { 0, 0, 4096 },          /* streamed: the smallest page */
        { 0, 0, 131072 },        /* streamed: kvtier run's page */
        { 64, 128, 4096 + 64 },  /* streamed: aligned, not a page multiple */
        { 0, 0, 100 },           /* memcpy: short */
        { 0, 0, 4096 + 8 },      /* memcpy: not whole 64-byte blocks */
        { 8, 0, 8192 },          /* memcpy: destination misaligned */
        { 0, 24, 8192 },         /* memcpy: source misaligned */
    };
    const size_t n = sizeof(shape) / sizeof(shape[0]), area = 256 << 10;
    struct kvt_copy c[sizeof(shape) / sizeof(shape[0])];
    for (size_t i = 0; i < n; i++) {
        uint8_t *dst = f->a + i * area, *src = f->b + i * area;
        memset(dst, 0xee, area);
        t_fill(src + shape[i].src_off, shape[i].bytes, t_key(3, 3, (uint32_t)i), 9);
        c[i] = (struct kvt_copy){ dst + shape[i].dst_off, src + shape[i].src_off, shape[i].bytes };
    }
    uint64_t fence;
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, c, n, &fence), 0);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, fence), 0);
    for (size_t i = 0; i < n; i++) {
        uint8_t *dst = f->a + i * area;
        assert_true(t_check(dst + shape[i].dst_off, shape[i].bytes, t_key(3, 3, (uint32_t)i), 9));
        for (size_t b = 0; b < shape[i].dst_off; b++)
            assert_int_equal(dst[b], 0xee);
        for (size_t b = shape[i].dst_off + shape[i].bytes; b < area; b++)
            assert_int_equal(dst[b], 0xee);
    }
}

static void test_failure_is_sticky(void **state)
{
    struct fix *f = *state;
    struct kvt_copy c = { f->a, f->b, 4096 };
    uint64_t f1, f2, f3;
    kvt_device_host_fail_batch(f->priv, 2);
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, &c, 1, &f1), 0);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, f1), 0);
    memset(f->a, 0x5a, 4096);
    memset(f->b, 0x11, 4096);
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, &c, 1, &f2), 0);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, f2), KVT_EDEVICE);
    /* The failed batch copied nothing. */
    for (int i = 0; i < 4096; i++)
        assert_int_equal(f->a[i], 0x5a);
    assert_int_equal(kvt_device_host_ops.poll(f->priv, KVT_H2D, f1), 0);
    assert_int_equal(kvt_device_host_ops.poll(f->priv, KVT_H2D, f2), KVT_EDEVICE);
    assert_int_equal(kvt_device_host_ops.poll(f->priv, KVT_D2H, 1), KVT_EDEVICE);
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, &c, 1, &f3), KVT_EDEVICE);
    assert_int_equal(kvt_device_host_ops.copy_sync(f->priv, KVT_COPY_H2H, f->a, f->b, 16), KVT_EDEVICE);
}

/* A failure in one direction while the other direction's thread is inside a
 * long batch: wait() on that batch may answer only once the thread has let go
 * of it. The engine frees its arenas when close's waits return; the host
 * back-end once answered KVT_EDEVICE at once and kvt-d2h's memcpy ran on into
 * unmapped memory (test_faults died with SIGSEGV about once in 300 runs).
 * Here the batch began before the failure, so wait must answer 0, and the
 * destination, snapshotted when wait returns, must not change before close
 * has joined the threads. (The old back-end failed this in 8 runs of 8.) */
static void test_failure_waits_for_running_copy(void **state)
{
    const size_t half = 2u << 20, ncopies = 1024; /* 2 GiB: tens of ms of memcpy */
    void *priv;
    uint8_t *a, *b;
    struct kvt_device_params p = { .ordinal = 0 };
    assert_int_equal(kvt_device_host_ops.open(&p, &priv), 0);
    assert_int_equal(kvt_device_host_ops.hbm_alloc(priv, BYTES, (void **)&a), 0);
    assert_int_equal(kvt_device_host_ops.host_alloc(priv, BYTES, (void **)&b), 0);
    memset(a, 0, BYTES);
    memset(b, 0x11, half);
    memset(b + half, 0x22, half);
    struct kvt_copy *up = calloc(ncopies, sizeof(*up));
    uint8_t *snap = malloc(half);
    assert_non_null(up);
    assert_non_null(snap);
    for (size_t i = 0; i < ncopies; i++) /* only the last copy leaves 0x22 */
        up[i] = (struct kvt_copy){ a, b + (i + 1 == ncopies) * half, half };

    kvt_device_host_fail_batch(priv, 2); /* the D2H batch, taken second */
    uint64_t fu, fd;
    assert_int_equal(kvt_device_host_ops.submit(priv, KVT_H2D, up, ncopies, &fu), 0);
    /* Spins until kvt-h2d is copying, so its batch is the 1st taken. A
     * deliberate read racing the memcpy (ThreadSanitizer says so): the back-end
     * has no hook to tell when a batch starts. */
    while (*(volatile uint8_t *)a == 0)
        ;
    struct kvt_copy down = { b, a + half, 4096 };
    assert_int_equal(kvt_device_host_ops.submit(priv, KVT_D2H, &down, 1, &fd), 0);
    assert_int_equal(kvt_device_host_ops.wait(priv, KVT_D2H, fd), KVT_EDEVICE);
    /* It began before the failure: it completes, and wait says so. */
    assert_int_equal(kvt_device_host_ops.wait(priv, KVT_H2D, fu), 0);
    memcpy(snap, a, half);
    assert_int_equal(snap[0], 0x22);
    assert_int_equal(snap[half - 1], 0x22);
    kvt_device_host_ops.close(priv); /* joins the copy threads */
    assert_memory_equal(snap, a, half);
    kvt_device_host_ops.hbm_free(NULL, a, BYTES);
    kvt_device_host_ops.host_free(NULL, b, BYTES);
    free(snap);
    free(up);
}

struct waiter {
    void *priv;
    int rc;
    _Atomic int done;
};

static void *wait_unsent(void *arg)
{
    struct waiter *w = arg;
    w->rc = kvt_device_host_ops.wait(w->priv, KVT_D2H, 1); /* never handed out */
    atomic_store(&w->done, 1);
    return NULL;
}

/* A failure in one direction answers a caller waiting on the other: a fence
 * that direction never handed out can no longer complete, and wait must say
 * so rather than sleep until a batch that will never come. The waiter is
 * given 100 ms to be asleep in wait() first (if it is not, it sees the
 * failure when it polls, and the test passes for that reason instead). */
static void test_failure_answers_the_other_direction(void **state)
{
    struct fix *f = *state;
    struct waiter w = { .priv = f->priv };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_unsent, &w), 0);
    struct timespec ms100 = { 0, 100 * 1000 * 1000 };
    nanosleep(&ms100, NULL);
    kvt_device_host_fail_batch(f->priv, 1);
    struct kvt_copy c = { f->a, f->b, 4096 };
    uint64_t fence;
    assert_int_equal(kvt_device_host_ops.submit(f->priv, KVT_H2D, &c, 1, &fence), 0);
    assert_int_equal(kvt_device_host_ops.wait(f->priv, KVT_H2D, fence), KVT_EDEVICE);
    /* A liveness bound, not a speed: the answer comes at once, or never. */
    for (int i = 0; i < 3000 && !atomic_load(&w.done); i++) {
        struct timespec ms10 = { 0, 10 * 1000 * 1000 };
        nanosleep(&ms10, NULL);
    }
    if (!atomic_load(&w.done)) { /* it sleeps on: no teardown can free the device under it */
        fprintf(stderr, "wait() on a D2H fence never handed out did not answer the failure\n");
        abort();
    }
    pthread_join(t, NULL);
    assert_int_equal(w.rc, KVT_EDEVICE);
}

static void test_copy_sync(void **state)
{
    struct fix *f = *state;
    t_fill(f->b, 8192, t_key(4, 4, 4), 4);
    assert_int_equal(kvt_device_host_ops.copy_sync(f->priv, KVT_COPY_H2D, f->a, f->b, 8192), 0);
    assert_true(t_check(f->a, 8192, t_key(4, 4, 4), 4));
}

/* Copies into an arena stream past the cache from 64 KiB up (a put's step),
 * memcpy below that, at odd sizes and out of the arenas: every shape lands
 * the same bytes, at an offset inside the arena and up to its end. */
static void test_copy_sync_into_and_out_of_arenas(void **state)
{
    struct fix *f = *state;
    size_t sizes[] = { 1u << 20, (64u << 10) + 64, (64u << 10) + 8, 4096, 100 };
    uint8_t *out = malloc(BYTES);
    assert_non_null(out);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        /* The slot ends where the arena does, or within 8 bytes of it (the
         * pattern is read in aligned words). */
        size_t n = sizes[i], at = (BYTES - n) & ~(size_t)7;
        t_fill(out, n, t_key(5, 5, (uint32_t)i), 5);
        memset(f->b, 0, BYTES);
        assert_int_equal(kvt_device_host_ops.copy_sync(f->priv, KVT_COPY_H2H, f->b + at, out, n), 0);
        assert_true(t_check(f->b + at, n, t_key(5, 5, (uint32_t)i), 5));
        assert_int_equal(f->b[at - 1], 0);
        memset(out, 0, BYTES);
        assert_int_equal(kvt_device_host_ops.copy_sync(f->priv, KVT_COPY_H2H, out, f->b + at, n), 0);
        assert_true(t_check(out, n, t_key(5, 5, (uint32_t)i), 5));
    }
    free(out);
}

/* THPeligible of the mapping that holds p in /proc/self/smaps: 1, 0, or -1
 * when it cannot be read. */
static int thp_eligible(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0, r = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            in = a >= lo && a < hi;
        else if (in && sscanf(line, "THPeligible: %d", &v) == 1) {
            r = v;
            break;
        }
    }
    fclose(f);
    return r;
}

/* Arenas ask for transparent huge pages: the DRAM arena is where disk reads
 * land, and this VM's disk serves 4 KiB-page targets slower and unsteadily
 * (devices/device_host.c). Skipped where THP is off or smaps says nothing. */
static void test_arenas_ask_for_huge_pages(void **state)
{
    struct fix *f = *state;
    char mode[128] = "";
    FILE *m = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (m) {
        if (!fgets(mode, sizeof mode, m))
            mode[0] = 0;
        fclose(m);
    }
    if (!mode[0] || strstr(mode, "[never]") || thp_eligible(f->b) < 0) {
        print_message("THP off or not reported: %s\n", mode);
        skip();
    }
    assert_int_equal(thp_eligible(f->b), 1);
    assert_int_equal(thp_eligible(f->a), 1);
}

/* An arena whose size is not whole huge pages (the DRAM arena's spare slot
 * makes it so) still starts on a 2 MiB boundary and is all usable: a
 * mapping the kernel left unaligned began in 4 KiB pages, and io_uring then
 * described the whole registered arena page by page, which cut the disk's
 * merged requests to three 256 KiB pages (base/huge.c). Freed, the whole
 * rounded span is unmapped. */
static void test_arena_starts_on_a_huge_page(void **state)
{
    struct fix *f = *state;
    const size_t huge = (size_t)2 << 20;
    size_t sizes[] = { (4u << 20) + (256u << 10), (1u << 20) + 4096, huge, 4096 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uint8_t *p;
        assert_int_equal(kvt_device_host_ops.host_alloc(f->priv, sizes[i], (void **)&p), 0);
        assert_int_equal((uintptr_t)p % huge, 0);
        memset(p, 0x5a, sizes[i]);
        size_t span = (sizes[i] + huge - 1) / huge * huge;
        unsigned char v;
        assert_int_equal(mincore(p + span - 4096, 4096, &v), 0); /* rounded up, mapped */
        kvt_device_host_ops.host_free(f->priv, p, sizes[i]);
        assert_int_equal(mincore(p, 4096, &v), -1);
        assert_int_equal(errno, ENOMEM);
        assert_int_equal(mincore(p + span - 4096, 4096, &v), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submit_is_not_inline, setup_slow, teardown),
        cmocka_unit_test_setup_teardown(test_fences_in_order_per_direction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_both_directions_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_is_sticky, setup, teardown),
        cmocka_unit_test(test_failure_waits_for_running_copy),
        cmocka_unit_test_setup_teardown(test_failure_answers_the_other_direction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_sync_into_and_out_of_arenas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arenas_ask_for_huge_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arena_starts_on_a_huge_page, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
