/* The catalog across opens: corrupt entries refused cleanly, key versions
 * that never repeat after a reopen, idempotent creates, and function
 * indexes checked against the registry. Real RocksDB in a temp dir, a
 * standalone runtime (blocking twins on the test thread). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/index.h"
#include "troupe/internal/tables.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "tsupport.h"

typedef struct cat_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_queues *qs; /* tcase "format" only */
    troupe_index_fns *fns;
    uint64_t reserve; /* troupe_tables_opts.version_reserve */
    char *dir;
} cat_fx;

static cat_fx fx;

/* Opens runtime, db, pipeline, catalog and tables; returns what
 * catalog_open or else tables_open says (on failure everything else is
 * closed again). */
static troupe_err
open_all(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    troupe_err e = troupe_catalog_open(&co, &fx.cat);
    troupe_tables_opts to = {
        .catalog = fx.cat, .commit = fx.commit, .fns = fx.fns};
    if (e == TROUPE_OK)
        e = troupe_tables_open(&to, &fx.tables);
    if (e != TROUPE_OK) {
        ck_assert_ptr_null(fx.tables);
        if (fx.cat != NULL) {
            ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
            troupe_catalog_destroy(fx.cat);
            fx.cat = NULL;
        }
        ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
        troupe_runtime_destroy(fx.rt);
        troupe_commit_destroy(fx.commit);
        ck_assert_ok(troupe_db_close(fx.db));
        fx.rt = NULL;
        fx.db = NULL;
        fx.commit = NULL;
    }
    return e;
}

static void
close_all(void)
{
    if (fx.tables == NULL)
        return;
    if (fx.qs != NULL) {
        ck_assert_ok(troupe_queues_stop_wait(fx.qs));
        troupe_queues_destroy(fx.qs);
        fx.qs = NULL;
    }
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_tables_destroy(fx.tables);
    fx.tables = NULL;
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    fx.cat = NULL;
    ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
    troupe_runtime_destroy(fx.rt);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
}

static void
setup(void)
{
    memset(&fx, 0, sizeof(fx));
    fx.dir = ts_tempdir("catalog");
    ck_assert_ok(troupe_index_fns_create(&fx.fns));
    ck_assert_ok(open_all());
}

static void
teardown(void)
{
    close_all();
    troupe_index_fns_destroy(fx.fns);
    ts_rmtree(fx.dir);
    free(fx.dir);
}

/* The tuple key (k1) or (k1, k2) into w (initialised here). */
static void
str_key(troupe_key_writer *w, const char *k1, const char *k2, const uint8_t **k,
        size_t *klen)
{
    troupe_key_writer_init(w);
    troupe_key_put_string(w, k1, strlen(k1));
    if (k2 != NULL)
        troupe_key_put_string(w, k2, strlen(k2));
    ck_assert_ok(troupe_key_writer_finish(w, k, klen));
}

/* Puts `val` (NULL: deletes) under the meta key (k1) or (k1, k2) with
 * the tables closed (the db is opened for it alone). */
static void
put_meta(const char *k1, const char *k2, const void *val, size_t vlen)
{
    troupe_db *db = NULL;
    troupe_cf *meta = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf(db, "meta", &meta));
    troupe_key_writer w;
    const uint8_t *k;
    size_t klen;
    str_key(&w, k1, k2, &k, &klen);
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    if (val != NULL)
        ck_assert_ok(troupe_batch_put(b, meta, k, klen, val, vlen));
    else
        ck_assert_ok(troupe_batch_delete(b, meta, k, klen));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    ck_assert_ok(troupe_db_close(db));
}

/* Puts `val` under meta key ("table", name), the tables closed. */
static void
put_entry(const char *name, const void *val, size_t vlen)
{
    put_meta("table", name, val, vlen);
}

/* ---- corrupt catalog entries -------------------------------------------- */

enum { BAD_KEY_INT, BAD_KEY_LONG, DUP_NAME, DUP_INDEXES, DUP_ID, BAD_DEF_DUP };

/* A catalog entry for table "t" (id 1) spoiled in way `how`. */
static void
bad_entry(int how, troupe_packer *p)
{
    static const char long_key[] = "a-key-of-sixty-five-bytes-which-is-one-"
                                   "more-than-a-catalog-key-may";
    troupe_pack_init(p);
    bool extra = how >= BAD_KEY_INT && how <= DUP_ID;
    troupe_pack_map(p, extra ? 5 : 4);
    if (how == BAD_KEY_INT) {
        troupe_pack_uint(p, 7); /* a key that is no string */
        troupe_pack_uint(p, 1);
    } else if (how == BAD_KEY_LONG) {
        troupe_pack_str(p, long_key, strlen(long_key));
        troupe_pack_uint(p, 1);
    } else if (how == DUP_NAME) {
        troupe_pack_cstr(p, "name");
        troupe_pack_cstr(p, "u");
    } else if (how == DUP_INDEXES) {
        troupe_pack_cstr(p, "indexes");
        troupe_pack_array(p, 0);
    } else if (how == DUP_ID) {
        troupe_pack_cstr(p, "id");
        troupe_pack_uint(p, 2);
    }
    troupe_pack_cstr(p, "id");
    troupe_pack_uint(p, 1);
    troupe_pack_cstr(p, "name");
    troupe_pack_cstr(p, "t");
    troupe_pack_cstr(p, "version");
    troupe_pack_uint(p, 1);
    troupe_pack_cstr(p, "indexes");
    if (how != BAD_DEF_DUP) {
        troupe_pack_array(p, 0);
        return;
    }
    /* one index whose stored definition repeats "name" */
    troupe_pack_array(p, 1);
    troupe_pack_map(p, 7);
    troupe_pack_cstr(p, "id");
    troupe_pack_uint(p, 2);
    troupe_pack_cstr(p, "name");
    troupe_pack_cstr(p, "ix");
    troupe_pack_cstr(p, "unique");
    troupe_pack_bool(p, false);
    troupe_pack_cstr(p, "name");
    troupe_pack_cstr(p, "iy");
    troupe_pack_cstr(p, "fields");
    troupe_pack_array(p, 1);
    troupe_pack_array(p, 2);
    troupe_pack_cstr(p, "a");
    troupe_pack_cstr(p, "string");
    troupe_pack_cstr(p, "cond");
    troupe_pack_nil(p);
    troupe_pack_cstr(p, "fn");
    troupe_pack_nil(p);
}

/* A corrupt catalog entry (a key that is not a short string, a repeated
 * key, an index definition repeating a key) fails the open with ECORRUPT:
 * nothing is read from a key that failed to decode, and (under ASan) what
 * was decoded before the failure is freed. */
