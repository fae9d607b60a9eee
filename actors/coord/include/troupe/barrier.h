/*
 * The barrier (DTM's subtransaction barrier) inside a troupe transaction:
 * whether a branch's business logic runs for (mode, gid, branch id, op)
 * is decided by rows of the table TROUPE_BARRIER_TABLE read and written
 * through the business transaction itself, so the business writes and
 * their barrier rows commit together in one batch or not at all, and
 * "exactly once" needs no second database (docs/coordinator.md, "The
 * barrier").
 *
 *   troupe_txn_begin(tables, NULL, &tx);
 *   troupe_barrier_check_wait(tx, &(troupe_barrier_branch){
 *       .mode = "saga", .gid = gid, .gid_len = n, .branch_id = "01",
 *       .op = "action"}, &v);
 *   if (v == TROUPE_BARRIER_EXECUTE)
 *       ... the business writes, through tx ...
 *   troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT); // in every case
 *
 * Verdicts:
 *  - EXECUTE: first delivery of this op: run the business logic in the
 *    same transaction. The op's row is buffered in it.
 *  - NULL_COMPENSATION: a compensation ("compensate", "cancel",
 *    "rollback") whose action never ran: do nothing and answer SUCCESS.
 *    The action's row is buffered too (reason: the compensation), so that
 *    the action, if it arrives late, is DUPLICATED: no hanging
 *    reservation. Commit the transaction for this to hold.
 *  - DUPLICATED: this op ran already (its row is committed), or it is an
 *    action whose compensation came first: do nothing and answer SUCCESS.
 * A rolled-back or failed commit leaves no row: the next delivery decides
 * again. Two deliveries racing both see no row and both EXECUTE; the
 * transaction's serializable commit lets one of them commit and fails the
 * other (ECONFLICT, or EEXIST: nothing written), whose retry is then
 * DUPLICATED.
 *
 * Fields (troupe/coord.h's rules; a breach is EINVAL, nothing read or
 * buffered): mode one of the modes; gid 1..128 bytes of
 * [A-Za-z0-9_.:-]; branch_id canonical ("01".."9999"), or "00" with mode
 * "msg" and op "msg"; op one of the mode's.
 *
 * Threads: as troupe/txn.h. The check's callback fires exactly once, on
 * scheduler 0, when it returned OK. The transaction must not be used by
 * another call until then.
 */
#ifndef TROUPE_BARRIER_H
#define TROUPE_BARRIER_H

#include <stddef.h>

#include "troupe/dispatch.h"
#include "troupe/table.h"
#include "troupe/txn.h"

/* The barrier's table: keys are the tuple (mode, gid, branch id, op) in
 * troupe/keycodec.h's encoding, documents {"reason": op} (the op whose
 * delivery wrote the row). Names starting "troupe." are troupe's own. */
#define TROUPE_BARRIER_TABLE "troupe.barrier"

typedef enum troupe_barrier_verdict {
    TROUPE_BARRIER_EXECUTE = 1,
    TROUPE_BARRIER_NULL_COMPENSATION = 2,
    TROUPE_BARRIER_DUPLICATED = 3
} troupe_barrier_verdict;

typedef struct troupe_barrier_branch {
    const char *mode;
    const char *gid; /* gid_len bytes */
    size_t gid_len;
    const char *branch_id; /* NUL-terminated */
    const char *op;
} troupe_barrier_branch;

/* Creates the barrier's table if it is missing (idempotent; cb and errors
 * as troupe_tables_create). */
troupe_err
troupe_barrier_create(troupe_tables *t, troupe_tables_cb cb, void *arg);
troupe_err
troupe_barrier_create_wait(troupe_tables *t);

/*
 * Decides b's verdict through tx (its reads join tx's read set) and
 * buffers the rows the verdict needs. cb errors: those of
 * troupe_txn_get_many and of the buffered inserts (ETOOBIG at the
 * transaction's limits), ECORRUPT (a barrier row that is not one). Call
 * errors: EINVAL (NULL tx or cb, a field that breaks its rule), ENOTABLE
 * (troupe_barrier_create was not run), those of troupe_txn_get_many.
 */
typedef void (*troupe_barrier_cb)(troupe_err err, troupe_barrier_verdict v,
                                  void *arg);
troupe_err
troupe_barrier_check(troupe_txn *tx, const troupe_barrier_branch *b,
                     troupe_barrier_cb cb, void *arg);
/* Same, blocking (troupe/txn.h's rule for _wait twins); *out gets the
 * verdict on OK. */
troupe_err
troupe_barrier_check_wait(troupe_txn *tx, const troupe_barrier_branch *b,
                          troupe_barrier_verdict *out);

/*
 * A two-phase message's query-back (DTM's QueryPrepared): whether the
 * local transaction of message gid committed. The local transaction
 * checks {mode "msg", branch "00", op "msg"} and commits its row with its
 * business writes. The query commits a row of its own (reason
 * "rollback", synced) when it finds none, so a local transaction that
 * commits later is DUPLICATED, fails the message's rule and must roll
 * back. *out: SUCCESS (the local transaction committed), FAILURE (it did
 * not and now never will). Errors: EINVAL (NULL, a bad gid), ENOTABLE,
 * ECONFLICT (a local transaction kept committing over the query's row
 * for 16 tries), ECORRUPT, EIO, and the commit's errors. Blocks.
 */
troupe_err
troupe_barrier_msg_query_wait(troupe_tables *t, const char *gid, size_t gid_len,
                              troupe_outcome *out);

#endif
