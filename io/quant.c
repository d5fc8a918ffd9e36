/*
 * quant.c — the frame of a lossy page (FP8, INT8, INT4): how a page is cut
 * into K and V streams, and where their scales and codes go.
 *
 * A page holds one layer's block (key.layer < n_layers) or n_layers blocks
 * one after another (key.layer == KVT_ALL_LAYERS; KVT_KV_SPLIT_LAYERS: the
 * K parts of all blocks, then their V parts); bytes past the blocks travel
 * as they are. A block is one or two streams, each a matrix of
 * `tokens` rows and `width` elements a row, or one such per head
 * (kvtier.h, KVT_KV_*):
 *   K:   width kv_heads * head_dim (a head-major page: one matrix of
 *        head_dim a head), quantised per channel: one scale and
 *        minimum per column over the page's tokens. Keys have outlier
 *        channels, tens of times the others (KIVI, KVQuant): a row's scale
 *        would be set by them and flatten every other channel to a code or
 *        two; a column's scale follows its own channel.
 *   V:   width kv_heads * v_head_dim, quantised per token in groups of g
 *        columns (g the largest divisor of v_head_dim up to 64 for INT4,
 *        FlexGen's group; up to 128 for INT8): values have no outlier
 *        channels, and errors in a token's values stay in that token's
 *        share of the attention output. A group's scale and minimum are 4
 *        bytes: 6% of 64 INT8 codes, which with the traffic's swing between
 *        runs put INT8 past half of the bytes plus 10%; over 128 codes 3%,
 *        and 256 levels still resolve a head's values (docs/codecs.md).
 *   MLA: one stream of latent + RoPE key per token, quantised as K (it
 *        is the key, and the values are derived from it).
 *   SINGLE: one stream of kv_heads * head_dim, quantised as K: the page
 *        holds K or V and cannot tell which; on V the two axes measure the
 *        same (docs/codecs.md#axes), on K only per channel is good.
 *   FP8 (e4m3): one float scale per head per stream (absmax / 448): a
 *        float format keeps its relative precision across magnitudes, so an
 *        outlier channel costs the others nothing but exponent range.
 * docs/codecs.md has the measurements behind these choices.
 *
 * The frame is self-describing, so any context decodes it (a reopened
 * directory, fsck), and its size follows from its header alone: a frame is
 * valid only if it is exactly that size and every scale is finite. All
 * fields little-endian:
 *   u32 magic "KVQ1", u8 codec, u8 dtype, u8 order, u8 0,
 *   u32 tokens, kv_heads, head_dim, v_head_dim, rope_dim, nblocks,
 *   nblocks bytes: 1 = the block is quantised, 0 = it is stored raw
 *     (a layer kept in full precision),
 *   per block, per stream: its parameters, then its codes, rows in order,
 *     each row (width * bits + 7) / 8 bytes;
 *   the page's bytes past its blocks.
 * Parameters: K (INT): fp16 scale[width], then fp16 minimum[width];
 * V (INT): fp16 scale[rows][width / g], then fp16 minimum[rows][width / g];
 * FP8: f32 scale[width / head]. Dequantised x = code * scale + minimum.
 *
 * Rows are processed in chunks of at most CHUNK columns, so the scratch is
 * fixed (4 * CHUNK floats) whatever a frame's header says.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "include/kvtier.h"
#include "io/quant.h"

#define QUANT_MAGIC 0x3151564bu /* "KVQ1" */
#define HDR_BYTES 32
#define CHUNK 4096u
/* Header bounds: far above any model, low enough that every size below
 * fits 64 bits without a check. */
#define MAX_TOKENS (1u << 20)
#define MAX_DIM (1u << 16)
#define MAX_ROW (1u << 24)

enum { S_K, S_V };

struct stream {
    int kind;           /* S_K (per channel) or S_V (per token, groups of g) */
    uint64_t off;       /* element offset of row 0 in the block */
    uint64_t stride;    /* elements from one row to the next */
    uint32_t rows, width;
    uint32_t head;      /* columns of one FP8 scale */
    uint32_t g;         /* S_V: columns of one group */
    uint32_t nsub;      /* matrices of this shape, hstride elements apart (a head-major
                           page has one a head), each framed as a stream of its own */
    uint64_t hstride;
    uint64_t bstep;     /* elements from a block's row 0 to the next block's */
};

