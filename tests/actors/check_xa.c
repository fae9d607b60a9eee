/* XA over the tables (troupe/xa.h): prepare then commit or rollback by
 * xid, resolving an xid twice, held keys against other transactions,
 * single writes and DDL, the list, a close and reopen that holds the xid
 * again and commits exactly what was prepared, a corrupt record at open,
 * bad xids, and a process killed after its prepare. Real RocksDB in a
 * temp dir, a standalone runtime, the blocking twins on the test
 * thread. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "troupe/alloc.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/xa.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "troupe/xa.h"
#include "tsupport.h"

typedef struct xa_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    char *dir;
    int64_t now; /* the tables' clock */
} xa_fx;

static xa_fx fx;

static int64_t
fx_clock(void *ctx)
{
    (void)ctx;
    return fx.now;
}

/* Opens everything on fx.dir; the tables' open error is returned (the
 * rest must open). */
static troupe_err
fx_open(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {
        .catalog = fx.cat, .commit = fx.commit, .clock = fx_clock};
    return troupe_tables_open(&to, &fx.tables);
}

static void
fx_close(void)
{
    if (fx.tables != NULL) {
        ck_assert_ok(troupe_tables_stop_wait(fx.tables));
        troupe_tables_destroy(fx.tables);
        fx.tables = NULL;
    }
    ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
}

static void
setup(void)
{
    memset(&fx, 0, sizeof(fx));
    fx.now = 1000000;
    fx.dir = ts_tempdir("xa");
    ck_assert_ok(fx_open());
}

static void
teardown(void)
{
    fx_close();
    ts_rmtree(fx.dir);
    free(fx.dir);
}

/* {"v": v, "updated_at": 0}: the commit stamps updated_at with the
 * tables' clock. */
static const void *
doc(int64_t v, size_t *len)
{
    static unsigned char b[64];
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "v");
    troupe_pack_int(&p, v);
    troupe_pack_cstr(&p, "updated_at");
    troupe_pack_int(&p, 0);
    const void *d = troupe_pack_data(&p, len);
    memcpy(b, d, *len);
    troupe_pack_fini(&p);
    return b;
}

/* The fields "v" and "updated_at" of the stored row; false: absent. */
static bool
row(const char *t, const char *k, int64_t *v, int64_t *upd)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, t, k, strlen(k), &rows);
    if (e == TROUPE_ENOENT)
        return false;
    ck_assert_ok(e);
    troupe_reader rd;
    uint32_t n = 0;
    troupe_reader_init(&rd, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map(&rd, &n);
    ck_assert_uint_eq(n, 2);
    for (uint32_t i = 0; i < n; i++) {
        const char *f;
        size_t fl;
        int64_t x = 0;
        troupe_read_str(&rd, 16, &f, &fl);
        troupe_read_int(&rd, &x);
        if (fl == 1 && v != NULL)
            *v = x;
        else if (fl == 10 && upd != NULL)
            *upd = x;
    }
    ck_assert_ok(troupe_read_end(&rd));
    troupe_rows_destroy(rows);
    return true;
}

static int64_t
stored(const char *t, const char *k)
{
    int64_t v = -1;
    return row(t, k, &v, NULL) ? v : -1;
}

static troupe_err
put(const char *t, const char *k, int64_t v)
{
    size_t n;
    const void *d = doc(v, &n);
    return troupe_table_upsert_wait(fx.tables, t, k, strlen(k), d, n, NULL);
}

static troupe_err
txput(troupe_txn *tx, const char *t, const char *k, int64_t v)
{
    size_t n;
    const void *d = doc(v, &n);
    return troupe_txn_upsert(tx, t, k, strlen(k), d, n, NULL);
}

/* The v a transaction reads (-1: absent). */
static int64_t
txget(troupe_txn *tx, const char *t, const char *k)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_txn_get_wait(tx, t, k, strlen(k), &rows);
    if (e == TROUPE_ENOENT)
        return -1;
    ck_assert_ok(e);
    troupe_rows_destroy(rows);
    return 0;
}

/* The stored record of xid in meta: OK, or ENOENT. */
static troupe_err
record(const char *xid, void **v, size_t *vlen)
{
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    ck_assert_ok(troupe__xa_key(&w, "xa", xid, strlen(xid)));
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &kl));
    void *tmp = NULL;
    size_t tl = 0;
    troupe_err e =
        troupe_db_get(fx.db, troupe__catalog_meta(fx.cat), NULL, k, kl,
                      v != NULL ? v : &tmp, vlen != NULL ? vlen : &tl);
    troupe_free(tmp);
    troupe_key_writer_fini(&w);
    return e;
}

