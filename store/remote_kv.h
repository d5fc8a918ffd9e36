/*
 * remote_kv.h — what the shared tier's store (store/remote_store.c) sends
 * its values through: batched get, set, exists and del of byte values by
 * name, as io/rcluster.h does them on a Redis Cluster.
 *
 * The Redis Cluster client is the one the product uses. The test-support
 * library hands in another (lab/kv_mem.c: values in memory, shared by the
 * engines of one test, with faults on demand) through kvt_open_ex, so that
 * everything above the wire — frames, checks, the publish queue, loads,
 * lookups — runs in tests the same with or without a cluster.
 */
#ifndef KVT_REMOTE_KV_H
#define KVT_REMOTE_KV_H

#include <stddef.h>

#include "io/rcluster.h"

struct kvt_kv_ops {
    /* A connection for one thread at a time, made from o (a Redis URL,
     * auth, timeouts) and the transport's own arg. 0 or -errno, with err
     * saying why (never a credential). */
    int (*open)(void *arg, const struct kvt_rcluster_opts *o, void **conn, char *err,
                size_t errlen);
    void (*close)(void *conn);
    /* As kvt_rcluster_get/set/exists/del: each item's res. */
    int (*get)(void *conn, struct kvt_rc_item *it, size_t n);
    int (*set)(void *conn, struct kvt_rc_item *it, size_t n, unsigned ttl_s, int nx);
    int (*exists)(void *conn, struct kvt_rc_item *it, size_t n);
    int (*del)(void *conn, struct kvt_rc_item *it, size_t n);
    void (*stats)(const void *conn, struct kvt_rcluster_stats *s);
};

/* The Redis Cluster client as a transport (NULL ops when kvtier was built
 * without hiredis). */
extern const struct kvt_kv_ops *const kvt_kv_rcluster;

#endif /* KVT_REMOTE_KV_H */
