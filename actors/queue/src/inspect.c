/*
 * Inspection: pages of pending, completed or parked invocations (with the
 * cursor of the next page), every invocation of one event id, the counts
 * per state and partition, and the handler counters. A pending row is
 * shown with its attempts record (the same snapshot); parked rows are
 * found through the records ("a" space, in the pending rows' order).
 * Every read is of one snapshot; nothing here writes, so a read-only set
 * serves all of it.
 */
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"

/* ---- pages -------------------------------------------------------------- */

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

static troupe_err
box_keep(tq_pagebox *pb, void *buf)
{
    if (pb->nbufs == pb->capbufs) {
        size_t nc = pb->capbufs ? 2 * pb->capbufs : 16;
        void **a = troupe_realloc(pb->bufs, nc * sizeof(*a));
        if (a == NULL) {
            troupe_free(buf);
            return TROUPE_ENOMEM;
        }
        pb->bufs = a;
        pb->capbufs = nc;
    }
    pb->bufs[pb->nbufs++] = buf;
    return TROUPE_OK;
}

/* Copies a row into the box and decodes it as the next item; a pending
 * row gets its attempts record of snap. */
static troupe_err
box_add(tq_pagebox *pb, const tq_queue *q, troupe_snapshot *snap, const void *k,
        size_t kl, const void *v, size_t vl)
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
    troupe_queue_item *it = &pb->items[pb->n];
    troupe_err e = troupe__tq_item(q, buf, kl, buf + kl, vl, it);
    if (e == TROUPE_OK && !it->completed) {
        tq_att a;
        void *ab = NULL;
        e = troupe__tq_att_get(q, snap, buf, kl, &a, &ab);
        if (e == TROUPE_OK && ab != NULL)
            e = box_keep(pb, ab);
        if (e == TROUPE_OK) {
            it->attempts = a.attempts;
            it->parked = a.parked;
            it->last_error = a.error;
            it->last_error_len = a.error_len;
        }
    }
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

/* A page of parked invocations: the attempts records from the cursor's
 * on (its skey's record key), each parked one's row read in the same
 * snapshot. `more`: another record follows (it may not be parked). */
