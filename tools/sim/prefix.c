/*
 * prefix.c — `kvtier sim` on prefix-cache request traces (Mooncake's JSONL,
 * tools/prefix/trace.h): each policy's prefix-hit fraction at each capacity,
 * beside Belady MIN, in seconds.
 *
 * The model is a prefix cache of `capacity` blocks, the calls an engine makes
 * through kvtier (what `kvtier replay` makes for real): per request, the hit
 * prefix is the leading blocks present; they are read (access, then one
 * KVT_BATCH_GET); the other blocks are stored (one KVT_BATCH_PUT), each
 * evicting the policy's victim when the cache is full, never a block of the
 * request being served. A block stored again while present (a deeper block
 * past a missing one) replaces its page, as kvt_put does. Block keys are
 * replay's: (hash id, KVT_ALL_LAYERS, position in the chain where the hash
 * was first seen). The policies are the engine's own code (policy/);
 * Belady MIN is computed here, offline: it evicts the block whose next use
 * is furthest, the request being served keeping its blocks.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "policy/policy.h"
#include "tools/cli.h"
#include "tools/prefix/trace.h"
#include "tools/sim/prefix.h"

#define PFX_MAX_CAPS 8
#define PFX_MAX_POLS 8
#define TIER KVT_TIER_SSD

struct popts {
    const char *trace;
    double caps[PFX_MAX_CAPS];
    int n_caps;
    const char *pols[PFX_MAX_POLS];
    int n_pols;
    uint64_t requests;   /* 0 = all */
    bool json;
};

struct presult {
    const char *policy;
    double cap_frac;
    uint64_t cap_blocks, hits, refs, stored;
};

/* ------------------------------------------------------------- the model */

struct pcache {
    const struct pfx_trace *t;
    size_t n_req;
    uint32_t *pg_of;     /* [dense block] -> page, KVT_NONE when absent */
    uint32_t *block_of;  /* [page] -> dense block */
    kvt_key *key_of;     /* [page] */
    uint32_t *depth;     /* [dense block] -> its first position */
    uint32_t *free_pg;   /* stack of free pages */
    uint32_t n_free, cap;
    uint64_t *mark;      /* [dense block] -> request index + 1 that uses it now */
    uint64_t cur;        /* request index + 1 being served */
};

static bool not_current(void *ctx, uint32_t pg)
{
    struct pcache *c = ctx;
    return c->mark[c->block_of[pg]] != c->cur;
}

static const kvt_key *host_key_of(void *ctx, uint32_t pg)
{
    return &((struct pcache *)ctx)->key_of[pg];
}

static uint32_t host_find(void *ctx, const kvt_key *k)
{
    return KVT_NONE; /* the prefix policies never ask */
}

/* Drops page pg (the policy's victim, or a block stored again). */
static void cache_drop(struct pcache *c, const struct kvt_policy_ops *ops, void *priv, uint32_t pg)
{
    ops->remove(priv, TIER, pg);
    c->pg_of[c->block_of[pg]] = KVT_NONE;
    c->free_pg[c->n_free++] = pg;
}

/* The most blocks one of the first n_req requests has (at least 1). */
static uint32_t longest(const struct pfx_trace *t, size_t n_req)
{
    uint32_t m = 1;
    for (size_t i = 0; i < n_req; i++)
        m = t->req[i].n > m ? t->req[i].n : m;
    return m;
}

/* One policy over the trace at capacity cap. -ENOMEM, -ENOSPC (a request
 * longer than the cache). */
