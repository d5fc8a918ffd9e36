/*
 * test_quant.c — the lossy codecs (io/quant.c, io/quant_kernels.c): the
 * scalar and AVX2 kernels give the same bytes; e4m3 codes round trip; every
 * codec and layout comes back within the bound its scales allow, recomputed
 * here from the page; the frame's size; layers kept in full precision come
 * back exact; a damaged frame decodes or is refused, never written past;
 * the config refuses a lossy codec without a layout; and pages through an
 * engine's SSD tier come back dequantised. Also the measurement behind the
 * choice of axes (docs/codecs.md#axes): K per channel, V per token.
 */
#include <math.h>

#include "lab/lab.h"
#include "tests/helpers.h"
#include "io/codec.h"
#include "io/quant.h"

#define PAGE (256u * 1024u)
#define GUARD 64u

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float frand(uint64_t *s) /* in [-1, 1) */
{
    return (float)((double)(rnd(s) >> 11) * 0x1p-52 - 1.0);
}

static float elem(const uint8_t *p, int dtype, size_t i)
{
    uint16_t v = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    return dtype == KVT_DTYPE_FP16 ? kvt_half_to_float(v) : kvt_bf16_to_float(v);
}

static void put_elem(uint8_t *p, int dtype, size_t i, float f)
{
    uint16_t v = dtype == KVT_DTYPE_FP16 ? kvt_float_to_half(f) : kvt_float_to_bf16(f);
    p[2 * i] = (uint8_t)v;
    p[2 * i + 1] = (uint8_t)(v >> 8);
}

/* 8 heads of 128 in 64-token pages: 256 KiB a layer, as `kvtier run` has. */
static struct kvt_page_layout layout(int dtype, int order)
{
    struct kvt_page_layout L = { dtype, order, 64, 8, 128, 128, 0, 0, 0, 0 };
    if (order == KVT_KV_MLA) {
        L.kv_heads = 1;
        L.head_dim = 512;
        L.v_head_dim = 0;
        L.rope_dim = 64;
        L.tokens = 64;
    }
    return L;
}

/* ---------------------------------------------------------------- kernels */

static const struct kvt_quant_kernels *avx2_or_skip(void)
{
    const struct kvt_quant_kernels *k = kvt_quant_best();
    if (k == &kvt_quant_scalar) {
        print_message("no AVX2 here: the scalar kernels are the only ones\n");
        return NULL;
    }
    return k;
}

static void fill_row(uint8_t *row, int dtype, uint32_t w, uint64_t *s)
{
    for (uint32_t i = 0; i < w; i++)
        put_elem(row, dtype, i, frand(s) * (i % 13 == 3 ? 40.0f : 2.0f));
}

static void kernels_agree_at(const struct kvt_quant_kernels *v, int dtype, uint32_t w, uint32_t g,
                             uint64_t *s)
{
    uint8_t row[2 * 1024], out_s[2 * 1024], out_v[2 * 1024], back_s[2 * 1024], back_v[2 * 1024];
    float mn_s[1024], mx_s[1024], mn_v[1024], mx_v[1024], inv[1024], mn[1024], sc[1024];
    memset(row, 0, sizeof row);
    fill_row(row, dtype, w, s);
    for (uint32_t i = 0; i < w; i++) {
        sc[i] = 0.01f + (float)(i % 7) * 0.03f;
        inv[i] = 1.0f / sc[i];
        mn[i] = -1.5f - (float)(i % 5);
    }
    assert_true(kvt_quant_scalar.col_minmax(row, 0, 1, dtype, w, mn_s, mx_s));
    assert_true(v->col_minmax(row, 0, 1, dtype, w, mn_v, mx_v));
    assert_memory_equal(mn_s, mn_v, w * sizeof(float));
    assert_memory_equal(mx_s, mx_v, w * sizeof(float));
    if (w % g == 0) {
        assert_true(kvt_quant_scalar.group_minmax(row, dtype, w, g, mn_s, mx_s));
        assert_true(v->group_minmax(row, dtype, w, g, mn_v, mx_v));
        assert_memory_equal(mn_s, mn_v, w / g * sizeof(float));
        assert_memory_equal(mx_s, mx_v, w / g * sizeof(float));
    }
    for (uint32_t group = 0; group <= g; group += g) {
        if (group && w % group)
            continue;
        for (unsigned bits = 4; bits <= 8; bits += 4) {
            memset(out_s, 0, sizeof out_s);
            memset(out_v, 0, sizeof out_v);
            kvt_quant_scalar.quant_int(row, dtype, w, group, inv, mn, bits, out_s);
            v->quant_int(row, dtype, w, group, inv, mn, bits, out_v);
            assert_memory_equal(out_s, out_v, (w * bits + 7) / 8);
            kvt_quant_scalar.dequant_int(out_s, dtype, w, group, sc, mn, bits, back_s);
            v->dequant_int(out_s, dtype, w, group, sc, mn, bits, back_v);
            assert_memory_equal(back_s, back_v, 2 * w);
        }
        kvt_quant_scalar.quant_fp8(row, dtype, w, group, inv, out_s);
        v->quant_fp8(row, dtype, w, group, inv, out_v);
        assert_memory_equal(out_s, out_v, w);
        kvt_quant_scalar.dequant_fp8(out_s, dtype, w, group, sc, back_s);
        v->dequant_fp8(out_s, dtype, w, group, sc, back_v);
        assert_memory_equal(back_s, back_v, 2 * w);
    }
}

