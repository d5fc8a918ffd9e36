/*
 * test_put_crc.c — the checksum a put takes as it copies a page in, and the
 * write-back that stores it instead of reading the page again
 * (api/buffers.c copy_in_crc, tiers/ssd_pipe.c job_crc).
 *
 * The rules: the checksum stored is the one the mover would have computed
 * (a page written down this way reads back after a restart); it is the
 * put's (a wrong one makes the page a miss, never wrong bytes served); and
 * a page whose bytes changed (a dirty release) does not use it. Each test works in
 * its own mkdtemp() directory under /tmp.
 */
#include <pthread.h>
#include <unistd.h>

#include "helpers.h"
#include "io/codec.h"
#include "api/api.h"
#include "lab/lab.h"
#include "lab/tool.h"

/* 3 MiB pages: a put copies them in three 1 MiB pieces, checksumming each. */
#define PB ((size_t)3 << 20)
#define FP 0x7075742d637263ull

struct fx {
    char dir[64];
};

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f || t_tmpdir(f->dir, sizeof(f->dir), "putcrc")) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    t_rmtree(f->dir);
    free(f);
    return 0;
}

/* An engine of pages of pb bytes: 1 of HBM, 4 of DRAM, 16 on SSD. No
 * write-ahead: the tests look at the put's checksum before a write-back
 * takes it. */
static kvt_engine *open_sized(const struct fx *f, int codec, size_t pb, int persist)
{
    kvt_config c = t_config(pb, 1, 4);
    c.ssd_bytes = 16 * pb;
    c.ssd_dir = f->dir;
    c.persist = persist;
    c.fingerprint = FP;
    c.codec = codec;
    kvt_engine *e = NULL;
    int r = kvt_open_with_hooks(&c, &(struct kvt_test_hooks){ .no_write_ahead = true }, &e);
    t_opened(r);
    return e;
}

/* A persistent engine of PB pages. */
static kvt_engine *open_engine(const struct fx *f, int codec)
{
    return open_sized(f, codec, PB, 1);
}

/* Flushes and closes e, and opens its spill directory again: what is read
 * then comes from SSD, checked against what the write-backs stored. */
static kvt_engine *restart(const struct fx *f, kvt_engine *e, int codec)
{
    assert_int_equal(kvt_flush(e), 0);
    kvt_close(e);
    return open_engine(f, codec);
}

static void put_sized(kvt_engine *e, size_t pb, const kvt_key *ks, size_t n, uint32_t version)
{
    uint8_t *buf = malloc(pb);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        t_fill(buf, pb, ks[i], version);
        const void *src = buf;
        assert_int_equal(kvt_put(e, &ks[i], 1, &src, 0), 0);
    }
    free(buf);
}

static void put_pages(kvt_engine *e, const kvt_key *ks, size_t n, uint32_t version)
{
    put_sized(e, PB, ks, n, version);
}

/* Whether page k is held, with the put's checksum, and that checksum. */
static bool put_crc_of(kvt_engine *e, kvt_key k, uint32_t *crc)
{
    kvt_lock(e);
    uint32_t pg = kvt_ptable_find(&e->pt, &k);
    bool has = pg != KVT_NONE && (kvt_pg(&e->pt, pg)->flags & PG_PUT_CRC);
    if (has)
        *crc = kvt_pg(&e->pt, pg)->crc;
    kvt_unlock(e);
    return has;
}

/* The join the write-back relies on: CRC32C with a seed is the seed joined
 * with the seedless CRC of the bytes, at any length. */
static void test_seeded_crc_is_a_join(void **state)
{
    (void)state;
    static const size_t lens[] = { 1, 7, 4096, (256u << 10) + 13, (4u << 20) + 4096 };
    uint8_t *b = malloc(lens[4]);
    assert_non_null(b);
    for (size_t i = 0; i < lens[4]; i++)
        b[i] = (uint8_t)(i * 131 + (i >> 9));
    for (int s = 0; s < 5; s++) {
        uint32_t seed = 0x9E3779B9u * (uint32_t)(s + 1);
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
            assert_int_equal(kvt_crc32c(seed, b, lens[l]),
                             kvt_crc32c_combine(seed, kvt_crc32c(0, b, lens[l]), lens[l]));
    }
    free(b);
}

/* A put into DRAM takes its bytes' checksum; pages written down with it
 * read back whole after a restart, as they did when the mover checksummed
 * them itself. */
static void test_put_pages_read_back_after_restart(void **state)
{
    struct fx *f = *state;
    kvt_key ks[6];
    kvt_engine *e = open_engine(f, KVT_CODEC_NONE);
    uint8_t *want = malloc(PB);
    assert_non_null(want);
    for (int i = 0; i < 6; i++) {
        ks[i] = t_key(1, 0, (uint32_t)i);
        put_pages(e, &ks[i], 1, 1);
        uint32_t crc;
        t_fill(want, PB, ks[i], 1);
        /* The newest pages are in DRAM with the put's checksum, the ones
         * written down since may have been dropped from DRAM. */
        assert_true(put_crc_of(e, ks[i], &crc));
        assert_int_equal(crc, kvt_crc32c(0, want, PB));
    }
    free(want);
    e = restart(f, e, KVT_CODEC_NONE);
    for (int i = 0; i < 6; i++)
        assert_int_equal(t_get_page(e, ks[i], PB, 1), 1);
    kvt_stats s = t_stats(e);
    assert_int_equal(s.errors_corrupt, 0);
    kvt_close(e);
}

/* The checksum stored is the put's, not one the mover took again: a wrong
 * one (here made so) turns the page into a miss after a restart. It is never
 * served, and its neighbour is unharmed. */
