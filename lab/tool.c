/*
 * tool.c — the tools' interface to an engine (lab/tool.h).
 *
 * The engine internals this file touches, all read-only but the lock:
 *   e->page_bytes, e->hbm.watermark                  (fixed at open)
 *   e->hbm.arena, e->dram.arena: nslots and base     (fixed at open)
 *   e->hbm.dev, e->hbm.dev_priv: submit, wait, copy_sync  (the device back-end)
 *   e->lock, kvt_ssd_flush, kvt_dram_drop_redundant, kvt_ssd_read_all
 *   e->pipe.disk_read, disk_written, codec_ns, codec_cpu_ns, crc_cpu_ns, decoders
 *   (under the lock)
 * Whoever renames them keeps this file compiling; the tools do not change.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/io.h"
#include "lab/raw_bench.h"
#include "store/ssd_store.h"
#include "api/api.h"
#include "lab/tool.h"

static double tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void kvt_tool_info(kvt_engine *e, struct kvt_tool_info *out)
{
    *out = (struct kvt_tool_info){
        .page_bytes = e->page_bytes,
        .hbm_slots = e->hbm.arena.nslots,
        .dram_slots = e->dram.arena.nslots,
        .watermark = e->hbm.watermark,
    };
}

void kvt_tool_disk(kvt_engine *e, struct kvt_tool_disk *out)
{
    pthread_mutex_lock(&e->lock);
    *out = (struct kvt_tool_disk){ e->pipe.disk_read, e->pipe.disk_written, e->pipe.codec_ns,
                                   e->pipe.codec_cpu_ns, e->pipe.crc_cpu_ns,
                                   e->pipe.decoders ? e->pipe.decoders : 1 };
    pthread_mutex_unlock(&e->lock);
}

unsigned kvt_tool_cpus(void)
{
    return kvt_cpus_usable();
}

int kvt_tool_link_copy(kvt_engine *e, bool up, uint64_t pages, uint64_t dram_span,
                       unsigned batch, bool pipelined, double *gbps)
{
    size_t pb = e->page_bytes;
    uint32_t nh = e->hbm.arena.nslots;
    enum kvt_dir dir = up ? KVT_H2D : KVT_D2H;
    *gbps = 0;
    if (!pages || !batch || batch > 4096 || !dram_span || dram_span > e->dram.arena.nslots)
        return -EINVAL;
    struct kvt_copy *c = malloc(batch * sizeof(*c));
    if (!c)
        return -ENOMEM;
    uint8_t *h = e->hbm.arena.base, *d = e->dram.arena.base;
    uint64_t f = 0;
    int r = 0;
    double t0 = tool_now();
    for (uint64_t i = 0; i < pages && r == 0;) {
        unsigned k = 0;
        for (; k < batch && i < pages; k++, i++) {
            uint8_t *hp = h + (i % nh) * pb, *dp = d + (i % dram_span) * pb;
            c[k] = up ? (struct kvt_copy){ hp, dp, pb } : (struct kvt_copy){ dp, hp, pb };
        }
        r = e->hbm.dev->submit(e->hbm.dev_priv, dir, c, k, &f);
        if (r == 0 && !pipelined)
            r = e->hbm.dev->wait(e->hbm.dev_priv, dir, f);
    }
    if (r == 0 && pipelined)
        r = e->hbm.dev->wait(e->hbm.dev_priv, dir, f);
    double dt = tool_now() - t0;
    free(c);
    if (r == 0)
        *gbps = (double)pages * (double)pb / dt / 1e9;
    return r;
}

/* One batch of k blocks, starting at block i, of one direction of the duplex
 * (see tool.h): the up half or the down half of each arena. */
