/*
 * policy.c — policies by name.
 */
#include <string.h>

#include "policy/policy.h"

static const struct kvt_policy_ops *const policies[] = {
    &kvt_policy_lru_ops,
    &kvt_policy_decode_ops,
    &kvt_policy_prefix_ops,
    &kvt_policy_arc_ops,
};

bool kvt_policy_ops_ok(const struct kvt_policy_ops *o)
{
    if (!o || !o->name || o->version < KVT_POLICY_OPS_V1 || o->version > KVT_POLICY_OPS_VERSION)
        return false;
    bool ok = o->create && o->destroy && o->reserve && o->insert && o->remove && o->access &&
              o->victim;
    if (o->version >= KVT_POLICY_OPS_V2)
        ok = ok && o->schedule && o->advance && o->page_new && o->page_gone;
    if (o->version >= KVT_POLICY_OPS_V3)
        ok = ok && o->next_use && o->group_of && o->prefetch && o->working_set && o->use_at;
    if (o->version >= KVT_POLICY_OPS_V4)
        ok = ok && o->batch;
    if (o->version >= KVT_POLICY_OPS_V5)
        ok = ok && o->leaves_first;
    return ok;
}

const struct kvt_policy_ops *kvt_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    return NULL;
}
