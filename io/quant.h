/*
 * quant.h — the lossy page codecs' frame and row kernels (internal to io/).
 *
 * io/codec.c owns the codec context and calls these; io/quant.c lays a page
 * out as streams and frames it; io/quant_kernels.c holds the row kernels,
 * scalar and AVX2, chosen once at run time. Nothing above io/ includes this.
 */
#ifndef KVT_QUANT_H
#define KVT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/codec.h"

/* The row kernels of one instruction set. Rows are `w` elements of dtype
 * (KVT_DTYPE_BF16/FP16). Per-column parameters come as arrays of w floats
 * when `group` is 0, else one value per `group` consecutive columns. The
 * scalar and AVX2 kernels give identical bytes (no FMA; round to nearest
 * even in both), so a page reads the same whichever CPU wrote it. */
struct kvt_quant_kernels {
    const char *name;
    /* Column-wise min and max over `rows` rows, `stride` elements apart,
     * into mn[0..w), mx[0..w). rows >= 1. False when an element is a NaN
     * (the figures are then of no use: the two sets may differ, and the
     * page is stored raw). A -0 may come back as either zero. */
    bool (*col_minmax)(const void *row, size_t stride, uint32_t rows, int dtype, uint32_t w,
                       float *mn, float *mx);
    /* Min and max of each group of g columns of one row (w % g == 0); false
     * for a NaN, as above. */
    bool (*group_minmax)(const void *row, int dtype, uint32_t w, uint32_t g, float *mn, float *mx);
    /* q = clamp(round((x - mn) * inv), 0, 2^bits - 1), packed in bits 8 or 4
     * (element 2i in the low nibble of byte i). */
    void (*quant_int)(const void *row, int dtype, uint32_t w, uint32_t group, const float *inv,
                      const float *mn, unsigned bits, uint8_t *dst);
    /* x = q * sc + mn, rounded to dtype. */
    void (*dequant_int)(const uint8_t *src, int dtype, uint32_t w, uint32_t group, const float *sc,
                        const float *mn, unsigned bits, void *row);
    /* e4m3 of x * inv (saturating at 448, never NaN), one byte each. */
    void (*quant_fp8)(const void *row, int dtype, uint32_t w, uint32_t group, const float *inv,
                      uint8_t *dst);
    /* x = e4m3(q) * sc, rounded to dtype. */
    void (*dequant_fp8)(const uint8_t *src, int dtype, uint32_t w, uint32_t group, const float *sc,
                        void *row);
    /* The INT codecs' parameters of n ranges [lo, hi] (each zero made +0):
     * scale (hi - lo) / qmax and minimum lo as little-endian fp16 at ps and
     * pm (2 n bytes each), and back as floats: the minimum into mn, the
     * inverse of the scale (0 for a zero scale) into inv. mn may be lo and
     * inv hi. False when one is NaN or past fp16's range (nothing of use
     * written: the page is stored raw). */
    bool (*params_out)(const float *lo, const float *hi, uint32_t n, float qmax, uint8_t *ps,
                       uint8_t *pm, float *inv, float *mn);
    /* n fp16 scales at ps and minimums at pm as floats; false for an
     * infinite or NaN one. */
    bool (*params_in)(const uint8_t *ps, const uint8_t *pm, uint32_t n, float *sc, float *mn);
};

extern const struct kvt_quant_kernels kvt_quant_scalar;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
extern const struct kvt_quant_kernels kvt_quant_avx2;
#endif
/* The kernels this CPU runs best (AVX2 + F16C where present). */
const struct kvt_quant_kernels *kvt_quant_best(void);

/* Scalar conversions, shared by both kernel sets and the frame. */
float kvt_half_to_float(uint16_t h);
uint16_t kvt_float_to_half(float f);    /* round to nearest even; overflow -> inf */
float kvt_bf16_to_float(uint16_t b);
uint16_t kvt_float_to_bf16(float f);    /* round to nearest even (finite inputs) */

/* The frame of a lossy page (io/quant.c). encode: 0 with *out_len, 1 when
 * the page is better stored raw (a layer kept in full precision, a page of
 * no layout block, values past fp16's range), -ENOSPC when cap is short.
 * decode: 0, KVT_ECORRUPT for a frame that is not exactly one of raw bytes
 * (or whose scales are not finite). kernels NULL: kvt_quant_best(). */
int kvt_quant_encode(const struct kvt_quant_kernels *k, int codec, const struct kvt_page_layout *L,
                     uint32_t layer, const void *src, size_t raw, void *dst, size_t cap,
                     size_t *out_len, float *scratch);
int kvt_quant_decode(const struct kvt_quant_kernels *k, int codec, const void *src, size_t stored,
                     void *dst, size_t raw, float *scratch);
/* Floats of scratch the two need, whatever the layout or frame. */
size_t kvt_quant_scratch_floats(void);

#endif /* KVT_QUANT_H */
