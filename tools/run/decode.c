/*
 * decode.c — `kvtier run`'s work on the engine: the prefill (kvt_create of
 * every page, in the schedule's order), the timed decode loop — per step,
 * per layer, per sequence: kvt_advance, the token's K and V appended to the
 * tail page (a new page by kvt_create when the tail is full), kvt_acquire
 * of the pages, the attention (feed.c on the CPU, gpu.c on the GPU),
 * kvt_release — and, outside the timed loop, the reference pass. The loop
 * keeps a 64-bit hash of each q head's output bits, so the reference
 * compares without holding the outputs.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/run/run_priv.h"

/* Page bytes go in and out through the device back-end's synchronous copy,
 * so one path serves host pages and device pages alike (on the host
 * back-end it is a memcpy). */
static int page_copy(struct run_ctx *x, bool to_page, void *dst, const void *src, size_t bytes)
{
    int rc = to_page ? kvt_tool_copy_to_page(x->e, dst, src, bytes)
                     : kvt_tool_copy_from_page(x->e, dst, src, bytes);
    if (rc) {
        cli_error("run", 1, "copying page bytes: %s", kvt_strerror(rc));
        x->said = true;
    }
    return rc;
}

/* A quantised K block of kv head h with the token at pos added: its channel
 * scales change with it, so the block's rows up to pos are quantised again
 * (in the stage page) and copied with the scales. */
static int write_k_block(struct run_ctx *x, void *page, uint32_t seq, uint32_t layer,
                         uint32_t pos, uint32_t h)
{
    const struct attn_shape *s = &x->sh;
    uint32_t pt = s->page_tokens, t = pos % pt, pg_i = pos / pt;
    float row[ATTN_MAX_HEAD_DIM];
    char *st = x->stage, *pg = page;
    run_k_scales(s, x->o->seed, seq, layer, pg_i, t + 1, h, st);
    for (uint32_t i = 0; i <= t; i++) {
        run_kv_row(s, x->o->seed, seq, layer, pg_i * pt + i, h, 0, row);
        attn_store_row(s, st, 0, h, i, row);
    }
    size_t ro = attn_row_off(s, 0, h, 0), so = attn_scale_off(s, 0, h, 0);
    int rc = page_copy(x, true, pg + ro, st + ro, (t + 1) * attn_row_bytes(s));
    return rc ? rc : page_copy(x, true, pg + so, st + so, attn_k_scales(s) * sizeof(float));
}

/* Writes the token at pos (its rows, one per kind and kv head, and their
 * scales when quantised) into page, each built in the stage page at its
 * place in the layout and copied from there. */
static int write_token(struct run_ctx *x, void *page, uint32_t seq, uint32_t layer, uint32_t pos)
{
    const struct attn_shape *s = &x->sh;
    uint32_t t = pos % s->page_tokens;
    float row[ATTN_MAX_HEAD_DIM];
    char *st = x->stage, *pg = page;
    for (int kind = 0; kind < (int)attn_kinds(s); kind++)
        for (uint32_t h = 0; h < s->kv_heads; h++) {
            if (attn_per_channel(s, kind)) {
                int rc = write_k_block(x, page, seq, layer, pos, h);
                if (rc)
                    return rc;
                continue;
            }
            run_kv_row(s, x->o->seed, seq, layer, pos, h, kind, row);
            attn_store_row(s, st, kind, h, t, row);
            size_t ro = attn_row_off(s, kind, h, t), so = attn_scale_off(s, kind, h, t);
            int rc = page_copy(x, true, pg + ro, st + ro, attn_row_bytes(s));
            if (!rc && attn_row_scales(s))
                rc = page_copy(x, true, pg + so, st + so, attn_row_scales(s) * sizeof(float));
            if (rc)
                return rc;
        }
    return 0;
}

/* Drops pages [from, to) of (seq, layer): behind the window. */
static int drop_pages(struct run_ctx *x, uint32_t seq, uint32_t layer, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        kvt_key k = { run_seq_id(seq), layer, i };
        int rc = kvt_drop(x->e, &k, 1);
        if (rc)
            return rc;
        x->dropped++;
    }
    return 0;
}

