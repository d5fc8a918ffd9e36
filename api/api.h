/*
 * api.h — the API layer's own calls (internal): open with back-ends, the
 * capacity, and the local put/get under the shared tier; what the lab and
 * the tests reach beyond include/kvtier.h.
 */
#ifndef KVT_API_H
#define KVT_API_H

#include "residency/residency.h"

/* ------------------------------------------------------------- engine.c */

/* kvt_open with back-ends (NULL: none). */
int kvt_open_ex(const kvt_config *cfg, const struct kvt_open_with *with, kvt_engine **out);
/* The device back-end's private state (tests fail host batches through it). */
void *kvt_engine_device_priv(kvt_engine *e);
/* Tests only: how long a put waits in all for other calls to let go
 * (buffers.c; 0: 10 s). */
extern uint64_t kvt_test_let_go_max_ns;

/* ------------------------------------------------------------- manager.c */

/* Pages the engine may hold: HBM + DRAM + SSD, or with persist what the
 * SSD holds durably. */
uint64_t kvt_capacity(const kvt_engine *e);
/* 0 when one more page fits in the engine's capacity, else KVT_EFULL. */
int kvt_admit(kvt_engine *e);
/* How many more pages fit in the engine's capacity (HBM + DRAM + SSD slots,
 * less DRAM's spare; with persist, the SSD's durable room). */
uint64_t kvt_room(const kvt_engine *e);

/* ------------------------------------------------------------- buffers.c */

/* KVT_FLAG_EVICT: drops one whole page, the policy's victim from the bottom
 * tier up, for room. 0, or KVT_EFULL (flag off, or every page held).
 * Locked. */
int kvt_evict_one(kvt_engine *e);
/* buffers.c: the condition variable puts wait on for a slot (struct
 * kvt_slot_wait), engine_alloc to engine_free. */
void kvt_slots_init(kvt_engine *e);
void kvt_slots_fini(kvt_engine *e);
/* A slot may be had that could not a moment ago: the puts waiting for one
 * look again (registered as kvt_up_calls.slot_let_go). */
void kvt_slots_let_go(kvt_engine *e);
/* Stages a read of pg, a page only on SSD with no transfer running, into a
 * DRAM slot, for kvt_get and kvt_acquire alike: a free slot or one stolen;
 * else, unless the call already waits for room (w set), room is made for
 * need pages (their write-backs go to the disk together), and with every
 * tier full the spare slot. Locked. 0: the read is queued; -EAGAIN: it
 * waits for room (*w, when this call set it); else why no slot could be had
 * (KVT_EFULL, or the room maker's error). */
int kvt_stage_ssd_read(kvt_engine *e, uint32_t pg, uint32_t need, struct kvt_wait *w);
/* Frees the engine's kvt_get records (close: no get runs). */
void kvt_get_recs_free(kvt_engine *e);
/* kvt_put, kvt_get and kvt_exists on the local tiers only: api/shared.c
 * adds the shared tier around them. */
int kvt_put_local(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src,
                  int src_on_device);
int kvt_get_local(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
                  int dst_on_device, int *found);
int kvt_exists_local(kvt_engine *e, const kvt_key *keys, size_t n, kvt_tier *where);


#endif /* KVT_API_H */
