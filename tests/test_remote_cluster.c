/*
 * test_remote_cluster.c — engines sharing a real Redis Cluster (the shared
 * tier end to end: tiers/remote.c, store/remote_store.c, io/rcluster.c).
 * Groups, each against its ctest fixture (tests/CMakeLists.txt):
 *     shared    3+3: one engine process stores, another (the first gone)
 *               finds and reads every page; values another client wrote
 *               under kvtier's keys read as misses, counted
 *     efailover 3+3: a master SIGKILLed while engines read: no wrong byte,
 *               no error, no call past its bound; hits come back
 *     auth      a cluster with a password: a wrong or missing one is a
 *               clear error at open, naming the cluster, not the password
 *     evict     3 masters evicting at 8 MB: misses, nothing wrong
 * The same logic with faults made in memory: tests/test_remote.c.
 */
#include "tests/helpers.h"
#include "tests/redis_helpers.h"

#include <poll.h>
#include <sys/time.h>

#include "io/rcluster.h"
#include "store/remote_frame.h"

#define PAGE (64u << 10)
#define MARGIN_MS 1500
#define TIMEOUT_MS 200

static const char *g_group;
static unsigned g_port;
static const char *g_dir;
static const char *g_passfile;
static char g_url[256];
static char g_prefix[32];   /* this run's keys: two runs never meet */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static kvt_config config(void)
{
    kvt_config c = t_config(PAGE, 4, 16);
    c.policy = NULL;
    c.flags = KVT_FLAG_EVICT;
    c.fingerprint = 0x5eed;
    c.remote_url = g_url;
    c.remote_prefix = g_prefix;
    c.remote_timeout_ms = TIMEOUT_MS;
    c.remote_auth_file = g_passfile;
    return c;
}

static void put_range(kvt_engine *e, uint32_t from, uint32_t to, uint64_t v)
{
    uint8_t *buf = malloc(PAGE);
    for (uint32_t i = from; i < to; i++) {
        kvt_key k = t_key(1000 + i, 0, i);
        util_pattern_fill(buf, PAGE, k, v);
        const void *src = buf;
        assert_int_equal(kvt_put(e, &k, 1, &src, 0), 0);
    }
    free(buf);
}

/* Reads pages [from, to) one call each: how many came back; a wrong byte,
 * an error or a call past its bound fails. */
static uint32_t read_range(kvt_engine *e, uint32_t from, uint32_t to, uint64_t v, double *worst)
{
    uint8_t *buf = aligned_alloc(4096, PAGE);
    uint32_t ok = 0;
    for (uint32_t i = from; i < to; i++) {
        kvt_key k = t_key(1000 + i, 0, i);
        int found = 0;
        void *dst = buf;
        double t0 = now_ms();
        assert_int_equal(kvt_get(e, &k, 1, &dst, 0, &found), 0);
        double took = now_ms() - t0;
        if (worst && took > *worst)
            *worst = took;
        assert_true(took < TIMEOUT_MS + MARGIN_MS);
        if (found) {
            assert_true(util_pattern_check(buf, PAGE, k, v));
            ok++;
        }
    }
    free(buf);
    return ok;
}

static kvt_stats stats_of(kvt_engine *e)
{
    kvt_stats s;
    assert_int_equal(kvt_get_stats(e, &s), 0);
    return s;
}

static kvt_engine *open_ok(void)
{
    kvt_config c = config();
    kvt_engine *e = NULL;
    int rc = kvt_open(&c, &e);
    if (rc)
        fail_msg("kvt_open: %s (%s)", kvt_strerror(rc), kvt_last_error());
    return e;
}

/* ----------------------------------------------------------------- shared */

