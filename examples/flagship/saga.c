/*
 * The flagship's part 5 (main.c): orders placed as sagas across the
 * shop's tables.
 */
#include "flagship.h"

/* ---- 5. an order as a saga across the shop's tables ---- */

/*
 * The coordinator runs each order as a saga of two steps, both served by
 * the callback target "shop": 01 reserve stock (take the order's qty from
 * `stock`; compensate: give it back) and 02 charge (move the amount from
 * the customer's wallet to the till and write the order row; compensate:
 * refund and delete it). Each call is one troupe transaction holding the
 * barrier's check and the business writes, so a call delivered twice
 * does its business once, and a compensation whose action wrote nothing
 * is null. A step that refuses (short stock or credit) rolls its
 * transaction back, writing neither business rows nor a barrier row, and
 * answers FAILURE: the coordinator then compensates every step in
 * reverse. The handler takes everything from the task (the header's
 * barrier fields, the order in the payload), so it also finishes a saga
 * an earlier, killed run left unfinished when the coordinator reopens.
 */

#define SHOP_TARGET "shop"
enum { SAGA_WAIT_MS = 10000, SAGA_POLL_MS = 20, TOPUP = 100 };

/* This run's saga orders: the first is paid, the second exceeds bob's
 * credit and never can succeed (bob's wallet only ever gets refunds). */
static const struct {
    const char *customer, *item;
    int64_t qty, price; /* price per unit, in credits */
} saga_orders[] = {{"dave", "gadget", 2, 15}, {"bob", "widget", 3, 40}};

static const struct {
    const char *key;
    int64_t credit;
} wallets[] = {{"dave", 100}, {"bob", 50}, {"till", 0}};

/* An order as the saga's payload carries it. */
typedef struct saga_order {
    int64_t run, order, qty, amount;
    char customer[32], item[32];
} saga_order;

static troupe_err
saga_payload(troupe_packer *p, int64_t run, int k)
{
    troupe_pack_init(p);
    troupe_pack_map(p, 6);
    troupe_pack_cstr(p, "run");
    troupe_pack_int(p, run);
    troupe_pack_cstr(p, "order"); /* after section 3's orders of the run */
    troupe_pack_int(p, (int64_t)SHOP_RUN_ORDERS + k + 1);
    troupe_pack_cstr(p, "customer");
    troupe_pack_cstr(p, saga_orders[k].customer);
    troupe_pack_cstr(p, "item");
    troupe_pack_cstr(p, saga_orders[k].item);
    troupe_pack_cstr(p, "qty");
    troupe_pack_int(p, saga_orders[k].qty);
    troupe_pack_cstr(p, "amount");
    return troupe_pack_int(p, saga_orders[k].qty * saga_orders[k].price);
}

/* The payload is input like any other: false unless it is a whole order. */
static bool
saga_order_read(const void *doc, size_t len, saga_order *o)
{
    o->run = doc_int(doc, len, "run");
    o->order = doc_int(doc, len, "order");
    o->qty = doc_int(doc, len, "qty");
    o->amount = doc_int(doc, len, "amount");
    doc_str(doc, len, "customer", o->customer, sizeof(o->customer));
    doc_str(doc, len, "item", o->item, sizeof(o->item));
    return o->order > 0 && o->qty > 0 && o->amount > 0 &&
           o->customer[0] != '\0' && o->item[0] != '\0';
}

/* The barrier's fields from a branch task's header: four NUL-terminated
 * strings, mode, gid, branch id, op (borrowed from the task); false when
 * the header is not exactly that. */
static bool
branch_fields(const troupe_task *t, troupe_barrier_branch *b)
{
    const char *f[4];
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        const uint8_t *z = off < t->header_len
                               ? memchr(t->header + off, 0, t->header_len - off)
                               : NULL;
        if (z == NULL)
            return false;
        f[i] = (const char *)t->header + off;
        off = (size_t)(z - t->header) + 1;
    }
    if (t->kind != TROUPE_TASK_BRANCH || off != t->header_len)
        return false;
    *b = (troupe_barrier_branch){.mode = f[0],
                                 .gid = f[1],
                                 .gid_len = strlen(f[1]),
                                 .branch_id = f[2],
                                 .op = f[3]};
    return true;
}

/* The integer field k of row key of table, through tx. */
static troupe_err
txn_int(troupe_txn *tx, const char *table, const char *key, const char *k,
        int64_t *v)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_txn_get_wait(tx, table, key, strlen(key), &rows);
    if (e != TROUPE_OK)
        return e; /* leaves troupe_errmsg to the caller */
    *v = doc_int(rows->rows[0].doc, rows->rows[0].doc_len, k);
    troupe_rows_destroy(rows);
    return TROUPE_OK;
}

