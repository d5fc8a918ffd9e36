/*
 * test_codec.c — CRC32C (known vectors, incremental use, table path = fast
 * path = bitwise reference), the 16-bit shuffle, and the page codecs: round
 * trips on every kind of page, the raw fallback, damaged and truncated frames
 * (KVT_ECORRUPT, nothing written past the page), and the bf16 ratio.
 */
#include <zstd.h>

#include "lab/lab.h"
#include "tests/helpers.h"
#include "io/codec.h"

/* Test-only entry points of io/crc32c.c and io/codec.c, not in codec.h. */
extern uint32_t kvt_crc32c_table(uint32_t crc, const void *p, size_t n);
extern const char *kvt_crc32c_path_name(int i);
extern int kvt_crc32c_path_usable(int i);
extern uint32_t kvt_crc32c_path(int i, uint32_t crc, const void *p, size_t n);
extern int kvt_crc32c_path_chosen(void);
extern int kvt_crc32c_fold_k(int i, uint64_t k[2]);
extern int kvt_crc32c_shift_k(int i, uint64_t *k, size_t *chain);


#define PAGE (256u * 1024u)
#define GUARD 64u
#define GUARD_BYTE 0xA5

static const int codecs[] = { KVT_CODEC_NONE, KVT_CODEC_ZSTD, KVT_CODEC_ZSTD_SHUFFLE16 };
#define N_CODECS (sizeof codecs / sizeof codecs[0])

/* ---------------------------------------------------------------- data */

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)rnd(&seed);
}

static float bf16_to_float(const unsigned char *p)
{
    uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float32 to IEEE half, round to nearest, subnormals kept, no overflow for
 * these values. */
static uint16_t float_to_fp16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = f < 0 ? -f : f;
    if (a < 0x1p-14f)
        return (uint16_t)(sign | (uint16_t)(a * 0x1p24f + 0.5f));
    uint32_t e = ((u >> 23) & 0xff) - 127 + 15, m = u & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    h += (m >> 12) & 1; /* round half up: a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

/* fp16 KV-like values: the same Gaussian, half-precision layout. */
static void fill_fp16(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    kvt_codec_fill_bf16(b, n, seed);
    for (size_t i = 0; i + 1 < n; i += 2) {
        uint16_t h = float_to_fp16(bf16_to_float(b + i));
        b[i] = (unsigned char)(h & 0xff);
        b[i + 1] = (unsigned char)(h >> 8);
    }
}

enum kind { K_RANDOM, K_ZEROS, K_BF16, K_FP16 };

static void fill(enum kind k, void *p, size_t n)
{
    switch (k) {
    case K_RANDOM: fill_random(p, n, 42); break;
    case K_ZEROS: memset(p, 0, n); break;
    case K_BF16: kvt_codec_fill_bf16(p, n, 7); break;
    case K_FP16: fill_fp16(p, n, 9); break;
    }
}

/* A buffer of n bytes followed by a guard region that must stay untouched. */
static unsigned char *guarded(size_t n)
{
    unsigned char *p = malloc(n + GUARD);
    assert_non_null(p);
    memset(p, 0, n);
    memset(p + n, GUARD_BYTE, GUARD);
    return p;
}

static void assert_guard(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < GUARD; i++)
        assert_int_equal(p[n + i], GUARD_BYTE);
}

/* ---------------------------------------------------------------- crc32c */

