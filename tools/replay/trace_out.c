/*
 * trace_out.c — `kvtier replay --trace FILE`: Chrome trace-event JSON
 * (Perfetto, chrome://tracing), kept in tools/run/trace_json.c's event
 * store: each request's calls on the caller's track (exists, get dram, get
 * ssd, put), the engine's completed transfers on one track per link, and
 * the running hit fraction as a counter.
 */
#include <errno.h>
#include <stdio.h>

#include "tools/replay/replay_priv.h"

/* A call of request req: step carries the request, seq the blocks it hit
 * (or got), layer the blocks of the call's chain; written under those names. */
void replay_trace_span(struct replay_ctx *x, const char *name, double t0, double t1,
                       uint64_t req, uint32_t hit, uint32_t blocks)
{
    trace_span(&x->trace, name, "request", 1, t0, t1, (uint32_t)req, hit, blocks);
}

static void write_meta(FILE *f)
{
    static const char *const link_names[TRACE_LINKS] = { "dram->hbm copies", "hbm->dram copies",
                                                          "ssd->dram reads", "dram->ssd writes" };
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
               "\"args\": {\"name\": \"kvtier replay\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"requests (the caller)\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 2, "
               "\"args\": {\"name\": \"prefix hits\"}}");
    for (int l = 0; l < TRACE_LINKS; l++)
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
                "\"args\": {\"name\": \"%s\"}}",
                TRACE_LINK_TID + l, link_names[l]);
}

static void write_event(FILE *f, const struct trace_ev *e)
{
    if (e->ph == 'X' && e->link)
        fprintf(f,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                "\"dur\": %.3f, \"pid\": 1, \"tid\": %u, \"args\": {\"pages\": %u, "
                "\"bytes\": %.0f}}",
                e->name, e->cat, e->ts_us, e->dur_us, e->tid, e->pages, e->bytes);
    else if (e->ph == 'X')
        fprintf(f,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                "\"dur\": %.3f, \"pid\": 1, \"tid\": %u, \"args\": {\"request\": %u, "
                "\"hit_blocks\": %u, \"blocks\": %u}}",
                e->name, e->cat, e->ts_us, e->dur_us, e->tid, e->step + 1, e->seq, e->layer);
    else
        fprintf(f,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"C\", \"ts\": %.3f, "
                "\"pid\": 1, \"tid\": 2, \"args\": {\"%s\": %.4f}}",
                e->name, e->cat, e->ts_us, e->arg_name, e->arg);
}

int replay_trace_write(const struct replay_ctx *x, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "{\"traceEvents\": [\n");
    write_meta(f);
    for (size_t i = 0; i < x->trace.n; i++)
        write_event(f, &x->trace.ev[i]);
    fprintf(f, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"truncated\": %s}}\n",
            x->trace.oom ? "true" : "false");
    int bad = ferror(f);
    if (fclose(f) || bad)
        return -EIO;
    return 0;
}