/* Buffers the one-field document {k: v} at key of table in tx. */
static troupe_err
txn_put_int(troupe_txn *tx, const char *table, const char *key, const char *k,
            int64_t v)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, k);
    troupe_err e = troupe_pack_int(&p, v);
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    if (e == TROUPE_OK)
        e = troupe_txn_upsert(tx, table, key, strlen(key), doc, len, NULL);
    troupe_pack_fini(&p);
    return e;
}

/* Step 01, reserve stock, through tx. *refused: the action found the
 * stock short and buffered nothing. what: for the handler's line. */
static troupe_err
reserve_stock(troupe_txn *tx, const saga_order *o, bool undo, bool *refused,
              char *what, size_t cap)
{
    int64_t have = 0;
    troupe_err e = txn_int(tx, "stock", o->item, "qty", &have);
    if (e != TROUPE_OK)
        return e;
    if (!undo && have < o->qty) {
        *refused = true;
        snprintf(what, cap, "%s stock %lld is short of %lld", o->item,
                 (long long)have, (long long)o->qty);
        return TROUPE_OK;
    }
    int64_t left = undo ? have + o->qty : have - o->qty;
    snprintf(what, cap, "%s %lld %s (stock %lld -> %lld)",
             undo ? "gave back" : "took", (long long)o->qty, o->item,
             (long long)have, (long long)left);
    return txn_put_int(tx, "stock", o->item, "qty", left);
}

/* Step 02, charge, through tx: the amount goes from the customer's
 * wallet to the till with the order row (key (run, order) as in section
 * 3, so it shows in the customer's by_customer range); undone, it comes
 * back and the row goes. *refused and what as reserve_stock's. */
static troupe_err
charge(troupe_txn *tx, const saga_order *o, bool undo, bool *refused,
       char *what, size_t cap)
{
    int64_t credit = 0, till = 0;
    troupe_err e = txn_int(tx, "wallets", o->customer, "credit", &credit);
    if (e == TROUPE_OK)
        e = txn_int(tx, "wallets", "till", "credit", &till);
    if (e != TROUPE_OK)
        return e;
    if (!undo && credit < o->amount) {
        *refused = true;
        snprintf(what, cap, "%s's credit %lld is short of %lld", o->customer,
                 (long long)credit, (long long)o->amount);
        return TROUPE_OK;
    }
    int64_t d = undo ? -o->amount : o->amount;
    snprintf(what, cap, "%s %s %lld (credit %lld -> %lld), %s order %lld",
             undo ? "refunded" : "charged", o->customer, (long long)o->amount,
             (long long)credit, (long long)(credit - d),
             undo ? "deleted" : "wrote", (long long)o->order);
    e = txn_put_int(tx, "wallets", o->customer, "credit", credit - d);
    if (e == TROUPE_OK)
        e = txn_put_int(tx, "wallets", "till", "credit", till + d);
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_int64(&w, o->run);
    troupe_key_put_int64(&w, o->order);
    const uint8_t *key = NULL;
    size_t klen = 0;
    e = troupe_key_writer_finish(&w, &key, &klen);
    if (e == TROUPE_OK && undo) {
        e = troupe_txn_delete(tx, "orders", key, klen);
    } else if (e == TROUPE_OK) {
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 5);
        troupe_pack_cstr(&p, "customer");
        troupe_pack_cstr(&p, o->customer);
        troupe_pack_cstr(&p, "item");
        troupe_pack_cstr(&p, o->item);
        troupe_pack_cstr(&p, "qty");
        troupe_pack_int(&p, o->qty);
        troupe_pack_cstr(&p, "amount");
        troupe_pack_int(&p, o->amount);
        troupe_pack_cstr(&p, "created_at");
        e = troupe_pack_int(&p, 0);
        size_t len = 0;
        const void *doc = troupe_pack_data(&p, &len);
        if (e == TROUPE_OK)
            e = troupe_txn_insert(tx, "orders", key, klen, doc, len, NULL);
        troupe_pack_fini(&p);
    }
    troupe_key_writer_fini(&w);
    return e;
}

/*
 * The target's callback, on the runtime's HOST lane: one branch call, in
 * one transaction with its barrier check, committed in every case but a
 * refusal (synced: the outcome must not outlive its effect). Anything
 * that goes wrong is UNKNOWN, which the coordinator retries: only a
 * business refusal is FAILURE.
 */
