/*
 * size.c — `kvtier replay`'s capacities, from fractions of the trace's
 * distinct blocks or bytes into slots per tier, and the engine's
 * configuration for them.
 *
 * Capacity counts the blocks the engine holds. The engine counts HBM +
 * DRAM + SSD pages (docs/design.md#capacity), and HBM cannot be empty: it
 * gets one slot (a put lands there only when DRAM and SSD are full), which
 * the SSD gives up, so that the engine holds exactly --capacity blocks,
 * the simulator's cache size. Given as --dram and --ssd, the capacity is
 * their sum and the HBM slot.
 */
#include <errno.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/replay/replay_priv.h"

/* Gets stage SSD reads in a quarter of DRAM and puts go in batches of half
 * of it (kvtier.h): below this a chain moves a block or two per call. */
#define REPLAY_MIN_DRAM 8

static uint64_t cap_blocks(const struct replay_cap *c, uint64_t distinct, size_t bb)
{
    if (c->kind == CAP_FRACTION)
        return (uint64_t)(c->frac * (double)distinct);
    return c->bytes / bb;
}

/* The model's block: 512 tokens (the trace's block) of its KV. */
static int model_block(struct replay_ctx *x)
{
    struct replay_result *r = x->r;
    const struct kvt_shape *m = x->o->model;
    uint64_t per_token;
    if (kvt_kv_bytes_per_token(m, kvt_dtype_bits(m->dtype), &per_token)) {
        cli_error("replay", 2, "--model %s: its KV bytes per token cannot be computed", m->name);
        return -EINVAL;
    }
    r->model_block_bytes = per_token * x->tr.block_tokens;
    r->scale = (double)r->model_block_bytes / (double)x->bb;
    return 0;
}

static int too_small(const char *what, uint64_t blocks, uint64_t min, size_t bb)
{
    cli_error("replay", 2, "%s holds %llu blocks of %zu bytes; the replay needs at least %llu",
              what, (unsigned long long)blocks, bb, (unsigned long long)min);
    return -EINVAL;
}

int replay_size(struct replay_ctx *x)
{
    const struct replay_opts *o = x->o;
    struct replay_result *r = x->r;
    uint64_t distinct = r->distinct, c = 0, d = 0, s = 0; /* of the requests replayed */
    if (model_block(x))
        return -EINVAL;
    if (o->capacity.kind)
        c = cap_blocks(&o->capacity, distinct, x->bb);
    if (o->dram.kind && o->ssd.kind) {
        d = cap_blocks(&o->dram, distinct, x->bb);
        s = cap_blocks(&o->ssd, distinct, x->bb);
    } else if (o->dram.kind) {
        d = cap_blocks(&o->dram, distinct, x->bb);
        if (d + 1 > c) {
            cli_error("replay", 2, "--dram (%llu blocks) leaves no room in --capacity (%llu "
                      "blocks, one of them the HBM slot)", (unsigned long long)d,
                      (unsigned long long)c);
            return -EINVAL;
        }
        s = c - d - 1;
    } else if (o->ssd.kind) {
        s = cap_blocks(&o->ssd, distinct, x->bb);
        if (s + 1 >= c) {
            cli_error("replay", 2, "--ssd (%llu blocks) leaves no DRAM in --capacity (%llu "
                      "blocks, one of them the HBM slot)", (unsigned long long)s,
                      (unsigned long long)c);
            return -EINVAL;
        }
        d = c - s - 1;
    } else {
        /* A quarter in DRAM: hosts have several times more disk than DRAM
         * for KV, and the SSD then serves a real share of the hits. */
        d = c / 4;
        s = c > d ? c - d - 1 : 0;
    }
    if (d < REPLAY_MIN_DRAM)
        return too_small("DRAM (--dram, or a quarter of --capacity)", d, REPLAY_MIN_DRAM, x->bb);
    if (d + s > UINT32_MAX / 2) {
        cli_error("replay", 2, "the capacity (%llu blocks) is past what an engine counts",
                  (unsigned long long)(d + s));
        return -EINVAL;
    }
    r->capacity_blocks = 1 + d + s;
    r->slots[KVT_TIER_HBM] = 1;
    r->slots[KVT_TIER_DRAM] = d;
    r->slots[KVT_TIER_SSD] = s;
    return 0;
}

/* kvt_config.on_transfer: each completed batch becomes a span on its link's
 * track (with --trace only). */
static void on_transfer(void *arg, const kvt_transfer_event *ev)
{
    static const char *const names[TRACE_LINKS] = { "dram->hbm", "hbm->dram", "ssd->dram",
                                                    "dram->ssd" };
    struct replay_ctx *x = arg;
    if (ev->kind >= 0 && ev->kind < TRACE_LINKS)
        trace_link(&x->trace, ev->kind, names[ev->kind], (double)ev->start_ns * 1e-9,
                   (double)ev->end_ns * 1e-9, ev->pages, (double)ev->bytes);
}

void replay_engine_config(const struct replay_ctx *x, kvt_config *c)
{
    const struct replay_result *r = x->r;
    kvt_config_init(c);
    c->page_bytes = x->bb;
    c->hbm_bytes = r->slots[KVT_TIER_HBM] * x->bb;
    c->dram_bytes = r->slots[KVT_TIER_DRAM] * x->bb;
    c->ssd_bytes = r->slots[KVT_TIER_SSD] * x->bb;
    c->ssd_dir = c->ssd_bytes ? x->ssd_dir : NULL;
    c->device = KVT_DEVICE_HOST;
    /* A prefix cache's store: full, it drops the policy's victims. */
    c->flags |= KVT_FLAG_EVICT;
    /* The policy the engine runs then unless told otherwise (kvtier.h,
     * KVT_FLAG_EVICT), named so that the report says which. */
    c->policy = x->o->policy ? x->o->policy : "prefix";
    c->fingerprint = 0x6b7672706c790000ull ^ x->bb; /* "kvrply" and the block size */
    if (x->o->trace_out) {
        c->on_transfer = on_transfer;
        c->on_transfer_arg = (void *)x;
    }
}

static const struct cli_field replay_fields[] = {
    { "page_bytes", "block-bytes" }, { "dram_bytes", "dram" }, { "ssd_bytes", "ssd" },
    { "ssd_dir", "ssd-dir" },        { "policy", "policy" },   { NULL, NULL },
};

/* The engine's own check, before anything is made on disk; the temporary
 * directory has no name yet, a stand-in takes its place. Also records the
 * policy's name (the engine's default when --policy is not given). */
int replay_check_config(const struct replay_ctx *x)
{
    kvt_config c;
    replay_engine_config(x, &c);
    if (c.ssd_bytes && !c.ssd_dir)
        c.ssd_dir = "(temporary)";
    snprintf(x->r->policy, sizeof x->r->policy, "%s", c.policy ? c.policy : "(default)");
    x->r->policy_default = !x->o->policy;
    return cli_config_check("replay", &c, replay_fields);
}
