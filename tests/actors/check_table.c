/* Tables: catalog, row operations, manifests, integrity, expiry, scans,
 * unique indexes, and the public API's argument checks. Real RocksDB in a
 * temp dir; the runtime embedded on the test's loop (scheduler 0), except
 * for the blocking twins, which run against a standalone runtime. */
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/index.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "troupe/wire.h"
#include "tsupport.h"

#define T0 1700000000000LL

typedef struct tb_fx {
    uv_loop_t loop;
    bool embedded;
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    char *dir;
    int done;
    _Atomic int64_t now;
    /* last result */
    int calls;
    troupe_err err;
    troupe_rows *rows;
} tb_fx;

static tb_fx fx;

static int64_t
fake_clock(void *ctx)
{
    return atomic_load(&fx.now);
}

static void
open_all(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 2};
    if (fx.embedded) {
        ck_assert_int_eq(uv_loop_init(&fx.loop), 0);
        o.loop = &fx.loop;
    }
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {
        .catalog = fx.cat, .commit = fx.commit, .clock = fake_clock};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
}

static bool
is_done(void *arg)
{
    return fx.done;
}

static void
on_tables_stopped(troupe_tables *t, void *arg)
{
    fx.done = 1;
}

static void
on_shutdown(troupe_runtime *rt, void *arg)
{
    fx.done = 1;
}

static void
close_all(void)
{
    if (fx.embedded) {
        fx.done = 0;
        ck_assert_ok(troupe_tables_stop(fx.tables, on_tables_stopped, NULL));
        ck_assert(ts_run_until(&fx.loop, is_done, NULL, 10000));
        troupe_tables_destroy(fx.tables);
        fx.done = 0;
        ck_assert_ok(troupe_runtime_shutdown(fx.rt, on_shutdown, NULL));
        ck_assert(ts_run_until(&fx.loop, is_done, NULL, 10000));
        ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
        troupe_catalog_destroy(fx.cat);
        troupe_runtime_destroy(fx.rt);
        ck_assert_int_eq(ts_loop_close(&fx.loop), 0);
    } else {
        ck_assert_ok(troupe_tables_stop_wait(fx.tables));
        troupe_tables_destroy(fx.tables);
        ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
        ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
        troupe_catalog_destroy(fx.cat);
        troupe_runtime_destroy(fx.rt);
    }
    fx.tables = NULL;
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
}

static void
setup_common(bool embedded)
{
    memset(&fx, 0, sizeof(fx));
    fx.embedded = embedded;
    atomic_store(&fx.now, T0);
    fx.dir = ts_tempdir("table");
    open_all();
}

static void
setup(void)
{
    setup_common(true);
}

static void
setup_standalone(void)
{
    setup_common(false);
}

static void
teardown(void)
{
    troupe_rows_destroy(fx.rows);
    fx.rows = NULL;
    close_all();
    ts_rmtree(fx.dir);
    free(fx.dir);
}

/* ---- drivers ----------------------------------------------------------- */

static int want;
static bool
have(void *arg)
{
    return fx.calls >= want;
}

static void
on_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    fx.calls++;
    fx.err = err;
    troupe_rows_destroy(fx.rows);
    fx.rows = rows;
}

static void
on_ddl(troupe_tables *t, troupe_err err, void *arg)
{
    fx.calls++;
    fx.err = err;
}

/* Runs the loop until the call started (OK) has called back. */
static troupe_err
drive(troupe_err started)
{
    if (started != TROUPE_OK)
        return started;
    want = fx.calls + 1;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    return fx.err;
}

static troupe_err
create(const char *name)
{
    return drive(troupe_tables_create(fx.tables, name, NULL, 0, on_ddl, NULL));
}

static troupe_err
create_idx(const char *name, const troupe_index_spec *idx, size_t n)
{
    return drive(troupe_tables_create(fx.tables, name, idx, n, on_ddl, NULL));
}

static troupe_err
drop(const char *name)
{
    return drive(troupe_tables_drop(fx.tables, name, on_ddl, NULL));
}

/* A document {k1: v1, ...}; a NULL value packs int 0. Static buffer. */
static unsigned char docbuf[4096];
static size_t doclen;

static const void *
doc(int pairs, ...)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, (uint32_t)pairs);
    va_list ap;
    va_start(ap, pairs);
    for (int i = 0; i < pairs; i++) {
        troupe_pack_cstr(&p, va_arg(ap, const char *));
        const char *v = va_arg(ap, const char *);
        if (v != NULL)
            troupe_pack_cstr(&p, v);
        else
            troupe_pack_int(&p, 0);
    }
    va_end(ap);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    ck_assert_uint_le(n, sizeof(docbuf));
    memcpy(docbuf, d, n);
    doclen = n;
    troupe_pack_fini(&p);
    return docbuf;
}

static troupe_err
ins(const char *t, const char *k, const void *d)
{
    return drive(troupe_table_insert(fx.tables, t, k, strlen(k), d, doclen,
                                     NULL, on_rows, NULL));
}

static troupe_err
ins_exp(const char *t, const char *k, const void *d, int64_t exp)
{
    troupe_write_opts wo = {.expires_at_ms = exp};
    return drive(troupe_table_insert(fx.tables, t, k, strlen(k), d, doclen, &wo,
                                     on_rows, NULL));
}

static troupe_err
upd(const char *t, const char *k, const void *d)
{
    return drive(troupe_table_update(fx.tables, t, k, strlen(k), d, doclen,
                                     NULL, on_rows, NULL));
}

static troupe_err
ups(const char *t, const char *k, const void *d)
{
    return drive(troupe_table_upsert(fx.tables, t, k, strlen(k), d, doclen,
                                     NULL, on_rows, NULL));
}

static troupe_err
del(const char *t, const char *k)
{
    return drive(
        troupe_table_delete(fx.tables, t, k, strlen(k), NULL, on_rows, NULL));
}

static troupe_err
get(const char *t, const char *k)
{
    return drive(troupe_table_get(fx.tables, t, k, strlen(k), on_rows, NULL));
}

static troupe_err
scan(const char *t, const char *start, const char *end, const void *after,
     size_t after_len, size_t limit, bool rev)
{
    troupe_scan_opts so = {.start = start,
                           .start_len = start ? strlen(start) : 0,
                           .end = end,
                           .end_len = end ? strlen(end) : 0,
                           .after = after,
                           .after_len = after_len,
                           .limit = limit,
                           .reverse = rev};
    return drive(troupe_table_scan(fx.tables, t, &so, on_rows, NULL));
}

/* A scan cursor of table `id` at key k, built by hand (troupe/cursor.h);
 * its length is strlen(k) + TROUPE_CURSOR_OVERHEAD. Static buffer. */
static const void *
kc_id(uint64_t id, const char *k)
{
    static uint8_t buf[4][64];
    static int next;
    uint8_t *b = buf[next++ % 4];
    troupe__cursor_put(b, TROUPE_CURSOR_ROWS, id, k, strlen(k));
    return b;
}
/* The first table of a test has id 1. */
#define KC(k) kc_id(1, k), strlen(k) + TROUPE_CURSOR_OVERHEAD

/* The string field `f` of row i of the last result ("" when absent). */
static const char *
field(size_t i, const char *f)
{
    static char out[256];
    out[0] = '\0';
    ck_assert_ptr_nonnull(fx.rows);
    ck_assert_uint_lt(i, fx.rows->n);
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, fx.rows->rows[i].doc, fx.rows->rows[i].doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t k = 0; k < n; k++) {
        const char *s;
        size_t sl;
        troupe_read_str(&r, 256, &s, &sl);
        if (sl == strlen(f) && memcmp(s, f, sl) == 0 &&
            troupe_read_peek(&r) == TROUPE_MP_STR) {
            troupe_read_str(&r, 255, &s, &sl);
            memcpy(out, s, sl);
            out[sl] = '\0';
            return out;
        }
        troupe_read_skip(&r);
    }
    return out;
}

/* The int field `f` of row i, or -1. */
static int64_t
ifield(size_t i, const char *f)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, fx.rows->rows[i].doc, fx.rows->rows[i].doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t k = 0; k < n; k++) {
        const char *s;
        size_t sl;
        troupe_read_str(&r, 256, &s, &sl);
        if (sl == strlen(f) && memcmp(s, f, sl) == 0) {
            int64_t v = -1;
            troupe_read_int(&r, &v);
            return v;
        }
        troupe_read_skip(&r);
    }
    return -1;
}

static bool
row_key_is(size_t i, const char *k)
{
    return fx.rows->rows[i].key_len == strlen(k) &&
           memcmp(fx.rows->rows[i].key, k, strlen(k)) == 0;
}

static troupe_cf *
cf(const char *name)
{
    troupe_cf *c = NULL;
    ck_assert_ok(troupe_db_cf(fx.db, name, &c));
    return c;
}

static void
raw_put(const char *family, const char *k, const void *v, size_t vlen)
{
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf(family), k, strlen(k), v, vlen));
    ck_assert_ok(troupe_db_write(fx.db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
}

static void
raw_del(const char *family, const char *k)
{
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_delete(b, cf(family), k, strlen(k)));
    ck_assert_ok(troupe_db_write(fx.db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
}

/* The stored bytes of family/key (troupe_free), or NULL when absent. */
static void *
raw_get(const char *family, const void *k, size_t klen, size_t *len)
{
    void *v = NULL;
    troupe_err e = troupe_db_get(fx.db, cf(family), NULL, k, klen, &v, len);
    if (e == TROUPE_ENOENT)
        return NULL;
    ck_assert_ok(e);
    return v;
}

static size_t
family_count(const char *family)
{
    troupe_page *pg = NULL;
    ck_assert_ok(troupe_db_scan(fx.db, cf(family), NULL, NULL, NULL, 0, 1000,
                                false, &pg));
    size_t n = pg->n;
    troupe_page_destroy(pg);
    return n;
}

/* ---- catalog ----------------------------------------------------------- */

static size_t
list(char ***names)
{
    size_t n = 0;
    ck_assert_ok(troupe_tables_list(fx.tables, names, &n));
    return n;
}

START_TEST(test_catalog_create_list_drop_round_trip)
{
    ck_assert_ok(create("users"));
    ck_assert_ok(create("orders"));
    char **names;
    ck_assert_uint_eq(list(&names), 2);
    ck_assert_str_eq(names[0], "orders");
    ck_assert_str_eq(names[1], "users");
    troupe_free(names);
    ck_assert_ok(drop("users"));
    ck_assert_uint_eq(list(&names), 1);
    ck_assert_str_eq(names[0], "orders");
    troupe_free(names);
    ck_assert_err(get("users", "k"), TROUPE_ENOTABLE);
}
END_TEST

START_TEST(test_catalog_duplicate_name_is_eexist)
{
    static const troupe_index_field f = {"email", TROUPE_FIELD_STRING};
    troupe_index_spec ix = {.name = "by_email", .fields = &f, .n_fields = 1};
    ck_assert_ok(create("users"));
    ck_assert_ok(create("users")); /* the same spec: idempotent */
    ck_assert_err(create_idx("users", &ix, 1), TROUPE_EEXIST);
    char **names;
    ck_assert_uint_eq(list(&names), 1);
    troupe_free(names);
}
END_TEST

START_TEST(test_catalog_drop_unknown_is_enotable)
{
    ck_assert_err(drop("nope"), TROUPE_ENOTABLE);
    ck_assert_ok(create("a"));
    ck_assert_ok(drop("a"));
    ck_assert_err(drop("a"), TROUPE_ENOTABLE);
}
END_TEST

START_TEST(test_catalog_bad_names_are_einval)
{
    char *big = malloc(TROUPE_TABLE_NAME_MAX + 2);
    memset(big, 'a', TROUPE_TABLE_NAME_MAX + 1);
    big[TROUPE_TABLE_NAME_MAX + 1] = '\0';
    ck_assert_err(create(big), TROUPE_EINVAL);
    big[TROUPE_TABLE_NAME_MAX] = '\0';
    ck_assert_ok(create(big)); /* exactly the maximum */
    free(big);
    ck_assert_err(create(""), TROUPE_EINVAL);
    ck_assert_err(create(NULL), TROUPE_EINVAL);
    ck_assert_err(create("\xC0\x80"), TROUPE_EINVAL);         /* overlong NUL */
    ck_assert_err(create("a\xFF"), TROUPE_EINVAL);            /* not UTF-8 */
    ck_assert_err(create("\xED\xA0\x80"), TROUPE_EINVAL);     /* surrogate */
    ck_assert_err(create("\xE2\x82"), TROUPE_EINVAL);         /* truncated */
    ck_assert_err(create("\xF4\x90\x80\x80"), TROUPE_EINVAL); /* > 10FFFF */
    ck_assert_ok(create("caf\xC3\xA9 \xF0\x9F\x98\x80"));
    char **names;
    ck_assert_uint_eq(list(&names), 2);
    troupe_free(names);
}
END_TEST

START_TEST(test_catalog_families_follow_the_table)
{
    troupe_cf *c = NULL;
    ck_assert_ok(create("a")); /* id 1 */
    ck_assert_ok(create("b")); /* id 2 */
    ck_assert_ok(troupe_db_cf(fx.db, "t.1", &c));
    ck_assert_ok(troupe_db_cf(fx.db, "m.1", &c));
    ck_assert_ok(troupe_db_cf(fx.db, "t.2", &c));
    ck_assert_ok(drop("a"));
    ck_assert_err(troupe_db_cf(fx.db, "t.1", &c), TROUPE_ENOENT);
    ck_assert_err(troupe_db_cf(fx.db, "m.1", &c), TROUPE_ENOENT);
    ck_assert_ok(create("a")); /* a new id: never reused */
    ck_assert_ok(troupe_db_cf(fx.db, "t.3", &c));
    ck_assert_err(troupe_db_cf(fx.db, "t.1", &c), TROUPE_ENOENT);
}
END_TEST

START_TEST(test_catalog_and_rows_survive_reopen_ids_not_reused)
{
    ck_assert_ok(create("a"));
    ck_assert_ok(create("b"));
    ck_assert_ok(ins("b", "k1", doc(1, "v", "one")));
    ck_assert_ok(drop("a"));
    close_all();
    open_all();
    char **names;
    ck_assert_uint_eq(list(&names), 1);
    ck_assert_str_eq(names[0], "b");
    troupe_free(names);
    ck_assert_ok(get("b", "k1"));
    ck_assert_str_eq(field(0, "v"), "one");
    ck_assert_ok(create("c"));
    troupe_cf *c = NULL;
    ck_assert_ok(troupe_db_cf(fx.db, "t.3", &c));
}
END_TEST

START_TEST(test_catalog_drop_then_recreate_starts_empty)
{
    ck_assert_ok(create("a"));
    ck_assert_ok(ins("a", "k", doc(1, "v", "x")));
    ck_assert_ok(drop("a"));
    ck_assert_ok(create("a"));
    ck_assert_err(get("a", "k"), TROUPE_ENOENT);
    ck_assert_ok(ins("a", "k", doc(1, "v", "y")));
}
END_TEST

/* ---- rows -------------------------------------------------------------- */

START_TEST(test_row_insert_get_round_trip_bytes_equal)
{
    ck_assert_ok(create("t"));
    const void *d = doc(2, "name", "ann", "city", "oslo");
    unsigned char copy[256];
    size_t n = doclen;
    memcpy(copy, d, n);
    ck_assert_ok(ins("t", "k1", d));
    ck_assert_ok(get("t", "k1"));
    ck_assert_uint_eq(fx.rows->n, 1);
    ck_assert(row_key_is(0, "k1"));
    ck_assert_uint_eq(fx.rows->rows[0].doc_len, n);
    ck_assert_int_eq(memcmp(fx.rows->rows[0].doc, copy, n), 0);
    ck_assert_int_eq(fx.rows->rows[0].expires_at_ms, 0);
    ck_assert_err(get("t", "absent"), TROUPE_ENOENT);
    ck_assert_ptr_null(fx.rows);
}
END_TEST

START_TEST(test_row_insert_existing_is_eexist_and_keeps_row)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "k", doc(1, "v", "first")));
    ck_assert_err(ins("t", "k", doc(1, "v", "second")), TROUPE_EEXIST);
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "first");
}
END_TEST

