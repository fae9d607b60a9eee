/*
 * Asynchronous twins of the blocking outcome calls: the blocking form runs
 * on the runtime's worker pool and the callback on scheduler 0, like every
 * asynchronous call of the data layer. Arguments are validated (and the
 * queue looked up) before anything is queued, so a call that returns an
 * error never calls back.
 */
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"

typedef struct tq_call {
    troupe_queues *qs;
    char *queue;
    uint8_t *skey;
    size_t slen;
    troupe_queue_outcome_kind kind;
    int64_t time_ms;
    troupe_sync sync;
    troupe_queue_cb cb;
    void *arg;
    troupe_err err;
} tq_call;

static void
call_run(void *arg)
{
    tq_call *c = arg;
    c->err =
        c->kind == TROUPE_QUEUE_ACK
            ? troupe_queue_ack_wait(c->qs, c->queue, c->skey, c->slen, c->sync)
            : troupe_queue_reschedule_wait(c->qs, c->queue, c->skey, c->slen,
                                           c->time_ms, c->sync);
}

static void
call_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    tq_call *c = arg;
    c->cb(c->err, c->arg);
    troupe_free(c->queue);
    troupe_free(c->skey);
    troupe_free(c);
}

static troupe_err
call_start(troupe_queues *qs, const char *queue, const void *skey, size_t slen,
           troupe_queue_outcome_kind kind, int64_t time_ms, troupe_sync sync,
           troupe_queue_cb cb, void *arg)
{
    /* the partition is checked by the blocking form, as it does for
     * troupe_queue_ack_wait: its error is the callback's */
    if (cb == NULL || skey == NULL || slen == 0 || slen > TROUPE_KEY_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF ||
        troupe__tq_outcome_check(NULL, skey, slen, kind, time_ms, NULL, NULL,
                                 NULL) != TROUPE_OK)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    troupe__tq_release(q);
    tq_call *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->qs = qs;
    c->queue = troupe_strdup(queue);
    c->skey = troupe_malloc(slen);
    if (c->queue == NULL || c->skey == NULL) {
        e = TROUPE_ENOMEM;
    } else {
        memcpy(c->skey, skey, slen);
        c->slen = slen;
        c->kind = kind;
        c->time_ms = time_ms;
        c->sync = sync;
        c->cb = cb;
        c->arg = arg;
        e = troupe_runtime_work(qs->rt, call_run, call_done, c);
    }
    if (e != TROUPE_OK) {
        troupe_free(c->queue);
        troupe_free(c->skey);
        troupe_free(c);
    }
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