/* Whole frames: every codec and layout, the same bytes from both sets. */
static void frames_agree(const struct kvt_quant_kernels *v)
{
    static float sc_s[4 * 4096], sc_v[4 * 4096];
    uint8_t *in = malloc(PAGE), *a = malloc(PAGE), *b = malloc(PAGE);
    assert_non_null(in);
    assert_non_null(a);
    assert_non_null(b);
    const int orders[] = { KVT_KV_HEAD_MAJOR, KVT_KV_TOKEN_MAJOR, KVT_KV_INTERLEAVED, KVT_KV_MLA,
                           KVT_KV_SPLIT_LAYERS, KVT_KV_SINGLE };
    for (int codec = KVT_CODEC_FP8; codec <= KVT_CODEC_INT4; codec++)
        for (int o = 0; o < 6; o++) {
            struct kvt_page_layout L = layout(KVT_DTYPE_BF16 + o % 2, orders[o]);
            kvt_codec_fill_kv(in, PAGE, &L, (uint64_t)codec);
            size_t na = 0, nb = 0;
            assert_int_equal(kvt_quant_encode(&kvt_quant_scalar, codec, &L, 0, in, PAGE, a, PAGE, &na, sc_s), 0);
            assert_int_equal(kvt_quant_encode(v, codec, &L, 0, in, PAGE, b, PAGE, &nb, sc_v), 0);
            assert_int_equal(na, nb);
            assert_memory_equal(a, b, na);
            assert_int_equal(kvt_quant_decode(&kvt_quant_scalar, codec, a, na, in, PAGE, sc_s), 0);
            assert_int_equal(kvt_quant_decode(v, codec, a, na, b, PAGE, sc_v), 0);
            assert_memory_equal(in, b, PAGE);
        }
    free(in);
    free(a);
    free(b);
}

static void test_kernels_agree(void **state)
{
    (void)state;
    const struct kvt_quant_kernels *v = avx2_or_skip();
    if (!v)
        skip();
    frames_agree(v);
    uint64_t s = 42;
    /* Column ranges over several rows. */
    static uint8_t rows[5][2 * 1000];
    float mn_s[1000], mx_s[1000], mn_v[1000], mx_v[1000];
    for (int r = 0; r < 5; r++)
        fill_row(rows[r], KVT_DTYPE_BF16, 1000, &s);
    kvt_quant_scalar.col_minmax(rows, 1000, 5, KVT_DTYPE_BF16, 997, mn_s, mx_s);
    v->col_minmax(rows, 1000, 5, KVT_DTYPE_BF16, 997, mn_v, mx_v);
    assert_memory_equal(mn_s, mn_v, 997 * sizeof(float));
    assert_memory_equal(mx_s, mx_v, 997 * sizeof(float));
    const uint32_t widths[] = { 1, 7, 8, 13, 64, 200, 1024 };
    for (int d = KVT_DTYPE_BF16; d <= KVT_DTYPE_FP16; d++)
        for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
            for (int rep = 0; rep < 20; rep++)
                kernels_agree_at(v, d, widths[i], widths[i] >= 64 ? 64 : 8, &s);
}

/* Every e4m3 value but NaN comes back as itself (scale 1), on both kernel
 * sets; values past 448 saturate; halfway cases round to even. */
static void test_fp8_codes(void **state)
{
    (void)state;
    const struct kvt_quant_kernels *sets[2] = { &kvt_quant_scalar, kvt_quant_best() };
    float one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    for (int k = 0; k < 2; k++) {
        uint8_t codes[256], back[256];
        uint8_t row[2 * 256];
        for (int c = 0; c < 256; c++)
            codes[c] = (uint8_t)((c & 0x7f) == 0x7f ? 0 : c);
        kvt_quant_scalar.dequant_fp8(codes, KVT_DTYPE_FP16, 256, 256, one, row); /* exact in fp16 */
        sets[k]->quant_fp8(row, KVT_DTYPE_FP16, 256, 256, one, back);
        for (int c = 0; c < 256; c++)
            if (c != 0x80) /* -0 */
                assert_int_equal(back[c], codes[c]);
        assert_float_equal(elem(row, KVT_DTYPE_FP16, 0x7e), 448.0f, 0);
        assert_float_equal(elem(row, KVT_DTYPE_FP16, 0x01), 0x1p-9f, 0);
        uint8_t big[2 * 8], q[8];
        float vals[8] = { 1000.0f, -1e4f, 0x1p-10f, 0x1p-10f * 3, 1.0625f, 1.1875f, 17.0f, -0.0f };
        for (int i = 0; i < 8; i++)
            put_elem(big, KVT_DTYPE_FP16, i, vals[i]);
        sets[k]->quant_fp8(big, KVT_DTYPE_FP16, 8, 8, one, q);
        const uint8_t want[8] = { 0x7e, 0xfe, 0x00, 0x02, 0x38, 0x3a, 0x58, 0x80 };
        assert_memory_equal(q, want, 8);
    }
}