static troupe_outcome
on_branch(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    shop_saga *sg = arg;
    troupe_barrier_branch b;
    saga_order o;
    if (!branch_fields(t, &b) || !saga_order_read(t->body, t->body_len, &o) ||
        (strcmp(b.branch_id, "01") != 0 && strcmp(b.branch_id, "02") != 0) ||
        (strcmp(b.op, "action") != 0 && strcmp(b.op, "compensate") != 0)) {
        printf("shop:   a branch task the shop did not submit: UNKNOWN\n");
        return TROUPE_OUTCOME_UNKNOWN;
    }
    bool undo = strcmp(b.op, "compensate") == 0;
    bool stock = strcmp(b.branch_id, "01") == 0;
    bool refused = false;
    char what[160] = "";
    troupe_barrier_verdict v = 0;
    troupe_txn *tx = NULL;
    const char *call = "begin";
    troupe_err e = troupe_txn_begin(sg->t, NULL, &tx);
    if (e == TROUPE_OK) {
        call = "barrier";
        e = troupe_barrier_check_wait(tx, &b, &v);
    }
    if (e == TROUPE_OK && v == TROUPE_BARRIER_EXECUTE) {
        call = stock ? "reserve stock" : "charge";
        e = stock ? reserve_stock(tx, &o, undo, &refused, what, sizeof(what))
                  : charge(tx, &o, undo, &refused, what, sizeof(what));
    }
    if (e == TROUPE_OK && refused) {
        /* no business row, and no barrier row: a FAILURE's barrier is
         * whatever its compensation writes, a null compensation */
        call = "rollback";
        e = troupe_txn_rollback(tx);
    } else if (e == TROUPE_OK) {
        call = "commit";
        e = troupe_txn_commit_wait(tx, TROUPE_SYNC_ON);
    }
    char why[TROUPE_ERRMSG_MAX] = "";
    if (e != TROUPE_OK)
        snprintf(why, sizeof(why), "%s", troupe_errmsg(e));
    troupe_txn_destroy(tx);
    troupe_outcome out = TROUPE_OUTCOME_SUCCESS;
    if (e != TROUPE_OK) {
        printf("shop:   %s %s: %s: %s (%s): UNKNOWN, retried later\n",
               b.branch_id, b.op, call, why, troupe_err_name(e));
        out = TROUPE_OUTCOME_UNKNOWN;
    } else if (refused) {
        printf("shop:   %s %s: %s: FAILURE, rolled back, nothing written\n",
               b.branch_id, b.op, what);
        out = TROUPE_OUTCOME_FAILURE;
    } else if (v == TROUPE_BARRIER_NULL_COMPENSATION) {
        printf("shop:   %s %s: null compensation (the barrier: its action "
               "wrote nothing): SUCCESS\n",
               b.branch_id, b.op);
    } else if (v == TROUPE_BARRIER_DUPLICATED) {
        printf("shop:   %s %s: duplicated (the barrier: done before): "
               "SUCCESS\n",
               b.branch_id, b.op);
    } else {
        printf("shop:   %s %s: %s: SUCCESS\n", b.branch_id, b.op, what);
    }
    pthread_mutex_lock(&sg->mu);
    sg->calls++;
    if (e == TROUPE_OK && v == TROUPE_BARRIER_NULL_COMPENSATION)
        sg->nulls++;
    pthread_cond_broadcast(&sg->cv);
    pthread_mutex_unlock(&sg->mu);
    return out;
}

