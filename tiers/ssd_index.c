/*
 * ssd_index.c — the SSD tier's LMDB index: kvt_key -> struct kvt_ssd_entry.
 *
 * One environment in <dir>/index/ with two named databases: "pages" maps a
 * 16-byte key to the entry, stored verbatim; "meta" holds one "version"
 * record (format, key layout, entry size and version). A file of another
 * layout is wiped, never read: it would serve pages under the wrong keys.
 *
 * Keys are (id, layer, index) big-endian, so LMDB's memcmp order is numeric
 * key order: the pages of one id are adjacent, foreach walks in key order,
 * and one sequence is one cursor range.
 *
 * Durability: the environment runs with MDB_NOSYNC, so a sync=false batch
 * costs no fdatasync (group commit decides when to pay). A sync=true batch
 * turns MDB_NOSYNC off for its commit rather than calling mdb_env_sync()
 * after it: LMDB then syncs the data pages before it writes the meta page
 * (O_DSYNC). Syncing after a NOSYNC commit would let the new meta page reach
 * the disk before its pages (a power cut leaves a tree LMDB cannot read),
 * and a failed sync would leave the batch applied while reporting an error.
 *
 * Remapping: mdb_env_set_mapsize() unmaps and maps the file again, safe only
 * while no transaction of this process is open. Every transaction holds
 * ix->remap shared; growing takes it exclusive, and so does flipping
 * MDB_NOSYNC (a plain int in the MDB_env that every mdb_txn_begin reads).
 */
#include <endian.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tiers/ssd_index.h"
#include "tiers/tiers.h"

_Static_assert(sizeof(struct kvt_ssd_entry) == 48, "kvt_ssd_entry is stored verbatim: 48 bytes");

#define IX_FORMAT 1         /* two named DBs, "pages" and "meta" */
#define IX_KEY_LAYOUT 1     /* 16 bytes: id, layer, index, big-endian */
#define IX_MAP_DEFAULT ((size_t)64 << 20)
#define IX_MAP_MIN ((size_t)32 << 10)

struct ix_version {
    uint32_t format, key_layout, entry_bytes, entry_version;
};

struct kvt_index {
    MDB_env *env;
    MDB_dbi pages, meta;
    bool persist;
    pthread_rwlock_t remap;     /* shared: any transaction; exclusive: remap, flag flips */
    _Atomic uint64_t max_gen;
    _Atomic int broken;         /* nonzero after a failed remap left no map */
    char path[];                /* <dir>/index */
};

/* ------------------------------------------------------------- helpers */

/* LMDB returns positive errno values and its own MDB_* block; callers see
 * -errno and KVT_E* only. */
static int ix_err(int rc)
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

static const char *ix_strerror(int rc)
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

static MDB_val key_encode(const kvt_key *k, struct ix_key *kb)
{
    kb->id = htobe64(k->id);
    kb->layer = htobe32(k->layer);
    kb->index = htobe32(k->index);
    return (MDB_val){ sizeof(*kb), kb };
}

static int key_decode(const MDB_val *v, kvt_key *k)
{
    struct ix_key kb;
    if (v->mv_size != sizeof(kb))
        return KVT_ECORRUPT;
    memcpy(&kb, v->mv_data, sizeof(kb));
    *k = (kvt_key){ be64toh(kb.id), be32toh(kb.layer), be32toh(kb.index) };
    return 0;
}

/* LMDB aligns values to 2 bytes only: copy before reading the uint64 fields. */
static int entry_decode(const MDB_val *v, struct kvt_ssd_entry *e)
{
    if (v->mv_size != sizeof(*e))
        return KVT_ECORRUPT;
    memcpy(e, v->mv_data, sizeof(*e));
    return e->version == KVT_SSD_ENTRY_VERSION ? 0 : KVT_ECORRUPT;
}

static void max_gen_raise(struct kvt_index *ix, uint64_t g)
{
    uint64_t cur = atomic_load(&ix->max_gen);
    while (g > cur && !atomic_compare_exchange_weak(&ix->max_gen, &cur, g))
        ;
}

/* ------------------------------------------------------------- remapping */

