/*
 * test_fsck.c — `kvtier inspect` and `kvtier fsck` (tools/fsck/) on spill
 * directories built here by hand, exactly as store/ssd_store.h lays them out:
 * the KVTIER file, preallocated segment files written with pwrite (raw pages,
 * or kvt_codec_encode output, padded with zeros to 4096) and index entries
 * committed through store/ssd_index.h. The engine's SSD tier is not needed.
 *
 * Each test damages one thing — a bit, a file length, an entry — and expects
 * exactly the entries it touched to be reported, with the reason fsck gives.
 * The commands also run end to end through inspect_main/fsck_main with their
 * output captured, for exit codes and what a user reads.
 */
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <inttypes.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "io/codec.h"
#include "store/ssd_index.h"
#include "store/ssd_store.h"
#include "tools/fsck/spill.h" /* inspect_main, fsck_main, fsck_verify */

#define PB 16384u       /* page_bytes = slot_bytes */
#define SPS 4u          /* slots per segment */
#define FP_A 0xA11CEull
#define FP_B 0xB0Bull
#define MAXP 16
#define NOBODY 65534    /* whom the unreadable test runs as, when it runs as root */

struct fx {
    char dir[64];
    struct kvt_index *ix;           /* open while building; closed before a command runs */
    struct kvt_codec *codec;        /* encodes any codec asked for */
    uint64_t gen;
    size_t n;
    kvt_key key[MAXP];              /* what was written, in order */
    struct kvt_ssd_entry ent[MAXP];
};

/* ---------------------------------------------------------------- building */

static uint64_t pad4k(uint64_t n) { return (n + 4095) & ~(uint64_t)4095; }

static void write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

static void seg_path(const struct fx *f, uint32_t seg, char *buf, size_t n)
{
    kvt_ssd_segment_path(f->dir, seg, buf, n);
}

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char path[128], layout[128];
    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/kvt_fsck_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    int n = snprintf(layout, sizeof(layout),
                     "kvtier-ssd 1\npage_bytes %u\nslot_bytes %u\nslots_per_segment %u\n", PB, PB,
                     SPS);
    snprintf(path, sizeof(path), "%s/KVTIER", f->dir);
    write_file(path, layout, (size_t)n);
    assert_int_equal(kvt_index_open(f->dir, true, FP_A, 0, &f->ix, NULL), 0);
    assert_int_equal(kvt_codec_new(KVT_CODEC_ZSTD, 0, PB, &f->codec), 0);
    *state = f;
    return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(p);
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    kvt_index_close(f->ix);
    kvt_codec_free(f->codec);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* A page that zstd shrinks: a quarter of key-dependent words, then zeros. */
static void page_for(kvt_key k, bool compressible, uint8_t *p)
{
    memset(p, 0, PB);
    t_fill(p, compressible ? PB / 4 : PB, k, 1);
}

/* Stores the page of k in global slot `slot` with codec, as the engine's
 * mover would, and indexes it (not committed durably until fx_done). */
static void put_page(struct fx *f, kvt_key k, int codec, uint32_t slot, uint64_t fp)
{
    uint8_t *raw = malloc(PB), *st = calloc(1, kvt_codec_bound(f->codec, PB) + 4096);
    struct kvt_ssd_entry e = { .version = KVT_SSD_ENTRY_VERSION };
    char path[128];
    size_t len = PB;
    int used = KVT_CODEC_NONE;
    assert_non_null(raw);
    assert_non_null(st);
    page_for(k, codec != KVT_CODEC_NONE, raw);
    if (codec == KVT_CODEC_NONE) {
        memcpy(st, raw, PB);
    } else {
        struct kvt_codec *c;
        assert_int_equal(kvt_codec_new(codec, 0, PB, &c), 0);
        assert_int_equal(kvt_codec_encode(c, raw, PB, st, kvt_codec_bound(c, PB), &len, &used), 0);
        kvt_codec_free(c);
    }
    assert_int_equal(used, codec);
    e.codec = (uint8_t)codec;
    e.segment = slot / SPS;
    e.offset = (uint64_t)(slot % SPS) * PB;
    e.stored_len = (uint32_t)len;
    e.raw_len = PB;
    e.fingerprint = fp;
    e.generation = ++f->gen;
    e.crc = kvt_crc32c(kvt_ssd_bind(&k, fp, e.generation), st, len);

    seg_path(f, e.segment, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    struct stat sb;
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &sb), 0);
    if (sb.st_size < (off_t)SPS * PB) /* preallocated when first used */
        assert_int_equal(ftruncate(fd, (off_t)SPS * PB), 0);
    assert_int_equal(pwrite(fd, st, pad4k(len), (off_t)e.offset), (ssize_t)pad4k(len));
    close(fd);
    assert_int_equal(kvt_index_commit(f->ix, &k, &e, 1, NULL, 0, false), 0);
    assert_true(f->n < MAXP);
    f->key[f->n] = k;
    f->ent[f->n++] = e;
    free(raw);
    free(st);
}

