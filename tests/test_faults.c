/*
 * test_faults.c — fault injection through the faulty device back-end
 * (devices/device.h) and the host back-end's failing-batch hook.
 *
 * Sweeps run one fixed workload once per N, with the N-th call of one device
 * operation failing, until the workload no longer reaches the N-th call (then
 * the fault never fired and the workload must succeed in full). The rules
 * checked at every step:
 *  - no call that returned 0 ever served wrong bytes (wrong key, stale
 *    version, torn), and no acknowledged page is reported missing;
 *  - a failed call changes nothing the caller can observe (header
 *    convention): a failed put/create stores nothing, a failed drop drops
 *    nothing, a failed acquire pins nothing;
 *  - synchronous faults (submit, copy_sync) leave the engine working: it never
 *    enters the failed state, and every acknowledged page reads back exact;
 *  - an asynchronous fault (a batch failing on the copy thread) puts the
 *    engine in the failed state: from the first KVT_EDEVICE/KVT_EFAILED on,
 *    calls fail with one of those two, stats still work, close works.
 */
#include <errno.h>
#include <unistd.h>

#include "helpers.h"
#include "lab/lab.h"
#include "api/api.h"

#define PB ((size_t)T_PAGE)
#define MAX_SWEEP 400

/* ---------------------------------------------------------------- model */

/* Per key, the set of states the engine may legitimately be in: bit 0 =
 * absent, bit v+1 = version v. One bit once acknowledged; more after a call
 * whose effect cannot be known (create succeeded, release failed). */
#define ABSENT 1ull
#define VBIT(v) (1ull << ((v) + 1))

#define NK 9 /* keys 0..5 are created, 6..8 are put */

enum mode { M_SUBMIT, M_SUBMIT_REPEAT, M_ASYNC, M_COPY };