/* A new page i of (seq, layer): its first nt tokens, zeros after them. */
static int write_page(struct run_ctx *x, void *page, uint32_t seq, uint32_t layer, uint32_t i,
                      uint32_t nt)
{
    memset(x->stage, 0, x->pb);
    run_fill_page(&x->sh, x->o->seed, seq, layer, i, nt, 0, x->sh.kv_heads, x->stage);
    return page_copy(x, true, page, x->stage, x->pb);
}

int run_prefill(struct run_ctx *x)
{
    const struct run_opts *o = x->o;
    uint32_t pt = x->sh.page_tokens;
    uint32_t npages = (uint32_t)((o->context + pt - 1) / pt);
    for (uint32_t l = 0; l < x->layers; l++)
        for (uint32_t s = 0; s < o->batch; s++)
            for (uint32_t i = 0, gone = 0; i < npages; i++) {
                kvt_key k = { run_seq_id(s), l, i };
                void *p;
                int rc = cli_stop_check(); /* SIGINT, SIGTERM: no page is held here */
                if (rc == 0)
                    rc = kvt_create(x->e, k, &p);
                if (rc)
                    return rc;
                uint32_t nt = o->context - (uint64_t)i * pt < pt ? (uint32_t)(o->context - (uint64_t)i * pt) : pt;
                if ((rc = write_page(x, p, s, l, i, nt)) || (rc = kvt_release(x->e, &k, 1, 1)))
                    return rc;
                /* A window drops the pages it has passed as the prefill goes
                 * (so that it never holds more than the window's), and at the
                 * end those behind the first decode step's window. */
                uint32_t to = attn_first_page(&x->sh, i + 1 < npages ? (i + 1) * pt
                                                                     : (uint32_t)o->context + 1);
                if ((rc = drop_pages(x, s, l, gone, to)))
                    return rc;
                gone = to > gone ? to : gone;
            }
    return 0;
}

static void progress(const struct run_opts *o, uint32_t step, double elapsed)
{
    if (!o->progress)
        return;
    double tps = elapsed > 0 ? (double)step * o->batch / elapsed : 0;
    if (isatty(2)) {
        int w = 30, fill = (int)((double)step / o->tokens * w);
        fprintf(stderr, "\r  [%.*s%*s] step %u/%u  %.1f tokens/s ", fill,
                "##############################", w - fill, "", step, o->tokens, tps);
        if (step == o->tokens)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "  step %u/%u  %.2f s  %.1f tokens/s\n", step, o->tokens, elapsed, tps);
    }
    fflush(stderr);
}

/* The test hook of --corrupt-step: flips a bit of element 0 of kv head 0's
 * K row of the first token the window holds in the page: in fp32 and bf16
 * an exponent bit (the element's top byte holds the sign and the
 * exponent's upper bits), in a quantised element a code's lowest bit. */
static int corrupt(struct run_ctx *x, void *page, uint32_t n)
{
    const struct attn_shape *s = &x->sh;
    uint8_t b;
    size_t off = attn_row_off(s, 0, 0, attn_first_token(s, n) % s->page_tokens);
    if (!attn_quantised(s))
        off += attn_row_bytes(s) / s->head_dim - 1;
    int rc = page_copy(x, false, &b, (char *)page + off, 1);
    b ^= 0x01;
    return rc ? rc : page_copy(x, true, (char *)page + off, &b, 1);
}

/* Acquires pages [c0, c1) of g; the token at pos goes into the tail page
 * (np - 1) when it is among them and not a fresh page (written whole). */