/* Pages (1, 0, i) in slots 0..n-1, codecs none, zstd, zstd-shuffle16 in turn. */
static void put_pages(struct fx *f, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        put_page(f, t_key(1, 0, i), (int)(i % 3), i, FP_A);
}

/* Closes the builder's index: LMDB must not be open twice in one process. */
static void fx_done(struct fx *f)
{
    kvt_index_close(f->ix);
    f->ix = NULL;
}

/* Puts entries as they are (no fingerprint filter), after fx_done. */
static void put_entry(struct fx *f, kvt_key k, struct kvt_ssd_entry e)
{
    struct kvt_index *ix;
    assert_int_equal(kvt_index_open_repair(f->dir, &ix), 0);
    assert_int_equal(kvt_index_commit(ix, &k, &e, 1, NULL, 0, true), 0);
    kvt_index_close(ix);
}

static void flip_byte(struct fx *f, const struct kvt_ssd_entry *e, uint64_t at)
{
    char path[128];
    uint8_t b;
    seg_path(f, e->segment, path, sizeof(path));
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, (off_t)(e->offset + at)), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)(e->offset + at)), 1);
    close(fd);
}

/* ---------------------------------------------------------------- running */

struct bads {
    int n;
    kvt_key key[MAXP];
    char reason[MAXP][24];
};

static void on_bad(void *ctx, const kvt_key *k, const char *reason)
{
    struct bads *b = ctx;
    assert_true(b->n < MAXP);
    b->key[b->n] = *k;
    snprintf(b->reason[b->n++], sizeof(b->reason[0]), "%s", reason);
}

static void expect_bad(const struct bads *b, int i, kvt_key k, const char *reason)
{
    assert_true(i < b->n);
    assert_memory_equal(&b->key[i], &k, sizeof(k));
    assert_string_equal(b->reason[i], reason);
}

static struct bads verify(struct fx *f, bool repair, uint64_t want_checked, int want_bad)
{
    struct bads b = { 0 };
    uint64_t checked = 0, bad = 0;
    assert_int_equal(fsck_verify(f->dir, repair, on_bad, &b, &checked, &bad), 0);
    assert_int_equal(checked, want_checked);
    assert_int_equal(bad, (uint64_t)want_bad);
    assert_int_equal(b.n, want_bad);
    return b;
}

/* Runs fn(argv...) with stdout and stderr captured into *out and *err
 * (malloc'ed, the caller frees); returns its exit code. */
static int run(int (*fn)(int, char **), char **out, char **err, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    while (argc < 15 && (argv[argc] = va_arg(ap, char *)) != NULL)
        argc++;
    va_end(ap);
    argv[argc] = NULL;
    return t_run_cmd(fn, argv, out, err);
}

#define RUN(fn, ...) run(fn, &out, &err, __VA_ARGS__, (char *)NULL)
#define HAS(s, sub)                                                                  \
    do {                                                                             \
        if (!strstr((s), (sub)))                                                     \
            fail_msg("expected \"%s\" in:\n%s", (sub), (s));                         \
    } while (0)

static void free2(char **out, char **err)
{
    free(*out);
    free(*err);
    *out = *err = NULL;
}

/* ---------------------------------------------------------------- tests */

static void test_clean(void **state)
{
    struct fx *f = *state;
    char *out, *err;
    put_pages(f, 6); /* two of each codec, over two segments */
    fx_done(f);
    verify(f, false, 6, 0);

    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 0);
    HAS(out, "checked 6 entries: 6 ok, 0 bad");
    free2(&out, &err);

    uint64_t stored = 0;
    char want[64];
    for (size_t i = 0; i < f->n; i++)
        stored += f->ent[i].stored_len;
    snprintf(want, sizeof(want), "\"bytes_verified\": %" PRIu64 ",", stored);
    assert_int_equal(RUN(fsck_main, "fsck", "--json", f->dir), 0);
    HAS(out, "\"entries\": 6, \"ok\": 6, \"bad\": 0,");
    HAS(out, want);
    HAS(out, "\"bad_entries\": []");
    HAS(err, "kvtier fsck"); /* the text went to stderr */
    free2(&out, &err);
}

static void test_bit_flip(void **state)
{
    struct fx *f = *state;
    char *out, *err;
    put_pages(f, 6);
    fx_done(f);
    flip_byte(f, &f->ent[4], f->ent[4].stored_len / 2); /* a zstd page */
    struct bads b = verify(f, false, 6, 1);
    expect_bad(&b, 0, f->key[4], "crc");

    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(out, "1:0:4");
    HAS(out, "crc");
    HAS(out, "5 ok, 1 bad (crc 1)");
    HAS(out, "--repair");
    free2(&out, &err);
}

