/*
 * gpu.c — `kvtier run`'s attention on the GPU, over the device pages the
 * CUDA back-end's kvt_acquire returns, where the kernel was built
 * (attention_cuda.cu: where CMake finds nvcc, outside the sanitizer builds,
 * which define KVT_HAVE_CUDA_ATTN). The one file of the command with a
 * CUDA #if: elsewhere the attention opens with an error that says why.
 */
#include <string.h>

#include "tools/cli.h"
#include "tools/run/run_priv.h"
#if KVT_HAVE_CUDA_ATTN
#include "tools/run/attention_cuda.h"
#endif

static int gpu_none(struct run_ctx *x)
{
    cli_error("run", 1,
              "device %s: this build has no GPU attention kernel for it "
              "(tools/run/attention_cuda.cu is built where CMake finds nvcc, outside the "
              "sanitizer builds)",
              kvt_device_name(x->e));
    return KVT_ENOTSUP;
}

#if KVT_HAVE_CUDA_ATTN

int run_gpu_open(struct run_ctx *x)
{
    if (strcmp(kvt_device_name(x->e), "cuda"))
        return gpu_none(x);
    char err[256];
    int ordinal = x->o->device >= 0 ? x->o->device : 0; /* AUTO opens device 0 */
    int rc = attn_cuda_new(ordinal, &x->sh, x->pages_max, &x->gpu, err, sizeof err);
    if (rc)
        cli_error("run", 1, "device %d: %s", ordinal, err);
    return rc;
}

/* One kernel over the whole group, whose pages are all acquired. */
int run_gpu_launch(struct run_ctx *x, struct group *g, double *t0)
{
    char err[256];
    *t0 = util_now();
    int rc = attn_cuda_launch(x->gpu, x->feed.q, g->n, g->ptrs, g->np, err, sizeof err);
    if (rc) {
        cli_error("run", 1, "attention on the GPU: %s", err);
        x->said = true;
    }
    return rc;
}

/* The compute is the kernel's time on the device: the host's wait for it
 * overlaps the next group's acquire, and counting that wait would count the
 * acquire twice. The trace's span starts at the launch and lasts the
 * kernel's time (the kernel starts as soon as it is queued: its inputs are
 * copied before the launch returns). */
int run_gpu_finish(struct run_ctx *x, struct run_result *r, struct group *g, double t0)
{
    char err[256];
    double ks = 0.0;
    int rc = attn_cuda_finish(x->gpu, x->feed.out, &ks, err, sizeof err);
    if (rc) {
        cli_error("run", 1, "attention on the GPU: %s", err);
        x->said = true;
    }
    r->compute_s += ks;
    if (x->o->trace_path)
        trace_span(&x->trace, "attention", "compute", TRACE_ATTN_TID, t0, t0 + ks, g->step,
                   g->s, g->l);
    int rr = run_release_chunk(x, g, 0, g->np);
    return rc ? rc : rr;
}

void run_gpu_free(struct run_ctx *x)
{
    attn_cuda_free(x->gpu);
    x->gpu = NULL;
}

#else /* !KVT_HAVE_CUDA_ATTN */

int run_gpu_open(struct run_ctx *x)
{
    return gpu_none(x);
}

int run_gpu_launch(struct run_ctx *x, struct group *g, double *t0)
{
    (void)g, (void)t0;
    return gpu_none(x); /* never reached: no kernel was opened */
}

int run_gpu_finish(struct run_ctx *x, struct run_result *r, struct group *g, double t0)
{
    (void)r, (void)g, (void)t0;
    return gpu_none(x);
}

void run_gpu_free(struct run_ctx *x)
{
    (void)x;
}

#endif
