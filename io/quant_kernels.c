/*
 * quant_kernels.c — the row kernels of the lossy codecs: scalar, and AVX2 +
 * F16C, chosen once at run time as io/crc32c.c chooses its path (the AVX2
 * ones are compiled with target attributes, so the file builds without -m
 * flags and runs on any x86-64).
 *
 * Both sets give the same bytes for the same input, which tests/test_quant.c
 * checks on every kernel: no FMA (a fused multiply-add rounds once where the
 * scalar code rounds twice), round-to-nearest-even everywhere (the scalar
 * code rounds with the 1.5 * 2^23 trick, the vector code with cvtps, whose
 * default mode is the same), and the same integer steps for e4m3.
 *
 * e4m3 ("fp8 e4m3fn": 4 exponent bits, bias 7, 3 mantissa bits, no
 * infinities, 0x7f/0xff NaN) from a float y, |y| <= 448 after scaling, goes
 * through fp16 (fp8_code): y * 2^-8 rounded to fp16 (F16C's one instruction)
 * has e4m3's exponent field, subnormals included, and its mantissa is then
 * rounded from 10 bits to 3, saturating at 0x7e. Back: code c < 8 is
 * c * 2^-9; else the float with bits (c << 20) + (120 << 23); exact.
 */
#include <string.h>

#include "include/kvtier.h"
#include "io/quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QUANT_HAVE_AVX2 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define QUANT_HAVE_AVX2 0
#endif

/* ------------------------------------------------------------ conversions */

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float kvt_bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

uint16_t kvt_float_to_bf16(float f)
{
    uint32_t u = float_bits(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float kvt_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0x1f)
        return bits_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) /* subnormal or zero: m * 2^-24, exact */
        return bits_float(float_bits((float)m * 0x1p-24f) | sign);
    return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t kvt_float_to_half(float f)
{
    uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) /* rounds to 65536 or more */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, round(|f| * 2^24) */
        float s = bits_float(a) * 0x1p24f;
        uint32_t m = (uint32_t)((s + 0x1.8p23f) - 0x1.8p23f);
        return (uint16_t)(sign | m);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (((r >> 13) - (112u << 10)) & 0x7fffu));
}

/* ------------------------------------------------------------ scalar */

static float load_one(const void *row, int dtype, uint32_t i)
{
    uint16_t v;
    memcpy(&v, (const uint8_t *)row + 2 * (size_t)i, 2);
    return dtype == KVT_DTYPE_FP16 ? kvt_half_to_float(v) : kvt_bf16_to_float(v);
}

static void store_one(void *row, int dtype, uint32_t i, float f)
{
    uint16_t v = dtype == KVT_DTYPE_FP16 ? kvt_float_to_half(f) : kvt_float_to_bf16(f);
    memcpy((uint8_t *)row + 2 * (size_t)i, &v, 2);
}

/* Round to nearest even for 0 <= x < 2^22, as cvtps does. */
static float round_even(float x)
{
    return (x + 0x1.8p23f) - 0x1.8p23f;
}

static uint32_t param_at(uint32_t i, uint32_t group)
{
    return group ? i / group : i;
}

static bool s_col_minmax(const void *row, size_t stride, uint32_t rows, int dtype, uint32_t w,
                         float *mn, float *mx)
{
    bool ordered = true;
    for (uint32_t i = 0; i < w; i++) {
        mn[i] = mx[i] = load_one(row, dtype, i);
        ordered &= mn[i] == mn[i];
    }
    for (uint32_t r = 1; r < rows; r++) {
        const uint8_t *p = (const uint8_t *)row + 2 * stride * r;
        for (uint32_t i = 0; i < w; i++) {
            float x = load_one(p, dtype, i);
            ordered &= x == x;
            mn[i] = x < mn[i] ? x : mn[i];
            mx[i] = x > mx[i] ? x : mx[i];
        }
    }
    return ordered;
}

