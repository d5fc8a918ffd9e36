/*
 * loop.c — the requests of the trace, each as an inference engine's prefix
 * cache serves it: kvt_exists on the chain (the hit prefix), kvt_get of the
 * hit blocks, kvt_put of the rest, every byte read back checked.
 *
 * The hit blocks are fetched with one kvt_get per tier that serves them
 * (kvt_exists's where: the DRAM-served ones, then the SSD-served ones, each
 * in chain order), so the SSD's loads are timed apart from DRAM's copies:
 * one mixed call would time them together. The new blocks go in one
 * kvt_put. Calls longer than the chunk buffer (chains of more than 256 MiB)
 * are cut into chunks.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/replay/replay_priv.h"

static int call_failed(struct replay_ctx *x, const char *call, uint64_t req, int rc)
{
    pthread_mutex_lock(&x->mu);
    if (!x->said)
        cli_error("replay", 1, "request %llu (line %u): %s: %s (%s)", (unsigned long long)req + 1,
                  x->tr.req[req].line, call, kvt_strerror(rc), kvt_last_error());
    x->said = true;
    pthread_mutex_unlock(&x->mu);
    return rc;
}

/* A call of kind k starts and ends: the kind's clock runs while one does
 * (struct replay_busy). */
static double span_begin(struct replay_ctx *x, enum replay_span k)
{
    pthread_mutex_lock(&x->mu);
    double t = util_now();
    if (x->busy.running[k]++ == 0)
        x->busy.since[k] = t;
    pthread_mutex_unlock(&x->mu);
    return t;
}

static double *span_clock(struct replay_result *r, enum replay_span k)
{
    switch (k) {
    case SPAN_EXISTS: return &r->exists_s;
    case SPAN_GET_DRAM: return &r->get_s[KVT_TIER_DRAM];
    case SPAN_GET_SSD: return &r->get_s[KVT_TIER_SSD];
    default: return &r->put_s;
    }
}

/* The call's end is read before the lock: a wait for it is not the call's. */
static double span_end(struct replay_ctx *x, enum replay_span k)
{
    double t = util_now();
    pthread_mutex_lock(&x->mu);
    if (--x->busy.running[k] == 0)
        *span_clock(x->r, k) += t - x->busy.since[k];
    pthread_mutex_unlock(&x->mu);
    return t;
}

/* Checks the k blocks just read into the chunk buffers (chain positions
 * pos[0..k)), those found. */
static void check_blocks(struct replay_ctx *x, struct replay_worker *w, const uint32_t *pos,
                         uint32_t k)
{
    struct replay_result *r = &w->part;
    double c0 = util_thread_cpu();
    for (uint32_t i = 0; i < k; i++) {
        size_t off;
        if (!w->cfound[i])
            continue;
        const kvt_key *key = &w->keys[pos[i]];
        if (!replay_check(key, w->ptrs[i], x->bb, &off) && r->bad_blocks++ == 0) {
            r->bad_id = key->id;
            r->bad_index = key->index;
            r->bad_offset = off;
        }
        r->bytes_verified += x->bb;
    }
    r->client_cpu_s += util_thread_cpu() - c0;
}

/* Room in the record of note_same_reads for a call of k more blocks. */
static bool same_reads_room(struct replay_ctx *x, uint32_t k)
{
    if (x->nsame_offs + k > x->same_offs_cap) {
        size_t nc = (x->nsame_offs + k) * 2;
        uint64_t *no = realloc(x->same_offs, nc * sizeof(*no));
        if (!no)
            return false;
        x->same_offs = no;
        x->same_offs_cap = nc;
    }
    if (x->nsame_sizes == x->same_sizes_cap) {
        size_t nc = x->same_sizes_cap ? x->same_sizes_cap * 2 : 1024;
        uint32_t *ns = realloc(x->same_sizes, nc * sizeof(*ns));
        if (!ns)
            return false;
        x->same_sizes = ns;
        x->same_sizes_cap = nc;
    }
    return true;
}

