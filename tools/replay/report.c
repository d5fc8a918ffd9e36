/*
 * report.c — `kvtier replay`'s report: the configuration the capacities
 * made, prefix hits (blocks and tokens) and the tiers that served them,
 * bytes per tier and SSD writes, load speed beside the raw disk, the check
 * of every byte, CPU time, and the modeled time to first token; as text and
 * as one JSON object.
 */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/replay/replay.h"
#include "tools/util/json.h"

static double frac(double a, double b) { return b > 0 ? a / b : 0; }
static double gbps(double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0; }

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The raw read speed the loads are held to: over the engine's own segment
 * when measured, else over the scratch file. */
static double raw_read(const struct replay_result *r)
{
    return r->raw_spill_read_gbps > 0 ? r->raw_spill_read_gbps : r->raw_read_gbps;
}

static uint64_t hit_bytes(const struct replay_result *r)
{
    return r->get_bytes[KVT_TIER_DRAM] + r->get_bytes[KVT_TIER_SSD];
}

static double get_time(const struct replay_result *r)
{
    return r->get_s[KVT_TIER_DRAM] + r->get_s[KVT_TIER_SSD];
}

/* Bytes moved: in through kvt_put, out through kvt_get, and both ways
 * between DRAM and SSD. */
static double moved(const struct replay_result *r)
{
    const kvt_stats *d = &r->delta;
    return (double)(d->bytes_put + d->bytes_get + d->bytes_up[KVT_TIER_DRAM] +
                    d->bytes_down[KVT_TIER_DRAM]);
}

static double engine_cpu(const struct replay_result *r)
{
    double c = r->cpu_s - r->client_cpu_s;
    return c > 0 ? c : 0;
}

static void text_config(FILE *f, const struct replay_opts *o, const struct replay_result *r)
{
    char b[4][32];
    size_t bb = o->block_bytes;
    fprintf(f, "kvtier replay: %s: %llu requests, %llu block references, %llu distinct blocks of %u tokens\n",
            base_name(o->trace_path), (unsigned long long)r->requests,
            (unsigned long long)r->refs, (unsigned long long)r->distinct, 512u);
    if (r->scale > 1.0001)
        fprintf(f, "  blocks of %s stand for %s's 512-token blocks of %s: scaled down %.0fx "
                   "(load times scaled back up for the TTFT model)\n",
                cli_bytes(b[0], 32, (double)bb), o->model->name,
                cli_bytes(b[1], 32, (double)r->model_block_bytes), r->scale);
    else
        fprintf(f, "  blocks of %s (%s's 512-token block is %s)\n", cli_bytes(b[0], 32, (double)bb),
                o->model->name, cli_bytes(b[1], 32, (double)r->model_block_bytes));
    fprintf(f, "  capacity %llu blocks = %.1f%% of the distinct ones: DRAM %llu (%s) + SSD %llu (%s) "
               "+ HBM %llu; policy %s%s\n",
            (unsigned long long)r->capacity_blocks, 100 * frac((double)r->capacity_blocks, (double)r->distinct),
            (unsigned long long)r->slots[KVT_TIER_DRAM],
            cli_bytes(b[2], 32, (double)(r->slots[KVT_TIER_DRAM] * bb)),
            (unsigned long long)r->slots[KVT_TIER_SSD],
            cli_bytes(b[3], 32, (double)(r->slots[KVT_TIER_SSD] * bb)),
            (unsigned long long)r->slots[KVT_TIER_HBM], r->policy,
            r->policy_default ? " (the engine's default)" : "");
    if (o->concurrency > 1)
        fprintf(f, "  %u requests served at once (--concurrency): a call's time counts once while "
                   "others of its kind overlap it\n", o->concurrency);
    if (r->depth_conflicts)
        fprintf(f, "  %llu references name a hash at another position than its first: keyed by "
                   "the first\n", (unsigned long long)r->depth_conflicts);
}

