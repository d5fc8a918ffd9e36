/*
 * test_plan.c — `kvtier plan`'s arithmetic against sizes computed by hand:
 * the presets' KV bytes per token (GQA, MHA, MQA, MLA), the dtypes (fp8
 * halves, int4 quarters, odd int4 rows padded), per-sequence and total bytes,
 * pages, the split over the tiers, the decode-step bound, the bench file, and
 * the command's exit codes for bad arguments.
 *
 * The sizing tables the project started from (in Chinese; not part of this
 * repository, so what they say is quoted here) were checked entry by entry.
 * Their "GB"/"MB" are binary (GiB/MiB): Llama-3 8B at 1K tokens is
 * 134,217,728 B = 128 MiB, which the table writes "128 MB". Per token, FP16:
 *   Llama-3 8B      2*32*8*128*2  = 131,072 B (128 KiB)
 *   Llama-3 70B     2*80*8*128*2  = 327,680 B (320 KiB)
 *   Llama-3.1 405B  2*126*8*128*2 = 516,096 B (504 KiB)
 *   MHA 70B         2*80*64*128*2 = 2,621,440 B (2.5 MiB)
 * Right: the 8B row (128 MiB, 4, 16, 128 GiB), the 70B row (320 MiB, 10, 40,
 *   320 GiB), the MHA 70B row (2.5 GiB, 80, 320 GiB, 2.5 TiB), 405B at 1K
 *   (504 MiB) and 1M (504 GiB); "70B, batch 8, 32K context: 80 GB" (8 x 10
 *   GiB); seed 002's 7B example 2*2048*4096*2*32 = 1,073,741,824 B (1 GiB) and
 *   32 GiB at batch 32.
 * Wrong:
 *   - 405B at 32K: "16 GB"; it is 516,096 * 32,768 = 16,911,433,728 B =
 *     15.75 GiB (16.9 GB decimal: no reading of the unit gives 16).
 *   - 405B at 128K: "64 GB"; it is 516,096 * 131,072 = 67,645,734,912 B =
 *     63 GiB (67.6 GB).
 *   - Quick reference, "KV per token (70B GQA): 5 MB = 32 layers x 8 KV heads
 *     x 128 x 2 x 2B": the product written is 131,072 B = 128 KiB (and 32 layers
 *     is the 8B's depth); the 70B's 80 layers give 327,680 B = 320 KiB. 5 MB is
 *     neither.
 *   - Quick reference, "1M context KV (70B GQA): 5 GB"; it is 327,680 *
 *     1,048,576 = 320 GiB (the table's own row says so; even its 5 MB/token
 *     would give 5 TiB, not 5 GB).
 *   - Not arithmetic but checked: seed 002's per-layer formula "2 x seq x
 *     hidden x bytes" holds only for MHA (kv_heads x head_dim = hidden); for GQA
 *     it overstates by q_heads / kv_heads (4x for Llama-3 8B). And MLA's "5-10x
 *     smaller than MHA" undersells DeepSeek-V3's own shape: MHA over its 128
 *     heads (K 128 + 64 RoPE dims, V 128 dims) would store (192 + 128) x 128 x
 *     61 x 2 = 4,997,120 B/token against MLA's 70,272 B: 71x.
 */
#include <math.h>
#include <unistd.h>

#include "helpers.h"
#include "tools/presets.h"

int plan_main(int argc, char **argv);

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

static uint64_t per_token(const char *model, const char *dtype)
{
    const struct kvt_shape *s = kvt_preset_find(model);
    assert_non_null(s);
    uint64_t v = 0;
    assert_int_equal(kvt_kv_bytes_per_token(s, kvt_dtype_bits(dtype ? dtype : s->dtype), &v), 0);
    return v;
}

/* A plan of a preset at the default links, HBM unbounded unless caps given. */
static struct plan_in plan_of(const char *model, uint64_t context, uint64_t batch)
{
    const struct kvt_shape *s = kvt_preset_find(model);
    assert_non_null(s);
    struct plan_in in = { .shape = *s, .bits = kvt_dtype_bits(s->dtype), .context = context,
                          .batch = batch, .page_tokens = 16,
                          .cap = { PLAN_UNBOUNDED, 0, 0 }, .gbps = { 4000, 50, 6 } };
    return in;
}

