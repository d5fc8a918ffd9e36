/*
 * test_io.c — the storage I/O back-ends: whole requests byte-exact over
 * O_DIRECT files, batches deeper than the queue, fixed and plain buffers,
 * end of file, per-request errors, the faulty wrapper, the AUTO fallback and
 * the raw baseline. Every back-end test runs once per back-end (the prestate
 * names it); a back-end that cannot run here skips.
 */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "io/io.h"
#include "lab/faulty.h"
#include "lab/raw_bench.h"
#include "io/sched_attr.h"

#define FILE_BYTES (8u << 20)
#define ARENA_BYTES (4u << 20)

struct fx {
    const struct kvt_io_ops *ops; /* the back-end under test (the inner one for faulty) */
    bool have;                    /* built into this library */
    bool owner;                   /* "owner": uring with owner_reaps (no reaper thread) */
    char dir[PATH_MAX - 16];
    char path[PATH_MAX];
    int fd;
    char *arena;                  /* 4096-aligned, ARENA_BYTES */
    char env[16];                 /* KVT_IO_URING_DISABLE as the run began ("" = unset) */
};

static const char *const files[] = { "data", "short", "map" };

static void fx_file(const struct fx *f, const char *name, char *out)
{
    snprintf(out, PATH_MAX, "%s/%s", f->dir, name);
}

/* O_DIRECT where the file system allows it (tmpfs before 6.6 does not). */
static int t_open_direct(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL)
        fd = open(path, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    return fd;
}

static int fx_setup(void **state)
{
    const char *which = *state;
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->ops = &kvt_io_psync_ops;
    f->have = strcmp(which, "uring") != 0 || KVT_HAVE_URING;
#if KVT_HAVE_URING
    if (strcmp(which, "uring") == 0 || strcmp(which, "owner") == 0)
        f->ops = &kvt_io_uring_ops;
#endif
    f->owner = strcmp(which, "owner") == 0;
    if (f->owner)
        f->have = KVT_HAVE_URING;
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof(f->dir), "%s/kvt_io_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    const char *env = getenv("KVT_IO_URING_DISABLE");
    snprintf(f->env, sizeof(f->env), "%s", env ? env : "");
    assert_non_null(mkdtemp(f->dir));
    fx_file(f, "data", f->path);
    f->fd = t_open_direct(f->path);
    assert_int_equal(ftruncate(f->fd, FILE_BYTES), 0);
    assert_int_equal(posix_memalign((void **)&f->arena, 4096, ARENA_BYTES), 0);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    char p[PATH_MAX];
    if (f->env[0])
        setenv("KVT_IO_URING_DISABLE", f->env, 1);
    else
        unsetenv("KVT_IO_URING_DISABLE");
    close(f->fd);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        fx_file(f, files[i], p);
        unlink(p);
    }
    rmdir(f->dir);
    free(f->arena);
    free(f);
    return 0;
}

/* Opens ops over the fixture, skipping when the back-end cannot run here. */
/* The faulty back-end's plan (t_open_faulty); the other back-ends ignore it. */
static struct kvt_io_faulty t_plan;

static void *t_open(const struct fx *f, const struct kvt_io_ops *ops, unsigned depth,
                    void *fixed, size_t fixed_len)
{
    if (!f->have)
        skip();
    struct kvt_io_params p = { .depth = depth, .fixed_base = fixed, .fixed_len = fixed_len,
                               .arg = &t_plan, .owner_reaps = f->owner };
    void *priv = NULL;
    int rc = ops->open(&p, &priv);
    if (rc == -EPERM || rc == -ENOSYS)
        skip();
    assert_int_equal(rc, 0);
    return priv;
}

static struct kvt_io_req t_req(int fd, bool write, void *buf, size_t len, uint64_t off)
{
    return (struct kvt_io_req){ .fd = fd, .write = write, .buf = buf, .len = len, .off = off };
}

/* Page content keyed by its file offset: a page landing elsewhere fails. */
static void t_fill_at(void *buf, size_t len, uint64_t off, uint32_t version)
{
    for (size_t i = 0; i < len; i += T_PAGE)
        t_fill((char *)buf + i, T_PAGE, t_key((off + i) / T_PAGE, 0, 0), version);
}

static int t_check_at(const void *buf, size_t len, uint64_t off, uint32_t version)
{
    for (size_t i = 0; i < len; i += T_PAGE)
        if (!t_check((const char *)buf + i, T_PAGE, t_key((off + i) / T_PAGE, 0, 0), version))
            return 0;
    return 1;
}

