/*
 * The coordinator, embedded, synced, with no-op branches (a callback
 * target answering SUCCESS): transactions per second of each mode under
 * load, and a two-step saga's latency with one submitter.
 *
 *   bench saga_2step_sync <v> sagas/s peer commit_3x_sync <v> ratio <r>
 *   bench msg_1step_sync <v> msgs/s peer commit_3x_msg_sync <v> ratio <r>
 *   bench tcc_2branch_sync <v> txns/s peer commit_6x_sync <v> ratio <r>
 *   bench saga_2step_nosync <v> sagas/s peer commit_3x_nosync <v> ratio <r>
 *   bench saga_2step_p50_us <v> us peer commit_1x_p50_us <v> ratio <r>
 *   bench saga_2step_p99_us <v> us peer commit_1x_p99_us <v> ratio <r>
 *   bench workflow_3step_sync <v> workflows/s
 *         peer saga_2step_sync <v> ratio <r>
 *   bench xa_2branch_sync <v> txns/s peer txn_2row_sync <v> ratio <r>
 *
 * Throughput. CONC (100) threads each run their share of BENCH_SAGAS
 * (4000) transactions back to back, each call returning once its change
 * is committed; the figure counts from the first call to the moment
 * every transaction is final (the main thread then reads each one's
 * stored status, in order, until all have succeeded).
 *   saga_2step_sync   troupe_saga_submit_wait of two steps.
 *   msg_1step_sync    troupe_msg_prepare_wait of one step with its
 *                     query-back call (a grace of 60 s: never queried
 *                     back here), then troupe_gtx_submit_wait.
 *   tcc_2branch_sync  troupe_tcc_prepare_wait, two
 *                     troupe_tcc_register_wait, troupe_gtx_submit_wait
 *                     (the two confirms then succeed).
 * Each has its limit for this durability as the peer: CONC threads
 * submitting straight to the commit pipeline the number of synced state
 * writes the coordinator makes per transaction (shard.c commits the
 * document at every transition), each write one document of the size
 * the coordinator stored for that mode (read back from troupe.gtx after
 * the first rep; printed):
 *   saga: 3  the submit with step 1 dispatched, step 2 dispatched,
 *            succeeded;
 *   msg:  3  the prepare, the submit with the step dispatched,
 *            succeeded;
 *   tcc:  6  the prepare, each register (2), the submit with confirm 1
 *            dispatched, confirm 2 dispatched, succeeded.
 *   saga_2step_nosync the saga with troupe_coord_opts.sync OFF (every
 *                     transition in the page cache), beside
 *                     commit_3x_nosync: the same 3 writes unsynced.
 *   workflow_3step_sync troupe_workflow_submit_wait of a workflow whose C
 *                     function runs three steps, each with a
 *                     compensation (never run) and a no-op action, beside
 *                     saga_2step_sync measured again in the same rep (the
 *                     cost of replayed runs over a saga's calls): 5
 *                     synced writes (the submit with the first run, each
 *                     registration with the previous step's result, the
 *                     last result with the end) and 4 runs.
 *   xa_2branch_sync   troupe_xa_begin_wait, two troupe_xa_branch_wait
 *                     (each a troupe transaction writing one row, of
 *                     tables xa_a and xa_b, prepared under its xid),
 *                     troupe_gtx_submit_wait (the coordinator then
 *                     commits both), beside txn_2row_sync: CONC threads
 *                     each committing one troupe transaction (synced)
 *                     that writes the same two rows: the cost of
 *                     distributing it.
 *
 * Latency. One thread submits BENCH_LAT_SAGAS (2000) two-step sagas one
 * after the other; a sample is the time from the submit call to the
 * moment the saga's final state is durable: the second step's target
 * posts a semaphore the submitter waits on, then the submitter polls the
 * commit pipeline's completed-batch counter (a relaxed load, every 20 us
 * with 1 us timer slack, for the one write left) until the saga's three
 * writes are done, and checks the stored status is succeed (outside the
 * sample). Nothing else writes to that pipeline meanwhile. The peer: one
 * synced commit of a saga's document, submitted and waited for
 * BENCH_LAT_SAGAS times by one thread; its ratio says how many synced
 * writes deep a saga's path is.
 *
 * Figures are medians over BENCH_REPS (5), the p50 and p99 those of
 * each rep's samples; a fresh database per side and rep. argv[1] runs
 * only the figures whose name contains it. docs/performance.md,
 * "Coordinator".
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/workflow.h"
#include "troupe/xa.h"

#define CONC 100
#define DOC_MAX 4096
#define LAT_MAX 100000

static const char *only;

static int
want(const char *name)
{
    return only == NULL || strstr(name, only) != NULL;
}

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "bench_coord: %s: %s (%s)\n", what, troupe_err_name(e),
            troupe_errmsg(e));
    exit(1);
}

static troupe_outcome
noop(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)t;
    (void)r;
    (void)arg;
    return TROUPE_OUTCOME_SUCCESS;
}

/* The latency run's last step: tells the submitter its final write is
 * the one left. */
