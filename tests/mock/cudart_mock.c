/*
 * cudart_mock.c — a stand-in for the CUDA runtime, for testing the CUDA
 * device back-end (devices/device_cuda.c) on machines with no GPU. A build
 * with -DKVT_CUDA_MOCK=ON links it instead of cudart_static; the suite then
 * runs with KVT_TEST_DEVICE=0 (tools/setup.sh test does).
 *
 * What it keeps of a GPU, because the back-end and the tests can get these
 * wrong without one:
 *   - Device memory is not host memory. cudaMalloc hands out a PROT_NONE view
 *     of a memfd and copies go through a second, writable view: a test or a
 *     code path that dereferences an HBM page faults here as it would there.
 *   - Copies check their direction: cudaMemcpyAsync with H2D needs a device
 *     destination and a host source, and so on (cudaErrorInvalidValue).
 *   - cudaMemcpyBatchAsync checks its attributes as documented and runs its
 *     copies in reverse order, since it promises none.
 *   - An event recorded is not done at once: the first few cudaEventQuery
 *     calls after a record answer cudaErrorNotReady, so polls see work in
 *     flight; synchronizing the event or its stream completes it.
 *   - The special streams (0, cudaStreamLegacy, cudaStreamPerThread) are
 *     streams.
 *   - Only ordinal 0 exists, as on a one-GPU machine.
 *   - fork: a child of a process that used the runtime gets
 *     cudaErrorInitializationError from every call, as CUDA's children do.
 * What it does not: copies run at the call, in order, on the calling thread;
 * there are no kernels. Its prototypes come from the toolkit's own header, so
 * a signature that drifts from the real runtime's fails to compile.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

struct CUstream_st {
    unsigned magic;
};

struct CUevent_st {
    unsigned magic;
    int unpolled;              /* queries left that answer "not ready" */
    cudaStream_t rec;          /* the stream of its last record */
    struct CUevent_st *next;   /* all events, for cudaStreamSynchronize */
};

/* Queries an event answers "not ready" after a record: more than one, so
 * that the engine's own poll does not use them up and callers that go on
 * to wait (kvt_wait_stream's cudaStreamWaitEvent, cudaEventSynchronize)
 * take those paths. */
#define NOT_READY_QUERIES 3

#define STREAM_MAGIC 0x5743u
#define EVENT_MAGIC 0xe7e7u

/* One cudaMalloc: the device view handed out and the view copies use. */
struct dev_block {
    struct dev_block *next;
    uint8_t *dev, *shadow;
    size_t len;
};

static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dev_block *blocks;
static struct CUevent_st *events;
static __thread cudaError_t last_error;

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

/* The process that first used the runtime; a forked child is not it. */
static pid_t owner_pid;

static bool forked(void)
{
    pid_t me = getpid();
    pid_t expect = 0;
    if (__atomic_compare_exchange_n(&owner_pid, &expect, me, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return false;
    return expect != me;
}

/* Every entry point starts with this. */
#define ENTER()                                                                                    \
    do {                                                                                           \
        if (forked())                                                                              \
            return fail(cudaErrorInitializationError);                                             \
    } while (0)

/* The writable view of [p, p+n) if it lies in one device block, else NULL. */
static uint8_t *shadow_of(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    uint8_t *out = NULL;
    pthread_mutex_lock(&mock_lock);
    for (struct dev_block *b = blocks; b; b = b->next) {
        uintptr_t lo = (uintptr_t)b->dev;
        if (a >= lo && a - lo <= b->len && n <= b->len - (a - lo)) {
            out = b->shadow + (a - lo);
            break;
        }
    }
    pthread_mutex_unlock(&mock_lock);
    return out;
}

static bool is_device(const void *p)
{
    return shadow_of(p, 1) != NULL;
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error (mock)";
    case cudaErrorInvalidValue: return "invalid argument (mock)";
    case cudaErrorMemoryAllocation: return "out of memory (mock)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (mock)";
    case cudaErrorNotReady: return "device not ready (mock)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (mock)";
    case cudaErrorInitializationError: return "initialization error: used after fork (mock)";
    default: return "unknown error (mock)";
    }
}

cudaError_t CUDARTAPI cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
    ENTER();
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
    ENTER();
    return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

/* ------------------------------------------------------------- memory */

cudaError_t CUDARTAPI cudaMalloc(void **p, size_t size)
{
    ENTER();
    if (!p || !size)
        return fail(cudaErrorInvalidValue);
    struct dev_block *b = calloc(1, sizeof *b);
    int fd = memfd_create("kvt-mock-hbm", MFD_CLOEXEC);
    if (!b || fd < 0 || ftruncate(fd, (off_t)size))
        goto out_nomem;
    b->len = size;
    b->dev = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
    b->shadow = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b->dev == MAP_FAILED || b->shadow == MAP_FAILED) {
        if (b->dev != MAP_FAILED)
            munmap(b->dev, size);
        if (b->shadow != MAP_FAILED)
            munmap(b->shadow, size);
        goto out_nomem;
    }
    close(fd);
    pthread_mutex_lock(&mock_lock);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&mock_lock);
    *p = b->dev;
    return cudaSuccess;

