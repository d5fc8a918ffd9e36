/*
 * room.h — the room layer's calls (internal): capacity and admission,
 * evicting the policy's victim, a slot for a new page, and the waits of puts
 * for other calls to let go (room.c). The API's put and acquire call it;
 * it calls the residency layer and below.
 */
#ifndef KVT_ROOM_H
#define KVT_ROOM_H

#include "residency/residency.h"

/* Pages the engine may hold: HBM + DRAM + SSD, or with persist what the
 * SSD holds durably. */
uint64_t kvt_capacity(const kvt_engine *e);
/* 0 when one more page fits in the engine's capacity, else KVT_EFULL. */
int kvt_admit(kvt_engine *e);
/* How many more pages fit in the engine's capacity (HBM + DRAM + SSD slots,
 * less DRAM's spare; with persist, the SSD's durable room). */
uint64_t kvt_room(const kvt_engine *e);

/* KVT_FLAG_EVICT: drops one whole page, the policy's victim from the bottom
 * tier up, for room. 0, or KVT_EFULL (flag off, or every page held).
 * Locked. */
int kvt_evict_one(kvt_engine *e);

/* A full cache storing n pages (keys) makes room for all of them before
 * the first (locked; may wait unlocked): the DRAM slots still short once
 * the victims' writes are queued (at most that many are on their way), 0
 * when there is nothing to do or it cannot be done. *tight: room for the
 * new keys only, so an overwrite gives its old page up first. */
uint32_t kvt_room_ahead(kvt_engine *e, const kvt_key *keys, size_t n, bool *tight);

/* Why no HBM or DRAM slot can be had for a put, once kvt_room_slot's other
 * ways (a free slot, one stolen, a write-back, HBM) failed. */
enum kvt_slot_hold {
    KVT_SLOTS_FREEABLE, /* a cache's idle page holds one: dropping pages frees it */
    KVT_SLOTS_CALLS,    /* none idle, some held by other calls for their own time
                           (read or staged, another put's reservation, a copy in
                           flight): one frees when such a call ends */
    KVT_SLOTS_HELD,     /* held until someone lets go (pinned by kvt_acquire; in an
                           engine without KVT_FLAG_EVICT, stored) */
};

/* A slot for new page pg (locked; may wait unlocked): DRAM first, else HBM;
 * 0 and *tier, or an error. *coming: slots kvt_room_ahead set on their way;
 * own: slots the calling put's batch holds. On KVT_EFULL, *hold says why. */
int kvt_room_slot(kvt_engine *e, uint32_t pg, int *tier, uint32_t *coming, size_t own,
                  enum kvt_slot_hold *hold);

/* Waits (locked; unlocked while waiting) until a page is let go or a moment
 * passed, adding the time to *waited (a whole kvt_put's); false without
 * waiting once that reached its bound (10 s), or when the engine failed. */
bool kvt_room_wait_let_go(kvt_engine *e, uint64_t *waited);
/* Tests only: that bound (0: 10 s). */
extern uint64_t kvt_test_let_go_max_ns;

/* The condition variable puts wait on for a slot (struct kvt_slot_wait),
 * engine_alloc to engine_free. */
void kvt_slots_init(kvt_engine *e);
void kvt_slots_fini(kvt_engine *e);
/* A slot may be had that could not a moment ago: the puts waiting for one
 * look again (registered as kvt_up_calls.slot_let_go). */
void kvt_slots_let_go(kvt_engine *e);

#endif /* KVT_ROOM_H */
