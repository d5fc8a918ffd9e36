/*
 * fleet.c — `kvtier replay TRACE --instances N [--remote URL]`: the trace's
 * requests dealt in turn to N engines, each with local tiers of its own,
 * first as N separate caches, then (with --remote) sharing a Redis Cluster
 * through kvtier's shared tier. Each request on its engine: kvt_exists on
 * its chain (where says local or shared), kvt_get of the hit prefix (every
 * byte checked), kvt_put of the rest. Reported per phase: the hit fraction,
 * where the hits came from, the bytes each way, what the shared tier lost.
 *
 * A request's engine flushes after its puts (kvt_flush sends what it
 * queued), as if requests arrived further apart than a publish takes: the
 * next request, on any engine, then sees them. The hit fractions are then
 * those of the trace's order, not of thread timing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/prefix/trace.h"
#include "tools/replay/replay.h"
#include "tools/util/json.h"
#include "tools/util/util.h"

struct phase {
    const char *name;
    bool shared;
    uint64_t refs, hit_blocks, hit_local, hit_remote, lost, bad, verified_bytes;
    uint64_t in_tokens, hit_tokens;
    uint64_t published, unpublished, bytes_out, bytes_in, corrupt, timeouts, errors;
    uint64_t redirects;
    double wall_s;
};

struct fleet {
    const struct replay_opts *o;
    struct pfx_trace tr;
    uint64_t requests;
    uint64_t cap_blocks;
    uint64_t nonce;
    kvt_engine **e;
    kvt_key *keys;
    kvt_tier *where;
    int *found;
    void **ptrs;
    uint8_t *buf;
    uint32_t longest;
    uint8_t *reused;    /* --publish reuse: per instance x block, 1 once hit, 2 once published */
};

static int fleet_open(struct fleet *f, bool shared)
{
    const struct replay_opts *o = f->o;
    kvt_config c;
    kvt_config_init(&c);
    c.page_bytes = o->block_bytes;
    uint64_t hbm = f->cap_blocks / 8 ? f->cap_blocks / 8 : 1;
    uint64_t dram = f->cap_blocks > hbm + 1 ? f->cap_blocks - hbm : 2;
    c.hbm_bytes = hbm * o->block_bytes;
    c.dram_bytes = dram * o->block_bytes;
    c.device = KVT_DEVICE_HOST;
    c.flags = KVT_FLAG_EVICT;
    c.policy = o->policy ? o->policy : "prefix";
    /* A fingerprint of this run: another run's values (same trace, same
     * keys) never count as hits here; they expire after a TTL. */
    c.fingerprint = f->nonce;
    if (shared) {
        c.remote_url = o->remote_url;
        c.remote_prefix = o->remote_prefix ? o->remote_prefix : "kvtreplay";
        c.remote_auth_file = o->remote_auth_file;
        c.remote_timeout_ms = o->remote_timeout_ms;
        c.remote_ttl_s = 3600;
        c.remote_publish = o->publish == REPLAY_PUBLISH_EVICT ? KVT_PUBLISH_EVICT
                           : o->publish == REPLAY_PUBLISH_REUSE ? KVT_PUBLISH_EXPLICIT
                                                                : KVT_PUBLISH_PUT;
    }
    for (unsigned i = 0; i < o->instances; i++) {
        int rc = kvt_open(&c, &f->e[i]);
        if (rc) {
            cli_error("replay", 1, "cannot open engine %u of %u%s: %s (%s)", i + 1, o->instances,
                      shared ? " on the cluster" : "", kvt_strerror(rc), kvt_last_error());
            return rc;
        }
    }
    return 0;
}

