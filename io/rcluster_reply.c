/*
 * rcluster_reply.c — replies read with hiredis, checked before use
 * (rcluster_parse.h): the CLUSTER SLOTS map, and the sink that takes a
 * batch's replies without building reply objects.
 *
 * hiredis's reader bounds what it hands out by the bytes it holds, but not
 * every reader version checks every length it parses; so the sink checks
 * again that a string lies inside the reader's buffer before copying it,
 * and the map parser checks every element's type and count before reading
 * it. A reply that breaks a rule fails whole: a map half taken would route
 * keys to nodes the server never named.
 *
 * Replies built as objects (AUTH, CLUSTER SLOTS) are built by our functions
 * (rc_tree_attach), not hiredis 0.14's: those calloc an array of whatever
 * count a server writes ("*2000000000" is 16 GB) and abort() the process
 * when an allocation fails (its HIREDIS_OOM_HANDLER). Ours refuse arrays
 * past a budget of elements per reply, and fail the reply (hiredis reports
 * "Out of memory" and the reader stops) instead of the process.
 */
#include <errno.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "io/codec.h"
#include "io/rcluster_parse.h"

static int slot_num(const redisReply *e, unsigned *out)
{
    if (!e || e->type != REDIS_REPLY_INTEGER || e->integer < 0 || e->integer >= (long long)RC_SLOTS)
        return -EPROTO;
    *out = (unsigned)e->integer;
    return 0;
}

/* [host, port, id?, ...]: host a string (empty or nil: the asked node's). */
static int slot_master(const redisReply *m, struct rc_addr *a)
{
    if (!m || m->type != REDIS_REPLY_ARRAY || m->elements < 2 || !m->element)
        return -EPROTO;
    const redisReply *h = m->element[0], *p = m->element[1];
    if (!h || !p || p->type != REDIS_REPLY_INTEGER || p->integer < 1 || p->integer > 65535)
        return -EPROTO;
    if (h->type == REDIS_REPLY_NIL) {
        a->host[0] = '\0';
    } else if (h->type == REDIS_REPLY_STRING && h->len < RC_HOST_MAX && h->str) {
        /* "?" is what Redis 7 writes for an unknown endpoint. */
        if (memchr(h->str, '\0', h->len))
            return -EPROTO;
        memcpy(a->host, h->str, h->len);
        a->host[h->len] = '\0';
        if (strcmp(a->host, "?") == 0)
            a->host[0] = '\0';
    } else {
        return -EPROTO;
    }
    a->port = (unsigned)p->integer;
    return 0;
}

int rc_slots_parse(const redisReply *r, struct rc_slot_range *out, size_t cap, size_t *n)
{
    *n = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || (r->elements && !r->element))
        return -EPROTO;
    if (r->elements > cap)
        return -EPROTO;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        struct rc_slot_range *s = &out[i];
        if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !e->element)
            return -EPROTO;
        if (slot_num(e->element[0], &s->lo) || slot_num(e->element[1], &s->hi) || s->lo > s->hi)
            return -EPROTO;
        if (slot_master(e->element[2], &s->master) != 0)
            return -EPROTO;
    }
    *n = r->elements;
    return 0;
}

/* ----------------------------------------------------------------- tree */
static void *tree_obj(const redisReadTask *t, int type)
{
    redisReply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->type = type;
    if (t->parent) {
        redisReply *p = t->parent->obj;
        if (!p || p->type != REDIS_REPLY_ARRAY || t->idx < 0 || (size_t)t->idx >= p->elements) {
            free(r);
            return NULL;
        }
        p->element[t->idx] = r;
    }
    return r;
}

static void *tree_string(const redisReadTask *t, char *str, size_t len)
{
    struct rc_tree *b = t->privdata;
    if (!b || len > b->bytes_left)
        return NULL;
    char *copy = malloc(len + 1);
    if (!copy)
        return NULL;
    redisReply *r = tree_obj(t, t->type);
    if (!r) {
        free(copy);
        return NULL;
    }
    b->bytes_left -= len;
    memcpy(copy, str, len);
    copy[len] = '\0';
    r->str = copy;
    r->len = len;
    return r;
}

static void *tree_array(const redisReadTask *t, int elements)
{
    struct rc_tree *b = t->privdata;
    if (!b || elements < 0 || (size_t)elements > b->elems_left)
        return NULL;
    redisReply **v = calloc(elements ? (size_t)elements : 1, sizeof *v);
    if (!v)
        return NULL;
    redisReply *r = tree_obj(t, REDIS_REPLY_ARRAY);
    if (!r) {
        free(v);
        return NULL;
    }
    b->elems_left -= (size_t)elements;
    r->element = v;
    r->elements = (size_t)elements;
    return r;
}

static void *tree_integer(const redisReadTask *t, long long v)
{
    redisReply *r = tree_obj(t, REDIS_REPLY_INTEGER);
    if (r)
        r->integer = v;
    return r;
}

