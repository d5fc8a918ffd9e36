/*
 * prefix_duel.h — shadow caches that choose how the prefix policy ranks
 * (internal to policy/prefix.c).
 *
 * The prefix policy ranks a block by last use + T·ln(odds of its class).
 * How large T should be, and which classes to tell apart, depends on the
 * workload: where a class's blocks come back far more often than another's
 * (shared documents against private questions) a large T keeps them through
 * bursts; where the classes are close (a chat's new turn is the next turn's
 * prefix) recency should decide; where a few documents are asked about again
 * and again, blocks used by many requests deserve a class of their own
 * (docs/sim.md#the-duel). A prefix cache's stream of block uses does not
 * depend on what the cache holds (each request uses every block of its
 * chain, hit or stored), so a cache of the same size run on the same stream
 * with another ranking hits about what the engine would have hit with it
 * (about: the engine's tiers may hold a block twice, the shadow holds it
 * once). The duel runs a few such shadows, on a sample of the keys when the
 * engine is large, scores each one's hits with old ones fading, and answers
 * the ranking of the one ahead.
 *
 * Owned by the prefix policy; called under the engine lock like it. The
 * policy calls, per kvt_get or kvt_put call it sees: kvt_duel_look for each
 * block (scoring, before any of the call's blocks is used), then
 * kvt_duel_use for each block as the policy uses it.
 */
#ifndef KVT_POLICY_PREFIX_DUEL_H
#define KVT_POLICY_PREFIX_DUEL_H

#include <stdint.h>

#include "base/base.h"

struct kvt_duel;

/* A duel for an engine of `slots` blocks, over `classes` classes (at most
 * 8); memory counted in *meta. Returns 0, -EINVAL or -ENOMEM. The caller
 * owns *out (kvt_duel_destroy, which takes NULL). */
int kvt_duel_create(uint64_t slots, int classes, uint64_t *meta, struct kvt_duel **out);
void kvt_duel_destroy(struct kvt_duel *d);

/* A block of the call: each shadow scores whether it holds it. */
void kvt_duel_look(struct kvt_duel *d, const kvt_key *key);

/* One use of key, as class cls, at the policy's clock now. lnodds holds
 * 2 x classes values: the log of each class's reuse odds with the classes
 * the policy may pool taken together (row 0), and apart (row 1); the
 * shadows share the policy's odds. A class outside 0..classes-1 is not
 * used. */
void kvt_duel_use(struct kvt_duel *d, const kvt_key *key, int cls, uint64_t now,
                  const double *lnodds);

/* The ranking of the shadow ahead: the class shift's scale in cache
 * multiples of the engine's slots (T = this times them), and which row of lnodds
 * (0 pooled, 1 apart). */
double kvt_duel_scale(const struct kvt_duel *d);
int kvt_duel_split(const struct kvt_duel *d);

/* Tests: the block hits ever of the shadow ranking by (scale, split), and
 * its blocks in *cap; UINT64_MAX when there is no such shadow. */
uint64_t kvt_duel_test_hits(const struct kvt_duel *d, double scale, int split, uint32_t *cap);

#endif /* KVT_POLICY_PREFIX_DUEL_H */
