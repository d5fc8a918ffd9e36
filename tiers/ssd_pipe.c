/*
 * ssd_pipe.c — the mover's SSD pipeline: requests in, I/O, results out.
 *
 * Owned by the mover thread (tiers.h, Locking): e->pipe is touched only by
 * it, with or without the lock, but for the next write's generation, which
 * is taken under the lock (a kvt_put writing its own pages takes some).
 * Each step (kvt_ssd_pipe_step) takes queued
 * requests under the lock, then without it encodes, submits the reads and
 * writes through io/ at the configured depth, reaps what completed,
 * verifies and decodes reads and commits a group of writes to the index;
 * then, locked again, finishes the jobs into their pages and wakes the
 * waiters. The disk never waits for a whole batch to drain: new jobs go in
 * as old ones come out.
 *
 * A write its caller made (ssd_caller.c, a persist kvt_put) comes as a
 * request already written: the pipe marks its segment dirty and commits it
 * with the group, as if it had written it.
 *
 * Durability order: data written -> (persist) fdatasync of the segments
 * written -> index commit -> the old slots of rewritten pages freed. A crash
 * anywhere leaves the index naming slots that hold complete data of the
 * version it names. Deletions commit in their own transaction before the
 * writes taken in the same step, so a key dropped and written again ends up
 * present.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/tiers.h"


/* Submissions of one job at most. A read that failed on the medium (-EIO, a
 * short read) is tried again before its page is given up as lost: a path
 * failover, a device reset or a firmware retry can make the same bytes
 * readable a moment later, and losing a page that is fine on disk costs a
 * recompute. A checksum mismatch is never tried again: the bytes on disk
 * are what they are, and a second read that matched would only say the
 * first was torn in flight, which the disk has already answered. A job the
 * back-end refused (submit() failed, or the context broke before answering)
 * never reached the disk: it is tried again too, and if it still cannot be
 * sent, a read keeps its page and a write frees its slot (neither says
 * anything about the data). Bounded, so a dead disk costs three tries a
 * page, not a hang. */
#define SSD_TRIES 3

/* Completions one step takes per decoding thread when reads are decoded (a
 * codec is set). A read's page is served only when its step finishes, after
 * every read the step took is decoded: 64 decoded pages of 1 MiB hold the
 * first of them back for about 11 ms, a whole group of the caller's
 * compute, and the caller and the mover take turns instead of overlapping
 * (docs/performance.md#codecs-on-the-ssd). Undecoded completions wait in the
 * ring for the next step, oldest first (io.h); the disk keeps the rest of
 * the queue. */
#define DECODE_BATCH 4

/* Bytes of pages the pipeline holds at least (kvt_ssd_pipe_init). */
#define PIPE_BYTES ((uint64_t)256 << 20)

/* A page larger than this moves in pieces of it, each its own I/O request,
 * and each piece read is checksummed as it lands while the rest are still
 * on the disk (a piece written, before it goes). A 32 MiB page moved whole
 * kept the disk idle while its checksum ran: 3 ms of CRC after a 10 ms read,
 * 0.7x the raw disk (docs/performance.md#pieces). The pieces' CRCs are
 * joined with kvt_crc32c_combine. A multiple of 4096. */
#define PIECE_BYTES ((size_t)4 << 20)

/* Tests set this (a multiple of 4096) to cut small pages in pieces too;
 * 0 = PIECE_BYTES. Read when an engine opens. */
size_t kvt_test_piece_bytes;

/* ------------------------------------------------------------- set-up */

/* pipe_take's scratch for order_write_slots() (below). */
struct kvt_slot_order {
    kvt_key key;
    uint32_t job;
};

