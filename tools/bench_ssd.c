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
 *
 * --api get measures what a prefix cache's loads go through instead: kvt_get
 * of chains of --chain pages that live on SSD only, into the caller's
 * buffers (the reads, the checksum, the copy out), beside raw reads.
 *
 * Each rep measures both sides back to back, alternating which goes first;
 * the figure is the median over the reps of the paired ratios, because
 * this machine's disk drifts from one second to the next and a best-of
 * compares the best moments of different drifts. CPU is the process's
 * (every thread) over the timed phase, per GB moved.
 */
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/lab.h"
#include "include/kvtier.h"
#include "io/codec.h"
#include "store/spill_dir.h"
#include "lab/tool.h"
#include "tools/cli.h"

struct ssd_opts {
    const char *dir;
    uint64_t bytes, page;   /* page: one page size (0: 256 KiB and 1 MiB) */
    unsigned depth, reps, chain;
    bool json, quick, get;
};

#define MAX_REPS 100

/* One link at one block size: each rep's figures, both sides. */
struct ssd_link {
    const char *link;
    size_t block;
    unsigned n;                         /* reps measured */
    double gbps[MAX_REPS], base[MAX_REPS];
    double bbase[MAX_REPS];             /* --api get: raw in the same batches (--chain) */
    double sbase[MAX_REPS];             /* ssd->dram: raw over the engine's own segment, right
                                           after its read (0: not measured) */
    double cpu[MAX_REPS];               /* through kvtier: CPU seconds per GB moved */
};

/* The page sizes measured by default. */
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
            "  --reps N       runs per figure, alternating which side goes first; the figure\n"
            "                 is the median of the runs' ratios (default 9: this is a noisy\n"
            "                 measurement on virtual disks)\n"
            "  --page N       one page size (4K..64M, a multiple of 4K) instead of 256K and 1M\n"
            "  --api get      SSD->DRAM through kvt_get instead: chains of --chain pages that\n"
            "                 live only on SSD, copied out to the caller's buffers (what a\n"
            "                 prefix cache's loads do), beside raw reads\n"
            "  --chain N      pages per kvt_get call with --api get (default 8)\n"
            "  --quick        small sizes, one run (for tests)\n"
            "  --json         one JSON object on stdout; text goes to stderr\n"
            "  -h, --help     this text\n");
}

static const struct option ssd_lo[] = {
    { "dir", 1, 0, 'd' },  { "bytes", 1, 0, 'b' }, { "depth", 1, 0, 'q' }, { "reps", 1, 0, 'r' },
    { "quick", 0, 0, 'Q' }, { "json", 0, 0, 'j' }, { "help", 0, 0, 'h' },  { "page", 1, 0, 'p' },
    { "api", 1, 0, 'a' },   { "chain", 1, 0, 'c' }, { 0, 0, 0, 0 },
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
        if (cli_opt_count(cmd, c == 'q' ? "depth" : "reps", v, 1, c == 'q' ? 4096 : MAX_REPS, &n))
            return -EINVAL;
        *(c == 'q' ? &o->depth : &o->reps) = (unsigned)n;
        return 0;
    case 'c':
        if (cli_opt_count(cmd, "chain", v, 1, 4096, &n))
            return -EINVAL;
        o->chain = (unsigned)n;
        return 0;
    case 'p':
        if (cli_opt_size(cmd, "page", v, 4096, 64ull << 20, &o->page))
            return -EINVAL;
        if (o->page % 4096) {
            cli_error(cmd, 2, "--page %s is not a multiple of 4K", v);
            return -EINVAL;
        }
        return 0;
    case 'a':
        if (strcmp(v, "get") && strcmp(v, "cycle")) {
            cli_error(cmd, 2, "--api '%s': want get or cycle", v);
            return -EINVAL;
        }
        o->get = strcmp(v, "get") == 0;
        return 0;
    case 'Q': o->quick = true; return 0;
    case 'j': o->json = true; return 0;
    default: return -EINVAL;
    }
}

static void kvtier_config(const struct ssd_opts *o, const char *dir, size_t pb, uint64_t n,
                          kvt_config *c);
static uint64_t get_dram_pages(const struct ssd_opts *o);

static const struct cli_field ssd_fields[] = {
    { "dram_bytes", "bytes" }, { "ssd_bytes", "bytes" }, { "queue_depth", "depth" },
    { "page_bytes", "page" },  { NULL, NULL },
};

