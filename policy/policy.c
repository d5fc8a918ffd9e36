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
    if (!o || !o->name || o->version != KVT_POLICY_OPS_VERSION)
        return false;
    if (!(o->create && o->destroy && o->reserve && o->insert && o->remove && o->access &&
          o->victim))
        return false;
    /* Each capability whole or absent (policy.h). */
    int position = !!o->schedule + !!o->advance;
    int pages = !!o->page_new + !!o->page_gone;
    int plan = !!o->next_use + !!o->group_of + !!o->prefetch + !!o->working_set + !!o->use_at;
    return (position == 0 || position == 2) && (pages == 0 || pages == 2) &&
           (plan == 0 || (plan == 5 && position == 2)); /* a plan is made from the position */
}

const struct kvt_policy_ops *kvt_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    return NULL;
}
