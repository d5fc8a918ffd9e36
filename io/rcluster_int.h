/*
 * rcluster_int.h — what io/rcluster.c (the cluster: map, batches) and
 * io/rcluster_node.c (one node: its connection, requests and replies)
 * share. Not installed; only these two files include hiredis's client.
 *
 * Ownership: struct kvt_rcluster's fields are written by rcluster.c, struct
 * rc_node's by rcluster_node.c (rcluster.c reads them, and sets only the
 * map's in_map flag through rc_node_* calls).
 */
#ifndef KVT_RCLUSTER_INT_H
#define KVT_RCLUSTER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/rcluster.h"
#include "io/rcluster_parse.h"

struct redisContext;
struct redisReply;

#define RC_Q_ASKING ((size_t)-1)   /* a queue entry: the ASKING before an item's command */

enum rc_op { RC_GET, RC_SET, RC_EXISTS, RC_DEL };

struct rc_seg {                    /* a piece of the requests to write */
    const void *p;                 /* the caller's memory, or NULL: hdr + off */
    size_t off, len;
};

struct rc_node {
    struct rc_addr addr;
    struct redisContext *ctx;      /* NULL: not connected */
    struct redisReader *rd;        /* the batch replies' reader (rc_sink_reader) */
    struct rc_sink sink;
    struct rc_tree tree;           /* the budget of a reply of rc_node_command */
    bool ever_connected;
    bool down;                     /* the last connect or round failed: wait for retry_at */
    bool in_map;                   /* a master of the current slot map */
    int last_err;                  /* why it is down */
    uint64_t retry_at;             /* ns, CLOCK_MONOTONIC */
    unsigned backoff_ms;
    /* the requests of the current round (kept between calls: a pool) */
    char *hdr;                     /* RESP headers and small keys */
    size_t hdr_len, hdr_cap;
    struct rc_seg *seg;
    size_t n_seg, seg_cap, seg_at, seg_done;
    size_t *q;                     /* the items whose replies are due, in order */
    size_t nq, q_cap, q_next;
};

/* The batch in progress, as the node code sees it. */
struct rc_batch {
    struct kvt_rcluster *c;
    enum rc_op op;
    struct kvt_rc_item *it;
    struct rc_item_state *st;
    uint64_t deadline;
};

struct rc_item_state {
    int32_t node;                  /* where its command went this round, -1 none */
    int32_t to;                    /* a MOVED/ASK target for the next round, -1 none */
    bool asking;                   /* to is an ASK's: send ASKING first */
    uint16_t slot;
    bool pending;                  /* not answered for good yet */
    bool retried_reset;            /* already sent again after a connection reset */
    bool wait;                     /* TRYAGAIN or alike: pause before the next round */
    bool retrying;                 /* answered TRYAGAIN or alike in this call */
    uint8_t redirects;             /* MOVED/ASK followed for it in this call */
};

uint64_t rc_now_ns(void);
int rc_ms_left(uint64_t deadline);

/* rcluster_node.c */
struct rc_node *rc_node_new(const struct rc_addr *a);
void rc_node_free(struct rc_node *nd);
/* Connects (at most min(connect_ms, deadline)), sets TCP_NODELAY, AUTHs
 * when pass is non-empty. 0, -EACCES (the server's words in text), -errno.
 * On failure the node is down for its backoff (counted in *reconnects
 * only on success after a first connection). */
int rc_node_connect(struct rc_node *nd, const char *user, const char *pass, unsigned connect_ms,
                    uint64_t deadline, char *text, size_t textlen, uint64_t *reconnects);
/* Closes the connection; down (err < 0: with backoff) or not (err 0). */
void rc_node_drop(struct rc_node *nd, int err);
/* One command, its reply (the caller frees it with freeReplyObject).
 * Only on a node with no batch requests queued. 0 or -errno. */
int rc_node_command(struct rc_node *nd, int argc, const char **argv, const size_t *lens,
                    uint64_t deadline, struct redisReply **out);
/* Queues item i's command (and ASKING first when ask). -ENOMEM. */
int rc_node_queue(struct rc_node *nd, const struct rc_batch *b, size_t i, bool ask,
                  unsigned ttl_s, int nx);
void rc_node_round_reset(struct rc_node *nd);
bool rc_node_busy(const struct rc_node *nd);
bool rc_node_wants_write(const struct rc_node *nd);
/* Writes what the socket takes. 0 or -errno. */
int rc_node_flush(struct rc_node *nd, uint64_t *bytes_out);
/* Reads what arrived and hands each complete reply to rc_on_reply. 0 or
 * -errno (-EPROTO: a reply hiredis or the sink refused). */
int rc_node_recv(struct rc_node *nd, const struct rc_batch *b, uint64_t *bytes_in);

/* rcluster.c: one reply of item i (the node's sink holds it). */
void rc_on_reply(const struct rc_batch *b, struct rc_node *nd, size_t i);

#endif /* KVT_RCLUSTER_INT_H */
