/*
 * fsck.c — `kvtier inspect DIR` and `kvtier fsck DIR [--repair]`.
 *
 * Both read a spill directory as tiers/ssd_store.h lays it out, with no
 * engine: the KVTIER layout file, the segment files present, and the LMDB
 * index opened as it is (kvt_index_open_readonly / _repair). The engine's own
 * open drops entries of other fingerprints and wipes a damaged index; these
 * commands must show what is there, so they never go through it.
 *
 * inspect reads the index and file sizes only. fsck reads every indexed
 * page's stored bytes and checks what the engine relies on when it serves a
 * page: a valid slot that no other entry names, the CRC32C, and a decode to
 * exactly page_bytes. --repair deletes the bad entries in one synced commit;
 * the slots they named become free at the engine's next open (it rebuilds its
 * free map from the index), and their pages read as misses, never as wrong
 * data.
 *
 * A running engine holds an exclusive flock on <dir>/LOCK. fsck takes it
 * shared to check and exclusive to repair, so no slot is rewritten while it is
 * read and no entry re-pointed while bad ones are deleted. inspect holds it
 * shared while it reads; when an engine holds it, inspect shows the layout
 * and the files but not the index (reading LMDB under a live writer would
 * need LMDB's reader table, a write).
 *
 * Neither writes anything without --repair: every file is opened read-only,
 * relative to the directory's descriptor, without following a link
 * (tiers/spill_dir.h), and the index without LMDB's lock file.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/kvtier.h"
#include "io/codec.h"
#include "tiers/spill_dir.h"
#include "tiers/ssd_index.h"
#include "tiers/ssd_store.h"
#include "tiers/tool.h"
#include "tools/cli.h"

int inspect_main(int argc, char **argv);
int fsck_main(int argc, char **argv);
typedef void (*fsck_bad_fn)(void *ctx, const kvt_key *k, const char *reason);
int fsck_verify(const char *dir, bool repair, fsck_bad_fn fn, void *ctx, uint64_t *checked,
                uint64_t *bad);

/* ------------------------------------------------------------- the directory */

struct seg_file {
    uint32_t n;
    uint64_t bytes, allocated;      /* st_size, st_blocks * 512 */
};

enum spill_use { USE_INSPECT, USE_CHECK, USE_REPAIR };

struct spill {
    const char *dir;
    int dfd;                        /* the directory; -1 when not open */
    size_t page_bytes, slot_bytes;
    uint32_t sps;                   /* slots per segment */
    struct seg_file *seg;           /* the segment files present, by number */
    size_t nseg;
    struct kvt_index *ix;           /* NULL: no index was ever made here */
    int lock_fd;                    /* held while fsck runs; -1 when none */
    bool in_use;                    /* inspect: an engine holds the directory (index not read) */
    char err[PATH_MAX + 512];       /* why spill_open failed */
};

__attribute__((format(printf, 3, 4))) static int spill_fail(struct spill *s, int rc,
                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof(s->err), fmt, ap);
    va_end(ap);
    return rc;
}

static int read_layout(struct spill *s)
{
    int rc = kvt_spill_opendir(s->dir, false, &s->dfd);
    if (rc)
        return spill_fail(s, rc, "%s", kvt_last_error());
    rc = kvt_ssd_read_layout_at(s->dfd, s->dir, &s->page_bytes, &s->slot_bytes, &s->sps);
    if (rc == -ENOENT)
        return spill_fail(s, rc, "%s is not a kvtier spill directory (it has no KVTIER file)",
                          s->dir);
    if (rc == KVT_ECORRUPT)
        return spill_fail(s, rc, "%s/KVTIER is damaged: not a format %d layout file", s->dir,
                          KVT_SSD_FORMAT);
    if (rc)
        return spill_fail(s, rc, "%s", kvt_last_error());
    return 0;
}

/* fsck holds <dir>/LOCK shared to check and exclusive to repair; inspect
 * shared, when no engine holds it. A directory no engine ever opened has no
 * LOCK file: only a repair creates one. */
