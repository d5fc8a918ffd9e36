/*
 * report.c — `kvtier sim`'s report: the policies side by side as a table,
 * and the same as one JSON object.
 */
#include <string.h>

#include "tools/cli.h"
#include "tools/sim/command.h"
#include "tools/util/json.h"

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

void sim_text(FILE *f, const struct sim_report *rp)
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

static void json_trace(json_t *j, const struct sim_report *rp)
{
    const struct sim_opts *o = rp->o;
    const struct sim_trace *t = rp->t;
    json_t *x = json_object();
    if (o->trace_path) {
        util_json_set_str(x, "source", "file");
        util_json_set_str(x, "file", o->trace_path);
    } else {
        const struct sim_gen *g = &o->gen;
        util_json_set_str(x, "source", "generated");
        util_json_set_str(x, "model", o->shape->name);
        util_json_set_u64(x, "model_layers", o->shape->layers);
        util_json_set_str(x, "dtype", o->dtype);
        util_json_set_u64(x, "context", g->context);
        util_json_set_u64(x, "tokens", g->tokens);
        util_json_set_u64(x, "page_tokens", g->page_tokens);
    }
    if (t->has_schedule) {
        util_json_set_u64(x, "layers", t->layers);
        util_json_set_u64(x, "batch", t->n_ids);
        util_json_set_str(x, "order", t->order == KVT_ORDER_SEQ_MAJOR ? "seq" : "layer");
        util_json_set_u64(x, "window_pages", t->window_pages);
        util_json_set_u64(x, "sink_pages", t->sink_pages);
    }
    util_json_set_u64(x, "page_bytes", t->page_bytes);
    util_json_set_u64(x, "pages", sim_world_pages(rp->w));
    util_json_set_u64(x, "max_group_pages", sim_world_max_group(rp->w));
    util_json_set_u64(x, "records", t->n);
    util_json_set_u64(x, "accesses", t->accesses);
    util_json_set_u64(x, "steps", t->steps);
    json_object_set_new(j, "trace", x);
}

static json_t *json_strings(const char *const *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, util_json_str(s[i]));
    return a;
}

static void json_model(json_t *j, const struct sim_report *rp)
{
    const struct sim_model *m = &rp->m;
    uint64_t np = sim_world_pages(rp->w);
    json_t *x = json_object();
    util_json_set_u64(x, "hbm_pages", m->hbm_pages);
    util_json_set_real(x, "hbm_frac", np ? (double)m->hbm_pages / (double)np : 0);
    if (m->dram_pages && m->dram_pages < np)
        util_json_set_u64(x, "dram_pages", m->dram_pages);
    else
        json_object_set_new(x, "dram_pages", json_null());
    util_json_set_real(x, "h2d_gbps", m->h2d_gbps);
    util_json_set_real(x, "ssd_gbps", m->ssd_gbps);
    util_json_set_real(x, "compute_us", m->compute_s * 1e6);
    util_json_set_u64(x, "prefetch_bytes", m->prefetch_bytes);
    util_json_set_str(x, "start", m->cold ? "cold" : "warm");
    json_object_set_new(x, "rules", json_strings(sim_rules, sim_n_rules));
    json_object_set_new(j, "model", x);
}

static void json_links(json_t *j, const char *key, const uint64_t v[SIM_LINKS])
{
    json_t *x = json_object();
    for (int l = 0; l < SIM_LINKS; l++)
        util_json_set_u64(x, sim_link_name[l], v[l]);
    json_object_set_new(j, key, x);
}

static json_t *json_result(const struct sim_result *r)
{
    json_t *j = json_object();
    util_json_set_str(j, "policy", r->policy);
    json_links(j, "bytes", r->bytes);
    json_links(j, "pages", r->pages);
    util_json_set_u64(j, "bytes_total", sim_bytes_total(r));
    util_json_set_u64(j, "bytes_fetched", sim_bytes_fetched(r));
    util_json_set_u64(j, "prefetched_pages", r->prefetched);
    util_json_set_u64(j, "prefetched_ssd_pages", r->prefetched_ssd);
    util_json_set_u64(j, "prefetched_unused", r->prefetch_unused);
    util_json_set_u64(j, "accesses", r->accesses);
    util_json_set_u64(j, "hits", r->hits);
    util_json_set_real(j, "hit_ratio", r->accesses ? (double)r->hits / (double)r->accesses : 0);
    util_json_set_u64(j, "groups", r->groups);
    util_json_set_u64(j, "steps", r->steps);
    util_json_set_real(j, "total_s", r->total_s);
    util_json_set_real(j, "stall_s", r->stall_s);
    util_json_set_real(j, "compute_s", r->compute_s);
    util_json_set_real(j, "step_s", r->step_s);
    util_json_set_real(j, "bound_s", r->bound_s);
    util_json_set_str(j, "bound_by", sim_term_name[r->bound_by]);
    json_t *terms = json_object();
    for (int i = 0; i < SIM_TERMS; i++)
        util_json_set_real(terms, sim_term_name[i], r->term_s[i]);
    json_object_set_new(j, "bound_terms_s", terms);
    util_json_set_real(j, "step_over_bound", r->bound_s > 0 ? r->step_s / r->bound_s : 0);
    return j;
}

/* Nine significant digits, as the figures always had. */
void sim_json(const struct sim_report *rp)
{
    json_t *j = json_object(), *pol = json_array();
    json_trace(j, rp);
    json_model(j, rp);
    for (int i = 0; i < rp->n; i++)
        json_array_append_new(pol, json_result(&rp->res[i]));
    json_object_set_new(j, "policies", pol);
    json_object_set_new(j, "skipped", json_strings(rp->skipped, (size_t)rp->n_skipped));
    static const char *const pairs[][3] = { { "lru_over_decode", "lru", "decode" },
                                            { "decode_over_belady", "decode", "belady" },
                                            { "lru_over_belady", "lru", "belady" } };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        double x = byte_ratio(rp, pairs[i][1], pairs[i][2]);
        if (x >= 0)
            util_json_set_real(j, pairs[i][0], x);
    }
    util_json_print_digits(stdout, j, 9);
}
