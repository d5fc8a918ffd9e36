/*
 * test_powerloss.c — power loss, not only SIGKILL: the faulty I/O back-end's
 * power-loss model (lab/faulty.h) under the SSD tier with persist.
 *
 * A kill -9 leaves the page cache to the kernel, so every write a process
 * made survives it. A power cut keeps only what a completed fdatasync
 * covered: the model journals each write with the bytes it overwrote, and
 * after the cut undoes every write no sync covered, whole or leaving a
 * prefix torn at 512 B or 4 KiB, and puts the LMDB index back to its image
 * at its last sync (or keeps every commit it made: both are states a disk
 * can be in, because with persist LMDB syncs each commit's pages before its
 * meta page; store/ssd_index.c).
 *
 * The sweep runs one fixed mixed workload (put, overwrite, drop, flush,
 * get) once per cut point: the n-th write and the n-th sync for every n the
 * workload reaches (the codec none, zstd, zstd-shuffle16 in turn), times the
 * tear sizes {none, 512, 4096}, times the index rolled back to its last sync
 * or keeping every commit. After each cut: close, the
 * disk as the next boot sees it, reopen, and every key checked against the
 * state of the last kvt_flush that returned 0 before the cut:
 *  - a key that flush held is present, exact, at that version or a later
 *    one the workload wrote (absent only if a drop came after the flush);
 *  - a key that flush did not hold (never written, or dropped before it) is
 *    absent or at a version written after it: a drop that a flush covered
 *    is never undone;
 *  - no page is torn or stale: bytes of no allowed version are "wrong";
 *  - nothing is counted corrupt or failed reading back.
 *
 * The engines write nothing ahead (kvt_test_hooks.no_write_ahead): those
 * writes take the same path as a flush's (data, sync, index commit), and
 * with them the workload's writes and syncs follow the mover's timing, so
 * the cut points moved from run to run and their number grew by a fifth
 * (the sweep then outran its time under ThreadSanitizer).
 */
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "lab/lab.h"
#include "kvt_build.h"
#include "io/io.h"
#include "api/api.h"

#define PB ((size_t)16384)
#define FP 0x90E5105Full
#define NKEYS_MAX 64
#define NOPS_MAX 240

/* The workload's shape: the plain one (an SSD with room for every key), or
 * the engine full (issue 32): more keys than the SSD holds, overwrites in
 * place through a pin (so pages are dirty in HBM alone), puts refused for
 * room, with or without KVT_FLAG_EVICT (which drops keys for room: absent
 * is then allowed, older never). */
struct shape {
    const char *name;
    int nkeys, nops;
    size_t ssd_pages;
    uint64_t flags;
    bool writes;    /* acquire, write, release dirty among the operations */
    bool own;       /* pages go down ahead: each put writes its own (codec none only) */
};
static const struct shape PLAIN = { "plain", 24, 160, 96, 0, false, false };
static const struct shape FULL = { "full", 64, 240, 32, 0, true, false };
static const struct shape FULL_EVICT = { "full, KVT_FLAG_EVICT", 64, 240, 32, KVT_FLAG_EVICT,
                                         true, false };
static const struct shape OWN = { "plain, puts writing their own pages", 24, 160, 96, 0, false,
                                  true };
static const struct shape *shape = &PLAIN;
#define NKEYS (shape->nkeys)
#define NOPS (shape->nops)

/* ---------------------------------------------------------------- dirs */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

/* A fresh directory under /dev/shm when there is one (durability is the
 * model's, not the disk's: a real fdatasync only costs time, several
 * seconds a sweep on a virtual disk), else $TMPDIR (default /tmp). */