/* The xids listed, joined by ',' into buf. */
static const char *
listed(char *buf, size_t cap)
{
    troupe_xa_page *p = NULL;
    ck_assert_ok(troupe_xa_list_wait(fx.tables, NULL, 0, 100, &p));
    buf[0] = '\0';
    for (size_t i = 0; i < p->n; i++) {
        ck_assert_uint_eq(strlen(p->v[i].xid), p->v[i].xid_len);
        if (i > 0)
            strncat(buf, ",", cap - strlen(buf) - 1);
        strncat(buf, p->v[i].xid, cap - strlen(buf) - 1);
    }
    ck_assert(!p->more);
    troupe_xa_page_destroy(p);
    return buf;
}

/* A transaction on "a" that writes x = 1 and y = 2 and deletes gone
 * (stored first), prepared under xid. */
static void
prepare_xy(const char *xid)
{
    ck_assert_ok(put("a", "gone", 9));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "x", 1));
    size_t n;
    const void *d = doc(2, &n);
    ck_assert_ok(troupe_txn_insert(tx, "a", "y", 1, d, n, NULL));
    ck_assert_ok(troupe_txn_delete(tx, "a", "gone", 4));
    ck_assert_ok(troupe_txn_prepare_wait(tx, xid, strlen(xid)));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON), TROUPE_ESTATE);
    troupe_txn_destroy(tx); /* the tables hold the xid, not tx */
}

/* ---- tests ------------------------------------------------------------- */

START_TEST(test_xa_prepare_then_commit_applies_writes_and_drops_record)
{
    char buf[256];
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(put("a", "gone", 9));
    fx.now = 2000000;
    prepare_xy("g1/01");
    fx.now = 2000250;
    /* prepared: stored, listed with its age, nothing visible yet */
    ck_assert_ok(record("g1/01", NULL, NULL));
    troupe_xa_page *p = NULL;
    ck_assert_ok(troupe_xa_list_wait(fx.tables, NULL, 0, 10, &p));
    ck_assert_uint_eq(p->n, 1);
    ck_assert_str_eq(p->v[0].xid, "g1/01");
    ck_assert_int_eq(p->v[0].prepared_ms, 2000000);
    ck_assert_int_eq(p->v[0].age_ms, 250);
    troupe_xa_page_destroy(p);
    ck_assert_int_eq(stored("a", "x"), -1);
    ck_assert_int_eq(stored("a", "y"), -1);
    ck_assert_int_eq(stored("a", "gone"), 9);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "g1/01", 5));
    ck_assert_int_eq(stored("a", "x"), 1);
    ck_assert_int_eq(stored("a", "y"), 2);
    ck_assert_int_eq(stored("a", "gone"), -1);
    ck_assert_err(record("g1/01", NULL, NULL), TROUPE_ENOENT);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    /* the keys are free again */
    ck_assert_ok(put("a", "x", 5));
    ck_assert_int_eq(stored("a", "x"), 5);
}
END_TEST

START_TEST(test_xa_prepare_then_rollback_leaves_nothing)
{
    char buf[256];
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(put("a", "gone", 9));
    prepare_xy("g2/01");
    ck_assert_str_eq(listed(buf, sizeof(buf)), "g2/01");
    ck_assert_ok(troupe_xa_rollback_wait(fx.tables, "g2/01", 5));
    ck_assert_int_eq(stored("a", "x"), -1);
    ck_assert_int_eq(stored("a", "y"), -1);
    ck_assert_int_eq(stored("a", "gone"), 9);
    ck_assert_err(record("g2/01", NULL, NULL), TROUPE_ENOENT);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_ok(put("a", "x", 3)); /* released */
    ck_assert_int_eq(stored("a", "x"), 3);
}
END_TEST