static void test_truncated_segment(void **state)
{
    struct fx *f = *state;
    char path[128];
    for (uint32_t i = 0; i < 8; i++) /* raw pages: each fills its slot */
        put_page(f, t_key(1, 0, i), KVT_CODEC_NONE, i, FP_A);
    fx_done(f);
    seg_path(f, 1, path, sizeof(path));
    assert_int_equal(truncate(path, PB + PB / 2), 0); /* slot 4 whole, slot 5 half */
    struct bads b = verify(f, false, 8, 3);
    for (int i = 0; i < 3; i++)
        expect_bad(&b, i, f->key[5 + i], "past-eof");
}

static void test_bad_locations(void **state)
{
    struct fx *f = *state;
    put_pages(f, 2);
    fx_done(f);
    struct kvt_ssd_entry e = f->ent[0], x;
    x = e, x.offset = PB + 4096;
    put_entry(f, t_key(2, 0, 0), x);
    x = e, x.offset = (uint64_t)SPS * PB;
    put_entry(f, t_key(2, 0, 1), x);
    x = e, x.segment = 7;
    put_entry(f, t_key(2, 0, 2), x);
    x = e, x.raw_len = PB / 2;
    put_entry(f, t_key(2, 0, 3), x);
    x = e, x.codec = 9;
    put_entry(f, t_key(2, 0, 4), x);
    x = f->ent[1], x.stored_len = PB + 1; /* a zstd page longer than its slot */
    put_entry(f, t_key(2, 0, 5), x);

    struct bads b = verify(f, false, 8, 6);
    expect_bad(&b, 0, t_key(2, 0, 0), "misaligned");
    expect_bad(&b, 1, t_key(2, 0, 1), "outside-segment");
    expect_bad(&b, 2, t_key(2, 0, 2), "no-segment");
    expect_bad(&b, 3, t_key(2, 0, 3), "bad-length");
    expect_bad(&b, 4, t_key(2, 0, 4), "bad-codec");
    expect_bad(&b, 5, t_key(2, 0, 5), "bad-length");
}

static void test_shared_slot(void **state)
{
    struct fx *f = *state;
    char *out, *err;
    put_pages(f, 3);
    fx_done(f);
    /* Page 0's entry copied under another key: the CRC binds the bytes to
     * page 0's key, so the copy fails on its own (it would have been a
     * second good entry for the slot before entries were bound). */
    put_entry(f, t_key(5, 0, 0), f->ent[0]);
    /* An entry before page 1 in key order names its slot with a wrong crc:
     * it fails on its own, and page 1 still keeps the slot. */
    struct kvt_ssd_entry x = f->ent[1];
    x.crc ^= 1;
    put_entry(f, t_key(0, 0, 0), x);

    struct bads b = verify(f, false, 5, 2);
    expect_bad(&b, 0, t_key(0, 0, 0), "crc");
    expect_bad(&b, 1, t_key(5, 0, 0), "crc");
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(out, "not this key's page");
    free2(&out, &err);
}

static void test_decode_failure(void **state)
{
    struct fx *f = *state;
    char path[128];
    put_pages(f, 2); /* page 1 is zstd */
    fx_done(f);
    /* Garbage with a matching crc: only the decode can tell. */
    struct kvt_ssd_entry x = f->ent[1];
    uint8_t *junk = malloc(x.stored_len);
    assert_non_null(junk);
    for (uint32_t i = 0; i < x.stored_len; i++)
        junk[i] = (uint8_t)(i * 7 + 3);
    seg_path(f, x.segment, path, sizeof(path));
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, junk, x.stored_len, (off_t)x.offset), (ssize_t)x.stored_len);
    close(fd);
    x.crc = kvt_crc32c(kvt_ssd_bind(&f->key[1], x.fingerprint, x.generation), junk, x.stored_len);
    free(junk);
    put_entry(f, f->key[1], x);
    struct bads b = verify(f, false, 2, 1);
    expect_bad(&b, 0, f->key[1], "decode");
}

static void test_repair(void **state)
{
    struct fx *f = *state;
    char *out, *err;
    struct kvt_index *ix;
    struct kvt_ssd_entry got;
    put_pages(f, 6);
    fx_done(f);
    flip_byte(f, &f->ent[2], 10);
    put_entry(f, t_key(9, 0, 0), f->ent[3]);  /* shared slot */
    verify(f, false, 7, 2);

    assert_int_equal(RUN(fsck_main, "fsck", "--repair", f->dir), 0);
    HAS(out, "deleted 2 bad entries from the index");
    free2(&out, &err);

    verify(f, false, 5, 0);
    assert_int_equal(kvt_index_open_readonly(f->dir, &ix), 0);
    assert_int_equal(kvt_index_count(ix), 5);
    for (size_t i = 0; i < 6; i++) {
        int want = i == 2 ? KVT_ENOTFOUND : 0;
        assert_int_equal(kvt_index_get(ix, &f->key[i], &got), want);
        if (!want)
            assert_memory_equal(&got, &f->ent[i], sizeof(got));
    }
    assert_int_equal(kvt_index_get(ix, &(kvt_key){ 9, 0, 0 }, &got), KVT_ENOTFOUND);
    kvt_index_close(ix);

    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 0);
    HAS(out, "5 ok, 0 bad");
    free2(&out, &err);
}

