/*
 * options.c — `kvtier sim`'s options and --help (the cost model's rules are
 * here, in words, for both the help and the JSON report).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "tools/cli.h"
#include "tools/sim/command.h"

const char *const sim_rules[] = {
    "capacities are in pages; HBM holds --hbm-pages (or --hbm-frac of the pages the trace "
    "uses), DRAM holds all of them unless --dram-pages/--dram-frac limit it, the rest is on SSD",
    "tiers are inclusive: a page brought to HBM keeps its DRAM copy; a page made by `new` is "
    "dirty until it is written down when it leaves HBM",
    "HBM starts holding the pages used first, as a prefill leaves it (--cold: empty)",
    "a group is an `advance` and the records up to the next advance, step or drop: one "
    "(sequence, layer); its pages stay in HBM until it has computed, as with kvt_acquire; "
    "records outside such a group are used one page at a time and compute once at the end",
    "a group is issued when the previous one has computed; its misses are fetched then "
    "(SSD->DRAM first for a page only on SSD, then DRAM->HBM), a full tier giving up the "
    "policy's victim, written down first if dirty",
    "policies with prefetch() bring pages of the groups ahead while a group computes, soonest "
    "first, while the page each displaces is used later (next_use) and the prefetched pages not "
    "yet used stay within --prefetch-bytes",
    "each link carries one page at a time at its bandwidth, first come first served: "
    "DRAM->HBM and HBM->DRAM at --h2d-gbps each, SSD reads and writes sharing --ssd-gbps",
    "a group computes for --compute-us once its pages are in HBM and the previous group is "
    "done; stall is the time compute waited for data; step time is the end of the last "
    "compute / steps",
    "bound per step = max(compute, each link's bytes / its bandwidth); step_over_bound = "
    "step time / bound",
    "policies are compared by the bytes they fetch (dram->hbm + ssd->dram), which Belady's "
    "MIN makes the fewest possible; write-backs (hbm->dram, dram->ssd) are counted apart",
};
const size_t sim_n_rules = sizeof(sim_rules) / sizeof(sim_rules[0]);

const char *const sim_default_policies[3] = { "decode", "lru", "belady" };

/* Prints text wrapped at 79 columns, the first line after first, the others
 * after indent. */
static void wrap(FILE *f, const char *first, const char *indent, const char *text)
{
    size_t col = (size_t)fprintf(f, "%s", first), ind = strlen(indent);
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col + 1 + word > 79 && col > ind) {
            fprintf(f, "\n%s", indent);
            col = ind;
        } else if (col > ind && col != strlen(first)) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, word, f);
        col += word;
        text += word;
        text += strspn(text, " ");
    }
    fputc('\n', f);
}

