/*
 * design3_layout.h — the fields of the first published API's kvt_config
 * and kvt_stats, and their offsets and sizes as design3.h's own
 * declarations lay them out. test_abi.c checks that the VER0 part of include/kvtier.h's structs is
 * that layout, field for field. The offsets come from design3_layout.c, a
 * translation unit of their own: the two headers define the same struct
 * names differently.
 */
#ifndef KVT_DESIGN3_LAYOUT_H
#define KVT_DESIGN3_LAYOUT_H

#include <stddef.h>

#define DESIGN3_CONFIG_FIELDS(X)                                                       \
    X(page_bytes) X(hbm_bytes) X(dram_bytes) X(ssd_bytes) X(ssd_dir) X(device) X(policy) \
    X(codec) X(persist) X(fingerprint) X(io_backend) X(queue_depth)

#define DESIGN3_STATS_FIELDS(X)                                                        \
    X(resident_pages) X(hits) X(misses) X(bytes_up) X(bytes_down) X(stall_ns)          \
    X(errors_io) X(errors_corrupt)

#define DESIGN3_COUNT(f) +1
enum {
    DESIGN3_CONFIG_NFIELDS = 0 DESIGN3_CONFIG_FIELDS(DESIGN3_COUNT),
    DESIGN3_STATS_NFIELDS = 0 DESIGN3_STATS_FIELDS(DESIGN3_COUNT),
};

extern const size_t design3_config_offsets[DESIGN3_CONFIG_NFIELDS];
extern const size_t design3_stats_offsets[DESIGN3_STATS_NFIELDS];
extern const size_t design3_config_size, design3_stats_size;

#endif /* KVT_DESIGN3_LAYOUT_H */
