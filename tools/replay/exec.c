/*
 * exec.c — `kvtier replay` from options to results (replay_exec): the trace
 * read, the capacities sized and checked, the spill directory claimed and
 * its disk measured raw, the engine opened, the requests served, the disk
 * measured again, everything made undone.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "tools/cli.h"
#include "tools/fsck/spill.h"
#include "tools/replay/replay_priv.h"

/* Chunk buffers hold at most this much: a longer chain is fetched and
 * stored in several calls. */
#define REPLAY_CHUNK_BYTES (256u << 20)
#define REPLAY_CHUNK_MAX 4096u

static int read_trace(struct replay_ctx *x)
{
    const char *path = x->o->trace_path;
    FILE *f = fopen(path, "r");
    if (!f) {
        int rc = -errno;
        cli_error("replay", 1, "cannot open %s: %s", path, strerror(-rc));
        return rc;
    }
    char err[256] = "";
    int rc = pfx_trace_read(f, &x->tr, err, sizeof err);
    fclose(f);
    if (rc) {
        cli_error("replay", 1, "%s: %s", path, err[0] ? err : strerror(-rc));
        return rc == -EINVAL ? -EBADMSG : rc; /* a bad file, not a bad argument: exit 1 */
    }
    if (x->tr.n_req == 0) {
        cli_error("replay", 1, "%s: no requests", path);
        return -ENODATA;
    }
    return 0;
}

/* Per dense block: its hash, and the index its key takes: its position in
 * the chain where it first appears. In a prefix trace a hash has one depth
 * (it names the whole prefix before it); one seen at another depth later
 * keeps its first, so that a block is one key, as it is one block to the
 * simulator; the report counts such references. */
static int index_blocks(struct replay_ctx *x)
{
    struct replay_result *r = x->r;
    uint32_t nb = x->tr.distinct;
    x->hash_of = malloc((nb ? nb : 1) * sizeof(uint64_t));
    x->depth = malloc((nb ? nb : 1) * sizeof(uint32_t));
    uint8_t *seen = calloc(nb ? nb : 1, 1);
    if (!x->hash_of || !x->depth || !seen) {
        free(seen);
        return -ENOMEM;
    }
    r->requests = x->o->requests && x->o->requests < x->tr.n_req ? x->o->requests : x->tr.n_req;
    for (uint64_t i = 0; i < r->requests; i++) {
        const struct pfx_req *q = &x->tr.req[i];
        for (uint32_t j = 0; j < q->n; j++) {
            uint32_t b = x->tr.block[q->first + j];
            if (!seen[b]) {
                seen[b] = 1;
                r->distinct++;
                x->hash_of[b] = x->tr.hash[q->first + j];
                x->depth[b] = j;
            } else if (x->depth[b] != j) {
                r->depth_conflicts++;
            }
        }
    }
    free(seen);
    return 0;
}

/* A worker's buffers: per request, sized for the longest chain; per call,
 * for the chunk. */
static int worker_alloc(struct replay_ctx *x, struct replay_worker *w)
{
    uint32_t longest = x->longest;
    w->keys = malloc(longest * sizeof(kvt_key));
    w->where = malloc(longest * sizeof(kvt_tier));
    w->found = malloc(longest * sizeof(int));
    w->sel = malloc(longest * sizeof(uint32_t));
    w->ckeys = malloc(x->chunk * sizeof(kvt_key));
    w->cfound = malloc(x->chunk * sizeof(int));
    w->cwhere = malloc(x->chunk * sizeof(kvt_tier));
    w->ptrs = malloc(x->chunk * sizeof(void *));
    /* In huge pages, as the raw baseline's: a malloc'd buffer had the
     * replay's SSD loads at 0.2x raw on a virtual disk. */
    w->buf = cli_huge_alloc((size_t)x->chunk * x->bb, &w->buf_map);
    if (!w->keys || !w->where || !w->found || !w->sel || !w->ckeys || !w->cfound || !w->cwhere ||
        !w->ptrs || !w->buf)
        return -ENOMEM;
    return 0;
}

static void worker_free(struct replay_worker *w)
{
    free(w->keys);
    free(w->where);
    free(w->found);
    free(w->sel);
    free(w->ckeys);
    free(w->cfound);
    free(w->cwhere);
    free(w->ptrs);
    cli_huge_free(&w->buf_map);
}

static int ctx_alloc(struct replay_ctx *x)
{
    uint32_t longest = 1;
    for (uint64_t i = 0; i < x->r->requests; i++)
        longest = x->tr.req[i].n > longest ? x->tr.req[i].n : longest;
    x->longest = longest;
    uint64_t chunk = REPLAY_CHUNK_BYTES / x->bb;
    chunk = chunk < longest ? chunk : longest;
    chunk = chunk < REPLAY_CHUNK_MAX ? chunk : REPLAY_CHUNK_MAX;
    x->chunk = chunk ? (uint32_t)chunk : 1;
    x->ttft_load = calloc(x->r->requests, sizeof(float));
    x->ttft_recompute = calloc(x->r->requests, sizeof(float));
    unsigned nw = x->o->concurrency ? x->o->concurrency : 1;
    x->w = calloc(nw, sizeof(*x->w));
    if (!x->ttft_load || !x->ttft_recompute || !x->w)
        return -ENOMEM;
    x->nw = nw;
    for (unsigned i = 0; i < nw; i++)
        if (worker_alloc(x, &x->w[i]) < 0)
            return -ENOMEM;
    return replay_lru_init(&x->lru, x->tr.distinct);
}