static int acquire_chunk(struct run_ctx *x, struct run_result *r, struct group *g, uint32_t c0,
                         uint32_t c1)
{
    double t0 = util_now();
    int rc = kvt_acquire(x->e, g->keys + c0, c1 - c0, g->ptrs + c0);
    double t1 = util_now();
    r->acquire_s += t1 - t0;
    if (x->o->trace_path)
        trace_span(&x->trace, "acquire", "wait", 1, t0, t1, g->step, g->s, g->l);
    if (rc)
        return rc;
    if (c1 == g->np && !g->fresh && (rc = write_token(x, g->ptrs[g->np - 1], g->s, g->l, g->pos)))
        return rc;
    if (c0 == 0 && x->o->corrupt_step == (int64_t)g->step && g->s == 0 && g->l == 0)
        rc = corrupt(x, g->ptrs[0], g->n);
    return rc;
}

int run_release_chunk(struct run_ctx *x, struct group *g, uint32_t c0, uint32_t c1)
{
    uint32_t clean = c1 == g->np ? c1 - c0 - 1 : c1 - c0;
    int rc = kvt_release(x->e, g->keys + c0, clean, 0);
    if (!rc && c1 == g->np)
        rc = kvt_release(x->e, g->keys + g->np - 1, 1, !g->fresh);
    return rc;
}

/* A group's start: the position told, a new tail page made when the token
 * opens one, and its first chunk acquired (the whole group on the GPU). */
static int group_begin(struct run_ctx *x, struct run_result *r, struct group *g)
{
    uint32_t pt = x->sh.page_tokens;
    g->pos = (uint32_t)x->o->context + g->step;
    g->n = g->pos + 1;
    g->p0 = attn_first_page(&x->sh, g->n);
    g->np = (g->n + pt - 1) / pt - g->p0;
    g->fresh = g->pos % pt == 0;
    int rc = kvt_advance(x->e, run_seq_id(g->s), g->l);
    if (rc)
        return rc;
    if (g->fresh) {
        kvt_key k = { run_seq_id(g->s), g->l, g->pos / pt };
        void *p;
        if ((rc = kvt_create(x->e, k, &p)))
            return rc;
        /* pos opens the page: it is the page's token 0, written with it */
        if ((rc = write_page(x, p, g->s, g->l, g->pos / pt, 1)) ||
            (rc = kvt_release(x->e, &k, 1, 1)))
            return rc;
    }
    for (uint32_t i = 0; i < g->np; i++)
        g->keys[i] = (kvt_key){ run_seq_id(g->s), g->l, g->p0 + i };
    uint32_t C = x->gpu ? g->np : run_chunk_pages(x); /* the GPU: one kernel over the group */
    return acquire_chunk(x, r, g, 0, C < g->np ? C : g->np);
}

/* Acquires the rest of g's pages a chunk at a time from acq, handing each
 * chunk to the feed, and releases what every head is done with as it goes
 * (the tail, written, at the end), for the prefetcher's room. *acq and
 * *rel: pages acquired and released so far. */
static int feed_chunks(struct run_ctx *x, struct run_result *r, struct group *g, uint32_t *acq,
                       uint32_t *rel)
{
    uint32_t C = run_chunk_pages(x);
    while (*acq < g->np) {
        uint32_t b = *acq + C < g->np ? *acq + C : g->np;
        int rc = acquire_chunk(x, r, g, *acq, b);
        if (rc)
            return rc;
        *acq = b;
        uint32_t m = feed_ready(&x->feed, b);
        m = m < g->np - 1 ? m : g->np - 1;
        if (m > *rel && (rc = kvt_release(x->e, g->keys + *rel, m - *rel, 0)))
            return rc;
        *rel = m > *rel ? m : *rel;
    }
    return 0;
}

/* The attention of g on the CPU, whose first chunk is acquired, then next's
 * begin (next NULL: none): a pipeline over chunks of g's pages, chunk i
 * computed by the team while chunk i + 1 is acquired (for the last chunk:
 * while next begins), each released as soon as it is done
 * (docs/performance.md#attention-feed). The fold is page by page either
 * way, so the bits are those of a whole group. */
