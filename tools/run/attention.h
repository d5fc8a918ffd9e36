/*
 * attention.h — CPU decode attention of one query over KV pages, for
 * `kvtier run` on the host back-end: MHA, GQA and MQA with any number of
 * query heads per K/V head, MLA in its absorbed form, a sliding window, and
 * KV stored as fp32, bf16, or quantised (fp8 e4m3, int8, int4) with its
 * scales in the page.
 *
 * Page layout (layer-first: one page is page_tokens tokens of one sequence
 * and one layer):
 *     K rows [kv_heads][page_tokens]  then  V rows [kv_heads][page_tokens]
 *     then, for a quantised dtype, the scales of those rows in that order,
 * then zero padding up to page_bytes (a multiple of 4096, kvtier's rule).
 * A row is head_dim elements. MLA (mla = 1, one K/V head) has no V rows:
 * its row is one token's latent (v_dim wide, 512 for DeepSeek-V3) followed
 * by its RoPE key (head_dim - v_dim, 64), and V is the latent, the row's
 * first v_dim elements — the absorbed form (docs/run.md#mla).
 * Quantised to int8 or int4, K is scaled per channel and V per token, as
 * KIVI does: K has outlier channels (a few channels far larger than the
 * rest, the same for every token), and a scale shared along a K row would
 * follow them and coarsen every other channel. A kv head's K block (MLA:
 * its rows) has one scale per channel over the page's tokens written so
 * far. A V row, and every fp8 row (floating codes: a scale only sets their
 * range; K per channel measured worse, docs/run.md#quantised-kv), is split
 * into groups of ATTN_QGROUP elements along head_dim, each with its own. A
 * scale is one fp32 (fp8, int8: value = q * scale) or two, scale and
 * minimum (int4, asymmetric: value = q * scale + min); int4 packs element
 * 2i of a row in the low nibble of byte i. The scales lie after the rows:
 * every kv head's K channel scales [kv_heads][head_dim] (int8, int4), then
 * the per-row scales in the rows' order.
 *
 * The arithmetic is fp32 whatever the dtype: an element is widened (bf16:
 * exactly) or dequantised (attn_math.h's attn_deq: one rounded multiply,
 * and an add for int4) into fp32, and the bits a page computes depend only
 * on its values.
 *
 * The kernel streams the pages once (online softmax, as flash-decoding
 * does): per page, scores of the page's tokens, a running maximum, the
 * running sum and output rescaled. The float operations and their order
 * depend only on the shape, the token count and the values, never on where
 * the pages live or which thread runs a head, so two calls over equal values
 * give equal bits: that is what lets `run` check the tiers bit-exactly
 * against a reference that regenerates the KV page by page.
 *
 * Work is split in units: a unit is up to ATTN_QBLOCK query heads of one
 * K/V head (a K/V head with more query heads than that, as MQA's 71 or
 * MLA's 128, is several units). Each unit's heads are computed the same way
 * whichever part runs them, so any split gives the same bits.
 */
#ifndef KVT_ATTENTION_H
#define KVT_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ATTN_MAX_PAGE_TOKENS 256u
#define ATTN_QBLOCK 16u       /* q heads per unit: the scores of a page for them fit the stack */
#define ATTN_MAX_HEAD_DIM 576u /* MLA's 512 + 64 */
#define ATTN_MAX_Q_HEADS 1024u
#define ATTN_QGROUP 64u       /* elements per scale of a quantised row */

/* The stored element type of K and V. */
enum attn_dtype { ATTN_F32, ATTN_BF16, ATTN_FP8, ATTN_INT8, ATTN_INT4, ATTN_DTYPES };

struct attn_shape {
    uint32_t q_heads, kv_heads, head_dim, page_tokens;
    uint32_t dtype;  /* enum attn_dtype */
    uint32_t mla;    /* 1: no V rows, V is each row's first v_dim elements */
    uint32_t v_dim;  /* the output's width: head_dim (0 says so), or MLA's latent */
    uint32_t window; /* 0: every token attended; N: the last N only */
    float scale;     /* of the scores; 0: 1/sqrt(head_dim) (MLA: its own, see setup.c) */
};

