/* Transactions: snapshot reads, read-your-writes, two-phase commit across
 * tables, conflicts with their exact sets, atomicity, rollback, the retry
 * helper, limits and bad arguments. Real RocksDB in a temp dir, a
 * standalone runtime (blocking twins on the test thread; asynchronous
 * commits call back on scheduler 0). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/tables.h"
#include "troupe/pack.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "tsupport.h"

typedef struct tx_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    char *dir;
} tx_fx;

static tx_fx fx;

static void
setup(void)
{
    memset(&fx, 0, sizeof(fx));
    fx.dir = ts_tempdir("txn");
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
}

static void
teardown(void)
{
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_tables_destroy(fx.tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
    ts_rmtree(fx.dir);
    free(fx.dir);
}

/* {"v": v} or {"email": s}; static buffers, one per slot. */
static unsigned char dbuf[4][256];
static size_t dlen[4];

/* Documents come with their lengths as pure functions of the arguments
 * (the order in which a call's arguments are evaluated is unspecified):
 * DV packs {"v": int64} in a fixed 12 bytes, DS {f: s} for short f, s. */
#define DV(slot, v) docv(slot, v), (size_t)12
#define DS(slot, f, s) docs(slot, f, s), (size_t)(3 + strlen(f) + strlen(s))

static const void *
docv(int slot, int64_t v)
{
    unsigned char *b = dbuf[slot];
    b[0] = 0x81; /* map of 1 */
    b[1] = 0xa1; /* str of 1 */
    b[2] = 'v';
    b[3] = 0xd3; /* int 64 */
    for (int i = 0; i < 8; i++)
        b[4 + i] = (unsigned char)((uint64_t)v >> (56 - 8 * i));
    dlen[slot] = 12;
    return b;
}

static const void *
docs(int slot, const char *field, const char *s)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, field);
    troupe_pack_cstr(&p, s);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    memcpy(dbuf[slot], d, n);
    dlen[slot] = n;
    troupe_pack_fini(&p);
    return dbuf[slot];
}

/* The "v" of a document {"v": int}. */
static int64_t
vof(const troupe_row *r)
{
    troupe_reader rd;
    uint32_t n = 0;
    const char *k;
    size_t kl;
    int64_t v = -1;
    troupe_reader_init(&rd, r->doc, r->doc_len);
    troupe_read_map(&rd, &n);
    ck_assert_uint_eq(n, 1);
    troupe_read_str(&rd, 16, &k, &kl);
    troupe_read_int(&rd, &v);
    ck_assert_ok(rd.err);
    return v;
}

/* The stored v of table t, key k (outside any transaction); -1: absent. */
static int64_t
stored(const char *t, const char *k)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, t, k, strlen(k), &rows);
    if (e == TROUPE_ENOENT)
        return -1;
    ck_assert_ok(e);
    int64_t v = vof(&rows->rows[0]);
    troupe_rows_destroy(rows);
    return v;
}

static void
put(const char *t, const char *k, int64_t v)
{
    ck_assert_ok(
        troupe_table_upsert_wait(fx.tables, t, k, strlen(k), DV(3, v), NULL));
}

/* The v a transaction reads; -1: ENOENT. */
static int64_t
txv(troupe_txn *tx, const char *t, const char *k)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_txn_get_wait(tx, t, k, strlen(k), &rows);
    if (e == TROUPE_ENOENT) {
        ck_assert_ptr_null(rows);
        return -1;
    }
    ck_assert_ok(e);
    ck_assert_uint_eq(rows->n, 1);
    int64_t v = vof(&rows->rows[0]);
    troupe_rows_destroy(rows);
    return v;
}

static troupe_err
txput(troupe_txn *tx, const char *t, const char *k, int64_t v)
{
    return troupe_txn_upsert(tx, t, k, strlen(k), DV(0, v), NULL);
}

static void
assert_conflicts(troupe_txn *tx, size_t n, const char *const *tabs,
                 const char *const *keys)
{
    const troupe_txn_conflict *c = NULL;
    size_t got = 0;
    ck_assert_ok(troupe_txn_conflicts(tx, &c, &got));
    ck_assert_uint_eq(got, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(c[i].table, tabs[i]);
        ck_assert_uint_eq(c[i].key_len, strlen(keys[i]));
        ck_assert(memcmp(c[i].key, keys[i], c[i].key_len) == 0);
    }
}

/* ---- tests ------------------------------------------------------------- */

START_TEST(test_txn_reads_see_snapshot_plus_own_writes)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "k1", 1);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    put("a", "k1", 2); /* after the snapshot: invisible to tx */
    put("a", "k2", 5);
    ck_assert_int_eq(txv(tx, "a", "k1"), 1);
    ck_assert_int_eq(txv(tx, "a", "k2"), -1);
    ck_assert_ok(txput(tx, "a", "k3", 3));
    ck_assert_int_eq(txv(tx, "a", "k3"), 3);
    ck_assert_ok(troupe_txn_delete(tx, "a", "k1", 2));
    ck_assert_int_eq(txv(tx, "a", "k1"), -1);
    put("a", "k4", 4);
    const void *keys[4] = {"k1", "k3", "k2", "k0"};
    size_t kl[4] = {2, 2, 2, 2};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_txn_get_many_wait(tx, "a", keys, kl, 4, &rows));
    ck_assert_uint_eq(rows->n, 1);
    ck_assert_int_eq(vof(&rows->rows[0]), 3);
    troupe_rows_destroy(rows);
    /* several rows, snapshot and buffered, in the order asked; none: n 0 */
    ck_assert_ok(txput(tx, "a", "k5", 5));
    const void *k2[3] = {"k5", "k0", "k3"};
    ck_assert_ok(troupe_txn_get_many_wait(tx, "a", k2, kl, 3, &rows));
    ck_assert_uint_eq(rows->n, 2);
    ck_assert_int_eq(vof(&rows->rows[0]), 5);
    ck_assert_int_eq(vof(&rows->rows[1]), 3);
    troupe_rows_destroy(rows);
    const void *k3[2] = {"k0", "k1"};
    ck_assert_ok(troupe_txn_get_many_wait(tx, "a", k3, kl, 2, &rows));
    ck_assert_uint_eq(rows->n, 0);
    troupe_rows_destroy(rows);
    /* nothing of it is visible outside before the commit */
    ck_assert_int_eq(stored("a", "k3"), -1);
    ck_assert_ok(troupe_txn_rollback(tx));
    ck_assert_err(troupe_txn_get_wait(tx, "a", "k1", 2, &rows), TROUPE_ESTATE);
    ck_assert_err(txput(tx, "a", "k9", 1), TROUPE_ESTATE);
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ESTATE);
    ck_assert_err(troupe_txn_rollback(tx), TROUPE_ESTATE);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "k3"), -1);
    ck_assert_int_eq(stored("a", "k1"), 2);
}
END_TEST

START_TEST(test_txn_commit_writes_every_table_and_index)
{
    static const troupe_index_field vf = {"v", TROUPE_FIELD_INT};
    troupe_index_spec spec = {.name = "by_v", .fields = &vf, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", &spec, 1));
    put("a", "gone", 9);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_insert(tx, "a", "x", 1, DV(0, 1), NULL));
    ck_assert_ok(txput(tx, "b", "y", 7));
    ck_assert_ok(troupe_txn_delete(tx, "a", "gone", 4));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON), TROUPE_ESTATE);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "x"), 1);
    ck_assert_int_eq(stored("b", "y"), 7);
    ck_assert_int_eq(stored("a", "gone"), -1);
    /* the index entry came in the same commit */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_int(&p, 7);
    size_t vl;
    const void *vals = troupe_pack_data(&p, &vl);
    troupe_index_query q = {.values = vals, .values_len = vl, .limit = 10};
    uint64_t n = 0;
    ck_assert_ok(troupe_tables_count_wait(fx.tables, "b", "by_v", &q, &n));
    ck_assert_uint_eq(n, 1);
    troupe_pack_fini(&p);
    /* and the keys are free again for ordinary writes */
    put("a", "x", 2);
    ck_assert_int_eq(stored("a", "x"), 2);
}
END_TEST

START_TEST(test_txn_write_write_and_read_conflicts_give_exact_sorted_set)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    put("a", "x", 1);
    put("a", "y", 1);
    put("b", "z", 1);
    put("b", "q", 1);
    troupe_txn *t1 = NULL, *t2 = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t1));
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t2));
    /* t2 reads b:z, a:y, b:q (unchanged), writes a:x and b:w */
    ck_assert_int_eq(txv(t2, "b", "z"), 1);
    ck_assert_int_eq(txv(t2, "a", "y"), 1);
    ck_assert_int_eq(txv(t2, "b", "q"), 1);
    ck_assert_ok(txput(t2, "a", "x", 20));
    ck_assert_ok(txput(t2, "b", "w", 20));
    /* t1 writes a:x, a:y, b:z and commits first */
    ck_assert_ok(txput(t1, "b", "z", 10));
    ck_assert_ok(txput(t1, "a", "y", 10));
    ck_assert_ok(txput(t1, "a", "x", 10));
    ck_assert_ok(troupe_txn_commit_wait(t1, TROUPE_SYNC_DEFAULT));
    ck_assert_err(troupe_txn_commit_wait(t2, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *tabs[] = {"a", "a", "b"};
    const char *keys[] = {"x", "y", "z"};
    assert_conflicts(t2, 3, tabs, keys);
    troupe_txn_destroy(t1);
    troupe_txn_destroy(t2);
    /* t2 wrote nothing */
    ck_assert_int_eq(stored("a", "x"), 10);
    ck_assert_int_eq(stored("b", "w"), -1);
}
END_TEST

START_TEST(test_txn_read_changed_by_ordinary_write_conflicts_nothing_written)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "x", 1);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txv(tx, "a", "x"), 1);
    ck_assert_int_eq(txv(tx, "a", "nope"), -1);
    put("a", "x", 2);
    put("a", "nope", 2); /* a read of an absent key conflicts too */
    ck_assert_ok(txput(tx, "a", "other", 1));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *tabs[] = {"a", "a"};
    const char *keys[] = {"nope", "x"};
    assert_conflicts(tx, 2, tabs, keys);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "other"), -1);
    /* an unrelated transaction still commits */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txv(tx, "a", "x"), 2);
    ck_assert_ok(txput(tx, "a", "other", 3));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    const troupe_txn_conflict *c;
    size_t n = 9;
    ck_assert_ok(troupe_txn_conflicts(tx, &c, &n));
    ck_assert_uint_eq(n, 0);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "other"), 3);
}
END_TEST

