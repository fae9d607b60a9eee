/*
 * Publication, outcomes, inspection, owner deletes and retention: the
 * queue's storage operations. Publication goes through the commit
 * pipeline (or a transaction's batch); the rest runs on the calling
 * thread (blocking calls) or on a pool thread (a handler's outcome).
 *
 * Every change to an invocation moves its row and its entries together in
 * one batch: the owner entry (o, kind, id, state, skey) and the id entry
 * (i, id, skey) name the row's storage key, so a row and its entries are
 * never out of step after a commit. A change first claims the pending key
 * (queue_int.h): a delivery in flight, an outcome and an owner delete of
 * the same invocation exclude one another, which is what keeps a
 * read-then-write from resurrecting a row another call just removed.
 */
#include <inttypes.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

/* ---- publication ----------------------------------------------------------
 */

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
          tq_pub **out)
{
    troupe_err e = troupe__tq_event_check(ev);
    if (e != TROUPE_OK)
        return e;
    tq_queue *q = NULL;
    if ((e = troupe__tq_find(qs, queue, &q)) != TROUPE_OK)
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
    troupe_err e = pub_build(qs, queue, ev, &p);
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
    troupe_err e = pub_build(qs, queue, ev, &p);
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
    troupe_err e = pub_build(qs, queue, ev, &p);
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

/* ---- outcomes
 * ---------------------------------------------------------------- */

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

troupe_err
troupe__tq_outcome(tq_queue *q, const void *skey, size_t slen,
                   troupe_queue_outcome_kind kind, int64_t time_ms,
                   troupe_sync sync)
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
            troupe_queue_outcome_kind kind, int64_t time_ms, troupe_sync sync)
{
    if (skey == NULL || slen == 0 || slen > TROUPE_KEY_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    /* the partition is checked once claimed (troupe__tq_outcome): a key
     * being settled is busy first */
    if (troupe__tq_outcome_check(NULL, skey, slen, kind, time_ms, NULL, NULL,
                                 NULL) != TROUPE_OK)
        e = TROUPE_EINVAL;
    else if (!troupe__tq_claim(q, skey, slen))
        e = TROUPE_EBUSY;
    if (e == TROUPE_OK) {
        e = troupe__tq_outcome(q, skey, slen, kind, time_ms, sync);
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
    return outcome_api(qs, queue, skey, skey_len, TROUPE_QUEUE_ACK, 0, sync);
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
                       time_ms, sync);
}

/* ---- pages
 * ------------------------------------------------------------------- */

/* The page behind a troupe_queue_page: the items point into bufs. */
typedef struct tq_pagebox {
    troupe_queue_page pub;
    troupe_queue_item *items;
    size_t n, cap;
    void **bufs;
    size_t nbufs, capbufs;
    uint8_t *cursor; /* pub.cursor: the queue's cursor at the last skey */
} tq_pagebox;

void
troupe_queue_page_destroy(troupe_queue_page *p)
{
    if (p == NULL)
        return;
    tq_pagebox *pb = (tq_pagebox *)p;
    for (size_t i = 0; i < pb->nbufs; i++)
        troupe_free(pb->bufs[i]);
    troupe_free(pb->bufs);
    troupe_free(pb->items);
    troupe_free(pb->cursor);
    troupe_free(pb);
}

/* Copies a row into the box and decodes it as the next item. */
static troupe_err
box_add(tq_pagebox *pb, const tq_queue *q, const void *k, size_t kl,
        const void *v, size_t vl)
{
    if (pb->n == pb->cap) {
        size_t nc = pb->cap ? 2 * pb->cap : 16;
        troupe_queue_item *a = troupe_realloc(pb->items, nc * sizeof(*a));
        if (a == NULL)
            return TROUPE_ENOMEM;
        pb->items = a;
        pb->cap = nc;
    }
    if (pb->nbufs == pb->capbufs) {
        size_t nc = pb->capbufs ? 2 * pb->capbufs : 16;
        void **a = troupe_realloc(pb->bufs, nc * sizeof(*a));
        if (a == NULL)
            return TROUPE_ENOMEM;
        pb->bufs = a;
        pb->capbufs = nc;
    }
    uint8_t *buf = troupe_malloc(kl + vl + 1);
    if (buf == NULL)
        return TROUPE_ENOMEM;
    memcpy(buf, k, kl);
    memcpy(buf + kl, v, vl);
    pb->bufs[pb->nbufs++] = buf;
    troupe_err e = troupe__tq_item(q, buf, kl, buf + kl, vl, &pb->items[pb->n]);
    if (e == TROUPE_OK)
        pb->n++;
    return e;
}

/* The page: its cursor names queue q and the last item's skey. ENOMEM. */
static troupe_err
box_finish(tq_pagebox *pb, const tq_queue *q, bool more)
{
    pb->pub.n = pb->n;
    pb->pub.items = pb->items;
    if (pb->n > 0) {
        const troupe_queue_item *it = &pb->items[pb->n - 1];
        pb->cursor = troupe_malloc(it->skey_len + TROUPE_CURSOR_OVERHEAD);
        if (pb->cursor == NULL)
            return TROUPE_ENOMEM;
        troupe__cursor_put(pb->cursor, TROUPE_CURSOR_QUEUE, q->id, it->skey,
                           it->skey_len);
        pb->pub.cursor = pb->cursor;
        pb->pub.cursor_len = it->skey_len + TROUPE_CURSOR_OVERHEAD;
    }
    pb->pub.more = more;
    return TROUPE_OK;
}

static troupe_err
space_range(troupe_key_writer *w, const char *space, troupe_range *r)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, space, 1);
    return troupe_key_writer_range(w, r);
}

