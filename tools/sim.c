/*
 * sim.c — `kvtier sim`: replays a page-access trace through each policy over
 * the HBM, DRAM and SSD tiers and reports pages and bytes moved per link, the
 * HBM hit ratio, and the stall and step time under a link/compute cost model.
 *
 * Trace format (text, version 1). One record per line; '#' starts a comment
 * that runs to the end of the line; blank lines are skipped; fields are
 * separated by blanks; numbers are decimal (ID < 2^64, LAYER and INDEX
 * < 2^32).
 *
 *   kvtier-trace 1            the first line: format and version
 *   page_bytes N              bytes per page; required, before any record
 *   schedule order=layer|seq layers=L window=W sinks=S ids=A,B,...
 *                             optional, before any record: what
 *                             kvt_set_schedule was given (window and sinks
 *                             default to 0, full attention)
 *   advance ID LAYER          kvt_advance: the engine now computes (ID, LAYER)
 *   access ID LAYER INDEX     one page read by the attention
 *   new ID LAYER INDEX        a page created in HBM (the tail grows)
 *   drop ID                   the sequence finished: its pages are gone
 *   step                      the end of a decode step
 *
 * A page accessed before any `new` of it existed before the trace (the
 * prefill wrote it). An engine logs one line per kvt_advance, one per page it
 * acquires for attention, one per kvt_create of a tail page, one per
 * kvt_drop_id and one per step.
 *
 * The cost model (also in --help and in the JSON under "model"):
 *  - Capacities are in pages. HBM holds --hbm-pages; DRAM everything unless
 *    limited, the rest being on SSD. A page brought to HBM keeps its DRAM
 *    copy (the tiers are inclusive, as in the engine); a page made by `new`
 *    is dirty until written down when it leaves HBM. HBM starts holding the
 *    first-used pages (warm, as a prefill leaves it) unless --cold.
 *  - A group is an `advance` and the records after it up to the next
 *    advance, step or drop: one (sequence, layer). Its pages stay in HBM
 *    (pinned, not eviction candidates) until it has computed, as with
 *    kvt_acquire. Records outside any group form an implicit one that pins
 *    nothing: its pages are fetched and used one at a time, and it computes
 *    once, at its end.
 *  - A group is issued when the previous one has computed. Its misses are
 *    fetched then (SSD->DRAM first for a page only on SSD, then DRAM->HBM);
 *    a full tier gives up the policy's victim, written down first if dirty.
 *  - A policy with prefetch() is asked, once the group's own pages are
 *    requested, for pages of the groups ahead; they are fetched while the
 *    group computes, soonest first, while the page each displaces is used
 *    later than it (next_use), and while the prefetched pages not yet used
 *    stay within --prefetch-bytes.
 *  - Each link carries one page at a time at its bandwidth, first come
 *    first served: DRAM->HBM and HBM->DRAM (PCIe: one link each way) at
 *    --h2d-gbps; SSD reads and writes share the drive's --ssd-gbps.
 *  - A group computes for --compute-us once all its pages are in HBM and
 *    the previous group has finished. Stall = the time compute waited for
 *    data; step time = the end of the last compute / steps; the bound per
 *    step = max(compute, each link's bytes / its bandwidth).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/belady.h"
#include "policy/policy.h"
#include "tools/cli.h"
#include "tools/presets.h"
#include "tools/sim.h"

const char *const sim_link_name[SIM_LINKS] = { "dram->hbm", "ssd->dram", "hbm->dram",
                                               "dram->ssd" };

static int seterr(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int seterr(char *err, size_t n, const char *fmt, ...)
{
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* ============================================================= traces */

static int trace_push(struct sim_trace *t, uint8_t kind, uint64_t id, uint32_t layer,
                      uint32_t index, uint32_t line)
{
    if (t->n == t->cap) {
        if (t->n >= SIM_MAX_RECORDS)
            return -E2BIG;
        size_t nc = t->cap ? t->cap * 2 : 4096;
        struct sim_rec *nr = realloc(t->rec, nc * sizeof(*nr));
        if (!nr)
            return -ENOMEM;
        t->rec = nr;
        t->cap = nc;
    }
    t->rec[t->n++] = (struct sim_rec){ id, layer, index, line, kind };
    if (kind == SIM_ACCESS)
        t->accesses++;
    else if (kind == SIM_STEP)
        t->steps++;
    return 0;
}

void sim_trace_free(struct sim_trace *t)
{
    free(t->rec);
    free(t->ids);
    *t = (struct sim_trace){ 0 };
}

/* A decimal number of at most max, the whole token. */
static bool parse_num(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

#define MAX_TOK 8

struct reader {
    struct sim_trace *t;
    uint32_t line;
    bool records;  /* a record has been read: headers are over */
    char *err;
    size_t errlen;
};

static int rd_err(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rd_err(struct reader *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return seterr(r->err, r->errlen, "line %u: %s", r->line, msg);
}

static int rd_number(struct reader *r, const char *tok, uint64_t max, const char *what,
                     uint64_t *out)
{
    if (!parse_num(tok, max, out))
        return rd_err(r, "bad number '%s' for %s (a decimal up to %llu)", tok, what,
                      (unsigned long long)max);
    return 0;
}

static int rd_ids(struct reader *r, const char *list)
{
    struct sim_trace *t = r->t;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    t->ids = calloc(n, sizeof(uint64_t));
    if (!t->ids)
        return -ENOMEM;
    char buf[32];
    const char *p = list;
    for (size_t i = 0; i < n; i++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf)
            return rd_err(r, "bad id list '%s' for ids (decimal ids separated by commas)", list);
        memcpy(buf, p, len);
        buf[len] = '\0';
        int e = rd_number(r, buf, UINT64_MAX, "an id in ids", &t->ids[i]);
        if (e)
            return e;
        p += len + (p[len] == ',');
    }
    t->n_ids = n;
    return 0;
}

static int rd_schedule(struct reader *r, char **tok, int ntok)
{
    struct sim_trace *t = r->t;
    if (t->has_schedule)
        return rd_err(r, "a second schedule line");
    bool order = false, layers = false;
    for (int i = 1; i < ntok; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return rd_err(r, "schedule field '%s' is not key=value", tok[i]);
        *eq = '\0';
        const char *k = tok[i], *v = eq + 1;
        uint64_t x;
        int e = 0;
        if (!strcmp(k, "order")) {
            if (!strcmp(v, "layer"))
                t->order = KVT_ORDER_LAYER_MAJOR;
            else if (!strcmp(v, "seq"))
                t->order = KVT_ORDER_SEQ_MAJOR;
            else
                return rd_err(r, "bad schedule order '%s' (layer or seq)", v);
            order = true;
        } else if (!strcmp(k, "layers")) {
            if (!(e = rd_number(r, v, UINT32_MAX - 1, "layers", &x)) && !x)
                return rd_err(r, "schedule layers must be at least 1");
            t->layers = (uint32_t)x;
            layers = true;
        } else if (!strcmp(k, "window")) {
            if (!(e = rd_number(r, v, UINT32_MAX, "window", &x)))
                t->window_pages = (uint32_t)x;
        } else if (!strcmp(k, "sinks")) {
            if (!(e = rd_number(r, v, UINT32_MAX, "sinks", &x)))
                t->sink_pages = (uint32_t)x;
        } else if (!strcmp(k, "ids")) {
            if (t->ids)
                return rd_err(r, "ids given twice");
            e = rd_ids(r, v);
        } else {
            return rd_err(r, "unknown schedule field '%s' (order, layers, window, sinks, ids)", k);
        }
        if (e)
            return e;
    }
    if (!order || !layers || !t->ids)
        return rd_err(r, "schedule needs order=, layers= and ids=");
    t->has_schedule = true;
    return 0;
}

/* Fields after the name, per record kind: advance ID LAYER, access and new
 * ID LAYER INDEX, drop ID, step. */
static const struct {
    const char *name;
    uint8_t kind;
    int fields;
    const char *usage;
} kinds[] = {
    { "access", SIM_ACCESS, 3, "ID LAYER INDEX" }, { "advance", SIM_ADVANCE, 2, "ID LAYER" },
    { "new", SIM_NEW, 3, "ID LAYER INDEX" },       { "drop", SIM_DROP, 1, "ID" },
    { "step", SIM_STEP, 0, "(no fields)" },
};

static int rd_record(struct reader *r, char **tok, int ntok)
{
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        if (strcmp(tok[0], kinds[k].name))
            continue;
        if (ntok - 1 != kinds[k].fields)
            return rd_err(r, "'%s' takes %s, got %d field%s", tok[0], kinds[k].usage, ntok - 1,
                          ntok == 2 ? "" : "s");
        if (!r->t->page_bytes)
            return rd_err(r, "'%s' before page_bytes (the header must give it first)", tok[0]);
        uint64_t v[3] = { 0, 0, 0 };
        static const char *const what[3] = { "ID", "LAYER", "INDEX" };
        for (int i = 0; i < kinds[k].fields; i++) {
            int e = rd_number(r, tok[1 + i], i ? UINT32_MAX : UINT64_MAX, what[i], &v[i]);
            if (e)
                return e;
        }
        r->records = true;
        int e = trace_push(r->t, kinds[k].kind, v[0], (uint32_t)v[1], (uint32_t)v[2], r->line);
        return e == -E2BIG ? rd_err(r, "more than %llu records", (unsigned long long)SIM_MAX_RECORDS)
                           : e;
    }
    return rd_err(r, "unknown record '%s' (access, advance, new, drop, step; or the headers "
                     "page_bytes, schedule)", tok[0]);
}

static int rd_line(struct reader *r, char *s)
{
    char *hash = strchr(s, '#');
    if (hash)
        *hash = '\0';
    char *tok[MAX_TOK], *save = NULL;
    int ntok = 0;
    for (char *p = strtok_r(s, " \t\r\n", &save); p; p = strtok_r(NULL, " \t\r\n", &save)) {
        if (ntok == MAX_TOK)
            return rd_err(r, "too many fields");
        tok[ntok++] = p;
    }
    if (r->line == 1) {
        if (ntok < 1 || strcmp(tok[0], "kvtier-trace"))
            return rd_err(r, "not a kvtier trace (the first line must be 'kvtier-trace 1')");
        if (ntok != 2 || strcmp(tok[1], "1"))
            return rd_err(r, "trace version '%s' is not supported (this kvtier reads 1)",
                          ntok > 1 ? tok[1] : "");
        return 0;
    }
    if (!ntok)
        return 0;
    if (!strcmp(tok[0], "page_bytes") || !strcmp(tok[0], "schedule")) {
        if (r->records)
            return rd_err(r, "'%s' after the first record (headers come first)", tok[0]);
        if (tok[0][0] == 's')
            return rd_schedule(r, tok, ntok);
        if (r->t->page_bytes)
            return rd_err(r, "a second page_bytes line");
        uint64_t pb;
        if (ntok != 2)
            return rd_err(r, "'page_bytes' takes one number");
        int e = rd_number(r, tok[1], 1ull << 40, "page_bytes", &pb);
        if (!e && !pb)
            return rd_err(r, "page_bytes must be at least 1");
        r->t->page_bytes = pb;
        return e;
    }
    return rd_record(r, tok, ntok);
}

