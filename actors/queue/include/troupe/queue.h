/*
 * The partitioned scheduled durable queue: Tito's queue as
 * queue_partition actors, its events in the same RocksDB as the tables.
 * Formats, guarantees and limits: docs/queue.md.
 *
 * Objects and owners:
 *  - troupe_queues: one per db, created by troupe_queues_open and owned by
 *    the caller; stopped with troupe_queues_stop (or _stop_wait), then
 *    freed with troupe_queues_destroy. It borrows the catalog (and with it
 *    the runtime and db) and the commit pipeline of its options: they must
 *    outlive it (stop it before shutting the runtime down, destroy it
 *    before stopping the catalog and destroying the pipeline), and it must
 *    outlive the asynchronous calls made on it (destroy it only once their
 *    callbacks fired).
 *  - troupe_queue_worker: created by troupe_queue_worker_create, owned by
 *    the caller, stopped with troupe_queue_worker_stop (or _stop_wait),
 *    then freed with troupe_queue_worker_destroy. troupe_queues_stop stops
 *    the workers still running; their owners then only destroy them (after
 *    the queues' stop completed; the worker may outlive the queues).
 *  - troupe_queue_page: the result of an inspection, owned by the caller,
 *    freed with troupe_queue_page_destroy; every pointer in it stays valid
 *    until then.
 *
 * Threads. Every function may be called from any thread. Functions marked
 * "blocks" wait for the disk or the commit pipeline: never call them on a
 * loop thread of the runtime or of the host; the _wait calls of events
 * (publish, ack, reschedule, list, lookup, stats, delete by owner) return
 * EDEADLK there, starting nothing, when it is a troupe scheduler's thread
 * or a troupe callback (so do the stop_wait twins). A queue name that is
 * not registered is ENOQUEUE,
 * with troupe_errmsg naming it. troupe_queue_publish,
 * troupe_queue_ack and troupe_queue_reschedule return at once and, when
 * they return OK, call back exactly once on scheduler 0.
 * troupe_queue_publish_in never blocks and never calls back.
 *
 * Read-only. On a catalog of a read-only db (troupe_db_opts.read_only)
 * the queues open without a commit pipeline, write nothing (no enqueue
 * orders are reserved) and run no partition actor. Inspection works
 * (troupe_queues_list, _list_wait, _lookup_wait, _stats_wait,
 * _counters_get); every call that would write or deliver returns
 * EREADONLY, with troupe_errmsg naming the call, starting nothing:
 * publish (all three), ack and reschedule (all four), create, drop,
 * worker create, pause, resume, kick, parked retry and delete, delete by
 * owner and purge.
 *
 * Times are Unix milliseconds (int64, >= 0). Byte strings (event id,
 * business key, owner kind and id) are opaque bytes with their lengths.
 */
#ifndef TROUPE_QUEUE_H
#define TROUPE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/txn.h"

/* Queue names: 1..TROUPE_QUEUE_NAME_MAX bytes of valid UTF-8, no NUL:
 * the catalog's rule, troupe_catalog_name_valid (troupe/catalog.h). */
#define TROUPE_QUEUE_NAME_MAX TROUPE_CATALOG_NAME_MAX
#define TROUPE_QUEUE_PARTITIONS_MAX 65536
/* Event id and business key: 1..TROUPE_QUEUE_ID_MAX bytes. */
#define TROUPE_QUEUE_ID_MAX 1024
/* Owner kind and owner id: 1..TROUPE_QUEUE_OWNER_MAX bytes each. */
#define TROUPE_QUEUE_OWNER_MAX 512
/* Largest serialized event (the stored row value). */
#define TROUPE_QUEUE_EVENT_MAX (1024u * 1024u)
/* Storage is read in chunks of at most this many rows. */
#define TROUPE_QUEUE_CHUNK 16
/* Most rows one inspection page may return. */
#define TROUPE_QUEUE_PAGE_MAX 10000
/* Most attempts a queue may allow (troupe_queue_spec.max_attempts). */
#define TROUPE_QUEUE_ATTEMPTS_MAX 1000000u
/* Longest last error kept with a parked invocation (longer ones are cut). */
#define TROUPE_QUEUE_ERROR_MAX 1024u
/* Default handler timeout. */
#define TROUPE_QUEUE_TIMEOUT_MS (10u * 60u * 1000u)

