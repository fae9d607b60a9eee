/*
 * The catalog's DDL queue: catalog jobs (creates and drops of tables,
 * index changes, build finalizations) run one at a time on the worker
 * pool, in the order they were submitted. Owns the FIFO fields of struct
 * troupe_tables (dq_head, dq_tail, dq_busy), guarded by its `mu`.
 *
 * The queue is here rather than on `ddl`: a job may block its worker (a
 * drop waits for the table actor to wind down, which needs workers), so
 * two of them must never hold two workers.
 */
#include "table_int.h"
#include "troupe/alloc.h"

typedef struct ddl_item {
    struct ddl_item *next;
    troupe_tables *t;
    void (*fn)(void *arg);
    void (*done)(void *arg, troupe_runtime *rt);
    void *arg;
} ddl_item;

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
    troupe_tables *t = it->t;
    pthread_mutex_lock(&t->mu);
    ddl_item *next = t->dq_head;
    if (next != NULL) {
        t->dq_head = next->next;
        if (t->dq_head == NULL)
            t->dq_tail = NULL;
    } else {
        t->dq_busy = false;
    }
    pthread_mutex_unlock(&t->mu);
    it->done(it->arg, rt);
    troupe_free(it);
    while (next != NULL) {
        if (troupe_runtime_work(t->rt, ddl_item_run, ddl_item_done, next) ==
            TROUPE_OK)
            return;
        /* Shutting down: no worker left to take it; run it here. */
        ddl_item *it2 = next;
        pthread_mutex_lock(&t->mu);
        next = t->dq_head;
        if (next != NULL) {
            t->dq_head = next->next;
            if (t->dq_head == NULL)
                t->dq_tail = NULL;
        } else {
            t->dq_busy = false;
        }
        pthread_mutex_unlock(&t->mu);
        it2->fn(it2->arg);
        it2->done(it2->arg, rt);
        troupe_free(it2);
    }
}

troupe_err
troupe__ddl_submit(troupe_tables *t, void (*fn)(void *),
                   void (*done)(void *, troupe_runtime *), void *arg)
{
    ddl_item *it = troupe_calloc(1, sizeof(*it));
    if (it == NULL)
        return TROUPE_ENOMEM;
    it->t = t;
    it->fn = fn;
    it->done = done;
    it->arg = arg;
    pthread_mutex_lock(&t->mu);
    bool queue = t->dq_busy;
    if (queue) {
        if (t->dq_tail != NULL)
            t->dq_tail->next = it;
        else
            t->dq_head = it;
        t->dq_tail = it;
    } else {
        t->dq_busy = true;
    }
    pthread_mutex_unlock(&t->mu);
    if (queue)
        return TROUPE_OK;
    troupe_err e = troupe_runtime_work(t->rt, ddl_item_run, ddl_item_done, it);
    if (e != TROUPE_OK) {
        pthread_mutex_lock(&t->mu);
        t->dq_busy = false;
        pthread_mutex_unlock(&t->mu);
        troupe_free(it);
    }
    return e;
}