static int spill_lock(struct spill *s, enum spill_use use)
{
    s->lock_fd = kvt_spill_openat(s->dfd, s->dir, KVT_SPILL_LOCK,
                                  use == USE_REPAIR ? O_RDWR | O_CREAT : O_RDONLY, 0600, NULL);
    if (s->lock_fd == -ENOENT) {
        s->lock_fd = -1;
        return 0;
    }
    if (s->lock_fd < 0) {
        int rc = s->lock_fd;
        s->lock_fd = -1;
        return spill_fail(s, rc, "%s", kvt_last_error());
    }
    int held = flock(s->lock_fd, (use == USE_REPAIR ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0;
    if (held && errno != EWOULDBLOCK)
        return spill_fail(s, -errno, "cannot lock %s/LOCK: %s", s->dir, strerror(errno));
    if (use == USE_INSPECT) {
        s->in_use = held;
        return 0;
    }
    if (held)
        return spill_fail(s, -EBUSY, "%s is in use by a running kvtier engine: close it first",
                          s->dir);
    return 0;
}

/* "seg-NNNNNN.kvt" exactly as the store names it; anything else in the
 * directory is not ours. */
static bool seg_name(const char *name, uint32_t *n)
{
    return kvt_spill_name_of(name, n) == KVT_NAME_SEGMENT;
}

static int seg_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct seg_file *)a)->n, y = ((const struct seg_file *)b)->n;
    return (x > y) - (x < y);
}

static int seg_add(struct spill *s, size_t *cap, struct seg_file f)
{
    if (s->nseg == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct seg_file *ns = realloc(s->seg, nc * sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        s->seg = ns;
        *cap = nc;
    }
    s->seg[s->nseg++] = f;
    return 0;
}

/* A listing of the directory open as dfd (which stays open): the one the
 * layout was read from, not whatever the path names now. */
static DIR *dir_list(int dfd)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return d;
}

