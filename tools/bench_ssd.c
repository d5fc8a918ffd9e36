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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "io/codec.h"
#include "tiers/spill_dir.h"
#include "tiers/tool.h"
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

/* The page sizes measured. */
static const size_t page_sizes[2] = { 256 << 10, 1 << 20 };

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
            "  --dir D        an existing directory to work in (default $TMPDIR or /tmp): the\n"
            "                 bench makes its own directory inside it, and removes it after\n"
            "  --bytes N      data moved per measurement, 4M or more, held in DRAM whole\n"
            "                 (default 256M)\n"
            "  --depth N      I/O queue depth (default 32)\n"
            "  --reps N       runs per figure, alternating which side goes first; best kept\n"
            "                 (default 9: this is a noisy measurement on virtual disks)\n"
            "  --quick        small sizes, one run (for tests)\n"
            "  --json         one JSON object on stdout; text goes to stderr\n"
            "  -h, --help     this text\n");
}

static const struct option ssd_lo[] = {
    { "dir", 1, 0, 'd' },  { "bytes", 1, 0, 'b' }, { "depth", 1, 0, 'q' }, { "reps", 1, 0, 'r' },
    { "quick", 0, 0, 'Q' }, { "json", 0, 0, 'j' }, { "help", 0, 0, 'h' },  { 0, 0, 0, 0 },
};

/* One option's value into o; 0 or -EINVAL having said why. */
static int ssd_option(int c, const char *v, struct ssd_opts *o)
{
    const char *cmd = "bench ssd";
    uint64_t n;
    switch (c) {
    case 'd':
        o->dir = v;
        return cli_opt_path(cmd, "dir", v);
    /* 256 TiB: past the engine's 2^30 pages, short of overflowing a size. */
    case 'b': return cli_opt_size(cmd, "bytes", v, 4u << 20, 1ull << 48, &o->bytes);
    case 'q':
    case 'r':
        if (cli_opt_count(cmd, c == 'q' ? "depth" : "reps", v, 1, c == 'q' ? 4096 : 100, &n))
            return -EINVAL;
        *(c == 'q' ? &o->depth : &o->reps) = (unsigned)n;
        return 0;
    case 'Q': o->quick = true; return 0;
    case 'j': o->json = true; return 0;
    default: return -EINVAL;
    }
}

static void kvtier_config(const char *dir, size_t pb, uint64_t n, unsigned depth, kvt_config *c);

static const struct cli_field ssd_fields[] = {
    { "dram_bytes", "bytes" }, { "ssd_bytes", "bytes" }, { "queue_depth", "depth" }, { NULL, NULL },
};

/* The engine's own check of both page sizes' configurations. */
static int ssd_check(const struct ssd_opts *o)
{
    for (int i = 0; i < 2; i++) {
        kvt_config c;
        kvtier_config("(scratch)", page_sizes[i], o->bytes / page_sizes[i], o->depth, &c);
        if (cli_config_check("bench ssd", &c, ssd_fields))
            return -EINVAL;
    }
    return 0;
}