struct wl {
    kvt_engine *e;
    enum mode mode;
    kvt_key key[NK];
    uint64_t mask[NK];
    uint32_t next_v[NK];
    unsigned calls;        /* API calls made */
    unsigned errors;       /* calls that failed (not counting legit model answers) */
    unsigned violations;
    char first[384];
    char first_err[160];   /* the first failed call, for messages */
    int failed_seen;       /* ASYNC: a call returned KVT_EDEVICE/KVT_EFAILED */
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

static int is_failed_code(int r)
{
    return r == KVT_EDEVICE || r == KVT_EFAILED;
}

/* A call that touches pages returned r. strict: the call must fail once the
 * engine is failed. Returns r. */
static int account(struct wl *w, const char *what, int r, int strict)
{
    w->calls++;
    if (w->mode == M_ASYNC && w->failed_seen && strict && !is_failed_code(r))
        violation(w, "%s returned %d (%s) after the engine failed", what, r, kvt_strerror(r));
    if (r == 0)
        return 0;
    if (w->errors++ == 0)
        snprintf(w->first_err, sizeof(w->first_err), "%s: %s", what, kvt_strerror(r));
    if (w->mode == M_ASYNC) {
        if (is_failed_code(r))
            w->failed_seen = 1;
        else
            violation(w, "%s returned %d (%s): only a device error was injected", what, r,
                      kvt_strerror(r));
    } else if (is_failed_code(r)) {
        violation(w, "%s returned %s: a synchronous fault must not fail the engine", what,
                  kvt_strerror(r));
    }
    return r;
}

/* p holds a version allowed for key i: collapse the model to it. */
static void verify(struct wl *w, int i, const void *p, const char *what)
{
    for (uint32_t v = 0; v < 62; v++)
        if ((w->mask[i] & VBIT(v)) && t_check(p, PB, w->key[i], v)) {
            w->mask[i] = VBIT(v);
            return;
        }
    violation(w, "%s of key %d served wrong bytes (allowed mask %#llx)", what, i,
              (unsigned long long)w->mask[i]);
}

static void saw_missing(struct wl *w, int i, const char *what)
{
    if (!(w->mask[i] & ABSENT))
        violation(w, "%s: acknowledged key %d reported missing (mask %#llx)", what, i,
                  (unsigned long long)w->mask[i]);
    else
        w->mask[i] = ABSENT;
}

/* ---------------------------------------------------------------- ops */

static void op_create(struct wl *w, int i)
{
    uint32_t v = w->next_v[i]++;
    void *p = NULL;
    int r = kvt_create(w->e, w->key[i], &p);
    if (r == -EEXIST && !(w->mask[i] & ~ABSENT) ) {
        violation(w, "create of absent key %d: -EEXIST", i);
        return;
    }
    if (r == -EEXIST) { /* a drop before it legitimately failed */
        w->calls++;
        return;
    }
    if (account(w, "create", r, 1))
        return;
    if (!(w->mask[i] & ABSENT))
        violation(w, "create of existing key %d succeeded", i);
    t_fill(p, PB, w->key[i], v);
    r = account(w, "release after create", kvt_release(w->e, &w->key[i], 1, 1), 0);
    w->mask[i] = r ? (w->mask[i] | VBIT(v)) : VBIT(v);
}

static void op_acquire(struct wl *w, int i, int rewrite)
{
    void *p = NULL;
    int r = kvt_acquire(w->e, &w->key[i], 1, &p);
    if (r == KVT_ENOTFOUND) {
        w->calls++;
        saw_missing(w, i, "acquire");
        return;
    }
    if (account(w, "acquire", r, 1))
        return;
    if (w->mask[i] == ABSENT)
        violation(w, "acquire of absent key %d succeeded", i);
    verify(w, i, p, "acquire");
    if (!rewrite) {
        account(w, "release clean", kvt_release(w->e, &w->key[i], 1, 0), 0);
        return;
    }
    uint32_t v = w->next_v[i]++;
    t_fill(p, PB, w->key[i], v);
    r = account(w, "release dirty", kvt_release(w->e, &w->key[i], 1, 1), 0);
    w->mask[i] = r ? (w->mask[i] | VBIT(v)) : VBIT(v);
}

static void op_put(struct wl *w, int i)
{
    uint32_t v = w->next_v[i]++;
    t_fill(w->buf[i], PB, w->key[i], v);
    const void *src[1] = { w->buf[i] };
    if (account(w, "put", kvt_put(w->e, &w->key[i], 1, src, 0), 1) == 0)
        w->mask[i] = VBIT(v);
}

/* kvt_get of all keys. */
static void op_get_all(struct wl *w, const char *what)
{
    int found[NK];
    for (int i = 0; i < NK; i++) {
        found[i] = -1;
        memset(w->buf[i], 0xCD, PB);
    }
    int r = kvt_get(w->e, w->key, NK, w->buf, 0, found);
    if (account(w, what, r, 1)) {
        /* an error claims nothing found (and nothing served) */
        for (int i = 0; i < NK; i++)
            if (found[i] == 1) {
                if (w->mode == M_COPY)
                    violation(w, "%s failed (%s) but claims key %d found", what,
                              kvt_strerror(r), i);
                verify(w, i, w->buf[i], what);
            }
        return;
    }
    for (int i = 0; i < NK; i++) {
        if (found[i] == 1)
            verify(w, i, w->buf[i], what);
        else if (found[i] == 0)
            saw_missing(w, i, what);
        else
            violation(w, "%s: found[%d] = %d", what, i, found[i]);
    }
}

static void op_async(struct wl *w, int i, int j)
{
    kvt_key ks[2] = { w->key[i], w->key[j] };
    void *d[2] = { NULL, NULL };
    kvt_ticket t = 0;
    int r = kvt_acquire_async(w->e, ks, 2, d, &t);
    if (r == KVT_ENOTFOUND) {
        w->calls++;
        if (!(w->mask[i] & ABSENT) && !(w->mask[j] & ABSENT))
            violation(w, "acquire_async: acknowledged keys %d/%d reported missing", i, j);
        return;
    }
    if (account(w, "acquire_async", r, 1))
        return;
    if (account(w, "wait", kvt_wait(w->e, t), 1))
        return; /* the ticket's pins are dropped */
    verify(w, i, d[0], "async acquire");
    verify(w, j, d[1], "async acquire");
    account(w, "release async", kvt_release(w->e, ks, 2, 0), 0);
}

static void op_drop(struct wl *w, int i)
{
    int r = kvt_drop(w->e, &w->key[i], 1);
    if (r == -EBUSY) { /* allowed while a copy of it is in flight: nothing dropped */
        w->calls++;
        return;
    }
    if (account(w, "drop", r, 0) == 0)
        w->mask[i] = ABSENT;
}

/* The fixed workload: HBM of 3 slots, DRAM of 12, 9 keys, every kind of move. */
static void workload(struct wl *w)
{
    for (int i = 0; i < 6; i++)
        op_create(w, i);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 6; i++)
            op_acquire(w, i, (i + round) % 2 == 0);
    for (int i = 6; i < 9; i++)
        op_put(w, i);
    op_get_all(w, "get all (1)");
    op_acquire(w, 6, 0);
    op_put(w, 6); /* over a clean HBM copy */
    op_async(w, 0, 7);
    account(w, "flush", kvt_flush(w->e), 1);
    op_drop(w, 5);
    op_create(w, 5);
    for (int i = 1; i <= 3; i++)
        op_acquire(w, i, 1);
    op_put(w, 2); /* over a dirty HBM copy */
    op_get_all(w, "get all (2)");
}