troupe_err
shop_saga_open(troupe_runtime *rt, troupe_tables *t, shop_saga *sg)
{
    printf("== orders as sagas across the shop's tables ==\n");
    sg->t = t;
    char **names = NULL;
    size_t nn = 0;
    bool had = false;
    troupe_err e = troupe_tables_list(t, &names, &nn);
    if (e != TROUPE_OK)
        return e;
    for (size_t k = 0; k < nn; k++)
        had = had || strcmp(names[k], "wallets") == 0;
    troupe_free(names);
    if ((e = troupe_tables_create_wait(t, "wallets", NULL, 0)) != TROUPE_OK ||
        (e = troupe_barrier_create_wait(t)) != TROUPE_OK) {
        fprintf(stderr, "shop: %s\n", troupe_errmsg(e));
        return e;
    }
    printf("shop: %s table wallets (credit per customer; the till takes "
           "the payments)\n",
           had ? "reused" : "created");
    int added = 0, there = 0;
    for (size_t i = 0; i < sizeof(wallets) / sizeof(wallets[0]); i++) {
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 1);
        troupe_pack_cstr(&p, "credit");
        e = troupe_pack_int(&p, wallets[i].credit);
        e = write_doc(t, troupe_table_insert_wait, "wallets", wallets[i].key,
                      strlen(wallets[i].key), &p, e, NULL);
        if (e == TROUPE_OK)
            added++;
        else if (e == TROUPE_EEXIST)
            there++;
        else
            return e;
    }
    printf("shop: wallets: %d added, %d already there\n", added, there);
    /* The target first: the coordinator's open drives what an earlier
     * run left unfinished, and a submit checks its targets exist. */
    troupe_target_opts to = {.name = SHOP_TARGET, .fn = on_branch, .arg = sg};
    if ((e = troupe_target_create(rt, &to, &sg->target)) != TROUPE_OK) {
        fprintf(stderr, "shop: target: %s\n", troupe_errmsg(e));
        return e;
    }
    /* Short backoffs: a call that came back UNKNOWN runs again soon. */
    troupe_coord_opts co = {
        .rt = rt, .tables = t, .retry_min_ms = 200, .retry_max_ms = 2000};
    if ((e = troupe_coord_open_wait(&co, &sg->coord)) != TROUPE_OK) {
        fprintf(stderr, "shop: coordinator: %s\n", troupe_errmsg(e));
        return e;
    }
    printf("shop: coordinator open, branch target \"%s\" serves both steps\n",
           SHOP_TARGET);
    return TROUPE_OK;
}

/* Stops the coordinator (nothing more is dispatched), then the target;
 * before the tables stop. What is not there is skipped. */
void
shop_saga_close(shop_saga *sg)
{
    if (sg->coord != NULL) {
        troupe_coord_stop_wait(sg->coord);
        troupe_coord_destroy(sg->coord);
        sg->coord = NULL;
    }
    if (sg->target != NULL) {
        troupe_target_stop_wait(sg->target);
        troupe_target_destroy(sg->target);
        sg->target = NULL;
    }
}

/* The integer field k of row key of table, outside any transaction. */
static troupe_err
read_int(troupe_tables *t, const char *table, const char *key, const char *k,
         int64_t *v)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(t, table, key, strlen(key), &rows);
    if (e == TROUPE_OK)
        *v = doc_int(rows->rows[0].doc, rows->rows[0].doc_len, k);
    troupe_rows_destroy(rows);
    return e;
}

/* Tops row key of table up by add when its field k is below need, as
 * section 3 restocks: so that the paid order stays paid however many
 * runs went before. what and verb name it and the top-up in the line. */
static troupe_err
top_up(troupe_tables *t, const char *table, const char *key, const char *k,
       int64_t need, int64_t add, const char *what, const char *verb)
{
    int64_t have = 0;
    troupe_err e = read_int(t, table, key, k, &have);
    if (e != TROUPE_OK || have >= need)
        return e;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, k);
    e = troupe_pack_int(&p, have + add);
    e = write_doc(t, troupe_table_update_wait, table, key, strlen(key), &p, e,
                  NULL);
    if (e == TROUPE_OK)
        printf("shop: %s %lld was short of %lld: %s %lld\n", what,
               (long long)have, (long long)need, verb, (long long)add);
    return e;
}

/* What a saga moves: the item's stock, the customer's credit, the till. */
typedef struct saga_books {
    int64_t stock, credit, till;
    bool order; /* the saga's order row is there */
} saga_books;

static troupe_err
read_books(troupe_tables *t, int64_t run, int k, saga_books *b)
{
    troupe_err e = read_int(t, "stock", saga_orders[k].item, "qty", &b->stock);
    if (e == TROUPE_OK)
        e = read_int(t, "wallets", saga_orders[k].customer, "credit",
                     &b->credit);
    if (e == TROUPE_OK)
        e = read_int(t, "wallets", "till", "credit", &b->till);
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_int64(&w, run);
    troupe_key_put_int64(&w, (int64_t)SHOP_RUN_ORDERS + k + 1);
    const uint8_t *key = NULL;
    size_t klen = 0;
    troupe_err ke = troupe_key_writer_finish(&w, &key, &klen);
    troupe_rows *rows = NULL;
    if (e == TROUPE_OK)
        e = ke;
    if (e == TROUPE_OK)
        e = troupe_table_get_wait(t, "orders", key, klen, &rows);
    b->order = e == TROUPE_OK;
    if (e == TROUPE_ENOENT)
        e = TROUPE_OK;
    troupe_rows_destroy(rows);
    troupe_key_writer_fini(&w);
    return e;
}