/* Notes where the k blocks of an SSD-served call lie now (untimed), for the
 * raw replay of the same reads (raw.c). Blocks in other segments than the
 * first are left out; without memory the record just stops growing. */
static void note_same_reads(struct replay_ctx *x, struct replay_worker *w, uint32_t k)
{
    pthread_mutex_lock(&x->mu);
    uint32_t n = 0;
    if (same_reads_room(x, k)) {
        for (uint32_t i = 0; i < k; i++) {
            uint32_t seg;
            uint64_t off;
            if (kvt_tool_ssd_where(x->e, &w->ckeys[i], &seg, &off) == 0 && seg == 0)
                x->same_offs[x->nsame_offs + n++] = off;
        }
    }
    if (n) {
        x->nsame_offs += n;
        x->same_sizes[x->nsame_sizes++] = n;
    }
    pthread_mutex_unlock(&x->mu);
}

/* kvt_get of the hit blocks at chain positions sel[0..m), served from
 * `tier` (SSD, or DRAM for DRAM and HBM); found[] set by position. */
static int get_blocks(struct replay_ctx *x, struct replay_worker *w, uint64_t req, uint32_t m,
                      int tier, double *spent)
{
    struct replay_result *r = &w->part;
    enum replay_span k_span = tier == KVT_TIER_SSD ? SPAN_GET_SSD : SPAN_GET_DRAM;
    for (uint32_t at = 0; at < m; at += x->chunk) {
        uint32_t k = m - at < x->chunk ? m - at : x->chunk;
        for (uint32_t i = 0; i < k; i++) {
            w->ckeys[i] = w->keys[w->sel[at + i]];
            w->ptrs[i] = w->buf + (size_t)i * x->bb;
        }
        if (tier == KVT_TIER_SSD)
            note_same_reads(x, w, k);
        double t0 = span_begin(x, k_span);
        int rc = kvt_get(x->e, w->ckeys, k, w->ptrs, 0, w->cfound);
        double t1 = span_end(x, k_span);
        if (rc < 0 && rc != KVT_ECORRUPT)
            return call_failed(x, "kvt_get", req, rc);
        *spent += t1 - t0;
        r->get_calls[tier]++;
        if (x->o->trace_out)
            replay_trace_span(x, w, tier == KVT_TIER_SSD ? "get ssd" : "get dram", t0, t1, req, k,
                              m);
        for (uint32_t i = 0; i < k; i++) {
            w->found[w->sel[at + i]] = w->cfound[i];
            r->get_bytes[tier] += w->cfound[i] ? x->bb : 0;
        }
        check_blocks(x, w, w->sel + at, k);
    }
    return 0;
}

/* The hit prefix of h blocks, fetched and checked; returns the blocks of it
 * that came back (a block kvt_exists named but kvt_get did not find ends the
 * usable prefix there), or a negative error. */
static int load_prefix(struct replay_ctx *x, struct replay_worker *w, uint64_t req, uint32_t h,
                       double *spent)
{
    static const int classes[2] = { KVT_TIER_DRAM, KVT_TIER_SSD };
    for (int c = 0; c < 2; c++) {
        uint32_t m = 0;
        for (uint32_t j = 0; j < h; j++)
            if ((w->where[j] == KVT_TIER_SSD) == (classes[c] == KVT_TIER_SSD))
                w->sel[m++] = j;
        int rc = m ? get_blocks(x, w, req, m, classes[c], spent) : 0;
        if (rc < 0)
            return rc;
    }
    uint32_t got = 0;
    while (got < h && w->found[got])
        got++;
    w->part.lost_hits += h - got;
    return (int)got;
}

/* Blocks blk[0..k) were used and are stored. */
static void lru_touch_all(struct replay_ctx *x, const uint32_t *blk, uint32_t k)
{
    pthread_mutex_lock(&x->mu);
    for (uint32_t i = 0; i < k; i++)
        replay_lru_touch(&x->lru, blk[i]);
    pthread_mutex_unlock(&x->mu);
}