/* Submits the n requests in one call and reaps them all: each comes back once, res set. */
static void t_run(const struct kvt_io_ops *ops, void *priv, struct kvt_io_req *r, size_t n)
{
    struct kvt_io_req **in = calloc(n, sizeof(*in)), **out = calloc(n, sizeof(*out));
    int *seen = calloc(n, sizeof(*seen));
    assert_true(in && out && seen);
    for (size_t i = 0; i < n; i++) {
        r[i].res = 1; /* no back-end writes 1 */
        in[i] = &r[i];
    }
    size_t before = ops->inflight(priv);
    assert_int_equal(ops->submit(priv, in, n), 0);
    assert_int_equal(ops->inflight(priv), before + n);
    for (size_t got = 0; got < n;) {
        int k = ops->reap(priv, out + got, n - got, 1);
        assert_true(k > 0);
        got += (size_t)k;
    }
    for (size_t i = 0; i < n; i++) {
        assert_true(out[i] >= r && out[i] < r + n);
        assert_int_equal(seen[out[i] - r]++, 0);
        assert_true(out[i]->res <= 0);
    }
    assert_int_equal(ops->inflight(priv), before);
    free(seen), free(out), free(in);
}

/* Writes pages [first, first+n) of the file with version v, from scratch memory. */
static void t_write_pages(const struct fx *f, size_t first, size_t n, uint32_t v)
{
    char *buf = NULL;
    size_t len = n * T_PAGE;
    assert_int_equal(posix_memalign((void **)&buf, 4096, len), 0);
    t_fill_at(buf, len, first * T_PAGE, v);
    assert_int_equal(pwrite(f->fd, buf, len, (off_t)(first * T_PAGE)), (ssize_t)len);
    free(buf);
}

/* ------------------------------------------------------------- back-ends */

static void test_roundtrip(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 8, f->arena, ARENA_BYTES);
    struct kvt_io_req r[16];
    size_t half = ARENA_BYTES / 2;
    for (size_t i = 0; i < 16; i++) {
        t_fill_at(f->arena + i * T_PAGE, T_PAGE, i * T_PAGE, 7);
        r[i] = t_req(f->fd, true, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
    }
    t_run(f->ops, io, r, 16);
    for (size_t i = 0; i < 16; i++) {
        assert_int_equal(r[i].res, 0);
        r[i] = t_req(f->fd, false, f->arena + half + i * T_PAGE, T_PAGE, i * T_PAGE);
    }
    t_run(f->ops, io, r, 16);
    for (size_t i = 0; i < 16; i++) {
        assert_int_equal(r[i].res, 0);
        assert_true(t_check_at(f->arena + half + i * T_PAGE, T_PAGE, i * T_PAGE, 7));
    }
    f->ops->close(io);
}

/* Writes n requests of len bytes (pages of version v) in one submit, reads
 * them back into the arena's second half in another, and checks every byte. */
static void t_write_read_back(const struct fx *f, void *io, size_t n, size_t len, uint32_t v)
{
    struct kvt_io_req *r = calloc(n, sizeof(*r));
    assert_non_null(r);
    for (size_t i = 0; i < n; i++) {
        t_fill_at(f->arena + i * len, len, i * len, v);
        r[i] = t_req(f->fd, true, f->arena + i * len, len, i * len);
    }
    t_run(f->ops, io, r, n);
    char *back = f->arena + ARENA_BYTES / 2;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r[i].res, 0);
        r[i] = t_req(f->fd, false, back + i * len, len, i * len);
    }
    t_run(f->ops, io, r, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(r[i].res, 0);
    assert_true(t_check_at(back, n * len, 0, v));
    free(r);
}

/* 100 requests at depth 8 in one submit(): psync blocks for room, uring queues them for
 * its reaper; neither reaps. */
static void test_batch_over_depth(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 8, f->arena, ARENA_BYTES);
    t_write_read_back(f, io, 100, 2 * T_PAGE, 3);
    f->ops->close(io);
}

/* Buffers inside the registered arena and outside it, mixed in one batch. */
static void test_fixed_and_plain_buffers(void **state)
{
    struct fx *f = *state;
    size_t fixed_len = ARENA_BYTES / 2;
    void *io = t_open(f, f->ops, 4, f->arena, fixed_len);
    if (f->ops != &kvt_io_psync_ops)
        assert_non_null(strstr(f->ops->describe(io), "fixed buffers"));
    char *plain = NULL;
    assert_int_equal(posix_memalign((void **)&plain, 4096, 8 * T_PAGE), 0);
    struct kvt_io_req r[8];
    for (size_t i = 0; i < 8; i++) {
        char *buf = i % 2 ? plain + i * T_PAGE : f->arena + i * T_PAGE;
        t_fill_at(buf, T_PAGE, i * T_PAGE, 5);
        r[i] = t_req(f->fd, true, buf, T_PAGE, i * T_PAGE);
    }
    t_run(f->ops, io, r, 8);
    /* Read back swapped: the fixed pages into plain memory and vice versa,
     * plus one request that ends at the last byte of the registered region. */
    memset(plain, 0, 8 * T_PAGE);
    memset(f->arena, 0, fixed_len);
    for (size_t i = 0; i < 8; i++) {
        char *buf = i % 2 ? f->arena + i * T_PAGE : plain + i * T_PAGE;
        r[i] = t_req(f->fd, false, buf, T_PAGE, i * T_PAGE);
    }
    r[7].buf = f->arena + fixed_len - T_PAGE;
    t_run(f->ops, io, r, 8);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(r[i].res, 0);
        assert_true(t_check_at(r[i].buf, T_PAGE, i * T_PAGE, 5));
    }
    free(plain);
    f->ops->close(io);
}

