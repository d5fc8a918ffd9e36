/*
 * spill.c — opening a spill directory for inspect and fsck (spill.h): the
 * layout file, the lock, the segment files and the index; and what both
 * commands print and parse alike.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "store/ssd_store.h"
#include "lab/tool.h"
#include "tools/cli.h"
#include "io/codec.h"
#include "tools/fsck/spill.h"

__attribute__((format(printf, 3, 4))) static int spill_fail(struct spill *s, int rc,
                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof(s->err), fmt, ap);
    va_end(ap);
    return rc;
}

/* The largest page or slot a layout file can name: an index entry holds a
 * page's lengths in 32 bits (struct kvt_ssd_entry), so no kvtier writes a
 * larger one (api/engine.c refuses a larger page_bytes with an SSD tier).
 * fsck sizes its buffers by these fields: a damaged layout claiming a
 * terabyte must be named as such, not turn into an allocation failure. */
#define SPILL_MAX_SLOT_BYTES ((size_t)UINT32_MAX & ~(size_t)4095)

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
    const char *field = s->page_bytes > SPILL_MAX_SLOT_BYTES   ? "page_bytes"
                        : s->slot_bytes > SPILL_MAX_SLOT_BYTES ? "slot_bytes"
                                                               : NULL;
    if (field)
        return spill_fail(s, KVT_ECORRUPT, "%s/KVTIER is damaged: %s %zu is more than kvtier "
                          "writes (at most %zu: an index entry holds a page's lengths in 32 "
                          "bits)", s->dir, field, field[0] == 'p' ? s->page_bytes : s->slot_bytes,
                          SPILL_MAX_SLOT_BYTES);
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

DIR *spill_dir_list(int dfd)
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
    DIR *d = spill_dir_list(s->dfd);
    struct dirent *de;
    size_t cap = 0;
    int rc = 0;
    if (!d)
        return spill_fail(s, -errno, "cannot read %s: %s", s->dir, strerror(errno));
    while (rc == 0 && (de = readdir(d)) != NULL) {
        struct stat st;
        uint32_t n;
        /* A link is listed as absent: never read; fsck reports its pages
         * as unreadable, inspect counts no size through it. */
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

const struct seg_file *spill_seg_find(const struct spill *s, uint32_t n)
{
    struct seg_file k = { .n = n };
    return s->nseg ? bsearch(&k, s->seg, s->nseg, sizeof(k), seg_cmp) : NULL;
}

static int open_index(struct spill *s, enum spill_use use)
{
    if (s->in_use)
        return 0;   /* an engine writes it now: see spill.h */
    int rc = use == USE_REPAIR ? kvt_index_open_repair(s->dir, &s->ix)
                               : kvt_index_open_readonly(s->dir, &s->ix);
    if (rc == -ENOENT)
        return 0; /* the engine indexed no page here yet */
    if (rc == KVT_ECORRUPT)
        return spill_fail(s, rc, "%s (an engine wipes a damaged index at its next open, and "
                          "with it every page; fsck cannot repair it)", kvt_last_error());
    return rc ? spill_fail(s, rc, "%s", kvt_last_error()) : 0;
}

void spill_close(struct spill *s)
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

int spill_open(struct spill *s, const char *dir, enum spill_use use)
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

/* ------------------------------------------------------------- a store to keep */

static void store_refused(const char *cmd, const char *opt, const char *dir, const char *what,
                          const char *override)
{
    if (override)
        cli_error(cmd, 2, "%s %s holds %s. This command opens it with persist off, which "
                  "would wipe it: name another directory, or give %s to let it go (nothing was "
                  "changed)", opt, dir, what, override);
    else
        cli_error(cmd, 1, "%s %s holds %s: give a new or empty directory (nothing was changed)",
                  opt, dir, what);
}

int spill_refuse_store(const char *cmd, const char *opt, const char *dir, const char *override)
{
    struct spill s;
    char what[PATH_MAX + 700];
    int rc = spill_open(&s, dir, USE_INSPECT);
    if (rc == KVT_ECORRUPT) {
        /* An engine wipes a damaged layout or index at open: what is in it
         * may still be worth a look first. */
        snprintf(what, sizeof(what), "a kvtier store that cannot be read as it is (%s; kvtier "
                 "fsck %s says more)", s.err, dir);
        store_refused(cmd, opt, dir, what, override);
        return -EEXIST;
    }
    /* No layout file: nothing persisted (a foreign directory is the claim's
     * to refuse). Other failures, and a directory an engine holds, are the
     * engine's open to report: it wipes nothing it cannot read or lock. */
    uint64_t pages = rc == 0 && s.ix ? kvt_index_count(s.ix) : 0;
    size_t pb = s.page_bytes;
    if (rc == 0)
        spill_close(&s);
    kvt_clear_error();
    if (!pages)
        return 0;
    snprintf(what, sizeof(what), "a persisted kvtier store: %" PRIu64 " page%s of %zu bytes "
             "(kvtier inspect %s shows them)", pages, pages == 1 ? "" : "s", pb, dir);
    store_refused(cmd, opt, dir, what, override);
    return -EEXIST;
}

int spill_discard(const char *dir)
{
    int dfd, rc = kvt_spill_opendir(dir, false, &dfd);
    if (rc)
        return rc;
    int lock = kvt_spill_openat(dfd, dir, KVT_SPILL_LOCK, O_RDWR, 0, NULL);
    if (lock < 0 && lock != -ENOENT) {
        rc = lock;
        goto out_dir;
    }
    kvt_clear_error();
    /* Held: another engine opened the directory since ours closed; its
     * pages are not ours to discard. */
    if (lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) != 0)
        goto out_lock;
    rc = kvt_spill_wipe(dfd, dir);
out_lock:
    if (lock >= 0)
        close(lock);
out_dir:
    close(dfd);
    return rc;
}

/* ------------------------------------------------------------- output and options */

const char *spill_codec_name(unsigned c, char *buf, size_t n)
{
    if (c < KVT_CODEC_COUNT)
        return kvt_codec_name((int)c);
    snprintf(buf, n, "codec-%u", c);
    return buf;
}

const char *spill_key_str(const kvt_key *k, char *buf, size_t n)
{
    if (k->layer == KVT_ALL_LAYERS)
        snprintf(buf, n, "%" PRIu64 ":all:%" PRIu32, k->id, k->index);
    else
        snprintf(buf, n, "%" PRIu64 ":%" PRIu32 ":%" PRIu32, k->id, k->layer, k->index);
    return buf;
}
int spill_parse_args(const char *cmd, int argc, char **argv, bool repair_ok,
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
