/*
 * codec_bench.c — test data for the page codecs and their benchmark
 * (lab.h): a bf16 page of N(0, 1) values, and `kvtier bench`'s encode and
 * decode speeds. Apart from io/codec.c: the engine never makes test data.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/codec.h"
#include "lab/lab.h"

/* ---------------------------------------------------------------- test data */

/* The library does not link libm, so the polar form of Box–Muller
 * (Marsaglia) is used with a local logarithm and square root; both are exact
 * to about 1e-14, far below bf16's 3 significant digits. */
static double gauss_log(double x) /* x > 0, normal */
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    b = (b & ((1ull << 52) - 1)) | (1023ull << 52); /* mantissa m in [1, 2) */
    double m;
    memcpy(&m, &b, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double t = (m - 1) / (m + 1), t2 = t * t, sum = 0; /* |t| < 0.172 */
    for (int k = 17; k >= 1; k -= 2)
        sum = sum * t2 + 1.0 / k;
    return e * 0.6931471805599453 + 2 * t * sum;
}

static double gauss_sqrt(double x) /* x > 0 */
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    b = (b >> 1) + (1023ull << 51); /* the exponent halved: within 7% */
    double y;
    memcpy(&y, &b, sizeof y);
    for (int i = 0; i < 6; i++)
        y = 0.5 * (y + x / y);
    return y;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform_pm1(uint64_t *s) /* in (-1, 1) */
{
    return (double)(splitmix64(s) >> 11) * 0x1p-52 - 1.0;
}

/* Round to nearest even on the top 16 bits of a float32 (no NaNs here). */
static uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* IEEE half, round to nearest even (values here are far inside its range). */
static uint16_t half_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a < 0x38800000u) { /* subnormal half */
        float s;
        memcpy(&s, &a, sizeof s);
        return (uint16_t)(sign | (uint32_t)((s * 0x1p24f + 0x1.8p23f) - 0x1.8p23f));
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
}

static void put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

void kvt_codec_fill_bf16(void *dst, size_t bytes, uint64_t seed)
{
    unsigned char *p = dst;
    size_t words = bytes / 2;
    for (size_t i = 0; i < words; i += 2) {
        double x, y, s;
        do {
            x = uniform_pm1(&seed);
            y = uniform_pm1(&seed);
            s = x * x + y * y;
        } while (s >= 1.0 || s == 0.0);
        double f = gauss_sqrt(-2.0 * gauss_log(s) / s);
        put_le16(p + 2 * i, float_to_bf16((float)(x * f)));
        if (i + 1 < words)
            put_le16(p + 2 * i + 2, float_to_bf16((float)(y * f)));
    }
    if (bytes & 1)
        p[bytes - 1] = 0;
}

/* The structure real keys have (KIVI, KVQuant measure it): a few channels
 * of every K head, the same for every token, far larger than the rest and
 * off zero. Here 1 in 32 (channels 5, 37, ...): N(±12, 3) against N(0, 1)
 * (docs/codecs.md#test-data). Values N(0, 1). */
#define OUTLIER_EVERY 32
#define OUTLIER_AT 5

static float kv_value(uint64_t *seed, bool key, uint32_t col)
{
    double x, y, s;
    do {
        x = uniform_pm1(seed);
        y = uniform_pm1(seed);
        s = x * x + y * y;
    } while (s >= 1.0 || s == 0.0);
    double g = x * gauss_sqrt(-2.0 * gauss_log(s) / s);
    if (key && col % OUTLIER_EVERY == OUTLIER_AT)
        return (float)((col / OUTLIER_EVERY) % 2 ? 12.0 + 3.0 * g : -12.0 + 3.0 * g);
    return (float)g;
}

static void kv_put(unsigned char *p, int dtype, float f)
{
    put_le16(p, dtype == KVT_DTYPE_FP16 ? half_of(f) : float_to_bf16(f));
}

/* Which stream element i of a block row is in: K (true) or V. */
static bool kv_is_key(const struct kvt_page_layout *L, uint64_t i, uint32_t *col)
{
    uint64_t wk = (uint64_t)L->kv_heads * L->head_dim, wv = (uint64_t)L->kv_heads * L->v_head_dim;
    if (L->order == KVT_KV_MLA) {
        *col = (uint32_t)(i % ((uint64_t)L->head_dim + L->rope_dim));
        return true;
    }
    if (L->order == KVT_KV_HEAD_MAJOR) {
        uint64_t kb = (uint64_t)L->tokens * wk;
        *col = (uint32_t)(i < kb ? i % L->head_dim : (i - kb) % L->v_head_dim);
        return i < kb;
    }
    if (L->order == KVT_KV_INTERLEAVED) {
        uint64_t c = i % (wk + wv);
        *col = (uint32_t)(c < wk ? c : c - wk);
        return c < wk;
    }
    uint64_t kbytes = (uint64_t)L->tokens * wk;
    *col = (uint32_t)(i < kbytes ? i % wk : (i - kbytes) % wv);
    return i < kbytes;
}

