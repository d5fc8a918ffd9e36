/*
 * test_spill.c — a spill directory is kvtier's only where kvtier made it,
 * and damage to it is never served (docs/security.md lists what each test
 * here guards).
 *
 * Each test works in its own mkdtemp() directory under /tmp, with files
 * "outside" the spill directory in a sibling, to see that nothing outside is
 * written. The permission tests need a user the file modes apply to: as
 * root they run in a child process that becomes nobody (uid 65534).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <lmdb.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "lab/lab.h"
#include "io/codec.h"
#include "io/io.h"
#include "api/api.h"

#define PB ((size_t)16 << 10)
#define FP 0x5AFE5AFE0001ull
#define NOBODY 65534

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

struct fx {
    char top[64];       /* mkdtemp: holds spill/ and outside files */
    char dir[96];       /* top/spill: the spill directory */
};

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f || t_tmpdir(f->top, sizeof(f->top), "spill")) {
        free(f);
        return -1;
    }
    snprintf(f->dir, sizeof(f->dir), "%s/spill", f->top);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    t_rmtree(f->top);
    free(f);
    return 0;
}

static kvt_config cfg(const struct fx *f, int persist)
{
    kvt_config c = t_config(PB, 4, 8);
    c.ssd_bytes = 256 * PB;
    c.ssd_dir = f->dir;
    c.persist = persist;
    c.fingerprint = FP;
    c.io_backend = KVT_IO_PSYNC;
    c.queue_depth = 8;
    return c;
}

static kvt_engine *open_ok(const struct fx *f, int persist)
{
    kvt_config c = cfg(f, persist);
    kvt_engine *e = NULL;
    int r = t_open_io(&c, &e);
    t_opened(r);
    return e;
}

static void read_file(const char *path, char *buf, size_t n);

/* Opens with persist=1 and returns what the open wrote on stderr in text. */
static kvt_engine *open_said(const struct fx *f, char *text, size_t n)
{
    char log[] = "/tmp/kvt-spill-log-XXXXXX";
    int saved = dup(2), cap = mkstemp(log);
    assert_true(saved >= 0 && cap >= 0);
    dup2(cap, 2);
    kvt_config c = cfg(f, 1);
    kvt_engine *e = NULL;
    int r = kvt_open(&c, &e);
    dup2(saved, 2);
    close(saved);
    close(cap);
    read_file(log, text, n);
    unlink(log);
    assert_int_equal(r, 0);
    return e;
}

/* Puts pages [first, first + n); stops at the first error and returns it. */
static int try_put_pages(kvt_engine *e, uint64_t first, uint64_t n)
{
    static _Alignas(4096) unsigned char page[PB];
    for (uint64_t i = first; i < first + n; i++) {
        kvt_key k = t_key(i, 0, 0);
        const void *src = page;
        t_fill(page, PB, k, 1);
        int r = kvt_put(e, &k, 1, &src, 0);
        if (r)
            return r;
    }
    return 0;
}

static void put_pages(kvt_engine *e, uint64_t first, uint64_t n)
{
    assert_int_equal(try_put_pages(e, first, n), 0);
}

/* 1: exactly page i's bytes; 0: a miss; -1: anything else was served. */
static int get_page(kvt_engine *e, uint64_t i, int *err)
{
    static _Alignas(4096) unsigned char page[PB];
    kvt_key k = t_key(i, 0, 0);
    void *dst = page;
    int found = 0;
    memset(page, 0xA5, PB);
    *err = kvt_get(e, &k, 1, &dst, 0, &found);
    if (*err || !found)
        return 0;
    return t_check(page, PB, k, 1) ? 1 : -1;
}

