/*
 * ssd_store_ops.c — the SSD store behind the store interface (store/store.h):
 * its table, the slots the engine's pipeline writes, and the batched calls.
 *
 * The files, segments and free map are ssd_store.c's; the index is
 * ssd_index.c's. This file turns them into one store: a slot's record
 * becomes an index entry (its segment and offset from the slot), a record
 * the index kept becomes a slot again at open. Nothing above store/ calls
 * those files: the tiers hold a struct kvt_store and its ops.
 *
 * The batched calls read and write with pread/pwrite on the store's own
 * O_DIRECT descriptors, through one aligned page of their own, and commit
 * each put call as one index transaction (synced when durable): one caller
 * at a time (store.h), and never mixed with an engine's slot calls on the
 * same handle. A page is written raw; get decodes what the engine may have
 * stored losslessly (zstd); a lossily coded page needs the engine's layout
 * and reads as a miss here (KVT_ENOTSUP).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "io/codec.h"
#include "io/io.h"
#include "store/ssd_store.h"
#include "store/store.h"

struct ssd_store {
    struct kvt_store base;      /* first: the tiers hold a struct kvt_store */
    struct kvt_ssd *ssd;
    size_t page_bytes;
    uint64_t fingerprint;
    uint64_t generation;        /* the newest write number the store knows */
    kvt_store_found_fn found;   /* the opener's, during the open only */
    void *found_ctx;
    /* Grown, never shrunk: the mover's commits allocate nothing in steady state. */
    kvt_key *keys;
    struct kvt_ssd_entry *vals;
    struct kvt_index_where *where;
    size_t cap;
    void *page;                 /* the batched calls' aligned page */
    struct kvt_codec *codec;    /* the batched get's decoder, made on first need */
    struct kvt_store_stats st;  /* the batched calls' */
};

static struct ssd_store *ss_of(struct kvt_store *s) { return (struct ssd_store *)s; }
static const struct ssd_store *ss_cof(const struct kvt_store *s)
{
    return (const struct ssd_store *)s;
}

static int ss_reserve(struct ssd_store *ss, size_t n)
{
    if (n <= ss->cap)
        return 0;
    size_t cap = ss->cap ? ss->cap : 32;
    while (cap < n)
        cap *= 2;
    kvt_key *k = realloc(ss->keys, cap * sizeof(*k));
    if (k)
        ss->keys = k;
    struct kvt_ssd_entry *v = realloc(ss->vals, cap * sizeof(*v));
    if (v)
        ss->vals = v;
    struct kvt_index_where *w = realloc(ss->where, cap * sizeof(*w));
    if (w)
        ss->where = w;
    if (!k || !v || !w)
        return -ENOMEM;
    ss->cap = cap;
    return 0;
}

/* ------------------------------------------------------------- open/close */

static int ss_found(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v, uint32_t slot)
{
    struct ssd_store *ss = ctx;
    if (v->generation > ss->generation)
        ss->generation = v->generation;
    if (!ss->found)
        return 0;
    struct kvt_store_rec r = { .key = *k, .slot = slot, .stored_len = v->stored_len,
                               .crc = v->crc, .codec = v->codec, .generation = v->generation };
    return ss->found(ss->found_ctx, &r);
}

static int ss_open(const struct kvt_store_params *p, struct kvt_store **out, char *err,
                   size_t errlen)
{
    if (!p->dir || !p->page_bytes || p->page_bytes % 4096) {
        snprintf(err, errlen, "the SSD store needs a directory and pages of a multiple of 4096 bytes");
        return -EINVAL;
    }
    struct ssd_store *ss = calloc(1, sizeof(*ss));
    if (!ss)
        return -ENOMEM;
    ss->base.ops = &kvt_ssd_store_ops;
    ss->page_bytes = p->page_bytes;
    ss->fingerprint = p->fingerprint;
    ss->found = p->found;
    ss->found_ctx = p->found_ctx;
    struct kvt_ssd_open_info info = { 0 };
    int r = kvt_ssd_open(p->dir, p->page_bytes, p->capacity, p->durable, p->fingerprint,
                         ss_found, ss, &ss->ssd, &info);
    ss->found = NULL;
    if (p->info) {
        *p->info = (struct kvt_store_open_info){ info.wiped, info.kept, info.dropped, "" };
        snprintf(p->info->message, sizeof(p->info->message), "%s", info.message);
    }
    if (r < 0) {
        snprintf(err, errlen, "%s", kvt_last_error()[0] ? kvt_last_error() : kvt_strerror(r));
        free(ss);
        return r;
    }
    if (p->sync)
        kvt_ssd_set_syncer(ss->ssd, p->sync);
    *out = &ss->base;
    return 0;
}

