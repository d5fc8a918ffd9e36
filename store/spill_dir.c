/*
 * spill_dir.c — a spill directory's names; opening and removing only what
 * kvtier made. See spill_dir.h for the names and the rules.
 *
 * Every path inside the directory is resolved relative to its descriptor,
 * one component at a time, with O_NOFOLLOW: a link planted in the directory
 * (by accident or by someone else who can write there) makes the call fail
 * with a message instead of redirecting a write or a removal. Removal is by
 * exact name with unlinkat, never recursive, and checks everything it will
 * remove before it removes anything, so a refusal changes nothing.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "base/base.h"

/* ------------------------------------------------------------- names */

static bool seg_number(const char *name, uint32_t *n)
{
    char canon[32], *end;
    if (strncmp(name, "seg-", 4) != 0 || !isdigit((unsigned char)name[4]))
        return false;
    errno = 0;
    unsigned long long v = strtoull(name + 4, &end, 10);
    if (errno || v > UINT32_MAX || strcmp(end, ".kvt") != 0)
        return false;
    kvt_spill_segment_name((uint32_t)v, canon, sizeof(canon));
    if (strcmp(canon, name) != 0) /* one spelling per number: no "seg-0000001.kvt" */
        return false;
    if (n)
        *n = (uint32_t)v;
    return true;
}

static bool scratch_name(const char *name)
{
    size_t len = strlen(name);
    if (len <= 12 || strncmp(name, "scratch-", 8) != 0 || strcmp(name + len - 4, ".tmp") != 0)
        return false;
    for (size_t i = 8; i < len - 4; i++)
        if (!isalnum((unsigned char)name[i]))
            return false;
    return true;
}

enum kvt_spill_name kvt_spill_name_of(const char *name, uint32_t *seg)
{
    if (!strcmp(name, KVT_SPILL_LAYOUT))
        return KVT_NAME_LAYOUT;
    if (!strcmp(name, KVT_SPILL_LAYOUT_TMP))
        return KVT_NAME_LAYOUT_TMP;
    if (!strcmp(name, KVT_SPILL_LOCK))
        return KVT_NAME_LOCK;
    if (!strcmp(name, KVT_SPILL_INDEX))
        return KVT_NAME_INDEX;
    if (seg_number(name, seg))
        return KVT_NAME_SEGMENT;
    if (scratch_name(name))
        return KVT_NAME_SCRATCH;
    return KVT_NAME_FOREIGN;
}

void kvt_spill_segment_name(uint32_t n, char *buf, size_t len)
{
    snprintf(buf, len, "seg-%06" PRIu32 ".kvt", n);
}

/* ------------------------------------------------------------- opening */

static const char *kind_of(mode_t m)
{
    return S_ISLNK(m) ? "a symbolic link (kvtier follows no links inside its directory)"
         : S_ISDIR(m) ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device"
         : S_ISREG(m) ? "a regular file"
                      : "not a regular file";
}

int kvt_spill_opendir(const char *path, bool create, int *dfd)
{
    *dfd = -1;
    if (!path || !path[0])
        return kvt_fail(KVT_ECONFIG, "ssd_dir is empty");
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return kvt_fail(-errno, "cannot create ssd_dir %s: %s", path, strerror(errno));
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0 && errno == ENOTDIR)
        return kvt_fail(-ENOTDIR, "%s is not a directory", path);
    if (fd < 0)
        return kvt_fail(-errno, "cannot open %s: %s", path, strerror(errno));
    *dfd = fd;
    return 0;
}

int kvt_spill_check_file(int dfd, const char *path, const char *name, off_t *size)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return -ENOENT;
        return kvt_fail(-errno, "cannot examine %s/%s: %s", path, name, strerror(errno));
    }
    if (S_ISLNK(st.st_mode))
        return kvt_fail(-ELOOP, "%s/%s is %s", path, name, kind_of(st.st_mode));
    if (!S_ISREG(st.st_mode))
        return kvt_fail(-EINVAL, "%s/%s is %s", path, name, kind_of(st.st_mode));
    if (st.st_nlink != 1)
        return kvt_fail(-EMLINK, "%s/%s has %ju hard links: kvtier writes only files it made",
                        path, name, (uintmax_t)st.st_nlink);
    if (size)
        *size = st.st_size;
    return 0;
}

/* The open itself cannot block or follow a link: O_NONBLOCK keeps a FIFO
 * swapped in after the check from hanging the open (it changes nothing for
 * a regular file), O_NOFOLLOW refuses a link. */
