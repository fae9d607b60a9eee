/*
 * What the queue module lends its tests and fuzz targets: the queue
 * object (one per queue, refcounted) and how to find one, the partition
 * actors' message kinds, and the codecs of what a queue stores (its rows,
 * keys and entries, its catalog entries and order marks; docs/queue.md).
 * The codecs read input from the disk: pure, any thread.
 */
#ifndef TROUPE_INTERNAL_QUEUE_H
#define TROUPE_INTERNAL_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>

#include "troupe/actor.h"
#include "troupe/hist.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/queue.h"

typedef struct tq_claim {
    uint8_t *key;
    size_t len;
} tq_claim;

/* The outcomes of handler calls a queue counts. */
enum {
    TQ_OUT_ACK,        /* an ack committed */
    TQ_OUT_RESCHEDULE, /* a reschedule committed */
    TQ_OUT_ERROR,      /* the handler failed or gave no valid outcome */
    TQ_OUT_TIMEOUT,    /* the handler outlived the worker's timeout */
    TQ_OUT_FAILED,     /* its outcome did not commit */
    TQ_OUTCOMES
};

/* Buckets of the attempts histogram: 1, 2, 4, ... 128, then the rest. */
#define TQ_ATTEMPT_BUCKETS 8u

/* One queue. Refcounted: the catalog map, partition actors, workers,
 * jobs and API calls in progress each hold a reference. */
typedef struct tq_queue {
    _Atomic long refs;
    troupe_queues *qs; /* valid while the queues are; what runs on after
                          their destroy (a timed-out handler) uses only
                          the copies below */
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    uint64_t id;
    char *name;
    uint32_t partitions;
    int64_t retention_ms;
    uint32_t max_attempts; /* 0: unlimited */
    troupe_cf *cf;
    _Atomic uint64_t next_order;
    uint64_t order_end;  /* first order not reserved */
    _Atomic bool paused; /* as stored in the catalog entry (queue_ddl.c) */
    troupe_addr *parts;  /* [partitions]: the partition actors */
    uint32_t spawned;    /* parts[0, spawned) run (0 on a read-only set) */
    /* troupe__tq_partitions_stop (once per queue): actors not stopped
     * yet + 1, and what runs when that reaches 0 */
    _Atomic uint32_t parts_left;
    void (*parts_stopped)(void *arg);
    void *parts_stopped_arg;
    /* Invocations being delivered or changed right now: no second
     * delivery, outcome or owner delete touches them meanwhile. */
    pthread_mutex_t mu;
    tq_claim *claims;
    size_t nclaims, capclaims;
    size_t workers; /* running workers (under qs->mu) */
    /* What the workers' handler calls came to, since open (relaxed
     * atomics, partition.c's; troupe_queue_counters_get reads them) */
    _Atomic uint64_t outcomes[TQ_OUTCOMES]; /* TQ_OUT_* */
    troupe_hist attempts;                   /* each call's attempt */
} tq_queue;

/* ---- codecs (format.c) ---- */
/* The stored value of an event: [1, id, key, payload, owner | nil]. */
troupe_err
troupe__tq_value_pack(const troupe_queue_event *ev, uint8_t **out, size_t *len);
/* Decodes a stored value into the item's id, key, payload, owner. */
troupe_err
troupe__tq_value_decode(const void *v, size_t len, troupe_queue_item *it);
/* Pending key (p, partition, time, order, id), completed key (c,
 * processed, time, id, order), and their decoders (EINVAL for anything
 * else). */
troupe_err
troupe__tq_pkey(troupe_key_writer *w, uint32_t part, int64_t time,
                uint64_t order, const void *id, size_t idlen);
troupe_err
troupe__tq_pkey_decode(const void *k, size_t len, uint32_t *part, int64_t *time,
                       uint64_t *order);
troupe_err
troupe__tq_ckey(troupe_key_writer *w, int64_t processed, int64_t time,
                const void *id, size_t idlen, uint64_t order);
troupe_err
troupe__tq_ckey_decode(const void *k, size_t len, int64_t *processed,
                       int64_t *time, uint64_t *order);
/* Owner entry (o, kind, id, state, skey) and id entry (i, id, skey). */
troupe_err
troupe__tq_okey(troupe_key_writer *w, const void *kind, size_t klen,
                const void *oid, size_t olen, bool completed, const void *skey,
                size_t slen);
troupe_err
troupe__tq_ikey(troupe_key_writer *w, const void *id, size_t idlen,
                const void *skey, size_t slen);
/* Decoders of the entries above, as the lookups by id and by owner read
 * them from the disk: the entry must be of the id (or owner kind and id)
 * given, hold nothing else, and point at a key that decodes as a pending
 * or completed key (for an owner entry: of the state it names). *skey is
 * a troupe_malloc'd copy of that key; *completed (owner entries) tells
 * its state. ECORRUPT for anything else, ENOMEM; nothing is allocated on
 * error. */
troupe_err
troupe__tq_ientry_decode(const void *k, size_t len, const void *id,
                         size_t idlen, uint8_t **skey, size_t *slen);
troupe_err
troupe__tq_oentry_decode(const void *k, size_t len, const void *kind,
                         size_t klen, const void *oid, size_t olen,
                         uint8_t **skey, size_t *slen, bool *completed);