static int ix_remap(struct kvt_index *ix, size_t bytes)
{
    pthread_rwlock_wrlock(&ix->remap);
    int rc = atomic_load(&ix->broken);
    if (!rc) {
        rc = mdb_env_set_mapsize(ix->env, bytes);
        /* A failed mmap inside LMDB leaves the env without a map: refuse
         * every later call instead of touching it. */
        if (rc)
            atomic_store(&ix->broken, ix_err(rc));
    }
    pthread_rwlock_unlock(&ix->remap);
    return rc;
}

static int ix_grow(struct kvt_index *ix)
{
    MDB_envinfo ei;
    mdb_env_info(ix->env, &ei);
    if (ei.me_mapsize > SIZE_MAX / 2)
        return MDB_MAP_FULL;
    return ix_remap(ix, ei.me_mapsize * 2);
}

static void ix_set_nosync(struct kvt_index *ix, int on)
{
    pthread_rwlock_wrlock(&ix->remap);
    mdb_env_set_flags(ix->env, MDB_NOSYNC, on);
    pthread_rwlock_unlock(&ix->remap);
}

/* ------------------------------------------------------------- read txns */

/* The read transactions this thread holds, innermost first. A foreach
 * callback that calls kvt_index_get() must not take ix->remap again: with a
 * remap waiting (the lock prefers writers) the nested rdlock would deadlock. */
struct rd {
    MDB_txn *txn;
    struct kvt_index *ix;
    struct rd *prev;
    bool locked;
};
static _Thread_local struct rd *rd_top;

static bool rd_held(const struct kvt_index *ix)
{
    for (const struct rd *r = rd_top; r; r = r->prev)
        if (r->ix == ix)
            return true;
    return false;
}

/* broken is read under the lock: a remap that failed after an unlocked
 * check would leave this txn reading through a stale map. */
static int rd_begin(struct kvt_index *ix, struct rd *r)
{
    r->ix = ix;
    r->prev = rd_top;
    r->locked = !rd_held(ix);
    if (r->locked)
        pthread_rwlock_rdlock(&ix->remap);
    int rc = atomic_load(&ix->broken);
    if (rc == 0)
        rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &r->txn);
    if (rc == 0)
        rd_top = r;
    else if (r->locked)
        pthread_rwlock_unlock(&ix->remap);
    return rc;
}

static void rd_end(struct rd *r)
{
    mdb_txn_abort(r->txn);
    rd_top = r->prev;
    if (r->locked)
        pthread_rwlock_unlock(&r->ix->remap);
}

/* ------------------------------------------------------------- write txns */

typedef int (*ix_body)(struct kvt_index *ix, MDB_txn *txn, void *arg);

static int write_once(struct kvt_index *ix, ix_body body, void *arg)
{
    MDB_txn *txn;
    pthread_rwlock_rdlock(&ix->remap);
    int rc = atomic_load(&ix->broken);
    if (rc || (rc = mdb_txn_begin(ix->env, NULL, 0, &txn)) != 0)
        goto out_unlock;
    rc = body(ix, txn, arg);
    if (rc) {
        mdb_txn_abort(txn);
        goto out_unlock;
    }
    rc = mdb_txn_commit(txn); /* frees txn, committed or not */
out_unlock:
    pthread_rwlock_unlock(&ix->remap);
    return rc;
}

/* Runs body in one write transaction. A full map aborts it, doubles the map
 * and runs the whole body again: nothing of an aborted attempt remains. */
static int ix_write(struct kvt_index *ix, ix_body body, void *arg)
{
    int rc;
    while ((rc = write_once(ix, body, arg)) == MDB_MAP_FULL)
        if ((rc = ix_grow(ix)) != 0)
            return rc;
    return rc;
}

/* ------------------------------------------------------------- files */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) == 0 || errno == ENOENT ? 0 : errno;
}

/* Removes <dir>/index whatever it holds (file, directory tree) and makes it
 * again as an empty directory. */
static int ix_wipe_dir(const char *path)
{
    int rc = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == -1 && errno != ENOENT)
        rc = errno;
    if (rc > 0)
        return kvt_fail(-rc, "cannot remove %s: %s", path, strerror(rc));
    if (mkdir(path, 0755) != 0)
        return kvt_fail(-errno, "cannot create %s: %s", path, strerror(errno));
    return 0;
}

