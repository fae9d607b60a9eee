/*
 * A node's lifecycle: open (database, commit pipeline, runtime, pull
 * host), start (catalog, tables, queues: what tests/actors/tnode.c and
 * tools/cmd_node.c assemble, through the same public calls), close (the
 * reverse, after the requests in flight finished).
 *
 * Why close closes the pull host first: a task a host holds would
 * otherwise keep its queue worker's stop waiting for the task's deadline
 * (30 s by default); closed, the host's tasks settle UNKNOWN at once and
 * the events stay pending for the next open. Requests in flight still
 * finish, since the runtime runs until they have: the tables and queues
 * must outlive their callbacks.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

troupe_err
abi_enter(troupe_abi *n, bool started, const char *call)
{
    pthread_mutex_lock(&n->mu);
    troupe_err e = TROUPE_OK;
    if (n->state == NODE_CLOSING)
        e = troupe__errf(TROUPE_ECLOSED, "%s: the node is closing", call);
    else if (started && n->state != NODE_STARTED)
        e = troupe__errf(TROUPE_ESTATE,
                         "%s: the node is not started "
                         "(troupe_abi_start)",
                         call);
    else
        n->calls++;
    pthread_mutex_unlock(&n->mu);
    return e;
}

void
abi_leave(troupe_abi *n)
{
    pthread_mutex_lock(&n->mu);
    if (--n->calls == 0)
        pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->mu);
}

/* Frees what open made (each may be NULL): host, runtime, pipeline, db. */
static troupe_err
node_free(troupe_abi *n)
{
    troupe_host_destroy(n->host);
    troupe_runtime_destroy(n->rt);
    troupe_commit_destroy(n->commit);
    troupe_err e = n->db != NULL ? troupe_db_close(n->db) : TROUPE_OK;
    troupe_free(n->targets);
    troupe_free(n->workers);
    troupe_free(n->actors);
    troupe_free(n->txns);
    pthread_cond_destroy(&n->cond);
    pthread_mutex_destroy(&n->mu);
    troupe_free(n);
    return e;
}

int
troupe_abi_open(const char *dir, uint32_t schedulers, uint32_t workers,
                int32_t sync, troupe_abi **out)
{
    abi_clear();
    if (out != NULL)
        *out = NULL;
    if (dir == NULL || out == NULL || dir[0] == '\0')
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "open: NULL or empty argument"));
    if (schedulers > 256 || workers > 256)
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "open: %u schedulers and %u workers; "
                                    "at most 256 each",
                                    schedulers, workers));
    if (sync < 0 || sync > 2)
        return abi_ret(troupe__errf(
            TROUPE_EINVAL, "open: sync %d; 0 default, 1 on, 2 off", sync));
    troupe_err e = troupe__block_check("troupe_abi_open");
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_abi *n = troupe_calloc(1, sizeof(*n));
    if (n == NULL)
        return abi_ret(TROUPE_ENOMEM);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cond, NULL);
    n->sync = (troupe_sync)sync;
    troupe_runtime_opts ro = {.schedulers = schedulers, .workers = workers};
    if ((e = troupe_db_open(dir, NULL, &n->db)) != TROUPE_OK ||
        (e = troupe_commit_create(n->db, NULL, &n->commit)) != TROUPE_OK ||
        (e = troupe_runtime_create(&n->rt, &ro)) != TROUPE_OK ||
        (e = troupe_host_open(n->rt, NULL, &n->host)) != TROUPE_OK) {
        /* keep the detail of the failure, not of the teardown */
        char why[TROUPE_ERRMSG_MAX];
        snprintf(why, sizeof(why), "open: %s", troupe_errmsg(e));
        if (n->rt != NULL)
            troupe_runtime_shutdown_wait(n->rt);
        node_free(n);
        return abi_ret(troupe__errf(e, "%s", why));
    }
    *out = n;
    return abi_ret(TROUPE_OK);
}