troupe_err
troupe_queue_list_wait(troupe_queues *qs, const char *queue,
                       troupe_queue_state state, const void *cursor,
                       size_t cursor_len, size_t limit, troupe_queue_page **out)
{
    troupe_err be = troupe__block_check("troupe_queue_list_wait");
    if (be != TROUPE_OK)
        return be;
    if (out == NULL || limit == 0 || limit > TROUPE_QUEUE_PAGE_MAX ||
        (state != TROUPE_QUEUE_PENDING && state != TROUPE_QUEUE_COMPLETED) ||
        (cursor != NULL && cursor_len == 0) ||
        (cursor == NULL && cursor_len != 0))
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_range r;
    troupe_snapshot *snap = NULL;
    tq_pagebox *pb = NULL;
    e = space_range(
        &w, state == TROUPE_QUEUE_PENDING ? TQ_PENDING : TQ_COMPLETED, &r);
    if (e == TROUPE_OK && (pb = troupe_calloc(1, sizeof(*pb))) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = troupe_snapshot_create(qs->db, &snap);
    /* the cursor's skey: one of this queue's cursors, or ERANGE (the
     * iterator then refuses one outside the state's space, ERANGE too) */
    const void *after = NULL;
    size_t afterlen = 0;
    if (e == TROUPE_OK && cursor != NULL)
        e = troupe__cursor_key(cursor, cursor_len, TROUPE_CURSOR_QUEUE, q->id,
                               &after, &afterlen);
    /* the logical page is read in chunks of at most TROUPE_QUEUE_CHUNK
     * rows (Tito's bound), from one snapshot */
    bool more = true;
    troupe_page *pg = NULL;
    while (e == TROUPE_OK && more && pb->n < limit) {
        size_t want = limit - pb->n;
        troupe_page *next = NULL;
        e = troupe_db_scan(qs->db, q->cf, snap, &r, after, afterlen,
                           want < TROUPE_QUEUE_CHUNK ? want
                                                     : TROUPE_QUEUE_CHUNK,
                           false, &next);
        if (e != TROUPE_OK)
            break;
        for (size_t i = 0; e == TROUPE_OK && i < next->n; i++)
            e = box_add(pb, q, next->items[i].key, next->items[i].key_len,
                        next->items[i].val, next->items[i].val_len);
        more = next->more && next->n > 0;
        troupe_page_destroy(pg); /* the previous chunk: after points in */
        pg = next;
        after = pg->cursor;
        afterlen = pg->cursor_len;
    }
    if (e == TROUPE_OK)
        e = box_finish(pb, q, more);
    if (e == TROUPE_OK) {
        *out = &pb->pub;
    } else {
        troupe_queue_page_destroy(pb ? &pb->pub : NULL);
    }
    troupe_snapshot_destroy(snap);
    troupe_page_destroy(pg);
    troupe_key_writer_fini(&w);
    troupe__tq_release(q);
    return e;
}

troupe_err
troupe_queue_lookup_wait(troupe_queues *qs, const char *queue, const void *id,
                         size_t id_len, troupe_queue_page **out)
{
    troupe_err be = troupe__block_check("troupe_queue_lookup_wait");
    if (be != TROUPE_OK)
        return be;
    if (out == NULL || id == NULL || id_len == 0 ||
        id_len > TROUPE_QUEUE_ID_MAX)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    troupe_snapshot *snap = NULL;
    troupe_iter *it = NULL;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, TQ_IDS, 1);
    troupe_key_put_bytes(&w, id, id_len);
    troupe_range r;
    tq_pagebox *pb = troupe_calloc(1, sizeof(*pb));
    e = pb == NULL ? TROUPE_ENOMEM : troupe_key_writer_range(&w, &r);
    if (e == TROUPE_OK)
        e = troupe_snapshot_create(qs->db, &snap);
    if (e == TROUPE_OK)
        e = troupe_iter_create(qs->db, q->cf, snap, &r, NULL, 0, false, &it);
    troupe_kv kv;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        /* (i, id, skey): the skey is the last element */
        void *val = NULL;
        size_t vl = 0;
        uint8_t *sk = NULL;
        size_t skl = 0;
        e = troupe__tq_ientry_decode(kv.key, kv.key_len, id, id_len, &sk, &skl);
        if (e == TROUPE_OK)
            e = troupe_db_get(qs->db, q->cf, snap, sk, skl, &val, &vl);
        if (e == TROUPE_ENOENT)
            e = TROUPE_ECORRUPT; /* an id entry without its row */
        if (e == TROUPE_OK)
            e = box_add(pb, q, sk, skl, val, vl);
        /* the row it points at must be of that id */
        if (e == TROUPE_OK &&
            (pb->items[pb->n - 1].id_len != id_len ||
             memcmp(pb->items[pb->n - 1].id, id, id_len) != 0))
            e = TROUPE_ECORRUPT;
        troupe_free(sk);
        troupe_free(val);
    }
    if (e == TROUPE_ENOENT)
        e = TROUPE_OK;
    troupe_iter_destroy(it);
    troupe_snapshot_destroy(snap);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_OK)
        e = box_finish(pb, q, false);
    troupe__tq_release(q);
    if (e == TROUPE_OK) {
        *out = &pb->pub;
    } else {
        troupe_queue_page_destroy(pb ? &pb->pub : NULL);
    }
    return e;
}

