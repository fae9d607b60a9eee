/*
 * Transactions over the tables of one troupe_tables:
 * reads see a snapshot taken at begin plus the transaction's own writes;
 * writes are buffered in the transaction and committed by a two-phase
 * commit over the table actors involved, in ONE batch through the commit
 * pipeline. Serializable: a transaction commits only if no key it read or
 * writes changed since its snapshot (docs/data-model.md, "Transactions").
 *
 * Objects and owners:
 *  - troupe_txn: created by troupe_txn_begin, owned by the caller, freed by
 *    troupe_txn_destroy. It borrows the troupe_tables (destroy every
 *    transaction before stopping the tables). A transaction is used by one
 *    thread at a time; its calls are not thread-safe against each other.
 *  - troupe_rows handed to read callbacks: as in table.h (the callback, or
 *    the caller of a _wait function, owns them).
 *  - troupe_txn_conflict arrays: owned by the transaction, valid until its
 *    destroy (or the next commit attempt, which cannot happen: a commit
 *    ends the transaction).
 *
 * Threads. Every function may be called from any thread. Asynchronous
 * calls (get, get_many, commit) return at once; when they return OK their
 * callback fires exactly once on scheduler 0 (the host's loop in embedded
 * mode); when they return an error it never fires. The _wait twins block
 * on scheduler 0: never call them on a loop thread of the runtime or the
 * host; on a troupe scheduler's thread or inside a troupe callback they
 * return EDEADLK and start nothing. Buffering calls (insert, update,
 * upsert, delete) and rollback never block and never call back. A table
 * that is not registered is ENOTABLE (with troupe_errmsg naming it when
 * the call finds out before it returns), an index it lacks ENOINDEX.
 *
 * Read-only tables (troupe_tables_open): transactions that only read work
 * (begin, get, get_many, scan, a commit that writes nothing, rollback);
 * what would write is EREADONLY at the call, with troupe_errmsg naming
 * it, nothing buffered or sent: insert, update, upsert, delete, a commit
 * (or commit_version) with writes (a participant's), the versioned calls
 * (query_version(s) would hand out a version, read_version feeds a
 * versioned commit) and remove_by_index.
 */
#ifndef TROUPE_TXN_H
#define TROUPE_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/table.h"

/* Default limits of one transaction: distinct (table, key) pairs it reads
 * or writes, and bytes of the keys and documents it writes. */
#define TROUPE_TXN_KEYS_MAX 10000
#define TROUPE_TXN_BYTES_MAX (16u * 1024u * 1024u)
/* Tables one transaction may touch. */
#define TROUPE_TXN_TABLES_MAX 64

typedef struct troupe_txn troupe_txn;

typedef struct troupe_txn_opts {
    size_t max_keys;  /* 0: TROUPE_TXN_KEYS_MAX; at most that */
    size_t max_bytes; /* 0: TROUPE_TXN_BYTES_MAX; at most that */
} troupe_txn_opts;

/* Why a key conflicted (pi_db's conflict lists say so too). */
typedef enum troupe_conflict_kind {
    /* What the transaction read no longer matches: the key was written
     * since its snapshot (a read, a written key, a key of a scanned
     * range), or its version differs from the one given to
     * troupe_txn_read_version. Retrying means reading again. */
    TROUPE_CONFLICT_STALE = 1,
    /* Another transaction or a write in flight holds the key: a prepared
     * transaction read or scanned over it, or reserved it for writing, or
     * a write of it is not yet committed. Retrying later may succeed on
     * the same reads. */
    TROUPE_CONFLICT_RESERVED = 2
} troupe_conflict_kind;

/* One conflicting (table, key). table is NUL-terminated. kinds is the OR
 * of every troupe_conflict_kind found for the key: one entry per (table,
 * key), both bits set when both apply. */
typedef struct troupe_txn_conflict {
    const char *table;
    const uint8_t *key;
    size_t key_len;
    uint32_t kinds;
} troupe_txn_conflict;

/*
 * Begins a transaction: takes a storage snapshot that every read of the
 * transaction uses. Until it is destroyed it counts as running: the key
 * versions it may need are kept (troupe_tables_evict_versions), so do not
 * leave finished transactions undestroyed. o may be NULL (defaults). On
 * OK *out is owned by the caller. Errors: EINVAL (NULL, limit over its
 * maximum), ESTATE (tables stopping), ENOMEM. Never blocks on the disk.
 */
troupe_err
troupe_txn_begin(troupe_tables *t, const troupe_txn_opts *o, troupe_txn **out);

