/* The data layer's error outcomes: a distinct code for each missing kind
 * of name (table, index, queue) with a detail naming it, details of the
 * common synchronous refusals, and EDEADLK for a blocking twin called on
 * a troupe thread, which would wait for itself. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "troupe/alloc.h"
#include "troupe/catalog.h"
#include "troupe/queue.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "tsupport.h"

typedef struct e_fx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_queues *qs;
    char *dir;
} e_fx;

static e_fx fx;

/* The runtime (on `loop` when not NULL), the db, the pipeline, the
 * catalog and the tables: opening blocks for the disk only. */
static void
open_tables(uv_loop_t *loop)
{
    memset(&fx, 0, sizeof(fx));
    fx.dir = ts_tempdir("errors");
    troupe_runtime_opts o = {.loop = loop, .schedulers = 2, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
}

/* The db, the pipeline and the directory, once the rest is destroyed. */
static void
close_db(void)
{
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
    ts_rmtree(fx.dir);
    free(fx.dir);
}

static void
setup(void)
{
    open_tables(NULL);
    troupe_queues_opts qo = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_queues_open(&qo, &fx.qs));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "u", NULL, 0));
    troupe_queue_spec s = {"q", 1, 0, 0};
    ck_assert_ok(troupe_queues_create_wait(fx.qs, &s));
}

static void
teardown(void)
{
    ck_assert_ok(troupe_queues_stop_wait(fx.qs));
    troupe_queues_destroy(fx.qs);
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_tables_destroy(fx.tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    close_db();
}

/* msgpack {"v": 1} */
static const uint8_t DOC[] = {0x81, 0xa1, 'v', 0x01};

/* Event "e" of business key "k", payload DOC. */
static troupe_queue_event
event_e(void)
{
    return (troupe_queue_event){.id = "e",
                                .id_len = 1,
                                .key = "k",
                                .key_len = 1,
                                .payload = DOC,
                                .payload_len = sizeof(DOC)};
}

static void
assert_msg(troupe_err e, const char *want)
{
    ck_assert_str_eq(troupe_errmsg(e), want);
}

/* Each missing kind of name has its own code, and the thread's detail
 * names it; a missing row of a known table stays ENOENT. */
START_TEST(test_unknown_table_index_queue_have_codes_and_details)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, "nope", "k", 1, &rows);
    ck_assert_err(e, TROUPE_ENOTABLE);
    assert_msg(e, "no table \"nope\"");
    ck_assert_ptr_null(rows);
    e = troupe_table_insert_wait(fx.tables, "no\"pe", "k", 1, DOC, sizeof(DOC),
                                 NULL);
    ck_assert_err(e, TROUPE_ENOTABLE);
    assert_msg(e, "no table \"no\\\"pe\""); /* escaped, as in log lines */
    e = troupe_table_get_wait(fx.tables, "u", "k", 1, &rows);
    ck_assert_err(e, TROUPE_ENOENT); /* the table is there, the row not */

    troupe_index_query q = {.limit = 10};
    troupe_index_result *r = NULL;
    e = troupe_tables_query_wait(fx.tables, "u", "by_x", &q, &r);
    ck_assert_err(e, TROUPE_ENOINDEX);
    assert_msg(e, "the table has no index \"by_x\"");
    ck_assert_ptr_null(r);
    e = troupe_tables_query_wait(fx.tables, "zz", "by_x", &q, &r);
    ck_assert_err(e, TROUPE_ENOTABLE);
    assert_msg(e, "no table \"zz\"");
    uint64_t n = 7;
    e = troupe_tables_count_wait(fx.tables, "u", "by_y", &q, &n);
    ck_assert_err(e, TROUPE_ENOINDEX);
    assert_msg(e, "the table has no index \"by_y\"");

    troupe_queue_event ev = event_e();
    e = troupe_queue_publish_wait(fx.qs, "nq", &ev, TROUPE_SYNC_OFF);
    ck_assert_err(e, TROUPE_ENOQUEUE);
    assert_msg(e, "no queue \"nq\"");
    ck_assert_err(troupe_queue_pause(fx.qs, "nq"), TROUPE_ENOQUEUE);
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(fx.qs, "q", &st));
    ck_assert_uint_eq(st->pending, 0); /* nothing written anywhere */
    troupe_free(st);
}
END_TEST

/* A transaction naming an unknown table: the code and the detail at the
 * call that names it, and nothing buffered. */
