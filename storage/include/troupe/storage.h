/*
 * The storage engine: one RocksDB database per node, reached only through
 * this header (and commit.h for group commit). RocksDB itself never appears
 * in a public header.
 *
 * Objects and owners:
 *  - troupe_db: opened by troupe_db_open, owned by the caller, freed by
 *    troupe_db_close. Every other object below belongs to one db and must
 *    be finished (snapshots and iterators destroyed, commit pipelines
 *    destroyed) before it closes; close refuses with EBUSY otherwise.
 *  - troupe_cf: a column family handle, owned by its db. Borrowed by
 *    callers; valid until the db closes (also after a drop: a dropped
 *    family's handle then answers ENOENT).
 *  - troupe_batch: a write batch, owned by whoever created it (or by the
 *    commit pipeline once submitted, see commit.h).
 *  - troupe_snapshot, troupe_iter, troupe_page: owned by the caller.
 *
 * Threads: every function may be called from any thread and is safe to
 * call concurrently on one db, except troupe_db_close (nothing else may use
 * the db during or after it) and the per-object rules given below (a batch,
 * an iterator, a page belong to one thread at a time). Functions marked
 * "blocks" may wait on disk: never call them on an event-loop thread; hand
 * them to a worker, or use the commit pipeline for writes.
 *
 * Keys are 1..TROUPE_KEY_MAX bytes, values 0..TROUPE_VALUE_MAX bytes, and
 * keys sort bytewise (memcmp, shorter prefix first). Build keys with the
 * order-preserving tuple codec in keycodec.h.
 *
 * Failure semantics (docs/storage.md):
 *  - A write or sync that fails returns EUNKNOWN: it may or may not have
 *    taken effect (RocksDB 7.8.3 keeps a batch whose WAL fdatasync failed).
 *  - After the first I/O error on a write path the db is fail-stop: every
 *    later write returns EFAILSTOP until it is closed and reopened (no
 *    sync is ever retried). Reads keep working.
 *  - Integrity problems are ECORRUPT, never "not found".
 *  - A full disk is ENOSPC, and never takes the process down. When the
 *    filesystem holding the db gets down to min_free_bytes available,
 *    writes and family creations are refused with ENOSPC, nothing written,
 *    and the db stays usable: once space is freed, writes are accepted
 *    again (within about 10 ms). If RocksDB itself runs out of space (the
 *    gate is off, or something else filled the disk), the write that met
 *    it is ENOSPC when its data never reached the WAL (not stored) and
 *    EUNKNOWN otherwise, and the db is fail-stop; the reserve file is then
 *    deleted so that close and a reopen after freeing space find room.
 */
#ifndef TROUPE_STORAGE_H
#define TROUPE_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "troupe/err.h"
#include "troupe/log.h"

/* Largest key and value the engine accepts (ETOOBIG beyond). */
#define TROUPE_KEY_MAX 16384
#define TROUPE_VALUE_MAX (64u * 1024u * 1024u)
/* Largest encoded batch (ETOOBIG when a put or delete would exceed it). */
#define TROUPE_BATCH_MAX (256u * 1024u * 1024u)
/* Column family names are 1..TROUPE_CF_NAME_MAX bytes, no NUL. */
#define TROUPE_CF_NAME_MAX 255
/* The family every database has; it can be neither created nor dropped. */
#define TROUPE_CF_DEFAULT "default"
/* Defaults of troupe_db_opts' free-space thresholds (troupe_db_opts_init). */
#define TROUPE_DB_MIN_FREE_DEFAULT (128u * 1024u * 1024u)
#define TROUPE_DB_RESERVE_DEFAULT (32u * 1024u * 1024u)

/*
 * The order of keys in every family (RocksDB's bytewise comparator): the
 * bytes compared as unsigned, a prefix before every longer key that
 * begins with it. Negative, 0 or positive as a sorts before, equal to or
 * after b. Either length may be 0, and then its pointer may be NULL.
 * Pure; any thread.
 */
static inline int
troupe_key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n != 0 ? memcmp(a, b, n) : 0;
    return c != 0 ? c : (alen > blen) - (alen < blen);
}

