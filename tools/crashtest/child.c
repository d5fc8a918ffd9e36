/*
 * child.c — the crash loop's writer: the process the parent (crashtest.c)
 * SIGKILLs at a random moment. Its main thread puts, overwrites in place,
 * drops, reads back and flushes the checked keys, logging each operation
 * through a pipe before it makes it and each kvt_flush after it returns 0.
 *
 * With --full, filler threads put, drop and read keys of their own at the
 * same time, and the SSD holds half the keys in use, so the engine is full
 * for most of the run: puts wait for room or fail (or, with
 * KVT_FLAG_EVICT, drop the policy's victims, checked keys included),
 * DRAM copies are given up under the flush, and write-backs race the
 * overwrites. A flushed overwrite lost there read back as an older version
 * (the race docs/design.md#when-the-engine-is-full describes).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/crashtest/crashtest.h"
#include "tools/util/util.h"

#define FILLER_ID 100000u   /* filler keys' ids start here, far from the checked keys' */

/* ------------------------------------------------------------- pages */

kvt_key ct_key(unsigned i)
{
    return (kvt_key){ 1 + i / 16, (i / 4) % 4, i % 4 };
}

kvt_key ct_filler_key(unsigned j)
{
    return (kvt_key){ FILLER_ID + j / 16, (j / 4) % 4, j % 4 };
}

unsigned ct_filler_count(const struct ct_opts *o)
{
    return o->full ? (unsigned)o->threads * CT_FILLER_KEYS : 0;
}

void ct_fill(void *p, unsigned key, uint32_t ver)
{
    util_pattern_fill(p, CT_PB, ct_key(key), ver);
}

bool ct_check(const void *p, unsigned key, uint32_t ver)
{
    return util_pattern_check(p, CT_PB, ct_key(key), ver);
}

bool ct_filler_ok(const void *p, unsigned j)
{
    uint64_t v = util_pattern_version(p, CT_PB, ct_filler_key(j));
    return v && v <= UINT32_MAX;
}

/* ------------------------------------------------------------- the engine */

/* Small tiers, so that most pages live on SSD and every operation moves
 * some; the codec changes with the cycle (none, zstd, zstd-shuffle16). Full:
 * an SSD of half the keys in use, and the policy alternates between lru and
 * prefix (the two a cache runs). */
kvt_config ct_config(const struct ct_opts *o, uint64_t cycle)
{
    kvt_config c;
    kvt_config_init(&c);
    c.page_bytes = CT_PB;
    c.hbm_bytes = 4 * CT_PB;
    c.dram_bytes = 8 * CT_PB;
    c.ssd_bytes = (o->keys * 4 + 64) * CT_PB;
    c.ssd_dir = o->dir;
    c.device = KVT_DEVICE_HOST;
    c.policy = "lru";
    c.persist = 1;
    c.fingerprint = CT_FP;
    c.codec = (int)(cycle % 3);
    c.queue_depth = 8;
    if (o->full) {
        c.ssd_bytes = ((o->keys + ct_filler_count(o)) / 2 + 8) * CT_PB;
        c.policy = cycle % 2 ? "prefix" : "lru";
        c.flags = o->evict ? KVT_FLAG_EVICT : 0;
    }
    return c;
}

/* ------------------------------------------------------------- fillers */

struct filler {
    kvt_engine *e;
    unsigned first;   /* its keys: first .. first + CT_FILLER_KEYS - 1 */
    unsigned seed;
};

/* Puts, drops and reads its own keys until the process is killed; a full
 * engine's KVT_EFULL is the expected answer to a put, anything else an
 * error. */
static void *filler_run(void *arg)
{
    const struct filler *f = arg;
    unsigned seed = f->seed;
    uint32_t ver = 0;
    void *b = aligned_alloc(4096, CT_PB);
    if (!b)
        _exit(3);
    for (;;) {
        unsigned j = f->first + (unsigned)rand_r(&seed) % CT_FILLER_KEYS;
        unsigned what = (unsigned)rand_r(&seed) % 20;
        kvt_key k = ct_filler_key(j);
        if (what < 10) {
            util_pattern_fill(b, CT_PB, k, ++ver);
            const void *src[1] = { b };
            int r = kvt_put(f->e, &k, 1, src, 0);
            if (r && r != KVT_EFULL)
                _exit(20);
        } else if (what < 13) {
            if (kvt_drop(f->e, &k, 1))
                _exit(21);
        } else {
            void *dst[1] = { b };
            int found = -1;
            if (kvt_get(f->e, &k, 1, dst, 0, &found))
                _exit(22);
            if (found == 1 && !ct_filler_ok(b, j))
                _exit(23);
        }
    }
    return NULL;
}

static void start_fillers(const struct ct_opts *o, kvt_engine *e, unsigned seed)
{
    static struct filler fs[CT_MAX_THREADS];
    for (unsigned t = 0; t < o->threads; t++) {
        fs[t] = (struct filler){ e, t * CT_FILLER_KEYS, seed * 2654435761u + t };
        pthread_t th;
        if (pthread_create(&th, NULL, filler_run, &fs[t]) != 0)
            _exit(4);
        pthread_detach(th);
    }
}

/* ------------------------------------------------------------- the writer */

static void ct_log(int wfd, uint8_t type, unsigned key, uint32_t ver)
{
    struct rec r = { type, 0, (uint16_t)key, ver };
    if (write(wfd, &r, sizeof(r)) != sizeof(r))
        _exit(40);
}

