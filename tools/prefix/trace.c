/*
 * trace.c — reads prefix-cache request traces (see trace.h for the format).
 *
 * The parser is a small recursive-descent JSON reader that understands only
 * what the format needs: one object per line, unsigned integers for the
 * known keys, and any JSON value (skipped) for the others. It never reads
 * past the line it is given, keeps nesting under PFX_MAX_DEPTH (so skipping
 * a hostile value cannot exhaust the stack), and grows memory only by what
 * the trace holds (references and requests, each capped).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tools/prefix/trace.h"

#define PFX_MAX_DEPTH 64

struct parser {
    const char *p, *end;
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

static void skip_ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || *ps->p == '\n'))
        ps->p++;
}

static bool eat(struct parser *ps, char c)
{
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

static const char *what_is_here(const struct parser *ps)
{
    return ps->p >= ps->end ? "the end of the line" : "another character";
}

/* A JSON string; its bytes (escapes left as written) in [*s, *s + *n). */
static int parse_string(struct parser *ps, const char **s, size_t *n)
{
    if (!eat(ps, '"'))
        return fail(ps, "expected a string, found %s", what_is_here(ps));
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p != '"') {
        if ((unsigned char)*ps->p < 0x20)
            return fail(ps, "a control character inside a string");
        if (*ps->p == '\\') {
            if (++ps->p >= ps->end)
                break;
            if (!strchr("\"\\/bfnrtu", *ps->p))
                return fail(ps, "a bad escape '\\%c' in a string", *ps->p);
        }
        ps->p++;
    }
    if (ps->p >= ps->end)
        return fail(ps, "a string runs to the end of the line");
    *s = start;
    *n = (size_t)(ps->p - start);
    ps->p++;
    return 0;
}

/* A non-negative JSON integer no larger than max ("12", not "1.5", "-1" or "1e3"). */
static int parse_uint(struct parser *ps, const char *what, uint64_t max, uint64_t *out)
{
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "%s: expected a non-negative integer", what);
    uint64_t v = 0;
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned d = (unsigned)(*ps->p - '0');
        if (v > (max - d) / 10)
            return fail(ps, "%s: %.*s... is larger than %llu", what, (int)(ps->p - start + 1),
                        start, (unsigned long long)max);
        v = v * 10 + d;
        ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
        return fail(ps, "%s: expected an integer, found a fraction or exponent", what);
    if (ps->p - start > 1 && *start == '0')
        return fail(ps, "%s: a number with a leading zero", what);
    *out = v;
    return 0;
}

static int skip_value(struct parser *ps, int depth);

/* Any JSON number (skipped). */
static int skip_number(struct parser *ps)
{
    const char *start = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "expected a value");
    while (ps->p < ps->end && strchr("0123456789+-.eE", *ps->p))
        ps->p++;
    /* Shape only: strtod would accept "1e" or "1.": refuse what it would not. */
    char last = ps->p[-1];
    if (last == '+' || last == '-' || last == '.' || last == 'e' || last == 'E')
        return fail(ps, "a malformed number '%.*s'", (int)(ps->p - start), start);
    return 0;
}

static int skip_container(struct parser *ps, int depth, char close)
{
    if (depth >= PFX_MAX_DEPTH)
        return fail(ps, "values nested deeper than %d", PFX_MAX_DEPTH);
    if (eat(ps, close))
        return 0;
    for (;;) {
        int r;
        if (close == '}') {
            const char *k;
            size_t kn;
            if ((r = parse_string(ps, &k, &kn)) < 0)
                return r;
            if (!eat(ps, ':'))
                return fail(ps, "expected ':' after a key");
        }
        if ((r = skip_value(ps, depth + 1)) < 0)
            return r;
        if (eat(ps, close))
            return 0;
        if (!eat(ps, ','))
            return fail(ps, "expected ',' or '%c', found %s", close, what_is_here(ps));
    }
}

static int skip_value(struct parser *ps, int depth)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "expected a value, found the end of the line");
    const char *s;
    size_t n;
    switch (*ps->p) {
    case '"':
        return parse_string(ps, &s, &n);
    case '{':
        ps->p++;
        return skip_container(ps, depth, '}');
    case '[':
        ps->p++;
        return skip_container(ps, depth, ']');
    }
    static const char *const words[] = { "true", "false", "null" };
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(words[i]);
        if ((size_t)(ps->end - ps->p) >= l && !memcmp(ps->p, words[i], l)) {
            ps->p += l;
            return 0;
        }
    }
    return skip_number(ps);
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