int kvt_spill_openat(int dfd, const char *path, const char *name, int flags, mode_t mode,
                     bool *created)
{
    int base = flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, fd = -1;
    if (created)
        *created = false;
    int r = kvt_spill_check_file(dfd, path, name, NULL);
    if (r == -ENOENT && (flags & O_CREAT)) {
        fd = openat(dfd, name, base | O_EXCL, mode);
        if (fd >= 0 && created)
            *created = true;
        if (fd < 0 && errno != EEXIST)
            return kvt_fail(-errno, "cannot create %s/%s: %s", path, name, strerror(errno));
        if (fd < 0 && (r = kvt_spill_check_file(dfd, path, name, NULL)) < 0)
            return r;   /* made by someone else in between, and not a plain file */
    } else if (r < 0) {
        return r == -ENOENT ? kvt_fail(r, "%s/%s does not exist", path, name) : r;
    }
    if (fd < 0)
        fd = openat(dfd, name, base & ~(O_CREAT | O_EXCL), mode);
    if (fd < 0)
        return kvt_fail(-errno, "cannot open %s/%s: %s", path, name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        return kvt_fail(-EINVAL, "%s/%s changed while it was opened: not a plain file", path,
                        name);
    }
    return fd;
}

int kvt_spill_subdir(int dfd, const char *path, const char *name, bool create)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdirat(dfd, name, 0700) != 0 && errno != EEXIST)
            return kvt_fail(-errno, "cannot create %s/%s: %s", path, name, strerror(errno));
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd >= 0)
        return fd;
    int err = errno;
    struct stat st;
    if ((err == ELOOP || err == ENOTDIR) && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return kvt_fail(S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR, "%s/%s is %s, not a directory",
                        path, name, kind_of(st.st_mode));
    return kvt_fail(-err, "cannot open %s/%s: %s", path, name, strerror(err));
}

/* ------------------------------------------------------------- ownership */

/* A directory stream over dfd that leaves dfd open. */
static DIR *dir_stream(int dfd, const char *path, int *err)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        *err = kvt_fail(-errno, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return d;
}

static bool dot(const char *name)
{
    return !strcmp(name, ".") || !strcmp(name, "..");
}

/* Up to four names of a listing, for a message. */
struct names {
    char buf[320];
    unsigned n, ours;
};

static void names_add(struct names *nm, const char *name, bool isdir, bool ours)
{
    size_t len = strlen(nm->buf);
    nm->ours += ours;
    if (nm->n++ < 4 && len + strlen(name) + 4 < sizeof(nm->buf))
        snprintf(nm->buf + len, sizeof(nm->buf) - len, "%s%s%s", len ? ", " : "", name,
                 isdir ? "/" : "");
}

static int claim_fail(const char *path, const struct names *nm)
{
    char more[48] = "";
    if (nm->n > 4)
        snprintf(more, sizeof(more), " and %u more", nm->n - 4);
    if (nm->ours == nm->n)
        return kvt_fail(KVT_ECONFIG,
                        "ssd_dir %s holds kvtier's files (%s%s) but no KVTIER layout file: it is "
                        "damaged; run `kvtier fsck %s`, or remove it (nothing was changed)",
                        path, nm->buf, more, path);
    return kvt_fail(KVT_ECONFIG,
                    "ssd_dir %s is not empty and kvtier did not make it (no KVTIER file); it "
                    "holds %s%s. kvtier uses only an empty directory or one it made: name "
                    "another one (nothing was changed)",
                    path, nm->buf, more);
}

int kvt_spill_claim(int dfd, const char *path, bool *ours)
{
    off_t size = 0;
    *ours = false;
    int r = kvt_spill_check_file(dfd, path, KVT_SPILL_LAYOUT, NULL);
    if (r == 0) {
        *ours = true;
        return 0;
    }
    if (r != -ENOENT)
        return r;
    DIR *d = dir_stream(dfd, path, &r);
    if (!d)
        return r;
    struct names nm = { .n = 0 };
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (dot(de->d_name))
            continue;
        enum kvt_spill_name k = kvt_spill_name_of(de->d_name, NULL);
        /* What kvtier makes before the layout file: an empty LOCK, the
         * layout file being written, a tool's scratch file. */
        if ((k == KVT_NAME_LAYOUT_TMP || k == KVT_NAME_SCRATCH) &&
            kvt_spill_check_file(dfd, path, de->d_name, NULL) == 0)
            continue;
        if (k == KVT_NAME_LOCK && kvt_spill_check_file(dfd, path, de->d_name, &size) == 0 &&
            size == 0)
            continue;
        names_add(&nm, de->d_name, de->d_type == DT_DIR, k != KVT_NAME_FOREIGN);
    }
    closedir(d);
    kvt_clear_error();
    return nm.n ? claim_fail(path, &nm) : 0;
}

/* ------------------------------------------------------------- removal */

/* Removes (when doit) or checks the index directory's own files. Anything
 * else in it fails the check: it is not ours to remove, and the directory
 * could not be removed around it. */
