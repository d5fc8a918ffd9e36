/*
 * command.c — `kvtier sim`: the trace loaded or generated, checked once, each
 * policy run over it, the report.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "tools/cli.h"
#include "tools/sim/command.h"
#include "tools/sim/prefix.h"

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
    if (sim_prefix_wanted(argc, argv))
        return sim_prefix_main(argc, argv);
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
        for (size_t i = 0; i < sizeof(sim_default_policies) / sizeof(sim_default_policies[0]); i++)
            if (!kvt_lab_policy_find(sim_default_policies[i]))
                rp->skipped[rp->n_skipped++] = sim_default_policies[i];
    for (int i = 0; i < o.n_pol; i++) {
        int e = sim_run(w, kvt_lab_policy_find(o.pol_names[i]), &rp->m, &rp->res[rp->n], err, sizeof err);
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

