/*
 * fuzz_rcluster.c — what the Redis Cluster client reads from servers and
 * users (io/rcluster_parse.h), on arbitrary bytes:
 *
 *   - the input as a server's byte stream, through hiredis's reader with
 *     the client's bounded reply functions (rc_tree_attach), each reply to
 *     the parser the client would give it: an array to the CLUSTER SLOTS
 *     parser, an error to the MOVED/ASK classifier;
 *   - the same stream through the batch reader (rcluster_reply.c's sink)
 *     into a buffer of exactly its capacity (ASan sees any byte past it);
 *   - the input as a seed URL, an auth file's text, a host:port, a key.
 *
 * Rules: a map that parses has 1..cap ranges, each lo <= hi < 16384 with a
 * port 1..65535 and a NUL-ended host shorter than 256 bytes; a MOVED/ASK
 * that parses names a slot < 16384 and a port 1..65535; a string reply is
 * copied only when it fits and then byte for byte; a URL that parses has
 * 1..64 seeds with ports; the slot of a key equals a bit-at-a-time CRC16
 * of the key or its hash tag (a reference written from the spec here).
 */
#include <hiredis/hiredis.h>

#include "io/rcluster.h"
#include "io/rcluster_parse.h"
#include "tests/fuzz/fuzz.h"

#define MAX_REPLIES 64
#define SINK_CAP 64

static struct rc_slot_range ranges[RC_SLOTS];

static uint16_t crc16_ref(const uint8_t *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int k = 0; k < 8; k++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

static unsigned slot_ref(const uint8_t *k, size_t n)
{
    size_t s = 0, e;
    while (s < n && k[s] != '{')
        s++;
    if (s < n) {
        for (e = s + 1; e < n && k[e] != '}'; e++)
            ;
        if (e < n && e > s + 1)
            return crc16_ref(k + s + 1, e - s - 1) & 16383;
    }
    return crc16_ref(k, n) & 16383;
}

static void check_addr(const struct rc_addr *a)
{
    fuzz_check(a->port >= 1 && a->port <= 65535, "a parsed port is 1..65535");
    fuzz_check(memchr(a->host, '\0', RC_HOST_MAX) != NULL, "a parsed host is NUL-ended");
}

static void check_reply(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ARRAY) {
        size_t n = 99999;
        size_t cap = r->elements % 7 == 3 ? 2 : RC_SLOTS;   /* sometimes too little room */
        if (rc_slots_parse(r, ranges, cap, &n) == 0) {
            fuzz_check(n <= cap, "no more ranges than room");
            for (size_t i = 0; i < n; i++) {
                fuzz_check(ranges[i].lo <= ranges[i].hi && ranges[i].hi < RC_SLOTS, "slot range");
                check_addr(&ranges[i].master);
            }
        } else {
            fuzz_check(n == 0, "a refused map gives no ranges");
        }
    } else if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS ||
               r->type == REDIS_REPLY_STRING) {
        unsigned slot = RC_SLOTS;
        struct rc_addr to;
        enum rc_err_kind k = rc_err_classify(r->str, r->len, &slot, &to);
        if (k == RC_ERR_MOVED || k == RC_ERR_ASK) {
            fuzz_check(slot < RC_SLOTS, "a redirect's slot");
            check_addr(&to);
        }
    }
}

static void as_stream(const uint8_t *data, size_t size)
{
    struct rc_tree budget;
    redisReader *rd = redisReaderCreate();
    fuzz_check(rd != NULL, "reader");
    rc_tree_attach(rd, &budget);
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        for (int i = 0; i < MAX_REPLIES; i++) {
            void *r = NULL;
            if (redisReaderGetReply(rd, &r) != REDIS_OK || !r)
                break;
            check_reply(r);
            freeReplyObject(r);
            rc_tree_reset(&budget);
        }
    }
    redisReaderFree(rd);
}

static void as_batch(const uint8_t *data, size_t size)
{
    struct rc_sink s;
    redisReader *rd = rc_sink_reader(&s);
    uint8_t *buf = malloc(SINK_CAP);
    fuzz_check(rd && buf, "reader");
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        for (int i = 0; i < MAX_REPLIES; i++) {
            void *r = NULL;
            memset(buf, 0xA5, SINK_CAP);
            rc_sink_reset(&s, buf, SINK_CAP);
            if (redisReaderGetReply(rd, &r) != REDIS_OK || !r || s.bad)
                break;
            fuzz_check(s.type >= REDIS_REPLY_STRING && s.type <= REDIS_REPLY_ERROR, "a reply type");
            fuzz_check(memchr(s.text, '\0', sizeof s.text) != NULL, "status text NUL-ended");
            if (s.type == REDIS_REPLY_STRING && s.len <= SINK_CAP) {
                /* The bytes of the string are in the input: find them. */
                bool found = s.len == 0;
                for (size_t at = 0; !found && at + s.len <= size; at++)
                    found = memcmp(data + at, buf, s.len) == 0;
                fuzz_check(found, "a string reply is copied from the stream");
            }
        }
    }
    redisReaderFree(rd);
    free(buf);
}

static void as_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), user[RC_SECRET_MAX], pass[RC_SECRET_MAX];
    struct rc_url *u = malloc(sizeof *u);
    struct rc_addr a;
    char why[160];
    fuzz_check(s && u, "memory");
    memcpy(s, data, size);
    s[size] = '\0';
    if (rc_url_parse(s, u, why, sizeof why) == 0) {
        fuzz_check(u->n_seeds >= 1 && u->n_seeds <= RC_SEEDS_MAX, "1..64 seeds");
        for (size_t i = 0; i < u->n_seeds; i++) {
            check_addr(&u->seeds[i]);
            fuzz_check(u->seeds[i].host[0] != '\0', "a seed has a host");
        }
    }
    if (rc_auth_parse((const char *)data, size, user, pass) == 0)
        fuzz_check(pass[0] != '\0' && strlen(pass) < RC_SECRET_MAX, "a password");
    if (rc_addr_parse((const char *)data, size, &a) == 0)
        check_addr(&a);
    fuzz_check(kvt_rcluster_slot(data, size) == slot_ref(data, size), "slot = CRC16 reference");
    free(s);
    free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    as_stream(data, size);
    as_batch(data, size);
    as_text(data, size);
    return 0;
}
