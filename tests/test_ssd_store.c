/*
 * test_ssd_store.c — the SSD store through the store interface
 * (store/store.h, store/ssd_store_ops.c): the batched calls, the slot calls
 * the engine's pipeline makes, and both seeing the same records.
 *
 * Every test runs in its own directory; pages are derived from their key,
 * so a page served for the wrong key or damaged shows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "io/codec.h"
#include "store/ssd_index.h"
#include "store/ssd_store.h"
#include "store/store.h"

#define PB 8192u
#define FP 0x5eedull

struct fx {
    char root[64], dir[96];
};

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f || t_tmpdir(f->root, sizeof(f->root), "ssd_store") < 0)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/spill", f->root);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    t_rmtree(f->root);
    free(f);
    return 0;
}

static kvt_key key_of(uint64_t id) { return (kvt_key){ id, 3, (uint32_t)id * 7 }; }

static void fill(void *buf, uint64_t id, uint64_t version)
{
    uint64_t *w = buf;
    for (size_t i = 0; i < PB / 8; i++)
        w[i] = id * 0x9e3779b97f4a7c15ull + version * 0x10001 + i;
}

struct opened {
    struct kvt_store *s;
    struct kvt_store_open_info info;
    uint64_t found, max_gen;
};

static int on_found(void *ctx, const struct kvt_store_rec *r)
{
    struct opened *o = ctx;
    o->found++;
    if (r->generation > o->max_gen)
        o->max_gen = r->generation;
    return 0;
}

static void open_store(const struct fx *f, bool durable, uint64_t fp, struct opened *o)
{
    memset(o, 0, sizeof(*o));
    struct kvt_store_params p = { .page_bytes = PB, .fingerprint = fp, .dir = f->dir,
                                  .capacity = 64 * PB, .durable = durable,
                                  .found = on_found, .found_ctx = o, .info = &o->info };
    char err[256] = "";
    int r = kvt_ssd_store_ops.open(&p, &o->s, err, sizeof(err));
    if (r < 0)
        fail_msg("open: %d %s", r, err);
}

static int put1(struct kvt_store *s, uint64_t id, uint64_t version, size_t misalign)
{
    char *raw = aligned_alloc(4096, PB + 4096);
    fill(raw + misalign, id, version);
    struct kvt_store_item it = { key_of(id), raw + misalign, 0 };
    int n = s->ops->put(s, &it, 1);
    free(raw);
    return n < 0 ? n : it.res;
}

/* 1 and the page when k's page of version `version` is served, 0 on a miss. */
static int get1(struct kvt_store *s, uint64_t id, uint64_t version)
{
    char *buf = malloc(PB), *want = malloc(PB);
    fill(want, id, version);
    struct kvt_store_item it = { key_of(id), buf, 0 };
    int n = s->ops->get(s, &it, 1);
    assert_int_equal(n, it.res == 1);
    if (it.res == 1)
        assert_memory_equal(buf, want, PB);
    free(buf);
    free(want);
    return it.res == 1;
}

static int exists1(struct kvt_store *s, uint64_t id)
{
    struct kvt_store_item it = { key_of(id), NULL, 0 };
    return s->ops->exists(s, &it, 1);
}

static void test_table_says_what_it_is(void **state)
{
    (void)state;
    assert_int_equal(kvt_ssd_store_ops.version, KVT_STORE_OPS_VERSION);
    assert_true(kvt_ssd_store_ops.caps & KVT_STORE_DURABLE);
    assert_true(kvt_ssd_store_ops.caps & KVT_STORE_SLOTS);
    assert_false(kvt_ssd_store_ops.caps & KVT_STORE_SHARED);
    assert_non_null(kvt_ssd_store_ops.slots);
    /* The shared tier's store has no slots. */
    assert_null(kvt_remote_store_ops.slots);
    assert_false(kvt_remote_store_ops.caps & KVT_STORE_SLOTS);
}

