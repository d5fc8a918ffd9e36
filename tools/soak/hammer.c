/*
 * hammer.c — concurrent put/get/drop against an in-memory model of the store.
 *
 *   hammer [--threads N] [--seconds S] [--keys N] [--page-bytes N]
 *          [--ssd-dir DIR] [--persist] [--report S] [--min-ops N]
 *
 * N threads share one engine (host back-end, HBM + DRAM + an SSD tier, sized
 * so that pages keep moving between the three). Thread t owns the keys of its
 * own ids: only t puts, drops (by key or by id) and acquires them, so t knows
 * their state exactly and checks every get, exists and acquire of them
 * against its model. Every thread also gets the other threads' keys; those
 * reads are checked against the owner's published model with the window of
 * the owner's operations that overlapped the read:
 *  - no owner operation overlapped: the answer is exact (found iff present,
 *    the very version);
 *  - else a found page is a version between the one published before the
 *    read (or the next one, if the key was absent then) and the one after it
 *    (plus the one in flight); a miss needs the key absent before or after,
 *    or a drop during the read.
 * A page's content is derived from its key and version (every 8-byte word),
 * so a torn page, a stale version, a resurrected drop or another key's page
 * is caught. Versions only grow, also across drops.
 *
 * Output: a line every --report seconds (elapsed, operations, wrong answers,
 * failed calls, RSS) and a summary; exit 0 when no answer was wrong, no call
 * failed (-EBUSY is retried; KVT_EFULL from an acquire, HBM full of other
 * threads' pins, is allowed) and at least --min-ops operations ran; 1
 * otherwise; 2 on bad usage. The run is bounded by time
 * because it is a soak; what it asserts is behaviour, never speed.
 */

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "tools/cli.h"

#define IDS 8            /* ids per thread */
#define LAYERS 2
#define MAX_THREADS 64
#define BATCH 4          /* keys per call at most */
#define BUSY_SECONDS 60 /* a page of the thread's own keys busy longer is a failure */

struct opts {
    unsigned threads, keys, report_s;
    uint64_t seconds, page_bytes, min_ops;
    const char *ssd_dir;
    bool persist;
};

/* The model of one key, written by its owner only: pub = version << 1 |
 * present (the version is kept when the key is dropped, so versions only
 * grow); seq is odd while an operation on the key is in flight; drops
 * counts drops begun and dropping is 1 from a drop's start to its end
 * (after pub). seq_cst throughout: a reader's loads order against the
 * owner's stores around the engine call (op_get_other). */
struct slot {
    _Atomic uint64_t pub;
    _Atomic uint64_t seq;
    _Atomic uint64_t drops;
    atomic_bool dropping;
};

struct hammer {
    const struct opts *o;
    kvt_engine *e;
    struct slot *slots;       /* threads * keys */
    unsigned pages_per_layer; /* keys = IDS * LAYERS * pages_per_layer */
    atomic_bool stop;
    _Atomic uint64_t ops, wrong, errors, busy;
    pthread_mutex_t mu;
    char first[512], first_error[512];
};

struct worker {
    struct hammer *h;
    unsigned tid;
    uint64_t rng;
    void *bufs[BATCH];
};

/* ----------------------------------------------------------------- helpers */