int kvt_ssd_pipe_init(kvt_engine *e)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    /* Jobs beyond the disk's queue depth keep it fed while finished ones
     * are applied under the lock, and while the mover waits for a CPU on a
     * machine whose cores also run the compute: the reaper refills the disk
     * from the jobs already submitted, so the disk idles only once the mover
     * has been away for all of them. 8 x depth, and at least PIPE_BYTES of
     * pages up to 32 x depth (docs/performance.md#pipeline-depth). Bounce
     * buffers are address space until a codec touches them; with one, a
     * job's buffer is resident once used, so PIPE_BYTES bounds that too. */
    uint32_t n = 8 * e->cfg.queue_depth;
    uint64_t by_bytes = PIPE_BYTES / e->page_bytes;
    uint64_t most = 32ull * e->cfg.queue_depth;
    if (by_bytes > n)
        n = (uint32_t)(by_bytes < most ? by_bytes : most);
    P->max_jobs = n;
    size_t bb = (size_t)n * e->page_bytes;
    P->generation = 1;
    void *bounce;
    if (kvt_huge_map(bb, &bounce) < 0) /* DMA targets: see base/huge.c */
        return kvt_fail(-ENOMEM, "out of memory for the SSD tier");
    P->bounce = bounce;
    P->piece_bytes = kvt_test_piece_bytes ? kvt_test_piece_bytes : PIECE_BYTES;
    P->max_pieces = (uint32_t)((e->page_bytes + P->piece_bytes - 1) / P->piece_bytes);
    P->jobs = calloc(n, sizeof(*P->jobs));
    P->reqs = calloc((size_t)n * P->max_pieces, sizeof(*P->reqs));
    P->piece_crc = calloc((size_t)n * P->max_pieces, sizeof(*P->piece_crc));
    P->job_free = malloc(n * sizeof(uint32_t));
    P->uncommitted = malloc(n * sizeof(uint32_t));
    P->finished = malloc(n * sizeof(uint32_t));
    P->order = malloc(n * sizeof(*P->order));
    P->order_slot = malloc(n * sizeof(uint32_t));
    P->retry = malloc(n * sizeof(uint32_t));
    P->verify = malloc(n * sizeof(uint32_t));
    if (!P->jobs || !P->reqs || !P->piece_crc || !P->job_free || !P->uncommitted || !P->finished || !P->order ||
        !P->order_slot || !P->retry || !P->verify)
        return kvt_fail(-ENOMEM, "out of memory for the SSD pipeline");
    for (uint32_t i = 0; i < n; i++)
        P->job_free[i] = n - 1 - i;
    P->njob_free = n;
    struct kvt_page_layout L;
    kvt_page_layout_of(&e->cfg, &L);
    int r = kvt_codec_new_layout(e->cfg.codec, 0, e->page_bytes, &L, &P->codec);
    if (r < 0)
        return kvt_fail(r, "cannot set up codec %d", e->cfg.codec);
    P->decoders = 1;
    if (e->cfg.codec != KVT_CODEC_NONE && kvt_cpus_usable() > 1) {
        /* Best effort: without the helper the mover decodes alone. */
        if (kvt_codec_new_layout(e->cfg.codec, 0, e->page_bytes, &L, &P->codec_helper) == 0 &&
            kvt_team_open(&P->team) == 0) {
            P->decoders = 2;
        } else {
            kvt_codec_free(P->codec_helper);
            P->codec_helper = NULL;
        }
    }
    return 0;
}

void kvt_ssd_pipe_fini(kvt_engine *e)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    if (P->bounce)
        kvt_huge_unmap(P->bounce, (size_t)P->max_jobs * e->page_bytes);
    kvt_team_close(P->team);
    kvt_codec_free(P->codec_helper);
    kvt_codec_free(P->codec);
    free(P->jobs);
    free(P->reqs);
    free(P->piece_crc);
    free(P->job_free);
    free(P->uncommitted);
    free(P->finished);
    free(P->order);
    free(P->order_slot);
    free(P->retry);
    free(P->verify);
    *P = (struct kvt_ssd_pipe){ 0 };
}

bool kvt_ssd_pipe_pending(const kvt_engine *e)
{
    const struct kvt_ssd_pipe *P = &e->pipe;
    return e->ssd && (e->ssd_tier.queued || e->ssd_tier.ndels || P->inflight ||
                      P->nuncommitted || P->nfinished || P->nretry);
}

/* ------------------------------------------------------------- take (locked) */

static int by_key(const void *x, const void *y)
{
    return kvt_key_cmp(&((const struct kvt_slot_order *)x)->key,
                       &((const struct kvt_slot_order *)y)->key);
}

static int by_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* Gives the write jobs among got[0..n) their slots in key order. Slots are
 * allocated in eviction order, which is the policy's (the decode policy
 * gives up a group's pages from its end), so without this a group's pages
 * land in descending or interleaved slots, and every later read of the
 * group, in page order, walks the file backwards, which the disk serves much
 * slower. Permuting the batch's slots puts each run of a group's pages in
 * ascending slots (docs/design.md#write-slot-order, the evidence:
 * docs/performance.md#write-slot-order). */
static void order_write_slots(kvt_engine *e, const uint32_t *got, uint32_t n)
{
    struct kvt_slot_order *o = e->pipe.order;
    uint32_t *slot = e->pipe.order_slot, k = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct kvt_ssd_job *j = &e->pipe.jobs[got[i]];
        if (j->write && !j->written) { /* a caller's write is on its slot already */
            o[k] = (struct kvt_slot_order){ j->key, got[i] };
            slot[k++] = j->slot;
        }
    }
    if (k < 2)
        return;
    qsort(slot, k, sizeof(*slot), by_u32);
    qsort(o, k, sizeof(*o), by_key);
    for (uint32_t i = 0; i < k; i++)
        e->pipe.jobs[o[i].job].slot = slot[i];
}

/* Fills job ji from request q: where the bytes are, and for a read what the
 * stored form is. Locked. */
