/*
 * sim_priv.h — what the files of tools/sim/ share and callers do not
 * (callers use tools/sim/sim.h).
 */
#ifndef KVT_SIM_PRIV_H
#define KVT_SIM_PRIV_H

#include <stdarg.h>

#include "policy/policy.h"
#include "tools/sim/sim.h"

/* Writes the message into err (when err and n) and returns -EINVAL. */
int sim_seterr(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Appends a record to t. 0, -ENOMEM, or -E2BIG past SIM_MAX_RECORDS. */
int sim_trace_push(struct sim_trace *t, uint8_t kind, uint64_t id, uint32_t layer,
                   uint32_t index, uint32_t line);

/* The world (tools/sim/world.c), as the simulator (tools/sim/model.c) reads it. */
struct sim_world {
    const struct sim_trace *t;
    uint32_t np;
    kvt_key *keys;       /* [np] page -> key; pages numbered in order of first mention */
    uint8_t *pre;        /* [np] 1: exists before the trace (first mentioned by an access) */
    uint32_t *tab, tmask; /* key -> page + 1 */
    uint32_t *rec_pg;    /* [t->n] page of an access or new record, KVT_NONE for others */
    kvt_key *acc_keys;   /* [t->accesses] every use in order: Belady's future */
    /* Pages of each id, chained: for drop. */
    uint64_t *id_val;
    uint32_t *id_head, *id_tab, id_mask, n_idv;
    uint32_t *pg_next;   /* [np] next page of the same id */
    uint64_t max_group;
    uint64_t *sched_ids; /* the schedule's ids, sorted: advance checks */
};

/* The page of key k, or KVT_NONE when the trace never names it. */
uint32_t sim_world_find(const struct sim_world *w, const kvt_key *k);
/* The slot of id in the id table (its index in id_val), or KVT_NONE. */
uint32_t sim_world_id(const struct sim_world *w, uint64_t id);

#endif /* KVT_SIM_PRIV_H */
