/* Key-version TTL and data-layer counters: the 1 ms quantum, never early,
 * refreshed only by a publish, 0 disables, batches of at most 256, running
 * transactions protect the versions they need, the counters of the stats
 * call, the TTL scanner actor and its lifecycle, bad arguments. Real
 * RocksDB in a temp dir, a standalone runtime, an injected clock that only
 * the test moves. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/index.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/table.h"
#include "troupe/ttl.h"
#include "troupe/txn.h"
#include "tsupport.h"

typedef struct ttl_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_queues *qs; /* the queue retention tests */
    char *dir;
    _Atomic int64_t now;
} ttl_fx;

static ttl_fx fx;

static int64_t
fake_clock(void *ctx)
{
    return atomic_load(&((ttl_fx *)ctx)->now);
}

static void
set_now(int64_t t)
{
    atomic_store(&fx.now, t);
}

/* Opens everything with a key-version TTL of ttl_us and a table "t". */
static void
open_fx(uint64_t ttl_us)
{
    memset(&fx, 0, sizeof(fx));
    atomic_store(&fx.now, 1000000);
    fx.dir = ts_tempdir("ttl");
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {.catalog = fx.cat,
                             .commit = fx.commit,
                             .clock = fake_clock,
                             .clock_ctx = &fx,
                             .version_ttl_us = ttl_us};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "t", NULL, 0));
}

static void
teardown(void)
{
    if (fx.qs != NULL) {
        ck_assert_ok(troupe_queues_stop_wait(fx.qs));
        troupe_queues_destroy(fx.qs);
        fx.qs = NULL;
    }
    if (fx.tables == NULL)
        return;
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
    fx.tables = NULL;
}

static const unsigned char DOC[] = {0x81, 0xa1, 'v', 0x01}; /* {"v": 1} */

static void
put(const char *key)
{
    /* A versioned client's key: its query makes the record (a plain write
     * of a key nobody holds a version of, with no transaction running,
     * makes none: test_vttl_plain_write_makes_no_record), and the write
     * publishes a new version into it, refreshing its TTL. */
    troupe_rows *rows = NULL;
    uint64_t v = 0;
    ck_assert_ok(troupe_txn_query_version_wait(fx.tables, "t", key, strlen(key),
                                               &rows, &v));
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "t", key, strlen(key), DOC,
                                          sizeof(DOC), NULL));
}

static uint64_t
evict(void)
{
    troupe_vevict_result r;
    ck_assert_ok(troupe_tables_evict_versions_wait(fx.tables, "t", &r));
    ck_assert_uint_le(r.largest, 256);
    return r.evicted;
}

/* The version records of table "t" (and their bytes in *bytes). */
static uint64_t
records(uint64_t *bytes)
{
    troupe_tables_stats *s = NULL;
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &s));
    ck_assert_uint_eq(s->n, 1);
    ck_assert_str_eq(s->tables[0].name, "t");
    uint64_t n = s->tables[0].version_records;
    if (bytes != NULL)
        *bytes = s->tables[0].version_bytes;
    troupe_tables_stats_destroy(s);
    return n;
}

START_TEST(test_vttl_truncated_to_ms_never_early)
{
    open_fx(20999); /* 20 ms */
    put("a");
    ck_assert_uint_eq(records(NULL), 1);
    set_now(1000000 + 19);
    ck_assert_uint_eq(evict(), 0);
    ck_assert_uint_eq(records(NULL), 1);
    set_now(1000000 + 20);
    ck_assert_uint_eq(evict(), 1);
    ck_assert_uint_eq(records(NULL), 0);
}
END_TEST

START_TEST(test_vttl_below_ms_rounds_up_to_1ms)
{
    open_fx(1);
    put("a");
    ck_assert_uint_eq(evict(), 0); /* same millisecond: not yet */
    set_now(1000001);
    ck_assert_uint_eq(evict(), 1);
}
END_TEST

/* A plain write of a key without a record makes none when no running
 * transaction can need its version; with one running it does; a version a
 * client got before still conflicts after such writes. */
START_TEST(test_vttl_plain_write_makes_no_record)
{
    open_fx(1000);
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "t", "p", 1, DOC,
                                          sizeof(DOC), NULL));
    ck_assert_uint_eq(records(NULL), 0);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "t", "q", 1, DOC,
                                          sizeof(DOC), NULL));
    ck_assert_uint_eq(records(NULL), 1); /* newer than tx's snapshot */
    troupe_txn_destroy(tx);
    /* a client's version of "p", then "p" is evicted and written again */
    troupe_rows *rows = NULL;
    uint64_t v = 0;
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, "t", "p", 1, &rows, &v));
    troupe_rows_destroy(rows);
    set_now(1000000 + 5);
    ck_assert_uint_eq(evict(), 2);
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "t", "p", 1, DOC,
                                          sizeof(DOC), NULL));
    ck_assert_uint_eq(records(NULL), 0);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "t", "p", 1, v));
    ck_assert_ok(troupe_txn_upsert(tx, "t", "p", 1, DOC, sizeof(DOC), NULL));
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
}
END_TEST

