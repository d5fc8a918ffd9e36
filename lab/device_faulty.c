/*
 * device_faulty.c — a device back-end that wraps another and fails the n-th
 * call of one operation, for the fault-injection tests (SQLite's I/O-error
 * tests, RocksDB's FaultInjectionTestFS). Sweeping n over a workload runs
 * every error exit of the manager.
 *
 * The fault and the counts live in the caller's plan (struct
 * kvt_device_faulty, given at open), one per back-end: engines in one
 * process each have their own, and a test may re-arm a live engine with
 * kvt_device_faulty_set().
 */
#include <errno.h>
#include <stdlib.h>

#include "lab/faulty.h"
#include "api/api.h"

/* The back-end's state: the plan and the wrapped back-end's own. */
struct faulty {
    struct kvt_device_faulty *plan;
    const struct kvt_device_ops *inner;
    void *ipriv;
};

void kvt_device_faulty_init(struct kvt_device_faulty *plan, const struct kvt_device_ops *inner,
                            const struct kvt_fault *f)
{
    *plan = (struct kvt_device_faulty){ .inner = inner ? inner : &kvt_device_host_ops };
    pthread_mutex_init(&plan->mu, NULL);
    kvt_device_faulty_set(plan, f);
}

void kvt_device_faulty_set(struct kvt_device_faulty *plan, const struct kvt_fault *f)
{
    pthread_mutex_lock(&plan->mu);
    plan->fault = f ? *f : (struct kvt_fault){ 0 };
    for (int i = 0; i <= KVT_FAULT_ASYNC; i++)
        plan->calls[i] = 0;
    pthread_mutex_unlock(&plan->mu);
}

uint64_t kvt_device_faulty_count(struct kvt_device_faulty *plan, enum kvt_fault_op op)
{
    pthread_mutex_lock(&plan->mu);
    uint64_t n = plan->calls[op];
    pthread_mutex_unlock(&plan->mu);
    return n;
}

/* Counts a call of op; returns the error to inject, or 0. Called with the
 * engine lock held or not: the plan's lock comes after it (tiers.h). */
static int faulty_hit(struct faulty *f, enum kvt_fault_op op)
{
    struct kvt_device_faulty *plan = f->plan;
    pthread_mutex_lock(&plan->mu);
    uint64_t n = ++plan->calls[op];
    const struct kvt_fault *ft = &plan->fault;
    int r = 0;
    if (ft->op == op && ft->nth && (n == ft->nth || (ft->repeat && n > ft->nth)))
        r = ft->err ? ft->err : KVT_EDEVICE;
    pthread_mutex_unlock(&plan->mu);
    return r;
}

static int faulty_open(const struct kvt_device_params *p, void **priv)
{
    if (!p || !p->arg)
        return -EINVAL;
    struct faulty *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->plan = p->arg;
    f->inner = f->plan->inner;
    int r = f->inner->open(p, &f->ipriv);
    if (r) {
        free(f);
        return r;
    }
    pthread_mutex_lock(&f->plan->mu);
    uint64_t async_nth = f->plan->fault.op == KVT_FAULT_ASYNC ? f->plan->fault.nth : 0;
    pthread_mutex_unlock(&f->plan->mu);
    if (async_nth && f->inner == &kvt_device_host_ops)
        kvt_device_host_fail_batch(f->ipriv, async_nth);
    *priv = f;
    return 0;
}

static void faulty_close(void *priv)
{
    struct faulty *f = priv;
    f->inner->close(f->ipriv);
    free(f);
}

static int faulty_hbm_alloc(void *priv, size_t bytes, void **out)
{
    struct faulty *f = priv;
    int r = faulty_hit(f, KVT_FAULT_HBM_ALLOC);
    return r ? r : f->inner->hbm_alloc(f->ipriv, bytes, out);
}

static void faulty_hbm_free(void *priv, void *p, size_t bytes)
{
    struct faulty *f = priv;
    f->inner->hbm_free(f->ipriv, p, bytes);
}

static int faulty_host_alloc(void *priv, size_t bytes, void **out)
{
    struct faulty *f = priv;
    int r = faulty_hit(f, KVT_FAULT_HOST_ALLOC);
    return r ? r : f->inner->host_alloc(f->ipriv, bytes, out);
}

static void faulty_host_free(void *priv, void *p, size_t bytes)
{
    struct faulty *f = priv;
    f->inner->host_free(f->ipriv, p, bytes);
}

static int faulty_submit(void *priv, enum kvt_dir dir, const struct kvt_copy *c, size_t n,
                         uint64_t *fence)
{
    struct faulty *f = priv;
    (void)faulty_hit(f, KVT_FAULT_ASYNC); /* counts batches; the host back-end fails them */
    int r = faulty_hit(f, KVT_FAULT_SUBMIT);
    return r ? r : f->inner->submit(f->ipriv, dir, c, n, fence);
}

static int faulty_poll(void *priv, enum kvt_dir dir, uint64_t fence)
{
    struct faulty *f = priv;
    return f->inner->poll(f->ipriv, dir, fence);
}

static int faulty_wait(void *priv, enum kvt_dir dir, uint64_t fence)
{
    struct faulty *f = priv;
    return f->inner->wait(f->ipriv, dir, fence);
}

static int faulty_stream_wait(void *priv, enum kvt_dir dir, uint64_t fence, void *stream)
{
    struct faulty *f = priv;
    return f->inner->stream_wait(f->ipriv, dir, fence, stream);
}

static int faulty_copy_sync(void *priv, enum kvt_copy_kind kind, void *dst, const void *src,
                            size_t bytes)
{
    struct faulty *f = priv;
    int r = faulty_hit(f, KVT_FAULT_COPY_SYNC);
    return r ? r : f->inner->copy_sync(f->ipriv, kind, dst, src, bytes);
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