START_TEST(test_catalog_corrupt_entry_refused_at_open)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "t", NULL, 0));
    close_all();
    troupe_packer p;
    bad_entry(_i, &p);
    size_t len;
    const void *v = troupe_pack_data(&p, &len);
    ck_assert_ok(p.err);
    put_entry("t", v, len);
    troupe_pack_fini(&p);
    ck_assert_err(open_all(), TROUPE_ECORRUPT);
    /* a good entry again: the table is back */
    bad_entry(-1, &p);
    v = troupe_pack_data(&p, &len);
    put_entry("t", v, len);
    troupe_pack_fini(&p);
    ck_assert_ok(open_all());
    char **names = NULL;
    size_t n = 0;
    ck_assert_ok(troupe_tables_list(fx.tables, &names, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(names[0], "t");
    troupe_free(names);
}
END_TEST

/* Entries that decode but do not describe a table a create could have
 * made: a name with a NUL inside or an empty one, a name other than the
 * one its key holds, two indexes of one id or of one name, an index id
 * the id counter never handed out. Each fails the open with ECORRUPT (each
 * used to load: cut short, under the wrong name, or sharing a family). */
enum {
    INC_NAME_NUL,
    INC_NAME_EMPTY,
    INC_NAME_OTHER,
    INC_INDEX_SAME_ID,
    INC_INDEX_SAME_NAME,
    INC_INDEX_ID_PAST_SEQ,
    INC_N
};

static void
pack_def(troupe_packer *p, const char *name, uint64_t id)
{
    troupe_index_field f = {"a", TROUPE_FIELD_STRING};
    troupe_index_spec s = {.name = name, .fields = &f, .n_fields = 1};
    troupe_index_def *d = NULL;
    ck_assert_ok(troupe_index_def_create(&s, id, &d));
    void *b = NULL;
    size_t n = 0;
    ck_assert_ok(troupe_index_def_pack(d, &b, &n));
    troupe_pack_raw(p, b, n);
    troupe_free(b);
    troupe_index_def_destroy(d);
}

START_TEST(test_catalog_inconsistent_entry_refused_at_open)
{
    /* table "t" is id 1, its indexes ix and iy ids 2 and 3 */
    troupe_index_field f = {"a", TROUPE_FIELD_STRING};
    troupe_index_spec ix[2] = {{.name = "ix", .fields = &f, .n_fields = 1},
                               {.name = "iy", .fields = &f, .n_fields = 1}};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "t", ix, 2));
    close_all();
    if (_i == INC_INDEX_ID_PAST_SEQ) {
        /* the family exists, so only the id rule can refuse it */
        troupe_db *db = NULL;
        ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
        ck_assert_ok(troupe_db_cf_create(db, "x.99", NULL));
        ck_assert_ok(troupe_db_close(db));
    }
    for (int good = 0; good < 2; good++) {
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 4);
        troupe_pack_cstr(&p, "id");
        troupe_pack_uint(&p, 1);
        troupe_pack_cstr(&p, "name");
        if (good || _i >= INC_INDEX_SAME_ID)
            troupe_pack_cstr(&p, "t");
        else if (_i == INC_NAME_NUL)
            troupe_pack_str(&p, "t\0x", 3);
        else if (_i == INC_NAME_EMPTY)
            troupe_pack_str(&p, "", 0);
        else
            troupe_pack_cstr(&p, "u");
        troupe_pack_cstr(&p, "version");
        troupe_pack_uint(&p, 1);
        troupe_pack_cstr(&p, "indexes");
        troupe_pack_array(&p, 2);
        pack_def(&p, "ix", 2);
        if (good || _i < INC_INDEX_SAME_ID)
            pack_def(&p, "iy", 3);
        else if (_i == INC_INDEX_SAME_ID)
            pack_def(&p, "iy", 2);
        else if (_i == INC_INDEX_SAME_NAME)
            pack_def(&p, "ix", 3);
        else
            pack_def(&p, "iy", 99);
        size_t len;
        const void *v = troupe_pack_data(&p, &len);
        ck_assert_ok(p.err);
        put_entry("t", v, len);
        troupe_pack_fini(&p);
        if (!good) {
            ck_assert_err(open_all(), TROUPE_ECORRUPT);
            continue;
        }
        /* the good entry again: the table is back, with both indexes */
        ck_assert_ok(open_all());
        char **names = NULL;
        size_t n = 0;
        ck_assert_ok(troupe_tables_list(fx.tables, &names, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(names[0], "t");
        troupe_free(names);
        bool ready = false;
        ck_assert_ok(troupe_tables_index_state(fx.tables, "t", "iy", &ready));
        ck_assert(ready);
    }
}
END_TEST

/* ---- key versions across opens ----------------------------------------- */

/* {"v": v} */
static unsigned char vbuf[16];

static const void *
docv(int64_t v, size_t *len)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "v");
    troupe_pack_int(&p, v);
    const void *d = troupe_pack_data(&p, len);
    ck_assert_uint_le(*len, sizeof(vbuf));
    memcpy(vbuf, d, *len);
    troupe_pack_fini(&p);
    return vbuf;
}

static void
put(const char *t, const char *k, int64_t v)
{
    size_t len;
    const void *d = docv(v, &len);
    ck_assert_ok(
        troupe_table_upsert_wait(fx.tables, t, k, strlen(k), d, len, NULL));
}

static int64_t
stored(const char *t, const char *k)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, t, k, strlen(k), &rows);
    if (e == TROUPE_ENOENT)
        return -1;
    ck_assert_ok(e);
    troupe_reader r;
    uint32_t n = 0;
    const char *f;
    size_t fl;
    int64_t v = -1;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map(&r, &n);
    troupe_read_str(&r, 8, &f, &fl);
    troupe_read_int(&r, &v);
    ck_assert_ok(troupe_read_end(&r));
    troupe_rows_destroy(rows);
    return v;
}

typedef struct qv {
    troupe_err err;
    uint64_t ver;
} qv;

static bool
qver_settled(void *arg)
{
    qv *q = arg;
    const char *k = "k";
    troupe_rows *rows = NULL;
    q->err =
        troupe_txn_query_version_wait(fx.tables, "a", k, 1, &rows, &q->ver);
    troupe_rows_destroy(rows);
    /* EBUSY: the counter met the floor before its background write
     * landed (a tiny reserve makes that likely): ask again */
    return q->err != TROUPE_EBUSY;
}

/* The version of "k" in table "a", asked until it is not EBUSY. */
static uint64_t
qver_k(void)
{
    qv q = {0};
    ck_assert(ts_wait_until(qver_settled, &q, 10000));
    ck_assert_ok(q.err);
    ck_assert_uint_gt(q.ver, 0);
    return q.ver;
}

/* A versioned commit of "k" = v in table "a" read at version `ver`. */
static troupe_err
vcommit_k(uint64_t ver, int64_t v, uint64_t *receipt)
{
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "k", 1, ver));
    size_t len;
    const void *d = docv(v, &len);
    ck_assert_ok(troupe_txn_upsert(tx, "a", "k", 1, d, len, NULL));
    troupe_err e = troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT);
    if (e == TROUPE_OK && receipt != NULL) {
        const troupe_txn_receipt *r;
        size_t n = 0;
        ck_assert_ok(troupe_txn_receipts(tx, &r, &n));
        ck_assert_uint_eq(n, 1);
        *receipt = r[0].version;
    }
    troupe_txn_destroy(tx);
    return e;
}

/* A version cached before a restart never names a newer value after it:
 * the stale versioned commit conflicts (before the floor was stored, the
 * counter restarted and the commit below overwrote the newer value: a
 * lost update), and every version handed out after the reopen is greater
 * than every version handed out before. */
START_TEST(test_versions_never_repeat_across_reopen)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "k", 1);
    uint64_t cached = qver_k();
    uint64_t max_before = cached, r = 0;
    ck_assert_ok(vcommit_k(cached, 2, &r));
    max_before = r > max_before ? r : max_before;
    cached = qver_k();
    ck_assert_uint_eq(cached, r);
    close_all();
    ck_assert_ok(open_all());
    /* after the restart others write k (as many writes as it takes a
     * counter that starts afresh to reach the cached version again) */
    for (uint64_t i = 1; i < cached; i++) {
        char k[32];
        snprintf(k, sizeof(k), "filler%llu", (unsigned long long)i);
        put("a", k, 0);
    }
    put("a", "k", 3);
    /* the client that cached its version before the restart */
    ck_assert_err(vcommit_k(cached, 4, NULL), TROUPE_ECONFLICT);
    ck_assert_int_eq(stored("a", "k"), 3);
    uint64_t now = qver_k();
    ck_assert_uint_gt(now, max_before);
    ck_assert_ok(vcommit_k(now, 5, &r));
    ck_assert_uint_gt(r, max_before);
    ck_assert_int_eq(stored("a", "k"), 5);
}
END_TEST

