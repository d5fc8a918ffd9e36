/*
 * rcluster.c — the Redis Cluster client: the slot map, batched calls and
 * their redirects (io/rcluster.h). One node's I/O is rcluster_node.c; what
 * is parsed from users and servers, rcluster_parse.c and rcluster_reply.c.
 *
 * A batched call runs in rounds until every item has its answer or the
 * deadline passes: route each unanswered item (an ASK target, else the
 * slot's master), connect where needed, queue every node's commands, write
 * them all and read the replies under one poll() (rcluster_node.c), then
 * look at what came back: MOVED points the slot at its new master and the
 * item goes again, there (and the whole map is asked for again before the
 * next call's first round); ASK sends the item once to the target with
 * ASKING first, without changing the map; TRYAGAIN/CLUSTERDOWN/LOADING wait 5 ms
 * and go again; a connection reset on a reused connection sends the item
 * once more on a new one. Rounds go on until the deadline while anything
 * is pending; each item follows at most RC_REDIRECTS redirects (a server
 * that redirects in a circle ends the item, not the deadline), and a round
 * that only waits (TRYAGAIN, no master known) pauses 5 ms first.
 *
 * The map: slot -> index into nodes[] (RC_NONE: no master known). Nodes
 * are added (seeds, masters of CLUSTER SLOTS, targets of redirects) and
 * never removed while open, at most RC_NODES_MAX: a server cannot make the
 * client grow without end. A map refresh asks CLUSTER SLOTS of a node that
 * is up, at most every 100 ms: during a failover every call would ask
 * otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "io/rcluster_int.h"

#define RC_NONE 0xFFFFu
#define RC_NODES_MAX 1024
#define RC_REDIRECTS 5   /* per item and call: more is a server sending it in circles */
#define RC_REFRESH_GAP_NS (100ull * 1000000ull)
#define RC_RETRY_PAUSE_MS 5
#define RC_TIMEOUT_MS 200
#define RC_CONNECT_MS 100

struct kvt_rcluster {
    struct rc_url url;              /* seeds, user, password (wiped at close) */
    unsigned timeout_ms, connect_ms;
    char seeds_text[200];           /* "host:port,..." for messages: no password */
    struct rc_node **nodes;
    size_t n_nodes;
    uint16_t slot_node[RC_SLOTS];
    uint16_t map_tmp[RC_SLOTS];
    struct rc_slot_range *ranges;   /* RC_SLOTS of them: CLUSTER SLOTS' parse */
    bool single;                    /* a non-cluster Redis: every slot is nodes[0]'s */
    bool refresh_due;
    bool opened;
    uint64_t last_refresh_try;
    struct rc_item_state *st;       /* per item of the call in progress (a pool) */
    size_t st_cap;
    struct pollfd *pf;              /* round_io's poll set, one per node at most; */
    struct rc_node **pf_node;       /* grown only there: a MOVED can add a node mid-poll */
    size_t pf_cap;
    struct kvt_rcluster_stats stats;
};

static void say(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, a, b);
}

/* ---------------------------------------------------------------- nodes */
/* The node at a (host "" is near's host), added when new. Index or -1. */
static int node_for(struct kvt_rcluster *c, const struct rc_addr *a, const struct rc_node *near)
{
    struct rc_addr k = *a;
    if (!k.host[0]) {
        if (!near)
            return -1;
        memcpy(k.host, near->addr.host, sizeof k.host);
    }
    for (size_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i]->addr.port == k.port && strcmp(c->nodes[i]->addr.host, k.host) == 0)
            return (int)i;
    if (c->n_nodes == RC_NODES_MAX)
        return -1;
    struct rc_node **grown = realloc(c->nodes, (c->n_nodes + 1) * sizeof *grown);
    if (!grown)
        return -1;
    c->nodes = grown;
    if (!(c->nodes[c->n_nodes] = rc_node_new(&k)))
        return -1;
    return (int)c->n_nodes++;
}