static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static void test_crc32c_vectors(void **state)
{
    unsigned char b[32];
    assert_int_equal(kvt_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(kvt_crc32c_table(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(kvt_crc32c(0, "", 0), 0);
    assert_int_equal(kvt_crc32c(0, NULL, 0), 0);
    assert_int_equal(kvt_crc32c(0x12345678u, b, 0), 0x12345678u);
    /* RFC 3720 (iSCSI) B.4 */
    memset(b, 0, sizeof b);
    assert_int_equal(kvt_crc32c(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, sizeof b);
    assert_int_equal(kvt_crc32c(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)i;
    assert_int_equal(kvt_crc32c(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)(31 - i);
    assert_int_equal(kvt_crc32c(0, b, 32), 0x113FDB5Cu);
}

static void test_crc32c_incremental(void **state)
{
    size_t n = 3 * 8192 * 2 + 3 * 256 + 77; /* both interleave block sizes and a tail */
    unsigned char *b = malloc(n);
    assert_non_null(b);
    fill_random(b, n, 1);
    uint32_t whole = kvt_crc32c(0, b, n);
    assert_int_equal(whole, kvt_crc32c_table(0, b, n));
    for (size_t cut = 0; cut <= 1100; cut++)
        assert_int_equal(kvt_crc32c(kvt_crc32c(0, b, cut), b + cut, n - cut), whole);
    for (size_t cut = 1100; cut < n; cut += 997) {
        assert_int_equal(kvt_crc32c(kvt_crc32c(0, b, cut), b + cut, n - cut), whole);
        assert_int_equal(kvt_crc32c_table(kvt_crc32c_table(0, b, cut), b + cut, n - cut), whole);
    }
    /* three pieces, the middle one unaligned and short */
    uint32_t c = kvt_crc32c(0, b, 13);
    c = kvt_crc32c(c, b + 13, 5);
    assert_int_equal(kvt_crc32c(c, b + 18, n - 18), whole);
    free(b);
}

/* The dispatched path (SSE4.2 where present), the slice-by-8 table and a
 * bitwise CRC agree on every length and alignment that the interleave
 * distinguishes. */
static void test_crc32c_paths_agree(void **state)
{
    size_t max = 3 * 8192 * 3 + 1000;
    unsigned char *b = malloc(max + 8);
    assert_non_null(b);
    fill_random(b, max + 8, 2);
    static const size_t lens[] = { 1, 7, 8, 9, 255, 256, 767, 768, 769, 1536, 24575, 24576,
                                   24577, 25343, 49152 + 768 + 8, 3 * 8192 * 3 + 1000 };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t off = 0; off < 8; off++) {
            uint32_t ref = crc_bitwise(0, b + off, lens[i]);
            assert_int_equal(kvt_crc32c(0, b + off, lens[i]), ref);
            assert_int_equal(kvt_crc32c_table(0, b + off, lens[i]), ref);
            assert_int_equal(kvt_crc32c(0xDEADBEEFu, b + off, lens[i]),
                             crc_bitwise(0xDEADBEEFu, b + off, lens[i]));
        }
    }
    uint64_t s = 3;
    for (int k = 0; k < 200; k++) {
        size_t len = rnd(&s) % max, off = rnd(&s) % 8;
        uint32_t ref = kvt_crc32c_table(0, b + off, len);
        assert_int_equal(kvt_crc32c(0, b + off, len), ref);
    }
    free(b);
}

/* x^n modulo P, reflected (bit 31 is x^0), one multiplication by x at a
 * time: the slow, obvious derivation of the folding constants. */
static uint32_t x_pow_mod(unsigned n)
{
    uint32_t r = 1u << 31;
    while (n--)
        r = (r & 1) ? (r >> 1) ^ 0x82F63B78u : r >> 1;
    return r;
}

/* Each row folds by d = 128 (i + 1) bits: {x^(d+63), x^(d-1)} mod P in the
 * top half of a 64-bit operand (io/crc32c.c says why). */
static void test_crc32c_fold_constants(void **state)
{
    uint64_t k[2];
    int rows = 0;
    for (int i = 0; kvt_crc32c_fold_k(i, k) == 0; i++, rows++) {
        unsigned d = 128u * (unsigned)(i + 1);
        assert_int_equal(k[0], (uint64_t)x_pow_mod(d + 63) << 32);
        assert_int_equal(k[1], (uint64_t)x_pow_mod(d - 1) << 32);
    }
    if (kvt_crc32c_path_usable(2))
        assert_int_equal(rows, 16);
    assert_int_equal(kvt_crc32c_fold_k(-1, k), -1);
    /* the hybrid's shifts over L = chain (i + 1) bytes: x^(8 L - 33) */
    size_t chain;
    rows = 0;
    for (int i = 0; kvt_crc32c_shift_k(i, k, &chain) == 0; i++, rows++)
        assert_int_equal(k[0], x_pow_mod(8u * (unsigned)chain * (unsigned)(i + 1) - 33));
    if (kvt_crc32c_path_usable(2))
        assert_int_equal(rows, 4);
}

/* Every implementation this CPU runs, the dispatch's choice and the others
 * alike, is tested; *last is the highest usable index. */
static int crc_paths_usable(int *last)
{
    int n = 0;
    *last = -1;
    for (int i = 0; kvt_crc32c_path_name(i); i++) {
        if (kvt_crc32c_path_usable(i)) {
            *last = i;
            n++;
        } else {
            printf("crc32c path %s: not on this CPU, not tested\n", kvt_crc32c_path_name(i));
        }
    }
    return n;
}

static void test_crc32c_dispatch(void **state)
{
    int last;
    assert_true(crc_paths_usable(&last) >= 1);
    assert_true(kvt_crc32c_path_usable(0)); /* the table runs anywhere */
    assert_string_equal(kvt_crc32c_path_name(0), "table");
    /* the dispatch's order: hybrid, vpclmul, sse4.2, table (never pclmul) */
    int want = 0;
    static const char *const order[] = { "hybrid", "vpclmul", "sse4.2" };
    for (int o = 2; o >= 0; o--)
        for (int i = 0; kvt_crc32c_path_name(i); i++)
            if (!strcmp(kvt_crc32c_path_name(i), order[o]) && kvt_crc32c_path_usable(i))
                want = i;
    assert_int_equal(kvt_crc32c_path_chosen(), want);
    assert_false(kvt_crc32c_path_usable(-1));
    assert_null(kvt_crc32c_path_name(-1));
    printf("crc32c dispatch picks %s\n", kvt_crc32c_path_name(kvt_crc32c_path_chosen()));
}

#define EVERY_LEN 4096
#define ALIGNS 64

/* Whether test_crc32c_every_length checks this start and length: every
 * pair up to 1 KiB (past both folding paths' thresholds, every tail size many
 * times), then every length at alignment 0 and at one turning with the
 * length, so that the test stays seconds under ThreadSanitizer at -O0. */
static int every_len_pair(size_t off, size_t len)
{
    return len <= 1024 || off == 0 || off == len % ALIGNS;
}

/* Lengths 0..4096 each, at start alignments 0..63, every usable path against
 * the bitwise CRC (whose prefix values come from one pass); the seed (0, ~0
 * or a random one) turns with the length and the alignment, so that each
 * seed meets every length and every alignment. The table is checked at a few
 * alignments: it has no alignment-dependent code and is 20 times slower. */
static void test_crc32c_every_length(void **state)
{
    unsigned char *b = malloc(EVERY_LEN + ALIGNS);
    uint32_t *ref = malloc(3 * (EVERY_LEN + 1) * sizeof *ref);
    assert_non_null(b);
    assert_non_null(ref);
    fill_random(b, EVERY_LEN + ALIGNS, 5);
    const uint32_t seeds[3] = { 0, ~0u, 0x9E3779B9u };
    int last;
    crc_paths_usable(&last);
    for (size_t off = 0; off < ALIGNS; off++) {
        for (int s = 0; s < 3; s++) {
            uint32_t *r = ref + s * (EVERY_LEN + 1);
            r[0] = seeds[s];
            for (size_t len = 1; len <= EVERY_LEN; len++)
                r[len] = crc_bitwise(r[len - 1], b + off + len - 1, 1);
        }
        for (int i = 0; i <= last; i++) {
            if (!kvt_crc32c_path_usable(i) || (i == 0 && off != 0 && off != 1 && off != 63))
                continue;
            for (size_t len = 0; len <= EVERY_LEN; len++) {
                size_t s = (len + off) % 3;
                if (every_len_pair(off, len) &&
                    kvt_crc32c_path(i, seeds[s], b + off, len) != ref[s * (EVERY_LEN + 1) + len])
                    fail_msg("crc32c path %s: offset %zu length %zu seed %08x",
                             kvt_crc32c_path_name(i), off, len, seeds[s]);
            }
        }
    }
    /* ending at the end of the allocation, so that ASan sees any read past
     * it; the table, checked above, is the reference */
    const unsigned char *end = b + EVERY_LEN + ALIGNS;
    for (size_t len = 0; len <= EVERY_LEN; len++) {
        uint32_t want = kvt_crc32c_table(0, end - len, len);
        for (int i = 1; i <= last; i++)
            if (kvt_crc32c_path_usable(i) && kvt_crc32c_path(i, 0, end - len, len) != want)
                fail_msg("crc32c path %s: length %zu ending at the buffer's end",
                         kvt_crc32c_path_name(i), len);
    }
    free(ref);
    free(b);
}

#define BIG (4u << 20)

/* Random lengths up to 4 MiB at random alignments and seeds, every usable
 * path against the bitwise CRC; then split calls on every path compose to
 * the one-shot value, cut anywhere. */
static void test_crc32c_long_and_split(void **state)
{
    unsigned char *b = malloc(BIG + ALIGNS);
    assert_non_null(b);
    fill_random(b, BIG + ALIGNS, 6);
    int last;
    crc_paths_usable(&last);
    uint64_t s = 7;
    for (int k = 0; k < 8; k++) {
        size_t len = k == 0 ? BIG : rnd(&s) % (BIG + 1), off = rnd(&s) % ALIGNS;
        uint32_t seed = k % 3 == 0 ? 0 : k % 3 == 1 ? ~0u : (uint32_t)rnd(&s);
        if (k == 1)
            off = BIG + ALIGNS - len; /* ending at the allocation's end */
        uint32_t want = crc_bitwise(seed, b + off, len);
        for (int i = 0; i <= last; i++)
            if (kvt_crc32c_path_usable(i) && kvt_crc32c_path(i, seed, b + off, len) != want)
                fail_msg("crc32c path %s: offset %zu length %zu seed %08x",
                         kvt_crc32c_path_name(i), off, len, seed);
    }
    /* the edges of the hybrid's 32 KiB rounds and of the other blocks */
    static const size_t edges[] = { 32767, 32768, 32769, 32768 + 511, 32768 + 512, 65535,
                                    65536 + 15, 3 * 8192 * 2 - 1, 262144, 262144 + 255 };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
        for (size_t off = 0; off < ALIGNS; off += 21) {
            uint32_t want = crc_bitwise(~0u, b + off, edges[e]);
            for (int i = 0; i <= last; i++)
                if (kvt_crc32c_path_usable(i) && kvt_crc32c_path(i, ~0u, b + off, edges[e]) != want)
                    fail_msg("crc32c path %s: offset %zu length %zu", kvt_crc32c_path_name(i), off,
                             edges[e]);
        }
    }
    /* cut at every byte near both ends, every 1021 between */
    size_t n = 32768 * 2 + 1000 + 77;
    uint32_t whole = crc_bitwise(0, b + 3, n);
    for (int i = 0; i <= last; i++) {
        if (!kvt_crc32c_path_usable(i))
            continue;
        for (size_t cut = 0; cut <= n; cut += cut < 64 || cut + 64 >= n ? 1 : 1021) {
            uint32_t c = kvt_crc32c_path(i, 0, b + 3, cut);
            if (kvt_crc32c_path(i, c, b + 3 + cut, n - cut) != whole)
                fail_msg("crc32c path %s: split at %zu of %zu", kvt_crc32c_path_name(i), cut, n);
        }
    }
    free(b);
}

/* ---------------------------------------------------------------- shuffle */

static void test_shuffle_layout_and_inverse(void **state)
{
    static const size_t sizes[] = { 0, 1, 2, 3, 14, 16, 30, 31, 32, 33, 34, 62, 64, 66, 4096, 4097 };
    unsigned char src[4100], sh[4100], back[4100 + GUARD];
    fill_random(src, sizeof src, 4);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k], half = n / 2;
        memset(back, GUARD_BYTE, sizeof back);
        kvt_shuffle16(src, sh, n);
        for (size_t i = 0; i < half; i++) {
            assert_int_equal(sh[i], src[2 * i + 1]);    /* high bytes first */
            assert_int_equal(sh[half + i], src[2 * i]); /* then low bytes */
        }
        if (n & 1)
            assert_int_equal(sh[n - 1], src[n - 1]);
        kvt_unshuffle16(sh, back, n);
        assert_memory_equal(back, src, n);
        for (size_t i = n; i < n + GUARD; i++)
            assert_int_equal(back[i], GUARD_BYTE);
    }
}

/* ---------------------------------------------------------------- codec */

/* Encodes and decodes one page; returns the codec used and the stored size. */
static void roundtrip(int codec, const void *src, size_t raw, int *used, size_t *stored)
{
    struct kvt_codec *c;
    assert_int_equal(kvt_codec_new(codec, 0, raw ? raw : 1, &c), 0);
    size_t cap = kvt_codec_bound(c, raw);
    assert_true(cap >= raw);
    unsigned char *enc = guarded(cap), *dec = guarded(raw);
    assert_int_equal(kvt_codec_encode(c, src, raw, enc, cap, stored, used), 0);
    assert_true(*stored <= cap);
    assert_guard(enc, cap);
    if (*used == KVT_CODEC_NONE)
        assert_int_equal(*stored, raw);
    else
        assert_int_equal(*used, codec);
    assert_true(*stored <= raw); /* never worse than raw: the fallback */
    assert_int_equal(kvt_codec_decode(c, *used, enc, *stored, dec, raw), 0);
    assert_memory_equal(dec, src, raw);
    assert_guard(dec, raw);
    free(enc);
    free(dec);
    kvt_codec_free(c);
}

static void roundtrip_kind(enum kind k, size_t raw, const int expect_used[N_CODECS])
{
    unsigned char *src = malloc(raw);
    assert_non_null(src);
    fill(k, src, raw);
    for (size_t i = 0; i < N_CODECS; i++) {
        int used;
        size_t stored;
        roundtrip(codecs[i], src, raw, &used, &stored);
        print_message("kind %d codec %d: used %d ratio %.3f\n", k, codecs[i], used,
                      (double)raw / (double)stored);
        if (expect_used[i] >= 0)
            assert_int_equal(used, expect_used[i]);
        if (used != KVT_CODEC_NONE)
            assert_true(stored <= raw - raw / 16);
    }
    free(src);
}

static void test_roundtrip_random_stores_raw(void **state)
{
    const int expect[N_CODECS] = { KVT_CODEC_NONE, KVT_CODEC_NONE, KVT_CODEC_NONE };
    roundtrip_kind(K_RANDOM, PAGE, expect);
}

static void test_roundtrip_zeros(void **state)
{
    const int expect[N_CODECS] = { KVT_CODEC_NONE, KVT_CODEC_ZSTD, KVT_CODEC_ZSTD_SHUFFLE16 };
    roundtrip_kind(K_ZEROS, PAGE, expect);
}

static void test_roundtrip_bf16(void **state)
{
    const int expect[N_CODECS] = { KVT_CODEC_NONE, KVT_CODEC_ZSTD, KVT_CODEC_ZSTD_SHUFFLE16 };
    roundtrip_kind(K_BF16, PAGE, expect);
}

static void test_roundtrip_fp16(void **state)
{
    /* plain zstd may or may not save 1/16 on fp16; the shuffle must */
    const int expect[N_CODECS] = { KVT_CODEC_NONE, -1, KVT_CODEC_ZSTD_SHUFFLE16 };
    roundtrip_kind(K_FP16, PAGE, expect);
}

/* Small and odd sizes: the shuffle's scalar tail and odd byte, zstd's frame
 * overhead (tiny pages fall back to raw). */
static void test_roundtrip_sizes(void **state)
{
    static const size_t sizes[] = { 0, 1, 2, 3, 15, 16, 17, 33, 4095, 4096, 65537 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t raw = sizes[k];
        unsigned char *src = malloc(raw + 1);
        assert_non_null(src);
        for (int kind = K_RANDOM; kind <= K_FP16; kind++) {
            fill((enum kind)kind, src, raw);
            for (size_t i = 0; i < N_CODECS; i++) {
                int used;
                size_t stored;
                roundtrip(codecs[i], src, raw, &used, &stored);
            }
        }
        free(src);
    }
}

/* The acceptance figure of the shuffle codec on a 256 KiB bf16 page. */
static void test_bf16_ratio(void **state)
{
    unsigned char *src = malloc(PAGE);
    assert_non_null(src);
    kvt_codec_fill_bf16(src, PAGE, 7);
    double ratio[N_CODECS];
    for (size_t i = 0; i < N_CODECS; i++) {
        int used;
        size_t stored;
        roundtrip(codecs[i], src, PAGE, &used, &stored);
        ratio[i] = (double)PAGE / (double)stored;
    }
    print_message("bf16 N(0,1) 256 KiB: zstd %.3f, zstd+shuffle16 %.3f\n", ratio[1], ratio[2]);
    assert_true(ratio[2] >= 1.35);
    free(src);
}

/* The generator behind the bf16 pages: N(0, 1) to within sampling error. */
static void test_bf16_generator(void **state)
{
    size_t n = PAGE / 2;
    unsigned char *p = malloc(PAGE);
    assert_non_null(p);
    kvt_codec_fill_bf16(p, PAGE, 11);
    double sum = 0, sum2 = 0;
    size_t within1 = 0;
    for (size_t i = 0; i < n; i++) {
        double x = bf16_to_float(p + 2 * i);
        sum += x;
        sum2 += x * x;
        within1 += x > -1.0 && x < 1.0;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    assert_true(mean > -0.02 && mean < 0.02);
    assert_true(var > 0.97 && var < 1.03);
    assert_true((double)within1 / n > 0.67 && (double)within1 / n < 0.695); /* 0.6827 */
    unsigned char *q = malloc(PAGE);
    assert_non_null(q);
    kvt_codec_fill_bf16(q, PAGE, 11);
    assert_memory_equal(p, q, PAGE); /* fixed seed, same page */
    free(p);
    free(q);
}

/* ---------------------------------------------------------------- damage */

/* A compressed page and a context to decode it with (page_bytes 2 * raw, so
 * too-large raw sizes reach the decoder). */
struct damaged {
    struct kvt_codec *c;
    unsigned char *src, *enc, *work;
    size_t raw, stored;
    int used;
};

static void damaged_init(struct damaged *d, int codec, enum kind k, size_t raw)
{
    d->raw = raw;
    assert_int_equal(kvt_codec_new(codec, 0, 2 * raw, &d->c), 0);
    d->src = malloc(raw);
    d->enc = malloc(kvt_codec_bound(d->c, raw));
    d->work = malloc(kvt_codec_bound(d->c, raw));
    assert_true(d->src && d->enc && d->work);
    fill(k, d->src, raw);
    assert_int_equal(kvt_codec_encode(d->c, d->src, raw, d->enc, kvt_codec_bound(d->c, raw),
                                      &d->stored, &d->used), 0);
    assert_int_equal(d->used, codec);
}

static void damaged_fini(struct damaged *d)
{
    free(d->src);
    free(d->enc);
    free(d->work);
    kvt_codec_free(d->c);
}

/* Decodes src into a guarded page of raw bytes; the guard must survive. */
static int decode_guarded(struct damaged *d, const void *src, size_t stored, size_t raw)
{
    unsigned char *dst = guarded(raw);
    int rc = kvt_codec_decode(d->c, d->used, src, stored, dst, raw);
    assert_guard(dst, raw);
    if (rc == 0)
        assert_true(raw == d->raw);
    free(dst);
    return rc;
}

static void damage_one(int codec, enum kind k)
{
    struct damaged d;
    damaged_init(&d, codec, k, 64 * 1024);
    /* truncated frames */
    size_t cuts[] = { 0, 1, 4, d.stored / 2, d.stored - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        assert_int_equal(decode_guarded(&d, d.enc, cuts[i], d.raw), KVT_ECORRUPT);
    /* a frame of more or fewer bytes than the index says */
    assert_int_equal(decode_guarded(&d, d.enc, d.stored, d.raw - 1), KVT_ECORRUPT);
    assert_int_equal(decode_guarded(&d, d.enc, d.stored, d.raw - 4096), KVT_ECORRUPT);
    assert_int_equal(decode_guarded(&d, d.enc, d.stored, d.raw + 2), KVT_ECORRUPT);
    /* the magic number */
    memcpy(d.work, d.enc, d.stored);
    d.work[0] ^= 0x01;
    assert_int_equal(decode_guarded(&d, d.work, d.stored, d.raw), KVT_ECORRUPT);
    /* garbage */
    fill_random(d.work, d.stored, 5);
    assert_int_equal(decode_guarded(&d, d.work, d.stored, d.raw), KVT_ECORRUPT);
    /* bit flips anywhere: damaged entropy-coded data may still decode to raw
     * bytes (the CRC catches that), but never anything else, never a write
     * past the page */
    size_t step = d.stored / 150 ? d.stored / 150 : 1;
    for (size_t pos = 0; pos < d.stored; pos += (pos < 32 ? 1 : step)) {
        memcpy(d.work, d.enc, d.stored);
        d.work[pos] ^= (unsigned char)(1u << (pos % 8));
        int rc = decode_guarded(&d, d.work, d.stored, d.raw);
        assert_true(rc == 0 || rc == KVT_ECORRUPT);
    }
    damaged_fini(&d);
}

static void test_decode_damaged(void **state)
{
    damage_one(KVT_CODEC_ZSTD, K_BF16);
    damage_one(KVT_CODEC_ZSTD, K_ZEROS);
    damage_one(KVT_CODEC_ZSTD_SHUFFLE16, K_BF16);
    damage_one(KVT_CODEC_ZSTD_SHUFFLE16, K_FP16);
}

/* A frame that holds more than the page and does not say so in its header:
 * zstd must stop at dst + raw. */
static void test_decode_overlong_frame(void **state)
{
    size_t raw = 16384, big = 4 * raw;
    unsigned char *zeros = calloc(1, big);
    assert_non_null(zeros);
    ZSTD_CCtx *z = ZSTD_createCCtx();
    assert_non_null(z);
    assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_contentSizeFlag, 0)));
    size_t cap = ZSTD_compressBound(big);
    unsigned char *frame = malloc(cap);
    assert_non_null(frame);
    size_t n = ZSTD_compress2(z, frame, cap, zeros, big);
    assert_false(ZSTD_isError(n));
    for (size_t i = 0; i < N_CODECS; i++) {
        struct kvt_codec *c;
        assert_int_equal(kvt_codec_new(codecs[i], 0, raw, &c), 0);
        unsigned char *dst = guarded(raw);
        for (int codec = KVT_CODEC_ZSTD; codec <= KVT_CODEC_ZSTD_SHUFFLE16; codec++)
            assert_int_equal(kvt_codec_decode(c, codec, frame, n, dst, raw), KVT_ECORRUPT);
        assert_guard(dst, raw);
        free(dst);
        kvt_codec_free(c);
    }
    ZSTD_freeCCtx(z);
    free(frame);
    free(zeros);
}

