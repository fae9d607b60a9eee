/*
 * The flagship example: what `make run` runs. It grows with each capability.
 *
 * 1. A durable counter. A `counter` actor keeps a visit count in a kv actor
 *    (a RocksDB column family under --data). Each increment is a synced
 *    write through the group-commit pipeline; the actor prints the value
 *    once it is durable. Run it twice: the count goes on from where it was.
 * 2. Two nodes in one process, talking over nng on tcp loopback: a pinger
 *    on node 1 asks a ponger on node 2, by name, and prints round trips.
 *
 * Usage: flagship [--data DIR] [--count N] [--pings N]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "troupe/transport.h"

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
static const troupe_actor_def ponger_def = {
    .name = "ponger", .handlers = ponger_handlers, .n_handlers = P_NKINDS};

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
    return 0;
}
