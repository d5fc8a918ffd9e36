/*
 * test_run.c — `kvtier run`: the attention kernel against the textbook
 * formula in double precision and bit-exactly against the reference path
 * (pages regenerated per head range, heads split over calls); small runs
 * through run_exec over all three tiers with both policies and a codec; a
 * corrupted page in HBM and a wrong reference seed caught, naming the step.
 */
#include <math.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tools/run/attention.h"
#include "tools/run/attn_math.h"
#include "tools/run/run.h"

/* 4 q heads per kv head, fp32 */
static const struct attn_shape SH = { .q_heads = 8, .kv_heads = 2, .head_dim = 32, .page_tokens = 8 };

struct regen {
    const struct attn_shape *s;
    uint32_t n_tokens;
};

static const void *from_array(void *ctx, uint32_t page, uint32_t h0, uint32_t h1, void *scr)
{
    return ((void **)ctx)[page];
}

static const void *regenerate(void *ctx, uint32_t page, uint32_t h0, uint32_t h1, void *scr)
{
    struct regen *g = ctx;
    uint32_t first = page * g->s->page_tokens;
    uint32_t nt = g->n_tokens - first < g->s->page_tokens ? g->n_tokens - first : g->s->page_tokens;
    memset(scr, 0xff, attn_page_bytes(g->s)); /* what is not written is NaN */
    run_fill_page(g->s, 7, 3, 1, page, nt, h0, h1, scr);
    return scr;
}

static void test_kernel(void **state)
{
    const uint32_t lens[] = { 1, 8, 9, 37, 64 };
    size_t pf = attn_page_elems(&SH);
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        uint32_t n = lens[li], np = (n + SH.page_tokens - 1) / SH.page_tokens;
        float **pages = calloc(np, sizeof(float *));
        for (uint32_t i = 0; i < np; i++) {
            pages[i] = calloc(pf, sizeof(float));
            uint32_t nt = n - i * SH.page_tokens < SH.page_tokens ? n - i * SH.page_tokens : SH.page_tokens;
            run_fill_page(&SH, 7, 3, 1, i, nt, 0, SH.kv_heads, pages[i]);
        }
        float q[8 * 32], out[8 * 32], ref[8 * 32], *scr = malloc(pf * sizeof(float));
        double naive[8 * 32];
        for (uint32_t i = 0; i < 8 * 32; i++)
            q[i] = 4.0f * run_kv_value(9, 0, 0, i / 32, i % 32, 0, 2);
        attn_decode(&SH, q, n, 0, SH.kv_heads, from_array, pages, scr, out);
        attn_naive(&SH, q, n, (const void *const *)pages, naive);
        for (uint32_t i = 0; i < 8 * 32; i++)
            assert_true(fabs(out[i] - naive[i]) <= 1e-5 + 1e-5 * fabs(naive[i]));
        /* the reference path: one kv head per call, pages regenerated */
        struct regen g = { &SH, n };
        memset(ref, 0, sizeof ref);
        attn_decode(&SH, q, n, 1, 2, regenerate, &g, scr, ref);
        attn_decode(&SH, q, n, 0, 1, regenerate, &g, scr, ref);
        assert_memory_equal(out, ref, sizeof out);
        /* split over calls in uneven page ranges (kvtier run's pipeline) */
        float m[8], l[8];
        memset(ref, 0, sizeof ref);
        attn_begin(&SH, 0, SH.kv_heads, m, l, ref);
        for (uint32_t p0 = 0, step = 1; p0 < np; p0 += step, step++) {
            uint32_t p1 = p0 + step < np ? p0 + step : np;
            attn_pages(&SH, q, n, p0, p1, 0, SH.kv_heads, from_array, pages, scr, m, l, ref);
        }
        attn_end(&SH, 0, SH.kv_heads, l, ref);
        assert_memory_equal(out, ref, sizeof out);
        /* bf16 pages compute the bits of fp32 pages holding their values */
        struct attn_shape h16 = SH;
        h16.dtype = ATTN_BF16;
        void **half = calloc(np, sizeof(void *));
        for (uint32_t i = 0; i < np; i++) {
            half[i] = calloc(1, attn_page_bytes(&h16));
            uint32_t nt = n - i * SH.page_tokens < SH.page_tokens ? n - i * SH.page_tokens : SH.page_tokens;
            run_fill_page(&h16, 7, 3, 1, i, nt, 0, SH.kv_heads, half[i]);
            for (size_t e = 0; e < pf; e++)
                pages[i][e] = attn_elem(&h16, half[i], e);
        }
        attn_decode(&SH, q, n, 0, SH.kv_heads, from_array, pages, scr, out);
        attn_decode(&h16, q, n, 0, SH.kv_heads, from_array, half, scr, ref);
        assert_memory_equal(out, ref, sizeof out);
        attn_naive(&h16, q, n, (const void *const *)half, naive);
        for (uint32_t i = 0; i < 8 * 32; i++)
            assert_true(fabs(ref[i] - naive[i]) <= 1e-5 + 1e-5 * fabs(naive[i]));
        g.s = &h16; /* and regenerated per kv head, as the reference does */
        attn_decode(&h16, q, n, 1, 2, regenerate, &g, scr, ref);
        attn_decode(&h16, q, n, 0, 1, regenerate, &g, scr, ref);
        assert_memory_equal(out, ref, sizeof out);
        for (uint32_t i = 0; i < np; i++) {
            free(pages[i]);
            free(half[i]);
        }
        free(pages);
        free(half);
        free(scr);
    }
}

