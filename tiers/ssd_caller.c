/*
 * ssd_caller.c — SSD reads that a kvt_get runs in its own thread.
 *
 * A page that is only on SSD, stored raw, and bound for a caller's buffer
 * that direct I/O can fill is read there by the calling thread, through an
 * I/O context of its own that has no reaper (io.h: owner_reaps), and each
 * piece is checksummed as it lands while the later ones are still on the
 * disk. The mover never sees these reads. Through the mover, a read costs
 * four thread wake-ups besides the disk's time (caller to mover, mover to
 * reaper, reaper to mover, mover to caller); on a machine with few cores
 * those wake-ups, not the disk, set the pace of a prefix cache's loads
 * (docs/performance.md#caller-reads).
 *
 * The rules stay the mover's (ssd_pipe.c): a checksum mismatch loses the
 * page at once (kvt_ssd_read_gone); any other failure leaves the page as it
 * was and hands it to the mover as a transient read with this try counted
 * (kvt_ssd_caller_retry), whose retries and error rules then decide. A page
 * read here is XFER_SSD_READ while the read runs, as one the mover reads.
 *
 * Contexts are pooled per engine (e->callers, under the lock): opened on
 * first use, given back after each call, closed with the SSD tier. A caller
 * that finds none free and may not open another leaves its pages to the
 * mover.
 */
#include <errno.h>

#include "io/codec.h"
#include "tiers/tiers.h"

/* Requests reaped per call. */
#define CALLER_REAP 64
/* A call smaller than this goes out in one round (next_round). */
#define ROUND_MIN ((size_t)2 << 20)

void kvt_callers_init(kvt_engine *e, const struct kvt_io_params *p)
{
    e->callers.params = *p;
    e->callers.params.owner_reaps = true;
    /* Reads keep within the mover's bytes in flight by the rounds they go
     * in (next_round). A put's own writes are bounded by the depth alone:
     * its batch is ready at once, and this project's virtual disk wrote a
     * fresh store fastest with deep queues of large requests (a whole batch
     * of 32 MiB pages in flight: the durable store 10-20% faster than at
     * 16 MiB, docs/performance.md#durable-store). */
    e->callers.read_bytes = p->max_bytes;
    e->callers.params.max_bytes = 0;
    /* The DRAM arena is the mover's to read into; a caller reads into its
     * own buffers, and registering the arena again would pin it again. */
    e->callers.params.fixed_base = NULL;
    e->callers.params.fixed_len = 0;
}

void kvt_callers_close(kvt_engine *e)
{
    struct kvt_callers *c = &e->callers;
    while (c->nidle)
        e->io->close(c->idle[--c->nidle]);
    c->nopen = 0;
}

/* A context for this caller, or NULL (locked). Opening one takes a few
 * system calls under the lock, once per context for the engine's life. */
static void *context_take(kvt_engine *e)
{
    struct kvt_callers *c = &e->callers;
    if (c->nidle)
        return c->idle[--c->nidle];
    void *io = NULL;
    if (!e->io || c->nopen == KVT_CALLER_IOS || e->io->open(&c->params, &io) < 0)
        return NULL;
    c->nopen++;
    return io;
}

/* Gives io back (locked); a context that failed is closed, not pooled: a
 * broken ring answers nothing more. */
static void context_give(kvt_engine *e, void *io, bool failed)
{
    struct kvt_callers *c = &e->callers;
    if (failed) {
        e->io->close(io);
        c->nopen--;
        return;
    }
    c->idle[c->nidle++] = io;
}

/* Whether rd's page can be read by its caller, and where it is (locked):
 * only on SSD, no transfer of it running, stored raw (a compressed page is
 * decoded from a bounce buffer, which is the mover's), its segment open or
 * opened here (segments open under the lock, as the mover's reads open
 * them: after a restart the first get opens what it reads). */
