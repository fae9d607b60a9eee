/*
 * The flat C ABI: one header that a binding (Node through koffi, Python
 * through ctypes, any FFI) declares, over a whole node in one process:
 * its database, runtime, tables, transactions, queues and a pull host.
 *
 * Rules of the boundary (bindings/c/README.md says more):
 *  - Only opaque handles (troupe_abi *), integers, C strings and byte
 *    buffers with their lengths cross it; no struct.
 *  - Every call returns an int: a troupe_err value (troupe/err.h: 0 is
 *    OK). Every call first clears, and on error sets, the calling
 *    thread's message, troupe_abi_errmsg(), which names what was wrong.
 *  - Documents, index values and results are msgpack bytes; table keys
 *    are raw bytes (1..TROUPE_KEY_MAX; a binding may encode them).
 *  - Nothing calls the host on a thread of troupe's: work for the host
 *    (queue events, coordinator branches and messages to actors it
 *    implements) and the results of its requests come as packed records
 *    that the host pulls (troupe_abi_next_task / _next_batch) from the
 *    thread it chooses. The wake fd, or the optional wake callback
 *    (called on a notifier thread only), says when to pull.
 *
 * Requests and completions. Every asynchronous call (table get, put, delete,
 * scan, create; index query; transaction get, barrier and commit; queue
 * publish; the coordinator's requests) takes a request id the host chooses (any
 * u64; the ABI does not look at it) and returns at once. When it returns OK
 * exactly one completion record with that id follows (never when it returns an
 * error): kind TROUPE_TASK_COMPLETION, header TROUPE_ABI_COMPLETION_HEADER
 * bytes (i32 status, a troupe_err; u32 0), body the result in msgpack (formats
 * in bindings/c/README.md, "Completion bodies"). A completion needs no reply.
 * Requests in flight plus completions not yet pulled are bounded
 * (troupe_abi_set_limits): past the bound a request is refused with EBUSY,
 * starting nothing; pull, then retry.
 *
 * Lifecycle: troupe_abi_open, then pull targets and wake setup, then
 * troupe_abi_start (loads the tables and queues, opens the coordinator),
 * then requests; then troupe_abi_close, which settles everything and frees
 * the node. Every call but close may come from any thread at any time
 * between open and close; a transaction is used by one thread at a time.
 */
#ifndef TROUPE_ABI_H
#define TROUPE_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/dispatch.h"
#include "troupe/err.h"

/* A node: opaque. */
typedef struct troupe_abi troupe_abi;

/* The version of this ABI: 1. A binding checks it before declaring the
 * rest (troupe_abi_version). */
#define TROUPE_ABI_VERSION 1
/* A completion's header: i32 status (troupe_err), u32 reserved (0). */
#define TROUPE_ABI_COMPLETION_HEADER 8u
/* Defaults of troupe_abi_set_limits. */
#define TROUPE_ABI_REQUESTS_DEFAULT 4096u
#define TROUPE_ABI_BYTES_DEFAULT (64u << 20)
/* Most transactions open at once on one node. */
#define TROUPE_ABI_TXNS_MAX 4096u
/* Most queue subscriptions on one node. */
#define TROUPE_ABI_WORKERS_MAX 1024u
/* Most actors one node serves for its host. */
#define TROUPE_ABI_ACTORS_MAX 1024u

/* TROUPE_ABI_VERSION of the library loaded. Never fails. */
int
troupe_abi_version(void);

/*
 * The message of the last call on this thread that failed (a static
 * text of its code when the call gave no detail), "" after a call that
 * succeeded. Valid until the thread's next troupe_abi_ call. Never NULL.
 */
const char *
troupe_abi_errmsg(void);

/* ---- lifecycle ---------------------------------------------------------- */

