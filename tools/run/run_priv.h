/*
 * run_priv.h — what the files of tools/run/ share and callers do not
 * (callers use tools/run/run.h).
 *
 *   options.c   options, --help, run_main
 *   kvgen.c     the KV and query generator, the output hash
 *   setup.c     sizing the tiers, the engine and its spill directory, run_exec
 *   links.c     the links measured raw (DRAM<->HBM, the SSD), and the bound
 *   decode.c    the prefill, the timed decode loop, the reference pass
 *   feed.c      the attention feed: the CPU team fed chunk by chunk
 *   gpu.c       the attention on the GPU, where its kernel was built
 *   report.c    the text and JSON reports
 *   attention.c, attn_math.h, attention_cuda.cu   the attention kernels
 *   trace_json.c                                  the --trace file
 *
 * Threads: the caller's thread owns struct run_ctx; the attention team's
 * threads touch only struct run_feed, under its mutex (feed.c).
 */
#ifndef KVT_RUN_PRIV_H
#define KVT_RUN_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lab/tool.h"
#include "tools/run/attention.h"
#include "tools/run/run.h"
#include "tools/run/trace_json.h"

/* The terms of the bound: compute and one per link direction, then the SSD
 * as the one device it is (its two directions share it; see run_bound()). */
enum { TERM_COMPUTE, TERM_H2D, TERM_D2H, TERM_SSD_R, TERM_SSD_W, TERMS, TERM_SSD = TERMS, TERM_CPU,
       BOUND_TERMS };
extern const char *const run_term_name[BOUND_TERMS];
#define RUN_CODECS 6
extern const char *const run_codec_name[RUN_CODECS]; /* by KVT_CODEC_* */
extern const char *const run_dtype_name[ATTN_DTYPES]; /* by enum attn_dtype */

/* ------------------------------------------------------------- the feed (feed.c) */

/* The attention team and what it computes over: the query (the caller
 * writes q before a group starts), the output (read after it joins), and,
 * for a group streamed chunk by chunk, the state shared with the team's
 * threads under mu: the caller raises ready as chunks are acquired; the
 * parts take units (attention.h: up to 16 q heads of a kv head) in turn and
 * fold each over what is ready (head_done: pages folded per unit;
 * head_busy: a part holds it), and record each part's CPU time (cpu_s). */
struct run_feed {
    const struct attn_shape *sh;
    struct attn_pool *pool;
    float **scratch;        /* attn_scratch_bytes per thread, for regenerated pages */
    float *q, *out;         /* q[q_heads][head_dim], out[q_heads][v_dim] */
    float *m, *l;           /* the running softmax state per q head, across chunks */
    void **ptrs;            /* the page pointers of the group being computed */
    uint32_t p0;            /* the page ptrs[0] is (pages before it: behind the window) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_made;         /* mu and cv initialised */
    uint32_t ready, *head_done;
    uint8_t *head_busy;
    double *cpu_s;          /* each part's CPU time on the group (thread clock) */
    bool abort;
    struct run_job {        /* what the team computes now */
        struct run_feed *f;
        const struct attn_shape *sh; /* f->sh, or the reference's in another dtype */
        float *out;
        uint32_t n_tokens, seq, layer, p0;
        uint64_t seed;
        bool reference;     /* pages regenerated from seed, not acquired */
        bool stream;        /* pages as ready says (else all of them, at once) */
    } job;
};

/* The team of `threads` threads at nice value `nice`, each worker on a CPU
 * of its own with pin (attn_pool_new), and buffers for sh with scratch
 * bytes per thread. 0 or -ENOMEM; feed_free undoes either. */
int feed_init(struct run_feed *f, const struct attn_shape *sh, unsigned threads, int nice,
              bool pin, size_t scratch);
void feed_free(struct run_feed *f);
/* The team's workers bound to a CPU (attn_pool_pinned). */
unsigned feed_pinned(struct run_feed *f);
/* Whether the team runs without the caller (else the caller computes a
 * part inside feed_start and cannot feed the group while it does). */
bool feed_background(const struct run_feed *f);
/* A streamed group over the n_tokens tokens in the pages at ptrs (ptrs[0]
 * is page p0, the first the window holds), whose first `ready` are
 * acquired; then feed_start sets the team on it. */
void feed_begin(struct run_feed *f, void **ptrs, uint32_t p0, uint32_t ready);
void feed_start(struct run_feed *f, uint32_t n_tokens, uint32_t seq, uint32_t layer,
                uint64_t seed);
/* The first `ready` pages are acquired: the team may fold them. Returns the
 * pages every kv head is done with (which may go back to the engine). */
uint32_t feed_ready(struct run_feed *f, uint32_t ready);
/* The group will not be fed further: the team stops at once. */
void feed_abort(struct run_feed *f);
/* Waits for the team; returns when it finished (util_now's clock). */
double feed_join(struct run_feed *f);
/* The busiest part's CPU time in the last group (after feed_join): not its
 * waits for pages, nor the time the engine's threads held its core, which a
 * wall clock counts (the compute term of the bound, links.c). */
double feed_busiest(struct run_feed *f);
/* The parts' CPU time on the last group, summed (after feed_join). */
double feed_cpu(struct run_feed *f);
/* The whole group at once over pages regenerated from seed in shape sh
 * (f's, or the same in another dtype: the scratch must hold it), no
 * kvtier, into out: the reference. */
