/*
 * io.h — the storage I/O interface (internal).
 *
 * Two back-ends, one shape: `uring` (io_uring, O_DIRECT, the pinned DRAM
 * arena registered as fixed buffers, batched submission) and `psync` (a small
 * thread pool of pread/pwrite). The test-support library wraps them in a
 * fault-injecting back-end of its own (lab/faulty.h). Only io/io_uring.c
 * includes liburing.
 *
 * Requests are whole: a back-end resubmits short reads and writes and retries
 * -EAGAIN/-EINTR itself, and reports each request once, with res = 0 when
 * every byte moved or a negative errno (-EIO, -ENOSPC, ...) when it did not.
 *
 * Threads: one thread owns an I/O context (the engine's mover); submit and
 * reap are not called concurrently on the same context. Back-ends may run
 * threads of their own behind it (uring: a reaper; psync: a pool).
 */
#ifndef KVT_IO_H
#define KVT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvt_build.h"

#define KVT_IO_OPS_VERSION 1

struct kvt_io_req {
    int fd;              /* opened with O_DIRECT where the file system allows */
    bool write;
    void *buf;           /* 4096-aligned */
    size_t len;          /* a multiple of 4096 */
    uint64_t off;        /* a multiple of 4096 */
    int res;             /* set at completion: 0, or -errno */
    void *user;          /* the caller's, untouched */
};

struct kvt_io_params {
    unsigned depth;      /* requests in flight at most */
    void *fixed_base;    /* memory to register as a fixed buffer (the DRAM arena), or NULL */
    size_t fixed_len;
    void *arg;           /* a back-end's own argument, where it takes one (the test-support
                            library's faulty back-end: its plan, lab/faulty.h); others
                            ignore it */
    size_t max_bytes;    /* bytes in flight at most, though always one request (0 = no
                            cap): a back-end that queues holds the rest back (uring) */
    bool owner_reaps;    /* no thread of the back-end's between the owner and the kernel:
                            submit() hands requests to the kernel and reap() waits there,
                            both in the owner's thread (uring; others ignore it). For an
                            owner that waits for its own requests, as a kvt_get does: a
                            reaper would add two thread wake-ups to every request. */
};

struct kvt_io_ops {
    const char *name;    /* "uring", "psync" (the lab's: "faulty") */
    int version;         /* KVT_IO_OPS_VERSION */
    /* Opens a context. -EPERM/-ENOSYS/-EINVAL when the back-end cannot run
     * here (io_uring disabled in a container, ...). */
    int (*open)(const struct kvt_io_params *p, void **priv);
    /* Waits for every request in flight, then frees the context. */
    void (*close)(void *priv);
    /* Queues n requests. May block while `depth` requests are already in
     * flight (psync does; uring never blocks: its reaper takes requests from
     * its queue as slots free), reaping none: completions stay queued for
     * reap(). The requests must stay valid until reaped. A back-end that
     * queues requests hands queued reads to the disk before queued writes
     * (a caller waits on a read; writes are the owner's work ahead of need),
     * each class oldest first. Returns 0 or -errno (nothing of this call
     * queued). */
    int (*submit)(void *priv, struct kvt_io_req *const *reqs, size_t n);
    /* Moves up to max completed requests into done[], oldest completion
     * first, waiting until at least min_wait have completed (0 = do not
     * wait). Returns the count or -errno. Oldest first, because an owner
     * that takes a few at a time (the SSD pipeline with a codec decodes four
     * a step) would otherwise serve the newest over and over while the
     * first completion, a page a caller waits for, stays under them. */
    int (*reap)(void *priv, struct kvt_io_req **done, size_t max, size_t min_wait);
    /* Requests submitted and not yet reaped. */
    size_t (*inflight)(void *priv);
    /* A human note about how the context runs ("fixed buffers", "unregistered
     * buffers: RLIMIT_MEMLOCK"); static or owned by priv. */
    const char *(*describe)(void *priv);
};

