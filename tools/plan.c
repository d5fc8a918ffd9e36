/*
 * plan.c — `kvtier plan`: how big a model shape's KV cache is for a context
 * and a batch, how it splits over HBM, DRAM and SSD capacities, and the
 * decode-step time that split cannot beat at the links' bandwidths.
 *
 * The bound is a floor, not a forecast: each decode step reads every KV byte
 * once, and a byte that is not in HBM must cross the links each step, so no
 * engine decodes faster than the slowest link allows. Link figures come from
 * the flags, else from `kvtier bench`'s cache file, else from assumptions that
 * the output names — a bound built on a silent assumption is worse than none.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/codec.h"
#include "tools/cli.h"
#include "tools/presets.h"
#include "tools/util/json.h"

/* Default link bandwidths (GB/s) when neither a flag nor the bench file gives
 * one, each with what it stands for: printed beside the figure it produces. */
static const double default_gbps[PLAN_TIERS] = { 4000, 50, 6 };
static const char *const default_why[PLAN_TIERS] = {
    "H200-class HBM3e, 4.8 TB/s peak, about 4.0 reached by streaming reads",
    "PCIe 5.0 x16, 64 GB/s raw per direction, about 50 after protocol overhead",
    "one PCIe 4.0 x4 NVMe drive, about 6 GB/s of large sequential reads",
};
static const char *const link_name[PLAN_TIERS] = { "hbm read", "dram->hbm", "ssd read" };
static const char *const tier_name[PLAN_TIERS] = { "hbm", "dram", "ssd" };

#define NOTE_MAX 10

struct plan_opts {
    struct plan_in in;
    const char *model; /* NULL for a shape given by flags */
    const char *dtype;
    bool caps_given, json;
    char bw_src[PLAN_TIERS][PATH_MAX + 64]; /* where each bandwidth came from, in words */
    const char *bw_tag[PLAN_TIERS];          /* and as "given", "bench" or "assumed" */
};

/* ------------------------------------------------------------- sizing */

void plan_split(uint64_t total, uint64_t page_bytes, const uint64_t cap[PLAN_TIERS],
                uint64_t split[PLAN_TIERS], uint64_t *unplaced)
{
    uint64_t left = total, pb = page_bytes ? page_bytes : 1;
    for (int t = 0; t < PLAN_TIERS; t++) {
        uint64_t room = cap[t] == PLAN_UNBOUNDED ? left : cap[t] / pb * pb;
        split[t] = left < room ? left : room;
        left -= split[t];
    }
    *unplaced = left;
}

double plan_bound(const uint64_t split[PLAN_TIERS], const double gbps[PLAN_TIERS],
                  double term_s[PLAN_TIERS], int *bound_by)
{
    double total = (double)split[PLAN_HBM] + (double)split[PLAN_DRAM] + (double)split[PLAN_SSD];
    double streamed = (double)split[PLAN_DRAM] + (double)split[PLAN_SSD];
    term_s[PLAN_HBM] = total / (gbps[PLAN_HBM] * 1e9);
    term_s[PLAN_DRAM] = streamed / (gbps[PLAN_DRAM] * 1e9);
    term_s[PLAN_SSD] = (double)split[PLAN_SSD] / (gbps[PLAN_SSD] * 1e9);
    *bound_by = PLAN_HBM;
    for (int t = 1; t < PLAN_TIERS; t++)
        if (term_s[t] > term_s[*bound_by])
            *bound_by = t;
    return term_s[*bound_by];
}

/* The byte counts of plan_out; -EOVERFLOW if one passes 64 bits. */
static int plan_sizes(const struct plan_in *in, struct plan_out *o)
{
    uint64_t layers = in->shape.layers;
    int r = kvt_kv_bytes_per_token_layer(&in->shape, in->bits, &o->per_token_layer);
    if (r)
        return r;
    o->pages_per_layer = in->context / in->page_tokens + (in->context % in->page_tokens != 0);
    if (__builtin_mul_overflow(o->per_token_layer, layers, &o->per_token) ||
        __builtin_mul_overflow(o->per_token_layer, in->context, &o->per_layer_seq) ||
        __builtin_mul_overflow(o->per_token, in->context, &o->per_seq) ||
        __builtin_mul_overflow(o->per_seq, in->batch, &o->total) ||
        __builtin_mul_overflow(o->per_token_layer, in->page_tokens, &o->page_bytes_layer) ||
        __builtin_mul_overflow(o->per_token, in->page_tokens, &o->page_bytes_all) ||
        __builtin_mul_overflow(o->pages_per_layer, layers, &o->pages_per_seq_layer_first))
        return -EOVERFLOW;
    return 0;
}