/* bf16 rounding: to nearest, ties to even, and back exactly. */
static void test_bf16(void **state)
{
    const struct attn_shape h16 = { .q_heads = 8, .kv_heads = 2, .head_dim = 32, .page_tokens = 8,
                                    .dtype = ATTN_BF16 };
    uint16_t b[4];
    attn_store(&h16, b, 0, 1.0f);
    assert_int_equal(b[0], 0x3f80);
    attn_store(&h16, b, 1, 1.0f + 1.0f / 256);  /* halfway: to even (down) */
    assert_int_equal(b[1], 0x3f80);
    attn_store(&h16, b, 2, 1.0f + 3.0f / 256);  /* halfway: to even (up) */
    assert_int_equal(b[2], 0x3f82);
    attn_store(&h16, b, 3, -(1.0f + 1.0f / 128 + 1.0f / 1024)); /* above half: away */
    assert_int_equal(b[3], 0xbf81);
    assert_true(attn_elem(&h16, b, 0) == 1.0f);
    assert_true(attn_elem(&h16, b, 2) == 1.0f + 2.0f / 128);
    assert_true(attn_bf16(0xbf81) == -(1.0f + 1.0f / 128));
}

/* Distance in units in the last place between two positive floats. */
static uint32_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return (uint32_t)(ia > ib ? ia - ib : ib - ia);
}

/* attn_exp against e^x in double rounded to float, over [-87, 0]: a dense
 * sweep plus the edges. */
static void test_attn_exp(void **state)
{
    uint32_t worst = 0;
    for (uint32_t i = 0; i <= 2000000; i++) {
        float x = -87.0f * (float)i / 2000000.0f;
        uint32_t u = ulps(attn_exp(x), (float)exp((double)x));
        worst = u > worst ? u : worst;
    }
    assert_true(worst <= 2);
    assert_true(attn_exp(0.0f) == 1.0f);
    assert_true(attn_exp(-0.0f) == 1.0f);
    assert_true(attn_exp(-87.5f) == 0.0f);
    assert_true(attn_exp(-INFINITY) == 0.0f);
    assert_true(attn_exp(NAN) == 0.0f);
}

/* The order a GPU kernel computes in (one q head per block; a score per
 * token; one thread folds the softmax state; one thread per output
 * element), written with attn_math.h's scalar helpers and the row offsets
 * attention_cuda.cu computes, gives the CPU kernel's bits exactly: llama3-8b's
 * heads, one q head per kv head, pages longer than a head (256 tokens of
 * 64), ragged pages (7 tokens), 71 q heads per kv head (falcon-7b), MLA's
 * 576-wide rows and 512-wide output, a window, the quantised dtypes, and
 * queries scaled up until exponentials underflow. */
static void gpu_order_case(const struct attn_shape *sh, uint32_t n, float qscale)
{
    const uint32_t G = sh->q_heads / sh->kv_heads, D = sh->head_dim, VD = attn_vdim(sh);
    const uint32_t pt = sh->page_tokens, ft = attn_first_token(sh, n);
    const int dt = (int)sh->dtype;
    uint32_t np = (n + pt - 1) / pt;
    size_t qf = (size_t)sh->q_heads * D, of = (size_t)sh->q_heads * VD;
    const float scale = attn_score_scale(sh);
    char **pages = calloc(np, sizeof(char *));
    for (uint32_t i = 0; i < np; i++) {
        pages[i] = calloc(1, attn_page_bytes(sh));
        uint32_t nt = n - i * pt < pt ? n - i * pt : pt;
        run_fill_page(sh, 11, 1, 2, i, nt, 0, sh->kv_heads, pages[i]);
    }
    float *q = malloc(qf * sizeof(float)), *out = malloc(of * sizeof(float));
    float *gpu = malloc(of * sizeof(float));
    void *scr = malloc(attn_scratch_bytes(sh));
    float *sc = malloc(pt * sizeof(float)), *p = malloc(pt * sizeof(float));
    float *acc = malloc(VD * sizeof(float));
    for (size_t i = 0; i < qf; i++)
        q[i] = qscale * run_kv_value(5, 0, 0, (uint32_t)(i / D), (uint32_t)(i % D), 0, 2);
    attn_decode(sh, q, n, 0, attn_units(sh), from_array, pages, scr, out);
    for (uint32_t qh = 0; qh < sh->q_heads; qh++) {
        uint32_t h = qh / G;
        float m = -INFINITY, l = 0, c;
        memset(acc, 0, VD * sizeof(float));
        for (uint32_t pg = attn_first_page(sh, n); pg < np; pg++) {
            uint32_t first = pg * pt, tb = ft > first ? ft - first : 0;
            uint32_t nt = (n - first < pt ? n - first : pt) - tb;
            const char *k = pages[pg] + attn_row_off(sh, 0, h, 0);
            const char *v = pages[pg] + attn_row_off(sh, 1, h, 0);
            const float *ks = (const float *)(pages[pg] + attn_scale_off(sh, 0, h, 0));
            const float *vs = (const float *)(pages[pg] + attn_scale_off(sh, 1, h, 0));
            for (uint32_t t = 0; t < nt; t++)
                sc[t] = attn_score(q + (size_t)qh * D, k, ks, tb + t, D, scale, dt,
                                   attn_per_channel(sh, 0));
            attn_fold_stats(sc, nt, &m, &l, &c, p);
            for (uint32_t d = 0; d < VD; d++)
                acc[d] = attn_fold_acc(acc[d], c, p, v, vs, tb, nt, D, d, dt, attn_per_channel(sh, 1));
        }
        for (uint32_t d = 0; d < VD; d++)
            gpu[(size_t)qh * VD + d] = ATTN_DIV(acc[d], l);
    }
    assert_memory_equal(out, gpu, of * sizeof(float));
    for (uint32_t i = 0; i < np; i++)
        free(pages[i]);
    free(pages);
    free(q);
    free(out);
    free(gpu);
    free(scr);
    free(sc);
    free(p);
    free(acc);
}

