/*
 * bench_hbm.c — `kvtier bench hbm`: DRAM<->HBM throughput through the
 * manager beside a raw baseline measured in the same run, and the cost of an
 * acquire+release of a resident page.
 *
 * The baseline moves the same bytes between the same two arenas in the same
 * page-sized blocks and batches, with no manager: straight into the device
 * back-end's copy queue (the host back-end's copy thread — the emulated link
 * itself, non-temporal stores —, on CUDA one cudaMemcpyBatchAsync per batch,
 * or one cudaMemcpyAsync per page with KVT_CUDA_COPY=loop). The ratio is
 * therefore what the manager costs on top of the link. Each figure is the
 * best of --reps runs, so a stray scheduler hiccup on a 2-core machine does
 * not decide a ratio.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/kvtier.h"
#include "lab/tool.h"
#include "tools/cli.h"

struct bench_opts {
    uint64_t page_bytes, hbm, dram;
    int device;
    unsigned batch, reps;
    double link_gbps;
    bool json, quick;
};

/* One row of the report. For "both", gbps and base_gbps are the two
 * directions together and up/down[] split them: [0] kvtier, [1] baseline. */
struct link_result {
    const char *link, *baseline;
    double gbps, base_gbps;
    double up[2], down[2];
};

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier bench hbm [options]\n"
            "\n"
            "DRAM->HBM and HBM->DRAM throughput through the tier manager, each alone and both\n"
            "at once (pages released dirty, so evictions write back while acquires load),\n"
            "each beside a raw copy of the same bytes between the same arenas (the host\n"
            "back-end's copy; on CUDA one cudaMemcpyBatchAsync per batch, as kvtier copies,\n"
            "or with KVT_CUDA_COPY=loop in the environment one cudaMemcpyAsync per page,\n"
            "for both), as a ratio; and acquire+release per second.\n"
            "\n"
            "options:\n"
            "  --page-bytes N   page size, a multiple of 4K (default 256K)\n"
            "  --hbm N          HBM tier capacity (default 256M): at least 2 pages and --batch\n"
            "  --dram N         DRAM tier capacity (default 1G): at least twice --hbm plus --batch\n"
            "  --device D       auto, host or a CUDA ordinal (default auto)\n"
            "  --batch N        pages per acquire / copy batch (default 64)\n"
            "  --reps N         runs per figure, best kept (default 5)\n"
            "  --link-gbps X    host back-end: cap each emulated link (default 0: no cap)\n"
            "  --quick          --hbm at most 16M, --dram at most 64M, one run (for tests)\n"
            "  --json           one JSON object on stdout; text goes to stderr\n"
            "  -h, --help       this text\n");
}

static const struct option bench_lo[] = {
    { "page-bytes", 1, 0, 'p' }, { "hbm", 1, 0, 'H' },   { "dram", 1, 0, 'D' },
    { "device", 1, 0, 'd' },     { "batch", 1, 0, 'b' }, { "reps", 1, 0, 'r' },
    { "link-gbps", 1, 0, 'l' },  { "quick", 0, 0, 'q' }, { "json", 0, 0, 'j' },
    { "help", 0, 0, 'h' },       { 0, 0, 0, 0 },
};

/* One option's value into o; 0 or -EINVAL having said why. */
static int bench_option(int c, const char *v, struct bench_opts *o)
{
    const char *cmd = "bench hbm";
    uint64_t n;
    int r;
    switch (c) {
    case 'p': return cli_opt_size(cmd, "page-bytes", v, 4096, UINT64_MAX, &o->page_bytes);
    case 'H': return cli_opt_size(cmd, "hbm", v, 1, UINT64_MAX, &o->hbm);
    case 'D': return cli_opt_size(cmd, "dram", v, 1, UINT64_MAX, &o->dram);
    case 'd':
        if (cli_parse_device(v, &o->device))
            return cli_bad_value(cmd, "device", v, "auto, host or a CUDA ordinal");
        return 0;
    case 'b':
    case 'r':
        r = cli_opt_count(cmd, c == 'b' ? "batch" : "reps", v, 1, c == 'b' ? 4096 : 100, &n);
        if (r == 0)
            *(c == 'b' ? &o->batch : &o->reps) = (unsigned)n;
        return r;
    case 'l': return cli_opt_real(cmd, "link-gbps", v, 0, false, 1e6, &o->link_gbps);
    case 'q': o->quick = true; return 0;
    case 'j': o->json = true; return 0;
    default: return -EINVAL;
    }
}