int plan_compute(const struct plan_in *in, struct plan_out *o)
{
    *o = (struct plan_out){ 0 };
    if (!in->context || !in->batch || !in->page_tokens)
        return -EINVAL;
    for (int t = 0; t < PLAN_TIERS; t++)
        if (!(in->gbps[t] > 0) || isinf(in->gbps[t])) /* also refuses NaN */
            return -EINVAL;
    int r = plan_sizes(in, o);
    if (r)
        return r;
    plan_split(o->total, o->page_bytes_layer, in->cap, o->split, &o->unplaced);
    /* KV that fits nowhere cannot be decoded at all: no bound to give. */
    if (o->unplaced)
        return 0;
    o->bound_s = plan_bound(o->split, in->gbps, o->term_s, &o->bound_by);
    o->tokens_per_s = (double)in->batch / o->bound_s;
    return 0;
}

/* ------------------------------------------------------------- bench file */

/* The positive number o[key], or 0 when absent or not one. */
static double json_number(const json_t *o, const char *key)
{
    const json_t *j = json_object_get(o, key);
    double v = json_is_number(j) ? json_number_value(j) : 0;
    return v > 0 && isfinite(v) ? v : 0;
}

int plan_read_bench(const char *path, double *h2d, double *ssd)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    /* The bench writes a few hundred bytes; 64 KiB leaves room for it to
     * grow (per-link detail) without reading an arbitrary file whole. */
    size_t cap = 64 << 10;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    size_t n = fread(buf, 1, cap - 1, f);
    int err = ferror(f) ? -EIO : 0;
    fclose(f);
    /* Not JSON, or not an object: no figures (the defaults then). */
    json_t *o = err ? NULL : json_loadb(buf, n, 0, NULL);
    free(buf);
    int mask = 0;
    double v;
    if ((v = json_number(o, "h2d_gbps")) > 0)
        *h2d = v, mask |= 1;
    if ((v = json_number(o, "ssd_read_gbps")) > 0)
        *ssd = v, mask |= 2;
    json_decref(o);
    return err ? err : mask;
}

/* $XDG_CACHE_HOME/kvtier/bench.json, else ~/.cache/kvtier/bench.json; the
 * XDG spec ignores a relative XDG_CACHE_HOME, and so do we. */
static int bench_path(char *buf, size_t n)
{
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && x[0] == '/')
        snprintf(buf, n, "%s/kvtier/bench.json", x);
    else if (h && *h)
        snprintf(buf, n, "%s/.cache/kvtier/bench.json", h);
    else
        return -ENOENT;
    return 0;
}

/* Fills the bandwidths no flag gave: the bench file's, else the defaults;
 * bw_src[] says which, for the output. */
static void plan_bandwidths(struct plan_opts *o)
{
    char path[PATH_MAX];
    double measured[PLAN_TIERS] = { 0, 0, 0 };
    if (bench_path(path, sizeof path) == 0 &&
        plan_read_bench(path, &measured[PLAN_DRAM], &measured[PLAN_SSD]) < 0)
        measured[PLAN_DRAM] = measured[PLAN_SSD] = 0;
    for (int t = 0; t < PLAN_TIERS; t++) {
        if (o->in.gbps[t] > 0) {
            o->bw_tag[t] = "given";
            snprintf(o->bw_src[t], sizeof o->bw_src[t], "given");
        } else if (measured[t] > 0) {
            o->in.gbps[t] = measured[t];
            o->bw_tag[t] = "bench";
            snprintf(o->bw_src[t], sizeof o->bw_src[t], "measured by kvtier bench (%s)", path);
        } else {
            o->in.gbps[t] = default_gbps[t];
            o->bw_tag[t] = "assumed";
            snprintf(o->bw_src[t], sizeof o->bw_src[t], "assumed (%s)", default_why[t]);
        }
    }
}

/* ------------------------------------------------------------- options */