/* Errors a fresh index would hit as well: report them, never wipe for them. */
static bool is_resource_error(int rc)
{
    return rc == -ENOMEM || rc == -EMFILE || rc == -ENFILE || rc == -EACCES || rc == -EPERM ||
           rc == -EROFS || rc == -ENOSPC || rc == -EDQUOT || rc == -EIO || rc == -ENOENT;
}

/* ------------------------------------------------------------- open */

/* The engine's open creates, filters by fingerprint and wipes on damage;
 * kvtier inspect and fsck need the index as it is on disk, so the other two
 * modes only read it at open (damage is reported, never repaired). */
enum ix_mode {
    IX_ENGINE = 0,
    IX_REPAIR,      /* read-write: fsck --repair commits its deletions */
    IX_READONLY,    /* MDB_RDONLY: nothing written, not even the version record */
};

struct open_scan {
    enum ix_mode mode;
    uint64_t fingerprint;
    bool existed;
    uint64_t kept, dropped, max_gen;
    char file[PATH_MAX];    /* <dir>/index/data.mdb */
    char why[PATH_MAX + 200];
};

/* Records why the file is unusable, naming it; returns KVT_ECORRUPT. */
__attribute__((format(printf, 2, 3))) static int damage(struct open_scan *s, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(s->why, sizeof(s->why), "%s ", s->file);
    va_start(ap, fmt);
    vsnprintf(s->why + n, sizeof(s->why) - (size_t)n, fmt, ap);
    va_end(ap);
    return KVT_ECORRUPT;
}

static int check_version(struct kvt_index *ix, MDB_txn *txn, struct open_scan *s)
{
    static const char name[] = "version";
    const struct ix_version want = { IX_FORMAT, IX_KEY_LAYOUT, sizeof(struct kvt_ssd_entry),
                                     KVT_SSD_ENTRY_VERSION };
    MDB_val k = { sizeof(name) - 1, (void *)name }, v;
    struct ix_version have;
    MDB_stat st;
    int rc = mdb_get(txn, ix->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        /* No record but no pages either: a creation that did not finish. */
        if ((rc = mdb_stat(txn, ix->pages, &st)) != 0)
            return rc;
        if (st.ms_entries)
            return damage(s, "has %zu entries but no version record", st.ms_entries);
        if (s->mode != IX_ENGINE)
            return 0;   /* empty, and the engine writes the record at its next open */
        v.mv_size = sizeof(want);
        v.mv_data = (void *)&want;
        return mdb_put(txn, ix->meta, &k, &v, 0);
    }
    if (rc)
        return rc;
    if (v.mv_size != sizeof(have))
        return damage(s, "has a %zu-byte version record (expected %zu)", v.mv_size, sizeof(have));
    memcpy(&have, v.mv_data, sizeof(have));
    if (memcmp(&have, &want, sizeof(have)) != 0)
        return damage(s, "is format %u, key layout %u, %u-byte entries v%u (we use %u, %u, %u v%u)",
                      have.format, have.key_layout, have.entry_bytes, have.entry_version,
                      want.format, want.key_layout, want.entry_bytes, want.entry_version);
    return 0;
}

/* Checks every entry, deletes those of another fingerprint, finds the
 * largest generation: one pass, in the write txn that commits the deletes. */
