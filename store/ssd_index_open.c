/*
 * ssd_index_open.c — opening the SSD index (ssd_index.c has its
 * transactions): the engine's open (create, drop other fingerprints, upgrade,
 * wipe on damage), the as-is opens of kvtier inspect and fsck, and close.
 *
 * Files: the environment runs with MDB_NOLOCK, so LMDB never opens or
 * creates lock.mdb (a link there would otherwise be followed and written).
 * One process at a time is what <dir>/LOCK's flock already guarantees, and
 * inside the process ix->remap does LMDB's reader-table job: a write
 * transaction holds it exclusive, so no read transaction can be looking at
 * pages the writer reuses. data.mdb is created (or checked) by us through
 * the index directory's descriptor, without following a link, and LMDB is
 * given that directory as /proc/self/fd/N, so it opens the file we checked
 * (the inode is compared after the open). kvtier's engine reads the index
 * only at open, so the exclusive writer costs nothing at run time.
 *
 * Upgrade: a version 1 index (CRC of the bytes alone) is upgraded at the
 * engine's open by CRC composition, without reading a page.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/codec.h"
#include "io/io.h"
#include "store/spill_dir.h"
#include "store/ssd_index_lmdb.h"

/* ------------------------------------------------------------- files */

/* Removes the index's own files (data.mdb, lock.mdb) and nothing else:
 * anything else in <dir>/index, or a link in place of a file, fails it. */
