/*
 * remote_bench.c — the shared tier's store beside raw hiredis
 * (remote_bench.h). The raw client is what a minimal pipelined cluster
 * client does: the slot map read once from CLUSTER SLOTS, one connection
 * per master per thread, each round's commands appended, every node's
 * buffer written, then the replies read in order. No framing, no checks,
 * no copy out of hiredis's reply: the store's own work is what the ratio
 * measures.
 */
#include "lab/remote_bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvt_build.h"
#include "store/store.h"

#if KVT_HAVE_REDIS
#include <hiredis/hiredis.h>

#include "io/rcluster.h"

#define MAX_NODES 64
#define TTL "600"

struct node {
    char host[256];
    int port;
};

struct shared {
    const struct kvt_rbench_opts *o;
    int raw, write;
    struct node nodes[MAX_NODES];
    int nnodes;
    uint8_t node_of[16384];
    char user[400], pass[400];
    uint8_t *val;
    double until;
    pthread_mutex_t mu;
    uint64_t ops, failed, bad;
    char err[256];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* "user password" or "password" from the auth file (trailing newline cut). */
static int read_auth(struct shared *s)
{
    if (!s->o->auth_file)
        return 0;
    FILE *f = fopen(s->o->auth_file, "r");
    if (!f)
        return -errno;
    char line[400] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    line[strcspn(line, "\r\n")] = 0;
    char *sp = strchr(line, ' ');
    if (sp) {
        *sp = 0;
        snprintf(s->user, sizeof s->user, "%s", line);
        snprintf(s->pass, sizeof s->pass, "%s", sp + 1);
    } else {
        snprintf(s->pass, sizeof s->pass, "%s", line);
    }
    return 0;
}

static redisContext *connect_node(struct shared *s, const struct node *n)
{
    struct timeval tv = { .tv_sec = 1 };
    redisContext *c = redisConnectWithTimeout(n->host, n->port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    struct timeval io = { .tv_sec = 5 };
    redisSetTimeout(c, io);
    if (s->pass[0]) {
        redisReply *r = s->user[0] ? redisCommand(c, "AUTH %s %s", s->user, s->pass)
                                   : redisCommand(c, "AUTH %s", s->pass);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static int node_index(struct shared *s, const char *host, int port)
{
    for (int i = 0; i < s->nnodes; i++)
        if (s->nodes[i].port == port && !strcmp(s->nodes[i].host, host))
            return i;
    if (s->nnodes == MAX_NODES)
        return -1;
    snprintf(s->nodes[s->nnodes].host, sizeof s->nodes[0].host, "%s", host);
    s->nodes[s->nnodes].port = port;
    return s->nnodes++;
}

/* The slot map from the first seed's CLUSTER SLOTS (one node owning all
 * when it is not a cluster). */
static int learn_map(struct shared *s)
{
    struct node seed = { .port = 6379 };
    const char *p = s->o->url + 8; /* after redis:// */
    size_t hl = strcspn(p, ":,");
    if (hl == 0 || hl >= sizeof seed.host || p[hl] != ':')
        return -EINVAL;
    memcpy(seed.host, p, hl);
    seed.port = atoi(p + hl + 1);
    redisContext *c = connect_node(s, &seed);
    if (!c)
        return -ECONNREFUSED;
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    int rc = 0;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements && rc == 0; i++) {
            redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
                e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
                e->element[2]->element[0]->type != REDIS_REPLY_STRING)
                continue;
            int n = node_index(s, e->element[2]->element[0]->str,
                               (int)e->element[2]->element[1]->integer);
            if (n < 0) {
                rc = -E2BIG;
                break;
            }
            for (long long sl = e->element[0]->integer; sl <= e->element[1]->integer && sl < 16384;
                 sl++)
                s->node_of[sl] = (uint8_t)n;
        }
    } else {
        node_index(s, seed.host, seed.port); /* not a cluster: node 0 owns every slot */
    }
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return rc ? rc : s->nnodes ? 0 : -ENODEV;
}

static void add(struct shared *s, uint64_t ops, uint64_t failed, uint64_t bad)
{
    pthread_mutex_lock(&s->mu);
    s->ops += ops;
    s->failed += failed;
    s->bad += bad;
    pthread_mutex_unlock(&s->mu);
}

static void *raw_thread(void *arg)
{
    struct shared *s = ((void **)arg)[0];
    unsigned id = (unsigned)(uintptr_t)((void **)arg)[1];
    const struct kvt_rbench_opts *o = s->o;
    redisContext *c[MAX_NODES] = { 0 };
    for (int i = 0; i < s->nnodes; i++)
        if (!(c[i] = connect_node(s, &s->nodes[i]))) {
            add(s, 0, 1, 0);
            goto out;
        }
    unsigned nkeys = o->batch * 4;
    uint8_t *order = malloc(o->batch);
    uint64_t ops = 0, failed = 0, bad = 0, cursor = 0;
    char key[96];
    while (order && now_s() < s->until && !(o->fill && cursor >= nkeys)) {
        for (unsigned j = 0; j < o->batch; j++) {
            int kl = snprintf(key, sizeof key, "kvtbench:%llx:r:%zu:%u:%llu",
                              (unsigned long long)o->nonce, o->value_bytes, id,
                              (unsigned long long)(cursor++ % nkeys));
            int n = s->node_of[kvt_rcluster_slot(key, (size_t)kl)];
            order[j] = (uint8_t)n;
            if (s->write) {
                const char *argv[5] = { "SET", key, (const char *)s->val, "EX", TTL };
                size_t len[5] = { 3, (size_t)kl, o->value_bytes, 2, sizeof TTL - 1 };
                redisAppendCommandArgv(c[n], 5, argv, len);
            } else {
                const char *argv[2] = { "GET", key };
                size_t len[2] = { 3, (size_t)kl };
                redisAppendCommandArgv(c[n], 2, argv, len);
            }
            /* Written at once: hiredis moves what is left of its output
             * buffer after each partial write, so a round's values left
             * there together would cost it quadratic time, which would
             * measure hiredis's buffer, not the network. */
            int done = 0;
            while (!done && redisBufferWrite(c[n], &done) == REDIS_OK)
                ;
        }
        for (unsigned j = 0; j < o->batch; j++) {
            redisReply *r = NULL;
            if (redisGetReply(c[order[j]], (void **)&r) != REDIS_OK || !r) {
                failed += o->batch - j;
                goto done;
            }
            if (s->write ? r->type == REDIS_REPLY_STATUS
                         : r->type == REDIS_REPLY_STRING && (size_t)r->len == o->value_bytes)
                ops++;
            else if (!s->write && r->type == REDIS_REPLY_STRING)
                bad++;
            else
                failed++;
            freeReplyObject(r);
        }
    }
done:
    free(order);
    add(s, ops, failed, bad);
out:
    for (int i = 0; i < s->nnodes; i++)
        if (c[i])
            redisFree(c[i]);
    return NULL;
}

static void *store_thread(void *arg)
{
    struct shared *s = ((void **)arg)[0];
    unsigned id = (unsigned)(uintptr_t)((void **)arg)[1];
    const struct kvt_rbench_opts *o = s->o;
    /* The fingerprint differs per size: each size has keys of its own. */
    struct kvt_store_params p = {
        .page_bytes = o->value_bytes, .fingerprint = o->nonce ^ o->value_bytes, .url = o->url,
        .prefix = "kvtbench", .auth_file = o->auth_file, .timeout_ms = o->timeout_ms,
        .ttl_s = 600,
    };
    struct kvt_store *st = NULL;
    char err[256];
    if (kvt_remote_store_ops.open(&p, &st, err, sizeof err) != 0) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->err, sizeof s->err, "%s", err);
        pthread_mutex_unlock(&s->mu);
        add(s, 0, 1, 0);
        return NULL;
    }
    unsigned nkeys = o->batch * 4;
    struct kvt_store_item *it = calloc(o->batch, sizeof(*it));
    uint8_t *bufs = s->write ? NULL : malloc((size_t)o->batch * o->value_bytes);
    uint64_t ops = 0, failed = 0, bad = 0, cursor = 0;
    while (it && (s->write || bufs) && now_s() < s->until && !(o->fill && cursor >= nkeys)) {
        for (unsigned j = 0; j < o->batch; j++)
            it[j] = (struct kvt_store_item){
                .key = { .id = id, .layer = 0, .index = (uint32_t)(cursor++ % nkeys) },
                .buf = s->write ? s->val : bufs + (size_t)j * o->value_bytes,
            };
        int n = s->write ? st->ops->put(st, it, o->batch) : st->ops->get(st, it, o->batch);
        ops += n > 0 ? (uint64_t)n : 0;
        failed += o->batch - (n > 0 ? (unsigned)n : 0);
        for (unsigned j = 0; !s->write && j < o->batch; j++)
            bad += it[j].res == 1 && memcmp(it[j].buf, s->val, 64) != 0;
    }
    free(it);
    free(bufs);
    add(s, ops, failed, bad);
    st->ops->close(st);
    return NULL;
}