static int run_policy(const struct pfx_trace *t, size_t n_req, const struct kvt_policy_ops *ops,
                      uint32_t cap, struct presult *res)
{
    struct pcache c = { .t = t, .cap = cap };
    uint64_t meta = 0;
    void *priv = NULL;
    uint32_t *pgs = NULL;
    int r = -ENOMEM;
    c.pg_of = malloc((size_t)t->distinct * sizeof(*c.pg_of));
    c.depth = malloc((size_t)t->distinct * sizeof(*c.depth));
    c.mark = calloc(t->distinct, sizeof(*c.mark));
    c.block_of = malloc((size_t)cap * sizeof(*c.block_of));
    c.key_of = malloc((size_t)cap * sizeof(*c.key_of));
    c.free_pg = malloc((size_t)cap * sizeof(*c.free_pg));
    pgs = malloc((size_t)longest(t, n_req) * sizeof(*pgs));
    if (!c.pg_of || !c.depth || !c.mark || !c.block_of || !c.key_of || !c.free_pg || !pgs)
        goto out;
    memset(c.pg_of, 0xff, (size_t)t->distinct * sizeof(*c.pg_of));
    memset(c.depth, 0xff, (size_t)t->distinct * sizeof(*c.depth));
    for (uint32_t i = 0; i < cap; i++)
        c.free_pg[i] = cap - 1 - i;
    c.n_free = cap;
    struct kvt_policy_params pp = { .page_cap = cap, .meta = &meta,
                                    .host = { &c, host_key_of, host_find } };
    pp.slots[TIER] = cap;
    if ((r = ops->create(&pp, &priv)) < 0)
        goto out;
    *res = (struct presult){ .policy = ops->name, .cap_blocks = cap };
    for (size_t i = 0; i < n_req; i++) {
        const struct pfx_req *q = &t->req[i];
        const uint32_t *blk = t->block + q->first;
        if (q->n > cap) {
            r = -ENOSPC;
            goto out;
        }
        c.cur = i + 1;
        uint32_t k = 0;
        while (k < q->n && c.pg_of[blk[k]] != KVT_NONE)
            k++;
        for (uint32_t d = 0; d < q->n; d++) {
            c.mark[blk[d]] = c.cur;
            if (c.depth[blk[d]] == UINT32_MAX)
                c.depth[blk[d]] = d;
        }
        for (uint32_t d = 0; d < k; d++) {
            pgs[d] = c.pg_of[blk[d]];
            ops->access(priv, TIER, pgs[d]);
        }
        if (k && ops->batch)
            ops->batch(priv, KVT_BATCH_GET, pgs, k);
        uint32_t need = q->n - k;
        for (uint32_t d = k; d < q->n; d++) /* stored again: replaced */
            if (c.pg_of[blk[d]] != KVT_NONE)
                cache_drop(&c, ops, priv, c.pg_of[blk[d]]);
        while (c.n_free < need) {
            uint32_t v = ops->victim(priv, TIER, not_current, &c);
            if (v == KVT_NONE) {
                r = -ENOSPC;
                goto out;
            }
            cache_drop(&c, ops, priv, v);
        }
        uint32_t np = 0;
        for (uint32_t d = k; d < q->n; d++) {
            uint32_t pg = c.free_pg[--c.n_free];
            c.block_of[pg] = blk[d];
            c.key_of[pg] = (kvt_key){ t->hash[q->first + d], KVT_ALL_LAYERS, c.depth[blk[d]] };
            c.pg_of[blk[d]] = pg;
            ops->insert(priv, TIER, pg, &c.key_of[pg]);
            pgs[np++] = pg;
        }
        if (need && ops->batch)
            ops->batch(priv, KVT_BATCH_PUT, pgs, need);
        res->hits += k;
        res->refs += q->n;
        res->stored += need;
    }
    r = 0;
out:
    if (priv)
        ops->destroy(priv);
    free(c.pg_of);
    free(c.depth);
    free(c.mark);
    free(c.block_of);
    free(c.key_of);
    free(c.free_pg);
    free(pgs);
    return r;
}

/* ------------------------------------------------------------- Belady MIN */

/* A max-heap of (next use, block) with lazy deletion: an entry is current
 * while the block is present and its next use is the one recorded. */
struct hent {
    uint64_t next;
    uint32_t block;
};

