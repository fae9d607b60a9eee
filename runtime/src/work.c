/*
 * The runtime's own worker pool for blocking work (fsync, cache-missing
 * reads, host callbacks), separate from libuv's shared threadpool so that
 * our blocking work cannot starve a host's file system calls or DNS.
 *
 * Lanes. The pool is split into lanes (runtime.h), each with its own
 * threads, queue and budgets: STORAGE for short storage work, HOST for
 * host code that may block for long. One shared queue would let a few
 * queue handlers that block for minutes occupy every thread while commits
 * and reads wait behind them; a priority queue would not help either, as
 * a thread that runs a blocked handler is lost to everyone.
 *
 * Budgets. Each lane bounds the actor jobs it holds (queued or running)
 * and the bytes their submitters declared; past either, submit fails with
 * EFULL and nothing is queued. Without the bounds a flood of requests from
 * the network became a queue as long as the flood (gigabytes, and a
 * shutdown that drained it for minutes). Adapter jobs (troupe_runtime_work)
 * are completions of host calls already made, which their callers cannot
 * fail late, so they count only the bytes they declare.
 *
 * A job either completes to an actor (a message with ptr = arg; drop(arg) if
 * the actor is gone), to a callback run on scheduler 0, or (an adapter job
 * with no callback) in fn itself, which then finishes the job on the
 * worker thread without a hop to scheduler 0. At shutdown every
 * actor is already gone when the pool is told to stop (runtime.c), so an
 * actor job not yet started could only end in drop: it is cancelled (drop
 * runs now, work never), which keeps "exactly one of the two" and bounds
 * shutdown by the jobs running, not by the backlog. Adapter jobs still run
 * (their callbacks are promised). Then the threads exit; the last one tells
 * scheduler 0.
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
    if (j->adapter && j->done_cb == NULL) { /* fn finished the job */
        troupe_free(j);
        return;
    }
    if (j->done_cb != NULL) {
        if (troupe__ctl(&rt->scheds[0], done_on_sched0, j) != TROUPE_OK) {
            /* Scheduler 0 closes only after the pool has exited. */
            troupe_log(&rt->logger, TROUPE_LOG_ERROR, "runtime",
                       "a work completion was lost at shutdown");
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

/* Gives back what j held of its lane's budgets; lane lock held. */
static void
unaccount(struct lane *l, bool counted, uint64_t bytes)
{
    if (counted)
        l->jobs--;
    l->bytes -= bytes;
}

static void *
worker_main(void *arg)
{
    struct lane *l = arg;
    troupe_runtime *rt = l->rt;
    pthread_setname_np(pthread_self(), l == &rt->pool.lanes[TROUPE_LANE_HOST]
                                           ? "troupe-host"
                                           : "troupe-work");
    pthread_mutex_lock(&l->lock);
    for (;;) {
        while (l->head == NULL && !l->stopping)
            pthread_cond_wait(&l->cond, &l->lock);
        struct job *j = l->head;
        if (j == NULL)
            break; /* stopping and nothing left */
        l->head = j->next;
        if (l->head == NULL)
            l->tail = NULL;
        pthread_mutex_unlock(&l->lock);
        bool counted = j->counted;
        uint64_t bytes = j->bytes;
        j->fn(j->arg);
        /* The budgets go back before the completion runs, so whoever
         * the completion wakes finds them free. */
        pthread_mutex_lock(&l->lock);
        unaccount(l, counted, bytes);
        pthread_mutex_unlock(&l->lock);
        complete(rt, j);
        pthread_mutex_lock(&l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    if (atomic_fetch_sub(&rt->pool.alive, 1) == 1)
        troupe__ctl(&rt->scheds[0], workers_exited, NULL);
    return NULL;
}

static troupe_err
lane_start(troupe_runtime *rt, struct lane *l, unsigned n,
           const troupe_runtime_opts *o)
{
    l->rt = rt;
    l->max_jobs = o->work_max_jobs;
    l->max_bytes = o->work_max_bytes;
    if (pthread_mutex_init(&l->lock, NULL) != 0 ||
        pthread_cond_init(&l->cond, NULL) != 0)
        return TROUPE_ESYS;
    l->threads = troupe_calloc(n, sizeof(pthread_t));
    if (l->threads == NULL)
        return TROUPE_ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        atomic_fetch_add(&rt->pool.alive, 1);
        if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
            atomic_fetch_sub(&rt->pool.alive, 1);
            return TROUPE_ESYS;
        }
        l->n++;
    }
    return TROUPE_OK;
}

troupe_err
troupe__workers_start(troupe_runtime *rt, const troupe_runtime_opts *o)
{
    struct workers *w = &rt->pool;
    atomic_init(&w->alive, 0);
    troupe_err e =
        lane_start(rt, &w->lanes[TROUPE_LANE_STORAGE], o->workers, o);
    if (e == TROUPE_OK)
        e = lane_start(rt, &w->lanes[TROUPE_LANE_HOST], o->host_workers, o);
    return e;
}

static troupe_err
submit(troupe_runtime *rt, troupe_lane lane, struct job *j)
{
    struct lane *l = &rt->pool.lanes[lane];
    pthread_mutex_lock(&l->lock);
    if (l->stopping) {
        pthread_mutex_unlock(&l->lock);
        return TROUPE_ECLOSED;
    }
    /* A job larger than the byte budget is admitted alone, so that no
     * job is refused forever. */
    if ((j->counted && l->jobs >= l->max_jobs) ||
        (j->bytes > 0 && l->bytes > 0 && j->bytes > l->max_bytes - l->bytes)) {
        pthread_mutex_unlock(&l->lock);
        atomic_fetch_add_explicit(&rt->st_work_refused, 1,
                                  memory_order_relaxed);
        return TROUPE_EFULL;
    }
    if (j->counted)
        l->jobs++;
    l->bytes += j->bytes;
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->lock);
    return TROUPE_OK;
}

/* Stops a lane: cancels its actor jobs not yet started (see the design
 * note) and lets its threads exit once the rest has run. */
static void
lane_stop(troupe_runtime *rt, struct lane *l)
{
    pthread_mutex_lock(&l->lock);
    l->stopping = true;
    struct job *cancel = NULL, *j = l->head;
    l->head = l->tail = NULL;
    while (j != NULL) {
        struct job *next = j->next;
        j->next = NULL;
        if (j->adapter) { /* kept, in order */
            if (l->tail != NULL)
                l->tail->next = j;
            else
                l->head = j;
            l->tail = j;
        } else {
            unaccount(l, j->counted, j->bytes);
            j->next = cancel;
            cancel = j;
        }
        j = next;
    }
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
    while (cancel != NULL) {
        j = cancel;
        cancel = j->next;
        if (j->drop != NULL)
            j->drop(j->arg);
        troupe_free(j);
        atomic_fetch_add_explicit(&rt->st_work_cancelled, 1,
                                  memory_order_relaxed);
    }
}

void
troupe__workers_stop(troupe_runtime *rt)
{
    struct workers *w = &rt->pool;
    unsigned started = 0;
    for (unsigned i = 0; i < TROUPE__LANES; i++) {
        started += w->lanes[i].n;
        lane_stop(rt, &w->lanes[i]);
    }
    /* With threads, the last one to exit reports (worker_main). */
    if (started == 0)
        workers_exited(&rt->scheds[0], NULL);
}

void
troupe__workers_join(troupe_runtime *rt)
{
    for (unsigned i = 0; i < TROUPE__LANES; i++) {
        struct lane *l = &rt->pool.lanes[i];
        for (unsigned k = 0; k < l->n; k++)
            pthread_join(l->threads[k], NULL);
        troupe_free(l->threads);
        l->threads = NULL;
        l->n = 0;
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->cond);
    }
}

