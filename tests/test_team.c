/*
 * test_team.c — the SSD pipeline's decode team (tiers/ssd_team.c): every
 * item of a round runs exactly once, by the caller or the helper, and the
 * round returns only when all have; rounds follow each other on one team.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "tests/helpers.h"
#include "api/api.h"

#define MAXN 64

struct round {
    atomic_uint runs[MAXN];
    atomic_uint by_worker[2];
    atomic_uint finished;
    unsigned bad_worker;
};

static void item(void *arg, uint32_t i, unsigned worker)
{
    struct round *r = arg;
    if (worker > 1) {
        r->bad_worker++;
        return;
    }
    /* A little work, so that the helper has the chance to take some. */
    volatile unsigned x = 0;
    for (unsigned k = 0; k < 2000; k++)
        x += k;
    atomic_fetch_add(&r->runs[i], 1);
    atomic_fetch_add(&r->by_worker[worker], 1);
    atomic_fetch_add(&r->finished, 1);
}

static void check_round(struct kvt_team *t, uint32_t n)
{
    struct round r = { 0 };
    kvt_team_for(t, n, item, &r);
    /* Every item ran once, and all had returned by the time the round did. */
    assert_int_equal(atomic_load(&r.finished), n);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(atomic_load(&r.runs[i]), 1);
    assert_int_equal(r.bad_worker, 0);
    assert_int_equal(atomic_load(&r.by_worker[0]) + atomic_load(&r.by_worker[1]), n);
}

static void test_each_item_once(void **state)
{
    struct kvt_team *t = NULL;
    assert_int_equal(kvt_team_open(&t), 0);
    static const uint32_t sizes[] = { 0, 1, 2, 3, 8, 17, 64 };
    for (int rep = 0; rep < 200; rep++)
        check_round(t, sizes[rep % (sizeof(sizes) / sizeof(sizes[0]))]);
    kvt_team_close(t);
}

/* Without a team (one CPU, or the helper could not start) the caller runs
 * every item itself, as worker 0. */
static void test_no_team_runs_inline(void **state)
{
    struct round r = { 0 };
    kvt_team_for(NULL, 9, item, &r);
    assert_int_equal(atomic_load(&r.finished), 9);
    assert_int_equal(atomic_load(&r.by_worker[0]), 9);
    kvt_team_close(NULL); /* nothing */
}

/* Opened and closed without a round: the helper stops. */
static void test_close_idle(void **state)
{
    for (int i = 0; i < 20; i++) {
        struct kvt_team *t = NULL;
        assert_int_equal(kvt_team_open(&t), 0);
        kvt_team_close(t);
    }
    assert_true(kvt_cpus_usable() >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_item_once),
        cmocka_unit_test(test_no_team_runs_inline),
        cmocka_unit_test(test_close_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