static bool s_group_minmax(const void *row, int dtype, uint32_t w, uint32_t g, float *mn, float *mx)
{
    bool ordered = true;
    for (uint32_t i = 0; i < w; i += g) {
        float lo = load_one(row, dtype, i), hi = lo;
        ordered &= lo == lo;
        for (uint32_t j = 1; j < g; j++) {
            float x = load_one(row, dtype, i + j);
            ordered &= x == x;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        mn[i / g] = lo;
        mx[i / g] = hi;
    }
    return ordered;
}

/* As the vector code: round, then clamp (a NaN to 0). */
static uint32_t s_quant_one(float x, float mn, float inv, float qmax)
{
    float y = (x - mn) * inv;
    if (!(y > -0.5f))
        return 0;
    y = round_even(y < qmax ? y : qmax);
    return (uint32_t)y;
}

static void s_quant_int_from(const void *row, int dtype, uint32_t from, uint32_t w, uint32_t group,
                             const float *inv, const float *mn, unsigned bits, uint8_t *dst)
{
    float qmax = (float)((1u << bits) - 1);
    for (uint32_t i = from; i < w; i++) {
        uint32_t p = param_at(i, group), q = s_quant_one(load_one(row, dtype, i), mn[p], inv[p], qmax);
        if (bits == 8) {
            dst[i] = (uint8_t)q;
        } else if (i & 1) {
            dst[i / 2] = (uint8_t)((dst[i / 2] & 0x0f) | (q << 4));
        } else {
            dst[i / 2] = (uint8_t)q;
        }
    }
}

static void s_quant_int(const void *row, int dtype, uint32_t w, uint32_t group, const float *inv,
                        const float *mn, unsigned bits, uint8_t *dst)
{
    s_quant_int_from(row, dtype, 0, w, group, inv, mn, bits, dst);
}

static void s_dequant_int_from(const uint8_t *src, int dtype, uint32_t from, uint32_t w,
                               uint32_t group, const float *sc, const float *mn, unsigned bits,
                               void *row)
{
    for (uint32_t i = from; i < w; i++) {
        uint32_t p = param_at(i, group);
        uint32_t q = bits == 8 ? src[i] : (src[i / 2] >> (4 * (i & 1))) & 0x0f;
        float t = (float)q * sc[p];
        store_one(row, dtype, i, t + mn[p]);
    }
}

static void s_dequant_int(const uint8_t *src, int dtype, uint32_t w, uint32_t group, const float *sc,
                          const float *mn, unsigned bits, void *row)
{
    s_dequant_int_from(src, dtype, 0, w, group, sc, mn, bits, row);
}

/* e4m3 of y through fp16, as the vector code does it with one instruction:
 * y * 2^-8 rounded to fp16 has e4m3's exponent bias (15 - 8 = 7), and fp16
 * subnormals are e4m3's too (m * 2^-17 = m/128 codes of 2^-9 * 2^-8); then
 * its 10 mantissa bits are rounded to 3, to nearest even, saturating at
 * 0x7e (448). Rounding twice may differ from rounding |y| once by one code
 * where the first rounding makes a tie (a 2^-11 relative step at most):
 * both kernel sets do the same, so a page reads the same whichever wrote it. */
static uint8_t fp8_code(float y)
{
    uint16_t h = kvt_float_to_half(y * 0x1p-8f);
    uint32_t sign = (h >> 8) & 0x80u, a = h & 0x7fffu;
    a = (a + 0x3fu + ((a >> 7) & 1u)) >> 7;
    return (uint8_t)((a < 0x7eu ? a : 0x7eu) | sign);
}

static float fp8_value(uint8_t c)
{
    uint32_t m = c & 0x7fu;
    float v = m < 8 ? (float)m * 0x1p-9f : bits_float((m << 20) + (120u << 23));
    return c & 0x80u ? -v : v;
}

static void s_quant_fp8_from(const void *row, int dtype, uint32_t from, uint32_t w, uint32_t group,
                             const float *inv, uint8_t *dst)
{
    for (uint32_t i = from; i < w; i++)
        dst[i] = fp8_code(load_one(row, dtype, i) * inv[param_at(i, group)]);
}

static void s_quant_fp8(const void *row, int dtype, uint32_t w, uint32_t group, const float *inv,
                        uint8_t *dst)
{
    s_quant_fp8_from(row, dtype, 0, w, group, inv, dst);
}

static void s_dequant_fp8_from(const uint8_t *src, int dtype, uint32_t from, uint32_t w,
                               uint32_t group, const float *sc, void *row)
{
    for (uint32_t i = from; i < w; i++)
        store_one(row, dtype, i, fp8_value(src[i]) * sc[param_at(i, group)]);
}

static void s_dequant_fp8(const uint8_t *src, int dtype, uint32_t w, uint32_t group, const float *sc,
                          void *row)
{
    s_dequant_fp8_from(src, dtype, 0, w, group, sc, row);
}

#define FP16_MAX 65504.0f

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static bool s_params_out_from(const float *lo, const float *hi, uint32_t from, uint32_t n,
                              float qmax, uint8_t *ps, uint8_t *pm, float *inv, float *mn)
{
    for (uint32_t i = from; i < n; i++) {
        float l = lo[i] + 0.0f, h = hi[i] + 0.0f; /* -0 to +0: the sets may find either */
        float sc = (h - l) / qmax;
        if (!(sc >= 0 && sc <= FP16_MAX && l >= -FP16_MAX && l <= FP16_MAX))
            return false; /* out of fp16's range, or NaN */
        uint16_t s16 = kvt_float_to_half(sc), m16 = kvt_float_to_half(l);
        wr16(ps + 2 * i, s16);
        wr16(pm + 2 * i, m16);
        float scd = kvt_half_to_float(s16);
        mn[i] = kvt_half_to_float(m16);
        inv[i] = scd > 0 ? 1.0f / scd : 0.0f;
    }
    return true;
}

static bool s_params_out(const float *lo, const float *hi, uint32_t n, float qmax, uint8_t *ps,
                         uint8_t *pm, float *inv, float *mn)
{
    return s_params_out_from(lo, hi, 0, n, qmax, ps, pm, inv, mn);
}

static bool s_params_in_from(const uint8_t *ps, const uint8_t *pm, uint32_t from, uint32_t n,
                             float *sc, float *mn)
{
    for (uint32_t i = from; i < n; i++) {
        uint16_t a = rd16(ps + 2 * i), b = rd16(pm + 2 * i);
        if ((a & 0x7c00u) == 0x7c00u || (b & 0x7c00u) == 0x7c00u)
            return false;
        sc[i] = kvt_half_to_float(a);
        mn[i] = kvt_half_to_float(b);
    }
    return true;
}

static bool s_params_in(const uint8_t *ps, const uint8_t *pm, uint32_t n, float *sc, float *mn)
{
    return s_params_in_from(ps, pm, 0, n, sc, mn);
}

const struct kvt_quant_kernels kvt_quant_scalar = {
    "scalar",      s_col_minmax,  s_group_minmax, s_quant_int, s_dequant_int,
    s_quant_fp8,   s_dequant_fp8, s_params_out,   s_params_in,
};

/* ------------------------------------------------------------ AVX2 */

#if QUANT_HAVE_AVX2
#define AVX2 __attribute__((target("avx2,f16c")))
#define INLINE __attribute__((always_inline)) inline

AVX2 static __attribute__((always_inline)) inline __m256 v_load(const void *row, int dtype, uint32_t i)
{
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint8_t *)row + 2 * (size_t)i));
    if (dtype == KVT_DTYPE_FP16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2 static INLINE void v_store(void *row, int dtype, uint32_t i, __m256 f)
{
    __m128i out;
    if (dtype == KVT_DTYPE_FP16) {
        out = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        __m256i u = _mm256_castps_si256(f);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
        u = _mm256_srli_epi32(u, 16);
        __m256i p = _mm256_packus_epi32(u, u); /* per lane: 4 words twice */
        out = _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
    }
    _mm_storeu_si128((__m128i *)((uint8_t *)row + 2 * (size_t)i), out);
}

/* Strips of 32 columns, then 8, down all rows with the running min and max
 * in registers: the rows are 2 * stride bytes apart, which the prefetcher
 * follows, and mn/mx are written once. */
/* A NaN is noted, not ordered: min and max pass over it differently in the
 * two sets, so its page goes raw (quant.c). The note costs one compare and
 * one OR a vector. */
AVX2 static bool v_col_minmax(const void *row, size_t stride, uint32_t rows, int dtype, uint32_t w,
                              float *mn, float *mx)
{
    const uint8_t *base = row;
    uint32_t i = 0;
    __m256 nan = _mm256_setzero_ps();
    for (; i + 32 <= w; i += 32) {
        __m256 lo[4], hi[4];
        for (int k = 0; k < 4; k++) {
            lo[k] = hi[k] = v_load(base, dtype, i + 8 * k);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(lo[k], lo[k], _CMP_UNORD_Q));
        }
        for (uint32_t r = 1; r < rows; r++) {
            const uint8_t *p = base + 2 * stride * r;
            for (int k = 0; k < 4; k++) {
                __m256 x = v_load(p, dtype, i + 8 * k);
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
                lo[k] = _mm256_min_ps(lo[k], x);
                hi[k] = _mm256_max_ps(hi[k], x);
            }
        }
        for (int k = 0; k < 4; k++) {
            _mm256_storeu_ps(mn + i + 8 * k, lo[k]);
            _mm256_storeu_ps(mx + i + 8 * k, hi[k]);
        }
    }
    for (; i + 8 <= w; i += 8) {
        __m256 lo = v_load(base, dtype, i), hi = lo;
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(lo, lo, _CMP_UNORD_Q));
        for (uint32_t r = 1; r < rows; r++) {
            __m256 x = v_load(base + 2 * stride * r, dtype, i);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
            lo = _mm256_min_ps(lo, x);
            hi = _mm256_max_ps(hi, x);
        }
        _mm256_storeu_ps(mn + i, lo);
        _mm256_storeu_ps(mx + i, hi);
    }
    bool ordered = _mm256_movemask_ps(nan) == 0;
    if (i < w)
        ordered &= s_col_minmax(base + 2 * (size_t)i, stride, rows, dtype, w - i, mn + i, mx + i);
    return ordered;
}