/* Requests of 1..16 pages at shuffled offsets, then read back in another order. */
static void test_random_offsets(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 16, f->arena, ARENA_BYTES);
    enum { N = 48, SLOT = 16 * T_PAGE };
    unsigned seed = 12345;
    struct kvt_io_req r[N];
    for (unsigned i = 0; i < N; i++) {
        size_t len = (1 + (unsigned)rand_r(&seed) % 16) * T_PAGE;
        uint64_t off = (uint64_t)((i * 29 + 7) % N) * SLOT; /* 29 is prime to N: a permutation */
        t_fill_at(f->arena + i * SLOT % (ARENA_BYTES / 2), len, off, 9);
        r[i] = t_req(f->fd, true, f->arena + i * SLOT % (ARENA_BYTES / 2), len, off);
        t_run(f->ops, io, &r[i], 1); /* arena space is reused: one at a time */
        assert_int_equal(r[i].res, 0);
    }
    char *back = NULL;
    assert_int_equal(posix_memalign((void **)&back, 4096, (size_t)N * SLOT), 0);
    for (unsigned i = 0; i < N; i++)
        r[i] = t_req(f->fd, false, back + (size_t)(N - 1 - i) * SLOT, r[i].len, r[i].off);
    t_run(f->ops, io, r, N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(r[i].res, 0);
        assert_true(t_check_at(r[i].buf, r[i].len, r[i].off, 9));
    }
    free(back);
    f->ops->close(io);
}

static void test_reap_min_wait_and_inflight(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 4, NULL, 0);
    struct kvt_io_req r[10], *in[10], *out[10];
    for (size_t i = 0; i < 10; i++) {
        r[i] = t_req(f->fd, false, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
        in[i] = &r[i];
    }
    assert_int_equal(f->ops->inflight(io), 0);
    assert_int_equal(f->ops->reap(io, out, 10, 0), 0);
    assert_int_equal(f->ops->reap(io, out, 10, 5), 0); /* nothing can complete: no wait */
    assert_int_equal(f->ops->submit(io, in, 10), 0);
    assert_int_equal(f->ops->inflight(io), 10);
    assert_int_equal(f->ops->reap(io, out, 3, 3), 3);
    assert_int_equal(f->ops->inflight(io), 7);
    assert_int_equal(f->ops->reap(io, out + 3, 7, 7), 7);
    assert_int_equal(f->ops->inflight(io), 0);
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(out[i]->res, 0);
    assert_int_equal(f->ops->submit(io, in, 0), 0);
    f->ops->close(io);
}

/* reap() hands completions back oldest first. One request in flight at a
 * time, so they complete in the order submitted; reaped one by one, they
 * must come back in that order. A stack of completions handed the newest
 * first, and an owner taking four a step (the SSD pipeline with a codec)
 * left a page a caller waited for under 20 ms of later read-ahead. */
static void test_reap_oldest_first(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 1, NULL, 0);
    struct kvt_io_req r[6], *in[6], *out[1];
    for (size_t i = 0; i < 6; i++) {
        r[i] = t_req(f->fd, false, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
        in[i] = &r[i];
    }
    assert_int_equal(f->ops->submit(io, in, 6), 0);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(f->ops->reap(io, out, 1, 1), 1);
        assert_ptr_equal(out[0], &r[i]);
        assert_int_equal(out[0]->res, 0);
    }
    f->ops->close(io);
}

/* A read that meets the end of the file cannot be whole: -EIO, never a
 * success with stale bytes in the tail of the buffer. */
static void test_read_past_eof(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 4, f->arena, ARENA_BYTES);
    char p[PATH_MAX];
    fx_file(f, "short", p);
    int fd = t_open_direct(p);
    assert_int_equal(ftruncate(fd, 6000), 0); /* ends mid-block */
    struct kvt_io_req r[4] = {
        t_req(f->fd, false, f->arena, 4 * T_PAGE, FILE_BYTES - 2 * T_PAGE), /* straddles the end */
        t_req(f->fd, false, f->arena + 4 * T_PAGE, T_PAGE, FILE_BYTES + (1u << 20)), /* beyond */
        t_req(fd, false, f->arena + 8 * T_PAGE, 2 * T_PAGE, 0),
        t_req(f->fd, false, f->arena + 12 * T_PAGE, 2 * T_PAGE, FILE_BYTES - 2 * T_PAGE),
    };
    t_run(f->ops, io, r, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(r[i].res, i == 3 ? 0 : -EIO); /* r[3] ends exactly at the end */
    close(fd);
    f->ops->close(io);
}