static void bench_config(const struct bench_opts *o, kvt_config *cfg)
{
    kvt_config_init(cfg);
    cfg->page_bytes = o->page_bytes;
    cfg->hbm_bytes = o->hbm;
    cfg->dram_bytes = o->dram;
    cfg->device = o->device;
    cfg->host_link_gbps = o->link_gbps;
}

static const struct cli_field bench_fields[] = {
    { "page_bytes", "page-bytes" }, { "hbm_bytes", "hbm" },          { "dram_bytes", "dram" },
    { "device", "device" },         { "host_link_gbps", "link-gbps" }, { NULL, NULL },
};

/* The engine's own minimums (kvt_config_check), then this benchmark's:
 * an acquire takes --batch pages into HBM at once; the writeback phase
 * dirties all of HBM but the mover's watermark (an eighth plus one, see
 * api/engine.c), so at least 2 pages; the upload phase cycles over twice
 * HBM plus a batch of pages held in DRAM. */
static int bench_check(const struct bench_opts *o)
{
    kvt_config cfg;
    bench_config(o, &cfg);
    if (cli_config_check("bench hbm", &cfg, bench_fields))
        return -EINVAL;
    uint64_t nh = o->hbm / o->page_bytes, nd = o->dram / o->page_bytes;
    const char *quick = o->quick ? " (--quick caps --hbm at 16M and --dram at 64M)" : "";
    if (nh < 2 || nh < o->batch) {
        cli_error("bench hbm", 2,
                  "--hbm holds %llu pages of %llu bytes: at least 2 and --batch (%u) are needed%s",
                  (unsigned long long)nh, (unsigned long long)o->page_bytes, o->batch, quick);
        return -EINVAL;
    }
    if (nd < 2 * nh + o->batch) {
        cli_error("bench hbm", 2,
                  "--dram holds %llu pages of %llu bytes: at least twice --hbm's %llu plus "
                  "--batch (%u) are needed%s",
                  (unsigned long long)nd, (unsigned long long)o->page_bytes,
                  (unsigned long long)nh, o->batch, quick);
        return -EINVAL;
    }
    return 0;
}

