/*
 * The set of queues of a database (troupe_queues): the map of queues by
 * name, the list of workers not yet stopped, open (the catalog's "queue"
 * entries loaded, their partitions spawned), stop, destroy, the listing
 * and kick (pause and resume are catalog jobs: queue_ddl.c).
 *
 * Stop. The workers first, as their handlers' outcomes need the
 * partitions: every worker still running stops (troupe__tq_workers_stop)
 * and the stop goes on when the last one leaves the list
 * (troupe__tq_worker_unlist, under `mu`, decides it once). Then the
 * partitions, as a catalog job (troupe__ddl) behind the creates and drops
 * queued before it: a job that waits for actors is a WAIT step (their
 * stop callbacks resume it), never a blocked thread. The map does not
 * change once the state is STOPPING: creates and drops refuse (ESTATE)
 * under `mu`, so the job reads it without the lock.
 *
 * A read-only set (its db is) spawns no partition actor: nothing can be
 * delivered, as every call that would write is refused with EREADONLY
 * (troupe__tq_writable); the inspection calls read as always.
 */
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/names.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

troupe_err
troupe__tq_writable(const troupe_queues *qs, const char *call)
{
    if (qs == NULL || !qs->read_only)
        return TROUPE_OK;
    return troupe__errf(TROUPE_EREADONLY,
                        "%s: the queues are open on a read-only database",
                        call);
}

/* ---- the map ------------------------------------------------------------ */

static troupe_err
find_locked(troupe_queues *qs, const char *name, size_t *at)
{
    for (size_t i = 0; i < qs->nq; i++)
        if (strcmp(qs->qs[i]->name, name) == 0) {
            *at = i;
            return TROUPE_OK;
        }
    return TROUPE_ENOENT;
}

troupe_err
troupe__tq_find(troupe_queues *qs, const char *name, tq_queue **out)
{
    size_t len = 0;
    if (qs == NULL)
        return TROUPE_EINVAL;
    if (!troupe_catalog_name_valid(name, &len))
        return troupe__name_err("queue name", name, TROUPE_QUEUE_NAME_MAX);
    pthread_mutex_lock(&qs->mu);
    size_t at = 0;
    troupe_err e =
        qs->state != TQ_RUNNING ? TROUPE_ESTATE : find_locked(qs, name, &at);
    if (e == TROUPE_OK)
        *out = troupe__tq_retain(qs->qs[at]);
    pthread_mutex_unlock(&qs->mu);
    if (e == TROUPE_ENOENT)
        e = troupe__err_named(TROUPE_ENOQUEUE, "no queue", name, len);
    return e;
}

troupe_err
troupe__tq_find_writable(troupe_queues *qs, const char *name, const char *call,
                         tq_queue **out)
{
    troupe_err e = troupe__tq_writable(qs, call);
    return e != TROUPE_OK ? e : troupe__tq_find(qs, name, out);
}

troupe_err
troupe__tq_map_absent(troupe_queues *qs, const char *name)
{
    pthread_mutex_lock(&qs->mu);
    size_t at;
    troupe_err e = qs->state != TQ_RUNNING                   ? TROUPE_ESTATE
                   : find_locked(qs, name, &at) == TROUPE_OK ? TROUPE_EEXIST
                                                             : TROUPE_OK;
    pthread_mutex_unlock(&qs->mu);
    return e;
}

static troupe_err
map_add_locked(troupe_queues *qs, tq_queue *q)
{
    tq_queue **n = troupe_realloc(qs->qs, (qs->nq + 1) * sizeof(*n));
    if (n == NULL)
        return TROUPE_ENOMEM;
    qs->qs = n;
    qs->qs[qs->nq++] = q;
    return TROUPE_OK;
}

troupe_err
troupe__tq_map_add(troupe_queues *qs, tq_queue *q)
{
    pthread_mutex_lock(&qs->mu);
    troupe_err e =
        qs->state != TQ_RUNNING ? TROUPE_ESTATE : map_add_locked(qs, q);
    pthread_mutex_unlock(&qs->mu);
    return e;
}

