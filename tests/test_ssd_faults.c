/*
 * test_ssd_faults.c — fault injection and kill -9 crash tests for the SSD
 * tier (tiers/ssd.c, tiers/ssd_pipe.c, lab/io_faulty.c).
 *
 * Sweeps run one fixed workload once per N, with the N-th I/O operation of
 * one kind failing (a write with -EIO or -ENOSPC, a read with -EIO, a read
 * that stays short, a whole submit), until the workload no longer issues N
 * operations of that kind (then the fault never fired and everything must
 * succeed). The rules checked at every step:
 *  - no call that returned 0 ever served wrong bytes (wrong key, stale
 *    version, torn), and a failed call claims nothing found;
 *  - an acknowledged page (create+release or put returned 0, never dropped)
 *    reads back exact afterwards; a write fault never loses one, nor does
 *    one failed read or submit (the pipeline tries it again); a read fault
 *    may lose only a page that the faulted call asked for, and that page
 *    then reads as a miss (kvt_get) or an error (kvt_acquire), never as
 *    bytes, and never comes back after a reopen;
 *  - an I/O fault never fails the engine (no KVT_EDEVICE/KVT_EFAILED);
 *  - a fired fault is counted in errors_io, with ssd_bad_slots for a
 *    write's -EIO (a read retried into success retires nothing);
 *  - the engine is persistent: after close, a reopen finds every page the
 *    session ended with, exact, and no dropped or lost page (one failed
 *    write, even in the close's own flush, is retried in another slot; only
 *    when every write fails may the reopen find pages older or missing);
 *  - close works and leaks nothing (the sanitizer build checks).
 *
 * The crash test forks a child that writes persisted pages and flushes, and
 * logs every operation before it makes it (an intent log) and every flush
 * after it returns, through a pipe. The parent kills it with SIGKILL at a
 * random moment, reopens the directory and checks every page of the child's
 * key set against the log: a page that the last logged flush covered is
 * there with that version or with a later one the child may have written
 * since; nothing else exists; every page present is exact.
 */
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "lab/lab.h"
#include "kvt_build.h"
#include "io/io.h"
#include "store/ssd_store.h"
#include "api/api.h"
#include "lab/tool.h"

#define PB ((size_t)16384)
#define FP 0x5EED5EED0001ull
#define MAX_SWEEP 600
#define CHILD_ALARM 30 /* seconds: a forked child that hangs dies with SIGALRM */

/* Engines opened by t_open_io() from now on use the faulty I/O back-end
 * with this plan (NULL: the config's back-end), passed at open
 * (kvt_open_with_hooks). The plan outlives every engine opened with it. */
static struct kvt_io_faulty *t_plan;

static void t_force_faulty(struct kvt_io_faulty *plan)
{
    t_plan = plan;
}

static int t_open_io(const kvt_config *c, kvt_engine **e)
{
    struct kvt_test_hooks h = { .io = t_plan };
    return kvt_open_with_hooks(c, &h, e);
}

/* How a forked child ended, for messages. */
static const char *child_end(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d%s", WEXITSTATUS(status),
                 WEXITSTATUS(status) == 1 ? " (a sanitizer report: see stderr)" : "");
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        snprintf(buf, len, "killed by SIGALRM after %d s: it hung", CHILD_ALARM);
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, len, "status %#x", status);
    return buf;
}

/* ---------------------------------------------------------------- dirs */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

/* A fresh directory under $TMPDIR (default /tmp). The sweeps are bound by
 * fdatasync: a tmpfs TMPDIR makes them several times faster. */
