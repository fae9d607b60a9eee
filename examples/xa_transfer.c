/*
 * xa_transfer: money moved between two tables as an XA global transaction
 * (docs/coordinator.md, "XA over troupe's tables"): each side is a troupe
 * transaction prepared under the xid gid/branch-id, holding its keys
 * until the coordinator commits both on submit or rolls both back.
 *
 *   xa_transfer DIR
 *
 * Tables "checking" and "savings" hold alice {"balance": 100} each.
 * Transfer x1 moves 30 from checking to savings: both branches prepared,
 * then submitted: committed together. Transfer x2 tries 500: its debit
 * would go below zero, so the application aborts it after preparing the
 * credit: the credit's branch is rolled back, nothing moves. Prints each
 * transfer's status and the balances (70 + 130: the total stays 200).
 * Run again on the same DIR and nothing moves twice: the transfers exist
 * and are final. Exits 1 when the books do not balance.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <troupe/troupe.h>

#define TOTAL 200

static troupe_err
balance_put(troupe_tables *t, troupe_txn *tx, const char *table, int64_t b)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "balance");
    troupe_pack_int(&p, b);
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    troupe_err e = p.err;
    if (e == TROUPE_OK)
        e = tx != NULL
                ? troupe_txn_upsert(tx, table, "alice", 5, doc, len, NULL)
                : troupe_table_upsert_wait(t, table, "alice", 5, doc, len,
                                           NULL);
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
balance_of(const troupe_rows *rows, int64_t *b)
{
    troupe_reader r;
    const char *k = NULL;
    size_t kl = 0;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map_n(&r, 1);
    troupe_read_str(&r, 16, &k, &kl);
    troupe_read_int(&r, b);
    return troupe_read_end(&r);
}

/* One side of a transfer: a transaction that reads alice's balance in
 * table, adds delta and is prepared as a branch of gid. *refused when
 * the balance would go below zero (nothing prepared). */
static troupe_err
side(troupe_coord *c, troupe_tables *t, const char *gid, const char *table,
     int64_t delta, bool *refused)
{
    troupe_txn *tx = NULL;
    troupe_rows *rows = NULL;
    int64_t b = 0;
    *refused = false;
    troupe_err e = troupe_txn_begin(t, NULL, &tx);
    if (e == TROUPE_OK)
        e = troupe_txn_get_wait(tx, table, "alice", 5, &rows);
    if (e == TROUPE_OK)
        e = balance_of(rows, &b);
    troupe_rows_destroy(rows);
    if (e == TROUPE_OK && b + delta < 0) {
        printf("  %s: %s %lld %+lld refused\n", gid, table, (long long)b,
               (long long)delta);
        *refused = true;
        troupe_txn_destroy(tx);
        return TROUPE_OK;
    }
    if (e == TROUPE_OK)
        e = balance_put(NULL, tx, table, b + delta);
    char bid[8];
    if (e == TROUPE_OK)
        e = troupe_xa_branch_wait(c, gid, strlen(gid), tx, bid);
    if (e == TROUPE_OK)
        printf("  %s: branch %s prepared: %s %+lld (held until resolved)\n",
               gid, bid, table, (long long)delta);
    troupe_txn_destroy(tx);
    return e;
}