int sim_trace_read(FILE *f, struct sim_trace *t, char *err, size_t errlen)
{
    *t = (struct sim_trace){ 0 };
    struct reader r = { .t = t, .err = err, .errlen = errlen };
    char *buf = NULL;
    size_t cap = 0;
    int e = 0;
    while (getline(&buf, &cap, f) >= 0) {
        if (r.line == UINT32_MAX - 1) {
            e = rd_err(&r, "too many lines");
            break;
        }
        r.line++;
        if ((e = rd_line(&r, buf)))
            break;
    }
    free(buf);
    if (!e && ferror(f)) {
        seterr(err, errlen, "read error after line %u", r.line);
        e = -EIO;
    }
    if (!e && r.line == 0)
        e = seterr(err, errlen, "empty file: not a kvtier trace");
    if (!e && !t->page_bytes)
        e = seterr(err, errlen, "line %u: the trace ends without page_bytes", r.line);
    if (e) {
        if (e == -ENOMEM)
            seterr(err, errlen, "line %u: out of memory", r.line);
        sim_trace_free(t);
    }
    return e;
}

static const char *const rec_name[] = { "access", "advance", "new", "drop", "step" };

int sim_trace_write(FILE *f, const struct sim_trace *t)
{
    fprintf(f, "kvtier-trace 1\n# %llu records: %llu accesses, %llu steps\npage_bytes %llu\n",
            (unsigned long long)t->n, (unsigned long long)t->accesses,
            (unsigned long long)t->steps, (unsigned long long)t->page_bytes);
    if (t->has_schedule) {
        fprintf(f, "schedule order=%s layers=%u window=%u sinks=%u ids=",
                t->order == KVT_ORDER_SEQ_MAJOR ? "seq" : "layer", t->layers, t->window_pages,
                t->sink_pages);
        for (size_t i = 0; i < t->n_ids; i++)
            fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)t->ids[i]);
        fputc('\n', f);
    }
    for (size_t i = 0; i < t->n; i++) {
        const struct sim_rec *r = &t->rec[i];
        switch (r->kind) {
        case SIM_ACCESS:
        case SIM_NEW:
            fprintf(f, "%s %llu %u %u\n", rec_name[r->kind], (unsigned long long)r->id, r->layer,
                    r->index);
            break;
        case SIM_ADVANCE:
            fprintf(f, "advance %llu %u\n", (unsigned long long)r->id, r->layer);
            break;
        case SIM_DROP:
            fprintf(f, "drop %llu\n", (unsigned long long)r->id);
            break;
        default:
            fputs("step\n", f);
            break;
        }
    }
    return fflush(f) || ferror(f) ? -EIO : 0;
}

/* ============================================================= generator */

/* Pages of one (sequence, layer) that step s reads: the token of step s is
 * token context + s, and its page exists (the prefill made the first ones;
 * the steps make the rest, a step ahead). */
static uint64_t gen_pages(const struct sim_gen *g, uint64_t step)
{
    return (g->context + step) / g->page_tokens + 1;
}

uint64_t sim_gen_pages_read(const struct sim_gen *g, uint64_t step)
{
    uint64_t p = gen_pages(g, step);
    if (!g->window_pages || (uint64_t)g->sink_pages + g->window_pages >= p)
        return p;
    return (uint64_t)g->sink_pages + g->window_pages;
}

static int gen_check(const struct sim_gen *g)
{
    if (!g->layers || !g->batch || !g->context || !g->tokens || !g->page_tokens ||
        !g->page_bytes)
        return -EINVAL;
    if (g->order != KVT_ORDER_LAYER_MAJOR && g->order != KVT_ORDER_SEQ_MAJOR)
        return -EINVAL;
    if (g->context > UINT64_MAX / 2 || g->tokens > UINT64_MAX / 2 ||
        gen_pages(g, g->tokens) >= UINT32_MAX)
        return -E2BIG;
    /* Records: per step and group an advance, at most one new, the reads;
     * one step record per step. Doubles: an estimate that cannot overflow. */
    double recs = (double)g->tokens *
                  ((double)g->batch * g->layers * (double)(sim_gen_pages_read(g, g->tokens - 1) + 2) + 1);
    return recs > (double)SIM_MAX_RECORDS ? -E2BIG : 0;
}

/* advance, the reads, and when the next token starts a page, that page:
 * made once this one's attention is done, as an engine that keeps a
 * writable tail allocates the next one. */
static int gen_group(struct sim_trace *t, const struct sim_gen *g, uint64_t step, uint64_t id,
                     uint32_t layer)
{
    uint64_t p = gen_pages(g, step);
    int e = trace_push(t, SIM_ADVANCE, id, layer, 0, 0);
    bool all = !g->window_pages || (uint64_t)g->sink_pages + g->window_pages >= p;
    for (uint64_t i = 0; !e && i < p; i++) {
        if (!all && i >= g->sink_pages && i < p - g->window_pages)
            i = p - g->window_pages; /* skip to the window */
        e = trace_push(t, SIM_ACCESS, id, layer, (uint32_t)i, 0);
    }
    if (!e && (g->context + step + 1) % g->page_tokens == 0)
        e = trace_push(t, SIM_NEW, id, layer, (uint32_t)p, 0);
    return e;
}

int sim_generate(const struct sim_gen *g, struct sim_trace *t)
{
    *t = (struct sim_trace){ 0 };
    int e = gen_check(g);
    if (e)
        return e;
    t->page_bytes = g->page_bytes;
    t->has_schedule = true;
    t->order = g->order;
    t->layers = g->layers;
    t->window_pages = g->window_pages;
    t->sink_pages = g->window_pages ? g->sink_pages : 0;
    t->n_ids = g->batch;
    t->ids = malloc(g->batch * sizeof(uint64_t));
    if (!t->ids)
        return -ENOMEM;
    for (uint32_t s = 0; s < g->batch; s++)
        t->ids[s] = s;
    uint64_t groups = (uint64_t)g->batch * g->layers;
    for (uint64_t step = 0; !e && step < g->tokens; step++) {
        for (uint64_t k = 0; !e && k < groups; k++) {
            bool lm = g->order == KVT_ORDER_LAYER_MAJOR;
            uint64_t seq = lm ? k % g->batch : k / g->layers;
            uint32_t layer = (uint32_t)(lm ? k / g->batch : k % g->layers);
            e = gen_group(t, g, step, seq, layer);
        }
        if (!e)
            e = trace_push(t, SIM_STEP, 0, 0, 0, 0);
    }
    if (e)
        sim_trace_free(t);
    return e;
}

/* ============================================================= world */

struct sim_world {
    const struct sim_trace *t;
    uint32_t np;
    kvt_key *keys;       /* [np] page -> key; pages numbered in order of first mention */
    uint8_t *pre;        /* [np] 1: exists before the trace (first mentioned by an access) */
    uint32_t *tab, tmask; /* key -> page + 1 */
    uint32_t *rec_pg;    /* [t->n] page of an access or new record, KVT_NONE for others */
    kvt_key *acc_keys;   /* [t->accesses] every use in order: Belady's future */
    /* Pages of each id, chained: for drop. */
    uint64_t *id_val;
    uint32_t *id_head, *id_tab, id_mask, n_idv;
    uint32_t *pg_next;   /* [np] next page of the same id */
    uint64_t max_group;
    uint64_t *sched_ids; /* the schedule's ids, sorted: advance checks */
};

static uint32_t id_hash(uint64_t id)
{
    id *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(id >> 32);
}

static uint32_t world_find(const struct sim_world *w, const kvt_key *k)
{
    for (uint32_t i = (uint32_t)kvt_key_hash(k) & w->tmask;; i = (i + 1) & w->tmask) {
        uint32_t v = w->tab[i];
        if (!v)
            return KVT_NONE;
        const kvt_key *o = &w->keys[v - 1];
        if (kvt_key_eq(o, k))
            return v - 1;
    }
}

/* Slot of id in the id table (its index in id_val), or KVT_NONE. */
static uint32_t world_id(const struct sim_world *w, uint64_t id)
{
    for (uint32_t i = id_hash(id) & w->id_mask;; i = (i + 1) & w->id_mask) {
        uint32_t v = w->id_tab[i];
        if (!v)
            return KVT_NONE;
        if (w->id_val[v - 1] == id)
            return v - 1;
    }
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t m = 64;
    while (m < n)
        m <<= 1;
    return m;
}

void sim_world_free(struct sim_world *w)
{
    if (!w)
        return;
    free(w->keys);
    free(w->pre);
    free(w->tab);
    free(w->rec_pg);
    free(w->acc_keys);
    free(w->id_val);
    free(w->id_head);
    free(w->id_tab);
    free(w->pg_next);
    free(w->sched_ids);
    free(w);
}

uint64_t sim_world_pages(const struct sim_world *w) { return w->np; }
uint64_t sim_world_max_group(const struct sim_world *w) { return w->max_group; }

/* Upper bounds (records that may name a page or an id) size the tables once. */
static int world_alloc(struct sim_world *w)
{
    const struct sim_trace *t = w->t;
    size_t named = 0;
    for (size_t i = 0; i < t->n; i++)
        named += t->rec[i].kind == SIM_ACCESS || t->rec[i].kind == SIM_NEW;
    if (named >= UINT32_MAX - 1)
        named = UINT32_MAX - 2; /* more pages than that is refused while indexing */
    size_t np = named ? named : 1;
    w->tmask = pow2_at_least(2 * (uint64_t)np) - 1;
    w->id_mask = pow2_at_least(2 * (uint64_t)np + 2 * t->n_ids) - 1;
    w->keys = malloc(np * sizeof(kvt_key));
    w->pre = calloc(np, 1);
    w->pg_next = malloc(np * sizeof(uint32_t));
    w->tab = calloc((size_t)w->tmask + 1, sizeof(uint32_t));
    w->id_tab = calloc((size_t)w->id_mask + 1, sizeof(uint32_t));
    w->id_val = malloc((np + t->n_ids) * sizeof(uint64_t));
    w->id_head = malloc((np + t->n_ids) * sizeof(uint32_t));
    w->rec_pg = malloc((t->n ? t->n : 1) * sizeof(uint32_t));
    w->acc_keys = malloc((t->accesses ? t->accesses : 1) * sizeof(kvt_key));
    w->sched_ids = malloc((t->n_ids ? t->n_ids : 1) * sizeof(uint64_t));
    if (!w->keys || !w->pre || !w->pg_next || !w->tab || !w->id_tab || !w->id_val ||
        !w->id_head || !w->rec_pg || !w->acc_keys || !w->sched_ids)
        return -ENOMEM;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The page of k, numbered now if new. */
static uint32_t world_add(struct sim_world *w, const kvt_key *k, bool *fresh)
{
    uint32_t i = (uint32_t)kvt_key_hash(k) & w->tmask;
    for (uint32_t v; (v = w->tab[i]); i = (i + 1) & w->tmask) {
        const kvt_key *o = &w->keys[v - 1];
        if (kvt_key_eq(o, k)) {
            *fresh = false;
            return v - 1;
        }
    }
    uint32_t pg = w->np++;
    w->keys[pg] = *k;
    w->tab[i] = pg + 1;
    /* Chain it to its id. */
    uint32_t s = id_hash(k->id) & w->id_mask;
    while (w->id_tab[s] && w->id_val[w->id_tab[s] - 1] != k->id)
        s = (s + 1) & w->id_mask;
    if (!w->id_tab[s]) {
        w->id_val[w->n_idv] = k->id;
        w->id_head[w->n_idv] = KVT_NONE;
        w->id_tab[s] = ++w->n_idv;
    }
    uint32_t slot = w->id_tab[s] - 1;
    w->pg_next[pg] = w->id_head[slot];
    w->id_head[slot] = pg;
    *fresh = true;
    return pg;
}

/* What the checks keep while walking the records once. */
struct wcheck {
    uint8_t *alive;       /* [np] */
    uint64_t *group_mark; /* [np] the group that last counted the page */
    uint64_t *dropped;    /* ids dropped: their unseen pages need a new record */
    size_t n_dropped, cap_dropped;
    uint64_t group, group_pages;
};

static bool is_dropped(const struct wcheck *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_dropped; i++)
        if (c->dropped[i] == id)
            return true;
    return false;
}

