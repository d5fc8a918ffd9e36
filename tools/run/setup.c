/*
 * setup.c — `kvtier run` from options to results (run_exec): the
 * attention's shape, the tiers sized, the spill directory claimed, the
 * engine configured (its own check first) and opened; then links.c and
 * decode.c do the work.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "api/api.h"
#include "tools/cli.h"
#include "tools/fsck/spill.h"
#include "tools/run/run_priv.h"

/* Pages per chunk of the CPU path's pipeline: --chunk-pages, or ~4 MiB (at
 * least one page). Smaller chunks overlap more but pay a pool hand-off and
 * an acquire each (~20-40 us). */
uint32_t run_chunk_pages(const struct run_ctx *x)
{
    if (x->o->chunk_pages)
        return x->o->chunk_pages;
    size_t n = ((size_t)4 << 20) / x->pb;
    return n ? (uint32_t)n : 1;
}

static uint64_t round_pages(uint64_t bytes, size_t pb) { return bytes / pb * pb; }

/* The capacities left RUN_AUTO: a quarter of the KV in HBM, two thirds of
 * the rest in DRAM (twice HBM, as hosts have several times more DRAM than
 * their GPUs have HBM), so that a quarter of the KV overflows into SSD (the
 * decode then reads over half of the KV from SSD every step). HBM holds at least the group
 * being computed and room beside it for the next: on a GPU, whose kernel
 * takes a group whole, a second group; on the CPU, which streams a group
 * through in chunks released as they are computed, two chunks. */
static int run_size(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    /* With --window the KV is what the window holds: the pages behind it
     * are dropped as it moves on. */
    uint64_t kv, group = (uint64_t)x->pages_live * x->pb; /* < 2^32 pages of < 2^32 bytes */
    /* A quarter of 2^64 at most: the SSD's default, twice the KV, must fit too. */
    if (__builtin_mul_overflow(group, (uint64_t)o->batch * x->layers, &kv) || kv > UINT64_MAX / 4) {
        cli_error("run", 2, "--batch %u x %u layers x --context %llu: the KV does not fit 64 bits",
                  o->batch, x->layers, (unsigned long long)o->context);
        return -EINVAL;
    }
    r->kv_bytes = kv;
    r->page_bytes = x->pb;
    r->pages = kv / x->pb;
    uint64_t hbm = o->hbm, dram = o->dram, ssd = o->ssd;
    if (hbm == RUN_AUTO) {
        uint64_t beside = o->device == KVT_DEVICE_HOST ? 2 * (uint64_t)run_chunk_pages(x) * x->pb : group;
        if (beside > group)
            beside = group;
        hbm = round_pages(kv / 4, x->pb);
        if (hbm < group + beside + 4 * x->pb)
            hbm = group + beside + 4 * x->pb;
    }
    if (dram == RUN_AUTO) {
        dram = kv > hbm ? round_pages((kv - hbm) / 3 * 2, x->pb) : 0;
        if (dram < group + 4 * x->pb)
            dram = group + 4 * x->pb;
    }
    if (ssd == RUN_AUTO)
        ssd = 2 * kv + 64 * x->pb;
    if (hbm < group + 2 * x->pb) {
        cli_error("run", 2,
                  "--hbm %llu bytes is too small: one (sequence, layer) needs %u pages of %zu "
                  "bytes, plus room to append",
                  (unsigned long long)hbm, x->pages_live, x->pb);
        return -EINVAL;
    }
    /* Pages acquired from SSD pass through DRAM, all of one acquire at once:
     * with fewer DRAM slots than that, kvt_acquire waits for ever. */
    uint64_t acq = o->device == KVT_DEVICE_HOST ? run_chunk_pages(x) : x->pages_live;
    acq = acq < x->pages_live ? acq : x->pages_live;
    if (ssd && dram / x->pb < acq) {
        cli_error("run", 2,
                  "--dram %llu bytes is too small: pages read from --ssd pass through DRAM, %llu "
                  "pages of %zu bytes at a time (--chunk-pages)",
                  (unsigned long long)dram, (unsigned long long)acq, x->pb);
        return -EINVAL;
    }
    uint64_t total;
    bool past_2_64 = __builtin_add_overflow(hbm, dram, &total) ||
                     __builtin_add_overflow(total, ssd, &total);
    if (!past_2_64 && total < kv + 2 * x->pb) {
        cli_error("run", 2, "--hbm + --dram + --ssd (%llu bytes) cannot hold the KV (%llu bytes)",
                  (unsigned long long)total, (unsigned long long)kv);
        return -EINVAL;
    }
    r->cap[0] = hbm;
    r->cap[1] = dram;
    r->cap[2] = ssd;
    return 0;
}

