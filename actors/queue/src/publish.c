/*
 * Publication: an event's pending row, its owner entry and its id entry
 * in one batch, through the commit pipeline (troupe_queue_publish and its
 * blocking twin) or a transaction's batch (troupe_queue_publish_in); then
 * the event's partition learns its due time. The asynchronous form calls
 * back on scheduler 0 (troupe__post_or_run from the pipeline's writer).
 *
 * Every change to an invocation moves its row and its entries together in
 * one batch: the owner entry (o, kind, id, state, skey) and the id entry
 * (i, id, skey) name the row's storage key, so a row and its entries are
 * never out of step after a commit.
 */
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"

typedef struct tq_pub {
    tq_queue *q;
    uint32_t part;
    int64_t time;
    uint8_t *val;
    size_t vlen;
    uint8_t *pkey;
    size_t pklen;
    troupe_queue_cb cb;
    void *arg;
    troupe_err err;
} tq_pub;

static void
pub_free(tq_pub *p)
{
    troupe__tq_release(p->q);
    troupe_free(p->val);
    troupe_free(p->pkey);
    troupe_free(p);
}

static troupe_err
pub_build(troupe_queues *qs, const char *queue, const troupe_queue_event *ev,
          const char *call, tq_pub **out)
{
    troupe_err e = troupe__tq_event_check(ev);
    if (e != TROUPE_OK)
        return e;
    tq_queue *q = NULL;
    if ((e = troupe__tq_find_writable(qs, queue, call, &q)) != TROUPE_OK)
        return e;
    tq_pub *p = troupe_calloc(1, sizeof(*p));
    if (p == NULL) {
        troupe__tq_release(q);
        return TROUPE_ENOMEM;
    }
    p->q = q;
    p->time = ev->time_ms;
    p->part = troupe_queue_partition_of(ev->key, ev->key_len, q->partitions);
    e = troupe__tq_value_pack(ev, &p->val, &p->vlen);
    uint64_t order = 0;
    if (e == TROUPE_OK)
        e = troupe__tq_order(q, &order);
    if (e == TROUPE_OK) {
        troupe_key_writer w;
        troupe_key_writer_init(&w);
        troupe__tq_pkey(&w, p->part, ev->time_ms, order, ev->id, ev->id_len);
        const uint8_t *k;
        size_t kl;
        e = troupe_key_writer_finish(&w, &k, &kl);
        if (e == TROUPE_OK && kl > TROUPE_KEY_MAX / 4)
            e = TROUPE_ETOOBIG;
        if (e == TROUPE_OK && (p->pkey = troupe_malloc(kl)) == NULL)
            e = TROUPE_ENOMEM;
        if (e == TROUPE_OK) {
            memcpy(p->pkey, k, kl);
            p->pklen = kl;
        }
        troupe_key_writer_fini(&w);
    }
    if (e != TROUPE_OK) {
        pub_free(p);
        return e;
    }
    *out = p;
    return TROUPE_OK;
}

static troupe_err
pub_write(void *arg, troupe_batch *b)
{
    tq_pub *p = arg;
    troupe_queue_item it = {0};
    troupe_err e = troupe__tq_value_decode(p->val, p->vlen, &it);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, p->q->cf, p->pkey, p->pklen, p->val, p->vlen);
    if (e == TROUPE_OK)
        e = troupe__tq_entries(b, p->q->cf, &it, p->pkey, p->pklen, false,
                               true);
    return e;
}

static void
pub_txn_done(void *arg, troupe_err outcome)
{
    tq_pub *p = arg;
    if (outcome == TROUPE_OK)
        troupe__tq_notify(p->q, p->part, p->time);
    pub_free(p);
}

troupe_err
troupe_queue_publish_in(troupe_queues *qs, troupe_txn *tx, const char *queue,
                        const troupe_queue_event *ev)
{
    if (tx == NULL)
        return TROUPE_EINVAL;
    tq_pub *p = NULL;
    troupe_err e = pub_build(qs, queue, ev, "troupe_queue_publish_in", &p);
    if (e != TROUPE_OK)
        return e;
    troupe_txn_part part = {pub_write, pub_txn_done, p};
    if ((e = troupe_txn_attach(tx, &part)) != TROUPE_OK)
        pub_free(p);
    return e;
}

static void
pub_done_s0(void *arg, troupe_runtime *rt)
{
    (void)rt;
    tq_pub *p = arg;
    p->cb(p->err, p->arg);
    pub_free(p);
}

static void
pub_committed(troupe_err err, void *arg)
{
    tq_pub *p = arg;
    p->err = err;
    if (err == TROUPE_OK)
        troupe__tq_notify(p->q, p->part, p->time);
    /* to scheduler 0; at shutdown, when no loop is left, right here */
    troupe__post_or_run(p->q->rt, pub_done_s0, p);
}

static troupe_err
pub_batch(tq_pub *p, troupe_batch **b)
{
    troupe_err e = troupe_commit_batch(p->q->commit, b);
    if (e == TROUPE_OK && (e = pub_write(p, *b)) != TROUPE_OK) {
        troupe_batch_destroy(*b);
        *b = NULL;
    }
    return e;
}

troupe_err
troupe_queue_publish(troupe_queues *qs, const char *queue,
                     const troupe_queue_event *ev, troupe_sync sync,
                     troupe_queue_cb cb, void *arg)
{
    if (cb == NULL || (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    tq_pub *p = NULL;
    troupe_err e = pub_build(qs, queue, ev, "troupe_queue_publish", &p);
    if (e != TROUPE_OK)
        return e;
    p->cb = cb;
    p->arg = arg;
    troupe_batch *b = NULL;
    e = pub_batch(p, &b);
    if (e == TROUPE_OK)
        e = troupe_commit_submit(qs->commit, &b, sync, pub_committed, p);
    if (e != TROUPE_OK) {
        troupe_batch_destroy(b);
        pub_free(p);
    }
    return e;
}

troupe_err
troupe_queue_publish_wait(troupe_queues *qs, const char *queue,
                          const troupe_queue_event *ev, troupe_sync sync)
{
    troupe_err be = troupe__block_check("troupe_queue_publish_wait");
    if (be != TROUPE_OK)
        return be;
    if ((unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    tq_pub *p = NULL;
    troupe_err e = pub_build(qs, queue, ev, "troupe_queue_publish_wait", &p);
    if (e != TROUPE_OK)
        return e;
    troupe_batch *b = NULL;
    e = pub_batch(p, &b);
    if (e == TROUPE_OK)
        e = troupe__tq_commit_wait(qs->commit, &b, sync);
    troupe_batch_destroy(b);
    if (e == TROUPE_OK)
        troupe__tq_notify(p->q, p->part, p->time);
    pub_free(p);
    return e;
}
