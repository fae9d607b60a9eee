/*
 * Parked invocations (docs/queue.md, "Attempts and parking"): retry and
 * delete by storage key. A parked invocation is a pending row whose
 * attempts record says parked: the partitions skip it. Retry deletes the
 * record (attempts back to 0, the last error gone) and tells the
 * partition its due time, which is past, so the next pass delivers it.
 * Delete removes the row, its owner and id entries and its record in one
 * batch. Both claim the key first (queue.c), so neither races a delivery,
 * an outcome or an owner delete of it.
 */
#include <inttypes.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

/* The change of a claimed parked row. Blocks. */
static troupe_err
parked_change(tq_queue *q, const void *skey, size_t slen, troupe_sync sync,
              bool retry, int64_t *time_ms)
{
    void *val = NULL, *ab = NULL;
    size_t vl = 0;
    troupe_queue_item it;
    tq_att a;
    troupe_batch *b = NULL;
    troupe_err e = troupe_db_get(q->db, q->cf, NULL, skey, slen, &val, &vl);
    if (e == TROUPE_ENOENT)
        e = troupe__errf(TROUPE_ENOENT,
                         "no pending invocation under that storage key");
    if (e == TROUPE_OK &&
        troupe__tq_item(q, skey, slen, val, vl, &it) != TROUPE_OK)
        e = troupe__errf(TROUPE_ECORRUPT,
                         "the pending row does not decode: left untouched");
    if (e == TROUPE_OK)
        e = troupe__tq_att_get(q, NULL, skey, slen, &a, &ab);
    if (e == TROUPE_OK && !a.parked)
        e = troupe__errf(TROUPE_ESTATE,
                         "the invocation is not parked (%" PRIu32
                         " attempts so far)",
                         a.attempts);
    if (e == TROUPE_OK)
        e = troupe_commit_batch(q->commit, &b);
    if (e == TROUPE_OK)
        e = troupe__tq_att_write(b, q->cf, skey, slen, NULL);
    if (e == TROUPE_OK && !retry) {
        e = troupe_batch_delete(b, q->cf, skey, slen);
        if (e == TROUPE_OK)
            e = troupe__tq_entries(b, q->cf, &it, skey, slen, false, false);
    }
    if (e == TROUPE_OK) {
        *time_ms = it.time_ms;
        e = troupe__tq_commit_wait(q->commit, &b, sync);
    }
    troupe_batch_destroy(b);
    troupe_free(ab);
    troupe_free(val);
    return e;
}

static troupe_err
parked_apply(troupe_queues *qs, const char *queue, const void *skey,
             size_t slen, troupe_sync sync, bool retry, const char *call)
{
    troupe_err e = troupe__block_check(call);
    if (e != TROUPE_OK)
        return e;
    if (qs == NULL || skey == NULL || slen == 0 ||
        (unsigned)sync > TROUPE_SYNC_OFF)
        return troupe__errf(TROUPE_EINVAL,
                            "%s: NULL or empty argument, or "
                            "bad sync",
                            call);
    tq_queue *q = NULL;
    if ((e = troupe__tq_find_writable(qs, queue, call, &q)) != TROUPE_OK)
        return e;
    uint32_t part = 0;
    e = troupe__tq_outcome_check(q, skey, slen, TROUPE_QUEUE_ACK, 0, &part,
                                 NULL, NULL);
    if (e == TROUPE_OK && !troupe__tq_claim(q, skey, slen))
        e = troupe__errf(TROUPE_EBUSY,
                         "%s: the invocation is being changed right now", call);
    int64_t t = 0;
    if (e == TROUPE_OK) {
        e = parked_change(q, skey, slen, sync, retry, &t);
        troupe__tq_unclaim(q, skey, slen);
    }
    if (e == TROUPE_OK && retry)
        troupe__tq_notify(q, part, t); /* past: due now */
    troupe__tq_release(q);
    return e;
}

troupe_err
troupe_queue_parked_retry_wait(troupe_queues *qs, const char *queue,
                               const void *skey, size_t skey_len,
                               troupe_sync sync)
{
    return parked_apply(qs, queue, skey, skey_len, sync, true,
                        "troupe_queue_parked_retry_wait");
}

troupe_err
troupe_queue_parked_delete_wait(troupe_queues *qs, const char *queue,
                                const void *skey, size_t skey_len,
                                troupe_sync sync)
{
    return parked_apply(qs, queue, skey, skey_len, sync, false,
                        "troupe_queue_parked_delete_wait");
}