static int list_segments(struct spill *s)
{
    DIR *d = dir_list(s->dfd);
    struct dirent *de;
    size_t cap = 0;
    int rc = 0;
    if (!d)
        return spill_fail(s, -errno, "cannot read %s: %s", s->dir, strerror(errno));
    while (rc == 0 && (de = readdir(d)) != NULL) {
        struct stat st;
        uint32_t n;
        /* A link is listed as absent: its pages are reported, never read. */
        if (!seg_name(de->d_name, &n) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        rc = seg_add(s, &cap, (struct seg_file){ n, (uint64_t)st.st_size,
                                                 (uint64_t)st.st_blocks * 512 });
    }
    closedir(d);
    if (rc)
        return spill_fail(s, rc, "out of memory listing %s", s->dir);
    if (s->nseg)
        qsort(s->seg, s->nseg, sizeof(*s->seg), seg_cmp);
    return 0;
}

static const struct seg_file *seg_find(const struct spill *s, uint32_t n)
{
    struct seg_file k = { .n = n };
    return s->nseg ? bsearch(&k, s->seg, s->nseg, sizeof(k), seg_cmp) : NULL;
}

static int open_index(struct spill *s, enum spill_use use)
{
    if (s->in_use)
        return 0;   /* an engine writes it now: see the file comment */
    int rc = use == USE_REPAIR ? kvt_index_open_repair(s->dir, &s->ix)
                               : kvt_index_open_readonly(s->dir, &s->ix);
    if (rc == -ENOENT)
        return 0; /* the engine indexed no page here yet */
    if (rc == KVT_ECORRUPT)
        return spill_fail(s, rc, "%s (an engine wipes a damaged index at its next open, and "
                          "with it every page; fsck cannot repair it)", kvt_last_error());
    return rc ? spill_fail(s, rc, "%s", kvt_last_error()) : 0;
}

static void spill_close(struct spill *s)
{
    kvt_index_close(s->ix);
    s->ix = NULL;
    free(s->seg);
    s->seg = NULL;
    s->nseg = 0;
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the flock */
    s->lock_fd = -1;
    if (s->dfd >= 0)
        close(s->dfd);
    s->dfd = -1;
}

/* The lock comes before the listing and the index, so that both describe
 * the same directory. On failure s->err says why. */
static int spill_open(struct spill *s, const char *dir, enum spill_use use)
{
    int rc;
    memset(s, 0, sizeof(*s));
    s->dir = dir;
    s->lock_fd = s->dfd = -1;
    if ((rc = read_layout(s)) != 0 || (rc = spill_lock(s, use)) != 0 ||
        (rc = list_segments(s)) != 0 || (rc = open_index(s, use)) != 0)
        spill_close(s);
    return rc;
}

/* ------------------------------------------------------------- output helpers */

static const char *codec_name(unsigned c, char *buf, size_t n)
{
    static const char *const names[] = { "none", "zstd", "zstd-shuffle16" };
    if (c < sizeof(names) / sizeof(names[0]))
        return names[c];
    snprintf(buf, n, "codec-%u", c);
    return buf;
}

static const char *key_str(const kvt_key *k, char *buf, size_t n)
{
    if (k->layer == KVT_ALL_LAYERS)
        snprintf(buf, n, "%" PRIu64 ":all:%" PRIu32, k->id, k->index);
    else
        snprintf(buf, n, "%" PRIu64 ":%" PRIu32 ":%" PRIu32, k->id, k->layer, k->index);
    return buf;
}

static double ratio(uint64_t raw, uint64_t stored)
{
    return stored ? (double)raw / (double)stored : 0;
}

static uint64_t pad4k(uint64_t n)
{
    return (n + 4095) & ~(uint64_t)4095;
}

struct cmd_opts {
    const char *dir;
    bool json, repair;
};

/* 0: run; 1: --help printed; -EINVAL: usage error, said on stderr. */
static int parse_args(const char *cmd, int argc, char **argv, bool repair_ok,
                      void (*usage)(FILE *), struct cmd_opts *o)
{
    static const struct option lo[] = {
        { "json", 0, 0, 'j' }, { "repair", 0, 0, 'r' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    int c;
    *o = (struct cmd_opts){ 0 };
    optind = 0; /* glibc: a full re-initialisation, for callers that parse twice */
    opterr = 0; /* our own message, with the command's name */
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'j': o->json = true; break;
        case 'r':
            if (!repair_ok) {
                cli_error(cmd, 2, "there is no --repair here (see kvtier fsck)");
                return -EINVAL;
            }
            o->repair = true;
            break;
        case 'h': usage(stdout); return 1;
        default:
            cli_error(cmd, 2, "unknown option '%s'", argv[optind - 1]);
            goto bad;
        }
    }
    if (optind == argc) {
        cli_error(cmd, 2, "which directory? (kvtier %s DIR)", cmd);
        return -EINVAL;
    }
    if (optind + 1 != argc) {
        cli_error(cmd, 2, "unexpected argument '%s'", argv[optind + 1]);
        return -EINVAL;
    }
    o->dir = argv[optind];
    if (!o->dir[0]) {
        cli_error(cmd, 2, "the directory name is empty");
        return -EINVAL;
    }
    return 0;
bad:
    usage(stderr);
    return -EINVAL;
}

/* ------------------------------------------------------------- inspect */

#define TOP_IDS 10

struct id_pages {
    uint64_t id, pages;
};

struct fp_count {
    uint64_t fp, entries;
};

struct codec_sum {
    uint64_t entries, stored, raw;
};

struct inspect {
    uint64_t entries, ids, gen_min, gen_max, stored_padded;
    struct fp_count *fp;            /* a handful in practice: searched linearly */
    size_t nfp, fp_cap, fp_last;
    struct codec_sum codec[256];    /* by the entry's codec byte, valid or not */
    struct id_pages top[TOP_IDS];   /* most pages first, then lower id */
    size_t ntop;
    struct id_pages run;            /* the id being counted */
};

struct usage {
    uint64_t seg_bytes, seg_alloc, seg_slots, index_bytes, index_alloc, other_alloc;
};

/* Keeps the TOP_IDS ids with most pages; an id ties below the ones before it. */
static void top_add(struct inspect *in, struct id_pages p)
{
    size_t i = in->ntop;
    while (i > 0 && in->top[i - 1].pages < p.pages)
        i--;
    if (i >= TOP_IDS)
        return;
    size_t last = in->ntop < TOP_IDS ? in->ntop : TOP_IDS - 1;
    memmove(&in->top[i + 1], &in->top[i], (last - i) * sizeof(p));
    in->top[i] = p;
    if (in->ntop < TOP_IDS)
        in->ntop++;
}

/* Entries of one fingerprint come in runs, so the last one found is tried
 * first. */
static int fp_add(struct inspect *in, uint64_t fp)
{
    if (in->nfp && in->fp[in->fp_last].fp == fp) {
        in->fp[in->fp_last].entries++;
        return 0;
    }
    for (size_t i = 0; i < in->nfp; i++)
        if (in->fp[i].fp == fp) {
            in->fp[i].entries++;
            in->fp_last = i;
            return 0;
        }
    if (in->nfp == in->fp_cap) {
        size_t nc = in->fp_cap ? in->fp_cap * 2 : 8;
        struct fp_count *n = realloc(in->fp, nc * sizeof(*n));
        if (!n)
            return -ENOMEM;
        in->fp = n;
        in->fp_cap = nc;
    }
    in->fp[in->nfp] = (struct fp_count){ fp, 1 };
    in->fp_last = in->nfp++;
    return 0;
}

/* foreach walks in key order: the pages of one id are adjacent, so ids are
 * counted as runs, with no table of ids. */
static int inspect_entry(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *e)
{
    struct inspect *in = ctx;
    struct codec_sum *c = &in->codec[e->codec];
    if (in->entries == 0 || k->id != in->run.id) {
        if (in->entries)
            top_add(in, in->run);
        in->run = (struct id_pages){ k->id, 0 };
        in->ids++;
    }
    in->run.pages++;
    if (in->entries == 0 || e->generation < in->gen_min)
        in->gen_min = e->generation;
    if (e->generation > in->gen_max)
        in->gen_max = e->generation;
    in->entries++;
    c->entries++;
    c->stored += e->stored_len;
    c->raw += e->raw_len;
    in->stored_padded += pad4k(e->stored_len);
    return fp_add(in, e->fingerprint);
}

static int fp_cmp(const void *a, const void *b)
{
    const struct fp_count *x = a, *y = b;
    if (x->entries != y->entries)
        return x->entries < y->entries ? 1 : -1;
    return (x->fp > y->fp) - (x->fp < y->fp);
}

/* Regular files directly in the directory open as dfd: st_size and
 * allocated bytes. A link counts as nothing: what it points to is not in
 * the directory (and may be anywhere). */
static void dir_usage(int dfd, uint64_t *bytes, uint64_t *alloc)
{
    DIR *d = dir_list(dfd);
    struct dirent *de;
    struct stat st;
    if (!d)
        return;
    while ((de = readdir(d)) != NULL)
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode)) {
            *bytes += (uint64_t)st.st_size;
            *alloc += (uint64_t)st.st_blocks * 512;
        }
    closedir(d);
}