static inline uint32_t attn_vdim(const struct attn_shape *s)
{
    return s->v_dim ? s->v_dim : s->head_dim;
}
static inline bool attn_quantised(const struct attn_shape *s) { return s->dtype >= ATTN_FP8; }
/* Rows per token and K/V head: 2 (K, V), or 1 (MLA). */
static inline uint32_t attn_kinds(const struct attn_shape *s) { return s->mla ? 1 : 2; }
/* Bytes of one row's elements. */
static inline size_t attn_row_bytes(const struct attn_shape *s)
{
    static const uint8_t bits[ATTN_DTYPES] = { 32, 16, 8, 8, 4 };
    return (size_t)s->head_dim * bits[s->dtype] / 8;
}
/* Floats per scale: 2 for int4 (scale, minimum), else 1. */
static inline uint32_t attn_scale_floats(const struct attn_shape *s)
{
    return s->dtype == ATTN_INT4 ? 2 : 1;
}
/* Whether kind's rows are scaled per channel: K's (MLA's one kind), for
 * int8 and int4. */
static inline bool attn_per_channel(const struct attn_shape *s, int kind)
{
    return (s->dtype == ATTN_INT8 || s->dtype == ATTN_INT4) && (kind == 0 || s->mla);
}
/* Scale floats per V row (0 unquantised). */
static inline uint32_t attn_row_scales(const struct attn_shape *s)
{
    if (!attn_quantised(s))
        return 0;
    return s->head_dim / ATTN_QGROUP * attn_scale_floats(s);
}
/* Scale floats of one kv head's K block when per channel (else 0). */
static inline uint32_t attn_k_scales(const struct attn_shape *s)
{
    return attn_per_channel(s, 0) ? s->head_dim * attn_scale_floats(s) : 0;
}
/* Rows a page holds. */
static inline size_t attn_page_rows(const struct attn_shape *s)
{
    return (size_t)attn_kinds(s) * s->kv_heads * s->page_tokens;
}
/* Elements of K and V an fp32 or bf16 page holds, and their size. */
static inline size_t attn_page_elems(const struct attn_shape *s)
{
    return attn_page_rows(s) * s->head_dim;
}
static inline size_t attn_elem_bytes(const struct attn_shape *s)
{
    return s->dtype == ATTN_F32 ? 4 : 2;
}
/* The rows scaled per row (per group along it): all, or V's when K's are
 * per channel. */
static inline size_t attn_scaled_rows(const struct attn_shape *s)
{
    return attn_per_channel(s, 0) ? attn_page_rows(s) - (size_t)s->kv_heads * s->page_tokens
                                  : attn_page_rows(s);
}
/* Bytes of K, V and scales a page holds (without padding). */
static inline size_t attn_page_bytes(const struct attn_shape *s)
{
    return attn_page_rows(s) * attn_row_bytes(s) +
           ((size_t)s->kv_heads * attn_k_scales(s) + attn_scaled_rows(s) * attn_row_scales(s)) *
               sizeof(float);
}
/* The index of token t's K row (kind 0) or V row (kind 1) of kv head h
 * among the page's rows (MLA: kind 1 is the K row). */
static inline size_t attn_row_index(const struct attn_shape *s, int kind, uint32_t h, uint32_t t)
{
    return (((size_t)(s->mla ? 0 : kind) * s->kv_heads + h) * s->page_tokens + t);
}
/* Byte offsets of that row's elements and of its scales. */
static inline size_t attn_row_off(const struct attn_shape *s, int kind, uint32_t h, uint32_t t)
{
    return attn_row_index(s, kind, h, t) * attn_row_bytes(s);
}
/* (K, per channel: the kv head's scales, whatever t.) */
static inline size_t attn_scale_off(const struct attn_shape *s, int kind, uint32_t h, uint32_t t)
{
    size_t rows = attn_page_rows(s) * attn_row_bytes(s);
    if (attn_per_channel(s, kind))
        return rows + (size_t)h * attn_k_scales(s) * sizeof(float);
    size_t r = attn_row_index(s, kind, h, t) - (attn_page_rows(s) - attn_scaled_rows(s));
    return rows + ((size_t)s->kv_heads * attn_k_scales(s) + r * attn_row_scales(s)) * sizeof(float);
}
/* Offset, in elements, of token t's K or V row of kv head h (fp32 and bf16
 * pages, whose elements are whole). */