typedef struct troupe_queues troupe_queues;
typedef struct troupe_queue_worker troupe_queue_worker;

typedef struct troupe_queues_opts {
    /* borrowed; the queues' runtime and db are the catalog's */
    troupe_catalog *catalog;
    /* borrowed; a pipeline on the db. NULL (and ignored) when the db is
     * read-only. */
    troupe_commit *commit;
    /* Unix ms for due times, processed times and retention; NULL:
     * troupe_now_ms. Called on any thread: thread-safe, non-blocking. */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
} troupe_queues_opts;

/*
 * Opens the queues of o->catalog: loads every queue entry of the catalog,
 * reserves each queue's block of enqueue orders (one synced write each)
 * and spawns one queue_partition actor per partition, spread over the
 * schedulers; on a read-only db, only loads (see "Read-only" above). On
 * OK *out owns the object. Errors: EINVAL (NULL, missing option),
 * ESTATE (the catalog is stopping), ECORRUPT (malformed catalog entry or
 * order mark), errors of the storage and of troupe_actor_spawn, ENOMEM.
 * Blocks.
 */
troupe_err
troupe_queues_open(const troupe_queues_opts *o, troupe_queues **out);

typedef void (*troupe_queues_stop_cb)(troupe_queues *q, void *arg);

/*
 * Stops the queues: from now on every call on them but destroy fails
 * with ESTATE. Every worker still running stops (as
 * troupe_queue_worker_stop: its running handlers settle and their
 * outcomes commit), then every partition actor, after the creates and
 * drops queued before (the catalog's one order of changes). Then cb(q,
 * arg) runs once on scheduler 0 (here and now on the stopping thread
 * when scheduler 0 has closed). Returns at once. Errors (cb never fires):
 * EINVAL (NULL q or cb), ESTATE (already stopping or stopped), ENOMEM.
 * Any thread.
 */
troupe_err
troupe_queues_stop(troupe_queues *q, troupe_queues_stop_cb cb, void *arg);

/* The same, waiting until everything stopped. Errors: those of
 * troupe_queues_stop, EDEADLK (a troupe thread: nothing started).
 * Blocks. */
troupe_err
troupe_queues_stop_wait(troupe_queues *q);

/* Frees stopped queues (their stop completed). NULL is a no-op; queues
 * opened and not stopped are a programming error: abort(). */
void
troupe_queues_destroy(troupe_queues *q);

typedef struct troupe_queue_spec {
    const char *name;
    uint32_t partitions;  /* 1..TROUPE_QUEUE_PARTITIONS_MAX */
    int64_t retention_ms; /* completed history kept this long; >= 0 */
    /* Most deliveries of one invocation, 0..TROUPE_QUEUE_ATTEMPTS_MAX; 0:
     * no limit (Tito's behaviour: delivered again until an outcome
     * commits). An invocation whose attempt number max_attempts fails is
     * parked: never delivered again until troupe_queue_parked_retry_wait,
     * listed as TROUPE_QUEUE_PARKED with its last error. */
    uint32_t max_attempts;
} troupe_queue_spec;

/*
 * Creates a queue: takes its id from the catalog's counter, stores it in
 * the catalog (synced) and spawns its partition actors, in the catalog's
 * one order of changes (after a table change in progress). Errors: EINVAL
 * (bad name, partitions or retention), EREADONLY, EEXIST, ESTATE
 * (stopped), EFULL (the id counter is used up), storage errors, ENOMEM.
 * Blocks.
 */
troupe_err
troupe_queues_create_wait(troupe_queues *q, const troupe_queue_spec *spec);

