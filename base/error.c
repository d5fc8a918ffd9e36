/*
 * error.c — kvt_strerror(), kvt_last_error(), kvt_fail() and metadata accounting.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"


/* The detailed message of the last failure, per thread, so concurrent callers
 * never see each other's text. */
static _Thread_local char last_error[512];

KVT_API const char *kvt_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case KVT_ECORRUPT: return "stored page failed its checksum (treated as missing)";
    case KVT_EFINGERPRINT: return "stored page belongs to another model fingerprint";
    case KVT_ENOTFOUND: return "no page with this key in any tier";
    case KVT_EFULL: return "no tier can hold the page";
    case KVT_EDEVICE: return "device error: the GPU or its driver failed or cannot be used";
    case KVT_ECONFIG: return "invalid configuration (see kvt_last_error for the field)";
    case KVT_ENOTSUP: return "not supported by this build of kvtier or this back-end";
    case KVT_EFAILED: return "engine is in the failed state after an earlier error";
    default: break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err); /* glibc's table is static and thread-safe for known codes */
    return "unknown kvtier error";
}

KVT_API const char *kvt_last_error(void)
{
    return last_error;
}

int kvt_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return err;
}

void kvt_clear_error(void)
{
    last_error[0] = '\0';
}

/* Metadata is counted where it is allocated so that kvt_stats.meta_bytes is
 * exact, not estimated: the bytes-per-page figure comes from it
 * (docs/performance.md#metadata-per-page). */
void *kvt_meta_alloc(uint64_t *counter, size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (p)
        *counter += bytes;
    return p;
}

void *kvt_meta_realloc(uint64_t *counter, void *p, size_t old_bytes, size_t new_bytes)
{
    void *q = realloc(p, new_bytes ? new_bytes : 1);
    if (!q)
        return NULL;
    if (new_bytes > old_bytes)
        memset((char *)q + old_bytes, 0, new_bytes - old_bytes);
    *counter += new_bytes;
    *counter -= old_bytes;
    return q;
}

void kvt_meta_free(uint64_t *counter, void *p, size_t bytes)
{
    if (!p)
        return;
    free(p);
    *counter -= bytes;
}
