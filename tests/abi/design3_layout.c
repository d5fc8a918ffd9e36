/*
 * design3_layout.c — offsets and sizes of the structs of the first published
 * API (docs/api.md), from its code block verbatim (design3.h); see design3_layout.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "design3.h"
#include "design3_layout.h"

#define CONFIG_OFFSET(f) offsetof(kvt_config, f),
#define STATS_OFFSET(f) offsetof(kvt_stats, f),

const size_t design3_config_offsets[DESIGN3_CONFIG_NFIELDS] = {DESIGN3_CONFIG_FIELDS(CONFIG_OFFSET)};
const size_t design3_stats_offsets[DESIGN3_STATS_NFIELDS] = {DESIGN3_STATS_FIELDS(STATS_OFFSET)};
const size_t design3_config_size = sizeof(kvt_config);
const size_t design3_stats_size = sizeof(kvt_stats);
