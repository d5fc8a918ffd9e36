/*
 * test_sim.c — `kvtier sim`: the trace format, the generator, Belady's MIN
 * against a brute-force MIN, LRU's worst case, the cost model on traces small
 * enough to work out by hand, and (once the decode policy is in the build)
 * decode against MIN and LRU and the stall and step-time targets.
 *
 * The files of tools/sim/ are compiled into this program (they have no
 * main), so their functions are called directly.
 */
#include <math.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "lab/belady.h"
#include "lab/lab.h"
#include "api/api.h"
#include "tools/presets.h"
#include "tools/sim/sim.h"

/* ------------------------------------------------------------- helpers */

static int t_read_text(const char *text, struct sim_trace *t, char *err, size_t n)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    int e = sim_trace_read(f, t, err, n);
    fclose(f);
    return e;
}

/* A trace of accesses only, to pages 0..: key (7, 0, page). */
static void t_access_trace(struct sim_trace *t, const uint32_t *pages, size_t n)
{
    *t = (struct sim_trace){ .page_bytes = 4096, .n = n, .cap = n, .accesses = n };
    t->rec = calloc(n ? n : 1, sizeof(struct sim_rec));
    assert_non_null(t->rec);
    for (size_t i = 0; i < n; i++)
        t->rec[i] = (struct sim_rec){ .id = 7, .index = pages[i], .kind = SIM_ACCESS };
}

static struct sim_model t_model(uint64_t hbm_pages)
{
    return (struct sim_model){ .hbm_pages = hbm_pages, .h2d_gbps = 50, .ssd_gbps = 6,
                               .compute_s = 50e-6 };
}

static void t_run(const struct sim_trace *t, const char *policy, const struct sim_model *m,
                  struct sim_result *r)
{
    char err[320] = "";
    struct sim_world *w;
    assert_int_equal(sim_world_build(t, &w, err, sizeof err), 0);
    const struct kvt_policy_ops *ops = kvt_lab_policy_find(policy);
    assert_non_null(ops);
    int e = sim_run(w, ops, m, r, err, sizeof err);
    if (e)
        print_message("sim_run %s: %s\n", policy, err);
    assert_int_equal(e, 0);
    sim_world_free(w);
}

/* MIN by definition: on a miss with a full cache, scan ahead for the cached
 * page used furthest away. O(n^2), small traces only. */
static uint64_t brute_min(const uint32_t *seq, size_t n, uint32_t cap, uint32_t universe)
{
    bool *in = calloc(universe, sizeof(bool));
    uint32_t held = 0;
    uint64_t misses = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[seq[i]])
            continue;
        misses++;
        if (held == cap) {
            uint32_t victim = 0;
            size_t far = 0;
            for (uint32_t p = 0; p < universe; p++) {
                if (!in[p])
                    continue;
                size_t j = i + 1;
                while (j < n && seq[j] != p)
                    j++;
                if (j >= far) {
                    far = j;
                    victim = p;
                }
            }
            in[victim] = false;
            held--;
        }
        in[seq[i]] = true;
        held++;
    }
    free(in);
    return misses;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t t_rand(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng_state >> 33) % n);
}

/* ------------------------------------------------------------- traces */

static void assert_same_trace(const struct sim_trace *a, const struct sim_trace *b)
{
    assert_int_equal(a->page_bytes, b->page_bytes);
    assert_int_equal(a->has_schedule, b->has_schedule);
    assert_int_equal(a->order, b->order);
    assert_int_equal(a->layers, b->layers);
    assert_int_equal(a->window_pages, b->window_pages);
    assert_int_equal(a->sink_pages, b->sink_pages);
    assert_int_equal(a->n_ids, b->n_ids);
    for (size_t i = 0; i < a->n_ids; i++)
        assert_int_equal(a->ids[i], b->ids[i]);
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->accesses, b->accesses);
    assert_int_equal(a->steps, b->steps);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->rec[i].kind, b->rec[i].kind);
        assert_int_equal(a->rec[i].id, b->rec[i].id);
        assert_int_equal(a->rec[i].layer, b->rec[i].layer);
        assert_int_equal(a->rec[i].index, b->rec[i].index);
    }
}

static void test_trace_round_trip(void **state)
{
    struct sim_gen g = { .layers = 3, .batch = 2, .context = 50, .tokens = 9, .page_tokens = 8,
                         .window_pages = 3, .sink_pages = 1, .order = KVT_ORDER_SEQ_MAJOR,
                         .page_bytes = 8192 };
    struct sim_trace a, b;
    assert_int_equal(sim_generate(&g, &a), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(sim_trace_write(f, &a), 0);
    fclose(f);
    char err[320];
    assert_int_equal(t_read_text(buf, &b, err, sizeof err), 0);
    assert_same_trace(&a, &b);
    /* The reader numbers lines: the header is 3 or 4 lines long. */
    assert_true(b.rec[0].line >= 4);
    assert_int_equal(b.rec[1].line, b.rec[0].line + 1);
    free(buf);
    sim_trace_free(&a);
    sim_trace_free(&b);

    /* Written by hand: comments, blanks, every record, large numbers. */
    const char *text = "kvtier-trace 1   # version\n"
                       "\n"
                       "# a comment line\n"
                       "page_bytes 65536\n"
                       "schedule order=layer layers=2 ids=18446744073709551615,5 window=4\n"
                       "advance 5 1\n"
                       "access 5 1 4294967295   # the last index\n"
                       "new 5 1 3\n"
                       "\tdrop   5\n"
                       "step\n";
    assert_int_equal(t_read_text(text, &b, err, sizeof err), 0);
    assert_int_equal(b.page_bytes, 65536);
    assert_true(b.has_schedule);
    assert_int_equal(b.order, KVT_ORDER_LAYER_MAJOR);
    assert_int_equal(b.layers, 2);
    assert_int_equal(b.window_pages, 4);
    assert_int_equal(b.sink_pages, 0);
    assert_int_equal(b.n_ids, 2);
    assert_true(b.ids[0] == UINT64_MAX);
    assert_int_equal(b.n, 5);
    assert_int_equal(b.accesses, 1);
    assert_int_equal(b.steps, 1);
    static const uint8_t kinds[] = { SIM_ADVANCE, SIM_ACCESS, SIM_NEW, SIM_DROP, SIM_STEP };
    for (int i = 0; i < 5; i++) {
        assert_int_equal(b.rec[i].kind, kinds[i]);
        assert_int_equal(b.rec[i].line, 6 + i);
    }
    assert_int_equal(b.rec[1].index, UINT32_MAX);
    assert_int_equal(b.rec[2].index, 3);
    sim_trace_free(&b);
}

static void test_trace_malformed(void **state)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        { "", "empty file" },
        { "hello\n", "line 1: not a kvtier trace" },
        { "kvtier-trace 2\npage_bytes 4096\n", "line 1: trace version '2' is not supported" },
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 2\n", "line 3: 'access' takes ID LAYER INDEX, got 2 fields" },
        { "kvtier-trace 1\npage_bytes 4096\nstep 1\n", "line 3: 'step' takes (no fields), got 1 field" },
        { "kvtier-trace 1\npage_bytes 4096\n\nacess 1 2 3\n", "line 4: unknown record 'acess'" },
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 x 3\n", "line 3: bad number 'x' for LAYER" },
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 2 4294967296\n", "line 3: bad number '4294967296' for INDEX" },
        { "kvtier-trace 1\npage_bytes 4096\naccess -1 2 3\n", "line 3: bad number '-1' for ID" },
        { "kvtier-trace 1\npage_bytes 4096\ndrop 18446744073709551616\n", "line 3: bad number" },
        { "kvtier-trace 1\naccess 1 2 3\n", "line 2: 'access' before page_bytes" },
        { "kvtier-trace 1\npage_bytes 0\n", "line 2: page_bytes must be at least 1" },
        { "kvtier-trace 1\npage_bytes 4k\n", "line 2: bad number '4k' for page_bytes" },
        { "kvtier-trace 1\npage_bytes 4096\npage_bytes 4096\n", "line 3: a second page_bytes" },
        { "kvtier-trace 1\npage_bytes 4096\nstep\npage_bytes 4096\n", "line 4: 'page_bytes' after the first record" },
        { "kvtier-trace 1\n# only a comment\n", "ends without page_bytes" },
        { "kvtier-trace 1\npage_bytes 4096\nschedule order=diag layers=2 ids=1\n", "line 3: bad schedule order 'diag'" },
        { "kvtier-trace 1\npage_bytes 4096\nschedule order=seq ids=1\n", "line 3: schedule needs order=, layers= and ids=" },
        { "kvtier-trace 1\npage_bytes 4096\nschedule order=seq layers=2 ids=1,,2\n", "line 3: bad id list" },
        { "kvtier-trace 1\npage_bytes 4096\nschedule order=seq layers=2 ids=1 color=red\n", "line 3: unknown schedule field 'color'" },
        { "kvtier-trace 1\npage_bytes 4096\nstep a b c d e f g h\n", "line 3: too many fields" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sim_trace t;
        char err[320] = "";
        int e = t_read_text(cases[i].text, &t, err, sizeof err);
        if (e != -EINVAL || !strstr(err, cases[i].want))
            print_message("case %zu: got %d '%s', want '%s'\n", i, e, err, cases[i].want);
        assert_int_equal(e, -EINVAL);
        assert_non_null(strstr(err, cases[i].want));
        assert_null(t.rec);
    }
}

