/*
 * rcluster_none.c — the Redis Cluster client in a build without hiredis
 * (KVT_WITH_REDIS=OFF, or libhiredis-dev missing under AUTO): opening
 * answers KVT_ENOTSUP, so the remote tier reports itself absent; the key
 * slot (rcluster_parse.c) still works.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "include/kvtier.h"
#include "io/rcluster.h"

int kvt_rcluster_open(const struct kvt_rcluster_opts *o, struct kvt_rcluster **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (err && errlen)
        snprintf(err, errlen, "redis: this kvtier was built without hiredis (KVT_WITH_REDIS)");
    return KVT_ENOTSUP;
}

void kvt_rcluster_close(struct kvt_rcluster *c)
{
}

static int none(struct kvt_rc_item *it, size_t n)
{
    return n && !it ? -EINVAL : KVT_ENOTSUP;
}

int kvt_rcluster_get(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n)
{
    return none(it, n);
}

int kvt_rcluster_set(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n, unsigned ttl_s, int nx)
{
    return none(it, n);
}

int kvt_rcluster_exists(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n)
{
    return none(it, n);
}

int kvt_rcluster_del(struct kvt_rcluster *c, struct kvt_rc_item *it, size_t n)
{
    return none(it, n);
}

void kvt_rcluster_stats(const struct kvt_rcluster *c, struct kvt_rcluster_stats *s)
{
    memset(s, 0, sizeof *s);
}