static troupe_outcome
last(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)t;
    (void)r;
    sem_post(arg);
    return TROUPE_OUTCOME_SUCCESS;
}

typedef struct node {
    char dir[4096];
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_target *t, *t_last;
    troupe_workflow *wf;
    troupe_coord *coord;
    sem_t last_done;
} node;

/* A no-op step of the workflow. */
static troupe_outcome
wf_noop(troupe_wf *wf, const char *bid, void *arg)
{
    (void)wf;
    (void)bid;
    (void)arg;
    return TROUPE_OUTCOME_SUCCESS;
}

/* The workflow: three steps with their compensations. */
static troupe_outcome
wf3(troupe_wf *wf, const uint8_t *in, size_t len, void *arg)
{
    (void)in;
    (void)len;
    (void)arg;
    static const troupe_gtx_call undo = {"noop", "\x81\xa1n\x02", 4};
    static const char *names[3] = {"reserve", "charge", "ship"};
    for (int i = 0; i < 3; i++)
        if (troupe_wf_step(wf, names[i], &undo, wf_noop, NULL, NULL, NULL) !=
            TROUPE_OK)
            return TROUPE_OUTCOME_ONGOING;
    return TROUPE_OUTCOME_SUCCESS;
}

/* A runtime, a database and its pipeline; with coord the tables, the
 * two targets, the workflow and a coordinator whose transitions are
 * written with sync. */
static void
node_open(node *n, bool coord, troupe_sync sync)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(n->dir, sizeof(n->dir), "%s/troupe-bench-coord-XXXXXX",
             tmp ? tmp : "/tmp");
    if (mkdtemp(n->dir) == NULL)
        die("mkdtemp", TROUPE_ESYS);
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2, .host_workers = 2};
    troupe_err e;
    if ((e = troupe_runtime_create(&n->rt, &ro)) != TROUPE_OK ||
        (e = troupe_db_open(n->dir, NULL, &n->db)) != TROUPE_OK ||
        (e = troupe_commit_create(n->db, NULL, &n->commit)) != TROUPE_OK)
        die("open", e);
    if (!coord)
        return;
    sem_init(&n->last_done, 0, 0);
    troupe_catalog_opts co = {.rt = n->rt, .db = n->db};
    troupe_tables_opts to = {.commit = n->commit};
    troupe_target_opts tg = {.name = "noop", .fn = noop, .credit = 1024};
    troupe_target_opts tl = {
        .name = "last", .fn = last, .arg = &n->last_done, .credit = 1024};
    if ((e = troupe_catalog_open(&co, &n->cat)) != TROUPE_OK ||
        (to.catalog = n->cat,
         (e = troupe_tables_open(&to, &n->tables)) != TROUPE_OK) ||
        (e = troupe_target_create(n->rt, &tg, &n->t)) != TROUPE_OK ||
        (e = troupe_target_create(n->rt, &tl, &n->t_last)) != TROUPE_OK)
        die("open tables", e);
    troupe_workflow_def wd = {.name = "wf3", .fn = wf3, .credit = 1024};
    if ((e = troupe_workflow_create(n->rt, &wd, &n->wf)) != TROUPE_OK)
        die("workflow", e);
    if ((e = troupe_tables_create_wait(n->tables, "xa_a", NULL, 0)) !=
            TROUPE_OK ||
        (e = troupe_tables_create_wait(n->tables, "xa_b", NULL, 0)) !=
            TROUPE_OK)
        die("xa tables", e);
    troupe_coord_opts cop = {.rt = n->rt, .tables = n->tables, .sync = sync};
    if ((e = troupe_coord_open_wait(&cop, &n->coord)) != TROUPE_OK)
        die("coord open", e);
}