static int wc_access(struct sim_world *w, struct wcheck *c, const struct sim_rec *r, size_t i,
                     char *err, size_t errlen)
{
    kvt_key k = { r->id, r->layer, r->index };
    bool fresh;
    uint32_t pg = world_add(w, &k, &fresh);
    if (r->kind == SIM_ACCESS) {
        if (fresh && is_dropped(c, r->id))
            return seterr(err, errlen, "line %u: access to a page of sequence %llu, which was "
                          "dropped (a new record must create it first)",
                          r->line, (unsigned long long)r->id);
        if (!fresh && !c->alive[pg])
            return seterr(err, errlen, "line %u: access to page %llu %u %u after its sequence "
                          "was dropped", r->line, (unsigned long long)r->id, r->layer, r->index);
        if (fresh)
            w->pre[pg] = 1;
    } else {
        /* The id stays on the dropped list: a page of it that was never
         * seen cannot have existed before the trace (the drop would have
         * removed it), so only a new record can make it. */
        if (!fresh && c->alive[pg])
            return seterr(err, errlen, "line %u: new %llu %u %u: the page exists already",
                          r->line, (unsigned long long)r->id, r->layer, r->index);
    }
    c->alive[pg] = 1;
    w->rec_pg[i] = pg;
    if (c->group && c->group_mark[pg] != c->group) {
        c->group_mark[pg] = c->group;
        if (++c->group_pages > w->max_group)
            w->max_group = c->group_pages;
    }
    return 0;
}

static int wc_drop(struct sim_world *w, struct wcheck *c, uint64_t id)
{
    uint32_t s = world_id(w, id);
    for (uint32_t pg = s == KVT_NONE ? KVT_NONE : w->id_head[s]; pg != KVT_NONE; pg = w->pg_next[pg])
        c->alive[pg] = 0;
    if (is_dropped(c, id))
        return 0;
    if (c->n_dropped == c->cap_dropped) {
        size_t nc = c->cap_dropped ? c->cap_dropped * 2 : 16;
        uint64_t *nd = realloc(c->dropped, nc * sizeof(uint64_t));
        if (!nd)
            return -ENOMEM;
        c->dropped = nd;
        c->cap_dropped = nc;
    }
    c->dropped[c->n_dropped++] = id;
    return 0;
}

static int wc_advance(const struct sim_world *w, const struct sim_rec *r, char *err, size_t errlen)
{
    const struct sim_trace *t = w->t;
    if (!t->has_schedule)
        return 0;
    if (!bsearch(&r->id, w->sched_ids, t->n_ids, sizeof(uint64_t), cmp_u64))
        return seterr(err, errlen, "line %u: advance to sequence %llu, which the schedule does "
                      "not list", r->line, (unsigned long long)r->id);
    if (r->layer >= t->layers && r->layer != KVT_ALL_LAYERS)
        return seterr(err, errlen, "line %u: advance to layer %u, but the schedule has %u layers",
                      r->line, r->layer, t->layers);
    return 0;
}

static int world_walk(struct sim_world *w, char *err, size_t errlen)
{
    const struct sim_trace *t = w->t;
    size_t np = t->n ? t->n : 1;
    struct wcheck c = { .alive = calloc(np, 1), .group_mark = calloc(np, sizeof(uint64_t)) };
    int e = c.alive && c.group_mark ? 0 : -ENOMEM;
    uint64_t groups = 0, acc = 0;
    for (size_t i = 0; !e && i < t->n; i++) {
        const struct sim_rec *r = &t->rec[i];
        w->rec_pg[i] = KVT_NONE;
        switch (r->kind) {
        case SIM_ACCESS:
        case SIM_NEW:
            if (w->np >= UINT32_MAX - 2) {
                e = seterr(err, errlen, "line %u: more than 2^32 - 2 pages", r->line);
                break;
            }
            if (!(e = wc_access(w, &c, r, i, err, errlen)) && r->kind == SIM_ACCESS)
                w->acc_keys[acc++] = (kvt_key){ r->id, r->layer, r->index };
            break;
        case SIM_ADVANCE:
            e = wc_advance(w, r, err, errlen);
            c.group = ++groups;
            c.group_pages = 0;
            break;
        case SIM_DROP:
            e = wc_drop(w, &c, r->id);
            c.group = 0;
            break;
        default:
            c.group = 0;
            break;
        }
    }
    if (e == -ENOMEM)
        seterr(err, errlen, "out of memory");
    free(c.alive);
    free(c.group_mark);
    free(c.dropped);
    return e;
}

int sim_world_build(const struct sim_trace *t, struct sim_world **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sim_world *w = calloc(1, sizeof(*w));
    if (!w) {
        seterr(err, errlen, "out of memory");
        return -ENOMEM;
    }
    w->t = t;
    int e = world_alloc(w);
    if (e) {
        seterr(err, errlen, "out of memory");
    } else {
        if (t->n_ids)
            memcpy(w->sched_ids, t->ids, t->n_ids * sizeof(uint64_t));
        qsort(w->sched_ids, t->n_ids, sizeof(uint64_t), cmp_u64);
        e = world_walk(w, err, errlen);
    }
    if (e) {
        sim_world_free(w);
        return e;
    }
    *out = w;
    return 0;
}

/* ============================================================= runs */

enum { IN_HBM = 1, IN_DRAM = 2, ON_SSD = 4, DIRTY = 8, ALIVE = 16 };
enum { PF_HBM = 1, PF_DRAM = 2 }; /* prefetched into that tier, not used yet */
enum { LK_H2D, LK_D2H, LK_SSD, LK_N };

struct spage {
    double hbm_at, dram_at; /* when the HBM / DRAM copy is complete */
    uint64_t pin;           /* the group that holds it, while that group is open */
    uint8_t st;             /* IN_*, ON_SSD, DIRTY, ALIVE */
    uint8_t listed;         /* bit t: a candidate of policy tier t */
    uint8_t pf;             /* PF_* */
};

struct run {
    const struct sim_world *w;
    const struct sim_trace *t;
    const struct kvt_policy_ops *ops;
    void *pol;
    const struct sim_model *m;
    struct sim_result *r;
    struct spage *pg;
    uint64_t meta;
    uint64_t hbm_used, dram_used, dram_cap; /* dram_cap 0: unlimited */
    bool use_ssd;
    double now;                /* the previous group's compute end: the next one issues */
    double link_free[LK_N];
    double sec[SIM_LINKS];     /* one page over each link */
    /* The open group. */
    bool open, pins;           /* pins: opened by an advance */
    uint64_t gid;
    double ready;              /* its last page arrives */
    uint32_t *gpin, *gacc;     /* pages it pinned; its accesses in order */
    size_t n_gpin, cap_gpin, n_gacc, cap_gacc;
    /* Prefetch. */
    uint64_t pf_max, pf_hbm, pf_dram;
    uint32_t *cand, cand_cap;
    int fail;
    char *err;
    size_t errlen;
};

static void run_fail(struct run *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void run_fail(struct run *s, int code, const char *fmt, ...)
{
    if (s->fail)
        return;
    s->fail = code;
    if (s->err && s->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err, s->errlen, fmt, ap);
        va_end(ap);
    }
}

static const kvt_key *host_key_of(void *ctx, uint32_t pg)
{
    const struct run *s = ctx;
    return &s->w->keys[pg];
}

static uint32_t host_find(void *ctx, const kvt_key *k)
{
    const struct run *s = ctx;
    uint32_t pg = world_find(s->w, k);
    return pg != KVT_NONE && (s->pg[pg].st & ALIVE) ? pg : KVT_NONE;
}

static bool push_u32(uint32_t **a, size_t *n, size_t *cap, uint32_t v)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        uint32_t *na = realloc(*a, nc * sizeof(uint32_t));
        if (!na)
            return false;
        *a = na;
        *cap = nc;
    }
    (*a)[(*n)++] = v;
    return true;
}

/* Keeps the policy's candidate sets equal to the page's state, as the
 * engine's kvt_page_sync does: HBM = resident and not pinned; DRAM = a copy
 * there; SSD (only when the SSD is in play) = a copy there. */
static void sync(struct run *s, uint32_t pg)
{
    struct spage *p = &s->pg[pg];
    bool pinned = s->open && s->pins && p->pin == s->gid;
    uint8_t want = 0;
    if ((p->st & IN_HBM) && !pinned)
        want |= 1u << KVT_TIER_HBM;
    if (p->st & IN_DRAM)
        want |= 1u << KVT_TIER_DRAM;
    if (s->use_ssd && (p->st & ON_SSD))
        want |= 1u << KVT_TIER_SSD;
    for (int t = 0; t < KVT_POLICY_TIERS; t++) {
        uint8_t b = (uint8_t)(1u << t);
        if ((want & b) && !(p->listed & b))
            s->ops->insert(s->pol, t, pg, &s->w->keys[pg]);
        else if (!(want & b) && (p->listed & b))
            s->ops->remove(s->pol, t, pg);
    }
    p->listed = want;
}

static double xfer(struct run *s, int link, double ready)
{
    static const int lk[SIM_LINKS] = { [SIM_H2D] = LK_H2D, [SIM_SSD_READ] = LK_SSD,
                                       [SIM_D2H] = LK_D2H, [SIM_SSD_WRITE] = LK_SSD };
    double *f = &s->link_free[lk[link]];
    double start = ready > *f ? ready : *f;
    *f = start + s->sec[link];
    s->r->bytes[link] += s->t->page_bytes;
    s->r->pages[link]++;
    return *f;
}

/* A candidate may leave now unless a copy into or out of it is under way. */
static bool usable_hbm(void *ctx, uint32_t pg)
{
    const struct run *s = ctx;
    return s->pg[pg].hbm_at <= s->now;
}

static bool usable_dram(void *ctx, uint32_t pg)
{
    const struct run *s = ctx;
    const struct spage *p = &s->pg[pg];
    return p->dram_at <= s->now && !((p->st & IN_HBM) && p->hbm_at > s->now);
}

static const char *const tier_word[KVT_POLICY_TIERS] = { "HBM", "DRAM", "SSD" };

/* The policy's victim of a full tier: a usable one, else any (a copy in
 * flight is then wasted, which the byte counts show). */
