/*
 * device_faulty.c — a device back-end that wraps another and fails the n-th
 * call of one operation, for the fault-injection tests (SQLite's I/O-error
 * tests, RocksDB's FaultInjectionTestFS). Sweeping n over a workload runs
 * every error exit of the manager.
 *
 * One armed fault per process: tests are single programs and arm before open.
 */
#include <errno.h>
#include <stdatomic.h>

#include "tiers/tiers.h"

static const struct kvt_device_ops *inner = &kvt_device_host_ops;
static struct kvt_fault fault;
static _Atomic uint64_t calls[KVT_FAULT_ASYNC + 1];

void kvt_device_faulty_arm(const struct kvt_device_ops *in, const struct kvt_fault *f)
{
    inner = in ? in : &kvt_device_host_ops;
    fault = f ? *f : (struct kvt_fault){ 0 };
    for (int i = 0; i <= KVT_FAULT_ASYNC; i++)
        atomic_store(&calls[i], 0);
}

uint64_t kvt_device_faulty_count(enum kvt_fault_op op)
{
    return atomic_load(&calls[op]);
}

/* Counts a call of op; returns the error to inject, or 0. */
static int faulty_hit(enum kvt_fault_op op)
{
    uint64_t n = atomic_fetch_add(&calls[op], 1) + 1;
    if (fault.op != op || !fault.nth)
        return 0;
    if (n == fault.nth || (fault.repeat && n > fault.nth))
        return fault.err ? fault.err : KVT_EDEVICE;
    return 0;
}

static int faulty_open(const struct kvt_device_params *p, void **priv)
{
    int r = inner->open(p, priv);
    if (r == 0 && fault.op == KVT_FAULT_ASYNC && inner == &kvt_device_host_ops)
        kvt_device_host_fail_batch(*priv, fault.nth);
    return r;
}

static void faulty_close(void *priv) { inner->close(priv); }

static int faulty_hbm_alloc(void *priv, size_t bytes, void **out)
{
    int r = faulty_hit(KVT_FAULT_HBM_ALLOC);
    return r ? r : inner->hbm_alloc(priv, bytes, out);
}

static void faulty_hbm_free(void *priv, void *p, size_t bytes) { inner->hbm_free(priv, p, bytes); }

static int faulty_host_alloc(void *priv, size_t bytes, void **out)
{
    int r = faulty_hit(KVT_FAULT_HOST_ALLOC);
    return r ? r : inner->host_alloc(priv, bytes, out);
}

static void faulty_host_free(void *priv, void *p, size_t bytes) { inner->host_free(priv, p, bytes); }

static int faulty_submit(void *priv, enum kvt_dir dir, const struct kvt_copy *c, size_t n,
                         uint64_t *fence)
{
    atomic_fetch_add(&calls[KVT_FAULT_ASYNC], 1);
    int r = faulty_hit(KVT_FAULT_SUBMIT);
    return r ? r : inner->submit(priv, dir, c, n, fence);
}

static int faulty_poll(void *priv, enum kvt_dir dir, uint64_t f) { return inner->poll(priv, dir, f); }
static int faulty_wait(void *priv, enum kvt_dir dir, uint64_t f) { return inner->wait(priv, dir, f); }

static int faulty_stream_wait(void *priv, enum kvt_dir dir, uint64_t f, void *stream)
{
    return inner->stream_wait(priv, dir, f, stream);
}

static int faulty_copy_sync(void *priv, enum kvt_copy_kind kind, void *dst, const void *src,
                            size_t bytes)
{
    int r = faulty_hit(KVT_FAULT_COPY_SYNC);
    return r ? r : inner->copy_sync(priv, kind, dst, src, bytes);
}

const struct kvt_device_ops kvt_device_faulty_ops = {
    .name = "faulty",
    .version = KVT_DEVICE_OPS_VERSION,
    .open = faulty_open,
    .close = faulty_close,
    .hbm_alloc = faulty_hbm_alloc,
    .hbm_free = faulty_hbm_free,
    .host_alloc = faulty_host_alloc,
    .host_free = faulty_host_free,
    .submit = faulty_submit,
    .poll = faulty_poll,
    .wait = faulty_wait,
    .stream_wait = faulty_stream_wait,
    .copy_sync = faulty_copy_sync,
};