typedef struct troupe_db troupe_db;
typedef struct troupe_cf troupe_cf;
typedef struct troupe_batch troupe_batch;
typedef struct troupe_snapshot troupe_snapshot;
typedef struct troupe_iter troupe_iter;

/* Durability of one write. DEFAULT takes the db's `sync` option. */
typedef enum troupe_sync {
    TROUPE_SYNC_DEFAULT = 0,
    TROUPE_SYNC_ON = 1, /* the WAL is fdatasync'ed before the call returns */
    TROUPE_SYNC_OFF = 2 /* in the OS page cache: survives kill -9, not a
                           power loss */
} troupe_sync;

typedef struct troupe_db_opts {
    /* Create the database when the directory holds none. Default true. */
    bool create_if_missing;
    /* Durability of TROUPE_SYNC_DEFAULT writes. Default true. */
    bool sync;
    /*
     * Write no WAL at all: every write is lost on a crash unless flushed.
     * Requires sync == false; a TROUPE_SYNC_ON write then fails with
     * EINVAL. Default false.
     */
    bool disable_wal;
    /*
     * WAL recovery. Default false: open fails with ECORRUPT when the WAL
     * holds a corrupt record that is not a torn tail (a torn tail, i.e. a
     * last record cut short by a crash, is recovered silently as RocksDB's
     * kTolerateCorruptedTailRecords does). true: such an open instead
     * recovers to the last consistent point before the corruption, dropping
     * every later record for good, and troupe_db_wal_loss() reports it.
     */
    bool accept_wal_loss;
    /* Shared LRU block cache for all families; 0: 32 MiB. */
    size_t block_cache_bytes;
    /*
     * Free-space gate: a write (troupe_db_write, a commit pipeline group)
     * that would leave the filesystem holding the db with fewer bytes
     * available (statvfs f_bavail) than this is refused with ENOSPC,
     * nothing written, and so is every write and family creation after it
     * until this plus an eighth of it (at least 1 MiB) is available again.
     * It keeps room for RocksDB's memtable flushes and compactions, close
     * and reopen: set it above what a flush writes (a memtable: 64 MiB per
     * family). Checked without a system call on most writes
     * (docs/storage.md). troupe_db_opts_init sets
     * TROUPE_DB_MIN_FREE_DEFAULT (128 MiB); 0 turns the gate off.
     */
    uint64_t min_free_bytes;
    /*
     * Size of the reserve file (TROUPE-RESERVE in dir), space held back
     * for the day RocksDB runs out anyway: it is deleted when RocksDB
     * reports a full disk (or an open fails for want of space, which is
     * then tried once more), and made again by a later open once the
     * filesystem has room for it twice over above min_free_bytes.
     * troupe_db_opts_init sets TROUPE_DB_RESERVE_DEFAULT (32 MiB); 0: no
     * reserve.
     */
    uint64_t reserve_bytes;
    /* Column families created at open when missing (borrowed for the
     * call). Existing families are always opened, listed or not. */
    const char *const *cfs;
    size_t ncfs;
    /*
     * Open read-only (docs/storage.md, "Read-only"): nothing is ever
     * written in dir, and the db may be open elsewhere (a running node
     * holds it) at the same time. Reads see the database as it was at
     * open, and keep seeing that state (close and open again to see newer
     * writes); a snapshot is that same state. Every write is refused with
     * EREADONLY: troupe_db_write, troupe_db_flush, family creation and
     * drop, a batch put or delete in one of its families, and
     * troupe_commit_create. create_if_missing, min_free_bytes and
     * reserve_bytes are ignored (nothing is created: a missing dir or a
     * dir without a database is ENOENT). Every family listed in cfs must
     * exist (ENOENT otherwise); a family looked up that does not exist is
     * ENOENT, never created. RocksDB's info lines go to `logger` (sys
     * "rocksdb", mostly at DEBUG), not to <dir>/LOG. A private directory
     * is made under $TMPDIR (or /tmp) for RocksDB's secondary instance
     * and removed at close. Default false.
     */
    bool read_only;
    /* Where the engine's log records go (sys "storage"; RocksDB's own
     * info lines go to <dir>/LOG, not here); copied at open. Zeroed (as
     * troupe_db_opts_init leaves it): stderr at WARN (log.h). */
    troupe_logger logger;
} troupe_db_opts;