/*
 * Frees the transaction (rolling back what is buffered). NULL is a no-op.
 * Destroying one whose commit has not called back yet aborts the process.
 */
void
troupe_txn_destroy(troupe_txn *tx);

/*
 * Reads, through the transaction: its own buffered write of the key if any
 * (an insert, update or upsert reads as the buffered document, without
 * created_at / updated_at stamps, which the commit sets; a delete reads as
 * absent), else the row as of the snapshot. Every key asked joins the read
 * set at the call, also when the read then fails. cb errors: ENOENT (get:
 * absent or expired), ECORRUPT, EIO, ENOMEM. Call errors: EINVAL (NULL,
 * empty key, n over TROUPE_TABLE_PAGE_MAX), ETOOBIG (key over
 * TROUPE_KEY_MAX, or the transaction's key limit), ENOTABLE,
 * ESTATE (committed, committing or rolled back), EFULL (the worker pool's
 * byte budget is spent: retry after a completion), ENOMEM.
 */
troupe_err
troupe_txn_get(troupe_txn *tx, const char *table, const void *key, size_t klen,
               troupe_table_cb cb, void *arg);
/* The live rows among keys[0..n), in the order asked, absent ones left
 * out. n == 0 (keys and klens may then be NULL) is an empty result, still
 * an ordinary read for the rule that refuses mixing it with the
 * versioned calls. */
troupe_err
troupe_txn_get_many(troupe_txn *tx, const char *table, const void *const *keys,
                    const size_t *klens, size_t n, troupe_table_cb cb,
                    void *arg);

/*
 * A scan through the transaction (troupe_scan_opts and the cursor rules of
 * troupe_table_scan): the snapshot's rows of the range merged with the
 * transaction's buffered writes in it (a buffered document replaces or
 * adds a row, a buffered delete hides one), up to limit live rows in key
 * order. The whole range [start, end) joins the read set at the call, as a
 * range, whatever the page covered: the commit conflicts when a key of it
 * was written since the snapshot (a row that appeared in it included: no
 * phantoms), and no other write enters it until the commit is done. A
 * range counts as one key toward the transaction's key limit. Its cursors
 * are the table's (troupe_table_scan takes them, and it takes theirs);
 * another table's is ERANGE at the call. cb errors:
 * ERANGE (cursor outside the range), ECORRUPT (a malformed row fails the
 * page), EIO, ENOMEM. Call errors: EINVAL (NULL, limit 0 or over
 * TROUPE_TABLE_PAGE_MAX, a pointer and length that disagree, an empty
 * (start == end) or inverted range), ETOOBIG (a bound over
 * TROUPE_KEY_MAX, or the key limit), ENOTABLE, ESTATE,
 * EFULL (as troupe_txn_get), ENOMEM.
 */
troupe_err
troupe_txn_scan(troupe_txn *tx, const char *table, const troupe_scan_opts *so,
                troupe_table_cb cb, void *arg);

/*
 * Buffered writes (documents are copied; wo may be NULL; wo->sync is
 * ignored: durability is the commit's; expires_at_ms and no_timestamps
 * apply as in table.h, those of a key's last write deciding). Their
 * rules are checked against the transaction's view where it knows the
 * answer (insert over a key it wrote: EEXIST; update or delete of a key
 * it deleted: ENOENT), otherwise at commit against the snapshot's row,
 * which the commit proves unchanged (the commit then fails with EEXIST /
 * ENOENT, writing nothing).
 * Errors: EINVAL (NULL, empty key, negative expiry), ETOOBIG (key or
 * document over its limit, or the transaction's key or byte limit),
 * EPROTO (doc not one msgpack map), ENOTABLE, ENOENT (as above),
 * EEXIST (as above), ESTATE (committed, committing or rolled back),
 * EREADONLY (read-only tables), ENOMEM. On error nothing is buffered.
 */
troupe_err
troupe_txn_insert(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo);
troupe_err
troupe_txn_update(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo);
troupe_err
troupe_txn_upsert(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo);
troupe_err
troupe_txn_delete(troupe_txn *tx, const char *table, const void *key,
                  size_t klen);

/* Discards the buffered writes; the transaction accepts no further call
 * but destroy. Errors: EINVAL (NULL), ESTATE (committing, committed or
 * rolled back already). */
troupe_err
troupe_txn_rollback(troupe_txn *tx);