/* Errors are per request: a bad fd fails its own request only; an empty
 * request succeeds. */
static void test_errors_per_request(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 4, f->arena, ARENA_BYTES);
    t_write_pages(f, 0, 2, 1);
    struct kvt_io_req r[3] = {
        t_req(f->fd, false, f->arena, 2 * T_PAGE, 0),
        t_req(-1, false, f->arena + 2 * T_PAGE, T_PAGE, 0),
        t_req(f->fd, true, f->arena + 3 * T_PAGE, 0, 0),
    };
    t_run(f->ops, io, r, 3);
    assert_int_equal(r[0].res, 0);
    assert_true(t_check_at(f->arena, 2 * T_PAGE, 0, 1));
    assert_int_equal(r[1].res, -EBADF);
    assert_int_equal(r[2].res, 0);
    f->ops->close(io);
}

/* close() with requests not reaped waits for them: the data is on file. */
static void test_close_waits(void **state)
{
    struct fx *f = *state;
    void *io = t_open(f, f->ops, 8, f->arena, ARENA_BYTES);
    struct kvt_io_req r[32], *in[32];
    for (size_t i = 0; i < 32; i++) {
        t_fill_at(f->arena + i * T_PAGE, T_PAGE, i * T_PAGE, 11);
        r[i] = t_req(f->fd, true, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
        in[i] = &r[i];
    }
    assert_int_equal(f->ops->submit(io, in, 32), 0);
    f->ops->close(io);
    memset(f->arena, 0, 32 * T_PAGE);
    assert_int_equal(pread(f->fd, f->arena, 32 * T_PAGE, 0), 32 * T_PAGE);
    assert_true(t_check_at(f->arena, 32 * T_PAGE, 0, 11));
}

/* An arena io_uring refuses to register (a shared mapping of an ext4 file:
 * the kernel will not pin page-cache pages long-term) runs unregistered, and
 * says so; the data moves all the same. */
static void test_unregistrable_arena(void **state)
{
    struct fx *f = *state;
    char p[PATH_MAX];
    fx_file(f, "map", p);
    int mf = open(p, O_RDWR | O_CREAT, 0600);
    assert_true(mf >= 0);
    assert_int_equal(ftruncate(mf, 16 * T_PAGE), 0);
    char *m = mmap(NULL, 16 * T_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mf, 0);
    assert_true(m != MAP_FAILED);
    void *io = t_open(f, f->ops, 4, m, 16 * T_PAGE);
    const char *how = f->ops->describe(io);
    if (f->ops != &kvt_io_psync_ops)
        assert_true(strstr(how, "fixed buffers") || strstr(how, "unregistered buffers: "));
    struct kvt_io_req r[2] = { t_req(f->fd, true, m, 8 * T_PAGE, 0),
                               t_req(f->fd, false, m + 8 * T_PAGE, 8 * T_PAGE, 0) };
    t_fill_at(m, 8 * T_PAGE, 0, 12);
    t_run(f->ops, io, &r[0], 1);
    t_run(f->ops, io, &r[1], 1);
    assert_int_equal(r[0].res, 0);
    assert_int_equal(r[1].res, 0);
    assert_true(t_check_at(m + 8 * T_PAGE, 8 * T_PAGE, 0, 12));
    f->ops->close(io);
    munmap(m, 16 * T_PAGE);
    close(mf);
}

/* ------------------------------------------------------------ faulty */

static void *t_open_faulty(const struct fx *f, enum kvt_io_fault_op op, uint64_t nth, int err,
                           bool repeat)
{
    struct kvt_io_fault fault = { .op = op, .nth = nth, .err = err, .repeat = repeat };
    kvt_io_faulty_init(&t_plan, f->ops, &fault);
    void *io = t_open(f, &kvt_io_faulty_ops, 4, f->arena, ARENA_BYTES);
    assert_non_null(strstr(kvt_io_faulty_ops.describe(io), f->ops->name));
    return io;
}

/* Writes version 2 over pages 0..4 (version 1) through io, then reads the
 * file's pages 0..4 back into the arena; the requests' res stay in r. */
static void t_overwrite5(const struct fx *f, void *io, struct kvt_io_req *r)
{
    t_write_pages(f, 0, 5, 1);
    for (size_t i = 0; i < 5; i++) {
        t_fill_at(f->arena + i * T_PAGE, T_PAGE, i * T_PAGE, 2);
        r[i] = t_req(f->fd, true, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
    }
    t_run(&kvt_io_faulty_ops, io, r, 5);
    memset(f->arena, 0, 5 * T_PAGE);
    assert_int_equal(pread(f->fd, f->arena, 5 * T_PAGE, 0), 5 * T_PAGE);
}

static void test_faulty_write_eio(void **state)
{
    struct fx *f = *state;
    void *io = t_open_faulty(f, KVT_IOF_WRITE, 3, 0, false);
    struct kvt_io_req r[5];
    t_overwrite5(f, io, r);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(r[i].res, i == 2 ? -EIO : 0);
        /* the failed write never reached the file */
        assert_true(t_check_at(f->arena + i * T_PAGE, T_PAGE, i * T_PAGE, i == 2 ? 1 : 2));
    }
    assert_int_equal(kvt_io_faulty_count(&t_plan, KVT_IOF_WRITE), 5);
    assert_int_equal(kvt_io_faulty_count(&t_plan, KVT_IOF_READ), 0);
    kvt_io_faulty_ops.close(io);
}

static void test_faulty_enospc_repeat(void **state)
{
    struct fx *f = *state;
    void *io = t_open_faulty(f, KVT_IOF_WRITE, 2, -ENOSPC, true);
    struct kvt_io_req r[5];
    t_overwrite5(f, io, r);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(r[i].res, i == 0 ? 0 : -ENOSPC);
        assert_true(t_check_at(f->arena + i * T_PAGE, T_PAGE, i * T_PAGE, i == 0 ? 2 : 1));
    }
    kvt_io_faulty_ops.close(io);
}

