/*
 * kv_mem.c — the in-memory transport of the shared tier (kv_mem.h).
 * Thread-safe: engines' callers and publishers use it at once.
 */
#include "lab/kv_mem.h"
#include "io/codec.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *name;
    size_t name_len;
    uint8_t *val;
    size_t len;
};

struct kvt_kv_mem {
    pthread_mutex_t mu;
    struct entry *e;
    size_t n, cap;
    int fail_res;
    unsigned fail_calls;
    uint64_t sets;
};

struct kvt_kv_mem *kvt_kv_mem_new(void)
{
    struct kvt_kv_mem *m = calloc(1, sizeof(*m));
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void kvt_kv_mem_clear(struct kvt_kv_mem *m)
{
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++) {
        free(m->e[i].name);
        free(m->e[i].val);
    }
    m->n = 0;
    pthread_mutex_unlock(&m->mu);
}

void kvt_kv_mem_free(struct kvt_kv_mem *m)
{
    if (!m)
        return;
    kvt_kv_mem_clear(m);
    free(m->e);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void kvt_kv_mem_fail(struct kvt_kv_mem *m, int res, unsigned calls)
{
    pthread_mutex_lock(&m->mu);
    m->fail_res = res;
    m->fail_calls = calls;
    pthread_mutex_unlock(&m->mu);
}

size_t kvt_kv_mem_count(struct kvt_kv_mem *m)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}

uint64_t kvt_kv_mem_sets(struct kvt_kv_mem *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->sets;
    pthread_mutex_unlock(&m->mu);
    return n;
}

const char *kvt_kv_mem_name(struct kvt_kv_mem *m, size_t i)
{
    pthread_mutex_lock(&m->mu);
    const char *nm = i < m->n ? m->e[i].name : NULL;
    pthread_mutex_unlock(&m->mu);
    return nm;
}

/* Locked. */
static struct entry *find(struct kvt_kv_mem *m, const void *name, size_t len)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].name_len == len && memcmp(m->e[i].name, name, len) == 0)
            return &m->e[i];
    return NULL;
}

/* Locked: stores the two parts under name. */
static int put(struct kvt_kv_mem *m, const void *name, size_t name_len, const void *a,
               size_t alen, const void *b, size_t blen)
{
    uint8_t *v = malloc(alen + blen + 1);
    if (!v)
        return -ENOMEM;
    if (alen)
        memcpy(v, a, alen);
    if (blen)
        memcpy(v + alen, b, blen);
    struct entry *en = find(m, name, name_len);
    if (!en) {
        if (m->n == m->cap) {
            size_t cap = m->cap ? 2 * m->cap : 64;
            struct entry *ne = realloc(m->e, cap * sizeof(*ne));
            if (!ne) {
                free(v);
                return -ENOMEM;
            }
            m->e = ne;
            m->cap = cap;
        }
        en = &m->e[m->n];
        en->name = malloc(name_len + 1);
        if (!en->name) {
            free(v);
            return -ENOMEM;
        }
        memcpy(en->name, name, name_len);
        en->name[name_len] = 0;
        en->name_len = name_len;
        en->val = NULL;
        m->n++;
    }
    free(en->val);
    en->val = v;
    en->len = alen + blen;
    m->sets++;
    return 1;
}

int kvt_kv_mem_set_raw(struct kvt_kv_mem *m, const char *name, const void *val, size_t len)
{
    pthread_mutex_lock(&m->mu);
    int r = put(m, name, strlen(name), val, len, NULL, 0);
    pthread_mutex_unlock(&m->mu);
    return r < 0 ? r : 0;
}

long kvt_kv_mem_get_raw(struct kvt_kv_mem *m, const char *name, void *buf, size_t cap)
{
    pthread_mutex_lock(&m->mu);
    struct entry *en = find(m, name, strlen(name));
    long r = -ENOENT;
    if (en) {
        memcpy(buf, en->val, en->len < cap ? en->len : cap);
        r = (long)en->len;
    }
    pthread_mutex_unlock(&m->mu);
    return r;
}

/* Locked: whether this call fails (every item gets res). */
static bool failing(struct kvt_kv_mem *m, struct kvt_rc_item *it, size_t n)
{
    if (!m->fail_calls)
        return false;
    m->fail_calls--;
    for (size_t i = 0; i < n; i++)
        it[i].res = m->fail_res;
    return true;
}

static int mem_open(void *arg, const struct kvt_rcluster_opts *o, void **conn, char *err,
                    size_t errlen)
{
    (void)o, (void)err, (void)errlen;
    *conn = arg;
    return arg ? 0 : -EINVAL;
}

static void mem_close(void *conn)
{
    (void)conn;
}

static int mem_get(void *conn, struct kvt_rc_item *it, size_t n)
{
    struct kvt_kv_mem *m = conn;
    int ok = 0;
    pthread_mutex_lock(&m->mu);
    if (!failing(m, it, n))
        for (size_t i = 0; i < n; i++) {
            struct entry *en = find(m, it[i].key, it[i].key_len);
            it[i].res = 0;
            if (!en)
                continue;
            it[i].len = en->len;
            if (en->len > it[i].cap + it[i].cap2) {
                it[i].res = -EMSGSIZE;
                continue;
            }
            size_t first = en->len < it[i].cap ? en->len : it[i].cap;
            memcpy(it[i].buf, en->val, first);
            if (en->len > first)
                memcpy(it[i].buf2, en->val + first, en->len - first);
            it[i].crc2 = it[i].want_crc2 ? kvt_crc32c(0, en->val + first, en->len - first) : 0;
            it[i].res = 1;
            ok++;
        }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

static int mem_set(void *conn, struct kvt_rc_item *it, size_t n, unsigned ttl_s, int nx)
{
    (void)ttl_s;
    struct kvt_kv_mem *m = conn;
    int ok = 0;
    pthread_mutex_lock(&m->mu);
    if (!failing(m, it, n))
        for (size_t i = 0; i < n; i++) {
            if (nx && find(m, it[i].key, it[i].key_len)) {
                it[i].res = 0;
                continue;
            }
            it[i].res = put(m, it[i].key, it[i].key_len, it[i].val, it[i].val_len, it[i].val2,
                            it[i].val2_len);
            ok += it[i].res == 1;
        }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

static int mem_exists(void *conn, struct kvt_rc_item *it, size_t n)
{
    struct kvt_kv_mem *m = conn;
    int ok = 0;
    pthread_mutex_lock(&m->mu);
    if (!failing(m, it, n))
        for (size_t i = 0; i < n; i++) {
            it[i].res = find(m, it[i].key, it[i].key_len) != NULL;
            ok += it[i].res;
        }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

static int mem_del(void *conn, struct kvt_rc_item *it, size_t n)
{
    struct kvt_kv_mem *m = conn;
    int ok = 0;
    pthread_mutex_lock(&m->mu);
    if (!failing(m, it, n))
        for (size_t i = 0; i < n; i++) {
            struct entry *en = find(m, it[i].key, it[i].key_len);
            it[i].res = en != NULL;
            if (en) {
                free(en->name);
                free(en->val);
                *en = m->e[--m->n];
                ok++;
            }
        }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

static void mem_stats(const void *conn, struct kvt_rcluster_stats *s)
{
    (void)conn;
    memset(s, 0, sizeof(*s));
    s->nodes = 1;
}

const struct kvt_kv_ops kvt_kv_mem_ops = {
    mem_open, mem_close, mem_get, mem_set, mem_exists, mem_del, mem_stats,
};
