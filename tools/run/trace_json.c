/*
 * trace_json.c — Chrome trace-event JSON writer (see trace_json.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/run/trace_json.h"

void trace_init(struct trace_json *t, double t0)
{
    memset(t, 0, sizeof(*t));
    t->t0 = t0;
    pthread_mutex_init(&t->lock, NULL);
}

/* Appends a copy of *ev. Locked by the caller: a push may move the array,
 * so an event is filled before it goes in, never through a pointer held
 * after the lock is dropped. */
static void trace_push(struct trace_json *t, const struct trace_ev *ev)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        struct trace_ev *a = realloc(t->ev, cap * sizeof(*a));
        if (!a) {
            t->oom = 1;
            return;
        }
        t->ev = a;
        t->cap = cap;
    }
    t->ev[t->n++] = *ev;
}

void trace_span(struct trace_json *t, const char *name, const char *cat, uint32_t tid,
                double t_start, double t_end, uint32_t step, uint32_t seq, uint32_t layer)
{
    struct trace_ev ev = { .name = name, .cat = cat, .ph = 'X', .tid = tid,
                           .ts_us = (t_start - t->t0) * 1e6, .dur_us = (t_end - t_start) * 1e6,
                           .step = step, .seq = seq, .layer = layer };
    pthread_mutex_lock(&t->lock);
    trace_push(t, &ev);
    pthread_mutex_unlock(&t->lock);
}

void trace_link(struct trace_json *t, int link, const char *name, double t_start, double t_end,
                uint32_t pages, double bytes)
{
    if (link < 0 || link >= TRACE_LINKS)
        return;
    pthread_mutex_lock(&t->lock);
    double ts = (t_start - t->t0) * 1e6, te = (t_end - t->t0) * 1e6;
    if (ts < t->link_end[link])
        ts = t->link_end[link];
    if (te < ts)
        te = ts;
    t->link_end[link] = te;
    struct trace_ev ev = { .name = name, .cat = link < 2 ? "copy" : "io", .ph = 'X',
                           .tid = TRACE_LINK_TID + (uint32_t)link, .ts_us = ts,
                           .dur_us = te - ts, .link = 1, .pages = pages, .bytes = bytes };
    trace_push(t, &ev);
    pthread_mutex_unlock(&t->lock);
}

void trace_counter(struct trace_json *t, const char *name, double at, const char *series,
                   double value)
{
    struct trace_ev ev = { .name = name, .cat = "stats", .ph = 'C',
                           .ts_us = (at - t->t0) * 1e6, .arg_name = series, .arg = value };
    pthread_mutex_lock(&t->lock);
    trace_push(t, &ev);
    pthread_mutex_unlock(&t->lock);
}

/* The caller's own spans as kvtier run names their numbers. */
static void run_span_args(FILE *f, const struct trace_ev *e)
{
    fprintf(f, "\"step\": %u, \"seq\": %u, \"layer\": %u", e->step, e->seq, e->layer);
}

static const struct trace_names run_names = {
    .process = "kvtier run", .caller = "engine loop",
    .counters = "bytes per link (from kvt_stats)", .attention = "attention",
    .counter_fmt = "%.0f", .span_args = run_span_args,
};

int trace_write(const struct trace_json *t, const char *path)
{
    return trace_write_named(t, path, &run_names);
}

static void write_meta(FILE *f, const struct trace_names *nm)
{
    static const char *const link_names[TRACE_LINKS] = { "dram->hbm copies", "hbm->dram copies",
                                                          "ssd->dram reads", "dram->ssd writes" };
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
               "\"args\": {\"name\": \"%s\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"%s\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 2, "
               "\"args\": {\"name\": \"%s\"}}",
            nm->process, nm->caller, nm->counters);
    for (int l = 0; l < TRACE_LINKS; l++)
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
                "\"args\": {\"name\": \"%s\"}}",
                TRACE_LINK_TID + l, link_names[l]);
    if (nm->attention)
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
                   "\"args\": {\"name\": \"%s\"}}",
                TRACE_ATTN_TID, nm->attention);
}

static void write_event(FILE *f, const struct trace_ev *e, const struct trace_names *nm)
{
    if (e->ph == 'X' && e->link) {
        fprintf(f,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                "\"dur\": %.3f, \"pid\": 1, \"tid\": %u, \"args\": {\"pages\": %u, "
                "\"bytes\": %.0f}}",
                e->name, e->cat, e->ts_us, e->dur_us, e->tid, e->pages, e->bytes);
    } else if (e->ph == 'X') {
        fprintf(f,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                "\"dur\": %.3f, \"pid\": 1, \"tid\": %u, \"args\": {",
                e->name, e->cat, e->ts_us, e->dur_us, e->tid);
        nm->span_args(f, e);
        fprintf(f, "}}");
    } else {
        fprintf(f,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"C\", \"ts\": %.3f, "
                "\"pid\": 1, \"tid\": 2, \"args\": {\"%s\": ",
                e->name, e->cat, e->ts_us, e->arg_name);
        fprintf(f, nm->counter_fmt, e->arg);
        fprintf(f, "}}");
    }
}

int trace_write_named(const struct trace_json *t, const char *path, const struct trace_names *nm)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "{\"traceEvents\": [\n");
    write_meta(f, nm);
    for (size_t i = 0; i < t->n; i++)
        write_event(f, &t->ev[i], nm);
    fprintf(f, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"truncated\": %s}}\n",
            t->oom ? "true" : "false");
    int bad = ferror(f);
    if (fclose(f) || bad)
        return -EIO;
    return 0;
}

void trace_free(struct trace_json *t)
{
    pthread_mutex_destroy(&t->lock);
    free(t->ev);
    memset(t, 0, sizeof(*t));
}
