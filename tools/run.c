/*
 * run.c — `kvtier run`: decode over the tiers with real attention, checked
 * bit-exactly against a reference that never touches kvtier (see run.h).
 *
 * Order of a run: size the tiers; measure the links raw (DRAM<->HBM through
 * the device back-end's own copy queue, SSD with O_DIRECT in the spill
 * directory); open the engine; prefill (kvt_create of every page, in the
 * schedule's order); the timed decode loop — per step, per layer, per
 * sequence: kvt_advance, append the token's K/V to the tail page (a new page
 * by kvt_create when the tail is full), kvt_acquire of all the pages,
 * attention (on the CPU team, or the GPU kernel of tools/attention_cuda.cu
 * over device pages), kvt_release; then, outside the timed loop, the
 * reference pass. The loop keeps a 64-bit hash of each q head's output bits,
 * so the reference compares without holding the outputs.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "tiers/spill_dir.h"
#include "tiers/tool.h"
#include "tools/attention.h"
#include "tools/cli.h"
#include "tools/run.h"
#include "tools/trace_json.h"
#if KVT_HAVE_CUDA_ATTN
#include "tools/attention_cuda.h"
#endif

/* The terms of the bound: compute and one per link direction, then the SSD
 * as the one device it is (its two directions share it; see bound()). */
enum { TERM_COMPUTE, TERM_H2D, TERM_D2H, TERM_SSD_R, TERM_SSD_W, TERMS, TERM_SSD = TERMS, BOUND_TERMS };
static const char *const term_name[BOUND_TERMS] = { "compute",   "dram->hbm", "hbm->dram",
                                                    "ssd->dram", "dram->ssd", "ssd" };
static const char *const codec_name[] = { "none", "zstd", "zstd-shuffle16" };

/* ------------------------------------------------------------- generator */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