/* 0 to run, 1 after --help, -EINVAL after a message. */
static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){ 256 << 10, 256ull << 20, 1ull << 30, KVT_DEVICE_AUTO, 64, 5, 0,
                              false, false };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", bench_lo, NULL)) != -1) {
        if (c == 'h') {
            bench_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("bench hbm", c, argv, bench_lo);
        if (bench_option(c, optarg, o))
            return -EINVAL;
    }
    if (optind != argc) {
        cli_error("bench hbm", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if (o->quick) {
        o->hbm = o->hbm < (16ull << 20) ? o->hbm : 16ull << 20;
        o->dram = o->dram < (64ull << 20) ? o->dram : 64ull << 20;
        o->reps = 1;
    }
    return bench_check(o);
}

/* ------------------------------------------------------------- baseline */

/* Copies `pages` blocks between the arenas with no manager (cycling over all
 * HBM slots and the first nd DRAM slots: the span the manager phase uses), in
 * batches of `batch` through the device back-end's own queue
 * (kvt_tool_link_copy). Not pipelined: waits for each batch, as an acquire
 * does; pipelined: queues everything, then waits, as a flush does. 0 and
 * *gbps, or the error: a failed link fails the bench, since a ratio over no
 * baseline means nothing. */
static int raw_copy(kvt_engine *e, bool up, uint64_t pages, uint64_t nd, unsigned batch,
                    bool pipelined, double *gbps)
{
    return kvt_tool_link_copy(e, up, pages, nd, batch, pipelined, gbps);
}

/* ------------------------------------------------------------- manager */

static kvt_key bkey(uint64_t i) { return (kvt_key){ 1, 0, (uint32_t)i }; }

static int put_pages(kvt_engine *e, size_t pb, uint64_t n)
{
    uint8_t *buf = malloc(pb);
    if (!buf)
        return -ENOMEM;
    int r = 0;
    for (uint64_t i = 0; i < n && !r; i++) {
        memset(buf, (int)(i * 31 + 7), pb);
        kvt_key k = bkey(i);
        const void *src = buf;
        r = kvt_put(e, &k, 1, &src, 0);
    }
    free(buf);
    return r;
}

/* Cycles acquire/release over n DRAM pages, more than HBM holds, so every
 * acquire is a DRAM->HBM copy. Released clean, each eviction is a free drop:
 * DRAM->HBM alone. Released dirty, each eviction writes its page back to
 * DRAM while later acquires load others, as a decode that appends does: both
 * links at once. Timed until the last acquire returns; *up and *down are
 * what each link moved meanwhile, GB/s; what is still dirty then is flushed
 * untimed. */
static int manager_cycle(kvt_engine *e, uint64_t n, uint64_t rounds, unsigned batch, bool dirty,
                         double *up, double *down)
{
    kvt_key *keys = malloc(batch * sizeof(*keys));
    void **ptrs = malloc(batch * sizeof(*ptrs));
    int r = keys && ptrs ? 0 : -ENOMEM;
    kvt_stats s0, s1;
    kvt_get_stats(e, &s0);
    double t0 = util_now();
    for (uint64_t i = 0; i < n * rounds && !r;) {
        unsigned k = 0;
        for (; k < batch && i < n * rounds; k++, i++)
            keys[k] = bkey(i % n);
        if ((r = kvt_acquire(e, keys, k, ptrs)) == 0)
            r = kvt_release(e, keys, k, dirty);
    }
    double dt = util_now() - t0;
    kvt_get_stats(e, &s1);
    *up = (double)(s1.bytes_up[0] - s0.bytes_up[0]) / dt / 1e9;
    *down = (double)(s1.bytes_down[0] - s0.bytes_down[0]) / dt / 1e9;
    if (!r && dirty)
        r = kvt_flush(e);
    free(keys);
    free(ptrs);
    return r;
}

/* Makes m resident pages dirty, then times kvt_flush writing them back;
 * rounds times. Only the flushes are timed. */
static int manager_down(kvt_engine *e, uint64_t m, uint64_t rounds, double *gbps)
{
    void *p;
    int r = 0;
    double busy = 0;
    uint64_t bytes = 0;
    for (uint64_t round = 0; round < rounds && !r; round++) {
        for (uint64_t i = 0; i < m && !r; i++) {
            kvt_key k = bkey(i);
            if ((r = kvt_acquire(e, &k, 1, &p)) == 0) {
                /* A page in HBM is device memory on a GPU: write it by copy. */
                unsigned char b[64];
                memset(b, (int)(i + round), sizeof b);
                r = kvt_tool_copy_to_page(e, p, b, sizeof b);
                int w = kvt_release(e, &k, 1, 1);
                r = r ? r : w;
            }
        }
        if (r)
            break;
        kvt_stats s0, s1;
        kvt_get_stats(e, &s0);
        double t0 = util_now();
        r = kvt_flush(e);
        busy += util_now() - t0;
        kvt_get_stats(e, &s1);
        bytes += s1.bytes_down[0] - s0.bytes_down[0];
    }
    *gbps = (double)bytes / busy / 1e9;
    return r;
}

static int ops_per_s(kvt_engine *e, uint64_t iters, double *out)
{
    kvt_key k = bkey(0);
    void *p;
    double t0 = util_now();
    for (uint64_t i = 0; i < iters; i++) {
        int r = kvt_acquire(e, &k, 1, &p);
        if (r == 0)
            r = kvt_release(e, &k, 1, 0);
        if (r)
            return r;
    }
    *out = (double)iters / (util_now() - t0);
    return 0;
}

static double best(double a, double b) { return a > b ? a : b; }

/* ------------------------------------------------------------- report */

static void report(const struct bench_opts *o, kvt_engine *e, const struct link_result *l, int nl,
                   double ops)
{
    FILE *t = o->json ? stderr : stdout;
    char b1[32];
    fprintf(t, "kvtier bench hbm: device %s, %s pages, batch %u, best of %u\n",
            kvt_device_name(e), cli_bytes(b1, sizeof b1, (double)o->page_bytes), o->batch, o->reps);
    fprintf(t, "  %-10s %10s %10s %-16s %7s\n", "link", "GB/s", "base GB/s", "baseline", "ratio");
    for (int i = 0; i < nl; i++) {
        fprintf(t, "  %-10s %10.2f %10.2f %-16s %7.3f\n", l[i].link, l[i].gbps, l[i].base_gbps,
                l[i].baseline, l[i].gbps / l[i].base_gbps);
        if (!strcmp(l[i].link, "both"))
            fprintf(t, "  %-10s %4.1f + %-4.1f %4.1f + %-4.1f (up + down)\n", "", l[i].up[0],
                    l[i].down[0], l[i].up[1], l[i].down[1]);
    }
    fprintf(t, "  acquire+release of a resident page: %.2f M/s (one thread)\n", ops / 1e6);
    kvt_stats s;
    kvt_get_stats(e, &s);
    uint64_t slots = s.capacity_pages[0] + s.capacity_pages[1];
    fprintf(t, "  page metadata: %.1f bytes per page slot (%llu bytes for %llu slots)\n",
            (double)s.meta_bytes / (double)slots, (unsigned long long)s.meta_bytes,
            (unsigned long long)slots);
    if (!o->json)
        return;
    printf("{\"device\": \"%s\", \"page_bytes\": %llu, \"links\": [", kvt_device_name(e),
           (unsigned long long)o->page_bytes);
    for (int i = 0; i < nl; i++) {
        printf("%s{\"link\": \"%s\", \"block_bytes\": %llu, \"depth\": %u, \"gbps\": %.4f, "
               "\"baseline\": \"%s\", \"baseline_gbps\": %.4f, \"ratio\": %.4f",
               i ? ", " : "", l[i].link, (unsigned long long)o->page_bytes, o->batch, l[i].gbps,
               l[i].baseline, l[i].base_gbps, l[i].gbps / l[i].base_gbps);
        if (!strcmp(l[i].link, "both"))
            printf(", \"up_gbps\": %.4f, \"down_gbps\": %.4f, \"baseline_up_gbps\": %.4f, "
                   "\"baseline_down_gbps\": %.4f",
                   l[i].up[0], l[i].down[0], l[i].up[1], l[i].down[1]);
        printf("}");
    }
    printf("], \"acquire_release_per_s\": %.0f, \"meta_bytes_per_page\": %.2f}\n", ops,
           (double)s.meta_bytes / (double)slots);
}

static int bench_hbm(const struct bench_opts *o)
{
    kvt_config cfg;
    bench_config(o, &cfg);
    kvt_engine *e;
    int r = kvt_open(&cfg, &e);
    if (r < 0)
        return cli_error("bench hbm", 1, "cannot open the engine: %s (%s)", kvt_strerror(r),
                         kvt_last_error());
    struct kvt_tool_info ti;
    kvt_tool_info(e, &ti);
    uint32_t nh = ti.hbm_slots, nd = ti.dram_slots; /* bench_check()ed */
    bool host = !strcmp(kvt_device_name(e), "host");
    /* The raw copies go through the back-end's queue as kvtier's do: one
     * cudaMemcpyBatchAsync per batch, or with KVT_CUDA_COPY=loop one
     * cudaMemcpyAsync per page (devices/device_cuda.c). */
    const char *loop = getenv("KVT_CUDA_COPY");
    const char *base = host ? "host copy"
                            : loop && !strcmp(loop, "loop") ? "cudaMemcpyAsync" : "cuda batch copy";
    uint64_t n_up = 2ull * nh + o->batch, m_down = nh - ti.watermark;
    uint64_t rounds = o->quick ? 2 : 4;
    struct link_result l[3] = { { .link = "dram->hbm", .baseline = base },
                                { .link = "hbm->dram", .baseline = base },
                                { .link = "both", .baseline = base } };
    double ops = 0, g = 0;

    /* Touch every byte of both arenas first: first-touch page faults would
     * otherwise be charged to whichever side ran first. */
    if ((r = raw_copy(e, true, nd, nd, o->batch, true, &g)) < 0 ||
        (r = raw_copy(e, false, nd, nd, o->batch, true, &g)) < 0 ||
        (r = put_pages(e, ti.page_bytes, n_up)) < 0)
        goto out_fail;
    for (unsigned i = 0; i < o->reps; i++) {
        if ((r = raw_copy(e, true, n_up * rounds, n_up, o->batch, false, &g)) < 0)
            goto out_fail;
        l[0].base_gbps = best(l[0].base_gbps, g);
        double unused;
        if ((r = manager_cycle(e, n_up, rounds, o->batch, false, &g, &unused)) < 0)
            goto out_fail;
        l[0].gbps = best(l[0].gbps, g);
    }
    if ((r = kvt_drop_id(e, 1)) < 0 || (r = put_pages(e, ti.page_bytes, m_down)) < 0)
        goto out_fail;
    for (unsigned i = 0; i < o->reps; i++) {
        if ((r = raw_copy(e, false, m_down * rounds, m_down, o->batch, true, &g)) < 0)
            goto out_fail;
        l[1].base_gbps = best(l[1].base_gbps, g);
        if ((r = manager_down(e, m_down, rounds, &g)) < 0)
            goto out_fail;
        l[1].gbps = best(l[1].gbps, g);
    }
    if ((r = kvt_drop_id(e, 1)) < 0 || (r = put_pages(e, ti.page_bytes, n_up)) < 0)
        goto out_fail;
    for (unsigned i = 0; i < o->reps; i++) {
        double gb[2] = { 0, 0 }, up = 0, down = 0;
        if ((r = kvt_tool_link_duplex(e, n_up * rounds, n_up, o->batch, gb)) < 0)
            goto out_fail;
        if (gb[0] + gb[1] > l[2].base_gbps) {
            l[2].base_gbps = gb[0] + gb[1];
            l[2].up[1] = gb[0];
            l[2].down[1] = gb[1];
        }
        if ((r = manager_cycle(e, n_up, rounds, o->batch, true, &up, &down)) < 0)
            goto out_fail;
        if (up + down > l[2].gbps) {
            l[2].gbps = up + down;
            l[2].up[0] = up;
            l[2].down[0] = down;
        }
    }
    for (unsigned i = 0; i < o->reps; i++) {
        double v = 0;
        if ((r = ops_per_s(e, o->quick ? 200000 : 2000000, &v)) < 0)
            goto out_fail;
        ops = best(ops, v);
    }
    report(o, e, l, 3, ops);
    kvt_close(e);
    return 0;

out_fail:
    cli_error("bench hbm", 1, "%s (%s)", kvt_strerror(r), kvt_last_error());
    kvt_close(e);
    return 1;
}

int bench_ssd_main(int argc, char **argv);
int bench_remote_main(int argc, char **argv);

int bench_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: kvtier bench hbm|ssd|remote [options]   (kvtier bench hbm --help, ...)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "ssd"))
        return bench_ssd_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "remote"))
        return bench_remote_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "hbm"))
        return cli_error("bench", 2, "unknown benchmark '%s' (try: hbm, ssd, remote)", argv[1]);
    struct bench_opts o;
    int r = bench_parse(argc - 1, argv + 1, &o);
    if (r)
        return r > 0 ? 0 : 2;
    return bench_hbm(&o);
}
