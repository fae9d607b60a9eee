/*
 * Worker pool lanes: what runs on which lane, and that nothing waits on
 * a thread it occupies.
 *
 * HOST: queue handlers run on the HOST lane, so handlers that block (host
 * code waiting on something slow) never hold up the storage work behind
 * commits and reads. Every HOST thread is taken by a handler that blocks
 * until the test is done with the storage side, and table commits (a
 * unique index makes each write prepare on a worker), kv reads and index
 * counts (both always on a worker) must all complete meanwhile.
 *
 * One STORAGE thread: an asynchronous ack and a queue retention pass never
 * hold it for their commits, and a catalog change (a table drop, the tables'
 * stop, a queue drop) never waits on it while holding it: the drop waits for
 * the table actor's write preparations, which queue behind it on that very
 * thread.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tnode.h"
#include "troupe/alloc.h"
#include "troupe/internal/index.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/ttl.h"
#include "troupe/txn.h"
#include "tsupport.h"
#include "twire.h"

static tnode X;

static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};

/* Two schedulers, `workers` STORAGE and `host_workers` HOST threads (0:
 * as many as workers), the lanes' byte budget `work_bytes` (0: the
 * default). */
static void
open_node(unsigned workers, unsigned host_workers, uint64_t work_bytes)
{
    troupe_runtime_opts o = {.workers = workers,
                             .host_workers = host_workers,
                             .work_max_bytes = work_bytes};
    tnode_open(&X, "lanes", &o);
}

static void
close_node(void)
{
    tnode_close(&X);
}

#define WORKERS 2 /* per lane */

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

static void
lanes_setup(void)
{
    memset(&H, 0, sizeof(H));
    open_node(WORKERS, 0, 0);
}

static void
lanes_teardown(void)
{
    atomic_store(&H.release, 1);
    close_node();
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

/* An upsert of {"email": email} under key to "u"; on_write counts it. */
static void
upsert_email(const char *key, const char *email)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "email");
    troupe_pack_cstr(&p, email);
    size_t dlen;
    const void *doc = troupe_pack_data(&p, &dlen);
    ck_assert_ok(troupe_table_upsert(X.tables, "u", key, strlen(key), doc, dlen,
                                     NULL, on_write, NULL));
    troupe_pack_fini(&p);
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
    ck_assert_ok(troupe_runtime_ask(X.rt, X.kv, &m, 60000, on_kv, NULL));
    int one = 1;
    ck_assert(ts_wait_until(read_seen, &one, 10000)); /* for the reads */
    ck_assert_int_eq(atomic_load(&S.errors), 0);
    atomic_store(&S.reads, 0);
    /* more events than HOST threads, each handler blocking */
    troupe_queue_worker_opts wo = {.queue = "q",
                                   .last = 1, /* both partitions */
                                   .credit = 8,
                                   .handler = blocking_handler,
                                   .timeout_ms = 120000};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_create(X.qs, &wo, &w));
    int nev = 8;
    tnode_publish(&X, nev);
    ck_assert(ts_wait_until(live_full, NULL, 10000));
    /* every HOST thread is blocked now: storage work must go on */
    for (int i = 0; i < NOPS; i++) {
        char key[16], email[16];
        snprintf(key, sizeof(key), "u%d", i);
        snprintf(email, sizeof(email), "a%d", i);
        upsert_email(key, email);
        ck_assert_ok(troupe_kv_get_msg("k", 1, &m));
        ck_assert_ok(troupe_runtime_ask(X.rt, X.kv, &m, 60000, on_kv, NULL));
        troupe_index_query q = {0};
        ck_assert_ok(
            troupe_tables_count(X.tables, "u", "by_email", &q, on_count, NULL));
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
    ck_assert_ok(troupe_table_get_wait(X.tables, "u", "u7", 2, &rows));
    troupe_rows_destroy(rows);
    atomic_store(&H.release, 1);
    ck_assert(ts_wait_until(all_handled, &nev, 20000));
    ck_assert_ok(troupe_queue_worker_stop_wait(w));
    troupe_queue_worker_destroy(w);
}
END_TEST

/* ---- one STORAGE thread ---- */

#define ONE_WORKER_BYTES (1u << 20)