START_TEST(test_vttl_zero_disables)
{
    open_fx(0);
    put("a");
    put("b");
    set_now(INT64_MAX / 2);
    ck_assert_uint_eq(evict(), 0);
    ck_assert_uint_eq(records(NULL), 2);
}
END_TEST

START_TEST(test_vttl_refreshed_by_publish_only)
{
    open_fx(100000); /* 100 ms */
    put("a");
    troupe_rows *rows = NULL;
    uint64_t v1 = 0, v2 = 0;
    /* a versioned query of a known key is a cache hit: no refresh */
    set_now(1000000 + 50);
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, "t", "a", 1, &rows, &v1));
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_table_get_wait(fx.tables, "t", "a", 1, &rows));
    troupe_rows_destroy(rows);
    /* a write publishes: "b" written at +50 lives to +150 */
    put("b");
    set_now(1000000 + 99);
    ck_assert_uint_eq(evict(), 0);
    set_now(1000000 + 100);
    ck_assert_uint_eq(evict(), 1); /* "a" only */
    set_now(1000000 + 149);
    put("b"); /* refreshed again: to +249 */
    set_now(1000000 + 248);
    ck_assert_uint_eq(evict(), 0);
    set_now(1000000 + 249);
    ck_assert_uint_eq(evict(), 1);
    ck_assert_uint_eq(records(NULL), 0);
    /* evicted "a" gets a new first version on its next versioned query,
     * which publishes (and so refreshes) it */
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, "t", "a", 1, &rows, &v2));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
    ck_assert_uint_ne(v1, v2);
    ck_assert_uint_eq(records(NULL), 1);
    set_now(1000000 + 249 + 99);
    ck_assert_uint_eq(evict(), 0);
}
END_TEST

START_TEST(test_vttl_batches_of_at_most_256)
{
    open_fx(1000);
    char k[16];
    for (int i = 0; i < 600; i++) {
        snprintf(k, sizeof(k), "k%04d", i);
        put(k);
    }
    uint64_t bytes = 0;
    ck_assert_uint_eq(records(&bytes), 600);
    ck_assert_uint_ge(bytes, 600 * 5);
    set_now(1000000 + 1);
    troupe_vevict_result r;
    ck_assert_ok(troupe_tables_evict_versions_wait(fx.tables, "t", &r));
    ck_assert_uint_eq(r.evicted, 600);
    ck_assert_uint_eq(r.batches, 3);
    ck_assert_uint_eq(r.largest, 256);
    ck_assert_uint_eq(records(&bytes), 0);
    ck_assert_uint_eq(bytes, 0);
    troupe_tables_stats *s = NULL;
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &s));
    ck_assert_uint_eq(s->tables[0].version_evicted, 600);
    troupe_tables_stats_destroy(s);
}
END_TEST

START_TEST(test_vttl_running_txn_keeps_newer_versions)
{
    open_fx(1000);
    put("k1");
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_get_wait(tx, "t", "k2", 2, &rows), TROUPE_ENOENT);
    put("k2"); /* newer than tx's snapshot: tx must still see it change */
    set_now(1000000 + 10);
    ck_assert_uint_eq(evict(), 1); /* k1 only */
    ck_assert_uint_eq(records(NULL), 1);
    ck_assert_ok(troupe_txn_upsert(tx, "t", "k3", 2, DOC, sizeof(DOC), NULL));
    ck_assert_err(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
    ck_assert_uint_eq(evict(), 1); /* k2, no longer needed */
    ck_assert_uint_eq(records(NULL), 0);
}
END_TEST

