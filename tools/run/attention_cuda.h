/*
 * attention_cuda.h — `kvtier run`'s attention on a GPU, over the device
 * pages kvt_acquire returns on the CUDA back-end.
 *
 * The kernel computes exactly the float operations of the CPU kernel
 * (tools/run/attention.c), in the same order, through attn_math.h, so its
 * output is compared with the CPU reference bit for bit. One block per q
 * head: the block's threads score the page's tokens, one thread folds the
 * softmax state (the running maximum and sum, in token order), and one
 * thread per output element rescales and accumulates. Every shape of the
 * CPU kernel: any q heads per kv head (a block per q head reads its kv
 * head's rows), MLA (blockDim = the latent's width; the scores over the
 * whole row), the window, and the quantised dtypes (attn_deq, the CPU
 * kernel's dequantisation). Correctness first:
 * a page at a time, with a barrier between the steps.
 *
 * Built only where CMake finds nvcc (KVT_HAVE_CUDA_ATTN). Every call makes
 * the context's device current on the calling thread. A run is split in two
 * so that the caller can acquire the next group while the kernel computes:
 * attn_cuda_launch returns once the kernel is queued, attn_cuda_finish waits
 * for it. One run at a time per context (the query, output and pointer
 * buffers are the context's), and the pages must stay resident until
 * attn_cuda_finish returns.
 */
#ifndef KVT_ATTENTION_CUDA_H
#define KVT_ATTENTION_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "tools/run/attention.h"

struct attn_cuda;

/* Buffers for queries, outputs and up to max_pages page pointers on device
 * `ordinal`. 0, or a negative errno with a message in err (always written
 * on failure). *out is the caller's, freed with attn_cuda_free. */
int attn_cuda_new(int ordinal, const struct attn_shape *s, uint32_t max_pages,
                  struct attn_cuda **out, char *err, size_t errlen);

/* Queues the attention of q[q_heads][head_dim] (host memory, copied before
 * the call returns) over tokens [0, n_tokens) (those of the window) of the
 * pages at the device addresses pages[i] (pages[0] is the window's first
 * page, attn_first_page; npages = the pages from it the tokens cover, at
 * most max_pages; the array is copied too). 0, or -EIO (-ENOMEM for GPU memory)
 * with a message in err; -EBUSY if a run is queued and not finished. */
int attn_cuda_launch(struct attn_cuda *a, const float *q, uint32_t n_tokens, void *const *pages,
                     uint32_t npages, char *err, size_t errlen);

/* Waits for the queued run and writes its out[q_heads][v_dim] (host
 * memory). *kernel_s: the kernel's own time on the device (CUDA events
 * around it), not the wait's. 0, or -EIO with a message in err; -EINVAL if
 * no run is queued. */
int attn_cuda_finish(struct attn_cuda *a, float *out, double *kernel_s, char *err,
                     size_t errlen);

void attn_cuda_free(struct attn_cuda *a);

#ifdef __cplusplus
}
#endif

#endif
