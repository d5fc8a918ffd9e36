/*
 * raw_bench.c — the raw O_DIRECT throughput baseline (raw_bench.h): the disk
 * with no engine, through the same rings and registered buffers as the
 * engine's io_uring back-end (io/uring.h). In the test-support library: the
 * engine never calls it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvt_build.h"
#include "base/base.h"
#include "lab/raw_bench.h"

#if KVT_HAVE_URING
#include "io/uring.h"

struct bench {
    struct io_uring ring;
    int fd;
    bool write, fixed;
    char *bufs;              /* one buffer per block of the span, as the engine's DRAM
                                arena gives each page its own slot; a few reused
                                buffers measure something else (docs/design.md#huge-pages) */
    size_t block;
    uint64_t nblocks, issued, completed, bytes;
    uint64_t batch_end;      /* requests issued stop here until all complete */
    unsigned batch;          /* requests per batch (0: one stream) */
    const uint64_t *offs;    /* a list of blocks to read (kvt_io_raw_list), or NULL */
    const uint32_t *sizes;   /* its batches' sizes, nsizes of them */
    size_t nsizes, next_size;
    int err;
};

/* Slot s issues the next block of the sequential cycle through the span. */
static void bench_issue(struct bench *b, unsigned s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring);
    uint64_t blk = b->issued++ % b->nblocks;
    char *buf = b->bufs + (size_t)blk * b->block;
    uint64_t off = b->offs ? b->offs[b->issued - 1] : blk * b->block;
    int bi = (int)(((size_t)blk * b->block) / URING_CHUNK);
    if (b->fixed && b->write)
        io_uring_prep_write_fixed(sqe, b->fd, buf, (unsigned)b->block, off, bi);
    else if (b->fixed)
        io_uring_prep_read_fixed(sqe, b->fd, buf, (unsigned)b->block, off, bi);
    else if (b->write)
        io_uring_prep_write(sqe, b->fd, buf, (unsigned)b->block, off);
    else
        io_uring_prep_read(sqe, b->fd, buf, (unsigned)b->block, off);
    io_uring_sqe_set_data(sqe, (void *)(uintptr_t)s);
}

/* The end of the batch after the one ending at b->batch_end. */
static uint64_t bench_next_end(struct bench *b)
{
    if (!b->sizes)
        return b->batch_end + b->batch;
    while (b->next_size < b->nsizes && !b->sizes[b->next_size])
        b->next_size++; /* an empty batch waits for nothing */
    return b->batch_end + (b->next_size < b->nsizes ? b->sizes[b->next_size++] : 0);
}

/* Where issuing stops now: n, or the end of the current batch. */
static uint64_t bench_limit(const struct bench *b, uint64_t n)
{
    return b->batch && b->batch_end < n ? b->batch_end : n;
}

/* Keeps depth requests in flight until n have completed (in batches: until
 * the batch's have, then the next batch starts). No resubmission of short
 * transfers: the bytes that moved are what is counted. After an error no
 * new request is issued, but the loop runs until every request issued has
 * completed, since the kernel writes into bufs until then. */
static void bench_loop(struct bench *b, unsigned depth, uint64_t n)
{
    struct io_uring_cqe *cqes[URING_BATCH];
    b->batch_end = 0;
    b->batch_end = bench_next_end(b);
    for (unsigned s = 0; s < depth && b->issued < bench_limit(b, n); s++)
        bench_issue(b, s);
    while (b->completed < b->issued) {
        int rc = io_uring_submit_and_wait(&b->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            b->err = rc;
            return; /* the ring is gone; queue_exit cancels and waits */
        }
        unsigned k = io_uring_peek_batch_cqe(&b->ring, cqes, URING_BATCH);
        for (unsigned i = 0; i < k; i++) {
            int res = cqes[i]->res;
            unsigned s = (unsigned)(uintptr_t)io_uring_cqe_get_data(cqes[i]);
            b->completed++;
            if (res <= 0 && !b->err)
                b->err = res ? res : -EIO;
            if (res > 0)
                b->bytes += (uint64_t)res;
            if (!b->err && b->issued < bench_limit(b, n))
                bench_issue(b, s);
        }
        io_uring_cq_advance(&b->ring, k);
        if (b->batch && !b->err && b->completed == b->issued && b->issued < n) {
            b->batch_end = bench_next_end(b); /* the batch is done: the next one */
            for (unsigned s = 0; s < depth && b->issued < bench_limit(b, n); s++)
                bench_issue(b, s);
        }
    }
}

