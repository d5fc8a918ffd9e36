/*
 * fuzz_index.c — the SSD index's record decoding (store/ssd_index_open.c,
 * ssd_index_lmdb.h): an LMDB index is made from the input's records (any
 * key and value bytes, a version record of either entry version, none, or
 * any bytes), then opened as kvtier inspect and fsck open it
 * (kvt_index_open_readonly) and as the engine does (kvt_index_open with
 * persist, which drops other fingerprints, upgrades version 1 entries by CRC
 * composition and wipes a damaged index).
 *
 * Input (little-endian): version kind (u8: 0 version 2, 1 version 1, 2 no
 * record, 3 the record's 16 bytes follow), the engine's fingerprint (u64),
 * then records: key length (u8), value length (u8), key, value.
 *
 * Rules, against a model of what was written:
 * - the read-only open fails (KVT_ECORRUPT, with a message) exactly when
 *   the version record is not version 2's, or any entry is not a 16-byte
 *   key and a 48-byte version 2 value; an empty index without a record
 *   opens; otherwise every entry reads back as written;
 * - the engine's open always succeeds (damage is wiped with a message):
 *   wiped exactly when the index is damaged for it (as above, version 1
 *   accepted); else it keeps exactly the entries of its fingerprint, as
 *   written, a version 1 entry's CRC rewritten to
 *   combine(bind(key, fingerprint, generation), crc, stored_len).
 * LMDB's own page format is not fuzzed here: the index file is LMDB's,
 * written by LMDB.
 */
#include <endian.h>
#include <lmdb.h>
#include <sys/stat.h>

#include "base/base.h"
#include "io/codec.h"
#include "tests/fuzz/fuzz.h"
#include "store/ssd_index.h"

#define MAX_RECS 64

struct rec {
    uint8_t klen, vlen;
    uint8_t key[255], val[255];
    bool dead;          /* overwritten by a later record of the same key */
};

struct model {
    uint8_t kind;
    uint8_t version[16];
    uint64_t fp;
    struct rec rec[MAX_RECS];
    size_t n;
};

static char spill[300], ixdir[320];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    snprintf(spill, sizeof spill, "%s/spill", fuzz_dir());
    snprintf(ixdir, sizeof ixdir, "%s/index", spill);
    fuzz_check(mkdir(spill, 0700) == 0, "cannot make the scratch spill directory");
    return 0;
}

static void read_model(struct fuzz_in *in, struct model *m)
{
    m->kind = fuzz_u8(in) % 4;
    if (m->kind == 3)
        fuzz_take(in, m->version, sizeof m->version);
    m->fp = fuzz_u64(in);
    for (m->n = 0; m->n < MAX_RECS && in->n >= 2; m->n++) {
        struct rec *r = &m->rec[m->n];
        r->klen = fuzz_u8(in);
        r->vlen = fuzz_u8(in);
        r->dead = false;
        fuzz_take(in, r->key, r->klen);
        fuzz_take(in, r->val, r->vlen);
    }
}

static void version_bytes(unsigned entry_version, uint8_t out[16])
{
    uint32_t v[4] = { 1, 1, sizeof(struct kvt_ssd_entry), entry_version }; /* format, key layout */
    memcpy(out, v, 16);
}

static void clean(void)
{
    static const char *const names[] = { "index/data.mdb", "index/lock.mdb", "index", "LOCK" };
    fuzz_unlink(spill, names, 4);
}

/* Writes the model with LMDB itself, as an older or damaged kvtier would
 * have left it. Records LMDB refuses (an empty key) are marked dead. */
static void write_index(struct model *m)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, pages;
    fuzz_check(mkdir(ixdir, 0700) == 0, "mkdir index");
    fuzz_check(mdb_env_create(&env) == 0, "mdb_env_create");
    mdb_env_set_maxdbs(env, 2);
    mdb_env_set_mapsize(env, 1 << 20);
    fuzz_check(mdb_env_open(env, ixdir, MDB_NOLOCK | MDB_NOSYNC, 0600) == 0, "mdb_env_open");
    fuzz_check(mdb_txn_begin(env, NULL, 0, &txn) == 0, "mdb_txn_begin");
    fuzz_check(mdb_dbi_open(txn, "meta", MDB_CREATE, &meta) == 0 &&
                   mdb_dbi_open(txn, "pages", MDB_CREATE, &pages) == 0,
               "mdb_dbi_open");
    if (m->kind != 2) {
        if (m->kind < 2)
            version_bytes(m->kind == 0 ? KVT_SSD_ENTRY_VERSION : 1, m->version);
        MDB_val k = { 7, "version" }, v = { 16, m->version };
        fuzz_check(mdb_put(txn, meta, &k, &v, 0) == 0, "put version");
    }
    for (size_t i = 0; i < m->n; i++) {
        struct rec *r = &m->rec[i];
        MDB_val k = { r->klen, r->key }, v = { r->vlen, r->val };
        if (mdb_put(txn, pages, &k, &v, 0) != 0) {
            r->dead = true;
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (m->rec[j].klen == r->klen && !memcmp(m->rec[j].key, r->key, r->klen))
                m->rec[j].dead = true;
    }
    fuzz_check(mdb_txn_commit(txn) == 0, "mdb_txn_commit");
    mdb_env_close(env);
}

