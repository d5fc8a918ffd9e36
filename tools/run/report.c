/*
 * report.c — `kvtier run`'s report: the tiers, the verification, the time,
 * the links and the bound, as text and as one JSON object.
 */
#include <stdio.h>

#include "tools/cli.h"
#include "tools/run/run_priv.h"

static const char *const tier_name[KVT_TIERS] = { "hbm", "dram", "ssd" };

/* Bytes into / out of tier t over the decode: HBM's come from its own
 * counters; DRAM's are its up/down plus HBM's; the SSD's are DRAM's down/up. */
static void tier_io(const kvt_stats *d, int t, uint64_t *in, uint64_t *out)
{
    switch (t) {
    case 0: *in = d->bytes_up[0]; *out = d->bytes_down[0]; break;
    case 1: *in = d->bytes_up[1] + d->bytes_down[0]; *out = d->bytes_down[1] + d->bytes_up[0]; break;
    default: *in = d->bytes_down[1]; *out = d->bytes_up[1]; break;
    }
}

static double ratio(uint64_t a, uint64_t b) { return a + b ? (double)a / (double)(a + b) : 0; }

void run_report_text(FILE *f, const struct run_opts *o, const struct run_result *r,
                     uint32_t layers)
{
    char b[5][32];
    const kvt_stats *d = &r->delta;
    const struct kvt_shape *m = o->model;
    char heads[64];
    if (kvt_shape_is_mla(m))
        snprintf(heads, sizeof heads, "MLA: %u q heads over latent %u + rope %u", m->q_heads,
                 m->kv_lora_rank, m->rope_dim);
    else
        snprintf(heads, sizeof heads, "%u q / %u kv heads x %u", m->q_heads, m->kv_heads,
                 m->head_dim);
    fprintf(f, "kvtier run: %s (%u of %u layers, %s), batch %u, context %llu + %u tokens, %s KV",
            m->name, layers, m->layers, heads, o->batch, (unsigned long long)o->context,
            o->tokens, run_dtype_name[o->dtype]);
    if (o->window)
        fprintf(f, ", window %u", o->window);
    fputc('\n', f);
    fprintf(f, "  pages of %u tokens, %s; KV %s (%llu pages, %.1fx HBM); policy %s, codec %s, %u threads (nice %u%s)\n",
            o->page_tokens, cli_bytes(b[0], 32, (double)r->page_bytes), cli_bytes(b[1], 32, (double)r->kv_bytes),
            (unsigned long long)r->pages, (double)r->kv_bytes / (double)r->cap[0], o->policy,
            run_codec_name[o->codec], o->threads, o->nice, r->pinned ? ", pinned" : "");
    fprintf(f, "  %-5s %11s %11s %11s %11s %9s %9s %7s\n", "tier", "capacity", "resident",
            "bytes in", "bytes out", "hits", "misses", "hit%");
    for (int t = 0; t < KVT_TIERS; t++) {
        uint64_t in, out;
        tier_io(d, t, &in, &out);
        fprintf(f, "  %-5s %11s %11s %11s %11s %9llu %9llu %6.1f%%\n", tier_name[t],
                cli_bytes(b[0], 32, (double)r->cap[t]),
                cli_bytes(b[1], 32, (double)r->end.resident_pages[t] * (double)r->page_bytes),
                cli_bytes(b[2], 32, (double)in), cli_bytes(b[3], 32, (double)out),
                (unsigned long long)d->hits[t], (unsigned long long)d->misses[t],
                100 * ratio(d->hits[t], d->misses[t]));
    }
    uint64_t ntok = (uint64_t)o->tokens * o->batch;
    if (r->lossy)
        run_err_report(f, o, r);
    else if (r->verified && r->verified_steps < o->tokens)
        fprintf(f, "  verified: yes, the outputs of %u of %u steps (one in %u, and the last) "
                "bit-exact against the reference", r->verified_steps, o->tokens, o->verify_every);
    else
        fprintf(f, "  verified: %s", r->verified ? "yes, every output bit-exact against the reference"
                                                 : "NO");
    if (!r->verified && !r->lossy && r->dt_rms_rel_step <= r->dt_tol)
        fprintf(f, " (first mismatch: step %u, sequence %u, layer %u, q head %u)", r->bad_step,
                r->bad_seq, r->bad_layer, r->bad_head);
    if (r->dt_tol > 0) /* quantised: bit-exact against its own reference, and this */
        fprintf(f, "\n  %s against the bf16 reference: RMS relative error %.4f (worst step %.4f; "
                   "tolerance %.3g), max abs error %.4g",
                run_dtype_name[o->dtype], r->dt_rms_rel, r->dt_rms_rel_step, r->dt_tol,
                r->dt_max_abs);
    if (o->window)
        fprintf(f, "\n  window %u: %llu pages behind it dropped (kvt_drop); the engine holds %llu "
                   "pages at the end, the window's %llu",
                o->window, (unsigned long long)r->dropped_pages,
                (unsigned long long)r->pages_held, (unsigned long long)r->pages_expected);
    if (!r->lossy)
        fputc('\n', f);
    fprintf(f, "  tokens: %llu in %.3f s = %.2f tokens/s (prefill %.2f s, reference %.2f s)\n",
            (unsigned long long)ntok, r->wall_s, (double)ntok / r->wall_s, r->prefill_s, r->verify_s);
    fprintf(f, "  stall: %.3f s = %.1f%% of wall; acquire %.3f s, attention %.3f s; %llu pages prefetched (%llu wasted)\n",
            r->stall_s, 100 * r->stall_s / r->wall_s, r->acquire_s, r->compute_s,
            (unsigned long long)d->prefetch_pages, (unsigned long long)d->prefetch_wasted);
    fprintf(f, "  links measured raw in this run: dram->hbm %.2f GB/s, hbm->dram %.2f GB/s",
            r->gbps_h2d, r->gbps_d2h);
    if (r->ssd_read.n) {
        double lo, hi;
        const struct run_link *rl = r->spill_read.n ? &r->spill_read : &r->ssd_read;
        run_link_range(rl, &lo, &hi);
        fprintf(f, ", ssd read %.2f GB/s (%s, median of %u passes, %.2f-%.2f)", r->gbps_ssd_read,
                r->spill_read.n ? "over the spill segment" : "scratch file", rl->n, lo, hi);
        run_link_range(&r->ssd_write, &lo, &hi);
        fprintf(f, ", ssd write %.2f GB/s (%.2f-%.2f)", r->gbps_ssd_write, lo, hi);
    }
    fputc('\n', f);
    fprintf(f, "  the decode moved ssd->dram %.2f GB/s, dram->hbm %.2f GB/s (bytes / wall)\n",
            r->decode_gbps[TERM_SSD_R], r->decode_gbps[TERM_H2D]);
    fprintf(f, "  the ssd moved %s read, %s written (as stored, %.3fx the pages' bytes); codec %.3f s "
               "on %u decoding thread%s, checksums %.3f s of CPU\n",
            cli_bytes(b[0], 32, (double)r->disk_read), cli_bytes(b[1], 32, (double)r->disk_written),
            d->bytes_up[1] + d->bytes_down[1]
                ? (double)(r->disk_read + r->disk_written) / (double)(d->bytes_up[1] + d->bytes_down[1])
                : 0.0,
            r->codec_s, r->decoders, r->decoders == 1 ? "" : "s", r->crc_cpu_s);
    for (int i = 1; i < TERMS; i++)
        if (r->link_gbps[i] > run_raw_gbps(r, i))
            fprintf(f, "  %s: the decode moved more than the raw passes did; the bound uses the "
                       "decode's rate\n", run_term_name[i]);
    fprintf(f,
            "  bound: %.3f s (%s) = max(compute %.3f, dram->hbm %.3f, hbm->dram %.3f, ssd %.3f "
            "= ssd->dram %.3f + dram->ssd %.3f, or the codec's time, cpu %.3f = %.3f s of work "
            "on %u cores); wall/bound %.2f\n",
            r->bound_s, run_term_name[r->bound_by], r->term_s[TERM_COMPUTE], r->term_s[TERM_H2D],
            r->term_s[TERM_D2H], r->term_s[TERM_SSD], r->term_s[TERM_SSD_R],
            r->term_s[TERM_SSD_W], r->term_s[TERM_CPU], r->cpu_work_s, r->cores,
            r->bound_s > 0 ? r->wall_s / r->bound_s : 0);
    fprintf(f, "  cores busy: %.3f s of CPU time over the decode, all threads = %.0f%% of %u cores\n",
            r->process_cpu_s, r->wall_s > 0 ? 100 * r->process_cpu_s / (r->wall_s * r->cores) : 0,
            r->cores);
}