static void
one_worker_setup(void)
{
    memset(&H, 0, sizeof(H));
    open_node(1, 0, ONE_WORKER_BYTES);
}

static struct {
    _Atomic int stalled, lane_ran, acked, ack_errors, gate_done;
} G;

/* Holds the pipeline's writer (the callback runs on it) until the test
 * lets go: every later commit waits behind it. */
static void
stall_cb(troupe_err err, void *arg)
{
    (void)err;
    (void)arg;
    atomic_store(&G.stalled, 1);
    ts_wait_until(released, NULL, 60000);
}

static bool
stalled(void *arg)
{
    (void)arg;
    return atomic_load(&G.stalled) != 0;
}

static void
lane_fn(void *arg)
{
    (void)arg;
    atomic_store(&G.lane_ran, 1);
}

static void
lane_done(void *arg, troupe_runtime *rt)
{
    (void)arg;
    (void)rt;
}

static bool
lane_ran(void *arg)
{
    (void)arg;
    return atomic_load(&G.lane_ran) != 0;
}

static void
on_ack(troupe_err err, void *arg)
{
    (void)arg;
    atomic_fetch_add(err == TROUPE_OK ? &G.acked : &G.ack_errors, 1);
}

static bool
acks_in(void *arg)
{
    return atomic_load(&G.acked) + atomic_load(&G.ack_errors) >= *(int *)arg;
}

/* An asynchronous ack never holds a pool thread for its commit: with one
 * STORAGE thread and the commit pipeline held, 64 acks with sync on are
 * taken and a later job on the same lane still runs; none of the acks
 * calls back before its commit; once the pipeline goes on, all 64 are
 * acknowledged and their rows completed. */
START_TEST(test_async_acks_never_hold_the_one_storage_thread)
{
    memset(&G, 0, sizeof(G));
    enum { N = 64 };
    tnode_publish(&X, N);
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_list_wait(X.qs, "q", TROUPE_QUEUE_PENDING, NULL,
                                        0, N, &pg));
    ck_assert_uint_eq(pg->n, N);
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_cf(X.db, "kv", &cf));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_commit_batch(X.commit, &b));
    ck_assert_ok(troupe_batch_put(b, cf, "stall", 5, "x", 1));
    ck_assert_ok(
        troupe_commit_submit(X.commit, &b, TROUPE_SYNC_OFF, stall_cb, NULL));
    ck_assert(ts_wait_until(stalled, NULL, 10000));
    for (size_t i = 0; i < pg->n; i++)
        ck_assert_ok(troupe_queue_ack(X.qs, "q", pg->items[i].skey,
                                      pg->items[i].skey_len, TROUPE_SYNC_ON,
                                      on_ack, NULL));
    troupe_queue_page_destroy(pg);
    ck_assert_ok(troupe_runtime_work(X.rt, lane_fn, lane_done, NULL));
    ck_assert_msg(ts_wait_until(lane_ran, NULL, 10000),
                  "the STORAGE thread is held by an ack waiting for its "
                  "commit");
    ck_assert_int_eq(atomic_load(&G.acked) + atomic_load(&G.ack_errors), 0);
    atomic_store(&H.release, 1);
    int want = N;
    ck_assert(ts_wait_until(acks_in, &want, 20000));
    ck_assert_int_eq(atomic_load(&G.ack_errors), 0);
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(X.qs, "q", &st));
    ck_assert_uint_eq(st->pending, 0);
    ck_assert_uint_eq(st->completed, N);
    troupe_free(st);
}
END_TEST

static int64_t acked_at;

static bool
clock_past_acks(void *arg)
{
    (void)arg;
    return troupe_now_ms() > acked_at;
}

static bool
qpass_ended(void *arg)
{
    return troupe_ttl_queue_passes(X.ttl) >= *(uint64_t *)arg;
}

/* Queue retention never holds a pool thread for its commit: with one
 * STORAGE thread and the pipeline held, a retention pass scans and
 * submits its deletions, a later lane job still runs, and the pass's
 * result (rows purged) is counted only once its commit is done. */
