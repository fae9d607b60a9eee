/*
 * The flagship's parts 3 and 4 (main.c): a small shop on tables and
 * indexes, its events on the durable queue, and run_shop, which opens
 * the database for them and for part 5 (saga.c).
 */
#include "flagship.h"

/* ---- 3. a small shop on tables and indexes ---- */

/* The shop talks to the tables from main, a plain thread, through the
 * blocking _wait twins of troupe/table.h and troupe/txn.h (an event-loop
 * host would use the asynchronous calls and their callbacks instead). */

static const troupe_index_field email_field[] = {
    {"email", TROUPE_FIELD_STRING}};
static const troupe_index_field customer_time_fields[] = {
    {"customer", TROUPE_FIELD_STRING}, {"created_at", TROUPE_FIELD_TIMESTAMP}};

static const struct {
    const char *key, *name, *email;
} customers[] = {{"alice", "Alice Moreau", "alice@example.com"},
                 {"bob", "Bob Okafor", "bob@example.com"},
                 {"carol", "Carol Jones", "carol@example.com"},
                 {"dave", "Dave Lindqvist", "dave@example.com"}};

/* This run's orders. */
static const struct {
    const char *customer, *item;
    int64_t qty;
} orders[] = {{"alice", "widget", 2},
              {"bob", "gadget", 1},
              {"alice", "gadget", 1},
              {"carol", "widget", 1},
              {"alice", "widget", 3}};

static const char *const items[] = {"widget", "gadget"};
enum { HOLD_MS = 200 };
_Static_assert(sizeof(orders) / sizeof(orders[0]) == SHOP_RUN_ORDERS,
               "flagship.h counts the orders of a run");

/* The shop's event queue. */
#define EVENTS "shop.events"
enum { EVENT_PARTS = 2, REMIND_MS = 1000, RECHECK_MS = 300 };

/* Leaves r on the value of key k of document doc (one msgpack map);
 * false when the document has no such key. */
static bool
doc_field(troupe_reader *r, const void *doc, size_t len, const char *k)
{
    uint32_t n = 0;
    if (troupe_reader_init(r, doc, len) != TROUPE_OK ||
        troupe_read_map(r, &n) != TROUPE_OK)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        size_t sl;
        if (troupe_read_str(r, 256, &s, &sl) != TROUPE_OK)
            return false;
        if (sl == strlen(k) && memcmp(s, k, sl) == 0)
            return true;
        if (troupe_read_skip(r) != TROUPE_OK)
            return false;
    }
    return false;
}

int64_t
doc_int(const void *doc, size_t len, const char *k)
{
    troupe_reader r;
    int64_t v = 0;
    if (doc_field(&r, doc, len, k))
        troupe_read_int(&r, &v);
    return v;
}

void
doc_str(const void *doc, size_t len, const char *k, char *buf, size_t cap)
{
    troupe_reader r;
    const char *s = "";
    size_t n = 0;
    if (doc_field(&r, doc, len, k) &&
        troupe_read_str(&r, cap - 1, &s, &n) != TROUPE_OK)
        n = 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

/* Writes the document packed in p with op, then fini's p. `packed` is
 * what the last pack call returned: the packer's error is sticky, so that
 * is the first error of the whole document, if any. */

troupe_err
write_doc(troupe_tables *t, write_fn op, const char *table, const void *key,
          size_t klen, troupe_packer *p, troupe_err packed,
          const troupe_write_opts *wo)
{
    size_t len = 0;
    const void *doc = troupe_pack_data(p, &len);
    troupe_err e = packed;
    if (e == TROUPE_OK)
        e = op(t, table, key, klen, doc, len, wo);
    troupe_pack_fini(p);
    return e;
}

static troupe_err
write_qty(troupe_tables *t, write_fn op, const char *key, int64_t qty,
          const troupe_write_opts *wo)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "qty");
    troupe_err e = troupe_pack_int(&p, qty);
    return write_doc(t, op, "stock", key, strlen(key), &p, e, wo);
}