AVX2 static float hmin(__m256 v)
{
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

AVX2 static float hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

AVX2 static bool v_group_minmax(const void *row, int dtype, uint32_t w, uint32_t g, float *mn,
                                float *mx)
{
    if (g % 8)
        return s_group_minmax(row, dtype, w, g, mn, mx);
    __m256 nan = _mm256_setzero_ps();
    for (uint32_t i = 0; i < w; i += g) {
        __m256 lo = v_load(row, dtype, i), hi = lo;
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(lo, lo, _CMP_UNORD_Q));
        for (uint32_t j = 8; j < g; j += 8) {
            __m256 x = v_load(row, dtype, i + j);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
            lo = _mm256_min_ps(lo, x);
            hi = _mm256_max_ps(hi, x);
        }
        mn[i / g] = hmin(lo);
        mx[i / g] = hmax(hi);
    }
    return _mm256_movemask_ps(nan) == 0;
}

/* Eight 32-bit lanes (each 0..255) to eight bytes, in order. */
AVX2 static inline __m128i v_bytes8(__m256i q)
{
    __m256i p = _mm256_packus_epi32(q, q);
    p = _mm256_packus_epi16(p, p); /* lane 0: q0..q3 x4, lane 1: q4..q7 x4 */
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    return _mm256_castsi256_si128(p);
}

