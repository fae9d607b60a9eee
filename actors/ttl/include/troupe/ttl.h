/*
 * The TTL scanner: an actor that, every interval, runs over each table of
 * a troupe_tables in turn, one table at a time, one key-version eviction
 * pass (troupe_tables_evict_versions) and then one expired-row purge pass
 * (troupe_tables_purge_expired). The TTL itself and the
 * rules (1 ms quantum, 0 disables, never early, refreshed only by a
 * publish, running transactions protect what they need, batches of at
 * most 256) are the tables' (troupe/table.h, docs/data-model.md).
 *
 * Owners: troupe_ttl_start creates the object, owned by the caller;
 * troupe_ttl_stop_wait stops the actor, then troupe_ttl_destroy frees it.
 * It borrows the runtime and the tables: stop it before stopping the
 * tables. Threads: every call may come from any thread; stop_wait blocks
 * (never call it on a loop thread of the runtime).
 */
#ifndef TROUPE_TTL_H
#define TROUPE_TTL_H

#include <stdint.h>

#include "troupe/runtime.h"
#include "troupe/table.h"

typedef struct troupe_ttl troupe_ttl;

typedef struct troupe_ttl_opts {
    troupe_runtime *rt;    /* borrowed */
    troupe_tables *tables; /* borrowed */
    uint32_t interval_ms;  /* between passes; 0: 1000 */
} troupe_ttl_opts;

/* Spawns the scanner; its first pass runs after one interval. Errors:
 * EINVAL (NULL, missing option), ENOMEM, the errors of
 * troupe_actor_spawn. */
troupe_err
troupe_ttl_start(const troupe_ttl_opts *o, troupe_ttl **out);

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

/* Stops the actor and waits until it is gone; a pass in flight is
 * abandoned (the table finishes its batch and its reply is dropped).
 * Errors: EINVAL, ESTATE (already stopped). Blocks. */
troupe_err
troupe_ttl_stop_wait(troupe_ttl *s);

/* Frees a stopped (or failed-to-start) scanner. NULL is a no-op; calling
 * it before stop_wait aborts. */
void
troupe_ttl_destroy(troupe_ttl *s);

#endif