float run_kv_value(uint64_t seed, uint32_t seq, uint32_t layer, uint32_t token, uint32_t head,
                   uint32_t dim, int kind)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + mix64(((uint64_t)seq << 32 | layer) + 0x1234567ull);
    x = mix64(x ^ ((uint64_t)token << 24 | (uint64_t)head << 12 | dim) ^ ((uint64_t)kind << 62));
    /* 24 bits: exact in a float, so the value does not depend on rounding */
    return (float)((int32_t)(x >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
}

void run_fill_page(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                   uint32_t page, uint32_t ntok, uint32_t h0, uint32_t h1, void *p)
{
    for (int kind = 0; kind < 2; kind++)
        for (uint32_t h = h0; h < h1; h++)
            for (uint32_t t = 0; t < ntok; t++) {
                size_t row = attn_row(s, kind, h, t);
                uint32_t tok = page * s->page_tokens + t;
                for (uint32_t d = 0; d < s->head_dim; d++)
                    attn_store(s, p, row + d, run_kv_value(seed, seq, layer, tok, h, d, kind));
            }
}

static void fill_query(const struct attn_shape *s, uint64_t seed, uint32_t seq, uint32_t layer,
                       uint32_t pos, float *q)
{
    for (uint32_t qh = 0; qh < s->q_heads; qh++)
        for (uint32_t d = 0; d < s->head_dim; d++)
            q[(size_t)qh * s->head_dim + d] = 4.0f * run_kv_value(seed, seq, layer, pos, qh, d, 2);
}

static uint64_t hash_head(const float *o, uint32_t D)
{
    uint64_t h = 0xCBF29CE484222325ull;
    const unsigned char *b = (const unsigned char *)o;
    for (size_t i = 0; i < (size_t)D * sizeof(float); i++)
        h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

/* ------------------------------------------------------------- options */

void run_opts_default(struct run_opts *o)
{
    *o = (struct run_opts){ 0 };
    o->model = kvt_preset_find("llama3-8b");
    o->layers = 4;
    o->batch = 2;
    o->context = 4096;
    o->tokens = 16;
    o->page_tokens = 32;
    o->hbm = o->dram = o->ssd = RUN_AUTO;
    o->policy = "decode";
    o->codec = KVT_CODEC_NONE;
    o->device = KVT_DEVICE_HOST;
    o->threads = 2;
    o->nice = RUN_ATTN_NICE;
    o->seed = 1;
    o->ref_seed = 1;
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
            "reference computed without kvtier. bf16 KV (--dtype fp32 for fp32), the\n"
            "attention in fp32 on the CPU (host back-end) or on the GPU (--device N).\n"
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
            "  --codec C         none, zstd or zstd-shuffle16 for SSD pages (default none)\n"
            "  --policy P        decode or lru (default decode)\n"
            "  --device D        host (default), or a CUDA ordinal: pages in GPU memory and the\n"
            "                    attention on the GPU (builds where CMake found nvcc)\n"
            "  --dtype T         bf16 (default) or fp32: the KV's element type\n"
            "  --threads N       attention threads (default 2)\n"
            "  --chunk-pages N   CPU: pages computed while the next ones are acquired\n"
            "                    (default: 4 MiB of them; the whole group = no pipeline)\n"
            "  --nice N          their nice value, 0-19 (default 19: the I/O threads come first;\n"
            "                    0 = the caller's priority, the caller computing a part)\n"
            "  --link-gbps X     host back-end: cap each emulated DRAM<->HBM link at X GB/s\n"
            "                    (default 0: no cap)\n"
            "  --seed N          KV generator seed (default 1)\n"
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
    { "chunk-pages", 1, 0, 'k' }, { "dtype", 1, 0, 'y' },
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
    static const char *const dtypes[] = { "bf16", "fp32" };
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
    case 'C': return opt_word(c, v, codec_name, 3, "none, zstd or zstd-shuffle16", &o->codec);
    case 'P':
        if (opt_word(c, v, policies, 2, "decode or lru", &i))
            return -EINVAL;
        o->policy = policies[i];
        return 0;
    case 'y':
        if (opt_word(c, v, dtypes, 2, "bf16 or fp32", &i))
            return -EINVAL;
        o->fp32 = i == 1;
        return 0;
    case 'v':
        if (cli_parse_device(v, &o->device))
            return cli_bad_value("run", "device", v, "host, auto or a CUDA ordinal");
        return 0;
    case 'n': o->progress = false; return 0;
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
            return cli_getopt_error("run", c, argv);
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

/* ------------------------------------------------------------- sizing */

struct run_ctx {
    const struct run_opts *o;
    struct attn_shape sh;
    uint32_t layers, pages_max; /* pages of a (sequence, layer) at the end */
    size_t pb;
    kvt_engine *e;
    struct attn_pool *pool;
    float **scratch; /* one page per thread, for the reference */
    void *stage;     /* one page in host memory: what is written into a device page */
    bool said;       /* an error was reported where it happened (not an engine call's) */
#if KVT_HAVE_CUDA_ATTN
    struct attn_cuda *gpu;
#endif
    float *q, *out;
    float *m, *l;    /* the attention's running state per q head, across chunks */
    kvt_key *keys, *keys2; /* two groups' keys and page pointers: see struct group */
    void **ptrs, **ptrs2;
    void **ptrs_now; /* the pointers of the group being computed */
    /* The group being computed, streamed to the pool: the caller raises
     * ready as chunks are acquired; the parts take kv heads in turn and
     * fold each over what is ready (head_done: pages folded per kv head;
     * head_busy: a part holds it), and record for how long each part
     * computed (busy). */
    pthread_mutex_t smu;
    pthread_cond_t scv;
    uint32_t ready, *head_done;
    uint8_t *head_busy;
    double *busy_s;
    bool abort;
    bool sync_made; /* smu and scv initialised */
    uint64_t *hashes; /* [step][layer][seq][q head] */
    char tmpdir[4096];
    const char *ssd_dir;
    struct trace_json trace;
};

static uint64_t round_pages(uint64_t bytes, size_t pb) { return bytes / pb * pb; }
static uint32_t chunk_pages(const struct run_ctx *x);

/* The capacities left RUN_AUTO: a quarter of the KV in HBM, two thirds of
 * the rest in DRAM (twice HBM, as hosts have several times more DRAM than
 * their GPUs have HBM), so that a quarter of the KV overflows into SSD (the
 * decode then reads over half of the KV from SSD every step). HBM holds at least the group
 * being computed and room beside it for the next: on a GPU, whose kernel
 * takes a group whole, a second group; on the CPU, which streams a group
 * through in chunks released as they are computed, two chunks. */
static int run_size(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    uint64_t kv, group = (uint64_t)x->pages_max * x->pb; /* < 2^32 pages of < 2^32 bytes */
    /* A quarter of 2^64 at most: the SSD's default, twice the KV, must fit too. */
    if (__builtin_mul_overflow(group, (uint64_t)o->batch * x->layers, &kv) || kv > UINT64_MAX / 4) {
        cli_error("run", 2, "--batch %u x %u layers x --context %llu: the KV does not fit 64 bits",
                  o->batch, x->layers, (unsigned long long)o->context);
        return -EINVAL;
    }
    r->kv_bytes = kv;
    r->page_bytes = x->pb;
    r->pages = kv / x->pb;
    uint64_t hbm = o->hbm, dram = o->dram, ssd = o->ssd;
    if (hbm == RUN_AUTO) {
        uint64_t beside = o->device == KVT_DEVICE_HOST ? 2 * (uint64_t)chunk_pages(x) * x->pb : group;
        if (beside > group)
            beside = group;
        hbm = round_pages(kv / 4, x->pb);
        if (hbm < group + beside + 4 * x->pb)
            hbm = group + beside + 4 * x->pb;
    }
    if (dram == RUN_AUTO) {
        dram = kv > hbm ? round_pages((kv - hbm) / 3 * 2, x->pb) : 0;
        if (dram < group + 4 * x->pb)
            dram = group + 4 * x->pb;
    }
    if (ssd == RUN_AUTO)
        ssd = 2 * kv + 64 * x->pb;
    if (hbm < group + 2 * x->pb) {
        cli_error("run", 2,
                  "--hbm %llu bytes is too small: one (sequence, layer) needs %u pages of %zu "
                  "bytes, plus room to append",
                  (unsigned long long)hbm, x->pages_max, x->pb);
        return -EINVAL;
    }
    /* Pages acquired from SSD pass through DRAM, all of one acquire at once:
     * with fewer DRAM slots than that, kvt_acquire waits for ever. */
    uint64_t acq = o->device == KVT_DEVICE_HOST ? chunk_pages(x) : x->pages_max;
    acq = acq < x->pages_max ? acq : x->pages_max;
    if (ssd && dram / x->pb < acq) {
        cli_error("run", 2,
                  "--dram %llu bytes is too small: pages read from --ssd pass through DRAM, %llu "
                  "pages of %zu bytes at a time (--chunk-pages)",
                  (unsigned long long)dram, (unsigned long long)acq, x->pb);
        return -EINVAL;
    }
    uint64_t total;
    bool past_2_64 = __builtin_add_overflow(hbm, dram, &total) ||
                     __builtin_add_overflow(total, ssd, &total);
    if (!past_2_64 && total < kv + 2 * x->pb) {
        cli_error("run", 2, "--hbm + --dram + --ssd (%llu bytes) cannot hold the KV (%llu bytes)",
                  (unsigned long long)total, (unsigned long long)kv);
        return -EINVAL;
    }
    r->cap[0] = hbm;
    r->cap[1] = dram;
    r->cap[2] = ssd;
    return 0;
}

/* ------------------------------------------------------------- links */

/* DRAM<->HBM raw: page-sized copies between the (still empty) arenas through
 * the device back-end's queue, as `bench hbm` does (kvt_tool_link_copy);
 * best of 3. GB/s. */
static double raw_link(kvt_engine *e, bool up)
{
    struct kvt_tool_info ti;
    kvt_tool_info(e, &ti);
    uint32_t n = ti.hbm_slots < ti.dram_slots ? ti.hbm_slots : ti.dram_slots;
    if (n > 256)
        n = 256;
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        double g = 0;
        int rc = kvt_tool_link_copy(e, up, n, n, 32, true, &g);
        if (rc == 0 && rep > 0 && g > best) /* rep 0 touches the pages */
            best = g;
    }
    return best;
}

/* SSD raw without io_uring: a 32 MiB file written then read back in
 * page-sized blocks in the spill directory through the engine's own
 * pread/pwrite pool (kvt_tool_ssd_psync), RAW_IO_DEPTH requests in flight
 * (the engine keeps many in flight too; one synchronous reader would
 * understate the link). Buffered + drop-cache where the file system refuses
 * O_DIRECT. Done before the engine opens the directory. */
#define RAW_IO_DEPTH 8

/* The SSD link as the engine uses it: io_uring O_DIRECT, page-sized
 * blocks, the engine's queue depth, over a fresh preallocated 256 MiB file:
 * one write pass and two read passes, each a sample of ~0.1-0.2 s (shorter
 * passes catch this disk's bursts and lulls rather than its speed). Falls
 * back to the thread pool below where io_uring is not available. */
#define RAW_SPAN (256u << 20)

static void sample_add(struct run_link *l, double gbps)
{
    if (gbps > 0 && l->n < RUN_LINK_SAMPLES)
        l->s[l->n++] = gbps;
}

/* A file of the spill directory (the scratch file, a segment): its name in
 * the directory open as dfd (named dir in messages). Opened only through
 * dfd, never following a link (tiers/spill_dir.h). */
struct spill_file {
    int dfd;
    const char *dir;
    char name[64];
};

/* passes raw io_uring passes over the first span bytes of the file sf names,
 * each a sample of l. 0 or the first pass's error. */
static int uring_passes(const struct spill_file *sf, uint64_t span, size_t pb, bool write,
                        int passes, struct run_link *l)
{
    for (int pass = 0; pass < passes; pass++) {
        double g = 0;
        int r = kvt_tool_ssd_raw(sf->dfd, sf->name, span, pb, 32, span / pb, write, &g);
        if (r)
            return r;
        sample_add(l, g);
    }
    return 0;
}

static int raw_ssd_uring(const struct spill_file *sf, size_t pb, struct run_result *res)
{
    uint64_t span = RAW_SPAN / pb * pb;
    int fd = kvt_spill_openat(sf->dfd, sf->dir, sf->name, O_RDWR, 0, NULL);
    if (fd < 0)
        return fd;
    int r = -posix_fallocate(fd, 0, (off_t)span);
    close(fd);
    if (r == 0)
        r = uring_passes(sf, span, pb, true, 1, &res->ssd_write);
    if (r == 0)
        r = uring_passes(sf, span, pb, false, 2, &res->ssd_read);
    return r;
}

/* The passes without io_uring, over the same scratch file. */
static void raw_ssd_threads(const struct spill_file *sf, size_t pb, struct run_result *res)
{
    size_t n = (32u << 20) / pb;
    int direct = 1;
    int fd = kvt_spill_openat(sf->dfd, sf->dir, sf->name, O_RDWR | O_DIRECT, 0, NULL);
    if (fd < 0) {
        direct = 0;
        fd = kvt_spill_openat(sf->dfd, sf->dir, sf->name, O_RDWR, 0, NULL);
    }
    if (fd < 0)
        return;
    double wr = 0, rd = 0;
    kvt_tool_ssd_psync(fd, pb, n, RAW_IO_DEPTH, true, &wr);
    sample_add(&res->ssd_write, wr);
    if (!direct)
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (wr > 0 && kvt_tool_ssd_psync(fd, pb, n, RAW_IO_DEPTH, false, &rd) == 0)
        sample_add(&res->ssd_read, rd);
    close(fd);
}

/* In a scratch file of the spill directory's own (tiers/spill_dir.h: made
 * exclusively under a name kvtier's wipe knows, so one a crash leaves
 * behind is not a foreign file that would close the directory to kvtier). */
static void raw_ssd(const char *dir, size_t pb, struct run_result *res)
{
    struct spill_file sf = { .dir = dir };
    if (kvt_spill_scratch(dir, &sf.dfd, sf.name, sizeof sf.name) < 0)
        return;
    unsigned nr = res->ssd_read.n, nw = res->ssd_write.n;
    if (raw_ssd_uring(&sf, pb, res) != 0 || res->ssd_read.n == nr || res->ssd_write.n == nw) {
        res->ssd_read.n = nr;
        res->ssd_write.n = nw;
        raw_ssd_threads(&sf, pb, res);
    }
    unlinkat(sf.dfd, sf.name, 0);
    close(sf.dfd);
    kvt_clear_error(); /* a baseline that could not run is left out, not reported */
}

static void link_range(const struct run_link *l, double *lo, double *hi)
{
    *lo = *hi = l->n ? l->s[0] : 0;
    for (unsigned i = 1; i < l->n; i++) {
        *lo = l->s[i] < *lo ? l->s[i] : *lo;
        *hi = l->s[i] > *hi ? l->s[i] : *hi;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of a link's samples (0 without any). */
static double link_median(const struct run_link *l)
{
    if (!l->n)
        return 0;
    double v[RUN_LINK_SAMPLES];
    memcpy(v, l->s, l->n * sizeof(double));
    qsort(v, l->n, sizeof(double), cmp_double);
    return l->n % 2 ? v[l->n / 2] : (v[l->n / 2 - 1] + v[l->n / 2]) / 2;
}

/* Raw reads of the engine's own spill segment, where the decode's pages are:
 * the same io_uring O_DIRECT loop over its first slots (written ones only:
 * the file is preallocated, and unwritten extents read as zeros without
 * touching the disk), so the bound's read speed is that of the place the
 * decode read from, not of wherever a scratch file landed. */
static void raw_spill_reads(struct run_ctx *x, struct run_result *r)
{
    struct spill_file sf = { .dir = x->ssd_dir };
    uint64_t written = r->end.resident_pages[KVT_TIER_SSD] * x->pb / 10 * 9;
    uint64_t span = written < RAW_SPAN ? written : RAW_SPAN;
    span = span / x->pb * x->pb;
    if (span < 64 * x->pb || kvt_spill_opendir(x->ssd_dir, false, &sf.dfd) < 0) {
        kvt_clear_error();
        return;
    }
    kvt_spill_segment_name(0, sf.name, sizeof sf.name);
    uring_passes(&sf, span, x->pb, false, 2, &r->spill_read);
    close(sf.dfd);
}

/* The SSD link again after the decode, and its speed for the bound: the
 * median of the passes. Every pass reads into huge-page memory, as the
 * engine's arenas are (io/io_uring.c, tiers/device_host.c): with 4 KiB
 * pages the passes here swung 1.0-2.4 GB/s from run to run with how
 * scattered the buffers were in physical memory; in 2 MiB pages they agree
 * within ~5%. (DRAM<->HBM is not measured again: the arenas hold the
 * engine's pages.) */
static void links_again(struct run_ctx *x, struct run_result *r)
{
    if (!r->cap[2])
        return;
    raw_ssd(x->ssd_dir, x->pb, r);
    raw_spill_reads(x, r);
    r->gbps_ssd_read = link_median(r->spill_read.n ? &r->spill_read : &r->ssd_read);
    r->gbps_ssd_write = link_median(&r->ssd_write);
}

/* ------------------------------------------------------------- attention jobs */

struct attn_job {
    struct run_ctx *x;
    uint32_t n_tokens, seq, layer;
    uint64_t seed;
    int reference;     /* pages regenerated, not acquired */
    bool stream;       /* pages as x->ready says (else all of them, at once) */
};

static const void *page_acquired(void *ctx, uint32_t page, uint32_t h0, uint32_t h1, void *scr)
{
    return ((struct attn_job *)ctx)->x->ptrs_now[page];
}

static const void *page_regenerated(void *ctx, uint32_t page, uint32_t h0, uint32_t h1,
                                    void *scr)
{
    struct attn_job *j = ctx;
    const struct attn_shape *s = &j->x->sh;
    uint32_t first = page * s->page_tokens;
    uint32_t nt = j->n_tokens - first < s->page_tokens ? j->n_tokens - first : s->page_tokens;
    run_fill_page(s, j->seed, j->seq, j->layer, page, nt, h0, h1, scr);
    return scr;
}

/* A kv head a streamed part may fold next (under smu): one no part holds,
 * with pages ready beyond those it has folded, the least advanced first
 * (the pages every head is done with go back to the engine). KVT_NONE when
 * there is none now. */
static uint32_t head_pick(const struct run_ctx *x)
{
    uint32_t best = KVT_NONE;
    for (uint32_t h = 0; h < x->sh.kv_heads; h++)
        if (!x->head_busy[h] && x->head_done[h] < x->ready &&
            (best == KVT_NONE || x->head_done[h] < x->head_done[best]))
            best = h;
    return best;
}

/* Pages every kv head has folded (under smu). */
static uint32_t heads_done(const struct run_ctx *x)
{
    uint32_t m = UINT32_MAX;
    for (uint32_t h = 0; h < x->sh.kv_heads; h++)
        m = x->head_done[h] < m ? x->head_done[h] : m;
    return m;
}

/* A streamed part: takes a kv head no other part holds, folds it over the
 * pages ready for it, gives it back, and so on until every head has folded
 * every page of the group (or the caller gives up on it). Heads go to
 * whichever part is free, not half to each: a part that the scheduler runs
 * late (the engine's copy, reaper and mover threads preempt the niced
 * attention) no longer holds back its half of the heads while the other
 * part idles; that wait was 2-8% of the decode. A head's pages still fold
 * in page order, one part at a time, so the bits are the same. */
static void attn_stream(struct attn_job *j, unsigned part, uint32_t np)
{
    struct run_ctx *x = j->x;
    assert(!j->reference); /* the reference reads regenerated pages, whole */
    double busy = 0;
    pthread_mutex_lock(&x->smu);
    for (;;) {
        uint32_t h = x->abort ? KVT_NONE : head_pick(x);
        if (h == KVT_NONE) {
            if (x->abort || heads_done(x) >= np)
                break;
            pthread_cond_wait(&x->scv, &x->smu);
            continue;
        }
        uint32_t from = x->head_done[h], to = x->ready;
        x->head_busy[h] = 1;
        pthread_mutex_unlock(&x->smu);
        double t0 = cli_now();
        if (from == 0)
            attn_begin(&x->sh, h, h + 1, x->m, x->l, x->out);
        attn_pages(&x->sh, x->q, j->n_tokens, from, to, h, h + 1, page_acquired, j,
                   x->scratch[part], x->m, x->l, x->out);
        if (to == np)
            attn_end(&x->sh, h, h + 1, x->l, x->out);
        busy += cli_now() - t0;
        pthread_mutex_lock(&x->smu);
        x->head_done[h] = to;
        x->head_busy[h] = 0;
        pthread_cond_broadcast(&x->scv);
    }
    x->busy_s[part] = busy;
    pthread_cond_broadcast(&x->scv);
    pthread_mutex_unlock(&x->smu);
}

static void attn_part(void *arg, unsigned part, unsigned nparts)
{
    struct attn_job *j = arg;
    struct run_ctx *x = j->x;
    uint32_t np = (j->n_tokens + x->sh.page_tokens - 1) / x->sh.page_tokens;
    if (j->stream) {
        attn_stream(j, part, np);
        return;
    }
    uint32_t h0 = x->sh.kv_heads * part / nparts, h1 = x->sh.kv_heads * (part + 1) / nparts;
    attn_page_fn get = j->reference ? page_regenerated : page_acquired;
    if (h0 < h1)
        attn_decode(&x->sh, x->q, j->n_tokens, h0, h1, get, j, x->scratch[part], x->out);
}

static uint64_t *hash_slot(struct run_ctx *x, uint32_t step, uint32_t layer, uint32_t seq)
{
    return x->hashes + (((size_t)step * x->layers + layer) * x->o->batch + seq) * x->sh.q_heads;
}

/* ------------------------------------------------------------- the loop */

static uint64_t seq_id(uint32_t s) { return 1 + (uint64_t)s; }

/* Page bytes go in and out through the device back-end's synchronous copy,
 * so one path serves host pages and device pages alike (on the host
 * back-end it is a memcpy). */
static int page_copy(struct run_ctx *x, bool to_page, void *dst, const void *src, size_t bytes)
{
    int rc = to_page ? kvt_tool_copy_to_page(x->e, dst, src, bytes)
                     : kvt_tool_copy_from_page(x->e, dst, src, bytes);
    if (rc) {
        cli_error("run", 1, "copying page bytes: %s", kvt_strerror(rc));
        x->said = true;
    }
    return rc;
}

/* Writes the token at pos (its K and V rows, one per kv head) into page. */
static int write_token(struct run_ctx *x, void *page, uint32_t seq, uint32_t layer, uint32_t pos)
{
    const struct attn_shape *s = &x->sh;
    uint32_t t = pos % s->page_tokens;
    size_t eb = attn_elem_bytes(s);
    for (int kind = 0; kind < 2; kind++)
        for (uint32_t h = 0; h < s->kv_heads; h++) {
            for (uint32_t d = 0; d < s->head_dim; d++)
                attn_store(s, x->stage, d, run_kv_value(x->o->seed, seq, layer, pos, h, d, kind));
            int rc = page_copy(x, true, (char *)page + attn_row(s, kind, h, t) * eb,
                               x->stage, s->head_dim * eb);
            if (rc)
                return rc;
        }
    return 0;
}

/* A new page i of (seq, layer): its first nt tokens, zeros after them. */
static int write_page(struct run_ctx *x, void *page, uint32_t seq, uint32_t layer, uint32_t i,
                      uint32_t nt)
{
    memset(x->stage, 0, x->pb);
    run_fill_page(&x->sh, x->o->seed, seq, layer, i, nt, 0, x->sh.kv_heads, x->stage);
    return page_copy(x, true, page, x->stage, x->pb);
}

static int prefill(struct run_ctx *x)
{
    const struct run_opts *o = x->o;
    uint32_t pt = x->sh.page_tokens;
    uint32_t npages = (uint32_t)((o->context + pt - 1) / pt);
    for (uint32_t l = 0; l < x->layers; l++)
        for (uint32_t s = 0; s < o->batch; s++)
            for (uint32_t i = 0; i < npages; i++) {
                kvt_key k = { seq_id(s), l, i };
                void *p;
                int rc = kvt_create(x->e, k, &p);
                if (rc)
                    return rc;
                uint32_t nt = o->context - (uint64_t)i * pt < pt ? (uint32_t)(o->context - (uint64_t)i * pt) : pt;
                if ((rc = write_page(x, p, s, l, i, nt)) || (rc = kvt_release(x->e, &k, 1, 1)))
                    return rc;
            }
    return 0;
}

static void progress(const struct run_opts *o, uint32_t step, double elapsed)
{
    if (!o->progress)
        return;
    double tps = elapsed > 0 ? (double)step * o->batch / elapsed : 0;
    if (isatty(2)) {
        int w = 30, fill = (int)((double)step / o->tokens * w);
        fprintf(stderr, "\r  [%.*s%*s] step %u/%u  %.1f tokens/s ", fill,
                "##############################", w - fill, "", step, o->tokens, tps);
        if (step == o->tokens)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "  step %u/%u  %.2f s  %.1f tokens/s\n", step, o->tokens, elapsed, tps);
    }
    fflush(stderr);
}

/* The test hook of --corrupt-step: flips an exponent bit of K[0][0][0] (in
 * its top byte, which holds the sign and the exponent's upper bits in fp32
 * and bf16 alike). */
static int corrupt(struct run_ctx *x, void *page)
{
    uint8_t b[4];
    size_t eb = attn_elem_bytes(&x->sh);
    int rc = page_copy(x, false, b, page, eb);
    b[eb - 1] ^= 0x01;
    return rc ? rc : page_copy(x, true, page, b, eb);
}

#if KVT_HAVE_CUDA_ATTN
/* x->out = the attention of x->q over the n tokens in the acquired device
 * pages, on the GPU. */
static int attention_gpu(struct run_ctx *x, uint32_t n)
{
    char err[256];
    uint32_t np = (n + x->sh.page_tokens - 1) / x->sh.page_tokens;
    int rc = attn_cuda_run(x->gpu, x->q, n, x->ptrs_now, np, x->out, err, sizeof err);
    if (rc) {
        cli_error("run", 1, "attention on the GPU: %s", err);
        x->said = true;
    }
    return rc;
}
#endif

/* Pages per chunk of the CPU path's pipeline: --chunk-pages, or ~4 MiB (at
 * least one page). Smaller chunks overlap more but pay a pool hand-off and
 * an acquire each (~20-40 us). */
static uint32_t chunk_pages(const struct run_ctx *x)
{
    if (x->o->chunk_pages)
        return x->o->chunk_pages;
    size_t n = ((size_t)4 << 20) / x->pb;
    return n ? (uint32_t)n : 1;
}

/* One (step, layer, sequence) group on its way through the loop: its keys
 * and page pointers (two sets, so that the next group's first pages are
 * acquired while this one's last are computed). */
struct group {
    uint32_t step, l, s, pos, n, np;
    int fresh; /* the token opens a new tail page */
    kvt_key *keys;
    void **ptrs;
};

/* Acquires pages [c0, c1) of g; the token at pos goes into the tail page
 * (np - 1) when it is among them and not a fresh page (written whole). */
static int acquire_chunk(struct run_ctx *x, struct run_result *r, struct group *g, uint32_t c0,
                         uint32_t c1)
{
    double t0 = cli_now();
    int rc = kvt_acquire(x->e, g->keys + c0, c1 - c0, g->ptrs + c0);
    double t1 = cli_now();
    r->acquire_s += t1 - t0;
    if (x->o->trace_path)
        trace_span(&x->trace, "acquire", "wait", 1, t0, t1, g->step, g->s, g->l);
    if (rc)
        return rc;
    if (c1 == g->np && !g->fresh && (rc = write_token(x, g->ptrs[g->np - 1], g->s, g->l, g->pos)))
        return rc;
    if (c0 == 0 && x->o->corrupt_step == (int64_t)g->step && g->s == 0 && g->l == 0)
        rc = corrupt(x, g->ptrs[0]);
    return rc;
}

/* Releases pages [c0, c1) of g: the tail (the last) as written unless new. */
static int release_chunk(struct run_ctx *x, struct group *g, uint32_t c0, uint32_t c1)
{
    uint32_t clean = c1 == g->np ? c1 - c0 - 1 : c1 - c0;
    int rc = kvt_release(x->e, g->keys + c0, clean, 0);
    if (!rc && c1 == g->np)
        rc = kvt_release(x->e, g->keys + g->np - 1, 1, !g->fresh);
    return rc;
}

/* A group's start: the position told, a new tail page made when the token
 * opens one, and its first chunk acquired (the whole group on the GPU). */
static int group_begin(struct run_ctx *x, struct run_result *r, struct group *g)
{
    uint32_t pt = x->sh.page_tokens;
    g->pos = (uint32_t)x->o->context + g->step;
    g->n = g->pos + 1;
    g->np = (g->n + pt - 1) / pt;
    g->fresh = g->pos % pt == 0;
    int rc = kvt_advance(x->e, seq_id(g->s), g->l);
    if (rc)
        return rc;
    if (g->fresh) {
        kvt_key k = { seq_id(g->s), g->l, g->pos / pt };
        void *p;
        if ((rc = kvt_create(x->e, k, &p)))
            return rc;
        /* pos opens the page: it is the page's token 0, written with it */
        if ((rc = write_page(x, p, g->s, g->l, g->pos / pt, 1)) ||
            (rc = kvt_release(x->e, &k, 1, 1)))
            return rc;
    }
    for (uint32_t i = 0; i < g->np; i++)
        g->keys[i] = (kvt_key){ seq_id(g->s), g->l, i };
    uint32_t C = chunk_pages(x);
#if KVT_HAVE_CUDA_ATTN
    if (x->gpu)
        C = g->np; /* one kernel over the whole group */
#endif
    return acquire_chunk(x, r, g, 0, C < g->np ? C : g->np);
}

/* The attention of g, whose first chunk is acquired, then next's begin
 * (next NULL: none). On the CPU a pipeline over chunks of g's pages: chunk
 * i is computed by the pool while chunk i + 1 is acquired (for the last
 * chunk: while next begins), and released as soon as it is done. Acquiring
 * the whole group first left the links and the cores idle in turn: the
 * caller waited for the last page before computing the first (in a run
 * the tiers keep up with, ~190 of a group's 257 pages still to copy up at
 * its acquire, ~2 ms a group), and the pages stayed pinned through the
 * compute, out of the prefetcher's reach. The fold is page by page either
 * way, so the bits are the same. */
static int group_run(struct run_ctx *x, struct run_result *r, struct group *g,
                     struct group *next)
{
    fill_query(&x->sh, x->o->seed, g->s, g->l, g->pos, x->q);
    x->ptrs_now = g->ptrs;
#if KVT_HAVE_CUDA_ATTN
    if (x->gpu) {
        double t2 = cli_now();
        int rc = attention_gpu(x, g->n);
        double t3 = cli_now();
        r->compute_s += t3 - t2;
        if (x->o->trace_path)
            trace_span(&x->trace, "attention", "compute", TRACE_ATTN_TID, t2, t3, g->step, g->s,
                       g->l);
        if (!rc)
            rc = release_chunk(x, g, 0, g->np);
        return rc ? rc : next ? group_begin(x, r, next) : 0;
    }
#endif
    unsigned nparts = attn_pool_threads(x->pool);
    uint32_t C = chunk_pages(x), acq = C < g->np ? C : g->np; /* group_begin took the first */
    uint32_t rel = 0;
    int rc = 0;
    pthread_mutex_lock(&x->smu);
    x->ready = acq;
    x->abort = false;
    for (uint32_t h = 0; h < x->sh.kv_heads; h++)
        x->head_done[h] = 0, x->head_busy[h] = 0;
    for (unsigned i = 0; i < nparts; i++)
        x->busy_s[i] = 0;
    pthread_mutex_unlock(&x->smu);
    struct attn_job j = { x, g->n, g->s, g->l, x->o->seed, 0, true };
    /* With --nice 0 the caller computes a part itself, inside start(), and
     * could not feed the job while in it: the whole group comes in first
     * (the loop below, before the start after it). */
    bool feed = attn_pool_background(x->pool), started = feed;
    double t2 = cli_now();
    if (feed)
        attn_pool_start(x->pool, attn_part, &j);
    while (acq < g->np) {
        uint32_t b = acq + C < g->np ? acq + C : g->np;
        if ((rc = acquire_chunk(x, r, g, acq, b)))
            break;
        acq = b;
        pthread_mutex_lock(&x->smu);
        x->ready = acq;
        pthread_cond_broadcast(&x->scv);
        uint32_t m = heads_done(x);
        pthread_mutex_unlock(&x->smu);
        /* What every head is done with goes back now, for the prefetcher's
         * room (the tail, written, at the end). */
        m = m < g->np - 1 ? m : g->np - 1;
        if (m > rel && (rc = kvt_release(x->e, g->keys + rel, m - rel, 0)))
            break;
        rel = m > rel ? m : rel;
    }
    if (!feed && !rc) {
        t2 = cli_now();
        attn_pool_start(x->pool, attn_part, &j);
        started = true;
    }
    if (!rc && next)
        rc = group_begin(x, r, next);
    if (rc) {
        pthread_mutex_lock(&x->smu);
        x->abort = true;
        pthread_cond_broadcast(&x->scv);
        pthread_mutex_unlock(&x->smu);
    }
    double t3 = started ? attn_pool_join(x->pool) : t2;
    /* The compute: the busiest part's time folding pages, not the waits for
     * them (the job's span holds both). */
    double busy = 0;
    for (unsigned i = 0; i < nparts; i++)
        busy = x->busy_s[i] > busy ? x->busy_s[i] : busy;
    r->compute_s += busy;
    if (x->o->trace_path)
        trace_span(&x->trace, "attention", "compute", TRACE_ATTN_TID, t2, t3, g->step, g->s,
                   g->l);
    int rr = acq == g->np ? release_chunk(x, g, rel, acq)
                          : kvt_release(x->e, g->keys + rel, acq - rel, 0);
    return rc ? rc : rr;
}

static void group_hash(struct run_ctx *x, const struct group *g)
{
    uint64_t *hs = hash_slot(x, g->step, g->l, g->s);
    for (uint32_t qh = 0; qh < x->sh.q_heads; qh++)
        hs[qh] = hash_head(x->out + (size_t)qh * x->sh.head_dim, x->sh.head_dim);
}

/* The bonus trace rows: cumulative bytes per link after each layer. */
static void trace_links(struct run_ctx *x, const kvt_stats *s0)
{
    kvt_stats s;
    kvt_get_stats(x->e, &s);
    double now = cli_now();
    trace_counter(&x->trace, "dram->hbm bytes", now, "bytes", (double)(s.bytes_up[0] - s0->bytes_up[0]));
    trace_counter(&x->trace, "hbm->dram bytes", now, "bytes", (double)(s.bytes_down[0] - s0->bytes_down[0]));
    trace_counter(&x->trace, "ssd->dram bytes", now, "bytes", (double)(s.bytes_up[1] - s0->bytes_up[1]));
    trace_counter(&x->trace, "dram->ssd bytes", now, "bytes", (double)(s.bytes_down[1] - s0->bytes_down[1]));
    trace_counter(&x->trace, "stall ms", now, "ms", (double)(s.stall_ns - s0->stall_ns) / 1e6);
}

static int decode(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    kvt_stats s0, s1;
    kvt_get_stats(x->e, &s0);
    double t0 = cli_now();
    /* Groups in compute order: step, layer, sequence (layer-major, as the
     * schedule says). Each group's first pages are acquired before the one
     * before it has finished (group_run). */
    struct group gs[2] = { { .keys = x->keys, .ptrs = x->ptrs },
                           { .keys = x->keys2, .ptrs = x->ptrs2 } };
    uint64_t total = (uint64_t)o->tokens * x->layers * o->batch;
    struct group *g = &gs[0], *next = &gs[1];
    g->step = g->l = g->s = 0;
    int rc = group_begin(x, r, g);
    for (uint64_t i = 0; i < total && !rc; i++) {
        bool more = i + 1 < total;
        if (more) {
            next->s = g->s + 1 < o->batch ? g->s + 1 : 0;
            next->l = next->s ? g->l : (g->l + 1 < x->layers ? g->l + 1 : 0);
            next->step = next->s || next->l ? g->step : g->step + 1;
        }
        rc = group_run(x, r, g, more ? next : NULL);
        if (rc)
            break;
        group_hash(x, g);
        if (o->trace_path && g->s + 1 == o->batch)
            trace_links(x, &s0);
        if (g->s + 1 == o->batch && g->l + 1 == x->layers)
            progress(o, g->step + 1, cli_now() - t0);
        struct group *t = g;
        g = next;
        next = t;
    }
    r->wall_s = cli_now() - t0;
    kvt_get_stats(x->e, &s1);
    r->end = s1;
    kvt_stats *d = &r->delta;
    *d = s1;
    for (int t = 0; t < KVT_TIERS; t++) {
        d->hits[t] -= s0.hits[t];
        d->misses[t] -= s0.misses[t];
        d->bytes_up[t] -= s0.bytes_up[t];
        d->bytes_down[t] -= s0.bytes_down[t];
    }
    d->stall_ns -= s0.stall_ns;
    d->prefetch_pages -= s0.prefetch_pages;
    d->prefetch_wasted -= s0.prefetch_wasted;
    r->stall_s = (double)d->stall_ns / 1e9;
    return rc;
}

/* The reference pass: no kvtier, pages regenerated per thread. Returns 0 or
 * 1 at the first mismatch (r->bad_*). */
static int verify(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    for (uint32_t step = 0; step < o->tokens; step++)
        for (uint32_t l = 0; l < x->layers; l++)
            for (uint32_t s = 0; s < o->batch; s++) {
                uint32_t pos = (uint32_t)o->context + step;
                fill_query(&x->sh, o->ref_seed, s, l, pos, x->q);
                struct attn_job j = { x, pos + 1, s, l, o->ref_seed, 1, false };
                attn_pool_run(x->pool, attn_part, &j);
                const uint64_t *hs = hash_slot(x, step, l, s);
                for (uint32_t qh = 0; qh < x->sh.q_heads; qh++)
                    if (hs[qh] != hash_head(x->out + (size_t)qh * x->sh.head_dim, x->sh.head_dim)) {
                        r->bad_step = step;
                        r->bad_seq = s;
                        r->bad_layer = l;
                        r->bad_head = qh;
                        return 1;
                    }
            }
    return 0;
}

/* ------------------------------------------------------------- set-up */

static void ctx_free(struct run_ctx *x)
{
    kvt_close(x->e);
    x->e = NULL;
    if (x->scratch)
        for (unsigned i = 0; i < (x->pool ? attn_pool_threads(x->pool) : 0); i++)
            free(x->scratch[i]);
    free(x->scratch);
    free(x->stage);
#if KVT_HAVE_CUDA_ATTN
    attn_cuda_free(x->gpu);
#endif
    attn_pool_free(x->pool);
    free(x->head_done);
    free(x->head_busy);
    free(x->busy_s);
    if (x->sync_made) {
        pthread_mutex_destroy(&x->smu);
        pthread_cond_destroy(&x->scv);
    }
    free(x->q);
    free(x->out);
    free(x->m);
    free(x->l);
    free(x->keys);
    free(x->ptrs);
    free(x->keys2);
    free(x->ptrs2);
    free(x->hashes);
    trace_free(&x->trace);
    /* The engine's files by name and the directory, never a recursive
     * removal: anything else found there stays. */
    if (x->tmpdir[0] && kvt_spill_remove(x->tmpdir) < 0)
        cli_error("run", 1, "%s", kvt_last_error());
}

static int ctx_alloc(struct run_ctx *x)
{
    const struct run_opts *o = x->o;
    size_t qf = (size_t)x->sh.q_heads * x->sh.head_dim;
    pthread_mutex_init(&x->smu, NULL);
    pthread_cond_init(&x->scv, NULL);
    x->sync_made = true;
    if (!(x->pool = attn_pool_new(o->threads, (int)o->nice)))
        return -ENOMEM;
    unsigned nt = attn_pool_threads(x->pool);
    x->head_done = calloc(x->sh.kv_heads, sizeof(uint32_t));
    x->head_busy = calloc(x->sh.kv_heads, 1);
    x->busy_s = calloc(nt, sizeof(double));
    if (!x->head_done || !x->head_busy || !x->busy_s)
        return -ENOMEM;
    x->scratch = calloc(nt, sizeof(float *));
    x->q = malloc(qf * sizeof(float));
    x->out = malloc(qf * sizeof(float));
    x->m = malloc(x->sh.q_heads * sizeof(float));
    x->l = malloc(x->sh.q_heads * sizeof(float));
    x->keys = malloc(x->pages_max * sizeof(kvt_key));
    x->ptrs = malloc(x->pages_max * sizeof(void *));
    x->keys2 = malloc(x->pages_max * sizeof(kvt_key));
    x->ptrs2 = malloc(x->pages_max * sizeof(void *));
    x->hashes = malloc((size_t)o->tokens * x->layers * o->batch * x->sh.q_heads * sizeof(uint64_t));
    x->stage = malloc(x->pb);
    if (!x->scratch || !x->q || !x->out || !x->m || !x->l || !x->keys || !x->ptrs || !x->keys2 ||
        !x->ptrs2 || !x->hashes || !x->stage)
        return -ENOMEM;
    for (unsigned i = 0; i < nt; i++)
        if (!(x->scratch[i] = malloc(x->pb)))
            return -ENOMEM;
    return 0;
}

/* kvt_config.on_transfer: each completed batch becomes a span on its link's
 * track (only with --trace). */
static void on_transfer(void *arg, const kvt_transfer_event *ev)
{
    static const char *const names[TRACE_LINKS] = { "dram->hbm", "hbm->dram", "ssd->dram",
                                                    "dram->ssd" };
    struct run_ctx *x = arg;
    if (ev->kind >= 0 && ev->kind < TRACE_LINKS)
        trace_link(&x->trace, ev->kind, names[ev->kind], (double)ev->start_ns * 1e-9,
                   (double)ev->end_ns * 1e-9, ev->pages, (double)ev->bytes);
}

/* Where the attention runs: on the CPU over host pages, or with the CUDA
 * back-end on the GPU over its device pages (where the kernel was built). */
static int open_attention(struct run_ctx *x)
{
    if (!strcmp(kvt_device_name(x->e), "host"))
        return 0;
#if KVT_HAVE_CUDA_ATTN
    if (!strcmp(kvt_device_name(x->e), "cuda")) {
        char err[256];
        int ordinal = x->o->device >= 0 ? x->o->device : 0; /* AUTO opens device 0 */
        int rc = attn_cuda_new(ordinal, &x->sh, x->pages_max, &x->gpu, err, sizeof err);
        if (rc)
            cli_error("run", 1, "device %d: %s", ordinal, err);
        return rc;
    }
#endif
    cli_error("run", 1,
              "device %s: this build has no GPU attention kernel for it (tools/attention_cuda.cu "
              "is built where CMake finds nvcc, outside the sanitizer builds)",
              kvt_device_name(x->e));
    return KVT_ENOTSUP;
}

/* The spill directory, made if missing, must be one the engine will take
 * (empty, or kvtier's) before anything is written in it: else an argument
 * error naming what is in it, and nothing touched. */
static int claim_spill_dir(const char *path)
{
    int dfd;
    bool ours;
    int rc = kvt_spill_opendir(path, true, &dfd);
    if (rc < 0) {
        cli_error("run", 1, "--ssd-dir: %s", kvt_last_error());
        return rc;
    }
    rc = kvt_spill_claim(dfd, path, &ours);
    close(dfd);
    if (rc < 0) {
        cli_error("run", 2, "--ssd-dir: %s", kvt_last_error());
        return -EINVAL;
    }
    return 0;
}

/* The engine's configuration for the capacities run_size() chose. */
static void engine_config(struct run_ctx *x, const struct run_result *r, kvt_config *c)
{
    const struct run_opts *o = x->o;
    kvt_config_init(c);
    c->page_bytes = x->pb;
    c->hbm_bytes = r->cap[0];
    c->dram_bytes = r->cap[1];
    c->ssd_bytes = r->cap[2];
    c->ssd_dir = r->cap[2] ? x->ssd_dir : NULL;
    c->device = o->device;
    c->policy = o->policy;
    c->codec = o->codec;
    c->host_link_gbps = o->link_gbps;
    if (o->trace_path) {
        c->on_transfer = on_transfer;
        c->on_transfer_arg = x;
    }
    c->fingerprint = 0x6b767472756e0000ull ^ ((uint64_t)x->sh.kv_heads << 32) ^
                     ((uint64_t)x->sh.head_dim << 16) ^ x->sh.page_tokens;
}

static const struct cli_field run_fields[] = {
    { "page_bytes", "page-tokens" }, { "hbm_bytes", "hbm" },   { "dram_bytes", "dram" },
    { "ssd_bytes", "ssd" },          { "ssd_dir", "ssd-dir" }, { "device", "device" },
    { "policy", "policy" },          { "codec", "codec" },     { "host_link_gbps", "link-gbps" },
    { NULL, NULL },
};

/* The engine's own check of the configuration, before anything is made on
 * disk: a value it would refuse is an argument error. The temporary spill
 * directory has no name yet; a stand-in takes its place. */
static int check_engine_config(struct run_ctx *x, const struct run_result *r)
{
    kvt_config c;
    engine_config(x, r, &c);
    if (c.ssd_bytes && !c.ssd_dir)
        c.ssd_dir = "(temporary)";
    return cli_config_check("run", &c, run_fields);
}

static int open_engine(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    kvt_config c;
    engine_config(x, r, &c);
    int rc = kvt_open(&c, &x->e);
    if (rc) {
        cli_error("run", 1, "cannot open the engine: %s (%s)", kvt_strerror(rc), kvt_last_error());
        return rc;
    }
    if ((rc = open_attention(x)))
        return rc;
    uint64_t *ids = malloc(o->batch * sizeof(uint64_t));
    if (!ids)
        return -ENOMEM;
    for (uint32_t s = 0; s < o->batch; s++)
        ids[s] = seq_id(s);
    kvt_schedule sc = { ids, o->batch, x->layers, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    rc = kvt_set_schedule(x->e, &sc);
    free(ids);
    return rc;
}

/* max(compute, bytes on each link / its speed). A link's speed is its raw
 * measurement, or what the decode itself moved on it per second of wall
 * time where that is more: the link did at least that, and a raw figure
 * below it would set a bound the decode had already beaten. So no term
 * exceeds the wall time, and wall/bound is never below 1.
 *
 * DRAM<->HBM is two links (PCIe is full duplex; the host back-end has a
 * copy thread per direction). The SSD is one device: its reads and writes
 * share it, so its term is read bytes / read speed + write bytes / write
 * speed. Measured here with the decode's own read sequence and one write
 * in every 2 or 4 requests: reads 1.04-1.14 and 1.58-1.73 GB/s against
 * 2.15-2.45 alone, what the sum predicts (1.0 and 1.6) with the raw write
 * speed of 1.7. The sum too is capped at the wall time: the disk did both
 * in that time. */
static double raw_gbps(const struct run_result *r, int term)
{
    const double gb[TERMS] = { 0, r->gbps_h2d, r->gbps_d2h, r->gbps_ssd_read, r->gbps_ssd_write };
    return gb[term];
}

static void bound(struct run_result *r)
{
    const kvt_stats *d = &r->delta;
    double by[TERMS] = { 0, (double)d->bytes_up[0], (double)d->bytes_down[0],
                         (double)d->bytes_up[1], (double)d->bytes_down[1] };
    r->term_s[TERM_COMPUTE] = r->compute_s;
    for (int i = 1; i < TERMS; i++) {
        r->decode_gbps[i] = r->wall_s > 0 ? by[i] / r->wall_s / 1e9 : 0;
        double raw = raw_gbps(r, i);
        r->link_gbps[i] = raw > 0 && raw < r->decode_gbps[i] ? r->decode_gbps[i] : raw;
        r->term_s[i] = r->link_gbps[i] > 0 ? by[i] / (r->link_gbps[i] * 1e9) : 0;
    }
    double ssd = r->term_s[TERM_SSD_R] + r->term_s[TERM_SSD_W];
    r->term_s[TERM_SSD] = ssd < r->wall_s ? ssd : r->wall_s;
    static const int candidates[] = { TERM_H2D, TERM_D2H, TERM_SSD };
    r->bound_by = TERM_COMPUTE;
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++)
        if (r->term_s[candidates[i]] > r->term_s[r->bound_by])
            r->bound_by = candidates[i];
    r->bound_s = r->term_s[r->bound_by];
}

int run_exec(const struct run_opts *o, struct run_result *r)
{
    struct run_ctx x = { .o = o };
    memset(r, 0, sizeof(*r));
    if (!o->model || kvt_shape_is_mla(o->model)) {
        cli_error("run", 2, "--model: an MLA shape has no per-head K and V for this kernel");
        return -EINVAL;
    }
    x.layers = o->layers && o->layers < o->model->layers ? o->layers : o->model->layers;
    x.sh = (struct attn_shape){ o->model->q_heads, o->model->kv_heads, o->model->head_dim,
                                o->page_tokens, !o->fp32 };
    if (attn_shape_check(&x.sh)) {
        cli_error("run", 2,
                  "--model %s: the CPU kernel needs head_dim a multiple of 8 (<= %u) and at "
                  "most %u q heads per kv head",
                  o->model->name, ATTN_MAX_HEAD_DIM, ATTN_MAX_GROUP);
        return -EINVAL;
    }
    x.pb = (attn_page_bytes(&x.sh) + 4095) / 4096 * 4096;
    uint64_t final_tokens = o->context + o->tokens;
    if (final_tokens > UINT32_MAX - 1) {
        cli_error("run", 2, "--context + --tokens is too large");
        return -EINVAL;
    }
    x.pages_max = (uint32_t)((final_tokens + o->page_tokens - 1) / o->page_tokens);
    x.ssd_dir = o->ssd_dir;
    int rc = run_size(&x, r);
    if (rc || (rc = check_engine_config(&x, r)))
        return rc;
    trace_init(&x.trace, cli_now());
    if ((rc = ctx_alloc(&x))) {
        cli_error("run", 1, "out of memory");
        goto out;
    }
    if (r->cap[2] && !x.ssd_dir) {
        const char *tmp = getenv("TMPDIR");
        snprintf(x.tmpdir, sizeof x.tmpdir, "%s/kvtier-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(x.tmpdir)) {
            rc = -errno;
            cli_error("run", 1, "cannot make a spill directory %s: %s", x.tmpdir, strerror(-rc));
            x.tmpdir[0] = 0;
            goto out;
        }
        x.ssd_dir = x.tmpdir;
    }
    if (r->cap[2]) {
        if ((rc = claim_spill_dir(x.ssd_dir)))
            goto out;
        raw_ssd(x.ssd_dir, x.pb, r);
    }
    if ((rc = open_engine(&x, r)))
        goto out;
    snprintf(r->device, sizeof r->device, "%s", kvt_device_name(x.e));
    r->gbps_h2d = raw_link(x.e, true);
    r->gbps_d2h = raw_link(x.e, false);
    double t0 = cli_now();
    if ((rc = prefill(&x))) {
        if (!x.said)
            cli_error("run", 1, "prefill: %s (%s)", kvt_strerror(rc), kvt_last_error());
        goto out;
    }
    r->prefill_s = cli_now() - t0;
    if ((rc = decode(&x, r))) {
        if (!x.said)
            cli_error("run", 1, "decode: %s (%s)", kvt_strerror(rc), kvt_last_error());
        goto out;
    }
    links_again(&x, r);
    bound(r);
    t0 = cli_now();
    rc = verify(&x, r);
    r->verify_s = cli_now() - t0;
    r->verified = rc == 0;
    if (rc)
        cli_error("run", 1,
                  "verification FAILED: step %u, sequence %u, layer %u, q head %u differs from "
                  "the reference",
                  r->bad_step, r->bad_seq, r->bad_layer, r->bad_head);
    if (o->trace_path) {
        int w = trace_write(&x.trace, o->trace_path);
        if (w) {
            cli_error("run", 1, "cannot write --trace %s: %s", o->trace_path, strerror(-w));
            if (!rc)
                rc = w;
        }
    }
out:
    ctx_free(&x);
    return rc;
}

/* ------------------------------------------------------------- report */

static const char *const tier_name[KVT_TIERS] = { "hbm", "dram", "ssd" };

/* Bytes into / out of tier t over the decode: HBM's come from its own
 * counters; DRAM's are its up/down plus HBM's; the SSD's are DRAM's down/up. */
static void tier_io(const kvt_stats *d, int t, uint64_t *in, uint64_t *out)
{
    switch (t) {
    case 0: *in = d->bytes_up[0]; *out = d->bytes_down[0]; break;
    case 1: *in = d->bytes_up[1] + d->bytes_down[0]; *out = d->bytes_down[1] + d->bytes_up[0]; break;
    default: *in = d->bytes_down[1]; *out = d->bytes_up[1]; break;
    }
}

static double ratio(uint64_t a, uint64_t b) { return a + b ? (double)a / (double)(a + b) : 0; }

static void report_text(FILE *f, const struct run_opts *o, const struct run_result *r, uint32_t layers)
{
    char b[5][32];
    const kvt_stats *d = &r->delta;
    fprintf(f, "kvtier run: %s (%u of %u layers, %u q / %u kv heads x %u), batch %u, context %llu + %u tokens, %s KV\n",
            o->model->name, layers, o->model->layers, o->model->q_heads, o->model->kv_heads,
            o->model->head_dim, o->batch, (unsigned long long)o->context, o->tokens,
            o->fp32 ? "fp32" : "bf16");
    fprintf(f, "  pages of %u tokens, %s; KV %s (%llu pages, %.1fx HBM); policy %s, codec %s, %u threads (nice %u)\n",
            o->page_tokens, cli_bytes(b[0], 32, (double)r->page_bytes), cli_bytes(b[1], 32, (double)r->kv_bytes),
            (unsigned long long)r->pages, (double)r->kv_bytes / (double)r->cap[0], o->policy,
            codec_name[o->codec], o->threads, o->nice);
    fprintf(f, "  %-5s %11s %11s %11s %11s %9s %9s %7s\n", "tier", "capacity", "resident",
            "bytes in", "bytes out", "hits", "misses", "hit%");
    for (int t = 0; t < KVT_TIERS; t++) {
        uint64_t in, out;
        tier_io(d, t, &in, &out);
        fprintf(f, "  %-5s %11s %11s %11s %11s %9llu %9llu %6.1f%%\n", tier_name[t],
                cli_bytes(b[0], 32, (double)r->cap[t]),
                cli_bytes(b[1], 32, (double)r->end.resident_pages[t] * (double)r->page_bytes),
                cli_bytes(b[2], 32, (double)in), cli_bytes(b[3], 32, (double)out),
                (unsigned long long)d->hits[t], (unsigned long long)d->misses[t],
                100 * ratio(d->hits[t], d->misses[t]));
    }
    uint64_t ntok = (uint64_t)o->tokens * o->batch;
    fprintf(f, "  verified: %s", r->verified ? "yes, every output bit-exact against the reference"
                                             : "NO");
    if (!r->verified)
        fprintf(f, " (first mismatch: step %u, sequence %u, layer %u, q head %u)", r->bad_step,
                r->bad_seq, r->bad_layer, r->bad_head);
    fprintf(f, "\n  tokens: %llu in %.3f s = %.2f tokens/s (prefill %.2f s, reference %.2f s)\n",
            (unsigned long long)ntok, r->wall_s, (double)ntok / r->wall_s, r->prefill_s, r->verify_s);
    fprintf(f, "  stall: %.3f s = %.1f%% of wall; acquire %.3f s, attention %.3f s; %llu pages prefetched (%llu wasted)\n",
            r->stall_s, 100 * r->stall_s / r->wall_s, r->acquire_s, r->compute_s,
            (unsigned long long)d->prefetch_pages, (unsigned long long)d->prefetch_wasted);
    fprintf(f, "  links measured raw in this run: dram->hbm %.2f GB/s, hbm->dram %.2f GB/s",
            r->gbps_h2d, r->gbps_d2h);
    if (r->ssd_read.n) {
        double lo, hi;
        const struct run_link *rl = r->spill_read.n ? &r->spill_read : &r->ssd_read;
        link_range(rl, &lo, &hi);
        fprintf(f, ", ssd read %.2f GB/s (%s, median of %u passes, %.2f-%.2f)", r->gbps_ssd_read,
                r->spill_read.n ? "over the spill segment" : "scratch file", rl->n, lo, hi);
        link_range(&r->ssd_write, &lo, &hi);
        fprintf(f, ", ssd write %.2f GB/s (%.2f-%.2f)", r->gbps_ssd_write, lo, hi);
    }
    fputc('\n', f);
    fprintf(f, "  the decode moved ssd->dram %.2f GB/s, dram->hbm %.2f GB/s (bytes / wall)\n",
            r->decode_gbps[TERM_SSD_R], r->decode_gbps[TERM_H2D]);
    for (int i = 1; i < TERMS; i++)
        if (r->link_gbps[i] > raw_gbps(r, i))
            fprintf(f, "  %s: the decode moved more than the raw passes did; the bound uses the "
                       "decode's rate\n", term_name[i]);
    fprintf(f,
            "  bound: %.3f s (%s) = max(compute %.3f, dram->hbm %.3f, hbm->dram %.3f, ssd %.3f "
            "= ssd->dram %.3f + dram->ssd %.3f); wall/bound %.2f\n",
            r->bound_s, term_name[r->bound_by], r->term_s[TERM_COMPUTE], r->term_s[TERM_H2D],
            r->term_s[TERM_D2H], r->term_s[TERM_SSD], r->term_s[TERM_SSD_R],
            r->term_s[TERM_SSD_W], r->bound_s > 0 ? r->wall_s / r->bound_s : 0);
}

static void report_json(const struct run_opts *o, const struct run_result *r, uint32_t layers)
{
    const kvt_stats *d = &r->delta;
    uint64_t ntok = (uint64_t)o->tokens * o->batch;
    printf("{\"verified\": %s, \"tokens\": %llu, \"steps\": %u, \"batch\": %u, \"model\": \"%s\", "
           "\"layers\": %u, \"context\": %llu, \"page_tokens\": %u, \"dtype\": \"%s\", "
           "\"page_bytes\": %llu, "
           "\"policy\": \"%s\", \"codec\": \"%s\", \"device\": \"%s\", \"threads\": %u, "
           "\"nice\": %u, \"tokens_per_s\": %.4f, \"kv_bytes\": %llu, \"tiers\": {",
           r->verified ? "true" : "false", (unsigned long long)ntok, o->tokens, o->batch,
           o->model->name, layers, (unsigned long long)o->context, o->page_tokens,
           o->fp32 ? "fp32" : "bf16", (unsigned long long)r->page_bytes, o->policy, codec_name[o->codec],
           r->device[0] ? r->device : "host", o->threads, o->nice,
           (double)ntok / r->wall_s, (unsigned long long)r->kv_bytes);
    for (int t = 0; t < KVT_TIERS; t++) {
        uint64_t in, out;
        tier_io(d, t, &in, &out);
        printf("%s\"%s\": {\"capacity_bytes\": %llu, \"resident_bytes\": %llu, \"bytes_in\": %llu, "
               "\"bytes_out\": %llu, \"bytes_up\": %llu, \"bytes_down\": %llu, \"hits\": %llu, "
               "\"misses\": %llu, \"hit_ratio\": %.4f}",
               t ? ", " : "", tier_name[t], (unsigned long long)r->cap[t],
               (unsigned long long)(r->end.resident_pages[t] * r->page_bytes),
               (unsigned long long)in, (unsigned long long)out,
               (unsigned long long)d->bytes_up[t], (unsigned long long)d->bytes_down[t],
               (unsigned long long)d->hits[t], (unsigned long long)d->misses[t],
               ratio(d->hits[t], d->misses[t]));
    }
    printf("}, \"links_gbps\": {\"dram->hbm\": %.4f, \"hbm->dram\": %.4f, \"ssd->dram\": %.4f, "
           "\"dram->ssd\": %.4f}, \"decode_links_gbps\": {",
           r->gbps_h2d, r->gbps_d2h, r->gbps_ssd_read, r->gbps_ssd_write);
    for (int i = 1; i < TERMS; i++)
        printf("%s\"%s\": %.4f", i > 1 ? ", " : "", term_name[i], r->decode_gbps[i]);
    printf("}, \"bound_links_gbps\": {");
    for (int i = 1; i < TERMS; i++)
        printf("%s\"%s\": %.4f", i > 1 ? ", " : "", term_name[i], r->link_gbps[i]);
    printf("}, \"terms_s\": {");
    for (int i = 0; i < BOUND_TERMS; i++)
        printf("%s\"%s\": %.6f", i ? ", " : "", term_name[i], r->term_s[i]);
    printf("}");
    const struct run_link *ls[3] = { &r->ssd_read, &r->ssd_write, &r->spill_read };
    static const char *const ln[3] = { "ssd_read", "ssd_write", "ssd_read_spill" };
    for (int k = 0; k < 3; k++) {
        printf(", \"%s_samples_gbps\": [", ln[k]);
        for (unsigned i = 0; i < ls[k]->n; i++)
            printf("%s%.4f", i ? ", " : "", ls[k]->s[i]);
        printf("]");
    }
    printf(", \"prefetch_pages\": %llu, \"prefetch_wasted\": %llu, \"stall_s\": %.6f, "
           "\"stall_fraction\": %.6f, \"compute_s\": %.6f, \"acquire_s\": %.6f, "
           "\"prefill_s\": %.6f, \"verify_s\": %.6f, \"bound_s\": %.6f, \"bound_by\": \"%s\", "
           "\"wall_s\": %.6f, \"bound_ratio\": %.4f",
           (unsigned long long)d->prefetch_pages, (unsigned long long)d->prefetch_wasted,
           r->stall_s, r->stall_s / r->wall_s, r->compute_s, r->acquire_s, r->prefill_s,
           r->verify_s, r->bound_s, term_name[r->bound_by], r->wall_s,
           r->bound_s > 0 ? r->wall_s / r->bound_s : 0);
    if (!r->verified)
        printf(", \"mismatch\": {\"step\": %u, \"seq\": %u, \"layer\": %u, \"head\": %u}",
               r->bad_step, r->bad_seq, r->bad_layer, r->bad_head);
    printf("}\n");
    fflush(stdout);
}

int run_main(int argc, char **argv)
{
    struct run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    struct run_result r;
    rc = run_exec(&o, &r);
    if (rc < 0)
        return rc == -EINVAL ? 2 : 1;
    uint32_t layers = o.layers && o.layers < o.model->layers ? o.layers : o.model->layers;
    report_text(o.json ? stderr : stdout, &o, &r, layers);
    if (o.json)
        report_json(&o, &r, layers);
    return rc ? 1 : 0;
}
