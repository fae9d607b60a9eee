/*
 * A delivery's job (tq_job, queue_int.h): what happens to one event
 * between the partition's claim and its notice (TQ_SETTLED), on the
 * threads of the dispatch: a handler worker's target function (the
 * handler, on the HOST lane), the task's done (the outcome and its
 * commit), the commit's callback that ends the task; and the header of a
 * pull worker's task.
 *
 * A delivery's job (tq_job) lives from the claim to the notice
 * (TQ_SETTLED): done's side holds it, and so does a handler's until it
 * returns, so a handler past its deadline keeps the row claimed (never
 * delivered twice at once) while the task, and its credit, settled
 * UNKNOWN at the deadline. Whether that handler still runs is the
 * dispatch's answer (troupe__task_taken): a task settled before its
 * callback started never starts it.
 *
 * Where the outcome is built and committed, and why: partition.c.
 */
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

void
troupe__tq_job_free(tq_job *j)
{
    troupe__tq_worker_release(j->w);
    troupe__tq_release(j->q);
    troupe_free(j->cur);
    troupe_free(j->skey);
    troupe_free(j);
}

static void
job_drop(void *arg)
{
    troupe__tq_job_free(arg);
}

/* The job's end, once both sides let go of it: the row is unclaimed and
 * the partition hears of it (TQ_SETTLED), which frees it. */
static void
job_unref(tq_job *j)
{
    if (atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    troupe__tq_unclaim(j->q, j->skey, j->sklen);
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
    atomic_fetch_add(&w->refs, 1);
    job_unref(j);
    if (task_end)
        troupe__target_task_end(w->target, id);
    troupe__tq_worker_done(w); /* the last touch of the runtime */
    troupe__tq_worker_release(w);
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
    if (e != TROUPE_OK) {
        count_outcome(j, e == TROUPE_EINVAL ? TQ_OUT_ERROR : TQ_OUT_FAILED);
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
            if (!troupe__task_taken(w->target, id))
                job_unref(j);
            job_end(j, false);
            return false;
        }
        if (outcome != TROUPE_OUTCOME_SUCCESS || j->fo != outcome) {
            /* an error, or a return the deadline overtook */
            if (j->ran)
                count_outcome(j, j->fo == TROUPE_OUTCOME_SUCCESS
                                     ? TQ_OUT_TIMEOUT
                                     : TQ_OUT_ERROR);
            job_end(j, false);
            return false;
        }
        if (j->gone) { /* nothing left to deliver */
            j->completed = true;
            job_end(j, false);
            return false;
        }
        if (job_commit(j, j->cur, j->curlen))
            return true;
        job_end(j, false);
        return false;
    }
    if (outcome != TROUPE_OUTCOME_SUCCESS ||
        !reply_decode(body, len, &j->kind, &j->time_ms)) {
        count_outcome(j, TQ_OUT_ERROR);
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
    if (held)
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
