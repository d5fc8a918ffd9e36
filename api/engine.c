/*
 * engine.c — configuration, open/close, statistics.
 *
 * Open builds the engine bottom-up (device, arenas, page table, policy,
 * mover) and close tears it down in reverse; each goto label in kvt_open
 * names what it undoes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_build.h"
#include "api/abi.h"
#include "store/remote_frame.h"
#include "api/api.h"

#define KVT_MAX_SLOTS (1u << 30)

KVT_API unsigned kvt_version_number(void) { return KVT_VERSION_NUMBER; }
KVT_API const char *kvt_version_string(void) { return KVT_VERSION_STRING; }

void kvt_config_defaults(kvt_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->page_bytes = 256 << 10;
    cfg->hbm_bytes = (size_t)1 << 30;
    cfg->dram_bytes = (size_t)4 << 30;
    cfg->ssd_bytes = 0;
    cfg->ssd_dir = NULL;
    cfg->device = KVT_DEVICE_AUTO;
    cfg->policy = "decode";
    cfg->codec = KVT_CODEC_NONE;
    cfg->persist = 0;
    cfg->fingerprint = 0;
    cfg->io_backend = KVT_IO_AUTO;
    cfg->queue_depth = 32;
    cfg->host_link_gbps = 0;
}

static int check_tier_bytes(const char *field, size_t bytes, size_t page_bytes)
{
    if (bytes < page_bytes)
        return kvt_fail(KVT_ECONFIG, "%s (%zu) is smaller than one page (page_bytes = %zu)", field,
                        bytes, page_bytes);
    if (bytes / page_bytes >= KVT_MAX_SLOTS)
        return kvt_fail(KVT_ECONFIG, "%s (%zu) holds more than %u pages", field, bytes,
                        KVT_MAX_SLOTS);
    return 0;
}

/* The shared tier's fields; the URL itself is parsed by the store at open
 * (a text that may hold a password is never echoed here). */
static int check_remote(const kvt_config *c)
{
    if (!c->remote_url) {
        if (c->remote_prefix || c->remote_auth_file || c->remote_timeout_ms ||
            c->remote_publish || c->remote_ttl_s || c->remote_queue_bytes)
            return kvt_fail(KVT_ECONFIG, "a remote_* field is set but remote_url is not");
        return 0;
    }
    if (strncmp(c->remote_url, "redis://", 8) != 0)
        return kvt_fail(KVT_ECONFIG, "remote_url must start with redis:// (rediss:// and others "
                                     "are not supported)");
    if (c->remote_publish < KVT_PUBLISH_PUT || c->remote_publish > KVT_PUBLISH_EXPLICIT)
        return kvt_fail(KVT_ECONFIG, "remote_publish %d is not a KVT_PUBLISH_* value",
                        c->remote_publish);
    if (c->remote_timeout_ms > 600000)
        return kvt_fail(KVT_ECONFIG, "remote_timeout_ms (%u) is more than 10 minutes",
                        c->remote_timeout_ms);
    if (c->remote_prefix && !kvt_rframe_prefix_ok(c->remote_prefix))
        return kvt_fail(KVT_ECONFIG, "remote_prefix must be 1..%d characters of A-Z a-z 0-9 _ . -",
                        KVT_RFRAME_PREFIX_MAX);
    if (c->remote_queue_bytes && c->remote_queue_bytes < c->page_bytes)
        return kvt_fail(KVT_ECONFIG, "remote_queue_bytes (%zu) is smaller than one page",
                        c->remote_queue_bytes);
    return 0;
}

/* The page layout, which the lossy codecs need (io/quant.c says why). */
static int check_layout(const kvt_config *c)
{
    struct kvt_page_layout L;
    char why[256];
    kvt_page_layout_of(c, &L);
    if (kvt_page_layout_check(c->codec, &L, c->page_bytes, why, sizeof why) < 0)
        return kvt_fail(KVT_ECONFIG, "%s", why);
    return 0;
}