static void duplex_batch(kvt_engine *e, bool up, uint64_t i, unsigned k, uint64_t span,
                         struct kvt_copy *c)
{
    size_t pb = e->page_bytes;
    uint64_t nh = e->hbm.arena.nslots / 2, nd = span / 2;
    uint8_t *h = e->hbm.arena.base + (up ? 0 : nh * pb);
    uint8_t *d = e->dram.arena.base + (up ? 0 : nd * pb);
    for (unsigned j = 0; j < k; j++, i++) {
        uint8_t *hp = h + (i % nh) * pb, *dp = d + (i % nd) * pb;
        c[j] = up ? (struct kvt_copy){ hp, dp, pb } : (struct kvt_copy){ dp, hp, pb };
    }
}

int kvt_tool_link_duplex(kvt_engine *e, uint64_t pages, uint64_t dram_span, unsigned batch,
                         double gbps[2])
{
    const struct kvt_device_ops *dev = e->hbm.dev;
    void *dp = e->hbm.dev_priv;
    gbps[0] = gbps[1] = 0;
    if (!pages || !batch || batch > 4096 || dram_span < 2 || dram_span > e->dram.arena.nslots ||
        e->hbm.arena.nslots < 2)
        return -EINVAL;
    struct kvt_copy *c = malloc(2 * batch * sizeof(*c));
    if (!c)
        return -ENOMEM;
    uint64_t f_up = 0, f_down = 0;
    int r = 0;
    double t0 = tool_now();
    for (uint64_t i = 0; i < pages && r == 0; i += batch) {
        unsigned k = pages - i < batch ? (unsigned)(pages - i) : batch;
        duplex_batch(e, false, i, k, dram_span, c + batch);
        duplex_batch(e, true, i, k, dram_span, c);
        r = dev->submit(dp, KVT_D2H, c + batch, k, &f_down);
        if (r == 0)
            r = dev->submit(dp, KVT_H2D, c, k, &f_up);
        if (r == 0)
            r = dev->wait(dp, KVT_H2D, f_up);
    }
    /* Wait for the write-backs even after a failure: the caller may free
     * the arenas when we return. */
    if (f_down) {
        int w = dev->wait(dp, KVT_D2H, f_down);
        r = r ? r : w;
    }
    double dt = tool_now() - t0;
    free(c);
    if (r == 0)
        gbps[0] = gbps[1] = (double)pages * (double)e->page_bytes / dt / 1e9;
    return r;
}

int kvt_tool_copy_to_page(kvt_engine *e, void *page, const void *src, size_t bytes)
{
    return e->hbm.dev->copy_sync(e->hbm.dev_priv, KVT_COPY_H2D, page, src, bytes);
}

int kvt_tool_copy_from_page(kvt_engine *e, void *dst, const void *page, size_t bytes)
{
    return e->hbm.dev->copy_sync(e->hbm.dev_priv, KVT_COPY_D2H, dst, page, bytes);
}

/* One lock hold for all three phases: nothing else runs on the engine
 * between them, so the read phase starts from exactly what the write phase
 * left. */
static double tool_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kvt_tool_ssd_cycle(kvt_engine *e, struct kvt_tool_ssd_times *t, uint64_t *read_pages)
{
    pthread_mutex_lock(&e->lock);
    double t0 = tool_now(), c0 = tool_cpu();
    int r = kvt_ssd_flush(e);
    double t1 = tool_now(), c1 = tool_cpu();
    kvt_dram_drop_redundant(e);
    double t2 = tool_now(), c2 = tool_cpu();
    *read_pages = kvt_ssd_read_all(e);
    double t3 = tool_now(), c3 = tool_cpu();
    pthread_mutex_unlock(&e->lock);
    *t = (struct kvt_tool_ssd_times){ t1 - t0, t3 - t2, c1 - c0, c3 - c2 };
    return r;
}

int kvt_tool_huge_map(size_t bytes, void **out)
{
    return kvt_huge_map(bytes, out);
}

void kvt_tool_huge_unmap(void *p, size_t bytes)
{
    kvt_huge_unmap(p, bytes);
}

int kvt_tool_ssd_raw(int dfd, const char *name, uint64_t span, size_t block, unsigned depth,
                     uint64_t n, bool write, double *gbps)
{
    return kvt_io_raw_bench(dfd, name, span, block, depth, n, write, gbps);
}