static uint32_t pick(struct run *s, int tier)
{
    uint32_t v = s->ops->victim(s->pol, tier, tier == KVT_TIER_HBM ? usable_hbm : usable_dram, s);
    if (v == KVT_NONE)
        v = s->ops->victim(s->pol, tier, NULL, NULL);
    if (v == KVT_NONE || v >= s->w->np || !(s->pg[v].listed & (1u << tier))) {
        run_fail(s, -EFAULT, "policy %s gave %s as the victim of a full %s tier",
                 s->ops->name, v == KVT_NONE ? "none" : "a page that is not a candidate",
                 tier_word[tier]);
        return KVT_NONE;
    }
    return v;
}

static void evict_dram(struct run *s, uint32_t v)
{
    struct spage *p = &s->pg[v];
    if (!(p->st & ON_SSD)) {
        xfer(s, SIM_SSD_WRITE, p->dram_at > s->now ? p->dram_at : s->now);
        p->st |= ON_SSD;
    }
    p->st &= (uint8_t)~IN_DRAM;
    s->dram_used--;
    if (p->pf & PF_DRAM) {
        p->pf &= (uint8_t)~PF_DRAM;
        s->pf_dram--;
    }
    sync(s, v);
}

static void room_dram(struct run *s)
{
    if (!s->dram_cap || s->dram_used < s->dram_cap)
        return;
    uint32_t v = pick(s, KVT_TIER_DRAM);
    if (v != KVT_NONE)
        evict_dram(s, v);
}

/* Takes v out of HBM; returns when its slot is free (after the write-back
 * of a dirty page). */
static double evict_hbm(struct run *s, uint32_t v)
{
    struct spage *p = &s->pg[v];
    double slot = s->now;
    if (p->st & DIRTY) {
        room_dram(s);
        if (s->fail)
            return slot;
        slot = xfer(s, SIM_D2H, p->hbm_at > s->now ? p->hbm_at : s->now);
        p->st = (uint8_t)((p->st | IN_DRAM) & ~DIRTY);
        p->dram_at = slot;
        s->dram_used++;
    }
    p->st &= (uint8_t)~IN_HBM;
    s->hbm_used--;
    if (p->pf & PF_HBM) {
        p->pf &= (uint8_t)~PF_HBM;
        s->pf_hbm--;
        s->r->prefetch_unused++;
    }
    sync(s, v);
    return slot;
}

static double room_hbm(struct run *s)
{
    if (s->hbm_used < s->m->hbm_pages)
        return s->now;
    uint32_t v = pick(s, KVT_TIER_HBM);
    return v == KVT_NONE ? s->now : evict_hbm(s, v);
}

/* Brings pg to HBM (through DRAM when it is only on SSD), issued now;
 * returns its arrival. The caller lists it (pin or sync). */
static double fetch(struct run *s, uint32_t pg, bool prefetch)
{
    struct spage *p = &s->pg[pg];
    double slot = room_hbm(s), src;
    if (s->fail)
        return s->now;
    if (p->st & IN_DRAM) {
        src = p->dram_at > s->now ? p->dram_at : s->now;
    } else if (p->st & ON_SSD) {
        room_dram(s);
        src = xfer(s, SIM_SSD_READ, s->now);
        p->st |= IN_DRAM;
        p->dram_at = src;
        s->dram_used++;
    } else {
        run_fail(s, -EFAULT, "page %llu %u %u has no copy to bring up",
                 (unsigned long long)s->w->keys[pg].id, s->w->keys[pg].layer,
                 s->w->keys[pg].index);
        return s->now;
    }
    if (p->pf & PF_DRAM) {
        p->pf &= (uint8_t)~PF_DRAM;
        s->pf_dram--;
    }
    p->hbm_at = xfer(s, SIM_H2D, src > slot ? src : slot);
    p->st |= IN_HBM;
    s->hbm_used++;
    if (prefetch) {
        p->pf |= PF_HBM;
        s->pf_hbm++;
        s->r->prefetched++;
    }
    return p->hbm_at;
}

/* ------------------------------------------------------------- prefetch */

static bool wanted_h2d(void *ctx, uint32_t pg)
{
    const struct run *s = ctx;
    return pg < s->w->np && (s->pg[pg].st & (ALIVE | IN_DRAM | IN_HBM)) == (ALIVE | IN_DRAM);
}

static bool wanted_ssd(void *ctx, uint32_t pg)
{
    const struct run *s = ctx;
    return pg < s->w->np &&
           (s->pg[pg].st & (ALIVE | ON_SSD | IN_DRAM | IN_HBM)) == (ALIVE | ON_SSD);
}

/* Whether displacing v for c is worth it: v is used later than c, and c is
 * used at all. Without next_use() there is no way to tell: no. */
static bool later(struct run *s, uint32_t v, uint32_t c)
{
    if (!s->ops->next_use)
        return false;
    uint64_t nc = s->ops->next_use(s->pol, c);
    return nc < KVT_USE_UNKNOWN && s->ops->next_use(s->pol, v) > nc;
}

/* Room in tier for c, without displacing anything used sooner than c. */
static bool room_for(struct run *s, int tier, uint32_t c)
{
    bool full = tier == KVT_TIER_HBM ? s->hbm_used >= s->m->hbm_pages
                                     : s->dram_cap && s->dram_used >= s->dram_cap;
    if (!full)
        return true;
    uint32_t v = s->ops->victim(s->pol, tier, tier == KVT_TIER_HBM ? usable_hbm : usable_dram, s);
    if (v == KVT_NONE || v >= s->w->np || !(s->pg[v].listed & (1u << tier)) || !later(s, v, c))
        return false;
    if (tier == KVT_TIER_HBM)
        evict_hbm(s, v);
    else
        evict_dram(s, v);
    return !s->fail;
}

/* One stage: pages of tier from (DRAM, or SSD) that the policy wants up
 * next, into HBM (or DRAM), within the budget. */
static void prefetch_stage(struct run *s, int from)
{
    uint64_t *out = from == KVT_TIER_DRAM ? &s->pf_hbm : &s->pf_dram;
    kvt_usable_fn wanted = from == KVT_TIER_DRAM ? wanted_h2d : wanted_ssd;
    int to = from - 1;
    while (!s->fail && *out < s->pf_max) {
        uint64_t left = s->pf_max - *out;
        uint32_t k = s->ops->prefetch(s->pol, from, wanted, s, s->cand,
                                      left < s->cand_cap ? (uint32_t)left : s->cand_cap);
        uint32_t moved = 0;
        for (uint32_t i = 0; i < k && !s->fail && *out < s->pf_max; i++) {
            uint32_t c = s->cand[i];
            if (!wanted(s, c)) /* an eviction of this round took its copy */
                continue;
            if (!room_for(s, to, c))
                return;
            if (to == KVT_TIER_HBM) {
                fetch(s, c, true);
            } else {
                struct spage *p = &s->pg[c];
                p->dram_at = xfer(s, SIM_SSD_READ, s->now);
                p->st |= IN_DRAM;
                p->pf |= PF_DRAM;
                s->dram_used++;
                s->pf_dram++;
                s->r->prefetched_ssd++;
            }
            sync(s, c);
            moved++;
        }
        if (!moved)
            return;
    }
}

/* ------------------------------------------------------------- groups */

static void pin(struct run *s, uint32_t pg)
{
    if (s->pg[pg].pin == s->gid)
        return;
    s->pg[pg].pin = s->gid;
    if (!push_u32(&s->gpin, &s->n_gpin, &s->cap_gpin, pg))
        run_fail(s, -ENOMEM, "out of memory");
    sync(s, pg);
}

/* An advance-group pins what it reads and is already in HBM before it asks
 * for its misses, as kvt_acquire pins the resident pages of its list first. */
static void group_open(struct run *s, bool pins, size_t i)
{
    s->open = true;
    s->pins = pins;
    s->ready = s->now;
    if (!pins)
        return;
    s->gid++;
    for (size_t j = i + 1; j < s->t->n; j++) {
        const struct sim_rec *r = &s->t->rec[j];
        if (r->kind != SIM_ACCESS && r->kind != SIM_NEW)
            break;
        if (r->kind == SIM_ACCESS && (s->pg[s->w->rec_pg[j]].st & IN_HBM))
            pin(s, s->w->rec_pg[j]);
    }
}

/* Prefetch while the group computes, then its compute, then its pages go
 * back to the policy with their uses in order. */
static void group_close(struct run *s)
{
    if (!s->open)
        return;
    if (s->pins && s->ops->prefetch && s->pf_max) {
        prefetch_stage(s, KVT_TIER_DRAM);
        if (s->use_ssd)
            prefetch_stage(s, KVT_TIER_SSD);
    }
    double start = s->ready > s->now ? s->ready : s->now;
    s->r->stall_s += start - s->now;
    s->r->compute_s += s->m->compute_s;
    s->now = start + s->m->compute_s;
    s->r->groups++;
    s->open = false;
    if (!s->pins)
        return;
    for (size_t i = 0; i < s->n_gacc; i++) {
        uint32_t pg = s->gacc[i];
        if (!(s->pg[pg].listed & (1u << KVT_TIER_HBM)))
            sync(s, pg);
        if (s->pg[pg].listed & (1u << KVT_TIER_HBM))
            s->ops->access(s->pol, KVT_TIER_HBM, pg);
    }
    for (size_t i = 0; i < s->n_gpin; i++)
        sync(s, s->gpin[i]);
    s->n_gacc = s->n_gpin = 0;
}

/* A page of the open group is in HBM at t. An advance-group computes once
 * its last page is in; outside one, pages are used one at a time, so each
 * is waited for as it comes (the wait is stall). */
static void wait_for(struct run *s, double t)
{
    if (s->pins) {
        if (t > s->ready)
            s->ready = t;
    } else if (t > s->now) {
        s->r->stall_s += t - s->now;
        s->now = t;
    }
}

static void do_access(struct run *s, uint32_t pg)
{
    struct spage *p = &s->pg[pg];
    s->r->accesses++;
    double at;
    if (p->st & IN_HBM) {
        s->r->hits++;
        at = p->hbm_at;
    } else {
        at = fetch(s, pg, false);
    }
    if (s->fail)
        return;
    wait_for(s, at);
    if (p->pf & PF_HBM) {
        p->pf &= (uint8_t)~PF_HBM;
        s->pf_hbm--;
    }
    if (s->pins) {
        pin(s, pg);
        if (!push_u32(&s->gacc, &s->n_gacc, &s->cap_gacc, pg))
            run_fail(s, -ENOMEM, "out of memory");
    } else {
        sync(s, pg);
        s->ops->access(s->pol, KVT_TIER_HBM, pg);
    }
    if (p->listed & (1u << KVT_TIER_DRAM))
        s->ops->access(s->pol, KVT_TIER_DRAM, pg);
}

static void do_new(struct run *s, uint32_t pg)
{
    struct spage *p = &s->pg[pg];
    *p = (struct spage){ .st = ALIVE | DIRTY };
    if (s->ops->page_new)
        s->ops->page_new(s->pol, pg, &s->w->keys[pg]);
    double slot = room_hbm(s);
    if (s->fail)
        return;
    p->st |= IN_HBM;
    p->hbm_at = slot;
    s->hbm_used++;
    wait_for(s, slot);
    if (s->pins)
        pin(s, pg);
    else
        sync(s, pg);
}