static void sim_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier sim [--trace FILE | generator options] [tier and cost options]\n"
            "\n"
            "Replays a page-access trace through each policy (decode, lru, belady: those this\n"
            "kvtier has) over HBM, DRAM and SSD tiers, and reports side by side the pages and\n"
            "bytes moved per link, the HBM hit ratio, and the stall and step time under a\n"
            "link/compute cost model. Belady is the offline optimum (MIN) for the bytes.\n"
            "\n"
            "A prefix-cache request trace (Mooncake's JSONL: a file whose first character is\n"
            "'{') runs the prefix-cache model instead: lru, arc, prefix and Belady's MIN\n"
            "prefix-hit fractions per capacity (kvtier sim --trace FILE.jsonl --help).\n"
            "\n"
            "The policies are the engine's own code; the manager around them is a model,\n"
            "not the engine's: its prefetch has one budget (--prefetch-bytes) and none of\n"
            "the engine's live depth, read horizon or third-copy drops, it pins whole groups,\n"
            "and it counts no write-backs of the tail pages a decode appends to. Compare\n"
            "policies by the bytes they fetch: with --prefetch-bytes at 1/8 of HBM (the\n"
            "engine's) its bytes came within 5%% of kvtier run's; its hit ratio, stall and\n"
            "step time are the model's, not the engine's (docs/sim.md).\n"
            "\n"
            "trace:\n"
            "  --trace FILE        replay FILE (format below) instead of generating\n"
            "  --write-trace FILE  also write the trace being simulated to FILE\n"
            "generator (a decode of a model shape; ignored with --trace):\n"
            "  --model NAME        preset (default llama3-8b; list below)\n"
            "  --layers N          layers to simulate, at most the model's (default: all; cut\n"
            "                      for speed)\n"
            "  --dtype T           KV dtype (default: the preset's): sets the page bytes\n"
            "  --batch N           sequences (default 4)\n"
            "  --context N         tokens per sequence before the first step (default 8k;\n"
            "                      k and m are x1024)\n"
            "  --tokens N          decode steps (default 16)\n"
            "  --page-tokens N     tokens per page (default 16)\n"
            "  --window-pages N    sliding window: the last N pages are read (default 0: all)\n"
            "  --sink-pages N      with a window, the first N pages are read too (default 0)\n"
            "  --order O           layer (for layer { for seq }, default) or seq\n"
            "tiers:\n"
            "  --hbm-pages N       HBM capacity in pages, or\n"
            "  --hbm-frac X        HBM capacity as a fraction of the pages used (default 0.5)\n"
            "  --dram-pages N      DRAM capacity in pages, or --dram-frac X; default: DRAM\n"
            "  --dram-frac X       holds everything and the SSD is not used\n"
            "  --cold              HBM starts empty (default: holding the first-used pages)\n"
            "cost model:\n"
            "  --h2d-gbps X        DRAM->HBM and HBM->DRAM, each (default 50)\n"
            "  --ssd-gbps X        SSD reads and writes together (default 6)\n"
            "  --compute-us X      compute per group, one (sequence, layer) (default 50)\n"
            "  --prefetch-bytes N  most bytes prefetched and not yet used (default: what\n"
            "                      DRAM->HBM moves during one group's compute; 0: none)\n"
            "output:\n"
            "  --policies A,B      policies to run (default decode,lru,belady: those built)\n"
            "  --json              one JSON object on stdout; the text goes to stderr\n"
            "  -h, --help          this text\n"
            "\n"
            "The cost model:\n");
    for (size_t i = 0; i < sim_n_rules; i++)
        wrap(f, "  - ", "    ", sim_rules[i]);
    fprintf(f,
            "\n"
            "Trace format (text, version 1): one record per line; '#' starts a comment;\n"
            "blank lines are skipped; numbers are decimal (ID < 2^64, LAYER, INDEX < 2^32).\n"
            "  kvtier-trace 1            the first line\n"
            "  page_bytes N              bytes per page; required, before any record\n"
            "  schedule order=layer|seq layers=L window=W sinks=S ids=A,B,...\n"
            "                            optional, before any record: what kvt_set_schedule\n"
            "                            got (window and sinks default to 0)\n"
            "  advance ID LAYER          kvt_advance: now computing (ID, LAYER)\n"
            "  access ID LAYER INDEX     one page read by the attention\n"
            "  new ID LAYER INDEX        a page created in HBM (the tail grows)\n"
            "  drop ID                   the sequence finished: its pages are gone\n"
            "  step                      the end of a decode step\n"
            "A page accessed before any `new` of it exists before the trace (the prefill).\n"
            "\n"
            "Exit status: 0, 1 when a trace cannot be read or written or is malformed (the\n"
            "message names the line), 2 for a bad argument.\n"
            "\n"
            "presets:\n");
    kvt_preset_list(f, "  ");
}

enum {
    O_TRACE = 256, O_WRITE, O_MODEL, O_LAYERS, O_DTYPE, O_BATCH, O_CONTEXT, O_TOKENS,
    O_PAGE_TOKENS, O_WINDOW, O_SINKS, O_ORDER, O_HBM_PAGES, O_HBM_FRAC, O_DRAM_PAGES,
    O_DRAM_FRAC, O_COLD, O_H2D, O_SSD, O_COMPUTE, O_PREFETCH, O_POLICIES, O_JSON,
};

static const struct option sim_lo[] = {
    { "trace", 1, 0, O_TRACE },           { "write-trace", 1, 0, O_WRITE },
    { "model", 1, 0, O_MODEL },           { "layers", 1, 0, O_LAYERS },
    { "dtype", 1, 0, O_DTYPE },           { "batch", 1, 0, O_BATCH },
    { "context", 1, 0, O_CONTEXT },       { "tokens", 1, 0, O_TOKENS },
    { "page-tokens", 1, 0, O_PAGE_TOKENS }, { "window-pages", 1, 0, O_WINDOW },
    { "sink-pages", 1, 0, O_SINKS },      { "order", 1, 0, O_ORDER },
    { "hbm-pages", 1, 0, O_HBM_PAGES },   { "hbm-frac", 1, 0, O_HBM_FRAC },
    { "dram-pages", 1, 0, O_DRAM_PAGES }, { "dram-frac", 1, 0, O_DRAM_FRAC },
    { "cold", 0, 0, O_COLD },             { "h2d-gbps", 1, 0, O_H2D },
    { "ssd-gbps", 1, 0, O_SSD },          { "compute-us", 1, 0, O_COMPUTE },
    { "prefetch-bytes", 1, 0, O_PREFETCH }, { "policies", 1, 0, O_POLICIES },
    { "json", 0, 0, O_JSON },             { "help", 0, 0, 'h' },
    { 0, 0, 0, 0 },
};

