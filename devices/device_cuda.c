/*
 * device_cuda.c — the CUDA device back-end (devices/device.h).
 *
 * HBM is one cudaMalloc arena; DRAM is pinned host memory. Each direction has
 * its own stream, so H2D and D2H run on the GPU's two copy engines at once.
 * A batch is one cudaMemcpyBatchAsync (or, where the runtime has none or
 * KVT_CUDA_COPY=loop says so, a run of cudaMemcpyAsync calls) closed by a
 * cudaEventRecord; its fence is a per-direction sequence number, and the
 * event that marks it lives in a ring slot indexed by fence % FENCE_RING.
 *
 * This is the only file of the library that includes CUDA headers.
 *
 * Threads: cudaSetDevice is per thread, so every operation sets the device
 * first. s->lock guards the rings' bookkeeping and the failed flag; it is
 * never held across a blocking CUDA call. A per-direction submit lock keeps the
 * copies of one batch contiguous on the stream and orders fences.
 */
#include "kvt_build.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <stdbool.h>

#include "include/kvtier.h"
#include "base/base.h"
#include "devices/device.h"

/* Batches in flight per direction. When the ring is full, submit waits for the
 * oldest batch (backpressure rather than an error); events are cheap, so the
 * ring is large enough that this only happens when the link is saturated. */
#define FENCE_RING 256u
#define HOST_ALIGN 4096u

struct cuda_dir {
    cudaStream_t stream;
    cudaEvent_t ev[FENCE_RING];
    uint64_t owner[FENCE_RING]; /* fence last recorded in ev[i]; 0 = none */
    uint64_t issued;            /* last fence handed out */
    uint64_t completed;         /* highest fence known done (all below are too) */
    unsigned nev;               /* events created, for cleanup */
    pthread_mutex_t submit_lock;
    /* cudaMemcpyBatchAsync's arrays, grown to the largest batch; under
     * submit_lock. */
    void **dsts;
    const void **srcs;
    size_t *sizes;
    size_t cap;
};

/* One pinned host allocation; how it was pinned decides how it is freed. */
struct host_block {
    struct host_block *next;
    void *p;
    size_t len;
    bool registered; /* kvt_huge_map + cudaHostRegister, else cudaHostAlloc */
};

struct cuda_dev {
    int ordinal;
    bool failed;                /* sticky: a CUDA error hit a batch or the context */
    bool batch_api;             /* cudaMemcpyBatchAsync; cleared for good if refused */
    pthread_mutex_t lock;       /* dir[].owner/issued/completed, failed, blocks */
    struct cuda_dir dir[KVT_DIRS];
    cudaStream_t sync_stream;   /* copy_sync */
    struct host_block *blocks;
};

/* ------------------------------------------------------------- errors */

static int cuda_err(const struct cuda_dev *s, int err, const char *what, cudaError_t e)
{
    return kvt_fail(err, "cuda device %d: %s: %s", s->ordinal, what, cudaGetErrorString(e));
}

/* Enters the failed state. Every later submit, and every poll/wait of a fence
 * not already known done, reports KVT_EDEVICE: after a device error we cannot
 * tell which copies landed, so no page in flight may be marked valid. */
static int cuda_fail(struct cuda_dev *s, const char *what, cudaError_t e)
{
    pthread_mutex_lock(&s->lock);
    s->failed = true;
    pthread_mutex_unlock(&s->lock);
    return cuda_err(s, KVT_EDEVICE, what, e);
}

static int failed_earlier(const struct cuda_dev *s)
{
    return kvt_fail(KVT_EDEVICE, "cuda device %d: failed by an earlier error", s->ordinal);
}

/* After a failed call: is the context broken (a sticky error), or was it only
 * a bad argument? A sticky error is returned by every later call, so querying
 * a stream of ours tells them apart without blocking. */
static bool context_broken(const struct cuda_dev *s)
{
    (void)cudaGetLastError(); /* clears a non-sticky error; a sticky one stays */
    cudaError_t e = cudaStreamQuery(s->sync_stream);
    return e != cudaSuccess && e != cudaErrorNotReady;
}

/* Errors of calls that take caller arguments (copy_sync, stream_wait): a bad
 * pointer or stream handle must not fail the whole engine. */