static void fleet_close(struct fleet *f, struct phase *p)
{
    for (unsigned i = 0; i < f->o->instances; i++) {
        if (!f->e[i])
            continue;
        kvt_stats s;
        kvt_flush(f->e[i]);
        kvt_get_stats(f->e[i], &s);
        p->published += s.remote_published;
        p->unpublished += s.remote_unpublished;
        p->bytes_out += s.remote_bytes_out;
        p->bytes_in += s.remote_bytes_in;
        p->corrupt += s.remote_corrupt;
        p->timeouts += s.remote_timeouts;
        p->errors += s.remote_errors;
        p->redirects += s.remote_redirects;
        p->lost += s.remote_lost;
        kvt_close(f->e[i]);
        f->e[i] = NULL;
    }
}

/* --publish reuse: a block hit on this instance a second time is worth
 * sharing (the prefix policy's own sign that a chain is shared). */
static void publish_reused(struct fleet *f, unsigned inst, const struct pfx_req *q, uint32_t h)
{
    uint8_t *mark = f->reused + (size_t)inst * f->tr.distinct;
    for (uint32_t j = 0; j < h; j++) {
        uint32_t b = f->tr.block[q->first + j];
        if (f->where[j] == KVT_TIER_REMOTE || mark[b] == 2)
            continue;
        if (mark[b] == 1 && kvt_publish(f->e[inst], &f->keys[j], 1) == 1)
            mark[b] = 2;
        else if (mark[b] == 0)
            mark[b] = 1;
    }
}

static int serve(struct fleet *f, struct phase *p, uint64_t i)
{
    const struct pfx_req *q = &f->tr.req[i];
    unsigned inst = (unsigned)(i % f->o->instances);
    kvt_engine *e = f->e[inst];
    size_t bb = f->o->block_bytes;
    for (uint32_t j = 0; j < q->n; j++) {
        f->keys[j] = replay_key(f->tr.hash[q->first + j], j);
        f->ptrs[j] = f->buf + (size_t)j * bb;
    }
    int h = kvt_exists(e, f->keys, q->n, f->where);
    if (h < 0)
        return h;
    int rc = h ? kvt_get(e, f->keys, (size_t)h, f->ptrs, 0, f->found) : 0;
    if (rc < 0)
        return rc;
    /* The prefix served: up to the first block that did not come back. */
    uint32_t got = 0;
    while (got < (uint32_t)h && f->found[got])
        got++;
    for (uint32_t j = 0; j < got; j++) {
        size_t off;
        if (!replay_check(&f->keys[j], f->ptrs[j], bb, &off)) {
            p->bad++;
            got = j;
            break;
        }
        p->verified_bytes += bb;
        if (f->where[j] == KVT_TIER_REMOTE)
            p->hit_remote++;
        else
            p->hit_local++;
    }
    p->refs += q->n;
    p->hit_blocks += got;
    p->in_tokens += q->in_tokens;
    uint64_t ht = (uint64_t)got * PFX_BLOCK_TOKENS;
    p->hit_tokens += ht < q->in_tokens ? ht : q->in_tokens;
    if (p->shared && f->o->publish == REPLAY_PUBLISH_REUSE)
        publish_reused(f, inst, q, got);
    if (got < q->n) {
        for (uint32_t j = got; j < q->n; j++)
            replay_fill(&f->keys[j], f->ptrs[j], bb);
        rc = kvt_put(e, f->keys + got, q->n - got, (const void *const *)(f->ptrs + got), 0);
        if (rc < 0 && rc != KVT_EFULL && rc != -EBUSY)
            return rc;
    }
    if (p->shared)
        kvt_flush(e);
    return 0;
}