/* A line of a text trace holds at most SIM_MAX_LINE bytes: one longer (a
 * comment here) is refused naming it, not read whole. */
static void test_trace_line_limit(void **state)
{
    static const char head[] = "kvtier-trace 1\npage_bytes 4096\n";
    for (size_t len = SIM_MAX_LINE; len <= SIM_MAX_LINE + 1; len++) {
        size_t h = strlen(head);
        char *s = malloc(h + len + 2);
        assert_non_null(s);
        memcpy(s, head, h);
        s[h] = '#';
        memset(s + h + 1, 'x', len - 1);
        memcpy(s + h + len, "\n", 2);
        struct sim_trace t;
        char err[320] = "";
        int e = t_read_text(s, &t, err, sizeof err);
        if (len > SIM_MAX_LINE) {
            assert_int_equal(e, -E2BIG);
            assert_string_equal(err, "line 3: longer than 67108864 bytes");
            assert_null(t.rec);
        } else {
            assert_int_equal(e, 0);
            sim_trace_free(&t);
        }
        free(s);
    }
}

/* A NUL inside a line is refused, not taken as the line's end. */
static void test_trace_nul(void **state)
{
    static const char text[] = "kvtier-trace 1\npage_bytes 4096\nstep\0 garbage\n";
    FILE *f = fmemopen((void *)text, sizeof text - 1, "r");
    assert_non_null(f);
    struct sim_trace t;
    char err[320] = "";
    assert_int_equal(sim_trace_read(f, &t, err, sizeof err), -EINVAL);
    fclose(f);
    assert_string_equal(err, "line 3: a NUL byte");
}

/* Records that parse but contradict each other: found when the world is
 * built, with the line. */
static void test_trace_inconsistent(void **state)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 0 0\nnew 1 0 0\n", "line 4: new 1 0 0: the page exists already" },
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 0 0\ndrop 1\naccess 1 0 0\n", "line 5: access to page 1 0 0 after its sequence was dropped" },
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 0 0\ndrop 1\naccess 1 0 9\n", "line 5: access to a page of sequence 1, which was dropped" },
        { "kvtier-trace 1\npage_bytes 4096\naccess 1 0 0\ndrop 1\nnew 1 0 0\naccess 1 0 1\n", "line 6: access to a page of sequence 1, which was dropped" },
        { "kvtier-trace 1\npage_bytes 4096\nschedule order=layer layers=2 ids=1,2\nadvance 3 0\n", "line 4: advance to sequence 3, which the schedule does not list" },
        { "kvtier-trace 1\npage_bytes 4096\nschedule order=layer layers=2 ids=1,2\nadvance 2 5\n", "line 4: advance to layer 5, but the schedule has 2 layers" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sim_trace t;
        char err[320] = "";
        assert_int_equal(t_read_text(cases[i].text, &t, err, sizeof err), 0);
        struct sim_world *w = NULL;
        int e = sim_world_build(&t, &w, err, sizeof err);
        if (!strstr(err, cases[i].want))
            print_message("case %zu: got '%s', want '%s'\n", i, err, cases[i].want);
        assert_int_equal(e, -EINVAL);
        assert_null(w);
        assert_non_null(strstr(err, cases[i].want));
        sim_trace_free(&t);
    }
    /* A drop then a new of the same page is a fresh page, and legal. */
    struct sim_trace t;
    char err[320];
    assert_int_equal(t_read_text("kvtier-trace 1\npage_bytes 4096\naccess 1 0 0\ndrop 1\n"
                                 "new 1 0 0\naccess 1 0 0\nnew 1 0 1\naccess 1 0 1\n", &t, err,
                                 sizeof err), 0);
    struct sim_world *w;
    assert_int_equal(sim_world_build(&t, &w, err, sizeof err), 0);
    assert_int_equal(sim_world_pages(w), 2);
    struct sim_model m = t_model(1);
    m.cold = true;
    struct sim_result r;
    assert_int_equal(sim_run(w, kvt_lab_policy_find("lru"), &m, &r, err, sizeof err), 0);
    /* (1,0,0) fetched, dropped, made anew in HBM (no fetch), written down
     * when (1,0,1) is made in the one slot. */
    assert_int_equal(r.pages[SIM_H2D], 1);
    assert_int_equal(r.pages[SIM_D2H], 1);
    assert_int_equal(r.hits, 2);
    sim_world_free(w);
    sim_trace_free(&t);
}