static void plan_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier plan (--model NAME | --layers N (--kv-heads N --head-dim N |\n"
            "                   --kv-lora-rank N --rope-dim N)) --context N [options]\n"
            "\n"
            "KV cache bytes per token, per sequence and in total for a model shape; how they\n"
            "split over the tier capacities (HBM first, then DRAM, then SSD); and the\n"
            "decode-step time that split cannot beat, since every step reads every KV byte.\n"
            "\n"
            "shape (flags given with --model override the preset's numbers):\n"
            "  --model NAME        a preset (below)\n"
            "  --layers N          transformer layers\n"
            "  --kv-heads N        K/V heads (GQA; MHA: = query heads; MQA: 1)\n"
            "  --head-dim N        dimensions per head\n"
            "  --kv-lora-rank N    MLA latent dimensions (DeepSeek kv_lora_rank)\n"
            "  --rope-dim N        MLA decoupled RoPE key dimensions (qk_rope_head_dim)\n"
            "  --dtype T           fp32, fp16, bf16, fp8, int8 or int4 (default: the preset's,\n"
            "                      else bf16); int4 rows are padded to whole bytes\n"
            "workload:\n"
            "  --context N         tokens per sequence (32k, 1m: k and m are x1024); required\n"
            "  --batch N           sequences (default 1)\n"
            "  --page-tokens N     tokens per page, for the page figures (default 16)\n"
            "tiers (KV budget of each; with none given all KV is taken to be in HBM, with\n"
            "some given the others are 0):\n"
            "  --hbm N, --dram N, --ssd N   capacities (80G, 512G, 4T)\n"
            "links, GB/s (default: kvtier bench's cache file, else the assumption printed):\n"
            "  --hbm-gbps X        HBM read by the attention kernel (assumed %g)\n"
            "  --h2d-gbps X        DRAM->HBM (assumed %g)\n"
            "  --ssd-gbps X        SSD read (assumed %g)\n"
            "output:\n"
            "  --json              one JSON object on stdout; text goes to stderr\n"
            "  -h, --help          this text\n"
            "\n"
            "presets:\n",
            default_gbps[PLAN_HBM], default_gbps[PLAN_DRAM], default_gbps[PLAN_SSD]);
    kvt_preset_list(f, "  ");
}

/* Shape flags as given, before a preset is applied: the first SA_N entries
 * of plan_lo, in this order; `given` has bit 1 << SA_* for each one seen. */
enum { SA_LAYERS, SA_KV_HEADS, SA_HEAD_DIM, SA_LORA, SA_ROPE, SA_N };
#define G_GQA ((1u << SA_KV_HEADS) | (1u << SA_HEAD_DIM))
#define G_MLA ((1u << SA_LORA) | (1u << SA_ROPE))

struct shape_args {
    unsigned given;
    uint32_t v[SA_N];
};

static int unknown_model(const char *name)
{
    cli_error("plan", 2, "unknown model '%s' for --model; the presets are:", name);
    kvt_preset_list(stderr, "  ");
    return -EINVAL;
}

/* The preset, or an empty shape when there is none; refuses MLA flags on a
 * GQA shape and the reverse, since the two formulas share no dimension. */
static int shape_base(const char *model, unsigned given, struct kvt_shape *s)
{
    if ((given & G_GQA) && (given & G_MLA)) {
        cli_error("plan", 2, "--kv-heads/--head-dim (GQA, MHA, MQA) and --kv-lora-rank/"
                  "--rope-dim (MLA) describe different caches; give one kind");
        return -EINVAL;
    }
    if (!model) {
        *s = (struct kvt_shape){ .name = "custom", .dtype = "bf16" };
        return 0;
    }
    const struct kvt_shape *p = kvt_preset_find(model);
    if (!p)
        return unknown_model(model);
    *s = *p;
    if ((given & G_MLA) && !kvt_shape_is_mla(s)) {
        cli_error("plan", 2, "--kv-lora-rank/--rope-dim do not apply to %s, a %s shape",
                  s->name, s->attn);
        return -EINVAL;
    }
    if ((given & G_GQA) && kvt_shape_is_mla(s)) {
        cli_error("plan", 2, "--kv-heads/--head-dim do not apply to %s, an MLA shape", s->name);
        return -EINVAL;
    }
    return 0;
}

/* Applies the flags over the base and checks that nothing is missing. */
static int plan_shape(const char *model, const struct shape_args *a, struct kvt_shape *s)
{
    int r = shape_base(model, a->given, s);
    if (r)
        return r;
    uint32_t *field[SA_N] = { &s->layers, &s->kv_heads, &s->head_dim, &s->kv_lora_rank,
                              &s->rope_dim };
    for (int i = 0; i < SA_N; i++)
        if (a->given & (1u << i))
            *field[i] = a->v[i];
    unsigned need = (1u << SA_LAYERS) | ((a->given & G_MLA) || kvt_shape_is_mla(s) ? G_MLA : G_GQA);
    if (!model && (a->given & need) != need) {
        cli_error("plan", 2, "missing shape: give --model NAME, or --layers with --kv-heads and "
                  "--head-dim (or --kv-lora-rank and --rope-dim for MLA)");
        return -EINVAL;
    }
    s->attn = kvt_shape_attn(s);
    return 0;
}