START_TEST(test_row_update_absent_is_enoent_present_replaces)
{
    ck_assert_ok(create("t"));
    ck_assert_err(upd("t", "k", doc(1, "v", "x")), TROUPE_ENOENT);
    ck_assert_err(get("t", "k"), TROUPE_ENOENT);
    ck_assert_uint_eq(family_count("m.1"), 0);
    ck_assert_ok(ins("t", "k", doc(1, "v", "a")));
    ck_assert_ok(upd("t", "k", doc(1, "v", "b")));
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "b");
}
END_TEST

START_TEST(test_row_upsert_creates_then_replaces)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ups("t", "k", doc(1, "v", "a")));
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "a");
    ck_assert_ok(ups("t", "k", doc(1, "v", "b")));
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "b");
}
END_TEST

START_TEST(test_row_delete_removes_row_and_manifest)
{
    ck_assert_ok(create("t"));
    ck_assert_err(del("t", "k"), TROUPE_ENOENT);
    ck_assert_ok(ins("t", "k", doc(1, "v", "a")));
    ck_assert_uint_eq(family_count("m.1"), 1);
    ck_assert_ok(del("t", "k"));
    ck_assert_err(get("t", "k"), TROUPE_ENOENT);
    ck_assert_uint_eq(family_count("t.1"), 0);
    ck_assert_uint_eq(family_count("m.1"), 0);
    ck_assert_ok(ins("t", "k", doc(1, "v", "again")));
}
END_TEST

START_TEST(test_row_document_not_a_map_is_eproto_nothing_written)
{
    ck_assert_ok(create("t"));
    unsigned char arr[] = {0x91, 0x01}; /* [1] */
    ck_assert_err(drive(troupe_table_insert(fx.tables, "t", "k", 1, arr,
                                            sizeof(arr), NULL, on_rows, NULL)),
                  TROUPE_EPROTO);
    unsigned char num[] = {0x05};
    ck_assert_err(drive(troupe_table_upsert(fx.tables, "t", "k", 1, num,
                                            sizeof(num), NULL, on_rows, NULL)),
                  TROUPE_EPROTO);
    unsigned char bad[] = {0x82, 0xa1}; /* truncated map */
    ck_assert_err(troupe_table_insert(fx.tables, "t", "k", 1, bad, sizeof(bad),
                                      NULL, on_rows, NULL),
                  TROUPE_EPROTO);
    ck_assert_uint_eq(family_count("t.1"), 0);
    ck_assert_uint_eq(family_count("m.1"), 0);
}
END_TEST

START_TEST(test_row_manifest_written_for_row_without_index)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "k", doc(1, "v", "a")));
    size_t n = 0;
    unsigned char *m = raw_get("m.1", "k", 1, &n);
    ck_assert_ptr_nonnull(m);
    unsigned char want_m[] = {0x92, 0x01, 0x90}; /* [1, []] */
    ck_assert_uint_eq(n, sizeof(want_m));
    ck_assert_int_eq(memcmp(m, want_m, n), 0);
    troupe_free(m);
    unsigned char *r = raw_get("t.1", "k", 1, &n);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r[0], 0x93); /* [1, 0, doc] */
    ck_assert_uint_eq(r[1], 0x01);
    ck_assert_uint_eq(r[2], 0x00);
    troupe_free(r);
}
END_TEST

START_TEST(test_row_get_many_in_order_asked_skipping_absent)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "a", doc(1, "v", "A")));
    ck_assert_ok(ins("t", "c", doc(1, "v", "C")));
    ck_assert_ok(ins_exp("t", "e", doc(1, "v", "E"), T0 + 10));
    const void *keys[] = {"c", "b", "a", "e", "c"};
    size_t lens[] = {1, 1, 1, 1, 1};
    atomic_store(&fx.now, T0 + 10);
    ck_assert_ok(drive(
        troupe_table_get_many(fx.tables, "t", keys, lens, 5, on_rows, NULL)));
    ck_assert_uint_eq(fx.rows->n, 3);
    ck_assert(row_key_is(0, "c"));
    ck_assert(row_key_is(1, "a"));
    ck_assert(row_key_is(2, "c"));
    ck_assert_str_eq(field(1, "v"), "A");
}
END_TEST

/* get_many of zero keys is an empty result (Tito's, pi_db's), from both
 * forms; keys may be NULL then; the table must exist. */
START_TEST(test_get_many_zero_keys_is_empty)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "a", doc(1, "v", "x")));
    const void *keys[] = {"a"};
    size_t lens[] = {1};
    ck_assert_ok(drive(
        troupe_table_get_many(fx.tables, "t", keys, lens, 0, on_rows, NULL)));
    ck_assert_ptr_nonnull(fx.rows);
    ck_assert_uint_eq(fx.rows->n, 0);
    ck_assert_ptr_null(fx.rows->cursor);
    ck_assert(!fx.rows->more);
    ck_assert_ok(drive(
        troupe_table_get_many(fx.tables, "t", NULL, NULL, 0, on_rows, NULL)));
    ck_assert_uint_eq(fx.rows->n, 0);
    troupe_rows *rows = NULL;
    ck_assert_ok(
        troupe_table_get_many_wait(fx.tables, "t", NULL, NULL, 0, &rows));
    ck_assert_ptr_nonnull(rows);
    ck_assert_uint_eq(rows->n, 0);
    troupe_rows_destroy(rows);
    ck_assert_err(
        troupe_table_get_many(fx.tables, "none", NULL, NULL, 0, on_rows, NULL),
        TROUPE_ENOTABLE);
    ck_assert_err(
        troupe_table_get_many_wait(fx.tables, "none", NULL, NULL, 0, &rows),
        TROUPE_ENOTABLE);
    ck_assert_ptr_null(rows);
}
END_TEST

static troupe_err
write_nots(int kind, const char *t, const char *k, const void *d)
{
    troupe_write_opts wo = {.no_timestamps = true};
    troupe_err (*fn)(troupe_tables *, const char *, const void *, size_t,
                     const void *, size_t, const troupe_write_opts *,
                     troupe_table_cb, void *) = kind == 0 ? troupe_table_insert
                                                : kind == 1
                                                    ? troupe_table_update
                                                    : troupe_table_upsert;
    return drive(fn(fx.tables, t, k, strlen(k), d, doclen, &wo, on_rows, NULL));
}

/* troupe_write_opts.no_timestamps turns stamping off for that write only:
 * created_at / updated_at are stored as the document has them, on insert,
 * update and upsert, and a stored created_at is not carried over either. */