/* ------------------------------------------------------------- generator */

static void test_generator_counts(void **state)
{
    /* Pages read at step s: (40 + s) / 16 + 1: 3 for s < 8, 4 after. The
     * token of step 8 starts page 3, so step 7 makes it. */
    struct sim_gen g = { .layers = 2, .batch = 3, .context = 40, .tokens = 20, .page_tokens = 16,
                         .order = KVT_ORDER_LAYER_MAJOR, .page_bytes = 4096 };
    struct sim_trace t;
    assert_int_equal(sim_generate(&g, &t), 0);
    uint64_t acc_step[20] = { 0 }, adv = 0, news = 0, step = 0;
    for (size_t i = 0; i < t.n; i++) {
        const struct sim_rec *r = &t.rec[i];
        if (r->kind == SIM_ACCESS)
            acc_step[step]++;
        else if (r->kind == SIM_ADVANCE)
            adv++;
        else if (r->kind == SIM_NEW) {
            news++;
            assert_int_equal(step, 7);
            assert_int_equal(r->index, 3);
            /* After the group's reads: the next record starts another group. */
            assert_true(t.rec[i + 1].kind == SIM_ADVANCE || t.rec[i + 1].kind == SIM_STEP);
        } else if (r->kind == SIM_STEP)
            step++;
    }
    assert_int_equal(step, 20);
    assert_int_equal(t.steps, 20);
    assert_int_equal(adv, 20 * 6);
    assert_int_equal(news, 6); /* one per (sequence, layer), every 16 steps */
    for (uint64_t s = 0; s < 20; s++) {
        uint64_t pages = s < 8 ? 3 : 4;
        assert_int_equal(sim_gen_pages_read(&g, s), pages);
        assert_int_equal(acc_step[s], 3 * 2 * pages); /* batch x layers x pages */
    }
    assert_int_equal(t.accesses, 6 * (8 * 3 + 12 * 4));
    struct sim_world *w;
    char err[320];
    assert_int_equal(sim_world_build(&t, &w, err, sizeof err), 0);
    assert_int_equal(sim_world_pages(w), 6 * 4);
    assert_int_equal(sim_world_max_group(w), 4); /* 3 read + 1 made in step 7 */
    sim_world_free(w);
    sim_trace_free(&t);

    /* A window of 2 pages and 1 sink: 3 pages read however long the
     * sequence; at step 10 (4 pages) pages 0, 2, 3. */
    g.window_pages = 2;
    g.sink_pages = 1;
    assert_int_equal(sim_generate(&g, &t), 0);
    assert_int_equal(t.accesses, 6 * 3 * 20);
    assert_int_equal(sim_gen_pages_read(&g, 10), 3);
    uint64_t s = 0;
    size_t i = 0;
    for (; s < 10; i++)
        s += t.rec[i].kind == SIM_STEP;
    assert_int_equal(t.rec[i].kind, SIM_ADVANCE);
    assert_int_equal(t.rec[i + 1].index, 0);
    assert_int_equal(t.rec[i + 2].index, 2);
    assert_int_equal(t.rec[i + 3].index, 3);
    assert_int_equal(t.rec[i + 4].kind, SIM_ADVANCE);
    sim_trace_free(&t);
    /* Window and sinks covering the whole sequence: everything is read. */
    g.window_pages = 3;
    g.sink_pages = 1;
    assert_int_equal(sim_generate(&g, &t), 0);
    assert_int_equal(t.accesses, 6 * (8 * 3 + 12 * 4));
    sim_trace_free(&t);
    /* Zero dimensions are refused. */
    g.batch = 0;
    assert_int_equal(sim_generate(&g, &t), -EINVAL);
}

static void test_generator_order(void **state)
{
    struct sim_gen g = { .layers = 2, .batch = 3, .context = 16, .tokens = 1, .page_tokens = 16,
                         .order = KVT_ORDER_LAYER_MAJOR, .page_bytes = 4096 };
    static const uint32_t layer_major[6][2] = { { 0, 0 }, { 1, 0 }, { 2, 0 },
                                                { 0, 1 }, { 1, 1 }, { 2, 1 } };
    static const uint32_t seq_major[6][2] = { { 0, 0 }, { 0, 1 }, { 1, 0 },
                                              { 1, 1 }, { 2, 0 }, { 2, 1 } };
    for (int o = 0; o < 2; o++) {
        g.order = o ? KVT_ORDER_SEQ_MAJOR : KVT_ORDER_LAYER_MAJOR;
        struct sim_trace t;
        assert_int_equal(sim_generate(&g, &t), 0);
        assert_int_equal(t.order, g.order);
        int k = 0;
        for (size_t i = 0; i < t.n; i++) {
            if (t.rec[i].kind != SIM_ADVANCE)
                continue;
            const uint32_t *want = o ? seq_major[k] : layer_major[k];
            assert_int_equal(t.rec[i].id, want[0]);
            assert_int_equal(t.rec[i].layer, want[1]);
            k++;
        }
        assert_int_equal(k, 6);
        sim_trace_free(&t);
    }
}

/* ------------------------------------------------------------- Belady */

struct keyhost {
    kvt_key keys[16];
};

static const kvt_key *kh_key_of(void *ctx, uint32_t pg) { return &((struct keyhost *)ctx)->keys[pg]; }
static uint32_t kh_find(void *ctx, const kvt_key *k) { return k->index < 16 ? k->index : KVT_NONE; }
static bool not_zero(void *ctx, uint32_t pg) { return pg != 0; }

