/*
 * test_rcluster.c — the Redis Cluster client (io/rcluster*.c).
 *
 *   test_rcluster parse                 the pure parts: slots, URLs, auth
 *                                       lines, error replies, CLUSTER SLOTS
 *                                       and the reply sink; and the client
 *                                       against a hostile fake server of
 *                                       its own (no Redis)
 *   test_rcluster GROUP PORT DIR [PASSFILE]
 *                                       against real servers that the ctest
 *                                       fixture started with
 *                                       tools/redis-cluster.sh in DIR from
 *                                       PORT (tests/CMakeLists.txt):
 *     shared    3 masters + 3 replicas: round trips, parts, NX, TTL, misuse
 *     failover  3+3: a master stopped (SIGSTOP: slow), then SIGKILLed
 *     reshard   3 masters: a slot moved by hand (ASK, then MOVED), then
 *               redis-cli --cluster reshard while reading
 *     auth      3 masters with requirepass (PASSFILE)
 *     single    one non-cluster redis-server
 *     evict     3 masters with maxmemory and allkeys-lru
 *
 * Without redis-server the server groups are skipped (exit 77), unless
 * CI=true, where that is a failure. Every value is a pattern of its key
 * and checked byte for byte; time is asserted only as "within the deadline
 * plus a margin for a loaded machine".
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "tests/helpers.h"
#include "tests/redis_helpers.h"
#include "io/rcluster.h"
#include "io/rcluster_parse.h"

extern char **environ;

static const char *g_group;
static unsigned g_port;
static const char *g_dir;
static const char *g_passfile;
static char g_url[256];

#define KIB 1024u
#define MIB (1024u * 1024u)
/* Slack above a deadline for a busy 2-core machine: the bound is what the
 * client promises (its deadline), the margin is the scheduler's. */
#define MARGIN_MS 1500

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Bytes that depend on the key's number, the position and a version. */
static void fill(void *p, size_t n, unsigned key, unsigned version)
{
    uint8_t *b = p;
    uint64_t x = 0x9E3779B97F4A7C15ull * (key + 1) ^ (uint64_t)version << 40;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (uint8_t)x;
    }
}

static bool same(const void *p, size_t n, unsigned key, unsigned version)
{
    uint8_t *want = malloc(n ? n : 1);
    assert_non_null(want);
    fill(want, n, key, version);
    bool ok = memcmp(p, want, n) == 0;
    free(want);
    return ok;
}

static struct kvt_rcluster *open_url(const char *url, const char *auth_file, unsigned timeout_ms)
{
    struct kvt_rcluster_opts o = { url, auth_file, timeout_ms, 0 };
    struct kvt_rcluster *c = NULL;
    char err[256];
    int rc = kvt_rcluster_open(&o, &c, err, sizeof err);
    if (rc != 0)
        fail_msg("open %s: %d %s", url, rc, err);
    return c;
}

static redisContext *admin(unsigned port)
{
    return t_redis_admin(port, g_passfile);
}