static void ctx_free(struct run_ctx *x)
{
    kvt_close(x->e);
    x->e = NULL;
    free(x->stage);
    run_gpu_free(x);
    feed_free(&x->feed);
    free(x->keys);
    free(x->ptrs);
    free(x->keys2);
    free(x->ptrs2);
    free(x->hashes);
    run_err_free(x);
    free(x->out_bf16);
    trace_free(&x->trace);
    /* The engine's files by name and the directory, never a recursive
     * removal: anything else found there stays. */
    if (x->tmpdir[0] && kvt_spill_remove(x->tmpdir) < 0)
        cli_error("run", 1, "%s", kvt_last_error());
    if (x->discard && spill_discard(x->ssd_dir) < 0)
        cli_error("run", 1, "%s", kvt_last_error());
}

static int ctx_alloc(struct run_ctx *x)
{
    const struct run_opts *o = x->o;
    size_t scratch = attn_scratch_bytes(&x->sh), s16 = attn_scratch_bytes(&x->sh_bf16);
    int rc = feed_init(&x->feed, &x->sh, o->threads, (int)o->nice, o->pin,
                       scratch > s16 ? scratch : s16);
    if (rc)
        return rc;
    if (attn_quantised(&x->sh) &&
        !(x->out_bf16 = malloc((size_t)x->sh.q_heads * attn_vdim(&x->sh) * sizeof(float))))
        return -ENOMEM;
    x->keys = malloc(x->pages_max * sizeof(kvt_key));
    x->ptrs = malloc(x->pages_max * sizeof(void *));
    x->keys2 = malloc(x->pages_max * sizeof(kvt_key));
    x->ptrs2 = malloc(x->pages_max * sizeof(void *));
    x->hashes = malloc((size_t)o->tokens * x->layers * o->batch * x->sh.q_heads * sizeof(uint64_t));
    x->stage = malloc(x->pb);
    if (!x->keys || !x->ptrs || !x->keys2 || !x->ptrs2 || !x->hashes || !x->stage)
        return -ENOMEM;
    return 0;
}

/* kvt_config.on_transfer: each completed batch becomes a span on its link's
 * track (only with --trace). */
static void on_transfer(void *arg, const kvt_transfer_event *ev)
{
    static const char *const names[TRACE_LINKS] = { "dram->hbm", "hbm->dram", "ssd->dram",
                                                    "dram->ssd" };
    struct run_ctx *x = arg;
    if (ev->kind >= 0 && ev->kind < TRACE_LINKS)
        trace_link(&x->trace, ev->kind, names[ev->kind], (double)ev->start_ns * 1e-9,
                   (double)ev->end_ns * 1e-9, ev->pages, (double)ev->bytes);
}

/* Where the attention runs: on the CPU over host pages, or with the CUDA
 * back-end on the GPU over its device pages (gpu.c). */
static int open_attention(struct run_ctx *x)
{
    if (!strcmp(kvt_device_name(x->e), "host"))
        return 0;
    return run_gpu_open(x);
}

/* The spill directory, made if missing, must be one the engine will take
 * (empty, or kvtier's) before anything is written in it, and hold no
 * persisted page the engine (persist off) would wipe, unless
 * --overwrite-ssd-dir: else an argument error naming what is in it, and
 * nothing touched. */
static int claim_spill_dir(const char *path, bool overwrite)
{
    int dfd;
    bool ours;
    int rc = kvt_spill_opendir(path, true, &dfd);
    if (rc < 0) {
        cli_error("run", 1, "--ssd-dir: %s", kvt_last_error());
        return rc;
    }
    rc = kvt_spill_claim(dfd, path, &ours);
    close(dfd);
    if (rc < 0) {
        cli_error("run", 2, "--ssd-dir: %s", kvt_last_error());
        return -EINVAL;
    }
    if (!overwrite && spill_refuse_store("run", "--ssd-dir", path, "--overwrite-ssd-dir"))
        return -EINVAL;
    return 0;
}