static void test_belady_api(void **state)
{
    const struct kvt_policy_ops *ops = kvt_lab_policy_find("belady");
    assert_non_null(ops);
    assert_ptr_equal(ops, &kvt_policy_belady_ops);
    /* Only the lab knows it: the product's table does not, and an engine
     * refuses the name (test_config). */
    assert_null(kvt_policy_find("belady"));
    struct keyhost kh;
    for (uint32_t i = 0; i < 16; i++)
        kh.keys[i] = t_key(1, 0, i);
    uint64_t meta = 0;
    struct kvt_policy_params p = { .page_cap = 4, .slots = { 3, 16, 0 }, .meta = &meta,
                                   .host = { &kh, kh_key_of, kh_find } };
    void *b;
    assert_int_equal(ops->create(&p, &b), 0);
    /* No trace yet: least recently used leaves first. */
    for (uint32_t pg = 0; pg < 3; pg++)
        ops->insert(b, KVT_TIER_HBM, pg, &kh.keys[pg]);
    assert_int_equal(ops->next_use(b, 0), KVT_USE_UNKNOWN);
    assert_int_equal(ops->victim(b, KVT_TIER_HBM, NULL, NULL), 0);
    ops->access(b, KVT_TIER_HBM, 0);
    assert_int_equal(ops->victim(b, KVT_TIER_HBM, NULL, NULL), 1);

    /* Uses: 0 1 2 0 3 1 4. Loaded with 0..2 already in: they are looked up
     * again through the host. */
    kvt_key fut[7];
    static const uint32_t seq[7] = { 0, 1, 2, 0, 3, 1, 4 };
    for (int i = 0; i < 7; i++)
        fut[i] = kh.keys[seq[i]];
    assert_int_equal(kvt_belady_load(b, fut, 7), 0);
    assert_int_equal(ops->next_use(b, 0), 0);
    assert_int_equal(ops->next_use(b, 2), 2);
    assert_int_equal(ops->victim(b, KVT_TIER_HBM, NULL, NULL), 2); /* furthest */
    ops->access(b, KVT_TIER_HBM, 0);                               /* passes use 0 */
    assert_int_equal(ops->next_use(b, 0), 2);                      /* at 3, from 1 */
    assert_int_equal(ops->victim(b, KVT_TIER_HBM, NULL, NULL), 0);
    assert_int_equal(ops->victim(b, KVT_TIER_HBM, not_zero, NULL), 2);
    /* A DRAM access refreshes recency, it does not move the position. */
    ops->insert(b, KVT_TIER_DRAM, 1, &kh.keys[1]);
    ops->access(b, KVT_TIER_DRAM, 1);
    assert_int_equal(ops->next_use(b, 1), 0);
    /* Grow, then a page the trace never uses: it leaves first. */
    assert_int_equal(ops->reserve(b, 16), 0);
    ops->insert(b, KVT_TIER_HBM, 9, &kh.keys[9]);
    assert_int_equal(ops->next_use(b, 9), KVT_USE_NEVER);
    assert_int_equal(ops->victim(b, KVT_TIER_HBM, NULL, NULL), 9);
    ops->remove(b, KVT_TIER_HBM, 9);
    /* A use that skips ahead (page 3, due at 4, while the position is at 1)
     * passes the uses in between: 1 (at 1) and 2 (at 2) and 0 (at 3). */
    ops->insert(b, KVT_TIER_HBM, 3, &kh.keys[3]);
    ops->access(b, KVT_TIER_HBM, 3);
    assert_int_equal(ops->next_use(b, 1), 0);             /* at 5, from 5 */
    assert_int_equal(ops->next_use(b, 0), KVT_USE_NEVER); /* 0 is not used after 3 */
    assert_int_equal(ops->next_use(b, 3), KVT_USE_NEVER);
    /* Gone pages lose their key. */
    ops->remove(b, KVT_TIER_HBM, 2);
    ops->page_gone(b, 2);
    assert_int_equal(ops->next_use(b, 2), KVT_USE_NEVER);
    ops->destroy(b);
    assert_int_equal(meta, 0); /* every metadata byte counted is given back */
}

static void test_belady_equals_brute_min(void **state)
{
    static const uint32_t universes[] = { 3, 6, 11, 19 };
    uint32_t seq[400];
    for (size_t u = 0; u < sizeof(universes) / sizeof(universes[0]); u++) {
        uint32_t U = universes[u];
        for (int round = 0; round < 3; round++) {
            /* Skewed: a few hot pages, so that MIN and LRU differ. */
            for (size_t i = 0; i < 400; i++)
                seq[i] = t_rand(3) ? t_rand(U) : t_rand(U < 3 ? U : 3);
            struct sim_trace t;
            t_access_trace(&t, seq, 400);
            uint32_t distinct = 0;
            for (uint32_t p = 0; p < U; p++)
                for (size_t i = 0; i < 400; i++)
                    if (seq[i] == p) {
                        distinct++;
                        break;
                    }
            for (uint32_t cap = 1; cap <= U; cap++) {
                uint64_t want = brute_min(seq, 400, cap, U);
                struct sim_model m = t_model(cap);
                struct sim_result r;
                m.cold = true;
                t_run(&t, "belady", &m, &r);
                assert_int_equal(r.pages[SIM_H2D], want);
                assert_int_equal(r.accesses - r.hits, want);
                /* Warm, HBM starts as MIN's cold run has it once full. */
                m.cold = false;
                t_run(&t, "belady", &m, &r);
                assert_int_equal(r.pages[SIM_H2D], want - (cap < distinct ? cap : distinct));
            }
            sim_trace_free(&t);
        }
    }
}

/* On a loop over N pages with C < N slots MIN evicts the page just used;
 * after the C cold misses, misses come in runs of N - C, each followed by
 * C - 1 hits: over T accesses C + (T - C) / (N - 1) * (N - C) + min((T - C)
 * mod (N - 1), N - C). */
static void test_belady_cyclic_scan(void **state)
{
    static const uint32_t shapes[][2] = { { 2, 1 }, { 7, 3 }, { 16, 15 }, { 33, 8 }, { 100, 50 } };
    uint32_t seq[1200];
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        uint32_t N = shapes[s][0], C = shapes[s][1];
        size_t T = 12 * (size_t)N > 1200 ? 1200 : 12 * (size_t)N;
        for (size_t i = 0; i < T; i++)
            seq[i] = (uint32_t)(i % N);
        uint64_t u = T - C;
        uint64_t want = C + u / (N - 1) * (N - C) + (u % (N - 1) < N - C ? u % (N - 1) : N - C);
        struct sim_trace t;
        t_access_trace(&t, seq, T);
        struct sim_model m = t_model(C);
        m.cold = true;
        struct sim_result r;
        t_run(&t, "belady", &m, &r);
        assert_int_equal(r.pages[SIM_H2D], want);
        sim_trace_free(&t);
    }
}

static void test_lru_cyclic_misses_all(void **state)
{
    uint32_t seq[300];
    for (size_t i = 0; i < 300; i++)
        seq[i] = (uint32_t)(i % 10);
    struct sim_trace t;
    t_access_trace(&t, seq, 300);
    for (uint32_t cap = 1; cap < 10; cap++) {
        struct sim_model m = t_model(cap);
        struct sim_result r;
        m.cold = true;
        t_run(&t, "lru", &m, &r);
        assert_int_equal(r.hits, 0);
        assert_int_equal(r.pages[SIM_H2D], 300);
        assert_int_equal(r.bytes[SIM_H2D], 300 * 4096);
        m.cold = false; /* the first cap pages are in: hits, then misses */
        t_run(&t, "lru", &m, &r);
        assert_int_equal(r.hits, cap);
    }
    /* The whole loop fits: only the cold misses. */
    struct sim_model m = t_model(10);
    struct sim_result r;
    m.cold = true;
    t_run(&t, "lru", &m, &r);
    assert_int_equal(r.pages[SIM_H2D], 10);
    sim_trace_free(&t);
}

/* ------------------------------------------------------------- cost model */

#define MS 1e-3
#define assert_near(a, b) assert_true(fabs((a) - (b)) < 1e-9)