static void disk_usage(const struct spill *s, struct usage *u)
{
    uint64_t ignored = 0;
    memset(u, 0, sizeof(*u));
    for (size_t i = 0; i < s->nseg; i++) {
        u->seg_bytes += s->seg[i].bytes;
        u->seg_alloc += s->seg[i].allocated;
        u->seg_slots += s->seg[i].bytes / s->slot_bytes;
    }
    int ifd = kvt_spill_subdir(s->dfd, s->dir, KVT_SPILL_INDEX, false);
    if (ifd >= 0) {
        dir_usage(ifd, &u->index_bytes, &u->index_alloc);
        close(ifd);
    }
    kvt_clear_error(); /* no index directory (or a link there): nothing to count */
    /* The directory itself holds KVTIER, LOCK and the segments: count the
     * whole of it and take the segments back out. */
    dir_usage(s->dfd, &ignored, &u->other_alloc);
    u->other_alloc -= u->seg_alloc < u->other_alloc ? u->seg_alloc : u->other_alloc;
}

static void inspect_text(FILE *t, const struct spill *s, const struct inspect *in,
                         const struct usage *u)
{
    char b1[32], b2[32], b3[32], b4[32], kb[48];
    uint64_t full = (uint64_t)s->sps * s->slot_bytes;
    fprintf(t, "kvtier inspect %s%s\n", s->dir, s->in_use ? " (in use by a running engine)" : "");
    fprintf(t, "layout     format %d: page_bytes %zu, slot_bytes %zu, %" PRIu32
               " slots per segment (%s)\n", KVT_SSD_FORMAT, s->page_bytes, s->slot_bytes, s->sps,
            cli_bytes(b1, sizeof(b1), (double)full));
    fprintf(t, "segments   %zu files, %s (%s allocated), %" PRIu64 " slots\n", s->nseg,
            cli_bytes(b1, sizeof(b1), (double)u->seg_bytes),
            cli_bytes(b2, sizeof(b2), (double)u->seg_alloc), u->seg_slots);
    /* The last segment is shorter when the tier's capacity ends inside it. */
    for (size_t i = 0; i < s->nseg; i++)
        fprintf(t, "  seg-%06" PRIu32 ".kvt  %10s  %10s allocated\n", s->seg[i].n,
                cli_bytes(b1, sizeof(b1), (double)s->seg[i].bytes),
                cli_bytes(b2, sizeof(b2), (double)s->seg[i].allocated));
    if (s->in_use) {
        fprintf(t, "index      not read while an engine holds the directory\n");
    } else if (!s->ix) {
        fprintf(t, "index      none (no page was ever indexed here)\n");
    } else {
        fprintf(t, "index      %" PRIu64 " entries in %zu fingerprints, generations %" PRIu64
                   "..%" PRIu64 ", %s stored in slots\n", in->entries, in->nfp, in->gen_min,
                in->gen_max, cli_bytes(b1, sizeof(b1), (double)in->stored_padded));
        for (size_t i = 0; i < in->nfp; i++)
            fprintf(t, "  fingerprint 0x%016" PRIx64 "  %" PRIu64 " entries\n", in->fp[i].fp,
                    in->fp[i].entries);
        for (unsigned c = 0; c < 256; c++)
            if (in->codec[c].entries)
                fprintf(t, "  codec %-15s %8" PRIu64
                           " entries  stored %10s  raw %10s  ratio %.3f\n",
                        codec_name(c, kb, sizeof(kb)), in->codec[c].entries,
                        cli_bytes(b1, sizeof(b1), (double)in->codec[c].stored),
                        cli_bytes(b2, sizeof(b2), (double)in->codec[c].raw),
                        ratio(in->codec[c].raw, in->codec[c].stored));
        fprintf(t, "  %" PRIu64 " sequence ids%s\n", in->ids, in->ntop ? "; most pages:" : "");
        for (size_t i = 0; i < in->ntop; i++)
            fprintf(t, "    id %-20" PRIu64 " %8" PRIu64 " pages\n", in->top[i].id,
                    in->top[i].pages);
    }
    fprintf(t, "disk       %s allocated: segments %s, index %s, other %s\n",
            cli_bytes(b1, sizeof(b1), (double)(u->seg_alloc + u->index_alloc + u->other_alloc)),
            cli_bytes(b2, sizeof(b2), (double)u->seg_alloc),
            cli_bytes(b3, sizeof(b3), (double)u->index_alloc),
            cli_bytes(b4, sizeof(b4), (double)u->other_alloc));
}

