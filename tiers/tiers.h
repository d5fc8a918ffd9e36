/*
 * tiers.h — the tiers layer's calls (internal): room in HBM and DRAM, the
 * SSD tier and its pipeline, the callers' reads, the decode team, the shared
 * tier. The types are core/engine.h's.
 */
#ifndef KVT_TIERS_H
#define KVT_TIERS_H

#include "core/engine.h"
#include "store/store.h"

/* The SSD store's slots: the tiers reach the store only through its table
 * (with an SSD tier, the store has KVT_STORE_SLOTS). */
static inline const struct kvt_store_slot_ops *kvt_slots(const kvt_engine *e)
{
    return e->ssd->ops->slots;
}

/* Tells the store that n takes are coming (its optional prepare). */
static inline void kvt_slots_prepare(kvt_engine *e, uint32_t n)
{
    if (n && kvt_slots(e)->prepare)
        kvt_slots(e)->prepare(e->ssd, n);
}

/* ------------------------------------------------------------- ssd_team.c */

/* CPUs this process may run on (its affinity mask), at least 1. */
unsigned kvt_cpus_usable(void);
/* A fork-join team: the calling thread and one helper thread. */
struct kvt_team;
/* Item i of a round, run by worker 0 (the caller of kvt_team_for) or 1. */
typedef void (*kvt_team_fn)(void *arg, uint32_t i, unsigned worker);
/* Starts the helper. 0 or -errno; *out is the caller's, for kvt_team_close. */
int kvt_team_open(struct kvt_team **out);
/* Stops and frees it (NULL: nothing). No round may be running. */
void kvt_team_close(struct kvt_team *t);
/* Runs fn(arg, i, worker) once for every i in [0, n), the caller working
 * beside the helper, and returns when all have returned. t NULL: the caller
 * runs them all. One round at a time (the mover's). */
void kvt_team_for(struct kvt_team *t, uint32_t n, kvt_team_fn fn, void *arg);

/* Tests only: the piece size of engines opened from now on (ssd_pipe.c). */
extern size_t kvt_test_piece_bytes;

/* ------------------------------------------------------------- hbm.c */

/* Waits for w (a transfer that makes room in HBM), with the prefetcher
 * standing back meanwhile (room_waiters). Locked; kvt_wait_on's answer. */
int kvt_hbm_wait_room(kvt_engine *e, struct kvt_wait *w);
/* The HBM arena on the opened device (and the write-back watermark); close
 * frees it. 0 or a negative error, said. */
int kvt_hbm_open(kvt_engine *e);
void kvt_hbm_close(kvt_engine *e);

/* Frees (or starts freeing) need HBM slots: clean victims dropped, dirty ones
 * written down. 0, -EAGAIN with *w, or KVT_EFULL. */
int kvt_make_room_hbm(kvt_engine *e, uint32_t need, struct kvt_wait *w);
/* Writes back up to max dirty pages, coldest first (all: every dirty page,
 * pinned ones too, for flush); *fence the last D2H fence (0: none). */
int kvt_writeback(kvt_engine *e, uint32_t max_pages, bool all, uint64_t *fence);

/* ------------------------------------------------------------- dram.c */

/* The DRAM arena, pinned by the device back-end, with its spare slot; close
 * frees it. 0 or a negative error, said. */
int kvt_dram_open(kvt_engine *e);
void kvt_dram_close(kvt_engine *e);

enum {
    KVT_SLOT_STEAL = 1, /* may take the DRAM slot of a page whose copy lives elsewhere too */
    KVT_SLOT_SPARE = 2, /* may take the last free slot (evictions only) */
};
/* A DRAM slot for pg, stored in the page; KVT_NONE when there is no room. */
uint32_t kvt_dram_slot(kvt_engine *e, uint32_t pg, int how);
/* Drops one third copy (DRAM copy of a page HBM holds and SSD backs) to
 * make room for page x: for x KVT_NONE (a page needed now) any such copy,
 * else only one used later than x. false when none goes. */
