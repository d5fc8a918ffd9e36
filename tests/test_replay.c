/*
 * test_replay.c — `kvtier replay`: a block's bytes catch every wrong byte,
 * the caller's recency list, and whole replays of a small trace whose
 * prefix hits are worked out by hand (everything fits) or by a reference
 * LRU (when the replay has to evict).
 *
 * The files of tools/replay/ are compiled into this program (they have no
 * main), so their functions are called directly.
 */
#include <math.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tools/replay/replay_priv.h"

/* ------------------------------------------------------------- blocks */

static void test_key(void **state)
{
    kvt_key k = replay_key(42, 3);
    assert_true(k.id == 42 && k.layer == KVT_ALL_LAYERS && k.index == 3);
}

static void expect_bad(const kvt_key *k, const void *p, size_t n, size_t want_off)
{
    size_t off = (size_t)-1;
    assert_false(replay_check(k, p, n, &off));
    assert_int_equal(off, want_off);
}

static void test_block_bytes(void **state)
{
    enum { N = 64 << 10 };
    unsigned char *p = malloc(N), *q = malloc(N);
    assert_non_null(p);
    assert_non_null(q);
    kvt_key k = replay_key(0x1234, 5), other = replay_key(0x1234, 6), id2 = replay_key(0x1235, 5);
    size_t off;
    replay_fill(&k, p, N);
    assert_true(replay_check(&k, p, N, &off));
    /* one flipped bit anywhere: found, at its byte */
    static const size_t at[] = { 0, 7, 8, 4095, 4096, N / 2 + 3, N - 1 };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        p[at[i]] ^= 0x10;
        expect_bad(&k, p, N, at[i]);
        p[at[i]] ^= 0x10;
    }
    /* another key's block (same id, another position; another id) */
    replay_fill(&other, q, N);
    assert_false(replay_check(&k, q, N, &off));
    assert_true(off < 8);
    replay_fill(&id2, q, N);
    assert_false(replay_check(&k, q, N, &off));
    assert_true(off < 8);
    /* the right block shifted by a word, and a block never written */
    memcpy(q, p + 8, N - 8);
    assert_false(replay_check(&k, q, N, &off));
    assert_true(off < 8);
    memset(q, 0, N);
    assert_false(replay_check(&k, q, N, &off));
    free(p);
    free(q);
}

/* ------------------------------------------------------------- recency */

static void test_lru(void **state)
{
    struct replay_lru l;
    assert_int_equal(replay_lru_init(&l, 5), 0);
    replay_lru_touch(&l, 0);
    replay_lru_touch(&l, 1);
    replay_lru_touch(&l, 2);
    replay_lru_touch(&l, 0); /* 0 used again: 1 is now the oldest */
    assert_int_equal(l.n, 3);
    assert_int_equal(l.tail, 1);
    assert_int_equal(l.head, 0);
    assert_int_equal(l.prev[1], 2);
    replay_lru_forget(&l, 1);
    replay_lru_forget(&l, 1); /* twice: no change */
    assert_int_equal(l.n, 2);
    assert_int_equal(l.tail, 2);
    replay_lru_forget(&l, 0);
    replay_lru_forget(&l, 2);
    assert_int_equal(l.n, 0);
    assert_int_equal(l.head, KVT_NONE);
    assert_int_equal(l.tail, KVT_NONE);
    replay_lru_free(&l);
}

/* ------------------------------------------------------------- replays */

/* CONVS conversations of TURNS turns, turn after turn: request (c, t) is a
 * shared system-prompt block, then conversation c's first 2(t + 1) blocks.
 * With room for everything, (c, t) hits 1 + 2t blocks, except the very
 * first request (none) and each conversation's first turn (the shared
 * block only). */
enum { CONVS = 8, TURNS = 6, SHARED = 1000 };

static uint32_t chain(uint32_t c, uint32_t t, uint64_t *ids)
{
    uint32_t n = 0;
    ids[n++] = SHARED;
    for (uint32_t k = 1; k <= 2 * (t + 1); k++)
        ids[n++] = c * 100 + k;
    return n;
}

