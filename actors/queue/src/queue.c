/*
 * The queue object (tq_queue, troupe/internal/queue.h): one per queue of
 * a set, refcounted, with its claims, its enqueue orders and the
 * messages to its partition actors.
 *
 * Enqueue order. Each queue's family holds a mark ("s") -> uint: every
 * order below it may have been used. An open reserves the block [mark,
 * mark + 2^32) by storing mark + 2^32 (synced) before any publish, so
 * orders grow across restarts without a scan and without a write per
 * publish. A run that uses up its block gets EFULL from publish. A
 * read-only set reads the mark and reserves nothing: it publishes
 * nothing.
 *
 * Claims. A short list under the queue's mutex: it holds the invocations
 * being delivered (bounded by the workers' credit) and the outcome or
 * delete calls in progress, so a linear search is cheap. A delivery in
 * flight, an outcome and an owner delete of one invocation exclude one
 * another through it, which keeps a read-then-write from resurrecting a
 * row another call just removed.
 *
 * Nothing here calls into the partitions, the outcomes or the set: the
 * partitions are reached by message only.
 */
#include <string.h>
#include <sys/types.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

tq_queue *
troupe__tq_retain(tq_queue *q)
{
    atomic_fetch_add(&q->refs, 1);
    return q;
}

void
troupe__tq_release(tq_queue *q)
{
    if (q == NULL || atomic_fetch_sub(&q->refs, 1) != 1)
        return;
    for (size_t i = 0; i < q->nclaims; i++)
        troupe_free(q->claims[i].key);
    troupe_free(q->claims);
    pthread_mutex_destroy(&q->mu);
    troupe_free(q->parts);
    troupe_free(q->name);
    troupe_free(q);
}

/* ---- claims ------------------------------------------------------------- */

static ssize_t
claim_at(tq_queue *q, const void *k, size_t len)
{
    for (size_t i = 0; i < q->nclaims; i++)
        if (q->claims[i].len == len && memcmp(q->claims[i].key, k, len) == 0)
            return (ssize_t)i;
    return -1;
}

bool
troupe__tq_claim(tq_queue *q, const void *k, size_t len)
{
    bool ok = false;
    pthread_mutex_lock(&q->mu);
    if (claim_at(q, k, len) < 0) {
        if (q->nclaims == q->capclaims) {
            size_t nc = q->capclaims ? 2 * q->capclaims : 16;
            tq_claim *c = troupe_realloc(q->claims, nc * sizeof(*c));
            if (c != NULL) {
                q->claims = c;
                q->capclaims = nc;
            }
        }
        uint8_t *copy = q->nclaims < q->capclaims ? troupe_malloc(len) : NULL;
        if (copy != NULL) {
            memcpy(copy, k, len);
            q->claims[q->nclaims++] = (tq_claim){copy, len};
            ok = true;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

bool
troupe__tq_claimed(tq_queue *q, const void *k, size_t len)
{
    pthread_mutex_lock(&q->mu);
    bool c = claim_at(q, k, len) >= 0;
    pthread_mutex_unlock(&q->mu);
    return c;
}

void
troupe__tq_unclaim(tq_queue *q, const void *k, size_t len)
{
    pthread_mutex_lock(&q->mu);
    ssize_t i = claim_at(q, k, len);
    if (i >= 0) {
        troupe_free(q->claims[i].key);
        q->claims[i] = q->claims[--q->nclaims];
    }
    pthread_mutex_unlock(&q->mu);
}

/* ---- messages to the partitions ---------------------------------------- */

void
troupe__tq_notify(tq_queue *q, uint32_t p, int64_t time_ms)
{
    if (p >= q->spawned)
        return; /* a read-only set runs no partition */
    troupe_packer pk;
    troupe_msg *m = NULL;
    troupe_pack_init(&pk);
    troupe_pack_int(&pk, time_ms);
    if (troupe_pack_take_msg(&pk, TQ_NOTIFY, &m) == TROUPE_OK)
        (void)troupe_runtime_send(q->rt, q->parts[p], &m);
    /* a lost notice (actor gone, shutdown) only delays delivery to the
     * next pass the partition makes for another reason, or to a restart */
}

void
troupe__tq_kick_range(tq_queue *q, uint32_t first, uint32_t last, uint32_t kind)
{
    for (uint32_t p = first; p <= last && p < q->spawned; p++) {
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, kind, NULL, 0) == TROUPE_OK)
            (void)troupe_runtime_send(q->rt, q->parts[p], &m);
    }
}

/* ---- enqueue orders ----------------------------------------------------- */

troupe_err
troupe__tq_order(tq_queue *q, uint64_t *out)
{
    uint64_t o = atomic_fetch_add(&q->next_order, 1);
    if (o >= q->order_end)
        return TROUPE_EFULL;
    *out = o;
    return TROUPE_OK;
}

static troupe_err
mark_key(troupe_key_writer *w, const uint8_t **k, size_t *kl)
{
    troupe_key_writer_init(w);
    troupe_key_put_string(w, TQ_MARK, strlen(TQ_MARK));
    return troupe_key_writer_finish(w, k, kl);
}

static troupe_err
mark_put(tq_queue *q, uint64_t v)
{
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    troupe_err e = mark_key(&w, &k, &kl);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, v);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    troupe_batch *b = NULL;
    if (e == TROUPE_OK)
        e = troupe_batch_create(&b);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, q->cf, k, kl, d, n);
    if (e == TROUPE_OK)
        e = troupe_db_write(q->db, b, TROUPE_SYNC_ON);
    troupe_batch_destroy(b);
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
    return e;
}