troupe_err
troupe__tq_map_take(troupe_queues *qs, const char *name, tq_queue **out)
{
    pthread_mutex_lock(&qs->mu);
    size_t at = 0;
    troupe_err e =
        qs->state != TQ_RUNNING ? TROUPE_ESTATE : find_locked(qs, name, &at);
    if (e == TROUPE_ENOENT)
        e = TROUPE_ENOQUEUE;
    if (e == TROUPE_OK && qs->qs[at]->workers > 0)
        e = TROUPE_EBUSY;
    if (e == TROUPE_OK) {
        *out = qs->qs[at];
        qs->qs[at] = qs->qs[--qs->nq]; /* gone for lookups from now on */
    }
    pthread_mutex_unlock(&qs->mu);
    return e;
}

troupe_err
troupe__tq_map_all(troupe_queues *qs, tq_queue ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&qs->mu);
    if (qs->state != TQ_RUNNING) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ESTATE;
    }
    size_t nq = qs->nq;
    tq_queue **list = nq ? troupe_malloc(nq * sizeof(*list)) : NULL;
    if (nq && list == NULL) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ENOMEM;
    }
    for (size_t i = 0; i < nq; i++)
        list[i] = troupe__tq_retain(qs->qs[i]);
    pthread_mutex_unlock(&qs->mu);
    *out = list;
    *n = nq;
    return TROUPE_OK;
}

/* ---- the worker list ---------------------------------------------------- */

troupe_err
troupe__tq_worker_list(troupe_queues *qs, troupe_queue_worker *w)
{
    pthread_mutex_lock(&qs->mu);
    troupe_queue_worker **nw =
        qs->state != TQ_RUNNING
            ? NULL
            : troupe_realloc(qs->ws, (qs->nws + 1) * sizeof(*nw));
    troupe_err e = qs->state != TQ_RUNNING ? TROUPE_ESTATE
                   : nw == NULL            ? TROUPE_ENOMEM
                                           : TROUPE_OK;
    if (e == TROUPE_OK) {
        qs->ws = nw;
        qs->ws[qs->nws++] = w;
        w->q->workers++;
    }
    pthread_mutex_unlock(&qs->mu);
    return e;
}

static void
stop_parts(troupe_queues *qs);

void
troupe__tq_worker_unlist(troupe_queues *qs, troupe_queue_worker *w)
{
    pthread_mutex_lock(&qs->mu);
    for (size_t i = 0; i < qs->nws; i++)
        if (qs->ws[i] == w) {
            qs->ws[i] = qs->ws[--qs->nws];
            w->q->workers--;
            break;
        }
    /* decided under the lock: once it is released a stop may finish and
     * its owner destroy qs */
    bool go = qs->state == TQ_STOPPING && qs->nws == 0 && !qs->parts_stopping;
    if (go)
        qs->parts_stopping = true;
    pthread_mutex_unlock(&qs->mu);
    if (go)
        stop_parts(qs);
}

/* ---- open --------------------------------------------------------------- */

static void
wake(void *arg)
{
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

/* Stops q's partitions and waits for them (a failed open: it blocks). */
static void
parts_stop_wait(tq_queue *q)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe__tq_partitions_stop(q, wake, &w);
    troupe__waiter_finish(&w, TROUPE_OK, NULL);
}

/* The loader's call for one stored queue (troupe__catalog_load checks the
 * key and, after, the id): its value decoded, its actors started. */
static troupe_err
load_queue(void *arg, const char *name, const void *v, size_t n, uint64_t *id)
{
    troupe_queues *qs = arg;
    tq_entry en;
    troupe_err e = troupe__tq_entry_value_decode(v, n, &en);
    if (e == TROUPE_OK)
        *id = en.id;
    if (e == TROUPE_OK && *id > troupe__catalog_seq(qs->cat))
        return TROUPE_ECORRUPT; /* checked before the queue's open writes
                                   the order mark into q.<id> */
    tq_queue *q = NULL;
    if (e == TROUPE_OK)
        e = troupe__tq_queue_create(qs, name, &en, &q);
    if (e == TROUPE_OK && !qs->read_only)
        e = troupe__tq_partitions_spawn(q);
    if (e == TROUPE_OK)
        e = map_add_locked(qs, q); /* nobody else sees qs yet */
    if (e != TROUPE_OK && q != NULL) {
        parts_stop_wait(q);
        troupe__tq_release(q);
    }
    return e;
}