/* Persisted pages [0, n) on SSD and the engine closed. */
static void make_store(const struct fx *f, uint64_t n)
{
    kvt_engine *e = open_ok(f, 1);
    put_pages(e, 0, n);
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* The whole content of a file (at most 4 KiB), or "" when it is missing. */
static void read_file(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    ssize_t got = fd >= 0 ? read(fd, buf, n - 1) : 0;
    buf[got > 0 ? got : 0] = 0;
    if (fd >= 0)
        close(fd);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void path_in(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* ---------------------------------------------------------------- 1: ownership */

/* A user's files in subdirectories were emptied by the old wipe. */
static void test_foreign_dir_refused(void **state)
{
    struct fx *f = *state;
    char p[256], text[64];
    assert_int_equal(mkdir(f->dir, 0755), 0);
    path_in(p, sizeof(p), f->dir, "docs");
    assert_int_equal(mkdir(p, 0755), 0);
    path_in(p, sizeof(p), f->dir, "docs/deep");
    assert_int_equal(mkdir(p, 0755), 0);
    path_in(p, sizeof(p), f->dir, "docs/report.txt");
    write_file(p, "quarterly report");
    path_in(p, sizeof(p), f->dir, "docs/deep/x.txt");
    write_file(p, "deep");
    path_in(p, sizeof(p), f->dir, "notes.txt");
    write_file(p, "notes");
    for (int persist = 0; persist < 2; persist++) {
        kvt_config c = cfg(f, persist);
        kvt_engine *e = NULL;
        assert_int_equal(t_open_io(&c, &e), KVT_ECONFIG);
        assert_null(e);
        assert_non_null(strstr(kvt_last_error(), f->dir));
        assert_non_null(strstr(kvt_last_error(), "docs/"));
        assert_non_null(strstr(kvt_last_error(), "nothing was changed"));
    }
    path_in(p, sizeof(p), f->dir, "docs/report.txt");
    read_file(p, text, sizeof(text));
    assert_string_equal(text, "quarterly report");
    path_in(p, sizeof(p), f->dir, "docs/deep/x.txt");
    read_file(p, text, sizeof(text));
    assert_string_equal(text, "deep");
    const char *ours[] = { "LOCK", "KVTIER", "KVTIER.tmp", "index" };
    for (int i = 0; i < 4; i++) {
        path_in(p, sizeof(p), f->dir, ours[i]);
        assert_false(exists(p));
    }
}

/* A directory kvtier made may hold other files too: they are never touched,
 * neither by persist=0's wipe nor by a reopen. */
static void test_foreign_files_in_kvtier_dir_kept(void **state)
{
    struct fx *f = *state;
    char p[256], text[64];
    int err;
    make_store(f, 4);
    path_in(p, sizeof(p), f->dir, "docs");
    assert_int_equal(mkdir(p, 0755), 0);
    path_in(p, sizeof(p), f->dir, "docs/report.txt");
    write_file(p, "keep me");
    path_in(p, sizeof(p), f->dir, "seg-notes.txt");
    write_file(p, "also mine");
    kvt_engine *e = open_ok(f, 1);
    assert_int_equal(get_page(e, 2, &err), 1);
    kvt_close(e);
    e = open_ok(f, 0);
    assert_int_equal(get_page(e, 2, &err), 0); /* persist=0: emptied */
    put_pages(e, 0, 20);
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    path_in(p, sizeof(p), f->dir, "docs/report.txt");
    read_file(p, text, sizeof(text));
    assert_string_equal(text, "keep me");
    path_in(p, sizeof(p), f->dir, "seg-notes.txt");
    read_file(p, text, sizeof(text));
    assert_string_equal(text, "also mine");
}

/* kvtier's files without the layout file: refused, not started empty. */
static void test_missing_layout_refused(void **state)
{
    struct fx *f = *state;
    char p[256];
    make_store(f, 4);
    path_in(p, sizeof(p), f->dir, "KVTIER");
    assert_int_equal(unlink(p), 0);
    kvt_config c = cfg(f, 1);
    kvt_engine *e = NULL;
    assert_int_equal(t_open_io(&c, &e), KVT_ECONFIG);
    assert_non_null(strstr(kvt_last_error(), "no KVTIER layout file"));
    path_in(p, sizeof(p), f->dir, "seg-000000.kvt");
    assert_true(exists(p));
}

/* ---------------------------------------------------------------- 3: key binding */

struct raw_ix {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
};

static void raw_open(const struct fx *f, struct raw_ix *x)
{
    char p[256];
    path_in(p, sizeof(p), f->dir, "index");
    assert_int_equal(mdb_env_create(&x->env), 0);
    assert_int_equal(mdb_env_set_maxdbs(x->env, 2), 0);
    assert_int_equal(mdb_env_open(x->env, p, MDB_NOLOCK, 0600), 0);
    assert_int_equal(mdb_txn_begin(x->env, NULL, 0, &x->txn), 0);
    assert_int_equal(mdb_dbi_open(x->txn, "pages", 0, &x->dbi), 0);
}

static void raw_close(struct raw_ix *x)
{
    assert_int_equal(mdb_txn_commit(x->txn), 0);
    mdb_env_close(x->env);
}

/* The stored key of page (id, 0, 0): big-endian id, layer, index. */
static MDB_val raw_key(uint64_t id, unsigned char kb[16])
{
    memset(kb, 0, 16);
    for (int i = 0; i < 8; i++)
        kb[i] = (unsigned char)(id >> (56 - 8 * i));
    return (MDB_val){ 16, kb };
}

static void raw_value(struct raw_ix *x, uint64_t id, unsigned char v[48])
{
    unsigned char kb[16];
    MDB_val k = raw_key(id, kb), d;
    assert_int_equal(mdb_get(x->txn, x->dbi, &k, &d), 0);
    assert_int_equal(d.mv_size, 48);
    memcpy(v, d.mv_data, 48);
}

static void raw_set(struct raw_ix *x, uint64_t id, unsigned char v[48])
{
    unsigned char kb[16];
    MDB_val k = raw_key(id, kb), d = { 48, v };
    assert_int_equal(mdb_put(x->txn, x->dbi, &k, &d, 0), 0);
}

/* Two entries' values exchanged, one entry moved to a key never written,
 * one key's bytes damaged in place: every read is a miss or the right page. */
static void test_index_records_rewritten(void **state)
{
    struct fx *f = *state;
    unsigned char a[48], b[48], c[48], kb[16];
    int err;
    make_store(f, 90);
    struct raw_ix x;
    raw_open(f, &x);
    raw_value(&x, 40, a);
    raw_value(&x, 41, b);
    raw_set(&x, 40, b);
    raw_set(&x, 41, a);
    raw_value(&x, 30, c);
    MDB_val k30 = raw_key(30, kb);
    assert_int_equal(mdb_del(x.txn, x.dbi, &k30, NULL), 0);
    raw_set(&x, 1000, c);
    raw_value(&x, 50, c);
    c[40] ^= 1; /* the generation, which the checksum binds as well */
    raw_set(&x, 50, c);
    raw_close(&x);

    kvt_engine *e = open_ok(f, 1);
    uint64_t bad[] = { 40, 41, 1000, 50 };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(get_page(e, bad[i], &err), 0);
        assert_int_equal(err, 0);
    }
    for (uint64_t i = 0; i < 90; i++)
        if (i != 40 && i != 41 && i != 30 && i != 50)
            assert_int_equal(get_page(e, i, &err), 1);
    assert_int_equal(t_stats(e).errors_corrupt, 4);
    /* What was found bad is gone, never served later either. */
    assert_int_equal(t_where(e, t_key(40, 0, 0)), KVT_TIER_NONE);
    kvt_close(e);
}

/* An index written before entries were bound (entry version 1: the CRC of
 * the bytes alone) is upgraded at open, with a message, and serves every
 * page; fsck refuses it until then. */
static void test_version1_index_upgraded(void **state)
{
    struct fx *f = *state;
    static _Alignas(4096) unsigned char page[PB];
    unsigned char v[48], kb[16];
    uint32_t ver[4] = { 1, 1, 48, 1 };
    int err;
    make_store(f, 20);
    struct raw_ix x;
    MDB_dbi meta;
    raw_open(f, &x);
    for (uint64_t i = 0; i < 20; i++) {
        uint16_t one = 1;
        uint32_t crc;
        t_fill(page, PB, t_key(i, 0, 0), 1);
        crc = kvt_crc32c(0, page, PB);  /* codec none: the stored bytes are the page */
        raw_value(&x, i, v);
        memcpy(v, &one, 2);
        memcpy(v + 24, &crc, 4);
        raw_set(&x, i, v);
    }
    assert_int_equal(mdb_dbi_open(x.txn, "meta", 0, &meta), 0);
    MDB_val k = { 7, "version" }, d = { sizeof(ver), ver };
    assert_int_equal(mdb_put(x.txn, meta, &k, &d, 0), 0);
    (void)kb;
    raw_close(&x);

    char text[4096];
    kvt_engine *e = open_said(f, text, sizeof(text));
    assert_non_null(strstr(text, "20 index entries upgraded to version 2"));
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(get_page(e, i, &err), 1);
    assert_int_equal(t_stats(e).errors_corrupt, 0);
    kvt_close(e);
    e = open_ok(f, 1); /* and it stays upgraded: no message, same pages */
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(get_page(e, i, &err), 1);
    kvt_close(e);
}

/* ---------------------------------------------------------------- 4: links */

struct outside {
    char path[256];
    char before[4096];
    struct stat st;
};

static void outside_make(const struct fx *f, struct outside *o, const char *name)
{
    path_in(o->path, sizeof(o->path), f->top, name);
    write_file(o->path, "outside: not kvtier's\n");
    read_file(o->path, o->before, sizeof(o->before));
    assert_int_equal(stat(o->path, &o->st), 0);
}

static void outside_same(const struct outside *o)
{
    char now[4096];
    struct stat st;
    read_file(o->path, now, sizeof(now));
    assert_string_equal(now, o->before);
    assert_int_equal(stat(o->path, &st), 0);
    assert_int_equal(st.st_size, o->st.st_size);
    assert_int_equal(st.st_blocks, o->st.st_blocks);
}

static void link_in(const struct fx *f, const char *name, const char *target)
{
    char p[256];
    path_in(p, sizeof(p), f->dir, name);
    unlink(p);
    assert_int_equal(symlink(target, p), 0);
}

/* A segment that is a link: never extended or written, its pages not read. */
static void test_segment_link_not_followed(void **state)
{
    struct fx *f = *state;
    struct outside o;
    int err;
    make_store(f, 20);
    outside_make(f, &o, "outside.seg");
    link_in(f, "seg-000000.kvt", o.path);
    kvt_engine *e = open_ok(f, 1);
    assert_int_equal(get_page(e, 3, &err), 0);
    assert_int_equal(err, -ELOOP);
    /* The segment's slots cannot be written: DRAM and HBM fill, then EFULL. */
    assert_int_equal(try_put_pages(e, 100, 40), KVT_EFULL);
    assert_int_equal(kvt_flush(e), KVT_EFULL);
    kvt_close(e);
    outside_same(&o);
}

/* index/lock.mdb as a link: the engine, which no longer uses LMDB's lock
 * file, never opens it; the old engine rewrote its target. */
static void test_lock_mdb_link_not_followed(void **state)
{
    struct fx *f = *state;
    struct outside o;
    int err;
    make_store(f, 10);
    outside_make(f, &o, "outside.lock");
    link_in(f, "index/lock.mdb", o.path);
    kvt_engine *e = open_ok(f, 1);
    assert_int_equal(get_page(e, 3, &err), 1);
    put_pages(e, 10, 10);
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    outside_same(&o);
}

/* index/data.mdb or LOCK as a link, dangling or not: refused, the target
 * neither created nor written. */
static void test_index_and_lock_links_refused(void **state)
{
    struct fx *f = *state;
    struct outside o;
    char target[256];
    kvt_config c = cfg(f, 1);
    kvt_engine *e = NULL;
    make_store(f, 10);
    outside_make(f, &o, "outside.mdb");
    link_in(f, "index/data.mdb", o.path);
    assert_int_equal(t_open_io(&c, &e), -ELOOP);
    assert_non_null(strstr(kvt_last_error(), "data.mdb is a symbolic link"));
    outside_same(&o);

    path_in(target, sizeof(target), f->top, "made-by-lock");
    link_in(f, "LOCK", target);
    assert_int_equal(t_open_io(&c, &e), -ELOOP);
    assert_non_null(strstr(kvt_last_error(), "LOCK is a symbolic link"));
    assert_false(exists(target));
}

/* ---------------------------------------------------------------- 5: permissions */

/* Runs fn as a user the file modes apply to (nobody, when this is root) in
 * a child; the child's exit status is fn's count of failed checks. */
static void as_user(struct fx *f, int (*fn)(struct fx *))
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0) {
            if (chown(f->top, NOBODY, NOBODY) != 0 || setgroups(0, NULL) != 0 ||
                setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0)
                _exit(100);
        }
        _exit(fn(f));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 100)
        skip();
    assert_int_equal(WEXITSTATUS(status), 0);
    if (geteuid() == 0)
        assert_int_equal(chown(f->top, 0, 0), 0);
}