/*
 * Commits. cb(tx, err, conflicts, n, arg) fires once on scheduler 0 with:
 *   OK          every buffered write is stored (synced when `sync` says
 *               so, TROUPE_SYNC_DEFAULT taking the db's option);
 *   ECONFLICT   nothing written; conflicts[0..n) is the full set of
 *               (table, key) that conflicted, sorted by table name then
 *               key bytewise, without duplicates, each with its kinds
 *               (a key found for both reasons is one entry with both
 *               bits; also available through troupe_txn_conflicts
 *               until destroy);
 *   EEXIST, ENOENT, ECONSTRAINT, ECORRUPT, EPROTO, ETOOBIG, ESTATE
 *               a write's rule failed at some table (ESTATE: a function
 *               index of it names an unregistered function, table.h):
 *               nothing written;
 *               ENOTABLE when a table the transaction used was dropped
 *               before the commit reached it (even if a table of that
 *               name exists again);
 *   EUNKNOWN    the write or its sync failed: it may or may not be stored
 *               (never retry blindly);
 *   EFULL       the commit pipeline was full: nothing written;
 *   ETIMEDOUT, ECLOSED, EFAILSTOP, ENOSPC, EIO, ENOMEM: nothing written.
 * Any outcome other than ECONFLICT wins over conflicts found before it
 * (a dropped table after another table conflicted is ENOTABLE), and the
 * conflict set is then empty. EDEAD never comes out of a commit.
 * A transaction that wrote nothing commits at once (its snapshot reads
 * were consistent). After the call the transaction accepts no further
 * call but troupe_txn_conflicts and destroy. Call errors: EINVAL (NULL tx
 * or cb, bad sync), ESTATE (committed, committing or rolled back),
 * EREADONLY (writes, a participant's included, on read-only tables: the
 * transaction stays open).
 */
typedef void (*troupe_txn_commit_cb)(troupe_txn *tx, troupe_err err,
                                     const troupe_txn_conflict *conflicts,
                                     size_t n, void *arg);
troupe_err
troupe_txn_commit(troupe_txn *tx, troupe_sync sync, troupe_txn_commit_cb cb,
                  void *arg);

/* The conflict set of the last commit (n == 0 unless it was ECONFLICT).
 * Errors: EINVAL. */
troupe_err
troupe_txn_conflicts(const troupe_txn *tx, const troupe_txn_conflict **c,
                     size_t *n);

/*
 * Participants: other modules' writes that must commit in the SAME batch
 * as the transaction's rows (a queue event published inside the
 * transaction, troupe/queue.h). `write(arg, b)` runs once, when the
 * commit has prepared every table and before the one batch is submitted,
 * on whichever thread drives the commit; it appends puts and deletes to b
 * and must not block. An error from it aborts the commit with that error
 * and nothing is written. `done(arg, outcome)` runs exactly once per
 * attached part: with the commit's outcome (as its callback gets it) just
 * before the commit callback, or ECANCELED when the transaction is rolled
 * back or destroyed without committing; after done, `arg` is the part's
 * own to free. A transaction with participants but no row writes still
 * commits its participants' writes. write may be NULL (done only).
 * troupe_txn_attach copies *p. Errors: EINVAL (NULL tx, p or p->done),
 * ESTATE (not open: committing, committed or rolled back; done is then
 * never called), ETOOBIG (more than TROUPE_TXN_PARTS_MAX parts), ENOMEM.
 */
#define TROUPE_TXN_PARTS_MAX 1024
typedef struct troupe_txn_part {
    troupe_err (*write)(void *arg, troupe_batch *b);
    void (*done)(void *arg, troupe_err outcome);
    void *arg;
} troupe_txn_part;

troupe_err
troupe_txn_attach(troupe_txn *tx, const troupe_txn_part *p);

/* Blocking twins. Block. */
troupe_err
troupe_txn_get_wait(troupe_txn *tx, const char *table, const void *key,
                    size_t klen, troupe_rows **rows);
troupe_err
troupe_txn_get_many_wait(troupe_txn *tx, const char *table,
                         const void *const *keys, const size_t *klens, size_t n,
                         troupe_rows **rows);
troupe_err
troupe_txn_scan_wait(troupe_txn *tx, const char *table,
                     const troupe_scan_opts *so, troupe_rows **rows);
troupe_err
troupe_txn_commit_wait(troupe_txn *tx, troupe_sync sync);