#define SHAPE(q, kv, d, pt, dt) { .q_heads = q, .kv_heads = kv, .head_dim = d, .page_tokens = pt, .dtype = dt }
/* MLA as kvtier run makes it for deepseek-v3 (fewer q heads): the latent
 * and the RoPE key in one row, V the latent. */
#define MLA(q, pt, dt, win) { .q_heads = q, .kv_heads = 1, .head_dim = 576, .page_tokens = pt, \
                              .dtype = dt, .mla = 1, .v_dim = 512, .window = win, .scale = 0.0721687836f }

static void test_gpu_order(void **state)
{
    static const struct attn_shape shapes[] = {
        SHAPE(32, 8, 128, 16, ATTN_BF16), /* llama3-8b, bf16 (kvtier run's default) */
        SHAPE(32, 8, 128, 16, ATTN_F32),  /* the same in fp32 */
        SHAPE(8, 8, 64, 16, ATTN_F32),    /* one q head per kv head */
        SHAPE(8, 1, 64, 256, ATTN_BF16),  /* pages longer than a head */
        SHAPE(16, 4, 128, 7, ATTN_F32),   /* ragged pages */
        SHAPE(16, 4, 128, 7, ATTN_BF16),
        SHAPE(71, 1, 64, 16, ATTN_BF16),  /* falcon-7b: 71 q heads per kv head */
        SHAPE(16, 4, 128, 16, ATTN_FP8),
        SHAPE(16, 4, 128, 16, ATTN_INT8),
        SHAPE(16, 4, 128, 7, ATTN_INT4),
        MLA(20, 16, ATTN_BF16, 0),        /* two units of 16 and 4 q heads */
        MLA(20, 16, ATTN_INT4, 0),
        { .q_heads = 16, .kv_heads = 4, .head_dim = 128, .page_tokens = 7, .dtype = ATTN_BF16,
          .window = 20 },                 /* the window starts inside a page */
        MLA(4, 16, ATTN_FP8, 33),
    };
    const uint32_t lens[] = { 1, 16, 17, 300 };
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        assert_int_equal(attn_shape_check(&shapes[si]), 0);
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            gpu_order_case(&shapes[si], lens[li], 4.0f);
            gpu_order_case(&shapes[si], lens[li], 1000.0f); /* exponentials underflow */
        }
    }
}

/* Every shape against the textbook formula in double precision over the
 * values the kernel reads (dequantised), and against itself split as the
 * run splits it: units in separate calls over pages regenerated per kv
 * head, and pages folded over uneven ranges of calls. */
static void shape_case(const struct attn_shape *sh, uint32_t n)
{
    const uint32_t pt = sh->page_tokens, np = (n + pt - 1) / pt, VD = attn_vdim(sh);
    const uint32_t U = attn_units(sh);
    size_t qf = (size_t)sh->q_heads * sh->head_dim, of = (size_t)sh->q_heads * VD;
    void **pages = calloc(np, sizeof(void *));
    for (uint32_t i = 0; i < np; i++) {
        pages[i] = calloc(1, attn_page_bytes(sh));
        uint32_t nt = n - i * pt < pt ? n - i * pt : pt;
        run_fill_page(sh, 7, 3, 1, i, nt, 0, sh->kv_heads, pages[i]);
    }
    float *q = malloc(qf * sizeof(float)), *out = malloc(of * sizeof(float));
    float *ref = malloc(of * sizeof(float)), *m = malloc(sh->q_heads * sizeof(float));
    float *l = malloc(sh->q_heads * sizeof(float));
    double *naive = malloc(of * sizeof(double));
    void *scr = malloc(attn_scratch_bytes(sh));
    for (size_t i = 0; i < qf; i++)
        q[i] = 4.0f * run_kv_value(9, 0, 0, (uint32_t)(i / sh->head_dim),
                                   (uint32_t)(i % sh->head_dim), 0, 2);
    attn_decode(sh, q, n, 0, U, from_array, pages, scr, out);
    attn_naive(sh, q, n, (const void *const *)pages, naive);
    for (size_t i = 0; i < of; i++)
        if (!(fabs(out[i] - naive[i]) <= 1e-5 + 1e-5 * fabs(naive[i])))
            fail_msg("output %zu: %.9g, the formula %.9g", i, out[i], naive[i]);
    struct regen g = { sh, n };
    memset(ref, 0, of * sizeof(float));
    for (uint32_t u = U; u-- > 0;) /* one unit per call, last first */
        attn_decode(sh, q, n, u, u + 1, regenerate, &g, scr, ref);
    assert_memory_equal(out, ref, of * sizeof(float));
    memset(ref, 0, of * sizeof(float));
    attn_begin(sh, 0, U, m, l, ref);
    for (uint32_t p0 = 0, step = 1; p0 < np; p0 += step, step++) {
        uint32_t p1 = p0 + step < np ? p0 + step : np;
        attn_pages(sh, q, n, p0, p1, 0, U, from_array, pages, scr, m, l, ref);
    }
    attn_end(sh, 0, U, l, ref);
    assert_memory_equal(out, ref, of * sizeof(float));
    for (uint32_t i = 0; i < np; i++)
        free(pages[i]);
    free(pages);
    free(q);
    free(out);
    free(ref);
    free(m);
    free(l);
    free(naive);
    free(scr);
}

