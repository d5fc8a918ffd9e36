/*
 * trace.c — `kvtier sim`'s traces: read, written, freed.
 *
 * Trace format (text, version 1). One record per line; '#' starts a comment
 * that runs to the end of the line; blank lines are skipped; fields are
 * separated by blanks; numbers are decimal (ID < 2^64, LAYER and INDEX
 * < 2^32).
 *
 *   kvtier-trace 1            the first line: format and version
 *   page_bytes N              bytes per page; required, before any record
 *   schedule order=layer|seq layers=L window=W sinks=S ids=A,B,...
 *                             optional, before any record: what
 *                             kvt_set_schedule was given (window and sinks
 *                             default to 0, full attention)
 *   advance ID LAYER          kvt_advance: the engine now computes (ID, LAYER)
 *   access ID LAYER INDEX     one page read by the attention
 *   new ID LAYER INDEX        a page created in HBM (the tail grows)
 *   drop ID                   the sequence finished: its pages are gone
 *   step                      the end of a decode step
 *
 * A page accessed before any `new` of it existed before the trace (the
 * prefill wrote it). An engine logs one line per kvt_advance, one per page it
 * acquires for attention, one per kvt_create of a tail page, one per
 * kvt_drop_id and one per step.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sim/sim_priv.h"

int sim_seterr(char *err, size_t n, const char *fmt, ...)
{
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

int sim_trace_push(struct sim_trace *t, uint8_t kind, uint64_t id, uint32_t layer,
                   uint32_t index, uint32_t line)
{
    if (t->n == t->cap) {
        if (t->n >= SIM_MAX_RECORDS)
            return -E2BIG;
        size_t nc = t->cap ? t->cap * 2 : 4096;
        struct sim_rec *nr = realloc(t->rec, nc * sizeof(*nr));
        if (!nr)
            return -ENOMEM;
        t->rec = nr;
        t->cap = nc;
    }
    t->rec[t->n++] = (struct sim_rec){ id, layer, index, line, kind };
    if (kind == SIM_ACCESS)
        t->accesses++;
    else if (kind == SIM_STEP)
        t->steps++;
    return 0;
}

void sim_trace_free(struct sim_trace *t)
{
    free(t->rec);
    free(t->ids);
    *t = (struct sim_trace){ 0 };
}

/* A decimal number of at most max, the whole token. */
static bool parse_num(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

#define MAX_TOK 8

struct reader {
    struct sim_trace *t;
    uint32_t line;
    bool records;  /* a record has been read: headers are over */
    char *err;
    size_t errlen;
};

static int rd_err(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rd_err(struct reader *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sim_seterr(r->err, r->errlen, "line %u: %s", r->line, msg);
}

static int rd_number(struct reader *r, const char *tok, uint64_t max, const char *what,
                     uint64_t *out)
{
    if (!parse_num(tok, max, out))
        return rd_err(r, "bad number '%s' for %s (a decimal up to %llu)", tok, what,
                      (unsigned long long)max);
    return 0;
}

static int rd_ids(struct reader *r, const char *list)
{
    struct sim_trace *t = r->t;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    t->ids = calloc(n, sizeof(uint64_t));
    if (!t->ids)
        return -ENOMEM;
    char buf[32];
    const char *p = list;
    for (size_t i = 0; i < n; i++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf)
            return rd_err(r, "bad id list '%s' for ids (decimal ids separated by commas)", list);
        memcpy(buf, p, len);
        buf[len] = '\0';
        int e = rd_number(r, buf, UINT64_MAX, "an id in ids", &t->ids[i]);
        if (e)
            return e;
        p += len + (p[len] == ',');
    }
    t->n_ids = n;
    return 0;
}

static int rd_schedule(struct reader *r, char **tok, int ntok)
{
    struct sim_trace *t = r->t;
    if (t->has_schedule)
        return rd_err(r, "a second schedule line");
    bool order = false, layers = false;
    for (int i = 1; i < ntok; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return rd_err(r, "schedule field '%s' is not key=value", tok[i]);
        *eq = '\0';
        const char *k = tok[i], *v = eq + 1;
        uint64_t x = 0;
        int e = 0;
        if (!strcmp(k, "order")) {
            if (!strcmp(v, "layer"))
                t->order = KVT_ORDER_LAYER_MAJOR;
            else if (!strcmp(v, "seq"))
                t->order = KVT_ORDER_SEQ_MAJOR;
            else
                return rd_err(r, "bad schedule order '%s' (layer or seq)", v);
            order = true;
        } else if (!strcmp(k, "layers")) {
            if (!(e = rd_number(r, v, UINT32_MAX - 1, "layers", &x)) && !x)
                return rd_err(r, "schedule layers must be at least 1");
            t->layers = (uint32_t)x;
            layers = true;
        } else if (!strcmp(k, "window")) {
            if (!(e = rd_number(r, v, UINT32_MAX, "window", &x)))
                t->window_pages = (uint32_t)x;
        } else if (!strcmp(k, "sinks")) {
            if (!(e = rd_number(r, v, UINT32_MAX, "sinks", &x)))
                t->sink_pages = (uint32_t)x;
        } else if (!strcmp(k, "ids")) {
            if (t->ids)
                return rd_err(r, "ids given twice");
            e = rd_ids(r, v);
        } else {
            return rd_err(r, "unknown schedule field '%s' (order, layers, window, sinks, ids)", k);
        }
        if (e)
            return e;
    }
    if (!order || !layers || !t->ids)
        return rd_err(r, "schedule needs order=, layers= and ids=");
    t->has_schedule = true;
    return 0;
}

/* Fields after the name, per record kind: advance ID LAYER, access and new
 * ID LAYER INDEX, drop ID, step. */
static const struct {
    const char *name;
    uint8_t kind;
    int fields;
    const char *usage;
} kinds[] = {
    { "access", SIM_ACCESS, 3, "ID LAYER INDEX" }, { "advance", SIM_ADVANCE, 2, "ID LAYER" },
    { "new", SIM_NEW, 3, "ID LAYER INDEX" },       { "drop", SIM_DROP, 1, "ID" },
    { "step", SIM_STEP, 0, "(no fields)" },
};

static int rd_record(struct reader *r, char **tok, int ntok)
{
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        if (strcmp(tok[0], kinds[k].name))
            continue;
        if (ntok - 1 != kinds[k].fields)
            return rd_err(r, "'%s' takes %s, got %d field%s", tok[0], kinds[k].usage, ntok - 1,
                          ntok == 2 ? "" : "s");
        if (!r->t->page_bytes)
            return rd_err(r, "'%s' before page_bytes (the header must give it first)", tok[0]);
        uint64_t v[3] = { 0, 0, 0 };
        static const char *const what[3] = { "ID", "LAYER", "INDEX" };
        for (int i = 0; i < kinds[k].fields; i++) {
            int e = rd_number(r, tok[1 + i], i ? UINT32_MAX : UINT64_MAX, what[i], &v[i]);
            if (e)
                return e;
        }
        r->records = true;
        int e = sim_trace_push(r->t, kinds[k].kind, v[0], (uint32_t)v[1], (uint32_t)v[2], r->line);
        return e == -E2BIG ? rd_err(r, "more than %llu records", (unsigned long long)SIM_MAX_RECORDS)
                           : e;
    }
    return rd_err(r, "unknown record '%s' (access, advance, new, drop, step; or the headers "
                     "page_bytes, schedule)", tok[0]);
}