/* The qty of stock row `key`; ENOENT when absent (or expired). */
static troupe_err
read_qty(troupe_tables *t, const char *key, int64_t *qty)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(t, "stock", key, strlen(key), &rows);
    if (e == TROUPE_OK)
        *qty = doc_int(rows->rows[0].doc, rows->rows[0].doc_len, "qty");
    troupe_rows_destroy(rows);
    return e;
}

static troupe_err
shop_tables(troupe_tables *t)
{
    static const troupe_index_spec customer_idx[] = {{.name = "by_email",
                                                      .unique = true,
                                                      .fields = email_field,
                                                      .n_fields = 1}};
    static const troupe_index_spec order_idx[] = {
        {.name = "by_customer", .fields = customer_time_fields, .n_fields = 2}};
    static const struct {
        const char *name;
        const troupe_index_spec *idx;
        size_t n_idx;
        const char *what;
    } tables[] = {
        {"customers", customer_idx, 1, "unique index by_email (email)"},
        {"orders", order_idx, 1, "index by_customer (customer, created_at)"},
        {"stock", NULL, 0, "no index"}};
    char **names = NULL;
    size_t nn = 0;
    troupe_err le = troupe_tables_list(t, &names, &nn);
    if (le != TROUPE_OK)
        return le;
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        bool had = false;
        for (size_t k = 0; k < nn; k++)
            had = had || strcmp(names[k], tables[i].name) == 0;
        /* idempotent: the same spec again is OK; another one EEXIST */
        troupe_err e = troupe_tables_create_wait(
            t, tables[i].name, tables[i].idx, tables[i].n_idx);
        if (e == TROUPE_OK)
            printf("shop: %s table %s, %s\n", had ? "reused" : "created",
                   tables[i].name, tables[i].what);
        else if (e == TROUPE_EEXIST)
            printf("shop: table %s exists with other indexes (EEXIST)\n",
                   tables[i].name);
        if (e != TROUPE_OK) {
            troupe_free(names);
            return e;
        }
    }
    troupe_free(names);
    return TROUPE_OK;
}

static troupe_err
customer_doc_insert(troupe_tables *t, const char *key, const char *name,
                    const char *email)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, name);
    troupe_pack_cstr(&p, "email");
    troupe_err e = troupe_pack_cstr(&p, email);
    return write_doc(t, troupe_table_insert_wait, "customers", key, strlen(key),
                     &p, e, NULL);
}

static troupe_err
shop_customers(troupe_tables *t)
{
    int added = 0, there = 0;
    for (size_t i = 0; i < sizeof(customers) / sizeof(customers[0]); i++) {
        troupe_err e = customer_doc_insert(
            t, customers[i].key, customers[i].name, customers[i].email);
        if (e == TROUPE_OK)
            added++;
        else if (e == TROUPE_EEXIST)
            there++;
        else
            return e;
    }
    printf("shop: customers: %d added, %d already there\n", added, there);

    /* A new customer with alice's email: the unique index refuses the
     * whole write. */
    troupe_err e =
        customer_doc_insert(t, "mallory", "Mallory", "alice@example.com");
    if (e != TROUPE_ECONSTRAINT)
        return e == TROUPE_OK ? TROUPE_ESTATE : e;
    troupe_rows *rows = NULL;
    troupe_err ge = troupe_table_get_wait(t, "customers", "mallory", 7, &rows);
    troupe_rows_destroy(rows);
    if (ge != TROUPE_ENOENT)
        return ge == TROUPE_OK ? TROUPE_ESTATE : ge;
    printf("shop: mallory with alice@example.com refused: %s (%s); "
           "mallory not stored\n",
           troupe_err_name(e), troupe_strerror(e));

    /* Look a customer up by email through the unique index. */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_err packed = troupe_pack_cstr(&p, "carol@example.com");
    size_t vlen = 0;
    const void *v = troupe_pack_data(&p, &vlen);
    troupe_index_query q = {
        .values = v, .values_len = vlen, .limit = 1, .rows = true};
    troupe_index_result *res = NULL;
    e = packed != TROUPE_OK
            ? packed
            : troupe_tables_query_wait(t, "customers", "by_email", &q, &res);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return e;
    if (res->n == 1) {
        char name[64];
        doc_str(res->hits[0].val, res->hits[0].val_len, "name", name,
                sizeof(name));
        printf("shop: by_email carol@example.com -> %.*s (%s)\n",
               (int)res->hits[0].pk_len, (const char *)res->hits[0].pk, name);
    }
    troupe_index_result_destroy(res);
    return TROUPE_OK;
}