/* The value stored in meta under the one-string tuple key (name), read
 * with the tables open: troupe_free it. */
static void *
meta_value(const char *name, size_t *vlen)
{
    troupe_cf *meta = NULL;
    ck_assert_ok(troupe_db_cf(fx.db, "meta", &meta));
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, name, strlen(name));
    const uint8_t *k;
    size_t klen;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &klen));
    void *v = NULL;
    ck_assert_ok(troupe_db_get(fx.db, meta, NULL, k, klen, &v, vlen));
    troupe_key_writer_fini(&w);
    return v;
}

/* The floor stored in meta ("versions"), read with the tables open. */
static uint64_t
stored_floor(void)
{
    size_t vlen = 0;
    void *v = meta_value("versions", &vlen);
    troupe_reader r;
    uint64_t ver = 0, f = 0;
    troupe_reader_init(&r, v, vlen);
    troupe_read_array_n(&r, 2);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, &f);
    ck_assert_ok(troupe_read_end(&r));
    ck_assert_uint_eq(ver, 1);
    troupe_free(v);
    return f;
}

/* With a reserve of a few versions the floor moves all the time, in the
 * background and (when that is behind) on the commit's writer thread:
 * every version a client sees stays below the floor on disk, and a reopen
 * starts above all of them. */
START_TEST(test_versions_stay_below_the_stored_floor)
{
    close_all();
    fx.reserve = (uint64_t)_i + 1; /* 1..4 */
    ck_assert_ok(open_all());
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    uint64_t seen = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 40; i++) {
            put("a", "k", i);
            uint64_t v = qver_k();
            ck_assert_uint_gt(v, seen);
            ck_assert_uint_lt(v, stored_floor());
            uint64_t r = 0;
            ck_assert_ok(vcommit_k(v, i, &r));
            ck_assert_uint_gt(r, v);
            ck_assert_uint_lt(r, stored_floor());
            seen = r;
        }
        uint64_t floor = stored_floor();
        close_all();
        ck_assert_ok(open_all());
        ck_assert_uint_gt(stored_floor(), floor);
        ck_assert_uint_gt(qver_k(), seen);
    }
}
END_TEST

/* A database written before floors existed has no ("versions") key: it
 * opens and gets one. A malformed floor is ECORRUPT. */
START_TEST(test_versions_floor_absent_opens_malformed_refused)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "k", 1);
    close_all();
    put_meta("versions", NULL, NULL, 0); /* as before floors existed */
    ck_assert_ok(open_all());
    ck_assert_int_eq(stored("a", "k"), 1);
    ck_assert_uint_gt(stored_floor(), 0);
    ck_assert_uint_gt(qver_k(), 0);
    close_all();
    static const unsigned char bad[][4] = {
        {0x92, 0x02, 0x05}, /* [2, 5]: unknown format */
        {0x91, 0x01},       /* [1] */
        {0x92, 0x01, 0xff}, /* [1, -1] */
        {0x05},             /* 5 */
    };
    static const size_t badlen[] = {3, 2, 3, 1};
    for (size_t i = 0; i < 4; i++) {
        put_meta("versions", NULL, bad[i], badlen[i]);
        ck_assert_err(open_all(), TROUPE_ECORRUPT);
    }
    /* the fixture's teardown finds the tables closed */
}
END_TEST

/* ---- creates that find what they would create ------------------------- */

/* The raw ("seq") counter value in meta: a create that writes anything
 * stores it first. */
static uint64_t
stored_seq(void)
{
    size_t vlen = 0;
    void *v = meta_value("seq", &vlen);
    troupe_reader r;
    uint64_t seq = 0;
    troupe_reader_init(&r, v, vlen);
    troupe_read_uint(&r, &seq);
    ck_assert_ok(troupe_read_end(&r));
    troupe_free(v);
    return seq;
}

static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};
static const troupe_index_field city_f = {"city", TROUPE_FIELD_STRING};
static const troupe_index_field age_f = {"age", TROUPE_FIELD_INT};

/* The last catalog callback's error; -1 until it fired. */
static _Atomic int ddl_seen;

static void
on_ddl(troupe_tables *t, troupe_err err, void *arg)
{
    atomic_store((_Atomic int *)arg, (int)err);
}

static bool
ddl_called(void *arg)
{
    return atomic_load((_Atomic int *)arg) != -1;
}

/* The asynchronous create, waited for. */
static troupe_err
create_async(const char *name, const troupe_index_spec *ix, size_t n)
{
    atomic_store(&ddl_seen, -1);
    troupe_err e =
        troupe_tables_create(fx.tables, name, ix, n, on_ddl, (void *)&ddl_seen);
    if (e != TROUPE_OK)
        return e;
    ck_assert(ts_wait_until(ddl_called, (void *)&ddl_seen, 10000));
    return (troupe_err)atomic_load(&ddl_seen);
}

/* Creating a table again with its very spec (indexes in any order) is OK
 * and writes nothing; with another spec it is EEXIST and changes
 * nothing. Adding an index again likewise. */
START_TEST(test_create_again_same_spec_ok_other_eexist)
{
    troupe_index_spec two[2] = {
        {.name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1},
        {.name = "by_city", .fields = &city_f, .n_fields = 1}};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", two, 2));
    put("u", "a", 1);
    uint64_t seq = stored_seq();
    troupe_index_spec swapped[2] = {two[1], two[0]};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", two, 2));
    ck_assert_ok(create_async("u", swapped, 2));
    ck_assert_uint_eq(stored_seq(), seq); /* nothing written */
    ck_assert_int_eq(stored("u", "a"), 1);
    /* other specs: fewer, more, another type, not unique, another cond */
    troupe_index_spec other[2] = {two[0], two[1]};
    ck_assert_err(troupe_tables_create_wait(fx.tables, "u", two, 1),
                  TROUPE_EEXIST);
    ck_assert_err(troupe_tables_create_wait(fx.tables, "u", NULL, 0),
                  TROUPE_EEXIST);
    other[1].fields = &age_f;
    other[1].name = "by_city";
    ck_assert_err(create_async("u", other, 2), TROUPE_EEXIST);
    other[1] = two[1];
    other[0].unique = false;
    ck_assert_err(troupe_tables_create_wait(fx.tables, "u", other, 2),
                  TROUPE_EEXIST);
    other[0] = two[0];
    other[1].cond =
        (troupe_index_cond){.op = TROUPE_COND_EXISTS, .path = "city"};
    ck_assert_err(troupe_tables_create_wait(fx.tables, "u", other, 2),
                  TROUPE_EEXIST);
    ck_assert_uint_eq(stored_seq(), seq);
    close_all(); /* what is stored is still the first spec */
    ck_assert_ok(open_all());
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", swapped, 2));
    ck_assert_int_eq(stored("u", "a"), 1);
    /* add_index: the same index again is OK, another spec EEXIST */
    troupe_index_spec age = {.name = "by_age", .fields = &age_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_add_index_wait(fx.tables, "u", &age));
    seq = stored_seq();
    ck_assert_ok(troupe_tables_add_index_wait(fx.tables, "u", &age));
    ck_assert_uint_eq(stored_seq(), seq);
    age.unique = true;
    ck_assert_err(troupe_tables_add_index_wait(fx.tables, "u", &age),
                  TROUPE_EEXIST);
    /* the table with three indexes now: the create with two differs */
    ck_assert_err(troupe_tables_create_wait(fx.tables, "u", two, 2),
                  TROUPE_EEXIST);
}
END_TEST

