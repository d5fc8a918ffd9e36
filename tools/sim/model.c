/*
 * model.c — one policy's run over a world: `kvtier sim`'s simulated tier
 * manager and its cost model.
 *
 * The policy is the engine's own code (policy/policy.h); the manager around
 * it is this model, not the engine's: one prefetch budget, no live depth,
 * read horizon or third-copy drops, whole groups pinned, no tail writes.
 * docs/sim.md lists the differences and how far the figures are from
 * `kvtier run`'s.
 *
 * The cost model (also in --help and in the JSON under "model"):
 *  - Capacities are in pages. HBM holds --hbm-pages; DRAM everything unless
 *    limited, the rest being on SSD. A page brought to HBM keeps its DRAM
 *    copy (the tiers are inclusive, as in the engine); a page made by `new`
 *    is dirty until written down when it leaves HBM. HBM starts holding the
 *    first-used pages (warm, as a prefill leaves it) unless --cold.
 *  - A group is an `advance` and the records after it up to the next
 *    advance, step or drop: one (sequence, layer). Its pages stay in HBM
 *    (pinned, not eviction candidates) until it has computed, as with
 *    kvt_acquire. Records outside any group form an implicit one that pins
 *    nothing: its pages are fetched and used one at a time, and it computes
 *    once, at its end.
 *  - A group is issued when the previous one has computed. Its misses are
 *    fetched then (SSD->DRAM first for a page only on SSD, then DRAM->HBM);
 *    a full tier gives up the policy's victim, written down first if dirty.
 *  - A policy with prefetch() is asked, once the group's own pages are
 *    requested, for pages of the groups ahead; they are fetched while the
 *    group computes, soonest first, while the page each displaces is used
 *    later than it (next_use), and while the prefetched pages not yet used
 *    stay within --prefetch-bytes.
 *  - Each link carries one page at a time at its bandwidth, first come
 *    first served: DRAM->HBM and HBM->DRAM (PCIe: one link each way) at
 *    --h2d-gbps; SSD reads and writes share the drive's --ssd-gbps.
 *  - A group computes for --compute-us once all its pages are in HBM and
 *    the previous group has finished. Stall = the time compute waited for
 *    data; step time = the end of the last compute / steps; the bound per
 *    step = max(compute, each link's bytes / its bandwidth).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/belady.h"
#include "tools/sim/sim_priv.h"

const char *const sim_link_name[SIM_LINKS] = { "dram->hbm", "ssd->dram", "hbm->dram",
                                               "dram->ssd" };

enum { IN_HBM = 1, IN_DRAM = 2, ON_SSD = 4, DIRTY = 8, ALIVE = 16 };
enum { PF_HBM = 1, PF_DRAM = 2 }; /* prefetched into that tier, not used yet */
enum { LK_H2D, LK_D2H, LK_SSD, LK_N };

struct spage {
    double hbm_at, dram_at; /* when the HBM / DRAM copy is complete */
    uint64_t pin;           /* the group that holds it, while that group is open */
    uint8_t st;             /* IN_*, ON_SSD, DIRTY, ALIVE */
    uint8_t listed;         /* bit t: a candidate of policy tier t */
    uint8_t pf;             /* PF_* */
};

/* The simulated manager during one policy's run over a world: the pages'
 * copies, the tiers' use, the links' clocks, the open group. sim_run owns it. */
struct sim_state {
    const struct sim_world *w;
    const struct sim_trace *t;
    const struct kvt_policy_ops *ops;
    void *pol;
    const struct sim_model *m;
    struct sim_result *r;
    struct spage *pg;
    uint64_t meta;
    uint64_t hbm_used, dram_used, dram_cap; /* dram_cap 0: unlimited */
    bool use_ssd;
    double now;                /* the previous group's compute end: the next one issues */
    double link_free[LK_N];
    double sec[SIM_LINKS];     /* one page over each link */
    /* The open group. */
    bool open, pins;           /* pins: opened by an advance */
    uint64_t gid;
    double ready;              /* its last page arrives */
    uint32_t *gpin, *gacc;     /* pages it pinned; its accesses in order */
    size_t n_gpin, cap_gpin, n_gacc, cap_gacc;
    /* Prefetch. */
    uint64_t pf_max, pf_hbm, pf_dram;
    uint32_t *cand, cand_cap;
    int fail;
    char *err;
    size_t errlen;
};

