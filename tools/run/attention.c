/*
 * attention.c — decode attention on the CPU over KV pages (every shape of
 * attention.h), and the small thread team that splits it by unit.
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
#include <sched.h>
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

int attn_shape_check(const struct attn_shape *s)
{
    if (!s->q_heads || !s->kv_heads || !s->head_dim || !s->page_tokens || s->dtype >= ATTN_DTYPES)
        return -EINVAL;
    if (s->head_dim % 8 || s->head_dim > ATTN_MAX_HEAD_DIM || s->q_heads % s->kv_heads ||
        s->q_heads > ATTN_MAX_Q_HEADS || s->page_tokens > ATTN_MAX_PAGE_TOKENS)
        return -EINVAL;
    if (attn_quantised(s) && s->head_dim % ATTN_QGROUP)
        return -EINVAL;
    if (s->mla ? s->kv_heads != 1 || !s->v_dim || s->v_dim % 8 || s->v_dim >= s->head_dim
               : s->v_dim && s->v_dim != s->head_dim)
        return -EINVAL;
    return 0;
}

float attn_score_scale(const struct attn_shape *s)
{
    return s->scale > 0 ? s->scale : (float)(1.0 / sqrt((double)s->head_dim));
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

size_t attn_scratch_bytes(const struct attn_shape *s)
{
    size_t deq = attn_quantised(s) ? 2 * (size_t)s->page_tokens * s->head_dim * sizeof(float) : 0;
    return round64(attn_page_bytes(s)) + deq;
}

float attn_elem(const struct attn_shape *s, const void *page, size_t i)
{
    return s->dtype == ATTN_BF16 ? attn_bf16(((const uint16_t *)page)[i]) : ((const float *)page)[i];
}

float attn_round_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even (no NaN is ever stored) */
    u &= 0xffff0000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

void attn_store(const struct attn_shape *s, void *page, size_t i, float v)
{
    if (s->dtype != ATTN_BF16) {
        ((float *)page)[i] = v;
        return;
    }
    uint32_t u;
    v = attn_round_bf16(v);
    memcpy(&u, &v, sizeof u);
    ((uint16_t *)page)[i] = (uint16_t)(u >> 16);
}

float attn_value(const struct attn_shape *s, const void *page, int kind, uint32_t h, uint32_t t,
                 uint32_t d)
{
    const char *b = page;
    return attn_deq(b + attn_row_off(s, kind, h, 0), (const float *)(b + attn_scale_off(s, kind, h, 0)),
                    t, s->head_dim, d, (int)s->dtype, attn_per_channel(s, kind));
}

/* a (finite, |a| <= 448 after the clamp) to fp8 e4m3, to nearest even. */
static uint8_t e4m3_encode(float y)
{
    uint8_t sign = y < 0 ? 0x80 : 0;
    float a = fabsf(y);
    if (a >= 448.0f)
        return sign | 0x7e;
    if (a < 0.015625f) /* below 2^-6: subnormal, m 2^-9 (m = 8 is 2^-6, encoded alike) */
        return sign | (uint8_t)lrintf(a * 512.0f);
    int E;
    (void)frexpf(a, &E); /* a in [2^(E-1), 2^E) */
    int e = E - 1 + 7, m = (int)lrintf((ldexpf(a, 1 - E) - 1.0f) * 8.0f); /* both exact */
    if (m == 8)
        m = 0, e++;
    if (e > 15 || (e == 15 && m > 6))
        return sign | 0x7e;
    return sign | (uint8_t)(e << 3 | m);
}

/* A group's scales from its lowest, highest and largest magnitude: sc[0],
 * and the minimum sc[1] for int4. */
static void group_scales(int dtype, float lo, float hi, float amax, float *sc)
{
    if (dtype == ATTN_INT4) {
        sc[0] = (hi - lo) / 15.0f;
        sc[1] = lo;
        return;
    }
    sc[0] = amax / (dtype == ATTN_FP8 ? 448.0f : 127.0f);
}