#define CHECK(c) (!(c) ? (fprintf(stderr, "failed: %s (%s)\n", #c, kvt_last_error()), 1) : 0)

static int child_store(struct fx *f, uint64_t n)
{
    kvt_config c = cfg(f, 1);
    kvt_engine *e = NULL;
    static _Alignas(4096) unsigned char page[PB];
    if (t_open_io(&c, &e))
        return 1;
    for (uint64_t i = 0; i < n; i++) {
        kvt_key k = t_key(i, 0, 0);
        const void *src = page;
        t_fill(page, PB, k, 1);
        if (kvt_put(e, &k, 1, &src, 0))
            return 1;
    }
    int r = kvt_flush(e);
    kvt_close(e);
    return r != 0;
}

/* Counts pages of [0, n) read back exactly; *first_err is the first error. */
static uint64_t child_read_all(kvt_engine *e, uint64_t n, int *first_err)
{
    static _Alignas(4096) unsigned char page[PB];
    uint64_t ok = 0;
    *first_err = 0;
    for (uint64_t i = 0; i < n; i++) {
        kvt_key k = t_key(i, 0, 0);
        void *dst = page;
        int found = 0, r = kvt_get(e, &k, 1, &dst, 0, &found);
        if (r && !*first_err)
            *first_err = r;
        ok += !r && found && t_check(page, PB, k, 1);
    }
    return ok;
}

