/*
 * make_seeds.c — the seed corpora of fuzz_layout, fuzz_index and fuzz_page,
 * cut from the files a real engine writes.
 *
 *   fuzz_make_seeds SCRATCH CORPUS
 *
 * For each codec (zstd, zstd-shuffle16, and the lossy fp8, int8 and int4
 * with a layout of 8 tokens of one K/V head of 64 in bf16, 2 KiB a page,
 * layer 0 kept in full precision) an engine with 4 KiB pages, two
 * pages of HBM and two of DRAM, persist on, puts eight pages of three kinds
 * (bf16 noise, zeros, incompressible words) into SCRATCH/<codec>, so that
 * most go down to SSD, and closes. Then, from the directory it left:
 * CORPUS/layout/<codec> is its KVTIER file; CORPUS/index/<codec>-v2 its
 * index entries in fuzz_index's record format (and -v1 the same entries as
 * kvtier's version 1 wrote them: the CRC of the stored bytes alone);
 * CORPUS/page/<codec>-<n> one stored page with its entry, in fuzz_page's
 * format. SCRATCH/<codec> is left for the caller to remove. Exit 0, or 1
 * with a message.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "io/codec.h"
#include "store/ssd_index.h"
#include "store/ssd_store.h"

#define PAGE 4096
#define FP 0x6b767469657231ull

void kvt_codec_fill_bf16(void *dst, size_t bytes, uint64_t seed); /* lab/codec_bench.c */

static int die(const char *what, int r)
{
    fprintf(stderr, "fuzz_make_seeds: %s: %s (%s)\n", what, kvt_strerror(r), kvt_last_error());
    exit(1);
}

static void fill(uint8_t *p, unsigned kind, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    switch (kind % 3) {
    case 0: kvt_codec_fill_bf16(p, PAGE, seed); break;
    case 1: memset(p, 0, PAGE); break;
    default:
        for (size_t i = 0; i < PAGE; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            p[i] = (uint8_t)x;
        }
    }
}

static void write_pages(const char *dir, int codec)
{
    kvt_config c;
    kvt_engine *e;
    kvt_config_init(&c);
    c.page_bytes = PAGE;
    c.hbm_bytes = 2 * PAGE;
    c.dram_bytes = 2 * PAGE;
    c.ssd_bytes = 64 * PAGE;
    c.ssd_dir = dir;
    c.device = KVT_DEVICE_HOST;
    c.codec = codec;
    if (kvt_codec_lossy(codec)) {
        c.kv_dtype = KVT_DTYPE_BF16;
        c.page_tokens = 8;
        c.kv_heads = 1;
        c.head_dim = 64;
        c.n_layers = 2;
        c.full_first_layers = 1;
    }
    c.persist = 1;
    c.fingerprint = FP;
    int r = kvt_open(&c, &e);
    if (r)
        die("kvt_open", r);
    uint8_t page[PAGE];
    for (uint32_t i = 0; i < 8; i++) {
        kvt_key k = { 7, i / 4, i % 4 };
        const void *src = page;
        fill(page, i, i + 1);
        if ((r = kvt_put(e, &k, 1, &src, 0)) != 0)
            die("kvt_put", r);
    }
    if ((r = kvt_flush(e)) != 0)
        die("kvt_flush", r);
    kvt_close(e);
}

static FILE *out_file(const char *corpus, const char *sub, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", corpus, sub);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", corpus, sub, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        die(p, -errno);
    return f;
}

static void put_le(FILE *f, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        fputc((int)(v >> (8 * i)) & 0xff, f);
}

struct cut {
    const char *dir, *corpus, *codec;
    size_t slot_bytes;
    uint32_t sps;
    FILE *v2, *v1;
    int n;
};

/* The stored bytes of entry v, read from its segment as the engine does. */
static uint8_t *stored_bytes(const struct cut *c, const struct kvt_ssd_entry *v)
{
    char p[1024];
    kvt_ssd_segment_path(c->dir, v->segment, p, sizeof p);
    int fd = open(p, O_RDONLY);
    uint8_t *b = malloc(v->stored_len ? v->stored_len : 1);
    if (fd < 0 || !b || pread(fd, b, v->stored_len, (off_t)v->offset) != (ssize_t)v->stored_len)
        die(p, -EIO);
    close(fd);
    return b;
}

static void index_record(FILE *f, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    fputc(16, f);
    fputc(sizeof(*v), f);
    uint64_t id = htobe64(k->id);
    uint32_t layer = htobe32(k->layer), index = htobe32(k->index);
    fwrite(&id, 8, 1, f);
    fwrite(&layer, 4, 1, f);
    fwrite(&index, 4, 1, f);
    fwrite(v, sizeof(*v), 1, f);
}

