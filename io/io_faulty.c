/*
 * io_faulty.c — an I/O back-end that wraps another and fails the n-th read,
 * write or submit, for the fault tests (SQLite's I/O-error tests, RocksDB's
 * FaultInjectionTestFS). Sweeping n over a workload runs every error exit of
 * the SSD tier.
 *
 * A failed request never reaches the inner back-end: a failed write leaves
 * the file as it was and a failed read leaves the buffer as it was, which is
 * the worst case the caller must survive (stale bytes, no partial data to
 * rely on). It still completes through reap(), never inline, so the caller's
 * completion path is the one under test.
 *
 * A short read is the exception: the inner back-end reads the first half
 * (rounded down to 4096; nothing when that is 0) into the caller's buffer
 * through a private copy of the request, and the request is then reported
 * failed, as a read that stays short after resubmission would be.
 *
 * The fault and the counts live in the caller's plan (struct kvt_io_faulty,
 * given at open), one per context: engines in one process each have their
 * own, and a test may re-arm a live context with kvt_io_faulty_set().
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/io.h"

/* The private copy of a request that the inner back-end reads short. */
struct shadow {
    struct kvt_io_req req;
    struct kvt_io_req *orig;
    int err;                    /* what it fails with once the inner read is back */
    struct shadow *next;
};

struct faulty {
    struct kvt_io_faulty *plan;
    const struct kvt_io_ops *inner;
    void *ipriv;
    struct kvt_io_req **failed; /* completed by the wrapper, waiting for reap() */
    size_t nfailed, failed_cap;
    struct shadow *shadows;     /* short reads in the inner back-end */
    char note[224];
};

enum verdict { PASS, FAIL, SHORT };

void kvt_io_faulty_init(struct kvt_io_faulty *plan, const struct kvt_io_ops *inner,
                        const struct kvt_io_fault *f)
{
    *plan = (struct kvt_io_faulty){ .inner = inner ? inner : &kvt_io_psync_ops };
    pthread_mutex_init(&plan->mu, NULL);
    kvt_io_faulty_set(plan, f);
}

void kvt_io_faulty_set(struct kvt_io_faulty *plan, const struct kvt_io_fault *f)
{
    pthread_mutex_lock(&plan->mu);
    plan->fault = f ? *f : (struct kvt_io_fault){ 0 };
    plan->reads = plan->writes = plan->submits = 0;
    pthread_mutex_unlock(&plan->mu);
}

uint64_t kvt_io_faulty_count(struct kvt_io_faulty *plan, enum kvt_io_fault_op op)
{
    uint64_t n = 0;
    pthread_mutex_lock(&plan->mu);
    switch (op) {
    case KVT_IOF_NONE: n = plan->reads + plan->writes; break;
    case KVT_IOF_READ:
    case KVT_IOF_SHORT_READ: n = plan->reads; break;
    case KVT_IOF_WRITE: n = plan->writes; break;
    case KVT_IOF_SUBMIT: n = plan->submits; break;
    }
    pthread_mutex_unlock(&plan->mu);
    return n;
}

static int fault_err(const struct kvt_io_fault *ft)
{
    return ft->err ? ft->err : -EIO;
}

/* Whether the n-th call (1-based) of op is armed to fail. */
static bool fault_hits(const struct kvt_io_fault *ft, enum kvt_io_fault_op op, uint64_t n)
{
    if (ft->op != op || !ft->nth)
        return false;
    return n == ft->nth || (ft->repeat && n > ft->nth);
}

static enum verdict fault_judge(const struct kvt_io_fault *ft, const struct kvt_io_req *r,
                                uint64_t n)
{
    if (r->write)
        return fault_hits(ft, KVT_IOF_WRITE, n) ? FAIL : PASS;
    if (fault_hits(ft, KVT_IOF_READ, n))
        return FAIL;
    if (!fault_hits(ft, KVT_IOF_SHORT_READ, n))
        return PASS;
    return r->len / 2 / 4096 ? SHORT : FAIL; /* nothing to read short: fail whole */
}

static int faulty_open(const struct kvt_io_params *p, void **priv)
{
    if (!priv || !p || !p->faulty)
        return -EINVAL;
    struct faulty *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->plan = p->faulty;
    f->inner = f->plan->inner;
    int rc = f->inner->open(p, &f->ipriv);
    if (rc) {
        free(f);
        return rc;
    }
    snprintf(f->note, sizeof(f->note), "faulty over %s: %s", f->inner->name,
             f->inner->describe(f->ipriv));
    *priv = f;
    return 0;
}

static void faulty_close(void *priv)
{
    struct faulty *f = priv;
    if (!f)
        return;
    f->inner->close(f->ipriv); /* waits for the shadows in flight */
    while (f->shadows) {
        struct shadow *s = f->shadows;
        f->shadows = s->next;
        free(s);
    }
    free(f->failed);
    free(f);
}

static int faulty_reserve(struct faulty *f, size_t n)
{
    return kvt_io_reqv_reserve(&f->failed, &f->failed_cap, f->nfailed + n);
}

static void shadows_free(struct shadow *list)
{
    while (list) {
        struct shadow *s = list;
        list = s->next;
        free(s);
    }
}

/* Builds what the inner back-end gets: the passing requests as they are and
 * a half-length copy of each short read (collected on *made). */