static int index_files(int dfd, const char *path, bool doit, bool rmdir_too)
{
    char ipath[4200];
    snprintf(ipath, sizeof(ipath), "%s/%s", path, KVT_SPILL_INDEX);
    int ifd = kvt_spill_subdir(dfd, path, KVT_SPILL_INDEX, false);
    if (ifd == -ENOENT) {
        kvt_clear_error();
        return 0;
    }
    if (ifd < 0)
        return ifd;
    int r = 0;
    DIR *d = dir_stream(ifd, ipath, &r);
    struct dirent *de;
    if (!d)
        goto out_close;
    while (r == 0 && (de = readdir(d)) != NULL) {
        if (dot(de->d_name))
            continue;
        if (strcmp(de->d_name, KVT_SPILL_INDEX_DATA) && strcmp(de->d_name, KVT_SPILL_INDEX_LOCK))
            r = kvt_fail(-ENOTEMPTY, "%s holds %s, which kvtier did not make: remove it first",
                         ipath, de->d_name);
        else if ((r = kvt_spill_check_file(ifd, ipath, de->d_name, NULL)) == -EMLINK)
            r = 0;  /* removing our name of a hard-linked file touches no data */
        else if (r == 0 && doit && unlinkat(ifd, de->d_name, 0) != 0 && errno != ENOENT)
            r = kvt_fail(-errno, "cannot remove %s/%s: %s", ipath, de->d_name, strerror(errno));
    }
    closedir(d);
    if (r == 0 && doit && rmdir_too && unlinkat(dfd, KVT_SPILL_INDEX, AT_REMOVEDIR) != 0 &&
        errno != ENOENT)
        r = kvt_fail(-errno, "cannot remove %s: %s", ipath, strerror(errno));
out_close:
    close(ifd);
    return r;
}

/* One pass over the top directory: checks (doit false) or removes (doit
 * true) the segments, scratch files and KVTIER.tmp. */
static int top_files(int dfd, const char *path, bool doit)
{
    int r = 0;
    DIR *d = dir_stream(dfd, path, &r);
    struct dirent *de;
    if (!d)
        return r;
    while (r == 0 && (de = readdir(d)) != NULL) {
        enum kvt_spill_name k = dot(de->d_name) ? KVT_NAME_FOREIGN
                                                : kvt_spill_name_of(de->d_name, NULL);
        if (k != KVT_NAME_SEGMENT && k != KVT_NAME_SCRATCH && k != KVT_NAME_LAYOUT_TMP)
            continue;
        if ((r = kvt_spill_check_file(dfd, path, de->d_name, NULL)) == -EMLINK || r == -ENOENT)
            r = 0;
        else if (r == 0 && doit && unlinkat(dfd, de->d_name, 0) != 0 && errno != ENOENT)
            r = kvt_fail(-errno, "cannot remove %s/%s: %s", path, de->d_name, strerror(errno));
    }
    closedir(d);
    return r;
}

int kvt_spill_wipe(int dfd, const char *path)
{
    int r;
    if ((r = top_files(dfd, path, false)) < 0 || (r = index_files(dfd, path, false, true)) < 0)
        return r;
    if ((r = top_files(dfd, path, true)) < 0)
        return r;
    return index_files(dfd, path, true, true);
}

int kvt_spill_wipe_index(int dfd, const char *path)
{
    int r = index_files(dfd, path, false, false);
    return r < 0 ? r : index_files(dfd, path, true, false);
}

int kvt_spill_remove(const char *path)
{
    int dfd, r;
    bool ours;
    if ((r = kvt_spill_opendir(path, false, &dfd)) < 0)
        return r;
    if ((r = kvt_spill_claim(dfd, path, &ours)) < 0 || (r = kvt_spill_wipe(dfd, path)) < 0)
        goto out_close;
    const char *last[2] = { KVT_SPILL_LAYOUT, KVT_SPILL_LOCK };
    for (int i = 0; i < 2 && r == 0; i++) {
        int c = kvt_spill_check_file(dfd, path, last[i], NULL);
        if (c == 0 && unlinkat(dfd, last[i], 0) != 0 && errno != ENOENT)
            r = kvt_fail(-errno, "cannot remove %s/%s: %s", path, last[i], strerror(errno));
        else if (c < 0 && c != -ENOENT)
            r = c;
    }
    if (r == 0 && rmdir(path) != 0)
        r = kvt_fail(-errno, "cannot remove %s: %s", path, strerror(errno));
out_close:
    close(dfd);
    return r;
}

int kvt_spill_scratch(const char *path, int *dfd, char *name, size_t len)
{
    int r;
    if (len < 32)
        return kvt_fail(-EINVAL, "kvt_spill_scratch: a name buffer of %zu bytes", len);
    if ((r = kvt_spill_opendir(path, false, dfd)) < 0)
        return r;
    r = -EEXIST; /* until a name is free: sixteen taken in a row is not chance */
    for (int tries = 0; tries < 16 && r == -EEXIST; tries++) {
        uint64_t v;
        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
            v = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ (uint64_t)tries;
        snprintf(name, len, "scratch-%016" PRIx64 ".tmp", v);
        int fd = openat(*dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        r = fd >= 0 ? 0 : -errno;
        if (fd >= 0)
            close(fd);
    }
    if (r == 0)
        return 0;
    kvt_fail(r, "cannot create a scratch file in %s: %s", path, strerror(-r));
    close(*dfd);
    *dfd = -1;
    return r;
}
