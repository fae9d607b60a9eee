/*
 * The flagship example: what `make run` runs. It grows with each capability,
 * one file per part: 1 here, 2 nodes.c, 3 and 4 shop.c, 5 saga.c
 * (flagship.h holds what they share).
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
#include "flagship.h"

/* ---- the latch (flagship.h) ---- */

void
latch_init(latch *l, int n)
{
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->left = n;
    l->err = TROUPE_OK;
}

void
latch_hit(latch *l, troupe_err err)
{
    pthread_mutex_lock(&l->mu);
    if (err != TROUPE_OK && l->err == TROUPE_OK)
        l->err = err;
    l->left = err != TROUPE_OK ? 0 : l->left - 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

troupe_err
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

int
fail(const char *what, troupe_err e)
{
    fprintf(stderr, "flagship: %s: %s (%s)\n", what, troupe_strerror(e),
            troupe_err_name(e));
    return 1;
}

int
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
