/*
 * Worker lanes: queue handlers run on the HOST lane, so handlers that
 * block (host code waiting on something slow) never hold up the storage
 * work behind commits and reads. Here every HOST thread is taken by a
 * handler that blocks until the test is done with the storage side, and
 * table commits (a unique index makes each write prepare on a worker), kv
 * reads and index counts (both always on a worker) must all complete
 * meanwhile.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/table.h"
#include "tsupport.h"

#define WORKERS 2 /* per lane */

static struct {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_tables *tables;
    troupe_queues *qs;
    troupe_addr kv, index;
    char *dir;
} L;

static struct {
    _Atomic int live, handled, release;
} H;

static bool
released(void *arg)
{
    (void)arg;
    return atomic_load(&H.release) != 0;
}

static troupe_err
blocking_handler(const troupe_queue_delivery *d, troupe_queue_outcome *out,
                 void *arg)
{
    (void)d;
    (void)arg;
    atomic_fetch_add(&H.live, 1);
    /* host code that takes a long time: until the test lets it go (the
     * deadline only bounds a broken run) */
    ts_wait_until(released, NULL, 60000);
    atomic_fetch_sub(&H.live, 1);
    atomic_fetch_add(&H.handled, 1);
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};

static void
setup(void)
{
    memset(&L, 0, sizeof(L));
    memset(&H, 0, sizeof(H));
    L.dir = ts_tempdir("lanes");
    troupe_runtime_opts o = {.schedulers = 2, .workers = WORKERS};
    ck_assert_ok(troupe_runtime_create(&L.rt, &o));
    ck_assert_ok(troupe_db_open(L.dir, NULL, &L.db));
    ck_assert_ok(troupe_commit_create(L.db, NULL, &L.commit));
    troupe_tables_opts to = {.rt = L.rt, .db = L.db, .commit = L.commit};
    ck_assert_ok(troupe_tables_open(&to, &L.tables));
    troupe_index_spec spec = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(L.tables, "u", &spec, 1));
    troupe_queues_opts qo = {.rt = L.rt, .db = L.db, .commit = L.commit};
    ck_assert_ok(troupe_queues_open(&qo, &L.qs));
    troupe_queue_spec qs = {"q", 1, 0};
    ck_assert_ok(troupe_queues_create_wait(L.qs, &qs));
    troupe_kv_opts ko = {.db = L.db, .commit = L.commit, .cf = "kv"};
    ck_assert_ok(troupe_kv_spawn(L.rt, &ko, NULL, &L.kv));
}

static void
teardown(void)
{
    atomic_store(&H.release, 1);
    ck_assert_ok(troupe_queues_stop_wait(L.qs));
    troupe_queues_destroy(L.qs);
    ck_assert_ok(troupe_tables_stop_wait(L.tables));
    troupe_tables_destroy(L.tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(L.rt));
    troupe_runtime_destroy(L.rt);
    troupe_commit_destroy(L.commit);
    ck_assert_ok(troupe_db_close(L.db));
    ts_rmtree(L.dir);
    free(L.dir);
}

/* Completions of the storage-side requests, from whichever thread. */
static struct {
    _Atomic int writes, reads, counts, errors;
} S;

static void
on_write(troupe_err err, troupe_rows *rows, void *arg)
{
    (void)arg;
    troupe_rows_destroy(rows);
    atomic_fetch_add(err == TROUPE_OK ? &S.writes : &S.errors, 1);
}

static void
on_kv(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)reply;
    (void)arg;
    atomic_fetch_add(err == TROUPE_OK ? &S.reads : &S.errors, 1);
}

static void
on_count(troupe_err err, uint64_t n, void *arg)
{
    (void)n;
    (void)arg;
    atomic_fetch_add(err == TROUPE_OK ? &S.counts : &S.errors, 1);
}

static bool
live_full(void *arg)
{
    (void)arg;
    return atomic_load(&H.live) == WORKERS;
}

#define NOPS 32

