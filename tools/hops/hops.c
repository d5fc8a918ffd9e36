/*
 * hops.c — which functions, in which files, one kvt_get of one page calls:
 * the measurement behind docs/get-path.md (tools/hops/hops.sh builds and
 * runs it).
 *
 * Linked with a libkvtier built at -O0 with -finstrument-functions (header
 * inlines excluded, nothing inlined away), it records the calling thread's
 * function entries, with their call sites, during the third kvt_get of one
 * 128 KiB page, on the host back-end with an SSD tier, policy "prefix" and
 * KVT_FLAG_EVICT, in two cases: the page resident in DRAM, and the page
 * only on SSD read into a 4 KiB-aligned buffer (the caller reads it in
 * place); then a kvt_put of a new key into the full cache, which evicts. It prints "CASE callee_address call_site_address" per entry;
 * hops.sh turns addresses into files with addr2line and counts a hop for
 * each call whose callee lives in another file than its caller. The mover's
 * and the I/O back-end's threads are not recorded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/kvtier.h"

#define MAXREC (1 << 20)
#define PB (128u << 10)

static __thread int recording;
static void *rec_fn[MAXREC], *rec_site[MAXREC];
static int nrec;

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *site)
{
    if (recording && nrec < MAXREC) {
        rec_fn[nrec] = fn;
        rec_site[nrec] = site;
        nrec++;
    }
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)fn;
    (void)site;
}

static void die(const char *what, int r)
{
    fprintf(stderr, "hops: %s: %d %s\n", what, r, kvt_last_error());
    exit(1);
}

/* The third get of key k into dst, recorded as case name. */
static void measure(kvt_engine *e, const char *name, kvt_key k, void *dst)
{
    int found = 0, r;
    for (int i = 0; i < 3; i++) {
        nrec = 0;
        recording = i == 2;
        r = kvt_get(e, &k, 1, &dst, 0, &found);
        recording = 0;
        if (r < 0 || found != 1)
            die(name, r < 0 ? r : -found);
    }
    for (int i = 0; i < nrec; i++)
        printf("%s %p %p\n", name, rec_fn[i], rec_site[i]);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hops DIR   (DIR: a new directory for the SSD tier)\n");
        return 2;
    }
    kvt_config cfg;
    kvt_config_init(&cfg);
    cfg.page_bytes = PB;
    cfg.hbm_bytes = PB;
    cfg.dram_bytes = 4 * PB;
    cfg.ssd_bytes = 64 * PB;
    cfg.ssd_dir = argv[1];
    cfg.device = KVT_DEVICE_HOST;
    cfg.policy = "prefix";
    cfg.flags = KVT_FLAG_EVICT;
    kvt_engine *e;
    int r = kvt_open(&cfg, &e);
    if (r < 0)
        die("open", r);
    void *page = NULL, *dst = NULL;
    if (posix_memalign(&page, 4096, PB) || posix_memalign(&dst, 4096, PB))
        die("memory", -12);
    const void *src = page;
    /* Key 1 first, then enough others that key 1 leaves DRAM for SSD. */
    for (uint64_t id = 1; id <= 16; id++) {
        memset(page, (int)id, PB);
        kvt_key k = { id, 0, 0 };
        if ((r = kvt_put(e, &k, 1, &src, 0)) < 0)
            die("put", r);
    }
    if ((r = kvt_flush(e)) < 0)
        die("flush", r);
    kvt_key ssd = { 1, 0, 0 }, dram = { 16, 0, 0 };
    kvt_tier where[2];
    kvt_key both[2] = { ssd, dram };
    if ((r = kvt_exists(e, both, 2, where)) < 0)
        die("exists", r);
    if (where[0] != KVT_TIER_SSD)
        die("key 1 not only on SSD", where[0]);
    measure(e, "ssd", ssd, dst);
    measure(e, "resident", dram, dst);
    /* A put into a full cache (capacity 1 + 4 - 1 + 64 pages): each new key
     * evicts the policy's victim. */
    for (uint64_t id = 17; id <= 3 + 80; id++) {
        memset(page, (int)id, PB);
        kvt_key k = { id, 0, 0 };
        nrec = 0;
        recording = id == 3 + 80;
        r = kvt_put(e, &k, 1, &src, 0);
        recording = 0;
        if (r < 0)
            die("put into a full cache", r);
    }
    for (int i = 0; i < nrec; i++)
        printf("put_evict %p %p\n", rec_fn[i], rec_site[i]);
    kvt_close(e);
    free(page);
    free(dst);
    return 0;
}