static void test_shapes(void **state)
{
    static const struct attn_shape shapes[] = {
        SHAPE(71, 1, 64, 8, ATTN_BF16),  /* MQA, falcon-7b's ratio */
        SHAPE(24, 2, 64, 8, ATTN_F32),   /* GQA 12 per kv head */
        SHAPE(40, 2, 64, 8, ATTN_BF16),  /* GQA 20: a unit of 16 and one of 4 per kv head */
        MLA(20, 8, ATTN_BF16, 0),
        SHAPE(8, 2, 64, 8, ATTN_FP8),
        SHAPE(8, 2, 64, 8, ATTN_INT8),
        SHAPE(8, 2, 128, 8, ATTN_INT4),
        MLA(4, 8, ATTN_INT4, 0),
        { .q_heads = 8, .kv_heads = 2, .head_dim = 64, .page_tokens = 8, .dtype = ATTN_BF16,
          .window = 13 },
        MLA(4, 8, ATTN_INT8, 10),
    };
    const uint32_t lens[] = { 1, 8, 9, 37 };
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
            shape_case(&shapes[si], lens[li]);
}

/* Quantised rows: fp8 e4m3 codes round to nearest even and widen back
 * exactly; int8 and int4 codes are within half a step of the value; a
 * group's scale follows its own values (an outlier group does not coarsen
 * the others). */
static void test_quantise(void **state)
{
    assert_true(attn_e4m3(0x7e) == 448.0f);
    assert_true(attn_e4m3(0x08) == 1.0f / 64);  /* the smallest normal */
    assert_true(attn_e4m3(0x01) == 1.0f / 512); /* the smallest subnormal */
    assert_true(attn_e4m3(0xb8) == -1.0f);
    assert_true(attn_e4m3(0x39) == 1.125f);
    for (int dt = ATTN_FP8; dt <= ATTN_INT4; dt++) {
        struct attn_shape s = SHAPE(2, 1, 128, 2, (uint32_t)dt);
        char *page = calloc(1, attn_page_bytes(&s));
        float v[128];
        for (int d = 0; d < 128; d++)
            v[d] = (d < 64 ? 1.0f : 100.0f) * run_kv_value(3, 0, 0, 0, 0, (uint32_t)d, 0);
        attn_store_row(&s, page, 1, 0, 1, v);
        /* Each group's largest magnitude and range, from its own values: K's
         * outlier channels (kvgen.c) make them up to 12x the others'. */
        double amax[2] = { 0, 0 }, lo[2] = { v[0], v[64] }, hi[2] = { v[0], v[64] };
        for (int d = 0; d < 128; d++) {
            amax[d / 64] = fmax(amax[d / 64], fabs(v[d]));
            lo[d / 64] = fmin(lo[d / 64], v[d]);
            hi[d / 64] = fmax(hi[d / 64], v[d]);
        }
        for (int d = 0; d < 128; d++) {
            float got = attn_value(&s, page, 1, 0, 1, (uint32_t)d);
            double a = amax[d / 64], r = hi[d / 64] - lo[d / 64];
            /* fp8: 3 mantissa bits, half an ulp 2^-4 relative (subnormals: half of 2^-9 of the
             * scale); int8: half a step of 1/127 of the group's largest; int4: of 1/15 of its range */
            double tol = dt == ATTN_FP8 ? fabs(v[d]) / 16 + a / 448 / 1024
                       : dt == ATTN_INT8 ? a / 127 / 2 * 1.001 : r / 15 / 2 * 1.001;
            if (!(fabs(got - v[d]) <= tol))
                fail_msg("dtype %d element %d: %.9g for %.9g (tolerance %.3g)", dt, d, got, v[d], tol);
        }
        free(page);
    }
    /* int8 and int4 K: a scale per channel over the page's tokens, so an
     * outlier channel coarsens no other; fp8's K keeps per-row groups. */
    for (int dt = ATTN_INT8; dt <= ATTN_INT4; dt++) {
        struct attn_shape s = SHAPE(2, 1, 64, 4, (uint32_t)dt);
        char *page = calloc(1, attn_page_bytes(&s));
        float rows[4][64], st[3 * 64];
        assert_true(attn_per_channel(&s, 0) && !attn_per_channel(&s, 1));
        for (uint32_t t = 0; t < 4; t++) {
            for (int d = 0; d < 64; d++)
                rows[t][d] = (d == 5 ? 100.0f : 1.0f) * run_kv_value(3, 0, 0, t, 0, (uint32_t)d, 1);
            attn_k_stats(&s, st, t, rows[t]);
        }
        attn_k_scales_set(&s, page, 0, st);
        for (uint32_t t = 0; t < 4; t++)
            attn_store_row(&s, page, 0, 0, t, rows[t]);
        for (int d = 0; d < 64; d++) {
            double lo = rows[0][d], hi = lo, a = fabs(lo);
            for (uint32_t t = 1; t < 4; t++) {
                lo = fmin(lo, rows[t][d]);
                hi = fmax(hi, rows[t][d]);
                a = fmax(a, fabs(rows[t][d]));
            }
            double tol = dt == ATTN_INT8 ? a / 127 / 2 * 1.001 : (hi - lo) / 15 / 2 * 1.001;
            for (uint32_t t = 0; t < 4; t++) {
                float got = attn_value(&s, page, 0, 0, t, (uint32_t)d);
                if (!(fabs(got - rows[t][d]) <= tol))
                    fail_msg("dtype %d K channel %d token %u: %.9g for %.9g (tolerance %.3g)", dt,
                             d, t, got, rows[t][d], tol);
            }
        }
        free(page);
    }
}