static void job_fill(kvt_engine *e, uint32_t ji, const struct kvt_ssd_req *q)
{
    const struct kvt_page *p = kvt_pg(&e->pt, q->pg);
    struct kvt_ssd_job *j = &e->pipe.jobs[ji];
    *j = (struct kvt_ssd_job){ .pg = q->pg, .key = p->key, .write = q->write,
                               .evict = q->evict, .tries = q->tries };
    if (e->cfg.on_transfer)
        j->t_ns = kvt_now_ns();
    if (!q->write && q->buf) {
        j->transient = true;
        j->dram = q->buf;
    } else {
        j->dram = kvt_arena_ptr(&e->dram.arena, p->slot[KVT_TIER_DRAM]);
    }
    if (q->write && q->written) {
        /* Written whole and raw by its caller: commit and finish only.
         * The put's checksum is what the caller's record holds. */
        j->written = true;
        j->slot = q->slot;
        j->stored_len = (uint32_t)e->page_bytes;
        j->crc = q->crc;
        j->generation = q->generation;
        j->codec = KVT_CODEC_NONE;
        j->put_crc_used = (p->flags & PG_PUT_CRC) != 0;
    } else if (q->write) {
        j->slot = q->slot;
        j->put_crc = (p->flags & PG_PUT_CRC) != 0;
        j->page_crc = p->crc;
        j->put_crc_used = false;
        /* Numbered here, under the lock: a caller's own writes take
         * numbers too. */
        j->generation = kvt_ssd_generation_take(e);
    } else {
        j->slot = p->ssd_slot;
        const struct kvt_ssd_meta *m = &e->ssd_tier.meta[j->slot];
        j->stored_len = m->stored_len;
        j->crc = m->crc;
        j->generation = m->generation;
        j->codec = m->codec;
    }
    /* Compressed pages go through the job's bounce buffer; raw ones move
     * straight between the registered DRAM arena and the disk. */
    bool bounce = j->write ? e->cfg.codec != KVT_CODEC_NONE && !j->written
                           : j->codec != KVT_CODEC_NONE;
    j->bounce = bounce ? (int)ji : -1;
    j->buf = bounce ? e->pipe.bounce + (size_t)ji * e->page_bytes : j->dram;
}

/* Step 1: takes queued requests into free jobs and resolves where each
 * goes. Locked. Returns how many, their numbers in got[].
 *
 * Reads first, and writes never take the last queue_depth jobs: a read has
 * a caller waiting on it, while a write is the engine's own work ahead of
 * need (an eviction, a flush the caller waits for as a whole). In FIFO order
 * a kvt_get of a prefix cache queued behind a put's evictions waited for
 * every one of them (docs/performance.md#read-priority). Writes are not
 * starved: the reads in a step are bounded by what callers wait on. */
struct take_ctx {
    uint32_t *got, n, reserve;
};

static bool take_one(kvt_engine *e, const struct kvt_ssd_req *q, void *ctx)
{
    struct take_ctx *c = ctx;
    struct kvt_ssd_pipe *P = &e->pipe;
    if (!P->njob_free || (q->write && P->njob_free <= c->reserve))
        return false;
    uint32_t ji = P->job_free[--P->njob_free];
    job_fill(e, ji, q);
    c->got[c->n++] = ji;
    return true;
}

static uint32_t pipe_take(kvt_engine *e, uint32_t *got)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    struct take_ctx c = { got, 0, e->cfg.queue_depth < P->max_jobs ? e->cfg.queue_depth : 0 };
    kvt_ssd_queue_drain(e, take_one, &c);
    uint32_t n = c.n;
    order_write_slots(e, got, n);
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &P->jobs[got[i]];
        if (j->written)
            continue; /* no I/O of ours */
        int r = kvt_slots(e)->locate(e->ssd, j->slot, j->write, &j->fd, &j->off);
        if (r < 0) {
            j->fd = -1;
            j->res = r;
        }
    }
    return n;
}

/* ------------------------------------------------------------- I/O (unlocked) */

/* Encodes a page to write (unlocked: its DRAM slot is the job's). */
static void job_encode(kvt_engine *e, struct kvt_ssd_job *j)
{
    size_t pb = e->page_bytes, out = pb;
    int used = KVT_CODEC_NONE;
    if (j->bounce >= 0) {
        uint64_t t0 = kvt_now_ns(), c0 = kvt_thread_cpu_ns();
        int r = kvt_codec_encode_page(e->pipe.codec, j->key.layer, j->dram, pb, j->buf, pb, &out,
                                      &used);
        if (r < 0 || used == KVT_CODEC_NONE) {
            memcpy(j->buf, j->dram, pb); /* stored raw */
            out = pb;
            used = KVT_CODEC_NONE;
        }
        j->codec_ns += kvt_now_ns() - t0;
        j->codec_cpu_ns += kvt_thread_cpu_ns() - c0;
    }
    j->stored_len = (uint32_t)out;
    j->codec = (uint8_t)used;
    memset((uint8_t *)j->buf + out, 0, kvt_round4k(out) - out);
}

uint32_t kvt_ssd_crc_join(const kvt_engine *e, const uint32_t *crc, uint32_t pieces,
                          size_t stored_len)
{
    uint32_t c = crc[0];
    for (uint32_t k = 1; k < pieces; k++) {
        size_t io_len, crc_len;
        kvt_ssd_piece(e, stored_len, k, &io_len, &crc_len);
        c = kvt_crc32c_combine(c, crc[k], crc_len);
    }
    return c;
}

