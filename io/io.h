/*
 * io.h — the storage I/O interface (internal).
 *
 * Two back-ends, one shape: `uring` (io_uring, O_DIRECT, the pinned DRAM
 * arena registered as fixed buffers, batched submission) and `psync` (a small
 * thread pool of pread/pwrite), plus `faulty`, a wrapper for tests. Only
 * io/io_uring.c includes liburing.
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

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

struct kvt_io_faulty;

struct kvt_io_params {
    unsigned depth;      /* requests in flight at most */
    void *fixed_base;    /* memory to register as a fixed buffer (the DRAM arena), or NULL */
    size_t fixed_len;
    struct kvt_io_faulty *faulty; /* the faulty back-end's plan (required there); others ignore it */
    size_t max_bytes;    /* bytes in flight at most, though always one request (0 = no
                            cap): a back-end that queues holds the rest back (uring) */
    bool owner_reaps;    /* no thread of the back-end's between the owner and the kernel:
                            submit() hands requests to the kernel and reap() waits there,
                            both in the owner's thread (uring; others ignore it). For an
                            owner that waits for its own requests, as a kvt_get does: a
                            reaper would add two thread wake-ups to every request. */
};

struct kvt_io_ops {
    const char *name;    /* "uring", "psync", "faulty" */
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
    /* Moves up to max completed requests into done[], waiting until at
     * least min_wait have completed (0 = do not wait). Returns the count or
     * -errno. */
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
extern const struct kvt_io_ops kvt_io_faulty_ops;

/* Opens the back-end for KVT_IO_AUTO / KVT_IO_URING / KVT_IO_PSYNC (values
 * of include/kvtier.h). AUTO falls back to psync when io_uring cannot be set
 * up (-EPERM, -ENOSYS) and writes why into note (once per process also on
 * stderr); URING fails instead. note may be NULL. */
/* Test hook: with KVT_IO_URING_DISABLE set to anything but "" or "0" in the
 * environment, the uring back-end's open returns -EPERM, as in a container
 * that forbids io_uring (AUTO then falls back, URING fails). */
int kvt_io_open(int which, const struct kvt_io_params *p, const struct kvt_io_ops **ops,
                void **priv, char *note, size_t note_len);

/* The faulty wrapper: fails the n-th request of a kind. */
enum kvt_io_fault_op {
    KVT_IOF_NONE = 0,
    KVT_IOF_READ,        /* the n-th read completes with err */
    KVT_IOF_WRITE,       /* the n-th write completes with err */
    KVT_IOF_SHORT_READ,  /* the n-th read moves only half its bytes, then fails with -EIO
                            (the back-end's resubmission sees a persistent short read) */
    KVT_IOF_SUBMIT,      /* the n-th submit() call returns err */
};
struct kvt_io_fault {
    enum kvt_io_fault_op op;
    uint64_t nth;
    int err;             /* -EIO, -ENOSPC, ... (0 = -EIO) */
    bool repeat;         /* every such request from the n-th on */
};
/* A fault plan for the faulty back-end (tests), given at open in
 * kvt_io_params.faulty (an engine's: kvt_open_with_hooks). The caller owns
 * it and keeps it until the contexts that use it are closed. An engine's
 * contexts (its mover's, and those its callers read with: tiers/ssd_caller.c)
 * share its plan and count in it together; a plan per engine makes two
 * engines in one process fail independently. The
 * back-end counts the requests it sees in it, so the counts stay readable
 * after close. Holds no resources unless power loss is armed (then
 * kvt_io_faulty_powerloss(plan, NULL) or _apply frees them). Fields are the
 * back-end's: use the calls below. */
struct kvt_io_pl_write;
struct kvt_io_pl_file;
struct kvt_io_faulty {
    const struct kvt_io_ops *inner; /* the wrapped back-end */
    pthread_mutex_t submit_mu;      /* held across a whole submit(): the contexts sharing
                                       the plan judge their requests one call after another */
    pthread_mutex_t mu;             /* guards what follows (the owner's thread and the caller's) */
    struct kvt_io_fault fault;
    uint64_t reads, writes, submits;
    /* Power loss (kvt_io_faulty_powerloss below): the plan, whether the
     * power is gone, what was counted towards the cut, and the writes no
     * completed sync covers yet (newest first). */
    struct kvt_io_powerloss {
        enum kvt_io_cut_at {
            KVT_IOCUT_NONE = 0,     /* not armed: no journal, nothing counted */
            KVT_IOCUT_ON_DEMAND,    /* armed; the power goes at kvt_io_faulty_cut() only */
            KVT_IOCUT_WRITE,        /* the n-th write reaches the file, then the power goes */
            KVT_IOCUT_SYNC,         /* the power goes during the n-th sync: it never completes */
        } at;
        uint64_t nth;
        unsigned tear;              /* 0: an unsynced write is lost whole; 512 or 4096: it keeps
                                       a prefix of whole units, none to all (from seed) */
        uint64_t seed;
        bool index_kept;            /* the index file keeps its unsynced commits (else it goes
                                       back to its image at its last completed sync) */
    } pl;
    bool dead;                      /* the power is gone: every request and sync fails (-EIO) */
    uint64_t pl_writes, pl_syncs;
    struct kvt_io_pl_write *journal;
    struct kvt_io_pl_file *files;
};
/* A plan that wraps inner (NULL = psync) and injects f (NULL = nothing). */
void kvt_io_faulty_init(struct kvt_io_faulty *plan, const struct kvt_io_ops *inner,
                        const struct kvt_io_fault *f);
/* Re-arms a plan, also while a context uses it: f (NULL = nothing) from the
 * next request on, counted from zero. */
void kvt_io_faulty_set(struct kvt_io_faulty *plan, const struct kvt_io_fault *f);
/* Requests of op seen since init or set: reads (KVT_IOF_READ and
 * KVT_IOF_SHORT_READ), writes, submit() calls, reads and writes (NONE). */
uint64_t kvt_io_faulty_count(struct kvt_io_faulty *plan, enum kvt_io_fault_op op);

/* Power loss. A plan armed with kvt_io_faulty_powerloss() keeps, for every
 * write that passes through it, the bytes it overwrote, until a completed
 * sync of that file covers it (a sync covers the writes reaped before it
 * began). When the power goes (at the n-th write or sync, or at
 * kvt_io_faulty_cut()), every later request and sync fails with -EIO, as on
 * a machine that is off; after the engine is closed,
 * kvt_io_faulty_powerloss_apply() makes the files what the disk would hold
 * at the next boot: each uncovered write is undone (newest first), whole or
 * after a prefix of tear-sized units, and the index file goes back to its
 * image at its last completed sync (unless index_kept). The index (LMDB,
 * which syncs by itself) reports its syncs with the kvt_io_faulty_index_*
 * calls. Not modelled: files created or renamed since the last directory
 * sync (kvtier syncs the directory after each), reordering inside LMDB's own
 * commit (its documented guarantee: store/ssd_index.c). */

/* Arms power loss (pl NULL: disarms, dropping the journal without undoing
 * anything), counting writes and syncs from zero. Not while an engine uses
 * the plan's files: between engines. */
void kvt_io_faulty_powerloss(struct kvt_io_faulty *plan, const struct kvt_io_powerloss *pl);
/* The power goes now (an armed plan; any thread). */
void kvt_io_faulty_cut(struct kvt_io_faulty *plan);
/* Whether the power is gone. */
bool kvt_io_faulty_dead(struct kvt_io_faulty *plan);
/* fdatasync(fd) through the plan (plan NULL: fdatasync itself): 0 or -errno;
 * -EIO once the power is gone, or when this is the sync it goes in. */
int kvt_io_faulty_sync(struct kvt_io_faulty *plan, int fd);
/* The index file, open as fd (LMDB's): its image now is durable. 0, -ENOMEM
 * or -errno. */
int kvt_io_faulty_index_track(struct kvt_io_faulty *plan, int fd);
/* Before an index commit: -EIO when the power is gone (the commit must not
 * happen); syncs: the commit syncs the file, which counts as a sync (the
 * power may go in it). */
int kvt_io_faulty_index_begin(struct kvt_io_faulty *plan, bool syncs);
/* The index file's image now is what survives a power loss. */
void kvt_io_faulty_index_durable(struct kvt_io_faulty *plan);
struct kvt_io_powerloss_result {
    uint64_t lost, torn, kept;      /* uncovered writes undone whole, cut to a prefix, left whole */
    bool index_rolled_back;         /* the index file went back to its last synced image */
};
/* After every engine using the plan is closed: the disk as the next boot
 * finds it (above); then disarms. 0 or -errno (the first failure to write a
 * file back; the rest are still tried). out may be NULL. */
int kvt_io_faulty_powerloss_apply(struct kvt_io_faulty *plan, struct kvt_io_powerloss_result *out);

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
/* fdatasync(fd) through s: 0 or -errno. */
int kvt_io_sync(const struct kvt_syncer *s, int fd);

/* Grows *v (an array of request pointers, *cap entries) to hold need
 * entries, doubling from 16. 0 or -ENOMEM (nothing changed). Shared by the
 * back-ends' completion lists, which must never allocate on a completion. */
int kvt_io_reqv_reserve(struct kvt_io_req ***v, size_t *cap, size_t need);

/* Asks for a short scheduler slice for the calling thread, so that it runs
 * at once when woken instead of waiting for a CPU-bound thread's slice (see
 * io/sched_hint.c). For the threads that feed the disk. Best effort: 0, or
 * -errno where the kernel refuses (before Linux 6.12 it may also accept and
 * ignore it). */
int kvt_io_short_slice(void);

#endif /* KVT_IO_H */