/* 32 lanes (four vectors of 32-bit, each 0..255) to 32 bytes, in order. */
AVX2 static inline __m256i v_bytes32(__m256i q0, __m256i q1, __m256i q2, __m256i q3)
{
    __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q0, q1), _mm256_packus_epi32(q2, q3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 32 codes of 4 bits (one a byte) to 16 bytes, element 2i low. */
AVX2 static inline __m128i v_nibbles(__m256i b)
{
    __m256i w = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x1001));
    w = _mm256_packus_epi16(w, w);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(w, 0x08));
}

/* 16 bytes of 4-bit codes to 32 bytes of one code each, in order. */
AVX2 static inline __m256i v_unnibble(__m128i b)
{
    const __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}

AVX2 static inline __m256i v_u8x8(__m256i bytes32, int k)
{
    __m128i h = k < 2 ? _mm256_castsi256_si128(bytes32) : _mm256_extracti128_si256(bytes32, 1);
    return _mm256_cvtepu8_epi32(k & 1 ? _mm_srli_si128(h, 8) : h);
}

/* Two vectors of floats to 16 elements of dtype at row + 2 i. */
AVX2 static INLINE void v_store16(void *row, int dtype, uint32_t i, __m256 a, __m256 b)
{
    if (dtype == KVT_DTYPE_FP16) {
        v_store(row, dtype, i, a);
        v_store(row, dtype, i + 8, b);
        return;
    }
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
    __m256i u = _mm256_castps_si256(a), v = _mm256_castps_si256(b);
    u = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
    v = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(v, 16), one))), 16);
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(u, v), 0xd8);
    _mm256_storeu_si256((__m256i *)((uint8_t *)row + 2 * (size_t)i), p);
}

