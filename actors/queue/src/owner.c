/*
 * Deleting an owner's invocations (troupe_queue_delete_by_owner_wait):
 * the owner entries (o, kind, id, state, skey) are read a page at a time,
 * each invocation is claimed (one being delivered is spared) and read,
 * and the page's deletes (the row and both its entries) commit in one
 * batch before the claims go.
 */
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"

#define OWNER_BATCH 64

/* One delete by owner, and the batch of its current page. */
typedef struct owner_del {
    tq_queue *q;
    const void *kind, *id;
    size_t kind_len, id_len;
    troupe_queue_spare_fn spare;
    void *arg;
    troupe_batch *b;
    /* the claimed keys of this page, released after its commit */
    uint8_t *claimed[OWNER_BATCH];
    size_t claimedlen[OWNER_BATCH], nclaimed;
    size_t nb; /* invocations the batch deletes */
} owner_del;

/* One owner entry: claims its invocation (one being delivered is
 * spared), reads it and adds its delete to the batch unless spared.
 * ECORRUPT for an entry or row that is not this owner's. */
static troupe_err
owner_entry(owner_del *od, const troupe_kv *kv)
{
    tq_queue *q = od->q;
    uint8_t *skey = NULL;
    size_t slen = 0;
    bool done = false;
    troupe_err e =
        troupe__tq_oentry_decode(kv->key, kv->key_len, od->kind, od->kind_len,
                                 od->id, od->id_len, &skey, &slen, &done);
    if (e != TROUPE_OK)
        return e;
    if (!troupe__tq_claim(q, skey, slen)) {
        troupe_free(skey); /* being delivered: spared */
        return TROUPE_OK;
    }
    od->claimed[od->nclaimed] = skey;
    od->claimedlen[od->nclaimed++] = slen;
    void *val = NULL;
    size_t vl = 0;
    e = troupe_db_get(q->db, q->cf, NULL, skey, slen, &val, &vl);
    if (e == TROUPE_ENOENT) /* an orphaned entry of this owner */
        return troupe_batch_delete(od->b, q->cf, kv->key, kv->key_len);
    troupe_queue_item item;
    if (e == TROUPE_OK)
        e = troupe__tq_item(q, skey, slen, val, vl, &item);
    /* the row it points at must be this owner's: a corrupt entry never
     * deletes another owner's event */
    if (e == TROUPE_OK &&
        (item.owner_kind_len != od->kind_len ||
         memcmp(item.owner_kind, od->kind, od->kind_len) != 0 ||
         item.owner_id_len != od->id_len ||
         memcmp(item.owner_id, od->id, od->id_len) != 0 ||
         item.completed != done))
        e = TROUPE_ECORRUPT;
    bool keep =
        e == TROUPE_OK && od->spare != NULL && od->spare(&item, od->arg);
    if (e == TROUPE_OK && !keep) {
        e = troupe_batch_delete(od->b, q->cf, skey, slen);
        if (e == TROUPE_OK)
            e = troupe__tq_entries(od->b, q->cf, &item, skey, slen,
                                   item.completed, false);
        if (e == TROUPE_OK && !item.completed) /* its attempts go with it */
            e = troupe__tq_att_write(od->b, q->cf, skey, slen, NULL);
        od->nb++;
    }
    troupe_free(val);
    return e;
}

/* One page of owner entries: its deletes commit in one batch (nothing of
 * it on error), then its claims go. *n: invocations deleted. */
static troupe_err
owner_page(owner_del *od, const troupe_page *pg, troupe_sync sync, size_t *n)
{
    *n = 0;
    od->b = NULL;
    od->nclaimed = 0;
    od->nb = 0;
    troupe_err e = troupe_batch_create(&od->b);
    for (size_t i = 0; e == TROUPE_OK && i < pg->n; i++)
        e = owner_entry(od, &pg->items[i]);
    if (e == TROUPE_OK && troupe_batch_count(od->b) > 0)
        e = troupe__tq_commit_wait(od->q->commit, &od->b, sync);
    if (e == TROUPE_OK)
        *n = od->nb;
    troupe_batch_destroy(od->b);
    for (size_t i = 0; i < od->nclaimed; i++) {
        troupe__tq_unclaim(od->q, od->claimed[i], od->claimedlen[i]);
        troupe_free(od->claimed[i]);
    }
    return e;
}

/* Copies the page's cursor into *after (the next scan starts past it). */
static troupe_err
owner_next(const troupe_page *pg, uint8_t **after, size_t *afterlen)
{
    if (pg->n == 0)
        return TROUPE_OK;
    uint8_t *a = troupe_malloc(pg->cursor_len);
    if (a == NULL)
        return TROUPE_ENOMEM;
    memcpy(a, pg->cursor, pg->cursor_len);
    troupe_free(*after);
    *after = a;
    *afterlen = pg->cursor_len;
    return TROUPE_OK;
}

troupe_err
troupe_queue_delete_by_owner_wait(troupe_queues *qs, const char *queue,
                                  const void *kind, size_t kind_len,
                                  const void *id, size_t id_len,
                                  troupe_queue_spare_fn spare, void *arg,
                                  troupe_sync sync, size_t *deleted)
{
    troupe_err e = troupe__block_check("troupe_queue_delete_by_owner_wait");
    if (e != TROUPE_OK)
        return e;
    if (kind == NULL || kind_len == 0 || kind_len > TROUPE_QUEUE_OWNER_MAX ||
        id == NULL || id_len == 0 || id_len > TROUPE_QUEUE_OWNER_MAX ||
        (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    owner_del od = {.kind = kind,
                    .kind_len = kind_len,
                    .id = id,
                    .id_len = id_len,
                    .spare = spare,
                    .arg = arg};
    e = troupe__tq_find_writable(qs, queue, "troupe_queue_delete_by_owner_wait",
                                 &od.q);
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
        e = troupe_db_scan(od.q->db, od.q->cf, NULL, &r, after, afterlen,
                           OWNER_BATCH, false, &pg);
        if (e != TROUPE_OK)
            break;
        more = pg->more;
        size_t n = 0;
        e = owner_page(&od, pg, sync, &n);
        count += n;
        if (e == TROUPE_OK)
            e = owner_next(pg, &after, &afterlen);
        troupe_page_destroy(pg);
    }
    troupe_free(after);
    troupe_key_writer_fini(&w);
    troupe__tq_release(od.q);
    if (deleted != NULL)
        *deleted = count;
    return e;
}