static void wrong_at(struct hammer *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wrong_at(struct hammer *h, const char *fmt, ...)
{
    uint64_t n = atomic_fetch_add(&h->wrong, 1);
    if (n >= 20) /* the first 20 are printed as they happen */
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hammer: WRONG: %s\n", msg);
    if (n == 0) {
        pthread_mutex_lock(&h->mu);
        snprintf(h->first, sizeof h->first, "%s", msg);
        pthread_mutex_unlock(&h->mu);
    }
}

/* A call that failed where the model says it cannot (an error, not a wrong
 * answer: counted apart). */
static void fail_at(struct hammer *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_at(struct hammer *h, const char *fmt, ...)
{
    if (atomic_fetch_add(&h->errors, 1) == 0) {
        pthread_mutex_lock(&h->mu);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->first_error, sizeof h->first_error, fmt, ap);
        va_end(ap);
        pthread_mutex_unlock(&h->mu);
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static unsigned n_keys(const struct hammer *h)
{
    return IDS * LAYERS * h->pages_per_layer;
}

static kvt_key key_of(const struct hammer *h, unsigned tid, unsigned j)
{
    unsigned per_id = LAYERS * h->pages_per_layer;
    kvt_key k = { ((uint64_t)(tid + 1) << 32) | (j / per_id), (j % per_id) / h->pages_per_layer,
                  j % h->pages_per_layer };
    return k;
}

static struct slot *slot_of(struct hammer *h, unsigned tid, unsigned j)
{
    return &h->slots[(size_t)tid * n_keys(h) + j];
}

static bool present(uint64_t pub)
{
    return pub & 1;
}

static uint64_t ver(uint64_t pub)
{
    return pub >> 1;
}

/* j[0..n-1]: n distinct random keys of thread t. */
static unsigned pick(struct worker *w, unsigned *j, unsigned max_n)
{
    unsigned n = 1 + (unsigned)(rng_next(&w->rng) % max_n), got = 0;
    while (got < n) {
        unsigned c = (unsigned)(rng_next(&w->rng) % n_keys(w->h));
        bool dup = false;
        for (unsigned i = 0; i < got; i++)
            dup |= j[i] == c;
        if (!dup)
            j[got++] = c;
    }
    return n;
}

/* ------------------------------------------------------- own keys: exact */

static void check_own(struct worker *w, unsigned j, int found, const void *buf, const char *what)
{
    struct hammer *h = w->h;
    uint64_t pub = atomic_load(&slot_of(h, w->tid, j)->pub);
    kvt_key k = key_of(h, w->tid, j);
    uint64_t v = found ? util_pattern_version(buf, h->o->page_bytes, k) : 0;
    if (!!found != present(pub) || (found && v != ver(pub)))
        wrong_at(h, "t%u %s of own key (%llx,%u,%u): found %d version %llu, model: present %d version %llu",
                 w->tid, what, (unsigned long long)k.id, k.layer, k.index, found,
                 (unsigned long long)v, (int)present(pub), (unsigned long long)ver(pub));
}

static void op_get_own(struct worker *w)
{
    struct hammer *h = w->h;
    unsigned j[BATCH], n = pick(w, j, BATCH);
    kvt_key k[BATCH];
    int found[BATCH];
    for (unsigned i = 0; i < n; i++)
        k[i] = key_of(h, w->tid, j[i]);
    int r = kvt_get(h->e, k, n, w->bufs, 0, found);
    if (r) {
        fail_at(h, "t%u get of own keys: %s (%s)", w->tid, kvt_strerror(r), kvt_last_error());
        return;
    }
    for (unsigned i = 0; i < n; i++)
        check_own(w, j[i], found[i], w->bufs[i], "get");
}

static void op_exists_own(struct worker *w)
{
    struct hammer *h = w->h;
    unsigned j[BATCH], n = pick(w, j, BATCH);
    kvt_key k[BATCH];
    kvt_tier where[BATCH];
    for (unsigned i = 0; i < n; i++)
        k[i] = key_of(h, w->tid, j[i]);
    int r = kvt_exists(h->e, k, n, where);
    if (r < 0) {
        fail_at(h, "t%u exists: %s (%s)", w->tid, kvt_strerror(r), kvt_last_error());
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        bool p = present(atomic_load(&slot_of(h, w->tid, j[i])->pub));
        if (p != (where[i] != KVT_TIER_NONE))
            wrong_at(h, "t%u exists of own key %u: tier %d, model present %d", w->tid, j[i],
                     (int)where[i], (int)p);
    }
}

/* The owner's side of the protocol: seq odd, the engine call, pub, seq even. */
static void begin(struct hammer *h, unsigned tid, const unsigned *j, unsigned n, bool drop)
{
    for (unsigned i = 0; i < n; i++) {
        struct slot *s = slot_of(h, tid, j[i]);
        if (drop) {
            atomic_fetch_add(&s->drops, 1);
            atomic_store(&s->dropping, true);
        }
        atomic_fetch_add(&s->seq, 1);
    }
}

static void end(struct hammer *h, unsigned tid, const unsigned *j, unsigned n, bool done,
                bool drop)
{
    for (unsigned i = 0; i < n; i++) {
        struct slot *s = slot_of(h, tid, j[i]);
        uint64_t pub = atomic_load(&s->pub);
        if (done)
            atomic_store(&s->pub, drop ? (pub & ~1ull) : ((ver(pub) + 1) << 1 | 1));
        atomic_fetch_add(&s->seq, 1);
        if (drop)
            atomic_store(&s->dropping, false);
    }
}

/* Whether to try a call that said -EBUSY again: a thread's own keys are
 * busy only while the engine moves them (an SSD write, a copy), which under
 * the sanitizers and a slow disk can take far longer than a fixed number of
 * yields; so the bound is time. Counts the retry. */
static bool busy_again(struct hammer *h, double t0)
{
    if (util_now() - t0 >= BUSY_SECONDS)
        return false;
    if ((atomic_fetch_add(&h->busy, 1) + 1) % 64)
        sched_yield();
    else
        nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
    return true;
}

static void op_put_own(struct worker *w)
{
    struct hammer *h = w->h;
    unsigned j[BATCH], n = pick(w, j, BATCH);
    kvt_key k[BATCH];
    const void *src[BATCH];
    for (unsigned i = 0; i < n; i++) {
        k[i] = key_of(h, w->tid, j[i]);
        uint64_t v = ver(atomic_load(&slot_of(h, w->tid, j[i])->pub)) + 1;
        util_pattern_fill(w->bufs[i], h->o->page_bytes, k[i], v);
        src[i] = w->bufs[i];
    }
    begin(h, w->tid, j, n, false);
    int r;
    double t0 = util_now();
    while ((r = kvt_put(h->e, k, n, src, 0)) == -EBUSY && busy_again(h, t0))
        ;
    end(h, w->tid, j, n, r == 0, false);
    if (r)
        fail_at(h, "t%u put of %u own keys: %s (%s)", w->tid, n, kvt_strerror(r), kvt_last_error());
}

static void op_drop_own(struct worker *w)
{
    struct hammer *h = w->h;
    unsigned j[BATCH], n = pick(w, j, 2);
    kvt_key k[BATCH];
    for (unsigned i = 0; i < n; i++)
        k[i] = key_of(h, w->tid, j[i]);
    begin(h, w->tid, j, n, true);
    int r;
    double t0 = util_now();
    while ((r = kvt_drop(h->e, k, n)) == -EBUSY && busy_again(h, t0))
        ;
    end(h, w->tid, j, n, r == 0, true);
    if (r)
        fail_at(h, "t%u drop: %s (%s)", w->tid, kvt_strerror(r), kvt_last_error());
}

/* Drops every key of one of the thread's ids (a finished sequence). */
static void op_drop_id(struct worker *w)
{
    struct hammer *h = w->h;
    unsigned per_id = LAYERS * h->pages_per_layer, id = (unsigned)(rng_next(&w->rng) % IDS);
    unsigned j[LAYERS * 256];
    for (unsigned i = 0; i < per_id; i++)
        j[i] = id * per_id + i;
    begin(h, w->tid, j, per_id, true);
    int r;
    double t0 = util_now();
    while ((r = kvt_drop_id(h->e, key_of(h, w->tid, j[0]).id)) == -EBUSY && busy_again(h, t0))
        ;
    end(h, w->tid, j, per_id, r == 0, true);
    if (r)
        fail_at(h, "t%u drop_id: %s (%s)", w->tid, kvt_strerror(r), kvt_last_error());
}

/* Acquires present own keys into HBM, checks them there, releases clean. */
static void op_acquire_own(struct worker *w)
{
    struct hammer *h = w->h;
    unsigned j[BATCH], n = pick(w, j, BATCH), m = 0;
    kvt_key k[BATCH];
    void *ptr[BATCH];
    for (unsigned i = 0; i < n; i++)
        if (present(atomic_load(&slot_of(h, w->tid, j[i])->pub))) {
            j[m] = j[i];
            k[m++] = key_of(h, w->tid, j[i]);
        }
    if (!m)
        return;
    int r = kvt_acquire(h->e, k, m, ptr);
    if (r == KVT_EFULL) { /* HBM full of other threads' pins: allowed, retried later */
        atomic_fetch_add(&h->busy, 1);
        return;
    }
    if (r) {
        fail_at(h, "t%u acquire of %u own keys: %s (%s)", w->tid, m, kvt_strerror(r),
                 kvt_last_error());
        return;
    }
    for (unsigned i = 0; i < m; i++)
        check_own(w, j[i], 1, ptr[i], "acquire");
    if ((r = kvt_release(h->e, k, m, 0)))
        fail_at(h, "t%u release: %s (%s)", w->tid, kvt_strerror(r), kvt_last_error());
}

/* ----------------------------------------------- other threads' keys: window */

/* The loads around the read: seq, pub, drops, dropping before; the same
 * after. With seq_cst, s0 == s1 even means no owner operation overlapped the
 * read (the owner makes seq odd before its engine call and even after
 * storing pub). A miss needs the key absent before or after, or a drop that
 * overlapped the read: one begun before it is still flagged (dropping) when
 * read before, or has stored pub absent by then; one begun during it moved
 * drops. */
static void op_get_other(struct worker *w)
{
    struct hammer *h = w->h;
    if (h->o->threads < 2)
        return;
    unsigned t = (unsigned)(rng_next(&w->rng) % (h->o->threads - 1));
    t += t >= w->tid;
    unsigned j = (unsigned)(rng_next(&w->rng) % n_keys(h));
    struct slot *s = slot_of(h, t, j);
    kvt_key k = key_of(h, t, j);
    uint64_t s0 = atomic_load(&s->seq), p0 = atomic_load(&s->pub), d0 = atomic_load(&s->drops);
    bool x0 = atomic_load(&s->dropping);
    int found = 0;
    int r = kvt_get(h->e, &k, 1, w->bufs, 0, &found);
    uint64_t s1 = atomic_load(&s->seq), p1 = atomic_load(&s->pub), d1 = atomic_load(&s->drops);
    bool x1 = atomic_load(&s->dropping);
    if (r) {
        fail_at(h, "t%u get of t%u's key: %s (%s)", w->tid, t, kvt_strerror(r), kvt_last_error());
        return;
    }
    uint64_t v = found ? util_pattern_version(w->bufs[0], h->o->page_bytes, k) : 0;
    bool ok;
    if (s0 == s1 && !(s0 & 1))
        ok = !!found == present(p0) && (!found || v == ver(p0));
    else if (found)
        ok = v >= ver(p0) + !present(p0) && v <= ver(p1) + (s1 & 1);
    else
        ok = !present(p0) || !present(p1) || d0 != d1 || x0 || x1;
    if (!ok)
        wrong_at(h, "t%u get of t%u's key (%llx,%u,%u): found %d version %llu; before: seq %llu "
                 "present %d v%llu, after: seq %llu present %d v%llu, drops %llu..%llu",
                 w->tid, t, (unsigned long long)k.id, k.layer, k.index, found, (unsigned long long)v,
                 (unsigned long long)s0, (int)present(p0), (unsigned long long)ver(p0),
                 (unsigned long long)s1, (int)present(p1), (unsigned long long)ver(p1),
                 (unsigned long long)d0, (unsigned long long)d1);
}

/* ------------------------------------------------------------------ threads */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct hammer *h = w->h;
    while (!atomic_load(&h->stop)) {
        unsigned op = (unsigned)(rng_next(&w->rng) % 1000);
        if (op < 350)
            op_get_other(w);
        else if (op < 550)
            op_get_own(w);
        else if (op < 770)
            op_put_own(w);
        else if (op < 850)
            op_drop_own(w);
        else if (op < 855)
            op_drop_id(w);
        else if (op < 910)
            op_exists_own(w);
        else if (op < 995)
            op_acquire_own(w);
        else if (h->o->persist) {
            int r = kvt_flush(h->e);
            if (r)
                fail_at(h, "t%u flush: %s (%s)", w->tid, kvt_strerror(r), kvt_last_error());
        }
        atomic_fetch_add(&h->ops, 1);
    }
    return NULL;
}

static long rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void report(struct hammer *h, double t0, const char *what)
{
    kvt_stats st;
    kvt_get_stats(h->e, &st);
    fprintf(stderr, "hammer: %s %.0f s  ops %llu  wrong %llu  failed %llu  busy %llu  rss %ld KiB  "
            "hits hbm/dram/ssd %llu/%llu/%llu\n", what, util_now() - t0,
            (unsigned long long)atomic_load(&h->ops), (unsigned long long)atomic_load(&h->wrong),
            (unsigned long long)atomic_load(&h->errors),
            (unsigned long long)atomic_load(&h->busy), rss_kib(),
            (unsigned long long)st.hits[KVT_TIER_HBM], (unsigned long long)st.hits[KVT_TIER_DRAM],
            (unsigned long long)st.hits[KVT_TIER_SSD]);
}

/* ------------------------------------------------------------------ set-up */

static int usage(int code)
{
    fprintf(code ? stderr : stdout,
            "usage: hammer [options]\n\n"
            "Threads put, get, drop and acquire pages of one engine (host back-end, three\n"
            "tiers) and check every answer against an in-memory model. Exit 0 when nothing\n"
            "wrong was seen.\n\n"
            "  --threads N      worker threads (default 4, at most 64)\n"
            "  --seconds N      how long to run (default 20)\n"
            "  --keys N         keys per thread: 8 ids x 2 layers x N/16 pages (default 256)\n"
            "  --page-bytes N   page size, a multiple of 4096 (default 8K)\n"
            "  --ssd-dir DIR    spill directory (default: a temporary one, removed)\n"
            "  --persist        persist=1, and flushes among the operations\n"
            "  --report N       a progress line every N seconds (default 10; 0 = none)\n"
            "  --min-ops N      fail unless at least N operations ran (default 1000)\n"
            "  -h, --help       this text\n");
    return code;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        { "threads", 1, 0, 't' }, { "seconds", 1, 0, 's' }, { "keys", 1, 0, 'k' },
        { "page-bytes", 1, 0, 'b' }, { "ssd-dir", 1, 0, 'd' }, { "persist", 0, 0, 'p' },
        { "report", 1, 0, 'r' }, { "min-ops", 1, 0, 'm' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    *o = (struct opts){ .threads = 4, .seconds = 20, .keys = 256, .page_bytes = 8192,
                        .report_s = 10, .min_ops = 1000 };
    int c;
    uint64_t v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 't': r = cli_opt_count("hammer", "threads", optarg, 1, MAX_THREADS, &v); o->threads = (unsigned)v; break;
        case 's': r = cli_opt_count("hammer", "seconds", optarg, 1, 7 * 86400, &o->seconds); break;
        case 'k': r = cli_opt_count("hammer", "keys", optarg, 16, 16 * 256, &v); o->keys = (unsigned)v; break;
        case 'b': r = cli_opt_size("hammer", "page-bytes", optarg, 4096, 1 << 20, &o->page_bytes);
                  if (!r && o->page_bytes % 4096)
                      r = cli_bad_value("hammer", "page-bytes", optarg, "a multiple of 4096");
                  break;
        case 'd': r = cli_opt_path("hammer", "ssd-dir", optarg); o->ssd_dir = optarg; break;
        case 'p': o->persist = true; break;
        case 'r': r = cli_opt_count("hammer", "report", optarg, 0, 86400, &v); o->report_s = (unsigned)v; break;
        case 'm': r = cli_opt_count("hammer", "min-ops", optarg, 0, UINT64_MAX, &o->min_ops); break;
        case 'h': exit(usage(0));
        default: r = cli_getopt_error("hammer", c, argv, lo); break;
        }
        if (r) {
            if (r != -EINVAL)
                fprintf(stderr, "hammer: bad arguments\n");
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "hammer: unexpected argument '%s'\n", argv[optind]);
        return -EINVAL;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The engine: HBM 64 pages, DRAM 128, SSD room for every key twice, so that
 * pages move through all three tiers and the engine is never full. */
static int open_engine(struct hammer *h, const char *dir)
{
    kvt_config c;
    kvt_config_init(&c);
    c.page_bytes = h->o->page_bytes;
    c.hbm_bytes = 64 * c.page_bytes;
    c.dram_bytes = 128 * c.page_bytes;
    c.ssd_bytes = 2 * (size_t)h->o->threads * n_keys(h) * c.page_bytes;
    c.ssd_dir = dir;
    c.device = KVT_DEVICE_HOST;
    c.persist = h->o->persist;
    c.fingerprint = 0x68616d6d6572ull;
    int r = kvt_open(&c, &h->e);
    if (r)
        fprintf(stderr, "hammer: kvt_open: %s: %s\n", kvt_strerror(r), kvt_last_error());
    return r;
}

static int run(struct hammer *h, struct worker *w)
{
    const struct opts *o = h->o;
    pthread_t th[MAX_THREADS];
    unsigned started = 0;
    double t0 = util_now(), next = t0 + o->report_s;
    for (; started < o->threads; started++)
        if (pthread_create(&th[started], NULL, worker_main, &w[started])) {
            fprintf(stderr, "hammer: cannot start thread %u\n", started);
            atomic_store(&h->stop, true);
            break;
        }
    while (!atomic_load(&h->stop) && util_now() - t0 < (double)o->seconds) {
        usleep(100 * 1000);
        if (o->report_s && util_now() >= next) {
            report(h, t0, "at");
            next += o->report_s;
        }
    }
    atomic_store(&h->stop, true);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    report(h, t0, "end");
    return started == o->threads ? 0 : -EAGAIN;
}

/* At the end, every key of every thread is checked once more, exactly. */
static void final_check(struct hammer *h, struct worker *w)
{
    for (unsigned t = 0; t < h->o->threads; t++)
        for (unsigned j = 0; j < n_keys(h); j++) {
            kvt_key k = key_of(h, t, j);
            int found = 0;
            int r = kvt_get(h->e, &k, 1, w[t].bufs, 0, &found);
            if (r)
                fail_at(h, "final get: %s", kvt_strerror(r));
            else
                check_own(&w[t], j, found, w[t].bufs[0], "final get");
        }
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o))
        return 2;
    struct hammer h = { .o = &o, .pages_per_layer = o.keys / (IDS * LAYERS) };
    pthread_mutex_init(&h.mu, NULL);
    char tmp[4096];
    const char *dir = o.ssd_dir;
    int rc = 1;
    if (!dir) {
        const char *base = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/kvt-hammer-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmp)) {
            fprintf(stderr, "hammer: mkdtemp %s: %s\n", tmp, strerror(errno));
            return 1;
        }
        dir = tmp;
    }
    struct worker *w = calloc(o.threads, sizeof *w);
    h.slots = calloc((size_t)o.threads * n_keys(&h), sizeof *h.slots);
    if (!w || !h.slots)
        goto out;
    for (unsigned t = 0; t < o.threads; t++) {
        w[t] = (struct worker){ .h = &h, .tid = t, .rng = 0x9E3779B97F4A7C15ull * (t + 1) };
        for (unsigned i = 0; i < BATCH; i++)
            if (!(w[t].bufs[i] = aligned_alloc(4096, o.page_bytes)))
                goto out;
    }
    if (open_engine(&h, dir))
        goto out;
    fprintf(stderr, "hammer: %u threads x %u keys of %llu bytes, %llu s, persist %d, in %s\n",
            o.threads, n_keys(&h), (unsigned long long)o.page_bytes,
            (unsigned long long)o.seconds, (int)o.persist, dir);
    if (run(&h, w) == 0)
        final_check(&h, w);
    kvt_close(h.e);
    uint64_t ops = atomic_load(&h.ops), wrong = atomic_load(&h.wrong);
    uint64_t errors = atomic_load(&h.errors);
    printf("hammer: ops %llu, wrong %llu, failed calls %llu, busy retries %llu, rss %ld KiB at "
           "the end\n", (unsigned long long)ops, (unsigned long long)wrong,
           (unsigned long long)errors, (unsigned long long)atomic_load(&h.busy), rss_kib());
    if (wrong)
        printf("hammer: first wrong: %s\n", h.first);
    if (errors)
        printf("hammer: first failed call: %s\n", h.first_error);
    if (ops < o.min_ops)
        printf("hammer: only %llu operations ran, fewer than --min-ops %llu\n",
               (unsigned long long)ops, (unsigned long long)o.min_ops);
    rc = wrong || errors || ops < o.min_ops;
out:
    if (w)
        for (unsigned t = 0; t < o.threads; t++)
            for (unsigned i = 0; i < BATCH; i++)
                free(w[t].bufs[i]);
    free(w);
    free(h.slots);
    if (!o.ssd_dir)
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
