/*
 * presets.h — model shapes and what their KV cache costs, for the kvtier
 * command (`plan` now, `run` later).
 *
 * Two parts:
 *   - tools/presets.c: the shape presets (published config.json values), the
 *     dtypes, and the KV bytes a shape stores per token;
 *   - tools/plan.c: the sizing of `kvtier plan` over the tiers — the split of
 *     the KV over HBM, DRAM and SSD capacities and the decode-step bound that
 *     split implies at given link bandwidths.
 *
 * Sizes are bytes; bandwidths are GB/s (1e9 bytes per second) as link
 * specifications and `kvtier bench` state them.
 */
#ifndef KVT_PRESETS_H
#define KVT_PRESETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------- shapes */

/* The part of a model's config that decides its KV cache. An MLA shape
 * (kv_lora_rank > 0) caches one latent row of kv_lora_rank + rope_dim per
 * token and layer, whatever its head counts; any other shape caches a K row
 * and a V row of kv_heads x head_dim. attn is "mha", "gqa", "mqa" or "mla". */
struct kvt_shape {
    const char *name;
    uint32_t layers, q_heads, kv_heads, head_dim;
    uint32_t kv_lora_rank, rope_dim; /* MLA when kv_lora_rank > 0 */
    const char *dtype;               /* the dtype the model's KV is usually kept in */
    const char *attn;
    uint32_t qk_nope_dim;            /* MLA: each head's query/key width without RoPE (the
                                        scores' scale is 1/sqrt(qk_nope_dim + rope_dim)) */
};

/* The presets, in a static table; the pointers stay valid for the program's
 * life. NULL when the name is unknown (exact, case-insensitive). */
const struct kvt_shape *kvt_preset_find(const char *name);
/* The i-th preset, or NULL past the end: for listing. */
const struct kvt_shape *kvt_preset_at(size_t i);
/* One line per preset ("  llama3-8b  gqa  32 layers ..."), each after indent. */
void kvt_preset_list(FILE *f, const char *indent);

static inline bool kvt_shape_is_mla(const struct kvt_shape *s) { return s->kv_lora_rank > 0; }

/* "mla", "mqa", "mha" or "gqa" from the shape's numbers: what a shape
 * becomes after its heads are overridden. MHA needs q_heads known (> 0). */
const char *kvt_shape_attn(const struct kvt_shape *s);

/* Bits per element of a KV dtype: fp32 32; fp16, bf16 16; fp8, int8 8;
 * int4 4. 0 when the name is unknown. Case-insensitive. */
unsigned kvt_dtype_bits(const char *dtype);

/* KV bytes one token stores in one layer, into *out. A row (one token's K,
 * or V, or MLA latent, in one layer) is packed into whole bytes: an int4 row
 * of an odd element count is rounded up by half a byte, because kernels
 * address rows, so two rows never share a byte. Returns 0, -EINVAL for a
 * shape with a zero dimension or a bits value that is not 4/8/16/32,
 * -EOVERFLOW when the product does not fit 64 bits. */
int kvt_kv_bytes_per_token_layer(const struct kvt_shape *s, unsigned bits, uint64_t *out);
/* The same over all layers: layers x kvt_kv_bytes_per_token_layer. */
int kvt_kv_bytes_per_token(const struct kvt_shape *s, unsigned bits, uint64_t *out);

/* ------------------------------------------------------------- plan */

enum { PLAN_HBM, PLAN_DRAM, PLAN_SSD, PLAN_TIERS };
/* A tier capacity that holds anything (HBM when no capacity is given). */
#define PLAN_UNBOUNDED UINT64_MAX

/* What `kvtier plan` is asked. gbps[] is indexed by link: PLAN_HBM the
 * attention kernel reading HBM, PLAN_DRAM the DRAM->HBM (host-to-device)
 * link, PLAN_SSD the SSD read. */
struct plan_in {
    struct kvt_shape shape;
    unsigned bits;
    uint64_t context, batch, page_tokens;
    uint64_t cap[PLAN_TIERS];
    double gbps[PLAN_TIERS];
};

/* What it answers. Pages are layer-first (one layer's page_tokens tokens,
 * kvtier's layout for layer-wise prefetch) or page-first (all layers). */
struct plan_out {
    uint64_t per_token, per_token_layer, per_layer_seq, per_seq, total;
    uint64_t page_bytes_layer, pages_per_layer, pages_per_seq_layer_first;
    uint64_t page_bytes_all; /* page-first page; there are pages_per_layer per sequence */
    uint64_t split[PLAN_TIERS], unplaced;
    double term_s[PLAN_TIERS]; /* time each link needs per decode step */
    int bound_by;              /* PLAN_* of the largest term */
    double bound_s, tokens_per_s;
};

/* Fills o from in. When part of the KV fits no tier (o->unplaced > 0) no
 * decode can run, so there is no bound: term_s[], bound_s and tokens_per_s
 * stay 0. Returns 0, or -EINVAL (a zero dimension, context, batch,
 * page_tokens or a bandwidth not above 0) or -EOVERFLOW (a size past 64
 * bits); on error *o is unspecified. */
int plan_compute(const struct plan_in *in, struct plan_out *o);

/* Places total bytes in HBM first, then DRAM, then SSD. Each tier holds whole
 * pages of page_bytes (its capacity rounded down to a page), because the
 * arenas are page slots; a tier with PLAN_UNBOUNDED takes everything left. The
 * last piece placed may be part of a page. split[] and *unplaced sum to total. */
void plan_split(uint64_t total, uint64_t page_bytes, const uint64_t cap[PLAN_TIERS],
                uint64_t split[PLAN_TIERS], uint64_t *unplaced);

/* The decode-step lower bound of a split: every KV byte is read once per
 * step, so terms are HBM total/gbps[HBM] (attention reads every byte from HBM,
 * streamed pages land there first), DRAM->HBM (dram+ssd)/gbps[DRAM] (the SSD
 * stream reaches HBM over the same link) and SSD ssd/gbps[SSD]. The streams
 * are assumed to overlap fully, so the step lasts as long as the slowest.
 * Fills term_s[], *bound_by and returns the bound in seconds. */
double plan_bound(const uint64_t split[PLAN_TIERS], const double gbps[PLAN_TIERS],
                  double term_s[PLAN_TIERS], int *bound_by);

/* Reads {"h2d_gbps": X, "ssd_read_gbps": Y} as `kvtier bench` leaves it in
 * path (jansson; its first 64 KiB, the object's own keys). Sets *h2d / *ssd
 * to the positive values found and leaves the others. Returns a mask of
 * what was found (1 h2d, 2 ssd; 0 for a file that is not a JSON object), or
 * -errno when the file cannot be read. */
int plan_read_bench(const char *path, double *h2d, double *ssd);

#endif