/* v's code with the scales sc (int4: 0..15 in the low nibble). */
static uint8_t code_of(int dtype, float v, const float *sc)
{
    if (dtype == ATTN_INT4) {
        long a = sc[0] > 0 ? lrintf((v - sc[1]) / sc[0]) : 0;
        return (uint8_t)(a < 0 ? 0 : a > 15 ? 15 : a);
    }
    float y = sc[0] > 0 ? v / sc[0] : 0.0f;
    if (dtype == ATTN_FP8)
        return e4m3_encode(y);
    long q = lrintf(y);
    return (uint8_t)(int8_t)(q < -127 ? -127 : q > 127 ? 127 : q);
}

/* Element d of a quantised row's codes set to code c. */
static void code_put(int dtype, uint8_t *codes, uint32_t d, uint8_t c)
{
    if (dtype != ATTN_INT4)
        codes[d] = c;
    else
        codes[d / 2] = (uint8_t)(d & 1 ? (codes[d / 2] & 0x0f) | c << 4 : (codes[d / 2] & 0xf0) | c);
}

/* One group of n values quantised into codes and its scales. */
static void quantise_group(int dtype, const float *v, uint32_t n, uint8_t *codes, float *sc)
{
    float lo = v[0], hi = v[0], amax = 0;
    for (uint32_t i = 0; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
        amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
    }
    group_scales(dtype, lo, hi, amax, sc);
    for (uint32_t i = 0; i < n; i++)
        code_put(dtype, codes, i, code_of(dtype, v[i], sc));
}

void attn_k_stats(const struct attn_shape *s, float *st, uint32_t t, const float *row)
{
    float *lo = st, *hi = st + s->head_dim, *amax = st + 2 * s->head_dim;
    for (uint32_t d = 0; d < s->head_dim; d++) {
        float v = row[d];
        lo[d] = t == 0 || v < lo[d] ? v : lo[d];
        hi[d] = t == 0 || v > hi[d] ? v : hi[d];
        amax[d] = t == 0 || fabsf(v) > amax[d] ? fabsf(v) : amax[d];
    }
}

void attn_k_scales_set(const struct attn_shape *s, void *page, uint32_t h, const float *st)
{
    float sc[2 * ATTN_MAX_HEAD_DIM];
    const uint32_t D = s->head_dim, per = attn_scale_floats(s);
    for (uint32_t d = 0; d < D; d++)
        group_scales((int)s->dtype, st[d], st[D + d], st[2 * D + d], sc + d * per);
    memcpy((char *)page + attn_scale_off(s, 0, h, 0), sc, attn_k_scales(s) * sizeof(float));
}

void attn_store_row(const struct attn_shape *s, void *page, int kind, uint32_t h, uint32_t t,
                    const float *v)
{
    char *b = page;
    if (!attn_quantised(s)) {
        for (uint32_t d = 0; d < s->head_dim; d++)
            attn_store(s, page, attn_row(s, kind, h, t) + d, v[d]);
        return;
    }
    uint8_t *codes = (uint8_t *)b + attn_row_off(s, kind, h, t);
    const uint32_t per = attn_scale_floats(s);
    if (attn_per_channel(s, kind)) {
        float sc[2 * ATTN_MAX_HEAD_DIM];
        memcpy(sc, b + attn_scale_off(s, kind, h, 0), attn_k_scales(s) * sizeof(float));
        for (uint32_t d = 0; d < s->head_dim; d++)
            code_put((int)s->dtype, codes, d, code_of((int)s->dtype, v[d], sc + d * per));
        return;
    }
    float sc[2 * ATTN_MAX_HEAD_DIM / ATTN_QGROUP];
    uint32_t cb = s->dtype == ATTN_INT4 ? ATTN_QGROUP / 2 : ATTN_QGROUP;
    for (uint32_t g = 0; g < s->head_dim / ATTN_QGROUP; g++)
        quantise_group((int)s->dtype, v + g * ATTN_QGROUP, ATTN_QGROUP, codes + g * cb, sc + g * per);
    memcpy(b + attn_scale_off(s, kind, h, t), sc, attn_row_scales(s) * sizeof(float));
}

/* Scores of G query heads (G <= ATTN_QBLOCK) of one kv head against nt K rows. */
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

