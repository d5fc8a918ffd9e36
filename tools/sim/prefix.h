/*
 * prefix.h — `kvtier sim` on prefix-cache request traces (tools/sim/prefix.c).
 */
#ifndef KVT_SIM_PREFIX_H
#define KVT_SIM_PREFIX_H

#include <stdbool.h>

/* Whether argv's --trace names a prefix-cache trace (JSONL: its first
 * character is '{'), which sim_prefix_main runs. */
bool sim_prefix_wanted(int argc, char **argv);
/* `kvtier sim` for those traces: 0, 1 (an error), 2 (a usage error). */
int sim_prefix_main(int argc, char **argv);

#endif
