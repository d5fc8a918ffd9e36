/*
 * fuzz_page.c — what a read of an SSD page runs to decide "exact or miss":
 * the CRC32C seeded with the key binding (kvt_ssd_bind), then the codec's
 * decode to exactly raw_len bytes (tiers/ssd_pipe.c job_verify, and
 * kvtier fsck's check_entry, which do the same two steps).
 *
 * Input: a header (see struct page_in below, little-endian) then the
 * stored bytes. Flag CRC_FROM_INPUT takes the entry's CRC from the input;
 * otherwise it is computed from the bytes, so that the decoder is reached
 * with arbitrary stored bytes (a matching CRC over damaged data is what a
 * wrong write that was indexed would give).
 *
 * Rules: the CRC32C and the binding agree with a bit-at-a-time reference;
 * CRC(A || B) = combine(CRC(A), CRC(B), |B|); decode returns 0,
 * KVT_ECORRUPT or (an unknown codec, a raw size above the context's)
 * -EINVAL; it never writes past raw_len bytes (the buffer is exactly that
 * size, ASan watches); a raw page decodes to itself; a page that decodes
 * with a lossless codec encodes and decodes back to the same bytes. The
 * lossy codecs' frames (FP8, INT8, INT4) reach their dequantiser here too,
 * behind the checksum; fuzz_quant.c fuzzes it with no checksum in the way.
 */
#include "include/kvtier.h"
#include "io/codec.h"
#include "tests/fuzz/fuzz.h"
#include "store/ssd_index.h"

#define MAX_RAW (64u << 10)
#define CRC_FROM_INPUT 1u

static struct kvt_codec *codec;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_check(kvt_codec_new(KVT_CODEC_ZSTD, 0, MAX_RAW, &codec) == 0, "codec context");
    return 0;
}

static uint32_t bind_ref(const kvt_key *k, uint64_t fp, uint64_t gen)
{
    uint8_t h[32];
    uint64_t f[5] = { k->id, k->layer, k->index, fp, gen };
    int widths[5] = { 8, 4, 4, 8, 8 }, at = 0;
    for (int i = 0; i < 5; i++)
        for (int b = 0; b < widths[i]; b++)
            h[at++] = (uint8_t)(f[i] >> (8 * b));
    return fuzz_crc32c_ref(0, h, sizeof h);
}

static void check_crc(const uint8_t *p, size_t n, uint32_t seed, size_t cut)
{
    uint32_t whole = kvt_crc32c(seed, p, n);
    fuzz_check(whole == fuzz_crc32c_ref(seed, p, n), "CRC32C equals the reference");
    cut = n ? cut % (n + 1) : 0;
    uint32_t a = kvt_crc32c(seed, p, cut);
    fuzz_check(kvt_crc32c(a, p + cut, n - cut) == whole, "CRC32C continues across a cut");
    fuzz_check(kvt_crc32c_combine(a, kvt_crc32c(0, p + cut, n - cut), n - cut) == whole,
               "combine(CRC(A), CRC(B), |B|) = CRC(A || B)");
}

/* A page that decoded: written again with the same codec, it must read back
 * as the same bytes (what the engine's write then read would do). */
static void check_reencode(int c, const uint8_t *raw, size_t n)
{
    static struct kvt_codec *encoders[KVT_CODEC_ZSTD_SHUFFLE16 + 1];
    struct kvt_codec *enc = encoders[c];
    if (!enc)
        fuzz_check(kvt_codec_new(c, 0, MAX_RAW, &encoders[c]) == 0 && (enc = encoders[c]),
                   "codec context");
    size_t cap = kvt_codec_bound(enc, n), out = 0;
    uint8_t *stored = malloc(cap ? cap : 1), *back = malloc(n ? n : 1);
    int used = -1;
    fuzz_check(stored && back, "memory");
    fuzz_check(kvt_codec_encode(enc, raw, n, stored, cap, &out, &used) == 0, "encode");
    fuzz_check(kvt_codec_decode(enc, used, stored, out, back, n) == 0 && !memcmp(back, raw, n),
               "an encoded page decodes to itself");
    free(stored);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_in in = { data, size };
    uint8_t flags = fuzz_u8(&in), codec_id = fuzz_u8(&in);
    kvt_key key;
    key.id = fuzz_u64(&in);
    key.layer = fuzz_u32(&in);
    key.index = fuzz_u32(&in);
    uint64_t fp = fuzz_u64(&in), gen = fuzz_u64(&in);
    uint32_t crc = fuzz_u32(&in), raw_len = fuzz_u32(&in), cut = fuzz_u32(&in);
    const uint8_t *stored = in.p;
    size_t n = in.n;

    /* The binding and the checksum, as a read checks them. */
    uint32_t seed = kvt_ssd_bind(&key, fp, gen);
    fuzz_check(seed == bind_ref(&key, fp, gen), "the binding is the CRC32C of its 32-byte header");
    check_crc(stored, n, seed, cut);
    if (!(flags & CRC_FROM_INPUT))
        crc = kvt_crc32c(seed, stored, n);
    if (kvt_crc32c(seed, stored, n) != crc)
        return 0;   /* a miss: the page is never decoded */

    /* The decode, into exactly raw_len bytes. Sizes past the context's
     * page_bytes are refused (-EINVAL); the rest reach the codec. */
    size_t raw = raw_len % (MAX_RAW + 2);
    uint8_t *dst = malloc(raw ? raw : 1);
    fuzz_check(dst != NULL, "memory");
    int r = kvt_codec_decode(codec, codec_id, stored, n, dst, raw);
    bool known = codec_id < KVT_CODEC_COUNT;
    fuzz_check(r == 0 || r == KVT_ECORRUPT || r == -EINVAL, "decode: exact, corrupt or refused");
    fuzz_check((r == -EINVAL) == (!known || raw > MAX_RAW), "-EINVAL only for a bad codec or size");
    if (r == 0 && codec_id == KVT_CODEC_NONE)
        fuzz_check(n == raw && !memcmp(dst, stored, raw), "a raw page decodes to itself");
    if (r == 0 && codec_id != KVT_CODEC_NONE && !kvt_codec_lossy(codec_id))
        check_reencode(codec_id, dst, raw);
    free(dst);
    return 0;
}