/* Fills o with the defaults above (a zeroed struct turns the free-space
 * gate and the reserve off). */
void
troupe_db_opts_init(troupe_db_opts *o);

/*
 * Opens (or creates) the database in directory `dir`, opening every
 * existing column family and creating the missing ones in opts->cfs.
 * opts may be NULL (defaults). With create_if_missing a missing `dir` is
 * created (its parent must exist). On success *out owns the db; on error
 * *out is NULL. Never runs RocksDB's repair. RocksDB's info log is
 * <dir>/LOG (at most 4 MiB, the previous one kept as LOG.old); a write to
 * it that fails drops the line. With read_only, see that option: nothing
 * is written.
 * Errors: EINVAL (NULL dir/out, bad option or family name; or a `dir`
 * that cannot hold a db: a plain file, a path under a plain file, a
 * directory this process may not read, write and search, or a read-only
 * filesystem; read_only needs only read and search; the reason is logged
 * through opts->logger), ENOENT (no db and create_if_missing false or
 * read_only; or `dir`'s parent is missing; or read_only and a family in
 * cfs is missing), ESYS (read_only: no private directory could be made
 * under $TMPDIR), EBUSY (the db
 * is open elsewhere: RocksDB's LOCK), ECORRUPT (corrupt WAL without
 * accept_wal_loss, or other corrupt metadata), ENOSPC (the filesystem
 * is full; free space and open again), EIO, ENOMEM. Blocks.
 */
troupe_err
troupe_db_open(const char *dir, const troupe_db_opts *opts, troupe_db **out);

/*
 * Closes the db: destroys the column family handles, then the RocksDB
 * instance, then frees *db. Unsynced writes stay in the OS page cache (the
 * WAL is not synced at close). NULL is a no-op returning OK.
 * Errors: EBUSY (snapshots, iterators or commit pipelines still alive;
 * nothing is closed). Blocks.
 */
troupe_err
troupe_db_close(troupe_db *db);

/* True when the last open dropped WAL records (accept_wal_loss). */
bool
troupe_db_wal_loss(const troupe_db *db);

/* True when the db was opened read_only. */
bool
troupe_db_read_only(const troupe_db *db);

/* True once an I/O error made the db fail-stop (writes: EFAILSTOP). */
bool
troupe_db_failstop(const troupe_db *db);

/*
 * Flushes every family's memtable to table files and waits. An I/O error
 * returns EIO and makes the db fail-stop, a full disk ENOSPC (also
 * fail-stop; the data is still in the WAL). Not subject to the free-space
 * gate. Errors: EINVAL, EREADONLY, EFAILSTOP, EIO, ENOSPC. Blocks.
 */
troupe_err
troupe_db_flush(troupe_db *db);

/*
 * Looks up a live column family by name. *out is borrowed (see above).
 * Errors: EINVAL (NULL argument, bad name), ENOENT (no such live family).
 */
troupe_err
troupe_db_cf(troupe_db *db, const char *name, troupe_cf **out);

/*
 * Creates a column family. *out (may be NULL) receives the borrowed handle.
 * Errors: EINVAL, EREADONLY (read-only db: nothing done), EEXIST, EFAILSTOP,
 * ENOSPC (below min_free_bytes: nothing done; or RocksDB could not write its
 * MANIFEST: nothing done, and the db is fail-stop), EIO (also makes the db
 * fail-stop; the family may exist after a reopen), ENOMEM. Blocks.
 */
troupe_err
troupe_db_cf_create(troupe_db *db, const char *name, troupe_cf **out);

