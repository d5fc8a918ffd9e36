/*
 * helpers.h — shared test helpers (t_ prefix). Header-only: each test program
 * is one translation unit.
 */
#ifndef KVT_TEST_HELPERS_H
#define KVT_TEST_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "include/kvtier.h"
#include "lab/tool.h"
#include "tools/util/util.h" /* util_now, util_median, the page pattern */

#define T_PAGE 4096u

/* The test program's own process, not a child it forked. */
static pid_t t_main_pid;
__attribute__((constructor)) static void t_note_main_pid(void)
{
    t_main_pid = getpid();
}

/* The device the tests run on: the host back-end, unless KVT_TEST_DEVICE
 * says "auto" or a CUDA ordinal (tools/gpu/check.sh runs the suite on a
 * GPU that way). A forked child always gets the host: CUDA cannot be used
 * in a child of a process that used it, so a child reopens on the host what
 * its parent wrote on the GPU (a spill directory does not record the
 * device). */
static inline int t_device(void)
{
    if (getpid() != t_main_pid)
        return KVT_DEVICE_HOST;
    const char *s = getenv("KVT_TEST_DEVICE");
    if (!s || !*s || !strcmp(s, "host"))
        return KVT_DEVICE_HOST;
    if (!strcmp(s, "auto"))
        return KVT_DEVICE_AUTO;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1024) {
        fprintf(stderr, "KVT_TEST_DEVICE=%s: expected host, auto or a CUDA ordinal\n", s);
        exit(2);
    }
    return (int)v;
}

/* A config (the host back-end unless KVT_TEST_DEVICE says otherwise) with
 * room for the given number of pages per tier. */
static inline kvt_config t_config(size_t page_bytes, size_t hbm_pages, size_t dram_pages)
{
    kvt_config c;
    kvt_config_init(&c);
    c.page_bytes = page_bytes;
    c.hbm_bytes = hbm_pages * page_bytes;
    c.dram_bytes = dram_pages * page_bytes;
    c.device = t_device();
    c.policy = "lru";
    return c;
}

static inline kvt_key t_key(uint64_t id, uint32_t layer, uint32_t index)
{
    kvt_key k = { id, layer, index };
    return k;
}

/* The deterministic content of a page of (k, version): the page pattern
 * the command checks too (tools/util/util.h), so a page served under the
 * wrong key, a stale version or a torn copy is caught. */
static inline void t_fill(void *p, size_t bytes, kvt_key k, uint32_t version)
{
    util_pattern_fill(p, bytes, k, version);
}

/* 1 when p holds exactly the content of (k, version). */
static inline int t_check(const void *p, size_t bytes, kvt_key k, uint32_t version)
{
    return util_pattern_check(p, bytes, k, version);
}

/* HBM pages (the pointers kvt_create and kvt_acquire give) are device
 * memory on a GPU: the CPU must not touch them. These read and write them
 * directly where the CPU can (the host back-end, and the faulty one over
 * it), else through a bounce buffer and the device's own copy. They assert
 * nothing, so worker threads may call them: 0, or an error said on stderr,
 * and a page check that could not copy is a failed check. */
static inline int t_hbm_cpu(kvt_engine *e)
{
    return strcmp(kvt_device_name(e), "cuda") != 0;
}

static inline int t_page_copy(kvt_engine *e, void *dst, const void *src, size_t n, int to_page)
{
    if (t_hbm_cpu(e)) {
        memcpy(dst, src, n);
        return 0;
    }
    int r = to_page ? kvt_tool_copy_to_page(e, dst, src, n) : kvt_tool_copy_from_page(e, dst, src, n);
    if (r)
        fprintf(stderr, "t_page_copy %s a page: %s (%s)\n", to_page ? "into" : "out of",
                kvt_strerror(r), kvt_last_error());
    return r;
}

/* n bytes from host memory src into HBM page memory at p, and back. */
static inline int t_page_write(kvt_engine *e, void *p, const void *src, size_t n)
{
    return t_page_copy(e, p, src, n, 1);
}

static inline int t_page_read(kvt_engine *e, void *dst, const void *p, size_t n)
{
    return t_page_copy(e, dst, p, n, 0);
}