/* The parameters of a span of columns: per column from arrays (a != NULL,
 * indexed by column), or one value for the whole span (a group). */
struct vparam {
    const float *a, *b; /* arrays, or NULL */
    float va, vb;       /* the span's values when the arrays are NULL */
};

AVX2 static __attribute__((always_inline)) inline __m256 vp_a(const struct vparam *p, uint32_t i)
{
    return p->a ? _mm256_loadu_ps(p->a + i) : _mm256_set1_ps(p->va);
}

AVX2 static __attribute__((always_inline)) inline __m256 vp_b(const struct vparam *p, uint32_t i)
{
    return p->b ? _mm256_loadu_ps(p->b + i) : _mm256_set1_ps(p->vb);
}

/* Columns [i, end) in steps of 32 then 8; returns where it stopped. */
/* The clamp to [0, qmax] is the packing's saturation: a negative code (and
 * a NaN's, which cvtps makes INT_MIN) packs to 0, and for 8 bits one above
 * 255 to 255; 4-bit codes are capped at 15 once packed. No code reaches
 * 2^31: |x - mn| / scale stays below 2^28 for fp16 parameters. */
AVX2 static INLINE uint32_t v_quant_span(const void *row, int dtype, uint32_t i, uint32_t end,
                                         const struct vparam *p, unsigned bits, uint8_t *dst)
{
    for (; i + 32 <= end; i += 32) {
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            uint32_t at = i + 8 * k;
            q[k] = _mm256_cvtps_epi32(
                _mm256_mul_ps(_mm256_sub_ps(v_load(row, dtype, at), vp_b(p, at)), vp_a(p, at)));
        }
        __m256i b = v_bytes32(q[0], q[1], q[2], q[3]);
        if (bits == 8)
            _mm256_storeu_si256((__m256i *)(dst + i), b);
        else
            _mm_storeu_si128((__m128i *)(dst + i / 2),
                             v_nibbles(_mm256_min_epu8(b, _mm256_set1_epi8(15))));
    }
    for (; i + 8 <= end; i += 8) {
        __m256i q = _mm256_cvtps_epi32(
            _mm256_mul_ps(_mm256_sub_ps(v_load(row, dtype, i), vp_b(p, i)), vp_a(p, i)));
        __m128i b = v_bytes8(q);
        if (bits == 8) {
            _mm_storel_epi64((__m128i *)(dst + i), b);
        } else {
            /* Pairs of bytes into one: even low, odd high. */
            b = _mm_min_epu8(b, _mm_set1_epi8(15));
            b = _mm_maddubs_epi16(b, _mm_set1_epi16(0x1001));
            b = _mm_packus_epi16(b, b);
            int32_t four = _mm_cvtsi128_si32(b);
            memcpy(dst + i / 2, &four, 4);
        }
    }
    return i;
}

/* One body, instantiated for each constant dtype and bits (always_inline):
 * the branches on them then vanish from the loops. */
AVX2 static INLINE uint32_t v_quant_body(const void *row, int dtype, uint32_t w, uint32_t group,
                                         const float *inv, const float *mn, unsigned bits,
                                         uint8_t *dst)
{
    uint32_t i = 0;
    if (!group) {
        struct vparam p = { inv, mn, 0, 0 };
        i = v_quant_span(row, dtype, 0, w, &p, bits, dst);
    } else if (group % 8 == 0) {
        for (; i + group <= w; i += group) {
            struct vparam p = { NULL, NULL, inv[i / group], mn[i / group] };
            v_quant_span(row, dtype, i, i + group, &p, bits, dst);
        }
    }
    return i;
}