static void
node_close(node *n)
{
    if (n->coord != NULL) {
        troupe_coord_stop_wait(n->coord);
        troupe_coord_destroy(n->coord);
        troupe_target_stop_wait(n->t);
        troupe_target_destroy(n->t);
        troupe_target_stop_wait(n->t_last);
        troupe_target_destroy(n->t_last);
        troupe_workflow_stop_wait(n->wf);
        troupe_workflow_destroy(n->wf);
        troupe_tables_stop_wait(n->tables);
        troupe_tables_destroy(n->tables);
        sem_destroy(&n->last_done);
    }
    troupe_runtime_shutdown_wait(n->rt);
    if (n->cat != NULL) {
        troupe_catalog_stop_wait(n->cat);
        troupe_catalog_destroy(n->cat);
    }
    troupe_runtime_destroy(n->rt);
    troupe_commit_destroy(n->commit);
    troupe_db_close(n->db);
    bench_rmtree(n->dir);
    memset(n, 0, sizeof(*n));
}

/* ---- the coordinator's side ---- */

typedef enum flow { F_SAGA, F_MSG, F_TCC, F_WF, F_XA, F_TXN } flow;

typedef struct worker {
    node *n;
    flow f;
    int id, count, writes;
    size_t doc_len;
    troupe_sync sync;
    pthread_t th;
    troupe_cf *cf;
    sem_t done;
    _Atomic troupe_err err;
} worker;

static void
gid_of(char *buf, size_t cap, int thread, int i)
{
    snprintf(buf, cap, "b-%03d-%06d", thread, i);
}

static const troupe_saga_step saga_steps[2] = {
    {{"noop", "\x81\xa1n\x01", 4}, {"noop", "\x81\xa1n\x02", 4}},
    {{"noop", "\x81\xa1n\x03", 4}, {"noop", "\x81\xa1n\x04", 4}}};

/* The tables of the xa flows (the node's, set by flow_rep). */
static troupe_tables *xa_tables;