/* ---------------------------------------------------------------- error */

/* The most a dequantised element may be off, from the page itself: half a
 * step of its scale (recomputed here as the codec defines it), plus the
 * rounding of the scale and minimum to fp16 (a relative 2^-11 of each, over
 * up to qmax steps), plus the output's rounding to dtype. */
struct bound_ctx {
    const struct kvt_page_layout *L;
    int codec;
    const uint8_t *in, *out;
};

static float out_ulp(int dtype, float x)
{
    return fabsf(x) * (dtype == KVT_DTYPE_FP16 ? 0x1p-11f : 0x1p-8f) + 1e-7f;
}

/* Max over elements of |err| / bound for one stream given as rows x w at
 * element offset off, stride; per channel (K) or per group of g (V). The
 * range each element was quantised with is recomputed from the input. */
static void range_of(const struct bound_ctx *b, uint64_t off, uint64_t stride, uint32_t rows,
                     uint32_t r0, uint32_t r1, uint32_t c0, uint32_t c1, float *lo, float *hi)
{
    (void)rows;
    *lo = 1e30f, *hi = -1e30f;
    for (uint32_t r = r0; r < r1; r++)
        for (uint32_t c = c0; c < c1; c++) {
            float x = elem(b->in, b->L->dtype, off + r * stride + c);
            *lo = x < *lo ? x : *lo;
            *hi = x > *hi ? x : *hi;
        }
}

static double stream_worst(const struct bound_ctx *b, uint64_t off, uint64_t stride, uint32_t rows,
                           uint32_t w, uint32_t head, bool key, uint32_t g, double *sq_err,
                           double *sq_ref)
{
    int dt = b->L->dtype;
    double worst = 0;
    float qmax = b->codec == KVT_CODEC_INT4 ? 15.0f : 255.0f;
    /* The unit of one scale: FP8 a head over all rows; K a column over all
     * rows; V a group of one row. */
    uint32_t uw = b->codec == KVT_CODEC_FP8 ? head : key ? 1 : g;
    bool all_rows = b->codec == KVT_CODEC_FP8 || key;
    for (uint32_t c0 = 0; c0 < w; c0 += uw)
        for (uint32_t r0 = 0; r0 < rows; r0 = all_rows ? rows : r0 + 1) {
            uint32_t r1 = all_rows ? rows : r0 + 1;
            float lo, hi, bound_abs;
            range_of(b, off, stride, rows, r0, r1, c0, c0 + uw, &lo, &hi);
            if (b->codec == KVT_CODEC_FP8) {
                bound_abs = fmaxf(-lo, hi) / 448.0f * 0x1p-10f;
            } else {
                float step = (hi - lo) / qmax;
                bound_abs = step * 0.5f * 1.01f + (fabsf(lo) + step * qmax) * 0x1p-10f;
            }
            for (uint32_t r = r0; r < r1; r++)
                for (uint32_t c = c0; c < c0 + uw; c++) {
                    size_t at = off + r * stride + c;
                    float x = elem(b->in, dt, at), y = elem(b->out, dt, at);
                    float bound = bound_abs + out_ulp(dt, x) + 1e-6f +
                                  (b->codec == KVT_CODEC_FP8 ? fabsf(x) * 0x1p-4f : 0);
                    double e = fabs((double)x - y);
                    worst = e / bound > worst ? e / bound : worst;
                    *sq_err += e * e;
                    *sq_ref += (double)x * x;
                }
        }
    return worst;
}

