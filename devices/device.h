/*
 * device.h — the device back-end interface (internal).
 *
 * A device back-end owns the two memory arenas (HBM and pinned DRAM) and the
 * two copy queues (one per direction, so both links run at once, as CUDA's two
 * copy engines do). Copies are submitted in batches; each batch gets a fence,
 * a sequence number per direction that grows by one per batch. Batches of one
 * direction complete in order, so "fence f is done" means every batch up to f
 * is done. Completion is never inline: submit() only queues.
 *
 * Errors are sticky, as CUDA's are: once a batch fails, that fence and every
 * later one of any direction report the error, and the engine enters its failed
 * state. No page whose copy was in flight may be marked valid.
 *
 * Threads: submit/poll/wait may be called from any thread; the back-end
 * serialises what it needs to. open/close from one thread, with nothing else
 * in flight.
 */
#ifndef KVT_DEVICE_H
#define KVT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "kvt_build.h"

#define KVT_DEVICE_OPS_VERSION 1

enum kvt_dir {
    KVT_H2D = 0,   /* DRAM arena -> HBM arena (promotion) */
    KVT_D2H = 1,   /* HBM arena -> DRAM arena (demotion, write-back) */
    KVT_DIRS = 2
};

/* Kinds of synchronous copy (kvt_put/kvt_get with engine buffers). */
enum kvt_copy_kind {
    KVT_COPY_H2H = 0, /* host to host */
    KVT_COPY_H2D = 1, /* host (any host memory) to device */
    KVT_COPY_D2H = 2, /* device to host (any host memory) */
    KVT_COPY_D2D = 3  /* device to device */
};

struct kvt_copy {
    void *dst;
    const void *src;
    size_t bytes;
};

struct kvt_device_params {
    int ordinal;             /* CUDA ordinal (ignored by host) */
    double link_gbps;        /* host back-end: per-direction cap, 0 = none */
    void *arg;               /* a back-end's own argument, where it takes one (the
                                test-support library's faulty back-end: its plan,
                                lab/faulty.h) */
};

struct kvt_device_ops {
    const char *name;        /* "host", "cuda" (the lab's: "faulty") */
    int version;             /* KVT_DEVICE_OPS_VERSION */

    /* Opens the back-end. *priv owns its state until close(). -ENODEV or
     * KVT_EDEVICE when the device cannot be used. */
    int (*open)(const struct kvt_device_params *p, void **priv);
    /* Waits for every queued batch, then frees the back-end. Arenas must have
     * been freed before. */
    void (*close)(void *priv);

    /* HBM arena: device memory, page slots are carved out by the caller. */
    int (*hbm_alloc)(void *priv, size_t bytes, void **out);
    void (*hbm_free)(void *priv, void *p, size_t bytes);
    /* DRAM arena: pinned host memory, 4096-aligned (O_DIRECT and DMA). */
    int (*host_alloc)(void *priv, size_t bytes, void **out);
    void (*host_free)(void *priv, void *p, size_t bytes);

    /* Queues n copies in direction dir (arena to arena) as one batch; *fence
     * receives the batch's fence. On error nothing is queued. The memory
     * named by the copies must stay allocated until the fence completes.
     * The copies of one batch must not overlap one another: a back-end may
     * run them in any order (CUDA's batch call does). */
    int (*submit)(void *priv, enum kvt_dir dir, const struct kvt_copy *c, size_t n,
                  uint64_t *fence);
    /* 0 when fence f of dir has completed without error, -EINPROGRESS while
     * pending, a negative error (KVT_EDEVICE) when it or an earlier batch
     * failed. Either answer but -EINPROGRESS means the device no longer
     * touches the memory of batch f or any earlier batch of dir: the caller
     * may free or reuse it, even after a failure. Cheap: no system call on
     * the host back-end. */
    int (*poll)(void *priv, enum kvt_dir dir, uint64_t f);
    /* Blocks until poll() would not return -EINPROGRESS; returns what it
     * would. */
    int (*wait)(void *priv, enum kvt_dir dir, uint64_t f);
    /* Makes a CUDA stream wait for fence f (host: waits on the host). */
    int (*stream_wait)(void *priv, enum kvt_dir dir, uint64_t f, void *stream);

    /* A synchronous copy between engine buffers and the arenas. */
    int (*copy_sync)(void *priv, enum kvt_copy_kind kind, void *dst, const void *src,
                     size_t bytes);
};

extern const struct kvt_device_ops kvt_device_host_ops;
#if KVT_HAVE_CUDA
extern const struct kvt_device_ops kvt_device_cuda_ops;
#endif

/* Test hooks of the host back-end (no effect on other back-ends). */
/* Makes the n-th batch submitted from now on (1 = the next) fail when the copy
 * thread reaches it, as a device error would. 0 disarms. */
void kvt_device_host_fail_batch(void *priv, uint64_t nth);

#endif /* KVT_DEVICE_H */
