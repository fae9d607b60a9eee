/*
 * bank_saga: money moved between two accounts as a saga (docs/
 * coordinator.md), its steps served by a C callback that writes the
 * accounts through the barrier.
 *
 *   bank_saga DIR
 *
 * A table "accounts" holds alice {"balance": 100, "limit": 1000} and bob
 * {"balance": 100, "limit": 150}. A transfer is a saga of two steps: debit
 * the payer (compensation: credit it back), then credit the payee. The
 * dispatch target "bank" runs each call in one troupe transaction: the
 * barrier's check for (mode, gid, branch, op), then the account's write,
 * committed together, so a call delivered twice changes the balance once
 * and a compensation that comes before its action is a no-op. A write
 * that would take a balance below 0 or above its limit is a FAILURE.
 *
 * Transfer t1 moves 30 from alice to bob. Transfer t2 moves 40 more: the
 * debit succeeds, the credit would take bob over his limit and fails, and
 * the coordinator compensates the debit. Prints each transfer's status
 * and the balances (70 + 130: the total stays 200). Run again on the same
 * DIR and nothing moves twice: the sagas exist, a submit of them is OK
 * and changes nothing. Exits 1 when the books do not balance.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <troupe/troupe.h>

#define TOTAL 200

/* {"balance": b, "limit": l} */
static troupe_err
account_put(troupe_tables *t, troupe_txn *tx, const char *who, int64_t b,
            int64_t l)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "balance");
    troupe_pack_int(&p, b);
    troupe_pack_cstr(&p, "limit");
    troupe_pack_int(&p, l);
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    troupe_err e = p.err;
    if (e == TROUPE_OK)
        e = tx != NULL ? troupe_txn_upsert(tx, "accounts", who, strlen(who),
                                           doc, len, NULL)
                       : troupe_table_upsert_wait(t, "accounts", who,
                                                  strlen(who), doc, len, NULL);
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
account_read(const troupe_rows *rows, int64_t *b, int64_t *l)
{
    troupe_reader r;
    const char *k = NULL;
    size_t kl = 0;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map_n(&r, 2);
    troupe_read_str(&r, 16, &k, &kl);
    troupe_read_int(&r, b);
    troupe_read_str(&r, 16, &k, &kl);
    troupe_read_int(&r, l);
    return troupe_read_end(&r);
}

/* The four NUL-terminated fields of a branch task's header. */
static int
branch_of(const troupe_task *t, troupe_barrier_branch *b)
{
    const char *f[4];
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        const char *s = (const char *)t->header + off;
        const char *z =
            off < t->header_len ? memchr(s, '\0', t->header_len - off) : NULL;
        if (z == NULL)
            return -1;
        f[i] = s;
        off += (size_t)(z - s) + 1;
    }
    *b = (troupe_barrier_branch){.mode = f[0],
                                 .gid = f[1],
                                 .gid_len = strlen(f[1]),
                                 .branch_id = f[2],
                                 .op = f[3]};
    return 0;
}

/* One call: payload "NAME DELTA". Runs on the runtime's HOST lane, where
 * blocking calls are allowed. */
static troupe_outcome
bank(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    troupe_tables *tables = arg;
    troupe_barrier_branch b;
    char who[16];
    long long delta = 0;
    char text[64];
    size_t n = t->body_len < sizeof(text) - 1 ? t->body_len : sizeof(text) - 1;
    memcpy(text, t->body, n);
    text[n] = '\0';
    if (branch_of(t, &b) != 0 || sscanf(text, "%15s %lld", who, &delta) != 2)
        return TROUPE_OUTCOME_FAILURE;
    for (int attempt = 0; attempt < 8; attempt++) { /* ECONFLICT: again */
        troupe_txn *tx = NULL;
        troupe_barrier_verdict v = 0;
        troupe_rows *rows = NULL;
        int64_t bal = 0, lim = 0;
        troupe_err e = troupe_txn_begin(tables, NULL, &tx);
        if (e == TROUPE_OK)
            e = troupe_barrier_check_wait(tx, &b, &v);
        if (e == TROUPE_OK && v == TROUPE_BARRIER_EXECUTE) {
            e = troupe_txn_get_wait(tx, "accounts", who, strlen(who), &rows);
            if (e == TROUPE_OK)
                e = account_read(rows, &bal, &lim);
            troupe_rows_destroy(rows);
            if (e == TROUPE_OK && (bal + delta < 0 || bal + delta > lim)) {
                printf("  %s %s %s: %s %+lld refused (balance %lld, limit "
                       "%lld)\n",
                       b.gid, b.branch_id, b.op, who, delta, (long long)bal,
                       (long long)lim);
                troupe_txn_destroy(tx); /* no row: nothing happened */
                return TROUPE_OUTCOME_FAILURE;
            }
            if (e == TROUPE_OK)
                e = account_put(NULL, tx, who, bal + delta, lim);
        }
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
        troupe_txn_destroy(tx);
        if (e == TROUPE_OK) {
            printf("  %s %s %s: %s %+lld%s\n", b.gid, b.branch_id, b.op, who,
                   delta,
                   v == TROUPE_BARRIER_EXECUTE      ? ""
                   : v == TROUPE_BARRIER_DUPLICATED ? " (duplicated: skipped)"
                                                    : " (null compensation)");
            return TROUPE_OUTCOME_SUCCESS;
        }
        if (e != TROUPE_ECONFLICT && e != TROUPE_EEXIST)
            break;
    }
    return TROUPE_OUTCOME_UNKNOWN; /* retried after the backoff */
}