static void heap_push(struct hent *h, size_t *n, struct hent e)
{
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2].next < e.next) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static struct hent heap_pop(struct hent *h, size_t *n)
{
    struct hent top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        struct hent best = last;
        if (l < *n && h[l].next > best.next) {
            m = l;
            best = h[l];
        }
        if (l + 1 < *n && h[l + 1].next > best.next)
            m = l + 1;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

static int run_belady(const struct pfx_trace *t, size_t n_req, uint32_t cap, struct presult *res)
{
    size_t refs = n_req ? t->req[n_req - 1].first + t->req[n_req - 1].n : 0;
    uint64_t *next = malloc((refs ? refs : 1) * sizeof(*next)); /* per reference */
    uint64_t *later = malloc((size_t)t->distinct * sizeof(*later));
    uint64_t *cur_next = malloc((size_t)t->distinct * sizeof(*cur_next)); /* UINT64_MAX: absent */
    uint64_t *mark = calloc(t->distinct, sizeof(*mark));
    size_t hn = 0;
    struct hent *h = malloc((refs + 1) * sizeof(*h)); /* one push per reference at most */
    struct hent *park = malloc((size_t)longest(t, n_req) * sizeof(*park));
    int r = -ENOMEM;
    if (!next || !later || !cur_next || !mark || !h || !park)
        goto out;
    for (uint32_t b = 0; b < t->distinct; b++)
        later[b] = cur_next[b] = UINT64_MAX;
    for (size_t i = n_req; i-- > 0;) {
        const struct pfx_req *q = &t->req[i];
        for (uint32_t d = q->n; d-- > 0;) {
            uint32_t b = t->block[q->first + d];
            next[q->first + d] = later[b];
            later[b] = i; /* next use by request (a request's blocks share it) */
        }
    }
    *res = (struct presult){ .policy = "belady", .cap_blocks = cap };
    uint32_t used = 0;
    for (size_t i = 0; i < n_req; i++) {
        const struct pfx_req *q = &t->req[i];
        const uint32_t *blk = t->block + q->first;
        if (q->n > cap) {
            r = -ENOSPC;
            goto out;
        }
        uint32_t k = 0;
        while (k < q->n && cur_next[blk[k]] != UINT64_MAX)
            k++;
        for (uint32_t d = 0; d < q->n; d++) {
            uint32_t b = blk[d];
            mark[b] = i + 1;
            if (cur_next[b] == UINT64_MAX)
                used++;
            /* "never" sorts above every request: evicted first */
            uint64_t nx = next[q->first + d] == UINT64_MAX ? UINT64_MAX - 1 : next[q->first + d];
            cur_next[b] = nx;
            heap_push(h, &hn, (struct hent){ nx, b });
        }
        /* Evict the furthest next use; the request keeps its own blocks,
         * which go back on the heap afterwards. */
        size_t kept = 0;
        while (used > cap) {
            struct hent e = heap_pop(h, &hn);
            if (cur_next[e.block] != e.next)
                continue; /* stale */
            if (mark[e.block] == i + 1) {
                park[kept++] = e;
                continue;
            }
            cur_next[e.block] = UINT64_MAX;
            used--;
        }
        for (size_t j = 0; j < kept; j++)
            heap_push(h, &hn, park[j]);
        if (hn > refs / 2 + 4 * (size_t)cap) { /* drop stale entries */
            size_t m = 0;
            for (size_t j = 0; j < hn; j++)
                if (cur_next[h[j].block] == h[j].next)
                    h[m++] = h[j];
            hn = 0;
            for (size_t j = 0; j < m; j++)
                heap_push(h, &hn, h[j]);
        }
        res->hits += k;
        res->refs += q->n;
        res->stored += q->n - k;
    }
    r = 0;
out:
    free(next);
    free(later);
    free(cur_next);
    free(mark);
    free(h);
    free(park);
    return r;
}

/* ------------------------------------------------------------- the command */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier sim --trace TRACE.jsonl [--capacity X,Y,...] [--policies A,B,...]\n"
            "                  [--requests N] [--json]\n"
            "\n"
            "Prefix-cache traces (Mooncake's JSONL: one request a line with its chain of\n"
            "block hashes; see `kvtier replay --help`): each policy's prefix-hit fraction\n"
            "(prefix hits / block references) at each capacity, beside Belady MIN, the\n"
            "offline optimum. A request hits the leading blocks present; the others are\n"
            "stored, evicting the policy's victims, never a block of the request itself.\n"
            "The policies are the engine's own code; `kvtier replay` runs the same calls\n"
            "through a real engine and should agree.\n"
            "\n"
            "  --trace FILE        the trace (a file whose first character is '{')\n"
            "  --capacity LIST     capacities: fractions of the trace's distinct blocks (0.1)\n"
            "                      or block counts (4000); default 0.05,0.1,0.2,0.4\n"
            "  --policies LIST     default lru,arc,prefix,belady\n"
            "  --requests N        the first N requests only\n"
            "  --json              one JSON object on stdout (the table goes to stderr)\n"
            "  -h, --help          this help\n");
}

static int opt_list(const char *opt, const char *val, char *buf, size_t n, char **items, int max,
                    int *count)
{
    int r = cli_split_list(val, buf, n, items, max, count);
    if (r == -E2BIG)
        return cli_bad_value("sim", opt, val, "at most 8 items");
    if (r)
        return cli_bad_value("sim", opt, val, "a list separated by commas, no item empty");
    return 0;
}

/* A capacity: a fraction of the distinct blocks in (0, 1], or a whole
 * number of blocks above 1 (cap_blocks' range). */