static int unreadable_segment(struct fx *f)
{
    char seg[256];
    int bad = 0, err;
    path_in(seg, sizeof(seg), f->dir, "seg-000000.kvt");
    if (child_store(f, 90))
        return 1;
    kvt_config c = cfg(f, 1);
    kvt_engine *e = NULL;
    /* Read-only: every page still served. */
    bad += CHECK(chmod(seg, 0444) == 0);
    bad += CHECK(t_open_io(&c, &e) == 0);
    bad += CHECK(child_read_all(e, 90, &err) == 90);
    kvt_close(e);
    /* No access at all: the error as it is, and nothing forgotten. */
    bad += CHECK(chmod(seg, 0000) == 0);
    bad += CHECK(t_open_io(&c, &e) == 0);
    bad += CHECK(child_read_all(e, 90, &err) == 0);
    bad += CHECK(err == -EACCES);
    bad += CHECK(chmod(seg, 0600) == 0);
    bad += CHECK(child_read_all(e, 90, &err) == 90); /* the same engine tries again */
    kvt_close(e);
    bad += CHECK(t_open_io(&c, &e) == 0);
    bad += CHECK(child_read_all(e, 90, &err) == 90);
    kvt_close(e);
    return bad;
}

static void test_unreadable_segment_keeps_pages(void **state)
{
    as_user(*state, unreadable_segment);
}

