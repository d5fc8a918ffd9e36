/*
 * ssd_store.c — the SSD tier's files: layout, segments, the free map.
 *
 * See ssd_store.h for the on-disk layout and the crash rules. This file owns
 * the directory (one process at a time: an flock on <dir>/LOCK), the KVTIER
 * layout file, the segment descriptors and which slots are free, used or bad.
 * Files are opened and removed through store/spill_dir.h only. The page
 * bytes themselves move through io/ on the mover thread.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "io/io.h"
#include "store/spill_dir.h"
#include "store/ssd_store.h"
#include "base/base.h"
#include "io/codec.h"

struct kvt_ssd {
    char *dir;
    int dfd;                    /* the directory, opened once */
    int lock_fd;
    size_t page_bytes, slot_bytes;
    uint32_t slots_per_seg, nslots, nsegs;
    int *seg_fd;                /* -1 until made or opened */
    uint8_t *seg_state;         /* SEG_*, under the engine lock */
    uint64_t *seg_retry_ns;     /* a full disk: no new attempt to grow it before this time */
    uint32_t *seg_ready;         /* slots from the segment's start whose blocks are allocated */
    uint32_t grow_slots;        /* a segment's blocks are allocated this many slots at a time */
    uint32_t fsize_slots;       /* slots per file under RLIMIT_FSIZE (UINT32_MAX: no limit) */
    uint8_t *seg_dirty;         /* written since the last sync: the mover's alone, which
                                   syncs unlocked (a bit in seg_state raced seg_open) */
    uint8_t *slot_state;        /* SLOT_* */
    uint32_t *free_stack, nfree;
    uint64_t bad, parked;
    uint64_t bad_loaded;        /* of bad, those the index already records */
    bool persist;
    struct kvt_index *ix;
    struct kvt_syncer sync;     /* tests: syncs go through a power-loss model */
};

/* A segment is opened on first use: read-write, or read-only when the file
 * allows no more (its pages are served, no new page goes there). Its blocks
 * are allocated as its slots are handed out (seg_grow); a failed allocation
 * (disk full) is undone and tried again a second later. */
enum { SEG_UNKNOWN = 0, SEG_READY, SEG_READONLY };
#define SEG_RETRY_NS 1000000000ull
#define SEG_GROW_BYTES (64ull << 20)

/* PARKED: free, but in a segment that cannot be written this run; not bad
 * (nothing is wrong with the medium), and free again at the next open. */
enum { SLOT_FREE = 0, SLOT_USED = 1, SLOT_BAD = 2, SLOT_PARKED = 3 };

/* ------------------------------------------------------------- layout */

void kvt_ssd_segment_path(const char *dir, uint32_t n, char *buf, size_t len)
{
    char name[32];
    kvt_spill_segment_name(n, name, sizeof(name));
    snprintf(buf, len, "%s/%s", dir, name);
}

/* One "key value\n" line of the layout file, the value a decimal number with
 * nothing after it. */
static bool layout_line(const char **p, const char *key, unsigned long long *v)
{
    size_t n = strlen(key);
    char *end;
    if (strncmp(*p, key, n) != 0 || (*p)[n] != ' ' || !isdigit((unsigned char)(*p)[n + 1]))
        return false;
    errno = 0;
    *v = strtoull(*p + n + 1, &end, 10);
    if (errno || *end != '\n')
        return false;
    *p = end + 1;
    return true;
}

static int parse_layout(const char *text, size_t *page_bytes, size_t *slot_bytes,
                        uint32_t *slots_per_segment)
{
    unsigned long long fmt, pb, sb, sps;
    const char *p = text;
    if (!layout_line(&p, "kvtier-ssd", &fmt) || !layout_line(&p, "page_bytes", &pb) ||
        !layout_line(&p, "slot_bytes", &sb) || !layout_line(&p, "slots_per_segment", &sps) || *p)
        return KVT_ECORRUPT;
    if (fmt != KVT_SSD_FORMAT || !pb || pb > SIZE_MAX || sb < pb || sb > SIZE_MAX || sb % 4096 ||
        !sps || sps > UINT32_MAX)
        return KVT_ECORRUPT;
    *page_bytes = (size_t)pb;
    *slot_bytes = (size_t)sb;
    *slots_per_segment = (uint32_t)sps;
    return 0;
}

