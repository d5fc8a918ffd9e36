/*
 * links.c — `kvtier run`'s links measured raw in the same run (DRAM<->HBM
 * through the device back-end's copy queue, the SSD with O_DIRECT in the
 * spill directory), and the bound they set on the decode.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* posix_fadvise flags */
#endif
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "tools/run/run_priv.h"
#include "tools/util/util.h"

const char *const run_term_name[BOUND_TERMS] = { "compute",   "dram->hbm", "hbm->dram",
                                                 "ssd->dram", "dram->ssd", "ssd", "cpu" };

/* DRAM<->HBM raw: page-sized copies between the (still empty) arenas through
 * the device back-end's queue, as `bench hbm` does (kvt_tool_link_copy);
 * best of 3. GB/s. */
double run_raw_link(kvt_engine *e, bool up)
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

/* The SSD link as the engine uses it: io_uring O_DIRECT, page-sized
 * blocks, the engine's queue depth, over a fresh preallocated 256 MiB file:
 * one write pass and two read passes, each long enough to be a sample of
 * the disk's speed rather than of its bursts and lulls. */
#define RAW_SPAN (256u << 20)

/* Without io_uring: a 32 MiB file written then read back through the
 * engine's own pread/pwrite pool (kvt_tool_ssd_psync), RAW_IO_DEPTH
 * requests in flight (the engine keeps many in flight too; one synchronous
 * reader would understate the link); buffered + drop-cache where the file
 * system refuses O_DIRECT. */
#define RAW_IO_DEPTH 8

static void sample_add(struct run_link *l, double gbps)
{
    if (gbps > 0 && l->n < RUN_LINK_SAMPLES)
        l->s[l->n++] = gbps;
}

/* A file of the spill directory (the scratch file, a segment): its name in
 * the directory open as dfd (named dir in messages). Opened only through
 * dfd, never following a link (store/spill_dir.h). */
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

/* The passes without io_uring (RAW_IO_DEPTH), over the same scratch file. */
static void raw_ssd_psync(const struct spill_file *sf, size_t pb, struct run_result *res)
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

/* In a scratch file of the spill directory's own (store/spill_dir.h: made
 * exclusively under a name kvtier's wipe knows, so one a crash leaves
 * behind is not a foreign file that would close the directory to kvtier).
 * Done before the engine opens the directory, and again after the decode. */
void run_raw_ssd(const char *dir, size_t pb, struct run_result *res)
{
    struct spill_file sf = { .dir = dir };
    if (kvt_spill_scratch(dir, &sf.dfd, sf.name, sizeof sf.name) < 0)
        return;
    unsigned nr = res->ssd_read.n, nw = res->ssd_write.n;
    if (raw_ssd_uring(&sf, pb, res) != 0 || res->ssd_read.n == nr || res->ssd_write.n == nw) {
        res->ssd_read.n = nr;
        res->ssd_write.n = nw;
        raw_ssd_psync(&sf, pb, res);
    }
    unlinkat(sf.dfd, sf.name, 0);
    close(sf.dfd);
    kvt_clear_error(); /* a baseline that could not run is left out, not reported */
}

void run_link_range(const struct run_link *l, double *lo, double *hi)
{
    *lo = *hi = l->n ? l->s[0] : 0;
    for (unsigned i = 1; i < l->n; i++) {
        *lo = l->s[i] < *lo ? l->s[i] : *lo;
        *hi = l->s[i] > *hi ? l->s[i] : *hi;
    }
}