static void do_drop(struct run *s, uint64_t id)
{
    const struct sim_world *w = s->w;
    uint32_t slot = world_id(w, id);
    for (uint32_t pg = slot == KVT_NONE ? KVT_NONE : w->id_head[slot]; pg != KVT_NONE;
         pg = w->pg_next[pg]) {
        struct spage *p = &s->pg[pg];
        if (!(p->st & ALIVE))
            continue;
        s->hbm_used -= (p->st & IN_HBM) != 0;
        s->dram_used -= (p->st & IN_DRAM) != 0;
        s->pf_hbm -= (p->pf & PF_HBM) != 0;
        s->pf_dram -= (p->pf & PF_DRAM) != 0;
        p->st = 0;
        p->pf = 0;
        sync(s, pg);
        if (s->ops->page_gone)
            s->ops->page_gone(s->pol, pg);
    }
}

/* ------------------------------------------------------------- run */

const char *const sim_term_name[SIM_TERMS] = { "dram->hbm", "hbm->dram", "ssd", "compute" };

uint64_t sim_bytes_total(const struct sim_result *r)
{
    uint64_t b = 0;
    for (int l = 0; l < SIM_LINKS; l++)
        b += r->bytes[l];
    return b;
}

uint64_t sim_bytes_fetched(const struct sim_result *r)
{
    return r->bytes[SIM_H2D] + r->bytes[SIM_SSD_READ];
}

static int model_check(const struct sim_world *w, const struct sim_model *m, char *err,
                       size_t errlen)
{
    if (!(m->h2d_gbps > 0) || !isfinite(m->h2d_gbps) || !(m->ssd_gbps > 0) ||
        !isfinite(m->ssd_gbps) || !(m->compute_s >= 0) || !isfinite(m->compute_s))
        return seterr(err, errlen, "bandwidths must be > 0 and compute time >= 0");
    if (!m->hbm_pages || m->hbm_pages < w->max_group) {
        seterr(err, errlen, "HBM of %llu pages cannot hold one group of %llu pages (a "
               "(sequence, layer) is held in HBM while it computes)",
               (unsigned long long)m->hbm_pages, (unsigned long long)w->max_group);
        return -ENOSPC;
    }
    return 0;
}

/* Where the pages that exist before the trace start: all in DRAM, or (with
 * DRAM limited) all on SSD and the first-used in DRAM too; the first-used in
 * HBM as well unless cold. Then the policy learns the schedule, the pages,
 * and its candidates, in order of first use. */
static void run_place(struct run *s)
{
    const struct sim_world *w = s->w;
    uint64_t in_dram = 0;
    for (uint32_t pg = 0; pg < w->np; pg++) {
        struct spage *p = &s->pg[pg];
        if (!w->pre[pg])
            continue;
        p->st = ALIVE;
        if (!s->dram_cap || in_dram < s->dram_cap)
            p->st |= IN_DRAM, in_dram++;
        if (s->dram_cap)
            p->st |= ON_SSD;
        if (!s->m->cold && s->hbm_used < s->m->hbm_pages)
            p->st |= IN_HBM, s->hbm_used++;
    }
    s->dram_used = in_dram;
    const struct sim_trace *t = s->t;
    if (t->has_schedule && s->ops->schedule) {
        kvt_schedule sc = { t->ids, t->n_ids, t->layers, t->order, t->window_pages, t->sink_pages };
        s->ops->schedule(s->pol, &sc);
    }
    for (uint32_t pg = 0; pg < w->np && s->ops->page_new; pg++)
        if (w->pre[pg])
            s->ops->page_new(s->pol, pg, &w->keys[pg]);
    for (uint32_t pg = 0; pg < w->np; pg++)
        if (w->pre[pg])
            sync(s, pg);
}

static int run_setup(struct run *s)
{
    const struct sim_world *w = s->w;
    const struct sim_model *m = s->m;
    uint64_t np = w->np ? w->np : 1;
    s->dram_cap = m->dram_pages && m->dram_pages < w->np ? m->dram_pages : 0;
    s->use_ssd = s->dram_cap != 0;
    double pb = (double)s->t->page_bytes;
    s->sec[SIM_H2D] = s->sec[SIM_D2H] = pb / (m->h2d_gbps * 1e9);
    s->sec[SIM_SSD_READ] = s->sec[SIM_SSD_WRITE] = pb / (m->ssd_gbps * 1e9);
    s->pf_max = m->prefetch_bytes ? (m->prefetch_bytes + s->t->page_bytes - 1) / s->t->page_bytes : 0;
    s->cand_cap = (uint32_t)(s->pf_max < 4096 ? (s->pf_max ? s->pf_max : 1) : 4096);
    s->pg = calloc(np, sizeof(struct spage));
    s->cand = malloc(s->cand_cap * sizeof(uint32_t));
    if (!s->pg || !s->cand)
        return -ENOMEM;
    struct kvt_policy_params pp = {
        .page_cap = (uint32_t)np,
        .slots = { (uint32_t)(m->hbm_pages < UINT32_MAX ? m->hbm_pages : UINT32_MAX - 1),
                   (uint32_t)(s->dram_cap ? s->dram_cap : np), s->use_ssd ? (uint32_t)np : 0 },
        .meta = &s->meta,
        .host = { s, host_key_of, host_find },
    };
    int e = s->ops->create(&pp, &s->pol);
    if (e) {
        s->pol = NULL;
        return e;
    }
    if (s->ops == &kvt_policy_belady_ops &&
        (e = kvt_belady_load(s->pol, w->acc_keys, s->t->accesses)) < 0)
        return e;
    run_place(s);
    return 0;
}

static void run_records(struct run *s)
{
    const struct sim_trace *t = s->t;
    for (size_t i = 0; i < t->n && !s->fail; i++) {
        const struct sim_rec *r = &t->rec[i];
        switch (r->kind) {
        case SIM_ACCESS:
        case SIM_NEW:
            if (!s->open)
                group_open(s, false, i);
            if (r->kind == SIM_ACCESS)
                do_access(s, s->w->rec_pg[i]);
            else
                do_new(s, s->w->rec_pg[i]);
            break;
        case SIM_ADVANCE:
            group_close(s);
            if (s->ops->advance)
                s->ops->advance(s->pol, r->id, r->layer);
            group_open(s, true, i);
            break;
        case SIM_DROP:
            group_close(s);
            do_drop(s, r->id);
            break;
        default:
            group_close(s);
            s->r->steps++;
            break;
        }
    }
    group_close(s);
}

static void run_results(struct run *s)
{
    struct sim_result *r = s->r;
    const struct sim_model *m = s->m;
    double steps = r->steps ? (double)r->steps : 1.0;
    r->total_s = s->now;
    r->step_s = r->total_s / steps;
    r->term_s[SIM_TERM_H2D] = (double)r->bytes[SIM_H2D] / (m->h2d_gbps * 1e9) / steps;
    r->term_s[SIM_TERM_D2H] = (double)r->bytes[SIM_D2H] / (m->h2d_gbps * 1e9) / steps;
    r->term_s[SIM_TERM_SSD] =
        (double)(r->bytes[SIM_SSD_READ] + r->bytes[SIM_SSD_WRITE]) / (m->ssd_gbps * 1e9) / steps;
    r->term_s[SIM_TERM_COMPUTE] = r->compute_s / steps;
    r->bound_by = SIM_TERM_COMPUTE;
    for (int i = 0; i < SIM_TERMS; i++)
        if (r->term_s[i] > r->term_s[r->bound_by])
            r->bound_by = i;
    r->bound_s = r->term_s[r->bound_by];
}

int sim_run(const struct sim_world *w, const struct kvt_policy_ops *ops,
            const struct sim_model *m, struct sim_result *r, char *err, size_t errlen)
{
    *r = (struct sim_result){ .policy = ops->name };
    int e = model_check(w, m, err, errlen);
    if (e)
        return e;
    struct run s = { .w = w, .t = w->t, .ops = ops, .m = m, .r = r, .err = err, .errlen = errlen };
    e = run_setup(&s);
    if (e)
        seterr(err, errlen, "%s: %s", ops->name,
               e == -ENOMEM ? "out of memory" : "cannot start the policy");
    else
        run_records(&s);
    if (!e && s.fail)
        e = s.fail;
    if (!e)
        run_results(&s);
    if (s.pol)
        ops->destroy(s.pol);
    free(s.pg);
    free(s.cand);
    free(s.gpin);
    free(s.gacc);
    return e;
}

/* ============================================================= the command */

/* The cost model in words: --help and the JSON's "model" say the same. */
static const char *const rules[] = {
    "capacities are in pages; HBM holds --hbm-pages (or --hbm-frac of the pages the trace "
    "uses), DRAM holds all of them unless --dram-pages/--dram-frac limit it, the rest is on SSD",
    "tiers are inclusive: a page brought to HBM keeps its DRAM copy; a page made by `new` is "
    "dirty until it is written down when it leaves HBM",
    "HBM starts holding the pages used first, as a prefill leaves it (--cold: empty)",
    "a group is an `advance` and the records up to the next advance, step or drop: one "
    "(sequence, layer); its pages stay in HBM until it has computed, as with kvt_acquire; "
    "records outside such a group are used one page at a time and compute once at the end",
    "a group is issued when the previous one has computed; its misses are fetched then "
    "(SSD->DRAM first for a page only on SSD, then DRAM->HBM), a full tier giving up the "
    "policy's victim, written down first if dirty",
    "policies with prefetch() bring pages of the groups ahead while a group computes, soonest "
    "first, while the page each displaces is used later (next_use) and the prefetched pages not "
    "yet used stay within --prefetch-bytes",
    "each link carries one page at a time at its bandwidth, first come first served: "
    "DRAM->HBM and HBM->DRAM at --h2d-gbps each, SSD reads and writes sharing --ssd-gbps",
    "a group computes for --compute-us once its pages are in HBM and the previous group is "
    "done; stall is the time compute waited for data; step time is the end of the last "
    "compute / steps",
    "bound per step = max(compute, each link's bytes / its bandwidth); step_over_bound = "
    "step time / bound",
    "policies are compared by the bytes they fetch (dram->hbm + ssd->dram), which Belady's "
    "MIN makes the fewest possible; write-backs (hbm->dram, dram->ssd) are counted apart",
};
#define NRULES (sizeof(rules) / sizeof(rules[0]))

#define MAX_POL 8
static const char *const default_policies[] = { "decode", "lru", "belady" };

struct sim_opts {
    const char *trace_path, *write_path, *model, *dtype;
    const char *gen_flag;        /* a generator flag given (refused with --trace) */
    struct sim_gen gen;
    const struct kvt_shape *shape;
    bool layers_given, json, cold;
    double hbm_frac, dram_frac;  /* 0: not given */
    uint64_t hbm_pages, dram_pages;
    double h2d, ssd, compute_us;
    uint64_t prefetch_bytes;
    bool prefetch_given;
    const char *pol_names[MAX_POL];
    int n_pol;
    bool pol_given;
};

/* Prints text wrapped at 79 columns, the first line after first, the others
 * after indent. */