out_nomem:
    if (fd >= 0)
        close(fd);
    free(b);
    return fail(cudaErrorMemoryAllocation);
}

cudaError_t CUDARTAPI cudaFree(void *p)
{
    ENTER();
    if (!p)
        return cudaSuccess;
    struct dev_block *b = NULL;
    pthread_mutex_lock(&mock_lock);
    for (struct dev_block **pp = &blocks; *pp; pp = &(*pp)->next)
        if ((*pp)->dev == p) {
            b = *pp;
            *pp = b->next;
            break;
        }
    pthread_mutex_unlock(&mock_lock);
    if (!b)
        return fail(cudaErrorInvalidValue);
    munmap(b->dev, b->len);
    munmap(b->shadow, b->len);
    free(b);
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostRegister(void *p, size_t size, unsigned int flags)
{
    ENTER();
    (void)flags;
    return p && size && !is_device(p) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t CUDARTAPI cudaHostUnregister(void *p)
{
    ENTER();
    return p ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t CUDARTAPI cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    ENTER();
    (void)flags;
    if (!p || !size)
        return fail(cudaErrorInvalidValue);
    void *m = NULL;
    if (posix_memalign(&m, 4096, size))
        return fail(cudaErrorMemoryAllocation);
    *p = m;
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void *p)
{
    ENTER();
    free(p);
    return cudaSuccess;
}

/* ------------------------------------------------------------- streams, events */

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    ENTER();
    (void)flags;
    if (!s)
        return fail(cudaErrorInvalidValue);
    struct CUstream_st *st = calloc(1, sizeof *st);
    if (!st)
        return fail(cudaErrorMemoryAllocation);
    st->magic = STREAM_MAGIC;
    *s = st;
    return cudaSuccess;
}

static bool stream_special(cudaStream_t s)
{
    return s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

static bool stream_ok(cudaStream_t s)
{
    return stream_special(s) || s->magic == STREAM_MAGIC;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s)
{
    ENTER();
    if (stream_special(s) || !stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    s->magic = 0;
    free(s);
    return cudaSuccess;
}

/* Every event last recorded on s is done once s is (all of them for the
 * legacy stream, which waits for every blocking stream; ours are not, but
 * no test relies on the difference). */
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t s)
{
    ENTER();
    if (!stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mock_lock);
    for (struct CUevent_st *e = events; e; e = e->next)
        if (e->rec == s || s == 0 || s == cudaStreamLegacy)
            __atomic_store_n(&e->unpolled, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mock_lock);
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t s)
{
    ENTER();
    return stream_ok(s) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    ENTER();
    (void)flags;
    if (!e)
        return fail(cudaErrorInvalidValue);
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev)
        return fail(cudaErrorMemoryAllocation);
    ev->magic = EVENT_MAGIC;
    pthread_mutex_lock(&mock_lock);
    ev->next = events;
    events = ev;
    pthread_mutex_unlock(&mock_lock);
    *e = ev;
    return cudaSuccess;
}

static bool event_ok(cudaEvent_t e)
{
    return e && e->magic == EVENT_MAGIC;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e)
{
    ENTER();
    if (!event_ok(e))
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mock_lock);
    for (struct CUevent_st **pp = &events; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&mock_lock);
    e->magic = 0;
    free(e);
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    ENTER();
    if (!event_ok(e) || !stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mock_lock);
    e->rec = s;
    pthread_mutex_unlock(&mock_lock);
    __atomic_store_n(&e->unpolled, NOT_READY_QUERIES, __ATOMIC_RELEASE);
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t e)
{
    ENTER();
    if (!event_ok(e))
        return fail(cudaErrorInvalidResourceHandle);
    /* Not sticky and not recorded as the last error: "not ready" is news. */
    int left = __atomic_load_n(&e->unpolled, __ATOMIC_ACQUIRE);
    while (left > 0 && !__atomic_compare_exchange_n(&e->unpolled, &left, left - 1, false,
                                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
    return left > 0 ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t e)
{
    ENTER();
    if (!event_ok(e))
        return fail(cudaErrorInvalidResourceHandle);
    __atomic_store_n(&e->unpolled, 0, __ATOMIC_RELEASE);
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    ENTER();
    (void)flags;
    if (!stream_ok(s) || !event_ok(e))
        return fail(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

/* ------------------------------------------------------------- copies */

/* Test knobs and counts (tests/test_device_cuda.c): a refused batch call, as
 * a driver without it answers, and how many copy calls were made. */
static bool refuse_batch;
static unsigned long n_memcpy, n_batch;

void kvt_mock_cuda_refuse_batch(bool refuse)
{
    __atomic_store_n(&refuse_batch, refuse, __ATOMIC_RELAXED);
}

void kvt_mock_cuda_calls(unsigned long *memcpy_calls, unsigned long *batch_calls)
{
    *memcpy_calls = __atomic_load_n(&n_memcpy, __ATOMIC_RELAXED);
    *batch_calls = __atomic_load_n(&n_batch, __ATOMIC_RELAXED);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                      enum cudaMemcpyKind kind, cudaStream_t s)
{
    ENTER();
    if (!stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    if (!n)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    __atomic_add_fetch(&n_memcpy, 1, __ATOMIC_RELAXED);
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyHostToHost && !dst_dev && !src_dev)
        return fail(cudaErrorInvalidValue); /* cudaMemcpyDefault: the back-end never asks */
    uint8_t *d = dst_dev ? shadow_of(dst, n) : dst;
    const uint8_t *sp = src_dev ? shadow_of(src, n) : src;
    /* Each side must be what the kind says: whole in one device block, or
     * not device memory at all. */
    if (!d || !sp || (!dst_dev && is_device(dst)) || (!src_dev && is_device(src)))
        return fail(cudaErrorInvalidValue);
    memmove(d, sp, n);
    return cudaSuccess;
}

/* Each copy's direction comes from its pointers, as with unified addressing.
 * The attributes are checked as the runtime documents them: attrsIdxs[0] is
 * 0, the indices rise and stay below count, every source access order is
 * set. The copies run in reverse order: a batch promises none, and a caller
 * that relied on one should see it break here. */
cudaError_t CUDARTAPI cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
                                           const size_t *sizes, size_t count,
                                           struct cudaMemcpyAttributes *attrs,
                                           size_t *attrsIdxs, size_t numAttrs,
                                           cudaStream_t s)
{
    ENTER();
    if (__atomic_load_n(&refuse_batch, __ATOMIC_RELAXED))
        return fail(cudaErrorNotSupported);
    if (!stream_ok(s))
        return fail(cudaErrorInvalidResourceHandle);
    if (!count || !dsts || !srcs || !sizes || !attrs || !attrsIdxs || !numAttrs ||
        numAttrs > count || attrsIdxs[0] != 0)
        return fail(cudaErrorInvalidValue);
    for (size_t a = 0; a < numAttrs; a++) {
        if (attrs[a].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid)
            return fail(cudaErrorInvalidValue);
        if (a && (attrsIdxs[a] <= attrsIdxs[a - 1] || attrsIdxs[a] >= count))
            return fail(cudaErrorInvalidValue);
    }
    for (size_t k = 0; k < count; k++) {
        if (!dsts[k] || !srcs[k] || !sizes[k])
            return fail(cudaErrorInvalidValue);
        if (!(is_device(dsts[k]) ? shadow_of(dsts[k], sizes[k]) : (uint8_t *)dsts[k]) ||
            !(is_device(srcs[k]) ? shadow_of(srcs[k], sizes[k]) : (const uint8_t *)srcs[k]))
            return fail(cudaErrorInvalidValue);
    }
    __atomic_add_fetch(&n_batch, 1, __ATOMIC_RELAXED);
    for (size_t k = count; k-- > 0;) {
        uint8_t *d = is_device(dsts[k]) ? shadow_of(dsts[k], sizes[k]) : dsts[k];
        const uint8_t *sp = is_device(srcs[k]) ? shadow_of(srcs[k], sizes[k]) : srcs[k];
        memmove(d, sp, sizes[k]);
    }
    return cudaSuccess;
}