/* Tries of a put that other requests' calls keep from storing
 * (--concurrency): a get still reading a block it missed after the
 * engine's own wait (-EBUSY). A put waits in the engine for such gets and
 * for slots other calls hold (api/buffers.c), up to 10 s a call: a few
 * tries, not many. */
#define PUT_BUSY_TRIES 3

/* Puts the k blocks at ptrs[0..k) under ckeys[0..k); on KVT_EFULL the
 * caller's eviction makes room (evict.c) and the blocks not stored go
 * again. With requests served at once, a block this one missed may have
 * been stored meanwhile by another, which may be reading it (the engine
 * waits; -EBUSY only if the read outlasts that, the batches before the one
 * that met it stored, docs/replay.md): the blocks present are kept, the
 * others put again. Returns 0, 1 when no room could be made (the
 * rest stays out), or an error. */
static int put_chunk(struct replay_ctx *x, struct replay_worker *w, uint64_t req, uint32_t k,
                     const uint32_t *blk)
{
    uint32_t cb[4096];
    const uint32_t *b = blk;
    for (unsigned busy = 0;;) {
        double t0 = span_begin(x, SPAN_PUT);
        int rc = kvt_put(x->e, w->ckeys, k, (const void *const *)w->ptrs, 0);
        double t1 = span_end(x, SPAN_PUT);
        if (x->o->trace_out)
            replay_trace_span(x, w, "put", t0, t1, req, 0, k);
        if (rc == 0) {
            lru_touch_all(x, b, k);
            return 0;
        }
        if (rc != KVT_EFULL && (rc != -EBUSY || x->o->concurrency < 2))
            return call_failed(x, "kvt_put", req, rc);
        /* The batches before the full or busy one are stored: keep those,
         * put the others again (once room is made). */
        int e = kvt_exists(x->e, w->ckeys, k, w->cwhere);
        if (e < 0)
            return call_failed(x, "kvt_exists", req, e);
        uint32_t miss = 0;
        pthread_mutex_lock(&x->mu);
        for (uint32_t i = 0; i < k; i++) {
            if (w->cwhere[i] != KVT_TIER_NONE) {
                replay_lru_touch(&x->lru, b[i]);
                continue;
            }
            w->ckeys[miss] = w->ckeys[i];
            w->ptrs[miss] = w->ptrs[i];
            cb[miss++] = b[i];
        }
        pthread_mutex_unlock(&x->mu);
        if (!miss)
            return 0; /* stored meanwhile by another request */
        if (rc == -EBUSY && ++busy == PUT_BUSY_TRIES) {
            w->part.unstored += miss;
            return 1;
        }
        k = miss;
        b = cb;
        if (rc == -EBUSY)
            continue;
        /* Room for exactly the blocks left out, as a cache that evicts
         * on insert would make: the engine holds HBM + DRAM + SSD pages. */
        kvt_stats st;
        kvt_get_stats(x->e, &st);
        uint64_t cap = st.capacity_pages[0] + st.capacity_pages[1] + st.capacity_pages[2];
        uint64_t room = cap > st.pages ? cap - st.pages : 0;
        uint32_t need = miss > room ? (uint32_t)(miss - room) : 1;
        pthread_mutex_lock(&x->mu);
        int d = replay_evict(x, need);
        pthread_mutex_unlock(&x->mu);
        if (d < 0)
            return d;
        if (d == 0) {
            w->part.unstored += miss;
            return 1;
        }
    }
}

