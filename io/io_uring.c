/*
 * io_uring.c — the io_uring back-end, and the raw io_uring baseline of
 * `kvtier bench ssd`. The only file that includes liburing.
 *
 * One ring per context, owned by one thread (io.h). Each request in the
 * kernel holds a slot (struct uring_op) that records how far it has got:
 * short transfers are resubmitted from there, and the caller's request is
 * never rewritten except for res. There are `depth` slots and the SQ ring has
 * at least `depth` entries, so a slot always finds a free SQE: every SQE in
 * the ring belongs to a slot that is not yet free.
 *
 * The DRAM arena is registered as fixed buffers, in pieces of at most 1 GiB
 * (the kernel refuses larger ones); a request inside the arena uses
 * READ_FIXED/WRITE_FIXED, which skips pinning the pages on every I/O. When
 * registration is refused (RLIMIT_MEMLOCK, a file-backed mapping) the
 * context runs with plain reads and writes and describe() says why.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "io/io.h"

#define URING_CHUNK ((size_t)1 << 30) /* the kernel's limit per registered buffer */
#define URING_BATCH 64                /* CQEs taken per peek */

struct uring_op {
    struct kvt_io_req *req;
    size_t moved;            /* bytes already transferred */
    struct uring_op *next;   /* free list */
};

struct uring {
    struct io_uring ring;
    unsigned depth;
    struct uring_op *ops;    /* depth slots */
    struct uring_op *free_ops;
    unsigned nbusy;          /* slots not free: requests prepared or in the kernel */
    char *fixed_base;        /* NULL: buffers unregistered */
    size_t fixed_len;
    struct kvt_io_req **done; /* completed, waiting for reap() (any order) */
    size_t ndone, done_cap;
    size_t unreaped;         /* submitted and not reaped: inflight() */
    int broken;              /* a ring error that cannot be retried; 0 = healthy */
    char note[160];
};

/* COOP_TASKRUN saves an interrupt per completion: completions are run when
 * we next enter the kernel, which the owner thread does anyway to wait.
 * Kernels before 5.19 refuse the flags, and run without them. */
static int uring_init_ring(struct io_uring *ring, unsigned depth)
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

/* Registers [base, base+len) as buffers of at most URING_CHUNK bytes; the
 * buffer index of an address is then its offset / URING_CHUNK. */
static int uring_register_region(struct io_uring *ring, void *base, size_t len, size_t piece)
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
 * remainder is resubmitted like any short transfer. */
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

static void uring_finish(struct uring *u, struct uring_op *op, int res)
{
    op->req->res = res;
    u->done[u->ndone++] = op->req; /* room reserved by submit() */
    op->req = NULL;
    op->next = u->free_ops;
    u->free_ops = op;
    u->nbusy--;
}

/* One completion: finished, failed, or resubmitted for the rest. */
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
 * do not). Resubmissions are only prepared here, never submitted. */
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
        for (unsigned i = 0; i < k; i++)
            uring_on_cqe(u, io_uring_cqe_get_data(cqes[i]), cqes[i]->res);
        io_uring_cq_advance(&u->ring, k);
    }
}

/* Submits what is prepared and, when want, waits for at least one
 * completion. -EAGAIN/-EBUSY mean the kernel is short of room for requests
 * or completions: taking the CQEs it holds (waiting for one when it has none
 * yet) makes room; with nothing of ours in the kernel, only time does. */
static int uring_enter(struct uring *u, bool want)
{
    for (;;) {
        int rc = want ? io_uring_submit_and_wait(&u->ring, 1) : io_uring_submit(&u->ring);
        if (rc >= 0 && (want || !io_uring_sq_ready(&u->ring)))
            return 0;
        if (rc >= 0 || rc == -EINTR)
            continue;
        if (rc != -EAGAIN && rc != -EBUSY) {
            u->broken = rc;
            return rc;
        }
        struct io_uring_cqe *cqe;
        if (io_uring_cq_ready(&u->ring))
            uring_harvest(u);
        else if (u->nbusy > io_uring_sq_ready(&u->ring) && io_uring_wait_cqe(&u->ring, &cqe) == 0)
            uring_harvest(u);
        else
            nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
    }
}

