/*
 * test_slowdisk.c — `kvtier run` (run_exec, in this process) over a slow
 * disk: every request of the engine's SSD tier completes no sooner than a
 * fixed latency after it was submitted. The run must complete and verify
 * bit-exactly at every latency: a slow disk is waited for, never timed out,
 * never a deadlock. The stall grows with the latency; the test prints it
 * (latency -> stall / wall) but asserts behaviour only.
 *
 *   test_slowdisk            latencies 0 and 50 ms (the suite)
 *   test_slowdisk --table    0, 1, 5, 20, 50 and 200 ms (docs/reliability.md)
 *
 * The slow disk is a kvt_io_ops of its own (psync underneath) given to the
 * faulty back-end as its inner back-end with no fault armed, through the
 * engine's test hooks (run_opts.hooks): the library is not changed for it.
 */
#include <pthread.h>
#include <time.h>

#include "helpers.h"
#include "lab/lab.h"
#include "io/io.h"
#include "api/api.h"
#include "tools/run/run.h"

/* ------------------------------------------------------ the slow back-end */

static uint64_t slow_delay_ns; /* one engine at a time: set before its open */

struct pend {
    struct kvt_io_req *req;
    uint64_t due;  /* not handed back before (CLOCK_MONOTONIC ns) */
    bool done;     /* the inner back-end completed it */
};

struct slow {
    const struct kvt_io_ops *inner;
    void *ipriv;
    pthread_mutex_t mu;          /* guards pend: submit and reap may run on two threads */
    struct pend *pend;           /* submitted, not yet handed back */
    size_t n, cap;
    struct kvt_io_req **tmp;     /* the inner back-end's completions (reap's thread only) */
    size_t tmp_cap;
    uint64_t requests;
};

static int slow_open(const struct kvt_io_params *p, void **priv)
{
    struct slow *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->inner = &kvt_io_psync_ops;
    s->tmp_cap = p->depth ? p->depth : 32;
    s->tmp = calloc(s->tmp_cap, sizeof *s->tmp);
    int r = s->tmp ? s->inner->open(p, &s->ipriv) : -ENOMEM;
    if (r) {
        free(s->tmp);
        free(s);
        return r;
    }
    pthread_mutex_init(&s->mu, NULL);
    *priv = s;
    return 0;
}

static void slow_close(void *priv)
{
    struct slow *s = priv;
    s->inner->close(s->ipriv);
    pthread_mutex_destroy(&s->mu);
    free(s->pend);
    free(s->tmp);
    free(s);
}

/* The requests are noted (due = now + delay) before the inner back-end can
 * complete them; a refused submit takes its notes back. */
static int slow_submit(void *priv, struct kvt_io_req *const *reqs, size_t n)
{
    struct slow *s = priv;
    uint64_t due = util_now_ns() + slow_delay_ns;
    pthread_mutex_lock(&s->mu);
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + n)
            cap *= 2;
        struct pend *p = realloc(s->pend, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->mu);
            return -ENOMEM;
        }
        s->pend = p;
        s->cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        s->pend[s->n + i] = (struct pend){ reqs[i], due, false };
    s->n += n;
    s->requests += n;
    pthread_mutex_unlock(&s->mu);
    int r = s->inner->submit(s->ipriv, reqs, n);
    if (r < 0) {
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < s->n; j++)
                if (s->pend[j].req == reqs[i]) {
                    s->pend[j] = s->pend[--s->n];
                    break;
                }
        pthread_mutex_unlock(&s->mu);
    }
    return r;
}

/* Marks the inner back-end's completions done; moves those due into
 * done[got..max); returns the new got and, in *next, the earliest due time
 * of a completed request still held (0: none). Under s->mu. */
static size_t take_due(struct slow *s, size_t k, struct kvt_io_req **done, size_t got, size_t max,
                       uint64_t *next)
{
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < s->n; j++)
            if (s->pend[j].req == s->tmp[i] && !s->pend[j].done) {
                s->pend[j].done = true;
                break;
            }
    uint64_t t = util_now_ns();
    *next = 0;
    for (size_t j = 0; j < s->n && got < max;) {
        struct pend *p = &s->pend[j];
        if (p->done && p->due <= t) {
            done[got++] = p->req;
            *p = s->pend[--s->n];
            continue;
        }
        if (p->done && (!*next || p->due < *next))
            *next = p->due;
        j++;
    }
    return got;
}