static bool prepare(kvt_engine *e, struct kvt_caller_read *rd)
{
    const struct kvt_page *p = kvt_pg(&e->pt, rd->pg);
    if (!(p->flags & PG_VALID_SSD) || p->xfer != XFER_NONE || p->ssd_slot == KVT_NONE ||
        (p->flags & (PG_VALID_HBM | PG_VALID_DRAM | PG_LOST | PG_READ_ERR)))
        return false;
    const struct kvt_ssd_meta *m = &e->ssd_tier.meta[p->ssd_slot];
    if (m->codec != KVT_CODEC_NONE || m->stored_len != e->page_bytes)
        return false;
    if (kvt_slots(e)->locate(e->ssd, p->ssd_slot, false, &rd->fd, &rd->off) < 0)
        return false; /* the mover's read will say what is wrong */
    rd->slot = p->ssd_slot;
    rd->crc = m->crc;
    rd->generation = m->generation;
    rd->key = p->key;
    return true;
}

/* Piece k of a read of per pieces came back with res: checksummed here,
 * while the rest are still on the disk; the read's result once its last
 * piece is back (unlocked). */
static void piece_back(kvt_engine *e, struct kvt_caller_read *rd, uint32_t *crc, uint32_t per,
                       uint32_t k, int res)
{
    size_t pb = e->page_bytes;
    if (res < 0 && (rd->res == 0 || rd->res == KVT_CALLER_SKIP))
        rd->res = res;
    if (res == 0 && rd->res == KVT_CALLER_SKIP)
        crc[k] = kvt_ssd_piece_crc(e, &rd->key, rd->generation, rd->dst, pb, k);
    if (--rd->pending)
        return;
    if (rd->res == KVT_CALLER_SKIP) /* every piece read */
        rd->res = (per == 1 ? crc[0] : kvt_ssd_crc_join(e, crc, per, pb)) == rd->crc
                      ? 0 : KVT_ECORRUPT;
}

/* The requests of the call's next round, from rp[sent]. A virtual disk
 * answers the requests it holds together, at the end
 * (docs/performance.md#caller-reads): sent at once, a call's checksums would
 * all run after its last byte arrived, about a fifth of its time. So a call
 * of 2 MiB or more goes out in rounds, each three quarters of what is left:
 * a round's checksums (CRC32C runs about four times faster than the disk
 * reads) run while the next round is on the disk, and only the last round's,
 * under 2 MiB, are left over. A round also stays within the context's depth
 * and the reads' bytes in flight (read_bytes: more only makes the pieces
 * finish together, tiers/ssd.c), and a back-end holding some back would
 * keep its tail until the next reap. 5 MiB of 128 KiB pages: 30 + 10 requests; one 32 MiB page: 4,
 * 3 and 1 pieces of 4 MiB. */
static size_t next_round(const kvt_engine *e, struct kvt_io_req *const *rp, size_t nreq,
                         size_t sent)
{
    size_t left = 0, k = 0, got = 0, cap = e->callers.read_bytes;
    for (size_t i = sent; i < nreq; i++)
        left += rp[i]->len;
    size_t want = left < ROUND_MIN ? left : left - left / 4;
    while (sent + k < nreq && (!k || (got < want && k < e->callers.params.depth &&
                                      (!cap || got + rp[sent + k]->len <= cap))))
        got += rp[sent + k++]->len;
    return k;
}

/* Sends the k requests from rp[*sent]. 0 or submit's error. */
static int send_round(kvt_engine *e, void *io, struct kvt_io_req **rp, size_t k, size_t *sent)
{
    int r = e->io->submit(io, rp + *sent, k);
    if (r == 0)
        *sent += k;
    return r;
}