static int scan_entries(struct kvt_index *ix, MDB_txn *txn, struct open_scan *s)
{
    MDB_cursor *cur;
    MDB_val k, v;
    kvt_key key;
    struct kvt_ssd_entry e;
    int rc = mdb_cursor_open(txn, ix->pages, &cur);
    if (rc)
        return rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (key_decode(&k, &key) != 0 || entry_decode(&v, &e) != 0) {
            rc = damage(s, "has a bad entry (%zu-byte key, %zu-byte value)", k.mv_size, v.mv_size);
            break;
        }
        if (s->mode == IX_ENGINE && e.fingerprint != s->fingerprint) {
            /* The cursor then stands on the next entry; MDB_NEXT knows. */
            if ((rc = mdb_cursor_del(cur, 0)) != 0)
                break;
            s->dropped++;
            continue;
        }
        s->kept++;
        if (e.generation > s->max_gen)
            s->max_gen = e.generation;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int open_body(struct kvt_index *ix, MDB_txn *txn, void *arg)
{
    struct open_scan *s = arg;
    int rc;
    unsigned create = s->mode == IX_ENGINE ? MDB_CREATE : 0;
    s->kept = s->dropped = s->max_gen = 0;   /* a retry after a remap starts over */
    if ((rc = mdb_dbi_open(txn, "meta", create, &ix->meta)) != 0 ||
        (rc = mdb_dbi_open(txn, "pages", create, &ix->pages)) != 0) {
        /* Only a non-engine open gets here without the databases: the
         * environment exists but its creation never committed them. */
        return rc == MDB_NOTFOUND ? damage(s, "holds no kvtier databases") : rc;
    }
    if ((rc = check_version(ix, txn, s)) != 0)
        return rc;
    return scan_entries(ix, txn, s);
}

/* The open scan of a non-engine mode, in a read transaction: nothing is
 * written at open. Committed, not aborted: an aborted transaction would
 * close the database handles it opened. */
static int read_body(struct kvt_index *ix, ix_body body, void *arg)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return rc;
    if ((rc = body(ix, txn, arg)) != 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    return mdb_txn_commit(txn);
}

/* data.mdb must be a regular, non-empty file before LMDB maps it: LMDB
 * opens a zero-length file as a new environment and fails on a directory
 * with EISDIR, which says little. */
static int precheck_file(const char *path, struct open_scan *s)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        return damage(s, "cannot exist: %s is not a directory", path);
    if (stat(s->file, &st) != 0)
        return errno == ENOENT ? 0 : damage(s, "cannot be examined: %s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return damage(s, "is not a regular file");
    if (st.st_size == 0)
        return damage(s, "is empty (0 bytes)");
    if (st.st_size < 2 * 4096) /* LMDB pages are at least 4 KiB; two meta pages come first */
        return damage(s, "is truncated (%lld bytes, less than its two meta pages)",
                      (long long)st.st_size);
    s->existed = true;
    return 0;
}

/* A file shorter than its last page would make LMDB read past the end of
 * the map (SIGBUS): check before any transaction touches a page. */
static int check_length(struct kvt_index *ix, struct open_scan *s)
{
    MDB_envinfo ei;
    MDB_stat st;
    struct stat fst;
    int fd;
    mdb_env_info(ix->env, &ei);
    mdb_env_stat(ix->env, &st);
    if (mdb_env_get_fd(ix->env, &fd) != 0 || fstat(fd, &fst) != 0)
        return -EIO;
    uint64_t need = ((uint64_t)ei.me_last_pgno + 1) * st.ms_psize;
    if ((uint64_t)fst.st_size < need)
        return damage(s, "is truncated (%lld bytes, its pages reach %llu)", (long long)fst.st_size,
                      (unsigned long long)need);
    return 0;
}

/* One attempt: KVT_ECORRUPT with s->why set means damaged; other errors
 * are the caller's to report. ix->env is left NULL on failure. */
static int try_open(struct kvt_index *ix, size_t map_bytes, struct open_scan *s)
{
    int rc;
    if ((rc = precheck_file(ix->path, s)) != 0)
        return rc;
    if (s->mode != IX_ENGINE && !s->existed)
        return -ENOENT;   /* never create what fsck or inspect was asked to read */
    if ((rc = mdb_env_create(&ix->env)) != 0)
        return ix_err(rc);
    mdb_env_set_maxdbs(ix->env, 2);
    mdb_env_set_mapsize(ix->env, map_bytes);
    rc = mdb_env_open(ix->env, ix->path,
                      MDB_NOTLS | MDB_NOSYNC | (s->mode == IX_READONLY ? MDB_RDONLY : 0), 0644);
    if (rc) {
        rc = is_resource_error(ix_err(rc)) ? ix_err(rc)
             : damage(s, "cannot be opened: %s", mdb_strerror(rc));
        goto out_close;
    }
    if (s->mode != IX_READONLY && ix->persist) {
        int dead = 0;
        mdb_reader_check(ix->env, &dead);   /* slots of crashed readers pin old pages */
    }
    if (s->existed && (rc = check_length(ix, s)) != 0)
        goto out_close;
    rc = s->mode == IX_ENGINE ? ix_write(ix, open_body, s) : read_body(ix, open_body, s);
    if (rc == 0)
        return 0;
    if (rc != KVT_ECORRUPT || !s->why[0])   /* else check_version or scan_entries said why */
        rc = is_resource_error(ix_err(rc)) ? ix_err(rc)
             : damage(s, "cannot be read: %s", ix_strerror(rc));
out_close:
    mdb_env_close(ix->env);
    ix->env = NULL;
    atomic_store(&ix->broken, 0);
    return rc;
}

/* persist=0: whatever an earlier run left is discarded unread. */
static int discard_old(struct kvt_index *ix, struct kvt_index_open_info *info)
{
    /* rmdir removes only an empty directory: a failure other than ENOENT
     * means an earlier run left something. */
    bool existed = rmdir(ix->path) != 0 && errno != ENOENT;
    int rc = ix_wipe_dir(ix->path);
    info->wiped = true;
    if (existed)
        snprintf(info->message, sizeof(info->message), "persist=0: previous index discarded");
    return rc;
}

static struct open_scan *scan_init(struct open_scan *s, const struct kvt_index *ix, uint64_t fp)
{
    memset(s, 0, sizeof(*s));
    s->fingerprint = fp;
    snprintf(s->file, sizeof(s->file), "%s/data.mdb", ix->path);
    return s;
}

/* Opens, and on damage wipes and opens a fresh index once. */
static int open_or_wipe(struct kvt_index *ix, size_t map_bytes, uint64_t fingerprint,
                        struct kvt_index_open_info *info)
{
    struct open_scan s;
    int rc = try_open(ix, map_bytes, scan_init(&s, ix, fingerprint));
    if (rc == KVT_ECORRUPT && ix->persist) {
        snprintf(info->message, sizeof(info->message),
                 "SSD index damaged: %.200s; wiped, starting empty", s.why);
        info->wiped = true;
        if ((rc = ix_wipe_dir(ix->path)) != 0)
            return rc;
        rc = try_open(ix, map_bytes, scan_init(&s, ix, fingerprint));
    }
    if (rc == KVT_ECORRUPT)
        return kvt_fail(rc, "SSD index: even a fresh index cannot be made: %s", s.why);
    if (rc)
        return kvt_fail(rc, "SSD index %s cannot be opened: %s", ix->path, kvt_strerror(rc));
    info->kept = s.kept;
    info->dropped_fingerprint = s.dropped;
    atomic_store(&ix->max_gen, s.max_gen);
    return 0;
}

static struct kvt_index *ix_alloc(const char *dir, bool persist)
{
    size_t len = strlen(dir) + sizeof("/index");
    struct kvt_index *ix = calloc(1, sizeof(*ix) + len);
    pthread_rwlockattr_t attr;
    if (!ix)
        return NULL;
    snprintf(ix->path, len, "%s/index", dir);
    ix->persist = persist;
    /* Writer preference: a remap must not starve behind a stream of gets. */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&ix->remap, &attr) != 0) {
        free(ix);
        ix = NULL;
    }
    pthread_rwlockattr_destroy(&attr);
    return ix;
}