/* 0 to run, 1 after --help, -EINVAL after a message. */
static int ssd_parse(int argc, char **argv, struct ssd_opts *o)
{
    const char *tmp = getenv("TMPDIR");
    *o = (struct ssd_opts){ tmp && *tmp ? tmp : "/tmp", 256ull << 20, 32, 9, false, false };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", ssd_lo, NULL)) != -1) {
        if (c == 'h') {
            ssd_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("bench ssd", c, argv);
        if (ssd_option(c, optarg, o))
            return -EINVAL;
    }
    if (optind != argc) {
        cli_error("bench ssd", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if (o->quick) {
        o->bytes = 32ull << 20;
        o->reps = 1;
    }
    return ssd_check(o);
}

/* ------------------------------------------------------------- scratch */

/* The bench works in a directory of its own, made by mkdtemp inside --dir,
 * and touches nothing else: in it, only the names below, each made by the
 * bench (the raw file) or by the engine it opens (the spill directory), and
 * removed by exact name; never a recursive removal, never a shell. A path
 * the user gave cannot aim a removal anywhere but at what the bench made. */
#define RAW_NAME "raw.dat"
#define SPILL_NAME "kvtier"

struct scratch {
    char path[PATH_MAX]; /* <dir>/kvtier-bench-XXXXXX */
    char spill[PATH_MAX + sizeof("/" SPILL_NAME)]; /* the engine's ssd_dir */
    const char *base;    /* the last component of path */
    int parent, fd;      /* --dir and the scratch directory */
};

static int scratch_make(const char *dir, struct scratch *s)
{
    s->parent = s->fd = -1;
    int n = snprintf(s->path, sizeof s->path, "%s/kvtier-bench-XXXXXX", dir);
    if (n < 0 || (size_t)n >= sizeof s->path)
        return -ENAMETOOLONG;
    s->parent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->parent < 0 || !mkdtemp(s->path))
        return -errno;
    s->base = strrchr(s->path, '/') + 1;
    /* The name just made, looked up in --dir itself and not through a link:
     * what gets removed at the end is the directory mkdtemp made. */
    s->fd = openat(s->parent, s->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->fd < 0)
        return -errno;
    snprintf(s->spill, sizeof s->spill, "%s/" SPILL_NAME, s->path);
    return 0;
}

/* A fresh preallocated raw file, made by this call (O_EXCL, no link
 * followed). */
static int scratch_raw(struct scratch *s, uint64_t bytes)
{
    if (unlinkat(s->fd, RAW_NAME, 0) != 0 && errno != ENOENT)
        return -errno;
    int fd = openat(s->fd, RAW_NAME, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int r = posix_fallocate(fd, 0, (off_t)bytes);
    close(fd);
    return -r;
}

/* Removes the engine's spill directory (its own files by name, see
 * tiers/spill_dir.h); absent is fine. */
static int scratch_spill_remove(struct scratch *s)
{
    int r = kvt_spill_remove(s->spill);
    return r == -ENOENT ? 0 : r;
}

/* Removes what the bench made, then the scratch directory; prints what
 * could not be removed (something else is in it: it stays). */
static void scratch_remove(struct scratch *s)
{
    int r = 0;
    if (s->fd >= 0) {
        if (unlinkat(s->fd, RAW_NAME, 0) != 0 && errno != ENOENT)
            r = -errno;
        if (r == 0 && (r = scratch_spill_remove(s)) < 0)
            fprintf(stderr, "kvtier bench ssd: %s\n", kvt_last_error());
        close(s->fd);
        if (r == 0 && unlinkat(s->parent, s->base, AT_REMOVEDIR) != 0)
            r = -errno;
    }
    if (s->parent >= 0)
        close(s->parent);
    if (r < 0)
        fprintf(stderr, "kvtier bench ssd: could not remove %s: %s\n", s->path, strerror(-r));
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

/* An engine whose n pages all fit in DRAM, with an SSD tier to take them. */
static void kvtier_config(const char *dir, size_t pb, uint64_t n, unsigned depth, kvt_config *c)
{
    kvt_config_init(c);
    c->page_bytes = pb;
    c->hbm_bytes = pb;
    c->dram_bytes = (n + 8) * pb;
    c->ssd_bytes = (n + 8) * pb;
    c->ssd_dir = dir;
    c->device = KVT_DEVICE_HOST;
    c->queue_depth = depth;
    c->persist = 0;
}

/* One measurement through kvtier: write every DRAM page to SSD, then drop
 * the DRAM copies and read them all back (kvt_tool_ssd_cycle). */
static int kvtier_run(const char *dir, size_t pb, uint64_t n, unsigned depth, double *wr, double *rd)
{
    kvt_config c;
    kvtier_config(dir, pb, n, depth, &c);
    kvt_engine *e;
    int r = kvt_open(&c, &e);
    if (r < 0)
        return r;
    if ((r = fill_pages(e, n, pb)) < 0)
        goto out;
    kvt_stats s0, s1;
    kvt_get_stats(e, &s0);
    double ws = 0, rs = 0;
    uint64_t got = 0;
    r = kvt_tool_ssd_cycle(e, &ws, &rs, &got);
    kvt_get_stats(e, &s1);
    if (r == 0 && (got != n || s1.errors_io || s1.errors_corrupt))
        r = -EIO;
    *wr = (double)(s1.bytes_down[1] - s0.bytes_down[1]) / ws / 1e9;
    *rd = (double)(s1.bytes_up[1] - s0.bytes_up[1]) / rs / 1e9;
out:
    kvt_close(e);
    return r;
}

static double best(double a, double b) { return a > b ? a : b; }

/* One side of one rep: 0, or 1 after a message. */
static int bench_raw(const struct ssd_opts *o, struct scratch *sc, size_t pb, uint64_t n,
                     double *bw, double *br)
{
    /* A fresh preallocated file each time, as the engine's segments are:
     * first writes into unwritten extents cost more than overwrites, on
     * both sides alike. */
    int rc;
    if ((rc = scratch_raw(sc, n * pb)) < 0 ||
        (rc = kvt_tool_ssd_raw(sc->fd, RAW_NAME, n * pb, pb, o->depth, n, true, bw)) < 0 ||
        (rc = kvt_tool_ssd_raw(sc->fd, RAW_NAME, n * pb, pb, o->depth, n, false, br)) < 0)
        return cli_error("bench ssd", 1, "raw io_uring baseline failed: %s", strerror(-rc));
    return 0;
}

static int bench_kvtier(const struct ssd_opts *o, struct scratch *sc, size_t pb, uint64_t n,
                        double *kw, double *kr)
{
    int rc = kvtier_run(sc->spill, pb, n, o->depth, kw, kr);
    if (rc < 0)
        return cli_error("bench ssd", 1, "through kvtier: %s (%s)", kvt_strerror(rc),
                         kvt_last_error());
    /* Each run starts from an empty directory: nothing of the last one,
     * of another page size, is left for the engine to wipe. */
    if ((rc = scratch_spill_remove(sc)) < 0)
        return cli_error("bench ssd", 1, "%s", kvt_last_error());
    return 0;
}

static int bench_size(const struct ssd_opts *o, struct scratch *sc, size_t pb, struct ssd_link *w,
                      struct ssd_link *r)
{
    uint64_t n = o->bytes / pb;
    *w = (struct ssd_link){ "dram->ssd", pb, 0, 0 };
    *r = (struct ssd_link){ "ssd->dram", pb, 0, 0 };
    for (unsigned i = 0; i < o->reps; i++) {
        double bw = 0, br = 0, kw = 0, kr = 0;
        /* Alternate which side goes first: a virtual disk's speed drifts
         * with what its host cached a moment ago. */
        for (int side = 0; side < 2; side++) {
            int rc = (side ^ (int)(i & 1)) == 0 ? bench_raw(o, sc, pb, n, &bw, &br)
                                                 : bench_kvtier(o, sc, pb, n, &kw, &kr);
            if (rc)
                return rc;
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
    printf("{\"dir\": ");
    cli_json_str(o->dir);
    printf(", \"links\": [");
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
    struct scratch sc;
    if ((r = scratch_make(o.dir, &sc)) < 0) {
        scratch_remove(&sc);
        return cli_error("bench ssd", 1, "cannot make a directory in %s: %s", o.dir, strerror(-r));
    }
    struct ssd_link l[4];
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        rc = bench_size(&o, &sc, page_sizes[i], &l[2 * i], &l[2 * i + 1]);
    scratch_remove(&sc);
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
