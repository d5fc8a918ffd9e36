/*
 * codec_err.c — `kvtier run --codec fp8|int8|int4`: a lossy codec's pages
 * come back from SSD close to what was written, not equal, so the outputs
 * are kept (not hashed) and the reference pass measures how far each step's
 * are from the exact ones: the largest absolute difference, and the RMS
 * relative error (the root of the summed squared differences over the
 * summed squared reference outputs, over every layer, sequence and q head
 * of the step). A step past its codec's tolerance fails the run.
 *
 * The tolerances (docs/codecs.md#tolerance) sit about 1.5 to 2 times
 * above the worst step the codecs measure on this generator's KV, K with
 * outlier channels (kvgen.c), and well below what a broken page gives (a
 * page of another key, of zeros, or of undecoded codes lands near 1).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/run/run_priv.h"

/* max_rel bounds the step's largest absolute difference as a fraction of
 * its largest reference output (which shrinks as the context grows: the
 * attention averages more values); rms_rel the RMS relative error. */
struct tolerance {
    double max_rel, rms_rel;
};

/* By codec, KVT_CODEC_FP8 .. KVT_CODEC_INT4. */
static const struct tolerance tol[3] = {
    { 0.25, 0.15 },  /* fp8: 3 mantissa bits, so 2^-4 of an outlier key, in every score */
    { 0.03, 0.02 },  /* int8 */
    { 0.40, 0.25 },  /* int4 */
};

bool run_lossy(const struct run_opts *o)
{
    return o->codec >= KVT_CODEC_FP8 && o->codec <= KVT_CODEC_INT4;
}

static size_t out_elems(const struct run_ctx *x)
{
    return (size_t)x->sh.q_heads * attn_vdim(&x->sh);
}

int run_err_init(struct run_ctx *x, struct run_result *r)
{
    const struct run_opts *o = x->o;
    r->lossy = run_lossy(o);
    if (!r->lossy)
        return 0;
    r->tol_max_abs = tol[o->codec - KVT_CODEC_FP8].max_rel;
    r->tol_rms_rel = tol[o->codec - KVT_CODEC_FP8].rms_rel;
    size_t n = (size_t)o->tokens * x->layers * o->batch * out_elems(x);
    x->outs = malloc(n * sizeof(float));
    if (!x->outs) {
        cli_error("run", 1, "no memory for the outputs a lossy codec's check keeps (%zu MiB): "
                  "fewer --tokens, --layers or --batch", n * sizeof(float) >> 20);
        x->said = true;
        return -ENOMEM;
    }
    return 0;
}

static float *out_slot(const struct run_ctx *x, uint32_t step, uint32_t l, uint32_t s)
{
    return x->outs + (((size_t)step * x->layers + l) * x->o->batch + s) * out_elems(x);
}

void run_err_keep(struct run_ctx *x, const struct group *g)
{
    if (x->outs)
        memcpy(out_slot(x, g->step, g->l, g->s), x->feed.out, out_elems(x) * sizeof(float));
}

int run_err_check(struct run_ctx *x, struct run_result *r, uint32_t step, uint32_t l, uint32_t s)
{
    (void)r;
    (void)step;
    const float *got = out_slot(x, step, l, s), *ref = x->feed.out;
    for (size_t i = 0; i < out_elems(x); i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (d > x->err_max || d != d) { /* a NaN wins: it fails the step */
            x->err_max = d;
            x->err_at[0] = l;
            x->err_at[1] = s;
            x->err_at[2] = (uint32_t)(i / attn_vdim(&x->sh));
        }
        x->err_sq += d * d;
        x->ref_sq += (double)ref[i] * ref[i];
        if (fabs((double)ref[i]) > x->ref_max)
            x->ref_max = fabs((double)ref[i]);
    }
    return 0;
}

/* The step's figures into r; a step past the tolerance clears r->verified
 * (the first such says where its largest error was). */
void run_err_step_done(struct run_ctx *x, struct run_result *r, uint32_t step)
{
    double rms = x->ref_sq > 0 ? sqrt(x->err_sq / x->ref_sq) : sqrt(x->err_sq);
    double rel = x->ref_max > 0 ? x->err_max / x->ref_max : x->err_max;
    if (r->err_steps < RUN_ERR_STEPS)
        r->err_step[r->err_steps] = (struct run_err_step){ step, x->err_max, rel, rms };
    if (rel > r->err_max_rel || rel != rel)
        r->err_max_rel = rel;
    r->err_steps++;
    if (x->err_max > r->err_max_abs || x->err_max != x->err_max)
        r->err_max_abs = x->err_max;
    r->err_sq += x->err_sq;
    r->ref_sq += x->ref_sq;
    r->err_rms_rel = r->ref_sq > 0 ? sqrt(r->err_sq / r->ref_sq) : sqrt(r->err_sq);
    if (!(rel <= r->tol_max_abs && rms <= r->tol_rms_rel) && r->verified) {
        r->verified = false;
        r->bad_step = step;
        r->bad_layer = x->err_at[0];
        r->bad_seq = x->err_at[1];
        r->bad_head = x->err_at[2];
    }
    x->err_max = x->err_sq = x->ref_sq = x->ref_max = 0;
}

void run_err_free(struct run_ctx *x)
{
    free(x->outs);
    x->outs = NULL;
}

void run_err_report(FILE *f, const struct run_opts *o, const struct run_result *r)
{
    fprintf(f, "  verified: %s against the reference within %s's tolerance (max abs %.3g of the "
               "largest output, RMS relative %.3g): max abs %.3g (%.3g of the largest output), "
               "RMS relative %.3g over %u step%s\n",
            r->verified ? "yes, every step checked" : "NO, a step is not", run_codec_name[o->codec],
            r->tol_max_abs, r->tol_rms_rel, r->err_max_abs, r->err_max_rel, r->err_rms_rel,
            r->err_steps, r->err_steps == 1 ? "" : "s");
    if (!r->verified)
        fprintf(f, "  first step past the tolerance: %u\n", r->bad_step);
    uint32_t n = r->err_steps < RUN_ERR_STEPS ? r->err_steps : RUN_ERR_STEPS;
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, "    step %4u: max abs %.3e (%.3f of the largest output)  RMS relative %.3e\n",
                r->err_step[i].step, r->err_step[i].max_abs, r->err_step[i].max_rel,
                r->err_step[i].rms_rel);
    if (n < r->err_steps)
        fprintf(f, "    (%u more steps in the overall figures)\n", r->err_steps - n);
}

void run_err_json(const struct run_result *r)
{
    printf(", \"error\": {\"max_abs\": %.6e, \"max_abs_rel\": %.6e, \"rms_rel\": %.6e, "
           "\"tol_max_abs_rel\": %.6e, \"tol_rms_rel\": %.6e, \"steps\": [",
           r->err_max_abs, r->err_max_rel, r->err_rms_rel, r->tol_max_abs, r->tol_rms_rel);
    uint32_t n = r->err_steps < RUN_ERR_STEPS ? r->err_steps : RUN_ERR_STEPS;
    for (uint32_t i = 0; i < n; i++)
        printf("%s{\"step\": %u, \"max_abs\": %.6e, \"max_abs_rel\": %.6e, \"rms_rel\": %.6e}",
               i ? ", " : "", r->err_step[i].step, r->err_step[i].max_abs, r->err_step[i].max_rel,
               r->err_step[i].rms_rel);
    printf("]}");
}
