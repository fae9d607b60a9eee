/*
 * order_workflow: an order placed by a workflow (docs/coordinator.md,
 * "Workflows") that reserves stock, asks a payment service to charge the
 * customer, waits for the service's callback (an awakeable) and ships,
 * or releases the stock when the payment is declined.
 *
 *   order_workflow DIR
 *
 * A table "stock" holds "widget": {"count": 10}. The workflow "order" runs
 * three records: step "reserve" (takes one widget, in a troupe transaction with
 * the barrier's row; its compensation, the "stock" target's "release",
 * puts it back), the awakeable "payment", step "charge" (hands the
 * awakeable's id to the payment service: a step, so it is sent once),
 * then waits for the payment and runs step "ship" (writes the order to
 * "orders"). The payment service is a thread of its own that answers
 * each request by calling troupe_awakeable_resolve (paid) or
 * troupe_awakeable_reject (declined: order o2's card is).
 *
 * Order o1 is paid and shipped; o2 is declined: the workflow fails and
 * its widget is released. Prints each order's status and the stock
 * (9: one widget shipped). Run again on the same DIR and nothing moves
 * twice: the workflows exist, their submits are OK and change nothing,
 * no step runs again. Exits 1 when the stock is wrong.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <troupe/troupe.h>

#define STOCK 10

typedef struct app {
    troupe_tables *tables;
    troupe_coord *coord;
    /* the payment service's inbox: awakeable ids, and its thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char inbox[8][TROUPE_AWAKEABLE_ID_MAX + 1];
    int n_inbox;
    int stop;
    pthread_t service;
} app;

/* ---- the stock, through the barrier ---- */

static troupe_err
count_put(troupe_txn *tx, troupe_tables *t, int64_t n)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "count");
    troupe_pack_int(&p, n);
    size_t len = 0;
    const void *d = troupe_pack_data(&p, &len);
    troupe_err e = p.err;
    if (e == TROUPE_OK)
        e = tx != NULL
                ? troupe_txn_upsert(tx, "stock", "widget", 6, d, len, NULL)
                : troupe_table_upsert_wait(t, "stock", "widget", 6, d, len,
                                           NULL);
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
count_of(const troupe_rows *rows, int64_t *n)
{
    troupe_reader r;
    const char *k = NULL;
    size_t kl = 0;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map_n(&r, 1);
    troupe_read_str(&r, 16, &k, &kl);
    troupe_read_int(&r, n);
    return troupe_read_end(&r);
}

/* Adds delta widgets, once for (mode, gid, branch, op): the barrier's row
 * and the stock commit together. */
static troupe_outcome
stock_move(troupe_tables *t, const troupe_barrier_branch *b, int delta)
{
    for (int attempt = 0; attempt < 8; attempt++) { /* ECONFLICT: again */
        troupe_txn *tx = NULL;
        troupe_barrier_verdict v = 0;
        troupe_rows *rows = NULL;
        int64_t n = 0;
        troupe_err e = troupe_txn_begin(t, NULL, &tx);
        if (e == TROUPE_OK)
            e = troupe_barrier_check_wait(tx, b, &v);
        if (e == TROUPE_OK && v == TROUPE_BARRIER_EXECUTE) {
            e = troupe_txn_get_wait(tx, "stock", "widget", 6, &rows);
            if (e == TROUPE_OK)
                e = count_of(rows, &n);
            troupe_rows_destroy(rows);
            if (e == TROUPE_OK && n + delta < 0) {
                troupe_txn_destroy(tx);
                return TROUPE_OUTCOME_FAILURE; /* sold out */
            }
            if (e == TROUPE_OK)
                e = count_put(tx, NULL, n + delta);
        }
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
        troupe_txn_destroy(tx);
        if (e == TROUPE_OK)
            return TROUPE_OUTCOME_SUCCESS;
        if (e != TROUPE_ECONFLICT && e != TROUPE_EEXIST)
            break;
    }
    return TROUPE_OUTCOME_UNKNOWN; /* retried after the backoff */
}

/* The compensation target "stock": a branch task (header mode, gid,
 * branch id, op) whose op is "compensate". */
static troupe_outcome
stock_target(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    const char *f[4];
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        const char *s = (const char *)t->header + off;
        const char *z =
            off < t->header_len ? memchr(s, '\0', t->header_len - off) : NULL;
        if (z == NULL)
            return TROUPE_OUTCOME_FAILURE;
        f[i] = s;
        off += (size_t)(z - s) + 1;
    }
    troupe_barrier_branch b = {.mode = f[0],
                               .gid = f[1],
                               .gid_len = strlen(f[1]),
                               .branch_id = f[2],
                               .op = f[3]};
    printf("  %s: widget released\n", b.gid);
    return stock_move(arg, &b, +1);
}

