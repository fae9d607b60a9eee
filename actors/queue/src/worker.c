/*
 * Queue workers (troupe_queue_worker): create, stop, destroy, and the
 * count of deliveries in flight that a stop waits on.
 *
 * A worker is a dispatch target (troupe/dispatch.h) plus its subscription
 * to a range of partitions. With a handler it creates a callback target
 * of its own (credit and timeout from the options; the handler runs in
 * troupe__tq_worker_task, partition.c), stopped and destroyed when the
 * worker's stop ends; with `target` it names a target the caller created
 * (a pull target on a troupe_host: credit and timeout are that target's).
 * The partitions take the target's credit and wait on it with the
 * worker's credit_wait, whose kick is TQ_CREDIT to the whole range.
 *
 * A worker is refcounted: its owner, each partition it subscribed to and
 * each delivery hold a reference, so a partition or a late outcome never
 * touches freed memory, whatever order stops and destroys come in.
 *
 * Stop. `running` is 1 (the worker's own share) plus one per delivery
 * whose task has not ended (its outcome settled and, when it completes
 * the event, committed). A stop sets `stopping` (the partitions
 * deliver no more to it) and releases the worker's share; the release
 * that brings the count to 0 ends the stop: the worker leaves the set's
 * list, then its callback runs. A delivery holds only while the count is
 * above 0 and gives up when it sees `stopping` after its hold, so the
 * count reaches 0 once and a stop ends once; an own target is then
 * stopped (it holds nothing by then but for slots freeing), and the stop
 * is over when that stop's callback has run. The stop ends on the thread
 * of that last release (a commit pipeline's writer, a pool thread, a
 * partition's loop) and the callback is posted to scheduler 0 from
 * there; a blocking twin's waiter is released right there, so it does not
 * need scheduler 0 to run.
 *
 * The set's stop (queues.c) stops the workers still running and goes on
 * once the last has left its list; so worker.c calls queues.c (find, the
 * list) and queues.c calls worker.c (troupe__tq_workers_stop): the one
 * circle of the module, see README.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

void
troupe__tq_worker_release(troupe_queue_worker *w)
{
    if (w == NULL || atomic_fetch_sub(&w->refs, 1) != 1)
        return;
    if (w->target != NULL) {
        troupe__target_credit_unwait(w->target, &w->wait);
        troupe__target_release(w->target);
    }
    troupe__tq_release(w->q);
    troupe_free(w);
}

uint32_t
troupe__tq_worker_held(troupe_queue_worker *w)
{
    troupe_target_stats st;
    troupe_target_stats_get(w->target, &st);
    return st.held;
}

void
troupe__tq_worker_kick(void *arg)
{
    troupe_queue_worker *w = arg;
    troupe__tq_kick_range(w->q, w->first, w->last, TQ_CREDIT);
}

static void
stopped_s0(void *arg, troupe_runtime *rt)
{
    (void)rt;
    troupe_queue_worker *w = arg;
    w->stop_cb(w, w->stop_arg);
    troupe__tq_worker_release(w); /* the stop's reference */
}

/* The stop is over. */
static void
stopped(troupe_queue_worker *w)
{
    atomic_store(&w->state, TQ_STOPPED);
    troupe__tq_worker_unlist(w->qs, w); /* the last touch of the set */
    if (w->stop_cb == NULL) {
        troupe__tq_worker_release(w);
    } else if (w->stop_post) {
        troupe__post_or_run(w->rt, stopped_s0, w);
    } else {
        w->stop_cb(w, w->stop_arg);
        troupe__tq_worker_release(w);
    }
}

/* The own target's stop is over: it is destroyed (its name freed, off
 * the runtime's dispatch, so the runtime may go before the worker); the
 * worker's reference keeps its memory for partitions that still look. */
static void
target_stopped(troupe_target *t, void *arg)
{
    troupe_target_destroy(t);
    stopped(arg);
}

/* The count reached 0: every task ended. */
static void
settled(troupe_queue_worker *w)
{
    if (!w->own_target ||
        troupe_target_stop(w->target, target_stopped, w) != TROUPE_OK)
        stopped(w);
}

bool
troupe__tq_worker_hold(troupe_queue_worker *w)
{
    size_t c = atomic_load(&w->running);
    do {
        if (c == 0)
            return false;
    } while (!atomic_compare_exchange_weak(&w->running, &c, c + 1));
    if (atomic_load(&w->stopping)) {
        troupe__tq_worker_done(w);
        return false;
    }
    return true;
}

void
troupe__tq_worker_done(troupe_queue_worker *w)
{
    if (atomic_fetch_sub(&w->running, 1) == 1)
        settled(w);
}

/* Starts the stop: ESTATE unless w runs. cb NULL: nothing to call. */
static troupe_err
stop_start(troupe_queue_worker *w, troupe_queue_worker_stop_cb cb, void *arg,
           bool post)
{
    int want = TQ_RUNNING;
    if (!atomic_compare_exchange_strong(&w->state, &want, TQ_STOPPING))
        return TROUPE_ESTATE;
    w->stop_cb = cb;
    w->stop_arg = arg;
    w->stop_post = post;
    atomic_fetch_add(&w->refs, 1); /* released once the stop is over */
    atomic_store(&w->stopping, true);
    troupe__tq_worker_done(w); /* the worker's own share */
    return TROUPE_OK;
}

