/*
 * io_uring.c — the io_uring back-end. With lab/raw_bench.c (the raw
 * baseline of `kvtier bench ssd`), the only file that includes liburing.
 *
 * One ring per context, driven by a reaper thread of its own. The owner
 * (io.h: the engine's mover) only queues requests and takes completions;
 * the reaper alone submits to the kernel, so the moment it harvests a
 * completion it hands the disk the next queued request: while the owner
 * checks CRCs, applies results under the engine lock or waits for a CPU,
 * the disk's queue still refills (docs/design.md#io-threads). The reaper
 * sleeps in the kernel between completions, so the scheduler runs it at
 * once when one arrives.
 *
 * Each request in the kernel holds a slot (struct uring_op) that records how
 * far it has got: short transfers are resubmitted from there, and the
 * caller's request is never rewritten except for res. There are `depth`
 * slots, plus one poll on an eventfd by which the owner wakes the reaper for
 * new work, and the SQ ring has room for all of them, so a prepared request
 * always finds a free SQE.
 *
 * The DRAM arena is registered as fixed buffers, in pieces of at most 1 GiB
 * (the kernel refuses larger ones); a request inside the arena uses
 * READ_FIXED/WRITE_FIXED, which skips pinning the pages on every I/O. When
 * registration is refused (RLIMIT_MEMLOCK, a file-backed mapping) the
 * context runs with plain reads and writes and describe() says why.
 *
 * With kvt_io_params.owner_reaps there is no reaper: the owner's submit()
 * and reap() do its work (fill, enter, harvest) in the owner's thread, as a
 * plain single-threaded io_uring user does. A kvt_get reading its own pages
 * waits for them anyway; going through a reaper would add a wake-up on each
 * side of every request (docs/performance.md#caller-reads).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "io/io.h"
#include "io/uring.h"

#define URING_WAKE ((void *)1)        /* user_data of the eventfd poll */

/* Requests waiting for a slot, oldest first. */
struct uring_fifo {
    struct kvt_io_req **v;
    size_t head, tail, cap;
};

struct uring_op {
    struct kvt_io_req *req;
    size_t moved;            /* bytes already transferred */
    struct uring_op *next;   /* free list */
};

/* Everything below `m` is shared by the owner and the reaper and taken under
 * it; the ring's SQ and CQ are the reaper's alone (after open). */
struct uring {
    struct io_uring ring;
    unsigned depth;
    char *fixed_base;        /* NULL: buffers unregistered */
    size_t fixed_len;
    int wake_fd;             /* eventfd: the owner's doorbell */
    pthread_t reaper;
    char note[160];

    pthread_mutex_t m;
    pthread_cond_t done_cv;  /* done grew to what the waiting owner asked for */
    struct uring_op *ops;    /* depth slots */
    struct uring_op *free_ops;
    unsigned nbusy;          /* slots not free: requests prepared or in the kernel */
    size_t busy_bytes;       /* their bytes */
    size_t max_bytes;        /* kvt_io_params.max_bytes */
    struct uring_fifo q[2];  /* submitted, waiting for a slot: reads [0], writes [1] */
    struct kvt_io_req **done; /* completed, waiting for reap() (any order) */
    size_t ndone, done_cap;
    size_t unreaped;         /* submitted and not reaped: inflight() */
    size_t want;             /* the owner waits in reap() for this many done; 0 = not */
    bool wake_armed;         /* the eventfd poll is in the kernel */
    bool idle;               /* the reaper waits in the kernel with free slots */
    bool owner_reaps;        /* no reaper: the owner's calls drive the ring */
    bool stop;
    int broken;              /* a ring error that cannot be retried; 0 = healthy */
};

/* uring.h */
int kvt_uring_init_ring(struct io_uring *ring, unsigned depth)
{
    unsigned entries = depth < 8 ? 8 : depth;
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    int rc = io_uring_queue_init_params(entries, ring, &p);
    if (rc == -EINVAL)
        rc = io_uring_queue_init(entries, ring, 0);
    return rc;
}

/* uring.h */
int kvt_uring_register_region(struct io_uring *ring, void *base, size_t len, size_t piece)
{
    unsigned n = (unsigned)((len + piece - 1) / piece);
    struct iovec *iov = calloc(n, sizeof(*iov));
    if (!iov)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        size_t at = (size_t)i * piece;
        iov[i].iov_base = (char *)base + at;
        iov[i].iov_len = len - at < piece ? len - at : piece;
    }
    int rc = io_uring_register_buffers(ring, iov, n);
    free(iov);
    return rc;
}

