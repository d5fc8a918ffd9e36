/*
 * inspect.c — `kvtier inspect DIR`: what a spill directory holds, read from
 * the index and the file sizes only (tools/fsck/spill.h says how the
 * directory is read and locked). Changes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/spill_dir.h"
#include "store/ssd_store.h"
#include "lab/tool.h"
#include "tools/cli.h"
#include "tools/fsck/spill.h"

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
    in->stored_padded += spill_pad4k(e->stored_len);
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
    DIR *d = spill_dir_list(dfd);
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
                        spill_codec_name(c, kb, sizeof(kb)), in->codec[c].entries,
                        cli_bytes(b1, sizeof(b1), (double)in->codec[c].stored),
                        cli_bytes(b2, sizeof(b2), (double)in->codec[c].raw),
                        spill_ratio(in->codec[c].raw, in->codec[c].stored));
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
               spill_codec_name(c, kb, sizeof(kb)), cs->entries, cs->stored, cs->raw,
               spill_ratio(cs->raw, cs->stored));
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
    int rc = spill_parse_args("inspect", argc, argv, false, inspect_usage, &o);
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