static redisReply *cmd(redisContext *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(a, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis: %s", r->str);
    return r;
}

static void cmd_ok(unsigned port, const char *fmt, ...)
{
    redisContext *a = admin(port);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(a, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis :%u: %s", port, r->str);
    freeReplyObject(r);
    redisFree(a);
}

/* The port of the master serving slot, from CLUSTER SLOTS of node port. */
static unsigned master_of(unsigned port, unsigned slot)
{
    redisContext *a = admin(port);
    redisReply *r = cmd(a, "CLUSTER SLOTS");
    unsigned found = 0;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (slot >= (unsigned)e->element[0]->integer && slot <= (unsigned)e->element[1]->integer)
            found = (unsigned)e->element[2]->element[1]->integer;
    }
    freeReplyObject(r);
    redisFree(a);
    assert_true(found != 0);
    return found;
}

static void node_id(unsigned port, char *id, size_t cap)
{
    redisContext *a = admin(port);
    redisReply *r = cmd(a, "CLUSTER MYID");
    snprintf(id, cap, "%s", r->str);
    freeReplyObject(r);
    redisFree(a);
}

static pid_t pid_of(unsigned port)
{
    return t_redis_pid(g_dir, port);
}

/* n keys "<prefix><i>", values of the given size (2 sizes alternating). */
struct keys {
    unsigned n;
    char (*name)[64];
    size_t *size;
    uint8_t **val;
    uint8_t **buf;
    struct kvt_rc_item *it;
};

static struct keys keys_make(const char *prefix, unsigned n, size_t size_a, size_t size_b)
{
    struct keys k = { n, calloc(n, 64), calloc(n, sizeof(size_t)), calloc(n, sizeof(void *)),
                      calloc(n, sizeof(void *)), calloc(n, sizeof(struct kvt_rc_item)) };
    assert_true(k.name && k.size && k.val && k.buf && k.it);
    for (unsigned i = 0; i < n; i++) {
        snprintf(k.name[i], 64, "%s%u", prefix, i);
        k.size[i] = i % 2 ? size_b : size_a;
        k.val[i] = malloc(k.size[i]);
        k.buf[i] = malloc(k.size[i]);
        assert_true(k.val[i] && k.buf[i]);
        fill(k.val[i], k.size[i], i, 1);
    }
    return k;
}

static void keys_free(struct keys *k)
{
    for (unsigned i = 0; i < k->n; i++) {
        free(k->val[i]);
        free(k->buf[i]);
    }
    free(k->name);
    free(k->size);
    free(k->val);
    free(k->buf);
    free(k->it);
}

static struct kvt_rc_item *items(struct keys *k, bool with_val)
{
    for (unsigned i = 0; i < k->n; i++)
        k->it[i] = (struct kvt_rc_item){ .key = k->name[i], .key_len = strlen(k->name[i]),
                                         .val = with_val ? k->val[i] : NULL,
                                         .val_len = with_val ? k->size[i] : 0,
                                         .buf = k->buf[i], .cap = k->size[i], .res = 99 };
    return k->it;
}

static void set_all(struct kvt_rcluster *c, struct keys *k)
{
    assert_int_equal(kvt_rcluster_set(c, items(k, true), k->n, 0, 0), (int)k->n);
}

/* Reads all; each hit must be exact; returns the hits. */
static int get_all(struct kvt_rcluster *c, struct keys *k)
{
    int hits = kvt_rcluster_get(c, items(k, false), k->n);
    int seen = 0;
    for (unsigned i = 0; i < k->n; i++) {
        struct kvt_rc_item *x = &k->it[i];
        if (x->res == 1) {
            seen++;
            assert_int_equal(x->len, k->size[i]);
            if (!same(x->buf, x->len, i, 1))
                fail_msg("key %s: wrong bytes", k->name[i]);
        }
    }
    assert_int_equal(hits, seen);
    return hits;
}

/* ----------------------------------------------------------------- parse */
static void test_slot(void **state)
{
    assert_int_equal(rc_crc16("123456789", 9), 0x31C3);
    assert_int_equal(kvt_rcluster_slot("foo", 3), 12182);
    assert_int_equal(kvt_rcluster_slot("bar", 3), 5061);
    assert_int_equal(kvt_rcluster_slot("", 0), 0);
    unsigned a = kvt_rcluster_slot("{user1000}.following", 20);
    assert_int_equal(a, kvt_rcluster_slot("{user1000}.followers", 20));
    assert_int_equal(a, kvt_rcluster_slot("user1000", 8));
    /* "{}" is no tag; the first '{' and the first '}' after it decide. */
    assert_int_equal(kvt_rcluster_slot("foo{}{bar}", 10), rc_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(kvt_rcluster_slot("foo{{bar}}zap", 13), rc_crc16("{bar", 4) & 16383);
    assert_int_equal(kvt_rcluster_slot("foo{bar}{zap}", 13), rc_crc16("bar", 3) & 16383);
    assert_int_equal(kvt_rcluster_slot("{abc", 4), rc_crc16("{abc", 4) & 16383);
}

static void test_url(void **state)
{
    struct rc_url u;
    char why[160];
    assert_int_equal(rc_url_parse("redis://127.0.0.1:7000", &u, why, sizeof why), 0);
    assert_int_equal(u.n_seeds, 1);
    assert_string_equal(u.seeds[0].host, "127.0.0.1");
    assert_int_equal(u.seeds[0].port, 7000);
    assert_string_equal(u.pass, "");
    assert_int_equal(rc_url_parse("redis://alice:s%40cret@h1:1,h2,[::1]:3,[::1]/", &u, why, sizeof why), 0);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.pass, "s@cret");
    assert_int_equal(u.n_seeds, 4);
    assert_int_equal(u.seeds[1].port, 6379);
    assert_string_equal(u.seeds[2].host, "::1");
    assert_int_equal(u.seeds[2].port, 3);
    assert_string_equal(u.seeds[3].host, "::1");
    assert_int_equal(u.seeds[3].port, 6379);
    assert_int_equal(rc_url_parse("redis://:pw@h:2", &u, why, sizeof why), 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.pass, "pw");
    static const char *const bad[] = {
        "", "http://h:1", "rediss://h:1", "redis://", "redis://h:0", "redis://h:65536",
        "redis://h:12a", "redis://h:1,", "redis://,h:1", "redis://h:1/2", "redis://u:p%4@h:1",
        "redis://h h:1", "redis://:@", "redis://u:p%00@h:1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        if (rc_url_parse(bad[i], &u, why, sizeof why) != -EINVAL)
            fail_msg("accepted %s", bad[i]);
        assert_true(why[0] != '\0');
        assert_null(strstr(why, "p%"));
    }
    assert_int_equal(rc_url_parse(NULL, &u, NULL, 0), -EINVAL);
}

static void test_auth_line(void **state)
{
    char user[RC_SECRET_MAX], pass[RC_SECRET_MAX];
    assert_int_equal(rc_auth_parse("secret\n", 7, user, pass), 0);
    assert_string_equal(user, "");
    assert_string_equal(pass, "secret");
    assert_int_equal(rc_auth_parse("  bob  pw \r\n", 12, user, pass), 0);
    assert_string_equal(user, "bob");
    assert_string_equal(pass, "pw");
    assert_int_equal(rc_auth_parse("", 0, user, pass), -EINVAL);
    assert_int_equal(rc_auth_parse("\n\n", 2, user, pass), -EINVAL);
    assert_int_equal(rc_auth_parse("a b c", 5, user, pass), -EINVAL);
    assert_int_equal(rc_auth_parse("a\nb", 3, user, pass), -EINVAL);
    assert_int_equal(rc_auth_parse("a\0b", 3, user, pass), -EINVAL);
}

static void test_errors(void **state)
{
    unsigned slot = 0;
    struct rc_addr to;
#define E(s) s, sizeof s - 1
    assert_int_equal(rc_err_classify(E("MOVED 3999 127.0.0.1:6381"), &slot, &to), RC_ERR_MOVED);
    assert_int_equal(slot, 3999);
    assert_string_equal(to.host, "127.0.0.1");
    assert_int_equal(to.port, 6381);
    assert_int_equal(rc_err_classify(E("ASK 16383 :7001"), &slot, &to), RC_ERR_ASK);
    assert_string_equal(to.host, "");
    assert_int_equal(to.port, 7001);
    assert_int_equal(rc_err_classify(E("MOVED 1 ::1:7001"), &slot, &to), RC_ERR_MOVED);
    assert_string_equal(to.host, "::1");
    static const char *const badr[] = { "MOVED 16384 h:1", "MOVED x h:1", "MOVED 1 h", "MOVED 1 h:99999",
                                        "MOVED 1  h:1", "MOVED ", "ASK 1 h:1 extra", "MOVED 1 h\x01:1" };
    for (size_t i = 0; i < sizeof badr / sizeof badr[0]; i++)
        assert_int_equal(rc_err_classify(badr[i], strlen(badr[i]), &slot, &to), RC_ERR_BADREDIRECT);
    assert_int_equal(rc_err_classify(E("TRYAGAIN Multiple keys"), NULL, NULL), RC_ERR_RETRY);
    assert_int_equal(rc_err_classify(E("CLUSTERDOWN The cluster is down"), NULL, NULL), RC_ERR_RETRY);
    assert_int_equal(rc_err_classify(E("NOAUTH Authentication required."), NULL, NULL), RC_ERR_AUTH);
    assert_int_equal(rc_err_classify(E("WRONGPASS invalid username-password pair"), NULL, NULL), RC_ERR_AUTH);
    assert_int_equal(rc_err_classify(E("ERR invalid password"), NULL, NULL), RC_ERR_AUTH);
    assert_int_equal(rc_err_classify(E("ERR This instance has cluster support disabled"), NULL, NULL),
                     RC_ERR_NOCLUSTER);
    assert_int_equal(rc_err_classify(E("READONLY You can't write"), NULL, NULL), RC_ERR_READONLY);
    assert_int_equal(rc_err_classify(E("OOM command not allowed"), NULL, NULL), RC_ERR_OTHER);
    assert_int_equal(rc_err_classify("MOV", 3, NULL, NULL), RC_ERR_OTHER);
#undef E
}

/* A reply parsed by hiredis's reader from RESP text. */
static redisReply *resp(const char *text)
{
    redisReader *r = redisReaderCreate();
    void *out = NULL;
    assert_int_equal(redisReaderFeed(r, text, strlen(text)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(r, &out), REDIS_OK);
    assert_non_null(out);
    redisReaderFree(r);
    return out;
}

static void test_slots_reply(void **state)
{
    static struct rc_slot_range rg[RC_SLOTS];
    size_t n = 0;
    redisReply *r = resp("*2\r\n"
                         "*4\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
                         "*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$2\r\nid\r\n"
                         "*3\r\n:5461\r\n:16383\r\n*2\r\n$1\r\n?\r\n:7001\r\n");
    assert_int_equal(rc_slots_parse(r, rg, RC_SLOTS, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rg[0].lo, 0);
    assert_int_equal(rg[0].hi, 5460);
    assert_string_equal(rg[0].master.host, "127.0.0.1");
    assert_int_equal(rg[0].master.port, 7000);
    assert_string_equal(rg[1].master.host, "");   /* unknown endpoint: the asked node's host */
    assert_int_equal(rg[1].master.port, 7001);
    assert_int_equal(rc_slots_parse(r, rg, 1, &n), -EPROTO);   /* more ranges than room */
    freeReplyObject(r);
    static const char *const bad[] = {
        "$3\r\nabc\r\n",
        "*1\r\n:1\r\n",
        "*1\r\n*2\r\n:0\r\n:1\r\n",
        "*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",          /* reversed */
        "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",      /* slot out of range */
        "*1\r\n*3\r\n:-1\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",
        "*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n$1\r\nh\r\n:0\r\n",          /* port 0 */
        "*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n$1\r\nh\r\n$4\r\n7000\r\n",  /* port as a string */
        "*1\r\n*3\r\n:0\r\n:4\r\n*1\r\n$1\r\nh\r\n",
        "*1\r\n*3\r\n$1\r\n0\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",
        "*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n:5\r\n:1\r\n",                /* host as an integer */
        "*1\r\n*3\r\n:0\r\n:4\r\n$1\r\nx\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = resp(bad[i]);
        if (rc_slots_parse(r, rg, RC_SLOTS, &n) != -EPROTO)
            fail_msg("accepted %zu", i);
        assert_int_equal(n, 0);
        freeReplyObject(r);
    }
    char host[512];
    char big[400];
    memset(big, 'h', 300);
    big[300] = '\0';
    snprintf(host, sizeof host, "*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n$300\r\n%s\r\n:1\r\n", big);
    r = resp(host);
    assert_int_equal(rc_slots_parse(r, rg, RC_SLOTS, &n), -EPROTO);
    freeReplyObject(r);
}

static void test_sink(void **state)
{
    struct rc_sink s;
    redisReader *rd = rc_sink_reader(&s);
    char buf[8];
    void *out;
    assert_non_null(rd);
    assert_ptr_equal(s.rd, rd);
    const char *text = "$5\r\nhello\r\n$9\r\ntoo long!\r\n$-1\r\n:42\r\n-MOVED 1 h:2\r\n+OK\r\n*2\r\n$1\r\na\r\n:1\r\n";
    assert_int_equal(redisReaderFeed(rd, text, strlen(text)), REDIS_OK);
    rc_sink_reset(&s, buf, sizeof buf);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_non_null(out);
    assert_int_equal(s.type, REDIS_REPLY_STRING);
    assert_int_equal(s.len, 5);
    assert_memory_equal(buf, "hello", 5);
    memset(buf, 'x', sizeof buf);
    rc_sink_reset(&s, buf, sizeof buf);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_int_equal(s.len, 9);            /* told, not copied */
    assert_int_equal(buf[0], 'x');
    rc_sink_reset(&s, buf, sizeof buf);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_int_equal(s.type, REDIS_REPLY_NIL);
    rc_sink_reset(&s, NULL, 0);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_int_equal(s.type, REDIS_REPLY_INTEGER);
    assert_int_equal(s.integer, 42);
    rc_sink_reset(&s, NULL, 0);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_int_equal(s.type, REDIS_REPLY_ERROR);
    assert_string_equal(s.text, "MOVED 1 h:2");
    rc_sink_reset(&s, NULL, 0);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_int_equal(s.type, REDIS_REPLY_STATUS);
    assert_string_equal(s.text, "OK");
    rc_sink_reset(&s, buf, sizeof buf);
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_int_equal(s.type, REDIS_REPLY_ARRAY);  /* nested replies consumed, not kept */
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_null(out);
    assert_false(s.bad);
    redisReaderFree(rd);
}

/* ---------------------------------------------------------------- hostile */
/* A server on 127.0.0.1 (a port the kernel picks) that says it is a single
 * non-cluster Redis, then answers the first batch it reads with `payload`
 * whatever was asked, and closes the connection after it when close_after. */
struct fake {
    int lfd;
    unsigned port;
    const char *payload;
    size_t payload_len;
    bool close_after;
    const char *later;             /* what later batches get (NULL: nothing) */
    pthread_t thread;
};

static void fake_serve(struct fake *f, int fd)
{
    char b[4096];
    bool answered = false;
    for (;;) {
        ssize_t n = read(fd, b, sizeof b);
        if (n <= 0)
            break;
        if (memmem(b, (size_t)n, "CLUSTER", 7)) {
            static const char no[] = "-ERR This instance has cluster support disabled\r\n";
            if (write(fd, no, sizeof no - 1) < 0)
                break;
        } else if (!answered) {
            answered = true;
            if (write(fd, f->payload, f->payload_len) < 0 || f->close_after)
                break;
        } else if (f->later) {
            if (write(fd, f->later, strlen(f->later)) < 0)
                break;
        }
    }
    close(fd);
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        fake_serve(f, fd);
    }
}

static void fake_start(struct fake *f, const char *payload, size_t len, bool close_after,
                       const char *later)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    *f = (struct fake){ .payload = payload, .payload_len = len, .close_after = close_after,
                        .later = later };
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);   /* accept() returns: the thread ends */
    pthread_join(f->thread, NULL);
    close(f->lfd);
}

