/*
 * test_decode.c — the decode policy through the real manager, against
 * Belady's MIN on the same trace at the same capacity.
 *
 * A generated decode workload (batch of sequences x layers x pages, full
 * attention or a sliding window with sinks, layer- or sequence-major,
 * growing tails) runs through an engine: kvt_set_schedule once, then every
 * step kvt_advance + kvt_acquire of a group's pages + kvt_release, and a new
 * tail page every few steps (kvt_create). kvt_stats.bytes_up[HBM] counts
 * every page brought into HBM, prefetches included.
 *
 * The reference is MIN over the same event sequence, with the engine's
 * constraint that a group's pages are held together while it computes (a
 * page of the group being computed cannot be evicted to make room for
 * another of the same group): on a miss, evict the resident page whose next
 * use is furthest. Created pages take a slot without a transfer.
 */
#include <pthread.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "api/api.h"

#define PB 4096u

struct shape {
    uint32_t batch, layers, pages, steps, grow_every, window, sinks;
    int order;
};

enum ev_kind { EV_ADVANCE, EV_ACCESS, EV_END_GROUP, EV_CREATE };
struct ev {
    uint8_t kind;
    kvt_key key;
};

struct trace {
    struct ev *ev;
    size_t n, cap;
};

static void push(struct trace *t, uint8_t kind, kvt_key k)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 1024;
        t->ev = realloc(t->ev, t->cap * sizeof(*t->ev));
        assert_non_null(t->ev);
    }
    t->ev[t->n++] = (struct ev){ kind, k };
}

static uint64_t seq_id(uint32_t s) { return 1000 + 7 * (uint64_t)s; }

/* The prefill (creates of every page, in schedule order) then the steps. */
static void generate(const struct shape *sh, struct trace *t)
{
    uint32_t *len = calloc((size_t)sh->batch * sh->layers, sizeof(uint32_t));
    uint32_t groups = sh->batch * sh->layers;
    for (uint32_t g = 0; g < groups; g++) {
        uint32_t s = sh->order == KVT_ORDER_LAYER_MAJOR ? g % sh->batch : g / sh->layers;
        uint32_t l = sh->order == KVT_ORDER_LAYER_MAJOR ? g / sh->batch : g % sh->layers;
        for (uint32_t i = 0; i < sh->pages; i++)
            push(t, EV_CREATE, t_key(seq_id(s), l, i));
        len[s * sh->layers + l] = sh->pages;
    }
    for (uint32_t step = 0; step < sh->steps; step++) {
        for (uint32_t g = 0; g < groups; g++) {
            uint32_t s = sh->order == KVT_ORDER_LAYER_MAJOR ? g % sh->batch : g / sh->layers;
            uint32_t l = sh->order == KVT_ORDER_LAYER_MAJOR ? g / sh->batch : g % sh->layers;
            uint32_t n = len[s * sh->layers + l];
            push(t, EV_ADVANCE, t_key(seq_id(s), l, 0));
            for (uint32_t i = 0; i < n; i++) {
                bool live = !sh->window || i < sh->sinks || i + sh->window >= n;
                if (live)
                    push(t, EV_ACCESS, t_key(seq_id(s), l, i));
            }
            push(t, EV_END_GROUP, t_key(seq_id(s), l, 0));
            if (sh->grow_every && step % sh->grow_every == sh->grow_every - 1) {
                push(t, EV_CREATE, t_key(seq_id(s), l, n));
                len[s * sh->layers + l] = n + 1;
            }
        }
    }
    free(len);
}

/* ------------------------------------------------------------- MIN */

static uint64_t page_no(const struct shape *sh, kvt_key k)
{
    uint32_t s = (uint32_t)((k.id - 1000) / 7);
    uint64_t maxp = sh->pages + sh->steps + 1;
    return ((uint64_t)s * sh->layers + k.layer) * maxp + k.index;
}

