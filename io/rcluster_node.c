/*
 * rcluster_node.c — one Redis node: its connection, the requests of a
 * batch round written without copying values, and its replies read into
 * the callers' buffers (rcluster_int.h).
 *
 * hiredis makes the connection (redisConnectNonBlock) and parses replies;
 * the socket I/O is ours, non-blocking under poll(), so that no call waits
 * past its deadline however a server behaves (hiredis's blocking mode
 * bounds each read by SO_RCVTIMEO, not a call: a server trickling a byte
 * per timeout would hold it for ever). Requests go out with sendmsg over
 * iovecs pointing at the callers' values (no copy; hiredis's
 * redisAppendCommandArgv would copy every value into its output buffer),
 * with MSG_NOSIGNAL: a write to a closed connection is an error, not a
 * SIGPIPE that kills the process.
 *
 * Replies: bytes are read straight into the batch reader's own buffer (no
 * intermediate copy; 256 KiB at a time), and each reply's string is copied
 * once, from there to the item's buf (rcluster_reply.c). The reader's
 * buffer keeps the size of the largest reply plus 256 KiB per node: memory
 * made once, reused by every call.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "io/rcluster_int.h"

#define RC_READ_CHUNK (256u << 10)
#define RC_REPLY_MAX (512u << 20)  /* Redis's own cap on a value (proto-max-bulk-len) */
#define RC_INLINE_KEY 512          /* keys this short are copied into hdr: one iovec fewer */
#define RC_IOV_MAX 64
#define RC_BACKOFF_MIN_MS 10
#define RC_BACKOFF_MAX_MS 1000

uint64_t rc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Milliseconds to the deadline, rounded up (poll's unit), 0 when past. */
int rc_ms_left(uint64_t deadline)
{
    uint64_t now = rc_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 600000 ? 600000 : (int)ms;
}

struct rc_node *rc_node_new(const struct rc_addr *a)
{
    struct rc_node *nd = calloc(1, sizeof *nd);
    if (!nd)
        return NULL;
    nd->addr = *a;
    return nd;
}

void rc_node_free(struct rc_node *nd)
{
    if (!nd)
        return;
    if (nd->ctx)
        redisFree(nd->ctx);
    if (nd->rd)
        redisReaderFree(nd->rd);
    free(nd->hdr);
    free(nd->seg);
    free(nd->q);
    free(nd);
}

void rc_node_drop(struct rc_node *nd, int err)
{
    if (nd->ctx)
        redisFree(nd->ctx);
    nd->ctx = NULL;
    /* The reader may hold half a reply of the closed stream. */
    if (nd->rd)
        redisReaderFree(nd->rd);
    nd->rd = NULL;
    rc_node_round_reset(nd);
    if (err == 0)
        return;
    nd->down = true;
    nd->last_err = err;
    nd->backoff_ms = nd->backoff_ms ? nd->backoff_ms * 2 : RC_BACKOFF_MIN_MS;
    if (nd->backoff_ms > RC_BACKOFF_MAX_MS)
        nd->backoff_ms = RC_BACKOFF_MAX_MS;
    nd->retry_at = rc_now_ns() + (uint64_t)nd->backoff_ms * 1000000ull;
}

static int ctx_error(const struct redisContext *ctx)
{
    switch (ctx->err) {
    case REDIS_ERR_EOF:
        return -ECONNRESET;
    case REDIS_ERR_PROTOCOL:
        return -EPROTO;
    case REDIS_ERR_OOM:
        return -ENOMEM;
    default:
        return -ECONNRESET;
    }
}

static int send_all(int fd, const char *p, size_t n, uint64_t deadline)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        int ms = rc_ms_left(deadline);
        if (ms == 0)
            return -ETIMEDOUT;
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        if (poll(&pf, 1, ms) < 0 && errno != EINTR)
            return -errno;
    }
    return 0;
}