static void text_hits(FILE *f, const struct replay_result *r)
{
    char b[4][32];
    const kvt_stats *d = &r->delta, *e = &r->end;
    fprintf(f, "  prefix hits: %llu of %llu block references = %.1f%%; tokens %.1f%% (%llu of %llu)\n",
            (unsigned long long)r->hit_blocks, (unsigned long long)r->refs,
            100 * frac((double)r->hit_blocks, (double)r->refs),
            100 * frac((double)r->hit_tokens, (double)r->in_tokens),
            (unsigned long long)r->hit_tokens, (unsigned long long)r->in_tokens);
    fprintf(f, "  hits served from: dram %llu (%.1f%%), ssd %llu (%.1f%%)",
            (unsigned long long)(r->hits_by_tier[KVT_TIER_DRAM] + r->hits_by_tier[KVT_TIER_HBM]),
            100 * frac((double)(r->hits_by_tier[KVT_TIER_DRAM] + r->hits_by_tier[KVT_TIER_HBM]),
                       (double)r->hit_blocks),
            (unsigned long long)r->hits_by_tier[KVT_TIER_SSD],
            100 * frac((double)r->hits_by_tier[KVT_TIER_SSD], (double)r->hit_blocks));
    if (r->hits_by_tier[KVT_TIER_HBM])
        fprintf(f, " (dram counts %llu from the one HBM slot)",
                (unsigned long long)r->hits_by_tier[KVT_TIER_HBM]);
    fputc('\n', f);
    if (r->lost_hits)
        fprintf(f, "  %llu blocks kvt_exists named were not found by kvt_get\n",
                (unsigned long long)r->lost_hits);
    fprintf(f, "  bytes: put %s, got %s; ssd->dram %s, dram->ssd %s (SSD writes: wear); held at the end: "
               "dram %llu, ssd %llu blocks\n",
            cli_bytes(b[0], 32, (double)d->bytes_put), cli_bytes(b[1], 32, (double)d->bytes_get),
            cli_bytes(b[2], 32, (double)d->bytes_up[KVT_TIER_DRAM]),
            cli_bytes(b[3], 32, (double)d->bytes_down[KVT_TIER_DRAM]),
            (unsigned long long)e->resident_pages[KVT_TIER_DRAM],
            (unsigned long long)e->resident_pages[KVT_TIER_SSD]);
    if (r->client_evicted)
        fprintf(f, "  the engine refused puts when full (KVT_EFULL) %llu times: the replay dropped %llu "
                   "blocks itself, least recently used first, so these hits are its LRU's, not the "
                   "policy's\n",
                (unsigned long long)r->client_evict_calls, (unsigned long long)r->client_evicted);
    if (r->rewritten)
        fprintf(f, "  %llu blocks were present past a missing one (not in the hit prefix): put again\n",
                (unsigned long long)r->rewritten);
    if (r->unstored)
        fprintf(f, "  %llu blocks were not stored: their request's chain is longer than the capacity\n",
                (unsigned long long)r->unstored);
}

static void text_speed(FILE *f, const struct replay_opts *o, const struct replay_result *r)
{
    char b[3][32];
    double raw = raw_read(r), ssd = gbps((double)r->get_bytes[KVT_TIER_SSD], r->get_s[KVT_TIER_SSD]);
    fprintf(f, "  loads: %s in %.2f s = %.2f GB/s; from DRAM %.2f GB/s, from SSD %.2f GB/s",
            cli_bytes(b[0], 32, (double)hit_bytes(r)), get_time(r), gbps((double)hit_bytes(r), get_time(r)),
            gbps((double)r->get_bytes[KVT_TIER_DRAM], r->get_s[KVT_TIER_DRAM]), ssd);
    if (raw > 0)
        fprintf(f, " = %.2fx raw\n  raw io_uring O_DIRECT reads of %s at depth 32 in this run: %.2f GB/s "
                   "(the engine's segment %.2f, a scratch file %.2f; writes %.2f)\n",
                ssd / raw, cli_bytes(b[1], 32, (double)o->block_bytes), raw, r->raw_spill_read_gbps,
                r->raw_read_gbps, r->raw_write_gbps);
    else
        fprintf(f, "; raw reads not measured (no SSD tier, or no io_uring here)\n");
    if (r->raw_batched_gbps > 0)
        fprintf(f, "  raw reads in batches of %u blocks (the mean SSD-served get), each waited for: "
                   "%.2f GB/s; the SSD loads are %.2fx that\n",
                r->raw_batch, r->raw_batched_gbps, ssd / r->raw_batched_gbps);
    if (r->raw_same_gbps > 0)
        fprintf(f, "  the SSD-served gets' own reads replayed raw (the same %llu blocks where they lay, "
                   "the same calls): %.2f GB/s; the SSD loads are %.2fx that\n",
                (unsigned long long)r->raw_same_blocks, r->raw_same_gbps, ssd / r->raw_same_gbps);
    fprintf(f, "  puts: %s in %.2f s = %.2f GB/s; exists %.2f s\n",
            cli_bytes(b[2], 32, (double)r->delta.bytes_put), r->put_s,
            gbps((double)r->delta.bytes_put, r->put_s), r->exists_s);
    fprintf(f, "  verified: %s", r->verified ? "yes, every byte read back" : "NO");
    fprintf(f, " (%s in %llu blocks", cli_bytes(b[0], 32, (double)r->bytes_verified),
            (unsigned long long)(r->bytes_verified / o->block_bytes));
    if (r->bad_blocks)
        fprintf(f, "; %llu wrong, the first id %llu index %u byte %zu", (unsigned long long)r->bad_blocks,
                (unsigned long long)r->bad_id, r->bad_index, r->bad_offset);
    fprintf(f, ")\n");
    fprintf(f, "  CPU: %.1f core-s in %.1f s wall; the engine's %.1f = %.2f core-s per GB moved "
               "(put + get + SSD reads and writes, %s); making and checking blocks %.1f\n",
            r->cpu_s, r->wall_s, engine_cpu(r), frac(engine_cpu(r), moved(r) / 1e9),
            cli_bytes(b[1], 32, moved(r)), r->client_cpu_s);
    if (o->speed > 0)
        fprintf(f, "  pace: the trace's time / %g; %llu requests started late (at most %.3f s)\n",
                o->speed, (unsigned long long)r->late_requests, r->max_late_s);
}