static int uring_reserve(struct uring *u, size_t n)
{
    return kvt_io_reqv_reserve(&u->done, &u->done_cap, u->unreaped + n);
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
    int rc = uring_register_region(&u->ring, p->fixed_base, p->fixed_len, URING_CHUNK);
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
    int rc = uring_init_ring(&u->ring, p->depth);
    if (rc)
        goto out_free;
    /* A kernel that clamps the ring gives fewer SQEs than asked: the slot
     * count follows, so that a slot always finds an SQE. */
    u->depth = p->depth < u->ring.sq.ring_entries ? p->depth : u->ring.sq.ring_entries;
    u->ops = calloc(u->depth, sizeof(*u->ops));
    rc = -ENOMEM;
    if (!u->ops)
        goto out_exit;
    for (unsigned i = 0; i < u->depth; i++) {
        u->ops[i].next = u->free_ops;
        u->free_ops = &u->ops[i];
    }
    uring_setup_fixed(u, p);
    *priv = u;
    return 0;

out_exit:
    io_uring_queue_exit(&u->ring);
out_free:
    free(u);
    return rc;
}

static void uring_close(void *priv)
{
    struct uring *u = priv;
    if (!u)
        return;
    /* The kernel writes into the caller's buffers until each CQE arrives:
     * returning earlier would let the caller free memory under a DMA. */
    while (u->nbusy && !u->broken) {
        if (uring_enter(u, true) == 0)
            uring_harvest(u);
    }
    io_uring_queue_exit(&u->ring); /* also unregisters the buffers */
    free(u->done);
    free(u->ops);
    free(u);
}

/* Blocks until a slot is free, moving completions to done[]. */
static int uring_take_slot(struct uring *u, struct uring_op **out)
{
    while (!u->free_ops) {
        int rc = uring_enter(u, true);
        if (rc)
            return rc;
        uring_harvest(u);
    }
    *out = u->free_ops;
    u->free_ops = u->free_ops->next;
    u->nbusy++;
    return 0;
}

static int uring_submit(void *priv, struct kvt_io_req *const *reqs, size_t n)
{
    struct uring *u = priv;
    if (!n)
        return 0;
    if (!reqs)
        return -EINVAL;
    if (u->broken)
        return u->broken;
    int rc = uring_reserve(u, n);
    if (rc)
        return rc;
    /* From here a failure can only be a ring that no longer works (broken is
     * set): requests of this call already prepared stay with the kernel. */
    for (size_t i = 0; i < n; i++) {
        struct uring_op *op;
        u->unreaped++;
        if (!reqs[i]->len) {
            reqs[i]->res = 0;
            u->done[u->ndone++] = reqs[i];
            continue;
        }
        rc = uring_take_slot(u, &op);
        if (rc) {
            u->unreaped--;
            return rc;
        }
        op->req = reqs[i];
        op->moved = 0;
        rc = uring_prep(u, op);
        if (rc)
            uring_finish(u, op, rc);
    }
    return uring_enter(u, false);
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
    /* Waiting for more than can ever complete would never return. */
    if (min_wait > max)
        min_wait = max;
    if (min_wait > u->unreaped)
        min_wait = u->unreaped;
    uring_harvest(u);
    while (u->ndone < min_wait) {
        int rc = uring_enter(u, true);
        if (rc)
            return rc;
        uring_harvest(u);
    }
    /* Resubmissions prepared by the last harvest go to the kernel now, not
     * at the next call, which may be far away. */
    if (io_uring_sq_ready(&u->ring) && uring_enter(u, false))
        return u->broken;
    size_t k = u->ndone < max ? u->ndone : max;
    for (size_t i = 0; i < k; i++)
        done[i] = u->done[--u->ndone];
    u->unreaped -= k;
    return (int)k;
}