/* MIN with the group held: returns the misses (pages brought into HBM). */
static uint64_t belady(const struct shape *sh, const struct trace *t, uint32_t cap)
{
    uint64_t np = (uint64_t)sh->batch * sh->layers * (sh->pages + sh->steps + 1);
    size_t *next = malloc(t->n * sizeof(size_t));
    size_t *last = malloc(np * sizeof(size_t));
    size_t *nu = malloc(np * sizeof(size_t));        /* next use of a resident page */
    uint8_t *res = calloc(np, 1), *held = calloc(np, 1);
    uint64_t *held_list = malloc(np * sizeof(uint64_t));
    const size_t INF = (size_t)-1;
    for (uint64_t p = 0; p < np; p++)
        last[p] = INF;
    /* next access after each event (accesses only: creates are not uses) */
    for (size_t i = t->n; i-- > 0;) {
        uint64_t p = page_no(sh, t->ev[i].key);
        next[i] = last[p];
        if (t->ev[i].kind == EV_ACCESS)
            last[p] = i;
        else if (t->ev[i].kind == EV_CREATE)
            next[i] = last[p];
    }
    uint64_t misses = 0, resident = 0, nheld = 0;
    uint64_t *rlist = malloc(np * sizeof(uint64_t));
    for (size_t i = 0; i < t->n; i++) {
        const struct ev *v = &t->ev[i];
        uint64_t p = page_no(sh, v->key);
        if (v->kind == EV_END_GROUP) {
            for (uint64_t h = 0; h < nheld; h++)
                held[held_list[h]] = 0;
            nheld = 0;
            continue;
        }
        if (v->kind == EV_ADVANCE)
            continue;
        if (!res[p]) {
            if (v->kind == EV_ACCESS)
                misses++;
            if (resident == cap) {
                uint64_t best = UINT64_MAX;
                size_t far = 0;
                for (uint64_t r = 0; r < resident; r++) {
                    uint64_t q = rlist[r];
                    if (held[q])
                        continue;
                    if (best == UINT64_MAX || nu[q] > far) {
                        best = r;
                        far = nu[q];
                    }
                }
                assert_true(best != UINT64_MAX);
                res[rlist[best]] = 0;
                rlist[best] = rlist[--resident];
            }
            res[p] = 1;
            rlist[resident++] = p;
        }
        nu[p] = next[i];
        if (v->kind == EV_ACCESS && !held[p]) {
            held[p] = 1;
            held_list[nheld++] = p;
        }
    }
    free(next);
    free(last);
    free(nu);
    free(res);
    free(held);
    free(held_list);
    free(rlist);
    return misses;
}

/* ------------------------------------------------------------- engine */

/* Runs the trace through an engine; returns pages brought into the tier
 * measured (HBM, or DRAM from SSD when dram_cap is set: HBM then holds two
 * groups, so every group passes through DRAM). The prefill moves nothing up. */
static char ssd_dir[64];
/* The caller's compute per group, between acquire and release (0: none). */
static unsigned compute_us;

/* inspect, when set, sees the engine after the trace, before it closes. */
typedef void (*inspect_fn)(const struct shape *, kvt_engine *, void *arg);

