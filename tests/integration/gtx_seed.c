/*
 * gtx_seed DIR: leaves known global transactions in a database for the
 * `troupe gtx ...` test (gtx_cli.sh). A coordinator (backoff 10 min, so
 * that nothing is retried on its own while the test runs) drives them
 * against one callback target "svc", which answers SUCCESS for saga-ok,
 * FAILURE for saga-fail's second action (SUCCESS for the rest of it) and
 * ONGOING for everything else. It leaves, in gid order:
 *
 *   msg-1      msg   prepared   (grace 1 h: never queried back here)
 *   msg-2      msg   submitted  (its step answered ONGOING)
 *   saga-a, saga-b, saga-c      saga submitted (first action ONGOING)
 *   saga-fail  saga  failed     (reason "branch 02 action: FAILURE")
 *   saga-ok    saga  succeed
 *   tcc-1      tcc   prepared   (one branch registered)
 *   tcc-2      tcc   submitted  (its confirm answered ONGOING)
 *
 * and, on table xa_t, a transaction prepared under the xid "dangling/01"
 * with no global transaction behind it.
 *
 * It waits until each has committed what it is to show (a final status,
 * or the ONGOING outcome of its first call, attempts 1) before it stops,
 * so nothing is in flight when the node opens the database. Exits 0, or
 * 1 with a message.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "troupe/xa.h"

static troupe_outcome
svc(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    (void)arg;
    /* header: mode, gid, branch id, op, each NUL-terminated */
    const char *mode = (const char *)t->header;
    const char *gid = mode + strlen(mode) + 1;
    const char *bid = gid + strlen(gid) + 1;
    const char *op = bid + strlen(bid) + 1;
    if (strcmp(gid, "saga-ok") == 0)
        return TROUPE_OUTCOME_SUCCESS;
    if (strcmp(gid, "saga-fail") == 0)
        return strcmp(bid, "02") == 0 && strcmp(op, "action") == 0
                   ? TROUPE_OUTCOME_FAILURE
                   : TROUPE_OUTCOME_SUCCESS;
    return TROUPE_OUTCOME_ONGOING;
}

/* Polls gid until it is final (final) or has had its first retry, for at
 * most 30 s: OK, ETIMEDOUT, or the query's error. */
static troupe_err
settle(troupe_coord *c, const char *gid, bool final)
{
    for (int i = 0; i < 3000; i++) {
        troupe_gtx_info in;
        troupe_err e = troupe_gtx_query_wait(c, gid, strlen(gid), &in);
        if (e != TROUPE_OK)
            return e;
        bool fin =
            in.status == TROUPE_GTX_SUCCEED || in.status == TROUPE_GTX_FAILED;
        if (final ? fin : in.attempts >= 1)
            return TROUPE_OK;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "gtx_seed: %s did not settle\n", gid);
    return TROUPE_ETIMEDOUT;
}

static troupe_err
seed(troupe_coord *c)
{
    static const troupe_saga_step two[2] = {
        {{"svc", "\x81\x01", 2}, {"svc", "\x81\x02", 2}},
        {{"svc", "\x81\x03", 2}, {"svc", "\x81\x04", 2}}};
    static const troupe_gtx_call confirm = {"svc", "\x81\x06", 2},
                                 cancel = {"svc", "\x81\x07", 2},
                                 query = {"svc", NULL, 0};
    static const char *const sagas[] = {"saga-a", "saga-b", "saga-c", "saga-ok",
                                        "saga-fail"};
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < 5; i++)
        e = troupe_saga_submit_wait(c, sagas[i], strlen(sagas[i]), two, 2,
                                    NULL);
    char b[8];
    if (e == TROUPE_OK)
        e = troupe_tcc_prepare_wait(c, "tcc-1", 5);
    if (e == TROUPE_OK)
        e = troupe_tcc_register_wait(c, "tcc-1", 5, &confirm, &cancel, b);
    if (e == TROUPE_OK)
        e = troupe_tcc_prepare_wait(c, "tcc-2", 5);
    if (e == TROUPE_OK)
        e = troupe_tcc_register_wait(c, "tcc-2", 5, &confirm, &cancel, b);
    if (e == TROUPE_OK)
        e = troupe_gtx_submit_wait(c, "tcc-2", 5);
    const troupe_gtx_call steps[1] = {{"svc", "\x81\x05", 2}};
    if (e == TROUPE_OK)
        e = troupe_msg_prepare_wait(c, "msg-1", 5, steps, 1, &query, 3600000);
    if (e == TROUPE_OK)
        e = troupe_msg_prepare_wait(c, "msg-2", 5, steps, 1, &query, 3600000);
    if (e == TROUPE_OK)
        e = troupe_gtx_submit_wait(c, "msg-2", 5);
    for (size_t i = 0; e == TROUPE_OK && i < 5; i++)
        e = settle(c, sagas[i], i >= 3);
    if (e == TROUPE_OK)
        e = settle(c, "tcc-2", false);
    if (e == TROUPE_OK)
        e = settle(c, "msg-2", false);
    return e;
}