int kvt_rbench_run(const struct kvt_rbench_opts *o, int raw, int write,
                   struct kvt_rbench_result *r, char *err, size_t errlen)
{
    *r = (struct kvt_rbench_result){ 0 };
    struct shared *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = o;
    s->raw = raw;
    s->write = write;
    pthread_mutex_init(&s->mu, NULL);
    int rc = read_auth(s);
    if (rc == 0 && raw)
        rc = learn_map(s);
    s->val = malloc(o->value_bytes);
    if (rc == 0 && !s->val)
        rc = -ENOMEM;
    if (rc) {
        snprintf(err, errlen, "%s", rc == -ECONNREFUSED ? "cannot connect to the first seed"
                                    : rc == -EINVAL      ? "cannot read the URL's first seed"
                                                         : strerror(-rc));
        goto out;
    }
    /* The same bytes on every run, so that a read checks what a write left. */
    for (size_t i = 0; i < o->value_bytes; i++)
        s->val[i] = (uint8_t)(i * 131 + (i >> 12) * 7 + 1);
    pthread_t *t = calloc(o->clients, sizeof(*t));
    void *(*args)[2] = calloc(o->clients, sizeof(*args));
    if (!t || !args) {
        free(t);
        free(args);
        rc = -ENOMEM;
        goto out;
    }
    double c0 = cpu_s(), t0 = now_s();
    s->until = t0 + (o->fill ? 60 : o->seconds);
    unsigned started = 0;
    for (unsigned i = 0; i < o->clients; i++) {
        args[i][0] = s;
        args[i][1] = (void *)(uintptr_t)i;
        if (pthread_create(&t[i], NULL, raw ? raw_thread : store_thread, args[i]) == 0)
            started++;
        else
            break;
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    double wall = now_s() - t0, cpu = cpu_s() - c0;
    free(t);
    free(args);
    double gb = (double)s->ops * (double)o->value_bytes / 1e9;
    r->gbps = wall > 0 ? gb / wall : 0;
    r->cpu_s_per_gb = gb > 0 ? cpu / gb : 0;
    r->ops = s->ops;
    r->failed = s->failed;
    r->bad = s->bad;
    if (s->err[0])
        snprintf(err, errlen, "%s", s->err);
    if (!s->ops)
        rc = s->err[0] ? -ECONNREFUSED : -EIO;
out:
    free(s->val);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rc;
}

#else

int kvt_rbench_run(const struct kvt_rbench_opts *o, int raw, int write,
                   struct kvt_rbench_result *r, char *err, size_t errlen)
{
    (void)o, (void)raw, (void)write;
    *r = (struct kvt_rbench_result){ 0 };
    snprintf(err, errlen, "this kvtier was built without hiredis (libhiredis-dev)");
    return KVT_ENOTSUP;
}
#endif