static inline size_t attn_row(const struct attn_shape *s, int kind, uint32_t h, uint32_t t)
{
    return attn_row_index(s, kind, h, t) * s->head_dim;
}
/* The first token attended when the query is at n_tokens - 1, and its page. */
static inline uint32_t attn_first_token(const struct attn_shape *s, uint32_t n_tokens)
{
    return s->window && n_tokens > s->window ? n_tokens - s->window : 0;
}
static inline uint32_t attn_first_page(const struct attn_shape *s, uint32_t n_tokens)
{
    return attn_first_token(s, n_tokens) / s->page_tokens;
}
/* Units (see above): per kv head, and in all. */
static inline uint32_t attn_unit_blocks(const struct attn_shape *s)
{
    uint32_t G = s->q_heads / s->kv_heads;
    return (G + ATTN_QBLOCK - 1) / ATTN_QBLOCK;
}
static inline uint32_t attn_units(const struct attn_shape *s)
{
    return s->kv_heads * attn_unit_blocks(s);
}
/* The kv heads of units [u0, u1), u0 < u1: [*h0, *h1). */
static inline void attn_unit_heads(const struct attn_shape *s, uint32_t u0, uint32_t u1,
                                   uint32_t *h0, uint32_t *h1)
{
    *h0 = u0 / attn_unit_blocks(s);
    *h1 = (u1 - 1) / attn_unit_blocks(s) + 1;
}
/* The scores' scale: s->scale, or 1/sqrt(head_dim) when it is 0. */
float attn_score_scale(const struct attn_shape *s);
/* Bytes of the scratch a thread gives the kernel: a page for the page
 * function, then room to dequantise one unit's rows of a page. */
size_t attn_scratch_bytes(const struct attn_shape *s);

/* 0 when the kernel supports the shape: head_dim a multiple of 8 up to
 * ATTN_MAX_HEAD_DIM (of ATTN_QGROUP when quantised), q_heads a multiple of
 * kv_heads (any ratio) up to ATTN_MAX_Q_HEADS, 1..ATTN_MAX_PAGE_TOKENS tokens
 * per page; MLA: one kv head, v_dim a multiple of 8 below head_dim. */
int attn_shape_check(const struct attn_shape *s);

/* Element i of an fp32 or bf16 page, widened to fp32. */
float attn_elem(const struct attn_shape *s, const void *page, size_t i);
/* Stores v as element i of an fp32 or bf16 page (rounded to nearest even
 * for bf16). */
void attn_store(const struct attn_shape *s, void *page, size_t i, float v);
/* Value d of token t's K or V row of kv head h, as the kernel reads it
 * (dequantised). */
float attn_value(const struct attn_shape *s, const void *page, int kind, uint32_t h, uint32_t t,
                 uint32_t d);
/* Stores head_dim values v as that row in the page's dtype: bf16 rounded to
 * nearest even; a quantised V row per group of ATTN_QGROUP, its scales
 * beside; a quantised K row with the kv head's channel scales already in
 * the page (attn_k_scales_set). */
void attn_store_row(const struct attn_shape *s, void *page, int kind, uint32_t h, uint32_t t,
                    const float *v);
/* A quantised K block's channel scales, in two steps: attn_k_stats() takes
 * the rows of the page's tokens one by one (t = 0 first) into st
 * (3 * head_dim floats, the caller's), attn_k_scales_set() writes kv head
 * h's scales from them into the page. Its rows are stored after that. */
void attn_k_stats(const struct attn_shape *s, float *st, uint32_t t, const float *row);
void attn_k_scales_set(const struct attn_shape *s, void *page, uint32_t h, const float *st);
/* bf16 rounding (to nearest, ties to even) of v, as a float. */
float attn_round_bf16(float v);