static void ss_close(struct kvt_store *s)
{
    struct ssd_store *ss = ss_of(s);
    if (!ss)
        return;
    kvt_ssd_close(ss->ssd);
    kvt_codec_free(ss->codec);
    free(ss->page);
    free(ss->keys);
    free(ss->vals);
    free(ss->where);
    free(ss);
}

/* ------------------------------------------------------------- slots */

static uint32_t sl_nslots(const struct kvt_store *s) { return kvt_ssd_nslots(ss_cof(s)->ssd); }
static uint64_t sl_usable(const struct kvt_store *s)
{
    return kvt_ssd_usable_slots(ss_cof(s)->ssd);
}
static uint64_t sl_bad(const struct kvt_store *s) { return kvt_ssd_bad_slots(ss_cof(s)->ssd); }
static uint32_t sl_take(struct kvt_store *s, int *err) { return kvt_ssd_alloc(ss_of(s)->ssd, err); }
static void sl_give(struct kvt_store *s, uint32_t slot) { kvt_ssd_free(ss_of(s)->ssd, slot); }
static void sl_prepare(struct kvt_store *s, uint32_t n) { kvt_ssd_prepare(ss_of(s)->ssd, n); }
static void sl_retire(struct kvt_store *s, uint32_t slot) { kvt_ssd_mark_bad(ss_of(s)->ssd, slot); }
static void sl_written(struct kvt_store *s, uint32_t slot) { kvt_ssd_dirty(ss_of(s)->ssd, slot); }

static int sl_locate(struct kvt_store *s, uint32_t slot, bool write, int *fd, uint64_t *off)
{
    return kvt_ssd_locate(ss_of(s)->ssd, slot, write, fd, off);
}

static uint32_t sl_seed(const struct kvt_store *s, const kvt_key *k, uint64_t generation)
{
    return kvt_ssd_bind(k, ss_cof(s)->fingerprint, generation);
}

static int sl_commit(struct kvt_store *s, const struct kvt_store_rec *rec, size_t n)
{
    struct ssd_store *ss = ss_of(s);
    int r = ss_reserve(ss, n);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        ss->keys[i] = rec[i].key;
        ss->vals[i] = (struct kvt_ssd_entry){ .version = KVT_SSD_ENTRY_VERSION,
                                              .codec = rec[i].codec,
                                              .stored_len = rec[i].stored_len,
                                              .raw_len = (uint32_t)ss->page_bytes,
                                              .crc = rec[i].crc,
                                              .fingerprint = ss->fingerprint,
                                              .generation = rec[i].generation };
        kvt_ssd_where(ss->ssd, rec[i].slot, &ss->vals[i].segment, &ss->vals[i].offset);
        if (rec[i].generation > ss->generation)
            ss->generation = rec[i].generation;
    }
    bool durable = kvt_ssd_durable(ss->ssd);
    if (durable && (r = kvt_ssd_sync(ss->ssd)) < 0)
        return r;
    return kvt_index_commit(kvt_ssd_index(ss->ssd), ss->keys, ss->vals, n, NULL, 0, durable);
}

static int sl_forget(struct kvt_store *s, const struct kvt_store_rec *rec, size_t n)
{
    struct ssd_store *ss = ss_of(s);
    int r = ss_reserve(ss, n);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        ss->keys[i] = rec[i].key;
        kvt_ssd_where(ss->ssd, rec[i].slot, &ss->where[i].segment, &ss->where[i].offset);
    }
    return kvt_index_delete_where(kvt_ssd_index(ss->ssd), ss->keys, ss->where, n);
}

static const struct kvt_store_slot_ops ssd_slot_ops = {
    .nslots = sl_nslots, .usable = sl_usable, .bad = sl_bad, .take = sl_take, .give = sl_give,
    .prepare = sl_prepare, .retire = sl_retire, .locate = sl_locate, .written = sl_written,
    .seed = sl_seed, .commit = sl_commit, .forget = sl_forget,
};

/* ------------------------------------------------------------- batched calls */