/* One transaction of flow f, to the return of its last call. */
static void
run_one(troupe_coord *c, flow f, const char *gid)
{
    static const troupe_gtx_call step = {"noop", "\x81\xa1n\x01", 4};
    static const troupe_gtx_call query = {"noop", NULL, 0};
    static const troupe_gtx_call confirm[2] = {{"noop", "\x81\xa1n\x01", 4},
                                               {"noop", "\x81\xa1n\x02", 4}};
    static const troupe_gtx_call cancel[2] = {{"noop", "\x81\xa1n\x03", 4},
                                              {"noop", "\x81\xa1n\x04", 4}};
    size_t len = strlen(gid);
    troupe_err e = TROUPE_OK;
    char bid[8];
    switch (f) {
    case F_SAGA:
        e = troupe_saga_submit_wait(c, gid, len, saga_steps, 2, NULL);
        break;
    case F_MSG:
        if ((e = troupe_msg_prepare_wait(c, gid, len, &step, 1, &query,
                                         60000)) == TROUPE_OK)
            e = troupe_gtx_submit_wait(c, gid, len);
        break;
    case F_TCC:
        if ((e = troupe_tcc_prepare_wait(c, gid, len)) != TROUPE_OK)
            break;
        for (int b = 0; b < 2 && e == TROUPE_OK; b++)
            e = troupe_tcc_register_wait(c, gid, len, &confirm[b], &cancel[b],
                                         bid);
        if (e == TROUPE_OK)
            e = troupe_gtx_submit_wait(c, gid, len);
        break;
    case F_WF:
        e = troupe_workflow_submit_wait(c, gid, len, "wf3", "in", 2);
        break;
    case F_XA:
        e = troupe_xa_begin_wait(c, gid, len);
        for (int b = 0; b < 2 && e == TROUPE_OK; b++) {
            troupe_txn *tx = NULL;
            if ((e = troupe_txn_begin(xa_tables, NULL, &tx)) == TROUPE_OK &&
                (e = troupe_txn_upsert(tx, b ? "xa_b" : "xa_a", gid, len,
                                       "\x81\xa1v\x01", 4, NULL)) == TROUPE_OK)
                e = troupe_xa_branch_wait(c, gid, len, tx, bid);
            troupe_txn_destroy(tx);
        }
        if (e == TROUPE_OK)
            e = troupe_gtx_submit_wait(c, gid, len);
        break;
    case F_TXN: { /* the peer: the same two rows in one transaction */
        troupe_txn *tx = NULL;
        if ((e = troupe_txn_begin(xa_tables, NULL, &tx)) == TROUPE_OK)
            e = troupe_txn_upsert(tx, "xa_a", gid, len, "\x81\xa1v\x01", 4,
                                  NULL);
        if (e == TROUPE_OK)
            e = troupe_txn_upsert(tx, "xa_b", gid, len, "\x81\xa1v\x01", 4,
                                  NULL);
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, TROUPE_SYNC_ON);
        troupe_txn_destroy(tx);
        break;
    }
    }
    if (e != TROUPE_OK)
        die("submit", e);
}

static void *
flow_main(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < w->count; i++) {
        char gid[32];
        gid_of(gid, sizeof(gid), w->id, i);
        run_one(w->n->coord, w->f, gid);
    }
    return NULL;
}

/* Waits until gid's stored status is succeed. */
static void
wait_final(troupe_coord *c, const char *gid)
{
    for (;;) {
        troupe_gtx_info in;
        troupe_err e = troupe_gtx_query_wait(c, gid, strlen(gid), &in);
        if (e != TROUPE_OK)
            die("query", e);
        if (in.status == TROUPE_GTX_SUCCEED)
            return;
        if (in.status == TROUPE_GTX_FAILED)
            die("a transaction failed", TROUPE_EFAILED);
        usleep(200);
    }
}

/* The size of gid's stored document (the row's, without the table's
 * envelope). */
static size_t
doc_size(node *n, const char *gid)
{
    troupe_rows *rows = NULL;
    troupe_err e =
        troupe_table_get_wait(n->tables, "troupe.gtx", gid, strlen(gid), &rows);
    if (e != TROUPE_OK)
        die("get", e);
    size_t len = rows->n == 1 ? rows->rows[0].doc_len : 0;
    troupe_rows_destroy(rows);
    return len < DOC_MAX ? len : DOC_MAX;
}

static uint64_t
batches_done(troupe_commit *c)
{
    troupe_commit_stats st;
    troupe_commit_get_stats(c, &st);
    return st.batches;
}

/* Transactions of flow f per second; *doc_len (if not NULL) gets the
 * size of the first one's stored document, *writes the commits per
 * transaction the pipeline counted. */
static double
flow_rep(flow f, troupe_sync sync, int total, size_t *doc_len, double *writes)
{
    static node n;
    node_open(&n, true, sync);
    xa_tables = n.tables;
    static worker w[CONC];
    uint64_t base = batches_done(n.commit);
    double t0 = bench_now();
    for (int i = 0; i < CONC; i++) {
        w[i] = (worker){.n = &n, .f = f, .id = i, .count = total / CONC};
        if (pthread_create(&w[i].th, NULL, flow_main, &w[i]) != 0)
            die("thread", TROUPE_ESYS);
    }
    for (int i = 0; i < CONC; i++)
        pthread_join(w[i].th, NULL);
    for (int t = 0; f != F_TXN && t < CONC; t++)
        for (int i = 0; i < total / CONC; i++) {
            char gid[32];
            gid_of(gid, sizeof(gid), t, i);
            wait_final(n.coord, gid);
        }
    double s = bench_now() - t0;
    *writes = (double)(batches_done(n.commit) - base) / (total / CONC * CONC);
    if (doc_len != NULL && f != F_TXN) {
        char gid[32];
        gid_of(gid, sizeof(gid), 0, 0);
        *doc_len = doc_size(&n, gid);
    }
    node_close(&n);
    return (total / CONC * CONC) / s;
}

