/*
 * attention_cuda.cu — the GPU kernel of tools/run/attention_cuda.h. Built with
 * -fmad=false, and every multiply and add of the result goes through
 * attn_math.h's round-to-nearest intrinsics: no FMA, so the bits are the
 * CPU kernel's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "tools/run/attention_cuda.h"
#include "tools/run/attn_math.h"

struct attn_cuda {
    int ordinal;             /* made current on every call: the caller's thread may differ */
    struct attn_shape s;
    uint32_t max_pages;
    float scale;
    float *q, *out;          /* device: q_heads * head_dim each */
    const void **pages;      /* device: max_pages pointers */
    cudaEvent_t ev[2];       /* around the kernel: its time on the device */
    bool queued;             /* a launch not yet finished */
};

/* Where a kv head's rows lie in a page, from attention.h's layout
 * (computed on the host: its helpers are host code). */
struct attn_cuda_layout {
    uint32_t group, D, VD, pt;
    uint32_t k_row0, v_row0;  /* row index of kv head 0's first K and V row */
    uint32_t head_rows;       /* rows between one kv head's block and the next */
    uint32_t row_bytes;
    uint32_t k_head_scales, v_head_scales; /* scale floats between one kv head's and the next */
    size_t k_scales_at, v_scales_at;       /* byte offsets of kv head 0's K and V scales */
    int k_pc, v_pc;                        /* scaled per channel (MLA: V is the K rows) */
};

/* One block per q head, blockDim.x = v_dim threads (one output element
 * each). DT: attention.h's enum attn_dtype, the stored element type. The
 * pages are those from the window's first (p0); tokens before first_token
 * are not attended. */
template <int DT>
__global__ void attn_cuda_kernel(const void *const *pages, uint32_t npages, uint32_t p0,
                                 uint32_t first_token, uint32_t n_tokens, const float *q,
                                 float *out, struct attn_cuda_layout L, float scale)
{
    __shared__ float sc[ATTN_MAX_PAGE_TOKENS], p[ATTN_MAX_PAGE_TOKENS];
    __shared__ float c_all, l_all;
    const uint32_t qh = blockIdx.x, h = qh / L.group, tid = threadIdx.x, D = L.D;
    const float *qr = q + (size_t)qh * D;
    float m = -INFINITY, l = 0.0f, acc = 0.0f; /* m and l: thread 0's */
    for (uint32_t pg = 0; pg < npages; pg++) {
        const char *page = (const char *)pages[pg];
        uint32_t first = (p0 + pg) * L.pt;
        uint32_t tb = first_token > first ? first_token - first : 0;
        uint32_t nt = (n_tokens - first < L.pt ? n_tokens - first : L.pt) - tb;
        size_t kr = L.k_row0 + (size_t)h * L.head_rows, vr = L.v_row0 + (size_t)h * L.head_rows;
        const char *k = page + kr * L.row_bytes, *v = page + vr * L.row_bytes;
        const float *ks = (const float *)(page + L.k_scales_at) + (size_t)h * L.k_head_scales;
        const float *vs = (const float *)(page + L.v_scales_at) + (size_t)h * L.v_head_scales;
        for (uint32_t t = tid; t < nt; t += blockDim.x)
            sc[t] = attn_score(qr, k, ks, tb + t, D, scale, DT, L.k_pc);
        __syncthreads();
        if (tid == 0) {
            float c;
            attn_fold_stats(sc, nt, &m, &l, &c, p);
            c_all = c;
        }
        __syncthreads();
        acc = attn_fold_acc(acc, c_all, p, v, vs, tb, nt, D, tid, DT, L.v_pc);
        __syncthreads(); /* sc and p are rewritten by the next page */
    }
    if (tid == 0)
        l_all = l;
    __syncthreads();
    out[(size_t)qh * L.VD + tid] = ATTN_DIV(acc, l_all);
}

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

extern "C" int attn_cuda_new(int ordinal, const struct attn_shape *s, uint32_t max_pages,
                             struct attn_cuda **out, char *err, size_t errlen)
{
    *out = NULL;
    if (attn_shape_check(s) || !max_pages) {
        snprintf(err, errlen, "shape not supported by the kernel");
        return -EINVAL;
    }
    struct attn_cuda *a = (struct attn_cuda *)calloc(1, sizeof(*a));
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    a->ordinal = ordinal;
    a->s = *s;
    a->max_pages = max_pages;
    a->scale = attn_score_scale(s); /* as attn_decode */
    size_t qf = (size_t)s->q_heads * s->head_dim * sizeof(float);
    size_t of = (size_t)s->q_heads * attn_vdim(s) * sizeof(float);
    cudaError_t e = cudaSetDevice(ordinal);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&a->q, qf);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&a->out, of);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&a->pages, (size_t)max_pages * sizeof(void *));
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaEventCreate(&a->ev[i]);
    if (e != cudaSuccess) {
        attn_cuda_free(a);
        return cuda_fail(e, "attention buffers", err, errlen);
    }
    *out = a;
    return 0;
}

