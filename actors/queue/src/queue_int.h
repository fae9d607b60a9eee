/* Private to actors/queue: the set of queues and the workers, and what
 * the files of the module call in one another (README.md tells which
 * file owns what; the queue object and the codecs are in
 * troupe/internal/queue.h). */
#ifndef TROUPE_QUEUE_INT_H
#define TROUPE_QUEUE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "troupe/actor.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/dispatch.h"
#include "troupe/internal/queue.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/queue.h"

/* The key spaces of one queue's family (first tuple element). */
#define TQ_PENDING "p"
#define TQ_COMPLETED "c"
#define TQ_OWNER "o"
#define TQ_IDS "i"
#define TQ_MARK "s"
#define TQ_ATTEMPTS "a"

/* Enqueue orders reserved per open of a queue (docs/queue.md). */
#define TQ_ORDER_BLOCK (UINT64_C(1) << 32)

/* troupe_queues.state and troupe_queue_worker.state */
enum { TQ_RUNNING = 0, TQ_STOPPING, TQ_STOPPED };

/* The catalog job that stops the partitions of every queue of a set
 * (queues.c), kept in the set: a set stops once. */
typedef struct tq_stopjob {
    troupe__ddl ddl; /* first: the catalog's job */
    troupe_queues *qs;
    _Atomic size_t left; /* queues whose partitions still run, + 1 */
    bool direct;         /* the catalog refused the job: no resume */
} tq_stopjob;

struct troupe_queues {
    troupe_catalog *cat;   /* attached: detached by destroy */
    troupe_runtime *rt;    /* the catalog's */
    troupe_db *db;         /* the catalog's */
    troupe_commit *commit; /* NULL when read_only */
    bool read_only;        /* the db is: nothing written, nothing delivered */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    /* Creates, drops and the partitions' stop are catalog jobs, run one
     * at a time (in one order with the tables' changes) without holding
     * `mu` across their disk work, as loop threads take it to find a queue
     * (a publish must never wait for an fsync). */
    pthread_mutex_t mu; /* the map, the worker list, the state */
    tq_queue **qs;
    size_t nq;
    int state;                /* TQ_RUNNING, TQ_STOPPING, TQ_STOPPED */
    bool parts_stopping;      /* the stop job was started */
    troupe_queue_worker **ws; /* workers not yet stopped */
    size_t nws;
    /* the stop's callback: the owner's, posted to scheduler 0, or a
     * blocking twin's, called where the stop ended (post false) */
    troupe_queues_stop_cb stop_cb;
    void *stop_arg;
    bool stop_post;
    tq_stopjob stop;
};

struct troupe_queue_worker {
    _Atomic long refs; /* the owner's, each partition's and job's */
    troupe_queues *qs; /* valid until the worker has stopped */
    tq_queue *q;
    uint32_t first, last;
    troupe_queue_handler handler; /* NULL: a pull worker */
    void *arg;
    troupe_sync sync;
    troupe_runtime *rt;
    /* Its dispatch target, retained: created by the worker for a handler
     * (a callback target running troupe__tq_worker_task; stopped and
     * destroyed when the worker's stop ends, freed with the worker), or
     * the caller's pull target named by the options. Its credit is the
     * worker's credit, its timeout the handler timeout. */
    troupe_target *target;
    bool own_target;
    /* queued on the target while a partition waits for credit: its kick
     * sends TQ_CREDIT to the whole range (troupe__tq_worker_kick) */
    troupe__credit_wait wait;
    /* 1 (the worker's own share, until its stop) + one per delivery whose
     * task has not ended; the release that brings it to 0 ends the stop,
     * and no hold is taken once it is 0 (troupe__tq_worker_hold) */
    _Atomic size_t running;
    _Atomic int state;     /* TQ_RUNNING, TQ_STOPPING, TQ_STOPPED */
    _Atomic bool stopping; /* state != TQ_RUNNING, for the partitions */
    /* set by the stop that won (NULL cb: a stop of the set), as in
     * troupe_queues */
    troupe_queue_worker_stop_cb stop_cb;
    void *stop_arg;
    bool stop_post;
};

/* A pull worker's task header (docs/queue.md): its fixed part, and the
 * longest queue name it can carry beside the longest id, key and owner
 * within TROUPE_TASK_HEADER_MAX. */