START_TEST(test_txn_unique_failure_on_one_table_aborts_whole_txn)
{
    static const troupe_index_field ef = {"email", TROUPE_FIELD_STRING};
    troupe_index_spec spec = {
        .name = "by_email", .unique = true, .fields = &ef, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", &spec, 1));
    ck_assert_ok(troupe_table_insert_wait(fx.tables, "u", "1", 1,
                                          DS(1, "email", "x@y"), NULL));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "k", 1));
    ck_assert_ok(
        troupe_txn_insert(tx, "u", "2", 1, DS(1, "email", "x@y"), NULL));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONSTRAINT);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "k"), -1);
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_table_get_wait(fx.tables, "u", "2", 1, &rows),
                  TROUPE_ENOENT);
    /* two rows of one transaction claiming one value: ECONSTRAINT too */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(
        troupe_txn_insert(tx, "u", "3", 1, DS(1, "email", "z@y"), NULL));
    ck_assert_ok(
        troupe_txn_insert(tx, "u", "4", 1, DS(1, "email", "z@y"), NULL));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONSTRAINT);
    troupe_txn_destroy(tx);
    /* no reservation was left behind: ordinary writes go through */
    put("a", "k", 5);
    ck_assert_int_eq(stored("a", "k"), 5);
    ck_assert_ok(troupe_table_insert_wait(fx.tables, "u", "3", 1,
                                          DS(1, "email", "z@y"), NULL));
}
END_TEST

START_TEST(test_txn_write_rules_checked_in_txn_view_and_at_commit)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "x", 1);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    /* known in the transaction's view */
    ck_assert_ok(troupe_txn_insert(tx, "a", "n", 1, DV(0, 1), NULL));
    ck_assert_err(troupe_txn_insert(tx, "a", "n", 1, DV(0, 1), NULL),
                  TROUPE_EEXIST);
    ck_assert_ok(troupe_txn_delete(tx, "a", "x", 1));
    ck_assert_err(troupe_txn_update(tx, "a", "x", 1, DV(0, 1), NULL),
                  TROUPE_ENOENT);
    ck_assert_err(troupe_txn_delete(tx, "a", "x", 1), TROUPE_ENOENT);
    ck_assert_ok(troupe_txn_rollback(tx));
    troupe_txn_destroy(tx);
    /* known only at commit, against the (unchanged) stored row */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_insert(tx, "a", "x", 1, DV(0, 7), NULL));
    ck_assert_ok(txput(tx, "a", "side", 1));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_EEXIST);
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_update(tx, "a", "missing", 7, DV(0, 7), NULL));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ENOENT);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "x"), 1);
    ck_assert_int_eq(stored("a", "side"), -1);
    ck_assert_int_eq(stored("a", "missing"), -1);
}
END_TEST

#define NCONC 8

static atomic_int conc_done, conc_ok, conc_conflict;

static void
on_conc(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c, size_t n,
        void *arg)
{
    if (err == TROUPE_OK)
        atomic_fetch_add(&conc_ok, 1);
    if (err == TROUPE_ECONFLICT && n == 1 && strcmp(c[0].table, "a") == 0 &&
        c[0].key_len == 1 && c[0].key[0] == 'c')
        atomic_fetch_add(&conc_conflict, 1);
    atomic_fetch_add(&conc_done, 1);
}

static bool
conc_all(void *arg)
{
    return atomic_load(&conc_done) == NCONC;
}

START_TEST(test_txn_concurrent_commits_on_one_key_exactly_one_wins)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "c", 0);
    troupe_txn *tx[NCONC];
    for (int i = 0; i < NCONC; i++) {
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx[i]));
        ck_assert_int_eq(txv(tx[i], "a", "c"), 0);
        ck_assert_ok(txput(tx[i], "a", "c", i + 1));
    }
    atomic_store(&conc_done, 0);
    atomic_store(&conc_ok, 0);
    atomic_store(&conc_conflict, 0);
    for (int i = 0; i < NCONC; i++)
        ck_assert_ok(
            troupe_txn_commit(tx[i], TROUPE_SYNC_DEFAULT, on_conc, NULL));
    ck_assert(ts_wait_until(conc_all, NULL, 20000));
    ck_assert_int_eq(atomic_load(&conc_ok), 1);
    ck_assert_int_eq(atomic_load(&conc_conflict), NCONC - 1);
    for (int i = 0; i < NCONC; i++)
        troupe_txn_destroy(tx[i]);
    ck_assert_int_ge(stored("a", "c"), 1);
}
END_TEST

typedef struct incr {
    int calls;
    bool interfere;
    troupe_err fail;
} incr;

static troupe_err
fn_incr(troupe_txn *tx, void *arg)
{
    incr *c = arg;
    c->calls++;
    if (c->fail != TROUPE_OK)
        return c->fail;
    int64_t v = txv(tx, "a", "n");
    if (c->interfere && c->calls == 1)
        put("a", "n", 100); /* another writer wins the first round */
    return txput(tx, "a", "n", v + 1);
}

static troupe_err
fn_always_conflicts(troupe_txn *tx, void *arg)
{
    incr *c = arg;
    c->calls++;
    int64_t v = txv(tx, "a", "n");
    put("a", "n", v + 1000);
    return txput(tx, "a", "n", v + 1);
}

START_TEST(test_txn_retry_helper_replays_on_conflict_only)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "n", 0);
    uint32_t attempts = 0;
    incr c = {.interfere = true};
    troupe_txn_retry r = {.attempts = &attempts, .base_ms = 1, .max_ms = 5};
    ck_assert_ok(troupe_txn_run_wait(fx.tables, NULL, &r, fn_incr, &c));
    ck_assert_uint_eq(attempts, 2);
    ck_assert_int_eq(c.calls, 2);
    ck_assert_int_eq(stored("a", "n"), 101);
    /* the function's own error is returned, not replayed */
    incr f = {.fail = TROUPE_EINVAL};
    ck_assert_err(troupe_txn_run_wait(fx.tables, NULL, &r, fn_incr, &f),
                  TROUPE_EINVAL);
    ck_assert_int_eq(f.calls, 1);
    ck_assert_uint_eq(attempts, 1);
    /* attempts are bounded */
    incr g = {0};
    r.max_attempts = 3;
    ck_assert_err(
        troupe_txn_run_wait(fx.tables, NULL, &r, fn_always_conflicts, &g),
        TROUPE_ECONFLICT);
    ck_assert_int_eq(g.calls, 3);
    ck_assert_uint_eq(attempts, 3);
    ck_assert_err(troupe_txn_run_wait(NULL, NULL, &r, fn_incr, &c),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_run_wait(fx.tables, NULL, &r, NULL, &c),
                  TROUPE_EINVAL);
}
END_TEST

static atomic_int skew_done, skew_ok;

static void
on_skew(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c, size_t n,
        void *arg)
{
    if (err == TROUPE_OK)
        atomic_fetch_add(&skew_ok, 1);
    else
        ck_assert_int_eq(err, TROUPE_ECONFLICT);
    atomic_fetch_add(&skew_done, 1);
}

static bool
skew_all(void *arg)
{
    return atomic_load(&skew_done) == 2;
}

/* Write skew: t1 reads a:x and writes b:y, t2 reads b:y and writes a:x,
 * committing at the same time. Serializable means never both. */
START_TEST(test_txn_write_skew_never_commits_both)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    for (int round = 0; round < 60; round++) {
        put("a", "x", 0);
        put("b", "y", 0);
        troupe_txn *t1 = NULL, *t2 = NULL;
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t1));
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t2));
        ck_assert_int_eq(txv(t1, "a", "x"), 0);
        ck_assert_int_eq(txv(t2, "b", "y"), 0);
        ck_assert_ok(txput(t1, "b", "y", 1));
        ck_assert_ok(txput(t2, "a", "x", 1));
        atomic_store(&skew_done, 0);
        atomic_store(&skew_ok, 0);
        ck_assert_ok(troupe_txn_commit(t1, TROUPE_SYNC_OFF, on_skew, NULL));
        ck_assert_ok(troupe_txn_commit(t2, TROUPE_SYNC_OFF, on_skew, NULL));
        ck_assert(ts_wait_until(skew_all, NULL, 10000));
        int ok = atomic_load(&skew_ok);
        ck_assert_int_le(ok, 1);
        ck_assert(!(stored("a", "x") == 1 && stored("b", "y") == 1));
        troupe_txn_destroy(t1);
        troupe_txn_destroy(t2);
    }
}
END_TEST

#define NTHREADS 4
#define NINCR 10

static troupe_err
fn_plain_incr(troupe_txn *tx, void *arg)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_txn_get_wait(tx, "a", "n", 1, &rows);
    if (e != TROUPE_OK)
        return e;
    int64_t v = vof(&rows->rows[0]);
    troupe_rows_destroy(rows);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "v");
    troupe_pack_int(&p, v + 1);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    e = troupe_txn_upsert(tx, "a", "n", 1, d, n, NULL);
    troupe_pack_fini(&p);
    return e;
}

static atomic_int thr_fail;

static void
incr_thread(void *arg)
{
    troupe_txn_retry r = {.max_attempts = 1000, .base_ms = 1, .max_ms = 4};
    for (int i = 0; i < NINCR; i++)
        if (troupe_txn_run_wait(fx.tables, NULL, &r, fn_plain_incr, NULL) !=
            TROUPE_OK)
            atomic_fetch_add(&thr_fail, 1);
}

START_TEST(test_txn_concurrent_increments_are_serializable)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "n", 0);
    atomic_store(&thr_fail, 0);
    uv_thread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(uv_thread_create(&th[i], incr_thread, NULL), 0);
    for (int i = 0; i < NTHREADS; i++)
        uv_thread_join(&th[i]);
    ck_assert_int_eq(atomic_load(&thr_fail), 0);
    ck_assert_int_eq(stored("a", "n"), NTHREADS * NINCR);
}
END_TEST