static int unreadable_index(struct fx *f)
{
    char ix[256];
    int bad = 0;
    path_in(ix, sizeof(ix), f->dir, "index");
    if (child_store(f, 4))
        return 1;
    bad += CHECK(chmod(ix, 0000) == 0);
    for (int persist = 0; persist < 2; persist++) {
        kvt_config c = cfg(f, persist);
        kvt_engine *e = NULL;
        bad += CHECK(t_open_io(&c, &e) == -EACCES);
        bad += CHECK(strstr(kvt_last_error(), "index") != NULL);
    }
    bad += CHECK(chmod(ix, 0700) == 0);
    return bad;
}

static void test_unreadable_index_is_eacces(void **state)
{
    as_user(*state, unreadable_index);
}

/* ---------------------------------------------------------------- 7: errors */

/* RLIMIT_FSIZE (issue 32, finding 7): the kernel kills a process that
 * writes or allocates past it (SIGXFSZ), and a library must not kill its
 * host. Each case runs in a child with SIGXFSZ at its default, so a write
 * past the limit shows as the child killed. */
static int run_limited(struct fx *f, int (*fn)(struct fx *))
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_DFL);
        _exit(fn(f));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("the engine was killed by signal %d (%s)", WTERMSIG(status),
                 WTERMSIG(status) == SIGXFSZ ? "SIGXFSZ: a write past RLIMIT_FSIZE" : "?");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int set_fsize(rlim_t bytes)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_FSIZE, &lim) != 0)
        return -1;
    lim.rlim_cur = bytes;
    return setrlimit(RLIMIT_FSIZE, &lim);
}