/*
 * Drops a queue: its partition actors stop, its catalog entry goes
 * (synced) and its family with every event, in the catalog's one order
 * of changes. Errors: EINVAL, EREADONLY, ENOQUEUE (no such queue),
 * EBUSY (a worker of it has not stopped: stop it first), ESTATE, storage
 * errors. Blocks.
 */
troupe_err
troupe_queues_drop_wait(troupe_queues *q, const char *name);

typedef struct troupe_queue_info {
    const char *name;
    uint64_t id;
    uint32_t partitions;
    int64_t retention_ms;
    uint32_t max_attempts; /* 0: unlimited */
    bool paused;           /* as stored: a reopen keeps it */
} troupe_queue_info;

/*
 * The queues, sorted by name. *out is one allocation (array and names)
 * the caller frees with troupe_free; NULL when *n == 0. Errors: EINVAL,
 * ESTATE, ENOMEM. Never blocks on the disk.
 */
troupe_err
troupe_queues_list(troupe_queues *q, troupe_queue_info **out, size_t *n);

/* The partition of a business key: FNV-1a 64 of its bytes modulo
 * `partitions` (part of the on-disk format: docs/queue.md). */
uint32_t
troupe_queue_partition_of(const void *key, size_t key_len, uint32_t partitions);

/* ---- events ----------------------------------------------------------- */

typedef struct troupe_queue_event {
    const void *id; /* 1..TROUPE_QUEUE_ID_MAX bytes */
    size_t id_len;
    const void *key; /* business key: 1..TROUPE_QUEUE_ID_MAX bytes */
    size_t key_len;
    const void *payload; /* exactly one msgpack object */
    size_t payload_len;
    int64_t time_ms; /* runnable time, Unix ms, >= 0 */
    /* Optional owner: both NULL/0, or both 1..TROUPE_QUEUE_OWNER_MAX. */
    const void *owner_kind;
    size_t owner_kind_len;
    const void *owner_id;
    size_t owner_id_len;
} troupe_queue_event;

/*
 * One stored invocation, as inspection and delivery show it. Pointers
 * point into the owning page or delivery. owner_kind / owner_id are NULL
 * without an owner.
 */
typedef struct troupe_queue_item {
    const uint8_t *skey; /* the storage key: handle for ack / reschedule */
    size_t skey_len;
    bool completed;
    uint32_t partition;
    int64_t time_ms;      /* runnable (event) time */
    uint64_t order;       /* enqueue order of the invocation */
    int64_t processed_ms; /* completed rows; 0 pending */
    const uint8_t *id;
    size_t id_len;
    const uint8_t *key;
    size_t key_len;
    const uint8_t *payload;
    size_t payload_len;
    const uint8_t *owner_kind;
    size_t owner_kind_len;
    const uint8_t *owner_id;
    size_t owner_id_len;
    /* Pending rows in an inspection page (list and lookup; 0 / false /
     * NULL elsewhere): the deliveries made so far (stored, so they
     * survive a restart), whether the invocation is parked, and a parked
     * one's last error (at most TROUPE_QUEUE_ERROR_MAX bytes, text). */
    uint32_t attempts;
    bool parked;
    const uint8_t *last_error;
    size_t last_error_len;
} troupe_queue_item;

typedef void (*troupe_queue_cb)(troupe_err err, void *arg);

/*
 * Publishes one event: its pending row, its owner entry and its id entry
 * in one batch through the commit pipeline. Then the event's partition
 * actor learns its due time. cb(err, arg) fires once on scheduler 0: OK,
 * EUNKNOWN (may or may not be stored), EFULL, EFAILSTOP, ENOSPC, ENOENT (queue
 * dropped meanwhile), ENOMEM. Call errors (nothing written, cb never
 * fires): EINVAL (NULL, empty or oversized id / key / owner part, owner
 * given by halves, negative time, payload not exactly one msgpack object,
 * bad sync), EREADONLY, ENOQUEUE (no such queue), ETOOBIG (serialized event
 * over TROUPE_QUEUE_EVENT_MAX), ESTATE (stopped), EFULL (pipeline full, or this
 * open's enqueue orders used up), ENOMEM.
 */
