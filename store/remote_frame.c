/*
 * remote_frame.c — key names and value frames of the shared tier
 * (layout in remote_frame.h).
 */
#include "store/remote_frame.h"

#include <stdio.h>
#include <string.h>

#include "io/codec.h"

#define MAGIC 0x3152564bu /* "KVR1" read little-endian */
#define FRAME_VERSION 1

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t kvt_rframe_name(char *buf, size_t cap, const char *prefix, uint64_t fingerprint,
                       const kvt_key *k)
{
    int n = snprintf(buf, cap, "%s:%016llx:%016llx:%x:%x", prefix, (unsigned long long)fingerprint,
                     (unsigned long long)k->id, k->layer, k->index);
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

int kvt_rframe_prefix_ok(const char *prefix)
{
    size_t n = prefix ? strlen(prefix) : 0;
    if (n == 0 || n > KVT_RFRAME_PREFIX_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = prefix[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static void fill(uint8_t *h, const kvt_key *k, uint64_t fingerprint, uint32_t len)
{
    memset(h, 0, KVT_RFRAME_HDR);
    put32(h, MAGIC);
    put16(h + 4, FRAME_VERSION);
    put16(h + 6, KVT_CODEC_NONE);
    put64(h + 8, fingerprint);
    put64(h + 16, k->id);
    put32(h + 24, k->layer);
    put32(h + 28, k->index);
    put32(h + 32, len);
    put32(h + 36, len);
}

void kvt_rframe_header(uint8_t hdr[KVT_RFRAME_HDR], const kvt_key *k, uint64_t fingerprint,
                       const void *page, uint32_t len)
{
    fill(hdr, k, fingerprint, len);
    uint32_t crc = kvt_crc32c(kvt_crc32c(0, hdr, KVT_RFRAME_HDR), page, len);
    put32(hdr + 40, crc);
}

/* The header's checks: 0 and *crc (the CRC32C the value carries) and
 * *hdr_crc (of the header with that field 0), or KVT_ECORRUPT. */
static int check_header(const uint8_t *h, size_t len, const kvt_key *k, uint64_t fingerprint,
                        size_t page_bytes, uint32_t *crc, uint32_t *hdr_crc)
{
    /* The expected header is rebuilt whole and compared byte for byte:
     * every field is checked at once, and nothing from the wire is used as
     * a length or an offset. */
    if (len != KVT_RFRAME_HDR + page_bytes || page_bytes > UINT32_MAX)
        return KVT_ECORRUPT;
    uint8_t want[KVT_RFRAME_HDR];
    fill(want, k, fingerprint, (uint32_t)page_bytes);
    *crc = get32(h + 40);
    put32(want + 40, *crc);
    if (memcmp(want, h, KVT_RFRAME_HDR) != 0)
        return KVT_ECORRUPT;
    put32(want + 40, 0);
    *hdr_crc = kvt_crc32c(0, want, KVT_RFRAME_HDR);
    return 0;
}

int kvt_rframe_check_crc(const void *hdr, uint32_t page_crc, size_t len, const kvt_key *k,
                         uint64_t fingerprint, size_t page_bytes)
{
    uint32_t crc, hcrc;
    if (check_header(hdr, len, k, fingerprint, page_bytes, &crc, &hcrc))
        return KVT_ECORRUPT;
    return kvt_crc32c_combine(hcrc, page_crc, page_bytes) == crc ? 0 : KVT_ECORRUPT;
}

int kvt_rframe_check_parts(const void *hdr, const void *page, size_t len, const kvt_key *k,
                           uint64_t fingerprint, size_t page_bytes)
{
    uint32_t crc, hcrc;
    if (check_header(hdr, len, k, fingerprint, page_bytes, &crc, &hcrc))
        return KVT_ECORRUPT;
    return kvt_crc32c(hcrc, page, page_bytes) == crc ? 0 : KVT_ECORRUPT;
}

int kvt_rframe_check(const void *val, size_t len, const kvt_key *k, uint64_t fingerprint,
                     size_t page_bytes)
{
    if (len != KVT_RFRAME_HDR + page_bytes)
        return KVT_ECORRUPT;
    return kvt_rframe_check_parts(val, (const uint8_t *)val + KVT_RFRAME_HDR, len, k, fingerprint,
                                  page_bytes);
}