/* The id element of a pending or completed key (points into k). */
troupe_err
troupe__tq_key_id(const void *k, size_t len, troupe_key_reader *r,
                  const uint8_t **id, size_t *idlen);
/* Fills a full item from a row; ECORRUPT when it does not decode. */
troupe_err
troupe__tq_item(const tq_queue *q, const void *k, size_t klen, const void *v,
                size_t vlen, troupe_queue_item *it);

/* ---- the catalog entry and the order mark (format.c) ---- */
/* What a queue's catalog entry holds. */
typedef struct tq_entry {
    uint64_t id;
    uint32_t partitions;
    int64_t retention_ms;
    uint32_t max_attempts; /* 0: unlimited (Tito's behaviour) */
    bool paused;
} tq_entry;
/* The stored forms (queue_ddl.c's and queue.c's design notes), read from
 * the disk: a queue's catalog entry ("queue", name) -> [1, id,
 * partitions, retention_ms] or, once max_attempts or paused is set, [2,
 * id, partitions, retention_ms, max_attempts, paused] (in the catalog's
 * meta; a version-1 entry reads as max_attempts 0, not paused); its
 * order mark ("s" in its family) is one uint, read with
 * troupe__catalog_uint_parse. The decoders return ECORRUPT for anything
 * else (a name that is not a valid catalog name, id 0, partitions
 * outside 1..TROUPE_QUEUE_PARTITIONS_MAX, a negative retention,
 * max_attempts over TROUPE_QUEUE_ATTEMPTS_MAX, a version and field count
 * that do not match). entry_pack writes the key into w (reset first) and
 * appends the value to p. Pure; any thread. */
troupe_err
troupe__tq_entry_pack(const char *name, const tq_entry *en,
                      troupe_key_writer *w, troupe_packer *p);
troupe_err
troupe__tq_entry_decode(const void *k, size_t klen, const void *v, size_t vlen,
                        char name[TROUPE_QUEUE_NAME_MAX + 1], tq_entry *en);
/* The value half of troupe__tq_entry_decode. */
troupe_err
troupe__tq_entry_value_decode(const void *v, size_t vlen, tq_entry *en);

/* ---- the attempts record (format.c) ---- */
/* A pending invocation's attempts: ("a", partition, time, order, id),
 * the pending key's fields under the space "a", -> [1, attempts uint,
 * parked bool, last_error bin | nil] (docs/queue.md). Written with each
 * delivery before its task is submitted, rewritten parked when an
 * attempt at the queue's max_attempts fails, deleted with the row. No
 * record: never delivered (attempts 0). error points into the decoded
 * value, at most TROUPE_QUEUE_ERROR_MAX bytes (att_pack cuts a longer
 * one). */
typedef struct tq_att {
    uint32_t attempts;
    bool parked;
    const uint8_t *error;
    size_t error_len;
} tq_att;
/* The record key of pending key skey (EINVAL when skey is not one), and
 * the pending key of a record key (ECORRUPT when it is not one), written
 * into w (reset first). */
troupe_err
troupe__tq_akey(troupe_key_writer *w, const void *skey, size_t slen);
troupe_err
troupe__tq_akey_pkey(troupe_key_writer *w, const void *akey, size_t alen);
troupe_err
troupe__tq_att_pack(const tq_att *a, troupe_packer *p);
/* ECORRUPT unless v is exactly a record (attempts >= 1). */
troupe_err
troupe__tq_att_decode(const void *v, size_t len, tq_att *a);

/* The queue object (queue.c): a reference more, a reference less (the
 * last one frees it). Any thread. */
tq_queue *
troupe__tq_retain(tq_queue *q);
void
troupe__tq_release(tq_queue *q);
/* Finds a queue by name and retains it (queues.c). EINVAL (a bad name),
 * ENOQUEUE, ESTATE (the set is stopping). Any thread. */
troupe_err
troupe__tq_find(troupe_queues *qs, const char *name, tq_queue **out);
/* The credit worker w uses now (its target's tasks held: deliveries not
 * yet settled or timed out; worker.c). Any thread. */
uint32_t
troupe__tq_worker_held(troupe_queue_worker *w);

/* Kinds of the partition actors' messages (partition.c). */
enum {
    TQ_KICK = 0,  /* re-evaluate (resume, clock jump) */
    TQ_NOTIFY,    /* body: int due time */
    TQ_SUBSCRIBE, /* ptr: worker (a reference moves in) */
    TQ_SCAN_DONE, /* work completion */
    TQ_PEEK_DONE, /* work completion */
    TQ_DUE,       /* the due timer */
    TQ_CREDIT,    /* a worker's credit freed: continue a stalled pass */
    TQ_SETTLED,   /* ptr: a delivery that is over (its job) */
    TQ_KINDS
};

/* One retention pass of troupe_queues_purge_completed without waiting
 * for its commit: the scan and the batch run here (a STORAGE thread), the
 * batch goes to the pipeline, and cb(err, purged, full, arg) runs once:
 * on the pipeline's writer after the commit, or here and now when there
 * was nothing to delete (OK, 0) or the pass failed before its commit.
 * Its errors are those of troupe_queues_purge_completed. */
typedef void (*troupe__queues_purged_cb)(troupe_err err, size_t purged,
                                         bool full, void *arg);
void
troupe__queues_purge_submit(troupe_queues *qs, int64_t now_ms, size_t max,
                            troupe__queues_purged_cb cb, void *arg);

#endif