static troupe_err
transfer(troupe_coord *c, troupe_tables *t, const char *gid, int amount)
{
    troupe_gtx_info in = {0};
    size_t gl = strlen(gid);
    printf("transfer %s: %d from checking to savings\n", gid, amount);
    troupe_err e = troupe_gtx_query_wait(c, gid, gl, &in);
    if (e == TROUPE_ENOENT) { /* the first run */
        bool refused = false, r2 = false;
        e = troupe_xa_begin_wait(c, gid, gl);
        if (e == TROUPE_OK) /* the credit first: the abort rolls it back */
            e = side(c, t, gid, "savings", amount, &r2);
        if (e == TROUPE_OK)
            e = side(c, t, gid, "checking", -amount, &refused);
        if (e == TROUPE_OK)
            e = refused || r2
                    ? troupe_gtx_abort_wait(c, gid, gl, "insufficient funds")
                    : troupe_gtx_submit_wait(c, gid, gl);
    }
    /* an example may poll; the tests drive loops with deadlines */
    for (int i = 0; e == TROUPE_OK && i < 3000; i++) {
        if ((e = troupe_gtx_query_wait(c, gid, gl, &in)) != TROUPE_OK)
            break;
        if (in.status == TROUPE_GTX_SUCCEED || in.status == TROUPE_GTX_FAILED)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    if (e == TROUPE_OK)
        printf("transfer %s: %s%s%s\n", gid,
               in.status == TROUPE_GTX_SUCCEED  ? "succeed"
               : in.status == TROUPE_GTX_FAILED ? "failed"
                                                : "not final",
               in.reason[0] ? ", " : "", in.reason);
    return e;
}

static int
run(troupe_runtime *rt, troupe_tables *t)
{
    const char *tables[2] = {"checking", "savings"};
    troupe_err e = TROUPE_OK;
    for (int i = 0; i < 2 && e == TROUPE_OK; i++) {
        troupe_rows *rows = NULL;
        e = troupe_tables_create_wait(t, tables[i], NULL, 0);
        if (e == TROUPE_OK && troupe_table_get_wait(t, tables[i], "alice", 5,
                                                    &rows) == TROUPE_ENOENT)
            e = balance_put(t, NULL, tables[i], 100); /* the first run */
        troupe_rows_destroy(rows);
    }
    troupe_coord *c = NULL;
    troupe_coord_opts co = {.rt = rt, .tables = t, .retry_min_ms = 100};
    if (e == TROUPE_OK)
        e = troupe_coord_open_wait(&co, &c);
    if (e == TROUPE_OK)
        e = transfer(c, t, "x1", 30);
    if (e == TROUPE_OK)
        e = transfer(c, t, "x2", 500);
    if (c != NULL) {
        troupe_coord_stop_wait(c);
        troupe_coord_destroy(c);
    }
    int64_t sum = 0;
    for (int i = 0; i < 2 && e == TROUPE_OK; i++) {
        troupe_rows *rows = NULL;
        int64_t b = 0;
        e = troupe_table_get_wait(t, tables[i], "alice", 5, &rows);
        if (e == TROUPE_OK)
            e = balance_of(rows, &b);
        troupe_rows_destroy(rows);
        printf("%s: %lld\n", tables[i], (long long)b);
        sum += b;
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "xa_transfer: %s: %s\n", troupe_err_name(e),
                troupe_errmsg(e));
        return 1;
    }
    printf("total: %lld (%s)\n", (long long)sum,
           sum == TOTAL ? "the books balance" : "THE BOOKS DO NOT BALANCE");
    return sum == TOTAL ? 0 : 1;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: xa_transfer DIR\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *t = NULL;
    troupe_runtime_opts ro = {.schedulers = 2};
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e == TROUPE_OK)
        e = troupe_commit_create(db, NULL, &commit);
    if (e == TROUPE_OK)
        e = troupe_runtime_create(&rt, &ro);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    if (e == TROUPE_OK)
        e = troupe_catalog_open(&co, &cat);
    troupe_tables_opts to = {.catalog = cat, .commit = commit};
    if (e == TROUPE_OK)
        e = troupe_tables_open(&to, &t);
    int rc = e == TROUPE_OK ? run(rt, t) : 1;
    if (e != TROUPE_OK)
        fprintf(stderr, "xa_transfer: open: %s\n", troupe_err_name(e));
    if (t != NULL && troupe_tables_stop_wait(t) != TROUPE_OK)
        rc = 1;
    troupe_tables_destroy(t);
    if (cat != NULL)
        troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
    if (rt != NULL && troupe_runtime_shutdown_wait(rt) != TROUPE_OK)
        rc = 1;
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    if (troupe_db_close(db) != TROUPE_OK)
        rc = 1;
    return rc;
}