/* Runs the reads of rd[0..n) on io (unlocked), in rounds (next_round): the
 * next round goes out as soon as the last one is back, before its pieces
 * are checksummed. While running, a read's res is KVT_CALLER_SKIP until a
 * piece fails or its last piece is back. Returns 0, or the first error of
 * a submit refused (nothing of that round sent) or of a context that broke;
 * the reads not back whole then fail with it (the caller's). A broken ring
 * may still land what it had sent into dst later: the same bytes the
 * mover's retry reads there (the page is busy, its slot holds still); the
 * uring back-end breaks only on errors other than the ones a working ring
 * returns (io/io_uring.c, uring_enter). */
static int run_reads(kvt_engine *e, void *io, struct kvt_caller_read *rd, size_t n,
                     uint32_t per, const struct kvt_caller_scratch *sc)
{
    struct kvt_io_req *reqs = sc->reqs, **rp = sc->rp;
    size_t nreq = n * per, sent = 0, back = 0;
    for (size_t i = 0; i < n; i++) {
        rd[i].pending = per;
        for (uint32_t k = 0; k < per; k++) {
            size_t io_len, crc_len, at = kvt_ssd_piece(e, e->page_bytes, k, &io_len, &crc_len);
            struct kvt_io_req *q = &reqs[i * per + k];
            *q = (struct kvt_io_req){ .fd = rd[i].fd, .buf = (uint8_t *)rd[i].dst + at,
                                      .len = io_len, .off = rd[i].off + at, .user = &rd[i] };
            rp[i * per + k] = q;
        }
    }
    int r = send_round(e, io, rp, next_round(e, rp, nreq, 0), &sent);
    while (back < sent) {
        struct kvt_io_req *done[CALLER_REAP];
        int m = e->io->reap(io, done, CALLER_REAP, 1);
        if (m < 0)
            return m;
        back += (size_t)m;
        if (back == sent && sent < nreq && r == 0)
            r = send_round(e, io, rp, next_round(e, rp, nreq, sent), &sent);
        for (int i = 0; i < m; i++) {
            size_t at = (size_t)(done[i] - reqs);
            piece_back(e, done[i]->user, sc->crc + at / per * per, per, (uint32_t)(at % per),
                       done[i]->res);
        }
    }
    return r;
}

/* The outcome of a read into its page (locked). */
static void finish(kvt_engine *e, struct kvt_caller_read *rd)
{
    kvt_page_xfer_end(e, rd->pg);
    if (rd->res == 0)
        e->callers.st.bytes_up[KVT_TIER_DRAM] += e->page_bytes; /* counted as the mover counts it */
    else if (rd->res == KVT_ECORRUPT)
        kvt_ssd_read_gone(e, rd->pg, rd->slot, rd->res);
    else
        e->callers.st.errors_io++; /* a try that failed, as the mover counts one it retries */
    kvt_page_read_end(e, rd->pg);
    kvt_page_settle(e, rd->pg);
}

void kvt_ssd_caller_read(kvt_engine *e, struct kvt_caller_read *rd, size_t n,
                         const struct kvt_caller_scratch *sc)
{
    size_t m = 0;
    void *io = NULL;
    int r = 0;
    for (size_t i = 0; i < n; i++)
        rd[i].res = KVT_CALLER_SKIP;
    /* The reads taken move to rd[0..m). */
    for (size_t i = 0; i < n; i++) {
        if (!prepare(e, &rd[i]))
            continue;
        if (!io && !(io = context_take(e)))
            break;
        kvt_page_xfer_begin(e, rd[i].pg, XFER_SSD_READ, false);
        struct kvt_caller_read t = rd[m];
        rd[m++] = rd[i];
        rd[i] = t;
    }
    if (!m)
        goto out_give;
    e->callers.reading += m;
    kvt_unlock(e);
    r = run_reads(e, io, rd, m, kvt_ssd_pieces(e, e->page_bytes), sc);
    kvt_lock(e);
    for (size_t i = 0; i < m; i++) {
        if (r < 0 && rd[i].pending)
            rd[i].res = r; /* not read whole: the page is as it was */
        finish(e, &rd[i]);
    }
    e->callers.reading -= m;
    kvt_ssd_callers_done(e);
out_give:
    if (io)
        context_give(e, io, r < 0);
}