int kvt_ssd_read_layout_at(int dfd, const char *dir, size_t *page_bytes, size_t *slot_bytes,
                           uint32_t *slots_per_segment)
{
    char text[256];
    int fd = kvt_spill_openat(dfd, dir, KVT_SPILL_LAYOUT, O_RDONLY, 0, NULL);
    if (fd < 0)
        return fd;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    int err = errno;
    close(fd);
    if (n < 0)
        return kvt_fail(-err, "cannot read %s/%s: %s", dir, KVT_SPILL_LAYOUT, strerror(err));
    text[n] = 0;
    if ((size_t)n == sizeof(text) - 1 || strlen(text) != (size_t)n ||
        parse_layout(text, page_bytes, slot_bytes, slots_per_segment) != 0)
        return kvt_fail(KVT_ECORRUPT, "%s/%s is damaged: not a format %d layout file", dir,
                        KVT_SPILL_LAYOUT, KVT_SSD_FORMAT);
    return 0;
}

int kvt_ssd_read_layout(const char *dir, size_t *page_bytes, size_t *slot_bytes,
                        uint32_t *slots_per_segment)
{
    int dfd, r = kvt_spill_opendir(dir, false, &dfd);
    if (r < 0)
        return r;
    r = kvt_ssd_read_layout_at(dfd, dir, page_bytes, slot_bytes, slots_per_segment);
    close(dfd);
    return r;
}

/* Written to KVTIER.tmp, synced, renamed over KVTIER, and the directory
 * synced: a crash leaves the old layout or the new one. */
static int write_layout(struct kvt_ssd *s)
{
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "kvtier-ssd %d\npage_bytes %zu\nslot_bytes %zu\nslots_per_segment %" PRIu32
                     "\n", KVT_SSD_FORMAT, s->page_bytes, s->slot_bytes, s->slots_per_seg);
    int fd = kvt_spill_openat(s->dfd, s->dir, KVT_SPILL_LAYOUT_TMP, O_WRONLY | O_CREAT | O_TRUNC,
                              0600, NULL);
    if (fd < 0)
        return fd;
    int r = write(fd, text, (size_t)n) == n && fdatasync(fd) == 0 ? 0 : -errno;
    close(fd);
    if (r == 0 && renameat(s->dfd, KVT_SPILL_LAYOUT_TMP, s->dfd, KVT_SPILL_LAYOUT) != 0)
        r = -errno;
    if (r == 0 && fsync(s->dfd) != 0)
        r = -errno;
    return r ? kvt_fail(r, "cannot write %s/%s: %s", s->dir, KVT_SPILL_LAYOUT, strerror(-r)) : 0;
}

/* ------------------------------------------------------------- open */

static int lock_dir(struct kvt_ssd *s)
{
    s->lock_fd = kvt_spill_openat(s->dfd, s->dir, KVT_SPILL_LOCK, O_RDWR | O_CREAT, 0600, NULL);
    if (s->lock_fd < 0)
        return s->lock_fd;
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return kvt_fail(-EBUSY, "ssd_dir %s is in use by another kvtier engine (or by kvtier "
                        "fsck or inspect)", s->dir);
    return 0;
}

/* Checks the KVTIER file against this configuration; wipes kvtier's files
 * (with a message) when persist is off, or the layout is damaged or of
 * another page size. A directory without the layout file was empty (the
 * claim checked it): the layout is written before anything else. */
static int check_layout(struct kvt_ssd *s, bool persist, struct kvt_ssd_open_info *info)
{
    size_t pb, sb;
    uint32_t sps;
    int r = kvt_ssd_read_layout_at(s->dfd, s->dir, &pb, &sb, &sps);
    const char *why = NULL;
    char buf[200];
    if (r == -ENOENT) {
        kvt_clear_error();
        return write_layout(s);
    }
    if (r < 0 && r != KVT_ECORRUPT)
        return r;   /* unreadable (permissions, a link): named, never wiped */
    if (!persist)
        why = "persist=0: previous contents discarded";
    else if (r == KVT_ECORRUPT)
        why = "its KVTIER layout file is damaged";
    else if (pb != s->page_bytes || sb != s->slot_bytes) {
        snprintf(buf, sizeof(buf),
                 "it was written with page_bytes %zu and slot_bytes %zu; this engine uses %zu "
                 "and %zu", pb, sb, s->page_bytes, s->slot_bytes);
        why = buf;
    }
    kvt_clear_error();
    if (!why) {
        s->slots_per_seg = sps;
        return 0;
    }
    if ((r = kvt_spill_wipe(s->dfd, s->dir)) < 0)
        return r;
    if (persist) {
        info->wiped = true;
        snprintf(info->message, sizeof(info->message), "ssd_dir %s wiped: %s", s->dir, why);
    }
    return write_layout(s);
}