static int cut_entry(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    struct cut *c = ctx;
    uint8_t *b = stored_bytes(c, v);
    struct kvt_ssd_entry v1 = *v;
    v1.version = 1;
    v1.crc = kvt_crc32c(0, b, v->stored_len);
    index_record(c->v2, k, v);
    index_record(c->v1, k, &v1);

    char name[64];
    snprintf(name, sizeof name, "%s-%d", c->codec, c->n++);
    FILE *f = out_file(c->corpus, "page", name);
    fputc(0, f);            /* flags: the CRC is computed from the bytes */
    fputc(v->codec, f);
    put_le(f, k->id, 8);
    put_le(f, k->layer, 4);
    put_le(f, k->index, 4);
    put_le(f, v->fingerprint, 8);
    put_le(f, v->generation, 8);
    put_le(f, v->crc, 4);
    put_le(f, v->raw_len, 4);
    put_le(f, v->stored_len / 2, 4);    /* where the CRC check cuts the bytes */
    fwrite(b, 1, v->stored_len, f);
    fclose(f);
    free(b);
    return 0;
}

static void cut_seeds(const char *dir, const char *corpus, const char *codec)
{
    struct cut c = { dir, corpus, codec, 0, 0, NULL, NULL, 0 };
    size_t pb;
    char name[64], p[1024];
    int r = kvt_ssd_read_layout(dir, &pb, &c.slot_bytes, &c.sps);
    if (r)
        die("kvt_ssd_read_layout", r);
    snprintf(p, sizeof p, "%s/KVTIER", dir);
    FILE *in = fopen(p, "rb"), *lay = out_file(corpus, "layout", codec);
    int ch;
    while (in && (ch = fgetc(in)) != EOF)
        fputc(ch, lay);
    if (in)
        fclose(in);
    fclose(lay);

    struct kvt_index *ix;
    if ((r = kvt_index_open_readonly(dir, &ix)) != 0)
        die("kvt_index_open_readonly", r);
    snprintf(name, sizeof name, "%s-v2", codec);
    c.v2 = out_file(corpus, "index", name);
    snprintf(name, sizeof name, "%s-v1", codec);
    c.v1 = out_file(corpus, "index", name);
    fputc(0, c.v2);         /* version kind: 2 */
    fputc(1, c.v1);         /* version kind: 1 */
    put_le(c.v2, FP, 8);
    put_le(c.v1, FP, 8);
    if ((r = kvt_index_foreach(ix, cut_entry, &c)) != 0)
        die("kvt_index_foreach", r);
    kvt_index_close(ix);
    fclose(c.v2);
    fclose(c.v1);
    printf("%s: %d pages on SSD\n", codec, c.n);
}

/* CORPUS/quant/<codec>-<order>-{page,frame}: fuzz_quant's inputs, a page
 * to encode (mode 1) and the frame the encoder made of it (mode 0), for 8
 * tokens of two K/V heads of 64 (MLA: a latent of 64 and a RoPE key of 32)
 * in a 4 KiB page of bf16 noise. */
static void quant_seeds(const char *corpus, const char *name, int codec)
{
    static const char *const orders[6] = { "head", "token", "interleaved", "mla", "split",
                                           "single" };
    for (int o = 0; o < 6; o++) {
        struct kvt_page_layout L = { KVT_DTYPE_BF16, o, 8, o == KVT_KV_MLA ? 1 : 2, 64,
                                     o == KVT_KV_MLA ? 0 : 64, o == KVT_KV_MLA ? 32 : 0, 0, 0, 0 };
        uint8_t page[PAGE], frame[PAGE];
        kvt_codec_fill_bf16(page, PAGE, (uint64_t)o + 1);
        struct kvt_codec *c;
        size_t n = 0;
        int used, r = kvt_codec_new_layout(codec, 0, PAGE, &L, &c);
        if (r == 0)
            r = kvt_codec_encode_page(c, 0, page, PAGE, frame, PAGE, &n, &used);
        kvt_codec_free(c);
        if (r != 0)
            die("quant seed", r);
        uint16_t dims[6] = { (uint16_t)L.tokens, (uint16_t)L.kv_heads, (uint16_t)L.head_dim,
                             (uint16_t)L.v_head_dim, (uint16_t)L.rope_dim, 0 };
        for (int mode = 0; mode < 2; mode++) {
            char fn[64];
            snprintf(fn, sizeof fn, "%s-%s-%s", name, orders[o], mode ? "page" : "frame");
            FILE *f = out_file(corpus, "quant", fn);
            fputc(mode, f);
            fputc(codec - KVT_CODEC_FP8, f);
            fputc(L.dtype, f);
            fputc(o, f);
            for (int i = 0; i < 6; i++)
                put_le(f, dims[i], 2);
            put_le(f, PAGE, 4);
            fwrite(mode ? page : frame, 1, mode ? PAGE : n, f);
            fclose(f);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_make_seeds SCRATCH CORPUS\n");
        return 2;
    }
    static const struct {
        const char *name;
        int codec;
    } codecs[] = { { "zstd", KVT_CODEC_ZSTD }, { "shuffle16", KVT_CODEC_ZSTD_SHUFFLE16 },
                   { "fp8", KVT_CODEC_FP8 },   { "int8", KVT_CODEC_INT8 },
                   { "int4", KVT_CODEC_INT4 } };
    mkdir(argv[2], 0755);   /* an existing one is fine */
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], codecs[i].name);
        write_pages(dir, codecs[i].codec);
        cut_seeds(dir, argv[2], codecs[i].name);
        if (kvt_codec_lossy(codecs[i].codec))
            quant_seeds(argv[2], codecs[i].name, codecs[i].codec);
    }
    return 0;
}