struct frame {
    int codec, dtype, order;
    uint32_t tokens, heads, hd, vhd, rope, nblocks;
    unsigned bits;      /* 8 or 4 (INT); 8 for FP8 codes */
    struct stream s[2];
    int ns;
    uint64_t block_bytes;   /* raw bytes of one block */
};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t group_of(uint32_t dim, int codec)
{
    uint32_t most = codec == KVT_CODEC_INT8 ? 128 : 64;
    uint32_t g = dim < most ? dim : most;
    while (dim % g)
        g--;
    return g;
}

/* The streams of a block, from the frame's dimensions (nblocks set). */
static void frame_streams(struct frame *f)
{
    uint64_t T = f->tokens, H = f->heads, D = f->hd, Dv = f->vhd;
    uint32_t g = group_of(f->vhd ? f->vhd : 1, f->codec);
    if (f->order == KVT_KV_MLA) {
        uint32_t w = f->hd + f->rope;
        f->s[0] = (struct stream){ S_K, 0, w, f->tokens, w, w, 0, 1, 0, T * w };
        f->ns = 1;
        f->block_bytes = T * w * 2;
        return;
    }
    uint32_t wk = f->heads * f->hd, wv = f->heads * f->vhd;
    if (f->order == KVT_KV_SINGLE) {
        f->s[0] = (struct stream){ S_K, 0, wk, f->tokens, wk, f->hd, 0, 1, 0, T * wk };
        f->ns = 1;
        f->block_bytes = T * wk * 2;
        return;
    }
    switch (f->order) {
    case KVT_KV_HEAD_MAJOR:
        f->s[0] = (struct stream){ S_K, 0, D, f->tokens, f->hd, f->hd, 0, f->heads, T * D, 0 };
        f->s[1] = (struct stream){ S_V, H * T * D, Dv, f->tokens, f->vhd, f->vhd, g, f->heads,
                                   T * Dv, 0 };
        break;
    case KVT_KV_TOKEN_MAJOR:
        f->s[0] = (struct stream){ S_K, 0, wk, f->tokens, wk, f->hd, 0, 1, 0, 0 };
        f->s[1] = (struct stream){ S_V, T * wk, wv, f->tokens, wv, f->vhd, g, 1, 0, 0 };
        break;
    case KVT_KV_SPLIT_LAYERS: /* block b's K at b T wk, its V past every block's K */
        f->s[0] = (struct stream){ S_K, 0, wk, f->tokens, wk, f->hd, 0, 1, 0, T * wk };
        f->s[1] = (struct stream){ S_V, f->nblocks * T * wk, wv, f->tokens, wv, f->vhd, g, 1, 0,
                                   T * wv };
        break;
    default: /* KVT_KV_INTERLEAVED */
        f->s[0] = (struct stream){ S_K, 0, (uint64_t)wk + wv, f->tokens, wk, f->hd, 0, 1, 0, 0 };
        f->s[1] = (struct stream){ S_V, wk, (uint64_t)wk + wv, f->tokens, wv, f->vhd, g, 1, 0, 0 };
        break;
    }
    f->ns = 2;
    f->block_bytes = T * ((uint64_t)wk + wv) * 2;
    if (f->order != KVT_KV_SPLIT_LAYERS) /* one block after another */
        f->s[0].bstep = f->s[1].bstep = f->block_bytes / 2;
}

/* Stream i of block b, its offset from the page's start. */
static struct stream block_stream(const struct frame *f, int i, uint32_t b)
{
    struct stream t = f->s[i];
    t.off += (uint64_t)b * t.bstep;
    return t;
}

/* Where block b's bytes lie in the page, for a block kept in full
 * precision: one run, or (KVT_KV_SPLIT_LAYERS) its K part and its V part,
 * which the frame holds one after the other. Returns the number of runs. */