/* The whole block's streams, as io/quant.c lays them out. */
static double block_worst(const struct bound_ctx *b, double rel[2])
{
    const struct kvt_page_layout *L = b->L;
    uint32_t T = L->tokens;
    double e[2] = { 0, 0 }, x[2] = { 0, 0 }, worst;
    if (L->order == KVT_KV_MLA) {
        uint32_t w = L->head_dim + L->rope_dim;
        worst = stream_worst(b, 0, w, T, w, w, true, 0, &e[0], &x[0]);
    } else if (L->order == KVT_KV_SINGLE) {
        uint32_t w = L->kv_heads * L->head_dim;
        worst = stream_worst(b, 0, w, T, w, L->head_dim, true, 0, &e[0], &x[0]);
    } else {
        uint32_t wk = L->kv_heads * L->head_dim, wv = L->kv_heads * L->v_head_dim;
        uint32_t D = L->head_dim, Dv = L->v_head_dim, H = L->kv_heads;
        uint32_t most = b->codec == KVT_CODEC_INT8 ? 128 : 64; /* quant.c, group_of */
        uint32_t g = Dv < most ? Dv : most;
        while (Dv % g)
            g--;
        worst = 0;
        if (L->order == KVT_KV_HEAD_MAJOR) {
            for (uint32_t h = 0; h < H; h++) {
                double a = stream_worst(b, (uint64_t)h * T * D, D, T, D, D, true, 0, &e[0], &x[0]);
                double c = stream_worst(b, (uint64_t)H * T * D + (uint64_t)h * T * Dv, Dv, T, Dv,
                                        Dv, false, g, &e[1], &x[1]);
                worst = fmax(worst, fmax(a, c));
            }
        } else {
            /* A one-layer block of KVT_KV_SPLIT_LAYERS is token-major. */
            bool tm = L->order == KVT_KV_TOKEN_MAJOR || L->order == KVT_KV_SPLIT_LAYERS;
            double wk1 = stream_worst(b, 0, tm ? wk : wk + wv, T, wk, D, true, 0, &e[0], &x[0]);
            double wv1 = stream_worst(b, tm ? (uint64_t)T * wk : wk, tm ? wv : wk + wv, T, wv, Dv,
                                      false, g, &e[1], &x[1]);
            worst = wk1 > wv1 ? wk1 : wv1;
        }
    }
    for (int i = 0; i < 2; i++)
        rel[i] = x[i] > 0 ? sqrt(e[i] / x[i]) : 0;
    return worst;
}

static void roundtrip(int codec, struct kvt_page_layout L, double max_rel_k, double max_rel_v)
{
    struct kvt_codec *c;
    uint8_t *in = malloc(PAGE), *st = malloc(PAGE), *out = malloc(PAGE + GUARD);
    assert_non_null(in);
    assert_non_null(st);
    assert_non_null(out);
    assert_int_equal(kvt_codec_new_layout(codec, 0, PAGE, &L, &c), 0);
    kvt_codec_fill_kv(in, PAGE, &L, 7);
    size_t n = 0;
    int used = -1;
    assert_int_equal(kvt_codec_encode_page(c, 0, in, PAGE, st, PAGE, &n, &used), 0);
    assert_int_equal(used, codec);
    memset(out + PAGE, 0xA5, GUARD);
    assert_int_equal(kvt_codec_decode(c, codec, st, n, out, PAGE), 0);
    for (unsigned i = 0; i < GUARD; i++)
        assert_int_equal(out[PAGE + i], 0xA5);
    size_t block = kvt_page_layout_block_bytes(&L);
    assert_memory_equal(in + block, out + block, PAGE - block); /* the tail travels raw */
    struct bound_ctx b = { &L, codec, in, out };
    double rel[2];
    double worst = block_worst(&b, rel);
    print_message("%-4s order %d dtype %d: %zu of %u bytes (%.3f), worst |err|/bound %.3f, "
                  "RMS rel K %.5f V %.5f\n", kvt_codec_name(codec), L.order, L.dtype, n, PAGE,
                  (double)n / PAGE, worst, rel[0], rel[1]);
    assert_true(worst <= 1.0);
    assert_true(rel[0] <= max_rel_k);
    assert_true(rel[1] <= max_rel_v);
    /* Written again, a decoded page reads back the same: the codes are stable. */
    size_t n2 = 0;
    uint8_t *again = malloc(PAGE);
    assert_non_null(again);
    assert_int_equal(kvt_codec_encode_page(c, 0, out, PAGE, st, PAGE, &n2, &used), 0);
    assert_int_equal(n2, n);
    assert_int_equal(kvt_codec_decode(c, codec, st, n2, again, PAGE), 0);
    free(again);
    kvt_codec_free(c);
    free(in);
    free(st);
    free(out);
}

static void test_roundtrip_error(void **state)
{
    (void)state;
    const int orders[] = { KVT_KV_HEAD_MAJOR, KVT_KV_TOKEN_MAJOR, KVT_KV_INTERLEAVED, KVT_KV_MLA,
                           KVT_KV_SPLIT_LAYERS, KVT_KV_SINGLE };
    for (int d = KVT_DTYPE_BF16; d <= KVT_DTYPE_FP16; d++)
        for (int o = 0; o < 6; o++) {
            struct kvt_page_layout L = layout(d, orders[o]);
            roundtrip(KVT_CODEC_INT8, L, 0.004, 0.01);
            roundtrip(KVT_CODEC_INT4, L, 0.07, 0.17);
            roundtrip(KVT_CODEC_FP8, L, 0.04, 0.04);
        }
}

/* The frame's size follows from the layout: 4-bit codes plus per-channel K
 * and per-group V parameters, 32 header bytes and a flag. */