static void state_fail(struct sim_state *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void state_fail(struct sim_state *s, int code, const char *fmt, ...)
{
    if (s->fail)
        return;
    s->fail = code;
    if (s->err && s->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err, s->errlen, fmt, ap);
        va_end(ap);
    }
}

static const kvt_key *host_key_of(void *ctx, uint32_t pg)
{
    const struct sim_state *s = ctx;
    return &s->w->keys[pg];
}

static uint32_t host_find(void *ctx, const kvt_key *k)
{
    const struct sim_state *s = ctx;
    uint32_t pg = sim_world_find(s->w, k);
    return pg != KVT_NONE && (s->pg[pg].st & ALIVE) ? pg : KVT_NONE;
}

static bool push_u32(uint32_t **a, size_t *n, size_t *cap, uint32_t v)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        uint32_t *na = realloc(*a, nc * sizeof(uint32_t));
        if (!na)
            return false;
        *a = na;
        *cap = nc;
    }
    (*a)[(*n)++] = v;
    return true;
}

/* Keeps the policy's candidate sets equal to the page's state, as the
 * engine's kvt_page_sync does: HBM = resident and not pinned; DRAM = a copy
 * there; SSD (only when the SSD is in play) = a copy there. */
static void sync(struct sim_state *s, uint32_t pg)
{
    struct spage *p = &s->pg[pg];
    bool pinned = s->open && s->pins && p->pin == s->gid;
    uint8_t want = 0;
    if ((p->st & IN_HBM) && !pinned)
        want |= 1u << KVT_TIER_HBM;
    if (p->st & IN_DRAM)
        want |= 1u << KVT_TIER_DRAM;
    if (s->use_ssd && (p->st & ON_SSD))
        want |= 1u << KVT_TIER_SSD;
    for (int t = 0; t < KVT_POLICY_TIERS; t++) {
        uint8_t b = (uint8_t)(1u << t);
        if ((want & b) && !(p->listed & b))
            s->ops->insert(s->pol, t, pg, &s->w->keys[pg]);
        else if (!(want & b) && (p->listed & b))
            s->ops->remove(s->pol, t, pg);
    }
    p->listed = want;
}

static double xfer(struct sim_state *s, int link, double ready)
{
    static const int lk[SIM_LINKS] = { [SIM_H2D] = LK_H2D, [SIM_SSD_READ] = LK_SSD,
                                       [SIM_D2H] = LK_D2H, [SIM_SSD_WRITE] = LK_SSD };
    double *f = &s->link_free[lk[link]];
    double start = ready > *f ? ready : *f;
    *f = start + s->sec[link];
    s->r->bytes[link] += s->t->page_bytes;
    s->r->pages[link]++;
    return *f;
}

/* A candidate may leave now unless a copy into or out of it is under way. */
static bool usable_hbm(void *ctx, uint32_t pg)
{
    const struct sim_state *s = ctx;
    return s->pg[pg].hbm_at <= s->now;
}

static bool usable_dram(void *ctx, uint32_t pg)
{
    const struct sim_state *s = ctx;
    const struct spage *p = &s->pg[pg];
    return p->dram_at <= s->now && !((p->st & IN_HBM) && p->hbm_at > s->now);
}

static const char *const tier_word[KVT_POLICY_TIERS] = { "HBM", "DRAM", "SSD" };

/* The policy's victim of a full tier: a usable one, else any (a copy in
 * flight is then wasted, which the byte counts show). */