/* ---- stats -----------------------------------------------------------------
 */

troupe_err
troupe_queue_stats_wait(troupe_queues *qs, const char *queue,
                        troupe_queue_stats **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_queue_stats_wait");
    if (be != TROUPE_OK)
        return be;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    troupe_queue_stats *st =
        troupe_calloc(1, sizeof(*st) + 2 * q->partitions * sizeof(uint64_t));
    troupe_snapshot *snap = NULL;
    e = st == NULL ? TROUPE_ENOMEM : troupe_snapshot_create(qs->db, &snap);
    if (e == TROUPE_OK) {
        st->partitions = q->partitions;
        st->pending_by_p = (uint64_t *)(st + 1);
        st->completed_by_p = st->pending_by_p + q->partitions;
        st->oldest_due_ms = -1;
    }
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    for (int pass = 0; e == TROUPE_OK && pass < 2; pass++) {
        troupe_range r;
        troupe_iter *it = NULL;
        e = space_range(&w, pass == 0 ? TQ_PENDING : TQ_COMPLETED, &r);
        if (e == TROUPE_OK)
            e = troupe_iter_create(qs->db, q->cf, snap, &r, NULL, 0, false,
                                   &it);
        troupe_kv kv;
        while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
            troupe_queue_item item;
            if (troupe__tq_item(q, kv.key, kv.key_len, kv.val, kv.val_len,
                                &item) != TROUPE_OK) {
                st->malformed++;
            } else if (item.completed) {
                st->completed++;
                st->completed_by_p[item.partition]++;
            } else {
                st->pending++;
                st->pending_by_p[item.partition]++;
                if (st->oldest_due_ms < 0 || item.time_ms < st->oldest_due_ms)
                    st->oldest_due_ms = item.time_ms;
            }
        }
        if (e == TROUPE_ENOENT)
            e = TROUPE_OK;
        troupe_iter_destroy(it);
    }
    troupe_key_writer_fini(&w);
    troupe_snapshot_destroy(snap);
    troupe__tq_release(q);
    if (e != TROUPE_OK) {
        troupe_free(st);
        return e;
    }
    *out = st;
    return TROUPE_OK;
}

