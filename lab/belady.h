/*
 * belady.h — Belady's MIN over a recorded access trace (internal).
 *
 * An offline policy, for evaluation only (`kvtier sim`): it is given the
 * whole future sequence of page uses before the run and evicts the candidate
 * whose next use is furthest away (never used again counts as furthest).
 * Demand paging with MIN moves the fewest pages any policy can move on that
 * trace, which makes it the yardstick the decode policy is held to
 * (tests/test_decode.c; the figures: docs/performance.md#decode-policy-against-min).
 *
 * Through the policy interface (policy.h) it behaves like any policy, with
 * one rule the driver must follow: every use in the trace is reported as an
 * access() to the HBM tier (KVT_TIER_HBM), in trace order; that is what
 * moves its position in the trace. Accesses reported for lower tiers only
 * refresh recency. A use that does not match the position re-synchronises to
 * the page's next use (the uses in between count as done).
 *
 * Without a loaded trace every page is "never used again" and ties go to the
 * least recently used, so it degrades to LRU. (The engine refuses "belady"
 * in a config: nothing there can give it the future.)
 */
#ifndef KVT_BELADY_H
#define KVT_BELADY_H

#include <stddef.h>

#include "policy/policy.h"

extern const struct kvt_policy_ops kvt_policy_belady_ops;

/* Gives the policy instance priv (made by kvt_policy_belady_ops.create) the
 * future: accesses[0..n-1], the keys of every page use in order. The array
 * is read during the call only. Pages inserted before the call are looked up
 * again through the host's key_of (when there is one). The position starts
 * at accesses[0]. O(n) time; 8 bytes per access plus 32 per distinct key.
 * Returns 0; -ENOMEM or -EOVERFLOW (n >= 2^32 - 1), in which case the
 * previous trace (if any) stays. */
int kvt_belady_load(void *priv, const kvt_key *accesses, size_t n);

#endif /* KVT_BELADY_H */
