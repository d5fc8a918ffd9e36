/*
 * block.c — a trace block in the engine: its key, and its bytes as a
 * function of that key (the page pattern of tools/util/util.h, at one
 * version: a block is written once), so that every byte read back can be
 * checked without keeping a copy, at memory speed (the replay writes and
 * checks every byte it moves, tens of GB).
 */
#include "tools/replay/replay.h"
#include "tools/util/util.h"

/* Blocks are put once, never overwritten: one version for all. */
#define REPLAY_VERSION 1

kvt_key replay_key(uint64_t hash, uint32_t pos)
{
    return (kvt_key){ .id = hash, .layer = KVT_ALL_LAYERS, .index = pos };
}

void replay_fill(const kvt_key *k, void *p, size_t bytes)
{
    util_pattern_fill(p, bytes, *k, REPLAY_VERSION);
}

bool replay_check(const kvt_key *k, const void *p, size_t bytes, size_t *bad_off)
{
    size_t off = util_pattern_diff(p, bytes, *k, REPLAY_VERSION, false);
    if (off == bytes)
        return true;
    *bad_off = off;
    return false;
}