static int block_runs(const struct frame *f, uint32_t b, uint64_t at[2], uint64_t len[2])
{
    int n = f->order == KVT_KV_SPLIT_LAYERS ? f->ns : 1;
    for (int i = 0; i < n; i++) {
        struct stream t = block_stream(f, i, b);
        at[i] = 2 * t.off;
        len[i] = n == 1 ? f->block_bytes : 2 * (uint64_t)t.rows * t.width;
    }
    return n;
}

static uint64_t row_bytes(const struct frame *f, const struct stream *s)
{
    return ((uint64_t)s->width * f->bits + 7) / 8;
}

static uint64_t param_bytes(const struct frame *f, const struct stream *s)
{
    if (f->codec == KVT_CODEC_FP8)
        return (uint64_t)(s->width / s->head) * 4;
    if (s->kind == S_K)
        return (uint64_t)s->width * 4;
    return (uint64_t)s->rows * (s->width / s->g) * 4;
}

/* Bytes of one matrix of the stream; of the whole stream. */
static uint64_t sub_bytes(const struct frame *f, const struct stream *s)
{
    return param_bytes(f, s) + (uint64_t)s->rows * row_bytes(f, s);
}

static uint64_t stream_bytes(const struct frame *f, const struct stream *s)
{
    return s->nsub * sub_bytes(f, s);
}

/* Matrix i of a stream, as a stream of one. */
static struct stream sub_stream(const struct stream *s, uint32_t i)
{
    struct stream t = *s;
    t.off += (uint64_t)i * s->hstride;
    t.nsub = 1;
    return t;
}

/* Stored bytes of the whole frame for nq quantised blocks of nblocks. */
static uint64_t frame_bytes(const struct frame *f, uint32_t nq, size_t raw)
{
    uint64_t q = 0;
    for (int i = 0; i < f->ns; i++)
        q += stream_bytes(f, &f->s[i]);
    uint64_t blocks = (uint64_t)f->nblocks * f->block_bytes;
    return HDR_BYTES + f->nblocks + nq * q + (f->nblocks - nq) * f->block_bytes + (raw - blocks);
}

static bool layer_full(const struct kvt_page_layout *L, uint32_t layer)
{
    return layer != KVT_CODEC_ANY_LAYER && L->n_layers &&
           (layer < L->full_first || layer >= L->n_layers - L->full_last);
}

/* ------------------------------------------------------------ encode */

static const uint8_t *row_at(const uint8_t *blk, const struct stream *s, uint32_t r, uint32_t c0)
{
    return blk + 2 * (s->off + (uint64_t)r * s->stride + c0);
}

static bool enc_k(const struct kvt_quant_kernels *k, const struct frame *f, const struct stream *s,
                  const uint8_t *blk, uint8_t *out, float *sc)
{
    float *mn = sc, *mx = sc + CHUNK, qmax = (float)((1u << f->bits) - 1);
    uint8_t *codes = out + param_bytes(f, s);
    uint64_t rb = row_bytes(f, s);
    for (uint32_t c0 = 0; c0 < s->width; c0 += CHUNK) {
        uint32_t cw = s->width - c0 < CHUNK ? s->width - c0 : CHUNK;
        uint8_t *ps = out + 2 * (uint64_t)c0, *pm = ps + 2 * (uint64_t)s->width;
        if (!k->col_minmax(row_at(blk, s, 0, c0), s->stride, s->rows, f->dtype, cw, mn, mx) ||
            !k->params_out(mn, mx, cw, qmax, ps, pm, mx, mn))
            return false; /* a NaN, or past fp16: stored raw */
        for (uint32_t r = 0; r < s->rows; r++)
            k->quant_int(row_at(blk, s, r, c0), f->dtype, cw, 0, mx, mn, f->bits,
                         codes + r * rb + (uint64_t)c0 * f->bits / 8);
    }
    return true;
}

/* A V stream as rows of groups: when its rows are contiguous (a head-major
 * page's head), all of them are one long row, so a call of the kernels
 * covers up to CHUNK columns however short the head is. The parameters are
 * in group order either way. */