static void wrap(FILE *f, const char *first, const char *indent, const char *text)
{
    size_t col = (size_t)fprintf(f, "%s", first), ind = strlen(indent);
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col + 1 + word > 79 && col > ind) {
            fprintf(f, "\n%s", indent);
            col = ind;
        } else if (col > ind && col != strlen(first)) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, word, f);
        col += word;
        text += word;
        text += strspn(text, " ");
    }
    fputc('\n', f);
}

static void sim_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier sim [--trace FILE | generator options] [tier and cost options]\n"
            "\n"
            "Replays a page-access trace through each policy (decode, lru, belady: those this\n"
            "kvtier has) over HBM, DRAM and SSD tiers, and reports side by side the pages and\n"
            "bytes moved per link, the HBM hit ratio, and the stall and step time under a\n"
            "link/compute cost model. Belady is the offline optimum (MIN) for the bytes.\n"
            "\n"
            "trace:\n"
            "  --trace FILE        replay FILE (format below) instead of generating\n"
            "  --write-trace FILE  also write the trace being simulated to FILE\n"
            "generator (a decode of a model shape; ignored with --trace):\n"
            "  --model NAME        preset (default llama3-8b; list below)\n"
            "  --layers N          layers to simulate, at most the model's (default: all; cut\n"
            "                      for speed)\n"
            "  --dtype T           KV dtype (default: the preset's): sets the page bytes\n"
            "  --batch N           sequences (default 4)\n"
            "  --context N         tokens per sequence before the first step (default 8k;\n"
            "                      k and m are x1024)\n"
            "  --tokens N          decode steps (default 16)\n"
            "  --page-tokens N     tokens per page (default 16)\n"
            "  --window-pages N    sliding window: the last N pages are read (default 0: all)\n"
            "  --sink-pages N      with a window, the first N pages are read too (default 0)\n"
            "  --order O           layer (for layer { for seq }, default) or seq\n"
            "tiers:\n"
            "  --hbm-pages N       HBM capacity in pages, or\n"
            "  --hbm-frac X        HBM capacity as a fraction of the pages used (default 0.5)\n"
            "  --dram-pages N      DRAM capacity in pages, or --dram-frac X; default: DRAM\n"
            "  --dram-frac X       holds everything and the SSD is not used\n"
            "  --cold              HBM starts empty (default: holding the first-used pages)\n"
            "cost model:\n"
            "  --h2d-gbps X        DRAM->HBM and HBM->DRAM, each (default 50)\n"
            "  --ssd-gbps X        SSD reads and writes together (default 6)\n"
            "  --compute-us X      compute per group, one (sequence, layer) (default 50)\n"
            "  --prefetch-bytes N  most bytes prefetched and not yet used (default: what\n"
            "                      DRAM->HBM moves during one group's compute; 0: none)\n"
            "output:\n"
            "  --policies A,B      policies to run (default decode,lru,belady: those built)\n"
            "  --json              one JSON object on stdout; the text goes to stderr\n"
            "  -h, --help          this text\n"
            "\n"
            "The cost model:\n");
    for (size_t i = 0; i < NRULES; i++)
        wrap(f, "  - ", "    ", rules[i]);
    fprintf(f,
            "\n"
            "Trace format (text, version 1): one record per line; '#' starts a comment;\n"
            "blank lines are skipped; numbers are decimal (ID < 2^64, LAYER, INDEX < 2^32).\n"
            "  kvtier-trace 1            the first line\n"
            "  page_bytes N              bytes per page; required, before any record\n"
            "  schedule order=layer|seq layers=L window=W sinks=S ids=A,B,...\n"
            "                            optional, before any record: what kvt_set_schedule\n"
            "                            got (window and sinks default to 0)\n"
            "  advance ID LAYER          kvt_advance: now computing (ID, LAYER)\n"
            "  access ID LAYER INDEX     one page read by the attention\n"
            "  new ID LAYER INDEX        a page created in HBM (the tail grows)\n"
            "  drop ID                   the sequence finished: its pages are gone\n"
            "  step                      the end of a decode step\n"
            "A page accessed before any `new` of it exists before the trace (the prefill).\n"
            "\n"
            "Exit status: 0, 1 when a trace cannot be read or written or is malformed (the\n"
            "message names the line), 2 for a bad argument.\n"
            "\n"
            "presets:\n");
    kvt_preset_list(f, "  ");
}

enum {
    O_TRACE = 256, O_WRITE, O_MODEL, O_LAYERS, O_DTYPE, O_BATCH, O_CONTEXT, O_TOKENS,
    O_PAGE_TOKENS, O_WINDOW, O_SINKS, O_ORDER, O_HBM_PAGES, O_HBM_FRAC, O_DRAM_PAGES,
    O_DRAM_FRAC, O_COLD, O_H2D, O_SSD, O_COMPUTE, O_PREFETCH, O_POLICIES, O_JSON,
};

static const struct option sim_lo[] = {
    { "trace", 1, 0, O_TRACE },           { "write-trace", 1, 0, O_WRITE },
    { "model", 1, 0, O_MODEL },           { "layers", 1, 0, O_LAYERS },
    { "dtype", 1, 0, O_DTYPE },           { "batch", 1, 0, O_BATCH },
    { "context", 1, 0, O_CONTEXT },       { "tokens", 1, 0, O_TOKENS },
    { "page-tokens", 1, 0, O_PAGE_TOKENS }, { "window-pages", 1, 0, O_WINDOW },
    { "sink-pages", 1, 0, O_SINKS },      { "order", 1, 0, O_ORDER },
    { "hbm-pages", 1, 0, O_HBM_PAGES },   { "hbm-frac", 1, 0, O_HBM_FRAC },
    { "dram-pages", 1, 0, O_DRAM_PAGES }, { "dram-frac", 1, 0, O_DRAM_FRAC },
    { "cold", 0, 0, O_COLD },             { "h2d-gbps", 1, 0, O_H2D },
    { "ssd-gbps", 1, 0, O_SSD },          { "compute-us", 1, 0, O_COMPUTE },
    { "prefetch-bytes", 1, 0, O_PREFETCH }, { "policies", 1, 0, O_POLICIES },
    { "json", 0, 0, O_JSON },             { "help", 0, 0, 'h' },
    { 0, 0, 0, 0 },
};

static int bad_value(const char *opt, const char *val, const char *want)
{
    cli_error("sim", 2, "bad value '%s' for --%s: expected %s", val, opt, want);
    return -EINVAL;
}

/* A count from 1 (or 0 when zero_ok) to max, with k/m suffixes. */
static int opt_count(const char *opt, const char *val, uint64_t max, bool zero_ok, uint64_t *out)
{
    uint64_t v;
    if (cli_parse_count(val, &v) || v > max || (!zero_ok && !v)) {
        char want[64];
        snprintf(want, sizeof want, "a whole number from %d to %llu", zero_ok ? 0 : 1,
                 (unsigned long long)max);
        return bad_value(opt, val, want);
    }
    *out = v;
    return 0;
}

static int opt_double(const char *opt, const char *val, double lo, bool lo_ok, double hi,
                      const char *want, double *out)
{
    double v;
    if (cli_parse_real(val, &v) || v < lo || (!lo_ok && v == lo) || v > hi)
        return bad_value(opt, val, want);
    *out = v;
    return 0;
}

static int opt_policies(struct sim_opts *o, const char *val)
{
    static char buf[256];
    if (strlen(val) >= sizeof buf)
        return bad_value("policies", val, "a few policy names separated by commas");
    strcpy(buf, val);
    o->n_pol = 0;
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (o->n_pol == MAX_POL)
            return bad_value("policies", val, "at most 8 names");
        const struct kvt_policy_ops *ops = kvt_policy_find(p);
        if (!ops) {
            cli_error("sim", 2, "no policy '%s' for --policies (decode, lru, belady)", p);
            return -EINVAL;
        }
        o->pol_names[o->n_pol++] = ops->name;
    }
    if (!o->n_pol)
        return bad_value("policies", val, "policy names separated by commas");
    o->pol_given = true;
    return 0;
}

static int sim_option(int c, const char *a, struct sim_opts *o)
{
    uint64_t v;
    int e = 0;
    const char *name = "";
    for (const struct option *l = sim_lo; l->name; l++)
        if (l->val == c)
            name = l->name;
    if (c >= O_MODEL && c <= O_ORDER && !o->gen_flag)
        o->gen_flag = name;
    switch (c) {
    case O_TRACE:
    case O_WRITE:
        if (!*a)
            e = bad_value(name, a, "a file name");
        *(c == O_TRACE ? &o->trace_path : &o->write_path) = a;
        break;
    case O_MODEL: o->model = a; break;
    case O_DTYPE: o->dtype = a; break;
    case O_LAYERS:
        if (!(e = opt_count(name, a, 1u << 16, false, &v)))
            o->gen.layers = (uint32_t)v, o->layers_given = true;
        break;
    case O_BATCH:
        if (!(e = opt_count(name, a, 1u << 16, false, &v)))
            o->gen.batch = (uint32_t)v;
        break;
    case O_CONTEXT: e = opt_count(name, a, 1ull << 40, false, &o->gen.context); break;
    case O_TOKENS: e = opt_count(name, a, 1ull << 32, false, &o->gen.tokens); break;
    case O_PAGE_TOKENS: e = opt_count(name, a, 1ull << 32, false, &o->gen.page_tokens); break;
    case O_WINDOW:
    case O_SINKS:
        if (!(e = opt_count(name, a, UINT32_MAX, true, &v)))
            *(c == O_WINDOW ? &o->gen.window_pages : &o->gen.sink_pages) = (uint32_t)v;
        break;
    case O_ORDER:
        if (!strcmp(a, "layer"))
            o->gen.order = KVT_ORDER_LAYER_MAJOR;
        else if (!strcmp(a, "seq"))
            o->gen.order = KVT_ORDER_SEQ_MAJOR;
        else
            e = bad_value(name, a, "layer or seq");
        break;
    case O_HBM_PAGES: e = opt_count(name, a, 1ull << 40, false, &o->hbm_pages); break;
    case O_DRAM_PAGES: e = opt_count(name, a, 1ull << 40, false, &o->dram_pages); break;
    case O_HBM_FRAC:
    case O_DRAM_FRAC:
        e = opt_double(name, a, 0, false, 1, "a fraction above 0, at most 1",
                       c == O_HBM_FRAC ? &o->hbm_frac : &o->dram_frac);
        break;
    case O_COLD: o->cold = true; break;
    case O_H2D:
    case O_SSD:
        e = opt_double(name, a, 0, false, 1e6, "GB/s above 0", c == O_H2D ? &o->h2d : &o->ssd);
        break;
    case O_COMPUTE:
        e = opt_double(name, a, 0, true, 1e9, "microseconds, 0 or more", &o->compute_us);
        break;
    case O_PREFETCH:
        if (cli_parse_size(a, &o->prefetch_bytes))
            e = bad_value(name, a, "a size such as 64M, or 0");
        o->prefetch_given = true;
        break;
    case O_POLICIES: e = opt_policies(o, a); break;
    case O_JSON: o->json = true; break;
    default: break;
    }
    return e;
}

