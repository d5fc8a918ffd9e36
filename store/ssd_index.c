/*
 * ssd_index.c — the SSD tier's LMDB index: kvt_key -> struct kvt_ssd_entry;
 * its transactions (commit, get, foreach, count) and the map they share.
 * Opening, checking, upgrading and wiping the index: ssd_index_open.c.
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
 * Durability: between synced commits the environment runs lazy
 * (ix_lazy_flag): with persist MDB_NOMETASYNC, without MDB_NOSYNC. A
 * sync=true batch turns the lazy flag off for its commit rather than calling
 * mdb_env_sync() after it: LMDB then syncs the data pages before it writes
 * the meta page (O_DSYNC). Syncing after a lazy commit would let the new
 * meta page reach the disk before its pages, and a failed sync would leave
 * the batch applied while reporting an error.
 *
 * Why NOMETASYNC with persist, not NOSYNC: LMDB documents that with NOSYNC
 * "a system crash can corrupt the database" unless the file system keeps
 * write order; and a NOSYNC commit may reuse pages freed two commits
 * earlier, which can belong to the last tree that was synced, so a power
 * cut after a few unsynced deletions could damage the synced state too (the
 * open then wipes the index: every page lost). NOMETASYNC syncs each
 * commit's pages before its meta page is written and leaves only that meta
 * page unsynced: LMDB keeps "database integrity" and a power cut undoes at
 * most the last commit. That costs one fdatasync per unsynced batch (the
 * mover's deletions); persist=0 needs none of it (the directory is wiped at
 * the next open). The power-loss test (tests/test_powerloss.c) rolls the
 * file back to its image at the last sync, or keeps every commit, and
 * checks both.
 *
 * Remapping: mdb_env_set_mapsize() unmaps and maps the file again, safe only
 * while no transaction of this process is open. Every read transaction holds
 * ix->remap shared; writing, growing and flipping MDB_NOSYNC (a plain int in
 * the MDB_env that every mdb_txn_begin reads) take it exclusive.
 *
 * Entries: version 2 binds a page to its key. The CRC32C stored in an entry
 * is of a 32-byte header (key, fingerprint, generation, kvt_ssd_bind)
 * followed by the stored bytes, so an entry moved to another key, or a key
 * damaged in place, fails the check when its page is read: a miss, never
 * another key's bytes.
 */
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "io/codec.h"
#include "io/io.h"
#include "store/ssd_index_lmdb.h"

_Static_assert(sizeof(struct kvt_ssd_entry) == 48, "kvt_ssd_entry is stored verbatim: 48 bytes");

/* ------------------------------------------------------------- entries */

uint32_t kvt_ssd_bind(const kvt_key *k, uint64_t fingerprint, uint64_t generation)
{
    uint8_t h[32];
    uint64_t id = htole64(k->id), fp = htole64(fingerprint), gen = htole64(generation);
    uint32_t layer = htole32(k->layer), index = htole32(k->index);
    memcpy(h, &id, 8);
    memcpy(h + 8, &layer, 4);
    memcpy(h + 12, &index, 4);
    memcpy(h + 16, &fp, 8);
    memcpy(h + 24, &gen, 8);
    return kvt_crc32c(0, h, sizeof(h));
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
    size_t to = ix_map_cap(ei.me_mapsize * 2);
    if (to <= ei.me_mapsize)
        return MDB_MAP_FULL;
    return ix_remap(ix, to);
}

static void ix_set_lazy(struct kvt_index *ix, int on)
{
    pthread_rwlock_wrlock(&ix->remap);
    mdb_env_set_flags(ix->env, ix_lazy_flag(ix->persist), on);
    pthread_rwlock_unlock(&ix->remap);
}

void kvt_index_set_syncer(struct kvt_index *ix, const struct kvt_syncer *s)
{
    int fd;
    ix->sync = *s;
    if (s->ops && mdb_env_get_fd(ix->env, &fd) == 0)
        (void)s->ops->index_track(s->arg, fd);
}

/* The power-loss model's view of a commit (tests): refused once the power
 * is gone; a commit that syncs counts as a sync. A lazy commit with persist
 * syncs its pages, and with them the meta page of the commit before: that
 * state is durable from here on. */