/* {"v": "<tag>"}: a function index emitting v. */
static troupe_err
fn_v(void *ctx, const void *doc, size_t doc_len, const void *pk, size_t pk_len,
     troupe_index_emit_fn emit, void *emit_ctx)
{
    (void)ctx;
    (void)pk;
    (void)pk_len;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "x", 1);
    const uint8_t *k;
    size_t kl;
    troupe_err e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = emit(emit_ctx, k, kl, NULL, 0);
    troupe_key_writer_fini(&w);
    (void)doc;
    (void)doc_len;
    return e;
}

/* A function index must name a registered function: create and add_index
 * refuse one that does not (EINVAL, nothing written). A table already on
 * disk whose function this process did not register opens; it refuses
 * inserts, updates and upserts with ESTATE (deletes and reads work)
 * until that index is dropped. */
START_TEST(test_function_index_must_be_registered)
{
    troupe_index_spec fx_ix = {.name = "byfn", .fn_name = "f"};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "t", NULL, 0));
    uint64_t seq = stored_seq();
    ck_assert_err(troupe_tables_create_wait(fx.tables, "u", &fx_ix, 1),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_create(fx.tables, "u", &fx_ix, 1, on_ddl,
                                       (void *)&ddl_seen),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_add_index_wait(fx.tables, "t", &fx_ix),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_add_index(fx.tables, "t", &fx_ix, on_ddl,
                                          (void *)&ddl_seen),
                  TROUPE_EINVAL);
    ck_assert_uint_eq(stored_seq(), seq); /* nothing written */
    char **names = NULL;
    size_t n = 0;
    ck_assert_ok(troupe_tables_list(fx.tables, &names, &n));
    ck_assert_uint_eq(n, 1);
    troupe_free(names);
    ck_assert_ok(troupe_index_register_fn(fx.fns, "f", fn_v, NULL));
    ck_assert_ok(troupe_tables_add_index_wait(fx.tables, "t", &fx_ix));
    put("t", "a", 1);
    put("t", "b", 2);
    close_all();
    /* the next process forgot to register "f" */
    troupe_index_fns_destroy(fx.fns);
    ck_assert_ok(troupe_index_fns_create(&fx.fns));
    ck_assert_ok(open_all());
    ck_assert_int_eq(stored("t", "a"), 1);
    size_t len;
    const void *d = docv(3, &len);
    ck_assert_err(
        troupe_table_upsert_wait(fx.tables, "t", "a", 1, d, len, NULL),
        TROUPE_ESTATE);
    ck_assert_err(
        troupe_table_insert_wait(fx.tables, "t", "c", 1, d, len, NULL),
        TROUPE_ESTATE);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_upsert(tx, "t", "c", 1, d, len, NULL));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ESTATE);
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_table_delete_wait(fx.tables, "t", "b", 1, NULL));
    ck_assert_int_eq(stored("t", "b"), -1);
    ck_assert_int_eq(stored("t", "c"), -1);
    ck_assert_ok(troupe_tables_drop_index_wait(fx.tables, "t", "byfn"));
    put("t", "a", 4);
    ck_assert_int_eq(stored("t", "a"), 4);
}
END_TEST

/* ---- cursors name what handed them out --------------------------------- */

static troupe_err
scan_after(const char *t, const void *after, size_t alen, troupe_rows **rows)
{
    troupe_scan_opts so = {.after = after, .after_len = alen, .limit = 2};
    return troupe_table_scan_wait(fx.tables, t, &so, rows);
}

/* The packed [s]. */
static unsigned char vals[32];
static size_t vals_len;

static troupe_index_query
qval(const char *s)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_cstr(&p, s);
    const void *d = troupe_pack_data(&p, &vals_len);
    memcpy(vals, d, vals_len);
    troupe_pack_fini(&p);
    return (troupe_index_query){
        .values = vals, .values_len = vals_len, .limit = 1};
}

/* Copies a cursor out of what is about to be destroyed. */
typedef struct curbuf {
    uint8_t b[64];
    size_t n;
} curbuf;

static curbuf
keep(const uint8_t *c, size_t n)
{
    curbuf k = {.n = n};
    ck_assert_uint_le(n, sizeof(k.b));
    memcpy(k.b, c, n);
    return k;
}

/* A cursor handed out by a table scan, a transaction scan or an index
 * query names its table (or index, or AND's table): another table, index
 * or kind of page refuses it with ERANGE (before this, cursors were raw
 * keys and another table's was read as a position: a page of the wrong
 * rows); what it came from takes it, and a table dropped and created
 * again under the same name is another table. */
START_TEST(test_cursor_of_another_object_is_erange)
{
    static const troupe_index_field v_f = {.path = "v",
                                           .type = TROUPE_FIELD_STRING};
    troupe_index_spec ix[2] = {{.name = "ix", .fields = &v_f, .n_fields = 1},
                               {.name = "iy", .fields = &v_f, .n_fields = 1}};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", ix, 2));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", ix, 2));
    const char *keys[] = {"k1", "k2", "k3", "k4"};
    for (int i = 0; i < 4; i++) {
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 1);
        troupe_pack_cstr(&p, "v");
        troupe_pack_cstr(&p, "x");
        size_t len;
        const void *d = troupe_pack_data(&p, &len);
        ck_assert_ok(
            troupe_table_upsert_wait(fx.tables, "a", keys[i], 2, d, len, NULL));
        ck_assert_ok(
            troupe_table_upsert_wait(fx.tables, "b", keys[i], 2, d, len, NULL));
        troupe_pack_fini(&p);
    }
    /* table scans */
    troupe_rows *rows = NULL;
    ck_assert_ok(scan_after("a", NULL, 0, &rows));
    curbuf ca = keep(rows->cursor, rows->cursor_len);
    troupe_rows_destroy(rows);
    ck_assert_err(scan_after("b", ca.b, ca.n, &rows), TROUPE_ERANGE);
    ck_assert_ptr_null(rows);
    ck_assert_ok(scan_after("a", ca.b, ca.n, &rows));
    ck_assert_uint_eq(rows->n, 2);
    ck_assert_mem_eq(rows->rows[0].key, "k3", 2);
    troupe_rows_destroy(rows);
    /* a raw key is no cursor */
    ck_assert_err(scan_after("a", "k2", 2, &rows), TROUPE_ERANGE);
    /* a transaction's scan: the same table's cursors, both ways */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    troupe_scan_opts so = {.after = ca.b, .after_len = ca.n, .limit = 1};
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    ck_assert_mem_eq(rows->rows[0].key, "k3", 2);
    curbuf ta = keep(rows->cursor, rows->cursor_len);
    troupe_rows_destroy(rows);
    so.after = ta.b;
    so.after_len = ta.n;
    ck_assert_err(troupe_txn_scan_wait(tx, "b", &so, &rows), TROUPE_ERANGE);
    ck_assert_ok(troupe_txn_rollback(tx));
    troupe_txn_destroy(tx);
    ck_assert_err(scan_after("b", ta.b, ta.n, &rows), TROUPE_ERANGE);
    ck_assert_ok(scan_after("a", ta.b, ta.n, &rows));
    ck_assert_mem_eq(rows->rows[0].key, "k4", 2);
    troupe_rows_destroy(rows);
    /* index queries: another index, of this table or another, refuses */
    troupe_index_query q = qval("x");
    troupe_index_result *r = NULL;
    ck_assert_ok(troupe_tables_query_wait(fx.tables, "a", "ix", &q, &r));
    curbuf xa = keep(r->cursor, r->cursor_len);
    troupe_index_result_destroy(r);
    q.after = xa.b;
    q.after_len = xa.n;
    ck_assert_err(troupe_tables_query_wait(fx.tables, "b", "ix", &q, &r),
                  TROUPE_ERANGE);
    ck_assert_ptr_null(r);
    ck_assert_err(troupe_tables_query_wait(fx.tables, "a", "iy", &q, &r),
                  TROUPE_ERANGE);
    ck_assert_ok(troupe_tables_query_wait(fx.tables, "a", "ix", &q, &r));
    ck_assert_uint_eq(r->n, 1);
    ck_assert_mem_eq(r->hits[0].pk, "k2", 2);
    troupe_index_result_destroy(r);
    /* through the index actor too */
    ck_assert_err(scan_after("a", xa.b, xa.n, &rows), TROUPE_ERANGE);
    /* AND results name their table */
    troupe_index_query qa = qval("x");
    ck_assert_ok(troupe_tables_query_and_wait(fx.tables, "a", "ix", &qa, "iy",
                                              &qa, NULL, 0, 1, &r));
    curbuf aa = keep(r->cursor, r->cursor_len);
    troupe_index_result_destroy(r);
    ck_assert_err(troupe_tables_query_and_wait(fx.tables, "b", "ix", &qa, "iy",
                                               &qa, aa.b, aa.n, 1, &r),
                  TROUPE_ERANGE);
    ck_assert_err(troupe_tables_query_and_wait(fx.tables, "a", "ix", &qa, "iy",
                                               &qa, xa.b, xa.n, 1, &r),
                  TROUPE_ERANGE);
    ck_assert_ok(troupe_tables_query_and_wait(fx.tables, "a", "ix", &qa, "iy",
                                              &qa, aa.b, aa.n, 1, &r));
    ck_assert_mem_eq(r->hits[0].pk, "k2", 2);
    troupe_index_result_destroy(r);
    /* dropped and created again: another table, its old cursors refused */
    ck_assert_ok(troupe_tables_drop_wait(fx.tables, "a"));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", ix, 2));
    ck_assert_err(scan_after("a", ca.b, ca.n, &rows), TROUPE_ERANGE);
}
END_TEST