troupe_err
troupe_queue_publish(troupe_queues *q, const char *queue,
                     const troupe_queue_event *ev, troupe_sync sync,
                     troupe_queue_cb cb, void *arg);
/* Blocking twin: the call errors, or the callback's. Blocks. */
troupe_err
troupe_queue_publish_wait(troupe_queues *q, const char *queue,
                          const troupe_queue_event *ev, troupe_sync sync);

/*
 * Publishes inside a transaction: the event's rows join the
 * transaction's one batch (troupe_txn_attach), so they commit exactly
 * when its rows do; a rolled-back, failed or destroyed transaction
 * writes nothing and delivers nothing. After a successful commit the
 * partition actor learns the due time. Validation is done here, with the
 * errors of troupe_queue_publish, and nothing is attached on error; also
 * ESTATE when the transaction is not open. Never blocks.
 */
troupe_err
troupe_queue_publish_in(troupe_queues *q, troupe_txn *tx, const char *queue,
                        const troupe_queue_event *ev);

/* ---- delivery ---------------------------------------------------------- */

typedef enum troupe_queue_outcome_kind {
    TROUPE_QUEUE_ACK = 1,       /* complete the invocation */
    TROUPE_QUEUE_RESCHEDULE = 2 /* complete it and insert the replacement
                                   (same id, key, owner, payload) at
                                   time_ms */
} troupe_queue_outcome_kind;

typedef struct troupe_queue_outcome {
    troupe_queue_outcome_kind kind;
    int64_t time_ms; /* RESCHEDULE: the new runnable time, >= 0 */
    /* With an error return: what went wrong, a NUL-terminated text the
     * handler keeps valid until it returns (copied then, cut at
     * TROUPE_QUEUE_ERROR_MAX bytes). It is the last error of an
     * invocation this attempt parks. NULL: troupe_errmsg of the error. */
    const char *error;
} troupe_queue_outcome;

typedef struct troupe_queue_delivery {
    const char *queue;
    troupe_queue_item ev;
    /* 1 for the first delivery of this invocation, +1 for each
     * redelivery. Stored before the handler runs, so a restart (or a
     * crash) never delivers it again with a number already seen. */
    uint32_t attempt;
} troupe_queue_delivery;

/*
 * A handler runs on the runtime's worker pool and borrows *d for the call.
 * Returning OK with *out filled commits that outcome; returning an error
 * (or OK with an invalid outcome) leaves the invocation pending, and it is
 * delivered again with attempt + 1.
 */
typedef troupe_err (*troupe_queue_handler)(const troupe_queue_delivery *d,
                                           troupe_queue_outcome *out,
                                           void *arg);

typedef struct troupe_queue_worker_opts {
    const char *queue;
    uint32_t first, last; /* partition range [first, last] */
    /* Exactly one of handler (a C handler, run on the HOST lane) and
     * target (the name of a dispatch target the caller created, usually
     * a pull target on a troupe_host: troupe/dispatch.h; its tasks are
     * the events as docs/queue.md "Pull workers" lays out, and the
     * target's credit and timeout are the worker's). */
    troupe_queue_handler handler;
    const char *target;
    /* With a handler: most events held at once, 1..65536. With a
     * target: 0. */
    uint32_t credit;
    void *arg; /* to handler; must outlive the worker's stop */
    /* With a handler: 0 means TROUPE_QUEUE_TIMEOUT_MS. A handler still
     * running after this loses its invocation (no outcome: delivered
     * again once the handler has returned, never concurrently) and frees
     * its credit. With a target: 0 (the target's timeout holds). */
    uint32_t timeout_ms;
    troupe_sync sync; /* durability of outcome commits */
} troupe_queue_worker_opts;