static char *dir_new(void)
{
    const char *tmp = getenv("TMPDIR");
    char *d = malloc(4096);
    assert_non_null(d);
    snprintf(d, 4096, "%s/kvt_ssd_faults_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    assert_non_null(mkdtemp(d));
    return d;
}

static void dir_free(char *d)
{
    nftw(d, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
}

static kvt_config ssd_config(const char *dir, size_t hbm, size_t dram, size_t ssd)
{
    kvt_config c = t_config(PB, hbm, dram);
    c.ssd_bytes = ssd * PB;
    c.ssd_dir = dir;
    c.persist = 1;
    c.fingerprint = FP;
    c.codec = KVT_CODEC_NONE;
    c.io_backend = KVT_IO_PSYNC;
    c.queue_depth = 4;
    return c;
}

static kvt_engine *open_ok(const kvt_config *c)
{
    kvt_engine *e = NULL;
    int r = t_open_io(c, &e);
    t_opened(r);
    assert_non_null(e);
    return e;
}

/* ================================================================ sweeps */

/* Per key, the set of states the engine may legitimately be in: bit 0 =
 * absent, bit v+1 = version v. One bit once known; more after a call whose
 * effect cannot be known. */
#define ABSENT 1ull
#define VBIT(v) (1ull << ((v) + 1))
#define MAXV 60

#define NK 40      /* keys 0..23 are created, 24..39 are put */
#define NCREATE 24
#define GET_BATCH 4 /* < DRAM slots: a get of more SSD pages than DRAM holds is test_ssd.c's */
#define NEWKEY_V 9

struct wl {
    kvt_engine *e;
    enum kvt_io_fault_op op;
    uint64_t nth;
    bool repeat;
    bool read_mode;          /* READ, SHORT_READ, SUBMIT: a page may be lost */
    kvt_key key[NK];
    uint64_t mask[NK];
    uint64_t hist[NK];       /* versions acknowledged since the key was last gone */
    uint32_t next_v[NK];
    uint8_t lost_ok[NK];     /* a read fault fired in a call that asked for it */
    int cur[NK], ncur;       /* keys of the call in progress */
    int prev[NK], nprev;     /* keys of the call before */
    int fired;               /* the fault has fired (seen between calls) */
    unsigned calls, errors, violations, lost, efull;
    char first[384];
    char first_err[200];
    void *buf[NK];
};

static void violation(struct wl *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(struct wl *w, const char *fmt, ...)
{
    if (w->violations++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first, sizeof(w->first), fmt, ap);
        va_end(ap);
    }
}

static int fault_fired(const struct wl *w)
{
    return kvt_io_faulty_count(t_plan, w->op) >= w->nth;
}

/* The fault fired since the last look: with a read fault, the keys of the
 * call that ran meanwhile may have lost their only copy. */
static void look_for_fault(struct wl *w, const int *keys, int n)
{
    if (w->fired || !fault_fired(w))
        return;
    w->fired = 1;
    if (w->read_mode)
        for (int j = 0; j < n; j++)
            w->lost_ok[keys[j]] = 1;
}

/* Brackets every API call: which keys it touches, when the fault fired. */
static void call_begin(struct wl *w, const int *keys, int n)
{
    look_for_fault(w, w->prev, w->nprev); /* fired between calls: the mover's leftovers */
    for (int j = 0; j < n; j++)
        w->cur[j] = keys[j];
    w->ncur = n;
}

static void call_end(struct wl *w)
{
    look_for_fault(w, w->cur, w->ncur);
    for (int j = 0; j < w->ncur; j++)
        w->prev[j] = w->cur[j];
    w->nprev = w->ncur;
    w->ncur = 0;
}

static int account(struct wl *w, const char *what, int r)
{
    w->calls++;
    if (r == 0)
        return 0;
    if (w->errors++ == 0)
        snprintf(w->first_err, sizeof(w->first_err), "%s: %s (%s)", what, kvt_strerror(r),
                 kvt_last_error());
    if (r == KVT_EDEVICE || r == KVT_EFAILED)
        violation(w, "%s returned %s: an SSD I/O fault must not fail the engine", what,
                  kvt_strerror(r));
    if (r == KVT_EFULL)
        w->efull++;
    return r;
}

/* p holds a version allowed for key i: collapse the model to it. */
static void verify(struct wl *w, int i, const void *p, const char *what)
{
    for (uint32_t v = 0; v <= MAXV; v++)
        if ((w->mask[i] & VBIT(v)) && t_check(p, PB, w->key[i], v)) {
            w->mask[i] = VBIT(v);
            return;
        }
    violation(w, "%s of key %d served wrong bytes (allowed mask %#llx)", what, i,
              (unsigned long long)w->mask[i]);
}

/* Key i is not there (a miss, ENOTFOUND, or a lost page's error). */
static void saw_missing(struct wl *w, int i, const char *what)
{
    if (w->mask[i] & ABSENT) {
        w->mask[i] = ABSENT;
        w->hist[i] = 0;
        return;
    }
    if (w->lost_ok[i]) {
        w->lost++;
        w->mask[i] = ABSENT;
        w->hist[i] = 0;
        return;
    }
    violation(w, "%s: acknowledged key %d is gone (mask %#llx) and no read fault hit it", what,
              i, (unsigned long long)w->mask[i]);
}

static void op_create(struct wl *w, int i)
{
    uint32_t v = w->next_v[i]++;
    void *p = NULL;
    call_begin(w, &i, 1);
    int r = kvt_create(w->e, w->key[i], &p);
    call_end(w);
    if (r == -EEXIST) {
        w->calls++;
        if (!(w->mask[i] & ~ABSENT))
            violation(w, "create of absent key %d: -EEXIST", i);
        return;
    }
    if (account(w, "create", r))
        return; /* nothing created */
    if (!(w->mask[i] & ABSENT))
        violation(w, "create of existing key %d succeeded", i);
    if (t_fill_page(w->e, p, PB, w->key[i], v))
        violation(w, "create of key %d: cannot write the page", i);
    call_begin(w, &i, 1);
    r = account(w, "release after create", kvt_release(w->e, &w->key[i], 1, 1));
    call_end(w);
    w->mask[i] = r ? (w->mask[i] | VBIT(v)) : VBIT(v);
    w->hist[i] |= VBIT(v);
}

static void op_put(struct wl *w, int i)
{
    uint32_t v = w->next_v[i]++;
    t_fill(w->buf[i], PB, w->key[i], v);
    const void *src[1] = { w->buf[i] };
    call_begin(w, &i, 1);
    int r = kvt_put(w->e, &w->key[i], 1, src, 0);
    call_end(w);
    if (account(w, "put", r) == 0) {
        w->mask[i] = VBIT(v);
        w->hist[i] |= VBIT(v);
    } else if (r == KVT_EFULL)
        w->mask[i] |= ABSENT; /* a full engine may have given up the old page */
}

static void op_acquire(struct wl *w, int i, int rewrite)
{
    void *p = NULL;
    call_begin(w, &i, 1);
    int r = kvt_acquire(w->e, &w->key[i], 1, &p);
    call_end(w);
    if (r == KVT_ENOTFOUND) {
        w->calls++;
        saw_missing(w, i, "acquire (ENOTFOUND)");
        return;
    }
    if (r == -EIO || r == KVT_ECORRUPT) {
        account(w, "acquire", r);
        saw_missing(w, i, r == -EIO ? "acquire (-EIO)" : "acquire (ECORRUPT)");
        return;
    }
    if (account(w, "acquire", r))
        return;
    if (w->mask[i] == ABSENT)
        violation(w, "acquire of absent key %d succeeded", i);
    void *h = malloc(PB);
    if (!h || t_page_read(w->e, h, p, PB))
        violation(w, "acquire of key %d: cannot read the page back", i);
    else
        verify(w, i, h, "acquire");
    free(h);
    if (!rewrite) {
        call_begin(w, &i, 1);
        account(w, "release clean", kvt_release(w->e, &w->key[i], 1, 0));
        call_end(w);
        return;
    }
    uint32_t v = w->next_v[i]++;
    if (t_fill_page(w->e, p, PB, w->key[i], v))
        violation(w, "acquire of key %d: cannot rewrite the page", i);
    call_begin(w, &i, 1);
    r = account(w, "release dirty", kvt_release(w->e, &w->key[i], 1, 1));
    call_end(w);
    w->mask[i] = r ? (w->mask[i] | VBIT(v)) : VBIT(v);
    w->hist[i] |= VBIT(v);
}

/* kvt_get of keys [from, to) in one call. */
static void op_get(struct wl *w, int from, int to, const char *what)
{
    int n = to - from, ks[NK], found[NK];
    kvt_key keys[NK];
    void *dst[NK];
    for (int j = 0; j < n; j++) {
        ks[j] = from + j;
        keys[j] = w->key[from + j];
        dst[j] = w->buf[from + j];
        found[j] = -1;
        memset(dst[j], 0xCD, PB);
    }
    call_begin(w, ks, n);
    int r = kvt_get(w->e, keys, (size_t)n, dst, 0, found);
    call_end(w);
    if (account(w, what, r)) {
        for (int j = 0; j < n; j++)
            if (found[j] != 0)
                violation(w, "%s failed (%s) but found[%d] = %d", what, kvt_strerror(r), j,
                          found[j]);
        return;
    }
    for (int j = 0; j < n; j++) {
        if (found[j] == 1)
            verify(w, from + j, dst[j], what);
        else if (found[j] == 0)
            saw_missing(w, from + j, what);
        else
            violation(w, "%s: found[%d] = %d", what, j, found[j]);
    }
}

static void op_get_all(struct wl *w, const char *what)
{
    for (int i = 0; i < NK; i += GET_BATCH)
        op_get(w, i, i + GET_BATCH < NK ? i + GET_BATCH : NK, what);
}

static void op_drop(struct wl *w, int i)
{
    call_begin(w, &i, 1);
    int r = kvt_drop(w->e, &w->key[i], 1);
    call_end(w);
    if (r == -EBUSY) {
        w->calls++;
        return;
    }
    if (account(w, "drop", r) == 0) {
        w->mask[i] = ABSENT;
        w->hist[i] = 0;
    }
}

static void op_flush(struct wl *w, const char *what)
{
    int all[NK];
    for (int i = 0; i < NK; i++)
        all[i] = i;
    call_begin(w, all, 0); /* a flush reads nothing */
    account(w, what, kvt_flush(w->e));
    call_end(w);
}

/* The fixed workload: HBM 4, DRAM 8, SSD 64 pages, 40 keys; pages go down to
 * SSD as they are made and come back for gets and acquires. */
static void workload(struct wl *w)
{
    for (int i = 0; i < NCREATE; i++)
        op_create(w, i);
    for (int i = NCREATE; i < NK; i++)
        op_put(w, i);
    op_get_all(w, "get all (1)");
    for (int round = 0; round < 2; round++)
        for (int i = round; i < NK; i += 3)
            op_acquire(w, i, (i + round) % 2 == 0);
    op_put(w, 5);  /* overwrites, wherever the old copies are */
    op_put(w, 30);
    op_put(w, 31);
    op_drop(w, 12);
    op_drop(w, 33);
    op_flush(w, "flush");
    op_create(w, 12); /* dropped keys made again */
    op_put(w, 33);
    for (int i = 0; i < NK; i += 5)
        op_acquire(w, i, 0);
    op_get_all(w, "get all (2)");
}

static void wl_init(struct wl *w, const struct kvt_io_fault *f)
{
    memset(w, 0, sizeof(*w));
    w->op = f->op;
    w->nth = f->nth;
    w->repeat = f->repeat;
    w->read_mode = f->op != KVT_IOF_WRITE;
    for (int i = 0; i < NK; i++) {
        w->key[i] = i < NCREATE ? t_key(1, 0, (uint32_t)i) : t_key(2, KVT_ALL_LAYERS, (uint32_t)i);
        w->mask[i] = ABSENT;
        w->next_v[i] = 1;
        w->buf[i] = aligned_alloc(4096, PB);
        assert_non_null(w->buf[i]);
    }
}

static void wl_free(struct wl *w)
{
    for (int i = 0; i < NK; i++)
        free(w->buf[i]);
}

struct sweep_totals {
    unsigned runs, fired, fired_at_close, with_errors, with_lost, lost, with_efull;
    unsigned behind;         /* pages older or missing after a close whose flush failed */
    unsigned violating;
    uint64_t max_ops;
};

static void report(const char *name, const struct sweep_totals *t)
{
    print_message("%s: %u runs (up to %llu ops of the kind), fault fired in %u (%u only at "
                  "close), API errors in %u, pages lost in %u runs (%u in all), KVT_EFULL in "
                  "%u, after reopen %u pages older or missing (failed close), violating runs %u\n",
                  name, t->runs, (unsigned long long)t->max_ops, t->fired, t->fired_at_close,
                  t->with_errors, t->with_lost, t->lost, t->with_efull, t->behind, t->violating);
}

/* After the session: reopens the directory (no fault armed) and checks that
 * it holds exactly what the session ended with. may_miss: every SSD write
 * failed from some point on (repeat), so the close's flush could not write
 * some pages and can only say so on stderr: such a page may be missing, or
 * (copy-on-write) at an older acknowledged version; never wrong bytes, and
 * never a page dropped or lost in the session. Returns how many pages came
 * back older or not at all. */
static unsigned check_reopen(struct wl *w, const char *dir, bool may_miss, bool new_key)
{
    unsigned behind = 0;
    kvt_config c = ssd_config(dir, 4, 8, 64);
    kvt_engine *e = open_ok(&c);
    kvt_stats s0 = t_stats(e);
    uint64_t present = 0;
    for (int i = 0; i < NK + 1; i++) {
        kvt_key k = i < NK ? w->key[i] : t_key(77, 0, 0);
        uint64_t mask = i < NK ? w->mask[i] : new_key ? VBIT(NEWKEY_V) : ABSENT;
        uint64_t older = may_miss && i < NK ? w->hist[i] & ~mask : 0;
        void *dst[1] = { w->buf[0] };
        int found = -1;
        memset(w->buf[0], 0xCD, PB);
        int r = kvt_get(e, &k, 1, dst, 0, &found);
        if (r) {
            violation(w, "reopen: get of key %d: %s (%s)", i, kvt_strerror(r), kvt_last_error());
            continue;
        }
        if (found != 1) {
            if (!(mask & ABSENT) && !may_miss)
                violation(w, "reopen: acknowledged key %d (mask %#llx) is missing", i,
                          (unsigned long long)mask);
            behind += !(mask & ABSENT);
            continue;
        }
        present++;
        int ok = 0, old = 0;
        for (uint32_t v = 0; v <= MAXV && !ok && !old; v++) {
            ok = (mask & VBIT(v)) && t_check(w->buf[0], PB, k, v);
            old = (older & VBIT(v)) && t_check(w->buf[0], PB, k, v);
        }
        behind += old;
        if (!ok && !old)
            violation(w, "reopen: key %d reads wrong bytes, an old version or came back "
                      "(mask %#llx)", i, (unsigned long long)mask);
    }
    kvt_stats s = t_stats(e);
    if (s0.pages != present)
        violation(w, "reopen: %llu pages held, %llu of the workload's keys found",
                  (unsigned long long)s0.pages, (unsigned long long)present);
    if (s.errors_io || s.errors_corrupt)
        violation(w, "reopen: errors_io %llu, errors_corrupt %llu with no fault armed",
                  (unsigned long long)s.errors_io, (unsigned long long)s.errors_corrupt);
    kvt_close(e);
    return behind;
}

/* One run with the fault at N. Returns whether the fault fired. */
static int sweep_run(const struct kvt_io_fault *f, struct sweep_totals *tot)
{
    char *dir = dir_new();
    struct kvt_io_faulty plan;
    kvt_io_faulty_init(&plan, NULL, f);
    t_force_faulty(&plan);
    kvt_config c = ssd_config(dir, 4, 8, 64);
    struct wl w;
    wl_init(&w, f);
    w.e = open_ok(&c);
    kvt_engine *e = w.e;

    workload(&w);
    op_flush(&w, "final flush");
    op_get_all(&w, "final get");

    /* the engine still works: a new page round-trips */
    kvt_key nk = t_key(77, 0, 0);
    void *p = NULL;
    bool new_key = false;
    int r = kvt_create(e, nk, &p);
    if (account(&w, "create after fault", r) == 0) {
        assert_int_equal(t_fill_page(e, p, PB, nk, NEWKEY_V), 0);
        new_key = account(&w, "release", kvt_release(e, &nk, 1, 1)) == 0;
        void *dst[1] = { w.buf[0] };
        int found = 0;
        if (account(&w, "get new page", kvt_get(e, &nk, 1, dst, 0, &found)) == 0 &&
            (found != 1 || !t_check(w.buf[0], PB, nk, NEWKEY_V)))
            violation(&w, "a page created after the fault reads back wrong");
    }
    call_begin(&w, NULL, 0);

    kvt_stats s = t_stats(e);
    if (w.fired && s.errors_io + s.errors_corrupt == 0) {
        /* the fault is counted at submit and applied when the mover reaps:
         * let any job still in flight finish (leaves close less to write) */
        op_flush(&w, "flush before stats");
        s = t_stats(e);
    }
    uint64_t held_min = r == 0, held_max = r == 0; /* the new page */
    for (int i = 0; i < NK; i++) {
        held_min += !(w.mask[i] & ABSENT);
        held_max += (w.mask[i] & ~ABSENT) != 0;
    }
    if (s.pinned_pages != 0)
        violation(&w, "%llu pages still pinned", (unsigned long long)s.pinned_pages);
    if (s.pages < held_min || s.pages > held_max)
        violation(&w, "%llu pages held, the model has %llu to %llu", (unsigned long long)s.pages,
                  (unsigned long long)held_min, (unsigned long long)held_max);
    int fired = w.fired;
    if (fired) {
        if (s.errors_io + s.errors_corrupt == 0)
            violation(&w, "the fault fired but errors_io and errors_corrupt are 0");
        if (f->op == KVT_IOF_WRITE && (f->err == -EIO || f->err == 0) && s.ssd_bad_slots == 0)
            violation(&w, "a write's -EIO fired but no SSD slot was retired");
    }
    if (f->op != KVT_IOF_WRITE && !f->repeat && w.lost)
        violation(&w, "one failed read or submit lost %u pages: it is tried again", w.lost);
    if (!w.read_mode && w.lost)
        violation(&w, "a write fault lost %u pages", w.lost);

    kvt_close(e);
    uint64_t ops = kvt_io_faulty_count(&plan, f->op);
    int fired_at_close = !fired && ops >= f->nth;

    /* a fresh, clean engine over the same directory: exactly what was held */
    struct kvt_io_fault none = { KVT_IOF_NONE, 0, 0, false };
    kvt_io_faulty_set(&plan, &none);
    /* only a write fault that keeps failing may keep the close's flush from
     * writing a page: one failed write is retried elsewhere */
    unsigned behind =
        check_reopen(&w, dir, w.repeat && (fired || fired_at_close) && !w.read_mode, new_key);
    t_force_faulty(NULL);

    tot->runs++;
    tot->fired += fired || fired_at_close;
    tot->fired_at_close += fired_at_close;
    tot->with_errors += w.errors > 0;
    tot->with_lost += w.lost > 0;
    tot->lost += w.lost;
    tot->with_efull += w.efull > 0;
    tot->behind += behind;
    if (ops > tot->max_ops)
        tot->max_ops = ops;
    if (w.violations) {
        tot->violating++;
        print_error("N=%llu (fault %s): %u violations; first: %s\n", (unsigned long long)f->nth,
                    fired ? "fired" : fired_at_close ? "fired at close" : "did not fire",
                    w.violations, w.first);
    }
    if (getenv("KVT_TEST_VERBOSE") && w.errors)
        print_message("N=%llu: %u API errors, first: %s\n", (unsigned long long)f->nth, w.errors,
                      w.first_err);
    if (!fired && !fired_at_close && w.errors) {
        print_error("N=%llu: the fault never fired, yet %u calls failed; first: %s\n",
                    (unsigned long long)f->nth, w.errors, w.first_err);
        tot->violating++;
    }
    wl_free(&w);
    dir_free(dir);
    return fired || fired_at_close;
}

static void sweep(enum kvt_io_fault_op op, int err, bool repeat, struct sweep_totals *tot)
{
    memset(tot, 0, sizeof(*tot));
    for (uint64_t n = 1;; n++) {
        if (n > MAX_SWEEP)
            fail_msg("sweep did not end: the workload keeps making I/O");
        struct kvt_io_fault f = { op, n, err, repeat };
        if (!sweep_run(&f, tot))
            break;
    }
    assert_true(tot->fired >= 1);
    assert_int_equal(tot->fired + 1, tot->runs); /* fired each time, then once did not */
}

static void test_sweep_write_eio(void **state)
{
    struct sweep_totals t;
    sweep(KVT_IOF_WRITE, -EIO, false, &t);
    report("ssd write -EIO", &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 20); /* pages really went down to SSD, many times */
    assert_int_equal(t.lost, 0);
}

static void test_sweep_write_enospc(void **state)
{
    struct sweep_totals t;
    sweep(KVT_IOF_WRITE, -ENOSPC, false, &t);
    report("ssd write -ENOSPC", &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 20);
    assert_int_equal(t.lost, 0);
}

static void test_sweep_write_eio_repeat(void **state)
{
    struct sweep_totals t;
    sweep(KVT_IOF_WRITE, -EIO, true, &t);
    report("ssd write -EIO (repeat)", &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 20);
    assert_int_equal(t.lost, 0);
    assert_true(t.with_efull >= 1); /* a dead SSD leaves only HBM + DRAM: the workload fills them */
}

static void test_sweep_read_eio(void **state)
{
    struct sweep_totals t;
    sweep(KVT_IOF_READ, -EIO, false, &t);
    report("ssd read -EIO", &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 10);
    assert_int_equal(t.lost, 0); /* one failed read is tried again */
}

static void test_sweep_short_read(void **state)
{
    struct sweep_totals t;
    sweep(KVT_IOF_SHORT_READ, -EIO, false, &t);
    report("ssd short read", &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 10);
    assert_int_equal(t.lost, 0);
}

static void test_sweep_submit(void **state)
{
    struct sweep_totals t;
    sweep(KVT_IOF_SUBMIT, -EIO, false, &t);
    report("ssd submit -EIO", &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 10);
    assert_int_equal(t.lost, 0); /* a refused submit says nothing about the disk */
}

/* The same faults with each page moved in two I/O requests (the pieces of
 * a large page, ssd_pipe.c): a fault in one piece fails or retries the
 * whole page, never serves half of it, and a refused piece beside a sent
 * one still leaves the page as it was. (A short read is an -EIO of its
 * piece to the pipeline, as a failed read is: not swept again, to keep this
 * process within its alarm under TSan.) */
extern size_t kvt_test_piece_bytes;

static void sweep_in_pieces(enum kvt_io_fault_op op, int err, const char *what)
{
    struct sweep_totals t;
    kvt_test_piece_bytes = PB / 2;
    sweep(op, err, false, &t);
    kvt_test_piece_bytes = 0;
    report(what, &t);
    assert_int_equal(t.violating, 0);
    assert_true(t.fired >= 10);
    assert_int_equal(t.lost, 0);
}

static void test_sweep_pieces_read_eio(void **state)
{
    sweep_in_pieces(KVT_IOF_READ, -EIO, "ssd read -EIO, pages in 2 pieces");
}

static void test_sweep_pieces_submit(void **state)
{
    sweep_in_pieces(KVT_IOF_SUBMIT, -EIO, "ssd submit -EIO, pages in 2 pieces");
}

static void test_sweep_pieces_write_eio(void **state)
{
    sweep_in_pieces(KVT_IOF_WRITE, -EIO, "ssd write -EIO, pages in 2 pieces");
}

/* ====================================================== targeted faults */

/* kvt_flush with persist promises durability on return: a write that fails
 * under it must be retried elsewhere or reported. The child puts pages,
 * arms the fault, flushes, reports the result and dies without closing; the
 * parent reopens: if flush said 0, every page must be there. */
static void flush_fault_child(const char *dir, const struct kvt_io_fault *f, int wfd)
{
    alarm(CHILD_ALARM);
    struct kvt_io_faulty plan;
    kvt_io_faulty_init(&plan, NULL, NULL);
    t_force_faulty(&plan);
    kvt_config c = ssd_config(dir, 4, 8, 64);
    kvt_engine *e = NULL;
    /* No write-ahead: the flush must make the writes the fault is armed
     * for, not find them done by the mover before the plan was set. */
    struct kvt_test_hooks h = { .io = &plan, .no_write_ahead = true };
    if (kvt_open_with_hooks(&c, &h, &e))
        _exit(2);
    void *b = aligned_alloc(4096, PB);
    for (uint32_t i = 0; i < 6; i++) { /* DRAM holds them all: no SSD write yet */
        kvt_key k = t_key(3, 0, i);
        t_fill(b, PB, k, 1);
        const void *src[1] = { b };
        if (kvt_put(e, &k, 1, src, 0))
            _exit(3);
    }
    kvt_io_faulty_set(&plan, f);
    int r[2] = { kvt_flush(e), (int)kvt_io_faulty_count(&plan, f->op) };
    if (write(wfd, r, sizeof(r)) != sizeof(r))
        _exit(4);
    _exit(0); /* a crash: no close, no flush at close */
}

static int flush_fault_case(const struct kvt_io_fault *f, const char *name)
{
    char *dir = dir_new();
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        flush_fault_child(dir, f, p[1]);
    }
    close(p[1]);
    int r[2] = { 1, 0 }, status;
    ssize_t got = read(p[0], r, sizeof(r));
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char why[96];
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != sizeof(r))
        fail_msg("%s: the child failed: %s", name, child_end(status, why, sizeof(why)));
    assert_true(r[1] >= 1); /* the fault fired */

    kvt_config c = ssd_config(dir, 4, 8, 64);
    kvt_engine *e = open_ok(&c);
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    unsigned present = 0;
    for (uint32_t i = 0; i < 6; i++) {
        kvt_key k = t_key(3, 0, i);
        void *dst[1] = { b };
        int found = -1;
        assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
        if (found == 1) {
            assert_true(t_check(b, PB, k, 1));
            present++;
        }
    }
    print_message("%s: flush returned %d (%s), %u of 6 pages durable\n", name, r[0],
                  kvt_strerror(r[0]), present);
    int bad = r[0] == 0 && present != 6;
    if (bad)
        print_error("%s: kvt_flush returned 0 with persist, but after a crash only %u of 6 "
                    "flushed pages are on SSD (a failed write is neither retried nor "
                    "reported)\n", name, present);
    kvt_close(e);
    free(b);
    dir_free(dir);
    return bad;
}

