/*
 * ssd_store.c — the SSD tier's files: layout, segments, the free map.
 *
 * See ssd_store.h for the on-disk layout and the crash rules. This file owns
 * the directory (one process at a time: an flock on <dir>/LOCK), the KVTIER
 * layout file, the segment descriptors and which slots are free, used or bad.
 * The page bytes themselves move through io/ on the mover thread.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tiers/ssd_store.h"
#include "tiers/tiers.h"

struct kvt_ssd {
    char *dir;
    int lock_fd;
    size_t page_bytes, slot_bytes;
    uint32_t slots_per_seg, nslots, nsegs;
    int *seg_fd;                /* -1 until made or opened */
    uint8_t *seg_state;         /* SEG_*, under the engine lock */
    uint8_t *seg_dirty;         /* written since the last sync: the mover's alone, which
                                   syncs unlocked (a bit in seg_state raced seg_open) */
    uint8_t *slot_state;        /* SLOT_* */
    uint32_t *free_stack, nfree;
    uint64_t bad;
    struct kvt_index *ix;
};

enum { SEG_UNKNOWN = 0, SEG_READY = 1, SEG_FAILED = 2 };
enum { SLOT_FREE = 0, SLOT_USED = 1, SLOT_BAD = 2 };

/* ------------------------------------------------------------- layout */

void kvt_ssd_segment_path(const char *dir, uint32_t n, char *buf, size_t len)
{
    snprintf(buf, len, "%s/seg-%06" PRIu32 ".kvt", dir, n);
}

int kvt_ssd_read_layout(const char *dir, size_t *page_bytes, size_t *slot_bytes,
                        uint32_t *slots_per_segment)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/KVTIER", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    unsigned fmt = 0;
    unsigned long long pb = 0, sb = 0, sps = 0;
    int n = fscanf(f, "kvtier-ssd %u\npage_bytes %llu\nslot_bytes %llu\nslots_per_segment %llu\n",
                   &fmt, &pb, &sb, &sps);
    fclose(f);
    if (n != 4 || fmt != KVT_SSD_FORMAT || !pb || sb < pb || sb % 4096 || !sps || sps > UINT32_MAX)
        return KVT_ECORRUPT;
    *page_bytes = pb;
    *slot_bytes = sb;
    *slots_per_segment = (uint32_t)sps;
    return 0;
}

static int write_layout(struct kvt_ssd *s)
{
    char path[4096], tmp[4100];
    snprintf(path, sizeof(path), "%s/KVTIER", s->dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    fprintf(f, "kvtier-ssd %d\npage_bytes %zu\nslot_bytes %zu\nslots_per_segment %" PRIu32 "\n",
            KVT_SSD_FORMAT, s->page_bytes, s->slot_bytes, s->slots_per_seg);
    /* rename over a synced file: a crash leaves the old layout or the new one */
    int r = fflush(f) == 0 && fdatasync(fileno(f)) == 0 ? 0 : -errno;
    fclose(f);
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    return r;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level == 0)
        return 0; /* keep the directory itself */
    const char *base = path + ftw->base;
    /* Only what kvtier made: never delete a user's files from a mistyped dir. */
    if (ftw->level == 1 && strcmp(base, "KVTIER") && strcmp(base, "KVTIER.tmp") &&
        strcmp(base, "index") && strncmp(base, "seg-", 4))
        return 0;
    return remove(path) < 0 && errno != ENOENT ? -errno : 0;
}

/* Deletes the layout file, the segments and the index; keeps LOCK. */
static int wipe_dir(const char *dir)
{
    int r = nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return r < 0 ? -errno : r;
}

/* ------------------------------------------------------------- open */

static int lock_dir(struct kvt_ssd *s)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/LOCK", s->dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lock_fd < 0)
        return kvt_fail(-errno, "cannot open %s: %s", path, strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return kvt_fail(-EBUSY, "ssd_dir %s is in use by another kvtier engine", s->dir);
    return 0;
}

/* Checks the KVTIER file against this configuration; wipes the directory
 * (with a message) when it is missing, damaged or of another page size. */
static int check_layout(struct kvt_ssd *s, bool persist, struct kvt_ssd_open_info *info)
{
    size_t pb, sb;
    uint32_t sps;
    int r = kvt_ssd_read_layout(s->dir, &pb, &sb, &sps);
    const char *why = NULL;
    char buf[160];
    if (!persist)
        why = "persist=0: previous contents discarded";
    else if (r == KVT_ECORRUPT)
        why = "its KVTIER layout file is damaged";
    else if (r == 0 && (pb != s->page_bytes || sb != s->slot_bytes)) {
        snprintf(buf, sizeof(buf), "it was written with page_bytes %zu, this engine uses %zu", pb,
                 s->page_bytes);
        why = buf;
    }
    if (r == 0 && !why) {
        s->slots_per_seg = sps;
        return 0;
    }
    if (why || r == -ENOENT) {
        /* No layout file: a fresh directory, or one a crash left before the
         * file was written. Anything there of ours is untrusted. */
        if ((r = wipe_dir(s->dir)) < 0)
            return kvt_fail(r, "cannot clean %s: %s", s->dir, strerror(-r));
        if (why && persist) {
            info->wiped = true;
            snprintf(info->message, sizeof(info->message), "ssd_dir %s wiped: %s", s->dir, why);
        }
    }
    return write_layout(s);
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
              v->codec <= KVT_CODEC_ZSTD_SHUFFLE16;
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

static int alloc_maps(struct kvt_ssd *s)
{
    s->nsegs = (s->nslots + s->slots_per_seg - 1) / s->slots_per_seg;
    s->seg_fd = malloc(s->nsegs * sizeof(int));
    s->seg_state = calloc(s->nsegs, 1);
    s->seg_dirty = calloc(s->nsegs, 1);
    s->slot_state = calloc(s->nslots, 1);
    s->free_stack = malloc((size_t)s->nslots * sizeof(uint32_t));
    if (!s->seg_fd || !s->seg_state || !s->seg_dirty || !s->slot_state || !s->free_stack)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->nsegs; i++)
        s->seg_fd[i] = -1;
    return 0;
}

