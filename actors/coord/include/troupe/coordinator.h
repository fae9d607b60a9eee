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
 * Built so far: SAGA (sequential or concurrent steps), TCC, two-phase
 * messages, XA over this node's tables, workflows (troupe/workflow.h),
 * abort, retry, force-stop, query (with every branch: detail) and list;
 * branches served by dispatch targets or by troupe actors, local or
 * remote (troupe/branch.h).
 *
 * Objects: troupe_coord_open_wait allocates the coordinator; it borrows
 * the runtime and the tables, which must outlive it (stop and destroy it
 * before stopping the tables). Threads: submits and operator calls come
 * in two forms (STYLE.md): `verb(..., cb, arg)` checks its arguments,
 * returns at once, and, when it returned OK, calls cb exactly once, on
 * the transaction's shard's scheduler thread (or, for one refused as the
 * coordinator stops, ECLOSED on the thread that dropped it), never inside
 * the call: cb must not block, and may call the asynchronous forms; an
 * error returned means cb never fires. `verb_wait` is its blocking twin
 * (never on a troupe loop thread: EDEADLK), with troupe_errmsg naming the
 * gid. query, list and detail are blocking only. Destroy after a stop
 * from any thread.
 */
#ifndef TROUPE_COORDINATOR_H
#define TROUPE_COORDINATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/coord.h"
#include "troupe/dispatch.h"
#include "troupe/runtime.h"
#include "troupe/table.h"
#include "troupe/txn.h"

typedef struct troupe_coord troupe_coord;

/* Unix milliseconds: the coordinator's clock (due times, timeouts). */
typedef int64_t (*troupe_clock_fn)(void *arg);

/* DTM's default timeout-to-fail of a TCC: 35 s. */
#define TROUPE_TCC_TIMEOUT_DEFAULT_MS 35000

typedef struct troupe_coord_opts {
    troupe_runtime *rt;    /* borrowed */
    troupe_tables *tables; /* borrowed; troupe.gtx is created at open */
    uint32_t shards;       /* 0: TROUPE_COORD_SHARDS_DEFAULT */
    uint32_t retry_min_ms; /* first backoff; 0: 10 s */
    uint32_t retry_max_ms; /* backoff cap; 0: 300 s */
    /* How long an actor target (troupe/branch.h) has to reply before its
     * call counts as UNKNOWN; 0: 30 s. Stored with each transaction at
     * its submit. (A dispatch target's calls have that target's own
     * deadline, troupe_target_opts.) */
    uint32_t branch_timeout_ms;
    /* A tcc (or xa) still prepared (never submitted nor aborted) this
     * long after its prepare aborts: every registered branch is cancelled
     * (rolled back), reason "prepared for longer than its
     * timeout-to-fail" (DTM's TimeoutToFail for TCC), so an application
     * that died between its tries and its submit leaves no reservation
     * held. Stored with each at its prepare. 0:
     * TROUPE_TCC_TIMEOUT_DEFAULT_MS; negative: never. */
    int64_t tcc_timeout_ms;
    troupe_clock_fn clock; /* NULL: troupe_now_ms */
    void *clock_arg;
    /* Durability of every transition (troupe/storage.h): 0 or
     * TROUPE_SYNC_ON: fdatasync'ed before its effect is dispatched (a
     * power loss loses nothing); TROUPE_SYNC_OFF: in the page cache (kill
     * -9 loses nothing; a power loss may lose transitions, and a branch
     * whose call was already made is then called again: the barrier
     * makes that harmless). */
    troupe_sync sync;
    /* Retention (DTM's FinishedDataExpire): a transaction that ended
     * (succeed or failed) is kept this long after its finished_ms, then
     * troupe_coord_purge (the TTL scanner's coordinator pass,
     * troupe/ttl.h) deletes it with its barrier rows. 0: 7 days
     * (TROUPE_GTX_RETENTION_DEFAULT_MS); negative: kept for ever; at most
     * TROUPE_GTX_RETENTION_MAX_MS. Keep it longer than any delivery of a
     * branch can be late: a barrier row purged cannot turn away a late
     * action. */
    int64_t retention_ms;
} troupe_coord_opts;

