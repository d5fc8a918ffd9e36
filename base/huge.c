/*
 * huge.c — anonymous memory laid out for transparent huge pages (base.h).
 *
 * The disk moves pages in and out of this memory by DMA, and how many
 * scatter segments a request has is how many physically separate pieces its
 * buffer is in. The block layer merges adjacent requests only while the sum
 * stays within the queue's max_segments (254 on a virtio disk). In 4 KiB
 * pages a 256 KiB page is 64 segments, so no more than three pages merge;
 * in 2 MiB pages it is one, and sixteen merge into the 4 MiB the queue
 * allows.
 *
 * madvise(MADV_HUGEPAGE) alone does not get there. The kernel aligns an
 * anonymous mapping to 2 MiB only when its length is a multiple of 2 MiB
 * (and an arena with a spare slot seldom is), so the mapping starts in
 * small pages. io_uring then cannot describe a registered buffer of mixed
 * page sizes by its huge pages and falls back to one 4 KiB vector per page,
 * for the whole buffer (docs/performance.md#huge-page-alignment-6-december).
 * So the mapping is over-allocated by 2 MiB, its start moved to the
 * boundary, and its length rounded up to whole huge pages, with the ends
 * trimmed off.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "base/base.h"

#define HUGE_BYTES ((size_t)2 << 20)

static size_t huge_span(size_t bytes)
{
    return (bytes + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1);
}

int kvt_huge_map(size_t bytes, void **out)
{
    if (!bytes || bytes > SIZE_MAX - 2 * HUGE_BYTES)
        return -ENOMEM;
    size_t span = huge_span(bytes), len = span + HUGE_BYTES;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -errno;
    uint8_t *at = (uint8_t *)(((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
    size_t head = (size_t)(at - m), tail = len - head - span;
    /* Trimming splits one mapping in three and cannot fail for want of
     * memory here; if it did, the ends would only stay mapped. */
    if (head)
        (void)munmap(m, head);
    if (tail)
        (void)munmap(at + span, tail);
    (void)madvise(at, span, MADV_HUGEPAGE); /* where THP is "never": harmless */
    *out = at;
    return 0;
}

void kvt_huge_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, huge_span(bytes));
}
