/*
 * codec.c — page codecs of the SSD tier: none, zstd, zstd after a 16-bit byte
 * shuffle.
 *
 * Why the shuffle: KV caches are bf16 (or fp16). In a bf16 word the high byte
 * holds the sign and seven of the eight exponent bits; activations sit in a
 * narrow range of magnitudes, so that byte takes a handful of values (about 3
 * bits of entropy on a Gaussian), while the low byte (last exponent bit and
 * the mantissa) is close to random. Interleaved, the two mix into one byte
 * distribution that Huffman codes poorly. Shuffled, zstd sees a half page of
 * low-entropy bytes, which it codes to a third of its size, and a half page
 * of noise, which it stores as raw blocks at memcpy speed: the ratio goes up
 * and decompression gets faster (docs/performance.md#codecs).
 *
 * A context holds one ZSTD_CCtx, one ZSTD_DCtx and a page of scratch for the
 * shuffle, so the mover's steady state allocates nothing. A context decodes
 * every codec, not only its own: the index records per page the codec it was
 * written with, and a persisted directory may be reopened under another
 * codec. What the own codec needs is allocated at kvt_codec_new(); the rest
 * on the first page that needs it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "include/kvtier.h"
#include "io/codec.h"
#include "io/quant.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

struct kvt_codec {
    int codec;              /* KVT_CODEC_*: what encode() tries */
    int level;              /* zstd level */
    size_t page_bytes;      /* the largest raw size */
    ZSTD_CCtx *cctx;        /* own codec is zstd-based, else NULL */
    ZSTD_DCtx *dctx;        /* NULL until needed */
    unsigned char *scratch; /* page_bytes, for the shuffle; NULL until needed */
    struct kvt_page_layout layout; /* dtype 0: none */
    float *qscratch;        /* the lossy codecs' (kvt_quant_scratch_floats); NULL until needed */
};

static bool codec_valid(int codec)
{
    return codec >= KVT_CODEC_NONE && codec <= KVT_CODEC_INT4;
}

bool kvt_codec_lossy(int codec)
{
    return codec == KVT_CODEC_FP8 || codec == KVT_CODEC_INT8 || codec == KVT_CODEC_INT4;
}

const char *kvt_codec_name(int codec)
{
    static const char *const names[KVT_CODEC_COUNT] = { "none", "zstd", "zstd-shuffle16",
                                                        "fp8",  "int8", "int4" };
    return codec >= 0 && codec < KVT_CODEC_COUNT ? names[codec] : NULL;
}

/* ---------------------------------------------------------------- shuffle */

/* Scalar tails, and the whole job where SSE2 is missing. */
static void shuffle16_scalar(const unsigned char *restrict s, unsigned char *restrict hi,
                             unsigned char *restrict lo, size_t from, size_t half)
{
    for (size_t i = from; i < half; i++) {
        hi[i] = s[2 * i + 1];
        lo[i] = s[2 * i];
    }
}

static void unshuffle16_scalar(const unsigned char *restrict hi, const unsigned char *restrict lo,
                               unsigned char *restrict d, size_t from, size_t half)
{
    for (size_t i = from; i < half; i++) {
        d[2 * i] = lo[i];
        d[2 * i + 1] = hi[i];
    }
}

/* SSE2 is part of x86-64 itself, so no dispatch: 32 bytes of words become
 * 16 high and 16 low bytes in six instructions, far above zstd's speed. An odd
 * trailing byte (n is meant to be even) is kept last, untouched, so the pair
 * stays a bijection on any n. */
void kvt_shuffle16(const void *src, void *dst, size_t n)
{
    const unsigned char *s = src;
    unsigned char *hi = dst, *lo = hi + n / 2;
    size_t half = n / 2, i = 0;
#if defined(__SSE2__)
    const __m128i low_mask = _mm_set1_epi16(0x00ff);
    for (; i + 16 <= half; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
        __m128i h = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
        __m128i l = _mm_packus_epi16(_mm_and_si128(a, low_mask), _mm_and_si128(b, low_mask));
        _mm_storeu_si128((__m128i *)(hi + i), h);
        _mm_storeu_si128((__m128i *)(lo + i), l);
    }
#endif
    shuffle16_scalar(s, hi, lo, i, half);
    if (n & 1)
        hi[n - 1] = s[n - 1];
}

void kvt_unshuffle16(const void *src, void *dst, size_t n)
{
    const unsigned char *hi = src, *lo = hi + n / 2;
    unsigned char *d = dst;
    size_t half = n / 2, i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= half; i += 16) {
        __m128i h = _mm_loadu_si128((const __m128i *)(hi + i));
        __m128i l = _mm_loadu_si128((const __m128i *)(lo + i));
        _mm_storeu_si128((__m128i *)(d + 2 * i), _mm_unpacklo_epi8(l, h));
        _mm_storeu_si128((__m128i *)(d + 2 * i + 16), _mm_unpackhi_epi8(l, h));
    }
#endif
    unshuffle16_scalar(hi, lo, d, i, half);
    if (n & 1)
        d[n - 1] = hi[n - 1];
}