START_TEST(test_xa_resolving_a_resolved_xid_is_ok_unless_it_went_the_other_way)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    prepare_xy("g3/01");
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "g3/01", 5));
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "g3/01", 5));
    ck_assert_err(troupe_xa_rollback_wait(fx.tables, "g3/01", 5),
                  TROUPE_ECONFLICT);
    ck_assert_ptr_nonnull(strstr(troupe_errmsg(TROUPE_ECONFLICT), "g3/01"));
    ck_assert_int_eq(stored("a", "x"), 1); /* the rollback changed nothing */
    ck_assert_ok(troupe_tables_drop_wait(fx.tables, "a"));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    prepare_xy("g3/02");
    ck_assert_ok(troupe_xa_rollback_wait(fx.tables, "g3/02", 5));
    ck_assert_ok(troupe_xa_rollback_wait(fx.tables, "g3/02", 5));
    ck_assert_err(troupe_xa_commit_wait(fx.tables, "g3/02", 5),
                  TROUPE_ECONFLICT);
    ck_assert_int_eq(stored("a", "x"), -1);
    /* never prepared: either way OK */
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "never", 5));
    ck_assert_ok(troupe_xa_rollback_wait(fx.tables, "never", 5));
    /* a second prepare of a prepared xid is EEXIST, nothing held */
    prepare_xy("g3/03");
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "other", 1));
    ck_assert_err(troupe_txn_prepare_wait(tx, "g3/03", 5), TROUPE_EEXIST);
    troupe_txn_destroy(tx);
    ck_assert_ok(put("a", "other", 2));
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "g3/03", 5));
    /* the markers survive a reopen */
    fx_close();
    ck_assert_ok(fx_open());
    ck_assert_err(troupe_xa_rollback_wait(fx.tables, "g3/01", 5),
                  TROUPE_ECONFLICT);
    ck_assert_err(troupe_xa_commit_wait(fx.tables, "g3/02", 5),
                  TROUPE_ECONFLICT);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "g3/03", 5));
}
END_TEST

static troupe_err async_err;
static char async_msg[256];
static atomic_int async_done;

static void
on_async_write(troupe_err err, troupe_rows *rows, void *arg)
{
    (void)arg;
    troupe_rows_destroy(rows);
    async_err = err;
    snprintf(async_msg, sizeof(async_msg), "%s", troupe_errmsg(err));
    atomic_store(&async_done, 1);
}

static bool
async_finished(void *arg)
{
    (void)arg;
    return atomic_load(&async_done) != 0;
}

START_TEST(test_xa_held_keys_refuse_other_txns_single_writes_and_ddl)
{
    static const troupe_index_field vf = {"v", TROUPE_FIELD_INT};
    troupe_index_spec spec = {.name = "by_v", .fields = &vf, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    ck_assert_ok(put("a", "r", 7));
    /* the prepared one writes a/w, reads a/r, scans a/[m, n) */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "w", 1));
    ck_assert_int_eq(txget(tx, "a", "r"), 0);
    troupe_scan_opts so = {
        .start = "m", .start_len = 1, .end = "n", .end_len = 1, .limit = 10};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_txn_prepare_wait(tx, "held:1", 6));
    troupe_txn_destroy(tx);
    /* another transaction touching them conflicts, as reserved */
    const char *keys[] = {"w", "r", "m2"};
    for (int i = 0; i < 3; i++) {
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
        ck_assert_ok(txput(tx, "a", keys[i], 2));
        ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON),
                      TROUPE_ECONFLICT);
        const troupe_txn_conflict *c = NULL;
        size_t n = 0;
        ck_assert_ok(troupe_txn_conflicts(tx, &c, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert(c[0].kinds & TROUPE_CONFLICT_RESERVED);
        troupe_txn_destroy(tx);
    }
    /* and so does a second prepare */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "w", 3));
    ck_assert_err(troupe_txn_prepare_wait(tx, "held:2", 6), TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    /* single writes of held keys are refused, not queued */
    const char *held[] = {"w", "r", "m5"};
    for (int i = 0; i < 3; i++) {
        ck_assert_err(put("a", held[i], 4), TROUPE_EBUSY);
        ck_assert_ptr_nonnull(
            strstr(troupe_errmsg(TROUPE_EBUSY), "\"held:1\""));
    }
    ck_assert_err(troupe_table_delete_wait(fx.tables, "a", "r", 1, NULL),
                  TROUPE_EBUSY);
    ck_assert_ptr_nonnull(strstr(troupe_errmsg(TROUPE_EBUSY), "held:1"));
    size_t dn;
    const void *dd = doc(9, &dn);
    ck_assert_ok(troupe_table_upsert(fx.tables, "a", "w", 1, dd, dn, NULL,
                                     on_async_write, NULL));
    ck_assert(ts_wait_until(async_finished, NULL, 10000));
    ck_assert_err(async_err, TROUPE_EBUSY);
    ck_assert_ptr_nonnull(strstr(async_msg, "\"held:1\""));
    troupe_rows *qr = NULL;
    uint64_t qv = 0;
    ck_assert_err(
        troupe_txn_query_version_wait(fx.tables, "a", "w", 1, &qr, &qv),
        TROUPE_EBUSY);
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, "a", "r", 1, &qr, &qv));
    troupe_rows_destroy(qr);
    ck_assert_ok(put("a", "free", 4)); /* others are not */
    ck_assert_ok(put("b", "w", 4));
    /* DDL on the held table is EBUSY; on another table it is not */
    ck_assert_err(troupe_tables_drop_wait(fx.tables, "a"), TROUPE_EBUSY);
    ck_assert_err(troupe_tables_add_index_wait(fx.tables, "a", &spec),
                  TROUPE_EBUSY);
    ck_assert_ok(troupe_tables_add_index_wait(fx.tables, "b", &spec));
    ck_assert_int_eq(stored("a", "r"), 7);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "held:1", 6));
    ck_assert_int_eq(stored("a", "w"), 1);
    ck_assert_ok(put("a", "w", 4));
    ck_assert_ok(put("a", "r", 4));
    ck_assert_ok(troupe_tables_add_index_wait(fx.tables, "a", &spec));
    ck_assert_ok(troupe_tables_drop_wait(fx.tables, "a"));
}
END_TEST

