/*
 * redis_helpers.h — what the tests against real Redis servers share
 * (test_rcluster.c, test_remote_cluster.c; header-only, after helpers.h):
 * whether redis-server is installed, the skip-or-fail rule, an admin
 * connection to one node, and a node's pid as the harness wrote it.
 */
#ifndef KVT_TEST_REDIS_HELPERS_H
#define KVT_TEST_REDIS_HELPERS_H

#include <hiredis/hiredis.h>
#include <sys/time.h>

/* Whether redis-server is an executable on PATH (looked up by hand: the
 * tests run no shell either, docs/security.md). */
static inline bool t_redis_installed(void)
{
    const char *path = getenv("PATH");
    char dir[4096];
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        if (n && n < sizeof dir - 16) {
            snprintf(dir, sizeof dir, "%.*s/redis-server", (int)n, p);
            if (access(dir, X_OK) == 0)
                return true;
        }
        p += n + (p[n] == ':');
    }
    return false;
}

/* Without redis-server a group is skipped (77), but under CI=true it is a
 * failure (1): CI's set-up installs it. */
static inline int t_redis_missing(const char *prog)
{
    const char *ci = getenv("CI");
    bool in_ci = ci && !strcmp(ci, "true");
    fprintf(stderr, "%s: redis-server is not installed%s\n", prog,
            in_ci ? " (CI: a failure)" : ": SKIP");
    return in_ci ? 1 : 77;
}

/* A blocking connection to the node on 127.0.0.1:port, authenticated with
 * the password in passfile (NULL: none). Fails the test otherwise. */
static inline redisContext *t_redis_admin(unsigned port, const char *passfile)
{
    struct timeval tv = { 5, 0 };
    redisContext *a = redisConnectWithTimeout("127.0.0.1", (int)port, tv);
    assert_non_null(a);
    assert_int_equal(a->err, 0);
    redisSetTimeout(a, tv);
    if (passfile) {
        char pass[128] = "";
        FILE *f = fopen(passfile, "r");
        assert_non_null(f);
        assert_non_null(fgets(pass, sizeof pass, f));
        fclose(f);
        pass[strcspn(pass, "\r\n")] = '\0';
        redisReply *r = redisCommand(a, "AUTH %s", pass);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    return a;
}

/* The pid tools/redis-cluster.sh wrote for the node on port under dir. */
static inline pid_t t_redis_pid(const char *dir, unsigned port)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%u/pid", dir, port);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return pid;
}

#endif /* KVT_TEST_REDIS_HELPERS_H */
