/*
 * store.h — the interface of a store below DRAM (internal).
 *
 * A store keeps whole pages by key, outside the engine's memory: the tiers
 * above it (tiers/) put pages into it, ask which it holds, read them back
 * and drop them. What a store is made of (files, a cluster of servers) is
 * its own business; the engine sees this vtable, the capabilities it
 * declares, and the counters it keeps.
 *
 * Implementations: store/remote_store.c (Redis Cluster, the shared tier).
 * The SSD tier's files (store/ssd_store.c) are still driven by the SSD
 * pipeline through their own calls, because its engine records name slots
 * (KVT_STORE_SLOTS below says so); docs/design.md#the-store-interface says
 * what remains before it too goes behind this table.
 *
 * Rules every implementation keeps:
 *  - A page read back is the page put, byte for byte, or a miss: a value
 *    that fails its check (another key's, another model's, truncated,
 *    damaged) is a miss, counted, never an error and never served.
 *  - A call returns within the store's own time bound (a remote store's
 *    timeout): a part that is slow or down reads as a miss.
 *  - A handle is used by one thread at a time; a tier that calls a store
 *    from several threads opens one handle per thread (or serialises).
 *  - Items are the caller's: the store reads key and buf during the call
 *    only and writes res (and, for get, the page into buf).
 */
#ifndef KVT_STORE_H
#define KVT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "include/kvtier.h"

#define KVT_STORE_OPS_VERSION 1

/* Capabilities, as flags in kvt_store_ops.caps. */
#define KVT_STORE_DURABLE 1u  /* what was put survives a restart of the engine */
#define KVT_STORE_SHARED 2u   /* other engines read what this one puts */
#define KVT_STORE_SLOTS 4u    /* pages live in slots the engine's records name */
#define KVT_STORE_EVICTS 8u   /* the store drops pages on its own (a miss after a put is normal) */

/* One page of a batched call. */
struct kvt_store_item {
    kvt_key key;
    void *buf;      /* put: the page (read); get: where the page goes (written) */
    int res;        /* set by the call: 1 done / found / held, 0 missing,
                       < 0 this item's error (a miss for get and exists) */
};

/* What a store counts since its open; a tier adds its handles' together. */
struct kvt_store_stats {
    uint64_t hits, misses;      /* get: pages found, pages not found (any reason) */
    uint64_t bytes_in;          /* bytes read from the store (values, headers included) */
    uint64_t bytes_out;         /* bytes written to it */
    uint64_t puts, put_failed;  /* pages stored, pages a put could not store */
    uint64_t corrupt;           /* values that failed their check: read as misses */
    uint64_t timeouts;          /* items that ran out of time */
    uint64_t redirects;         /* a cluster's MOVED and ASK answers followed */
    uint64_t errors;            /* items failed for another reason (node down, protocol) */
    uint64_t refreshes;         /* a cluster's map learned again */
    uint32_t nodes, nodes_down; /* parts of the store (cluster masters), of them unreachable */
};

/* What opening a store needs; the strings are read during the open only. */
struct kvt_store_params {
    size_t page_bytes;
    uint64_t fingerprint;       /* bound into every value: another model never matches */
    const char *url;            /* where the store is (a remote store's servers) */
    const char *prefix;         /* names under which the store keeps its values */
    const char *auth_file;      /* a file holding the credentials, or NULL */
    unsigned timeout_ms;        /* the bound on one call (0: the store's default) */
    unsigned ttl_s;             /* values expire after this long (0: never) */
    /* The remote store's transport when not the Redis client: the lab's
     * (store/remote_kv.h), NULL in the product. */
    const struct kvt_kv_ops *kv;
    void *kv_arg;
};

struct kvt_store;

struct kvt_store_ops {
    unsigned version;           /* KVT_STORE_OPS_VERSION */
    unsigned caps;              /* KVT_STORE_* */
    const char *name;
    /* Opens a handle. 0, or a negative error with the reason in err (a
     * text that never holds a credential). */
    int (*open)(const struct kvt_store_params *p, struct kvt_store **out, char *err,
                size_t errlen);
    void (*close)(struct kvt_store *s);
    /* Batched calls. Each returns the number of items whose res is 1, or a
     * negative error for the whole call (misuse only: -EINVAL). */
    int (*put)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    int (*get)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    int (*exists)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    int (*del)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    /* Makes what was put durable, where the store can (NULL: nothing to do). */
    int (*flush)(struct kvt_store *s);
    void (*stats)(const struct kvt_store *s, struct kvt_store_stats *st);
};

/* Every handle starts with this, so that a tier holds any store alike. */
struct kvt_store {
    const struct kvt_store_ops *ops;
};

/* Adds b's counters into a (nodes: the larger). */
static inline void kvt_store_stats_add(struct kvt_store_stats *a, const struct kvt_store_stats *b)
{
    a->hits += b->hits;
    a->misses += b->misses;
    a->bytes_in += b->bytes_in;
    a->bytes_out += b->bytes_out;
    a->puts += b->puts;
    a->put_failed += b->put_failed;
    a->corrupt += b->corrupt;
    a->timeouts += b->timeouts;
    a->redirects += b->redirects;
    a->errors += b->errors;
    a->refreshes += b->refreshes;
    if (b->nodes > a->nodes || (b->nodes == a->nodes && b->nodes_down > a->nodes_down)) {
        a->nodes = b->nodes;
        a->nodes_down = b->nodes_down;
    }
}

/* The Redis Cluster store (store/remote_store.c); its ops answer
 * KVT_ENOTSUP from open when kvtier was built without hiredis. */
extern const struct kvt_store_ops kvt_remote_store_ops;

#endif /* KVT_STORE_H */
