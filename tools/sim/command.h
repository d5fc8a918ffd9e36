/*
 * command.h — the `kvtier sim` command's options and report, shared by
 * tools/sim/options.c, report.c and command.c.
 */
#ifndef KVT_SIM_COMMAND_H
#define KVT_SIM_COMMAND_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/presets.h"
#include "tools/sim/sim.h"

#define SIM_MAX_POL 8

/* The cost model in words, one rule each: --help and the JSON's "model"
 * say the same. */
extern const char *const sim_rules[];
extern const size_t sim_n_rules;
/* The policies run when --policies is not given, those this kvtier has. */
extern const char *const sim_default_policies[3];

struct sim_opts {
    const char *trace_path, *write_path, *model, *dtype;
    const char *gen_flag;        /* a generator flag given (refused with --trace) */
    struct sim_gen gen;
    const struct kvt_shape *shape;
    bool layers_given, json, cold;
    double hbm_frac, dram_frac;  /* 0: not given */
    uint64_t hbm_pages, dram_pages;
    double h2d, ssd, compute_us;
    uint64_t prefetch_bytes;
    bool prefetch_given;
    const char *pol_names[SIM_MAX_POL];
    int n_pol;
    bool pol_given;
};


struct sim_report {
    const struct sim_opts *o;
    const struct sim_trace *t;
    const struct sim_world *w;
    struct sim_model m;
    struct sim_result res[SIM_MAX_POL];
    int n;
    const char *skipped[SIM_MAX_POL];
    int n_skipped;
};

/* Parses argv into o. 0, 1 after --help, or -EINVAL having said why. */
int sim_parse(int argc, char **argv, struct sim_opts *o);
/* The report: a table in text to f; one JSON object to stdout. */
void sim_text(FILE *f, const struct sim_report *rp);
void sim_json(const struct sim_report *rp);

#endif /* KVT_SIM_COMMAND_H */