static void v_rows(const struct frame *f, const struct stream *s, uint32_t *rows, uint64_t *width)
{
    bool flat = s->stride == s->width && (uint64_t)s->rows * s->width <= UINT32_MAX &&
                (uint64_t)s->width * f->bits % 8 == 0; /* rows packed with no padding between */
    *rows = flat ? 1 : s->rows;
    *width = flat ? (uint64_t)s->rows * s->width : s->width;
}

/* Columns a kernel call takes: whole groups, an even number of them, so
 * that a 4-bit chunk starts on a byte whatever the group's width. */
static uint32_t chunk_of(uint32_t group)
{
    uint32_t n = CHUNK / group;
    if (n > 1)
        n &= ~1u;
    return group * (n ? n : 1);
}

static bool enc_v(const struct kvt_quant_kernels *k, const struct frame *f, const struct stream *s,
                  const uint8_t *blk, uint8_t *out, float *sc)
{
    float *mn = sc, *mx = sc + CHUNK, qmax = (float)((1u << f->bits) - 1);
    uint32_t ch = chunk_of(s->g), rows;
    uint64_t width, ng = (uint64_t)s->rows * (s->width / s->g);
    v_rows(f, s, &rows, &width);
    uint8_t *codes = out + param_bytes(f, s);
    for (uint32_t r = 0; r < rows; r++)
        for (uint64_t c0 = 0; c0 < width; c0 += ch) {
            uint32_t cw = width - c0 < ch ? (uint32_t)(width - c0) : ch;
            uint64_t g0 = (r * width + c0) / s->g; /* groups before this chunk */
            const uint8_t *in = row_at(blk, s, r, 0) + 2 * c0;
            if (!k->group_minmax(in, f->dtype, cw, s->g, mn, mx) ||
                !k->params_out(mn, mx, cw / s->g, qmax, out + 2 * g0, out + 2 * (ng + g0), mx, mn))
                return false;
            k->quant_int(in, f->dtype, cw, s->g, mx, mn, f->bits,
                         codes + r * row_bytes(f, s) + c0 * f->bits / 8);
        }
    return true;
}

static bool enc_fp8(const struct kvt_quant_kernels *k, const struct frame *f,
                    const struct stream *s, const uint8_t *blk, uint8_t *out, float *sc)
{
    float *lo = sc, *hi = sc + CHUNK, *inv = sc + 2 * CHUNK;
    uint32_t ch = chunk_of(s->head);
    uint8_t *codes = out + param_bytes(f, s);
    for (uint32_t c0 = 0; c0 < s->width; c0 += ch) {
        uint32_t cw = s->width - c0 < ch ? s->width - c0 : ch, nh = cw / s->head;
        if (!k->col_minmax(row_at(blk, s, 0, c0), s->stride, s->rows, f->dtype, cw, lo, hi))
            return false;
        for (uint32_t i = 0; i < nh; i++) {
            float amax = 0;
            for (uint32_t j = i * s->head; j < (i + 1) * s->head; j++) {
                float a = -lo[j] > hi[j] ? -lo[j] : hi[j];
                amax = a > amax ? a : amax; /* both zeros give amax 0 */
            }
            if (!(amax <= 3.0e38f))
                return false; /* inf or NaN */
            float scale = amax / 448.0f;
            uint32_t bits;
            memcpy(&bits, &scale, 4);
            wr32(out + 4 * ((uint64_t)c0 / s->head + i), bits);
            inv[i] = scale > 0 ? 1.0f / scale : 0.0f;
        }
        for (uint32_t r = 0; r < s->rows; r++)
            k->quant_fp8(row_at(blk, s, r, c0), f->dtype, cw, s->head, inv,
                         codes + (uint64_t)r * s->width + c0);
    }
    return true;
}

static bool enc_stream(const struct kvt_quant_kernels *k, const struct frame *f,
                       const struct stream *s, const uint8_t *blk, uint8_t *out, float *sc)
{
    for (uint32_t i = 0; i < s->nsub; i++, out += sub_bytes(f, s)) {
        struct stream t = sub_stream(s, i);
        bool ok = f->codec == KVT_CODEC_FP8 ? enc_fp8(k, f, &t, blk, out, sc)
                  : t.kind == S_K          ? enc_k(k, f, &t, blk, out, sc)
                                           : enc_v(k, f, &t, blk, out, sc);
        if (!ok)
            return false;
    }
    return true;
}

