/*
 * presets.c — model shape presets and the KV bytes a shape stores per token.
 *
 * The numbers are the models' published config.json values (num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim or hidden_size /
 * num_attention_heads; kv_lora_rank, qk_rope_head_dim and qk_nope_head_dim
 * for MLA). A wrong
 * number here makes every figure `plan` and `run` print wrong while looking
 * plausible, so tests/test_plan.c checks each preset's bytes per token
 * against arithmetic done by hand.
 */
#include <errno.h>
#include <strings.h>

#include "tools/cli.h"
#include "tools/presets.h"

static const struct kvt_shape presets[] = {
    /* name            layers  q   kv  dim  lora rope dtype   attn  nope */
    { "llama3-8b",        32,  32,  8, 128,   0,  0, "bf16", "gqa",    0 },
    { "llama3-70b",       80,  64,  8, 128,   0,  0, "bf16", "gqa",    0 },
    { "llama3.1-405b",   126, 128,  8, 128,   0,  0, "bf16", "gqa",    0 },
    { "qwen2.5-7b",       28,  28,  4, 128,   0,  0, "bf16", "gqa",    0 },
    { "mistral-7b",       32,  32,  8, 128,   0,  0, "bf16", "gqa",    0 },
    /* MHA: every query head has its own K and V. */
    { "llama2-7b",        32,  32, 32, 128,   0,  0, "fp16", "mha",    0 },
    /* MQA: one K and V head shared by 71 query heads (hidden 4544 / 71 = 64). */
    { "falcon-7b",        32,  71,  1,  64,   0,  0, "bf16", "mqa",    0 },
    /* MLA caches the compressed latent (512) and the shared RoPE key (64)
     * per token and layer; nothing per head, so kv_heads and head_dim are 0. */
    { "deepseek-v3",      61, 128,  0,   0, 512, 64, "bf16", "mla",  128 },
};

#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

const struct kvt_shape *kvt_preset_find(const char *name)
{
    for (size_t i = 0; name && i < NPRESETS; i++)
        if (!strcasecmp(presets[i].name, name))
            return &presets[i];
    return NULL;
}

const struct kvt_shape *kvt_preset_at(size_t i)
{
    return i < NPRESETS ? &presets[i] : NULL;
}

void kvt_preset_list(FILE *f, const char *indent)
{
    char b[32];
    for (size_t i = 0; i < NPRESETS; i++) {
        const struct kvt_shape *s = &presets[i];
        uint64_t tok = 0;
        kvt_kv_bytes_per_token(s, kvt_dtype_bits(s->dtype), &tok);
        fprintf(f, "%s%-14s %s  %3u layers, ", indent, s->name, s->attn, s->layers);
        if (kvt_shape_is_mla(s))
            fprintf(f, "%u q heads, latent %u + rope %u", s->q_heads, s->kv_lora_rank,
                    s->rope_dim);
        else
            fprintf(f, "%u q / %u kv heads x %u", s->q_heads, s->kv_heads, s->head_dim);
        fprintf(f, ", %s: %s/token\n", s->dtype, cli_bytes(b, sizeof b, (double)tok));
    }
}

const char *kvt_shape_attn(const struct kvt_shape *s)
{
    if (kvt_shape_is_mla(s))
        return "mla";
    if (s->kv_heads == 1)
        return "mqa";
    if (s->q_heads && s->kv_heads == s->q_heads)
        return "mha";
    return "gqa";
}

unsigned kvt_dtype_bits(const char *dtype)
{
    static const struct {
        const char *name;
        unsigned bits;
    } t[] = {
        { "fp32", 32 }, { "fp16", 16 }, { "bf16", 16 }, { "fp8", 8 }, { "int8", 8 }, { "int4", 4 },
    };
    for (size_t i = 0; dtype && i < sizeof(t) / sizeof(t[0]); i++)
        if (!strcasecmp(t[i].name, dtype))
            return t[i].bits;
    return 0;
}

/* Rows per token and layer (2: K and V; 1: the MLA latent) and elements per
 * row; -EINVAL for a shape missing a dimension. */
static int shape_rows(const struct kvt_shape *s, unsigned *rows, uint64_t *elems)
{
    if (!s->layers)
        return -EINVAL;
    if (kvt_shape_is_mla(s)) {
        *rows = 1;
        *elems = (uint64_t)s->kv_lora_rank + s->rope_dim;
        return 0;
    }
    if (!s->kv_heads || !s->head_dim)
        return -EINVAL;
    *rows = 2;
    *elems = (uint64_t)s->kv_heads * s->head_dim; /* two 32-bit factors: fits */
    return 0;
}

int kvt_kv_bytes_per_token_layer(const struct kvt_shape *s, unsigned bits, uint64_t *out)
{
    if (bits != 4 && bits != 8 && bits != 16 && bits != 32)
        return -EINVAL;
    unsigned rows;
    uint64_t elems, row_bits;
    int r = shape_rows(s, &rows, &elems);
    if (r)
        return r;
    if (__builtin_mul_overflow(elems, (uint64_t)bits, &row_bits))
        return -EOVERFLOW;
    /* A row is whole bytes (see the header): round up, once per row. */
    uint64_t row_bytes = row_bits / 8 + (row_bits % 8 != 0);
    if (__builtin_mul_overflow(row_bytes, (uint64_t)rows, out))
        return -EOVERFLOW;
    return 0;
}

int kvt_kv_bytes_per_token(const struct kvt_shape *s, unsigned bits, uint64_t *out)
{
    uint64_t per_layer;
    int r = kvt_kv_bytes_per_token_layer(s, bits, &per_layer);
    if (r)
        return r;
    if (__builtin_mul_overflow(per_layer, (uint64_t)s->layers, out))
        return -EOVERFLOW;
    return 0;
}