static int group_run_cpu(struct run_ctx *x, struct run_result *r, struct group *g,
                         struct group *next)
{
    struct run_feed *f = &x->feed;
    uint32_t C = run_chunk_pages(x), acq = C < g->np ? C : g->np; /* group_begin took the first */
    uint32_t rel = 0;
    feed_begin(f, g->ptrs, g->p0, acq);
    /* With --nice 0 the caller computes a part itself, inside the start,
     * and could not feed the group while in it: the whole group comes in
     * first (the chunks, before the start after them). */
    bool bg = feed_background(f), started = bg;
    double t2 = util_now();
    if (bg)
        feed_start(f, g->n, g->s, g->l, x->o->seed);
    int rc = feed_chunks(x, r, g, &acq, &rel);
    if (!bg && !rc) {
        t2 = util_now();
        feed_start(f, g->n, g->s, g->l, x->o->seed);
        started = true;
    }
    if (!rc && next)
        rc = group_begin(x, r, next);
    if (rc)
        feed_abort(f);
    double t3 = started ? feed_join(f) : t2;
    /* The compute: the busiest part's time folding pages, not the waits for
     * them (the job's span holds both). */
    r->compute_s += feed_busiest(f);
    r->compute_cpu_s += feed_cpu(f);
    if (x->o->trace_path)
        trace_span(&x->trace, "attention", "compute", TRACE_ATTN_TID, t2, t3, g->step, g->s,
                   g->l);
    int rr = acq == g->np ? run_release_chunk(x, g, rel, acq)
                          : kvt_release(x->e, g->keys + rel, acq - rel, 0);
    return rc ? rc : rr;
}

/* The attention of g on the GPU over the whole group, with next's begin
 * (its acquire: copies up, bookkeeping) while the kernel computes. */
static int group_run_gpu(struct run_ctx *x, struct run_result *r, struct group *g,
                         struct group *next)
{
    double t0;
    int rc = run_gpu_launch(x, g, &t0);
    if (rc) {
        run_release_chunk(x, g, 0, g->np);
        return rc;
    }
    if (next)
        rc = group_begin(x, r, next);
    int rf = run_gpu_finish(x, r, g, t0);
    return rc ? rc : rf;
}

/* The attention of g, then next's begin: on the GPU over the whole group,
 * or on the CPU chunk by chunk. */
static int group_run(struct run_ctx *x, struct run_result *r, struct group *g,
                     struct group *next)
{
    run_fill_query(&x->sh, x->o->seed, g->s, g->l, g->pos, x->feed.q);
    return x->gpu ? group_run_gpu(x, r, g, next) : group_run_cpu(x, r, g, next);
}

static uint64_t *hash_slot(const struct run_ctx *x, uint32_t step, uint32_t layer, uint32_t seq)
{
    return x->hashes + (((size_t)step * x->layers + layer) * x->o->batch + seq) * x->sh.q_heads;
}

static void group_hash(struct run_ctx *x, const struct group *g)
{
    uint64_t *hs = hash_slot(x, g->step, g->l, g->s);
    const uint32_t VD = attn_vdim(&x->sh);
    for (uint32_t qh = 0; qh < x->sh.q_heads; qh++)
        hs[qh] = run_hash_head(x->feed.out + (size_t)qh * VD, VD);
}

/* The bonus trace rows: cumulative bytes per link after each layer. */
static void trace_links(struct run_ctx *x, const kvt_stats *s0)
{
    kvt_stats s;
    kvt_get_stats(x->e, &s);
    double now = util_now();
    trace_counter(&x->trace, "dram->hbm bytes", now, "bytes", (double)(s.bytes_up[0] - s0->bytes_up[0]));
    trace_counter(&x->trace, "hbm->dram bytes", now, "bytes", (double)(s.bytes_down[0] - s0->bytes_down[0]));
    trace_counter(&x->trace, "ssd->dram bytes", now, "bytes", (double)(s.bytes_up[1] - s0->bytes_up[1]));
    trace_counter(&x->trace, "dram->ssd bytes", now, "bytes", (double)(s.bytes_down[1] - s0->bytes_down[1]));
    trace_counter(&x->trace, "stall ms", now, "ms", (double)(s.stall_ns - s0->stall_ns) / 1e6);
}

