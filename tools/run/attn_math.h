/*
 * attn_math.h — the float arithmetic of `kvtier run`'s attention, written
 * once for the CPU kernel (tools/run/attention.c), its reference, and a GPU
 * kernel over device pages.
 *
 * Bit-exact verification needs every implementation to perform the same
 * IEEE operations in the same order. Two things stand in the way across a
 * CPU and a GPU: libm's expf and CUDA's expf round differently, and
 * compilers fuse a*b+c into one FMA (nvcc by default; GCC where the target
 * has FMA). So the exponential here is our own (range reduction and a
 * polynomial in plain multiplies and adds), multiplies and adds go through
 * ATTN_MUL/ATTN_ADD (round-to-nearest intrinsics in CUDA, which are never
 * fused), and the C files that use them are built with -ffp-contract=off.
 *
 * The scalar helpers below spell out, for one q head, the order the CPU
 * kernel's 8-lane vectors compute in: lane j of a dot product sums the
 * products of elements j, j+8, j+16, ... and the lanes are joined by one
 * fixed tree. tests/test_run.c runs them against attn_decode bit for bit.
 */
#ifndef KVT_ATTN_MATH_H
#define KVT_ATTN_MATH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ATTN_HD static __device__ inline
#define ATTN_MUL(a, b) __fmul_rn((a), (b))
#define ATTN_ADD(a, b) __fadd_rn((a), (b))
#define ATTN_DIV(a, b) __fdiv_rn((a), (b))
#else
#define ATTN_HD static inline
#define ATTN_MUL(a, b) ((a) * (b))
#define ATTN_ADD(a, b) ((a) + (b))
#define ATTN_DIV(a, b) ((a) / (b))
#endif

/* e^x for x <= 0 (softmax only ever asks for that: a score minus the
 * running maximum), 0 below -87 and for -inf; within 1 ulp of e^x over
 * [-87, 0] (measured over 20 million points of it against libm in double;
 * tests/test_run.c sweeps 2 million and allows 2). Cody-Waite
 * reduction x = n ln2 + r with |r| <= ln2/2, then a degree-7 Taylor
 * polynomial in Horner form, scaled by 2^n built from its bits. */
ATTN_HD float attn_exp(float x)
{
    if (!(x >= -87.0f)) /* also -inf and NaN */
        return 0.0f;
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f; /* 11 significant bits: n * ln2_hi is exact */
    const float ln2_lo = 1.42860682030941723e-6f;
    float t = ATTN_ADD(ATTN_MUL(x, log2e), 0.5f); /* n = floor(x log2 e + 1/2) */
    int n = (int)t;                               /* truncation toward 0 ... */
    if ((float)n > t)
        n--;                                      /* ... made a floor */
    float fn = (float)n;
    float r = ATTN_ADD(ATTN_ADD(x, -ATTN_MUL(fn, ln2_hi)), -ATTN_MUL(fn, ln2_lo));
    float p = 1.0f / 5040.0f;
    p = ATTN_ADD(ATTN_MUL(p, r), 1.0f / 720.0f);
    p = ATTN_ADD(ATTN_MUL(p, r), 1.0f / 120.0f);
    p = ATTN_ADD(ATTN_MUL(p, r), 1.0f / 24.0f);
    p = ATTN_ADD(ATTN_MUL(p, r), 1.0f / 6.0f);
    p = ATTN_ADD(ATTN_MUL(p, r), 0.5f);
    p = ATTN_ADD(ATTN_MUL(p, r), 1.0f);
    p = ATTN_ADD(ATTN_MUL(p, r), 1.0f);
    /* n is in [-126, 0]: 2^n is a normal float. */
    uint32_t bits = (uint32_t)(n + 127) << 23;
#ifdef __CUDACC__
    float scale = __uint_as_float(bits);
#else
    float scale;
    memcpy(&scale, &bits, sizeof scale);
#endif
    return ATTN_MUL(p, scale);
}

/* The CPU kernel's horizontal sum of its 8 lanes. */
ATTN_HD float attn_hsum8(const float v[8])
{
    return ATTN_ADD(ATTN_ADD(ATTN_ADD(v[0], v[1]), ATTN_ADD(v[2], v[3])),
                    ATTN_ADD(ATTN_ADD(v[4], v[5]), ATTN_ADD(v[6], v[7])));
}

/* A q head's running softmax state over one page's nt scores: the new
 * maximum *m and sum *l, the factor *c that rescales the output so far, and
 * p[t] = e^(sc[t] - max). */
