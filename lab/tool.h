/*
 * tool.h — what the kvtier command's tools may use beyond include/kvtier.h
 * (internal, not installed).
 *
 * The tools (tools/) drive an engine through the public API. A benchmark
 * also needs a few things the API does not give a caller, because they
 * measure the engine against the hardware under it: the raw link between
 * the engine's two arenas, a synchronous copy into a page wherever it lives
 * (GPU memory or host), the SSD pipeline run flat out, and the disk with no
 * engine at all. They are here, as functions, so that no tool reads the
 * engine's struct or takes its lock: tools include this header and never
 * api/api.h (nor the headers below it).
 *
 * Threads: every call that takes an engine is made by the thread that owns
 * it (the tools have one), and none may run during another call into it.
 */
#ifndef KVT_TOOL_H
#define KVT_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* KVT_NONE and the error slot (kvt_fail, kvt_clear_error) come with the
 * base header, which tools may use through this one. */
#include "base/base.h"
#include "include/kvtier.h"

/* ------------------------------------------------------------- geometry */

struct kvt_tool_info {
    size_t page_bytes;
    uint32_t hbm_slots, dram_slots; /* the arenas' slots (DRAM's include the spare) */
    uint32_t watermark;             /* HBM slots the mover keeps free or clean */
};

/* The engine's fixed geometry, as opened; never changes while it is open. */
void kvt_tool_info(kvt_engine *e, struct kvt_tool_info *out);

/* Since open, through the mover: the bytes the SSD itself moved, each
 * page's stored form (after the codec) padded to 4 KiB, read and written
 * (kvt_stats counts page bytes, the same with any codec); and the time the
 * decoding threads spent in the codec, ns (0 without one), and of it their
 * CPU time. */
struct kvt_tool_disk {
    uint64_t read, written, codec_ns, codec_cpu_ns;
    uint64_t crc_cpu_ns; /* the SSD path's checksums, CPU time */
    uint32_t decoders;   /* threads that decode reads (tiers.h, the decode team) */
};
void kvt_tool_disk(kvt_engine *e, struct kvt_tool_disk *out);
/* CPUs this process may run on (its affinity mask), at least 1. */
unsigned kvt_tool_cpus(void);

/* ------------------------------------------------------------- DRAM <-> HBM */

/* The raw link under the engine: copies `pages` page-sized blocks between
 * the engine's two arenas through the device back-end's own copy queue
 * (the host back-end's copy thread, cudaMemcpyAsync on CUDA), with no
 * page table, policy or lock in the way. Block i goes between HBM slot
 * i % hbm_slots and DRAM slot i % dram_span (dram_span <= dram_slots), in
 * batches of `batch` (1..4096); pipelined queues every batch and waits
 * once, else each batch is waited for before the next is queued, as an
 * acquire does. up: DRAM -> HBM; else HBM -> DRAM.
 *
 * The arenas' bytes are overwritten: call it before any page is stored,
 * or where the pages' contents no longer matter. Returns 0 and *gbps
 * (1e9 bytes/s), or a negative error (nothing measured, *gbps 0). */
int kvt_tool_link_copy(kvt_engine *e, bool up, uint64_t pages, uint64_t dram_span,
                       unsigned batch, bool pipelined, double *gbps);

/* Both directions of the raw link at once, as a decode that writes back
 * while it loads: `pages` blocks each way, DRAM slots [0, span/2) into HBM
 * slots [0, hbm/2) and HBM slots [hbm/2, hbm) into DRAM slots [span/2, span)
 * (span = dram_span, >= 2), so the two never touch the same bytes. Per
 * round one batch goes down, queued and not waited for (a write-back), and
 * one goes up and is waited for (an acquire). gbps[0] is up, gbps[1] down,
 * both over the time until the last copy of either landed. Same contract
 * on the arenas' bytes and the same returns as kvt_tool_link_copy; where
 * a batch is larger than half of HBM, its blocks repeat within the batch,
 * which only the bytes (no longer meaningful) notice. */
int kvt_tool_link_duplex(kvt_engine *e, uint64_t pages, uint64_t dram_span, unsigned batch,
                         double gbps[2]);

