/*
 * The catalog's DDL order (troupe/internal/catalog.h): the lock every
 * catalog change holds while it runs, and the queue of asynchronous
 * changes (jobs), run one at a time on the worker pool in submission
 * order. Owns `ddl` and the queue fields (dq_head, dq_tail, dq_busy) of
 * struct troupe_catalog; the queue fields are guarded by `mu`.
 *
 * The queue rather than one worker job per change: a job may block its
 * worker (a table drop waits for the table actor to wind down, which
 * needs workers), so two of them must never hold two workers.
 */
#include "catalog_int.h"
#include "troupe/alloc.h"

typedef struct ddl_item {
    struct ddl_item *next;
    troupe_catalog *c;
    void (*fn)(void *arg);
    void (*done)(void *arg, troupe_runtime *rt);
    void *arg;
} ddl_item;

/* The next queued job, or NULL (the queue is idle then); and whether a
 * stop waits for that idle moment. */
static ddl_item *
ddl_pop(troupe_catalog *c, bool *stopped)
{
    pthread_mutex_lock(&c->mu);
    ddl_item *next = c->dq_head;
    if (next != NULL) {
        c->dq_head = next->next;
        if (c->dq_head == NULL)
            c->dq_tail = NULL;
    } else {
        c->dq_busy = false;
    }
    *stopped = next == NULL && c->state == CATALOG_STOPPING;
    pthread_mutex_unlock(&c->mu);
    return next;
}

static void
ddl_item_run(void *arg)
{
    ddl_item *it = arg;
    it->fn(it->arg);
}

static void
ddl_item_done(void *arg, troupe_runtime *rt)
{
    ddl_item *it = arg;
    troupe_catalog *c = it->c;
    bool stopped;
    ddl_item *next = ddl_pop(c, &stopped);
    it->done(it->arg, rt);
    troupe_free(it);
    while (next != NULL) {
        if (troupe_runtime_work(c->rt, ddl_item_run, ddl_item_done, next) ==
            TROUPE_OK)
            return;
        /* Shutting down: no worker left to take it; run it here. */
        ddl_item *it2 = next;
        next = ddl_pop(c, &stopped);
        it2->fn(it2->arg);
        it2->done(it2->arg, rt);
        troupe_free(it2);
    }
    if (stopped)
        troupe__catalog_stopped(c);
}

troupe_err
troupe__catalog_ddl_submit(troupe_catalog *c, void (*fn)(void *),
                           void (*done)(void *, troupe_runtime *), void *arg)
{
    ddl_item *it = troupe_calloc(1, sizeof(*it));
    if (it == NULL)
        return TROUPE_ENOMEM;
    it->c = c;
    it->fn = fn;
    it->done = done;
    it->arg = arg;
    pthread_mutex_lock(&c->mu);
    bool queue = c->dq_busy;
    if (queue) {
        if (c->dq_tail != NULL)
            c->dq_tail->next = it;
        else
            c->dq_head = it;
        c->dq_tail = it;
    } else {
        c->dq_busy = true;
    }
    pthread_mutex_unlock(&c->mu);
    if (queue)
        return TROUPE_OK;
    troupe_err e = troupe_runtime_work(c->rt, ddl_item_run, ddl_item_done, it);
    if (e != TROUPE_OK) {
        pthread_mutex_lock(&c->mu);
        c->dq_busy = false;
        pthread_mutex_unlock(&c->mu);
        troupe_free(it);
    }
    return e;
}

void
troupe__catalog_ddl_lock(troupe_catalog *c)
{
    pthread_mutex_lock(&c->ddl);
}

void
troupe__catalog_ddl_unlock(troupe_catalog *c)
{
    pthread_mutex_unlock(&c->ddl);
}