/* A failed read leaves the buffer as it was. */
static void test_faulty_read_eio(void **state)
{
    struct fx *f = *state;
    void *io = t_open_faulty(f, KVT_IOF_READ, 2, 0, false);
    t_write_pages(f, 0, 3, 4);
    memset(f->arena, 0xab, 3 * T_PAGE);
    struct kvt_io_req r[3];
    for (size_t i = 0; i < 3; i++)
        r[i] = t_req(f->fd, false, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
    t_run(&kvt_io_faulty_ops, io, r, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(r[i].res, i == 1 ? -EIO : 0);
    assert_true(t_check_at(f->arena, T_PAGE, 0, 4));
    for (size_t i = 0; i < T_PAGE; i++)
        assert_int_equal((unsigned char)f->arena[T_PAGE + i], 0xab);
    assert_true(t_check_at(f->arena + 2 * T_PAGE, T_PAGE, 2 * T_PAGE, 4));
    assert_int_equal(kvt_io_faulty_count(&t_plan, KVT_IOF_READ), 3);
    kvt_io_faulty_ops.close(io);
}

/* A persistent short read: half the bytes arrive, the request fails. */
static void test_faulty_short_read(void **state)
{
    struct fx *f = *state;
    void *io = t_open_faulty(f, KVT_IOF_SHORT_READ, 1, 0, false);
    t_write_pages(f, 0, 4, 6);
    memset(f->arena, 0xab, 4 * T_PAGE);
    struct kvt_io_req r = t_req(f->fd, false, f->arena, 4 * T_PAGE, 0);
    r.user = &r;
    t_run(&kvt_io_faulty_ops, io, &r, 1);
    assert_int_equal(r.res, -EIO);
    assert_ptr_equal(r.user, &r);
    assert_int_equal(r.len, 4 * T_PAGE); /* the caller's request is not rewritten */
    assert_true(t_check_at(f->arena, 2 * T_PAGE, 0, 6));
    for (size_t i = 2 * T_PAGE; i < 4 * T_PAGE; i++)
        assert_int_equal((unsigned char)f->arena[i], 0xab);
    kvt_io_faulty_ops.close(io);
}

/* The refused submit() queues nothing: no write lands, none is counted. */
static void test_faulty_submit(void **state)
{
    struct fx *f = *state;
    void *io = t_open_faulty(f, KVT_IOF_SUBMIT, 2, 0, false);
    t_write_pages(f, 0, 2, 1);
    struct kvt_io_req r[2], *in[2];
    for (size_t i = 0; i < 2; i++) {
        t_fill_at(f->arena + i * T_PAGE, T_PAGE, i * T_PAGE, 2);
        r[i] = t_req(f->fd, true, f->arena + i * T_PAGE, T_PAGE, i * T_PAGE);
        in[i] = &r[i];
    }
    t_run(&kvt_io_faulty_ops, io, &r[0], 1);
    assert_int_equal(r[0].res, 0);
    assert_int_equal(kvt_io_faulty_ops.submit(io, &in[1], 1), -EIO);
    assert_int_equal(kvt_io_faulty_ops.inflight(io), 0);
    assert_int_equal(kvt_io_faulty_count(&t_plan, KVT_IOF_SUBMIT), 2);
    assert_int_equal(kvt_io_faulty_count(&t_plan, KVT_IOF_WRITE), 1);
    kvt_io_faulty_ops.close(io);
    assert_int_equal(pread(f->fd, f->arena, 2 * T_PAGE, 0), 2 * T_PAGE);
    assert_true(t_check_at(f->arena, T_PAGE, 0, 2));
    assert_true(t_check_at(f->arena + T_PAGE, T_PAGE, T_PAGE, 1));
}

/* ------------------------------------------------------ choosing, baseline */

static void test_auto_falls_back_when_disabled(void **state)
{
    struct fx *f = *state;
    struct kvt_io_params p = { .depth = 8 };
    const struct kvt_io_ops *ops = NULL;
    void *io = NULL;
    char note[256];
    assert_int_equal(setenv("KVT_IO_URING_DISABLE", "1", 1), 0);
    assert_int_equal(kvt_io_open(KVT_IO_AUTO, &p, &ops, &io, note, sizeof(note)), 0);
    assert_ptr_equal(ops, &kvt_io_psync_ops);
    assert_true(strstr(note, "io_uring unavailable (") && strstr(note, "pread/pwrite pool"));
    if (f->have)
        assert_non_null(strstr(note, strerror(EPERM)));
    struct kvt_io_req r = t_req(f->fd, false, f->arena, T_PAGE, 0);
    t_run(ops, io, &r, 1);
    assert_int_equal(r.res, 0);
    ops->close(io);
    ops = NULL; /* URING is asked for by name: it fails instead of falling back */
    int rc = kvt_io_open(KVT_IO_URING, &p, &ops, &io, note, sizeof(note));
    assert_int_equal(rc, f->have ? -EPERM : KVT_ENOTSUP);
    assert_null(ops);
    assert_non_null(strstr(note, "io_uring unavailable")); /* teardown restores the variable */
}

static void test_open_by_name(void **state)
{
    struct kvt_io_params p = { .depth = 8 };
    const struct kvt_io_ops *ops = NULL;
    void *io = NULL;
    char note[256];
    assert_int_equal(kvt_io_open(KVT_IO_PSYNC, &p, &ops, &io, note, sizeof(note)), 0);
    assert_ptr_equal(ops, &kvt_io_psync_ops);
    assert_string_equal(note, "");
    ops->close(io);
    assert_int_equal(kvt_io_open(KVT_IO_AUTO, &p, &ops, &io, note, sizeof(note)), 0);
    assert_true(note[0] ? ops == &kvt_io_psync_ops : strcmp(ops->name, "uring") == 0);
    ops->close(io);
    assert_int_equal(kvt_io_open(7, &p, &ops, &io, note, sizeof(note)), -EINVAL);
    p.depth = 0;
    assert_int_equal(kvt_io_open(KVT_IO_PSYNC, &p, &ops, &io, note, sizeof(note)), -EINVAL);
}

static void test_raw_bench(void **state)
{
    struct fx *f = *state;
    double gbps = 0;
    int rc = kvt_io_raw_bench(AT_FDCWD, f->path, FILE_BYTES, 64 * 1024, 4, 256, true, &gbps);
    if (!f->have || rc == -EPERM || rc == -ENOSYS)
        skip();
    assert_int_equal(rc, 0);
    assert_true(gbps > 0);
    gbps = 0;
    assert_int_equal(kvt_io_raw_bench(AT_FDCWD, f->path, FILE_BYTES, 64 * 1024, 4, 256, false, &gbps), 0);
    assert_true(gbps > 0);
    /* a span past the end of the file is an error, not a fast zero */
    rc = kvt_io_raw_bench(AT_FDCWD, f->path, 2 * FILE_BYTES, FILE_BYTES, 1, 2, false, &gbps);
    assert_int_equal(rc, -EIO);
    assert_int_equal(kvt_io_raw_bench(AT_FDCWD, f->path, FILE_BYTES, 1000, 4, 8, false, &gbps), -EINVAL);
    /* in batches, each waited for (a synchronous caller's pace): batches
     * smaller and larger than the depth, one that does not divide n, and an
     * error inside a batch all end */
    unsigned batches[] = { 1, 3, 8 };
    for (int i = 0; i < 3; i++) {
        gbps = 0;
        assert_int_equal(kvt_io_raw_bench_batched(AT_FDCWD, f->path, FILE_BYTES, 64 * 1024, 4, 250,
                                                  batches[i], false, &gbps), 0);
        assert_true(gbps > 0);
    }
    rc = kvt_io_raw_bench_batched(AT_FDCWD, f->path, 2 * FILE_BYTES, FILE_BYTES, 2, 4, 3, false,
                                  &gbps);
    assert_int_equal(rc, -EIO);
}

/* A recorded pattern replayed raw (kvtier replay's baseline of the same
 * reads): scattered offsets in batches of uneven sizes, an empty batch
 * among them, a batch over the depth; every byte counted once. Unaligned
 * offsets and an empty list are refused; an offset past the end fails. */
static void test_raw_list(void **state)
{
    struct fx *f = *state;
    const size_t blk = 64 * 1024;
    uint64_t offs[12];
    for (int i = 0; i < 12; i++)
        offs[i] = (uint64_t)((i * 37) % (FILE_BYTES / blk)) * blk;
    uint32_t sizes[] = { 3, 0, 7, 2 };
    double gbps = 0;
    int rc = kvt_io_raw_list(AT_FDCWD, f->path, blk, 4, offs, sizes, 4, &gbps);
    if (!f->have || rc == -EPERM || rc == -ENOSYS)
        skip();
    assert_int_equal(rc, 0);
    assert_true(gbps > 0);
    uint64_t bad = offs[1];
    offs[1] = 1000;
    assert_int_equal(kvt_io_raw_list(AT_FDCWD, f->path, blk, 4, offs, sizes, 4, &gbps), -EINVAL);
    offs[1] = bad;
    uint32_t none[] = { 0, 0 };
    assert_int_equal(kvt_io_raw_list(AT_FDCWD, f->path, blk, 4, offs, none, 2, &gbps), -EINVAL);
    offs[11] = 2 * FILE_BYTES;
    assert_int_equal(kvt_io_raw_list(AT_FDCWD, f->path, blk, 4, offs, sizes, 4, &gbps), -EIO);
}

/* The file is opened without following a link at its name: kvtier run
 * measures the disk in a scratch file of the spill directory, where a link
 * would aim the writes at another file. */
static void test_raw_bench_no_link(void **state)
{
    struct fx *f = *state;
    char link[PATH_MAX], target[PATH_MAX + 16], text[8] = "";
    double gbps = 0;
    if (!f->have)
        skip();
    snprintf(target, sizeof(target), "%s.outside", f->dir);
    int fd = open(target, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "outside!", 8), 8);
    assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
    close(fd);
    fx_file(f, "map", link);
    assert_int_equal(symlink(target, link), 0);
    int rc = kvt_io_raw_bench(AT_FDCWD, link, FILE_BYTES, 64 * 1024, 4, 256, true, &gbps);
    fd = open(target, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, text, sizeof(text)), 8);
    close(fd);
    unlink(target);
    if (rc == -ENOSYS)
        skip();
    assert_int_equal(rc, -ELOOP);
    assert_memory_equal(text, "outside!", 8);
}

