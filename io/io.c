/*
 * io.c — choosing the storage I/O back-end.
 *
 * AUTO prefers io_uring and falls back to the pread/pwrite pool where a ring
 * cannot be set up. That is common, not exotic: Docker's default seccomp
 * profile, gVisor and many Kubernetes runtimes refuse io_uring_setup with
 * -EPERM or -ENOSYS, and Linux 6.6+ can switch it off with
 * kernel.io_uring_disabled. -EINVAL (a kernel too old for the flags or the
 * depth) and -ENOMEM (locked-memory limits on the rings) are treated the same
 * way: the pool is slower on deep queues, but it works.
 *
 * The fallback is said once per process on stderr, because an engine opened
 * many times (tests, a server with many models) would otherwise repeat it,
 * and every time into the caller's note, which the engine shows in stats.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "io/io.h"

static atomic_flag fallback_said = ATOMIC_FLAG_INIT;

static void io_note(char *note, size_t note_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void io_note(char *note, size_t note_len, const char *fmt, ...)
{
    if (!note || !note_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, note_len, fmt, ap);
    va_end(ap);
}

static int io_open_with(const struct kvt_io_ops *o, const struct kvt_io_params *p,
                        const struct kvt_io_ops **ops, void **priv)
{
    int rc = o->open(p, priv);
    if (rc == 0)
        *ops = o;
    return rc;
}

/* Whether a failed ring setup means "io_uring cannot run here" rather than a
 * real error that the pool would meet too. */
static bool io_uring_unavailable(int rc)
{
    return rc == -EPERM || rc == -ENOSYS || rc == -EINVAL || rc == -ENOMEM ||
           rc == KVT_ENOTSUP;
}

/* io_uring, when this build has it: KVT_ENOTSUP otherwise. */
static int io_open_uring(const struct kvt_io_params *p, const struct kvt_io_ops **ops,
                         void **priv)
{
#if KVT_HAVE_URING
    return io_open_with(&kvt_io_uring_ops, p, ops, priv);
#else
    (void)p;
    (void)ops;
    (void)priv;
    return KVT_ENOTSUP;
#endif
}

static const char *io_uring_why(int rc)
{
    return rc == KVT_ENOTSUP ? "not built: liburing was missing at build time"
                             : kvt_strerror(rc);
}

static int io_open_auto(const struct kvt_io_params *p, const struct kvt_io_ops **ops,
                        void **priv, char *note, size_t note_len)
{
    int rc = io_open_uring(p, ops, priv);
    if (rc == 0 || !io_uring_unavailable(rc))
        return rc;
    char why[160];
    snprintf(why, sizeof(why), "io_uring unavailable (%s): using the pread/pwrite pool",
             io_uring_why(rc));
    io_note(note, note_len, "%s", why);
    if (!atomic_flag_test_and_set(&fallback_said))
        fprintf(stderr, "kvtier: %s\n", why);
    return io_open_with(&kvt_io_psync_ops, p, ops, priv);
}

int kvt_io_open(int which, const struct kvt_io_params *p, const struct kvt_io_ops **ops,
                void **priv, char *note, size_t note_len)
{
    io_note(note, note_len, "%s", "");
    if (!p || !ops || !priv || !p->depth)
        return -EINVAL;
    int rc;
    switch (which) {
    case KVT_IO_AUTO:
        return io_open_auto(p, ops, priv, note, note_len);
    case KVT_IO_URING:
        rc = io_open_uring(p, ops, priv);
        if (rc)
            io_note(note, note_len, "io_uring unavailable (%s)", io_uring_why(rc));
        return rc;
    case KVT_IO_PSYNC:
        return io_open_with(&kvt_io_psync_ops, p, ops, priv);
    default:
        io_note(note, note_len, "unknown I/O back-end %d", which);
        return -EINVAL;
    }
}

/* Moves every byte of r. pread/pwrite may stop short (a signal, a page-cache
 * boundary on a buffered fd) and are continued from where they stopped. A
 * read that returns 0 has met the end of the file: the request cannot be
 * whole, so it fails with -EIO rather than leaving stale bytes in the buffer.
 * With O_DIRECT the file may end mid-block: the short read is unaligned and
 * the continuation is refused with -EINVAL, which is the same end of file. */
int kvt_io_transfer(const struct kvt_io_req *r)
{
    size_t moved = 0;
    while (moved < r->len) {
        char *p = (char *)r->buf + moved;
        off_t off = (off_t)(r->off + moved);
        ssize_t k = r->write ? pwrite(r->fd, p, r->len - moved, off)
                             : pread(r->fd, p, r->len - moved, off);
        if (k < 0) {
            int e = errno;
            if (e == EINTR || e == EAGAIN)
                continue;
            if (e == EINVAL && !r->write && moved % 4096)
                return -EIO;
            return -e;
        }
        if (k == 0)
            return -EIO; /* end of file, or a device that accepts nothing */
        moved += (size_t)k;
    }
    return 0;
}

int kvt_io_reqv_grow(struct kvt_io_req ***v, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    struct kvt_io_req **d = realloc(*v, c * sizeof(*d));
    if (!d)
        return -ENOMEM;
    *v = d;
    *cap = c;
    return 0;
}

int kvt_io_sync(const struct kvt_syncer *s, int fd)
{
    if (s->ops)
        return s->ops->sync(s->arg, fd);
    return fdatasync(fd) == 0 ? 0 : -errno;
}