static void write_trace(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    uint64_t ids[2 * TURNS + 1];
    for (uint32_t t = 0; t < TURNS; t++)
        for (uint32_t c = 0; c < CONVS; c++) {
            uint32_t n = chain(c, t, ids);
            fprintf(f, "{\"timestamp\": %u, \"input_length\": %u, \"output_length\": 10, \"hash_ids\": [",
                    (t * CONVS + c) * 5, n * 512 - 100);
            for (uint32_t i = 0; i < n; i++)
                fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)ids[i]);
            fprintf(f, "]}\n");
        }
    fclose(f);
}

/* The prefix hits of an LRU cache of cap blocks on that trace: a request
 * hits its longest present prefix, then every block of it is used in chain
 * order (stored if missing, the least recent block of another request
 * evicted when full). O(refs x cap), by definition. */
static uint64_t reference_lru(uint32_t cap)
{
    uint64_t held[128], used[128], ids[2 * TURNS + 1], clock = 0, hits = 0;
    uint32_t n_held = 0;
    assert_true(cap <= 128);
    for (uint32_t t = 0; t < TURNS; t++)
        for (uint32_t c = 0; c < CONVS; c++) {
            uint32_t n = chain(c, t, ids), h = 0;
            bool prefix = true;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t j = 0;
                while (j < n_held && held[j] != ids[i])
                    j++;
                prefix = prefix && j < n_held;
                h += prefix;
                if (j == n_held && n_held == cap) { /* evict the oldest not of this request */
                    uint32_t v = UINT32_MAX;
                    for (uint32_t a = 0; a < n_held; a++) {
                        bool mine = false;
                        for (uint32_t b = 0; b < n; b++)
                            mine |= held[a] == ids[b];
                        if (!mine && (v == UINT32_MAX || used[a] < used[v]))
                            v = a;
                    }
                    assert_true(v != UINT32_MAX);
                    j = v;
                } else if (j == n_held) {
                    n_held++;
                }
                held[j] = ids[i];
                used[j] = ++clock;
            }
            hits += h;
        }
    return hits;
}

static void replay_n(const char *policy, double cap, unsigned concurrency, struct replay_result *r)
{
    char dir[] = "/tmp/kvt-test-replay-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    write_trace(path);
    struct replay_opts o;
    replay_opts_default(&o);
    o.trace_path = path;
    o.block_bytes = 64 << 10;
    o.block_given = true;
    o.capacity = (struct replay_cap){ CAP_FRACTION, cap, 0 };
    o.policy = policy;
    o.progress = 0;
    o.concurrency = concurrency;
    assert_int_equal(replay_exec(&o, r), 0);
    unlink(path);
    rmdir(dir);
}

static void replay(const char *policy, double cap, struct replay_result *r)
{
    replay_n(policy, cap, 1, r);
}

/* Checks that hold for any replay of the trace. */
static void common_checks(const struct replay_result *r)
{
    const uint64_t refs = CONVS * TURNS + CONVS * 2 * (TURNS * (TURNS + 1) / 2);
    assert_true(r->verified);
    assert_int_equal(r->bad_blocks, 0);
    assert_int_equal(r->requests, CONVS * TURNS);
    assert_int_equal(r->refs, refs);
    assert_int_equal(r->distinct, 1 + CONVS * 2 * TURNS);
    assert_int_equal(r->hits_by_tier[0] + r->hits_by_tier[1] + r->hits_by_tier[2], r->hit_blocks);
    /* Every block a get found is checked; with a hit lost (present to
     * kvt_exists, evicted before kvt_get: only when requests overlap) the
     * blocks found after it are checked but are not in the hit prefix. */
    assert_true(r->bytes_verified >= r->hit_blocks * (64 << 10));
    if (!r->lost_hits)
        assert_int_equal(r->bytes_verified, r->hit_blocks * (64 << 10));
    assert_int_equal(r->get_bytes[KVT_TIER_DRAM] + r->get_bytes[KVT_TIER_SSD], r->bytes_verified);
    /* a quarter in DRAM, the rest on SSD: the SSD is written */
    assert_int_equal(r->slots[KVT_TIER_DRAM], r->capacity_blocks / 4);
    assert_int_equal(r->slots[KVT_TIER_HBM], 1);
    assert_int_equal(r->slots[KVT_TIER_SSD], r->capacity_blocks - r->capacity_blocks / 4 - 1);
    assert_true(r->delta.bytes_down[KVT_TIER_DRAM] > 0);
    assert_true(r->end.pages <= r->capacity_blocks);
}