/*
 * One order, in one transaction: read the item's stock, write it back
 * less qty (restocking first when short) and insert the order. The commit
 * stores both or neither; if another writer changed the stock row since
 * the transaction's snapshot, the commit fails with ECONFLICT and
 * troupe_txn_run_wait replays the function from a fresh snapshot.
 */
typedef struct order_txn {
    troupe_queues *qs;
    int64_t run;
    int i;
    int64_t left;   /* stock after the order */
    bool restocked; /* the last attempt restocked first */
} order_txn;

/* Packs an event payload: {"kind", "run", "t0", "order", "customer",
 * "item", "qty"} (the last four for orders). */
static troupe_err
event_payload(troupe_packer *p, const char *kind, int64_t run, int64_t t0,
              int order)
{
    troupe_pack_init(p);
    troupe_pack_map(p, order > 0 ? 7 : 3);
    troupe_pack_cstr(p, "kind");
    troupe_pack_cstr(p, kind);
    troupe_pack_cstr(p, "run");
    troupe_pack_int(p, run);
    troupe_pack_cstr(p, "t0");
    troupe_err e = troupe_pack_int(p, t0);
    if (order > 0) {
        troupe_pack_cstr(p, "order");
        troupe_pack_int(p, order);
        troupe_pack_cstr(p, "customer");
        troupe_pack_cstr(p, orders[order - 1].customer);
        troupe_pack_cstr(p, "item");
        troupe_pack_cstr(p, orders[order - 1].item);
        troupe_pack_cstr(p, "qty");
        e = troupe_pack_int(p, orders[order - 1].qty);
    }
    return e;
}

/* "order placed", inside the order's transaction: due now, business key
 * the customer (so one customer's events share a partition), owned by the
 * customer. */