/* (name, type, size, mtime) of every entry under dir, lock.mdb included:
 * inspect and fsck write nothing, not even LMDB's lock file. */
static char *snap_buf;
static size_t snap_len, snap_cap;

static int snap_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag;
    (void)ftw;
    if (snap_len < snap_cap)
        snap_len += (size_t)snprintf(snap_buf + snap_len, snap_cap - snap_len,
                                     "%s %o %lld %lld.%09ld\n", path, (unsigned)st->st_mode,
                                     (long long)st->st_size, (long long)st->st_mtim.tv_sec,
                                     st->st_mtim.tv_nsec);
    return 0;
}

static void snapshot(const char *dir, char *buf, size_t n)
{
    snap_buf = buf;
    snap_len = 0;
    snap_cap = n;
    buf[0] = 0;
    assert_int_equal(nftw(dir, snap_one, 16, FTW_PHYS), 0);
    assert_true(snap_len < n);
}

static void test_inspect(void **state)
{
    struct fx *f = *state;
    char *out, *err, before[4096], after[4096];
    struct kvt_index *ix;
    /* id 1: 3 pages, id 2: 2, id 3: 1; fingerprint B on 2 of them. */
    put_page(f, t_key(1, 0, 0), KVT_CODEC_NONE, 0, FP_A);
    put_page(f, t_key(1, 0, 1), KVT_CODEC_NONE, 1, FP_A);
    put_page(f, t_key(1, 1, 0), KVT_CODEC_ZSTD, 2, FP_A);
    put_page(f, t_key(2, 0, 0), KVT_CODEC_ZSTD_SHUFFLE16, 3, FP_A);
    put_page(f, t_key(2, 0, 1), KVT_CODEC_ZSTD, 4, FP_B);
    put_page(f, t_key(3, 0, 0), KVT_CODEC_ZSTD, 5, FP_B);
    fx_done(f);
    snapshot(f->dir, before, sizeof(before));

    assert_int_equal(RUN(inspect_main, "inspect", "--json", f->dir), 0);
    HAS(out, "\"layout\": {\"format\": 1, \"page_bytes\": 16384, \"slot_bytes\": 16384, "
             "\"slots_per_segment\": 4, \"segment_bytes\": 65536}");
    HAS(out, "{\"segment\": 0, \"bytes\": 65536");
    HAS(out, "{\"segment\": 1, \"bytes\": 65536");
    HAS(out, "\"entries\": 6, \"fingerprints\": [{\"fingerprint\": \"0x00000000000a11ce\", "
             "\"entries\": 4}, {\"fingerprint\": \"0x0000000000000b0b\", \"entries\": 2}]");
    HAS(out, "{\"codec\": \"none\", \"entries\": 2, \"stored_bytes\": 32768, "
             "\"raw_bytes\": 32768, \"ratio\": 1.0000}");
    HAS(out, "{\"codec\": \"zstd\", \"entries\": 3, \"stored_bytes\": ");
    HAS(out, "\"raw_bytes\": 49152");
    HAS(out, "{\"codec\": \"zstd-shuffle16\", \"entries\": 1,");
    HAS(out, "\"ids\": 3, \"top_ids\": [{\"id\": 1, \"pages\": 3}, {\"id\": 2, \"pages\": 2}, "
             "{\"id\": 3, \"pages\": 1}]");
    HAS(out, "\"generation_min\": 1, \"generation_max\": 6");
    HAS(out, "\"in_use\": false");
    free2(&out, &err);

    assert_int_equal(RUN(inspect_main, "inspect", f->dir), 0);
    HAS(out, "6 entries in 2 fingerprints");
    HAS(out, "fingerprint 0x0000000000000b0b  2 entries");
    free2(&out, &err);

    /* Nothing changed, and the other fingerprint's entries are all there. */
    snapshot(f->dir, after, sizeof(after));
    assert_string_equal(before, after);
    assert_int_equal(kvt_index_open_readonly(f->dir, &ix), 0);
    assert_int_equal(kvt_index_count(ix), 6);
    assert_int_equal(kvt_index_max_generation(ix), 6);
    kvt_index_close(ix);
}