bool kvt_dram_drop_third_copy(kvt_engine *e, uint32_t x);
/* Free DRAM slots, less the spare (only evictions may take it). */
uint32_t kvt_dram_room(const kvt_engine *e);
/* Frees DRAM slots (beyond the spare) for need pages: drops redundant
 * copies, queues SSD write-backs of DRAM-only pages. 0, -EAGAIN with *w,
 * or KVT_EFULL. */
int kvt_make_room_dram(kvt_engine *e, uint32_t need, struct kvt_wait *w);
/* The spare slot is in use: give one back once a copy can go for free. */
void kvt_dram_restore_spare(kvt_engine *e);
/* Bulk, for benchmarks: drops every DRAM copy that SSD also holds. */
void kvt_dram_drop_redundant(kvt_engine *e);
/* A flush's write-backs begin (on) or end: see struct kvt_dram, flushing. */
void kvt_dram_flushing(kvt_engine *e, bool on);
/* With persist: queues SSD writes of DRAM-only pages while the SSD has
 * little to do (the mover, each time it runs; bounded). */
void kvt_dram_write_ahead(kvt_engine *e);
/* Whether kvt_dram_write_ahead may find work now (for a caller's wake of
 * the mover; cheap). */
bool kvt_dram_ahead_due(const kvt_engine *e);
/* No write-ahead in this engine (an opener's kvt_open_with.no_write_ahead). */
void kvt_dram_write_ahead_off(kvt_engine *e);
/* Whether pages may go down before they must: no write-ahead was asked for
 * at open, and the disk has not refused one. A put's own writes
 * (kvt_ssd_caller_writes) are writes ahead too. */
bool kvt_dram_writes_ahead(const kvt_engine *e);

/* ------------------------------------------------------------- ssd.c */

/* Opens the SSD tier, over the I/O back-end and syncer of with, if any. */
int kvt_ssd_tier_open(kvt_engine *e, const struct kvt_open_with *with);
/* What the pipe, the callers' reads and the DRAM tier change of the SSD
 * tier's state (struct kvt_ssd_tier, ssd.c's). Locked.
 * queue_drain: hands queued requests to take(), reads first, each once;
 * take returns false to end a pass (no job for it); the taken leave the
 * queue, the rest keep their order. take_dels: the deletions to commit
 * (*n of them, the caller's to free), which keep the tier busy until
 * kvt_ssd_done(e, n != 0, ...). done: jobs finished; progress: waiters look
 * again. callers_done: callers' own reads ended (progress: waiters look again).
 * slot_meta: what a written slot holds. read_kept, write_failed: the last
 * errors, for kvt_flush and the room makers; take_evict_err: an eviction's
 * write error, said once (0: none). */
typedef bool (*kvt_ssd_take_fn)(kvt_engine *e, const struct kvt_ssd_req *q, void *ctx);
void kvt_ssd_queue_drain(kvt_engine *e, kvt_ssd_take_fn take, void *ctx);
struct kvt_ssd_del *kvt_ssd_take_dels(kvt_engine *e, uint32_t *n);
void kvt_ssd_done(kvt_engine *e, uint64_t jobs, bool progress);
void kvt_ssd_callers_done(kvt_engine *e);
void kvt_ssd_slot_meta(kvt_engine *e, uint32_t slot, struct kvt_ssd_meta m);
void kvt_ssd_read_kept(kvt_engine *e, int err);
void kvt_ssd_write_failed(kvt_engine *e, int err, bool evict);
int kvt_ssd_take_evict_err(kvt_engine *e);
/* A page record's SSD slot (kvt_page.ssd_slot, ssd.c's): set, when a write
 * of pg to slot committed; moved, when a new version of a page takes over
 * the old one's entry (the old one then names none). */
void kvt_ssd_slot_set(kvt_engine *e, uint32_t pg, uint32_t slot);
void kvt_ssd_slot_move(kvt_engine *e, uint32_t from, uint32_t to);
/* The SSD tier's condition variable (engine_alloc, engine_free): waits for
 * SSD progress exist with or without a tier. */