static size_t piece_at(const kvt_engine *e, const struct kvt_ssd_job *j, uint32_t k,
                       size_t *io_len, size_t *crc_len)
{
    return kvt_ssd_piece(e, j->stored_len, k, io_len, crc_len);
}

uint32_t kvt_ssd_raw_crc(const kvt_engine *e, const kvt_key *key, uint64_t generation,
                         uint32_t page_crc)
{
    uint32_t seed = kvt_slots(e)->seed(e->ssd, key, generation);
    return kvt_crc32c_combine(seed, page_crc, e->page_bytes);
}

uint32_t kvt_ssd_piece_crc(const kvt_engine *e, const kvt_key *key, uint64_t generation,
                           const void *page, size_t stored_len, uint32_t k)
{
    size_t io_len, crc_len, at = kvt_ssd_piece(e, stored_len, k, &io_len, &crc_len);
    uint32_t seed = k ? 0 : kvt_slots(e)->seed(e->ssd, key, generation);
    return kvt_crc32c(seed, (const uint8_t *)page + at, crc_len);
}

/* CRC32C of job j's piece k (unlocked), with timed its CPU time counted to
 * the job: checksums are work of the SSD path as much as the codec's, and
 * kvtier run's bound counts both (docs/commands.md#the-bound). A thread
 * clock is a system call, a good part of a small page's checksum, so pages
 * the mover verifies alone are timed a step at a time instead (pipe_verify;
 * docs/performance.md#checksum-clocks). */
static uint32_t piece_crc(const kvt_engine *e, struct kvt_ssd_job *j, uint32_t k, bool timed)
{
    uint64_t c0 = timed ? kvt_thread_cpu_ns() : 0;
    uint32_t c = kvt_ssd_piece_crc(e, &j->key, j->generation, j->buf, j->stored_len, k);
    if (timed)
        j->crc_cpu_ns += kvt_thread_cpu_ns() - c0;
    return c;
}

/* The checksum a write stores, when the put that wrote the page took its
 * bytes' CRC32C (seed 0) as it copied them in (kvt_page.crc), and they go
 * down raw: the same value as the pieces' joined, since CRC32C with a seed
 * is the seed's CRC joined with the seedless CRC of the bytes. Then the
 * mover need not read the page: 0.1 s of a core per GB written, and
 * 2-5% of the write speed on this project's 2-core machine
 * (docs/performance.md#put-checksum). False when it must read them. */
static bool job_crc(const kvt_engine *e, struct kvt_ssd_job *j)
{
    if (!j->put_crc || j->bounce >= 0 || j->codec != KVT_CODEC_NONE ||
        j->stored_len != e->page_bytes)
        return false;
    j->crc = kvt_ssd_raw_crc(e, &j->key, j->generation, j->page_crc);
    j->put_crc_used = true;
    return true;
}

/* Job j's row of piece_crc[], and the piece a request of P->reqs moves. */
static uint32_t *piece_crcs(const kvt_engine *e, const struct kvt_ssd_job *j)
{
    return e->pipe.piece_crc + (size_t)(j - e->pipe.jobs) * e->pipe.max_pieces;
}

static uint32_t piece_of(const struct kvt_ssd_pipe *P, const struct kvt_io_req *q)
{
    return (uint32_t)((size_t)(q - P->reqs) % P->max_pieces);
}

/* The page's CRC32C from its pieces' (piece_crcs). */
static uint32_t pieces_join(const kvt_engine *e, const struct kvt_ssd_job *j)
{
    return kvt_ssd_crc_join(e, piece_crcs(e, j), j->pieces, j->stored_len);
}

/* Verifies and decodes a page read (unlocked) with codec c, the calling
 * thread's: a page in pieces had them checksummed as they came back
 * (piece_back). Run by the decode team: it writes only the job's own fields,
 * its piece CRCs and its DRAM slot. timed: the checksum's CPU time is the
 * job's to count (piece_crc). */
static void job_verify(const kvt_engine *e, struct kvt_ssd_job *j, struct kvt_codec *c,
                       bool timed)
{
    if (j->res < 0)
        return;
    if (j->pieces == 1)
        piece_crcs(e, j)[0] = piece_crc(e, j, 0, timed);
    if (pieces_join(e, j) != j->crc) {
        j->res = KVT_ECORRUPT;
    } else if (j->bounce >= 0) {
        uint64_t t0 = kvt_now_ns(), c0 = kvt_thread_cpu_ns();
        if (kvt_codec_decode(c, j->codec, j->buf, j->stored_len, j->dram, e->page_bytes) < 0)
            j->res = KVT_ECORRUPT;
        j->codec_ns += kvt_now_ns() - t0;
        j->codec_cpu_ns += kvt_thread_cpu_ns() - c0;
    }
}

/* A job failed with res: tried again on the next step while it has tries
 * left (SSD_TRIES), else finished with res. Unlocked. */