void feed_reference(struct run_feed *f, const struct attn_shape *sh, float *out,
                    uint32_t n_tokens, uint32_t seq, uint32_t layer, uint64_t seed);

/* ------------------------------------------------------------- the run */

struct attn_cuda; /* tools/run/attention_cuda.h */

struct run_ctx {
    const struct run_opts *o;
    struct attn_shape sh;
    struct attn_shape sh_bf16; /* a quantised dtype's reference: the same in bf16 */
    float *out_bf16;           /* its output */
    uint32_t layers, pages_max; /* pages of a (sequence, layer) at the end */
    uint32_t pages_live;        /* of those, the most a window holds at once (all without one) */
    uint64_t dropped;           /* pages behind the window dropped (kvt_drop) */
    size_t pb;
    kvt_engine *e;
    struct run_feed feed;
    struct attn_cuda *gpu;   /* the GPU kernel (gpu.c), or NULL: the CPU team */
    void *stage;             /* one page in host memory: what is written into a device page */
    bool said;               /* an error was reported where it happened (not an engine call's) */
    kvt_key *keys, *keys2;   /* two groups' keys and page pointers: see struct group */
    void **ptrs, **ptrs2;
    uint64_t *hashes;        /* [step][layer][seq][q head] */
    float *outs;             /* lossy codec: the outputs, [step][layer][seq][q head][dim] */
    double err_sq, ref_sq;   /* lossy codec: the step being checked, summed */
    double err_max, ref_max; /* and its largest difference, at (layer, sequence, q head),
                                and its largest reference output */
    uint32_t err_at[3];
    char tmpdir[4096];
    const char *ssd_dir;
    bool discard;            /* --ssd-dir held the engine's pages: discarded at the end */
    struct trace_json trace;
};

/* One (step, layer, sequence) group on its way through the loop: its keys
 * and page pointers (two sets, so that the next group's first pages are
 * acquired while this one's last are computed). */
struct group {
    uint32_t step, l, s, pos, n, np; /* np: pages from p0, the first the window holds */
    uint32_t p0;
    int fresh; /* the token opens a new tail page */
    kvt_key *keys;
    void **ptrs;
};

/* The sequence id of sequence s (ids start at 1). */
static inline uint64_t run_seq_id(uint32_t s)
{
    return 1 + (uint64_t)s;
}

/* kvgen.c */
void run_fill_query(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                    uint32_t pos, float *q);
uint64_t run_hash_head(const float *o, uint32_t D);

/* setup.c: pages per chunk of the CPU path's acquire/compute pipeline. */
uint32_t run_chunk_pages(const struct run_ctx *x);

/* decode.c */
int run_prefill(struct run_ctx *x);
int run_decode(struct run_ctx *x, struct run_result *r);
int run_verify(struct run_ctx *x, struct run_result *r);
/* Releases pages [c0, c1) of g: the tail (the last) as written unless new. */
int run_release_chunk(struct run_ctx *x, struct group *g, uint32_t c0, uint32_t c1);

/* gpu.c: the attention on the GPU. open: the kernel for the engine's
 * device (an error, said, where this build has none); launch: queues the
 * attention of x->feed.q over g's acquired pages and returns, so that the
 * next group can be acquired while it computes; finish: waits for it,
 * x->feed.out = its result, then g released. A launch that returned 0 is
 * always finished (g's pages stay pinned until the kernel is done). */
int run_gpu_open(struct run_ctx *x);
int run_gpu_launch(struct run_ctx *x, struct group *g, double *t0);
int run_gpu_finish(struct run_ctx *x, struct run_result *r, struct group *g, double t0);
void run_gpu_free(struct run_ctx *x);

/* links.c */
double run_raw_link(kvt_engine *e, bool up);
/* The SSD measured raw in a scratch file of the spill directory at dir. */
void run_raw_ssd(const char *dir, size_t pb, struct run_result *res);
/* The SSD again after the decode, and its speeds for the bound. */
void run_links_again(struct run_ctx *x, struct run_result *r);
void run_link_range(const struct run_link *l, double *lo, double *hi);
/* A link's raw speed, GB/s, by TERM_* (0 for compute). */
double run_raw_gbps(const struct run_result *r, int term);
void run_bound(struct run_result *r);

/* codec_err.c: --codec fp8|int8|int4, the outputs' error against the
 * reference instead of their bits. init: the outputs' buffer (0, or -ENOMEM
 * said; nothing for a lossless codec); keep: g's outputs, after it ran;
 * check: one (step, layer, sequence) of the reference in x->feed.out, its
 * error folded into the step's; step_done: the step's figures into r, and
 * r->verified cleared (r->bad_* say where) when past the tolerance; free:
 * the buffer. */
bool run_lossy(const struct run_opts *o);
int run_err_init(struct run_ctx *x, struct run_result *r);
void run_err_keep(struct run_ctx *x, const struct group *g);
int run_err_check(struct run_ctx *x, struct run_result *r, uint32_t step, uint32_t l, uint32_t s);
void run_err_step_done(struct run_ctx *x, struct run_result *r, uint32_t step);
void run_err_free(struct run_ctx *x);
void run_err_report(FILE *f, const struct run_opts *o, const struct run_result *r);
void run_err_json(const struct run_result *r);

/* report.c */
void run_report_text(FILE *f, const struct run_opts *o, const struct run_result *r,
                     uint32_t layers);
void run_report_json(const struct run_opts *o, const struct run_result *r, uint32_t layers);

#endif /* KVT_RUN_PRIV_H */
