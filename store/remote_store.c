/*
 * remote_store.c — the shared tier's store: pages as framed values on a
 * Redis Cluster (store.h's interface over io/rcluster.h).
 *
 * Names and frames are remote_frame.h's. A handle owns one cluster client
 * (one connection per node) and the scratch of its batches, grown to the
 * largest batch seen and kept, so a steady stream of calls allocates
 * nothing.
 *
 * Two writers of one key: Redis's SET replaces the value atomically, so a
 * reader sees one whole value or the other, never a mix. The last writer
 * wins, on purpose: a key that names content (a prefix hash) gets equal
 * bytes from every writer, and a key a caller overwrites (kvt_put of an
 * existing key) must not keep serving its old page, which SET NX (first
 * writer wins) would do until Redis evicted it.
 */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kvt_build.h"
#include "store/remote_frame.h"
#include "store/remote_kv.h"

#define DEFAULT_PREFIX "kvtier"

struct remote_store {
    struct kvt_store base;
    const struct kvt_kv_ops *kv;
    void *conn;
    size_t page_bytes;
    uint64_t fingerprint;
    unsigned ttl_s;
    char prefix[KVT_RFRAME_PREFIX_MAX + 1];
    struct kvt_store_stats st;      /* ours; the client's are added in stats() */
    /* Scratch for batches of up to cap items. */
    size_t cap;
    struct kvt_rc_item *items;
    char *names;                    /* cap x KVT_RFRAME_KEY_MAX */
    uint8_t *hdrs;                  /* cap x KVT_RFRAME_HDR */
};

static struct remote_store *of(struct kvt_store *s)
{
    return (struct remote_store *)s;
}

static int grow(struct remote_store *r, size_t n)
{
    if (n <= r->cap)
        return 0;
    struct kvt_rc_item *it = realloc(r->items, n * sizeof(*it));
    if (!it)
        return -ENOMEM;
    r->items = it;
    char *nm = realloc(r->names, n * KVT_RFRAME_KEY_MAX);
    if (!nm)
        return -ENOMEM;
    r->names = nm;
    uint8_t *h = realloc(r->hdrs, n * KVT_RFRAME_HDR);
    if (!h)
        return -ENOMEM;
    r->hdrs = h;
    r->cap = n;
    return 0;
}

/* The client's items for it[0..n): names filled, the rest zero. -EINVAL
 * for items NULL with n > 0 (every call of the store starts here). */
static int name_all(struct remote_store *r, const struct kvt_store_item *it, size_t n)
{
    if (n && !it)
        return -EINVAL;
    int e = grow(r, n);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        char *nm = r->names + i * KVT_RFRAME_KEY_MAX;
        size_t len = kvt_rframe_name(nm, KVT_RFRAME_KEY_MAX, r->prefix, r->fingerprint, &it[i].key);
        r->items[i] = (struct kvt_rc_item){ .key = nm, .key_len = len };
    }
    return 0;
}

/* Counts an item the client failed. */
static void count_fail(struct remote_store *r, int res)
{
    if (res == -ETIMEDOUT)
        r->st.timeouts++;
    else
        r->st.errors++;
}

static int rs_put(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    struct remote_store *r = of(s);
    int e = name_all(r, it, n);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        uint8_t *h = r->hdrs + i * KVT_RFRAME_HDR;
        kvt_rframe_header(h, &it[i].key, r->fingerprint, it[i].buf, (uint32_t)r->page_bytes);
        r->items[i].val = h;
        r->items[i].val_len = KVT_RFRAME_HDR;
        r->items[i].val2 = it[i].buf;
        r->items[i].val2_len = r->page_bytes;
    }
    r->kv->set(r->conn, r->items, n, r->ttl_s, 0);
    int done = 0;
    for (size_t i = 0; i < n; i++) {
        it[i].res = r->items[i].res;
        if (it[i].res == 1) {
            done++;
            r->st.puts++;
            r->st.bytes_out += KVT_RFRAME_HDR + r->page_bytes;
        } else {
            r->st.put_failed++;
            count_fail(r, it[i].res);
        }
    }
    return done;
}

static int rs_get(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    struct remote_store *r = of(s);
    int e = name_all(r, it, n);
    if (e)
        return e;
    /* The header into our scratch, the page straight into the caller's:
     * one copy from the wire (a value that fails its check leaves what was
     * read there, as a damaged SSD page read in place does). */
    for (size_t i = 0; i < n; i++) {
        r->items[i].buf = r->hdrs + i * KVT_RFRAME_HDR;
        r->items[i].cap = KVT_RFRAME_HDR;
        r->items[i].buf2 = it[i].buf;
        r->items[i].cap2 = r->page_bytes;
        r->items[i].want_crc2 = 1;
    }
    r->kv->get(r->conn, r->items, n);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        const struct kvt_rc_item *ri = &r->items[i];
        it[i].res = 0;
        if (ri->res == 1) {
            r->st.bytes_in += ri->len;
            if (kvt_rframe_check_crc(ri->buf, ri->crc2, ri->len, &it[i].key, r->fingerprint,
                                     r->page_bytes) == 0) {
                it[i].res = 1;
                found++;
                r->st.hits++;
                continue;
            }
            r->st.corrupt++;
        } else if (ri->res == -EMSGSIZE) {
            r->st.corrupt++; /* longer than any frame of ours */
        } else if (ri->res < 0) {
            it[i].res = ri->res;
            count_fail(r, ri->res);
        }
        r->st.misses++;
    }
    return found;
}

