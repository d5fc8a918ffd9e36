/*
 * feed.c — the attention feed of `kvtier run` on the CPU: the team of
 * attention threads (attention.c's pool), fed a group's pages chunk by
 * chunk as the caller acquires them (struct run_feed in run_priv.h).
 *
 * Streaming: the caller raises `ready` as chunks come in; each part takes a
 * unit (up to 16 q heads of a kv head: attention.h) no other part holds and folds it over the pages ready for it,
 * gives it back, and so on until every head has folded every page of the
 * group (or the caller aborts it). Heads go to whichever part is free, not
 * half to each: a part that the scheduler runs late (the engine's copy,
 * reaper and mover threads preempt the niced attention) does not hold back
 * a fixed half of the heads while the other part idles
 * (docs/performance.md#attention-feed). A head's pages still fold in page
 * order, one part at a time, so the bits are those of the reference.
 *
 * Locking: mu guards ready, head_done, head_busy, cpu_s and abort; the
 * caller's thread writes ptrs, q and the job only while the team is idle.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "tools/cli.h"
#include "tools/run/run_priv.h"

static const void *page_acquired(void *ctx, uint32_t page, uint32_t h0, uint32_t h1, void *scr)
{
    struct run_job *j = ctx;
    return j->f->ptrs[page - j->p0];
}

static const void *page_regenerated(void *ctx, uint32_t page, uint32_t h0, uint32_t h1,
                                    void *scr)
{
    struct run_job *j = ctx;
    const struct attn_shape *s = j->sh;
    uint32_t first = page * s->page_tokens;
    uint32_t nt = j->n_tokens - first < s->page_tokens ? j->n_tokens - first : s->page_tokens;
    run_fill_page(s, j->seed, j->seq, j->layer, page, nt, h0, h1, scr);
    return scr;
}

/* A unit (attention.h) a streamed part may fold next (under mu): one no
 * part holds, with pages ready beyond those it has folded, the least
 * advanced first (the pages every unit is done with go back to the engine).
 * KVT_NONE when there is none now. */
static uint32_t head_pick(const struct run_feed *f)
{
    uint32_t best = KVT_NONE;
    for (uint32_t h = 0; h < attn_units(f->sh); h++)
        if (!f->head_busy[h] && f->head_done[h] < f->ready &&
            (best == KVT_NONE || f->head_done[h] < f->head_done[best]))
            best = h;
    return best;
}

/* Pages every unit has folded (under mu). */
static uint32_t heads_done(const struct run_feed *f)
{
    uint32_t m = UINT32_MAX;
    for (uint32_t h = 0; h < attn_units(f->sh); h++)
        m = f->head_done[h] < m ? f->head_done[h] : m;
    return m;
}

/* Folds unit h over the group's pages [from, to) (counted from its first,
 * j->p0) of the streamed group. */
static void fold_head(struct run_job *j, unsigned part, uint32_t h, uint32_t from, uint32_t to,
                      uint32_t np)
{
    struct run_feed *f = j->f;
    if (from == 0)
        attn_begin(j->sh, h, h + 1, f->m, f->l, j->out);
    attn_pages(j->sh, f->q, j->n_tokens, j->p0 + from, j->p0 + to, h, h + 1, page_acquired, j,
               f->scratch[part], f->m, f->l, j->out);
    if (to == np)
        attn_end(j->sh, h, h + 1, f->l, j->out);
}

/* A streamed part: heads in turn until every head has folded all np pages
 * or the group is aborted (see the file comment). */
