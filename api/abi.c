/*
 * abi.c — the public calls whose structs grow: a caller's size in, the
 * engine's full-size structs behind.
 *
 * The rules are the header's ("growable structs" in include/kvtier.h). This
 * is the only file that sees the size a caller's kvt_config or kvt_stats was
 * compiled with: a config is read into a full-size one over the defaults, a
 * snapshot is copied out of a full-size one, and the engine (engine.c, via
 * api/abi.h) never sees a short struct. It also defines the plain symbols
 * (kvt_config_init, kvt_open, kvt_get_stats), which take the VER0 size
 * because they are given none.
 */
#define KVT_VER0_SYMBOLS /* declares the plain symbols this file defines */

#include <errno.h>
#include <string.h>

#include "api/abi.h"
#include "api/api.h"

/* Every layout ever published, oldest first; the last is this library's.
 * A field appended to a struct must come with its KVT_*_SIZE_VER<n+1> here:
 * a caller compiled with the previous layout passes that size, and it is
 * refused unless listed. */
static const size_t config_sizes[] = {KVT_CONFIG_SIZE_VER0, KVT_CONFIG_SIZE_VER1,
                                      KVT_CONFIG_SIZE_VER2, KVT_CONFIG_SIZE_VER3,
                                      KVT_CONFIG_SIZE_VER4};
static const size_t stats_sizes[] = {KVT_STATS_SIZE_VER0, KVT_STATS_SIZE_VER1, KVT_STATS_SIZE_VER2,
                                     KVT_STATS_SIZE_VER3};

/* The size of this build's structs is their last published layout: a field
 * added without a new KVT_*_SIZE_VER, or one that reuses padding, stops the
 * build here rather than mis-sizing callers. */
_Static_assert(sizeof(kvt_config) == KVT_CONFIG_SIZE_VER4,
               "kvt_config grew: publish KVT_CONFIG_SIZE_VER5 and list it in config_sizes");
_Static_assert(sizeof(kvt_stats) == KVT_STATS_SIZE_VER3,
               "kvt_stats grew: publish KVT_STATS_SIZE_VER4 and list it in stats_sizes");
/* VER0 is frozen: the first published kvt_stats, eighteen 64-bit counters. */
_Static_assert(KVT_STATS_SIZE_VER0 == 18 * sizeof(uint64_t), "kvt_stats' VER0 part changed");

/* 0 when a caller's struct of size bytes is one this library can serve: a
 * published layout, or a newer one (larger than ours, up to
 * KVT_STRUCT_SIZE_MAX) whose extra bytes the caller of this checks or zeroes.
 * A size between two layouts is no struct's size, so it is refused rather
 * than cut through a field. */
static int abi_size_check(const char *type, size_t size, const size_t *sizes, size_t n)
{
    size_t own = sizes[n - 1];
    if (size >= own && size <= KVT_STRUCT_SIZE_MAX)
        return 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (size == sizes[i])
            return 0;
    return kvt_fail(-EINVAL, "%s of %zu bytes is no layout kvtier %s knows (%zu, ..., or %zu to %d "
                    "bytes)", type, size, KVT_VERSION_STRING, sizes[0], own, KVT_STRUCT_SIZE_MAX);
}

static int config_size_check(size_t size)
{
    return abi_size_check("kvt_config", size, config_sizes,
                          sizeof(config_sizes) / sizeof(config_sizes[0]));
}

static int stats_size_check(size_t size)
{
    return abi_size_check("kvt_stats", size, stats_sizes,
                          sizeof(stats_sizes) / sizeof(stats_sizes[0]));
}

/* Copies n = min(dst_size, src_size) bytes and zeroes dst beyond them: a
 * field the library does not know reads as 0 in a newer caller's struct. */
static void abi_copy_out(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    size_t n = dst_size < src_size ? dst_size : src_size;
    memcpy(dst, src, n);
    memset((unsigned char *)dst + n, 0, dst_size - n);
}

/* Reads a caller's config of size bytes into *c over the defaults. A newer
 * caller's bytes beyond ours must be 0 (each later field's default): a set
 * one asks for something this library cannot do, and ignoring it would run
 * an engine other than the one asked for. */
static int abi_config_in(kvt_config *c, const kvt_config *cfg, size_t size)
{
    int r;
    if (!cfg)
        return kvt_fail(-EINVAL, "config is NULL");
    if ((r = config_size_check(size)) < 0)
        return r;
    kvt_config_defaults(c);
    memcpy(c, cfg, size < sizeof(*c) ? size : sizeof(*c));
    const unsigned char *bytes = (const unsigned char *)cfg;
    for (size_t i = sizeof(*c); i < size; i++)
        if (bytes[i])
            return kvt_fail(KVT_ECONFIG, "kvt_config byte %zu is set, but kvtier %s knows only its "
                            "first %zu bytes: a newer field is set (use a newer libkvtier)", i,
                            KVT_VERSION_STRING, sizeof(*c));
    return 0;
}

KVT_API int kvt_config_init_sized(kvt_config *cfg, size_t cfg_size)
{
    int r;
    if (!cfg)
        return kvt_fail(-EINVAL, "config is NULL");
    if ((r = config_size_check(cfg_size)) < 0)
        return r;
    kvt_config c;
    kvt_config_defaults(&c);
    abi_copy_out(cfg, cfg_size, &c, sizeof(c));
    return 0;
}

KVT_API int kvt_config_check_sized(const kvt_config *cfg, size_t cfg_size)
{
    kvt_config c;
    int r = abi_config_in(&c, cfg, cfg_size);
    return r < 0 ? r : kvt_config_validate(&c);
}

KVT_API int kvt_open_sized(const kvt_config *cfg, size_t cfg_size, kvt_engine **out)
{
    kvt_config c;
    if (out)
        *out = NULL;
    int r = abi_config_in(&c, cfg, cfg_size);
    return r < 0 ? r : kvt_open_ex(&c, NULL, out);
}

KVT_API int kvt_get_stats_sized(kvt_engine *e, kvt_stats *out, size_t out_size)
{
    int r;
    if (!e || !out)
        return kvt_fail(-EINVAL, "engine or out is NULL");
    if ((r = stats_size_check(out_size)) < 0)
        return r;
    kvt_stats s;
    if ((r = kvt_engine_stats(e, &s)) < 0)
        return r;
    abi_copy_out(out, out_size, &s, sizeof(s));
    return 0;
}

/* The plain symbols: no size comes with the struct, so they take the one
 * layout every caller has at least. */

KVT_API void kvt_config_init(kvt_config *cfg)
{
    (void)kvt_config_init_sized(cfg, KVT_CONFIG_SIZE_VER0);
}

KVT_API int kvt_open(const kvt_config *cfg, kvt_engine **out)
{
    return kvt_open_sized(cfg, KVT_CONFIG_SIZE_VER0, out);
}

KVT_API int kvt_get_stats(kvt_engine *e, kvt_stats *out)
{
    return kvt_get_stats_sized(e, out, KVT_STATS_SIZE_VER0);
}
