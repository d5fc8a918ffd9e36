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
 *
 * Power loss (faulty.h): a write is journalled with the bytes it overwrites,
 * read just before it is handed to the inner back-end (the mover owns the
 * slot it writes, so nothing else changes them in between); a completed
 * sync of its file drops it. The journal holds only what no sync covers:
 * with persist, one group commit's writes. Undoing newest first restores
 * the oldest bytes where writes overlap whole; kvtier never rewrites a slot
 * before a sync covers its last write (copy-on-write, ssd_store.h), so
 * uncovered writes do not overlap.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/faulty.h"
#include "lab/lab.h"

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

/* A file the journal wrote to: our own descriptor of it (a dup, so it
 * outlives the engine's), and for the index its durable image. */
struct kvt_io_pl_file {
    struct kvt_io_pl_file *next;
    dev_t dev;
    ino_t ino;
    int fd;
    bool index;
    void *image;                /* index: the bytes at its last completed sync */
    size_t image_len;
};

/* A write no completed sync covers yet. */
struct kvt_io_pl_write {
    struct kvt_io_pl_write *next;
    struct kvt_io_pl_file *file;
    const struct kvt_io_req *req; /* while in flight; NULL once reaped */
    uint64_t off, seq;
    size_t len;
    void *old;                  /* the bytes it overwrote */
};

void kvt_io_faulty_init(struct kvt_io_faulty *plan, const struct kvt_io_ops *inner,
                        const struct kvt_io_fault *f)
{
    *plan = (struct kvt_io_faulty){ .inner = inner ? inner : &kvt_io_psync_ops };
    pthread_mutex_init(&plan->mu, NULL);
    pthread_mutex_init(&plan->submit_mu, NULL);
    kvt_io_faulty_set(plan, f);
}

/* Under submit_mu too: a submit judges its requests against the counts,
 * then stores the counts it reached once the inner back-end took them, so a
 * reset between the two would be undone by that store, and a submit of the
 * old plan (a background write-back's) would carry its counts into the new
 * one. */
