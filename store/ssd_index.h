/*
 * ssd_index.h — the SSD tier's LMDB index (internal).
 *
 * Maps a kvt_key to where and how its page is stored in the segment files.
 * One LMDB environment in <ssd_dir>/index/data.mdb (MDB_NOLOCK: no lock.mdb). Writes are
 * grouped: one write transaction per batch of pages (group commit), never one
 * per page. Durability order is the caller's (store/ssd_store.c): data written
 * and, with persist, fdatasync'ed before the batch that indexes it commits.
 *
 * Threads: one thread writes (the mover); readers may be on any thread, each
 * call opens its own read transaction. MDB_NOTLS is used, so read
 * transactions are not tied to threads.
 */
#ifndef KVT_SSD_INDEX_H
#define KVT_SSD_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/kvtier.h"

/* The stored value. Fixed layout, little-endian on disk (the struct is
 * written as is; x86-64 and aarch64 only), versioned by `version`. */
struct kvt_ssd_entry {
    uint16_t version;        /* KVT_SSD_ENTRY_VERSION */
    uint8_t codec;           /* KVT_CODEC_* actually applied */
    uint8_t flags;           /* reserved, 0 */
    uint32_t segment;        /* segment file number */
    uint64_t offset;         /* byte offset in the segment, 4096-aligned */
    uint32_t stored_len;     /* bytes on disk (before padding to 4096) */
    uint32_t raw_len;        /* bytes after decoding (= page_bytes) */
    uint32_t crc;            /* CRC32C of the binding header, then the stored bytes:
                                kvt_crc32c(kvt_ssd_bind(key, fingerprint, generation),
                                           bytes, stored_len) */
    uint32_t pad;
    uint64_t fingerprint;    /* model/dtype/layout identity at write time */
    uint64_t generation;     /* monotonically increasing write number */
};
#define KVT_SSD_ENTRY_VERSION 2   /* 1: the CRC covered the stored bytes alone */

/* The CRC32C of the 32-byte header that binds a page to its entry: key id,
 * layer, index, fingerprint and generation, little-endian. An entry moved to
 * another key, or whose key, fingerprint or generation is damaged, then
 * fails the check when its page is read. */
uint32_t kvt_ssd_bind(const kvt_key *k, uint64_t fingerprint, uint64_t generation);

struct kvt_index;
struct kvt_syncer;

struct kvt_index_open_info {
    uint64_t dropped_fingerprint;   /* entries of another fingerprint removed at open */
    uint64_t kept;                  /* entries kept */
    uint64_t upgraded;              /* version 1 entries rewritten as version 2 */
    bool wiped;                     /* the index was damaged or persist=0: started empty */
    char message[256];              /* why it was wiped, for the engine to print once */
};

/* Opens (creating) the index in dir (which must exist; the caller holds its
 * LOCK). persist=0: any old index is deleted first. persist=1: a version 1
 * index is upgraded in place; entries whose fingerprint differs from
 * fingerprint are deleted; an index that cannot be opened or read (garbage file,
 * truncated, wrong version) is deleted and recreated empty, with
 * info->wiped and info->message saying so — never a crash. The map starts at
 * map_bytes (0 = 64 MiB) and grows by doubling on MDB_MAP_FULL.
 * Returns 0, -errno, or KVT_ECORRUPT only if even a fresh index cannot be
 * made. */
int kvt_index_open(const char *dir, bool persist, uint64_t fingerprint, size_t map_bytes,
                   struct kvt_index **out, struct kvt_index_open_info *info);

/* For kvtier inspect and fsck: opens the existing index in dir as it is —
 * no fingerprint filter, no wipe, nothing written at open. Every entry is
 * read once to check it. readonly: an MDB_RDONLY environment (commits fail
 * with -EACCES). repair: read-write, so kvt_index_commit can delete entries.
 * Returns 0, -ENOENT when dir holds no index, KVT_ECORRUPT when it is
 * damaged (kvt_last_error() says how), or -errno. */
int kvt_index_open_readonly(const char *dir, struct kvt_index **out);
int kvt_index_open_repair(const char *dir, struct kvt_index **out);

void kvt_index_close(struct kvt_index *ix);

/* Where an entry's bytes are (struct kvt_ssd_entry's segment and offset). */
struct kvt_index_where {
    uint32_t segment;
    uint64_t offset;
};
/* One write transaction deleting each keys[i] only while its entry still
 * names where[i]: a deletion queued for one version never takes the entry
 * a later write of the same key made. Durable as kvt_index_commit's
 * deleting commits are. Returns 0 or -errno/KVT_E*. */
int kvt_index_delete_where(struct kvt_index *ix, const kvt_key *keys,
                           const struct kvt_index_where *where, size_t m);

/* One write transaction: put n entries (replacing existing keys) and delete m
 * keys (missing ones ignored). With sync, the commit is durable on return
 * (LMDB's lazy flag is off for that commit); without, it is durable at the
 * next synced commit or kvt_index_sync() — except that with persist a
 * commit that deletes is always synced (the slots it frees may be written
 * at once). Returns 0 or -errno/KVT_E*; on error nothing of the batch is
 * applied. */
int kvt_index_commit(struct kvt_index *ix, const kvt_key *put_keys,
                     const struct kvt_ssd_entry *put_vals, size_t n, const kvt_key *del_keys,
                     size_t m, bool sync);
int kvt_index_sync(struct kvt_index *ix);

/* Looks a key up. 0 and *out, KVT_ENOTFOUND, or -errno. */
int kvt_index_get(struct kvt_index *ix, const kvt_key *k, struct kvt_ssd_entry *out);

/* Calls fn for every entry in key order, in one read transaction; stops early
 * when fn returns nonzero (and returns that value). */
typedef int (*kvt_index_fn)(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v);
int kvt_index_foreach(struct kvt_index *ix, kvt_index_fn fn, void *ctx);

/* Entries in the index. */
uint64_t kvt_index_count(struct kvt_index *ix);

/* The largest generation stored (0 when empty): new writes continue above it. */
uint64_t kvt_index_max_generation(struct kvt_index *ix);

/* Bad slots: locations retired after a write or read failed on the medium,
 * kept so that a reopen never hands them out again. Stored in the "meta"
 * database under "bad" + segment + offset (big-endian), which readers of
 * the pages never see. put: n locations in one synced transaction (existing
 * ones kept); 0 or -errno/KVT_E*. foreach: fn for each, in location order;
 * stops when fn returns nonzero (that value is returned). */
int kvt_index_bad_put(struct kvt_index *ix, const uint32_t *segment, const uint64_t *offset,
                      size_t n);
typedef int (*kvt_index_bad_fn)(void *ctx, uint32_t segment, uint64_t offset);
int kvt_index_bad_foreach(struct kvt_index *ix, kvt_index_bad_fn fn, void *ctx);

/* Tests: a power-loss model that sees this index's commits (the ops of
 * s NULL: none). */
void kvt_index_set_syncer(struct kvt_index *ix, const struct kvt_syncer *s);

#endif /* KVT_SSD_INDEX_H */
