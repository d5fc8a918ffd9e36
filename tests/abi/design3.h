typedef struct kvt_engine kvt_engine;
typedef uint64_t kvt_ticket;
typedef struct kvt_key { uint64_t id; uint32_t layer; uint32_t index; } kvt_key;
typedef enum { KVT_TIER_NONE = -1, KVT_TIER_HBM = 0, KVT_TIER_DRAM = 1, KVT_TIER_SSD = 2 } kvt_tier;

typedef struct kvt_config {
    size_t page_bytes;          /* bytes per page (multiple of 4096) */
    size_t hbm_bytes, dram_bytes, ssd_bytes;   /* capacity per tier; ssd_bytes 0 = no SSD tier */
    const char *ssd_dir;        /* spill segments and the LMDB index live here */
    int device;                 /* CUDA ordinal, KVT_DEVICE_HOST (emulated), KVT_DEVICE_AUTO */
    const char *policy;         /* "decode" (default) or "lru" */
    int codec;                  /* KVT_CODEC_NONE, KVT_CODEC_ZSTD, KVT_CODEC_ZSTD_SHUFFLE16 */
    int persist;                /* keep SSD pages across close/open (else wiped at open) */
    uint64_t fingerprint;       /* model/dtype/layout identity */
    int io_backend;             /* KVT_IO_AUTO (io_uring, else threads), KVT_IO_URING, KVT_IO_PSYNC */
    unsigned queue_depth;       /* I/O requests in flight */
} kvt_config;

void kvt_config_init(kvt_config *cfg);                 /* fills defaults */
int  kvt_open(const kvt_config *cfg, kvt_engine **out);
void kvt_close(kvt_engine *e);                          /* flushes; never loses a persisted page */
const char *kvt_strerror(int err);

/* Engine-managed pages: the KV lives in kvtier's HBM arena. */
int kvt_create(kvt_engine *e, kvt_key key, void **dev_ptr);          /* new page in HBM, pinned */
int kvt_acquire(kvt_engine *e, const kvt_key *keys, size_t n, void **dev_ptrs);   /* blocks until resident, pins */
int kvt_acquire_async(kvt_engine *e, const kvt_key *keys, size_t n, void **dev_ptrs, kvt_ticket *t);
int kvt_wait(kvt_engine *e, kvt_ticket t);                            /* host waits */
int kvt_wait_stream(kvt_engine *e, kvt_ticket t, void *cuda_stream);  /* GPU stream waits, host does not */
int kvt_release(kvt_engine *e, const kvt_key *keys, size_t n, int dirty);
int kvt_drop(kvt_engine *e, const kvt_key *keys, size_t n);           /* gone from every tier */
int kvt_drop_id(kvt_engine *e, uint64_t id);                          /* a finished sequence */

/* Engine-owned buffers (HiCache/LMCache-style storage): copy in and out. */
int kvt_put(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src, int src_on_device);
int kvt_get(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst, int dst_on_device, int *found);
int kvt_exists(kvt_engine *e, const kvt_key *keys, size_t n, kvt_tier *where);   /* returns the hit-prefix length */

/* Decode position: what the policy follows. */
typedef struct kvt_schedule {
    const uint64_t *ids; size_t n_ids;   /* sequences of the batch, in compute order */
    uint32_t n_layers;
    int order;                /* KVT_ORDER_LAYER_MAJOR: for layer { for seq }  (FlexGen zig-zag)
                                 KVT_ORDER_SEQ_MAJOR:   for seq { for layer } */
    uint32_t window_pages;    /* sliding-window attention; 0 = full attention */
    uint32_t sink_pages;      /* leading pages always attended (attention sinks) */
} kvt_schedule;
int kvt_set_schedule(kvt_engine *e, const kvt_schedule *s);
int kvt_advance(kvt_engine *e, uint64_t id, uint32_t layer);   /* "now computing (id, layer)" */

typedef struct kvt_stats {          /* counters since open; fields may be added at the end */
    uint64_t resident_pages[3];     /* indexed by kvt_tier */
    uint64_t hits[3], misses[3];    /* acquire/get found the page in tier t / had to look below t */
    uint64_t bytes_up[3];           /* bytes copied into tier t from the tier below (HBM: DRAM->HBM) */
    uint64_t bytes_down[3];         /* bytes written from tier t to the tier below */
    uint64_t stall_ns;              /* time callers spent blocked waiting for pages */
    uint64_t errors_io, errors_corrupt;
} kvt_stats;
int kvt_get_stats(kvt_engine *e, kvt_stats *out);
int kvt_flush(kvt_engine *e);                   /* persisted pages durable on return */