START_TEST(test_queue_retention_never_holds_the_one_storage_thread)
{
    memset(&G, 0, sizeof(G));
    enum { N = 8 };
    tnode_publish(&X, N);
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_list_wait(X.qs, "q", TROUPE_QUEUE_PENDING, NULL,
                                        0, N, &pg));
    ck_assert_uint_eq(pg->n, N);
    for (size_t i = 0; i < pg->n; i++)
        ck_assert_ok(troupe_queue_ack_wait(X.qs, "q", pg->items[i].skey,
                                           pg->items[i].skey_len,
                                           TROUPE_SYNC_OFF));
    troupe_queue_page_destroy(pg);
    acked_at = troupe_now_ms();
    ck_assert(ts_wait_until(clock_past_acks, NULL, 10000)); /* retention 0 */
    troupe_ttl_opts tto = {
        .rt = X.rt, .queues = X.qs, .interval_ms = 3600000 /* kicks only */};
    ck_assert_ok(troupe_ttl_create(&tto, &X.ttl));
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_cf(X.db, "kv", &cf));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_commit_batch(X.commit, &b));
    ck_assert_ok(troupe_batch_put(b, cf, "stall", 5, "x", 1));
    ck_assert_ok(
        troupe_commit_submit(X.commit, &b, TROUPE_SYNC_OFF, stall_cb, NULL));
    ck_assert(ts_wait_until(stalled, NULL, 10000));
    uint64_t passes = troupe_ttl_queue_passes(X.ttl) + 1;
    ck_assert_ok(troupe_ttl_kick(X.ttl));
    ck_assert_ok(troupe_runtime_work(X.rt, lane_fn, lane_done, NULL));
    ck_assert_msg(ts_wait_until(lane_ran, NULL, 10000),
                  "the STORAGE thread is held by a retention pass waiting for "
                  "its commit");
    ck_assert_uint_eq(troupe_ttl_queue_purged(X.ttl), 0);
    atomic_store(&H.release, 1);
    ck_assert(ts_wait_until(qpass_ended, &passes, 20000));
    ck_assert_uint_eq(troupe_ttl_queue_purged(X.ttl), N);
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(X.qs, "q", &st));
    ck_assert_uint_eq(st->completed, 0);
    troupe_free(st);
}
END_TEST

static void
gate_fn(void *arg)
{
    (void)arg;
    atomic_store(&G.lane_ran, 1);
    ts_wait_until(released, NULL, 60000);
}

static void
gate_done(void *arg, troupe_runtime *rt)
{
    (void)arg;
    (void)rt;
    atomic_store(&G.gate_done, 1);
}

static bool
gate_over(void *arg)
{
    (void)arg;
    return atomic_load(&G.gate_done) != 0;
}

/* A transaction's reads declare what their jobs hold to the STORAGE
 * lane: while a job holds the lane's whole byte budget, a get and a scan
 * are refused with EFULL at the call (and work again once it is gone),
 * instead of queueing without bound. */
START_TEST(test_txn_reads_declare_their_bytes_to_the_lane)
{
    memset(&G, 0, sizeof(G));
    ck_assert_ok(troupe_runtime_work_in(
        X.rt, TROUPE_LANE_STORAGE, ONE_WORKER_BYTES, gate_fn, gate_done, NULL));
    ck_assert(ts_wait_until(lane_ran, NULL, 10000));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(X.tables, NULL, &tx));
    ck_assert_err(troupe_txn_get(tx, "t", "k", 1, on_write, NULL),
                  TROUPE_EFULL);
    troupe_scan_opts so = {.limit = 10};
    ck_assert_err(troupe_txn_scan(tx, "t", &so, on_write, NULL), TROUPE_EFULL);
    atomic_store(&H.release, 1);
    troupe_txn_destroy(tx);
    ck_assert(ts_wait_until(gate_over, NULL, 10000));
    ck_assert_ok(troupe_txn_begin(X.tables, NULL, &tx));
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_get_wait(tx, "t", "k", 1, &rows), TROUPE_ENOENT);
    troupe_txn_destroy(tx);
}
END_TEST

/* ---- catalog changes on one STORAGE thread ---- */

static void
one_storage_setup(void)
{
    memset(&H, 0, sizeof(H));
    open_node(1, 1, 0);
}

/* The gate (gate_fn above) holds the one STORAGE thread until the test
 * releases it, so that what the test submits next queues behind it in a
 * known order. */