/* ------------------------------------------------------------- presets */

static void test_presets(void **state)
{
    assert_non_null(kvt_preset_find("llama3-8b"));
    assert_ptr_equal(kvt_preset_find("DeepSeek-V3"), kvt_preset_find("deepseek-v3"));
    assert_null(kvt_preset_find("llama3-9b"));
    assert_null(kvt_preset_find(NULL));
    /* Every preset sizes, and its attn label agrees with its numbers. */
    size_t n = 0;
    for (const struct kvt_shape *s; (s = kvt_preset_at(n)); n++) {
        uint64_t v = 0;
        assert_int_equal(kvt_kv_bytes_per_token(s, kvt_dtype_bits(s->dtype), &v), 0);
        assert_true(v > 0);
        assert_string_equal(kvt_shape_attn(s), s->attn);
    }
    assert_true(n >= 8);
}

static void test_dtypes(void **state)
{
    assert_int_equal(kvt_dtype_bits("fp32"), 32);
    assert_int_equal(kvt_dtype_bits("fp16"), 16);
    assert_int_equal(kvt_dtype_bits("BF16"), 16);
    assert_int_equal(kvt_dtype_bits("fp8"), 8);
    assert_int_equal(kvt_dtype_bits("int8"), 8);
    assert_int_equal(kvt_dtype_bits("int4"), 4);
    assert_int_equal(kvt_dtype_bits("fp6"), 0);
    assert_int_equal(kvt_dtype_bits(NULL), 0);
}

/* ------------------------------------------------------------- bytes per token */

static void test_gqa_presets(void **state)
{
    /* 2 (K, V) x layers x kv heads x head dim x 2 bytes (bf16) */
    assert_int_equal(per_token("llama3-8b", NULL), 2 * 32 * 8 * 128 * 2);      /* 131072 */
    assert_int_equal(per_token("llama3-8b", NULL), 128 * KiB);
    assert_int_equal(per_token("llama3-70b", NULL), 2 * 80 * 8 * 128 * 2);     /* 327680 */
    assert_int_equal(per_token("llama3-70b", NULL), 327680);
    assert_int_equal(per_token("llama3.1-405b", NULL), 2 * 126 * 8 * 128 * 2); /* 516096 */
    assert_int_equal(per_token("qwen2.5-7b", NULL), 2 * 28 * 4 * 128 * 2);     /* 57344 */
    assert_int_equal(per_token("mistral-7b", NULL), 2 * 32 * 8 * 128 * 2);     /* 131072 */
    /* MQA: one K/V head of 64 dims */
    assert_int_equal(per_token("falcon-7b", NULL), 2 * 32 * 1 * 64 * 2);       /* 8192 */
}

static void test_mha_llama2(void **state)
{
    /* 2 x 32 layers x 32 kv heads x 128 x 2 bytes (fp16) = 512 KiB */
    assert_int_equal(per_token("llama2-7b", NULL), 2 * 32 * 32 * 128 * 2);
    assert_int_equal(per_token("llama2-7b", NULL), 524288);
    /* seed 002's example: 2048 tokens of a 7B MHA model = 1 GiB */
    struct plan_in in = plan_of("llama2-7b", 2048, 32);
    struct plan_out o;
    assert_int_equal(plan_compute(&in, &o), 0);
    assert_int_equal(o.per_seq, 1 * GiB);
    assert_int_equal(o.total, 32 * GiB);
}

static void test_mla_deepseek(void **state)
{
    /* (kv_lora_rank 512 + rope 64) x 61 layers x 2 bytes: one row, no K/V pair */
    assert_int_equal(per_token("deepseek-v3", NULL), (512 + 64) * 61 * 2); /* 70272 */
    assert_int_equal(per_token("deepseek-v3", NULL), 70272);
    assert_int_equal(per_token("deepseek-v3", "fp8"), (512 + 64) * 61 * 1); /* 35136 */
    assert_int_equal(per_token("deepseek-v3", "int4"), (512 + 64) * 61 / 2); /* 17568 */
    uint64_t layer = 0;
    assert_int_equal(kvt_kv_bytes_per_token_layer(kvt_preset_find("deepseek-v3"), 16, &layer), 0);
    assert_int_equal(layer, (512 + 64) * 2); /* 1152 */
}