static void test_garbage_index(void **state)
{
    struct fx *f = *state;
    char *out, *err, path[128];
    uint8_t junk[65536];
    put_pages(f, 2);
    fx_done(f);
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 131 + 17);
    snprintf(path, sizeof(path), "%s/index/data.mdb", f->dir);
    write_file(path, junk, sizeof(junk));

    assert_int_equal(fsck_verify(f->dir, false, NULL, NULL, NULL, NULL), KVT_ECORRUPT);
    assert_non_null(strstr(kvt_last_error(), "damaged"));
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(err, "damaged");
    HAS(err, path);
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "--repair", f->dir), 1);
    HAS(err, "cannot repair");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", f->dir), 1);
    HAS(err, "damaged");
    free2(&out, &err);

    char *now = t_slurp(path); /* left as it was */
    assert_memory_equal(now, junk, sizeof(junk));
    free(now);

    /* A truncated file: caught before LMDB maps past its end. */
    assert_int_equal(truncate(path, 3000), 0);
    assert_int_equal(fsck_verify(f->dir, false, NULL, NULL, NULL, NULL), KVT_ECORRUPT);
    assert_int_equal(RUN(inspect_main, "inspect", "--json", f->dir), 1);
    assert_string_equal(out, ""); /* no half object on stdout */
    free2(&out, &err);
}

static void test_not_a_spill_dir(void **state)
{
    struct fx *f = *state;
    char *out, *err, path[128], other[64];
    snprintf(other, sizeof(other), "/tmp/kvt_fsck_plain_XXXXXX");
    assert_non_null(mkdtemp(other));
    assert_int_equal(fsck_verify(other, false, NULL, NULL, NULL, NULL), -ENOENT);
    assert_int_equal(RUN(fsck_main, "fsck", other), 1);
    HAS(err, other);
    HAS(err, "not a kvtier spill directory");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", other), 1);
    HAS(err, "not a kvtier spill directory");
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "--repair", other), 1);
    free2(&out, &err);
    snprintf(path, sizeof(path), "%s/LOCK", other);
    assert_int_equal(access(path, F_OK), -1); /* nothing created in a foreign dir */
    rmdir(other);

    assert_int_equal(RUN(inspect_main, "inspect", "/nonexistent/kvt"), 1);
    HAS(err, "cannot open /nonexistent/kvt");
    free2(&out, &err);

    /* A damaged layout file. */
    fx_done(f);
    snprintf(path, sizeof(path), "%s/KVTIER", f->dir);
    write_file(path, "kvtier-ssd 7\n", 13);
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(err, "KVTIER is damaged");
    free2(&out, &err);
}

static void test_no_index(void **state)
{
    struct fx *f = *state;
    char *out, *err, path[128];
    fx_done(f);
    snprintf(path, sizeof(path), "%s/index", f->dir);
    t_rmtree(path);
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 0);
    HAS(out, "no index");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", "--json", f->dir), 0);
    HAS(out, "\"index\": {\"present\": false, \"entries\": 0}");
    free2(&out, &err);
    assert_int_equal(access(path, F_OK), -1); /* and none was made */
}

/* Segments without the index that names their pages: an error, not "nothing
 * to check" (the pages in them are lost, and fsck says so). */
static void test_segments_without_index(void **state)
{
    struct fx *f = *state;
    char *out, *err, path[128];
    put_pages(f, 3);
    fx_done(f);
    snprintf(path, sizeof(path), "%s/index/data.mdb", f->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(err, "segment files but no index");
    free2(&out, &err);
}

/* Two entries' keys exchanged in the index: each names the other's page,
 * and the CRC, bound to the key, says so. --repair drops both. */
static void test_exchanged_keys(void **state)
{
    struct fx *f = *state;
    put_pages(f, 4);
    fx_done(f);
    put_entry(f, f->key[1], f->ent[2]);
    put_entry(f, f->key[2], f->ent[1]);
    struct bads b = verify(f, false, 4, 2);
    expect_bad(&b, 0, f->key[1], "crc");
    expect_bad(&b, 1, f->key[2], "crc");
    verify(f, true, 4, 2);
    verify(f, false, 2, 0);
}

/* Links in the directory are never followed by inspect or fsck: lock.mdb
 * pointing outside is neither opened nor written, and a dangling LOCK is
 * not created by --repair. */
static void test_links_not_followed(void **state)
{
    struct fx *f = *state;
    char *out, *err, link[160], target[160], text[64] = "";
    put_pages(f, 2);
    fx_done(f);
    snprintf(target, sizeof(target), "%s.outside", f->dir);
    write_file(target, "outside", 7);
    snprintf(link, sizeof(link), "%s/index/lock.mdb", f->dir);
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(RUN(inspect_main, "inspect", f->dir), 0);
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 0);
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "--repair", f->dir), 0);
    free2(&out, &err);
    int fd = open(target, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, text, sizeof(text)), 7);
    close(fd);
    assert_memory_equal(text, "outside", 7);
    unlink(target);

    snprintf(link, sizeof(link), "%s/LOCK", f->dir);
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(RUN(fsck_main, "fsck", "--repair", f->dir), 1);
    HAS(err, "LOCK is a symbolic link");
    free2(&out, &err);
    assert_int_equal(access(target, F_OK), -1);
}