static void
gate_close(void)
{
    memset(&G, 0, sizeof(G));
    ck_assert_ok(troupe_runtime_work(X.rt, gate_fn, gate_done, NULL));
    ck_assert(ts_wait_until(lane_ran, NULL, 10000));
}

/* Callbacks of the asynchronous catalog calls, from whichever thread. */
static struct {
    _Atomic int dropped, stopped;
    _Atomic troupe_err drop_err;
} D;

static void
on_drop(troupe_tables *t, troupe_err err, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&D.drop_err, err);
    atomic_fetch_add(&D.dropped, 1);
}

static void
on_tables_stop(troupe_tables *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&D.stopped, 1);
}

#define NWRITES 16

/* 16 upserts to "u", handled by its actor before anything a drop
 * submitted earlier sends it (the drop has not run yet: the gate holds
 * the lane); each prepares on the lane (unique index), behind the drop. */
static void
upsert_u(void)
{
    for (int i = 0; i < NWRITES; i++) {
        char key[16], email[16];
        snprintf(key, sizeof(key), "w%d", i);
        snprintf(email, sizeof(email), "w%d@x", i);
        upsert_email(key, email);
    }
    /* Asks from this thread reach the actor in order and the stats need
     * no worker: once they are answered, so have the upserts been taken
     * (their preparations queued on the lane). */
    troupe_tables_stats *st = NULL;
    ck_assert_ok(troupe_tables_stats_wait(X.tables, &st));
    troupe_tables_stats_destroy(st);
    ck_assert_int_eq(atomic_load(&S.writes) + atomic_load(&S.errors), 0);
}

static bool
drop_and_writes_answered(void *arg)
{
    int want_stops = *(int *)arg;
    return atomic_load(&D.dropped) == 1 &&
           atomic_load(&S.writes) + atomic_load(&S.errors) == NWRITES &&
           atomic_load(&D.stopped) == want_stops;
}

static void
expect_drop_and_writes(int want_stops)
{
    ck_assert_msg(ts_wait_until(drop_and_writes_answered, &want_stops, 10000),
                  "a catalog change waits on the STORAGE thread it holds: "
                  "drop answered %d, %d of %d writes answered, %d stops",
                  atomic_load(&D.dropped),
                  atomic_load(&S.writes) + atomic_load(&S.errors), NWRITES,
                  atomic_load(&D.stopped));
    ck_assert_err(atomic_load(&D.drop_err), TROUPE_OK);
    ck_assert_int_eq(atomic_load(&S.writes), NWRITES);
    ck_assert_int_eq(atomic_load(&S.errors), 0);
}

/* With one STORAGE thread, a table drop queued behind a job holding that
 * thread, and 16 writes whose preparations queue behind the drop: the
 * drop waits for the table actor to quiesce, which needs those
 * preparations; it must free the thread while it waits. */
START_TEST(test_ddl_with_one_storage_worker_never_waits_on_itself)
{
    memset(&S, 0, sizeof(S));
    memset(&D, 0, sizeof(D));
    gate_close();
    ck_assert_ok(troupe_tables_drop(X.tables, "u", on_drop, NULL));
    upsert_u();
    atomic_store(&H.release, 1);
    expect_drop_and_writes(0);
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_table_get_wait(X.tables, "u", "w1", 2, &rows),
                  TROUPE_ENOTABLE);
    ck_assert_ptr_null(rows);
    /* the lane is free: catalog changes and writes go on */
    ck_assert_ok(troupe_tables_create_wait(X.tables, "u2", NULL, 0));
    ck_assert_ok(troupe_tables_drop_wait(X.tables, "u2"));
}
END_TEST