static int rd_line(struct reader *r, char *s)
{
    char *hash = strchr(s, '#');
    if (hash)
        *hash = '\0';
    char *tok[MAX_TOK], *save = NULL;
    int ntok = 0;
    for (char *p = strtok_r(s, " \t\r\n", &save); p; p = strtok_r(NULL, " \t\r\n", &save)) {
        if (ntok == MAX_TOK)
            return rd_err(r, "too many fields");
        tok[ntok++] = p;
    }
    if (r->line == 1) {
        if (ntok < 1 || strcmp(tok[0], "kvtier-trace"))
            return rd_err(r, "not a kvtier trace (the first line must be 'kvtier-trace 1')");
        if (ntok != 2 || strcmp(tok[1], "1"))
            return rd_err(r, "trace version '%s' is not supported (this kvtier reads 1)",
                          ntok > 1 ? tok[1] : "");
        return 0;
    }
    if (!ntok)
        return 0;
    if (!strcmp(tok[0], "page_bytes") || !strcmp(tok[0], "schedule")) {
        if (r->records)
            return rd_err(r, "'%s' after the first record (headers come first)", tok[0]);
        if (tok[0][0] == 's')
            return rd_schedule(r, tok, ntok);
        if (r->t->page_bytes)
            return rd_err(r, "a second page_bytes line");
        uint64_t pb = 0;
        if (ntok != 2)
            return rd_err(r, "'page_bytes' takes one number");
        int e = rd_number(r, tok[1], 1ull << 40, "page_bytes", &pb);
        if (!e && !pb)
            return rd_err(r, "page_bytes must be at least 1");
        r->t->page_bytes = pb;
        return e;
    }
    return rd_record(r, tok, ntok);
}

