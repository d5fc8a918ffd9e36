/*
 * device_host.c — the emulated device back-end.
 *
 * "HBM" is host memory. Each direction has its own copy thread fed by a FIFO
 * of batches, so that both links run at once and, as with CUDA streams, a
 * submit only queues: completion is never inline, and the manager's
 * asynchronous paths (tickets, settle, waiting outside the lock) are exercised
 * on a machine with no GPU. An optional cap (GB/s per direction) makes
 * transfers take the time a PCIe link would, so overlap of copies with compute
 * can be seen and tested.
 *
 * Memory ordering: the copy thread finishes its copies (and an sfence orders
 * their non-temporal stores), then publishes the fence with a release store
 * of completed[dir]; poll() loads it with acquire.
 * A caller that sees fence f done therefore sees every byte of batch f.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stdbool.h>

#include "base/base.h"
#include "devices/device.h"

struct host_batch {
    struct host_batch *next;
    uint64_t fence;
    size_t n;
    struct kvt_copy c[];
};

struct host_queue {
    pthread_t thread;
    bool started;
    /* Per direction: a submit wakes only its own copy thread, and a batch's
     * end only the callers waiting on its direction, only when there are
     * some. With one pair for both, every page copied up woke the idle
     * down-copy thread and every waiter, each wake preempting a thread
     * with work (docs/performance.md#host-copy-wakes). */
    pthread_cond_t work, done;
    uint32_t waiters;                   /* callers in host_wait (under mu) */
    struct host_batch *head, *tail;
    _Atomic uint64_t submitted;         /* last fence handed out (written under mu) */
    _Atomic uint64_t completed;         /* last fence done without error */
    _Atomic uint64_t retired;           /* last fence the thread is done with */
    double next_free_s;                 /* link cap: when the link is idle again */
};

/* The arenas this back-end mapped (hbm_alloc, host_alloc): an engine opens
 * two, a test a few more. */
#define HOST_ARENAS 8

struct host_arena {
    const uint8_t *base;
    size_t bytes;
};

struct host_dev {
    pthread_mutex_t mu;
    struct host_arena arena[HOST_ARENAS]; /* under mu; base NULL: unused */
    bool stop;
    _Atomic int failed;                 /* sticky, as a CUDA context error is */
    uint64_t fail_countdown;            /* test hook: fail the n-th batch from arm */
    double bytes_per_s;                 /* 0 = uncapped */
    struct host_queue q[KVT_DIRS];
    struct host_dev_arg { struct host_dev *d; int dir; } arg[KVT_DIRS];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t)
{
    double d = t - now_s();
    if (d <= 0)
        return;
    struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HOST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define HOST_TSAN 1
#endif

/* Under ThreadSanitizer the copies stay memcpy: its interceptor records the
 * copy thread's stack, which tests/tsan.supp matches for the page bytes a
 * caller may rewrite mid-copy by design; the loads of an inlined loop leave
 * a stack TSan often cannot restore, and the suppression then misses. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(HOST_TSAN)
#include <emmintrin.h>
/* A page copy with non-temporal stores. A plain memcpy of a 128 KiB page
 * first reads every destination line for ownership, then writes it back:
 * three passes over memory where the copy needs two, and the pages it
 * streams through push the caller's working set out of the cache. A GPU's
 * copy engine does neither to the host (docs/design.md#host-copies; the
 * evidence: docs/performance.md#host-copies). Only whole
 * 16-byte-aligned blocks of 64 bytes go this way (pages always are); the
 * stores are weakly ordered, hence host_copy_fence() before the fence that
 * publishes the batch. Returns false where memcpy must do it. */
static bool host_copy_stream(void *dst, const void *src, size_t bytes)
{
    if (bytes < 4096 || bytes % 64 || ((uintptr_t)dst | (uintptr_t)src) % 16)
        return false;
    __m128i *d = dst;
    const __m128i *s = src;
    for (size_t i = 0; i < bytes / 16; i += 4) {
        __m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1);
        __m128i c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);
        _mm_stream_si128(d + i, a);
        _mm_stream_si128(d + i + 1, b);
        _mm_stream_si128(d + i + 2, c);
        _mm_stream_si128(d + i + 3, e);
    }
    return true;
}
#define host_copy_fence() _mm_sfence()
#else
static bool host_copy_stream(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return false;
}
#define host_copy_fence() ((void)0)
#endif

/* copy_sync streams copies into an arena from this size up (a put's
 * step is PUT_CRC_CHUNK, 1 MiB; a small page's copy gains nothing). */
#define HOST_STREAM_MIN ((size_t)64 << 10)