/* ------------------------------------------------------------- writes */

/* A persist kvt_put writes its pages down itself, in its own thread, each
 * piece as soon as the put has copied it into its DRAM slot, and hands the
 * written slots to the mover to commit (kvt_ssd_queue_written). With
 * persist every page goes to disk anyway (the write-ahead and kvt_flush see
 * to it); written by the put, it starts a piece into the call instead of
 * after the batch's copy and commit, and the pages a put stores beyond DRAM
 * leave DRAM clean, so that the next batch's room waits for no write-back.
 * Written from the DRAM slot, not from the caller's buffer: the arena is
 * in huge pages, so a 4 MiB piece is one request to the disk, where a
 * buffer in 4 KiB pages is cut in many and wrote about a third slower here
 * (docs/performance.md#durable-store). Without persist a page may never
 * need the disk, and the write would be work for nothing. */

bool kvt_ssd_caller_writes(const kvt_engine *e)
{
    return e->ssd && e->io && kvt_persisted(e) && e->cfg.codec == KVT_CODEC_NONE &&
           kvt_dram_writes_ahead(e);
}

/* A slot for w and where it is (locked). False: none now (the page goes
 * down the usual way). */
static bool write_prepare(kvt_engine *e, struct kvt_caller_write *w)
{
    int err = 0;
    uint32_t slot = kvt_slots(e)->take(e->ssd, &err);
    if (slot == KVT_NONE)
        return false; /* the mover's write will meet what is wrong */
    if (kvt_slots(e)->locate(e->ssd, slot, true, &w->fd, &w->off) < 0) {
        kvt_slots(e)->give(e->ssd, slot);
        return false;
    }
    w->slot = slot;
    w->generation = kvt_ssd_generation_take(e);
    w->res = 0;
    w->pending = 0;
    return true;
}

/* The requests of w[0..n), per pieces each, in sc. */
static void write_reqs(kvt_engine *e, struct kvt_caller_write *w, size_t n, uint32_t per,
                       const struct kvt_caller_scratch *sc)
{
    for (size_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < per; k++) {
            size_t io_len, crc_len, at = kvt_ssd_piece(e, e->page_bytes, k, &io_len, &crc_len);
            struct kvt_io_req *q = &sc->reqs[i * per + k];
            *q = (struct kvt_io_req){ .fd = w[i].fd, .write = true, .buf = (uint8_t *)w[i].buf + at,
                                      .len = io_len, .off = w[i].off + at, .user = &w[i] };
            sc->rp[i * per + k] = q;
        }
    }
}

/* How many of the requests from the sent-th (per a page, in page order)
 * have their bytes in place: those that end within the first ready bytes
 * of the pages, taken in order. */
static size_t reqs_ready(const kvt_engine *e, size_t nreq, size_t sent, uint32_t per,
                         size_t ready)
{
    size_t k = 0;
    for (; sent + k < nreq; k++) {
        size_t q = sent + k, io_len, crc_len;
        size_t at = kvt_ssd_piece(e, e->page_bytes, (uint32_t)(q % per), &io_len, &crc_len);
        if ((q / per) * e->page_bytes + at + io_len > ready)
            break;
    }
    return k;
}

/* Marks the requests rp[from..nreq) never sent (unlocked): their pages fail
 * with err (nothing of theirs reached the disk, or not all). */
static void reqs_unsent(struct kvt_io_req *const *rp, size_t from, size_t nreq, int err)
{
    for (size_t q = from; q < nreq; q++) {
        struct kvt_caller_write *x = rp[q]->user;
        if (x->res == 0)
            x->res = err;
    }
}