static void job_failed(kvt_engine *e, struct kvt_ssd_job *j, int res, bool unsent)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    uint32_t ji = (uint32_t)(j - P->jobs);
    j->res = res;
    j->unsent = unsent;
    if (j->tries < SSD_TRIES) {
        P->retried_errors++;
        P->retry[P->nretry++] = ji;
    } else {
        P->finished[P->nfinished++] = ji;
    }
}

/* The job's I/O is over (every piece back or refused): reads are verified
 * and finished, writes wait for the group commit, failures are tried again
 * or finished (job_failed). Unlocked. */
static void job_back(kvt_engine *e, struct kvt_ssd_job *j)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    uint32_t ji = (uint32_t)(j - P->jobs);
    if (j->res < 0 && (!j->write || j->unsent)) {
        job_failed(e, j, j->res, j->unsent);
    } else if (!j->write) {
        P->verify[P->nverify++] = ji; /* pipe_verify, once the step's reaping is done */
    } else if (j->res < 0) {
        P->finished[P->nfinished++] = ji;
    } else {
        /* Dirty once complete, not when taken: a sync covers only the
         * writes completed before it, so one still in flight during a
         * group's sync must leave its segment dirty for its own group's
         * (a power-loss test caught a commit naming unsynced data). */
        kvt_slots(e)->written(e->ssd, j->slot);
        P->uncommitted[P->nuncommitted++] = ji;
    }
}

/* Piece k of job j came back with res, or was refused by the back-end
 * (unsent). A failure on the medium outranks a refusal: it says something
 * about the data. A piece of a page read in several is checksummed here,
 * while the job's other pieces are still on the disk; a page read whole is
 * checksummed with its decode, by the decode team (job_verify). Unlocked. */
static void piece_back(kvt_engine *e, struct kvt_ssd_job *j, uint32_t k, int res, bool unsent)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    P->inflight--;
    j->pending--;
    if (res < 0 && (j->res == 0 || j->unsent)) {
        j->res = res;
        j->unsent = unsent;
    } else if (res == 0 && !j->write && j->res == 0 && j->pieces > 1) {
        piece_crcs(e, j)[k] = piece_crc(e, j, k, true); /* a piece is 4 MiB */
    }
    if (!j->pending)
        job_back(e, j);
}

static void submit_group(kvt_engine *e, struct kvt_io_req **rp, uint32_t k)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    int r = e->io->submit(e->io_priv, rp, k);
    if (r >= 0)
        return;
    for (uint32_t q = 0; q < k; q++)
        piece_back(e, rp[q]->user, piece_of(P, rp[q]), r, true);
}

/* Encodes (first tries only) and submits the jobs of got[] (unlocked). The
 * back-end blocks submit() only while `depth` requests are in the kernel,
 * so the pipeline holds more jobs than the disk does and refills it as
 * requests complete. A write is checksummed piece by piece as it goes,
 * unless its put took the checksum (job_crc). */
static void pipe_submit(kvt_engine *e, const uint32_t *got, uint32_t n)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    struct kvt_io_req *rp[64];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct kvt_ssd_job *j = &P->jobs[got[i]];
        if (j->written) {
            /* Complete before it was queued: dirty now, committed with
             * the group (job_back's order). */
            kvt_slots(e)->written(e->ssd, j->slot);
            P->uncommitted[P->nuncommitted++] = got[i];
            continue;
        }
        bool first = !j->tries;
        if (j->write && first)
            job_encode(e, j); /* a retry sends the same bytes, generation and crc */
        /* The pieces' checksums, when the put's is not there to use. */
        bool sum = j->write && first && !job_crc(e, j);
        if (j->fd < 0) { /* its segment could not be opened: j->res says why */
            P->finished[P->nfinished++] = got[i];
            continue;
        }
        j->tries++;
        j->res = 0;
        j->unsent = false;
        j->pieces = kvt_ssd_pieces(e, j->stored_len);
        /* Counted in flight before any is submitted: a refused group
         * answers its pieces at once (piece_back), and the job is over
         * only when every piece is. */
        j->pending = j->pieces;
        P->inflight += j->pieces;
        for (uint32_t c = 0; c < j->pieces; c++) {
            size_t io_len, crc_len, at = piece_at(e, j, c, &io_len, &crc_len);
            if (sum)
                piece_crcs(e, j)[c] = piece_crc(e, j, c, true);
            struct kvt_io_req *q = &P->reqs[(size_t)got[i] * P->max_pieces + c];
            *q = (struct kvt_io_req){ .fd = j->fd, .write = j->write, .buf = (uint8_t *)j->buf + at,
                                      .len = io_len, .off = j->off + at, .user = j };
            rp[k++] = q;
            /* Small groups: the first requests reach the disk while later
             * pages are still being encoded; a page in pieces sends each
             * piece once its checksum is done. */
            bool last = i + 1 == n && c + 1 == j->pieces;
            if (k == 64 || (k >= 8 && !last) || (sum && j->pieces > 1) || last) {
                submit_group(e, rp, k);
                k = 0;
            }
        }
        if (sum)
            j->crc = pieces_join(e, j);
    }
    if (k) /* the last job's segment could not be opened */
        submit_group(e, rp, k);
}

