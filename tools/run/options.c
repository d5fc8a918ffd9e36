/*
 * options.c — `kvtier run`'s options, --help, and the command itself
 * (run_main: parse, run_exec, report).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/run/run_priv.h"

const char *const run_codec_name[RUN_CODECS] = { "none", "zstd", "zstd-shuffle16",
                                                 "fp8",  "int8", "int4" };
const char *const run_dtype_name[ATTN_DTYPES] = { "fp32", "bf16", "fp8", "int8", "int4" };

void run_opts_default(struct run_opts *o)
{
    *o = (struct run_opts){ 0 };
    o->model = kvt_preset_find("llama3-8b");
    o->layers = 4;
    o->batch = 2;
    o->context = 4096;
    o->tokens = 16;
    o->page_tokens = 32;
    o->dtype = ATTN_BF16;
    o->hbm = o->dram = o->ssd = RUN_AUTO;
    o->policy = "decode";
    o->codec = KVT_CODEC_NONE;
    o->device = KVT_DEVICE_HOST;
    o->threads = 2;
    o->nice = RUN_ATTN_NICE;
    o->pin = true;
    o->seed = 1;
    o->ref_seed = 1;
    o->verify_every = 1;
    o->corrupt_step = -1;
    o->progress = true;
}

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier run [options]\n"
            "\n"
            "A long-context decode over the HBM, DRAM and SSD tiers: a deterministic prefill\n"
            "writes every KV page, then each step runs grouped-query attention of a new\n"
            "query over every page of each (sequence, layer), acquired from kvtier, and\n"
            "appends the token's K and V. Every output is checked bit-exactly against a\n"
            "reference computed without kvtier (quantised KV: and within a tolerance of\n"
            "bf16's). MHA, GQA, MQA (any q heads per kv head) and MLA (absorbed form);\n"
            "bf16 KV by default, the attention in fp32 on the CPU (host back-end) or on\n"
            "the GPU (--device N). docs/run.md: the shapes and tolerances.\n"
            "\n"
            "options:\n"
            "  --model NAME      model shape preset (default llama3-8b):\n");
    kvt_preset_list(f, "                      ");
    fprintf(f,
            "  --layers N        cut the model to its first N layers, at most its own (default 4;\n"
            "                    0 = all)\n"
            "  --batch N         sequences decoded together (default 2)\n"
            "  --context N       tokens already in each sequence, e.g. 4096 or 32k (default 4k)\n"
            "  --tokens N        tokens to generate per sequence (default 16)\n"
            "  --page-tokens N   tokens per page, 1..%u (default 32: 128 KiB pages for\n"
            "                    llama3-8b in bf16, the size the fp32 pages of 16 had)\n"
            "  --hbm N           HBM tier capacity, e.g. 512M (default: a quarter of the KV,\n"
            "                    at least a (sequence, layer) group and two chunks beside\n"
            "                    it; with --device N, two groups)\n"
            "  --dram N          DRAM tier capacity (default: two thirds of the KV beyond HBM);\n"
            "                    with an SSD tier, at least the pages of one acquire\n"
            "                    (--chunk-pages; with --device N, a whole group)\n"
            "  --ssd N           SSD tier capacity, 0 = none (default: twice the KV)\n"
            "  --ssd-dir DIR     spill directory (default: a temporary one, removed at exit)\n"
            "  --overwrite-ssd-dir\n"
            "                    let the run wipe the pages a persisted kvtier store in\n"
            "                    --ssd-dir holds (without it such a directory is refused)\n"
            "  --codec C         none, zstd or zstd-shuffle16 for SSD pages (default none); or\n"
            "                    fp8, int8 or int4: pages quantised on their way to SSD, the\n"
            "                    outputs checked against the reference within the codec's\n"
            "                    tolerance, their error printed (docs/codecs.md)\n"
            "  --full-layers N   with a lossy codec: the first and the last N layers stay in\n"
            "                    full precision on SSD too (default 0)\n"
            "  --policy P        decode or lru (default decode)\n"
            "  --device D        host (default), or a CUDA ordinal: pages in GPU memory and the\n"
            "                    attention on the GPU (builds where CMake found nvcc)\n"
            "  --dtype T         the KV's stored type: bf16 (default), fp32, or quantised\n"
            "                    fp8 (e4m3), int8, int4 (scales in the page: K per channel\n"
            "                    for int8 and int4, else per 64 elements of a row)\n"
            "  --window N        sliding window: the last N tokens attended, the pages\n"
            "                    wholly behind it dropped from every tier (default 0: all)\n"
            "  --threads N       attention threads (default 2)\n"
            "  --chunk-pages N   CPU: pages computed while the next ones are acquired\n"
            "                    (default: 4 MiB of them; the whole group = no pipeline)\n"
            "  --nice N          their nice value, 0-19 (default 19: the I/O threads come first;\n"
            "                    0 = the caller's priority, the caller computing a part)\n"
            "  --no-pin          let the attention workers run on any CPU (default: each on\n"
            "                    a CPU of its own where there are enough; runs side by\n"
            "                    side all bind to the same first CPUs)\n"
            "  --link-gbps X     host back-end: cap each emulated DRAM<->HBM link at X GB/s\n"
            "                    (default 0: no cap)\n"
            "  --seed N          KV generator seed (default 1)\n"
            "  --verify-every N  check steps 0, N, 2N, ... and the last against the reference\n"
            "                    (default 1: every step; the CPU reference of a step costs\n"
            "                    far more than a GPU decode's)\n"
            "  --trace FILE      Chrome trace-event JSON of waits and compute (Perfetto)\n"
            "  --no-progress     no progress output\n"
            "  --json            one JSON object on stdout; text goes to stderr\n"
            "  -h, --help        this text\n",
            ATTN_MAX_PAGE_TOKENS);
}

static const struct option run_lo[] = {
    { "model", 1, 0, 'm' },   { "layers", 1, 0, 'L' },    { "batch", 1, 0, 'b' },
    { "context", 1, 0, 'c' }, { "tokens", 1, 0, 't' },    { "page-tokens", 1, 0, 'p' },
    { "hbm", 1, 0, 'H' },     { "dram", 1, 0, 'D' },      { "ssd", 1, 0, 'S' },
    { "ssd-dir", 1, 0, 'd' }, { "codec", 1, 0, 'C' },     { "policy", 1, 0, 'P' },
    { "device", 1, 0, 'v' },  { "threads", 1, 0, 'T' },   { "link-gbps", 1, 0, 'l' },
    { "seed", 1, 0, 's' },    { "trace", 1, 0, 'r' },     { "no-progress", 0, 0, 'n' },
    { "json", 0, 0, 'j' },    { "help", 0, 0, 'h' },      { "nice", 1, 0, 'N' },
    { "chunk-pages", 1, 0, 'k' }, { "dtype", 1, 0, 'y' },     { "verify-every", 1, 0, 'V' },
    { "overwrite-ssd-dir", 0, 0, 'O' }, { "full-layers", 1, 0, 'F' },
    { "window", 1, 0, 'W' },  { "no-pin", 0, 0, 'Q' },
    { 0, 0, 0, 0 },
};

/* The long name of option c. */
static const char *run_opt_name(int c)
{
    for (const struct option *l = run_lo; l->name; l++)
        if (l->val == c)
            return l->name;
    return "?";
}