/* A checked key found absent that the writer last saw present: with
 * KVT_FLAG_EVICT the engine dropped it to make room, which the log records
 * as a drop (from then on its absence is allowed); otherwise it is lost. */
static void seen_evicted(const struct ct_opts *o, uint32_t *cur, unsigned i, int wfd, int code)
{
    if (!o->evict)
        _exit(code);
    ct_log(wfd, R_DROP, i, 0);
    cur[i] = 0;
}

/* A put of a new version. A full engine may answer KVT_EFULL, having given
 * up the old version for room: the key is then dropped, so that the
 * writer's state is known again. */
static void op_put(const struct ct_opts *o, kvt_engine *e, uint32_t *cur, uint32_t *v,
                   unsigned i, void *b, int wfd)
{
    kvt_key k = ct_key(i);
    ct_log(wfd, R_PUT, i, ++*v);
    ct_fill(b, i, *v);
    const void *src[1] = { b };
    int r = kvt_put(e, &k, 1, src, 0);
    if (r == KVT_EFULL && o->full) {
        ct_log(wfd, R_DROP, i, 0);
        if (kvt_drop(e, &k, 1))
            _exit(15);
        cur[i] = 0;
        return;
    }
    if (r)
        _exit(10);
    cur[i] = *v;
}

/* An overwrite in place: acquire, check, write, release dirty. */
static void op_write(const struct ct_opts *o, kvt_engine *e, uint32_t *cur, uint32_t *v,
                     unsigned i, int wfd)
{
    kvt_key k = ct_key(i);
    void *d = NULL;
    int r = kvt_acquire(e, &k, 1, &d);
    if (r == KVT_ENOTFOUND)
        return seen_evicted(o, cur, i, wfd, 13);
    if (r == KVT_EFULL && o->full)
        return;   /* the slots are held by the fillers' calls: nothing changed */
    if (r)
        _exit(13);
    if (!ct_check(d, i, cur[i]))
        _exit(14);
    ct_log(wfd, R_WRITE, i, ++*v);
    ct_fill(d, i, *v);
    if (kvt_release(e, &k, 1, 1))
        _exit(12);
    cur[i] = *v;
}

static void op_get(const struct ct_opts *o, kvt_engine *e, uint32_t *cur, unsigned i, void *b,
                   int wfd)
{
    kvt_key k = ct_key(i);
    void *dst[1] = { b };
    int found = -1;
    if (kvt_get(e, &k, 1, dst, 0, &found))
        _exit(17);
    if (found == 0 && cur[i])
        return seen_evicted(o, cur, i, wfd, 18);
    if (found != (cur[i] != 0) || (found && !ct_check(b, i, cur[i])))
        _exit(18);
}

static void ct_child_op(const struct ct_opts *o, kvt_engine *e, uint32_t *cur, uint32_t *v,
                        unsigned *seed, void *b, int wfd)
{
    unsigned i = (unsigned)(rand_r(seed) % o->keys), what = (unsigned)(rand_r(seed) % 10);
    if (what < 4) {
        op_put(o, e, cur, v, i, b, wfd);
    } else if (what < 6 && cur[i]) {
        op_write(o, e, cur, v, i, wfd);
    } else if (what < 7) {
        kvt_key k = ct_key(i);
        ct_log(wfd, R_DROP, i, 0);
        if (kvt_drop(e, &k, 1))
            _exit(15);
        cur[i] = 0;
    } else {
        op_get(o, e, cur, i, b, wfd);
    }
}

_Noreturn void ct_child(const struct ct_opts *o, uint64_t cycle, const uint32_t *cur0,
                        uint32_t base, unsigned seed, int wfd)
{
    static uint32_t cur[CT_MAX_KEYS];
    uint32_t v = base;
    alarm(CT_CHILD_ALARM);
    memcpy(cur, cur0, o->keys * sizeof(*cur));
    kvt_config c = ct_config(o, cycle);
    kvt_engine *e = NULL;
    if (kvt_open(&c, &e))
        _exit(2);
    void *b = aligned_alloc(4096, CT_PB);
    if (!b)
        _exit(3);
    if (o->full)
        start_fillers(o, e, seed);
    for (uint32_t op = 1, flushes = 0;; op++) {
        if (op % 12 == 0) {
            if (kvt_flush(e))
                _exit(16);
            ct_log(wfd, R_FLUSH, 0, ++flushes);
            continue;
        }
        ct_child_op(o, e, cur, &v, &seed, b, wfd);
    }
}

const char *ct_exit_why(int code)
{
    switch (code) {
    case 2: return "kvt_open failed";
    case 3: return "out of memory";
    case 4: return "a filler thread could not start";
    case 10: return "kvt_put failed";
    case 12: return "kvt_release failed";
    case 13: return "kvt_acquire failed";
    case 14: return "kvt_acquire served wrong bytes";
    case 15: return "kvt_drop failed";
    case 16: return "kvt_flush failed";
    case 17: return "kvt_get failed";
    case 18: return "kvt_get served wrong bytes or a wrong miss";
    case 20: return "a filler's kvt_put failed with an error other than KVT_EFULL";
    case 21: return "a filler's kvt_drop failed";
    case 22: return "a filler's kvt_get failed";
    case 23: return "a filler's kvt_get served wrong bytes";
    case 40: return "writing the log failed";
    case 1: return "a sanitizer report (see stderr)";
    default: return "an unexpected exit";
    }
}
