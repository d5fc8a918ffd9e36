/* docs/example.c: a decode loop over three tiers (docs/api.md; the README shows an excerpt). */
#include <stdio.h>
#include <string.h>

#include <kvtier.h>

enum { SEQS = 2, LAYERS = 4, PAGES = 16, PAGE = 64 << 10 };  /* 128 pages of 64 KiB */
static unsigned char buf[PAGE];

int main(int argc, char **argv)
{
    kvt_config cfg;
    kvt_config_init(&cfg);
    cfg.page_bytes = PAGE;
    cfg.hbm_bytes = 32 * PAGE;                 /* a quarter of the KV in HBM, */
    cfg.dram_bytes = 32 * PAGE;                /* a quarter in DRAM, */
    cfg.ssd_bytes = 256 * PAGE;                /* the rest on SSD */
    cfg.ssd_dir = argc > 1 ? argv[1] : "kv-example";   /* made if missing */
    cfg.device = KVT_DEVICE_HOST;              /* or a CUDA ordinal */
    cfg.fingerprint = 0x8b16;                  /* model/dtype/layout identity */
    kvt_engine *e;
    int r = kvt_open(&cfg, &e);
    if (r) {
        fprintf(stderr, "kvt_open: %s: %s\n", kvt_strerror(r), kvt_last_error());
        return 1;
    }

    uint64_t ids[SEQS] = { 7, 8 };             /* prefill: copy each page in */
    for (int s = 0; s < SEQS; s++)
        for (uint32_t l = 0; l < LAYERS; l++)
            for (uint32_t i = 0; i < PAGES; i++) {
                kvt_key k = { ids[s], l, i };
                const void *src = buf;
                memset(buf, (int)(s * 64 + l * 16 + i), PAGE);
                if ((r = kvt_put(e, &k, 1, &src, 0)) < 0)
                    goto fail;
            }

    kvt_schedule sch = { ids, SEQS, LAYERS, KVT_ORDER_LAYER_MAJOR, 0, 0 };
    if ((r = kvt_set_schedule(e, &sch)) < 0)   /* the loop below, for the policy */
        goto fail;
    unsigned wrong = 0;
    for (int step = 0; step < 4; step++)
        for (uint32_t l = 0; l < LAYERS; l++)
            for (int s = 0; s < SEQS; s++) {
                kvt_key keys[PAGES];
                void *ptrs[PAGES];
                for (uint32_t i = 0; i < PAGES; i++)
                    keys[i] = (kvt_key){ ids[s], l, i };
                if ((r = kvt_advance(e, ids[s], l)) < 0 ||       /* prefetch what comes next */
                    (r = kvt_acquire(e, keys, PAGES, ptrs)) < 0) /* in HBM and pinned */
                    goto fail;
                /* attention over ptrs[0..PAGES-1]: device pointers, host memory here */
                wrong += *(unsigned char *)ptrs[PAGES - 1] != s * 64 + l * 16 + PAGES - 1;
                if ((r = kvt_release(e, keys, PAGES, 0)) < 0)
                    goto fail;
            }

    kvt_stats st;
    kvt_get_stats(e, &st);
    printf("wrong pages: %u; hits hbm %llu, dram %llu, ssd %llu; read from SSD %llu KiB\n",
           wrong, (unsigned long long)st.hits[KVT_TIER_HBM],
           (unsigned long long)st.hits[KVT_TIER_DRAM], (unsigned long long)st.hits[KVT_TIER_SSD],
           (unsigned long long)(st.bytes_up[KVT_TIER_DRAM] >> 10));
    kvt_close(e);
    return wrong != 0;
fail:
    fprintf(stderr, "kvtier: %s: %s\n", kvt_strerror(r), kvt_last_error());
    kvt_close(e);
    return 1;
}