static void test_quantised(void **state)
{
    uint64_t bf16 = per_token("llama3-8b", "bf16");
    assert_int_equal(per_token("llama3-8b", "fp16"), bf16);
    assert_int_equal(per_token("llama3-8b", "fp32"), bf16 * 2);   /* 262144 */
    assert_int_equal(per_token("llama3-8b", "fp8"), bf16 / 2);    /* 65536 */
    assert_int_equal(per_token("llama3-8b", "int8"), bf16 / 2);
    assert_int_equal(per_token("llama3-8b", "int4"), bf16 / 4);   /* 32768 */
    assert_int_equal(per_token("llama3-70b", "int4"), 327680 / 4); /* 81920 */
}

/* int4 packs two elements a byte, but a row (one token's K, or V, or MLA
 * latent, in one layer) never shares a byte with the next: an odd row is
 * rounded up to whole bytes, once per row. */
static void test_int4_odd_rows(void **state)
{
    struct kvt_shape gqa = { .name = "odd", .layers = 3, .kv_heads = 1, .head_dim = 5 };
    uint64_t v = 0;
    /* row: 5 elements x 4 bits = 20 bits -> 3 bytes; 2 rows x 3 layers x 3 = 18 */
    assert_int_equal(kvt_kv_bytes_per_token(&gqa, 4, &v), 0);
    assert_int_equal(v, 2 * 3 * 3);
    /* without padding it would be 2 x 3 x 5 x 0.5 = 15 */
    assert_true(v > 15);
    /* fp8 of the same shape is exact: 2 x 3 x 5 x 1 = 30 */
    assert_int_equal(kvt_kv_bytes_per_token(&gqa, 8, &v), 0);
    assert_int_equal(v, 30);
    /* MLA: latent 3 + rope 2 = 5 elements -> 3 bytes a row, 1 row x 3 layers = 9 */
    struct kvt_shape mla = { .name = "odd-mla", .layers = 3, .kv_lora_rank = 3, .rope_dim = 2 };
    assert_int_equal(kvt_kv_bytes_per_token(&mla, 4, &v), 0);
    assert_int_equal(v, 3 * 3);
    /* even rows lose nothing: 2 x 3 x (1 x 6 x 0.5 = 3) = 18 */
    gqa.head_dim = 6;
    assert_int_equal(kvt_kv_bytes_per_token(&gqa, 4, &v), 0);
    assert_int_equal(v, 18);
}

static void test_bad_shapes(void **state)
{
    uint64_t v = 0;
    struct kvt_shape s = { .name = "x", .layers = 0, .kv_heads = 8, .head_dim = 128 };
    assert_int_equal(kvt_kv_bytes_per_token(&s, 16, &v), -EINVAL);
    s.layers = 32;
    s.head_dim = 0;
    assert_int_equal(kvt_kv_bytes_per_token(&s, 16, &v), -EINVAL);
    s.head_dim = 128;
    assert_int_equal(kvt_kv_bytes_per_token(&s, 6, &v), -EINVAL);
    assert_int_equal(kvt_kv_bytes_per_token(&s, 0, &v), -EINVAL);
    /* 2 x 2^32 x 2^32 x 2^32 x 4 bytes is far past 2^64 */
    s = (struct kvt_shape){ .name = "huge", .layers = UINT32_MAX, .kv_heads = UINT32_MAX,
                            .head_dim = UINT32_MAX };
    assert_int_equal(kvt_kv_bytes_per_token(&s, 32, &v), -EOVERFLOW);
}

/* ------------------------------------------------------------- plan */

