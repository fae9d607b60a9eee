/*
 * The TTL scanner: an actor that, every interval, runs over each table of
 * a troupe_tables in turn, one table at a time, one key-version eviction
 * pass (troupe_tables_evict_versions) and then one expired-row purge pass
 * (troupe_tables_purge_expired). The TTL itself and the
 * rules (1 ms quantum, 0 disables, never early, refreshed only by a
 * publish, running transactions protect what they need, batches of at
 * most 256) are the tables' (troupe/table.h, docs/data-model.md).
 *
 * With `queues` set it also trims the queues' completed history
 * (troupe_queues_purge_completed: rows older than their queue's
 * retention; pending rows are never touched), in batches of at most
 * `queue_batch` rows on the runtime's worker pool: a full batch is
 * followed at once by the next (the actor yields between them), a short
 * one ends the queue pass until the next tick. The queue pass runs beside
 * the table pass, never two at once.
 *
 * With `coord` set it also purges the coordinator's ended transactions
 * past their retention, with their barrier rows (troupe_coord_purge,
 * troupe/coordinator.h), in batches of at most `coord_batch`: a batch
 * that purged something and found more due is followed at once by the
 * next (the actor yields between them); a batch that found no more, or
 * purged nothing, or failed ends the coordinator pass until the next
 * tick. It runs beside the other passes, never two of its own at once.
 *
 * Owners: troupe_ttl_create makes the object, owned by the caller;
 * troupe_ttl_stop (or its blocking twin troupe_ttl_stop_wait) stops it,
 * then troupe_ttl_destroy frees it. It borrows the runtime, the tables,
 * the queues and the coordinator: stop it (and wait for its callback)
 * before stopping them. Threads: every call may come from any thread;
 * only stop_wait blocks (it refuses on troupe's own threads, see below).
 */
#ifndef TROUPE_TTL_H
#define TROUPE_TTL_H

#include <stdint.h>

#include "troupe/coordinator.h"
#include "troupe/queue.h"
#include "troupe/runtime.h"
#include "troupe/table.h"

typedef struct troupe_ttl troupe_ttl;

typedef struct troupe_ttl_opts {
    troupe_runtime *rt;    /* borrowed */
    troupe_tables *tables; /* borrowed; may be NULL when queues is set */
    uint32_t interval_ms;  /* between passes; 0: 1000 */
    troupe_queues *queues; /* borrowed; NULL: no queue retention */
    uint32_t queue_batch;  /* rows per purge batch; 0: 256 */
    /* borrowed; NULL: no coordinator retention (what is due is decided
     * by the coordinator's own clock and retention_ms) */
    troupe_coord *coord;
    /* transactions per coordinator batch; 0: 256; at most
     * TROUPE_GTX_PURGE_MAX */
    uint32_t coord_batch;
    /* "Now" for queue retention, Unix ms; NULL: troupe_now_ms. Called on
     * the worker pool: thread-safe, non-blocking. (The tables use their
     * own clock.) */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
} troupe_ttl_opts;

/* Makes the scanner and spawns its actor; its first pass runs after one
 * interval. *out is the caller's (NULL on error). Errors: EINVAL (NULL, no
 * rt, none of tables, queues and coord, coord_batch over
 * TROUPE_GTX_PURGE_MAX), ENOMEM, the errors of
 * troupe_actor_spawn. Never blocks. */
troupe_err
troupe_ttl_create(const troupe_ttl_opts *o, troupe_ttl **out);

/* Asks for a pass now (ignored while one runs). Errors: EINVAL, ESTATE
 * (stopped), the errors of troupe_runtime_send. Never blocks. */
troupe_err
troupe_ttl_kick(troupe_ttl *s);

/* Passes completed (every table visited), key-version records they
 * evicted and expired rows they deleted. NULL: 0. Never blocks. */
uint64_t
troupe_ttl_passes(const troupe_ttl *s);
uint64_t
troupe_ttl_evicted(const troupe_ttl *s);
uint64_t
troupe_ttl_purged(const troupe_ttl *s);

/* Queue retention: completed rows purged, purge batches run (full or
 * short, failed ones included) and queue passes ended (by a short or a
 * failed batch). NULL: 0. Never blocks. */
uint64_t
troupe_ttl_queue_purged(const troupe_ttl *s);
uint64_t
troupe_ttl_queue_batches(const troupe_ttl *s);
uint64_t
troupe_ttl_queue_passes(const troupe_ttl *s);

/* Coordinator retention: transactions purged (each with its barrier
 * rows), purge batches run (failed ones included) and coordinator passes
 * ended. NULL: 0. Never blocks. */
uint64_t
troupe_ttl_gtx_purged(const troupe_ttl *s);
uint64_t
troupe_ttl_gtx_batches(const troupe_ttl *s);
uint64_t
troupe_ttl_gtx_passes(const troupe_ttl *s);

/* The scanner actor's address (for monitors and tests; every kind it
 * handles is its own, so nothing from another node reaches it). NONE for
 * NULL. Never blocks. */
troupe_addr
troupe_ttl_addr(const troupe_ttl *s);

typedef void (*troupe_ttl_stop_cb)(troupe_ttl *s, void *arg);

/* Stops the scanner: no pass or purge batch starts from now on (kick is
 * ESTATE), the actor stops, a pass in flight is abandoned (the table
 * finishes its batch and its reply is dropped) and a queue or coordinator
 * purge batch already running finishes; then cb(s, arg) fires once, on
 * scheduler 0 (never inside this call; once scheduler 0 has closed at
 * shutdown, on the thread that ended the last of it, this one included).
 * From cb on the scanner no longer touches the tables, the queues or the
 * coordinator, and cb may destroy it. Errors (cb never fires): EINVAL
 * (NULL s or cb), ESTATE (already stopping or stopped). Never blocks. */
troupe_err
troupe_ttl_stop(troupe_ttl *s, troupe_ttl_stop_cb cb, void *arg);

/* troupe_ttl_stop and a wait for its callback; its errors, and EDEADLK
 * (on a troupe scheduler's thread or inside a troupe callback, where the
 * wait could wait for itself: nothing is stopped). Blocks (for scheduler
 * 0: in embedded mode, not on the host's loop thread, and only while
 * that loop runs). */
troupe_err
troupe_ttl_stop_wait(troupe_ttl *s);

/* Frees a stopped scanner (its stop callback has fired). NULL is a no-op;
 * a scanner not stopped is a programming error: abort(). */
void
troupe_ttl_destroy(troupe_ttl *s);

#endif
