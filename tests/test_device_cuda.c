/*
 * test_device_cuda.c — the CUDA device back-end (devices/device_cuda.c) against
 * the mock runtime (tests/mock/cudart_mock.c); built only with
 * -DKVT_CUDA_MOCK=ON. The rest of the suite runs engines on it; this file
 * checks what only the back-end's own interface shows: one batch call per
 * batch, the copy-by-copy path when asked or when the runtime refuses the
 * batch call, fences across the event ring, polls of work in flight, and
 * the synchronous copies' kinds.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "devices/device.h"

void kvt_mock_cuda_refuse_batch(bool refuse);
void kvt_mock_cuda_calls(unsigned long *memcpy_calls, unsigned long *batch_calls);

#define PB 4096u
#define NP 64u

struct fx {
    const struct kvt_device_ops *ops;
    void *priv;
    uint8_t *hbm, *host, *back;
};

static void fx_open(struct fx *f)
{
    const struct kvt_device_params p = { .ordinal = 0 };
    f->ops = &kvt_device_cuda_ops;
    assert_int_equal(f->ops->open(&p, &f->priv), 0);
    void *h = NULL, *d = NULL, *b = NULL;
    assert_int_equal(f->ops->hbm_alloc(f->priv, NP * PB, &h), 0);
    assert_int_equal(f->ops->host_alloc(f->priv, NP * PB, &d), 0);
    assert_int_equal(f->ops->host_alloc(f->priv, NP * PB, &b), 0);
    f->hbm = h;
    f->host = d;
    f->back = b;
    for (uint32_t i = 0; i < NP; i++)
        t_fill(f->host + (size_t)i * PB, PB, t_key(1, 0, i), 1);
    memset(f->back, 0, NP * PB);
}

static void fx_close(struct fx *f)
{
    f->ops->host_free(f->priv, f->back, NP * PB);
    f->ops->host_free(f->priv, f->host, NP * PB);
    f->ops->hbm_free(f->priv, f->hbm, NP * PB);
    f->ops->close(f->priv);
}

/* n copies of one direction: host page i <-> HBM slot i, from first. */
static uint64_t submit(struct fx *f, enum kvt_dir dir, uint32_t first, uint32_t n)
{
    struct kvt_copy c[NP];
    for (uint32_t i = 0; i < n; i++) {
        size_t off = (size_t)(first + i) * PB;
        c[i] = dir == KVT_H2D ? (struct kvt_copy){ f->hbm + off, f->host + off, PB }
                              : (struct kvt_copy){ f->back + off, f->hbm + off, PB };
    }
    uint64_t fence = 0;
    assert_int_equal(f->ops->submit(f->priv, dir, c, n, &fence), 0);
    return fence;
}

/* Up and back down through HBM, then every page compared. */
static void round_trip(struct fx *f, uint32_t per_batch)
{
    for (uint32_t i = 0; i < NP; i += per_batch)
        assert_int_equal(f->ops->wait(f->priv, KVT_H2D, submit(f, KVT_H2D, i, per_batch)), 0);
    for (uint32_t i = 0; i < NP; i += per_batch)
        assert_int_equal(f->ops->wait(f->priv, KVT_D2H, submit(f, KVT_D2H, i, per_batch)), 0);
    for (uint32_t i = 0; i < NP; i++)
        assert_true(t_check(f->back + (size_t)i * PB, PB, t_key(1, 0, i), 1));
}

/* A round trip of 16-page batches (4 each way); *memcpys and *batches: the
 * runtime calls it made. */
static void counted_round_trip(struct fx *f, unsigned long *memcpys, unsigned long *batches)
{
    unsigned long m0, b0, m1, b1;
    kvt_mock_cuda_calls(&m0, &b0);
    round_trip(f, 16);
    kvt_mock_cuda_calls(&m1, &b1);
    *memcpys = m1 - m0;
    *batches = b1 - b0;
}

static void test_one_call_per_batch(void **state)
{
    struct fx f;
    fx_open(&f);
    unsigned long m, b, m0, b0, m1, b1;
    counted_round_trip(&f, &m, &b);
    assert_int_equal(b, 8);
    assert_int_equal(m, 0);
    /* A batch of one copy is one cudaMemcpyAsync. */
    kvt_mock_cuda_calls(&m0, &b0);
    assert_int_equal(f.ops->wait(f.priv, KVT_H2D, submit(&f, KVT_H2D, 0, 1)), 0);
    kvt_mock_cuda_calls(&m1, &b1);
    assert_int_equal(m1 - m0, 1);
    assert_int_equal(b1 - b0, 0);
    fx_close(&f);
}

