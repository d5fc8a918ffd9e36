/*
 * crashtest.c — `kvtier crashtest`: the crash loop. A writer child with
 * persist=1 puts, overwrites, drops, flushes and reads back pages whose
 * bytes derive from (key, version); the parent SIGKILLs it at a random
 * moment, reopens the directory and checks every key against what the child
 * logged; then the next child starts from what the check found.
 *
 * The child logs each operation through a pipe before it makes it (an
 * intent log) and each kvt_flush after it returns 0. After the kill, with
 * F the state the last logged flush made durable:
 *  - a key F held is present, exact, at F's version or at a version the
 *    child wrote after that flush; absent only if a drop came after it
 *    (else "lost");
 *  - a key F did not hold (never written, or dropped and then flushed) is
 *    absent or at a version written after that flush: a flushed drop never
 *    comes back;
 *  - any other bytes (torn, stale, another key's), a failed read, or a page
 *    counted corrupt is "wrong"; so is a child that saw wrong bytes itself.
 * With --full (child.c), filler threads keep the engine full meanwhile;
 * every filler page found must be whole (its own key's, at some version),
 * and with --evict a flushed key may also be absent, the engine having
 * dropped it for room ("evicted"), but never older.
 * The first lost or wrong key stops the loop, keeps the directory and says
 * what happened to that key since the flush.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "store/spill_dir.h"
#include "tools/cli.h"
#include "tools/crashtest/crashtest.h"
#include "tools/fsck/spill.h"
#include "tools/util/json.h"

struct totals {
    uint64_t cycles, after_flush, flushes, ops, present, newer, absent, evicted, lost, wrong;
    uint64_t fillers;   /* filler pages found whole after the kills */
};

/* ------------------------------------------------------------- the log */

struct ct_log {
    struct rec *r;
    size_t n, cap;
};

/* Reads records: with until_flush, until one flush is read (1), EOF (0) or
 * CT_CHILD_ALARM seconds of silence (-1); else what is there now (a
 * non-blocking fd) or to EOF (a blocking one), returning 0. -ENOMEM. */
static int ct_read(int fd, struct ct_log *lg, bool until_flush)
{
    for (;;) {
        if (lg->n == lg->cap) {
            size_t nc = lg->cap ? lg->cap * 2 : 4096;
            struct rec *nr = realloc(lg->r, nc * sizeof(*nr));
            if (!nr)
                return -ENOMEM;
            lg->r = nr;
            lg->cap = nc;
        }
        if (until_flush) {
            struct pollfd pf = { fd, POLLIN, 0 };
            if (poll(&pf, 1, CT_CHILD_ALARM * 1000) == 0)
                return -1;
        }
        ssize_t got = read(fd, &lg->r[lg->n], sizeof(struct rec));
        if (got != (ssize_t)sizeof(struct rec))
            return 0;   /* EOF, nothing now, or a record cut by the kill: not made */
        if (lg->r[lg->n++].type == R_FLUSH && until_flush)
            return 1;
    }
}

/* ------------------------------------------------------------- the check */

struct ct_check {
    uint32_t *cur;              /* in: the state before the cycle; out: what the check found */
    const struct ct_log *lg;
    size_t last_flush;          /* records before the last flush */
    uint32_t *flushed;          /* the state that flush made durable */
    char err[640];
};

/* What happened to key i since the last flush, for messages. */
static void ct_history(const struct ct_check *c, unsigned i, char *buf, size_t len)
{
    static const char *const names[] = { "", "put", "write", "drop", "flush" };
    size_t at = 0;
    buf[0] = 0;
    for (size_t j = c->last_flush; j < c->lg->n && at + 24 < len; j++)
        if (c->lg->r[j].key == i && c->lg->r[j].type != R_FLUSH)
            at += (size_t)snprintf(buf + at, len - at, " %s %" PRIu32, names[c->lg->r[j].type],
                                   c->lg->r[j].ver);
    if (!buf[0])
        snprintf(buf, len, " nothing");
}

