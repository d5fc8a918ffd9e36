/*
 * raw.c — the disk with no engine, at the replay's block size, in the same
 * run: the baseline the replay's SSD loads are held to.
 *
 * io_uring O_DIRECT at the engine's queue depth, buffers in huge-page
 * memory (kvt_tool_ssd_raw, the loop `kvtier bench ssd` and `kvtier run`
 * use). Before the engine opens the spill directory: one write pass and two
 * read passes over a fresh preallocated scratch file the size of the SSD
 * tier (at most 256 MiB); after the replay: two
 * read passes over the engine's own first segment, where its blocks are (a
 * virtual disk's speed depends on where a file landed). The read baseline
 * is the median of the read passes. Then the SSD-served gets' own reads
 * (their blocks where they lay when read, the same calls, each waited for)
 * replayed raw: the same reads with no engine.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "tools/replay/replay_priv.h"
#include "tools/util/util.h"

#define RAW_SPAN (256u << 20)
#define RAW_DEPTH 32 /* kvt_config's default queue_depth, which the replay keeps */

/* passes read (or write) passes over span bytes of name in dfd; the good
 * samples into v[*n]. */
static void passes(int dfd, const char *name, uint64_t span, size_t bb, bool write, int n_pass,
                   double *v, int *n)
{
    for (int p = 0; p < n_pass; p++) {
        double g = 0;
        if (kvt_tool_ssd_raw(dfd, name, span, bb, RAW_DEPTH, span / bb, write, &g) == 0 && g > 0)
            v[(*n)++] = g;
    }
}

void replay_raw_before(struct replay_ctx *x)
{
    struct replay_result *r = x->r;
    int dfd;
    char name[64];
    /* As much as the SSD tier holds, up to RAW_SPAN: a small replay stays
     * small, a large one reads long enough to be a sample of the disk. */
    uint64_t tier = r->slots[KVT_TIER_SSD] * x->bb;
    uint64_t span = (tier < RAW_SPAN ? tier : RAW_SPAN) / x->bb * x->bb;
    if (span < 16 * x->bb)
        span = 16 * x->bb;
    if (kvt_spill_scratch(x->ssd_dir, &dfd, name, sizeof name) < 0) {
        kvt_clear_error();
        return;
    }
    int fd = kvt_spill_openat(dfd, x->ssd_dir, name, O_RDWR, 0, NULL);
    if (fd >= 0 && posix_fallocate(fd, 0, (off_t)span) == 0) {
        double w[1], rd[2];
        int nw = 0, nr = 0;
        passes(dfd, name, span, x->bb, true, 1, w, &nw);
        if (nw)
            passes(dfd, name, span, x->bb, false, 2, rd, &nr);
        r->raw_write_gbps = nw ? w[0] : 0;
        r->raw_read_gbps = util_median(rd, (size_t)nr, NULL, NULL);
    }
    if (fd >= 0)
        close(fd);
    unlinkat(dfd, name, 0);
    close(dfd);
    kvt_clear_error(); /* a baseline that could not run is reported as 0, not as an error */
}

void replay_raw_after(struct replay_ctx *x)
{
    struct replay_result *r = x->r;
    /* Slots fill a segment from its start; of what the SSD holds, the first
     * nine tenths are surely written (unwritten extents of the preallocated
     * file read as zeros without touching the disk). */
    uint64_t held = r->end.resident_pages[KVT_TIER_SSD] * x->bb / 10 * 9;
    uint64_t span = (held < RAW_SPAN ? held : RAW_SPAN) / x->bb * x->bb;
    int dfd;
    char name[64];
    if (span < 16 * x->bb || kvt_spill_opendir(x->ssd_dir, false, &dfd) < 0) {
        kvt_clear_error();
        return;
    }
    kvt_spill_segment_name(0, name, sizeof name);
    double v[2];
    int n = 0;
    passes(dfd, name, span, x->bb, false, 2, v, &n);
    r->raw_spill_read_gbps = util_median(v, (size_t)n, NULL, NULL);
    /* The disk at the replay's own batch size: a get's reads go out
     * together and the call waits for the last, which a stream at depth 32
     * never does. */
    uint64_t calls = r->get_calls[KVT_TIER_SSD], blocks = r->get_bytes[KVT_TIER_SSD] / x->bb;
    if (calls && blocks) {
        uint32_t batch = (uint32_t)((blocks + calls / 2) / calls);
        double g = 0;
        batch = batch ? batch : 1;
        if (kvt_tool_ssd_raw_batched(dfd, name, span, x->bb, RAW_DEPTH, span / x->bb, batch, false,
                                     &g) == 0) {
            r->raw_batched_gbps = g;
            r->raw_batch = batch;
        }
    }
    /* The gets' own reads, where their blocks lay, in the same calls: the
     * stream above reads the segment in order, while a prefix cache's hits
     * lie where the eviction order put them. */
    double g = 0;
    if (x->nsame_sizes && kvt_tool_ssd_raw_list(dfd, name, x->bb, RAW_DEPTH, x->same_offs,
                                                x->same_sizes, x->nsame_sizes, &g) == 0) {
        r->raw_same_gbps = g;
        r->raw_same_blocks = x->nsame_offs;
    }
    close(dfd);
    kvt_clear_error();
}