static void frame_from_layout(struct frame *f, int codec, const struct kvt_page_layout *L,
                              uint32_t nblocks)
{
    bool mla = L->order == KVT_KV_MLA, one = mla || L->order == KVT_KV_SINGLE;
    *f = (struct frame){ .codec = codec, .dtype = L->dtype, .order = L->order,
                         .tokens = L->tokens, .heads = mla ? 1 : L->kv_heads, .hd = L->head_dim,
                         .vhd = one ? 0 : (L->v_head_dim ? L->v_head_dim : L->head_dim),
                         .rope = mla ? L->rope_dim : 0, .nblocks = nblocks,
                         .bits = codec == KVT_CODEC_INT4 ? 4 : 8 };
    frame_streams(f);
}

static void frame_header(const struct frame *f, uint8_t *h)
{
    wr32(h, QUANT_MAGIC);
    h[4] = (uint8_t)f->codec;
    h[5] = (uint8_t)f->dtype;
    h[6] = (uint8_t)f->order;
    h[7] = 0;
    uint32_t v[6] = { f->tokens, f->heads, f->hd, f->vhd, f->rope, f->nblocks };
    for (int i = 0; i < 6; i++)
        wr32(h + 8 + 4 * i, v[i]);
}

int kvt_quant_encode(const struct kvt_quant_kernels *k, int codec, const struct kvt_page_layout *L,
                     uint32_t layer, const void *src, size_t raw, void *dst, size_t cap,
                     size_t *out_len, float *scratch)
{
    struct frame f;
    if (!k)
        k = kvt_quant_best();
    if (!L || !L->dtype)
        return 1;
    bool all = layer == KVT_ALL_LAYERS;
    if (all && !L->n_layers)
        return 1; /* which block is which layer is unknown */
    if (!all && L->n_layers && layer >= L->n_layers && layer != KVT_CODEC_ANY_LAYER)
        return 1;
    frame_from_layout(&f, codec, L, all ? L->n_layers : 1);
    if (f.block_bytes == 0 || (uint64_t)f.nblocks * f.block_bytes > raw)
        return 1;
    uint32_t nq = 0;
    for (uint32_t b = 0; b < f.nblocks; b++)
        nq += !layer_full(L, all ? b : layer);
    if (nq == 0)
        return 1;
    uint64_t need = frame_bytes(&f, nq, raw);
    if (need >= raw - raw / 16)
        return 1; /* not worth a decode */
    if (need > cap)
        return -ENOSPC;
    uint8_t *out = dst, *flags = out + HDR_BYTES, *at = flags + f.nblocks;
    const uint8_t *in = src;
    frame_header(&f, out);
    for (uint32_t b = 0; b < f.nblocks; b++) {
        flags[b] = !layer_full(L, all ? b : layer);
        if (!flags[b]) {
            uint64_t off[2], len[2];
            for (int i = 0, n = block_runs(&f, b, off, len); i < n; at += len[i], i++)
                memcpy(at, in + off[i], len[i]);
            continue;
        }
        for (int i = 0; i < f.ns; i++) {
            struct stream t = block_stream(&f, i, b);
            if (!enc_stream(k, &f, &t, in, at, scratch))
                return 1;
            at += stream_bytes(&f, &t);
        }
    }
    size_t blocks = (size_t)f.nblocks * f.block_bytes;
    memcpy(at, in + blocks, raw - blocks);
    *out_len = (size_t)need;
    return 0;
}

/* ------------------------------------------------------------ decode */

static uint8_t *row_out(uint8_t *blk, const struct stream *s, uint32_t r, uint32_t c0)
{
    return blk + 2 * (s->off + (uint64_t)r * s->stride + c0);
}

/* Scales or minimums that are not finite make the frame corrupt (the
 * checksum should have said so first). */