static void test_frame_size(void **state)
{
    (void)state;
    struct kvt_page_layout L = layout(KVT_DTYPE_BF16, KVT_KV_HEAD_MAJOR);
    struct kvt_codec *c;
    uint8_t *in = malloc(PAGE), *st = malloc(PAGE);
    assert_non_null(in);
    assert_non_null(st);
    kvt_codec_fill_kv(in, PAGE, &L, 1);
    const int codecs[3] = { KVT_CODEC_INT4, KVT_CODEC_INT8, KVT_CODEC_FP8 };
    const size_t want[3] = {
        32 + 1 + (1024 * 4 + 64 * 512) + (64 * 16 * 4 + 64 * 512),
        32 + 1 + (1024 * 4 + 64 * 1024) + (64 * 8 * 4 + 64 * 1024), /* V: one group a head */
        32 + 1 + (8 * 4 + 64 * 1024) + (8 * 4 + 64 * 1024),
    };
    for (int i = 0; i < 3; i++) {
        size_t n = 0;
        int used = -1;
        assert_int_equal(kvt_codec_new_layout(codecs[i], 0, PAGE, &L, &c), 0);
        assert_int_equal(kvt_codec_encode_page(c, 3, in, PAGE, st, PAGE, &n, &used), 0);
        assert_int_equal(n, want[i]);
        /* A capacity short of the frame: stored raw needs the page, so -ENOSPC. */
        assert_int_equal(kvt_codec_encode_page(c, 3, in, PAGE, st, n - 1, &n, &used), -ENOSPC);
        kvt_codec_free(c);
    }
    free(in);
    free(st);
}

/* ---------------------------------------------------------------- layers */

static void test_mixed_precision(void **state)
{
    (void)state;
    struct kvt_page_layout L = layout(KVT_DTYPE_BF16, KVT_KV_HEAD_MAJOR);
    L.tokens = 16; /* 64 KiB a layer: four in a page */
    L.n_layers = 4;
    L.full_first = 1;
    L.full_last = 1;
    struct kvt_codec *c;
    uint8_t *in = malloc(PAGE), *st = malloc(PAGE), *out = malloc(PAGE);
    assert_non_null(in);
    assert_non_null(st);
    assert_non_null(out);
    assert_int_equal(kvt_codec_new_layout(KVT_CODEC_INT4, 0, PAGE, &L, &c), 0);
    kvt_codec_fill_kv(in, PAGE, &L, 3);
    size_t n = 0, block = kvt_page_layout_block_bytes(&L);
    int used = -1;
    /* One layer's page: the first and last layers go raw. */
    for (uint32_t layer = 0; layer < 4; layer++) {
        assert_int_equal(kvt_codec_encode_page(c, layer, in, PAGE, st, PAGE, &n, &used), 0);
        assert_int_equal(used, layer == 0 || layer == 3 ? KVT_CODEC_NONE : KVT_CODEC_INT4);
    }
    /* A layer the layout does not have: raw. */
    assert_int_equal(kvt_codec_encode_page(c, 4, in, PAGE, st, PAGE, &n, &used), 0);
    assert_int_equal(used, KVT_CODEC_NONE);
    /* Every layer in one page: blocks 0 and 3 exact, 1 and 2 quantised. */
    assert_int_equal(kvt_codec_encode_page(c, KVT_ALL_LAYERS, in, PAGE, st, PAGE, &n, &used), 0);
    assert_int_equal(used, KVT_CODEC_INT4);
    assert_true(n > 2 * block && n < 3 * block);
    assert_int_equal(kvt_codec_decode(c, used, st, n, out, PAGE), 0);
    assert_memory_equal(in, out, block);
    assert_memory_equal(in + 3 * block, out + 3 * block, block);
    assert_memory_not_equal(in + block, out + block, block);
    for (int b = 1; b <= 2; b++) {
        struct bound_ctx bc = { &L, KVT_CODEC_INT4, in + b * block, out + b * block };
        double rel[2];
        assert_true(block_worst(&bc, rel) <= 1.0);
    }
    kvt_codec_free(c);
    free(in);
    free(st);
    free(out);
}

/* A page of KVT_KV_SPLIT_LAYERS (LMCache's [2, layers, tokens, hidden]
 * chunk): every layer's K, then every layer's V. Its frame is the frame of
 * the same layers stored token-major one after another, byte for byte but
 * the order in the header, and it decodes back to the split page: each
 * layer's K and V found where the chunk has them, the full layers exact. */