static int bad_value(const char *opt, const char *val, const char *want)
{
    cli_error("sim", 2, "bad value '%s' for --%s: expected %s", val, opt, want);
    return -EINVAL;
}

/* A count from 1 (or 0 when zero_ok) to max, with k/m suffixes. */
static int opt_count(const char *opt, const char *val, uint64_t max, bool zero_ok, uint64_t *out)
{
    uint64_t v;
    if (cli_parse_count(val, &v) || v > max || (!zero_ok && !v)) {
        char want[64];
        snprintf(want, sizeof want, "a whole number from %d to %llu", zero_ok ? 0 : 1,
                 (unsigned long long)max);
        return bad_value(opt, val, want);
    }
    *out = v;
    return 0;
}

static int opt_double(const char *opt, const char *val, double lo, bool lo_ok, double hi,
                      const char *want, double *out)
{
    double v;
    if (cli_parse_real(val, &v) || v < lo || (!lo_ok && v == lo) || v > hi)
        return bad_value(opt, val, want);
    *out = v;
    return 0;
}

static int opt_policies(struct sim_opts *o, const char *val)
{
    static char buf[256];
    char *items[SIM_MAX_POL];
    int n, r = cli_split_list(val, buf, sizeof buf, items, SIM_MAX_POL, &n);
    if (r == -E2BIG)
        return bad_value("policies", val, "at most 8 names");
    if (r)
        return bad_value("policies", val, "policy names separated by commas, none empty");
    for (int i = 0; i < n; i++) {
        const struct kvt_policy_ops *ops = kvt_lab_policy_find(items[i]);
        if (!ops) {
            cli_error("sim", 2, "no policy '%s' for --policies (decode, lru, arc, prefix, belady)",
                      items[i]);
            return -EINVAL;
        }
        o->pol_names[i] = ops->name;
    }
    o->n_pol = n;
    o->pol_given = true;
    return 0;
}

static int sim_option(int c, const char *a, struct sim_opts *o)
{
    uint64_t v;
    int e = 0;
    const char *name = "";
    for (const struct option *l = sim_lo; l->name; l++)
        if (l->val == c)
            name = l->name;
    if (c >= O_MODEL && c <= O_ORDER && !o->gen_flag)
        o->gen_flag = name;
    switch (c) {
    case O_TRACE:
    case O_WRITE:
        if (!*a)
            e = bad_value(name, a, "a file name");
        *(c == O_TRACE ? &o->trace_path : &o->write_path) = a;
        break;
    case O_MODEL: o->model = a; break;
    case O_DTYPE: o->dtype = a; break;
    case O_LAYERS:
        if (!(e = opt_count(name, a, 1u << 16, false, &v)))
            o->gen.layers = (uint32_t)v, o->layers_given = true;
        break;
    case O_BATCH:
        if (!(e = opt_count(name, a, 1u << 16, false, &v)))
            o->gen.batch = (uint32_t)v;
        break;
    case O_CONTEXT: e = opt_count(name, a, 1ull << 40, false, &o->gen.context); break;
    case O_TOKENS: e = opt_count(name, a, 1ull << 32, false, &o->gen.tokens); break;
    case O_PAGE_TOKENS: e = opt_count(name, a, 1ull << 32, false, &o->gen.page_tokens); break;
    case O_WINDOW:
    case O_SINKS:
        if (!(e = opt_count(name, a, UINT32_MAX, true, &v)))
            *(c == O_WINDOW ? &o->gen.window_pages : &o->gen.sink_pages) = (uint32_t)v;
        break;
    case O_ORDER:
        if (!strcmp(a, "layer"))
            o->gen.order = KVT_ORDER_LAYER_MAJOR;
        else if (!strcmp(a, "seq"))
            o->gen.order = KVT_ORDER_SEQ_MAJOR;
        else
            e = bad_value(name, a, "layer or seq");
        break;
    case O_HBM_PAGES: e = opt_count(name, a, 1ull << 40, false, &o->hbm_pages); break;
    case O_DRAM_PAGES: e = opt_count(name, a, 1ull << 40, false, &o->dram_pages); break;
    case O_HBM_FRAC:
    case O_DRAM_FRAC:
        e = opt_double(name, a, 0, false, 1, "a fraction above 0, at most 1",
                       c == O_HBM_FRAC ? &o->hbm_frac : &o->dram_frac);
        break;
    case O_COLD: o->cold = true; break;
    case O_H2D:
    case O_SSD:
        e = opt_double(name, a, 0, false, 1e6, "GB/s above 0", c == O_H2D ? &o->h2d : &o->ssd);
        break;
    case O_COMPUTE:
        e = opt_double(name, a, 0, true, 1e9, "microseconds, 0 or more", &o->compute_us);
        break;
    case O_PREFETCH:
        if (cli_parse_size(a, &o->prefetch_bytes))
            e = bad_value(name, a, "a size such as 64M, or 0");
        o->prefetch_given = true;
        break;
    case O_POLICIES: e = opt_policies(o, a); break;
    case O_JSON: o->json = true; break;
    default: break;
    }
    return e;
}