int kvt_tool_ssd_raw_batched(int dfd, const char *name, uint64_t span, size_t block,
                             unsigned depth, uint64_t n, unsigned batch, bool write, double *gbps)
{
    return kvt_io_raw_bench_batched(dfd, name, span, block, depth, n, batch, write, gbps);
}

int kvt_tool_ssd_raw_list(int dfd, const char *name, size_t block, unsigned depth,
                          const uint64_t *offs, const uint32_t *sizes, size_t nsizes, double *gbps)
{
    return kvt_io_raw_list(dfd, name, block, depth, offs, sizes, nsizes, gbps);
}

int kvt_tool_ssd_where(kvt_engine *e, const kvt_key *key, uint32_t *segment, uint64_t *offset)
{
    int r = -ENOENT;
    pthread_mutex_lock(&e->lock);
    uint32_t pg = e->ssd ? kvt_ptable_find(&e->pt, key) : KVT_NONE;
    const struct kvt_page *p = pg == KVT_NONE ? NULL : kvt_pg(&e->pt, pg);
    if (p && (p->flags & PG_VALID_SSD) && p->ssd_slot != KVT_NONE) {
        kvt_ssd_where(kvt_ssd_of(e->ssd), p->ssd_slot, segment, offset);
        r = 0;
    }
    pthread_mutex_unlock(&e->lock);
    return r;
}

/* Keeps `depth` requests in flight, each with its own buffer, reissuing a
 * request for the next block as soon as it is reaped. */
static int psync_pass(const struct kvt_io_ops *ops, void *io, struct kvt_io_req *req,
                      uint8_t *bufs, int fd, size_t block, uint64_t n, unsigned depth,
                      bool write)
{
    struct kvt_io_req *done[64];
    uint64_t issued = 0, completed = 0;
    int rc = 0;
    for (unsigned i = 0; i < depth && issued < n && !rc; i++) {
        struct kvt_io_req *r = &req[i];
        *r = (struct kvt_io_req){ fd, write, bufs + (size_t)i * block, block, issued * block, 0, NULL };
        if ((rc = ops->submit(io, &r, 1)) == 0)
            issued++;
    }
    while (completed < issued) {
        int k = ops->reap(io, done, 64, 1);
        if (k < 0)
            return rc ? rc : k;
        for (int j = 0; j < k; j++) {
            struct kvt_io_req *r = done[j];
            completed++;
            rc = rc ? rc : r->res;
            if (rc || issued == n)
                continue;
            r->off = issued * block;
            r->res = 0;
            if ((rc = ops->submit(io, &r, 1)) == 0)
                issued++;
        }
    }
    return rc;
}

int kvt_tool_ssd_psync(int fd, size_t block, uint64_t n, unsigned depth, bool write,
                       double *gbps)
{
    *gbps = 0;
    if (fd < 0 || !block || block % 4096 || !n || !depth || depth > 64)
        return -EINVAL;
    struct kvt_io_params p = { .depth = depth };
    const struct kvt_io_ops *ops;
    void *io;
    int rc = kvt_io_open(KVT_IO_PSYNC, &p, &ops, &io, NULL, 0);
    if (rc)
        return rc;
    struct kvt_io_req *req = calloc(depth, sizeof(*req));
    void *bufs = NULL;
    if (!req || posix_memalign(&bufs, 4096, (size_t)depth * block)) {
        rc = -ENOMEM;
        goto out;
    }
    memset(bufs, 0x5a, (size_t)depth * block);
    double t0 = tool_now();
    rc = psync_pass(ops, io, req, bufs, fd, block, n, depth, write);
    if (rc == 0 && write && fdatasync(fd))
        rc = -errno;
    double dt = tool_now() - t0;
    if (rc == 0)
        *gbps = (double)n * (double)block / dt / 1e9;
out:
    ops->close(io);
    free(bufs);
    free(req);
    return rc;
}