static kvt_stats replay_with(const struct shape *sh, const struct trace *t, uint32_t cap,
                             uint32_t dram_cap, const char *policy, size_t prefetch_pages,
                             inspect_fn inspect, void *arg)
{
    uint64_t np = (uint64_t)sh->batch * sh->layers * (sh->pages + sh->steps + 1);
    kvt_config c = t_config(PB, cap, dram_cap ? dram_cap : np + 16);
    if (dram_cap) {
        strcpy(ssd_dir, "/tmp/kvt_test_decode_XXXXXX");
        assert_non_null(mkdtemp(ssd_dir));
        c.ssd_dir = ssd_dir;
        c.ssd_bytes = (np + 16) * PB;
    }
    c.policy = policy;
    c.prefetch_bytes = prefetch_pages * PB;
    kvt_engine *e;
    assert_int_equal(kvt_open(&c, &e), 0);
    uint64_t *ids = malloc(sh->batch * sizeof(uint64_t));
    for (uint32_t s = 0; s < sh->batch; s++)
        ids[s] = seq_id(s);
    kvt_schedule sc = { ids, sh->batch, sh->layers, sh->order, sh->window, sh->sinks };
    assert_int_equal(kvt_set_schedule(e, &sc), 0);
    kvt_key *grp = malloc((sh->pages + sh->steps + 1) * sizeof(kvt_key));
    void **ptr = malloc((sh->pages + sh->steps + 1) * sizeof(void *));
    size_t ng = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct ev *v = &t->ev[i];
        void *p;
        switch (v->kind) {
        case EV_CREATE:
            assert_int_equal(kvt_create(e, v->key, &p), 0);
            t_fill_page(e, p, PB, v->key, 1);
            assert_int_equal(kvt_release(e, &v->key, 1, 1), 0);
            break;
        case EV_ADVANCE:
            assert_int_equal(kvt_advance(e, v->key.id, v->key.layer), 0);
            ng = 0;
            break;
        case EV_ACCESS:
            grp[ng++] = v->key;
            break;
        case EV_END_GROUP:
            assert_int_equal(kvt_acquire(e, grp, ng, ptr), 0);
            for (size_t j = 0; j < ng; j++)
                assert_true(t_check_page(e, ptr[j], PB, grp[j], 1));
            if (compute_us)
                usleep(compute_us);
            assert_int_equal(kvt_release(e, grp, ng, 0), 0);
            break;
        }
    }
    kvt_stats s = t_stats(e);
    if (inspect)
        inspect(sh, e, arg);
    kvt_close(e);
    free(ids);
    free(grp);
    free(ptr);
    if (dram_cap) {
        t_rmtree(ssd_dir);
    }
    return s;
}

static kvt_stats replay(const struct shape *sh, const struct trace *t, uint32_t cap,
                        uint32_t dram_cap, const char *policy, size_t prefetch_pages)
{
    return replay_with(sh, t, cap, dram_cap, policy, prefetch_pages, NULL, NULL);
}

static uint64_t run_engine_tiers(const struct shape *sh, const struct trace *t, uint32_t cap,
                                 uint32_t dram_cap, const char *policy)
{
    kvt_stats s = replay(sh, t, cap, dram_cap, policy, 8);
    return s.bytes_up[dram_cap ? KVT_TIER_DRAM : KVT_TIER_HBM] / PB;
}

static uint32_t working_set(const struct shape *sh)
{
    uint32_t per = sh->window ? sh->window + sh->sinks : sh->pages;
    if (per > sh->pages)
        per = sh->pages;
    return sh->batch * sh->layers * per;
}

/* Decode and LRU against MIN on one generated trace. At HBM (dram false):
 * HBM of frac of the working set, at least two groups, no tier below. At
 * DRAM (dram true), with the SSD below: HBM holds one group, so DRAM sees
 * every access; SSD->DRAM traffic against MIN at DRAM's size (at least four
 * groups). */