/* Pages of 1 MB over 1 GB/s: 1 ms each; compute 0.5 ms a group. */
static struct sim_model t_ms_model(uint64_t hbm_pages)
{
    return (struct sim_model){ .hbm_pages = hbm_pages, .h2d_gbps = 1, .ssd_gbps = 0.5,
                               .compute_s = 0.5 * MS, .cold = true };
}

static void test_cost_demand_two_steps(void **state)
{
    const char *text = "kvtier-trace 1\npage_bytes 1000000\n"
                       "advance 0 0\naccess 0 0 0\naccess 0 0 1\nstep\n"
                       "advance 0 0\naccess 0 0 0\naccess 0 0 1\nstep\n";
    struct sim_trace t;
    char err[320];
    assert_int_equal(t_read_text(text, &t, err, sizeof err), 0);
    struct sim_model m = t_ms_model(4);
    struct sim_result r;
    t_run(&t, "lru", &m, &r);
    /* Step 1: both misses issued at 0, in at 1 and 2 ms; compute 2..2.5.
     * Step 2: hits, compute 2.5..3. */
    assert_int_equal(r.pages[SIM_H2D], 2);
    assert_int_equal(r.hits, 2);
    assert_int_equal(r.groups, 2);
    assert_int_equal(r.steps, 2);
    assert_near(r.stall_s, 2 * MS);
    assert_near(r.total_s, 3 * MS);
    assert_near(r.step_s, 1.5 * MS);
    assert_near(r.term_s[SIM_TERM_H2D], 1 * MS);      /* 2 MB / 1 GB/s / 2 steps */
    assert_near(r.term_s[SIM_TERM_COMPUTE], 0.5 * MS);
    assert_near(r.bound_s, 1 * MS);
    assert_int_equal(r.bound_by, SIM_TERM_H2D);
    sim_trace_free(&t);
}

static void test_cost_ssd_chain(void **state)
{
    /* DRAM holds 2 of the 3 pages; the third comes SSD -> DRAM -> HBM after
     * LRU drops the DRAM copy of (1,0,0) (clean: it is on SSD). */
    const char *text = "kvtier-trace 1\npage_bytes 1000000\n"
                       "advance 1 0\naccess 1 0 0\naccess 1 0 1\n"
                       "advance 1 1\naccess 1 1 0\nstep\n";
    struct sim_trace t;
    char err[320];
    assert_int_equal(t_read_text(text, &t, err, sizeof err), 0);
    struct sim_model m = t_ms_model(4);
    m.dram_pages = 2;
    struct sim_result r;
    t_run(&t, "lru", &m, &r);
    /* Group 1: 0..1, 1..2 ms, compute 2..2.5. Group 2: SSD 2.5..4.5 (2 ms),
     * DRAM->HBM 4.5..5.5, compute 5.5..6. */
    assert_int_equal(r.pages[SIM_H2D], 3);
    assert_int_equal(r.pages[SIM_SSD_READ], 1);
    assert_int_equal(r.pages[SIM_SSD_WRITE], 0);
    assert_near(r.stall_s, 2 * MS + 3 * MS);
    assert_near(r.total_s, 6 * MS);
    assert_near(r.step_s, 6 * MS);
    assert_near(r.term_s[SIM_TERM_SSD], 2 * MS);
    assert_near(r.term_s[SIM_TERM_COMPUTE], 1 * MS);
    assert_near(r.bound_s, 3 * MS);
    assert_int_equal(sim_bytes_fetched(&r), 4000000);
    sim_trace_free(&t);
}

static void test_cost_dirty_write_back(void **state)
{
    /* One HBM slot: the new page is dirty, so it is written down (HBM->DRAM,
     * 0..1 ms) before its slot takes (1,0,1) (DRAM->HBM 1..2 ms). */
    const char *text = "kvtier-trace 1\npage_bytes 1000000\nnew 1 0 0\naccess 1 0 1\nstep\n";
    struct sim_trace t;
    char err[320];
    assert_int_equal(t_read_text(text, &t, err, sizeof err), 0);
    struct sim_model m = t_ms_model(1);
    struct sim_result r;
    t_run(&t, "lru", &m, &r);
    assert_int_equal(r.pages[SIM_D2H], 1);
    assert_int_equal(r.pages[SIM_H2D], 1);
    assert_near(r.total_s, 2.5 * MS);
    assert_near(r.stall_s, 2 * MS);
    assert_int_equal(sim_bytes_total(&r), 2000000);
    assert_int_equal(sim_bytes_fetched(&r), 1000000);
    /* An HBM smaller than a group is refused up front. */
    const char *big = "kvtier-trace 1\npage_bytes 4096\nadvance 0 0\naccess 0 0 0\naccess 0 0 1\n";
    sim_trace_free(&t);
    assert_int_equal(t_read_text(big, &t, err, sizeof err), 0);
    struct sim_world *w;
    assert_int_equal(sim_world_build(&t, &w, err, sizeof err), 0);
    assert_int_equal(sim_run(w, kvt_lab_policy_find("lru"), &m, &r, err, sizeof err), -ENOSPC);
    assert_non_null(strstr(err, "cannot hold one group of 2 pages"));
    sim_world_free(w);
    sim_trace_free(&t);
}

/* ------------------------------------------------------------- decode */

/* Pages of the group of (0, 0) at step 0: its transfer time at bw. */
static double group_transfer_s(const struct sim_gen *g, double gbps)
{
    return (double)sim_gen_pages_read(g, 0) * (double)g->page_bytes / (gbps * 1e9);
}

static struct sim_gen llama(uint32_t layers, uint64_t context)
{
    const struct kvt_shape *s = kvt_preset_find("llama3-8b");
    uint64_t per;
    assert_int_equal(kvt_kv_bytes_per_token_layer(s, kvt_dtype_bits(s->dtype), &per), 0);
    return (struct sim_gen){ .layers = layers, .batch = 4, .context = context, .tokens = 16,
                             .page_tokens = 16, .order = KVT_ORDER_LAYER_MAJOR,
                             .page_bytes = per * 16 };
}

/* Runs decode and the others on g at HBM = frac of the pages (at least one
 * group); results in r[0] decode, r[1] belady, r[2] lru. */
static void run_three(const struct sim_gen *g, double frac, struct sim_model m,
                      struct sim_result r[3], bool with_lru)
{
    struct sim_trace t;
    assert_int_equal(sim_generate(g, &t), 0);
    struct sim_world *w;
    char err[320];
    assert_int_equal(sim_world_build(&t, &w, err, sizeof err), 0);
    m.hbm_pages = (uint64_t)(frac * (double)sim_world_pages(w));
    if (m.hbm_pages < sim_world_max_group(w))
        m.hbm_pages = sim_world_max_group(w);
    static const char *const names[3] = { "decode", "belady", "lru" };
    for (int i = 0; i < (with_lru ? 3 : 2); i++)
        assert_int_equal(sim_run(w, kvt_lab_policy_find(names[i]), &m, &r[i], err, sizeof err), 0);
    sim_world_free(w);
    sim_trace_free(&t);
}