/* Prepares the SQE that moves the rest of op's request. One SQE moves at most
 * to the end of the registered piece it starts in (and at most 1 GiB): the
 * remainder is resubmitted like any short transfer. Reaper, locked. */
static int uring_prep(struct uring *u, struct uring_op *op)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe)
        return -EBUSY; /* cannot happen: see the slot/SQE argument above */
    struct kvt_io_req *r = op->req;
    char *buf = (char *)r->buf + op->moved;
    size_t len = r->len - op->moved;
    uint64_t off = r->off + op->moved;
    if (len > URING_CHUNK)
        len = URING_CHUNK;
    size_t at = (size_t)((uintptr_t)buf - (uintptr_t)u->fixed_base);
    if (u->fixed_base && buf >= u->fixed_base && at < u->fixed_len &&
        len <= u->fixed_len - at) {
        int idx = (int)(at / URING_CHUNK);
        size_t room = URING_CHUNK - at % URING_CHUNK;
        if (len > room)
            len = room;
        if (r->write)
            io_uring_prep_write_fixed(sqe, r->fd, buf, (unsigned)len, off, idx);
        else
            io_uring_prep_read_fixed(sqe, r->fd, buf, (unsigned)len, off, idx);
    } else if (r->write) {
        io_uring_prep_write(sqe, r->fd, buf, (unsigned)len, off);
    } else {
        io_uring_prep_read(sqe, r->fd, buf, (unsigned)len, off);
    }
    io_uring_sqe_set_data(sqe, op);
    return 0;
}

/* Locked. Room in done[] was reserved by submit(). */
static void uring_complete(struct uring *u, struct kvt_io_req *r, int res)
{
    r->res = res;
    u->done[u->ndone++] = r;
    if (u->want && u->ndone >= u->want)
        pthread_cond_signal(&u->done_cv);
}

static void uring_finish(struct uring *u, struct uring_op *op, int res)
{
    u->busy_bytes -= op->req->len;
    uring_complete(u, op->req, res);
    op->req = NULL;
    op->next = u->free_ops;
    u->free_ops = op;
    u->nbusy--;
}

/* One completion: finished, failed, or prepared again for the rest. */
static void uring_on_cqe(struct uring *u, struct uring_op *op, int res)
{
    struct kvt_io_req *r = op->req;
    if (res == -EAGAIN || res == -EINTR)
        res = 0; /* moved nothing; try the same range again */
    else if (res == -EINVAL && !r->write && op->moved % 4096)
        res = -EIO; /* O_DIRECT file ended mid-block: the continuation is unaligned */
    else if (res == 0)
        res = -EIO; /* end of file before the end of the request */
    if (res < 0) {
        uring_finish(u, op, res);
        return;
    }
    op->moved += (size_t)res;
    if (op->moved >= r->len) {
        uring_finish(u, op, 0);
        return;
    }
    int rc = uring_prep(u, op);
    if (rc)
        uring_finish(u, op, rc);
}

/* Takes every CQE the ring holds, including those the kernel parked in its
 * overflow list when the CQ ring was full (peek_batch flushes them when the
 * ring looks empty; the explicit check below covers liburing versions that
 * do not). Reaper, locked. */
static void uring_harvest(struct uring *u)
{
    struct io_uring_cqe *cqes[URING_BATCH];
    for (;;) {
        unsigned k = io_uring_peek_batch_cqe(&u->ring, cqes, URING_BATCH);
        if (!k) {
            if (!io_uring_cq_has_overflow(&u->ring))
                return;
            io_uring_enter(u->ring.ring_fd, 0, 0, IORING_ENTER_GETEVENTS, NULL);
            if (!io_uring_cq_ready(&u->ring))
                return;
            continue;
        }
        for (unsigned i = 0; i < k; i++) {
            void *data = io_uring_cqe_get_data(cqes[i]);
            if (data == URING_WAKE)
                u->wake_armed = false;
            else
                uring_on_cqe(u, data, cqes[i]->res);
        }
        io_uring_cq_advance(&u->ring, k);
    }
}

static bool uring_queued(const struct uring *u)
{
    return u->q[0].head < u->q[0].tail || u->q[1].head < u->q[1].tail;
}