START_TEST(test_stats_counters_move)
{
    open_fx(0);
    troupe_tables_stats *s0 = NULL, *s1 = NULL;
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &s0));
    ck_assert_uint_eq(s0->txn_created, 0);
    ck_assert_uint_eq(s0->qver_ok, 0);
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    troupe_txn *tx2 = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx2));
    troupe_txn_destroy(tx2);
    /* versioned: query, then a commit that passes and one that conflicts */
    troupe_rows *rows = NULL;
    uint64_t v = 0;
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, "t", "a", 1, &rows, &v));
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_txn_read_version(tx, "t", "a", 1, v));
    ck_assert_ok(troupe_txn_upsert(tx, "t", "a", 1, DOC, sizeof(DOC), NULL));
    ck_assert_ok(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(troupe_txn_read_version(tx, "t", "a", 1, v)); /* stale */
    ck_assert_ok(troupe_txn_upsert(tx, "t", "a", 1, DOC, sizeof(DOC), NULL));
    ck_assert_err(troupe_txn_commit_version_wait(tx, TROUPE_SYNC_DEFAULT),
                  TROUPE_ECONFLICT);
    ck_assert_ok(troupe_tables_stats_wait(fx.tables, &s1));
    ck_assert_uint_eq(s1->txn_created, 3);
    ck_assert_uint_eq(s1->txn_closed, 2);
    ck_assert_uint_eq(s1->txn_running, 1);
    ck_assert_uint_eq(s1->qver_ok, 1);
    ck_assert_uint_eq(s1->qver_failed, 0);
    ck_assert_uint_eq(s1->vprepare_ok, 1);
    ck_assert_uint_eq(s1->vprepare_failed, 1);
    ck_assert_uint_eq(s1->vcommit_ok, 1);
    ck_assert_uint_eq(s1->vcommit_failed, 0);
    ck_assert_uint_eq(s1->tables[0].version_records, 1);
    ck_assert_uint_gt(s1->tables[0].version_bytes, 0);
    troupe_txn_destroy(tx);
    troupe_tables_stats_destroy(s0);
    troupe_tables_stats_destroy(s1);
}
END_TEST

static bool
passes_reached(void *arg);

/* ---- expired rows ------------------------------------------------------ */

static const troupe_index_field EF = {.path = "e", .type = TROUPE_FIELD_STRING};
static const troupe_index_spec ESPEC = {
    .name = "by_e", .fields = &EF, .n_fields = 1};

/* Table "r" with index by_e on {"e": key}. */
static void
open_rows(void)
{
    open_fx(0);
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "r", &ESPEC, 1));
}

static void
put_row(const char *key, int64_t expires)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_str(&p, "e", 1);
    troupe_pack_str(&p, key, strlen(key));
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    troupe_write_opts wo = {.expires_at_ms = expires};
    ck_assert_ok(
        troupe_table_upsert_wait(fx.tables, "r", key, strlen(key), d, n, &wo));
    troupe_pack_fini(&p);
}

/* Entries of family `name` ("t.2"...); -1 when there is no such family. */
static long
cf_count(const char *name)
{
    troupe_cf *cf = NULL;
    if (troupe_db_cf(fx.db, name, &cf) != TROUPE_OK)
        return -1;
    troupe_page *pg = NULL;
    ck_assert_ok(
        troupe_db_scan(fx.db, cf, NULL, NULL, NULL, 0, 100000, false, &pg));
    long n = (long)pg->n;
    troupe_page_destroy(pg);
    return n;
}

/* The families of table "r" (created after "t": the highest ids). */
typedef struct rfams {
    uint64_t tid, xid;
} rfams;

static rfams
find_r(void)
{
    rfams f = {0, 0};
    char b[32];
    for (uint64_t id = 1; id < 64; id++) {
        snprintf(b, sizeof(b), "t.%llu", (unsigned long long)id);
        if (cf_count(b) >= 0)
            f.tid = id;
        snprintf(b, sizeof(b), "x.%llu", (unsigned long long)id);
        if (cf_count(b) >= 0)
            f.xid = id;
    }
    ck_assert_uint_gt(f.tid, 0);
    ck_assert_uint_gt(f.xid, 0);
    return f;
}

static long
fam(char kind, uint64_t id)
{
    char b[32];
    snprintf(b, sizeof(b), "%c.%llu", kind, (unsigned long long)id);
    return cf_count(b);
}

static void
on_mismatch(void *ctx, const troupe_index_mismatch *m)
{
    (void)m;
    (*(int *)ctx)++;
}

/* Runs verify (with derive) over table "r"; returns the mismatches. */
static int
verify_r(rfams f)
{
    troupe_index_def *def = NULL;
    ck_assert_ok(troupe_index_def_create(&ESPEC, f.xid, &def));
    int bad = 0;
    const troupe_index_def *defs[1] = {def};
    troupe_index_verify_opts vo = {.table_id = f.tid,
                                   .defs = defs,
                                   .n_defs = 1,
                                   .derive = true,
                                   .budget = 1000,
                                   .cb = on_mismatch,
                                   .cb_ctx = &bad};
    void *cur = NULL;
    size_t cl = 0;
    bool done = false;
    while (!done) {
        void *nx = NULL;
        size_t nl = 0;
        ck_assert_ok(
            troupe_index_verify_step(fx.db, &vo, cur, cl, &nx, &nl, &done));
        troupe_free(cur);
        cur = nx;
        cl = nl;
    }
    troupe_free(cur);
    troupe_index_def_destroy(def);
    return bad;
}

