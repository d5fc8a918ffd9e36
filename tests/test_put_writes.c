/*
 * test_put_writes.c — a persist kvt_put writing its own pages down as it
 * copies them in (tiers/ssd_caller.c kvt_ssd_caller_write, api/buffers.c
 * put_copy_in), and the mover committing what it wrote
 * (kvt_ssd_queue_written).
 *
 * The rules: with persist, every page a put copies from host memory into
 * DRAM is on SSD when the put returns, each piece written once, so a flush
 * after it writes nothing; without persist (or with write-ahead off) a put
 * writes nothing; a write of the put's own that fails or is refused costs
 * the put nothing: the page goes down the usual way, and only a failure of
 * the medium retires its slot; pages written so read back whole after a
 * restart, an overwrite or a drop right after the put included. The I/O
 * back-end is the faulty one (lab/faulty.h), which counts the writes. Each
 * test works in its own mkdtemp() directory under /tmp.
 */
#include <unistd.h>

#include "helpers.h"
#include "lab/faulty.h"
#include "lab/lab.h"

/* 256 KiB pages in pieces of 64 KiB: four writes a page. */
#define PB ((size_t)256 << 10)
#define PIECE ((size_t)64 << 10)
#define PIECES (PB / PIECE)
#define FP 0x7075742d77726974ull

extern size_t kvt_test_piece_bytes;

struct fx {
    char dir[64];
    struct kvt_io_faulty plan;
};

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f || t_tmpdir(f->dir, sizeof(f->dir), "putwr")) {
        free(f);
        return -1;
    }
    kvt_test_piece_bytes = PIECE; /* read by each open */
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    kvt_test_piece_bytes = 0;
    t_rmtree(f->dir);
    free(f);
    return 0;
}

/* An engine over the faulty back-end with plan fault (NULL: none): 1 page
 * of HBM, 8 of DRAM, 32 on SSD. */
static kvt_engine *open_engine(struct fx *f, int persist, bool ahead, const struct kvt_io_fault *fault)
{
    kvt_config c = t_config(PB, 1, 8);
    c.ssd_bytes = 32 * PB;
    c.ssd_dir = f->dir;
    c.persist = persist;
    c.fingerprint = FP;
    kvt_io_faulty_init(&f->plan, NULL, fault);
    struct kvt_test_hooks h = { .io = &f->plan, .no_write_ahead = !ahead };
    kvt_engine *e = NULL;
    t_opened(kvt_open_with_hooks(&c, &h, &e));
    return e;
}

/* Puts pages (id, 0, 0..n) of version v in one call, from a 4 KiB-aligned
 * buffer. */
static void put_pages(kvt_engine *e, uint64_t id, size_t n, uint32_t v)
{
    uint8_t *buf = NULL;
    assert_int_equal(posix_memalign((void **)&buf, 4096, n * PB), 0);
    kvt_key ks[16];
    const void *src[16];
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        ks[i] = t_key(id, 0, (uint32_t)i);
        t_fill(buf + i * PB, PB, ks[i], v);
        src[i] = buf + i * PB;
    }
    assert_int_equal(kvt_put(e, ks, n, src, 0), 0);
    free(buf);
}

/* Page (id, 0, i): 1 with the bytes of version v, 0 for a miss. */
static int get_page(kvt_engine *e, uint64_t id, uint32_t i, uint32_t v)
{
    return t_get_page(e, t_key(id, 0, i), PB, v);
}

/* Pages (id, 0, 0..n) all read back with the bytes of version v. */
static void read_back(kvt_engine *e, uint64_t id, uint32_t n, uint32_t v)
{
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(get_page(e, id, i, v), 1);
}

/* Closes e (flushing) and opens its directory again, persist, write-ahead
 * off: every page read then comes from SSD. */
static kvt_engine *restart(struct fx *f, kvt_engine *e)
{
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    return open_engine(f, 1, false, NULL);
}

static uint64_t writes(struct fx *f)
{
    return kvt_io_faulty_count(&f->plan, KVT_IOF_WRITE);
}

/* Every piece of every page is written once by the put itself, before it
 * returns (DRAM holds them all, so nothing else writes them); the flush
 * after it writes nothing more, and they read back after a restart. */
static void test_a_persist_put_writes_its_pages_itself(void **state)
{
    struct fx *f = *state;
    kvt_engine *e = open_engine(f, 1, true, NULL);
    put_pages(e, 1, 6, 1);
    assert_int_equal(writes(f), 6 * PIECES);
    assert_int_equal(kvt_flush(e), 0);
    assert_int_equal(writes(f), 6 * PIECES);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.bytes_down[KVT_TIER_DRAM], 6 * PB); /* committed and counted */
    assert_int_equal(s.errors_io, 0);
    e = restart(f, e);
    read_back(e, 1, 6, 1);
    assert_int_equal(t_stats(e).errors_corrupt, 0);
    kvt_close(e);
}