static const char *
gtx_status_name(troupe_gtx_status s)
{
    static const char *const names[] = {[TROUPE_GTX_PREPARED] = "prepared",
                                        [TROUPE_GTX_SUBMITTED] = "submitted",
                                        [TROUPE_GTX_ABORTING] = "aborting",
                                        [TROUPE_GTX_SUCCEED] = "succeed",
                                        [TROUPE_GTX_FAILED] = "failed"};
    return s >= TROUPE_GTX_PREPARED && s <= TROUPE_GTX_FAILED ? names[s] : "?";
}

static uint64_t
saga_calls(shop_saga *sg, uint64_t *nulls)
{
    pthread_mutex_lock(&sg->mu);
    uint64_t n = sg->calls;
    if (nulls != NULL)
        *nulls = sg->nulls;
    pthread_mutex_unlock(&sg->mu);
    return n;
}

/*
 * Waits for gid to end, at most SAGA_WAIT_MS: queries it each time the
 * handler answers a call, and every SAGA_POLL_MS besides, since the
 * transition after the last call commits just after the call returned.
 * ETIMEDOUT when it did not end in time.
 */
static troupe_err
saga_wait(shop_saga *sg, const char *gid, troupe_gtx_info *info)
{
    int64_t deadline = troupe_now_ms() + SAGA_WAIT_MS;
    for (;;) {
        uint64_t seen = saga_calls(sg, NULL);
        troupe_err e = troupe_gtx_query_wait(sg->coord, gid, strlen(gid), info);
        if (e != TROUPE_OK)
            return e;
        if (info->status == TROUPE_GTX_SUCCEED ||
            info->status == TROUPE_GTX_FAILED)
            return TROUPE_OK;
        int64_t now = troupe_now_ms();
        if (now >= deadline)
            return TROUPE_ETIMEDOUT;
        int64_t ms =
            deadline - now < SAGA_POLL_MS ? deadline - now : SAGA_POLL_MS;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(ms / 1000);
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&sg->mu);
        int rc = 0;
        while (sg->calls == seen && rc == 0)
            rc = pthread_cond_timedwait(&sg->cv, &sg->mu, &ts);
        pthread_mutex_unlock(&sg->mu);
    }
}

/* Submits saga order k as gid, waits for its end and checks that the
 * books add up: moved by exactly the order when it succeeded, untouched
 * when it failed. */
static troupe_err
place_saga(shop_saga *sg, int64_t run, int k, const char *gid)
{
    int64_t qty = saga_orders[k].qty, amount = qty * saga_orders[k].price;
    saga_books before, after;
    troupe_err e = read_books(sg->t, run, k, &before);
    if (e != TROUPE_OK)
        return e;
    troupe_packer p;
    e = saga_payload(&p, run, k);
    size_t len = 0;
    const void *pay = troupe_pack_data(&p, &len);
    troupe_saga_step steps[2] = {
        {{SHOP_TARGET, pay, len}, {SHOP_TARGET, pay, len}},
        {{SHOP_TARGET, pay, len}, {SHOP_TARGET, pay, len}}};
    printf("shop: saga %s: %s buys %lld %s for %lld: 01 reserve stock, "
           "02 charge\n",
           gid, saga_orders[k].customer, (long long)qty, saga_orders[k].item,
           (long long)amount);
    uint64_t nulls0 = 0, calls0 = saga_calls(sg, &nulls0);
    if (e == TROUPE_OK) {
        e = troupe_saga_submit_wait(sg->coord, gid, strlen(gid), steps, 2,
                                    NULL);
        if (e != TROUPE_OK)
            fprintf(stderr, "shop: saga %s: submit: %s\n", gid,
                    troupe_errmsg(e));
    }
    troupe_pack_fini(&p);
    troupe_gtx_info info;
    if (e == TROUPE_OK && (e = saga_wait(sg, gid, &info)) != TROUPE_OK)
        fprintf(stderr, "shop: saga %s: did not end: %s\n", gid,
                troupe_errmsg(e));
    if (e == TROUPE_OK)
        e = read_books(sg->t, run, k, &after);
    if (e != TROUPE_OK)
        return e;
    uint64_t nulls = 0, calls = saga_calls(sg, &nulls) - calls0;
    printf("shop: saga %s: %s after %llu branch calls%s%s\n", gid,
           gtx_status_name(info.status), (unsigned long long)calls,
           info.reason[0] != '\0' ? ", reason: " : "", info.reason);
    printf("shop: saga %s: stock %s %lld -> %lld, credit %s %lld -> %lld, "
           "till %lld -> %lld (together %lld -> %lld), order row %s\n",
           gid, saga_orders[k].item, (long long)before.stock,
           (long long)after.stock, saga_orders[k].customer,
           (long long)before.credit, (long long)after.credit,
           (long long)before.till, (long long)after.till,
           (long long)(before.credit + before.till),
           (long long)(after.credit + after.till),
           after.order ? "written" : "none");
    bool ok = info.status == TROUPE_GTX_SUCCEED;
    int64_t d = ok ? 1 : 0;
    if (after.stock != before.stock - d * qty ||
        after.credit != before.credit - d * amount ||
        after.till != before.till + d * amount || after.order != ok ||
        (!ok && nulls - nulls0 != 1)) {
        fprintf(stderr, "shop: saga %s: the books do not add up\n", gid);
        return TROUPE_ESTATE;
    }
    return TROUPE_OK;
}

