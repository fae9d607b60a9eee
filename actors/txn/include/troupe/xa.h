/*
 * XA over troupe's own tables (docs/plans/coordinator.md, 5.2): a
 * transaction (troupe/txn.h) is prepared under an xid, which makes its
 * outcome durable-but-undecided, and is later committed or rolled back by
 * xid alone, also after a restart of the process.
 *
 * Prepare runs the commit's prepare round unchanged (the table actors
 * reserve the keys, check read versions and unique values and build the
 * one batch), then stores one synced record under the xid in the
 * catalog's meta range: per table the write set, the read keys and
 * scanned ranges, the prepare time, and the batch's exact bytes, so what
 * commits is exactly what was prepared. From then on the xid is held:
 *  - its parts keep their reservations with no deadline;
 *  - another transaction whose prepare touches a held key (writes a key
 *    it reads or writes, reads a key it writes, scans over either) gets
 *    ECONFLICT with the key as TROUPE_CONFLICT_RESERVED;
 *  - a single-key write (troupe_table_insert/update/upsert/delete and
 *    their twins) of a key it writes, reads or scanned over is refused
 *    with EBUSY instead of waiting, and so is one of another key that
 *    claims a unique index value a write of it claims;
 *    troupe_errmsg(TROUPE_EBUSY) names the xid inside the callback of
 *    the asynchronous calls, and after the return of the blocking twins
 *    (for a held key; a held unique value is named in callbacks only);
 *  - a versioned query (troupe_txn_query_version(s)) of a key it writes
 *    is EBUSY rather than waiting for the write;
 *  - an expired-row purge (troupe_tables_purge_expired) passes over the
 *    keys it holds, leaving them for a later pass;
 *  - DDL on a table it has parts at (drop, index add/rebuild/drop) is
 *    EBUSY: the stored batch carries the rows of the schema it was
 *    prepared with.
 * Reopening the tables (troupe_tables_open, before it returns) holds
 * every stored xid again the same way, from its stored write and read
 * sets; a record that does not decode fails the open with ECORRUPT and a
 * troupe_errmsg naming the xid.
 *
 * Resolving: commit writes the stored batch, the record's delete and a
 * resolved marker in one synced batch, then releases the parts,
 * publishing the writes' version as a commit does; rollback writes the
 * delete and the marker and releases them without publishing. Resolving
 * an xid that is not prepared is OK (the decision was already applied),
 * unless its marker says it went the other way: ECONFLICT. The markers
 * are bounded: the last TROUPE_XA_MARKS_MAX resolutions are remembered
 * (stored, so across restarts too); an xid resolved before those is
 * simply "not prepared".
 *
 * xids: 1..TROUPE_XA_XID_MAX bytes of [A-Za-z0-9_.:/-] (troupe/coord.h's
 * gid rule plus '/', so "gid/branch-id" is one). Any other is EINVAL with
 * a troupe_errmsg detail.
 *
 * Threads and callbacks as in txn.h: asynchronous calls return at once
 * and, when they return OK, call back exactly once on scheduler 0; the
 * _wait twins block (EDEADLK on a troupe thread). Stop the tables only
 * after every callback of a prepare or resolution fired (as for a
 * commit); a prepared xid needs no such care: stop, destroy and a later
 * open keep it. Read-only tables refuse
 * every call here that writes (EREADONLY) and hold nothing at open.
 *
 * Not supported: a transaction with participants (troupe_txn_attach) or
 * one that used the versioned calls cannot be prepared (EINVAL / ESTATE
 * at the call). A transaction that writes nothing prepares at once and
 * stores nothing (like a commit that writes nothing): its xid is then not
 * prepared, and resolving it is OK either way.
 */
#ifndef TROUPE_XA_H
#define TROUPE_XA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/txn.h"

#define TROUPE_XA_XID_MAX 128
/* Resolved xids remembered for the ECONFLICT answer. */
#define TROUPE_XA_MARKS_MAX 1024
/* Largest page of troupe_xa_list_wait. */
#define TROUPE_XA_PAGE_MAX 1000