static troupe_err
transfer(troupe_coord *c, const char *gid, const char *from, const char *to,
         int amount)
{
    char debit[48], undo[48], credit[48];
    snprintf(debit, sizeof(debit), "%s %d", from, -amount);
    snprintf(undo, sizeof(undo), "%s %d", from, amount);
    snprintf(credit, sizeof(credit), "%s %d", to, amount);
    troupe_saga_step steps[2] = {
        {.action = {"bank", debit, strlen(debit)},
         .compensate = {"bank", undo, strlen(undo)}},
        {.action = {"bank", credit, strlen(credit)}},
    };
    printf("transfer %s: %d from %s to %s\n", gid, amount, from, to);
    troupe_err e = troupe_saga_submit_wait(c, gid, strlen(gid), steps, 2, NULL);
    troupe_gtx_info in = {0};
    /* an example may poll; the tests drive loops with deadlines */
    for (int i = 0; e == TROUPE_OK && i < 3000; i++) {
        if ((e = troupe_gtx_query_wait(c, gid, strlen(gid), &in)) != TROUPE_OK)
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
    troupe_err e = troupe_tables_create_wait(t, "accounts", NULL, 0);
    if (e == TROUPE_OK)
        e = troupe_barrier_create_wait(t);
    troupe_rows *rows = NULL;
    if (e == TROUPE_OK &&
        troupe_table_get_wait(t, "accounts", "alice", 5, &rows) ==
            TROUPE_ENOENT) { /* the first run */
        e = account_put(t, NULL, "alice", 100, 1000);
        if (e == TROUPE_OK)
            e = account_put(t, NULL, "bob", 100, 150);
    }
    troupe_rows_destroy(rows);
    troupe_target *bank_t = NULL;
    troupe_target_opts to = {.name = "bank", .fn = bank, .arg = t};
    if (e == TROUPE_OK)
        e = troupe_target_create(rt, &to, &bank_t);
    troupe_coord *c = NULL;
    troupe_coord_opts co = {.rt = rt, .tables = t, .retry_min_ms = 100};
    if (e == TROUPE_OK)
        e = troupe_coord_open_wait(&co, &c);
    if (e == TROUPE_OK)
        e = transfer(c, "t1", "alice", "bob", 30);
    if (e == TROUPE_OK)
        e = transfer(c, "t2", "alice", "bob", 40);
    if (c != NULL) {
        troupe_coord_stop_wait(c);
        troupe_coord_destroy(c);
    }
    if (bank_t != NULL) {
        troupe_target_stop_wait(bank_t);
        troupe_target_destroy(bank_t);
    }
    int64_t sum = 0;
    const char *who[2] = {"alice", "bob"};
    for (int i = 0; i < 2 && e == TROUPE_OK; i++) {
        int64_t b = 0, l = 0;
        rows = NULL;
        e = troupe_table_get_wait(t, "accounts", who[i], strlen(who[i]), &rows);
        if (e == TROUPE_OK)
            e = account_read(rows, &b, &l);
        troupe_rows_destroy(rows);
        printf("%s: %lld\n", who[i], (long long)b);
        sum += b;
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "bank_saga: %s: %s\n", troupe_err_name(e),
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
        fprintf(stderr, "usage: bank_saga DIR\n");
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
        fprintf(stderr, "bank_saga: open: %s\n", troupe_err_name(e));
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