static void test_sequence_batch_pages(void **state)
{
    /* llama3-8b, 32k context: 131072 B x 32768 tokens = 4 GiB per sequence */
    struct plan_in in = plan_of("llama3-8b", 32 * 1024, 4);
    struct plan_out o;
    assert_int_equal(plan_compute(&in, &o), 0);
    assert_int_equal(o.per_token, 131072);
    assert_int_equal(o.per_token_layer, 2 * 8 * 128 * 2);          /* 4096 */
    assert_int_equal(o.per_seq, 131072ull * 32768);                 /* 4 GiB */
    assert_int_equal(o.per_seq, 4 * GiB);
    assert_int_equal(o.per_layer_seq, 4096ull * 32768);             /* 128 MiB */
    assert_int_equal(o.total, 4 * 4 * GiB);                         /* batch multiplies */
    assert_int_equal(o.page_bytes_layer, 16 * 4096);                /* 64 KiB */
    assert_int_equal(o.page_bytes_all, 16 * 131072);                /* 2 MiB */
    assert_int_equal(o.pages_per_layer, 32768 / 16);                /* 2048 */
    assert_int_equal(o.pages_per_seq_layer_first, 2048 * 32);       /* 65536 */
    /* 1000 tokens need 62.5 pages of 16: the tail page counts */
    in.context = 1000;
    assert_int_equal(plan_compute(&in, &o), 0);
    assert_int_equal(o.pages_per_layer, 63);
    /* llama3-70b, 128k, batch 8 = 327680 x 131072 x 8 = 320 GiB */
    in = plan_of("llama3-70b", 128 * 1024, 8);
    assert_int_equal(plan_compute(&in, &o), 0);
    assert_int_equal(o.per_seq, 40 * GiB);
    assert_int_equal(o.total, 320 * GiB);
}

static void test_split_edges(void **state)
{
    uint64_t split[PLAN_TIERS], un;
    const uint64_t pg = 64 * KiB;
    /* fits HBM exactly: nothing below */
    plan_split(8 * GiB, pg, (uint64_t[]){ 8 * GiB, 16 * GiB, 0 }, split, &un);
    assert_int_equal(split[PLAN_HBM], 8 * GiB);
    assert_int_equal(split[PLAN_DRAM] + split[PLAN_SSD] + un, 0);
    /* HBM first, DRAM next: 16 GiB over 8 + 16 */
    plan_split(16 * GiB, pg, (uint64_t[]){ 8 * GiB, 16 * GiB, 0 }, split, &un);
    assert_int_equal(split[PLAN_HBM], 8 * GiB);
    assert_int_equal(split[PLAN_DRAM], 8 * GiB);
    assert_int_equal(split[PLAN_SSD] + un, 0);
    /* a capacity of 2.5 pages holds 2: the rest goes down a tier */
    plan_split(5 * pg, pg, (uint64_t[]){ 2 * pg + pg / 2, 2 * pg + pg / 2, 4 * pg }, split, &un);
    assert_int_equal(split[PLAN_HBM], 2 * pg);
    assert_int_equal(split[PLAN_DRAM], 2 * pg);
    assert_int_equal(split[PLAN_SSD], 1 * pg);
    assert_int_equal(un, 0);
    /* too little everywhere: what is left is unplaced, and the parts sum */
    plan_split(10 * pg, pg, (uint64_t[]){ pg, 2 * pg, 3 * pg }, split, &un);
    assert_int_equal(un, 10 * pg - (1 + 2 + 3) * pg);
    /* a capacity under one page holds nothing */
    plan_split(pg, pg, (uint64_t[]){ pg - 1, 0, 0 }, split, &un);
    assert_int_equal(split[PLAN_HBM], 0);
    assert_int_equal(un, pg);
    /* unbounded HBM takes everything; the last piece may be part of a page */
    plan_split(3 * pg + 5, pg, (uint64_t[]){ PLAN_UNBOUNDED, 0, 0 }, split, &un);
    assert_int_equal(split[PLAN_HBM], 3 * pg + 5);
    assert_int_equal(un, 0);
    plan_split(3 * pg + 5, pg, (uint64_t[]){ 2 * pg, 8 * pg, 0 }, split, &un);
    assert_int_equal(split[PLAN_DRAM], pg + 5);
    /* nothing to place */
    plan_split(0, pg, (uint64_t[]){ 0, 0, 0 }, split, &un);
    assert_int_equal(split[PLAN_HBM] + split[PLAN_DRAM] + split[PLAN_SSD] + un, 0);
}