static void text_ttft(FILE *f, const struct replay_opts *o, const struct replay_result *r)
{
    double n = (double)r->requests;
    fprintf(f, "  TTFT model (recompute at %.0f tokens/s%s): loading the hit prefix beat recomputing "
               "it in %.1f%% of the %llu requests with a hit (load %.3f s vs recompute %.3f s, summed)\n",
            o->prefill_tps, r->scale > 1.0001 ? ", load times x scale" : "",
            100 * frac((double)r->load_won, (double)r->ttft_requests),
            (unsigned long long)r->ttft_requests, r->load_model_s, r->recompute_hit_s);
    fprintf(f, "    TTFT with the cache: mean %.3f s, p50 %.3f, p90 %.3f; recomputing everything: "
               "mean %.3f s, p50 %.3f, p90 %.3f\n",
            frac(r->ttft_load_s, n), r->ttft_load_p50, r->ttft_load_p90,
            frac(r->ttft_recompute_s, n), r->ttft_recompute_p50, r->ttft_recompute_p90);
}

void replay_report_text(FILE *f, const struct replay_opts *o, const struct replay_result *r)
{
    text_config(f, o, r);
    text_hits(f, r);
    text_speed(f, o, r);
    text_ttft(f, o, r);
}

/* The tiers' three counts as {"hbm": .., "dram": .., "ssd": ..} in o[key]. */
static void json_tiers(json_t *o, const char *key, const uint64_t *by_tier)
{
    json_t *t = json_object();
    util_json_set_u64(t, "hbm", by_tier[KVT_TIER_HBM]);
    util_json_set_u64(t, "dram", by_tier[KVT_TIER_DRAM]);
    util_json_set_u64(t, "ssd", by_tier[KVT_TIER_SSD]);
    json_object_set_new(o, key, t);
}

static void json_config(json_t *j, const struct replay_opts *o, const struct replay_result *r)
{
    util_json_set_str(j, "trace", o->trace_path);
    util_json_set_str(j, "policy", r->policy);
    util_json_set_bool(j, "policy_default", r->policy_default);
    util_json_set_str(j, "model", o->model->name);
    util_json_set_u64(j, "block_bytes", o->block_bytes);
    util_json_set_u64(j, "model_block_bytes", r->model_block_bytes);
    util_json_set_real(j, "scale", r->scale);
    util_json_set_u64(j, "requests", r->requests);
    util_json_set_u64(j, "concurrency", o->concurrency);
    util_json_set_u64(j, "block_refs", r->refs);
    util_json_set_u64(j, "distinct_blocks", r->distinct);
    util_json_set_u64(j, "capacity_blocks", r->capacity_blocks);
    util_json_set_real(j, "capacity_fraction",
                       frac((double)r->capacity_blocks, (double)r->distinct));
    json_tiers(j, "slots", r->slots);
}

static void json_hits(json_t *j, const struct replay_result *r)
{
    const kvt_stats *d = &r->delta;
    util_json_set_u64(j, "hit_blocks", r->hit_blocks);
    util_json_set_real(j, "hit_fraction", frac((double)r->hit_blocks, (double)r->refs));
    util_json_set_u64(j, "hit_tokens", r->hit_tokens);
    util_json_set_u64(j, "input_tokens", r->in_tokens);
    util_json_set_real(j, "token_hit_fraction", frac((double)r->hit_tokens, (double)r->in_tokens));
    json_tiers(j, "hits_by_tier", r->hits_by_tier);
    util_json_set_u64(j, "lost_hits", r->lost_hits);
    json_t *b = json_object();
    util_json_set_u64(b, "put", d->bytes_put);
    util_json_set_u64(b, "get", d->bytes_get);
    util_json_set_u64(b, "get_dram", r->get_bytes[KVT_TIER_DRAM]);
    util_json_set_u64(b, "get_ssd", r->get_bytes[KVT_TIER_SSD]);
    util_json_set_u64(b, "ssd_read", d->bytes_up[KVT_TIER_DRAM]);
    util_json_set_u64(b, "ssd_write", d->bytes_down[KVT_TIER_DRAM]);
    json_object_set_new(j, "bytes", b);
    util_json_set_u64(j, "ssd_bytes_written", d->bytes_down[KVT_TIER_DRAM]);
    util_json_set_u64(j, "client_evicted_blocks", r->client_evicted);
    util_json_set_u64(j, "unstored_blocks", r->unstored);
    util_json_set_u64(j, "rewritten_blocks", r->rewritten);
}