#define TROUPE_GTX_RETENTION_DEFAULT_MS (7LL * 24 * 3600 * 1000)
#define TROUPE_GTX_RETENTION_MAX_MS (100LL * 366 * 24 * 3600 * 1000)

/*
 * Opens the coordinator: creates troupe.gtx if missing (with its index
 * "finished" on finished_ms, built online on a table stored without it),
 * spawns the shards, reads every stored transaction and drives the
 * unfinished ones. Errors: EINVAL (NULL, shards over
 * TROUPE_COORD_SHARDS_MAX, retry_min over retry_max, retention_ms over
 * TROUPE_GTX_RETENTION_MAX_MS), ECORRUPT (a stored transaction breaks its
 * format; troupe_errmsg names its gid), ENOTSUP (one of a later format),
 * the table's errors, ENOMEM, EDEADLK. Blocks.
 */
troupe_err
troupe_coord_open_wait(const troupe_coord_opts *o, troupe_coord **out);

/* Stops the shards: nothing new is committed or dispatched; a branch in
 * flight settles on its own (its outcome is then heard at the next
 * open's redelivery). A purge in flight (troupe_coord_purge) is waited
 * for, and new ones are ECLOSED. Errors: EINVAL, ESTATE (stopped
 * already), EDEADLK. Blocks. */
troupe_err
troupe_coord_stop_wait(troupe_coord *c);

/* Frees a stopped coordinator (aborts if it is not stopped). NULL: no-op. */
void
troupe_coord_destroy(troupe_coord *c);

/* Most transactions one purge may delete. */
#define TROUPE_GTX_PURGE_MAX 1024

/* A purge's outcome: purged, the transactions it deleted (also when err
 * is not OK); more, whether the finished-transaction index held more
 * entries due by the purge's "now" past those it read. */
typedef void (*troupe_coord_purge_cb)(troupe_err err, size_t purged, bool more,
                                      void *arg);

/*
 * Retention: deletes up to limit (1..TROUPE_GTX_PURGE_MAX) ended
 * transactions whose finished_ms + retention_ms <= the coordinator's
 * clock, oldest first, found through the index "finished" of troupe.gtx
 * (only ended transactions have an entry there), each in a troupe
 * transaction of its own (troupe/txn.h) with every barrier row of its
 * (mode, gid) in TROUPE_BARRIER_TABLE (troupe/barrier.h), committed with
 * opts.sync. That transaction reads the document again and deletes only
 * if it is still ended and past its retention; a transaction not ended
 * and its barrier rows are never touched. Afterwards a query of the gid
 * is ENOENT and a submit of it starts it again. With retention negative
 * nothing is due: cb gets 0 and false. cb fires once, on scheduler 0,
 * when the call returned OK (never inside it); a transaction that changed
 * meanwhile (ECONFLICT) is left for the next purge, not an error. cb
 * errors: those of the index query (ESTATE while the index builds), of
 * reads and commits (the first one; the other transactions still go
 * on), ECORRUPT (a stored document breaks its format: it stays), ETOOBIG
 * (barrier rows of one gid past a transaction's key limit: it stays).
 * Call errors: EINVAL (NULL c or cb, limit), ECLOSED (stopped), ENOMEM.
 * Any thread; never blocks. troupe_coord_stop_wait waits for the purges
 * in flight.
 */
troupe_err
troupe_coord_purge(troupe_coord *c, size_t limit, troupe_coord_purge_cb cb,
                   void *arg);
/* Same, blocking: *purged and *more (each may be NULL) get what cb would.
 * Its errors, and EDEADLK. Blocks. */