int kvt_index_open(const char *dir, bool persist, uint64_t fingerprint, size_t map_bytes,
                   struct kvt_index **out, struct kvt_index_open_info *info)
{
    struct kvt_index_open_info dummy;
    struct kvt_index *ix;
    int rc = 0;

    if (!dir || !out)
        return kvt_fail(-EINVAL, "kvt_index_open: dir and out are required");
    *out = NULL;
    info = info ? info : &dummy;
    memset(info, 0, sizeof(*info));
    map_bytes = !map_bytes ? IX_MAP_DEFAULT : map_bytes < IX_MAP_MIN ? IX_MAP_MIN : map_bytes;
    if (strlen(dir) > PATH_MAX - 32)
        return kvt_fail(-ENAMETOOLONG, "SSD directory name is too long");
    if (!(ix = ix_alloc(dir, persist)))
        return kvt_fail(-ENOMEM, "SSD index: out of memory");

    if (!persist)
        rc = discard_old(ix, info);
    else if (mkdir(ix->path, 0755) != 0 && errno != EEXIST)
        rc = kvt_fail(-errno, "cannot create %s: %s", ix->path, strerror(errno));
    if (rc == 0)
        rc = open_or_wipe(ix, map_bytes, fingerprint, info);
    if (rc)
        goto out_free;
    *out = ix;
    return 0;

out_free:
    pthread_rwlock_destroy(&ix->remap);
    free(ix);
    return rc;
}