static void test_decode_none_size_mismatch(void **state)
{
    struct kvt_codec *c;
    unsigned char src[4096], dst[4096 + GUARD];
    fill_random(src, sizeof src, 6);
    memset(dst + 4096, GUARD_BYTE, GUARD);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 0, 8192, &c), 0);
    assert_int_equal(kvt_codec_decode(c, KVT_CODEC_NONE, src, 4095, dst, 4096), KVT_ECORRUPT);
    assert_int_equal(kvt_codec_decode(c, KVT_CODEC_NONE, src, 4096, dst, 4095), KVT_ECORRUPT);
    assert_int_equal(kvt_codec_decode(c, KVT_CODEC_NONE, src, 0, dst, 4096), KVT_ECORRUPT);
    assert_int_equal(kvt_codec_decode(c, KVT_CODEC_NONE, src, 4096, dst, 4096), 0);
    assert_memory_equal(dst, src, 4096);
    assert_guard(dst, 4096);
    kvt_codec_free(c);
}

/* ---------------------------------------------------------------- arguments */

static void test_invalid_arguments(void **state)
{
    struct kvt_codec *c = NULL;
    unsigned char buf[64] = { 0 }, out[64];
    size_t len;
    int used;
    assert_int_equal(kvt_codec_new(KVT_CODEC_COUNT, 0, 4096, &c), -EINVAL);
    assert_int_equal(kvt_codec_new(KVT_CODEC_FP8, 0, 4096, &c), -EINVAL); /* no layout */
    assert_int_equal(kvt_codec_new(-1, 0, 4096, &c), -EINVAL);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 1000, 4096, &c), -EINVAL);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 0, 0, &c), -EINVAL);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 0, 4096, NULL), -EINVAL);
    assert_null(c);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 0, 64, &c), 0);
    assert_int_equal(kvt_codec_decode(c, 9, buf, 64, out, 64), -EINVAL);
    assert_int_equal(kvt_codec_decode(c, -1, buf, 64, out, 64), -EINVAL);
    /* larger than the page the context was made for */
    assert_int_equal(kvt_codec_encode(c, buf, 65, out, 64, &len, &used), -EINVAL);
    assert_int_equal(kvt_codec_decode(c, KVT_CODEC_NONE, buf, 65, out, 65), -EINVAL);
    kvt_codec_free(c);
    kvt_codec_free(NULL);
    double r;
    assert_int_equal(kvt_codec_bench(KVT_CODEC_COUNT, 4096, 0, &r, NULL, NULL), -EINVAL);
    /* a lossy codec without a layout to say where K and V are */
    assert_int_equal(kvt_codec_bench(KVT_CODEC_INT4, 4096, 0, &r, NULL, NULL), -EINVAL);
}