static int ix_wipe_dir(struct kvt_index *ix)
{
    return kvt_spill_wipe_index(ix->dfd, ix->dir);
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
    uint64_t kept, dropped, max_gen, upgraded;
    bool v1;                /* a version 1 index, upgraded as it is scanned */
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

/* Version 1 entries hold the CRC of the stored bytes alone; version 2 binds
 * it to (key, fingerprint, generation). CRC(header || bytes) is
 * CRC(header) carried over the bytes' length combined with CRC(bytes), so
 * the upgrade rewrites an entry in place without reading its page. The
 * binding then vouches for the key each entry had at upgrade time. */
static int upgrade_entry(MDB_cursor *cur, MDB_val *k, const kvt_key *key,
                         struct kvt_ssd_entry *e)
{
    e->version = KVT_SSD_ENTRY_VERSION;
    e->crc = kvt_crc32c_combine(kvt_ssd_bind(key, e->fingerprint, e->generation), e->crc,
                                e->stored_len);
    MDB_val nv = { sizeof(*e), e };
    return mdb_cursor_put(cur, k, &nv, MDB_CURRENT);
}

static int check_version(struct kvt_index *ix, MDB_txn *txn, struct open_scan *s)
{
    static const char name[] = "version";
    const struct ix_version want = { IX_FORMAT, IX_KEY_LAYOUT, sizeof(struct kvt_ssd_entry),
                                     KVT_SSD_ENTRY_VERSION };
    const struct ix_version v1 = { IX_FORMAT, IX_KEY_LAYOUT, sizeof(struct kvt_ssd_entry), 1 };
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
    if (!memcmp(&have, &v1, sizeof(have)) && s->mode != IX_ENGINE)
        return damage(s, "holds version 1 entries (written by an older kvtier, checksums not "
                         "bound to keys): open it once with the engine, which upgrades it");
    if (!memcmp(&have, &v1, sizeof(have))) {
        s->v1 = true;   /* scan_entries upgrades each entry it keeps */
        v.mv_size = sizeof(want);
        v.mv_data = (void *)&want;
        return mdb_put(txn, ix->meta, &k, &v, 0);
    }
    if (memcmp(&have, &want, sizeof(have)) != 0)
        return damage(s, "is format %u, key layout %u, %u-byte entries v%u (we use %u, %u, %u v%u)",
                      have.format, have.key_layout, have.entry_bytes, have.entry_version,
                      want.format, want.key_layout, want.entry_bytes, want.entry_version);
    return 0;
}

/* Checks every entry, deletes those of another fingerprint, upgrades the
 * kept ones of a version 1 index, finds the largest generation: one pass,
 * in the write txn that commits the deletes and the upgrade. */
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
        unsigned version = s->v1 ? 1 : KVT_SSD_ENTRY_VERSION;
        if (key_decode(&k, &key) != 0 || entry_decode_v(&v, &e, version) != 0) {
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
        if (s->v1) {
            if ((rc = upgrade_entry(cur, &k, &key, &e)) != 0)
                break;
            s->upgraded++;
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
    s->kept = s->dropped = s->max_gen = s->upgraded = 0; /* a retry after a remap starts over */
    s->v1 = false;
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

/* data.mdb must be a regular, non-empty file with one link before LMDB
 * maps it: LMDB opens a zero-length file as a new environment, and a link
 * would take its writes somewhere else. A link or a non-file is not damage
 * to wipe but something kvtier did not make: an error that names it. */
static int precheck_file(struct kvt_index *ix, struct open_scan *s)
{
    off_t size = 0;
    int r = kvt_spill_check_file(ix->ixfd, ix->path, KVT_SPILL_INDEX_DATA, &size);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    if (size == 0)
        return damage(s, "is empty (0 bytes)");
    if (size < 2 * 4096) /* LMDB pages are at least 4 KiB; two meta pages come first */
        return damage(s, "is truncated (%lld bytes, less than its two meta pages)",
                      (long long)size);
    s->existed = true;
    return 0;
}

/* The engine makes data.mdb itself (no link followed) before LMDB opens it,
 * and keeps its inode to compare with what LMDB opened. */
static int make_data_file(struct kvt_index *ix, struct stat *st)
{
    bool created = false;
    int fd = kvt_spill_openat(ix->ixfd, ix->path, KVT_SPILL_INDEX_DATA, O_RDWR | O_CREAT, 0600,
                              &created);
    if (fd < 0)
        return fd;
    int r = fstat(fd, st) == 0 ? 0 : -errno;
    close(fd);
    /* A new file's name is durable only once its directory is synced (and
     * index/ itself may be new): else a power cut can take the whole index
     * away after commits that synced only the file. */
    if (r == 0 && created && ix->persist && (fsync(ix->ixfd) != 0 || fsync(ix->dfd) != 0))
        r = kvt_fail(-errno, "cannot sync %s: %s", ix->path, strerror(errno));
    return r;
}

/* What LMDB is given as the directory: the index directory's descriptor
 * through /proc, so a path swapped after our checks is never used. Without
 * /proc, its path, whole: a path cut to fit would name another directory,
 * where LMDB would make a data.mdb. */
static int env_path(const struct kvt_index *ix, char *buf, size_t len)
{
    snprintf(buf, len, "/proc/self/fd/%d", ix->ixfd);
    if (access(buf, F_OK) == 0)
        return 0;
    if ((size_t)snprintf(buf, len, "%s", ix->path) >= len)
        return kvt_fail(-ENAMETOOLONG, "%s: path too long", ix->path);
    return 0;
}

static int same_file(struct kvt_index *ix, const struct stat *want, struct open_scan *s)
{
    struct stat st;
    int fd;
    if (mdb_env_get_fd(ix->env, &fd) != 0 || fstat(fd, &st) != 0)
        return -EIO;
    if (st.st_dev != want->st_dev || st.st_ino != want->st_ino)
        return kvt_fail(-EBUSY, "%s changed while it was opened (replaced by another file)",
                        s->file);
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
    struct stat want;
    char where[PATH_MAX];
    int rc;
    if ((rc = precheck_file(ix, s)) != 0)
        return rc;
    if (s->mode != IX_ENGINE && !s->existed)
        return -ENOENT;   /* never create what fsck or inspect was asked to read */
    if (s->mode == IX_ENGINE && (rc = make_data_file(ix, &want)) != 0)
        return rc;
    if (s->mode != IX_ENGINE && fstatat(ix->ixfd, KVT_SPILL_INDEX_DATA, &want,
                                        AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if ((rc = env_path(ix, where, sizeof(where))) != 0)
        return rc;
    if ((rc = mdb_env_create(&ix->env)) != 0)
        return ix_err(rc);
    mdb_env_set_maxdbs(ix->env, 2);
    mdb_env_set_mapsize(ix->env, ix_map_cap(map_bytes));
    rc = mdb_env_open(ix->env, where,
                      MDB_NOLOCK | MDB_NOTLS | ix_lazy_flag(ix->persist) |
                      (s->mode == IX_READONLY ? MDB_RDONLY : 0), 0600);
    if (rc) {
        rc = is_resource_error(ix_err(rc)) ? ix_err(rc)
             : damage(s, "cannot be opened: %s", mdb_strerror(rc));
        goto out_close;
    }
    if ((rc = same_file(ix, &want, s)) != 0)
        goto out_close;
    if (s->existed && (rc = check_length(ix, s)) != 0)
        goto out_close;
    rc = s->mode == IX_ENGINE ? kvt_ix_write(ix, open_body, s) : read_body(ix, open_body, s);
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
    bool existed = faccessat(ix->ixfd, KVT_SPILL_INDEX_DATA, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
    int rc = ix_wipe_dir(ix);
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
        if ((rc = ix_wipe_dir(ix)) != 0)
            return rc;
        rc = try_open(ix, map_bytes, scan_init(&s, ix, fingerprint));
    }
    if (rc == KVT_ECORRUPT)
        return kvt_fail(rc, "SSD index: even a fresh index cannot be made: %s", s.why);
    if (rc && kvt_last_error()[0])
        return rc;  /* the call that failed named the file and the reason */
    if (rc)
        return kvt_fail(rc, "SSD index %s cannot be opened: %s", ix->path, kvt_strerror(rc));
    info->kept = s.kept;
    info->dropped_fingerprint = s.dropped;
    info->upgraded = s.upgraded;
    atomic_store(&ix->max_gen, s.max_gen);
    return 0;
}

/* The spill directory (the caller's path, followed) and its index
 * directory (never through a link); create makes index/ when missing. */
static int ix_dirs(struct kvt_index *ix, bool create)
{
    int rc = kvt_spill_opendir(ix->dir, false, &ix->dfd);
    if (rc < 0)
        return rc;
    rc = kvt_spill_subdir(ix->dfd, ix->dir, KVT_SPILL_INDEX, create);
    if (rc < 0)
        return rc;
    ix->ixfd = rc;
    return 0;
}

static void ix_free(struct kvt_index *ix)
{
    if (ix->ixfd >= 0)
        close(ix->ixfd);
    if (ix->dfd >= 0)
        close(ix->dfd);
    pthread_rwlock_destroy(&ix->remap);
    free(ix->dir);
    free(ix);
}

static struct kvt_index *ix_alloc(const char *dir, bool persist)
{
    size_t len = strlen(dir) + sizeof("/index");
    struct kvt_index *ix = calloc(1, sizeof(*ix) + len);
    pthread_rwlockattr_t attr;
    if (!ix)
        return NULL;
    if (!(ix->dir = strdup(dir))) {
        free(ix);
        return NULL;
    }
    snprintf(ix->path, len, "%s/index", dir);
    ix->persist = persist;
    ix->dfd = ix->ixfd = -1;
    /* Writer preference: a remap must not starve behind a stream of gets. */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&ix->remap, &attr) != 0) {
        free(ix->dir);
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
    if ((rc = ix_dirs(ix, true)) == 0 && !persist)
        rc = discard_old(ix, info);
    if (rc == 0)
        rc = open_or_wipe(ix, map_bytes, fingerprint, info);
    if (rc)
        goto out_free;
    *out = ix;
    return 0;

out_free:
    ix_free(ix);
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
    rc = ix_dirs(ix, false);
    if (rc == -ENOENT)
        kvt_clear_error();  /* no index directory: nothing indexed here yet */
    else if (rc == 0)
        rc = try_open(ix, IX_MAP_DEFAULT, &s);
    if (rc == KVT_ECORRUPT) {
        rc = kvt_fail(rc, "SSD index damaged: %s", s.why);
        goto out_free;
    }
    if (rc == -ENOENT)
        goto out_free;
    if (rc) {
        if (!kvt_last_error()[0])
            kvt_fail(rc, "SSD index %s cannot be opened: %s", ix->path, kvt_strerror(rc));
        goto out_free;
    }
    atomic_store(&ix->max_gen, s.max_gen);
    *out = ix;
    return 0;

out_free:
    ix_free(ix);
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
    /* A clean close keeps what unsynced batches committed (a power-loss
     * test's dead machine syncs nothing). */
    if (ix->persist && !atomic_load(&ix->broken) &&
        ix_model_begin(ix, true) == 0) {
        mdb_env_sync(ix->env, 1);
        ix_model_durable(ix);
    }
    mdb_env_close(ix->env);
    ix_free(ix);
}