static void compare_at(const struct shape *sh, double frac, bool dram)
{
    struct trace t = { 0 };
    generate(sh, &t);
    uint32_t ws = working_set(sh);
    uint32_t group = sh->window ? sh->window + sh->sinks + 2 : sh->pages + sh->steps;
    uint32_t cap = (uint32_t)(frac * ws), floor = (dram ? 4 : 2) * group;
    if (cap < floor)
        cap = floor;
    uint32_t hbm = dram ? group : cap, dram_cap = dram ? cap : 0;
    uint64_t min = belady(sh, &t, cap);
    uint64_t dec = run_engine_tiers(sh, &t, hbm, dram_cap, "decode");
    uint64_t lru = run_engine_tiers(sh, &t, hbm, dram_cap, "lru");
    print_message("%sbatch %u layers %u pages %u window %u sinks %u %s cap %u/%u: MIN %llu "
                  "decode %llu (%.3f) lru %llu (%.2f)\n",
                  dram ? "DRAM: " : "", sh->batch, sh->layers, sh->pages, sh->window, sh->sinks,
                  sh->order == KVT_ORDER_LAYER_MAJOR ? "layer-major" : "seq-major", cap, ws,
                  (unsigned long long)min, (unsigned long long)dec,
                  min ? (double)dec / (double)min : 1.0, (unsigned long long)lru,
                  min ? (double)lru / (double)min : 1.0);
    /* At DRAM the count also depends on timing: the SSD reads, the prefetch
     * and the mover's write-backs run on their own threads, and which of
     * them is ahead when room is needed decides an eviction now and then.
     * Under the test suite's load (ctest -j2) the windowed shape at cap
     * 114/120 read 100-107 pages against MIN's 102 over 40 runs, so a
     * fixed 2% + 1 failed about one run in twenty. One group's pages of
     * slack absorb that and still fail a policy that is not near MIN (LRU
     * reads 17x MIN there). At HBM the replay is deterministic enough for +1. */
    double slack = dram ? (double)group : 1.0;
    assert_true((double)dec <= 1.02 * (double)min + slack);
    free(t.ev);
}

static const double fracs[] = { 0.10, 0.30, 0.50, 0.75, 0.95 };

static void sweep(struct shape sh)
{
    for (size_t i = 0; i < sizeof(fracs) / sizeof(fracs[0]); i++)
        compare_at(&sh, fracs[i], false);
}

static void test_full_layer_major(void **state)
{
    sweep((struct shape){ 4, 4, 16, 16, 3, 0, 0, KVT_ORDER_LAYER_MAJOR });
}

static void test_full_seq_major(void **state)
{
    sweep((struct shape){ 4, 4, 16, 16, 3, 0, 0, KVT_ORDER_SEQ_MAJOR });
}

static void test_batch_one(void **state)
{
    sweep((struct shape){ 1, 8, 24, 16, 2, 0, 0, KVT_ORDER_LAYER_MAJOR });
}

static void test_window_and_sinks(void **state)
{
    sweep((struct shape){ 3, 4, 24, 16, 1, 8, 2, KVT_ORDER_LAYER_MAJOR });
    sweep((struct shape){ 3, 4, 24, 16, 1, 8, 2, KVT_ORDER_SEQ_MAJOR });
}

/* DRAM capacities 10%..95% of the working set. */
static void test_dram_with_ssd(void **state)
{
    static const struct shape shapes[] = {
        { 4, 4, 16, 12, 3, 0, 0, KVT_ORDER_LAYER_MAJOR },
        { 3, 4, 24, 16, 1, 8, 2, KVT_ORDER_SEQ_MAJOR },
    };
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sizeof(fracs) / sizeof(fracs[0]); i++)
            compare_at(&shapes[s], fracs[i], true);
}

/* A working set large enough for the disk read-ahead to run at all (its
 * depth is 1/128 of the misses a step must take), with DRAM most of it.
 * Bounding the reads in flight does not bound how far ahead they reach:
 * without the read horizon each read displaced the group just computed for
 * one further ahead, DRAM became a window over the next DRAM-size pages of
 * the cycle, and every page was read every step (2.4x MIN here). */