/* The shape behind a generated trace: preset, layers, dtype, page bytes. */
static int sim_shape(struct sim_opts *o)
{
    if (!o->model)
        o->model = "llama3-8b";
    o->shape = kvt_preset_find(o->model);
    if (!o->shape) {
        cli_error("sim", 2, "unknown model '%s' for --model; the presets are:", o->model);
        kvt_preset_list(stderr, "  ");
        return -EINVAL;
    }
    if (!o->layers_given)
        o->gen.layers = o->shape->layers;
    if (o->gen.layers > o->shape->layers) {
        cli_error("sim", 2, "bad value '%u' for --layers: %s has %u layers", o->gen.layers,
                  o->shape->name, o->shape->layers);
        return -EINVAL;
    }
    if (!o->dtype)
        o->dtype = o->shape->dtype;
    unsigned bits = kvt_dtype_bits(o->dtype);
    if (!bits)
        return bad_value("dtype", o->dtype, "fp32, fp16, bf16, fp8, int8 or int4");
    uint64_t per;
    if (kvt_kv_bytes_per_token_layer(o->shape, bits, &per) ||
        __builtin_mul_overflow(per, o->gen.page_tokens, &o->gen.page_bytes)) {
        cli_error("sim", 2, "the pages of this shape do not fit 64 bits");
        return -EINVAL;
    }
    return 0;
}

/* Returns 0, 1 after --help, or -EINVAL having said why. */
static int sim_parse(int argc, char **argv, struct sim_opts *o)
{
    *o = (struct sim_opts){
        .gen = { .batch = 4, .context = 8192, .tokens = 16, .page_tokens = 16,
                 .order = KVT_ORDER_LAYER_MAJOR },
        .h2d = 50, .ssd = 6, .compute_us = 50,
    };
    int c, e;
    optind = 0; /* GNU: a full reset, so sim_main can run more than once */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", sim_lo, NULL)) != -1) {
        if (c == 'h') {
            sim_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("sim", c, argv);
        if ((e = sim_option(c, optarg, o)))
            return e;
    }
    if (optind != argc) {
        cli_error("sim", 2, "unexpected argument '%s'", argv[optind]);
        return -EINVAL;
    }
    if (o->trace_path && o->gen_flag) {
        cli_error("sim", 2, "--%s describes a generated trace; it cannot be used with --trace",
                  o->gen_flag);
        return -EINVAL;
    }
    if (o->hbm_pages && o->hbm_frac > 0) {
        cli_error("sim", 2, "give --hbm-pages or --hbm-frac, not both");
        return -EINVAL;
    }
    if (o->dram_pages && o->dram_frac > 0) {
        cli_error("sim", 2, "give --dram-pages or --dram-frac, not both");
        return -EINVAL;
    }
    if (!o->hbm_pages && !(o->hbm_frac > 0))
        o->hbm_frac = 0.5;
    if (!o->pol_given)
        for (size_t i = 0; i < sizeof(default_policies) / sizeof(default_policies[0]); i++)
            if (kvt_policy_find(default_policies[i]))
                o->pol_names[o->n_pol++] = default_policies[i];
    return o->trace_path ? 0 : sim_shape(o);
}

/* ------------------------------------------------------------- report */

struct sim_report {
    const struct sim_opts *o;
    const struct sim_trace *t;
    const struct sim_world *w;
    struct sim_model m;
    struct sim_result res[MAX_POL];
    int n;
    const char *skipped[MAX_POL];
    int n_skipped;
};

static const struct sim_result *find_result(const struct sim_report *rp, const char *name)
{
    for (int i = 0; i < rp->n; i++)
        if (!strcmp(rp->res[i].policy, name))
            return &rp->res[i];
    return NULL;
}

/* Bytes fetched by a over those fetched by b; 1 when neither fetched any;
 * negative when one is missing or only b fetched nothing. */
static double byte_ratio(const struct sim_report *rp, const char *a, const char *b)
{
    const struct sim_result *x = find_result(rp, a), *y = find_result(rp, b);
    if (!x || !y)
        return -1;
    uint64_t bx = sim_bytes_fetched(x), by = sim_bytes_fetched(y);
    if (!by)
        return bx ? -1 : 1;
    return (double)bx / (double)by;
}

static void text_head(FILE *f, const struct sim_report *rp)
{
    const struct sim_opts *o = rp->o;
    const struct sim_trace *t = rp->t;
    char b1[32], b2[32];
    if (o->trace_path) {
        fprintf(f, "kvtier sim: trace %s", o->trace_path);
        if (t->has_schedule)
            fprintf(f, " (%zu sequence%s x %u layers, %s-major)", t->n_ids, t->n_ids == 1 ? "" : "s",
                    t->layers, t->order == KVT_ORDER_SEQ_MAJOR ? "sequence" : "layer");
        fputc('\n', f);
    } else {
        const struct sim_gen *g = &o->gen;
        fprintf(f, "kvtier sim: %s", o->shape->name);
        if (g->layers != o->shape->layers)
            fprintf(f, " (%u of %u layers)", g->layers, o->shape->layers);
        fprintf(f, ", %s, batch %u, context %llu + %llu tokens, %s-major, ", o->dtype, g->batch,
                (unsigned long long)g->context, (unsigned long long)g->tokens,
                g->order == KVT_ORDER_SEQ_MAJOR ? "sequence" : "layer");
        if (g->window_pages)
            fprintf(f, "window %u + %u sink pages\n", g->window_pages, g->sink_pages);
        else
            fprintf(f, "full attention\n");
    }
    uint64_t np = sim_world_pages(rp->w);
    fprintf(f, "  trace: %llu pages of %s (%s), %llu accesses, %llu steps\n",
            (unsigned long long)np, cli_bytes(b1, sizeof b1, (double)t->page_bytes),
            cli_bytes(b2, sizeof b2, (double)np * (double)t->page_bytes),
            (unsigned long long)t->accesses, (unsigned long long)t->steps);
    fprintf(f, "  tiers: HBM %llu pages (%.1f%%), ", (unsigned long long)rp->m.hbm_pages,
            np ? 100.0 * (double)rp->m.hbm_pages / (double)np : 0);
    if (rp->m.dram_pages && rp->m.dram_pages < np)
        fprintf(f, "DRAM %llu pages (%.1f%%), the rest on SSD", (unsigned long long)rp->m.dram_pages,
                100.0 * (double)rp->m.dram_pages / (double)np);
    else
        fprintf(f, "DRAM holds all");
    fprintf(f, "; %s start\n", rp->m.cold ? "cold" : "warm");
    fprintf(f, "  model: DRAM<->HBM %g GB/s each way, SSD %g GB/s, compute %g us per group, "
               "prefetch <= %s\n",
            rp->m.h2d_gbps, rp->m.ssd_gbps, rp->m.compute_s * 1e6,
            cli_bytes(b1, sizeof b1, (double)rp->m.prefetch_bytes));
    for (int i = 0; i < rp->n_skipped; i++)
        fprintf(f, "  (%s: not in this kvtier yet, skipped)\n", rp->skipped[i]);
}

static void text_row(FILE *f, const struct sim_report *rp, const char *label,
                     void (*cell)(const struct sim_result *, char *, size_t))
{
    fprintf(f, "  %-18s", label);
    for (int i = 0; i < rp->n; i++) {
        char c[48];
        cell(&rp->res[i], c, sizeof c);
        fprintf(f, " %13s", c);
    }
    fputc('\n', f);
}

static void c_h2d(const struct sim_result *r, char *b, size_t n) { cli_bytes(b, n, (double)r->bytes[SIM_H2D]); }
static void c_ssdr(const struct sim_result *r, char *b, size_t n) { cli_bytes(b, n, (double)r->bytes[SIM_SSD_READ]); }
static void c_d2h(const struct sim_result *r, char *b, size_t n) { cli_bytes(b, n, (double)r->bytes[SIM_D2H]); }
static void c_ssdw(const struct sim_result *r, char *b, size_t n) { cli_bytes(b, n, (double)r->bytes[SIM_SSD_WRITE]); }
static void c_pages(const struct sim_result *r, char *b, size_t n) { snprintf(b, n, "%llu", (unsigned long long)r->pages[SIM_H2D]); }
static void c_pf(const struct sim_result *r, char *b, size_t n) { snprintf(b, n, "%llu", (unsigned long long)r->prefetched); }
static void c_pages_ssd(const struct sim_result *r, char *b, size_t n) { snprintf(b, n, "%llu", (unsigned long long)r->pages[SIM_SSD_READ]); }
static void c_pf_ssd(const struct sim_result *r, char *b, size_t n) { snprintf(b, n, "%llu", (unsigned long long)r->prefetched_ssd); }
static void c_hit(const struct sim_result *r, char *b, size_t n)
{
    snprintf(b, n, "%.1f%%", r->accesses ? 100.0 * (double)r->hits / (double)r->accesses : 0);
}
static void c_stall(const struct sim_result *r, char *b, size_t n)
{
    cli_secs(b, n, r->stall_s / (r->steps ? (double)r->steps : 1));
}
static void c_step(const struct sim_result *r, char *b, size_t n) { cli_secs(b, n, r->step_s); }
static void c_bound(const struct sim_result *r, char *b, size_t n) { cli_secs(b, n, r->bound_s); }
static void c_by(const struct sim_result *r, char *b, size_t n) { snprintf(b, n, "%s", sim_term_name[r->bound_by]); }
static void c_ratio(const struct sim_result *r, char *b, size_t n)
{
    snprintf(b, n, "%.3f", r->bound_s > 0 ? r->step_s / r->bound_s : 0);
}

static void sim_text(FILE *f, const struct sim_report *rp)
{
    text_head(f, rp);
    if (!rp->n) {
        fprintf(f, "  no policy to run\n");
        return;
    }
    fprintf(f, "\n  %-18s", "");
    for (int i = 0; i < rp->n; i++)
        fprintf(f, " %13s", rp->res[i].policy);
    fputc('\n', f);
    uint64_t any[SIM_LINKS] = { 0 }, pf = 0;
    for (int i = 0; i < rp->n; i++) {
        for (int l = 0; l < SIM_LINKS; l++)
            any[l] += rp->res[i].bytes[l];
        pf += rp->res[i].prefetched;
    }
    text_row(f, rp, "bytes dram->hbm", c_h2d);
    if (any[SIM_SSD_READ])
        text_row(f, rp, "bytes ssd->dram", c_ssdr);
    if (any[SIM_D2H])
        text_row(f, rp, "bytes hbm->dram", c_d2h);
    if (any[SIM_SSD_WRITE])
        text_row(f, rp, "bytes dram->ssd", c_ssdw);
    text_row(f, rp, "pages dram->hbm", c_pages);
    if (pf)
        text_row(f, rp, "  of which prefetch", c_pf);
    if (any[SIM_SSD_READ]) {
        text_row(f, rp, "pages ssd->dram", c_pages_ssd);
        text_row(f, rp, "  of which prefetch", c_pf_ssd);
    }
    text_row(f, rp, "hit ratio", c_hit);
    text_row(f, rp, "stall per step", c_stall);
    text_row(f, rp, "step time", c_step);
    text_row(f, rp, "bound per step", c_bound);
    text_row(f, rp, "  bound by", c_by);
    text_row(f, rp, "step / bound", c_ratio);
    double lo = byte_ratio(rp, "lru", "decode"), db = byte_ratio(rp, "decode", "belady");
    double lb = byte_ratio(rp, "lru", "belady");
    if (lo >= 0 || db >= 0 || lb >= 0)
        fputc('\n', f);
    if (lo >= 0)
        fprintf(f, "  LRU fetches %.2fx the bytes decode fetches\n", lo);
    if (db >= 0)
        fprintf(f, "  decode fetches %.3fx the bytes of Belady's MIN (the fewest possible)\n", db);
    else if (lb >= 0)
        fprintf(f, "  LRU fetches %.2fx the bytes of Belady's MIN (the fewest possible)\n", lb);
    if (lo >= 0 || db >= 0 || lb >= 0)
        fprintf(f, "  (fetched: dram->hbm + ssd->dram; write-backs are counted apart)\n");
}