/* Whether index/data.mdb is there (through no link: kvt_index_open refuses
 * one anyway, this only decides a message). */
static bool has_index(struct kvt_ssd *s)
{
    int ifd = kvt_spill_subdir(s->dfd, s->dir, KVT_SPILL_INDEX, false);
    if (ifd < 0) {
        kvt_clear_error();
        return false;
    }
    bool there = faccessat(ifd, KVT_SPILL_INDEX_DATA, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
    close(ifd);
    return there;
}

/* Segment files with no index to name their pages: say so once (their
 * slots are reused as the free map says). */
static void note_orphans(struct kvt_ssd *s, struct kvt_ssd_open_info *info)
{
    char name[32];
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->nsegs; i++) {
        kvt_spill_segment_name(i, name, sizeof(name));
        n += faccessat(s->dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
    }
    if (n && !info->message[0])
        snprintf(info->message, sizeof(info->message),
                 "ssd_dir %s: the index was missing or emptied while %" PRIu32 " segment files "
                 "were present: their pages are gone, starting empty", s->dir, n);
}

struct scan {
    struct kvt_ssd *s;
    kvt_ssd_entry_fn fn;
    void *ctx;
    kvt_key *drop;
    size_t ndrop, cap;
    int err;
};

static int scan_drop(struct scan *sc, const kvt_key *k)
{
    if (sc->ndrop == sc->cap) {
        size_t nc = sc->cap ? sc->cap * 2 : 64;
        kvt_key *nd = realloc(sc->drop, nc * sizeof(*nd));
        if (!nd)
            return -ENOMEM;
        sc->drop = nd;
        sc->cap = nc;
    }
    sc->drop[sc->ndrop++] = *k;
    return 0;
}

/* An entry is kept only if it names a slot inside the tier that no earlier
 * entry names, with lengths this engine can read. */
static int scan_entry(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    struct scan *sc = ctx;
    struct kvt_ssd *s = sc->s;
    uint32_t slot = kvt_ssd_slot_of(s, v->segment, v->offset);
    bool ok = slot != KVT_NONE && s->slot_state[slot] == SLOT_FREE && v->raw_len == s->page_bytes &&
              v->stored_len && v->stored_len <= s->slot_bytes &&
              (v->codec != KVT_CODEC_NONE || v->stored_len == v->raw_len) &&
              v->codec < KVT_CODEC_COUNT;
    if (!ok)
        return scan_drop(sc, k);
    s->slot_state[slot] = SLOT_USED;
    int r = sc->fn ? sc->fn(sc->ctx, k, v, slot) : 0;
    return r;
}

static int load_entries(struct kvt_ssd *s, kvt_ssd_entry_fn fn, void *ctx,
                        struct kvt_ssd_open_info *info)
{
    struct scan sc = { .s = s, .fn = fn, .ctx = ctx };
    int r = kvt_index_foreach(s->ix, scan_entry, &sc);
    if (r == 0 && sc.ndrop)
        r = kvt_index_commit(s->ix, NULL, NULL, 0, sc.drop, sc.ndrop, true);
    info->dropped += sc.ndrop;
    if (sc.ndrop && !info->message[0])
        snprintf(info->message, sizeof(info->message),
                 "ssd_dir %s: %zu index entries named no valid slot and were dropped", s->dir,
                 sc.ndrop);
    free(sc.drop);
    return r;
}

/* slots_per_seg is the layout file's (any value up to 2^32 - 1), so the
 * rounding up is done in 64 bits: in 32 it wraps to 0 segments for the
 * largest values, and every segment access then overruns the tables. */
static int alloc_maps(struct kvt_ssd *s)
{
    s->nsegs = (uint32_t)(((uint64_t)s->nslots + s->slots_per_seg - 1) / s->slots_per_seg);
    s->seg_fd = malloc(s->nsegs * sizeof(int));
    s->seg_state = calloc(s->nsegs, 1);
    s->seg_retry_ns = calloc(s->nsegs, sizeof(uint64_t));
    s->seg_ready = calloc(s->nsegs, sizeof(uint32_t));
    s->seg_dirty = calloc(s->nsegs, 1);
    s->slot_state = calloc(s->nslots, 1);
    s->free_stack = malloc((size_t)s->nslots * sizeof(uint32_t));
    if (!s->seg_fd || !s->seg_state || !s->seg_retry_ns || !s->seg_ready || !s->seg_dirty ||
        !s->slot_state || !s->free_stack)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->nsegs; i++)
        s->seg_fd[i] = -1;
    return 0;
}