troupe_err
shop_sagas(shop_saga *sg, int64_t run)
{
    /* Stock for both reservations and credit for the paid order, so the
     * failed one fails on bob's credit and nothing else. */
    troupe_err e = TROUPE_OK;
    char what[64];
    for (int k = 0; e == TROUPE_OK && k < 2; k++) {
        snprintf(what, sizeof(what), "%s stock", saga_orders[k].item);
        e = top_up(sg->t, "stock", saga_orders[k].item, "qty",
                   saga_orders[k].qty, RESTOCK, what, "restocked");
    }
    snprintf(what, sizeof(what), "%s's credit", saga_orders[0].customer);
    if (e == TROUPE_OK)
        e = top_up(sg->t, "wallets", saga_orders[0].customer, "credit",
                   saga_orders[0].qty * saga_orders[0].price, TOPUP, what,
                   "topped up");
    /* gids unique per run: a gid submitted again drives nothing */
    char gid[2][64];
    for (int k = 0; k < 2; k++)
        snprintf(gid[k], sizeof(gid[k]), "shop-order-%lld-%d", (long long)run,
                 (int)SHOP_RUN_ORDERS + k + 1);
    for (int k = 0; e == TROUPE_OK && k < 2; k++)
        e = place_saga(sg, run, k, gid[k]);
    if (e != TROUPE_OK)
        return e;

    /* The paid order's gid again: OK, and nothing runs twice. */
    saga_books before, after;
    uint64_t calls0 = saga_calls(sg, NULL);
    if ((e = read_books(sg->t, run, 0, &before)) != TROUPE_OK)
        return e;
    troupe_packer p;
    e = saga_payload(&p, run, 0);
    size_t len = 0;
    const void *pay = troupe_pack_data(&p, &len);
    troupe_saga_step steps[2] = {
        {{SHOP_TARGET, pay, len}, {SHOP_TARGET, pay, len}},
        {{SHOP_TARGET, pay, len}, {SHOP_TARGET, pay, len}}};
    troupe_err se = e;
    if (e == TROUPE_OK)
        se = troupe_saga_submit_wait(sg->coord, gid[0], strlen(gid[0]), steps,
                                     2, NULL);
    troupe_pack_fini(&p);
    troupe_gtx_info info;
    if (e == TROUPE_OK && se == TROUPE_OK)
        e = troupe_gtx_query_wait(sg->coord, gid[0], strlen(gid[0]), &info);
    if (e == TROUPE_OK)
        e = read_books(sg->t, run, 0, &after);
    if (e != TROUPE_OK || se != TROUPE_OK)
        return e != TROUPE_OK ? e : se;
    uint64_t calls = saga_calls(sg, NULL) - calls0;
    printf("shop: saga %s submitted again: %s, still %s, %llu branch calls, "
           "stock %s %lld -> %lld, credit %s %lld -> %lld\n",
           gid[0], troupe_err_name(se), gtx_status_name(info.status),
           (unsigned long long)calls, saga_orders[0].item,
           (long long)before.stock, (long long)after.stock,
           saga_orders[0].customer, (long long)before.credit,
           (long long)after.credit);
    if (calls != 0 || info.status != TROUPE_GTX_SUCCEED ||
        after.stock != before.stock || after.credit != before.credit)
        return TROUPE_ESTATE;
    return TROUPE_OK;
}
