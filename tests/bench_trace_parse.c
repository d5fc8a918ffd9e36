/*
 * bench_trace_parse.c — the time to read a Mooncake JSONL trace
 * (pfx_trace_read, tools/prefix/trace.c), the parse alone: the file read
 * REPS times (default 5), the median and the range printed. Not a test:
 * built on demand (cmake --build build --target bench_trace_parse), for
 * docs/json.md.
 *
 *   build/tests/bench_trace_parse TRACE.jsonl [REPS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/prefix/trace.h"
#include "tools/util/util.h"

int main(int argc, char **argv)
{
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (argc < 2 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: bench_trace_parse TRACE.jsonl [REPS (1..1000)]\n");
        return 2;
    }
    double *s = calloc((size_t)reps, sizeof(*s)), lo, hi;
    struct pfx_trace t = { 0 };
    size_t refs = 0, reqs = 0;
    for (int i = 0; s && i < reps; i++) {
        FILE *f = fopen(argv[1], "r");
        if (!f) {
            fprintf(stderr, "bench_trace_parse: %s: %s\n", argv[1], strerror(errno));
            return 1;
        }
        char err[256] = "";
        double t0 = util_now();
        int r = pfx_trace_read(f, &t, err, sizeof err);
        s[i] = util_now() - t0;
        fclose(f);
        if (r) {
            fprintf(stderr, "bench_trace_parse: %s: %s (%s)\n", argv[1], err, strerror(-r));
            return 1;
        }
        refs = t.n_hash;
        reqs = t.n_req;
        pfx_trace_free(&t);
    }
    if (!s)
        return 1;
    double m = util_median(s, (size_t)reps, &lo, &hi);
    printf("%s: %zu requests, %zu references: parse %.2f ms (median of %d, %.2f-%.2f)\n", argv[1],
           reqs, refs, m * 1e3, reps, lo * 1e3, hi * 1e3);
    free(s);
    return 0;
}
