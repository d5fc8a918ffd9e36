/*
 * fuzz_quant.c — the lossy codecs' frame and kernels with no checksum in
 * the way (io/quant.c, io/quant_kernels.c). On disk a damaged frame is
 * caught by its CRC first (fuzz_page); this target feeds the dequantiser
 * any bytes, to hold it to its bounds, and the quantiser any page and
 * layout.
 *
 * Input: u8 mode, u8 codec (3 + n % 3), u8 dtype, u8 order, u16 tokens,
 * u16 kv_heads, u16 head_dim, u16 v_head_dim, u16 rope_dim, u16 layer,
 * u32 raw_len, then the bytes (mode & 1: a page to encode, repeated to
 * raw_len; else a stored frame).
 *
 * Rules: decode returns 0 or KVT_ECORRUPT and never writes past raw_len
 * bytes (the buffer is exactly that size, ASan watches); the scalar and the
 * AVX2 kernels give the same result and the same bytes; a page whose layout
 * the check accepts encodes (or is left raw) with the same frame from both,
 * and its frame decodes; a frame that decoded, encoded again from what it
 * gave, decodes again.
 */
#include "include/kvtier.h"
#include "io/codec.h"
#include "io/quant.h"
#include "tests/fuzz/fuzz.h"

#define MAX_RAW (64u << 10)

static float scratch_a[4 * 4096], scratch_b[4 * 4096];

static const struct kvt_quant_kernels *other(void)
{
    return kvt_quant_best(); /* the scalar set where the CPU has no AVX2: then a self-check */
}

static uint16_t u16(struct fuzz_in *in)
{
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | fuzz_u8(in) << 8);
}

static void decode_both(int codec, const uint8_t *st, size_t n, size_t raw)
{
    uint8_t *a = malloc(raw ? raw : 1), *b = malloc(raw ? raw : 1);
    fuzz_check(a && b, "memory");
    int ra = kvt_quant_decode(&kvt_quant_scalar, codec, st, n, a, raw, scratch_a);
    int rb = kvt_quant_decode(other(), codec, st, n, b, raw, scratch_b);
    fuzz_check(ra == 0 || ra == KVT_ECORRUPT, "decode: exact size and finite scales, or corrupt");
    fuzz_check(ra == rb, "both kernel sets agree on the verdict");
    if (ra == 0)
        fuzz_check(!memcmp(a, b, raw), "both kernel sets decode to the same bytes");
    free(a);
    free(b);
}

static void encode_both(int codec, const struct kvt_page_layout *L, uint32_t layer,
                        const uint8_t *page, size_t raw)
{
    uint8_t *a = malloc(raw), *b = malloc(raw);
    fuzz_check(a && b, "memory");
    size_t na = 0, nb = 0;
    int ra = kvt_quant_encode(&kvt_quant_scalar, codec, L, layer, page, raw, a, raw, &na, scratch_a);
    int rb = kvt_quant_encode(other(), codec, L, layer, page, raw, b, raw, &nb, scratch_b);
    fuzz_check(ra == 0 || ra == 1, "encode: a frame, or better stored raw");
    fuzz_check(ra == rb && na == nb, "both kernel sets agree on the frame's size");
    if (ra == 0) {
        fuzz_check(na < raw && !memcmp(a, b, na), "both kernel sets write the same frame");
        decode_both(codec, a, na, raw);
    }
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_in in = { data, size };
    uint8_t mode = fuzz_u8(&in);
    int codec = KVT_CODEC_FP8 + fuzz_u8(&in) % 3;
    struct kvt_page_layout L = { 0 };
    L.dtype = fuzz_u8(&in);
    L.order = fuzz_u8(&in);
    L.tokens = u16(&in);
    L.kv_heads = u16(&in);
    L.head_dim = u16(&in);
    L.v_head_dim = u16(&in);
    L.rope_dim = u16(&in);
    uint32_t layer = u16(&in);
    size_t raw = fuzz_u32(&in) % (MAX_RAW + 1);
    if (!(mode & 1)) {
        decode_both(codec, in.p, in.n, raw);
        return 0;
    }
    char why[256];
    if (L.order == KVT_KV_MLA)
        L.kv_heads = 1;
    if (!L.v_head_dim && L.order != KVT_KV_MLA)
        L.v_head_dim = L.head_dim;
    L.n_layers = layer % 5;
    L.full_first = L.n_layers ? mode >> 4 & 1 : 0;
    if (kvt_page_layout_check(codec, &L, raw, why, sizeof why) != 0 || !raw || !in.n)
        return 0;
    uint8_t *page = malloc(raw);
    fuzz_check(page != NULL, "memory");
    for (size_t i = 0; i < raw; i++)
        page[i] = in.p[i % in.n];
    uint32_t key_layer = mode & 2 ? KVT_ALL_LAYERS : layer % 6;
    encode_both(codec, &L, key_layer, page, raw);
    free(page);
    return 0;
}