/* The engine's configuration for the capacities run_size() chose. */
static void engine_config(struct run_ctx *x, const struct run_result *r, kvt_config *c)
{
    const struct run_opts *o = x->o;
    kvt_config_init(c);
    c->page_bytes = x->pb;
    c->hbm_bytes = r->cap[0];
    c->dram_bytes = r->cap[1];
    c->ssd_bytes = r->cap[2];
    c->ssd_dir = r->cap[2] ? x->ssd_dir : NULL;
    c->device = o->device;
    c->policy = o->policy;
    c->codec = o->codec;
    c->host_link_gbps = o->link_gbps;
    /* The page layout (attention.h), which a lossy codec needs, one layer
     * a page: head-major K then V, or MLA's one row per token (the latent,
     * then the RoPE key; no V rows). Only bf16 pages have one the engine
     * knows. */
    c->kv_dtype = x->sh.dtype == ATTN_BF16 ? KVT_DTYPE_BF16 : 0;
    c->kv_order = x->sh.mla ? KVT_KV_MLA : KVT_KV_HEAD_MAJOR;
    c->page_tokens = x->sh.page_tokens;
    c->kv_heads = x->sh.kv_heads;
    c->head_dim = x->sh.mla ? x->sh.v_dim : x->sh.head_dim;
    c->rope_dim = x->sh.mla ? x->sh.head_dim - x->sh.v_dim : 0;
    c->n_layers = x->layers;
    c->full_first_layers = c->full_last_layers = o->full_layers;
    if (o->trace_path) {
        c->on_transfer = on_transfer;
        c->on_transfer_arg = x;
    }
    c->fingerprint = 0x6b767472756e0000ull ^ ((uint64_t)x->sh.dtype << 56) ^
                     ((uint64_t)x->sh.mla << 48) ^ ((uint64_t)x->sh.kv_heads << 32) ^
                     ((uint64_t)x->sh.head_dim << 16) ^ x->sh.page_tokens;
}

static const struct cli_field run_fields[] = {
    { "page_bytes", "page-tokens" }, { "hbm_bytes", "hbm" },   { "dram_bytes", "dram" },
    { "ssd_bytes", "ssd" },          { "ssd_dir", "ssd-dir" }, { "device", "device" },
    { "policy", "policy" },          { "codec", "codec" },     { "host_link_gbps", "link-gbps" },
    { "full_first_layers", "full-layers" },
    { NULL, NULL },
};

/* The engine's own check of the configuration, before anything is made on
 * disk: a value it would refuse is an argument error. The temporary spill
 * directory has no name yet; a stand-in takes its place. */
static int check_engine_config(struct run_ctx *x, const struct run_result *r)
{
    kvt_config c;
    engine_config(x, r, &c);
    if (c.ssd_bytes && !c.ssd_dir)
        c.ssd_dir = "(temporary)";
    return cli_config_check("run", &c, run_fields);
}