static uint32_t pick(struct sim_state *s, int tier)
{
    uint32_t v = s->ops->victim(s->pol, tier, tier == KVT_TIER_HBM ? usable_hbm : usable_dram, s);
    if (v == KVT_NONE)
        v = s->ops->victim(s->pol, tier, NULL, NULL);
    if (v == KVT_NONE || v >= s->w->np || !(s->pg[v].listed & (1u << tier))) {
        state_fail(s, -EFAULT, "policy %s gave %s as the victim of a full %s tier",
                 s->ops->name, v == KVT_NONE ? "none" : "a page that is not a candidate",
                 tier_word[tier]);
        return KVT_NONE;
    }
    return v;
}

static void evict_dram(struct sim_state *s, uint32_t v)
{
    struct spage *p = &s->pg[v];
    if (!(p->st & ON_SSD)) {
        xfer(s, SIM_SSD_WRITE, p->dram_at > s->now ? p->dram_at : s->now);
        p->st |= ON_SSD;
    }
    p->st &= (uint8_t)~IN_DRAM;
    s->dram_used--;
    if (p->pf & PF_DRAM) {
        p->pf &= (uint8_t)~PF_DRAM;
        s->pf_dram--;
    }
    sync(s, v);
}

static void room_dram(struct sim_state *s)
{
    if (!s->dram_cap || s->dram_used < s->dram_cap)
        return;
    uint32_t v = pick(s, KVT_TIER_DRAM);
    if (v != KVT_NONE)
        evict_dram(s, v);
}

/* Takes v out of HBM; returns when its slot is free (after the write-back
 * of a dirty page). */
static double evict_hbm(struct sim_state *s, uint32_t v)
{
    struct spage *p = &s->pg[v];
    double slot = s->now;
    if (p->st & DIRTY) {
        room_dram(s);
        if (s->fail)
            return slot;
        slot = xfer(s, SIM_D2H, p->hbm_at > s->now ? p->hbm_at : s->now);
        p->st = (uint8_t)((p->st | IN_DRAM) & ~DIRTY);
        p->dram_at = slot;
        s->dram_used++;
    }
    p->st &= (uint8_t)~IN_HBM;
    s->hbm_used--;
    if (p->pf & PF_HBM) {
        p->pf &= (uint8_t)~PF_HBM;
        s->pf_hbm--;
        s->r->prefetch_unused++;
    }
    sync(s, v);
    return slot;
}

static double room_hbm(struct sim_state *s)
{
    if (s->hbm_used < s->m->hbm_pages)
        return s->now;
    uint32_t v = pick(s, KVT_TIER_HBM);
    return v == KVT_NONE ? s->now : evict_hbm(s, v);
}

/* Brings pg to HBM (through DRAM when it is only on SSD), issued now;
 * returns its arrival. The caller lists it (pin or sync). */
static double fetch(struct sim_state *s, uint32_t pg, bool prefetch)
{
    struct spage *p = &s->pg[pg];
    double slot = room_hbm(s), src;
    if (s->fail)
        return s->now;
    if (p->st & IN_DRAM) {
        src = p->dram_at > s->now ? p->dram_at : s->now;
    } else if (p->st & ON_SSD) {
        room_dram(s);
        src = xfer(s, SIM_SSD_READ, s->now);
        p->st |= IN_DRAM;
        p->dram_at = src;
        s->dram_used++;
    } else {
        state_fail(s, -EFAULT, "page %llu %u %u has no copy to bring up",
                 (unsigned long long)s->w->keys[pg].id, s->w->keys[pg].layer,
                 s->w->keys[pg].index);
        return s->now;
    }
    if (p->pf & PF_DRAM) {
        p->pf &= (uint8_t)~PF_DRAM;
        s->pf_dram--;
    }
    p->hbm_at = xfer(s, SIM_H2D, src > slot ? src : slot);
    p->st |= IN_HBM;
    s->hbm_used++;
    if (prefetch) {
        p->pf |= PF_HBM;
        s->pf_hbm++;
        s->r->prefetched++;
    }
    return p->hbm_at;
}

/* ------------------------------------------------------------- prefetch */

static bool wanted_h2d(void *ctx, uint32_t pg)
{
    const struct sim_state *s = ctx;
    return pg < s->w->np && (s->pg[pg].st & (ALIVE | IN_DRAM | IN_HBM)) == (ALIVE | IN_DRAM);
}

