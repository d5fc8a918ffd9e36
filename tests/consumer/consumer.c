/* consumer.c: a program outside the tree that uses an installed kvtier
 * (tests/consumer/check.cmake builds it through find_package and through
 * pkg-config). It stores a page, reads it back and checks the bytes. */
#include <stdio.h>
#include <string.h>

#include <kvtier.h>

enum { PAGE = 4096 };
static unsigned char in[PAGE], out[PAGE];

int main(void)
{
    kvt_config cfg;
    kvt_config_init(&cfg);
    cfg.page_bytes = PAGE;
    cfg.hbm_bytes = 4 * PAGE;
    cfg.dram_bytes = 4 * PAGE;
    cfg.device = KVT_DEVICE_HOST;
    kvt_engine *e;
    int r = kvt_open(&cfg, &e);
    if (r) {
        fprintf(stderr, "kvt_open: %s: %s\n", kvt_strerror(r), kvt_last_error());
        return 1;
    }
    for (int i = 0; i < PAGE; i++)
        in[i] = (unsigned char)(i * 7 + 3);
    kvt_key k = { 42, 0, 1 };
    const void *src = in;
    void *dst = out;
    int found = 0;
    if ((r = kvt_put(e, &k, 1, &src, 0)) < 0 || (r = kvt_get(e, &k, 1, &dst, 0, &found)) < 0) {
        fprintf(stderr, "kvtier: %s: %s\n", kvt_strerror(r), kvt_last_error());
        kvt_close(e);
        return 1;
    }
    kvt_close(e);
    if (!found || memcmp(in, out, PAGE) != 0) {
        fprintf(stderr, "kvtier consumer: the page read back differs\n");
        return 1;
    }
    printf("kvtier consumer: ok, kvtier %s\n", kvt_version_string());
    return 0;
}
