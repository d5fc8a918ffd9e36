/*
 * abi.h — the engine's calls on its own full-size kvt_config and kvt_stats
 * (internal, not installed).
 *
 * engine.c defines them; api/abi.c, the one place that handles the size a
 * caller's struct was compiled with, adapts the public *_sized calls to them
 * (include/kvtier.h, "growable structs"). Nothing else calls them: code in
 * the library uses the public names, whose size is this build's own.
 */
#ifndef KVT_ABI_H
#define KVT_ABI_H

#include "include/kvtier.h"

/* Fills all of *cfg with the defaults kvtier.h documents. */
void kvt_config_defaults(kvt_config *cfg);

/* 0, or KVT_ECONFIG / KVT_ENOTSUP / -EINVAL with kvt_last_error() naming the
 * field. cfg may be NULL (-EINVAL). */
int kvt_config_validate(const kvt_config *cfg);

/* A consistent snapshot of a valid engine's counters into all of *out. */
int kvt_engine_stats(kvt_engine *e, kvt_stats *out);

#endif /* KVT_ABI_H */
