/*
 * The runtime's own worker pool for blocking work (fsync, cache-missing
 * reads, host callbacks), separate from libuv's shared threadpool so that
 * our blocking work cannot starve a host's file system calls or DNS.
 *
 * A job either completes to an actor (a message with ptr = arg; drop(arg) if
 * the actor is gone) or to a callback run on scheduler 0. At shutdown the
 * pool finishes what was submitted, then its threads exit; the last one
 * tells scheduler 0.
 */
#include <stdio.h>

#include "rt.h"

static void
done_on_sched0(struct sched *s, void *arg)
{
    struct job *j = arg;
    j->done_cb(j->arg, s->rt);
    troupe_free(j);
}

static void
workers_exited(struct sched *s, void *arg);

static void
complete(troupe_runtime *rt, struct job *j)
{
    if (j->done_cb != NULL) {
        if (troupe__ctl(&rt->scheds[0], done_on_sched0, j) != TROUPE_OK) {
            /* Scheduler 0 closes only after the pool has exited. */
            fprintf(stderr, "troupe: work completion lost at shutdown\n");
            troupe_free(j);
        }
        return;
    }
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, j->done_kind, NULL, 0) != TROUPE_OK) {
        if (j->drop != NULL)
            j->drop(j->arg);
        troupe_free(j);
        return;
    }
    m->ptr = j->arg;
    m->ptr_drop = j->drop; /* released if the actor is gone (msg.h) */
    m->flags = TROUPE_MSG_SYSTEM;
    troupe__post(rt, NULL, j->target, &m, true);
    troupe_free(j);
}

static void *
worker_main(void *arg)
{
    troupe_runtime *rt = arg;
    struct workers *w = &rt->pool;
    pthread_setname_np(pthread_self(), "troupe-work");
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->head == NULL && !w->stopping)
            pthread_cond_wait(&w->cond, &w->lock);
        struct job *j = w->head;
        if (j == NULL)
            break; /* stopping and nothing left */
        w->head = j->next;
        if (w->head == NULL)
            w->tail = NULL;
        pthread_mutex_unlock(&w->lock);
        j->fn(j->arg);
        complete(rt, j);
        pthread_mutex_lock(&w->lock);
    }
    bool last = --w->alive == 0;
    pthread_mutex_unlock(&w->lock);
    if (last)
        troupe__ctl(&rt->scheds[0], workers_exited, NULL);
    return NULL;
}

troupe_err
troupe__workers_start(troupe_runtime *rt, unsigned n)
{
    struct workers *w = &rt->pool;
    if (pthread_mutex_init(&w->lock, NULL) != 0 ||
        pthread_cond_init(&w->cond, NULL) != 0)
        return TROUPE_ESYS;
    w->threads = troupe_calloc(n, sizeof(pthread_t));
    if (w->threads == NULL)
        return TROUPE_ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&w->threads[i], NULL, worker_main, rt) != 0)
            return TROUPE_ESYS;
        w->n++;
        pthread_mutex_lock(&w->lock);
        w->alive++;
        pthread_mutex_unlock(&w->lock);
    }
    return TROUPE_OK;
}

static troupe_err
submit(troupe_runtime *rt, struct job *j)
{
    struct workers *w = &rt->pool;
    pthread_mutex_lock(&w->lock);
    if (w->stopping) {
        pthread_mutex_unlock(&w->lock);
        return TROUPE_ECLOSED;
    }
    j->next = NULL;
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return TROUPE_OK;
}

void
troupe__workers_stop(troupe_runtime *rt)
{
    struct workers *w = &rt->pool;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    bool none = w->alive == 0;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    if (none)
        workers_exited(&rt->scheds[0], NULL);
}

void
troupe__workers_join(troupe_runtime *rt)
{
    struct workers *w = &rt->pool;
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    troupe_free(w->threads);
    w->threads = NULL;
    w->n = 0;
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
}

troupe_err
troupe_work_submit(troupe_actor *self, void (*work)(void *arg), void *arg,
                   uint32_t done_kind, void (*drop)(void *arg))
{
    if (self == NULL || work == NULL)
        return TROUPE_EINVAL;
    struct job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL)
        return TROUPE_ENOMEM;
    j->fn = work;
    j->arg = arg;
    j->drop = drop;
    j->done_kind = done_kind;
    j->target = troupe_self(self);
    troupe_err e = submit(troupe_actor_runtime(self), j);
    if (e != TROUPE_OK)
        troupe_free(j);
    return e;
}

troupe_err
troupe_runtime_work(troupe_runtime *rt, void (*fn)(void *arg),
                    void (*done)(void *arg, troupe_runtime *rt), void *arg)
{
    if (rt == NULL || fn == NULL || done == NULL)
        return TROUPE_EINVAL;
    struct job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL)
        return TROUPE_ENOMEM;
    j->fn = fn;
    j->arg = arg;
    j->done_cb = done;
    troupe_err e = submit(rt, j);
    if (e != TROUPE_OK)
        troupe_free(j);
    return e;
}

/* Defined in runtime.c: the pool is gone; shutdown may continue. */
void
troupe__on_workers_exited(struct sched *s);

static void
workers_exited(struct sched *s, void *arg)
{
    (void)arg;
    troupe__on_workers_exited(s);
}
