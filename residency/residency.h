/*
 * residency.h — the residency layer's calls (internal): prefetch and the
 * mover thread.
 */
#ifndef KVT_RESIDENCY_H
#define KVT_RESIDENCY_H

#include "tiers/tiers.h"

/* ------------------------------------------------------------- prefetch.c, mover.c */

/* Brings the soonest-used pages up ahead of use (locked). */
void kvt_prefetch(kvt_engine *e);
/* The mover's condition variable (engine_alloc, engine_free). */
void kvt_mover_init(kvt_engine *e);
void kvt_mover_fini(kvt_engine *e);
int kvt_mover_start(kvt_engine *e);
void kvt_mover_stop(kvt_engine *e);
/* Wakes the mover when pages turned dirty and HBM is short of clean slots. */
void kvt_mover_kick(kvt_engine *e);
/* Wakes the mover for SSD work or prefetch. */
void kvt_mover_wake(kvt_engine *e);


/* ------------------------------------------------------------- stage.c */

/* Stages a read of pg, a page only on SSD with no transfer running, into a
 * DRAM slot, for kvt_get and kvt_acquire alike: a free slot or one stolen;
 * else, unless the call already waits for room (w set), room is made for
 * need pages (their write-backs go to the disk together), and with every
 * tier full the spare slot. Locked. 0: the read is queued; -EAGAIN: it
 * waits for room (*w, when this call set it); else why no slot could be had
 * (KVT_EFULL, or the room maker's error). */
int kvt_stage_ssd_read(kvt_engine *e, uint32_t pg, uint32_t need, struct kvt_wait *w);

#endif /* KVT_RESIDENCY_H */