static void test_dram_read_horizon(void **state)
{
    struct shape sh = { 4, 8, 128, 3, 0, 0, 0, KVT_ORDER_LAYER_MAJOR };
    struct trace t = { 0 };
    generate(&sh, &t);
    uint32_t ws = working_set(&sh), group = sh.pages + sh.steps;
    for (double frac = 0.60; frac < 0.9; frac += 0.25) {
        uint32_t cap = (uint32_t)(frac * ws);
        uint64_t min = belady(&sh, &t, cap);
        /* The default budget (prefetch_bytes 0), and a caller that computes
         * each group for a while: the read-ahead runs as deep as it can. */
        compute_us = 1000;
        kvt_stats s = replay(&sh, &t, group, cap, "decode", 0);
        compute_us = 0;
        uint64_t dec = s.bytes_up[KVT_TIER_DRAM] / PB;
        print_message("read horizon: DRAM %u of %u pages: MIN %llu, decode %llu (%.3f)\n", cap, ws,
                      (unsigned long long)min, (unsigned long long)dec, (double)dec / (double)min);
        assert_true((double)dec <= 1.02 * (double)min + 2.0 * group);
    }
    free(t.ev);
}

/* The prefetcher never has more than prefetch_bytes in flight, and with
 * room to spare it never brings a page that is then evicted unused. */
static void test_prefetch_bounded_and_useful(void **state)
{
    struct shape sh = { 4, 4, 16, 8, 0, 0, 0, KVT_ORDER_LAYER_MAJOR };
    struct trace t = { 0 };
    generate(&sh, &t);
    uint32_t ws = working_set(&sh);
    for (size_t budget = 1; budget <= 16; budget *= 4) {
        kvt_stats s = replay(&sh, &t, ws / 2, 0, "decode", budget);
        print_message("prefetch budget %zu pages: %llu prefetched, %llu wasted, %llu max in "
                      "flight\n", budget, (unsigned long long)s.prefetch_pages,
                      (unsigned long long)s.prefetch_wasted,
                      (unsigned long long)s.prefetch_inflight_max);
        assert_true(s.prefetch_pages > 0); /* it did prefetch: the bound is not vacuous */
        assert_true(s.prefetch_inflight_max <= budget);
    }
    /* Capacity for everything: every prefetched page is used. */
    kvt_stats s = replay(&sh, &t, ws + 32, 0, "decode", 16);
    assert_int_equal(s.prefetch_wasted, 0);
    /* At half capacity, prefetches may lose a race with demand, but stay rare. */
    s = replay(&sh, &t, ws / 2, 0, "decode", 16);
    assert_true(s.prefetch_wasted * 20 <= s.prefetch_pages + 20);
    free(t.ev);
}

struct census {
    uint64_t third, dram_only, hbm;
};

static struct census take_census(kvt_engine *e)
{
    struct census c = { 0 };
    for (uint32_t pg = 0; pg < e->pt.used; pg++) {
        uint16_t f = kvt_pg(&e->pt, pg)->flags;
        if (!(f & PG_HASHED))
            continue;
        c.hbm += !!(f & PG_VALID_HBM);
        c.third += (f & (PG_VALID_HBM | PG_VALID_DRAM | PG_VALID_SSD)) ==
                   (PG_VALID_HBM | PG_VALID_DRAM | PG_VALID_SSD);
        c.dram_only += (f & (PG_VALID_HBM | PG_VALID_DRAM)) == PG_VALID_DRAM;
    }
    return c;
}

/* After the trace: making DRAM room for a page needed now drops a copy of
 * a page HBM holds and SSD backs, not a page only DRAM holds of the two. */
static void drop_one(const struct shape *sh, kvt_engine *e, void *arg)
{
    bool *checked = arg;
    pthread_mutex_lock(&e->lock);
    struct census before = take_census(e);
    if (before.third && kvt_dram_drop_third_copy(e, KVT_NONE)) {
        struct census after = take_census(e);
        assert_int_equal(after.third, before.third - 1);
        assert_int_equal(after.dram_only, before.dram_only);
        assert_int_equal(after.hbm, before.hbm);
        *checked = true;
    }
    pthread_mutex_unlock(&e->lock);
}