/* The "disk" object of inspect --json: what the sizes add up to. */
static void disk_json(const char *out, char *buf, size_t n)
{
    const char *d = strstr(out, "\"disk\": ");
    assert_non_null(d);
    snprintf(buf, n, "%s", d);
}

/* inspect's disk usage counts the directory's own files, not what a link
 * in it points to: lock.mdb and a name at the top linked to a 1 MiB file
 * outside add nothing (the sizes were read through the links). */
static void test_inspect_sizes_not_through_links(void **state)
{
    struct fx *f = *state;
    char *out, *err, link[160], target[160], before[512], after[512];
    static char big[1 << 20];
    put_pages(f, 2);
    fx_done(f);
    assert_int_equal(RUN(inspect_main, "inspect", "--json", f->dir), 0);
    disk_json(out, before, sizeof(before));
    free2(&out, &err);
    snprintf(target, sizeof(target), "%s.outside", f->dir);
    memset(big, 0x5a, sizeof(big));
    write_file(target, big, sizeof(big));
    snprintf(link, sizeof(link), "%s/index/lock.mdb", f->dir);
    unlink(link);
    assert_int_equal(symlink(target, link), 0);
    snprintf(link, sizeof(link), "%s/notes", f->dir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(RUN(inspect_main, "inspect", "--json", f->dir), 0);
    disk_json(out, after, sizeof(after));
    free2(&out, &err);
    unlink(target);
    assert_string_equal(before, after);
}

static void test_in_use(void **state)
{
    struct fx *f = *state;
    char *out, *err, path[128];
    put_pages(f, 2);
    fx_done(f);
    /* An engine holds LOCK exclusively; a second descriptor conflicts even in
     * this process. */
    snprintf(path, sizeof(path), "%s/LOCK", f->dir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(fsck_verify(f->dir, true, NULL, NULL, NULL, NULL), -EBUSY);
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(err, "in use by a running kvtier engine");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", "--json", f->dir), 0);
    HAS(out, "\"in_use\": true");
    free2(&out, &err);
    close(fd);
    verify(f, false, 2, 0);
}

static void test_usage(void **state)
{
    char *out, *err;
    (void)state;
    assert_int_equal(RUN(fsck_main, "fsck"), 2);
    HAS(err, "which directory");
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "/a", "/b"), 2);
    HAS(err, "unexpected argument '/b'");
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "--bogus", "/a"), 2);
    HAS(err, "unknown option '--bogus'");
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", ""), 2);
    HAS(err, "the directory name is empty");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", ""), 2);
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", "--repair", "/a"), 2);
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "--help"), 0);
    HAS(out, "usage: kvtier fsck DIR");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", "-h"), 0);
    HAS(out, "usage: kvtier inspect DIR");
    free2(&out, &err);
}