static int arg_error(struct cuda_dev *s, const char *what, cudaError_t e)
{
    if (context_broken(s))
        return cuda_fail(s, what, e);
    if (e == cudaErrorInvalidValue || e == cudaErrorInvalidResourceHandle)
        return cuda_err(s, -EINVAL, what, e);
    return cuda_err(s, KVT_EDEVICE, what, e);
}

static int cuda_enter(struct cuda_dev *s)
{
    cudaError_t e = cudaSetDevice(s->ordinal);
    return e == cudaSuccess ? 0 : cuda_fail(s, "cudaSetDevice", e);
}

/* Checks dir and sets this thread's device (cudaSetDevice is per thread). */
static int dir_enter(struct cuda_dev *s, enum kvt_dir dir)
{
    return (unsigned)dir < KVT_DIRS ? cuda_enter(s) : -EINVAL;
}

/* ------------------------------------------------------------- open/close */

static int probe_device(int ordinal)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return kvt_fail(KVT_EDEVICE, "cuda device %d: no usable CUDA driver or device: %s",
                        ordinal, cudaGetErrorString(e));
    if (ordinal < 0 || ordinal >= n)
        return kvt_fail(KVT_EDEVICE, "cuda device %d: not present (%d CUDA devices)", ordinal,
                        n);
    e = cudaSetDevice(ordinal);
    if (e != cudaSuccess)
        return kvt_fail(KVT_EDEVICE, "cuda device %d: cudaSetDevice: %s", ordinal,
                        cudaGetErrorString(e));
    return 0;
}

/* Non-blocking streams do not synchronise with the legacy default stream, so
 * our copies neither wait for the application's default-stream kernels nor
 * stall them. */
static cudaError_t dir_init(struct cuda_dir *d)
{
    cudaError_t e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return e;
    for (d->nev = 0; d->nev < FENCE_RING; d->nev++) {
        e = cudaEventCreateWithFlags(&d->ev[d->nev], cudaEventDisableTiming);
        if (e != cudaSuccess)
            goto out_events;
    }
    return cudaSuccess;

out_events:
    while (d->nev)
        cudaEventDestroy(d->ev[--d->nev]);
    cudaStreamDestroy(d->stream);
    return e;
}

static void dir_fini(struct cuda_dir *d)
{
    cudaStreamSynchronize(d->stream);
    while (d->nev)
        cudaEventDestroy(d->ev[--d->nev]);
    cudaStreamDestroy(d->stream);
    free(d->dsts);
    free(d->srcs);
    free(d->sizes);
}

/* One call per batch unless KVT_CUDA_COPY=loop: one cudaMemcpyAsync per copy
 * is the baseline `kvtier bench hbm` measures against, and a way around a
 * runtime whose batch call misbehaves. cudaMemcpyBatchAsync has this
 * signature from CUDA 13 on (12.8's took one more argument). */
static bool batch_api_wanted(void)
{
#if CUDART_VERSION >= 13000
    const char *v = getenv("KVT_CUDA_COPY");
    return !(v && !strcmp(v, "loop"));
#else
    return false;
#endif
}