int rc_node_command(struct rc_node *nd, int argc, const char **argv, const size_t *lens,
                    uint64_t deadline, redisReply **out)
{
    char *cmd = NULL;
    *out = NULL;
    rc_tree_reset(&nd->tree);
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0)
        return -ENOMEM;
    int rc = send_all(nd->ctx->fd, cmd, (size_t)len, deadline);
    explicit_bzero(cmd, (size_t)len);   /* AUTH's holds the password */
    redisFreeCommand(cmd);
    while (rc == 0) {
        void *r = NULL;
        if (redisGetReplyFromReader(nd->ctx, &r) != REDIS_OK)
            return -EPROTO;
        if (r) {
            /* Bytes past the reply were never asked for: the stream is
             * not one this client can follow. */
            const redisReader *rd = nd->ctx->reader;
            if (rd->pos < rd->len) {
                freeReplyObject(r);
                return -EPROTO;
            }
            *out = r;
            return 0;
        }
        int ms = rc_ms_left(deadline);
        if (ms == 0)
            return -ETIMEDOUT;
        struct pollfd pf = { .fd = nd->ctx->fd, .events = POLLIN };
        int pr = poll(&pf, 1, ms);
        if (pr < 0 && errno != EINTR)
            return -errno;
        /* Non-blocking: EAGAIN reads nothing and is no error. */
        if (pr > 0 && redisBufferRead(nd->ctx) != REDIS_OK)
            return ctx_error(nd->ctx);
    }
    return rc;
}

static int connect_wait(struct redisContext *ctx, unsigned connect_ms, uint64_t deadline)
{
    uint64_t cdl = rc_now_ns() + (uint64_t)connect_ms * 1000000ull;
    struct pollfd pf = { .fd = ctx->fd, .events = POLLOUT };
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    for (;;) {
        int ms = rc_ms_left(cdl < deadline ? cdl : deadline);
        if (ms == 0)
            return -ETIMEDOUT;
        int pr = poll(&pf, 1, ms);
        if (pr > 0)
            break;
        if (pr < 0 && errno != EINTR)
            return -errno;
    }
    if (getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        return -errno;
    return soerr ? -soerr : 0;
}

static int node_auth(struct rc_node *nd, const char *user, const char *pass, uint64_t deadline,
                     char *text, size_t textlen)
{
    const char *argv[3] = { "AUTH", user, pass };
    size_t lens[3] = { 4, strlen(user), strlen(pass) };
    redisReply *r = NULL;
    int rc;
    if (user[0])
        rc = rc_node_command(nd, 3, argv, lens, deadline, &r);
    else
        rc = rc_node_command(nd, 2, (const char *[]){ "AUTH", pass },
                             (const size_t[]){ 4, lens[2] }, deadline, &r);
    if (rc != 0)
        return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        size_t n = r->str ? r->len : 0;
        if (text && textlen)
            snprintf(text, textlen, "%.*s", (int)(n < 120 ? n : 120), r->str ? r->str : "");
        /* A password given to a server that wants none: nothing to do. */
        bool none_wanted = n && strstr(r->str, "without any password configured");
        rc = none_wanted ? 0 : -EACCES;
    } else if (r->type != REDIS_REPLY_STATUS) {
        rc = -EPROTO;
    }
    freeReplyObject(r);
    return rc;
}