/* DRAM lets go of its copies of pages HBM holds first: HBM four groups,
 * DRAM half the working set, over SSD. (The MIN comparisons above show
 * what it buys: SSD->DRAM bytes 0.91-0.98x MIN at DRAM's size, against
 * 0.96-1.04x with inclusive caching.) */
static void test_dram_third_copy(void **state)
{
    struct shape sh = { 4, 8, 128, 3, 0, 0, 0, KVT_ORDER_LAYER_MAJOR };
    struct trace t = { 0 };
    generate(&sh, &t);
    uint32_t ws = working_set(&sh), group = sh.pages + sh.steps;
    bool checked = false;
    compute_us = 200;
    replay_with(&sh, &t, 4 * group, ws / 2, "decode", 0, drop_one, &checked);
    compute_us = 0;
    assert_true(checked); /* there was a third copy to drop */
    free(t.ev);
}

/* A sequence finishes and another joins mid-run: the schedule changes, the
 * old pages go (kvt_drop_id), every read stays exact, and the policy keeps
 * prefetching for the new batch. */
/* Creates layers x pages pages of each of the nids sequences, version 1. */
static void create_pages(kvt_engine *e, const uint64_t *ids, uint32_t nids, uint32_t layers,
                         uint32_t pages)
{
    for (uint32_t s = 0; s < nids; s++)
        for (uint32_t l = 0; l < layers; l++)
            for (uint32_t i = 0; i < pages; i++) {
                kvt_key k = t_key(ids[s], l, i);
                void *p;
                assert_int_equal(kvt_create(e, k, &p), 0);
                t_fill_page(e, p, PB, k, 1);
                assert_int_equal(kvt_release(e, &k, 1, 1), 0);
            }
}

/* steps decode steps of two sequences over layers x pages pages each (made
 * with version 1): advance, acquire the group, check every byte, release. */
static void decode_steps(kvt_engine *e, const uint64_t ids[2], uint32_t layers, uint32_t pages,
                         int steps)
{
    kvt_key grp[64];
    void *ptr[64];
    assert_true(pages <= 64);
    for (int step = 0; step < steps; step++)
        for (uint32_t l = 0; l < layers; l++)
            for (uint32_t s = 0; s < 2; s++) {
                assert_int_equal(kvt_advance(e, ids[s], l), 0);
                for (uint32_t i = 0; i < pages; i++)
                    grp[i] = t_key(ids[s], l, i);
                assert_int_equal(kvt_acquire(e, grp, pages, ptr), 0);
                for (uint32_t i = 0; i < pages; i++)
                    assert_true(t_check_page(e, ptr[i], PB, grp[i], 1));
                assert_int_equal(kvt_release(e, grp, pages, 0), 0);
            }
}

static void test_schedule_change_mid_run(void **state)
{
    /* HBM a quarter of the batch's pages: prefetching over live pages is
     * allowed (see prefetch.c) and so must keep happening. */
    const uint32_t layers = 4, pages = 40;
    kvt_config c = t_config(PB, 2 * layers * pages / 4, 8 * layers * pages);
    c.policy = "decode";
    c.prefetch_bytes = 16 * PB;
    kvt_engine *e;
    assert_int_equal(kvt_open(&c, &e), 0);
    uint64_t ids[3] = { 11, 12, 13 };
    create_pages(e, ids, 3, layers, pages);
    uint64_t prefetched[2] = { 0, 0 };
    for (int phase = 0; phase < 2; phase++) {
        kvt_schedule sc = { ids, 2, layers, KVT_ORDER_LAYER_MAJOR, 0, 0 };
        assert_int_equal(kvt_set_schedule(e, &sc), 0);
        kvt_stats s0 = t_stats(e);
        decode_steps(e, ids, layers, pages, 8);
        kvt_stats s1 = t_stats(e);
        print_message("phase %d: %llu pages prefetched, %llu wasted, stall %llu us\n", phase,
                      (unsigned long long)(s1.prefetch_pages - s0.prefetch_pages),
                      (unsigned long long)(s1.prefetch_wasted - s0.prefetch_wasted),
                      (unsigned long long)((s1.stall_ns - s0.stall_ns) / 1000));
        prefetched[phase] = s1.prefetch_pages - s0.prefetch_pages;
        /* sequence ids[0] finishes; ids[2] joins in its place */
        if (phase == 0) {
            assert_int_equal(kvt_drop_id(e, ids[0]), 0);
            kvt_key gone = t_key(ids[0], 0, 0);
            assert_int_equal(kvt_exists(e, &gone, 1, NULL), 0);
            ids[0] = ids[2];
        }
    }
    /* Prefetch runs on the mover, racing the caller: any one phase may see
     * none, but a working policy prefetches across 64 groups. */
    assert_true(prefetched[0] + prefetched[1] > 0);
    kvt_close(e);
}