/* A transaction prepared under the xid "dangling/01" with no global
 * transaction behind it (its coordinator gone): the node's tables hold it
 * again at open and `troupe gtx prepared` lists it. */
static troupe_err
dangling(troupe_tables *t)
{
    troupe_err e = troupe_tables_create_wait(t, "xa_t", NULL, 0);
    troupe_txn *tx = NULL;
    if (e == TROUPE_OK)
        e = troupe_txn_begin(t, NULL, &tx);
    if (e == TROUPE_OK)
        e = troupe_txn_upsert(tx, "xa_t", "k", 1, "\x81\xa1v\x01", 4, NULL);
    if (e == TROUPE_OK)
        e = troupe_txn_prepare_wait(tx, "dangling/01", 11);
    troupe_txn_destroy(tx);
    return e;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gtx_seed DIR\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *cm = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *tables = NULL;
    troupe_target *tg = NULL;
    troupe_coord *coord = NULL;
    troupe_runtime_opts ro = {.schedulers = 1, .workers = 2, .host_workers = 2};
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e == TROUPE_OK)
        e = troupe_commit_create(db, NULL, &cm);
    if (e == TROUPE_OK)
        e = troupe_runtime_create(&rt, &ro);
    if (e == TROUPE_OK) {
        troupe_catalog_opts co = {.rt = rt, .db = db};
        e = troupe_catalog_open(&co, &cat);
    }
    if (e == TROUPE_OK) {
        troupe_tables_opts to = {.catalog = cat, .commit = cm};
        e = troupe_tables_open(&to, &tables);
    }
    if (e == TROUPE_OK) {
        troupe_target_opts to = {.name = "svc", .fn = svc};
        e = troupe_target_create(rt, &to, &tg);
    }
    if (e == TROUPE_OK) {
        troupe_coord_opts co = {.rt = rt,
                                .tables = tables,
                                .retry_min_ms = 600000,
                                .retry_max_ms = 600000,
                                /* tcc-1 stays prepared however long
                                 * the test takes */
                                .tcc_timeout_ms = -1};
        e = troupe_coord_open_wait(&co, &coord);
    }
    if (e == TROUPE_OK)
        e = seed(coord);
    if (e == TROUPE_OK)
        e = dangling(tables);
    if (coord != NULL) {
        troupe_err se = troupe_coord_stop_wait(coord);
        if (e == TROUPE_OK)
            e = se;
        troupe_coord_destroy(coord);
    }
    if (tg != NULL) {
        troupe_target_stop_wait(tg);
        troupe_target_destroy(tg);
    }
    if (tables != NULL) {
        troupe_tables_stop_wait(tables);
        troupe_tables_destroy(tables);
    }
    if (cat != NULL) {
        troupe_catalog_stop_wait(cat);
        troupe_catalog_destroy(cat);
    }
    if (rt != NULL) {
        troupe_runtime_shutdown_wait(rt);
        troupe_runtime_destroy(rt);
    }
    troupe_commit_destroy(cm);
    if (db != NULL) {
        troupe_err ce = troupe_db_close(db);
        if (e == TROUPE_OK)
            e = ce;
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "gtx_seed: %s: %s\n", troupe_err_name(e),
                troupe_errmsg(e));
        return 1;
    }
    return 0;
}