/* ---- the peers: the same synced writes, straight to the pipeline ---- */

static void
on_commit(troupe_err err, void *arg)
{
    worker *w = arg;
    atomic_store(&w->err, err);
    sem_post(&w->done);
}

/* One write of doc under key, submitted and waited for. */
static void
commit_one(worker *w, const char *key, const char *doc)
{
    troupe_batch *b;
    troupe_err e = troupe_batch_create(&b);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, w->cf, key, strlen(key), doc, w->doc_len);
    if (e == TROUPE_OK)
        e = troupe_commit_submit(w->n->commit, &b, w->sync, on_commit, w);
    if (e != TROUPE_OK)
        die("peer submit", e);
    while (sem_wait(&w->done) != 0)
        ;
    if (atomic_load(&w->err) != TROUPE_OK)
        die("peer commit", atomic_load(&w->err));
}

static void *
peer_main(void *arg)
{
    worker *w = arg;
    char doc[DOC_MAX];
    memset(doc, 'd', sizeof(doc));
    for (int i = 0; i < w->count * w->writes; i++) {
        char key[32];
        gid_of(key, sizeof(key), w->id, i / w->writes);
        commit_one(w, key, doc);
    }
    return NULL;
}

static troupe_cf *
default_cf(node *n)
{
    troupe_cf *cf;
    troupe_err e = troupe_db_cf(n->db, TROUPE_CF_DEFAULT, &cf);
    if (e != TROUPE_OK)
        die("cf", e);
    return cf;
}

/* Transactions per second at `writes` writes of doc_len each, with
 * sync. */
static double
peer_rep(int total, int writes, size_t doc_len, troupe_sync sync)
{
    static node n;
    node_open(&n, false, sync);
    troupe_cf *cf = default_cf(&n);
    static worker w[CONC];
    double t0 = bench_now();
    for (int i = 0; i < CONC; i++) {
        w[i] = (worker){.n = &n,
                        .id = i,
                        .count = total / CONC,
                        .writes = writes,
                        .doc_len = doc_len,
                        .sync = sync,
                        .cf = cf};
        sem_init(&w[i].done, 0, 0);
        if (pthread_create(&w[i].th, NULL, peer_main, &w[i]) != 0)
            die("thread", TROUPE_ESYS);
    }
    for (int i = 0; i < CONC; i++) {
        pthread_join(w[i].th, NULL);
        sem_destroy(&w[i].done);
    }
    double s = bench_now() - t0;
    node_close(&n);
    return (total / CONC * CONC) / s;
}

/* ---- latency with one submitter ---- */

/* The ceil(q n)-th smallest of sorted[0..n) (bench_queue's rule). */
static double
quantile(const double *sorted, int n, double q)
{
    int idx = (int)(q * n + 0.999999) - 1;
    idx = idx < 0 ? 0 : idx >= n ? n - 1 : idx;
    return sorted[idx];
}

/* Samples in us: submit to final (lat), and two points on the way
 * (printed per rep): the submit's return (the first write done) and the
 * second step's call as the submitter hears of it. */
static double lat[LAT_MAX], lat_sub[LAT_MAX], lat_last[LAT_MAX];

static void
lat_summary(double *v, int n, double *p50, double *p99)
{
    qsort(v, (size_t)n, sizeof(v[0]), bench_cmp_double);
    *p50 = quantile(v, n, 0.5);
    if (p99 != NULL)
        *p99 = quantile(v, n, 0.99);
}

