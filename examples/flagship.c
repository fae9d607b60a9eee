/*
 * The flagship example: what `make run` runs. It grows with each capability.
 *
 * 1. A durable counter. A `counter` actor keeps a visit count in a kv actor
 *    (a RocksDB column family under --data). Each increment is a synced
 *    write through the group-commit pipeline; the actor prints the value
 *    once it is durable. Run it twice: the count goes on from where it was.
 * 2. Two nodes in one process, talking over nng on tcp loopback: a pinger
 *    on node 1 asks a ponger on node 2, by name, and prints round trips.
 * 3. A small shop on the data layer (tables and secondary indexes, in the
 *    same database): tables `customers` (unique index on email), `orders`
 *    (index on (customer, created_at)) and `stock`, created on the first
 *    run. It adds customers, shows a duplicate email refused, places
 *    orders that take stock (each order and its stock move in one
 *    transaction), queries a customer's orders by index, pages
 *    through customers with a cursor, and watches a row with a short
 *    expiry disappear. Customers and stock persist; each run adds orders.
 * 4. Events on the durable queue (same database): each order transaction
 *    also publishes an "order placed" event (troupe_queue_publish_in: the
 *    event commits with the order rows or not at all, so the refused
 *    duplicate order publishes nothing), and a worker on the runtime's
 *    pool handles the events: it prints each order, a reminder scheduled
 *    a second ahead, and a restock check that reschedules itself once
 *    before it is acknowledged. The queue's counts close the section.
 * 5. An order as a saga across the shop's tables (same database), run by
 *    the coordinator: step 01 reserves stock (compensation: gives it
 *    back), step 02 charges the customer's wallet in a table `wallets`
 *    (created on the first run), paying the till and writing the order
 *    row (compensation: refunds and deletes it). Both are served by the
 *    C callback target "shop", each call one transaction with its barrier
 *    check. dave's order succeeds; bob's fails on his credit, so its
 *    reservation is compensated (and step 02's compensation is null, its
 *    action having written nothing). The stock, credit and till before
 *    and after show that they add up; the paid order's gid submitted
 *    again drives nothing. Gids carry the run's start time.
 *
 * Usage: flagship [--data DIR] [--count N] [--pings N]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/barrier.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/keycodec.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/transport.h"
#include "troupe/txn.h"

/* ---- a tiny completion latch for main (a plain thread, not a loop) ---- */

typedef struct latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;
    troupe_err err;
} latch;

static void
latch_init(latch *l, int n)
{
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->left = n;
    l->err = TROUPE_OK;
}

