/*
 * ssd_store.h — the SSD tier's files: segments, slots, the free map (internal).
 *
 * On-disk layout of an ssd_dir (format 1):
 *
 * The names are store/spill_dir.h's; kvtier uses a directory only if it was
 * empty or holds KVTIER, and touches nothing there but these:
 *
 *   <dir>/KVTIER            text, written once when the directory is made:
 *                             "kvtier-ssd 1\n"
 *                             "page_bytes <N>\n"          raw page size
 *                             "slot_bytes <N>\n"          = page_bytes (a multiple of 4096)
 *                             "slots_per_segment <N>\n"
 *   <dir>/seg-<NNNNNN>.kvt  segment files, NNNNNN = segment number in decimal,
 *                           zero-padded to 6 digits; each grows to at most
 *                           slots_per_segment * slot_bytes bytes, its blocks
 *                           allocated 64 MiB at a time as its slots are used. A page's stored bytes start at the slot's
 *                           offset and take stored_len bytes, padded with
 *                           zeros to a multiple of 4096 (O_DIRECT).
 *   <dir>/LOCK              empty; flock'ed by the engine that owns the directory
 *   <dir>/index/data.mdb    the LMDB index (store/ssd_index.h): key ->
 *                           {segment, offset, stored_len, raw_len, codec, crc32c
 *                           over (key, fingerprint, generation) and the stored
 *                           bytes, fingerprint, generation}; and, in its "meta"
 *                           database, the locations of bad slots (with persist:
 *                           written at close, retired again at open).
 *
 * Global slot number s lives in segment s / slots_per_segment at offset
 * (s % slots_per_segment) * slot_bytes.
 *
 * Rules that make a crash at any instant safe: a slot the committed index
 * points to is never written (a rewrite goes to a new slot; the old one is
 * freed only after the commit that stops pointing to it), and with persist
 * the data is fdatasync'ed before the index entry that names it commits.
 * For a power cut as well (tests/test_powerloss.c): with persist that
 * freeing commit is synced before the slot is freed, and a new segment's
 * directory entry is synced before any entry names it.
 *
 * Threads: all calls under the engine lock, except kvt_ssd_sync() and the
 * I/O itself, which the mover runs unlocked on slots it owns.
 *
 * Only store/ calls these: the tiers reach the SSD store through its
 * table (store/store.h, store/ssd_store_ops.c).
 */
#ifndef KVT_SSD_STORE_H
#define KVT_SSD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/ssd_index.h"

#define KVT_SSD_FORMAT 1
#define KVT_SSD_SEGMENT_BYTES (1ull << 30) /* target segment size */

struct kvt_ssd;
struct kvt_syncer;

struct kvt_ssd_open_info {
    bool wiped;             /* the directory was emptied (persist=0, damage, layout change) */
    uint64_t kept;          /* index entries kept */
    uint64_t dropped;       /* entries dropped: other fingerprint, bad location, duplicate slot */
    char message[512];      /* why, when wiped or dropped: printed once by the engine */
};

/* Opens or creates the store in dir (created if missing). A directory that
 * is neither empty nor holds KVTIER is refused (KVT_ECONFIG, nothing
 * touched). persist=0 wipes kvtier's files there. A KVTIER file of another
 * format or page size, or a damaged one, wipes them with a message. Index entries of another
 * fingerprint, pointing outside the capacity, or sharing a slot with an
 * earlier entry are deleted. fn is called for every entry kept (the engine
 * builds its page records), with its global slot number. */
typedef int (*kvt_ssd_entry_fn)(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v,
                                uint32_t slot);
int kvt_ssd_open(const char *dir, size_t page_bytes, uint64_t ssd_bytes, bool persist,
                 uint64_t fingerprint, kvt_ssd_entry_fn fn, void *ctx, struct kvt_ssd **out,
                 struct kvt_ssd_open_info *info);
void kvt_ssd_close(struct kvt_ssd *s);