/*
 * Drops a column family and all its data. Its handle stays allocated until
 * close and answers ENOENT from then on. The caller makes sure nothing
 * writes to the family meanwhile (a write racing the drop may be lost).
 * Not subject to the free-space gate (a drop frees space).
 * Errors: EINVAL (NULL, bad name, "default"), EREADONLY, ENOENT, EFAILSTOP,
 * ENOSPC
 * (RocksDB found no space for its MANIFEST record: not dropped;
 * fail-stop), EIO (fail-stop). Blocks.
 */
troupe_err
troupe_db_cf_drop(troupe_db *db, const char *name);

/*
 * Names of the live column families, "default" first, then in the order
 * they were opened or created. *names is one allocation (array and
 * strings) that the caller frees with troupe_free(). Errors: EINVAL,
 * ENOMEM.
 */
troupe_err
troupe_db_cf_names(troupe_db *db, char ***names, size_t *n);

/* Figures of one family, from RocksDB's estimates (not a scan). */
typedef struct troupe_cf_stats {
    uint64_t keys;       /* estimated keys; deletes and overwrites not yet
                            compacted away count, so it may be high */
    uint64_t live_bytes; /* estimated bytes of live data in table files */
    uint64_t file_bytes; /* bytes of the family's table files */
    uint64_t mem_bytes;  /* bytes of its memtables */
} troupe_cf_stats;

/*
 * Fills *out for cf (no disk read: RocksDB's in-memory figures). Errors:
 * EINVAL (NULL argument, family of another db), ENOENT (dropped family;
 * *out zeroed). Any thread; does not block on the disk.
 */
troupe_err
troupe_db_cf_stats(troupe_db *db, troupe_cf *cf, troupe_cf_stats *out);

/* The family's name, valid as long as the handle. */
const char *
troupe_cf_name(const troupe_cf *cf);

/* ---- write batches ---------------------------------------------------- */

/*
 * A batch of puts and deletes across any families of one db. Written
 * atomically (one WAL record) by troupe_db_write or the commit pipeline.
 * Not thread-safe: one thread at a time. Errors: EINVAL, ENOMEM.
 */
troupe_err
troupe_batch_create(troupe_batch **out);
/* NULL is a no-op. */
void
troupe_batch_destroy(troupe_batch *b);

/*
 * Adds a put (key and value are copied). The first family used binds the
 * batch to its db; a family of another db is EINVAL.
 * Errors: EINVAL (NULL, empty key, foreign family), ENOENT (dropped
 * family), EREADONLY (a family of a read-only db), ETOOBIG (key, value or
 * batch over its limit). On error the batch is unchanged.
 */
troupe_err
troupe_batch_put(troupe_batch *b, troupe_cf *cf, const void *key,
                 size_t key_len, const void *val, size_t val_len);

/* Adds a delete of one key. Errors as troupe_batch_put. */
troupe_err
troupe_batch_delete(troupe_batch *b, troupe_cf *cf, const void *key,
                    size_t key_len);

/*
 * Adds a delete of every key in [start, end). start < end (EINVAL
 * otherwise). Errors as troupe_batch_put.
 */
troupe_err
troupe_batch_delete_range(troupe_batch *b, troupe_cf *cf, const void *start,
                          size_t start_len, const void *end, size_t end_len);

/* Operations in the batch (0 for NULL). */
size_t
troupe_batch_count(const troupe_batch *b);

/* Removes every operation and unbinds the batch from its db. */
void
troupe_batch_clear(troupe_batch *b);

/*
 * The batch's exact encoded bytes (RocksDB's WriteBatch representation),
 * borrowed: valid until the batch changes or is destroyed. For a record
 * that must later write exactly what it describes (XA's prepared batch);
 * troupe_batch_from_data turns them back into a batch. *len gets their
 * length (an empty batch still has its 12-byte header). NULL b or len:
 * NULL and *len 0 when len is not NULL. Any thread that owns b.
 */
const void *
troupe_batch_data(const troupe_batch *b, size_t *len);

/*
 * A new batch of db holding exactly the operations that data[0..len)
 * encodes (bytes from troupe_batch_data, maybe stored on disk since),
 * replayed in their order with the checks of troupe_batch_put / delete /
 * delete_range, so the result writes what the original wrote. Families
 * are found by their RocksDB id among db's open ones. On OK *out is the
 * caller's. Errors: EINVAL (NULL), ECORRUPT (bytes that are not a batch
 * of puts and deletes: bad header, count or record, an operation kind
 * troupe never writes, trailing bytes), ENOENT (a family that is not open
 * or was dropped), EREADONLY, ETOOBIG, ENOMEM. Never blocks.
 */