static int faulty_route(struct kvt_io_req *const *reqs, const enum verdict *v, size_t n, int err,
                        struct kvt_io_req **out, size_t *nout, struct shadow **made)
{
    *nout = 0;
    *made = NULL;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == PASS) {
            out[(*nout)++] = reqs[i];
        } else if (v[i] == SHORT) {
            struct shadow *s = malloc(sizeof(*s));
            if (!s) {
                shadows_free(*made);
                *made = NULL;
                return -ENOMEM;
            }
            s->req = *reqs[i];
            s->req.len = reqs[i]->len / 2 / 4096 * 4096;
            s->orig = reqs[i];
            s->err = err;
            s->next = *made;
            *made = s;
            out[(*nout)++] = &s->req;
        }
    }
    return 0;
}

/* Judges each request by its running count; counts stay untouched until the
 * call succeeds, so a refused submit is not counted as I/O seen. The plan is
 * read under its lock; only this context's owner moves its counts. */
static size_t faulty_judge_all(struct kvt_io_faulty *plan, struct kvt_io_req *const *reqs,
                               size_t n, enum verdict *v, uint64_t *nr, uint64_t *nw, int *err)
{
    size_t nfail = 0;
    pthread_mutex_lock(&plan->mu);
    *nr = plan->reads;
    *nw = plan->writes;
    *err = fault_err(&plan->fault);
    for (size_t i = 0; i < n; i++) {
        v[i] = fault_judge(&plan->fault, reqs[i], reqs[i]->write ? ++*nw : ++*nr);
        nfail += v[i] == FAIL;
    }
    pthread_mutex_unlock(&plan->mu);
    return nfail;
}

/* Counts a submit() call; the error to return when it is armed to fail. */
static int faulty_submit_hit(struct kvt_io_faulty *plan)
{
    pthread_mutex_lock(&plan->mu);
    uint64_t call = ++plan->submits;
    int r = fault_hits(&plan->fault, KVT_IOF_SUBMIT, call) ? fault_err(&plan->fault) : 0;
    pthread_mutex_unlock(&plan->mu);
    return r;
}

static int faulty_submit(void *priv, struct kvt_io_req *const *reqs, size_t n)
{
    struct faulty *f = priv;
    int rc = faulty_submit_hit(f->plan);
    if (rc)
        return rc;
    if (!n)
        return 0;
    if (!reqs)
        return -EINVAL;
    uint64_t nr, nw;
    size_t npass;
    struct shadow *made;
    int err;
    rc = -ENOMEM;
    enum verdict *v = malloc(n * sizeof(*v));
    struct kvt_io_req **pass = malloc(n * sizeof(*pass));
    if (!v || !pass)
        goto out_free;
    rc = faulty_reserve(f, faulty_judge_all(f->plan, reqs, n, v, &nr, &nw, &err));
    if (!rc)
        rc = faulty_route(reqs, v, n, err, pass, &npass, &made);
    if (rc)
        goto out_free;
    rc = f->inner->submit(f->ipriv, pass, npass);
    if (rc) {
        shadows_free(made);
        goto out_free;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i] == FAIL) {
            reqs[i]->res = err;
            f->failed[f->nfailed++] = reqs[i];
        }
    }
    while (made) {
        struct shadow *s = made;
        made = s->next;
        s->next = f->shadows;
        f->shadows = s;
    }
    pthread_mutex_lock(&f->plan->mu);
    f->plan->reads = nr;
    f->plan->writes = nw;
    pthread_mutex_unlock(&f->plan->mu);
out_free:
    free(pass);
    free(v);
    return rc;
}

/* Maps a request reaped from the inner back-end back to the caller's: a
 * shadow becomes its original, reported failed. O(shadows), which are few. */
static struct kvt_io_req *faulty_unshadow(struct faulty *f, struct kvt_io_req *r)
{
    for (struct shadow **pp = &f->shadows; *pp; pp = &(*pp)->next) {
        struct shadow *s = *pp;
        if (&s->req != r)
            continue;
        struct kvt_io_req *orig = s->orig;
        orig->res = s->req.res < 0 ? s->req.res : s->err;
        *pp = s->next;
        free(s);
        return orig;
    }
    return r;
}

static int faulty_reap(void *priv, struct kvt_io_req **done, size_t max, size_t min_wait)
{
    struct faulty *f = priv;
    if (!max)
        return 0;
    if (!done)
        return -EINVAL;
    if (max > INT_MAX)
        max = INT_MAX;
    size_t k = 0;
    while (k < max && f->nfailed)
        done[k++] = f->failed[--f->nfailed];
    if (k == max)
        return (int)k;
    int rc = f->inner->reap(f->ipriv, done + k, max - k, min_wait > k ? min_wait - k : 0);
    if (rc < 0)
        return k ? (int)k : rc; /* the failed ones are already taken: report them */
    for (size_t i = k; i < k + (size_t)rc; i++)
        done[i] = f->shadows ? faulty_unshadow(f, done[i]) : done[i];
    return (int)(k + (size_t)rc);
}

static size_t faulty_inflight(void *priv)
{
    struct faulty *f = priv;
    return f->nfailed + f->inner->inflight(f->ipriv);
}

static const char *faulty_describe(void *priv)
{
    struct faulty *f = priv;
    return f ? f->note : "faulty";
}

const struct kvt_io_ops kvt_io_faulty_ops = {
    .name = "faulty",
    .version = KVT_IO_OPS_VERSION,
    .open = faulty_open,
    .close = faulty_close,
    .submit = faulty_submit,
    .reap = faulty_reap,
    .inflight = faulty_inflight,
    .describe = faulty_describe,
};
