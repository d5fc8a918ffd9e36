/*
 * kvtier.h — the one public header of kvtier.
 *
 * kvtier keeps the KV cache of transformer decoding in three tiers — GPU memory
 * (HBM), pinned host memory (DRAM) and NVMe files (SSD) — and moves fixed-size
 * pages between them ahead of the decode loop.
 *
 * Order of this file: version, error codes, types, growable structs,
 * configuration, the engine, engine-managed pages, engine-owned buffers, decode
 * position, statistics.
 *
 * Conventions (they hold for every function below unless its comment says
 * otherwise):
 *  - Action functions return int: 0 on success, a negative errno from the OS
 *    unchanged (-ENOMEM, -EINVAL, -EBUSY, -EEXIST, ...), or a library error from
 *    the reserved block KVT_E* (far below errno values). kvt_strerror() names
 *    both. No function sets errno.
 *  - A failed call changes nothing that the caller can observe, except where the
 *    comment says what it leaves behind.
 *  - kvt_last_error() gives a longer, thread-local text for the last failure on
 *    the calling thread (for example which config field is wrong).
 *  - Pointers passed in are borrowed for the duration of the call only.
 *  - Threads: a kvt_engine may be used by any number of threads at once, except
 *    kvt_close(), which must be the last call and must not race with others.
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 1
#define KVT_VERSION_PATCH 0
#define KVT_VERSION_NUMBER (KVT_VERSION_MAJOR * 10000 + KVT_VERSION_MINOR * 100 + KVT_VERSION_PATCH)
#define KVT_QUOTE(x) #x
#define KVT_EXPAND_AND_QUOTE(x) KVT_QUOTE(x)
#define KVT_VERSION_STRING                                                    \
    KVT_EXPAND_AND_QUOTE(KVT_VERSION_MAJOR) "." KVT_EXPAND_AND_QUOTE(KVT_VERSION_MINOR) "." \
    KVT_EXPAND_AND_QUOTE(KVT_VERSION_PATCH)

/* The version of the library linked at run time (KVT_VERSION_NUMBER form). */
unsigned kvt_version_number(void);
/* The library's KVT_VERSION_STRING ("major.minor.patch"); a static string,
 * valid forever. */
const char *kvt_version_string(void);

/* ----------------------------------------------------------------- errors */

/* Library errors live in their own block, far below any errno value (errno
 * values are small positive numbers; the OS ones come back negated). */
#define KVT_EBASE        (-30500)
#define KVT_ECORRUPT     (-30500)  /* stored data failed its checksum: treated as missing */
#define KVT_EFINGERPRINT (-30501)  /* stored under another model/dtype/layout fingerprint */
#define KVT_ENOTFOUND    (-30502)  /* no page with this key in any tier */
#define KVT_EFULL        (-30503)  /* no tier can hold the page (pinned pages fill HBM, ...) */
#define KVT_EDEVICE      (-30504)  /* the device failed; the engine is in the failed state */
#define KVT_ECONFIG      (-30505)  /* a configuration field is invalid: kvt_last_error() names it */
#define KVT_ENOTSUP      (-30506)  /* not built into this library (yet) or not on this back-end */
#define KVT_EFAILED      (-30507)  /* the engine is in the failed state after an earlier error */
#define KVT_ELAST        (-30507)

/* A text for any return value of this library (0, -errno or KVT_E*). Static
 * storage, valid forever, thread-safe. */
const char *kvt_strerror(int err);

/* The detailed text of the last failed call made by this thread (empty string
 * when there is none). Thread-local storage: valid until this thread's next
 * kvtier call. */
const char *kvt_last_error(void);

/* ------------------------------------------------------------------ types */

/* An engine. Thread-safe: see the conventions above. */
typedef struct kvt_engine kvt_engine;

/* A handle for an asynchronous acquire; 0 is never a valid ticket. */
typedef uint64_t kvt_ticket;

/* The identity of one page: sequence id or prefix hash, layer, page number. */
typedef struct kvt_key {
    uint64_t id;
    uint32_t layer;   /* a layer, or KVT_ALL_LAYERS for page-first layouts */
    uint32_t index;   /* page number within the sequence */
} kvt_key;