/* ---- the catalog's format: a database written by format-1 code --------- */

/* What tests/actors/fixtures/catalog-v1.txt says the fixture holds. */
typedef struct v1_queue {
    char name[32];
    uint64_t id;
    uint32_t parts;
    long long retention;
    uint64_t pending, completed;
    long long due;
} v1_queue;

typedef struct v1_view {
    char table[32];
    uint64_t table_id;
    size_t rows;
    char index[2][32];
    uint64_t index_id[2];
    int unique[2];
    size_t nindex;
    uint64_t dropped_id;
    v1_queue q[2];
    size_t nq;
    uint64_t seq_meta, seq_queues;
    uint64_t max_id; /* of every kind */
} v1_view;

static v1_view v1;

static void
v1_read(void)
{
    memset(&v1, 0, sizeof(v1));
    FILE *f = fopen(TROUPE_FIXTURES_DIR "/catalog-v1.txt", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long a = 0, b = 0, c = 0;
        long long r = 0;
        unsigned p = 0;
        int u = 0;
        char n1[32], n2[32];
        if (line[0] == '#')
            continue;
        if (sscanf(line, "table %31s id %llu rows %llu", n1, &a, &b) == 3) {
            strcpy(v1.table, n1);
            v1.table_id = a;
            v1.rows = (size_t)b;
        } else if (sscanf(line, "index %31s %31s id %llu unique %d", n1, n2, &a,
                          &u) == 4) {
            ck_assert_uint_lt(v1.nindex, 2);
            strcpy(v1.index[v1.nindex], n2);
            v1.index_id[v1.nindex] = a;
            v1.unique[v1.nindex++] = u;
        } else if (sscanf(line, "dropped %31s id %llu", n1, &a) == 2) {
            v1.dropped_id = a;
        } else if (sscanf(line,
                          "queue %31s id %llu partitions %u retention_ms %lld "
                          "pending %llu completed %llu",
                          n1, &a, &p, &r, &b, &c) == 6) {
            ck_assert_uint_lt(v1.nq, 2);
            v1_queue *q = &v1.q[v1.nq++];
            strcpy(q->name, n1);
            *q = (v1_queue){.id = a,
                            .parts = p,
                            .retention = r,
                            .pending = b,
                            .completed = c};
            strcpy(q->name, n1);
        } else if (sscanf(line, "due %31s %lld", n1, &r) == 2) {
            for (size_t i = 0; i < v1.nq; i++)
                if (strcmp(v1.q[i].name, n1) == 0)
                    v1.q[i].due = r;
        } else if (sscanf(line, "seq meta %llu", &a) == 1) {
            v1.seq_meta = a;
        } else if (sscanf(line, "seq queues %llu", &a) == 1) {
            v1.seq_queues = a;
        } else {
            ck_abort_msg("catalog-v1.txt: unknown line %s", line);
        }
    }
    fclose(f);
    ck_assert_uint_eq(v1.nindex, 2);
    ck_assert_uint_eq(v1.nq, 2);
    uint64_t m = v1.table_id > v1.dropped_id ? v1.table_id : v1.dropped_id;
    for (size_t i = 0; i < 2; i++) {
        m = v1.index_id[i] > m ? v1.index_id[i] : m;
        m = v1.q[i].id > m ? v1.q[i].id : m;
    }
    v1.max_id = m;
}

/* The fixture unpacked as the fixture's database (fx.dir). */
static void
fmt_setup(void)
{
    memset(&fx, 0, sizeof(fx));
    fx.dir = ts_tempdir("catalog-v1");
    ck_assert_ok(troupe_index_fns_create(&fx.fns));
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "tar -xzf '%s/catalog-v1.tar.gz' --strip-components=1 -C '%s'",
             TROUPE_FIXTURES_DIR, fx.dir);
    ck_assert_int_eq(system(cmd), 0);
    v1_read();
}

static void
open_queues_v1(void)
{
    troupe_queues_opts qo = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_queues_open(&qo, &fx.qs));
}

/* The value under (k1) or (k1, k2) of family cf in db (*v troupe_free),
 * or the read's error. */
static troupe_err
raw_get(troupe_db *db, const char *cf, const char *k1, const char *k2, void **v,
        size_t *n)
{
    troupe_cf *f = NULL;
    troupe_err e = troupe_db_cf(db, cf, &f);
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    str_key(&w, k1, k2, &k, &kl);
    e = troupe_db_get(db, f, NULL, k, kl, v, n);
    troupe_key_writer_fini(&w);
    return e;
}

/* The uint under (k1) of family cf, the db opened for it alone (the
 * tables closed); ENOENT as UINT64_MAX. */
static uint64_t
closed_uint(const char *cf, const char *k1)
{
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    void *v = NULL;
    size_t n = 0;
    uint64_t x = UINT64_MAX;
    troupe_err e = raw_get(db, cf, k1, NULL, &v, &n);
    if (e == TROUPE_OK) {
        troupe_reader r;
        troupe_reader_init(&r, v, n);
        troupe_read_uint(&r, &x);
        ck_assert_ok(troupe_read_end(&r));
    } else {
        ck_assert_err(e, TROUPE_ENOENT);
    }
    troupe_free(v);
    ck_assert_ok(troupe_db_close(db));
    return x;
}