static void test_the_stored_checksum_is_the_puts(void **state)
{
    struct fx *f = *state;
    kvt_key ks[2] = { t_key(2, 0, 0), t_key(2, 0, 1) };
    kvt_engine *e = open_engine(f, KVT_CODEC_NONE);
    put_pages(e, ks, 2, 1);
    kvt_lock(e);
    uint32_t pg = kvt_ptable_find(&e->pt, &ks[0]);
    assert_true(pg != KVT_NONE && (kvt_pg(&e->pt, pg)->flags & PG_PUT_CRC));
    kvt_pg(&e->pt, pg)->crc ^= 1;
    kvt_unlock(e);
    e = restart(f, e, KVT_CODEC_NONE);
    assert_int_equal(t_get_page(e, ks[0], PB, 1), 0);
    assert_int_equal(t_get_page(e, ks[1], PB, 1), 1);
    assert_int_equal(t_stats(e).errors_corrupt, 1);
    kvt_close(e);
}

/* A pin alone changes nothing: the checksum stays, and a write-back uses
 * it. A dirty release (the device wrote the page) makes the DRAM copy stale,
 * and the checksum goes with it: the page is then written down with the
 * mover's own, of the new bytes. */
static void test_a_dirty_release_drops_the_puts_checksum(void **state)
{
    struct fx *f = *state;
    kvt_key ks[2] = { t_key(3, 0, 0), t_key(3, 0, 1) };
    kvt_engine *e = open_engine(f, KVT_CODEC_NONE);
    put_pages(e, ks, 2, 1);
    uint32_t crc;
    void *dev = NULL;
    assert_int_equal(kvt_acquire(e, &ks[0], 1, &dev), 0);
    assert_true(put_crc_of(e, ks[0], &crc));
    assert_int_equal(kvt_release(e, &ks[0], 1, 0), 0);
    assert_true(put_crc_of(e, ks[0], &crc));
    assert_int_equal(kvt_acquire(e, &ks[1], 1, &dev), 0);
    assert_int_equal(t_fill_page(e, dev, PB, ks[1], 2), 0);
    assert_int_equal(kvt_release(e, &ks[1], 1, 1), 0);
    assert_false(put_crc_of(e, ks[1], &crc));
    e = restart(f, e, KVT_CODEC_NONE);
    assert_int_equal(t_get_page(e, ks[0], PB, 1), 1);
    assert_int_equal(t_get_page(e, ks[1], PB, 2), 1);
    assert_int_equal(t_stats(e).errors_corrupt, 0);
    kvt_close(e);
}

/* With a codec the stored checksum is of the encoded bytes: a put takes
 * none, and pages still read back. */
static void test_a_codec_engine_takes_none(void **state)
{
    struct fx *f = *state;
    kvt_key ks[3] = { t_key(4, 0, 0), t_key(4, 0, 1), t_key(4, 0, 2) };
    kvt_engine *e = open_engine(f, KVT_CODEC_ZSTD);
    put_pages(e, ks, 3, 1);
    uint32_t crc;
    for (int i = 0; i < 3; i++)
        assert_false(put_crc_of(e, ks[i], &crc));
    e = restart(f, e, KVT_CODEC_ZSTD);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t_get_page(e, ks[i], PB, 1), 1);
    kvt_close(e);
}

/* Puts page (5, 0, i) of 64 KiB, then flushes it (written down: the
 * checksum used) or not (gone unwritten: wasted), and drops it. Returns
 * whether the put took the checksum. */
static bool put_then(kvt_engine *e, uint32_t i, bool flush)
{
    kvt_key k = t_key(5, 0, i);
    put_sized(e, 64 << 10, &k, 1, 1);
    uint32_t crc;
    bool took = put_crc_of(e, k, &crc);
    if (flush)
        assert_int_equal(kvt_flush(e), 0);
    assert_int_equal(kvt_drop(e, &k, 1), 0); /* after a flush: used already */
    return took;
}

/* Puts take the checksum while write-backs use it at least as often as
 * pages leave DRAM without one; otherwise one page in KVT_PUT_CRC_PROBE,
 * which lets them take it again once the pages go down again. */
static void test_the_odds_follow_the_workload(void **state)
{
    struct fx *f = *state;
    kvt_engine *e = open_sized(f, KVT_CODEC_NONE, 64 << 10, 1); /* a flush writes */
    uint32_t i = 0, took = 0;
    for (; i < 8; i++)
        assert_true(put_then(e, i, true)); /* used: 8 */
    for (; i < 17; i++)
        assert_true(put_then(e, i, false)); /* wasted: 9, more than used */
    for (uint32_t n = 0; n < 4 * KVT_PUT_CRC_PROBE; n++, i++)
        took += put_then(e, i, false);
    assert_int_equal(took, 4);
    /* The probes' pages written down again: each is used, until used
     * reaches wasted (about 13) and every put takes it. */
    uint32_t run = 0;
    for (uint32_t n = 0; n < 16 * KVT_PUT_CRC_PROBE && run < 8; n++, i++)
        run = put_then(e, i, true) ? run + 1 : 0;
    assert_int_equal(run, 8);
    kvt_close(e);
}

int main(int argc, char **argv)
{
    t_filter_args(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seeded_crc_is_a_join),
        cmocka_unit_test_setup_teardown(test_put_pages_read_back_after_restart, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_the_stored_checksum_is_the_puts, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_dirty_release_drops_the_puts_checksum, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_codec_engine_takes_none, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_the_odds_follow_the_workload, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