static bool wanted_ssd(void *ctx, uint32_t pg)
{
    const struct sim_state *s = ctx;
    return pg < s->w->np &&
           (s->pg[pg].st & (ALIVE | ON_SSD | IN_DRAM | IN_HBM)) == (ALIVE | ON_SSD);
}

/* Whether displacing v for c is worth it: v is used later than c, and c is
 * used at all. Without next_use() there is no way to tell: no. */
static bool later(struct sim_state *s, uint32_t v, uint32_t c)
{
    if (!s->ops->next_use)
        return false;
    uint64_t nc = s->ops->next_use(s->pol, c);
    return nc < KVT_USE_UNKNOWN && s->ops->next_use(s->pol, v) > nc;
}

/* Room in tier for c, without displacing anything used sooner than c. */
static bool room_for(struct sim_state *s, int tier, uint32_t c)
{
    bool full = tier == KVT_TIER_HBM ? s->hbm_used >= s->m->hbm_pages
                                     : s->dram_cap && s->dram_used >= s->dram_cap;
    if (!full)
        return true;
    uint32_t v = s->ops->victim(s->pol, tier, tier == KVT_TIER_HBM ? usable_hbm : usable_dram, s);
    if (v == KVT_NONE || v >= s->w->np || !(s->pg[v].listed & (1u << tier)) || !later(s, v, c))
        return false;
    if (tier == KVT_TIER_HBM)
        evict_hbm(s, v);
    else
        evict_dram(s, v);
    return !s->fail;
}

/* One stage: pages of tier from (DRAM, or SSD) that the policy wants up
 * next, into HBM (or DRAM), within the budget. */
static void prefetch_stage(struct sim_state *s, int from)
{
    uint64_t *out = from == KVT_TIER_DRAM ? &s->pf_hbm : &s->pf_dram;
    kvt_usable_fn wanted = from == KVT_TIER_DRAM ? wanted_h2d : wanted_ssd;
    int to = from - 1;
    while (!s->fail && *out < s->pf_max) {
        uint64_t left = s->pf_max - *out;
        uint32_t k = s->ops->prefetch(s->pol, from, wanted, s, s->cand,
                                      left < s->cand_cap ? (uint32_t)left : s->cand_cap);
        uint32_t moved = 0;
        for (uint32_t i = 0; i < k && !s->fail && *out < s->pf_max; i++) {
            uint32_t c = s->cand[i];
            if (!wanted(s, c)) /* an eviction of this round took its copy */
                continue;
            if (!room_for(s, to, c))
                return;
            if (to == KVT_TIER_HBM) {
                fetch(s, c, true);
            } else {
                struct spage *p = &s->pg[c];
                p->dram_at = xfer(s, SIM_SSD_READ, s->now);
                p->st |= IN_DRAM;
                p->pf |= PF_DRAM;
                s->dram_used++;
                s->pf_dram++;
                s->r->prefetched_ssd++;
            }
            sync(s, c);
            moved++;
        }
        if (!moved)
            return;
    }
}

/* ------------------------------------------------------------- groups */

static void pin(struct sim_state *s, uint32_t pg)
{
    if (s->pg[pg].pin == s->gid)
        return;
    s->pg[pg].pin = s->gid;
    if (!push_u32(&s->gpin, &s->n_gpin, &s->cap_gpin, pg))
        state_fail(s, -ENOMEM, "out of memory");
    sync(s, pg);
}

/* An advance-group pins what it reads and is already in HBM before it asks
 * for its misses, as kvt_acquire pins the resident pages of its list first. */
static void group_open(struct sim_state *s, bool pins, size_t i)
{
    s->open = true;
    s->pins = pins;
    s->ready = s->now;
    if (!pins)
        return;
    s->gid++;
    for (size_t j = i + 1; j < s->t->n; j++) {
        const struct sim_rec *r = &s->t->rec[j];
        if (r->kind != SIM_ACCESS && r->kind != SIM_NEW)
            break;
        if (r->kind == SIM_ACCESS && (s->pg[s->w->rec_pg[j]].st & IN_HBM))
            pin(s, s->w->rec_pg[j]);
    }
}