/* The two index opens fsck relies on: as it is, every fingerprint kept. */
static void test_index_as_is(void **state)
{
    struct fx *f = *state;
    struct kvt_index *ix;
    struct kvt_ssd_entry e;
    char path[128];
    snprintf(path, sizeof(path), "%s/none", f->dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(kvt_index_open_readonly(path, &ix), -ENOENT);
    assert_int_equal(kvt_index_open_repair(path, &ix), -ENOENT);
    assert_int_equal(access(strcat(path, "/index"), F_OK), -1);

    put_page(f, t_key(1, 0, 0), KVT_CODEC_NONE, 0, FP_A);
    put_page(f, t_key(1, 0, 1), KVT_CODEC_ZSTD, 1, FP_B);
    fx_done(f);
    assert_int_equal(kvt_index_open_readonly(f->dir, &ix), 0);
    assert_int_equal(kvt_index_count(ix), 2);
    assert_int_equal(kvt_index_max_generation(ix), 2);
    assert_int_not_equal(kvt_index_commit(ix, &f->key[0], &f->ent[0], 1, NULL, 0, true), 0);
    kvt_index_close(ix);

    assert_int_equal(kvt_index_open_repair(f->dir, &ix), 0);
    assert_int_equal(kvt_index_count(ix), 2);
    assert_int_equal(kvt_index_commit(ix, NULL, NULL, 0, &f->key[0], 1, true), 0);
    kvt_index_close(ix);
    assert_int_equal(kvt_index_open_readonly(f->dir, &ix), 0);
    assert_int_equal(kvt_index_get(ix, &f->key[1], &e), 0);
    assert_int_equal(e.fingerprint, FP_B);
    assert_int_equal(kvt_index_count(ix), 1);
    kvt_index_close(ix);
}

/* ---------------------------------------------------------------- unreadable segments */

/* Every page written reads back exactly through an engine with persist:
 * the entries fsck kept are the engine's pages again. */
static void read_back_all(struct fx *f)
{
    kvt_config c = t_config(PB, 2, 4);
    kvt_engine *e = NULL;
    uint8_t *want = malloc(PB), *got = aligned_alloc(4096, PB);
    assert_non_null(want);
    assert_non_null(got);
    c.ssd_bytes = 64 * PB;
    c.ssd_dir = f->dir;
    c.persist = 1;
    c.fingerprint = FP_A;
    t_opened(kvt_open(&c, &e));
    for (size_t i = 0; i < f->n; i++) {
        void *dst = got;
        int found = 0;
        assert_int_equal(kvt_get(e, &f->key[i], 1, &dst, 0, &found), 0);
        assert_true(found);
        page_for(f->key[i], f->ent[i].codec != KVT_CODEC_NONE, want);
        assert_memory_equal(got, want, PB);
    }
    kvt_close(e);
    free(want);
    free(got);
}

/* Entries in the index, or UINT64_MAX when it cannot be opened. */
static uint64_t index_count(struct fx *f)
{
    struct kvt_index *ix;
    if (kvt_index_open_readonly(f->dir, &ix) != 0)
        return UINT64_MAX;
    uint64_t n = kvt_index_count(ix);
    kvt_index_close(ix);
    return n;
}

/* Pages in slots 0..7, segment 0 holding the first four; the caller then
 * makes segment 0 unreadable. */
static void eight_pages(struct fx *f)
{
    put_pages(f, 8);
    fx_done(f);
}

/* Checks that count their failures instead of asserting: they also run in
 * a forked child, where a failed assert would unwind into the child's copy
 * of the test runner. */
#define CHECK(c) (!(c) ? (fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c), 1) : 0)

static int has(const char *s, const char *sub)
{
    if (strstr(s, sub))
        return 0;
    fprintf(stderr, "expected \"%s\" in:\n%s\n", sub, s);
    return 1;
}

/* fsck_main's exit status and output, against what it must say. */
static int run_has(int want_rc, const char *want1, const char *want2, char **argv3)
{
    char *out, *err;
    int bad = CHECK(run(fsck_main, &out, &err, argv3[0], argv3[1], argv3[2], (char *)NULL) ==
                    want_rc);
    bad += has(out, want1) + (want2 ? has(out, want2) : 0);
    free2(&out, &err);
    return bad;
}

/* Segment 0 cannot be read for the reason `why` names: no page is called
 * bad, the segment is reported unreadable with that reason and a fix, and
 * --repair deletes nothing (exit 3 both times). Returns failed checks. */
static int unreadable_checks(struct fx *f, const char *why)
{
    uint64_t checked = 0, nbad = UINT64_MAX;
    int bad = 0;
    bad += CHECK(fsck_verify(f->dir, false, NULL, NULL, &checked, &nbad) == 0);
    bad += CHECK(checked == 8 && nbad == 0);
    bad += run_has(3, "4 ok, 0 bad, 4 unreadable in 1 segment",
                   "unreadable seg-000000.kvt (4 entries): ",
                   (char *[]){ "fsck", f->dir, NULL });
    bad += run_has(3, why, "to fix: ", (char *[]){ "fsck", f->dir, NULL });
    bad += run_has(3, "\"entries\": 8, \"ok\": 4, \"bad\": 0,",
                   "\"unreadable\": 4, \"unreadable_segments\": [{\"segment\": 0, "
                   "\"entries\": 4,", (char *[]){ "fsck", "--json", f->dir });
    bad += run_has(3, "--repair never deletes them", NULL,
                   (char *[]){ "fsck", "--repair", f->dir });
    nbad = UINT64_MAX;
    bad += CHECK(fsck_verify(f->dir, true, NULL, NULL, &checked, &nbad) == 0);
    bad += CHECK(checked == 8 && nbad == 0);
    bad += CHECK(index_count(f) == 8);
    return bad;
}

/* The file restored: all good, and every page reads back. */
static void expect_restored(struct fx *f)
{
    char *out, *err;
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 0);
    HAS(out, "checked 8 entries: 8 ok, 0 bad;");
    free2(&out, &err);
    read_back_all(f);
}

/* A second hard link (a `cp -al` or rsnapshot backup): the engine refuses
 * the file ("Too many links") and keeps its pages; fsck --repair deleted
 * them all. */
