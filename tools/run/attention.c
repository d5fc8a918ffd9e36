/*
 * attention.c — grouped-query decode attention on the CPU over KV pages,
 * and the small thread team that splits it by kv head.
 *
 * Vectorised with GCC/Clang vector extensions (8 floats: two SSE registers,
 * one AVX register), no -ffast-math and no FMA contraction
 * (-ffp-contract=off), exponentials by attn_exp (tools/run/attn_math.h): every
 * sum has a fixed association, so the result is a function of the values
 * alone, and the scalar helpers of attn_math.h (the order a GPU kernel
 * follows) give the same bits. Bit-exact verification in
 * `kvtier run` depends on that; do not add reductions whose order depends
 * on alignment, thread count or where a page sits.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tools/run/attention.h"
#include "tools/run/attn_math.h"
#include "tools/cli.h"

/* 8-float vectors in static functions only: no ABI is crossed. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8f __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint32_t v8u __attribute__((vector_size(32)));

static inline v8f ld8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* Eight bf16 elements widened to fp32: shifted into the upper halves. */
static inline v8f ld8h(const uint16_t *p)
{
    v8h h;
    memcpy(&h, p, sizeof h);
    v8u u = __builtin_convertvector(h, v8u) << 16;
    v8f v;
    memcpy(&v, &u, sizeof v);
    return v;
}
/* Eight K or V elements from element i of rows of either type: bf16 is a
 * constant in every caller, so each caller compiles to one kind of load. */
static inline __attribute__((always_inline)) v8f ld8kv(const void *p, size_t i, bool bf16)
{
    return bf16 ? ld8h((const uint16_t *)p + i) : ld8((const float *)p + i);
}
static inline void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline v8f splat8(float x) { return (v8f){ x, x, x, x, x, x, x, x }; }
static inline float hsum8(const v8f *pv)
{
    float v[8];
    memcpy(v, pv, sizeof v);
    return attn_hsum8(v);
}

#define ATTN_MAX_Q_HEADS 1024u

int attn_shape_check(const struct attn_shape *s)
{
    if (!s->q_heads || !s->kv_heads || !s->head_dim || !s->page_tokens || s->bf16 > 1)
        return -EINVAL;
    if (s->head_dim % 8 || s->head_dim > ATTN_MAX_HEAD_DIM || s->q_heads % s->kv_heads ||
        s->q_heads / s->kv_heads > ATTN_MAX_GROUP || s->q_heads > ATTN_MAX_Q_HEADS ||
        s->page_tokens > ATTN_MAX_PAGE_TOKENS)
        return -EINVAL;
    return 0;
}

float attn_elem(const struct attn_shape *s, const void *page, size_t i)
{
    return attn_kv(page, i, (int)s->bf16);
}

void attn_store(const struct attn_shape *s, void *page, size_t i, float v)
{
    if (!s->bf16) {
        ((float *)page)[i] = v;
        return;
    }
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even (no NaN is ever stored) */
    ((uint16_t *)page)[i] = (uint16_t)(u >> 16);
}

/* Scores of the G query heads of one kv head against nt K rows. */
static inline __attribute__((always_inline)) void
page_scores(const float *qg, const void *k, uint32_t nt, uint32_t G, uint32_t D, uint32_t pt,
            float scale, float *sc, bool bf16)
{
    for (uint32_t t = 0; t < nt; t++) {
        size_t kr = (size_t)t * D;
        for (uint32_t g = 0; g < G; g++) {
            const float *qr = qg + (size_t)g * D;
            v8f a = splat8(0);
            for (uint32_t c = 0; c < D; c += 8)
                a += ld8(qr + c) * ld8kv(k, kr + c, bf16);
            sc[g * pt + t] = hsum8(&a) * scale;
        }
    }
}

/* Folds one page's scores and V rows into a q head's running state: the
 * softmax state by attn_math.h's helper (the GPU kernel's too), then the
 * output, eight elements at a time, in the same per-element order. */
static inline __attribute__((always_inline)) void
page_fold(const float *sc, const void *v, uint32_t nt, uint32_t D, float *m, float *l,
          float *acc, bool bf16)
{
    float c, p[ATTN_MAX_PAGE_TOKENS];
    attn_fold_stats(sc, nt, m, l, &c, p);
    v8f cv = splat8(c);
    for (uint32_t d = 0; d < D; d += 8)
        st8(acc + d, ld8(acc + d) * cv);
    for (uint32_t t = 0; t < nt; t++) {
        v8f pv = splat8(p[t]);
        size_t vr = (size_t)t * D;
        for (uint32_t d = 0; d < D; d += 8)
            st8(acc + d, ld8(acc + d) + pv * ld8kv(v, vr + d, bf16));
    }
}