/*
 * Opens the node of data directory dir (created when missing): the
 * database, its commit pipeline, the runtime (schedulers threads, 0: one
 * per core, at most 256; workers storage threads, 0: 4, at most 256) and
 * the pull host. sync is the durability of every write the node makes
 * (table writes, commits, publishes, queue acks): 0 the database's
 * default, 1 synced before the completion, 2 not synced (survives a
 * crash of the process, not of the machine). On OK *out is the node.
 * Errors: EINVAL (NULL, empty dir, a count or sync out of range), the
 * errors of the database open (EIO, ECORRUPT, EBUSY: another process has
 * it open), ENOMEM, ESYS. Blocks (disk).
 */
int
troupe_abi_open(const char *dir, uint32_t schedulers, uint32_t workers,
                int32_t sync, troupe_abi **out);

/*
 * Opens the node's catalog, tables and queues (loading what the
 * database holds and spawning their actors), then the barrier's table and
 * the coordinator (troupe_abi_coord_options), which drives again every
 * global transaction left unfinished. Requests before it are ESTATE.
 * Errors: EINVAL (NULL), ESTATE (started already, or closing), ECORRUPT
 * (also a stored transaction that breaks its format), ENOTSUP, EIO,
 * ENOMEM, ESYS. Blocks (disk); EDEADLK on a troupe thread.
 */
int
troupe_abi_start(troupe_abi *n);

/*
 * Closes the node in *np and sets *np to NULL: requests are refused
 * (ECLOSED) from the first moment; the pull host closes (pulls return
 * ECLOSED; tasks ready or held settle UNKNOWN: a queue event stays
 * pending, delivered again at the next open); the requests in flight
 * finish (each bounded by its request timeout, in practice as long as a
 * commit) and their completions, like those not pulled yet, are
 * dropped: a binding fails every request id it still waits for with
 * ECLOSED. Then every subscription, transaction, table, queue and thread
 * is stopped and joined, the database closed. Safe from an atexit
 * handler. Errors: EINVAL (NULL np), ESTATE (*np NULL: closed already;
 * nothing happens), EDEADLK (on a troupe thread or inside the wake
 * callback: nothing happens). Any error the database's close returns
 * comes back after everything else was freed (*np is NULL then too).
 * Blocks.
 */
int
troupe_abi_close(troupe_abi **np);

/*
 * Bounds the requests of the node: a request is refused with EBUSY while
 * `requests` of them are in flight or have completions not yet pulled,
 * or while the completions not yet pulled hold `bytes` bytes or more (so
 * what waits for the host is at most `bytes` plus one result per
 * request). 0 keeps a limit as it is. Errors: EINVAL. Never blocks.
 */
int
troupe_abi_set_limits(troupe_abi *n, uint32_t requests, uint64_t bytes);

/* ---- pull -----------------------------------------------------------------
 */

/*
 * *fd gets the wake fd (an eventfd; owned by the node: never close it):
 * readable when the host's ready queue (tasks and completions) goes from
 * empty to non-empty; edge-triggered, re-armed by a pull that finds
 * nothing. Drain with troupe_abi_next_batch(0, ...) until it returns no
 * record, then wait for the fd. Errors: EINVAL.
 */
int
troupe_abi_wake_fd(troupe_abi *n, int *fd);

/*
 * Sets (fn NULL: clears) a wake callback, called on the host's notifier
 * thread only (never a troupe thread, never holding a troupe lock) when
 * the fd would be written; it may pull. Clearing returns once no call of
 * the old fn runs and none will start. Errors: EINVAL, ESTATE (closing),
 * ESYS, EDEADLK (clearing from inside fn).
 */
int
troupe_abi_set_wake(troupe_abi *n, void (*fn)(void *arg), void *arg);

/*
 * Registers a pull target named `name` (1..TROUPE_TARGET_NAME_MAX bytes)
 * on the node's host: at most credit tasks held at once (0: 64, at most
 * 65536), each answered within timeout_ms (0: 30000) or settled UNKNOWN.
 * *index gets the target index that its task records carry. Queue
 * subscriptions name it (troupe_abi_queue_subscribe). Errors: EINVAL,
 * EEXIST (the name is taken), ECLOSED (closing), ENOMEM. Never blocks.
 */