static void test_put_get_exists_del_round_trip(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, false, FP, &o);
    struct kvt_store *s = o.s;
    assert_int_equal(put1(s, 1, 0, 0), 1);
    assert_int_equal(put1(s, 2, 0, 512), 1); /* an unaligned page goes through a copy */
    assert_int_equal(get1(s, 1, 0), 1);
    assert_int_equal(get1(s, 2, 0), 1);
    assert_int_equal(get1(s, 3, 0), 0);
    assert_int_equal(exists1(s, 1), 1);
    assert_int_equal(exists1(s, 3), 0);
    struct kvt_store_item d = { key_of(1), NULL, 0 };
    assert_int_equal(s->ops->del(s, &d, 1), 1);
    assert_int_equal(d.res, 1);
    assert_int_equal(s->ops->del(s, &d, 1), 0);
    assert_int_equal(exists1(s, 1), 0);
    assert_int_equal(get1(s, 1, 0), 0);
    struct kvt_store_stats st;
    s->ops->stats(s, &st);
    assert_int_equal(st.puts, 2);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.corrupt, 0);
    assert_int_equal(st.errors, 0); /* a key not held is a plain miss, nothing read */
    s->ops->close(s);
}

static void test_overwrite_serves_the_new_page_and_frees_the_old_slot(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, false, FP, &o);
    struct kvt_store *s = o.s;
    assert_int_equal(put1(s, 5, 0, 0), 1);
    uint32_t free1 = kvt_ssd_nfree(kvt_ssd_of(s));
    for (uint64_t v = 1; v <= 100; v++) /* more than the store's 64 slots */
        assert_int_equal(put1(s, 5, v, 0), 1);
    assert_int_equal(kvt_ssd_nfree(kvt_ssd_of(s)), free1);
    assert_int_equal(get1(s, 5, 100), 1);
    s->ops->close(s);
}

/* The same key twice in one put: the later page is served, and no slot is
 * lost (each round gives back the earlier write's slot and the old one). */
static void test_a_key_twice_in_one_put_keeps_the_later_and_loses_no_slot(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, false, FP, &o);
    struct kvt_store *s = o.s;
    assert_int_equal(put1(s, 7, 0, 0), 1);
    uint32_t free1 = kvt_ssd_nfree(kvt_ssd_of(s));
    void *a = aligned_alloc(4096, PB), *b = aligned_alloc(4096, PB);
    for (uint64_t round = 1; round <= 5; round++) {
        fill(a, 7, 2 * round);
        fill(b, 7, 2 * round + 1);
        struct kvt_store_item it[2] = { { key_of(7), a, 0 }, { key_of(7), b, 0 } };
        assert_int_equal(s->ops->put(s, it, 2), 2);
        assert_int_equal(kvt_ssd_nfree(kvt_ssd_of(s)), free1);
        assert_int_equal(get1(s, 7, 2 * round + 1), 1);
    }
    free(a);
    free(b);
    s->ops->close(s);
}

static void test_durable_records_survive_a_reopen_and_others_do_not(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, true, FP, &o);
    for (uint64_t id = 1; id <= 10; id++)
        assert_int_equal(put1(o.s, id, 1, 0), 1);
    assert_int_equal(o.s->ops->flush(o.s), 0);
    o.s->ops->close(o.s);

    open_store(f, true, FP, &o);
    assert_int_equal(o.found, 10);   /* the engine would rebuild 10 page records */
    assert_int_equal(o.info.kept, 10);
    for (uint64_t id = 1; id <= 10; id++)
        assert_int_equal(get1(o.s, id, 1), 1);
    /* A write after the reopen is newer than every kept one. */
    assert_int_equal(put1(o.s, 1, 2, 0), 1);
    uint64_t newest = o.max_gen;
    o.s->ops->close(o.s);
    open_store(f, true, FP, &o);
    assert_true(o.max_gen > newest);
    assert_int_equal(get1(o.s, 1, 2), 1);
    o.s->ops->close(o.s);

    /* Another model's store: nothing of this one's is found or served. */
    open_store(f, true, FP + 1, &o);
    assert_int_equal(o.found, 0);
    assert_int_equal(get1(o.s, 2, 1), 0);
    o.s->ops->close(o.s);

    /* Not durable: the open starts empty. */
    open_store(f, false, FP, &o);
    assert_int_equal(o.found, 0);
    assert_int_equal(exists1(o.s, 3), 0);
    o.s->ops->close(o.s);
}