static void test_bound(void **state)
{
    double term[PLAN_TIERS], gbps[PLAN_TIERS] = { 4000, 50, 6 };
    int by = -1;
    /* all in HBM, 40 GB: 40e9 / 4000e9 = 10 ms */
    double b = plan_bound((uint64_t[]){ 40000000000ull, 0, 0 }, gbps, term, &by);
    assert_true(fabs(b - 0.010) < 1e-12);
    assert_int_equal(by, PLAN_HBM);
    /* 8 GiB HBM + 8 GiB DRAM: HBM reads all 16 GiB (2^34 / 4e12 s), the link
     * carries 8 GiB: 2^33 / 50e9 = 0.17179869184 s, the larger */
    b = plan_bound((uint64_t[]){ 8 * GiB, 8 * GiB, 0 }, gbps, term, &by);
    assert_true(fabs(term[PLAN_HBM] - 17179869184.0 / 4e12) < 1e-12);
    assert_true(fabs(b - 0.17179869184) < 1e-12);
    assert_int_equal(by, PLAN_DRAM);
    assert_true(term[PLAN_SSD] == 0);
    /* 6 GB on SSD at 6 GB/s = 1 s, over the 50 GB/s link 0.12 s: SSD bound */
    b = plan_bound((uint64_t[]){ 0, 0, 6000000000ull }, gbps, term, &by);
    assert_true(fabs(b - 1.0) < 1e-12);
    assert_true(fabs(term[PLAN_DRAM] - 0.12) < 1e-12);
    assert_int_equal(by, PLAN_SSD);
    /* DRAM and SSD share the DRAM->HBM link: 30 GB + 30 GB at 50 GB/s is
     * 1.2 s, although each alone would take 0.6 s and the SSD (100 GB/s) 0.3 s */
    double fast_ssd[PLAN_TIERS] = { 4000, 50, 100 };
    b = plan_bound((uint64_t[]){ 0, 30000000000ull, 30000000000ull }, fast_ssd, term, &by);
    assert_true(fabs(b - 1.2) < 1e-12);
    assert_int_equal(by, PLAN_DRAM);
}

static void test_compute_bound_and_fit(void **state)
{
    /* the CLI test's case: llama3-8b, 32k, batch 4 = 16 GiB over 8G HBM + 16G DRAM */
    struct plan_in in = plan_of("llama3-8b", 32768, 4);
    in.cap[PLAN_HBM] = 8 * GiB;
    in.cap[PLAN_DRAM] = 16 * GiB;
    struct plan_out o;
    assert_int_equal(plan_compute(&in, &o), 0);
    assert_int_equal(o.split[PLAN_HBM], 8 * GiB);
    assert_int_equal(o.split[PLAN_DRAM], 8 * GiB);
    assert_int_equal(o.unplaced, 0);
    assert_true(fabs(o.bound_s - 8.0 * GiB / 50e9) < 1e-12);
    /* one token per sequence per step: 4 / 0.17179869184 s = 23.28 tokens/s */
    assert_true(fabs(o.tokens_per_s - 4 / (8.0 * GiB / 50e9)) < 1e-9);
    /* 8 GiB does not fit: no bound */
    in.cap[PLAN_DRAM] = 8 * GiB - 1;
    assert_int_equal(plan_compute(&in, &o), 0);
    assert_int_equal(o.split[PLAN_DRAM], 8 * GiB - 64 * KiB); /* whole 64 KiB pages */
    assert_int_equal(o.unplaced, 64 * KiB);
    assert_true(o.bound_s == 0 && o.tokens_per_s == 0);
}

static void test_compute_rejects(void **state)
{
    struct plan_out o;
    struct plan_in in = plan_of("llama3-8b", 0, 1);
    assert_int_equal(plan_compute(&in, &o), -EINVAL); /* zero context */
    in = plan_of("llama3-8b", 1024, 0);
    assert_int_equal(plan_compute(&in, &o), -EINVAL); /* zero batch */
    in = plan_of("llama3-8b", 1024, 1);
    in.page_tokens = 0;
    assert_int_equal(plan_compute(&in, &o), -EINVAL);
    in = plan_of("llama3-8b", 1024, 1);
    in.gbps[PLAN_SSD] = 0;
    assert_int_equal(plan_compute(&in, &o), -EINVAL);
    in.gbps[PLAN_SSD] = NAN;
    assert_int_equal(plan_compute(&in, &o), -EINVAL);
    /* 128 KiB x 2^32 tokens x 2^32 sequences passes 2^64 */
    in = plan_of("llama3-8b", UINT32_MAX, UINT32_MAX);
    assert_int_equal(plan_compute(&in, &o), -EOVERFLOW);
}

