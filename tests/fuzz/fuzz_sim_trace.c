/*
 * fuzz_sim_trace.c — `kvtier sim --trace`'s text traces (tools/sim/trace.c
 * sim_trace_read), then the checks of a trace's records against each other
 * (tools/sim/world.c sim_world_build), which `kvtier sim` runs next.
 *
 * Rules: a trace is read (0) or refused with -EINVAL (or -E2BIG, a line
 * past SIM_MAX_LINE) and a message naming the line ("line N: ...") or saying the file is empty or ends early; a
 * trace read is written (sim_trace_write) and read again to the same
 * headers and records; the world is built or refused with -EINVAL and a
 * message naming the line. Memory is the fuzzer's -rss_limit_mb.
 */
#include "tests/fuzz/fuzz.h"
#include "tools/sim/sim.h"

static bool said_why(const char *err)
{
    return !strncmp(err, "line ", 5) || !strncmp(err, "empty file", 10);
}

static void check_same(const struct sim_trace *a, const struct sim_trace *b)
{
    fuzz_check(a->page_bytes == b->page_bytes && a->has_schedule == b->has_schedule &&
                   a->n == b->n && a->accesses == b->accesses && a->steps == b->steps,
               "a trace written reads back with the same headers and counts");
    if (a->has_schedule)
        fuzz_check(a->order == b->order && a->layers == b->layers &&
                       a->window_pages == b->window_pages && a->sink_pages == b->sink_pages &&
                       a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, a->n_ids * sizeof(*a->ids)),
                   "a schedule written reads back the same");
    for (size_t i = 0; i < a->n; i++)
        fuzz_check(a->rec[i].kind == b->rec[i].kind && a->rec[i].id == b->rec[i].id &&
                       a->rec[i].layer == b->rec[i].layer && a->rec[i].index == b->rec[i].index,
                   "a record written reads back the same");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "", err2[512] = "";
    struct sim_trace t, t2;
    /* fmemopen refuses a zero-length buffer; an empty file is "" then. */
    FILE *f = fmemopen(size ? (void *)data : (void *)"", size ? size : 1, "r");
    fuzz_check(f != NULL, "fmemopen");
    if (!size)
        fgetc(f);
    int r = sim_trace_read(f, &t, err, sizeof err);
    fclose(f);
    fuzz_check(r == 0 || r == -EINVAL || r == -E2BIG, "a trace is read or refused");
    if (r) {
        fuzz_check(said_why(err), "a refused trace says where");
        fuzz_check(t.n == 0 && t.rec == NULL && t.ids == NULL, "a refused trace is left empty");
        return 0;
    }

    char *text = NULL;
    size_t len = 0;
    FILE *w = open_memstream(&text, &len);
    fuzz_check(w && sim_trace_write(w, &t) == 0, "a trace read can be written");
    fclose(w);
    f = fmemopen(text, len, "r");
    fuzz_check(f && sim_trace_read(f, &t2, err2, sizeof err2) == 0, "a trace written reads back");
    fclose(f);
    free(text);
    check_same(&t, &t2);
    sim_trace_free(&t2);

    struct sim_world *world = NULL;
    err[0] = 0;
    r = sim_world_build(&t, &world, err, sizeof err);
    fuzz_check(r == 0 || r == -EINVAL, "a trace's records agree or are refused");
    fuzz_check(r == 0 || said_why(err), "a refused world says where");
    if (r == 0) {
        fuzz_check(sim_world_max_group(world) <= t.n,
                   "a group holds no more pages than the trace names");
        sim_world_free(world);
    }
    sim_trace_free(&t);
    return 0;
}