AVX2 static void v_quant_int(const void *row, int dtype, uint32_t w, uint32_t group, const float *inv,
                             const float *mn, unsigned bits, uint8_t *dst)
{
    uint32_t i;
    bool bf = dtype != KVT_DTYPE_FP16;
    if (bits == 8)
        i = bf ? v_quant_body(row, KVT_DTYPE_BF16, w, group, inv, mn, 8, dst)
               : v_quant_body(row, KVT_DTYPE_FP16, w, group, inv, mn, 8, dst);
    else
        i = bf ? v_quant_body(row, KVT_DTYPE_BF16, w, group, inv, mn, 4, dst)
               : v_quant_body(row, KVT_DTYPE_FP16, w, group, inv, mn, 4, dst);
    s_quant_int_from(row, dtype, i, w, group, inv, mn, bits, dst);
}

AVX2 static INLINE uint32_t v_dequant_span(const uint8_t *src, int dtype, uint32_t i, uint32_t end,
                                           const struct vparam *p, unsigned bits, void *row)
{
    for (; i + 32 <= end; i += 32) {
        __m256i b = bits == 8 ? _mm256_loadu_si256((const __m256i *)(src + i))
                              : v_unnibble(_mm_loadu_si128((const __m128i *)(src + i / 2)));
        __m256 f[4];
        for (int k = 0; k < 4; k++) {
            uint32_t at = i + 8 * k;
            __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(v_u8x8(b, k)), vp_a(p, at));
            f[k] = _mm256_add_ps(t, vp_b(p, at));
        }
        v_store16(row, dtype, i, f[0], f[1]);
        v_store16(row, dtype, i + 16, f[2], f[3]);
    }
    const __m256i shift = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    for (; i + 8 <= end; i += 8) {
        __m256i q;
        if (bits == 8) {
            q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + i)));
        } else {
            int32_t four;
            memcpy(&four, src + i / 2, 4);
            __m128i b = _mm_cvtsi32_si128(four);
            q = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
            q = _mm256_and_si256(_mm256_srlv_epi32(q, shift), _mm256_set1_epi32(0x0f));
        }
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(q), vp_a(p, i));
        v_store(row, dtype, i, _mm256_add_ps(t, vp_b(p, i)));
    }
    return i;
}

AVX2 static INLINE uint32_t v_dequant_body(const uint8_t *src, int dtype, uint32_t w,
                                           uint32_t group, const float *sc, const float *mn,
                                           unsigned bits, void *row)
{
    uint32_t i = 0;
    if (!group) {
        struct vparam p = { sc, mn, 0, 0 };
        i = v_dequant_span(src, dtype, 0, w, &p, bits, row);
    } else if (group % 8 == 0) {
        for (; i + group <= w; i += group) {
            struct vparam p = { NULL, NULL, sc[i / group], mn[i / group] };
            v_dequant_span(src, dtype, i, i + group, &p, bits, row);
        }
    }
    return i;
}

AVX2 static void v_dequant_int(const uint8_t *src, int dtype, uint32_t w, uint32_t group,
                               const float *sc, const float *mn, unsigned bits, void *row)
{
    uint32_t i;
    bool bf = dtype != KVT_DTYPE_FP16;
    if (bits == 8)
        i = bf ? v_dequant_body(src, KVT_DTYPE_BF16, w, group, sc, mn, 8, row)
               : v_dequant_body(src, KVT_DTYPE_FP16, w, group, sc, mn, 8, row);
    else
        i = bf ? v_dequant_body(src, KVT_DTYPE_BF16, w, group, sc, mn, 4, row)
               : v_dequant_body(src, KVT_DTYPE_FP16, w, group, sc, mn, 4, row);
    s_dequant_int_from(src, dtype, i, w, group, sc, mn, bits, row);
}

/* e4m3 codes of 16 elements, through fp16 (see fp8_code): y * 2^-8 as
 * fp16 has e4m3's exponent field, so its top bits rounded are the code. */