/* Connected, or connects now if its backoff is over. 0 or its error. */
static int node_up(struct kvt_rcluster *c, struct rc_node *nd, uint64_t deadline, char *text,
                   size_t textlen)
{
    if (nd->ctx)
        return 0;
    if (nd->down && rc_now_ns() < nd->retry_at)
        return nd->last_err;
    if (rc_ms_left(deadline) == 0)
        return -ETIMEDOUT;
    int rc = rc_node_connect(nd, c->url.user, c->url.pass, c->connect_ms, deadline, text, textlen,
                             &c->stats.reconnects);
    if (rc != 0 && rc != -EACCES)
        c->refresh_due = true;   /* a master gone: its replica may be one now */
    return rc;
}

/* ------------------------------------------------------------------ map */
static int map_apply(struct kvt_rcluster *c, const struct rc_slot_range *r, size_t n,
                     const struct rc_node *asked)
{
    for (size_t s = 0; s < RC_SLOTS; s++)
        c->map_tmp[s] = RC_NONE;
    for (size_t i = 0; i < n; i++) {
        int at = node_for(c, &r[i].master, asked);
        if (at < 0)
            return -ENOMEM;
        for (unsigned s = r[i].lo; s <= r[i].hi; s++)
            c->map_tmp[s] = (uint16_t)at;
    }
    memcpy(c->slot_node, c->map_tmp, sizeof c->slot_node);
    for (size_t i = 0; i < c->n_nodes; i++)
        c->nodes[i]->in_map = false;
    for (size_t s = 0; s < RC_SLOTS; s++)
        if (c->slot_node[s] != RC_NONE)
            c->nodes[c->slot_node[s]]->in_map = true;
    return 0;
}

static void map_single(struct kvt_rcluster *c, int at)
{
    for (size_t s = 0; s < RC_SLOTS; s++)
        c->slot_node[s] = (uint16_t)at;
    for (size_t i = 0; i < c->n_nodes; i++)
        c->nodes[i]->in_map = (int)i == at;
    c->single = true;
}

/* Asks node at for the map. 0, -EACCES (text says why), or -errno. */
static int map_load(struct kvt_rcluster *c, int at, uint64_t deadline, char *text, size_t textlen)
{
    struct rc_node *nd = c->nodes[at];
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    const size_t lens[2] = { 7, 5 };
    redisReply *r = NULL;
    size_t n = 0;
    int rc = node_up(c, nd, deadline, text, textlen);
    if (rc != 0)
        return rc;
    if ((rc = rc_node_command(nd, 2, argv, lens, deadline, &r)) != 0) {
        rc_node_drop(nd, rc);
        c->refresh_due = true;
        return rc;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        size_t el = r->str ? r->len : 0;
        enum rc_err_kind k = rc_err_classify(r->str ? r->str : "", el, NULL, NULL);
        if (text && textlen)
            snprintf(text, textlen, "%.*s", (int)(el < 120 ? el : 120), r->str ? r->str : "");
        rc = k == RC_ERR_AUTH ? -EACCES : k == RC_ERR_RETRY ? -EAGAIN : -EPROTO;
        if (k == RC_ERR_NOCLUSTER) {
            map_single(c, at);
            rc = 0;
        }
    } else {
        rc = rc_slots_parse(r, c->ranges, RC_SLOTS, &n);
        if (rc == 0) {
            c->single = false;
            rc = map_apply(c, c->ranges, n, nd);
        }
    }
    freeReplyObject(r);
    if (rc == 0) {
        c->refresh_due = false;
        if (c->opened)
            c->stats.refreshes++;
    }
    return rc;
}

/* A new map from some node that is up: connected masters first, then any
 * node not in backoff; at most 3 tried. */
static void map_refresh(struct kvt_rcluster *c, uint64_t deadline)
{
    int tried = 0;
    c->last_refresh_try = rc_now_ns();
    for (int pass = 0; pass < 2 && tried < 3; pass++)
        for (size_t i = 0; i < c->n_nodes && tried < 3; i++) {
            struct rc_node *nd = c->nodes[i];
            bool first = nd->ctx && nd->in_map;
            if ((pass == 0) != first || (pass == 1 && nd->down && rc_now_ns() < nd->retry_at))
                continue;
            tried++;
            if (map_load(c, (int)i, deadline, NULL, 0) == 0)
                return;
            if (rc_ms_left(deadline) == 0)
                return;
        }
}