int
troupe_abi_register_pull(troupe_abi *n, const char *name, uint32_t credit,
                         uint32_t timeout_ms, uint32_t *index);

/*
 * The next record into buf (troupe/dispatch.h, TROUPE_HOST_RECORD_*:
 * u64 id, u32 target index, u16 kind, u16 header_len, u32 attempt,
 * u32 body_len, i64 deadline_ms, header, body, padding to 8), *len its
 * size, 0 when none was ready. Completions come before tasks. A task
 * (kind TROUPE_TASK_QUEUE, ...) has a target index > 0 and must be
 * answered with troupe_abi_reply; a completion (TROUPE_TASK_COMPLETION)
 * has index 0 and is not answered. timeout_ms: 0 never blocks (an
 * event-loop host passes 0); > 0 waits up to that long for a record
 * (EDEADLK on a troupe thread); < 0 is EINVAL. A record that cannot fit
 * cap is ETOOBIG with *len the size needed: a task settles UNKNOWN (its
 * producer offers it again), a completion stays first in line. Errors:
 * EINVAL, ETOOBIG, ECLOSED, EDEADLK.
 */
int
troupe_abi_next_task(troupe_abi *n, int timeout_ms, void *buf, size_t cap,
                     size_t *len);

/* Up to max records back to back (each 8-aligned) into buf; *count
 * records, *len bytes. Waits as troupe_abi_next_task for the first only;
 * ETOOBIG only when the first record cannot fit (as there). */
int
troupe_abi_next_batch(troupe_abi *n, int timeout_ms, void *buf, size_t cap,
                      size_t max, size_t *count, size_t *len);

/*
 * Answers task task_id with outcome (TROUPE_OUTCOME_SUCCESS 1, FAILURE
 * 2, ONGOING 3, UNKNOWN 4) and a body (may be empty; a queue event takes
 * SUCCESS as its ack, or a msgpack {"reschedule": time_ms} body with
 * SUCCESS to reschedule it; docs/queue.md "Pull workers"). Errors:
 * EINVAL (NULL, or an undefined outcome: the task settles UNKNOWN),
 * ETOOBIG (body over TROUPE_TASK_BODY_MAX: UNKNOWN), ETIMEDOUT (its
 * deadline settled it already), ENOENT (no such task held). Never blocks.
 */
int
troupe_abi_reply(troupe_abi *n, uint64_t task_id, uint32_t outcome,
                 const void *body, size_t len);

/* Answers the replies packed in buf (each 8-aligned: u64 id, u32
 * outcome, u32 body_len, body, padding to 8) as troupe_abi_reply each;
 * *done answered, *refused refused. Errors: EINVAL, EPROTO (a record cut
 * short: those before it were answered). Never blocks. */
int
troupe_abi_reply_batch(troupe_abi *n, const void *buf, size_t len, size_t *done,
                       size_t *refused);

/* ---- tables ---------------------------------------------------------------
 */

/*
 * Request: creates table `name` with the indexes in `indexes` (a msgpack
 * array, NULL/0 for none, of maps {"name": str, "fields": [[path str,
 * type str], ...], "unique": bool}; type one of "string", "int",
 * "float", "bool", "timestamp", "bytes", "string_casefold"); idempotent
 * as troupe_tables_create. Completion: status and an empty body.
 * Call errors (no completion): EINVAL (NULL, bad name, bad index spec),
 * EPROTO (indexes not such an array), EBUSY (limits), ESTATE (not
 * started), ECLOSED, ENOMEM.
 */
int
troupe_abi_table_create(troupe_abi *n, uint64_t req, const char *name,
                        const void *indexes, size_t len);