/* Returns page i for kv heads [h0, h1): a pointer to a whole page in the
 * layout above, of which only those heads' rows of the tokens attended are
 * read. scratch (the caller's, one per thread; its first attn_page_bytes)
 * may be used to build it. Called once per page attended, in page order:
 * pages wholly before the window are never asked for. */
typedef const void *(*attn_page_fn)(void *ctx, uint32_t page, uint32_t h0, uint32_t h1,
                                    void *scratch);

/* Attention of query q[q_heads][head_dim] over tokens [0, n_tokens) (those
 * of the window) for the q heads of units [u0, u1): out[qh][v_dim] for
 * those q heads only (the rest of out is not touched).
 * softmax(q.K * scale) V. scratch: attn_scratch_bytes. */
void attn_decode(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t u0,
                 uint32_t u1, attn_page_fn get, void *ctx, void *scratch, float *out);

/* The same, split over calls: attn_begin() sets the running state of the q
 * heads of units [u0, u1) (m and l: q_heads floats each, the caller's),
 * attn_pages() folds pages [pg0, pg1) into it (page numbers from the
 * sequence's first; those wholly before the window are skipped),
 * attn_end() divides out by l. Called over consecutive page ranges, they
 * give attn_decode()'s bits: the fold runs page by page in the same order
 * either way. */
void attn_begin(const struct attn_shape *s, uint32_t u0, uint32_t u1, float *m, float *l,
                float *out);
void attn_pages(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t pg0,
                uint32_t pg1, uint32_t u0, uint32_t u1, attn_page_fn get, void *ctx,
                void *scratch, float *m, float *l, float *out);
void attn_end(const struct attn_shape *s, uint32_t u0, uint32_t u1, const float *l, float *out);

/* The textbook formula in double precision over pages[] (pages[i] is page
 * i; those before the window are not read), all q heads, out[qh][v_dim]:
 * for tests, to bound the kernel's rounding. */
void attn_naive(const struct attn_shape *s, const float *q, uint32_t n_tokens,
                const void *const *pages, double *out);

/* ------------------------------------------------------------- threads */

/* A fixed team that runs part p of nparts of each job. With nice 0: the
 * caller plus threads-1 workers (threads 1 = no worker, everything on the
 * caller). With nice 1..19: threads workers at that nice value while the
 * caller waits, so that the caller's thread keeps its own priority.
 *
 * pin: the worker of part p runs only on the p-th CPU the process may use,
 * where there are as many CPUs as parts (with nice 0 the caller, which runs
 * part 0, is not bound). Bound, a worker that a woken I/O thread preempts
 * waits on its own CPU; unbound, the scheduler may queue it behind its
 * sibling and leave its own CPU idle while the job waits for its part
 * (docs/performance.md#attention-pinning). Every process binds to the same
 * first CPUs: runs side by side on one machine want --no-pin. */
struct attn_pool;
typedef void (*attn_job_fn)(void *arg, unsigned part, unsigned nparts);
/* NULL on failure (out of memory, thread creation). */
struct attn_pool *attn_pool_new(unsigned threads, int nice, bool pin);
unsigned attn_pool_threads(const struct attn_pool *p);
/* Workers bound to a CPU (each binds itself as it starts; attn_pool_new
 * returns once every one has). */
unsigned attn_pool_pinned(struct attn_pool *p);
/* Runs fn(arg, part, n) for every part, the caller doing part 0 when the
 * pool is not niced; returns when all parts are done. */
void attn_pool_run(struct attn_pool *p, attn_job_fn fn, void *arg);
/* The same in two halves: start() hands the parts to the workers and
 * returns at once when the pool is niced (the caller takes no part; with
 * nice 0 it runs its part, and so the whole job, before returning); join()
 * waits for them and returns when the job finished (CLOCK_MONOTONIC
 * seconds). One job at a time. */
void attn_pool_start(struct attn_pool *p, attn_job_fn fn, void *arg);
double attn_pool_join(struct attn_pool *p);
/* Whether start() returns before the job is done (a niced pool): a job
 * that waits for the caller to feed it may only run on such a pool. */
bool attn_pool_background(const struct attn_pool *p);
void attn_pool_free(struct attn_pool *p);

#endif