static void test_flush_write_fault_durable(void **state)
{
    struct kvt_io_fault once = { KVT_IOF_WRITE, 1, -EIO, false };
    struct kvt_io_fault always = { KVT_IOF_WRITE, 1, -EIO, true };
    struct kvt_io_fault enospc = { KVT_IOF_WRITE, 1, -ENOSPC, false };
    int bad = flush_fault_case(&once, "flush, 1st write -EIO");
    bad += flush_fault_case(&enospc, "flush, 1st write -ENOSPC");
    bad += flush_fault_case(&always, "flush, every write -EIO");
    assert_int_equal(bad, 0);
}

/* Overwriting a flushed page with kvt_put must not make it vanish from the
 * SSD before the new version is there: the child flushes K at version 1,
 * puts version 2 over it, makes the mover run a round (an SSD read of another
 * page), and dies. The parent must find K at version 1 or 2. */
static void test_put_overwrite_crash(void **state)
{
    char *dir = dir_new();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(CHILD_ALARM);
        kvt_config c = ssd_config(dir, 4, 8, 64);
        kvt_engine *e = NULL;
        if (t_open_io(&c, &e))
            _exit(2);
        void *b = aligned_alloc(4096, PB);
        for (uint32_t i = 0; i < 16; i++) { /* more than DRAM holds: some go to SSD */
            kvt_key k = t_key(4, 0, i);
            t_fill(b, PB, k, 1);
            const void *src[1] = { b };
            if (kvt_put(e, &k, 1, src, 0))
                _exit(3);
        }
        if (kvt_flush(e))
            _exit(4);
        kvt_key k0 = t_key(4, 0, 0);
        kvt_tier where[16];
        kvt_key ks[16];
        for (uint32_t i = 0; i < 16; i++)
            ks[i] = t_key(4, 0, i);
        if (kvt_exists(e, ks, 16, where) != 16)
            _exit(5);
        int ssd_only = -1;
        for (int i = 1; i < 16 && ssd_only < 0; i++)
            if (where[i] == KVT_TIER_SSD)
                ssd_only = i;
        if (ssd_only < 0)
            _exit(6);
        t_fill(b, PB, k0, 2);
        const void *src[1] = { b };
        if (kvt_put(e, &k0, 1, src, 0))
            _exit(7);
        /* the read runs in a mover round, which first commits pending deletions */
        void *dst[1] = { b };
        int found = 0;
        if (kvt_get(e, &ks[ssd_only], 1, dst, 0, &found) || found != 1)
            _exit(8);
        _exit(0); /* crash */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char why[96];
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the child failed: %s", child_end(status, why, sizeof(why)));
    kvt_config c = ssd_config(dir, 4, 8, 64);
    kvt_engine *e = open_ok(&c);
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    unsigned present = 0;
    int k0_found = -1;
    for (uint32_t i = 0; i < 16; i++) {
        kvt_key k = t_key(4, 0, i);
        void *dst[1] = { b };
        int found = -1;
        assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
        if (i == 0)
            k0_found = found;
        if (found != 1)
            continue;
        present++;
        assert_true(t_check(b, PB, k, 1) || (i == 0 && t_check(b, PB, k, 2)));
    }
    kvt_close(e);
    free(b);
    dir_free(dir);
    if (k0_found != 1)
        fail_msg("a flushed page overwritten by kvt_put is gone after a crash: the old "
                 "version's index entry was deleted before the new version was written");
    assert_int_equal(present, 16);
}

