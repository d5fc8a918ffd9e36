/*
 * raw_bench.h — the raw O_DIRECT throughput baseline (test support).
 *
 * Not part of the I/O interface (io.h): the engine never calls it. It is
 * the disk with no engine, the baseline `kvtier bench ssd` and `kvtier run`
 * hold the engine's SSD figures to; tools reach it through lab/tool.h.
 * Defined in lab/raw_bench.c (-ENOSYS in a build without io_uring).
 */
#ifndef KVT_RAW_BENCH_H
#define KVT_RAW_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Raw io_uring O_DIRECT throughput: n requests of block bytes at the given
 * depth over the regular file name in the directory open as dfd (AT_FDCWD:
 * name is a path), which must exist and be at least span bytes; reading or
 * writing, buffers registered. A link at name is not followed (-ELOOP): the
 * file is one the caller made, in a directory others may have written.
 * Returns 0 and *gbps (1e9 bytes/s), or -errno (-ENOSYS without io_uring). */
int kvt_io_raw_bench(int dfd, const char *name, uint64_t span, size_t block, unsigned depth,
                     uint64_t n, bool write, double *gbps);
/* The same in batches of `batch` requests (0: one stream): each batch is
 * issued at up to `depth` in flight and waited for whole before the next
 * starts, as a caller of a synchronous API (kvt_get of a chain) does. */
int kvt_io_raw_bench_batched(int dfd, const char *name, uint64_t span, size_t block,
                             unsigned depth, uint64_t n, unsigned batch, bool write, double *gbps);

/* A recorded pattern of reads, replayed raw: the blocks at offs[] of name
 * (4096-aligned), in nsizes batches of sizes[i] requests each (in offs'
 * order), each batch issued at up to `depth` in flight and waited for whole
 * before the next, as the calls that made the pattern were. */
int kvt_io_raw_list(int dfd, const char *name, size_t block, unsigned depth, const uint64_t *offs,
                    const uint32_t *sizes, size_t nsizes, double *gbps);

#endif /* KVT_RAW_BENCH_H */