/*
 * The versioned API (pi_db's query_with_version / prepare_with_version /
 * commit_with_version), for clients that cache rows with their versions.
 *
 * Versions never repeat, also across opens of the tables: the records
 * live in memory, in the table actors, but every version is below a floor
 * stored in the catalog, where the next open starts (troupe_tables_opts.
 * version_reserve). So a version cached before a restart is older than
 * every version after it and conflicts; read again. With a key-version
 * TTL (troupe_tables_opts.version_ttl_us) a key's record is also evicted
 * once the TTL has passed since its last publish and no running
 * transaction began before that version: a version cached from before
 * then conflicts the same way. Versions are positive and grow with every
 * committed write of a key, but are not consecutive per key.
 *
 * troupe_txn_query_version: the live row at key (rows->n == 1) or its
 * absence (rows->n == 0, err OK), and the key's current version, taken at
 * one instant (a write of the key in flight is waited for). A key without
 * a version gets its first one; concurrent callers get the same one.
 * cb(err, rows, version, arg) on scheduler 0; the callback owns rows.
 * cb errors: ECORRUPT, EIO, ENOMEM, ETIMEDOUT, ECLOSED, EBUSY (a first
 * version was needed while the stored floor was being raised, which in
 * practice never happens: ask again), or the error of a floor that could
 * not be stored. Call errors: EINVAL, ETOOBIG, EREADONLY (read-only
 * tables), ENOTABLE, ESTATE, ENOMEM.
 *
 * troupe_txn_read_version adds (table, key, version) to the transaction's
 * external read set; writes use the ordinary buffering calls. As in
 * pi_db, duplicate entries are refused before anything happens: a key
 * already in the read set is EINVAL (the first entry stands), and in a
 * versioned transaction each key is written at most once (a second
 * insert, update, upsert or delete of it is EINVAL once read_version was
 * called; commit_version of a transaction that wrote a key twice before
 * that is EINVAL at the call, and the transaction stays open). The commit,
 * troupe_txn_commit_version, compares every versioned read with the key's
 * current version, then checks the standard conflicts of the writes (a
 * written key not in the read set conflicts when it changed since begin),
 * and answers ECONFLICT with the full set, or OK with exactly one receipt
 * per final write: (table, key, the version it now has, upsert or delete),
 * sorted like conflicts, valid until destroy (troupe_txn_receipts), or
 * EUNKNOWN in the one case where it committed but its version could not
 * be made durable (the floor's write failed: data-model.md). A
 * transaction that only reads versions validates them and writes nothing.
 * Mixing is refused with ESTATE: once a transaction used get, get_many or
 * scan it cannot read_version or commit_version; once it used
 * read_version it cannot get, get_many, scan or commit.
 */
typedef void (*troupe_txn_version_cb)(troupe_err err, troupe_rows *rows,
                                      uint64_t version, void *arg);
troupe_err
troupe_txn_query_version(troupe_tables *t, const char *table, const void *key,
                         size_t klen, troupe_txn_version_cb cb, void *arg);
/* Blocks. */
troupe_err
troupe_txn_query_version_wait(troupe_tables *t, const char *table,
                              const void *key, size_t klen, troupe_rows **rows,
                              uint64_t *version);

/*
 * troupe_txn_query_versions: the same for n keys of one table (1..
 * TROUPE_TABLE_PAGE_MAX, duplicates allowed) in one request, each value
 * and its version taken as troupe_txn_query_version takes them:
 * versions[i] is keys[i]'s version, and rows holds the live rows among the
 * keys in the order asked (an absent key has no row: match rows to keys by
 * key). cb(err, rows, versions, arg) on scheduler 0 owns both (rows with
 * troupe_rows_destroy, versions with troupe_free; both NULL on error).
 * Errors as troupe_txn_query_version.
 */
typedef void (*troupe_txn_versions_cb)(troupe_err err, troupe_rows *rows,
                                       uint64_t *versions, void *arg);
troupe_err
troupe_txn_query_versions(troupe_tables *t, const char *table,
                          const void *const *keys, const size_t *klens,
                          size_t n, troupe_txn_versions_cb cb, void *arg);
troupe_err
troupe_txn_query_versions_wait(troupe_tables *t, const char *table,
                               const void *const *keys, const size_t *klens,
                               size_t n, troupe_rows **rows,
                               uint64_t **versions);

/* Errors: EINVAL (NULL, empty key, version 0, the key already in the
 * read set), ETOOBIG (key, or the key limit), ENOTABLE,
 * ESTATE (ordinary reads used, or not open), EREADONLY (read-only
 * tables), ENOMEM. */
troupe_err
troupe_txn_read_version(troupe_txn *tx, const char *table, const void *key,
                        size_t klen, uint64_t version);

typedef struct troupe_txn_receipt {
    const char *table;
    const uint8_t *key;
    size_t key_len;
    uint64_t version;
    bool deleted; /* false: upsert */
} troupe_txn_receipt;