START_TEST(test_xa_reopen_holds_the_xid_and_commits_exactly_what_was_prepared)
{
    char buf[256];
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    ck_assert_ok(put("a", "gone", 9));
    fx.now = 3000000;
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "x", 1));
    ck_assert_ok(txput(tx, "b", "z", 3));
    ck_assert_ok(troupe_txn_delete(tx, "a", "gone", 4));
    ck_assert_ok(troupe_txn_prepare_wait(tx, "gid-7/02", 8));
    troupe_txn_destroy(tx);
    void *v0 = NULL;
    size_t l0 = 0;
    ck_assert_ok(record("gid-7/02", &v0, &l0));
    fx_close();
    fx.now = 4000000; /* a prepare run again would stamp this */
    ck_assert_ok(fx_open());
    ck_assert_str_eq(listed(buf, sizeof(buf)), "gid-7/02");
    troupe_xa_page *p = NULL;
    ck_assert_ok(troupe_xa_list_wait(fx.tables, NULL, 0, 1, &p));
    ck_assert_int_eq(p->v[0].prepared_ms, 3000000);
    ck_assert_int_eq(p->v[0].age_ms, 1000000);
    troupe_xa_page_destroy(p);
    /* held again */
    ck_assert_err(put("a", "x", 5), TROUPE_EBUSY);
    ck_assert_err(put("b", "z", 5), TROUPE_EBUSY);
    ck_assert_err(troupe_tables_drop_wait(fx.tables, "b"), TROUPE_EBUSY);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "gone", 2));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON), TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    /* the record is as it was */
    void *v1 = NULL;
    size_t l1 = 0;
    ck_assert_ok(record("gid-7/02", &v1, &l1));
    ck_assert_uint_eq(l0, l1);
    ck_assert(memcmp(v0, v1, l0) == 0);
    troupe_free(v0);
    troupe_free(v1);
    ck_assert_int_eq(stored("a", "x"), -1);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "gid-7/02", 8));
    int64_t v = 0, upd = 0;
    ck_assert(row("a", "x", &v, &upd));
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(upd, 3000000); /* the prepared bytes, not a new stamp */
    ck_assert(row("b", "z", &v, &upd));
    ck_assert_int_eq(v, 3);
    ck_assert_int_eq(upd, 3000000);
    ck_assert_int_eq(stored("a", "gone"), -1);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_ok(put("a", "x", 5));
    /* and nothing comes back at the next open */
    fx_close();
    ck_assert_ok(fx_open());
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_int_eq(stored("a", "x"), 5);
}
END_TEST

