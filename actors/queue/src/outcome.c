/*
 * Outcomes: the one check of an outcome (troupe__tq_outcome_check), the
 * batch that applies one to a claimed pending row (the partitions'
 * deliveries build theirs with it too), and the calls by storage key
 * outside a handler, blocking and asynchronous.
 *
 * An outcome first claims the pending key (queue.c): a delivery in
 * flight, an outcome and an owner delete of one invocation exclude one
 * another.
 *
 * The asynchronous forms run on the STORAGE lane: claim the row, read it,
 * build the outcome's batch and hand it to the commit pipeline. No pool
 * thread waits for the commit: its callback, on the pipeline's writer,
 * unclaims the row and posts the caller's callback to scheduler 0, as a
 * worker's delivery does (partition.c: job_run). So many outcomes share
 * one group commit and fsync, and a lane with one thread is never held
 * by a sync. Arguments are validated (and the queue looked up) before
 * anything is queued, so a call that returns an error never calls back;
 * the partition, and whether the row is busy, are the callback's error,
 * as for the blocking form.
 *
 * A call holds a reference on its queue from the call to the callback
 * (what a drop meanwhile leaves behind stays valid, as for a delivery).
 * Its own references: the pool job's and, while a commit is pending, the
 * commit callback's; the last one frees it.
 */
#include <inttypes.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"

/* ---- the check and the batch -------------------------------------------- */

troupe_err
troupe__tq_outcome_check(const tq_queue *q, const void *skey, size_t slen,
                         troupe_queue_outcome_kind kind, int64_t time_ms,
                         uint32_t *part, int64_t *time, uint64_t *order)
{
    uint32_t p;
    int64_t t;
    uint64_t o;
    if (troupe__tq_pkey_decode(skey, slen, &p, &t, &o) != TROUPE_OK)
        return troupe__errf(TROUPE_EINVAL,
                            "storage key of %zu bytes is not a "
                            "pending invocation's key",
                            slen);
    if (q != NULL && p >= q->partitions)
        return troupe__errf(TROUPE_EINVAL,
                            "storage key names partition %" PRIu32
                            ", the queue has %" PRIu32,
                            p, q->partitions);
    if (kind != TROUPE_QUEUE_ACK && kind != TROUPE_QUEUE_RESCHEDULE)
        return troupe__errf(TROUPE_EINVAL, "outcome kind %d is unknown",
                            (int)kind);
    if (kind == TROUPE_QUEUE_RESCHEDULE && time_ms < 0)
        return troupe__errf(TROUPE_EINVAL,
                            "reschedule time %" PRId64 " is negative", time_ms);
    if (part != NULL)
        *part = p;
    if (time != NULL)
        *time = t;
    if (order != NULL)
        *order = o;
    return TROUPE_OK;
}

troupe_err
troupe__tq_outcome_batch(tq_queue *q, const void *skey, size_t slen,
                         const void *val, size_t vlen,
                         troupe_queue_outcome_kind kind, int64_t time_ms,
                         troupe_batch **out, uint32_t *resched_part)
{
    *out = NULL;
    *resched_part = UINT32_MAX;
    uint32_t part;
    uint64_t order;
    if (troupe__tq_outcome_check(q, skey, slen, kind, time_ms, &part, NULL,
                                 &order) != TROUPE_OK)
        return TROUPE_EINVAL;
    troupe_queue_item it;
    troupe_err e = troupe__tq_item(q, skey, slen, val, vlen, &it);
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_batch *b = NULL;
    const uint8_t *k;
    size_t kl;
    uint8_t *ck = NULL;
    size_t ckl = 0;
    if (e == TROUPE_OK)
        e = troupe_commit_batch(q->commit, &b);
    if (e == TROUPE_OK) {
        troupe__tq_ckey(&w, troupe__tq_now(q), it.time_ms, it.id, it.id_len,
                        order);
        e = troupe_key_writer_finish(&w, &k, &kl);
        if (e == TROUPE_OK && (ck = troupe_malloc(kl)) == NULL)
            e = TROUPE_ENOMEM;
        if (e == TROUPE_OK) {
            memcpy(ck, k, kl);
            ckl = kl;
        }
    }
    if (e == TROUPE_OK)
        e = troupe_batch_delete(b, q->cf, skey, slen);
    if (e == TROUPE_OK)
        e = troupe__tq_entries(b, q->cf, &it, skey, slen, false, false);
    if (e == TROUPE_OK) /* the attempts record goes with the pending row */
        e = troupe__tq_att_write(b, q->cf, skey, slen, NULL);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, q->cf, ck, ckl, val, vlen);
    if (e == TROUPE_OK)
        e = troupe__tq_entries(b, q->cf, &it, ck, ckl, true, true);
    if (e == TROUPE_OK && kind == TROUPE_QUEUE_RESCHEDULE) {
        uint64_t no = 0;
        e = troupe__tq_order(q, &no);
        if (e == TROUPE_OK) {
            troupe__tq_pkey(&w, part, time_ms, no, it.id, it.id_len);
            e = troupe_key_writer_finish(&w, &k, &kl);
        }
        if (e == TROUPE_OK)
            e = troupe_batch_put(b, q->cf, k, kl, val, vlen);
        if (e == TROUPE_OK)
            e = troupe__tq_entries(b, q->cf, &it, k, kl, false, true);
        if (e == TROUPE_OK)
            *resched_part = part;
    }
    troupe_key_writer_fini(&w);
    troupe_free(ck);
    if (e != TROUPE_OK) {
        troupe_batch_destroy(b);
        *resched_part = UINT32_MAX;
        return e;
    }
    *out = b;
    return TROUPE_OK;
}

