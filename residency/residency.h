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
/* Whether the calling thread is e's mover (KVT_ASSERT_MOVER). */
bool kvt_mover_is_self(const kvt_engine *e);


#endif /* KVT_RESIDENCY_H */