START_TEST(test_purge_deletes_expired_rows_entries_manifests)
{
    open_rows();
    char k[16];
    /* 600 rows: every third expires at +10, every third at +1000, the
     * rest never; 600 > 256 makes the pass take several steps */
    for (int i = 0; i < 600; i++) {
        snprintf(k, sizeof(k), "k%04d", i);
        put_row(k, i % 3 == 0 ? 1000000 + 10 : i % 3 == 1 ? 1000000 + 1000 : 0);
    }
    rfams f = find_r();
    ck_assert_int_eq(fam('t', f.tid), 600);
    ck_assert_int_eq(fam('m', f.tid), 600);
    ck_assert_int_eq(fam('x', f.xid), 600);
    troupe_purge_result r;
    /* nothing expired yet: never early */
    set_now(1000000 + 9);
    ck_assert_ok(troupe_tables_purge_expired_wait(fx.tables, "r", &r));
    ck_assert_uint_eq(r.scanned, 600);
    ck_assert_uint_eq(r.purged, 0);
    ck_assert_uint_ge(r.steps, 3);
    ck_assert_int_eq(fam('t', f.tid), 600);
    /* renew one that is about to expire: it must stay */
    put_row("k0000", 0);
    set_now(1000000 + 10);
    ck_assert_ok(troupe_tables_purge_expired_wait(fx.tables, "r", &r));
    ck_assert_uint_eq(r.purged, 199);
    ck_assert_int_eq(fam('t', f.tid), 401);
    ck_assert_int_eq(fam('m', f.tid), 401);
    ck_assert_int_eq(fam('x', f.xid), 401);
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(fx.tables, "r", "k0000", 5, &rows));
    troupe_rows_destroy(rows);
    ck_assert_int_eq(verify_r(f), 0);
    /* a second pass finds nothing more */
    ck_assert_ok(troupe_tables_purge_expired_wait(fx.tables, "r", &r));
    ck_assert_uint_eq(r.purged, 0);
    /* and the scanner purges the rest once they expire */
    set_now(1000000 + 1000);
    troupe_ttl_opts o = {
        .rt = fx.rt, .tables = fx.tables, .interval_ms = 3600000};
    troupe_ttl *sc = NULL;
    ck_assert_ok(troupe_ttl_create(&o, &sc));
    ck_assert_ok(troupe_ttl_kick(sc));
    ck_assert(ts_wait_until(passes_reached, sc, 10000));
    ck_assert_uint_eq(troupe_ttl_purged(sc), 200);
    ck_assert_ok(troupe_ttl_stop_wait(sc));
    troupe_ttl_destroy(sc);
    ck_assert_int_eq(fam('t', f.tid), 201);
    ck_assert_int_eq(fam('m', f.tid), 201);
    ck_assert_int_eq(fam('x', f.xid), 201);
    ck_assert_int_eq(verify_r(f), 0);
}
END_TEST

static bool
passes_reached(void *arg)
{
    return troupe_ttl_passes(arg) >= 1;
}

typedef struct pwait {
    troupe_ttl *sc;
    uint64_t want;
} pwait;

static bool
passes_at_least(void *arg)
{
    pwait *w = arg;
    return troupe_ttl_passes(w->sc) >= w->want;
}

START_TEST(test_ttl_scanner_kick_evicts)
{
    open_fx(5000);
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", NULL, 0));
    put("a");
    troupe_rows *rows = NULL;
    uint64_t v = 0; /* a record in the second table too */
    ck_assert_ok(
        troupe_txn_query_version_wait(fx.tables, "u", "b", 1, &rows, &v));
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "u", "b", 1, DOC,
                                          sizeof(DOC), NULL));
    troupe_ttl_opts o = {
        .rt = fx.rt, .tables = fx.tables, .interval_ms = 3600000};
    troupe_ttl *sc = NULL;
    ck_assert_ok(troupe_ttl_create(&o, &sc));
    ck_assert_ok(troupe_ttl_kick(sc)); /* too early: evicts nothing */
    ck_assert(ts_wait_until(passes_reached, sc, 10000));
    ck_assert_uint_eq(troupe_ttl_evicted(sc), 0);
    set_now(1000000 + 5);
    pwait pw = {sc, troupe_ttl_passes(sc) + 1};
    ck_assert_ok(troupe_ttl_kick(sc));
    ck_assert(ts_wait_until(passes_at_least, &pw, 10000));
    ck_assert_uint_eq(troupe_ttl_evicted(sc), 2);
    ck_assert_ok(troupe_ttl_stop_wait(sc));
    ck_assert_err(troupe_ttl_stop_wait(sc), TROUPE_ESTATE);
    ck_assert_err(troupe_ttl_kick(sc), TROUPE_ESTATE);
    troupe_ttl_destroy(sc);
}
END_TEST