static void test_a_damaged_page_is_a_counted_miss(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, false, FP, &o);
    assert_int_equal(put1(o.s, 9, 0, 0), 1);
    uint32_t seg;
    uint64_t off;
    /* The page's place, through the files' own calls (the test's view). */
    struct kvt_ssd_entry v;
    kvt_key k = key_of(9);
    assert_int_equal(kvt_index_get(kvt_ssd_index(kvt_ssd_of(o.s)), &k, &v), 0);
    seg = v.segment;
    off = v.offset;
    char path[160];
    kvt_ssd_segment_path(f->dir, seg, path, sizeof(path));
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    char x = 0x5a;
    assert_int_equal(pwrite(fd, &x, 1, (off_t)(off + 100)), 1);
    close(fd);
    assert_int_equal(get1(o.s, 9, 0), 0);
    struct kvt_store_stats st;
    o.s->ops->stats(o.s, &st);
    assert_int_equal(st.corrupt, 1);
    assert_int_equal(st.misses, 1);
    o.s->ops->close(o.s);
}

/* What the engine's pipeline does: take a slot, write it with its own I/O,
 * commit the record; the batched get then finds the page, and forget removes
 * a record only while it names that slot. */
static void test_slot_records_are_the_batched_calls_records(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, false, FP, &o);
    struct kvt_store *s = o.s;
    const struct kvt_store_slot_ops *sl = s->ops->slots;
    uint64_t usable = sl->usable(s);
    assert_int_equal(sl->nslots(s), 64);
    assert_int_equal(usable, 64);
    int err = 0;
    uint32_t slot = sl->take(s, &err);
    assert_int_not_equal(slot, KVT_NONE);
    int fd;
    uint64_t off;
    assert_int_equal(sl->locate(s, slot, true, &fd, &off), 0);
    void *page = aligned_alloc(4096, PB);
    fill(page, 4, 0);
    assert_int_equal(pwrite(fd, page, PB, (off_t)off), (ssize_t)PB);
    sl->written(s, slot);
    kvt_key k = key_of(4);
    struct kvt_store_rec rec = { .key = k, .slot = slot, .stored_len = PB,
                                 .crc = kvt_crc32c(sl->seed(s, &k, 7), page, PB),
                                 .codec = KVT_CODEC_NONE, .generation = 7 };
    assert_int_equal(sl->commit(s, &rec, 1), 0);
    assert_int_equal(get1(s, 4, 0), 1);

    /* A record with another generation's seed is caught on read. */
    struct kvt_store_rec bad = rec;
    bad.generation = 8;
    assert_int_equal(sl->commit(s, &bad, 1), 0);
    assert_int_equal(get1(s, 4, 0), 0);
    assert_int_equal(sl->commit(s, &rec, 1), 0);

    /* forget of a stale slot keeps the record; of its own slot removes it. */
    struct kvt_store_rec stale = rec;
    stale.slot = slot + 1;
    assert_int_equal(sl->forget(s, &stale, 1), 0);
    assert_int_equal(exists1(s, 4), 1);
    assert_int_equal(sl->forget(s, &rec, 1), 0);
    assert_int_equal(exists1(s, 4), 0);
    sl->give(s, slot);

    /* A retired slot is never handed out again. */
    sl->retire(s, sl->take(s, &err));
    assert_int_equal(sl->bad(s), 1);
    assert_int_equal(sl->usable(s), usable - 1);
    free(page);
    s->ops->close(s);
}