void kvt_codec_fill_kv(void *dst, size_t bytes, const struct kvt_page_layout *L, uint64_t seed)
{
    unsigned char *p = dst;
    size_t block = kvt_page_layout_block_bytes(L), done = 0;
    while (block && done + block <= bytes) {
        for (uint64_t i = 0; i < block / 2; i++) {
            uint32_t col;
            bool key = kv_is_key(L, i, &col);
            kv_put(p + done + 2 * i, L->dtype, kv_value(&seed, key, col));
        }
        done += block;
    }
    kvt_codec_fill_bf16(p + done, bytes - done, seed);
}

/* ---------------------------------------------------------------- bench */

/* The calling thread's CPU time: "GB/s per core" is bytes per second of a
 * core's work, which a machine shared with other jobs would understate if
 * measured on the wall clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct bench_bufs {
    unsigned char *page, *enc, *dec;
};

static void bench_free(struct bench_bufs *b)
{
    free(b->page);
    free(b->enc);
    free(b->dec);
}

/* Encodes, then decodes, for about `seconds` each; the page is checked once
 * after the last decode, so a broken codec cannot report a speed. */
static int bench_run(struct kvt_codec *c, struct bench_bufs *b, size_t raw, double seconds,
                     size_t *stored, double gbps[2])
{
    size_t cap = kvt_codec_bound(c, raw);
    int used = KVT_CODEC_NONE, rc = 0;
    long iters = 0;
    double t0 = now_s(), t = 0;
    do {
        rc = kvt_codec_encode(c, b->page, raw, b->enc, cap, stored, &used);
        iters++;
    } while (rc == 0 && (t = now_s() - t0) < seconds);
    if (rc)
        return rc;
    gbps[0] = (double)raw * iters / t / 1e9;
    iters = 0;
    t0 = now_s();
    do {
        rc = kvt_codec_decode(c, used, b->enc, *stored, b->dec, raw);
        iters++;
    } while (rc == 0 && (t = now_s() - t0) < seconds);
    if (rc)
        return rc;
    gbps[1] = (double)raw * iters / t / 1e9;
    if (kvt_codec_lossy(used))
        return 0; /* lossy: test_quant checks what comes back */
    return memcmp(b->page, b->dec, raw) ? KVT_ECORRUPT : 0;
}

int kvt_codec_bench(int codec, size_t page_bytes, double seconds, double *ratio, double *comp_gbps,
                    double *decomp_gbps)
{
    return kvt_codec_bench_layout(codec, NULL, page_bytes, seconds, ratio, comp_gbps, decomp_gbps);
}

int kvt_codec_bench_layout(int codec, const struct kvt_page_layout *L, size_t page_bytes,
                           double seconds, double *ratio, double *comp_gbps, double *decomp_gbps)
{
    struct kvt_codec *c;
    int rc = kvt_codec_new_layout(codec, 0, page_bytes, L, &c);
    if (rc)
        return rc;
    struct bench_bufs b = { malloc(page_bytes), malloc(kvt_codec_bound(c, page_bytes)),
                            malloc(page_bytes) };
    size_t stored = 0;
    double gbps[2] = { 0, 0 };
    rc = b.page && b.enc && b.dec ? 0 : -ENOMEM;
    if (rc == 0) {
        if (L && L->dtype)
            kvt_codec_fill_kv(b.page, page_bytes, L, 0x6b7674696572ull);
        else
            kvt_codec_fill_bf16(b.page, page_bytes, 0x6b7674696572ull);
        rc = bench_run(c, &b, page_bytes, seconds, &stored, gbps);
    }
    if (rc == 0) {
        if (ratio)
            *ratio = stored ? (double)page_bytes / (double)stored : 0.0;
        if (comp_gbps)
            *comp_gbps = gbps[0];
        if (decomp_gbps)
            *decomp_gbps = gbps[1];
    }
    bench_free(&b);
    kvt_codec_free(c);
    return rc;
}