static void
never(troupe_err err, const troupe_vevict_result *r, void *arg)
{
    (void)err;
    (void)r;
    (void)arg;
    ck_abort_msg("callback of a refused call");
}

START_TEST(test_ttl_bad_arguments)
{
    open_fx(1000);
    troupe_vevict_result r;
    ck_assert_err(troupe_tables_evict_versions(NULL, "t", never, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_evict_versions(fx.tables, NULL, never, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_evict_versions(fx.tables, "t", NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_evict_versions(fx.tables, "", never, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_evict_versions(fx.tables, "nope", never, NULL),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_tables_evict_versions_wait(fx.tables, "t", NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_evict_versions_wait(fx.tables, "nope", &r),
                  TROUPE_ENOTABLE);
    ck_assert_uint_eq(r.evicted, 0);
    troupe_purge_result pr;
    ck_assert_err(troupe_tables_purge_expired(NULL, "t", NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_purge_expired_wait(NULL, "t", &pr),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_purge_expired_wait(fx.tables, NULL, &pr),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_purge_expired_wait(fx.tables, "t", NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_purge_expired_wait(fx.tables, "nope", &pr),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_tables_purge_expired_wait(fx.tables, "", &pr),
                  TROUPE_EINVAL);
    troupe_tables_stats *s = NULL;
    ck_assert_err(troupe_tables_stats_wait(NULL, &s), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_stats_wait(fx.tables, NULL), TROUPE_EINVAL);
    troupe_tables_stats_destroy(NULL);
    troupe_ttl *sc = (troupe_ttl *)&r;
    ck_assert_err(troupe_ttl_create(NULL, &sc), TROUPE_EINVAL);
    ck_assert_ptr_null(sc);
    troupe_ttl_opts o = {.rt = fx.rt};
    ck_assert_err(troupe_ttl_create(&o, &sc), TROUPE_EINVAL);
    o.tables = fx.tables;
    ck_assert_err(troupe_ttl_create(&o, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_ttl_kick(NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_ttl_stop(NULL, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_ttl_stop_wait(NULL), TROUPE_EINVAL);
    ck_assert_uint_eq(troupe_ttl_passes(NULL), 0);
    troupe_ttl_destroy(NULL);
    /* stopped tables refuse both calls */
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    ck_assert_err(troupe_tables_stats_wait(fx.tables, &s), TROUPE_ESTATE);
    ck_assert_err(troupe_tables_evict_versions_wait(fx.tables, "t", &r),
                  TROUPE_ESTATE);
    troupe_tables_destroy(fx.tables);
    fx.tables = NULL;
    ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
    ts_rmtree(fx.dir);
    free(fx.dir);
}
END_TEST

/* ---- queue retention ---------------------------------------------------- */

#define QT0 1000000 /* the fixture's clock at start */

/* Opens the fixture and the queues on its clock, with queue "q" keeping
 * completed rows retention_ms. */
static void
open_queues(int64_t retention_ms)
{
    open_fx(0);
    troupe_queues_opts qo = {.catalog = fx.cat,
                             .commit = fx.commit,
                             .clock = fake_clock,
                             .clock_ctx = &fx};
    ck_assert_ok(troupe_queues_open(&qo, &fx.qs));
    troupe_queue_spec sp = {
        .name = "q", .partitions = 2, .retention_ms = retention_ms};
    ck_assert_ok(troupe_queues_create_wait(fx.qs, &sp));
}

/* Publishes event `id` (owner "user"/"u") due at `t`. */
static void
qpub(const char *id, int64_t t)
{
    static const unsigned char nil = 0xc0;
    troupe_queue_event ev = {.id = id,
                             .id_len = strlen(id),
                             .key = id,
                             .key_len = strlen(id),
                             .payload = &nil,
                             .payload_len = 1,
                             .time_ms = t,
                             .owner_kind = "user",
                             .owner_kind_len = 4,
                             .owner_id = "u",
                             .owner_id_len = 1};
    ck_assert_ok(troupe_queue_publish_wait(fx.qs, "q", &ev, TROUPE_SYNC_OFF));
}

/* Publishes n events (prefix `tag`) and completes them now. */
static void
qcomplete(const char *tag, int n)
{
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "%s%d", tag, i);
        qpub(id, 0);
    }
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "%s%d", tag, i);
        troupe_queue_page *pg = NULL;
        ck_assert_ok(troupe_queue_lookup_wait(fx.qs, "q", id, strlen(id), &pg));
        ck_assert_uint_eq(pg->n, 1);
        ck_assert(!pg->items[0].completed);
        ck_assert_ok(troupe_queue_ack_wait(fx.qs, "q", pg->items[0].skey,
                                           pg->items[0].skey_len,
                                           TROUPE_SYNC_OFF));
        troupe_queue_page_destroy(pg);
    }
}

static void
qcounts(uint64_t *pending, uint64_t *completed)
{
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(fx.qs, "q", &st));
    *pending = st->pending;
    *completed = st->completed;
    troupe_free(st);
}

/* Invocations of id stored (lookup goes through the id entries). */
static size_t
qlookup(const char *id)
{
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_lookup_wait(fx.qs, "q", id, strlen(id), &pg));
    size_t n = pg->n;
    troupe_queue_page_destroy(pg);
    return n;
}

typedef struct qwait {
    troupe_ttl *sc;
    uint64_t want;
} qwait;

static bool
qpasses_at_least(void *arg)
{
    qwait *w = arg;
    return troupe_ttl_queue_passes(w->sc) >= w->want;
}

/* Kicks the scanner and waits for its next queue pass to end. */
static void
qkick_pass(troupe_ttl *sc)
{
    qwait w = {sc, troupe_ttl_queue_passes(sc) + 1};
    ck_assert_ok(troupe_ttl_kick(sc));
    ck_assert(ts_wait_until(qpasses_at_least, &w, 10000));
}

static troupe_ttl *
qscanner(uint32_t batch)
{
    troupe_ttl_opts o = {.rt = fx.rt,
                         .tables = fx.tables,
                         .interval_ms = 3600000, /* only kicks run passes */
                         .queues = fx.qs,
                         .queue_batch = batch,
                         .clock = fake_clock,
                         .clock_ctx = &fx};
    troupe_ttl *sc = NULL;
    ck_assert_ok(troupe_ttl_create(&o, &sc));
    return sc;
}

START_TEST(test_ttl_queue_retention_old_completed_go_pending_stay)
{
    open_queues(100);
    qcomplete("done", 10); /* processed at QT0 */
    qpub("later", QT0 + 50);
    qpub("old", 0); /* pending and far older than the retention */
    qpub("future", QT0 + 999999);
    uint64_t p, c;
    qcounts(&p, &c);
    ck_assert_uint_eq(p, 3);
    ck_assert_uint_eq(c, 10);
    troupe_ttl *sc = qscanner(0);
    /* processed == now - retention: not older than it yet */
    set_now(QT0 + 100);
    qkick_pass(sc);
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 0);
    qcounts(&p, &c);
    ck_assert_uint_eq(c, 10);
    set_now(QT0 + 101);
    qkick_pass(sc);
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 10);
    qcounts(&p, &c);
    ck_assert_uint_eq(c, 0);
    ck_assert_uint_eq(p, 3);                /* pending rows are never touched */
    ck_assert_uint_eq(qlookup("done3"), 0); /* id entries went with rows */
    ck_assert_uint_eq(qlookup("old"), 1);
    size_t del = 9;
    ck_assert_ok(troupe_queue_delete_by_owner_wait(
        fx.qs, "q", "user", 4, "u", 1, NULL, NULL, TROUPE_SYNC_OFF, &del));
    ck_assert_uint_eq(del, 3); /* only the pending rows' owner entries */
    /* pending rows stay whatever the clock says */
    qpub("old2", 0);
    set_now(INT64_MAX / 2);
    qkick_pass(sc);
    qcounts(&p, &c);
    ck_assert_uint_eq(p, 1);
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 10);
    ck_assert_ok(troupe_ttl_stop_wait(sc));
    troupe_ttl_destroy(sc);
}
END_TEST

START_TEST(test_ttl_queue_full_batch_continues_short_waits)
{
    open_queues(10);
    qcomplete("a", 10);
    set_now(QT0 + 11);
    troupe_ttl *sc = qscanner(4);
    /* one kick: batches of 4, 4, 2; the full ones go on without a tick */
    qkick_pass(sc);
    ck_assert_uint_eq(troupe_ttl_queue_batches(sc), 3);
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 10);
    ck_assert_uint_eq(troupe_ttl_queue_passes(sc), 1);
    uint64_t p, c;
    qcounts(&p, &c);
    ck_assert_uint_eq(c, 0);
    /* 8 more: 4, 4, then an empty short batch ends the pass */
    qcomplete("b", 8);
    set_now(QT0 + 30);
    qkick_pass(sc);
    ck_assert_uint_eq(troupe_ttl_queue_batches(sc), 6);
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 18);
    /* a short batch waits for the next tick: rows that expire after it
     * stay until then (the pass is over: nothing is queued or running) */
    qcomplete("c", 3);
    set_now(QT0 + 50);
    ck_assert_uint_eq(troupe_ttl_queue_batches(sc), 6);
    qcounts(&p, &c);
    ck_assert_uint_eq(c, 3);
    qkick_pass(sc);
    ck_assert_uint_eq(troupe_ttl_queue_batches(sc), 7);
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 21);
    qcounts(&p, &c);
    ck_assert_uint_eq(c, 0);
    ck_assert_uint_eq(p, 0);
    ck_assert_ok(troupe_ttl_stop_wait(sc));
    troupe_ttl_destroy(sc);
}
END_TEST

