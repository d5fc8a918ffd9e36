/*
 * fsck.c — `kvtier fsck DIR [--repair]`: reads every indexed page's stored
 * bytes and checks what the engine relies on when it serves a page: a valid
 * slot that no other entry names, the CRC32C, and a decode to exactly
 * page_bytes. --repair deletes the bad entries in one synced commit; the
 * slots they named become free at the engine's next open (it rebuilds its
 * free map from the index), and their pages read as misses, never as wrong
 * data. tools/fsck/spill.h says how the directory is read and locked.
 *
 * A page is bad only when the entry itself is impossible, its file is gone
 * or too short, the medium failed (-EIO), or its bytes were read and do not
 * check out. A segment that cannot be opened or read for any other reason
 * (a symbolic link, a second hard link, a mode that forbids reading) says
 * nothing about the bytes in it: the engine keeps such pages and serves
 * them once the file is readable again (docs/security.md), so fsck reports
 * the segment as unreadable, with the reason and the fix, and --repair
 * keeps its entries. Deleting them lost every page of a segment that a
 * backup had hard-linked.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/codec.h"
#include "store/spill_dir.h"
#include "store/ssd_store.h"
#include "lab/tool.h"
#include "tools/cli.h"
#include "tools/fsck/spill.h"

enum reason {
    R_CODEC, R_LENGTH, R_MISALIGNED, R_OUTSIDE, R_NO_SEGMENT, R_PAST_EOF, R_READ, R_CRC,
    R_DECODE, R_SHARED, R_COUNT
};
#define R_GOOD (-1)
#define R_UNREADABLE (-2)   /* its segment could not be read: neither good nor bad, kept */

static const char *const reason_names[R_COUNT] = {
    "bad-codec", "bad-length", "misaligned", "outside-segment", "no-segment",
    "past-eof",  "read-error", "crc",        "decode",          "shared-slot",
};

struct rec {
    kvt_key key;
    struct kvt_ssd_entry e;
    int reason;         /* R_GOOD, R_UNREADABLE or an enum reason */
    uint64_t aux;       /* for the report: crc found, file size, errno, entry kept */
};

/* Entries to read, sorted by where they are: each segment is read front to
 * back once, and entries naming one slot end up side by side. */
struct loc {
    uint64_t off;
    uint32_t seg;
    size_t i;           /* in struct fsck.rec: key order breaks ties */
};

/* A segment that could not be opened or read, and what its name is. */
struct useg {
    uint32_t seg;
    int err;            /* errno of the open or read */
    mode_t mode;        /* of the name itself (not followed); 0 when unknown */
    uint64_t nlink;
    uint64_t entries;   /* entries left unchecked in it */
    char target[160];   /* a symbolic link's text, read without following it */
};

struct fsck {
    struct spill sp;
    struct rec *rec;    /* every entry, in key order */
    size_t n, cap;
    struct kvt_codec *codec;
    uint8_t *buf, *raw; /* the longest stored_len read, page_bytes decoded */
    int fd;             /* segment fd_seg open, or -1 */
    uint32_t fd_seg;
    int fd_err;         /* fd_seg's open failed with this: its other entries too */
    bool fd_tried;      /* fd_seg was opened (or tried) */
    struct useg *useg;  /* by segment number: entries are read in that order */
    size_t nuseg, useg_cap;
    uint64_t ok, bad, unreadable, bytes_verified, repaired, by_reason[R_COUNT];
    bool progress, tty;
    double progress_at;
    uint64_t ticks;
    char err[PATH_MAX + 512];
};

static int collect(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *e)
{
    struct fsck *f = ctx;
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 1024;
        struct rec *nr = realloc(f->rec, nc * sizeof(*nr));
        if (!nr)
            return -ENOMEM;
        f->rec = nr;
        f->cap = nc;
    }
    f->rec[f->n++] = (struct rec){ *k, *e, R_GOOD, 0 };
    return 0;
}

/* What can be told from the entry and the directory listing alone — the
 * checks the engine makes at open before it trusts a slot. */