static void wl_init(struct wl *w, kvt_engine *e, enum mode m)
{
    memset(w, 0, sizeof(*w));
    w->e = e;
    w->mode = m;
    for (int i = 0; i < NK; i++) {
        w->key[i] = i < 6 ? t_key(1, 0, i) : t_key(2, KVT_ALL_LAYERS, i);
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

static kvt_config fault_config(void)
{
    return t_config(PB, 3, 12); /* DRAM holds all 9 keys: flush can succeed */
}

/* Opens an engine over the faulty back-end with its own plan (which the
 * caller keeps until the engine is closed). */
static kvt_engine *open_faulty(struct kvt_device_faulty *plan, const struct kvt_fault *f)
{
    kvt_device_faulty_init(plan, &kvt_device_host_ops, f);
    kvt_config c = fault_config();
    kvt_engine *e = NULL;
    struct kvt_test_hooks h = { .device = plan };
    int r = kvt_open_with_hooks(&c, &h, &e);
    if (r)
        print_error("kvt_open_with_hooks: %s (%s)\n", kvt_strerror(r), kvt_last_error());
    assert_int_equal(r, 0);
    assert_non_null(e);
    return e;
}

struct sweep_totals {
    unsigned runs, fired, runs_with_errors, surfaced;
};

static void report(const char *name, const struct sweep_totals *t)
{
    print_message("%s: %u runs, fault fired in %u, API errors in %u, failure surfaced in %u\n",
                  name, t->runs, t->fired, t->runs_with_errors, t->surfaced);
}

/* Runs the workload with the N-th call of op failing, for N = 1, 2, ... until
 * the workload no longer reaches the N-th call. */
static void sweep(enum mode m, enum kvt_fault_op op, int err, int repeat, struct sweep_totals *tot)
{
    memset(tot, 0, sizeof(*tot));
    for (uint64_t n = 1;; n++) {
        if (n > MAX_SWEEP)
            fail_msg("sweep did not end: the workload keeps making device calls");
        struct kvt_fault f = { op, n, err, repeat };
        struct kvt_device_faulty plan;
        kvt_engine *e = open_faulty(&plan, &f);
        struct wl w;
        wl_init(&w, e, m);
        workload(&w);

        if (m == M_ASYNC) {
            /* every batch has completed or failed once flush returns; a
             * failure must have surfaced by the end of the final get */
            account(&w, "final flush", kvt_flush(e), 1);
            if (!w.failed_seen)
                op_get_all(&w, "final get");
            if (kvt_device_faulty_count(&plan, op) >= n) {
                if (!w.failed_seen)
                    violation(&w, "batch %llu failed but no call reported it",
                              (unsigned long long)n);
                /* the failed state persists: nothing is served any more */
                op_get_all(&w, "get after failure");
                kvt_key k = w.key[0];
                void *p = NULL;
                account(&w, "acquire after failure", kvt_acquire(e, &k, 1, &p), 1);
                kvt_key nk = t_key(77, 0, 0);
                account(&w, "create after failure", kvt_create(e, nk, &p), 1);
                assert_true(t_stats(e).errors_device >= 1);
            }
        } else {
            /* the end state: every acknowledged page reads back exact */
            op_get_all(&w, "final get");
            if (m != M_SUBMIT_REPEAT) {
                /* the engine still works: a new page round-trips */
                kvt_key nk = t_key(77, 0, 0);
                void *p = NULL;
                if (account(&w, "create after fault", kvt_create(e, nk, &p), 1) == 0) {
                    t_fill(p, PB, nk, 9);
                    account(&w, "release", kvt_release(e, &nk, 1, 1), 0);
                    void *dst[1] = { w.buf[0] };
                    int found = 0;
                    if (account(&w, "get new page", kvt_get(e, &nk, 1, dst, 0, &found), 1) == 0 &&
                        (found != 1 || !t_check(w.buf[0], PB, nk, 9)))
                        violation(&w, "a page created after the fault reads back wrong");
                }
            }
        }
        int fired = kvt_device_faulty_count(&plan, op) >= n;
        kvt_stats s;
        assert_int_equal(kvt_get_stats(e, &s), 0); /* works in every state */
        assert_true(s.pages <= NK + 1);
        kvt_close(e);
        wl_free(&w);

        tot->runs++;
        tot->fired += fired;
        tot->runs_with_errors += w.errors > 0;
        tot->surfaced += w.failed_seen;
        if (w.violations)
            print_error("N=%llu (fault %s): %u violations; first: %s\n", (unsigned long long)n,
                        fired ? "fired" : "did not fire", w.violations, w.first);
        assert_int_equal(w.violations, 0);
        if (!fired) {
            if (w.errors)
                print_error("N=%llu: the fault never fired, yet %u calls failed; first: %s\n",
                            (unsigned long long)n, w.errors, w.first_err);
            assert_int_equal(w.errors, 0); /* no fault: the workload succeeds in full */
            break;
        }
    }
    assert_true(tot->fired >= 1);
    assert_int_equal(tot->fired + 1, tot->runs); /* fired each time, then once did not */
}

/* ---------------------------------------------------------------- sweeps */

static void test_submit_fault_sweep(void **state)
{
    struct sweep_totals t;
    sweep(M_SUBMIT, KVT_FAULT_SUBMIT, -ENOMEM, 0, &t);
    report("submit", &t);
    assert_true(t.fired >= 10);           /* the workload makes many copies */
    assert_true(t.runs_with_errors >= 1); /* and some submit failure reached a caller */
}

static void test_submit_fault_repeat_sweep(void **state)
{
    struct sweep_totals t;
    sweep(M_SUBMIT_REPEAT, KVT_FAULT_SUBMIT, -ENOMEM, 1, &t);
    report("submit (repeat)", &t);
    assert_true(t.runs_with_errors >= 1);
}

static void test_async_fault_sweep(void **state)
{
    struct sweep_totals t;
    sweep(M_ASYNC, KVT_FAULT_ASYNC, 0, 0, &t);
    report("async", &t);
    assert_true(t.fired >= 10);
    assert_int_equal(t.surfaced, t.fired); /* every fired fault failed the engine */
}

static void test_copy_sync_fault_sweep(void **state)
{
    struct sweep_totals t;
    sweep(M_COPY, KVT_FAULT_COPY_SYNC, -EIO, 0, &t);
    report("copy_sync", &t);
    assert_true(t.fired >= 5);
    assert_int_equal(t.runs_with_errors, t.fired); /* put/get report every copy failure */
}

/* ------------------------------------------------------- open-time faults */

static void alloc_sweep(enum kvt_fault_op op, int err)
{
    int want = err ? err : KVT_EDEVICE;
    unsigned fired = 0;
    for (uint64_t n = 1;; n++) {
        assert_true(n <= 16);
        struct kvt_fault f = { op, n, err, 0 };
        struct kvt_device_faulty plan;
        kvt_device_faulty_init(&plan, &kvt_device_host_ops, &f);
        kvt_config c = fault_config();
        kvt_engine *e = (kvt_engine *)(uintptr_t)0x1;
        struct kvt_test_hooks h = { .device = &plan };
        int r = kvt_open_with_hooks(&c, &h, &e);
        if (kvt_device_faulty_count(&plan, op) >= n) {
            fired++;
            if (r != want)
                print_error("alloc fault %d at call %llu: open returned %d (%s)\n", (int)op,
                            (unsigned long long)n, r, kvt_strerror(r));
            assert_int_equal(r, want);
            assert_null(e); /* and nothing leaked: the sanitizer build checks */
            continue;
        }
        assert_int_equal(r, 0);
        assert_non_null(e);
        kvt_key k = t_key(1, 0, 0);
        void *p = NULL;
        assert_int_equal(kvt_create(e, k, &p), 0);
        t_fill(p, PB, k, 1);
        assert_int_equal(kvt_release(e, &k, 1, 1), 0);
        kvt_close(e);
        break;
    }
    assert_true(fired >= 1);
}

static void test_open_hbm_alloc_fault(void **state)
{
    alloc_sweep(KVT_FAULT_HBM_ALLOC, -ENOMEM);
    alloc_sweep(KVT_FAULT_HBM_ALLOC, 0);
}

static void test_open_host_alloc_fault(void **state)
{
    alloc_sweep(KVT_FAULT_HOST_ALLOC, -ENOMEM);
    alloc_sweep(KVT_FAULT_HOST_ALLOC, 0);
}

/* ---------------------------------------------- targeted, deterministic */

/* A put whose copy fails stores nothing; a get whose copy fails claims
 * nothing; both work again afterwards. */
static void test_copy_sync_fault_put_get(void **state)
{
    struct kvt_fault f = { KVT_FAULT_COPY_SYNC, 1, -EIO, 0 };
    struct kvt_device_faulty plan;
    kvt_engine *e = open_faulty(&plan, &f);
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    kvt_key k = t_key(3, 0, 0);
    t_fill(b, PB, k, 1);
    const void *src[1] = { b };
    int r = kvt_put(e, &k, 1, src, 0);
    assert_true(r < 0);
    assert_false(is_failed_code(r));
    assert_int_equal(kvt_device_faulty_count(&plan, KVT_FAULT_COPY_SYNC), 1);
    assert_int_equal(kvt_exists(e, &k, 1, NULL), 0);
    assert_int_equal(t_stats(e).pages, 0);
    assert_int_equal(kvt_put(e, &k, 1, src, 0), 0);

    /* fail the next copy: a get */
    f.nth = 1;
    kvt_device_faulty_set(&plan, &f);
    memset(b, 0, PB);
    void *dst[1] = { b };
    int found = -1;
    r = kvt_get(e, &k, 1, dst, 0, &found);
    assert_true(r < 0);
    assert_false(is_failed_code(r));
    assert_int_not_equal(found, 1);
    assert_int_equal(kvt_device_faulty_count(&plan, KVT_FAULT_COPY_SYNC), 1);
    found = -1;
    assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
    assert_int_equal(found, 1);
    assert_true(t_check(b, PB, k, 1));
    free(b);
    kvt_close(e);
}

/* Two engines in one process, each with its own plan: a fault armed in one
 * never fires in the other, and each counts only its own calls. */
static void test_two_engines_two_plans(void **state)
{
    struct kvt_fault fail = { KVT_FAULT_COPY_SYNC, 1, -EIO, 1 };
    struct kvt_device_faulty pa, pb;
    kvt_engine *a = open_faulty(&pa, &fail);
    kvt_engine *b = open_faulty(&pb, NULL);
    void *buf = aligned_alloc(4096, PB);
    assert_non_null(buf);
    kvt_key k = t_key(6, 0, 0);
    t_fill(buf, PB, k, 1);
    const void *src[1] = { buf };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kvt_put(b, &k, 1, src, 0), 0);
        assert_true(kvt_put(a, &k, 1, src, 0) < 0);
    }
    assert_int_equal(kvt_exists(a, &k, 1, NULL), 0);
    assert_int_equal(kvt_exists(b, &k, 1, NULL), 1);
    assert_int_equal(kvt_device_faulty_count(&pa, KVT_FAULT_COPY_SYNC), 3);
    assert_int_equal(kvt_device_faulty_count(&pb, KVT_FAULT_COPY_SYNC), 3);
    kvt_device_faulty_set(&pa, NULL); /* disarmed: a works again, b unaffected */
    assert_int_equal(kvt_put(a, &k, 1, src, 0), 0);
    memset(buf, 0, PB);
    void *dst[1] = { buf };
    int found = -1;
    assert_int_equal(kvt_get(a, &k, 1, dst, 0, &found), 0);
    assert_int_equal(found, 1);
    assert_true(t_check(buf, PB, k, 1));
    free(buf);
    kvt_close(a);
    kvt_close(b);
}