void kvt_ssd_tier_init(kvt_engine *e);
void kvt_ssd_tier_fini(kvt_engine *e);
void kvt_ssd_tier_close(kvt_engine *e);
/* Queues an SSD read of pg into its (allocated) DRAM slot. */
void kvt_ssd_queue_read(kvt_engine *e, uint32_t pg);
/* Queues an SSD read of pg into buf (4096-aligned, page_bytes), leaving the
 * page's tiers as they are; kvt_ssd_transient_result() says when it is done. */
int kvt_ssd_queue_read_transient(kvt_engine *e, uint32_t pg, void *buf);
/* The same for a read its caller tried once already (ssd_caller.c). */
int kvt_ssd_caller_retry(kvt_engine *e, uint32_t pg, void *buf);
/* 1 while pending; then 0 or the error, and the entry is gone. */
int kvt_ssd_transient_result(kvt_engine *e, uint32_t pg, void *buf, bool *kept);
struct kvt_transient *kvt_ssd_transient_of(kvt_engine *e, uint32_t pg, void *buf);
/* Queues a write of pg's DRAM copy to a new SSD slot. 0, KVT_EFULL,
 * -EAGAIN (a slot is being freed) or -ENOSPC. */
int kvt_ssd_queue_write(kvt_engine *e, uint32_t pg, bool evict);
/* Hands the mover pg's write that its put made itself (w: res 0, from
 * kvt_ssd_caller_write; page_crc: the CRC32C, seed 0, of the bytes it
 * wrote), to be committed with the next group and finished as the mover's
 * own writes are: the page is XFER_SSD_WRITE until then. pg is committed
 * and nothing of it in flight. 0, or -ENOMEM with the slot given back (the
 * page goes down the usual way). */
int kvt_ssd_queue_written(kvt_engine *e, uint32_t pg, const struct kvt_caller_write *w,
                          uint32_t page_crc);
/* The page is going away: its index entry is deleted by the mover. */
void kvt_ssd_forget(kvt_engine *e, uint32_t pg);
/* Whether a failed SSD read leaves the page and its index entry in place:
 * every error but a proven-bad page (KVT_ECORRUPT) or the medium's (-EIO). */
bool kvt_ssd_read_keeps_page(int res);
/* The error of a page whose last read failed that way (err, or the one
 * recorded): clears PG_READ_ERR so that the next load tries again, and
 * names the page in kvt_last_error(). */
int kvt_ssd_read_error(kvt_engine *e, uint32_t pg, int err);
/* With persist, how many pages the SSD holds durably at once: its slots
 * less the retired ones and a few kept free for copy-on-write (a rewrite
 * takes a new slot before its old one is freed). */
uint64_t kvt_ssd_durable_room(const kvt_engine *e);
/* Whether the SSD tier has anything queued, being dropped or in the pipe. */
bool kvt_ssd_waiting(const kvt_engine *e);
/* A flush's pages: those held in HBM or DRAM without a current SSD copy
 * when it began, each named by its record and the record's birth. */
struct kvt_flush_item {
    uint32_t pg;
    uint32_t birth;
};
struct kvt_flush_set {
    struct kvt_flush_item *items;
    size_t n;
    int err;    /* why a write could not be queued, for the answer */
    uint32_t on_device; /* of those still missing after a pass, the ones with a copy to or
                           from HBM in flight: the pass waits for the device, not the SSD */
};
/* Lists the pages into *fs (which the caller ends with kvt_ssd_flush_end).
 * -ENOMEM. */
int kvt_ssd_flush_begin(kvt_engine *e, struct kvt_flush_set *fs);
/* Queues a write of each listed page that still lacks an SSD copy and has
 * a DRAM copy to write from, and waits (unlocked) until the tier is idle.
 * Returns how many listed pages still lack one (a page only in HBM needs
 * its DRAM copy back first), or the engine's failure. */
int64_t kvt_ssd_flush_pass(kvt_engine *e, struct kvt_flush_set *fs);
/* The error for missing pages left after the last pass, named. */
int kvt_ssd_flush_error(kvt_engine *e, const struct kvt_flush_set *fs, int64_t missing);
void kvt_ssd_flush_end(kvt_engine *e, struct kvt_flush_set *fs);
/* Whether a flush is between kvt_ssd_flush_begin and _end. */
bool kvt_ssd_flushing(const kvt_engine *e);
/* Writes every page only in DRAM without a current SSD copy and waits
 * (benchmarks: no page is in HBM). */