static troupe_err
list_parked(troupe_queues *qs, tq_queue *q, const void *cursor,
            size_t cursor_len, size_t limit, troupe_queue_page **out)
{
    /* w: the range (the iterator reads it); aw: the cursor's record key;
     * pw: each parked row's key */
    troupe_key_writer w, aw, pw;
    troupe_key_writer_init(&w);
    troupe_key_writer_init(&aw);
    troupe_key_writer_init(&pw);
    troupe_range r;
    troupe_snapshot *snap = NULL;
    troupe_iter *it = NULL;
    tq_pagebox *pb = troupe_calloc(1, sizeof(*pb));
    troupe_err e =
        pb == NULL ? TROUPE_ENOMEM : space_range(&w, TQ_ATTEMPTS, &r);
    const void *after = NULL;
    size_t afterlen = 0;
    if (e == TROUPE_OK && cursor != NULL) {
        const void *sk = NULL;
        size_t skl = 0;
        e = troupe__cursor_key(cursor, cursor_len, TROUPE_CURSOR_QUEUE, q->id,
                               &sk, &skl);
        if (e == TROUPE_OK && troupe__tq_akey(&aw, sk, skl) != TROUPE_OK)
            e = troupe__errf(TROUPE_ERANGE, "the cursor does not name a "
                                            "pending invocation");
        const uint8_t *ak;
        if (e == TROUPE_OK &&
            (e = troupe_key_writer_finish(&aw, &ak, &afterlen)) == TROUPE_OK)
            after = ak;
    }
    if (e == TROUPE_OK)
        e = troupe_snapshot_create(qs->db, &snap);
    if (e == TROUPE_OK)
        e = troupe_iter_create(qs->db, q->cf, snap, &r, after, afterlen, false,
                               &it);
    troupe_kv kv;
    bool more = false;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        if (pb->n == limit) {
            more = true;
            break;
        }
        tq_att a;
        if (troupe__tq_att_decode(kv.val, kv.val_len, &a) != TROUPE_OK) {
            e = TROUPE_ECORRUPT;
            break;
        }
        if (!a.parked)
            continue;
        const uint8_t *sk;
        size_t skl = 0;
        void *val = NULL;
        size_t vl = 0;
        e = troupe__tq_akey_pkey(&pw, kv.key, kv.key_len);
        if (e == TROUPE_OK)
            e = troupe_key_writer_finish(&pw, &sk, &skl);
        if (e == TROUPE_OK)
            e = troupe_db_get(qs->db, q->cf, snap, sk, skl, &val, &vl);
        if (e == TROUPE_ENOENT)
            e = TROUPE_ECORRUPT; /* a record without its row */
        if (e == TROUPE_OK)
            e = box_add(pb, q, snap, sk, skl, val, vl);
        troupe_free(val);
    }
    if (e == TROUPE_ENOENT)
        e = TROUPE_OK;
    if (e == TROUPE_OK)
        e = box_finish(pb, q, more);
    if (e == TROUPE_OK) {
        *out = &pb->pub;
    } else {
        troupe_queue_page_destroy(pb ? &pb->pub : NULL);
    }
    troupe_iter_destroy(it);
    troupe_snapshot_destroy(snap);
    troupe_key_writer_fini(&pw);
    troupe_key_writer_fini(&aw);
    troupe_key_writer_fini(&w);
    return e;
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
        (state != TROUPE_QUEUE_PENDING && state != TROUPE_QUEUE_COMPLETED &&
         state != TROUPE_QUEUE_PARKED) ||
        (cursor != NULL && cursor_len == 0) ||
        (cursor == NULL && cursor_len != 0))
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, queue, &q);
    if (e != TROUPE_OK)
        return e;
    if (state == TROUPE_QUEUE_PARKED) {
        e = list_parked(qs, q, cursor, cursor_len, limit, out);
        troupe__tq_release(q);
        return e;
    }
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
            e = box_add(pb, q, snap, next->items[i].key, next->items[i].key_len,
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
            e = box_add(pb, q, snap, sk, skl, val, vl);
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

/* ---- counts ------------------------------------------------------------- */

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
        troupe_calloc(1, sizeof(*st) + 3 * q->partitions * sizeof(uint64_t));
    troupe_snapshot *snap = NULL;
    e = st == NULL ? TROUPE_ENOMEM : troupe_snapshot_create(qs->db, &snap);
    if (e == TROUPE_OK) {
        st->partitions = q->partitions;
        st->pending_by_p = (uint64_t *)(st + 1);
        st->completed_by_p = st->pending_by_p + q->partitions;
        st->parked_by_p = st->completed_by_p + q->partitions;
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
            tq_att a;
            void *ab = NULL;
            if (troupe__tq_item(q, kv.key, kv.key_len, kv.val, kv.val_len,
                                &item) != TROUPE_OK) {
                st->malformed++;
            } else if (item.completed) {
                st->completed++;
                st->completed_by_p[item.partition]++;
            } else if ((e = troupe__tq_att_get(q, snap, kv.key, kv.key_len, &a,
                                               &ab)) != TROUPE_OK) {
                if (e != TROUPE_ECORRUPT)
                    break;
                e = TROUPE_OK; /* its attempts record does not decode */
                st->malformed++;
            } else if (a.parked) {
                st->parked++;
                st->parked_by_p[item.partition]++;
            } else {
                st->pending++;
                st->pending_by_p[item.partition]++;
                if (st->oldest_due_ms < 0 || item.time_ms < st->oldest_due_ms)
                    st->oldest_due_ms = item.time_ms;
            }
            troupe_free(ab);
            ab = NULL;
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