static troupe_err
publish_order(order_txn *o, troupe_txn *tx)
{
    char id[64];
    snprintf(id, sizeof(id), "order:%lld:%d", (long long)o->run, o->i + 1);
    const char *cust = orders[o->i].customer;
    int64_t now = troupe_now_ms();
    troupe_packer p;
    troupe_err e = event_payload(&p, "order placed", o->run, now, o->i + 1);
    troupe_queue_event ev = {.id = id,
                             .id_len = strlen(id),
                             .key = cust,
                             .key_len = strlen(cust),
                             .time_ms = now,
                             .owner_kind = "customer",
                             .owner_kind_len = 8,
                             .owner_id = cust,
                             .owner_id_len = strlen(cust)};
    ev.payload = troupe_pack_data(&p, &ev.payload_len);
    if (e == TROUPE_OK)
        e = troupe_queue_publish_in(o->qs, tx, EVENTS, &ev);
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
order_fn(troupe_txn *tx, void *arg)
{
    order_txn *o = arg;
    const char *item = orders[o->i].item;
    int64_t qty = orders[o->i].qty, have = 0;
    troupe_rows *rows = NULL;
    troupe_err e = troupe_txn_get_wait(tx, "stock", item, strlen(item), &rows);
    if (e != TROUPE_OK)
        return e;
    have = doc_int(rows->rows[0].doc, rows->rows[0].doc_len, "qty");
    troupe_rows_destroy(rows);
    o->restocked = have < qty;
    if (o->restocked)
        have += RESTOCK;
    o->left = have - qty;

    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "qty");
    e = troupe_pack_int(&p, o->left);
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    if (e == TROUPE_OK)
        e = troupe_txn_upsert(tx, "stock", item, strlen(item), doc, len, NULL);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return e;

    /* Order ids: (run start, n), tuple-encoded. The document declares
     * created_at, so the commit stamps it. */
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_int64(&w, o->run);
    troupe_key_put_int64(&w, o->i + 1);
    const uint8_t *key = NULL;
    size_t klen = 0;
    e = troupe_key_writer_finish(&w, &key, &klen);
    troupe_pack_init(&p);
    troupe_pack_map(&p, 4);
    troupe_pack_cstr(&p, "customer");
    troupe_pack_cstr(&p, orders[o->i].customer);
    troupe_pack_cstr(&p, "item");
    troupe_pack_cstr(&p, item);
    troupe_pack_cstr(&p, "qty");
    troupe_pack_int(&p, qty);
    troupe_pack_cstr(&p, "created_at");
    troupe_err packed = troupe_pack_int(&p, 0);
    doc = troupe_pack_data(&p, &len);
    if (e == TROUPE_OK)
        e = packed;
    if (e == TROUPE_OK)
        e = troupe_txn_insert(tx, "orders", key, klen, doc, len, NULL);
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_OK)
        e = publish_order(o, tx);
    return e;
}

static troupe_err
place_order(troupe_tables *t, troupe_queues *qs, int64_t run, int i)
{
    order_txn o = {.qs = qs, .run = run, .i = i};
    uint32_t attempts = 0;
    troupe_txn_retry r = {.sync = TROUPE_SYNC_ON, .attempts = &attempts};
    troupe_err e = troupe_txn_run_wait(t, NULL, &r, order_fn, &o);
    if (e != TROUPE_OK)
        return e;
    if (o.restocked)
        printf("shop: %s was short: restocked %d in the same transaction\n",
               orders[i].item, RESTOCK);
    printf("shop: order %d: %s buys %lld %s (%s stock now %lld), one "
           "transaction, %u attempt%s\n",
           i + 1, orders[i].customer, (long long)orders[i].qty, orders[i].item,
           orders[i].item, (long long)o.left, attempts,
           attempts == 1 ? "" : "s");
    return TROUPE_OK;
}