int kvt_ssd_flush(kvt_engine *e);
/* Bulk, for benchmarks: reads every SSD-only page into free DRAM slots and
 * waits. Returns how many were read. */
uint64_t kvt_ssd_read_all(kvt_engine *e);

/* ------------------------------------------------------------- ssd_pipe.c (the mover) */

int kvt_ssd_pipe_init(kvt_engine *e);
void kvt_ssd_pipe_fini(kvt_engine *e);
/* Whether the pipe or its queue hold work. */
bool kvt_ssd_pipe_pending(const kvt_engine *e);
/* One step of the pipe: take queued requests, submit, reap, verify, commit
 * a group of writes, finish. Called locked; unlocks around the I/O. Returns
 * true while there was SSD work. */
bool kvt_ssd_pipe_step(kvt_engine *e);
/* The disk starts working (the first request queued): the pipe's pacing
 * counts its busy time from now. Locked. */
void kvt_ssd_pipe_disk_starts(kvt_engine *e);
/* The generation of a write its caller makes (ssd_caller.c). Locked. */
uint64_t kvt_ssd_generation_take(kvt_engine *e);
/* A page of this write generation is on SSD (open): later writes number
 * after it. */
void kvt_ssd_pipe_seen(kvt_engine *e, uint64_t generation);
/* How a page stored in stored_len bytes moves: kvt_ssd_pieces() I/O requests
 * (PIECE_BYTES each, the last shorter); piece k's offset, I/O length and
 * checksummed length; and the page's CRC32C from its pieces' CRCs. The
 * piece size is fixed at open: any thread may ask. Inline: a caller's read
 * (ssd_caller.c) asks for every piece. */
static inline uint32_t kvt_ssd_pieces(const kvt_engine *e, size_t stored_len)
{
    size_t io = kvt_round4k(stored_len);
    uint32_t n = (uint32_t)((io + e->pipe.piece_bytes - 1) / e->pipe.piece_bytes);
    return n ? n : 1;
}
/* Piece k: the stored bytes rounded up to 4 KiB, cut in pieces; the
 * checksum covers the stored ones. */
static inline size_t kvt_ssd_piece(const kvt_engine *e, size_t stored_len, uint32_t k,
                                   size_t *io_len, size_t *crc_len)
{
    size_t pb = e->pipe.piece_bytes;
    size_t at = (size_t)k * pb, io_end = kvt_round4k(stored_len);
    size_t end = io_end - at > pb ? at + pb : io_end;
    *io_len = end - at;
    *crc_len = (end < stored_len ? end : stored_len) - at;
    return at;
}
uint32_t kvt_ssd_crc_join(const kvt_engine *e, const uint32_t *crc, uint32_t pieces,
                          size_t stored_len);
/* The checksum a record stores for a page stored raw whose bytes' CRC32C
 * (seed 0) is page_crc: CRC32C with a seed is the seed's CRC joined with
 * the seedless CRC of the bytes, so the bytes need not be read again. */
uint32_t kvt_ssd_raw_crc(const kvt_engine *e, const kvt_key *key, uint64_t generation,
                         uint32_t page_crc);
/* CRC32C of piece k of a page stored in stored_len bytes at `page`, the
 * binding of key and generation as the first piece's seed (ssd_index.h). */
uint32_t kvt_ssd_piece_crc(const kvt_engine *e, const kvt_key *key, uint64_t generation,
                           const void *page, size_t stored_len, uint32_t k);
/* A read proved the only copy of pg (in slot) bad (KVT_ECORRUPT) or
 * unreadable (res): the page is lost, never served (locked). */
void kvt_ssd_read_gone(kvt_engine *e, uint32_t pg, uint32_t slot, int res);

/* ------------------------------------------------------------- ssd_caller.c */