extern const struct kvt_io_ops kvt_io_psync_ops;
#if KVT_HAVE_URING
extern const struct kvt_io_ops kvt_io_uring_ops;
#endif

/* Opens the back-end for KVT_IO_AUTO / KVT_IO_URING / KVT_IO_PSYNC (values
 * of include/kvtier.h). AUTO falls back to psync when io_uring cannot be set
 * up (-EPERM, -ENOSYS) and writes why into note (once per process also on
 * stderr); URING fails instead. note may be NULL. */
/* Test hook: with KVT_IO_URING_DISABLE set to anything but "" or "0" in the
 * environment, the uring back-end's open returns -EPERM, as in a container
 * that forbids io_uring (AUTO then falls back, URING fails). */
int kvt_io_open(int which, const struct kvt_io_params *p, const struct kvt_io_ops **ops,
                void **priv, char *note, size_t note_len);

/* How the SSD store and its index make their files durable. A syncer with
 * no ops: fdatasync, and LMDB's own commits. Tests hand in a power-loss
 * model (the test-support library's kvt_io_faulty_sync_ops) that sees each
 * sync and each index commit; the product never names it. */
struct kvt_sync_ops {
    int (*sync)(void *arg, int fd);          /* fdatasync(fd): 0 or -errno */
    /* The index file, open as fd: its image now is durable. 0 or -errno. */
    int (*index_track)(void *arg, int fd);
    /* Before an index commit: nonzero stops it (the power is gone); syncs:
     * the commit syncs the file. */
    int (*index_begin)(void *arg, bool syncs);
    void (*index_durable)(void *arg);        /* the index file's image now survives */
};
struct kvt_syncer {
    const struct kvt_sync_ops *ops;          /* NULL: plain syncs */
    void *arg;
};
/* Moves every byte of r with pread/pwrite on the calling thread, continuing
 * short transfers: 0, -EIO at the end of the file, or -errno. The psync
 * back-end's transfer, and the SSD store's batched calls'. */
int kvt_io_transfer(const struct kvt_io_req *r);

/* fdatasync(fd) through s: 0 or -errno. */
int kvt_io_sync(const struct kvt_syncer *s, int fd);

/* Grows *v (an array of request pointers, *cap entries) to hold need
 * entries, doubling from 16. 0 or -ENOMEM (nothing changed). Shared by the
 * back-ends' completion lists, which must never allocate on a completion.
 * Inline (as take below): every submit and reap of a kvt_get's own reads
 * passes here, and in steady state there is nothing to grow. */
int kvt_io_reqv_grow(struct kvt_io_req ***v, size_t *cap, size_t need);
static inline int kvt_io_reqv_reserve(struct kvt_io_req ***v, size_t *cap, size_t need)
{
    return need <= *cap ? 0 : kvt_io_reqv_grow(v, cap, need);
}
/* Moves the oldest min(*n, max) of the *n requests in v (oldest first) to
 * out, and the rest down to v's start: reap()'s order (above). Returns how
 * many. v may be NULL while *n is 0. */
static inline size_t kvt_io_reqv_take(struct kvt_io_req **v, size_t *n, struct kvt_io_req **out,
                                      size_t max)
{
    size_t k = *n < max ? *n : max;
    if (!k)
        return 0; /* v may still be NULL: nothing was ever queued */
    memcpy(out, v, k * sizeof(*out));
    *n -= k;
    memmove(v, v + k, *n * sizeof(*v));
    return k;
}

/* Asks for a short scheduler slice for the calling thread, so that it runs
 * at once when woken instead of waiting for a CPU-bound thread's slice (see
 * io/sched_hint.c). For the threads that feed the disk. Best effort: 0, or
 * -errno where the kernel refuses (before Linux 6.12 it may also accept and
 * ignore it). */
int kvt_io_short_slice(void);

#endif /* KVT_IO_H */