/* The eviction decisions against MIN on the same trace: demand paging
 * (prefetch trades bytes for stall and is checked on its own below). */
static void test_decode_vs_belady_sweep(void **state)
{
    if (!kvt_lab_policy_find("decode"))
        skip();
    static const double fracs[] = { 0.10, 0.25, 0.50, 0.75, 0.95 };
    static const uint32_t shapes[][4] = {
        /* batch, layers, window, sinks */
        { 1, 8, 0, 0 }, { 4, 3, 0, 0 }, { 1, 8, 5, 1 }, { 4, 3, 4, 2 },
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int o = 0; o < 2; o++)
            for (size_t f = 0; f < sizeof(fracs) / sizeof(fracs[0]); f++) {
                struct sim_gen g = { .batch = shapes[s][0], .layers = shapes[s][1],
                                     .window_pages = shapes[s][2], .sink_pages = shapes[s][3],
                                     .context = 60, .tokens = 12, .page_tokens = 4,
                                     .order = o ? KVT_ORDER_SEQ_MAJOR : KVT_ORDER_LAYER_MAJOR,
                                     .page_bytes = 4096 };
                struct sim_model m = t_model(1);
                struct sim_result r[3];
                run_three(&g, fracs[f], m, r, false);
                uint64_t dec = sim_bytes_fetched(&r[0]), min = sim_bytes_fetched(&r[1]);
                if ((double)dec > 1.02 * (double)min)
                    print_message("batch %u layers %u window %u sinks %u %s at %.2f: decode %llu "
                                  "MIN %llu\n", g.batch, g.layers, g.window_pages, g.sink_pages,
                                  o ? "seq" : "layer", fracs[f], (unsigned long long)dec,
                                  (unsigned long long)min);
                assert_true((double)dec <= 1.02 * (double)min);
            }
}

/* llama3-8b (8 layers), batch 4, 8k context, HBM at half the KV, the
 * default cost model (prefetch included): LRU moves at least 1.8x what
 * decode moves, and decode stays within 2% of MIN. */
static void test_decode_llama_half(void **state)
{
    if (!kvt_lab_policy_find("decode"))
        skip();
    struct sim_gen g = llama(8, 8192);
    struct sim_model m = t_model(1);
    m.prefetch_bytes = (uint64_t)(m.h2d_gbps * 1e9 * m.compute_s); /* the command's default */
    struct sim_result r[3];
    run_three(&g, 0.5, m, r, true);
    double lru_dec = (double)sim_bytes_fetched(&r[2]) / (double)sim_bytes_fetched(&r[0]);
    double dec_min = (double)sim_bytes_fetched(&r[0]) / (double)sim_bytes_fetched(&r[1]);
    print_message("llama3-8b x8 layers at 50%%: lru/decode %.3f, decode/MIN %.4f\n", lru_dec,
                  dec_min);
    assert_true(lru_dec >= 1.8);
    assert_true(dec_min <= 1.02);
    assert_true(r[0].prefetched > 0);
}

/* Compute per group above the time one group's pages take to arrive: the
 * prefetch hides the transfers, stall <= 2% of the run. */
static void test_decode_compute_bound_stall(void **state)
{
    if (!kvt_lab_policy_find("decode"))
        skip();
    struct sim_gen g = llama(8, 2048);
    struct sim_model m = t_model(1);
    m.compute_s = 1.25 * group_transfer_s(&g, m.h2d_gbps);
    m.prefetch_bytes = (uint64_t)(m.h2d_gbps * 1e9 * m.compute_s);
    struct sim_result r[3];
    run_three(&g, 0.5, m, r, false);
    print_message("compute %.0f us a group: decode stall %.3f%%, belady %.1f%%\n",
                  m.compute_s * 1e6, 100 * r[0].stall_s / r[0].total_s,
                  100 * r[1].stall_s / r[1].total_s);
    assert_true(r[0].stall_s <= 0.02 * r[0].total_s);
    assert_int_equal(r[0].bound_by, SIM_TERM_COMPUTE);
    assert_true(r[0].step_s <= 1.02 * r[0].bound_s);
}

/* Transfers far above compute: the step is within 5% of the bytes over the
 * link's bandwidth. */
static void test_decode_transfer_bound_step(void **state)
{
    if (!kvt_lab_policy_find("decode"))
        skip();
    struct sim_gen g = llama(8, 2048);
    struct sim_model m = t_model(1);
    m.compute_s = group_transfer_s(&g, m.h2d_gbps) / 50;
    m.prefetch_bytes = (uint64_t)(m.h2d_gbps * 1e9 * m.compute_s);
    struct sim_result r[3];
    run_three(&g, 0.5, m, r, false);
    double link = (double)r[0].bytes[SIM_H2D] / (m.h2d_gbps * 1e9) / (double)r[0].steps;
    print_message("compute %.1f us a group: decode step / (bytes / bw) %.4f\n", m.compute_s * 1e6,
                  r[0].step_s / link);
    assert_int_equal(r[0].bound_by, SIM_TERM_H2D);
    assert_near(r[0].bound_s, link);
    assert_true(r[0].step_s <= 1.05 * link);
    assert_true(r[0].step_s >= link * (1 - 1e-9));
}

/* ------------------------------------------------------------- the command */

static void test_main_arguments(void **state)
{
    char *help[] = { "sim", "--help", NULL };
    assert_int_equal(sim_main(2, help), 0);
    char *bad[] = { "sim", "--hbm-frac", "1.5", NULL };
    assert_int_equal(sim_main(3, bad), 2);
    char *unknown[] = { "sim", "--no-such-thing", NULL };
    assert_int_equal(sim_main(2, unknown), 2);
    char *clash[] = { "sim", "--trace", "x", "--batch", "2", NULL };
    assert_int_equal(sim_main(5, clash), 2);
    char *nopol[] = { "sim", "--policies", "fifo", NULL };
    assert_int_equal(sim_main(3, nopol), 2);
    char *missing[] = { "sim", "--trace", "/nonexistent/kvtier.trace", NULL };
    assert_int_equal(sim_main(3, missing), 1);
    /* 2 x 2 groups of 5 pages: HBM at half holds two. */
    char *small[] = { "sim", "--layers", "2", "--batch", "2", "--context", "64", "--tokens", "2",
                      "--policies", "lru,belady", NULL };
    assert_int_equal(sim_main(11, small), 0);
    char *tiny[] = { "sim", "--layers", "1", "--batch", "1", "--context", "64", "--tokens", "2",
                     NULL };
    assert_int_equal(sim_main(9, tiny), 2); /* HBM 2 pages, a group is 5 */
}


/* ------------------------------------------------------------- prefix traces */

#include "tools/prefix/trace.h"