/* Without persist a page may never need the disk: a put that fits DRAM
 * writes nothing. Nor does one with write-ahead off. */
static void test_only_a_persist_put_writes(void **state)
{
    struct fx *f = *state;
    kvt_engine *e = open_engine(f, 0, true, NULL);
    put_pages(e, 2, 6, 1);
    assert_int_equal(writes(f), 0);
    kvt_close(e);
    e = open_engine(f, 1, false, NULL);
    put_pages(e, 2, 6, 1);
    assert_int_equal(writes(f), 0);
    assert_int_equal(kvt_flush(e), 0);
    assert_int_equal(writes(f), 6 * PIECES); /* the flush's, through the mover */
    kvt_close(e);
}

/* The put's own write of the second page fails on the medium: the put
 * still stores every page, the slot is retired, and the mover writes that
 * page elsewhere; everything reads back after a restart. */
static void test_an_own_write_that_fails_leaves_the_page_to_the_mover(void **state)
{
    struct fx *f = *state;
    struct kvt_io_fault fault = { KVT_IOF_WRITE, PIECES + 2, -EIO, false };
    kvt_engine *e = open_engine(f, 1, true, &fault);
    put_pages(e, 3, 4, 1);
    assert_int_equal(kvt_flush(e), 0);
    kvt_stats s = t_stats(e);
    assert_true(s.errors_io >= 1);
    assert_int_equal(s.ssd_bad_slots, 1);
    assert_int_equal(writes(f), 5 * PIECES); /* the failed page written twice */
    read_back(e, 3, 4, 1);
    e = restart(f, e);
    read_back(e, 3, 4, 1);
    assert_int_equal(t_stats(e).errors_corrupt, 0);
    kvt_close(e);
}

/* The back-end refuses the put's submission: nothing reached the disk, so
 * the slots are given back, not retired, and the mover writes the pages
 * at the flush. */
static void test_an_own_write_refused_retires_nothing(void **state)
{
    struct fx *f = *state;
    struct kvt_io_fault fault = { KVT_IOF_SUBMIT, 1, -EAGAIN, false };
    kvt_engine *e = open_engine(f, 1, true, &fault);
    put_pages(e, 4, 3, 1);
    assert_int_equal(kvt_flush(e), 0);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.ssd_bad_slots, 0);
    assert_true(s.errors_io >= 1);
    e = restart(f, e);
    read_back(e, 4, 3, 1);
    kvt_close(e);
}

/* An overwrite and a drop right after the puts, while the mover may not
 * yet have committed what the puts wrote: after a restart the key holds the
 * new version, and the dropped one is gone. */
static void test_an_overwrite_or_drop_right_after_the_put(void **state)
{
    struct fx *f = *state;
    kvt_engine *e = open_engine(f, 1, true, NULL);
    for (uint32_t round = 0; round < 8; round++) {
        put_pages(e, 5, 2, 1);
        put_pages(e, 5, 1, 2); /* page 0 again */
        kvt_key gone = t_key(5, 0, 1);
        assert_int_equal(kvt_drop(e, &gone, 1), 0);
    }
    assert_int_equal(get_page(e, 5, 0, 2), 1);
    assert_int_equal(get_page(e, 5, 1, 1), 0);
    e = restart(f, e);
    assert_int_equal(get_page(e, 5, 0, 2), 1);
    assert_int_equal(get_page(e, 5, 1, 1), 0);
    assert_int_equal(t_stats(e).errors_corrupt, 0);
    kvt_close(e);
}

/* More pages than DRAM in one put: batches of half of DRAM, each written
 * by the put, the DRAM copies of the earlier ones clean when the later
 * need their slots. Every page reads back, from DRAM or SSD, and after a
 * restart. */
static void test_a_put_larger_than_dram(void **state)
{
    struct fx *f = *state;
    kvt_engine *e = open_engine(f, 1, true, NULL);
    put_pages(e, 6, 16, 1);
    assert_int_equal(writes(f), 16 * PIECES);
    read_back(e, 6, 16, 1);
    assert_int_equal(kvt_flush(e), 0);
    assert_int_equal(writes(f), 16 * PIECES);
    e = restart(f, e);
    read_back(e, 6, 16, 1);
    kvt_close(e);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_persist_put_writes_its_pages_itself, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_only_a_persist_put_writes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_an_own_write_that_fails_leaves_the_page_to_the_mover,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_an_own_write_refused_retires_nothing, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_an_overwrite_or_drop_right_after_the_put, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_put_larger_than_dram, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