static void *tree_nil(const redisReadTask *t)
{
    return tree_obj(t, REDIS_REPLY_NIL);
}

static redisReplyObjectFunctions tree_fns = {
    tree_string, tree_array, tree_integer, tree_nil, freeReplyObject,
};

void rc_tree_attach(redisReader *rd, struct rc_tree *b)
{
    rd->fn = &tree_fns;
    rd->privdata = b;   /* not redisReaderSetPrivdata: its (int) cast of a pointer warns */
    rc_tree_reset(b);
}

void rc_tree_reset(struct rc_tree *b)
{
    b->elems_left = RC_TREE_ELEMS;
    b->bytes_left = RC_TREE_BYTES;
}

/* ----------------------------------------------------------------- sink */
static int marker;   /* what the sink's functions return: never freed, never read */

static struct rc_sink *sink_of(const redisReadTask *t)
{
    return t->privdata;
}

/* The bytes past cap into buf2; with want_crc2 their CRC32C as well, piece
 * by piece, each piece read again while it is still in the cache the copy
 * just filled (a second pass over a whole page came from memory: its CRC
 * was 12% of a load's CPU). */
#define CRC_PIECE (16u << 10)
static void copy_second(struct rc_sink *s, const char *src, size_t n)
{
    if (!s->want_crc2) {
        memcpy(s->buf2, src, n);
        return;
    }
    uint8_t *dst = s->buf2;
    uint32_t crc = 0;
    for (size_t at = 0; at < n; at += CRC_PIECE) {
        size_t k = n - at < CRC_PIECE ? n - at : CRC_PIECE;
        memcpy(dst + at, src + at, k);
        crc = kvt_crc32c(crc, dst + at, k);
    }
    s->crc2 = crc;
}

static void *sink_string(const redisReadTask *t, char *str, size_t len)
{
    struct rc_sink *s = sink_of(t);
    if (!s)
        return NULL;
    if (t->parent)
        return &marker;
    const redisReader *rd = s->rd;
    /* In the reader's buffer, whole: anything else is a reader fooled by a
     * length, and copying would read past its memory. */
    if (!rd || str < rd->buf || (size_t)(str - rd->buf) > rd->len ||
        len > rd->len - (size_t)(str - rd->buf)) {
        s->bad = true;
        s->type = REDIS_REPLY_ERROR;
        return &marker;
    }
    s->type = t->type;
    s->len = len;
    if (t->type == REDIS_REPLY_STRING) {
        if (len <= s->cap && len) {
            memcpy(s->buf, str, len);
        } else if (len > s->cap && len - s->cap <= s->cap2) {
            if (s->cap)
                memcpy(s->buf, str, s->cap);
            copy_second(s, str + s->cap, len - s->cap);
        }
    } else {
        size_t k = len < sizeof s->text - 1 ? len : sizeof s->text - 1;
        memcpy(s->text, str, k);
        s->text[k] = '\0';
        s->text_len = len;
    }
    return &marker;
}

static void *sink_array(const redisReadTask *t, int elements)
{
    struct rc_sink *s = sink_of(t);
    if (!s)
        return NULL;
    if (!t->parent)
        s->type = REDIS_REPLY_ARRAY;
    return &marker;
}

static void *sink_integer(const redisReadTask *t, long long v)
{
    struct rc_sink *s = sink_of(t);
    if (!s)
        return NULL;
    if (!t->parent) {
        s->type = REDIS_REPLY_INTEGER;
        s->integer = v;
    }
    return &marker;
}

static void *sink_nil(const redisReadTask *t)
{
    struct rc_sink *s = sink_of(t);
    if (!s)
        return NULL;
    if (!t->parent)
        s->type = REDIS_REPLY_NIL;
    return &marker;
}

static void sink_free(void *obj)
{
}

static redisReplyObjectFunctions sink_fns = {
    sink_string, sink_array, sink_integer, sink_nil, sink_free,
};

redisReader *rc_sink_reader(struct rc_sink *s)
{
    redisReader *rd = redisReaderCreateWithFunctions(&sink_fns);
    if (rd)
        rd->privdata = s;
    s->rd = rd;
    return rd;
}

void rc_sink_second(struct rc_sink *s, void *buf2, size_t cap2, bool want_crc)
{
    s->buf2 = buf2;
    s->cap2 = buf2 ? cap2 : 0;
    s->want_crc2 = want_crc;
}

void rc_sink_reset(struct rc_sink *s, void *buf, size_t cap)
{
    s->buf = buf;
    s->cap = buf ? cap : 0;
    s->buf2 = NULL;
    s->cap2 = 0;
    s->want_crc2 = false;
    s->crc2 = 0;
    s->type = 0;
    s->len = 0;
    s->integer = 0;
    s->text[0] = '\0';
    s->text_len = 0;
    s->bad = false;
}