/* ---- by storage key, blocking ------------------------------------------ */

/* Applies an outcome to a claimed pending key: read, batch, commit and
 * wait. Blocks. */
static troupe_err
outcome_apply(tq_queue *q, const void *skey, size_t slen,
              troupe_queue_outcome_kind kind, int64_t time_ms, troupe_sync sync)
{
    troupe_err e = troupe__tq_outcome_check(q, skey, slen, kind, time_ms, NULL,
                                            NULL, NULL);
    if (e != TROUPE_OK)
        return e;
    void *val = NULL;
    size_t vlen = 0;
    e = troupe_db_get(q->db, q->cf, NULL, skey, slen, &val, &vlen);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK; /* already completed or deleted: a no-op */
    troupe_batch *b = NULL;
    uint32_t rp = UINT32_MAX;
    if (e == TROUPE_OK)
        e = troupe__tq_outcome_batch(q, skey, slen, val, vlen, kind, time_ms,
                                     &b, &rp);
    if (e == TROUPE_OK)
        e = troupe__tq_commit_wait(q->commit, &b, sync);
    if (e == TROUPE_OK && rp != UINT32_MAX)
        troupe__tq_notify(q, rp, time_ms);
    troupe_batch_destroy(b);
    troupe_free(val);
    return e;
}

static troupe_err
outcome_api(troupe_queues *qs, const char *queue, const void *skey, size_t slen,
            troupe_queue_outcome_kind kind, int64_t time_ms, troupe_sync sync,
            const char *call)
{
    if (skey == NULL || slen == 0 || slen > TROUPE_KEY_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find_writable(qs, queue, call, &q);
    if (e != TROUPE_OK)
        return e;
    /* the partition is checked once claimed (outcome_apply): a key
     * being settled is busy first */
    if (troupe__tq_outcome_check(NULL, skey, slen, kind, time_ms, NULL, NULL,
                                 NULL) != TROUPE_OK)
        e = TROUPE_EINVAL;
    else if (!troupe__tq_claim(q, skey, slen))
        e = TROUPE_EBUSY;
    if (e == TROUPE_OK) {
        e = outcome_apply(q, skey, slen, kind, time_ms, sync);
        troupe__tq_unclaim(q, skey, slen);
    }
    troupe__tq_release(q);
    return e;
}

troupe_err
troupe_queue_ack_wait(troupe_queues *qs, const char *queue, const void *skey,
                      size_t skey_len, troupe_sync sync)
{
    troupe_err be = troupe__block_check("troupe_queue_ack_wait");
    if (be != TROUPE_OK)
        return be;
    return outcome_api(qs, queue, skey, skey_len, TROUPE_QUEUE_ACK, 0, sync,
                       "troupe_queue_ack_wait");
}

troupe_err
troupe_queue_reschedule_wait(troupe_queues *qs, const char *queue,
                             const void *skey, size_t skey_len, int64_t time_ms,
                             troupe_sync sync)
{
    troupe_err be = troupe__block_check("troupe_queue_reschedule_wait");
    if (be != TROUPE_OK)
        return be;
    if (time_ms < 0)
        return TROUPE_EINVAL;
    return outcome_api(qs, queue, skey, skey_len, TROUPE_QUEUE_RESCHEDULE,
                       time_ms, sync, "troupe_queue_reschedule_wait");
}

/* ---- by storage key, asynchronous -------------------------------------- */

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
           troupe_queue_cb cb, void *arg, const char *call)
{
    if (cb == NULL || skey == NULL || slen == 0 || slen > TROUPE_KEY_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF ||
        troupe__tq_outcome_check(NULL, skey, slen, kind, time_ms, NULL, NULL,
                                 NULL) != TROUPE_OK)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find_writable(qs, queue, call, &q);
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
                      arg, "troupe_queue_ack");
}

troupe_err
troupe_queue_reschedule(troupe_queues *qs, const char *queue, const void *skey,
                        size_t skey_len, int64_t time_ms, troupe_sync sync,
                        troupe_queue_cb cb, void *arg)
{
    return call_start(qs, queue, skey, skey_len, TROUPE_QUEUE_RESCHEDULE,
                      time_ms, sync, cb, arg, "troupe_queue_reschedule");
}