/* Hits of test_replay_fits: 7 on the first turn; (1 + 2t) for each
 * conversation's later turns. */
static uint64_t hits_when_fits(void)
{
    uint64_t want = CONVS - 1;
    for (uint32_t t = 1; t < TURNS; t++)
        want += CONVS * (1 + 2 * t);
    return want;
}

static void test_replay_fits(void **state)
{
    struct replay_result r;
    replay(NULL, 1.0, &r);
    common_checks(&r);
    assert_int_equal(r.hit_blocks, hits_when_fits());
    assert_int_equal(r.capacity_blocks, r.distinct);
    assert_int_equal(r.client_evicted, 0);
    assert_int_equal(r.unstored, 0);
    assert_true(r.hits_by_tier[KVT_TIER_SSD] > 0); /* DRAM holds a quarter: SSD serves */
}

/* Four requests served at once: every byte still verified and every
 * counter of every request merged. A request may miss the blocks of one
 * still being served; a conversation's next turn comes eight requests
 * later, so most of them still hit. */
static void test_replay_concurrent(void **state)
{
    struct replay_result r;
    replay_n(NULL, 1.0, 4, &r);
    common_checks(&r);
    assert_true(r.hit_blocks >= hits_when_fits() / 2);
    assert_true(r.get_s[KVT_TIER_SSD] > 0 && r.put_s > 0);
}

/* Four requests at once in a cache of half the blocks: the engine evicts,
 * as it does for one request at a time, and the caller never has to. A put
 * that finds every staging slot held by the other requests' calls waits in
 * the engine for one of them to let go (api/buffers.c, put_wait_slots);
 * it had answered KVT_EFULL with pages to spare, and the replay dropped its
 * own blocks one by one. */
static void test_replay_concurrent_full(void **state)
{
    struct replay_result r;
    replay_n("lru", 0.5, 4, &r);
    common_checks(&r);
    assert_int_equal(r.client_evicted, 0);
    assert_int_equal(r.unstored, 0);
}

static void test_replay_evicts(void **state)
{
    struct replay_result r;
    replay("lru", 0.5, &r);
    common_checks(&r);
    assert_int_equal(r.capacity_blocks, (1 + CONVS * 2 * TURNS) / 2);
    /* The caller evicts only when the engine refuses: then the hits are an
     * LRU's over the same capacity, exactly. */
    if (r.client_evicted)
        assert_int_equal(r.hit_blocks, reference_lru((uint32_t)r.capacity_blocks));
    else
        assert_true(r.hit_blocks <= reference_lru(97)); /* never more than with room for all */
}

/* ------------------------------------------------------------- the spill directory */

/* Two requests 11.6 days apart, paced at the trace's speed: the replay
 * serves the first, then waits for the second until a signal comes. Small
 * tiers: 16 blocks of DRAM, 32 of SSD. */
static void two_requests(char *path, size_t n, const char *dir)
{
    snprintf(path, n, "%s.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 10, "
               "\"hash_ids\": [1, 2]}\n"
               "{\"timestamp\": 1000000000, \"input_length\": 1000, \"output_length\": 10, "
               "\"hash_ids\": [1, 3]}\n");
    fclose(f);
}