/* Reaps completions into their jobs (piece_back). Waits for one completion
 * when asked to. */
static int pipe_reap(kvt_engine *e, bool wait)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    struct kvt_io_req *done[64];
    int most = e->cfg.codec != KVT_CODEC_NONE ? DECODE_BATCH * (int)P->decoders : 64;
    int m = e->io->reap(e->io_priv, done, most, wait && P->inflight ? 1 : 0);
    if (m < 0)
        return m;
    for (int i = 0; i < m; i++)
        piece_back(e, done[i]->user, piece_of(P, done[i]), done[i]->res, false);
    return m;
}

static void verify_one(void *arg, uint32_t i, unsigned worker)
{
    kvt_engine *e = arg;
    struct kvt_ssd_pipe *P = &e->pipe;
    /* In a team each item times its own checksum: the helper's CPU time is
     * not on the mover's clock. */
    job_verify(e, &P->jobs[P->verify[i]], worker ? P->codec_helper : P->codec, P->team != NULL);
}

/* The codec CPU time of the step's reads to verify, summed. */
static uint64_t verify_codec_ns(const struct kvt_ssd_pipe *P)
{
    uint64_t ns = 0;
    for (uint32_t i = 0; i < P->nverify; i++)
        ns += P->jobs[P->verify[i]].codec_cpu_ns;
    return ns;
}

/* The reads that came back whole this step, verified and decoded by the
 * decode team, then finished. Unlocked. The mover alone (no team: no codec,
 * or one CPU) times the step's checksums with one clock pair: the pass's
 * CPU time less what the codec took, shared among the pages read whole by
 * their stored bytes (a page in pieces had each timed as it came back;
 * piece_crc says why). */
static void pipe_verify(kvt_engine *e)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    if (P->team || !P->nverify) {
        kvt_team_for(P->team, P->nverify, verify_one, e);
    } else {
        uint64_t codec0 = verify_codec_ns(P), c0 = kvt_thread_cpu_ns();
        kvt_team_for(NULL, P->nverify, verify_one, e);
        uint64_t spent = kvt_thread_cpu_ns() - c0, codec = verify_codec_ns(P) - codec0;
        uint64_t crc = spent > codec ? spent - codec : 0, bytes = 0;
        for (uint32_t i = 0; i < P->nverify; i++)
            if (P->jobs[P->verify[i]].pieces == 1)
                bytes += P->jobs[P->verify[i]].stored_len;
        for (uint32_t i = 0; i < P->nverify && bytes; i++) {
            struct kvt_ssd_job *j = &P->jobs[P->verify[i]];
            if (j->pieces == 1)
                j->crc_cpu_ns += (uint64_t)((double)crc * (double)j->stored_len / (double)bytes);
        }
    }
    for (uint32_t i = 0; i < P->nverify; i++)
        P->finished[P->nfinished++] = P->verify[i];
    P->nverify = 0;
}

/* Group commit of the written pages: the store makes their data durable
 * (persist) and their records its own in one transaction. Only after it may
 * their old slots be reused. */
static void pipe_commit(kvt_engine *e)
{
    uint32_t n = e->pipe.nuncommitted;
    struct kvt_store_rec *rec = malloc((n ? n : 1) * sizeof(*rec));
    int r = rec ? 0 : -ENOMEM;
    for (uint32_t i = 0; i < n && !r; i++) {
        const struct kvt_ssd_job *j = &e->pipe.jobs[e->pipe.uncommitted[i]];
        rec[i] = (struct kvt_store_rec){ .key = j->key, .slot = j->slot,
                                         .stored_len = j->stored_len, .crc = j->crc,
                                         .codec = (uint8_t)j->codec,
                                         .generation = j->generation };
    }
    if (!r)
        r = kvt_slots(e)->commit(e->ssd, rec, n);
    for (uint32_t i = 0; i < n; i++) {
        /* Not indexed: as far as anyone will ever know, the write did not happen. */
        if (r < 0)
            e->pipe.jobs[e->pipe.uncommitted[i]].res = r;
        e->pipe.finished[e->pipe.nfinished++] = e->pipe.uncommitted[i];
    }
    e->pipe.nuncommitted = 0;
    free(rec);
}

/* Deletions queued by drops: one transaction, committed before any write
 * taken after them, so a key dropped and written again ends up present.
 * Each deletes its entry only while it names the dropped page's slot: a
 * write of a newer version may have committed first (a drop while the
 * page's write was in flight, then a put of the key). */
static int pipe_deletes(kvt_engine *e, struct kvt_ssd_del *dels, uint32_t n)
{
    struct kvt_store_rec *rec = malloc((n ? n : 1) * sizeof(*rec));
    if (!rec)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        rec[i] = (struct kvt_store_rec){ .key = dels[i].key, .slot = dels[i].slot };
    int r = kvt_slots(e)->forget(e->ssd, rec, n);
    free(rec);
    return r;
}