static void maybe_refresh(struct kvt_rcluster *c, uint64_t deadline)
{
    uint64_t now = rc_now_ns();
    if (!c->refresh_due || c->single || now - c->last_refresh_try < RC_REFRESH_GAP_NS)
        return;
    /* Half of what is left, so that the call itself keeps time to run. */
    map_refresh(c, now + (deadline > now ? (deadline - now) / 2 : 0));
}

/* -------------------------------------------------------------- replies */
static void item_done(const struct rc_batch *b, size_t i, int res)
{
    b->it[i].res = res;
    b->st[i].pending = false;
}

static void on_error(const struct rc_batch *b, struct rc_node *nd, size_t i)
{
    struct kvt_rcluster *c = b->c;
    struct rc_item_state *s = &b->st[i];
    struct rc_addr to;
    unsigned slot = 0;
    int at;
    enum rc_err_kind kind = rc_err_classify(nd->sink.text, strlen(nd->sink.text), &slot, &to);
    if ((kind == RC_ERR_MOVED || kind == RC_ERR_ASK) && ++s->redirects > RC_REDIRECTS)
        return item_done(b, i, -EAGAIN);
    switch (kind) {
    case RC_ERR_MOVED:
        c->stats.moved++;
        c->refresh_due = true;
        if ((at = node_for(c, &to, nd)) < 0)
            return item_done(b, i, -EPROTO);
        c->slot_node[slot] = (uint16_t)at;
        c->nodes[at]->in_map = true;
        /* Pending: goes again, to where it was sent (not by the key's slot:
         * a MOVED naming another slot would send it back here). */
        s->to = at;
        s->asking = false;
        b->it[i].res = -EAGAIN;   /* if the redirects do not end in time */
        return;
    case RC_ERR_ASK:
        c->stats.asks++;
        if ((at = node_for(c, &to, nd)) < 0)
            return item_done(b, i, -EPROTO);
        s->to = at;
        s->asking = true;
        b->it[i].res = -EAGAIN;
        return;
    case RC_ERR_RETRY:
        c->stats.tryagain++;
        s->wait = s->retrying = true;
        b->it[i].res = -EAGAIN;   /* what it ends with if the deadline comes first */
        return;
    case RC_ERR_READONLY:
        c->refresh_due = true;
        s->wait = s->retrying = true;
        b->it[i].res = -EAGAIN;
        return;
    case RC_ERR_AUTH:
        return item_done(b, i, -EACCES);
    case RC_ERR_BADREDIRECT:
        return item_done(b, i, -EPROTO);
    default:
        return item_done(b, i, -EIO);
    }
}

void rc_on_reply(const struct rc_batch *b, struct rc_node *nd, size_t i)
{
    const struct rc_sink *s = &nd->sink;
    struct kvt_rc_item *x = &b->it[i];
    if (s->type == REDIS_REPLY_ERROR)
        return on_error(b, nd, i);
    switch (b->op) {
    case RC_GET:
        if (s->type == REDIS_REPLY_NIL)
            return item_done(b, i, 0);
        if (s->type != REDIS_REPLY_STRING)
            break;
        x->len = s->len;
        x->crc2 = s->crc2;
        return item_done(b, i, s->len <= x->cap + x->cap2 ? 1 : -EMSGSIZE);
    case RC_SET:
        if (s->type == REDIS_REPLY_NIL)
            return item_done(b, i, 0);
        if (s->type == REDIS_REPLY_STATUS && strcmp(s->text, "OK") == 0)
            return item_done(b, i, 1);
        break;
    case RC_EXISTS:
    case RC_DEL:
        if (s->type == REDIS_REPLY_INTEGER && s->integer >= 0)
            return item_done(b, i, s->integer > 0);
        break;
    }
    item_done(b, i, -EPROTO);
}

/* ---------------------------------------------------------------- rounds */
/* A node failed mid-round: its unanswered items take err, except that an
 * item sent on a connection that was reset goes once more (the server may
 * have closed an idle connection; a dead one refuses the next connect). */
