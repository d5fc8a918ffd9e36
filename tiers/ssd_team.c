/*
 * ssd_team.c — the SSD pipeline's decode team: the mover and one helper
 * thread decode the pages a step reaped, side by side (tiers.h).
 *
 * Why a helper: with a codec the mover's one thread is the SSD path's
 * bottleneck (a page of fp8 decodes in about 0.25 ms on this project's
 * machine), and while it decodes the page a caller waits for, the other core
 * has nothing to run: the attention waits for that page. Two threads decode
 * a step's pages in half the time, and when the cores are busy the helper
 * simply runs later (the mover takes what it has not started).
 * docs/performance.md#decode-team.
 *
 * Fork-join, one round at a time: kvt_team_for() publishes [0, n) and works
 * through it with the helper, each taking the next index under the mutex, and
 * returns when every index is done. Indices are handed out once, so each
 * item is run by exactly one thread; the mutex orders an item's writes
 * before the round's end. The helper holds nothing between rounds.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, pthread_setname_np */
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "tiers/tiers.h"

struct kvt_team {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;       /* a round was published, or stop */
    pthread_cond_t idle;       /* the helper finished an item */
    kvt_team_fn fn;            /* the round's */
    void *arg;
    uint32_t n, next;          /* the round's items; the next to hand out */
    uint32_t running;          /* items the helper has taken and not finished */
    bool stop;
};

/* Takes the next item of the round (under mu): its index, or UINT32_MAX. */
static uint32_t team_take(struct kvt_team *t)
{
    return t->next < t->n ? t->next++ : UINT32_MAX;
}

static void *team_main(void *arg)
{
    struct kvt_team *t = arg;
    pthread_setname_np(pthread_self(), "kvt-decode");
    /* Like the mover: it serves pages callers wait for (io/sched_hint.c). */
    (void)kvt_io_short_slice();
    pthread_mutex_lock(&t->mu);
    for (;;) {
        uint32_t i = t->stop ? UINT32_MAX : team_take(t);
        if (i == UINT32_MAX) {
            if (t->stop)
                break;
            pthread_cond_wait(&t->work, &t->mu);
            continue;
        }
        t->running++;
        kvt_team_fn fn = t->fn;
        void *a = t->arg;
        pthread_mutex_unlock(&t->mu);
        fn(a, i, 1);
        pthread_mutex_lock(&t->mu);
        if (--t->running == 0)
            pthread_cond_signal(&t->idle);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

unsigned kvt_cpus_usable(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

int kvt_team_open(struct kvt_team **out)
{
    struct kvt_team *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->idle, NULL);
    int r = pthread_create(&t->thread, NULL, team_main, t);
    if (r) {
        pthread_cond_destroy(&t->idle);
        pthread_cond_destroy(&t->work);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return -r;
    }
    *out = t;
    return 0;
}

void kvt_team_close(struct kvt_team *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->idle);
    pthread_cond_destroy(&t->work);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void kvt_team_for(struct kvt_team *t, uint32_t n, kvt_team_fn fn, void *arg)
{
    if (!t || n < 2) { /* nothing to share */
        for (uint32_t i = 0; i < n; i++)
            fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->fn = fn;
    t->arg = arg;
    t->n = n;
    t->next = 0;
    pthread_cond_signal(&t->work);
    for (;;) {
        uint32_t i = team_take(t);
        if (i == UINT32_MAX)
            break;
        pthread_mutex_unlock(&t->mu);
        fn(arg, i, 0);
        pthread_mutex_lock(&t->mu);
    }
    while (t->running)
        pthread_cond_wait(&t->idle, &t->mu);
    t->n = t->next = 0; /* the round is over: the helper takes nothing more of it */
    pthread_mutex_unlock(&t->mu);
}