/* t_fill and t_check of HBM page memory. */
static inline int t_fill_page(kvt_engine *e, void *p, size_t bytes, kvt_key k, uint32_t version)
{
    if (t_hbm_cpu(e)) {
        t_fill(p, bytes, k, version);
        return 0;
    }
    void *b = malloc(bytes);
    if (!b)
        return -ENOMEM;
    t_fill(b, bytes, k, version);
    int r = t_page_write(e, p, b, bytes);
    free(b);
    return r;
}

static inline int t_check_page(kvt_engine *e, const void *p, size_t bytes, kvt_key k,
                               uint32_t version)
{
    if (t_hbm_cpu(e))
        return t_check(p, bytes, k, version);
    void *b = malloc(bytes);
    int ok = b && t_page_read(e, b, p, bytes) == 0 && t_check(b, bytes, k, version);
    free(b);
    return ok;
}

/* Fails the test when an open returned r != 0, saying the engine's reason. */
static inline void t_opened(int r)
{
    if (r)
        print_error("kvt_open: %s (%s)\n", kvt_strerror(r), kvt_last_error());
    assert_int_equal(r, 0);
}

static inline kvt_stats t_stats(kvt_engine *e)
{
    kvt_stats s;
    assert_int_equal(kvt_get_stats(e, &s), 0);
    return s;
}

/* Reads page k (page_bytes) into a 4 KiB-aligned buffer, so that a page
 * only on SSD may be read straight into it: 1 with the bytes of version, 0
 * for a miss; fails the test on wrong bytes. */
static inline int t_get_page(kvt_engine *e, kvt_key k, size_t page_bytes, uint32_t version)
{
    void *buf = NULL;
    assert_int_equal(posix_memalign(&buf, 4096, page_bytes), 0);
    int found = -1;
    assert_int_equal(kvt_get(e, &k, 1, &buf, 0, &found), 0);
    if (found)
        assert_true(t_check(buf, page_bytes, k, version));
    free(buf);
    return found;
}

/* The fastest tier holding k, or KVT_TIER_NONE; kvt_exists' answer checked
 * against itself. */
static inline kvt_tier t_where(kvt_engine *e, kvt_key k)
{
    kvt_tier w = (kvt_tier)99;
    int r = kvt_exists(e, &k, 1, &w);
    assert_true(r == 0 || r == 1);
    assert_true(r == 1 ? w != KVT_TIER_NONE : w == KVT_TIER_NONE);
    return w;
}