/* The queue the next request comes from: reads before writes, each oldest
 * first. A read has a caller waiting on it; writes are the owner's work
 * ahead of need, and a read queued behind a burst of them would wait for
 * all of them (io.h, submit). Reaper, locked; a request is queued. */
static struct uring_fifo *uring_front(struct uring *u)
{
    return &u->q[u->q[0].head == u->q[0].tail];
}

/* Takes the next request for a free slot. */
static struct kvt_io_req *uring_next(struct uring *u)
{
    struct uring_fifo *f = uring_front(u);
    struct kvt_io_req *r = f->v[f->head++];
    if (f->head == f->tail)
        f->head = f->tail = 0;
    return r;
}

/* Whether the next queued request may go now: a slot is free, and the bytes
 * in flight stay within max_bytes (one request always may). Bytes past what
 * keeps the disk busy only make requests finish together: the owner's
 * checksums of large pages would then all run after the disk went idle,
 * instead of each while the next request is read. Reaper, locked. */
static bool uring_may_start(struct uring *u)
{
    if (!u->free_ops || !uring_queued(u))
        return false;
    if (!u->max_bytes || !u->nbusy)
        return true;
    const struct uring_fifo *f = uring_front(u);
    return u->busy_bytes + f->v[f->head]->len <= u->max_bytes;
}

/* Reaper, locked: the doorbell's poll goes back into the kernel (its count
 * is read off first, so it fires only for new rings), and queued requests
 * take the free slots (uring_next says in which order). */
static void uring_fill(struct uring *u)
{
    if (!u->wake_armed && !u->owner_reaps) {
        uint64_t v;
        while (read(u->wake_fd, &v, sizeof(v)) == sizeof(v))
            ;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
        if (sqe) {
            io_uring_prep_poll_add(sqe, u->wake_fd, POLLIN);
            io_uring_sqe_set_data(sqe, URING_WAKE);
            u->wake_armed = true;
        }
    }
    while (uring_may_start(u)) {
        struct uring_op *op = u->free_ops;
        u->free_ops = op->next;
        u->nbusy++;
        op->req = uring_next(u);
        op->moved = 0;
        u->busy_bytes += op->req->len;
        int rc = uring_prep(u, op);
        if (rc)
            uring_finish(u, op, rc);
    }
}

/* Reaper, unlocked: submits what is prepared and waits for a completion.
 * -EAGAIN/-EBUSY mean the kernel is short of room for requests or
 * completions: waiting for one makes room; -EINTR is retried. */
static int uring_enter(struct uring *u)
{
    for (;;) {
        int rc = io_uring_submit_and_wait(&u->ring, 1);
        if (rc >= 0)
            return 0;
        if (rc == -EINTR)
            continue;
        if (rc != -EAGAIN && rc != -EBUSY)
            return rc;
        struct io_uring_cqe *cqe;
        if (io_uring_cq_ready(&u->ring) || io_uring_wait_cqe(&u->ring, &cqe) == 0)
            return 0;
        nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
    }
}

/* A ring that no longer works: what never reached it fails at once; what
 * did is given up for lost by reap(), which reports the error (io.h). */
static void uring_break(struct uring *u, int rc)
{
    u->broken = rc;
    while (uring_queued(u))
        uring_complete(u, uring_next(u), rc);
    pthread_cond_broadcast(&u->done_cv);
}

/* Owner-reaps mode, locked: the reaper's step in the owner's thread.
 * Queued requests take the free slots and go to the kernel; with wait, the
 * call also waits there for a completion and harvests. Returns 0, or the
 * ring's error (the context is broken: uring_break answered everything). */
static int owner_push(struct uring *u, bool wait)
{
    uring_fill(u);
    int rc;
    if (wait) {
        rc = uring_enter(u); /* the lock is ours alone: no reaper to exclude */
    } else {
        rc = io_uring_submit(&u->ring);
        rc = rc == -EAGAIN || rc == -EBUSY || rc == -EINTR || rc >= 0 ? 0 : rc;
    }
    if (rc) {
        uring_break(u, rc);
        return rc;
    }
    uring_harvest(u);
    return 0;
}

/* Owner-reaps mode, at close: every request sent is seen through (the
 * kernel writes into the owner's buffers until its CQE). Locked. */
static void owner_drain(struct uring *u)
{
    while (!u->broken && (u->nbusy || uring_queued(u)))
        (void)owner_push(u, true);
}