START_TEST(test_txn_naming_an_unknown_table_is_enotable)
{
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    troupe_err e =
        troupe_txn_upsert(tx, "ghost", "k", 1, DOC, sizeof(DOC), NULL);
    ck_assert_err(e, TROUPE_ENOTABLE);
    assert_msg(e, "no table \"ghost\"");
    troupe_rows *rows = NULL;
    e = troupe_txn_get_wait(tx, "ghost2", "k", 1, &rows);
    ck_assert_err(e, TROUPE_ENOTABLE);
    assert_msg(e, "no table \"ghost2\"");
    ck_assert_ok(troupe_txn_upsert(tx, "u", "k", 1, DOC, sizeof(DOC), NULL));
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_table_get_wait(fx.tables, "u", "k", 1, &rows));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
}
END_TEST

/* A name that breaks the name rule: EINVAL with the rule it broke. */
START_TEST(test_invalid_names_say_which_rule)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, "", "k", 1, &rows);
    ck_assert_err(e, TROUPE_EINVAL);
    assert_msg(e, "table name is empty");
    size_t big = TROUPE_TABLE_NAME_MAX + 1;
    char *name = malloc(big + 1);
    ck_assert_ptr_nonnull(name);
    memset(name, 'a', big);
    name[big] = '\0';
    e = troupe_table_get_wait(fx.tables, name, "k", 1, &rows);
    ck_assert_err(e, TROUPE_EINVAL);
    char want[96];
    snprintf(want, sizeof(want), "table name longer than %zu bytes",
             (size_t)TROUPE_TABLE_NAME_MAX);
    assert_msg(e, want);
    free(name);
    e = troupe_queue_pause(fx.qs, "a\xc3"); /* a cut UTF-8 sequence */
    ck_assert_err(e, TROUPE_EINVAL);
    assert_msg(e, "queue name not strict UTF-8: \"a\xc3\"");
}
END_TEST

/* The limits and options a caller hits most: the detail gives the size
 * and the limit, or the field. */
START_TEST(test_limits_and_options_say_the_size_and_the_field)
{
    size_t kl = TROUPE_KEY_MAX + 1;
    char *k = calloc(1, kl);
    ck_assert_ptr_nonnull(k);
    troupe_err e =
        troupe_table_upsert_wait(fx.tables, "u", k, kl, DOC, sizeof(DOC), NULL);
    ck_assert_err(e, TROUPE_ETOOBIG);
    char want[128];
    snprintf(want, sizeof(want), "key of %zu bytes over TROUPE_KEY_MAX (%zu)",
             kl, (size_t)TROUPE_KEY_MAX);
    assert_msg(e, want);
    free(k);
    e = troupe_table_get_wait(fx.tables, "u", "", 0, &(troupe_rows *){NULL});
    ck_assert_err(e, TROUPE_EINVAL);
    assert_msg(e, "key is empty");
    troupe_write_opts wo = {.expires_at_ms = -5};
    e = troupe_table_upsert_wait(fx.tables, "u", "k", 1, DOC, sizeof(DOC), &wo);
    ck_assert_err(e, TROUPE_EINVAL);
    assert_msg(e, "write_opts.expires_at_ms -5 is negative");
    wo = (troupe_write_opts){.sync = (troupe_sync)42};
    e = troupe_table_upsert_wait(fx.tables, "u", "k", 1, DOC, sizeof(DOC), &wo);
    ck_assert_err(e, TROUPE_EINVAL);
    assert_msg(e, "write_opts.sync 42 is no sync mode");

    troupe_txn_opts to = {.max_keys = (size_t)TROUPE_TXN_KEYS_MAX + 1};
    troupe_txn *tx = NULL;
    e = troupe_txn_begin(fx.tables, &to, &tx);
    ck_assert_err(e, TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_errmsg(e), "txn_opts.max_keys"));
    ck_assert_ptr_null(tx);

    troupe_queue_event ev = event_e();
    ev.key_len = TROUPE_QUEUE_ID_MAX + 1; /* the bytes past "k" are not read */
    e = troupe_queue_publish_wait(fx.qs, "q", &ev, TROUPE_SYNC_OFF);
    ck_assert_err(e, TROUPE_EINVAL);
    snprintf(want, sizeof(want), "event key of %d bytes: 1..%d allowed",
             TROUPE_QUEUE_ID_MAX + 1, TROUPE_QUEUE_ID_MAX);
    assert_msg(e, want);
    ev.key_len = 1;
    ev.owner_kind = "order";
    ev.owner_kind_len = 5;
    e = troupe_queue_publish_wait(fx.qs, "q", &ev, TROUPE_SYNC_OFF);
    ck_assert_err(e, TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_errmsg(e), "by halves"));

    /* a storage key of partition 3, given to a queue of one partition */
    ev.owner_kind = NULL;
    ev.owner_kind_len = 0;
    troupe_queue_spec s4 = {"q4", 4, 0, 0};
    ck_assert_ok(troupe_queues_create_wait(fx.qs, &s4));
    char bk[16];
    int i = 0;
    do
        snprintf(bk, sizeof(bk), "k%d", i++);
    while (troupe_queue_partition_of(bk, strlen(bk), 4) != 3);
    ev.key = bk;
    ev.key_len = strlen(bk);
    ck_assert_ok(troupe_queue_publish_wait(fx.qs, "q4", &ev, TROUPE_SYNC_OFF));
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_list_wait(fx.qs, "q4", TROUPE_QUEUE_PENDING, NULL,
                                        0, 10, &pg));
    ck_assert_uint_eq(pg->n, 1);
    e = troupe_queue_ack_wait(fx.qs, "q", pg->items[0].skey,
                              pg->items[0].skey_len, TROUPE_SYNC_OFF);
    ck_assert_err(e, TROUPE_EINVAL);
    assert_msg(e, "storage key names partition 3, the queue has 1");
    troupe_queue_page_destroy(pg);
}
END_TEST