static int run_phase(struct fleet *f, struct phase *p)
{
    int rc = fleet_open(f, p->shared);
    double t0 = util_now(), shown = t0;
    for (uint64_t i = 0; i < f->requests && rc == 0; i++) {
        if ((rc = cli_stop_check()))
            break;
        if ((rc = serve(f, p, i)) < 0)
            cli_error("replay", 1, "request %llu: %s (%s)", (unsigned long long)i + 1,
                      kvt_strerror(rc), kvt_last_error());
        double now = util_now();
        if (f->o->progress > 0 || (f->o->progress < 0 && isatty(2) && now - shown > 0.5)) {
            fprintf(stderr, "\r%s: %llu/%llu requests", p->name, (unsigned long long)i + 1,
                    (unsigned long long)f->requests);
            shown = now;
        }
    }
    if (f->o->progress > 0 || (f->o->progress < 0 && isatty(2)))
        fprintf(stderr, "\n");
    p->wall_s = util_now() - t0;
    fleet_close(f, p);
    if (rc == 0 && p->bad)
        rc = 1;
    return rc;
}

static double frac(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0;
}

static void report_text(FILE *out, const struct fleet *f, const struct phase *ph, int n)
{
    fprintf(out, "kvtier replay: %llu requests dealt in turn to %u engines, each caching %llu "
                 "blocks of %llu bytes (%.3g x the trace's %u distinct blocks)\n",
            (unsigned long long)f->requests, f->o->instances, (unsigned long long)f->cap_blocks,
            (unsigned long long)f->o->block_bytes, frac(f->cap_blocks, f->tr.distinct),
            f->tr.distinct);
    for (int i = 0; i < n; i++) {
        const struct phase *p = &ph[i];
        fprintf(out, "  %-9s hit fraction %.4f of blocks (%.4f of tokens): %llu local, %llu from "
                     "the cluster; %llu bytes verified, %llu wrong; %.1f s\n",
                p->name, frac(p->hit_blocks, p->refs), frac(p->hit_tokens, p->in_tokens),
                (unsigned long long)p->hit_local, (unsigned long long)p->hit_remote,
                (unsigned long long)p->verified_bytes, (unsigned long long)p->bad, p->wall_s);
        if (p->shared)
            fprintf(out, "            published %llu blocks (%.1f MB), not published %llu; loaded "
                         "%.1f MB; lost %llu, corrupt %llu, timeouts %llu, errors %llu, "
                         "redirects %llu\n",
                    (unsigned long long)p->published, p->bytes_out / 1e6,
                    (unsigned long long)p->unpublished, p->bytes_in / 1e6,
                    (unsigned long long)p->lost, (unsigned long long)p->corrupt,
                    (unsigned long long)p->timeouts, (unsigned long long)p->errors,
                    (unsigned long long)p->redirects);
    }
}

static void report_json(const struct fleet *f, const struct phase *ph, int n)
{
    json_t *j = json_object();
    util_json_set_str(j, "trace", f->o->trace_path);
    util_json_set_u64(j, "requests", f->requests);
    util_json_set_u64(j, "instances", f->o->instances);
    util_json_set_u64(j, "block_bytes", f->o->block_bytes);
    util_json_set_u64(j, "capacity_blocks_each", f->cap_blocks);
    util_json_set_u64(j, "distinct_blocks", f->tr.distinct);
    util_json_set_str(j, "publish", f->o->publish == REPLAY_PUBLISH_EVICT   ? "evict"
                                    : f->o->publish == REPLAY_PUBLISH_REUSE ? "reuse"
                                                                           : "put");
    for (int i = 0; i < n; i++) {
        const struct phase *p = &ph[i];
        json_t *o = json_object();
        util_json_set_u64(o, "block_refs", p->refs);
        util_json_set_u64(o, "hit_blocks", p->hit_blocks);
        util_json_set_real(o, "hit_fraction", frac(p->hit_blocks, p->refs));
        util_json_set_real(o, "hit_fraction_tokens", frac(p->hit_tokens, p->in_tokens));
        util_json_set_u64(o, "hits_local", p->hit_local);
        util_json_set_u64(o, "hits_remote", p->hit_remote);
        util_json_set_u64(o, "bytes_verified", p->verified_bytes);
        util_json_set_u64(o, "bad_blocks", p->bad);
        util_json_set_bool(o, "verified", p->bad == 0);
        util_json_set_u64(o, "published", p->published);
        util_json_set_u64(o, "unpublished", p->unpublished);
        util_json_set_u64(o, "remote_bytes_out", p->bytes_out);
        util_json_set_u64(o, "remote_bytes_in", p->bytes_in);
        util_json_set_u64(o, "remote_lost", p->lost);
        util_json_set_u64(o, "remote_corrupt", p->corrupt);
        util_json_set_u64(o, "remote_timeouts", p->timeouts);
        util_json_set_u64(o, "remote_errors", p->errors);
        util_json_set_u64(o, "remote_redirects", p->redirects);
        util_json_set_real(o, "wall_s", p->wall_s);
        json_object_set_new(j, p->name, o);
    }
    util_json_print(stdout, j);
}