int
troupe_abi_start(troupe_abi *n)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "start: NULL node"));
    troupe_err e = troupe__block_check("troupe_abi_start");
    if (e != TROUPE_OK)
        return abi_ret(e);
    pthread_mutex_lock(&n->mu);
    if (n->state != NODE_OPEN) {
        e = n->state == NODE_CLOSING
                ? troupe__errf(TROUPE_ECLOSED, "start: the node is closing")
                : troupe__errf(TROUPE_ESTATE, "start: started already");
        pthread_mutex_unlock(&n->mu);
        return abi_ret(e);
    }
    n->calls++; /* close waits for the start */
    pthread_mutex_unlock(&n->mu);
    troupe_catalog_opts co = {.rt = n->rt, .db = n->db};
    troupe_catalog *cat = NULL;
    troupe_tables *tables = NULL;
    troupe_queues *queues = NULL;
    if ((e = troupe_catalog_open(&co, &cat)) == TROUPE_OK) {
        troupe_tables_opts to = {.catalog = cat, .commit = n->commit};
        if ((e = troupe_tables_open(&to, &tables)) == TROUPE_OK) {
            troupe_queues_opts qo = {.catalog = cat, .commit = n->commit};
            e = troupe_queues_open(&qo, &queues);
        }
    }
    if (e == TROUPE_OK) {
        n->tables = tables; /* the coordinator's; published below */
        if ((e = abi_coord_open(n)) != TROUPE_OK) {
            n->tables = NULL;
            troupe_queues_stop_wait(queues);
            troupe_queues_destroy(queues);
        }
    }
    if (e != TROUPE_OK) {
        char why[TROUPE_ERRMSG_MAX];
        snprintf(why, sizeof(why), "start: %s", troupe_errmsg(e));
        if (tables != NULL) {
            troupe_tables_stop_wait(tables);
            troupe_tables_destroy(tables);
        }
        if (cat != NULL) {
            troupe_catalog_stop_wait(cat);
            troupe_catalog_destroy(cat);
        }
        e = troupe__errf(e, "%s", why);
    }
    pthread_mutex_lock(&n->mu);
    if (e == TROUPE_OK) {
        n->cat = cat;
        n->tables = tables;
        n->queues = queues;
        n->state = NODE_STARTED;
    }
    if (--n->calls == 0)
        pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->mu);
    return abi_ret(e);
}

int
troupe_abi_set_limits(troupe_abi *n, uint32_t requests, uint64_t bytes)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "set limits: NULL node"));
    troupe__host_completion_limits(n->host, requests, bytes);
    return abi_ret(TROUPE_OK);
}

int
troupe_abi_close(troupe_abi **np)
{
    abi_clear();
    if (np == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "close: NULL argument"));
    troupe_abi *n = *np;
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_ESTATE, "close: closed already"));
    troupe_err e = troupe__block_check("troupe_abi_close");
    if (e != TROUPE_OK)
        return abi_ret(e);
    /* EDEADLK inside the wake callback: nothing happened yet */
    if ((e = troupe_host_close(n->host)) != TROUPE_OK)
        return abi_ret(e);
    *np = NULL;
    pthread_mutex_lock(&n->mu);
    n->state = NODE_CLOSING;
    while (n->calls > 0 || n->pending > 0)
        pthread_cond_wait(&n->cond, &n->mu);
    bool started = n->tables != NULL;
    pthread_mutex_unlock(&n->mu);
    abi_txns_free(n);
    abi_coord_close(n); /* its jobs ended: they are requests */
    if (started) {
        troupe_queues_stop_wait(n->queues);
        for (size_t i = 0; i < n->nworkers; i++)
            troupe_queue_worker_destroy(n->workers[i]);
        troupe_queues_destroy(n->queues);
        troupe_tables_stop_wait(n->tables);
        troupe_tables_destroy(n->tables);
    }
    for (size_t i = 0; i < n->nactors; i++) { /* before their targets */
        troupe_host_actor_stop_wait(n->actors[i]);
        troupe_host_actor_destroy(n->actors[i]);
    }
    for (size_t i = 0; i < n->ntargets; i++) {
        troupe_target_stop_wait(n->targets[i]);
        troupe_target_destroy(n->targets[i]);
    }
    troupe_runtime_shutdown_wait(n->rt);
    if (started) {
        troupe_catalog_stop_wait(n->cat);
        troupe_catalog_destroy(n->cat);
    }
    e = node_free(n);
    return abi_ret(e);
}