static void node_failed(const struct rc_batch *b, struct rc_node *nd, int err)
{
    bool reset = err == -ECONNRESET || err == -EPIPE;
    for (size_t q = nd->q_next; q < nd->nq; q++) {
        size_t i = nd->q[q];
        if (i == RC_Q_ASKING || !b->st[i].pending)
            continue;
        if (reset && !b->st[i].retried_reset)
            b->st[i].retried_reset = true;
        else if (err == -ETIMEDOUT && b->st[i].retrying)
            item_done(b, i, -EAGAIN);   /* the deadline came during a retry */
        else
            item_done(b, i, err);
    }
    /* A reset lets the next round connect at once; anything else backs off. */
    rc_node_drop(nd, reset ? 0 : err);
    if (err != -ETIMEDOUT)
        b->c->refresh_due = true;
}

static int route(const struct rc_batch *b, size_t i)
{
    const struct rc_item_state *s = &b->st[i];
    if (s->to >= 0)
        return s->to;
    uint16_t at = b->c->slot_node[s->slot];
    return at == RC_NONE ? -1 : at;
}

/* Queues every pending item on its node; items with no reachable node are
 * answered here. Returns whether any command was queued. */
static bool round_queue(const struct rc_batch *b, size_t n, unsigned ttl_s, int nx, int round)
{
    struct kvt_rcluster *c = b->c;
    bool any = false;
    for (size_t k = 0; k < c->n_nodes; k++)
        rc_node_round_reset(c->nodes[k]);
    for (size_t i = 0; i < n; i++) {
        struct rc_item_state *s = &b->st[i];
        if (!s->pending)
            continue;
        int at = route(b, i);
        s->wait = false;
        if (at < 0) {             /* no master known for the slot */
            c->refresh_due = true;
            s->wait = true;
            b->it[i].res = -EAGAIN;
            continue;
        }
        struct rc_node *nd = c->nodes[at];
        int rc = node_up(c, nd, b->deadline, NULL, 0);
        if (rc == 0)
            rc = rc_node_queue(nd, b, i, s->to >= 0 && s->asking, ttl_s, nx);
        if (rc != 0) {
            /* Once more in the next round, after a map refresh that may
             * point the slot at the replica that took over; then its error. */
            b->it[i].res = rc;
            if (rc == -ENOMEM || rc == -EACCES || s->to >= 0 || round > 0)
                item_done(b, i, rc);
            else
                s->wait = true;
            continue;
        }
        s->to = -1;
        s->node = at;
        any = true;
    }
    return any;
}

/* Writes every node's requests and reads the replies, under one poll, until
 * all are answered or the deadline. */
static int pf_reserve(struct kvt_rcluster *c)
{
    if (c->pf_cap >= c->n_nodes)
        return 0;
    struct pollfd *pf = realloc(c->pf, c->n_nodes * sizeof *pf);
    if (pf)
        c->pf = pf;
    struct rc_node **who = pf ? realloc(c->pf_node, c->n_nodes * sizeof *who) : NULL;
    if (!who)
        return -ENOMEM;
    c->pf_node = who;
    c->pf_cap = c->n_nodes;
    return 0;
}