START_TEST(test_ttl_queue_only_and_stop_waits)
{
    /* queues without tables; a scanner with neither is refused */
    open_queues(0);
    troupe_ttl_opts o = {.rt = fx.rt};
    troupe_ttl *sc = NULL;
    ck_assert_err(troupe_ttl_create(&o, &sc), TROUPE_EINVAL);
    o.queues = fx.qs;
    o.interval_ms = 3600000;
    o.queue_batch = 1;
    o.clock = fake_clock;
    o.clock_ctx = &fx;
    ck_assert_ok(troupe_ttl_create(&o, &sc));
    qcomplete("x", 5);
    set_now(QT0 + 1);
    qkick_pass(sc);
    ck_assert_uint_eq(troupe_ttl_queue_batches(sc), 6); /* 5 full, 1 empty */
    ck_assert_uint_eq(troupe_ttl_queue_purged(sc), 5);
    ck_assert_uint_eq(troupe_ttl_passes(sc), 0); /* no table pass */
    /* stop in the middle of a long pass: it returns once the running
     * batch is done, and the queues can be stopped right after */
    qcomplete("y", 50);
    set_now(QT0 + 2);
    ck_assert_ok(troupe_ttl_kick(sc));
    ck_assert_ok(troupe_ttl_stop_wait(sc));
    troupe_ttl_destroy(sc);
    ck_assert_uint_eq(troupe_ttl_queue_purged(NULL), 0);
    ck_assert_uint_eq(troupe_ttl_queue_batches(NULL), 0);
    ck_assert_uint_eq(troupe_ttl_queue_passes(NULL), 0);
}
END_TEST