START_TEST(test_txn_limits_are_etoobig)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_txn *tx = NULL;
    troupe_txn_opts o = {.max_keys = 2, .max_bytes = 64};
    ck_assert_ok(troupe_txn_begin(fx.tables, &o, &tx));
    ck_assert_int_eq(txv(tx, "a", "k1"), -1);
    ck_assert_ok(txput(tx, "a", "k2", 1));
    ck_assert_ok(txput(tx, "a", "k2", 2)); /* same key: no new entry */
    ck_assert_err(txput(tx, "a", "k3", 1), TROUPE_ETOOBIG);
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_get_wait(tx, "a", "k4", 2, &rows), TROUPE_ETOOBIG);
    unsigned char big[100];
    memset(big, 'x', sizeof(big));
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "v");
    troupe_pack_bin(&p, big, sizeof(big));
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    ck_assert_err(troupe_txn_upsert(tx, "a", "k2", 2, d, n, NULL),
                  TROUPE_ETOOBIG);
    troupe_pack_fini(&p);
    /* what was buffered before the errors still commits */
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "k2"), 2);
    troupe_txn_opts bad = {.max_keys = TROUPE_TXN_KEYS_MAX + 1};
    ck_assert_err(troupe_txn_begin(fx.tables, &bad, &tx), TROUPE_EINVAL);
    bad = (troupe_txn_opts){.max_bytes = TROUPE_TXN_BYTES_MAX + 1};
    ck_assert_err(troupe_txn_begin(fx.tables, &bad, &tx), TROUPE_EINVAL);
}
END_TEST

START_TEST(test_txn_sync_flag_reaches_the_pipeline)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_commit_stats s0, s1, s2;
    troupe_txn *tx = NULL;
    troupe_commit_get_stats(fx.commit, &s0);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "k", 1));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_OFF));
    troupe_txn_destroy(tx);
    troupe_commit_get_stats(fx.commit, &s1);
    ck_assert_uint_eq(s1.batches, s0.batches + 1);
    ck_assert_uint_eq(s1.syncs, s0.syncs);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "k", 2));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON));
    troupe_txn_destroy(tx);
    troupe_commit_get_stats(fx.commit, &s2);
    ck_assert_uint_eq(s2.batches, s1.batches + 1);
    ck_assert_uint_eq(s2.syncs, s1.syncs + 1);
    /* a read-only transaction writes nothing */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txv(tx, "a", "k"), 2);
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON));
    troupe_txn_destroy(tx);
    troupe_commit_get_stats(fx.commit, &s1);
    ck_assert_uint_eq(s1.batches, s2.batches);
}
END_TEST

static void
never_cb(troupe_err err, troupe_rows *rows, void *arg)
{
    ck_abort_msg("callback of a failed call");
}

static void
never_commit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
             size_t n, void *arg)
{
    ck_abort_msg("callback of a failed call");
}

START_TEST(test_txn_bad_arguments)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_txn *tx = NULL;
    ck_assert_err(troupe_txn_begin(NULL, NULL, &tx), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_begin(fx.tables, NULL, NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    const void *d = docv(0, 1);
    size_t dl = dlen[0];
    static unsigned char bigkey[TROUPE_KEY_MAX + 1];
    troupe_err (*wr[3])(troupe_txn *, const char *, const void *, size_t,
                        const void *, size_t, const troupe_write_opts *) = {
        troupe_txn_insert, troupe_txn_update, troupe_txn_upsert};
    troupe_write_opts neg = {.expires_at_ms = -1};
    static const unsigned char notmap[] = {0x01};
    for (int i = 0; i < 3; i++) {
        ck_assert_err(wr[i](NULL, "a", "k", 1, d, dl, NULL), TROUPE_EINVAL);
        ck_assert_err(wr[i](tx, NULL, "k", 1, d, dl, NULL), TROUPE_EINVAL);
        ck_assert_err(wr[i](tx, "a", NULL, 1, d, dl, NULL), TROUPE_EINVAL);
        ck_assert_err(wr[i](tx, "a", "k", 0, d, dl, NULL), TROUPE_EINVAL);
        ck_assert_err(wr[i](tx, "a", "k", 1, NULL, dl, NULL), TROUPE_EINVAL);
        ck_assert_err(wr[i](tx, "a", "k", 1, d, dl, &neg), TROUPE_EINVAL);
        ck_assert_err(wr[i](tx, "a", bigkey, sizeof(bigkey), d, dl, NULL),
                      TROUPE_ETOOBIG);
        ck_assert_err(wr[i](tx, "a", "k", 1, notmap, 1, NULL), TROUPE_EPROTO);
        ck_assert_err(wr[i](tx, "nosuch", "k", 1, d, dl, NULL),
                      TROUPE_ENOTABLE);
        ck_assert_err(wr[i](tx, "", "k", 1, d, dl, NULL), TROUPE_EINVAL);
    }
    ck_assert_err(troupe_txn_delete(NULL, "a", "k", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_delete(tx, NULL, "k", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_delete(tx, "a", NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_delete(tx, "a", "k", 0), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_delete(tx, "a", bigkey, sizeof(bigkey)),
                  TROUPE_ETOOBIG);
    ck_assert_err(troupe_txn_delete(tx, "nosuch", "k", 1), TROUPE_ENOTABLE);
    ck_assert_err(troupe_txn_get(NULL, "a", "k", 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get(tx, NULL, "k", 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get(tx, "a", NULL, 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get(tx, "a", "k", 0, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get(tx, "a", "k", 1, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(
        troupe_txn_get(tx, "a", bigkey, sizeof(bigkey), never_cb, NULL),
        TROUPE_ETOOBIG);
    ck_assert_err(troupe_txn_get(tx, "nosuch", "k", 1, never_cb, NULL),
                  TROUPE_ENOTABLE);
    const void *keys[1] = {"k"};
    size_t kl[1] = {1};
    ck_assert_err(troupe_txn_get_many(tx, "a", NULL, kl, 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get_many(tx, "a", keys, NULL, 1, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get_many(tx, "a", keys, kl,
                                      TROUPE_TABLE_PAGE_MAX + 1, never_cb,
                                      NULL),
                  TROUPE_EINVAL);
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_get_wait(tx, "a", "k", 1, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get_many_wait(tx, "a", keys, kl, 1, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_get_many_wait(tx, "a", NULL, kl, 1, &rows),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(rows);
    ck_assert_err(troupe_txn_commit(NULL, TROUPE_SYNC_ON, never_commit, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_commit(tx, TROUPE_SYNC_ON, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_commit(tx, (troupe_sync)7, never_commit, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_commit_wait(NULL, TROUPE_SYNC_ON), TROUPE_EINVAL);
    const troupe_txn_conflict *c;
    size_t n;
    ck_assert_err(troupe_txn_conflicts(NULL, &c, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_conflicts(tx, NULL, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_conflicts(tx, &c, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_rollback(NULL), TROUPE_EINVAL);
    troupe_txn_destroy(NULL);
    /* nothing of the failed calls was buffered: the commit writes nothing */
    troupe_commit_stats s0, s1;
    troupe_commit_get_stats(fx.commit, &s0);
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_commit_get_stats(fx.commit, &s1);
    ck_assert_uint_eq(s1.batches, s0.batches);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "k"), -1);
}
END_TEST

START_TEST(test_txn_begin_after_stop_is_estate)
{
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_txn *tx = NULL;
    ck_assert_err(troupe_txn_begin(fx.tables, NULL, &tx), TROUPE_ESTATE);
    ck_assert_ptr_null(tx);
    /* teardown stops again: reopen a fresh catalog for it */
    troupe_tables_destroy(fx.tables);
    troupe_tables_opts to = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
}
END_TEST

/* ---- scans ------------------------------------------------------------- */

static void
assert_page(const troupe_rows *rows, const char *keys, const int64_t *vals,
            bool more)
{
    size_t n = strlen(keys);
    ck_assert_uint_eq(rows->n, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(rows->rows[i].key_len, 1);
        ck_assert_int_eq(rows->rows[i].key[0], keys[i]);
        ck_assert_int_eq(vof(&rows->rows[i]), vals[i]);
    }
    ck_assert(rows->more == more);
}

START_TEST(test_txn_scan_merges_snapshot_with_own_writes)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "a", 1);
    put("a", "b", 2);
    put("a", "c", 3);
    put("a", "d", 4);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    put("a", "e", 9); /* after the snapshot */
    ck_assert_ok(troupe_txn_delete(tx, "a", "b", 1));
    ck_assert_ok(txput(tx, "a", "c", 30));
    ck_assert_ok(txput(tx, "a", "f", 6));
    ck_assert_ok(txput(tx, "a", "z", 26)); /* past the range */
    troupe_scan_opts so = {
        .start = "a", .start_len = 1, .end = "g", .end_len = 1, .limit = 2};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    assert_page(rows, "ac", (int64_t[]){1, 30}, true);
    uint8_t cur[1 + TROUPE_CURSOR_OVERHEAD];
    troupe__cursor_put(cur, TROUPE_CURSOR_ROWS, 1, "c", 1); /* table a: 1 */
    ck_assert_uint_eq(rows->cursor_len, sizeof(cur));
    ck_assert_mem_eq(rows->cursor, cur, sizeof(cur));
    so.after = cur;
    so.after_len = sizeof(cur);
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    assert_page(rows, "df", (int64_t[]){4, 6}, false);
    troupe_rows_destroy(rows);
    so = (troupe_scan_opts){.start = "a",
                            .start_len = 1,
                            .end = "g",
                            .end_len = 1,
                            .limit = 10,
                            .reverse = true};
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    assert_page(rows, "fdca", (int64_t[]){6, 4, 30, 1}, false);
    troupe_rows_destroy(rows);
    /* a cursor outside the range */
    troupe__cursor_put(cur, TROUPE_CURSOR_ROWS, 1, "x", 1);
    so.after = cur;
    so.after_len = sizeof(cur);
    ck_assert_err(troupe_txn_scan_wait(tx, "a", &so, &rows), TROUPE_ERANGE);
    ck_assert_ok(troupe_txn_rollback(tx));
    troupe_txn_destroy(tx);
}
END_TEST

START_TEST(test_txn_scan_phantom_in_range_conflicts_outside_does_not)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    put("a", "c", 1);
    troupe_scan_opts so = {
        .start = "b", .start_len = 1, .end = "m", .end_len = 1, .limit = 10};
    troupe_txn *tx = NULL;
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
    put("a", "k", 2); /* a row appears in the scanned range */
    put("a", "x", 2); /* and one outside it */
    ck_assert_ok(txput(tx, "b", "sum", 1));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *tabs[] = {"a"};
    const char *keys[] = {"k"};
    assert_conflicts(tx, 1, tabs, keys);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("b", "sum"), -1);
    /* a row outside the range does not conflict */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_scan_wait(tx, "a", &so, &rows));
    ck_assert_uint_eq(rows->n, 2);
    troupe_rows_destroy(rows);
    put("a", "y", 3);
    put("a", "a", 3);
    ck_assert_ok(txput(tx, "b", "sum", 2));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("b", "sum"), 2);
    /* a transaction writing into a range another one scanned conflicts
     * when the scanner commits first (its version is newer) */
    troupe_txn *t1 = NULL, *t2 = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t1));
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &t2));
    ck_assert_ok(troupe_txn_scan_wait(t1, "a", &so, &rows));
    troupe_rows_destroy(rows);
    ck_assert_ok(txput(t1, "b", "sum", 3));
    ck_assert_ok(txput(t2, "a", "d", 4));
    ck_assert_ok(troupe_txn_commit_wait(t2, TROUPE_SYNC_DEFAULT));
    ck_assert_err(troupe_txn_commit_wait(t1, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(t1);
    troupe_txn_destroy(t2);
}
END_TEST

START_TEST(test_txn_scan_bad_arguments)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    troupe_scan_opts so = {.limit = 1};
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_scan(NULL, "a", &so, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_scan(tx, NULL, &so, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_scan(tx, "a", NULL, never_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_scan(tx, "a", &so, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_scan_wait(tx, "a", &so, NULL), TROUPE_EINVAL);
    so.limit = 0;
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_EINVAL);
    so.limit = TROUPE_TABLE_PAGE_MAX + 1;
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_EINVAL);
    so = (troupe_scan_opts){.start = "b", .start_len = 0, .limit = 1};
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_EINVAL);
    so = (troupe_scan_opts){
        .start = "b", .start_len = 1, .end = "a", .end_len = 1, .limit = 1};
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_EINVAL);
    so.end = "b"; /* [b, b): empty, refused */
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_EINVAL);
    so.reverse = true;
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_EINVAL);
    static unsigned char big[TROUPE_KEY_MAX + 1];
    so = (troupe_scan_opts){.start = big, .start_len = sizeof(big), .limit = 1};
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL),
                  TROUPE_ETOOBIG);
    so = (troupe_scan_opts){.limit = 1};
    ck_assert_err(troupe_txn_scan(tx, "nosuch", &so, never_cb, NULL),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_txn_scan_wait(tx, "a", &so, &rows), TROUPE_OK);
    ck_assert_uint_eq(rows->n, 0);
    ck_assert_ptr_null(rows->cursor);
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_txn_rollback(tx));
    ck_assert_err(troupe_txn_scan(tx, "a", &so, never_cb, NULL), TROUPE_ESTATE);
    troupe_txn_destroy(tx);
}
END_TEST

/* A transaction that prepared and then vanished (never finished) must not
 * keep its keys: its reservation lapses after reserve_ms, the writes
 * queued behind it go on, and the transaction can no longer submit. */
static atomic_int rsv_state = -1;
static atomic_int ord_done = 0;

static void
on_raw_prepared(troupe_runtime *rt, troupe_err err, troupe_msg *reply,
                void *arg)
{
    atomic_store(&rsv_state, (int)err);
}

static void
on_ordinary(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe_rows_destroy(rows);
    atomic_store(&ord_done, err == TROUPE_OK ? 1 : 2);
}

static bool
raw_prepared(void *arg)
{
    return atomic_load(&rsv_state) != -1;
}

static bool
ordinary_done(void *arg)
{
    return atomic_load(&ord_done) != 0;
}

START_TEST(test_txn_reservation_of_a_vanished_txn_lapses_at_deadline)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_addr a;
    troupe_cf *cf;
    ck_assert_ok(troupe__tables_lookup_cf(fx.tables, "a", &a, &cf));
    ttxn_shared *sh = troupe_calloc(1, sizeof(*sh));
    ck_assert_ptr_nonnull(sh);
    atomic_init(&sh->refs, 1);
    atomic_init(&sh->state, TTXN_OPEN);
    ck_assert_ok(troupe_batch_create(&sh->batch));
    ttxn_prep *p = troupe_calloc(1, sizeof(*p) + sizeof(ttxn_key));
    ck_assert_ptr_nonnull(p);
    p->keys = (ttxn_key *)(p + 1);
    p->n = 1;
    p->keys[0] = (ttxn_key){.kind = TROUPE__PART_UPSERT,
                            .key = (const unsigned char *)"k",
                            .klen = 1,
                            .doc = docv(1, 1),
                            .dlen = 12};
    p->reserve_ms = 300;
    p->sh = troupe__ttxn_retain(sh);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, TROUPE__PART_PREPARE, NULL, 0));
    m->ptr = p;
    m->ptr_drop = troupe__ttxn_prep_free;
    ck_assert_ok(troupe_runtime_ask(fx.rt, a, &m, 5000, on_raw_prepared, NULL));
    ck_assert(ts_wait_until(raw_prepared, NULL, 5000));
    ck_assert_int_eq(atomic_load(&rsv_state), TROUPE_OK);
    /* an ordinary write of the key waits behind the reservation */
    uint64_t t0 = ts_now_ms();
    ck_assert_ok(troupe_table_upsert(fx.tables, "a", "k", 1, DV(2, 7), NULL,
                                     on_ordinary, NULL));
    ck_assert(ts_wait_until(ordinary_done, NULL, 10000));
    ck_assert_int_eq(atomic_load(&ord_done), 1);
    ck_assert_uint_ge(ts_now_ms() - t0, 200);
    /* the vanished transaction lost the race to submit */
    ck_assert_int_eq(atomic_load(&sh->state), TTXN_ABORTED);
    troupe__ttxn_release(sh);
    ck_assert_int_eq(stored("a", "k"), 7);
}
END_TEST