static void test_pool(void **state)
{
    /* the team gives the same bits as one thread */
    struct attn_pool *p = attn_pool_new(3, 0, false);
    assert_non_null(p);
    assert_int_equal(attn_pool_threads(p), 3);
    attn_pool_free(p);
}

struct nice_job {
    pid_t caller;
    int nice[4];
    int on_caller[4];
};

static void nice_part(void *arg, unsigned part, unsigned nparts)
{
    struct nice_job *j = arg;
    assert_true(part < nparts && nparts <= 4);
    j->nice[part] = getpriority(PRIO_PROCESS, 0);
    j->on_caller[part] = (pid_t)syscall(SYS_gettid) == j->caller;
}

/* A niced pool runs every part on workers at that nice value and leaves the
 * caller's own priority alone; an unniced one runs part 0 on the caller. */
static void test_pool_nice(void **state)
{
    (void)state;
    int mine = getpriority(PRIO_PROCESS, 0);
    struct nice_job j = { .caller = (pid_t)syscall(SYS_gettid) };
    struct attn_pool *p = attn_pool_new(2, 7, false);
    assert_non_null(p);
    attn_pool_run(p, nice_part, &j);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(j.nice[i], mine > 7 ? mine : 7);
        assert_false(j.on_caller[i]);
    }
    /* start/join: the parts run on the workers, join gives when they ended */
    memset(j.nice, 0xff, sizeof j.nice);
    double before = util_now();
    attn_pool_start(p, nice_part, &j);
    double done = attn_pool_join(p);
    assert_true(done >= before && done <= util_now());
    for (int i = 0; i < 2; i++) {
        assert_int_equal(j.nice[i], mine > 7 ? mine : 7);
        assert_false(j.on_caller[i]);
    }
    attn_pool_free(p);
    assert_int_equal(getpriority(PRIO_PROCESS, 0), mine);
    p = attn_pool_new(2, 0, false);
    assert_non_null(p);
    attn_pool_run(p, nice_part, &j);
    attn_pool_free(p);
    assert_true(j.on_caller[0]);
    assert_false(j.on_caller[1]);
    assert_int_equal(j.nice[0], mine);
    assert_int_equal(j.nice[1], mine);
}

struct pin_job {
    cpu_set_t set[4];
};

static void pin_part(void *arg, unsigned part, unsigned nparts)
{
    struct pin_job *j = arg;
    assert_true(part < nparts && nparts <= 4);
    assert_int_equal(sched_getaffinity(0, sizeof j->set[part], &j->set[part]), 0);
}

/* A pinned pool binds each worker to a CPU of its own, in the order of the
 * CPUs the process may use, where there are enough of them for every part,
 * and never the caller (at nice 0 it runs part 0: workers take the 2nd CPU
 * on); with fewer CPUs than parts, or unpinned, the workers may run on every
 * CPU the process may. */
static void test_pool_pin(void **state)
{
    (void)state;
    cpu_set_t all, mine;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    unsigned ncpu = (unsigned)CPU_COUNT(&all);
    for (unsigned threads = 1; threads <= 3; threads++) {
        for (int mode = 0; mode < 4; mode++) {
            bool pin = mode & 1, nice0 = mode & 2;
            struct pin_job j;
            struct attn_pool *p = attn_pool_new(threads, nice0 ? 0 : 7, pin);
            assert_non_null(p);
            attn_pool_run(p, pin_part, &j);
            bool bound = pin && ncpu >= threads;
            unsigned first = nice0 ? 1 : 0; /* part 0 on the caller */
            assert_int_equal(attn_pool_pinned(p), bound ? threads - first : 0);
            for (unsigned i = 0, c = 0, k = 0; i < threads; i++) {
                if (!bound || i < first) {
                    assert_true(CPU_EQUAL(&j.set[i], &all));
                    continue;
                }
                for (;; c++) /* c: the i-th CPU of the mask */
                    if (CPU_ISSET(c, &all) && k++ == i)
                        break;
                assert_int_equal(CPU_COUNT(&j.set[i]), 1);
                assert_true(CPU_ISSET(c, &j.set[i]));
                c++;
            }
            attn_pool_free(p);
            assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
            assert_true(CPU_EQUAL(&mine, &all));
        }
    }
}

static void small_opts(struct run_opts *o)
{
    run_opts_default(o);
    o->layers = 2;
    o->batch = 2;
    o->context = 256;
    o->tokens = 4;
    o->progress = false;
}