START_TEST(test_xa_corrupt_record_is_ecorrupt_at_open_naming_the_xid)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    prepare_xy("bad.1");
    void *v = NULL;
    size_t vl = 0;
    ck_assert_ok(record("bad.1", &v, &vl));
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_tables_destroy(fx.tables);
    fx.tables = NULL;
    /* each corruption through the storage adapter: not msgpack, a record
     * cut short, a wrong format number, a table id that is not a's */
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    ck_assert_ok(troupe__xa_key(&w, "xa", "bad.1", 5));
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &kl));
    unsigned char *bad = troupe_malloc(vl);
    const size_t cuts[] = {3, vl - 1, vl, vl};
    for (int i = 0; i < 4; i++) {
        memcpy(bad, v, vl);
        if (i == 0)
            memset(bad, 0xc1, 3); /* never used in msgpack */
        if (i == 2)
            bad[1] = 2; /* [1, ...] -> [2, ...] */
        if (i == 3) {   /* the table's id, a uint after its name */
            const unsigned char *nm = memmem(bad, vl,
                                             "\xa1"
                                             "a",
                                             2);
            ck_assert_ptr_nonnull(nm);
            bad[nm - bad + 2] += 1;
        }
        troupe_batch *b = NULL;
        ck_assert_ok(troupe_batch_create(&b));
        ck_assert_ok(troupe_batch_put(b, troupe__catalog_meta(fx.cat), k, kl,
                                      bad, cuts[i]));
        ck_assert_ok(troupe_db_write(fx.db, b, TROUPE_SYNC_ON));
        troupe_batch_destroy(b);
        troupe_tables_opts to = {
            .catalog = fx.cat, .commit = fx.commit, .clock = fx_clock};
        ck_assert_err(troupe_tables_open(&to, &fx.tables), TROUPE_ECORRUPT);
        ck_assert_ptr_null(fx.tables);
        ck_assert_ptr_nonnull(strstr(troupe_errmsg(TROUPE_ECORRUPT), "bad.1"));
    }
    /* the record as it was opens and holds again */
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(
        troupe_batch_put(b, troupe__catalog_meta(fx.cat), k, kl, v, vl));
    ck_assert_ok(troupe_db_write(fx.db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    troupe_free(bad);
    troupe_free(v);
    troupe_tables_opts to = {
        .catalog = fx.cat, .commit = fx.commit, .clock = fx_clock};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
    ck_assert_err(put("a", "x", 5), TROUPE_EBUSY);
    ck_assert_ok(troupe_xa_rollback_wait(fx.tables, "bad.1", 5));
    ck_assert_ok(put("a", "x", 5));
}
END_TEST

static void
never_cb(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c, size_t n,
         void *arg)
{
    (void)tx;
    (void)err;
    (void)c;
    (void)n;
    (void)arg;
    ck_abort_msg("a refused call called back");
}

static void
never_xcb(troupe_err err, void *arg)
{
    (void)err;
    (void)arg;
    ck_abort_msg("a refused call called back");
}

START_TEST(test_xa_read_only_tables_hold_nothing_and_resolve_nothing)
{
    char buf[256];
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    prepare_xy("ro/1");
    fx_close();
    troupe_runtime *rt = NULL;
    troupe_db *db = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *t = NULL;
    troupe_runtime_opts o = {.schedulers = 1, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    troupe_db_opts dbo;
    troupe_db_opts_init(&dbo);
    dbo.read_only = true;
    ck_assert_ok(troupe_db_open(fx.dir, &dbo, &db));
    troupe_catalog_opts co = {.rt = rt, .db = db};
    ck_assert_ok(troupe_catalog_open(&co, &cat));
    troupe_tables_opts to = {.catalog = cat, .clock = fx_clock};
    ck_assert_ok(troupe_tables_open(&to, &t));
    ck_assert_err(troupe_xa_commit_wait(t, "ro/1", 4), TROUPE_EREADONLY);
    ck_assert_err(troupe_xa_rollback_wait(t, "ro/1", 4), TROUPE_EREADONLY);
    troupe_xa_page *p = NULL;
    ck_assert_ok(troupe_xa_list_wait(t, NULL, 0, 10, &p));
    ck_assert_uint_eq(p->n, 0);
    troupe_xa_page_destroy(p);
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_table_get_wait(t, "a", "x", 1, &rows), TROUPE_ENOENT);
    ck_assert_ok(troupe_tables_stop_wait(t));
    troupe_tables_destroy(t);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    ck_assert_ok(troupe_catalog_stop_wait(cat));
    troupe_catalog_destroy(cat);
    troupe_runtime_destroy(rt);
    ck_assert_ok(troupe_db_close(db));
    /* read-write again: still prepared */
    ck_assert_ok(fx_open());
    ck_assert_str_eq(listed(buf, sizeof(buf)), "ro/1");
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "ro/1", 4));
    ck_assert_int_eq(stored("a", "x"), 1);
}
END_TEST

static int parts_done;

static void
part_done(void *arg, troupe_err outcome)
{
    (void)arg;
    ck_assert_err(outcome, TROUPE_ECANCELED);
    parts_done++;
}