static void *t_slice_thread(void *arg)
{
    int *out = arg; /* [rc, nice before, nice after, runtime in us] */
    assert_int_equal(setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 3), 0);
    out[1] = getpriority(PRIO_PROCESS, 0);
    out[0] = kvt_io_short_slice();
    struct kvt_sched_attr a;
    memset(&a, 0, sizeof(a));
    if (syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) == 0) {
        out[2] = a.sched_nice;
        out[3] = (int)(a.sched_runtime / 1000);
    }
    return NULL;
}

/* The I/O threads' scheduling hint: a 0.1 ms slice, the nice value kept. */
static void test_short_slice(void **state)
{
    (void)state;
    int out[4] = { 1, -100, -100, -1 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, t_slice_thread, out), 0);
    pthread_join(t, NULL);
    if (out[0] == -ENOSYS || out[0] == -EINVAL || out[0] == -EPERM)
        skip(); /* a kernel or a sandbox without sched_setattr for this */
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 3);
    if (out[3] != 0) /* kernels before 6.12 keep no custom slice: 0 */
        assert_int_equal(out[3], 100);
}

/* Opens uring with a byte cap on what is in flight. */
static void *t_open_capped(const struct fx *f, unsigned depth, size_t max_bytes)
{
    if (!f->have)
        skip();
    struct kvt_io_params p = { .depth = depth, .max_bytes = max_bytes, .owner_reaps = f->owner };
    void *priv = NULL;
    int rc = f->ops->open(&p, &priv);
    if (rc == -EPERM || rc == -ENOSYS)
        skip();
    assert_int_equal(rc, 0);
    return priv;
}