troupe_err
troupe_coord_purge_wait(troupe_coord *c, size_t limit, size_t *purged,
                        bool *more);

/* The outcome of an asynchronous call (see Threads above). */
typedef void (*troupe_coord_cb)(troupe_err err, void *arg);
/* A register's: the new branch's id ("01"...) when err is OK, else NULL;
 * valid during the call. */
typedef void (*troupe_tcc_register_cb)(troupe_err err, const char *branch_id,
                                       void *arg);

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
    /* Concurrent steps (DTM's EnableConcurrent and AddBranchOrder).
     * false: one step at a time, actions in order, compensations in
     * reverse. true: every action whose dependencies have succeeded runs
     * at once; after (NULL: none) holds one mask per step, bit j of
     * after[i] set when step i's action waits for step j's (j < the step
     * count, j != i, no cycle: EINVAL). Going back, step i's compensation
     * runs once its own action has settled and the compensations of every
     * step waiting for i are done. Concurrent calls share the
     * transaction's due time: a retry waits for the earliest backoff. */
    bool concurrent;
    const uint64_t *after;
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
/* The same, asynchronous: the argument errors are returned, the commit's
 * outcome goes to cb. */
troupe_err
troupe_saga_submit(troupe_coord *c, const char *gid, size_t gid_len,
                   const troupe_saga_step *steps, size_t n,
                   const troupe_saga_opts *o, troupe_coord_cb cb, void *arg);

/*
 * TCC. Prepare stores gid with no branch (OK too when gid exists);
 * register adds a branch (its confirm and cancel calls) and returns once
 * that is committed, with its branch id ("01"...) in branch_id: only then
 * may the application run the branch's try (the barrier's op "try"), so
 * a cancel can always find it. troupe_gtx_submit_wait then confirms every
 * branch in order (a failed confirm is retried, never cancelled);
 * troupe_gtx_abort_wait cancels every registered branch in reverse.
 * Errors: those of a submit; register: ECONFLICT (submitted or aborted
 * already), ENOENT (no such gid, or not a tcc), EINVAL (64 branches).
 */
troupe_err
troupe_tcc_prepare_wait(troupe_coord *c, const char *gid, size_t gid_len);
troupe_err
troupe_tcc_register_wait(troupe_coord *c, const char *gid, size_t gid_len,
                         const troupe_gtx_call *confirm,
                         const troupe_gtx_call *cancel, char branch_id[8]);
troupe_err
troupe_tcc_prepare(troupe_coord *c, const char *gid, size_t gid_len,
                   troupe_coord_cb cb, void *arg);
/* register with the caller's branch id (DTM's clients choose theirs:
 * "01", "02" ... in order): the next one registers as troupe_tcc_register
 * does; one already registered is a retry: OK, nothing changes (its
 * stored calls are kept, whatever these say); a later one is refused,
 * cb gets ERANGE. Call errors: troupe_tcc_register's, and EINVAL for a
 * branch_id that is not two digits 01..64. */
troupe_err
troupe_tcc_register_at(troupe_coord *c, const char *gid, size_t gid_len,
                       const char *branch_id, const troupe_gtx_call *confirm,
                       const troupe_gtx_call *cancel, troupe_tcc_register_cb cb,
                       void *arg);
troupe_err
troupe_tcc_register(troupe_coord *c, const char *gid, size_t gid_len,
                    const troupe_gtx_call *confirm,
                    const troupe_gtx_call *cancel, troupe_tcc_register_cb cb,
                    void *arg);