/* The version of key i whose bytes b holds among the allowed ones, or 0. */
static uint32_t ct_allowed(const struct ct_check *c, unsigned i, const void *b, bool *dropped)
{
    uint32_t got = b && c->flushed[i] && ct_check(b, i, c->flushed[i]) ? c->flushed[i] : 0;
    *dropped = false;
    for (size_t j = c->last_flush; j < c->lg->n; j++) {
        const struct rec *r = &c->lg->r[j];
        if (r->key != i || r->type == R_FLUSH)
            continue;
        *dropped |= r->type == R_DROP;
        if (!got && r->type != R_DROP && b && ct_check(b, i, r->ver))
            got = r->ver;
    }
    return got;
}

/* The fillers' keys: each present one whole. Returns how many are present;
 * sets c->err at the first that is not. */
static uint64_t ct_verify_fillers(const struct ct_opts *o, uint64_t cycle, kvt_engine *e,
                                  void *b, struct ct_check *c, struct totals *t)
{
    uint64_t present = 0;
    for (unsigned j = 0; j < ct_filler_count(o) && !c->err[0]; j++) {
        kvt_key k = ct_filler_key(j);
        void *dst[1] = { b };
        int found = -1, r = kvt_get(e, &k, 1, dst, 0, &found);
        if (r || (found == 1 && !ct_filler_ok(b, j))) {
            t->wrong++;
            snprintf(c->err, sizeof(c->err), "cycle %" PRIu64 ": filler key %u %s", cycle, j,
                     r ? "cannot be read back" : "holds bytes that are not its own");
        }
        present += found == 1;
    }
    t->fillers += present;
    return present;
}

/* Reopens the directory and checks every key. 0, or -1 with c->err. */
static int ct_verify(const struct ct_opts *o, uint64_t cycle, struct ct_check *c,
                     struct totals *t)
{
    kvt_config cfg = ct_config(o, cycle + 1);
    kvt_engine *e = NULL;
    int r = kvt_open(&cfg, &e);
    if (r) {
        t->wrong++;
        snprintf(c->err, sizeof(c->err), "cycle %" PRIu64 ": reopen failed: %s (%s)", cycle,
                 kvt_strerror(r), kvt_last_error());
        return -1;
    }
    void *b = aligned_alloc(4096, CT_PB);
    uint64_t present = 0;
    for (unsigned i = 0; b && i < o->keys && !c->err[0]; i++) {
        kvt_key k = ct_key(i);
        void *dst[1] = { b };
        int found = -1;
        bool dropped = false;
        char hist[200];
        r = kvt_get(e, &k, 1, dst, 0, &found);
        uint32_t got = r == 0 && found == 1 ? ct_allowed(c, i, b, &dropped) : 0;
        if (r == 0 && found != 1)
            ct_allowed(c, i, NULL, &dropped);
        ct_history(c, i, hist, sizeof(hist));
        if (r || (found == 1 && !got)) {
            t->wrong++;
            snprintf(c->err, sizeof(c->err), "cycle %" PRIu64 ": key %u %s (flushed version %"
                     PRIu32 "; since that flush:%s)", cycle, i,
                     r ? "cannot be read back" : "holds bytes of no version it may hold",
                     c->flushed[i], hist);
        } else if (found != 1 && c->flushed[i] && !dropped && o->evict) {
            t->evicted++;
        } else if (found != 1 && c->flushed[i] && !dropped) {
            t->lost++;
            snprintf(c->err, sizeof(c->err), "cycle %" PRIu64 ": key %u was flushed at version %"
                     PRIu32 " and is gone (since that flush:%s)", cycle, i, c->flushed[i], hist);
        }
        present += found == 1;
        t->newer += got && got != c->flushed[i];
        t->absent += found == 0;
        c->cur[i] = got;
    }
    t->present += present;
    if (b && !c->err[0])
        present += ct_verify_fillers(o, cycle, e, b, c, t);
    kvt_stats s;
    if (!c->err[0] && kvt_get_stats(e, &s) == 0 &&
        (s.pages != present || s.errors_corrupt || s.errors_io)) {
        t->wrong++;
        snprintf(c->err, sizeof(c->err), "cycle %" PRIu64 ": %" PRIu64 " pages held for %"
                 PRIu64 " keys present (checked and fillers), errors_corrupt %" PRIu64 ", errors_io %" PRIu64, cycle,
                 s.pages, present, s.errors_corrupt, s.errors_io);
    }
    if (!b && !c->err[0])
        snprintf(c->err, sizeof(c->err), "out of memory");
    free(b);
    kvt_close(e);
    return c->err[0] ? -1 : 0;
}