/* ---- embedded: callbacks run on the host's loop ------------------------ */

static uv_loop_t eloop;
static int ecalls;
static troupe_err eerr;
static uv_thread_t ehost;
static bool eon_host;

static void
emb_stopped(troupe_tables *t, void *arg)
{
    ecalls++;
}

static void
emb_shutdown(troupe_runtime *rt, void *arg)
{
    ecalls++;
}

static bool
emb_have(void *arg)
{
    return ecalls >= *(int *)arg;
}

static void
emb_drive(int want)
{
    ck_assert(ts_run_until(&eloop, emb_have, &want, 10000));
}

static void
emb_setup(void)
{
    memset(&fx, 0, sizeof(fx));
    ecalls = 0;
    ehost = uv_thread_self();
    fx.dir = ts_tempdir("txn");
    ck_assert_int_eq(uv_loop_init(&eloop), 0);
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4, .loop = &eloop};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
}

static void
emb_teardown(void)
{
    int want = ecalls + 1;
    ck_assert_ok(troupe_tables_stop(fx.tables, emb_stopped, NULL));
    emb_drive(want);
    troupe_tables_destroy(fx.tables);
    want = ecalls + 1;
    ck_assert_ok(troupe_runtime_shutdown(fx.rt, emb_shutdown, NULL));
    emb_drive(want);
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    ck_assert_int_eq(ts_loop_close(&eloop), 0);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
    ts_rmtree(fx.dir);
    free(fx.dir);
}

static void
emb_ddl(troupe_tables *t, troupe_err err, void *arg)
{
    eerr = err;
    ecalls++;
}

static void
emb_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    eerr = err;
    if (err == TROUPE_OK)
        *(int64_t *)arg = vof(&rows->rows[0]);
    troupe_rows_destroy(rows);
    eon_host = uv_thread_equal(&ehost, &(uv_thread_t){uv_thread_self()});
    ecalls++;
}

static void
emb_commit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
           size_t n, void *arg)
{
    eerr = err;
    eon_host = uv_thread_equal(&ehost, &(uv_thread_t){uv_thread_self()});
    ecalls++;
}

/* Creates table `name` through the asynchronous call, driving the loop. */
static void
emb_create(const char *name)
{
    int want = ecalls + 1;
    ck_assert_ok(troupe_tables_create(fx.tables, name, NULL, 0, emb_ddl, NULL));
    emb_drive(want);
    ck_assert_ok(eerr);
}

START_TEST(test_txn_async_calls_back_on_the_host_loop)
{
    emb_create("a");
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "k", 4));
    int64_t v = -1;
    int want = ecalls + 1;
    ck_assert_ok(troupe_txn_get(tx, "a", "k", 1, emb_rows, &v));
    emb_drive(want);
    ck_assert_ok(eerr);
    ck_assert_int_eq(v, 4);
    ck_assert(eon_host);
    eon_host = false;
    want = ecalls + 1;
    ck_assert_ok(troupe_txn_commit(tx, TROUPE_SYNC_ON, emb_commit, NULL));
    emb_drive(want);
    ck_assert_ok(eerr);
    ck_assert(eon_host);
    troupe_txn_destroy(tx);
    /* a second transaction reads the first one's write */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    v = -1;
    want = ecalls + 1;
    ck_assert_ok(troupe_txn_get(tx, "a", "k", 1, emb_rows, &v));
    emb_drive(want);
    ck_assert_int_eq(v, 4);
    ck_assert_ok(troupe_txn_rollback(tx));
    troupe_txn_destroy(tx);
}
END_TEST

static void
emb_vcommit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
            size_t n, const troupe_txn_receipt *r, size_t nr, void *arg)
{
    eerr = err;
    *(size_t *)arg = nr;
    eon_host = uv_thread_equal(&ehost, &(uv_thread_t){uv_thread_self()});
    ecalls++;
}

/* A commit with nothing to write or check (a read-only transaction, an
 * empty one) calls back like any other: on scheduler 0, the host's loop,
 * and never inside the call. */
START_TEST(test_txn_empty_commit_calls_back_on_the_host_loop_not_inside)
{
    emb_create("a");
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    int64_t v = -1;
    int want = ecalls + 1;
    ck_assert_ok(troupe_txn_get(tx, "a", "k", 1, emb_rows, &v));
    emb_drive(want);
    ck_assert_err(eerr, TROUPE_ENOENT);
    eerr = TROUPE_EUNKNOWN;
    eon_host = false;
    want = ecalls + 1;
    ck_assert_ok(troupe_txn_commit(tx, TROUPE_SYNC_ON, emb_commit, NULL));
    ck_assert_int_eq(ecalls, want - 1); /* not from inside the call */
    emb_drive(want);
    ck_assert_ok(eerr);
    ck_assert(eon_host);
    troupe_txn_destroy(tx);

    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    size_t nr = 99;
    eerr = TROUPE_EUNKNOWN;
    eon_host = false;
    want = ecalls + 1;
    ck_assert_ok(
        troupe_txn_commit_version(tx, TROUPE_SYNC_ON, emb_vcommit, &nr));
    ck_assert_int_eq(ecalls, want - 1);
    emb_drive(want);
    ck_assert_ok(eerr);
    ck_assert(eon_host);
    ck_assert_uint_eq(nr, 0);
    troupe_txn_destroy(tx);
}
END_TEST