static void test_hard_linked_segment(void **state)
{
    struct fx *f = *state;
    char seg[128], backup[128];
    eight_pages(f);
    seg_path(f, 0, seg, sizeof(seg));
    snprintf(backup, sizeof(backup), "%s.backup", f->dir);
    assert_int_equal(link(seg, backup), 0);
    assert_int_equal(unreadable_checks(f, "Too many links: it has 2 hard links"), 0);
    assert_int_equal(unlink(backup), 0);
    expect_restored(f);
}

/* The segment moved elsewhere and linked back: never followed, kept. */
static void test_symlinked_segment(void **state)
{
    struct fx *f = *state;
    char seg[128], moved[128];
    eight_pages(f);
    seg_path(f, 0, seg, sizeof(seg));
    snprintf(moved, sizeof(moved), "%s.seg0", f->dir);
    assert_int_equal(rename(seg, moved), 0);
    assert_int_equal(symlink(moved, seg), 0);
    assert_int_equal(unreadable_checks(f, "a symbolic link (to /tmp/kvt_fsck_"), 0);
    assert_int_equal(unlink(seg), 0);
    assert_int_equal(rename(moved, seg), 0);
    expect_restored(f);
}

static int chown_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return lchown(p, NOBODY, NOBODY);
}

/* Segment 0 at mode 0000, checked and repaired by a user the mode applies
 * to: this process when it is not root, else a child that gives the tree to
 * nobody and becomes nobody (root reads any file). The child's status is
 * its count of failed checks. */
static void test_unreadable_segment(void **state)
{
    struct fx *f = *state;
    char seg[128];
    eight_pages(f);
    seg_path(f, 0, seg, sizeof(seg));
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 &&
            (nftw(f->dir, chown_one, 16, FTW_PHYS) != 0 || setgroups(0, NULL) != 0 ||
             setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0))
            _exit(100);
        if (chmod(seg, 0000) != 0 || open(seg, O_RDONLY) >= 0)
            _exit(100); /* the mode does not stop this user */
        _exit(unreadable_checks(f, "Permission denied (mode 0000)") ? 1 : 0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 100)
        skip();
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(index_count(f), 8);
    assert_int_equal(chmod(seg, 0600), 0);
    expect_restored(f);
}

/* ---------------------------------------------------------------- layout bounds */

static void write_layout(struct fx *f, uint64_t page_bytes, uint64_t slot_bytes)
{
    char path[128], text[160];
    int n = snprintf(text, sizeof(text),
                     "kvtier-ssd 1\npage_bytes %" PRIu64 "\nslot_bytes %" PRIu64
                     "\nslots_per_segment %u\n", page_bytes, slot_bytes, SPS);
    snprintf(path, sizeof(path), "%s/KVTIER", f->dir);
    write_file(path, text, (size_t)n);
}

/* A layout file claiming a 1 TiB slot (or page) names the field and what a
 * slot can be; fsck allocated slot_bytes as the file said (ENOMEM). */
static void test_layout_huge_slot(void **state)
{
    struct fx *f = *state;
    char *out, *err;
    const uint64_t tib = 1ull << 40;
    put_pages(f, 2);
    fx_done(f);
    write_layout(f, PB, tib);
    assert_int_equal(fsck_verify(f->dir, false, NULL, NULL, NULL, NULL), KVT_ECORRUPT);
    assert_non_null(strstr(kvt_last_error(), "slot_bytes 1099511627776 is more than"));
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(err, "KVTIER is damaged: slot_bytes 1099511627776 is more than kvtier writes (at most "
             "4294963200");
    free2(&out, &err);
    assert_int_equal(RUN(fsck_main, "fsck", "--repair", f->dir), 1);
    HAS(err, "slot_bytes 1099511627776");
    free2(&out, &err);
    assert_int_equal(RUN(inspect_main, "inspect", f->dir), 1);
    HAS(err, "slot_bytes 1099511627776");
    free2(&out, &err);
    write_layout(f, tib, tib);
    assert_int_equal(RUN(fsck_main, "fsck", f->dir), 1);
    HAS(err, "page_bytes 1099511627776 is more than");
    free2(&out, &err);
    write_layout(f, PB, PB); /* as it was: nothing else changed */
    verify(f, false, 2, 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_clean),          T(test_bit_flip),    T(test_truncated_segment),
        T(test_bad_locations),  T(test_shared_slot), T(test_decode_failure),
        T(test_repair),         T(test_inspect),     T(test_garbage_index),
        T(test_not_a_spill_dir), T(test_no_index),   T(test_in_use),
        T(test_usage),          T(test_index_as_is), T(test_segments_without_index),
        T(test_exchanged_keys), T(test_links_not_followed),
        T(test_inspect_sizes_not_through_links),
        T(test_hard_linked_segment), T(test_symlinked_segment),
        T(test_unreadable_segment), T(test_layout_huge_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
