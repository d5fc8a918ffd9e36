/*
 * remote.c — the shared tier: publishing pages to a store many engines
 * share, and loading the pages only it holds (docs/remote.md).
 *
 * What the local tiers hold is a cache of the shared tier. This file owns
 * struct kvt_remote: the store handles, the publish queue and its thread,
 * and the tier's counters. It never takes the engine lock, and nothing it
 * does under its own locks waits on the network: callers copy a page into
 * the queue and go; the publisher thread sends; loads and lookups run in
 * the caller's thread on a handle of their own.
 *
 * Lock order: e->lock (when a caller holds it, as eviction does), then
 * r->mu or r->pool_mu; r->mu and r->pool_mu are never held together.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/tiers.h"
#include "store/store.h"

#define DEFAULT_QUEUE_BYTES (64ull << 20)
#define DEFAULT_TIMEOUT_MS 200
#define HANDLES 2            /* callers that load or look up at once */
#define BATCH_BYTES (16ull << 20) /* bytes one publish or load batch moves at most */
#define EXPECT_SLOTS 4096    /* keys lookups said the store held (remote_lost) */

struct kvt_remote {
    const struct kvt_store_ops *ops;
    size_t page_bytes;
    size_t batch;                   /* pages per batch */
    int publish;                    /* KVT_PUBLISH_* */

    /* Callers' handles. */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct kvt_store *handle[HANDLES];
    bool busy[HANDLES];
    uint64_t expect[EXPECT_SLOTS];  /* hash | 1 of keys found by a lookup, by hash */
    /* Keys whose local copy was loaded from the store (hash | 1, by hash,
     * nloaded slots, a power of two): a drop does not send them back. A
     * key overwritten since is taken out; one pushed out by another's hash
     * is sent again, which costs bytes, never correctness. */
    uint64_t *loaded;
    size_t nloaded;
    uint64_t lost;                  /* under pool_mu */
    struct kvt_store_stats done;    /* closed handles' counters (none until close) */

    /* The publish queue: slots of one page each, free or ready or sending. */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;         /* the publisher: ready slots, or stop */
    pthread_cond_t idle_cv;         /* drain: nothing ready or sending */
    uint8_t *qbuf;
    kvt_key *qkey;
    uint32_t nslots;
    uint32_t *free_slots, nfree;
    uint32_t *ready, rhead, rlen;   /* a ring of nslots */
    uint32_t sending;
    bool stop;
    uint64_t published, unpublished;
    struct kvt_store *pub;          /* the publisher thread's handle */
    struct kvt_store_stats pub_st;  /* its counters after its last batch */
    struct kvt_store_item *pitems;  /* its batch */
    uint32_t *pslots;
    pthread_t thread;
    bool thread_on;
};

static uint64_t key_hash(const kvt_key *k)
{
    return kvt_key_hash(k) | 1;
}

/* ------------------------------------------------------------- publishing */

static uint32_t take_ready(struct kvt_remote *r, uint32_t *slots, size_t max)
{
    uint32_t n = 0;
    while (r->rlen && n < max) {
        slots[n++] = r->ready[r->rhead];
        r->rhead = (r->rhead + 1) % r->nslots;
        r->rlen--;
    }
    return n;
}