START_TEST(test_xa_bad_arguments_are_einval_with_a_detail)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    char big[TROUPE_XA_XID_MAX + 2];
    memset(big, 'x', sizeof(big));
    struct {
        const char *xid;
        size_t len;
    } bad[] = {{NULL, 3},
               {"", 0},
               {"a b", 3},
               {"a\0b", 3},
               {"x;y", 3},
               {"é", 2},
               {big, TROUPE_XA_XID_MAX + 1},
               {"ab", 0}};
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "x", 1));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_err(
            troupe_txn_prepare(tx, bad[i].xid, bad[i].len, never_cb, NULL),
            TROUPE_EINVAL);
        ck_assert_ptr_nonnull(
            strstr(troupe_errmsg(TROUPE_EINVAL), "[A-Za-z0-9_.:/-]"));
        ck_assert_err(troupe_xa_commit(fx.tables, bad[i].xid, bad[i].len,
                                       never_xcb, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(
            troupe_xa_rollback_wait(fx.tables, bad[i].xid, bad[i].len),
            TROUPE_EINVAL);
        troupe_xa_page *p = NULL;
        if (bad[i].xid != NULL)
            ck_assert_err(
                troupe_xa_list_wait(fx.tables, bad[i].xid, bad[i].len, 10, &p),
                TROUPE_EINVAL);
        ck_assert_ptr_null(p);
    }
    /* the longest xid, every allowed byte */
    char ok[TROUPE_XA_XID_MAX + 1];
    memset(ok, 'Z', TROUPE_XA_XID_MAX);
    memcpy(ok, "az09AZ_.:/-", 11);
    ok[TROUPE_XA_XID_MAX] = '\0';
    ck_assert_err(troupe_txn_prepare(NULL, "x", 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_prepare(tx, "x", 1, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_xa_commit(NULL, "x", 1, never_xcb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_xa_commit(fx.tables, "x", 1, NULL, NULL),
                  TROUPE_EINVAL);
    troupe_xa_page *p = NULL;
    ck_assert_err(troupe_xa_list_wait(fx.tables, NULL, 0, 0, &p),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_xa_list_wait(fx.tables, NULL, 0, TROUPE_XA_PAGE_MAX + 1, &p),
        TROUPE_EINVAL);
    ck_assert_err(troupe_xa_list_wait(NULL, NULL, 0, 1, &p), TROUPE_EINVAL);
    ck_assert_err(troupe_xa_list_wait(fx.tables, NULL, 0, 1, NULL),
                  TROUPE_EINVAL);
    /* what cannot be prepared: participants, the versioned calls */
    troupe_txn *t2 = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t2));
    troupe_txn_part part = {.done = part_done};
    ck_assert_ok(troupe_txn_attach(t2, &part));
    ck_assert_err(troupe_txn_prepare(t2, "p", 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_errmsg(TROUPE_EINVAL), "participants"));
    troupe_txn_destroy(t2);
    ck_assert_int_eq(parts_done, 1); /* told ECANCELED, once */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t2));
    ck_assert_ok(troupe_txn_read_version(t2, "a", "x", 1, 1));
    ck_assert_err(troupe_txn_prepare(t2, "p", 1, never_cb, NULL),
                  TROUPE_ESTATE);
    troupe_txn_destroy(t2);
    /* the transaction is still open after all that, and prepares */
    ck_assert_ok(troupe_txn_prepare_wait(tx, ok, TROUPE_XA_XID_MAX));
    ck_assert_err(troupe_txn_prepare_wait(tx, "again", 5), TROUPE_ESTATE);
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_xa_list_wait(fx.tables, NULL, 0, 1, &p));
    ck_assert_uint_eq(p->n, 1);
    ck_assert_uint_eq(p->v[0].xid_len, TROUPE_XA_XID_MAX);
    troupe_xa_page_destroy(p);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, ok, TROUPE_XA_XID_MAX));
    ck_assert_int_eq(stored("a", "x"), 1);
}
END_TEST

START_TEST(test_xa_list_pages_in_xid_order)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    const char *xids[] = {"c", "a", "b"};
    for (int i = 0; i < 3; i++) {
        troupe_txn *tx = NULL;
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
        ck_assert_ok(txput(tx, "a", xids[i], i));
        ck_assert_ok(troupe_txn_prepare_wait(tx, xids[i], 1));
        troupe_txn_destroy(tx);
    }
    troupe_xa_page *p = NULL;
    ck_assert_ok(troupe_xa_list_wait(fx.tables, NULL, 0, 2, &p));
    ck_assert_uint_eq(p->n, 2);
    ck_assert_str_eq(p->v[0].xid, "a");
    ck_assert_str_eq(p->v[1].xid, "b");
    ck_assert(p->more);
    troupe_xa_page_destroy(p);
    ck_assert_ok(troupe_xa_list_wait(fx.tables, "b", 1, 2, &p));
    ck_assert_uint_eq(p->n, 1);
    ck_assert_str_eq(p->v[0].xid, "c");
    ck_assert(!p->more);
    troupe_xa_page_destroy(p);
    for (int i = 0; i < 3; i++)
        ck_assert_ok(troupe_xa_rollback_wait(fx.tables, xids[i], 1));
}
END_TEST