/* A slot the index records as bad stays out of use; one that an entry
 * names is the entry's (its read will tell). */
static int load_bad(void *ctx, uint32_t segment, uint64_t offset)
{
    struct kvt_ssd *s = ctx;
    uint32_t slot = kvt_ssd_slot_of(s, segment, offset);
    if (slot != KVT_NONE && s->slot_state[slot] == SLOT_FREE) {
        s->slot_state[slot] = SLOT_BAD;
        s->bad++;
        s->bad_loaded++;
    }
    return 0;
}

/* Records every bad slot in the index, so the next open retires them too. */
static int save_bad(struct kvt_ssd *s)
{
    if (!s->persist || !s->ix || s->bad == s->bad_loaded)
        return 0;
    uint32_t *seg = malloc(s->bad * sizeof(*seg));
    uint64_t *off = malloc(s->bad * sizeof(*off));
    size_t n = 0;
    int r = seg && off ? 0 : -ENOMEM;
    for (uint32_t i = 0; !r && i < s->nslots && n < s->bad; i++) {
        if (s->slot_state[i] != SLOT_BAD)
            continue;
        kvt_ssd_where(s, i, &seg[n], &off[n]);
        n++;
    }
    if (!r)
        r = kvt_index_bad_put(s->ix, seg, off, n);
    free(seg);
    free(off);
    return r;
}

/* Slots a write would put past RLIMIT_FSIZE: the kernel answers such a
 * write (or preallocation) with SIGXFSZ, which kills the process, and a
 * library must not kill its host. They are parked; what they hold already
 * is still read. */
static void park_past_fsize(struct kvt_ssd *s)
{
    for (uint32_t i = 0; i < s->nslots; i++)
        if (i % s->slots_per_seg >= s->fsize_slots && s->slot_state[i] == SLOT_FREE) {
            s->slot_state[i] = SLOT_PARKED;
            s->parked++;
        }
}

static void build_free_stack(struct kvt_ssd *s)
{
    park_past_fsize(s);
    s->nfree = 0;
    for (uint32_t i = s->nslots; i-- > 0;) /* low slots on top: segments fill in order */
        if (s->slot_state[i] == SLOT_FREE)
            s->free_stack[s->nfree++] = i;
}

/* RLIMIT_FSIZE now, in whole slots per file (UINT32_MAX: none). Asked at
 * each use: a host may lower it while the engine is open. */
static uint32_t fsize_slots_now(const struct kvt_ssd *s)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return UINT32_MAX;
    uint64_t n = (uint64_t)rl.rlim_cur / s->slot_bytes;
    return n < UINT32_MAX ? (uint32_t)n : UINT32_MAX;
}