ATTN_HD void attn_fold_stats(const float *sc, uint32_t nt, float *m, float *l, float *c,
                             float *p)
{
    float mx = *m;
    for (uint32_t t = 0; t < nt; t++)
        if (sc[t] > mx)
            mx = sc[t];
    *c = attn_exp(ATTN_ADD(*m, -mx)); /* 0 on the first page: m is -inf */
    float sum = ATTN_MUL(*l, *c);
    for (uint32_t t = 0; t < nt; t++) {
        p[t] = attn_exp(ATTN_ADD(sc[t], -mx));
        sum = ATTN_ADD(sum, p[t]);
    }
    *m = mx;
    *l = sum;
}

/* A bfloat16 element (the upper 16 bits of an fp32) widened: exact. */
ATTN_HD float attn_bf16(uint16_t h)
{
#ifdef __CUDACC__
    return __uint_as_float((unsigned)h << 16);
#else
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* An fp8 e4m3 byte (1 sign, 4 exponent bits of bias 7, 3 mantissa bits;
 * 0x7f and 0xff, NaN, are never stored) widened: exact. */
ATTN_HD float attn_e4m3(uint8_t b)
{
    /* Branch-free: the sign is as random as the values, and a branch on it
     * would be mispredicted half the time; the subnormal case is a select. */
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    uint32_t u = (e + 120u) << 23 | m << 20;
    float v, vs = (float)m * (1.0f / 512.0f); /* subnormal: m 2^-9, exact */
#ifdef __CUDACC__
    v = e ? __uint_as_float(u) : vs;
    return __uint_as_float(__float_as_uint(v) | (uint32_t)(b & 0x80u) << 24);
#else
    uint32_t us;
    memcpy(&us, &vs, sizeof us);
    u = e ? u : us;
    u |= (uint32_t)(b & 0x80u) << 24;
    memcpy(&v, &u, sizeof v);
    return v;
#endif
}

/* Element d of row r of a block of rows of D elements of type dtype
 * (attention.h's enum attn_dtype: 0 fp32, 1 bf16, 2 fp8, 3 int8, 4 int4)
 * whose scales start at sc, as fp32: widened exactly, or dequantised
 * with one rounded multiply (fp8, int8) and one rounded add after it
 * (int4's minimum). pc: the block is scaled per channel (K: scale d,
 * whatever the row), else per group of 64 of each row (V). */
ATTN_HD float attn_deq(const void *rows, const float *sc, size_t r, uint32_t D, uint32_t d,
                       int dtype, int pc)
{
    size_t i = r * D + d;
    size_t g = pc ? d : r * (D / 64) + d / 64; /* the group: attention.h's ATTN_QGROUP */
    switch (dtype) {
    case 0: return ((const float *)rows)[i];
    case 1: return attn_bf16(((const uint16_t *)rows)[i]);
    case 2: return ATTN_MUL(attn_e4m3(((const uint8_t *)rows)[i]), sc[g]);
    case 3: return ATTN_MUL((float)((const int8_t *)rows)[i], sc[g]);
    default: {
        uint8_t b = ((const uint8_t *)rows)[i / 2];
        float q = (float)(i & 1 ? b >> 4 : b & 15u);
        return ATTN_ADD(ATTN_MUL(q, sc[2 * g]), sc[2 * g + 1]);
    }
    }
}

/* One score: (q . k) * scale over D elements (D a multiple of 8) of K row r
 * (pc: scaled per channel), lane j summing elements j, j+8, ... as the CPU
 * kernel's vectors do. */
ATTN_HD float attn_score(const float *q, const void *rows, const float *sc, size_t r, uint32_t D,
                         float scale, int dtype, int pc)
{
    float lane[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    for (uint32_t c = 0; c < D; c += 8)
        for (uint32_t j = 0; j < 8; j++)
            lane[j] = ATTN_ADD(lane[j], ATTN_MUL(q[c + j], attn_deq(rows, sc, r, D, c + j, dtype, pc)));
    return ATTN_MUL(attn_hsum8(lane), scale);
}

/* One output element d over one page: acc * c, then + p[t] * v[t] in token
 * order, v[t] being element d of row r0 + t (pc: rows scaled per channel,
 * MLA's, whose V is its K rows). */
ATTN_HD float attn_fold_acc(float acc, float c, const float *p, const void *rows,
                            const float *sc, size_t r0, uint32_t nt, uint32_t D, uint32_t d,
                            int dtype, int pc)
{
    acc = ATTN_MUL(acc, c);
    for (uint32_t t = 0; t < nt; t++)
        acc = ATTN_ADD(acc, ATTN_MUL(p[t], attn_deq(rows, sc, r0 + t, D, d, dtype, pc)));
    return acc;
}

#endif