/* Runs one batch: the copies, then the cap's delay. Returns false to fail it. */
static bool host_run_batch(struct host_dev *d, struct host_queue *q, struct host_batch *b,
                           bool fail)
{
    if (fail)
        return false;
    size_t bytes = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (!host_copy_stream(b->c[i].dst, b->c[i].src, b->c[i].bytes))
            memcpy(b->c[i].dst, b->c[i].src, b->c[i].bytes);
        bytes += b->c[i].bytes;
    }
    host_copy_fence();
    if (d->bytes_per_s > 0) {
        double start = now_s();
        if (q->next_free_s < start)
            q->next_free_s = start;
        q->next_free_s += (double)bytes / d->bytes_per_s;
        sleep_until(q->next_free_s);
    }
    return true;
}

static void *host_copy_thread(void *arg)
{
    struct host_dev_arg *a = arg;
    struct host_dev *d = a->d;
    struct host_queue *q = &d->q[a->dir];
    pthread_setname_np(pthread_self(), a->dir == KVT_H2D ? "kvt-h2d" : "kvt-d2h");

    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!q->head && !d->stop)
            pthread_cond_wait(&q->work, &d->mu);
        if (!q->head && d->stop)
            break;
        struct host_batch *b = q->head;
        q->head = b->next;
        if (!q->head)
            q->tail = NULL;
        bool fail = false;
        if (d->fail_countdown && --d->fail_countdown == 0)
            fail = true;
        bool dead = atomic_load(&d->failed);
        pthread_mutex_unlock(&d->mu);

        /* After a failure nothing more is copied: a later fence must not
         * complete "successfully" over bytes an earlier failed batch left. */
        bool ok = !dead && host_run_batch(d, q, b, fail);

        pthread_mutex_lock(&d->mu);
        bool failing = !ok && !atomic_exchange(&d->failed, 1);
        if (ok)
            atomic_store_explicit(&q->completed, b->fence, memory_order_release);
        atomic_store_explicit(&q->retired, b->fence, memory_order_release);
        free(b);
        /* The failure answers the other direction's waiters too: a fence
         * never handed out there now fails at once (host_poll). */
        for (int i = 0; i < KVT_DIRS; i++)
            if (d->q[i].waiters && (&d->q[i] == q || failing))
                pthread_cond_broadcast(&d->q[i].done);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void host_close(void *priv);

static int host_open(const struct kvt_device_params *p, void **priv)
{
    struct host_dev *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    pthread_mutex_init(&d->mu, NULL);
    for (int i = 0; i < KVT_DIRS; i++) {
        pthread_cond_init(&d->q[i].work, NULL);
        pthread_cond_init(&d->q[i].done, NULL);
    }
    d->bytes_per_s = p->link_gbps > 0 ? p->link_gbps * 1e9 : 0;
    for (int i = 0; i < KVT_DIRS; i++) {
        d->arg[i].d = d;
        d->arg[i].dir = i;
        int r = pthread_create(&d->q[i].thread, NULL, host_copy_thread, &d->arg[i]);
        if (r) {
            host_close(d);
            return -r;
        }
        d->q[i].started = true;
    }
    *priv = d;
    return 0;
}

static void host_close(void *priv)
{
    struct host_dev *d = priv;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    for (int i = 0; i < KVT_DIRS; i++)
        pthread_cond_signal(&d->q[i].work);
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < KVT_DIRS; i++) {
        if (d->q[i].started)
            pthread_join(d->q[i].thread, NULL);
        pthread_cond_destroy(&d->q[i].work);
        pthread_cond_destroy(&d->q[i].done);
    }
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Arenas are laid out for transparent huge pages (kvt_huge_map: honoured
 * where THP is "madvise" or "always"; harmless where it is "never"). The
 * DRAM arena is where SSD reads land and writes leave from by DMA: in 4 KiB
 * pages a 256 KiB page is 64 scatter segments, and a virtual disk serves
 * those slower and in smaller merged requests (docs/design.md#huge-pages).
 * (A pinned buffer is the CUDA back-end's business.) */
static int host_map(void *priv, size_t bytes, void **out)
{
    struct host_dev *d = priv;
    int r = kvt_huge_map(bytes, out);
    if (r < 0)
        return r;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < HOST_ARENAS; i++)
        if (!d->arena[i].base) {
            d->arena[i] = (struct host_arena){ *out, bytes };
            break;
        }
    pthread_mutex_unlock(&d->mu); /* no room to note it: its copies use memcpy */
    return 0;
}

/* priv may be NULL: the memory outlived its device (the engine frees its
 * arenas first, but a test may not). */
static void host_unmap(void *priv, void *p, size_t bytes)
{
    struct host_dev *d = priv;
    if (d) {
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < HOST_ARENAS; i++)
            if (d->arena[i].base == p)
                d->arena[i] = (struct host_arena){ NULL, 0 };
        pthread_mutex_unlock(&d->mu);
    }
    kvt_huge_unmap(p, bytes);
}

static int host_hbm_alloc(void *priv, size_t bytes, void **out) { return host_map(priv, bytes, out); }
static int host_host_alloc(void *priv, size_t bytes, void **out) { return host_map(priv, bytes, out); }