#define KVT_ALL_LAYERS UINT32_MAX

typedef enum {
    KVT_TIER_NONE = -1,
    KVT_TIER_HBM = 0,
    KVT_TIER_DRAM = 1,
    KVT_TIER_SSD = 2,
    KVT_TIER_REMOTE = 3   /* only kvt_exists says it: the shared tier (kvt_config.remote_url) */
} kvt_tier;

#define KVT_TIERS 3     /* the local tiers, the length of kvt_stats' per-tier arrays */

/* ------------------------------------------------------- growable structs */

/* kvt_config and kvt_stats grow at the end, and only there. Each published
 * layout's size is kept as KVT_CONFIG_SIZE_VER<n> / KVT_STATS_SIZE_VER<n>
 * (VER0 is the layout of the first published API: docs/api.md). A field
 * added after VER0 means "the default" when it is 0, and it extends the
 * size: one placed in an older layout's tail padding would be ignored, not
 * refused, by that library.
 *
 * Every call that reads or writes one of them takes the size the caller was
 * compiled with: the *_sized functions. The names of the first API
 * (kvt_config_init, kvt_config_check, kvt_open, kvt_get_stats) are inline
 * wrappers that pass sizeof from this header, so a program compiled against
 * any version of it tells the library its own size. The library then
 *  - reads and writes the first min(size, its own size) bytes only: an older,
 *    smaller struct is never written past, and its missing fields keep their
 *    defaults;
 *  - zeroes a newer caller's bytes beyond its own size when it writes (a
 *    field it does not know reads as 0, the default), and refuses a config
 *    whose bytes beyond its own size are not all 0 with KVT_ECONFIG (the
 *    caller set a field this library does not know);
 *  - refuses a size below VER0 or above KVT_STRUCT_SIZE_MAX with -EINVAL.
 *
 * kvt_config_init, kvt_open and kvt_get_stats are also exported as plain
 * symbols for binaries and bindings built against a header without sizes.
 * Those read and write the VER0 part only, the one layout every version
 * shares, so they never write past any caller's struct: later config fields
 * keep their defaults, later counters are not written. Define
 * KVT_VER0_SYMBOLS before including this header to declare them instead of
 * the inline wrappers. */
#define KVT_STRUCT_SIZE_MAX 4096

/* ------------------------------------------------------------ configuration */

#define KVT_DEVICE_HOST (-1)   /* emulated HBM in host memory, asynchronous copy threads */
#define KVT_DEVICE_AUTO (-2)   /* CUDA device 0 when one is usable, else host */

#define KVT_CODEC_NONE 0
#define KVT_CODEC_ZSTD 1
#define KVT_CODEC_ZSTD_SHUFFLE16 2
/* Lossy codecs (docs/codecs.md): pages are quantised on their way to SSD
 * and read back dequantised into DRAM; HBM and DRAM keep full precision.
 * They need the page layout below (kv_dtype set), and keep the layers it
 * names in full precision. */
#define KVT_CODEC_FP8 3        /* e4m3, one scale per K/V head per page */
#define KVT_CODEC_INT8 4       /* asymmetric 8-bit: K per channel, V per token in groups of 128 */
#define KVT_CODEC_INT4 5       /* asymmetric 4-bit: K per channel, V per token in groups of 64 */

/* Element types of the page layout (kvt_config.kv_dtype; 0: no layout). */
#define KVT_DTYPE_BF16 1
#define KVT_DTYPE_FP16 2

/* Where K and V lie in a page of one layer (kvt_config.kv_order). A page
 * whose key.layer is KVT_ALL_LAYERS holds n_layers such blocks, layer 0
 * first; bytes of a page beyond its blocks are kept as they are. */
#define KVT_KV_HEAD_MAJOR 0    /* K[kv_heads][tokens][head_dim], then V[kv_heads][tokens][v_head_dim]
                                  (transformers' [heads, seq, dim]; kvtier run's pages) */