int kvt_config_validate(const kvt_config *c)
{
    int r;
    if (!c)
        return kvt_fail(-EINVAL, "config is NULL");
    if (c->page_bytes == 0 || c->page_bytes % 4096 != 0)
        return kvt_fail(KVT_ECONFIG, "page_bytes must be a nonzero multiple of 4096 (got %zu)",
                        c->page_bytes);
    if ((r = check_tier_bytes("hbm_bytes", c->hbm_bytes, c->page_bytes)) < 0 ||
        (r = check_tier_bytes("dram_bytes", c->dram_bytes, c->page_bytes)) < 0)
        return r;
    /* DRAM's arena has one spare slot (kvt_dram_slot): its size, whole pages
     * plus one, must not wrap. */
    if (c->dram_bytes / c->page_bytes * c->page_bytes > SIZE_MAX - c->page_bytes)
        return kvt_fail(KVT_ECONFIG, "dram_bytes (%zu) plus a spare page of %zu bytes is more "
                        "than a size_t holds", c->dram_bytes, c->page_bytes);
    /* Page records of both tiers share 32-bit numbers (KVT_NONE reserved),
     * and the key index is sized at twice their count. */
    if (c->hbm_bytes / c->page_bytes + c->dram_bytes / c->page_bytes + 1 > KVT_MAX_SLOTS)
        return kvt_fail(KVT_ECONFIG, "hbm_bytes and dram_bytes together hold more than %u pages",
                        KVT_MAX_SLOTS);
    if (c->ssd_bytes && !c->ssd_dir)
        return kvt_fail(KVT_ECONFIG, "ssd_dir is required when ssd_bytes is set");
    if (c->device < KVT_DEVICE_AUTO)
        return kvt_fail(KVT_ECONFIG, "device must be a CUDA ordinal >= 0, KVT_DEVICE_HOST or "
                                     "KVT_DEVICE_AUTO (got %d)", c->device);
    const struct kvt_policy_ops *pol = c->policy ? kvt_policy_find(c->policy) : NULL;
    /* belady is valid, but not for an engine (below). */
    bool offline = c->policy && strcmp(c->policy, "belady") == 0;
    if (c->policy && !pol && !offline)
        return kvt_fail(KVT_ECONFIG, "policy \"%s\" is unknown (use \"decode\", \"prefix\", "
                                     "\"lru\" or \"arc\")", c->policy);
    if (c->flags & ~(uint64_t)KVT_FLAG_EVICT)
        return kvt_fail(KVT_ECONFIG, "flags has bits this kvtier does not know (0x%llx)",
                        (unsigned long long)(c->flags & ~(uint64_t)KVT_FLAG_EVICT));
    if (c->codec < KVT_CODEC_NONE || c->codec > KVT_CODEC_INT4)
        return kvt_fail(KVT_ECONFIG, "codec %d is unknown", c->codec);
    if ((r = check_layout(c)) < 0)
        return r;
    if (c->io_backend < KVT_IO_AUTO || c->io_backend > KVT_IO_PSYNC)
        return kvt_fail(KVT_ECONFIG, "io_backend %d is unknown", c->io_backend);
    if (c->queue_depth == 0 || c->queue_depth > 4096)
        return kvt_fail(KVT_ECONFIG, "queue_depth must be 1..4096 (got %u)", c->queue_depth);
    if (!(c->host_link_gbps >= 0) || isinf(c->host_link_gbps))
        return kvt_fail(KVT_ECONFIG, "host_link_gbps must be >= 0 (got %g)", c->host_link_gbps);
    /* Valid, but not for an engine (the simulator's, in the test-support
     * library): */
    if (offline)
        return kvt_fail(KVT_ENOTSUP, "policy \"belady\" needs the whole future trace: it runs "
                                     "only in the simulator (kvtier sim)");
    if (c->ssd_bytes && c->ssd_bytes < c->page_bytes)
        return kvt_fail(KVT_ECONFIG, "ssd_bytes (%zu) is smaller than one page (page_bytes = %zu)",
                        c->ssd_bytes, c->page_bytes);
    /* The index stores a page's stored and raw lengths in 32 bits (struct
     * kvt_ssd_entry): a 4 GiB page would be written as 0 bytes. */
    if (c->ssd_bytes && c->page_bytes > UINT32_MAX)
        return kvt_fail(KVT_ECONFIG, "page_bytes (%zu) is more than an SSD tier stores: at most "
                        "%u with ssd_bytes set", c->page_bytes, UINT32_MAX & ~4095u);
    if (c->ssd_bytes && c->ssd_bytes / c->page_bytes >= KVT_MAX_SLOTS)
        return kvt_fail(KVT_ECONFIG, "ssd_bytes (%zu) holds more than %u pages", c->ssd_bytes,
                        KVT_MAX_SLOTS);
    if (c->ssd_bytes && !c->ssd_dir[0])
        return kvt_fail(KVT_ECONFIG, "ssd_dir is empty");
    return check_remote(c);
}