/* With the limit at 64 slots (set before, or now when lower is set): 200
 * puts, one page each. Those up to what HBM, DRAM (12, and a spare) and
 * the 64 slots hold are stored and read back; the rest fail with
 * KVT_EFULL; no slot is retired. Closes e. */
static int store_under_limit(kvt_engine *e, bool lower)
{
    int bad = lower ? CHECK(set_fsize(64 * PB) == 0) : 0, r = 0;
    uint64_t stored = 0;
    for (uint64_t i = 0; i < 200 && r == 0; i++)
        if ((r = try_put_pages(e, i, 1)) == 0)
            stored++;
    bad += CHECK(r == 0 || r == KVT_EFULL);
    bad += CHECK(t_stats(e).ssd_bad_slots == 0);
    static _Alignas(4096) unsigned char page[PB];
    for (uint64_t i = 0; i < stored; i++) {
        kvt_key k = t_key(i, 0, 0);
        void *dst = page;
        int found = 0;
        bad += CHECK(kvt_get(e, &k, 1, &dst, 0, &found) == 0 && found && t_check(page, PB, k, 1));
    }
    if (CHECK(stored > 64 && stored <= 64 + 13))
        fprintf(stderr, "stored %llu\n", (unsigned long long)stored), bad++;
    kvt_close(e);
    return bad;
}

static kvt_engine *open_unlimited(struct fx *f, int *bad)
{
    kvt_config c = cfg(f, 0);
    kvt_engine *e = NULL;
    *bad += CHECK(t_open_io(&c, &e) == 0);
    return e;
}

/* The limit below the first segment (256 pages) at open: the 64 slots
 * under it take pages; the rest are parked. */
static int fsize_at_open(struct fx *f)
{
    int bad = CHECK(set_fsize(64 * PB) == 0);
    kvt_engine *e = open_unlimited(f, &bad);
    return e ? store_under_limit(e, false) + bad : bad;
}

/* The limit lowered while the engine is open: the same. */
static int fsize_while_open(struct fx *f)
{
    int bad = 0;
    kvt_engine *e = open_unlimited(f, &bad);
    return e ? store_under_limit(e, true) + bad : bad;
}