static int bad_value(const char *opt, const char *val, const char *want)
{
    cli_error("plan", 2, "bad value '%s' for --%s: expected %s", val, opt, want);
    return -EINVAL;
}

/* A positive, finite bandwidth; 1e6 GB/s is past any link there is. */
static int parse_gbps(const char *s, double *out)
{
    double v;
    if (cli_parse_real(s, &v) || !(v > 0) || v > 1e6)
        return -EINVAL;
    *out = v;
    return 0;
}

/* A count of at most max; zero allowed only where zero_ok. */
static int parse_dim(const char *s, uint64_t max, bool zero_ok, uint64_t *out)
{
    if (cli_parse_count(s, out) || *out > max || (!*out && !zero_ok))
        return -EINVAL;
    return 0;
}

static const struct option plan_lo[] = {
    { "layers", 1, 0, 0 },    { "kv-heads", 1, 0, 0 },  { "head-dim", 1, 0, 0 },
    { "kv-lora-rank", 1, 0, 0 }, { "rope-dim", 1, 0, 0 }, /* SA_* order */
    { "model", 1, 0, 'm' },   { "dtype", 1, 0, 't' },   { "context", 1, 0, 'c' },
    { "batch", 1, 0, 'b' },   { "page-tokens", 1, 0, 'p' }, { "hbm", 1, 0, 'H' },
    { "dram", 1, 0, 'D' },    { "ssd", 1, 0, 'S' },     { "hbm-gbps", 1, 0, 'x' },
    { "h2d-gbps", 1, 0, 'y' }, { "ssd-gbps", 1, 0, 'z' }, { "json", 0, 0, 'j' },
    { "help", 0, 0, 'h' },    { 0, 0, 0, 0 },
};

/* One option's value into o / a; li is its index in plan_lo. */
static int plan_option(int c, int li, const char *v, struct plan_opts *o, struct shape_args *a)
{
    const char *name = plan_lo[li].name;
    uint64_t n;
    switch (c) {
    case 0: /* a shape dimension; the RoPE part alone may be 0 */
        if (parse_dim(v, UINT32_MAX, li == SA_ROPE, &n))
            return bad_value(name, v, li == SA_ROPE ? "a count (0 or more)" : "a count of 1 or more");
        a->v[li] = (uint32_t)n;
        a->given |= 1u << li;
        return 0;
    case 'm': o->model = v; return 0;
    case 't':
        if (!kvt_dtype_bits(v))
            return bad_value(name, v, "fp32, fp16, bf16, fp8, int8 or int4");
        o->dtype = v;
        return 0;
    case 'c': case 'b': case 'p':
        if (parse_dim(v, UINT32_MAX, false, &n))
            return bad_value(name, v, c == 'c' ? "a token count of 1 or more, such as 32k or 1m"
                                               : "a count of 1 or more");
        *(c == 'c' ? &o->in.context : c == 'b' ? &o->in.batch : &o->in.page_tokens) = n;
        return 0;
    case 'H': case 'D': case 'S': {
        int t = c == 'H' ? PLAN_HBM : c == 'D' ? PLAN_DRAM : PLAN_SSD;
        if (cli_parse_size(v, &o->in.cap[t]))
            return bad_value(name, v, "a size such as 80G, 512G or 4T");
        o->caps_given = true;
        return 0;
    }
    case 'j': o->json = true; return 0;
    default: { /* x y z: the links */
        int t = c == 'x' ? PLAN_HBM : c == 'y' ? PLAN_DRAM : PLAN_SSD;
        if (parse_gbps(v, &o->in.gbps[t]))
            return bad_value(name, v, "GB/s, a number above 0");
        return 0;
    }
    }
}