static void ctx_free(struct replay_ctx *x)
{
    kvt_close(x->e);
    x->e = NULL;
    pfx_trace_free(&x->tr);
    free(x->hash_of);
    free(x->depth);
    for (unsigned i = 0; i < x->nw; i++)
        worker_free(&x->w[i]);
    free(x->w);
    free(x->ttft_load);
    free(x->ttft_recompute);
    replay_lru_free(&x->lru);
    trace_free(&x->trace);
    free(x->same_offs);
    free(x->same_sizes);
    pthread_mutex_destroy(&x->mu);
    /* The engine's files by name and the directory, never a recursive
     * removal: anything else found there stays. */
    if (x->tmpdir[0] && kvt_spill_remove(x->tmpdir) < 0)
        cli_error("replay", 1, "%s", kvt_last_error());
    if (x->discard && spill_discard(x->ssd_dir) < 0)
        cli_error("replay", 1, "%s", kvt_last_error());
}

/* The spill directory (a temporary one unless --ssd-dir), made if missing
 * and claimed: it must be empty or kvtier's before anything is written
 * there, and hold no persisted page the engine (persist off) would wipe
 * unless --overwrite-ssd-dir; then the disk is measured raw in it. */
static int spill_prepare(struct replay_ctx *x)
{
    if (!x->r->slots[KVT_TIER_SSD])
        return 0;
    x->ssd_dir = x->o->ssd_dir;
    if (!x->ssd_dir) {
        const char *tmp = getenv("TMPDIR");
        snprintf(x->tmpdir, sizeof x->tmpdir, "%s/kvtier-replay-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(x->tmpdir)) {
            int rc = -errno;
            cli_error("replay", 1, "cannot make a spill directory %s: %s", x->tmpdir, strerror(-rc));
            x->tmpdir[0] = 0;
            return rc;
        }
        x->ssd_dir = x->tmpdir;
    }
    int dfd;
    bool ours;
    int rc = kvt_spill_opendir(x->ssd_dir, true, &dfd);
    if (rc < 0) {
        cli_error("replay", 1, "--ssd-dir: %s", kvt_last_error());
        return rc;
    }
    rc = kvt_spill_claim(dfd, x->ssd_dir, &ours);
    close(dfd);
    if (rc < 0) {
        cli_error("replay", 2, "--ssd-dir: %s", kvt_last_error());
        return -EINVAL;
    }
    if (!x->tmpdir[0] && !x->o->overwrite_ssd_dir &&
        spill_refuse_store("replay", "--ssd-dir", x->ssd_dir, "--overwrite-ssd-dir"))
        return -EINVAL;
    replay_raw_before(x);
    return 0;
}

static int open_engine(struct replay_ctx *x)
{
    kvt_config c;
    replay_engine_config(x, &c);
    int rc = kvt_open(&c, &x->e);
    if (rc)
        cli_error("replay", 1, "cannot open the engine: %s (%s)", kvt_strerror(rc), kvt_last_error());
    x->discard = rc == 0 && c.ssd_bytes && !x->tmpdir[0];
    return rc;
}

static int finish(struct replay_ctx *x)
{
    const struct replay_result *r = x->r;
    if (r->bad_blocks)
        cli_error("replay", 1,
                  "verification FAILED: %llu blocks read back wrong; the first: id %llu, index %u, "
                  "byte %zu",
                  (unsigned long long)r->bad_blocks, (unsigned long long)r->bad_id, r->bad_index,
                  r->bad_offset);
    int rc = r->bad_blocks ? 1 : 0;
    if (x->o->trace_out) {
        int w = replay_trace_write(x, x->o->trace_out);
        if (w) {
            cli_error("replay", 1, "cannot write --trace %s: %s", x->o->trace_out, strerror(-w));
            rc = rc ? rc : w;
        }
    }
    return rc;
}

int replay_exec(const struct replay_opts *o, struct replay_result *r)
{
    struct replay_ctx x = { .o = o, .r = r, .bb = o->block_bytes };
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&x.mu, NULL);
    trace_init(&x.trace, util_now());
    int rc = read_trace(&x);
    if (rc == 0 && (rc = index_blocks(&x)) == 0 && (rc = replay_size(&x)) == 0)
        rc = replay_check_config(&x);
    if (rc)
        goto out;
    if ((rc = ctx_alloc(&x))) {
        cli_error("replay", 1, "out of memory");
        goto out;
    }
    /* A signal's flag is checked between the phases and before each request
     * (cli_stop_check): ctx_free then removes the temporary directory. */
    if ((rc = cli_stop_check()) || (rc = spill_prepare(&x)) || (rc = cli_stop_check()) ||
        (rc = open_engine(&x)))
        goto out;
    if ((rc = replay_requests(&x)) || (rc = cli_stop_check())) {
        if (!x.said && !cli_stopped())
            cli_error("replay", 1, "%s (%s)", kvt_strerror(rc), kvt_last_error());
        goto out;
    }
    if (r->slots[KVT_TIER_SSD])
        replay_raw_after(&x);
    rc = finish(&x);
out:
    ctx_free(&x);
    return rc;
}