/* ---------------------------------------------------------------- context */

/* Parameters of the shuffle codec at level 1, the speed-first default. On
 * the high-byte half, zstd's level-1 match finder keeps finding 4- to 6-byte
 * matches that are coincidences of a 3-bit alphabet: each costs more to code
 * than its literals and makes a sequence to decode. Matches of 7 bytes or more
 * and a 256-entry hash table leave nearly everything to the Huffman coder,
 * which is what this data wants: ratio, compression and decompression speed
 * all gain (docs/performance.md#codecs); zero runs are still found, long
 * exact repeats partly. Other levels get zstd's own parameters. */
#define SHUFFLE_MIN_MATCH 7
#define SHUFFLE_HASH_LOG 8

static int codec_cctx_params(struct kvt_codec *c)
{
    size_t r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, c->level);
    if (!ZSTD_isError(r) && c->codec == KVT_CODEC_ZSTD_SHUFFLE16 && c->level == 1) {
        r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_minMatch, SHUFFLE_MIN_MATCH);
        if (!ZSTD_isError(r))
            r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_hashLog, SHUFFLE_HASH_LOG);
    }
    return ZSTD_isError(r) ? -EINVAL : 0;
}

/* The first use of a foreign codec allocates what it needs; -ENOMEM then
 * fails that call only, and the context stays usable. */
static int codec_need_dctx(struct kvt_codec *c)
{
    if (!c->dctx)
        c->dctx = ZSTD_createDCtx();
    return c->dctx ? 0 : -ENOMEM;
}

static int codec_need_scratch(struct kvt_codec *c)
{
    if (!c->scratch)
        c->scratch = malloc(c->page_bytes);
    return c->scratch ? 0 : -ENOMEM;
}

static int codec_need_qscratch(struct kvt_codec *c)
{
    if (!c->qscratch)
        c->qscratch = malloc(kvt_quant_scratch_floats() * sizeof(float));
    return c->qscratch ? 0 : -ENOMEM;
}

int kvt_codec_new(int codec, int level, size_t page_bytes, struct kvt_codec **out)
{
    return kvt_codec_new_layout(codec, level, page_bytes, NULL, out);
}