AVX2 static INLINE __m256i v_fp8_16(const void *row, int dtype, uint32_t i, const struct vparam *p)
{
    const __m256 down = _mm256_set1_ps(0x1p-8f);
    __m256 y0 = _mm256_mul_ps(_mm256_mul_ps(v_load(row, dtype, i), vp_a(p, i)), down);
    __m256 y1 = _mm256_mul_ps(_mm256_mul_ps(v_load(row, dtype, i + 8), vp_a(p, i + 8)), down);
    __m128i h0 = _mm256_cvtps_ph(y0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128i h1 = _mm256_cvtps_ph(y1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i h = _mm256_set_m128i(h1, h0);
    __m256i sign = _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)), 8);
    __m256i a = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi16(a, 7), _mm256_set1_epi16(1));
    a = _mm256_add_epi16(a, _mm256_add_epi16(lsb, _mm256_set1_epi16(0x3f)));
    a = _mm256_min_epi16(_mm256_srli_epi16(a, 7), _mm256_set1_epi16(0x7e));
    return _mm256_or_si256(a, sign);
}

/* 32 codes from two vectors of 16 words (each 0..255), in order. */
AVX2 static INLINE __m256i v_words_bytes(__m256i a, __m256i b)
{
    return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xd8);
}

AVX2 static INLINE uint32_t v_quant_fp8_body(const void *row, int dtype, uint32_t w,
                                             uint32_t group, const float *inv, uint8_t *dst)
{
    uint32_t i = 0;
    if (group % 16 == 0) {
        uint32_t span = group ? group : w / 16 * 16;
        for (uint32_t g0 = 0; g0 + span <= w && span; g0 += span) {
            struct vparam p = { group ? NULL : inv, NULL, group ? inv[g0 / group] : 0, 0 };
            for (i = g0; i + 32 <= g0 + span; i += 32) {
                __m256i b = v_words_bytes(v_fp8_16(row, dtype, i, &p),
                                          v_fp8_16(row, dtype, i + 16, &p));
                _mm256_storeu_si256((__m256i *)(dst + i), b);
            }
            for (; i + 16 <= g0 + span; i += 16) {
                __m256i b = v_words_bytes(v_fp8_16(row, dtype, i, &p), _mm256_setzero_si256());
                _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(b));
            }
        }
    }
    return i;
}

AVX2 static void v_quant_fp8(const void *row, int dtype, uint32_t w, uint32_t group, const float *inv,
                             uint8_t *dst)
{
    uint32_t i = dtype != KVT_DTYPE_FP16 ? v_quant_fp8_body(row, KVT_DTYPE_BF16, w, group, inv, dst)
                                         : v_quant_fp8_body(row, KVT_DTYPE_FP16, w, group, inv, dst);
    s_quant_fp8_from(row, dtype, i, w, group, inv, dst);
}

AVX2 static INLINE __m256 v_unfp8(__m256i c, __m256 scale)
{
    const __m256i seven = _mm256_set1_epi32(0x7f), eight = _mm256_set1_epi32(8);
    const __m256i rebase = _mm256_set1_epi32(120 << 23);
    __m256i m = _mm256_and_si256(c, seven);
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f));
    __m256 norm = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(m, 20), rebase));
    __m256 v = _mm256_blendv_ps(norm, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(eight, m)));
    __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(c, 7), 31);
    v = _mm256_xor_ps(v, _mm256_castsi256_ps(sign));
    return _mm256_mul_ps(v, scale);
}

AVX2 static INLINE uint32_t v_dequant_fp8_body(const uint8_t *src, int dtype, uint32_t w,
                                               uint32_t group, const float *sc, void *row)
{
    uint32_t i = 0;
    if (group % 8 == 0) {
        uint32_t span = group ? group : w;
        for (uint32_t g0 = 0; g0 + span <= w; g0 += span) {
            struct vparam p = { group ? NULL : sc, NULL, group ? sc[g0 / group] : 0, 0 };
            for (i = g0; i + 32 <= g0 + span; i += 32) {
                __m256i b = _mm256_loadu_si256((const __m256i *)(src + i));
                __m256 f[4];
                for (int k = 0; k < 4; k++)
                    f[k] = v_unfp8(v_u8x8(b, k), vp_a(&p, i + 8 * k));
                v_store16(row, dtype, i, f[0], f[1]);
                v_store16(row, dtype, i + 16, f[2], f[3]);
            }
            for (; i + 8 <= g0 + span; i += 8) {
                __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + i)));
                v_store(row, dtype, i, v_unfp8(c, vp_a(&p, i)));
            }
        }
    }
    return i;
}