/*
 * Creates a worker and starts it: each partition of the range delivers
 * its due events to it, never more than `credit` at once, fairly
 * (docs/queue.md). On OK *out owns it. A pull worker's target answers
 * each event: SUCCESS acknowledges it (a reply body {"reschedule":
 * time_ms} in msgpack reschedules it instead), FAILURE, ONGOING and
 * UNKNOWN (a deadline passed, a host closed) leave it pending, delivered
 * again with attempt + 1. Errors: EINVAL (NULL, neither or both of
 * handler and target, a handler's credit 0 or over 65536, a target's
 * credit or timeout not 0, range inverted or past the queue's partitions,
 * bad sync, a pull worker on a queue named longer than 992 bytes),
 * EREADONLY, ENOQUEUE (no such queue), ENOENT (no target of that name),
 * ESTATE (stopped), ENOMEM. Any thread; never blocks.
 */
troupe_err
troupe_queue_worker_create(troupe_queues *q, const troupe_queue_worker_opts *o,
                           troupe_queue_worker **out);

typedef void (*troupe_queue_worker_stop_cb)(troupe_queue_worker *w, void *arg);

/*
 * Graceful stop: no new deliveries to this worker; once the handlers
 * already started have returned (each bounded by the timeout: a handler
 * that outlives it no longer counts) and their outcomes committed,
 * cb(w, arg) runs once on scheduler 0 (here and now on the thread the
 * last handler settled on when scheduler 0 has closed). Returns at once.
 * Errors (cb never fires): EINVAL (NULL w or cb), ESTATE (already
 * stopping or stopped, also by troupe_queues_stop). Any thread.
 */
troupe_err
troupe_queue_worker_stop(troupe_queue_worker *w, troupe_queue_worker_stop_cb cb,
                         void *arg);

/* The same, waiting until it has stopped. Errors: those of
 * troupe_queue_worker_stop, EDEADLK (a troupe thread: nothing started).
 * Blocks. */
troupe_err
troupe_queue_worker_stop_wait(troupe_queue_worker *w);

/* Frees a stopped worker (its stop, or its queues' stop, completed). NULL
 * is a no-op; a worker not stopped is a programming error: abort(). */
void
troupe_queue_worker_destroy(troupe_queue_worker *w);

/* Pause / resume delivery of a queue. The state is stored in the queue's
 * catalog entry (synced, a catalog job in the one order of changes) before
 * it takes effect, so a reopened queue stays paused. Handlers already
 * running finish; nothing new starts while paused. Pausing a paused queue
 * (or resuming a running one) is OK and writes again. Errors: EINVAL,
 * EREADONLY (a read-only open delivers nothing), ENOQUEUE, ESTATE,
 * EDEADLK (a troupe thread: nothing done), storage errors. Blocks. */
troupe_err
troupe_queue_pause(troupe_queues *q, const char *queue);
troupe_err
troupe_queue_resume(troupe_queues *q, const char *queue);

/*
 * Wakes every partition of a queue to re-read the clock: for hosts with
 * an injected clock that jumped. Errors: EINVAL, EREADONLY, ENOQUEUE,
 * ESTATE. Never blocks.
 */
troupe_err
troupe_queue_kick(troupe_queues *q, const char *queue);

/*
 * Outcomes by storage key, outside a handler (Tito's ack / reschedule).
 * ack: one batch moves the pending row and its owner / id entries to the
 * completed row and its entries. reschedule: the same, plus the
 * replacement at time_ms. Errors: OK also when the key no longer exists
 * (a no-op); EINVAL (NULL, a key outside the pending space or naming a
 * partition the queue does not have, negative time); ECORRUPT (the row
 * is undecodable: left untouched); EBUSY (the invocation is being
 * delivered right now); EREADONLY; ENOQUEUE (no such queue); ESTATE;
 * EUNKNOWN, EFAILSTOP, ENOSPC, EIO, ENOMEM. Blocks.
 */
troupe_err
troupe_queue_ack_wait(troupe_queues *q, const char *queue, const void *skey,
                      size_t skey_len, troupe_sync sync);
troupe_err
troupe_queue_reschedule_wait(troupe_queues *q, const char *queue,
                             const void *skey, size_t skey_len, int64_t time_ms,
                             troupe_sync sync);