static atomic_int ord2_done = 0;

static void
on_ordinary2(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe_rows_destroy(rows);
    atomic_store(&ord2_done, err == TROUPE_OK ? 1 : 2);
}

static bool
ordinary2_done(void *arg)
{
    return atomic_load(&ord2_done) != 0;
}

/* A reserved scan range holds ordinary writes into it (not beside it)
 * until the reservation ends, and refuses other transactions' writes. */
START_TEST(test_txn_reserved_range_holds_writes_into_it)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_addr a;
    troupe_cf *cf;
    ck_assert_ok(troupe__tables_lookup_cf(fx.tables, "a", &a, &cf));
    ttxn_shared *sh = troupe_calloc(1, sizeof(*sh));
    ck_assert_ptr_nonnull(sh);
    atomic_init(&sh->refs, 1);
    atomic_init(&sh->state, TTXN_OPEN);
    ck_assert_ok(troupe_batch_create(&sh->batch));
    ttxn_prep *p = troupe_calloc(1, sizeof(*p) + sizeof(ttxn_range));
    ck_assert_ptr_nonnull(p);
    p->ranges = (ttxn_range *)(p + 1);
    p->nranges = 1;
    p->ranges[0] = (ttxn_range){.start = (const unsigned char *)"b",
                                .slen = 1,
                                .end = (const unsigned char *)"m",
                                .elen = 1};
    p->reserve_ms = 1000;
    p->sh = troupe__ttxn_retain(sh);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, TROUPE__PART_PREPARE, NULL, 0));
    m->ptr = p;
    m->ptr_drop = troupe__ttxn_prep_free;
    atomic_store(&rsv_state, -1);
    atomic_store(&ord_done, 0);
    atomic_store(&ord2_done, 0);
    ck_assert_ok(troupe_runtime_ask(fx.rt, a, &m, 5000, on_raw_prepared, NULL));
    ck_assert(ts_wait_until(raw_prepared, NULL, 5000));
    ck_assert_int_eq(atomic_load(&rsv_state), TROUPE_OK);
    uint64_t t0 = ts_now_ms();
    ck_assert_ok(troupe_table_upsert(fx.tables, "a", "k", 1, DV(2, 7), NULL,
                                     on_ordinary, NULL));
    ck_assert_ok(troupe_table_upsert(fx.tables, "a", "x", 1, DV(2, 8), NULL,
                                     on_ordinary2, NULL));
    ck_assert(ts_wait_until(ordinary2_done, NULL, 10000));
    ck_assert_int_eq(atomic_load(&ord2_done), 1);
    ck_assert_int_eq(atomic_load(&ord_done), 0); /* still held */
    /* a transaction writing into the range conflicts meanwhile */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "c", 1));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    ck_assert(ts_wait_until(ordinary_done, NULL, 10000));
    ck_assert_int_eq(atomic_load(&ord_done), 1);
    ck_assert_uint_ge(ts_now_ms() - t0, 800);
    troupe__ttxn_release(sh);
    ck_assert_int_eq(stored("a", "k"), 7);
    ck_assert_int_eq(stored("a", "x"), 8);
}
END_TEST

/* Reserves key `k` of table `t` for reading, as a prepared transaction
 * that has not finished would (seq0 past every version: no conflict of
 * its own). Returns its shared state for raw_finish. */
static ttxn_shared *
raw_read_reserve(const char *t, const char *k)
{
    troupe_addr a;
    troupe_cf *cf;
    ck_assert_ok(troupe__tables_lookup_cf(fx.tables, t, &a, &cf));
    ttxn_shared *sh = troupe_calloc(1, sizeof(*sh));
    ck_assert_ptr_nonnull(sh);
    atomic_init(&sh->refs, 1);
    atomic_init(&sh->state, TTXN_OPEN);
    ck_assert_ok(troupe_batch_create(&sh->batch));
    size_t kl = strlen(k);
    ttxn_prep *p = troupe_calloc(1, sizeof(*p) + sizeof(ttxn_key) + kl);
    ck_assert_ptr_nonnull(p);
    p->keys = (ttxn_key *)(p + 1);
    unsigned char *kb = (unsigned char *)(p->keys + 1);
    memcpy(kb, k, kl);
    p->keys[0] = (ttxn_key){.kind = TROUPE__PART_READ, .key = kb, .klen = kl};
    p->n = 1;
    p->seq0 = UINT64_MAX;
    p->reserve_ms = 60000;
    p->sh = troupe__ttxn_retain(sh);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, TROUPE__PART_PREPARE, NULL, 0));
    m->ptr = p;
    m->ptr_drop = troupe__ttxn_prep_free;
    atomic_store(&rsv_state, -1);
    ck_assert_ok(troupe_runtime_ask(fx.rt, a, &m, 5000, on_raw_prepared, NULL));
    ck_assert(ts_wait_until(raw_prepared, NULL, 5000));
    ck_assert_int_eq(atomic_load(&rsv_state), TROUPE_OK);
    return sh;
}

/* Ends the reservation of raw_read_reserve (nothing published). */
static void
raw_finish(const char *t, ttxn_shared *sh)
{
    troupe_addr a;
    troupe_cf *cf;
    ck_assert_ok(troupe__tables_lookup_cf(fx.tables, t, &a, &cf));
    ttxn_fin *f = troupe_calloc(1, sizeof(*f));
    ck_assert_ptr_nonnull(f);
    f->sh = troupe__ttxn_retain(sh);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, TROUPE__PART_FINISH, NULL, 0));
    m->ptr = f;
    m->ptr_drop = troupe__ttxn_fin_free;
    atomic_store(&rsv_state, -1);
    ck_assert_ok(troupe_runtime_ask(fx.rt, a, &m, 5000, on_raw_prepared, NULL));
    ck_assert(ts_wait_until(raw_prepared, NULL, 5000));
    ck_assert_int_eq(atomic_load(&rsv_state), TROUPE_OK);
    troupe__ttxn_release(sh);
}

static void
assert_kinds(troupe_txn *tx, size_t n, const char *const *keys,
             const uint32_t *kinds)
{
    const troupe_txn_conflict *c = NULL;
    size_t got = 0;
    ck_assert_ok(troupe_txn_conflicts(tx, &c, &got));
    ck_assert_uint_eq(got, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(c[i].key_len, strlen(keys[i]));
        ck_assert(memcmp(c[i].key, keys[i], c[i].key_len) == 0);
        ck_assert_msg(c[i].kinds == kinds[i], "key %s: kinds %u, want %u",
                      keys[i], (unsigned)c[i].kinds, (unsigned)kinds[i]);
    }
}

/* The msgpack type of field "created_at" of the stored row t/k. */
static troupe_mp_type
created_type(const char *t, const char *k)
{
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(fx.tables, t, k, strlen(k), &rows));
    troupe_reader r;
    uint32_t n = 0;
    const char *f;
    size_t fl;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map(&r, &n);
    ck_assert_uint_eq(n, 1);
    troupe_read_str(&r, 16, &f, &fl);
    ck_assert_ok(r.err);
    ck_assert(fl == 10 && memcmp(f, "created_at", 10) == 0);
    troupe_mp_type ty = troupe_read_peek(&r);
    troupe_rows_destroy(rows);
    return ty;
}

static atomic_int zero_calls;
static troupe_err zero_err;
static size_t zero_n = 99;

static void
on_zero(troupe_err err, troupe_rows *rows, void *arg)
{
    zero_err = err;
    zero_n = rows != NULL ? rows->n : 99;
    troupe_rows_destroy(rows);
    atomic_fetch_add(&zero_calls, 1);
}

static bool
zero_done(void *arg)
{
    return atomic_load(&zero_calls) == 1;
}

/* A transaction's get_many of zero keys is an empty result, from both
 * forms; the table must exist, and it still counts as an ordinary read. */
START_TEST(test_txn_get_many_zero_keys_is_empty)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "k", 1);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_txn_get_many_wait(tx, "a", NULL, NULL, 0, &rows));
    ck_assert_ptr_nonnull(rows);
    ck_assert_uint_eq(rows->n, 0);
    troupe_rows_destroy(rows);
    atomic_store(&zero_calls, 0);
    ck_assert_ok(troupe_txn_get_many(tx, "a", NULL, NULL, 0, on_zero, NULL));
    ck_assert(ts_wait_until(zero_done, NULL, 5000));
    ck_assert_int_eq(zero_err, TROUPE_OK);
    ck_assert_uint_eq(zero_n, 0);
    ck_assert_err(troupe_txn_get_many_wait(tx, "none", NULL, NULL, 0, &rows),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_txn_read_version(tx, "a", "k", 1, 1), TROUPE_ESTATE);
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
}
END_TEST

/* no_timestamps reaches transactional writes: the last write of a key
 * decides, as it does for expiry. */
START_TEST(test_txn_no_timestamps_switch)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    troupe_write_opts off = {.no_timestamps = true};
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(
        troupe_txn_insert(tx, "a", "k1", 2, DS(0, "created_at", "x"), &off));
    ck_assert_ok(
        troupe_txn_insert(tx, "a", "k2", 2, DS(0, "created_at", "x"), NULL));
    ck_assert_ok(
        troupe_txn_insert(tx, "a", "k3", 2, DS(0, "created_at", "x"), NULL));
    ck_assert_ok(
        troupe_txn_update(tx, "a", "k3", 2, DS(0, "created_at", "y"), &off));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_int_eq(created_type("a", "k1"), TROUPE_MP_STR);
    ck_assert_int_eq(created_type("a", "k2"), TROUPE_MP_UINT); /* stamped */
    ck_assert_int_eq(created_type("a", "k3"), TROUPE_MP_STR);
}
END_TEST

/* {"tags": [a, b]} */
static const void *
doc_tags(int slot, const char *a, const char *b)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "tags");
    troupe_pack_array(&p, 2);
    troupe_pack_cstr(&p, a);
    troupe_pack_cstr(&p, b);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    memcpy(dbuf[slot], d, n);
    dlen[slot] = n;
    troupe_pack_fini(&p);
    return dbuf[slot];
}