static void round_io(const struct rc_batch *b)
{
    struct kvt_rcluster *c = b->c;
    for (size_t k = 0; k < c->n_nodes; k++) {
        struct rc_node *nd = c->nodes[k];
        int rc = nd->ctx && rc_node_wants_write(nd) ? rc_node_flush(nd, &c->stats.bytes_out) : 0;
        if (rc != 0)
            node_failed(b, nd, rc);
    }
    for (;;) {
        size_t nf = 0;
        int rc = pf_reserve(c);
        /* Not moved while this turn's replies are handled (they may add nodes). */
        struct pollfd *pf = c->pf;
        struct rc_node **who = c->pf_node;
        for (size_t k = 0; k < c->n_nodes; k++) {
            struct rc_node *nd = c->nodes[k];
            if (!nd->ctx || !rc_node_busy(nd))
                continue;
            if (rc != 0) {
                node_failed(b, nd, rc);
                continue;
            }
            pf[nf] = (struct pollfd){ .fd = nd->ctx->fd,
                                      .events = POLLIN | (rc_node_wants_write(nd) ? POLLOUT : 0) };
            who[nf++] = nd;
        }
        if (nf == 0)
            return;
        int ms = rc_ms_left(b->deadline);
        int pr = ms ? poll(pf, nf, ms) : 0;
        if (pr < 0 && errno != EINTR)
            pr = 0;
        if (pr == 0 && rc_ms_left(b->deadline) == 0) {
            for (size_t k = 0; k < nf; k++)
                node_failed(b, who[k], -ETIMEDOUT);
            return;
        }
        for (size_t k = 0; k < nf; k++) {
            rc = 0;
            if (pf[k].revents & POLLOUT)
                rc = rc_node_flush(who[k], &c->stats.bytes_out);
            if (rc == 0 && (pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                rc = rc_node_recv(who[k], b, &c->stats.bytes_in);
            if (rc != 0)
                node_failed(b, who[k], rc);
        }
    }
}

static int check_items(enum rc_op op, const struct kvt_rc_item *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct kvt_rc_item *x = &it[i];
        if ((!x->key && x->key_len) || (op == RC_GET && ((!x->buf && x->cap) || (!x->buf2 && x->cap2))) ||
            (op == RC_SET && ((!x->val && x->val_len) || (!x->val2 && x->val2_len))))
            return -EINVAL;
    }
    return 0;
}

static int batch(struct kvt_rcluster *c, enum rc_op op, struct kvt_rc_item *it, size_t n,
                 unsigned ttl_s, int nx)
{
    if (n == 0)
        return 0;
    if (!c || !it || check_items(op, it, n) != 0)
        return -EINVAL;
    if (n > c->st_cap) {
        struct rc_item_state *st = realloc(c->st, n * sizeof *st);
        if (!st) {
            for (size_t i = 0; i < n; i++)
                it[i].res = -ENOMEM;
            c->stats.errors += n;
            return 0;
        }
        c->st = st;
        c->st_cap = n;
    }
    struct rc_batch b = { c, op, it, c->st, rc_now_ns() + (uint64_t)c->timeout_ms * 1000000ull };
    size_t pending = n;
    for (size_t i = 0; i < n; i++) {
        it[i].res = -ETIMEDOUT;
        if (op == RC_GET)
            it[i].len = 0;
        c->st[i] = (struct rc_item_state){ .node = -1, .to = -1, .pending = true,
                                           .slot = (uint16_t)kvt_rcluster_slot(it[i].key, it[i].key_len) };
    }
    for (int round = 0; pending && rc_ms_left(b.deadline); round++) {
        bool wait = false;
        maybe_refresh(c, b.deadline);
        if (round_queue(&b, n, ttl_s, nx, round))
            round_io(&b);
        pending = 0;
        for (size_t i = 0; i < n; i++)
            if (c->st[i].pending) {
                pending++;
                wait |= c->st[i].wait;
            }
        int ms = rc_ms_left(b.deadline);
        if (pending && wait && ms)
            poll(NULL, 0, ms < RC_RETRY_PAUSE_MS ? ms : RC_RETRY_PAUSE_MS);
    }
    /* A pipeline the deadline cut is closed in round_io; a reader holding
     * bytes no command asked for cannot be trusted with the next call's. */
    for (size_t k = 0; k < c->n_nodes; k++) {
        struct rc_node *nd = c->nodes[k];
        if (nd->rd && nd->rd->pos < nd->rd->len)
            rc_node_drop(nd, -EPROTO);
        rc_node_round_reset(nd);
    }
    int hits = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i].res == 1)
            hits++;
        else if (it[i].res == -ETIMEDOUT)
            c->stats.timeouts++;
        else if (it[i].res < 0)
            c->stats.errors++;
    }
    return hits;
}

int kvt_rcluster_get(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n)
{
    return batch(c, RC_GET, it, n, 0, 0);
}

int kvt_rcluster_set(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n, unsigned ttl_s, int nx)
{
    return batch(c, RC_SET, it, n, ttl_s, nx);
}

int kvt_rcluster_exists(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n)
{
    return batch(c, RC_EXISTS, it, n, 0, 0);
}

int kvt_rcluster_del(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n)
{
    return batch(c, RC_DEL, it, n, 0, 0);
}

void kvt_rcluster_stats(const struct kvt_rcluster *c, struct kvt_rcluster_stats *s)
{
    *s = c->stats;
    s->nodes = s->nodes_down = 0;
    for (size_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i]->in_map) {
            s->nodes++;
            s->nodes_down += c->nodes[i]->down;
        }
}