/* ---- blocking twins on a troupe thread --------------------------------- */

enum { K_BLOCK, K_N };

typedef struct block_log {
    atomic_int get_err; /* -1 until set */
    atomic_int ins_err;
    atomic_int ack_err;
    char get_msg[TROUPE_ERRMSG_MAX];
    char ack_msg[TROUPE_ERRMSG_MAX];
    const void *skey;
    size_t skey_len;
} block_log;

static block_log blog;

static void
blog_reset(void)
{
    memset(&blog, 0, sizeof(blog));
    atomic_store(&blog.get_err, -1);
    atomic_store(&blog.ins_err, -1);
    atomic_store(&blog.ack_err, -1);
}

/* The calls a handler or a callback might make, each of which would wait
 * for the thread it runs on. */
static void
block_calls(void)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, "u", "k", 1, &rows);
    snprintf(blog.get_msg, sizeof(blog.get_msg), "%s", troupe_errmsg(e));
    troupe_rows_destroy(rows);
    atomic_store(&blog.ins_err,
                 (int)troupe_table_insert_wait(fx.tables, "u", "k2", 2, DOC,
                                               sizeof(DOC), NULL));
    troupe_err ae = troupe_queue_ack_wait(fx.qs, "q", blog.skey, blog.skey_len,
                                          TROUPE_SYNC_DEFAULT);
    snprintf(blog.ack_msg, sizeof(blog.ack_msg), "%s", troupe_errmsg(ae));
    atomic_store(&blog.ack_err, (int)ae);
    atomic_store(&blog.get_err, (int)e); /* last: the test waits for it */
}

static troupe_err
h_block(troupe_actor *self, void *s, const troupe_msg *m)
{
    (void)self, (void)s, (void)m;
    block_calls();
    return TROUPE_OK;
}

static void
post_block(void *arg, troupe_runtime *rt)
{
    (void)arg, (void)rt;
    block_calls();
}

static const troupe_handler_fn bhs[K_N] = {[K_BLOCK] = h_block};
static const troupe_actor_def bdef = {
    .name = "blocker", .handlers = bhs, .n_handlers = K_N};

static bool
blog_done(void *arg)
{
    (void)arg;
    return atomic_load(&blog.get_err) != -1;
}

/* Each twin refused with EDEADLK, the detail naming it, and the refused
 * insert wrote nothing. */
static void
assert_refused(void)
{
    ck_assert_err(atomic_load(&blog.get_err), TROUPE_EDEADLK);
    ck_assert_ptr_nonnull(strstr(blog.get_msg, "troupe_table_get_wait"));
    ck_assert_err(atomic_load(&blog.ins_err), TROUPE_EDEADLK);
    ck_assert_err(atomic_load(&blog.ack_err), TROUPE_EDEADLK);
    ck_assert_ptr_nonnull(strstr(blog.ack_msg, "troupe_queue_ack_wait"));
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_table_get_wait(fx.tables, "u", "k2", 2, &rows),
                  TROUPE_ENOENT);
}

static void
assert_refused_and_nothing_done(void)
{
    assert_refused();
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(fx.qs, "q", &st));
    ck_assert_uint_eq(st->pending, 1); /* the refused ack did nothing */
    troupe_free(st);
}

/* An actor's handler and a posted callback get EDEADLK at once from
 * table and queue twins, which start nothing; the same calls from the
 * test's own thread work. */