/*
 * XA over troupe's own tables (troupe/xa.h): a global transaction whose
 * branches are troupe transactions prepared under the xid "gid/branch-id"
 * ("g-1/01"), committed by the coordinator on submit or rolled back on
 * abort: each branch's calls name the built-in target TROUPE_XA_TARGET,
 * which the shard serves itself, asynchronously, on the coordinator's
 * tables (troupe_xa_commit / troupe_xa_rollback, which are idempotent: a
 * branch resolved once and called again is OK; no dispatch target or
 * thread is involved).
 *
 * troupe_xa_begin stores gid prepared (OK too when gid exists);
 * troupe_xa_branch registers a branch (committed first, so an abort can
 * always find it) and then prepares tx under its xid: cb hears the
 * branch id once tx is prepared (its keys held until the coordinator
 * resolves it), or the prepare's error (ECONFLICT: troupe_txn_conflicts
 * of tx says on what; the branch stays registered, and the abort that
 * should follow rolls back an xid never prepared, which is OK). Then
 * troupe_gtx_submit commits every branch in order (a commit that fails
 * is retried, never rolled back: the decision is made) and
 * troupe_gtx_abort rolls back every registered branch in reverse. An xa
 * left prepared (its application died before submit or abort) aborts
 * after troupe_coord_opts.tcc_timeout_ms, as a tcc does, so no prepared
 * branch holds its keys for ever. tx must belong to the coordinator's
 * tables; after the call tx accepts nothing but troupe_txn_conflicts and
 * troupe_txn_destroy (destroy it once cb fired). Errors: a register's
 * (ENOENT: no such gid or not an xa; ECONFLICT: submitted or aborted
 * already; EINVAL: 64 branches, a NULL tx), then the prepare's
 * (troupe_txn_prepare's), ECLOSED, ENOMEM.
 */
#define TROUPE_XA_TARGET "troupe.xa"

troupe_err
troupe_xa_begin(troupe_coord *c, const char *gid, size_t gid_len,
                troupe_coord_cb cb, void *arg);
troupe_err
troupe_xa_begin_wait(troupe_coord *c, const char *gid, size_t gid_len);
troupe_err
troupe_xa_branch(troupe_coord *c, const char *gid, size_t gid_len,
                 troupe_txn *tx, troupe_tcc_register_cb cb, void *arg);
troupe_err
troupe_xa_branch_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_txn *tx, char branch_id[8]);

/*
 * A two-phase message: prepare stores its steps and its query-back call
 * (required; its payload, if any, goes with every ask: an http
 * query-back's [url, body], troupe/httpcall.h) before the application's
 * local transaction; submit (after
 * that transaction committed) drives the steps, each retried until
 * SUCCESS, never compensated. A message left prepared for grace_ms (0:
 * 10 s) is queried back: SUCCESS drives it, FAILURE fails it with no step
 * called, ONGOING or UNKNOWN asks again after the backoff. A prepare of
 * a gid that exists is OK and changes nothing. Errors as a submit's.
 */
troupe_err
troupe_msg_prepare_wait(troupe_coord *c, const char *gid, size_t gid_len,
                        const troupe_gtx_call *steps, size_t n,
                        const troupe_gtx_call *query, int64_t grace_ms);
troupe_err
troupe_msg_prepare(troupe_coord *c, const char *gid, size_t gid_len,
                   const troupe_gtx_call *steps, size_t n,
                   const troupe_gtx_call *query, int64_t grace_ms,
                   troupe_coord_cb cb, void *arg);

/*
 * Operator calls and the second phase of tcc and messages, on the
 * transaction's shard. submit: a prepared tcc or message goes on (OK too
 * when it has already; ECONFLICT once it aborts or failed). abort: a
 * transaction not final starts aborting (a prepared message fails at
 * once; a submitted one only goes forward: ECONFLICT), with the reason
 * "aborted", or "aborted: " and the operator's reason (borrowed for the
 * call; NULL or "" for none; EINVAL unless troupe_gtx_abort_reason_valid,
 * troupe/coord.h); one aborting already is OK and keeps its first reason;
 * ECONFLICT on a final one. retry: the call waiting for its backoff runs
 * now; ECONFLICT on a final one. Each returns once its change is
 * committed. ENOENT for an unknown gid. Blocks.
 */