static int parse_hash_ids(struct parser *ps, struct builder *b)
{
    if (!eat(ps, '['))
        return fail(ps, "hash_ids: expected an array");
    if (eat(ps, ']'))
        return 0;
    for (;;) {
        uint64_t h;
        int r = parse_uint(ps, "hash_ids", UINT64_MAX, &h);
        if (r < 0)
            return r;
        if ((r = push_ref(b, h)) == -E2BIG)
            return fail(ps, "more than %llu block references in the trace",
                        (unsigned long long)PFX_MAX_REFS), -E2BIG;
        if (r < 0)
            return r;
        if (eat(ps, ']'))
            return 0;
        if (!eat(ps, ','))
            return fail(ps, "hash_ids: expected ',' or ']', found %s", what_is_here(ps));
    }
}

enum { K_TS = 1, K_IN = 2, K_OUT = 4, K_HASH = 8 };

static int parse_field(struct parser *ps, struct builder *b, struct pfx_req *q, unsigned *seen)
{
    const char *k;
    size_t kn;
    int r = parse_string(ps, &k, &kn);
    if (r < 0)
        return r;
    if (!eat(ps, ':'))
        return fail(ps, "expected ':' after \"%.*s\"", (int)(kn < 64 ? kn : 64), k);
    static const struct { const char *name; unsigned bit; } known[] = {
        { "timestamp", K_TS }, { "input_length", K_IN }, { "output_length", K_OUT },
        { "hash_ids", K_HASH },
    };
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strlen(known[i].name) == kn && !memcmp(known[i].name, k, kn))
            bit = known[i].bit;
    if (!bit)
        return skip_value(ps, 1);
    if (*seen & bit)
        return fail(ps, "\"%.*s\" appears twice", (int)kn, k);
    *seen |= bit;
    uint64_t v;
    switch (bit) {
    case K_TS:
        if ((r = parse_uint(ps, "timestamp", UINT64_MAX / 1000, &v)) == 0)
            q->t_ms = v;
        return r;
    case K_IN:
        if ((r = parse_uint(ps, "input_length", UINT32_MAX, &v)) == 0)
            q->in_tokens = (uint32_t)v;
        return r;
    case K_OUT:
        if ((r = parse_uint(ps, "output_length", UINT32_MAX, &v)) == 0)
            q->out_tokens = (uint32_t)v;
        return r;
    default:
        return parse_hash_ids(ps, b);
    }
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

/* One line: blank, or one object. */
static int parse_line(struct parser *ps, struct builder *b)
{
    skip_ws(ps);
    if (ps->p == ps->end)
        return 0;
    if (!eat(ps, '{'))
        return fail(ps, "expected a JSON object ('{')");
    struct pfx_req q = { .first = b->t->n_hash, .line = ps->line };
    unsigned seen = 0;
    int r;
    if (!eat(ps, '}')) {
        for (;;) {
            if ((r = parse_field(ps, b, &q, &seen)) < 0)
                return r;
            if (eat(ps, '}'))
                break;
            if (!eat(ps, ','))
                return fail(ps, "expected ',' or '}', found %s", what_is_here(ps));
        }
    }
    skip_ws(ps);
    if (ps->p != ps->end)
        return fail(ps, "text after the object");
    if (!(seen & K_HASH))
        return fail(ps, "no \"hash_ids\"");
    if (!(seen & K_TS))
        return fail(ps, "no \"timestamp\"");
    uint64_t n = b->t->n_hash - q.first;
    if (n > UINT32_MAX)
        return fail(ps, "more than %u blocks in one request", UINT32_MAX);
    q.n = (uint32_t)n;
    if (!(seen & K_IN)) {
        uint64_t tok = n * b->t->block_tokens;
        q.in_tokens = tok > UINT32_MAX ? UINT32_MAX : (uint32_t)tok;
    }
    return push_req(b, &q);
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
    ps->p = line;
    ps->end = line + len;
    if (memchr(line, '\0', len))
        return fail(ps, "a NUL byte");
    return parse_line(ps, b);
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