#define TQ_PULL_HEADER_FIXED 32u
#define TQ_PULL_QUEUE_NAME_MAX                                                 \
    (TROUPE_TASK_HEADER_MAX - TQ_PULL_HEADER_FIXED - 2 * TROUPE_QUEUE_ID_MAX - \
     2 * TROUPE_QUEUE_OWNER_MAX)

/* A callback job's state: the handler's return and the task's settling
 * race for it (partition.c: job_done). */
enum { J_RUN = 0, J_RETURNED, J_ABANDONED };

typedef struct tq_job {
    tq_queue *q;
    troupe_queue_worker *w; /* NULL: a park at the scan, no delivery */
    troupe_runtime *rt;
    troupe_addr part; /* the partition actor */
    uint64_t id;      /* the task's (set by done) */
    uint32_t attempt;
    _Atomic int state; /* J_* (callback workers) */
    /* done's side holds one reference, a callback's handler another; the
     * last one unclaims the row and sends the notice (TQ_SETTLED) */
    atomic_int refs;
    /* the handler's return (callback workers) */
    troupe_outcome fo;
    troupe_err he;
    bool ran, gone;
    void *cur; /* the row read again once claimed */
    size_t curlen;
    /* the outcome */
    troupe_queue_outcome_kind kind;
    int64_t time_ms;
    uint32_t resched_part;
    bool completed;  /* the row is no longer pending */
    bool parked;     /* its attempts record now says parked */
    bool counted;    /* without max_attempts: its failure's record is
                        written (worker.c, job_park), so the attempt
                        counts; one that ended otherwise does not */
    bool att_failed; /* its attempts record did not commit: not delivered */
    bool park_end;   /* a park's commit ends the task (job_parked) */
    bool invalid;    /* job_commit found the outcome invalid */
    char *herr;      /* the handler's error text (troupe_errmsg), or NULL */
    uint8_t *skey;
    size_t sklen;
    uint8_t *val;
    size_t vlen;
} tq_job;

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
/* Appends to b the put of pending key skey's attempts record a, or its
 * delete when a is NULL. EINVAL (skey not a pending key), ENOMEM. */
troupe_err
troupe__tq_att_write(troupe_batch *b, troupe_cf *cf, const void *skey,
                     size_t slen, const tq_att *a);
/* Reads skey's attempts record from snap (NULL: the latest): *a zeroed
 * when there is none; else a points into *buf (troupe_free it; NULL on
 * error and when none). ECORRUPT (a record that does not decode),
 * EINVAL, storage errors. Blocks (a point read). */
troupe_err
troupe__tq_att_get(const tq_queue *q, troupe_snapshot *snap, const void *skey,
                   size_t slen, tq_att *a, void **buf);

/* ---- queue.c: the queue object ---- */
/* Builds the object of queue `id` of qs and, unless qs is read-only,
 * reserves its block of enqueue orders (one synced write). No partition
 * runs yet (troupe__tq_partitions_spawn). ECORRUPT (a bad order mark),
 * EFULL (orders used up), storage errors, ENOMEM; nothing is left on
 * error. Blocks. */
troupe_err
troupe__tq_queue_create(troupe_queues *qs, const char *name, const tq_entry *en,
                        tq_queue **out);
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
/* Sends `kind` (TQ_KICK, or TQ_CREDIT: a credit freed) to partitions
 * [first, last] of q. */
void
troupe__tq_kick_range(tq_queue *q, uint32_t first, uint32_t last,
                      uint32_t kind);
/* The next enqueue order; EFULL once this open's block is used up. */
troupe_err
troupe__tq_order(tq_queue *q, uint64_t *out);

/* ---- partition.c ---- */
extern const troupe_actor_def troupe__tq_partition_def;
/* Spawns q's partition actors, spread over the schedulers. On error the
 * ones spawned are left for troupe__tq_partitions_stop. Any thread. */
troupe_err
troupe__tq_partitions_spawn(tq_queue *q);
/* Stops q's partition actors (once per queue): cb(arg) runs once when
 * every one has stopped, on the thread of the last actor's stop, or
 * inside this call when none was running. Never blocks. */
void
troupe__tq_partitions_stop(tq_queue *q, void (*cb)(void *arg), void *arg);

/* ---- queues.c: the set ---- */
/* EREADONLY with the detail naming `call` when qs is read-only, else OK.
 * qs may be NULL (OK: the caller's own check says EINVAL). */
