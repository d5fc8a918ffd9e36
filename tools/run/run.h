/*
 * run.h — `kvtier run`: a long-context decode over the tiers with real
 * attention, verified bit-exactly against a reference computed without
 * kvtier.
 *
 * The KV is a function of (seed, sequence, layer, token, head, dim): the
 * prefill writes every page from it (kvt_create), each decode step appends
 * one token's K and V the same way, and the reference regenerates each page
 * when it needs it, so it never holds more than one page per thread. The
 * query of (step, sequence, layer) comes from the same generator.
 */
#ifndef KVT_RUN_H
#define KVT_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "include/kvtier.h"
#include "lab/lab.h"
#include "tools/run/attention.h"
#include "tools/presets.h"

struct kvt_test_hooks;

#define RUN_AUTO UINT64_MAX /* a capacity derived from the KV size */

struct run_opts {
    const struct kvt_shape *model;
    uint32_t layers;      /* 0 = the model's */
    uint32_t batch, tokens, page_tokens;
    uint64_t context;
    uint64_t hbm, dram, ssd; /* bytes, or RUN_AUTO; ssd 0 = no SSD tier */
    const char *ssd_dir;     /* NULL: a temporary directory, removed at the end */
    bool overwrite_ssd_dir;  /* ssd_dir may hold persisted pages: the run wipes them */
    const char *policy;
    int codec, device;
    uint32_t full_layers; /* lossy codec: first and last layers kept in full precision */
    unsigned threads;
    uint32_t dtype;       /* the KV's stored type, enum attn_dtype (default bf16) */
    uint32_t window;      /* 0: every token attended; N: the last N, pages behind dropped */
    uint32_t chunk_pages; /* pages per step of the CPU path's acquire/compute pipeline; 0 = ~4 MiB */
    uint32_t nice;        /* the attention threads' nice value; 0 = the caller's, part 0 on it */
    bool pin;             /* each attention worker on a CPU of its own (attn_pool_new) */
    double link_gbps;
    uint64_t seed;
    uint32_t verify_every; /* the reference checks steps 0, N, 2N, ... and the last; 1 = all */
    const char *trace_path; /* NULL: no trace */
    bool json, progress;
    /* test hooks */
    const struct kvt_test_hooks *hooks; /* the engine opened with these (NULL: kvt_open) */
    uint64_t ref_seed;   /* the reference's generator seed (= seed unless a test says) */
    int64_t corrupt_step; /* >= 0: flip a bit of (seq 0, layer 0)'s first page in HBM then */
};

#define RUN_LINK_SAMPLES 16

/* The attention stands in for a GPU, yet here it shares the CPU with the
 * threads that drive the disk and the copies (the engine's mover, the
 * io_uring reaper, the host back-end's copy threads). At the caller's
 * priority it keeps a woken reaper waiting long enough for the disk's queue
 * to drain (docs/performance.md#io-thread-scheduling). Niced, it yields at
 * once; the compute still gets every cycle the I/O path leaves. */
#define RUN_ATTN_NICE 19

/* Raw throughput samples of one link (GB/s), before and after the decode. */
struct run_link {
    double s[RUN_LINK_SAMPLES];
    unsigned n;
};

#define RUN_ERR_STEPS 64 /* steps whose codec error the report lists (the rest: overall) */