int run_decode(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    kvt_stats s0, s1;
    struct kvt_tool_disk k0, k1;
    kvt_get_stats(x->e, &s0);
    kvt_tool_disk(x->e, &k0);
    double c0 = util_process_cpu();
    double t0 = util_now();
    /* Groups in compute order: step, layer, sequence (layer-major, as the
     * schedule says). Each group's first pages are acquired before the one
     * before it has finished (group_run). */
    struct group gs[2] = { { .keys = x->keys, .ptrs = x->ptrs },
                           { .keys = x->keys2, .ptrs = x->ptrs2 } };
    uint64_t total = (uint64_t)o->tokens * x->layers * o->batch;
    struct group *g = &gs[0], *next = &gs[1];
    g->step = g->l = g->s = 0;
    int rc = group_begin(x, r, g);
    for (uint64_t i = 0; i < total && !rc; i++) {
        bool more = i + 1 < total;
        /* SIGINT, SIGTERM: g's first chunk is held, which kvt_close lets go. */
        if ((rc = cli_stop_check()) != 0)
            break;
        if (more) {
            next->s = g->s + 1 < o->batch ? g->s + 1 : 0;
            next->l = next->s ? g->l : (g->l + 1 < x->layers ? g->l + 1 : 0);
            next->step = next->s || next->l ? g->step : g->step + 1;
        }
        rc = group_run(x, r, g, more ? next : NULL);
        /* The page the window leaves behind for g's next step, if it does:
         * gone from every tier. Not before: with one sequence and one layer
         * the next group is g's (sequence, layer), begun while g's pages
         * are still pinned; now they are released, and that group's start
         * past them. */
        if (!rc && g->step + 1 < o->tokens)
            rc = drop_pages(x, g->s, g->l, g->p0, attn_first_page(&x->sh, g->n + 1));
        if (rc)
            break;
        group_hash(x, g);
        run_err_keep(x, g);
        if (o->trace_path && g->s + 1 == o->batch)
            trace_links(x, &s0);
        if (g->s + 1 == o->batch && g->l + 1 == x->layers)
            progress(o, g->step + 1, util_now() - t0);
        struct group *t = g;
        g = next;
        next = t;
    }
    r->wall_s = util_now() - t0;
    r->process_cpu_s = util_process_cpu() - c0;
    kvt_get_stats(x->e, &s1);
    kvt_tool_disk(x->e, &k1);
    r->disk_read = k1.read - k0.read;
    r->disk_written = k1.written - k0.written;
    r->codec_s = (double)(k1.codec_ns - k0.codec_ns) / 1e9;
    r->codec_cpu_s = (double)(k1.codec_cpu_ns - k0.codec_cpu_ns) / 1e9;
    r->crc_cpu_s = (double)(k1.crc_cpu_ns - k0.crc_cpu_ns) / 1e9;
    r->decoders = k1.decoders;
    r->pinned = feed_pinned(&x->feed);
    r->end = s1;
    kvt_stats *d = &r->delta;
    *d = s1;
    for (int t = 0; t < KVT_TIERS; t++) {
        d->hits[t] -= s0.hits[t];
        d->misses[t] -= s0.misses[t];
        d->bytes_up[t] -= s0.bytes_up[t];
        d->bytes_down[t] -= s0.bytes_down[t];
    }
    d->stall_ns -= s0.stall_ns;
    d->prefetch_pages -= s0.prefetch_pages;
    d->prefetch_wasted -= s0.prefetch_wasted;
    r->stall_s = (double)d->stall_ns / 1e9;
    return rc;
}

/* A quantised dtype's error: the outputs of a group (bit-exact against the
 * quantised reference: the decode's own) against the bf16 reference's,
 * into the sums of squares (*dd of differences, *rr of the bf16 outputs)
 * and r->dt_max_abs. */