troupe_err
troupe__tq_writable(const troupe_queues *qs, const char *call);
/* troupe__tq_writable(qs, call), then troupe__tq_find. */
troupe_err
troupe__tq_find_writable(troupe_queues *qs, const char *name, const char *call,
                         tq_queue **out);
/* Under qs->mu: ESTATE (stopping), EEXIST (a queue of that name), OK. */
troupe_err
troupe__tq_map_absent(troupe_queues *qs, const char *name);
/* Adds q (the map's reference moves in): ESTATE (stopping), ENOMEM. */
troupe_err
troupe__tq_map_add(troupe_queues *qs, tq_queue *q);
/* Takes queue `name` out of the map (its reference moves to *out):
 * ESTATE, ENOQUEUE, EBUSY (a worker of it runs). */
troupe_err
troupe__tq_map_take(troupe_queues *qs, const char *name, tq_queue **out);
/* Every queue of qs, each retained, in one troupe_malloc'd array (NULL
 * when *n is 0): ESTATE, ENOMEM. */
troupe_err
troupe__tq_map_all(troupe_queues *qs, tq_queue ***out, size_t *n);
/* Adds w to the workers of qs (and of its queue, which a drop refuses
 * while it has any): ESTATE (stopping), ENOMEM. */
troupe_err
troupe__tq_worker_list(troupe_queues *qs, troupe_queue_worker *w);
/* w has stopped: out of the list; the stop of the set that waited for
 * the last worker goes on. The caller touches qs no more after it (a
 * stop may finish and its owner destroy qs). */
void
troupe__tq_worker_unlist(troupe_queues *qs, troupe_queue_worker *w);

/* ---- worker.c ---- */
void
troupe__tq_worker_release(troupe_queue_worker *w);
/* A credit freed on w's target (troupe__credit_wait.kick): TQ_CREDIT to
 * w's partitions. */
void
troupe__tq_worker_kick(void *w);
/* A delivery to w begins: false (nothing taken) once w is stopping. */
bool
troupe__tq_worker_hold(troupe_queue_worker *w);
/* A delivery's outcome settled (or it was given up). */
void
troupe__tq_worker_done(troupe_queue_worker *w);
/* The stop of a set: stops each of ws[0, n) that still runs, as
 * troupe_queue_worker_stop with no callback (each leaves the list once
 * stopped), then drops the reference the caller took on each and frees
 * ws. Never blocks. */
void
troupe__tq_workers_stop(troupe_queue_worker **ws, size_t n);

/* ---- worker.c: deliveries ---- */
/* A handler worker's target function (troupe_task_fn): runs the handler
 * of the delivery whose job the task's header names. */
troupe_outcome
troupe__tq_worker_task(const troupe_task *t, troupe_task_reply *r, void *arg);
/* A delivery task's done (troupe__task_done_fn, arg the job). */
bool
troupe__tq_job_done(void *arg, uint64_t id, troupe_outcome outcome,
                    const uint8_t *body, size_t len);
/* Gives up a job whose task was never submitted (its attempts record
 * did not commit, or it was a park at the scan): the partition hears of
 * it (TQ_SETTLED) and frees it, and its hold on the worker ends. */
void
troupe__tq_job_abort(tq_job *j);
/* Frees a job (its references on the queue and the worker with it). */
void
troupe__tq_job_free(tq_job *j);
/* Writes a pull worker's task header for it into h (at least
 * TROUPE_TASK_HEADER_MAX bytes); returns its length. */
size_t
troupe__tq_pull_header(const tq_queue *q, const troupe_queue_item *it,
                       uint8_t *h);

/* ---- outcome.c ---- */
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
 * row and its entries become the completed row and its entries (its
 * attempts record is deleted), and a
 * reschedule inserts the replacement (*resched_part set to its partition,
 * else UINT32_MAX). EINVAL for a bad key or outcome, ECORRUPT for a value
 * that does not decode; nothing to commit then. Never blocks. */
troupe_err
troupe__tq_outcome_batch(tq_queue *q, const void *skey, size_t slen,
                         const void *val, size_t vlen,
                         troupe_queue_outcome_kind kind, int64_t time_ms,
                         troupe_batch **out, uint32_t *resched_part);

#endif