static kvt_key key_of(const struct rec *r)
{
    uint64_t id;
    uint32_t layer, index;
    memcpy(&id, r->key, 8);
    memcpy(&layer, r->key + 8, 4);
    memcpy(&index, r->key + 12, 4);
    return (kvt_key){ be64toh(id), be32toh(layer), be32toh(index) };
}

static struct kvt_ssd_entry entry_of(const struct rec *r)
{
    struct kvt_ssd_entry e;
    memcpy(&e, r->val, sizeof e);
    return e;
}

static size_t live(const struct model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += !m->rec[i].dead;
    return n;
}

/* Whether the index is damaged for an open that reads entries of
 * version ev: its version record, or one entry. */
static bool damaged(const struct model *m, unsigned ev)
{
    uint8_t want[16];
    version_bytes(ev, want);
    if (m->kind == 2)
        return live(m) > 0;
    if (memcmp(m->version, want, 16))
        return true;
    for (size_t i = 0; i < m->n; i++) {
        const struct rec *r = &m->rec[i];
        if (!r->dead && (r->klen != 16 || r->vlen != sizeof(struct kvt_ssd_entry) ||
                         entry_of(r).version != ev))
            return true;
    }
    return false;
}

static bool is_v1(const struct model *m)
{
    uint8_t v1[16];
    version_bytes(1, v1);
    return m->kind != 2 && !memcmp(m->version, v1, 16);
}

struct seen {
    const struct model *m;
    bool engine;
    size_t n;
};

/* Each entry read back is a live record of the model, as written (the
 * engine: of its fingerprint, a version 1 entry upgraded). */
static int check_entry(void *ctx, const kvt_key *k, const struct kvt_ssd_entry *v)
{
    struct seen *s = ctx;
    const struct rec *r = NULL;
    for (size_t i = 0; i < s->m->n && !r; i++) {
        kvt_key rk = key_of(&s->m->rec[i]);
        if (!s->m->rec[i].dead && rk.id == k->id && rk.layer == k->layer && rk.index == k->index)
            r = &s->m->rec[i];
    }
    fuzz_check(r != NULL, "an entry read back was written");
    struct kvt_ssd_entry want = entry_of(r);
    if (s->engine && is_v1(s->m)) {
        want.version = KVT_SSD_ENTRY_VERSION;
        want.crc = kvt_crc32c_combine(kvt_ssd_bind(k, want.fingerprint, want.generation), want.crc,
                                      want.stored_len);
    }
    fuzz_check(!memcmp(&want, v, sizeof want), "an entry reads back as written (or upgraded)");
    fuzz_check(!s->engine || v->fingerprint == s->m->fp, "the engine keeps its fingerprint only");
    s->n++;
    return 0;
}

static void check_readonly(const struct model *m)
{
    struct kvt_index *ix = NULL;
    kvt_clear_error();
    int r = kvt_index_open_readonly(spill, &ix);
    bool bad = damaged(m, KVT_SSD_ENTRY_VERSION) && !(m->kind == 2 && live(m) == 0);
    fuzz_check(r == 0 || r == KVT_ECORRUPT, "inspect's open: read or damaged");
    fuzz_check((r == KVT_ECORRUPT) == bad, "damaged exactly when a record or entry is bad");
    if (r) {
        fuzz_check(strstr(kvt_last_error(), "data.mdb") != NULL, "the message names the file");
        return;
    }
    struct seen s = { m, false, 0 };
    fuzz_check(kvt_index_foreach(ix, check_entry, &s) == 0 && s.n == live(m) &&
                   kvt_index_count(ix) == live(m),
               "every entry written is read back");
    kvt_index_close(ix);
}

static void check_engine(const struct model *m)
{
    struct kvt_index *ix = NULL;
    struct kvt_index_open_info info;
    bool bad = damaged(m, is_v1(m) ? 1 : KVT_SSD_ENTRY_VERSION) && !(m->kind == 2 && !live(m));
    int r = kvt_index_open(spill, true, m->fp, 0, &ix, &info);
    fuzz_check(r == 0, "the engine's open never fails on damage");
    fuzz_check(info.wiped == bad, "wiped exactly when damaged");
    fuzz_check(!bad || strstr(info.message, "damaged") != NULL, "a wipe says why");
    size_t mine = 0;
    for (size_t i = 0; !bad && i < m->n; i++)
        mine += !m->rec[i].dead && entry_of(&m->rec[i]).fingerprint == m->fp;
    struct seen s = { m, true, 0 };
    fuzz_check(kvt_index_foreach(ix, check_entry, &s) == 0 && s.n == mine && info.kept == mine,
               "the engine keeps the entries of its fingerprint");
    fuzz_check(bad || info.dropped_fingerprint == live(m) - mine, "and drops the others");
    kvt_index_close(ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct model m;
    struct fuzz_in in = { data, size };
    read_model(&in, &m);
    clean();
    write_index(&m);
    check_readonly(&m);
    check_engine(&m);
    clean();
    return 0;
}