/* Folds one page's scores and V rows (VD elements each, rows vs apart) into
 * a q head's running state: the softmax state by attn_math.h's helper (the
 * GPU kernel's too), then the output, eight elements at a time, in the same
 * per-element order. */
static inline __attribute__((always_inline)) void
page_fold(const float *sc, const void *v, uint32_t nt, uint32_t VD, uint32_t vs, float *m,
          float *l, float *acc, bool bf16)
{
    float c, p[ATTN_MAX_PAGE_TOKENS];
    attn_fold_stats(sc, nt, m, l, &c, p);
    v8f cv = splat8(c);
    for (uint32_t d = 0; d < VD; d += 8)
        st8(acc + d, ld8(acc + d) * cv);
    for (uint32_t t = 0; t < nt; t++) {
        v8f pv = splat8(p[t]);
        size_t vr = (size_t)t * vs;
        for (uint32_t d = 0; d < VD; d += 8)
            st8(acc + d, ld8(acc + d) + pv * ld8kv(v, vr + d, bf16));
    }
}

/* The q heads [*g0, *g1) of unit u. */
static void unit_q(const struct attn_shape *s, uint32_t u, uint32_t *g0, uint32_t *g1)
{
    uint32_t G = s->q_heads / s->kv_heads, ub = attn_unit_blocks(s);
    uint32_t h = u / ub, first = h * G, b = (u % ub) * ATTN_QBLOCK;
    *g0 = first + b;
    *g1 = first + (b + ATTN_QBLOCK < G ? b + ATTN_QBLOCK : G);
}

/* One unit over nt tokens of a page whose K and V rows (of that unit's kv
 * head, from the first token attended) are at k and v: scores, then each
 * q head's fold. */
static inline __attribute__((always_inline)) void
unit_fold(const struct attn_shape *s, const float *q, const void *k, const void *v, uint32_t nt,
          uint32_t u, float scale, float *sc, float *m, float *l, float *out, bool bf16)
{
    const uint32_t D = s->head_dim, VD = attn_vdim(s), pt = s->page_tokens;
    uint32_t g0, g1;
    unit_q(s, u, &g0, &g1);
    page_scores(q + (size_t)g0 * D, k, nt, g1 - g0, D, pt, scale, sc, bf16);
    for (uint32_t qh = g0; qh < g1; qh++)
        page_fold(sc + (qh - g0) * pt, v, nt, VD, D, &m[qh], &l[qh], out + (size_t)qh * VD, bf16);
}

static void unit_fold_f32(const struct attn_shape *s, const float *q, const void *k, const void *v,
                          uint32_t nt, uint32_t u, float scale, float *sc, float *m, float *l,
                          float *out)
{
    unit_fold(s, q, k, v, nt, u, scale, sc, m, l, out, false);
}

static void unit_fold_bf16(const struct attn_shape *s, const float *q, const void *k,
                           const void *v, uint32_t nt, uint32_t u, float scale, float *sc,
                           float *m, float *l, float *out)
{
    unit_fold(s, q, k, v, nt, u, scale, sc, m, l, out, true);
}

/* Rows [tb, tb + nt) of D elements dequantised into f: attn_deq, the GPU
 * kernel's own reads, with the dtype a constant in each caller (its switch
 * folds away). */
static inline __attribute__((always_inline)) void
dequantise_dt(const void *rows, const float *sc, uint32_t D, uint32_t tb, uint32_t nt, float *f,
              int dt, int pc)
{
    for (uint32_t t = 0; t < nt; t++)
        for (uint32_t d = 0; d < D; d++)
            f[(size_t)t * D + d] = attn_deq(rows, sc, tb + t, D, d, dt, pc);
}

/* Rows [tb, tb + nt) of kind's block of kv head h dequantised into f (nt
 * rows of head_dim floats). */