troupe_err
troupe_queue_counters_get(troupe_queues *qs, const char *queue,
                          troupe_queue_counters *out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = (troupe_queue_counters){0};
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
#define LOAD(i) atomic_load_explicit(&q->outcomes[i], memory_order_relaxed)
    out->acked = LOAD(TQ_OUT_ACK);
    out->rescheduled = LOAD(TQ_OUT_RESCHEDULE);
    out->errors = LOAD(TQ_OUT_ERROR);
    out->timeouts = LOAD(TQ_OUT_TIMEOUT);
    out->commit_failed = LOAD(TQ_OUT_FAILED);
#undef LOAD
    troupe_hist_read(&q->attempts, &out->attempts);
    out->delivered = out->attempts.count;
    troupe__tq_release(q);
    return TROUPE_OK;
}

/* ---- owners
 * ------------------------------------------------------------------ */

#define OWNER_BATCH 64

troupe_err
troupe_queue_delete_by_owner_wait(troupe_queues *qs, const char *queue,
                                  const void *kind, size_t kind_len,
                                  const void *id, size_t id_len,
                                  troupe_queue_spare_fn spare, void *arg,
                                  troupe_sync sync, size_t *deleted)
{
    troupe_err be = troupe__block_check("troupe_queue_delete_by_owner_wait");
    if (be != TROUPE_OK)
        return be;
    if (kind == NULL || kind_len == 0 || kind_len > TROUPE_QUEUE_OWNER_MAX ||
        id == NULL || id_len == 0 || id_len > TROUPE_QUEUE_OWNER_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    size_t count = 0;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, TQ_OWNER, 1);
    troupe_key_put_bytes(&w, kind, kind_len);
    troupe_key_put_bytes(&w, id, id_len);
    troupe_range r;
    e = troupe_key_writer_range(&w, &r);
    uint8_t *after = NULL;
    size_t afterlen = 0;
    bool more = true;
    while (e == TROUPE_OK && more) {
        troupe_page *pg = NULL;
        e = troupe_db_scan(qs->db, q->cf, NULL, &r, after, afterlen,
                           OWNER_BATCH, false, &pg);
        if (e != TROUPE_OK)
            break;
        more = pg->more;
        troupe_batch *b = NULL;
        e = troupe_batch_create(&b);
        /* the claimed keys of this batch, released after its commit */
        uint8_t *claimed[OWNER_BATCH];
        size_t claimedlen[OWNER_BATCH], nclaimed = 0, nb = 0;
        for (size_t i = 0; e == TROUPE_OK && i < pg->n; i++) {
            const troupe_kv *kv = &pg->items[i];
            uint8_t *skey = NULL;
            size_t slen = 0;
            bool done = false;
            e = troupe__tq_oentry_decode(kv->key, kv->key_len, kind, kind_len,
                                         id, id_len, &skey, &slen, &done);
            if (e != TROUPE_OK)
                break;
            if (!troupe__tq_claim(q, skey, slen)) {
                troupe_free(skey); /* being delivered: spared */
                continue;
            }
            claimed[nclaimed] = skey;
            claimedlen[nclaimed++] = slen;
            void *val = NULL;
            size_t vl = 0;
            e = troupe_db_get(qs->db, q->cf, NULL, skey, slen, &val, &vl);
            if (e == TROUPE_ENOENT) { /* an orphaned entry of this owner */
                e = troupe_batch_delete(b, q->cf, kv->key, kv->key_len);
                continue;
            }
            troupe_queue_item item;
            if (e == TROUPE_OK)
                e = troupe__tq_item(q, skey, slen, val, vl, &item);
            /* the row it points at must be this owner's: a corrupt entry
             * never deletes another owner's event */
            if (e == TROUPE_OK &&
                (item.owner_kind_len != kind_len ||
                 memcmp(item.owner_kind, kind, kind_len) != 0 ||
                 item.owner_id_len != id_len ||
                 memcmp(item.owner_id, id, id_len) != 0 ||
                 item.completed != done))
                e = TROUPE_ECORRUPT;
            bool keep = e == TROUPE_OK && spare != NULL && spare(&item, arg);
            if (e == TROUPE_OK && !keep) {
                e = troupe_batch_delete(b, q->cf, skey, slen);
                if (e == TROUPE_OK)
                    e = troupe__tq_entries(b, q->cf, &item, skey, slen,
                                           item.completed, false);
                nb++;
            }
            troupe_free(val);
        }
        if (e == TROUPE_OK && pg->n > 0) {
            troupe_free(after);
            after = troupe_malloc(pg->cursor_len);
            if (after == NULL)
                e = TROUPE_ENOMEM;
            else {
                memcpy(after, pg->cursor, pg->cursor_len);
                afterlen = pg->cursor_len;
            }
        }
        if (e == TROUPE_OK && troupe_batch_count(b) > 0)
            e = troupe__tq_commit_wait(qs->commit, &b, sync);
        if (e == TROUPE_OK)
            count += nb;
        troupe_batch_destroy(b);
        for (size_t i = 0; i < nclaimed; i++) {
            troupe__tq_unclaim(q, claimed[i], claimedlen[i]);
            troupe_free(claimed[i]);
        }
        troupe_page_destroy(pg);
    }
    troupe_free(after);
    troupe_key_writer_fini(&w);
    troupe__tq_release(q);
    if (deleted != NULL)
        *deleted = count;
    return e;
}

