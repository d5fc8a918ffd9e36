/*
 * api.h — the API layer's own calls (internal): open with back-ends, the
 * capacity, and the local put/get under the shared tier; what the lab and
 * the tests reach beyond include/kvtier.h.
 */
#ifndef KVT_API_H
#define KVT_API_H

#include "room/room.h"

/* ------------------------------------------------------------- engine.c */

/* kvt_open with back-ends (NULL: none). */
int kvt_open_ex(const kvt_config *cfg, const struct kvt_open_with *with, kvt_engine **out);
/* The device back-end's private state (tests fail host batches through it). */
void *kvt_engine_device_priv(kvt_engine *e);

/* ------------------------------------------------------------- buffers.c */

/* Frees the engine's kvt_get records (close: no get runs). */
void kvt_get_recs_free(kvt_engine *e);
/* kvt_put, kvt_get and kvt_exists on the local tiers only: api/shared.c
 * adds the shared tier around them. */
int kvt_put_local(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src,
                  int src_on_device);
/* kvt_get with a shared tier (shared.c): the local get, then the cluster
 * for the pages it did not find. */
int kvt_get_shared(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                   int dst_on_device, int *found);
int kvt_get_local(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                  int dst_on_device, int *found);
int kvt_exists_local(kvt_engine *e, const kvt_key *keys, size_t n, kvt_tier *where);


#endif /* KVT_API_H */