static void test_split_layers(void **state)
{
    (void)state;
    struct kvt_page_layout L = layout(KVT_DTYPE_BF16, KVT_KV_TOKEN_MAJOR);
    L.tokens = 15; /* 60 KiB a layer: four in a page, 16 KiB of tail */
    L.n_layers = 4;
    L.full_first = 1;
    L.full_last = 1;
    const size_t block = kvt_page_layout_block_bytes(&L), kb = block / 2; /* K = V here */
    uint8_t *tm = malloc(PAGE), *split = malloc(PAGE), *st = malloc(PAGE), *st2 = malloc(PAGE);
    uint8_t *out = malloc(PAGE), *back = malloc(PAGE);
    assert_true(tm && split && st && st2 && out && back);
    kvt_codec_fill_kv(tm, PAGE, &L, 5);
    uint64_t s = 9;
    for (size_t i = 4 * block; i < PAGE; i++)
        tm[i] = (uint8_t)rnd(&s);
    for (uint32_t l = 0; l < 4; l++) {
        memcpy(split + l * kb, tm + l * block, kb);
        memcpy(split + 4 * kb + l * kb, tm + l * block + kb, kb);
    }
    memcpy(split + 4 * block, tm + 4 * block, PAGE - 4 * block);
    const int codecs[3] = { KVT_CODEC_INT4, KVT_CODEC_INT8, KVT_CODEC_FP8 };
    for (int i = 0; i < 3; i++) {
        struct kvt_codec *a, *b;
        struct kvt_page_layout Ls = L;
        Ls.order = KVT_KV_SPLIT_LAYERS;
        assert_int_equal(kvt_codec_new_layout(codecs[i], 0, PAGE, &L, &a), 0);
        assert_int_equal(kvt_codec_new_layout(codecs[i], 0, PAGE, &Ls, &b), 0);
        size_t n = 0, n2 = 0;
        int used = -1, used2 = -1;
        assert_int_equal(kvt_codec_encode_page(a, KVT_ALL_LAYERS, tm, PAGE, st, PAGE, &n, &used), 0);
        assert_int_equal(kvt_codec_encode_page(b, KVT_ALL_LAYERS, split, PAGE, st2, PAGE, &n2,
                                               &used2), 0);
        assert_int_equal(used2, codecs[i]);
        assert_int_equal(n, n2);
        assert_int_equal(st2[6], KVT_KV_SPLIT_LAYERS);
        st2[6] = st[6];
        assert_memory_equal(st, st2, n);
        st2[6] = KVT_KV_SPLIT_LAYERS;
        assert_int_equal(kvt_codec_decode(b, used2, st2, n2, out, PAGE), 0);
        assert_memory_equal(out + 4 * block, split + 4 * block, PAGE - 4 * block);
        for (uint32_t l = 0; l < 4; l++) {
            memcpy(back + l * block, out + l * kb, kb);
            memcpy(back + l * block + kb, out + 4 * kb + l * kb, kb);
        }
        assert_memory_equal(back, tm, block);
        assert_memory_equal(back + 3 * block, tm + 3 * block, block);
        for (int l = 1; l <= 2; l++) {
            struct bound_ctx bc = { &L, codecs[i], tm + l * block, back + l * block };
            double rel[2];
            assert_memory_not_equal(back + l * block, tm + l * block, block);
            assert_true(block_worst(&bc, rel) <= 1.0);
        }
        /* One layer's page of the same order is a token-major block. */
        assert_int_equal(kvt_codec_encode_page(b, 2, tm, PAGE, st2, PAGE, &n2, &used2), 0);
        assert_int_equal(used2, codecs[i]);
        assert_int_equal(kvt_codec_decode(b, used2, st2, n2, out, PAGE), 0);
        assert_memory_equal(out + block, tm + block, PAGE - block);
        struct bound_ctx bc = { &L, codecs[i], tm, out };
        double rel[2];
        assert_true(block_worst(&bc, rel) <= 1.0);
        kvt_codec_free(a);
        kvt_codec_free(b);
    }
    free(tm);
    free(split);
    free(st);
    free(st2);
    free(out);
    free(back);
}

/* ---------------------------------------------------------------- damage */

static void decode_damaged(struct kvt_codec *c, int codec, uint8_t *st, size_t n, uint8_t *out)
{
    memset(out + PAGE, 0xA5, GUARD);
    int r = kvt_codec_decode(c, codec, st, n, out, PAGE);
    assert_true(r == 0 || r == KVT_ECORRUPT);
    for (unsigned i = 0; i < GUARD; i++)
        assert_int_equal(out[PAGE + i], 0xA5);
}