static void test_two_processes_share_pages(void **state)
{
    enum { N = 96 };
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        kvt_config c = config();
        kvt_engine *e = NULL;
        if (kvt_open(&c, &e))
            _exit(2);
        uint8_t *buf = malloc(PAGE);
        for (uint32_t i = 0; i < N; i++) {
            kvt_key k = t_key(1000 + i, 0, i);
            util_pattern_fill(buf, PAGE, k, 7);
            const void *src = buf;
            if (kvt_put(e, &k, 1, &src, 0))
                _exit(3);
        }
        kvt_flush(e);
        kvt_stats s;
        kvt_get_stats(e, &s);
        kvt_close(e);
        _exit(s.remote_published == N ? 0 : 4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* The writer is gone: the pages live in the cluster. */
    kvt_engine *e = open_ok();
    kvt_key keys[N];
    kvt_tier where[N];
    for (uint32_t i = 0; i < N; i++)
        keys[i] = t_key(1000 + i, 0, i);
    assert_int_equal(kvt_exists(e, keys, N, where), N);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(where[i], KVT_TIER_REMOTE);
    assert_int_equal(read_range(e, 0, N, 7, NULL), N);
    kvt_stats s = stats_of(e);
    assert_int_equal(s.remote_hits, N);
    assert_int_equal(s.remote_nodes, 3);
    /* A batch of many keys at once, across every master. */
    uint8_t *bufs = aligned_alloc(4096, (size_t)N * PAGE);
    void *dst[N];
    int found[N];
    for (uint32_t i = 0; i < N; i++)
        dst[i] = bufs + (size_t)i * PAGE;
    kvt_close(e);
    e = open_ok();
    assert_int_equal(kvt_get(e, keys, N, dst, 0, found), 0);
    for (uint32_t i = 0; i < N; i++) {
        assert_int_equal(found[i], 1);
        assert_true(util_pattern_check(dst[i], PAGE, keys[i], 7));
    }
    free(bufs);
    kvt_close(e);
}

static redisContext *admin(unsigned port)
{
    return t_redis_admin(port, g_passfile);
}

/* SET name value on whichever master owns it (following one MOVED). */
static void raw_set(const char *name, const void *val, size_t len)
{
    redisContext *a = admin(g_port);
    redisReply *r = redisCommand(a, "SET %s %b", name, val, len);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "MOVED ", 6)) {
        unsigned port = (unsigned)atoi(strrchr(r->str, ':') + 1);
        freeReplyObject(r);
        redisFree(a);
        a = admin(port);
        r = redisCommand(a, "SET %s %b", name, val, len);
        assert_non_null(r);
    }
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(a);
}

static void test_values_written_by_others_are_misses(void **state)
{
    kvt_engine *e = open_ok();
    put_range(e, 200, 204, 1);
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    char name[4][KVT_RFRAME_KEY_MAX];
    for (uint32_t i = 0; i < 4; i++) {
        kvt_key k = t_key(1000 + 200 + i, 0, 200 + i);
        assert_true(kvt_rframe_name(name[i], sizeof name[i], g_prefix, 0x5eed, &k) > 0);
    }
    size_t vlen = KVT_RFRAME_HDR + PAGE;
    uint8_t *v = malloc(vlen);
    memset(v, 0x5A, vlen);
    raw_set(name[0], v, vlen);      /* garbage */
    raw_set(name[1], v, 100);       /* short garbage */
    /* another key's value, read back whole with a raw GET */
    redisContext *a = admin(g_port);
    redisReply *r = redisCommand(a, "GET %s", name[3]);
    if (r && r->type == REDIS_REPLY_ERROR) {
        unsigned port = (unsigned)atoi(strrchr(r->str, ':') + 1);
        freeReplyObject(r);
        redisFree(a);
        a = admin(port);
        r = redisCommand(a, "GET %s", name[3]);
    }
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal((size_t)r->len, vlen);
    memcpy(v, r->str, vlen);
    freeReplyObject(r);
    redisFree(a);
    raw_set(name[2], v, vlen);      /* page 3's value under page 2's name */
    raw_set(name[3], v, vlen - 7);  /* page 3's, truncated */

    e = open_ok();
    assert_int_equal(read_range(e, 200, 204, 1, NULL), 0);
    kvt_stats s = stats_of(e);
    assert_int_equal(s.remote_corrupt, 4);
    assert_int_equal(s.remote_hits, 0);
    kvt_close(e);
    free(v);
}

/* -------------------------------------------------------------- failover */

static pid_t pid_of(unsigned port)
{
    return t_redis_pid(g_dir, port);
}

static void test_a_master_killed_while_reading(void **state)
{
    enum { N = 120 };
    kvt_engine *w = open_ok();
    put_range(w, 0, N, 3);
    assert_int_equal(kvt_flush(w), 0);
    kvt_close(w);
    /* On the replicas before anything dies. */
    for (unsigned m = 0; m < 3; m++) {
        redisContext *a = admin(g_port + m);
        redisReply *r = redisCommand(a, "WAIT 1 5000");
        if (r)
            freeReplyObject(r);
        redisFree(a);
    }
    kvt_engine *e = open_ok();
    double worst = 0;
    assert_int_equal(read_range(e, 0, N, 3, &worst), N);
    kvt_close(e); /* nothing local: the next engine reads the cluster again */

    assert_int_equal(kill(pid_of(g_port), SIGKILL), 0);
    e = open_ok();
    uint32_t during = read_range(e, 0, N, 3, &worst);
    assert_true(during < N); /* a third of the pages were on the dead master */
    kvt_close(e);
    int rounds = 0;
    for (;; rounds++) {
        e = open_ok();
        uint32_t got = read_range(e, 0, N, 3, &worst);
        kvt_close(e);
        if (got == N)
            break;
        assert_true(rounds < 60);
        poll(NULL, 0, 500);
    }
    print_message("failover: %u of %u pages during, all back after %d rounds; slowest call "
                  "%.0f ms (bound %d + %d)\n", during, N, rounds, worst, TIMEOUT_MS, MARGIN_MS);
}

