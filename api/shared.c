/*
 * shared.c — the page API where it meets the shared tier: kvt_put,
 * kvt_get (entered through buffers.c when a shared tier is set) and
 * kvt_exists over the local tiers (buffers.c, manager.c), then
 * the shared tier (tiers/remote.c) for what they lack; kvt_publish.
 *
 * The local calls run first and hold the engine lock only for their own
 * part; the network is used with the lock dropped, so a slow cluster
 * delays the caller that needs it (by its timeout at most) and nobody else.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "api/api.h"

#define ON_STACK 64 /* keys a call handles without allocating */

/* Publishes pages kvtier holds locally: each into a queue slot, read with
 * a local get (host or device pages alike). The number queued. */
static int publish_local(kvt_engine *e, const kvt_key *keys, size_t n)
{
    int queued = 0;
    for (size_t i = 0; i < n; i++) {
        void *buf;
        int s = kvt_remote_reserve(e->remote, &buf);
        if (s < 0)
            continue; /* counted: the queue is full */
        int found = 0;
        int r = kvt_get_local(e, &keys[i], 1, &buf, 0, &found);
        kvt_remote_commit(e->remote, s, &keys[i], r >= 0 && found);
        queued += r >= 0 && found;
    }
    return queued;
}

KVT_API int kvt_put(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src,
                    int src_on_device)
{
    int r = kvt_put_local(e, keys, n, src, src_on_device);
    if (!e || !e->remote)
        return r;
    for (size_t i = 0; i < n && r == 0; i++) /* the caller's bytes now, not the store's */
        kvt_remote_loaded(e->remote, &keys[i], false);
    if (r < 0 || kvt_remote_publish_mode(e->remote) != KVT_PUBLISH_PUT)
        return r;
    if (src_on_device) {
        publish_local(e, keys, n);
        return r;
    }
    for (size_t i = 0; i < n; i++)
        kvt_remote_offer(e->remote, &keys[i], src[i]);
    return r;
}

KVT_API int kvt_publish(kvt_engine *e, const kvt_key *keys, size_t n)
{
    if (!e)
        return kvt_fail(-EINVAL, "engine is NULL");
    if (n && !keys)
        return kvt_fail(-EINVAL, "keys is NULL");
    if (n > INT32_MAX)
        return kvt_fail(-EINVAL, "n is too large");
    if (!e->remote)
        return kvt_fail(KVT_ENOTSUP, "this engine has no shared tier (remote_url)");
    return publish_local(e, keys, n);
}

/* Marks the pages it[] found and keeps them in the local tiers (a put of
 * the bytes just loaded; a full engine keeps none, which costs a later
 * load, nothing else). With device buffers, copies them there from DRAM. */
static void keep_found(kvt_engine *e, const kvt_key *keys, const uint32_t *miss, size_t m,
                       void *const *dst, int dst_on_device, int *found,
                       const struct kvt_store_item *it)
{
    kvt_key *fk = malloc(m * sizeof(*fk));
    const void **src = malloc(m * sizeof(*src));
    size_t k = 0;
    for (size_t j = 0; j < m; j++)
        if (it[j].res == 1) {
            found[miss[j]] = 1;
            if (fk && src) {
                fk[k] = it[j].key;
                src[k++] = it[j].buf;
            }
        }
    if (k && kvt_put_local(e, fk, k, src, 0) == 0)
        for (size_t j = 0; j < k; j++)
            kvt_remote_loaded(e->remote, &fk[j], true);
    for (size_t j = 0; dst_on_device && j < m; j++)
        if (found[miss[j]]) {
            int f = 0;
            if (kvt_get_local(e, &keys[miss[j]], 1, &dst[miss[j]], 1, &f) < 0 || !f)
                found[miss[j]] = 0; /* kept nowhere: the device copy could not be made */
        }
    free(fk);
    free(src);
}

/* Loads the pages of keys[miss[0..m)] from the shared tier into dst (host
 * buffers) and keeps the ones found in the local tiers, as a put would
 * (never published again: they came from there). found[] updated. */
static void load_missing(kvt_engine *e, const kvt_key *keys, const uint32_t *miss, size_t m,
                         void *const *dst, int dst_on_device, int *found,
                         struct kvt_store_item *it)
{
    void *stage = NULL;
    if (dst_on_device) {
        /* The store writes host memory: a staging copy, then the local
         * get below copies to the device from DRAM. */
        stage = malloc(m * e->page_bytes);
        if (!stage)
            return;
    }
    for (size_t j = 0; j < m; j++)
        it[j] = (struct kvt_store_item){
            .key = keys[miss[j]],
            .buf = stage ? (uint8_t *)stage + j * e->page_bytes : dst[miss[j]],
        };
    if (kvt_remote_load(e->remote, it, m) > 0)
        keep_found(e, keys, miss, m, dst, dst_on_device, found, it);
    free(stage);
}

int kvt_get_shared(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                   int dst_on_device, int *found)
{
    int f_stack[ON_STACK];
    int *f = found ? found : n <= ON_STACK ? f_stack : malloc(n * sizeof(int));
    if (!f)
        return kvt_fail(-ENOMEM, "out of memory");
    int r = kvt_get_local(e, keys, n, dst, dst_on_device, f);
    size_t m = 0;
    for (size_t i = 0; r >= 0 && i < n; i++)
        m += !f[i];
    if (m) {
        uint32_t *miss = malloc(m * sizeof(*miss));
        struct kvt_store_item *it = malloc(m * sizeof(*it));
        if (miss && it) {
            m = 0;
            for (size_t i = 0; i < n; i++)
                if (!f[i])
                    miss[m++] = (uint32_t)i;
            load_missing(e, keys, miss, m, dst, dst_on_device, f, it);
        }
        free(miss);
        free(it);
    }
    if (f != found && f != f_stack)
        free(f);
    return r;
}

KVT_API int kvt_exists(kvt_engine *e, const kvt_key *keys, size_t n, kvt_tier *where)
{
    if (!e || !e->remote)
        return kvt_exists_local(e, keys, n, where);
    kvt_tier w_stack[ON_STACK];
    kvt_tier *w = where ? where : n <= ON_STACK ? w_stack : malloc(n * sizeof(*w));
    if (!w)
        return kvt_fail(-ENOMEM, "out of memory");
    int r = kvt_exists_local(e, keys, n, w);
    if (r >= 0 && (size_t)r < n) {
        /* Every local miss is asked of the cluster in one round, so that
         * where[] is whole; the hit prefix is then counted again. */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += w[i] == KVT_TIER_NONE;
        struct kvt_store_item *it = malloc(m * sizeof(*it));
        uint32_t *idx = malloc(m * sizeof(*idx));
        if (it && idx) {
            m = 0;
            for (size_t i = 0; i < n; i++)
                if (w[i] == KVT_TIER_NONE) {
                    idx[m] = (uint32_t)i;
                    it[m++] = (struct kvt_store_item){ .key = keys[i] };
                }
            kvt_remote_exists(e->remote, it, m);
            for (size_t j = 0; j < m; j++)
                if (it[j].res == 1)
                    w[idx[j]] = KVT_TIER_REMOTE;
            r = 0;
            while ((size_t)r < n && w[r] != KVT_TIER_NONE)
                r++;
        }
        free(it);
        free(idx);
    }
    if (w != where && w != w_stack)
        free(w);
    return r;
}