/* Prefetch while the group computes, then its compute, then its pages go
 * back to the policy with their uses in order. */
static void group_close(struct sim_state *s)
{
    if (!s->open)
        return;
    if (s->pins && s->ops->prefetch && s->pf_max) {
        prefetch_stage(s, KVT_TIER_DRAM);
        if (s->use_ssd)
            prefetch_stage(s, KVT_TIER_SSD);
    }
    double start = s->ready > s->now ? s->ready : s->now;
    s->r->stall_s += start - s->now;
    s->r->compute_s += s->m->compute_s;
    s->now = start + s->m->compute_s;
    s->r->groups++;
    s->open = false;
    if (!s->pins)
        return;
    for (size_t i = 0; i < s->n_gacc; i++) {
        uint32_t pg = s->gacc[i];
        if (!(s->pg[pg].listed & (1u << KVT_TIER_HBM)))
            sync(s, pg);
        if (s->pg[pg].listed & (1u << KVT_TIER_HBM))
            s->ops->access(s->pol, KVT_TIER_HBM, pg);
    }
    for (size_t i = 0; i < s->n_gpin; i++)
        sync(s, s->gpin[i]);
    s->n_gacc = s->n_gpin = 0;
}

/* A page of the open group is in HBM at t. An advance-group computes once
 * its last page is in; outside one, pages are used one at a time, so each
 * is waited for as it comes (the wait is stall). */
static void wait_for(struct sim_state *s, double t)
{
    if (s->pins) {
        if (t > s->ready)
            s->ready = t;
    } else if (t > s->now) {
        s->r->stall_s += t - s->now;
        s->now = t;
    }
}

static void do_access(struct sim_state *s, uint32_t pg)
{
    struct spage *p = &s->pg[pg];
    s->r->accesses++;
    double at;
    if (p->st & IN_HBM) {
        s->r->hits++;
        at = p->hbm_at;
    } else {
        at = fetch(s, pg, false);
    }
    if (s->fail)
        return;
    wait_for(s, at);
    if (p->pf & PF_HBM) {
        p->pf &= (uint8_t)~PF_HBM;
        s->pf_hbm--;
    }
    if (s->pins) {
        pin(s, pg);
        if (!push_u32(&s->gacc, &s->n_gacc, &s->cap_gacc, pg))
            state_fail(s, -ENOMEM, "out of memory");
    } else {
        sync(s, pg);
        s->ops->access(s->pol, KVT_TIER_HBM, pg);
    }
    if (p->listed & (1u << KVT_TIER_DRAM))
        s->ops->access(s->pol, KVT_TIER_DRAM, pg);
}

static void do_new(struct sim_state *s, uint32_t pg)
{
    struct spage *p = &s->pg[pg];
    *p = (struct spage){ .st = ALIVE | DIRTY };
    if (s->ops->page_new)
        s->ops->page_new(s->pol, pg, &s->w->keys[pg]);
    double slot = room_hbm(s);
    if (s->fail)
        return;
    p->st |= IN_HBM;
    p->hbm_at = slot;
    s->hbm_used++;
    wait_for(s, slot);
    if (s->pins)
        pin(s, pg);
    else
        sync(s, pg);
}

static void do_drop(struct sim_state *s, uint64_t id)
{
    const struct sim_world *w = s->w;
    uint32_t slot = sim_world_id(w, id);
    for (uint32_t pg = slot == KVT_NONE ? KVT_NONE : w->id_head[slot]; pg != KVT_NONE;
         pg = w->pg_next[pg]) {
        struct spage *p = &s->pg[pg];
        if (!(p->st & ALIVE))
            continue;
        s->hbm_used -= (p->st & IN_HBM) != 0;
        s->dram_used -= (p->st & IN_DRAM) != 0;
        s->pf_hbm -= (p->pf & PF_HBM) != 0;
        s->pf_dram -= (p->pf & PF_DRAM) != 0;
        p->st = 0;
        p->pf = 0;
        sync(s, pg);
        if (s->ops->page_gone)
            s->ops->page_gone(s->pol, pg);
    }
}

