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
int run_gpu_group(struct run_ctx *x, struct run_result *r, struct group *g)
{
    char err[256];
    double t0 = cli_now();
    int rc = attn_cuda_run(x->gpu, x->feed.q, g->n, g->ptrs, g->np, x->feed.out, err,
                           sizeof err);
    double t1 = cli_now();
    if (rc) {
        cli_error("run", 1, "attention on the GPU: %s", err);
        x->said = true;
    }
    r->compute_s += t1 - t0;
    if (x->o->trace_path)
        trace_span(&x->trace, "attention", "compute", TRACE_ATTN_TID, t0, t1, g->step, g->s,
                   g->l);
    return rc ? rc : run_release_chunk(x, g, 0, g->np);
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

int run_gpu_group(struct run_ctx *x, struct run_result *r, struct group *g)
{
    (void)r, (void)g;
    return gpu_none(x); /* never reached: no kernel was opened */
}

void run_gpu_free(struct run_ctx *x)
{
    (void)x;
}

#endif