static troupe_err
acking_handler(const troupe_queue_delivery *d, troupe_queue_outcome *out,
               void *arg)
{
    (void)d;
    (void)arg;
    atomic_fetch_add(&H.handled, 1);
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

/* The same with the tables' stop queued behind the drop, and a queue drop
 * (its partitions having delivered and settled 8 events) behind both:
 * every one of them completes, in order, on the one STORAGE thread. */
START_TEST(test_tables_stop_and_queue_drop_with_one_storage_worker_complete)
{
    memset(&S, 0, sizeof(S));
    memset(&D, 0, sizeof(D));
    troupe_queue_worker_opts wo = {.queue = "q",
                                   .last = 1,
                                   .credit = 4,
                                   .handler = acking_handler,
                                   .sync = TROUPE_SYNC_ON};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_create(X.qs, &wo, &w));
    int nev = 8;
    tnode_publish(&X, nev);
    ck_assert(ts_wait_until(all_handled, &nev, 10000));
    ck_assert_ok(troupe_queue_worker_stop_wait(w));
    troupe_queue_worker_destroy(w);
    gate_close();
    ck_assert_ok(troupe_tables_drop(X.tables, "u", on_drop, NULL));
    upsert_u();
    ck_assert_ok(troupe_tables_stop(X.tables, on_tables_stop, NULL));
    X.tables_stopped = true;
    atomic_store(&H.release, 1);
    /* queued behind the table drop (one order of catalog changes) */
    ck_assert_ok(troupe_queues_drop_wait(X.qs, "q"));
    expect_drop_and_writes(1);
    troupe_queue_info *qi = NULL;
    size_t n = 1;
    ck_assert_ok(troupe_queues_list(X.qs, &qi, &n));
    ck_assert_uint_eq(n, 0);
    troupe_free(qi);
    ck_assert_err(troupe_tables_create_wait(X.tables, "v", NULL, 0),
                  TROUPE_ESTATE);
}
END_TEST

/* ---- embedded: scheduler 0 on a loop the host has not run yet ---- */

static bool embedded_done;

static bool
is_embedded_done(void *arg)
{
    (void)arg;
    return embedded_done;
}

static void
on_embedded_tables_stop(troupe_tables *t, void *arg)
{
    (void)t;
    (void)arg;
    embedded_done = true;
}

static void
on_embedded_shutdown(troupe_runtime *rt, void *arg)
{
    (void)rt;
    (void)arg;
    embedded_done = true;
}

static bool
queues_stopped(void *arg)
{
    (void)arg;
    return atomic_load(&D.stopped) != 0;
}

static void *
queues_stop_thread(void *arg)
{
    troupe_err e = troupe_queues_stop_wait(arg);
    atomic_store(&D.drop_err, e); /* asserted on the test's thread */
    atomic_store(&D.stopped, 1);
    return NULL;
}

/* The blocking creates need no turn of scheduler 0: from the host's
 * thread, before its loop ever runs, they complete (a drop or a stop
 * waits for actors, some of which live on scheduler 0). */
START_TEST(test_ddl_wait_forms_complete_before_the_host_runs_its_loop)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    char *dir = ts_tempdir("lanes-embedded");
    troupe_runtime *rt = NULL;
    troupe_runtime_opts o = {.loop = &loop, .schedulers = 2, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, NULL, &db));
    troupe_commit *commit = NULL;
    ck_assert_ok(troupe_commit_create(db, NULL, &commit));
    troupe_catalog *cat = NULL;
    troupe_catalog_opts co = {.rt = rt, .db = db};
    ck_assert_ok(troupe_catalog_open(&co, &cat));
    troupe_tables *tables = NULL;
    troupe_tables_opts to = {.catalog = cat, .commit = commit};
    ck_assert_ok(troupe_tables_open(&to, &tables));
    troupe_queues *qs = NULL;
    troupe_queues_opts qo = {.catalog = cat, .commit = commit};
    ck_assert_ok(troupe_queues_open(&qo, &qs));
    troupe_index_spec by_email = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(tables, "e", &by_email, 1));
    ck_assert_err(troupe_tables_create_wait(tables, "e", NULL, 0),
                  TROUPE_EEXIST);
    ck_assert_ok(troupe_tables_create_wait(tables, "e", &by_email, 1));
    troupe_queue_spec qspec = {"eq", 4, 0, 0};
    ck_assert_ok(troupe_queues_create_wait(qs, &qspec));
    ck_assert_err(troupe_queues_create_wait(qs, &qspec), TROUPE_EEXIST);
    /* now the host runs its loop while another thread stops the queues */
    memset(&D, 0, sizeof(D));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, queues_stop_thread, qs), 0);
    ck_assert(ts_run_until(&loop, queues_stopped, NULL, 10000));
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_err(atomic_load(&D.drop_err), TROUPE_OK);
    troupe_queues_destroy(qs);
    embedded_done = false;
    ck_assert_ok(troupe_tables_stop(tables, on_embedded_tables_stop, NULL));
    ck_assert(ts_run_until(&loop, is_embedded_done, NULL, 10000));
    troupe_tables_destroy(tables);
    embedded_done = false;
    ck_assert_ok(troupe_runtime_shutdown(rt, on_embedded_shutdown, NULL));
    ck_assert(ts_run_until(&loop, is_embedded_done, NULL, 10000));
    ck_assert_ok(troupe_catalog_stop_wait(cat));
    troupe_catalog_destroy(cat);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    ck_assert_ok(troupe_db_close(db));
    ck_assert_int_eq(ts_loop_close(&loop), 0);
    ts_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- the wrong order: the runtime shut down before the tables ---- */

