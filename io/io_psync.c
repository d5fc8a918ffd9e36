/*
 * io_psync.c — the pread/pwrite back-end: a small pool of threads, each
 * moving one whole request at a time.
 *
 * It is the fallback where io_uring cannot be set up (containers, seccomp)
 * and the reference the uring back-end is tested against. A handful of
 * threads is enough: with O_DIRECT each pread is one device command, and an
 * NVMe drive needs only a few of them in flight to stream large blocks.
 *
 * Bookkeeping, all under one mutex:
 *   pending   ring of requests submitted and not yet taken by a worker;
 *   running   requests a worker is moving now;
 *   done      stack of completed requests waiting for reap() (any order).
 * pending + running <= depth is what submit() blocks on; done can hold every
 * request not reaped, and its room is reserved by submit() so that a worker
 * never allocates (a worker that could not record a completion would lose it).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/io.h"

#define PSYNC_MAX_THREADS 4

struct psync {
    pthread_mutex_t lock;
    pthread_cond_t work;     /* pending became non-empty, or stop */
    pthread_cond_t space;    /* pending + running fell below depth, or to 0 */
    pthread_cond_t done_cv;  /* done grew */
    unsigned depth;
    struct kvt_io_req **pending; /* ring of depth entries */
    unsigned head, npending, running;
    struct kvt_io_req **done;
    size_t ndone, done_cap;
    size_t unreaped;         /* submitted and not reaped: inflight() */
    bool stop;
    unsigned nthreads;
    pthread_t threads[PSYNC_MAX_THREADS];
    char note[64];
};

static void *psync_worker(void *arg)
{
    struct psync *s = arg;
    pthread_setname_np(pthread_self(), "kvt-psync");
    (void)kvt_io_short_slice(); /* best effort: see io/sched_hint.c */
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->npending && !s->stop)
            pthread_cond_wait(&s->work, &s->lock);
        if (!s->npending)
            break; /* stop, and nothing left: close() waited for the rest */
        struct kvt_io_req *r = s->pending[s->head];
        s->head = (s->head + 1) % s->depth;
        s->npending--;
        s->running++;
        pthread_mutex_unlock(&s->lock);

        r->res = kvt_io_transfer(r);

        pthread_mutex_lock(&s->lock);
        s->running--;
        s->done[s->ndone++] = r; /* room reserved by submit() */
        pthread_cond_signal(&s->space);
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void psync_free(struct psync *s)
{
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->space);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s->done);
    free(s->pending);
    free(s);
}

/* Stops and joins the first n workers; pending must be empty. */
static void psync_stop(struct psync *s, unsigned n)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(s->threads[i], NULL);
}

static int psync_open(const struct kvt_io_params *p, void **priv)
{
    if (!p || !priv || !p->depth)
        return -EINVAL;
    struct psync *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->depth = p->depth;
    s->pending = calloc(p->depth, sizeof(*s->pending));
    if (!s->pending) {
        free(s);
        return -ENOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->space, NULL);
    pthread_cond_init(&s->done_cv, NULL);

    unsigned want = p->depth < PSYNC_MAX_THREADS ? p->depth : PSYNC_MAX_THREADS;
    if (want < 2)
        want = 2; /* one thread blocked in a slow read must not stall the rest */
    int rc = 0;
    for (s->nthreads = 0; s->nthreads < want; s->nthreads++) {
        rc = -pthread_create(&s->threads[s->nthreads], NULL, psync_worker, s);
        if (rc)
            goto out_stop;
    }
    snprintf(s->note, sizeof(s->note), "pread/pwrite pool: %u threads", s->nthreads);
    *priv = s;
    return 0;

out_stop:
    psync_stop(s, s->nthreads);
    psync_free(s);
    return rc;
}

static void psync_close(void *priv)
{
    struct psync *s = priv;
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    while (s->npending || s->running)
        pthread_cond_wait(&s->space, &s->lock);
    pthread_mutex_unlock(&s->lock);
    psync_stop(s, s->nthreads);
    psync_free(s);
}

/* Makes room in done[] for every request that may complete before it is
 * reaped, so that workers never allocate. Called with the lock held. */
static int psync_reserve(struct psync *s, size_t n)
{
    return kvt_io_reqv_reserve(&s->done, &s->done_cap, s->unreaped + n);
}

static int psync_submit(void *priv, struct kvt_io_req *const *reqs, size_t n)
{
    struct psync *s = priv;
    if (!n)
        return 0;
    if (!reqs)
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    int rc = psync_reserve(s, n);
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    s->unreaped += n;
    for (size_t i = 0; i < n; i++) {
        while (s->npending + s->running >= s->depth)
            pthread_cond_wait(&s->space, &s->lock);
        s->pending[(s->head + s->npending) % s->depth] = reqs[i];
        s->npending++;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static int psync_reap(void *priv, struct kvt_io_req **done, size_t max, size_t min_wait)
{
    struct psync *s = priv;
    if (!max)
        return 0;
    if (!done)
        return -EINVAL;
    if (max > INT_MAX)
        max = INT_MAX;
    pthread_mutex_lock(&s->lock);
    /* Waiting for more than can ever complete would never return. */
    if (min_wait > max)
        min_wait = max;
    if (min_wait > s->unreaped)
        min_wait = s->unreaped;
    while (s->ndone < min_wait)
        pthread_cond_wait(&s->done_cv, &s->lock);
    size_t k = kvt_io_reqv_take(s->done, &s->ndone, done, max);
    s->unreaped -= k;
    pthread_mutex_unlock(&s->lock);
    return (int)k;
}

static size_t psync_inflight(void *priv)
{
    struct psync *s = priv;
    pthread_mutex_lock(&s->lock);
    size_t n = s->unreaped;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static const char *psync_describe(void *priv)
{
    struct psync *s = priv;
    return s ? s->note : "pread/pwrite pool";
}

const struct kvt_io_ops kvt_io_psync_ops = {
    .name = "psync",
    .version = KVT_IO_OPS_VERSION,
    .open = psync_open,
    .close = psync_close,
    .submit = psync_submit,
    .reap = psync_reap,
    .inflight = psync_inflight,
    .describe = psync_describe,
};