/* A count option of at most 32 bits into *out. */
static int opt_u32(int c, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t n;
    int r = cli_opt_count("run", run_opt_name(c), v, lo, hi, &n);
    if (r == 0)
        *out = (uint32_t)n;
    return r;
}

/* A word option: v must be one of names[0..n); its index into *out. */
static int opt_word(int c, const char *v, const char *const *names, int n, const char *want,
                    int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) {
            *out = i;
            return 0;
        }
    return cli_bad_value("run", run_opt_name(c), v, want);
}

/* The options that take a number. */
static int run_number(int c, const char *v, struct run_opts *o)
{
    const char *n = run_opt_name(c);
    switch (c) {
    case 'L': return opt_u32(c, v, 0, 100000, &o->layers); /* against the model: run_parse */
    case 'b': return opt_u32(c, v, 1, 4096, &o->batch);
    case 'c': return cli_opt_count("run", n, v, 1, 1u << 30, &o->context);
    case 't': return opt_u32(c, v, 1, 1u << 20, &o->tokens);
    case 'p': return opt_u32(c, v, 1, ATTN_MAX_PAGE_TOKENS, &o->page_tokens);
    case 'H': return cli_opt_size("run", n, v, 1, UINT64_MAX - 1, &o->hbm);
    case 'D': return cli_opt_size("run", n, v, 1, UINT64_MAX - 1, &o->dram);
    case 'S': return cli_opt_size("run", n, v, 0, UINT64_MAX - 1, &o->ssd);
    case 'T': return opt_u32(c, v, 1, 64, &o->threads);
    case 'N': return opt_u32(c, v, 0, 19, &o->nice);
    case 'k': return opt_u32(c, v, 1, 1u << 30, &o->chunk_pages);
    case 'V': return opt_u32(c, v, 1, 1u << 20, &o->verify_every);
    case 'W': return opt_u32(c, v, 0, 1u << 30, &o->window);
    case 'l': return cli_opt_real("run", n, v, 0, false, 1e6, &o->link_gbps);
    case 's':
        if (cli_opt_count("run", n, v, 0, UINT64_MAX, &o->seed))
            return -EINVAL;
        o->ref_seed = o->seed;
        return 0;
    default: return -EINVAL;
    }
}

