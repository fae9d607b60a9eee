/* Private to actors/queue: the shared objects behind troupe_queues (the
 * queue object and the codecs are in troupe/internal/queue.h). */
#ifndef TROUPE_QUEUE_INT_H
#define TROUPE_QUEUE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "troupe/actor.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/waiter.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/queue.h"

/* The key spaces of one queue's family (first tuple element). */
#define TQ_PENDING "p"
#define TQ_COMPLETED "c"
#define TQ_OWNER "o"
#define TQ_IDS "i"
#define TQ_MARK "s"

/* Enqueue orders reserved per open of a queue (docs/queue.md). */
#define TQ_ORDER_BLOCK (UINT64_C(1) << 32)

struct troupe_queues {
    troupe_catalog *cat; /* attached: detached by destroy */
    troupe_runtime *rt;  /* the catalog's */
    troupe_db *db;       /* the catalog's */
    troupe_commit *commit;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    /* Creates, drops and the partitions' stop are catalog jobs, run one
     * at a time (in one order with the tables' changes) without holding
     * `mu` across their disk work, as loop threads take it to find a queue
     * (a publish must never wait for an fsync). */
    pthread_mutex_t mu; /* the map, the worker list, `stopped` */
    tq_queue **qs;
    size_t nq;
    bool stopped;
    troupe_queue_worker **ws; /* running workers */
    size_t nws;
};

struct troupe_queue_worker {
    _Atomic long refs;
    troupe_queues *qs;
    tq_queue *q;
    uint32_t first, last, credit;
    troupe_queue_handler handler;
    void *arg;
    uint32_t timeout_ms;
    troupe_sync sync;
    _Atomic uint32_t held; /* credit in use */
    /* deliveries whose outcome is not settled: a hold per delivery */
    troupe__waiter running;
    _Atomic bool stopping;
    _Atomic bool starved;  /* a partition waits for credit */
    _Atomic bool unlisted; /* out of qs->ws: qs is not touched again */
};

/* ---- format.c ---- */
int64_t
troupe__tq_now(const tq_queue *q);
/* Validates an event; EINVAL / ETOOBIG as troupe_queue_publish. */
troupe_err
troupe__tq_event_check(const troupe_queue_event *ev);
/* Appends the owner and id entry puts (or deletes) of a row. */
troupe_err
troupe__tq_entries(troupe_batch *b, troupe_cf *cf, const troupe_queue_item *it,
                   const void *skey, size_t slen, bool completed, bool put);
/* Submits through the pipeline and waits. Blocks. */
troupe_err
troupe__tq_commit_wait(troupe_commit *c, troupe_batch **b, troupe_sync sync);

/* ---- queues.c ---- */
/* Claims: false when already claimed (or out of memory). */
bool
troupe__tq_claim(tq_queue *q, const void *k, size_t len);
bool
troupe__tq_claimed(tq_queue *q, const void *k, size_t len);
void
troupe__tq_unclaim(tq_queue *q, const void *k, size_t len);
/* Tells partition p of q that an event is due at time_ms. */
void
troupe__tq_notify(tq_queue *q, uint32_t p, int64_t time_ms);
/* The next enqueue order; EFULL once this open's block is used up. */
troupe_err
troupe__tq_order(tq_queue *q, uint64_t *out);
void
troupe__tq_worker_release(troupe_queue_worker *w);
/* Sends `kind` (TQ_KICK, or TQ_CREDIT: a credit freed) to partitions
 * [first, last] of q. */
void
troupe__tq_kick_range(tq_queue *q, uint32_t first, uint32_t last,
                      uint32_t kind);

/* ---- ops.c ---- */
/* Applies an outcome to a claimed pending key. Blocks. */
troupe_err
troupe__tq_outcome(tq_queue *q, const void *skey, size_t slen,
                   troupe_queue_outcome_kind kind, int64_t time_ms,
                   troupe_sync sync);

/* The one check of an outcome: EINVAL unless skey decodes as a pending
 * key (with q: of a partition q has) and kind/time_ms is an outcome (ACK,
 * or RESCHEDULE at time_ms >= 0). *part, *time and *order (each may be
 * NULL) get the key's fields. q may be NULL before the queue is looked
 * up. Pure. */
troupe_err
troupe__tq_outcome_check(const tq_queue *q, const void *skey, size_t slen,
                         troupe_queue_outcome_kind kind, int64_t time_ms,
                         uint32_t *part, int64_t *time, uint64_t *order);

/* The batch of an outcome for the claimed pending row (skey, val): the
 * row and its entries become the completed row and its entries, and a
 * reschedule inserts the replacement (*resched_part set to its partition,
 * else UINT32_MAX). EINVAL for a bad key or outcome, ECORRUPT for a value
 * that does not decode; nothing to commit then. Never blocks. */
troupe_err
troupe__tq_outcome_batch(tq_queue *q, const void *skey, size_t slen,
                         const void *val, size_t vlen,
                         troupe_queue_outcome_kind kind, int64_t time_ms,
                         troupe_batch **out, uint32_t *resched_part);

/* ---- partition.c ---- */
extern const troupe_actor_def troupe__tq_partition_def;
typedef struct tq_part_arg {
    tq_queue *q;
    uint32_t p;
} tq_part_arg;
void
troupe__tq_part_arg_free(void *arg);

#endif
