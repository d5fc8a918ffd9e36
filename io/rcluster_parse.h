/*
 * rcluster_parse.h — the pure parts of the Redis Cluster client (internal):
 * what it reads from users and servers, parsed with bounds and no I/O, so
 * that tests and tests/fuzz/fuzz_rcluster.c reach every branch.
 *
 *   rcluster_parse.c (every build): the seed URL, the auth file's line, the
 *     error replies (MOVED/ASK and their address, TRYAGAIN, ...).
 *   rcluster_reply.c (with hiredis): the CLUSTER SLOTS reply, and the reply
 *     sink through which a batch's replies reach the callers' buffers.
 *
 * None of them reads past the lengths it is given, whatever the bytes; a
 * malformed input is an error, never a partial result.
 */
#ifndef KVT_RCLUSTER_PARSE_H
#define KVT_RCLUSTER_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RC_SLOTS 16384u
#define RC_HOST_MAX 256          /* a host name's bytes, with the NUL */
#define RC_SECRET_MAX 512        /* a user or password's bytes, with the NUL */
#define RC_SEEDS_MAX 64

struct rc_addr {
    char host[RC_HOST_MAX];      /* "" where a server gave none: the caller's node's host */
    unsigned port;               /* 1..65535 */
};

struct rc_url {
    struct rc_addr seeds[RC_SEEDS_MAX];
    size_t n_seeds;
    char user[RC_SECRET_MAX];    /* "" when none */
    char pass[RC_SECRET_MAX];    /* "" when none */
};

/* Parses "redis://[user[:password]@]host[:port][,host[:port]...][/]" (port
 * 6379 when left out; an IPv6 host in brackets; user and password may be
 * %XX-escaped). 0, or -EINVAL (with what in why, never the password; why
 * may be NULL). */
int rc_url_parse(const char *url, struct rc_url *out, char *why, size_t whylen);

/* The auth file's text (n bytes): one line, "password" or "user password"
 * (a trailing newline and spaces are dropped). 0, or -EINVAL (empty, two
 * lines, too long, three words). */
int rc_auth_parse(const char *text, size_t n, char *user, char *pass);

/* "host:port" (the host possibly empty or in brackets; the port decimal,
 * 1..65535) into *a. 0 or -EINVAL. */
int rc_addr_parse(const char *s, size_t n, struct rc_addr *a);

/* What an error reply says (its text, n bytes, as sent). */
enum rc_err_kind {
    RC_ERR_OTHER,
    RC_ERR_MOVED,                /* "MOVED <slot> <host>:<port>" */
    RC_ERR_ASK,                  /* "ASK <slot> <host>:<port>" */
    RC_ERR_RETRY,                /* TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN: later may work */
    RC_ERR_READONLY,             /* a replica now: the map is stale */
    RC_ERR_AUTH,                 /* NOAUTH, WRONGPASS, "invalid password", "invalid username-password" */
    RC_ERR_NOCLUSTER,            /* "cluster support disabled": a single Redis */
    RC_ERR_BADREDIRECT,          /* MOVED/ASK that does not parse: a failure, never followed */
};
/* Classifies err; for MOVED/ASK also fills *slot and *to. */
enum rc_err_kind rc_err_classify(const char *err, size_t n, unsigned *slot, struct rc_addr *to);

/* CRC16-XMODEM (poly 0x1021, init 0) of p: 0x31C3 for "123456789". */
uint16_t rc_crc16(const void *p, size_t n);

/* --------------------------------------------------------- with hiredis */
struct redisReply;
struct redisReader;

struct rc_slot_range {
    unsigned lo, hi;             /* lo <= hi < RC_SLOTS */
    struct rc_addr master;       /* host "" when the server gave none (use the asked node's) */
};
/* Parses a CLUSTER SLOTS reply into at most cap ranges (replicas are not
 * kept: the client sends everything to masters). 0 and *n, or -EPROTO when
 * any part is not what the command answers (a wrong type, a slot out of
 * range or reversed, a bad port, a host too long, more than cap ranges). */
int rc_slots_parse(const struct redisReply *r, struct rc_slot_range *out, size_t cap, size_t *n);

/* Replies built as objects (redisReply, freed with freeReplyObject) by
 * bounded functions: at most RC_TREE_ELEMS array elements and
 * RC_TREE_BYTES string bytes per reply, past which the reader fails
 * ("Out of memory") rather than allocate what a server's counts say. */
#define RC_TREE_ELEMS (1u << 20)
#define RC_TREE_BYTES (64u << 20)
struct rc_tree {
    size_t elems_left, bytes_left;
};
/* Makes rd build its replies so, within b's budget (b must outlive rd's
 * use; reset it before each reply with rc_tree_reset). */
void rc_tree_attach(struct redisReader *rd, struct rc_tree *b);
void rc_tree_reset(struct rc_tree *b);

/* A batch's replies go through a hiredis reader whose reply functions are
 * these (rc_sink_reader): a reply is not built as an object; its type, its
 * integer or its error text land in the sink, and a bulk string is copied
 * once, straight from the reader's buffer into the caller's buf when it
 * fits. Nested replies (an array: never an answer to GET/SET/EXISTS/DEL)
 * are consumed and only their top-level type is kept. */
struct rc_sink {
    void *buf;                   /* in: where a string reply goes, cap bytes */
    size_t cap;
    void *buf2;                  /* in: where its bytes past cap go, cap2 bytes */
    size_t cap2;
    bool want_crc2;              /* in: take crc2 as they are copied */
    uint32_t crc2;               /* out: CRC32C (seed 0) of the bytes copied to buf2 */
    const struct redisReader *rd;/* in: the reader, to check bounds */
    int type;                    /* out: REDIS_REPLY_* of the top-level reply, 0 before one */
    size_t len;                  /* out: a string's length (copied only when <= cap) */
    long long integer;           /* out: an integer reply */
    char text[160];              /* out: a status or error reply's first bytes, NUL-ended */
    size_t text_len;             /* out: its whole length */
    bool bad;                    /* out: a reply string outside the reader's buffer */
};
/* A reader whose replies go to s (s->rd is set to it; the replies it
 * returns are markers, never to be freed). The reader is the caller's
 * (redisReaderFree); s must outlive it. NULL on ENOMEM. */
struct redisReader *rc_sink_reader(struct rc_sink *s);
/* Readies s for the next reply: buf/cap where a string goes (none past cap). */
void rc_sink_reset(struct rc_sink *s, void *buf, size_t cap);
/* After rc_sink_reset: a string's bytes past cap go to buf2 (cap2 bytes),
 * their CRC32C taken on the way when want_crc. */
void rc_sink_second(struct rc_sink *s, void *buf2, size_t cap2, bool want_crc);

#endif /* KVT_RCLUSTER_PARSE_H */