static char *dir_new(void)
{
    const char *tmp = getenv("TMPDIR");
    char *d = malloc(4096);
    assert_non_null(d);
    if (access("/dev/shm", W_OK) == 0)
        tmp = "/dev/shm";
    snprintf(d, 4096, "%s/kvt_powerloss_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    assert_non_null(mkdtemp(d));
    return d;
}

static void dir_free(char *d)
{
    nftw(d, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
}

/* codec: KVT_CODEC_NONE, ZSTD or ZSTD_SHUFFLE16 (compressed pages are
 * shorter than a slot: a tear may fall in their padding or their bytes). */
static kvt_config pl_config(const char *dir, int codec)
{
    kvt_config c = t_config(PB, 4, 8);
    c.ssd_bytes = shape->ssd_pages * PB;
    c.flags = shape->flags;
    c.ssd_dir = dir;
    c.persist = 1;
    c.fingerprint = FP;
    c.codec = codec;
    c.io_backend = KVT_IO_PSYNC;
    c.queue_depth = 4;
    return c;
}

static kvt_key pkey(int i)
{
    return t_key(100 + (uint64_t)i / 8, (uint32_t)i % 8 / 4, (uint32_t)i % 4);
}

/* ---------------------------------------------------------------- the workload */

enum op_type { OP_PUT, OP_DROP, OP_FLUSH, OP_GET, OP_WRITE };
struct op {
    enum op_type type;
    int key;
};

/* The same workload every run: mostly puts (a third of them over a key that
 * exists), drops, a flush every ~12 operations, gets to check the session
 * itself. */
static void make_ops(struct op *ops)
{
    unsigned seed = 19;
    for (int i = 0; i < NOPS; i++) {
        int r = (int)(rand_r(&seed) % 100);
        ops[i].key = (int)(rand_r(&seed) % NKEYS);
        ops[i].type = r < 55 ? OP_PUT : r < 70 ? OP_DROP : r < 78 ? OP_FLUSH : OP_GET;
        if (shape->writes && ops[i].type == OP_PUT && r >= 42)
            ops[i].type = OP_WRITE;
    }
    ops[NOPS - 1].type = OP_FLUSH;
}

/* What one run did before the power went: per key the version it held at
 * the last flush that returned 0 (0: absent), and the versions put after
 * it. Version v of any key is written by operation v - 1. */
struct outcome {
    uint32_t flushed[NKEYS_MAX];
    bool drop_after[NKEYS_MAX];   /* dropped (or, with KVT_FLAG_EVICT, maybe evicted) since */
    uint32_t after[NKEYS_MAX][NOPS_MAX];
    unsigned nafter[NKEYS_MAX];
    unsigned ops_done, flushes;
    char err[256];
};

/* A page of (key, v), compressible, so that the codecs store it shorter
 * than its slot. */
static void fill(void *b, int key, uint32_t v)
{
    util_pattern_fill_z(b, PB, pkey(key), v);
}

static bool pcheck(const void *b, kvt_key k, uint32_t v)
{
    return util_pattern_diff(b, PB, k, v, true) == PB;
}

/* An overwrite through a pin: the new version is dirty in HBM alone until
 * it goes down. A key absent (never written, dropped, evicted) or no room
 * to pin it is no write. */
static int write_in_place(kvt_engine *e, int key, uint32_t *cur, uint32_t v, struct outcome *o)
{
    kvt_key k = pkey(key);
    void *d = NULL;
    if (!cur[key])
        return 0;
    int r = kvt_acquire(e, &k, 1, &d);
    if (r == KVT_ENOTFOUND && (shape->flags & KVT_FLAG_EVICT)) {
        cur[key] = 0;
        o->drop_after[key] = true;
        return 0;
    }
    if (r == KVT_EFULL)
        return 0;
    if (r)
        return r;
    static _Alignas(4096) uint8_t page[PB];
    assert_int_equal(t_page_read(e, page, d, PB), 0);
    if (!pcheck(page, k, cur[key]))
        snprintf(o->err, sizeof(o->err), "kvt_acquire of key %d served wrong bytes (version %u)",
                 key, cur[key]);
    fill(page, key, v);
    assert_int_equal(t_page_write(e, d, page, PB), 0);
    o->after[key][o->nafter[key]++] = v;
    if ((r = kvt_release(e, &k, 1, 1)) == 0)
        cur[key] = v;
    return r;
}

/* Runs the workload until a call fails (the power is gone) or it ends. */
static void run_ops(kvt_engine *e, struct kvt_io_faulty *plan, const struct op *ops,
                    struct outcome *o, void *buf)
{
    uint32_t cur[NKEYS_MAX] = { 0 };
    bool cache = shape->flags & KVT_FLAG_EVICT;
    memset(o, 0, sizeof(*o));
    for (unsigned i = 0; i < (unsigned)NOPS; i++) {
        const struct op *op = &ops[i];
        kvt_key k = pkey(op->key);
        uint32_t v = i + 1;
        int r = 0, found = -1;
        if (op->type == OP_PUT) {
            const void *src[1] = { buf };
            fill(buf, op->key, v);
            o->after[op->key][o->nafter[op->key]++] = v; /* attempted: may be on disk */
            if ((r = kvt_put(e, &k, 1, src, 0)) == 0)
                cur[op->key] = v;
            if (r == KVT_EFULL && shape->flags == 0) {
                r = 0; /* refused for room: the old version stays */
            } else if (r == KVT_EFULL) {
                r = 0; /* a cache may give the old version up for room */
                cur[op->key] = 0;
                o->drop_after[op->key] = true;
                kvt_drop(e, &k, 1);
            }
        } else if (op->type == OP_WRITE) {
            r = write_in_place(e, op->key, cur, v, o);
        } else if (op->type == OP_DROP) {
            o->drop_after[op->key] = true;
            if ((r = kvt_drop(e, &k, 1)) == 0)
                cur[op->key] = 0;
        } else if (op->type == OP_FLUSH) {
            r = kvt_flush(e);
            /* A flush that returns after the cut proves nothing: the
             * process would not be there to see it. */
            if (r == 0 && !kvt_io_faulty_dead(plan)) {
                memcpy(o->flushed, cur, sizeof(cur));
                memset(o->drop_after, 0, sizeof(o->drop_after));
                memset(o->nafter, 0, sizeof(o->nafter));
                o->flushes++;
            }
        } else {
            void *dst[1] = { buf };
            r = kvt_get(e, &k, 1, dst, 0, &found);
            if (r == 0 && found == 0 && cur[op->key] && cache) { /* evicted for room */
                cur[op->key] = 0;
                o->drop_after[op->key] = true;
            }
            if (r == 0 && !kvt_io_faulty_dead(plan) &&
                (found != (cur[op->key] != 0) ||
                 (found && !pcheck(buf, k, cur[op->key]))))
                snprintf(o->err, sizeof(o->err), "op %u: kvt_get of key %d served %s before the "
                         "cut (version %u)", i, op->key, found ? "wrong bytes" : "a miss",
                         cur[op->key]);
        }
        if (r != 0 || o->err[0] || kvt_io_faulty_dead(plan))
            break;
        o->ops_done = i + 1;
    }
}

struct tally {
    unsigned runs, cuts_write, cuts_sync, present, absent, newer, wrong, lost, evicted;
    uint64_t undone, torn, kept;
};

/* Checks the reopened directory against what the run did. Counts wrong and
 * lost keys into t; describes the first in err. */
static void check_after(const char *dir, const struct outcome *o, struct tally *t, char *err,
                        size_t errlen, const char *what)
{
    kvt_config c = pl_config(dir, KVT_CODEC_NONE);
    kvt_engine *e = NULL;
    int r = kvt_open(&c, &e);
    if (r) {
        snprintf(err, errlen, "%s: reopen failed: %s (%s)", what, kvt_strerror(r),
                 kvt_last_error());
        t->wrong++;
        return;
    }
    void *b = aligned_alloc(4096, PB);
    assert_non_null(b);
    unsigned present = 0;
    for (int i = 0; i < NKEYS; i++) {
        kvt_key k = pkey(i);
        void *dst[1] = { b };
        int found = -1;
        memset(b, 0xA5, PB);
        r = kvt_get(e, &k, 1, dst, 0, &found);
        uint32_t got = 0;
        if (r == 0 && found == 1) {
            present++;
            if (o->flushed[i] && pcheck(b, k, o->flushed[i]))
                got = o->flushed[i];
            for (unsigned j = 0; j < o->nafter[i] && !got; j++)
                if (pcheck(b, k, o->after[i][j]))
                    got = o->after[i][j];
            t->newer += got && got != o->flushed[i];
        }
        bool wrong = r != 0 || (found == 1 && !got);
        bool lost = r == 0 && found == 0 && o->flushed[i] && !o->drop_after[i];
        if (lost && (shape->flags & KVT_FLAG_EVICT)) { /* a cache may have dropped it for room */
            t->evicted++;
            lost = false;
        }
        t->wrong += wrong;
        t->lost += lost;
        t->present += found == 1;
        t->absent += r == 0 && found == 0;
        if ((wrong || lost) && !err[0])
            snprintf(err, errlen, "%s: key %d %s (flushed version %u, %u puts and %s drop after "
                     "that flush; %u ops done, %u flushes)", what, i,
                     r ? "failed to read back" : lost ? "was flushed and is gone"
                                                      : "holds bytes of no allowed version",
                     o->flushed[i], o->nafter[i], o->drop_after[i] ? "a" : "no", o->ops_done,
                     o->flushes);
    }
    kvt_stats s = t_stats(e);
    if (s.pages != present || s.errors_corrupt || s.errors_io) {
        t->wrong++;
        if (!err[0])
            snprintf(err, errlen, "%s: %llu pages held for %u keys present, errors_corrupt "
                     "%llu, errors_io %llu", what, (unsigned long long)s.pages, present,
                     (unsigned long long)s.errors_corrupt, (unsigned long long)s.errors_io);
    }
    kvt_close(e);
    free(b);
}

/* A closed engine whose power went prints why its close could not flush:
 * expected here, so not printed. */
static void close_quietly(kvt_engine *e)
{
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0)
        dup2(null, 2);
    kvt_close(e);
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (null >= 0)
        close(null);
}

/* One run: the workload with the power going as pl says, then the check.
 * Returns the run's counts of writes and syncs seen (for the dry run). */
static void one_run(const struct op *ops, const struct kvt_io_powerloss *pl, int codec,
                    struct tally *t, char *err, size_t errlen, uint64_t *writes, uint64_t *syncs,
                    unsigned *done)
{
    char *dir = dir_new();
    struct kvt_io_faulty plan;
    kvt_io_faulty_init(&plan, NULL, NULL);
    kvt_io_faulty_powerloss(&plan, pl);
    kvt_config c = pl_config(dir, codec);
    struct kvt_test_hooks h = { .io = &plan, .no_write_ahead = !shape->own };
    kvt_engine *e = NULL;
    int r = kvt_open_with_hooks(&c, &h, &e);
    if (r)
        fail_msg("open: %s (%s)", kvt_strerror(r), kvt_last_error());
    void *buf = aligned_alloc(4096, PB);
    assert_non_null(buf);
    struct outcome *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    run_ops(e, &plan, ops, o, buf);
    if (o->err[0] && !err[0])
        snprintf(err, errlen, "%s", o->err);
    if (done)
        *done = o->ops_done;
    kvt_io_faulty_cut(&plan); /* the end of the workload is a cut too */
    close_quietly(e);
    *writes = plan.pl_writes;
    *syncs = plan.pl_syncs;
    struct kvt_io_powerloss_result res;
    r = kvt_io_faulty_powerloss_apply(&plan, &res);
    if (r)
        fail_msg("applying the power loss: %s", strerror(-r));
    t->undone += res.lost;
    t->torn += res.torn;
    t->kept += res.kept;
    t->runs++;
    char what[112];
    snprintf(what, sizeof(what), "cut at %s %llu, tear %u, index %s, codec %d",
             pl->at == KVT_IOCUT_WRITE ? "write" : pl->at == KVT_IOCUT_SYNC ? "sync" : "end",
             (unsigned long long)pl->nth, pl->tear, pl->index_kept ? "kept" : "rolled back", codec);
    check_after(dir, o, t, err, errlen, what);
    free(o);
    free(buf);
    dir_free(dir);
}

/* ---------------------------------------------------------------- the model itself */

/* The model on a plain file, without the engine: a synced write survives
 * whole; an unsynced one is undone, or keeps a prefix of whole tear units;
 * after the cut everything fails. */
static void test_model_undo(void **state)
{
    (void)state;
    char *dir = dir_new();
    char path[4200];
    snprintf(path, sizeof(path), "%s/f", dir);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4 * 8192), 0);
    for (unsigned tear = 0; tear <= 4096; tear = tear ? tear * 8 : 512) {
        struct kvt_io_faulty plan;
        struct kvt_io_params p = { .depth = 4 };
        void *priv;
        kvt_io_faulty_init(&plan, NULL, NULL);
        struct kvt_io_powerloss pl = { .at = KVT_IOCUT_ON_DEMAND, .tear = tear, .seed = 7 };
        kvt_io_faulty_powerloss(&plan, &pl);
        p.arg = &plan;
        assert_int_equal(kvt_io_faulty_ops.open(&p, &priv), 0);
        unsigned char *b = aligned_alloc(4096, 8192);
        struct kvt_io_req rq[4], *rp[4], *done[4];
        for (int i = 0; i < 4; i++) {
            memset(b, 0, 8192);
            assert_int_equal(pwrite(fd, b, 8192, i * 8192), 8192); /* old bytes: zeros */
        }
        for (int i = 0; i < 4; i++) {
            unsigned char *w = aligned_alloc(4096, 8192);
            memset(w, 0x11 * (i + 1), 8192);
            rq[i] = (struct kvt_io_req){ .fd = fd, .write = true, .buf = w, .len = 8192,
                                         .off = (uint64_t)i * 8192 };
            rp[i] = &rq[i];
            assert_int_equal(kvt_io_faulty_ops.submit(priv, &rp[i], 1), 0);
            assert_int_equal(kvt_io_faulty_ops.reap(priv, done, 4, 1), 1);
            assert_int_equal(done[0]->res, 0);
            if (i == 1) /* the first two are covered */
                assert_int_equal(kvt_io_faulty_sync(&plan, fd), 0);
        }
        kvt_io_faulty_cut(&plan);
        assert_true(kvt_io_faulty_dead(&plan));
        assert_int_equal(kvt_io_faulty_sync(&plan, fd), -EIO);
        assert_int_equal(kvt_io_faulty_ops.submit(priv, &rp[0], 1), 0);
        assert_int_equal(kvt_io_faulty_ops.reap(priv, done, 4, 1), 1);
        assert_int_equal(done[0]->res, -EIO);
        kvt_io_faulty_ops.close(priv);
        struct kvt_io_powerloss_result res;
        assert_int_equal(kvt_io_faulty_powerloss_apply(&plan, &res), 0);
        assert_int_equal(res.lost + res.torn + res.kept, 2);
        if (!tear)
            assert_int_equal(res.lost, 2);
        for (int i = 0; i < 4; i++) {
            assert_int_equal(pread(fd, b, 8192, i * 8192), 8192);
            size_t n = 0; /* the new bytes form a prefix, then the old ones */
            while (n < 8192 && b[n] == 0x11 * (i + 1))
                n++;
            for (size_t j = n; j < 8192; j++)
                assert_int_equal(b[j], 0);
            if (i < 2)
                assert_int_equal(n, 8192);
            else if (!tear)
                assert_int_equal(n, 0);
            else
                assert_int_equal(n % tear, 0);
            free(rq[i].buf);
        }
        free(b);
    }
    close(fd);
    dir_free(dir);
}