/*
 * Prepares tx under xid[0..xid_len). cb(tx, err, conflicts, n, arg) fires
 * once on scheduler 0 with:
 *   OK          the record is stored (synced) and the parts are held
 *               until troupe_xa_commit or troupe_xa_rollback of the xid;
 *   ECONFLICT   as troupe_txn_commit (conflicts[0..n)): nothing stored,
 *               nothing held;
 *   EEXIST      the xid is prepared already (or being prepared):
 *               nothing stored, nothing held;
 *   EBUSY       a table of it has an index building (a build's reindex
 *               of a held key would wait for the resolution, and a stop
 *               waits for the build): nothing stored, nothing held;
 *   the other outcomes of troupe_txn_commit (EUNKNOWN: the record's write
 *               failed; it may be stored, and then a reopen holds it).
 * After the call tx accepts nothing but troupe_txn_conflicts and destroy,
 * as after a commit; destroying it after the callback leaves the xid
 * prepared (the tables hold it, not tx). Call errors: EINVAL (NULL tx or
 * cb, a bad xid, a transaction with participants), ESTATE (committed,
 * committing or rolled back; or one that used the versioned calls),
 * EREADONLY.
 */
troupe_err
troupe_txn_prepare(troupe_txn *tx, const char *xid, size_t xid_len,
                   troupe_txn_commit_cb cb, void *arg);
/* Blocks. */
troupe_err
troupe_txn_prepare_wait(troupe_txn *tx, const char *xid, size_t xid_len);

/* The outcome of a resolution, once, on scheduler 0. */
typedef void (*troupe_xa_cb)(troupe_err err, void *arg);

/*
 * Commits the prepared xid: its stored batch, the record's delete and
 * the marker in one synced batch; then each table publishes the writes
 * (their version) and releases the keys; then cb. Not prepared, without
 * a marker or with a "committed" one: cb gets OK. cb errors: ECONFLICT
 * (not prepared, and the marker says it was rolled back), and those of
 * the synced write: ENOSPC, EFAILSTOP, ENOENT (nothing written: the xid
 * stays prepared), EUNKNOWN (the write failed and may be stored: the xid
 * stays held here, and a reopen finds the record or not). Call errors
 * (no callback; the xid stays as it was): EINVAL (NULL t or cb, a bad
 * xid), EBUSY (the xid is being prepared or resolved right now),
 * EREADONLY, ESTATE (the tables are stopping), ECORRUPT (the stored batch
 * does not decode), ENOENT (it names a family that is gone), and the
 * pipeline's refusals EFULL, ECLOSED, EFAILSTOP, ENOSPC, and ENOMEM.
 */
troupe_err
troupe_xa_commit(troupe_tables *t, const char *xid, size_t xid_len,
                 troupe_xa_cb cb, void *arg);
/* Rolls it back: the record's delete and the marker, synced; then the
 * parts are released without publishing. Errors as troupe_xa_commit, with
 * ECONFLICT when the marker says "committed". */
troupe_err
troupe_xa_rollback(troupe_tables *t, const char *xid, size_t xid_len,
                   troupe_xa_cb cb, void *arg);
/* Blocking twins. Block. */
troupe_err
troupe_xa_commit_wait(troupe_tables *t, const char *xid, size_t xid_len);
troupe_err
troupe_xa_rollback_wait(troupe_tables *t, const char *xid, size_t xid_len);

/* One prepared xid: its bytes (NUL-terminated too), when it was prepared
 * (the tables' clock, troupe_tables_opts.clock, in ms) and its age then. */
typedef struct troupe_xa_info {
    const char *xid;
    size_t xid_len;
    int64_t prepared_ms;
    int64_t age_ms;
} troupe_xa_info;

/* A page of prepared xids in bytewise xid order; more: others follow
 * (ask again with after = the last xid). Owned by the caller:
 * troupe_xa_page_destroy. */
typedef struct troupe_xa_page {
    size_t n;
    troupe_xa_info *v;
    bool more;
} troupe_xa_page;

/*
 * The prepared xids after `after` (NULL, or a valid xid: the xids above
 * it bytewise), at most limit (1..TROUPE_XA_PAGE_MAX). A prepare whose
 * record is not yet stored is not listed; one being resolved is. *out is
 * the caller's. Errors: EINVAL (NULL t or out, limit 0 or over the
 * maximum, a bad after), ENOMEM. Reads memory only: never blocks on the
 * disk or on a loop, so any thread may call it.
 */
troupe_err
troupe_xa_list_wait(troupe_tables *t, const char *after, size_t after_len,
                    size_t limit, troupe_xa_page **out);
/* NULL is a no-op. */
void
troupe_xa_page_destroy(troupe_xa_page *p);

#endif
