/*
 * Queue workers (troupe_queue_worker): create, stop, destroy, and the
 * count of deliveries in flight that a stop waits on.
 *
 * A worker is a dispatch target (troupe/dispatch.h) plus its subscription
 * to a range of partitions. With a handler it creates a callback target
 * of its own (credit and timeout from the options; the handler runs in
 * troupe__tq_worker_task, below), stopped and destroyed when the
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
 *
 * Deliveries. A delivery's job (tq_job, queue_int.h) is what happens to
 * one event between the partition's claim and its notice (TQ_SETTLED),
 * on the threads of the dispatch: a handler worker's target function
 * (the handler, on the HOST lane), the task's done (the outcome and its
 * commit), the commit's callback that ends the task; and the header of a
 * pull worker's task. The partition (partition.c) builds the job and
 * submits the task; everything after is here, so that calls between the
 * two files go one way.
 *
 * The job lives from the claim to the notice: done's side holds it, and so does
 * a handler's until it returns, so a handler past its deadline keeps the row
 * claimed (never delivered twice at once) while the task, and its credit,
 * settled UNKNOWN at the deadline. Whether that handler still runs is the
 * dispatch's answer (troupe__task_taken): a task settled before its
 * callback started never starts it.
 *
 * Where the outcome is built and committed, and why: partition.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

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

/* ---- deliveries -------------------------------------------------------- */

void
troupe__tq_job_free(tq_job *j)
{
    troupe__tq_unclaim(j->q, j->skey, j->sklen);
    troupe__tq_worker_release(j->w);
    troupe__tq_release(j->q);
    troupe_free(j->cur);
    troupe_free(j->herr);
    troupe_free(j->skey);
    troupe_free(j);
}

static void
job_drop(void *arg)
{
    troupe__tq_job_free(arg);
}

/* The job's end, once both sides let go of it: the partition hears of it
 * (TQ_SETTLED) and frees it, which unclaims the row there, on its loop,
 * after any read it started before the outcome committed has come back
 * (so that read cannot offer the row again: partition.c, `gone`). */
static void
job_unref(tq_job *j)
{
    if (atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, TQ_SETTLED, NULL, 0) != TROUPE_OK) {
        troupe__tq_job_free(j);
        return;
    }
    troupe_runtime *rt = j->rt;
    troupe_addr part = j->part;
    m->ptr = j;
    m->ptr_drop = job_drop;
    (void)troupe_runtime_send(rt, part, &m); /* consumes m: a failed send
                                                drops the job */
}

/* Counts one delivery's outcome (TQ_OUT_*). */
static void
count_outcome(tq_job *j, int what)
{
    atomic_fetch_add_explicit(&j->q->outcomes[what], 1, memory_order_relaxed);
}

/* The task ends (its credit, and its count in the worker's `running`):
 * the notice first, while `running` still holds off a graceful stop (and
 * so the runtime's shutdown); w is held by a reference of its own until
 * the end, as the job may go with the notice. */
static void
job_end(tq_job *j, bool task_end)
{
    troupe_queue_worker *w = j->w;
    uint64_t id = j->id;
    if (w == NULL) { /* a park at the scan: no worker, no task */
        job_unref(j);
        return;
    }
    atomic_fetch_add(&w->refs, 1);
    job_unref(j);
    if (task_end)
        troupe__target_task_end(w->target, id);
    troupe__tq_worker_done(w); /* the last touch of the runtime */
    troupe__tq_worker_release(w);
}

void
troupe__tq_job_abort(tq_job *j)
{
    atomic_store(&j->refs, 1); /* no handler will ever hold it */
    job_end(j, false);
}

/* A park's commit completed: the job ends (and its task, when done held
 * it). */
static void
job_parked(troupe_err err, void *arg)
{
    tq_job *j = arg;
    j->parked = err == TROUPE_OK && j->q->max_attempts > 0;
    j->counted = err == TROUPE_OK;
    job_end(j, j->park_end);
}

/* The attempt failed with `why` (a text of n bytes, cut at
 * TROUPE_QUEUE_ERROR_MAX). At the queue's max_attempts the invocation is
 * parked: its record rewritten parked with that error, with the worker's
 * durability; true then (job_parked ends the job, and the task when
 * task_end). Otherwise, or when the commit cannot be submitted (the next
 * pass parks it), false: the caller ends the job. */
