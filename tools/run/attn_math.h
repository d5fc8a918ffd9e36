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

/* Element i of K or V rows of fp32 or (bf16 set) bf16 elements, as fp32. */
ATTN_HD float attn_kv(const void *rows, size_t i, int bf16)
{
    return bf16 ? attn_bf16(((const uint16_t *)rows)[i]) : ((const float *)rows)[i];
}

/* One score: (q . k) * scale over D elements (D a multiple of 8), lane j
 * summing elements j, j+8, ... as the CPU kernel's vectors do. */
ATTN_HD float attn_score(const float *q, const void *k, uint32_t D, float scale, int bf16)
{
    float lane[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    for (uint32_t c = 0; c < D; c += 8)
        for (uint32_t j = 0; j < 8; j++)
            lane[j] = ATTN_ADD(lane[j], ATTN_MUL(q[c + j], attn_kv(k, c + j, bf16)));
    return ATTN_MUL(attn_hsum8(lane), scale);
}

/* One output element over one page: acc * c, then + p[t] * v[t] in token
 * order (v[t] is element d of token t's V row: element t * stride of v). */
ATTN_HD float attn_fold_acc(float acc, float c, const float *p, const void *v, uint32_t nt,
                            uint32_t stride, int bf16)
{
    acc = ATTN_MUL(acc, c);
    for (uint32_t t = 0; t < nt; t++)
        acc = ATTN_ADD(acc, ATTN_MUL(p[t], attn_kv(v, (size_t)t * stride, bf16)));
    return acc;
}

#endif