/* A port nothing listens on: bound, then closed. */
static unsigned dead_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static const char *g_later;   /* hostile_get's fake.later */
static struct kvt_rcluster_stats g_hostile_stats;

/* Runs a GET of n keys against a fake answering payload; returns the results. */
static void hostile_get(const char *payload, size_t len, bool close_after, size_t n, int *res,
                        size_t *lens)
{
    struct fake f;
    char url[64], bufs[4][8];
    struct kvt_rc_item it[4];
    fake_start(&f, payload, len, close_after, g_later);
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", f.port);
    struct kvt_rcluster *c = open_url(url, NULL, 300);
    for (size_t i = 0; i < n; i++)
        it[i] = (struct kvt_rc_item){ .key = "k", .key_len = 1, .buf = bufs[i], .cap = 8, .res = 99 };
    double t0 = now_ms();
    int hits = kvt_rcluster_get(c, it, n);
    assert_true(now_ms() - t0 < 300 + MARGIN_MS);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        res[i] = it[i].res;
        lens[i] = it[i].len;
        seen += it[i].res == 1;
    }
    assert_int_equal(hits, seen);
    kvt_rcluster_stats(c, &g_hostile_stats);
    kvt_rcluster_close(c);
    fake_stop(&f);
}

#define S(x) x, sizeof x - 1