/* Whether family cf exists, the db opened for it alone. */
static bool
closed_has_cf(const char *cf)
{
    troupe_db *db = NULL;
    troupe_cf *f = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    troupe_err e = troupe_db_cf(db, cf, &f);
    ck_assert(e == TROUPE_OK || e == TROUPE_ENOENT);
    ck_assert_ok(troupe_db_close(db));
    return e == TROUPE_OK;
}

static _Atomic int v1_handled;

static troupe_err
v1_handler(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    (void)d;
    (void)arg;
    out->kind = TROUPE_QUEUE_ACK;
    atomic_fetch_add(&v1_handled, 1);
    return TROUPE_OK;
}

static bool
v1_handled_n(void *arg)
{
    return atomic_load(&v1_handled) >= *(int *)arg;
}

/* Everything the fixture's text says, through the public calls. */
static void
v1_assert_view(void)
{
    char **names = NULL;
    size_t n = 0;
    ck_assert_ok(troupe_tables_list(fx.tables, &names, &n));
    bool listed = false;
    for (size_t i = 0; i < n; i++)
        listed |= strcmp(names[i], v1.table) == 0;
    ck_assert(listed);
    troupe_free(names);
    for (size_t i = 0; i < v1.nindex; i++) {
        bool ready = false;
        ck_assert_ok(troupe_tables_index_state(fx.tables, v1.table, v1.index[i],
                                               &ready));
        ck_assert(ready);
    }
    troupe_addr a;
    troupe_cf *cf = NULL;
    uint64_t id = 0;
    ck_assert_ok(troupe__tables_lookup_id(fx.tables, v1.table, &a, &cf, &id));
    ck_assert_uint_eq(id, v1.table_id);
    troupe_scan_opts so = {.limit = 1000};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_scan_wait(fx.tables, v1.table, &so, &rows));
    ck_assert_uint_eq(rows->n, v1.rows);
    troupe_rows_destroy(rows);
    /* the unique index answers: one row per value */
    troupe_index_query q = qval("u07@example.com");
    troupe_index_result *r = NULL;
    for (size_t i = 0; i < v1.nindex; i++)
        if (v1.unique[i]) {
            ck_assert_ok(troupe_tables_query_wait(fx.tables, v1.table,
                                                  v1.index[i], &q, &r));
            ck_assert_uint_eq(r->n, 1);
            ck_assert_mem_eq(r->hits[0].pk, "u07", 3);
            troupe_index_result_destroy(r);
        }
    troupe_queue_info *qi = NULL;
    size_t nq = 0;
    ck_assert_ok(troupe_queues_list(fx.qs, &qi, &nq));
    ck_assert_uint_ge(nq, v1.nq);
    for (size_t i = 0; i < v1.nq; i++) {
        const v1_queue *w = &v1.q[i];
        size_t at = nq;
        for (size_t j = 0; j < nq; j++)
            if (strcmp(qi[j].name, w->name) == 0)
                at = j;
        ck_assert_uint_lt(at, nq);
        ck_assert_uint_eq(qi[at].id, w->id);
        ck_assert_uint_eq(qi[at].partitions, w->parts);
        ck_assert_int_eq(qi[at].retention_ms, w->retention);
        troupe_queue_stats *st = NULL;
        ck_assert_ok(troupe_queue_stats_wait(fx.qs, w->name, &st));
        ck_assert_uint_eq(st->pending, w->pending);
        ck_assert_uint_eq(st->completed, w->completed);
        ck_assert_int_eq(st->oldest_due_ms, w->due);
        troupe_free(st);
    }
    troupe_free(qi);
}

/* A database written by format-1 code (commit 3de0723) opens: its tables,
 * indexes, rows and queues are all there, the queues' family is gone and
 * the marker says 2; new ids are above every old one of either counter;
 * a reopen sees the same and writes nothing. */
START_TEST(test_catalog_v1_database_opens_and_migrates)
{
    ck_assert(closed_has_cf("queues"));
    ck_assert_uint_eq(closed_uint("meta", "catalog"), UINT64_MAX);
    ck_assert_ok(open_all());
    open_queues_v1();
    v1_assert_view();
    ck_assert_err(troupe_db_cf(fx.db, "queues", &(troupe_cf *){NULL}),
                  TROUPE_ENOENT);
    size_t vl = 0;
    void *v = meta_value("catalog", &vl);
    ck_assert_uint_eq(vl, 1);
    ck_assert_uint_eq(((uint8_t *)v)[0], 2);
    troupe_free(v);
    ck_assert_uint_ge(stored_seq(), v1.max_id);
    /* the due events are delivered */
    for (size_t i = 0; i < v1.nq; i++) {
        if (v1.q[i].due > 1000000)
            continue; /* due in 2100 */
        atomic_store(&v1_handled, 0);
        troupe_queue_worker_opts wo = {.queue = v1.q[i].name,
                                       .first = 0,
                                       .last = v1.q[i].parts - 1,
                                       .credit = 4,
                                       .handler = v1_handler};
        troupe_queue_worker *w = NULL;
        ck_assert_ok(troupe_queue_worker_create(fx.qs, &wo, &w));
        int want = (int)v1.q[i].pending;
        ck_assert(ts_wait_until(v1_handled_n, &want, 10000));
        ck_assert_ok(troupe_queue_worker_stop_wait(w));
        troupe_queue_worker_destroy(w);
        troupe_queue_stats *st = NULL;
        ck_assert_ok(troupe_queue_stats_wait(fx.qs, v1.q[i].name, &st));
        ck_assert_uint_eq(st->pending, 0);
        ck_assert_uint_eq(st->completed, v1.q[i].completed + v1.q[i].pending);
        v1.q[i].completed += v1.q[i].pending;
        v1.q[i].pending = 0;
        v1.q[i].due = -1;
        troupe_free(st);
    }
    /* new ids, of either kind, above all of them */
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "fresh", NULL, 0));
    troupe_queue_spec sp = {"fresh", 1, 0, 0};
    ck_assert_ok(troupe_queues_create_wait(fx.qs, &sp));
    troupe_addr a;
    troupe_cf *cf = NULL;
    uint64_t tid = 0;
    ck_assert_ok(troupe__tables_lookup_id(fx.tables, "fresh", &a, &cf, &tid));
    ck_assert_uint_gt(tid, v1.max_id);
    troupe_queue_info *qi = NULL;
    size_t nq = 0;
    ck_assert_ok(troupe_queues_list(fx.qs, &qi, &nq));
    for (size_t j = 0; j < nq; j++)
        if (strcmp(qi[j].name, "fresh") == 0) {
            ck_assert_uint_gt(qi[j].id, v1.max_id);
            ck_assert_uint_ne(qi[j].id, tid);
        }
    troupe_free(qi);
    uint64_t seq = stored_seq();
    close_all();
    /* reopen: the same view, nothing written by the open */
    ck_assert_ok(open_all());
    open_queues_v1();
    v1_assert_view();
    ck_assert_uint_eq(stored_seq(), seq);
}
END_TEST

/* A crash after the migration's batch and before the drop of `queues`
 * leaves both: the next open drops the family and changes nothing else. */
