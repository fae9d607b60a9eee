/*
 * Retention: completed rows whose processed time is older than the
 * queue's retention go, with their entries, at most `max` rows per pass
 * across every queue. troupe_queues_purge_completed waits for the pass's
 * commit; troupe__queues_purge_submit (the TTL scanner's) hands it to the
 * pipeline and returns.
 */
#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"

/* The scan and the batch of one retention pass: at most max rows across
 * all queues; *n rows in *out (NULL when none), *full when that is max. */
static troupe_err
purge_build(troupe_queues *qs, int64_t now_ms, size_t max, const char *call,
            troupe_batch **out, size_t *purged, bool *full)
{
    *out = NULL;
    *purged = 0;
    *full = false;
    if (qs == NULL || max == 0)
        return TROUPE_EINVAL;
    troupe_err e = troupe__tq_writable(qs, call);
    tq_queue **list = NULL;
    size_t nq = 0;
    if (e == TROUPE_OK)
        e = troupe__tq_map_all(qs, &list, &nq);
    if (e != TROUPE_OK)
        return e;
    troupe_batch *b = NULL;
    e = troupe_batch_create(&b);
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
    troupe_err e = purge_build(qs, now_ms, max, "troupe_queues_purge_completed",
                               &b, &n, &f);
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
    troupe_err e = purge_build(qs, now_ms, max, "troupe__queues_purge_submit",
                               &b, &n, &full);
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