static inline int t_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Removes a test's own temporary tree (no shell, no link followed). */
static inline void t_rmtree(const char *dir)
{
    nftw(dir, t_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Optional arguments of a test program (debugging): a test-name pattern to
 * run, then one to skip. */
/* A fresh directory /tmp/kvt-NAME-XXXXXX into dir (n bytes): 0, or -1 when
 * it cannot be made. For cmocka fixtures, which report failure by return. */
static inline int t_tmpdir(char *dir, size_t n, const char *name)
{
    int w = snprintf(dir, n, "/tmp/kvt-%s-XXXXXX", name);
    return w > 0 && (size_t)w < n && mkdtemp(dir) ? 0 : -1;
}

static inline void t_filter_args(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    if (argc > 2)
        cmocka_set_skip_filter(argv[2]);
}

/* ---------------------------------------------------------------- commands */

static inline char *t_slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    rewind(fp);
    char *s = calloc(1, (size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    return s;
}

/* Runs a command's main (fsck_main, run_main, ...) on argv (NULL-ended)
 * with stdout and stderr captured into *out and *err (malloc'ed, the caller
 * frees); returns its exit status. */
static inline int t_run_cmd(int (*fn)(int, char **), char **argv, char **out, char **err)
{
    char o[] = "/tmp/kvt-out-XXXXXX", e[] = "/tmp/kvt-err-XXXXXX";
    int argc = 0, fo = mkstemp(o), fe = mkstemp(e);
    while (argv[argc])
        argc++;
    assert_true(fo >= 0 && fe >= 0);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(fo);
    close(fe);
    *out = t_slurp(o);
    *err = t_slurp(e);
    unlink(o);
    unlink(e);
    return rc;
}

/* A persisted store of n pages (t_fill, version 1) of T_STORE_PB bytes in
 * dir, as an application leaves it; t_stored_pages counts those still
 * there, exact. */
#define T_STORE_PB 16384u

static inline kvt_config t_store_config(const char *dir)
{
    kvt_config c;
    kvt_config_init(&c);
    c.page_bytes = T_STORE_PB;
    c.hbm_bytes = 4 * T_STORE_PB;
    c.dram_bytes = 8 * T_STORE_PB;
    c.ssd_bytes = 64 * T_STORE_PB;
    c.ssd_dir = dir;
    c.device = KVT_DEVICE_HOST;
    c.policy = "lru";
    c.persist = 1;
    return c;
}

static inline void t_store_pages(const char *dir, uint64_t n)
{
    kvt_config c = t_store_config(dir);
    kvt_engine *e = NULL;
    static _Alignas(4096) unsigned char page[T_STORE_PB];
    t_opened(kvt_open(&c, &e));
    for (uint64_t i = 0; i < n; i++) {
        kvt_key k = t_key(i, 0, 0);
        const void *src = page;
        t_fill(page, T_STORE_PB, k, 1);
        assert_int_equal(kvt_put(e, &k, 1, &src, 0), 0);
    }
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
}

static inline uint64_t t_stored_pages(const char *dir, uint64_t n)
{
    kvt_config c = t_store_config(dir);
    kvt_engine *e = NULL;
    static _Alignas(4096) unsigned char page[T_STORE_PB];
    uint64_t ok = 0;
    t_opened(kvt_open(&c, &e));
    for (uint64_t i = 0; i < n; i++) {
        kvt_key k = t_key(i, 0, 0);
        void *dst = page;
        int found = 0;
        ok += kvt_get(e, &k, 1, &dst, 0, &found) == 0 && found && t_check(page, T_STORE_PB, k, 1);
    }
    kvt_close(e);
    return ok;
}

/* While child pid runs a command with TMPDIR=top: waits until a directory
 * in top holds name (KVTIER: the command's engine has opened its temporary
 * spill directory). 0 when it does; -1 when the child ended first, or after
 * two minutes (a failure, not a measurement). The child is not reaped. */
static inline int t_wait_spill_file(const char *top, const char *name, pid_t pid)
{
    for (int tries = 0; tries < 12000; tries++) {
        DIR *d = opendir(top);
        struct dirent *de;
        char path[512];
        bool found = false;
        while (d && !found && (de = readdir(d)) != NULL) {
            snprintf(path, sizeof(path), "%s/%s/%s", top, de->d_name, name);
            found = de->d_name[0] != '.' && access(path, F_OK) == 0;
        }
        if (d)
            closedir(d);
        if (found)
            return 0;
        siginfo_t si = { .si_pid = 0 };
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
            return -1;
        usleep(10000);
    }
    return -1;
}

/* Entries in dir besides "." and "..". */
static inline int t_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* Runs main_fn(argv) in a child with TMPDIR=top and SIGINT, SIGTERM at
 * their default actions, sends sig once its temporary spill directory has
 * a KVTIER file (the engine is open: mid-run), and returns the child's
 * wait status (-1 when it never got there). */
static inline int t_interrupt_cmd(int (*main_fn)(int, char **), char **argv, const char *top,
                                  int sig)
{
    int argc = 0, status = 0;
    while (argv[argc])
        argc++;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        setenv("TMPDIR", top, 1);
        _exit(main_fn(argc, argv));
    }
    int ready = t_wait_spill_file(top, "KVTIER", pid);
    kill(pid, ready == 0 ? sig : SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return ready == 0 ? status : -1;
}

/* t_interrupt_cmd, then the checks every command owes a signal: it ended
 * by that signal and left nothing in top (its temporary spill directory
 * went through the close path). Removes top. */
static inline void t_expect_interrupted(int (*main_fn)(int, char **), char **argv,
                                        const char *top, int sig)
{
    int status = t_interrupt_cmd(main_fn, argv, top, sig);
    int left = t_dir_entries(top);
    t_rmtree(top);
    assert_int_not_equal(status, -1);
    assert_int_equal(left, 0);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), sig);
}

#endif /* KVT_TEST_HELPERS_H */