struct run_result {
    bool verified;
    /* --codec fp8|int8|int4: the attention outputs against the exact
     * reference, per step checked and overall, and the tolerance they met */
    bool lossy;
    double err_max_abs, err_max_rel, err_rms_rel; /* max_rel: of the step's largest output */
    double tol_max_abs, tol_rms_rel;              /* tol_max_abs: as err_max_rel */
    uint32_t err_steps;
    struct run_err_step { uint32_t step; double max_abs, max_rel, rms_rel; } err_step[RUN_ERR_STEPS];
    double err_sq, ref_sq;   /* overall sums behind err_rms_rel */
    uint64_t disk_read, disk_written; /* bytes the SSD moved over the decode (stored form) */
    double codec_s;          /* the decoding threads' time in the codec over the decode, summed */
    double codec_cpu_s;      /* of it, CPU time (the decoding threads' clocks) */
    double crc_cpu_s;        /* the SSD path's checksums over the decode, CPU time */
    uint32_t decoders;       /* threads that decode reads (the engine's decode team) */
    uint32_t pinned;         /* the attention team's workers bound to a CPU of their own (--no-pin: 0) */
    bool link_paced;         /* --link-gbps: the host back-end's copies sleep to a speed */
    uint32_t verified_steps; /* steps the reference checked (o->verify_every) */
    char device[16];  /* the back-end the decode ran on: "host" or "cuda" */
    uint32_t bad_step, bad_seq, bad_layer, bad_head; /* the first mismatch */
    /* A quantised --dtype: its outputs (bit-exact against the quantised
     * reference) against the bf16 reference's over the steps verified: the
     * largest absolute difference, the RMS relative error (root of the sum
     * of squared differences over that of the bf16 outputs), the worst
     * step's RMS relative error, and the tolerance on the RMS relative
     * errors (verified fails beyond it). */
    double dt_max_abs, dt_rms_rel, dt_rms_rel_step, dt_tol;
    uint64_t dropped_pages;  /* pages behind --window dropped (kvt_drop) */
    uint64_t pages_held;     /* distinct pages the engine holds at the end (kvt_stats.pages) */
    uint64_t pages_expected; /* what the window leaves: batch x layers x its pages */
    kvt_stats delta;  /* counters over the decode loop */
    kvt_stats end;    /* counters at its end */
    uint64_t kv_bytes, page_bytes, pages;
    uint64_t cap[KVT_TIERS];
    double wall_s, compute_s, acquire_s, stall_s, prefill_s, verify_s;
    double gbps_h2d, gbps_d2h, gbps_ssd_read, gbps_ssd_write; /* SSD: medians of the samples */
    struct run_link ssd_read, ssd_write; /* passes over a scratch file */
    struct run_link spill_read;          /* read passes over the engine's spill segment */
    double decode_gbps[5]; /* per link: bytes the decode moved / wall_s (index as term_s) */
    double link_gbps[5];   /* per link: the speed the bound uses, max(raw, decode_gbps) */
    double term_s[7]; /* compute, dram->hbm, hbm->dram, ssd->dram, dram->ssd,
                       * ssd: the last two summed (one device), capped at wall_s, and
                       * cpu: the work the cores did, over the cores (run_bound) */
    double compute_cpu_s; /* the attention threads' CPU time over the decode, summed */
    double cpu_work_s;    /* the CPU term's numerator: attention, codec, checksums, host copies */
    uint32_t cores;       /* the CPUs this process may run on */
    double process_cpu_s; /* every thread's CPU time over the decode (getrusage) */
    double bound_s;
    int bound_by;     /* index into term_s */
};

void run_opts_default(struct run_opts *o);

/* Runs the decode. Returns 0 when every output matched the reference, 1 on
 * a mismatch (r->bad_* say where; also printed), or a negative error (a
 * message has been printed to stderr). r is filled as far as the run got. */
int run_exec(const struct run_opts *o, struct run_result *r);

/* The command: parses argv (argv[0] = "run"), runs, prints. */
int run_main(int argc, char **argv);

/* The generator: one exactly representable value in [-1, 1). kind 0 K, 1 V,
 * 2 the query (head = q head, token = the position decoded). */
float run_kv_value(uint64_t seed, uint32_t seq, uint32_t layer, uint32_t token, uint32_t head,
                   uint32_t dim, int kind);
/* The head_dim values of token's K row (kind 0) or V row (kind 1) of kv
 * head h as stored before any quantisation: the generator's, rounded to
 * bf16 unless the dtype is fp32 (a quantised page quantises bf16 KV). MLA:
 * kind 0, the latent then the RoPE key. */
void run_kv_row(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                uint32_t token, uint32_t h, int kind, float *row);
/* A quantised page's K channel scales of kv head h over its tokens
 * [page*page_tokens, +ntok), ntok > 0, written into page p. */
void run_k_scales(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                  uint32_t page, uint32_t ntok, uint32_t h, void *p);
/* Writes the rows of tokens [page*page_tokens, +ntok) for kv heads [h0, h1)
 * into a page in attention.h's layout, in its dtype (attn_store_row), and
 * their K channel scales when quantised (run_k_scales); nothing else of the
 * page is touched. */
void run_fill_page(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                   uint32_t page, uint32_t ntok, uint32_t h0, uint32_t h1, void *p);

#endif