troupe_err
troupe_gtx_submit_wait(troupe_coord *c, const char *gid, size_t gid_len);
troupe_err
troupe_gtx_abort_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      const char *reason);
troupe_err
troupe_gtx_retry_wait(troupe_coord *c, const char *gid, size_t gid_len);
/* The same, asynchronous (the reason is copied at the call). */
troupe_err
troupe_gtx_submit(troupe_coord *c, const char *gid, size_t gid_len,
                  troupe_coord_cb cb, void *arg);
troupe_err
troupe_gtx_abort(troupe_coord *c, const char *gid, size_t gid_len,
                 const char *reason, troupe_coord_cb cb, void *arg);
troupe_err
troupe_gtx_retry(troupe_coord *c, const char *gid, size_t gid_len,
                 troupe_coord_cb cb, void *arg);

/* Force-stop (DTM's): a transaction not final fails at once, reason
 * "force-stopped", with no compensation, cancel or step run from then on
 * (an outcome still on its way is ignored). For an operator who has
 * settled it by hand. ECONFLICT on a final one, ENOENT for an unknown
 * gid. Blocks. */
troupe_err
troupe_gtx_force_stop_wait(troupe_coord *c, const char *gid, size_t gid_len);
troupe_err
troupe_gtx_force_stop(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_coord_cb cb, void *arg);

typedef enum troupe_gtx_status {
    TROUPE_GTX_PREPARED = 1,
    TROUPE_GTX_SUBMITTED = 2,
    TROUPE_GTX_ABORTING = 3,
    TROUPE_GTX_SUCCEED = 4,
    TROUPE_GTX_FAILED = 5
} troupe_gtx_status;

/* Why a submitted workflow does not run now (troupe/workflow.h):
 * diverged from its records (until a retry or the next open) or waiting
 * for an awakeable's resolution. */
typedef enum troupe_wf_hold {
    TROUPE_WF_RUNNABLE = 0,
    TROUPE_WF_DIVERGED = 1,
    TROUPE_WF_AWAITING = 2
} troupe_wf_hold;

typedef struct troupe_gtx_info {
    troupe_gtx_mode mode;
    troupe_gtx_status status;
    troupe_wf_hold hold; /* a workflow's; RUNNABLE for the other modes */
    char reason[1025];   /* "" when none */
    uint32_t steps;
    uint32_t attempts; /* retries so far */
    int64_t created_ms, updated_ms, finished_ms;
} troupe_gtx_info;

/* One transaction of a list: its gid and its info. */
typedef struct troupe_gtx_entry {
    char gid[TROUPE_GID_MAX + 1];
    troupe_gtx_info info;
} troupe_gtx_entry;

typedef struct troupe_gtx_page {
    size_t n;
    troupe_gtx_entry *items;
    /* the gid to pass as `after` for the next page, and whether the
     * table holds more past it (a page may hold fewer than limit, none
     * even, when the filter skipped what the call read) */
    char cursor[TROUPE_GID_MAX + 1];
    bool more;
} troupe_gtx_page;

/* status and mode 0: any. */
typedef struct troupe_gtx_filter {
    troupe_gtx_status status;
    troupe_gtx_mode mode;
} troupe_gtx_filter;

#define TROUPE_GTX_LIST_MAX 1000

/*
 * Up to limit (1..TROUPE_GTX_LIST_MAX) stored transactions matching f (may
 * be NULL), in gid order after `after` (NULL: from the first), reading at
 * most 10 x limit of them. *out is the caller's (troupe_gtx_page_destroy).
 * Errors: EINVAL (limit, a bad after), ECORRUPT (a stored one breaks its
 * format; nothing returned), EIO, ENOMEM, EDEADLK. Blocks.
 */
troupe_err
troupe_gtx_list_wait(troupe_coord *c, const troupe_gtx_filter *f,
                     const char *after, size_t limit, troupe_gtx_page **out);
