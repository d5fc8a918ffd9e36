/*
 * policy.c — policies by name.
 */
#include <string.h>

#include "policy/belady.h"
#include "policy/policy.h"

static const struct kvt_policy_ops *const policies[] = {
    &kvt_policy_lru_ops,
    &kvt_policy_decode_ops,
    &kvt_policy_belady_ops,
};

/* Named by DESIGN.md §6 and not built yet: a config naming one gets
 * KVT_ENOTSUP ("not built"), not KVT_ECONFIG ("no such thing"). Every one
 * named there is built now; NULL ends the list. */
static const char *const planned[] = { NULL };

const struct kvt_policy_ops *kvt_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    return NULL;
}

bool kvt_policy_planned(const char *name)
{
    for (size_t i = 0; i < sizeof(planned) / sizeof(planned[0]); i++)
        if (planned[i] && strcmp(planned[i], name) == 0)
            return true;
    return false;
}