static void build_free_stack(struct kvt_ssd *s)
{
    s->nfree = 0;
    for (uint32_t i = s->nslots; i-- > 0;) /* low slots on top: segments fill in order */
        if (s->slot_state[i] == SLOT_FREE)
            s->free_stack[s->nfree++] = i;
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
    s->lock_fd = -1;
    s->dir = strdup(dir);
    s->page_bytes = s->slot_bytes = page_bytes;
    s->slots_per_seg = (uint32_t)(KVT_SSD_SEGMENT_BYTES / page_bytes);
    if (!s->slots_per_seg)
        s->slots_per_seg = 1;
    s->nslots = (uint32_t)(ssd_bytes / page_bytes);
    if (!s->dir) {
        r = -ENOMEM;
        goto out_free;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        r = kvt_fail(-errno, "cannot create ssd_dir %s: %s", dir, strerror(errno));
        goto out_free;
    }
    if ((r = lock_dir(s)) < 0 || (r = check_layout(s, persist, info)) < 0 || (r = alloc_maps(s)) < 0)
        goto out_free;
    struct kvt_index_open_info ii;
    if ((r = kvt_index_open(dir, persist, fingerprint, 0, &s->ix, &ii)) < 0)
        goto out_free;
    if (ii.wiped && persist && ii.message[0] && !info->message[0]) {
        info->wiped = true;
        snprintf(info->message, sizeof(info->message), "ssd_dir %s: %s", dir, ii.message);
    }
    info->dropped = ii.dropped_fingerprint;
    if ((r = load_entries(s, fn, ctx, info)) < 0)
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
    if (s->ix)
        kvt_index_close(s->ix);
    for (uint32_t i = 0; s->seg_fd && i < s->nsegs; i++)
        if (s->seg_fd[i] >= 0)
            close(s->seg_fd[i]);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the flock */
    free(s->seg_fd);
    free(s->seg_state);
    free(s->seg_dirty);
    free(s->slot_state);
    free(s->free_stack);
    free(s->dir);
    free(s);
}

/* ------------------------------------------------------------- slots */

uint32_t kvt_ssd_nslots(const struct kvt_ssd *s) { return s->nslots; }
uint32_t kvt_ssd_nfree(const struct kvt_ssd *s) { return s->nfree; }
size_t kvt_ssd_slot_bytes(const struct kvt_ssd *s) { return s->slot_bytes; }
struct kvt_index *kvt_ssd_index(struct kvt_ssd *s) { return s->ix; }
uint64_t kvt_ssd_bad_slots(const struct kvt_ssd *s) { return s->bad; }

static uint64_t seg_len(const struct kvt_ssd *s, uint32_t seg)
{
    uint64_t first = (uint64_t)seg * s->slots_per_seg;
    uint64_t n = s->nslots - first < s->slots_per_seg ? s->nslots - first : s->slots_per_seg;
    return n * s->slot_bytes;
}

/* Opens segment seg, creating and preallocating it on first use.
 * Preallocation is what turns a full disk into a clean error here, at slot
 * allocation, instead of an ENOSPC in the middle of a write-back. */
static int seg_open(struct kvt_ssd *s, uint32_t seg)
{
    if (s->seg_state[seg] == SEG_READY)
        return 0;
    if (s->seg_state[seg] == SEG_FAILED)
        return -ENOSPC;
    char path[4096];
    kvt_ssd_segment_path(s->dir, seg, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EINVAL) /* a file system without O_DIRECT (tmpfs) */
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return kvt_fail(-errno, "cannot open %s: %s", path, strerror(errno));
    int r = posix_fallocate(fd, 0, (off_t)seg_len(s, seg));
    if (r) {
        close(fd);
        s->seg_state[seg] = SEG_FAILED;
        return kvt_fail(-r, "cannot preallocate %s (%llu bytes): %s", path,
                        (unsigned long long)seg_len(s, seg), strerror(r));
    }
    s->seg_fd[seg] = fd;
    s->seg_state[seg] = SEG_READY;
    return 0;
}

uint32_t kvt_ssd_alloc(struct kvt_ssd *s, int *err)
{
    while (s->nfree) {
        uint32_t slot = s->free_stack[--s->nfree];
        int r = seg_open(s, slot / s->slots_per_seg);
        if (r == 0) {
            s->slot_state[slot] = SLOT_USED;
            return slot;
        }
        /* The segment cannot be made: its slots are lost for this run. */
        s->slot_state[slot] = SLOT_BAD;
        s->bad++;
        *err = r;
        return KVT_NONE;
    }
    *err = KVT_EFULL;
    return KVT_NONE;
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

int kvt_ssd_locate(struct kvt_ssd *s, uint32_t slot, int *fd, uint64_t *off)
{
    uint32_t seg = slot / s->slots_per_seg;
    int r = seg_open(s, seg);
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
        if (fdatasync(s->seg_fd[i]) < 0 && !r)
            r = kvt_fail(-errno, "fdatasync of segment %u failed: %s", i, strerror(errno));
    }
    return r;
}
