/*
 * attention_cuda.h — `kvtier run`'s attention on a GPU, over the device
 * pages kvt_acquire returns on the CUDA back-end.
 *
 * The kernel computes exactly the float operations of the CPU kernel
 * (tools/run/attention.c), in the same order, through attn_math.h, so its
 * output is compared with the CPU reference bit for bit. One block per q
 * head: the block's threads score the page's tokens, one thread folds the
 * softmax state (the running maximum and sum, in token order), and one
 * thread per output element rescales and accumulates. Correctness first:
 * a page at a time, with a barrier between the steps.
 *
 * Built only where CMake finds nvcc (KVT_HAVE_CUDA_ATTN). Every call makes
 * the context's device current on the calling thread and is synchronous.
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

/* out[q_heads][head_dim] = attention of q[q_heads][head_dim] (host memory)
 * over tokens [0, n_tokens) of the pages at the device addresses pages[i]
 * (npages = the pages those tokens cover, at most max_pages). Waits for the
 * result. 0, or -EIO (-ENOMEM for GPU memory) with a message in err. */
int attn_cuda_run(struct attn_cuda *a, const float *q, uint32_t n_tokens, void *const *pages,
                  uint32_t npages, float *out, char *err, size_t errlen);

void attn_cuda_free(struct attn_cuda *a);

#ifdef __cplusplus
}
#endif

#endif
