/*
 * uring.h — what io/io_uring.c shares with the raw io_uring baseline
 * (lab/raw_bench.c), which measures the disk with the same rings and
 * buffer registration the engine uses. Internal; includes liburing.
 */
#ifndef KVT_URING_H
#define KVT_URING_H

#include <stddef.h>

#include <liburing.h>

#define URING_CHUNK ((size_t)1 << 30) /* the kernel's limit per registered buffer */
#define URING_BATCH 64                /* CQEs taken per peek */

/* A ring of at least depth entries (8 at least). COOP_TASKRUN saves an
 * interrupt per completion: completions are run when the reaper next enters
 * the kernel, which it does anyway to wait. Kernels before 5.19 refuse the
 * flags, and run without them. 0 or -errno. */
int kvt_uring_init_ring(struct io_uring *ring, unsigned depth);

/* Registers [base, base+len) as buffers of at most piece bytes; the buffer
 * index of an address is then its offset / piece. 0 or -errno. */
int kvt_uring_register_region(struct io_uring *ring, void *base, size_t len, size_t piece);

#endif /* KVT_URING_H */