static bool
job_park(tq_job *j, bool task_end, const char *why, size_t n)
{
    /* With max_attempts, the record was written before the delivery:
     * only the limit rewrites it. Without, this is where the attempt is
     * counted (partition.c, deliver). */
    bool park = j->q->max_attempts > 0;
    if (park && j->attempt < j->q->max_attempts)
        return false;
    tq_att a = {.attempts = j->attempt,
                .parked = park,
                .error = (const uint8_t *)why,
                .error_len = n};
    troupe_batch *b = NULL;
    troupe_err e = troupe_commit_batch(j->q->commit, &b);
    if (e == TROUPE_OK)
        e = troupe__tq_att_write(b, j->q->cf, j->skey, j->sklen, &a);
    j->park_end = task_end;
    if (e == TROUPE_OK)
        e = troupe_commit_submit(j->q->commit, &b, j->w->sync, job_parked, j);
    troupe_batch_destroy(b); /* NULL once submitted */
    return e == TROUPE_OK;
}

/* job_park with a formatted text. */
static bool
job_parkf(tq_job *j, bool task_end, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool
job_parkf(tq_job *j, bool task_end, const char *fmt, ...)
{
    char why[TROUPE_QUEUE_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    size_t len = n < 0                     ? 0
                 : (size_t)n < sizeof(why) ? (size_t)n
                                           : sizeof(why) - 1;
    return job_park(j, task_end, why, len);
}

/* The outcome commit completed (on the pipeline's writer thread): the
 * outcome is durable (or failed), so the task ends and its credit
 * frees. */
static void
job_committed(troupe_err err, void *arg)
{
    tq_job *j = arg;
    count_outcome(j, err != TROUPE_OK                     ? TQ_OUT_FAILED
                     : j->kind == TROUPE_QUEUE_RESCHEDULE ? TQ_OUT_RESCHEDULE
                                                          : TQ_OUT_ACK);
    if (err == TROUPE_OK && j->resched_part != UINT32_MAX)
        troupe__tq_notify(j->q, j->resched_part, j->time_ms);
    j->completed = err == TROUPE_OK;
    job_end(j, true);
}

/* Builds and submits the outcome commit of the row (val, vlen) read since
 * the claim: true when it is in flight (job_committed ends the task;
 * nothing may touch j after), false when the task ends now. */
static bool
job_commit(tq_job *j, const void *val, size_t vlen)
{
    troupe_batch *b = NULL;
    troupe_err e =
        troupe__tq_outcome_batch(j->q, j->skey, j->sklen, val, vlen, j->kind,
                                 j->time_ms, &b, &j->resched_part);
    if (e == TROUPE_EINVAL) { /* an invalid outcome: a failed attempt */
        count_outcome(j, TQ_OUT_ERROR);
        j->invalid = true;
        return false;
    }
    if (e != TROUPE_OK) {
        count_outcome(j, TQ_OUT_FAILED);
        return false;
    }
    /* Committed asynchronously: this thread is free at once, and many
     * outcomes share one group commit (and fsync). */
    e = troupe_commit_submit(j->q->commit, &b, j->w->sync, job_committed, j);
    troupe_batch_destroy(b); /* NULL once submitted */
    if (e == TROUPE_OK)
        return true;
    count_outcome(j, TQ_OUT_FAILED);
    return false;
}

/* A copy of a handler's error text, cut at TROUPE_QUEUE_ERROR_MAX - 1
 * bytes (NULL when out of memory: the error's name stands in). */
static char *
error_copy(const char *s)
{
    size_t n = strnlen(s, TROUPE_QUEUE_ERROR_MAX - 1);
    char *c = troupe_malloc(n + 1);
    if (c != NULL) {
        memcpy(c, s, n);
        c[n] = 0;
    }
    return c;
}

/* job_park for an outcome job_commit found invalid. */
static bool
job_park_invalid(tq_job *j)
{
    return j->invalid &&
           job_parkf(j, true, "invalid outcome (kind %d, time_ms %lld)",
                     (int)j->kind, (long long)j->time_ms);
}

/* A callback worker's target function, on the HOST lane: the handler. The
 * task's header is the job's address (the worker's own format: no one
 * else submits to its target). The chunk that offered this row may have
 * been read before another outcome (an earlier delivery's, or an explicit
 * ack) committed and released its claim: the row is read again now that
 * it is claimed, and a row that is gone is not delivered. */
troupe_outcome
troupe__tq_worker_task(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    (void)arg;
    tq_job *j = NULL;
    if (t->header_len != sizeof(j))
        return TROUPE_OUTCOME_UNKNOWN;
    memcpy(&j, t->header, sizeof(j));
    troupe_queue_worker *w = j->w;
    troupe_queue_delivery d = {.queue = j->q->name, .attempt = j->attempt};
    troupe_queue_outcome out = {0};
    troupe_err he = troupe_db_get(j->q->db, j->q->cf, NULL, j->skey, j->sklen,
                                  &j->cur, &j->curlen);
    j->gone = he == TROUPE_ENOENT;
    if (he == TROUPE_OK)
        he = troupe__tq_item(j->q, j->skey, j->sklen, j->val, j->vlen, &d.ev);
    bool ran = he == TROUPE_OK;
    if (ran) {
        troupe_hist_add(&j->q->attempts, j->attempt);
        he = w->handler(&d, &out, w->arg);
        /* the handler's text, or the detail it left (troupe_errmsg) */
        if (he != TROUPE_OK && j->q->max_attempts != 0)
            j->herr =
                error_copy(out.error != NULL ? out.error : troupe_errmsg(he));
    }
    j->kind = out.kind;
    j->time_ms = out.time_ms;
    j->ran = ran;
    j->he = he;
    troupe_outcome o = j->gone || he == TROUPE_OK ? TROUPE_OUTCOME_SUCCESS
                                                  : TROUPE_OUTCOME_UNKNOWN;
    j->fo = o;
    int want = J_RUN;
    if (!atomic_compare_exchange_strong(&j->state, &want, J_RETURNED)) {
        /* the deadline settled it while the handler ran: no outcome, and
         * the claim goes with this side's reference */
        if (ran)
            count_outcome(j, TQ_OUT_TIMEOUT);
        job_unref(j);
        return TROUPE_OUTCOME_UNKNOWN;
    }
    job_unref(j); /* done holds the other reference */
    return o;
}

/* Decodes a pull host's reply body: empty (ack) or the map
 * {"reschedule": time_ms}. */
static bool
reply_decode(const uint8_t *body, size_t len, troupe_queue_outcome_kind *kind,
             int64_t *time_ms)
{
    *kind = TROUPE_QUEUE_ACK;
    *time_ms = 0;
    if (len == 0)
        return true;
    troupe_reader rd;
    troupe_reader_init(&rd, body, len);
    uint32_t n = 0;
    troupe_read_map(&rd, &n);
    for (uint32_t i = 0; i < n; i++) {
        const char *k = NULL;
        size_t kl = 0;
        troupe_read_str(&rd, 64, &k, &kl);
        if (k != NULL && kl == 10 && memcmp(k, "reschedule", 10) == 0) {
            troupe_read_int(&rd, time_ms);
            *kind = TROUPE_QUEUE_RESCHEDULE;
        } else {
            troupe_read_skip(&rd);
        }
    }
    return troupe_read_end(&rd) == TROUPE_OK;
}

/* The task's outcome (troupe__task_done_fn), once: for a callback worker
 * on the HOST thread right after the handler (or on the thread of the
 * deadline or of the stop), for a pull worker on the host's thread that
 * replied (or the deadline's, or the close's). SUCCESS commits the
 * outcome and holds the task until the commit's callback; anything else
 * leaves the event pending (delivered again with attempt + 1). */
bool
troupe__tq_job_done(void *arg, uint64_t id, troupe_outcome outcome,
                    const uint8_t *body, size_t len)
{
    tq_job *j = arg;
    troupe_queue_worker *w = j->w;
    j->id = id;
    if (w->handler != NULL) {
        int want = J_RUN;
        if (atomic_compare_exchange_strong(&j->state, &want, J_ABANDONED)) {
            /* settled before the handler returned (its deadline, a stop):
             * a handler that never started never will, and its side of
             * the job goes here */
            bool taken = troupe__task_taken(w->target, id);
            if (!taken)
                job_unref(j);
            /* a handler that started and outlived its deadline is an
             * attempt that failed; one never started is not */
            if (taken &&
                job_parkf(j, false, "no outcome within the handler's timeout"))
                return false;
            job_end(j, false);
            return false;
        }
        if (outcome != TROUPE_OUTCOME_SUCCESS || j->fo != outcome) {
            /* an error, or a return the deadline overtook */
            bool late = j->fo == TROUPE_OUTCOME_SUCCESS;
            if (j->ran)
                count_outcome(j, late ? TQ_OUT_TIMEOUT : TQ_OUT_ERROR);
            if (late ? job_parkf(j, true,
                                 "the handler returned after its "
                                 "timeout")
                     : job_parkf(j, true, "%s: %s",
                                 j->ran ? "handler error"
                                        : "the row could not be read",
                                 j->herr != NULL ? j->herr
                                                 : troupe_strerror(j->he)))
                return true;
            job_end(j, false);
            return false;
        }
        if (j->gone) { /* nothing left to deliver */
            j->completed = true;
            job_end(j, false);
            return false;
        }
        if (job_commit(j, j->cur, j->curlen) || job_park_invalid(j))
            return true;
        job_end(j, false);
        return false;
    }
    if (outcome != TROUPE_OUTCOME_SUCCESS ||
        !reply_decode(body, len, &j->kind, &j->time_ms)) {
        count_outcome(j, TQ_OUT_ERROR);
        bool parked = outcome == TROUPE_OUTCOME_FAILURE
                          ? job_parkf(j, true, "the host replied FAILURE%s%.*s",
                                      len > 0 ? ": " : "",
                                      (int)(len < TROUPE_QUEUE_ERROR_MAX
                                                ? len
                                                : TROUPE_QUEUE_ERROR_MAX),
                                      (const char *)body)
                      : outcome == TROUPE_OUTCOME_SUCCESS
                          ? job_parkf(j, true,
                                      "the host's reply body does not decode "
                                      "as {\"reschedule\": time_ms}")
                      : outcome == TROUPE_OUTCOME_ONGOING
                          ? job_parkf(j, true, "the host replied ONGOING")
                      /* a task the host never took (it closed first) is
                       * no attempt */
                      : troupe__task_taken(w->target, id)
                          ? job_parkf(j, true,
                                      "no reply (UNKNOWN: the deadline passed, "
                                      "the host closed, or a bad reply code)")
                          : false;
        if (parked)
            return true;
        job_end(j, false);
        return false;
    }
    /* read again, as the callback does: an acknowledged row stays gone */
    void *cur = NULL;
    size_t curlen = 0;
    troupe_err e = troupe_db_get(j->q->db, j->q->cf, NULL, j->skey, j->sklen,
                                 &cur, &curlen);
    bool held = e == TROUPE_OK && job_commit(j, cur, curlen);
    troupe_free(cur);
    if (held || job_park_invalid(j))
        return true;
    if (e == TROUPE_ENOENT)
        j->completed = true;
    else if (e != TROUPE_OK)
        count_outcome(j, TQ_OUT_FAILED);
    job_end(j, false);
    return false;
}

static void
put16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void
put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The header of a pull worker's task (docs/queue.md, "Pull workers"):
 * i64 time_ms, u64 order, u32 partition, u16 lengths of the queue name,
 * id, key, owner kind and owner id, u16 0, then those bytes. */
size_t
troupe__tq_pull_header(const tq_queue *q, const troupe_queue_item *it,
                       uint8_t *h)
{
    size_t ql = strlen(q->name);
    put64(h, (uint64_t)it->time_ms);
    put64(h + 8, it->order);
    h[16] = (uint8_t)it->partition;
    h[17] = (uint8_t)(it->partition >> 8);
    h[18] = (uint8_t)(it->partition >> 16);
    h[19] = (uint8_t)(it->partition >> 24);
    put16(h + 20, ql);
    put16(h + 22, it->id_len);
    put16(h + 24, it->key_len);
    put16(h + 26, it->owner_kind_len);
    put16(h + 28, it->owner_id_len);
    put16(h + 30, 0);
    size_t n = TQ_PULL_HEADER_FIXED;
    memcpy(h + n, q->name, ql);
    n += ql;
    memcpy(h + n, it->id, it->id_len);
    n += it->id_len;
    memcpy(h + n, it->key, it->key_len);
    n += it->key_len;
    if (it->owner_kind_len)
        memcpy(h + n, it->owner_kind, it->owner_kind_len);
    n += it->owner_kind_len;
    if (it->owner_id_len)
        memcpy(h + n, it->owner_id, it->owner_id_len);
    return n + it->owner_id_len;
}