/* An existing index as it is on disk, for kvtier inspect and fsck. */
static int open_as_is(const char *dir, enum ix_mode mode, struct kvt_index **out)
{
    struct open_scan s;
    struct kvt_index *ix;
    int rc;

    if (!dir || !out)
        return kvt_fail(-EINVAL, "kvt_index_open_readonly/repair: dir and out are required");
    *out = NULL;
    if (strlen(dir) > PATH_MAX - 32)
        return kvt_fail(-ENAMETOOLONG, "SSD directory name is too long");
    /* persist: a repair's close syncs, as the engine's does */
    if (!(ix = ix_alloc(dir, mode == IX_REPAIR)))
        return kvt_fail(-ENOMEM, "SSD index: out of memory");
    scan_init(&s, ix, 0)->mode = mode;
    rc = try_open(ix, IX_MAP_DEFAULT, &s);
    if (rc == KVT_ECORRUPT) {
        rc = kvt_fail(rc, "SSD index damaged: %s", s.why);
        goto out_free;
    }
    if (rc) {
        rc = kvt_fail(rc, "SSD index %s cannot be opened: %s", ix->path, kvt_strerror(rc));
        goto out_free;
    }
    atomic_store(&ix->max_gen, s.max_gen);
    *out = ix;
    return 0;

out_free:
    pthread_rwlock_destroy(&ix->remap);
    free(ix);
    return rc;
}

int kvt_index_open_readonly(const char *dir, struct kvt_index **out)
{
    return open_as_is(dir, IX_READONLY, out);
}

int kvt_index_open_repair(const char *dir, struct kvt_index **out)
{
    return open_as_is(dir, IX_REPAIR, out);
}

void kvt_index_close(struct kvt_index *ix)
{
    if (!ix)
        return;
    /* A clean close keeps what unsynced batches committed. */
    if (ix->persist && !atomic_load(&ix->broken))
        mdb_env_sync(ix->env, 1);
    mdb_env_close(ix->env);
    pthread_rwlock_destroy(&ix->remap);
    free(ix);
}

/* ------------------------------------------------------------- commit */

struct batch {
    const kvt_key *put_keys;
    const struct kvt_ssd_entry *put_vals;
    size_t n;
    const kvt_key *del_keys;
    size_t m;
};

static int commit_body(struct kvt_index *ix, MDB_txn *txn, void *arg)
{
    const struct batch *b = arg;
    struct ix_key kb;
    MDB_val k, v;
    int rc;
    for (size_t i = 0; i < b->n; i++) {
        k = key_encode(&b->put_keys[i], &kb);
        v = (MDB_val){ sizeof(b->put_vals[i]), (void *)&b->put_vals[i] };
        if ((rc = mdb_put(txn, ix->pages, &k, &v, 0)) != 0)
            return rc;
    }
    for (size_t j = 0; j < b->m; j++) {
        k = key_encode(&b->del_keys[j], &kb);
        rc = mdb_del(txn, ix->pages, &k, NULL);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return rc;
    }
    return 0;
}

static int check_batch(const struct batch *b)
{
    if ((b->n && (!b->put_keys || !b->put_vals)) || (b->m && !b->del_keys))
        return kvt_fail(-EINVAL, "kvt_index_commit: NULL array with a nonzero count");
    for (size_t i = 0; i < b->n; i++)
        if (b->put_vals[i].version != KVT_SSD_ENTRY_VERSION)
            return kvt_fail(-EINVAL, "kvt_index_commit: entry %zu has version %u, expected %u", i,
                            b->put_vals[i].version, KVT_SSD_ENTRY_VERSION);
    return 0;
}