/*
 * Asynchronous twins: the row is read and the outcome's batch built on
 * the runtime's worker pool and handed to the commit pipeline; then
 * cb(err, arg) fires once on scheduler 0 with the blocking form's
 * result. The storage key is copied. Call errors (cb never fires):
 * EINVAL (NULL cb, a key outside the pending space, negative time, bad
 * sync), EREADONLY, ENOQUEUE (no such queue), ESTATE, ECLOSED (runtime
 * shutting down), ENOMEM.
 */
troupe_err
troupe_queue_ack(troupe_queues *q, const char *queue, const void *skey,
                 size_t skey_len, troupe_sync sync, troupe_queue_cb cb,
                 void *arg);
troupe_err
troupe_queue_reschedule(troupe_queues *q, const char *queue, const void *skey,
                        size_t skey_len, int64_t time_ms, troupe_sync sync,
                        troupe_queue_cb cb, void *arg);

/* ---- inspection, owners, retention -------------------------------------- */

typedef struct troupe_queue_stats {
    uint32_t partitions;
    uint64_t pending;         /* total */
    uint64_t completed;       /* total */
    uint64_t parked;          /* total: pending rows parked (not in pending) */
    uint64_t malformed;       /* rows or attempts records that do not decode */
    int64_t oldest_due_ms;    /* -1 when nothing is pending (parked rows
                                 are not) */
    uint64_t *pending_by_p;   /* [partitions] */
    uint64_t *completed_by_p; /* [partitions] */
    uint64_t *parked_by_p;    /* [partitions] */
} troupe_queue_stats;

/*
 * Counts per state and partition and the oldest due time (one scan of
 * one consistent view). *out is one allocation the caller frees with
 * troupe_free. Errors: EINVAL, ENOQUEUE, ESTATE, EIO, ENOMEM, EDEADLK.
 * Blocks.
 */
troupe_err
troupe_queue_stats_wait(troupe_queues *q, const char *queue,
                        troupe_queue_stats **out);

/* What a queue's workers' handler calls came to since the queue was
 * opened on this process (memory only; every worker of the queue). */
typedef struct troupe_queue_counters {
    uint64_t delivered;     /* handler calls (attempts.count) */
    uint64_t acked;         /* calls whose ack committed */
    uint64_t rescheduled;   /* calls whose reschedule committed */
    uint64_t errors;        /* the handler returned an error or an invalid
                               outcome: delivered again */
    uint64_t timeouts;      /* the handler outlived the worker's timeout */
    uint64_t commit_failed; /* the outcome's commit failed */
    /* The attempt number of each call (troupe_queue_delivery.attempt):
     * buckets 1, 2, 4, ... 128 and the rest; sum / count is the mean. */
    troupe_hist_snapshot attempts;
} troupe_queue_counters;

/*
 * Reads those counters: relaxed atomics, no scan (each read atomically,
 * not all at one instant). Errors: EINVAL (NULL), ENOQUEUE (no such
 * queue), ESTATE. Never blocks on the disk; any thread.
 */
troupe_err
troupe_queue_counters_get(troupe_queues *q, const char *queue,
                          troupe_queue_counters *out);

typedef struct troupe_queue_page {
    size_t n;
    const troupe_queue_item *items;
    /* The cursor for the next page (troupe/cursor.h: it names the queue
     * and the last item's skey); NULL when n == 0. */
    const uint8_t *cursor;
    size_t cursor_len;
    bool more; /* another row follows in the range */
} troupe_queue_page;

/* NULL is a no-op. */
void
troupe_queue_page_destroy(troupe_queue_page *p);

typedef enum troupe_queue_state {
    TROUPE_QUEUE_PENDING = 1,   /* in due order: partition, time, order
                                   (parked ones too, marked parked) */
    TROUPE_QUEUE_COMPLETED = 2, /* by processed time */
    TROUPE_QUEUE_PARKED = 3     /* parked pending rows, in due order */
} troupe_queue_state;