/* A batch failing on the copy thread under an async acquire: kvt_wait reports
 * it and drops the pins; the engine is failed from then on, stats and close
 * still work, and nothing is served. */
static void test_host_fail_batch_async_acquire(void **state)
{
    kvt_config c = t_config(PB, 4, 8);
    c.device = KVT_DEVICE_HOST; /* the host back-end's own failure hook */
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    kvt_key k[2] = { t_key(4, 0, 0), t_key(4, 0, 1) };
    for (int i = 0; i < 2; i++) {
        t_fill(b, PB, k[i], 1);
        const void *src[1] = { b };
        assert_int_equal(kvt_put(e, &k[i], 1, src, 0), 0); /* clean, in DRAM: mover idle */
    }
    kvt_device_host_fail_batch(kvt_engine_device_priv(e), 1);

    void *d[2] = { NULL, NULL };
    kvt_ticket t = 0;
    int r = kvt_acquire_async(e, k, 2, d, &t);
    if (r == 0) {
        r = kvt_wait(e, t);
        assert_true(is_failed_code(r));
        assert_int_equal(kvt_wait(e, t), -EINVAL); /* consumed */
    } else {
        assert_true(is_failed_code(r));
    }
    kvt_stats s = t_stats(e);
    assert_int_equal(s.pinned_pages, 0); /* as if never acquired */
    assert_true(s.errors_device >= 1);

    assert_true(is_failed_code(kvt_acquire(e, k, 1, d)));
    assert_true(is_failed_code(kvt_acquire_async(e, k, 1, d, &t)));
    memset(b, 0, PB);
    void *dst[1] = { b };
    int found = -1;
    assert_true(is_failed_code(kvt_get(e, k, 1, dst, 0, &found)));
    assert_int_not_equal(found, 1);
    t_fill(b, PB, k[0], 2);
    const void *src[1] = { b };
    assert_true(is_failed_code(kvt_put(e, k, 1, src, 0)));
    void *p = NULL;
    kvt_key nk = t_key(4, 0, 2);
    assert_true(is_failed_code(kvt_create(e, nk, &p)));
    assert_true(is_failed_code(kvt_flush(e)));
    s = t_stats(e);
    assert_int_equal(s.pinned_pages, 0);
    free(b);
    kvt_close(e);
}