static int opt_capacity(const char *val, double *out)
{
    double v;
    if (cli_parse_real(val, &v) == 0 && v > 0 &&
        (v <= 1 || (v == floor(v) && v <= (double)UINT32_MAX - 1))) {
        *out = v;
        return 0;
    }
    return cli_bad_value("sim", "capacity", val,
                         "a fraction of the distinct blocks in (0, 1], or a whole number of "
                         "blocks up to 4294967294");
}

/* The policies a prefix trace can run: the engine's lru, arc and prefix (if
 * built) and Belady's MIN. decode plans decode loops: it has nothing to say
 * on a prefix trace, so it is refused, not run. */
static bool prefix_policy(const char *name)
{
    static const char *const online[] = { "lru", "arc", "prefix" };
    if (!strcmp(name, "belady"))
        return true;
    for (size_t i = 0; i < sizeof(online) / sizeof(online[0]); i++)
        if (!strcmp(name, online[i]))
            return kvt_lab_policy_find(name) != NULL;
    return false;
}

static int parse(int argc, char **argv, struct popts *o, char *capbuf, char *polbuf)
{
    static const struct option lo[] = {
        { "trace", 1, 0, 't' }, { "capacity", 1, 0, 'c' }, { "policies", 1, 0, 'p' },
        { "requests", 1, 0, 'n' }, { "json", 0, 0, 'j' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 }
    };
    *o = (struct popts){ .caps = { 0.05, 0.1, 0.2, 0.4 }, .n_caps = 4,
                         .pols = { "lru", "arc", "prefix", "belady" }, .n_pols = 4 };
    char *items[PFX_MAX_CAPS];
    int c, n;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 't':
            if (cli_opt_path("sim", "trace", optarg))
                return -EINVAL;
            o->trace = optarg;
            break;
        case 'c':
            if (opt_list("capacity", optarg, capbuf, 256, items, PFX_MAX_CAPS, &n))
                return -EINVAL;
            for (int i = 0; i < n; i++)
                if (opt_capacity(items[i], &o->caps[i]))
                    return -EINVAL;
            o->n_caps = n;
            break;
        case 'p':
            if (opt_list("policies", optarg, polbuf, 256, items, PFX_MAX_POLS, &n))
                return -EINVAL;
            for (int i = 0; i < n; i++) {
                if (!prefix_policy(items[i]))
                    return cli_bad_value("sim", "policies", items[i],
                                         "lru, arc, prefix, belady (decode plans decode loops: "
                                         "it has nothing to say on a prefix trace)");
                o->pols[i] = items[i];
            }
            o->n_pols = n;
            break;
        case 'n':
            if (cli_opt_count("sim", "requests", optarg, 1, UINT32_MAX, &o->requests))
                return -EINVAL;
            break;
        case 'j':
            o->json = true;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            return cli_getopt_error("sim", c, argv, lo);
        }
    }
    if (optind < argc)
        return cli_error("sim", 2, "unexpected argument '%s'", argv[optind]), -EINVAL;
    if (!o->trace)
        return cli_error("sim", 2, "--trace FILE is required"), -EINVAL;
    return 0;
}

static uint32_t cap_blocks(double x, uint32_t distinct)
{
    double b = x <= 1.0 ? x * (double)distinct : x;
    if (b >= (double)UINT32_MAX - 1)
        return UINT32_MAX - 1;
    return b < 1 ? 1 : (uint32_t)b;
}

static void print_table(FILE *f, const struct popts *o, const struct presult *res,
                        uint32_t distinct, size_t n_req, uint64_t refs)
{
    fprintf(f, "kvtier sim: %zu requests, %llu block references, %u distinct blocks\n", n_req,
            (unsigned long long)refs, distinct);
    fprintf(f, "prefix-hit fraction (prefix hits / block references)\n");
    fprintf(f, "%-10s", "capacity");
    for (int p = 0; p < o->n_pols; p++)
        fprintf(f, " %9s", o->pols[p]);
    fprintf(f, "\n");
    for (int c = 0; c < o->n_caps; c++) {
        char lab[32];
        snprintf(lab, sizeof lab, "%g", o->caps[c]);
        fprintf(f, "%-10s", lab);
        for (int p = 0; p < o->n_pols; p++) {
            const struct presult *r = &res[c * o->n_pols + p];
            fprintf(f, " %9.3f", r->refs ? (double)r->hits / (double)r->refs : 0);
        }
        fprintf(f, "   (%llu blocks)\n", (unsigned long long)res[c * o->n_pols].cap_blocks);
    }
    fprintf(f, "blocks stored, thousands (the engine writes to SSD at most these: see kvtier replay)\n");
    for (int c = 0; c < o->n_caps; c++) {
        char lab[32];
        snprintf(lab, sizeof lab, "%g", o->caps[c]);
        fprintf(f, "%-10s", lab);
        for (int p = 0; p < o->n_pols; p++)
            fprintf(f, " %9.1f", (double)res[c * o->n_pols + p].stored / 1e3);
        fprintf(f, "\n");
    }
}