static int check_entry(const struct spill *s, const struct kvt_ssd_entry *e, uint64_t *aux)
{
    const struct seg_file *sf;
    if (e->codec >= KVT_CODEC_COUNT)
        return R_CODEC;
    if (e->raw_len != s->page_bytes || !e->stored_len || e->stored_len > s->slot_bytes ||
        (e->codec == KVT_CODEC_NONE && e->stored_len != e->raw_len))
        return R_LENGTH;
    if (e->offset % s->slot_bytes)
        return R_MISALIGNED;
    if (e->offset / s->slot_bytes >= s->sps)
        return R_OUTSIDE;
    /* A segment not listed as a file may still be there as a link or a
     * directory, which makes it unreadable, not missing: the open says. */
    if (!(sf = spill_seg_find(s, e->segment)))
        return R_GOOD;
    /* The engine reads the padded length with O_DIRECT: all of it must exist. */
    if (e->offset + spill_pad4k(e->stored_len) > sf->bytes) {
        *aux = sf->bytes;
        return R_PAST_EOF;
    }
    return R_GOOD;
}

static int loc_cmp(const void *a, const void *b)
{
    const struct loc *x = a, *y = b;
    if (x->seg != y->seg)
        return x->seg < y->seg ? -1 : 1;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Segment seg open for reading: 0, or the open's error. It is opened once:
 * a failure stands for all its entries. */
static int seg_open(struct fsck *f, uint32_t seg)
{
    char name[32];
    if (f->fd_tried && f->fd_seg == seg)
        return f->fd_err;
    if (f->fd >= 0)
        close(f->fd);
    kvt_spill_segment_name(seg, name, sizeof(name));
    f->fd = kvt_spill_openat(f->sp.dfd, f->sp.dir, name, O_RDONLY, 0, NULL);
    f->fd_seg = seg;
    f->fd_tried = true;
    f->fd_err = f->fd < 0 ? f->fd : 0;
    if (f->fd < 0)
        f->fd = -1;
    return f->fd_err;
}

/* Counts an entry of segment seg left unchecked; the first one records what
 * the segment's name is, for the report. 0 or -ENOMEM. */
static int useg_note(struct fsck *f, uint32_t seg, int err)
{
    if (f->nuseg && f->useg[f->nuseg - 1].seg == seg) {
        f->useg[f->nuseg - 1].entries++;
        return 0;
    }
    if (f->nuseg == f->useg_cap) {
        size_t nc = f->useg_cap ? f->useg_cap * 2 : 8;
        struct useg *nu = realloc(f->useg, nc * sizeof(*nu));
        if (!nu)
            return -ENOMEM;
        f->useg = nu;
        f->useg_cap = nc;
    }
    struct useg *u = &f->useg[f->nuseg++];
    struct stat st;
    char name[32];
    *u = (struct useg){ .seg = seg, .err = err, .entries = 1 };
    kvt_spill_segment_name(seg, name, sizeof(name));
    if (fstatat(f->sp.dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        u->mode = st.st_mode;
        u->nlink = (uint64_t)st.st_nlink;
    }
    ssize_t n = S_ISLNK(u->mode) ? readlinkat(f->sp.dfd, name, u->target, sizeof(u->target) - 1)
                                 : -1;
    u->target[n > 0 ? n : 0] = 0;
    return 0;
}

/* A failed open or read of r's bytes. Only a file that is gone or too short
 * and a failed medium (-EIO, which the engine also drops a page for) make a
 * page bad; any other failure leaves it unchecked and kept. Out of memory
 * or descriptors is fsck's own failure, returned. */
static int read_failed(struct fsck *f, struct rec *r, int rc)
{
    struct stat st;
    switch (rc) {
    case -ENOMEM:
    case -EMFILE:
    case -ENFILE:
        return rc;
    case -ENOENT: r->reason = R_NO_SEGMENT; break;
    case -ENODATA:
        r->reason = R_PAST_EOF;
        r->aux = f->fd >= 0 && fstat(f->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
        break;
    case -EIO:
        r->reason = R_READ;
        r->aux = EIO;
        break;
    default:
        r->reason = R_UNREADABLE;
        return useg_note(f, r->e.segment, -rc);
    }
    return 0;
}

/* Exactly n bytes at off: 0, -errno, or -ENODATA when the file ends first. */
static int read_full(int fd, void *buf, size_t n, uint64_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ENODATA;
        done += (size_t)r;
    }
    return 0;
}

/* Reads one entry's stored bytes and checks them. A bad or unreadable page
 * sets r->reason; only a failure that is not the page's (out of memory) is
 * returned. */
static int verify(struct fsck *f, struct rec *r)
{
    const struct kvt_ssd_entry *e = &r->e;
    int rc = seg_open(f, e->segment);
    if (rc == 0)
        rc = read_full(f->fd, f->buf, e->stored_len, e->offset);
    if (rc) {
        kvt_clear_error(); /* the open's message: the report says it per segment */
        return read_failed(f, r, rc);
    }
    f->bytes_verified += e->stored_len;
    /* The CRC binds the bytes to the key they are filed under: an entry
     * moved to another key fails here as surely as a damaged page. */
    uint32_t crc = kvt_crc32c(kvt_ssd_bind(&r->key, e->fingerprint, e->generation), f->buf,
                              e->stored_len);
    if (crc != e->crc) {
        r->reason = R_CRC;
        r->aux = crc;
        return 0;
    }
    rc = kvt_codec_decode(f->codec, e->codec, f->buf, e->stored_len, f->raw, e->raw_len);
    if (rc == KVT_ECORRUPT)
        r->reason = R_DECODE;
    else if (rc)
        return rc;
    return 0;
}

/* A terminal gets "\rN/M" at most ten times a second; a log gets a plain line
 * every ten seconds. The clock is read once per 64 calls. */
static void progress(struct fsck *f, size_t done, size_t total)
{
    if (!f->progress || ((++f->ticks & 63) && done != total))
        return;
    double now = util_now();
    if (now - f->progress_at < (f->tty ? 0.1 : 10.0))
        return;
    if (f->tty)
        fprintf(stderr, "\r%zu/%zu", done, total);
    else
        fprintf(stderr, "kvtier fsck: %zu/%zu entries checked\n", done, total);
    f->progress_at = now;
}

/* Of entries naming one slot, the first in key order whose bytes check out
 * keeps it (the engine keeps the first at open); the other good ones are
 * shared-slot, the others keep their own reason. */
static int verify_group(struct fsck *f, const struct loc *l, size_t n)
{
    size_t kept = SIZE_MAX;
    for (size_t j = 0; j < n; j++) {
        struct rec *r = &f->rec[l[j].i];
        int rc = verify(f, r);
        if (rc)
            return rc;
        if (r->reason != R_GOOD)
            continue;
        if (kept == SIZE_MAX) {
            kept = l[j].i;
        } else {
            r->reason = R_SHARED;
            r->aux = kept;
        }
    }
    return 0;
}

static int verify_all(struct fsck *f, struct loc *l, size_t nl)
{
    size_t before = f->n - nl; /* failed check_entry: no read needed */
    qsort(l, nl, sizeof(*l), loc_cmp);
    for (size_t a = 0, b; a < nl; a = b) {
        for (b = a + 1; b < nl && l[b].seg == l[a].seg && l[b].off == l[a].off; b++)
            ;
        int rc = verify_group(f, l + a, b - a);
        if (rc)
            return rc;
        progress(f, before + b, f->n);
    }
    if (f->tty && f->progress_at > 0)
        fputs("\r\033[K", stderr); /* the summary replaces the progress line */
    return 0;
}

/* Buffers for the longest stored page to read (not slot_bytes: the entries
 * are what is read) and one decoded page. */
static int fsck_alloc(struct fsck *f, size_t longest)
{
    int rc = kvt_codec_new(KVT_CODEC_NONE, 0, f->sp.page_bytes, &f->codec);
    if (rc)
        return rc; /* a context of any codec decodes all of them */
    f->buf = malloc(longest ? longest : 1);
    f->raw = malloc(f->sp.page_bytes);
    return f->buf && f->raw ? 0 : -ENOMEM;
}

/* Checks every entry; r->reason says how each fared. */
static int fsck_check(struct fsck *f)
{
    struct loc *l = NULL;
    size_t nl = 0;   /* the entries check_entry passed, to be read */
    size_t longest = 0;
    int rc;
    if ((rc = kvt_index_foreach(f->sp.ix, collect, f)) != 0) {
        snprintf(f->err, sizeof(f->err), "reading the index of %s: %s", f->sp.dir,
                 rc == -ENOMEM ? kvt_strerror(rc) : kvt_last_error());
        return rc;
    }
    if (f->n == 0)
        return 0;
    if (!(l = malloc(f->n * sizeof(*l)))) {
        rc = -ENOMEM;
        goto out_fail;
    }
    for (size_t i = 0; i < f->n; i++) {
        struct rec *r = &f->rec[i];
        if ((r->reason = check_entry(&f->sp, &r->e, &r->aux)) != R_GOOD)
            continue;
        l[nl++] = (struct loc){ r->e.offset, r->e.segment, i };
        longest = r->e.stored_len > longest ? r->e.stored_len : longest;
    }
    if ((rc = fsck_alloc(f, longest)) != 0 || (rc = verify_all(f, l, nl)) != 0)
        goto out_fail;
    free(l);
    return 0;

out_fail:
    snprintf(f->err, sizeof(f->err), "checking %s: %s", f->sp.dir, kvt_strerror(rc));
    free(l);
    return rc;
}

static void fsck_tally(struct fsck *f)
{
    for (size_t i = 0; i < f->n; i++) {
        if (f->rec[i].reason == R_GOOD) {
            f->ok++;
        } else if (f->rec[i].reason == R_UNREADABLE) {
            f->unreadable++;
        } else {
            f->bad++;
            f->by_reason[f->rec[i].reason]++;
        }
    }
}

/* One synced commit deletes them all, or none. The entries of unreadable
 * segments are not among them. */
static int fsck_repair(struct fsck *f)
{
    kvt_key *del = malloc((f->bad ? f->bad : 1) * sizeof(*del));
    size_t m = 0;
    if (!del)
        return -ENOMEM;
    for (size_t i = 0; i < f->n; i++)
        if (f->rec[i].reason >= 0)
            del[m++] = f->rec[i].key;
    int rc = kvt_index_commit(f->sp.ix, NULL, NULL, 0, del, m, true);
    free(del);
    if (rc) {
        snprintf(f->err, sizeof(f->err), "repair failed, the index is unchanged: %s",
                 kvt_last_error());
        return rc;
    }
    f->repaired = m;
    return 0;
}

static void fsck_free(struct fsck *f)
{
    if (f->fd >= 0)
        close(f->fd);
    kvt_codec_free(f->codec);
    free(f->buf);
    free(f->raw);
    free(f->rec);
    free(f->useg);
    spill_close(&f->sp);
}

/* Opens, checks and, with repair and bad entries, repairs. f->err says why
 * on failure. */
static int fsck_run(struct fsck *f, const char *dir, bool repair)
{
    int rc = spill_open(&f->sp, dir, repair ? USE_REPAIR : USE_CHECK);
    if (rc) {
        snprintf(f->err, sizeof(f->err), "%s", f->sp.err);
        return rc;
    }
    if (!f->sp.ix && f->sp.nseg) {
        snprintf(f->err, sizeof(f->err),
                 "%s has %zu segment files but no index: no page in them can be found (an "
                 "engine opening it starts empty)", dir, f->sp.nseg);
        return KVT_ECORRUPT;
    }
    if (!f->sp.ix)
        return 0;
    if ((rc = fsck_check(f)) != 0)
        return rc;
    fsck_tally(f);
    return repair && f->bad ? fsck_repair(f) : 0;
}

static void bad_detail(const struct fsck *f, const struct rec *r, char *buf, size_t n)
{
    const struct kvt_ssd_entry *e = &r->e;
    char kb[48];
    switch (r->reason) {
    case R_CODEC: snprintf(buf, n, "codec %u is unknown", e->codec); break;
    case R_LENGTH:
        snprintf(buf, n, "stored_len %" PRIu32 ", raw_len %" PRIu32 ", codec %s; page_bytes %zu, "
                 "slot_bytes %zu", e->stored_len, e->raw_len, spill_codec_name(e->codec, kb, sizeof(kb)),
                 f->sp.page_bytes, f->sp.slot_bytes);
        break;
    case R_MISALIGNED: snprintf(buf, n, "offset is not a multiple of %zu", f->sp.slot_bytes); break;
    case R_OUTSIDE: snprintf(buf, n, "a segment has %" PRIu32 " slots only", f->sp.sps); break;
    case R_NO_SEGMENT: snprintf(buf, n, "seg-%06" PRIu32 ".kvt is missing", e->segment); break;
    case R_PAST_EOF:
        snprintf(buf, n, "the segment file ends first (%" PRIu64 " bytes)", r->aux);
        break;
    case R_READ: snprintf(buf, n, "read failed: %s", strerror((int)r->aux)); break;
    case R_CRC:
        snprintf(buf, n, "crc32c of the key and stored bytes is 0x%08" PRIx64
                 ", the index says 0x%08" PRIx32 " (damaged, or not this key's page)", r->aux,
                 e->crc);
        break;
    case R_DECODE:
        snprintf(buf, n, "%s data does not decode to %" PRIu32 " bytes",
                 spill_codec_name(e->codec, kb, sizeof(kb)), e->raw_len);
        break;
    default: /* R_SHARED */
        snprintf(buf, n, "the slot is kept by %s", spill_key_str(&f->rec[r->aux].key, kb, sizeof(kb)));
        break;
    }
}

/* Why segment u could not be read ("unreadable: <why>"), and what the user
 * can do about it. */
static void useg_why(const struct fsck *f, const struct useg *u, char *why, size_t n, char *fix,
                     size_t m)
{
    char p[PATH_MAX + 40];
    snprintf(p, sizeof(p), "%s/seg-%06" PRIu32 ".kvt", f->sp.dir, u->seg);
    if (S_ISLNK(u->mode)) {
        snprintf(why, n, "a symbolic link (to %s): kvtier follows no link inside its directory",
                 u->target[0] ? u->target : "?");
        snprintf(fix, m, "replace the link %s with the file it points to", p);
    } else if (u->err == EMLINK || (S_ISREG(u->mode) && u->nlink > 1)) {
        snprintf(why, n, "%s: it has %" PRIu64 " hard links (another name elsewhere, such as a "
                 "backup made with cp -al or rsnapshot); kvtier uses only files with one link",
                 strerror(EMLINK), u->nlink);
        snprintf(fix, m, "give it one link: remove its other names, or make it a copy of its "
                 "own (cp -p %s %s.copy && mv %s.copy %s)", p, p, p, p);
    } else if (u->err == EACCES || u->err == EPERM) {
        snprintf(why, n, "%s (mode %04o)", strerror(u->err), (unsigned)(u->mode & 07777));
        snprintf(fix, m, "let the user who runs kvtier read and write it (chmod u+rw %s)", p);
    } else if (u->mode && !S_ISREG(u->mode)) {
        snprintf(why, n, "not a regular file (%s)", S_ISDIR(u->mode) ? "a directory"
                                                    : S_ISFIFO(u->mode) ? "a FIFO"
                                                    : "a device or socket");
        snprintf(fix, m, "put the segment file back as %s", p);
    } else {
        snprintf(why, n, "%s", strerror(u->err));
        snprintf(fix, m, "make %s a regular file kvtier can read, with one link", p);
    }
}

static void fsck_text_unreadable(FILE *t, const struct fsck *f)
{
    char why[512], fix[5 * PATH_MAX];
    for (size_t i = 0; i < f->nuseg; i++) {
        const struct useg *u = &f->useg[i];
        useg_why(f, u, why, sizeof(why), fix, sizeof(fix));
        fprintf(t, "  unreadable seg-%06" PRIu32 ".kvt (%" PRIu64 " entr%s): %s\n"
                   "    to fix: %s\n", u->seg, u->entries, u->entries == 1 ? "y" : "ies", why,
                fix);
    }
}

static void fsck_text(FILE *t, const struct fsck *f, bool repair)
{
    char kb[48], d[256], b1[32];
    fprintf(t, "kvtier fsck %s: page_bytes %zu, slot_bytes %zu, %" PRIu32 " slots per segment, "
               "%zu segment files\n", f->sp.dir, f->sp.page_bytes, f->sp.slot_bytes, f->sp.sps,
            f->sp.nseg);
    if (!f->sp.ix) {
        fprintf(t, "no index: no page is stored here, nothing to check\n");
        return;
    }
    for (size_t i = 0; i < f->n; i++) {
        const struct rec *r = &f->rec[i];
        if (r->reason < 0)
            continue;
        bad_detail(f, r, d, sizeof(d));
        fprintf(t, "  bad %-20s %-15s segment %" PRIu32 " offset %" PRIu64 ": %s\n",
                spill_key_str(&r->key, kb, sizeof(kb)), reason_names[r->reason], r->e.segment,
                r->e.offset, d);
    }
    fsck_text_unreadable(t, f);
    fprintf(t, "checked %zu entries: %" PRIu64 " ok, %" PRIu64 " bad", f->n, f->ok, f->bad);
    for (int k = 0, first = 1; k < R_COUNT; k++)
        if (f->by_reason[k]) {
            fprintf(t, "%s%s %" PRIu64, first ? " (" : ", ", reason_names[k], f->by_reason[k]);
            first = 0;
        }
    if (f->bad)
        fputc(')', t);
    if (f->unreadable)
        fprintf(t, ", %" PRIu64 " unreadable in %zu segment%s", f->unreadable, f->nuseg,
                f->nuseg == 1 ? "" : "s");
    fprintf(t, "; %s verified\n", cli_bytes(b1, sizeof(b1), (double)f->bytes_verified));
    if (repair && f->bad)
        fprintf(t, "repaired: deleted %" PRIu64 " bad entr%s from the index\n", f->repaired,
                f->repaired == 1 ? "y" : "ies");
    else if (f->bad)
        fprintf(t, "run 'kvtier fsck --repair %s' to delete the bad entries from the index\n",
                f->sp.dir);
    if (f->unreadable)
        fprintf(t, "the %" PRIu64 " entr%s of unreadable segments %s not checked and %s kept "
                   "(--repair never deletes them; an engine keeps their pages and serves them "
                   "once the file is readable): fix each file as said above, then run "
                   "'kvtier fsck %s' again\n", f->unreadable, f->unreadable == 1 ? "y" : "ies",
                f->unreadable == 1 ? "was" : "were", f->unreadable == 1 ? "is" : "are",
                f->sp.dir);
}

static void fsck_json_unreadable(const struct fsck *f)
{
    char why[512], fix[5 * PATH_MAX];
    printf(", \"unreadable\": %" PRIu64 ", \"unreadable_segments\": [", f->unreadable);
    for (size_t i = 0; i < f->nuseg; i++) {
        const struct useg *u = &f->useg[i];
        useg_why(f, u, why, sizeof(why), fix, sizeof(fix));
        printf("%s{\"segment\": %" PRIu32 ", \"entries\": %" PRIu64 ", \"error\": ",
               i ? ", " : "", u->seg, u->entries);
        cli_json_str(strerror(u->err));
        printf(", \"why\": ");
        cli_json_str(why);
        printf(", \"fix\": ");
        cli_json_str(fix);
        putchar('}');
    }
    putchar(']');
}

static void fsck_json(const struct fsck *f, bool repair)
{
    char d[256];
    printf("{\"dir\": ");
    cli_json_str(f->sp.dir);
    printf(", \"index\": %s, \"entries\": %zu, \"ok\": %" PRIu64 ", \"bad\": %" PRIu64
           ", \"bytes_verified\": %" PRIu64 ", \"bad_by_reason\": {",
           f->sp.ix ? "true" : "false", f->n, f->ok, f->bad, f->bytes_verified);
    for (int k = 0; k < R_COUNT; k++)
        printf("%s\"%s\": %" PRIu64, k ? ", " : "", reason_names[k], f->by_reason[k]);
    printf("}, \"bad_entries\": [");
    for (size_t i = 0, first = 1; i < f->n; i++) {
        const struct rec *r = &f->rec[i];
        if (r->reason < 0)
            continue;
        bad_detail(f, r, d, sizeof(d));
        printf("%s{\"id\": %" PRIu64 ", \"layer\": %" PRIu32 ", \"index\": %" PRIu32
               ", \"reason\": \"%s\", \"segment\": %" PRIu32 ", \"offset\": %" PRIu64
               ", \"detail\": ", first ? "" : ", ", r->key.id, r->key.layer, r->key.index,
               reason_names[r->reason], r->e.segment, r->e.offset);
        cli_json_str(d);
        putchar('}');
        first = 0;
    }
    putchar(']');
    fsck_json_unreadable(f);
    printf(", \"repair\": %s, \"repaired\": %" PRIu64 "}\n", repair ? "true" : "false",
           f->repaired);
}

static void fsck_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier fsck DIR [--repair] [--json]\n"
            "\n"
            "Checks every page an SSD spill directory indexes: its location (segment file\n"
            "present, slot-aligned offset inside it, lengths the layout allows, no slot\n"
            "named twice), the CRC32C that binds its stored bytes to its key (an entry\n"
            "filed under another key fails it), and that it decodes to exactly one page.\n"
            "A page is bad only when that is proven; a segment file that cannot be read\n"
            "(a symbolic link, a second hard link, no read permission) is reported as\n"
            "unreadable, with the reason and the fix, and its pages are kept. Writes\n"
            "nothing without --repair. Needs the directory not to be in use by an engine.\n"
            "\n"
            "options:\n"
            "  --repair     delete the bad entries from the index (one synced commit);\n"
            "               their pages then read as misses. Entries of unreadable\n"
            "               segments are kept\n"
            "  --json       one JSON object on stdout; text goes to stderr\n"
            "  -h, --help   this text\n"
            "\n"
            "exit status: 0 all entries good (or the bad ones repaired), 1 bad entries\n"
            "or an error, 2 usage error, 3 no bad entry left but some segments could\n"
            "not be read (their entries were kept, unchecked)\n");
}