/* Request: the document at key. Completion: OK with the document (one
 * msgpack map) as body, or ENOENT with an empty body, or an error of
 * troupe_table_get. Call errors as troupe_table_get's, and EBUSY,
 * ESTATE, ECLOSED. */
int
troupe_abi_table_get(troupe_abi *n, uint64_t req, const char *table,
                     const void *key, size_t klen);

/* Request: stores doc (one msgpack map) at key (an upsert, with the
 * node's sync). Completion: status (troupe_table_upsert's), empty body.
 * Call errors as troupe_table_upsert's, and EBUSY, ESTATE, ECLOSED. */
int
troupe_abi_table_put(troupe_abi *n, uint64_t req, const char *table,
                     const void *key, size_t klen, const void *doc,
                     size_t dlen);

/* Request: deletes the row at key. Completion: OK, ENOENT (no live
 * row), or a write error; empty body. */
int
troupe_abi_table_delete(troupe_abi *n, uint64_t req, const char *table,
                        const void *key, size_t klen);

/*
 * Request: a page of up to limit rows of [start, end) (NULL: open),
 * after the cursor `after` (NULL: from the start), reverse when reverse
 * is 1 (0 forward, anything else EINVAL). Completion: OK with a body
 * {"rows": [[key bin, doc], ...], "cursor": bin or nil, "more": bool},
 * or an error of troupe_table_scan.
 */
int
troupe_abi_table_scan(troupe_abi *n, uint64_t req, const char *table,
                      const void *start, size_t slen, const void *end,
                      size_t elen, const void *after, size_t alen,
                      uint32_t limit, int32_t reverse);

/*
 * Request: a query on index `index` of `table` (troupe/index.h:
 * values, or from/to, msgpack arrays of leading values; NULL/0 for
 * none), up to limit hits after the cursor `after`, reverse (0/1), with
 * the rows' documents when rows is 1 (0: the entries' values).
 * Completion: OK with {"hits": [[key bin, pk bin, value], ...], "cursor":
 * bin or nil, "more": bool}, or an error of troupe_tables_query.
 */
int
troupe_abi_index_query(troupe_abi *n, uint64_t req, const char *table,
                       const char *index, const void *values, size_t vlen,
                       const void *from, size_t flen, const void *to,
                       size_t tlen, const void *after, size_t alen,
                       uint32_t limit, int32_t reverse, int32_t rows);

/* ---- transactions ---------------------------------------------------------
 */

/*
 * Begins a transaction (troupe/txn.h: a snapshot, buffered writes,
 * serializable commit); *txn gets its id (never 0). It lives until its
 * commit's completion, its rollback, or close. Errors: EINVAL, EFULL
 * (TROUPE_ABI_TXNS_MAX open), ESTATE (not started), ECLOSED, ENOMEM.
 * Never blocks.
 */
int
troupe_abi_txn_begin(troupe_abi *n, uint64_t *txn);

/* Request: a read through transaction txn (its own writes, else the
 * snapshot); completion as troupe_abi_table_get's. Call errors: those of
 * troupe_txn_get, ENOENT (no open transaction txn), ESTATE (committing),
 * EBUSY, ECLOSED. */
int
troupe_abi_txn_get(troupe_abi *n, uint64_t req, uint64_t txn, const char *table,
                   const void *key, size_t klen);

/* Buffers an upsert of doc at key in txn (no completion: it is part of
 * the commit). Errors: those of troupe_txn_upsert, ENOENT (no open
 * transaction txn), ECLOSED. Never blocks. */
int
troupe_abi_txn_put(troupe_abi *n, uint64_t txn, const char *table,
                   const void *key, size_t klen, const void *doc, size_t dlen);

/* Buffers a delete of key in txn. Errors: those of troupe_txn_delete,
 * ENOENT, ECLOSED. Never blocks. */
int
troupe_abi_txn_delete(troupe_abi *n, uint64_t txn, const char *table,
                      const void *key, size_t klen);

