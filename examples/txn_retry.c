/*
 * txn_retry: a transaction that meets a conflict and is retried.
 *
 *   txn_retry DIR
 *
 * A table "accounts" holds one row, {"balance": n}. A deposit is a
 * transaction that reads the balance and writes balance + 10. While the
 * first attempt is between its read and its commit, another writer (here
 * a plain table write, as any other client's would be) changes the row:
 * the commit finds the key changed since its snapshot and fails with
 * ECONFLICT, writing nothing. troupe_txn_run_wait replays the whole
 * function in a fresh transaction, which reads the new balance and
 * commits. Standalone mode: the runtime has threads of its own, so this
 * thread may use the blocking calls. Prints the attempts and the final
 * balance (100, then 50 by the other writer, then 60 by the deposit).
 */
#include <stdio.h>

#include <troupe/troupe.h>

static troupe_err
put_balance(troupe_tables *t, troupe_txn *tx, int64_t balance)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "balance");
    troupe_pack_int(&p, balance);
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    troupe_err e = p.err;
    if (e == TROUPE_OK)
        e = tx != NULL
                ? troupe_txn_upsert(tx, "accounts", "alice", 5, doc, len, NULL)
                : troupe_table_upsert_wait(t, "accounts", "alice", 5, doc, len,
                                           NULL);
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
balance_of(const troupe_rows *rows, int64_t *out)
{
    troupe_reader r;
    const char *key = NULL; /* "balance" */
    size_t key_len = 0;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map_n(&r, 1);
    troupe_read_str(&r, 16, &key, &key_len);
    troupe_read_int(&r, out);
    return troupe_read_end(&r);
}

typedef struct deposit {
    troupe_tables *t;
    int attempt;
} deposit;

/* The transaction's body: troupe_txn_run_wait runs it once per attempt. */
static troupe_err
deposit_10(troupe_txn *tx, void *arg)
{
    deposit *d = arg;
    troupe_rows *rows = NULL;
    int64_t balance = 0;
    troupe_err e = troupe_txn_get_wait(tx, "accounts", "alice", 5, &rows);
    if (e == TROUPE_OK)
        e = balance_of(rows, &balance);
    troupe_rows_destroy(rows);
    if (e != TROUPE_OK)
        return e;
    printf("attempt %d reads balance %lld\n", ++d->attempt, (long long)balance);
    /* the other writer, between this attempt's read and its commit */
    if (d->attempt == 1 && (e = put_balance(d->t, NULL, 50)) != TROUPE_OK)
        return e;
    return put_balance(d->t, tx, balance + 10);
}

static int
run(troupe_tables *t)
{
    troupe_err e = troupe_tables_create_wait(t, "accounts", NULL, 0);
    if (e == TROUPE_OK)
        e = put_balance(t, NULL, 100);
    deposit d = {.t = t};
    uint32_t attempts = 0;
    troupe_txn_retry retry = {.attempts = &attempts};
    if (e == TROUPE_OK)
        e = troupe_txn_run_wait(t, NULL, &retry, deposit_10, &d);
    troupe_rows *rows = NULL;
    int64_t balance = 0;
    if (e == TROUPE_OK && (e = troupe_table_get_wait(t, "accounts", "alice", 5,
                                                     &rows)) == TROUPE_OK)
        e = balance_of(rows, &balance);
    troupe_rows_destroy(rows);
    if (e != TROUPE_OK) {
        fprintf(stderr, "txn_retry: %s\n", troupe_err_name(e));
        return 1;
    }
    printf("committed after %u attempts (the first met ECONFLICT); "
           "balance %lld\n",
           attempts, (long long)balance);
    return attempts == 2 && balance == 60 ? 0 : 1;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: txn_retry DIR\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *t = NULL;
    troupe_runtime_opts ro = {.schedulers = 1};
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
    int rc = e == TROUPE_OK ? run(t) : 1;
    if (e != TROUPE_OK)
        fprintf(stderr, "txn_retry: open: %s\n", troupe_err_name(e));
    /* close in the reverse order of opening */
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
