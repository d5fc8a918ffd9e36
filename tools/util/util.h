/*
 * util.h — what the command (tools/) and the tests share, one copy each:
 * the monotonic clock (clock.c). Built as kvtier_util, a static library beside libkvtier,
 * never in it. The library keeps its own clock (core/base.h kvt_now_ns):
 * it must not depend on the tools.
 */
#ifndef KVT_TOOLS_UTIL_H
#define KVT_TOOLS_UTIL_H

#include <stdint.h>

/* ------------------------------------------------------------- clock.c */

/* CLOCK_MONOTONIC, in seconds and in nanoseconds: the same clock, so that
 * the two may be compared (and with pthread_cond_timedwait on a condition
 * variable set to CLOCK_MONOTONIC). */
double util_now(void);
uint64_t util_now_ns(void);

#endif /* KVT_TOOLS_UTIL_H */