/*
 * Request: commits txn with the node's sync; the transaction ends (its
 * id is no longer valid once the call returned OK). Completion: OK with
 * an empty body; ECONFLICT with a body [[table str, key bin, kinds int],
 * ...] (troupe_txn_conflict); or another error of troupe_txn_commit,
 * empty body. Call errors: EINVAL, ENOENT (no open transaction txn),
 * ESTATE (committing), EBUSY (limits: the transaction stays open),
 * ECLOSED.
 */
int
troupe_abi_txn_commit(troupe_abi *n, uint64_t req, uint64_t txn);

/* Ends txn without writing. Errors: EINVAL, ENOENT (no open
 * transaction txn), ESTATE (committing), ECLOSED. Never blocks. */
int
troupe_abi_txn_rollback(troupe_abi *n, uint64_t txn);

/* ---- queues ---------------------------------------------------------------
 */

/* Creates queue `name` with `partitions` partitions (1..65536; completed
 * events kept retention_ms, >= 0; an event delivered max_attempts times
 * without an outcome is parked, 0: no limit, at most
 * TROUPE_QUEUE_ATTEMPTS_MAX; troupe_queue_spec). Errors: those of
 * troupe_queues_create_wait (EEXIST, EINVAL ...), ESTATE (not started),
 * ECLOSED. Blocks (one synced catalog write); EDEADLK on a troupe
 * thread. */
int
troupe_abi_queue_create(troupe_abi *n, const char *name, uint32_t partitions,
                        int64_t retention_ms, uint32_t max_attempts);

/*
 * Request: publishes an event (id and business key 1..TROUPE_QUEUE_ID_MAX
 * bytes, payload exactly one msgpack object, due at time_ms, Unix ms >=
 * 0) with the node's sync. Completion: status of troupe_queue_publish,
 * empty body. Call errors: those of troupe_queue_publish, EBUSY, ESTATE,
 * ECLOSED.
 */
int
troupe_abi_queue_publish(troupe_abi *n, uint64_t req, const char *queue,
                         const void *id, size_t id_len, const void *key,
                         size_t key_len, const void *payload, size_t plen,
                         int64_t time_ms);

/*
 * Subscribes pull target `target` (troupe_abi_register_pull) to every
 * partition of queue `queue`: its events come as tasks of kind
 * TROUPE_TASK_QUEUE on that target (header layout: docs/queue.md "Pull
 * workers"), at most the target's credit at once; SUCCESS acks one,
 * other outcomes leave it pending (delivered again, attempt + 1). The
 * subscription lasts until close. Errors: those of
 * troupe_queue_worker_create (ENOQUEUE, ENOENT: no such target ...),
 * EFULL (TROUPE_ABI_WORKERS_MAX), ESTATE (not started), ECLOSED. Never
 * blocks.
 */
int
troupe_abi_queue_subscribe(troupe_abi *n, const char *queue,
                           const char *target);

/* ---- actors ----------------------------------------------------------------
 */

/*
 * Serves actor `name` (1..255 bytes, registered in the node's registry,
 * addressable by other actors and nodes) with pull target `target`
 * (troupe_abi_register_pull): every message to it becomes a task of kind
 * TROUPE_TASK_ACTOR on that target, whose header is troupe/hostactor.h's
 * 32 bytes (kind, flags with TROUPE_HOST_ACTOR_ASK for an ask, sender,
 * tag: copied from `tag`, deadline) and whose body is the message's. The
 * reply answers an ask: SUCCESS with the reply body, FAILURE as EFAILED
 * with it, anything else EUNKNOWN. It is served until close. Errors:
 * EINVAL, ENOENT (no target of that name), EEXIST (the name is taken),
 * EFULL (TROUPE_ABI_ACTORS_MAX), ECLOSED, ENOMEM. Never blocks; works
 * before start.
 */
int
troupe_abi_actor_serve(troupe_abi *n, const char *name, const char *target,
                       uint32_t tag);