/* io.h: a back-end that queues hands queued reads to the disk before queued
 * writes. At depth 1 a write of version 2 and then a read of the same page
 * go in one call: the read goes first, so it sees version 1 (in submission
 * order it would see 2; at depth 1 nothing overlaps). */
static void test_reads_before_writes(void **state)
{
    struct fx *f = *state;
    void *io = t_open_capped(f, 1, 0);
    struct kvt_io_req r[2];
    t_fill_at(f->arena, T_PAGE, 0, 1);
    r[0] = t_req(f->fd, true, f->arena, T_PAGE, 0);
    t_run(f->ops, io, r, 1);
    t_fill_at(f->arena, T_PAGE, 0, 2);
    r[0] = t_req(f->fd, true, f->arena, T_PAGE, 0);
    r[1] = t_req(f->fd, false, f->arena + T_PAGE, T_PAGE, 0);
    t_run(f->ops, io, r, 2);
    assert_true(t_check_at(f->arena + T_PAGE, T_PAGE, 0, 1));
    r[0] = t_req(f->fd, false, f->arena + T_PAGE, T_PAGE, 0); /* and the write landed */
    t_run(f->ops, io, r, 1);
    assert_true(t_check_at(f->arena + T_PAGE, T_PAGE, 0, 2));
    f->ops->close(io);
}

