/*
 * rcluster_parse.c — the seed URL, the auth file's line, error replies and
 * the key slot: pure functions of their input (rcluster_parse.h).
 *
 * Every parser takes a length and never reads past it: error replies come
 * from servers that may be hostile or broken, and their text is not NUL
 * terminated where it came from.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "io/rcluster.h"
#include "io/rcluster_parse.h"

/* CRC16-XMODEM by table, as Redis Cluster computes key slots (its
 * cluster.c keyHashSlot): the table is built at first use from the
 * polynomial, so it cannot hold a typo. */
static uint16_t crc16_table[256];
static bool crc16_ready;

static void crc16_init(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t c = (uint16_t)(i << 8);
        for (int k = 0; k < 8; k++)
            c = (c & 0x8000) ? (uint16_t)((c << 1) ^ 0x1021) : (uint16_t)(c << 1);
        crc16_table[i] = c;
    }
    __atomic_store_n(&crc16_ready, true, __ATOMIC_RELEASE);
}

uint16_t rc_crc16(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint16_t crc = 0;
    /* Racing first calls both build the same table: harmless. */
    if (!__atomic_load_n(&crc16_ready, __ATOMIC_ACQUIRE))
        crc16_init();
    for (size_t i = 0; i < n; i++)
        crc = (uint16_t)((crc << 8) ^ crc16_table[((crc >> 8) ^ b[i]) & 0xff]);
    return crc;
}

/* The hash tag rule: if the key has a '{' and, after it, a '}' with at
 * least one byte between, only those bytes are hashed ("{user1}.a" and
 * "{user1}.b" share a slot); "{}" or no '}' hashes the whole key. */
unsigned kvt_rcluster_slot(const void *key, size_t len)
{
    const char *k = key;
    const char *open = len ? memchr(k, '{', len) : NULL;
    if (open) {
        size_t from = (size_t)(open - k) + 1;
        const char *close = memchr(k + from, '}', len - from);
        if (close && close > k + from)
            return rc_crc16(k + from, (size_t)(close - (k + from))) & (RC_SLOTS - 1);
    }
    return rc_crc16(k, len) & (RC_SLOTS - 1);
}

static int parse_port(const char *s, size_t n, unsigned *port)
{
    unsigned v = 0;
    if (n == 0 || n > 5)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -EINVAL;
    *port = v;
    return 0;
}

static bool host_byte_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '-' || ch == '_' || ch == ':' || ch == '%';
}

/* "host:port", "[v6]:port", ":port" (no host); the port is after the last
 * ':' (an unbracketed IPv6 address, as MOVED writes it, keeps its own). */
int rc_addr_parse(const char *s, size_t n, struct rc_addr *a)
{
    const char *colon = NULL;
    for (size_t i = n; i > 0; i--)
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    if (!colon)
        return -EINVAL;
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= RC_HOST_MAX)
        return -EINVAL;
    for (size_t i = 0; i < hl; i++)
        if (!host_byte_ok(h[i]))
            return -EINVAL;
    if (parse_port(colon + 1, n - (size_t)(colon + 1 - s), &a->port) != 0)
        return -EINVAL;
    memcpy(a->host, h, hl);
    a->host[hl] = '\0';
    return 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* %XX-decodes s[0..n) into out (cap bytes with the NUL). */
static int unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -EINVAL;
            ch = (char)(hi << 4 | lo);
            i += 2;
        }
        if (ch == '\0' || o + 1 >= cap)
            return -EINVAL;
        out[o++] = ch;
    }
    out[o] = '\0';
    return 0;
}

static void say(char *why, size_t whylen, const char *what)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", what);
}

static int url_userinfo(const char *s, size_t n, struct rc_url *u, char *why, size_t whylen)
{
    const char *colon = memchr(s, ':', n);
    size_t ul = colon ? (size_t)(colon - s) : n;
    if (unescape(s, ul, u->user, sizeof u->user) != 0) {
        say(why, whylen, "bad user name in the URL");
        return -EINVAL;
    }
    if (colon && unescape(colon + 1, n - ul - 1, u->pass, sizeof u->pass) != 0) {
        say(why, whylen, "bad password in the URL (too long, or a bad %-escape)");
        return -EINVAL;
    }
    /* "redis://:pass@host": the password alone. "redis://pass@host" is a
     * user name alone in URL syntax; Redis's own tools read it the same. */
    return 0;
}

static int url_hosts(const char *s, size_t n, struct rc_url *u, char *why, size_t whylen)
{
    size_t at = 0;
    while (at <= n) {
        const char *comma = memchr(s + at, ',', n - at);
        size_t end = comma ? (size_t)(comma - s) : n;
        struct rc_addr *a = &u->seeds[u->n_seeds];
        char one[RC_HOST_MAX + 16];
        size_t len = end - at;
        if (u->n_seeds == RC_SEEDS_MAX) {
            say(why, whylen, "more than 64 seeds in the URL");
            return -EINVAL;
        }
        if (len == 0 || len >= RC_HOST_MAX + 8) {
            say(why, whylen, "an empty or too long host in the URL");
            return -EINVAL;
        }
        memcpy(one, s + at, len);
        /* No port: Redis's default. "[v6]" has none, "[v6]:p" has one;
         * unbracketed, one ':' is a port, more is an IPv6 address whose
         * port is after the last (as MOVED writes it). */
        bool has_port;
        if (one[0] == '[')
            has_port = one[len - 1] != ']';
        else
            has_port = memchr(one, ':', len) != NULL;
        if (!has_port)
            len += (size_t)snprintf(one + len, sizeof one - len, ":6379");
        if (rc_addr_parse(one, len, a) != 0 || !a->host[0]) {
            say(why, whylen, "a seed of the URL is not host:port (port 1-65535)");
            return -EINVAL;
        }
        u->n_seeds++;
        if (!comma)
            break;
        at = end + 1;
    }
    return 0;
}