/* The checker is not blind: damage one flushed page on disk and the check
 * reports it (the engine finds its CRC wrong: corrupt and lost). */
static void test_checker_sees_damage(void **state)
{
    (void)state;
    struct op ops[NOPS_MAX];
    make_ops(ops);
    char *dir = dir_new();
    kvt_config c = pl_config(dir, KVT_CODEC_NONE);
    struct kvt_io_faulty plan;
    kvt_io_faulty_init(&plan, NULL, NULL);
    kvt_io_faulty_powerloss(&plan, &(struct kvt_io_powerloss){ .at = KVT_IOCUT_ON_DEMAND });
    struct kvt_test_hooks h = { .io = &plan, .no_write_ahead = true };
    kvt_engine *e = NULL;
    assert_int_equal(kvt_open_with_hooks(&c, &h, &e), 0);
    void *buf = aligned_alloc(4096, PB);
    struct outcome *o = calloc(1, sizeof(*o));
    run_ops(e, &plan, ops, o, buf);
    assert_int_equal(o->ops_done, (unsigned)NOPS);
    kvt_close(e);
    kvt_io_faulty_powerloss(&plan, NULL);
    char seg[4200];
    snprintf(seg, sizeof(seg), "%s/seg-000000.kvt", dir);
    int fd = open(seg, O_RDWR);
    assert_true(fd >= 0);
    memset(buf, 0, PB);
    for (int s = 0; s < 96; s++) /* every slot: whichever the flushed pages use */
        assert_int_equal(pwrite(fd, buf, 512, (off_t)s * (off_t)PB + 4096), 512);
    close(fd);
    struct tally t = { 0 };
    char err[512] = "";
    check_after(dir, o, &t, err, sizeof(err), "damaged on purpose");
    print_message("damaged on purpose: %u wrong, %u lost: %s\n", t.wrong, t.lost, err);
    assert_true(t.lost > 0);
    assert_true(err[0]);
    free(o);
    free(buf);
    dir_free(dir);
}