/* ------------------------------------------------------------------ auth */

static void test_wrong_password_is_a_clear_error(void **state)
{
    char file[512];
    snprintf(file, sizeof file, "%s/engine-wrong.pass", g_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("not-the-secret\n", f);
    fclose(f);
    char pass[128] = "";
    f = fopen(g_passfile, "r");
    assert_non_null(f);
    assert_non_null(fgets(pass, sizeof pass, f));
    fclose(f);
    pass[strcspn(pass, "\r\n")] = '\0';

    const char *files[2] = { file, NULL };
    for (int i = 0; i < 2; i++) {
        kvt_config c = config();
        c.remote_auth_file = files[i];
        kvt_engine *e = (kvt_engine *)1;
        double t0 = now_ms();
        int rc = kvt_open(&c, &e);
        assert_true(now_ms() - t0 < 3 * TIMEOUT_MS + MARGIN_MS);
        assert_int_equal(rc, -EACCES);
        assert_null(e);
        char seed[32];
        snprintf(seed, sizeof seed, "127.0.0.1:%u", g_port);
        assert_non_null(strstr(kvt_last_error(), seed));
        assert_null(strstr(kvt_last_error(), pass));
        assert_null(strstr(kvt_last_error(), "not-the-secret"));
    }
    kvt_engine *e = open_ok(); /* the right one (g_passfile) */
    put_range(e, 0, 8, 2);
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    e = open_ok();
    assert_int_equal(read_range(e, 0, 8, 2, NULL), 8);
    kvt_close(e);
}

/* ----------------------------------------------------------------- evict */

static void test_redis_evicting_gives_misses_never_wrong_bytes(void **state)
{
    enum { N = 600 }; /* 38 MB into 3 x 8 MB */
    kvt_engine *e = open_ok();
    put_range(e, 0, N, 5);
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    e = open_ok();
    kvt_key keys[N];
    for (uint32_t i = 0; i < N; i++)
        keys[i] = t_key(1000 + i, 0, i);
    kvt_tier *where = malloc(N * sizeof(*where));
    kvt_exists(e, keys, N, where);
    uint32_t said = 0;
    for (uint32_t i = 0; i < N; i++)
        said += where[i] == KVT_TIER_REMOTE;
    uint32_t got = read_range(e, 0, N, 5, NULL);
    kvt_stats s = stats_of(e);
    print_message("evict: %u of %u pages left in the cluster, %u said present, %llu lost\n", got,
                  N, said, (unsigned long long)s.remote_lost);
    assert_true(got > 0 && got < N);
    assert_int_equal(s.remote_hits, got);
    assert_int_equal(s.remote_corrupt, 0);
    assert_int_equal(s.remote_misses, N - got);
    free(where);
    kvt_close(e);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_two_processes_share_pages),
        cmocka_unit_test(test_values_written_by_others_are_misses),
    };
    const struct CMUnitTest failover[] = { cmocka_unit_test(test_a_master_killed_while_reading) };
    const struct CMUnitTest auth[] = { cmocka_unit_test(test_wrong_password_is_a_clear_error) };
    const struct CMUnitTest evict[] = {
        cmocka_unit_test(test_redis_evicting_gives_misses_never_wrong_bytes),
    };
    if (argc < 4) {
        fprintf(stderr, "usage: test_remote_cluster GROUP PORT DIR [PASSFILE]\n");
        return 2;
    }
    g_group = argv[1];
    if (!t_redis_installed())
        return t_redis_missing("test_remote_cluster");
    g_port = (unsigned)atoi(argv[2]);
    g_dir = argv[3];
    g_passfile = argc > 4 ? argv[4] : NULL;
    snprintf(g_prefix, sizeof g_prefix, "kvt-e%ld", (long)getpid());
    if (!strcmp(g_group, "auth"))
        snprintf(g_url, sizeof g_url, "redis://127.0.0.1:%u", g_port);
    else
        snprintf(g_url, sizeof g_url, "redis://127.0.0.1:%u,127.0.0.1:%u,127.0.0.1:%u", g_port,
                 g_port + 1, g_port + 2);
    signal(SIGPIPE, SIG_DFL);
    if (!strcmp(g_group, "shared"))
        return cmocka_run_group_tests_name("remote_shared", shared, NULL, NULL);
    if (!strcmp(g_group, "efailover"))
        return cmocka_run_group_tests_name("remote_failover", failover, NULL, NULL);
    if (!strcmp(g_group, "auth"))
        return cmocka_run_group_tests_name("remote_auth", auth, NULL, NULL);
    if (!strcmp(g_group, "evict"))
        return cmocka_run_group_tests_name("remote_evict", evict, NULL, NULL);
    fprintf(stderr, "test_remote_cluster: unknown group %s\n", g_group);
    return 2;
}