/*
 * Request: asks the actor registered as `name` on this node with a
 * message of `kind` and body (bytes as given; msgpack by convention),
 * waiting timeout_ms for its reply (0: 30000). Completion: the reply's
 * status (OK; the replier's error, e.g. EFAILED or EUNKNOWN from a host
 * actor; ETIMEDOUT; ECLOSED) and its body. Call errors: EINVAL, ENOENT
 * (no actor of that name), EBUSY (limits), ECLOSED, ENOMEM. Works before
 * start.
 */
int
troupe_abi_actor_ask(troupe_abi *n, uint64_t req, const char *name,
                     uint32_t kind, const void *body, size_t len,
                     uint32_t timeout_ms);

/* ---- the coordinator --------------------------------------------------------
 */

/*
 * The node's coordinator of global transactions (troupe/coordinator.h,
 * docs/coordinator.md) opens at troupe_abi_start (with the barrier's
 * table, troupe/barrier.h) and closes at troupe_abi_close, after the
 * requests in flight and before the tables. A branch is a task of kind
 * TROUPE_TASK_BRANCH on the pull target its call names: header four
 * NUL-terminated strings back to back, mode ("saga", "tcc", "msg"), gid,
 * branch id ("01".., "00" for a message's query-back), op ("action",
 * "compensate", "confirm", "cancel", "msg"); body the call's payload;
 * the record's attempt the number of this dispatch (1 the first). The
 * host answers with troupe_abi_reply: SUCCESS, FAILURE (compensates
 * where the mode allows), ONGOING or UNKNOWN (retried after the
 * backoff); no answer within the target's timeout is UNKNOWN.
 *
 * Options for it, before start (0 keeps a default: 8 shards, backoff 10 s
 * doubling to 300 s; sync 0 the node's, 1 on, 2 off). Errors: EINVAL
 * (shards over TROUPE_COORD_SHARDS_MAX, retry_min over retry_max, sync),
 * ESTATE (started already). Never blocks.
 */
int
troupe_abi_coord_options(troupe_abi *n, uint32_t shards, uint32_t retry_min_ms,
                         uint32_t retry_max_ms, int32_t sync);

/*
 * Request: submits saga gid (1..128 bytes of [A-Za-z0-9_.:-]) with steps,
 * a msgpack array of 1..64 maps {"action": call, "compensate": call or
 * nil}, a call being [target str, payload bin (or str, or nil)], payload
 * at most 64 KiB; and opts (NULL/0: none), a msgpack map of any of
 * {"timeout_to_fail_ms": int >= 0, "retry_limit": u32, "concurrent":
 * bool, "after": [u64 mask per step] or nil} (troupe_saga_opts).
 * Completion: OK once the saga is committed, or when gid exists already;
 * an error of troupe_saga_submit_wait (ENOENT: a target no pull target
 * has; EINVAL) with a msgpack str body, its message. Call errors (nothing
 * submitted): EINVAL (NULL, a bad gid, a step, call, payload or option
 * that breaks its rule), EPROTO (not one msgpack object), EBUSY, ESTATE,
 * ECLOSED, ENOMEM.
 */
int
troupe_abi_saga_submit(troupe_abi *n, uint64_t req, const char *gid,
                       size_t gid_len, const void *steps, size_t slen,
                       const void *opts, size_t olen);

/* Request: TCC's prepare of gid. Completion: OK (also when gid exists),
 * or an error with the message as body. Call errors as a saga submit's. */
int
troupe_abi_tcc_prepare(troupe_abi *n, uint64_t req, const char *gid,
                       size_t gid_len);

/* Request: registers a branch of tcc gid; calls is a msgpack array
 * [confirm call, cancel call]. Completion: OK with the branch id as a
 * msgpack str ("01"...): only then may the host run its try (op "try" at
 * the barrier); ECONFLICT, ENOENT, EINVAL as troupe_tcc_register_wait,
 * with the message as body. Call errors as a saga submit's. */