/* Pairs of consecutive pages of a group whose SSD slots are consecutive
 * too, against all pairs that both have a slot. */
struct pairs {
    uint32_t forward, slotted;
};

static void count_forward(const struct shape *sh, kvt_engine *e, void *arg)
{
    struct pairs *c = arg;
    for (uint32_t s = 0; s < sh->batch; s++)
        for (uint32_t l = 0; l < sh->layers; l++) {
            uint32_t prev = KVT_NONE;
            for (uint32_t i = 0; i < sh->pages + sh->steps; i++) {
                kvt_key k = { seq_id(s), l, i };
                uint32_t pg = kvt_ptable_find(&e->pt, &k);
                uint32_t slot = pg == KVT_NONE ? KVT_NONE : kvt_pg(&e->pt, pg)->ssd_slot;
                if (prev != KVT_NONE && slot != KVT_NONE) {
                    c->slotted++;
                    c->forward += slot == prev + 1;
                }
                prev = slot;
            }
        }
}

/* The decode reads a group's pages in page order, so they should lie in
 * ascending slots on the SSD: the policy evicts a group from its end, and
 * slots taken in eviction order put a group backwards in the file, which
 * this virtual disk reads at two thirds of the forward speed. */
static void test_ssd_layout_forward(void **state)
{
    (void)state;
    struct shape sh = { 2, 2, 64, 3, 0, 0, 0, KVT_ORDER_LAYER_MAJOR };
    struct trace t = { 0 };
    generate(&sh, &t);
    uint32_t group = sh.pages + sh.steps;
    struct pairs c = { 0, 0 };
    replay_with(&sh, &t, group, 2 * group, "decode", 8, count_forward, &c);
    print_message("%u of %u consecutive page pairs in consecutive SSD slots\n", c.forward,
                  c.slotted);
    assert_true(c.slotted >= sh.batch * sh.layers * sh.pages / 2);
    assert_true(c.forward * 10 >= c.slotted * 8);
    free(t.ev);
}

static void test_large_batch(void **state)
{
    sweep((struct shape){ 8, 2, 12, 12, 0, 0, 0, KVT_ORDER_LAYER_MAJOR });
}

/* prefetch_bytes is "at most": a budget of 2^32 pages or more is no limit,
 * where the page count cut to 32 bits used to come out 0 and turn
 * prefetching off. */
