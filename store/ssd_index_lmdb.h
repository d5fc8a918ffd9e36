/*
 * ssd_index_lmdb.h — what the two halves of the SSD index share (internal to
 * ssd_index.c and ssd_index_open.c; everyone else uses store/ssd_index.h):
 * the index handle, the stored key, LMDB's errors in kvtier's terms, and the
 * write transaction.
 */
#ifndef KVT_SSD_INDEX_LMDB_H
#define KVT_SSD_INDEX_LMDB_H

#include <endian.h>
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "store/ssd_index.h"
#include "base/base.h"

#define IX_FORMAT 1         /* two named DBs, "pages" and "meta" */
#define IX_KEY_LAYOUT 1     /* 16 bytes: id, layer, index, big-endian */
#define IX_MAP_DEFAULT ((size_t)64 << 20)
#define IX_MAP_MIN ((size_t)32 << 10)

/* LMDB's durability flag between synced commits: with persist, MDB_NOMETASYNC
 * (each commit syncs its pages before it writes its meta page, so a power cut
 * leaves the last commit or the one before, both whole); without, MDB_NOSYNC
 * (nothing survives a power cut anyway: the directory is wiped at the next
 * open). Why in ssd_index.c's head comment. */
static inline unsigned ix_lazy_flag(bool persist)
{
    return persist ? MDB_NOMETASYNC : MDB_NOSYNC;
}

struct ix_version {
    uint32_t format, key_layout, entry_bytes, entry_version;
};

struct kvt_index {
    MDB_env *env;
    MDB_dbi pages, meta;
    bool persist;
    int dfd;                    /* the spill directory */
    int ixfd;                   /* <dir>/index, opened without following a link */
    char *dir;                  /* the spill directory's name, for messages */
    pthread_rwlock_t remap;     /* shared: any transaction; exclusive: remap, flag flips */
    _Atomic uint64_t max_gen;
    _Atomic int broken;         /* nonzero after a failed remap left no map */
    struct kvt_syncer sync;     /* tests: a power-loss model told of each commit, or no ops */
    char path[];                /* <dir>/index */
};

/* LMDB returns positive errno values and its own MDB_* block; callers see
 * -errno and KVT_E* only. */
/* The map size the index may use: at most RLIMIT_FSIZE, whole pages. The
 * data file grows to what the map holds, and a write past the limit raises
 * SIGXFSZ, which would kill the host; a map that cannot grow is MDB_MAP_FULL
 * (-ENOSPC) instead. */
static inline size_t ix_map_cap(size_t bytes)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        (uint64_t)bytes <= (uint64_t)rl.rlim_cur)
        return bytes;
    return (size_t)(rl.rlim_cur & ~(rlim_t)4095);
}

static inline int ix_err(int rc)
{
    switch (rc) {
    case MDB_SUCCESS: return 0;
    case MDB_NOTFOUND: return KVT_ENOTFOUND;
    case MDB_CORRUPTED: case MDB_PANIC: case MDB_INVALID: case MDB_VERSION_MISMATCH:
    case MDB_PAGE_NOTFOUND: case MDB_INCOMPATIBLE: return KVT_ECORRUPT;
    case MDB_MAP_FULL: return -ENOSPC;   /* only when the map could not grow */
    case MDB_READERS_FULL: case MDB_MAP_RESIZED: return -EAGAIN;
    case MDB_TXN_FULL: return -E2BIG;    /* one batch dirties too many pages */
    default: break;
    }
    if (rc > 0)
        return -rc;
    if (rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE)
        return -EINVAL;                  /* misuse: bad txn, dbi, reader slot */
    return rc;                           /* already -errno or KVT_E* */
}

static inline const char *ix_strerror(int rc)
{
    return rc > 0 || (rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE) ? mdb_strerror(rc)
                                                                     : kvt_strerror(rc);
}

/* The stored key: big-endian fields, 16 bytes, no padding. */
struct ix_key {
    uint64_t id;
    uint32_t layer, index;
};
_Static_assert(sizeof(struct ix_key) == 16, "keys are 16 bytes");

static inline MDB_val key_encode(const kvt_key *k, struct ix_key *kb)
{
    kb->id = htobe64(k->id);
    kb->layer = htobe32(k->layer);
    kb->index = htobe32(k->index);
    return (MDB_val){ sizeof(*kb), kb };
}

static inline int key_decode(const MDB_val *v, kvt_key *k)
{
    struct ix_key kb;
    if (v->mv_size != sizeof(kb))
        return KVT_ECORRUPT;
    memcpy(&kb, v->mv_data, sizeof(kb));
    *k = (kvt_key){ be64toh(kb.id), be32toh(kb.layer), be32toh(kb.index) };
    return 0;
}

/* LMDB aligns values to 2 bytes only: copy before reading the uint64 fields. */
static inline int entry_decode_v(const MDB_val *v, struct kvt_ssd_entry *e, unsigned version)
{
    if (v->mv_size != sizeof(*e))
        return KVT_ECORRUPT;
    memcpy(e, v->mv_data, sizeof(*e));
    return e->version == version ? 0 : KVT_ECORRUPT;
}

static inline int entry_decode(const MDB_val *v, struct kvt_ssd_entry *e)
{
    return entry_decode_v(v, e, KVT_SSD_ENTRY_VERSION);
}

/* A transaction's work: 0, or an LMDB or kvtier error that aborts it. */
typedef int (*ix_body)(struct kvt_index *ix, MDB_txn *txn, void *arg);

/* Runs body in one write transaction (ssd_index.c). A full map aborts it,
 * doubles the map and runs the whole body again: nothing of an aborted
 * attempt remains. Returns an LMDB or kvtier error (ix_err maps it). */
int kvt_ix_write(struct kvt_index *ix, ix_body body, void *arg);

/* The power-loss model (tests), told of a commit: 0 without one. */
static inline int ix_model_begin(struct kvt_index *ix, bool syncs)
{
    return ix->sync.ops ? ix->sync.ops->index_begin(ix->sync.arg, syncs) : 0;
}

static inline void ix_model_durable(struct kvt_index *ix)
{
    if (ix->sync.ops)
        ix->sync.ops->index_durable(ix->sync.arg);
}

#endif /* KVT_SSD_INDEX_LMDB_H */