static bool
storage_done(void *arg)
{
    (void)arg;
    return atomic_load(&S.errors) > 0 ||
           (atomic_load(&S.writes) == NOPS && atomic_load(&S.reads) == NOPS &&
            atomic_load(&S.counts) == NOPS);
}

static bool
read_seen(void *arg)
{
    return atomic_load(&S.reads) + atomic_load(&S.errors) >= *(int *)arg;
}

static bool
all_handled(void *arg)
{
    return atomic_load(&H.handled) >= *(int *)arg;
}

START_TEST(test_blocked_queue_handlers_never_delay_commits_or_reads)
{
    memset(&S, 0, sizeof(S));
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_kv_put_msg("k", 1, "v", 1, false, &m));
    ck_assert_ok(troupe_runtime_ask(L.rt, L.kv, &m, 60000, on_kv, NULL));
    int one = 1;
    ck_assert(ts_wait_until(read_seen, &one, 10000)); /* for the reads */
    ck_assert_int_eq(atomic_load(&S.errors), 0);
    atomic_store(&S.reads, 0);
    /* more events than HOST threads, each handler blocking */
    troupe_queue_worker_opts wo = {.queue = "q",
                                   .credit = 8,
                                   .handler = blocking_handler,
                                   .timeout_ms = 120000};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_start(L.qs, &wo, &w));
    int nev = 8;
    for (int i = 0; i < nev; i++) {
        char id[16];
        snprintf(id, sizeof(id), "e%d", i);
        troupe_queue_event ev = {.id = id,
                                 .id_len = strlen(id),
                                 .key = id,
                                 .key_len = strlen(id),
                                 .payload = "\x07",
                                 .payload_len = 1,
                                 .time_ms = 0};
        ck_assert_ok(
            troupe_queue_publish_wait(L.qs, "q", &ev, TROUPE_SYNC_OFF));
    }
    ck_assert(ts_wait_until(live_full, NULL, 10000));
    /* every HOST thread is blocked now: storage work must go on */
    for (int i = 0; i < NOPS; i++) {
        char key[16], email[16];
        snprintf(key, sizeof(key), "u%d", i);
        snprintf(email, sizeof(email), "a%d", i);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 1);
        troupe_pack_cstr(&p, "email");
        troupe_pack_cstr(&p, email);
        size_t dlen;
        const void *doc = troupe_pack_data(&p, &dlen);
        ck_assert_ok(troupe_table_upsert(L.tables, "u", key, strlen(key), doc,
                                         dlen, NULL, on_write, NULL));
        troupe_pack_fini(&p);
        ck_assert_ok(troupe_kv_get_msg("k", 1, &m));
        ck_assert_ok(troupe_runtime_ask(L.rt, L.kv, &m, 60000, on_kv, NULL));
        troupe_index_query q = {0};
        ck_assert_ok(
            troupe_tables_count(L.tables, "u", "by_email", &q, on_count, NULL));
    }
    ck_assert_msg(ts_wait_until(storage_done, NULL, 10000),
                  "storage work stalled behind blocked handlers: %d writes, "
                  "%d reads, %d counts of %d (%d errors)",
                  atomic_load(&S.writes), atomic_load(&S.reads),
                  atomic_load(&S.counts), NOPS, atomic_load(&S.errors));
    ck_assert_int_eq(atomic_load(&S.errors), 0);
    /* the handlers were blocked all along */
    ck_assert_int_eq(atomic_load(&H.live), WORKERS);
    ck_assert_int_eq(atomic_load(&H.handled), 0);
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(L.tables, "u", "u7", 2, &rows));
    troupe_rows_destroy(rows);
    atomic_store(&H.release, 1);
    ck_assert(ts_wait_until(all_handled, &nev, 20000));
    troupe_queue_worker_stop_wait(&w);
}
END_TEST

Suite *
lanes_suite(void)
{
    Suite *s = suite_create("lanes");
    TCase *tc = tcase_create("lanes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_blocked_queue_handlers_never_delay_commits_or_reads);
    suite_add_tcase(s, tc);
    return s;
}