/*
 * One page of pending, completed or parked invocations, after `cursor` (NULL:
 * from the start; else the previous page's cursor). Errors: EINVAL (NULL,
 * bad state, limit 0 or over TROUPE_QUEUE_PAGE_MAX, empty cursor),
 * ERANGE (a cursor of another queue, or not a cursor at all, or one
 * outside the state's key space), ECORRUPT (a malformed
 * row in the page), ENOQUEUE, ESTATE, EIO, ENOMEM, EDEADLK. Blocks.
 */
troupe_err
troupe_queue_list_wait(troupe_queues *q, const char *queue,
                       troupe_queue_state state, const void *cursor,
                       size_t cursor_len, size_t limit,
                       troupe_queue_page **out);

/*
 * A parked invocation, by its storage key (from a TROUPE_QUEUE_PARKED
 * page or a lookup). retry: back to pending, due at once (its time is
 * past: it was delivered), its attempts reset to 0 (it gets max_attempts
 * more deliveries, numbered from 1 again) and its last error dropped.
 * delete: the row, its owner and id entries and its attempts record go
 * in one batch (no completed row is written). Errors: EINVAL (NULL, a
 * key outside the pending space or naming a partition the queue does not
 * have, bad sync), ENOENT (no such invocation), ESTATE (it is not parked,
 * or the set is stopping), EBUSY (being changed right now), ECORRUPT (its
 * row or record does not decode: left untouched), EREADONLY, ENOQUEUE,
 * EDEADLK, EUNKNOWN, EFAILSTOP, ENOSPC, EIO, ENOMEM. Blocks.
 */
troupe_err
troupe_queue_parked_retry_wait(troupe_queues *q, const char *queue,
                               const void *skey, size_t skey_len,
                               troupe_sync sync);
troupe_err
troupe_queue_parked_delete_wait(troupe_queues *q, const char *queue,
                                const void *skey, size_t skey_len,
                                troupe_sync sync);

/*
 * Every stored invocation (pending and completed) of event id `id`,
 * through the id entries. n == 0 when none. Errors: EINVAL, ENOQUEUE (no
 * such queue), ECORRUPT (a malformed id entry, or one naming a missing or
 * malformed row or another id's row),
 * ESTATE, EIO, ENOMEM. Blocks.
 */
troupe_err
troupe_queue_lookup_wait(troupe_queues *q, const char *queue, const void *id,
                         size_t id_len, troupe_queue_page **out);

/*
 * Deletes the pending and completed invocations of one owner with their
 * owner and id entries, touching nothing else. `spare` (may be NULL)
 * sees each invocation and returns true to keep it; an invocation being
 * delivered right now is kept too. *deleted (may be NULL) receives the
 * count. Errors: EINVAL (bad owner parts), ENOQUEUE, ECORRUPT (a malformed
 * owner entry, or one naming a malformed row, another owner's row or the
 * wrong state: nothing of that batch written), EREADONLY, ESTATE,
 * EUNKNOWN, EFAILSTOP, ENOSPC, EIO, ENOMEM. Blocks.
 */
typedef bool (*troupe_queue_spare_fn)(const troupe_queue_item *it, void *arg);
troupe_err
troupe_queue_delete_by_owner_wait(troupe_queues *q, const char *queue,
                                  const void *kind, size_t kind_len,
                                  const void *id, size_t id_len,
                                  troupe_queue_spare_fn spare, void *arg,
                                  troupe_sync sync, size_t *deleted);

/*
 * Retention: removes completed rows whose processed time is older than
 * now - retention, with their owner and id entries, at most `max` rows
 * across all queues in one batch (malformed expired rows too; pending
 * rows are never touched). *purged (may be NULL) is how many rows went;
 * *full (may be NULL) is true when that is `max`: call again at once;
 * false: caught up. Errors: EINVAL (NULL, max 0), EREADONLY, ESTATE,
 * EUNKNOWN, EFAILSTOP, ENOSPC, EIO, ENOMEM. Blocks.
 */
troupe_err
troupe_queues_purge_completed(troupe_queues *q, int64_t now_ms, size_t max,
                              size_t *purged, bool *full);

#endif