/* The blocks at chain positions [from, n) of request req, made and put. */
static int store_rest(struct replay_ctx *x, struct replay_worker *w, uint64_t req, uint32_t from,
                      uint32_t n)
{
    const struct pfx_req *q = &x->tr.req[req];
    uint32_t blk[4096];
    for (uint32_t at = from; at < n; at += x->chunk) {
        uint32_t k = n - at < x->chunk ? n - at : x->chunk;
        double c0 = util_thread_cpu();
        for (uint32_t i = 0; i < k; i++) {
            w->ckeys[i] = w->keys[at + i];
            w->ptrs[i] = w->buf + (size_t)i * x->bb;
            blk[i] = x->tr.block[q->first + at + i];
            replay_fill(&w->ckeys[i], w->ptrs[i], x->bb);
        }
        w->part.client_cpu_s += util_thread_cpu() - c0;
        int rc = put_chunk(x, w, req, k, blk);
        if (rc)
            return rc < 0 ? rc : 0;
    }
    return 0;
}

/* The modeled time to first token of a request whose hit prefix of hit
 * blocks loaded in load_s (at the replay's block size). */
static void model_ttft(struct replay_ctx *x, struct replay_worker *w, uint64_t req, uint32_t hit,
                       double load_s)
{
    struct replay_result *r = &w->part;
    const struct pfx_req *q = &x->tr.req[req];
    double rate = x->o->prefill_tps;
    uint64_t in = q->in_tokens, ht = (uint64_t)hit * x->tr.block_tokens;
    ht = ht < in ? ht : in;
    double load = load_s * x->r->scale; /* the model's blocks move at the speed measured */
    double t_load = load + (double)(in - ht) / rate, t_re = (double)in / rate;
    x->ttft_load[req] = (float)t_load;
    x->ttft_recompute[req] = (float)t_re;
    r->ttft_load_s += t_load;
    r->ttft_recompute_s += t_re;
    r->hit_tokens += ht;
    r->in_tokens += in;
    if (hit) {
        r->ttft_requests++;
        r->load_model_s += load;
        r->recompute_hit_s += (double)ht / rate;
        r->load_won += load < (double)ht / rate;
    }
}

/* One request, by worker w. */
static int serve_blocks(struct replay_ctx *x, struct replay_worker *w, uint64_t req)
{
    struct replay_result *r = &w->part;
    const struct pfx_req *q = &x->tr.req[req];
    for (uint32_t j = 0; j < q->n; j++) {
        uint32_t b = x->tr.block[q->first + j];
        w->keys[j] = replay_key(x->hash_of[b], x->depth[b]);
        w->found[j] = 0;
    }
    double t0 = span_begin(x, SPAN_EXISTS);
    int h = kvt_exists(x->e, w->keys, q->n, w->where);
    double t1 = span_end(x, SPAN_EXISTS);
    if (h < 0)
        return call_failed(x, "kvt_exists", req, h);
    if (x->o->trace_out)
        replay_trace_span(x, w, "exists", t0, t1, req, (uint32_t)h, q->n);
    pthread_mutex_lock(&x->mu);
    for (uint32_t j = 0; j < q->n; j++) {
        if (w->where[j] == KVT_TIER_NONE)
            replay_lru_forget(&x->lru, x->tr.block[q->first + j]);
        else if (j > (uint32_t)h)
            r->rewritten++; /* stored, but past a missing block: put again */
    }
    pthread_mutex_unlock(&x->mu);
    double load_s = 0;
    int got = load_prefix(x, w, req, (uint32_t)h, &load_s);
    if (got < 0)
        return got;
    lru_touch_all(x, x->tr.block + q->first, (uint32_t)got);
    for (int j = 0; j < got; j++)
        r->hits_by_tier[w->where[j]]++;
    r->hit_blocks += (uint64_t)got;
    r->refs += q->n;
    model_ttft(x, w, req, (uint32_t)got, load_s);
    return store_rest(x, w, req, (uint32_t)got, q->n);
}

/* The request's blocks are in use while it is served: the caller's
 * eviction leaves them (evict.c). */
static void mark_users(struct replay_ctx *x, const struct pfx_req *q, int d)
{
    pthread_mutex_lock(&x->mu);
    for (uint32_t j = 0; j < q->n; j++)
        x->lru.users[x->tr.block[q->first + j]] += (uint32_t)d;
    pthread_mutex_unlock(&x->mu);
}