static void dequantise_rows(const struct attn_shape *s, const char *p, int kind, uint32_t h,
                            uint32_t tb, uint32_t nt, float *f)
{
    const void *rows = p + attn_row_off(s, kind, h, 0);
    const float *sc = (const float *)(p + attn_scale_off(s, kind, h, 0));
    int pc = attn_per_channel(s, kind);
    switch (s->dtype) {
    case ATTN_FP8: dequantise_dt(rows, sc, s->head_dim, tb, nt, f, ATTN_FP8, pc); break;
    case ATTN_INT8: dequantise_dt(rows, sc, s->head_dim, tb, nt, f, ATTN_INT8, pc); break;
    default: dequantise_dt(rows, sc, s->head_dim, tb, nt, f, ATTN_INT4, pc); break;
    }
}

/* One page's tokens [tb, tb + nt) for units [u0, u1). A quantised page's
 * rows are dequantised once per kv head into deq, then folded as fp32. */
static void page_units(const struct attn_shape *s, const float *q, const char *p, uint32_t tb,
                       uint32_t nt, uint32_t u0, uint32_t u1, float scale, float *sc, float *m,
                       float *l, float *out, float *deq)
{
    const uint32_t ub = attn_unit_blocks(s);
    for (uint32_t u = u0; u < u1; u++) {
        uint32_t h = u / ub;
        if (attn_quantised(s)) {
            float *kf = deq, *vf = s->mla ? deq : deq + (size_t)s->page_tokens * s->head_dim;
            if (u == u0 || u % ub == 0) { /* a new kv head */
                dequantise_rows(s, p, 0, h, tb, nt, kf);
                if (!s->mla)
                    dequantise_rows(s, p, 1, h, tb, nt, vf);
            }
            unit_fold_f32(s, q, kf, vf, nt, u, scale, sc, m, l, out);
        } else if (s->dtype == ATTN_BF16) {
            unit_fold_bf16(s, q, p + attn_row_off(s, 0, h, tb), p + attn_row_off(s, 1, h, tb), nt,
                           u, scale, sc, m, l, out);
        } else {
            unit_fold_f32(s, q, p + attn_row_off(s, 0, h, tb), p + attn_row_off(s, 1, h, tb), nt,
                          u, scale, sc, m, l, out);
        }
    }
}

void attn_begin(const struct attn_shape *s, uint32_t u0, uint32_t u1, float *m, float *l,
                float *out)
{
    const uint32_t VD = attn_vdim(s);
    for (uint32_t u = u0; u < u1; u++) {
        uint32_t g0, g1;
        unit_q(s, u, &g0, &g1);
        for (uint32_t qh = g0; qh < g1; qh++) {
            m[qh] = -INFINITY;
            l[qh] = 0;
            memset(out + (size_t)qh * VD, 0, VD * sizeof(float));
        }
    }
}

void attn_pages(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t pg0,
                uint32_t pg1, uint32_t u0, uint32_t u1, attn_page_fn get, void *ctx,
                void *scratch, float *m, float *l, float *out)
{
    const uint32_t pt = s->page_tokens, t_lo = attn_first_token(s, n_tokens);
    const float scale = attn_score_scale(s);
    float sc[ATTN_QBLOCK * ATTN_MAX_PAGE_TOKENS];
    float *deq = (float *)((char *)scratch + round64(attn_page_bytes(s)));
    uint32_t h0, h1;
    if (u0 >= u1)
        return;
    attn_unit_heads(s, u0, u1, &h0, &h1);
    for (uint32_t pg = pg0 > t_lo / pt ? pg0 : t_lo / pt; pg < pg1; pg++) {
        const char *p = get(ctx, pg, h0, h1, scratch);
        uint32_t first = pg * pt;
        uint32_t tb = t_lo > first ? t_lo - first : 0;
        uint32_t te = n_tokens - first < pt ? n_tokens - first : pt;
        page_units(s, q, p, tb, te - tb, u0, u1, scale, sc, m, l, out, deq);
    }
}

void attn_end(const struct attn_shape *s, uint32_t u0, uint32_t u1, const float *l, float *out)
{
    const uint32_t VD = attn_vdim(s);
    for (uint32_t u = u0; u < u1; u++) {
        uint32_t g0, g1;
        unit_q(s, u, &g0, &g1);
        for (uint32_t qh = g0; qh < g1; qh++) {
            v8f lv = splat8(l[qh]);
            float *o = out + (size_t)qh * VD;
            for (uint32_t d = 0; d < VD; d += 8)
                st8(o + d, ld8(o + d) / lv);
        }
    }
}