static void inspect_json_index(const struct inspect *in)
{
    char kb[48];
    bool first = true;
    printf("\"index\": {\"present\": true, \"entries\": %" PRIu64 ", \"fingerprints\": [",
           in->entries);
    for (size_t i = 0; i < in->nfp; i++)
        printf("%s{\"fingerprint\": \"0x%016" PRIx64 "\", \"entries\": %" PRIu64 "}",
               i ? ", " : "", in->fp[i].fp, in->fp[i].entries);
    printf("], \"codecs\": [");
    for (unsigned c = 0; c < 256; c++) {
        const struct codec_sum *cs = &in->codec[c];
        if (!cs->entries)
            continue;
        printf("%s{\"codec\": \"%s\", \"entries\": %" PRIu64 ", \"stored_bytes\": %" PRIu64
               ", \"raw_bytes\": %" PRIu64 ", \"ratio\": %.4f}", first ? "" : ", ",
               codec_name(c, kb, sizeof(kb)), cs->entries, cs->stored, cs->raw,
               ratio(cs->raw, cs->stored));
        first = false;
    }
    printf("], \"ids\": %" PRIu64 ", \"top_ids\": [", in->ids);
    for (size_t i = 0; i < in->ntop; i++)
        printf("%s{\"id\": %" PRIu64 ", \"pages\": %" PRIu64 "}", i ? ", " : "", in->top[i].id,
               in->top[i].pages);
    printf("], \"generation_min\": %" PRIu64 ", \"generation_max\": %" PRIu64
           ", \"slot_bytes_used\": %" PRIu64 "}", in->gen_min, in->gen_max, in->stored_padded);
}