/* Submit-to-final of count sagas, one at a time; *sub50 and *last50 the
 * p50s of the two points on the way. */
static void
lat_rep(int count, double *p50, double *p99, double *sub50, double *last50)
{
    static node n;
    node_open(&n, true, TROUPE_SYNC_ON);
    static const troupe_saga_step steps[2] = {
        {{"noop", "\x81\xa1n\x01", 4}, {"noop", "\x81\xa1n\x02", 4}},
        {{"last", "\x81\xa1n\x03", 4}, {"noop", "\x81\xa1n\x04", 4}}};
    const struct timespec tick = {0, 20000};
    for (int i = 0; i < count; i++) {
        char gid[32];
        gid_of(gid, sizeof(gid), 0, i);
        uint64_t base = batches_done(n.commit);
        double t0 = bench_now();
        troupe_err e =
            troupe_saga_submit_wait(n.coord, gid, strlen(gid), steps, 2, NULL);
        if (e != TROUPE_OK)
            die("submit", e);
        double ts = bench_now();
        while (sem_wait(&n.last_done) != 0)
            ;
        double tl = bench_now();
        while (batches_done(n.commit) < base + 3)
            nanosleep(&tick, NULL);
        double t1 = bench_now();
        troupe_gtx_info in;
        if ((e = troupe_gtx_query_wait(n.coord, gid, strlen(gid), &in)) !=
            TROUPE_OK)
            die("query", e);
        if (in.status != TROUPE_GTX_SUCCEED) {
            /* another write went through the pipeline: its status says */
            wait_final(n.coord, gid);
            t1 = bench_now();
        }
        lat[i] = (t1 - t0) * 1e6;
        lat_sub[i] = (ts - t0) * 1e6;
        lat_last[i] = (tl - t0) * 1e6;
    }
    node_close(&n);
    lat_summary(lat, count, p50, p99);
    lat_summary(lat_sub, count, sub50, NULL);
    lat_summary(lat_last, count, last50, NULL);
}

/* One synced commit of doc_len bytes, count times, in us. */
static void
lat_peer_rep(int count, size_t doc_len, double *p50, double *p99)
{
    static node n;
    node_open(&n, false, TROUPE_SYNC_ON);
    static worker w;
    w = (worker){.n = &n,
                 .doc_len = doc_len,
                 .sync = TROUPE_SYNC_ON,
                 .cf = default_cf(&n)};
    sem_init(&w.done, 0, 0);
    char doc[DOC_MAX];
    memset(doc, 'd', sizeof(doc));
    for (int i = 0; i < count; i++) {
        char key[32];
        gid_of(key, sizeof(key), 0, i);
        double t0 = bench_now();
        commit_one(&w, key, doc);
        lat[i] = (bench_now() - t0) * 1e6;
    }
    sem_destroy(&w.done);
    node_close(&n);
    lat_summary(lat, count, p50, p99);
}

/* ---- main ---- */

static int
env_int(const char *name, int dflt, int lo, int hi)
{
    const char *s = getenv(name);
    int v = s ? atoi(s) : dflt;
    return v < lo ? lo : v > hi ? hi : v;
}

typedef struct tput {
    const char *name, *unit, *peer;
    flow f;
    troupe_sync sync;
    int writes;
    size_t doc_len;
    double v[64], p[64];
} tput;