static void run_ok(const char *policy, int codec, uint32_t chunk)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.policy = policy;
    o.codec = codec < 0 ? KVT_CODEC_NONE : codec;
    o.dtype = codec < 0 ? ATTN_F32 : ATTN_BF16; /* -1: fp32 KV, no codec */
    o.chunk_pages = chunk;
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified);
    assert_int_equal(r.verified_steps, o.tokens); /* every step by default */
    assert_true(r.kv_bytes > r.cap[0] + r.cap[1]); /* the SSD tier is needed */
    assert_true(r.delta.bytes_up[KVT_TIER_HBM] > 0);   /* DRAM -> HBM */
    assert_true(r.delta.bytes_up[KVT_TIER_DRAM] > 0);  /* SSD -> DRAM */
    assert_true(r.end.resident_pages[KVT_TIER_SSD] > 0);
    assert_true(r.wall_s > 0 && r.bound_s > 0);
    /* term_s: compute, dram->hbm, hbm->dram, ssd->dram, dram->ssd, ssd, cpu.
     * The compute is the busiest attention thread's CPU time per group,
     * summed. The SSD is one device: its term is the two directions' sum,
     * capped at the wall time, or the codec's time over the threads that
     * decode where more; the cores' term is the CPU work (the attention's,
     * the codec's, the SSD path's checksums and, on the host back-end, the
     * copies') over the cores; the bound is the largest of compute, the two
     * DRAM<->HBM links, the SSD and the cores, and never above the wall
     * time. */
    assert_true(codec == KVT_CODEC_NONE || codec < 0 || r.codec_s > 0);
    /* A codec decodes on the mover and its team's helper where there are
     * two cores or more. */
    assert_true(r.decoders == (codec > KVT_CODEC_NONE && r.cores > 1 ? 2u : 1u));
    /* Each attention worker on a CPU of its own where there are enough (at
     * nice 0 the caller runs part 0 and is not one). */
    unsigned workers = o.nice ? o.threads : o.threads - 1;
    assert_int_equal(r.pinned, r.cores >= o.threads ? workers : 0);
    double ssd = r.term_s[3] + r.term_s[4], mover = r.codec_s / r.decoders;
    mover = mover < r.wall_s ? mover : r.wall_s;
    ssd = ssd < r.wall_s ? ssd : r.wall_s;
    assert_true(r.term_s[5] == (mover > ssd ? mover : ssd));
    assert_true(r.cores >= 1 && r.compute_cpu_s > 0 && r.process_cpu_s > 0);
    assert_true(r.crc_cpu_s > 0); /* every page read from SSD is checksummed */
    double work = r.codec_cpu_s + r.crc_cpu_s + r.compute_cpu_s + (r.term_s[1] + r.term_s[2]);
    assert_true(fabs(r.cpu_work_s - work) <= 1e-9 * work);
    /* Thread clocks: no more than every thread's CPU time together (1 ms for
     * the clocks' granularity); the busiest attention thread's share of the
     * attention's. */
    assert_true(r.codec_cpu_s <= r.codec_s + 1e-3);
    assert_true(r.compute_cpu_s + r.codec_cpu_s + r.crc_cpu_s <= r.process_cpu_s + 1e-3);
    assert_true(r.compute_s <= r.compute_cpu_s + 1e-3);
    double cpu = r.cpu_work_s / r.cores;
    assert_true(r.term_s[6] == (cpu < r.wall_s ? cpu : r.wall_s));
    double b = r.term_s[0];
    for (int i = 1; i < 7; i++)
        if (i != 3 && i != 4 && r.term_s[i] > b)
            b = r.term_s[i];
    assert_true(r.bound_s == b);
    assert_true(r.bound_s <= r.wall_s);
    assert_true(r.term_s[3] > 0); /* the decode read from SSD */
}

/* A lossy codec: every step within its tolerance, the SSD's bytes as
 * stored a fraction of the pages' (INT4 with 32-token pages: 0.31; FP8 and
 * INT8 about 0.5), and the error figures filled. */
static void run_lossy_ok(int codec, double most_bytes)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.codec = codec;
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified && r.lossy);
    assert_int_equal(r.err_steps, o.tokens);
    assert_true(r.err_rms_rel > 0 && r.err_rms_rel <= r.tol_rms_rel);
    assert_true(r.err_max_rel > 0 && r.err_max_rel <= r.tol_max_abs);
    uint64_t pages = r.delta.bytes_up[KVT_TIER_DRAM] + r.delta.bytes_down[KVT_TIER_DRAM];
    assert_true(r.disk_read > 0 && r.disk_read + r.disk_written <= most_bytes * (double)pages);
    print_message("%s: max abs %.3g, RMS rel %.3g, SSD bytes %.3f of the pages'\n",
                  codec == KVT_CODEC_FP8 ? "fp8" : codec == KVT_CODEC_INT8 ? "int8" : "int4",
                  r.err_max_abs, r.err_rms_rel, (double)(r.disk_read + r.disk_written) / (double)pages);
}

static void test_run_fp8(void **state) { run_lossy_ok(KVT_CODEC_FP8, 0.55); }
static void test_run_int8(void **state) { run_lossy_ok(KVT_CODEC_INT8, 0.6); }
static void test_run_int4(void **state) { run_lossy_ok(KVT_CODEC_INT4, 0.32); }

/* A lossy run whose reference is another KV (another seed) is past any
 * tolerance: the check compares values, it does not just print them. And
 * fp32 KV has no lossy codec. */
static void test_run_lossy_mismatch(void **state)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.codec = KVT_CODEC_INT8;
    o.ref_seed = o.seed + 1;
    assert_int_equal(run_exec(&o, &r), 1);
    assert_false(r.verified);
    assert_true(r.err_rms_rel > 0.5);
    small_opts(&o);
    o.codec = KVT_CODEC_INT4;
    o.dtype = ATTN_F32;
    assert_int_equal(run_exec(&o, &r), -EINVAL);
}

/* 17 pages a group: chunks of 5 leave a short last one holding the tail,
 * 17 is the whole group at once, 0 the default (~4 MiB: also whole here). */
static void test_run_decode(void **state) { run_ok("decode", KVT_CODEC_NONE, 5); }
static void test_run_whole(void **state) { run_ok("decode", KVT_CODEC_NONE, 17); }
static void test_run_lru(void **state) { run_ok("lru", KVT_CODEC_NONE, 0); }
static void test_run_codec(void **state) { run_ok("decode", KVT_CODEC_ZSTD_SHUFFLE16, 3); }
static void test_run_fp32(void **state) { run_ok("decode", -1, 5); }