static void
latch_hit(latch *l, troupe_err err)
{
    pthread_mutex_lock(&l->mu);
    if (err != TROUPE_OK && l->err == TROUPE_OK)
        l->err = err;
    l->left = err != TROUPE_OK ? 0 : l->left - 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static troupe_err
latch_wait(latch *l)
{
    pthread_mutex_lock(&l->mu);
    while (l->left > 0)
        pthread_cond_wait(&l->cv, &l->mu);
    troupe_err e = l->err;
    pthread_mutex_unlock(&l->mu);
    return e;
}

/* ---- the counter actor ---- */

enum { C_INCR, C_LOADED, C_SAVED, C_NKINDS };

static const char COUNTER_KEY[] = "visits";

typedef struct counter_cfg {
    troupe_addr kv;
    latch *saved;
} counter_cfg;

typedef struct counter {
    counter_cfg cfg;
    uint64_t value;
    bool loaded;
    uint32_t waiting; /* increments that arrived before the load */
} counter;

static troupe_err
save(troupe_actor *self, counter *c)
{
    unsigned char be[8];
    c->value++;
    for (int i = 0; i < 8; i++)
        be[i] = (unsigned char)(c->value >> (56 - 8 * i));
    troupe_msg *m = NULL;
    troupe_err e = troupe_kv_put_msg(COUNTER_KEY, sizeof(COUNTER_KEY) - 1, be,
                                     sizeof(be), true, &m);
    if (e == TROUPE_OK)
        e = troupe_ask(self, c->cfg.kv, &m, 5000, C_SAVED, NULL);
    return e;
}

static troupe_err
counter_init(troupe_actor *self, void *st, void *arg)
{
    counter *c = st;
    c->cfg = *(const counter_cfg *)arg;
    troupe_msg *m = NULL;
    troupe_err e = troupe_kv_get_msg(COUNTER_KEY, sizeof(COUNTER_KEY) - 1, &m);
    if (e == TROUPE_OK)
        e = troupe_ask(self, c->cfg.kv, &m, 5000, C_LOADED, NULL);
    return e;
}

static troupe_err
on_loaded(troupe_actor *self, void *st, const troupe_msg *m)
{
    counter *c = st;
    if (m->err == TROUPE_OK) {
        troupe_reader r;
        const void *v;
        size_t n;
        troupe_reader_init_msg(&r, m);
        troupe_read_bin(&r, 8, &v, &n);
        troupe_err e = troupe_read_end(&r);
        if (e != TROUPE_OK || n != 8)
            return TROUPE_ECORRUPT; /* never "not found" */
        for (int i = 0; i < 8; i++)
            c->value = (c->value << 8) | ((const unsigned char *)v)[i];
    } else if (m->err != TROUPE_ENOENT) {
        return m->err;
    }
    c->loaded = true;
    printf("counter: loaded visits = %llu\n", (unsigned long long)c->value);
    for (; c->waiting > 0; c->waiting--) {
        troupe_err e = save(self, c);
        if (e != TROUPE_OK)
            return e;
    }
    return TROUPE_OK;
}

static troupe_err
on_incr(troupe_actor *self, void *st, const troupe_msg *m)
{
    counter *c = st;
    if (!c->loaded) {
        c->waiting++;
        return TROUPE_OK;
    }
    return save(self, c);
}

static troupe_err
on_saved(troupe_actor *self, void *st, const troupe_msg *m)
{
    counter *c = st;
    if (m->err == TROUPE_OK)
        printf("counter: visit recorded (synced to disk)\n");
    else
        fprintf(stderr, "counter: write failed: %s\n", troupe_strerror(m->err));
    latch_hit(c->cfg.saved, m->err);
    return TROUPE_OK;
}

static void
counter_stop(troupe_actor *self, void *st, troupe_err reason)
{
    counter *c = st;
    printf("counter: stopping at visits = %llu\n",
           (unsigned long long)c->value);
}

static const troupe_handler_fn counter_handlers[C_NKINDS] = {
    [C_INCR] = on_incr, [C_LOADED] = on_loaded, [C_SAVED] = on_saved};

static const troupe_actor_def counter_def = {
    .name = "counter",
    .state_size = sizeof(counter),
    .init = counter_init,
    .stop = counter_stop,
    .handlers = counter_handlers,
    .n_handlers = C_NKINDS,
};

static int
fail(const char *what, troupe_err e)
{
    fprintf(stderr, "flagship: %s: %s (%s)\n", what, troupe_strerror(e),
            troupe_err_name(e));
    return 1;
}

static int
run_counter(const char *dir, int count)
{
    printf("== durable counter in %s ==\n", dir);
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_err e = troupe_db_open(dir, NULL, &db);
    if (e != TROUPE_OK)
        return fail("open database", e);
    if ((e = troupe_commit_create(db, NULL, &commit)) != TROUPE_OK) {
        troupe_db_close(db);
        return fail("commit pipeline", e);
    }
    troupe_runtime_opts ro = {.schedulers = 2};
    if ((e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK) {
        troupe_commit_destroy(commit);
        troupe_db_close(db);
        return fail("runtime", e);
    }
    latch saved;
    latch_init(&saved, count);
    counter_cfg cfg = {.saved = &saved};
    troupe_kv_opts ko = {.db = db, .commit = commit, .cf = "counters"};
    troupe_addr counter_addr;
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    e = troupe_kv_spawn(rt, &ko, &so, &cfg.kv);
    if (e == TROUPE_OK) {
        /* The counter talks to the kv actor on every request: place it on
         * the same scheduler. */
        so.near = cfg.kv;
        so.arg = &cfg;
        so.name = "counter";
        e = troupe_actor_spawn(rt, &counter_def, &so, &counter_addr);
    }
    for (int i = 0; e == TROUPE_OK && i < count; i++) {
        troupe_msg *m = NULL;
        e = troupe_msg_create(&m, C_INCR, NULL, 0);
        if (e == TROUPE_OK)
            e = troupe_runtime_send(rt, counter_addr, &m);
    }
    if (e == TROUPE_OK)
        e = latch_wait(&saved);
    troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    troupe_err ce = troupe_db_close(db);
    if (e != TROUPE_OK)
        return fail("counter", e);
    if (ce != TROUPE_OK)
        return fail("close database", ce);
    return 0;
}

/* ---- two nodes: a pinger on node 1 asks a ponger on node 2 ---- */

enum { P_PING, P_FOUND, P_PONG, P_NKINDS };

static troupe_err
on_ping(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_msg *r = NULL;
    troupe_err e =
        troupe_msg_create(&r, 0, troupe_msg_data(m), troupe_msg_len(m));
    return e == TROUPE_OK ? troupe_reply(self, m, &r) : e;
}

static const troupe_handler_fn ponger_handlers[P_NKINDS] = {[P_PING] = on_ping};
static const troupe_actor_def ponger_def = {.name = "ponger",
                                            .handlers = ponger_handlers,
                                            .n_handlers = P_NKINDS,
                                            .remote_kinds =
                                                TROUPE_KIND_BIT(P_PING)};

typedef struct pinger_cfg {
    uint32_t peer_node;
    long pings;
    latch *done;
    double *seconds;
} pinger_cfg;

typedef struct pinger {
    pinger_cfg cfg;
    troupe_addr ponger;
    long left;
    uint64_t started_ms;
} pinger;

static troupe_err
pinger_init(troupe_actor *self, void *st, void *arg)
{
    pinger *p = st;
    p->cfg = *(const pinger_cfg *)arg;
    /* Find the ponger by name on the other node. */
    troupe_msg *m = NULL;
    troupe_err e = troupe_node_lookup_msg("ponger", &m);
    if (e == TROUPE_OK)
        e = troupe_ask(self, troupe_node_addr(p->cfg.peer_node), &m, 2000,
                       P_FOUND, NULL);
    return e;
}

static troupe_err
ping_once(troupe_actor *self, pinger *p)
{
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, P_PING, "ping", 4);
    if (e == TROUPE_OK)
        e = troupe_ask(self, p->ponger, &m, 2000, P_PONG, NULL);
    return e;
}

static troupe_err
on_found(troupe_actor *self, void *st, const troupe_msg *m)
{
    pinger *p = st;
    troupe_err e = troupe_node_lookup_result(m, &p->ponger);
    if (e != TROUPE_OK) {
        latch_hit(p->cfg.done, e);
        return TROUPE_OK;
    }
    printf("nodes: found ponger at node %u slot %u\n", p->ponger.node,
           p->ponger.slot);
    p->left = p->cfg.pings;
    p->started_ms = uv_hrtime() / 1000000u;
    return ping_once(self, p);
}

static troupe_err
on_pong(troupe_actor *self, void *st, const troupe_msg *m)
{
    pinger *p = st;
    if (m->err != TROUPE_OK) {
        latch_hit(p->cfg.done, m->err);
        return TROUPE_OK;
    }
    if (--p->left > 0)
        return ping_once(self, p);
    *p->cfg.seconds = (double)(uv_hrtime() / 1000000u - p->started_ms) / 1e3;
    latch_hit(p->cfg.done, TROUPE_OK);
    return TROUPE_OK;
}

static const troupe_handler_fn pinger_handlers[P_NKINDS] = {
    [P_FOUND] = on_found, [P_PONG] = on_pong};
static const troupe_actor_def pinger_def = {
    .name = "pinger",
    .state_size = sizeof(pinger),
    .init = pinger_init,
    .handlers = pinger_handlers,
    .n_handlers = P_NKINDS,
};

typedef struct node_pair {
    troupe_runtime *rt[2];
    troupe_node *node[2];
} node_pair;

static troupe_err
start_node(node_pair *np, int i)
{
    troupe_runtime_opts ro = {
        .schedulers = 1, .workers = 1, .node_id = (uint32_t)i + 1};
    troupe_err e = troupe_runtime_create(&np->rt[i], &ro);
    if (e != TROUPE_OK)
        return e;
    e = troupe_node_create(&np->node[i], np->rt[i], NULL);
    if (e == TROUPE_OK)
        e = troupe_node_listen(np->node[i], "tcp://127.0.0.1:0");
    return e;
}

static void
stop_nodes(node_pair *np)
{
    for (int i = 0; i < 2; i++)
        if (np->rt[i] != NULL)
            troupe_runtime_shutdown_wait(np->rt[i]);
    for (int i = 0; i < 2; i++) {
        if (np->node[i] != NULL)
            troupe_node_stop_wait(np->node[i]);
        troupe_node_destroy(np->node[i]);
        troupe_runtime_destroy(np->rt[i]);
    }
}

static int
flagship_nodes(long pings)
{
    printf("== two nodes over tcp loopback ==\n");
    node_pair np = {0};
    troupe_err e = start_node(&np, 0);
    if (e == TROUPE_OK)
        e = start_node(&np, 1);
    troupe_addr ponger;
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.name = "ponger";
    if (e == TROUPE_OK)
        e = troupe_actor_spawn(np.rt[1], &ponger_def, &so, &ponger);
    if (e == TROUPE_OK) {
        printf("nodes: node 1 at %s, node 2 at %s\n",
               troupe_node_url(np.node[0]), troupe_node_url(np.node[1]));
        e = troupe_node_connect(np.node[0], troupe_node_url(np.node[1]));
    }
    if (e == TROUPE_OK)
        e = troupe_node_wait_peer(np.node[0], 2, 5000);
    latch done;
    latch_init(&done, 1);
    double seconds = 0;
    pinger_cfg cfg = {
        .peer_node = 2, .pings = pings, .done = &done, .seconds = &seconds};
    troupe_addr pinger_addr;
    so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = &cfg;
    if (e == TROUPE_OK)
        e = troupe_actor_spawn(np.rt[0], &pinger_def, &so, &pinger_addr);
    if (e == TROUPE_OK)
        e = latch_wait(&done);
    if (e == TROUPE_OK)
        printf("nodes: %ld round trips in %.3f s: %.1f us each, "
               "one ask in flight\n",
               pings, seconds, seconds * 1e6 / (double)pings);
    stop_nodes(&np);
    return e == TROUPE_OK ? 0 : fail("nodes", e);
}

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
enum { RESTOCK = 20, HOLD_MS = 200 };

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

static int64_t
doc_int(const void *doc, size_t len, const char *k)
{
    troupe_reader r;
    int64_t v = 0;
    if (doc_field(&r, doc, len, k))
        troupe_read_int(&r, &v);
    return v;
}

static void
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
typedef troupe_err (*write_fn)(troupe_tables *, const char *, const void *,
                               size_t, const void *, size_t,
                               const troupe_write_opts *);

static troupe_err
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

typedef struct shop_saga {
    troupe_tables *t;
    troupe_target *target;
    troupe_coord *coord;
    /* the handler's calls so far and its null compensations, under mu;
     * each call broadcasts cv */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t calls, nulls;
} shop_saga;

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
    troupe_pack_int(p, (int64_t)(sizeof(orders) / sizeof(orders[0])) + k + 1);
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

static troupe_err
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
static void
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
    troupe_key_put_int64(&w,
                         (int64_t)(sizeof(orders) / sizeof(orders[0])) + k + 1);
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

static troupe_err
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
                 (int)(sizeof(orders) / sizeof(orders[0])) + k + 1);
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

