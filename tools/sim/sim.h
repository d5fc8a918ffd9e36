/*
 * sim.h — `kvtier sim`: trace-driven simulation of the eviction/prefetch
 * policies over HBM, DRAM and SSD tiers, under a link/compute cost model.
 *
 * Three parts, each usable on its own (the tests call them directly):
 *   - traces (tools/sim/trace.c, gen.c): the text format an engine can log
 *     (described at the top of trace.c and in `kvtier sim --help`), read,
 *     written, or generated from a model shape;
 *   - the world (world.c): a trace checked and indexed once (its pages,
 *     which exist before it starts, the future uses Belady needs), shared
 *     by all runs;
 *   - runs (model.c): one policy over the world, through the policy
 *     interface only (policy/policy.h), giving bytes and pages per link,
 *     hits, and times.
 * The command itself is options.c, report.c and command.c (command.h).
 *
 * Sizes are bytes; bandwidths GB/s (1e9 bytes/s); times seconds.
 */
#ifndef KVT_SIM_H
#define KVT_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policy/policy.h"

/* ------------------------------------------------------------- traces */

enum sim_kind { SIM_ACCESS, SIM_ADVANCE, SIM_NEW, SIM_DROP, SIM_STEP };

struct sim_rec {
    uint64_t id;
    uint32_t layer, index; /* ADVANCE: layer; DROP, STEP: unused (0) */
    uint32_t line;         /* line in the file it was read from; 0 when generated */
    uint8_t kind;          /* enum sim_kind */
};

struct sim_trace {
    uint64_t page_bytes;
    bool has_schedule;     /* the fields below describe what kvt_set_schedule got */
    int order;             /* KVT_ORDER_* */
    uint32_t layers, window_pages, sink_pages;
    uint64_t *ids;
    size_t n_ids;
    struct sim_rec *rec;
    size_t n, cap;
    uint64_t accesses, steps; /* counts of those records */
};

/* Reads a trace from f into *t (which it initialises). On error returns
 * -EINVAL (a malformed trace: err says "line N: what is wrong"), -E2BIG (a
 * line longer than SIM_MAX_LINE bytes, named in err: it is not read whole),
 * -ENOMEM or -EIO, and *t is empty. */
#define SIM_MAX_LINE (64u << 20)  /* bytes in a line, at most: as PFX_MAX_LINE */
int sim_trace_read(FILE *f, struct sim_trace *t, char *err, size_t errlen);
/* Writes t in the text format; -EIO when the stream fails. */
int sim_trace_write(FILE *f, const struct sim_trace *t);
void sim_trace_free(struct sim_trace *t);

/* A decode workload. Sequences are ids 0..batch-1; each holds context
 * tokens before the first step and gains one per step. Each step, for each
 * (sequence, layer) in the order: `advance`, an `access` of every page the
 * attention reads (all, or the sinks and the last window pages), then a
 * `new` page when the next step's token starts one; `step` at the end. */
struct sim_gen {
    uint32_t layers, batch;
    uint64_t context, tokens, page_tokens;
    uint32_t window_pages, sink_pages; /* window 0 = full attention (sinks unused) */
    int order;                         /* KVT_ORDER_* */
    uint64_t page_bytes;
};

/* Pages of one (sequence, layer) that the step reads: sinks + window, capped. */
uint64_t sim_gen_pages_read(const struct sim_gen *g, uint64_t step);
/* Fills *t (initialised here). -EINVAL for a zero dimension, -E2BIG when the
 * trace would pass SIM_MAX_RECORDS, -ENOMEM. */
int sim_generate(const struct sim_gen *g, struct sim_trace *t);
#define SIM_MAX_RECORDS (64ull << 20)

/* ------------------------------------------------------------- world */

struct sim_world;

/* Checks t's records against each other (a `new` of a page that exists, an
 * access to a dropped sequence, an advance outside the schedule, more pages
 * than 2^32 - 2) and indexes it. t must outlive the world. Returns 0, or
 * -EINVAL with err naming the line, or -ENOMEM. */
int sim_world_build(const struct sim_trace *t, struct sim_world **out, char *err, size_t errlen);
void sim_world_free(struct sim_world *w);
/* Distinct pages the trace uses (the working set, new pages included). */
uint64_t sim_world_pages(const struct sim_world *w);
/* The most pages one advance-group reads or creates: HBM must hold them. */
uint64_t sim_world_max_group(const struct sim_world *w);

/* ------------------------------------------------------------- runs */

/* Links, in the order they are reported. */
enum { SIM_H2D, SIM_SSD_READ, SIM_D2H, SIM_SSD_WRITE, SIM_LINKS };
extern const char *const sim_link_name[SIM_LINKS]; /* "dram->hbm", "ssd->dram", ... */

/* The terms of the bound: per step, each link's bytes / its bandwidth (the
 * SSD's reads and writes together), and the compute. */
enum { SIM_TERM_H2D, SIM_TERM_D2H, SIM_TERM_SSD, SIM_TERM_COMPUTE, SIM_TERMS };
extern const char *const sim_term_name[SIM_TERMS]; /* "dram->hbm", "hbm->dram", "ssd", "compute" */

struct sim_model {
    uint64_t hbm_pages;       /* HBM capacity, >= the largest group */
    uint64_t dram_pages;      /* 0: unlimited (everything fits, the SSD is not used) */
    double h2d_gbps;          /* DRAM->HBM and HBM->DRAM, each direction its own link */
    double ssd_gbps;          /* one drive: reads and writes share it */
    double compute_s;         /* per group (one advance: a (sequence, layer)) */
    uint64_t prefetch_bytes;  /* pages prefetched and not yet used, at most; 0: none */
    bool cold;                /* HBM starts empty (else holds the first-used pages) */
};

struct sim_result {
    const char *policy;
    uint64_t bytes[SIM_LINKS], pages[SIM_LINKS];
    uint64_t prefetched;      /* DRAM->HBM pages moved by prefetch (part of pages[SIM_H2D]) */
    uint64_t prefetched_ssd;  /* SSD->DRAM pages moved by prefetch (part of pages[SIM_SSD_READ]) */
    uint64_t prefetch_unused; /* of those, evicted before any use */
    uint64_t accesses, hits, groups, steps;
    double total_s, stall_s, compute_s; /* whole run */
    double step_s, bound_s;             /* per step: total / steps, and the floor below */
    double term_s[SIM_TERMS];           /* per step: what each link and the compute need */
    int bound_by;                       /* SIM_TERM_* of the largest term */
};

/* Runs ops over the world. err names the problem on failure: -ENOSPC (HBM
 * smaller than a group), -EINVAL (a bad model), -ENOMEM, -EFAULT (the policy
 * gave no victim while candidates existed, or failed to load the trace). */
int sim_run(const struct sim_world *w, const struct kvt_policy_ops *ops,
            const struct sim_model *m, struct sim_result *r, char *err, size_t errlen);

/* Total bytes over all links. */
uint64_t sim_bytes_total(const struct sim_result *r);
/* Bytes fetched up the tiers (dram->hbm + ssd->dram): what MIN minimises,
 * and what the policies are compared by; write-backs are counted apart. */
uint64_t sim_bytes_fetched(const struct sim_result *r);

int sim_main(int argc, char **argv);

#endif /* KVT_SIM_H */