/* A small run of a model's shape (2 layers) in a dtype, with a window or
 * none: verified, with the SSD in use (HBM and DRAM smaller than the KV,
 * pages read up from SSD during the decode), and the engine holding every
 * page the window keeps and no other. */
static void shape_run(const char *model, uint32_t dtype, uint32_t window, uint32_t page_tokens,
                      uint32_t tokens, struct run_result *r)
{
    struct run_opts o;
    small_opts(&o);
    o.model = kvt_preset_find(model);
    o.dtype = dtype;
    o.window = window;
    o.page_tokens = page_tokens;
    o.tokens = tokens;
    o.chunk_pages = 3;
    assert_int_equal(run_exec(&o, r), 0);
    assert_true(r->verified);
    assert_int_equal(r->verified_steps, tokens);
    assert_true(r->kv_bytes > r->cap[0] + r->cap[1]);
    assert_true(r->delta.bytes_up[KVT_TIER_DRAM] > 0);
    assert_true(r->end.resident_pages[KVT_TIER_SSD] > 0);
    assert_true(r->pages_held == r->pages_expected);
    if (!window)
        assert_true(r->dropped_pages == 0 && r->pages_held == r->pages);
}

/* Under ThreadSanitizer (a Debug build, every access checked) a run takes
 * about 50 s: the runs whose threads do what test_run_decode's do (the
 * feed hands out units whatever their shape; MLA and the quantised dtypes
 * differ only in the kernel's arithmetic) are left to the plain and ASan
 * builds, and the window keeps its smallest run. */
#ifdef __SANITIZE_THREAD__
#define SKIP_UNDER_TSAN() skip()
#else
#define SKIP_UNDER_TSAN() (void)0
#endif

/* falcon-7b: 71 q heads on one K/V head (five units of work). */
static void test_run_mqa(void **state)
{
    struct run_result r;
    SKIP_UNDER_TSAN();
    shape_run("falcon-7b", ATTN_BF16, 0, 32, 4, &r);
}

/* deepseek-v3: MLA's absorbed form over 576-wide rows; and a lossy codec
 * on its pages, which the engine knows as KVT_KV_MLA (one latent + RoPE row
 * per token): a page is one 36 KiB block, within its tolerance. */
static void test_run_mla(void **state)
{
    struct run_result r;
    struct run_opts o;
    SKIP_UNDER_TSAN();
    shape_run("deepseek-v3", ATTN_BF16, 0, 32, 4, &r);
    small_opts(&o);
    o.model = kvt_preset_find("deepseek-v3");
    o.codec = KVT_CODEC_INT4;
    o.tokens = 4;
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified && r.lossy && r.page_bytes == 36864);
    assert_true(r.err_rms_rel > 0 && r.err_rms_rel <= r.tol_rms_rel);
    assert_true(r.disk_read > 0);
}

/* --window 160 over 16-token pages: 256 context tokens leave 6 pages per
 * (sequence, layer) behind, 20 more tokens 7; they are dropped from every
 * tier (the engine holds the window's pages only). */
static void test_run_window(void **state)
{
    struct run_result r;
#ifndef __SANITIZE_THREAD__
    shape_run("llama3-8b", ATTN_BF16, 160, 16, 20, &r);
    assert_int_equal(r.dropped_pages, 2 * 2 * 7);
    assert_int_equal(r.pages_expected, 2 * 2 * ((276 + 15) / 16 - 7));
#endif
    /* One sequence and one layer: each group is begun while the one before,
     * of the same (sequence, layer), still holds its pages, the page its
     * window leaves among them. */
    struct run_opts o;
    small_opts(&o);
    o.batch = 1;
    o.layers = 1;
    o.window = 40;
    o.page_tokens = 8;
    o.tokens = 20;
    o.chunk_pages = 2;
    o.ssd = 0;
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified && r.pages_held == r.pages_expected);
    assert_int_equal(r.dropped_pages, (256 + 20 - 40) / 8);
}

/* The quantised dtypes: bit-exact against their own reference, and within
 * their tolerance of bf16's (an error of 0 would say the pages were not
 * quantised); MLA with int4 and a window too. */
static void test_run_dtypes(void **state)
{
    struct run_result r;
    SKIP_UNDER_TSAN();
    for (uint32_t dt = ATTN_FP8; dt <= ATTN_INT4; dt++) {
        shape_run("llama3-8b", dt, 0, 32, 3, &r);
        assert_true(r.dt_tol > 0 && r.dt_rms_rel > 0 && r.dt_rms_rel_step <= r.dt_tol);
        assert_true(r.dt_max_abs > 0);
    }
    shape_run("deepseek-v3", ATTN_INT4, 100, 16, 20, &r);
    assert_true(r.dt_rms_rel > 0 && r.dt_rms_rel_step <= r.dt_tol && r.dropped_pages > 0);
}

/* --nice 0: the caller computes a part inside the pool's start, so it cannot
 * feed the job chunk by chunk; the group must come in whole first (this
 * hung before). */
static void test_run_nice0(void **state)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.nice = 0;
    o.chunk_pages = 3;
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified);
    o.threads = 1;
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified);
}

static void test_corrupt_page(void **state)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.corrupt_step = 2;
    o.chunk_pages = 4; /* the corrupt page is in the first chunk of several */
    assert_int_equal(run_exec(&o, &r), 1);
    assert_false(r.verified);
    assert_int_equal(r.bad_step, 2);
    assert_int_equal(r.bad_seq, 0);
    assert_int_equal(r.bad_layer, 0);
    assert_true(r.bad_head < 4); /* the q heads of kv head 0 */
}