/* One option's value into o; 0 or -EINVAL having said why. */
static int run_option(int c, const char *v, struct run_opts *o)
{
    static const char *const policies[] = { "decode", "lru" };
    int i = 0;
    switch (c) {
    case 'm':
        if (!(o->model = kvt_preset_find(v)))
            return cli_bad_value("run", "model", v, "a preset name (see kvtier run --help)");
        return 0;
    case 'd':
    case 'r':
        if (cli_opt_path("run", run_opt_name(c), v))
            return -EINVAL;
        *(c == 'd' ? &o->ssd_dir : &o->trace_path) = v;
        return 0;
    case 'C':
        return opt_word(c, v, run_codec_name, RUN_CODECS,
                        "none, zstd, zstd-shuffle16, fp8, int8 or int4", &o->codec);
    case 'F': return opt_u32(c, v, 0, 1u << 16, &o->full_layers);
    case 'P':
        if (opt_word(c, v, policies, 2, "decode or lru", &i))
            return -EINVAL;
        o->policy = policies[i];
        return 0;
    case 'y':
        if (opt_word(c, v, run_dtype_name, ATTN_DTYPES, "bf16, fp32, fp8, int8 or int4", &i))
            return -EINVAL;
        o->dtype = (uint32_t)i;
        return 0;
    case 'v':
        if (cli_parse_device(v, &o->device))
            return cli_bad_value("run", "device", v, "host, auto or a CUDA ordinal");
        return 0;
    case 'O': o->overwrite_ssd_dir = true; return 0;
    case 'n': o->progress = false; return 0;
    case 'Q': o->pin = false; return 0;
    case 'j': o->json = true; return 0;
    default: return run_number(c, v, o);
    }
}

/* 0 to run, 1 after --help, -EINVAL after a message. */
static int run_parse(int argc, char **argv, struct run_opts *o)
{
    run_opts_default(o);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", run_lo, NULL)) != -1) {
        if (c == 'h') {
            run_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("run", c, argv, run_lo);
        if (run_option(c, optarg, o))
            return -EINVAL;
    }
    if (optind != argc) {
        cli_error("run", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    /* A cut, never a silent one: more layers than the model has is a mistake. */
    if (o->layers > o->model->layers) {
        cli_error("run", 2, "bad value '%u' for --layers: %s has %u layers (0 = all of them)",
                  o->layers, o->model->name, o->model->layers);
        return -EINVAL;
    }
    return 0;
}

int run_main(int argc, char **argv)
{
    struct run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    struct run_result r;
    cli_stop_catch();
    rc = run_exec(&o, &r);
    int stopped = cli_stop_end("run");
    if (stopped)
        return stopped;
    if (rc < 0)
        return rc == -EINVAL ? 2 : 1;
    uint32_t layers = o.layers && o.layers < o.model->layers ? o.layers : o.model->layers;
    run_report_text(o.json ? stderr : stdout, &o, &r, layers);
    if (o.json)
        run_report_json(&o, &r, layers);
    return rc ? 1 : 0;
}