static size_t uring_inflight(void *priv)
{
    return ((struct uring *)priv)->unreaped;
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

/* ------------------------------------------------------------ raw baseline */

struct bench {
    struct io_uring ring;
    int fd;
    bool write, fixed;
    char *bufs;              /* one buffer per block of the span, as the engine's DRAM
                                arena gives each page its own slot: reusing a few buffers
                                measured up to 2x slower on virtual disks */
    size_t block;
    uint64_t nblocks, issued, completed, bytes;
    int err;
};

/* Slot s issues the next block of the sequential cycle through the span. */
static void bench_issue(struct bench *b, unsigned s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring);
    uint64_t blk = b->issued++ % b->nblocks;
    char *buf = b->bufs + (size_t)blk * b->block;
    uint64_t off = blk * b->block;
    int bi = (int)(((size_t)blk * b->block) / URING_CHUNK);
    if (b->fixed && b->write)
        io_uring_prep_write_fixed(sqe, b->fd, buf, (unsigned)b->block, off, bi);
    else if (b->fixed)
        io_uring_prep_read_fixed(sqe, b->fd, buf, (unsigned)b->block, off, bi);
    else if (b->write)
        io_uring_prep_write(sqe, b->fd, buf, (unsigned)b->block, off);
    else
        io_uring_prep_read(sqe, b->fd, buf, (unsigned)b->block, off);
    io_uring_sqe_set_data(sqe, (void *)(uintptr_t)s);
}

/* Keeps depth requests in flight until n have completed. No resubmission of
 * short transfers: the bytes that moved are what is counted. After an error
 * no new request is issued, but the loop runs until every request issued has
 * completed, since the kernel writes into bufs until then. */
static void bench_loop(struct bench *b, unsigned depth, uint64_t n)
{
    struct io_uring_cqe *cqes[URING_BATCH];
    for (unsigned s = 0; s < depth && b->issued < n; s++)
        bench_issue(b, s);
    while (b->completed < b->issued) {
        int rc = io_uring_submit_and_wait(&b->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            b->err = rc;
            return; /* the ring is gone; queue_exit cancels and waits */
        }
        unsigned k = io_uring_peek_batch_cqe(&b->ring, cqes, URING_BATCH);
        for (unsigned i = 0; i < k; i++) {
            int res = cqes[i]->res;
            unsigned s = (unsigned)(uintptr_t)io_uring_cqe_get_data(cqes[i]);
            b->completed++;
            if (res <= 0 && !b->err)
                b->err = res ? res : -EIO;
            if (res > 0)
                b->bytes += (uint64_t)res;
            if (!b->err && b->issued < n)
                bench_issue(b, s);
        }
        io_uring_cq_advance(&b->ring, k);
    }
}

static double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int kvt_io_raw_bench(const char *path, uint64_t span, size_t block, unsigned depth, uint64_t n,
                     bool write, double *gbps)
{
    if (!path || !gbps || !block || block % 4096 || block > URING_CHUNK || !depth || !n ||
        span < block)
        return -EINVAL;
    struct bench b = { .write = write, .block = block, .nblocks = span / block };
    b.fd = open(path, (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
    if (b.fd < 0)
        return -errno;
    size_t region = (size_t)b.nblocks * block;
    /* Memory of the kind the engine's arenas are (huge pages where THP
     * allows, see tiers/device_host.c): on a virtual disk the DMA target's
     * physical layout moves the figure by up to 1.5x. */
    int rc = 0;
    b.bufs = mmap(NULL, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.bufs == MAP_FAILED) {
        b.bufs = NULL;
        rc = -ENOMEM;
        goto out_close;
    }
    (void)madvise(b.bufs, region, MADV_HUGEPAGE);
    memset(b.bufs, 0x5a, region); /* fault the pages in before timing */
    rc = uring_init_ring(&b.ring, depth);
    if (rc)
        goto out_free;
    b.fixed = uring_register_region(&b.ring, b.bufs, region, URING_CHUNK) == 0;

    double t0 = bench_now();
    bench_loop(&b, depth, n);
    double secs = bench_now() - t0;
    rc = b.err;
    if (!rc)
        *gbps = secs > 0 ? (double)b.bytes / secs / 1e9 : 0.0;
    io_uring_queue_exit(&b.ring);
out_free:
    munmap(b.bufs, region);
out_close:
    close(b.fd);
    return rc;
}