/* RLIMIT_FSIZE at open. -EFBIG when not even one slot fits. */
static int fsize_limit(struct kvt_ssd *s)
{
    struct rlimit rl;
    s->fsize_slots = fsize_slots_now(s);
    if (s->fsize_slots || getrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 0;
    return kvt_fail(-EFBIG, "ssd_dir %s: the file size limit (RLIMIT_FSIZE, %llu bytes) is below "
                    "one SSD slot (%zu bytes): raise it (ulimit -f) or use no SSD tier", s->dir,
                    (unsigned long long)rl.rlim_cur, s->slot_bytes);
}

int kvt_ssd_open(const char *dir, size_t page_bytes, uint64_t ssd_bytes, bool persist,
                 uint64_t fingerprint, kvt_ssd_entry_fn fn, void *ctx, struct kvt_ssd **out,
                 struct kvt_ssd_open_info *info)
{
    int r;
    memset(info, 0, sizeof(*info));
    struct kvt_ssd *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->lock_fd = s->dfd = -1;
    s->dir = strdup(dir);
    s->page_bytes = s->slot_bytes = page_bytes;
    s->slots_per_seg = (uint32_t)(KVT_SSD_SEGMENT_BYTES / page_bytes);
    if (!s->slots_per_seg)
        s->slots_per_seg = 1;
    s->nslots = (uint32_t)(ssd_bytes / page_bytes);
    s->persist = persist;
    if (!s->dir) {
        r = -ENOMEM;
        goto out_free;
    }
    bool ours;
    if ((r = kvt_spill_opendir(dir, true, &s->dfd)) < 0 ||
        (r = kvt_spill_claim(s->dfd, dir, &ours)) < 0 || (r = lock_dir(s)) < 0 ||
        (r = check_layout(s, persist, info)) < 0 || (r = alloc_maps(s)) < 0 ||
        (r = fsize_limit(s)) < 0)
        goto out_free;
    s->grow_slots = (uint32_t)(SEG_GROW_BYTES / s->slot_bytes);
    if (!s->grow_slots)
        s->grow_slots = 1;
    bool had_index = has_index(s);
    struct kvt_index_open_info ii;
    if ((r = kvt_index_open(dir, persist, fingerprint, 0, &s->ix, &ii)) < 0)
        goto out_free;
    if (ii.wiped && persist && ii.message[0] && !info->message[0]) {
        info->wiped = true;
        snprintf(info->message, sizeof(info->message), "ssd_dir %s: %s", dir, ii.message);
    }
    info->dropped = ii.dropped_fingerprint;
    if (ii.upgraded && !info->message[0])
        snprintf(info->message, sizeof(info->message),
                 "ssd_dir %s: %" PRIu64 " index entries upgraded to version %d (pages bound to "
                 "their keys)", dir, ii.upgraded, KVT_SSD_ENTRY_VERSION);
    if (persist && !had_index && !info->wiped)
        note_orphans(s, info);
    if ((r = load_entries(s, fn, ctx, info)) < 0 ||
        (r = kvt_index_bad_foreach(s->ix, load_bad, s)) < 0)
        goto out_free;
    info->kept = kvt_index_count(s->ix);
    build_free_stack(s);
    *out = s;
    return 0;

out_free:
    kvt_ssd_close(s);
    return r;
}

void kvt_ssd_close(struct kvt_ssd *s)
{
    if (!s)
        return;
    if (save_bad(s) < 0)
        fprintf(stderr, "kvtier: %s: the next open may use them again\n", kvt_last_error());
    if (s->ix)
        kvt_index_close(s->ix);
    for (uint32_t i = 0; s->seg_fd && i < s->nsegs; i++)
        if (s->seg_fd[i] >= 0)
            close(s->seg_fd[i]);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the flock */
    if (s->dfd >= 0)
        close(s->dfd);
    free(s->seg_fd);
    free(s->seg_state);
    free(s->seg_retry_ns);
    free(s->seg_ready);
    free(s->seg_dirty);
    free(s->slot_state);
    free(s->free_stack);
    free(s->dir);
    free(s);
}

/* ------------------------------------------------------------- slots */

uint32_t kvt_ssd_nslots(const struct kvt_ssd *s) { return s->nslots; }

uint64_t kvt_ssd_usable_slots(const struct kvt_ssd *s)
{
    return s->nslots - s->bad - s->parked;
}
uint32_t kvt_ssd_nfree(const struct kvt_ssd *s) { return s->nfree; }
size_t kvt_ssd_slot_bytes(const struct kvt_ssd *s) { return s->slot_bytes; }
struct kvt_index *kvt_ssd_index(struct kvt_ssd *s) { return s->ix; }
uint64_t kvt_ssd_bad_slots(const struct kvt_ssd *s) { return s->bad; }
bool kvt_ssd_durable(const struct kvt_ssd *s) { return s->persist; }

static uint64_t seg_len(const struct kvt_ssd *s, uint32_t seg)
{
    uint64_t first = (uint64_t)seg * s->slots_per_seg;
    uint64_t n = s->nslots - first < s->slots_per_seg ? s->nslots - first : s->slots_per_seg;
    return n * s->slot_bytes;
}

/* Allocating a segment's blocks before its slots are used is what turns a
 * full disk into a clean error at slot allocation, instead of an ENOSPC in
 * the middle of a write-back. It goes SEG_GROW_BYTES at a time, as slots
 * are handed out, not the whole segment at its first use: with less free
 * space than a segment, the space there is still takes pages (every put
 * failed with ENOSPC when a segment was allocated whole). A disk without
 * room for a step gets the one slot asked for, and smaller steps from then
 * on. A failed allocation is undone (the file goes back to its size), so a
 * full disk is not left fuller. */
/* Slots' worth of blocks the disk under fd can spare for one allocation:
 * half of what is free (seg_grow says why). False when it cannot say. */
static bool spare_slots(const struct kvt_ssd *s, int fd, uint64_t *room)
{
    struct statvfs vfs;
    if (fstatvfs(fd, &vfs) != 0)
        return false;
    *room = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2 / s->slot_bytes;
    return true;
}

static int seg_grow(struct kvt_ssd *s, uint32_t seg, uint32_t want)
{
    uint32_t cap = (uint32_t)(seg_len(s, seg) / s->slot_bytes);
    uint32_t have = s->seg_ready[seg], lim = fsize_slots_now(s);
    int fd = s->seg_fd[seg], r = 0;
    char name[32];
    kvt_spill_segment_name(seg, name, sizeof(name));
    if (want > lim)
        return kvt_fail(-EFBIG, "%s/%s: slot %u lies past the file size limit (RLIMIT_FSIZE)",
                        s->dir, name, want - 1);
    cap = cap < lim ? cap : lim;
    /* A step the disk cannot hold is not tried: a file system that fails
     * an allocation with ENOSPC may keep the blocks it took before failing
     * (ext4 does), blocks of slots not handed out yet that the disk then
     * lacks for the ones that are. At most half of what is free. */
    uint32_t step = s->grow_slots;
    uint64_t room;
    if (spare_slots(s, fd, &room))
        step = room < step ? (uint32_t)room : step; /* 0: the slot asked for alone */
    for (;;) {
        uint32_t to = have + step;
        to = to < want ? want : to > cap ? cap : to;
        struct stat st;
        off_t before = fstat(fd, &st) == 0 ? st.st_size : 0;
        r = posix_fallocate(fd, (off_t)have * (off_t)s->slot_bytes,
                            (off_t)(to - have) * (off_t)s->slot_bytes);
        if (r == 0) {
            s->seg_ready[seg] = to;
            return 0;
        }
        if ((uint64_t)before < (uint64_t)to * s->slot_bytes && ftruncate(fd, before) != 0)
            (void)0; /* the file keeps its blocks; it is ours and reused next time */
        if ((r != ENOSPC && r != EDQUOT) || to == want)
            break;
        step = step / 2;
    }
    return kvt_fail(-r, "cannot allocate blocks for %s/%s (%llu bytes): %s", s->dir, name,
                    (unsigned long long)want * s->slot_bytes, strerror(r));
}

/* Opens segment seg read-write (write) or at least read-only, creating and
 * making it when it is new (its blocks come with its slots: seg_grow). */
static int seg_open(struct kvt_ssd *s, uint32_t seg, bool write)
{
    uint8_t st = s->seg_state[seg];
    if (st == SEG_READY || (st == SEG_READONLY && !write))
        return 0;
    if (st == SEG_READONLY)
        return kvt_fail(-EACCES, "segment %u of %s can be read but not written", seg, s->dir);
    char name[32];
    bool created;
    kvt_spill_segment_name(seg, name, sizeof(name));
    int flags = O_RDWR | O_CREAT | O_DIRECT;
    int fd = kvt_spill_openat(s->dfd, s->dir, name, flags, 0600, &created);
    if (fd == -EINVAL) /* a file system without O_DIRECT (tmpfs) */
        fd = kvt_spill_openat(s->dfd, s->dir, name, flags & ~O_DIRECT, 0600, &created);
    if ((fd == -EACCES || fd == -EPERM || fd == -EROFS) && !write) {
        fd = kvt_spill_openat(s->dfd, s->dir, name, O_RDONLY | O_DIRECT, 0, NULL);
        if (fd == -EINVAL)
            fd = kvt_spill_openat(s->dfd, s->dir, name, O_RDONLY, 0, NULL);
        if (fd >= 0) {
            s->seg_fd[seg] = fd;
            s->seg_state[seg] = SEG_READONLY;
            return 0;
        }
    }
    if (fd < 0)
        return fd;
    int r = 0;
    struct stat sb;
    /* A new segment's name must be durable before an index entry names it:
     * fdatasync of the file does not sync its directory entry. */
    if (created && s->persist && fsync(s->dfd) != 0)
        r = kvt_fail(-errno, "cannot sync %s after making %s: %s", s->dir, name, strerror(errno));
    if (r < 0) {
        close(fd);
        if (created)
            unlinkat(s->dfd, name, 0);
        return r;
    }
    /* The file has its whole length from the start, its blocks allocated
     * as slots are used (seg_grow, which asks again for what an earlier run
     * allocated: a no-op). A page whose bytes a truncation took reads as
     * zeros, so its checksum says it is bad, rather than an end of file. */
    uint32_t lim = fsize_slots_now(s);
    uint64_t len = seg_len(s, seg);
    if ((uint64_t)lim * s->slot_bytes < len)
        len = (uint64_t)lim * s->slot_bytes;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size < len && ftruncate(fd, (off_t)len) != 0)
        (void)0; /* a short file reads past its end as an I/O error: still no wrong bytes */
    s->seg_ready[seg] = 0;
    s->seg_fd[seg] = fd;
    s->seg_state[seg] = SEG_READY;
    return 0;
}

