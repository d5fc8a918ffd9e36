/*
 * fuzz_remote_frame.c — what a load from the shared tier runs to decide
 * "this key's page or a miss" on bytes a server sent (store/remote_frame.c
 * kvt_rframe_check): the wire is not trusted.
 *
 * Input: mode (1 byte), key id, layer, index (8 + 4 + 4), fingerprint (8),
 * page size in 4 KiB units less one (1 byte, so 4..1024 KiB), then the
 * value. Mode 0 checks the value as sent. Mode 1 frames the value's bytes
 * as a page (padded or cut to the page size) under the key, then flips the
 * bit the next two input bytes name.
 *
 * Rules: the check never reads past the value; the check from the page's
 * CRC (what a load computes as it copies) agrees with the one from its bytes (its buffer is exactly its
 * length; ASan watches); a value it accepts is exactly the frame kvtier
 * writes for that key, fingerprint and payload; a frame with any one bit
 * flipped is refused; an intact frame is accepted, and refused under any
 * other key or fingerprint.
 */
#include <stdlib.h>
#include <string.h>

#include "io/codec.h"
#include "store/remote_frame.h"
#include "tests/fuzz/fuzz.h"

#define HDR_IN 26

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HDR_IN)
        return 0;
    kvt_key k = { le(data + 1, 8), (uint32_t)le(data + 9, 4), (uint32_t)le(data + 13, 4) };
    uint64_t fp = le(data + 17, 8);
    size_t page = ((size_t)data[25] % 16 + 1) * 4096;
    const uint8_t *in = data + HDR_IN;
    size_t n = size - HDR_IN;
    if (data[0] % 2 == 0) {
        uint8_t *v = malloc(n ? n : 1);
        memcpy(v, in, n);
        int whole = kvt_rframe_check(v, n, &k, fp, page);
        if (n >= KVT_RFRAME_HDR) {
            uint32_t pc = kvt_crc32c(0, v + KVT_RFRAME_HDR, n - KVT_RFRAME_HDR);
            fuzz_check(kvt_rframe_check_crc(v, pc, n, &k, fp, page) == whole,
                       "a check from the page's CRC agrees with one from its bytes");
        }
        if (whole == 0) {
            uint8_t want[KVT_RFRAME_HDR];
            fuzz_check(n == KVT_RFRAME_HDR + page, "an accepted value is a header and a page");
            kvt_rframe_header(want, &k, fp, v + KVT_RFRAME_HDR, (uint32_t)page);
            fuzz_check(memcmp(want, v, KVT_RFRAME_HDR) == 0,
                       "an accepted value carries exactly the header kvtier writes");
        }
        free(v);
        return 0;
    }
    size_t flip = n >= 2 ? le(in, 2) : 0;
    uint8_t *v = calloc(1, KVT_RFRAME_HDR + page);
    memcpy(v + KVT_RFRAME_HDR, in, n < page ? n : page);
    kvt_rframe_header(v, &k, fp, v + KVT_RFRAME_HDR, (uint32_t)page);
    fuzz_check(kvt_rframe_check(v, KVT_RFRAME_HDR + page, &k, fp, page) == 0,
               "an intact frame is accepted");
    kvt_key other = k;
    other.index ^= 1;
    fuzz_check(kvt_rframe_check(v, KVT_RFRAME_HDR + page, &other, fp, page) == KVT_ECORRUPT,
               "a frame is refused under another key");
    fuzz_check(kvt_rframe_check(v, KVT_RFRAME_HDR + page, &k, fp ^ 1, page) == KVT_ECORRUPT,
               "a frame is refused under another fingerprint");
    size_t bit = flip % ((KVT_RFRAME_HDR + page) * 8);
    v[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    fuzz_check(kvt_rframe_check(v, KVT_RFRAME_HDR + page, &k, fp, page) == KVT_ECORRUPT,
               "a frame with one bit flipped is refused");
    free(v);
    return 0;
}