AVX2 static void v_dequant_fp8(const uint8_t *src, int dtype, uint32_t w, uint32_t group,
                               const float *sc, void *row)
{
    uint32_t i = dtype != KVT_DTYPE_FP16
                     ? v_dequant_fp8_body(src, KVT_DTYPE_BF16, w, group, sc, row)
                     : v_dequant_fp8_body(src, KVT_DTYPE_FP16, w, group, sc, row);
    s_dequant_fp8_from(src, dtype, i, w, group, sc, row);
}

/* Eight ranges at a time: the same steps as s_params_out, each rounding
 * the same (cvtps_ph and kvt_float_to_half both round to nearest even; the
 * division is IEEE's in both). */
AVX2 static bool v_params_out(const float *lo, const float *hi, uint32_t n, float qmax, uint8_t *ps,
                              uint8_t *pm, float *inv, float *mn)
{
    const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(FP16_MAX),
                 bot = _mm256_set1_ps(-FP16_MAX), q = _mm256_set1_ps(qmax),
                 one = _mm256_set1_ps(1.0f);
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 l = _mm256_add_ps(_mm256_loadu_ps(lo + i), zero);
        __m256 h = _mm256_add_ps(_mm256_loadu_ps(hi + i), zero);
        __m256 sc = _mm256_div_ps(_mm256_sub_ps(h, l), q);
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(sc, zero, _CMP_GE_OQ));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(sc, top, _CMP_LE_OQ));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(l, bot, _CMP_GE_OQ));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(l, top, _CMP_LE_OQ));
        __m128i s16 = _mm256_cvtps_ph(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m128i m16 = _mm256_cvtps_ph(l, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(ps + 2 * (size_t)i), s16);
        _mm_storeu_si128((__m128i *)(pm + 2 * (size_t)i), m16);
        __m256 scd = _mm256_cvtph_ps(s16);
        __m256 iv = _mm256_and_ps(_mm256_div_ps(one, scd), _mm256_cmp_ps(scd, zero, _CMP_GT_OQ));
        _mm256_storeu_ps(mn + i, _mm256_cvtph_ps(m16));
        _mm256_storeu_ps(inv + i, iv);
    }
    if (_mm256_movemask_ps(ok) != 0xff)
        return false;
    return s_params_out_from(lo, hi, i, n, qmax, ps, pm, inv, mn);
}

AVX2 static bool v_params_in(const uint8_t *ps, const uint8_t *pm, uint32_t n, float *sc, float *mn)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i a = _mm_loadu_si128((const __m128i *)(ps + 2 * (size_t)i));
        __m128i b = _mm_loadu_si128((const __m128i *)(pm + 2 * (size_t)i));
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(a, expo), expo));
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(b, expo), expo));
        _mm256_storeu_ps(sc + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(mn + i, _mm256_cvtph_ps(b));
    }
    if (_mm_movemask_epi8(bad))
        return false;
    return s_params_in_from(ps, pm, i, n, sc, mn);
}

const struct kvt_quant_kernels kvt_quant_avx2 = {
    "avx2",      v_col_minmax,  v_group_minmax, v_quant_int, v_dequant_int,
    v_quant_fp8, v_dequant_fp8, v_params_out,   v_params_in,
};
#endif

/* Racing first calls all store the same pointer: relaxed atomics suffice. */
static const struct kvt_quant_kernels *quant_chosen;

const struct kvt_quant_kernels *kvt_quant_best(void)
{
    const struct kvt_quant_kernels *k = __atomic_load_n(&quant_chosen, __ATOMIC_RELAXED);
    if (k)
        return k;
    k = &kvt_quant_scalar;
#if QUANT_HAVE_AVX2
    /* F16C from CPUID leaf 1 (ECX bit 29): not every compiler's
     * __builtin_cpu_supports knows its name. AVX2 implies the OS saves the
     * YMM registers (the builtin checks XGETBV). */
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)))
        k = &kvt_quant_avx2;
#endif
    __atomic_store_n(&quant_chosen, k, __ATOMIC_RELAXED);
    return k;
}