/* The back-end for cfg->device: host, CUDA, or (AUTO) CUDA when it opens. */
static int pick_device(const kvt_config *c, const struct kvt_open_with *with,
                       const struct kvt_device_ops **ops, void **priv)
{
    struct kvt_device_params p = { .ordinal = c->device < 0 ? 0 : c->device,
                                   .link_gbps = c->host_link_gbps,
                                   .arg = with->device_arg };
    const char *env = getenv("KVT_HOST_LINK_GBPS");
    if (p.link_gbps == 0 && env)
        p.link_gbps = atof(env);
    if (with->device) {
        *ops = with->device;
        return with->device->open(&p, priv);
    }
#if KVT_HAVE_CUDA
    if (c->device >= 0 || c->device == KVT_DEVICE_AUTO) {
        int r = kvt_device_cuda_ops.open(&p, priv);
        if (r == 0) {
            *ops = &kvt_device_cuda_ops;
            return 0;
        }
        if (c->device >= 0)
            return r;
    }
#else
    if (c->device >= 0)
        return kvt_fail(KVT_ENOTSUP, "device %d asks for CUDA, but kvtier was built without "
                                     "the CUDA back-end", c->device);
#endif
    *ops = &kvt_device_host_ops;
    return kvt_device_host_ops.open(&p, priv);
}

static int open_arenas(kvt_engine *e)
{
    int r = kvt_hbm_open(e);
    if (r < 0)
        return r;
    if ((r = kvt_dram_open(e)) < 0)
        kvt_hbm_close(e);
    return r;
}

static void close_arenas(kvt_engine *e)
{
    kvt_dram_close(e);
    kvt_hbm_close(e);
}

static const kvt_key *engine_key_of(void *ctx, uint32_t pg)
{
    return &kvt_pg(&((kvt_engine *)ctx)->pt, pg)->key;
}

static uint32_t engine_find(void *ctx, const kvt_key *k)
{
    return kvt_ptable_find(&((kvt_engine *)ctx)->pt, k);
}

static int open_policy(kvt_engine *e)
{
    struct kvt_policy_params pp = {
        .page_cap = e->pt.cap,
        /* The SSD tier opens after the policy: its slots from the config. */
        .slots = { e->hbm.arena.nslots, e->dram.arena.nslots,
                   e->cfg.ssd_bytes / e->page_bytes < UINT32_MAX
                       ? (uint32_t)(e->cfg.ssd_bytes / e->page_bytes) : UINT32_MAX },
        .meta = &e->meta_bytes,
        .host = { e, engine_key_of, engine_find },
    };
    e->pol = kvt_policy_find(e->policy_name);
    if (!kvt_policy_ops_ok(e->pol))
        return kvt_fail(KVT_ENOTSUP, "policy \"%s\" has an ops table this build cannot drive "
                        "(version %d, or a capability only in part)", e->policy_name,
                        e->pol->version);
    int r = e->pol->create(&pp, &e->pol_priv);
    if (r == 0)
        e->pol_cap = e->pt.cap;
    return r;
}

static void engine_free(kvt_engine *e)
{
    free(e->remote_url);
    free(e->remote_prefix);
    free(e->remote_auth_file);
    free(e->ssd_dir);
    free(e->policy_name);
    pthread_mutex_destroy(&e->lock);
    kvt_mover_fini(e);
    kvt_ssd_tier_fini(e);
    kvt_slots_fini(e);
    free(e);
}