static int serve(struct replay_ctx *x, struct replay_worker *w, uint64_t req)
{
    const struct pfx_req *q = &x->tr.req[req];
    mark_users(x, q, 1);
    int rc = serve_blocks(x, w, req);
    mark_users(x, q, -1);
    return rc;
}

static bool progress_on(const struct replay_opts *o)
{
    return o->progress == 1 || (o->progress == -1 && isatty(2));
}

static void progress(struct replay_ctx *x, uint64_t done, uint64_t n, double elapsed)
{
    const struct replay_result *r = x->r;
    double hit = r->refs ? (double)r->hit_blocks / (double)r->refs : 0;
    if (isatty(2)) {
        int w = 30, fill = (int)((double)done / (double)n * w);
        fprintf(stderr, "\r  [%.*s%*s] %llu/%llu requests  hits %.1f%%  %.0f s ", fill,
                "##############################", w - fill, "", (unsigned long long)done,
                (unsigned long long)n, 100 * hit, elapsed);
        if (done == n)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "  %llu/%llu requests  hits %.1f%%  %.1f s\n", (unsigned long long)done,
                (unsigned long long)n, 100 * hit, elapsed);
    }
    fflush(stderr);
}

double replay_due_s(uint64_t t_ms, uint64_t first_ms, double speed)
{
    return t_ms > first_ms ? (double)(t_ms - first_ms) / 1000.0 / speed : 0;
}

/* --speed S: request req starts when it is due (replay_due_s). */
static void pace(struct replay_ctx *x, struct replay_worker *w, uint64_t req, double start)
{
    double s = x->o->speed;
    if (s <= 0)
        return;
    double at = start + replay_due_s(x->tr.req[req].t_ms, x->tr.req[0].t_ms, s);
    double late = util_now() - at;
    if (late < 0) {
        cli_sleep(-late); /* in slices: never a huge time_t; cut short by SIGINT, SIGTERM */
    } else if (late > 1e-3) {
        w->part.late_requests++;
        w->part.max_late_s = late;
    }
}

static int cmp_float(const void *a, const void *b)
{
    float p = *(const float *)a, q = *(const float *)b;
    return (p > q) - (p < q);
}

static double pct(float *v, uint64_t n, double p)
{
    if (!n)
        return 0;
    return v[(uint64_t)(p * (double)(n - 1) + 0.5)];
}

static void ttft_percentiles(struct replay_ctx *x, uint64_t n)
{
    struct replay_result *r = x->r;
    qsort(x->ttft_load, n, sizeof(float), cmp_float);
    qsort(x->ttft_recompute, n, sizeof(float), cmp_float);
    r->ttft_load_p50 = pct(x->ttft_load, n, 0.5);
    r->ttft_load_p90 = pct(x->ttft_load, n, 0.9);
    r->ttft_recompute_p50 = pct(x->ttft_recompute, n, 0.5);
    r->ttft_recompute_p90 = pct(x->ttft_recompute, n, 0.9);
}

/* A served request's counters into the result (under x->mu). */
static void merge(struct replay_result *r, const struct replay_result *p)
{
    if (p->bad_blocks && !r->bad_blocks) {
        r->bad_id = p->bad_id;
        r->bad_index = p->bad_index;
        r->bad_offset = p->bad_offset;
    }
    r->bad_blocks += p->bad_blocks;
    r->bytes_verified += p->bytes_verified;
    r->hit_blocks += p->hit_blocks;
    r->hit_tokens += p->hit_tokens;
    r->lost_hits += p->lost_hits;
    r->refs += p->refs;
    r->in_tokens += p->in_tokens;
    r->rewritten += p->rewritten;
    r->unstored += p->unstored;
    for (int t = 0; t < KVT_TIERS; t++) {
        r->hits_by_tier[t] += p->hits_by_tier[t];
        r->get_bytes[t] += p->get_bytes[t];
        r->get_calls[t] += p->get_calls[t];
    }
    r->client_cpu_s += p->client_cpu_s;
    r->late_requests += p->late_requests;
    r->max_late_s = p->max_late_s > r->max_late_s ? p->max_late_s : r->max_late_s;
    r->ttft_requests += p->ttft_requests;
    r->load_won += p->load_won;
    r->ttft_load_s += p->ttft_load_s;
    r->ttft_recompute_s += p->ttft_recompute_s;
    r->load_model_s += p->load_model_s;
    r->recompute_hit_s += p->recompute_hit_s;
}

