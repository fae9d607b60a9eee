/*
 * The coordinator: two-step sagas per second, embedded, synced, with
 * no-op branches (a callback target answering SUCCESS).
 *
 *   saga_2step_sync  CONC (100) threads each submit their share of SAGAS
 *                    (BENCH_SAGAS, 4000) sagas back to back
 *                    (troupe_saga_submit_wait returns once the saga is
 *                    committed); the figure is sagas from the first submit
 *                    to the moment every one is final (the main thread
 *                    then reads each saga's stored status, in order,
 *                    until all have succeeded).
 *   peer: commit_3x_sync  the limit for this durability: the same number
 *                    of synced state writes per saga (3: the submit with
 *                    step 1 dispatched, step 2 dispatched, succeeded),
 *                    each one document of the saga's size, submitted
 *                    straight to the commit pipeline by CONC threads.
 *
 * Figures are medians over BENCH_REPS (5); a fresh database per rep.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/storage.h"
#include "troupe/table.h"

#define CONC 100
#define DOC_LEN 200 /* about a two-step saga's stored document */

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

typedef struct node {
    char dir[4096];
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_target *t;
    troupe_coord *coord;
} node;

static void
node_open(node *n, bool coord)
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
    troupe_catalog_opts co = {.rt = n->rt, .db = n->db};
    troupe_tables_opts to = {.commit = n->commit};
    troupe_target_opts tg = {.name = "noop", .fn = noop, .credit = 1024};
    if ((e = troupe_catalog_open(&co, &n->cat)) != TROUPE_OK ||
        (to.catalog = n->cat,
         (e = troupe_tables_open(&to, &n->tables)) != TROUPE_OK) ||
        (e = troupe_target_create(n->rt, &tg, &n->t)) != TROUPE_OK)
        die("open tables", e);
    troupe_coord_opts cop = {.rt = n->rt, .tables = n->tables};
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
        troupe_tables_stop_wait(n->tables);
        troupe_tables_destroy(n->tables);
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

/* ---- sagas ---- */

typedef struct worker {
    node *n;
    int id, count;
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

static void *
saga_main(void *arg)
{
    worker *w = arg;
    static const troupe_saga_step steps[2] = {
        {{"noop", "\x81\xa1n\x01", 4}, {"noop", "\x81\xa1n\x02", 4}},
        {{"noop", "\x81\xa1n\x03", 4}, {"noop", "\x81\xa1n\x04", 4}}};
    for (int i = 0; i < w->count; i++) {
        char gid[32];
        gid_of(gid, sizeof(gid), w->id, i);
        troupe_err e = troupe_saga_submit_wait(w->n->coord, gid, strlen(gid),
                                               steps, 2, NULL);
        if (e != TROUPE_OK)
            die("submit", e);
    }
    return NULL;
}

static double
saga_rep(int sagas)
{
    static node n;
    node_open(&n, true);
    static worker w[CONC];
    double t0 = bench_now();
    for (int i = 0; i < CONC; i++) {
        w[i] = (worker){.n = &n, .id = i, .count = sagas / CONC};
        if (pthread_create(&w[i].th, NULL, saga_main, &w[i]) != 0)
            die("thread", TROUPE_ESYS);
    }
    for (int i = 0; i < CONC; i++)
        pthread_join(w[i].th, NULL);
    for (int t = 0; t < CONC; t++)
        for (int i = 0; i < sagas / CONC; i++) {
            char gid[32];
            gid_of(gid, sizeof(gid), t, i);
            troupe_gtx_info in;
            for (;;) {
                troupe_err e =
                    troupe_gtx_query_wait(n.coord, gid, strlen(gid), &in);
                if (e != TROUPE_OK)
                    die("query", e);
                if (in.status == TROUPE_GTX_SUCCEED)
                    break;
                if (in.status == TROUPE_GTX_FAILED)
                    die("a saga failed", TROUPE_EFAILED);
                usleep(200);
            }
        }
    double s = bench_now() - t0;
    node_close(&n);
    return (sagas / CONC * CONC) / s;
}

/* ---- the peer: 3 synced writes per saga, straight to the pipeline ---- */

static void
on_commit(troupe_err err, void *arg)
{
    worker *w = arg;
    atomic_store(&w->err, err);
    sem_post(&w->done);
}

static void *
peer_main(void *arg)
{
    worker *w = arg;
    char doc[DOC_LEN];
    memset(doc, 'd', sizeof(doc));
    for (int i = 0; i < w->count * 3; i++) {
        char key[32];
        gid_of(key, sizeof(key), w->id, i / 3);
        troupe_batch *b;
        troupe_err e = troupe_batch_create(&b);
        if (e == TROUPE_OK)
            e = troupe_batch_put(b, w->cf, key, strlen(key), doc, sizeof(doc));
        if (e == TROUPE_OK)
            e = troupe_commit_submit(w->n->commit, &b, TROUPE_SYNC_ON,
                                     on_commit, w);
        if (e != TROUPE_OK)
            die("peer submit", e);
        while (sem_wait(&w->done) != 0)
            ;
        if (atomic_load(&w->err) != TROUPE_OK)
            die("peer commit", atomic_load(&w->err));
    }
    return NULL;
}

static double
peer_rep(int sagas)
{
    static node n;
    node_open(&n, false);
    troupe_cf *cf;
    troupe_err e = troupe_db_cf(n.db, TROUPE_CF_DEFAULT, &cf);
    if (e != TROUPE_OK)
        die("cf", e);
    static worker w[CONC];
    double t0 = bench_now();
    for (int i = 0; i < CONC; i++) {
        w[i] = (worker){.n = &n, .id = i, .count = sagas / CONC, .cf = cf};
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
    return (sagas / CONC * CONC) / s;
}

int
main(void)
{
    int reps = bench_reps(5);
    const char *env = getenv("BENCH_SAGAS");
    int sagas = env ? atoi(env) : 4000;
    if (sagas < CONC)
        sagas = CONC;
    printf("bench_coord: %d reps, %d two-step sagas by %d threads, synced, "
           "no-op branches\n",
           reps, sagas, CONC);
    double v[64], p[64];
    for (int r = 0; r < reps; r++) {
        v[r] = saga_rep(sagas);
        p[r] = peer_rep(sagas);
        printf("  rep %d: %.0f sagas/s, peer %.0f sagas/s (%.0f synced "
               "writes/s)\n",
               r + 1, v[r], p[r], 3 * p[r]);
        fflush(stdout);
    }
    bench_line_peer("saga_2step_sync", bench_median(v, reps), "sagas/s",
                    "commit_3x_sync", bench_median(p, reps));
    return 0;
}