/* Synchronous copies between host memory and memory of the engine's
 * device back-end (a page pointer kvt_acquire or kvt_create gave, or any
 * part of it): a memcpy on the host back-end, cudaMemcpy on CUDA. Returns
 * 0 or the back-end's error. */
int kvt_tool_copy_to_page(kvt_engine *e, void *page, const void *src, size_t bytes);
int kvt_tool_copy_from_page(kvt_engine *e, void *dst, const void *page, size_t bytes);

/* ------------------------------------------------------------- SSD */

/* The two phases of kvt_tool_ssd_cycle: wall seconds, and CPU seconds of
 * the whole process (every thread: the caller, the mover, the I/O
 * back-end's) over the same interval. */
struct kvt_tool_ssd_times {
    double write_s, read_s;
    double write_cpu_s, read_cpu_s;
};

/* The SSD pipeline flat out, for an engine whose pages are all in DRAM
 * (and nowhere else): writes every page to SSD and waits (kvt_flush with
 * persistence as configured), drops the DRAM copies, then reads every page
 * back into DRAM and waits. *t gets the two phases' times (the drop between
 * them is not timed), *read_pages the pages read. Returns the flush's
 * result (0 or its error). */
int kvt_tool_ssd_cycle(kvt_engine *e, struct kvt_tool_ssd_times *t, uint64_t *read_pages);

/* Memory laid out as the engine's DMA buffers are (kvt_huge_map, base.h):
 * 2 MiB-aligned, whole huge pages. 0 with *out set, or -errno; given back
 * with kvt_tool_huge_unmap(p, bytes), bytes as asked for. */
int kvt_tool_huge_map(size_t bytes, void **out);
void kvt_tool_huge_unmap(void *p, size_t bytes);

/* Raw io_uring O_DIRECT throughput with no engine: n requests of block
 * bytes at queue depth `depth` over the first span bytes of the regular
 * file `name` in the directory open as dfd (AT_FDCWD: a path), which must
 * exist and be at least span bytes; buffers in huge-page memory, registered
 * where allowed. A link at name is not followed (-ELOOP). Returns 0 and
 * *gbps, or -errno (-ENOSYS in a build without io_uring; -EPERM where the
 * kernel refuses it). */
int kvt_tool_ssd_raw(int dfd, const char *name, uint64_t span, size_t block, unsigned depth,
                     uint64_t n, bool write, double *gbps);
/* The same in batches of `batch` requests, each waited for whole before the
 * next is issued (0: one stream): what a synchronous caller can get. */
int kvt_tool_ssd_raw_batched(int dfd, const char *name, uint64_t span, size_t block,
                             unsigned depth, uint64_t n, unsigned batch, bool write, double *gbps);
/* A recorded pattern of reads replayed raw (lab/raw_bench.h, kvt_io_raw_list):
 * the blocks at offs[] of name, in nsizes batches of sizes[i], each waited
 * for whole. 0 and *gbps, or -errno (-ENOSYS without io_uring). */
int kvt_tool_ssd_raw_list(int dfd, const char *name, size_t block, unsigned depth,
                          const uint64_t *offs, const uint32_t *sizes, size_t nsizes, double *gbps);
/* Where key's page has its SSD copy now: its segment number and byte offset
 * (name the file with kvt_spill_segment_name). 0, or -ENOENT when it has
 * none (or the engine has no SSD tier). */
int kvt_tool_ssd_where(kvt_engine *e, const kvt_key *key, uint32_t *segment, uint64_t *offset);

/* The same measurement through the pread/pwrite pool the engine falls back
 * to without io_uring (io/io_psync.c: a few threads, `depth` requests in
 * flight, a buffer each): n blocks of block bytes (a multiple of 4096), in
 * order from offset 0 of the open file fd (O_DIRECT or not, as opened); a
 * write pass ends with fdatasync, inside the time. Returns 0 and *gbps, or
 * a negative error (the first request's that failed). */
int kvt_tool_ssd_psync(int fd, size_t block, uint64_t n, unsigned depth, bool write,
                       double *gbps);

#endif /* KVT_TOOL_H */
