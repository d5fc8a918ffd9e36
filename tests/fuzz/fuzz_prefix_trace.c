/*
 * fuzz_prefix_trace.c — the Mooncake JSONL request traces of `kvtier sim`
 * and `kvtier replay` (tools/prefix/trace.c): pfx_trace_parse on the input
 * as a buffer, and pfx_trace_read on the same bytes as a file.
 *
 * Rules: both give the same result (0, or -EINVAL / -E2BIG with the same
 * "line N: ..." message) and the same trace; a trace read is consistent:
 * requests cover hash[] in order without gaps, each line number is that of
 * its request, every dense block id is below distinct, and two references
 * have the same dense id exactly when they have the same hash id.
 */
#include "tests/fuzz/fuzz.h"
#include "tools/prefix/trace.h"

struct pair {
    uint64_t hash;
    uint32_t block;
};

static int by_hash(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

static void check_dense(const struct pfx_trace *t)
{
    struct pair *p = malloc((t->n_hash ? t->n_hash : 1) * sizeof(*p));
    fuzz_check(p != NULL, "memory");
    uint32_t next = 0;
    for (size_t i = 0; i < t->n_hash; i++) {
        fuzz_check(t->block[i] < t->distinct, "a dense id is below distinct");
        /* Dense ids are given in order of first appearance. */
        fuzz_check(t->block[i] <= next, "dense ids in order of first appearance");
        next += t->block[i] == next;
        p[i] = (struct pair){ t->hash[i], t->block[i] };
    }
    fuzz_check(next == t->distinct, "every dense id is used");
    qsort(p, t->n_hash, sizeof(*p), by_hash);
    for (size_t i = 1; i < t->n_hash; i++)
        fuzz_check((p[i].hash == p[i - 1].hash) == (p[i].block == p[i - 1].block),
                   "same dense id exactly when same hash id");
    free(p);
}

static void check_trace(const struct pfx_trace *t)
{
    size_t at = 0;
    uint32_t line = 0;
    for (size_t i = 0; i < t->n_req; i++) {
        const struct pfx_req *q = &t->req[i];
        fuzz_check(q->first == at && q->n <= t->n_hash - at, "requests cover hash[] in order");
        fuzz_check(q->line > line, "requests in line order");
        at += q->n;
        line = q->line;
    }
    fuzz_check(at == t->n_hash, "no reference outside a request");
    fuzz_check(t->block_tokens == PFX_BLOCK_TOKENS, "block tokens");
    check_dense(t);
}

/* Field by field: struct pfx_req has padding, whose bytes nothing sets. */
static bool same_req(const struct pfx_req *x, const struct pfx_req *y)
{
    return x->t_ms == y->t_ms && x->in_tokens == y->in_tokens &&
           x->out_tokens == y->out_tokens && x->n == y->n && x->first == y->first &&
           x->line == y->line;
}

static void check_same(const struct pfx_trace *a, const struct pfx_trace *b)
{
    fuzz_check(a->n_req == b->n_req && a->n_hash == b->n_hash && a->distinct == b->distinct,
               "parse and read agree on the sizes");
    for (size_t i = 0; i < a->n_req; i++)
        fuzz_check(same_req(&a->req[i], &b->req[i]), "the same requests");
    if (a->n_hash)
        fuzz_check(!memcmp(a->hash, b->hash, a->n_hash * sizeof(*a->hash)) &&
                       !memcmp(a->block, b->block, a->n_hash * sizeof(*a->block)),
                   "the same references");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "", err2[256] = "";
    struct pfx_trace t, t2;
    int r = pfx_trace_parse((const char *)data, size, &t, err, sizeof err);
    fuzz_check(r == 0 || r == -EINVAL || r == -E2BIG, "a trace is read or refused");
    if (r)
        fuzz_check(!strncmp(err, "line ", 5) && t.n_req == 0 && !t.req && !t.hash,
                   "a refused trace says where and is left empty");
    else
        check_trace(&t);

    FILE *f = fmemopen(size ? (void *)data : (void *)"", size ? size : 1, "r");
    fuzz_check(f != NULL, "fmemopen");
    if (!size)
        fgetc(f);
    int r2 = pfx_trace_read(f, &t2, err2, sizeof err2);
    fclose(f);
    fuzz_check(r2 == r && !strcmp(err, err2), "the buffer and the file read alike");
    if (!r)
        check_same(&t, &t2);
    pfx_trace_free(&t);
    pfx_trace_free(&t2);
    return 0;
}