#define KVT_KV_TOKEN_MAJOR 1   /* K[tokens][kv_heads][head_dim], then V[tokens][kv_heads][v_head_dim] */
#define KVT_KV_INTERLEAVED 2   /* per token: K[kv_heads][head_dim], then V[kv_heads][v_head_dim] */
#define KVT_KV_MLA 3           /* per token: latent[head_dim] then RoPE key[rope_dim]; no V */
#define KVT_KV_SPLIT_LAYERS 4  /* a page of one layer: as KVT_KV_TOKEN_MAJOR; a page of every
                                  layer: the K of all layers (each [tokens][kv_heads][head_dim]),
                                  then the V of all layers (LMCache's KV_2LTD chunk) */
#define KVT_KV_SINGLE 5        /* K or V alone: [tokens][kv_heads][head_dim], quantised per channel
                                  as K (stores that keep K and V apart: SGLang's host pool) */

#define KVT_IO_AUTO 0          /* io_uring, else the pread/pwrite thread pool */
#define KVT_IO_URING 1
#define KVT_IO_PSYNC 2

/* One batch of transfers between two tiers that has completed, reported to
 * kvt_config.on_transfer (tracing, monitoring). Times are CLOCK_MONOTONIC
 * nanoseconds: start_ns when the batch was queued, end_ns when kvtier saw it
 * complete (so a span includes time spent queued behind earlier batches). */
#define KVT_XFER_DRAM_TO_HBM 0
#define KVT_XFER_HBM_TO_DRAM 1
#define KVT_XFER_SSD_TO_DRAM 2
#define KVT_XFER_DRAM_TO_SSD 3

typedef struct kvt_transfer_event {
    int kind;                   /* KVT_XFER_* */
    uint32_t pages;
    uint64_t bytes;             /* page bytes moved (SSD: before the codec) */
    uint64_t start_ns, end_ns;
} kvt_transfer_event;

/* Called from kvtier's own threads (and from API calls that find transfers
 * complete) with the engine's lock held: it must be quick, thread-safe, and
 * must not call into kvtier. ev is valid during the call only. */
typedef void (*kvt_transfer_fn)(void *arg, const kvt_transfer_event *ev);

typedef struct kvt_config {
    size_t page_bytes;          /* bytes per page; a multiple of 4096 */
    size_t hbm_bytes;           /* capacity of the HBM tier; at least one page */
    size_t dram_bytes;          /* capacity of the pinned DRAM tier; at least one page */
    size_t ssd_bytes;           /* capacity of the SSD tier; 0 = no SSD tier */
    const char *ssd_dir;        /* spill segments and the LMDB index live here (copied at open) */
    int device;                 /* CUDA ordinal, KVT_DEVICE_HOST or KVT_DEVICE_AUTO */
    const char *policy;         /* "decode" (default), "prefix", "lru" or "arc" (copied at
                                   open); see kvt_open */
    int codec;                  /* KVT_CODEC_* for pages stored on SSD */
    int persist;                /* keep SSD pages across close/open (else wiped at open);
                                   the capacity is then what the SSD holds, so that every
                                   page held can be made durable */
    uint64_t fingerprint;       /* model/dtype/layout identity; another one never matches */
    int io_backend;             /* KVT_IO_* */
    unsigned queue_depth;       /* I/O requests in flight */
    double host_link_gbps;      /* host back-end: cap each emulated link at this many GB/s
                                   (1e9 bytes/s); 0 = uncapped, unless KVT_HOST_LINK_GBPS is set */
    size_t prefetch_bytes;      /* decode policy: bytes brought up ahead of use at most, per
                                   link; 0 = 1/8 of HBM (DRAM->HBM), 1/4 of DRAM (SSD->DRAM) */
    kvt_transfer_fn on_transfer; /* NULL = no reports; see kvt_transfer_event */
    void *on_transfer_arg;      /* passed to on_transfer (borrowed until kvt_close) */
    uint64_t flags;             /* KVT_FLAG_* (0 = none) */
    /* The shared tier (docs/remote.md): a Redis Cluster, or one Redis, that
     * many engines use. What the local tiers hold is a cache of it. */
    const char *remote_url;     /* NULL = none; "redis://[user[:password]@]host:port[,host:port]..."
                                   (seeds the cluster's map is learned from; copied at open,
                                   never printed) */
    const char *remote_prefix;  /* every key starts "<prefix>:<fingerprint>:"; NULL = "kvtier" */
    const char *remote_auth_file; /* NULL, or a file holding "password" or "user password"
                                   (overrides the URL's; read at open) */
    unsigned remote_timeout_ms; /* the most one call to the cluster may take; 0 = 200 */
    int remote_publish;         /* KVT_PUBLISH_*: when pages go to the shared tier */
    unsigned remote_ttl_s;      /* values expire after this long; 0 = never (Redis evicts) */
    size_t remote_queue_bytes;  /* pages waiting to be published at most; 0 = 64 MiB (a page
                                   that finds the queue full is not published, counted) */
    /* The page layout (VER4), which the lossy codecs need; kv_dtype 0 = not
     * given. The layer of a page is its key.layer (see kv_order). */
    int kv_dtype;               /* KVT_DTYPE_* of the K/V elements; 0 = no layout */
    int kv_order;               /* KVT_KV_*: where K and V lie in a page */
    uint32_t page_tokens;       /* tokens per page */
    uint32_t kv_heads;          /* K/V heads (KVT_KV_MLA: 0 or 1) */
    uint32_t head_dim;          /* K head dimension (KVT_KV_MLA: the latent width) */
    uint32_t v_head_dim;        /* V head dimension; 0 = head_dim */
    uint32_t rope_dim;          /* KVT_KV_MLA: the RoPE key width; else 0 */
    uint32_t n_layers;          /* layers of the model; 0 = unknown (then no full_* layers) */
    uint32_t full_first_layers; /* this many first layers are stored in full precision */
    uint32_t full_last_layers;  /* and this many last ones */
} kvt_config;

/* kvt_config.remote_publish. Publishing never blocks the caller: pages are
 * copied into the queue and sent by kvtier's own thread. */
#define KVT_PUBLISH_PUT 0       /* on kvt_put (write-through: others can use a page at once) */
#define KVT_PUBLISH_EVICT 1     /* when the cache drops a page (KVT_FLAG_EVICT) that is in DRAM */
#define KVT_PUBLISH_EXPLICIT 2  /* only the pages kvt_publish names */

/* The engine is a cache (a prefix cache's store, as LMCache, SGLang HiCache
 * or vLLM's offloading tiers use one): when HBM, DRAM and SSD are all full,
 * kvt_put drops whole pages, the policy's victims, to make room, instead of
 * answering KVT_EFULL. Only pages nobody holds (unpinned, not being read or
 * copied) are dropped; kvt_stats.evicted_pages counts them. With this flag
 * the default policy, "decode", runs as "prefix" (a cache has no decode
 * loop to plan by); name another to choose it. */
#define KVT_FLAG_EVICT 1u

/* The published layouts of kvt_config: VER0 ends with queue_depth
 * (the first published API, docs/api.md), VER1 with on_transfer_arg
 * (kvtier 0.1), VER2 with flags, VER3 with remote_queue_bytes, VER4 with
 * full_last_layers. */
#define KVT_CONFIG_SIZE_VER0 offsetof(kvt_config, host_link_gbps)
#define KVT_CONFIG_SIZE_VER1 (offsetof(kvt_config, on_transfer_arg) + sizeof(void *))
#define KVT_CONFIG_SIZE_VER2 (offsetof(kvt_config, flags) + sizeof(uint64_t))
#define KVT_CONFIG_SIZE_VER3 (offsetof(kvt_config, remote_queue_bytes) + sizeof(size_t))
#define KVT_CONFIG_SIZE_VER4 (offsetof(kvt_config, full_last_layers) + sizeof(uint32_t))

/* Fills the first cfg_size bytes of *cfg with defaults: 256 KiB pages, 1 GiB
 * HBM, 4 GiB DRAM, no SSD, device AUTO, policy "decode", no codec, no
 * persistence, fingerprint 0, io AUTO, queue depth 32, every later field 0
 * (uncapped host link, default prefetch, no transfer reports). Bytes beyond
 * this library's kvt_config are zeroed. Errors: -EINVAL (cfg NULL, or
 * cfg_size below KVT_CONFIG_SIZE_VER0 or above KVT_STRUCT_SIZE_MAX); on error
 * nothing is written. */
int kvt_config_init_sized(kvt_config *cfg, size_t cfg_size);

/* Checks a configuration as kvt_open() does, without opening anything, so
 * that a command can refuse its options before it creates a file. cfg is read
 * during the call only. Errors: those of kvt_open() that concern the
 * configuration (KVT_ECONFIG, KVT_ENOTSUP, -EINVAL for a size out of range);
 * kvt_last_error() names the field. */
int kvt_config_check_sized(const kvt_config *cfg, size_t cfg_size);

#ifndef KVT_VER0_SYMBOLS
/* kvt_config_init_sized for this header's kvt_config. Never fails. */
static inline void kvt_config_init(kvt_config *cfg)
{
    (void)kvt_config_init_sized(cfg, sizeof(*cfg));
}

/* kvt_config_check_sized for this header's kvt_config. */
static inline int kvt_config_check(const kvt_config *cfg)
{
    return kvt_config_check_sized(cfg, sizeof(*cfg));
}
#else
void kvt_config_init(kvt_config *cfg);   /* writes the VER0 part only */
#endif

/* ----------------------------------------------------------------- engine */

/* Opens an engine: allocates the HBM and DRAM arenas and starts the mover.
 * cfg (cfg_size bytes, as for kvt_config_init_sized) is read during the call
 * only (strings are copied).
 * On success *out owns the engine until kvt_close(). On failure *out is NULL,
 * nothing is allocated, and the return is:
 *   KVT_ECONFIG  a field is invalid (kvt_last_error() names it), or one
 *                beyond this library's kvt_config is set,
 *   KVT_ENOTSUP  a requested part is not built (a policy, CUDA, io_uring),
 *   -EBUSY       ssd_dir is in use by another engine,
 *   KVT_EDEVICE  the requested device cannot be used,
 *   -ENOMEM      an arena could not be allocated,
 *   -EINVAL      out or cfg is NULL, or cfg_size is out of range. */
int kvt_open_sized(const kvt_config *cfg, size_t cfg_size, kvt_engine **out);

#ifndef KVT_VER0_SYMBOLS
/* kvt_open_sized for this header's kvt_config. */
static inline int kvt_open(const kvt_config *cfg, kvt_engine **out)
{
    return kvt_open_sized(cfg, sizeof(*cfg), out);
}
#else
int kvt_open(const kvt_config *cfg, kvt_engine **out);   /* reads the VER0 part only */
#endif

/* Waits for transfers in flight, flushes what must be flushed, frees
 * everything. Device pointers handed out become invalid. NULL is a no-op.
 * Must not race with any other call on the same engine. */
void kvt_close(kvt_engine *e);

/* --------------------------------------------- engine-managed pages (HBM) */

/* Creates a new page in HBM, pinned, and returns its device address in
 * *dev_ptr (valid while the page stays pinned, page_bytes long, contents
 * undefined until the caller writes them). The page is dirty: it has no copy
 * below HBM until written back. Release it with dirty=1 after writing.
 * Errors: -EEXIST (the key exists), KVT_EFULL (HBM is full of pinned pages),
 * KVT_EDEVICE/KVT_EFAILED. On error nothing is created. */
int kvt_create(kvt_engine *e, kvt_key key, void **dev_ptr);

/* Makes the n pages resident in HBM, pins them and writes their device
 * addresses to dev_ptrs[0..n-1] (valid while pinned). Blocks until all n are
 * resident. Keys may repeat (each occurrence is one pin).
 * Errors: KVT_ENOTFOUND (a key is in no tier), KVT_EFULL (the pages do not fit
 * beside the pages pinned now), KVT_ECORRUPT (a stored copy failed its
 * checksum), -EIO, KVT_EDEVICE; the SSD's own error as it happened when a page
 * could not be read from or written to its file for a reason that is not the
 * data's (-EACCES, -ENOSPC, ...: the stored copy is kept, a later call tries
 * again). On error no page is pinned by this call. */
int kvt_acquire(kvt_engine *e, const kvt_key *keys, size_t n, void **dev_ptrs);

/* Like kvt_acquire(), but returns once the copies are queued: dev_ptrs are
 * filled at once, their contents are valid only after kvt_wait() or
 * kvt_wait_stream() on *t returns 0. The pins are held from this call on.
 * Every ticket must be waited for exactly once (with kvt_wait or
 * kvt_wait_stream), from any thread. */
int kvt_acquire_async(kvt_engine *e, const kvt_key *keys, size_t n, void **dev_ptrs,
                      kvt_ticket *t);

/* Blocks the calling thread until the ticket's pages are resident. Returns 0,
 * or the transfer's error; on error the ticket's pins have been dropped (as if
 * never acquired). -EINVAL for an unknown or already waited ticket. */
int kvt_wait(kvt_engine *e, kvt_ticket t);

/* Makes the CUDA stream (a cudaStream_t, NULL = legacy default stream) wait
 * for the ticket's copies without blocking the host. On the host back-end
 * there is no stream: the calling thread waits, as kvt_wait(). The ticket is
 * consumed either way; errors surface here when they are already known, else
 * on the engine's next call (the engine enters the failed state). */
int kvt_wait_stream(kvt_engine *e, kvt_ticket t, void *cuda_stream);

/* Unpins n pages acquired or created before. dirty=1 says the caller wrote
 * them: lower copies become stale and are freed; the page is written back
 * before it leaves HBM. Errors: -EINVAL (a key is not pinned; nothing is
 * released), KVT_ENOTFOUND. */
int kvt_release(kvt_engine *e, const kvt_key *keys, size_t n, int dirty);

/* Removes n pages from every tier. Keys that do not exist are ignored. A
 * page being read up from SSD ahead of use is dropped once that read ends
 * (the call waits for it). Errors: -EBUSY (a page is pinned or being read
 * by another call; nothing is dropped). */
int kvt_drop(kvt_engine *e, const kvt_key *keys, size_t n);

/* Removes every page whose key.id is id (a finished sequence). O(pages held).
 * Waits for reads ahead as kvt_drop does. Errors: -EBUSY (one of them is
 * pinned or being read by another call; nothing is dropped). */
int kvt_drop_id(kvt_engine *e, uint64_t id);

/* ------------------------------ engine-owned buffers (storage back-ends) */

/* Copies n pages of page_bytes each from src[i] into kvtier (placed in DRAM,
 * or wherever room can be made). src_on_device=1 says src[i] are device
 * pointers. An existing key is overwritten. src buffers are read during the
 * call only. Capacity is counted in pages: HBM pages + DRAM pages (+ SSD).
 * Pages go in batches of half the DRAM tier (each batch holds DRAM slots
 * until it is committed, then moves down to SSD as the next needs room), so
 * one call may store more pages than HBM and DRAM hold. Each batch is all or
 * nothing; on an error the batches before the failing one stay stored
 * (kvt_exists says which), and with n up to half of DRAM that means none.
 * Concurrent calls are waited for, up to 10 s of waiting in all: a key's
 * page that a kvt_get is reading (the get keeps the old version), and HBM
 * and DRAM slots all held by such calls (pages they read or store).
 * Errors: KVT_EFULL (no tier can hold them, or kvt_acquire pins every slot),
 * -EBUSY (an existing page with that key is pinned, or still being read
 * after the wait: retry; every key is checked before anything is stored,
 * and a batch that meets one later stores none of its pages). When the
 * engine is full, an overwrite may free the old page first: if the call
 * then fails, that key is absent (never half-written). */
int kvt_put(kvt_engine *e, const kvt_key *keys, size_t n, const void *const *src,
            int src_on_device);

/* Copies the n pages into dst[i] (page_bytes each; device pointers when
 * dst_on_device=1). found[i] is set to 1 if page i was copied, 0 if it is in
 * no tier (dst[i] untouched). A miss is not an error. found may be NULL.
 * A page only on SSD is read straight into a host dst[i] aligned to 4096
 * bytes (no staging copy; it is not brought into DRAM): if its checksum then
 * fails, found[i] is 0 and dst[i] holds what was read.
 * Errors: KVT_ECORRUPT only when found is NULL and a stored copy is damaged
 * (with found, a damaged page reads as a miss), -EIO, KVT_EDEVICE, or the
 * SSD file's own error (-EACCES, ...: the copy there is kept). On error
 * every found[i] is 0 (some dst[i] may have been written).
 * With a shared tier, pages no local tier holds are loaded from it (checked
 * against their key and the fingerprint; anything else is a miss, counted)
 * and kept in DRAM as kvt_put would keep them; a host dst[i] is read into
 * in place, so one whose check fails has found[i] 0 and holds what was
 * read. A part of the cluster that is down or slow is a miss after
 * remote_timeout_ms, never an error. */
int kvt_get(kvt_engine *e, const kvt_key *keys, size_t n, void *const *dst,
            int dst_on_device, int *found);

/* For each key, where[i] is the fastest tier holding a valid copy or
 * KVT_TIER_NONE (where may be NULL). Returns the length of the hit prefix: the
 * number of leading keys that exist (>= 0), or a negative error.
 * With a shared tier, keys no local tier holds are asked of it in one round
 * (where[i] = KVT_TIER_REMOTE); a part of it that does not answer within
 * remote_timeout_ms counts as not holding them. */
int kvt_exists(kvt_engine *e, const kvt_key *keys, size_t n, kvt_tier *where);

/* Queues the n pages, read from the local tiers now, to be published to the
 * shared tier (any kvt_config.remote_publish; the way to publish with
 * KVT_PUBLISH_EXPLICIT). Returns the number queued: a page in no local tier,
 * or one that finds the queue full, is skipped (the latter counted in
 * remote_unpublished). KVT_ENOTSUP without a shared tier. kvt_flush waits
 * for what is queued to be sent. */
int kvt_publish(kvt_engine *e, const kvt_key *keys, size_t n);

/* --------------------------------------------------------- decode position */

#define KVT_ORDER_LAYER_MAJOR 0  /* for layer { for seq }  (FlexGen zig-zag) */
#define KVT_ORDER_SEQ_MAJOR 1    /* for seq { for layer } */

typedef struct kvt_schedule {
    const uint64_t *ids;       /* sequences of the batch, in compute order (copied) */
    size_t n_ids;
    uint32_t n_layers;
    int order;                 /* KVT_ORDER_* */
    uint32_t window_pages;     /* sliding-window attention; 0 = full attention */
    uint32_t sink_pages;       /* leading pages always attended (attention sinks) */
} kvt_schedule;

/* Tells the policy the loop the engine runs. s is copied. The "decode"
 * policy evicts the page used furthest ahead and prefetches the nearest ones
 * (on the mover, while the caller computes); "lru" ignores it.
 * Errors: -EINVAL (n_ids or n_layers is 0, ids
 * NULL, unknown order, n_ids x n_layers above 2^30). */
int kvt_set_schedule(kvt_engine *e, const kvt_schedule *s);

/* "Now computing (id, layer)": call it before acquiring that layer's pages.
 * Cheap (wakes the mover to prefetch what comes next). */
int kvt_advance(kvt_engine *e, uint64_t id, uint32_t layer);

/* -------------------------------------------------------------- statistics */

typedef struct kvt_stats {               /* counters since open; grows at the end (see above) */
    uint64_t resident_pages[KVT_TIERS];  /* valid copies held, indexed by kvt_tier */
    uint64_t hits[KVT_TIERS];            /* acquire/get found the page in tier t */
    uint64_t misses[KVT_TIERS];          /* acquire/get had to look below tier t */
    uint64_t bytes_up[KVT_TIERS];        /* bytes copied into tier t from the tier below
                                            (HBM: DRAM->HBM) */
    uint64_t bytes_down[KVT_TIERS];      /* bytes written from tier t to the tier below */
    uint64_t stall_ns;                   /* time callers spent blocked waiting for pages */
    uint64_t errors_io, errors_corrupt;
    uint64_t capacity_pages[KVT_TIERS];  /* configured pages per tier (DRAM keeps one spare
                                            slot beyond this for swaps, so resident_pages[1]
                                            may exceed it by one while a swap runs) */
    uint64_t pinned_pages;               /* pages pinned now */
    uint64_t pages;                      /* distinct keys held */
    uint64_t meta_bytes;                 /* host bytes of page metadata (tables, records,
                                            policy) */
    uint64_t errors_device;              /* device copies that failed */
    uint64_t bytes_put, bytes_get;       /* bytes copied in by kvt_put / out by kvt_get */
    uint64_t ssd_bad_slots;              /* SSD slots retired after I/O errors */
    uint64_t io_fallback;                /* 1: io_uring was unavailable, the pread/pwrite
                                            pool runs */
    uint64_t prefetch_pages;             /* pages brought into HBM ahead of use */
    uint64_t prefetch_wasted;            /* of those, evicted before any acquire used them */
    uint64_t prefetch_inflight_max;      /* most DRAM->HBM pages in flight when a prefetch
                                            was queued (a prefetch never takes this past
                                            prefetch_bytes / page_bytes) */
    uint64_t evicted_pages;              /* pages dropped to make room (KVT_FLAG_EVICT) */
    /* The shared tier (all 0 without one). */
    uint64_t remote_hits;                /* pages kvt_get loaded from it */
    uint64_t remote_misses;              /* pages kvt_get asked it for and did not get */
    uint64_t remote_lost;                /* of those, pages kvt_exists had said it held
                                            (evicted or expired there in between) */
    uint64_t remote_bytes_in, remote_bytes_out; /* value bytes read from it / written to it */
    uint64_t remote_published;           /* pages it stored for this engine */
    uint64_t remote_unpublished;         /* pages not published: queue full, or the store
                                            refused or timed out */
    uint64_t remote_corrupt;             /* values that failed their check: read as misses */
    uint64_t remote_timeouts;            /* pages that ran out of time (read as misses) */
    uint64_t remote_redirects;           /* MOVED/ASK answers followed */
    uint64_t remote_errors;              /* pages failed otherwise (a node down, a protocol error) */
    uint64_t remote_nodes, remote_nodes_down; /* masters in the map now, of them unreachable */
} kvt_stats;

/* The published layouts of kvt_stats: VER0 ends with errors_corrupt
 * (the first published API, docs/api.md), VER1 with prefetch_inflight_max
 * (kvtier 0.1), VER2 with evicted_pages. */
#define KVT_STATS_SIZE_VER0 offsetof(kvt_stats, capacity_pages)
#define KVT_STATS_SIZE_VER1 (offsetof(kvt_stats, prefetch_inflight_max) + sizeof(uint64_t))
#define KVT_STATS_SIZE_VER2 (offsetof(kvt_stats, evicted_pages) + sizeof(uint64_t))
#define KVT_STATS_SIZE_VER3 (offsetof(kvt_stats, remote_nodes_down) + sizeof(uint64_t))

/* Writes a consistent snapshot to the first out_size bytes of *out (bytes
 * beyond this library's kvt_stats are zeroed). Never fails on a valid engine,
 * even in the failed state. Errors: -EINVAL (e or out NULL, or out_size below
 * KVT_STATS_SIZE_VER0 or above KVT_STRUCT_SIZE_MAX; nothing is written). */
int kvt_get_stats_sized(kvt_engine *e, kvt_stats *out, size_t out_size);

#ifndef KVT_VER0_SYMBOLS
/* kvt_get_stats_sized for this header's kvt_stats. */
static inline int kvt_get_stats(kvt_engine *e, kvt_stats *out)
{
    return kvt_get_stats_sized(e, out, sizeof(*out));
}
#else
int kvt_get_stats(kvt_engine *e, kvt_stats *out);   /* writes the VER0 part only */
#endif

/* Writes every dirty page down one tier and waits: on return every page has a
 * copy below HBM (and, with an SSD tier and persist, every page held when the
 * call began is durable). A full cache (KVT_FLAG_EVICT) drops the policy's
 * victims for room, as kvt_put does. A page kvt_create made is written only
 * after its release; a page a caller has acquired and is writing is written
 * as its bytes are at that moment: release what you wrote, then flush.
 * Errors: KVT_EFULL (without persist: no room below for a dirty page; the
 * rest are written), -ENOSPC (the disk is full: kvt_last_error() says how
 * many pages are not durable), KVT_EDEVICE, -EIO. */
int kvt_flush(kvt_engine *e);

/* The page size this engine was opened with. */
size_t kvt_page_bytes(const kvt_engine *e);

/* The device back-end in use: "host" or "cuda". Static string. */
const char *kvt_device_name(const kvt_engine *e);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_H */
