/*
 * faulty.h — the test-support library's fault-injecting back-ends: a device
 * back-end and an I/O back-end that wrap the product's own and fail the n-th
 * call of a kind, and the I/O one's power-loss model (lab/device_faulty.c,
 * lab/io_faulty.c). Tests open an engine over them with
 * kvt_open_with_hooks() (lab/lab.h); a back-end opened alone takes its plan
 * in its params' arg. The product never names them.
 */
#ifndef KVT_LAB_FAULTY_H
#define KVT_LAB_FAULTY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices/device.h"
#include "io/io.h"

/* ------------------------------------------------------------- device */

/* The faulty wrapper: wraps another back-end and fails the n-th call of a
 * chosen operation synchronously. Tests open an engine with it through
 * kvt_open_with_hooks() (lab/lab.h). */
enum kvt_fault_op {
    KVT_FAULT_NONE = 0,
    KVT_FAULT_SUBMIT,       /* submit() returns err, nothing queued */
    KVT_FAULT_HBM_ALLOC,    /* hbm_alloc() returns err */
    KVT_FAULT_HOST_ALLOC,   /* host_alloc() returns err */
    KVT_FAULT_COPY_SYNC,    /* copy_sync() returns err, nothing copied */
    KVT_FAULT_ASYNC         /* the n-th submitted batch fails on the copy thread
                               (host inside only; armed at open, not by set) */
};

struct kvt_fault {
    enum kvt_fault_op op;
    uint64_t nth;            /* 1 = the first call of op */
    int err;                 /* what to return; 0 = KVT_EDEVICE */
    int repeat;              /* keep failing every call from the n-th on */
};

extern const struct kvt_device_ops kvt_device_faulty_ops;

/* A fault plan for the faulty back-end, given at open in
 * kvt_device_params.arg. The caller owns it and keeps it until the
 * back-end is closed (or its open failed); one back-end at a time per plan,
 * so two engines in one process fail independently. The calls are counted
 * in it, so the counts stay readable after close or a failed open. Holds no
 * resources: nothing to free. Fields are the back-end's: use the calls
 * below. */
struct kvt_device_faulty {
    const struct kvt_device_ops *inner;   /* the wrapped back-end */
    pthread_mutex_t mu;                   /* guards what follows */
    struct kvt_fault fault;
    uint64_t calls[KVT_FAULT_ASYNC + 1];  /* per op; ASYNC: batches submitted */
};
/* A plan that wraps inner (NULL = host) and injects f (NULL = nothing). */
void kvt_device_faulty_init(struct kvt_device_faulty *plan, const struct kvt_device_ops *inner,
                            const struct kvt_fault *f);
/* Re-arms a plan, also while a back-end uses it: f (NULL = nothing) from the
 * next call on, counted from zero. */
void kvt_device_faulty_set(struct kvt_device_faulty *plan, const struct kvt_fault *f);
/* How many calls of op the back-end has made since init or set. */
uint64_t kvt_device_faulty_count(struct kvt_device_faulty *plan, enum kvt_fault_op op);

/* ------------------------------------------------------------- I/O */

extern const struct kvt_io_ops kvt_io_faulty_ops;

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
 * kvt_io_params.arg (an engine's: kvt_open_with_hooks). The caller owns
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
/* fdatasync(fd) through the plan (plan NULL: kvt_io_sync's plain one): 0 or -errno;
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

#endif /* KVT_LAB_FAULTY_H */