uint32_t kvt_ssd_nslots(const struct kvt_ssd *s);
/* Slots that hold or may take a page this run: not bad, not parked. */
uint64_t kvt_ssd_usable_slots(const struct kvt_ssd *s);
uint32_t kvt_ssd_nfree(const struct kvt_ssd *s);
size_t kvt_ssd_slot_bytes(const struct kvt_ssd *s);
struct kvt_index *kvt_ssd_index(struct kvt_ssd *s);

/* A free slot (its segment created if new, its blocks allocated), or KVT_NONE.
 * *err tells why on KVT_NONE: KVT_EFULL when every slot is used, bad, or in
 * a segment that cannot be written (read-only file); -ENOSPC/-EDQUOT when
 * the disk has no room for a new segment (no slot is retired for it: the
 * allocation is tried again a second later); -ENOMEM/-EMFILE. */
uint32_t kvt_ssd_alloc(struct kvt_ssd *s, int *err);
void kvt_ssd_free(struct kvt_ssd *s, uint32_t slot);
/* The next n slots kvt_ssd_alloc will hand out get their blocks now, one
 * allocation per segment, as far as the disk can spare them: a hint, whose
 * failures the takes meet and report. Made before a batch's writes go out,
 * because ext4 makes an allocation in a file wait for the direct I/O in
 * flight on it (docs/performance.md#the-flushs-head). */
void kvt_ssd_prepare(struct kvt_ssd *s, uint32_t n);
/* Marks a slot bad after an I/O error: never handed out again. With persist
 * the close records the bad slots in the index and the next open retires
 * them again (a crash before the close forgets the ones since the open). */
void kvt_ssd_mark_bad(struct kvt_ssd *s, uint32_t slot);
uint64_t kvt_ssd_bad_slots(const struct kvt_ssd *s);
/* Opened with persist: data is synced before the index commits that name it. */
bool kvt_ssd_durable(const struct kvt_ssd *s);

/* The O_DIRECT descriptor and byte offset of a slot; write: one that can be
 * written. The error of opening its segment otherwise (-EACCES, ...). */
int kvt_ssd_locate(struct kvt_ssd *s, uint32_t slot, bool write, int *fd, uint64_t *off);
/* Slot number of an index entry's location, or KVT_NONE if invalid. */
uint32_t kvt_ssd_slot_of(const struct kvt_ssd *s, uint32_t segment, uint64_t offset);
void kvt_ssd_where(const struct kvt_ssd *s, uint32_t slot, uint32_t *segment, uint64_t *offset);

/* Marks the segment of slot as written since the last sync. */
void kvt_ssd_dirty(struct kvt_ssd *s, uint32_t slot);
/* fdatasync of every segment written since the last call. */
int kvt_ssd_sync(struct kvt_ssd *s);
/* Tests: a power-loss model that sees the segments' and the index's syncs
 * (the ops of sync NULL: none). */
void kvt_ssd_set_syncer(struct kvt_ssd *s, const struct kvt_syncer *sync);

struct kvt_store;
/* The files under an SSD store's handle (kvt_ssd_store_ops): for the lab's
 * tools, which look at where a page lies. */
struct kvt_ssd *kvt_ssd_of(struct kvt_store *s);

/* Reads the KVTIER file of dir, or of the directory open as dfd (named dir
 * in messages). 0, -ENOENT, KVT_ECORRUPT, or -errno (a link: -ELOOP). */
int kvt_ssd_read_layout(const char *dir, size_t *page_bytes, size_t *slot_bytes,
                        uint32_t *slots_per_segment);
int kvt_ssd_read_layout_at(int dfd, const char *dir, size_t *page_bytes, size_t *slot_bytes,
                           uint32_t *slots_per_segment);
/* The path of segment n in dir. */
void kvt_ssd_segment_path(const char *dir, uint32_t n, char *buf, size_t len);

#endif /* KVT_SSD_STORE_H */