/* A msgpack array of one string, in slot's buffer. */
static troupe_index_query
q_one(int slot, const char *v, size_t limit)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_cstr(&p, v);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    memcpy(dbuf[slot], d, n);
    troupe_pack_fini(&p);
    return (troupe_index_query){
        .values = dbuf[slot], .values_len = n, .limit = limit};
}

static bool
row_is(const troupe_rows *r, size_t i, const char *k)
{
    return r->rows[i].key_len == strlen(k) &&
           memcmp(r->rows[i].key, k, r->rows[i].key_len) == 0;
}

static atomic_int rm_calls;
static troupe_err rm_err;
static troupe_rows *rm_rows;

static void
on_removed(troupe_err err, troupe_rows *rows, void *arg)
{
    rm_err = err;
    rm_rows = rows;
    atomic_fetch_add(&rm_calls, 1);
}

static bool
removed(void *arg)
{
    return atomic_load(&rm_calls) == 1;
}

/* Remove by index: up to limit rows an index value (or range) matches,
 * deleted in one transaction and returned, one per row in index order
 * however many of its entries match; expired rows are not taken. */
START_TEST(test_txn_remove_by_index)
{
    static const troupe_index_field city_f = {.path = "city",
                                              .type = TROUPE_FIELD_STRING};
    static const troupe_index_field tag_f = {.path = "tags",
                                             .type = TROUPE_FIELD_STRING};
    troupe_index_spec ix[2] = {
        {.name = "by_city", .fields = &city_f, .n_fields = 1},
        {.name = "by_tag", .fields = &tag_f, .n_fields = 1}};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", ix, 2));
    const char *cities[] = {"Oslo", "Rome", "Oslo", "Oslo"};
    const char *keys[] = {"k1", "k2", "k3", "k4"};
    for (int i = 0; i < 4; i++)
        ck_assert_ok(troupe_table_insert_wait(fx.tables, "a", keys[i], 2,
                                              DS(0, "city", cities[i]), NULL));
    troupe_write_opts gone = {.expires_at_ms = 1}; /* long expired */
    ck_assert_ok(troupe_table_insert_wait(fx.tables, "a", "k0", 2,
                                          DS(0, "city", "Oslo"), &gone));
    troupe_index_query q = q_one(1, "Oslo", 2);
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                 TROUPE_SYNC_DEFAULT, &rows));
    ck_assert_uint_eq(rows->n, 2);
    ck_assert(row_is(rows, 0, "k1"));
    ck_assert(row_is(rows, 1, "k3"));
    ck_assert(rows->more);
    troupe_rows_destroy(rows);
    ck_assert_int_eq(stored("a", "k1"), -1);
    ck_assert_int_eq(stored("a", "k3"), -1);
    /* the asynchronous form takes the rest */
    q = q_one(1, "Oslo", 10);
    atomic_store(&rm_calls, 0);
    ck_assert_ok(troupe_txn_remove_by_index(
        fx.tables, "a", "by_city", &q, TROUPE_SYNC_DEFAULT, on_removed, NULL));
    ck_assert(ts_wait_until(removed, NULL, 10000));
    ck_assert_int_eq(rm_err, TROUPE_OK);
    ck_assert_uint_eq(rm_rows->n, 1);
    ck_assert(row_is(rm_rows, 0, "k4"));
    ck_assert(!rm_rows->more);
    troupe_rows_destroy(rm_rows);
    troupe_rows *left = NULL;
    troupe_scan_opts so = {.limit = 10};
    ck_assert_ok(troupe_table_scan_wait(fx.tables, "a", &so, &left));
    ck_assert_uint_eq(left->n, 1); /* k2, Rome (k0 is expired) */
    ck_assert(row_is(left, 0, "k2"));
    troupe_rows_destroy(left);
    q = q_one(1, "Paris", 10);
    ck_assert_ok(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                 TROUPE_SYNC_DEFAULT, &rows));
    ck_assert_uint_eq(rows->n, 0);
    ck_assert(!rows->more);
    troupe_rows_destroy(rows);
    /* a row matching through two entries is one row */
    const void *td = doc_tags(0, "x", "y");
    ck_assert_ok(
        troupe_table_insert_wait(fx.tables, "a", "t1", 2, td, dlen[0], NULL));
    td = doc_tags(0, "y", "z");
    ck_assert_ok(
        troupe_table_insert_wait(fx.tables, "a", "t2", 2, td, dlen[0], NULL));
    troupe_packer pf, pt;
    troupe_pack_init(&pf);
    troupe_pack_array(&pf, 1);
    troupe_pack_cstr(&pf, "a");
    troupe_pack_init(&pt);
    troupe_pack_array(&pt, 1);
    troupe_pack_cstr(&pt, "zz");
    q = (troupe_index_query){.limit = 10};
    q.from = troupe_pack_data(&pf, &q.from_len);
    q.to = troupe_pack_data(&pt, &q.to_len);
    ck_assert_ok(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_tag", &q,
                                                 TROUPE_SYNC_DEFAULT, &rows));
    ck_assert_uint_eq(rows->n, 2);
    ck_assert(row_is(rows, 0, "t1"));
    ck_assert(row_is(rows, 1, "t2"));
    troupe_rows_destroy(rows);
    ck_assert_int_eq(stored("a", "t1"), -1);
    ck_assert_int_eq(stored("a", "t2"), -1);
    /* bad arguments: nothing removed */
    q = q_one(1, "Rome", 1);
    q.limit = 0;
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                  TROUPE_SYNC_DEFAULT, &rows),
                  TROUPE_EINVAL);
    q.limit = TROUPE_TABLE_PAGE_MAX + 1;
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                  TROUPE_SYNC_DEFAULT, &rows),
                  TROUPE_EINVAL);
    q.limit = 1;
    q.from = q.values;
    q.from_len = q.values_len;
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                  TROUPE_SYNC_DEFAULT, &rows),
                  TROUPE_EINVAL);
    q = q_one(1, "Rome", 1);
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "a", "nope", &q,
                                                  TROUPE_SYNC_DEFAULT, &rows),
                  TROUPE_ENOINDEX);
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "b", "by_city", &q,
                                                  TROUPE_SYNC_DEFAULT, &rows),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_txn_remove_by_index(fx.tables, "a", "by_city", &q,
                                             TROUPE_SYNC_DEFAULT, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                  TROUPE_SYNC_DEFAULT, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_remove_by_index_wait(fx.tables, "a", "by_city", &q,
                                                  (troupe_sync)99, &rows),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(rows);
    ck_assert_ok(troupe_table_get_wait(fx.tables, "a", "k2", 2, &rows));
    troupe_rows_destroy(rows);
    troupe_pack_fini(&pf);
    troupe_pack_fini(&pt);
}
END_TEST

static uint64_t
qver(const char *t, const char *k, int64_t *v);

/* Each conflict says why: a read that no longer matches (STALE), a key
 * another transaction holds (RESERVED), or both at once (one entry with
 * both bits, in the usual order). */
START_TEST(test_txn_conflicts_say_their_kind)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "s", 1);
    put("a", "r", 1);
    troupe_txn *both = NULL, *stale = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &both));
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &stale));
    ck_assert_int_eq(txv(both, "a", "r"), 1);
    ck_assert_int_eq(txv(stale, "a", "s"), 1);
    put("a", "r", 2); /* both's read of r is stale now, */
    put("a", "s", 2); /* and stale's of s */
    ttxn_shared *sh = raw_read_reserve("a", "r"); /* r is held */
    troupe_txn *held = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &held));
    ck_assert_ok(txput(held, "a", "r", 3));
    ck_assert_ok(txput(held, "a", "q", 3));
    ck_assert_err(troupe_txn_commit_wait(held, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *k_r[] = {"r"};
    const uint32_t k_res[] = {TROUPE_CONFLICT_RESERVED};
    assert_kinds(held, 1, k_r, k_res);
    ck_assert_ok(txput(both, "a", "r", 4));
    ck_assert_ok(txput(both, "a", "a", 4));
    ck_assert_err(troupe_txn_commit_wait(both, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const uint32_t k_both[] = {TROUPE_CONFLICT_STALE |
                               TROUPE_CONFLICT_RESERVED};
    assert_kinds(both, 1, k_r, k_both);
    ck_assert_ok(txput(stale, "a", "t", 5));
    ck_assert_err(troupe_txn_commit_wait(stale, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *k_s[] = {"s"};
    const uint32_t k_stale[] = {TROUPE_CONFLICT_STALE};
    assert_kinds(stale, 1, k_s, k_stale);
    raw_finish("a", sh);
    troupe_txn_destroy(held);
    troupe_txn_destroy(both);
    troupe_txn_destroy(stale);
    /* a versioned read of an old version: stale; the callback's array is
     * the same set */
    int64_t v;
    uint64_t old = qver("a", "s", &v);
    put("a", "s", 6);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "s", 1, old));
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    assert_kinds(tx, 1, k_s, k_stale);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "r"), 2);
    ck_assert_int_eq(stored("a", "q"), -1);
}
END_TEST

/* ---- the versioned API -------------------------------------------------- */

static uint64_t
qver(const char *t, const char *k, int64_t *v)
{
    troupe_rows *rows = NULL;
    uint64_t ver = 0;
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, t, k, strlen(k), &rows, &ver));
    ck_assert_uint_gt(ver, 0);
    *v = rows->n ? vof(&rows->rows[0]) : -1;
    troupe_rows_destroy(rows);
    return ver;
}

static void
assert_receipt(const troupe_txn_receipt *r, const char *t, const char *k,
               uint64_t ver, bool deleted)
{
    ck_assert_str_eq(r->table, t);
    ck_assert_uint_eq(r->key_len, strlen(k));
    ck_assert(memcmp(r->key, k, r->key_len) == 0);
    ck_assert_uint_eq(r->version, ver);
    ck_assert(r->deleted == deleted);
}

