/*
 * bench_ssd.c — `kvtier bench ssd`: DRAM->SSD and SSD->DRAM throughput
 * through kvtier beside raw io_uring O_DIRECT at the same block size and
 * depth, measured in the same run on the same file system; and the codecs'
 * compression ratio and speed on a bf16 page.
 *
 * Through kvtier means the engine's own path: pages held in the DRAM arena
 * are written by the mover (CRC32C, index commit per round, segment slots),
 * then read back (CRC verified) into DRAM. The raw baseline moves the same
 * number of blocks of the same size at the same queue depth over a plain
 * preallocated file, with no checksums and no index. Neither side syncs
 * (persist=0), so both measure the device, not fdatasync.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "tiers/tiers.h"
#include "tools/cli.h"

struct ssd_opts {
    const char *dir;
    uint64_t bytes;
    unsigned depth, reps;
    bool json, quick;
};

struct ssd_link {
    const char *link;
    size_t block;
    double gbps, base_gbps;
};

static void ssd_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier bench ssd [options]\n"
            "\n"
            "DRAM->SSD and SSD->DRAM throughput through kvtier at 256 KiB and 1 MiB pages, each\n"
            "beside raw io_uring O_DIRECT at the same block size and depth on the same file\n"
            "system, as a ratio; then the codecs' ratio and GB/s per core on a bf16 page.\n"
            "\n"
            "options:\n"
            "  --dir D        where to put the files (default $TMPDIR or /tmp); removed after\n"
            "  --bytes N      data moved per measurement (default 256M)\n"
            "  --depth N      I/O queue depth (default 32)\n"
            "  --reps N       runs per figure, alternating which side goes first; best kept\n"
            "                 (default 9: this is a noisy measurement on virtual disks)\n"
            "  --quick        small sizes, one run (for tests)\n"
            "  --json         one JSON object on stdout; text goes to stderr\n"
            "  -h, --help     this text\n");
}

static int ssd_parse(int argc, char **argv, struct ssd_opts *o)
{
    static const struct option lo[] = {
        { "dir", 1, 0, 'd' },  { "bytes", 1, 0, 'b' }, { "depth", 1, 0, 'q' }, { "reps", 1, 0, 'r' },
        { "quick", 0, 0, 'Q' }, { "json", 0, 0, 'j' }, { "help", 0, 0, 'h' },  { 0, 0, 0, 0 },
    };
    const char *tmp = getenv("TMPDIR");
    *o = (struct ssd_opts){ tmp && *tmp ? tmp : "/tmp", 256ull << 20, 32, 9, false, false };
    uint64_t v;
    int c, idx = -1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
        switch (c) {
        case 'd': o->dir = optarg; break;
        case 'b': if (cli_parse_size(optarg, &o->bytes) || o->bytes < (4u << 20)) goto bad; break;
        case 'q': if (cli_parse_count(optarg, &v) || !v || v > 4096) goto bad; o->depth = (unsigned)v; break;
        case 'r': if (cli_parse_count(optarg, &v) || !v || v > 100) goto bad; o->reps = (unsigned)v; break;
        case 'Q': o->quick = true; break;
        case 'j': o->json = true; break;
        case 'h': ssd_usage(stdout); return 1;
        default: ssd_usage(stderr); return -EINVAL;
        }
    }
    if (optind != argc) {
        cli_error("bench ssd", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if (o->quick) {
        o->bytes = 32ull << 20;
        o->reps = 1;
    }
    return 0;
bad:
    cli_error("bench ssd", 2, "bad value '%s' for --%s", optarg, idx >= 0 ? lo[idx].name : "?");
    return -EINVAL;
}

/* ------------------------------------------------------------- raw */

static int raw_file(const char *path, uint64_t bytes)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -errno;
    int r = posix_fallocate(fd, 0, (off_t)bytes);
    close(fd);
    return -r;
}

/* ------------------------------------------------------------- kvtier */

/* Fills n pages into DRAM with puts (untimed; HBM is one page, so puts land
 * in DRAM). */