/* 1 wins over 3: a bad entry left, or an error, is the thing to act on. */
static int fsck_status(const struct fsck *f, int rc, bool repair)
{
    if (rc || (f->bad && !repair))
        return 1;
    return f->unreadable ? 3 : 0;
}

int fsck_main(int argc, char **argv)
{
    struct cmd_opts o;
    struct fsck f = { .fd = -1 };
    int rc = spill_parse_args("fsck", argc, argv, true, fsck_usage, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    f.progress = true;
    f.tty = isatty(STDERR_FILENO);
    f.progress_at = f.tty ? 0 : util_now();
    rc = fsck_run(&f, o.dir, o.repair);
    if (rc) {
        cli_error("fsck", 1, "%s", f.err);
    } else {
        fsck_text(o.json ? stderr : stdout, &f, o.repair);
        if (o.json)
            fsck_json(&f, o.repair);
    }
    int status = fsck_status(&f, rc, o.repair);
    fsck_free(&f);
    return status;
}

/* fsck without output, for tests and other callers: fn sees each bad entry in
 * key order with its reason's name (entries of unreadable segments are not
 * bad: checked counts them, bad does not). Returns 0, or a negative error with
 * kvt_last_error() saying why (-ENOENT: not a spill directory; KVT_ECORRUPT:
 * a damaged layout file or index; -EBUSY: an engine holds the directory). */
int fsck_verify(const char *dir, bool repair, fsck_bad_fn fn, void *ctx, uint64_t *checked,
                uint64_t *bad)
{
    struct fsck f = { .fd = -1 };
    int rc = fsck_run(&f, dir, repair);
    if (rc == 0) {
        for (size_t i = 0; fn && i < f.n; i++)
            if (f.rec[i].reason >= 0)
                fn(ctx, &f.rec[i].key, reason_names[f.rec[i].reason]);
        if (checked)
            *checked = f.n;
        if (bad)
            *bad = f.bad;
    } else {
        kvt_fail(rc, "%s", f.err);
    }
    fsck_free(&f);
    return rc;
}
