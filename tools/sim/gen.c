/*
 * gen.c — a decode workload as a trace (struct sim_gen in tools/sim/sim.h):
 * what an engine running the decode would log.
 */
#include <errno.h>
#include <stdlib.h>

#include "tools/sim/sim_priv.h"

/* Pages of one (sequence, layer) that step s reads: the token of step s is
 * token context + s, and its page exists (the prefill made the first ones;
 * the steps make the rest, a step ahead). */
static uint64_t gen_pages(const struct sim_gen *g, uint64_t step)
{
    return (g->context + step) / g->page_tokens + 1;
}

uint64_t sim_gen_pages_read(const struct sim_gen *g, uint64_t step)
{
    uint64_t p = gen_pages(g, step);
    if (!g->window_pages || (uint64_t)g->sink_pages + g->window_pages >= p)
        return p;
    return (uint64_t)g->sink_pages + g->window_pages;
}

static int gen_check(const struct sim_gen *g)
{
    if (!g->layers || !g->batch || !g->context || !g->tokens || !g->page_tokens ||
        !g->page_bytes)
        return -EINVAL;
    if (g->order != KVT_ORDER_LAYER_MAJOR && g->order != KVT_ORDER_SEQ_MAJOR)
        return -EINVAL;
    if (g->context > UINT64_MAX / 2 || g->tokens > UINT64_MAX / 2 ||
        gen_pages(g, g->tokens) >= UINT32_MAX)
        return -E2BIG;
    /* Records: per step and group an advance, at most one new, the reads;
     * one step record per step. Doubles: an estimate that cannot overflow. */
    double recs = (double)g->tokens *
                  ((double)g->batch * g->layers * (double)(sim_gen_pages_read(g, g->tokens - 1) + 2) + 1);
    return recs > (double)SIM_MAX_RECORDS ? -E2BIG : 0;
}

/* advance, the reads, and when the next token starts a page, that page:
 * made once this one's attention is done, as an engine that keeps a
 * writable tail allocates the next one. */
static int gen_group(struct sim_trace *t, const struct sim_gen *g, uint64_t step, uint64_t id,
                     uint32_t layer)
{
    uint64_t p = gen_pages(g, step);
    int e = sim_trace_push(t, SIM_ADVANCE, id, layer, 0, 0);
    bool all = !g->window_pages || (uint64_t)g->sink_pages + g->window_pages >= p;
    for (uint64_t i = 0; !e && i < p; i++) {
        if (!all && i >= g->sink_pages && i < p - g->window_pages)
            i = p - g->window_pages; /* skip to the window */
        e = sim_trace_push(t, SIM_ACCESS, id, layer, (uint32_t)i, 0);
    }
    if (!e && (g->context + step + 1) % g->page_tokens == 0)
        e = sim_trace_push(t, SIM_NEW, id, layer, (uint32_t)p, 0);
    return e;
}

int sim_generate(const struct sim_gen *g, struct sim_trace *t)
{
    *t = (struct sim_trace){ 0 };
    int e = gen_check(g);
    if (e)
        return e;
    t->page_bytes = g->page_bytes;
    t->has_schedule = true;
    t->order = g->order;
    t->layers = g->layers;
    t->window_pages = g->window_pages;
    t->sink_pages = g->window_pages ? g->sink_pages : 0;
    t->n_ids = g->batch;
    t->ids = malloc(g->batch * sizeof(uint64_t));
    if (!t->ids)
        return -ENOMEM;
    for (uint32_t s = 0; s < g->batch; s++)
        t->ids[s] = s;
    uint64_t groups = (uint64_t)g->batch * g->layers;
    for (uint64_t step = 0; !e && step < g->tokens; step++) {
        for (uint64_t k = 0; !e && k < groups; k++) {
            bool lm = g->order == KVT_ORDER_LAYER_MAJOR;
            uint64_t seq = lm ? k % g->batch : k / g->layers;
            uint32_t layer = (uint32_t)(lm ? k / g->batch : k % g->layers);
            e = gen_group(t, g, step, seq, layer);
        }
        if (!e)
            e = sim_trace_push(t, SIM_STEP, 0, 0, 0, 0);
    }
    if (e)
        sim_trace_free(t);
    return e;
}