void kvt_io_faulty_set(struct kvt_io_faulty *plan, const struct kvt_io_fault *f)
{
    pthread_mutex_lock(&plan->submit_mu);
    pthread_mutex_lock(&plan->mu);
    plan->fault = f ? *f : (struct kvt_io_fault){ 0 };
    plan->reads = plan->writes = plan->submits = 0;
    pthread_mutex_unlock(&plan->mu);
    pthread_mutex_unlock(&plan->submit_mu);
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
    if (!priv || !p || !p->arg)
        return -EINVAL;
    struct faulty *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->plan = p->arg;
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
 * read under its lock and moved only under submit_mu (faulty_submit). */
struct judged {
    uint64_t nr, nw, npl;       /* the plan's counts once the call succeeds */
    bool cut;                   /* the power goes after the writes of this call that pass */
    int err;
};

/* Once the power is gone every request fails; an armed cut at the n-th
 * write lets that write pass (it reaches the file, unsynced) and fails the
 * rest of the call. */
static enum verdict pl_judge(const struct kvt_io_faulty *plan, const struct kvt_io_req *r,
                             struct judged *j, enum verdict v)
{
    if (plan->dead || j->cut)
        return FAIL;
    if (!r->write || plan->pl.at == KVT_IOCUT_NONE || v != PASS)
        return v;
    j->npl++;
    if (plan->pl.at == KVT_IOCUT_WRITE && j->npl == plan->pl.nth)
        j->cut = true;
    return PASS;
}

static size_t faulty_judge_all(struct kvt_io_faulty *plan, struct kvt_io_req *const *reqs,
                               size_t n, enum verdict *v, struct judged *j)
{
    size_t nfail = 0;
    pthread_mutex_lock(&plan->mu);
    *j = (struct judged){ plan->reads, plan->writes, plan->pl_writes, false,
                          plan->dead ? -EIO : fault_err(&plan->fault) };
    for (size_t i = 0; i < n; i++) {
        v[i] = fault_judge(&plan->fault, reqs[i], reqs[i]->write ? ++j->nw : ++j->nr);
        v[i] = pl_judge(plan, reqs[i], j, v[i]);
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

/* ------------------------------------------------------------- power loss */

static struct kvt_io_pl_file *pl_file_find(struct kvt_io_faulty *plan, dev_t dev, ino_t ino)
{
    for (struct kvt_io_pl_file *f = plan->files; f; f = f->next)
        if (f->dev == dev && f->ino == ino)
            return f;
    return NULL;
}

/* The plan's record of the file open as fd, made (with a dup of fd) if new.
 * Under plan->mu. */
static struct kvt_io_pl_file *pl_file_of(struct kvt_io_faulty *plan, int fd, int *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *err = -errno;
        return NULL;
    }
    struct kvt_io_pl_file *f = pl_file_find(plan, st.st_dev, st.st_ino);
    if (f)
        return f;
    if (!(f = calloc(1, sizeof(*f)))) {
        *err = -ENOMEM;
        return NULL;
    }
    if ((f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
        *err = -errno;
        free(f);
        return NULL;
    }
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->next = plan->files;
    plan->files = f;
    return f;
}

static void pl_write_free(struct kvt_io_pl_write *w)
{
    free(w->old);
    free(w);
}

/* Journals the writes of a call that pass (v[i] == PASS), each with the
 * bytes it will overwrite, read now (unlocked: the mover owns those slots).
 * Links them into the plan only when every one was read: -errno otherwise,
 * nothing journalled and the call refused. */
static int pl_journal(struct kvt_io_faulty *plan, struct kvt_io_req *const *reqs,
                      const enum verdict *v, size_t n)
{
    struct kvt_io_pl_write *made = NULL;
    int err = 0;
    for (size_t i = 0; i < n && !err; i++) {
        const struct kvt_io_req *r = reqs[i];
        if (!r->write || v[i] != PASS)
            continue;
        struct kvt_io_pl_write *w = calloc(1, sizeof(*w));
        void *old = w ? aligned_alloc(4096, r->len ? r->len : 4096) : NULL;
        if (!w || !old) {
            free(w);
            free(old);
            err = -ENOMEM;
            break;
        }
        *w = (struct kvt_io_pl_write){ .req = r, .off = r->off, .len = r->len, .old = old };
        ssize_t got = pread(r->fd, old, r->len, (off_t)r->off);
        if (got < 0) {
            err = -errno;
            pl_write_free(w);
            break;
        }
        memset((char *)old + got, 0, r->len - (size_t)got); /* past the end: zeros */
        pthread_mutex_lock(&plan->mu);
        w->file = pl_file_of(plan, r->fd, &err);
        pthread_mutex_unlock(&plan->mu);
        if (!w->file) {
            pl_write_free(w);
            break;
        }
        w->next = made;
        made = w;
    }
    if (err) {
        while (made) {
            struct kvt_io_pl_write *w = made;
            made = w->next;
            pl_write_free(w);
        }
        return err;
    }
    pthread_mutex_lock(&plan->mu);
    while (made) { /* made is newest last: the journal stays newest first */
        struct kvt_io_pl_write *w = made;
        made = w->next;
        w->seq = plan->pl_writes++; /* recounted by the caller's commit of counts */
        w->next = plan->journal;
        plan->journal = w;
    }
    pthread_mutex_unlock(&plan->mu);
    return 0;
}

/* A reaped write is complete: the next sync of its file covers it. */
static void pl_reaped(struct kvt_io_faulty *plan, struct kvt_io_req *const *done, size_t n)
{
    pthread_mutex_lock(&plan->mu);
    for (size_t i = 0; i < n; i++) {
        if (!done[i]->write)
            continue;
        for (struct kvt_io_pl_write *w = plan->journal; w; w = w->next)
            if (w->req == done[i]) {
                w->req = NULL;
                break;
            }
    }
    pthread_mutex_unlock(&plan->mu);
}

static int faulty_submit_locked(struct faulty *f, struct kvt_io_req *const *reqs, size_t n);

/* One submit at a time per plan: judge_all reads the plan's counts and the
 * call writes them back once the inner back-end took the requests. */
static int faulty_submit(void *priv, struct kvt_io_req *const *reqs, size_t n)
{
    struct faulty *f = priv;
    pthread_mutex_lock(&f->plan->submit_mu);
    int rc = faulty_submit_locked(f, reqs, n);
    pthread_mutex_unlock(&f->plan->submit_mu);
    return rc;
}

static int faulty_submit_locked(struct faulty *f, struct kvt_io_req *const *reqs, size_t n)
{
    int rc = faulty_submit_hit(f->plan);
    if (rc)
        return rc;
    if (!n)
        return 0;
    if (!reqs)
        return -EINVAL;
    struct judged j;
    size_t npass;
    struct shadow *made;
    rc = -ENOMEM;
    enum verdict *v = malloc(n * sizeof(*v));
    struct kvt_io_req **pass = malloc(n * sizeof(*pass));
    if (!v || !pass)
        goto out_free;
    rc = faulty_reserve(f, faulty_judge_all(f->plan, reqs, n, v, &j));
    if (!rc)
        rc = faulty_route(reqs, v, n, j.err, pass, &npass, &made);
    if (rc)
        goto out_free;
    if (f->plan->pl.at != KVT_IOCUT_NONE && (rc = pl_journal(f->plan, reqs, v, n)) != 0) {
        shadows_free(made);
        goto out_free;
    }
    rc = f->inner->submit(f->ipriv, pass, npass);
    if (rc) {
        shadows_free(made); /* journalled writes that never ran undo to what they read */
        goto out_free;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i] == FAIL) {
            reqs[i]->res = j.err;
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
    f->plan->reads = j.nr;
    f->plan->writes = j.nw;
    f->plan->pl_writes = j.npl;
    if (j.cut)
        f->plan->dead = true;
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
    size_t k = kvt_io_reqv_take(f->failed, &f->nfailed, done, max); /* the failed ones first */
    if (k == max)
        return (int)k;
    int rc = f->inner->reap(f->ipriv, done + k, max - k, min_wait > k ? min_wait - k : 0);
    if (rc < 0)
        return k ? (int)k : rc; /* the failed ones are already taken: report them */
    for (size_t i = k; i < k + (size_t)rc; i++)
        done[i] = f->shadows ? faulty_unshadow(f, done[i]) : done[i];
    if (f->plan->pl.at != KVT_IOCUT_NONE) /* set between engines only: read unlocked */
        pl_reaped(f->plan, done + k, (size_t)rc);
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

/* ------------------------------------------------------------- power loss: the calls */

static void pl_drop_all(struct kvt_io_faulty *plan)
{
    while (plan->journal) {
        struct kvt_io_pl_write *w = plan->journal;
        plan->journal = w->next;
        pl_write_free(w);
    }
    while (plan->files) {
        struct kvt_io_pl_file *f = plan->files;
        plan->files = f->next;
        close(f->fd);
        free(f->image);
        free(f);
    }
}

void kvt_io_faulty_powerloss(struct kvt_io_faulty *plan, const struct kvt_io_powerloss *pl)
{
    pthread_mutex_lock(&plan->mu);
    pl_drop_all(plan);
    plan->pl = pl ? *pl : (struct kvt_io_powerloss){ 0 };
    if (pl && plan->pl.at == KVT_IOCUT_NONE)
        plan->pl.at = KVT_IOCUT_ON_DEMAND;
    plan->dead = false;
    plan->pl_writes = plan->pl_syncs = 0;
    pthread_mutex_unlock(&plan->mu);
}

void kvt_io_faulty_cut(struct kvt_io_faulty *plan)
{
    pthread_mutex_lock(&plan->mu);
    if (plan->pl.at != KVT_IOCUT_NONE)
        plan->dead = true;
    pthread_mutex_unlock(&plan->mu);
}

bool kvt_io_faulty_dead(struct kvt_io_faulty *plan)
{
    pthread_mutex_lock(&plan->mu);
    bool d = plan->dead;
    pthread_mutex_unlock(&plan->mu);
    return d;
}

/* Counts a sync: -EIO when the power is gone or goes in this one. Under
 * plan->mu. */
static int pl_sync_hit(struct kvt_io_faulty *plan)
{
    if (plan->dead)
        return -EIO;
    if (plan->pl.at == KVT_IOCUT_NONE)
        return 0;
    if (++plan->pl_syncs == plan->pl.nth && plan->pl.at == KVT_IOCUT_SYNC) {
        plan->dead = true;
        return -EIO;
    }
    return 0;
}

int kvt_io_faulty_sync(struct kvt_io_faulty *plan, int fd)
{
    static const struct kvt_syncer plain = { NULL, NULL }; /* fdatasync, as the product */
    if (!plan)
        return kvt_io_sync(&plain, fd);
    pthread_mutex_lock(&plan->mu);
    int r = pl_sync_hit(plan);
    pthread_mutex_unlock(&plan->mu);
    if (r)
        return r;
    if ((r = kvt_io_sync(&plain, fd)) != 0)
        return r;
    struct stat st;
    if (plan->pl.at == KVT_IOCUT_NONE || fstat(fd, &st) != 0)
        return 0;
    /* Covered: the writes of this file reaped before the sync began (a
     * write reaped during it stays journalled, which only undoes more). */
    pthread_mutex_lock(&plan->mu);
    for (struct kvt_io_pl_write **pp = &plan->journal; *pp;) {
        struct kvt_io_pl_write *w = *pp;
        if (!w->req && w->file->dev == st.st_dev && w->file->ino == st.st_ino) {
            *pp = w->next;
            pl_write_free(w);
        } else {
            pp = &w->next;
        }
    }
    pthread_mutex_unlock(&plan->mu);
    return 0;
}

/* The whole of the file open as fd, in a new buffer. */
static int pl_read_all(int fd, void **buf, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    size_t n = (size_t)st.st_size;
    char *b = malloc(n ? n : 1);
    if (!b)
        return -ENOMEM;
    for (size_t at = 0; at < n;) {
        ssize_t got = pread(fd, b + at, n - at, (off_t)at);
        if (got <= 0) {
            int e = got < 0 ? -errno : -EIO;
            free(b);
            return e;
        }
        at += (size_t)got;
    }
    *buf = b;
    *len = n;
    return 0;
}

static struct kvt_io_pl_file *pl_index(struct kvt_io_faulty *plan)
{
    for (struct kvt_io_pl_file *f = plan->files; f; f = f->next)
        if (f->index)
            return f;
    return NULL;
}

static void pl_index_snapshot(struct kvt_io_pl_file *f)
{
    void *b = NULL;
    size_t n = 0;
    if (pl_read_all(f->fd, &b, &n) != 0)
        return; /* the previous image stays: a cut rolls back further, never less */
    free(f->image);
    f->image = b;
    f->image_len = n;
}

int kvt_io_faulty_index_track(struct kvt_io_faulty *plan, int fd)
{
    int err = 0;
    pthread_mutex_lock(&plan->mu);
    struct kvt_io_pl_file *f = plan->pl.at == KVT_IOCUT_NONE ? NULL : pl_file_of(plan, fd, &err);
    if (f) {
        f->index = true;
        pl_index_snapshot(f);
    }
    pthread_mutex_unlock(&plan->mu);
    return err;
}

int kvt_io_faulty_index_begin(struct kvt_io_faulty *plan, bool syncs)
{
    pthread_mutex_lock(&plan->mu);
    int r = plan->dead ? -EIO : syncs ? pl_sync_hit(plan) : 0;
    pthread_mutex_unlock(&plan->mu);
    return r;
}

void kvt_io_faulty_index_durable(struct kvt_io_faulty *plan)
{
    pthread_mutex_lock(&plan->mu);
    struct kvt_io_pl_file *f = plan->dead ? NULL : pl_index(plan);
    if (f)
        pl_index_snapshot(f);
    pthread_mutex_unlock(&plan->mu);
}

/* How many bytes of an uncovered write survive: a prefix of whole tear
 * units, none to all, chosen from the seed and the write's number. */
static size_t pl_kept(const struct kvt_io_powerloss *pl, const struct kvt_io_pl_write *w)
{
    if (!pl->tear)
        return 0;
    uint64_t x = pl->seed ^ (w->seq + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    size_t units = w->len / pl->tear;
    return (size_t)(x % (units + 1)) * pl->tear;
}

static int pl_pwrite_all(int fd, const void *b, size_t n, uint64_t off)
{
    for (size_t at = 0; at < n;) {
        ssize_t put = pwrite(fd, (const char *)b + at, n - at, (off_t)(off + at));
        if (put <= 0)
            return put < 0 ? -errno : -EIO;
        at += (size_t)put;
    }
    return 0;
}

/* Tears need unaligned writes: our descriptors drop O_DIRECT (the engine's
 * are closed by now, so no one else shares the flag). */
static void pl_buffered(struct kvt_io_faulty *plan)
{
    for (struct kvt_io_pl_file *f = plan->files; f; f = f->next) {
        int fl = fcntl(f->fd, F_GETFL);
        if (fl >= 0 && (fl & O_DIRECT))
            (void)fcntl(f->fd, F_SETFL, fl & ~O_DIRECT);
    }
}

int kvt_io_faulty_powerloss_apply(struct kvt_io_faulty *plan, struct kvt_io_powerloss_result *out)
{
    struct kvt_io_powerloss_result res = { 0 };
    int err = 0, r;
    pthread_mutex_lock(&plan->mu);
    pl_buffered(plan);
    for (struct kvt_io_pl_write *w = plan->journal; w; w = w->next) { /* newest first */
        size_t keep = pl_kept(&plan->pl, w);
        res.lost += keep == 0;
        res.torn += keep && keep < w->len;
        res.kept += keep == w->len;
        if (keep < w->len &&
            (r = pl_pwrite_all(w->file->fd, (char *)w->old + keep, w->len - keep, w->off + keep)) &&
            !err)
            err = r;
    }
    struct kvt_io_pl_file *ix = pl_index(plan);
    if (ix && ix->image && !plan->pl.index_kept) {
        res.index_rolled_back = true;
        if (ftruncate(ix->fd, (off_t)ix->image_len) != 0 && !err)
            err = -errno;
        if ((r = pl_pwrite_all(ix->fd, ix->image, ix->image_len, 0)) && !err)
            err = r;
    }
    pl_drop_all(plan);
    plan->pl = (struct kvt_io_powerloss){ 0 };
    plan->dead = false;
    pthread_mutex_unlock(&plan->mu);
    if (out)
        *out = res;
    return err;
}

/* ------------------------------------------------------------- as a syncer */

static int sync_op(void *arg, int fd)
{
    return kvt_io_faulty_sync(arg, fd);
}

static int index_track_op(void *arg, int fd)
{
    return kvt_io_faulty_index_track(arg, fd);
}

static int index_begin_op(void *arg, bool syncs)
{
    return kvt_io_faulty_index_begin(arg, syncs);
}

static void index_durable_op(void *arg)
{
    kvt_io_faulty_index_durable(arg);
}

const struct kvt_sync_ops kvt_io_faulty_sync_ops = {
    .sync = sync_op,
    .index_track = index_track_op,
    .index_begin = index_begin_op,
    .index_durable = index_durable_op,
};