static struct {
    _Atomic int writes;
    _Atomic int write_err;
} W;

static void
on_wrong_order_write(troupe_err err, troupe_rows *rows, void *arg)
{
    (void)arg;
    troupe_rows_destroy(rows);
    atomic_store(&W.write_err, err);
    atomic_fetch_add(&W.writes, 1);
}

static _Atomic int derived;

/* A function index that emits nothing and counts its calls: once it ran
 * for a write, the actor has accepted that write. */
static troupe_err
count_fn(void *ctx, const void *doc, size_t doc_len, const void *pk,
         size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    (void)ctx;
    (void)doc;
    (void)doc_len;
    (void)pk;
    (void)pk_len;
    (void)emit;
    (void)emit_ctx;
    atomic_fetch_add(&derived, 1);
    return TROUPE_OK;
}

static bool
derived_twice(void *arg)
{
    (void)arg;
    return atomic_load(&derived) >= 2;
}

static bool
wrong_order_dropped(void *arg)
{
    (void)arg;
    return atomic_load(&D.dropped) > 0;
}

static bool
wrong_order_written(void *arg)
{
    (void)arg;
    return atomic_load(&W.writes) > 0;
}

/* A drop waits for its table's actor to go idle, which a write held in
 * the pipeline keeps it from. When the runtime shuts down first (the
 * wrong order: the tables should be stopped before it), the actor stops
 * busy: the drop completes, once, with ECLOSED, drops nothing, and the
 * table with its row is there at the next open. */