troupe_err
troupe_queues_open(const troupe_queues_opts *o, troupe_queues **out)
{
    if (o == NULL || out == NULL || o->catalog == NULL)
        return TROUPE_EINVAL;
    bool ro = troupe_db_read_only(troupe__catalog_db(o->catalog));
    if (o->commit == NULL && !ro)
        return TROUPE_EINVAL;
    troupe_queues *qs = troupe_calloc(1, sizeof(*qs));
    if (qs == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = troupe__catalog_attach(o->catalog);
    if (e != TROUPE_OK) {
        troupe_free(qs);
        return e;
    }
    qs->cat = o->catalog;
    qs->rt = troupe__catalog_rt(qs->cat);
    qs->db = troupe__catalog_db(qs->cat);
    qs->read_only = ro;
    qs->commit = ro ? NULL : o->commit;
    qs->clock = o->clock;
    qs->clock_ctx = o->clock_ctx;
    pthread_mutex_init(&qs->mu, NULL);
    e = troupe__catalog_load(qs->cat, "queue", load_queue, qs);
    if (e != TROUPE_OK) {
        for (size_t i = 0; i < qs->nq; i++) {
            parts_stop_wait(qs->qs[i]);
            troupe__tq_release(qs->qs[i]);
        }
        troupe_free(qs->qs);
        pthread_mutex_destroy(&qs->mu);
        troupe__catalog_detach(qs->cat);
        troupe_free(qs);
        return e;
    }
    *out = qs;
    return TROUPE_OK;
}

/* ---- stop and destroy --------------------------------------------------- */

static void
stopped_s0(void *arg, troupe_runtime *rt)
{
    (void)rt;
    troupe_queues *qs = arg;
    qs->stop_cb(qs, qs->stop_arg);
}

/* Everything has stopped. The last touch of qs but for the callback. */
static void
stop_done(troupe_queues *qs)
{
    pthread_mutex_lock(&qs->mu);
    qs->state = TQ_STOPPED;
    bool post = qs->stop_post;
    troupe_queues_stop_cb cb = qs->stop_cb;
    void *arg = qs->stop_arg;
    pthread_mutex_unlock(&qs->mu);
    if (post)
        troupe__post_or_run(qs->rt, stopped_s0, qs);
    else
        cb(qs, arg);
}

static void
job_part_stopped(void *arg)
{
    tq_stopjob *j = arg;
    if (atomic_fetch_sub(&j->left, 1) != 1)
        return;
    if (j->direct)
        stop_done(j->qs);
    else
        troupe__ddl_resume(&j->ddl);
}

static void
stop_all_parts(tq_stopjob *j)
{
    troupe_queues *qs = j->qs;
    atomic_store(&j->left, qs->nq + 1);
    for (size_t i = 0; i < qs->nq; i++)
        troupe__tq_partitions_stop(qs->qs[i], job_part_stopped, j);
    job_part_stopped(j);
}

/* (0) stop every queue's partitions -> WAIT; (1) DONE. */
static troupe__ddl_step
stop_step(troupe__ddl *d)
{
    if (d->at++ > 0)
        return TROUPE__DDL_DONE;
    stop_all_parts((tq_stopjob *)d);
    return TROUPE__DDL_WAIT;
}

static void
stop_job_done(troupe__ddl *d)
{
    stop_done(((tq_stopjob *)d)->qs);
}

static void
stop_parts(troupe_queues *qs)
{
    tq_stopjob *j = &qs->stop;
    j->qs = qs;
    j->ddl.cat = qs->cat;
    j->ddl.step = stop_step;
    j->ddl.done = stop_job_done;
    if (troupe__ddl_submit(&j->ddl) != TROUPE_OK) {
        /* the catalog is stopping (it may not while qs is attached): no
         * order to keep, stop them here */
        j->direct = true;
        stop_all_parts(j);
    }
}

static troupe_err
stop_start(troupe_queues *qs, troupe_queues_stop_cb cb, void *arg, bool post)
{
    pthread_mutex_lock(&qs->mu);
    troupe_err e = qs->state != TQ_RUNNING ? TROUPE_ESTATE : TROUPE_OK;
    /* the workers to stop, taken under the lock: once it is released the
     * last of them may leave, the stop finish and qs go */
    size_t n = qs->nws;
    troupe_queue_worker **ws = NULL;
    if (e == TROUPE_OK && n > 0 &&
        (ws = troupe_malloc(n * sizeof(*ws))) == NULL)
        e = TROUPE_ENOMEM;
    if (e != TROUPE_OK) {
        pthread_mutex_unlock(&qs->mu);
        return e;
    }
    for (size_t i = 0; i < n; i++) {
        ws[i] = qs->ws[i];
        atomic_fetch_add(&ws[i]->refs, 1);
    }
    qs->state = TQ_STOPPING;
    qs->stop_cb = cb;
    qs->stop_arg = arg;
    qs->stop_post = post;
    if (n == 0)
        qs->parts_stopping = true;
    pthread_mutex_unlock(&qs->mu);
    if (n == 0)
        stop_parts(qs);
    else /* the last one to leave the list goes on */
        troupe__tq_workers_stop(ws, n);
    return TROUPE_OK;
}

troupe_err
troupe_queues_stop(troupe_queues *qs, troupe_queues_stop_cb cb, void *arg)
{
    if (qs == NULL || cb == NULL)
        return TROUPE_EINVAL;
    return stop_start(qs, cb, arg, true);
}

static void
wake_stopped(troupe_queues *qs, void *arg)
{
    (void)qs;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_queues_stop_wait(troupe_queues *qs)
{
    if (qs == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_queues_stop_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, stop_start(qs, wake_stopped, &w, false),
                                 NULL);
}

void
troupe_queues_destroy(troupe_queues *qs)
{
    if (qs == NULL)
        return;
    pthread_mutex_lock(&qs->mu);
    bool stopped = qs->state == TQ_STOPPED;
    pthread_mutex_unlock(&qs->mu);
    if (!stopped)
        abort(); /* partitions and workers still run: stop first */
    for (size_t i = 0; i < qs->nq; i++)
        troupe__tq_release(qs->qs[i]);
    troupe_free(qs->qs);
    troupe_free(qs->ws);
    pthread_mutex_destroy(&qs->mu);
    troupe__catalog_detach(qs->cat);
    troupe_free(qs);
}

/* ---- list, kick ------------------------------------------ */

static int
info_cmp(const void *a, const void *b)
{
    return strcmp(((const troupe_queue_info *)a)->name,
                  ((const troupe_queue_info *)b)->name);
}

troupe_err
troupe_queues_list(troupe_queues *qs, troupe_queue_info **out, size_t *n)
{
    if (qs == NULL || out == NULL || n == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&qs->mu);
    if (qs->state != TQ_RUNNING) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ESTATE;
    }
    size_t bytes = qs->nq * sizeof(troupe_queue_info);
    for (size_t i = 0; i < qs->nq; i++)
        bytes += strlen(qs->qs[i]->name) + 1;
    troupe_queue_info *a = qs->nq ? troupe_malloc(bytes) : NULL;
    if (qs->nq && a == NULL) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ENOMEM;
    }
    char *s = a != NULL ? (char *)(a + qs->nq) : NULL; /* none: no names */
    for (size_t i = 0; i < qs->nq; i++) {
        tq_queue *q = qs->qs[i];
        size_t l = strlen(q->name) + 1;
        memcpy(s, q->name, l);
        a[i] = (troupe_queue_info){s,
                                   q->id,
                                   q->partitions,
                                   q->retention_ms,
                                   q->max_attempts,
                                   atomic_load(&q->paused)};
        s += l;
    }
    *n = qs->nq;
    pthread_mutex_unlock(&qs->mu);
    if (*n > 1)
        qsort(a, *n, sizeof(*a), info_cmp);
    *out = a;
    return TROUPE_OK;
}

troupe_err
troupe_queue_kick(troupe_queues *qs, const char *queue)
{
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find_writable(qs, queue, "troupe_queue_kick", &q);
    if (e != TROUPE_OK)
        return e;
    troupe__tq_kick_range(q, 0, q->partitions - 1, TQ_KICK);
    troupe__tq_release(q);
    return TROUPE_OK;
}