int kvt_codec_new_layout(int codec, int level, size_t page_bytes, const struct kvt_page_layout *L,
                         struct kvt_codec **out)
{
    if (!out || !codec_valid(codec) || page_bytes == 0)
        return -EINVAL;
    if (kvt_codec_lossy(codec) && (!L || !L->dtype))
        return -EINVAL;
    if (level == 0)
        level = 1; /* speed first: the mover compresses on the eviction path */
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
        return -EINVAL;
    struct kvt_codec *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->codec = codec;
    c->level = level;
    c->page_bytes = page_bytes;
    if (L)
        c->layout = *L;
    int rc = 0;
    if (kvt_codec_lossy(codec))
        rc = codec_need_qscratch(c);
    else if (codec != KVT_CODEC_NONE) {
        c->cctx = ZSTD_createCCtx();
        rc = c->cctx ? codec_cctx_params(c) : -ENOMEM;
        if (rc == 0)
            rc = codec_need_dctx(c);
    }
    if (rc == 0 && codec == KVT_CODEC_ZSTD_SHUFFLE16)
        rc = codec_need_scratch(c);
    if (rc) {
        kvt_codec_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void kvt_codec_free(struct kvt_codec *c)
{
    if (!c)
        return;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    free(c->scratch);
    free(c->qscratch);
    free(c);
}

/* A lossy frame is at most raw - raw / 16 bytes (else the page goes raw). */
size_t kvt_codec_bound(const struct kvt_codec *c, size_t raw)
{
    return c->codec == KVT_CODEC_NONE || kvt_codec_lossy(c->codec) ? raw : ZSTD_compressBound(raw);
}

/* ---------------------------------------------------------------- encode */

/* The most a compressed page may take and still be worth it: a page that
 * saves less than 1/16 (at least one byte) is stored raw, because reading
 * it back then costs a memcpy instead of a decompression. */
static size_t codec_worth(size_t raw)
{
    size_t save = raw / 16 ? raw / 16 : 1;
    return raw > save ? raw - save : 0;
}

/* Compresses into dst with the capacity capped at the worthwhile size, so an
 * incompressible page fails fast inside zstd instead of being compressed
 * completely and then thrown away. Returns the size, 0 for "not worth it",
 * or a negative error. */
static ssize_t codec_zstd(struct kvt_codec *c, const void *src, size_t raw, void *dst, size_t cap)
{
    size_t lim = codec_worth(raw);
    if (lim > cap)
        lim = cap;
    if (lim == 0)
        return 0;
    size_t r = ZSTD_compress2(c->cctx, dst, lim, src, raw);
    if (!ZSTD_isError(r))
        return (ssize_t)r;
    switch (ZSTD_getErrorCode(r)) {
    case ZSTD_error_dstSize_tooSmall:
        return 0;
    case ZSTD_error_memory_allocation:
        return -ENOMEM;
    default:
        return -EINVAL;
    }
}

/* One frame, two blocks: the high bytes, then the low bytes. zstd keeps
 * one Huffman table per block and a page of 128 KiB or less is one block
 * unless flushed in the middle; the two halves have very different byte
 * statistics (exponents vs mantissas), so each gets its own table. */
static ssize_t codec_zstd_halves(struct kvt_codec *c, const void *src, size_t raw, void *dst,
                                 size_t cap)
{
    size_t lim = codec_worth(raw);
    if (lim > cap)
        lim = cap;
    if (lim == 0)
        return 0;
    ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
    ZSTD_CCtx_setPledgedSrcSize(c->cctx, raw);
    ZSTD_outBuffer out = { dst, lim, 0 };
    ZSTD_inBuffer half[2] = { { src, raw / 2, 0 }, { (const char *)src + raw / 2, raw - raw / 2, 0 } };
    for (int h = 0; h < 2; h++) {
        ZSTD_EndDirective how = h ? ZSTD_e_end : ZSTD_e_flush;
        size_t r;
        do {
            r = ZSTD_compressStream2(c->cctx, &out, &half[h], how);
        } while (!ZSTD_isError(r) && r && out.pos < out.size);
        if (ZSTD_isError(r))
            return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? -ENOMEM : -EINVAL;
        if (r) { /* out of room: not worth it */
            ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
            return 0;
        }
    }
    return (ssize_t)out.pos;
}

int kvt_codec_encode(struct kvt_codec *c, const void *src, size_t raw, void *dst, size_t cap,
                     size_t *out_len, int *codec_used)
{
    return kvt_codec_encode_page(c, KVT_CODEC_ANY_LAYER, src, raw, dst, cap, out_len, codec_used);
}

int kvt_codec_encode_page(struct kvt_codec *c, uint32_t layer, const void *src, size_t raw,
                          void *dst, size_t cap, size_t *out_len, int *codec_used)
{
    if (!c || (raw && (!src || !dst)) || !out_len || !codec_used || raw > c->page_bytes)
        return -EINVAL;
    ssize_t n = 0;
    if (kvt_codec_lossy(c->codec)) {
        size_t len = 0;
        int r = kvt_quant_encode(NULL, c->codec, &c->layout, layer, src, raw, dst, cap, &len,
                                 c->qscratch);
        if (r < 0 && r != -ENOSPC)
            return r;
        n = r == 0 ? (ssize_t)len : 0; /* -ENOSPC: try raw, as zstd's "not worth it" */
    } else if (c->codec == KVT_CODEC_ZSTD) {
        n = codec_zstd(c, src, raw, dst, cap);
    } else if (c->codec == KVT_CODEC_ZSTD_SHUFFLE16) {
        kvt_shuffle16(src, c->scratch, raw);
        n = codec_zstd_halves(c, c->scratch, raw, dst, cap);
    }
    if (n < 0)
        return (int)n;
    if (n > 0) {
        *out_len = (size_t)n;
        *codec_used = c->codec;
        return 0;
    }
    if (cap < raw)
        return -ENOSPC; /* cap below kvt_codec_bound() and the page did not compress */
    if (raw)
        memcpy(dst, src, raw);
    *out_len = raw;
    *codec_used = KVT_CODEC_NONE;
    return 0;
}

/* ---------------------------------------------------------------- decode */

/* Decompresses into dst, whose capacity is exactly raw: zstd never writes
 * past its capacity, and a frame that holds more or fewer bytes than raw is
 * damaged (the index recorded raw when the page was written). */
static int codec_unzstd(struct kvt_codec *c, const void *src, size_t stored, void *dst, size_t raw)
{
    int rc = codec_need_dctx(c);
    if (rc)
        return rc;
    size_t r = ZSTD_decompressDCtx(c->dctx, dst, raw, src, stored);
    if (ZSTD_isError(r))
        return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? -ENOMEM : KVT_ECORRUPT;
    return r == raw ? 0 : KVT_ECORRUPT;
}

int kvt_codec_decode(struct kvt_codec *c, int codec, const void *src, size_t stored, void *dst,
                     size_t raw)
{
    if (!c || !codec_valid(codec) || (stored && !src) || (raw && !dst) || raw > c->page_bytes)
        return -EINVAL;
    int rc;
    switch (codec) {
    case KVT_CODEC_NONE:
        if (stored != raw)
            return KVT_ECORRUPT;
        if (raw)
            memcpy(dst, src, raw);
        return 0;
    case KVT_CODEC_ZSTD:
        return codec_unzstd(c, src, stored, dst, raw);
    case KVT_CODEC_FP8:
    case KVT_CODEC_INT8:
    case KVT_CODEC_INT4:
        rc = codec_need_qscratch(c);
        return rc ? rc : kvt_quant_decode(NULL, codec, src, stored, dst, raw, c->qscratch);
    default: /* KVT_CODEC_ZSTD_SHUFFLE16 */
        rc = codec_need_scratch(c);
        if (rc == 0)
            rc = codec_unzstd(c, src, stored, c->scratch, raw);
        if (rc == 0)
            kvt_unshuffle16(c->scratch, dst, raw);
        return rc;
    }
}