/* A drop that a flush covered survives the power going right after that
 * flush, also when the flush had nothing to write: the deletion's commit
 * must be durable by the time kvt_flush returns. */
static void test_drop_then_flush(void **state)
{
    (void)state;
    for (int kept = 0; kept < 2; kept++) {
        char *dir = dir_new();
        kvt_config c = pl_config(dir, KVT_CODEC_NONE);
        struct kvt_io_faulty plan;
        kvt_io_faulty_init(&plan, NULL, NULL);
        struct kvt_io_powerloss pl = { .at = KVT_IOCUT_ON_DEMAND, .index_kept = kept };
        kvt_io_faulty_powerloss(&plan, &pl);
        struct kvt_test_hooks h = { .io = &plan, .no_write_ahead = true };
        kvt_engine *e = NULL;
        assert_int_equal(kvt_open_with_hooks(&c, &h, &e), 0);
        void *buf = aligned_alloc(4096, PB);
        for (int i = 0; i < 4; i++) {
            kvt_key k = pkey(i);
            const void *src[1] = { buf };
            fill(buf, i, 1);
            assert_int_equal(kvt_put(e, &k, 1, src, 0), 0);
        }
        assert_int_equal(kvt_flush(e), 0);
        kvt_key k0 = pkey(0);
        assert_int_equal(kvt_drop(e, &k0, 1), 0);
        assert_int_equal(kvt_flush(e), 0);
        kvt_io_faulty_cut(&plan);
        close_quietly(e);
        assert_int_equal(kvt_io_faulty_powerloss_apply(&plan, NULL), 0);
        assert_int_equal(kvt_open(&c, &e), 0);
        for (int i = 0; i < 4; i++) {
            kvt_key k = pkey(i);
            void *dst[1] = { buf };
            int found = -1;
            assert_int_equal(kvt_get(e, &k, 1, dst, 0, &found), 0);
            if (i == 0 && found)
                fail_msg("index %s: key 0 was dropped and flushed, and is back after the power "
                         "cut", kept ? "kept" : "rolled back");
            assert_int_equal(found, i != 0);
            if (found)
                assert_true(pcheck(buf, k, 1));
        }
        kvt_close(e);
        free(buf);
        dir_free(dir);
    }
}