int kvt_index_commit(struct kvt_index *ix, const kvt_key *put_keys,
                     const struct kvt_ssd_entry *put_vals, size_t n, const kvt_key *del_keys,
                     size_t m, bool sync)
{
    struct batch b = { put_keys, put_vals, n, del_keys, m };
    int rc;
    if (!ix)
        return kvt_fail(-EINVAL, "kvt_index_commit: index is NULL");
    if ((rc = check_batch(&b)) != 0)
        return rc;
    /* Growing the map inside foreach would wait for this thread's own txn. */
    if (rd_held(ix))
        return kvt_fail(-EDEADLK, "kvt_index_commit called from a kvt_index_foreach callback");
    if (n == 0 && m == 0)
        return sync ? kvt_index_sync(ix) : 0;

    if (sync)
        ix_set_nosync(ix, 0);
    rc = ix_write(ix, commit_body, &b);
    if (sync)
        ix_set_nosync(ix, 1);
    if (rc)
        return kvt_fail(ix_err(rc), "SSD index: commit of %zu puts and %zu deletes failed: %s", n,
                        m, ix_strerror(rc));
    for (size_t i = 0; i < n; i++)
        max_gen_raise(ix, put_vals[i].generation);
    return 0;
}

int kvt_index_sync(struct kvt_index *ix)
{
    if (!ix)
        return kvt_fail(-EINVAL, "kvt_index_sync: index is NULL");
    int rc = atomic_load(&ix->broken);
    if (!rc)
        rc = mdb_env_sync(ix->env, 1);
    return rc ? kvt_fail(ix_err(rc), "SSD index: sync failed: %s", ix_strerror(rc)) : 0;
}

/* ------------------------------------------------------------- reads */

int kvt_index_get(struct kvt_index *ix, const kvt_key *k, struct kvt_ssd_entry *out)
{
    struct ix_key kb;
    struct kvt_ssd_entry e;
    struct rd r;
    MDB_val key, v;
    if (!ix || !k || !out)
        return kvt_fail(-EINVAL, "kvt_index_get: NULL argument");
    key = key_encode(k, &kb);
    int rc = rd_begin(ix, &r);
    if (rc == 0) {
        rc = mdb_get(r.txn, ix->pages, &key, &v);
        if (rc == 0 && entry_decode(&v, &e) != 0)
            rc = KVT_ECORRUPT;
        rd_end(&r);
    }
    if (rc == 0)
        *out = e;
    if (rc == 0 || rc == MDB_NOTFOUND)
        return ix_err(rc);   /* a miss is not a failure: no message */
    return kvt_fail(ix_err(rc), "SSD index: get %llu:%u:%u: %s", (unsigned long long)k->id,
                    k->layer, k->index,
                    rc == KVT_ECORRUPT ? "stored entry of the wrong size or version"
                                       : ix_strerror(rc));
}

/* One read txn for the whole walk: fn sees one consistent snapshot. fn may
 * call kvt_index_get/count (see struct rd), not kvt_index_commit. */
int kvt_index_foreach(struct kvt_index *ix, kvt_index_fn fn, void *ctx)
{
    MDB_cursor *cur;
    MDB_val k, v;
    kvt_key key;
    struct kvt_ssd_entry e;
    struct rd r;
    int stop = 0;
    if (!ix || !fn)
        return kvt_fail(-EINVAL, "kvt_index_foreach: NULL argument");
    int rc = rd_begin(ix, &r);
    if (rc)
        return kvt_fail(ix_err(rc), "SSD index: read txn: %s", ix_strerror(rc));
    if ((rc = mdb_cursor_open(r.txn, ix->pages, &cur)) != 0)
        goto out_end;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (key_decode(&k, &key) != 0 || entry_decode(&v, &e) != 0)
            stop = kvt_fail(KVT_ECORRUPT, "SSD index: damaged entry (%zu-byte key, %zu-byte value)",
                            k.mv_size, v.mv_size);
        else
            stop = fn(ctx, &key, &e);
        if (stop)
            break;
    }
    mdb_cursor_close(cur);
out_end:
    rd_end(&r);
    if (stop)
        return stop;   /* fn's own value, or KVT_ECORRUPT */
    if (rc != 0 && rc != MDB_NOTFOUND)
        return kvt_fail(ix_err(rc), "SSD index: foreach: %s", ix_strerror(rc));
    return 0;
}

uint64_t kvt_index_count(struct kvt_index *ix)
{
    MDB_stat st = { 0 };
    struct rd r;
    if (!ix || rd_begin(ix, &r) != 0)
        return 0;
    if (mdb_stat(r.txn, ix->pages, &st) != 0)
        st.ms_entries = 0;
    rd_end(&r);
    return st.ms_entries;
}

uint64_t kvt_index_max_generation(struct kvt_index *ix)
{
    return ix ? atomic_load(&ix->max_gen) : 0;
}