/* ------------------------------------------------------------- bench file */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_read_bench(void **state)
{
    char path[] = "/tmp/kvt_plan_benchXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    double h2d = -1, ssd = -1;
    write_file(path, "{\"links\": [], \"h2d_gbps\" : 24.5,\n \"ssd_read_gbps\": 3.25}\n");
    assert_int_equal(plan_read_bench(path, &h2d, &ssd), 3);
    assert_true(h2d == 24.5 && ssd == 3.25);
    /* a key missing or not a positive number leaves its value alone */
    h2d = ssd = -1;
    write_file(path, "{\"h2d_gbps\": 0, \"ssd_read_gbps\": 7}");
    assert_int_equal(plan_read_bench(path, &h2d, &ssd), 2);
    assert_true(h2d == -1 && ssd == 7);
    write_file(path, "not json");
    assert_int_equal(plan_read_bench(path, &h2d, &ssd), 0);
    unlink(path);
    assert_int_equal(plan_read_bench(path, &h2d, &ssd), -ENOENT);
}

/* ------------------------------------------------------------- the command */

static int run_plan(const char *args)
{
    char buf[512], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "plan %s", args);
    for (char *tok = strtok(buf, " "); tok && argc < 31; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    fflush(stdout);
    return plan_main(argc, argv);
}

static void test_command_errors(void **state)
{
    setenv("XDG_CACHE_HOME", "/nonexistent-kvtier-test", 1); /* no bench file */
    assert_int_equal(run_plan("--model llama3-9b --context 1k"), 2);    /* unknown model */
    assert_int_equal(run_plan("--context 1k"), 2);                      /* missing shape */
    assert_int_equal(run_plan("--layers 4 --kv-heads 2 --context 1k"), 2); /* no head dim */
    assert_int_equal(run_plan("--layers 4 --kv-heads 2 --kv-lora-rank 8 --context 1k"), 2);
    assert_int_equal(run_plan("--model deepseek-v3 --head-dim 64 --context 1k"), 2); /* mixed */
    assert_int_equal(run_plan("--model llama3-8b --kv-lora-rank 8 --context 1k"), 2);
    assert_int_equal(run_plan("--model llama3-8b --context 0"), 2);      /* zero context */
    assert_int_equal(run_plan("--model llama3-8b"), 2);                  /* no context */
    assert_int_equal(run_plan("--model llama3-8b --context 1k --dtype fp6"), 2);
    assert_int_equal(run_plan("--model llama3-8b --context 1k --hbm 8Q"), 2);
    assert_int_equal(run_plan("--model llama3-8b --context 1k --h2d-gbps 0"), 2);
    assert_int_equal(run_plan("--model llama3-8b --context 1k --bogus"), 2);
    assert_int_equal(run_plan("--model llama3-8b --context"), 2);
    /* and good ones still run after all those (getopt is reset per call) */
    assert_int_equal(run_plan("--model llama3-8b --context 1k --batch 2 --hbm 64M --dram 1G"), 0);
    assert_int_equal(run_plan("--layers 2 --kv-lora-rank 8 --rope-dim 0 --context 4 --dtype int4"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_gqa_presets),
        cmocka_unit_test(test_mha_llama2),
        cmocka_unit_test(test_mla_deepseek),
        cmocka_unit_test(test_quantised),
        cmocka_unit_test(test_int4_odd_rows),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_sequence_batch_pages),
        cmocka_unit_test(test_split_edges),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_compute_bound_and_fit),
        cmocka_unit_test(test_compute_rejects),
        cmocka_unit_test(test_read_bench),
        cmocka_unit_test(test_command_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