/* --ssd-dir naming a persisted store: refused, saying what is there, and
 * every page kept (0749676 wiped all of them with no word); with
 * --overwrite-ssd-dir the replay takes it. Its own pages (persist off) are
 * discarded at its end, so the next replay needs no option. */
static void test_replay_keeps_persisted_store(void **state)
{
    char dir[64], trace[80], *out, *err;
    assert_int_equal(t_tmpdir(dir, sizeof dir, "replay-store"), 0);
    two_requests(trace, sizeof trace, dir);
    /* getopt_long reorders argv: a fresh one for each call */
#define ARGV(last) (char *[]){ "replay", trace, "--block-bytes", "64K", "--dram", "1M", "--ssd", \
                               "2M", "--no-progress", "--ssd-dir", dir, last, NULL }
    t_store_pages(dir, 10);
    int rc = t_run_cmd(replay_main, ARGV(NULL), &out, &err);
    uint64_t kept = t_stored_pages(dir, 10);
    if (rc != 2 || !strstr(err, "holds a persisted kvtier store: 10 pages of 16384 bytes") ||
        !strstr(err, "--overwrite-ssd-dir"))
        fail_msg("exit %d, %llu of 10 pages kept, stderr:\n%s", rc, (unsigned long long)kept, err);
    assert_int_equal(kept, 10);
    free(out);
    free(err);
    assert_int_equal(t_run_cmd(replay_main, ARGV("--overwrite-ssd-dir"), &out, &err), 0);
    free(out);
    free(err);
    rc = t_run_cmd(replay_main, ARGV(NULL), &out, &err);
#undef ARGV
    if (rc != 0)
        fail_msg("a second replay on its own directory: exit %d, stderr:\n%s", rc, err);
    free(out);
    free(err);
    unlink(trace);
    t_rmtree(dir);
}

/* SIGINT or SIGTERM while the replay waits for its second request (the
 * engine open): it stops, its temporary spill directory goes through the
 * normal close path, and it ends by the signal. On 0749676 the signal's
 * default action left the directory behind (1.8 GB on the Mooncake trace). */
static void interrupted(int sig)
{
    char top[64], trace[80];
    assert_int_equal(t_tmpdir(top, sizeof top, "replay-signal"), 0);
    two_requests(trace, sizeof trace, top);
    char *argv[] = { "replay", trace, "--block-bytes", "64K", "--dram", "1M", "--ssd", "2M",
                     "--speed", "1", "--no-progress", NULL };
    t_expect_interrupted(replay_main, argv, top, sig);
    unlink(trace);
}

static void test_replay_sigint(void **state) { interrupted(SIGINT); }
static void test_replay_sigterm(void **state) { interrupted(SIGTERM); }

/* ------------------------------------------------------------- --speed */

/* A request is due at its distance from the first one / speed; one stamped
 * before the first is due at once, not 2^64 ms later. */
static void test_due(void **state)
{
    assert_true(replay_due_s(1000, 1000, 1) == 0);
    assert_true(replay_due_s(3000, 1000, 1) == 2);
    assert_true(replay_due_s(3000, 1000, 1000) == 0.002);
    assert_true(replay_due_s(3000, 1000, 0.001) == 2000);
    assert_true(replay_due_s(0, 1000, 1) == 0);
    assert_true(replay_due_s(0, UINT64_MAX / 1000, 1e-3) == 0);
    double far = replay_due_s(UINT64_MAX / 1000, 0, REPLAY_MIN_SPEED);
    assert_true(isfinite(far) && far > 1e16);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_block_bytes),
        cmocka_unit_test(test_lru),
        cmocka_unit_test(test_due),
        cmocka_unit_test(test_replay_fits),
        cmocka_unit_test(test_replay_evicts),
        cmocka_unit_test(test_replay_concurrent),
        cmocka_unit_test(test_replay_concurrent_full),
        cmocka_unit_test(test_replay_keeps_persisted_store),
        cmocka_unit_test(test_replay_sigint),
        cmocka_unit_test(test_replay_sigterm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