static void test_prefetch_bytes_past_32_bits(void **state)
{
    (void)state;
    const uint32_t layers = 4, pages = 40;
    kvt_config c = t_config(PB, 2 * layers * pages / 4, 8 * layers * pages);
    c.policy = "decode";
    c.prefetch_bytes = (size_t)PB << 32;
    kvt_engine *e;
    assert_int_equal(kvt_open(&c, &e), 0);
    uint64_t ids[2] = { 11, 12 };
    create_pages(e, ids, 2, layers, pages);
    kvt_schedule sc = { ids, 2, layers, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    assert_int_equal(kvt_set_schedule(e, &sc), 0);
    decode_steps(e, ids, layers, pages, 16);
    /* As in test_schedule_change_mid_run: over 128 groups a working
     * prefetcher brings some pages up ahead. */
    assert_true(t_stats(e).prefetch_pages > 0);
    kvt_close(e);
}

static const kvt_key two_keys[2] = { { 1000, 1, 0 }, { 1001, 3000, 0 } };

static const kvt_key *two_key_of(void *ctx, uint32_t pg)
{
    return &((const kvt_key *)ctx)[pg];
}

/* The policy numbers groups (n_ids x n_layers) in 32 bits and keeps a
 * bucket per group, so a schedule past KVT_MAX_SCHEDULE_GROUPS is refused
 * with -EINVAL before anything is read or allocated: the product used to
 * wrap (2^20 x 4096 = 2^32 became 0 groups, and filing a page wrote far
 * past the buckets), and n_ids * 8 wrapped the copy's size. */
static void test_schedule_too_many_groups(void **state)
{
    (void)state;
    const size_t n = (size_t)1 << 20;
    uint64_t *ids = calloc(n, sizeof(uint64_t));
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = 1000 + i;
    kvt_config c = t_config(PB, 8, 16);
    c.policy = "decode";
    kvt_engine *e;
    assert_int_equal(kvt_open(&c, &e), 0);
    kvt_schedule sc = { ids, n, 4096, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    assert_int_equal(kvt_set_schedule(e, &sc), -EINVAL);
    sc.n_ids = SIZE_MAX / sizeof(uint64_t) + 2;     /* n_ids * 8 wraps to 8 */
    sc.n_layers = 1;
    assert_int_equal(kvt_set_schedule(e, &sc), -EINVAL);
    /* The engine goes on with the schedule it had (none). */
    kvt_key k = t_key(ids[0], 1, 0);
    void *p;
    assert_int_equal(kvt_create(e, k, &p), 0);
    t_fill_page(e, p, PB, k, 1);
    assert_int_equal(kvt_release(e, &k, 1, 1), 0);
    assert_int_equal(kvt_acquire(e, &k, 1, &p), 0);
    assert_true(t_check_page(e, p, PB, k, 1));
    assert_int_equal(kvt_release(e, &k, 1, 0), 0);
    kvt_close(e);

    /* The simulator hands a trace's schedule to the policy directly: the
     * policy itself runs such a schedule as none (every page unscheduled). */
    const struct kvt_policy_ops *ops = kvt_policy_find("decode");
    uint64_t meta = 0;
    struct kvt_policy_params pp = { .page_cap = 4, .slots = { 4, 4, 0 }, .meta = &meta,
                                    .host = { (void *)two_keys, two_key_of, NULL } };
    const kvt_key *keys = two_keys;
    void *pol;
    assert_int_equal(ops->create(&pp, &pol), 0);
    sc = (kvt_schedule){ ids, n, 4096, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    ops->schedule(pol, &sc);
    for (uint32_t pg = 0; pg < 2; pg++) {
        ops->page_new(pol, pg, &keys[pg]);
        ops->insert(pol, KVT_TIER_HBM, pg, &keys[pg]);
        assert_true(ops->next_use(pol, pg) == KVT_USE_UNKNOWN);
    }
    ops->destroy(pol);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_layer_major),
        cmocka_unit_test(test_full_seq_major),
        cmocka_unit_test(test_batch_one),
        cmocka_unit_test(test_window_and_sinks),
        cmocka_unit_test(test_large_batch),
        cmocka_unit_test(test_dram_with_ssd),
        cmocka_unit_test(test_dram_read_horizon),
        cmocka_unit_test(test_dram_third_copy),
        cmocka_unit_test(test_prefetch_bounded_and_useful),
        cmocka_unit_test(test_schedule_change_mid_run),
        cmocka_unit_test(test_ssd_layout_forward),
        cmocka_unit_test(test_schedule_too_many_groups),
        cmocka_unit_test(test_prefetch_bytes_past_32_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
