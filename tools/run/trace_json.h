/*
 * trace_json.h — Chrome trace-event JSON (opens in Perfetto and
 * chrome://tracing) for `kvtier run --trace FILE`.
 *
 * Events are kept in memory and written at the end, so tracing costs the
 * timed loop one array append per event. Names must be static strings (they
 * are stored by pointer and written unescaped: plain ASCII without quotes).
 */
#ifndef KVT_TRACE_JSON_H
#define KVT_TRACE_JSON_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

struct trace_ev {
    const char *name, *cat;
    char ph;              /* 'X' complete, 'C' counter */
    uint32_t tid;
    double ts_us, dur_us; /* dur_us: 'X' only */
    const char *arg_name; /* one numeric argument, or NULL */
    double arg;
    uint32_t step, seq, layer; /* written as args of engine-loop 'X' events */
    int link;             /* an 'X' event on a link track: args are pages and bytes */
    uint32_t pages;
    double bytes;
};

/* Tracks: 1 the engine loop (the caller's acquire waits), 2 counters,
 * TRACE_LINK_TID + KVT_XFER_* the links, TRACE_ATTN_TID the attention (the
 * pool's threads, which compute while the loop acquires: spans of one track
 * must nest, and these two overlap). */
#define TRACE_LINK_TID 3
#define TRACE_LINKS 4
#define TRACE_ATTN_TID (TRACE_LINK_TID + TRACE_LINKS)

struct trace_json {
    struct trace_ev *ev;
    size_t n, cap;
    double t0; /* seconds of util_now() that becomes ts 0 */
    int oom;   /* an append failed: the file says so in its metadata */
    pthread_mutex_t lock;  /* link spans arrive from kvtier's threads */
    double link_end[TRACE_LINKS]; /* last span's end per link track (us) */
};

void trace_init(struct trace_json *t, double t0);
/* A complete event from t_start to t_end (seconds of util_now()). */
void trace_span(struct trace_json *t, const char *name, const char *cat, uint32_t tid,
                double t_start, double t_end, uint32_t step, uint32_t seq, uint32_t layer);
/* A span on link track `link` (0..TRACE_LINKS-1) from start to end (seconds
 * of util_now()). A span that begins before the track's last one ended
 * starts at that end: spans on one track must not overlap in the format,
 * and a batch that was queued behind another only moved once that one was
 * done. Thread-safe. */
void trace_link(struct trace_json *t, int link, const char *name, double t_start, double t_end,
                uint32_t pages, double bytes);
/* A counter sample: series name, one value. */
void trace_counter(struct trace_json *t, const char *name, double at, const char *series,
                   double value);
/* Writes {"traceEvents": [...], "displayTimeUnit": "ms"} as kvtier run
 * names its tracks. Returns 0 or -errno. */
int trace_write(const struct trace_json *t, const char *path);

/* What a command calls its tracks and its spans' numbers, for
 * trace_write_named: the process, track 1 (the caller), track 2 (the
 * counters), the attention track (NULL: none), the counters' printf
 * format for a double, and the args of the caller's spans (step, seq and
 * layer under the command's own names, written without braces). */
struct trace_names {
    const char *process, *caller, *counters, *attention;
    const char *counter_fmt;
    void (*span_args)(FILE *f, const struct trace_ev *e);
};
int trace_write_named(const struct trace_json *t, const char *path, const struct trace_names *nm);
void trace_free(struct trace_json *t);

#endif