START_TEST(test_wait_twins_in_a_handler_or_post_are_edeadlk)
{
    blog_reset();
    ck_assert_ok(troupe_table_upsert_wait(fx.tables, "u", "k", 1, DOC,
                                          sizeof(DOC), NULL));
    troupe_queue_event ev = event_e();
    ck_assert_ok(
        troupe_queue_publish_wait(fx.qs, "q", &ev, TROUPE_SYNC_DEFAULT));
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_list_wait(fx.qs, "q", TROUPE_QUEUE_PENDING, NULL,
                                        0, 10, &pg));
    ck_assert_uint_eq(pg->n, 1);
    blog.skey = pg->items[0].skey;
    blog.skey_len = pg->items[0].skey_len;

    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.scheduler = 1;
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(fx.rt, &bdef, &so, &a));
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, K_BLOCK, NULL, 0));
    ck_assert_ok(troupe_runtime_send(fx.rt, a, &m));
    ck_assert(ts_wait_until(blog_done, NULL, 10000));
    assert_refused_and_nothing_done();

    const void *skey = blog.skey;
    size_t skey_len = blog.skey_len;
    blog_reset();
    blog.skey = skey;
    blog.skey_len = skey_len;
    ck_assert_ok(troupe_runtime_post(fx.rt, post_block, NULL));
    ck_assert(ts_wait_until(blog_done, NULL, 10000));
    assert_refused_and_nothing_done();

    /* the same calls on this thread */
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(fx.tables, "u", "k", 1, &rows));
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_table_insert_wait(fx.tables, "u", "k2", 2, DOC,
                                          sizeof(DOC), NULL));
    ck_assert_ok(
        troupe_queue_ack_wait(fx.qs, "q", skey, skey_len, TROUPE_SYNC_DEFAULT));
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(fx.qs, "q", &st));
    ck_assert_uint_eq(st->pending, 0);
    troupe_free(st);
    troupe_queue_page_destroy(pg);
}
END_TEST

/* ---- the same on a host's loop (embedded mode) -------------------------- */

typedef struct emb {
    atomic_int created; /* -1 until the create's callback */
    atomic_int tables_stopped;
    atomic_int shut;
} emb;

static void
emb_created(troupe_tables *t, troupe_err err, void *arg)
{
    (void)t;
    atomic_store(&((emb *)arg)->created, (int)err);
}

static void
emb_tables_stopped(troupe_tables *t, void *arg)
{
    (void)t;
    atomic_store(&((emb *)arg)->tables_stopped, 1);
}

static void
emb_shut(troupe_runtime *rt, void *arg)
{
    (void)rt;
    atomic_store(&((emb *)arg)->shut, 1);
}

static bool
emb_is(void *arg)
{
    return atomic_load((atomic_int *)arg) == 1;
}

static bool
emb_created_done(void *arg)
{
    return atomic_load(&((emb *)arg)->created) != -1;
}

/* A post callback on the host's loop is a troupe callback: the twins
 * refuse there with EDEADLK (a queue twin included: the check comes
 * before anything else), and on the host's thread between turns the
 * table's read twin works and shows the refused insert wrote nothing. */
START_TEST(test_wait_twins_in_a_post_on_the_hosts_loop_are_edeadlk)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    open_tables(&loop);
    emb st;
    atomic_store(&st.created, -1);
    atomic_store(&st.tables_stopped, 0);
    atomic_store(&st.shut, 0);
    ck_assert_ok(
        troupe_tables_create(fx.tables, "u", NULL, 0, emb_created, &st));
    ck_assert(ts_run_until(&loop, emb_created_done, &st, 10000));
    ck_assert_ok(atomic_load(&st.created));

    blog_reset(); /* fx.qs stays NULL: the queue twin refuses first */
    ck_assert_ok(troupe_runtime_post(fx.rt, post_block, NULL));
    ck_assert(ts_run_until(&loop, blog_done, NULL, 10000));
    assert_refused();

    ck_assert_ok(troupe_tables_stop(fx.tables, emb_tables_stopped, &st));
    ck_assert(ts_run_until(&loop, emb_is, &st.tables_stopped, 10000));
    troupe_tables_destroy(fx.tables);
    ck_assert_ok(troupe_runtime_shutdown(fx.rt, emb_shut, &st));
    ck_assert(ts_run_until(&loop, emb_is, &st.shut, 10000));
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat)); /* runs here now */
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    close_db();
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

Suite *
errors_suite(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_unknown_table_index_queue_have_codes_and_details);
    tcase_add_test(tc, test_txn_naming_an_unknown_table_is_enotable);
    tcase_add_test(tc, test_invalid_names_say_which_rule);
    tcase_add_test(tc, test_limits_and_options_say_the_size_and_the_field);
    tcase_add_test(tc, test_wait_twins_in_a_handler_or_post_are_edeadlk);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("embedded");
    tcase_set_timeout(te, 60);
    tcase_add_test(te, test_wait_twins_in_a_post_on_the_hosts_loop_are_edeadlk);
    suite_add_tcase(s, te);
    return s;
}