/* The disk's pace: busy time per finished job, for sizing how far ahead
 * prefetch reads (prefetch.c). Time counts only while jobs were waiting the
 * whole interval (e->ssd_tier.busy was non-zero at its start), so idle gaps do
 * not make the disk look slow. Called under the lock with n jobs finished. */
static void pipe_pace(kvt_engine *e, uint32_t n)
{
    uint64_t now = kvt_now_ns();
    if (e->pipe.ssd_mark_ns && now > e->pipe.ssd_mark_ns)
        e->pipe.ssd_ns_per_page = kvt_smooth(e->pipe.ssd_ns_per_page, (now - e->pipe.ssd_mark_ns) / n);
    e->pipe.ssd_mark_ns = e->ssd_tier.busy > n ? now : 0;
}

/* ------------------------------------------------------------- finish (locked) */

static void finish_read(kvt_engine *e, struct kvt_ssd_job *j)
{
    kvt_page_xfer_end(e, j->pg);
    if (j->transient) {
        struct kvt_transient *t = kvt_ssd_transient_of(e, j->pg, j->dram);
        t->res = j->res;
        t->kept = j->res && (kvt_ssd_read_keeps_page(j->res) || j->unsent);
    }
    if (j->res == 0) {
        if (!j->transient)
            kvt_page_read_ok(e, j->pg);
        e->pipe.st.bytes_up[KVT_TIER_DRAM] += e->page_bytes;
        e->pipe.disk_read += kvt_round4k(j->stored_len);
        e->pipe.codec_ns += j->codec_ns;
        e->pipe.codec_cpu_ns += j->codec_cpu_ns;
        e->pipe.crc_cpu_ns += j->crc_cpu_ns;
    } else if (kvt_ssd_read_keeps_page(j->res) || j->unsent) {
        e->pipe.st.errors_io++;
        kvt_ssd_read_kept(e, j->res);
        if (!j->transient)
            kvt_page_read_failed(e, j->pg);
    } else {
        kvt_ssd_read_gone(e, j->pg, j->slot, j->res);
    }
    kvt_page_read_end(e, j->pg);
    kvt_page_settle(e, j->pg);
}

void kvt_ssd_read_gone(kvt_engine *e, uint32_t pg, uint32_t slot, int res)
{
    /* The only copy is unreadable: the page is lost, never served. */
    if (res == KVT_ECORRUPT)
        e->pipe.st.errors_corrupt++;
    else
        e->pipe.st.errors_io++;
    if (res != KVT_ECORRUPT)
        kvt_slots(e)->retire(e->ssd, slot);
    kvt_page_lost(e, pg, res != KVT_ECORRUPT);
    kvt_ssd_forget(e, pg);
}

/* A write that failed: the page stays where it was. Only a slot whose write
 * failed on the medium (-EIO) is never used again: a full disk, a refused
 * file or a write the back-end never sent says nothing about the slot. */
static void write_failed(kvt_engine *e, struct kvt_ssd_job *j)
{
    bool medium = j->res == -EIO && !j->unsent;
    e->pipe.st.errors_io++;
    /* -EIO retired the slot: the next try goes elsewhere, no error said. */
    kvt_ssd_write_failed(e, j->res, j->evict && !medium);
    if (medium)
        kvt_slots(e)->retire(e->ssd, j->slot);
    else
        kvt_slots(e)->give(e->ssd, j->slot);
}

static void finish_write(kvt_engine *e, struct kvt_ssd_job *j)
{
    bool stale = kvt_page_xfer_end(e, j->pg);
    struct kvt_page *p = kvt_pg(&e->pt, j->pg);
    if (j->res == 0 && j->put_crc_used && !stale)
        kvt_page_put_crc_used(e, j->pg); /* before the eviction below drops DRAM */
    if (j->res < 0) {
        write_failed(e, j);
    } else if (p->flags & PG_ZOMBIE) {
        /* Dropped while written: the new entry goes too. */
        kvt_ssd_slot_meta(e, j->slot, (struct kvt_ssd_meta){ j->generation, j->stored_len, j->crc,
                                                             j->codec });
        e->pipe.st.bytes_down[KVT_TIER_DRAM] += e->page_bytes;
        e->pipe.disk_written += kvt_round4k(j->stored_len);
        kvt_ssd_slot_set(e, j->pg, j->slot);
        kvt_ssd_forget(e, j->pg);
    } else {
        kvt_ssd_slot_meta(e, j->slot, (struct kvt_ssd_meta){ j->generation, j->stored_len, j->crc,
                                                             j->codec });
        e->pipe.st.bytes_down[KVT_TIER_DRAM] += e->page_bytes;
        e->pipe.disk_written += kvt_round4k(j->stored_len);
        e->pipe.codec_ns += j->codec_ns;
        e->pipe.codec_cpu_ns += j->codec_cpu_ns;
        e->pipe.crc_cpu_ns += j->crc_cpu_ns;
        /* Copy-on-write: the old slot was named by the index until this
         * group's commit; only now may it be reused. */
        if (p->ssd_slot != KVT_NONE)
            kvt_slots(e)->give(e->ssd, p->ssd_slot);
        kvt_ssd_slot_set(e, j->pg, j->slot);
        if (!stale)
            kvt_page_now_valid(e, j->pg, KVT_TIER_SSD);
        if (j->evict && !stale && !kvt_page_in_use(kvt_pg(&e->pt, j->pg)))
            kvt_page_drop_copy(e, j->pg, KVT_TIER_DRAM);
    }
    kvt_page_settle(e, j->pg);
}