/* Sends each piece of w[0..n) once fill says its bytes are in place, and
 * reaps them, calling fill between reaps while it has work (unlocked). The
 * back-end holds back what is over its depth and bytes in flight and sends
 * it as earlier pieces come back (io.h). Returns 0, or submit's or reap's
 * error (the pages not written whole fail with it); fill has returned false
 * either way. */
static int run_writes(kvt_engine *e, void *io, struct kvt_caller_write *w, size_t n,
                      const struct kvt_caller_scratch *sc, bool (*fill)(void *, size_t *),
                      void *arg)
{
    uint32_t per = kvt_ssd_pieces(e, e->page_bytes);
    size_t nreq = n * per, sent = 0, back = 0, ready = 0;
    int r = 0;
    write_reqs(e, w, n, per, sc);
    bool more = true;
    while (more || back < sent) {
        if (more)
            more = fill(arg, &ready);
        size_t k = r == 0 ? reqs_ready(e, nreq, sent, per, ready) : 0;
        if (k && (r = e->io->submit(io, sc->rp + sent, k)) == 0) {
            for (size_t q = sent; q < sent + k; q++)
                ((struct kvt_caller_write *)sc->rp[q]->user)->pending++;
            sent += k;
        }
        if (back == sent)
            continue;
        struct kvt_io_req *done[CALLER_REAP];
        int m = e->io->reap(io, done, CALLER_REAP, more ? 0 : 1);
        if (m < 0) {
            r = m;
            break; /* what is still out stays pending: the caller retires its slots */
        }
        back += (size_t)m;
        for (int i = 0; i < m; i++) {
            struct kvt_caller_write *x = done[i]->user;
            if (done[i]->res < 0 && x->res == 0)
                x->res = done[i]->res;
            x->pending--;
        }
    }
    while (more)
        more = fill(arg, &ready);
    /* Pieces never sent: the copy failed, or submit refused them. */
    reqs_unsent(sc->rp, sent, nreq, r < 0 ? r : -ECANCELED);
    return r;
}

size_t kvt_ssd_caller_write(kvt_engine *e, struct kvt_caller_write *w, size_t n,
                            const struct kvt_caller_scratch *sc,
                            bool (*fill)(void *arg, size_t *ready), void *arg)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        w[i].res = KVT_CALLER_SKIP;
    void *io = n && kvt_ssd_caller_writes(e) ? context_take(e) : NULL;
    if (!io)
        return 0;
    /* The first m pages, up to the first that gets no slot, in the
     * caller's order: their slots ascend as the pages do, their blocks
     * allocated in one go (the store's prepare, as a flush's). */
    kvt_slots_prepare(e, (uint32_t)n);
    for (size_t i = 0; i < n && write_prepare(e, &w[i]); i++)
        m++;
    if (!m) {
        context_give(e, io, false);
        return 0;
    }
    kvt_unlock(e);
    int r = run_writes(e, io, w, m, sc, fill, arg);
    kvt_lock(e);
    for (size_t i = 0; i < m; i++) {
        if (w[i].res == 0)
            continue;
        /* The page goes down the usual way; the mover's write says what
         * is wrong, if anything still is. Only the medium's failure (-EIO)
         * says the slot is bad, as for the mover's writes, and a piece
         * still out on a broken ring may land in it later. */
        if (w[i].res != -ECANCELED)
            e->callers.st.errors_io++;
        if (w[i].res == -EIO || w[i].pending)
            kvt_slots(e)->retire(e->ssd, w[i].slot);
        else
            kvt_slots(e)->give(e->ssd, w[i].slot);
        w[i].res = KVT_CALLER_SKIP;
    }
    context_give(e, io, r < 0);
    return m;
}

void kvt_ssd_caller_write_cancel(kvt_engine *e, struct kvt_caller_write *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (w[i].res == 0)
            kvt_slots(e)->give(e->ssd, w[i].slot);
        w[i].res = KVT_CALLER_SKIP;
    }
}