START_TEST(test_row_no_timestamps_switch_per_write)
{
    ck_assert_ok(create("t"));
    atomic_store(&fx.now, T0 + 5);
    ck_assert_ok(write_nots(
        0, "t", "k", doc(3, "v", "a", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "k"));
    ck_assert_int_eq(ifield(0, "created_at"), 0);
    ck_assert_int_eq(ifield(0, "updated_at"), 0);
    atomic_store(&fx.now, T0 + 9); /* stamped again: created_at kept */
    ck_assert_ok(upd("t", "k",
                     doc(3, "v", "b", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "k"));
    ck_assert_int_eq(ifield(0, "created_at"), 0);
    ck_assert_int_eq(ifield(0, "updated_at"), T0 + 9);
    atomic_store(&fx.now, T0 + 11);
    ck_assert_ok(write_nots(
        1, "t", "k", doc(3, "v", "c", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "k"));
    ck_assert_int_eq(ifield(0, "created_at"), 0);
    ck_assert_int_eq(ifield(0, "updated_at"), 0);
    ck_assert_ok(write_nots(
        2, "t", "u", doc(3, "v", "d", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "u"));
    ck_assert_int_eq(ifield(0, "created_at"), 0);
    ck_assert_int_eq(ifield(0, "updated_at"), 0);
    ck_assert_ok(ups("t", "u",
                     doc(3, "v", "e", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "u"));
    ck_assert_int_eq(ifield(0, "created_at"), 0);
    ck_assert_int_eq(ifield(0, "updated_at"), T0 + 11);
}
END_TEST

START_TEST(test_row_timestamps_only_when_declared)
{
    ck_assert_ok(create("t"));
    const void *d = doc(1, "v", "plain");
    unsigned char copy[64];
    size_t n = doclen;
    memcpy(copy, d, n);
    ck_assert_ok(ins("t", "plain", d));
    ck_assert_ok(upd("t", "plain", doc(1, "v", "plain")));
    ck_assert_ok(get("t", "plain"));
    ck_assert_uint_eq(fx.rows->rows[0].doc_len, n); /* nothing added */
    ck_assert_int_eq(memcmp(fx.rows->rows[0].doc, copy, n), 0);

    atomic_store(&fx.now, T0 + 5);
    ck_assert_ok(ins("t", "ts",
                     doc(3, "v", "a", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "ts"));
    ck_assert_int_eq(ifield(0, "created_at"), T0 + 5);
    ck_assert_int_eq(ifield(0, "updated_at"), T0 + 5);
    atomic_store(&fx.now, T0 + 9);
    ck_assert_ok(upd("t", "ts",
                     doc(3, "v", "b", "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "ts"));
    ck_assert_int_eq(ifield(0, "created_at"), T0 + 5);
    ck_assert_int_eq(ifield(0, "updated_at"), T0 + 9);
    atomic_store(&fx.now, T0 + 11);
    ck_assert_ok(ups("t", "ts", doc(2, "v", "c", "updated_at", NULL)));
    ck_assert_ok(get("t", "ts"));
    ck_assert_int_eq(ifield(0, "created_at"), -1); /* not declared now */
    ck_assert_int_eq(ifield(0, "updated_at"), T0 + 11);

    /* created_at after a non-string value is still found and kept */
    atomic_store(&fx.now, T0 + 20);
    ck_assert_ok(ins(
        "t", "n", doc(3, "n", NULL, "created_at", NULL, "updated_at", NULL)));
    atomic_store(&fx.now, T0 + 30);
    ck_assert_ok(upd(
        "t", "n", doc(3, "n", NULL, "created_at", NULL, "updated_at", NULL)));
    ck_assert_ok(get("t", "n"));
    ck_assert_int_eq(ifield(0, "created_at"), T0 + 20);
    ck_assert_int_eq(ifield(0, "updated_at"), T0 + 30);
}
END_TEST

START_TEST(test_row_expired_is_invisible_and_insertable)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins_exp("t", "k", doc(1, "v", "old"), T0 + 100));
    ck_assert_ok(ins("t", "j", doc(1, "v", "keep")));
    ck_assert_ok(get("t", "k"));
    ck_assert_int_eq(fx.rows->rows[0].expires_at_ms, T0 + 100);
    atomic_store(&fx.now, T0 + 100);
    ck_assert_err(get("t", "k"), TROUPE_ENOENT);
    ck_assert_ok(scan("t", NULL, NULL, NULL, 0, 10, false));
    ck_assert_uint_eq(fx.rows->n, 1);
    ck_assert(row_key_is(0, "j"));
    ck_assert_err(upd("t", "k", doc(1, "v", "x")), TROUPE_ENOENT);
    ck_assert_err(del("t", "k"), TROUPE_ENOENT);
    ck_assert_ok(ins("t", "k", doc(1, "v", "new")));
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "new");
    ck_assert_int_eq(fx.rows->rows[0].expires_at_ms, 0);
}
END_TEST

static int nok, nexist;
static void
on_count(troupe_err err, troupe_rows *rows, void *arg)
{
    fx.calls++;
    nok += err == TROUPE_OK;
    nexist += err == TROUPE_EEXIST || err == TROUPE_ECONSTRAINT;
    troupe_rows_destroy(rows);
}

START_TEST(test_row_concurrent_inserts_same_key_exactly_one_ok)
{
    ck_assert_ok(create("t"));
    const void *d = doc(1, "v", "x");
    nok = nexist = 0;
    for (int i = 0; i < 32; i++)
        ck_assert_ok(troupe_table_insert(fx.tables, "t", "k", 1, d, doclen,
                                         NULL, on_count, NULL));
    want = fx.calls + 32;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    ck_assert_int_eq(nok, 1);
    ck_assert_int_eq(nexist, 31);
}
END_TEST

START_TEST(test_row_sync_flag_reaches_the_pipeline)
{
    ck_assert_ok(create("t"));
    troupe_commit_stats a, b;
    troupe_commit_get_stats(fx.commit, &a);
    troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
    const void *d = doc(1, "v", "x");
    ck_assert_ok(drive(troupe_table_insert(fx.tables, "t", "a", 1, d, doclen,
                                           &wo, on_rows, NULL)));
    troupe_commit_get_stats(fx.commit, &b);
    ck_assert_uint_eq(b.syncs, a.syncs);
    wo.sync = TROUPE_SYNC_ON;
    ck_assert_ok(drive(troupe_table_insert(fx.tables, "t", "b", 1, d, doclen,
                                           &wo, on_rows, NULL)));
    troupe_commit_get_stats(fx.commit, &b);
    ck_assert_uint_eq(b.syncs, a.syncs + 1);
}
END_TEST

static int n_ok, n_other, n_closed;
static void
on_any(troupe_err err, troupe_rows *rows, void *arg)
{
    fx.calls++;
    if (err == TROUPE_OK)
        n_ok++;
    else if (err == TROUPE_ECLOSED)
        n_closed++;
    else
        n_other++;
    troupe_rows_destroy(rows);
}

START_TEST(test_row_requests_in_flight_at_drop_answer_exactly_once)
{
    ck_assert_ok(create("t"));
    n_ok = n_other = n_closed = 0;
    int n = 0;
    for (int i = 0; i < 30; i++) {
        const void *d = doc(1, "v", "x");
        ck_assert_ok(troupe_table_upsert(fx.tables, "t", "k", 1, d, doclen,
                                         NULL, on_any, NULL));
        ck_assert_ok(troupe_table_get(fx.tables, "t", "k", 1, on_any, NULL));
        n += 2;
    }
    int before = fx.calls;
    ck_assert_ok(troupe_tables_drop(fx.tables, "t", on_ddl, NULL));
    want = before + n + 1;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    ck_assert_int_eq(n_ok + n_other + n_closed, n);
    ck_assert_ok(fx.err); /* the drop's (on_any leaves fx.err alone) */
    /* and nothing arrives twice */
    want = fx.calls + 1;
    ck_assert(!ts_run_until(&fx.loop, have, NULL, 200));
}
END_TEST

START_TEST(test_catalog_concurrent_drops_of_busy_tables_complete)
{
    const char *names[] = {"a", "b", "c", "d", "e", "f"};
    int nt = 6;
    for (int i = 0; i < nt; i++)
        ck_assert_ok(create(names[i]));
    n_ok = n_other = n_closed = 0;
    int n = 0;
    for (int i = 0; i < nt; i++)
        for (int k = 0; k < 20; k++) {
            char key[8];
            snprintf(key, sizeof(key), "k%d", k);
            const void *d = doc(1, "v", "x");
            ck_assert_ok(troupe_table_upsert(fx.tables, names[i], key,
                                             strlen(key), d, doclen, NULL,
                                             on_any, NULL));
            n++;
        }
    for (int i = 0; i < nt; i++)
        ck_assert_ok(troupe_tables_drop(fx.tables, names[i], on_ddl, NULL));
    want = fx.calls + n + nt;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 20000));
    ck_assert_int_eq(n_ok + n_other + n_closed, n);
    char **list_names;
    size_t cnt = 0;
    ck_assert_ok(troupe_tables_list(fx.tables, &list_names, &cnt));
    ck_assert_uint_eq(cnt, 0);
    troupe_free(list_names);
}
END_TEST

/* ---- integrity --------------------------------------------------------- */

START_TEST(test_integrity_row_without_manifest_is_ecorrupt)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "k", doc(1, "v", "a")));
    raw_del("m.1", "k");
    ck_assert_err(upd("t", "k", doc(1, "v", "b")), TROUPE_ECORRUPT);
    ck_assert_err(ups("t", "k", doc(1, "v", "b")), TROUPE_ECORRUPT);
    ck_assert_err(del("t", "k"), TROUPE_ECORRUPT);
    ck_assert_err(ins("t", "k", doc(1, "v", "b")), TROUPE_ECORRUPT);
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "a"); /* nothing written */
    ck_assert_uint_eq(family_count("m.1"), 0);
}
END_TEST

START_TEST(test_integrity_orphaned_manifest_is_ecorrupt)
{
    ck_assert_ok(create("t"));
    unsigned char m[] = {0x92, 0x01, 0x90};
    raw_put("m.1", "k", m, sizeof(m));
    ck_assert_err(ins("t", "k", doc(1, "v", "a")), TROUPE_ECORRUPT);
    ck_assert_err(ups("t", "k", doc(1, "v", "a")), TROUPE_ECORRUPT);
    ck_assert_uint_eq(family_count("t.1"), 0);
}
END_TEST

START_TEST(test_integrity_malformed_and_cross_record_manifest_ecorrupt)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "k", doc(1, "v", "a")));
    unsigned char junk[] = {0x92, 0x02, 0x90}; /* version 2 */
    raw_put("m.1", "k", junk, sizeof(junk));
    ck_assert_err(upd("t", "k", doc(1, "v", "b")), TROUPE_ECORRUPT);
    unsigned char trunc[] = {0x92, 0x01};
    raw_put("m.1", "k", trunc, sizeof(trunc));
    ck_assert_err(del("t", "k"), TROUPE_ECORRUPT);
    /* [1, [[7, ("x", bytes "other")]]]: names another row's key */
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "x", 1);
    troupe_key_put_bytes(&w, "other", 5);
    const uint8_t *ik;
    size_t iklen;
    ck_assert_ok(troupe_key_writer_finish(&w, &ik, &iklen));
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 7);
    troupe_pack_bin(&p, ik, iklen);
    size_t mlen;
    const void *md = troupe_pack_data(&p, &mlen);
    raw_put("m.1", "k", md, mlen);
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
    ck_assert_err(upd("t", "k", doc(1, "v", "b")), TROUPE_ECORRUPT);
    ck_assert_err(del("t", "k"), TROUPE_ECORRUPT);
    ck_assert_ok(get("t", "k"));
    ck_assert_str_eq(field(0, "v"), "a");
}
END_TEST

START_TEST(test_integrity_malformed_envelope_is_ecorrupt_not_absent)
{
    ck_assert_ok(create("t"));
    ck_assert_ok(ins("t", "k", doc(1, "v", "a")));
    unsigned char bad[] = {0x93, 0x01, 0x00, 0x05}; /* doc is not a map */
    raw_put("t.1", "k", bad, sizeof(bad));
    ck_assert_err(get("t", "k"), TROUPE_ECORRUPT);
    const void *keys[] = {"k"};
    size_t lens[] = {1};
    ck_assert_err(drive(troupe_table_get_many(fx.tables, "t", keys, lens, 1,
                                              on_rows, NULL)),
                  TROUPE_ECORRUPT);
    ck_assert_err(upd("t", "k", doc(1, "v", "b")), TROUPE_ECORRUPT);
    /* every form, the common one (version 1, expires 0) and the general
     * one, checks the whole row: a truncated doc, trailing bytes, a bad
     * version, a negative expiry */
    static const unsigned char bads[][8] = {
        {0x93, 0x01, 0x00, 0x81, 0xa1, 'v'},        /* map misses its value */
        {0x93, 0x01, 0x00, 0x80, 0x00},             /* a byte after the doc */
        {0x93, 0x02, 0x00, 0x80},                   /* version 2 */
        {0x93, 0x01, 0xcd, 0x01, 0x00, 0x81, 0xa1}, /* truncated, uint16 */
        {0x93, 0x01, 0xff, 0x80},                   /* expires -1 */
    };
    static const size_t blen[] = {6, 5, 4, 7, 4};
    for (size_t i = 0; i < sizeof(blen) / sizeof(blen[0]); i++) {
        raw_put("t.1", "k", bads[i], blen[i]);
        ck_assert_err(get("t", "k"), TROUPE_ECORRUPT);
        ck_assert_err(scan("t", NULL, NULL, NULL, 0, 5, false),
                      TROUPE_ECORRUPT);
    }
    /* a document deeper than any write accepts (the envelope whole over
     * the reader's depth) is refused in both forms alike */
    for (int general = 0; general < 2; general++) {
        unsigned char deep[64];
        size_t n = 0;
        deep[n++] = 0x93;
        deep[n++] = 0x01;
        if (general) {
            deep[n++] = 0xcd; /* expires as uint16 */
            deep[n++] = 0x7f;
            deep[n++] = 0xff;
        } else {
            deep[n++] = 0x00;
        }
        deep[n++] = 0x81;
        deep[n++] = 0xa1;
        deep[n++] = 'v';
        for (unsigned i = 1; i < TROUPE_WIRE_DEPTH_MAX; i++)
            deep[n++] = 0x91;
        deep[n++] = 0x07;
        raw_put("t.1", "k", deep, n);
        ck_assert_err(get("t", "k"), TROUPE_ECORRUPT);
        /* one level less reads in both forms */
        memmove(deep + n - 2, deep + n - 1, 1);
        raw_put("t.1", "k", deep, n - 1);
        atomic_store(&fx.now, 1);
        ck_assert_ok(get("t", "k"));
    }
    /* the general form still reads: expires as uint16 (far future) */
    static const unsigned char good[] = {0x93, 0x01, 0xcd, 0x7f, 0xff,
                                         0x81, 0xa1, 'v',  0xa1, 'z'};
    raw_put("t.1", "k", good, sizeof(good));
    atomic_store(&fx.now, 1);
    ck_assert_ok(get("t", "k"));
    ck_assert_int_eq(fx.rows->rows[0].expires_at_ms, 0x7fff);
    ck_assert_str_eq(field(0, "v"), "z");
}
END_TEST

/* ---- scans ------------------------------------------------------------- */

static void
fill(int n)
{
    ck_assert_ok(create("s"));
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%02d", i);
        ck_assert_ok(ins("s", k, doc(1, "v", k)));
    }
}

START_TEST(test_scan_forward_pages_cover_every_row_once)
{
    fill(25);
    unsigned char cur[32];
    size_t clen = 0;
    int seen = 0;
    for (int page = 0;; page++) {
        ck_assert_ok(scan("s", NULL, NULL, clen ? cur : NULL, clen, 7, false));
        for (size_t i = 0; i < fx.rows->n; i++) {
            char k[16];
            snprintf(k, sizeof(k), "k%02d", seen++);
            ck_assert(row_key_is(i, k));
        }
        if (!fx.rows->more)
            break;
        ck_assert_uint_eq(fx.rows->n, 7);
        memcpy(cur, fx.rows->cursor, fx.rows->cursor_len);
        clen = fx.rows->cursor_len;
        ck_assert_int_lt(page, 10);
    }
    ck_assert_int_eq(seen, 25);
}
END_TEST