/* ------------------------------------------------------------- run */

const char *const sim_term_name[SIM_TERMS] = { "dram->hbm", "hbm->dram", "ssd", "compute" };

uint64_t sim_bytes_total(const struct sim_result *r)
{
    uint64_t b = 0;
    for (int l = 0; l < SIM_LINKS; l++)
        b += r->bytes[l];
    return b;
}

uint64_t sim_bytes_fetched(const struct sim_result *r)
{
    return r->bytes[SIM_H2D] + r->bytes[SIM_SSD_READ];
}

static int model_check(const struct sim_world *w, const struct sim_model *m, char *err,
                       size_t errlen)
{
    if (!(m->h2d_gbps > 0) || !isfinite(m->h2d_gbps) || !(m->ssd_gbps > 0) ||
        !isfinite(m->ssd_gbps) || !(m->compute_s >= 0) || !isfinite(m->compute_s))
        return sim_seterr(err, errlen, "bandwidths must be > 0 and compute time >= 0");
    if (!m->hbm_pages || m->hbm_pages < w->max_group) {
        sim_seterr(err, errlen, "HBM of %llu pages cannot hold one group of %llu pages (a "
               "(sequence, layer) is held in HBM while it computes)",
               (unsigned long long)m->hbm_pages, (unsigned long long)w->max_group);
        return -ENOSPC;
    }
    return 0;
}

/* Where the pages that exist before the trace start: all in DRAM, or (with
 * DRAM limited) all on SSD and the first-used in DRAM too; the first-used in
 * HBM as well unless cold. Then the policy learns the schedule, the pages,
 * and its candidates, in order of first use. */
static void state_place(struct sim_state *s)
{
    const struct sim_world *w = s->w;
    uint64_t in_dram = 0;
    for (uint32_t pg = 0; pg < w->np; pg++) {
        struct spage *p = &s->pg[pg];
        if (!w->pre[pg])
            continue;
        p->st = ALIVE;
        if (!s->dram_cap || in_dram < s->dram_cap)
            p->st |= IN_DRAM, in_dram++;
        if (s->dram_cap)
            p->st |= ON_SSD;
        if (!s->m->cold && s->hbm_used < s->m->hbm_pages)
            p->st |= IN_HBM, s->hbm_used++;
    }
    s->dram_used = in_dram;
    const struct sim_trace *t = s->t;
    if (t->has_schedule && s->ops->schedule) {
        kvt_schedule sc = { t->ids, t->n_ids, t->layers, t->order, t->window_pages, t->sink_pages };
        s->ops->schedule(s->pol, &sc);
    }
    for (uint32_t pg = 0; pg < w->np && s->ops->page_new; pg++)
        if (w->pre[pg])
            s->ops->page_new(s->pol, pg, &w->keys[pg]);
    for (uint32_t pg = 0; pg < w->np; pg++)
        if (w->pre[pg])
            sync(s, pg);
}