static int pfx_parse(const char *text, struct pfx_trace *t, char *err, size_t n)
{
    return pfx_trace_parse(text, strlen(text), t, err, n);
}

static void test_pfx_trace_parses(void **state)
{
    struct pfx_trace t;
    char err[256] = "";
    const char *text = "{\"timestamp\": 5, \"input_length\": 700, \"output_length\": 3, "
                       "\"hash_ids\": [7, 8]}\n\n"
                       "{\"hash_ids\": [7, 9, 10], \"timestamp\": 6, \"extra\": "
                       "{\"a\": [1, 2.5e3, \"x\\\"y\", null, true]}}\n";
    assert_int_equal(pfx_parse(text, &t, err, sizeof err), 0);
    assert_int_equal(t.n_req, 2);
    assert_int_equal(t.n_hash, 5);
    assert_int_equal(t.distinct, 4);
    assert_int_equal(t.req[0].t_ms, 5);
    assert_int_equal(t.req[0].in_tokens, 700);
    assert_int_equal(t.req[1].n, 3);
    assert_int_equal(t.req[1].in_tokens, 3 * 512); /* no input_length: blocks x 512 */
    assert_int_equal(t.req[1].line, 3);
    uint32_t want[] = { 0, 1, 0, 2, 3 };
    for (int i = 0; i < 5; i++)
        assert_int_equal(t.block[i], want[i]);
    pfx_trace_free(&t);
}

static void test_pfx_trace_malformed(void **state)
{
    static const struct { const char *text, *msg; } cases[] = {
        { "{\"timestamp\": 1, \"hash_ids\": [1,2,]}", "line 1: unexpected token near ']'" },
        { "{\"timestamp\": 1, \"hash_ids\": [1, \"2\"]}", "line 1: hash_ids: expected a non-negative" },
        { "{\"timestamp\": 1}", "line 1: no \"hash_ids\"" },
        { "{\"hash_ids\": []}", "line 1: no \"timestamp\"" },
        { "\n{\"timestamp\": -1, \"hash_ids\": []}", "line 2: timestamp: expected a non-negative" },
        { "{\"timestamp\": 1.5, \"hash_ids\": []}", "expected an integer" },
        { "{\"timestamp\": 18446744073709552, \"hash_ids\": []}", "is larger than" },
        /* jansson's integers are signed: hash ids stop at 2^63 - 1 */
        { "{\"timestamp\": 1, \"hash_ids\": [9223372036854775808]}", "too big integer" },
        { "{\"timestamp\": 1, \"timestamp\": 2, \"hash_ids\": []}", "duplicate object key" },
        { "{\"timestamp\": 1, \"hash_ids\": []} x", "end of file expected" },
        { "[1]", "expected a JSON object" },
        { "{\"timestamp\": 1, \"hash_ids\": [], \"s\": \"abc}", "premature end of input" },
        { "{\"timestamp\": 1, \"hash_ids\": [], \"x\": 1e}", "invalid token near '1e'" },
        { "{\"timestamp\": 01, \"hash_ids\": []}", "invalid token" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pfx_trace t;
        char err[256] = "";
        assert_int_equal(pfx_parse(cases[i].text, &t, err, sizeof err), -EINVAL);
        if (!strstr(err, cases[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].msg);
        assert_int_equal(t.n_req, 0);
        assert_null(t.req);
    }
    /* The largest hash id, and nesting past jansson's limit (2048): an
     * error, not a stack overflow. */
    struct pfx_trace t;
    char err[256] = "";
    assert_int_equal(pfx_parse("{\"timestamp\": 1, \"hash_ids\": [9223372036854775807]}", &t, err,
                               sizeof err), 0);
    assert_true(t.n_hash == 1 && t.hash[0] == INT64_MAX);
    pfx_trace_free(&t);
    char deep[8192] = "{\"timestamp\": 1, \"hash_ids\": [], \"x\": ";
    for (int i = 0; i < 4000; i++)
        strcat(deep, "[");
    assert_int_equal(pfx_parse(deep, &t, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "maximum parsing depth"));
    /* A NUL inside a line. */
    const char nul[] = "{\"timestamp\": 1,\0 \"hash_ids\": []}";
    assert_int_equal(pfx_trace_parse(nul, sizeof nul - 1, &t, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "NUL"));
}

/* A trace of one line of exactly len bytes (then '\n'): a request whose
 * skipped "pad" string makes up the length. The caller frees it. */
static char *pfx_line_of(size_t len)
{
    static const char head[] = "{\"timestamp\": 1, \"hash_ids\": [3], \"pad\": \"";
    char *s = malloc(len + 2);
    assert_non_null(s);
    size_t h = strlen(head);
    memcpy(s, head, h);
    memset(s + h, 'a', len - h - 2);
    memcpy(s + len - 2, "\"}\n", 4);
    return s;
}

static int pfx_read_buf(const char *buf, size_t len, struct pfx_trace *t, char *err, size_t n)
{
    FILE *f = fmemopen((void *)buf, len, "r");
    assert_non_null(f);
    int e = pfx_trace_read(f, t, err, n);
    fclose(f);
    return e;
}

/* PFX_MAX_LINE bytes in a line, at most, from a buffer and from a file
 * alike: a longer line is refused naming it, and the file reader stops
 * there instead of holding the line. */
static void test_pfx_trace_line_limit(void **state)
{
    for (size_t len = PFX_MAX_LINE; len <= PFX_MAX_LINE + 1; len++) {
        char *s = pfx_line_of(len);
        int want = len > PFX_MAX_LINE ? -E2BIG : 0;
        struct pfx_trace t;
        char err[256] = "", err2[256] = "";
        assert_int_equal(pfx_trace_parse(s, len + 1, &t, err, sizeof err), want);
        assert_int_equal(t.n_req, want ? 0 : 1);
        pfx_trace_free(&t);
        assert_int_equal(pfx_read_buf(s, len + 1, &t, err2, sizeof err2), want);
        assert_int_equal(t.n_req, want ? 0 : 1);
        pfx_trace_free(&t);
        assert_string_equal(err, err2);
        if (want)
            assert_string_equal(err, "line 1: longer than 67108864 bytes");
        free(s);
    }
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    return fclose(f);
}

/* Runs sim_main(argc, argv) with its stdout caught into buf (n bytes, NUL
 * ended); returns its exit code. */
static int sim_caught(int argc, char **argv, char *buf, size_t n)
{
    char out[] = "/tmp/kvt_test_pfx_out_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    unlink(out);
    int saved = dup(1);
    fflush(stdout);
    dup2(fd, 1);
    int rc = sim_main(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fdopen(fd, "r");
    rewind(f);
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = 0;
    fclose(f);
    return rc;
}

/* sim's prefix model on a trace worked by hand, capacity 3 blocks:
 *   r1 [1 2]    misses; stores 1 2
 *   r2 [1 2 3]  hits 1 2; stores 3
 *   r3 [4 5]    misses; needs 2 slots
 *   r4 [1 2]
 * LRU evicts 1 and 2 for r3 (used before 3), so r4 misses: 2 hits of 9
 * references. Belady evicts 3 (never used again) and one of 1, 2 (both
 * next used by r4); it keeps 1 here, so r4 hits 1: 3 of 9. */
static void test_sim_prefix_by_hand(void **state)
{
    char path[] = "/tmp/kvt_test_pfx_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_text(path, "{\"timestamp\": 0, \"hash_ids\": [1, 2]}\n"
                     "{\"timestamp\": 1, \"hash_ids\": [1, 2, 3]}\n"
                     "{\"timestamp\": 2, \"hash_ids\": [4, 5]}\n"
                     "{\"timestamp\": 3, \"hash_ids\": [1, 2]}\n");
    char *argv[] = { "sim", "--trace", path, "--capacity", "3", "--policies", "lru,prefix,arc,belady",
                     "--json", NULL };
    char buf[4096];
    assert_int_equal(sim_caught(8, argv, buf, sizeof buf), 0);
    assert_non_null(strstr(buf, "\"policy\":\"lru\",\"capacity\":3,\"capacity_blocks\":3,"
                                "\"hit_fraction\":0.222222,\"hits\":2"));
    assert_non_null(strstr(buf, "\"policy\":\"belady\",\"capacity\":3,\"capacity_blocks\":3,"
                                "\"hit_fraction\":0.333333,\"hits\":3"));
    /* A capacity smaller than a request is a usage error naming it. */
    char *small[] = { "sim", "--trace", path, "--capacity", "2", NULL };
    assert_int_equal(sim_main(5, small), 2);
    char *badpol[] = { "sim", "--trace", path, "--policies", "decode", NULL };
    assert_int_equal(sim_main(5, badpol), 2);
    unlink(path);
}

/* A multi-turn chat trace (tools/prefix/gen_traces.py's `chat`, with this
 * file's own random numbers): 70% of requests continue a live chat by 1-4
 * blocks, so a turn's new blocks are the next turn's prefix and recency
 * predicts reuse best. The prefix policy ranked classes with a fixed shift
 * and lost to LRU here by up to 0.7 points; with its shadow caches choosing
 * the shift it must be within 0.2 points of LRU or above at each capacity
 * (docs/sim.md#other-traces). */
static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void write_chat_trace(const char *path, int requests)
{
    enum { LIVE = 400, MAXLEN = 4096 };
    static uint64_t chain[LIVE][MAXLEN];
    static uint32_t len[LIVE];
    uint32_t nlive = 0;
    uint64_t next = 0, t = 0, rng = 1;
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int r = 0; r < requests; r++) {
        t += rng_next(&rng) % 400;
        uint32_t c;
        if (nlive && rng_next(&rng) % 10 < 7) {
            c = (uint32_t)(rng_next(&rng) % nlive);
            uint32_t add = 1 + (uint32_t)(rng_next(&rng) % 4);
            for (uint32_t k = 0; k < add && len[c] < MAXLEN; k++)
                chain[c][len[c]++] = next++;
        } else {
            if (nlive == LIVE) { /* the oldest chat ends */
                memmove(chain[0], chain[1], sizeof(chain[0]) * (LIVE - 1));
                memmove(len, len + 1, sizeof(len[0]) * (LIVE - 1));
                nlive--;
            }
            c = nlive++;
            len[c] = 2 + (uint32_t)(rng_next(&rng) % 19);
            for (uint32_t k = 0; k < len[c]; k++)
                chain[c][k] = next++;
        }
        fprintf(f, "{\"timestamp\": %llu, \"hash_ids\": [", (unsigned long long)t);
        for (uint32_t k = 0; k < len[c]; k++)
            fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)chain[c][k]);
        fprintf(f, "]}\n");
        if (c < nlive && rng_next(&rng) % 10 < 2 && nlive > 1) { /* the chat ends */
            memmove(chain[c], chain[c + 1], sizeof(chain[0]) * (nlive - 1 - c));
            memmove(len + c, len + c + 1, sizeof(len[0]) * (nlive - 1 - c));
            nlive--;
        }
    }
    assert_int_equal(fclose(f), 0);
}