static void json_trace(const struct sim_report *rp)
{
    const struct sim_opts *o = rp->o;
    const struct sim_trace *t = rp->t;
    printf("\"trace\": {\"source\": ");
    if (o->trace_path) {
        printf("\"file\", \"file\": ");
        cli_json_str(o->trace_path);
    } else {
        const struct sim_gen *g = &o->gen;
        printf("\"generated\", \"model\": ");
        cli_json_str(o->shape->name);
        printf(", \"model_layers\": %u, \"dtype\": ", o->shape->layers);
        cli_json_str(o->dtype);
        printf(", \"context\": %llu, \"tokens\": %llu, \"page_tokens\": %llu",
               (unsigned long long)g->context, (unsigned long long)g->tokens,
               (unsigned long long)g->page_tokens);
    }
    if (t->has_schedule)
        printf(", \"layers\": %u, \"batch\": %zu, \"order\": \"%s\", \"window_pages\": %u, "
               "\"sink_pages\": %u",
               t->layers, t->n_ids, t->order == KVT_ORDER_SEQ_MAJOR ? "seq" : "layer",
               t->window_pages, t->sink_pages);
    printf(", \"page_bytes\": %llu, \"pages\": %llu, \"max_group_pages\": %llu, \"records\": %zu, "
           "\"accesses\": %llu, \"steps\": %llu}, ",
           (unsigned long long)t->page_bytes, (unsigned long long)sim_world_pages(rp->w),
           (unsigned long long)sim_world_max_group(rp->w), t->n, (unsigned long long)t->accesses,
           (unsigned long long)t->steps);
}

static void json_model(const struct sim_report *rp)
{
    const struct sim_model *m = &rp->m;
    uint64_t np = sim_world_pages(rp->w);
    printf("\"model\": {\"hbm_pages\": %llu, \"hbm_frac\": %.6g, \"dram_pages\": ",
           (unsigned long long)m->hbm_pages, np ? (double)m->hbm_pages / (double)np : 0);
    if (m->dram_pages && m->dram_pages < np)
        printf("%llu", (unsigned long long)m->dram_pages);
    else
        printf("null");
    printf(", \"h2d_gbps\": %.9g, \"ssd_gbps\": %.9g, \"compute_us\": %.9g, "
           "\"prefetch_bytes\": %llu, \"start\": \"%s\", \"rules\": [",
           m->h2d_gbps, m->ssd_gbps, m->compute_s * 1e6, (unsigned long long)m->prefetch_bytes,
           m->cold ? "cold" : "warm");
    for (size_t i = 0; i < NRULES; i++) {
        printf(i ? ", " : "");
        cli_json_str(rules[i]);
    }
    printf("]}, ");
}

static void json_links(const char *key, const uint64_t v[SIM_LINKS])
{
    printf("\"%s\": {", key);
    for (int l = 0; l < SIM_LINKS; l++)
        printf("%s\"%s\": %llu", l ? ", " : "", sim_link_name[l], (unsigned long long)v[l]);
    printf("}, ");
}

static void json_result(const struct sim_result *r)
{
    printf("{\"policy\": ");
    cli_json_str(r->policy);
    printf(", ");
    json_links("bytes", r->bytes);
    json_links("pages", r->pages);
    printf("\"bytes_total\": %llu, \"bytes_fetched\": %llu, \"prefetched_pages\": %llu, "
           "\"prefetched_ssd_pages\": %llu, \"prefetched_unused\": %llu, \"accesses\": %llu, \"hits\": %llu, \"hit_ratio\": %.9g, \"groups\": %llu, "
           "\"steps\": %llu, ",
           (unsigned long long)sim_bytes_total(r), (unsigned long long)sim_bytes_fetched(r),
           (unsigned long long)r->prefetched, (unsigned long long)r->prefetched_ssd,
           (unsigned long long)r->prefetch_unused, (unsigned long long)r->accesses,
           (unsigned long long)r->hits,
           r->accesses ? (double)r->hits / (double)r->accesses : 0, (unsigned long long)r->groups,
           (unsigned long long)r->steps);
    printf("\"total_s\": %.9g, \"stall_s\": %.9g, \"compute_s\": %.9g, \"step_s\": %.9g, "
           "\"bound_s\": %.9g, \"bound_by\": \"%s\", \"bound_terms_s\": {",
           r->total_s, r->stall_s, r->compute_s, r->step_s, r->bound_s,
           sim_term_name[r->bound_by]);
    for (int i = 0; i < SIM_TERMS; i++)
        printf("%s\"%s\": %.9g", i ? ", " : "", sim_term_name[i], r->term_s[i]);
    printf("}, \"step_over_bound\": %.9g}", r->bound_s > 0 ? r->step_s / r->bound_s : 0);
}

static void sim_json(const struct sim_report *rp)
{
    putchar('{');
    json_trace(rp);
    json_model(rp);
    printf("\"policies\": [");
    for (int i = 0; i < rp->n; i++) {
        printf(i ? ", " : "");
        json_result(&rp->res[i]);
    }
    printf("], \"skipped\": [");
    for (int i = 0; i < rp->n_skipped; i++) {
        printf(i ? ", " : "");
        cli_json_str(rp->skipped[i]);
    }
    printf("]");
    static const char *const pairs[][3] = { { "lru_over_decode", "lru", "decode" },
                                            { "decode_over_belady", "decode", "belady" },
                                            { "lru_over_belady", "lru", "belady" } };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        double x = byte_ratio(rp, pairs[i][1], pairs[i][2]);
        if (x >= 0)
            printf(", \"%s\": %.9g", pairs[i][0], x);
    }
    printf("}\n");
}

/* ------------------------------------------------------------- main */

static int load_trace(const struct sim_opts *o, struct sim_trace *t)
{
    char err[320];
    if (!o->trace_path) {
        int e = sim_generate(&o->gen, t);
        if (e == -E2BIG)
            return cli_error("sim", 2, "the trace would pass %llu records or 2^32 pages; cut "
                             "--layers, --batch, --tokens or --context",
                             (unsigned long long)SIM_MAX_RECORDS);
        if (e)
            return cli_error("sim", e == -EINVAL ? 2 : 1, "cannot generate the trace (%s)",
                             strerror(-e));
        return 0;
    }
    FILE *f = fopen(o->trace_path, "r");
    if (!f)
        return cli_error("sim", 1, "%s: %s", o->trace_path, strerror(errno));
    int e = sim_trace_read(f, t, err, sizeof err);
    fclose(f);
    return e ? cli_error("sim", 1, "%s: %s", o->trace_path, err) : 0;
}

static int write_trace(const struct sim_opts *o, const struct sim_trace *t)
{
    FILE *f = fopen(o->write_path, "w");
    if (!f)
        return cli_error("sim", 1, "--write-trace %s: %s", o->write_path, strerror(errno));
    int e = sim_trace_write(f, t);
    if (fclose(f) || e)
        return cli_error("sim", 1, "--write-trace %s: write failed", o->write_path);
    return 0;
}

/* Capacities and the cost model from the options and the trace. */
static int sim_model_of(const struct sim_opts *o, const struct sim_world *w, uint64_t page_bytes,
                        struct sim_model *m)
{
    uint64_t np = sim_world_pages(w);
    *m = (struct sim_model){ .h2d_gbps = o->h2d, .ssd_gbps = o->ssd,
                             .compute_s = o->compute_us * 1e-6, .cold = o->cold };
    m->hbm_pages = o->hbm_pages ? o->hbm_pages : (uint64_t)(o->hbm_frac * (double)np);
    if (!m->hbm_pages)
        m->hbm_pages = 1;
    if (o->dram_pages || o->dram_frac > 0) {
        m->dram_pages = o->dram_pages ? o->dram_pages : (uint64_t)(o->dram_frac * (double)np);
        if (!m->dram_pages)
            m->dram_pages = 1;
    }
    if (m->hbm_pages < sim_world_max_group(w))
        return cli_error("sim", 2, "HBM of %llu pages cannot hold one (sequence, layer) of %llu "
                         "pages while it computes: raise --%s",
                         (unsigned long long)m->hbm_pages,
                         (unsigned long long)sim_world_max_group(w),
                         o->hbm_pages ? "hbm-pages" : "hbm-frac");
    /* What DRAM->HBM moves while one group computes: enough to hide the
     * next group's fetches behind this one's compute, and no more, since
     * every page prefetched early takes an HBM slot from a page that would
     * have stayed. At least one page. */
    if (o->prefetch_given) {
        m->prefetch_bytes = o->prefetch_bytes;
    } else {
        double b = o->h2d * 1e9 * m->compute_s;
        m->prefetch_bytes = b > (double)page_bytes ? (uint64_t)b : page_bytes;
    }
    return 0;
}

int sim_main(int argc, char **argv)
{
    struct sim_opts o;
    int r = sim_parse(argc, argv, &o);
    if (r)
        return r > 0 ? 0 : 2;
    struct sim_trace t;
    if ((r = load_trace(&o, &t)))
        return r;
    struct sim_world *w = NULL;
    char err[320];
    struct sim_report *rp = calloc(1, sizeof(*rp));
    if (!rp) {
        r = cli_error("sim", 1, "out of memory");
        goto out;
    }
    if (sim_world_build(&t, &w, err, sizeof err)) {
        r = cli_error("sim", 1, "%s: %s", o.trace_path ? o.trace_path : "generated trace", err);
        goto out;
    }
    if (o.write_path && (r = write_trace(&o, &t)))
        goto out;
    *rp = (struct sim_report){ .o = &o, .t = &t, .w = w };
    if ((r = sim_model_of(&o, w, t.page_bytes, &rp->m)))
        goto out;
    if (!o.pol_given)
        for (size_t i = 0; i < sizeof(default_policies) / sizeof(default_policies[0]); i++)
            if (!kvt_policy_find(default_policies[i]))
                rp->skipped[rp->n_skipped++] = default_policies[i];
    for (int i = 0; i < o.n_pol; i++) {
        int e = sim_run(w, kvt_policy_find(o.pol_names[i]), &rp->m, &rp->res[rp->n], err, sizeof err);
        if (e) {
            r = cli_error("sim", e == -ENOSPC ? 2 : 1, "%s: %s", o.pol_names[i], err);
            goto out;
        }
        rp->n++;
    }
    sim_text(o.json ? stderr : stdout, rp);
    if (o.json)
        sim_json(rp);
out:
    free(rp);
    sim_world_free(w);
    sim_trace_free(&t);
    return r;
}