/* Reads one line (with its '\n', if any, then a NUL) into *buf, grown to
 * SIM_MAX_LINE + 2 bytes at most, so that an endless line costs no more
 * memory than that. Returns its length, 0 at the end of the file, -E2BIG
 * past SIM_MAX_LINE bytes, -ENOMEM, -EIO. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap)
{
    size_t len = 0;
    int c = 0;
    while (c != '\n' && (c = getc_unlocked(f)) != EOF) {
        if (len + 2 > *cap) {
            if (len > SIM_MAX_LINE)
                return -E2BIG;
            size_t nc = *cap ? *cap * 2 : 4096;
            nc = nc < SIM_MAX_LINE + 2 ? nc : SIM_MAX_LINE + 2;
            char *nb = realloc(*buf, nc);
            if (!nb)
                return -ENOMEM;
            *buf = nb;
            *cap = nc;
        }
        (*buf)[len++] = (char)c;
    }
    if (ferror(f))
        return -EIO;
    if (len - (c == '\n') > SIM_MAX_LINE)
        return -E2BIG;
    if (len)
        (*buf)[len] = '\0';
    return (ssize_t)len;
}

static int read_lines(FILE *f, struct reader *r)
{
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = 0;
    int e = 0;
    for (;;) {
        if (r->line == UINT32_MAX - 1) {
            e = rd_err(r, "too many lines");
            break;
        }
        r->line++;
        if ((n = read_line(f, &buf, &cap)) <= 0) {
            r->line -= n == 0;
            break;
        }
        if (memchr(buf, '\0', (size_t)n)) {
            e = rd_err(r, "a NUL byte");
            break;
        }
        if ((e = rd_line(r, buf)))
            break;
    }
    free(buf);
    if (n == -E2BIG) {
        rd_err(r, "longer than %u bytes", SIM_MAX_LINE);
        e = -E2BIG;
    } else if (n == -EIO) {
        sim_seterr(r->err, r->errlen, "read error after line %u", r->line - 1);
        e = -EIO;
    } else if (n == -ENOMEM) {
        e = -ENOMEM;
    }
    return e;
}

int sim_trace_read(FILE *f, struct sim_trace *t, char *err, size_t errlen)
{
    *t = (struct sim_trace){ 0 };
    struct reader r = { .t = t, .err = err, .errlen = errlen };
    int e = read_lines(f, &r);
    if (!e && r.line == 0)
        e = sim_seterr(err, errlen, "empty file: not a kvtier trace");
    if (!e && !t->page_bytes)
        e = sim_seterr(err, errlen, "line %u: the trace ends without page_bytes", r.line);
    if (e) {
        if (e == -ENOMEM)
            sim_seterr(err, errlen, "line %u: out of memory", r.line);
        sim_trace_free(t);
    }
    return e;
}

static const char *const rec_name[] = { "access", "advance", "new", "drop", "step" };

int sim_trace_write(FILE *f, const struct sim_trace *t)
{
    fprintf(f, "kvtier-trace 1\n# %llu records: %llu accesses, %llu steps\npage_bytes %llu\n",
            (unsigned long long)t->n, (unsigned long long)t->accesses,
            (unsigned long long)t->steps, (unsigned long long)t->page_bytes);
    if (t->has_schedule) {
        fprintf(f, "schedule order=%s layers=%u window=%u sinks=%u ids=",
                t->order == KVT_ORDER_SEQ_MAJOR ? "seq" : "layer", t->layers, t->window_pages,
                t->sink_pages);
        for (size_t i = 0; i < t->n_ids; i++)
            fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)t->ids[i]);
        fputc('\n', f);
    }
    for (size_t i = 0; i < t->n; i++) {
        const struct sim_rec *r = &t->rec[i];
        switch (r->kind) {
        case SIM_ACCESS:
        case SIM_NEW:
            fprintf(f, "%s %llu %u %u\n", rec_name[r->kind], (unsigned long long)r->id, r->layer,
                    r->index);
            break;
        case SIM_ADVANCE:
            fprintf(f, "advance %llu %u\n", (unsigned long long)r->id, r->layer);
            break;
        case SIM_DROP:
            fprintf(f, "drop %llu\n", (unsigned long long)r->id);
            break;
        default:
            fputs("step\n", f);
            break;
        }
    }
    return fflush(f) || ferror(f) ? -EIO : 0;
}