static void group_error(const struct run_ctx *x, struct run_result *r, double *dd, double *rr)
{
    size_t n = (size_t)x->sh.q_heads * attn_vdim(&x->sh);
    for (size_t i = 0; i < n; i++) {
        double d = (double)x->feed.out[i] - (double)x->out_bf16[i];
        *dd += d * d;
        *rr += (double)x->out_bf16[i] * x->out_bf16[i];
        r->dt_max_abs = fabs(d) > r->dt_max_abs ? fabs(d) : r->dt_max_abs;
    }
}

/* One step's groups against the reference: 0, or 1 at the first mismatch
 * (r->bad_*). With a quantised dtype, the bf16 reference too, its error
 * summed into dd and rr (the step's). */
static int verify_step(struct run_ctx *x, struct run_result *r, uint32_t step, bool lossy,
                       double *dd, double *rr)
{
    const struct run_opts *o = x->o;
    const uint32_t VD = attn_vdim(&x->sh);
    for (uint32_t l = 0; l < x->layers; l++)
        for (uint32_t s = 0; s < o->batch; s++) {
            uint32_t pos = (uint32_t)o->context + step;
            run_fill_query(&x->sh, o->ref_seed, s, l, pos, x->feed.q);
            feed_reference(&x->feed, &x->sh, x->feed.out, pos + 1, s, l, o->ref_seed);
            if (lossy) { /* a lossy codec: measured against the reference, not hashed */
                run_err_check(x, r, step, l, s);
                continue;
            }
            const uint64_t *hs = hash_slot(x, step, l, s);
            for (uint32_t qh = 0; qh < x->sh.q_heads; qh++)
                if (hs[qh] != run_hash_head(x->feed.out + (size_t)qh * VD, VD)) {
                    r->bad_step = step;
                    r->bad_seq = s;
                    r->bad_layer = l;
                    r->bad_head = qh;
                    return 1;
                }
            if (attn_quantised(&x->sh)) {
                feed_reference(&x->feed, &x->sh_bf16, x->out_bf16, pos + 1, s, l, o->ref_seed);
                group_error(x, r, dd, rr);
            }
        }
    return 0;
}

/* The RMS relative error a quantised dtype may show against bf16 (see
 * docs/run.md#quantised-kv: the errors measured, and these bounds). */
static double dtype_tolerance(uint32_t dtype)
{
    switch (dtype) {
    case ATTN_FP8: return 0.09;
    case ATTN_INT8: return 0.02;
    case ATTN_INT4: return 0.25;
    default: return 0;
    }
}

/* The reference pass: no kvtier, pages regenerated per thread, over the
 * steps o->verify_every picks (the first and the last always: the last has
 * seen every page the decode wrote). Returns 0, 1 at the first mismatch
 * (r->bad_*) or, for a quantised dtype, an error beyond its tolerance, or
 * -EINTR when a signal stops the command; r->verified_steps counts the
 * steps checked in full. */
int run_verify(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    uint32_t every = o->verify_every ? o->verify_every : 1;
    bool lossy = x->outs != NULL;
    double dd = 0, rr = 0;
    r->verified_steps = 0;
    r->verified = true; /* a lossy codec's steps clear it (run_err_step_done) */
    r->dt_tol = dtype_tolerance(x->sh.dtype);
    for (uint32_t step = 0; step < o->tokens; step++) {
        if (step % every && step + 1 < o->tokens)
            continue;
        if (cli_stopped())
            return -EINTR;
        double sdd = 0, srr = 0;
        if (verify_step(x, r, step, lossy, &sdd, &srr))
            return 1;
        if (lossy)
            run_err_step_done(x, r, step);
        double step_rel = srr > 0 ? sqrt(sdd / srr) : 0;
        r->dt_rms_rel_step = step_rel > r->dt_rms_rel_step ? step_rel : r->dt_rms_rel_step;
        dd += sdd;
        rr += srr;
        r->verified_steps++;
    }
    r->dt_rms_rel = rr > 0 ? sqrt(dd / rr) : 0;
    if (lossy)
        return r->verified ? 0 : 1;
    return attn_quantised(&x->sh) && r->dt_rms_rel_step > r->dt_tol ? 1 : 0;
}
