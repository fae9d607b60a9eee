/*
 * The coordinator of global transactions (docs/coordinator.md): a
 * `troupe_coord` drives the transactions of one database, stored in the
 * table `troupe.gtx`, from one actor per shard. Every transition commits
 * (synced) before the call it starts is dispatched; a branch is a task of
 * kind TROUPE_TASK_BRANCH to a dispatch target (troupe/dispatch.h: a C
 * callback or a host's pull target) whose outcome moves the transaction
 * on. At open every unfinished transaction is driven again from its last
 * committed state (a call whose outcome was not committed runs again: the
 * barrier, troupe/barrier.h, makes it once).
 *
 * Built so far: SAGA (sequential steps). TCC, two-phase messages, the
 * operator calls and actor targets follow (docs/plans/coordinator.md).
 *
 * Objects: troupe_coord_open_wait allocates the coordinator; it borrows
 * the runtime and the tables, which must outlive it (stop and destroy it
 * before stopping the tables). Threads: the _wait calls block (never on a
 * troupe loop thread: EDEADLK); destroy after a stop from any thread.
 */
#ifndef TROUPE_COORDINATOR_H
#define TROUPE_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/coord.h"
#include "troupe/runtime.h"
#include "troupe/table.h"

typedef struct troupe_coord troupe_coord;

/* Unix milliseconds: the coordinator's clock (due times, timeouts). */
typedef int64_t (*troupe_clock_fn)(void *arg);

typedef struct troupe_coord_opts {
    troupe_runtime *rt;    /* borrowed */
    troupe_tables *tables; /* borrowed; troupe.gtx is created at open */
    uint32_t shards;       /* 0: TROUPE_COORD_SHARDS_DEFAULT */
    uint32_t retry_min_ms; /* first backoff; 0: 10 s */
    uint32_t retry_max_ms; /* backoff cap; 0: 300 s */
    troupe_clock_fn clock; /* NULL: troupe_now_ms */
    void *clock_arg;
} troupe_coord_opts;

/*
 * Opens the coordinator: creates troupe.gtx if missing, spawns the
 * shards, reads every stored transaction and drives the unfinished ones.
 * Errors: EINVAL (NULL, shards over TROUPE_COORD_SHARDS_MAX, retry_min
 * over retry_max), ECORRUPT (a stored transaction breaks its format;
 * troupe_errmsg names its gid), ENOTSUP (one of a later format), the
 * table's errors, ENOMEM, EDEADLK. Blocks.
 */
troupe_err
troupe_coord_open_wait(const troupe_coord_opts *o, troupe_coord **out);

/* Stops the shards: nothing new is committed or dispatched; a branch in
 * flight settles on its own (its outcome is then heard at the next
 * open's redelivery). Errors: EINVAL, ESTATE (stopped already), EDEADLK.
 * Blocks. */
troupe_err
troupe_coord_stop_wait(troupe_coord *c);

/* Frees a stopped coordinator (aborts if it is not stopped). NULL: no-op. */
void
troupe_coord_destroy(troupe_coord *c);

/* One call of a branch: a dispatch target's name and the payload it gets
 * (copied at submit). */
typedef struct troupe_gtx_call {
    const char *target;
    const void *payload;
    size_t payload_len;
} troupe_gtx_call;

typedef struct troupe_saga_step {
    troupe_gtx_call action;
    troupe_gtx_call compensate; /* target NULL: nothing to undo */
} troupe_saga_step;

typedef struct troupe_saga_opts {
    int64_t timeout_to_fail_ms; /* 0: none */
    uint32_t retry_limit;       /* 0: retry an action for ever */
} troupe_saga_opts;

/*
 * Submits saga gid with steps[0..n) and drives it. OK once it is
 * committed (synced), or when gid exists already, whatever its status and
 * mode: nothing is driven twice. Errors: EINVAL (a gid, step count (at
 * most 64), target name, payload (at most 64 KiB) or option that breaks
 * its rule), ENOENT (a target no dispatch target of the runtime has:
 * troupe_errmsg names it), ECLOSED (stopped), the commit's errors,
 * ENOMEM, EDEADLK. o may be NULL. Blocks.
 */
troupe_err
troupe_saga_submit_wait(troupe_coord *c, const char *gid, size_t gid_len,
                        const troupe_saga_step *steps, size_t n,
                        const troupe_saga_opts *o);

typedef enum troupe_gtx_status {
    TROUPE_GTX_PREPARED = 1,
    TROUPE_GTX_SUBMITTED = 2,
    TROUPE_GTX_ABORTING = 3,
    TROUPE_GTX_SUCCEED = 4,
    TROUPE_GTX_FAILED = 5
} troupe_gtx_status;

typedef struct troupe_gtx_info {
    troupe_gtx_mode mode;
    troupe_gtx_status status;
    char reason[1025]; /* "" when none */
    uint32_t steps;
    uint32_t attempts; /* retries so far */
    int64_t created_ms, updated_ms, finished_ms;
} troupe_gtx_info;

/* The last committed state of gid. Errors: EINVAL, ENOENT (no such gid),
 * ECORRUPT, EIO, EDEADLK. Blocks. */
troupe_err
troupe_gtx_query_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_gtx_info *out);

#endif