/* max_bytes holds queued requests back while bytes are in flight, but one
 * request always goes, however large: writes and reads of several times the
 * cap all complete, with the right bytes. */
static void test_max_bytes(void **state)
{
    struct fx *f = *state;
    void *io = t_open_capped(f, 8, T_PAGE);
    t_write_read_back(f, io, 6, 3 * T_PAGE, 5);
    f->ops->close(io);
}

/* Two faulty contexts over one plan, as an engine's mover and a caller
 * read at once (tiers/ssd_caller.c): each from its own thread, 64 reads in
 * submits of 4. The plan counts every read once and fails exactly its 50th,
 * whichever context sent it. */
struct shared_run {
    const struct fx *f;
    void *io;
    char *buf;
    struct kvt_io_req r[64];
};

static void *shared_reader(void *arg)
{
    struct shared_run *s = arg;
    for (size_t i = 0; i < 64; i += 4) {
        for (size_t k = i; k < i + 4; k++) {
            s->r[k] = t_req(s->f->fd, false, s->buf + (k % 8) * T_PAGE, T_PAGE, (k % 8) * T_PAGE);
            s->r[k].res = 1;
        }
        struct kvt_io_req *in[4] = { &s->r[i], &s->r[i + 1], &s->r[i + 2], &s->r[i + 3] }, *out[4];
        if (kvt_io_faulty_ops.submit(s->io, in, 4) != 0)
            return NULL;
        for (int got = 0; got < 4;) {
            int k = kvt_io_faulty_ops.reap(s->io, out + got, (size_t)(4 - got), 1);
            if (k <= 0)
                return NULL;
            got += k;
        }
    }
    return s;
}

static void test_faulty_shared_plan(void **state)
{
    struct fx *f = *state;
    t_write_pages(f, 0, 8, 4);
    struct kvt_io_fault fault = { .op = KVT_IOF_READ, .nth = 50, .err = -EIO };
    kvt_io_faulty_init(&t_plan, f->ops, &fault);
    struct shared_run run[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        run[t].f = f;
        run[t].io = t_open(f, &kvt_io_faulty_ops, 4, NULL, 0);
        run[t].buf = f->arena + (size_t)t * (ARENA_BYTES / 2);
        assert_int_equal(pthread_create(&th[t], NULL, shared_reader, &run[t]), 0);
    }
    int failed = 0;
    for (int t = 0; t < 2; t++) {
        void *ok = NULL;
        assert_int_equal(pthread_join(th[t], &ok), 0);
        assert_ptr_equal(ok, &run[t]);
        for (int i = 0; i < 64; i++) {
            assert_true(run[t].r[i].res == 0 || run[t].r[i].res == -EIO);
            failed += run[t].r[i].res == -EIO;
        }
        kvt_io_faulty_ops.close(run[t].io);
    }
    assert_int_equal(failed, 1);
    assert_int_equal(kvt_io_faulty_count(&t_plan, KVT_IOF_READ), 128);
}

/* Each back-end test on every back-end, named for the one it runs on:
 * "owner" is uring driven from the owner's thread (owner_reaps). */
#define ON(t, which) { #t "/" which, t, fx_setup, fx_teardown, (void *)which }
#define BOTH(t) ON(t, "uring"), ON(t, "psync"), ON(t, "owner")

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_roundtrip),
        BOTH(test_batch_over_depth),
        BOTH(test_fixed_and_plain_buffers),
        BOTH(test_random_offsets),
        BOTH(test_reap_min_wait_and_inflight),
        BOTH(test_reap_oldest_first),
        BOTH(test_read_past_eof),
        BOTH(test_errors_per_request),
        BOTH(test_close_waits),
        BOTH(test_unregistrable_arena),
        BOTH(test_faulty_write_eio),
        BOTH(test_faulty_enospc_repeat),
        BOTH(test_faulty_read_eio),
        BOTH(test_faulty_short_read),
        BOTH(test_faulty_submit),
        ON(test_auto_falls_back_when_disabled, "uring"),
        ON(test_open_by_name, "uring"),
        ON(test_raw_bench, "uring"),
        ON(test_raw_list, "uring"),
        ON(test_raw_bench_no_link, "uring"),
        ON(test_reads_before_writes, "uring"),
        ON(test_reads_before_writes, "owner"),
        ON(test_max_bytes, "uring"),
        ON(test_max_bytes, "owner"),
        BOTH(test_faulty_shared_plan),
        cmocka_unit_test(test_short_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