/* ------------------------------------------------------------ open/close */
static int read_auth_file(struct kvt_rcluster *c, const char *path, char *err, size_t errlen)
{
    char text[2 * RC_SECRET_MAX + 8];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text) : -1;
    int rc = n < 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    if (rc == 0 && (n == (ssize_t)sizeof text ||
                    rc_auth_parse(text, (size_t)n, c->url.user, c->url.pass) != 0))
        rc = -EINVAL;
    explicit_bzero(text, sizeof text);
    if (rc == -EINVAL)
        say(err, errlen, "redis: the auth file %s is not one line of \"password\" or \"user password\"%s",
            path, "");
    else if (rc != 0)
        say(err, errlen, "redis: cannot read the auth file %s: %s", path, strerror(-rc));
    return rc;
}

static void seeds_text(struct kvt_rcluster *c)
{
    size_t at = 0;
    for (size_t i = 0; i < c->url.n_seeds && at < sizeof c->seeds_text; i++) {
        const struct rc_addr *a = &c->url.seeds[i];
        int w = snprintf(c->seeds_text + at, sizeof c->seeds_text - at, "%s%s:%u", i ? "," : "",
                         a->host, a->port);
        if (w < 0 || (size_t)w >= sizeof c->seeds_text - at) {
            snprintf(c->seeds_text + sizeof c->seeds_text - 5, 5, ",...");
            break;
        }
        at += (size_t)w;
    }
}

/* Each seed in turn: connect and AUTH, then CLUSTER SLOTS. */
static int open_seeds(struct kvt_rcluster *c, char *err, size_t errlen)
{
    char text[128] = "";
    int rc = -ECONNREFUSED;
    bool timed_out = false;
    for (size_t i = 0; i < c->url.n_seeds; i++) {
        int at = node_for(c, &c->url.seeds[i], NULL);
        if (at < 0)
            return -ENOMEM;
        uint64_t dl = rc_now_ns() + ((uint64_t)c->connect_ms + 2ull * c->timeout_ms) * 1000000ull;
        rc = map_load(c, at, dl, text, sizeof text);
        if (rc == 0)
            return 0;
        if (rc == -EACCES) {
            say(err, errlen, "redis cluster %s: authentication failed (the server said: %s)",
                c->seeds_text, text);
            return rc;
        }
        timed_out |= rc == -ETIMEDOUT;
    }
    if (timed_out)
        rc = -ETIMEDOUT;
    say(err, errlen, "redis cluster %s: no seed answered (%s)", c->seeds_text, strerror(-rc));
    return rc;
}

int kvt_rcluster_open(const struct kvt_rcluster_opts *o, struct kvt_rcluster **out, char *err, size_t errlen)
{
    char why[160];
    int rc;
    if (out)
        *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (!o || !out)
        return -EINVAL;
    struct kvt_rcluster *c = calloc(1, sizeof *c);
    if (!c || !(c->ranges = calloc(RC_SLOTS, sizeof *c->ranges))) {
        free(c);
        return -ENOMEM;
    }
    if ((rc = rc_url_parse(o->url, &c->url, why, sizeof why)) != 0) {
        say(err, errlen, "redis: bad URL: %s%s", why, "");
        goto out_free;
    }
    seeds_text(c);
    if (o->auth_file && (rc = read_auth_file(c, o->auth_file, err, errlen)) != 0)
        goto out_free;
    c->timeout_ms = o->timeout_ms ? o->timeout_ms : RC_TIMEOUT_MS;
    c->connect_ms = o->connect_timeout_ms ? o->connect_timeout_ms : RC_CONNECT_MS;
    for (size_t s = 0; s < RC_SLOTS; s++)
        c->slot_node[s] = RC_NONE;
    if ((rc = open_seeds(c, err, errlen)) != 0)
        goto out_free;
    c->opened = true;
    *out = c;
    return 0;

out_free:
    kvt_rcluster_close(c);
    return rc;
}

void kvt_rcluster_close(struct kvt_rcluster *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_nodes; i++)
        rc_node_free(c->nodes[i]);
    free(c->nodes);
    free(c->ranges);
    free(c->st);
    free(c->pf);
    free(c->pf_node);
    explicit_bzero(&c->url, sizeof c->url);
    free(c);
}