static troupe_err
shop_orders(troupe_tables *t, troupe_queues *qs, int64_t run)
{
    troupe_err e = TROUPE_OK;
    printf("shop: stock");
    for (size_t i = 0; e == TROUPE_OK && i < sizeof(items) / sizeof(items[0]);
         i++) {
        e = write_qty(t, troupe_table_insert_wait, items[i], RESTOCK, NULL);
        if (e == TROUPE_OK || e == TROUPE_EEXIST) {
            int64_t have = 0;
            if ((e = read_qty(t, items[i], &have)) == TROUPE_OK)
                printf(" %s %lld", items[i], (long long)have);
        }
    }
    printf("\n");
    for (int i = 0;
         e == TROUPE_OK && i < (int)(sizeof(orders) / sizeof(orders[0])); i++)
        e = place_order(t, qs, run, i);
    if (e != TROUPE_OK)
        return e;

    /* Order 1 again, same id: the commit finds the order already there and
     * fails as a whole, so its stock decrement is not written either. */
    int64_t before = 0, after = 0;
    order_txn again = {.qs = qs, .run = run, .i = 0};
    e = read_qty(t, orders[0].item, &before);
    troupe_err ae = e == TROUPE_OK
                        ? troupe_txn_run_wait(t, NULL, NULL, order_fn, &again)
                        : e;
    if (e == TROUPE_OK)
        e = read_qty(t, orders[0].item, &after);
    if (e != TROUPE_OK)
        return e;
    if (ae != TROUPE_EEXIST || after != before)
        return ae != TROUPE_OK && ae != TROUPE_EEXIST ? ae : TROUPE_ESTATE;
    printf("shop: order 1 again (same id): %s, %s stock still %lld: the "
           "transaction wrote nothing\n",
           troupe_err_name(ae), orders[0].item, (long long)after);

    /* How many orders alice has in all (prefix of the composite index),
     * then this run's ones: the range [(alice, run), (alice, max)), which
     * comes back in created_at order. */
    troupe_packer v, from, to;
    troupe_pack_init(&v);
    troupe_pack_array(&v, 1);
    e = troupe_pack_cstr(&v, "alice");
    troupe_pack_init(&from);
    troupe_pack_array(&from, 2);
    troupe_pack_cstr(&from, "alice");
    troupe_err fe = troupe_pack_int(&from, run);
    troupe_pack_init(&to);
    troupe_pack_array(&to, 2);
    troupe_pack_cstr(&to, "alice");
    troupe_err te = troupe_pack_int(&to, INT64_MAX);
    troupe_index_query q = {.limit = 1};
    q.values = troupe_pack_data(&v, &q.values_len);
    uint64_t total = 0;
    troupe_index_result *res = NULL;
    e = e != TROUPE_OK ? e : fe != TROUPE_OK ? fe : te;
    if (e == TROUPE_OK)
        e = troupe_tables_count_wait(t, "orders", "by_customer", &q, &total);
    if (e == TROUPE_OK) {
        q = (troupe_index_query){.limit = 100, .rows = true};
        q.from = troupe_pack_data(&from, &q.from_len);
        q.to = troupe_pack_data(&to, &q.to_len);
        e = troupe_tables_query_wait(t, "orders", "by_customer", &q, &res);
    }
    troupe_pack_fini(&v);
    troupe_pack_fini(&from);
    troupe_pack_fini(&to);
    if (e != TROUPE_OK)
        return e;
    printf("shop: alice has %llu orders in all (count on by_customer)\n",
           (unsigned long long)total);
    printf("shop: alice's orders this run, by_customer range in created_at "
           "order: %zu\n",
           res->n);
    int64_t last = 0;
    for (size_t i = 0; i < res->n; i++) {
        const troupe_index_hit *h = &res->hits[i];
        char item[32];
        doc_str(h->val, h->val_len, "item", item, sizeof(item));
        int64_t at = doc_int(h->val, h->val_len, "created_at");
        if (at < last)
            e = TROUPE_ECORRUPT; /* not in created_at order */
        last = at;
        printf("shop:   %lld %s, created_at run start + %lld ms\n",
               (long long)doc_int(h->val, h->val_len, "qty"), item,
               (long long)(at - run));
    }
    troupe_index_result_destroy(res);
    return e;
}

static troupe_err
print_page(troupe_tables *t, const troupe_scan_opts *so, int page,
           troupe_rows **out)
{
    troupe_err e = troupe_table_scan_wait(t, "customers", so, out);
    if (e != TROUPE_OK)
        return e;
    troupe_rows *rows = *out;
    printf("shop: customers page %d:", page);
    for (size_t i = 0; i < rows->n; i++)
        printf(" %.*s", (int)rows->rows[i].key_len,
               (const char *)rows->rows[i].key);
    printf(" (%s)\n", rows->more ? "more" : "end");
    return TROUPE_OK;
}

static troupe_err
shop_scan(troupe_tables *t)
{
    /* Pages of 3 customers; the second continues after the first's
     * cursor, the exact key of its last row. */
    troupe_scan_opts so = {.limit = 3};
    troupe_rows *first = NULL, *second = NULL;
    troupe_err e = print_page(t, &so, 1, &first);
    if (e == TROUPE_OK && first->more) {
        so.after = first->cursor;
        so.after_len = first->cursor_len;
        e = print_page(t, &so, 2, &second);
    }
    troupe_rows_destroy(first);
    troupe_rows_destroy(second);
    return e;
}