void
troupe__tq_workers_stop(troupe_queue_worker **ws, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        (void)stop_start(ws[i], NULL, NULL, false); /* ESTATE: stopping */
        troupe__tq_worker_release(ws[i]);
    }
    troupe_free(ws);
}

/* The worker's target: its own callback target, or the caller's. */
static troupe_err
target_attach(troupe_queue_worker *w, const troupe_queue_worker_opts *o)
{
    if (o->target != NULL) {
        w->target = troupe__target_find(w->rt, o->target, strlen(o->target));
        if (w->target == NULL)
            return troupe__errf(TROUPE_ENOENT,
                                "troupe_queue_worker_create: no target %s",
                                o->target);
        return TROUPE_OK;
    }
    char name[64];
    snprintf(name, sizeof(name), "troupe.queue.worker.%p", (void *)w);
    troupe_target_opts to = {
        .name = name,
        .fn = troupe__tq_worker_task,
        .arg = w,
        .credit = o->credit,
        .timeout_ms = o->timeout_ms ? o->timeout_ms : TROUPE_QUEUE_TIMEOUT_MS};
    troupe_err e = troupe_target_create(w->rt, &to, &w->target);
    if (e != TROUPE_OK)
        return e;
    troupe__target_retain(w->target); /* the worker's, beside the owner's */
    w->own_target = true;
    return TROUPE_OK;
}

/* The own target of a worker that never ran. */
static void
target_dropped(troupe_target *t, void *arg)
{
    (void)arg;
    troupe_target_destroy(t);
}

troupe_err
troupe_queue_worker_create(troupe_queues *qs, const troupe_queue_worker_opts *o,
                           troupe_queue_worker **out)
{
    if (qs == NULL || o == NULL || out == NULL ||
        (o->handler == NULL) == (o->target == NULL) || o->first > o->last ||
        (unsigned)o->sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    if (o->handler != NULL ? o->credit == 0 || o->credit > 65536
                           : o->credit != 0 || o->timeout_ms != 0)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find_writable(qs, o->queue,
                                            "troupe_queue_worker_create", &q);
    if (e != TROUPE_OK)
        return e;
    if (o->last >= q->partitions ||
        (o->target != NULL && strlen(q->name) > TQ_PULL_QUEUE_NAME_MAX)) {
        troupe__tq_release(q);
        return TROUPE_EINVAL;
    }
    troupe_queue_worker *w = troupe_calloc(1, sizeof(*w));
    if (w == NULL) {
        troupe__tq_release(q);
        return TROUPE_ENOMEM;
    }
    atomic_init(&w->refs, 1);
    w->qs = qs;
    w->q = q;
    w->rt = qs->rt;
    w->first = o->first;
    w->last = o->last;
    w->handler = o->handler;
    w->arg = o->arg;
    w->sync = o->sync;
    w->wait.kick = troupe__tq_worker_kick;
    w->wait.arg = w;
    atomic_init(&w->running, 1);
    atomic_init(&w->state, TQ_RUNNING);
    if ((e = target_attach(w, o)) != TROUPE_OK ||
        (e = troupe__tq_worker_list(qs, w)) != TROUPE_OK) {
        if (w->own_target)
            (void)troupe_target_stop(w->target, target_dropped, NULL);
        troupe__tq_worker_release(w);
        return e;
    }
    for (uint32_t p = w->first; p <= w->last; p++) {
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, TQ_SUBSCRIBE, NULL, 0) != TROUPE_OK)
            continue; /* that partition never delivers to w */
        atomic_fetch_add(&w->refs, 1);
        m->ptr = w;
        m->ptr_drop = (void (*)(void *))troupe__tq_worker_release;
        (void)troupe_runtime_send(qs->rt, q->parts[p], &m);
    }
    *out = w;
    return TROUPE_OK;
}

troupe_err
troupe_queue_worker_stop(troupe_queue_worker *w, troupe_queue_worker_stop_cb cb,
                         void *arg)
{
    if (w == NULL || cb == NULL)
        return TROUPE_EINVAL;
    return stop_start(w, cb, arg, true);
}

static void
wake_stopped(troupe_queue_worker *w, void *arg)
{
    (void)w;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_queue_worker_stop_wait(troupe_queue_worker *w)
{
    if (w == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_queue_worker_stop_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter s;
    troupe__waiter_init(&s, 1);
    return troupe__waiter_finish(&s, stop_start(w, wake_stopped, &s, false),
                                 NULL);
}

void
troupe_queue_worker_destroy(troupe_queue_worker *w)
{
    if (w == NULL)
        return;
    if (atomic_load(&w->state) != TQ_STOPPED)
        abort(); /* partitions may still deliver to it: stop first */
    troupe__tq_worker_release(w); /* the owner's reference */
}
