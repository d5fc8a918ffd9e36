/*
 * codec.h — page codecs and checksums for the SSD tier (internal).
 *
 * Codecs (values of include/kvtier.h): KVT_CODEC_NONE, KVT_CODEC_ZSTD,
 * KVT_CODEC_ZSTD_SHUFFLE16 (zstd after a 16-bit byte shuffle: the high bytes
 * of every 16-bit word, then the low bytes; on bf16/fp16 KV the exponent
 * bytes then sit together and compress far better), and the lossy ones,
 * KVT_CODEC_FP8, KVT_CODEC_INT8 and KVT_CODEC_INT4 (io/quant.c), which
 * need the page's layout (struct kvt_page_layout) to encode; their stored
 * frame describes itself, so any context decodes it.
 *
 * A codec context is used by one thread at a time (the mover).
 */
#ifndef KVT_CODEC_H
#define KVT_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/kvtier.h"

struct kvt_codec;

#define KVT_CODEC_COUNT 6          /* codecs 0 .. KVT_CODEC_INT4 */

/* What a page holds, for the lossy codecs: kvt_config's layout fields
 * (include/kvtier.h), v_head_dim resolved (never 0 unless MLA). dtype 0:
 * no layout. */
struct kvt_page_layout {
    int dtype;                     /* KVT_DTYPE_* */
    int order;                     /* KVT_KV_* */
    uint32_t tokens, kv_heads, head_dim, v_head_dim, rope_dim;
    uint32_t n_layers, full_first, full_last;
};

/* The layout a config describes (dtype 0 when it gives none). */
void kvt_page_layout_of(const kvt_config *cfg, struct kvt_page_layout *L);
/* 0 when codec can run on pages of page_bytes with layout L; else
 * KVT_ECONFIG with the reason in why (n bytes). Lossless codecs need no
 * layout, but a given one is checked all the same. */
int kvt_page_layout_check(int codec, const struct kvt_page_layout *L, size_t page_bytes, char *why,
                          size_t n);
/* Raw bytes of one layer's block of a page (0 without a layout). */
size_t kvt_page_layout_block_bytes(const struct kvt_page_layout *L);
bool kvt_codec_lossy(int codec);
/* The bytes a lossy codec stores for a page of raw bytes holding one
 * layer's block of layout L (before the SSD's padding to 4 KiB); raw for a
 * lossless codec (their size depends on the data), or where the page would
 * go raw. For `kvtier plan`. */
size_t kvt_codec_lossy_bytes(int codec, const struct kvt_page_layout *L, size_t raw);
/* "none", "zstd", "zstd-shuffle16", "fp8", "int8", "int4"; NULL past them. */
const char *kvt_codec_name(int codec);

/* A context for codec at zstd level (0 = default 1: speed first). -EINVAL
 * for an unknown codec, -ENOMEM. page_bytes is the largest raw size used.
 * kvt_codec_new_layout also takes the page layout (copied), which a lossy
 * codec needs to encode (-EINVAL without one; L may be NULL otherwise). */
int kvt_codec_new(int codec, int level, size_t page_bytes, struct kvt_codec **out);
int kvt_codec_new_layout(int codec, int level, size_t page_bytes, const struct kvt_page_layout *L,
                         struct kvt_codec **out);
void kvt_codec_free(struct kvt_codec *c);

/* The most bytes encode() may write for raw bytes of input. */
size_t kvt_codec_bound(const struct kvt_codec *c, size_t raw);

/* Encodes raw bytes of src into dst (cap bytes). *codec_used is the codec
 * actually applied: when compression would not save at least 1/16 of the
 * page, the page is stored raw (KVT_CODEC_NONE) so reads cost nothing.
 * A lossy codec encodes the page as of KVT_CODEC_ANY_LAYER.
 * Returns 0 and *out_len, or a negative error. */
int kvt_codec_encode(struct kvt_codec *c, const void *src, size_t raw, void *dst, size_t cap,
                     size_t *out_len, int *codec_used);

/* The page codec call (the SSD tier's, and any tier's that stores pages
 * off the host): encodes raw bytes of the page of key layer `layer` (a
 * layer, KVT_ALL_LAYERS for a page of every layer, or KVT_CODEC_ANY_LAYER:
 * one block, quantised whatever the layer) with the context's codec and
 * layout, as kvt_codec_encode. A lossy codec stores raw (*codec_used
 * KVT_CODEC_NONE) a page of a layer kept in full precision, a page its
 * layout does not fit, or one whose values are past fp16's range. */
#define KVT_CODEC_ANY_LAYER (UINT32_MAX - 1)
int kvt_codec_encode_page(struct kvt_codec *c, uint32_t layer, const void *src, size_t raw,
                          void *dst, size_t cap, size_t *out_len, int *codec_used);

/* Decodes stored bytes of src, written with codec, into exactly raw bytes at
 * dst. Never writes past dst + raw. KVT_ECORRUPT when the data does not
 * decode to exactly raw bytes. */
int kvt_codec_decode(struct kvt_codec *c, int codec, const void *src, size_t stored, void *dst,
                     size_t raw);

/* The 16-bit byte shuffle and its inverse (n even; dst != src). */
void kvt_shuffle16(const void *src, void *dst, size_t n);
void kvt_unshuffle16(const void *src, void *dst, size_t n);

/* CRC32C (Castagnoli): carry-less-multiply folding and the SSE4.2 crc32
 * instruction where the CPU has them (io/crc32c.c), else a table. crc is the
 * running value (0 to start). */
uint32_t kvt_crc32c(uint32_t crc, const void *p, size_t n);

/* The CRC32C of A || B from crc_a = CRC32C(A), crc_b = CRC32C(B) and B's
 * length: kvt_crc32c(crc_a, B, len_b) without reading B. O(log len_b). */
uint32_t kvt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif /* KVT_CODEC_H */