static bool dec_k(const struct kvt_quant_kernels *k, const struct frame *f, const struct stream *s,
                  const uint8_t *in, uint8_t *blk, float *sc)
{
    const uint8_t *codes = in + param_bytes(f, s);
    uint64_t rb = row_bytes(f, s);
    for (uint32_t c0 = 0; c0 < s->width; c0 += CHUNK) {
        uint32_t cw = s->width - c0 < CHUNK ? s->width - c0 : CHUNK;
        const uint8_t *ps = in + 2 * (uint64_t)c0;
        if (!k->params_in(ps, ps + 2 * (uint64_t)s->width, cw, sc, sc + CHUNK))
            return false;
        for (uint32_t r = 0; r < s->rows; r++)
            k->dequant_int(codes + r * rb + (uint64_t)c0 * f->bits / 8, f->dtype, cw, 0, sc,
                           sc + CHUNK, f->bits, row_out(blk, s, r, c0));
    }
    return true;
}

static bool dec_v(const struct kvt_quant_kernels *k, const struct frame *f, const struct stream *s,
                  const uint8_t *in, uint8_t *blk, float *sc)
{
    uint32_t ch = chunk_of(s->g), rows;
    uint64_t width, ng = (uint64_t)s->rows * (s->width / s->g);
    v_rows(f, s, &rows, &width);
    const uint8_t *codes = in + param_bytes(f, s);
    for (uint32_t r = 0; r < rows; r++)
        for (uint64_t c0 = 0; c0 < width; c0 += ch) {
            uint32_t cw = width - c0 < ch ? (uint32_t)(width - c0) : ch;
            uint64_t g0 = (r * width + c0) / s->g;
            if (!k->params_in(in + 2 * g0, in + 2 * (ng + g0), cw / s->g, sc, sc + CHUNK))
                return false;
            k->dequant_int(codes + r * row_bytes(f, s) + c0 * f->bits / 8, f->dtype, cw, s->g, sc,
                           sc + CHUNK, f->bits, row_out(blk, s, r, 0) + 2 * c0);
        }
    return true;
}

static bool dec_fp8(const struct kvt_quant_kernels *k, const struct frame *f,
                    const struct stream *s, const uint8_t *in, uint8_t *blk, float *sc)
{
    uint32_t ch = chunk_of(s->head);
    const uint8_t *codes = in + param_bytes(f, s);
    for (uint32_t c0 = 0; c0 < s->width; c0 += ch) {
        uint32_t cw = s->width - c0 < ch ? s->width - c0 : ch, nh = cw / s->head;
        for (uint32_t i = 0; i < nh; i++) {
            uint32_t bits = rd32(in + 4 * ((uint64_t)c0 / s->head + i));
            memcpy(&sc[i], &bits, 4);
            if (!(sc[i] >= 0 && sc[i] <= 3.0e38f))
                return false;
        }
        for (uint32_t r = 0; r < s->rows; r++)
            k->dequant_fp8(codes + (uint64_t)r * s->width + c0, f->dtype, cw, s->head, sc,
                           row_out(blk, s, r, c0));
    }
    return true;
}

/* Reads and checks the header: dimensions in bounds, blocks within raw. */
static bool frame_parse(struct frame *f, int codec, const uint8_t *h, size_t stored, size_t raw)
{
    if (stored < HDR_BYTES || rd32(h) != QUANT_MAGIC || h[4] != codec || h[7] != 0)
        return false;
    *f = (struct frame){ .codec = codec, .dtype = h[5], .order = h[6], .tokens = rd32(h + 8),
                         .heads = rd32(h + 12), .hd = rd32(h + 16), .vhd = rd32(h + 20),
                         .rope = rd32(h + 24), .nblocks = rd32(h + 28),
                         .bits = codec == KVT_CODEC_INT4 ? 4 : 8 };
    if ((f->dtype != KVT_DTYPE_BF16 && f->dtype != KVT_DTYPE_FP16) ||
        f->order > KVT_KV_SINGLE)
        return false;
    if (!f->tokens || f->tokens > MAX_TOKENS || !f->heads || f->heads > MAX_DIM || !f->hd ||
        f->hd > MAX_DIM || f->vhd > MAX_DIM || f->rope > MAX_DIM || !f->nblocks)
        return false;
    bool one = f->order == KVT_KV_MLA || f->order == KVT_KV_SINGLE; /* no V stream */
    if (f->order == KVT_KV_MLA ? f->heads != 1 : f->rope != 0)
        return false;
    if (one ? f->vhd != 0 : !f->vhd)
        return false;
    /* A row's width in 32 bits, far: heads x dimension past 2^24 is no model. */
    if ((uint64_t)f->heads * f->hd > MAX_ROW || (uint64_t)f->heads * f->vhd > MAX_ROW)
        return false;
    frame_streams(f);
    return f->block_bytes <= raw && f->nblocks <= raw / f->block_bytes &&
           stored - HDR_BYTES >= f->nblocks;
}