/* One page for kv heads [h0, h1): every q head's scores, then its fold. */
static inline __attribute__((always_inline)) void
page_heads(const struct attn_shape *s, const float *q, const void *p, uint32_t nt, uint32_t h0,
           uint32_t h1, float scale, float *sc, float *m, float *l, float *out, bool bf16)
{
    const uint32_t G = s->q_heads / s->kv_heads, D = s->head_dim, pt = s->page_tokens;
    const size_t eb = bf16 ? 2 : 4;
    const char *base = p;
    for (uint32_t h = h0; h < h1; h++) {
        page_scores(q + (size_t)h * G * D, base + attn_row(s, 0, h, 0) * eb, nt, G, D, pt, scale,
                    sc, bf16);
        for (uint32_t g = 0; g < G; g++) {
            uint32_t qh = h * G + g;
            page_fold(sc + g * pt, base + attn_row(s, 1, h, 0) * eb, nt, D, &m[qh], &l[qh],
                      out + (size_t)qh * D, bf16);
        }
    }
}

static void page_heads_f32(const struct attn_shape *s, const float *q, const void *p, uint32_t nt,
                           uint32_t h0, uint32_t h1, float scale, float *sc, float *m, float *l,
                           float *out)
{
    page_heads(s, q, p, nt, h0, h1, scale, sc, m, l, out, false);
}

static void page_heads_bf16(const struct attn_shape *s, const float *q, const void *p,
                            uint32_t nt, uint32_t h0, uint32_t h1, float scale, float *sc,
                            float *m, float *l, float *out)
{
    page_heads(s, q, p, nt, h0, h1, scale, sc, m, l, out, true);
}

void attn_begin(const struct attn_shape *s, uint32_t h0, uint32_t h1, float *m, float *l,
                float *out)
{
    const uint32_t G = s->q_heads / s->kv_heads, D = s->head_dim;
    for (uint32_t qh = h0 * G; qh < h1 * G; qh++) {
        m[qh] = -INFINITY;
        l[qh] = 0;
        memset(out + (size_t)qh * D, 0, D * sizeof(float));
    }
}

void attn_pages(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t pg0,
                uint32_t pg1, uint32_t h0, uint32_t h1, attn_page_fn get, void *ctx,
                void *scratch, float *m, float *l, float *out)
{
    const uint32_t pt = s->page_tokens;
    const float scale = (float)(1.0 / sqrt((double)s->head_dim));
    float sc[ATTN_MAX_GROUP * ATTN_MAX_PAGE_TOKENS];
    for (uint32_t pg = pg0; pg < pg1; pg++) {
        const void *p = get(ctx, pg, h0, h1, scratch);
        uint32_t nt = n_tokens - pg * pt < pt ? n_tokens - pg * pt : pt;
        if (s->bf16)
            page_heads_bf16(s, q, p, nt, h0, h1, scale, sc, m, l, out);
        else
            page_heads_f32(s, q, p, nt, h0, h1, scale, sc, m, l, out);
    }
}

void attn_end(const struct attn_shape *s, uint32_t h0, uint32_t h1, const float *l, float *out)
{
    const uint32_t G = s->q_heads / s->kv_heads, D = s->head_dim;
    for (uint32_t qh = h0 * G; qh < h1 * G; qh++) {
        v8f lv = splat8(l[qh]);
        float *o = out + (size_t)qh * D;
        for (uint32_t d = 0; d < D; d += 8)
            st8(o + d, ld8(o + d) / lv);
    }
}

void attn_decode(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t h0,
                 uint32_t h1, attn_page_fn get, void *ctx, void *scratch, float *out)
{
    float m[ATTN_MAX_Q_HEADS], l[ATTN_MAX_Q_HEADS];
    attn_begin(s, h0, h1, m, l, out);
    attn_pages(s, q, n_tokens, 0, (n_tokens + s->page_tokens - 1) / s->page_tokens, h0, h1, get,
               ctx, scratch, m, l, out);
    attn_end(s, h0, h1, l, out);
}