extern "C" int attn_cuda_launch(struct attn_cuda *a, const float *q, uint32_t n_tokens,
                                void *const *pages, uint32_t npages, char *err, size_t errlen)
{
    const struct attn_shape *s = &a->s;
    if (a->queued) {
        snprintf(err, errlen, "a run is queued and not finished");
        return -EBUSY;
    }
    uint32_t p0 = n_tokens ? attn_first_page(s, n_tokens) : 0;
    if (!n_tokens || npages > a->max_pages ||
        npages != (n_tokens + s->page_tokens - 1) / s->page_tokens - p0) {
        snprintf(err, errlen, "%u pages for %u tokens from page %u (at most %u)", npages,
                 n_tokens, p0, a->max_pages);
        return -EINVAL;
    }
    /* Plain cudaMemcpy from pageable memory: the host buffers may be
     * rewritten once it returns, and the kernel, on the same (legacy
     * default) stream, runs after it. */
    size_t qf = (size_t)s->q_heads * s->head_dim * sizeof(float);
    cudaError_t e = cudaSetDevice(a->ordinal);
    if (e == cudaSuccess)
        e = cudaMemcpy(a->q, q, qf, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(a->pages, pages, (size_t)npages * sizeof(void *), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaEventRecord(a->ev[0], 0);
    if (e != cudaSuccess)
        return cuda_fail(e, "attention inputs", err, errlen);
    struct attn_cuda_layout L;
    L.group = s->q_heads / s->kv_heads;
    L.D = s->head_dim;
    L.VD = attn_vdim(s);
    L.pt = s->page_tokens;
    L.k_row0 = (uint32_t)attn_row_index(s, 0, 0, 0);
    L.v_row0 = (uint32_t)attn_row_index(s, 1, 0, 0);
    L.head_rows = s->page_tokens;
    L.row_bytes = (uint32_t)attn_row_bytes(s);
    /* from the offsets of kv heads 0 and 1 (a formula: also for one kv head) */
    L.k_scales_at = attn_scale_off(s, 0, 0, 0);
    L.v_scales_at = attn_scale_off(s, 1, 0, 0);
    L.k_head_scales = (uint32_t)((attn_scale_off(s, 0, 1, 0) - L.k_scales_at) / sizeof(float));
    L.v_head_scales = (uint32_t)((attn_scale_off(s, 1, 1, 0) - L.v_scales_at) / sizeof(float));
    L.k_pc = attn_per_channel(s, 0);
    L.v_pc = attn_per_channel(s, 1);
    uint32_t ft = attn_first_token(s, n_tokens);
#define ATTN_LAUNCH(DT)                                                                          \
    attn_cuda_kernel<DT><<<s->q_heads, L.VD>>>(a->pages, npages, p0, ft, n_tokens, a->q, a->out, \
                                               L, a->scale)
    switch (s->dtype) {
    case ATTN_F32: ATTN_LAUNCH(ATTN_F32); break;
    case ATTN_BF16: ATTN_LAUNCH(ATTN_BF16); break;
    case ATTN_FP8: ATTN_LAUNCH(ATTN_FP8); break;
    case ATTN_INT8: ATTN_LAUNCH(ATTN_INT8); break;
    default: ATTN_LAUNCH(ATTN_INT4); break;
    }
#undef ATTN_LAUNCH
    if ((e = cudaGetLastError()) != cudaSuccess)
        return cuda_fail(e, "attention launch", err, errlen);
    if ((e = cudaEventRecord(a->ev[1], 0)) != cudaSuccess) {
        /* The kernel is queued: the caller releases its pages on this error,
         * so it must be over first. */
        cudaDeviceSynchronize();
        return cuda_fail(e, "attention launch", err, errlen);
    }
    a->queued = true;
    return 0;
}

extern "C" int attn_cuda_finish(struct attn_cuda *a, float *out, double *kernel_s, char *err,
                                size_t errlen)
{
    if (!a->queued) {
        snprintf(err, errlen, "no run is queued");
        return -EINVAL;
    }
    a->queued = false;
    size_t qf = (size_t)a->s.q_heads * attn_vdim(&a->s) * sizeof(float);
    float ms = 0.0f;
    cudaError_t e = cudaSetDevice(a->ordinal);
    if (e == cudaSuccess)
        e = cudaMemcpy(out, a->out, qf, cudaMemcpyDeviceToHost); /* waits for the kernel */
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, a->ev[0], a->ev[1]);
    if (e != cudaSuccess)
        return cuda_fail(e, "attention kernel", err, errlen);
    *kernel_s = (double)ms * 1e-3;
    return 0;
}

extern "C" void attn_cuda_free(struct attn_cuda *a)
{
    if (!a)
        return;
    cudaSetDevice(a->ordinal);
    if (a->queued)
        cudaDeviceSynchronize(); /* the kernel still reads the buffers freed below */
    for (int i = 0; i < 2; i++)
        if (a->ev[i])
            cudaEventDestroy(a->ev[i]);
    cudaFree(a->q);
    cudaFree(a->out);
    cudaFree((void *)a->pages);
    free(a);
}
