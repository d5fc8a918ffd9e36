/*
 * rcluster.h — a small Redis Cluster client (internal): the I/O layer of
 * the remote tier (store/remote*.c sits on it).
 *
 * Over hiredis 0.14 (connect, the RESP reply reader); the cluster routing is
 * ours: key slots by CRC16, the slot map from CLUSTER SLOTS, MOVED and ASK
 * redirects, TRYAGAIN/CLUSTERDOWN retried within the deadline, reconnects
 * with backoff. A single non-cluster Redis works too: it answers CLUSTER
 * SLOTS with "cluster support disabled", and then every slot is its.
 *
 * Threads: a kvt_rcluster is used by one thread at a time (it holds the
 * connections, the map and scratch space); one per thread of use.
 *
 * Deadlines: every batched call ends within opts.timeout_ms of its start,
 * whatever the servers do; a node that does not answer in time has its
 * connection closed (its pipeline can no longer be matched to replies) and
 * is not tried again for a backoff that doubles from 10 ms to 1 s while it
 * keeps failing; meanwhile its keys fail at once with the node's last error.
 *
 * Without hiredis (KVT_HAVE_REDIS 0) kvt_rcluster_open answers KVT_ENOTSUP
 * (io/rcluster_none.c); kvt_rcluster_slot works in every build.
 */
#ifndef KVT_RCLUSTER_H
#define KVT_RCLUSTER_H

#include <stddef.h>
#include <stdint.h>

struct kvt_rcluster;                      /* one per thread of use: not thread-safe */

struct kvt_rcluster_opts {
    const char *url;          /* "redis://[user[:password]@]host:port[,host:port...]" seeds */
    const char *auth_file;    /* NULL, or a file holding "password" or "user password" (one line); overrides the URL's */
    unsigned timeout_ms;      /* the whole deadline of one batched call (default 200 when 0) */
    unsigned connect_timeout_ms; /* per connect (default 100 when 0) */
};

/* Opens: parses the URL, connects to a seed, AUTHs, learns the slot map.
 * Errors (and a message in err naming the cluster's seeds, NEVER the
 * password): -EINVAL bad URL, -EACCES auth required or wrong
 * (NOAUTH/WRONGPASS/ERR invalid password), -ECONNREFUSED / -ETIMEDOUT no
 * seed reachable (-ETIMEDOUT when any timed out; else the last seed's
 * error: -ECONNREFUSED, -EHOSTUNREACH for a name that does not resolve,
 * -EPROTO for a server that does not answer as Redis), -errno of reading
 * auth_file, -ENOMEM. Never hangs past
 * the timeouts: each seed tried costs at most connect_timeout_ms plus two
 * round trips of timeout_ms (AUTH, CLUSTER SLOTS). Ownership: *out is the
 * caller's, freed by kvt_rcluster_close; opts and its strings are copied
 * (the password is wiped from memory at close). On error *out is NULL.
 * err may be NULL (errlen 0). */
int kvt_rcluster_open(const struct kvt_rcluster_opts *o, struct kvt_rcluster **out, char *err, size_t errlen);
/* Closes every connection and frees c (NULL is fine). */
void kvt_rcluster_close(struct kvt_rcluster *c);

struct kvt_rc_item {              /* one key of a batch; filled by the caller, results by the call */
    const void *key; size_t key_len;
    const void *val; size_t val_len;   /* set: the value (two parts allowed: */
    const void *val2; size_t val2_len; /*   val then val2, e.g. a header then the page, no copy by us) */
    void *buf; size_t cap;             /* get: where the value goes (cap bytes at most) */
    size_t len;                        /* get: the value's length (even when > cap) */
    int res;   /* 1 found / stored / exists, 0 missing (or NX not set), -EMSGSIZE value > cap (+ cap2),
                  -ETIMEDOUT, -ECONNREFUSED/-ECONNRESET (node down), -EAGAIN (TRYAGAIN/CLUSTERDOWN past deadline),
                  -EPROTO (unexpected reply type), -ENOMEM */
    void *buf2; size_t cap2;           /* get: where a value's bytes past cap go (cap2 at most):
                                          a header into buf, the page straight into the caller's
                                          page, no copy between them. NULL, 0: none */
    int want_crc2;                     /* get: 1 = compute crc2 while copying to buf2 */
    uint32_t crc2;                     /* get: CRC32C (seed 0) of the bytes copied to buf2, taken
                                          as they are copied (their one read while cache-hot) */
};
/* Batched calls: items are grouped by node, each node's commands are
 * pipelined (all appended, then replies read), all nodes' requests are
 * written before any replies are read, redirects are followed within the
 * same deadline. Returns the number of items with res==1, or a negative
 * error only for misuse (-EINVAL: c or it NULL with n > 0, a NULL pointer
 * with a non-zero length; then no item is touched). A node that is down or
 * slow gives its items a negative res after at most the deadline; never
 * longer. Other res values: -EACCES (the server now wants AUTH: NOAUTH or
 * WRONGPASS), -EIO (any other error reply, e.g. OOM under noeviction).
 * Ownership: keys, values and buffers are the caller's and are only used
 * during the call (values are written from the caller's memory, not
 * copied; get copies each value into buf once). A get whose value does not
 * fit leaves buf's contents unspecified. */
int kvt_rcluster_get(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n);
/* SET key val||val2 [EX ttl_s when ttl_s > 0] [NX when nx]. */
int kvt_rcluster_set(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n, unsigned ttl_s, int nx);
int kvt_rcluster_exists(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n);
int kvt_rcluster_del(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n);

struct kvt_rcluster_stats {
    uint64_t moved, asks, tryagain, timeouts, reconnects, refreshes, errors, bytes_out, bytes_in;
    uint32_t nodes, nodes_down;   /* masters in the map now, of them unreachable now */
};
/* Counters since open: moved/asks redirects followed, tryagain
 * TRYAGAIN/CLUSTERDOWN/LOADING replies, timeouts items that ended
 * -ETIMEDOUT, reconnects connections made after a node's first, refreshes
 * slot maps learned after open's, errors items that ended with any other
 * negative res, bytes_out/bytes_in bytes written to and read from sockets. */
void kvt_rcluster_stats(const struct kvt_rcluster *c, struct kvt_rcluster_stats *s);
/* The slot of a key (CRC16 XMODEM of the key or its {hash tag}, mod 16384): exposed for tests and the bench's raw baseline. */
unsigned kvt_rcluster_slot(const void *key, size_t len);

#endif /* KVT_RCLUSTER_H */