/* Puts 16 pages of key id 5 into a persisted engine with HBM 4 and DRAM 8
 * pages: some end up on SSD only. Returns the engine; keys in ks. */
static kvt_engine *sixteen_pages(const kvt_config *c, kvt_key *ks, void *b)
{
    kvt_engine *e = open_ok(c);
    for (uint32_t i = 0; i < 16; i++) {
        ks[i] = t_key(5, 0, i);
        t_fill(b, PB, ks[i], 1);
        const void *src[1] = { b };
        assert_int_equal(kvt_put(e, &ks[i], 1, src, 0), 0);
    }
    return e;
}

/* The start and end of the fault tests below: a fresh directory, a fault
 * plan installed that fails nothing yet, and a persisted engine holding
 * sixteen_pages, with its page buffer b (PB bytes, 4 KiB-aligned). */
struct sixteen {
    char *dir;
    struct kvt_io_faulty plan;
    kvt_config c;
    void *b;
    kvt_key ks[16];
};

static kvt_engine *sixteen_open(struct sixteen *f)
{
    f->dir = dir_new();
    kvt_io_faulty_init(&f->plan, NULL, NULL);
    t_force_faulty(&f->plan);
    f->c = ssd_config(f->dir, 4, 8, 64);
    f->b = aligned_alloc(4096, PB);
    assert_non_null(f->b);
    return sixteen_pages(&f->c, f->ks, f->b);
}