/* The median of a link's samples (0 without any), which stay in order. */
static double link_median(const struct run_link *l)
{
    double v[RUN_LINK_SAMPLES];
    memcpy(v, l->s, l->n * sizeof(double));
    return util_median(v, l->n, NULL, NULL);
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
 * engine's arenas are: in 4 KiB pages the figure follows how scattered the
 * buffers happen to be (docs/performance.md#huge-pages). DRAM<->HBM is not
 * measured again: the arenas hold the engine's pages. */
void run_links_again(struct run_ctx *x, struct run_result *r)
{
    if (!r->cap[2])
        return;
    run_raw_ssd(x->ssd_dir, x->pb, r);
    raw_spill_reads(x, r);
    r->gbps_ssd_read = link_median(r->spill_read.n ? &r->spill_read : &r->ssd_read);
    r->gbps_ssd_write = link_median(&r->ssd_write);
}

double run_raw_gbps(const struct run_result *r, int term)
{
    const double gb[TERMS] = { 0, r->gbps_h2d, r->gbps_d2h, r->gbps_ssd_read, r->gbps_ssd_write };
    return gb[term];
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
 * speed (docs/performance.md#ssd-reads-and-writes-share-the-disk). The sum
 * too is capped at the wall time: the disk did both in that time.
 *
 * The cores are a resource too. With the attention on the CPU (the host
 * back-end) the attention team, the codec on the mover and the copy threads
 * (memcpy, on this back-end) share them, and the team alone keeps every core
 * busy (--threads defaults to 2 on this project's 2-core machine): the
 * codec's time does not run beside the compute, as the max() of the terms
 * would have it, but takes turns with it. So one more term: that CPU work
 * over the cores, a lower bound on the wall time as sure as a link's (the
 * cores did all of it within the wall time). On the GPU only the codec is
 * CPU work here. The SSD path's checksums count beside the codec: work it
 * does for every page, whatever the codec. docs/commands.md#the-bound. */
void run_bound(struct run_result *r)
{
    const kvt_stats *d = &r->delta;
    /* The SSD's bytes as the disk moved them: after the codec, padded to
     * 4 KiB (the same as the page bytes without one). */
    double by[TERMS] = { 0, (double)d->bytes_up[0], (double)d->bytes_down[0],
                         (double)r->disk_read, (double)r->disk_written };
    r->term_s[TERM_COMPUTE] = r->compute_s;
    for (int i = 1; i < TERMS; i++) {
        r->decode_gbps[i] = r->wall_s > 0 ? by[i] / r->wall_s / 1e9 : 0;
        double raw = run_raw_gbps(r, i);
        r->link_gbps[i] = raw > 0 && raw < r->decode_gbps[i] ? r->decode_gbps[i] : raw;
        r->term_s[i] = r->link_gbps[i] > 0 ? by[i] / (r->link_gbps[i] * 1e9) : 0;
    }
    double ssd = r->term_s[TERM_SSD_R] + r->term_s[TERM_SSD_W];
    r->term_s[TERM_SSD] = ssd < r->wall_s ? ssd : r->wall_s;
    /* The codec runs on the decoding threads (the mover, and the engine's
     * decode team beside it), beside the disk's transfers: the SSD path
     * takes at least their time too. */
    double codec = r->codec_s / r->decoders; /* at least 1: kvt_tool_disk */
    codec = codec < r->wall_s ? codec : r->wall_s;
    if (codec > r->term_s[TERM_SSD])
        r->term_s[TERM_SSD] = codec;
    bool host = strcmp(r->device, "cuda") != 0;
    r->cores = kvt_tool_cpus();
    /* The codec's and the attention's CPU time by their threads' clocks (a
     * wall clock would count the time each waited for the other's core);
     * the copies by their link terms, the time the copy threads took at the
     * speed measured, unless --link-gbps paced them (most of it is then
     * their sleep). */
    bool copies = host && !r->link_paced;
    r->cpu_work_s = r->codec_cpu_s + r->crc_cpu_s + (host ? r->compute_cpu_s : 0) +
                    (copies ? r->term_s[TERM_H2D] + r->term_s[TERM_D2H] : 0);
    double cpu = r->cpu_work_s / r->cores;
    r->term_s[TERM_CPU] = cpu < r->wall_s ? cpu : r->wall_s;
    static const int candidates[] = { TERM_H2D, TERM_D2H, TERM_SSD, TERM_CPU };
    r->bound_by = TERM_COMPUTE;
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++)
        if (r->term_s[candidates[i]] > r->term_s[r->bound_by])
            r->bound_by = candidates[i];
    r->bound_s = r->term_s[r->bound_by];
}
