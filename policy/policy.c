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

const struct kvt_policy_ops *kvt_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    return NULL;
}