/* ---------------------------------------------------------------- the sweep */

/* Cut points n = 1..count, at most max of them, spread evenly. */
static uint64_t cut_step(uint64_t count, uint64_t max)
{
    return count <= max ? 1 : (count + max - 1) / max;
}

static void sweep(const struct shape *sh)
{
    shape = sh;
    static const unsigned tears[] = { 0, 512, 4096 };
    struct op ops[NOPS_MAX];
    make_ops(ops);
    struct tally t = { 0 };
    char err[512] = "";
    uint64_t writes, syncs, w, s;
    /* The dry run: the whole workload, the power cut at its end. */
    struct kvt_io_powerloss dry = { .at = KVT_IOCUT_ON_DEMAND };
    unsigned done = 0;
    one_run(ops, &dry, KVT_CODEC_NONE, &t, err, sizeof(err), &writes, &syncs, &done);
    if (err[0])
        fail_msg("%s", err);
    if (done != (unsigned)NOPS) /* every call succeeds, the full engine's flushes too */
        fail_msg("%s: the workload stopped at operation %u of %d: %s", sh->name, done, NOPS,
                 kvt_last_error());
    assert_true(writes > 20 && syncs > 5);
    const char *env = getenv("KVT_POWERLOSS_MAX_CUTS"); /* a quicker sweep: at most this many */
    uint64_t max = env ? strtoull(env, NULL, 0) : UINT64_MAX / 2;
    uint64_t wstep = cut_step(writes, max), sstep = cut_step(syncs, max);
    unsigned points = 0;
    for (int kind = 0; kind < 2 && !err[0]; kind++) {
        uint64_t count = kind ? syncs : writes, step = kind ? sstep : wstep;
        for (uint64_t n = 1; n <= count && !err[0]; n += step, points++) {
            for (size_t ti = 0; ti < 6 && !err[0]; ti++) {
                struct kvt_io_powerloss pl = { .at = kind ? KVT_IOCUT_SYNC : KVT_IOCUT_WRITE,
                                               .nth = n, .tear = tears[ti % 3],
                                               .seed = n * 7 + ti, .index_kept = ti >= 3 };
                int codec = sh->own ? KVT_CODEC_NONE : (int)(n % 3);
                one_run(ops, &pl, codec, &t, err, sizeof(err), &w, &s, NULL);
                if (kind)
                    t.cuts_sync++;
                else
                    t.cuts_write++;
            }
        }
    }
    print_message("power-loss sweep (%s: %d keys, SSD %zu pages): workload of %d ops (%llu "
                  "writes, %llu syncs); %u cut "
                  "points (%s) x 3 tear sizes x 2 index "
                  "states (rolled back, kept) = %u runs (+1 dry); %llu unsynced writes undone "
                  "whole, "
                  "%llu torn, %llu kept; after reopen %u keys present (%u newer than the "
                  "flush), %u absent (%u flushed and evicted); %u wrong, %u lost\n",
                  sh->name, NKEYS, sh->ssd_pages, NOPS, (unsigned long long)writes, (unsigned long long)syncs, points,
                  sh->own ? "codec none" : "codec none/zstd/zstd-shuffle16 in turn",
                  t.cuts_write + t.cuts_sync, (unsigned long long)t.undone,
                  (unsigned long long)t.torn, (unsigned long long)t.kept, t.present, t.newer,
                  t.absent, t.evicted, t.wrong, t.lost);
    if (err[0])
        fail_msg("%s", err);
    assert_int_equal(t.wrong, 0);
    assert_int_equal(t.lost, 0);
    assert_true(t.undone > 0 && t.torn > 0);
    shape = &PLAIN;
}