/* The limit lowered after the segment grew past it: slots whose blocks are
 * there already are checked too (one was handed out and its write raised
 * SIGXFSZ). */
static int fsize_after_growth(struct fx *f)
{
    int bad = 0;
    kvt_engine *e = open_unlimited(f, &bad);
    if (!e)
        return bad;
    bad += CHECK(try_put_pages(e, 0, 150) == 0);
    bad += CHECK(kvt_flush(e) == 0);
    for (uint64_t i = 0; i < 150; i++) {
        kvt_key k = t_key(i, 0, 0);
        bad += CHECK(kvt_drop(e, &k, 1) == 0);
    }
    return store_under_limit(e, true) + bad;
}

/* The limit below one slot: the open fails, saying so. */
static int fsize_below_a_slot(struct fx *f)
{
    int bad = CHECK(set_fsize(PB / 2) == 0);
    kvt_config c = cfg(f, 0);
    kvt_engine *e = NULL;
    bad += CHECK(t_open_io(&c, &e) == -EFBIG);
    bad += CHECK(strstr(kvt_last_error(), "RLIMIT_FSIZE") != NULL);
    return bad;
}

static void test_file_size_limit(void **state)
{
    struct fx *f = *state;
    assert_int_equal(run_limited(f, fsize_at_open), 0);
    t_rmtree(f->dir);
    assert_int_equal(mkdir(f->dir, 0700), 0);
    assert_int_equal(run_limited(f, fsize_while_open), 0);
    t_rmtree(f->dir);
    assert_int_equal(mkdir(f->dir, 0700), 0);
    assert_int_equal(run_limited(f, fsize_after_growth), 0);
    t_rmtree(f->dir);
    assert_int_equal(mkdir(f->dir, 0700), 0);
    assert_int_equal(run_limited(f, fsize_below_a_slot), 0);
}

/* Writes that fail with a full disk: kvt_flush says -ENOSPC, not a generic
 * -EIO, and no slot is retired for it (the medium is not at fault). */
static void test_enospc_is_enospc(void **state)
{
    struct fx *f = *state;
    struct kvt_io_fault full = { .op = KVT_IOF_WRITE, .nth = 1, .err = -ENOSPC, .repeat = true };
    struct kvt_io_faulty plan;
    kvt_io_faulty_init(&plan, NULL, &full);
    t_force_faulty(&plan);
    kvt_config c = cfg(f, 0);
    kvt_engine *e = NULL;
    int r = t_open_io(&c, &e);
    t_force_faulty(NULL);
    assert_int_equal(r, 0);
    r = try_put_pages(e, 0, 20);    /* more than HBM and DRAM hold */
    if (r == 0)
        r = kvt_flush(e);
    assert_int_equal(r, -ENOSPC);
    assert_non_null(strstr(kvt_last_error(), "No space left on device"));
    assert_int_equal(t_stats(e).ssd_bad_slots, 0);
    kvt_io_faulty_set(&plan, NULL);
    put_pages(e, 0, 20);              /* the space is back: the same slots serve */
    assert_int_equal(kvt_flush(e), 0);
    assert_int_equal(t_stats(e).ssd_bad_slots, 0);
    kvt_close(e);
}