static int fill_pages(kvt_engine *e, uint64_t n, size_t pb)
{
    uint8_t *buf = malloc(pb);
    if (!buf)
        return -ENOMEM;
    int r = 0;
    for (uint64_t i = 0; i < n && !r; i++) {
        /* Page contents vary so a codec would have work; NONE stores raw. */
        for (size_t w = 0; w < pb / 8; w++)
            ((uint64_t *)buf)[w] = (i + 1) * 0x9E3779B97F4A7C15ull ^ w;
        kvt_key k = { 1, 0, (uint32_t)i };
        const void *src = buf;
        r = kvt_put(e, &k, 1, &src, 0);
    }
    free(buf);
    return r;
}

/* One measurement through kvtier: write every DRAM page to SSD, then drop
 * the DRAM copies and read them all back. */
static int kvtier_run(const char *dir, size_t pb, uint64_t n, unsigned depth, double *wr, double *rd)
{
    kvt_config c;
    kvt_config_init(&c);
    c.page_bytes = pb;
    c.hbm_bytes = pb;
    c.dram_bytes = (n + 8) * pb;
    c.ssd_bytes = (n + 8) * pb;
    c.ssd_dir = dir;
    c.device = KVT_DEVICE_HOST;
    c.queue_depth = depth;
    c.persist = 0;
    kvt_engine *e;
    int r = kvt_open(&c, &e);
    if (r < 0)
        return r;
    if ((r = fill_pages(e, n, pb)) < 0)
        goto out;
    kvt_stats s0, s1;
    kvt_get_stats(e, &s0);
    pthread_mutex_lock(&e->lock);
    double t0 = cli_now();
    r = kvt_ssd_flush(e);
    double t1 = cli_now();
    kvt_dram_drop_redundant(e);
    double t2 = cli_now();
    uint64_t got = kvt_ssd_read_all(e);
    double t3 = cli_now();
    pthread_mutex_unlock(&e->lock);
    kvt_get_stats(e, &s1);
    if (r == 0 && (got != n || s1.errors_io || s1.errors_corrupt))
        r = -EIO;
    *wr = (double)(s1.bytes_down[1] - s0.bytes_down[1]) / (t1 - t0) / 1e9;
    *rd = (double)(s1.bytes_up[1] - s0.bytes_up[1]) / (t3 - t2) / 1e9;
out:
    kvt_close(e);
    return r;
}

static double best(double a, double b) { return a > b ? a : b; }

static int bench_size(const struct ssd_opts *o, const char *dir, size_t pb, struct ssd_link *w,
                      struct ssd_link *r)
{
    char raw[4200], kdir[4200];
    snprintf(raw, sizeof(raw), "%s/raw.dat", dir);
    snprintf(kdir, sizeof(kdir), "%s/kvtier", dir);
    uint64_t n = o->bytes / pb;
    int rc = 0;
    *w = (struct ssd_link){ "dram->ssd", pb, 0, 0 };
    *r = (struct ssd_link){ "ssd->dram", pb, 0, 0 };
    for (unsigned i = 0; i < o->reps; i++) {
        double bw = 0, br = 0, kw = 0, kr = 0;
        /* Alternate which side goes first: a virtual disk's speed drifts
         * with what its host cached a moment ago. */
        for (int side = 0; side < 2; side++) {
            if ((side ^ (int)(i & 1)) == 0) {
                /* A fresh preallocated file each time, as the engine's
                 * segments are: first writes into unwritten extents cost
                 * more than overwrites, on both sides alike. */
                if ((rc = raw_file(raw, n * pb)) < 0 ||
                    (rc = kvt_io_raw_bench(raw, n * pb, pb, o->depth, n, true, &bw)) < 0 ||
                    (rc = kvt_io_raw_bench(raw, n * pb, pb, o->depth, n, false, &br)) < 0) {
                    unlink(raw);
                    return cli_error("bench ssd", 1, "raw io_uring baseline failed: %s",
                                     strerror(-rc));
                }
            } else if ((rc = kvtier_run(kdir, pb, n, o->depth, &kw, &kr)) < 0) {
                unlink(raw);
                return cli_error("bench ssd", 1, "through kvtier: %s (%s)", kvt_strerror(rc),
                                 kvt_last_error());
            }
        }
        w->base_gbps = best(w->base_gbps, bw);
        r->base_gbps = best(r->base_gbps, br);
        w->gbps = best(w->gbps, kw);
        r->gbps = best(r->gbps, kr);
        if (!o->json && isatty(2))
            fprintf(stderr, "\r  %zu KiB pages: run %u/%u", pb >> 10, i + 1, o->reps);
    }
    if (!o->json && isatty(2))
        fprintf(stderr, "\r%40s\r", "");
    unlink(raw);
    return 0;
}