troupe_err
troupe_batch_from_data(troupe_db *db, const void *data, size_t len,
                       troupe_batch **out);

/*
 * Writes the batch atomically and waits; b stays owned by the caller. An
 * empty batch succeeds without writing. Errors: EINVAL (NULL, batch of
 * another db, SYNC_ON with disable_wal), EREADONLY (read-only db, even for
 * an empty batch), ENOENT (a family in the batch was
 * dropped; nothing written), ENOSPC (nothing written: below
 * min_free_bytes, the db stays usable; or RocksDB found no space to write
 * the WAL record, and the db is now fail-stop), EFAILSTOP, EUNKNOWN (the
 * write or sync failed: the batch may or may not be stored; the db is now
 * fail-stop). Blocks.
 */
troupe_err
troupe_db_write(troupe_db *db, troupe_batch *b, troupe_sync sync);

/* ---- reads ----------------------------------------------------------- */

/*
 * A consistent read view. Reads given a snapshot see the db as it was
 * when the snapshot was taken (on a read-only db: as it was at open,
 * like every read). Destroy before closing the db.
 * Errors: EINVAL, ENOMEM.
 */
troupe_err
troupe_snapshot_create(troupe_db *db, troupe_snapshot **out);
/* NULL is a no-op. Any thread, once no read uses it. */
void
troupe_snapshot_destroy(troupe_snapshot *s);

/*
 * Point read. snap may be NULL (latest). On OK *val is a copy the caller
 * frees with troupe_free() (non-NULL also for an empty value) and *val_len
 * its length; on error *val is NULL.
 * Errors: EINVAL (NULL, empty key, snapshot of another db), ETOOBIG (key),
 * ENOENT (absent key or dropped family), ECORRUPT, EIO, ENOMEM.
 * Blocks (a cache miss reads the disk).
 */
troupe_err
troupe_db_get(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
              const void *key, size_t key_len, void **val, size_t *val_len);

/*
 * n point reads in one call (one consistent view when snap is NULL too).
 * For each i: errs[i] is OK (vals[i] a troupe_free()-able copy, vals_len[i]
 * its length), ENOENT, ECORRUPT or EIO (vals[i] NULL). The call returns OK
 * when it ran (look at errs), or EINVAL/ETOOBIG/ENOENT (dropped family)/
 * ENOMEM having filled nothing. n == 0 is EINVAL. Blocks.
 */
troupe_err
troupe_db_multi_get(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
                    size_t n, const void *const *keys, const size_t *key_lens,
                    void **vals, size_t *val_lens, troupe_err *errs);

/*
 * The same reads of the latest state, but never touching the disk: served
 * from the memtables and the block cache, or answered EAGAIN when a block
 * they need is not in memory (then read again where blocking is allowed,
 * e.g. on a worker). For event-loop threads. In the multi-get, errs[i] may
 * be EAGAIN for some keys only. Otherwise as troupe_db_get and
 * troupe_db_multi_get. Never blocks on the disk.
 */
troupe_err
troupe_db_get_cached(troupe_db *db, troupe_cf *cf, const void *key,
                     size_t key_len, void **val, size_t *val_len);
troupe_err
troupe_db_multi_get_cached(troupe_db *db, troupe_cf *cf, size_t n,
                           const void *const *keys, const size_t *key_lens,
                           void **vals, size_t *val_lens, troupe_err *errs);

/* ---- ranges, iterators, pages ---------------------------------------- */

/*
 * A key range, either [start, end) or "every key that begins with prefix".
 * The bytes are borrowed for the duration of the call that takes the range.
 * start == NULL (or start_len == 0): from the first key. end == NULL: to
 * the last key. end non-NULL needs end_len >= 1 and start <= end. A prefix
 * range is [prefix, prefix_end(prefix)), where prefix_end drops trailing
 * 0xFF bytes and increments the last byte (no end when the prefix is empty
 * or all 0xFF); prefix_end is used for nothing else.
 */