/* ---- the workflow ---- */

static troupe_outcome
reserve(troupe_wf *wf, const char *bid, void *arg)
{
    app *a = arg;
    size_t gl = 0;
    const char *gid = troupe_wf_gid(wf, &gl);
    troupe_barrier_branch b = {.mode = "workflow",
                               .gid = gid,
                               .gid_len = gl,
                               .branch_id = bid,
                               .op = "action"};
    troupe_outcome o = stock_move(a->tables, &b, -1);
    if (o == TROUPE_OUTCOME_SUCCESS)
        printf("  %s: widget reserved\n", gid);
    return o;
}

/* What "charge" hands on: the service's inbox and the callback's id. */
typedef struct charge_req {
    app *a;
    const char *id;
} charge_req;

/* Hands the awakeable's id to the payment service. */
static troupe_outcome
charge(troupe_wf *wf, const char *bid, void *arg)
{
    (void)bid;
    const charge_req *q = arg;
    app *a = q->a;
    const char *id = q->id;
    pthread_mutex_lock(&a->mu);
    if (a->n_inbox < 8)
        snprintf(a->inbox[a->n_inbox++], TROUPE_AWAKEABLE_ID_MAX + 1, "%s", id);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    printf("  %s: payment requested (callback %s)\n", troupe_wf_gid(wf, NULL),
           id);
    return TROUPE_OUTCOME_SUCCESS;
}

static troupe_outcome
ship(troupe_wf *wf, const char *bid, void *arg)
{
    (void)bid;
    app *a = arg;
    size_t gl = 0;
    const char *gid = troupe_wf_gid(wf, &gl);
    /* {"status": "shipped"}: idempotent, the same row again */
    troupe_err e = troupe_table_upsert_wait(
        a->tables, "orders", gid, gl, "\x81\xa6status\xa7shipped", 16, NULL);
    if (e != TROUPE_OK)
        return TROUPE_OUTCOME_UNKNOWN;
    printf("  %s: shipped\n", gid);
    return TROUPE_OUTCOME_SUCCESS;
}

/* One run of the flow: every call returns at once with EAGAIN while a
 * record is being committed or the payment is awaited. */
static troupe_outcome
order(troupe_wf *wf, const uint8_t *in, size_t len, void *arg)
{
    (void)in;
    (void)len;
    app *a = arg;
    troupe_gtx_call release = {"stock", NULL, 0};
    troupe_err e =
        troupe_wf_step(wf, "reserve", &release, reserve, a, NULL, NULL);
    if (e == TROUPE_EFAILED)
        return TROUPE_OUTCOME_FAILURE; /* sold out */
    char id[TROUPE_AWAKEABLE_ID_MAX + 1];
    if (e == TROUPE_OK)
        e = troupe_wf_awakeable(wf, "payment", id);
    charge_req q = {a, id};
    if (e == TROUPE_OK)
        e = troupe_wf_step(wf, "charge", NULL, charge, &q, NULL, NULL);
    const uint8_t *verdict = NULL;
    size_t vl = 0;
    if (e == TROUPE_OK)
        e = troupe_wf_await(wf, id, &verdict, &vl);
    if (e == TROUPE_EFAILED) {
        printf("  %s: payment declined (%.*s)\n", troupe_wf_gid(wf, NULL),
               (int)vl, (const char *)verdict);
        troupe_wf_reason_set(wf, "payment declined");
        return TROUPE_OUTCOME_FAILURE; /* the widget is released */
    }
    if (e == TROUPE_OK)
        e = troupe_wf_step(wf, "ship", NULL, ship, a, NULL, NULL);
    return e == TROUPE_OK ? TROUPE_OUTCOME_SUCCESS : TROUPE_OUTCOME_ONGOING;
}

/* ---- the payment service: answers by callback ---- */