START_TEST(test_scan_reverse_pages_in_descending_order)
{
    fill(10);
    ck_assert_ok(scan("s", NULL, NULL, NULL, 0, 4, true));
    ck_assert_uint_eq(fx.rows->n, 4);
    ck_assert(row_key_is(0, "k09"));
    ck_assert(row_key_is(3, "k06"));
    ck_assert(fx.rows->more);
    ck_assert_ok(scan("s", NULL, NULL, KC("k06"), 4, true));
    ck_assert(row_key_is(0, "k05"));
    ck_assert_ok(scan("s", NULL, NULL, KC("k02"), 4, true));
    ck_assert_uint_eq(fx.rows->n, 2);
    ck_assert(row_key_is(1, "k00"));
    ck_assert(!fx.rows->more);
}
END_TEST

START_TEST(test_scan_bounds_are_half_open)
{
    fill(10);
    ck_assert_ok(scan("s", "k03", "k06", NULL, 0, 100, false));
    ck_assert_uint_eq(fx.rows->n, 3);
    ck_assert(row_key_is(0, "k03"));
    ck_assert(row_key_is(2, "k05"));
    ck_assert(!fx.rows->more);
    ck_assert_ok(scan("s", "k03", "k06", NULL, 0, 100, true));
    ck_assert(row_key_is(0, "k05"));
    /* a cursor key that no longer exists still continues exactly */
    ck_assert_ok(scan("s", "k03", "k06", KC("k035"), 100, false));
    ck_assert_uint_eq(fx.rows->n, 2);
    ck_assert(row_key_is(0, "k04"));
}
END_TEST

START_TEST(test_scan_limit_zero_einval_cursor_outside_erange)
{
    fill(3);
    ck_assert_err(scan("s", NULL, NULL, NULL, 0, 0, false), TROUPE_EINVAL);
    ck_assert_err(
        scan("s", NULL, NULL, NULL, 0, TROUPE_TABLE_PAGE_MAX + 1, false),
        TROUPE_EINVAL);
    ck_assert_err(scan("s", "k01", "k02", KC("k05"), 5, false), TROUPE_ERANGE);
    ck_assert_err(scan("s", "k01", "k02", KC("a"), 5, true), TROUPE_ERANGE);
    ck_assert_err(scan("s", "k05", "k01", NULL, 0, 5, false), TROUPE_EINVAL);
    /* an empty range [k, k) is refused like an inverted one, both ways */
    ck_assert_err(scan("s", "k01", "k01", NULL, 0, 5, false), TROUPE_EINVAL);
    ck_assert_err(scan("s", "k01", "k01", NULL, 0, 5, true), TROUPE_EINVAL);
    /* a start that is a prefix of end is a range */
    ck_assert_ok(scan("s", "k0", "k01", NULL, 0, 5, false));
    ck_assert_uint_eq(fx.rows->n, 1);
}
END_TEST

START_TEST(test_scan_corrupt_row_fails_page_never_shortens)
{
    fill(5);
    unsigned char bad[] = {0xc1};
    raw_put("t.1", "k02", bad, sizeof(bad));
    ck_assert_err(scan("s", NULL, NULL, NULL, 0, 10, false), TROUPE_ECORRUPT);
    ck_assert_ptr_null(fx.rows);
    ck_assert_err(scan("s", NULL, NULL, NULL, 0, 10, true), TROUPE_ECORRUPT);
    /* a page that ends before it is fine, and says there is more */
    ck_assert_ok(scan("s", NULL, NULL, NULL, 0, 2, false));
    ck_assert_uint_eq(fx.rows->n, 2);
    ck_assert(fx.rows->more);
}
END_TEST

START_TEST(test_scan_skips_expired_rows_and_fills_the_page)
{
    ck_assert_ok(create("s"));
    ck_assert_ok(ins("s", "a", doc(1, "v", "a")));
    ck_assert_ok(ins_exp("s", "b", doc(1, "v", "b"), T0 + 1));
    ck_assert_ok(ins_exp("s", "c", doc(1, "v", "c"), T0 + 1));
    ck_assert_ok(ins("s", "d", doc(1, "v", "d")));
    ck_assert_ok(ins_exp("s", "e", doc(1, "v", "e"), T0 + 1));
    atomic_store(&fx.now, T0 + 1);
    ck_assert_ok(scan("s", NULL, NULL, NULL, 0, 2, false));
    ck_assert_uint_eq(fx.rows->n, 2);
    ck_assert(row_key_is(0, "a"));
    ck_assert(row_key_is(1, "d"));
    ck_assert(!fx.rows->more); /* only expired rows follow */
}
END_TEST

/* ---- unique and declared indexes ---------------------------------------- */

static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};
static const troupe_index_field city_f = {"city", TROUPE_FIELD_STRING};

static void
create_indexed(void)
{
    troupe_index_spec specs[2] = {
        {.name = "by_city", .fields = &city_f, .n_fields = 1},
        {.name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1},
    };
    /* table id 1, by_city x.2, by_email x.3 */
    ck_assert_ok(create_idx("u", specs, 2));
}

/* AND of two indexes through the catalog, on the caller's thread. */
START_TEST(test_query_and_of_two_indexes_by_name)
{
    static const troupe_index_field kind_f = {"kind", TROUPE_FIELD_STRING};
    troupe_index_spec specs[2] = {
        {.name = "by_city", .fields = &city_f, .n_fields = 1},
        {.name = "by_kind", .fields = &kind_f, .n_fields = 1},
    };
    ck_assert_ok(create_idx("s", specs, 2));
    ck_assert_ok(ins("s", "p1", doc(2, "city", "oslo", "kind", "cafe")));
    ck_assert_ok(ins("s", "p2", doc(2, "city", "oslo", "kind", "shop")));
    ck_assert_ok(ins("s", "p3", doc(2, "city", "rome", "kind", "cafe")));
    ck_assert_ok(ins("s", "p4", doc(2, "city", "oslo", "kind", "cafe")));
    troupe_packer pa, pb;
    troupe_pack_init(&pa);
    troupe_pack_array(&pa, 1);
    troupe_pack_cstr(&pa, "oslo");
    troupe_pack_init(&pb);
    troupe_pack_array(&pb, 1);
    troupe_pack_cstr(&pb, "cafe");
    troupe_index_query qa = {.values = pa.data, .values_len = pa.len};
    troupe_index_query qb = {.values = pb.data, .values_len = pb.len};
    troupe_index_result *r = NULL;
    ck_assert_ok(troupe_tables_query_and_wait(fx.tables, "s", "by_city", &qa,
                                              "by_kind", &qb, NULL, 0, 1, &r));
    ck_assert_uint_eq(r->n, 1);
    ck_assert_mem_eq(r->hits[0].pk, "p1", 2);
    ck_assert(r->more);
    troupe_index_result *r2 = NULL;
    ck_assert_ok(troupe_tables_query_and_wait(fx.tables, "s", "by_city", &qa,
                                              "by_kind", &qb, r->cursor,
                                              r->cursor_len, 10, &r2));
    troupe_index_result_destroy(r);
    r = r2;
    ck_assert_uint_eq(r->n, 1);
    ck_assert_mem_eq(r->hits[0].pk, "p4", 2);
    ck_assert(!r->more);
    troupe_index_result_destroy(r);
    r = NULL;
    ck_assert_err(troupe_tables_query_and_wait(fx.tables, "s", "by_city", &qa,
                                               "nope", &qb, NULL, 0, 10, &r),
                  TROUPE_ENOINDEX);
    ck_assert_err(troupe_tables_query_and_wait(fx.tables, "nope", "by_city",
                                               &qa, "by_kind", &qb, NULL, 0, 10,
                                               &r),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_tables_query_and_wait(fx.tables, "s", "by_city", &qa,
                                               "by_kind", &qb, NULL, 0, 0, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_query_and_wait(fx.tables, "s", "by_city", NULL,
                                               "by_kind", &qb, NULL, 0, 10, &r),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(r);
    troupe_pack_fini(&pa);
    troupe_pack_fini(&pb);
}
END_TEST

START_TEST(test_index_entries_and_manifest_follow_writes)
{
    create_indexed();
    ck_assert_ok(ins("u", "p1", doc(2, "email", "a@x", "city", "oslo")));
    ck_assert_uint_eq(family_count("x.2"), 1);
    ck_assert_uint_eq(family_count("x.3"), 1);
    size_t n;
    unsigned char *m = raw_get("m.1", "p1", 2, &n);
    troupe_reader r;
    uint32_t cnt = 0;
    troupe_reader_init(&r, m, n);
    troupe_read_array_n(&r, 2);
    troupe_read_skip(&r);
    troupe_read_array(&r, &cnt);
    ck_assert_ok(r.err);
    ck_assert_uint_eq(cnt, 2);
    troupe_free(m);
    ck_assert_ok(upd("u", "p1", doc(2, "email", "b@x", "city", "")));
    ck_assert_uint_eq(family_count("x.2"), 0); /* sparse: empty string */
    ck_assert_uint_eq(family_count("x.3"), 1);
    ck_assert_ok(ins("u", "p2", doc(1, "email", "a@x"))); /* old value free */
    ck_assert_uint_eq(family_count("x.3"), 2);
    ck_assert_ok(del("u", "p1"));
    ck_assert_ok(del("u", "p2"));
    ck_assert_uint_eq(family_count("x.2"), 0);
    ck_assert_uint_eq(family_count("x.3"), 0);
    ck_assert_uint_eq(family_count("m.1"), 0);
}
END_TEST

START_TEST(test_index_unique_second_row_econstraint_nothing_written)
{
    create_indexed();
    ck_assert_ok(ins("u", "p1", doc(2, "email", "a@x", "city", "oslo")));
    ck_assert_err(ins("u", "p2", doc(2, "email", "a@x", "city", "rome")),
                  TROUPE_ECONSTRAINT);
    ck_assert_err(get("u", "p2"), TROUPE_ENOENT);
    ck_assert_uint_eq(family_count("x.2"), 1);
    ck_assert_uint_eq(family_count("m.1"), 1);
    ck_assert_ok(ins("u", "p2", doc(1, "email", "b@x")));
    ck_assert_err(upd("u", "p2", doc(1, "email", "a@x")), TROUPE_ECONSTRAINT);
    ck_assert_ok(upd("u", "p1", doc(2, "email", "a@x", "city", "bergen")));
    ck_assert_ok(del("u", "p1"));
    ck_assert_ok(upd("u", "p2", doc(1, "email", "a@x")));
}
END_TEST

START_TEST(test_index_concurrent_unique_inserts_exactly_one_ok)
{
    create_indexed();
    nok = nexist = 0;
    for (int i = 0; i < 16; i++) {
        char k[8];
        snprintf(k, sizeof(k), "p%d", i);
        const void *d = doc(1, "email", "same@x");
        ck_assert_ok(troupe_table_insert(fx.tables, "u", k, strlen(k), d,
                                         doclen, NULL, on_count, NULL));
    }
    want = fx.calls + 16;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    ck_assert_int_eq(nok, 1);
    ck_assert_int_eq(nexist, 15);
    ck_assert_uint_eq(family_count("x.3"), 1);
    ck_assert_uint_eq(family_count("t.1"), 1);
}
END_TEST

START_TEST(test_index_bad_spec_and_duplicate_index_name_einval)
{
    troupe_index_spec bad = {.name = "", .fields = &city_f, .n_fields = 1};
    ck_assert_err(create_idx("u", &bad, 1), TROUPE_EINVAL);
    troupe_index_spec two[2] = {
        {.name = "i", .fields = &city_f, .n_fields = 1},
        {.name = "i", .fields = &email_f, .n_fields = 1},
    };
    ck_assert_err(create_idx("u", two, 2), TROUPE_EINVAL);
    ck_assert_err(create_idx("u", NULL, 1), TROUPE_EINVAL);
    char **names;
    ck_assert_uint_eq(list(&names), 0);
    troupe_free(names);
}
END_TEST

START_TEST(test_index_defs_survive_reopen)
{
    create_indexed();
    ck_assert_ok(ins("u", "p1", doc(1, "email", "a@x")));
    close_all();
    open_all();
    ck_assert_err(ins("u", "p2", doc(1, "email", "a@x")), TROUPE_ECONSTRAINT);
    ck_assert_ok(del("u", "p1"));
    ck_assert_uint_eq(family_count("x.3"), 0);
}
END_TEST

/* ---- online index builds ------------------------------------------------ */

static void
no_ddl2(troupe_tables *t, troupe_err err, void *arg)
{
    ck_abort_msg("callback fired after an error return");
}

static int built;
static troupe_err built_err;
static void
on_built(troupe_tables *t, troupe_err err, void *arg)
{
    built++;
    built_err = err;
}

static bool
is_built(void *arg)
{
    return built > 0;
}

/* Every row's manifest lists exactly the x.<id> entries that name it. */
static size_t
manifest_entries(void)
{
    troupe_page *pg = NULL;
    ck_assert_ok(troupe_db_scan(fx.db, cf("m.1"), NULL, NULL, NULL, 0, 10000,
                                false, &pg));
    size_t total = 0;
    for (size_t i = 0; i < pg->n; i++) {
        troupe_reader r;
        uint32_t cnt = 0;
        troupe_reader_init(&r, pg->items[i].val, pg->items[i].val_len);
        troupe_read_array_n(&r, 2);
        troupe_read_skip(&r);
        troupe_read_array(&r, &cnt);
        ck_assert_ok(r.err);
        total += cnt;
    }
    troupe_page_destroy(pg);
    return total;
}

START_TEST(test_build_index_online_while_writes_go_on)
{
    ck_assert_ok(create("u")); /* id 1 */
    int n = 300;
    for (int i = 0; i < n; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "p%03d", i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        const void *d =
            i % 10 == 0 ? doc(1, "name", "none") : doc(1, "email", e);
        ck_assert_ok(troupe_table_insert(fx.tables, "u", k, strlen(k), d,
                                         doclen, NULL, on_count, NULL));
    }
    want = fx.calls + n;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    troupe_index_spec spec = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    built = 0;
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "u", &spec, on_built, NULL));
    /* writes during the build: new rows, changed and removed emails */
    nok = 0;
    int sent = 0;
    for (int i = 0; i < 40; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "p%03d", i * 7);
        snprintf(e, sizeof(e), "new%03d@x", i);
        const void *d = doc(1, "email", e);
        ck_assert_ok(troupe_table_upsert(fx.tables, "u", k, strlen(k), d,
                                         doclen, NULL, on_count, NULL));
        snprintf(k, sizeof(k), "q%03d", i);
        snprintf(e, sizeof(e), "q%03d@x", i);
        d = doc(1, "email", e);
        ck_assert_ok(troupe_table_insert(fx.tables, "u", k, strlen(k), d,
                                         doclen, NULL, on_count, NULL));
        sent += 2;
    }
    for (int i = 1; i < 20; i += 2) {
        char k[16];
        snprintf(k, sizeof(k), "p%03d", 100 + i);
        ck_assert_ok(troupe_table_delete(fx.tables, "u", k, strlen(k), NULL,
                                         on_count, NULL));
        sent++;
    }
    want = fx.calls + sent;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    ck_assert(ts_run_until(&fx.loop, is_built, NULL, 20000));
    ck_assert_ok(built_err);
    bool ready = false;
    ck_assert_ok(troupe_tables_index_state(fx.tables, "u", "by_email", &ready));
    ck_assert(ready);
    /* 40 new q rows, 10 deleted p rows */
    ck_assert_uint_eq(family_count("t.1"), (size_t)n + 40 - 10);
    size_t want_entries = 0;
    ck_assert_ok(scan("u", NULL, NULL, NULL, 0, 10000, false));
    for (size_t i = 0; i < fx.rows->n; i++)
        want_entries += field(i, "email")[0] != '\0';
    ck_assert_uint_eq(family_count("x.2"), want_entries);
    ck_assert_uint_eq(manifest_entries(), want_entries);
    /* and the unique index is live */
    ck_assert_err(ins("u", "z", doc(1, "email", "e001@x")), TROUPE_ECONSTRAINT);
}
END_TEST