START_TEST(test_xa_held_unique_value_refuses_writes_claiming_it)
{
    static const troupe_index_field vf = {"v", TROUPE_FIELD_INT};
    troupe_index_spec spec = {
        .name = "by_v", .fields = &vf, .n_fields = 1, .unique = true};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", &spec, 1));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "u", "k1", 7));
    ck_assert_ok(troupe_txn_prepare_wait(tx, "uq/1", 4));
    troupe_txn_destroy(tx);
    /* another key with the held value: a single write is refused, not
     * parked; a transaction conflicts */
    size_t n;
    const void *d = doc(7, &n);
    atomic_store(&async_done, 0);
    ck_assert_ok(troupe_table_upsert(fx.tables, "u", "k2", 2, d, n, NULL,
                                     on_async_write, NULL));
    ck_assert(ts_wait_until(async_finished, NULL, 10000));
    ck_assert_err(async_err, TROUPE_EBUSY);
    ck_assert_ptr_nonnull(strstr(async_msg, "\"uq/1\""));
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "u", "k3", 7));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON), TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    ck_assert_ok(put("u", "k4", 8)); /* another value is free */
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "uq/1", 4));
    ck_assert_err(put("u", "k2", 7), TROUPE_ECONSTRAINT); /* k1 has it */
    ck_assert_int_eq(stored("u", "k1"), 7);
}
END_TEST

START_TEST(test_xa_purge_passes_over_held_expired_rows)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    size_t n;
    const void *d = doc(1, &n);
    troupe_write_opts wo = {.expires_at_ms = fx.now + 10};
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "a", "e1", 2, d, n, &wo));
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "a", "e2", 2, d, n, &wo));
    fx.now += 100; /* both expired */
    /* held: e1, read (absent now: expired); e2 is not */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txget(tx, "a", "e1"), -1);
    ck_assert_ok(txput(tx, "a", "other", 1));
    ck_assert_ok(troupe_txn_prepare_wait(tx, "p1", 2));
    troupe_txn_destroy(tx);
    /* the pass ends (it would wait for ever behind the held key), and
     * deletes the expired row nobody holds */
    troupe_purge_result r;
    ck_assert_ok(troupe_tables_purge_expired_wait(fx.tables, "a", &r));
    ck_assert_uint_eq(r.purged, 1);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "p1", 2));
    ck_assert_ok(troupe_tables_purge_expired_wait(fx.tables, "a", &r));
    ck_assert_uint_eq(r.purged, 1); /* e1, free now */
    ck_assert_int_eq(stored("a", "other"), 1);
}
END_TEST

/* The stored markers, counted. */
static size_t
markers(void)
{
    troupe_key_writer w;
    troupe_range rg;
    troupe_iter *it = NULL;
    troupe_kv kv;
    size_t n = 0;
    troupe_key_writer_init(&w);
    ck_assert_ok(troupe_key_put_string(&w, "xa-done", 7));
    ck_assert_ok(troupe_key_writer_range(&w, &rg));
    ck_assert_ok(troupe_iter_create(fx.db, troupe__catalog_meta(fx.cat), NULL,
                                    &rg, NULL, 0, false, &it));
    troupe_err e;
    while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK)
        n++;
    ck_assert_err(e, TROUPE_ENOENT);
    troupe_iter_destroy(it);
    troupe_key_writer_fini(&w);
    return n;
}