static void inspect_json(const struct spill *s, const struct inspect *in, const struct usage *u)
{
    printf("{\"dir\": ");
    cli_json_str(s->dir);
    printf(", \"in_use\": %s, \"layout\": {\"format\": %d, \"page_bytes\": %zu, "
           "\"slot_bytes\": %zu, "
           "\"slots_per_segment\": %" PRIu32 ", \"segment_bytes\": %" PRIu64 "}, \"segments\": [",
           s->in_use ? "true" : "false", KVT_SSD_FORMAT, s->page_bytes, s->slot_bytes, s->sps,
           (uint64_t)s->sps * s->slot_bytes);
    for (size_t i = 0; i < s->nseg; i++)
        printf("%s{\"segment\": %" PRIu32 ", \"bytes\": %" PRIu64 ", \"allocated_bytes\": %" PRIu64
               "}", i ? ", " : "", s->seg[i].n, s->seg[i].bytes, s->seg[i].allocated);
    printf("], ");
    if (s->ix)
        inspect_json_index(in);
    else
        printf("\"index\": {\"present\": false, \"entries\": 0}");
    printf(", \"disk\": {\"segment_bytes\": %" PRIu64 ", \"segment_allocated_bytes\": %" PRIu64
           ", \"segment_slots\": %" PRIu64 ", \"index_bytes\": %" PRIu64
           ", \"index_allocated_bytes\": %" PRIu64 ", \"other_allocated_bytes\": %" PRIu64
           ", \"total_allocated_bytes\": %" PRIu64 "}}\n",
           u->seg_bytes, u->seg_alloc, u->seg_slots, u->index_bytes, u->index_alloc,
           u->other_alloc, u->seg_alloc + u->index_alloc + u->other_alloc);
}

static void inspect_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier inspect DIR [--json]\n"
            "\n"
            "What an SSD spill directory holds: its layout, the segment files, the index\n"
            "(entries by fingerprint and by codec with the compression ratio, sequence ids\n"
            "with the most pages, generations) and the disk space used. Changes nothing.\n"
            "\n"
            "options:\n"
            "  --json       one JSON object on stdout; text goes to stderr\n"
            "  -h, --help   this text\n");
}