static troupe_err
shop_expiry(troupe_tables *t)
{
    /* A stock hold for carol that lapses after HOLD_MS. insert treats an
     * expired row as absent, so the next run can insert it again. */
    static const char hold[] = "hold:carol:gadget";
    troupe_write_opts wo = {.expires_at_ms = troupe_now_ms() + HOLD_MS};
    troupe_err e = write_qty(t, troupe_table_insert_wait, hold, 1, &wo);
    int64_t qty = 0;
    if (e == TROUPE_OK)
        e = read_qty(t, hold, &qty);
    if (e != TROUPE_OK)
        return e;
    printf("shop: %s (qty %lld) expires in %d ms: get finds it\n", hold,
           (long long)qty, HOLD_MS);
    uv_sleep(HOLD_MS + 50);
    e = read_qty(t, hold, &qty);
    if (e != TROUPE_ENOENT)
        return e == TROUPE_OK ? TROUPE_ESTATE : e;
    printf("shop: %d ms later: get says %s, the hold is gone\n", HOLD_MS + 50,
           troupe_err_name(e));
    return TROUPE_OK;
}

/* ---- 4. events on the queue ---- */

typedef struct shop_queue {
    troupe_queues *qs;
    troupe_queue_worker *worker;
    int64_t run;
    latch handled; /* this run's events, finally acknowledged */
} shop_queue;

/* Reads the integer field k of an event payload (0 when absent). */
static int64_t
pay_int(const troupe_queue_delivery *d, const char *k)
{
    return doc_int(d->ev.payload, d->ev.payload_len, k);
}

/* The worker's handler: on the runtime's worker pool, one event at a
 * time (credit 1). Acknowledges, except the restock check's first
 * invocation, which it reschedules. */
static troupe_err
on_event(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    shop_queue *sq = arg;
    char kind[32], cust[32], item[32];
    doc_str(d->ev.payload, d->ev.payload_len, "kind", kind, sizeof(kind));
    int64_t t0 = pay_int(d, "t0");
    int64_t late = troupe_now_ms() - t0;
    out->kind = TROUPE_QUEUE_ACK;
    if (strcmp(kind, "order placed") == 0) {
        doc_str(d->ev.payload, d->ev.payload_len, "customer", cust,
                sizeof(cust));
        doc_str(d->ev.payload, d->ev.payload_len, "item", item, sizeof(item));
        printf("shop: worker: order placed: order %lld, %s buys %lld %s "
               "(partition %u, attempt %u)\n",
               (long long)pay_int(d, "order"), cust,
               (long long)pay_int(d, "qty"), item, d->ev.partition, d->attempt);
    } else if (strcmp(kind, "reminder") == 0) {
        /* Due REMIND_MS after its publication: never handled before. */
        printf("shop: worker: reminder for carol, scheduled %d ms ahead: "
               "%s\n",
               REMIND_MS,
               late >= REMIND_MS ? "handled when due, not before"
                                 : "handled EARLY");
    } else if (strcmp(kind, "restock check") == 0 && d->ev.time_ms == t0) {
        out->kind = TROUPE_QUEUE_RESCHEDULE;
        out->time_ms = troupe_now_ms() + RECHECK_MS;
        printf("shop: worker: restock check: gadget still short, "
               "rescheduled %d ms later\n",
               RECHECK_MS);
    } else if (strcmp(kind, "restock check") == 0) {
        printf("shop: worker: restock check again, %lld ms after the first: "
               "done, acknowledged\n",
               (long long)(d->ev.time_ms - t0));
    } else {
        printf("shop: worker: unknown event kind '%s': acknowledged\n", kind);
    }
    /* Only this run's events count; a run killed earlier may have left
     * some, and they are handled the same way. */
    if (pay_int(d, "run") == sq->run && out->kind == TROUPE_QUEUE_ACK)
        latch_hit(&sq->handled, TROUPE_OK);
    return TROUPE_OK;
}