static int slow_reap(void *priv, struct kvt_io_req **done, size_t max, size_t min_wait)
{
    struct slow *s = priv;
    size_t got = 0;
    for (;;) {
        int k = s->inner->reap(s->ipriv, s->tmp, s->tmp_cap, 0);
        if (k < 0)
            return k;
        uint64_t next;
        pthread_mutex_lock(&s->mu);
        got = take_due(s, (size_t)k, done, got, max, &next);
        pthread_mutex_unlock(&s->mu);
        if (got >= min_wait || got == max)
            return (int)got;
        if (next) { /* a completed request comes due: sleep until then */
            uint64_t t = util_now_ns();
            if (next > t) {
                struct timespec ts = { (time_t)((next - t) / 1000000000ull),
                                       (long)((next - t) % 1000000000ull) };
                nanosleep(&ts, NULL);
            }
            continue;
        }
        /* nothing completed yet: wait for the inner back-end */
        k = s->inner->reap(s->ipriv, s->tmp, s->tmp_cap, 1);
        if (k < 0)
            return k;
        pthread_mutex_lock(&s->mu);
        got = take_due(s, (size_t)k, done, got, max, &next);
        pthread_mutex_unlock(&s->mu);
        if (got >= min_wait || got == max)
            return (int)got;
    }
}

static size_t slow_inflight(void *priv)
{
    struct slow *s = priv;
    pthread_mutex_lock(&s->mu);
    size_t n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static const char *slow_describe(void *priv)
{
    return "psync with a fixed latency per request (test)";
}

static const struct kvt_io_ops slow_ops = {
    .name = "slow",
    .version = KVT_IO_OPS_VERSION,
    .open = slow_open,
    .close = slow_close,
    .submit = slow_submit,
    .reap = slow_reap,
    .inflight = slow_inflight,
    .describe = slow_describe,
};

/* ------------------------------------------------------------------ tests */

static bool table_mode;

/* A small run whose decode reads most pages from SSD: KV 16 MiB, DRAM 2 MiB
 * (pages of 128 KiB, acquired 8 at a time). */
static void slow_opts(struct run_opts *o)
{
    run_opts_default(o);
    o->layers = 2;
    o->batch = 2;
    o->context = 1024;
    o->tokens = 4;
    o->dram = 2u << 20;
    o->chunk_pages = 8;
    o->progress = false;
}

struct row {
    double delay_ms, stall_s, wall_s;
    uint64_t ssd_reads, ssd_writes;
};

static void run_at(double delay_ms, struct row *row)
{
    struct kvt_io_faulty plan;
    kvt_io_faulty_init(&plan, &slow_ops, NULL);
    struct kvt_test_hooks hooks = { .io = &plan };
    slow_delay_ns = (uint64_t)(delay_ms * 1e6);
    struct run_opts o;
    struct run_result r;
    slow_opts(&o);
    o.hooks = &hooks;
    int rc = run_exec(&o, &r);
    if (rc)
        print_error("run_exec at %.1f ms: %d\n", delay_ms, rc);
    assert_int_equal(rc, 0);
    assert_true(r.verified);
    /* the disk was really on the path: pages came up from it in the decode */
    assert_true(r.delta.bytes_up[KVT_TIER_DRAM] > 0);
    *row = (struct row){ delay_ms, r.stall_s, r.wall_s,
                         kvt_io_faulty_count(&plan, KVT_IOF_READ),
                         kvt_io_faulty_count(&plan, KVT_IOF_WRITE) };
    assert_true(row->ssd_reads > 0);
}

static void test_slow_disk(void **state)
{
    static const double suite[] = { 0, 50 }, table[] = { 0, 1, 5, 20, 50, 200 };
    const double *d = table_mode ? table : suite;
    size_t n = table_mode ? sizeof table / sizeof *table : sizeof suite / sizeof *suite;
    struct row rows[8];
    for (size_t i = 0; i < n; i++)
        run_at(d[i], &rows[i]);
    printf("slow disk: kvtier run --layers 2 --context 1k --tokens 4 --dram 2M --chunk-pages 8, each SSD request "
           "held for the latency\n  latency    stall      wall   stall/wall  ssd reads  writes\n");
    for (size_t i = 0; i < n; i++)
        printf("  %5.1f ms  %6.3f s  %6.3f s  %6.1f%%  %9llu  %6llu\n", rows[i].delay_ms,
               rows[i].stall_s, rows[i].wall_s,
               rows[i].wall_s > 0 ? 100 * rows[i].stall_s / rows[i].wall_s : 0,
               (unsigned long long)rows[i].ssd_reads, (unsigned long long)rows[i].ssd_writes);
}

int main(int argc, char **argv)
{
    table_mode = argc > 1 && !strcmp(argv[1], "--table");
    if (argc > 1 && !table_mode) {
        fprintf(stderr, "usage: test_slowdisk [--table]\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