static int ss_page(struct ssd_store *ss)
{
    if (!ss->page && posix_memalign(&ss->page, 4096, ss->page_bytes) != 0) {
        ss->page = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* The entry of k if it is this model's and names a slot: 1, 0 (none), < 0. */
static int ss_lookup(struct ssd_store *ss, const kvt_key *k, struct kvt_ssd_entry *v,
                     uint32_t *slot)
{
    int r = kvt_index_get(kvt_ssd_index(ss->ssd), k, v);
    if (r == KVT_ENOTFOUND)
        return 0;
    if (r < 0)
        return r;
    if (v->fingerprint != ss->fingerprint)
        return 0;
    *slot = kvt_ssd_slot_of(ss->ssd, v->segment, v->offset);
    return *slot == KVT_NONE ? 0 : 1;
}

static int ss_put(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    struct ssd_store *ss = ss_of(s);
    if (n && !it)
        return -EINVAL;
    int r = ss_page(ss);
    if (r < 0)
        return r;
    /* The written pages' records, and the slots their keys held before: given
     * back once the commit no longer names them. */
    struct kvt_store_rec *rec = calloc(n ? n : 1, sizeof(*rec));
    uint32_t *old = calloc(n ? n : 1, sizeof(*old));
    size_t m = 0;
    if (!rec || !old) {
        free(rec);
        free(old);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct kvt_ssd_entry v;
        uint32_t was = KVT_NONE, slot = KVT_NONE;
        int fd, lr = ss_lookup(ss, &it[i].key, &v, &was), aerr = KVT_EFULL;
        uint64_t off;
        if (lr >= 0)
            slot = kvt_ssd_alloc(ss->ssd, &aerr);
        if (slot == KVT_NONE) {
            it[i].res = lr < 0 ? lr : aerr;
            ss->st.put_failed++;
            continue;
        }
        if (lr == 0)
            was = KVT_NONE;
        /* The key twice in one call: the index keeps the later write, so the
         * earlier one's new slot is what this one gives back (the slot the
         * key held before the call is given back once, by the earlier). */
        for (size_t j = 0; j < m; j++)
            if (kvt_key_eq(&rec[j].key, &it[i].key))
                was = rec[j].slot;
        /* O_DIRECT: the caller's page as it is when aligned, else a copy. */
        void *src = it[i].buf;
        if ((uintptr_t)src % 4096) {
            memcpy(ss->page, src, ss->page_bytes);
            src = ss->page;
        }
        r = kvt_ssd_locate(ss->ssd, slot, true, &fd, &off);
        if (r == 0)
            r = kvt_io_transfer(&(struct kvt_io_req){ .fd = fd, .write = true, .buf = src,
                                                      .len = ss->page_bytes, .off = off });
        if (r < 0) {
            if (r == -EIO)
                kvt_ssd_mark_bad(ss->ssd, slot);
            else
                kvt_ssd_free(ss->ssd, slot);
            it[i].res = r;
            ss->st.put_failed++;
            ss->st.errors++;
            continue;
        }
        kvt_ssd_dirty(ss->ssd, slot);
        uint64_t gen = ss->generation + 1 + m;
        rec[m] = (struct kvt_store_rec){ .key = it[i].key, .slot = slot,
                                         .stored_len = (uint32_t)ss->page_bytes,
                                         .codec = KVT_CODEC_NONE, .generation = gen };
        rec[m].crc = kvt_crc32c(sl_seed(s, &it[i].key, gen), src, ss->page_bytes);
        old[m] = was;
        it[i].res = 1;
        m++;
    }
    r = m ? sl_commit(s, rec, m) : 0;
    int done = 0;
    for (size_t i = 0, j = 0; i < n; i++) {
        if (it[i].res != 1)
            continue;
        /* Not indexed: the write did not happen, its slot is free again. */
        uint32_t give = r < 0 ? rec[j].slot : old[j];
        if (give != KVT_NONE)
            kvt_ssd_free(ss->ssd, give);
        if (r < 0) {
            it[i].res = r;
            ss->st.put_failed++;
            ss->st.errors++;
        } else {
            done++;
            ss->st.puts++;
            ss->st.bytes_out += ss->page_bytes;
        }
        j++;
    }
    free(rec);
    free(old);
    return done;
}

/* One page of a batched get into dst: 1 served, 0 not held, or why not
 * (KVT_ECORRUPT: its bytes fail their check; KVT_ENOTSUP: lossily coded;
 * -errno: the read). *stored: the bytes read. */
static int ss_get_one(struct ssd_store *ss, const kvt_key *k, void *dst, uint32_t *stored)
{
    struct kvt_ssd_entry v;
    uint32_t slot;
    int fd, r = ss_lookup(ss, k, &v, &slot);
    uint64_t off;
    if (r <= 0)
        return r;
    if (v.raw_len != ss->page_bytes || v.stored_len > ss->page_bytes ||
        (v.codec == KVT_CODEC_NONE && v.stored_len != ss->page_bytes))
        return KVT_ECORRUPT;
    if (kvt_codec_lossy(v.codec))
        return KVT_ENOTSUP;
    if ((r = kvt_ssd_locate(ss->ssd, slot, false, &fd, &off)) < 0 ||
        (r = kvt_io_transfer(&(struct kvt_io_req){ .fd = fd, .buf = ss->page,
                                                    .len = kvt_round4k(v.stored_len),
                                                    .off = off })) < 0)
        return r;
    if (kvt_crc32c(kvt_ssd_bind(k, v.fingerprint, v.generation), ss->page, v.stored_len) != v.crc)
        return KVT_ECORRUPT;
    *stored = v.stored_len;
    if (v.codec == KVT_CODEC_NONE) {
        memcpy(dst, ss->page, ss->page_bytes);
        return 1;
    }
    if (!ss->codec && (r = kvt_codec_new(KVT_CODEC_ZSTD, 0, ss->page_bytes, &ss->codec)) < 0)
        return r;
    r = kvt_codec_decode(ss->codec, v.codec, ss->page, v.stored_len, dst, ss->page_bytes);
    return r < 0 ? r : 1;
}

static int ss_get(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    struct ssd_store *ss = ss_of(s);
    if (n && !it)
        return -EINVAL;
    int r = ss_page(ss), found = 0;
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        uint32_t stored = 0;
        r = ss_get_one(ss, &it[i].key, it[i].buf, &stored);
        it[i].res = r;
        if (r == 1) {
            found++;
            ss->st.hits++;
            ss->st.bytes_in += stored;
            continue;
        }
        ss->st.misses++;
        if (r == KVT_ECORRUPT)
            ss->st.corrupt++;
        else if (r < 0 && r != KVT_ENOTSUP)
            ss->st.errors++;
    }
    return found;
}

static int ss_exists(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    struct ssd_store *ss = ss_of(s);
    if (n && !it)
        return -EINVAL;
    int held = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvt_ssd_entry v;
        uint32_t slot;
        it[i].res = ss_lookup(ss, &it[i].key, &v, &slot);
        held += it[i].res == 1;
    }
    return held;
}