/* ---- retention --------------------------------------------------------------
 */

/* The scan and the batch of one retention pass: at most max rows across
 * all queues; *n rows in *out (NULL when none), *full when that is max. */
static troupe_err
purge_build(troupe_queues *qs, int64_t now_ms, size_t max, troupe_batch **out,
            size_t *purged, bool *full)
{
    *out = NULL;
    *purged = 0;
    *full = false;
    if (qs == NULL || max == 0)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&qs->mu);
    if (qs->stopped) {
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
    troupe_batch *b = NULL;
    troupe_err e = troupe_batch_create(&b);
    size_t n = 0;
    troupe_key_writer ws, we;
    troupe_key_writer_init(&ws);
    troupe_key_writer_init(&we);
    for (size_t i = 0; e == TROUPE_OK && i < nq && n < max; i++) {
        tq_queue *q = list[i];
        if (now_ms < INT64_MIN + q->retention_ms)
            continue;
        int64_t cutoff = now_ms - q->retention_ms; /* processed < cutoff */
        troupe_key_writer_reset(&ws);
        troupe_key_put_string(&ws, TQ_COMPLETED, 1);
        troupe_key_writer_reset(&we);
        troupe_key_put_string(&we, TQ_COMPLETED, 1);
        troupe_key_put_int64(&we, cutoff);
        const uint8_t *s, *en;
        size_t sl, el;
        troupe_page *pg = NULL;
        troupe_range r;
        e = troupe_key_writer_finish(&ws, &s, &sl);
        if (e == TROUPE_OK)
            e = troupe_key_writer_finish(&we, &en, &el);
        if (e != TROUPE_OK)
            break;
        troupe_range_init_bounds(&r, s, sl, en, el);
        e = troupe_db_scan(qs->db, q->cf, NULL, &r, NULL, 0, max - n, false,
                           &pg);
        for (size_t k = 0; e == TROUPE_OK && k < pg->n; k++) {
            const troupe_kv *kv = &pg->items[k];
            troupe_queue_item item;
            e = troupe_batch_delete(b, q->cf, kv->key, kv->key_len);
            if (e == TROUPE_OK &&
                troupe__tq_item(q, kv->key, kv->key_len, kv->val, kv->val_len,
                                &item) == TROUPE_OK)
                e = troupe__tq_entries(b, q->cf, &item, kv->key, kv->key_len,
                                       true, false);
            /* a malformed expired row goes too; its entries cannot be
             * named without its value */
            n++;
        }
        troupe_page_destroy(pg);
    }
    troupe_key_writer_fini(&ws);
    troupe_key_writer_fini(&we);
    for (size_t i = 0; i < nq; i++)
        troupe__tq_release(list[i]);
    troupe_free(list);
    if (e != TROUPE_OK || troupe_batch_count(b) == 0) {
        troupe_batch_destroy(b);
        return e;
    }
    *out = b;
    *purged = n;
    *full = n == max;
    return TROUPE_OK;
}