/* ---- lifecycle: stop(cb), stop_wait, destroy ---------------------------- */

/* A table scanner whose passes only kicks start. */
static troupe_ttl *
tscanner(void)
{
    troupe_ttl_opts o = {
        .rt = fx.rt, .tables = fx.tables, .interval_ms = 3600000};
    troupe_ttl *sc = NULL;
    ck_assert_ok(troupe_ttl_create(&o, &sc));
    return sc;
}

/* What a stop callback saw, or where a posted call ran. */
typedef struct tseen {
    _Atomic int calls;
    troupe_ttl *sc;
    pthread_t thread;
} tseen;

static void
ttl_stopped(troupe_ttl *s, void *arg)
{
    tseen *t = arg;
    t->sc = s;
    t->thread = pthread_self();
    atomic_fetch_add(&t->calls, 1);
}

static void
note_thread(void *arg, troupe_runtime *rt)
{
    (void)rt;
    tseen *t = arg;
    t->thread = pthread_self();
    atomic_fetch_add(&t->calls, 1);
}

static bool
seen(void *arg)
{
    return atomic_load(&((tseen *)arg)->calls) > 0;
}

/* Where scheduler 0 runs, and (called again) that whatever was posted
 * before from this thread has run. */
static pthread_t
sched0_thread(void)
{
    tseen t = {0};
    ck_assert_ok(troupe_runtime_post(fx.rt, note_thread, &t));
    ck_assert(ts_wait_until(seen, &t, 10000));
    return t.thread;
}

