/*
 * evict.c — the caller's own eviction, for a put the engine refuses because
 * every tier is full (KVT_EFULL).
 *
 * An engine that is a prefix cache must make room for new blocks by letting
 * old ones go; one that answers KVT_EFULL leaves that to its caller, as a
 * storage back-end without eviction would. Then the replay does what such a
 * caller does: it drops the blocks it used least recently (kvt_drop) and
 * puts again. The replay counts these drops and the report says so, since
 * the hit fraction is then the caller's LRU's, whatever --policy says.
 *
 * The list is the caller's view of what is stored: kvt_exists corrects it on
 * every request (a block the engine let go is forgotten), and a block is
 * never dropped while a request that uses it is being served (users[]:
 * with --concurrency, another request's blocks too). Cost: O(1) per touch,
 * O(blocks skipped) per eviction.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/cli.h"
#include "tools/replay/replay_priv.h"

int replay_lru_init(struct replay_lru *l, uint32_t blocks)
{
    size_t n = blocks ? blocks : 1;
    *l = (struct replay_lru){ .head = KVT_NONE, .tail = KVT_NONE };
    l->prev = malloc(n * sizeof(uint32_t));
    l->next = malloc(n * sizeof(uint32_t));
    l->users = calloc(n, sizeof(uint32_t));
    l->held = calloc(n, 1);
    if (!l->prev || !l->next || !l->users || !l->held) {
        replay_lru_free(l);
        return -ENOMEM;
    }
    return 0;
}

void replay_lru_free(struct replay_lru *l)
{
    free(l->prev);
    free(l->next);
    free(l->users);
    free(l->held);
    *l = (struct replay_lru){ .head = KVT_NONE, .tail = KVT_NONE };
}

static void unlink_block(struct replay_lru *l, uint32_t b)
{
    if (l->prev[b] != KVT_NONE)
        l->next[l->prev[b]] = l->next[b];
    else
        l->head = l->next[b];
    if (l->next[b] != KVT_NONE)
        l->prev[l->next[b]] = l->prev[b];
    else
        l->tail = l->prev[b];
}

void replay_lru_touch(struct replay_lru *l, uint32_t b)
{
    if (l->held[b])
        unlink_block(l, b);
    else
        l->n++;
    l->held[b] = 1;
    l->prev[b] = KVT_NONE;
    l->next[b] = l->head;
    if (l->head != KVT_NONE)
        l->prev[l->head] = b;
    l->head = b;
    if (l->tail == KVT_NONE)
        l->tail = b;
}

void replay_lru_forget(struct replay_lru *l, uint32_t b)
{
    if (!l->held[b])
        return;
    unlink_block(l, b);
    l->held[b] = 0;
    l->n--;
}

/* kvt_drop of one block; a block being written down or read is busy for a
 * moment (-EBUSY): tried again a few times, then left for the next one. */
static int drop_block(struct replay_ctx *x, uint32_t b)
{
    kvt_key k = replay_key(x->hash_of[b], x->depth[b]);
    for (int tries = 0;; tries++) {
        int rc = kvt_drop(x->e, &k, 1);
        if (rc != -EBUSY || tries == 20)
            return rc;
        nanosleep(&(struct timespec){ 0, 100000 }, NULL);
    }
}

int replay_evict(struct replay_ctx *x, uint32_t need)
{
    struct replay_lru *l = &x->lru;
    uint32_t dropped = 0, b = l->tail;
    x->r->client_evict_calls++;
    while (dropped < need && b != KVT_NONE) {
        uint32_t prev = l->prev[b];
        if (!l->users[b]) {
            int rc = drop_block(x, b);
            if (rc == 0) {
                replay_lru_forget(l, b);
                dropped++;
            } else if (rc != -EBUSY) {
                cli_error("replay", 1, "dropping a block to make room: %s (%s)", kvt_strerror(rc),
                          kvt_last_error());
                x->said = true;
                return rc;
            }
        }
        b = prev;
    }
    x->r->client_evicted += dropped;
    return (int)dropped;
}
