/*
 * test_ssd_index.c — the SSD tier's LMDB index (store/ssd_index.h).
 *
 * Every test runs in its own mkdtemp() directory. Entries are derived from
 * their key (entry_for), so any entry read back is checked in full: a value
 * served under the wrong key or half written is caught. Damage tests edit the
 * files with LMDB directly or with plain file calls, then expect the open to
 * wipe with a message and leave a working index.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "kvt_build.h"
#include "store/ssd_index.h"
#include "store/ssd_store.h"
#include "api/api.h"

#define FP 0xF1F2F3F4ull
#define SMALL_MAP ((size_t)64 << 10)

/* ---------------------------------------------------------------- helpers */

static struct kvt_ssd_entry entry_for(kvt_key k, uint64_t gen, uint64_t fp)
{
    struct kvt_ssd_entry e = { 0 };
    uint64_t h = util_pattern_seed(k, 0);
    e.version = KVT_SSD_ENTRY_VERSION;
    e.codec = (uint8_t)(h % 3);
    e.segment = (uint32_t)(h >> 8);
    e.offset = (h >> 20) * 4096;
    e.stored_len = (uint32_t)(h >> 32) | 1;
    e.raw_len = 4096;
    e.crc = (uint32_t)(h >> 16);
    e.fingerprint = fp;
    e.generation = gen;
    return e;
}

static void assert_entry(const struct kvt_ssd_entry *got, kvt_key k, uint64_t gen, uint64_t fp)
{
    struct kvt_ssd_entry want = entry_for(k, gen, fp);
    assert_memory_equal(got, &want, sizeof(want));
}

static int commit1(struct kvt_index *ix, kvt_key k, uint64_t gen, bool sync)
{
    struct kvt_ssd_entry e = entry_for(k, gen, FP);
    return kvt_index_commit(ix, &k, &e, 1, NULL, 0, sync);
}

/* Commits keys (id, i % 4, i) for i in [from, to) in one batch, gen = i + 1. */
static int commit_range(struct kvt_index *ix, uint64_t id, uint32_t from, uint32_t to,
                        uint64_t fp, bool sync)
{
    size_t n = to - from;
    kvt_key *k = malloc(n * sizeof(*k));
    struct kvt_ssd_entry *e = malloc(n * sizeof(*e));
    assert_non_null(k);
    assert_non_null(e);
    for (size_t j = 0; j < n; j++) {
        uint32_t i = from + (uint32_t)j;
        k[j] = t_key(id, i % 4, i);
        e[j] = entry_for(k[j], i + 1, fp);
    }
    int rc = kvt_index_commit(ix, k, e, n, NULL, 0, sync);
    free(k);
    free(e);
    return rc;
}

static void check_range(struct kvt_index *ix, uint64_t id, uint32_t from, uint32_t to, uint64_t fp)
{
    for (uint32_t i = from; i < to; i++) {
        struct kvt_ssd_entry e;
        kvt_key k = t_key(id, i % 4, i);
        assert_int_equal(kvt_index_get(ix, &k, &e), 0);
        assert_entry(&e, k, i + 1, fp);
    }
}

static struct kvt_index *open_ok(const char *dir, bool persist, size_t map,
                                 struct kvt_index_open_info *info)
{
    struct kvt_index *ix = NULL;
    int rc = kvt_index_open(dir, persist, FP, map, &ix, info);
    if (rc)
        fail_msg("kvt_index_open: %s (%s)", kvt_strerror(rc), kvt_last_error());
    return ix;
}