static void test_damaged_frames(void **state)
{
    (void)state;
    struct kvt_page_layout L = layout(KVT_DTYPE_BF16, KVT_KV_INTERLEAVED);
    const int codecs[3] = { KVT_CODEC_INT4, KVT_CODEC_INT8, KVT_CODEC_FP8 };
    uint8_t *in = malloc(PAGE), *st = malloc(PAGE), *out = malloc(PAGE + GUARD);
    assert_non_null(in);
    assert_non_null(st);
    assert_non_null(out);
    kvt_codec_fill_kv(in, PAGE, &L, 9);
    uint64_t s = 5;
    for (int i = 0; i < 3; i++) {
        struct kvt_codec *c;
        size_t n = 0;
        int used;
        assert_int_equal(kvt_codec_new_layout(codecs[i], 0, PAGE, &L, &c), 0);
        assert_int_equal(kvt_codec_encode_page(c, 0, in, PAGE, st, PAGE, &n, &used), 0);
        /* Every header byte, each bit. */
        for (size_t at = 0; at < 40; at++)
            for (int bit = 0; bit < 8; bit++) {
                st[at] ^= (uint8_t)(1u << bit);
                decode_damaged(c, codecs[i], st, n, out);
                st[at] ^= (uint8_t)(1u << bit);
            }
        /* Random bytes of scales and codes. */
        for (int k = 0; k < 300; k++) {
            size_t at = 33 + rnd(&s) % (n - 33);
            uint8_t was = st[at];
            st[at] = (uint8_t)rnd(&s);
            decode_damaged(c, codecs[i], st, n, out);
            st[at] = was;
        }
        /* Short, long, another codec's name. */
        assert_int_equal(kvt_codec_decode(c, codecs[i], st, n - 1, out, PAGE), KVT_ECORRUPT);
        assert_int_equal(kvt_codec_decode(c, codecs[i], st, n + 1, out, PAGE), KVT_ECORRUPT);
        assert_int_equal(kvt_codec_decode(c, codecs[(i + 1) % 3], st, n, out, PAGE), KVT_ECORRUPT);
        assert_int_equal(kvt_codec_decode(c, codecs[i], st, n, out, PAGE - 4096), KVT_ECORRUPT);
        /* A header whose heads x dimension pass 32 bits is refused, not
         * wrapped into a small block written far out. */
        uint8_t hdr[40];
        memcpy(hdr, st, 40);
        const uint8_t big[8] = { 0, 0, 1, 0, 0, 0, 1, 0 }; /* kv_heads, head_dim 65536 */
        memcpy(st + 12, big, 8);
        memcpy(st + 20, big + 4, 4);
        assert_int_equal(kvt_codec_decode(c, codecs[i], st, n, out, PAGE), KVT_ECORRUPT);
        memcpy(st, hdr, 40);
        /* A scale that is not finite is refused. */
        size_t scale_at = 33 + (codecs[i] == KVT_CODEC_FP8 ? 2 : 0);
        uint8_t was[4];
        memcpy(was, st + scale_at, 4);
        memset(st + scale_at, 0xff, 4);
        assert_int_equal(kvt_codec_decode(c, codecs[i], st, n, out, PAGE), KVT_ECORRUPT);
        memcpy(st + scale_at, was, 4);
        assert_int_equal(kvt_codec_decode(c, codecs[i], st, n, out, PAGE), 0);
        kvt_codec_free(c);
    }
    free(in);
    free(st);
    free(out);
}

/* ---------------------------------------------------------------- axes */

/* The measurement behind K per channel and V per token, on the test data's
 * structure (outlier channels in K): the RMS relative error of INT4 along
 * each axis, computed with the kernels directly. */
static double rms_axis(const uint8_t *page, const struct kvt_page_layout *L, bool key,
                       bool per_channel)
{
    const struct kvt_quant_kernels *k = kvt_quant_best();
    uint32_t T = L->tokens, w = L->kv_heads * L->head_dim;
    const uint8_t *base = page + (key ? 0 : (size_t)T * w * 2);
    static float mn[1024], mx[1024], inv[1024], sc[1024];
    static uint8_t codes[64][512], back[64][2048];
    if (per_channel) {
        k->col_minmax(base, w, T, L->dtype, w, mn, mx);
        for (uint32_t i = 0; i < w; i++)
            sc[i] = (mx[i] - mn[i]) / 15, inv[i] = sc[i] > 0 ? 1 / sc[i] : 0;
    }
    double e = 0, x = 0;
    for (uint32_t r = 0; r < T; r++) {
        const uint8_t *row = base + (size_t)r * w * 2;
        uint32_t group = per_channel ? 0 : 64;
        if (!per_channel) {
            k->group_minmax(row, L->dtype, w, 64, mn, mx);
            for (uint32_t i = 0; i < w / 64; i++)
                sc[i] = (mx[i] - mn[i]) / 15, inv[i] = sc[i] > 0 ? 1 / sc[i] : 0;
        }
        k->quant_int(row, L->dtype, w, group, inv, mn, 4, codes[r]);
        k->dequant_int(codes[r], L->dtype, w, group, sc, mn, 4, back[r]);
        for (uint32_t i = 0; i < w; i++) {
            double a = elem(row, L->dtype, i), b = elem(back[r], L->dtype, i);
            e += (a - b) * (a - b);
            x += a * a;
        }
    }
    return sqrt(e / x);
}

static void test_axis_choice(void **state)
{
    (void)state;
    struct kvt_page_layout L = layout(KVT_DTYPE_BF16, KVT_KV_TOKEN_MAJOR);
    uint8_t *page = malloc(PAGE);
    assert_non_null(page);
    kvt_codec_fill_kv(page, PAGE, &L, 11);
    double kc = rms_axis(page, &L, true, true), kt = rms_axis(page, &L, true, false);
    double vc = rms_axis(page, &L, false, true), vt = rms_axis(page, &L, false, false);
    print_message("INT4 RMS relative error: K per channel %.4f, per token %.4f; V per channel "
                  "%.4f, per token %.4f\n", kc, kt, vc, vt);
    assert_true(kc < kt); /* outlier channels: per channel wins on K */
    assert_true(vt < vc * 1.05); /* V: per token no worse (and its error stays in its token) */
    free(page);
}