troupe_err
troupe_queues_purge_completed(troupe_queues *qs, int64_t now_ms, size_t max,
                              size_t *purged, bool *full)
{
    if (purged != NULL)
        *purged = 0;
    troupe_batch *b = NULL;
    size_t n;
    bool f;
    troupe_err e = purge_build(qs, now_ms, max, &b, &n, &f);
    if (e == TROUPE_OK && b != NULL)
        e = troupe__tq_commit_wait(qs->commit, &b, TROUPE_SYNC_DEFAULT);
    troupe_batch_destroy(b);
    if (e == TROUPE_OK && full != NULL)
        *full = f;
    if (e == TROUPE_OK && purged != NULL)
        *purged = n;
    return e;
}

typedef struct tq_purge {
    troupe__queues_purged_cb cb;
    void *arg;
    size_t n;
    bool full;
} tq_purge;

static void
purge_committed(troupe_err err, void *arg)
{
    tq_purge *p = arg;
    p->cb(err, err == TROUPE_OK ? p->n : 0, err == TROUPE_OK && p->full,
          p->arg);
    troupe_free(p);
}

void
troupe__queues_purge_submit(troupe_queues *qs, int64_t now_ms, size_t max,
                            troupe__queues_purged_cb cb, void *arg)
{
    troupe_batch *b = NULL;
    size_t n;
    bool full;
    troupe_err e = purge_build(qs, now_ms, max, &b, &n, &full);
    tq_purge *p = NULL;
    if (e == TROUPE_OK && b != NULL && (p = troupe_malloc(sizeof(*p))) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK && b != NULL) {
        *p = (tq_purge){.cb = cb, .arg = arg, .n = n, .full = full};
        e = troupe_commit_submit(qs->commit, &b, TROUPE_SYNC_DEFAULT,
                                 purge_committed, p);
        troupe_batch_destroy(b); /* NULL once submitted */
        if (e == TROUPE_OK)
            return;
        troupe_free(p);
    }
    troupe_batch_destroy(b);
    cb(e, 0, false, arg);
}