static void test_sweep(void **state)
{
    (void)state;
    sweep(&PLAIN);
}

/* The engine full: the flush must make the overwrites durable that are
 * dirty in HBM alone, and no full engine may give a flushed copy up. */
static void test_sweep_full(void **state)
{
    (void)state;
    sweep(&FULL);
}

static void test_sweep_full_evict(void **state)
{
    (void)state;
    sweep(&FULL_EVICT);
}

/* Write-ahead on, and puts writing their own pages down (tiers/ssd_caller.c):
 * the writes then come from the callers' contexts and are committed by the
 * mover when it gets to them, so the cut points follow its timing and
 * their number varies from run to run; every state they leave must pass
 * the same checks. Codec none only: a put writes its own pages only raw. */
static void test_sweep_own_writes(void **state)
{
    (void)state;
    sweep(&OWN);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_undo),
        cmocka_unit_test(test_checker_sees_damage),
        cmocka_unit_test(test_drop_then_flush),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_sweep_full),
        cmocka_unit_test(test_sweep_full_evict),
        cmocka_unit_test(test_sweep_own_writes),
    };
    /* The sweep with the puts' own writes runs in a process of its own
     * (ctest test_powerloss_own_writes): each stays inside its time under
     * the sanitizers. */
    if (argc == 1)
        cmocka_set_skip_filter("test_sweep_own_writes");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
