/*
 * fuzz_layout.c — the SSD tier's layout file (store/ssd_store.c): the input
 * is written as <dir>/KVTIER and read back with kvt_ssd_read_layout_at, the
 * call every engine open, kvtier inspect and fsck make first.
 *
 * Rules: the result is 0 or KVT_ECORRUPT with a message naming the file; a
 * layout accepted has page_bytes >= 1, slot_bytes >= page_bytes and a
 * multiple of 4096, slots_per_segment >= 1; and the layout the store would
 * write for those values reads back as the same values.
 */
#include <fcntl.h>
#include <inttypes.h>

#include "base/base.h"
#include "tests/fuzz/fuzz.h"
#include "store/spill_dir.h"
#include "store/ssd_store.h"

static int dfd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    dfd = open(fuzz_dir(), O_RDONLY | O_DIRECTORY);
    fuzz_check(dfd >= 0, "cannot open the scratch directory");
    return 0;
}

static int read_back(size_t *pb, size_t *sb, uint32_t *sps)
{
    kvt_clear_error();
    return kvt_ssd_read_layout_at(dfd, fuzz_dir(), pb, sb, sps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pb = 0, sb = 0;
    uint32_t sps = 0;
    fuzz_write_file(fuzz_dir(), KVT_SPILL_LAYOUT, data, size);
    int r = read_back(&pb, &sb, &sps);
    fuzz_check(r == 0 || r == KVT_ECORRUPT, "a layout file is good or damaged, nothing else");
    if (r) {
        fuzz_check(strstr(kvt_last_error(), KVT_SPILL_LAYOUT) != NULL,
                   "the message names the damaged file");
        return 0;
    }
    fuzz_check(pb >= 1 && sb >= pb && sb % 4096 == 0 && sps >= 1, "an accepted layout is sane");

    /* What write_layout (ssd_store.c) writes for these values. */
    char text[256];
    int n = snprintf(text, sizeof text,
                     "kvtier-ssd %d\npage_bytes %zu\nslot_bytes %zu\nslots_per_segment %" PRIu32
                     "\n", KVT_SSD_FORMAT, pb, sb, sps);
    fuzz_write_file(fuzz_dir(), KVT_SPILL_LAYOUT, text, (size_t)n);
    size_t pb2, sb2;
    uint32_t sps2;
    fuzz_check(read_back(&pb2, &sb2, &sps2) == 0 && pb2 == pb && sb2 == sb && sps2 == sps,
               "the layout written for accepted values reads back the same");
    return 0;
}