int kvt_quant_decode(const struct kvt_quant_kernels *k, int codec, const void *src, size_t stored,
                     void *dst, size_t raw, float *scratch)
{
    struct frame f;
    const uint8_t *in = src;
    uint8_t *out = dst;
    if (!k)
        k = kvt_quant_best();
    if (!frame_parse(&f, codec, in, stored, raw))
        return KVT_ECORRUPT;
    const uint8_t *flags = in + HDR_BYTES;
    uint32_t nq = 0;
    for (uint32_t b = 0; b < f.nblocks; b++) {
        if (flags[b] > 1)
            return KVT_ECORRUPT;
        nq += flags[b];
    }
    if (frame_bytes(&f, nq, raw) != stored)
        return KVT_ECORRUPT;
    const uint8_t *at = flags + f.nblocks;
    for (uint32_t b = 0; b < f.nblocks; b++) {
        if (!flags[b]) {
            uint64_t off[2], len[2];
            for (int i = 0, n = block_runs(&f, b, off, len); i < n; at += len[i], i++)
                memcpy(out + off[i], at, len[i]);
            continue;
        }
        for (int i = 0; i < f.ns; i++)
            for (uint32_t h = 0; h < f.s[i].nsub; h++) {
                struct stream bs = block_stream(&f, i, b), t = sub_stream(&bs, h);
                bool ok = f.codec == KVT_CODEC_FP8 ? dec_fp8(k, &f, &t, at, out, scratch)
                          : t.kind == S_K          ? dec_k(k, &f, &t, at, out, scratch)
                                                   : dec_v(k, &f, &t, at, out, scratch);
                if (!ok)
                    return KVT_ECORRUPT;
                at += sub_bytes(&f, &t);
            }
    }
    size_t blocks = (size_t)f.nblocks * f.block_bytes;
    memcpy(out + blocks, at, raw - blocks);
    return 0;
}

size_t kvt_codec_lossy_bytes(int codec, const struct kvt_page_layout *L, size_t raw)
{
    struct frame f;
    if (!kvt_codec_lossy(codec) || !L->dtype)
        return raw;
    frame_from_layout(&f, codec, L, 1);
    if (!f.block_bytes || f.block_bytes > raw || layer_full(L, KVT_CODEC_ANY_LAYER))
        return raw;
    uint64_t n = frame_bytes(&f, 1, raw);
    return n >= raw - raw / 16 ? raw : (size_t)n;
}

size_t kvt_quant_scratch_floats(void)
{
    return 4 * (size_t)CHUNK;
}

/* ------------------------------------------------------------ layout */

void kvt_page_layout_of(const kvt_config *cfg, struct kvt_page_layout *L)
{
    bool mla = cfg->kv_order == KVT_KV_MLA, one = mla || cfg->kv_order == KVT_KV_SINGLE;
    *L = (struct kvt_page_layout){
        .dtype = cfg->kv_dtype, .order = cfg->kv_order, .tokens = cfg->page_tokens,
        .kv_heads = mla && !cfg->kv_heads ? 1 : cfg->kv_heads, .head_dim = cfg->head_dim,
        .v_head_dim = one ? 0 : (cfg->v_head_dim ? cfg->v_head_dim : cfg->head_dim),
        .rope_dim = cfg->rope_dim, .n_layers = cfg->n_layers,
        .full_first = cfg->full_first_layers, .full_last = cfg->full_last_layers,
    };
}