/* Whether [p, p + bytes) lies in one of the arenas. */
static bool host_in_arena(struct host_dev *d, const void *p, size_t bytes)
{
    const uint8_t *a = p;
    bool in = false;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < HOST_ARENAS && !in; i++)
        in = d->arena[i].base && a >= d->arena[i].base &&
             bytes <= d->arena[i].bytes - (size_t)(a - d->arena[i].base);
    pthread_mutex_unlock(&d->mu);
    return in;
}

static int host_submit(void *priv, enum kvt_dir dir, const struct kvt_copy *c, size_t n,
                       uint64_t *fence)
{
    struct host_dev *d = priv;
    if (atomic_load(&d->failed))
        return KVT_EDEVICE;
    struct host_batch *b = malloc(sizeof(*b) + n * sizeof(*c));
    if (!b)
        return -ENOMEM;
    memcpy(b->c, c, n * sizeof(*c));
    b->n = n;
    b->next = NULL;

    struct host_queue *q = &d->q[dir];
    pthread_mutex_lock(&d->mu);
    uint64_t f = b->fence = atomic_fetch_add(&q->submitted, 1) + 1;
    if (q->tail)
        q->tail->next = b;
    else
        q->head = b;
    q->tail = b;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&d->mu);
    *fence = f; /* not b->fence: the copy thread may have freed b already */
    return 0;
}

/* A failed fence is reported only once its thread has let go of the batch:
 * the other direction's thread may still be inside a memcpy it began before
 * the failure, and a caller that took the error for "done" would free or
 * reuse that memory under it (kvt_close unmapping the arenas did: SIGSEGV in
 * kvt-d2h). After a failure the threads skip every queued batch, so pending
 * fences retire at once. */
static int host_poll(void *priv, enum kvt_dir dir, uint64_t f)
{
    struct host_dev *d = priv;
    struct host_queue *q = &d->q[dir];
    /* retired before completed: the thread stores completed, then retired,
     * so a batch seen retired is seen completed too if it succeeded. In the
     * other order a success landing between the two loads reads as failed. */
    uint64_t retired = atomic_load_explicit(&q->retired, memory_order_acquire);
    if (atomic_load_explicit(&q->completed, memory_order_acquire) >= f)
        return 0;
    if (retired >= f)
        return KVT_EDEVICE; /* retired, not completed: it or an earlier one failed */
    /* Failed: a fence never handed out can never complete. */
    if (atomic_load(&d->failed) && f > atomic_load(&q->submitted))
        return KVT_EDEVICE;
    return -EINPROGRESS;
}

static int host_wait(void *priv, enum kvt_dir dir, uint64_t f)
{
    struct host_dev *d = priv;
    int r = host_poll(d, dir, f);
    if (r != -EINPROGRESS)
        return r;
    struct host_queue *q = &d->q[dir];
    pthread_mutex_lock(&d->mu);
    q->waiters++;
    while ((r = host_poll(d, dir, f)) == -EINPROGRESS)
        pthread_cond_wait(&q->done, &d->mu);
    q->waiters--;
    pthread_mutex_unlock(&d->mu);
    return r;
}

/* No GPU streams here: the caller's thread stands in for the stream. */
static int host_stream_wait(void *priv, enum kvt_dir dir, uint64_t f, void *stream)
{
    return host_wait(priv, dir, f);
}

static int host_copy_sync(void *priv, enum kvt_copy_kind kind, void *dst, const void *src,
                          size_t bytes)
{
    struct host_dev *d = priv;
    if (atomic_load(&d->failed))
        return KVT_EDEVICE;
    /* Into an arena (a put), the copy streams past the cache, as a GPU's
     * copy engine would leave it: the slot's next reader is the disk's DMA
     * or a batch copy, which streams too. A plain memcpy reads each
     * destination line before writing it, a third pass over memory, and on
     * a virtual disk the host's DMA for the writes competes with that
     * traffic: a memcpy loop on the other core slowed O_DIRECT writes 1.35x
     * (docs/performance.md#put-copy-traffic). Out of an arena (a get), the
     * caller reads its buffer next: memcpy leaves it in the cache. */
    if (bytes >= HOST_STREAM_MIN && host_in_arena(d, dst, bytes) &&
        host_copy_stream(dst, src, bytes))
        host_copy_fence();
    else
        memcpy(dst, src, bytes);
    return 0;
}

void kvt_device_host_fail_batch(void *priv, uint64_t nth)
{
    struct host_dev *d = priv;
    pthread_mutex_lock(&d->mu);
    d->fail_countdown = nth;
    pthread_mutex_unlock(&d->mu);
}

const struct kvt_device_ops kvt_device_host_ops = {
    .name = "host",
    .version = KVT_DEVICE_OPS_VERSION,
    .open = host_open,
    .close = host_close,
    .hbm_alloc = host_hbm_alloc,
    .hbm_free = host_unmap,
    .host_alloc = host_host_alloc,
    .host_free = host_unmap,
    .submit = host_submit,
    .poll = host_poll,
    .wait = host_wait,
    .stream_wait = host_stream_wait,
    .copy_sync = host_copy_sync,
};
