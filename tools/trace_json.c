/*
 * trace_json.c — Chrome trace-event JSON writer (see trace_json.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/trace_json.h"

void trace_init(struct trace_json *t, double t0)
{
    memset(t, 0, sizeof(*t));
    t->t0 = t0;
}

static struct trace_ev *trace_push(struct trace_json *t)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        struct trace_ev *ev = realloc(t->ev, cap * sizeof(*ev));
        if (!ev) {
            t->oom = 1;
            return NULL;
        }
        t->ev = ev;
        t->cap = cap;
    }
    struct trace_ev *e = &t->ev[t->n++];
    memset(e, 0, sizeof(*e));
    return e;
}

void trace_span(struct trace_json *t, const char *name, const char *cat, uint32_t tid,
                double t_start, double t_end, uint32_t step, uint32_t seq, uint32_t layer)
{
    struct trace_ev *e = trace_push(t);
    if (!e)
        return;
    e->name = name;
    e->cat = cat;
    e->ph = 'X';
    e->tid = tid;
    e->ts_us = (t_start - t->t0) * 1e6;
    e->dur_us = (t_end - t_start) * 1e6;
    e->step = step;
    e->seq = seq;
    e->layer = layer;
}

void trace_counter(struct trace_json *t, const char *name, double at, const char *series,
                   double value)
{
    struct trace_ev *e = trace_push(t);
    if (!e)
        return;
    e->name = name;
    e->cat = "stats";
    e->ph = 'C';
    e->ts_us = (at - t->t0) * 1e6;
    e->arg_name = series;
    e->arg = value;
}

int trace_write(const struct trace_json *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "{\"traceEvents\": [\n");
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
               "\"args\": {\"name\": \"kvtier run\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"engine loop\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 2, "
               "\"args\": {\"name\": \"links (from kvt_stats)\"}}");
    for (size_t i = 0; i < t->n; i++) {
        const struct trace_ev *e = &t->ev[i];
        if (e->ph == 'X')
            fprintf(f,
                    ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                    "\"dur\": %.3f, \"pid\": 1, \"tid\": %u, \"args\": {\"step\": %u, "
                    "\"seq\": %u, \"layer\": %u}}",
                    e->name, e->cat, e->ts_us, e->dur_us, e->tid, e->step, e->seq, e->layer);
        else
            fprintf(f,
                    ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"C\", \"ts\": %.3f, "
                    "\"pid\": 1, \"tid\": 2, \"args\": {\"%s\": %.0f}}",
                    e->name, e->cat, e->ts_us, e->arg_name, e->arg);
    }
    fprintf(f, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"truncated\": %s}}\n",
            t->oom ? "true" : "false");
    int bad = ferror(f);
    if (fclose(f) || bad)
        return -EIO;
    return 0;
}

void trace_free(struct trace_json *t)
{
    free(t->ev);
    memset(t, 0, sizeof(*t));
}
