/*
 * spill.h — a spill directory read with no engine, as `kvtier inspect` and
 * `kvtier fsck` see it (tools/fsck/).
 *
 * Both read a spill directory as store/ssd_store.h lays it out: the KVTIER
 * layout file, the segment files present, and the LMDB index opened as it
 * is (kvt_index_open_readonly / _repair). The engine's own open drops
 * entries of other fingerprints and wipes a damaged index; these commands
 * must show what is there, so they never go through it.
 *
 * A running engine holds an exclusive flock on <dir>/LOCK. fsck takes it
 * shared to check and exclusive to repair, so no slot is rewritten while it
 * is read and no entry re-pointed while bad ones are deleted. inspect holds
 * it shared while it reads; when an engine holds it, inspect shows the
 * layout and the files but not the index (reading LMDB under a live writer
 * would need LMDB's reader table, a write).
 *
 * Neither writes anything without --repair: every file is opened read-only,
 * relative to the directory's descriptor, without following a link
 * (store/spill_dir.h), and the index without LMDB's lock file.
 */
#ifndef KVT_TOOLS_FSCK_SPILL_H
#define KVT_TOOLS_FSCK_SPILL_H

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/kvtier.h"
#include "store/ssd_index.h"

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

/* Reads the layout, takes the lock as use says, lists the segments and opens
 * the index, in that order (the lock comes before the listing and the index,
 * so that both describe the same directory). 0, or an error with s->err
 * saying why and nothing left open. */
int spill_open(struct spill *s, const char *dir, enum spill_use use);
/* Closes what spill_open opened (the lock is dropped); s can be opened again. */
void spill_close(struct spill *s);
/* Segment n's file as listed, or NULL when it is not there. */
const struct seg_file *spill_seg_find(const struct spill *s, uint32_t n);
/* A listing of the directory open as dfd (which stays open): the one the
 * layout was read from, not whatever the path names now. NULL with errno. */
DIR *spill_dir_list(int dfd);

/* A codec's name, or "codec-N" in buf for one this kvtier does not know. */
const char *spill_codec_name(unsigned c, char *buf, size_t n);
/* "id:layer:index" ("id:all:index" for KVT_ALL_LAYERS) in buf. */
const char *spill_key_str(const kvt_key *k, char *buf, size_t n);

static inline double spill_ratio(uint64_t raw, uint64_t stored)
{
    return stored ? (double)raw / (double)stored : 0;
}

/* What the engine reads of a stored page with O_DIRECT: whole 4 KiB blocks. */
static inline uint64_t spill_pad4k(uint64_t n)
{
    return (n + 4095) & ~(uint64_t)4095;
}

/* The options both commands take: DIR, --json, and (fsck) --repair. */
struct cmd_opts {
    const char *dir;
    bool json, repair;
};

/* 0: run; 1: --help printed; -EINVAL: usage error, said on stderr. */
int spill_parse_args(const char *cmd, int argc, char **argv, bool repair_ok,
                     void (*usage)(FILE *), struct cmd_opts *o);

/* Before a command hands dir to an engine that would wipe what it holds
 * (run and replay open it with persist off; crashtest needs it empty): 0
 * when no page is indexed there (missing, empty, not kvtier's, an empty
 * index; a directory that cannot be read or that an engine holds is left
 * for the engine's open to report, which wipes nothing then). Otherwise it
 * says on stderr, as "kvtier <cmd>: <opt> <dir> holds ...", how many pages
 * of what size (or that the store cannot be read as it is, which an engine
 * would wipe), naming override, the command's option that lets them go
 * (NULL: none), and returns -EEXIST. Reads only; opens no engine. */
int spill_refuse_store(const char *cmd, const char *opt, const char *dir, const char *override);

/* After a command's engine, which opened dir with persist off, has closed:
 * its pages there are discarded (kvt_spill_wipe: the segment and index
 * files by name; an engine opening dir next would wipe them anyway), and the
 * layout file and LOCK stay, so dir is still kvtier's and a later run may use
 * it without spill_refuse_store taking those pages for a persisted store.
 * Nothing is done while an engine holds LOCK. 0, or a negative error with
 * kvt_last_error() saying why. */
int spill_discard(const char *dir);

/* The commands (tools/kvtier.c dispatches to them). */
int inspect_main(int argc, char **argv);
int fsck_main(int argc, char **argv);

/* fsck without output, for tests and other callers: fn sees each bad entry in
 * key order with its reason's name. *checked counts every entry, *bad the
 * bad ones only: an entry of a segment that could not be read (a link, a
 * second hard link, no permission) is neither, and repair keeps it.
 * Returns 0, or a negative error with
 * kvt_last_error() saying why (-ENOENT: not a spill directory; KVT_ECORRUPT:
 * a damaged layout file or index; -EBUSY: an engine holds the directory). */
typedef void (*fsck_bad_fn)(void *ctx, const kvt_key *k, const char *reason);
int fsck_verify(const char *dir, bool repair, fsck_bad_fn fn, void *ctx, uint64_t *checked,
                uint64_t *bad);

#endif /* KVT_TOOLS_FSCK_SPILL_H */
