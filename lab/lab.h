/*
 * lab.h — the test-support library (libkvtier_lab.a, lab/): what the tests
 * and the command use to look inside an engine and to break it on purpose —
 * the fault-injecting device and I/O back-ends, Belady's MIN, the raw
 * benchmarks and the tools' view of an engine (lab/tool.h). It is linked by
 * the tests and by `kvtier`, never into libkvtier: the product never calls
 * it (tests/layering checks), and reaches its back-ends only when an opener
 * hands them in (kvt_open_ex).
 */
#ifndef KVT_LAB_H
#define KVT_LAB_H

#include "lab/faulty.h"
#include "api/api.h"

/* Test hooks, given at open and kept by that engine alone: the faulty
 * back-ends, each with its fault plan (NULL: the back-end the config names).
 * A plan must outlive the engine; the test re-arms it and reads its counts
 * (devices/device.h, io/io.h). */
struct kvt_test_hooks {
    struct kvt_device_faulty *device;
    struct kvt_io_faulty *io;
    struct kvt_kv_mem *remote;      /* the shared tier's values in memory (lab/kv_mem.h);
                                       cfg.remote_url must still be set */
    bool no_write_ahead; /* with persist, pages stay only in DRAM until a flush or an
                            eviction writes them (tiers/dram.c, write-ahead; nor does a
                            put write its own: tiers/ssd_caller.c) */
};
/* kvt_open with hooks (NULL: none): the faulty back-ends opened in place
 * of the config's, and the I/O plan's power-loss model told of every sync. */
int kvt_open_with_hooks(const kvt_config *cfg, const struct kvt_test_hooks *hooks,
                        kvt_engine **out);

/* An I/O plan's power-loss model as the SSD store's syncer (arg: the plan). */
extern const struct kvt_sync_ops kvt_io_faulty_sync_ops;

/* The policies by name, the offline ones (belady) too: for the simulator. */
const struct kvt_policy_ops *kvt_lab_policy_find(const char *name);

/* A page of little-endian bf16 values drawn from N(0, 1), the same for the
 * same seed (lab/codec_bench.c). */
void kvt_codec_fill_bf16(void *dst, size_t bytes, uint64_t seed);
/* A page of KV as real models have it, in layout L (dtype, K and V where
 * the layout puts them): values N(0, 1), and in K one channel in 32 of
 * every head an outlier, N(+-12, 3) (lab/codec_bench.c). Blocks of L one
 * after another while they fit; the rest N(0, 1) bf16. Same seed, same page. */
void kvt_codec_fill_kv(void *dst, size_t bytes, const struct kvt_page_layout *L, uint64_t seed);
/* For `kvtier bench`: encodes and decodes a bf16 page of N(0, 1) values
 * (fixed seed) of page_bytes with codec at the default level, each for about
 * seconds on the calling thread. Returns 0 with the ratio (raw / stored) and
 * GB/s of raw bytes (1e9) per core for each direction; -EINVAL, -ENOMEM, or
 * KVT_ECORRUPT if the page did not come back intact. */
int kvt_codec_bench(int codec, size_t page_bytes, double seconds, double *ratio, double *comp_gbps,
                    double *decomp_gbps);
/* The same on a page of KV in layout L (kvt_codec_fill_kv; L NULL: as
 * above). A lossy codec's page is not compared: it comes back close, not
 * equal (tests/test_quant.c bounds how close). */
int kvt_codec_bench_layout(int codec, const struct kvt_page_layout *L, size_t page_bytes,
                           double seconds, double *ratio, double *comp_gbps, double *decomp_gbps);

#endif /* KVT_LAB_H */