static void *
service(void *arg)
{
    app *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->n_inbox == 0 && !a->stop)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->n_inbox == 0)
            break;
        char id[TROUPE_AWAKEABLE_ID_MAX + 1];
        memcpy(id, a->inbox[--a->n_inbox], sizeof(id));
        pthread_mutex_unlock(&a->mu);
        troupe_err e = strncmp(id, "o2/", 3) == 0
                           ? troupe_awakeable_reject_wait(
                                 a->coord, id, strlen(id), "card declined", 13)
                           : troupe_awakeable_resolve_wait(
                                 a->coord, id, strlen(id), "paid", 4);
        if (e != TROUPE_OK && e != TROUPE_ECONFLICT) /* answered already */
            fprintf(stderr, "payment service: %s: %s\n", id,
                    troupe_err_name(e));
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static troupe_err
place(app *a, const char *gid)
{
    printf("order %s\n", gid);
    troupe_err e = troupe_workflow_submit_wait(a->coord, gid, strlen(gid),
                                               "order", NULL, 0);
    troupe_gtx_info in = {0};
    /* an example may poll; the tests drive loops with deadlines */
    for (int i = 0; e == TROUPE_OK && i < 3000; i++) {
        if ((e = troupe_gtx_query_wait(a->coord, gid, strlen(gid), &in)) !=
            TROUPE_OK)
            break;
        if (in.status == TROUPE_GTX_SUCCEED || in.status == TROUPE_GTX_FAILED)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    if (e == TROUPE_OK)
        printf("order %s: %s%s%s\n", gid,
               in.status == TROUPE_GTX_SUCCEED  ? "succeed"
               : in.status == TROUPE_GTX_FAILED ? "failed"
                                                : "not final",
               in.reason[0] ? ", " : "", in.reason);
    return e;
}

static int
run(troupe_runtime *rt, troupe_tables *t)
{
    app a = {.tables = t};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    troupe_err e = troupe_tables_create_wait(t, "stock", NULL, 0);
    if (e == TROUPE_OK)
        e = troupe_tables_create_wait(t, "orders", NULL, 0);
    if (e == TROUPE_OK)
        e = troupe_barrier_create_wait(t);
    troupe_rows *rows = NULL;
    if (e == TROUPE_OK &&
        troupe_table_get_wait(t, "stock", "widget", 6, &rows) == TROUPE_ENOENT)
        e = count_put(NULL, t, STOCK); /* the first run */
    troupe_rows_destroy(rows);
    troupe_target *stock_t = NULL;
    troupe_workflow *wf = NULL;
    troupe_target_opts so = {.name = "stock", .fn = stock_target, .arg = t};
    troupe_workflow_def wd = {.name = "order", .fn = order, .arg = &a};
    if (e == TROUPE_OK)
        e = troupe_target_create(rt, &so, &stock_t);
    if (e == TROUPE_OK)
        e = troupe_workflow_create(rt, &wd, &wf);
    troupe_coord_opts co = {.rt = rt, .tables = t, .retry_min_ms = 100};
    if (e == TROUPE_OK)
        e = troupe_coord_open_wait(&co, &a.coord);
    bool serving =
        e == TROUPE_OK && pthread_create(&a.service, NULL, service, &a) == 0;
    if (e == TROUPE_OK)
        e = place(&a, "o1");
    if (e == TROUPE_OK)
        e = place(&a, "o2");
    if (serving) {
        pthread_mutex_lock(&a.mu);
        a.stop = 1;
        pthread_cond_signal(&a.cv);
        pthread_mutex_unlock(&a.mu);
        pthread_join(a.service, NULL);
    }
    if (a.coord != NULL) {
        troupe_coord_stop_wait(a.coord);
        troupe_coord_destroy(a.coord);
    }
    if (wf != NULL) {
        troupe_workflow_stop_wait(wf);
        troupe_workflow_destroy(wf);
    }
    if (stock_t != NULL) {
        troupe_target_stop_wait(stock_t);
        troupe_target_destroy(stock_t);
    }
    int64_t n = 0;
    rows = NULL;
    if (e == TROUPE_OK)
        e = troupe_table_get_wait(t, "stock", "widget", 6, &rows);
    if (e == TROUPE_OK)
        e = count_of(rows, &n);
    troupe_rows_destroy(rows);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.mu);
    if (e != TROUPE_OK) {
        fprintf(stderr, "order_workflow: %s: %s\n", troupe_err_name(e),
                troupe_errmsg(e));
        return 1;
    }
    printf("stock: %lld (%s)\n", (long long)n,
           n == STOCK - 1 ? "one widget shipped" : "WRONG");
    return n == STOCK - 1 ? 0 : 1;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: order_workflow DIR\n");
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
        fprintf(stderr, "order_workflow: open: %s\n", troupe_err_name(e));
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
