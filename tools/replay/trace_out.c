/*
 * trace_out.c — `kvtier replay --trace FILE`: Chrome trace-event JSON
 * (Perfetto, chrome://tracing), kept in tools/run/trace_json.c's event
 * store: each request's calls on the caller's track (exists, get dram, get
 * ssd, put; with --concurrency, worker k > 0 on a track of its own after
 * the engine's), the engine's completed transfers on one track per link,
 * and the running hit fraction as a counter.
 */
#include <errno.h>
#include <stdio.h>

#include "tools/replay/replay_priv.h"

/* A call of request req on worker w's track: step carries the request, seq
 * the blocks it hit (or got), layer the blocks of the call's chain; written
 * under those names. */
void replay_trace_span(struct replay_ctx *x, const struct replay_worker *w, const char *name,
                       double t0, double t1, uint64_t req, uint32_t hit, uint32_t blocks)
{
    trace_span(&x->trace, name, "request", w->tid, t0, t1, (uint32_t)req, hit, blocks);
}

/* A request's span: step carries the request, seq the blocks hit, layer
 * the blocks of the call. */
static void replay_span_args(FILE *f, const struct trace_ev *e)
{
    fprintf(f, "\"request\": %u, \"hit_blocks\": %u, \"blocks\": %u", e->step + 1, e->seq,
            e->layer);
}

int replay_trace_write(const struct replay_ctx *x, const char *path)
{
    static const struct trace_names names = {
        .process = "kvtier replay", .caller = "requests (the caller)",
        .counters = "prefix hits", .attention = NULL,
        .counter_fmt = "%.4f", .span_args = replay_span_args,
    };
    return trace_write_named(&x->trace, path, &names);
}
