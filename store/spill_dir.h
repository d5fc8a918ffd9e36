/*
 * spill_dir.h — a spill directory's names, and opening and removing only
 * what kvtier made (internal).
 *
 * kvtier owns a spill directory only if the directory was empty when it
 * first opened it, which the KVTIER layout file then marks. Inside it,
 * kvtier touches nothing but the names below, each opened relative to the
 * directory's descriptor without following a symbolic link, and only as a
 * regular file with one link (a hard link would let a write land in a file
 * somewhere else). Whatever else is there is never opened, listed as ours or
 * removed. docs/security.md has the threat model.
 *
 *   KVTIER             the layout file (ssd_store.h); written first, removed last
 *   KVTIER.tmp         the layout file being replaced
 *   LOCK               empty; an flock on it says which process owns the directory
 *   index/             the LMDB index: index/data.mdb, and index/lock.mdb that
 *                      older versions made (never opened now)
 *   seg-NNNNNN.kvt     the segments, NNNNNN the number in decimal, at least 6 digits
 *   scratch-*.tmp      a tool's raw-disk measurement file (kvt_spill_scratch)
 *
 * Every function returns 0 or a negative error, and on error leaves a
 * message in kvt_last_error() naming the path and what is wrong with it.
 */
#ifndef KVT_SPILL_DIR_H
#define KVT_SPILL_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KVT_SPILL_LAYOUT "KVTIER"
#define KVT_SPILL_LAYOUT_TMP "KVTIER.tmp"
#define KVT_SPILL_LOCK "LOCK"
#define KVT_SPILL_INDEX "index"
#define KVT_SPILL_INDEX_DATA "data.mdb"
#define KVT_SPILL_INDEX_LOCK "lock.mdb"

enum kvt_spill_name {
    KVT_NAME_FOREIGN = 0,   /* not a name kvtier makes */
    KVT_NAME_LAYOUT,
    KVT_NAME_LAYOUT_TMP,
    KVT_NAME_LOCK,
    KVT_NAME_INDEX,
    KVT_NAME_SEGMENT,
    KVT_NAME_SCRATCH,
};

/* What kind of kvtier name `name` is (an entry of the top directory); *seg
 * gets a segment's number (may be NULL). */
enum kvt_spill_name kvt_spill_name_of(const char *name, uint32_t *seg);

/* The file name of segment n: "seg-%06u.kvt". buf holds at least 32 bytes. */
void kvt_spill_segment_name(uint32_t n, char *buf, size_t len);

/* Opens the spill directory at path (which the caller chose: it may be a
 * symbolic link to a directory), creating it (mode 0700) when create is set
 * and it is missing. *dfd is an O_DIRECTORY descriptor the caller closes. */
int kvt_spill_opendir(const char *path, bool create, int *dfd);

/* Opens the regular file name in dfd with flags (O_NOFOLLOW and O_CLOEXEC
 * added). Refuses a symbolic link, anything but a regular file, and a file
 * with more than one hard link. With O_CREAT, *created (may be NULL) says
 * whether this call made the file. Returns the descriptor or -errno. path is
 * the directory's name, for messages. */
int kvt_spill_openat(int dfd, const char *path, const char *name, int flags, mode_t mode,
                     bool *created);

/* The directory name in dfd, not through a symbolic link; made (0700) when
 * create is set and it is missing. Returns the descriptor or -errno. */
int kvt_spill_subdir(int dfd, const char *path, const char *name, bool create);

/* -ENOENT if name is absent in dfd; 0 if it is a regular file with one
 * link (its size in *size, may be NULL); a named error otherwise. */
int kvt_spill_check_file(int dfd, const char *path, const char *name, off_t *size);

/* Whether kvtier may use the directory: it holds the layout file (a regular
 * file), or nothing but what kvtier makes before it (an empty LOCK,
 * KVTIER.tmp, scratch files). Anything else: KVT_ECONFIG, naming the directory and what is
 * in it. *ours says whether the layout file is there. */
int kvt_spill_claim(int dfd, const char *path, bool *ours);

/* Removes kvtier's segments, scratch files, KVTIER.tmp and index files,
 * by exact name, and nothing else; keeps KVTIER and LOCK (the directory
 * stays marked as kvtier's even if this is interrupted). Everything is
 * checked before anything is removed: a name of ours that is a link or a
 * directory, or files kvtier did not make inside index/, fail the call with
 * nothing removed. */
int kvt_spill_wipe(int dfd, const char *path);

/* The index directory's own files (data.mdb, lock.mdb) removed, the
 * directory kept. Checked first, as kvt_spill_wipe. */
int kvt_spill_wipe_index(int dfd, const char *path);

/* For tools that made a spill directory for one run: kvt_spill_wipe, then
 * KVTIER and LOCK, then the directory itself if it is then empty. */
int kvt_spill_remove(const char *path);

/* A new scratch file "scratch-<random>.tmp" in the spill directory at path,
 * created exclusively: its name in name (len >= 32), the directory in *dfd
 * (the caller closes it). The caller opens the file through *dfd
 * (kvt_spill_openat) and removes it with unlinkat(*dfd, name, 0);
 * kvt_spill_wipe removes one a crash left. */
int kvt_spill_scratch(const char *path, int *dfd, char *name, size_t len);

#endif /* KVT_SPILL_DIR_H */