typedef void (*troupe_txn_commit_version_cb)(
    troupe_txn *tx, troupe_err err, const troupe_txn_conflict *conflicts,
    size_t n, const troupe_txn_receipt *receipts, size_t nr, void *arg);
/* Outcomes as troupe_txn_commit. Call errors: EINVAL (NULL tx or cb, bad
 * sync, a key written twice), ESTATE, EREADONLY (as troupe_txn_commit). */
troupe_err
troupe_txn_commit_version(troupe_txn *tx, troupe_sync sync,
                          troupe_txn_commit_version_cb cb, void *arg);
/* Blocks. */
troupe_err
troupe_txn_commit_version_wait(troupe_txn *tx, troupe_sync sync);
/* The receipts of the last commit_version (n == 0 unless it was OK). */
troupe_err
troupe_txn_receipts(const troupe_txn *tx, const troupe_txn_receipt **r,
                    size_t *n);

/*
 * Remove by index: deletes, in one transaction, up to q->limit (1..
 * TROUPE_TABLE_PAGE_MAX) rows of `table` that index `index` matches with
 * q's values or from/to (troupe/index.h; in q's order, reverse too;
 * after and rows are not used), and hands them
 * back: rows->rows[i] is a deleted row (key, document and expiry as they
 * were read), one per primary key in index order however many entries of
 * it matched, and rows->more says that more matching entries followed (of
 * other rows, or of rows that expired meanwhile: call again). Expired rows
 * are not taken. The rows are read in the transaction's snapshot and the
 * commit deletes each only if it did not change since (a row that expires
 * between the two is left to the TTL scanner); a conflict replays the
 * whole removal with a fresh snapshot up to 8 times, then ECONFLICT
 * (nothing deleted). Rows that start to match after the snapshot are not
 * seen. sync as troupe_txn_commit. The asynchronous form calls back once
 * on scheduler 0 with the rows (the callback owns them; NULL on error);
 * stop the tables only after it fired. cb errors: ECONFLICT, the query's
 * errors (EINVAL for a value of the wrong type, EPROTO for values that
 * are not msgpack arrays, ECORRUPT, EIO), ENOTABLE or ENOINDEX (the
 * table or index went meanwhile), ETOOBIG (the keys exceed a transaction's byte
 * limit), and the outcomes of troupe_txn_commit. Call errors: EINVAL (NULL,
 * limit 0 or over the maximum, values together with from/to, a pointer and
 * length that disagree, bad sync), EREADONLY (read-only tables), ENOTABLE
 * or ENOINDEX, ESTATE (the index is still building, or the tables are
 * stopping), ENOMEM.
 */
troupe_err
troupe_txn_remove_by_index(troupe_tables *t, const char *table,
                           const char *index, const troupe_index_query *q,
                           troupe_sync sync, troupe_table_cb cb, void *arg);
/* Same, blocking: *rows (NULL on error) is the caller's. Blocks. */
troupe_err
troupe_txn_remove_by_index_wait(troupe_tables *t, const char *table,
                                const char *index, const troupe_index_query *q,
                                troupe_sync sync, troupe_rows **rows);

/*
 * Runs fn in a fresh transaction and commits it with r->sync, replaying
 * the whole function on ECONFLICT only, up to r->max_attempts attempts,
 * sleeping a random time in [0, min(max_ms, base_ms * 2^attempt)] between
 * attempts (full jitter). Any other outcome is returned as is and never
 * replayed: EUNKNOWN in particular (the commit may have happened). fn
 * returning an error rolls back and returns it. fn runs on the calling
 * thread and uses the blocking twins. r may be NULL (defaults: 8
 * attempts, base 2 ms, max 200 ms, SYNC_DEFAULT); r->attempts, when not
 * NULL, receives the attempts made. Errors: EINVAL (NULL t or fn), those
 * of begin, fn and commit; ECONFLICT once attempts are exhausted. Blocks.
 */
typedef troupe_err (*troupe_txn_fn)(troupe_txn *tx, void *arg);
typedef struct troupe_txn_retry {
    uint32_t max_attempts; /* 0: 8 */
    uint32_t base_ms;      /* 0: 2 */
    uint32_t max_ms;       /* 0: 200 */
    troupe_sync sync;
    uint32_t *attempts; /* out, may be NULL */
} troupe_txn_retry;

troupe_err
troupe_txn_run_wait(troupe_tables *t, const troupe_txn_opts *o,
                    const troupe_txn_retry *r, troupe_txn_fn fn, void *arg);

#endif