/* The layout's own words, and an acquire that can never fit. */
static void test_error_messages(void **state)
{
    struct fx *f = *state;
    char p[256];
    make_store(f, 4);
    kvt_engine *e = open_ok(f, 1);
    void *ptr[5];
    kvt_key k[5];
    put_pages(e, 4, 1);
    for (int i = 0; i < 5; i++)
        k[i] = t_key((uint64_t)i, 0, 0);
    assert_int_equal(kvt_acquire(e, k, 5, ptr), KVT_EFULL);
    assert_non_null(strstr(kvt_last_error(), "would pin 5 pages in HBM, which has 4 slots"));
    assert_int_equal(t_stats(e).pinned_pages, 0);
    kvt_close(e);

    /* slot_bytes edited: the reopen wipes, and its message on stderr says
     * which sizes differ (it used to name page_bytes twice). */
    path_in(p, sizeof(p), f->dir, "KVTIER");
    write_file(p, "kvtier-ssd 1\npage_bytes 16384\nslot_bytes 20480\nslots_per_segment 65536\n");
    char text[4096];
    e = open_said(f, text, sizeof(text));
    kvt_close(e);
    assert_non_null(strstr(text, "slot_bytes 20480"));
    assert_non_null(strstr(text, "this engine uses 16384 and 16384"));
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* slots_per_segment comes from the KVTIER file, so any value up to 2^32 - 1
 * must size the segment tables right: the segment count was computed in 32
 * bits and wrapped to 0 for the largest, which left zero-length tables that
 * every access overran, segments never synced and their descriptors never
 * closed. Such a layout only puts every slot in segment 0. */
static void test_layout_huge_slots_per_segment(void **state)
{
    struct fx *f = *state;
    char p[256];
    int err;
    make_store(f, 8);
    path_in(p, sizeof(p), f->dir, "KVTIER");
    write_file(p, "kvtier-ssd 1\npage_bytes 16384\nslot_bytes 16384\n"
                  "slots_per_segment 4294967295\n");
    int before = open_fds();
    kvt_engine *e = open_ok(f, 1);
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(get_page(e, i, &err), 1);
    put_pages(e, 8, 40);                /* past DRAM: written to segment 0 */
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    assert_int_equal(open_fds(), before);
    e = open_ok(f, 1);
    for (uint64_t i = 0; i < 48; i++)
        assert_int_equal(get_page(e, i, &err), 1);
    kvt_close(e);
    assert_int_equal(open_fds(), before);
}

/* An acquire of more SSD-only pages than DRAM has slots: each page is read
 * into DRAM, copied up, and its DRAM slot reused; it used to hang (two
 * pages of the acquire took each other's DRAM slot for ever). */
static void test_acquire_more_than_dram(void **state)
{
    struct fx *f = *state;
    kvt_config c = cfg(f, 0);
    kvt_engine *e = NULL;
    void *ptr[16];
    kvt_key k[16];
    c.hbm_bytes = 16 * PB;
    c.dram_bytes = 4 * PB;
    assert_int_equal(t_open_io(&c, &e), 0);
    put_pages(e, 0, 40);    /* pages 0..15 end up on SSD only */
    for (int i = 0; i < 16; i++)
        k[i] = t_key((uint64_t)i, 0, 0);
    assert_int_equal(kvt_acquire(e, k, 16, ptr), 0);
    for (int i = 0; i < 16; i++)
        assert_true(t_check_page(e, ptr[i], PB, k[i], 1));
    assert_int_equal(kvt_release(e, k, 16, 0), 0);
    kvt_close(e);
}

/* The index removed while segments stay: the engine says so. */
static void test_missing_index_said(void **state)
{
    struct fx *f = *state;
    char p[256], text[4096];
    make_store(f, 4);
    path_in(p, sizeof(p), f->dir, "index/data.mdb");
    assert_int_equal(unlink(p), 0);
    kvt_engine *e = open_said(f, text, sizeof(text));
    kvt_close(e);
    assert_non_null(strstr(text, "segment files were present"));
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_foreign_dir_refused),
        T(test_foreign_files_in_kvtier_dir_kept),
        T(test_missing_layout_refused),
        T(test_index_records_rewritten),
        T(test_version1_index_upgraded),
        T(test_segment_link_not_followed),
        T(test_lock_mdb_link_not_followed),
        T(test_index_and_lock_links_refused),
        T(test_unreadable_segment_keeps_pages),
        T(test_unreadable_index_is_eacces),
        T(test_file_size_limit),
        T(test_enospc_is_enospc),
        T(test_error_messages),
        T(test_missing_index_said),
        T(test_acquire_more_than_dram),
        T(test_layout_huge_slots_per_segment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