static void json_speed(json_t *j, const struct replay_result *r)
{
    double ssd = gbps((double)r->get_bytes[KVT_TIER_SSD], r->get_s[KVT_TIER_SSD]);
    util_json_set_bool(j, "verified", r->verified);
    util_json_set_u64(j, "bytes_verified", r->bytes_verified);
    util_json_set_u64(j, "bad_blocks", r->bad_blocks);
    util_json_set_real(j, "load_gbps", gbps((double)hit_bytes(r), get_time(r)));
    util_json_set_real(j, "dram_load_gbps",
                       gbps((double)r->get_bytes[KVT_TIER_DRAM], r->get_s[KVT_TIER_DRAM]));
    util_json_set_real(j, "ssd_load_gbps", ssd);
    util_json_set_real(j, "raw_gbps", raw_read(r));
    util_json_set_real(j, "ssd_load_over_raw", raw_read(r) > 0 ? ssd / raw_read(r) : 0);
    util_json_set_real(j, "raw_scratch_read_gbps", r->raw_read_gbps);
    util_json_set_real(j, "raw_spill_read_gbps", r->raw_spill_read_gbps);
    util_json_set_real(j, "raw_batched_gbps", r->raw_batched_gbps);
    util_json_set_u64(j, "raw_batch", r->raw_batch);
    util_json_set_real(j, "raw_same_gbps", r->raw_same_gbps);
    util_json_set_u64(j, "raw_same_blocks", r->raw_same_blocks);
    util_json_set_real(j, "raw_write_gbps", r->raw_write_gbps);
    util_json_set_real(j, "put_gbps", gbps((double)r->delta.bytes_put, r->put_s));
    util_json_set_real(j, "wall_s", r->wall_s);
    util_json_set_real(j, "exists_s", r->exists_s);
    util_json_set_real(j, "get_dram_s", r->get_s[KVT_TIER_DRAM]);
    util_json_set_real(j, "get_ssd_s", r->get_s[KVT_TIER_SSD]);
    util_json_set_real(j, "put_s", r->put_s);
    util_json_set_real(j, "cpu_s", r->cpu_s);
    util_json_set_real(j, "client_cpu_s", r->client_cpu_s);
    util_json_set_real(j, "engine_cpu_s", engine_cpu(r));
    util_json_set_real(j, "bytes_moved", moved(r));
    util_json_set_real(j, "cpu_core_s_per_gb", frac(engine_cpu(r), moved(r) / 1e9));
    util_json_set_u64(j, "late_requests", r->late_requests);
}

static void json_ttft(json_t *j, const struct replay_opts *o, const struct replay_result *r)
{
    double n = (double)r->requests;
    json_t *t = json_object();
    util_json_set_real(t, "prefill_tokens_per_s", o->prefill_tps);
    util_json_set_u64(t, "requests_with_hit", r->ttft_requests);
    util_json_set_u64(t, "load_won", r->load_won);
    util_json_set_real(t, "load_won_fraction", frac((double)r->load_won, (double)r->ttft_requests));
    util_json_set_real(t, "load_hit_s", r->load_model_s);
    util_json_set_real(t, "recompute_hit_s", r->recompute_hit_s);
    util_json_set_real(t, "mean_cached_s", frac(r->ttft_load_s, n));
    util_json_set_real(t, "p50_cached_s", r->ttft_load_p50);
    util_json_set_real(t, "p90_cached_s", r->ttft_load_p90);
    util_json_set_real(t, "mean_recompute_s", frac(r->ttft_recompute_s, n));
    util_json_set_real(t, "p50_recompute_s", r->ttft_recompute_p50);
    util_json_set_real(t, "p90_recompute_s", r->ttft_recompute_p90);
    json_object_set_new(j, "ttft", t);
}

void replay_report_json(const struct replay_opts *o, const struct replay_result *r)
{
    json_t *j = json_object();
    if (j) {
        json_config(j, o, r);
        json_hits(j, r);
        json_speed(j, r);
        json_ttft(j, o, r);
    }
    util_json_print(stdout, j);
}