START_TEST(test_ttl_stop_calls_back_once_on_scheduler_0)
{
    open_fx(1000);
    troupe_ttl *sc = tscanner();
    pthread_t s0 = sched0_thread();
    tseen st = {0};
    ck_assert_ok(troupe_ttl_stop(sc, ttl_stopped, &st));
    ck_assert_err(troupe_ttl_kick(sc), TROUPE_ESTATE);
    ck_assert(ts_wait_until(seen, &st, 10000));
    (void)sched0_thread(); /* anything queued on scheduler 0 has run */
    ck_assert_int_eq(atomic_load(&st.calls), 1);
    ck_assert_ptr_eq(st.sc, sc);
    ck_assert(pthread_equal(st.thread, s0));
    ck_assert(!pthread_equal(st.thread, pthread_self()));
    troupe_ttl_destroy(sc);
}
END_TEST

START_TEST(test_ttl_stop_wait_after_stop_is_estate)
{
    open_fx(1000);
    troupe_ttl *sc = tscanner();
    tseen st = {0};
    ck_assert_err(troupe_ttl_stop(sc, NULL, &st), TROUPE_EINVAL);
    ck_assert_ok(troupe_ttl_stop(sc, ttl_stopped, &st));
    ck_assert_err(troupe_ttl_stop_wait(sc), TROUPE_ESTATE);
    ck_assert_err(troupe_ttl_stop(sc, ttl_stopped, &st), TROUPE_ESTATE);
    ck_assert(ts_wait_until(seen, &st, 10000));
    ck_assert_err(troupe_ttl_stop_wait(sc), TROUPE_ESTATE);
    (void)sched0_thread();
    ck_assert_int_eq(atomic_load(&st.calls), 1);
    troupe_ttl_destroy(sc);
}
END_TEST

typedef struct tblock {
    troupe_ttl *sc;
    _Atomic int err; /* -1 until the posted call ran */
} tblock;

static void
post_stop_wait(void *arg, troupe_runtime *rt)
{
    (void)rt;
    tblock *b = arg;
    atomic_store(&b->err, (int)troupe_ttl_stop_wait(b->sc));
}

static bool
block_ran(void *arg)
{
    return atomic_load(&((tblock *)arg)->err) != -1;
}

/* On scheduler 0 the wait would wait for its own thread: refused, and the
 * scanner still runs; the test's thread may stop it. */
START_TEST(test_ttl_stop_wait_on_a_scheduler_is_edeadlk)
{
    open_fx(1000);
    tblock b = {.sc = tscanner()};
    atomic_store(&b.err, -1);
    ck_assert_ok(troupe_runtime_post(fx.rt, post_stop_wait, &b));
    ck_assert(ts_wait_until(block_ran, &b, 10000));
    ck_assert_err(atomic_load(&b.err), TROUPE_EDEADLK);
    ck_assert_ok(troupe_ttl_kick(b.sc));
    ck_assert_ok(troupe_ttl_stop_wait(b.sc));
    troupe_ttl_destroy(b.sc);
}
END_TEST

/* Run with SIGABRT expected. The temp dir goes first: nothing after the
 * abort would remove it. */
START_TEST(test_ttl_destroy_of_a_running_scanner_aborts)
{
    open_fx(1000);
    troupe_ttl *sc = tscanner();
    ts_rmtree(fx.dir);
    troupe_ttl_destroy(sc);
}
END_TEST

Suite *
ttl_suite(void)
{
    Suite *s = suite_create("ttl");
    TCase *tc = tcase_create("ttl");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_vttl_truncated_to_ms_never_early);
    tcase_add_test(tc, test_vttl_below_ms_rounds_up_to_1ms);
    tcase_add_test(tc, test_vttl_zero_disables);
    tcase_add_test(tc, test_vttl_plain_write_makes_no_record);
    tcase_add_test(tc, test_vttl_refreshed_by_publish_only);
    tcase_add_test(tc, test_vttl_batches_of_at_most_256);
    tcase_add_test(tc, test_vttl_running_txn_keeps_newer_versions);
    tcase_add_test(tc, test_stats_counters_move);
    tcase_add_test(tc, test_ttl_scanner_kick_evicts);
    tcase_add_test(tc, test_ttl_bad_arguments);
    tcase_add_test(tc, test_purge_deletes_expired_rows_entries_manifests);
    tcase_add_test(tc, test_ttl_queue_retention_old_completed_go_pending_stay);
    tcase_add_test(tc, test_ttl_queue_full_batch_continues_short_waits);
    tcase_add_test(tc, test_ttl_queue_only_and_stop_waits);
    tcase_add_test(tc, test_ttl_stop_calls_back_once_on_scheduler_0);
    tcase_add_test(tc, test_ttl_stop_wait_after_stop_is_estate);
    tcase_add_test(tc, test_ttl_stop_wait_on_a_scheduler_is_edeadlk);
    tcase_add_test_raise_signal(
        tc, test_ttl_destroy_of_a_running_scanner_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