int rc_url_parse(const char *url, struct rc_url *u, char *why, size_t whylen)
{
    static const char scheme[] = "redis://";
    memset(u, 0, sizeof *u);
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0) {
        say(why, whylen, "the URL does not start with redis:// (hiredis 0.14 has no TLS: no rediss://)");
        return -EINVAL;
    }
    const char *s = url + sizeof scheme - 1;
    size_t n = strlen(s);
    if (n && s[n - 1] == '/')
        n--;
    if (memchr(s, '/', n) || memchr(s, '?', n)) {
        say(why, whylen, "the URL has a path or query (only redis://[user[:password]@]host:port,...)");
        return -EINVAL;
    }
    const char *at = NULL;
    for (size_t i = n; i > 0; i--)
        if (s[i - 1] == '@') {
            at = s + i - 1;
            break;
        }
    int rc = 0;
    if (at) {
        rc = url_userinfo(s, (size_t)(at - s), u, why, whylen);
        n -= (size_t)(at + 1 - s);
        s = at + 1;
    }
    if (rc == 0)
        rc = url_hosts(s, n, u, why, whylen);
    if (rc != 0) {
        explicit_bzero(u->pass, sizeof u->pass);
        u->n_seeds = 0;
    }
    return rc;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

int rc_auth_parse(const char *t, size_t n, char *user, char *pass)
{
    user[0] = pass[0] = '\0';
    while (n && is_space(t[n - 1]))
        n--;
    size_t i = 0;
    while (i < n && (t[i] == ' ' || t[i] == '\t'))
        i++;
    if (i == n || memchr(t + i, '\n', n - i) || memchr(t + i, '\0', n - i))
        return -EINVAL;
    const char *w1 = t + i;
    while (i < n && !is_space(t[i]))
        i++;
    size_t l1 = (size_t)(t + i - w1);
    while (i < n && is_space(t[i]))
        i++;
    const char *w2 = t + i;
    while (i < n && !is_space(t[i]))
        i++;
    size_t l2 = (size_t)(t + i - w2);
    if (i != n || l1 >= RC_SECRET_MAX || l2 >= RC_SECRET_MAX)
        return -EINVAL;
    if (l2 == 0) {
        memcpy(pass, w1, l1);
        pass[l1] = '\0';
        return 0;
    }
    memcpy(user, w1, l1);
    user[l1] = '\0';
    memcpy(pass, w2, l2);
    pass[l2] = '\0';
    return 0;
}

static bool starts(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    return n >= w && memcmp(s, word, w) == 0;
}

static bool contains(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++)
        if (memcmp(s + i, word, w) == 0)
            return true;
    return false;
}

/* "<slot> <addr>" after "MOVED " or "ASK ". */
static int parse_redirect(const char *s, size_t n, unsigned *slot, struct rc_addr *to)
{
    size_t i = 0;
    unsigned v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && i < 6)
        v = v * 10 + (unsigned)(s[i++] - '0');
    if (i == 0 || i >= n || s[i] != ' ' || v >= RC_SLOTS)
        return -EINVAL;
    i++;
    size_t end = i;
    while (end < n && s[end] != ' ' && s[end] != '\r' && s[end] != '\n')
        end++;
    if (end != n || rc_addr_parse(s + i, end - i, to) != 0)
        return -EINVAL;
    *slot = v;
    return 0;
}

enum rc_err_kind rc_err_classify(const char *e, size_t n, unsigned *slot, struct rc_addr *to)
{
    unsigned slot_unused;
    struct rc_addr to_unused;
    if (!slot)
        slot = &slot_unused;
    if (!to)
        to = &to_unused;
    if (starts(e, n, "MOVED "))
        return parse_redirect(e + 6, n - 6, slot, to) == 0 ? RC_ERR_MOVED : RC_ERR_BADREDIRECT;
    if (starts(e, n, "ASK "))
        return parse_redirect(e + 4, n - 4, slot, to) == 0 ? RC_ERR_ASK : RC_ERR_BADREDIRECT;
    if (starts(e, n, "TRYAGAIN") || starts(e, n, "CLUSTERDOWN") || starts(e, n, "LOADING") ||
        starts(e, n, "MASTERDOWN"))
        return RC_ERR_RETRY;
    if (starts(e, n, "READONLY"))
        return RC_ERR_READONLY;
    if (starts(e, n, "NOAUTH") || starts(e, n, "WRONGPASS") || contains(e, n, "invalid password") ||
        contains(e, n, "invalid username-password"))
        return RC_ERR_AUTH;
    if (contains(e, n, "cluster support disabled"))
        return RC_ERR_NOCLUSTER;
    return RC_ERR_OTHER;
}