static void test_copy_by_copy_when_asked(void **state)
{
    setenv("KVT_CUDA_COPY", "loop", 1);
    struct fx f;
    fx_open(&f);
    unsetenv("KVT_CUDA_COPY");
    unsigned long m, b;
    counted_round_trip(&f, &m, &b);
    assert_int_equal(m, 2 * NP);
    assert_int_equal(b, 0);
    fx_close(&f);
}

/* A runtime that refuses the batch call: the batch goes copy by copy, the
 * engine is not failed, and the back-end does not ask again. */
static void test_refused_batch_falls_back(void **state)
{
    struct fx f;
    fx_open(&f);
    kvt_mock_cuda_refuse_batch(true);
    unsigned long m, b;
    counted_round_trip(&f, &m, &b);
    assert_int_equal(m, 2 * NP);
    assert_int_equal(b, 0);
    kvt_mock_cuda_refuse_batch(false);
    counted_round_trip(&f, &m, &b);
    assert_int_equal(m, 2 * NP); /* still copy by copy */
    assert_int_equal(b, 0);
    fx_close(&f);
    /* A fresh back-end tries the batch call again. */
    fx_open(&f);
    counted_round_trip(&f, &m, &b);
    assert_int_equal(b, 8);
    fx_close(&f);
}

/* More batches than the event ring holds (256 per direction): each fence
 * completes, a fence never issued is refused, polls see work in flight. */
static void test_fences_across_the_ring(void **state)
{
    struct fx f;
    fx_open(&f);
    uint64_t first = submit(&f, KVT_H2D, 0, 2), last = first;
    int r, busy = 0; /* the mock's event is not ready for its first few queries */
    while ((r = f.ops->poll(f.priv, KVT_H2D, first)) == -EINPROGRESS && busy < 100)
        busy++;
    assert_int_equal(r, 0);
    assert_true(busy >= 1);
    for (int i = 0; i < 700; i++) {
        last = submit(&f, KVT_H2D, (uint32_t)(i % 32) * 2, 2);
        assert_int_equal(last, first + 1 + (uint64_t)i);
    }
    assert_int_equal(f.ops->poll(f.priv, KVT_H2D, last + 1), -EINVAL);
    assert_int_equal(f.ops->wait(f.priv, KVT_H2D, last), 0);
    assert_int_equal(f.ops->poll(f.priv, KVT_H2D, first), 0);
    assert_int_equal(f.ops->poll(f.priv, KVT_H2D, last), 0);
    /* The other direction counts its own fences. */
    assert_int_equal(submit(&f, KVT_D2H, 0, 2), 1);
    fx_close(&f);
}

/* copy_sync of each kind; a kind that does not match its pointers is the
 * caller's error, not the device's: later batches still run. */
static void test_sync_copies(void **state)
{
    struct fx f;
    fx_open(&f);
    assert_int_equal(f.ops->copy_sync(f.priv, KVT_COPY_H2D, f.hbm, f.host, PB), 0);
    assert_int_equal(f.ops->copy_sync(f.priv, KVT_COPY_D2D, f.hbm + PB, f.hbm, PB), 0);
    assert_int_equal(f.ops->copy_sync(f.priv, KVT_COPY_D2H, f.back, f.hbm + PB, PB), 0);
    assert_true(t_check(f.back, PB, t_key(1, 0, 0), 1));
    assert_int_equal(f.ops->copy_sync(f.priv, KVT_COPY_H2H, f.back + PB, f.host + PB, PB), 0);
    assert_true(t_check(f.back + PB, PB, t_key(1, 0, 1), 1));
    assert_int_equal(f.ops->copy_sync(f.priv, KVT_COPY_H2D, f.back, f.host, PB), -EINVAL);
    assert_int_equal(f.ops->copy_sync(f.priv, 9, f.back, f.host, PB), -EINVAL);
    memset(f.back, 0, NP * PB);
    round_trip(&f, 8);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_call_per_batch),
        cmocka_unit_test(test_copy_by_copy_when_asked),
        cmocka_unit_test(test_refused_batch_falls_back),
        cmocka_unit_test(test_fences_across_the_ring),
        cmocka_unit_test(test_sync_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