static troupe_err
shop_queue_open(troupe_catalog *cat, troupe_commit *commit, int64_t run,
                shop_queue *sq)
{
    sq->run = run;
    /* five orders, the reminder, the restock check */
    latch_init(&sq->handled, (int)(sizeof(orders) / sizeof(orders[0])) + 2);
    troupe_queues_opts qo = {.catalog = cat, .commit = commit};
    troupe_err e = troupe_queues_open(&qo, &sq->qs);
    if (e != TROUPE_OK)
        return e;
    troupe_queue_spec spec = {.name = EVENTS,
                              .partitions = EVENT_PARTS,
                              .retention_ms = 24 * 3600 * 1000};
    e = troupe_queues_create_wait(sq->qs, &spec);
    if (e == TROUPE_OK)
        printf("shop: created queue %s, %d partitions, completed events kept "
               "a day\n",
               EVENTS, EVENT_PARTS);
    else if (e == TROUPE_EEXIST)
        printf("shop: queue %s already exists (EEXIST)\n", EVENTS);
    else
        return e;
    troupe_queue_worker_opts wo = {.queue = EVENTS,
                                   .first = 0,
                                   .last = EVENT_PARTS - 1,
                                   .credit = 1,
                                   .handler = on_event,
                                   .arg = sq,
                                   .sync = TROUPE_SYNC_ON};
    return troupe_queue_worker_create(sq->qs, &wo, &sq->worker);
}

/* Stops the worker (its running handler settles and its outcome
 * commits) and frees it; none is a no-op. */
static void
shop_worker_end(shop_queue *sq)
{
    if (sq->worker == NULL)
        return;
    troupe_queue_worker_stop_wait(sq->worker);
    troupe_queue_worker_destroy(sq->worker);
    sq->worker = NULL;
}

static void
shop_queue_close(shop_queue *sq)
{
    shop_worker_end(sq);
    if (sq->qs != NULL)
        troupe_queues_stop_wait(sq->qs);
    troupe_queues_destroy(sq->qs);
    sq->qs = NULL;
}

static troupe_err
shop_events(shop_queue *sq)
{
    /* A reminder due a second from now, and a restock check due now whose
     * handler reschedules it once. */
    int64_t now = troupe_now_ms();
    char id[64];
    troupe_packer p;
    snprintf(id, sizeof(id), "reminder:%lld", (long long)sq->run);
    troupe_err e = event_payload(&p, "reminder", sq->run, now, 0);
    troupe_queue_event ev = {.id = id,
                             .id_len = strlen(id),
                             .key = "carol",
                             .key_len = 5,
                             .time_ms = now + REMIND_MS};
    ev.payload = troupe_pack_data(&p, &ev.payload_len);
    if (e == TROUPE_OK)
        e = troupe_queue_publish_wait(sq->qs, EVENTS, &ev, TROUPE_SYNC_ON);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return e;
    printf("shop: reminder published, due in %d ms\n", REMIND_MS);
    snprintf(id, sizeof(id), "restock:%lld", (long long)sq->run);
    e = event_payload(&p, "restock check", sq->run, now, 0);
    ev = (troupe_queue_event){.id = id,
                              .id_len = strlen(id),
                              .key = "gadget",
                              .key_len = 6,
                              .time_ms = now};
    ev.payload = troupe_pack_data(&p, &ev.payload_len);
    if (e == TROUPE_OK)
        e = troupe_queue_publish_wait(sq->qs, EVENTS, &ev, TROUPE_SYNC_ON);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return e;
    printf("shop: restock check published, due now\n");
    if ((e = latch_wait(&sq->handled)) != TROUPE_OK)
        return e;
    /* Drain the worker (every outcome committed), then count. */
    shop_worker_end(sq);
    troupe_queue_stats *st = NULL;
    if ((e = troupe_queue_stats_wait(sq->qs, EVENTS, &st)) != TROUPE_OK)
        return e;
    printf("shop: queue %s: %llu pending, %llu completed in all (the "
           "refused order published nothing)\n",
           EVENTS, (unsigned long long)st->pending,
           (unsigned long long)st->completed);
    troupe_free(st);
    return TROUPE_OK;
}