/* After the engine is closed. */
static void sixteen_close(struct sixteen *f)
{
    t_force_faulty(NULL);
    free(f->b);
    dir_free(f->dir);
}

/* The index of a page of ks that lives on SSD only, other than not (-1:
 * none), or -1 when there is none. */
static int ssd_only(kvt_engine *e, const kvt_key *ks, int not)
{
    kvt_tier where[16];
    (void)kvt_exists(e, ks, 16, where); /* (how many lead: a lost one may be among them) */
    for (int i = 0; i < 16; i++)
        if (i != not && where[i] == KVT_TIER_SSD)
            return i;
    return -1;
}

/* kvt_get reads a page that lives only on SSD itself, into the caller's
 * aligned buffer (tiers/ssd_caller.c), under the mover's rules: one failed
 * read there is tried again by the mover (served exact, one error counted,
 * two reads in all); a read that keeps failing is tried SSD_TRIES times in
 * all (the caller's try and the mover's two), and the page is lost: a miss,
 * never bytes. */
static void test_get_read_fault_retried_then_lost(void **state)
{
    struct kvt_io_fault none = { KVT_IOF_NONE, 0, 0, false };
    struct sixteen f;
    kvt_engine *e = sixteen_open(&f);
    void *b = f.b;
    kvt_key *ks = f.ks;
    void *dst[1] = { b };

    int t = ssd_only(e, ks, -1);
    assert_true(t >= 0);
    struct kvt_io_fault once = { KVT_IOF_READ, 1, -EIO, false };
    kvt_io_faulty_set(&f.plan, &once);
    memset(b, 0xCD, PB);
    int found = -1;
    assert_int_equal(kvt_get(e, &ks[t], 1, dst, 0, &found), 0);
    assert_int_equal(found, 1);
    assert_true(t_check(b, PB, ks[t], 1));
    assert_int_equal(kvt_io_faulty_count(&f.plan, KVT_IOF_READ), 2);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.errors_io, 1);
    assert_int_equal(s.pages, 16);

    int a = ssd_only(e, ks, -1); /* a direct read leaves the page on SSD only */
    assert_int_equal(a, t);
    struct kvt_io_fault always = { KVT_IOF_READ, 1, -EIO, true };
    kvt_io_faulty_set(&f.plan, &always);
    memset(b, 0xCD, PB);
    found = -1;
    assert_int_equal(kvt_get(e, &ks[a], 1, dst, 0, &found), 0);
    assert_int_equal(found, 0);
    assert_int_equal(kvt_io_faulty_count(&f.plan, KVT_IOF_READ), 3); /* SSD_TRIES */
    kvt_io_faulty_set(&f.plan, &none);
    s = t_stats(e);
    assert_int_equal(s.errors_io, 1 + 3);
    assert_int_equal(s.pages, 15);
    for (int i = 0; i < 16; i++) {
        found = -1;
        assert_int_equal(kvt_get(e, &ks[i], 1, dst, 0, &found), 0);
        assert_int_equal(found, i != a);
        if (i != a)
            assert_true(t_check(b, PB, ks[i], 1));
    }
    kvt_close(e);
    sixteen_close(&f);
}

/* After one of sixteen_pages was dropped (gone): no I/O error counted,
 * fifteen pages held, each of them served exact, gone a miss. */
static void fifteen_exact(kvt_engine *e, struct sixteen *f, int gone)
{
    kvt_stats s = t_stats(e);
    assert_int_equal(s.errors_io + s.errors_corrupt, 0);
    assert_int_equal(s.pages, 15);
    void *dst[1] = { f->b };
    for (int i = 0; i < 16; i++) {
        int found = -1;
        assert_int_equal(kvt_get(e, &f->ks[i], 1, dst, 0, &found), 0);
        assert_int_equal(found, i != gone);
        if (i != gone)
            assert_true(t_check(f->b, PB, f->ks[i], 1));
    }
}

/* The mover's read of a page up from SSD, held at the back-end's submit
 * (the plan's submit_mu) while another thread drops the page. */
struct drop_race {
    kvt_engine *e;
    const kvt_key *key;
    int cycle, drop;
};

static void *race_cycle(void *arg)
{
    struct drop_race *d = arg;
    struct kvt_tool_ssd_times t;
    uint64_t got;
    d->cycle = kvt_tool_ssd_cycle(d->e, &t, &got);
    return NULL;
}

static void *race_drop(void *arg)
{
    struct drop_race *d = arg;
    d->drop = kvt_drop(d->e, d->key, 1);
    return NULL;
}

/* A page whose SSD read into DRAM is in flight, dropped. */
static int page_reading(kvt_engine *e, const kvt_key *ks)
{
    int at = -1;
    kvt_lock(e);
    for (int i = 0; i < 16 && at < 0; i++) {
        uint32_t pg = kvt_ptable_find(&e->pt, &ks[i]);
        if (pg != KVT_NONE && kvt_pg(&e->pt, pg)->xfer == XFER_SSD_READ)
            at = i;
    }
    kvt_unlock(e);
    return at;
}

/* kvt_drop of a page while the mover reads it up from SSD: the drop waits
 * for the read (as a put of a new version does), so the read's end neither
 * makes the dropped record valid in DRAM again (a DRAM slot and a record
 * nothing freed) nor reads a slot the drop had freed. Afterwards every
 * other page is exact, and with them all dropped nothing is left resident. */
static void test_drop_during_read(void **state)
{
    struct sixteen f;
    kvt_engine *e = sixteen_open(&f);
    assert_int_equal(kvt_flush(e), 0); /* every page on SSD: the cycle writes nothing */
    pthread_mutex_lock(&f.plan.submit_mu);
    struct drop_race d = { .e = e, .cycle = 1, .drop = 1 };
    pthread_t cy, dr;
    assert_int_equal(pthread_create(&cy, NULL, race_cycle, &d), 0);
    int t;
    while ((t = page_reading(e, f.ks)) < 0)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    d.key = &f.ks[t];
    assert_int_equal(pthread_create(&dr, NULL, race_drop, &d), 0);
    nanosleep(&(struct timespec){ 0, 50000000 }, NULL); /* the drop waits, or (before) is done */
    pthread_mutex_unlock(&f.plan.submit_mu);
    pthread_join(dr, NULL);
    pthread_join(cy, NULL);
    assert_int_equal(d.drop, 0);
    assert_int_equal(d.cycle, 0);
    fifteen_exact(e, &f, t);
    assert_int_equal(kvt_drop_id(e, 5), 0);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, 0);
    for (int v = 0; v < KVT_TIERS; v++)
        assert_int_equal(s.resident_pages[v], 0);
    kvt_close(e);
    sixteen_close(&f);
}

/* Under the lock: queues an SSD read of page i of ks into a DRAM slot, as
 * the mover's prefetch does. */
static uint32_t queue_read_of(kvt_engine *e, const kvt_key *ks, int i)
{
    uint32_t pg = kvt_ptable_find(&e->pt, &ks[i]);
    assert_true(pg != KVT_NONE);
    assert_true(kvt_dram_slot(e, pg, 0) != KVT_NONE);
    kvt_ssd_queue_read(e, pg);
    return pg;
}

