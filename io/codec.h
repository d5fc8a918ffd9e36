/*
 * codec.h — page codecs and checksums for the SSD tier (internal).
 *
 * Codecs (values of include/kvtier.h): KVT_CODEC_NONE, KVT_CODEC_ZSTD,
 * KVT_CODEC_ZSTD_SHUFFLE16 (zstd after a 16-bit byte shuffle: the high bytes
 * of every 16-bit word, then the low bytes; on bf16/fp16 KV the exponent
 * bytes then sit together and compress far better).
 *
 * A codec context is used by one thread at a time (the mover).
 */
#ifndef KVT_CODEC_H
#define KVT_CODEC_H

#include <stddef.h>
#include <stdint.h>

struct kvt_codec;

/* A context for codec at zstd level (0 = default 1: speed first). -EINVAL
 * for an unknown codec, -ENOMEM. page_bytes is the largest raw size used. */
int kvt_codec_new(int codec, int level, size_t page_bytes, struct kvt_codec **out);
void kvt_codec_free(struct kvt_codec *c);

/* The most bytes encode() may write for raw bytes of input. */
size_t kvt_codec_bound(const struct kvt_codec *c, size_t raw);

/* Encodes raw bytes of src into dst (cap bytes). *codec_used is the codec
 * actually applied: when compression would not save at least 1/16 of the
 * page, the page is stored raw (KVT_CODEC_NONE) so reads cost nothing.
 * Returns 0 and *out_len, or a negative error. */
int kvt_codec_encode(struct kvt_codec *c, const void *src, size_t raw, void *dst, size_t cap,
                     size_t *out_len, int *codec_used);

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