int
troupe_abi_tcc_register(troupe_abi *n, uint64_t req, const char *gid,
                        size_t gid_len, const void *calls, size_t len);

/* Request: prepares message gid with steps (a msgpack array of 1..64
 * calls) and its query-back target (1..255 bytes, payload none), queried
 * after grace_ms (0: 10 s, >= 0) when not submitted. Completion and call
 * errors as a saga submit's. */
int
troupe_abi_msg_prepare(troupe_abi *n, uint64_t req, const char *gid,
                       size_t gid_len, const void *steps, size_t slen,
                       const char *query_target, int64_t grace_ms);

/*
 * Requests on a transaction: submit (the second phase of a tcc or a
 * message), abort (reason NULL or "" for none, else 1..256 bytes of
 * UTF-8 without control characters), retry now, force-stop, query.
 * Completions: the status of troupe_gtx_*_wait (ECONFLICT on a final
 * one, ENOENT for an unknown gid) with the message as a msgpack str body
 * on error; query's OK body is a map {"mode", "status" ("prepared",
 * "submitted", "aborting", "succeed", "failed"), "reason", "steps",
 * "attempts", "created_ms", "updated_ms", "finished_ms", "next_due_ms",
 * "hold" (a workflow held: "diverged" or "awaiting"; else nil),
 * "branches": [{"id", a workflow's record also "kind" ("step",
 * "awakeable", "version"), "name" and "version", "ops": [{"op",
 * "target", "state" ("todo",
 * "dispatched", "succeeded", "failed"), "attempts", "last" ("success",
 * "failure", "ongoing", "unknown" or nil)}]}]}. Call errors: EINVAL (a
 * bad gid or reason), EBUSY, ESTATE, ECLOSED, ENOMEM.
 */
int
troupe_abi_gtx_submit(troupe_abi *n, uint64_t req, const char *gid,
                      size_t gid_len);
int
troupe_abi_gtx_abort(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len, const char *reason);
int
troupe_abi_gtx_retry(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len);
int
troupe_abi_gtx_force_stop(troupe_abi *n, uint64_t req, const char *gid,
                          size_t gid_len);
int
troupe_abi_gtx_query(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len);

/*
 * Request: a page of up to limit (1..1000) stored transactions in gid
 * order after `after` (NULL or "": from the first), of status (NULL or
 * "": any; else "prepared", "submitted", "aborting", "succeed",
 * "failed") and mode (NULL or "": any; "saga", "tcc", "msg"), reading at
 * most 10 x limit. Completion: OK with {"items": [{"gid", "mode",
 * "status", "reason", "steps", "attempts", "created_ms", "updated_ms",
 * "finished_ms"}, ...], "cursor": str (the after of the next page) or
 * nil, "more": bool}; a page may hold fewer than limit, none even, with
 * more true. Call errors: EINVAL, EBUSY, ESTATE, ECLOSED, ENOMEM.
 */
int
troupe_abi_gtx_list(troupe_abi *n, uint64_t req, const char *status,
                    const char *mode, const char *after, uint32_t limit);

/*
 * Request: submits instance gid of workflow `name` (troupe/workflow.h,
 * docs/coordinator.md "Workflows") with input[0..len) (at most 64 KiB,
 * copied; NULL/0: empty). The workflow is a pull target of that name
 * (troupe_abi_register_pull) that the host serves: each run is a task of
 * kind 5 (TROUPE_TASK_WORKFLOW), header "workflow\0gid\0" "00\0run\0",
 * body the msgpack [input bin, records], a record [kind, name, state,
 * result bin, version]; the host replays its function over the records
 * and answers SUCCESS with the msgpack [end, reason str|nil, updates]
 * (end AWAIT: a fourth field, the awaited awakeable's position), an update
 * [pos, kind, name, state, result bin, compensate nil|[target str,
 * payload bin], version] (the C side of the protocol is
 * troupe_workflow_create's; any other outcome, or a reply that does not
 * fit the records, runs it again after the backoff). Completion: OK once
 * it is committed, or when gid exists already; an error of
 * troupe_workflow_submit_wait (ENOENT: no target of that name; EINVAL)
 * with the message as a msgpack str body. Call errors (nothing
 * submitted): EINVAL (NULL node, a bad gid, a name not of 1..255 bytes,
 * an input too long), EBUSY, ESTATE, ECLOSED, ENOMEM. Any thread; never
 * blocks.
 */