/* A segment file that holds no block (made this run, never grown) is
 * removed after a failed growth: a full disk is not left with a file. */
static void seg_drop_if_empty(struct kvt_ssd *s, uint32_t seg)
{
    struct stat sb;
    for (uint32_t i = seg * s->slots_per_seg; i < s->nslots && i / s->slots_per_seg == seg; i++)
        if (s->slot_state[i] == SLOT_USED)
            return;
    if (fstat(s->seg_fd[seg], &sb) != 0 || sb.st_blocks != 0)
        return;
    char name[32];
    kvt_spill_segment_name(seg, name, sizeof(name));
    close(s->seg_fd[seg]);
    s->seg_fd[seg] = -1;
    s->seg_state[seg] = SEG_UNKNOWN;
    unlinkat(s->dfd, name, 0);
}

/* Segment seg open for writing and its blocks allocated up to slot idx. A
 * full disk is not asked again for a second (the slot stays free). */
static int seg_ready_for(struct kvt_ssd *s, uint32_t seg, uint32_t idx)
{
    /* Every slot handed out is checked against the limit as it is now, the
     * ones whose blocks are there too: a write past it raises SIGXFSZ. */
    if (idx >= fsize_slots_now(s))
        return kvt_fail(-EFBIG, "%s: slot %u of segment %u lies past the file size limit "
                        "(RLIMIT_FSIZE)", s->dir, idx, seg);
    int r = seg_open(s, seg, true);
    if (r < 0 || idx < s->seg_ready[seg])
        return r;
    if (kvt_now_ns() < s->seg_retry_ns[seg])
        return kvt_fail(-ENOSPC, "segment %u of %s: no space to grow it a moment ago", seg,
                        s->dir);
    if ((r = seg_grow(s, seg, idx + 1)) == -ENOSPC || r == -EDQUOT)
        s->seg_retry_ns[seg] = kvt_now_ns() + SEG_RETRY_NS;
    if (r < 0)
        seg_drop_if_empty(s, seg);
    return r;
}