START_TEST(test_txn_versioned_query_commit_receipts_and_conflicts)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    put("a", "x", 1);
    int64_t v;
    uint64_t vx = qver("a", "x", &v);
    ck_assert_int_eq(v, 1);
    ck_assert_uint_eq(qver("a", "x", &v), vx);
    uint64_t vn = qver("a", "n", &v); /* absent: its first version */
    ck_assert_int_eq(v, -1);
    ck_assert_uint_eq(qver("a", "n", &v), vn);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "x", 1, vx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "n", 1, vn));
    ck_assert_ok(txput(tx, "a", "x", 2));
    ck_assert_ok(troupe_txn_insert(tx, "a", "n", 1, DV(0, 5), NULL));
    ck_assert_ok(txput(tx, "b", "y", 7));
    /* mixing is refused */
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_get_wait(tx, "a", "x", 1, &rows), TROUPE_ESTATE);
    troupe_scan_opts so = {.limit = 1};
    ck_assert_err(troupe_txn_scan_wait(tx, "a", &so, &rows), TROUPE_ESTATE);
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ESTATE);
    ck_assert_ok(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT));
    const troupe_txn_receipt *r;
    size_t nr = 0;
    ck_assert_ok(troupe_txn_receipts(tx, &r, &nr));
    ck_assert_uint_eq(nr, 3);
    uint64_t va = r[0].version, vb = r[2].version;
    ck_assert_uint_gt(va, vx);
    ck_assert_uint_gt(va, vn);
    assert_receipt(&r[0], "a", "n", va, false);
    assert_receipt(&r[1], "a", "x", va, false);
    assert_receipt(&r[2], "b", "y", vb, false);
    troupe_txn_destroy(tx);
    ck_assert_uint_eq(qver("a", "x", &v), va);
    ck_assert_int_eq(v, 2);
    ck_assert_uint_eq(qver("b", "y", &v), vb);
    /* stale versions conflict, all of them, and nothing is written */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "x", 1, vx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "n", 1, vn));
    ck_assert_ok(troupe_txn_read_version(tx, "b", "y", 1, vb));
    ck_assert_ok(txput(tx, "b", "z", 9));
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *tabs[] = {"a", "a"};
    const char *keys[] = {"n", "x"};
    assert_conflicts(tx, 2, tabs, keys);
    ck_assert_ok(troupe_txn_receipts(tx, &r, &nr));
    ck_assert_uint_eq(nr, 0);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("b", "z"), -1);
    /* current versions: a delete's receipt */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "x", 1, va));
    ck_assert_ok(troupe_txn_delete(tx, "a", "x", 1));
    ck_assert_ok(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT));
    ck_assert_ok(troupe_txn_receipts(tx, &r, &nr));
    ck_assert_uint_eq(nr, 1);
    ck_assert_uint_gt(r[0].version, va);
    assert_receipt(&r[0], "a", "x", r[0].version, true);
    uint64_t vd = r[0].version;
    troupe_txn_destroy(tx);
    ck_assert_uint_eq(qver("a", "x", &v), vd);
    ck_assert_int_eq(v, -1);
    /* versioned reads only: validated, nothing written */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "x", 1, vd));
    ck_assert_ok(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "x", 1, va));
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
}
END_TEST

/* pi_db refuses duplicate read or write entries before anything happens:
 * a second read_version of one key is EINVAL (it would otherwise replace
 * the first, so a stale read followed by a current one would commit), and
 * in the versioned path each key is written once. */
START_TEST(test_txn_versioned_duplicate_entries_refused)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "k", 1);
    int64_t v;
    uint64_t stale = qver("a", "k", &v);
    put("a", "k", 2);
    uint64_t cur = qver("a", "k", &v);
    ck_assert_uint_gt(cur, stale);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "k", 1, stale));
    ck_assert_err(troupe_txn_read_version(tx, "a", "k", 1, cur), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_read_version(tx, "a", "k", 1, stale),
                  TROUPE_EINVAL);
    ck_assert_ok(txput(tx, "a", "k", 3));
    /* the first entry stands: the stale read conflicts, nothing written */
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    const char *tabs[] = {"a"};
    const char *keys[] = {"k"};
    assert_conflicts(tx, 1, tabs, keys);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "k"), 2);

    /* a versioned transaction writes a key once */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "k", 1, cur));
    ck_assert_ok(txput(tx, "a", "k", 4));
    ck_assert_err(txput(tx, "a", "k", 5), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_delete(tx, "a", "k", 1), TROUPE_EINVAL);
    ck_assert_ok(txput(tx, "a", "other", 6));
    ck_assert_ok(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "k"), 4);
    ck_assert_int_eq(stored("a", "other"), 6);

    /* written twice before it chose the versioned path: commit_version
     * refuses at the call and the transaction stays open */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "w", 7));
    ck_assert_ok(txput(tx, "a", "w", 8));
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_EINVAL);
    ck_assert_ok(troupe_txn_rollback(tx));
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "w"), -1);
}
END_TEST

static atomic_int part_done_calls;
static _Atomic troupe_err part_outcome;

static troupe_err
part_write_nothing(void *arg, troupe_batch *b)
{
    return TROUPE_OK;
}

static void
part_done(void *arg, troupe_err outcome)
{
    atomic_store(&part_outcome, outcome);
    atomic_fetch_add(&part_done_calls, 1);
}

/* A commit whose table was dropped after the write was buffered answers
 * the missing-table error with an empty conflict list, also when another
 * table conflicted first, in both commit forms and for its participants:
 * EDEAD (the table's actor is gone) never leaks out of a commit. */
START_TEST(test_txn_commit_on_dropped_table_is_enotable)
{
    for (int form = 0; form < 3; form++) {
        ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
        ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
        put("a", "c", 1);
        troupe_txn *tx = NULL;
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
        if (form == 1) { /* a read of "a" that conflicts, before "b" */
            ck_assert_int_eq(txv(tx, "a", "c"), 1);
            put("a", "c", 2);
        }
        ck_assert_ok(txput(tx, "a", "c", 3));
        ck_assert_ok(txput(tx, "b", "k", 4));
        atomic_store(&part_done_calls, 0);
        troupe_txn_part part = {
            .write = part_write_nothing, .done = part_done, .arg = NULL};
        ck_assert_ok(troupe_txn_attach(tx, &part));
        ck_assert_ok(troupe_tables_drop_wait(fx.tables, "b"));
        if (form == 2)
            ck_assert_err(
                troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                TROUPE_ENOTABLE);
        else
            ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                          TROUPE_ENOTABLE);
        const troupe_txn_conflict *c = NULL;
        size_t n = 99;
        ck_assert_ok(troupe_txn_conflicts(tx, &c, &n));
        ck_assert_uint_eq(n, 0);
        ck_assert_ptr_null(c);
        ck_assert_int_eq(atomic_load(&part_done_calls), 1);
        ck_assert_int_eq(atomic_load(&part_outcome), TROUPE_ENOTABLE);
        troupe_txn_destroy(tx);
        ck_assert_int_eq(stored("a", "c"), form == 1 ? 2 : 1);
        /* the name taken again by a new table: still the old one's error */
        ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
        ck_assert_ok(txput(tx, "b", "k", 5));
        ck_assert_ok(troupe_tables_drop_wait(fx.tables, "b"));
        ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
        ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                      TROUPE_ENOTABLE);
        troupe_txn_destroy(tx);
        ck_assert_int_eq(stored("b", "k"), -1);
        ck_assert_ok(troupe_tables_drop_wait(fx.tables, "a"));
        ck_assert_ok(troupe_tables_drop_wait(fx.tables, "b"));
    }
}
END_TEST

#define NQ 8
static atomic_int q_done;
static _Atomic uint64_t q_ver[NQ];

static void
on_q(troupe_err err, troupe_rows *rows, uint64_t ver, void *arg)
{
    ck_assert_int_eq(err, TROUPE_OK);
    ck_assert_uint_eq(rows->n, 0);
    troupe_rows_destroy(rows);
    atomic_store(&q_ver[(uintptr_t)arg], ver);
    atomic_fetch_add(&q_done, 1);
}

static bool
q_all(void *arg)
{
    return atomic_load(&q_done) == NQ;
}

