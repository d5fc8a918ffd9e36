/*
 * sched_hint.c — asking the scheduler to run the I/O threads promptly.
 *
 * The threads that feed the disk (the io_uring reaper, the psync workers,
 * the engine's mover) sleep most of the time and run for microseconds when
 * a completion arrives. Beside CPU-bound threads — an engine's own compute,
 * or kvtier run's attention on the same cores — the fair scheduler may let
 * a woken one wait for the running thread's slice (milliseconds): long
 * enough for 32 queued reads to finish and the disk to sit idle with
 * requests queued behind a waiting thread
 * (docs/performance.md#io-thread-scheduling).
 *
 * Linux 6.12+ lets a SCHED_OTHER thread ask for a short slice
 * (sched_attr.sched_runtime), which EEVDF turns into an early deadline: the
 * thread preempts on wake-up instead of queueing. No privilege is needed,
 * and the thread's share of the CPU does not change. Older kernels ignore
 * the field or refuse it; either way nothing else changes.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "io/io.h"
#include "io/sched_attr.h"

#define SHORT_SLICE_NS 100000 /* the kernel's smallest custom slice (0.1 ms) */

int kvt_io_short_slice(void)
{
#ifdef SYS_sched_setattr
    struct kvt_sched_attr a;
    memset(&a, 0, sizeof(a));
    a.size = sizeof(a);
    /* The thread's nice value stays (on Linux it is per thread); the
     * KEEP_PARAMS flag would also keep the old slice. */
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    if (nice == -1 && errno)
        return -errno;
    a.sched_policy = 0; /* SCHED_OTHER */
    a.sched_nice = nice;
    a.sched_runtime = SHORT_SLICE_NS;
    if (syscall(SYS_sched_setattr, 0, &a, 0) == 0)
        return 0;
    return -errno;
#else
    return -ENOSYS;
#endif
}