/* Sets up the pool of caller contexts like the mover's (p); opens none. */
void kvt_callers_init(kvt_engine *e, const struct kvt_io_params *p);
/* Closes them (no caller holds one: the engine is closing). */
void kvt_callers_close(kvt_engine *e);
/* Reads the pages of rd[0..n) that a caller can read itself, in its own
 * thread (struct kvt_caller_read says which, and what came of each; rd[] is
 * reordered, the reads taken first), in sc (sized for n pages). Its pages
 * are the caller's busy ones. Locked; unlocks while reading. */
void kvt_ssd_caller_read(kvt_engine *e, struct kvt_caller_read *rd, size_t n,
                         const struct kvt_caller_scratch *sc);
/* Whether a put's pages may be written down by the put itself
 * (kvt_ssd_caller_write): persist, stored raw, writes ahead allowed
 * (kvt_dram_writes_ahead). */
bool kvt_ssd_caller_writes(const kvt_engine *e);
/* Writes the pages of w[0..n) to SSD from their DRAM slots, in the calling
 * thread, each to a slot of its own (struct kvt_caller_write says which,
 * and what came of each), with requests in sc (sized for n pages; its crc
 * unused). fill(arg, &ready), called unlocked until it returns false, is
 * the put's copy into the slots, a step a call: it says how many bytes of
 * w's pages, taken in order, are in place, and each piece goes to the disk
 * once its bytes are. Returns how many it started; 0: none, nothing
 * unlocked and fill never called. Otherwise fill has returned false when
 * it returns. Locked; unlocks while writing. */
size_t kvt_ssd_caller_write(kvt_engine *e, struct kvt_caller_write *w, size_t n,
                            const struct kvt_caller_scratch *sc,
                            bool (*fill)(void *arg, size_t *ready), void *arg);
/* Gives back the slots of w[0..n) written but never handed on (a put that
 * failed or starts again): never indexed, so free at once. Locked. */
void kvt_ssd_caller_write_cancel(kvt_engine *e, struct kvt_caller_write *w, size_t n);

/* ------------------------------------------------------------- remote.c */

struct kvt_remote;
struct kvt_store_item;
/* Opens the shared tier cfg names (cfg->remote_url set): its store handles,
 * the publish queue and its thread. 0 or the store's error (kvt_fail'ed,
 * naming the cluster, never a credential). */
int kvt_remote_open(const kvt_config *cfg, const struct kvt_open_with *with,
                    struct kvt_remote **out);
/* Sends what is queued (waiting timeout_ms at most), then frees r. */
void kvt_remote_close(struct kvt_remote *r, unsigned timeout_ms);
/* Queues a copy of the page at page under k; false when the queue is full
 * (counted as unpublished). Never waits on the network. */
bool kvt_remote_offer(struct kvt_remote *r, const kvt_key *k, const void *page);
/* A queue slot to fill (*buf, page_bytes), or -EAGAIN when the queue is
 * full (counted). The slot is the caller's until kvt_remote_commit, which
 * sends it under k (send) or gives it back. */
int kvt_remote_reserve(struct kvt_remote *r, void **buf);
void kvt_remote_commit(struct kvt_remote *r, int slot, const kvt_key *k, bool send);
int kvt_remote_publish_mode(const struct kvt_remote *r);
/* Counts a page that should have been published and was not. */
void kvt_remote_skip(struct kvt_remote *r);
/* Waits until the queue is sent; -ETIMEDOUT after timeout_ms. */
int kvt_remote_drain(struct kvt_remote *r, unsigned timeout_ms);
/* The store's exists and get on the caller's thread, in batches: the
 * number held / found; it[i].res as store.h says. */
int kvt_remote_exists(struct kvt_remote *r, struct kvt_store_item *it, size_t n);
int kvt_remote_load(struct kvt_remote *r, struct kvt_store_item *it, size_t n);
/* Notes that k's local copy came from the store (loaded), or no longer
 * does (a put wrote it): a page that came from there is not sent back when
 * it is dropped. */
void kvt_remote_loaded(struct kvt_remote *r, const kvt_key *k, bool loaded);
bool kvt_remote_was_loaded(struct kvt_remote *r, const kvt_key *k);
/* The tier's counters into out's remote_* fields. */
void kvt_remote_stats(struct kvt_remote *r, kvt_stats *out);


#endif /* KVT_TIERS_H */