void run_report_json(const struct run_opts *o, const struct run_result *r, uint32_t layers)
{
    const kvt_stats *d = &r->delta;
    uint64_t ntok = (uint64_t)o->tokens * o->batch;
    printf("{\"verified\": %s, \"verify_every\": %u, \"verified_steps\": %u, ",
           r->verified ? "true" : "false", o->verify_every, r->verified_steps);
    printf("\"tokens\": %llu, \"steps\": %u, \"batch\": %u, \"model\": \"%s\", "
           "\"layers\": %u, \"context\": %llu, \"page_tokens\": %u, \"dtype\": \"%s\", "
           "\"window\": %u, \"pages_dropped\": %llu, \"pages_held\": %llu, "
           "\"pages_expected\": %llu, \"page_bytes\": %llu, "
           "\"policy\": \"%s\", \"codec\": \"%s\", \"device\": \"%s\", \"threads\": %u, "
           "\"nice\": %u, \"tokens_per_s\": %.4f, \"kv_bytes\": %llu, \"tiers\": {",
           (unsigned long long)ntok, o->tokens, o->batch,
           o->model->name, layers, (unsigned long long)o->context, o->page_tokens,
           run_dtype_name[o->dtype], o->window, (unsigned long long)r->dropped_pages,
           (unsigned long long)r->pages_held, (unsigned long long)r->pages_expected,
           (unsigned long long)r->page_bytes, o->policy, run_codec_name[o->codec],
           r->device[0] ? r->device : "host", o->threads, o->nice,
           (double)ntok / r->wall_s, (unsigned long long)r->kv_bytes);
    for (int t = 0; t < KVT_TIERS; t++) {
        uint64_t in, out;
        tier_io(d, t, &in, &out);
        printf("%s\"%s\": {\"capacity_bytes\": %llu, \"resident_bytes\": %llu, \"bytes_in\": %llu, "
               "\"bytes_out\": %llu, \"bytes_up\": %llu, \"bytes_down\": %llu, \"hits\": %llu, "
               "\"misses\": %llu, \"hit_ratio\": %.4f}",
               t ? ", " : "", tier_name[t], (unsigned long long)r->cap[t],
               (unsigned long long)(r->end.resident_pages[t] * r->page_bytes),
               (unsigned long long)in, (unsigned long long)out,
               (unsigned long long)d->bytes_up[t], (unsigned long long)d->bytes_down[t],
               (unsigned long long)d->hits[t], (unsigned long long)d->misses[t],
               ratio(d->hits[t], d->misses[t]));
    }
    printf("}, \"links_gbps\": {\"dram->hbm\": %.4f, \"hbm->dram\": %.4f, \"ssd->dram\": %.4f, "
           "\"dram->ssd\": %.4f}, \"decode_links_gbps\": {",
           r->gbps_h2d, r->gbps_d2h, r->gbps_ssd_read, r->gbps_ssd_write);
    for (int i = 1; i < TERMS; i++)
        printf("%s\"%s\": %.4f", i > 1 ? ", " : "", run_term_name[i], r->decode_gbps[i]);
    printf("}, \"bound_links_gbps\": {");
    for (int i = 1; i < TERMS; i++)
        printf("%s\"%s\": %.4f", i > 1 ? ", " : "", run_term_name[i], r->link_gbps[i]);
    printf("}, \"terms_s\": {");
    for (int i = 0; i < BOUND_TERMS; i++)
        printf("%s\"%s\": %.6f", i ? ", " : "", run_term_name[i], r->term_s[i]);
    printf("}");
    const struct run_link *ls[3] = { &r->ssd_read, &r->ssd_write, &r->spill_read };
    static const char *const ln[3] = { "ssd_read", "ssd_write", "ssd_read_spill" };
    for (int k = 0; k < 3; k++) {
        printf(", \"%s_samples_gbps\": [", ln[k]);
        for (unsigned i = 0; i < ls[k]->n; i++)
            printf("%s%.4f", i ? ", " : "", ls[k]->s[i]);
        printf("]");
    }
    printf(", \"prefetch_pages\": %llu, \"prefetch_wasted\": %llu, \"stall_s\": %.6f, "
           "\"stall_fraction\": %.6f, \"compute_s\": %.6f, \"acquire_s\": %.6f, "
           "\"prefill_s\": %.6f, \"verify_s\": %.6f, \"bound_s\": %.6f, \"bound_by\": \"%s\", "
           "\"wall_s\": %.6f, \"bound_ratio\": %.4f",
           (unsigned long long)d->prefetch_pages, (unsigned long long)d->prefetch_wasted,
           r->stall_s, r->stall_s / r->wall_s, r->compute_s, r->acquire_s, r->prefill_s,
           r->verify_s, r->bound_s, run_term_name[r->bound_by], r->wall_s,
           r->bound_s > 0 ? r->wall_s / r->bound_s : 0);
    printf(", \"ssd_disk_bytes_read\": %llu, \"ssd_disk_bytes_written\": %llu, \"codec_s\": %.6f",
           (unsigned long long)r->disk_read, (unsigned long long)r->disk_written, r->codec_s);
    printf(", \"attention_pinned\": %u", r->pinned);
    printf(", \"codec_cpu_s\": %.6f, \"checksum_cpu_s\": %.6f, \"decoders\": %u, "
           "\"compute_cpu_s\": %.6f, \"cpu_work_s\": %.6f, \"cores\": %u, \"process_cpu_s\": %.6f",
           r->codec_cpu_s, r->crc_cpu_s, r->decoders, r->compute_cpu_s, r->cpu_work_s, r->cores,
           r->process_cpu_s);
    if (r->lossy)
        run_err_json(r);
    if (r->dt_tol > 0)
        printf(", \"dtype_error\": {\"rms_rel\": %.6f, \"rms_rel_worst_step\": %.6f, "
               "\"max_abs\": %.6g, \"tolerance\": %.4f}",
               r->dt_rms_rel, r->dt_rms_rel_step, r->dt_max_abs, r->dt_tol);
    if (!r->verified)
        printf(", \"mismatch\": {\"step\": %u, \"seq\": %u, \"layer\": %u, \"head\": %u}",
               r->bad_step, r->bad_seq, r->bad_layer, r->bad_head);
    printf("}\n");
    fflush(stdout);
}