START_TEST(test_catalog_migration_interrupted_drops_leftover)
{
    ck_assert_ok(open_all());
    close_all();
    uint64_t seq = closed_uint("meta", "seq");
    /* the state between the batch and the drop: `queues` with its old
     * entries and counter next to the migrated ones */
    troupe_db *db = NULL;
    troupe_cf *old = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_create(db, "queues", &old));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    void *olds[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    for (size_t i = 0; i < v1.nq; i++) {
        ck_assert_ok(
            raw_get(db, "meta", "queue", v1.q[i].name, &olds[i], &lens[i]));
        troupe_key_writer w;
        const uint8_t *k;
        size_t kl;
        str_key(&w, "queue", v1.q[i].name, &k, &kl);
        ck_assert_ok(troupe_batch_put(b, old, k, kl, olds[i], lens[i]));
        troupe_key_writer_fini(&w);
    }
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    ck_assert_ok(troupe_db_close(db));
    ck_assert_ok(open_all());
    open_queues_v1();
    ck_assert_err(troupe_db_cf(fx.db, "queues", &(troupe_cf *){NULL}),
                  TROUPE_ENOENT);
    for (size_t i = 0; i < v1.nq; i++) {
        void *v = NULL;
        size_t n = 0;
        ck_assert_ok(raw_get(fx.db, "meta", "queue", v1.q[i].name, &v, &n));
        ck_assert_uint_eq(n, lens[i]);
        ck_assert_mem_eq(v, olds[i], n);
        troupe_free(v);
        troupe_free(olds[i]);
    }
    ck_assert_uint_eq(stored_seq(), seq);
    v1_assert_view();
}
END_TEST

/* A format-1 database whose meta already holds a queue entry has two
 * sources of queues: refused with ECORRUPT, and nothing written (no
 * marker, the counters and the queues' family as they were). */
START_TEST(test_catalog_migration_conflict_refused_nothing_written)
{
    ck_assert_uint_eq(closed_uint("meta", "seq"), v1.seq_meta);
    ck_assert_uint_eq(closed_uint("queues", "seq"), v1.seq_queues);
    static const unsigned char entry[] = {0x94, 0x01, 0x09, 0x01, 0x00};
    put_meta("queue", "x", entry, sizeof(entry));
    ck_assert_err(open_all(), TROUPE_ECORRUPT);
    ck_assert_ptr_null(fx.cat);
    ck_assert_uint_eq(closed_uint("meta", "catalog"), UINT64_MAX);
    ck_assert_uint_eq(closed_uint("meta", "seq"), v1.seq_meta);
    ck_assert(closed_has_cf("queues"));
    ck_assert_uint_eq(closed_uint("queues", "seq"), v1.seq_queues);
    /* without the stray entry it migrates */
    put_meta("queue", "x", NULL, 0);
    ck_assert_ok(open_all());
    open_queues_v1();
    v1_assert_view();
}
END_TEST

/* A marker above 2 was written by a newer troupe: ENOTSUP; one that is
 * not a uint: ECORRUPT. Either way nothing is written, not even the
 * migration a format-1 database would get. */
START_TEST(test_catalog_newer_format_refused)
{
    static const unsigned char three[] = {0x03};
    static const unsigned char str[] = {0xa1, 'x'};
    const unsigned char *bad[2] = {three, str};
    size_t badlen[2] = {sizeof(three), sizeof(str)};
    troupe_err want[2] = {TROUPE_ENOTSUP, TROUPE_ECORRUPT};
    for (int i = 0; i < 2; i++) {
        put_meta("catalog", NULL, bad[i], badlen[i]);
        ck_assert_err(open_all(), want[i]);
        ck_assert_ptr_null(fx.cat);
        ck_assert(closed_has_cf("queues"));
        ck_assert_uint_eq(closed_uint("queues", "seq"), v1.seq_queues);
        ck_assert_uint_eq(closed_uint("meta", "seq"), v1.seq_meta);
        troupe_db *db = NULL;
        void *v = NULL;
        size_t n = 0;
        ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
        ck_assert_ok(raw_get(db, "meta", "catalog", NULL, &v, &n));
        ck_assert_uint_eq(n, badlen[i]);
        ck_assert_mem_eq(v, bad[i], n);
        troupe_free(v);
        ck_assert_ok(troupe_db_close(db));
    }
}
END_TEST

/* ---- a read-only catalog: it writes nothing ---------------------------- */

typedef struct ro_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_catalog *cat;
} ro_fx;

/* troupe_errmsg of the last ro_open that failed. */
static char ro_msg[TROUPE_ERRMSG_MAX];

/* Opens fx.dir read-only and a catalog on it: catalog_open's error (on
 * failure the db and runtime are closed again, its detail in ro_msg). */
static troupe_err
ro_open(ro_fx *r)
{
    memset(r, 0, sizeof(*r));
    troupe_runtime_opts o = {.schedulers = 1, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&r->rt, &o));
    troupe_db_opts dbo;
    troupe_db_opts_init(&dbo);
    dbo.read_only = true;
    ck_assert_ok(troupe_db_open(fx.dir, &dbo, &r->db));
    troupe_catalog_opts co = {.rt = r->rt, .db = r->db};
    troupe_err e = troupe_catalog_open(&co, &r->cat);
    if (e != TROUPE_OK) {
        snprintf(ro_msg, sizeof(ro_msg), "%s", troupe_errmsg(e));
        ck_assert_ptr_null(r->cat);
        ck_assert_ok(troupe_runtime_shutdown_wait(r->rt));
        troupe_runtime_destroy(r->rt);
        ck_assert_ok(troupe_db_close(r->db));
        memset(r, 0, sizeof(*r));
    }
    return e;
}

static void
ro_close(ro_fx *r)
{
    ck_assert_ok(troupe_catalog_stop_wait(r->cat));
    troupe_catalog_destroy(r->cat);
    ck_assert_ok(troupe_runtime_shutdown_wait(r->rt));
    troupe_runtime_destroy(r->rt);
    ck_assert_ok(troupe_db_close(r->db));
    memset(r, 0, sizeof(*r));
}

static troupe_err
ro_count(void *arg, const char *name, const void *v, size_t n, uint64_t *id)
{
    (void)name;
    (void)v;
    (void)n;
    (*(size_t *)arg)++;
    *id = 1;
    return TROUPE_OK;
}

/* The entries of kind the loader finds. */
static size_t
ro_entries(troupe_catalog *c, const char *kind)
{
    size_t n = 0;
    ck_assert_ok(troupe__catalog_load(c, kind, ro_count, &n));
    return n;
}

/* Every change a read-only catalog is asked for fails, EREADONLY, and
 * hands out nothing: the owners' check (with its detail), the ids, a
 * meta batch. */
static void
ro_assert_refuses(troupe_catalog *c)
{
    ck_assert(troupe_catalog_read_only(c));
    uint64_t seq = troupe__catalog_seq(c);
    ck_assert_err(troupe__catalog_writable(c, "troupe_tables_create"),
                  TROUPE_EREADONLY);
    ck_assert_ptr_nonnull(strstr(troupe_errmsg(TROUPE_EREADONLY),
                                 "troupe_tables_create: the database is open "
                                 "read-only"));
    uint64_t first = 0;
    ck_assert_err(troupe__catalog_ids(c, 1, &first), TROUPE_EREADONLY);
    ck_assert_uint_eq(troupe__catalog_seq(c), seq);
    troupe__meta_batch m;
    troupe__meta_begin(&m, c);
    troupe__meta_put_seq(&m);
    troupe__meta_put_entry(&m, "table", "x", "\x90", 1);
    ck_assert_err(troupe__meta_commit(&m, TROUPE_SYNC_ON), TROUPE_EREADONLY);
}

/* The names of fx.dir's families, the db opened read-write for it. */
static bool
rw_has_cf(const char *name)
{
    troupe_db *db = NULL;
    char **names = NULL;
    size_t n = 0;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_names(db, &names, &n));
    bool has = false;
    for (size_t i = 0; i < n; i++)
        has |= strcmp(names[i], name) == 0;
    troupe_free(names);
    ck_assert_ok(troupe_db_close(db));
    return has;
}