static void test_wrong_seed(void **state)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.ref_seed = o.seed + 1;
    assert_int_equal(run_exec(&o, &r), 1);
    assert_false(r.verified);
    assert_int_equal(r.bad_step, 0);
}

/* --verify-every: steps 0, N, 2N, ... and the last are checked, the count
 * says so, and a corruption on a checked step is still caught. */
static void test_verify_every(void **state)
{
    struct run_opts o;
    struct run_result r;
    small_opts(&o);
    o.batch = 1; /* cheap: this runs three times, under TSan too */
    o.tokens = 5;
    o.verify_every = 3; /* 0, 3 and the last, 4 */
    assert_int_equal(run_exec(&o, &r), 0);
    assert_true(r.verified);
    assert_int_equal(r.verified_steps, 3);
    o.verify_every = 100; /* the first and the last */
    assert_int_equal(run_exec(&o, &r), 0);
    assert_int_equal(r.verified_steps, 2);
    o.verify_every = 2;
    o.corrupt_step = 2;
    o.chunk_pages = 4;
    assert_int_equal(run_exec(&o, &r), 1);
    assert_false(r.verified);
    assert_int_equal(r.bad_step, 2);
    assert_int_equal(r.verified_steps, 1); /* 0 passed */
}

/* ---------------------------------------------------------------- the spill directory */

static char *small_args[] = { "run", "--layers", "2", "--batch", "2", "--context", "256",
                              "--tokens", "3", "--no-progress" };
#define N_SMALL (sizeof(small_args) / sizeof(small_args[0]))

/* --ssd-dir naming a persisted store: refused, saying what is there, and
 * every page kept (0749676 wiped all of them with no word); with
 * --overwrite-ssd-dir the run takes it. The run's own pages (persist off)
 * are discarded at its end, so the next run needs no option. */
/* small_args, then --ssd-dir dir and last (NULL or an option): a fresh
 * argv each time, as getopt_long reorders the one it parses. */
static char **small_argv(char **argv, const char *dir, char *last)
{
    memcpy(argv, small_args, sizeof(small_args));
    argv[N_SMALL] = "--ssd-dir";
    argv[N_SMALL + 1] = (char *)dir;
    argv[N_SMALL + 2] = last;
    argv[N_SMALL + 3] = NULL;
    return argv;
}

static void test_run_keeps_persisted_store(void **state)
{
    char dir[64], *out, *err, *argv[N_SMALL + 4];
    (void)state;
    assert_int_equal(t_tmpdir(dir, sizeof dir, "run-store"), 0);
    t_store_pages(dir, 10);
    int rc = t_run_cmd(run_main, small_argv(argv, dir, NULL), &out, &err);
    uint64_t kept = t_stored_pages(dir, 10);
    if (rc != 2 || !strstr(err, "holds a persisted kvtier store: 10 pages of 16384 bytes") ||
        !strstr(err, "--overwrite-ssd-dir"))
        fail_msg("exit %d, %llu of 10 pages kept, stderr:\n%s", rc, (unsigned long long)kept, err);
    assert_int_equal(kept, 10);
    free(out);
    free(err);
    assert_int_equal(t_run_cmd(run_main, small_argv(argv, dir, "--overwrite-ssd-dir"), &out, &err),
                     0);
    free(out);
    free(err);
    rc = t_run_cmd(run_main, small_argv(argv, dir, NULL), &out, &err);
    if (rc != 0)
        fail_msg("a second run on its own directory: exit %d, stderr:\n%s", rc, err);
    free(out);
    free(err);
    t_rmtree(dir);
}

/* SIGINT or SIGTERM mid-run (the engine open): the run stops at its next
 * check, its temporary spill directory goes through the normal close path,
 * and it ends by the signal. On 0749676 the signal's default action left
 * the directory behind (267 MiB). */
static void interrupted(int sig)
{
    char top[64], *argv[N_SMALL + 1];
    assert_int_equal(t_tmpdir(top, sizeof top, "run-signal"), 0);
    memcpy(argv, small_args, sizeof(small_args));
    argv[8] = "4096"; /* --tokens: far longer than the signal takes to come */
    argv[N_SMALL] = NULL;
    t_expect_interrupted(run_main, argv, top, sig);
}

static void test_run_sigint(void **state) { interrupted(SIGINT); }
static void test_run_sigterm(void **state) { interrupted(SIGTERM); }

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel),      cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_attn_exp),
        cmocka_unit_test(test_gpu_order),   cmocka_unit_test(test_pool),
        cmocka_unit_test(test_shapes),      cmocka_unit_test(test_quantise),
        cmocka_unit_test(test_pool_nice),
        cmocka_unit_test(test_pool_pin),
        cmocka_unit_test(test_run_decode),  cmocka_unit_test(test_run_whole),
        cmocka_unit_test(test_run_lru),     cmocka_unit_test(test_run_fp32),
        cmocka_unit_test(test_run_nice0),
        cmocka_unit_test(test_run_mqa),     cmocka_unit_test(test_run_mla),
        cmocka_unit_test(test_run_window),  cmocka_unit_test(test_run_dtypes),
        cmocka_unit_test(test_run_codec),   cmocka_unit_test(test_run_fp8),
        cmocka_unit_test(test_run_int8),    cmocka_unit_test(test_run_int4),
        cmocka_unit_test(test_run_lossy_mismatch),   cmocka_unit_test(test_corrupt_page),
        cmocka_unit_test(test_wrong_seed),  cmocka_unit_test(test_verify_every),
        cmocka_unit_test(test_run_keeps_persisted_store),
        cmocka_unit_test(test_run_sigint),  cmocka_unit_test(test_run_sigterm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