/* The shape behind a generated trace: preset, layers, dtype, page bytes. */
static int sim_shape(struct sim_opts *o)
{
    if (!o->model)
        o->model = "llama3-8b";
    o->shape = kvt_preset_find(o->model);
    if (!o->shape) {
        cli_error("sim", 2, "unknown model '%s' for --model; the presets are:", o->model);
        kvt_preset_list(stderr, "  ");
        return -EINVAL;
    }
    if (!o->layers_given)
        o->gen.layers = o->shape->layers;
    if (o->gen.layers > o->shape->layers) {
        cli_error("sim", 2, "bad value '%u' for --layers: %s has %u layers", o->gen.layers,
                  o->shape->name, o->shape->layers);
        return -EINVAL;
    }
    if (!o->dtype)
        o->dtype = o->shape->dtype;
    unsigned bits = kvt_dtype_bits(o->dtype);
    if (!bits)
        return bad_value("dtype", o->dtype, "fp32, fp16, bf16, fp8, int8 or int4");
    uint64_t per;
    if (kvt_kv_bytes_per_token_layer(o->shape, bits, &per) ||
        __builtin_mul_overflow(per, o->gen.page_tokens, &o->gen.page_bytes)) {
        cli_error("sim", 2, "the pages of this shape do not fit 64 bits");
        return -EINVAL;
    }
    return 0;
}

int sim_parse(int argc, char **argv, struct sim_opts *o)
{
    *o = (struct sim_opts){
        .gen = { .batch = 4, .context = 8192, .tokens = 16, .page_tokens = 16,
                 .order = KVT_ORDER_LAYER_MAJOR },
        .h2d = 50, .ssd = 6, .compute_us = 50,
    };
    int c, e;
    optind = 0; /* GNU: a full reset, so sim_main can run more than once */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", sim_lo, NULL)) != -1) {
        if (c == 'h') {
            sim_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("sim", c, argv, sim_lo);
        if ((e = sim_option(c, optarg, o)))
            return e;
    }
    if (optind != argc) {
        cli_error("sim", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if (o->trace_path && o->gen_flag) {
        cli_error("sim", 2, "--%s describes a generated trace; it cannot be used with --trace",
                  o->gen_flag);
        return -EINVAL;
    }
    if (o->hbm_pages && o->hbm_frac > 0) {
        cli_error("sim", 2, "give --hbm-pages or --hbm-frac, not both");
        return -EINVAL;
    }
    if (o->dram_pages && o->dram_frac > 0) {
        cli_error("sim", 2, "give --dram-pages or --dram-frac, not both");
        return -EINVAL;
    }
    if (!o->hbm_pages && !(o->hbm_frac > 0))
        o->hbm_frac = 0.5;
    if (!o->pol_given)
        for (size_t i = 0; i < sizeof(sim_default_policies) / sizeof(sim_default_policies[0]); i++)
            if (kvt_lab_policy_find(sim_default_policies[i]))
                o->pol_names[o->n_pol++] = sim_default_policies[i];
    return o->trace_path ? 0 : sim_shape(o);
}