troupe_err
troupe_work_submit_in(troupe_actor *self, troupe_lane lane, uint64_t bytes,
                      void (*work)(void *arg), void *arg, uint32_t done_kind,
                      void (*drop)(void *arg))
{
    if (self == NULL || work == NULL || (unsigned)lane >= TROUPE__LANES)
        return TROUPE_EINVAL;
    struct job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL)
        return TROUPE_ENOMEM;
    j->fn = work;
    j->arg = arg;
    j->drop = drop;
    j->done_kind = done_kind;
    j->target = troupe_self(self);
    j->counted = true;
    j->bytes = bytes;
    troupe_err e = submit(troupe_actor_runtime(self), lane, j);
    if (e != TROUPE_OK)
        troupe_free(j);
    return e;
}

troupe_err
troupe_work_submit(troupe_actor *self, void (*work)(void *arg), void *arg,
                   uint32_t done_kind, void (*drop)(void *arg))
{
    return troupe_work_submit_in(self, TROUPE_LANE_STORAGE, 0, work, arg,
                                 done_kind, drop);
}

troupe_err
troupe_runtime_work_in(troupe_runtime *rt, troupe_lane lane, uint64_t bytes,
                       void (*fn)(void *arg),
                       void (*done)(void *arg, troupe_runtime *rt), void *arg)
{
    if (rt == NULL || fn == NULL || (unsigned)lane >= TROUPE__LANES)
        return TROUPE_EINVAL;
    struct job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL)
        return TROUPE_ENOMEM;
    j->fn = fn;
    j->arg = arg;
    j->done_cb = done;
    j->adapter = true;
    j->bytes = bytes;
    troupe_err e = submit(rt, lane, j);
    if (e != TROUPE_OK)
        troupe_free(j);
    return e;
}

troupe_err
troupe_runtime_work(troupe_runtime *rt, void (*fn)(void *arg),
                    void (*done)(void *arg, troupe_runtime *rt), void *arg)
{
    return troupe_runtime_work_in(rt, TROUPE_LANE_STORAGE, 0, fn, done, arg);
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
