/*
 * kvgen.c — `kvtier run`'s data: the KV and the queries as a function of
 * (seed, sequence, layer, token, head, dim), written into pages in
 * attention.h's layout, and the hash the decode keeps of each output so
 * that the reference compares without holding the outputs (run.h).
 */
#include <string.h>

#include "tools/run/run_priv.h"

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/* K has the structure real keys have (KIVI, KVQuant measure it): a few
 * channels of every head far larger than the rest, the same channels for
 * every token, and off zero. Here one in 32 (channels 5, 37, ...) is 8 times
 * the others and 4 off zero, alternately up and down (docs/codecs.md#test-data).
 * A power of two and a small offset keep the values exact in bf16's
 * rounding as before. */
#define KV_OUTLIER_EVERY 32
#define KV_OUTLIER_AT 5

float run_kv_value(uint64_t seed, uint32_t seq, uint32_t layer, uint32_t token, uint32_t head,
                   uint32_t dim, int kind)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + mix64(((uint64_t)seq << 32 | layer) + 0x1234567ull);
    x = mix64(x ^ ((uint64_t)token << 24 | (uint64_t)head << 12 | dim) ^ ((uint64_t)kind << 62));
    /* 24 bits: exact in a float, so the value does not depend on rounding */
    float v = (float)((int32_t)(x >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
    if (kind == 0 && dim % KV_OUTLIER_EVERY == KV_OUTLIER_AT)
        v = 8.0f * v + ((dim / KV_OUTLIER_EVERY) % 2 ? 4.0f : -4.0f);
    return v;
}

void run_kv_row(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                uint32_t token, uint32_t h, int kind, float *row)
{
    for (uint32_t d = 0; d < s->head_dim; d++) {
        float v = run_kv_value(seed, seq, layer, token, h, d, kind);
        row[d] = s->dtype == ATTN_F32 ? v : attn_round_bf16(v);
    }
}

void run_k_scales(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                  uint32_t page, uint32_t ntok, uint32_t h, void *p)
{
    float row[ATTN_MAX_HEAD_DIM], st[3 * ATTN_MAX_HEAD_DIM];
    for (uint32_t t = 0; t < ntok; t++) {
        run_kv_row(s, seed, seq, layer, page * s->page_tokens + t, h, 0, row);
        attn_k_stats(s, st, t, row);
    }
    attn_k_scales_set(s, p, h, st);
}

void run_fill_page(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                   uint32_t page, uint32_t ntok, uint32_t h0, uint32_t h1, void *p)
{
    float row[ATTN_MAX_HEAD_DIM];
    for (int kind = 0; kind < (int)attn_kinds(s); kind++)
        for (uint32_t h = h0; h < h1; h++) {
            if (attn_per_channel(s, kind) && ntok)
                run_k_scales(s, seed, seq, layer, page, ntok, h, p);
            for (uint32_t t = 0; t < ntok; t++) {
                run_kv_row(s, seed, seq, layer, page * s->page_tokens + t, h, kind, row);
                attn_store_row(s, p, kind, h, t, row);
            }
        }
}

void run_fill_query(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                    uint32_t pos, float *q)
{
    for (uint32_t qh = 0; qh < s->q_heads; qh++)
        for (uint32_t d = 0; d < s->head_dim; d++)
            q[(size_t)qh * s->head_dim + d] = 4.0f * run_kv_value(seed, seq, layer, pos, qh, d, 2);
}

uint64_t run_hash_head(const float *o, uint32_t D)
{
    uint64_t h = 0xCBF29CE484222325ull;
    const unsigned char *b = (const unsigned char *)o;
    for (size_t i = 0; i < (size_t)D * sizeof(float); i++)
        h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}