int
troupe_abi_workflow_submit(troupe_abi *n, uint64_t req, const char *gid,
                           size_t gid_len, const char *name, const void *input,
                           size_t len);

/*
 * Requests: resolve (or reject) awakeable id[0..id_len) ("gid/branch-id",
 * as the run that registered it gave it) with payload[0..len) (at most
 * 64 KiB, copied; NULL/0: empty): committed on the gid's shard, then the
 * workflow runs again and its await gives the payload (a rejection: a
 * failure with it). Completion: OK, also for the same verdict and payload
 * again; ENOENT (no such workflow or awakeable), ECONFLICT (resolved
 * otherwise, or the workflow ended), EINVAL (not an awakeable's id), with
 * the message as a msgpack str body. Call errors: EINVAL (NULL node, an
 * id empty, over 133 bytes (TROUPE_AWAKEABLE_ID_MAX) or holding a NUL, a
 * payload too long), EBUSY, ESTATE, ECLOSED, ENOMEM. Any thread; never
 * blocks.
 */
int
troupe_abi_awakeable_resolve(troupe_abi *n, uint64_t req, const char *id,
                             size_t id_len, const void *payload, size_t len);
int
troupe_abi_awakeable_reject(troupe_abi *n, uint64_t req, const char *id,
                            size_t id_len, const void *reason, size_t len);

/*
 * Request: the barrier (troupe/barrier.h) for (mode, gid, branch_id, op)
 * through transaction txn: its rows are read and buffered in txn, so the
 * business writes that follow and the barrier's row commit together
 * (troupe_abi_txn_commit) or not at all. Completion: OK with a msgpack
 * str body, the verdict: "execute" (run the business writes in txn),
 * "null_compensation" or "duplicated" (write nothing; commit, answer
 * SUCCESS); or an error of troupe_barrier_check. txn must not be used by
 * another call until the completion. Call errors: EINVAL (a field that
 * breaks its rule), ENOENT (no open transaction txn), ESTATE
 * (committing), EBUSY, ECLOSED.
 */
int
troupe_abi_txn_barrier(troupe_abi *n, uint64_t req, uint64_t txn,
                       const char *mode, const char *gid, size_t gid_len,
                       const char *branch_id, const char *op);

/*
 * XA over the node's tables (docs/coordinator.md, "XA over troupe's
 * tables"). xa_begin: request, stores xa gid prepared; completion OK
 * (also when gid exists) or an error with its text as a msgpack str
 * body. xa_branch: request, registers a branch of xa gid and prepares
 * open transaction txn under gid/branch-id, which ends txn (as a commit
 * does: use it no more); completion OK with the branch id as a msgpack
 * str ("01"...): its writes are held until the coordinator commits them
 * on troupe_abi_gtx_submit or rolls them back on troupe_abi_gtx_abort;
 * ECONFLICT with the conflicts as a commit's (the branch registered,
 * never prepared: abort the xa); ENOENT (no such xa), or another error
 * with its text. Call errors: EINVAL (NULL, a bad gid), ENOENT (no open
 * transaction txn), ESTATE (txn committing), EBUSY, ECLOSED, ENOMEM.
 */
int
troupe_abi_xa_begin(troupe_abi *n, uint64_t req, const char *gid,
                    size_t gid_len);
int
troupe_abi_xa_branch(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len, uint64_t txn);

#endif