static int open_engine(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    kvt_config c;
    engine_config(x, r, &c);
    int rc = o->hooks ? kvt_open_with_hooks(&c, o->hooks, &x->e) : kvt_open(&c, &x->e);
    if (rc) {
        cli_error("run", 1, "cannot open the engine: %s (%s)", kvt_strerror(rc), kvt_last_error());
        return rc;
    }
    x->discard = c.ssd_bytes && !x->tmpdir[0];
    if ((rc = open_attention(x)))
        return rc;
    uint64_t *ids = malloc(o->batch * sizeof(uint64_t));
    if (!ids)
        return -ENOMEM;
    for (uint32_t s = 0; s < o->batch; s++)
        ids[s] = run_seq_id(s);
    kvt_schedule sc = { ids, o->batch, x->layers, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    rc = kvt_set_schedule(x->e, &sc);
    free(ids);
    return rc;
}

/* The attention's shape for the model: per-head K and V, or MLA's absorbed
 * form (docs/run.md#mla): one row per token, the latent then the RoPE key,
 * shared by every q head as MQA's one K/V head is; the query is the
 * absorbed one (W_UK folded in: latent + rope wide), the output the latent
 * one (W_UV is applied after the attention, outside it). */
static struct attn_shape model_shape(const struct run_opts *o)
{
    const struct kvt_shape *m = o->model;
    if (!kvt_shape_is_mla(m))
        return (struct attn_shape){ m->q_heads, m->kv_heads, m->head_dim, o->page_tokens,
                                    o->dtype, 0, 0, o->window, 0 };
    uint32_t qk = m->qk_nope_dim + m->rope_dim; /* the head's width before absorption */
    return (struct attn_shape){ m->q_heads, 1, m->kv_lora_rank + m->rope_dim, o->page_tokens,
                                o->dtype, 1, m->kv_lora_rank, o->window,
                                (float)(1.0 / sqrt((double)(qk ? qk : m->kv_lora_rank + m->rope_dim))) };
}

/* The attention's shape and the page size from the options; -EINVAL after
 * a message for a model the kernels cannot run. */
static int ctx_shape(struct run_ctx *x)
{
    const struct run_opts *o = x->o;
    if (!o->model) {
        cli_error("run", 2, "--model: no model shape");
        return -EINVAL;
    }
    if (run_lossy(o) && o->dtype != ATTN_BF16) {
        cli_error("run", 2, "--codec %s quantises bf16 KV on its way to SSD, not --dtype %s "
                  "pages", run_codec_name[o->codec], run_dtype_name[o->dtype]);
        return -EINVAL;
    }
    x->layers = o->layers && o->layers < o->model->layers ? o->layers : o->model->layers;
    x->sh = model_shape(o);
    x->sh_bf16 = x->sh;
    x->sh_bf16.dtype = ATTN_BF16;
    if (attn_shape_check(&x->sh)) {
        cli_error("run", 2,
                  "--model %s: the kernel needs head_dim a multiple of 8 (<= %u; of %u for a "
                  "quantised --dtype) and at most %u q heads",
                  o->model->name, ATTN_MAX_HEAD_DIM, ATTN_QGROUP, ATTN_MAX_Q_HEADS);
        return -EINVAL;
    }
    x->pb = (attn_page_bytes(&x->sh) + 4095) / 4096 * 4096;
    uint64_t final_tokens = o->context + o->tokens;
    if (final_tokens > UINT32_MAX - 1) {
        cli_error("run", 2, "--context + --tokens is too large");
        return -EINVAL;
    }
    x->pages_max = (uint32_t)((final_tokens + o->page_tokens - 1) / o->page_tokens);
    /* A window of N tokens spans at most N / page_tokens pages, rounded up,
     * and one more where it starts inside a page. */
    uint64_t win = o->window ? ((uint64_t)o->window + o->page_tokens - 1) / o->page_tokens + 1 : UINT64_MAX;
    x->pages_live = win < x->pages_max ? (uint32_t)win : x->pages_max;
    x->ssd_dir = o->ssd_dir;
    return 0;
}

/* With an SSD tier: the spill directory (a temporary one unless --ssd-dir),
 * claimed, and the disk measured raw in it before the engine opens it. */
static int spill_prepare(struct run_ctx *x, struct run_result *r)
{
    if (!r->cap[2])
        return 0;
    if (!x->ssd_dir) {
        const char *tmp = getenv("TMPDIR");
        snprintf(x->tmpdir, sizeof x->tmpdir, "%s/kvtier-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(x->tmpdir)) {
            int rc = -errno;
            cli_error("run", 1, "cannot make a spill directory %s: %s", x->tmpdir, strerror(-rc));
            x->tmpdir[0] = 0;
            return rc;
        }
        x->ssd_dir = x->tmpdir;
    }
    int rc = claim_spill_dir(x->ssd_dir, x->tmpdir[0] || x->o->overwrite_ssd_dir);
    if (rc == 0)
        run_raw_ssd(x->ssd_dir, x->pb, r);
    return rc;
}

/* A failed phase, with kvt_last_error() when this thread has one (a worker
 * thread's is its own: "()" said nothing). */
static void run_said_error(const char *phase, int rc)
{
    const char *why = kvt_last_error();
    if (why && why[0])
        cli_error("run", 1, "%s: %s (%s)", phase, kvt_strerror(rc), why);
    else
        cli_error("run", 1, "%s: %s", phase, kvt_strerror(rc));
}

/* The pages the engine holds at the end, and those it should: every page
 * of each (sequence, layer) the window has not left behind. */
static void held_pages(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    kvt_stats st;
    uint32_t n = (uint32_t)(o->context + o->tokens);
    kvt_get_stats_sized(x->e, &st, sizeof st);
    r->pages_held = st.pages;
    r->dropped_pages = x->dropped;
    r->pages_expected = (uint64_t)o->batch * x->layers *
                        ((n + x->sh.page_tokens - 1) / x->sh.page_tokens - attn_first_page(&x->sh, n));
}

/* The engine opened, its links measured raw, the prefill and the timed
 * decode, the SSD measured again, the bound. */
static int run_engine(struct run_ctx *x, struct run_result *r)
{
    int rc = open_engine(x, r);
    if (rc)
        return rc;
    snprintf(r->device, sizeof r->device, "%s", kvt_device_name(x->e));
    r->gbps_h2d = run_raw_link(x->e, true);
    r->gbps_d2h = run_raw_link(x->e, false);
    double t0 = util_now();
    if ((rc = run_prefill(x))) {
        if (!x->said && !cli_stopped())
            run_said_error("prefill", rc);
        return rc;
    }
    r->prefill_s = util_now() - t0;
    if ((rc = run_decode(x, r))) {
        if (!x->said && !cli_stopped())
            run_said_error("decode", rc);
        return rc;
    }
    if ((rc = cli_stop_check()))
        return rc;
    held_pages(x, r);
    run_links_again(x, r);
    r->link_paced = x->o->link_gbps > 0;
    run_bound(r);
    return 0;
}

/* The reference pass, then the trace written: 0, 1 on a mismatch, or the
 * trace's error. */
static int run_finish(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    double t0 = util_now();
    int rc = run_verify(x, r);
    r->verify_s = util_now() - t0;
    r->verified = rc == 0;
    if (rc < 0)
        return rc; /* stopped by a signal: no trace of half a run */
    if (rc == 0 && r->pages_held != r->pages_expected) {
        cli_error("run", 1, "verification FAILED: the engine holds %llu pages, the window %llu",
                  (unsigned long long)r->pages_held, (unsigned long long)r->pages_expected);
        r->verified = false;
        rc = 1;
    } else if (rc && r->dt_rms_rel_step > r->dt_tol) {
        cli_error("run", 1,
                  "verification FAILED: --dtype %s's RMS relative error against bf16 %.4f "
                  "(a step's) is beyond its tolerance %.3g",
                  run_dtype_name[o->dtype], r->dt_rms_rel_step, r->dt_tol);
    } else if (rc) {
        cli_error("run", 1,
                  "verification FAILED: step %u, sequence %u, layer %u, q head %u %s",
                  r->bad_step, r->bad_seq, r->bad_layer, r->bad_head,
                  r->lossy ? "is past the codec's tolerance (its largest error)"
                           : "differs from the reference");
    }
    if (o->trace_path) {
        int w = trace_write(&x->trace, o->trace_path);
        if (w) {
            cli_error("run", 1, "cannot write --trace %s: %s", o->trace_path, strerror(-w));
            if (!rc)
                rc = w;
        }
    }
    return rc;
}

int run_exec(const struct run_opts *o, struct run_result *r)
{
    struct run_ctx x = { .o = o };
    memset(r, 0, sizeof(*r));
    int rc = ctx_shape(&x);
    if (rc || (rc = run_size(&x, r)) || (rc = check_engine_config(&x, r)))
        return rc;
    trace_init(&x.trace, util_now());
    if ((rc = ctx_alloc(&x))) {
        cli_error("run", 1, "out of memory");
        goto out;
    }
    if ((rc = run_err_init(&x, r)))
        goto out;
    /* A signal's flag is checked between the phases and in the loops
     * (cli_stop_check): ctx_free then removes the temporary directory. */
    if ((rc = spill_prepare(&x, r)) || (rc = cli_stop_check()) || (rc = run_engine(&x, r)))
        goto out;
    rc = run_finish(&x, r);
out:
    ctx_free(&x);
    return rc;
}