/* Step 4: the results into the pages, one report per direction for the
 * jobs that finished, the pace measured, and the waiters woken. Locked. */
static void pipe_finish(kvt_engine *e)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    uint32_t done[2] = { 0, 0 };
    uint64_t first[2] = { UINT64_MAX, UINT64_MAX };
    e->pipe.st.errors_io += P->retried_errors; /* every failed try counts, retried or not */
    P->retried_errors = 0;
    for (uint32_t i = 0; i < P->nfinished; i++) {
        struct kvt_ssd_job *j = &P->jobs[P->finished[i]];
        if (j->res == 0) {
            done[j->write]++;
            first[j->write] = j->t_ns < first[j->write] ? j->t_ns : first[j->write];
        }
        if (j->write)
            finish_write(e, j);
        else
            finish_read(e, j);
        P->job_free[P->njob_free++] = P->finished[i];
    }
    if (e->cfg.on_transfer && (done[0] || done[1])) {
        uint64_t now = kvt_now_ns();
        kvt_report(e, KVT_XFER_SSD_TO_DRAM, done[0], first[0], now);
        kvt_report(e, KVT_XFER_DRAM_TO_SSD, done[1], first[1], now);
    }
    if (P->nfinished) {
        pipe_pace(e, P->nfinished);
        kvt_ssd_done(e, P->nfinished, true);
        P->nfinished = 0;
    }
}

/* The deleted entries' slots: free once the deletion committed, else never
 * reused (still named by the index). Locked. */
static void deletes_done(kvt_engine *e, struct kvt_ssd_del *dels, uint32_t n, int r)
{
    for (uint32_t i = 0; i < n; i++) {
        if (r == 0)
            kvt_slots(e)->give(e->ssd, dels[i].slot);
        else
            kvt_slots(e)->retire(e->ssd, dels[i].slot);
    }
    free(dels);
    /* freed slots: waiters look again */
    kvt_ssd_done(e, n != 0, n && !e->pipe.nfinished);
}

/* The I/O context broke: no request still in it will be answered. Like a
 * refused submit, that says nothing about the disk: each is tried again
 * (and fails at submit while the context stays broken). */
static void pipe_abandon(kvt_engine *e)
{
    struct kvt_ssd_pipe *P = &e->pipe;
    for (uint32_t i = 0; i < P->max_jobs; i++)
        while (P->jobs[i].pending)
            piece_back(e, &P->jobs[i], 0, -EIO, true);
}

bool kvt_ssd_pipe_step(kvt_engine *e)
{
    KVT_ASSERT_MOVER(e);
    KVT_ASSERT_LOCKED(e);
    if (!kvt_ssd_pipe_pending(e))
        return false;
    struct kvt_ssd_pipe *P = &e->pipe;
    uint32_t got[P->max_jobs ? P->max_jobs : 1];
    uint32_t n = pipe_take(e, got);
    /* Jobs to try again go with the new ones (their job numbers are not
     * free, so both fit in got[]). */
    memcpy(got + n, P->retry, P->nretry * sizeof(*got));
    n += P->nretry;
    P->nretry = 0;
    uint32_t ndels;
    struct kvt_ssd_del *dels = kvt_ssd_take_dels(e, &ndels); /* busy until deletes_done */
    kvt_unlock(e);

    int dr = ndels ? pipe_deletes(e, dels, ndels) : 0;
    pipe_submit(e, got, n);
    /* Block for a completion only when there is nothing new to hand the
     * disk: new work is taken on the next step. */
    if (pipe_reap(e, n == 0) < 0)
        pipe_abandon(e);
    pipe_verify(e);
    /* Commit when the writes have gathered into a group, or when nothing
     * else is coming (so a lone write is not left waiting). */
    if (P->nuncommitted && (P->nuncommitted >= e->cfg.queue_depth || !P->inflight))
        pipe_commit(e);

    kvt_lock(e);
    deletes_done(e, dels, ndels, dr);
    pipe_finish(e);
    return true;
}

void kvt_ssd_pipe_disk_starts(kvt_engine *e)
{
    e->pipe.ssd_mark_ns = kvt_now_ns(); /* see pipe_pace */
}

uint64_t kvt_ssd_generation_take(kvt_engine *e)
{
    KVT_ASSERT_LOCKED(e);
    return e->pipe.generation++;
}

void kvt_ssd_pipe_seen(kvt_engine *e, uint64_t generation)
{
    if (generation >= e->pipe.generation)
        e->pipe.generation = generation + 1;
}