static int ix_plan_begin(struct kvt_index *ix, bool sync)
{
    int rc = ix_model_begin(ix, sync || ix->persist);
    if (rc)
        return kvt_fail(rc, "SSD index: the power is gone (a power-loss test)");
    if (!sync && ix->persist)
        ix_model_durable(ix);
    return 0;
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

static int write_once(struct kvt_index *ix, ix_body body, void *arg)
{
    MDB_txn *txn;
    pthread_rwlock_wrlock(&ix->remap);  /* MDB_NOLOCK: no reader may be open */
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

int kvt_ix_write(struct kvt_index *ix, ix_body body, void *arg)
{
    int rc;
    while ((rc = write_once(ix, body, arg)) == MDB_MAP_FULL)
        if ((rc = ix_grow(ix)) != 0)
            return rc;
    return rc;
}

/* ------------------------------------------------------------- commit */

struct batch {
    const kvt_key *put_keys;
    const struct kvt_ssd_entry *put_vals;
    size_t n;
    const kvt_key *del_keys;
    size_t m;
    const struct kvt_index_where *del_at;   /* NULL: delete whatever the key names */
};

/* Whether the entry under k still names where: a deletion for a dropped
 * page must not take the entry a newer write of the same key put there
 * meanwhile (a drop while its write was in flight, then a put: the new
 * version's entry went, and the engine took the page as on SSD). */
static int names(MDB_txn *txn, MDB_dbi dbi, MDB_val *k, const struct kvt_index_where *where)
{
    MDB_val v;
    int rc = mdb_get(txn, dbi, k, &v);
    if (rc)
        return rc;
    struct kvt_ssd_entry e;
    if (v.mv_size != sizeof(e))
        return 0; /* not an entry this version reads: it goes */
    memcpy(&e, v.mv_data, sizeof(e));
    return e.segment == where->segment && e.offset == where->offset ? 0 : MDB_NOTFOUND;
}

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
        rc = b->del_at ? names(txn, ix->pages, &k, &b->del_at[j]) : 0;
        if (rc == 0)
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

static int index_commit(struct kvt_index *ix, const struct batch *bp, bool sync);

int kvt_index_commit(struct kvt_index *ix, const kvt_key *put_keys,
                     const struct kvt_ssd_entry *put_vals, size_t n, const kvt_key *del_keys,
                     size_t m, bool sync)
{
    struct batch b = { put_keys, put_vals, n, del_keys, m, NULL };
    return index_commit(ix, &b, sync);
}

int kvt_index_delete_where(struct kvt_index *ix, const kvt_key *keys,
                           const struct kvt_index_where *where, size_t m)
{
    struct batch b = { NULL, NULL, 0, keys, m, where };
    if (m && !where)
        return kvt_fail(-EINVAL, "kvt_index_delete_where: NULL array with a nonzero count");
    return index_commit(ix, &b, false);
}

static int index_commit(struct kvt_index *ix, const struct batch *bp, bool sync)
{
    struct batch b = *bp;
    size_t n = b.n, m = b.m;
    const struct kvt_ssd_entry *put_vals = b.put_vals;
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
    /* A deletion frees its slot for the next write (ssd_store.h): with
     * persist that write must never land while a power cut could still
     * bring back the entry naming the slot, so the deleting commit is
     * durable before it returns. */
    sync = sync || (ix->persist && m);
    if ((rc = ix_plan_begin(ix, sync)) != 0)
        return rc;

    if (sync)
        ix_set_lazy(ix, 0);
    rc = kvt_ix_write(ix, commit_body, &b);
    if (sync)
        ix_set_lazy(ix, 1);
    if (rc)
        return kvt_fail(ix_err(rc), "SSD index: commit of %zu puts and %zu deletes failed: %s", n,
                        m, ix_strerror(rc));
    if (sync)
        ix_model_durable(ix);
    for (size_t i = 0; i < n; i++)
        max_gen_raise(ix, put_vals[i].generation);
    return 0;
}

int kvt_index_sync(struct kvt_index *ix)
{
    if (!ix)
        return kvt_fail(-EINVAL, "kvt_index_sync: index is NULL");
    int rc = atomic_load(&ix->broken);
    if (!rc && (rc = ix_model_begin(ix, true)) != 0)
        return kvt_fail(rc, "SSD index: the power is gone (a power-loss test)");
    if (!rc)
        rc = mdb_env_sync(ix->env, 1);
    if (!rc)
        ix_model_durable(ix);
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

/* ------------------------------------------------------------- bad slots */

#define BAD_PREFIX "bad"
struct bad_key {
    char prefix[3];
    uint8_t segment[4], offset[8];  /* big-endian: location order */
};
_Static_assert(sizeof(struct bad_key) == 15, "bad-slot keys are 15 bytes");

static MDB_val bad_encode(uint32_t segment, uint64_t offset, struct bad_key *kb)
{
    uint32_t s = htobe32(segment);
    uint64_t o = htobe64(offset);
    memcpy(kb->prefix, BAD_PREFIX, 3);
    memcpy(kb->segment, &s, 4);
    memcpy(kb->offset, &o, 8);
    return (MDB_val){ sizeof(*kb), kb };
}

struct bad_batch {
    const uint32_t *segment;
    const uint64_t *offset;
    size_t n;
};

static int bad_body(struct kvt_index *ix, MDB_txn *txn, void *arg)
{
    const struct bad_batch *b = arg;
    static const uint32_t none = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct bad_key kb;
        MDB_val k = bad_encode(b->segment[i], b->offset[i], &kb);
        MDB_val v = { sizeof(none), (void *)&none };
        int rc = mdb_put(txn, ix->meta, &k, &v, 0);
        if (rc)
            return rc;
    }
    return 0;
}

int kvt_index_bad_put(struct kvt_index *ix, const uint32_t *segment, const uint64_t *offset,
                      size_t n)
{
    struct bad_batch b = { segment, offset, n };
    int rc;
    if (!ix || (n && (!segment || !offset)))
        return kvt_fail(-EINVAL, "kvt_index_bad_put: NULL argument");
    if (!n)
        return 0;
    if (rd_held(ix))
        return kvt_fail(-EDEADLK, "kvt_index_bad_put called from a kvt_index_foreach callback");
    if ((rc = ix_plan_begin(ix, true)) != 0)
        return rc;
    ix_set_lazy(ix, 0);
    rc = kvt_ix_write(ix, bad_body, &b);
    ix_set_lazy(ix, 1);
    if (rc)
        return kvt_fail(ix_err(rc), "SSD index: recording %zu bad slots failed: %s", n,
                        ix_strerror(rc));
    ix_model_durable(ix);
    return 0;
}

int kvt_index_bad_foreach(struct kvt_index *ix, kvt_index_bad_fn fn, void *ctx)
{
    MDB_cursor *cur;
    struct rd r;
    int stop = 0;
    if (!ix || !fn)
        return kvt_fail(-EINVAL, "kvt_index_bad_foreach: NULL argument");
    int rc = rd_begin(ix, &r);
    if (rc)
        return kvt_fail(ix_err(rc), "SSD index: read txn: %s", ix_strerror(rc));
    if ((rc = mdb_cursor_open(r.txn, ix->meta, &cur)) != 0)
        goto out_end;
    MDB_val k = { 3, (void *)BAD_PREFIX }, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct bad_key kb;
        if (k.mv_size < 3 || memcmp(k.mv_data, BAD_PREFIX, 3) != 0)
            break;  /* past the bad records */
        if (k.mv_size != sizeof(kb))
            continue;   /* not ours: never a reason to fail the open */
        memcpy(&kb, k.mv_data, sizeof(kb));
        uint32_t seg;
        uint64_t off;
        memcpy(&seg, kb.segment, 4);
        memcpy(&off, kb.offset, 8);
        if ((stop = fn(ctx, be32toh(seg), be64toh(off))) != 0)
            break;
    }
    mdb_cursor_close(cur);
out_end:
    rd_end(&r);
    if (stop)
        return stop;
    if (rc != 0 && rc != MDB_NOTFOUND)
        return kvt_fail(ix_err(rc), "SSD index: bad slots: %s", ix_strerror(rc));
    return 0;
}