START_TEST(test_build_unique_duplicate_fails_and_removes_index)
{
    ck_assert_ok(create("u"));
    ck_assert_ok(ins("u", "a", doc(1, "email", "same@x")));
    ck_assert_ok(ins("u", "b", doc(1, "email", "same@x")));
    troupe_index_spec spec = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    built = 0;
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "u", &spec, on_built, NULL));
    ck_assert(ts_run_until(&fx.loop, is_built, NULL, 10000));
    ck_assert_err(built_err, TROUPE_ECONSTRAINT);
    bool ready;
    ck_assert_err(troupe_tables_index_state(fx.tables, "u", "by_email", &ready),
                  TROUPE_ENOINDEX);
    troupe_cf *c;
    ck_assert_err(troupe_db_cf(fx.db, "x.2", &c), TROUPE_ENOENT);
    /* The row reindexed before the failure keeps a manifest entry naming
     * the removed index (ids are never reused, so it can name nothing
     * else); writes skip it and drop it. */
    ck_assert_uint_eq(manifest_entries(), 1);
    ck_assert_ok(upd("u", "a", doc(1, "email", "other@x")));
    ck_assert_ok(upd("u", "b", doc(1, "email", "same@x")));
    ck_assert_uint_eq(manifest_entries(), 0);
    /* a non-unique one builds fine, also after a reopen */
    spec.unique = false;
    spec.name = "by_email2";
    built = 0;
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "u", &spec, on_built, NULL));
    ck_assert(ts_run_until(&fx.loop, is_built, NULL, 10000));
    ck_assert_ok(built_err);
    ck_assert_uint_eq(family_count("x.3"), 2);
    close_all();
    open_all();
    ck_assert_ok(
        troupe_tables_index_state(fx.tables, "u", "by_email2", &ready));
    ck_assert(ready);
    ck_assert_ok(del("u", "a"));
    ck_assert_uint_eq(family_count("x.3"), 1);
}
END_TEST

static bool
index_ready(void *arg)
{
    bool ready = false;
    return troupe_tables_index_state(fx.tables, "r", "by_email", &ready) ==
               TROUPE_OK &&
           ready;
}

/* Writes, in the on-disk format of docs/data-model.md, a catalog where
 * table "r" (id 1) has index "by_email" (id 2) still building. */
static void
write_building_catalog(void)
{
    troupe_db *db = NULL;
    troupe_cf *meta = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf(db, "meta", &meta));
    ck_assert_ok(troupe_db_cf_create(db, "x.2", NULL));
    troupe_index_spec spec = {
        .name = "by_email", .fields = &email_f, .n_fields = 1};
    troupe_index_def *d = NULL;
    ck_assert_ok(troupe_index_def_create(&spec, 2, &d));
    troupe_index_def_set_ready(d, false);
    void *dp = NULL;
    size_t dl = 0;
    ck_assert_ok(troupe_index_def_pack(d, &dp, &dl));
    troupe_index_def_destroy(d);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 4);
    troupe_pack_cstr(&p, "id");
    troupe_pack_uint(&p, 1);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "r");
    troupe_pack_cstr(&p, "version");
    troupe_pack_uint(&p, 1);
    troupe_pack_cstr(&p, "indexes");
    troupe_pack_array(&p, 1);
    troupe_pack_raw(&p, dp, dl);
    troupe_free(dp);
    size_t vlen;
    const void *v = troupe_pack_data(&p, &vlen);
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "table", 5);
    troupe_key_put_string(&w, "r", 1);
    const uint8_t *k;
    size_t klen;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &klen));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, meta, k, klen, v, vlen));
    troupe_key_writer_reset(&w);
    troupe_key_put_string(&w, "seq", 3);
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &klen));
    unsigned char seq[] = {0x02};
    ck_assert_ok(troupe_batch_put(b, meta, k, klen, seq, 1));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    troupe_pack_fini(&p);
    ck_assert_ok(troupe_db_close(db));
}

START_TEST(test_build_left_building_resumes_at_open)
{
    ck_assert_ok(create("r")); /* id 1 */
    for (int i = 0; i < 150; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "r%03d", i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        ck_assert_ok(ins("r", k, doc(1, "email", e)));
    }
    close_all();
    write_building_catalog();
    open_all();
    bool ready = true;
    troupe_err e =
        troupe_tables_index_state(fx.tables, "r", "by_email", &ready);
    ck_assert_ok(e);
    ck_assert(ts_run_until(&fx.loop, index_ready, NULL, 10000));
    ck_assert_uint_eq(family_count("x.2"), 150);
    ck_assert_uint_eq(manifest_entries(), 150);
    close_all(); /* the catalog says ready now: no second build */
    open_all();
    ck_assert_ok(troupe_tables_index_state(fx.tables, "r", "by_email", &ready));
    ck_assert(ready);
}
END_TEST

static int order_seen;
static void
on_built_order(troupe_tables *t, troupe_err err, void *arg)
{
    built++;
    built_err = err;
    order_seen = fx.done; /* 0: before the stop's callback */
}

START_TEST(test_build_stop_waits_for_running_build)
{
    ck_assert_ok(create("r"));
    for (int i = 0; i < 100; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "r%03d", i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        ck_assert_ok(ins("r", k, doc(1, "email", e)));
    }
    troupe_index_spec spec = {
        .name = "by_email", .fields = &email_f, .n_fields = 1};
    built = 0;
    fx.done = 0;
    order_seen = -1;
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "r", &spec, on_built_order, NULL));
    ck_assert_ok(troupe_tables_stop(fx.tables, on_tables_stopped, NULL));
    ck_assert_err(troupe_tables_create(fx.tables, "x", NULL, 0, no_ddl2, NULL),
                  TROUPE_ESTATE);
    ck_assert(ts_run_until(&fx.loop, is_done, NULL, 10000));
    ck_assert_int_eq(built, 1);
    ck_assert_ok(built_err);
    ck_assert_int_eq(order_seen, 0);
    ck_assert_uint_eq(family_count("x.2"), 100);
    troupe_tables_destroy(fx.tables);
    troupe_tables_opts to = {
        .catalog = fx.cat, .commit = fx.commit, .clock = fake_clock};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
    bool ready = false;
    ck_assert_ok(troupe_tables_index_state(fx.tables, "r", "by_email", &ready));
    ck_assert(ready);
}
END_TEST