int rc_node_connect(struct rc_node *nd, const char *user, const char *pass, unsigned connect_ms,
                    uint64_t deadline, char *text, size_t textlen, uint64_t *reconnects)
{
    int one = 1, rc;
    if (nd->ctx)
        return 0;
    errno = 0;
    struct redisContext *ctx = redisConnectNonBlock(nd->addr.host, (int)nd->addr.port);
    int e = errno;
    if (!ctx)
        return -ENOMEM;
    nd->ctx = ctx;
    if (ctx->err) {
        /* An I/O error keeps connect's errno; a name that does not resolve
         * (hiredis's REDIS_ERR_OTHER) is a host we cannot reach. */
        rc = ctx->err == REDIS_ERR_IO && e && e != EINPROGRESS ? -e : -EHOSTUNREACH;
        goto out_drop;
    }
    rc_tree_attach(ctx->reader, &nd->tree);
    rc = connect_wait(ctx, connect_ms, deadline);
    if (rc != 0)
        goto out_drop;
    /* Small requests (GET, EXISTS) go out at once, not after Nagle's wait. */
    setsockopt(ctx->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (pass && pass[0]) {
        rc = node_auth(nd, user ? user : "", pass, deadline, text, textlen);
        if (rc != 0)
            goto out_drop;
    }
    nd->rd = rc_sink_reader(&nd->sink);
    if (!nd->rd) {
        rc = -ENOMEM;
        goto out_drop;
    }
    if (nd->ever_connected && reconnects)
        (*reconnects)++;
    nd->ever_connected = true;
    nd->down = false;
    nd->backoff_ms = 0;
    nd->last_err = 0;
    return 0;

out_drop:
    rc_node_drop(nd, rc);
    return rc;
}

/* ------------------------------------------------------------ requests */
void rc_node_round_reset(struct rc_node *nd)
{
    nd->hdr_len = 0;
    nd->n_seg = nd->seg_at = nd->seg_done = 0;
    nd->nq = nd->q_next = 0;
}

bool rc_node_busy(const struct rc_node *nd)
{
    return nd->q_next < nd->nq;
}

bool rc_node_wants_write(const struct rc_node *nd)
{
    return nd->seg_at < nd->n_seg;
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Appends bytes to hdr, extending the last segment when it is hdr's tail. */
static int put_hdr(struct rc_node *nd, const void *p, size_t n)
{
    if (grow((void **)&nd->hdr, &nd->hdr_cap, nd->hdr_len + n, 1) != 0)
        return -ENOMEM;
    struct rc_seg *last = nd->n_seg ? &nd->seg[nd->n_seg - 1] : NULL;
    if (last && !last->p && last->off + last->len == nd->hdr_len) {
        last->len += n;
    } else {
        if (grow((void **)&nd->seg, &nd->seg_cap, nd->n_seg + 1, sizeof *nd->seg) != 0)
            return -ENOMEM;
        nd->seg[nd->n_seg++] = (struct rc_seg){ NULL, nd->hdr_len, n };
    }
    memcpy(nd->hdr + nd->hdr_len, p, n);
    nd->hdr_len += n;
    return 0;
}

static int put_fmt(struct rc_node *nd, const char *fmt, size_t a)
{
    char b[48];
    int n = snprintf(b, sizeof b, fmt, a);
    return put_hdr(nd, b, (size_t)n);
}

/* A caller's bytes: by reference, or copied when short. */
static int put_ref(struct rc_node *nd, const void *p, size_t n)
{
    if (n <= RC_INLINE_KEY)
        return put_hdr(nd, p, n);
    if (grow((void **)&nd->seg, &nd->seg_cap, nd->n_seg + 1, sizeof *nd->seg) != 0)
        return -ENOMEM;
    nd->seg[nd->n_seg++] = (struct rc_seg){ p, 0, n };
    return 0;
}

/* "$len\r\n" bytes "\r\n": one bulk argument. */
static int put_arg(struct rc_node *nd, const void *p, size_t n)
{
    if (put_fmt(nd, "$%zu\r\n", n) || put_ref(nd, p, n) || put_hdr(nd, "\r\n", 2))
        return -ENOMEM;
    return 0;
}

static int queue_set(struct rc_node *nd, const struct kvt_rc_item *x, unsigned ttl_s, int nx)
{
    size_t argc = 3 + (ttl_s ? 2 : 0) + (nx ? 1 : 0);
    char ttl[16];
    if (put_fmt(nd, "*%zu\r\n$3\r\nSET\r\n", argc) || put_arg(nd, x->key, x->key_len) ||
        put_fmt(nd, "$%zu\r\n", x->val_len + x->val2_len))
        return -ENOMEM;
    if ((x->val_len && put_ref(nd, x->val, x->val_len)) ||
        (x->val2_len && put_ref(nd, x->val2, x->val2_len)) || put_hdr(nd, "\r\n", 2))
        return -ENOMEM;
    if (ttl_s) {
        int n = snprintf(ttl, sizeof ttl, "%u", ttl_s);
        if (put_hdr(nd, "$2\r\nEX\r\n", 8) || put_arg(nd, ttl, (size_t)n))
            return -ENOMEM;
    }
    if (nx && put_hdr(nd, "$2\r\nNX\r\n", 8))
        return -ENOMEM;
    return 0;
}

int rc_node_queue(struct rc_node *nd, const struct rc_batch *b, size_t i, bool ask,
                  unsigned ttl_s, int nx)
{
    static const char *const verb[] = { [RC_GET] = "*2\r\n$3\r\nGET\r\n",
                                        [RC_EXISTS] = "*2\r\n$6\r\nEXISTS\r\n",
                                        [RC_DEL] = "*2\r\n$3\r\nDEL\r\n" };
    const struct kvt_rc_item *x = &b->it[i];
    int rc;
    if (grow((void **)&nd->q, &nd->q_cap, nd->nq + 2, sizeof *nd->q) != 0)
        return -ENOMEM;
    if (ask) {
        if (put_hdr(nd, "*1\r\n$6\r\nASKING\r\n", 16) != 0)
            return -ENOMEM;
        nd->q[nd->nq++] = RC_Q_ASKING;
    }
    if (b->op == RC_SET)
        rc = queue_set(nd, x, ttl_s, nx);
    else
        rc = (put_hdr(nd, verb[b->op], strlen(verb[b->op])) || put_arg(nd, x->key, x->key_len))
                 ? -ENOMEM : 0;
    if (rc == 0)
        nd->q[nd->nq++] = i;
    return rc;
}

/* --------------------------------------------------------------- the wire */
int rc_node_flush(struct rc_node *nd, uint64_t *bytes_out)
{
    while (nd->seg_at < nd->n_seg) {
        struct iovec v[RC_IOV_MAX];
        int nv = 0;
        for (size_t s = nd->seg_at; s < nd->n_seg && nv < RC_IOV_MAX; s++, nv++) {
            const struct rc_seg *g = &nd->seg[s];
            const char *base = g->p ? g->p : nd->hdr + g->off;
            size_t skip = s == nd->seg_at ? nd->seg_done : 0;
            v[nv].iov_base = (void *)(base + skip);
            v[nv].iov_len = g->len - skip;
        }
        struct msghdr m = { .msg_iov = v, .msg_iovlen = (size_t)nv };
        ssize_t w = sendmsg(nd->ctx->fd, &m, MSG_NOSIGNAL);
        if (w < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        *bytes_out += (uint64_t)w;
        size_t left = (size_t)w;
        while (left && nd->seg_at < nd->n_seg) {
            size_t rest = nd->seg[nd->seg_at].len - nd->seg_done;
            if (left < rest) {
                nd->seg_done += left;
                left = 0;
            } else {
                left -= rest;
                nd->seg_at++;
                nd->seg_done = 0;
            }
        }
    }
    return 0;
}

/* The bytes still to come of the reply being read when it is one bulk
 * string whose length is in (hiredis 0.14 has then taken its '$': the
 * length's digits start at pos), else 0. Reading no further than its end
 * leaves nothing of the next reply behind it, which the reader would move
 * to the front of its buffer once the reply is taken (sdsrange: up to a
 * chunk moved per reply, 5% of a load's CPU). */
static size_t bulk_missing(const redisReader *rd)
{
    if (rd->ridx != 0 || rd->rstack[0].type != REDIS_REPLY_STRING)
        return 0;
    const char *p = rd->buf + rd->pos, *end = rd->buf + rd->len, *q = p;
    size_t n = 0;
    while (q < end && *q >= '0' && *q <= '9' && q - p < 12)
        n = n * 10 + (size_t)(*q++ - '0');
    if (q == p || end - q < 2 || q[0] != '\r' || q[1] != '\n')
        return 0;
    size_t total = (size_t)(q + 2 - p) + n + 2, have = (size_t)(end - p);
    return total > have ? total - have : 0;
}

/* Reads into the reader's buffer itself (an sds: room made, length
 * raised), as redisReaderFeed would after copying from a buffer of ours. */
static int read_some(struct rc_node *nd, uint64_t *bytes_in)
{
    redisReader *rd = nd->rd;
    /* The reader holds a whole reply before it yields it: a server that
     * sends a reply bigger than any value (or endless bytes) fails its
     * node here, not the process in hiredis's allocator (which aborts). */
    if (rd->len - rd->pos > RC_REPLY_MAX)
        return -EMSGSIZE;
    size_t want = bulk_missing(rd);
    if (!want || want > RC_REPLY_MAX)
        want = RC_READ_CHUNK;
    if (sdsavail(rd->buf) < want) {
        sds b = sdsMakeRoomFor(rd->buf, want);
        if (!b)
            return -ENOMEM;
        rd->buf = b;
    }
    ssize_t k = read(nd->ctx->fd, rd->buf + sdslen(rd->buf), want);
    if (k < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    if (k == 0)
        return -ECONNRESET;
    sdsIncrLen(rd->buf, (int)k);
    rd->len = sdslen(rd->buf);
    *bytes_in += (uint64_t)k;
    return 1;
}

int rc_node_recv(struct rc_node *nd, const struct rc_batch *b, uint64_t *bytes_in)
{
    int rc = read_some(nd, bytes_in);
    if (rc <= 0)
        return rc;
    while (nd->q_next < nd->nq) {
        size_t i = nd->q[nd->q_next];
        struct kvt_rc_item *x = i == RC_Q_ASKING ? NULL : &b->it[i];
        void *r = NULL;
        bool get = x && b->op == RC_GET;
        rc_sink_reset(&nd->sink, get ? x->buf : NULL, get ? x->cap : 0);
        if (get)
            rc_sink_second(&nd->sink, x->buf2, x->cap2, x->want_crc2);
        if (redisReaderGetReply(nd->rd, &r) != REDIS_OK || nd->sink.bad)
            return -EPROTO;
        if (!r)
            break;
        nd->q_next++;
        if (x)
            rc_on_reply(b, nd, i);
    }
    return 0;
}