size_t kvt_page_layout_block_bytes(const struct kvt_page_layout *L)
{
    if (!L->dtype)
        return 0;
    uint64_t row = L->order == KVT_KV_MLA
                       ? (uint64_t)L->head_dim + L->rope_dim
                       : (uint64_t)L->kv_heads * ((uint64_t)L->head_dim +
                                                  (L->order == KVT_KV_SINGLE ? 0 : L->v_head_dim));
    return (size_t)((uint64_t)L->tokens * row * 2);
}

#define LAYOUT_FAIL(...) (snprintf(why, n, __VA_ARGS__), KVT_ECONFIG)

static int layout_dims(const struct kvt_page_layout *L, char *why, size_t n)
{
    bool mla = L->order == KVT_KV_MLA;
    if (L->dtype != KVT_DTYPE_BF16 && L->dtype != KVT_DTYPE_FP16)
        return LAYOUT_FAIL("kv_dtype %d is unknown (KVT_DTYPE_BF16 or KVT_DTYPE_FP16)", L->dtype);
    if (L->order < KVT_KV_HEAD_MAJOR || L->order > KVT_KV_SINGLE)
        return LAYOUT_FAIL("kv_order %d is unknown (KVT_KV_HEAD_MAJOR, KVT_KV_TOKEN_MAJOR, "
                           "KVT_KV_INTERLEAVED, KVT_KV_MLA, KVT_KV_SPLIT_LAYERS or "
                           "KVT_KV_SINGLE)", L->order);
    if (!L->tokens || L->tokens > MAX_TOKENS)
        return LAYOUT_FAIL("page_tokens must be 1..%u (got %u)", MAX_TOKENS, L->tokens);
    /* A head (MLA: a latent and its RoPE key) within one chunk of columns:
     * FP8's scale per head is found in one pass of them. */
    if (!L->head_dim || L->head_dim > CHUNK || L->v_head_dim > CHUNK ||
        (uint64_t)L->head_dim + L->rope_dim > CHUNK)
        return LAYOUT_FAIL("head_dim must be 1..%u, and v_head_dim and head_dim + rope_dim at "
                           "most that (got %u, %u, %u)", CHUNK, L->head_dim, L->v_head_dim,
                           L->rope_dim);
    if (!mla && (!L->kv_heads || L->kv_heads > MAX_DIM))
        return LAYOUT_FAIL("kv_heads must be 1..%u (got %u)", MAX_DIM, L->kv_heads);
    if ((uint64_t)L->kv_heads * L->head_dim > MAX_ROW ||
        (uint64_t)L->kv_heads * L->v_head_dim > MAX_ROW)
        return LAYOUT_FAIL("kv_heads x head_dim must be at most %u", MAX_ROW);
    if (mla && L->kv_heads != 1)
        return LAYOUT_FAIL("kv_heads must be 0 or 1 with KVT_KV_MLA (one latent per token)");
    if (!mla && L->rope_dim)
        return LAYOUT_FAIL("rope_dim is for KVT_KV_MLA only (got %u)", L->rope_dim);
    return 0;
}

int kvt_page_layout_check(int codec, const struct kvt_page_layout *L, size_t page_bytes, char *why,
                          size_t n)
{
    if (!L->dtype)
        return kvt_codec_lossy(codec)
                   ? LAYOUT_FAIL("codec %s needs the page layout (kv_dtype, page_tokens, kv_heads, "
                                 "head_dim; docs/codecs.md): it quantises K per channel and V per "
                                 "token, and without the layout it cannot tell where they lie",
                                 kvt_codec_name(codec))
                   : 0;
    int r = layout_dims(L, why, n);
    if (r)
        return r;
    size_t block = kvt_page_layout_block_bytes(L);
    if (block > page_bytes)
        return LAYOUT_FAIL("a layer's K and V in a page (page_tokens %u: %zu bytes) do not fit "
                           "page_bytes (%zu)", L->tokens, block, page_bytes);
    if (!L->n_layers && (L->full_first || L->full_last))
        return LAYOUT_FAIL("full_first_layers and full_last_layers need n_layers");
    if ((uint64_t)L->full_first + L->full_last > L->n_layers)
        return LAYOUT_FAIL("full_first_layers + full_last_layers (%u + %u) is more than n_layers "
                           "(%u)", L->full_first, L->full_last, L->n_layers);
    return 0;
}
