/*
 * Asynchronous twins of the blocking outcome calls (queue.h: ack and
 * reschedule with a callback).
 *
 * The work runs on the STORAGE lane: claim the row, read it, build the
 * outcome's batch and hand it to the commit pipeline. No pool thread
 * waits for the commit: its callback, on the pipeline's writer, unclaims
 * the row and posts the caller's callback to scheduler 0, as a worker's
 * delivery does (partition.c: job_run). So many outcomes share one group
 * commit and fsync, and a lane with one thread is never held by a sync.
 * Arguments are validated (and the queue looked up) before anything is
 * queued, so a call that returns an error never calls back; the
 * partition, and whether the row is busy, are the callback's error, as
 * for the blocking form.
 *
 * A call holds a reference on its queue from the call to the callback
 * (what a drop meanwhile leaves behind stays valid, as for a delivery).
 * Its own references: the pool job's and, while a commit is pending, the
 * commit callback's; the last one frees it.
 */
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"

typedef struct tq_call {
    tq_queue *q; /* retained */
    troupe_runtime *rt;
    uint8_t *skey;
    size_t slen;
    troupe_queue_outcome_kind kind;
    int64_t time_ms;
    troupe_sync sync;
    troupe_queue_cb cb;
    void *arg;
    troupe_err err;
    uint32_t resched_part; /* UINT32_MAX: nothing to notify */
    bool async;            /* the commit callback calls back */
    atomic_int refs;
} tq_call;

static void
call_unref(tq_call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    troupe__tq_release(c->q);
    troupe_free(c->skey);
    troupe_free(c);
}

static void
call_finish(void *arg, troupe_runtime *rt)
{
    (void)rt;
    tq_call *c = arg;
    c->cb(c->err, c->arg);
    call_unref(c);
}

/* The pipeline's writer thread (or the submitting thread at shutdown). */
static void
call_committed(troupe_err err, void *arg)
{
    tq_call *c = arg;
    c->err = err;
    troupe__tq_unclaim(c->q, c->skey, c->slen);
    if (err == TROUPE_OK && c->resched_part != UINT32_MAX)
        troupe__tq_notify(c->q, c->resched_part, c->time_ms);
    troupe__post_or_run(c->rt, call_finish, c);
}

static void
call_run(void *arg)
{
    tq_call *c = arg;
    tq_queue *q = c->q;
    if (!troupe__tq_claim(q, c->skey, c->slen)) {
        c->err = TROUPE_EBUSY;
        return;
    }
    troupe_err e = troupe__tq_outcome_check(q, c->skey, c->slen, c->kind,
                                            c->time_ms, NULL, NULL, NULL);
    void *val = NULL;
    size_t vlen = 0;
    if (e == TROUPE_OK)
        e = troupe_db_get(q->db, q->cf, NULL, c->skey, c->slen, &val, &vlen);
    troupe_batch *b = NULL;
    if (e == TROUPE_OK)
        e = troupe__tq_outcome_batch(q, c->skey, c->slen, val, vlen, c->kind,
                                     c->time_ms, &b, &c->resched_part);
    troupe_free(val);
    if (e == TROUPE_OK) {
        c->async = true;
        atomic_fetch_add(&c->refs, 1);
        e = troupe_commit_submit(q->commit, &b, c->sync, call_committed, c);
        troupe_batch_destroy(b); /* NULL once submitted */
        if (e == TROUPE_OK)
            return;
        c->async = false;
        atomic_fetch_sub(&c->refs, 1);
    } else if (e == TROUPE_ENOENT) {
        e = TROUPE_OK; /* already completed or deleted: a no-op */
    }
    troupe__tq_unclaim(q, c->skey, c->slen);
    c->err = e;
}

/* Scheduler 0, after call_run. */
static void
call_done(void *arg, troupe_runtime *rt)
{
    tq_call *c = arg;
    if (!c->async)
        call_finish(c, rt);
    else
        call_unref(c);
}

static troupe_err
call_start(troupe_queues *qs, const char *queue, const void *skey, size_t slen,
           troupe_queue_outcome_kind kind, int64_t time_ms, troupe_sync sync,
           troupe_queue_cb cb, void *arg)
{
    if (cb == NULL || skey == NULL || slen == 0 || slen > TROUPE_KEY_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF ||
        troupe__tq_outcome_check(NULL, skey, slen, kind, time_ms, NULL, NULL,
                                 NULL) != TROUPE_OK)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    tq_call *c = troupe_calloc(1, sizeof(*c));
    uint8_t *k = troupe_malloc(slen);
    if (c == NULL || k == NULL) {
        troupe_free(c);
        troupe_free(k);
        troupe__tq_release(q);
        return TROUPE_ENOMEM;
    }
    memcpy(k, skey, slen);
    *c = (tq_call){.q = q,
                   .rt = qs->rt,
                   .skey = k,
                   .slen = slen,
                   .kind = kind,
                   .time_ms = time_ms,
                   .sync = sync,
                   .cb = cb,
                   .arg = arg,
                   .resched_part = UINT32_MAX};
    atomic_init(&c->refs, 1);
    e = troupe_runtime_work(qs->rt, call_run, call_done, c);
    if (e != TROUPE_OK)
        call_unref(c);
    return e;
}

troupe_err
troupe_queue_ack(troupe_queues *qs, const char *queue, const void *skey,
                 size_t skey_len, troupe_sync sync, troupe_queue_cb cb,
                 void *arg)
{
    return call_start(qs, queue, skey, skey_len, TROUPE_QUEUE_ACK, 0, sync, cb,
                      arg);
}

troupe_err
troupe_queue_reschedule(troupe_queues *qs, const char *queue, const void *skey,
                        size_t skey_len, int64_t time_ms, troupe_sync sync,
                        troupe_queue_cb cb, void *arg)
{
    return call_start(qs, queue, skey, skey_len, TROUPE_QUEUE_RESCHEDULE,
                      time_ms, sync, cb, arg);
}