static void wait_ssd_idle(kvt_engine *e)
{
    for (;;) {
        kvt_lock(e);
        bool busy = e->ssd_tier.busy != 0;
        kvt_unlock(e);
        if (!busy)
            return;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
}

/* A page destroyed while its SSD read is queued (a full put gives an old
 * version up; a drop on a failed engine): the read still finds the slot
 * it reads, which is freed only once the read is over. Before, the
 * destroy forgot the slot at once and the mover, taking the read, looked
 * up the metadata of slot KVT_NONE (a crash), or read a slot already freed
 * and written again (a false checksum error). */
static void test_destroy_during_queued_read(void **state)
{
    struct sixteen f;
    kvt_engine *e = sixteen_open(&f);
    assert_int_equal(kvt_flush(e), 0);
    kvt_lock(e);
    kvt_dram_drop_redundant(e);
    kvt_unlock(e);
    int a = ssd_only(e, f.ks, -1), b = ssd_only(e, f.ks, a);
    assert_true(a >= 0 && b >= 0);
    /* a's read taken by the mover and held at submit; b's queued behind */
    pthread_mutex_lock(&f.plan.submit_mu);
    kvt_lock(e);
    queue_read_of(e, f.ks, a);
    kvt_unlock(e);
    for (bool queued = true; queued;) {
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
        kvt_lock(e);
        queued = e->ssd_tier.queued != 0;
        kvt_unlock(e);
    }
    kvt_lock(e);
    uint32_t pb = queue_read_of(e, f.ks, b);
    uint32_t free0 = kvt_ssd_nfree(kvt_ssd_of(e->ssd));
    kvt_page_destroy(e, pb);
    assert_int_equal(kvt_ssd_nfree(kvt_ssd_of(e->ssd)), free0); /* still the read's */
    kvt_unlock(e);
    pthread_mutex_unlock(&f.plan.submit_mu);
    wait_ssd_idle(e);
    assert_int_equal(kvt_flush(e), 0); /* the deletion committed, its slot free */
    kvt_lock(e);
    assert_int_equal(kvt_ssd_nfree(kvt_ssd_of(e->ssd)), free0 + 1);
    kvt_unlock(e);
    fifteen_exact(e, &f, b);
    kvt_close(e);
    sixteen_close(&f);
}

/* One failed read of a page that lives only on SSD is tried again: the
 * page is served exact, the error counted, no slot retired. A read that
 * keeps failing (SSD_TRIES tries) loses the page: acquire reports -EIO,
 * the page is a miss from then on, also after a reopen, its slot retired,
 * and every other page is intact. */
static void test_read_fault_retried_then_lost(void **state)
{
    struct kvt_io_fault none = { KVT_IOF_NONE, 0, 0, false };
    struct sixteen f;
    kvt_engine *e = sixteen_open(&f);
    void *b = f.b;
    kvt_key *ks = f.ks;

    /* one failure: retried, served */
    int t = ssd_only(e, ks, -1);
    assert_true(t >= 0);
    struct kvt_io_fault once = { KVT_IOF_READ, 1, -EIO, false };
    kvt_io_faulty_set(&f.plan, &once);
    void *d = NULL;
    assert_int_equal(kvt_acquire(e, &ks[t], 1, &d), 0);
    assert_true(t_check_page(e, d, PB, ks[t], 1));
    assert_int_equal(kvt_release(e, &ks[t], 1, 0), 0);
    assert_int_equal(kvt_io_faulty_count(&f.plan, KVT_IOF_READ), 2);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.errors_io, 1);
    assert_int_equal(s.ssd_bad_slots, 0);
    assert_int_equal(s.pages, 16);

    /* a checksum mismatch is not retried into success: see test_ssd's
     * corruption tests; here a read that keeps failing */
    int a = ssd_only(e, ks, -1);
    assert_true(a >= 0);
    struct kvt_io_fault always = { KVT_IOF_READ, 1, -EIO, true };
    kvt_io_faulty_set(&f.plan, &always);
    assert_int_equal(kvt_acquire(e, &ks[a], 1, &d), -EIO);
    assert_int_equal(kvt_io_faulty_count(&f.plan, KVT_IOF_READ), 3); /* SSD_TRIES */
    kvt_io_faulty_set(&f.plan, &none);
    s = t_stats(e);
    assert_int_equal(s.errors_io, 1 + 3);
    assert_int_equal(s.errors_corrupt, 0);
    assert_int_equal(s.ssd_bad_slots, 1);
    assert_int_equal(s.pinned_pages, 0);
    assert_int_equal(s.pages, 15);
    assert_int_equal(kvt_acquire(e, &ks[a], 1, &d), KVT_ENOTFOUND);
    void *dst[1] = { b };
    int found = -1;
    assert_int_equal(kvt_get(e, &ks[a], 1, dst, 0, &found), 0);
    assert_int_equal(found, 0);

    /* a get with found == NULL reports a loss as an error, never as bytes */
    int other = ssd_only(e, ks, a);
    if (other < 0) { /* every SSD-only page was read up: send one back down */
        kvt_close(e);
        e = open_ok(&f.c);
        other = ssd_only(e, ks, a);
    }
    assert_true(other >= 0);
    kvt_io_faulty_set(&f.plan, &always);
    memset(b, 0xCD, PB);
    int r = kvt_get(e, &ks[other], 1, dst, 0, NULL);
    assert_true(r == -EIO || r == KVT_ECORRUPT);
    assert_int_equal(kvt_io_faulty_count(&f.plan, KVT_IOF_READ), 3);
    kvt_io_faulty_set(&f.plan, &none);
    assert_int_equal(t_stats(e).pages, 14);
    kvt_close(e);

    e = open_ok(&f.c);
    unsigned present = 0;
    for (int i = 0; i < 16; i++) {
        found = -1;
        assert_int_equal(kvt_get(e, &ks[i], 1, dst, 0, &found), 0);
        if (i == a || i == other) {
            assert_int_equal(found, 0); /* lost stays lost */
            continue;
        }
        assert_int_equal(found, 1);
        assert_true(t_check(b, PB, ks[i], 1));
        present++;
    }
    assert_int_equal(present, 14);
    assert_int_equal(t_stats(e).errors_io, 0);
    kvt_close(e);
    sixteen_close(&f);
}

/* A submit() that fails says nothing about the disk: the reads of that
 * batch are tried again and served exact. One that keeps failing makes the
 * call fail, but the pages stay on SSD (not lost, no slot retired) and are
 * served once the back-end takes requests again. */
static void test_submit_fault_keeps_pages(void **state)
{
    struct kvt_io_fault none = { KVT_IOF_NONE, 0, 0, false };
    struct sixteen f;
    kvt_engine *e = sixteen_open(&f);
    kvt_key *ks = f.ks;
    kvt_close(e); /* persist: every page on SSD only after the reopen */
    e = open_ok(&f.c);
    void *bufs = aligned_alloc(4096, 16 * PB);
    assert_non_null(bufs);
    void *dst[16];
    int found[16];
    for (int i = 0; i < 16; i++)
        dst[i] = (uint8_t *)bufs + i * PB;

    struct kvt_io_fault once = { KVT_IOF_SUBMIT, 1, -EIO, false };
    kvt_io_faulty_set(&f.plan, &once);
    assert_int_equal(kvt_get(e, ks, 4, dst, 0, found), 0);
    assert_true(kvt_io_faulty_count(&f.plan, KVT_IOF_SUBMIT) >= 2);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(found[i], 1);
        assert_true(t_check(dst[i], PB, ks[i], 1));
    }
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pages, 16);
    assert_int_equal(s.ssd_bad_slots, 0);
    assert_true(s.errors_io >= 1);

    struct kvt_io_fault always = { KVT_IOF_SUBMIT, 1, -EIO, true };
    kvt_io_faulty_set(&f.plan, &always);
    int r = kvt_get(e, ks + 4, 4, dst + 4, 0, found + 4);
    assert_true(r < 0);
    for (int i = 4; i < 8; i++)
        assert_int_equal(found[i], 0);
    kvt_io_faulty_set(&f.plan, &none);
    s = t_stats(e);
    assert_int_equal(s.pages, 16);
    assert_int_equal(s.ssd_bad_slots, 0);
    assert_int_equal(s.errors_corrupt, 0);
    assert_int_equal(kvt_get(e, ks, 16, dst, 0, found), 0);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(found[i], 1);
        assert_true(t_check(dst[i], PB, ks[i], 1));
    }
    kvt_close(e);
    free(bufs);
    sixteen_close(&f);
}

/* A reopened engine whose first SSD work is a deletion (a drop of a page
 * that lives only on SSD) runs a mover round with no job ever queued. Runs in
 * a child so that a sanitizer abort fails this test only. */
static void test_drop_before_any_ssd_job(void **state)
{
    char *dir = dir_new();
    t_force_faulty(NULL);
    kvt_config c = ssd_config(dir, 4, 8, 64);
    kvt_engine *e = open_ok(&c);
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    for (uint32_t i = 0; i < 12; i++) {
        kvt_key k = t_key(8, 0, i);
        t_fill(b, PB, k, 1);
        const void *src[1] = { b };
        assert_int_equal(kvt_put(e, &k, 1, src, 0), 0);
    }
    kvt_close(e); /* persist: everything is on SSD now */

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(CHILD_ALARM);
        kvt_engine *ce = NULL;
        c.device = t_device(); /* the host, in a child */
        if (t_open_io(&c, &ce))
            _exit(2);
        kvt_key k = t_key(8, 0, 3);
        if (kvt_drop(ce, &k, 1))
            _exit(3);
        if (kvt_flush(ce)) /* waits for the deletion's round */
            _exit(4);
        kvt_close(ce);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char why[96];
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        print_error("drop, then flush, in a freshly reopened engine: the child failed: %s\n",
                    child_end(status, why, sizeof(why)));
    int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;

    e = open_ok(&c);
    for (uint32_t i = 0; i < 12; i++) {
        kvt_key k = t_key(8, 0, i);
        void *dst[1] = { b };
        int found = -1;
        assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
        if (child_ok)
            assert_int_equal(found, i != 3);
        if (found == 1)
            assert_true(t_check(b, PB, k, 1));
    }
    kvt_close(e);
    free(b);
    dir_free(dir);
    assert_true(child_ok);
}