int
main(int argc, char **argv)
{
    int reps = bench_reps(5);
    only = argc > 1 ? argv[1] : NULL;
    int total = env_int("BENCH_SAGAS", 4000, CONC, 10000000);
    int lat_n = env_int("BENCH_LAT_SAGAS", 2000, 10, LAT_MAX);
    /* the latency samples poll every 20 us: ask the kernel to wake them
     * on time */
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    printf("bench_coord: %d reps; %d transactions by %d threads, synced, "
           "no-op branches; latency of %d two-step sagas by 1 thread\n",
           reps, total, CONC, lat_n);
    tput tp[] = {{"saga_2step_sync", "sagas/s", "commit_3x_sync", F_SAGA,
                  TROUPE_SYNC_ON, 3, 0},
                 {"msg_1step_sync", "msgs/s", "commit_3x_msg_sync", F_MSG,
                  TROUPE_SYNC_ON, 3, 0},
                 {"tcc_2branch_sync", "txns/s", "commit_6x_sync", F_TCC,
                  TROUPE_SYNC_ON, 6, 0},
                 {"saga_2step_nosync", "sagas/s", "commit_3x_nosync", F_SAGA,
                  TROUPE_SYNC_OFF, 3, 0},
                 /* the peer is the saga, run again: writes unused */
                 {"workflow_3step_sync", "workflows/s", "saga_2step_sync", F_WF,
                  TROUPE_SYNC_ON, 0, 0},
                 /* the peer is one transaction of the same rows */
                 {"xa_2branch_sync", "txns/s", "txn_2row_sync", F_XA,
                  TROUPE_SYNC_ON, 0, 0}};
    size_t ntp = sizeof(tp) / sizeof(tp[0]);
    bool lat_on = want("saga_2step_p50_us") || want("saga_2step_p99_us");
    double l50[64], l99[64], c50[64], c99[64], s50, b50;
    size_t saga_doc = 0;
    for (int r = 0; r < reps; r++) {
        for (size_t k = 0; k < ntp; k++) {
            tput *t = &tp[k];
            if (!want(t->name))
                continue;
            double wr;
            t->v[r] = flow_rep(t->f, t->sync, total,
                               t->doc_len == 0 ? &t->doc_len : NULL, &wr);
            if (t->f == F_WF || t->f == F_XA) {
                double swr;
                t->p[r] = flow_rep(t->f == F_WF ? F_SAGA : F_TXN, t->sync,
                                   total, NULL, &swr);
                printf("  rep %d %s: %.0f %s (%.2f commits each, %zu B "
                       "document at the end), peer %s %.0f /s (%.2f "
                       "commits each)\n",
                       r + 1, t->name, t->v[r], t->unit, wr, t->doc_len,
                       t->peer, t->p[r], swr);
                fflush(stdout);
                continue;
            }
            t->p[r] = peer_rep(total, t->writes, t->doc_len, t->sync);
            if (t->f == F_SAGA)
                saga_doc = t->doc_len;
            printf("  rep %d %s: %.0f %s (%.2f commits each), peer %.0f "
                   "(%d %s writes of %zu B each: %.0f writes/s)\n",
                   r + 1, t->name, t->v[r], t->unit, wr, t->p[r], t->writes,
                   t->sync == TROUPE_SYNC_ON ? "synced" : "unsynced",
                   t->doc_len, t->writes * t->p[r]);
            fflush(stdout);
        }
        if (!lat_on)
            continue;
        if (saga_doc == 0) {
            /* the throughput run was filtered out: measure the size */
            double wr;
            flow_rep(F_SAGA, TROUPE_SYNC_ON, CONC, &saga_doc, &wr);
        }
        lat_rep(lat_n, &l50[r], &l99[r], &s50, &b50);
        lat_peer_rep(lat_n, saga_doc, &c50[r], &c99[r]);
        printf("  rep %d latency: saga p50 %.0f us (submit returned %.0f, "
               "step 2 called %.0f), p99 %.0f us; one synced commit of %zu "
               "B p50 %.0f us, p99 %.0f us\n",
               r + 1, l50[r], s50, b50, l99[r], saga_doc, c50[r], c99[r]);
        fflush(stdout);
    }
    for (size_t k = 0; k < ntp; k++)
        if (want(tp[k].name))
            bench_line_peer(tp[k].name, bench_median(tp[k].v, reps), tp[k].unit,
                            tp[k].peer, bench_median(tp[k].p, reps));
    if (lat_on) {
        bench_line_peer("saga_2step_p50_us", bench_median(l50, reps), "us",
                        "commit_1x_p50_us", bench_median(c50, reps));
        bench_line_peer("saga_2step_p99_us", bench_median(l99, reps), "us",
                        "commit_1x_p99_us", bench_median(c99, reps));
    }
    return 0;
}