/* fx.dir opened read-only: the loader finds `tables` table and `queues`
 * queue entries, the counter is seq, every change is refused, and not a
 * file of the directory changes. */
static void
ro_assert_loads(size_t tables, size_t queues, uint64_t seq)
{
    ts_listing before, after;
    ts_list_dir(fx.dir, &before);
    ro_fx r;
    ck_assert_ok(ro_open(&r));
    ck_assert_ptr_nonnull(troupe__catalog_meta(r.cat));
    ck_assert_uint_eq(ro_entries(r.cat, "table"), tables);
    ck_assert_uint_eq(ro_entries(r.cat, "queue"), queues);
    ck_assert_uint_eq(troupe__catalog_seq(r.cat), seq);
    ro_assert_refuses(r.cat);
    ro_close(&r);
    ts_list_dir(fx.dir, &after);
    ck_assert_str_eq(after.text, before.text);
}

static void
ro_setup(void)
{
    memset(&fx, 0, sizeof(fx));
    fx.dir = ts_tempdir("catalog-ro");
    ck_assert_ok(troupe_index_fns_create(&fx.fns));
}

/* A database that never had a catalog opens read-only as an empty one:
 * nothing listed, no counter, every change refused; and no `meta` is
 * created: the files are as they were, and a read-write open after finds
 * no such family. (A read-write catalog open creates it: the probe can
 * tell.) */
START_TEST(test_catalog_read_only_without_meta_empty_writes_nothing)
{
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db)); /* a bare database */
    ck_assert_ok(troupe_db_close(db));
    ck_assert(!rw_has_cf("meta"));
    ts_listing before, after;
    ts_list_dir(fx.dir, &before);
    ro_fx r;
    ck_assert_ok(ro_open(&r));
    ck_assert_ptr_null(troupe__catalog_meta(r.cat));
    ck_assert_uint_eq(ro_entries(r.cat, "table"), 0);
    ck_assert_uint_eq(ro_entries(r.cat, "queue"), 0);
    ck_assert_uint_eq(troupe__catalog_seq(r.cat), 0);
    troupe_key_writer w;
    void *v = NULL;
    size_t vl = 0;
    troupe_err ke = troupe__catalog_entry_key(&w, "seq", NULL);
    ck_assert_err(troupe__meta_get(r.cat, &w, ke, &v, &vl), TROUPE_ENOENT);
    ro_assert_refuses(r.cat);
    ro_close(&r);
    ts_list_dir(fx.dir, &after);
    ck_assert_str_eq(after.text, before.text);
    ck_assert(!rw_has_cf("meta"));
    /* the probe: a read-write open of the catalog does create it */
    ck_assert_ok(open_all());
    close_all();
    ck_assert(rw_has_cf("meta"));
    ck_assert(!troupe_catalog_read_only(NULL));
}
END_TEST

/* A current database loads read-only as it does read-write (its entries,
 * its counter) and refuses every change, its files untouched; a read-
 * write catalog is not read-only. */
START_TEST(test_catalog_read_only_current_loads_refuses_changes)
{
    ck_assert_ok(open_all());
    ck_assert(!troupe_catalog_read_only(fx.cat));
    ck_assert_ok(troupe__catalog_writable(fx.cat, "x"));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    uint64_t seq = troupe__catalog_seq(fx.cat);
    close_all();
    ro_assert_loads(2, 0, seq);
}
END_TEST

/* A format-1 database with queues to move is refused read-only: ESTATE,
 * a detail that says what to do, every file as it was (no marker, no
 * move, `queues` still there). Read-write it migrates, and then a
 * read-only open loads it, the tables and queues all there, also with a
 * `queues` family an interrupted migration left (which it keeps). */
START_TEST(test_catalog_read_only_v1_refused_fixture_unchanged)
{
    ts_listing before, after;
    ts_list_dir(fx.dir, &before);
    ro_fx r;
    ck_assert_err(ro_open(&r), TROUPE_ESTATE);
    ck_assert_msg(strstr(ro_msg, "open it read-write once") != NULL, "%s",
                  ro_msg);
    ts_list_dir(fx.dir, &after);
    ck_assert_str_eq(after.text, before.text);
    ck_assert(closed_has_cf("queues"));
    ck_assert_uint_eq(closed_uint("meta", "catalog"), UINT64_MAX);
    ck_assert_ok(open_all());
    close_all();
    uint64_t seq = closed_uint("meta", "seq");
    ck_assert_uint_ge(seq, v1.max_id);
    ro_assert_loads(1, v1.nq, seq);
    /* a `queues` left by a migration cut short after its batch stays:
     * only a read-write open drops it */
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_create(db, "queues", NULL));
    ck_assert_ok(troupe_db_close(db));
    ro_assert_loads(1, v1.nq, seq);
    ck_assert(closed_has_cf("queues"));
}
END_TEST

/* A format-1 database without `queues` (nothing to move) reads as it is
 * read-only: the migration would only add the marker, which it does not
 * write. A format-1 database without `meta` but with `queues` (queues and
 * never a table) is refused as above. */
START_TEST(test_catalog_read_only_v1_nothing_to_move_reads_as_is)
{
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_drop(db, "queues"));
    ck_assert_ok(troupe_db_close(db));
    ro_assert_loads(1, 0, v1.seq_meta);
    ck_assert_uint_eq(closed_uint("meta", "catalog"), UINT64_MAX);
    /* queues without meta */
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_drop(db, "meta"));
    ck_assert_ok(troupe_db_cf_create(db, "queues", NULL));
    ck_assert_ok(troupe_db_close(db));
    ts_listing before, after;
    ts_list_dir(fx.dir, &before);
    ro_fx r;
    ck_assert_err(ro_open(&r), TROUPE_ESTATE);
    ts_list_dir(fx.dir, &after);
    ck_assert_str_eq(after.text, before.text);
}
END_TEST

Suite *
catalog_suite(void)
{
    Suite *s = suite_create("catalog");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_catalog_corrupt_entry_refused_at_open,
                        BAD_KEY_INT, BAD_DEF_DUP + 1);
    tcase_add_loop_test(tc, test_catalog_inconsistent_entry_refused_at_open, 0,
                        INC_N);
    tcase_add_test(tc, test_versions_never_repeat_across_reopen);
    tcase_add_loop_test(tc, test_versions_stay_below_the_stored_floor, 0, 4);
    tcase_add_test(tc, test_versions_floor_absent_opens_malformed_refused);
    tcase_add_test(tc, test_create_again_same_spec_ok_other_eexist);
    tcase_add_test(tc, test_function_index_must_be_registered);
    tcase_add_test(tc, test_cursor_of_another_object_is_erange);
    suite_add_tcase(s, tc);
    tc = tcase_create("format");
    tcase_add_checked_fixture(tc, fmt_setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_catalog_v1_database_opens_and_migrates);
    tcase_add_test(tc, test_catalog_migration_interrupted_drops_leftover);
    tcase_add_test(tc, test_catalog_migration_conflict_refused_nothing_written);
    tcase_add_test(tc, test_catalog_newer_format_refused);
    tcase_add_test(tc, test_catalog_read_only_v1_refused_fixture_unchanged);
    tcase_add_test(tc, test_catalog_read_only_v1_nothing_to_move_reads_as_is);
    suite_add_tcase(s, tc);
    tc = tcase_create("readonly");
    tcase_add_checked_fixture(tc, ro_setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc,
                   test_catalog_read_only_without_meta_empty_writes_nothing);
    tcase_add_test(tc, test_catalog_read_only_current_loads_refuses_changes);
    suite_add_tcase(s, tc);
    return s;
}