int
run_shop(const char *dir)
{
    printf("== a small shop on tables and indexes ==\n");
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *t = NULL;
    shop_queue sq = {0};
    shop_saga sg = {.mu = PTHREAD_MUTEX_INITIALIZER,
                    .cv = PTHREAD_COND_INITIALIZER};
    const char *what = "open database";
    troupe_err e = troupe_db_open(dir, NULL, &db);
    if (e == TROUPE_OK) {
        what = "commit pipeline";
        e = troupe_commit_create(db, NULL, &commit);
    }
    if (e == TROUPE_OK) {
        what = "runtime";
        troupe_runtime_opts ro = {.schedulers = 2, .workers = 4};
        e = troupe_runtime_create(&rt, &ro);
    }
    if (e == TROUPE_OK) {
        what = "open catalog";
        troupe_catalog_opts co = {.rt = rt, .db = db};
        e = troupe_catalog_open(&co, &cat);
    }
    if (e == TROUPE_OK) {
        what = "open tables";
        troupe_tables_opts to = {.catalog = cat, .commit = commit};
        e = troupe_tables_open(&to, &t);
    }
    int64_t run = troupe_now_ms();
    if (e == TROUPE_OK && (e = shop_tables(t)) != TROUPE_OK)
        what = "create tables";
    if (e == TROUPE_OK && (e = shop_customers(t)) != TROUPE_OK)
        what = "customers";
    if (e == TROUPE_OK &&
        (e = shop_queue_open(cat, commit, run, &sq)) != TROUPE_OK)
        what = "open queue";
    if (e == TROUPE_OK && (e = shop_orders(t, sq.qs, run)) != TROUPE_OK)
        what = "orders";
    if (e == TROUPE_OK && (e = shop_scan(t)) != TROUPE_OK)
        what = "scan";
    if (e == TROUPE_OK && (e = shop_expiry(t)) != TROUPE_OK)
        what = "expiry";
    if (e == TROUPE_OK && (e = shop_events(&sq)) != TROUPE_OK)
        what = "events";
    shop_queue_close(&sq);
    if (e == TROUPE_OK && (e = shop_saga_open(rt, t, &sg)) != TROUPE_OK)
        what = "open coordinator";
    if (e == TROUPE_OK && (e = shop_sagas(&sg, run)) != TROUPE_OK)
        what = "sagas";
    shop_saga_close(&sg);
    if (t != NULL) {
        troupe_err se = troupe_tables_stop_wait(t);
        if (e == TROUPE_OK && se != TROUPE_OK) {
            what = "stop tables";
            e = se;
        }
        troupe_tables_destroy(t);
    }
    if (cat != NULL) {
        troupe_catalog_stop_wait(cat);
        troupe_catalog_destroy(cat);
    }
    if (rt != NULL) {
        troupe_runtime_shutdown_wait(rt);
        troupe_runtime_destroy(rt);
    }
    troupe_commit_destroy(commit);
    if (db != NULL) {
        troupe_err ce = troupe_db_close(db);
        if (e == TROUPE_OK && ce != TROUPE_OK) {
            what = "close database";
            e = ce;
        }
    }
    if (e != TROUPE_OK) {
        char buf[64];
        snprintf(buf, sizeof(buf), "shop: %s", what);
        return fail(buf, e);
    }
    return 0;
}