START_TEST(test_build_bad_arguments_and_name_clash)
{
    troupe_index_spec spec = {
        .name = "by_city", .fields = &city_f, .n_fields = 1};
    ck_assert_err(troupe_tables_add_index(NULL, "u", &spec, on_built, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_add_index(fx.tables, "u", NULL, on_built, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_add_index(fx.tables, "u", &spec, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_add_index(fx.tables, "", &spec, on_built, NULL),
                  TROUPE_EINVAL);
    troupe_index_spec bad = {.name = "x"};
    ck_assert_err(troupe_tables_add_index(fx.tables, "u", &bad, on_built, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_add_index_wait(NULL, "u", &spec),
                  TROUPE_EINVAL);
    bool ready;
    ck_assert_err(troupe_tables_index_state(NULL, "u", "i", &ready),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_index_state(fx.tables, "u", NULL, &ready),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_index_state(fx.tables, "u", "i", NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_index_state(fx.tables, "u", "i", &ready),
                  TROUPE_ENOTABLE);
    built = 0;
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "u", &spec, on_built, NULL));
    ck_assert(ts_run_until(&fx.loop, is_built, NULL, 10000));
    ck_assert_err(built_err, TROUPE_ENOTABLE); /* no table u */
    create_indexed();
    built = 0;
    spec.unique = true; /* by_city exists, not unique: a name clash */
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "u", &spec, on_built, NULL));
    ck_assert(ts_run_until(&fx.loop, is_built, NULL, 10000));
    ck_assert_err(built_err, TROUPE_EEXIST);
}
END_TEST

/* ---- index queries through the catalog ---------------------------------- */

static troupe_index_result *qres;
static uint64_t qcount;
static void
on_query(troupe_err err, troupe_index_result *res, void *arg)
{
    fx.calls++;
    fx.err = err;
    troupe_index_result_destroy(qres);
    qres = res;
}

static void
on_qcount(troupe_err err, uint64_t n, void *arg)
{
    fx.calls++;
    fx.err = err;
    qcount = n;
}

/* values: a msgpack array of one string */
static troupe_index_query
str_query(const char *v, unsigned char *buf)
{
    size_t n = strlen(v);
    buf[0] = 0x91;
    buf[1] = (unsigned char)(0xa0 | n);
    memcpy(buf + 2, v, n);
    troupe_index_query q = {
        .values = buf, .values_len = n + 2, .limit = 10, .rows = true};
    return q;
}

START_TEST(test_query_by_index_returns_rows_and_counts)
{
    create_indexed();
    ck_assert_ok(ins("u", "p1", doc(2, "email", "a@x", "city", "oslo")));
    ck_assert_ok(ins("u", "p2", doc(2, "email", "b@x", "city", "oslo")));
    ck_assert_ok(ins("u", "p3", doc(2, "email", "c@x", "city", "rome")));
    unsigned char buf[32];
    troupe_index_query q = str_query("oslo", buf);
    ck_assert_ok(drive(
        troupe_tables_query(fx.tables, "u", "by_city", &q, on_query, NULL)));
    ck_assert_uint_eq(qres->n, 2);
    ck_assert_uint_eq(qres->hits[0].pk_len, 2);
    ck_assert_int_eq(memcmp(qres->hits[0].pk, "p1", 2), 0);
    ck_assert_int_eq(memcmp(qres->hits[1].pk, "p2", 2), 0);
    ck_assert_ok(drive(
        troupe_tables_count(fx.tables, "u", "by_city", &q, on_qcount, NULL)));
    ck_assert_uint_eq(qcount, 2);
    q = str_query("b@x", buf);
    ck_assert_ok(drive(
        troupe_tables_query(fx.tables, "u", "by_email", &q, on_query, NULL)));
    ck_assert_uint_eq(qres->n, 1);
    ck_assert_int_eq(memcmp(qres->hits[0].pk, "p2", 2), 0);
    /* the entry moves with an update */
    ck_assert_ok(upd("u", "p2", doc(2, "email", "b@x", "city", "rome")));
    q = str_query("oslo", buf);
    ck_assert_ok(drive(
        troupe_tables_count(fx.tables, "u", "by_city", &q, on_qcount, NULL)));
    ck_assert_uint_eq(qcount, 1);
    ck_assert_err(
        drive(troupe_tables_query(fx.tables, "u", "nope", &q, on_query, NULL)),
        TROUPE_ENOINDEX);
    ck_assert_err(
        troupe_tables_query(fx.tables, "zz", "by_city", &q, on_query, NULL),
        TROUPE_ENOTABLE);
    ck_assert_err(
        troupe_tables_query(fx.tables, "u", "by_city", NULL, on_query, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_tables_query(fx.tables, "u", "by_city", &q, NULL, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_tables_count(NULL, "u", "by_city", &q, on_qcount, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_tables_count(fx.tables, "u", "by_city", &q, NULL, NULL),
        TROUPE_EINVAL);
    troupe_index_result *r = (troupe_index_result *)1;
    ck_assert_err(troupe_tables_query_wait(fx.tables, "u", "by_city", NULL, &r),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(r);
    ck_assert_err(troupe_tables_query_wait(fx.tables, "u", "by_city", &q, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_count_wait(fx.tables, "u", "by_city", &q, NULL),
                  TROUPE_EINVAL);
    troupe_index_result_destroy(qres);
    qres = NULL;
}
END_TEST

static bool
registered(void *arg)
{
    bool ready;
    return troupe_tables_index_state(fx.tables, "u", "by_email", &ready) ==
           TROUPE_OK;
}

START_TEST(test_query_on_building_index_is_estate_until_ready)
{
    ck_assert_ok(create("u"));
    for (int i = 0; i < 1000; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "p%04d", i);
        snprintf(e, sizeof(e), "e%04d@x", i);
        const void *d = doc(1, "email", e);
        ck_assert_ok(troupe_table_insert(fx.tables, "u", k, strlen(k), d,
                                         doclen, NULL, on_count, NULL));
    }
    want = fx.calls + 1000;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    troupe_index_spec spec = {
        .name = "by_email", .fields = &email_f, .n_fields = 1};
    built = 0;
    ck_assert_ok(
        troupe_tables_add_index(fx.tables, "u", &spec, on_built, NULL));
    ck_assert(ts_run_until(&fx.loop, registered, NULL, 10000));
    unsigned char buf[32];
    troupe_index_query q = str_query("e0001@x", buf);
    troupe_err e = drive(
        troupe_tables_query(fx.tables, "u", "by_email", &q, on_query, NULL));
    bool ready = true;
    ck_assert_ok(troupe_tables_index_state(fx.tables, "u", "by_email", &ready));
    if (!ready) /* still building after the answer: it must have said so */
        ck_assert_err(e, TROUPE_ESTATE);
    ck_assert(ts_run_until(&fx.loop, is_built, NULL, 20000));
    ck_assert_ok(built_err);
    ck_assert_ok(drive(
        troupe_tables_query(fx.tables, "u", "by_email", &q, on_query, NULL)));
    ck_assert_uint_eq(qres->n, 1);
    ck_assert_int_eq(memcmp(qres->hits[0].pk, "p0001", 5), 0);
    troupe_index_result_destroy(qres);
    qres = NULL;
}
END_TEST

/* ---- API --------------------------------------------------------------- */

static void
no_cb(troupe_err err, troupe_rows *rows, void *arg)
{
    ck_abort_msg("callback fired after an error return");
}

static void
no_ddl(troupe_tables *t, troupe_err err, void *arg)
{
    ck_abort_msg("callback fired after an error return");
}

START_TEST(test_api_bad_arguments)
{
    ck_assert_ok(create("t"));
    troupe_tables *t = fx.tables;
    const void *d = doc(1, "v", "x");
    size_t dl = doclen;
    troupe_tables *out = (troupe_tables *)1;
    char **names;
    size_t n;
    troupe_tables_opts to = {0};
    ck_assert_err(troupe_tables_open(NULL, &out), TROUPE_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_err(troupe_tables_open(&to, &out), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_stop(NULL, on_tables_stopped, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_stop(t, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_stop_wait(NULL), TROUPE_EINVAL);
    troupe_tables_destroy(NULL);
    troupe_rows_destroy(NULL);
    ck_assert_err(troupe_tables_list(NULL, &names, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_list(t, NULL, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_list(t, &names, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_create(t, "x", NULL, 0, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_create(NULL, "x", NULL, 0, no_ddl, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_create_wait(NULL, "x", NULL, 0), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_create_wait(t, "", NULL, 0), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_drop(t, "t", NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_drop(t, NULL, no_ddl, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_drop_wait(t, "\xff"), TROUPE_EINVAL);
    ck_assert_err(troupe_tables_drop_wait(NULL, "t"), TROUPE_EINVAL);

    troupe_write_opts neg = {.expires_at_ms = -1};
    troupe_write_opts badsync = {.sync = (troupe_sync)9};
    ck_assert_err(
        troupe_table_insert(NULL, "t", "k", 1, d, dl, NULL, no_cb, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_table_insert(t, NULL, "k", 1, d, dl, NULL, no_cb, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_table_insert(t, "nope", "k", 1, d, dl, NULL, no_cb, NULL),
        TROUPE_ENOTABLE);
    ck_assert_err(
        troupe_table_insert(t, "t", NULL, 1, d, dl, NULL, no_cb, NULL),
        TROUPE_EINVAL);
    ck_assert_err(troupe_table_insert(t, "t", "k", 0, d, dl, NULL, no_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_insert(t, "t", "k", TROUPE_KEY_MAX + 1, d, dl,
                                      NULL, no_cb, NULL),
                  TROUPE_ETOOBIG);
    ck_assert_err(
        troupe_table_insert(t, "t", "k", 1, NULL, 0, NULL, no_cb, NULL),
        TROUPE_EINVAL);
    ck_assert_err(troupe_table_insert(t, "t", "k", 1, d, dl, NULL, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_update(t, "t", "k", 1, d, dl, &neg, no_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_table_upsert(t, "t", "k", 1, d, dl, &badsync, no_cb, NULL),
        TROUPE_EINVAL);
    ck_assert_err(troupe_table_delete(t, "t", "", 0, NULL, no_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_delete(t, "t", "k", 1, NULL, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_get(t, "t", NULL, 0, no_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_get(t, "t", "k", 1, NULL, NULL), TROUPE_EINVAL);
    const void *keys[] = {"a", ""};
    size_t lens[] = {1, 0};
    ck_assert_err(troupe_table_get_many(t, "t", NULL, lens, 1, no_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_get_many(t, "t", keys, lens, 2, no_cb, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_get_many(t, "t", keys, lens,
                                        TROUPE_TABLE_PAGE_MAX + 1, no_cb, NULL),
                  TROUPE_EINVAL);
    troupe_scan_opts so = {.limit = 1, .after = "x", .after_len = 0};
    ck_assert_err(troupe_table_scan(t, "t", NULL, no_cb, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_table_scan(t, "t", &so, no_cb, NULL), TROUPE_EINVAL);
    so = (troupe_scan_opts){.limit = 1};
    ck_assert_err(troupe_table_scan(t, "t", &so, NULL, NULL), TROUPE_EINVAL);
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_table_get_wait(t, "t", "k", 1, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_table_get_many_wait(t, "t", keys, lens, 1, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_scan_wait(t, "t", &so, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_table_scan_wait(t, "t", NULL, &rows), TROUPE_EINVAL);
    ck_assert_ptr_null(rows);
    ck_assert_err(troupe_table_insert_wait(t, "t", "", 0, d, dl, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_update_wait(t, "nope", "k", 1, d, dl, NULL),
                  TROUPE_ENOTABLE);
    ck_assert_err(troupe_table_upsert_wait(NULL, "t", "k", 1, d, dl, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_delete_wait(t, "t", NULL, 1, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_table_get_wait(t, "t", "k", 0, &rows), TROUPE_EINVAL);
    ck_assert_err(troupe_table_get_many_wait(t, "t", keys, lens, 1, NULL),
                  TROUPE_EINVAL);
    /* nothing reached the table */
    ck_assert_uint_eq(family_count("t.1"), 0);
}
END_TEST

START_TEST(test_api_calls_after_stop_are_estate)
{
    ck_assert_ok(create("t"));
    fx.done = 0;
    ck_assert_ok(troupe_tables_stop(fx.tables, on_tables_stopped, NULL));
    ck_assert_err(troupe_tables_stop(fx.tables, on_tables_stopped, NULL),
                  TROUPE_ESTATE);
    ck_assert(ts_run_until(&fx.loop, is_done, NULL, 10000));
    const void *d = doc(1, "v", "x");
    ck_assert_err(troupe_table_insert(fx.tables, "t", "k", 1, d, doclen, NULL,
                                      no_cb, NULL),
                  TROUPE_ESTATE);
    ck_assert_err(troupe_tables_create(fx.tables, "u", NULL, 0, no_ddl, NULL),
                  TROUPE_ESTATE);
    char **names;
    size_t n;
    ck_assert_err(troupe_tables_list(fx.tables, &names, &n), TROUPE_ESTATE);
    /* teardown's stop must see it stopped already: reopen a fresh one */
    troupe_tables_destroy(fx.tables);
    troupe_tables_opts to = {
        .catalog = fx.cat, .commit = fx.commit, .clock = fake_clock};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
    ck_assert_err(get("t", "k"), TROUPE_ENOENT);
}
END_TEST

/* An opened object with no table in it runs all the same (its catalog
 * jobs, its DDL queue): destroying it unstopped aborts. Run with SIGABRT
 * expected; the temp dir goes first, as nothing after the abort would
 * remove it. */
START_TEST(test_tables_destroy_unstopped_without_tables_aborts)
{
    char **names = NULL;
    size_t n = 1;
    ck_assert_ok(troupe_tables_list(fx.tables, &names, &n));
    ck_assert_uint_eq(n, 0);
    troupe_free(names);
    ts_rmtree(fx.dir);
    troupe_tables_destroy(fx.tables);
}
END_TEST

/* ---- blocking twins (standalone runtime) --------------------------------- */

static const troupe_index_field vf = {"v", TROUPE_FIELD_STRING};

START_TEST(test_wait_twins_round_trip)
{
    troupe_tables *t = fx.tables;
    ck_assert_ok(troupe_tables_create_wait(t, "w", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(t, "w", NULL, 0)); /* same spec */
    troupe_index_spec wix = {.name = "v", .fields = &vf, .n_fields = 1};
    ck_assert_err(troupe_tables_create_wait(t, "w", &wix, 1), TROUPE_EEXIST);
    const void *d = doc(1, "v", "one");
    ck_assert_ok(troupe_table_insert_wait(t, "w", "a", 1, d, doclen, NULL));
    ck_assert_err(troupe_table_insert_wait(t, "w", "a", 1, d, doclen, NULL),
                  TROUPE_EEXIST);
    ck_assert_ok(troupe_table_upsert_wait(t, "w", "b", 1, d, doclen, NULL));
    d = doc(1, "v", "two");
    ck_assert_ok(troupe_table_update_wait(t, "w", "b", 1, d, doclen, NULL));
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(t, "w", "b", 1, &rows));
    ck_assert_uint_eq(rows->n, 1);
    fx.rows = rows;
    ck_assert_str_eq(field(0, "v"), "two");
    troupe_rows_destroy(rows);
    fx.rows = NULL;
    const void *keys[] = {"b", "a"};
    size_t lens[] = {1, 1};
    ck_assert_ok(troupe_table_get_many_wait(t, "w", keys, lens, 2, &rows));
    ck_assert_uint_eq(rows->n, 2);
    ck_assert_int_eq(rows->rows[0].key[0], 'b');
    troupe_rows_destroy(rows);
    troupe_scan_opts so = {.limit = 10, .reverse = true};
    ck_assert_ok(troupe_table_scan_wait(t, "w", &so, &rows));
    ck_assert_uint_eq(rows->n, 2);
    ck_assert_int_eq(rows->rows[0].key[0], 'b');
    ck_assert_uint_eq(rows->cursor_len, 1 + TROUPE_CURSOR_OVERHEAD);
    ck_assert_mem_eq(rows->cursor, kc_id(1, "a"), rows->cursor_len);
    troupe_rows_destroy(rows);
    troupe_index_spec spec = {.name = "v", .fields = &vf, .n_fields = 1};
    ck_assert_ok(troupe_tables_add_index_wait(t, "w", &spec));
    bool ready = false;
    ck_assert_ok(troupe_tables_index_state(t, "w", "v", &ready));
    ck_assert(ready);
    ck_assert_ok(troupe_tables_add_index_wait(t, "w", &spec)); /* again */
    spec.unique = true; /* the name with another spec */
    ck_assert_err(troupe_tables_add_index_wait(t, "w", &spec), TROUPE_EEXIST);
    ck_assert_ok(troupe_table_delete_wait(t, "w", "a", 1, NULL));
    ck_assert_err(troupe_table_get_wait(t, "w", "a", 1, &rows), TROUPE_ENOENT);
    ck_assert_ptr_null(rows);
    ck_assert_ok(troupe_tables_drop_wait(t, "w"));
    ck_assert_err(troupe_tables_drop_wait(t, "w"), TROUPE_ENOTABLE);
}
END_TEST

/* Reads run on the caller's thread from memory and call back later on
 * scheduler 0; a read that needs the disk (a cold block cache after a
 * reopen) goes to the table actor's workers and still answers. */
START_TEST(test_reads_from_memory_here_from_disk_via_the_actor)
{
    ck_assert_ok(create("a"));
    ck_assert_ok(ins("a", "k1", doc(1, "v", "one")));
    ck_assert_ok(ins("a", "k2", doc(1, "v", "two")));
    /* in the memtable: served at once, but never inside the call */
    int calls = fx.calls;
    ck_assert_ok(troupe_table_get(fx.tables, "a", "k1", 2, on_rows, NULL));
    ck_assert_int_eq(fx.calls, calls);
    want = calls + 1;
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    ck_assert_ok(fx.err);
    ck_assert_str_eq(field(0, "v"), "one");
    ck_assert_ok(troupe_db_flush(fx.db));
    close_all();
    open_all();
    /* cold: the row family's blocks are not in memory */
    void *v = NULL;
    size_t n = 0;
    ck_assert_err(troupe_db_get_cached(fx.db, cf("t.1"), "k1", 2, &v, &n),
                  TROUPE_EAGAIN);
    ck_assert_ok(get("a", "k1"));
    ck_assert_uint_eq(fx.rows->n, 1);
    ck_assert_str_eq(field(0, "v"), "one");
    ck_assert_err(get("a", "nope"), TROUPE_ENOENT);
    close_all();
    open_all();
    ck_assert_ok(scan("a", NULL, NULL, NULL, 0, 10, false));
    ck_assert_uint_eq(fx.rows->n, 2);
    ck_assert(row_key_is(1, "k2"));
    ck_assert_uint_eq(fx.rows->cursor_len, 2 + TROUPE_CURSOR_OVERHEAD);
    ck_assert_mem_eq(fx.rows->cursor, kc_id(1, "k2"), fx.rows->cursor_len);
    const void *keys[2] = {"k2", "k1"};
    size_t klens[2] = {2, 2};
    ck_assert_ok(drive(
        troupe_table_get_many(fx.tables, "a", keys, klens, 2, on_rows, NULL)));
    ck_assert_uint_eq(fx.rows->n, 2);
    ck_assert(row_key_is(0, "k2"));
    /* the disk read loaded the block: memory serves it now */
    ck_assert_ok(troupe_db_get_cached(fx.db, cf("t.1"), "k1", 2, &v, &n));
    troupe_free(v);
}
END_TEST

/* ---- read-only tables -------------------------------------------------- */

/* One open of fx.dir: a standalone runtime, the db (read-only or not),
 * the pipeline (read-write only), the catalog and the tables. */
typedef struct tstack {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
} tstack;

static void
stack_open(tstack *s, bool ro)
{
    memset(s, 0, sizeof(*s));
    troupe_runtime_opts o = {.schedulers = 2, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&s->rt, &o));
    troupe_db_opts dbo;
    troupe_db_opts_init(&dbo);
    dbo.read_only = ro;
    ck_assert_ok(troupe_db_open(fx.dir, &dbo, &s->db));
    if (!ro)
        ck_assert_ok(troupe_commit_create(s->db, NULL, &s->commit));
    troupe_catalog_opts co = {.rt = s->rt, .db = s->db};
    ck_assert_ok(troupe_catalog_open(&co, &s->cat));
    ck_assert(troupe_catalog_read_only(s->cat) == ro);
    troupe_tables_opts to = {
        .catalog = s->cat, .commit = s->commit, .clock = fake_clock};
    ck_assert_ok(troupe_tables_open(&to, &s->tables));
}

static void
stack_close(tstack *s)
{
    ck_assert_ok(troupe_tables_stop_wait(s->tables));
    troupe_tables_destroy(s->tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(s->rt));
    ck_assert_ok(troupe_catalog_stop_wait(s->cat));
    troupe_catalog_destroy(s->cat);
    troupe_runtime_destroy(s->rt);
    troupe_commit_destroy(s->commit);
    ck_assert_ok(troupe_db_close(s->db));
    memset(s, 0, sizeof(*s));
}

static void
ro_setup(void)
{
    memset(&fx, 0, sizeof(fx));
    atomic_store(&fx.now, T0);
    fx.dir = ts_tempdir("table-ro");
}

static void
ro_teardown(void)
{
    ts_rmtree(fx.dir);
    free(fx.dir);
}

/* Table "r" with unique index by_email and rows r<from>..r<to - 1>, through
 * s (read-write). */
static void
ro_fill(tstack *s, int from, int to)
{
    if (from == 0) {
        troupe_index_spec spec = {.name = "by_email",
                                  .unique = true,
                                  .fields = &email_f,
                                  .n_fields = 1};
        ck_assert_ok(troupe_tables_create_wait(s->tables, "r", &spec, 1));
    }
    for (int i = from; i < to; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "r%03d", i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        doc(1, "email", e);
        ck_assert_ok(troupe_table_insert_wait(s->tables, "r", k, strlen(k),
                                              docbuf, doclen, NULL));
    }
}

static uint64_t
fold(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    h = (h ^ n) * 1099511628211u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211u;
    return h;
}

static uint64_t
fold_rows(uint64_t h, const troupe_rows *r)
{
    h = fold(h, &r->n, sizeof(r->n));
    for (size_t i = 0; i < r->n; i++) {
        h = fold(h, r->rows[i].key, r->rows[i].key_len);
        h = fold(h, r->rows[i].doc, r->rows[i].doc_len);
        h = fold(h, &r->rows[i].expires_at_ms, sizeof(int64_t));
    }
    return h;
}

/* What every kind of read of table "r" gives through t, folded into one
 * digest (rows bytes, hits, counts, states): two opens that read the same
 * give the same. *nrows gets the rows a full scan found. */
static uint64_t
ro_view(troupe_tables *t, size_t *nrows)
{
    uint64_t h = 14695981039346656037u;
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(t, "r", "r007", 4, &rows));
    h = fold_rows(h, rows);
    troupe_rows_destroy(rows);
    const void *keys[3] = {"r001", "nope", "r009"};
    const size_t klens[3] = {4, 4, 4};
    ck_assert_ok(troupe_table_get_many_wait(t, "r", keys, klens, 3, &rows));
    ck_assert_uint_eq(rows->n, 2);
    h = fold_rows(h, rows);
    troupe_rows_destroy(rows);
    troupe_scan_opts so = {.limit = 1000};
    ck_assert_ok(troupe_table_scan_wait(t, "r", &so, &rows));
    *nrows = rows->n;
    h = fold_rows(h, rows);
    troupe_rows_destroy(rows);
    unsigned char buf[32];
    troupe_index_query q = str_query("e005@x", buf);
    troupe_index_result *res = NULL;
    ck_assert_ok(troupe_tables_query_wait(t, "r", "by_email", &q, &res));
    ck_assert_uint_eq(res->n, 1);
    for (size_t i = 0; i < res->n; i++) {
        h = fold(h, res->hits[i].key, res->hits[i].key_len);
        h = fold(h, res->hits[i].pk, res->hits[i].pk_len);
        h = fold(h, res->hits[i].val, res->hits[i].val_len);
    }
    troupe_index_result_destroy(res);
    uint64_t n = 0;
    troupe_index_query all = {.limit = 1000};
    ck_assert_ok(troupe_tables_count_wait(t, "r", "by_email", &all, &n));
    h = fold(h, &n, sizeof(n));
    bool ready = false;
    ck_assert_ok(troupe_tables_index_state(t, "r", "by_email", &ready));
    ck_assert(ready);
    char **names = NULL;
    size_t nn = 0;
    ck_assert_ok(troupe_tables_list(t, &names, &nn));
    for (size_t i = 0; i < nn; i++)
        h = fold(h, names[i], strlen(names[i]));
    troupe_free(names);
    troupe_tables_stats *st = NULL;
    ck_assert_ok(troupe_tables_stats_wait(t, &st));
    h = fold(h, &st->n, sizeof(st->n));
    troupe_tables_stats_destroy(st);
    return h;
}

/* The stored version floor, read straight from meta (*len bytes,
 * troupe_free), or NULL when absent. */
static void *
ro_floor(troupe_db *db, size_t *len)
{
    troupe_cf *meta = NULL;
    ck_assert_ok(troupe_db_cf(db, "meta", &meta));
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "versions", 8);
    const uint8_t *k;
    size_t klen;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &klen));
    void *v = NULL;
    troupe_err e = troupe_db_get(db, meta, NULL, k, klen, &v, len);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_ENOENT)
        return NULL;
    ck_assert_ok(e);
    return v;
}

/* e is EREADONLY with a detail naming call. */
static void
ro_refused(troupe_err e, const char *call)
{
    ck_assert_err(e, TROUPE_EREADONLY);
    const char *m = troupe_errmsg(TROUPE_EREADONLY);
    ck_assert_msg(strstr(m, call) != NULL && strstr(m, "read-only") != NULL,
                  "detail \"%s\" for %s", m, call);
}

static void
ro_never_evict(troupe_err err, const troupe_vevict_result *r, void *arg)
{
    ck_abort_msg("a refused pass called back");
}

static void
ro_never_purge(troupe_err err, const troupe_purge_result *r, void *arg)
{
    ck_abort_msg("a refused pass called back");
}

static void
ro_never_ver(troupe_err err, troupe_rows *rows, uint64_t v, void *arg)
{
    ck_abort_msg("a refused versioned query called back");
}

static troupe_err
ro_part_write(void *arg, troupe_batch *b)
{
    ck_abort_msg("a participant of a read-only commit wrote");
    return TROUPE_OK;
}

static void
ro_part_done(void *arg, troupe_err outcome)
{
    *(troupe_err *)arg = outcome;
}

/* Every call that would write, on read-only tables t: EREADONLY at the
 * call, naming it, no callback. */
static void
ro_assert_writes_refused(troupe_tables *t)
{
    const char *d = doc(1, "email", "new@x");
    size_t dl = doclen;
    ro_refused(troupe_table_insert(t, "r", "n", 1, d, dl, NULL, no_cb, NULL),
               "troupe_table_insert");
    ro_refused(troupe_table_update_wait(t, "r", "r001", 4, d, dl, NULL),
               "troupe_table_update");
    ro_refused(troupe_table_upsert(t, "r", "r001", 4, d, dl, NULL, no_cb, NULL),
               "troupe_table_upsert");
    ro_refused(troupe_table_delete_wait(t, "r", "r001", 4, NULL),
               "troupe_table_delete");
    ro_refused(troupe_tables_create(t, "s", NULL, 0, no_ddl, NULL),
               "troupe_tables_create");
    ro_refused(troupe_tables_create_wait(t, "r", NULL, 0),
               "troupe_tables_create");
    ro_refused(troupe_tables_drop_wait(t, "r"), "troupe_tables_drop");
    troupe_index_spec spec = {
        .name = "by_city", .fields = &city_f, .n_fields = 1};
    ro_refused(troupe_tables_add_index(t, "r", &spec, no_ddl, NULL),
               "troupe_tables_add_index");
    ro_refused(troupe_tables_add_index_wait(t, "r", &spec),
               "troupe_tables_add_index");
    ro_refused(troupe_tables_rebuild_index_wait(t, "r", "by_email"),
               "troupe_tables_rebuild_index");
    ro_refused(troupe_tables_drop_index(t, "r", "by_email", no_ddl, NULL),
               "troupe_tables_drop_index");
    troupe_vevict_result vr;
    ro_refused(troupe_tables_evict_versions(t, "r", ro_never_evict, NULL),
               "troupe_tables_evict_versions");
    ro_refused(troupe_tables_evict_versions_wait(t, "r", &vr),
               "troupe_tables_evict_versions");
    troupe_purge_result pr;
    ro_refused(troupe_tables_purge_expired(t, "r", ro_never_purge, NULL),
               "troupe_tables_purge_expired");
    ro_refused(troupe_tables_purge_expired_wait(t, "r", &pr),
               "troupe_tables_purge_expired");
    ro_refused(troupe_txn_query_version(t, "r", "r001", 4, ro_never_ver, NULL),
               "troupe_txn_query_version");
    troupe_rows *rows = NULL;
    uint64_t ver = 0;
    ro_refused(troupe_txn_query_version_wait(t, "r", "r001", 4, &rows, &ver),
               "troupe_txn_query_version");
    unsigned char buf[32];
    troupe_index_query q = str_query("e001@x", buf);
    ro_refused(troupe_txn_remove_by_index_wait(t, "r", "by_email", &q,
                                               TROUPE_SYNC_DEFAULT, &rows),
               "troupe_txn_remove_by_index");
    ck_assert_ptr_null(rows);
    /* a transaction reads, buffers nothing, commits what it read */
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(t, NULL, &tx));
    ck_assert_ok(troupe_txn_get_wait(tx, "r", "r002", 4, &rows));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
    ro_refused(troupe_txn_insert(tx, "r", "n", 1, d, dl, NULL),
               "troupe_txn_insert");
    ro_refused(troupe_txn_update(tx, "r", "r002", 4, d, dl, NULL),
               "troupe_txn_update");
    ro_refused(troupe_txn_upsert(tx, "r", "r002", 4, d, dl, NULL),
               "troupe_txn_upsert");
    ro_refused(troupe_txn_delete(tx, "r", "r002", 4), "troupe_txn_delete");
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    /* a commit with writes (a participant's) is refused; it stays open */
    troupe_err outcome = TROUPE_OK;
    ck_assert_ok(troupe_txn_begin(t, NULL, &tx));
    troupe_txn_part part = {ro_part_write, ro_part_done, &outcome};
    ck_assert_ok(troupe_txn_attach(tx, &part));
    ro_refused(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT),
               "troupe_txn_commit");
    ro_refused(troupe_txn_read_version(tx, "r", "r002", 4, 1),
               "troupe_txn_read_version");
    ck_assert_ok(troupe_txn_rollback(tx));
    ck_assert_err(outcome, TROUPE_ECANCELED);
    troupe_txn_destroy(tx);
}

/* Read-only tables over a populated database read what a read-write open
 * reads (rows, the unique index, counts, states) and refuse every write
 * at the call; the floor record is not moved and not a byte of the
 * directory changes. The commit option must be NULL on a read-only
 * catalog (and given on a read-write one). */
START_TEST(test_readonly_tables_read_refuse_writes_change_nothing)
{
    tstack rw, ro;
    stack_open(&rw, false);
    ro_fill(&rw, 0, 20);
    size_t n_rw = 0;
    uint64_t view_rw = ro_view(rw.tables, &n_rw);
    ck_assert_uint_eq(n_rw, 20);
    stack_close(&rw);
    ts_listing before, after;
    ts_list_dir(fx.dir, &before);
    stack_open(&ro, true);
    size_t flen = 0;
    void *floor = ro_floor(ro.db, &flen);
    ck_assert_ptr_nonnull(floor);
    size_t n_ro = 0;
    ck_assert_uint_eq(ro_view(ro.tables, &n_ro), view_rw);
    ck_assert_uint_eq(n_ro, n_rw);
    troupe_index_progress pg;
    ck_assert_ok(
        troupe_tables_index_progress_wait(ro.tables, "r", "by_email", &pg));
    ck_assert(pg.ready);
    ro_assert_writes_refused(ro.tables);
    /* nothing reached the actors: the rows are as they were */
    ck_assert_uint_eq(ro_view(ro.tables, &n_ro), view_rw);
    /* tables_open's commit rule */
    troupe_tables *t2 = NULL;
    static char other; /* stands for another db's pipeline: never used */
    troupe_tables_opts to = {.catalog = ro.cat,
                             .commit = (troupe_commit *)(void *)&other};
    ck_assert_err(troupe_tables_open(&to, &t2), TROUPE_EINVAL);
    ck_assert_ptr_null(t2);
    size_t flen2 = 0;
    void *floor2 = ro_floor(ro.db, &flen2);
    ck_assert_uint_eq(flen2, flen);
    ck_assert_int_eq(memcmp(floor2, floor, flen), 0);
    troupe_free(floor2);
    stack_close(&ro);
    ts_list_dir(fx.dir, &after);
    ck_assert_str_eq(after.text, before.text);
    /* the floor a read-write open finds is the one before the read-only
     * one: it never moved */
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    floor2 = ro_floor(db, &flen2);
    ck_assert_uint_eq(flen2, flen);
    ck_assert_int_eq(memcmp(floor2, floor, flen), 0);
    troupe_free(floor2);
    troupe_free(floor);
    ck_assert_ok(troupe_db_close(db));
    stack_open(&rw, false);
    to = (troupe_tables_opts){.catalog = rw.cat};
    ck_assert_err(troupe_tables_open(&to, &t2), TROUPE_EINVAL);
    stack_close(&rw);
}
END_TEST

/* A build left unfinished is not resumed by a read-only open: the index
 * stays "building" (queries ESTATE), no build is known, and no byte is
 * written; a read-write open then builds it. */
START_TEST(test_readonly_building_index_stays_building)
{
    tstack s;
    stack_open(&s, false);
    ck_assert_ok(troupe_tables_create_wait(s.tables, "r", NULL, 0));
    for (int i = 0; i < 10; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "r%03d", i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        doc(1, "email", e);
        ck_assert_ok(troupe_table_insert_wait(s.tables, "r", k, strlen(k),
                                              docbuf, doclen, NULL));
    }
    stack_close(&s);
    write_building_catalog();
    ts_listing before, after;
    ts_list_dir(fx.dir, &before);
    stack_open(&s, true);
    bool ready = true;
    ck_assert_ok(troupe_tables_index_state(s.tables, "r", "by_email", &ready));
    ck_assert(!ready);
    troupe_index_progress pg;
    ck_assert_ok(
        troupe_tables_index_progress_wait(s.tables, "r", "by_email", &pg));
    ck_assert(!pg.ready);
    ck_assert(!pg.known);
    unsigned char buf[32];
    troupe_index_query q = str_query("e001@x", buf);
    troupe_index_result *res = NULL;
    ck_assert_err(troupe_tables_query_wait(s.tables, "r", "by_email", &q, &res),
                  TROUPE_ESTATE);
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(s.tables, "r", "r001", 4, &rows));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
    stack_close(&s);
    ts_list_dir(fx.dir, &after);
    ck_assert_str_eq(after.text, before.text);
    stack_open(&s, false);
    ck_assert_ok(
        troupe_tables_index_progress_wait(s.tables, "r", "by_email", &pg));
    ck_assert(pg.known);
    stack_close(&s);
}
END_TEST

/* Read-only tables open beside a read-write open that holds the database
 * and keeps writing: they read what was committed before their open
 * (flushed or only in the WAL), refuse writes, and the writer's families
 * and rows are untouched by them. */
START_TEST(test_readonly_tables_beside_a_writer)
{
    tstack rw, ro;
    stack_open(&rw, false);
    ro_fill(&rw, 0, 10);
    ck_assert_ok(troupe_db_flush(rw.db));
    ro_fill(&rw, 10, 15); /* in the WAL only */
    char **before = NULL, **after = NULL;
    size_t nb = 0, na = 0;
    ck_assert_ok(troupe_db_cf_names(rw.db, &before, &nb));
    stack_open(&ro, true);
    troupe_scan_opts so = {.limit = 1000};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_scan_wait(ro.tables, "r", &so, &rows));
    ck_assert_uint_eq(rows->n, 15);
    troupe_rows_destroy(rows);
    ro_fill(&rw, 15, 20); /* after the read-only open: not seen */
    ck_assert_ok(troupe_table_scan_wait(ro.tables, "r", &so, &rows));
    ck_assert_uint_eq(rows->n, 15);
    troupe_rows_destroy(rows);
    unsigned char buf[32];
    troupe_index_query q = str_query("e012@x", buf);
    troupe_index_result *res = NULL;
    ck_assert_ok(
        troupe_tables_query_wait(ro.tables, "r", "by_email", &q, &res));
    ck_assert_uint_eq(res->n, 1);
    troupe_index_result_destroy(res);
    ro_assert_writes_refused(ro.tables);
    stack_close(&ro);
    ck_assert_ok(troupe_table_scan_wait(rw.tables, "r", &so, &rows));
    ck_assert_uint_eq(rows->n, 20);
    troupe_rows_destroy(rows);
    ro_fill(&rw, 20, 21); /* the writer goes on */
    stack_close(&rw);
    /* the families on disk are the writer's */
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_names(db, &after, &na));
    ck_assert_ok(troupe_db_close(db));
    ck_assert_uint_eq(na, nb);
    for (size_t i = 0; i < nb; i++) {
        bool found = false;
        for (size_t k = 0; k < na; k++)
            found |= strcmp(after[k], before[i]) == 0;
        ck_assert_msg(found, "family %s went", before[i]);
    }
    troupe_free(before);
    troupe_free(after);
}
END_TEST

Suite *
table_suite(void)
{
    Suite *s = suite_create("table");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_catalog_create_list_drop_round_trip);
    tcase_add_test(tc, test_reads_from_memory_here_from_disk_via_the_actor);
    tcase_add_test(tc, test_catalog_duplicate_name_is_eexist);
    tcase_add_test(tc, test_catalog_drop_unknown_is_enotable);
    tcase_add_test(tc, test_catalog_bad_names_are_einval);
    tcase_add_test(tc, test_catalog_families_follow_the_table);
    tcase_add_test(tc, test_catalog_and_rows_survive_reopen_ids_not_reused);
    tcase_add_test(tc, test_catalog_drop_then_recreate_starts_empty);
    tcase_add_test(tc, test_row_insert_get_round_trip_bytes_equal);
    tcase_add_test(tc, test_row_insert_existing_is_eexist_and_keeps_row);
    tcase_add_test(tc, test_row_update_absent_is_enoent_present_replaces);
    tcase_add_test(tc, test_row_upsert_creates_then_replaces);
    tcase_add_test(tc, test_row_delete_removes_row_and_manifest);
    tcase_add_test(tc, test_row_document_not_a_map_is_eproto_nothing_written);
    tcase_add_test(tc, test_row_manifest_written_for_row_without_index);
    tcase_add_test(tc, test_row_get_many_in_order_asked_skipping_absent);
    tcase_add_test(tc, test_row_timestamps_only_when_declared);
    tcase_add_test(tc, test_row_no_timestamps_switch_per_write);
    tcase_add_test(tc, test_get_many_zero_keys_is_empty);
    tcase_add_test(tc, test_row_expired_is_invisible_and_insertable);
    tcase_add_test(tc, test_row_concurrent_inserts_same_key_exactly_one_ok);
    tcase_add_test(tc, test_row_sync_flag_reaches_the_pipeline);
    tcase_add_test(tc, test_row_requests_in_flight_at_drop_answer_exactly_once);
    tcase_add_test(tc, test_catalog_concurrent_drops_of_busy_tables_complete);
    tcase_add_test(tc, test_integrity_row_without_manifest_is_ecorrupt);
    tcase_add_test(tc, test_integrity_orphaned_manifest_is_ecorrupt);
    tcase_add_test(tc,
                   test_integrity_malformed_and_cross_record_manifest_ecorrupt);
    tcase_add_test(tc,
                   test_integrity_malformed_envelope_is_ecorrupt_not_absent);
    tcase_add_test(tc, test_scan_forward_pages_cover_every_row_once);
    tcase_add_test(tc, test_scan_reverse_pages_in_descending_order);
    tcase_add_test(tc, test_scan_bounds_are_half_open);
    tcase_add_test(tc, test_scan_limit_zero_einval_cursor_outside_erange);
    tcase_add_test(tc, test_scan_corrupt_row_fails_page_never_shortens);
    tcase_add_test(tc, test_scan_skips_expired_rows_and_fills_the_page);
    tcase_add_test(tc, test_index_entries_and_manifest_follow_writes);
    tcase_add_test(tc, test_query_and_of_two_indexes_by_name);
    tcase_add_test(tc,
                   test_index_unique_second_row_econstraint_nothing_written);
    tcase_add_test(tc, test_index_concurrent_unique_inserts_exactly_one_ok);
    tcase_add_test(tc, test_index_bad_spec_and_duplicate_index_name_einval);
    tcase_add_test(tc, test_index_defs_survive_reopen);
    tcase_add_test(tc, test_build_index_online_while_writes_go_on);
    tcase_add_test(tc, test_build_unique_duplicate_fails_and_removes_index);
    tcase_add_test(tc, test_build_bad_arguments_and_name_clash);
    tcase_add_test(tc, test_build_left_building_resumes_at_open);
    tcase_add_test(tc, test_build_stop_waits_for_running_build);
    tcase_add_test(tc, test_query_by_index_returns_rows_and_counts);
    tcase_add_test(tc, test_query_on_building_index_is_estate_until_ready);
    tcase_add_test(tc, test_api_bad_arguments);
    tcase_add_test(tc, test_api_calls_after_stop_are_estate);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("wait");
    tcase_set_timeout(tw, 60);
    tcase_add_checked_fixture(tw, setup_standalone, teardown);
    tcase_add_test(tw, test_wait_twins_round_trip);
    tcase_add_test_raise_signal(
        tw, test_tables_destroy_unstopped_without_tables_aborts, SIGABRT);
    suite_add_tcase(s, tw);
    TCase *tr = tcase_create("readonly");
    tcase_set_timeout(tr, 60);
    tcase_add_checked_fixture(tr, ro_setup, ro_teardown);
    tcase_add_test(tr, test_readonly_tables_read_refuse_writes_change_nothing);
    tcase_add_test(tr, test_readonly_building_index_stays_building);
    tcase_add_test(tr, test_readonly_tables_beside_a_writer);
    suite_add_tcase(s, tr);
    return s;
}