static void test_hostile(void **state)
{
    int res[4];
    size_t len[4];
    char moved[64];
    /* Wrong types for GET: an integer, an array; a right one between. */
    hostile_get(S(":5\r\n$3\r\nabc\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"), false, 3, res, len);
    assert_int_equal(res[0], -EPROTO);
    assert_int_equal(res[1], 1);
    assert_int_equal(len[1], 3);
    assert_int_equal(res[2], -EPROTO);
    /* A length far past what ever comes: the deadline, not a wait or a read past. */
    hostile_get(S("$99999999999\r\nab"), false, 1, res, len);
    assert_int_equal(res[0], -ETIMEDOUT);
    hostile_get(S("$-7\r\n"), false, 1, res, len);   /* read as nil by hiredis: a miss */
    assert_true(res[0] == 0 || res[0] == -EPROTO);
    /* Not RESP at all. */
    hostile_get(S("!!!\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EPROTO);
    /* Redirects to nowhere: unparsable, then to a port nothing listens on. */
    hostile_get(S("-MOVED 1 nothost\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EPROTO);
    hostile_get(S("-ASK 16384 127.0.0.1:1\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EPROTO);
    int ml = snprintf(moved, sizeof moved, "-MOVED 5 127.0.0.1:%u\r\n", dead_port());
    hostile_get(moved, (size_t)ml, false, 1, res, len);
    assert_int_equal(res[0], -ECONNREFUSED);
    /* Half a reply, then the connection closed (every time): a reset, after
     * one more try on a new connection. */
    hostile_get(S("$5\r\nab"), true, 1, res, len);
    assert_int_equal(res[0], -ECONNRESET);
    /* A value bigger than the buffer: its length, not its bytes. */
    hostile_get(S("$20\r\n01234567890123456789\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EMSGSIZE);
    assert_int_equal(len[0], 20);
    /* A reply no command asked for after the right ones: the call is
     * answered, the connection is not used again. */
    hostile_get(S("$1\r\nx\r\n+OK\r\n"), false, 1, res, len);
    assert_int_equal(res[0], 1);
    /* An error the client has no use for. */
    hostile_get(S("-OOM command not allowed\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EIO);
    hostile_get(S("-NOAUTH Authentication required.\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EACCES);
    /* TRYAGAIN, then the value: retried within the deadline. CLUSTERDOWN
     * for ever: -EAGAIN at the deadline. */
    g_later = "$2\r\nok\r\n";
    hostile_get(S("-TRYAGAIN Multiple keys request during rehashing of slot\r\n"), false, 1, res, len);
    assert_int_equal(res[0], 1);
    assert_int_equal(g_hostile_stats.tryagain, 1);
    g_later = "-CLUSTERDOWN The cluster is down\r\n";
    hostile_get(S("-CLUSTERDOWN The cluster is down\r\n"), false, 1, res, len);
    assert_int_equal(res[0], -EAGAIN);
    assert_true(g_hostile_stats.tryagain > 1);
    g_later = NULL;
}
#undef S

/* ---------------------------------------------------------- open, misuse */
/* A socket that accepts connections (the kernel does) and never answers. */
static int silent_listener(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);
    return fd;
}

static void test_open_errors(void **state)
{
    struct kvt_rcluster *c = (void *)1;
    char err[256], url[128];
    struct kvt_rcluster_opts o = { "redis://127.0.0.1", NULL, 100, 50 };
    o.url = "redis://u:hunter2@127.0.0.1:0";
    assert_int_equal(kvt_rcluster_open(&o, &c, err, sizeof err), -EINVAL);
    assert_null(c);
    assert_null(strstr(err, "hunter2"));
    assert_int_equal(kvt_rcluster_open(NULL, &c, err, sizeof err), -EINVAL);
    /* Nothing listens on PORT+99: refused, at once. */
    snprintf(url, sizeof url, "redis://u:hunter2@127.0.0.1:%u", g_port + 99);
    o.url = url;
    double t0 = now_ms();
    assert_int_equal(kvt_rcluster_open(&o, &c, err, sizeof err), -ECONNREFUSED);
    assert_true(now_ms() - t0 < 50 + 2 * 100 + MARGIN_MS);
    assert_non_null(strstr(err, "127.0.0.1:"));
    assert_null(strstr(err, "hunter2"));
    /* One that accepts and never answers: timed out, within connect + 2 round trips. */
    int fd = silent_listener(g_port + 98);
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", g_port + 98);
    t0 = now_ms();
    assert_int_equal(kvt_rcluster_open(&o, &c, err, sizeof err), -ETIMEDOUT);
    assert_true(now_ms() - t0 < 50 + 2 * 100 + MARGIN_MS);
    close(fd);
    /* An auth file that is missing or not one line. */
    o.auth_file = "/nonexistent/kvt-pass";
    assert_int_equal(kvt_rcluster_open(&o, &c, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/kvt-pass"));
}

static void test_misuse(void **state)
{
    struct kvt_rc_item it[2] = { { .key = "a", .key_len = 1, .res = 7 },
                                 { .key = NULL, .key_len = 3, .res = 7 } };
    assert_int_equal(kvt_rcluster_get(NULL, it, 1), -EINVAL);
    assert_int_equal(kvt_rcluster_get(NULL, NULL, 0), 0);
    struct kvt_rcluster *c = open_url(g_url, NULL, 1000);
    assert_int_equal(kvt_rcluster_get(c, NULL, 1), -EINVAL);
    assert_int_equal(kvt_rcluster_get(c, it, 2), -EINVAL);
    assert_int_equal(it[0].res, 7);   /* nothing touched */
    it[1] = (struct kvt_rc_item){ .key = "b", .key_len = 1, .val = NULL, .val_len = 5 };
    assert_int_equal(kvt_rcluster_set(c, it, 2, 0, 0), -EINVAL);
    it[1] = (struct kvt_rc_item){ .key = "b", .key_len = 1, .buf = NULL, .cap = 5 };
    assert_int_equal(kvt_rcluster_get(c, it, 2), -EINVAL);
    assert_int_equal(it[0].res, 7);
    kvt_rcluster_close(c);
    kvt_rcluster_close(NULL);
}

/* ----------------------------------------------------------- shared */
/* Which master holds each key: every one of the three holds some. */
static void assert_spread(struct keys *k)
{
    unsigned ports[3] = { 0 }, count[3] = { 0 };
    for (unsigned i = 0; i < k->n; i++) {
        unsigned p = master_of(g_port, kvt_rcluster_slot(k->name[i], strlen(k->name[i])));
        for (int j = 0; j < 3; j++)
            if (ports[j] == p || !ports[j]) {
                ports[j] = p;
                count[j]++;
                break;
            }
    }
    for (int j = 0; j < 3; j++)
        assert_true(count[j] > 0);
}

static void test_roundtrip(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    struct keys k = keys_make("kvt-test:rt:", 48, 256 * KIB, MIB);
    struct kvt_rcluster_stats s;
    assert_spread(&k);
    set_all(c, &k);
    memset(k.buf[0], 0, k.size[0]);
    assert_int_equal(get_all(c, &k), (int)k.n);
    assert_int_equal(kvt_rcluster_exists(c, items(&k, false), k.n), (int)k.n);
    /* Half deleted: those read as misses (len 0), the others still exact. */
    assert_int_equal(kvt_rcluster_del(c, items(&k, false), k.n / 2), (int)k.n / 2);
    assert_int_equal(kvt_rcluster_del(c, items(&k, false), k.n / 2), 0);
    assert_int_equal(get_all(c, &k), (int)(k.n - k.n / 2));
    for (unsigned i = 0; i < k.n / 2; i++) {
        assert_int_equal(k.it[i].res, 0);
        assert_int_equal(k.it[i].len, 0);
    }
    assert_int_equal(kvt_rcluster_exists(c, items(&k, false), k.n), (int)(k.n - k.n / 2));
    kvt_rcluster_stats(c, &s);
    assert_int_equal(s.nodes, 3);
    assert_int_equal(s.nodes_down, 0);
    assert_true(s.bytes_out > 24 * (256 * KIB + MIB));
    assert_true(s.bytes_in > 24 * (256 * KIB + MIB));
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.timeouts, 0);
    kvt_rcluster_del(c, items(&k, false), k.n);
    keys_free(&k);
    kvt_rcluster_close(c);
}

static void test_parts_and_cap(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    uint8_t head[64], *page = malloc(256 * KIB), *both = malloc(256 * KIB + 64), *got = malloc(MIB);
    assert_true(page && both && got);
    fill(head, sizeof head, 1, 2);
    fill(page, 256 * KIB, 2, 2);
    memcpy(both, head, 64);
    memcpy(both + 64, page, 256 * KIB);
    struct kvt_rc_item it = { .key = "kvt-test:parts", .key_len = 14, .val = head, .val_len = 64,
                              .val2 = page, .val2_len = 256 * KIB };
    assert_int_equal(kvt_rcluster_set(c, &it, 1, 0, 0), 1);
    it = (struct kvt_rc_item){ .key = "kvt-test:parts", .key_len = 14, .buf = got, .cap = MIB };
    assert_int_equal(kvt_rcluster_get(c, &it, 1), 1);
    assert_int_equal(it.len, 256 * KIB + 64);
    assert_memory_equal(got, both, 256 * KIB + 64);
    /* Too small a buffer: the length, -EMSGSIZE, not a hit. */
    it.cap = 1000;
    assert_int_equal(kvt_rcluster_get(c, &it, 1), 0);
    assert_int_equal(it.res, -EMSGSIZE);
    assert_int_equal(it.len, 256 * KIB + 64);
    /* An empty value and a binary key. */
    it = (struct kvt_rc_item){ .key = "k\0\r\n{}", .key_len = 6, .val = NULL, .val_len = 0 };
    assert_int_equal(kvt_rcluster_set(c, &it, 1, 0, 0), 1);
    it.buf = got;
    it.cap = 10;
    assert_int_equal(kvt_rcluster_get(c, &it, 1), 1);
    assert_int_equal(it.len, 0);
    assert_int_equal(kvt_rcluster_del(c, &it, 1), 1);
    it = (struct kvt_rc_item){ .key = "kvt-test:parts", .key_len = 14 };
    kvt_rcluster_del(c, &it, 1);
    free(page);
    free(both);
    free(got);
    kvt_rcluster_close(c);
}

static void test_nx_ttl(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    struct kvt_rc_item it[2] = { { .key = "kvt-test:nx", .key_len = 11, .val = "one", .val_len = 3 },
                                 { .key = "kvt-test:ttl", .key_len = 12, .val = "two", .val_len = 3 } };
    kvt_rcluster_del(c, it, 2);
    assert_int_equal(kvt_rcluster_set(c, it, 1, 0, 1), 1);
    it[0].val = "uno";
    assert_int_equal(kvt_rcluster_set(c, it, 1, 0, 1), 0);   /* first writer wins */
    assert_int_equal(it[0].res, 0);
    char b[8];
    it[0].buf = b;
    it[0].cap = sizeof b;
    assert_int_equal(kvt_rcluster_get(c, it, 1), 1);
    assert_memory_equal(b, "one", 3);
    assert_int_equal(kvt_rcluster_set(c, &it[1], 1, 100, 0), 1);
    redisContext *a = admin(master_of(g_port, kvt_rcluster_slot("kvt-test:ttl", 12)));
    redisReply *r = cmd(a, "TTL kvt-test:ttl");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_true(r->integer > 0 && r->integer <= 100);
    freeReplyObject(r);
    redisFree(a);
    kvt_rcluster_del(c, it, 2);
    kvt_rcluster_close(c);
}

/* Seeds that are dead first, a live one last: open still finds the map. */
static void test_seed_order(void **state)
{
    char url[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%u,127.0.0.1:%u", g_port + 99, g_port + 1);
    struct kvt_rcluster *c = open_url(url, NULL, 1000);
    struct kvt_rcluster_stats s;
    kvt_rcluster_stats(c, &s);
    assert_int_equal(s.nodes, 3);
    kvt_rcluster_close(c);
}

/* --------------------------------------------------------------- failover */
/* The deadline of the failover test's calls: under the cluster's node
 * timeout (1000 ms), so that a node stopped for one call is not failed over. */
#define FO_TIMEOUT_MS 500

static void test_failover(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, FO_TIMEOUT_MS);
    struct keys k = keys_make("kvt-test:fo:", 60, 64 * KIB, 96 * KIB);
    struct kvt_rcluster_stats s0, s;
    set_all(c, &k);
    for (unsigned m = 0; m < 3; m++) /* on the replicas before anything dies */
        cmd_ok(master_of(g_port, m * 6000), "WAIT 1 5000");
    unsigned slot0 = kvt_rcluster_slot(k.name[0], strlen(k.name[0]));
    unsigned victim = master_of(g_port, slot0);
    pid_t pid = pid_of(victim);
    bool *on_victim = calloc(k.n, sizeof(bool));
    for (unsigned i = 0; i < k.n; i++)
        on_victim[i] = master_of(g_port, kvt_rcluster_slot(k.name[i], strlen(k.name[i]))) == victim;

    /* Slow (stopped): its keys time out within the deadline, the others hit. */
    assert_int_equal(kill(pid, SIGSTOP), 0);
    double t0 = now_ms();
    int hits = get_all(c, &k);
    double took = now_ms() - t0;
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_true(took < FO_TIMEOUT_MS + MARGIN_MS);
    for (unsigned i = 0; i < k.n; i++)
        assert_int_equal(k.it[i].res, on_victim[i] ? -ETIMEDOUT : 1);
    assert_true(hits > 0 && hits < (int)k.n);
    kvt_rcluster_stats(c, &s0);
    assert_true(s0.timeouts > 0);

    /* Dead: misses or errors, never a wrong byte, never past the deadline;
     * every key back once the replica is master and the map is new. */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int tries = 0;
    for (;; tries++) {
        t0 = now_ms();
        hits = get_all(c, &k);
        assert_true(now_ms() - t0 < FO_TIMEOUT_MS + MARGIN_MS);
        for (unsigned i = 0; i < k.n; i++) {
            if (!on_victim[i])
                assert_int_equal(k.it[i].res, 1);
            else
                assert_true(k.it[i].res == 1 || k.it[i].res < 0);
        }
        if (hits == (int)k.n)
            break;
        assert_true(tries < 600);   /* 30 s */
        poll(NULL, 0, 50);
    }
    kvt_rcluster_stats(c, &s);
    assert_true(s.refreshes > s0.refreshes);
    assert_int_equal(s.nodes, 3);
    assert_int_equal(s.nodes_down, 0);
    print_message("failover: %d calls until every key was back; refreshes %llu reconnects %llu\n",
                  tries, (unsigned long long)s.refreshes, (unsigned long long)s.reconnects);
    free(on_victim);
    keys_free(&k);
    kvt_rcluster_close(c);
}

/* ---------------------------------------------------------------- reshard */
static void test_migrate_slot(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    struct keys k = keys_make("{kvt-mig}k", 20, 32 * KIB, 48 * KIB);
    struct kvt_rcluster_stats s;
    char ida[64], idb[64];
    unsigned slot = kvt_rcluster_slot("kvt-mig", 7);
    set_all(c, &k);
    unsigned from = master_of(g_port, slot), to = from == g_port ? g_port + 1 : g_port;
    node_id(from, ida, sizeof ida);
    node_id(to, idb, sizeof idb);
    cmd_ok(to, "CLUSTER SETSLOT %u IMPORTING %s", slot, ida);
    cmd_ok(from, "CLUSTER SETSLOT %u MIGRATING %s", slot, idb);
    /* Half moved: those answer ASK at the old master. */
    for (unsigned i = 0; i < 10; i++)
        cmd_ok(from, "MIGRATE 127.0.0.1 %u %s 0 5000", to, k.name[i]);
    assert_int_equal(get_all(c, &k), (int)k.n);
    kvt_rcluster_stats(c, &s);
    assert_int_equal(s.asks, 10);
    assert_int_equal(s.moved, 0);
    /* All moved and the slot given to the new master: MOVED, once. */
    for (unsigned i = 10; i < 20; i++)
        cmd_ok(from, "MIGRATE 127.0.0.1 %u %s 0 5000", to, k.name[i]);
    for (unsigned p = g_port; p < g_port + 3; p++)
        cmd_ok(p, "CLUSTER SETSLOT %u NODE %s", slot, idb);
    assert_int_equal(get_all(c, &k), (int)k.n);
    kvt_rcluster_stats(c, &s);
    assert_true(s.moved >= 1);
    uint64_t moved = s.moved;
    assert_int_equal(get_all(c, &k), (int)k.n);   /* the map knows now */
    kvt_rcluster_stats(c, &s);
    assert_int_equal(s.moved, moved);
    assert_int_equal(s.errors, 0);
    keys_free(&k);
    kvt_rcluster_close(c);
}

static void test_reshard_while_reading(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    struct keys k = keys_make("kvt-test:rs:", 300, 8 * KIB, 24 * KIB);
    struct kvt_rcluster_stats s0, s;
    char from[64], to[64], host[32];
    set_all(c, &k);
    kvt_rcluster_stats(c, &s0);
    node_id(master_of(g_port, 100), from, sizeof from);
    node_id(master_of(g_port, 16000), to, sizeof to);
    snprintf(host, sizeof host, "127.0.0.1:%u", g_port);
    char *argv[] = { "redis-cli", "--cluster", "reshard", host, "--cluster-from", from,
                     "--cluster-to", to, "--cluster-slots", "600", "--cluster-yes",
                     "--cluster-pipeline", "5", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    assert_int_equal(posix_spawnp(&pid, "redis-cli", &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0, reads = 0;
    for (;;) {
        assert_int_equal(get_all(c, &k), (int)k.n);
        reads++;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
    }
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(get_all(c, &k), (int)k.n);
    kvt_rcluster_stats(c, &s);
    print_message("reshard: %d full reads during it; moved %llu asks %llu tryagain %llu\n", reads,
                  (unsigned long long)(s.moved - s0.moved), (unsigned long long)(s.asks - s0.asks),
                  (unsigned long long)(s.tryagain - s0.tryagain));
    assert_true(s.moved > s0.moved);
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.timeouts, 0);
    keys_free(&k);
    kvt_rcluster_close(c);
}

/* ------------------------------------------------------------------- auth */
static void read_pass(char *pass, size_t cap)
{
    FILE *f = fopen(g_passfile, "r");
    assert_non_null(f);
    assert_non_null(fgets(pass, (int)cap, f));
    fclose(f);
    pass[strcspn(pass, "\r\n")] = '\0';
}

static void expect_denied(const char *url, const char *auth_file, const char *pass)
{
    struct kvt_rcluster_opts o = { url, auth_file, 300, 100 };
    struct kvt_rcluster *c = (void *)1;
    char err[512], seed[32];
    double t0 = now_ms();
    int rc = kvt_rcluster_open(&o, &c, err, sizeof err);
    assert_true(now_ms() - t0 < 100 + 2 * 300 + MARGIN_MS);
    assert_int_equal(rc, -EACCES);
    assert_null(c);
    snprintf(seed, sizeof seed, "127.0.0.1:%u", g_port);
    assert_non_null(strstr(err, seed));
    assert_null(strstr(err, pass));
    assert_null(strstr(err, "wrong-one"));
}

static void test_auth(void **state)
{
    char pass[128], url[512], file[512];
    read_pass(pass, sizeof pass);
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", g_port);
    expect_denied(url, NULL, pass);                                   /* none given: NOAUTH */
    snprintf(url, sizeof url, "redis://:wrong-one@127.0.0.1:%u", g_port);
    expect_denied(url, NULL, pass);                                   /* wrong: WRONGPASS */
    snprintf(file, sizeof file, "%s/wrong.pass", g_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("default wrong-one\n", f);
    fclose(f);
    snprintf(url, sizeof url, "redis://127.0.0.1:%u", g_port);
    expect_denied(url, file, pass);                                   /* user + wrong */

    /* Right: from the URL, from the file (which overrides the URL's), as
     * user + password. */
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%u", pass, g_port);
    struct kvt_rcluster *c = open_url(url, NULL, 1000);
    struct keys k = keys_make("kvt-test:auth:", 12, 4 * KIB, 8 * KIB);
    set_all(c, &k);
    assert_int_equal(get_all(c, &k), (int)k.n);
    kvt_rcluster_close(c);
    snprintf(url, sizeof url, "redis://:wrong-one@127.0.0.1:%u", g_port);
    c = open_url(url, g_passfile, 1000);
    assert_int_equal(get_all(c, &k), (int)k.n);
    kvt_rcluster_close(c);
    f = fopen(file, "w");
    assert_non_null(f);
    fprintf(f, "default %s\n", pass);
    fclose(f);
    c = open_url(url, file, 1000);
    assert_int_equal(get_all(c, &k), (int)k.n);
    kvt_rcluster_close(c);
    keys_free(&k);
}

/* ----------------------------------------------------------------- single */
static void test_single(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    struct keys k = keys_make("kvt-test:one:", 40, 256 * KIB, MIB);
    struct kvt_rcluster_stats s;
    set_all(c, &k);
    assert_int_equal(get_all(c, &k), (int)k.n);
    assert_int_equal(kvt_rcluster_exists(c, items(&k, false), k.n), (int)k.n);
    assert_int_equal(kvt_rcluster_del(c, items(&k, false), k.n), (int)k.n);
    assert_int_equal(get_all(c, &k), 0);
    kvt_rcluster_stats(c, &s);
    assert_int_equal(s.nodes, 1);
    assert_int_equal(s.moved, 0);
    assert_int_equal(s.errors, 0);
    keys_free(&k);
    kvt_rcluster_close(c);
}

/* ------------------------------------------------------------------ evict */
static void test_evict(void **state)
{
    struct kvt_rcluster *c = open_url(g_url, NULL, 2000);
    struct keys k = keys_make("kvt-test:ev:", 160, 256 * KIB, 256 * KIB);
    struct kvt_rcluster_stats s;
    /* 40 MB into three nodes of 8 MB: Redis evicts (allkeys-lru). */
    items(&k, true);
    for (unsigned at = 0; at < k.n; at += 16)
        assert_int_equal(kvt_rcluster_set(c, k.it + at, 16, 0, 0), 16);
    int hits = get_all(c, &k), misses = 0;
    for (unsigned i = 0; i < k.n; i++) {
        assert_true(k.it[i].res == 1 || k.it[i].res == 0);
        misses += k.it[i].res == 0;
    }
    print_message("evict: %d of %u read back, %d evicted\n", hits, k.n, misses);
    assert_true(hits > 0);
    assert_true(misses > 0);
    kvt_rcluster_stats(c, &s);
    assert_int_equal(s.errors, 0);
    keys_free(&k);
    kvt_rcluster_close(c);
}

/* ------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    const struct CMUnitTest parse[] = {
        cmocka_unit_test(test_slot),        cmocka_unit_test(test_url),
        cmocka_unit_test(test_auth_line),   cmocka_unit_test(test_errors),
        cmocka_unit_test(test_slots_reply), cmocka_unit_test(test_sink),
        cmocka_unit_test(test_hostile),
    };
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_open_errors), cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_parts_and_cap),
        cmocka_unit_test(test_nx_ttl),      cmocka_unit_test(test_seed_order),
    };
    const struct CMUnitTest failover[] = { cmocka_unit_test(test_failover) };
    const struct CMUnitTest reshard[] = { cmocka_unit_test(test_migrate_slot),
                                          cmocka_unit_test(test_reshard_while_reading) };
    const struct CMUnitTest auth[] = { cmocka_unit_test(test_auth) };
    const struct CMUnitTest single[] = { cmocka_unit_test(test_single) };
    const struct CMUnitTest evict[] = { cmocka_unit_test(test_evict) };

    g_group = argc > 1 ? argv[1] : "parse";
    if (!strcmp(g_group, "parse"))
        return cmocka_run_group_tests_name("rcluster_parse", parse, NULL, NULL);
    if (argc < 4) {
        fprintf(stderr, "usage: test_rcluster parse | GROUP PORT DIR [PASSFILE]\n");
        return 2;
    }
    if (!t_redis_installed())
        return t_redis_missing("test_rcluster");
    g_port = (unsigned)atoi(argv[2]);
    g_dir = argv[3];
    g_passfile = argc > 4 ? argv[4] : NULL;
    if (!strcmp(g_group, "auth"))
        snprintf(g_url, sizeof g_url, "redis://127.0.0.1:%u", g_port);
    else
        snprintf(g_url, sizeof g_url, "redis://127.0.0.1:%u,127.0.0.1:%u,127.0.0.1:%u", g_port,
                 g_port + 1, g_port + 2);
    signal(SIGPIPE, SIG_DFL);   /* the client must never raise it: the default kills */
    if (!strcmp(g_group, "shared"))
        return cmocka_run_group_tests_name("rcluster_shared", shared, NULL, NULL);
    if (!strcmp(g_group, "failover"))
        return cmocka_run_group_tests_name("rcluster_failover", failover, NULL, NULL);
    if (!strcmp(g_group, "reshard"))
        return cmocka_run_group_tests_name("rcluster_reshard", reshard, NULL, NULL);
    if (!strcmp(g_group, "auth"))
        return cmocka_run_group_tests_name("rcluster_auth", auth, NULL, NULL);
    if (!strcmp(g_group, "single"))
        return cmocka_run_group_tests_name("rcluster_single", single, NULL, NULL);
    if (!strcmp(g_group, "evict"))
        return cmocka_run_group_tests_name("rcluster_evict", evict, NULL, NULL);
    fprintf(stderr, "test_rcluster: no group %s\n", g_group);
    return 2;
}
