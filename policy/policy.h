/*
 * policy.h — the eviction/prefetch policy interface (internal).
 *
 * The manager tells the policy which pages are candidates to leave each tier
 * (insert/remove), which were used (access), and the decode loop (schedule,
 * advance). The policy answers "which candidate leaves tier t next" and, for
 * policies that know the future, "which pages should come up next".
 *
 * Pages are 32-bit page numbers of the manager's page table. A page is a
 * candidate of tier t between insert(t) and remove(t); the manager never
 * inserts twice. Pinned pages are not candidates. All calls are made under
 * the engine lock (the simulator drives a policy from one thread): a policy
 * needs no locking of its own and must not call back into the engine except
 * through the callbacks it is given (usable(), wanted(), the host's key_of
 * and find).
 */
#ifndef KVT_POLICY_H
#define KVT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* The layout of struct kvt_policy_ops. What a policy can do is which ops it
 * fills: every policy evicts (create .. victim); each capability below is
 * a group of ops that are all there or all NULL, and the engine asks the
 * pointer whether a policy has it. A policy with no plan is never asked
 * what to bring up, and nothing wakes the mover for it. */
#define KVT_POLICY_OPS_VERSION 6

/* What batch() reports: the pages of one kvt_get or one kvt_put call. */
#define KVT_BATCH_GET 1
#define KVT_BATCH_PUT 2
#define KVT_POLICY_TIERS 3

/* What a policy may ask of whoever drives it (the manager, or the
 * simulator): a page's key, and the page holding a key. */
struct kvt_policy_host {
    void *ctx;
    const kvt_key *(*key_of)(void *ctx, uint32_t pg);
    uint32_t (*find)(void *ctx, const kvt_key *key);   /* KVT_NONE if absent */
};

struct kvt_policy_params {
    uint32_t page_cap;          /* page numbers below this may be used; grown by reserve() */
    uint32_t slots[KVT_POLICY_TIERS]; /* capacity of each tier in pages */
    uint64_t *meta;             /* counter of metadata bytes (kvt_stats.meta_bytes) */
    struct kvt_policy_host host;
};

/* The most groups (n_ids x n_layers) a schedule may have. Group numbers are
 * 32-bit, the decode policy tags bucket numbers with the top bit and keeps a
 * bucket per group; past this the product no longer fits them.
 * kvt_set_schedule refuses more; a policy given more runs as if it had no
 * schedule. */
#define KVT_MAX_SCHEDULE_GROUPS (1u << 30)

/* Next-use distances: smaller is sooner. */
#define KVT_USE_NEVER UINT64_MAX          /* dead (outside the window) */
#define KVT_USE_UNKNOWN (UINT64_MAX - 1)  /* not in the schedule */

/* Whether candidate pg may leave now (not busy, not in flight). */
typedef bool (*kvt_usable_fn)(void *ctx, uint32_t pg);

struct kvt_policy_ops {
    const char *name;
    int version;        /* KVT_POLICY_OPS_VERSION */
    int (*create)(const struct kvt_policy_params *p, void **priv);
    void (*destroy)(void *priv);
    /* Page numbers up to cap may be used from now on. -ENOMEM. */
    int (*reserve)(void *priv, uint32_t cap);

    void (*insert)(void *priv, int tier, uint32_t pg, const kvt_key *key);
    void (*remove)(void *priv, int tier, uint32_t pg);
    /* pg (a candidate of tier) was used now. */
    void (*access)(void *priv, int tier, uint32_t pg);

    /* The candidate of tier that should leave first and is usable, or
     * KVT_NONE. Cost: O(candidates skipped). */
    uint32_t (*victim)(void *priv, int tier, kvt_usable_fn usable, void *ctx);

    /* --- follows the decode position (both or neither) --- */
    void (*schedule)(void *priv, const kvt_schedule *s);
    void (*advance)(void *priv, uint64_t id, uint32_t layer);
    /* --- sees pages come and go (both or neither) --- */
    /* A page now exists under its key (pg KVT_NONE: is about to, announced
     * before room is made for it) / is gone. */
    void (*page_new)(void *priv, uint32_t pg, const kvt_key *key);
    void (*page_gone)(void *priv, uint32_t pg);

    /* --- plans ahead (all five or none; needs the decode position) --- */
    /* How far away pg's next use is: smaller is sooner, in the policy's own
     * units, comparable only with other next_use() and use_at() values
     * (KVT_USE_* for none known). */
    uint64_t (*next_use)(void *priv, uint32_t pg);
    /* How many schedule groups ((sequence, layer) pairs) from the current
     * one pg's next use is: 0 = the group being computed. KVT_USE_* for
     * none known, and for a policy without groups. */
    uint64_t (*group_of)(void *priv, uint32_t pg);
    /* Candidates of tier `from` that should move up next, soonest use
     * first and a group at a time (a group's pages in no particular order),
     * that wanted() accepts; at most max, into out. Returns count. */
    uint32_t (*prefetch)(void *priv, int from, kvt_usable_fn wanted, void *ctx, uint32_t *out,
                         uint32_t max);
    /* Pages one step of the schedule reads (0 = unknown). */
    uint64_t (*working_set)(void *priv);
    /* The next use, in next_use()'s units, of the page read `ahead` reads
     * into the schedule from the start of the current group, and in *group
     * its group_of(); KVT_USE_UNKNOWN (both) when that is past a whole step
     * or unknown. */
    uint64_t (*use_at)(void *priv, uint64_t ahead, uint64_t *group);

    /* --- sees calls (optional) --- */
    /* The pages of one kvt_get (KVT_BATCH_GET: those it served) or kvt_put
     * (KVT_BATCH_PUT: those it stored) call, in the caller's order, after
     * the call's own insert/access calls. A prefix cache passes a chain in
     * chain order: a put's keys are the blocks after the prefix it hit.
     * An entry may be KVT_NONE (a page that left meanwhile): skip it. */
    void (*batch)(void *priv, int kind, const uint32_t *pgs, size_t n);

    /* --- one order over every tier (optional) --- */
    /* Whether page a should leave the engine before page b, candidates of
     * any tiers (victim() answers within one tier). A cache that must drop
     * a page compares the bottom tier's victim with the one above it: the
     * lower-ranked goes, so a block about to be dropped anyway is not
     * written to SSD first (api/buffers.c, evict_one). */
    bool (*leaves_first)(void *priv, uint32_t a, uint32_t b);
};

extern const struct kvt_policy_ops kvt_policy_lru_ops;
extern const struct kvt_policy_ops kvt_policy_decode_ops;
extern const struct kvt_policy_ops kvt_policy_prefix_ops;
extern const struct kvt_policy_ops kvt_policy_arc_ops;

/* Whether o is a vtable this build can drive: this layout, the eviction
 * ops, and each capability whole or absent. */
bool kvt_policy_ops_ok(const struct kvt_policy_ops *o);

/* The policy called name, or NULL. */
const struct kvt_policy_ops *kvt_policy_find(const char *name);

#endif /* KVT_POLICY_H */