/* The page sizes to measure: --page, or both defaults. Returns how many. */
static int sizes_of(const struct ssd_opts *o, size_t *sz)
{
    if (o->page) {
        sz[0] = o->page;
        return 1;
    }
    sz[0] = page_sizes[0];
    sz[1] = page_sizes[1];
    return 2;
}

/* The engine's own check of every page size's configuration. */
static int ssd_check(const struct ssd_opts *o)
{
    size_t sz[2];
    int ns = sizes_of(o, sz);
    for (int i = 0; i < ns; i++) {
        kvt_config c;
        if (o->bytes / sz[i] < (o->get ? get_dram_pages(o) + 8 + o->chain : 1)) {
            cli_error("bench ssd", 2, "--bytes %llu holds too few pages of %zu bytes%s",
                      (unsigned long long)o->bytes, sz[i],
                      o->get ? " for --api get (DRAM's pages and a --chain more)" : "");
            return -EINVAL;
        }
        kvtier_config(o, "(scratch)", sz[i], o->bytes / sz[i], &c);
        if (cli_config_check("bench ssd", &c, ssd_fields))
            return -EINVAL;
    }
    return 0;
}

/* 0 to run, 1 after --help, -EINVAL after a message. */
static int ssd_parse(int argc, char **argv, struct ssd_opts *o)
{
    const char *tmp = getenv("TMPDIR");
    *o = (struct ssd_opts){ .dir = tmp && *tmp ? tmp : "/tmp", .bytes = 256ull << 20, .depth = 32,
                            .reps = 9, .chain = 8 };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", ssd_lo, NULL)) != -1) {
        if (c == 'h') {
            ssd_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("bench ssd", c, argv, ssd_lo);
        if (ssd_option(c, optarg, o))
            return -EINVAL;
    }
    if (optind != argc) {
        cli_error("bench ssd", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if (o->quick) {
        o->bytes = o->get ? 96ull << 20 : 32ull << 20; /* get: more than DRAM holds */
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
 * store/spill_dir.h); absent is fine. */
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

/* Page i: key (1, 0, i), its bytes the page pattern (tools/util/util.h),
 * so that every page read back can be checked. */
static kvt_key page_key(uint64_t i)
{
    return (kvt_key){ 1, 0, (uint32_t)i };
}

/* Fills n pages with puts (untimed). In a cycle's engine DRAM holds them
 * all; in a get engine most go on down to SSD. */
static int fill_pages(kvt_engine *e, uint64_t n, size_t pb)
{
    uint8_t *buf = malloc(pb);
    if (!buf)
        return -ENOMEM;
    int r = 0;
    for (uint64_t i = 0; i < n && !r; i++) {
        kvt_key k = page_key(i);
        util_pattern_fill(buf, pb, k, 1);
        const void *src = buf;
        r = kvt_put(e, &k, 1, &src, 0);
    }
    free(buf);
    return r;
}

/* DRAM pages of a get engine: room for a chunk of four chains (kvt_get
 * stages at most a quarter of DRAM at a time), and at least 64. */
static uint64_t get_dram_pages(const struct ssd_opts *o)
{
    uint64_t d = 4ull * o->chain + 8;
    return d < 64 ? 64 : d;
}

/* An engine for n pages: a cycle's holds them all in DRAM, with an SSD
 * tier to take them; a get engine's DRAM is small, so most live on SSD. */
static void kvtier_config(const struct ssd_opts *o, const char *dir, size_t pb, uint64_t n,
                          kvt_config *c)
{
    kvt_config_init(c);
    c->page_bytes = pb;
    c->hbm_bytes = pb;
    c->dram_bytes = (o->get ? get_dram_pages(o) : n + 8) * pb;
    /* with persist the SSD keeps slots spare for rewrites (kvt_ssd_durable_room) */
    c->ssd_bytes = (n + 8 + n / 16 + o->depth) * pb;
    c->ssd_dir = dir;
    c->device = KVT_DEVICE_HOST;
    c->queue_depth = o->depth;
    /* A get engine's flush writes every page to SSD, so that the timed
     * reads evict nothing that must be written first. */
    c->persist = o->get;
}

/* One measurement through kvtier: write every DRAM page to SSD, then drop
 * the DRAM copies and read them all back (kvt_tool_ssd_cycle). */
static int kvtier_cycle(const struct ssd_opts *o, const char *dir, size_t pb, uint64_t n,
                        double fig[4])
{
    kvt_config c;
    kvtier_config(o, dir, pb, n, &c);
    kvt_engine *e;
    int r = kvt_open(&c, &e);
    if (r < 0)
        return r;
    if ((r = fill_pages(e, n, pb)) < 0)
        goto out;
    kvt_stats s0, s1;
    kvt_get_stats(e, &s0);
    struct kvt_tool_ssd_times t;
    uint64_t got = 0;
    r = kvt_tool_ssd_cycle(e, &t, &got);
    kvt_get_stats(e, &s1);
    if (r == 0 && (got != n || s1.errors_io || s1.errors_corrupt))
        r = -EIO;
    double wb = (double)(s1.bytes_down[1] - s0.bytes_down[1]) / 1e9;
    double rb = (double)(s1.bytes_up[1] - s0.bytes_up[1]) / 1e9;
    fig[0] = wb / t.write_s;
    fig[1] = t.write_cpu_s / wb;
    fig[2] = rb / t.read_s;
    fig[3] = t.read_cpu_s / rb;
out:
    kvt_close(e);
    return r;
}

/* Whether dst holds page i exactly, checked at a few words (the engine
 * checks every byte's CRC; this checks that the right page came out). */
static bool page_ok(const uint8_t *dst, uint64_t i, size_t pb)
{
    size_t words = pb / 8, at[3] = { 1, words / 2, words - 1 };
    uint64_t seed = util_pattern_seed(page_key(i), 1);
    for (int k = 0; k < 3; k++)
        if (((const uint64_t *)dst)[at[k]] != util_pattern_word(seed, at[k]))
            return false;
    return true;
}

/* The timed loop of a get measurement: chains of pages [0, cold), each
 * copied out to the same chain of buffers, as an engine loads into its
 * staging pool again and again, and checked. */
static int get_chains(const struct ssd_opts *o, kvt_engine *e, uint64_t cold, size_t pb,
                      uint8_t *bufs)
{
    kvt_key keys[o->chain];
    void *dst[o->chain];
    int found[o->chain];
    for (uint64_t i = 0; i + o->chain <= cold; i += o->chain) {
        for (unsigned j = 0; j < o->chain; j++) {
            keys[j] = page_key(i + j);
            dst[j] = bufs + (size_t)j * pb;
        }
        int r = kvt_get(e, keys, o->chain, dst, 0, found);
        if (r < 0)
            return r;
        for (unsigned j = 0; j < o->chain; j++)
            if (found[j] != 1 || !page_ok(dst[j], i + j, pb))
                return kvt_fail(-EIO, "page %llu came back %s", (unsigned long long)(i + j),
                                found[j] != 1 ? "missing" : "wrong");
    }
    return 0;
}

/* One measurement through kvt_get: n pages put and flushed, of which all
 * but what DRAM holds live on SSD only; then those are read back by chains
 * of --chain pages into the caller's buffers. fig[0..1]: GB/s and CPU s/GB
 * of the reads from SSD. */
static int kvtier_get(const struct ssd_opts *o, const char *dir, size_t pb, uint64_t n,
                      double fig[2])
{
    kvt_config c;
    kvtier_config(o, dir, pb, n, &c);
    kvt_engine *e;
    int r = kvt_open(&c, &e);
    if (r < 0)
        return r;
    /* In huge pages, as the raw side's, even for a chain under 2 MiB. */
    struct cli_huge map;
    size_t span = (size_t)o->chain * pb;
    uint8_t *bufs = cli_huge_alloc(span, &map);
    if (!bufs) {
        r = -ENOMEM;
        goto out;
    }
    memset(bufs, 0x5a, span);
    if ((r = fill_pages(e, n, pb)) < 0 || (r = kvt_flush(e)) < 0)
        goto out;
    /* The oldest pages went down first: all but the newest DRAM's worth. */
    uint64_t cold = n - get_dram_pages(o) - 8;
    cold -= cold % o->chain;
    kvt_stats s0, s1;
    kvt_get_stats(e, &s0);
    double t0 = util_now(), c0 = util_process_cpu();
    r = get_chains(o, e, cold, pb, bufs);
    double t1 = util_now(), c1 = util_process_cpu();
    kvt_get_stats(e, &s1);
    uint64_t read = s1.bytes_up[1] - s0.bytes_up[1];
    double rb = (double)read / 1e9;
    if (r == 0 && (s1.errors_io || s1.errors_corrupt))
        r = -EIO;
    if (r == 0 && read < cold * pb) /* some came from DRAM: not measured */
        r = kvt_fail(-EIO, "only %llu of %llu pages were read from SSD",
                     (unsigned long long)(read / pb), (unsigned long long)cold);
    fig[0] = rb / (t1 - t0);
    fig[1] = (c1 - c0) / rb;
out:
    cli_huge_free(&map);
    kvt_close(e);
    return r;
}

/* One side of one rep: 0, or 1 after a message. fig: write GB/s, then read
 * GB/s at fig[2], and with --api get reads in batches of --chain at fig[4]
 * (the raw pass's CPU is not measured: its figure would be mostly the
 * faulting-in of its buffers). */
static int bench_raw(const struct ssd_opts *o, struct scratch *sc, size_t pb, uint64_t n,
                     double fig[5])
{
    /* A fresh preallocated file each time, as the engine's segments are:
     * first writes into unwritten extents cost more than overwrites, on
     * both sides alike. */
    int rc;
    if ((rc = scratch_raw(sc, n * pb)) < 0 ||
        (rc = kvt_tool_ssd_raw(sc->fd, RAW_NAME, n * pb, pb, o->depth, n, true, &fig[0])) < 0 ||
        (rc = kvt_tool_ssd_raw(sc->fd, RAW_NAME, n * pb, pb, o->depth, n, false, &fig[2])) < 0 ||
        (o->get && (rc = kvt_tool_ssd_raw_batched(sc->fd, RAW_NAME, n * pb, pb, o->depth, n,
                                                  o->chain, false, &fig[4])) < 0))
        return cli_error("bench ssd", 1, "raw io_uring baseline failed: %s", strerror(-rc));
    return 0;
}

/* Raw reads over the first segment the engine just wrote and read (its
 * pages' own file and blocks, the n pages' bytes or the segment, whichever
 * is less), at the same block size and depth: GB/s, or 0 when there is
 * none to read. The disk serves one file, or one moment, faster than
 * another (docs/performance.md#bench-ssd): this says how fast it served
 * the engine's. */
static double segment_raw(const struct ssd_opts *o, const struct scratch *sc, size_t pb,
                          uint64_t n)
{
    char name[32];
    kvt_spill_segment_name(0, name, sizeof name);
    int dfd;
    if (kvt_spill_opendir(sc->spill, false, &dfd) < 0) {
        kvt_clear_error(); /* a baseline that could not run is reported as 0 */
        return 0;
    }
    struct stat st;
    double g = 0;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
        uint64_t span = n * pb < (uint64_t)st.st_size ? n * pb : (uint64_t)st.st_size;
        span -= span % pb;
        if (span && kvt_tool_ssd_raw(dfd, name, span, pb, o->depth, n, false, &g) < 0)
            g = 0;
    }
    close(dfd);
    return g;
}

/* One kvtier side of one rep: fig as kvtier_cycle's (or --api get's read
 * at fig[2]), then raw over the engine's segment at fig[4]. */
static int bench_kvtier(const struct ssd_opts *o, struct scratch *sc, size_t pb, uint64_t n,
                        double fig[5])
{
    int rc = o->get ? kvtier_get(o, sc->spill, pb, n, fig + 2) : kvtier_cycle(o, sc->spill, pb, n, fig);
    if (rc < 0)
        return cli_error("bench ssd", 1, "through kvtier: %s (%s)", kvt_strerror(rc),
                         kvt_last_error());
    if (!o->get)
        fig[4] = segment_raw(o, sc, pb, n);
    /* Each run starts from an empty directory: nothing of the last one,
     * of another page size, is left for the engine to wipe. */
    if ((rc = scratch_spill_remove(sc)) < 0)
        return cli_error("bench ssd", 1, "%s", kvt_last_error());
    return 0;
}

/* Whether rep's raw side goes first. The sides alternate: a virtual disk's
 * speed drifts with what its host cached a moment ago. */
static bool raw_first(unsigned rep)
{
    return (rep & 1) == 0;
}

/* Measures one page size: w (unless --api get) and r get one entry per rep. */
static int bench_size(const struct ssd_opts *o, struct scratch *sc, size_t pb, struct ssd_link *w,
                      struct ssd_link *r)
{
    uint64_t n = o->bytes / pb;
    *w = (struct ssd_link){ .link = "dram->ssd", .block = pb };
    *r = (struct ssd_link){ .link = o->get ? "ssd->get" : "ssd->dram", .block = pb };
    for (unsigned i = 0; i < o->reps; i++) {
        double raw[5] = { 0 }, kv[5] = { 0 };
        for (int side = 0; side < 2; side++) {
            int rc = (side == 0) == raw_first(i) ? bench_raw(o, sc, pb, n, raw)
                                                 : bench_kvtier(o, sc, pb, n, kv);
            if (rc)
                return rc;
        }
        w->gbps[i] = kv[0], w->cpu[i] = kv[1], w->base[i] = raw[0];
        r->gbps[i] = kv[2], r->cpu[i] = kv[3], r->base[i] = raw[2], r->bbase[i] = raw[4];
        r->sbase[i] = kv[4];
        w->n = r->n = i + 1;
        if (!o->json && isatty(2))
            fprintf(stderr, "\r  %zu KiB pages: run %u/%u", pb >> 10, i + 1, o->reps);
    }
    if (!o->json && isatty(2))
        fprintf(stderr, "\r%40s\r", "");
    return 0;
}

/* ------------------------------------------------------------- report */

/* The lossy codecs' page: one layer of 8 K/V heads of 128 and 64 tokens in
 * bf16, K then V (256 KiB), with the test data's outlier channels in K
 * (lab/codec_bench.c). The lossless ones keep their Gaussian page. */
#define BENCH_KV_LAYOUT { KVT_DTYPE_BF16, KVT_KV_HEAD_MAJOR, 64, 8, 128, 128, 0, 0, 0, 0 }

struct codec_fig {
    const char *name;
    int codec;
    double ratio, comp, decomp;
};

/* The median of v[0..n), and its range in lo and hi; v stays in run
 * order (the paired ratios are taken from it). */
static double median(const double *v, unsigned n, double *lo, double *hi)
{
    double s[MAX_REPS];
    memcpy(s, v, n * sizeof(*s));
    return util_median(s, n, lo, hi);
}

/* Test- and bench-only entry points of io/crc32c.c (not in codec.h). */
extern const char *kvt_crc32c_path_name(int i);
extern int kvt_crc32c_path_usable(int i);
extern uint32_t kvt_crc32c_path(int i, uint32_t crc, const void *p, size_t n);
extern int kvt_crc32c_path_chosen(void);

/* CRC32C on one core: the path the dispatch picks against the crc32
 * instruction's three chains (the default before the folding paths), hot (a
 * 256 KiB page in cache, repeated) and cold (a buffer four times the
 * last-level cache, walked once, so that every byte comes from memory), in
 * paired runs whose order alternates. */
struct crc_fig {
    int path, base;
    size_t cold_bytes;
    unsigned reps;
    double hot, cold, base_hot, base_cold;   /* medians, GB/s */
    double hot_ratio, hot_lo, hot_hi, cold_ratio, cold_lo, cold_hi;
};

#define CRC_HOT (256u << 10)

static volatile uint32_t crc_sink; /* the results, so that no call is dropped */

/* The last-level cache that one core sees. sysfs first: in a VM glibc's
 * sysconf can report the L3 times its sharers (256 MiB for a 32 MiB one). */
static size_t crc_llc_bytes(void)
{
    unsigned long kib = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "re");
    if (f) {
        if (fscanf(f, "%luK", &kib) != 1)
            kib = 0;
        fclose(f);
    }
    if (kib)
        return (size_t)kib << 10;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    long c = l3 > 0 ? l3 : l2;
    return c > 0 ? (size_t)c : 32u << 20; /* unknown: a large one */
}

static double crc_hot_gbps(int path, const unsigned char *b, double secs)
{
    uint32_t c = 0;
    size_t done = 0;
    double t0 = util_now(), t;
    do {
        for (int k = 0; k < 8; k++)
            c = kvt_crc32c_path(path, c, b, CRC_HOT);
        done += 8 * (size_t)CRC_HOT;
    } while ((t = util_now()) - t0 < secs);
    crc_sink ^= c;
    return (double)done / (t - t0) * 1e-9;
}

static double crc_cold_gbps(int path, const unsigned char *b, size_t n)
{
    double t0 = util_now();
    crc_sink ^= kvt_crc32c_path(path, 0, b, n);
    return (double)n / (util_now() - t0) * 1e-9;
}

/* 0, or -ENOMEM (nothing measured). */
static int crc_bench(bool quick, unsigned reps, struct crc_fig *f)
{
    memset(f, 0, sizeof *f);
    f->path = kvt_crc32c_path_chosen();
    f->base = kvt_crc32c_path_usable(1) ? 1 : 0; /* 1: "sse4.2", 0: the table */
    f->reps = reps < 3 ? 3 : reps > MAX_REPS ? MAX_REPS : reps;
    size_t llc = crc_llc_bytes();
    f->cold_bytes = (quick ? 2 : 4) * llc;
    if (f->cold_bytes < (64u << 20))
        f->cold_bytes = 64u << 20;
    if (f->cold_bytes > (1u << 30))
        f->cold_bytes = 1u << 30;
    unsigned char *b = NULL;
    if (posix_memalign((void **)&b, 4096, f->cold_bytes))
        return -ENOMEM;
    for (size_t i = 0; i < f->cold_bytes; i++) /* every page faulted in before timing */
        b[i] = (unsigned char)(i * 131 + (i >> 12));
    double hot[2][MAX_REPS], cold[2][MAX_REPS], hr[MAX_REPS], cr[MAX_REPS];
    int paths[2] = { f->path, f->base };
    for (unsigned r = 0; r < f->reps; r++) {
        for (int j = 0; j < 2; j++) {
            int w = (int)(r & 1) ^ j; /* alternate which goes first */
            hot[w][r] = crc_hot_gbps(paths[w], b, quick ? 0.02 : 0.1);
        }
        for (int j = 0; j < 2; j++) {
            int w = (int)(r & 1) ^ j;
            cold[w][r] = crc_cold_gbps(paths[w], b, f->cold_bytes);
        }
        hr[r] = hot[0][r] / hot[1][r];
        cr[r] = cold[0][r] / cold[1][r];
    }
    free(b);
    f->hot = median(hot[0], f->reps, NULL, NULL);
    f->base_hot = median(hot[1], f->reps, NULL, NULL);
    f->cold = median(cold[0], f->reps, NULL, NULL);
    f->base_cold = median(cold[1], f->reps, NULL, NULL);
    f->hot_ratio = median(hr, f->reps, &f->hot_lo, &f->hot_hi);
    f->cold_ratio = median(cr, f->reps, &f->cold_lo, &f->cold_hi);
    return 0;
}

/* A link's summary: medians of each side, and of the paired ratios. */
struct link_sum {
    double gbps, base, ratio, rlo, rhi, cpu;
    double bbase, bratio, brlo, brhi;   /* --api get: against raw in the same batches */
    double sbase, sratio, srlo, srhi;   /* ssd->dram: against raw over its own segment */
};

static struct link_sum summarize(const struct ssd_link *l)
{
    double ratio[MAX_REPS], bratio[MAX_REPS], sratio[MAX_REPS];
    for (unsigned i = 0; i < l->n; i++) {
        ratio[i] = l->base[i] > 0 ? l->gbps[i] / l->base[i] : 0;
        bratio[i] = l->bbase[i] > 0 ? l->gbps[i] / l->bbase[i] : 0;
        sratio[i] = l->sbase[i] > 0 ? l->gbps[i] / l->sbase[i] : 0;
    }
    struct link_sum s;
    s.bbase = median(l->bbase, l->n, NULL, NULL);
    s.bratio = median(bratio, l->n, &s.brlo, &s.brhi);
    s.sbase = median(l->sbase, l->n, NULL, NULL);
    s.sratio = median(sratio, l->n, &s.srlo, &s.srhi);
    s.gbps = median(l->gbps, l->n, NULL, NULL);
    s.base = median(l->base, l->n, NULL, NULL);
    s.ratio = median(ratio, l->n, &s.rlo, &s.rhi);
    s.cpu = median(l->cpu, l->n, NULL, NULL);
    return s;
}

static void report_json(const struct ssd_opts *o, const struct ssd_link *l, int nl,
                        const struct codec_fig *cf, int nc, const struct crc_fig *crc)
{
    printf("{\"dir\": ");
    cli_json_str(o->dir);
    printf(", \"api\": \"%s\", \"reps\": %u, \"links\": [", o->get ? "get" : "cycle", o->reps);
    for (int i = 0; i < nl; i++) {
        struct link_sum s = summarize(&l[i]);
        printf("%s{\"link\": \"%s\", \"block_bytes\": %zu, \"depth\": %u, ", i ? ", " : "",
               l[i].link, l[i].block, o->depth);
        if (o->get)
            printf("\"chain\": %u, \"batched_baseline_gbps\": %.4f, \"batched_ratio\": %.4f, "
                   "\"batched_ratio_min\": %.4f, \"batched_ratio_max\": %.4f, ",
                   o->chain, s.bbase, s.bratio, s.brlo, s.brhi);
        if (s.sbase > 0)
            printf("\"segment_baseline_gbps\": %.4f, \"segment_ratio\": %.4f, "
                   "\"segment_ratio_min\": %.4f, \"segment_ratio_max\": %.4f, ",
                   s.sbase, s.sratio, s.srlo, s.srhi);
        printf("\"gbps\": %.4f, \"baseline\": \"io_uring O_DIRECT\", \"baseline_gbps\": %.4f, "
               "\"ratio\": %.4f, \"ratio_min\": %.4f, \"ratio_max\": %.4f, "
               "\"cpu_s_per_gb\": %.4f, \"runs\": [",
               s.gbps, s.base, s.ratio, s.rlo, s.rhi, s.cpu);
        /* Each rep as measured, in order: which side went first, and both
         * figures. */
        for (unsigned r = 0; r < l[i].n; r++)
            printf("%s{\"first\": \"%s\", \"gbps\": %.4f, \"baseline_gbps\": %.4f}",
                   r ? ", " : "", raw_first(r) ? "raw" : "kvtier", l[i].gbps[r], l[i].base[r]);
        printf("]}");
    }
    printf("], \"codecs\": [");
    for (int i = 0; i < nc; i++)
        printf("%s{\"codec\": \"%s\", \"page_bytes\": 262144, \"ratio\": %.4f, "
               "\"compress_gbps\": %.4f, \"decompress_gbps\": %.4f}",
               i ? ", " : "", cf[i].name, cf[i].ratio, cf[i].comp, cf[i].decomp);
    printf("]");
    if (crc)
        printf(", \"crc32c\": {\"path\": \"%s\", \"baseline\": \"%s\", \"reps\": %u, "
               "\"hot_bytes\": %u, \"cold_bytes\": %zu, \"hot_gbps\": %.4f, "
               "\"baseline_hot_gbps\": %.4f, \"hot_ratio\": %.4f, \"hot_ratio_min\": %.4f, "
               "\"hot_ratio_max\": %.4f, \"cold_gbps\": %.4f, \"baseline_cold_gbps\": %.4f, "
               "\"cold_ratio\": %.4f, \"cold_ratio_min\": %.4f, \"cold_ratio_max\": %.4f}",
               kvt_crc32c_path_name(crc->path), kvt_crc32c_path_name(crc->base), crc->reps,
               CRC_HOT, crc->cold_bytes, crc->hot, crc->base_hot, crc->hot_ratio, crc->hot_lo,
               crc->hot_hi, crc->cold, crc->base_cold, crc->cold_ratio, crc->cold_lo,
               crc->cold_hi);
    printf("}\n");
}

static void report(const struct ssd_opts *o, const struct ssd_link *l, int nl,
                   const struct codec_fig *cf, int nc, const struct crc_fig *crc)
{
    FILE *t = o->json ? stderr : stdout;
    fprintf(t, "kvtier bench ssd: %s, depth %u, %llu MiB per figure, median of %u paired runs\n",
            o->dir, o->depth, (unsigned long long)(o->bytes >> 20), o->reps);
    if (o->get)
        fprintf(t, "  through kvt_get of %u pages a call, SSD-only pages into the caller's "
                   "buffers\n", o->chain);
    fprintf(t, "  %-10s %6s %7s %9s %7s %13s %13s\n", "link", "block", "GB/s", "raw GB/s",
            "ratio", "ratio range", "CPU s/GB");
    for (int i = 0; i < nl; i++) {
        struct link_sum s = summarize(&l[i]);
        fprintf(t, "  %-10s %5zuK %7.2f %9.2f %7.3f  %5.3f-%5.3f  %9.3f\n", l[i].link,
                l[i].block >> 10, s.gbps, s.base, s.ratio, s.rlo, s.rhi, s.cpu);
        if (o->get)
            fprintf(t, "  %-10s %6s %7s %9.2f %7.3f  %5.3f-%5.3f  (raw in batches of %u, each "
                       "waited for)\n", "", "", "", s.bbase, s.bratio, s.brlo, s.brhi, o->chain);
        if (s.sbase > 0)
            fprintf(t, "  %-10s %6s %7s %9.2f %7.3f  %5.3f-%5.3f  (raw over the engine's own "
                       "segment)\n", "", "", "", s.sbase, s.sratio, s.srlo, s.srhi);
    }
    fprintf(t, "  (raw: io_uring O_DIRECT at the same block size and depth, same file system, a\n"
               "   file of its own; then over the file kvtier just read, right after it;\n"
               "   CPU s/GB: through kvtier, every thread of the process, per GB moved)\n");
    if (nc)
        fprintf(t, "  codecs on a 256 KiB bf16 page, one core (lossless: Gaussian values; lossy: "
                   "8 K/V heads x 64 tokens x 128,\n   K with outlier channels; GB/s of bf16 in):\n");
    for (int i = 0; i < nc; i++)
        fprintf(t, "    %-16s ratio %.3f  compress %.2f GB/s  decompress %.2f GB/s\n", cf[i].name,
                cf[i].ratio, cf[i].comp, cf[i].decomp);
    if (crc) {
        const char *p = kvt_crc32c_path_name(crc->path), *b = kvt_crc32c_path_name(crc->base);
        fprintf(t, "  crc32c on one core, %s against %s, median of %u paired runs:\n", p, b,
                crc->reps);
        fprintf(t, "    hot  (%u KiB, in cache)    %6.2f GB/s  %s %6.2f GB/s  ratio %.2f "
                   "(%.2f-%.2f)\n",
                CRC_HOT >> 10, crc->hot, b, crc->base_hot, crc->hot_ratio, crc->hot_lo, crc->hot_hi);
        fprintf(t, "    cold (%zu MiB, walked once) %6.2f GB/s  %s %6.2f GB/s  ratio %.2f "
                   "(%.2f-%.2f)\n",
                crc->cold_bytes >> 20, crc->cold, b, crc->base_cold, crc->cold_ratio, crc->cold_lo,
                crc->cold_hi);
    }
    if (o->json)
        report_json(o, l, nl, cf, nc, crc);
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
    static struct ssd_link l[4];
    size_t sz[2];
    int ns = sizes_of(&o, sz), nl = 0, rc = 0;
    for (int i = 0; i < ns && !rc; i++) {
        struct ssd_link w;
        rc = bench_size(&o, &sc, sz[i], &w, &l[nl + !o.get]);
        if (!o.get)
            l[nl] = w;
        nl += o.get ? 1 : 2;
    }
    scratch_remove(&sc);
    if (rc)
        return rc;
    struct codec_fig cf[5] = { { "zstd", KVT_CODEC_ZSTD, 0, 0, 0 },
                               { "zstd-shuffle16", KVT_CODEC_ZSTD_SHUFFLE16, 0, 0, 0 },
                               { "fp8", KVT_CODEC_FP8, 0, 0, 0 },
                               { "int8", KVT_CODEC_INT8, 0, 0, 0 },
                               { "int4", KVT_CODEC_INT4, 0, 0, 0 } };
    int nc = o.get ? 0 : 5; /* the codecs are the cycle's */
    const struct kvt_page_layout kv = BENCH_KV_LAYOUT;
    for (int i = 0; i < nc; i++)
        if (kvt_codec_bench_layout(cf[i].codec, kvt_codec_lossy(cf[i].codec) ? &kv : NULL,
                                   256 << 10, o.quick ? 0.05 : 0.5, &cf[i].ratio, &cf[i].comp,
                                   &cf[i].decomp) < 0)
            return cli_error("bench ssd", 1, "codec bench failed");
    struct crc_fig crc;
    if (nc && crc_bench(o.quick, o.quick ? 5 : o.reps, &crc) < 0)
        return cli_error("bench ssd", 1, "crc32c bench: no memory for its %zu MiB buffer",
                         crc.cold_bytes >> 20);
    report(&o, l, nl, cf, nc, nc ? &crc : NULL);
    return 0;
}