typedef struct troupe_range {
    const void *start;
    size_t start_len;
    const void *end;
    size_t end_len;
    bool prefix; /* start/start_len is a prefix; end must be NULL */
} troupe_range;

void
troupe_range_init_bounds(troupe_range *r, const void *start, size_t start_len,
                         const void *end, size_t end_len);
void
troupe_range_init_prefix(troupe_range *r, const void *prefix,
                         size_t prefix_len);

/* One entry. The pointers' lifetime is given by whoever returns it. */
typedef struct troupe_kv {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *val;
    size_t val_len;
} troupe_kv;

/*
 * Cursor rules (shared by iterators and pages). `after` names the exact key
 * to continue after, normally the cursor of the previous page; NULL starts
 * at the beginning of the range (forward) or its end (reverse). Forward
 * continues at the first key >= after + 0x00, i.e. strictly after it;
 * reverse continues at the last key < after. The key need not exist any
 * more (it may have been deleted between pages). A cursor outside the range
 * is ERANGE; an empty one, or one longer than TROUPE_KEY_MAX, is EINVAL.
 */

/*
 * A streaming iterator over `range` of `cf` (range NULL: the whole family),
 * forward or reverse. snap may be NULL: the iterator then reads an implicit
 * snapshot taken now. Not thread-safe. Destroy before closing the db.
 * Errors: EINVAL, ERANGE, ENOENT (dropped family), ENOMEM.
 */
troupe_err
troupe_iter_create(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
                   const troupe_range *range, const void *after,
                   size_t after_len, bool reverse, troupe_iter **out);

/*
 * The same iterator, never touching the disk: troupe_iter_next answers
 * EAGAIN (and so on every later call) when the next entry needs a block
 * that is not in memory. For event-loop threads; on EAGAIN, scan again
 * where blocking is allowed.
 */
troupe_err
troupe_iter_create_cached(troupe_db *db, troupe_cf *cf,
                          const troupe_snapshot *snap,
                          const troupe_range *range, const void *after,
                          size_t after_len, bool reverse, troupe_iter **out);

/*
 * Next entry into *kv. The pointers in *kv stay valid until the next call
 * on this iterator or its destruction. Returns OK, ENOENT at the end of the
 * range (and on every later call), ECORRUPT (a corrupt block: the iteration
 * is over, never silently shortened), EIO, EAGAIN (cached iterators only),
 * EINVAL (NULL).
 * Blocks (may read the disk).
 */
troupe_err
troupe_iter_next(troupe_iter *it, troupe_kv *kv);

/* NULL is a no-op. */
void
troupe_iter_destroy(troupe_iter *it);

/*
 * One page of a scan: up to `limit` entries, in key order (descending when
 * reversed). The page is one allocation that owns every byte it points to;
 * all pointers stay valid until troupe_page_destroy.
 */
typedef struct troupe_page {
    size_t n; /* entries in items, 0..limit */
    const troupe_kv *items;
    /* Continue-after key: the last entry's key, or NULL when n == 0. */
    const uint8_t *cursor;
    size_t cursor_len;
    /* True when the range holds at least one entry past the cursor (in the
     * scan's view); false means this is the last page. */
    bool more;
} troupe_page;

/*
 * Reads one page of `range` after cursor `after` (see cursor rules above).
 * To read the next page, call again with the previous page's cursor (and,
 * for a stable view across pages, the same snapshot). limit 0 is EINVAL.
 * On OK *out is a page the caller destroys; on error *out is NULL and no
 * partial page exists. Errors: EINVAL, ERANGE, ENOENT (dropped family),
 * ECORRUPT, EIO, ENOMEM. Blocks.
 */
troupe_err
troupe_db_scan(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
               const troupe_range *range, const void *after, size_t after_len,
               size_t limit, bool reverse, troupe_page **out);

/* NULL is a no-op. */
void
troupe_page_destroy(troupe_page *p);

#endif