/* ------------------------------------------------------------- report */

struct codec_fig {
    const char *name;
    int codec;
    double ratio, comp, decomp;
};

static void report(const struct ssd_opts *o, const struct ssd_link *l, int nl,
                   const struct codec_fig *cf, int nc)
{
    FILE *t = o->json ? stderr : stdout;
    fprintf(t, "kvtier bench ssd: %s, depth %u, %llu MiB per figure, best of %u\n", o->dir,
            o->depth, (unsigned long long)(o->bytes >> 20), o->reps);
    fprintf(t, "  %-10s %8s %9s %10s %-20s %7s\n", "link", "block", "GB/s", "base GB/s",
            "baseline", "ratio");
    for (int i = 0; i < nl; i++)
        fprintf(t, "  %-10s %6zuK %9.2f %10.2f %-20s %7.3f\n", l[i].link, l[i].block >> 10,
                l[i].gbps, l[i].base_gbps, "io_uring O_DIRECT", l[i].gbps / l[i].base_gbps);
    fprintf(t, "  codecs on a 256 KiB bf16 page (Gaussian values), one core:\n");
    for (int i = 0; i < nc; i++)
        fprintf(t, "    %-16s ratio %.3f  compress %.2f GB/s  decompress %.2f GB/s\n", cf[i].name,
                cf[i].ratio, cf[i].comp, cf[i].decomp);
    if (!o->json)
        return;
    printf("{\"dir\": \"%s\", \"links\": [", o->dir);
    for (int i = 0; i < nl; i++)
        printf("%s{\"link\": \"%s\", \"block_bytes\": %zu, \"depth\": %u, \"gbps\": %.4f, "
               "\"baseline\": \"io_uring O_DIRECT\", \"baseline_gbps\": %.4f, \"ratio\": %.4f}",
               i ? ", " : "", l[i].link, l[i].block, o->depth, l[i].gbps, l[i].base_gbps,
               l[i].gbps / l[i].base_gbps);
    printf("], \"codecs\": [");
    for (int i = 0; i < nc; i++)
        printf("%s{\"codec\": \"%s\", \"page_bytes\": 262144, \"ratio\": %.4f, "
               "\"compress_gbps\": %.4f, \"decompress_gbps\": %.4f}",
               i ? ", " : "", cf[i].name, cf[i].ratio, cf[i].comp, cf[i].decomp);
    printf("]}\n");
}

int bench_ssd_main(int argc, char **argv)
{
    struct ssd_opts o;
    int r = ssd_parse(argc, argv, &o);
    if (r)
        return r > 0 ? 0 : 2;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/kvtier-bench-XXXXXX", o.dir);
    if (!mkdtemp(dir))
        return cli_error("bench ssd", 1, "cannot create a directory in %s: %s", o.dir,
                         strerror(errno));
    struct ssd_link l[4];
    static const size_t sizes[2] = { 256 << 10, 1 << 20 };
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        rc = bench_size(&o, dir, sizes[i], &l[2 * i], &l[2 * i + 1]);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "kvtier bench ssd: could not remove %s\n", dir);
    if (rc)
        return rc;
    struct codec_fig cf[2] = { { "zstd", KVT_CODEC_ZSTD, 0, 0, 0 },
                               { "zstd-shuffle16", KVT_CODEC_ZSTD_SHUFFLE16, 0, 0, 0 } };
    for (int i = 0; i < 2; i++)
        if (kvt_codec_bench(cf[i].codec, 256 << 10, o.quick ? 0.05 : 0.5, &cf[i].ratio, &cf[i].comp,
                            &cf[i].decomp) < 0)
            return cli_error("bench ssd", 1, "codec bench failed");
    report(&o, l, 4, cf, 2);
    return 0;
}
