/*
 * attention.h — CPU grouped-query attention of one decode query over KV
 * pages, for `kvtier run` on the host back-end.
 *
 * Page layout (layer-first: one page is page_tokens tokens of one sequence
 * and one layer), in fp32 or bf16 elements:
 *     K[kv_heads][page_tokens][head_dim]  then  V[kv_heads][page_tokens][head_dim]
 * then zero padding up to page_bytes (a multiple of 4096, kvtier's rule).
 * The arithmetic is fp32 either way: a bf16 element is the upper half of an
 * fp32 and widens to it exactly, so a bf16 page computes the bits its
 * values would in an fp32 page.
 * Each head's rows are contiguous so that a thread can own a range of heads.
 *
 * The kernel streams the pages once (online softmax, as flash-decoding
 * does): per page, scores of the page's tokens, a running maximum, the
 * running sum and output rescaled. The float operations and their order
 * depend only on the shape, the token count and the values, never on where
 * the pages live or which thread runs a head, so two calls over equal values
 * give equal bits: that is what lets `run` check the tiers bit-exactly
 * against a reference that regenerates the KV page by page.
 */
#ifndef KVT_ATTENTION_H
#define KVT_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ATTN_MAX_PAGE_TOKENS 256u
#define ATTN_MAX_GROUP 16u /* q heads per kv head */
#define ATTN_MAX_HEAD_DIM 256u

struct attn_shape {
    uint32_t q_heads, kv_heads, head_dim, page_tokens;
    uint32_t bf16; /* 1: K and V are bfloat16; 0: fp32 */
};

/* Elements of K and V a page holds (without padding). */
static inline size_t attn_page_elems(const struct attn_shape *s)
{
    return 2 * (size_t)s->kv_heads * s->page_tokens * s->head_dim;
}
static inline size_t attn_elem_bytes(const struct attn_shape *s) { return s->bf16 ? 2 : 4; }
/* Bytes of K and V a page holds (without padding). */
static inline size_t attn_page_bytes(const struct attn_shape *s)
{
    return attn_page_elems(s) * attn_elem_bytes(s);
}
/* Offset, in elements, of token t's K row (kind 0) or V row (kind 1) of kv head h. */
static inline size_t attn_row(const struct attn_shape *s, int kind, uint32_t h, uint32_t t)
{
    return (((size_t)kind * s->kv_heads + h) * s->page_tokens + t) * s->head_dim;
}

/* 0 when the kernel supports the shape: head_dim a multiple of 8 up to
 * ATTN_MAX_HEAD_DIM, q_heads a multiple of kv_heads with at most
 * ATTN_MAX_GROUP per kv head, 1..ATTN_MAX_PAGE_TOKENS tokens per page. */
int attn_shape_check(const struct attn_shape *s);

/* Element i of a page, widened to fp32. */
float attn_elem(const struct attn_shape *s, const void *page, size_t i);
/* Stores v as element i of a page (rounded to nearest even for bf16). */
void attn_store(const struct attn_shape *s, void *page, size_t i, float v);

/* Returns page i for kv heads [h0, h1): a pointer to a whole page in the
 * layout above, of which only those heads' rows of the first tokens are read.
 * scratch (attn_page_bytes, the caller's, one per thread) may be used to
 * build it. Called once per page, in page order. */
typedef const void *(*attn_page_fn)(void *ctx, uint32_t page, uint32_t h0, uint32_t h1,
                                    void *scratch);

/* Attention of query q[q_heads][head_dim] over tokens [0, n_tokens) for the
 * q heads of kv heads [h0, h1): out[qh][head_dim] for those q heads only (the
 * rest of out is not touched). softmax(q.K / sqrt(head_dim)) V. */
void attn_decode(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t h0,
                 uint32_t h1, attn_page_fn get, void *ctx, void *scratch, float *out);

/* The same, split over calls: attn_begin() sets the running state of the q
 * heads of kv heads [h0, h1) (m and l: q_heads floats each, the caller's),
 * attn_pages() folds pages [pg0, pg1) into it, attn_end() divides out by l.
 * Called over consecutive page ranges, they give attn_decode()'s bits: the
 * fold runs page by page in the same order either way. */
void attn_begin(const struct attn_shape *s, uint32_t h0, uint32_t h1, float *m, float *l,
                float *out);
void attn_pages(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t pg0,
                uint32_t pg1, uint32_t h0, uint32_t h1, attn_page_fn get, void *ctx,
                void *scratch, float *m, float *l, float *out);
void attn_end(const struct attn_shape *s, uint32_t h0, uint32_t h1, const float *l, float *out);

/* The textbook formula in double precision over pages[], all q heads: for
 * tests, to bound the kernel's rounding. */
void attn_naive(const struct attn_shape *s, const float *q, uint32_t n_tokens,
                const void *const *pages, double *out);

/* ------------------------------------------------------------- threads */

/* A fixed team that runs part p of nparts of each job. With nice 0: the
 * caller plus threads-1 workers (threads 1 = no worker, everything on the
 * caller). With nice 1..19: threads workers at that nice value while the
 * caller waits, so that the caller's thread keeps its own priority. */
struct attn_pool;
typedef void (*attn_job_fn)(void *arg, unsigned part, unsigned nparts);
/* NULL on failure (out of memory, thread creation). */
struct attn_pool *attn_pool_new(unsigned threads, int nice);
unsigned attn_pool_threads(const struct attn_pool *p);
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
