/*
 * kv_mem.h — an in-memory transport for the shared tier's store (lab):
 * the values of a "cluster" that the engines of one test share, with
 * faults on demand. Handed to an engine through kvt_open_ex's
 * remote_kv / remote_kv_arg (or kvt_open_with_hooks).
 */
#ifndef KVT_LAB_KV_MEM_H
#define KVT_LAB_KV_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "store/remote_kv.h"

struct kvt_kv_mem;

extern const struct kvt_kv_ops kvt_kv_mem_ops;  /* arg: a struct kvt_kv_mem */

struct kvt_kv_mem *kvt_kv_mem_new(void);
void kvt_kv_mem_free(struct kvt_kv_mem *m);

/* The next `calls` calls (any op, any connection) answer every item with
 * res (-ETIMEDOUT: a node that does not answer; -ECONNREFUSED: one down). */
void kvt_kv_mem_fail(struct kvt_kv_mem *m, int res, unsigned calls);
/* Values held; sets, gets made. */
size_t kvt_kv_mem_count(struct kvt_kv_mem *m);
uint64_t kvt_kv_mem_sets(struct kvt_kv_mem *m);
/* Writes any bytes under name, as another client could (0 or -ENOMEM). */
int kvt_kv_mem_set_raw(struct kvt_kv_mem *m, const char *name, const void *val, size_t len);
/* A copy of name's value into buf (cap bytes): its length, or -ENOENT. */
long kvt_kv_mem_get_raw(struct kvt_kv_mem *m, const char *name, void *buf, size_t cap);
/* Drops every value (a store that evicted everything). */
void kvt_kv_mem_clear(struct kvt_kv_mem *m);
/* The name of the i-th value held (in the order first set), or NULL. */
const char *kvt_kv_mem_name(struct kvt_kv_mem *m, size_t i);

#endif /* KVT_LAB_KV_MEM_H */