static int ss_del(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    struct ssd_store *ss = ss_of(s);
    if (n && !it)
        return -EINVAL;
    int gone = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvt_ssd_entry v;
        struct kvt_store_rec rec = { .key = it[i].key };
        int r = ss_lookup(ss, &it[i].key, &v, &rec.slot);
        if (r == 1 && (r = sl_forget(s, &rec, 1)) == 0) {
            kvt_ssd_free(ss->ssd, rec.slot);
            r = 1;
        }
        it[i].res = r;
        gone += r == 1;
    }
    return gone;
}

static int ss_flush(struct kvt_store *s)
{
    struct ssd_store *ss = ss_of(s);
    int r = kvt_ssd_sync(ss->ssd);
    return r < 0 ? r : kvt_index_sync(kvt_ssd_index(ss->ssd));
}

static void ss_stats(const struct kvt_store *s, struct kvt_store_stats *st)
{
    *st = ss_cof(s)->st;
    st->nodes = 1;
}

struct kvt_ssd *kvt_ssd_of(struct kvt_store *s) { return ss_of(s)->ssd; }

const struct kvt_store_ops kvt_ssd_store_ops = {
    .version = KVT_STORE_OPS_VERSION,
    .caps = KVT_STORE_DURABLE | KVT_STORE_SLOTS,
    .name = "ssd",
    .open = ss_open,
    .close = ss_close,
    .put = ss_put,
    .get = ss_get,
    .exists = ss_exists,
    .del = ss_del,
    .flush = ss_flush,
    .stats = ss_stats,
    .slots = &ssd_slot_ops,
};