/* The mark; 1 when absent (a new queue); ECORRUPT when not one uint. */
static troupe_err
mark_get(tq_queue *q, uint64_t *v)
{
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    void *val = NULL;
    size_t vl = 0;
    troupe_err e = mark_key(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_db_get(q->db, q->cf, NULL, k, kl, &val, &vl);
    if (e == TROUPE_OK)
        e = troupe__catalog_uint_parse(val, vl, v);
    if (e == TROUPE_ENOENT) {
        *v = 1;
        e = TROUPE_OK;
    }
    troupe_free(val);
    troupe_key_writer_fini(&w);
    return e;
}

troupe_err
troupe__tq_queue_create(troupe_queues *qs, const char *name, const tq_entry *en,
                        tq_queue **out)
{
    uint64_t id = en->id;
    uint32_t parts = en->partitions;
    char cfn[32];
    troupe__cf_name('q', id, cfn, sizeof(cfn));
    tq_queue *q = troupe_calloc(1, sizeof(*q));
    if (q == NULL)
        return TROUPE_ENOMEM;
    atomic_init(&q->refs, 1);
    pthread_mutex_init(&q->mu, NULL);
    troupe_hist_init(&q->attempts, 1, TQ_ATTEMPT_BUCKETS);
    q->qs = qs;
    q->rt = qs->rt;
    q->db = qs->db;
    q->commit = qs->commit;
    q->clock = qs->clock;
    q->clock_ctx = qs->clock_ctx;
    q->id = id;
    q->partitions = parts;
    q->retention_ms = en->retention_ms;
    q->max_attempts = en->max_attempts;
    atomic_init(&q->paused, en->paused);
    q->name = troupe_strdup(name);
    q->parts = troupe_calloc(parts, sizeof(*q->parts));
    troupe_err e = q->name && q->parts ? TROUPE_OK : TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = troupe_db_cf(qs->db, cfn, &q->cf);
    uint64_t mark = 0;
    if (e == TROUPE_OK)
        e = mark_get(q, &mark);
    if (e == TROUPE_OK && !qs->read_only && mark > UINT64_MAX - TQ_ORDER_BLOCK)
        e = TROUPE_EFULL;
    /* read-only: an empty block (publish is refused before it asks) */
    uint64_t end = qs->read_only ? mark : mark + TQ_ORDER_BLOCK;
    if (e == TROUPE_OK && !qs->read_only)
        e = mark_put(q, end);
    if (e != TROUPE_OK) {
        troupe__tq_release(q);
        return e;
    }
    atomic_init(&q->next_order, mark);
    q->order_end = end;
    *out = q;
    return TROUPE_OK;
}
