/*
 * sched_attr.h — the kernel's struct sched_attr (internal), for
 * sched_setattr/sched_getattr: linux/sched/types.h clashes with glibc's
 * sched.h, so it is spelled out here once. The size field versions it.
 * io/sched_hint.c sets it; tests/test_io.c reads it back.
 */
#ifndef KVT_SCHED_ATTR_H
#define KVT_SCHED_ATTR_H

#include <stdint.h>

struct kvt_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
    uint32_t sched_util_min;
    uint32_t sched_util_max;
};

#endif /* KVT_SCHED_ATTR_H */