START_TEST(test_xa_markers_are_bounded_oldest_first)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    char xid[16];
    for (int i = 0; i <= TROUPE_XA_MARKS_MAX; i++) {
        snprintf(xid, sizeof(xid), "m%d", i);
        troupe_txn *tx = NULL;
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
        ck_assert_ok(txput(tx, "a", "k", i));
        ck_assert_ok(troupe_txn_prepare_wait(tx, xid, strlen(xid)));
        troupe_txn_destroy(tx);
        ck_assert_ok(troupe_xa_rollback_wait(fx.tables, xid, strlen(xid)));
    }
    ck_assert_uint_eq(markers(), TROUPE_XA_MARKS_MAX);
    /* one more stored, older than all (two resolutions racing past the
     * bound can leave one): the next open deletes it */
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    ck_assert_ok(troupe__xa_key(&w, "xa-done", "zz", 2));
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &kl));
    const unsigned char mark[] = {0x94, 1, TROUPE__XA_ROLLED_BACK, 0, 1};
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, troupe__catalog_meta(fx.cat), k, kl, mark,
                                  sizeof(mark)));
    ck_assert_ok(troupe_db_write(fx.db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    ck_assert_uint_eq(markers(), TROUPE_XA_MARKS_MAX + 1);
    fx_close();
    ck_assert_ok(fx_open());
    ck_assert_uint_eq(markers(), TROUPE_XA_MARKS_MAX);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "zz", 2));
    for (int pass = 0; pass < 2; pass++) {
        /* m0's marker went with the 1025th; m1's is the oldest kept */
        ck_assert_ok(troupe_xa_commit_wait(fx.tables, "m0", 2));
        ck_assert_err(troupe_xa_commit_wait(fx.tables, "m1", 2),
                      TROUPE_ECONFLICT);
        snprintf(xid, sizeof(xid), "m%d", TROUPE_XA_MARKS_MAX);
        ck_assert_err(troupe_xa_commit_wait(fx.tables, xid, strlen(xid)),
                      TROUPE_ECONFLICT);
        fx_close(); /* and so after a reopen */
        ck_assert_ok(fx_open());
    }
    ck_assert_uint_eq(markers(), TROUPE_XA_MARKS_MAX);
    ck_assert_int_eq(stored("a", "k"), -1);
}
END_TEST

/* A child prepares and is killed (SIGKILL) right after: the parent
 * reopens the database and finds the xid held and listed, and its
 * commit applies the writes. */
START_TEST(test_xa_crash_after_prepare_keeps_the_xid_held)
{
    char buf[256];
    memset(&fx, 0, sizeof(fx));
    fx.now = 5000000;
    fx.dir = ts_tempdir("xa_crash");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (fx_open() != TROUPE_OK ||
            troupe_tables_create_wait(fx.tables, "a", NULL, 0) != TROUPE_OK)
            _exit(2);
        troupe_txn *tx = NULL;
        if (troupe_txn_begin(fx.tables, NULL, &tx) != TROUPE_OK ||
            txput(tx, "a", "k", 42) != TROUPE_OK ||
            troupe_txn_prepare_wait(tx, "crash/01", 8) != TROUPE_OK)
            _exit(3);
        raise(SIGKILL);
        _exit(4);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ck_assert_ok(fx_open());
    ck_assert_str_eq(listed(buf, sizeof(buf)), "crash/01");
    ck_assert_err(put("a", "k", 1), TROUPE_EBUSY);
    ck_assert_int_eq(stored("a", "k"), -1);
    ck_assert_ok(troupe_xa_commit_wait(fx.tables, "crash/01", 8));
    ck_assert_int_eq(stored("a", "k"), 42);
    fx_close();
    ts_rmtree(fx.dir);
    free(fx.dir);
}
END_TEST

Suite *
xa_suite(void)
{
    Suite *s = suite_create("xa");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc,
                   test_xa_prepare_then_commit_applies_writes_and_drops_record);
    tcase_add_test(tc, test_xa_prepare_then_rollback_leaves_nothing);
    tcase_add_test(
        tc,
        test_xa_resolving_a_resolved_xid_is_ok_unless_it_went_the_other_way);
    tcase_add_test(tc,
                   test_xa_held_keys_refuse_other_txns_single_writes_and_ddl);
    tcase_add_test(
        tc, test_xa_reopen_holds_the_xid_and_commits_exactly_what_was_prepared);
    tcase_add_test(tc,
                   test_xa_corrupt_record_is_ecorrupt_at_open_naming_the_xid);
    tcase_add_test(tc, test_xa_bad_arguments_are_einval_with_a_detail);
    tcase_add_test(tc, test_xa_list_pages_in_xid_order);
    tcase_add_test(tc, test_xa_markers_are_bounded_oldest_first);
    tcase_add_test(tc, test_xa_purge_passes_over_held_expired_rows);
    tcase_add_test(tc, test_xa_held_unique_value_refuses_writes_claiming_it);
    tcase_add_test(tc,
                   test_xa_read_only_tables_hold_nothing_and_resolve_nothing);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("crash");
    tcase_set_timeout(tk, 120);
    tcase_add_test(tk, test_xa_crash_after_prepare_keeps_the_xid_held);
    suite_add_tcase(s, tk);
    return s;
}