static bool seg_full_disk(int r)
{
    return r == -ENOSPC || r == -EDQUOT;
}

/* A free slot whose segment can be written. Slots of a segment that cannot
 * be written this run (read-only, a link, not a file) are parked on the
 * way; a full disk leaves the slot free and says -ENOSPC. */
uint32_t kvt_ssd_alloc(struct kvt_ssd *s, int *err)
{
    while (s->nfree) {
        uint32_t slot = s->free_stack[s->nfree - 1];
        int r = seg_ready_for(s, slot / s->slots_per_seg, slot % s->slots_per_seg);
        if (r == 0) {
            s->nfree--;
            s->slot_state[slot] = SLOT_USED;
            return slot;
        }
        *err = r;
        if (seg_full_disk(r) || r == -ENOMEM || r == -EMFILE || r == -ENFILE)
            return KVT_NONE;
        s->nfree--;
        s->slot_state[slot] = SLOT_PARKED;
        s->parked++;
    }
    *err = KVT_EFULL;
    return KVT_NONE;
}

/* Allocates the blocks of segment seg up to slot idx ahead of its takes,
 * within what the disk can spare: at most half of the free space beyond
 * what the segment has (seg_grow's own bound), so that a hint never sets
 * off the full-disk pause a take would then meet. Failures are left for the
 * takes to meet and report; a segment left with no block and no page is
 * removed again, as after a take's failed growth (seg_drop_if_empty). */
