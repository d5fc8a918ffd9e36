/*
 * trace.c — reads prefix-cache request traces (see trace.h for the format).
 *
 * Lines are cut here (so that a buffer and a file agree on where a line
 * ends, its number and how long it may be, and a line is never held past
 * PFX_MAX_LINE bytes); each line is one JSON document read by jansson, and
 * only its four known keys are looked at. jansson bounds nesting itself
 * (JSON_PARSER_MAX_DEPTH, 2048), so a hostile value cannot exhaust the
 * stack; memory grows only by what the trace holds (references and
 * requests, each capped), and a line's document is freed before the next.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tools/prefix/trace.h"

struct parser {
    unsigned line;
    char *err;
    size_t errlen;
};

/* The hash id -> dense id map: open addressing, linear probing, load <= 1/2. */
struct idmap {
    uint64_t *key;
    uint32_t *val;       /* dense id + 1; 0 = empty */
    size_t cap;          /* a power of two */
    uint32_t n;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    if (ps->err && ps->errlen) {
        int k = snprintf(ps->err, ps->errlen, "line %u: ", ps->line);
        if (k >= 0 && (size_t)k < ps->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + k, ps->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static int idmap_grow(struct idmap *m)
{
    size_t nc = m->cap ? m->cap * 2 : 1024;
    uint64_t *nk = calloc(nc, sizeof(*nk));
    uint32_t *nv = calloc(nc, sizeof(*nv));
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->val[i])
            continue;
        size_t j = (m->key[i] * 0x9E3779B97F4A7C15ull) >> 20 & (nc - 1);
        while (nv[j])
            j = (j + 1) & (nc - 1);
        nk[j] = m->key[i];
        nv[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = nk;
    m->val = nv;
    m->cap = nc;
    return 0;
}

/* The dense id of hash h, given the next one if h is new. */
static int idmap_get(struct idmap *m, uint64_t h, uint32_t *dense)
{
    if (2 * ((size_t)m->n + 1) > m->cap) {
        int r = idmap_grow(m);
        if (r < 0)
            return r;
    }
    size_t j = (h * 0x9E3779B97F4A7C15ull) >> 20 & (m->cap - 1);
    while (m->val[j] && m->key[j] != h)
        j = (j + 1) & (m->cap - 1);
    if (!m->val[j]) {
        m->key[j] = h;
        m->val[j] = ++m->n;
    }
    *dense = m->val[j] - 1;
    return 0;
}

struct builder {
    struct pfx_trace *t;
    size_t req_cap, hash_cap;
    struct idmap ids;
};

static int push_ref(struct builder *b, uint64_t h)
{
    struct pfx_trace *t = b->t;
    if (t->n_hash == b->hash_cap) {
        if (t->n_hash >= PFX_MAX_REFS)
            return -E2BIG;
        size_t nc = b->hash_cap ? b->hash_cap * 2 : 4096;
        uint64_t *nh = realloc(t->hash, nc * sizeof(*nh));
        if (!nh)
            return -ENOMEM;
        t->hash = nh;
        uint32_t *nb = realloc(t->block, nc * sizeof(*nb));
        if (!nb)
            return -ENOMEM;
        t->block = nb;
        b->hash_cap = nc;
    }
    int r = idmap_get(&b->ids, h, &t->block[t->n_hash]);
    if (r < 0)
        return r;
    t->hash[t->n_hash++] = h;
    return 0;
}

/* A known key's value: a non-negative JSON integer no larger than max
 * ("12", not "1.5", "-1" or "1e3"). */
static int get_uint(struct parser *ps, const json_t *v, const char *what, uint64_t max,
                    uint64_t *out)
{
    if (json_is_real(v))
        return fail(ps, "%s: expected an integer, found a fraction or exponent", what);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(ps, "%s: expected a non-negative integer", what);
    uint64_t x = (uint64_t)json_integer_value(v);
    if (x > max)
        return fail(ps, "%s: %llu is larger than %llu", what, (unsigned long long)x,
                    (unsigned long long)max);
    *out = x;
    return 0;
}

static int parse_hash_ids(struct parser *ps, struct builder *b, const json_t *a)
{
    if (!json_is_array(a))
        return fail(ps, "hash_ids: expected an array");
    for (size_t i = 0; i < json_array_size(a); i++) {
        uint64_t h;
        int r = get_uint(ps, json_array_get(a, i), "hash_ids", UINT64_MAX, &h);
        if (r < 0)
            return r;
        if ((r = push_ref(b, h)) == -E2BIG)
            return fail(ps, "more than %llu block references in the trace",
                        (unsigned long long)PFX_MAX_REFS), -E2BIG;
        if (r < 0)
            return r;
    }
    return 0;
}

/* The request's fields from the line's object; timestamp and hash_ids are
 * required, the lengths optional. */
static int parse_fields(struct parser *ps, struct builder *b, const json_t *o, struct pfx_req *q)
{
    const json_t *ts = json_object_get(o, "timestamp"), *in = json_object_get(o, "input_length"),
                 *out = json_object_get(o, "output_length"), *ids = json_object_get(o, "hash_ids");
    uint64_t v;
    int r;
    if (!ids)
        return fail(ps, "no \"hash_ids\"");
    if (!ts)
        return fail(ps, "no \"timestamp\"");
    if ((r = get_uint(ps, ts, "timestamp", UINT64_MAX / 1000, &v)) < 0)
        return r;
    q->t_ms = v;
    if (in) {
        if ((r = get_uint(ps, in, "input_length", UINT32_MAX, &v)) < 0)
            return r;
        q->in_tokens = (uint32_t)v;
    }
    if (out) {
        if ((r = get_uint(ps, out, "output_length", UINT32_MAX, &v)) < 0)
            return r;
        q->out_tokens = (uint32_t)v;
    }
    if ((r = parse_hash_ids(ps, b, ids)) < 0)
        return r;
    uint64_t n = b->t->n_hash - q->first;
    if (n > UINT32_MAX)
        return fail(ps, "more than %u blocks in one request", UINT32_MAX);
    q->n = (uint32_t)n;
    if (!in) {
        uint64_t tok = n * b->t->block_tokens;
        q->in_tokens = tok > UINT32_MAX ? UINT32_MAX : (uint32_t)tok;
    }
    return 0;
}

static int push_req(struct builder *b, const struct pfx_req *q)
{
    struct pfx_trace *t = b->t;
    if (t->n_req == b->req_cap) {
        size_t nc = b->req_cap ? b->req_cap * 2 : 1024;
        struct pfx_req *nr = realloc(t->req, nc * sizeof(*nr));
        if (!nr)
            return -ENOMEM;
        t->req = nr;
        b->req_cap = nc;
    }
    t->req[t->n_req++] = *q;
    return 0;
}

static bool blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return false;
    return true;
}

/* One line: blank, or one object. Duplicate keys are refused anywhere in
 * it (jansson would keep the last one silently); strings may hold \u0000,
 * as other keys' values are skipped whatever they are. */
static int parse_line(struct parser *ps, struct builder *b, const char *line, size_t len)
{
    if (blank(line, len))
        return 0;
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!o && json_error_code(&je) == json_error_out_of_memory)
        return -ENOMEM;
    if (!o)
        return fail(ps, "%s (byte %d)", je.text, je.position);
    int r;
    struct pfx_req q = { .first = b->t->n_hash, .line = ps->line };
    if (!json_is_object(o))
        r = fail(ps, "expected a JSON object ('{')");
    else if ((r = parse_fields(ps, b, o, &q)) == 0)
        r = push_req(b, &q);
    json_decref(o);
    return r;
}

void pfx_trace_free(struct pfx_trace *t)
{
    free(t->req);
    free(t->hash);
    free(t->block);
    memset(t, 0, sizeof(*t));
}

static void builder_init(struct builder *b, struct pfx_trace *t)
{
    memset(t, 0, sizeof(*t));
    t->block_tokens = PFX_BLOCK_TOKENS;
    memset(b, 0, sizeof(*b));
    b->t = t;
}

static int builder_end(struct builder *b, int r)
{
    b->t->distinct = b->ids.n;
    free(b->ids.key);
    free(b->ids.val);
    if (r < 0)
        pfx_trace_free(b->t);
    return r;
}

static int parse_chunk(struct builder *b, struct parser *ps, const char *line, size_t len)
{
    if (memchr(line, '\0', len))
        return fail(ps, "a NUL byte");
    return parse_line(ps, b, line, len);
}

/* Where the lines come from: a buffer, or a file read a line at a time.
 * Both readers run parse_lines over one, so that they cannot disagree on
 * where a line ends, its number, or how long it may be (the fuzzer's rule:
 * the buffer and the file read alike). */
struct line_src {
    const char *buf;      /* a buffer of len bytes, read from off, or */
    size_t len, off;
    FILE *f;              /* a file, each line read into line[cap] */
    char *line;
    size_t cap;
};

/* The next line of a buffer (without its '\n'). 1 = a line, 0 = the end,
 * -E2BIG = longer than PFX_MAX_LINE. */
static int buf_line(struct line_src *s, const char **p, size_t *n)
{
    if (s->off >= s->len)
        return 0;
    const char *at = s->buf + s->off, *nl = memchr(at, '\n', s->len - s->off);
    size_t l = nl ? (size_t)(nl - at) : s->len - s->off;
    if (l > PFX_MAX_LINE)
        return -E2BIG;
    *p = at;
    *n = l;
    s->off += l + 1;
    return 1;
}

/* The next line of a file, read into s->line: grown to PFX_MAX_LINE bytes
 * at most, so that a longer line costs no more memory than that. Returns
 * as buf_line, or -ENOMEM, -EIO. */
static int file_line(struct line_src *s, const char **p, size_t *n)
{
    size_t len = 0;
    int c;
    while ((c = getc_unlocked(s->f)) != EOF && c != '\n') {
        if (len == s->cap) {
            if (s->cap >= PFX_MAX_LINE)
                return -E2BIG;
            size_t nc = s->cap ? s->cap * 2 : 4096;
            nc = nc < PFX_MAX_LINE ? nc : PFX_MAX_LINE;
            char *nb = realloc(s->line, nc);
            if (!nb)
                return -ENOMEM;
            s->line = nb;
            s->cap = nc;
        }
        s->line[len++] = (char)c;
    }
    if (ferror(s->f))
        return -EIO;
    if (c == EOF && len == 0)
        return 0;
    *p = s->line ? s->line : ""; /* an empty first line has no buffer (NULL + 0 is UB) */
    *n = len;
    return 1;
}

static int parse_lines(struct builder *b, struct line_src *src, char *err, size_t errlen)
{
    struct parser ps = { .err = err, .errlen = errlen };
    for (;;) {
        if (ps.line == UINT32_MAX)
            return fail(&ps, "more than %u lines", UINT32_MAX - 1), -E2BIG;
        ps.line++;
        const char *line;
        size_t len;
        int r = src->f ? file_line(src, &line, &len) : buf_line(src, &line, &len);
        if (r == -E2BIG)
            return fail(&ps, "longer than %u bytes", PFX_MAX_LINE), -E2BIG;
        if (r == -EIO)
            return fail(&ps, "read error"), -EIO;
        if (r <= 0)
            return r;
        if ((r = parse_chunk(b, &ps, line, len)) < 0)
            return r;
    }
}

int pfx_trace_parse(const char *buf, size_t len, struct pfx_trace *t, char *err, size_t errlen)
{
    struct builder b;
    builder_init(&b, t);
    struct line_src src = { .buf = buf, .len = len };
    return builder_end(&b, parse_lines(&b, &src, err, errlen));
}

int pfx_trace_read(FILE *f, struct pfx_trace *t, char *err, size_t errlen)
{
    struct builder b;
    builder_init(&b, t);
    struct line_src src = { .f = f };
    int r = parse_lines(&b, &src, err, errlen);
    free(src.line);
    return builder_end(&b, r);
}
