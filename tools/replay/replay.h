/*
 * replay.h — `kvtier replay TRACE`: a prefix-cache request trace (Mooncake's
 * JSONL, tools/prefix/trace.h) driven through a real engine, as an inference
 * engine's prefix cache drives its KV store: per request kvt_exists on the
 * block chain (the hit prefix), kvt_get of the hit blocks, kvt_put of the
 * new ones. Every block's bytes are a function of its key, so every byte
 * read back is checked.
 *
 * Files: options.c (arguments, --help, the command), size.c (capacities
 * into an engine configuration), block.c (a block's key and bytes), raw.c
 * (the disk measured raw in the same run), loop.c (the requests), evict.c
 * (the caller's eviction when the engine refuses a put), report.c (text and
 * JSON), trace_out.c (--trace).
 */
#ifndef KVT_REPLAY_H
#define KVT_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/kvtier.h"
#include "tools/presets.h"

/* A capacity given on the command line: a fraction of the trace's distinct
 * blocks, or bytes. */
enum { CAP_UNSET = 0, CAP_FRACTION, CAP_BYTES };
struct replay_cap {
    int kind;
    double frac;
    uint64_t bytes;
};

/* The scaled-down block: 1/512 of llama3-8b's 64 MiB. The default replay
 * (3,993 requests, 11 GiB put, as much written to SSD) then ends within
 * minutes on two busy cores (docs/replay.md has the times). */
#define REPLAY_DEFAULT_BLOCK (128u << 10)
#define REPLAY_DEFAULT_CAPACITY 0.1
#define REPLAY_MAX_CONCURRENCY 64u
#define REPLAY_DEFAULT_PREFILL 10000.0    /* tokens/s: an assumption, stated in --help */
/* --prefill-tokens-per-s at least: a request's recompute time (up to 2^32
 * tokens / this) must fit the float the percentiles are kept in, and did
 * not at 1e-36 (the JSON said inf). */
#define REPLAY_MIN_PREFILL 1.0
/* --speed: 1000 times slower than the trace at most (slower, a trace of
 * minutes would take weeks: a mistyped value, not a plan), 1e9 times faster
 * at most (beyond, nothing is paced anyway). */
#define REPLAY_MIN_SPEED 1e-3
#define REPLAY_MAX_SPEED 1e9

struct replay_opts {
    const char *trace_path;
    const struct kvt_shape *model;   /* what a block stands for (default llama3-8b) */
    uint64_t block_bytes;            /* bytes per block in the engine */
    bool block_given;                /* --block-bytes was given */
    struct replay_cap capacity, dram, ssd;
    const char *ssd_dir;             /* NULL: a temporary one, removed at the end */
    bool overwrite_ssd_dir;          /* ssd_dir may hold persisted pages: wiped */
    const char *policy;              /* NULL: the engine's default */
    const char *trace_out;           /* --trace FILE, or NULL */
    double speed;                    /* 0: as fast as possible; else trace time / speed,
                                        REPLAY_MIN_SPEED .. REPLAY_MAX_SPEED */
    double prefill_tps;              /* tokens/s of the modeled recompute */
    uint64_t requests;               /* replay the first N requests; 0 = all */
    unsigned concurrency;            /* requests served at once, a thread each */
    int progress;                    /* -1: on a tty; 0 off; 1 on */
    bool json;
    /* --instances (fleet.c): N engines, each its own local tiers, and with
     * --remote a cluster they share */
    unsigned instances;              /* 0: the single-engine replay above */
    const char *remote_url;          /* no password in it: remote_auth_file */
    const char *remote_prefix;
    const char *remote_auth_file;
    unsigned remote_timeout_ms;
    int publish;                     /* REPLAY_PUBLISH_* */
};

enum { REPLAY_PUBLISH_PUT = 0, REPLAY_PUBLISH_EVICT, REPLAY_PUBLISH_REUSE };
#define REPLAY_MAX_INSTANCES 64u
/* A fleet's block: the trace's 43,924 distinct blocks at 32 KiB are 1.4 GB
 * in the cluster (its replicas as much again), which a test cluster on one
 * machine holds. */
#define REPLAY_FLEET_BLOCK (32u << 10)