int inspect_main(int argc, char **argv)
{
    struct cmd_opts o;
    struct spill s;
    struct inspect in = { 0 };
    struct usage u;
    int rc = parse_args("inspect", argc, argv, false, inspect_usage, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (spill_open(&s, o.dir, USE_INSPECT) != 0)
        return cli_error("inspect", 1, "%s", s.err);
    if (s.ix && (rc = kvt_index_foreach(s.ix, inspect_entry, &in)) != 0) {
        cli_error("inspect", 1, "reading the index of %s: %s (%s)", s.dir, kvt_strerror(rc),
                  kvt_last_error());
        goto out;
    }
    if (in.entries)
        top_add(&in, in.run);
    if (in.nfp)
        qsort(in.fp, in.nfp, sizeof(*in.fp), fp_cmp);
    disk_usage(&s, &u);
    inspect_text(o.json ? stderr : stdout, &s, &in, &u);
    if (o.json)
        inspect_json(&s, &in, &u);
out:
    free(in.fp);
    spill_close(&s);
    return rc ? 1 : 0;
}

/* ------------------------------------------------------------- fsck */

enum reason {
    R_CODEC, R_LENGTH, R_MISALIGNED, R_OUTSIDE, R_NO_SEGMENT, R_PAST_EOF, R_READ, R_CRC,
    R_DECODE, R_SHARED, R_COUNT
};
#define R_GOOD (-1)

static const char *const reason_names[R_COUNT] = {
    "bad-codec", "bad-length", "misaligned", "outside-segment", "no-segment",
    "past-eof",  "read-error", "crc",        "decode",          "shared-slot",
};

struct rec {
    kvt_key key;
    struct kvt_ssd_entry e;
    int reason;         /* R_GOOD or an enum reason */
    uint64_t aux;       /* for the report: crc found, file size, errno, entry kept */
};

/* Entries to read, sorted by where they are: each segment is read front to
 * back once, and entries naming one slot end up side by side. */
struct loc {
    uint64_t off;
    uint32_t seg;
    size_t i;           /* in struct fsck.rec: key order breaks ties */
};

struct fsck {
    struct spill sp;
    struct rec *rec;    /* every entry, in key order */
    size_t n, cap;
    struct kvt_codec *codec;
    uint8_t *buf, *raw; /* slot_bytes read, page_bytes decoded */
    int fd;             /* the segment being read, or -1 */
    uint32_t fd_seg;
    uint64_t ok, bad, bytes_verified, repaired, by_reason[R_COUNT];
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
    if (e->codec > KVT_CODEC_ZSTD_SHUFFLE16)
        return R_CODEC;
    if (e->raw_len != s->page_bytes || !e->stored_len || e->stored_len > s->slot_bytes ||
        (e->codec == KVT_CODEC_NONE && e->stored_len != e->raw_len))
        return R_LENGTH;
    if (e->offset % s->slot_bytes)
        return R_MISALIGNED;
    if (e->offset / s->slot_bytes >= s->sps)
        return R_OUTSIDE;
    if (!(sf = seg_find(s, e->segment)))
        return R_NO_SEGMENT;
    /* The engine reads the padded length with O_DIRECT: all of it must exist. */
    if (e->offset + pad4k(e->stored_len) > sf->bytes) {
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

static int seg_open(struct fsck *f, uint32_t seg)
{
    char name[32];
    if (f->fd >= 0 && f->fd_seg == seg)
        return 0;
    if (f->fd >= 0)
        close(f->fd);
    kvt_spill_segment_name(seg, name, sizeof(name));
    f->fd = kvt_spill_openat(f->sp.dfd, f->sp.dir, name, O_RDONLY, 0, NULL);
    f->fd_seg = seg;
    if (f->fd < 0) {
        int rc = f->fd;
        f->fd = -1;
        return rc;
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

/* Reads one entry's stored bytes and checks them. A bad page sets r->reason;
 * only a failure that is not the page's (out of memory) is returned. */
static int verify(struct fsck *f, struct rec *r)
{
    const struct kvt_ssd_entry *e = &r->e;
    int rc = seg_open(f, e->segment);
    if (rc == 0)
        rc = read_full(f->fd, f->buf, e->stored_len, e->offset);
    if (rc) {
        /* The listing said the file was there and long enough: it changed. */
        struct stat st;
        r->reason = rc == -ENOENT ? R_NO_SEGMENT : rc == -ENODATA ? R_PAST_EOF : R_READ;
        r->aux = (uint64_t)-rc;
        if (rc == -ENODATA)
            r->aux = fstat(f->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
        return 0;
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
    double now = cli_now();
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

static int fsck_alloc(struct fsck *f)
{
    int rc = kvt_codec_new(KVT_CODEC_NONE, 0, f->sp.page_bytes, &f->codec);
    if (rc)
        return rc; /* a context of any codec decodes all of them */
    f->buf = malloc(f->sp.slot_bytes);
    f->raw = malloc(f->sp.page_bytes);
    return f->buf && f->raw ? 0 : -ENOMEM;
}

/* Checks every entry; r->reason says how each fared. */
static int fsck_check(struct fsck *f)
{
    struct loc *l = NULL;
    size_t nl = 0;   /* the entries check_entry passed, to be read */
    int rc;
    if ((rc = kvt_index_foreach(f->sp.ix, collect, f)) != 0) {
        snprintf(f->err, sizeof(f->err), "reading the index of %s: %s", f->sp.dir,
                 rc == -ENOMEM ? kvt_strerror(rc) : kvt_last_error());
        return rc;
    }
    if (f->n == 0)
        return 0;
    if ((rc = fsck_alloc(f)) != 0 || !(l = malloc(f->n * sizeof(*l)))) {
        rc = rc ? rc : -ENOMEM;
        goto out_fail;
    }
    for (size_t i = 0; i < f->n; i++) {
        struct rec *r = &f->rec[i];
        if ((r->reason = check_entry(&f->sp, &r->e, &r->aux)) == R_GOOD)
            l[nl++] = (struct loc){ r->e.offset, r->e.segment, i };
    }
    if ((rc = verify_all(f, l, nl)) != 0)
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
        } else {
            f->bad++;
            f->by_reason[f->rec[i].reason]++;
        }
    }
}

/* One synced commit deletes them all, or none. */
static int fsck_repair(struct fsck *f)
{
    kvt_key *del = malloc((f->bad ? f->bad : 1) * sizeof(*del));
    size_t m = 0;
    if (!del)
        return -ENOMEM;
    for (size_t i = 0; i < f->n; i++)
        if (f->rec[i].reason != R_GOOD)
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
                 "slot_bytes %zu", e->stored_len, e->raw_len, codec_name(e->codec, kb, sizeof(kb)),
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
                 codec_name(e->codec, kb, sizeof(kb)), e->raw_len);
        break;
    default: /* R_SHARED */
        snprintf(buf, n, "the slot is kept by %s", key_str(&f->rec[r->aux].key, kb, sizeof(kb)));
        break;
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
        if (r->reason == R_GOOD)
            continue;
        bad_detail(f, r, d, sizeof(d));
        fprintf(t, "  bad %-20s %-15s segment %" PRIu32 " offset %" PRIu64 ": %s\n",
                key_str(&r->key, kb, sizeof(kb)), reason_names[r->reason], r->e.segment,
                r->e.offset, d);
    }
    fprintf(t, "checked %zu entries: %" PRIu64 " ok, %" PRIu64 " bad", f->n, f->ok, f->bad);
    for (int k = 0, first = 1; k < R_COUNT; k++)
        if (f->by_reason[k]) {
            fprintf(t, "%s%s %" PRIu64, first ? " (" : ", ", reason_names[k], f->by_reason[k]);
            first = 0;
        }
    fprintf(t, "%s; %s verified\n", f->bad ? ")" : "",
            cli_bytes(b1, sizeof(b1), (double)f->bytes_verified));
    if (repair && f->bad)
        fprintf(t, "repaired: deleted %" PRIu64 " bad entr%s from the index\n", f->repaired,
                f->repaired == 1 ? "y" : "ies");
    else if (f->bad)
        fprintf(t, "run 'kvtier fsck --repair %s' to delete the bad entries from the index\n",
                f->sp.dir);
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
        if (r->reason == R_GOOD)
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
    printf("], \"repair\": %s, \"repaired\": %" PRIu64 "}\n", repair ? "true" : "false",
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
            "Writes nothing without --repair. Needs the directory not to be in use by an\n"
            "engine.\n"
            "\n"
            "options:\n"
            "  --repair     delete the bad entries from the index (one synced commit);\n"
            "               their pages then read as misses\n"
            "  --json       one JSON object on stdout; text goes to stderr\n"
            "  -h, --help   this text\n"
            "\n"
            "exit status: 0 all entries good (or repaired), 1 bad entries or an error,\n"
            "2 usage error\n");
}

int fsck_main(int argc, char **argv)
{
    struct cmd_opts o;
    struct fsck f = { .fd = -1 };
    int rc = parse_args("fsck", argc, argv, true, fsck_usage, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    f.progress = true;
    f.tty = isatty(STDERR_FILENO);
    f.progress_at = f.tty ? 0 : cli_now();
    rc = fsck_run(&f, o.dir, o.repair);
    if (rc) {
        cli_error("fsck", 1, "%s", f.err);
    } else {
        fsck_text(o.json ? stderr : stdout, &f, o.repair);
        if (o.json)
            fsck_json(&f, o.repair);
    }
    fsck_free(&f);
    return rc || (f.bad && !o.repair) ? 1 : 0;
}

/* fsck without output, for tests and other callers: fn sees each bad entry in
 * key order with its reason's name. Returns 0, or a negative error with
 * kvt_last_error() saying why (-ENOENT: not a spill directory; KVT_ECORRUPT:
 * a damaged layout file or index; -EBUSY: an engine holds the directory). */
int fsck_verify(const char *dir, bool repair, fsck_bad_fn fn, void *ctx, uint64_t *checked,
                uint64_t *bad)
{
    struct fsck f = { .fd = -1 };
    int rc = fsck_run(&f, dir, repair);
    if (rc == 0) {
        for (size_t i = 0; fn && i < f.n; i++)
            if (f.rec[i].reason != R_GOOD)
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