static void *uring_reaper(void *arg)
{
    struct uring *u = arg;
    pthread_setname_np(pthread_self(), "kvt-reaper");
    (void)kvt_io_short_slice(); /* best effort: see io/sched_hint.c */
    pthread_mutex_lock(&u->m);
    for (;;) {
        uring_fill(u);
        /* On stop, every request queued or in the kernel is seen through:
         * the kernel writes into the owner's buffers until its CQE. */
        if (u->broken || (u->stop && !u->nbusy && !uring_queued(u)))
            break;
        u->idle = u->free_ops != NULL;
        pthread_mutex_unlock(&u->m);
        int rc = uring_enter(u);
        pthread_mutex_lock(&u->m);
        u->idle = false;
        if (rc) {
            uring_break(u, rc);
            break;
        }
        uring_harvest(u);
    }
    pthread_mutex_unlock(&u->m);
    return NULL;
}

/* Owner, locked: wakes a reaper that sleeps with free slots. */
static void uring_ring_bell(struct uring *u)
{
    if (!u->idle)
        return;
    u->idle = false;
    uint64_t one = 1;
    if (write(u->wake_fd, &one, sizeof(one)) < 0) {
        /* An eventfd's counter cannot overflow at one a call; nothing to do. */
    }
}

/* Room for n more in f: moved to the front, or grown. */
static int uring_fifo_reserve(struct uring_fifo *f, size_t n)
{
    if (f->tail + n <= f->cap)
        return 0;
    if (f->head) {
        memmove(f->v, f->v + f->head, (f->tail - f->head) * sizeof(*f->v));
        f->tail -= f->head;
        f->head = 0;
    }
    return kvt_io_reqv_reserve(&f->v, &f->cap, f->tail + n);
}

/* Room for n more in each queue and in done[]. */
static int uring_reserve(struct uring *u, size_t n)
{
    int rc = kvt_io_reqv_reserve(&u->done, &u->done_cap, u->unreaped + n);
    if (!rc)
        rc = uring_fifo_reserve(&u->q[0], n);
    if (!rc)
        rc = uring_fifo_reserve(&u->q[1], n);
    return rc;
}

/* Registers the arena when there is one; on failure the context runs with
 * unregistered buffers and the note says why. */
static void uring_setup_fixed(struct uring *u, const struct kvt_io_params *p)
{
    int n = snprintf(u->note, sizeof(u->note), "io_uring depth %u, ", u->depth);
    char *tail = u->note + n;
    size_t room = sizeof(u->note) - (size_t)n;
    if (!p->fixed_base || !p->fixed_len) {
        snprintf(tail, room, "unregistered buffers (no arena given)");
        return;
    }
    int rc = kvt_uring_register_region(&u->ring, p->fixed_base, p->fixed_len, URING_CHUNK);
    if (rc) {
        snprintf(tail, room, "unregistered buffers: %s%s", strerror(-rc),
                 rc == -ENOMEM ? " (RLIMIT_MEMLOCK?)" : "");
        return;
    }
    u->fixed_base = p->fixed_base;
    u->fixed_len = p->fixed_len;
    snprintf(tail, room, "fixed buffers (%zu MiB in %zu pieces)", p->fixed_len >> 20,
             (p->fixed_len + URING_CHUNK - 1) / URING_CHUNK);
}

/* KVT_IO_URING_DISABLE=1 plays a container where io_uring is forbidden. */
static bool uring_disabled(void)
{
    const char *v = getenv("KVT_IO_URING_DISABLE");
    return v && *v && strcmp(v, "0") != 0;
}

static int uring_open(const struct kvt_io_params *p, void **priv)
{
    if (uring_disabled())
        return -EPERM;
    if (!p || !priv || !p->depth)
        return -EINVAL;
    struct uring *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rc = u->wake_fd < 0 ? -errno : 0;
    if (rc)
        goto out_free;
    rc = kvt_uring_init_ring(&u->ring, p->depth + 1);
    if (rc)
        goto out_efd;
    /* A kernel that clamps the ring gives fewer SQEs than asked: the slot
     * count follows, so that a slot (and the doorbell) always finds an SQE. */
    u->depth = p->depth < u->ring.sq.ring_entries ? p->depth : u->ring.sq.ring_entries - 1;
    u->max_bytes = p->max_bytes;
    u->ops = calloc(u->depth, sizeof(*u->ops));
    rc = -ENOMEM;
    if (!u->ops)
        goto out_exit;
    for (unsigned i = 0; i < u->depth; i++) {
        u->ops[i].next = u->free_ops;
        u->free_ops = &u->ops[i];
    }
    uring_setup_fixed(u, p);
    pthread_mutex_init(&u->m, NULL);
    pthread_cond_init(&u->done_cv, NULL);
    u->owner_reaps = p->owner_reaps;
    rc = u->owner_reaps ? 0 : -pthread_create(&u->reaper, NULL, uring_reaper, u);
    if (rc)
        goto out_sync;
    *priv = u;
    return 0;

out_sync:
    pthread_cond_destroy(&u->done_cv);
    pthread_mutex_destroy(&u->m);
    free(u->ops);
out_exit:
    io_uring_queue_exit(&u->ring);
out_efd:
    close(u->wake_fd);
out_free:
    free(u);
    return rc;
}