/* After request req: its counters in, progress shown (under x->mu). */
static void request_done(struct replay_ctx *x, struct replay_worker *w)
{
    struct replay_result *r = x->r;
    merge(r, &w->part);
    memset(&w->part, 0, sizeof(w->part));
    uint64_t done = ++x->done, n = r->requests;
    double t = util_now();
    if (x->o->trace_out && (done % 64 == 0 || done == n))
        trace_counter(&x->trace, "prefix hits", t, "hit_fraction",
                      r->refs ? (double)r->hit_blocks / (double)r->refs : 0);
    if (progress_on(x->o) && (t - x->shown >= (isatty(2) ? 0.25 : 10) || done == n)) {
        progress(x, done, n, t - x->start);
        x->shown = t;
    }
}

/* A worker: the next request in trace order, until none is left or one
 * failed. */
static void *worker_main(void *arg)
{
    struct replay_worker *w = arg;
    struct replay_ctx *x = w->x;
    for (;;) {
        pthread_mutex_lock(&x->mu);
        uint64_t i = x->next;
        bool go = x->rc == 0 && i < x->r->requests && !cli_stopped(); /* SIGINT, SIGTERM */
        x->next += go;
        pthread_mutex_unlock(&x->mu);
        if (!go)
            break;
        pace(x, w, i, x->start);
        int rc = serve(x, w, i);
        pthread_mutex_lock(&x->mu);
        if (rc && !x->rc)
            x->rc = rc;
        request_done(x, w);
        pthread_mutex_unlock(&x->mu);
    }
    return NULL;
}

/* Serves every request with o->concurrency workers: one in this thread,
 * the others in threads of their own. */
static int run_workers(struct replay_ctx *x)
{
    unsigned n = x->nw, started = 1;
    for (unsigned i = 0; i < n; i++) {
        x->w[i].x = x;
        x->w[i].tid = i ? TRACE_ATTN_TID + i : 1; /* the first on the caller's track */
    }
    for (; started < n; started++) {
        if (pthread_create(&x->w[started].thread, NULL, worker_main, &x->w[started])) {
            cli_error("replay", 1, "cannot start worker thread %u of %u", started + 1, n);
            pthread_mutex_lock(&x->mu);
            x->rc = x->rc ? x->rc : -EAGAIN;
            x->said = true;
            pthread_mutex_unlock(&x->mu);
            break;
        }
    }
    worker_main(&x->w[0]);
    for (unsigned i = 1; i < started; i++)
        pthread_join(x->w[i].thread, NULL);
    return x->rc;
}

int replay_requests(struct replay_ctx *x)
{
    struct replay_result *r = x->r;
    kvt_stats s0;
    kvt_get_stats(x->e, &s0);
    double cpu0 = util_process_cpu();
    x->start = x->shown = util_now();
    int rc = run_workers(x);
    r->wall_s = util_now() - x->start;
    r->cpu_s = util_process_cpu() - cpu0;
    kvt_get_stats(x->e, &r->end);
    uint64_t *d = (uint64_t *)&r->delta;
    const uint64_t *a = (const uint64_t *)&r->end, *b = (const uint64_t *)&s0;
    for (size_t i = 0; i < sizeof(kvt_stats) / sizeof(uint64_t); i++)
        d[i] = a[i] - b[i]; /* counters; the report reads levels from end */
    ttft_percentiles(x, r->requests);
    r->verified = rc == 0 && r->bad_blocks == 0;
    return rc;
}