/* Returns 0, 1 after --help, or -EINVAL having said why. */
static int plan_parse(int argc, char **argv, struct plan_opts *o)
{
    struct shape_args a = { 0 };
    *o = (struct plan_opts){ .in = { .batch = 1, .page_tokens = 16 } };
    int c, li = 0, r;
    optind = 0; /* GNU: a full reset, so plan_main can run more than once (the tests) */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", plan_lo, &li)) != -1) {
        if (c == 'h') {
            plan_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("plan", c, argv, plan_lo);
        if ((r = plan_option(c, li, optarg, o, &a)))
            return r;
    }
    if (optind != argc) {
        cli_error("plan", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if ((r = plan_shape(o->model, &a, &o->in.shape)))
        return r;
    if (!o->dtype)
        o->dtype = o->in.shape.dtype;
    o->in.bits = kvt_dtype_bits(o->dtype);
    if (!o->in.context) {
        cli_error("plan", 2, "--context is required: tokens per sequence, such as 32k");
        return -EINVAL;
    }
    for (int t = 0; t < PLAN_TIERS; t++)
        if (!o->caps_given)
            o->in.cap[t] = t == PLAN_HBM ? PLAN_UNBOUNDED : 0;
    plan_bandwidths(o);
    return 0;
}

/* ------------------------------------------------------------- report */

struct notes {
    int n;
    char s[NOTE_MAX][PATH_MAX + 160];
};

static void note(struct notes *ns, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct notes *ns, const char *fmt, ...)
{
    if (ns->n == NOTE_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ns->s[ns->n++], sizeof ns->s[0], fmt, ap);
    va_end(ap);
}

/* What the figures rest on, for the text and the JSON alike. */
static void plan_notes(const struct plan_opts *o, struct notes *ns)
{
    for (int t = 0; t < PLAN_TIERS; t++)
        note(ns, "%s %g GB/s: %s", link_name[t], o->in.gbps[t], o->bw_src[t]);
    note(ns, "each decode step reads every KV byte once, from HBM: streamed pages land in HBM first");
    note(ns, "the HBM read, DRAM->HBM and SSD streams overlap fully (layer-wise prefetch), so a "
             "step lasts as long as its slowest link");
    note(ns, "SSD pages reach HBM through DRAM over the same DRAM->HBM link, which therefore "
             "carries the DRAM and the SSD bytes together");
    note(ns, "not counted: compute, weight reads, and the token each step appends; a real step "
             "is slower");
    if (o->caps_given)
        note(ns, "capacities are each tier's KV budget (weights and buffers are outside them); "
                 "tiers hold whole pages of %llu tokens of one layer",
             (unsigned long long)o->in.page_tokens);
    else
        note(ns, "no tier capacity given: all KV is taken to be in HBM");
    if (o->in.bits == 16)
        note(ns, "codecs: fp8 (e4m3, a scale per head), int8 and int4 (K per channel, V per token "
                 "in groups of 128 and 64) quantise pages on their way to SSD; the frame's scales and its "
                 "padding to 4 KiB are counted; their CPU time is not (over 4 GB/s of bf16 a core, "
                 "kvtier bench ssd; docs/codecs.md)");
    note(ns, "sizes are binary (1 GiB = 2^30 bytes); bandwidths decimal (1 GB/s = 1e9 bytes/s)");
}

/* "2 (K, V) x 80 layers x 8 kv heads x 128 dims x 2 B = 327680 B" */
static void text_formula(FILE *t, const struct plan_in *in, const struct plan_out *p)
{
    const struct kvt_shape *s = &in->shape;
    char el[16];
    snprintf(el, sizeof el, in->bits == 4 ? "0.5" : "%u", in->bits / 8);
    if (kvt_shape_is_mla(s))
        fprintf(t, "(%u latent + %u rope) x %u layers x %s B", s->kv_lora_rank, s->rope_dim,
                s->layers, el);
    else
        fprintf(t, "2 (K, V) x %u layers x %u kv heads x %u dims x %s B", s->layers, s->kv_heads,
                s->head_dim, el);
    uint64_t elems = kvt_shape_is_mla(s) ? (uint64_t)s->kv_lora_rank + s->rope_dim
                                         : (uint64_t)s->kv_heads * s->head_dim;
    fprintf(t, " = %llu B%s\n", (unsigned long long)p->per_token,
            elems * in->bits % 8 ? " (each row padded to a whole byte)" : "");
}

static void text_sizes(FILE *t, const struct plan_opts *o, const struct plan_out *p)
{
    const struct plan_in *in = &o->in;
    char b[32];
    fprintf(t, "KV cache\n  per token            %10s   ",
            cli_bytes(b, sizeof b, (double)p->per_token));
    text_formula(t, in, p);
    fprintf(t, "  per layer, sequence  %10s\n", cli_bytes(b, sizeof b, (double)p->per_layer_seq));
    fprintf(t, "  per sequence         %10s   x %llu tokens\n",
            cli_bytes(b, sizeof b, (double)p->per_seq), (unsigned long long)in->context);
    fprintf(t, "  total                %10s   x %llu sequence%s\n",
            cli_bytes(b, sizeof b, (double)p->total), (unsigned long long)in->batch,
            in->batch == 1 ? "" : "s");
    fprintf(t, "  pages of %llu tokens: %s per layer (layer-first), %llu per layer, "
               "%llu per sequence;\n",
            (unsigned long long)in->page_tokens, cli_bytes(b, sizeof b, (double)p->page_bytes_layer),
            (unsigned long long)p->pages_per_layer, (unsigned long long)p->pages_per_seq_layer_first);
    fprintf(t, "    or %s over all layers (page-first), %llu per sequence\n",
            cli_bytes(b, sizeof b, (double)p->page_bytes_all),
            (unsigned long long)p->pages_per_layer);
}

static void text_split(FILE *t, const struct plan_opts *o, const struct plan_out *p)
{
    char b1[32], b2[32];
    fprintf(t, "\nSplit over the tiers (HBM first, then DRAM, then SSD)\n");
    fprintf(t, "  %-6s %12s %12s %7s\n", "tier", "capacity", "KV", "share");
    for (int tr = 0; tr < PLAN_TIERS; tr++) {
        const char *cap = o->in.cap[tr] == PLAN_UNBOUNDED
                              ? "any"
                              : cli_bytes(b1, sizeof b1, (double)o->in.cap[tr]);
        fprintf(t, "  %-6s %12s %12s %6.1f%%\n", tier_name[tr], cap,
                cli_bytes(b2, sizeof b2, (double)p->split[tr]),
                100.0 * (double)p->split[tr] / (double)p->total);
    }
    if (p->unplaced)
        fprintf(t, "  does not fit: %s of KV has no room; add that much capacity to a tier "
                   "(e.g. --ssd), or shorten the context or the batch\n",
                cli_bytes(b1, sizeof b1, (double)p->unplaced));
    else
        fprintf(t, "  everything fits\n");
}

static void text_codecs(FILE *t, const struct plan_opts *o, const struct plan_out *p);

static void text_bound(FILE *t, const struct plan_opts *o, const struct plan_out *p,
                       const struct notes *ns)
{
    char b1[32], b2[32];
    fprintf(t, "\nDecode-step bound (every step reads every KV byte once)\n");
    if (p->unplaced) {
        fprintf(t, "  none: the KV does not fit the tiers, so no decode can run\n");
    } else {
        uint64_t bytes[PLAN_TIERS] = { p->total, p->split[PLAN_DRAM] + p->split[PLAN_SSD],
                                       p->split[PLAN_SSD] };
        fprintf(t, "  %-10s %12s %8s %10s\n", "link", "bytes/step", "GB/s", "time");
        for (int l = 0; l < PLAN_TIERS; l++)
            fprintf(t, "  %-10s %12s %8g %10s\n", link_name[l],
                    cli_bytes(b1, sizeof b1, (double)bytes[l]), o->in.gbps[l],
                    cli_secs(b2, sizeof b2, p->term_s[l]));
        fprintf(t, "  step >= %s (the %s link): at most %.3g tokens/s for the batch of %llu, "
                   "%.3g per sequence\n",
                cli_secs(b1, sizeof b1, p->bound_s), link_name[p->bound_by], p->tokens_per_s,
                (unsigned long long)o->in.batch, p->tokens_per_s / (double)o->in.batch);
    }
    text_codecs(t, o, p);
    fprintf(t, "\nAssumptions\n");
    for (int i = 0; i < ns->n; i++)
        fprintf(t, "  - %s\n", ns->s[i]);
}

/* ------------------------------------------------------------- codecs */

/* The SSD tier with each codec for KV of 16-bit elements: what a
 * layer-first page stores (the lossy frame, padded to 4 KiB as the SSD
 * writes it), that per token, and the bound with the SSD's bytes scaled
 * by it (the codec's decode, at least 4 GB/s a core, is not a term: the
 * mover keeps up with one SSD; docs/codecs.md). zstd's size depends on the
 * data: not planned. */
#define PLAN_CODECS 4
static const int plan_codec[PLAN_CODECS] = { KVT_CODEC_NONE, KVT_CODEC_FP8, KVT_CODEC_INT8,
                                             KVT_CODEC_INT4 };

struct codec_row {
    uint64_t stored;        /* bytes a page stores */
    double per_token;       /* KV bytes per token on SSD */
    double ssd_s, bound_s, tokens_per_s;
    int bound_by;
};

static void codec_rows(const struct plan_opts *o, const struct plan_out *p,
                       struct codec_row row[PLAN_CODECS])
{
    const struct kvt_shape *s = &o->in.shape;
    bool mla = kvt_shape_is_mla(s);
    struct kvt_page_layout L = { KVT_DTYPE_BF16, mla ? KVT_KV_MLA : KVT_KV_HEAD_MAJOR,
                                 (uint32_t)o->in.page_tokens, mla ? 1 : s->kv_heads,
                                 mla ? s->kv_lora_rank : s->head_dim, mla ? 0 : s->head_dim,
                                 mla ? s->rope_dim : 0, 0, 0, 0 };
    uint64_t raw = p->page_bytes_layer, padded = (raw + 4095) / 4096 * 4096;
    for (int c = 0; c < PLAN_CODECS; c++) {
        uint64_t st = kvt_codec_lossy_bytes(plan_codec[c], &L, raw);
        st = (st + 4095) / 4096 * 4096;
        double ratio = (double)st / (double)padded;
        double term[PLAN_TIERS] = { p->term_s[0], p->term_s[1], p->term_s[2] * ratio };
        row[c] = (struct codec_row){ st, (double)p->per_token * ratio, term[PLAN_SSD], 0, 0, 0 };
        for (int t = 0; t < PLAN_TIERS; t++)
            if (term[t] > term[row[c].bound_by])
                row[c].bound_by = t;
        row[c].bound_s = term[row[c].bound_by];
        row[c].tokens_per_s = row[c].bound_s > 0 ? (double)o->in.batch / row[c].bound_s : 0;
    }
}

static bool plan_has_codecs(const struct plan_opts *o, const struct plan_out *p)
{
    return o->in.bits == 16 && !p->unplaced && o->in.page_tokens <= UINT32_MAX;
}

static void text_codecs(FILE *t, const struct plan_opts *o, const struct plan_out *p)
{
    if (!plan_has_codecs(o, p))
        return;
    char b1[32], b2[32], b3[32], b4[32];
    struct codec_row row[PLAN_CODECS];
    codec_rows(o, p, row);
    fprintf(t, "\nCodecs on the SSD tier (a page of %llu tokens of one layer; HBM and DRAM keep "
               "16 bits)\n", (unsigned long long)o->in.page_tokens);
    fprintf(t, "  %-6s %12s %14s %10s %10s %12s\n", "codec", "page stores", "SSD bytes/token",
            "ssd time", "step >=", "tokens/s");
    for (int c = 0; c < PLAN_CODECS; c++)
        fprintf(t, "  %-6s %12s %14s %10s %10s %12.3g\n", kvt_codec_name(plan_codec[c]),
                cli_bytes(b1, sizeof b1, (double)row[c].stored),
                cli_bytes(b2, sizeof b2, row[c].per_token), cli_secs(b3, sizeof b3, row[c].ssd_s),
                cli_secs(b4, sizeof b4, row[c].bound_s), row[c].tokens_per_s);
}

static void json_codecs(const struct plan_opts *o, const struct plan_out *p)
{
    if (!plan_has_codecs(o, p)) {
        printf("\"codecs\": null, ");
        return;
    }
    struct codec_row row[PLAN_CODECS];
    codec_rows(o, p, row);
    printf("\"codecs\": [");
    for (int c = 0; c < PLAN_CODECS; c++)
        printf("%s{\"codec\": \"%s\", \"page_stored_bytes\": %llu, \"ssd_bytes_per_token\": %.6g, "
               "\"ssd_s\": %.9g, \"bound_s\": %.9g, \"bound_by\": \"%s\", "
               "\"tokens_per_s_bound\": %.9g}",
               c ? ", " : "", kvt_codec_name(plan_codec[c]), (unsigned long long)row[c].stored,
               row[c].per_token, row[c].ssd_s, row[c].bound_s,
               row[c].bound_by == PLAN_HBM ? "hbm" : row[c].bound_by == PLAN_DRAM ? "h2d" : "ssd",
               row[c].tokens_per_s);
    printf("], ");
}

static void plan_text(FILE *t, const struct plan_opts *o, const struct plan_out *p,
                      const struct notes *ns)
{
    const struct kvt_shape *s = &o->in.shape;
    fprintf(t, "kvtier plan: %s (%s, %u layers), %s, context %llu tokens, batch %llu\n\n",
            s->name, s->attn, s->layers, o->dtype, (unsigned long long)o->in.context,
            (unsigned long long)o->in.batch);
    text_sizes(t, o, p);
    text_split(t, o, p);
    text_bound(t, o, p, ns);
}

static void json_tiers(const char *key, const uint64_t v[PLAN_TIERS], const uint64_t *extra)
{
    printf("\"%s\": {", key);
    for (int t = 0; t < PLAN_TIERS; t++) {
        printf("%s\"%s\": ", t ? ", " : "", tier_name[t]);
        if (v[t] == PLAN_UNBOUNDED)
            printf("null");
        else
            printf("%llu", (unsigned long long)v[t]);
    }
    if (extra)
        printf(", \"unplaced\": %llu", (unsigned long long)*extra);
    printf("}, ");
}

static void json_shape(const struct plan_opts *o)
{
    const struct kvt_shape *s = &o->in.shape;
    printf("{\"model\": ");
    cli_json_str(s->name);
    printf(", \"attn\": \"%s\", \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
           "\"kv_lora_rank\": %u, \"rope_dim\": %u, \"dtype\": ",
           s->attn, s->layers, s->kv_heads, s->head_dim, s->kv_lora_rank, s->rope_dim);
    cli_json_str(o->dtype);
    printf(", \"bits_per_element\": %u, \"context\": %llu, \"batch\": %llu, "
           "\"page_tokens\": %llu, ",
           o->in.bits, (unsigned long long)o->in.context, (unsigned long long)o->in.batch,
           (unsigned long long)o->in.page_tokens);
}

static void plan_json(const struct plan_opts *o, const struct plan_out *p, const struct notes *ns)
{
    json_shape(o);
    printf("\"kv_bytes_per_token\": %llu, \"kv_bytes_per_token_per_layer\": %llu, "
           "\"kv_bytes_per_layer_per_sequence\": %llu, \"kv_bytes_per_sequence\": %llu, "
           "\"kv_bytes_total\": %llu, ",
           (unsigned long long)p->per_token, (unsigned long long)p->per_token_layer,
           (unsigned long long)p->per_layer_seq, (unsigned long long)p->per_seq,
           (unsigned long long)p->total);
    printf("\"page_bytes_layer_first\": %llu, \"pages_per_sequence_layer_first\": %llu, "
           "\"page_bytes_page_first\": %llu, \"pages_per_sequence_page_first\": %llu, ",
           (unsigned long long)p->page_bytes_layer,
           (unsigned long long)p->pages_per_seq_layer_first,
           (unsigned long long)p->page_bytes_all, (unsigned long long)p->pages_per_layer);
    json_tiers("capacity", o->in.cap, NULL);
    json_tiers("split", p->split, &p->unplaced);
    printf("\"fits\": %s, \"gbps\": {\"hbm\": %g, \"h2d\": %g, \"ssd\": %g}, ",
           p->unplaced ? "false" : "true", o->in.gbps[PLAN_HBM], o->in.gbps[PLAN_DRAM],
           o->in.gbps[PLAN_SSD]);
    printf("\"gbps_source\": {\"hbm\": \"%s\", \"h2d\": \"%s\", \"ssd\": \"%s\"}, ",
           o->bw_tag[PLAN_HBM], o->bw_tag[PLAN_DRAM], o->bw_tag[PLAN_SSD]);
    if (p->unplaced)
        printf("\"bound_terms_s\": null, \"bound_by\": null, \"bound_s\": null, "
               "\"tokens_per_s_bound\": null, ");
    else
        printf("\"bound_terms_s\": {\"hbm\": %.9g, \"h2d\": %.9g, \"ssd\": %.9g}, \"bound_by\": "
               "\"%s\", \"bound_s\": %.9g, \"tokens_per_s_bound\": %.9g, ",
               p->term_s[PLAN_HBM], p->term_s[PLAN_DRAM], p->term_s[PLAN_SSD],
               p->bound_by == PLAN_HBM ? "hbm" : p->bound_by == PLAN_DRAM ? "h2d" : "ssd",
               p->bound_s, p->tokens_per_s);
    json_codecs(o, p);
    printf("\"assumptions\": [");
    for (int i = 0; i < ns->n; i++) {
        printf(i ? ", " : "");
        cli_json_str(ns->s[i]);
    }
    printf("]}\n");
}

int plan_main(int argc, char **argv)
{
    struct plan_opts o;
    int r = plan_parse(argc, argv, &o);
    if (r)
        return r > 0 ? 0 : 2;
    struct plan_out p;
    r = plan_compute(&o.in, &p);
    if (r == -EOVERFLOW)
        return cli_error("plan", 2, "the KV of this shape, context and batch passes 2^64 bytes");
    if (r)
        return cli_error("plan", 2, "cannot size this shape (%s)", strerror(-r));
    struct notes ns = { 0 };
    plan_notes(&o, &ns);
    plan_text(o.json ? stderr : stdout, &o, &p, &ns);
    if (o.json)
        plan_json(&o, &p, &ns);
    return 0;
}