static int
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

int
main(int argc, char **argv)
{
    const char *dir = "./data";
    long count = 3, pings = 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--data") == 0 && v != NULL) {
            dir = v;
            i++;
        } else if (strcmp(a, "--count") == 0 && v != NULL) {
            errno = 0;
            count = strtol(v, &end, 10);
            if (errno || *end || count < 1 || count > 1000000) {
                fprintf(stderr, "flagship: --count wants 1..1000000\n");
                return 2;
            }
            i++;
        } else if (strcmp(a, "--pings") == 0 && v != NULL) {
            errno = 0;
            pings = strtol(v, &end, 10);
            if (errno || *end || pings < 0 || pings > 10000000) {
                fprintf(stderr, "flagship: --pings wants 0..10000000\n");
                return 2;
            }
            i++;
        } else {
            fprintf(stderr,
                    "usage: flagship [--data DIR] [--count N] [--pings N]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (run_counter(dir, (int)count) != 0)
        return 1;
    if (pings > 0 && flagship_nodes(pings) != 0)
        return 1;
    if (run_shop(dir) != 0)
        return 1;
    printf("\nnext: docs/embedding.md (linking, lifecycle, threads) walks "
           "through examples/embed.c;\n"
           "      docs/coordinator.md explains the sagas and the barrier;\n"
           "      examples/actor.c, examples/index.c, examples/txn_retry.c "
           "and\n      examples/queue_worker.c show one capability each;\n"
           "      `troupe --help` inspects a database and runs a node.\n");
    return 0;
}