static void *publisher(void *arg)
{
    struct kvt_remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->rlen && !r->stop)
            pthread_cond_wait(&r->work_cv, &r->mu);
        uint32_t n = take_ready(r, r->pslots, r->batch);
        if (!n && r->stop)
            break;
        r->sending = n;
        pthread_mutex_unlock(&r->mu);
        for (uint32_t i = 0; i < n; i++)
            r->pitems[i] = (struct kvt_store_item){
                .key = r->qkey[r->pslots[i]],
                .buf = r->qbuf + (size_t)r->pslots[i] * r->page_bytes,
            };
        int ok = r->ops->put(r->pub, r->pitems, n);
        struct kvt_store_stats st;
        r->ops->stats(r->pub, &st);
        pthread_mutex_lock(&r->mu);
        r->pub_st = st;
        r->published += ok > 0 ? (uint64_t)ok : 0;
        r->unpublished += n - (ok > 0 ? (uint64_t)ok : 0);
        for (uint32_t i = 0; i < n; i++)
            r->free_slots[r->nfree++] = r->pslots[i];
        r->sending = 0;
        if (!r->rlen)
            pthread_cond_broadcast(&r->idle_cv);
    }
    pthread_cond_broadcast(&r->idle_cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int kvt_remote_reserve(struct kvt_remote *r, void **buf)
{
    pthread_mutex_lock(&r->mu);
    uint32_t s = KVT_NONE;
    if (r->nfree && !r->stop)
        s = r->free_slots[--r->nfree];
    else
        r->unpublished++;
    pthread_mutex_unlock(&r->mu);
    *buf = s == KVT_NONE ? NULL : r->qbuf + (size_t)s * r->page_bytes;
    return s == KVT_NONE ? -EAGAIN : (int)s;
}

void kvt_remote_commit(struct kvt_remote *r, int slot, const kvt_key *k, bool send)
{
    pthread_mutex_lock(&r->mu);
    if (send) {
        r->qkey[slot] = *k;
        r->ready[(r->rhead + r->rlen) % r->nslots] = (uint32_t)slot;
        r->rlen++;
        pthread_cond_signal(&r->work_cv);
    } else {
        r->free_slots[r->nfree++] = (uint32_t)slot;
    }
    pthread_mutex_unlock(&r->mu);
}

bool kvt_remote_offer(struct kvt_remote *r, const kvt_key *k, const void *page)
{
    void *buf;
    int s = kvt_remote_reserve(r, &buf);
    if (s < 0)
        return false;
    memcpy(buf, page, r->page_bytes);
    kvt_remote_commit(r, s, k, true);
    return true;
}

void kvt_remote_skip(struct kvt_remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->unpublished++;
    pthread_mutex_unlock(&r->mu);
}

int kvt_remote_publish_mode(const struct kvt_remote *r)
{
    return r->publish;
}

int kvt_remote_drain(struct kvt_remote *r, unsigned timeout_ms)
{
    /* idle_cv runs on CLOCK_MONOTONIC (kvt_remote_open). */
    uint64_t until = kvt_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    struct timespec ts = { .tv_sec = (time_t)(until / 1000000000ull),
                           .tv_nsec = (long)(until % 1000000000ull) };
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while ((r->rlen || r->sending) && rc == 0)
        if (pthread_cond_timedwait(&r->idle_cv, &r->mu, &ts) == ETIMEDOUT &&
            (r->rlen || r->sending))
            rc = -ETIMEDOUT;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ------------------------------------------------------------- handles */

static int take_handle(struct kvt_remote *r)
{
    pthread_mutex_lock(&r->pool_mu);
    for (;;) {
        for (int i = 0; i < HANDLES; i++)
            if (r->handle[i] && !r->busy[i]) {
                r->busy[i] = true;
                pthread_mutex_unlock(&r->pool_mu);
                return i;
            }
        pthread_cond_wait(&r->pool_cv, &r->pool_mu);
    }
}

static void give_handle(struct kvt_remote *r, int h)
{
    pthread_mutex_lock(&r->pool_mu);
    r->busy[h] = false;
    pthread_cond_signal(&r->pool_cv);
    pthread_mutex_unlock(&r->pool_mu);
}

/* The store's op over it[0..n) in batches, on a callers' handle h: the
 * number of items whose res is 1. */
static int in_batches(struct kvt_remote *r, int h, struct kvt_store_item *it, size_t n,
                      int (*op)(struct kvt_store *, struct kvt_store_item *, size_t))
{
    int yes = 0;
    for (size_t at = 0; at < n; at += r->batch) {
        size_t m = n - at < r->batch ? n - at : r->batch;
        int k = op(r->handle[h], it + at, m);
        yes += k > 0 ? k : 0;
    }
    return yes;
}

int kvt_remote_exists(struct kvt_remote *r, struct kvt_store_item *it, size_t n)
{
    int h = take_handle(r);
    int held = in_batches(r, h, it, n, r->ops->exists);
    pthread_mutex_lock(&r->pool_mu);
    for (size_t i = 0; i < n; i++)
        if (it[i].res == 1) {
            uint64_t hv = key_hash(&it[i].key);
            r->expect[hv % EXPECT_SLOTS] = hv;
        }
    pthread_mutex_unlock(&r->pool_mu);
    give_handle(r, h);
    return held;
}

int kvt_remote_load(struct kvt_remote *r, struct kvt_store_item *it, size_t n)
{
    int h = take_handle(r);
    int found = in_batches(r, h, it, n, r->ops->get);
    pthread_mutex_lock(&r->pool_mu);
    for (size_t i = 0; i < n; i++) {
        uint64_t hv = key_hash(&it[i].key);
        uint64_t *slot = &r->expect[hv % EXPECT_SLOTS];
        if (*slot == hv) {
            *slot = 0;
            if (it[i].res != 1)
                r->lost++;
        }
    }
    pthread_mutex_unlock(&r->pool_mu);
    give_handle(r, h);
    return found;
}

void kvt_remote_loaded(struct kvt_remote *r, const kvt_key *k, bool loaded)
{
    uint64_t hv = key_hash(k);
    pthread_mutex_lock(&r->pool_mu);
    uint64_t *slot = &r->loaded[hv & (r->nloaded - 1)];
    if (loaded)
        *slot = hv;
    else if (*slot == hv)
        *slot = 0;
    pthread_mutex_unlock(&r->pool_mu);
}

bool kvt_remote_was_loaded(struct kvt_remote *r, const kvt_key *k)
{
    uint64_t hv = key_hash(k);
    pthread_mutex_lock(&r->pool_mu);
    bool yes = r->loaded[hv & (r->nloaded - 1)] == hv;
    pthread_mutex_unlock(&r->pool_mu);
    return yes;
}

void kvt_remote_stats(struct kvt_remote *r, kvt_stats *out)
{
    struct kvt_store_stats s = { 0 };
    pthread_mutex_lock(&r->pool_mu);
    for (int i = 0; i < HANDLES; i++)
        if (r->handle[i]) {
            struct kvt_store_stats one;
            r->ops->stats(r->handle[i], &one);
            kvt_store_stats_add(&s, &one);
        }
    out->remote_lost = r->lost;
    pthread_mutex_unlock(&r->pool_mu);
    pthread_mutex_lock(&r->mu);
    /* The publisher's handle is its thread's: its counters as of its last
     * batch, which that thread copies here. */
    struct kvt_store_stats p = r->pub_st;
    out->remote_published = r->published;
    out->remote_unpublished = r->unpublished;
    pthread_mutex_unlock(&r->mu);
    out->remote_hits = s.hits;
    out->remote_misses = s.misses;
    out->remote_bytes_in = s.bytes_in + p.bytes_in;
    out->remote_bytes_out = s.bytes_out + p.bytes_out;
    out->remote_corrupt = s.corrupt + p.corrupt;
    out->remote_timeouts = s.timeouts + p.timeouts;
    out->remote_redirects = s.redirects + p.redirects;
    out->remote_errors = s.errors + p.errors;
    kvt_store_stats_add(&s, &p);
    out->remote_nodes = s.nodes;
    out->remote_nodes_down = s.nodes_down;
}

/* ------------------------------------------------------------- open, close */

static int open_queue(struct kvt_remote *r, size_t bytes)
{
    /* The queue holds what remote_queue_bytes says, at least a page; a
     * batch is never more than the queue. */
    size_t n = bytes / r->page_bytes;
    if (n < 1)
        n = 1;
    if (n > UINT32_MAX / 2)
        n = UINT32_MAX / 2;
    if (r->batch > n)
        r->batch = n;
    r->nslots = (uint32_t)n;
    r->qbuf = malloc(n * r->page_bytes);
    r->qkey = calloc(n, sizeof(*r->qkey));
    r->free_slots = malloc(n * sizeof(uint32_t));
    r->ready = malloc(n * sizeof(uint32_t));
    r->pitems = calloc(r->batch, sizeof(*r->pitems));
    r->pslots = calloc(r->batch, sizeof(*r->pslots));
    if (!r->qbuf || !r->qkey || !r->free_slots || !r->ready || !r->pitems || !r->pslots)
        return -ENOMEM;
    for (uint32_t i = 0; i < r->nslots; i++)
        r->free_slots[r->nfree++] = r->nslots - 1 - i;
    return 0;
}

static void free_remote(struct kvt_remote *r)
{
    for (int i = 0; i < HANDLES; i++)
        if (r->handle[i])
            r->ops->close(r->handle[i]);
    if (r->pub)
        r->ops->close(r->pub);
    free(r->qbuf);
    free(r->qkey);
    free(r->free_slots);
    free(r->ready);
    free(r->pitems);
    free(r->pslots);
    free(r->loaded);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->pool_mu);
    pthread_cond_destroy(&r->work_cv);
    pthread_cond_destroy(&r->idle_cv);
    pthread_cond_destroy(&r->pool_cv);
    free(r);
}

int kvt_remote_open(const kvt_config *cfg, const struct kvt_open_with *with,
                    struct kvt_remote **out)
{
    *out = NULL;
    struct kvt_remote *r = calloc(1, sizeof(*r));
    if (!r)
        return kvt_fail(-ENOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->pool_mu, NULL);
    pthread_cond_init(&r->work_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&r->pool_cv, NULL);
    r->ops = &kvt_remote_store_ops;
    r->page_bytes = cfg->page_bytes;
    r->publish = cfg->remote_publish;
    r->batch = BATCH_BYTES / cfg->page_bytes ? BATCH_BYTES / cfg->page_bytes : 1;
    struct kvt_store_params p = {
        .page_bytes = cfg->page_bytes,
        .fingerprint = cfg->fingerprint,
        .url = cfg->remote_url,
        .prefix = cfg->remote_prefix,
        .auth_file = cfg->remote_auth_file,
        .timeout_ms = cfg->remote_timeout_ms ? cfg->remote_timeout_ms : DEFAULT_TIMEOUT_MS,
        .ttl_s = cfg->remote_ttl_s,
        .kv = with->remote_kv,
        .kv_arg = with->remote_kv_arg,
    };
    char err[512] = "";
    int e = 0;
    for (int i = 0; i < HANDLES && !e; i++)
        e = r->ops->open(&p, &r->handle[i], err, sizeof(err));
    if (!e)
        e = r->ops->open(&p, &r->pub, err, sizeof(err));
    if (e) {
        free_remote(r);
        return kvt_fail(e, "remote tier: %s", err);
    }
    /* As many as the local tiers hold pages, in a power of two, 2^20 at most. */
    size_t local = (cfg->hbm_bytes + cfg->dram_bytes + cfg->ssd_bytes) / cfg->page_bytes;
    for (r->nloaded = 1024; r->nloaded < local && r->nloaded < (1u << 20);)
        r->nloaded *= 2;
    r->loaded = calloc(r->nloaded, sizeof(uint64_t));
    e = r->loaded ? 0 : -ENOMEM;
    if (!e)
        e = open_queue(r, cfg->remote_queue_bytes ? cfg->remote_queue_bytes : DEFAULT_QUEUE_BYTES);
    if (!e && pthread_create(&r->thread, NULL, publisher, r) != 0)
        e = -EAGAIN;
    if (e) {
        free_remote(r);
        return kvt_fail(e, "remote tier: %s", e == -ENOMEM ? "out of memory for the publish queue"
                                                           : "cannot start its thread");
    }
    r->thread_on = true;
    *out = r;
    return 0;
}

void kvt_remote_close(struct kvt_remote *r, unsigned timeout_ms)
{
    if (!r)
        return;
    /* What was queued is sent first, within the time a few calls may take:
     * a close never waits on a cluster that does not answer. */
    (void)kvt_remote_drain(r, timeout_ms);
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    r->rlen = 0;
    pthread_cond_broadcast(&r->work_cv);
    pthread_mutex_unlock(&r->mu);
    if (r->thread_on)
        pthread_join(r->thread, NULL);
    free_remote(r);
}