void attn_decode(const struct attn_shape *s, const float *q, uint32_t n_tokens, uint32_t u0,
                 uint32_t u1, attn_page_fn get, void *ctx, void *scratch, float *out)
{
    float m[ATTN_MAX_Q_HEADS], l[ATTN_MAX_Q_HEADS];
    attn_begin(s, u0, u1, m, l, out);
    attn_pages(s, q, n_tokens, 0, (n_tokens + s->page_tokens - 1) / s->page_tokens, u0, u1, get,
               ctx, scratch, m, l, out);
    attn_end(s, u0, u1, l, out);
}

void attn_naive(const struct attn_shape *s, const float *q, uint32_t n_tokens,
                const void *const *pages, double *out)
{
    const uint32_t G = s->q_heads / s->kv_heads, D = s->head_dim, VD = attn_vdim(s);
    const uint32_t pt = s->page_tokens, t0 = attn_first_token(s, n_tokens);
    const double scale = s->scale > 0 ? (double)s->scale : 1.0 / sqrt((double)D);
    double *w = malloc((size_t)n_tokens * sizeof(double));
    if (!w)
        abort();
    for (uint32_t qh = 0; qh < s->q_heads; qh++) {
        uint32_t h = qh / G;
        double mx = -INFINITY, sum = 0;
        for (uint32_t t = t0; t < n_tokens; t++) {
            double d = 0;
            for (uint32_t i = 0; i < D; i++)
                d += (double)q[(size_t)qh * D + i] * attn_value(s, pages[t / pt], 0, h, t % pt, i);
            w[t] = d * scale;
            if (w[t] > mx)
                mx = w[t];
        }
        for (uint32_t t = t0; t < n_tokens; t++)
            sum += (w[t] = exp(w[t] - mx));
        for (uint32_t i = 0; i < VD; i++) {
            double o = 0;
            for (uint32_t t = t0; t < n_tokens; t++)
                o += w[t] * attn_value(s, pages[t / pt], 1, h, t % pt, i);
            out[(size_t)qh * VD + i] = o / sum;
        }
    }
    free(w);
}

/* ------------------------------------------------------------- threads */

struct attn_pool {
    unsigned threads; /* parts per job */
    unsigned first;   /* the first part a worker runs: 1 when the caller runs part 0 */
    int nice;
    bool pin;         /* each worker on a CPU of its own (attn_pool_new) */
    unsigned started; /* workers past their set-up (under mu) */
    unsigned pinned;  /* of them, bound to a CPU (under mu) */
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

/* Binds the calling worker to the part-th CPU the process may run on, where
 * there is one for every part. Best effort, as nice: false where the CPUs
 * are fewer or the kernel refuses, and the worker then floats. */
static bool pin_self(unsigned part, unsigned nparts)
{
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || (unsigned)CPU_COUNT(&all) < nparts)
        return false;
    for (int c = 0, k = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &all) || (unsigned)k++ != part)
            continue;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
    }
    return false;
}

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
    bool pinned = p->pin && pin_self(part, p->threads);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    p->pinned += pinned;
    p->started++;
    pthread_cond_broadcast(&p->done); /* attn_pool_new waits for every worker */
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

struct attn_pool *attn_pool_new(unsigned threads, int nice, bool pin)
{
    struct attn_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->threads = threads ? threads : 1;
    p->nice = nice > 0 ? (nice > 19 ? 19 : nice) : 0;
    p->first = p->nice ? 0 : 1;
    p->pin = pin;
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
    /* Every worker niced and bound before the first job, and
     * attn_pool_pinned() final from here on. */
    pthread_mutex_lock(&p->mu);
    while (p->started < p->threads - p->first)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return p;
out_free:
    free(p->tid);
    free(p);
    return NULL;
}

unsigned attn_pool_threads(const struct attn_pool *p) { return p->threads; }

unsigned attn_pool_pinned(struct attn_pool *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->pinned;
    pthread_mutex_unlock(&p->mu);
    return n;
}

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
