/*
 * store.h — the interface of a store below DRAM (internal).
 *
 * A store keeps whole pages by key, outside the engine's memory: the tiers
 * above it (tiers/) put pages into it, ask which it holds, read them back
 * and drop them. What a store is made of (files, a cluster of servers) is
 * its own business; the engine sees this vtable, the capabilities it
 * declares, and the counters it keeps.
 *
 * Implementations: store/ssd_store_ops.c (the SSD tier: files on a local
 * disk, durable, with slots) and store/remote_store.c (Redis Cluster, the
 * shared tier). The tiers reach either only through this table: the
 * layering check (tests/layering/rules.txt, "behind") fails on a direct
 * call from outside store/.
 *
 * Two ways in. The batched calls (put, get, exists, del, flush) move whole
 * pages by key through the store's own I/O, synchronously: what the shared
 * tier and a tool use. A store with slots (KVT_STORE_SLOTS) also hands the
 * engine its slots (struct kvt_store_slot_ops): the engine's SSD pipeline
 * writes and reads them with its own I/O back-end, encoded and checksummed
 * as it goes, and commits what it wrote as records; the store keeps the
 * files, the free map and the index. Both ways keep the same records, so a
 * page put one way is found the other.
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

#include <stdbool.h>

#define KVT_STORE_OPS_VERSION 3   /* 2: the slot ops; a directory's open. 3: prepare */

/* Capabilities, as flags in kvt_store_ops.caps. */
#define KVT_STORE_DURABLE 1u  /* what was put survives a restart of the engine */
#define KVT_STORE_SHARED 2u   /* other engines read what this one puts */
#define KVT_STORE_SLOTS 4u    /* pages live in slots the engine's records name */
/* caps say what a store can be; an open may ask for less (a local store
 * opened not durable starts empty and keeps nothing past its close). */
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

/* One page as a store with slots keeps it: the slot the engine wrote it to
 * and how (what the engine's records hold of it). */
struct kvt_store_rec {
    kvt_key key;
    uint32_t slot;
    uint32_t stored_len;        /* bytes written at the slot (before padding to 4096) */
    uint32_t crc;               /* CRC32C over the binding seed (slot ops' seed), then the
                                   stored bytes */
    uint8_t codec;              /* KVT_CODEC_* applied */
    uint64_t generation;        /* the write's number, monotonic over the store's life */
};

/* Called at open for every record a durable store kept: the engine builds
 * its page records. Non-zero stops the open with that error. */
typedef int (*kvt_store_found_fn)(void *ctx, const struct kvt_store_rec *r);

/* What an open found, for the engine to say once. */
struct kvt_store_open_info {
    bool wiped;                 /* emptied: not durable, damaged, another layout */
    uint64_t kept, dropped;     /* records kept; dropped (other model, bad location) */
    char message[512];          /* why, when wiped or dropped */
};

struct kvt_syncer;
struct kvt_store;

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
    /* A local store's: its directory, its room, whether what it commits
     * must survive a restart (else it starts empty), the records it kept
     * (found, may be NULL), what the open did (info, may be NULL), and in
     * the tests a power-loss model that sees its syncs (sync, NULL: none). */
    const char *dir;
    uint64_t capacity;
    bool durable;
    kvt_store_found_fn found;
    void *found_ctx;
    struct kvt_store_open_info *info;
    const struct kvt_syncer *sync;
};

/* The slots of a store with KVT_STORE_SLOTS. Calls under the engine lock,
 * except locate's answer used for I/O, written, commit and forget, which the
 * mover alone makes unlocked on slots it holds: commit and forget share the
 * store's scratch, so one thread at a time. */
struct kvt_store_slot_ops {
    uint32_t (*nslots)(const struct kvt_store *s);
    uint64_t (*usable)(const struct kvt_store *s);   /* neither bad nor parked */
    uint64_t (*bad)(const struct kvt_store *s);
    /* A free slot, or KVT_NONE with *err: KVT_EFULL, -ENOSPC/-EDQUOT (the
     * disk: tried again a second later), -ENOMEM, -EMFILE. */
    uint32_t (*take)(struct kvt_store *s, int *err);
    void (*give)(struct kvt_store *s, uint32_t slot);       /* free again */
    /* The next n takes are coming (a flush's or a put's batch): whatever
     * they will need made now, before their writes are in flight (a local
     * store allocates their blocks). A hint: its failures are met and
     * reported by the takes. NULL: nothing to prepare. */
    void (*prepare)(struct kvt_store *s, uint32_t n);
    void (*retire)(struct kvt_store *s, uint32_t slot);     /* bad: never handed out again */
    /* The O_DIRECT descriptor and offset of a slot (write: writable). */
    int (*locate)(struct kvt_store *s, uint32_t slot, bool write, int *fd, uint64_t *off);
    void (*written)(struct kvt_store *s, uint32_t slot);    /* data there since the last commit */
    /* The seed a record's CRC starts from: binds the bytes to key and write.
     * A pure function of the open's fingerprint: callable from any thread,
     * locked or not (the mover and kvt_get's callers both check pieces). */
    uint32_t (*seed)(const struct kvt_store *s, const kvt_key *k, uint64_t generation);
    /* Makes n written records the store's, in one transaction; a durable
     * store syncs their data first. On error none is kept. */
    int (*commit)(struct kvt_store *s, const struct kvt_store_rec *r, size_t n);
    /* Removes n records, each only while it still names its slot (a newer
     * write of the key may have committed first). */
    int (*forget)(struct kvt_store *s, const struct kvt_store_rec *r, size_t n);
};

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
     * negative error for the whole call, before any item was tried: misuse
     * (-EINVAL), or no memory for the call's own scratch (-ENOMEM). */
    int (*put)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    int (*get)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    int (*exists)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    int (*del)(struct kvt_store *s, struct kvt_store_item *it, size_t n);
    /* Makes what was put durable, where the store can (NULL: nothing to do). */
    int (*flush)(struct kvt_store *s);
    void (*stats)(const struct kvt_store *s, struct kvt_store_stats *st);
    const struct kvt_store_slot_ops *slots;   /* with KVT_STORE_SLOTS, else NULL */
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

/* The SSD store (store/ssd_store_ops.c): DURABLE | SLOTS (durable as the
 * open asks). */
extern const struct kvt_store_ops kvt_ssd_store_ops;

/* The Redis Cluster store (store/remote_store.c); its ops answer
 * KVT_ENOTSUP from open when kvtier was built without hiredis. */
extern const struct kvt_store_ops kvt_remote_store_ops;

#endif /* KVT_STORE_H */