/* The bound, the raw fallback with a tight cap, -ENOSPC below it, levels, and
 * a context decoding codecs other than its own. */
static void test_bound_cap_levels_foreign(void **state)
{
    size_t raw = 65536;
    unsigned char *src = malloc(raw), *enc = malloc(ZSTD_compressBound(raw)), *dec = malloc(raw);
    assert_true(src && enc && dec);
    struct kvt_codec *none, *z, *z19;
    assert_int_equal(kvt_codec_new(KVT_CODEC_NONE, 0, raw, &none), 0);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 0, raw, &z), 0);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD_SHUFFLE16, 19, raw, &z19), 0);
    assert_int_equal(kvt_codec_bound(none, raw), raw);
    assert_int_equal(kvt_codec_bound(z, raw), ZSTD_compressBound(raw));
    size_t len;
    int used;
    /* incompressible, cap exactly raw: stored raw; one byte less: no room */
    fill_random(src, raw, 8);
    assert_int_equal(kvt_codec_encode(z, src, raw, enc, raw, &len, &used), 0);
    assert_int_equal(used, KVT_CODEC_NONE);
    assert_int_equal(kvt_codec_encode(z, src, raw, enc, raw - 1, &len, &used), -ENOSPC);
    /* NONE stores zeros raw */
    memset(src, 0, raw);
    assert_int_equal(kvt_codec_encode(none, src, raw, enc, raw, &len, &used), 0);
    assert_int_equal(used, KVT_CODEC_NONE);
    assert_int_equal(len, raw);
    /* level 19 shuffle, decoded by a NONE context (allocates on first use) */
    kvt_codec_fill_bf16(src, raw, 12);
    assert_int_equal(kvt_codec_encode(z19, src, raw, enc, kvt_codec_bound(z19, raw), &len, &used), 0);
    assert_int_equal(used, KVT_CODEC_ZSTD_SHUFFLE16);
    assert_int_equal(kvt_codec_decode(none, used, enc, len, dec, raw), 0);
    assert_memory_equal(dec, src, raw);
    memset(dec, 0, raw);
    assert_int_equal(kvt_codec_decode(z, used, enc, len, dec, raw), 0);
    assert_memory_equal(dec, src, raw);
    kvt_codec_free(none);
    kvt_codec_free(z);
    kvt_codec_free(z19);
    free(src);
    free(enc);
    free(dec);
}