static void file_path(char *out, size_t len, const char *dir, const char *name)
{
    snprintf(out, len, "%s/index/%s", dir, name);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int dir_setup(void **state)
{
    char *d = strdup("/tmp/kvt_ssd_index_XXXXXX");
    if (!d || !mkdtemp(d))
        return -1;
    *state = d;
    return 0;
}

static int dir_teardown(void **state)
{
    nftw(*state, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(*state);
    return 0;
}

/* Index with n entries of id 1 in dir, closed. */
static void make_index(const char *dir, uint32_t n)
{
    struct kvt_index *ix = open_ok(dir, true, 0, NULL);
    assert_int_equal(commit_range(ix, 1, 0, n, FP, true), 0);
    kvt_index_close(ix);
}

/* The open after damage: wiped, a message naming the file and the reason,
 * empty, usable, and still there at the next open. */
static void expect_wiped(const char *dir, const char *reason)
{
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(dir, true, 0, &info);
    assert_true(info.wiped);
    if (!strstr(info.message, "index") || !strstr(info.message, reason))
        fail_msg("message \"%s\" lacks \"%s\"", info.message, reason);
    assert_null(strchr(info.message, '\n'));
    assert_int_equal(kvt_index_count(ix), 0);
    assert_int_equal(commit_range(ix, 9, 0, 1, FP, true), 0);
    kvt_index_close(ix);
    ix = open_ok(dir, true, 0, &info);
    assert_false(info.wiped);
    assert_int_equal(info.kept, 1);
    check_range(ix, 9, 0, 1, FP);
    assert_int_equal(kvt_index_count(ix), 1);
    kvt_index_close(ix);
}

/* Writes one record with LMDB directly (the index must not be open in this
 * process: LMDB forbids two handles on one environment per process). */
static int raw_put(const char *dir, const char *db, const void *k, size_t kl, const void *v,
                   size_t vl)
{
    char path[512];
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val key = { kl, (void *)k }, val = { vl, (void *)v };
    snprintf(path, sizeof(path), "%s/index", dir);
    int rc = mdb_env_create(&env);
    if (rc)
        return rc;
    mdb_env_set_maxdbs(env, 2);
    if ((rc = mdb_env_open(env, path, 0, 0644)) != 0 ||
        (rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0)
        goto out_close;
    if ((rc = mdb_dbi_open(txn, db, 0, &dbi)) == 0 && (rc = mdb_put(txn, dbi, &key, &val, 0)) == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
out_close:
    mdb_env_close(env);
    return rc;
}

/* ---------------------------------------------------------------- basics */

static void test_put_get_roundtrip(void **state)
{
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(*state, true, 0, &info);
    struct kvt_ssd_entry e;
    kvt_key k = t_key(42, 3, 7), other = t_key(42, 3, 8);
    assert_false(info.wiped);
    assert_int_equal(info.kept, 0);
    assert_int_equal(kvt_index_count(ix), 0);
    assert_int_equal(commit1(ix, k, 11, false), 0);
    assert_int_equal(kvt_index_get(ix, &k, &e), 0);
    assert_entry(&e, k, 11, FP);
    assert_int_equal(kvt_index_get(ix, &other, &e), KVT_ENOTFOUND);
    assert_int_equal(kvt_index_count(ix), 1);
    assert_int_equal(kvt_index_sync(ix), 0);
    kvt_index_close(ix);
}

static void test_replace(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    kvt_key k = t_key(1, 0, 0);
    struct kvt_ssd_entry e, two[2] = { entry_for(k, 3, FP), entry_for(k, 4, FP) };
    kvt_key kk[2] = { k, k };
    assert_int_equal(commit1(ix, k, 1, false), 0);
    assert_int_equal(commit1(ix, k, 2, false), 0);
    assert_int_equal(kvt_index_get(ix, &k, &e), 0);
    assert_entry(&e, k, 2, FP);
    /* within one batch, the later put of a key wins */
    assert_int_equal(kvt_index_commit(ix, kk, two, 2, NULL, 0, true), 0);
    assert_int_equal(kvt_index_get(ix, &k, &e), 0);
    assert_entry(&e, k, 4, FP);
    assert_int_equal(kvt_index_count(ix), 1);
    kvt_index_close(ix);
}

/* A deletion queued for one version deletes only the entry that names its
 * slot: a newer write of the key, committed first, keeps its entry (issue
 * 32: a drop while the page's write was in flight, then a put of the key,
 * lost the new version's entry, and the engine took the page as on SSD). */
static void test_delete_where(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    kvt_key k = t_key(8, 0, 0);
    struct kvt_ssd_entry newer = entry_for(k, 12, FP), e;
    assert_int_equal(kvt_index_commit(ix, &k, &newer, 1, NULL, 0, false), 0);
    struct kvt_index_where old = { newer.segment, newer.offset + 4096 };
    assert_int_equal(kvt_index_delete_where(ix, &k, &old, 1), 0);
    assert_int_equal(kvt_index_get(ix, &k, &e), 0);
    assert_entry(&e, k, 12, FP);
    struct kvt_index_where same = { newer.segment, newer.offset };
    kvt_key missing = t_key(9, 0, 0);
    kvt_key both[2] = { k, missing };
    struct kvt_index_where at[2] = { same, same };
    assert_int_equal(kvt_index_delete_where(ix, both, at, 2), 0);
    assert_int_equal(kvt_index_get(ix, &k, &e), KVT_ENOTFOUND);
    assert_int_equal(kvt_index_delete_where(ix, both, NULL, 2), -EINVAL);
    kvt_index_close(ix);
}

static void test_delete(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    struct kvt_ssd_entry e;
    assert_int_equal(commit_range(ix, 5, 0, 3, FP, false), 0);
    kvt_key del[2] = { t_key(5, 1, 1), t_key(77, 0, 0) /* missing: ignored */ };
    assert_int_equal(kvt_index_commit(ix, NULL, NULL, 0, del, 2, false), 0);
    assert_int_equal(kvt_index_get(ix, &del[0], &e), KVT_ENOTFOUND);
    assert_int_equal(kvt_index_count(ix), 2);
    check_range(ix, 5, 0, 1, FP);
    check_range(ix, 5, 2, 3, FP);
    /* puts run before deletes: a key put and deleted in one batch is gone */
    kvt_key k = t_key(6, 0, 0);
    e = entry_for(k, 9, FP);
    assert_int_equal(kvt_index_commit(ix, &k, &e, 1, &k, 1, true), 0);
    assert_int_equal(kvt_index_get(ix, &k, &e), KVT_ENOTFOUND);
    assert_int_equal(kvt_index_count(ix), 2);
    kvt_index_close(ix);
}

static void test_bad_batch_applies_nothing(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    kvt_key k[3] = { t_key(1, 0, 0), t_key(1, 0, 1), t_key(1, 0, 2) };
    struct kvt_ssd_entry e[3] = { entry_for(k[0], 1, FP), entry_for(k[1], 2, FP),
                                  entry_for(k[2], 3, FP) };
    e[2].version = KVT_SSD_ENTRY_VERSION + 1;
    assert_int_equal(kvt_index_commit(ix, k, e, 3, NULL, 0, true), -EINVAL);
    assert_true(strlen(kvt_last_error()) > 0);
    assert_int_equal(kvt_index_commit(ix, NULL, e, 1, NULL, 0, false), -EINVAL);
    assert_int_equal(kvt_index_commit(ix, NULL, NULL, 0, NULL, 1, false), -EINVAL);
    assert_int_equal(kvt_index_count(ix), 0);
    assert_int_equal(kvt_index_max_generation(ix), 0);
    assert_int_equal(kvt_index_commit(ix, NULL, NULL, 0, NULL, 0, true), 0);
    kvt_index_close(ix);
}

/* ---------------------------------------------------------------- reopen */

static void test_reopen_finds_all(void **state)
{
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    /* sync=false: close makes it durable */
    assert_int_equal(commit_range(ix, 3, 0, 5000, FP, false), 0);
    kvt_index_close(ix);
    ix = open_ok(*state, true, 0, &info);
    assert_false(info.wiped);
    assert_int_equal(info.kept, 5000);
    assert_int_equal(info.dropped_fingerprint, 0);
    assert_int_equal(kvt_index_count(ix), 5000);
    check_range(ix, 3, 0, 5000, FP);
    kvt_index_close(ix);
}

static void test_persist0_wipes(void **state)
{
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(*state, false, 0, &info);
    assert_true(info.wiped);
    assert_string_equal(info.message, ""); /* nothing existed */
    kvt_index_close(ix);
    make_index(*state, 10);
    ix = open_ok(*state, false, 0, &info);
    assert_true(info.wiped);
    assert_string_equal(info.message, "persist=0: previous index discarded");
    assert_int_equal(kvt_index_count(ix), 0);
    assert_int_equal(kvt_index_max_generation(ix), 0);
    assert_int_equal(commit1(ix, t_key(1, 0, 0), 1, false), 0);
    kvt_index_close(ix);
}

static void test_fingerprint_filter(void **state)
{
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    /* interleaved so that the open deletes in the middle of pages */
    for (uint32_t i = 0; i < 600; i++) {
        kvt_key k = t_key(2, 0, i);
        struct kvt_ssd_entry e = entry_for(k, 1000 + i, i % 3 ? FP : FP + 1);
        assert_int_equal(kvt_index_commit(ix, &k, &e, 1, NULL, 0, false), 0);
    }
    kvt_index_close(ix);
    ix = open_ok(*state, true, 0, &info);
    assert_false(info.wiped);
    assert_int_equal(info.dropped_fingerprint, 200);
    assert_int_equal(info.kept, 400);
    assert_int_equal(kvt_index_count(ix), 400);
    assert_int_equal(kvt_index_max_generation(ix), 1000 + 599);
    for (uint32_t i = 0; i < 600; i++) {
        kvt_key k = t_key(2, 0, i);
        struct kvt_ssd_entry e;
        int rc = kvt_index_get(ix, &k, &e);
        if (i % 3) {
            assert_int_equal(rc, 0);
            assert_entry(&e, k, 1000 + i, FP);
        } else {
            assert_int_equal(rc, KVT_ENOTFOUND);
        }
    }
    kvt_index_close(ix);
    ix = open_ok(*state, true, 0, &info);
    assert_int_equal(info.dropped_fingerprint, 0);
    assert_int_equal(info.kept, 400);
    kvt_index_close(ix);
}

static void test_max_generation(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    assert_int_equal(kvt_index_max_generation(ix), 0);
    assert_int_equal(commit1(ix, t_key(1, 0, 0), 5, false), 0);
    assert_int_equal(commit1(ix, t_key(1, 0, 1), 17, false), 0);
    assert_int_equal(commit1(ix, t_key(1, 0, 2), 3, false), 0);
    assert_int_equal(kvt_index_max_generation(ix), 17);
    /* while open it is a high-water mark: deleting never lowers it */
    kvt_key k = t_key(1, 0, 1);
    assert_int_equal(kvt_index_commit(ix, NULL, NULL, 0, &k, 1, true), 0);
    assert_int_equal(kvt_index_max_generation(ix), 17);
    kvt_index_close(ix);
    /* after a reopen it is the largest generation stored */
    ix = open_ok(*state, true, 0, NULL);
    assert_int_equal(kvt_index_max_generation(ix), 5);
    kvt_index_close(ix);
}

/* ---------------------------------------------------------------- damage */

/* Counts entries that are not what their key says in *(uint64_t *)ctx. */
static int count_fn(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    struct kvt_ssd_entry want = entry_for(*k, v->generation, FP);
    (*(uint64_t *)ctx) += memcmp(v, &want, sizeof(want)) != 0;
    return 0;
}


static void test_garbage_file(void **state)
{
    char f[512];
    uint8_t junk[65536];
    make_index(*state, 100);
    file_path(f, sizeof(f), *state, "data.mdb");
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < sizeof(junk); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        junk[i] = (uint8_t)x;
    }
    FILE *fp = fopen(f, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(junk, 1, sizeof(junk), fp), sizeof(junk));
    fclose(fp);
    expect_wiped(*state, "data.mdb");
}

static void test_truncated_file(void **state)
{
    char f[512];
    struct stat st;
    file_path(f, sizeof(f), *state, "data.mdb");
    make_index(*state, 3000);
    assert_int_equal(stat(f, &st), 0);
    assert_true(st.st_size > 16 * 4096);
    assert_int_equal(truncate(f, st.st_size / 2), 0);
    expect_wiped(*state, "truncated");
    /* shorter than the two meta pages */
    make_index(*state, 3000);
    assert_int_equal(truncate(f, 6000), 0);
    expect_wiped(*state, "truncated");
}

static void test_empty_file(void **state)
{
    char f[512];
    file_path(f, sizeof(f), *state, "data.mdb");
    make_index(*state, 10);
    assert_int_equal(truncate(f, 0), 0);
    expect_wiped(*state, "empty");
}

/* A directory where data.mdb should be, or a file where index/ should be,
 * is not damage kvtier made: the open fails naming it, and nothing in it is
 * removed (an earlier version deleted the tree, a user's files with it). */
static void expect_refused(const char *dir, int want, const char *what)
{
    struct kvt_index *ix = NULL;
    struct kvt_index_open_info info;
    assert_int_equal(kvt_index_open(dir, true, FP, 0, &ix, &info), want);
    assert_null(ix);
    if (!strstr(kvt_last_error(), what))
        fail_msg("message \"%s\" lacks \"%s\"", kvt_last_error(), what);
}

static void test_file_is_directory(void **state)
{
    char f[512], inner[600], ixdir[512];
    struct stat st;
    file_path(f, sizeof(f), *state, "data.mdb");
    make_index(*state, 10);
    assert_int_equal(unlink(f), 0);
    assert_int_equal(mkdir(f, 0755), 0);
    snprintf(inner, sizeof(inner), "%s/stray", f);
    FILE *fp = fopen(inner, "w");
    assert_non_null(fp);
    fclose(fp);
    expect_refused(*state, -EINVAL, "data.mdb is a directory");
    assert_int_equal(stat(inner, &st), 0);
    /* and the index directory itself replaced by a file */
    snprintf(ixdir, sizeof(ixdir), "%s/index", (char *)*state);
    nftw(ixdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    fp = fopen(ixdir, "w");
    assert_non_null(fp);
    fclose(fp);
    expect_refused(*state, -ENOTDIR, "index is a regular file, not a directory");
    assert_int_equal(stat(ixdir, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* A mount namespace of this process's own, with /proc hidden; 77 when the
 * system allows none (then the test is skipped). */
static int hide_proc(void)
{
    char map[64];
    uid_t u = getuid();
    gid_t g = getgid();
    if (u == 0) {
        if (unshare(CLONE_NEWNS) != 0)
            return 77;
    } else {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0 ||
            write_text("/proc/self/setgroups", "deny") != 0)
            return 77;
        snprintf(map, sizeof(map), "%u %u 1", (unsigned)u, (unsigned)u);
        if (write_text("/proc/self/uid_map", map) != 0)
            return 77;
        snprintf(map, sizeof(map), "%u %u 1", (unsigned)g, (unsigned)g);
        if (write_text("/proc/self/gid_map", map) != 0)
            return 77;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("none", "/proc", "tmpfs", 0, NULL) != 0)
        return 77;
    return access("/proc/self/fd", F_OK) == 0 ? 77 : 0;
}

/* Child of test_index_without_proc: the exit code says what went wrong. */
static int no_proc_child(const char *top)
{
    char p[64], dir[96], mdb[128];
    int n = snprintf(p, sizeof(p), "%s/", top);
    memset(p + n, 'a', sizeof(p) - 1 - (size_t)n);
    p[sizeof(p) - 1] = 0;
    snprintf(dir, sizeof(dir), "%sb", p);
    if (mkdir(p, 0700) != 0 || mkdir(dir, 0700) != 0)
        return 10;
    int rc = hide_proc();
    if (rc)
        return rc;
    struct kvt_index *ix = NULL;
    if ((rc = kvt_index_open(dir, true, FP, 0, &ix, NULL)) != 0) {
        fprintf(stderr, "kvt_index_open: %s (%s)\n", kvt_strerror(rc), kvt_last_error());
        return 11;
    }
    rc = commit1(ix, t_key(1, 0, 0), 1, true);
    kvt_index_close(ix);
    if (rc)
        return 12;
    snprintf(mdb, sizeof(mdb), "%s/data.mdb", p);
    return access(mdb, F_OK) == 0 ? 13 : 0; /* LMDB wrote into another directory */
}

/* Without /proc, LMDB is given the index directory by its path instead of
 * /proc/self/fd/N. That path went through a 64-byte buffer: a longer one
 * was cut, and a cut path named another directory (here the 63-character
 * prefix of "<dir>/index" is a sibling directory, where LMDB then made a
 * data.mdb before the inode check refused it). */
static void test_index_without_proc(void **state)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(no_proc_child(*state));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        skip(); /* no mount namespace to hide /proc in */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child: %s %d", WIFEXITED(status) ? "exit" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static void test_wrong_format_version(void **state)
{
    uint32_t v[4] = { 0 }; /* first word: the format version */
    make_index(*state, 10);
    v[0] = 999;
    assert_int_equal(raw_put(*state, "meta", "version", 7, v, sizeof(v)), 0);
    expect_wiped(*state, "format 999");
    /* a record of another size is damage too */
    make_index(*state, 10);
    assert_int_equal(raw_put(*state, "meta", "version", 7, v, 3), 0);
    expect_wiped(*state, "version record");
}

static void test_wrong_size_value(void **state)
{
    uint8_t key[16] = { 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9 };
    /* at open: the whole index is wiped */
    make_index(*state, 10);
    assert_int_equal(raw_put(*state, "pages", key, 16, "short", 5), 0);
    expect_wiped(*state, "bad entry");

    /* while open (another process writes it): get and foreach refuse it */
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    assert_int_equal(commit_range(ix, 1, 0, 20, FP, true), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(raw_put(*state, "pages", key, 16, "short", 5) == 0 ? 0 : 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kvt_key k = t_key(1, 0, 9);
    struct kvt_ssd_entry e;
    assert_int_equal(kvt_index_get(ix, &k, &e), KVT_ECORRUPT);
    assert_non_null(strstr(kvt_last_error(), "1:0:9"));
    check_range(ix, 1, 0, 9, FP);
    uint64_t seen = 0;
    assert_int_equal(kvt_index_foreach(ix, count_fn, &seen), KVT_ECORRUPT);
    assert_int_equal(kvt_index_foreach(ix, NULL, NULL), -EINVAL);
    kvt_index_close(ix);
}

/* ---------------------------------------------------------------- growth */

static void test_map_growth(void **state)
{
    char f[512];
    struct stat st;
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(*state, true, SMALL_MAP, NULL);
    for (uint32_t b = 0; b < 200; b++)
        assert_int_equal(commit_range(ix, 1, b * 100, b * 100 + 100, FP, b % 50 == 0), 0);
    /* one batch that alone needs several doublings */
    assert_int_equal(commit_range(ix, 2, 0, 5000, FP, true), 0);
    assert_int_equal(kvt_index_count(ix), 25000);
    check_range(ix, 1, 0, 20000, FP);
    check_range(ix, 2, 0, 5000, FP);
    kvt_index_close(ix);
    file_path(f, sizeof(f), *state, "data.mdb");
    assert_int_equal(stat(f, &st), 0);
    assert_true(st.st_size > (off_t)(16 * SMALL_MAP));
    ix = open_ok(*state, true, SMALL_MAP, &info);
    assert_false(info.wiped);
    assert_int_equal(info.kept, 25000);
    assert_int_equal(commit_range(ix, 3, 0, 1000, FP, false), 0);
    assert_int_equal(kvt_index_count(ix), 26000);
    kvt_index_close(ix);
}

/* In a child under an address-space limit: doubling the map fails at some
 * point. The failing commit applies nothing, later calls fail cleanly (the
 * env has lost its map), and every batch that returned 0 survives. No
 * cmocka assert here: a failing one would return into the test runner in
 * the child. */
static int grow_fail_child(const char *dir, int wfd)
{
    static kvt_key k[200];
    static struct kvt_ssd_entry e[200];
    struct kvt_index *ix;
    long pages = 0;
    if (kvt_index_open(dir, true, FP, SMALL_MAP, &ix, NULL) != 0)
        return 10;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1)
        return 11;
    fclose(f);
    struct rlimit rl = { (rlim_t)pages * 4096 + (8u << 20), RLIM_INFINITY };
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 12;
    int rc = 0;
    for (uint32_t b = 0; b < 10000 && rc == 0; b++) {
        for (uint32_t i = 0; i < 200; i++) {
            k[i] = t_key(1, (b * 200 + i) % 4, b * 200 + i);
            e[i] = entry_for(k[i], b * 200 + i + 1, FP);
        }
        if ((rc = kvt_index_commit(ix, k, e, 200, NULL, 0, false)) == 0 &&
            write(wfd, &b, sizeof(b)) != sizeof(b))
            return 13;
    }
    if (rc != -ENOMEM)
        return 14;
    rc = kvt_index_get(ix, &k[0], &e[0]);
    if (rc != 0 && rc != -ENOMEM)
        return 15;
    kvt_index_close(ix);
    return 0;
}

static void test_map_growth_failure(void **state)
{
    if (KVT_BUILD_SANITIZE)
        skip(); /* the sanitizers reserve terabytes of address space */
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        _exit(grow_fail_child(*state, p[1]));
    }
    close(p[1]);
    int status;
    uint32_t b, n = 0;
    while (read(p[0], &b, sizeof(b)) == sizeof(b))
        n = b + 1;
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child: %s %d", WIFEXITED(status) ? "exit" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    assert_true(n > 0);
    struct kvt_index_open_info info;
    struct kvt_index *ix = open_ok(*state, true, 0, &info);
    assert_false(info.wiped);
    assert_int_equal(info.kept, n * 200);
    check_range(ix, 1, 0, n * 200, FP);
    kvt_index_close(ix);
}

/* ---------------------------------------------------------------- foreach */

struct collect {
    kvt_key keys[256];
    size_t n;
    size_t stop_at;  /* return 42 at this call (1-based); 0 = never */
    struct kvt_index *ix;
    int nested_get, nested_commit;
};

static int collect_fn(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    struct collect *c = ctx;
    struct kvt_ssd_entry e;
    assert_true(c->n < 256);
    assert_entry(v, *k, v->generation, FP);
    c->keys[c->n++] = *k;
    if (c->ix) {
        c->nested_get = kvt_index_get(c->ix, k, &e);
        c->nested_commit = commit1(c->ix, t_key(999, 0, 0), 1, false);
    }
    return c->n == c->stop_at ? 42 : 0;
}

static void test_foreach_order(void **state)
{
    static const uint64_t ids[] = { 0, 1, 255, 256, 1ull << 32, (1ull << 63) - 1, 1ull << 63,
                                    (1ull << 63) + 1, UINT64_MAX };
    static const uint32_t layers[] = { 0, 1, 256, UINT32_MAX - 1, UINT32_MAX };
    static const uint32_t idx[] = { 0, 1, 256, 65536, UINT32_MAX };
    kvt_key keys[225];
    size_t n = 0;
    for (size_t a = 0; a < 9; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < 5; c++)
                keys[n++] = t_key(ids[a], layers[b], idx[c]);
    /* committed in a scrambled order, in three batches */
    uint64_t x = 88172645463325252ull;
    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % (i + 1);
        kvt_key t = keys[i];
        keys[i] = keys[j];
        keys[j] = t;
    }
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    for (size_t b = 0; b < 3; b++) {
        struct kvt_ssd_entry e[75];
        for (size_t i = 0; i < 75; i++)
            e[i] = entry_for(keys[b * 75 + i], b * 75 + i + 1, FP);
        assert_int_equal(kvt_index_commit(ix, keys + b * 75, e, 75, NULL, 0, false), 0);
    }
    struct collect *c = calloc(1, sizeof(*c));
    assert_int_equal(kvt_index_foreach(ix, collect_fn, c), 0);
    assert_int_equal(c->n, 225);
    for (size_t i = 1; i < c->n; i++)
        assert_true(kvt_key_cmp(&c->keys[i - 1], &c->keys[i]) < 0);
    assert_int_equal(c->keys[0].id, 0);
    assert_int_equal(c->keys[224].id, UINT64_MAX);
    assert_int_equal(c->keys[224].layer, UINT32_MAX);
    assert_int_equal(c->keys[224].index, UINT32_MAX);
    free(c);
    kvt_index_close(ix);
}

static void test_foreach_early_stop(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    struct collect *c = calloc(1, sizeof(*c));
    assert_int_equal(kvt_index_foreach(ix, collect_fn, c), 0); /* empty */
    assert_int_equal(c->n, 0);
    assert_int_equal(commit_range(ix, 4, 0, 10, FP, false), 0);
    c->stop_at = 3;
    assert_int_equal(kvt_index_foreach(ix, collect_fn, c), 42);
    assert_int_equal(c->n, 3);
    /* fn may look keys up; it may not commit (the map could need to grow) */
    memset(c, 0, sizeof(*c));
    c->ix = ix;
    assert_int_equal(kvt_index_foreach(ix, collect_fn, c), 0);
    assert_int_equal(c->n, 10);
    assert_int_equal(c->nested_get, 0);
    assert_int_equal(c->nested_commit, -EDEADLK);
    assert_int_equal(kvt_index_count(ix), 10);
    free(c);
    kvt_index_close(ix);
}

/* ---------------------------------------------------------------- crash */

#define CRASH_PER 32      /* entries per batch: keys (b, i % 4, i) */
#define CRASH_CYCLES 10
#define CRASH_MAXB 32768 /* batches tracked; the child idles after that many */

static uint64_t crash_gen(uint64_t b, uint32_t i) { return b * CRASH_PER + i + 1; }

/* Commits batch b (and deletes batch b - 3) with sync, then reports b:
 * a reported batch is durable. Never returns. */
static void crash_child(const char *dir, int wfd)
{
    struct kvt_index *ix;
    struct kvt_index_open_info info;
    kvt_key k[CRASH_PER], del[CRASH_PER];
    struct kvt_ssd_entry e[CRASH_PER];
    if (kvt_index_open(dir, true, FP, SMALL_MAP, &ix, &info) != 0 || info.wiped)
        _exit(2);
    for (uint64_t b = kvt_index_max_generation(ix) / CRASH_PER;; b++) {
        while (b >= CRASH_MAXB)
            pause();
        for (uint32_t i = 0; i < CRASH_PER; i++) {
            k[i] = t_key(b, i % 4, i);
            e[i] = entry_for(k[i], crash_gen(b, i), FP);
            del[i] = t_key(b - 3, i % 4, i);
        }
        if (kvt_index_commit(ix, k, e, CRASH_PER, del, b >= 3 ? CRASH_PER : 0, true) != 0)
            _exit(3);
        if (write(wfd, &b, sizeof(b)) != sizeof(b))
            _exit(4);
    }
}

struct crash_seen {
    uint32_t count[CRASH_MAXB];   /* entries per batch */
    uint64_t max_b;
    int bad;
};

static int crash_fn(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    struct crash_seen *s = ctx;
    struct kvt_ssd_entry want = entry_for(*k, crash_gen(k->id, k->index), FP);
    if (k->id >= CRASH_MAXB || k->index >= CRASH_PER || k->layer != k->index % 4 ||
        memcmp(v, &want, sizeof(want)) != 0) {
        s->bad++;
        return 0;
    }
    s->count[k->id]++;
    s->max_b = k->id > s->max_b ? k->id : s->max_b;
    return 0;
}

/* Reopens after a kill and returns the newest batch present (-1: none).
 * last: the last batch reported committed (-1: none); prev: the newest
 * batch present at the previous check. Batches commit in order, batch b
 * deleting b - 3, so exactly newest - 2 .. newest must be there, each whole;
 * newest is at least last (reported means durable) and at most one beyond
 * what was known (one commit may finish unreported per kill). */
static int64_t crash_check(const char *dir, int64_t last, int64_t prev)
{
    struct kvt_index_open_info info;
    struct crash_seen *s = calloc(1, sizeof(*s));
    struct kvt_index *ix = open_ok(dir, true, 0, &info);
    assert_false(info.wiped);
    assert_int_equal(info.dropped_fingerprint, 0);
    assert_int_equal(kvt_index_foreach(ix, crash_fn, s), 0);
    assert_int_equal(s->bad, 0);
    int64_t newest = kvt_index_count(ix) ? (int64_t)s->max_b : -1;
    int64_t known = last > prev ? last : prev;
    if (newest < last || newest > known + 1)
        fail_msg("newest batch %lld, reported %lld, known %lld", (long long)newest,
                 (long long)last, (long long)known);
    for (int64_t b = 0; b < CRASH_MAXB; b++) {
        uint32_t want = b >= newest - 2 && b <= newest ? CRASH_PER : 0;
        if (s->count[b] != want)
            fail_msg("batch %lld has %u entries, expected %u (newest %lld, reported %lld)",
                     (long long)b, s->count[b], want, (long long)newest, (long long)last);
    }
    if (newest >= 0)
        assert_int_equal(kvt_index_max_generation(ix), (uint64_t)(newest + 1) * CRASH_PER);
    kvt_index_close(ix);
    free(s);
    return newest;
}

static void test_crash_kill(void **state)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    int64_t last = -1, newest = -1;
    print_message("crash seed %u\n", seed);
    kvt_index_close(open_ok(*state, true, 0, NULL)); /* the files exist from here on */
    for (int cycle = 0; cycle < CRASH_CYCLES; cycle++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            crash_child(*state, p[1]);
        }
        close(p[1]);
        usleep(5000 + rand_r(&seed) % 60000);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status))
            fail_msg("crash child exited with %d before the kill", WEXITSTATUS(status));
        uint64_t b;
        while (read(p[0], &b, sizeof(b)) == sizeof(b))
            last = (int64_t)b;
        close(p[0]);
        newest = crash_check(*state, last, newest);
    }
    print_message("crash: %lld batches committed over %d kills\n", (long long)newest + 1,
                  CRASH_CYCLES);
    assert_true(newest >= 0);
}

/* ---------------------------------------------------------------- readers */

struct readers {
    struct kvt_index *ix;
    atomic_bool stop;
    atomic_uint_fast64_t reads, foreachs;
    atomic_int errors;
    char first[200];
};

static void reader_error(struct readers *r, const char *what, int rc)
{
    if (atomic_fetch_add(&r->errors, 1) == 0)
        snprintf(r->first, sizeof(r->first), "%s: %s", what, kvt_strerror(rc));
}

static void *reader_main(void *arg)
{
    struct readers *r = arg;
    unsigned seed = (unsigned)(uintptr_t)pthread_self();
    for (uint64_t n = 0; !atomic_load(&r->stop); n++) {
        struct kvt_ssd_entry e;
        uint32_t i = rand_r(&seed) % 500, j = rand_r(&seed) % 15000;
        kvt_key seeded = t_key(1, i % 4, i), moving = t_key(2, j % 4, j);
        struct kvt_ssd_entry want = entry_for(seeded, i + 1, FP);
        int rc = kvt_index_get(r->ix, &seeded, &e);
        if (rc != 0)
            reader_error(r, "seeded get", rc);
        else if (memcmp(&e, &want, sizeof(e)) != 0)
            reader_error(r, "seeded value", 0);
        want = entry_for(moving, j + 1, FP);
        rc = kvt_index_get(r->ix, &moving, &e);
        if (rc != 0 && rc != KVT_ENOTFOUND)
            reader_error(r, "moving get", rc);
        if (rc == 0 && memcmp(&e, &want, sizeof(e)) != 0)
            reader_error(r, "moving value", 0);
        atomic_fetch_add(&r->reads, 2);
        if (n % 64 == 0) {   /* a long read txn now and then */
            uint64_t bad = 0;
            if ((rc = kvt_index_foreach(r->ix, count_fn, &bad)) != 0 || bad)
                reader_error(r, "foreach", rc);
            atomic_fetch_add(&r->foreachs, 1);
        }
    }
    return NULL;
}

static void test_concurrent_readers(void **state)
{
    struct readers r = { 0 };
    pthread_t th[3];
    r.ix = open_ok(*state, true, SMALL_MAP, NULL);
    assert_int_equal(commit_range(r.ix, 1, 0, 500, FP, true), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &r), 0);
    while (atomic_load(&r.reads) < 64) /* every run overlaps reads and growth */
        usleep(100);
    /* the writer grows the map from 64 KiB several times under the readers */
    for (uint32_t b = 0; b < 150; b++)
        assert_int_equal(commit_range(r.ix, 2, b * 100, b * 100 + 100, FP, b % 10 == 0), 0);
    atomic_store(&r.stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    if (atomic_load(&r.errors))
        fail_msg("%d reader errors, first: %s", atomic_load(&r.errors), r.first);
    assert_int_equal(kvt_index_count(r.ix), 15500);
    check_range(r.ix, 2, 0, 15000, FP);
    kvt_index_close(r.ix);
}

/* ---------------------------------------------------------------- bad slots */

struct bad_seen {
    uint32_t seg[8];
    uint64_t off[8];
    unsigned n;
};

static int bad_fn(void *ctx, uint32_t segment, uint64_t offset)
{
    struct bad_seen *b = ctx;
    if (b->n < 8) {
        b->seg[b->n] = segment;
        b->off[b->n] = offset;
    }
    b->n++;
    return 0;
}

/* Bad-slot records live beside the entries, never among them: the pages'
 * walk, count and gets do not see them, they come back in location order
 * after a reopen, and an as-is open (fsck, inspect) reads the index fine. */
static void test_bad_records(void **state)
{
    struct kvt_index *ix = open_ok(*state, true, 0, NULL);
    assert_int_equal(commit_range(ix, 1, 0, 10, FP, true), 0);
    uint32_t seg[3] = { 2, 0, 0 };
    uint64_t off[3] = { 4096, 1ull << 33, 8192 };
    assert_int_equal(kvt_index_bad_put(ix, seg, off, 3), 0);
    assert_int_equal(kvt_index_bad_put(ix, seg, off, 1), 0); /* again: kept once */
    kvt_index_close(ix);
    struct kvt_index_open_info info;
    ix = open_ok(*state, true, 0, &info);
    assert_false(info.wiped);
    assert_int_equal(info.kept, 10);
    assert_int_equal(kvt_index_count(ix), 10);
    check_range(ix, 1, 0, 10, FP);
    struct bad_seen b = { 0 };
    assert_int_equal(kvt_index_bad_foreach(ix, bad_fn, &b), 0);
    assert_int_equal(b.n, 3);
    assert_int_equal(b.seg[0], 0);
    assert_int_equal(b.off[0], 8192);
    assert_int_equal(b.seg[1], 0);
    assert_int_equal(b.off[1], 1ull << 33);
    assert_int_equal(b.seg[2], 2);
    assert_int_equal(b.off[2], 4096);
    kvt_index_close(ix);
    assert_int_equal(kvt_index_open_readonly(*state, &ix), 0);
    assert_int_equal(kvt_index_count(ix), 10);
    kvt_index_close(ix);
}

/* A slot retired after an I/O error stays retired after close and reopen
 * (it used to be forgotten at close and handed out again). */
static void test_bad_slot_survives_reopen(void **state)
{
    struct kvt_ssd *s = NULL;
    struct kvt_ssd_open_info info;
    const size_t pb = 4096, nslots = 16;
    int err = 0;
    assert_int_equal(kvt_ssd_open(*state, pb, nslots * pb, true, FP, NULL, NULL, &s, &info), 0);
    uint32_t a = kvt_ssd_alloc(s, &err), b = kvt_ssd_alloc(s, &err);
    assert_int_not_equal(a, KVT_NONE);
    assert_int_not_equal(b, KVT_NONE);
    kvt_ssd_mark_bad(s, b);             /* a write failed there */
    kvt_ssd_free(s, a);
    assert_int_equal(kvt_ssd_bad_slots(s), 1);
    kvt_ssd_close(s);

    for (int round = 0; round < 2; round++) { /* and again: the record is kept, not re-added */
        assert_int_equal(kvt_ssd_open(*state, pb, nslots * pb, true, FP, NULL, NULL, &s, &info),
                         0);
        assert_int_equal(kvt_ssd_bad_slots(s), 1);
        assert_int_equal(kvt_ssd_nfree(s), nslots - 1);
        for (size_t i = 0; i < nslots - 1; i++) {
            uint32_t got = kvt_ssd_alloc(s, &err);
            assert_int_not_equal(got, KVT_NONE);
            assert_int_not_equal(got, b);
        }
        assert_int_equal(kvt_ssd_alloc(s, &err), KVT_NONE);
        assert_int_equal(err, KVT_EFULL);
        kvt_ssd_close(s);
    }
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, dir_setup, dir_teardown)
    const struct CMUnitTest tests[] = {
        T(test_put_get_roundtrip),
        T(test_replace),
        T(test_delete),
        T(test_delete_where),
        T(test_bad_batch_applies_nothing),
        T(test_reopen_finds_all),
        T(test_persist0_wipes),
        T(test_fingerprint_filter),
        T(test_max_generation),
        T(test_garbage_file),
        T(test_truncated_file),
        T(test_empty_file),
        T(test_file_is_directory),
        T(test_wrong_format_version),
        T(test_wrong_size_value),
        T(test_map_growth),
        T(test_map_growth_failure),
        T(test_index_without_proc),
        T(test_foreach_order),
        T(test_foreach_early_stop),
        T(test_crash_kill),
        T(test_concurrent_readers),
        T(test_bad_records),
        T(test_bad_slot_survives_reopen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