/* Per tier that served hits (kvt_exists's where): HBM, DRAM, SSD. */
struct replay_result {
    /* the configuration the capacities produced */
    uint64_t distinct, capacity_blocks, slots[KVT_TIERS];
    uint64_t model_block_bytes;      /* a block of the model: 512 tokens' KV */
    double scale;                    /* model_block_bytes / block_bytes */
    char policy[32];
    bool policy_default;
    /* the trace */
    uint64_t requests, refs, in_tokens, depth_conflicts;
    /* hits */
    uint64_t hit_blocks, hit_tokens, hits_by_tier[KVT_TIERS], lost_hits;
    /* bytes and verification */
    uint64_t bytes_verified, bad_blocks;
    uint64_t bad_id;
    uint32_t bad_index;
    size_t bad_offset;
    bool verified;
    /* time */
    /* exists_s, put_s, get_s (calls serving that tier): time while at least
     * one such call ran, so that concurrent requests' calls count once */
    double wall_s, exists_s, put_s, get_s[KVT_TIERS];
    uint64_t get_bytes[KVT_TIERS];
    uint64_t get_calls[KVT_TIERS];   /* kvt_get calls serving that tier */
    double cpu_s, client_cpu_s;      /* process CPU; of it, generating and checking bytes */
    uint64_t late_requests;          /* --speed: started behind the trace's time */
    double max_late_s;
    /* engine counters over the replay */
    kvt_stats delta;
    kvt_stats end;
    /* the raw disk, same block size, same run (GB/s; 0 = not measured) */
    double raw_read_gbps, raw_write_gbps, raw_spill_read_gbps;
    /* reads of the engine's segment in batches of raw_batch blocks (the mean
     * SSD-served get), each batch waited for, as a get waits */
    double raw_batched_gbps;
    uint32_t raw_batch;
    /* the SSD-served gets' own reads (where their blocks lay, the same
     * calls), replayed raw after the run: raw_same_blocks of them */
    double raw_same_gbps;
    uint64_t raw_same_blocks;
    /* the caller's evictions: the engine refused a put when full */
    uint64_t client_evicted, client_evict_calls;
    /* the modeled time to first token */
    uint64_t ttft_requests;          /* requests with a hit */
    uint64_t load_won;               /* of those, loading the prefix beat recomputing it */
    double ttft_load_s, ttft_recompute_s; /* sums over every request */
    double load_model_s, recompute_hit_s; /* sums over the requests with a hit */
    double ttft_load_p50, ttft_load_p90, ttft_recompute_p50, ttft_recompute_p90;
    uint64_t rewritten;              /* blocks present past the hit prefix, put again */
    uint64_t unstored;               /* blocks a request could not store: its chain is longer
                                        than the capacity */
};

void replay_opts_default(struct replay_opts *o);

/* Runs the replay. Returns 0 (every byte verified), 1 (a byte read back was
 * wrong: r says where), -EINVAL after a usage message, or another negative
 * error after a message. r is filled as far as the replay got. */
int replay_exec(const struct replay_opts *o, struct replay_result *r);

void replay_report_text(FILE *f, const struct replay_opts *o, const struct replay_result *r);
void replay_report_json(const struct replay_opts *o, const struct replay_result *r);

/* fleet.c: the replay over o->instances engines (and the cluster of
 * o->remote_url): the process's exit code, after its report. */
int replay_fleet(const struct replay_opts *o);

/* The command: parses argv (argv[0] = "replay"), runs, prints. */
int replay_main(int argc, char **argv);

/* ------------------------------------------------------------- block.c */

/* The engine key of a trace block: id the trace's hash id, layer
 * KVT_ALL_LAYERS (a block holds every layer: page-first, as storage
 * back-ends store), index its position in the request's chain (0-based).
 * The one place that says so. */
kvt_key replay_key(uint64_t hash, uint32_t pos);

/* Fills a block of bytes (a multiple of 8) with the content of key k (the
 * page pattern, tools/util/util.h): every 8-byte word a function of the key
 * and its offset, so a block read back under another key, at another
 * offset, or not written, differs. */
void replay_fill(const kvt_key *k, void *p, size_t bytes);

/* Checks every byte of p against the content of k. Returns true when all
 * match; else false and the first wrong byte's offset in *bad_off. */
bool replay_check(const kvt_key *k, const void *p, size_t bytes, size_t *bad_off);

#endif