/* =============================================================== io_uring */

static void test_uring_disabled(void **state)
{
    char *dir = dir_new();
    t_force_faulty(NULL);
    const char *old = getenv("KVT_IO_URING_DISABLE");
    char *saved = old ? strdup(old) : NULL;
    assert_int_equal(setenv("KVT_IO_URING_DISABLE", "1", 1), 0);

    kvt_config c = ssd_config(dir, 4, 8, 64);
    c.io_backend = KVT_IO_URING;
    kvt_engine *e = (kvt_engine *)(uintptr_t)0x1;
    int r = t_open_io(&c, &e);
    print_message("io_backend URING with io_uring disabled: %s (%s)\n", kvt_strerror(r),
                  kvt_last_error());
    assert_true(r < 0);
    assert_null(e);
    assert_true(r == -EPERM || r == KVT_ENOTSUP);
    assert_non_null(strstr(kvt_last_error(), "io_uring"));

    c.io_backend = KVT_IO_AUTO;
    e = open_ok(&c);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.io_fallback, 1);
    /* and the pool moves pages: more than HBM + DRAM hold */
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    for (uint32_t i = 0; i < 20; i++) {
        kvt_key k = t_key(6, 0, i);
        t_fill(b, PB, k, 1);
        const void *src[1] = { b };
        assert_int_equal(kvt_put(e, &k, 1, src, 0), 0);
    }
    for (uint32_t i = 0; i < 20; i++) {
        kvt_key k = t_key(6, 0, i);
        void *dst[1] = { b };
        int found = 0;
        assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
        assert_int_equal(found, 1);
        assert_true(t_check(b, PB, k, 1));
    }
    s = t_stats(e);
    assert_true(s.bytes_down[KVT_TIER_DRAM] > 0 && s.bytes_up[KVT_TIER_DRAM] > 0);
    kvt_close(e);

    c.io_backend = KVT_IO_PSYNC; /* asked for by name: not a fallback */
    e = open_ok(&c);
    assert_int_equal(t_stats(e).io_fallback, 0);
    kvt_close(e);

    if (saved) {
        setenv("KVT_IO_URING_DISABLE", saved, 1);
        free(saved);
    } else {
        unsetenv("KVT_IO_URING_DISABLE");
    }
    free(b);
    dir_free(dir);
}

/* ================================================================= crash */

#define CK 48              /* the child's keys: (9, i % 3, i) */
#define CRASH_CYCLES 40
#define FLUSH_EVERY 24     /* ops between flushes */

enum { R_PUT = 1, R_WRITE, R_CREATE, R_DROP, R_FLUSH };

struct rec {
    uint8_t type;
    uint8_t pad;
    uint16_t key;
    uint32_t ver;          /* the version written; the flush number for R_FLUSH */
};

static kvt_key ckey(int i)
{
    return t_key(9, (uint32_t)i % 3, (uint32_t)i);
}

/* A page's content for (key, version), compressible so that the zstd
 * codecs store it compressed. */
static void c_fill(void *p, kvt_key k, uint32_t v)
{
    util_pattern_fill_z(p, PB, k, v);
}

static int c_check(const void *p, kvt_key k, uint32_t v)
{
    return util_pattern_diff(p, PB, k, v, true) == PB;
}

static kvt_config crash_config(const char *dir, int cycle)
{
    kvt_config c = ssd_config(dir, 4, 8, 160);
    c.codec = cycle % 3; /* NONE, ZSTD, ZSTD_SHUFFLE16 */
    c.io_backend = KVT_IO_AUTO;
    c.queue_depth = 8;
    return c;
}

static void crash_log(int wfd, uint8_t type, int key, uint32_t ver)
{
    struct rec r = { type, 0, (uint16_t)key, ver };
    if (write(wfd, &r, sizeof(r)) != sizeof(r))
        _exit(40);
}

/* The child: cur[] is the state the parent found (inherited through fork);
 * versions start at base. Exits only on an error (the code says which). */
static void crash_child(const char *dir, int cycle, const uint32_t *cur0, uint32_t base,
                        unsigned seed, int wfd)
{
    uint32_t cur[CK], v = base;
    alarm(CHILD_ALARM); /* never outlive the test */
    memcpy(cur, cur0, sizeof(cur));
    kvt_config c = crash_config(dir, cycle);
    kvt_engine *e = NULL;
    if (t_open_io(&c, &e))
        _exit(2);
    void *b = aligned_alloc(4096, PB);
    if (!b)
        _exit(3);
    for (uint32_t op = 1, flushes = 0;; op++) {
        if (op % FLUSH_EVERY == 0) {
            if (kvt_flush(e))
                _exit(16);
            crash_log(wfd, R_FLUSH, 0, ++flushes);
            continue;
        }
        int i = (int)(rand_r(&seed) % CK), what = (int)(rand_r(&seed) % 10);
        kvt_key k = ckey(i);
        if (what < 4) {
            crash_log(wfd, R_PUT, i, ++v);
            c_fill(b, k, v);
            const void *src[1] = { b };
            if (kvt_put(e, &k, 1, src, 0))
                _exit(10);
            cur[i] = v;
        } else if (what < 6 && cur[i]) {
            void *d = NULL;
            if (kvt_acquire(e, &k, 1, &d))
                _exit(13);
            if (!c_check(d, k, cur[i]))
                _exit(14);
            crash_log(wfd, R_WRITE, i, ++v);
            c_fill(d, k, v);
            if (kvt_release(e, &k, 1, 1))
                _exit(12);
            cur[i] = v;
        } else if (what < 6) {
            void *d = NULL;
            crash_log(wfd, R_CREATE, i, ++v);
            if (kvt_create(e, k, &d))
                _exit(11);
            c_fill(d, k, v);
            if (kvt_release(e, &k, 1, 1))
                _exit(12);
            cur[i] = v;
        } else if (what < 7) {
            crash_log(wfd, R_DROP, i, 0);
            if (kvt_drop(e, &k, 1))
                _exit(15);
            cur[i] = 0;
        } else {
            void *dst[1] = { b };
            int found = -1;
            if (kvt_get(e, &k, 1, dst, 0, &found))
                _exit(17);
            if (found != (cur[i] != 0) || (found && !c_check(b, k, cur[i])))
                _exit(18);
        }
    }
}

static const char *crash_exit_why(int code)
{
    switch (code) {
    case 2: return "kvt_open failed";
    case 10: return "kvt_put failed";
    case 11: return "kvt_create failed";
    case 12: return "kvt_release failed";
    case 13: return "kvt_acquire failed";
    case 14: return "kvt_acquire served wrong bytes";
    case 15: return "kvt_drop failed";
    case 16: return "kvt_flush failed";
    case 17: return "kvt_get failed";
    case 18: return "kvt_get served wrong bytes or a wrong miss";
    case 40: return "writing the log failed";
    case 1: return "a sanitizer report (see stderr)";
    default: return "?";
    }
}

struct crash_totals {
    unsigned cycles, with_flush, flushes, ops_logged, present, newer, absent_by_drop,
        unflushed_drop_absent, put_vanished;
};

/* Reads what the child logged. With until_flush, blocks until one flush is
 * logged: returns 1 then, 0 at EOF (the child is gone), -1 after
 * CHILD_ALARM seconds without a record (the child hangs). Otherwise reads
 * what is there (non-blocking fd) or to EOF (blocking fd) and returns 0. */
static int crash_read(int fd, struct rec **log, size_t *n, size_t *cap, bool until_flush)
{
    for (;;) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 4096;
            *log = realloc(*log, *cap * sizeof(**log));
            assert_non_null(*log);
        }
        if (until_flush) {
            struct pollfd pf = { fd, POLLIN, 0 };
            if (poll(&pf, 1, CHILD_ALARM * 1000) == 0)
                return -1;
        }
        ssize_t got = read(fd, &(*log)[*n], sizeof(struct rec));
        if (got <= 0)
            return 0; /* EOF (the child is gone) or nothing now (non-blocking) */
        assert_int_equal(got, sizeof(struct rec)); /* records are written whole */
        if ((*log)[(*n)++].type == R_FLUSH && until_flush)
            return 1;
    }
}

/* Checks the directory after the kill against the log and returns (in cur)
 * what it holds, for the next child. Returns 0, or -1 with a message. */