/* *out = a copy of s (NULL for NULL); -ENOMEM. */
static int dup_str(const char *s, char **out)
{
    *out = s ? strdup(s) : NULL;
    return s && !*out ? -ENOMEM : 0;
}

static kvt_engine *engine_alloc(const kvt_config *cfg)
{
    kvt_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->up = (struct kvt_up_calls){
        .ssd_forget = kvt_ssd_forget,
        .dram_settled = kvt_dram_restore_spare,
        .ssd_busy = kvt_ssd_waiting,
        .wake_mover = kvt_mover_wake,
        .slot_let_go = kvt_slots_let_go,
    };
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
#if KVT_DEBUG
    /* A relock by the owner returns EDEADLK instead of hanging (kvt_lock). */
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
#endif
    pthread_mutex_init(&e->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    kvt_pages_init(e);
    kvt_mover_init(e);
    kvt_ssd_tier_init(e);
    kvt_slots_init(e);
    e->cfg = *cfg;
    e->page_bytes = cfg->page_bytes;
    /* A cache has no decode loop to plan by: its default is the prefix
     * policy (kvtier.h, KVT_FLAG_EVICT). */
    const char *pol = cfg->policy ? cfg->policy : "decode";
    if ((cfg->flags & KVT_FLAG_EVICT) && !strcmp(pol, "decode"))
        pol = "prefix";
    e->policy_name = strdup(pol);
    e->ssd_dir = cfg->ssd_dir ? strdup(cfg->ssd_dir) : NULL;
    if (!e->policy_name || (cfg->ssd_dir && !e->ssd_dir)) {
        engine_free(e);
        return NULL;
    }
    e->cfg.policy = e->policy_name;
    e->cfg.ssd_dir = e->ssd_dir;
    if (dup_str(cfg->remote_url, &e->remote_url) || dup_str(cfg->remote_prefix, &e->remote_prefix) ||
        dup_str(cfg->remote_auth_file, &e->remote_auth_file)) {
        engine_free(e);
        return NULL;
    }
    e->cfg.remote_url = e->remote_url;
    e->cfg.remote_prefix = e->remote_prefix;
    e->cfg.remote_auth_file = e->remote_auth_file;
    return e;
}

int kvt_open_ex(const kvt_config *cfg, const struct kvt_open_with *with, kvt_engine **out)
{
    static const struct kvt_open_with none;
    if (!with)
        with = &none;
    int r;
    kvt_clear_error();
    if (out)
        *out = NULL;
    if (!out)
        return kvt_fail(-EINVAL, "out is NULL");
    if ((r = kvt_config_check(cfg)) < 0)
        return r;
    kvt_engine *e = engine_alloc(cfg);
    if (!e)
        return kvt_fail(-ENOMEM, "out of memory");

    if ((r = pick_device(cfg, with, &e->hbm.dev, &e->hbm.dev_priv)) < 0) {
        if (!kvt_last_error()[0])
            kvt_fail(r, "could not open the device back-end: %s", kvt_strerror(r));
        goto out_engine;
    }
    if ((r = open_arenas(e)) < 0)
        goto out_device;
    uint32_t slots = e->hbm.arena.nslots + e->dram.arena.nslots;
    if ((r = kvt_ptable_init(&e->pt, slots, &e->meta_bytes)) < 0)
        goto out_arenas;
    if ((r = kvt_copy_open(e)) < 0)
        goto out_copy;
    if ((r = open_policy(e)) < 0)
        goto out_copy;
    if (cfg->ssd_bytes && (r = kvt_ssd_tier_open(e, with)) < 0)
        goto out_ssd;
    if (cfg->remote_url && (r = kvt_remote_open(&e->cfg, with, &e->remote)) < 0)
        goto out_ssd;
    if ((r = kvt_mover_start(e)) < 0)
        goto out_remote;
    *out = e;
    return 0;

out_remote:
    kvt_remote_close(e->remote, 0);
out_ssd:
    kvt_ssd_tier_close(e);
    e->pol->destroy(e->pol_priv);
out_copy:
    kvt_copy_close(e);
    kvt_ptable_fini(&e->pt);
out_arenas:
    close_arenas(e);
out_device:
    e->hbm.dev->close(e->hbm.dev_priv);
out_engine:
    engine_free(e);
    if (r == -ENOMEM && !kvt_last_error()[0])
        kvt_fail(r, "out of memory");
    return r;
}

KVT_API void kvt_close(kvt_engine *e)
{
    if (!e)
        return;
    /* A persisted engine never loses a page at close: everything goes to
     * SSD first. A failure here can only be reported on stderr. */
    if (kvt_persisted(e) && !e->failed) {
        int r = kvt_flush(e);
        if (r < 0)
            fprintf(stderr, "kvtier: flush at close failed: %s (%s)\n", kvt_strerror(r),
                    kvt_last_error());
    }
    /* What is queued for the shared tier is sent, within a few calls' time. */
    kvt_remote_close(e->remote, 4 * (e->cfg.remote_timeout_ms ? e->cfg.remote_timeout_ms : 200));
    e->remote = NULL;
    kvt_mover_stop(e);
    kvt_lock(e);
    kvt_copy_drain(e);
    kvt_settle(e);
    kvt_unlock(e);

    for (uint32_t i = 0; i < e->n_tickets; i++)
        free(e->tickets[i].pages);
    free(e->tickets);
    free((void *)e->sched.ids);
    kvt_get_recs_free(e);
    kvt_ssd_tier_close(e);
    e->pol->destroy(e->pol_priv);
    kvt_copy_close(e);
    kvt_ptable_fini(&e->pt);
    close_arenas(e);
    e->hbm.dev->close(e->hbm.dev_priv);
    engine_free(e);
}

/* Adds the counters of part to *sum: kvt_stats is all uint64_t. */
static void stats_add(kvt_stats *sum, const kvt_stats *part)
{
    _Static_assert(sizeof(kvt_stats) % sizeof(uint64_t) == 0, "kvt_stats holds uint64_t only");
    uint64_t *s = (uint64_t *)sum;
    const uint64_t *p = (const uint64_t *)part;
    for (size_t i = 0; i < sizeof(kvt_stats) / sizeof(uint64_t); i++)
        s[i] += p[i];
}

int kvt_engine_stats(kvt_engine *e, kvt_stats *out)
{
    pthread_mutex_lock(&e->lock);
    kvt_settle(e);
    /* Each module's counters (tiers.h): they count disjoint things. */
    const kvt_stats *parts[] = { &e->st_pins, &e->pages.st, &e->copy.st, &e->ssd_tier.st,
                                 &e->callers.st, &e->gets.st, &e->pipe.st, &e->prefetch.st,
                                 &e->slots.st };
    *out = (kvt_stats){ 0 };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        stats_add(out, parts[i]);
    out->capacity_pages[KVT_TIER_HBM] = e->hbm.arena.nslots;
    out->capacity_pages[KVT_TIER_DRAM] = e->dram.arena.nslots - 1; /* less the spare */
    if (e->ssd) {
        out->capacity_pages[KVT_TIER_SSD] = kvt_slots(e)->nslots(e->ssd);
        out->ssd_bad_slots = kvt_slots(e)->bad(e->ssd);
        out->io_fallback = e->io && e->cfg.io_backend == KVT_IO_AUTO && strcmp(e->io->name, "psync") == 0;
    }
    out->pages = e->pt.count;
    out->meta_bytes = e->meta_bytes;
    pthread_mutex_unlock(&e->lock);
    /* The shared tier keeps its own locks (remote.c): read outside ours. */
    if (e->remote)
        kvt_remote_stats(e->remote, out);
    return 0;
}

KVT_API size_t kvt_page_bytes(const kvt_engine *e) { return e->page_bytes; }
KVT_API const char *kvt_device_name(const kvt_engine *e) { return e->hbm.dev->name; }
void *kvt_engine_device_priv(kvt_engine *e) { return e->hbm.dev_priv; }

