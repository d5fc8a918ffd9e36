/*
 * hooks.c — opening an engine over the fault-injecting back-ends (lab.h).
 */
#include "lab/belady.h"
#include "lab/lab.h"
#include "lab/kv_mem.h"

#include <string.h>

int kvt_open_with_hooks(const kvt_config *cfg, const struct kvt_test_hooks *hooks,
                        kvt_engine **out)
{
    struct kvt_open_with w = { 0 };
    if (hooks && hooks->device) {
        w.device = &kvt_device_faulty_ops;
        w.device_arg = hooks->device;
    }
    if (hooks && hooks->io) {
        w.io = &kvt_io_faulty_ops;
        w.io_arg = hooks->io;
        w.sync = (struct kvt_syncer){ &kvt_io_faulty_sync_ops, hooks->io };
    }
    if (hooks && hooks->remote) {
        w.remote_kv = &kvt_kv_mem_ops;
        w.remote_kv_arg = hooks->remote;
    }
    w.no_write_ahead = hooks && hooks->no_write_ahead;
    return kvt_open_ex(cfg, &w, out);
}

const struct kvt_policy_ops *kvt_lab_policy_find(const char *name)
{
    if (name && strcmp(name, kvt_policy_belady_ops.name) == 0)
        return &kvt_policy_belady_ops;
    return kvt_policy_find(name);
}