static double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int kvt_io_raw_bench(int dfd, const char *name, uint64_t span, size_t block, unsigned depth,
                     uint64_t n, bool write, double *gbps)
{
    return kvt_io_raw_bench_batched(dfd, name, span, block, depth, n, 0, write, gbps);
}

static int bench_run(int dfd, const char *name, struct bench b, unsigned depth, uint64_t n,
                     double *gbps);

int kvt_io_raw_bench_batched(int dfd, const char *name, uint64_t span, size_t block,
                             unsigned depth, uint64_t n, unsigned batch, bool write, double *gbps)
{
    if (!name || !gbps || !block || block % 4096 || block > URING_CHUNK || !depth || !n ||
        span < block)
        return -EINVAL;
    struct bench b = { .write = write, .block = block, .nblocks = span / block, .batch = batch };
    return bench_run(dfd, name, b, depth, n, gbps);
}

int kvt_io_raw_list(int dfd, const char *name, size_t block, unsigned depth, const uint64_t *offs,
                    const uint32_t *sizes, size_t nsizes, double *gbps)
{
    uint64_t n = 0, most = 0;
    for (size_t i = 0; i < nsizes; i++) {
        n += sizes ? sizes[i] : 0;
        most = sizes && sizes[i] > most ? sizes[i] : most;
    }
    if (!name || !gbps || !offs || !sizes || !block || block % 4096 || block > URING_CHUNK ||
        !depth || !n)
        return -EINVAL;
    for (uint64_t i = 0; i < n; i++)
        if (offs[i] % 4096)
            return -EINVAL;
    /* A buffer per request of the largest batch: batch i's request k reads
     * into buffer (its number) mod `most`, no two in flight at once. */
    struct bench b = { .block = block, .nblocks = most, .batch = 1, .offs = offs,
                       .sizes = sizes, .nsizes = nsizes };
    return bench_run(dfd, name, b, depth, n, gbps);
}

static int bench_run(int dfd, const char *name, struct bench b, unsigned depth, uint64_t n,
                     double *gbps)
{
    bool write = b.write;
    size_t block = b.block;
    /* O_NONBLOCK: a FIFO in the file's place must not hang the open (it
     * changes nothing for a regular file). */
    b.fd = openat(dfd, name,
                  (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (b.fd < 0)
        return -errno;
    struct stat st;
    if (fstat(b.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(b.fd);
        return -EINVAL;
    }
    size_t region = (size_t)b.nblocks * block;
    /* Memory of the kind the engine's arenas are (kvt_huge_map: aligned
     * huge pages where THP allows): on a virtual disk the DMA target's physical layout moves the
     * figure (docs/design.md#huge-pages). */
    int rc = 0;
    void *bufs;
    if (kvt_huge_map(region, &bufs) < 0) {
        rc = -ENOMEM;
        goto out_close;
    }
    b.bufs = bufs;
    memset(b.bufs, 0x5a, region); /* fault the pages in before timing */
    rc = kvt_uring_init_ring(&b.ring, depth);
    if (rc)
        goto out_free;
    b.fixed = kvt_uring_register_region(&b.ring, b.bufs, region, URING_CHUNK) == 0;

    double t0 = bench_now();
    bench_loop(&b, depth, n);
    double secs = bench_now() - t0;
    rc = b.err;
    if (!rc)
        *gbps = secs > 0 ? (double)b.bytes / secs / 1e9 : 0.0;
    io_uring_queue_exit(&b.ring);
out_free:
    kvt_huge_unmap(b.bufs, region);
out_close:
    close(b.fd);
    return rc;
}

#else /* !KVT_HAVE_URING */

/* The baseline needs io_uring itself; the command reports it missing. */
int kvt_io_raw_bench(int dfd, const char *name, uint64_t span, size_t block, unsigned depth,
                     uint64_t n, bool write, double *gbps)
{
    (void)dfd, (void)name, (void)span, (void)block, (void)depth, (void)n, (void)write, (void)gbps;
    return -ENOSYS;
}

int kvt_io_raw_bench_batched(int dfd, const char *name, uint64_t span, size_t block,
                             unsigned depth, uint64_t n, unsigned batch, bool write, double *gbps)
{
    (void)batch;
    return kvt_io_raw_bench(dfd, name, span, block, depth, n, write, gbps);
}

int kvt_io_raw_list(int dfd, const char *name, size_t block, unsigned depth, const uint64_t *offs,
                    const uint32_t *sizes, size_t nsizes, double *gbps)
{
    (void)dfd, (void)name, (void)block, (void)depth, (void)offs, (void)sizes, (void)nsizes, (void)gbps;
    return -ENOSYS;
}

#endif
