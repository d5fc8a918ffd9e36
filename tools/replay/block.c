/*
 * block.c — a trace block in the engine: its key, and its bytes as a
 * function of that key, so that every byte read back can be checked
 * without keeping a copy.
 *
 * Word w (bytes 8w..8w+7, native order) of the block of key k is
 * seed(k) ^ ((w + 1) * GOLDEN): one add per word to make and one xor to
 * check, which runs at memory speed (the replay writes and checks every
 * byte it moves, tens of GB). seed(k) mixes id and index through
 * splitmix64, so two keys differ in every word, and GOLDEN is odd, so two
 * offsets of one block never hold the same word: a block served under the
 * wrong key, shifted, or never written (zeros) is caught.
 */
#include <string.h>

#include "tools/replay/replay.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

static uint64_t splitmix64(uint64_t x)
{
    x += GOLDEN;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

kvt_key replay_key(uint64_t hash, uint32_t pos)
{
    return (kvt_key){ .id = hash, .layer = KVT_ALL_LAYERS, .index = pos };
}

static uint64_t block_seed(const kvt_key *k)
{
    return splitmix64(k->id ^ splitmix64(((uint64_t)k->layer << 32) | k->index));
}

void replay_fill(const kvt_key *k, void *p, size_t bytes)
{
    uint64_t seed = block_seed(k), acc = 0, *w = p;
    for (size_t i = 0; i < bytes / 8; i++) {
        acc += GOLDEN;
        w[i] = seed ^ acc;
    }
}

bool replay_check(const kvt_key *k, const void *p, size_t bytes, size_t *bad_off)
{
    const uint64_t seed = block_seed(k), *w = p;
    uint64_t acc = 0, diff = 0;
    size_t n = bytes / 8;
    /* One pass that only accumulates (vectorizes); the second, to find the
     * byte, runs only on a mismatch. */
    for (size_t i = 0; i < n; i++) {
        acc += GOLDEN;
        diff |= w[i] ^ (seed ^ acc);
    }
    if (!diff)
        return true;
    acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += GOLDEN;
        uint64_t want = seed ^ acc;
        if (w[i] != want) {
            const unsigned char *a = (const unsigned char *)&w[i], *b = (const unsigned char *)&want;
            size_t j = 0;
            while (j < 8 && a[j] == b[j])
                j++;
            *bad_off = i * 8 + j;
            return false;
        }
    }
    return true;
}