static void uring_close(void *priv)
{
    struct uring *u = priv;
    if (!u)
        return;
    pthread_mutex_lock(&u->m);
    u->stop = true;
    if (u->owner_reaps)
        owner_drain(u);
    else
        uring_ring_bell(u);
    pthread_mutex_unlock(&u->m);
    if (!u->owner_reaps)
        pthread_join(u->reaper, NULL);
    io_uring_queue_exit(&u->ring); /* also cancels the doorbell's poll, unregisters buffers */
    close(u->wake_fd);
    pthread_cond_destroy(&u->done_cv);
    pthread_mutex_destroy(&u->m);
    free(u->q[0].v);
    free(u->q[1].v);
    free(u->done);
    free(u->ops);
    free(u);
}

/* Never blocks: the requests join the reaper's queue. */
static int uring_submit(void *priv, struct kvt_io_req *const *reqs, size_t n)
{
    struct uring *u = priv;
    if (!n)
        return 0;
    if (!reqs)
        return -EINVAL;
    pthread_mutex_lock(&u->m);
    int rc = u->broken ? u->broken : uring_reserve(u, n);
    if (rc)
        goto out;
    for (size_t i = 0; i < n; i++) {
        u->unreaped++;
        struct uring_fifo *f = &u->q[reqs[i]->write];
        if (!reqs[i]->len)
            uring_complete(u, reqs[i], 0);
        else
            f->v[f->tail++] = reqs[i];
    }
    /* A ring that breaks here has taken the requests all the same: reap()
     * answers them (uring_break), as it does for the reaper's. */
    if (uring_queued(u) && u->owner_reaps)
        (void)owner_push(u, false);
    else if (uring_queued(u))
        uring_ring_bell(u);
out:
    pthread_mutex_unlock(&u->m);
    return rc;
}

static int uring_reap(void *priv, struct kvt_io_req **done, size_t max, size_t min_wait)
{
    struct uring *u = priv;
    if (!max)
        return 0;
    if (!done)
        return -EINVAL;
    if (max > INT_MAX)
        max = INT_MAX;
    pthread_mutex_lock(&u->m);
    /* Waiting for more than can ever complete would never return. */
    if (min_wait > max)
        min_wait = max;
    if (min_wait > u->unreaped)
        min_wait = u->unreaped;
    if (u->owner_reaps) {
        /* Completions waiting in the CQ are taken even when not asked to
         * wait: they free slots for the queued requests. */
        uring_harvest(u);
        if (uring_queued(u))
            (void)owner_push(u, false);
    }
    while (u->ndone < min_wait && !u->broken) {
        if (u->owner_reaps) {
            (void)owner_push(u, true);
            continue;
        }
        u->want = min_wait;
        pthread_cond_wait(&u->done_cv, &u->m);
    }
    u->want = 0;
    int rc = u->broken;
    if (!rc) {
        size_t k = kvt_io_reqv_take(u->done, &u->ndone, done, max);
        u->unreaped -= k;
        rc = (int)k;
    }
    pthread_mutex_unlock(&u->m);
    return rc;
}

static size_t uring_inflight(void *priv)
{
    struct uring *u = priv;
    pthread_mutex_lock(&u->m);
    size_t n = u->unreaped;
    pthread_mutex_unlock(&u->m);
    return n;
}

static const char *uring_describe(void *priv)
{
    struct uring *u = priv;
    return u ? u->note : "io_uring";
}

const struct kvt_io_ops kvt_io_uring_ops = {
    .name = "uring",
    .version = KVT_IO_OPS_VERSION,
    .open = uring_open,
    .close = uring_close,
    .submit = uring_submit,
    .reap = uring_reap,
    .inflight = uring_inflight,
    .describe = uring_describe,
};