/* Dirty pages and a failing write-back: flush reports the failure, the engine
 * is failed, close frees everything (the sanitizer build checks leaks). */
static void test_host_fail_batch_writeback(void **state)
{
    kvt_config c = t_config(PB, 4, 8);
    c.device = KVT_DEVICE_HOST; /* the host back-end's own failure hook */
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open(&c, &e), 0);
    kvt_device_host_fail_batch(kvt_engine_device_priv(e), 1);
    for (uint32_t i = 0; i < 4; i++) {
        kvt_key k = t_key(5, 0, i);
        void *p = NULL;
        int r = kvt_create(e, k, &p);
        if (r) { /* the mover's write-back may already have failed the engine */
            assert_true(is_failed_code(r));
            break;
        }
        t_fill(p, PB, k, 1);
        r = kvt_release(e, &k, 1, 1);
        assert_true(r == 0 || is_failed_code(r));
    }
    assert_true(is_failed_code(kvt_flush(e)));
    kvt_stats s = t_stats(e);
    assert_true(s.errors_device >= 1);
    kvt_key k0 = t_key(5, 0, 0);
    void *d = NULL;
    assert_true(is_failed_code(kvt_acquire(e, &k0, 1, &d)));
    kvt_close(e);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_hbm_alloc_fault),
        cmocka_unit_test(test_open_host_alloc_fault),
        cmocka_unit_test(test_copy_sync_fault_put_get),
        cmocka_unit_test(test_two_engines_two_plans),
        cmocka_unit_test(test_host_fail_batch_async_acquire),
        cmocka_unit_test(test_host_fail_batch_writeback),
        cmocka_unit_test(test_submit_fault_sweep),
        cmocka_unit_test(test_submit_fault_repeat_sweep),
        cmocka_unit_test(test_async_fault_sweep),
        cmocka_unit_test(test_copy_sync_fault_sweep),
    };
    alarm(240); /* a hang ends the program instead of CI */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