/* ---------------------------------------------------------------- config */

static void test_config_layout(void **state)
{
    (void)state;
    kvt_config c = t_config(PAGE, 4, 8);
    c.codec = KVT_CODEC_INT4;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "needs the page layout"));
    kvt_engine *e = (kvt_engine *)(uintptr_t)1;
    assert_int_equal(kvt_open(&c, &e), KVT_ECONFIG);
    assert_null(e);
    c.kv_dtype = KVT_DTYPE_BF16;
    c.page_tokens = 64;
    c.kv_heads = 8;
    c.head_dim = 128;
    assert_int_equal(kvt_config_check(&c), 0);
    c.page_tokens = 65; /* 260 KiB: past the page */
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "do not fit"));
    c.page_tokens = 64;
    c.full_first_layers = 1;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "need n_layers"));
    c.n_layers = 1;
    c.full_last_layers = 1;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    c.n_layers = 2;
    assert_int_equal(kvt_config_check(&c), 0);
    c.kv_dtype = 7;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "kv_dtype 7"));
    c.kv_dtype = KVT_DTYPE_FP16;
    c.kv_order = KVT_KV_MLA;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG); /* 8 heads for MLA */
    c.kv_heads = 0;
    c.head_dim = 512;
    c.rope_dim = 64;
    assert_int_equal(kvt_config_check(&c), 0);
    c.codec = KVT_CODEC_ZSTD; /* a lossless codec takes a layout, checked all the same */
    assert_int_equal(kvt_config_check(&c), 0);
    c.codec = KVT_CODEC_INT4 + 1;
    assert_int_equal(kvt_config_check(&c), KVT_ECONFIG);
}

/* ---------------------------------------------------------------- engine */

static void test_engine_ssd(void **state)
{
    (void)state;
    char dir[256];
    assert_int_equal(t_tmpdir(dir, sizeof dir, "quant"), 0);
    struct kvt_page_layout L = layout(KVT_DTYPE_BF16, KVT_KV_HEAD_MAJOR);
    L.n_layers = 4;
    L.full_first = 1;
    kvt_config c = t_config(PAGE, 2, 4);
    c.device = KVT_DEVICE_HOST;
    c.ssd_bytes = 64 * (size_t)PAGE;
    c.ssd_dir = dir;
    c.codec = KVT_CODEC_INT4;
    c.kv_dtype = L.dtype;
    c.page_tokens = L.tokens;
    c.kv_heads = L.kv_heads;
    c.head_dim = L.head_dim;
    c.n_layers = 4;
    c.full_first_layers = 1;
    kvt_engine *e = NULL;
    t_opened(kvt_open(&c, &e));
    enum { N = 24 };
    uint8_t *pages = aligned_alloc(4096, (size_t)N * PAGE), *back = aligned_alloc(4096, PAGE);
    assert_non_null(pages);
    assert_non_null(back);
    for (int i = 0; i < N; i++) {
        kvt_key k = t_key(1, (uint32_t)i % 4, (uint32_t)i / 4);
        const void *src = pages + (size_t)i * PAGE;
        kvt_codec_fill_kv(pages + (size_t)i * PAGE, PAGE, &L, (uint64_t)i);
        assert_int_equal(kvt_put(e, &k, 1, &src, 0), 0);
    }
    kvt_stats s0 = t_stats(e);
    assert_true(s0.resident_pages[KVT_TIER_SSD] >= N - 6);
    for (int i = 0; i < N; i++) {
        kvt_key k = t_key(1, (uint32_t)i % 4, (uint32_t)i / 4);
        kvt_tier where;
        assert_int_equal(kvt_exists(e, &k, 1, &where), 1);
        void *dst = back;
        int found = 0;
        assert_int_equal(kvt_get(e, &k, 1, &dst, 0, &found), 0);
        assert_int_equal(found, 1);
        const uint8_t *in = pages + (size_t)i * PAGE;
        if (where != KVT_TIER_SSD || k.layer == 0) {
            assert_memory_equal(in, back, PAGE); /* full precision */
            continue;
        }
        struct bound_ctx b = { &L, KVT_CODEC_INT4, in, back };
        double rel[2];
        assert_true(block_worst(&b, rel) <= 1.0);
    }
    kvt_close(e);
    free(pages);
    free(back);
    t_rmtree(dir);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_agree),   cmocka_unit_test(test_fp8_codes),
        cmocka_unit_test(test_roundtrip_error), cmocka_unit_test(test_frame_size),
        cmocka_unit_test(test_mixed_precision), cmocka_unit_test(test_split_layers),
        cmocka_unit_test(test_damaged_frames),
        cmocka_unit_test(test_axis_choice),     cmocka_unit_test(test_config_layout),
        cmocka_unit_test(test_engine_ssd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