static void print_json(const struct popts *o, const struct presult *res, uint32_t distinct,
                       size_t n_req, uint64_t refs)
{
    printf("{\"trace\":");
    cli_json_str(o->trace);
    printf(",\"requests\":%zu,\"block_refs\":%llu,\"distinct_blocks\":%u,\"results\":[", n_req,
           (unsigned long long)refs, distinct);
    for (int c = 0; c < o->n_caps; c++)
        for (int p = 0; p < o->n_pols; p++) {
            const struct presult *r = &res[c * o->n_pols + p];
            printf("%s{\"policy\":\"%s\",\"capacity\":%g,\"capacity_blocks\":%llu,"
                   "\"hit_fraction\":%.6f,\"hits\":%llu,\"blocks_stored\":%llu}",
                   c || p ? "," : "", o->pols[p], o->caps[c], (unsigned long long)r->cap_blocks,
                   r->refs ? (double)r->hits / (double)r->refs : 0, (unsigned long long)r->hits,
                   (unsigned long long)r->stored);
        }
    printf("]}\n");
}

bool sim_prefix_wanted(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--trace") && i + 1 < argc)
            path = argv[i + 1];
        else if (!strncmp(argv[i], "--trace=", 8))
            path = argv[i] + 8;
    }
    if (!path)
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false; /* the caller's parser reports it */
    int ch;
    while ((ch = getc(f)) == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
        ;
    fclose(f);
    return ch == '{';
}

int sim_prefix_main(int argc, char **argv)
{
    struct popts o;
    char capbuf[256], polbuf[256], err[320] = "";
    int r = parse(argc, argv, &o, capbuf, polbuf);
    if (r)
        return r > 0 ? 0 : 2;
    FILE *f = fopen(o.trace, "r");
    if (!f)
        return cli_error("sim", 1, "%s: %s", o.trace, strerror(errno));
    struct pfx_trace t;
    int e = pfx_trace_read(f, &t, err, sizeof err);
    fclose(f);
    if (e)
        return cli_error("sim", 1, "%s: %s", o.trace, e == -ENOMEM ? "out of memory" : err);
    size_t n_req = o.requests && o.requests < t.n_req ? (size_t)o.requests : t.n_req;
    uint64_t refs = n_req ? t.req[n_req - 1].first + t.req[n_req - 1].n : 0;
    /* Capacities are fractions of the distinct blocks of the requests run,
     * as in kvtier replay; dense ids count up in order of first use. */
    uint32_t distinct = 0;
    for (uint64_t i = 0; i < refs; i++)
        distinct = t.block[i] + 1 > distinct ? t.block[i] + 1 : distinct;
    struct presult *res = calloc((size_t)o.n_caps * o.n_pols, sizeof(*res));
    r = res ? 0 : cli_error("sim", 1, "out of memory");
    for (int c = 0; c < o.n_caps && !r; c++)
        for (int p = 0; p < o.n_pols && !r; p++) {
            uint32_t cap = cap_blocks(o.caps[c], distinct);
            struct presult *out = &res[c * o.n_pols + p];
            e = !strcmp(o.pols[p], "belady")
                    ? run_belady(&t, n_req, cap, out)
                    : run_policy(&t, n_req, kvt_lab_policy_find(o.pols[p]), cap, out);
            out->cap_frac = o.caps[c];
            if (e == -ENOSPC)
                r = cli_error("sim", 2, "capacity %g (%u blocks) cannot hold a request of the "
                              "trace: raise --capacity", o.caps[c], cap);
            else if (e)
                r = cli_error("sim", 1, "%s: %s", o.pols[p], strerror(-e));
        }
    if (!r) {
        print_table(o.json ? stderr : stdout, &o, res, distinct, n_req, refs);
        if (o.json)
            print_json(&o, res, distinct, n_req, refs);
    }
    free(res);
    pfx_trace_free(&t);
    return r;
}
