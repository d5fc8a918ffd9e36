/*
 * remote_bench.h — `kvtier bench remote`'s measurements (lab): the shared
 * tier's store against a raw pipelined hiredis client of the same cluster,
 * value size, clients and batch, in the same process.
 */
#ifndef KVT_LAB_REMOTE_BENCH_H
#define KVT_LAB_REMOTE_BENCH_H

#include <stddef.h>
#include <stdint.h>

struct kvt_rbench_opts {
    const char *url;            /* redis://host:port[,...]: no credentials (auth_file) */
    const char *auth_file;
    size_t value_bytes;         /* the page (kvtier adds its 48-byte header) */
    unsigned clients;           /* threads, each with its own connections */
    unsigned batch;             /* keys per call (raw: per pipelined round) */
    double seconds;             /* per measurement */
    unsigned timeout_ms;
    int fill;                   /* a write that stores each key once, then stops (the
                                   loads then find every key, of this size) */
    uint64_t nonce;             /* keys are kvtbench:<nonce>:...; they expire after 10
                                   minutes (Redis removes them; nothing to clean up) */
};

struct kvt_rbench_result {
    double gbps;                /* page bytes (1e9) per second of wall time */
    double cpu_s_per_gb;        /* this process's CPU seconds per GB moved */
    uint64_t ops;               /* values moved */
    uint64_t failed;            /* values not moved (timeouts, errors, misses) */
    uint64_t bad;               /* values read back wrong (must be 0) */
};

/* write: SET, else GET (of what the same run's write left). raw: hiredis
 * alone (the keys routed by slot to their masters, pipelined per node);
 * else kvtier's store (store/remote_store.c, frames and checks). 0, or a
 * negative error with err saying why. */
int kvt_rbench_run(const struct kvt_rbench_opts *o, int raw, int write,
                   struct kvt_rbench_result *r, char *err, size_t errlen);

#endif /* KVT_LAB_REMOTE_BENCH_H */