static void test_a_full_store_refuses_a_put_by_item(void **state)
{
    struct fx *f = *state;
    struct opened o;
    open_store(f, false, FP, &o);
    for (uint64_t id = 1; id <= 64; id++)
        assert_int_equal(put1(o.s, id, 0, 0), 1);
    assert_int_equal(put1(o.s, 65, 0, 0), KVT_EFULL);
    assert_int_equal(get1(o.s, 64, 0), 1);
    struct kvt_store_stats st;
    o.s->ops->stats(o.s, &st);
    assert_int_equal(st.put_failed, 1);
    o.s->ops->close(o.s);
}

/* Bytes of blocks segment 0 of dir holds. */
static uint64_t seg0_blocks(const char *dir)
{
    char path[256];
    struct stat st;
    kvt_ssd_segment_path(dir, 0, path, sizeof(path));
    return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

/* prepare(n) allocates the blocks of the next n slots in one go, more than
 * a take's growth step, so that the takes after it allocate nothing (a
 * flush's writes then never wait behind an allocation); more than are free
 * is as many as are free; blocks already there are not asked again. */
static void test_prepare_allocates_the_next_takes_blocks(void **state)
{
    struct fx *f = *state;
    enum { BIG = 1u << 20, SLOTS = 160, N = 100 }; /* N MiB: past the 64 MiB step */
    struct kvt_store_params p = { .page_bytes = BIG, .fingerprint = FP, .dir = f->dir,
                                  .capacity = (uint64_t)SLOTS * BIG };
    struct statvfs vfs;
    if (statvfs(f->root, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < 4ull * SLOTS * BIG)
        skip(); /* prepare takes at most half the free space: too little here */
    struct kvt_store *s = NULL;
    char err[256] = "";
    assert_int_equal(kvt_ssd_store_ops.open(&p, &s, err, sizeof(err)), 0);
    const struct kvt_store_slot_ops *sl = s->ops->slots;
    assert_non_null(sl->prepare);
    sl->prepare(s, N);
    uint64_t have = seg0_blocks(f->dir);
    assert_true(have >= (uint64_t)N * BIG);
    assert_true(have < (uint64_t)(N + 8) * BIG); /* the n asked for, not the segment */
    int e = 0;
    for (unsigned i = 0; i < N; i++)
        assert_int_not_equal(sl->take(s, &e), KVT_NONE);
    assert_int_equal(seg0_blocks(f->dir), have); /* the takes grew nothing */
    sl->prepare(s, 10 * SLOTS);
    uint64_t all = seg0_blocks(f->dir);
    assert_true(all >= (uint64_t)SLOTS * BIG);
    sl->prepare(s, SLOTS);
    assert_int_equal(seg0_blocks(f->dir), all);
    s->ops->close(s);
}

static void test_a_bad_open_says_why(void **state)
{
    (void)state;
    struct kvt_store *s = NULL;
    char err[256] = "";
    struct kvt_store_params p = { .page_bytes = 1000, .dir = "/tmp" };
    assert_int_equal(kvt_ssd_store_ops.open(&p, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "4096"));
    assert_null(s);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_says_what_it_is),
        cmocka_unit_test_setup_teardown(test_put_get_exists_del_round_trip, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_overwrite_serves_the_new_page_and_frees_the_old_slot,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_key_twice_in_one_put_keeps_the_later_and_loses_no_slot, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_durable_records_survive_a_reopen_and_others_do_not,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_damaged_page_is_a_counted_miss, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_slot_records_are_the_batched_calls_records, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_full_store_refuses_a_put_by_item, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_prepare_allocates_the_next_takes_blocks, fx_setup,
                                        fx_teardown),
        cmocka_unit_test(test_a_bad_open_says_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