void attn_naive(const struct attn_shape *s, const float *q, uint32_t n_tokens,
                const void *const *pages, double *out)
{
    const uint32_t G = s->q_heads / s->kv_heads, D = s->head_dim, pt = s->page_tokens;
    double *w = malloc((size_t)n_tokens * sizeof(double));
    if (!w)
        abort();
    for (uint32_t qh = 0; qh < s->q_heads; qh++) {
        uint32_t h = qh / G;
        double mx = -INFINITY, sum = 0;
        for (uint32_t t = 0; t < n_tokens; t++) {
            size_t k = attn_row(s, 0, h, t % pt);
            double d = 0;
            for (uint32_t i = 0; i < D; i++)
                d += (double)q[(size_t)qh * D + i] * attn_elem(s, pages[t / pt], k + i);
            w[t] = d / sqrt((double)D);
            if (w[t] > mx)
                mx = w[t];
        }
        for (uint32_t t = 0; t < n_tokens; t++)
            sum += (w[t] = exp(w[t] - mx));
        for (uint32_t i = 0; i < D; i++) {
            double o = 0;
            for (uint32_t t = 0; t < n_tokens; t++)
                o += w[t] * attn_elem(s, pages[t / pt], attn_row(s, 1, h, t % pt) + i);
            out[(size_t)qh * D + i] = o / sum;
        }
    }
    free(w);
}

/* ------------------------------------------------------------- threads */

struct attn_pool {
    unsigned threads; /* parts per job */
    unsigned first;   /* the first part a worker runs: 1 when the caller runs part 0 */
    int nice;
    pthread_t *tid;   /* tid[first..threads) */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;     /* bumped per job; a worker runs when it moves */
    unsigned pending; /* workers still running the current job */
    double done_s;    /* when the last part of the last job finished */
    int stop;
    attn_job_fn fn;
    void *arg;
};

struct worker_arg {
    struct attn_pool *p;
    unsigned part;
};

static void *worker(void *a)
{
    struct attn_pool *p = ((struct worker_arg *)a)->p;
    unsigned part = ((struct worker_arg *)a)->part;
    pthread_setname_np(pthread_self(), "kvt-attn");
    free(a);
    /* Best effort: an unprivileged thread may always raise its nice value
     * (on Linux it is per thread), and a pool that runs unniced computes
     * the same bits. */
    if (p->nice)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        attn_job_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(arg, part, p->threads);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) {
            p->done_s = util_now();
            pthread_cond_signal(&p->done);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct attn_pool *attn_pool_new(unsigned threads, int nice)
{
    struct attn_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->threads = threads ? threads : 1;
    p->nice = nice > 0 ? (nice > 19 ? 19 : nice) : 0;
    p->first = p->nice ? 0 : 1;
    p->tid = calloc(p->threads, sizeof(pthread_t));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (!p->tid)
        goto out_free;
    for (unsigned i = p->first; i < p->threads; i++) {
        struct worker_arg *a = malloc(sizeof(*a));
        if (!a)
            goto out_stop;
        *a = (struct worker_arg){ p, i };
        if (pthread_create(&p->tid[i], NULL, worker, a)) {
            free(a);
            goto out_stop;
        }
        continue;
    out_stop:
        p->threads = i; /* the workers started so far are joined */
        attn_pool_free(p);
        return NULL;
    }
    return p;
out_free:
    free(p->tid);
    free(p);
    return NULL;
}

unsigned attn_pool_threads(const struct attn_pool *p) { return p->threads; }

bool attn_pool_background(const struct attn_pool *p) { return !p->first; }

void attn_pool_start(struct attn_pool *p, attn_job_fn fn, void *arg)
{
    if (p->threads == 1 && p->first) {
        fn(arg, 0, 1);
        p->done_s = util_now();
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->threads - p->first;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    if (p->first) {
        /* The caller's part: it runs here, so the job is not in the
         * background (start then join is attn_pool_run). */
        fn(arg, 0, p->threads);
        attn_pool_join(p);
    }
}

double attn_pool_join(struct attn_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->done, &p->mu);
    double t = p->done_s;
    pthread_mutex_unlock(&p->mu);
    return t;
}

void attn_pool_run(struct attn_pool *p, attn_job_fn fn, void *arg)
{
    attn_pool_start(p, fn, arg);
    attn_pool_join(p);
}

void attn_pool_free(struct attn_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = p->first; i < p->threads; i++)
        pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->tid);
    free(p);
}