static void attn_stream(struct run_job *j, unsigned part, uint32_t np)
{
    struct run_feed *f = j->f;
    assert(!j->reference); /* the reference reads regenerated pages, whole */
    pthread_mutex_lock(&f->mu);
    for (;;) {
        uint32_t h = f->abort ? KVT_NONE : head_pick(f);
        if (h == KVT_NONE) {
            if (f->abort || heads_done(f) >= np)
                break;
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        uint32_t from = f->head_done[h], to = f->ready;
        f->head_busy[h] = 1;
        pthread_mutex_unlock(&f->mu);
        fold_head(j, part, h, from, to, np);
        pthread_mutex_lock(&f->mu);
        f->head_done[h] = to;
        f->head_busy[h] = 0;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void attn_part(void *arg, unsigned part, unsigned nparts)
{
    struct run_job *j = arg;
    struct run_feed *f = j->f;
    uint32_t np = (j->n_tokens + j->sh->page_tokens - 1) / j->sh->page_tokens - j->p0;
    double c0 = util_thread_cpu(); /* a wall clock would count preemption too */
    if (j->stream) {
        attn_stream(j, part, np);
    } else {
        uint32_t U = attn_units(j->sh), u0 = U * part / nparts, u1 = U * (part + 1) / nparts;
        attn_page_fn get = j->reference ? page_regenerated : page_acquired;
        if (u0 < u1)
            attn_decode(j->sh, f->q, j->n_tokens, u0, u1, get, j, f->scratch[part], j->out);
    }
    double c = util_thread_cpu() - c0;
    pthread_mutex_lock(&f->mu);
    f->cpu_s[part] = c;
    pthread_mutex_unlock(&f->mu);
}

int feed_init(struct run_feed *f, const struct attn_shape *sh, unsigned threads, int nice,
              bool pin, size_t scratch)
{
    size_t qf = (size_t)sh->q_heads * sh->head_dim; /* >= q_heads * v_dim: out too */
    *f = (struct run_feed){ .sh = sh };
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->sync_made = true;
    if (!(f->pool = attn_pool_new(threads, nice, pin)))
        return -ENOMEM;
    unsigned nt = attn_pool_threads(f->pool);
    f->head_done = calloc(attn_units(sh), sizeof(uint32_t));
    f->head_busy = calloc(attn_units(sh), 1);
    f->cpu_s = calloc(nt, sizeof(double));
    f->scratch = calloc(nt, sizeof(float *));
    f->q = malloc(qf * sizeof(float));
    f->out = malloc(qf * sizeof(float));
    f->m = malloc(sh->q_heads * sizeof(float));
    f->l = malloc(sh->q_heads * sizeof(float));
    if (!f->head_done || !f->head_busy || !f->cpu_s || !f->scratch || !f->q || !f->out ||
        !f->m || !f->l)
        return -ENOMEM;
    for (unsigned i = 0; i < nt; i++)
        if (!(f->scratch[i] = malloc(scratch)))
            return -ENOMEM;
    return 0;
}

void feed_free(struct run_feed *f)
{
    if (f->scratch)
        for (unsigned i = 0; i < (f->pool ? attn_pool_threads(f->pool) : 0); i++)
            free(f->scratch[i]);
    free(f->scratch);
    attn_pool_free(f->pool);
    free(f->head_done);
    free(f->head_busy);
    free(f->cpu_s);
    if (f->sync_made) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
    }
    free(f->q);
    free(f->out);
    free(f->m);
    free(f->l);
    *f = (struct run_feed){ 0 };
}

unsigned feed_pinned(struct run_feed *f)
{
    return attn_pool_pinned(f->pool);
}

bool feed_background(const struct run_feed *f)
{
    return attn_pool_background(f->pool);
}

void feed_begin(struct run_feed *f, void **ptrs, uint32_t p0, uint32_t ready)
{
    f->ptrs = ptrs;
    f->p0 = p0;
    pthread_mutex_lock(&f->mu);
    f->ready = ready;
    f->abort = false;
    for (uint32_t h = 0; h < attn_units(f->sh); h++)
        f->head_done[h] = 0, f->head_busy[h] = 0;
    for (unsigned i = 0; i < attn_pool_threads(f->pool); i++)
        f->cpu_s[i] = 0;
    pthread_mutex_unlock(&f->mu);
}

void feed_start(struct run_feed *f, uint32_t n_tokens, uint32_t seq, uint32_t layer,
                uint64_t seed)
{
    f->job = (struct run_job){ f, f->sh, f->out, n_tokens, seq, layer, f->p0, seed, false, true };
    attn_pool_start(f->pool, attn_part, &f->job);
}

uint32_t feed_ready(struct run_feed *f, uint32_t ready)
{
    pthread_mutex_lock(&f->mu);
    f->ready = ready;
    pthread_cond_broadcast(&f->cv);
    uint32_t m = heads_done(f);
    pthread_mutex_unlock(&f->mu);
    return m;
}

void feed_abort(struct run_feed *f)
{
    pthread_mutex_lock(&f->mu);
    f->abort = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

double feed_join(struct run_feed *f)
{
    return attn_pool_join(f->pool);
}

double feed_busiest(struct run_feed *f)
{
    double busy = 0;
    pthread_mutex_lock(&f->mu);
    for (unsigned i = 0; i < attn_pool_threads(f->pool); i++)
        busy = f->cpu_s[i] > busy ? f->cpu_s[i] : busy;
    pthread_mutex_unlock(&f->mu);
    return busy;
}

double feed_cpu(struct run_feed *f)
{
    double sum = 0;
    pthread_mutex_lock(&f->mu);
    for (unsigned i = 0; i < attn_pool_threads(f->pool); i++)
        sum += f->cpu_s[i];
    pthread_mutex_unlock(&f->mu);
    return sum;
}

void feed_reference(struct run_feed *f, const struct attn_shape *sh, float *out,
                    uint32_t n_tokens, uint32_t seq, uint32_t layer, uint64_t seed)
{
    f->job = (struct run_job){ f, sh, out, n_tokens, seq, layer, 0, seed, true, false };
    attn_pool_run(f->pool, attn_part, &f->job);
}