/* The bench helper's figures, without asserting any speed. */
static void test_bench_helper(void **state)
{
    double ratio = 0, cg = 0, dg = 0;
    assert_int_equal(kvt_codec_bench(KVT_CODEC_ZSTD_SHUFFLE16, PAGE, 0.0, &ratio, &cg, &dg), 0);
    assert_true(ratio >= 1.35);
    assert_true(cg > 0 && dg > 0);
    assert_int_equal(kvt_codec_bench(KVT_CODEC_NONE, PAGE, 0.0, &ratio, &cg, &dg), 0);
    assert_true(ratio == 1.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_incremental),
        cmocka_unit_test(test_crc32c_paths_agree),
        cmocka_unit_test(test_crc32c_fold_constants),
        cmocka_unit_test(test_crc32c_dispatch),
        cmocka_unit_test(test_crc32c_every_length),
        cmocka_unit_test(test_crc32c_long_and_split),
        cmocka_unit_test(test_shuffle_layout_and_inverse),
        cmocka_unit_test(test_roundtrip_random_stores_raw),
        cmocka_unit_test(test_roundtrip_zeros),
        cmocka_unit_test(test_roundtrip_bf16),
        cmocka_unit_test(test_roundtrip_fp16),
        cmocka_unit_test(test_roundtrip_sizes),
        cmocka_unit_test(test_bf16_ratio),
        cmocka_unit_test(test_bf16_generator),
        cmocka_unit_test(test_decode_damaged),
        cmocka_unit_test(test_decode_overlong_frame),
        cmocka_unit_test(test_decode_none_size_mismatch),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_bound_cap_levels_foreign),
        cmocka_unit_test(test_bench_helper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