static int fleet_alloc(struct fleet *f)
{
    f->requests = f->o->requests && f->o->requests < f->tr.n_req ? f->o->requests : f->tr.n_req;
    uint32_t longest = 1;
    for (uint64_t i = 0; i < f->requests; i++)
        longest = f->tr.req[i].n > longest ? f->tr.req[i].n : longest;
    f->longest = longest;
    f->e = calloc(f->o->instances, sizeof(*f->e));
    f->keys = malloc(longest * sizeof(*f->keys));
    f->where = malloc(longest * sizeof(*f->where));
    f->found = malloc(longest * sizeof(*f->found));
    f->ptrs = malloc(longest * sizeof(*f->ptrs));
    f->buf = aligned_alloc(4096, (size_t)longest * f->o->block_bytes);
    f->reused = calloc((size_t)f->o->instances * (f->tr.distinct ? f->tr.distinct : 1), 1);
    return f->e && f->keys && f->where && f->found && f->ptrs && f->buf && f->reused ? 0
                                                                                    : -ENOMEM;
}

static void fleet_free(struct fleet *f)
{
    free(f->e);
    free(f->keys);
    free(f->where);
    free(f->found);
    free(f->ptrs);
    free(f->buf);
    free(f->reused);
    pfx_trace_free(&f->tr);
}

int replay_fleet(const struct replay_opts *o)
{
    struct fleet f = { .o = o };
    FILE *in = fopen(o->trace_path, "r");
    if (!in)
        return cli_error("replay", 1, "cannot open %s: %s", o->trace_path, strerror(errno)), 1;
    char err[256] = "";
    int rc = pfx_trace_read(in, &f.tr, err, sizeof err);
    fclose(in);
    if (rc || f.tr.n_req == 0) {
        cli_error("replay", 1, "%s: %s", o->trace_path, rc ? (err[0] ? err : strerror(-rc))
                                                           : "no requests");
        pfx_trace_free(&f.tr);
        return 1;
    }
    if (fleet_alloc(&f)) {
        fleet_free(&f);
        return cli_error("replay", 1, "out of memory"), 1;
    }
    if (o->capacity.kind == CAP_BYTES)
        f.cap_blocks = o->capacity.bytes / o->block_bytes;
    else
        f.cap_blocks = (uint64_t)(o->capacity.frac * f.tr.distinct);
    if (f.cap_blocks < 3)
        f.cap_blocks = 3;
    f.nonce = util_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x6b7666;
    struct phase ph[2] = { { .name = "separate" }, { .name = "shared", .shared = true } };
    int n = o->remote_url ? 2 : 1;
    for (int i = 0; i < n && rc == 0; i++)
        rc = run_phase(&f, &ph[i]);
    if (rc >= 0) {
        report_text(o->json ? stderr : stdout, &f, ph, n);
        if (o->json)
            report_json(&f, ph, n);
    }
    if (ph[0].bad || ph[1].bad)
        cli_error("replay", 1, "verification FAILED: %llu blocks read back wrong",
                  (unsigned long long)(ph[0].bad + ph[1].bad));
    fleet_free(&f);
    return rc < 0 ? (rc == -EINVAL ? 2 : 1) : rc;
}
