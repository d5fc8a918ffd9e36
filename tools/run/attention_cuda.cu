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

/* One block per q head, blockDim.x = head_dim threads. T: float (fp32 KV)
 * or uint16_t (bf16 KV). */
template <typename T>
__global__ void attn_cuda_kernel(const void *const *pages, uint32_t npages, uint32_t n_tokens,
                                 const float *q, float *out, uint32_t group, uint32_t kv_heads,
                                 uint32_t head_dim, uint32_t page_tokens, float scale)
{
    __shared__ float sc[ATTN_MAX_PAGE_TOKENS], p[ATTN_MAX_PAGE_TOKENS];
    __shared__ float c_all, l_all;
    const uint32_t qh = blockIdx.x, h = qh / group, tid = threadIdx.x, D = head_dim;
    const float *qr = q + (size_t)qh * D;
    float m = -INFINITY, l = 0.0f, acc = 0.0f; /* m and l: thread 0's */
    for (uint32_t pg = 0; pg < npages; pg++) {
        const T *page = (const T *)pages[pg];
        uint32_t nt = n_tokens - pg * page_tokens < page_tokens ? n_tokens - pg * page_tokens
                                                                : page_tokens;
        const T *k = page + (size_t)h * page_tokens * D;
        const T *v = page + ((size_t)kv_heads + h) * page_tokens * D;
        for (uint32_t t = tid; t < nt; t += blockDim.x)
            sc[t] = attn_score(qr, k + (size_t)t * D, D, scale, sizeof(T) == 2);
        __syncthreads();
        if (tid == 0) {
            float c;
            attn_fold_stats(sc, nt, &m, &l, &c, p);
            c_all = c;
        }
        __syncthreads();
        acc = attn_fold_acc(acc, c_all, p, v + tid, nt, D, sizeof(T) == 2);
        __syncthreads(); /* sc and p are rewritten by the next page */
    }
    if (tid == 0)
        l_all = l;
    __syncthreads();
    out[(size_t)qh * D + tid] = ATTN_DIV(acc, l_all);
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
    a->scale = (float)(1.0 / sqrt((double)s->head_dim)); /* as attn_decode */
    size_t qf = (size_t)s->q_heads * s->head_dim * sizeof(float);
    cudaError_t e = cudaSetDevice(ordinal);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&a->q, qf);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&a->out, qf);
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
    if (!n_tokens || npages > a->max_pages ||
        npages != (n_tokens + s->page_tokens - 1) / s->page_tokens) {
        snprintf(err, errlen, "%u pages for %u tokens (at most %u)", npages, n_tokens,
                 a->max_pages);
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
    if (s->bf16)
        attn_cuda_kernel<uint16_t><<<s->q_heads, s->head_dim>>>(
            a->pages, npages, n_tokens, a->q, a->out, s->q_heads / s->kv_heads, s->kv_heads,
            s->head_dim, s->page_tokens, a->scale);
    else
        attn_cuda_kernel<float><<<s->q_heads, s->head_dim>>>(
            a->pages, npages, n_tokens, a->q, a->out, s->q_heads / s->kv_heads, s->kv_heads,
            s->head_dim, s->page_tokens, a->scale);
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
    size_t qf = (size_t)a->s.q_heads * a->s.head_dim * sizeof(float);
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