/* A call on keys alone (exists, del) through the transport's fn: the
 * number of items whose res is 1. */
static int keys_call(struct kvt_store *s, struct kvt_store_item *it, size_t n,
                     int (*fn)(void *conn, struct kvt_rc_item *it, size_t n))
{
    struct remote_store *r = of(s);
    int e = name_all(r, it, n);
    if (e)
        return e;
    fn(r->conn, r->items, n);
    int yes = 0;
    for (size_t i = 0; i < n; i++) {
        it[i].res = r->items[i].res;
        if (it[i].res == 1)
            yes++;
        else if (it[i].res < 0)
            count_fail(r, it[i].res);
    }
    return yes;
}

static int rs_exists(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    return keys_call(s, it, n, of(s)->kv->exists);
}

static int rs_del(struct kvt_store *s, struct kvt_store_item *it, size_t n)
{
    return keys_call(s, it, n, of(s)->kv->del);
}

static void rs_stats(const struct kvt_store *s, struct kvt_store_stats *st)
{
    const struct remote_store *r = (const struct remote_store *)s;
    struct kvt_rcluster_stats c;
    r->kv->stats(r->conn, &c);
    *st = r->st;
    st->redirects = c.moved + c.asks;
    st->refreshes = c.refreshes;
    st->nodes = c.nodes;
    st->nodes_down = c.nodes_down;
}

static void rs_close(struct kvt_store *s)
{
    struct remote_store *r = of(s);
    if (!r)
        return;
    r->kv->close(r->conn);
    free(r->items);
    free(r->names);
    free(r->hdrs);
    free(r);
}

static int rs_open(const struct kvt_store_params *p, struct kvt_store **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    const char *prefix = p->prefix ? p->prefix : DEFAULT_PREFIX;
    if (!kvt_rframe_prefix_ok(prefix)) {
        snprintf(err, errlen, "remote_prefix must be 1..%d characters of A-Z a-z 0-9 _ . -",
                 KVT_RFRAME_PREFIX_MAX);
        return KVT_ECONFIG;
    }
    if (!p->page_bytes || p->page_bytes > UINT32_MAX - KVT_RFRAME_HDR) {
        snprintf(err, errlen, "a page of %zu bytes does not fit a frame", p->page_bytes);
        return KVT_ECONFIG;
    }
    const struct kvt_kv_ops *kv = p->kv ? p->kv : kvt_kv_rcluster;
    if (!kv) {
        snprintf(err, errlen, "this kvtier was built without hiredis (libhiredis-dev): "
                              "no remote tier");
        return KVT_ENOTSUP;
    }
    struct remote_store *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    r->base.ops = &kvt_remote_store_ops;
    r->page_bytes = p->page_bytes;
    r->fingerprint = p->fingerprint;
    r->ttl_s = p->ttl_s;
    strcpy(r->prefix, prefix);
    struct kvt_rcluster_opts o = { .url = p->url, .auth_file = p->auth_file,
                                   .timeout_ms = p->timeout_ms };
    r->kv = kv;
    int e = kv->open(p->kv_arg, &o, &r->conn, err, errlen);
    if (e) {
        free(r);
        return e;
    }
    *out = &r->base;
    return 0;
}

#if KVT_HAVE_REDIS
static int rc_open(void *arg, const struct kvt_rcluster_opts *o, void **conn, char *err,
                   size_t errlen)
{
    (void)arg;
    return kvt_rcluster_open(o, (struct kvt_rcluster **)conn, err, errlen);
}
static void rc_close(void *c) { kvt_rcluster_close(c); }
static int rc_get(void *c, struct kvt_rc_item *it, size_t n) { return kvt_rcluster_get(c, it, n); }
static int rc_set(void *c, struct kvt_rc_item *it, size_t n, unsigned ttl_s, int nx)
{
    return kvt_rcluster_set(c, it, n, ttl_s, nx);
}
static int rc_exists(void *c, struct kvt_rc_item *it, size_t n)
{
    return kvt_rcluster_exists(c, it, n);
}
static int rc_del(void *c, struct kvt_rc_item *it, size_t n) { return kvt_rcluster_del(c, it, n); }
static void rc_stats(const void *c, struct kvt_rcluster_stats *s) { kvt_rcluster_stats(c, s); }

static const struct kvt_kv_ops rcluster_ops = {
    rc_open, rc_close, rc_get, rc_set, rc_exists, rc_del, rc_stats,
};
const struct kvt_kv_ops *const kvt_kv_rcluster = &rcluster_ops;
#else
const struct kvt_kv_ops *const kvt_kv_rcluster = NULL;
#endif

const struct kvt_store_ops kvt_remote_store_ops = {
    .version = KVT_STORE_OPS_VERSION,
    .caps = KVT_STORE_SHARED | KVT_STORE_EVICTS,
    .name = "redis",
    .open = rs_open,
    .close = rs_close,
    .put = rs_put,
    .get = rs_get,
    .exists = rs_exists,
    .del = rs_del,
    .flush = NULL,
    .stats = rs_stats,
};