static int crash_check(const char *dir, int cycle, uint32_t *cur, const struct rec *log,
                       size_t n, struct crash_totals *tot, char *err, size_t errlen)
{
    static const char *const names[] = { "", "put", "rewrite", "create", "drop" };
    /* the state the last logged flush made durable */
    size_t last_flush = 0; /* records before it */
    for (size_t j = 0; j < n; j++)
        if (log[j].type == R_FLUSH)
            last_flush = j;
    uint32_t flushed[CK];
    memcpy(flushed, cur, sizeof(flushed));
    for (size_t j = 0; j < last_flush; j++)
        if (log[j].type != R_FLUSH)
            flushed[log[j].key] = log[j].type == R_DROP ? 0 : log[j].ver;

    kvt_config c = crash_config(dir, cycle + 1);
    kvt_engine *e = open_ok(&c);
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    uint32_t present = 0;
    err[0] = 0;
    for (int i = 0; i < CK && !err[0]; i++) {
        kvt_key k = ckey(i);
        void *dst[1] = { b };
        int found = -1;
        memset(b, 0xCD, PB);
        int r = kvt_get(e, &k, 1, dst, 0, &found);
        if (r) {
            snprintf(err, errlen, "cycle %d: get of key %d after the kill: %s (%s)", cycle, i,
                     kvt_strerror(r), kvt_last_error());
            break;
        }
        /* what happened to key i since the last flush */
        bool dropped_later = false, put_later = false;
        char later[160] = "";
        size_t at = 0;
        for (size_t j = last_flush; j < n; j++) {
            if (log[j].key != i || log[j].type == R_FLUSH)
                continue;
            dropped_later |= log[j].type == R_DROP;
            put_later |= log[j].type == R_PUT;
            if (at + 16 < sizeof(later))
                at += (size_t)snprintf(later + at, sizeof(later) - at, " %s %u",
                                       names[log[j].type], log[j].ver);
        }
        /* allowed: the flushed state, or the state after any later op */
        uint32_t got = 0;
        if (found == 1) {
            if (flushed[i] && c_check(b, k, flushed[i]))
                got = flushed[i];
            for (size_t j = last_flush; j < n && !got; j++)
                if (log[j].key == i && log[j].type != R_FLUSH && log[j].type != R_DROP &&
                    c_check(b, k, log[j].ver))
                    got = log[j].ver;
            if (!got)
                snprintf(err, errlen, "cycle %d: key %d holds bytes of no version the child "
                         "wrote for it (flushed version %u; since then:%s)", cycle, i,
                         flushed[i], later[0] ? later : " nothing");
            present++;
            tot->newer += got && got != flushed[i];
        } else if (flushed[i] && !dropped_later && put_later) {
            /* test_put_overwrite_crash isolates this: counted, reported at the end */
            if (tot->put_vanished++ == 0)
                print_error("cycle %d: key %d was flushed at version %u and is gone after the "
                            "kill; since that flush:%s\n", cycle, i, flushed[i], later);
        } else if (flushed[i] && !dropped_later) {
            snprintf(err, errlen, "cycle %d: key %d was flushed at version %u and is gone "
                     "after the kill (%zu ops logged, the last flush after %zu; since then:%s)",
                     cycle, i, flushed[i], n, last_flush, later[0] ? later : " nothing");
        } else {
            tot->absent_by_drop += !flushed[i];
            tot->unflushed_drop_absent += flushed[i] && dropped_later;
        }
        cur[i] = got;
    }
    kvt_stats s = t_stats(e);
    if (!err[0] && s.pages != present)
        snprintf(err, errlen, "cycle %d: %llu pages held, %u of the child's keys present",
                 cycle, (unsigned long long)s.pages, present);
    if (!err[0] && (s.errors_corrupt || s.errors_io))
        snprintf(err, errlen, "cycle %d: errors_corrupt %llu, errors_io %llu reading back",
                 cycle, (unsigned long long)s.errors_corrupt, (unsigned long long)s.errors_io);
    kvt_close(e);
    free(b);
    tot->present += present;
    return err[0] ? -1 : 0;
}

static void test_crash_kill(void **state)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    if (getenv("KVT_CRASH_SEED"))
        seed = (unsigned)strtoul(getenv("KVT_CRASH_SEED"), NULL, 0);
    print_message("ssd crash seed %u (KVT_CRASH_SEED replays the kill times)\n", seed);
    char *dir = dir_new();
    t_force_faulty(NULL);
    uint32_t cur[CK] = { 0 };
    struct crash_totals tot = { 0 };
    struct rec *log = NULL;
    size_t cap = 0;
    char err[512] = "";
    for (int cycle = 0; cycle < CRASH_CYCLES && !err[0]; cycle++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        unsigned child_seed = (unsigned)rand_r(&seed);
        uint32_t base = (uint32_t)(cycle + 1) << 20;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            crash_child(dir, cycle, cur, base, child_seed, p[1]);
        }
        close(p[1]);
        size_t n = 0;
        /* every other cycle dies only after its first flush, so that the
         * test never passes on children killed before they did anything */
        if (cycle % 2 == 1 && crash_read(p[0], &log, &n, &cap, true) < 0)
            snprintf(err, sizeof(err), "cycle %d: no flush logged in %d s: the child hangs",
                     cycle, CHILD_ALARM);
        assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
        unsigned wait_ms = 2 + (unsigned)rand_r(&seed) % 100;
        double t0 = util_now();
        for (;;) { /* keep the pipe drained while the child runs */
            crash_read(p[0], &log, &n, &cap, false);
            long ms = (long)((util_now() - t0) * 1000);
            if (ms >= (long)wait_ms)
                break;
            struct pollfd pf = { p[0], POLLIN, 0 };
            poll(&pf, 1, (int)(wait_ms - (unsigned)ms));
        }
        kill(pid, SIGKILL); /* it may be gone already: waitpid says how it ended */
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        char why[96];
        if (!err[0] && WIFEXITED(status))
            snprintf(err, sizeof(err), "cycle %d: the child ended before the kill: %s, %s",
                     cycle, child_end(status, why, sizeof(why)),
                     crash_exit_why(WEXITSTATUS(status)));
        else if (!err[0] && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
            snprintf(err, sizeof(err), "cycle %d: the child ended before the kill: %s", cycle,
                     child_end(status, why, sizeof(why)));
        assert_int_equal(fcntl(p[0], F_SETFL, 0), 0);
        crash_read(p[0], &log, &n, &cap, false); /* what is left, to EOF */
        close(p[0]);
        if (err[0])
            break;

        unsigned fl = 0;
        for (size_t j = 0; j < n; j++)
            fl += log[j].type == R_FLUSH;
        tot.cycles++;
        tot.with_flush += fl > 0;
        tot.flushes += fl;
        tot.ops_logged += (unsigned)n - fl;
        crash_check(dir, cycle, cur, log, n, &tot, err, sizeof(err));
    }
    print_message("ssd crash: %u kills, %u after a flush (%u flushes, %u ops logged); "
                  "after the kills %u pages present (%u at a version newer than the last "
                  "flush), %u absent as flushed, %u absent by an unflushed drop, %u flushed "
                  "pages gone after an unflushed kvt_put over them\n",
                  tot.cycles, tot.with_flush, tot.flushes, tot.ops_logged, tot.present,
                  tot.newer, tot.absent_by_drop, tot.unflushed_drop_absent, tot.put_vanished);
    free(log);
    dir_free(dir);
    if (err[0])
        fail_msg("%s", err);
    assert_int_equal(tot.cycles, CRASH_CYCLES);
    assert_true(tot.with_flush >= CRASH_CYCLES / 2);
    if (tot.put_vanished)
        fail_msg("%u flushed pages vanished after a kill because kvt_put overwrote them "
                 "(see test_put_overwrite_crash)", tot.put_vanished);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uring_disabled),
        cmocka_unit_test(test_read_fault_retried_then_lost),
        cmocka_unit_test(test_get_read_fault_retried_then_lost),
        cmocka_unit_test(test_drop_during_read),
        cmocka_unit_test(test_destroy_during_queued_read),
        cmocka_unit_test(test_submit_fault_keeps_pages),
        cmocka_unit_test(test_flush_write_fault_durable),
        cmocka_unit_test(test_put_overwrite_crash),
        cmocka_unit_test(test_drop_before_any_ssd_job),
        cmocka_unit_test(test_sweep_write_eio),
        cmocka_unit_test(test_sweep_write_enospc),
        cmocka_unit_test(test_sweep_write_eio_repeat),
        cmocka_unit_test(test_sweep_read_eio),
        cmocka_unit_test(test_sweep_short_read),
        cmocka_unit_test(test_sweep_submit),
        cmocka_unit_test(test_sweep_pieces_read_eio),
        cmocka_unit_test(test_sweep_pieces_submit),
        cmocka_unit_test(test_sweep_pieces_write_eio),
        cmocka_unit_test(test_crash_kill),
    };
    /* Pages in pieces run in processes of their own (ctest
     * test_ssd_faults_pieces_*), so each stays well inside the alarm under
     * the sanitizers. */
    if (argc == 1)
        cmocka_set_skip_filter("test_sweep_pieces_*");
    alarm(280); /* a hang ends the program instead of CI */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