/* The hit fraction of policy at capacity in sim's --json output. */
static double json_hits(const char *json, const char *policy, const char *capacity)
{
    char want[128];
    snprintf(want, sizeof want, "\"policy\":\"%s\",\"capacity\":%s,", policy, capacity);
    const char *at = strstr(json, want);
    assert_non_null(at);
    at = strstr(at, "\"hit_fraction\":");
    assert_non_null(at);
    return strtod(at + strlen("\"hit_fraction\":"), NULL);
}

static void test_sim_prefix_chat_not_below_lru(void **state)
{
    char path[] = "/tmp/kvt_test_chat_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_chat_trace(path, 4000);
    char *argv[] = { "sim", "--trace", path, "--capacity", "0.05,0.1,0.2,0.4", "--policies",
                     "lru,prefix", "--json", NULL };
    static char buf[1 << 16];
    assert_int_equal(sim_caught(8, argv, buf, sizeof buf), 0);
    static const char *caps[] = { "0.05", "0.1", "0.2", "0.4" };
    for (int i = 0; i < 4; i++) {
        double lru = json_hits(buf, "lru", caps[i]), pfx = json_hits(buf, "prefix", caps[i]);
        print_message("chat at %s: lru %.4f prefix %.4f\n", caps[i], lru, pfx);
        assert_true(lru > 0.05);
        assert_true(pfx >= lru - 0.002);
    }
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_round_trip),
        cmocka_unit_test(test_pfx_trace_parses),
        cmocka_unit_test(test_pfx_trace_malformed),
        cmocka_unit_test(test_pfx_trace_line_limit),
        cmocka_unit_test(test_sim_prefix_by_hand),
        cmocka_unit_test(test_sim_prefix_chat_not_below_lru),
        cmocka_unit_test(test_trace_malformed),
        cmocka_unit_test(test_trace_line_limit),
        cmocka_unit_test(test_trace_nul),
        cmocka_unit_test(test_trace_inconsistent),
        cmocka_unit_test(test_generator_counts),
        cmocka_unit_test(test_generator_order),
        cmocka_unit_test(test_belady_api),
        cmocka_unit_test(test_belady_equals_brute_min),
        cmocka_unit_test(test_belady_cyclic_scan),
        cmocka_unit_test(test_lru_cyclic_misses_all),
        cmocka_unit_test(test_cost_demand_two_steps),
        cmocka_unit_test(test_cost_ssd_chain),
        cmocka_unit_test(test_cost_dirty_write_back),
        cmocka_unit_test(test_decode_vs_belady_sweep),
        cmocka_unit_test(test_decode_llama_half),
        cmocka_unit_test(test_decode_compute_bound_stall),
        cmocka_unit_test(test_decode_transfer_bound_step),
        cmocka_unit_test(test_main_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