static void seg_prepare(struct kvt_ssd *s, uint32_t seg, uint32_t idx)
{
    uint32_t lim = fsize_slots_now(s);
    if (lim == 0)
        return;
    if (idx >= lim)
        idx = lim - 1;
    if (kvt_now_ns() < s->seg_retry_ns[seg] || seg_open(s, seg, true) < 0)
        return;
    uint32_t have = s->seg_ready[seg];
    if (idx < have)
        return;
    uint64_t room = 0;
    if (spare_slots(s, s->seg_fd[seg], &room) && room && (uint64_t)idx - have >= room)
        idx = (uint32_t)(have + room - 1);
    if (!room || seg_grow(s, seg, idx + 1) < 0)
        seg_drop_if_empty(s, seg);
}

void kvt_ssd_prepare(struct kvt_ssd *s, uint32_t n)
{
    /* A hint's failure is not the caller's: the thread's message stays what
     * it was (a take that fails after it sets its own). */
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", kvt_last_error());
    uint32_t seg = UINT32_MAX, hi = 0;
    n = n < s->nfree ? n : s->nfree;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = s->free_stack[s->nfree - 1 - i];
        uint32_t sg = slot / s->slots_per_seg, idx = slot % s->slots_per_seg;
        if (sg != seg && seg != UINT32_MAX)
            seg_prepare(s, seg, hi);
        hi = sg != seg || idx > hi ? idx : hi;
        seg = sg;
    }
    if (seg != UINT32_MAX)
        seg_prepare(s, seg, hi);
    kvt_fail(0, "%s", keep);
}

void kvt_ssd_free(struct kvt_ssd *s, uint32_t slot)
{
    if (slot >= s->nslots || s->slot_state[slot] != SLOT_USED)
        return;
    s->slot_state[slot] = SLOT_FREE;
    s->free_stack[s->nfree++] = slot;
}

void kvt_ssd_mark_bad(struct kvt_ssd *s, uint32_t slot)
{
    if (slot >= s->nslots || s->slot_state[slot] == SLOT_BAD)
        return;
    if (s->slot_state[slot] == SLOT_PARKED)
        s->parked--;
    if (s->slot_state[slot] == SLOT_FREE) {
        for (uint32_t i = 0; i < s->nfree; i++)
            if (s->free_stack[i] == slot) {
                s->free_stack[i] = s->free_stack[--s->nfree];
                break;
            }
    }
    s->slot_state[slot] = SLOT_BAD;
    s->bad++;
}

uint32_t kvt_ssd_slot_of(const struct kvt_ssd *s, uint32_t segment, uint64_t offset)
{
    if (offset % s->slot_bytes || offset / s->slot_bytes >= s->slots_per_seg)
        return KVT_NONE;
    uint64_t slot = (uint64_t)segment * s->slots_per_seg + offset / s->slot_bytes;
    return slot < s->nslots ? (uint32_t)slot : KVT_NONE;
}

void kvt_ssd_where(const struct kvt_ssd *s, uint32_t slot, uint32_t *segment, uint64_t *offset)
{
    *segment = slot / s->slots_per_seg;
    *offset = (uint64_t)(slot % s->slots_per_seg) * s->slot_bytes;
}

int kvt_ssd_locate(struct kvt_ssd *s, uint32_t slot, bool write, int *fd, uint64_t *off)
{
    uint32_t seg = slot / s->slots_per_seg;
    int r = seg_open(s, seg, write);
    if (r < 0)
        return r;
    *fd = s->seg_fd[seg];
    *off = (uint64_t)(slot % s->slots_per_seg) * s->slot_bytes;
    return 0;
}

void kvt_ssd_dirty(struct kvt_ssd *s, uint32_t slot)
{
    s->seg_dirty[slot / s->slots_per_seg] = 1;
}

int kvt_ssd_sync(struct kvt_ssd *s)
{
    int r = 0;
    for (uint32_t i = 0; i < s->nsegs; i++) {
        if (!s->seg_dirty[i])
            continue;
        s->seg_dirty[i] = 0;
        int e = s->seg_fd[i] >= 0 ? kvt_io_sync(&s->sync, s->seg_fd[i]) : 0;
        if (e < 0 && !r)
            r = kvt_fail(e, "fdatasync of segment %u failed: %s", i, strerror(-e));
    }
    return r;
}

void kvt_ssd_set_syncer(struct kvt_ssd *s, const struct kvt_syncer *sync)
{
    s->sync = *sync;
    kvt_index_set_syncer(s->ix, sync);
}