/* The durable state: the state before the cycle with every record before
 * the last flush applied. */
static void ct_flushed(struct ct_check *c, uint64_t keys)
{
    c->last_flush = 0;
    for (size_t j = 0; j < c->lg->n; j++)
        if (c->lg->r[j].type == R_FLUSH)
            c->last_flush = j;
    memcpy(c->flushed, c->cur, keys * sizeof(*c->cur));
    for (size_t j = 0; j < c->last_flush; j++) {
        const struct rec *r = &c->lg->r[j];
        if (r->type != R_FLUSH && r->key < keys)
            c->flushed[r->key] = r->type == R_DROP ? 0 : r->ver;
    }
}

/* ------------------------------------------------------------- one cycle */

static void ct_sleep_ms(unsigned ms, int fd, struct ct_log *lg)
{
    double t0 = util_now();
    for (;;) {
        ct_read(fd, lg, false);   /* keep the pipe drained while the child runs */
        long ms_gone = (long)((util_now() - t0) * 1000);
        if (ms_gone >= (long)ms)
            return;
        struct pollfd pf = { fd, POLLIN, 0 };
        poll(&pf, 1, (int)(ms - (unsigned)ms_gone));
    }
}

/* Runs the child of one cycle and kills it. 0, or -1 with err. */
static int ct_run_child(const struct ct_opts *o, uint64_t cycle, const uint32_t *cur,
                        unsigned *seed, struct ct_log *lg, char *err, size_t errlen)
{
    int p[2];
    if (pipe(p) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    unsigned child_seed = (unsigned)rand_r(seed);
    uint32_t base = (uint32_t)((cycle + 1) % 4000) << 20;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        ct_child(o, cycle, cur, base, child_seed, p[1]);
    }
    close(p[1]);
    lg->n = 0;
    /* every other cycle dies only after a flush: the loop never passes on
     * children killed before they did anything */
    if (cycle % 2 == 1 && ct_read(p[0], lg, true) < 0)
        snprintf(err, errlen, "cycle %" PRIu64 ": no flush in %d s: the child hangs", cycle,
                 CT_CHILD_ALARM);
    (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
    if (!err[0])
        ct_sleep_ms(1 + (unsigned)rand_r(seed) % (unsigned)o->max_ms, p[0], lg);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    (void)fcntl(p[0], F_SETFL, 0);
    ct_read(p[0], lg, false);   /* what is left, to EOF */
    close(p[0]);
    if (!err[0] && WIFEXITED(status))
        snprintf(err, errlen, "cycle %" PRIu64 ": the child ended before the kill: exit %d, %s",
                 cycle, WEXITSTATUS(status), ct_exit_why(WEXITSTATUS(status)));
    else if (!err[0] && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
        snprintf(err, errlen, "cycle %" PRIu64 ": the child ended before the kill: signal %d%s",
                 cycle, WIFSIGNALED(status) ? WTERMSIG(status) : -1,
                 WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (it hung)" : "");
    return err[0] ? -1 : 0;
}

/* ------------------------------------------------------------- the loop */

static void ct_progress(const struct ct_opts *o, const struct totals *t, double t0, bool tty,
                        double *last, bool done)
{
    static uint64_t shown = UINT64_MAX;   /* the count last printed: the end says it once */
    double now = util_now();
    if (!o->progress || (!done && now - *last < (tty ? 0.2 : 10.0)) ||
        (done && !tty && shown == t->cycles))
        return;
    *last = now;
    shown = t->cycles;
    fprintf(stderr, "%scycle %" PRIu64 "/%" PRIu64 ", %.0f s, lost %" PRIu64 ", wrong %" PRIu64
            "%s", tty ? "\r" : "", t->cycles, o->cycles, now - t0, t->lost, t->wrong,
            tty && !done ? "" : "\n");
}

static int ct_loop(const struct ct_opts *o, struct totals *t, char *err, size_t errlen)
{
    static uint32_t cur[CT_MAX_KEYS], flushed[CT_MAX_KEYS];
    struct ct_log lg = { 0 };
    unsigned seed = (unsigned)o->seed;
    bool tty = isatty(STDERR_FILENO);
    double t0 = util_now(), last = 0;
    int rc = 0;
    for (uint64_t cycle = 0; cycle < o->cycles && !rc; cycle++) {
        if ((rc = ct_run_child(o, cycle, cur, &seed, &lg, err, errlen)) != 0) {
            t->wrong += strstr(err, "wrong") != NULL;
            break;
        }
        struct ct_check c = { .cur = cur, .lg = &lg, .flushed = flushed };
        ct_flushed(&c, o->keys);
        for (size_t j = 0; j < lg.n; j++) {
            t->flushes += lg.r[j].type == R_FLUSH;
            t->ops += lg.r[j].type != R_FLUSH;
        }
        t->after_flush += c.last_flush > 0 || (lg.n && lg.r[0].type == R_FLUSH);
        t->cycles++;
        if ((rc = ct_verify(o, cycle, &c, t)) != 0)
            snprintf(err, errlen, "%s", c.err);
        ct_progress(o, t, t0, tty, &last, false);
    }
    ct_progress(o, t, t0, tty, &last, true);
    free(lg.r);
    return rc;
}

/* ------------------------------------------------------------- options */

static void ct_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier crashtest [--cycles N] [--seed S] [--dir DIR] [--keys K]\n"
            "                        [--full [--threads T] [--evict]] [--max-ms MS]\n"
            "                        [--progress] [--json]\n"
            "\n"
            "The crash loop: a writer with persist=1 puts, overwrites, drops and flushes\n"
            "pages derived from (key, version) and is killed with SIGKILL at a random\n"
            "moment; the directory is reopened and every key checked: flushed versions\n"
            "present and exact, flushed drops not undone, nothing else. Then again.\n"
            "\n"
            "  --cycles N    kill and check N times (default 100)\n"
            "  --seed S      the kill times and operations (default: from the clock; printed)\n"
            "  --dir DIR     the spill directory: new or empty, kept at the end (default: a new\n"
            "                one under $TMPDIR, removed when every cycle passed)\n"
            "  --keys K      keys the writer uses, 1..%d (default 64)\n"
            "  --full        the engine full: T filler threads put, drop and read %d keys\n"
            "                each of their own meanwhile, on an SSD of half the keys in use;\n"
            "                the policy alternates lru and prefix\n"
            "  --threads T   filler threads with --full, 1..%d (default 3)\n"
            "  --evict       with --full: a cache (KVT_FLAG_EVICT), which drops pages for\n"
            "                room; a flushed key may then be absent, never older\n"
            "  --max-ms MS   a kill comes 1..MS ms after the child starts, or after its first\n"
            "                flush on odd cycles (default 60)\n"
            "  --progress    progress on stderr (always on a terminal)\n"
            "  --json        one JSON object on stdout\n"
            "\n"
            "Exit status: 0 every cycle passed, 1 a key lost or wrong (or the loop could not\n"
            "run), 2 usage error (a --dir kvtier did not make, or holding pages, too).\n",
            CT_MAX_KEYS, CT_FILLER_KEYS, CT_MAX_THREADS);
}

static const struct option ct_lo[] = {
    { "cycles", required_argument, NULL, 'c' }, { "seed", required_argument, NULL, 's' },
    { "dir", required_argument, NULL, 'd' },    { "keys", required_argument, NULL, 'k' },
    { "max-ms", required_argument, NULL, 'm' }, { "progress", no_argument, NULL, 'p' },
    { "json", no_argument, NULL, 'j' },         { "help", no_argument, NULL, 'h' },
    { "full", no_argument, NULL, 'f' },         { "evict", no_argument, NULL, 'e' },
    { "threads", required_argument, NULL, 't' },
    { NULL, 0, NULL, 0 },
};

/* 0, 1 (help printed) or -EINVAL (the message printed). */
static int ct_parse(int argc, char **argv, struct ct_opts *o)
{
    *o = (struct ct_opts){ .cycles = 100, .keys = 64, .max_ms = 60, .threads = 3 };
    bool threads_given = false;
    int c, li = 0, r = 0;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", ct_lo, &li)) != -1 && !r) {
        switch (c) {
        case 'h': ct_usage(stdout); return 1;
        case 'c': r = cli_opt_count("crashtest", "cycles", optarg, 1, 100000000, &o->cycles); break;
        case 's':
            r = cli_opt_count("crashtest", "seed", optarg, 0, UINT32_MAX, &o->seed);
            o->seed_given = true;
            break;
        case 'd': r = cli_opt_path("crashtest", "dir", optarg); o->dir = optarg; break;
        case 'k': r = cli_opt_count("crashtest", "keys", optarg, 1, CT_MAX_KEYS, &o->keys); break;
        case 'm': r = cli_opt_count("crashtest", "max-ms", optarg, 1, 600000, &o->max_ms); break;
        case 'p': o->progress = true; break;
        case 'f': o->full = true; break;
        case 'e': o->evict = true; break;
        case 't':
            r = cli_opt_count("crashtest", "threads", optarg, 1, CT_MAX_THREADS, &o->threads);
            threads_given = true;
            break;
        case 'j': o->json = true; break;
        default: return cli_getopt_error("crashtest", c, argv, ct_lo);
        }
    }
    if (r)
        return r;
    if (optind != argc) {
        cli_error("crashtest", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if ((o->evict || threads_given) && !o->full) {
        cli_error("crashtest", 2, "--%s goes with --full", o->evict ? "evict" : "threads");
        return -EINVAL;
    }
    if (!o->seed_given)
        o->seed = ((uint64_t)time(NULL) ^ (uint64_t)getpid()) & UINT32_MAX;
    o->progress |= isatty(STDERR_FILENO);
    return 0;
}

/* ------------------------------------------------------------- report */

static void ct_report(const struct ct_opts *o, const struct totals *t, double secs,
                      const char *err, bool kept)
{
    FILE *f = o->json ? stderr : stdout;
    fprintf(f, "kvtier crashtest: %" PRIu64 " cycles in %.1f s (seed %" PRIu64 ", %" PRIu64
            " keys, dir %s%s)\n", t->cycles, secs, o->seed, o->keys, o->dir,
            kept ? ", kept" : ", removed");
    fprintf(f, "  kills: %" PRIu64 " (%" PRIu64 " after a flush); %" PRIu64 " flushes, %" PRIu64
            " operations logged\n", t->cycles, t->after_flush, t->flushes, t->ops);
    fprintf(f, "  after the kills: %" PRIu64 " keys present (%" PRIu64 " at a version newer than "
            "the last flush), %" PRIu64 " absent (dropped or never flushed)\n", t->present,
            t->newer, t->absent);
    if (o->full)
        fprintf(f, "  full engine: %" PRIu64 " filler threads%s; %" PRIu64 " flushed keys "
                "evicted, %" PRIu64 " filler pages found whole\n", o->threads,
                o->evict ? ", KVT_FLAG_EVICT" : "", t->evicted, t->fillers);
    fprintf(f, "  lost: %" PRIu64 "   wrong: %" PRIu64 "\n", t->lost, t->wrong);
    if (err[0])
        fprintf(f, "  first failure: %s\n", err);
    if (!o->json)
        return;
    /* Counts are far below 2^63: json_int_t holds them. Seconds to the ms. */
    util_json_print(stdout, json_pack(
        "{s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:b, s:I, s:I, s:I, s:I, "
        "s:b, s:o, s:o}",
        "cycles", (json_int_t)t->cycles, "seconds", util_json_real(round(secs * 1e3) / 1e3),
        "seed", (json_int_t)o->seed, "keys", (json_int_t)o->keys,
        "kills_after_flush", (json_int_t)t->after_flush, "flushes", (json_int_t)t->flushes,
        "ops", (json_int_t)t->ops, "present", (json_int_t)t->present,
        "newer", (json_int_t)t->newer, "absent", (json_int_t)t->absent, "full", (int)o->full,
        "threads", (json_int_t)(o->full ? o->threads : 0), "evict", (int)o->evict,
        "evicted", (json_int_t)t->evicted, "fillers", (json_int_t)t->fillers,
        "lost", (json_int_t)t->lost, "wrong", (json_int_t)t->wrong, "ok", (int)!err[0],
        "error", err[0] ? util_json_str(err) : json_null(), "dir", util_json_str(o->dir)));
}

int crashtest_main(int argc, char **argv)
{
    struct ct_opts o;
    struct totals t = { 0 };
    char err[700] = "", made[4096] = "";
    int r = ct_parse(argc, argv, &o);
    if (r)
        return r > 0 ? 0 : 2;
    if (!o.dir) {
        const char *tmp = getenv("TMPDIR");
        snprintf(made, sizeof(made), "%s/kvtier-crashtest-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(made))
            return cli_error("crashtest", 1, "cannot make a directory %s: %s", made,
                             strerror(errno));
        o.dir = made;
    }
    /* A directory holding pages is refused before an engine opens it: the
     * open would wipe a store of another page size and drop the entries of
     * other fingerprints. */
    if (!made[0] && spill_refuse_store("crashtest", "--dir", o.dir, NULL))
        return 2;
    /* The directory must be one kvtier can use before a child is forked. */
    kvt_config c = ct_config(&o, 0);
    kvt_engine *e = NULL;
    if ((r = kvt_open(&c, &e)) != 0) {
        /* The rest of c is fixed: KVT_ECONFIG is the directory given (not
         * kvtier's, not empty), and kvt_last_error says what is in it. */
        if (r == KVT_ECONFIG)
            cli_error("crashtest", 2, "--dir %s: %s", o.dir, kvt_last_error());
        else
            cli_error("crashtest", 1, "cannot open --dir %s: %s", o.dir, cli_kvt_why(r));
        if (made[0])
            rmdir(made);
        return r == KVT_ECONFIG ? 2 : 1;
    }
    kvt_close(e);
    fprintf(stderr, "kvtier crashtest: seed %" PRIu64 " (--seed replays the operations; kill "
            "times follow the clock)\n", o.seed);
    double t0 = util_now();
    int rc = ct_loop(&o, &t, err, sizeof(err));
    double secs = util_now() - t0;
    bool keep = rc || !made[0];
    if (!keep && kvt_spill_remove(made) < 0)
        keep = true;
    ct_report(&o, &t, secs, err, keep);
    return rc || t.lost || t.wrong ? 1 : 0;
}