void
troupe_gtx_page_destroy(troupe_gtx_page *p);

/* The last committed state of gid. Errors: EINVAL, ENOENT (no such gid),
 * ECORRUPT, EIO, EDEADLK. Blocks. */
troupe_err
troupe_gtx_query_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_gtx_info *out);

/* A call's progress as the document stores it (docs/coordinator.md,
 * "Stored format"). TODO is both "never called" (attempts 0) and "to be
 * called again" after an ONGOING or UNKNOWN (or a FAILURE that cannot be
 * compensated): attempts and last tell them apart. */
typedef enum troupe_gtx_call_state {
    TROUPE_GTX_CALL_TODO = 1,
    TROUPE_GTX_CALL_DISPATCHED = 2, /* called, no outcome committed yet */
    TROUPE_GTX_CALL_SUCCEEDED = 3,  /* SUCCESS committed */
    TROUPE_GTX_CALL_FAILED = 4      /* FAILURE committed (and acted on) */
} troupe_gtx_call_state;

/* The most ops a branch has (tcc: try, confirm, cancel). */
#define TROUPE_GTX_BRANCH_OPS_MAX 3

/* One op of a branch. */
typedef struct troupe_gtx_op {
    const char *op; /* static: "action", "compensate", "confirm", "cancel",
                       "msg" (a message's query-back), "run" (a
                       workflow's) */
    char target[TROUPE_TARGET_NAME_MAX + 1]; /* its dispatch target */
    size_t payload_len;                      /* the payload's bytes */
    troupe_gtx_call_state state;
    uint32_t attempts;   /* how often it was dispatched */
    troupe_outcome last; /* the last outcome heard; 0: none yet */
} troupe_gtx_op;

/* A branch: its id and the ops it has, in the mode's order (saga:
 * action, compensate; tcc: confirm, cancel, the try being the
 * application's, never stored; a message's step: action; its query-back,
 * branch TROUPE_MSG_BRANCH_ID: msg; a workflow's run, branch "00": run,
 * then its records: a step's action (its memoized result) and
 * compensate, an awakeable's action (its resolution), a version
 * marker's action). */
typedef struct troupe_gtx_branch {
    char id[8]; /* "00", "01" ... */
    /* a workflow's record: its kind ("step", "awakeable", "version"; NULL
     * in the other modes and for a workflow's run, "00"), its name and a
     * version marker's version */
    const char *kind;
    char name[TROUPE_WF_NAME_MAX + 1];
    int32_t version;
    size_t n_ops;
    troupe_gtx_op ops[TROUPE_GTX_BRANCH_OPS_MAX];
} troupe_gtx_branch;

typedef struct troupe_gtx_detail {
    troupe_gtx_info info;
    /* when the coordinator drives it next (Unix ms; one past means due
     * now; a prepared tcc: its timeout-to-fail); 0 when no time is
     * waited for: a call in flight, a tcc with no timeout waiting for its
     * submit or abort, an ended transaction */
    int64_t next_due_ms;
    size_t n_branches;
    /* a message's query-back first ("00"), then the steps in order */
    troupe_gtx_branch *branches;
} troupe_gtx_detail;

/*
 * The last committed state of gid with every branch: what query gives,
 * the next due time, and each branch's ops with their targets, states,
 * attempts and last outcomes (payload lengths, not their bytes). *out is
 * the caller's (troupe_gtx_detail_destroy), NULL on error. Errors: EINVAL
 * (NULL, a bad gid), ENOENT (no such gid), ECORRUPT (its document breaks
 * the format), ENOTSUP (one of a later format), EIO, ENOMEM, EDEADLK.
 * Blocks.
 */
troupe_err
troupe_gtx_detail_wait(troupe_coord *c, const char *gid, size_t gid_len,
                       troupe_gtx_detail **out);
/* NULL: no-op. */
void
troupe_gtx_detail_destroy(troupe_gtx_detail *d);

#endif