static int state_setup(struct sim_state *s)
{
    const struct sim_world *w = s->w;
    const struct sim_model *m = s->m;
    uint64_t np = w->np ? w->np : 1;
    s->dram_cap = m->dram_pages && m->dram_pages < w->np ? m->dram_pages : 0;
    s->use_ssd = s->dram_cap != 0;
    double pb = (double)s->t->page_bytes;
    s->sec[SIM_H2D] = s->sec[SIM_D2H] = pb / (m->h2d_gbps * 1e9);
    s->sec[SIM_SSD_READ] = s->sec[SIM_SSD_WRITE] = pb / (m->ssd_gbps * 1e9);
    s->pf_max = m->prefetch_bytes ? (m->prefetch_bytes + s->t->page_bytes - 1) / s->t->page_bytes : 0;
    s->cand_cap = (uint32_t)(s->pf_max < 4096 ? (s->pf_max ? s->pf_max : 1) : 4096);
    s->pg = calloc(np, sizeof(struct spage));
    s->cand = malloc(s->cand_cap * sizeof(uint32_t));
    if (!s->pg || !s->cand)
        return -ENOMEM;
    struct kvt_policy_params pp = {
        .page_cap = (uint32_t)np,
        .slots = { (uint32_t)(m->hbm_pages < UINT32_MAX ? m->hbm_pages : UINT32_MAX - 1),
                   (uint32_t)(s->dram_cap ? s->dram_cap : np), s->use_ssd ? (uint32_t)np : 0 },
        .meta = &s->meta,
        .host = { s, host_key_of, host_find },
    };
    int e = s->ops->create(&pp, &s->pol);
    if (e) {
        s->pol = NULL;
        return e;
    }
    if (s->ops == &kvt_policy_belady_ops &&
        (e = kvt_belady_load(s->pol, w->acc_keys, s->t->accesses)) < 0)
        return e;
    state_place(s);
    return 0;
}

static void state_replay(struct sim_state *s)
{
    const struct sim_trace *t = s->t;
    for (size_t i = 0; i < t->n && !s->fail; i++) {
        const struct sim_rec *r = &t->rec[i];
        switch (r->kind) {
        case SIM_ACCESS:
        case SIM_NEW:
            if (!s->open)
                group_open(s, false, i);
            if (r->kind == SIM_ACCESS)
                do_access(s, s->w->rec_pg[i]);
            else
                do_new(s, s->w->rec_pg[i]);
            break;
        case SIM_ADVANCE:
            group_close(s);
            if (s->ops->advance)
                s->ops->advance(s->pol, r->id, r->layer);
            group_open(s, true, i);
            break;
        case SIM_DROP:
            group_close(s);
            do_drop(s, r->id);
            break;
        default:
            group_close(s);
            s->r->steps++;
            break;
        }
    }
    group_close(s);
}

static void state_results(struct sim_state *s)
{
    struct sim_result *r = s->r;
    const struct sim_model *m = s->m;
    double steps = r->steps ? (double)r->steps : 1.0;
    r->total_s = s->now;
    r->step_s = r->total_s / steps;
    r->term_s[SIM_TERM_H2D] = (double)r->bytes[SIM_H2D] / (m->h2d_gbps * 1e9) / steps;
    r->term_s[SIM_TERM_D2H] = (double)r->bytes[SIM_D2H] / (m->h2d_gbps * 1e9) / steps;
    r->term_s[SIM_TERM_SSD] =
        (double)(r->bytes[SIM_SSD_READ] + r->bytes[SIM_SSD_WRITE]) / (m->ssd_gbps * 1e9) / steps;
    r->term_s[SIM_TERM_COMPUTE] = r->compute_s / steps;
    r->bound_by = SIM_TERM_COMPUTE;
    for (int i = 0; i < SIM_TERMS; i++)
        if (r->term_s[i] > r->term_s[r->bound_by])
            r->bound_by = i;
    r->bound_s = r->term_s[r->bound_by];
}

int sim_run(const struct sim_world *w, const struct kvt_policy_ops *ops,
            const struct sim_model *m, struct sim_result *r, char *err, size_t errlen)
{
    *r = (struct sim_result){ .policy = ops->name };
    int e = model_check(w, m, err, errlen);
    if (e)
        return e;
    struct sim_state s = { .w = w, .t = w->t, .ops = ops, .m = m, .r = r, .err = err, .errlen = errlen };
    e = state_setup(&s);
    if (e)
        sim_seterr(err, errlen, "%s: %s", ops->name,
               e == -ENOMEM ? "out of memory" : "cannot start the policy");
    else
        state_replay(&s);
    if (!e && s.fail)
        e = s.fail;
    if (!e)
        state_results(&s);
    if (s.pol)
        ops->destroy(s.pol);
    free(s.pg);
    free(s.cand);
    free(s.gpin);
    free(s.gacc);
    return e;
}