START_TEST(test_drop_when_the_runtime_stops_first_completes_with_eclosed)
{
    memset(&W, 0, sizeof(W));
    memset(&D, 0, sizeof(D));
    memset(&G, 0, sizeof(G));
    memset(&H, 0, sizeof(H));
    char *dir = ts_tempdir("lanes-wrong-order");
    troupe_runtime *rt = NULL;
    troupe_runtime_opts o = {.schedulers = 2};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, NULL, &db));
    troupe_commit *commit = NULL;
    ck_assert_ok(troupe_commit_create(db, NULL, &commit));
    troupe_catalog *cat = NULL;
    troupe_catalog_opts co = {.rt = rt, .db = db};
    ck_assert_ok(troupe_catalog_open(&co, &cat));
    troupe_index_fns *fns = NULL;
    ck_assert_ok(troupe_index_fns_create(&fns));
    ck_assert_ok(troupe_index_register_fn(fns, "count", count_fn, NULL));
    atomic_store(&derived, 0);
    troupe_tables *tables = NULL;
    troupe_tables_opts to = {.catalog = cat, .commit = commit, .fns = fns};
    ck_assert_ok(troupe_tables_open(&to, &tables));
    troupe_index_spec by_count = {.name = "by_count", .fn_name = "count"};
    ck_assert_ok(troupe_tables_create_wait(tables, "w", &by_count, 1));
    ck_assert_ok(troupe_table_upsert_wait(tables, "w", "k", 1,
                                          "\x81\xa1"
                                          "a\x01",
                                          4, NULL));
    /* hold the pipeline, then a write the actor waits on */
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_cf_create(db, "stall", &cf));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_commit_batch(commit, &b));
    ck_assert_ok(troupe_batch_put(b, cf, "stall", 5, "x", 1));
    ck_assert_ok(
        troupe_commit_submit(commit, &b, TROUPE_SYNC_OFF, stall_cb, NULL));
    ck_assert(ts_wait_until(stalled, NULL, 10000));
    ck_assert_ok(troupe_table_upsert(tables, "w", "k2", 2,
                                     "\x81\xa1"
                                     "a\x02",
                                     4, NULL, on_wrong_order_write, NULL));
    /* the actor has the write (its derivation ran) before the drop asks it
     * to quiesce: the write then waits in the held pipeline */
    ck_assert(ts_wait_until(derived_twice, NULL, 10000));
    ck_assert_ok(troupe_tables_drop(tables, "w", on_drop, NULL));
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    ck_assert_msg(ts_wait_until(wrong_order_dropped, NULL, 10000),
                  "the drop never completed");
    ck_assert_err(atomic_load(&D.drop_err), TROUPE_ECLOSED);
    atomic_store(&H.release, 1);
    ck_assert(ts_wait_until(wrong_order_written, NULL, 10000));
    /* The held write is still in the pipeline, and its completion uses
     * the tables: the pipeline goes first (its destroy writes what it
     * accepted and runs the completions), then the tables. */
    troupe_commit_destroy(commit);
    ck_assert_ok(troupe_tables_stop_wait(tables));
    troupe_tables_destroy(tables);
    ck_assert_ok(troupe_catalog_stop_wait(cat));
    troupe_catalog_destroy(cat);
    troupe_runtime_destroy(rt);
    ck_assert_ok(troupe_db_close(db));
    ck_assert_int_eq(atomic_load(&D.dropped), 1);
    /* reopened, the table and its row are there */
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    ck_assert_ok(troupe_db_open(dir, NULL, &db));
    ck_assert_ok(troupe_commit_create(db, NULL, &commit));
    co = (troupe_catalog_opts){.rt = rt, .db = db};
    ck_assert_ok(troupe_catalog_open(&co, &cat));
    to.catalog = cat;
    to.commit = commit;
    ck_assert_ok(troupe_tables_open(&to, &tables));
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(tables, "w", "k", 1, &rows));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
    ck_assert_ok(troupe_tables_stop_wait(tables));
    troupe_tables_destroy(tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    ck_assert_ok(troupe_catalog_stop_wait(cat));
    troupe_catalog_destroy(cat);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    ck_assert_ok(troupe_db_close(db));
    troupe_index_fns_destroy(fns);
    ts_rmtree(dir);
    free(dir);
}
END_TEST

Suite *
lanes_suite(void)
{
    Suite *s = suite_create("lanes");
    TCase *tc = tcase_create("lanes");
    tcase_add_checked_fixture(tc, lanes_setup, lanes_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_blocked_queue_handlers_never_delay_commits_or_reads);
    suite_add_tcase(s, tc);
    TCase *one = tcase_create("one worker");
    tcase_add_checked_fixture(one, one_worker_setup, lanes_teardown);
    tcase_set_timeout(one, 120);
    tcase_add_test(one, test_async_acks_never_hold_the_one_storage_thread);
    tcase_add_test(one,
                   test_queue_retention_never_holds_the_one_storage_thread);
    tcase_add_test(one, test_txn_reads_declare_their_bytes_to_the_lane);
    suite_add_tcase(s, one);
    TCase *ddl = tcase_create("ddl");
    tcase_add_checked_fixture(ddl, one_storage_setup, lanes_teardown);
    tcase_set_timeout(ddl, 60);
    tcase_add_test(ddl, test_ddl_with_one_storage_worker_never_waits_on_itself);
    tcase_add_test(
        ddl, test_tables_stop_and_queue_drop_with_one_storage_worker_complete);
    suite_add_tcase(s, ddl);
    TCase *wo = tcase_create("wrong order");
    tcase_set_timeout(wo, 60);
    tcase_add_test(
        wo, test_drop_when_the_runtime_stops_first_completes_with_eclosed);
    suite_add_tcase(s, wo);
    TCase *emb = tcase_create("embedded");
    tcase_set_timeout(emb, 60);
    tcase_add_test(emb,
                   test_ddl_wait_forms_complete_before_the_host_runs_its_loop);
    suite_add_tcase(s, emb);
    return s;
}