START_TEST(test_txn_versioned_api_first_version_once_and_bad_arguments)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    atomic_store(&q_done, 0);
    for (uintptr_t i = 0; i < NQ; i++)
        ck_assert_ok(troupe_txn_query_version(fx.tables, "a", "new", 3, on_q,
                                              (void *)i));
    ck_assert(ts_wait_until(q_all, NULL, 10000));
    for (int i = 1; i < NQ; i++)
        ck_assert_uint_eq(atomic_load(&q_ver[i]), atomic_load(&q_ver[0]));
    troupe_rows *rows = NULL;
    uint64_t ver = 0;
    ck_assert_err(troupe_txn_query_version(NULL, "a", "k", 1, on_q, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_version(fx.tables, NULL, "k", 1, on_q, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_version(fx.tables, "a", NULL, 1, on_q, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_version(fx.tables, "a", "k", 0, on_q, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_version(fx.tables, "a", "k", 1, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_txn_query_version(fx.tables, "nosuch", "k", 1, on_q, NULL),
        TROUPE_ENOTABLE);
    ck_assert_err(
        troupe_txn_query_version_wait(fx.tables, "a", "k", 1, NULL, &ver),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_txn_query_version_wait(fx.tables, "a", "k", 1, &rows, NULL),
        TROUPE_EINVAL);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_err(troupe_txn_read_version(NULL, "a", "k", 1, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_read_version(tx, NULL, "k", 1, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_read_version(tx, "a", NULL, 1, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_read_version(tx, "a", "k", 0, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_read_version(tx, "a", "k", 1, 0), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_read_version(tx, "nosuch", "k", 1, 1),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_txn_commit_version(NULL, TROUPE_SYNC_ON, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_commit_version(tx, TROUPE_SYNC_ON, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_commit_version_wait(NULL, TROUPE_SYNC_ON),
                  TROUPE_EINVAL);
    const troupe_txn_receipt *r;
    size_t n;
    ck_assert_err(troupe_txn_receipts(NULL, &r, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_receipts(tx, NULL, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_txn_receipts(tx, &r, NULL), TROUPE_EINVAL);
    /* an ordinary read first: the versioned calls are refused */
    ck_assert_int_eq(txv(tx, "a", "k"), -1);
    ck_assert_err(troupe_txn_read_version(tx, "a", "k", 1, 1), TROUPE_ESTATE);
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_ON),
                  TROUPE_ESTATE);
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_ON));
    troupe_txn_destroy(tx);
}
END_TEST

/* The batch form answers each key as the single query does, in one
 * request: versions in the order asked, rows for the live keys only. */
START_TEST(test_txn_query_versions_batch_matches_single_queries)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "k1", 1);
    put("a", "k2", 2);
    const void *keys[4] = {"k1", "none", "k2", "k1"};
    size_t klens[4] = {2, 4, 2, 2};
    troupe_rows *rows = NULL;
    uint64_t *vers = NULL;
    ck_assert_ok(troupe_txn_query_versions_wait(fx.tables, "a", keys, klens, 4,
                                                &rows, &vers));
    ck_assert_uint_eq(rows->n, 3);
    ck_assert_int_eq(vof(&rows->rows[0]), 1);
    ck_assert_int_eq(vof(&rows->rows[1]), 2);
    ck_assert_int_eq(vof(&rows->rows[2]), 1);
    ck_assert_uint_eq(vers[0], vers[3]);
    for (int i = 0; i < 3; i++) {
        troupe_rows *r1 = NULL;
        uint64_t v1 = 0;
        ck_assert_ok(troupe_txn_query_version_wait(fx.tables, "a", keys[i],
                                                   klens[i], &r1, &v1));
        ck_assert_uint_gt(vers[i], 0);
        ck_assert_uint_eq(v1, vers[i]); /* "none" got its first version once */
        troupe_rows_destroy(r1);
    }
    troupe_rows_destroy(rows);
    /* the versions work as a read set */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "k1", 2, vers[0]));
    ck_assert_ok(troupe_txn_read_version(tx, "a", "k2", 2, vers[2]));
    ck_assert_ok(txput(tx, "a", "k1", 10));
    ck_assert_ok(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_OFF));
    troupe_txn_destroy(tx);
    troupe_free(vers);
    ck_assert_int_eq(stored("a", "k1"), 10);
    /* bad arguments: nothing asked */
    vers = NULL;
    ck_assert_err(troupe_txn_query_versions_wait(fx.tables, "a", keys, klens, 0,
                                                 &rows, &vers),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_versions_wait(fx.tables, "a", NULL, klens, 1,
                                                 &rows, &vers),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_versions_wait(fx.tables, "a", keys, klens,
                                                 TROUPE_TABLE_PAGE_MAX + 1,
                                                 &rows, &vers),
                  TROUPE_EINVAL);
    size_t zero[1] = {0};
    ck_assert_err(troupe_txn_query_versions_wait(fx.tables, "a", keys, zero, 1,
                                                 &rows, &vers),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_txn_query_versions_wait(fx.tables, "nosuch", keys,
                                                 klens, 1, &rows, &vers),
                  TROUPE_ENOTABLE);
    ck_assert_err(
        troupe_txn_query_versions(fx.tables, "a", keys, klens, 1, NULL, NULL),
        TROUPE_EINVAL);
    ck_assert_ptr_null(vers);
}
END_TEST

/* Writes keys "<prefix><i>" for i in [from, to) in transactions of
 * 10000 keys (the default limit). */
static void
put_range(const char *prefix, int from, int to)
{
    for (int i = from; i < to;) {
        troupe_txn *tx = NULL;
        ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
        for (int n = 0; n < 10000 && i < to; n++, i++) {
            char k[32];
            snprintf(k, sizeof(k), "%s%06d", prefix, i);
            ck_assert_ok(txput(tx, "a", k, i));
        }
        ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_OFF));
        troupe_txn_destroy(tx);
    }
}

/* The key-version map holds 65536 records. When it is full, the oldest
 * records no running transaction needs go (no spurious conflict for a
 * transaction that began after them); the map is emptied (spurious
 * conflicts, never a missed one) only when every record is needed. */
START_TEST(test_txn_full_version_map_sheds_unneeded_records_first)
{
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    put("a", "x", 1);
    put_range("old", 0, 10000);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txv(tx, "a", "x"), 1);
    ck_assert_ok(txput(tx, "a", "y", 2));
    /* 10001 records older than tx, then 56000 newer: over 65536 */
    put_range("new", 0, 56000);
    troupe_tables_stats *st = NULL;
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &st));
    ck_assert_uint_eq(st->n, 1);
    ck_assert_uint_le(st->tables[0].version_records, 65536);
    ck_assert_uint_ge(st->tables[0].version_evicted, 1);
    troupe_tables_stats_destroy(st);
    /* x's record may be gone, but its version never rose above tx's
     * snapshot: no conflict */
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_OFF));
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "y"), 2);

    /* Every record newer than a running transaction: the map is emptied,
     * and that transaction conflicts on what it read (safe). */
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txv(tx, "a", "x"), 1);
    ck_assert_ok(txput(tx, "a", "z", 3));
    put_range("more", 0, 66000);
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_OFF),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    ck_assert_int_eq(stored("a", "z"), -1);
}
END_TEST

/* The latency histograms count each call once, from the call to its
 * result, and the commit counters split commits by result. */
START_TEST(test_txn_stats_count_each_call_and_commit_by_result)
{
    static const troupe_index_field vf = {"v", TROUPE_FIELD_INT};
    troupe_index_spec spec = {.name = "by_v", .fields = &vf, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", &spec, 1));
    troupe_tables_stats *s0 = NULL, *s1 = NULL;
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &s0));
    for (int i = 0; i < 5; i++)
        put("a", "x", i);
    ck_assert_ok(troupe_table_delete_wait(fx.tables, "a", "x", 1, NULL));
    put("a", "x", 7);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(stored("a", "x"), 7);
    troupe_scan_opts so = {.limit = 10};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_scan_wait(fx.tables, "a", &so, &rows));
    troupe_rows_destroy(rows);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_int(&p, 7);
    size_t vl;
    const void *vals = troupe_pack_data(&p, &vl);
    troupe_index_query q = {.values = vals, .values_len = vl, .limit = 10};
    uint64_t n = 0;
    ck_assert_ok(troupe_tables_count_wait(fx.tables, "a", "by_v", &q, &n));
    ck_assert_uint_eq(n, 1);
    troupe_pack_fini(&p);
    /* one commit that goes through, one that conflicts */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "y", 1));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_OFF));
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_int_eq(txv(tx, "a", "x"), 7);
    put("a", "x", 8);
    ck_assert_ok(txput(tx, "a", "z", 1));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_OFF),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &s1));
    const troupe_hist_snapshot *h0[] = {&s0->get_ns, &s0->write_ns,
                                        &s0->scan_ns, &s0->query_ns,
                                        &s0->commit_ns};
    const troupe_hist_snapshot *h1[] = {&s1->get_ns, &s1->write_ns,
                                        &s1->scan_ns, &s1->query_ns,
                                        &s1->commit_ns};
    /* gets: stored() x3; writes: 5 + delete + 2 puts; one scan; one
     * count; two commits */
    const uint64_t want[] = {3, 8, 1, 1, 2};
    for (int i = 0; i < 5; i++) {
        ck_assert_uint_eq(h1[i]->count - h0[i]->count, want[i]);
        ck_assert_uint_gt(h1[i]->sum, h0[i]->sum); /* nanoseconds passed */
        ck_assert_uint_eq(h1[i]->base, TROUPE_TABLES_OP_NS_BASE);
        ck_assert_uint_eq(h1[i]->n, TROUPE_TABLES_OP_NS_BUCKETS);
    }
    ck_assert_uint_eq(s1->commit_ok - s0->commit_ok, 1);
    ck_assert_uint_eq(s1->commit_conflict - s0->commit_conflict, 1);
    ck_assert_uint_eq(s1->commit_failed, s0->commit_failed);
    troupe_tables_stats_destroy(s0);
    troupe_tables_stats_destroy(s1);
}
END_TEST

Suite *
txn_suite(void)
{
    Suite *s = suite_create("txn");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_txn_reads_see_snapshot_plus_own_writes);
    tcase_add_test(tc, test_txn_commit_writes_every_table_and_index);
    tcase_add_test(
        tc, test_txn_write_write_and_read_conflicts_give_exact_sorted_set);
    tcase_add_test(
        tc, test_txn_read_changed_by_ordinary_write_conflicts_nothing_written);
    tcase_add_test(tc, test_txn_unique_failure_on_one_table_aborts_whole_txn);
    tcase_add_test(tc, test_txn_write_rules_checked_in_txn_view_and_at_commit);
    tcase_add_test(tc, test_txn_concurrent_commits_on_one_key_exactly_one_wins);
    tcase_add_test(tc, test_txn_retry_helper_replays_on_conflict_only);
    tcase_add_test(tc, test_txn_concurrent_increments_are_serializable);
    tcase_add_test(tc, test_txn_write_skew_never_commits_both);
    tcase_add_test(tc, test_txn_limits_are_etoobig);
    tcase_add_test(tc, test_txn_sync_flag_reaches_the_pipeline);
    tcase_add_test(tc, test_txn_bad_arguments);
    tcase_add_test(tc, test_txn_begin_after_stop_is_estate);
    tcase_add_test(tc, test_txn_scan_merges_snapshot_with_own_writes);
    tcase_add_test(tc,
                   test_txn_scan_phantom_in_range_conflicts_outside_does_not);
    tcase_add_test(tc, test_txn_scan_bad_arguments);
    tcase_add_test(tc, test_txn_reserved_range_holds_writes_into_it);
    tcase_add_test(tc, test_txn_full_version_map_sheds_unneeded_records_first);
    tcase_add_test(tc, test_txn_stats_count_each_call_and_commit_by_result);
    tcase_add_test(tc, test_txn_query_versions_batch_matches_single_queries);
    tcase_add_test(tc, test_txn_versioned_query_commit_receipts_and_conflicts);
    tcase_add_test(tc, test_txn_versioned_duplicate_entries_refused);
    tcase_add_test(tc, test_txn_commit_on_dropped_table_is_enotable);
    tcase_add_test(tc, test_txn_conflicts_say_their_kind);
    tcase_add_test(tc, test_txn_no_timestamps_switch);
    tcase_add_test(tc, test_txn_get_many_zero_keys_is_empty);
    tcase_add_test(tc, test_txn_remove_by_index);
    tcase_add_test(tc,
                   test_txn_versioned_api_first_version_once_and_bad_arguments);
    tcase_add_test(tc,
                   test_txn_reservation_of_a_vanished_txn_lapses_at_deadline);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("embedded");
    tcase_set_timeout(te, 60);
    tcase_add_checked_fixture(te, emb_setup, emb_teardown);
    tcase_add_test(te, test_txn_async_calls_back_on_the_host_loop);
    tcase_add_test(
        te, test_txn_empty_commit_calls_back_on_the_host_loop_not_inside);
    suite_add_tcase(s, te);
    return s;
}