static int cuda_open(const struct kvt_device_params *p, void **priv)
{
    if (!p || !priv)
        return -EINVAL;
    int rc = probe_device(p->ordinal);
    if (rc)
        return rc;
    struct cuda_dev *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->ordinal = p->ordinal;
    s->batch_api = batch_api_wanted();
    /* Default mutex attributes: initialisation cannot fail on Linux. */
    pthread_mutex_init(&s->lock, NULL);
    for (int i = 0; i < KVT_DIRS; i++)
        pthread_mutex_init(&s->dir[i].submit_lock, NULL);

    const char *what = "cudaStreamCreateWithFlags";
    cudaError_t e = cudaStreamCreateWithFlags(&s->sync_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        goto out_locks;
    what = "stream/event creation";
    if ((e = dir_init(&s->dir[KVT_H2D])) != cudaSuccess)
        goto out_sync_stream;
    if ((e = dir_init(&s->dir[KVT_D2H])) != cudaSuccess)
        goto out_h2d;
    *priv = s;
    return 0;

out_h2d:
    dir_fini(&s->dir[KVT_H2D]);
out_sync_stream:
    cudaStreamDestroy(s->sync_stream);
out_locks:
    rc = cuda_err(s, e == cudaErrorMemoryAllocation ? -ENOMEM : KVT_EDEVICE, what, e);
    for (int i = 0; i < KVT_DIRS; i++)
        pthread_mutex_destroy(&s->dir[i].submit_lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return rc;
}

static void host_block_release(struct host_block *b);

static void cuda_close(void *priv)
{
    struct cuda_dev *s = priv;
    if (!s)
        return;
    (void)cudaSetDevice(s->ordinal);
    for (int i = 0; i < KVT_DIRS; i++) {
        dir_fini(&s->dir[i]);
        pthread_mutex_destroy(&s->dir[i].submit_lock);
    }
    cudaStreamSynchronize(s->sync_stream);
    cudaStreamDestroy(s->sync_stream);
    /* The contract says arenas are freed first; release any left so a caller's
     * mistake leaks no pinned memory (pinned pages are scarce). */
    while (s->blocks) {
        struct host_block *b = s->blocks;
        s->blocks = b->next;
        host_block_release(b);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ------------------------------------------------------------- arenas */

static int cuda_hbm_alloc(void *priv, size_t bytes, void **out)
{
    struct cuda_dev *s = priv;
    if (!bytes || !out)
        return -EINVAL;
    int rc = cuda_enter(s);
    if (rc)
        return rc;
    cudaError_t e = cudaMalloc(out, bytes);
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* out of memory is not sticky */
    return cuda_err(s, e == cudaErrorMemoryAllocation ? -ENOMEM : KVT_EDEVICE, "cudaMalloc", e);
}

static void cuda_hbm_free(void *priv, void *p, size_t bytes)
{
    struct cuda_dev *s = priv;
    if (p && cuda_enter(s) == 0)
        cudaFree(p);
}

/* kvt_huge_map + cudaHostRegister rather than cudaHostAlloc: for arenas of
 * tens or hundreds of GiB it sets up faster, the memory is page-aligned by
 * construction, which O_DIRECT reads into the arena require, and it is in
 * huge pages, which keeps the disk's requests from it whole (base/huge.c).
 * cudaHostAlloc is the fallback where registration is refused (limits, old
 * drivers). */
static int host_pin(struct cuda_dev *s, struct host_block *b, size_t len)
{
    void *p;
    if (kvt_huge_map(len, &p) == 0) {
        if (cudaHostRegister(p, len, cudaHostRegisterDefault) == cudaSuccess) {
            *b = (struct host_block){.p = p, .len = len, .registered = true};
            return 0;
        }
        (void)cudaGetLastError();
        kvt_huge_unmap(p, len);
    }
    cudaError_t e = cudaHostAlloc(&p, len, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_err(s, e == cudaErrorMemoryAllocation ? -ENOMEM : KVT_EDEVICE,
                        "cudaHostAlloc", e);
    }
    if ((uintptr_t)p % HOST_ALIGN) {
        cudaFreeHost(p);
        return kvt_fail(-ENOMEM, "cuda device %d: cudaHostAlloc memory not %u-aligned",
                        s->ordinal, HOST_ALIGN);
    }
    *b = (struct host_block){.p = p, .len = len, .registered = false};
    return 0;
}

static void host_block_release(struct host_block *b)
{
    if (b->registered) {
        cudaHostUnregister(b->p);
        kvt_huge_unmap(b->p, b->len);
    } else {
        cudaFreeHost(b->p);
    }
    free(b);
}

static int cuda_host_alloc(void *priv, size_t bytes, void **out)
{
    struct cuda_dev *s = priv;
    if (!bytes || !out || bytes > SIZE_MAX - HOST_ALIGN)
        return -EINVAL;
    int rc = cuda_enter(s);
    if (rc)
        return rc;
    struct host_block *b = malloc(sizeof *b);
    if (!b)
        return -ENOMEM;
    rc = host_pin(s, b, (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN);
    if (rc) {
        free(b);
        return rc;
    }
    pthread_mutex_lock(&s->lock);
    b->next = s->blocks;
    s->blocks = b;
    pthread_mutex_unlock(&s->lock);
    *out = b->p;
    return 0;
}

static void cuda_host_free(void *priv, void *p, size_t bytes)
{
    struct cuda_dev *s = priv;
    struct host_block *b = NULL;
    pthread_mutex_lock(&s->lock);
    for (struct host_block **pp = &s->blocks; *pp; pp = &(*pp)->next) {
        if ((*pp)->p == p) {
            b = *pp;
            *pp = b->next;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (b && cuda_enter(s) == 0)
        host_block_release(b); /* a pointer not ours is ignored */
}

/* ------------------------------------------------------------- batches */

static void advance(struct cuda_dir *d, uint64_t f)
{
    if (f > d->completed)
        d->completed = f;
}

/* Picks the slot of the next fence. If the slot's previous batch is not known
 * done, waits for it first: batches of a direction complete in order, so this
 * only waits for what must finish before the new batch anyway. Called with
 * d->submit_lock held, so issued cannot move under us. */
static int reserve_slot(struct cuda_dev *s, struct cuda_dir *d, uint64_t *fence)
{
    uint64_t f = d->issued + 1;
    unsigned i = f % FENCE_RING;
    pthread_mutex_lock(&s->lock);
    bool failed = s->failed;
    uint64_t old = d->owner[i];
    bool busy = old > d->completed;
    pthread_mutex_unlock(&s->lock);
    if (failed)
        return failed_earlier(s);
    if (busy) {
        cudaError_t e = cudaEventSynchronize(d->ev[i]);
        if (e != cudaSuccess)
            return cuda_fail(s, "cudaEventSynchronize", e);
        pthread_mutex_lock(&s->lock);
        advance(d, old);
        pthread_mutex_unlock(&s->lock);
    }
    *fence = f;
    return 0;
}

#if CUDART_VERSION >= 13000
/* Grows d's batch arrays to n entries; false when out of memory. */
static bool batch_room(struct cuda_dir *d, size_t n)
{
    if (n <= d->cap)
        return true;
    void **dsts = realloc(d->dsts, n * sizeof(*dsts));
    if (dsts)
        d->dsts = dsts;
    const void **srcs = realloc(d->srcs, n * sizeof(*srcs));
    if (srcs)
        d->srcs = srcs;
    size_t *sizes = realloc(d->sizes, n * sizeof(*sizes));
    if (sizes)
        d->sizes = sizes;
    if (!dsts || !srcs || !sizes)
        return false;
    d->cap = n;
    return true;
}

/* The copies as one cudaMemcpyBatchAsync: the runtime takes them in one call
 * rather than one per page, which matters when a page copies in about the
 * time a call costs (128 KiB at 50 GB/s: 2.6 us). Stream order for the
 * sources, as cudaMemcpyAsync has. */
static cudaError_t queue_batch(struct cuda_dir *d, const struct kvt_copy *c, size_t n)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        if (!c[k].bytes)
            continue;
        d->dsts[m] = c[k].dst;
        d->srcs[m] = c[k].src;
        d->sizes[m] = c[k].bytes;
        m++;
    }
    if (!m)
        return cudaSuccess;
    struct cudaMemcpyAttributes attr = { .srcAccessOrder = cudaMemcpySrcAccessOrderStream };
    size_t first = 0;
    return cudaMemcpyBatchAsync(d->dsts, d->srcs, d->sizes, m, &attr, &first, 1, d->stream);
}
#endif

/* Queues the copies on d's stream. The copies of one batch never overlap
 * (device.h), so the order a batch call runs them in does not matter. */
static cudaError_t queue_copies(struct cuda_dev *s, struct cuda_dir *d, enum kvt_dir dir,
                                const struct kvt_copy *c, size_t n, const char **what)
{
#if CUDART_VERSION >= 13000
    if (n > 1 && __atomic_load_n(&s->batch_api, __ATOMIC_RELAXED) && batch_room(d, n)) {
        *what = "cudaMemcpyBatchAsync";
        cudaError_t e = queue_batch(d, c, n);
        if (e == cudaSuccess || context_broken(s))
            return e;
        /* Refused, the context intact (a driver without the call, or
         * arguments it will not take): copy by copy from now on. What the
         * refused call may have queued is queued again: the same bytes to
         * the same place, in stream order. */
        __atomic_store_n(&s->batch_api, false, __ATOMIC_RELAXED);
    }
#endif
    enum cudaMemcpyKind kind = dir == KVT_H2D ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    cudaError_t e = cudaSuccess;
    *what = "cudaMemcpyAsync";
    for (size_t k = 0; k < n && e == cudaSuccess; k++)
        if (c[k].bytes)
            e = cudaMemcpyAsync(c[k].dst, c[k].src, c[k].bytes, kind, d->stream);
    return e;
}

static int submit_batch(struct cuda_dev *s, enum kvt_dir dir, const struct kvt_copy *c,
                        size_t n, uint64_t *fence)
{
    struct cuda_dir *d = &s->dir[dir];
    uint64_t f = 0;
    int rc = reserve_slot(s, d, &f);
    if (rc)
        return rc;
    const char *what = "cudaMemcpyAsync";
    cudaError_t e = queue_copies(s, d, dir, c, n, &what);

    /* The record and the owner update happen under s->lock so that poll never
     * sees a slot whose owner names a fence its event does not yet cover. */
    pthread_mutex_lock(&s->lock);
    bool failed_before = s->failed;
    if (e == cudaSuccess && !failed_before) {
        what = "cudaEventRecord";
        e = cudaEventRecord(d->ev[f % FENCE_RING], d->stream);
        if (e == cudaSuccess) {
            d->owner[f % FENCE_RING] = f;
            d->issued = f;
            pthread_mutex_unlock(&s->lock);
            *fence = f;
            return 0;
        }
    }
    s->failed = true;
    pthread_mutex_unlock(&s->lock);
    /* Copies of this batch already queued cannot be taken back: drain them, so
     * that nothing of a batch reported as not queued touches the arenas after
     * we return. The engine is failed either way. */
    cudaStreamSynchronize(d->stream);
    return e == cudaSuccess ? failed_earlier(s) : cuda_err(s, KVT_EDEVICE, what, e);
}

static int cuda_submit(void *priv, enum kvt_dir dir, const struct kvt_copy *c, size_t n,
                       uint64_t *fence)
{
    struct cuda_dev *s = priv;
    if ((n && !c) || !fence)
        return -EINVAL;
    int rc = dir_enter(s, dir);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->dir[dir].submit_lock);
    rc = submit_batch(s, dir, c, n, fence);
    pthread_mutex_unlock(&s->dir[dir].submit_lock);
    return rc;
}

/* Under s->lock: 0 when f is known done, KVT_EDEVICE when failed, -EINVAL for
 * a fence never issued, else 1 with *slot set. A slot is only reused once its
 * fence is done, so ev[*slot] covers f or, at worst, a later fence: waiting on
 * it may over-wait but never reports an unfinished fence as done. */
static int fence_lookup_locked(const struct cuda_dev *s, const struct cuda_dir *d, uint64_t f,
                               unsigned *slot)
{
    if (f <= d->completed)
        return 0;
    if (s->failed)
        return KVT_EDEVICE;
    if (f > d->issued)
        return -EINVAL;
    *slot = f % FENCE_RING;
    return 1;
}

/* In the failed state, a fence is reported failed only once its stream has
 * drained (device.h: the caller may then free the memory). A broken context
 * answers at once; after a non-sticky error elsewhere (a bad submit in the
 * other direction) this stream may still be copying into our arenas. */
static int lookup_error(const struct cuda_dev *s, const struct cuda_dir *d, int rc)
{
    if (rc == KVT_EDEVICE) {
        (void)cudaStreamSynchronize(d->stream);
        return failed_earlier(s);
    }
    return kvt_fail(rc, "cuda device %d: fence not issued", s->ordinal);
}

static int cuda_poll(void *priv, enum kvt_dir dir, uint64_t f)
{
    struct cuda_dev *s = priv;
    int rc = dir_enter(s, dir);
    if (rc)
        return rc;
    struct cuda_dir *d = &s->dir[dir];
    unsigned i;
    cudaError_t e = cudaErrorNotReady;
    pthread_mutex_lock(&s->lock);
    rc = fence_lookup_locked(s, d, f, &i);
    if (rc == 1) {
        e = cudaEventQuery(d->ev[i]);
        if (e == cudaSuccess)
            advance(d, d->owner[i]); /* in-order stream: all before are done */
        else if (e != cudaErrorNotReady)
            s->failed = true;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 1)
        return rc ? lookup_error(s, d, rc) : 0;
    if (e == cudaSuccess)
        return 0;
    if (e == cudaErrorNotReady)
        return -EINPROGRESS;
    return cuda_err(s, KVT_EDEVICE, "cudaEventQuery", e);
}

static int cuda_wait(void *priv, enum kvt_dir dir, uint64_t f)
{
    struct cuda_dev *s = priv;
    int rc = dir_enter(s, dir);
    if (rc)
        return rc;
    struct cuda_dir *d = &s->dir[dir];
    unsigned i;
    cudaEvent_t ev = NULL;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->lock);
    rc = fence_lookup_locked(s, d, f, &i);
    if (rc == 1) {
        ev = d->ev[i];
        seen = d->owner[i];
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 1)
        return rc ? lookup_error(s, d, rc) : 0;
    /* Not under s->lock: the wait may be long. If a submit re-records the event
     * meanwhile, we wait for a later batch, which implies ours. */
    cudaError_t e = cudaEventSynchronize(ev);
    if (e != cudaSuccess)
        return cuda_fail(s, "cudaEventSynchronize", e);
    pthread_mutex_lock(&s->lock);
    advance(d, seen);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* The stream waits on the device; the host does not block. Held under s->lock
 * (the call only enqueues) so the slot is not re-recorded between lookup and
 * wait. */
static int cuda_stream_wait(void *priv, enum kvt_dir dir, uint64_t f, void *stream)
{
    struct cuda_dev *s = priv;
    int rc = dir_enter(s, dir);
    if (rc)
        return rc;
    struct cuda_dir *d = &s->dir[dir];
    unsigned i;
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&s->lock);
    rc = fence_lookup_locked(s, d, f, &i);
    if (rc == 1)
        e = cudaStreamWaitEvent((cudaStream_t)stream, d->ev[i], 0);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        return lookup_error(s, d, rc);
    return e == cudaSuccess ? 0 : arg_error(s, "cudaStreamWaitEvent", e);
}

/* ------------------------------------------------------------- sync copies */

/* Not plain cudaMemcpy: from pageable memory to the device, and device to
 * device, cudaMemcpy may return before the DMA has landed, and it runs on the
 * legacy default stream, which our non-blocking copy streams do not order
 * after. A later D2H batch of the same slot could then read stale bytes. Our
 * own stream, synchronised, makes the copy complete on return without waiting
 * for the application's default-stream work. */
static int cuda_copy_sync(void *priv, enum kvt_copy_kind kind, void *dst, const void *src,
                          size_t bytes)
{
    static const enum cudaMemcpyKind kinds[] = {
        [KVT_COPY_H2H] = cudaMemcpyHostToHost,
        [KVT_COPY_H2D] = cudaMemcpyHostToDevice,
        [KVT_COPY_D2H] = cudaMemcpyDeviceToHost,
        [KVT_COPY_D2D] = cudaMemcpyDeviceToDevice,
    };
    struct cuda_dev *s = priv;
    if ((unsigned)kind > KVT_COPY_D2D)
        return -EINVAL;
    if (!bytes)
        return 0;
    int rc = cuda_enter(s);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    bool failed = s->failed;
    pthread_mutex_unlock(&s->lock);
    if (failed)
        return failed_earlier(s);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kinds[kind], s->sync_stream);
    if (e != cudaSuccess)
        return arg_error(s, "cudaMemcpyAsync", e);
    e = cudaStreamSynchronize(s->sync_stream);
    return e == cudaSuccess ? 0 : arg_error(s, "cudaStreamSynchronize", e);
}

const struct kvt_device_ops kvt_device_cuda_ops = {
    .name = "cuda",
    .version = KVT_DEVICE_OPS_VERSION,
    .open = cuda_open,
    .close = cuda_close,
    .hbm_alloc = cuda_hbm_alloc,
    .hbm_free = cuda_hbm_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .submit = cuda_submit,
    .poll = cuda_poll,
    .wait = cuda_wait,
    .stream_wait = cuda_stream_wait,
    .copy_sync = cuda_copy_sync,
};
