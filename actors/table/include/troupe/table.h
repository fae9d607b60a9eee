/*
 * Tables: a catalog of named tables in one database, each served by a
 * table actor. Formats (catalog entry, row envelope, manifest, index keys)
 * are docs/data-model.md's.
 *
 * Objects and owners:
 *  - troupe_tables: one per db, created by troupe_tables_open and owned by
 *    the caller; stopped with troupe_tables_stop (or _stop_wait), then
 *    freed with troupe_tables_destroy. It borrows the catalog (and with
 *    it the runtime and db), commit pipeline and index function registry
 *    given in its options: they must outlive it (stop it before shutting
 *    the runtime down, and destroy it before stopping the catalog,
 *    destroying the pipeline and closing the db).
 *  - troupe_rows: the result of a read, owned by whoever receives it (the
 *    callback, or the caller of a _wait function) and freed with
 *    troupe_rows_destroy. Every pointer in it stays valid until then.
 *    Only troupe allocates one (it carries more than the struct shows):
 *    destroy the pointer handed out, never a copy of the struct.
 *
 * Threads. Every function may be called from any thread. Asynchronous
 * calls return at once; when they return OK their callback fires exactly
 * once, on scheduler 0 (the host's loop in embedded mode), also when the
 * request times out (ETIMEDOUT) or the runtime shuts down (ECLOSED); when
 * they return an error the callback never fires. Functions marked
 * "blocks" (the _wait twins, open, stop_wait) wait for the disk or for
 * scheduler 0: never call them on a loop thread of the runtime or of the
 * host (in embedded mode that would wait for the very loop it blocks).
 * The _wait twins of rows, queries and passes return EDEADLK, starting
 * nothing, when called on a troupe scheduler's thread or inside a troupe
 * callback (troupe_errmsg names the call); a host's own callbacks on its
 * loop are not seen.
 *
 * A table name that is not registered is ENOTABLE, an index name that the
 * table does not have ENOINDEX (a missing row stays ENOENT); a call that
 * finds that out before it returns leaves troupe_errmsg naming the name,
 * and a name that breaks the name rule leaves which rule (EINVAL).
 *
 * Reads (get, get_many, scan) see what is committed and need no actor: an
 * asynchronous read runs on the calling thread from memory (memtables and
 * block cache, never the disk) and its callback is posted to scheduler 0;
 * only a read that needs the disk goes to the table actor, which runs it
 * on a worker. A blocking read runs entirely on the calling thread, disk
 * included. Either way a read started after a write's callback sees that
 * write.
 * Catalog jobs (create, drop, index builds' bookkeeping) run one at a time,
 * in one order with every other change of the catalog (the queues'
 * creates and drops too), as short steps on the runtime's STORAGE lane; a
 * _wait form is the asynchronous one plus a wait on the calling thread,
 * and needs no turn of scheduler 0. A drop's waits for its table's work in
 * flight hold no worker, so any number of workers (one included) will do.
 *
 * Writes. insert (EEXIST when a live row exists), update (ENOENT when
 * none does), upsert and delete (ENOENT when no live row) write the row
 * envelope, its manifest and every index entry in one batch through the
 * commit pipeline; an error means nothing was written, except EUNKNOWN
 * (the write or its sync failed: it may or may not be stored). Writes to
 * one key are applied one after another in arrival order. Documents must
 * be msgpack maps (EPROTO otherwise). created_at / updated_at are set only
 * when the document already has them (data-model.md, "Timestamps"), and
 * not at all for a write whose troupe_write_opts.no_timestamps is set.
 * Errors of a write's callback: EEXIST, ENOENT, EPROTO, ECORRUPT (the
 * stored row and manifest disagree or are malformed: nothing written),
 * ECONSTRAINT (a unique index already holds the key for another row),
 * ESTATE (an insert, update or upsert of a table loaded from disk with a
 * function index whose function this process did not register: it cannot
 * maintain that index; deletes and reads work; register the function and
 * reopen, or drop that index), ETOOBIG, EFULL (pipeline full: retry
 * later), EUNKNOWN, EFAILSTOP, ENOSPC (the disk is below the database's
 * min_free_bytes: nothing written; writes work again once space is freed,
 * docs/storage.md "Full disk"), EIO, ENOMEM, ECLOSED, ETIMEDOUT.
 *
 * Expiry. A row written with expires_at_ms > 0 is invisible to every read
 * (and to insert/update/delete, which treat it as absent) once the clock
 * reaches that time. The clock is injectable (troupe_tables_opts).
 */
#ifndef TROUPE_TABLE_H
#define TROUPE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/hist.h"
#include "troupe/index.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"

/* Table names are 1..TROUPE_TABLE_NAME_MAX bytes of valid UTF-8 without
 * NUL (so every call takes them as C strings): the catalog's rule,
 * troupe_catalog_name_valid (troupe/catalog.h). */
#define TROUPE_TABLE_NAME_MAX TROUPE_CATALOG_NAME_MAX
/* Most rows one scan page or get_many may return / ask for. */
#define TROUPE_TABLE_PAGE_MAX 10000
/* The latency histograms of troupe_tables_stats: 1 us << i, to 8.4 s. */
#define TROUPE_TABLES_OP_NS_BASE 1000u
#define TROUPE_TABLES_OP_NS_BUCKETS 24u
/* Most indexes a table may declare at creation. */
#define TROUPE_TABLE_INDEX_MAX 64
/* troupe_tables_opts.version_reserve: its default and maximum. */
#define TROUPE_VERSION_RESERVE_DEFAULT (1ull << 24)
#define TROUPE_VERSION_RESERVE_MAX (1ull << 48)

typedef struct troupe_tables troupe_tables;

typedef struct troupe_tables_opts {
    /* borrowed; the tables' runtime and db are the catalog's */
    troupe_catalog *catalog;
    /* borrowed; a pipeline on the db; NULL, and only NULL, when the
     * catalog is read-only (troupe_tables_open) */
    troupe_commit *commit;
    const troupe_index_fns *fns; /* borrowed; may be NULL (no function
                                    indexes) */
    /* Unix ms for timestamps and expiry; NULL: troupe_now_ms. Called on
     * worker threads: must be thread-safe and must not block. */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    uint32_t timeout_ms; /* deadline of each request; 0: 30000 */
    /* Key-version TTL in microseconds, kept with pi_db's 1 ms quantum:
     * 0 disables eviction, 1..999 is 1 ms, larger values drop the part
     * below 1 ms (20999 is 20 ms). See troupe_tables_evict_versions. */
    uint64_t version_ttl_us;
    /* Key versions never repeat, also across opens: every version is
     * below a floor stored in meta, which open moves this far past the
     * stored one (one synced write) and a background write moves again
     * once half of it is used. 0: TROUPE_VERSION_RESERVE_DEFAULT (each
     * open skips that many versions); at most TROUPE_VERSION_RESERVE_MAX.
     * Small values are for tests: they make the floor writes frequent. */
    uint64_t version_reserve;
} troupe_tables_opts;

/* One row. key and doc (one msgpack map) point into the owning rows. */
typedef struct troupe_row {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *doc;
    size_t doc_len;
    int64_t expires_at_ms; /* 0: never */
} troupe_row;

typedef struct troupe_rows {
    size_t n;
    const troupe_row *rows;
    /* Scans: the cursor to continue after (troupe/cursor.h: it names
     * this table and the last row's exact key), NULL when n == 0; `more`
     * is true when the range holds another live row past it. Other
     * reads: NULL and false. */
    const uint8_t *cursor;
    size_t cursor_len;
    bool more;
} troupe_rows;

/* NULL is a no-op. Any thread. */
void
troupe_rows_destroy(troupe_rows *r);

/*
 * Opens the tables of o->catalog: moves the stored key-version floor
 * (synced: see version_reserve), loads every table entry of the catalog
 * and spawns one table actor per table, then holds every prepared XA
 * transaction again at its tables (troupe/xa.h) before it returns. On OK
 * *out owns the object.
 * Errors: EINVAL (NULL, missing option, version_reserve over its
 * maximum, a commit given on a read-only catalog), ESTATE (the catalog is
 * stopping), ECORRUPT (malformed catalog entry or version floor, or a
 * prepared XA record or resolved marker that does not decode: the
 * troupe_errmsg names the xid), the errors of troupe_db_write and
 * troupe_actor_spawn, EDEADLK (xids to hold again, on a thread of the
 * runtime or the host's loop: holding waits for the table actors),
 * ENOMEM. Blocks.
 *
 * Read-only (docs/embedding.md, "Opening read-only"): on a read-only
 * catalog (troupe_catalog_read_only) commit is NULL and the open writes
 * nothing: the version floor is read, not moved (version_reserve is
 * unused), and builds left unfinished are not resumed (their indexes stay
 * "building" and answer as such). Reads work as on a read-write open:
 * list, get, get_many, scan, index queries, counts and AND queries (on
 * ready indexes), index state and progress, stats; they see the database
 * as it was when its db was opened. Every call that would write fails at
 * the call with EREADONLY, troupe_errmsg naming it, and sends nothing:
 * insert, update, upsert, delete, create, drop, add_index,
 * rebuild_index, drop_index, evict_versions, purge_expired, and in txn.h
 * the buffering calls, a commit with writes, the versioned calls and
 * remove_by_index (their _wait twins too).
 */
troupe_err
troupe_tables_open(const troupe_tables_opts *o, troupe_tables **out);

typedef void (*troupe_tables_stop_cb)(troupe_tables *t, void *arg);

/*
 * Stops every table actor; requests in flight still get their replies.
 * Then cb(t, arg) runs once on scheduler 0 (directly on the stopping
 * actor's scheduler once scheduler 0 has closed at runtime shutdown). After it
 * fired, only troupe_tables_destroy may be called. New catalog calls fail
 * with ESTATE at once; creates, drops and index builds already running
 * finish first (their callbacks fire before cb), as does a background
 * write of the key-version floor. Errors: EINVAL (NULL t
 * or cb), ESTATE (already stopping; cb never fires). Any thread.
 */
troupe_err
troupe_tables_stop(troupe_tables *t, troupe_tables_stop_cb cb, void *arg);

/* Same, waiting until every actor stopped. Blocks. */
troupe_err
troupe_tables_stop_wait(troupe_tables *t);

/* Frees a stopped object (its stop callback has fired, or stop_wait
 * returned), with or without tables in it. NULL is a no-op; an object not
 * stopped is a programming error: abort(). */
void
troupe_tables_destroy(troupe_tables *t);

/* ---- catalog ---------------------------------------------------------- */

/*
 * Names of the live tables, sorted bytewise. *names is one allocation
 * (array and NUL-terminated strings) freed with troupe_free(). Errors:
 * EINVAL, ENOMEM, ESTATE (stopped). Never blocks on the disk.
 */
troupe_err
troupe_tables_list(troupe_tables *t, char ***names, size_t *n);

typedef void (*troupe_tables_cb)(troupe_tables *t, troupe_err err, void *arg);

/*
 * Creates table `name` with n_idx indexes (specs are copied
 * during the call; n_idx may be 0). Its families t.<id> and m.<id> and one
 * x.<index id> per index are created, then the catalog entry is written
 * synced. Idempotent: when the table exists with exactly these indexes
 * (same names and specs, in any order; their ids and build states aside)
 * cb reports OK and nothing is written. The call validates arguments and
 * index specs at once (errors returned, cb never fires); the disk work
 * runs on a worker and cb reports OK, EEXIST (the name is taken by a
 * table with other indexes: nothing changes), EIO, EFAILSTOP, ENOSPC, ENOMEM,
 * ECLOSED. Errors: EINVAL (NULL, bad name, bad spec, too many indexes,
 * duplicate index name, a function index whose function is not
 * registered in troupe_tables_opts.fns), EREADONLY (read-only tables:
 * troupe_tables_open), ESTATE (stopping), ENOMEM.
 */
troupe_err
troupe_tables_create(troupe_tables *t, const char *name,
                     const troupe_index_spec *idx, size_t n_idx,
                     troupe_tables_cb cb, void *arg);
/* Same, blocking; returns what cb would have reported. Blocks. */
troupe_err
troupe_tables_create_wait(troupe_tables *t, const char *name,
                          const troupe_index_spec *idx, size_t n_idx);

/*
 * Drops table `name`: removes it from the catalog at once for new
 * requests (ENOTABLE), stops its actor, deletes the catalog entry (synced)
 * and drops its families. cb reports OK, ENOTABLE (no such table), EIO,
 * EFAILSTOP, ENOSPC, ECLOSED (the runtime shut down before the table's
 * actor went idle: nothing is dropped, the table stays). Errors: EINVAL,
 * EREADONLY, ESTATE, ENOMEM.
 */
troupe_err
troupe_tables_drop(troupe_tables *t, const char *name, troupe_tables_cb cb,
                   void *arg);
/* Same, blocking. Blocks. */
troupe_err
troupe_tables_drop_wait(troupe_tables *t, const char *name);

/*
 * Adds an index to an existing table and builds it online: the index is
 * stored in the catalog as "building" (x.<id> created, the counter first),
 * every write from then on maintains it, and the table actor reindexes the
 * rows already there in batches of 64 keys, each row behind its key's
 * write queue, while reads and writes go on. Then the catalog says
 * "ready" and cb fires with OK. Idempotent: the table already has this
 * very index (same name and spec) and it is ready: cb reports OK and
 * nothing is written. cb errors: ENOTABLE (no such table, or dropped
 * during the build), EEXIST (the name is taken by an index of another
 * spec), EBUSY (another index of the table, or this same one, is
 * building), ECONSTRAINT (a unique index found two
 * rows with one key: the index is removed again), ECORRUPT (a row or
 * manifest is corrupt: removed too), ECLOSED (stopped during the build:
 * the catalog keeps it "building" and the next open builds it again),
 * EIO, EFAILSTOP, ENOSPC. Call errors: EINVAL (NULL, bad name or spec, a
 * function index whose function is not registered), EREADONLY, ESTATE,
 * ENOMEM.
 * troupe_tables_stop waits for a running build to finish.
 * Each step of 64 rows first stores the position reached (the last primary
 * key of the steps before it, all committed) under ("build", table id) in
 * meta; a build cut short (ECLOSED, or a crash) resumes after it at the
 * next open instead of starting over. EBUSY also covers a rebuild or a
 * drop of another index of the table that is still running.
 * A unique index under construction cannot see rows not yet reindexed, so
 * a write during the build may duplicate one of them; the build then
 * finds it and fails with ECONSTRAINT (as PostgreSQL's CREATE UNIQUE INDEX
 * CONCURRENTLY does), leaving the rows as they are.
 */
troupe_err
troupe_tables_add_index(troupe_tables *t, const char *table,
                        const troupe_index_spec *spec, troupe_tables_cb cb,
                        void *arg);
/* Same, blocking until the build is done. Blocks. */
troupe_err
troupe_tables_add_index_wait(troupe_tables *t, const char *table,
                             const troupe_index_spec *spec);

/*
 * Rebuilds index `index` of `table` online, to repair what verify found
 * (troupe_index_verify_step): the index gets a fresh id and an empty
 * family x.<new id> and is built exactly as add_index builds one (state
 * "building": queries on it fail with ESTATE until cb fires; writes
 * maintain it meanwhile; steps of 64 rows; resumable). Rewriting each
 * row's manifest drops the old id's keys from it, and once every row is
 * done the old family (with every orphan or stale entry in it) is
 * dropped. The catalog entry lists the old id under "dropped" until then,
 * so an interrupted rebuild resumes at open. cb errors: as add_index;
 * ECONSTRAINT (the rows hold a duplicate for a unique index) and ECORRUPT
 * remove the index altogether, as a failed add does (both families go;
 * manifests of rows reached keep keys naming them, which writes drop).
 * Call errors (nothing written, cb never fires): EINVAL (NULL, bad table
 * name, index name not 1..255 bytes), ENOTABLE (no such table), ENOINDEX
 * (no such index),
 * EBUSY (a build, rebuild or drop of this table is running), EREADONLY,
 * ESTATE, ENOMEM.
 */
troupe_err
troupe_tables_rebuild_index(troupe_tables *t, const char *table,
                            const char *index, troupe_tables_cb cb, void *arg);
/* Same, blocking until the rebuild is done. Blocks. */
troupe_err
troupe_tables_rebuild_index_wait(troupe_tables *t, const char *table,
                                 const char *index);

/*
 * Drops index `index` of `table`. As soon as the catalog job runs (before
 * cb), the index is gone for everyone: queries on it fail with ENOINDEX,
 * writes no longer maintain it, and a unique index no longer constrains.
 * Then a sweep rewrites every row's manifest without its keys, in steps of
 * 64 rows while reads and writes go on (the id stays in the catalog
 * entry's "dropped" list meanwhile, and an interrupted sweep resumes at
 * open), and finally its family x.<id> is dropped and cb fires with OK.
 * Until then verify reports the keys still listed as UNKNOWN_INDEX. cb
 * errors: ENOTABLE (table dropped meanwhile), ECORRUPT (a corrupt row or
 * manifest stopped the sweep: the family is dropped anyway and the keys
 * left in manifests are dropped by later writes), ECLOSED, EIO, EFAILSTOP,
 * ENOSPC. Call errors as rebuild_index.
 */
troupe_err
troupe_tables_drop_index(troupe_tables *t, const char *table, const char *index,
                         troupe_tables_cb cb, void *arg);
/* Same, blocking until the sweep is done. Blocks. */
troupe_err
troupe_tables_drop_index_wait(troupe_tables *t, const char *table,
                              const char *index);

/* Whether index `index` of `table` is ready (false: building), for
 * queries to refuse a building index. Errors: EINVAL, ENOTABLE (no such
 * table), ENOINDEX (no such index), ESTATE (stopped), each with its
 * detail (troupe_errmsg). Never blocks on the disk. */
troupe_err
troupe_tables_index_state(troupe_tables *t, const char *table,
                          const char *index, bool *ready);

/* How far the build of an index has come (add_index, rebuild_index, or a
 * build resumed at open). */
typedef struct troupe_index_progress {
    /* the index's id in the catalog (its family is x.<id>); a rebuild
     * gives it a new one */
    uint64_t index_id;
    /* the index is ready (read before the figures: a ready index's build,
     * if known, has ended with done == total) */
    bool ready;
    /* a build of this index ran in this open: the figures below are its;
     * false: all zero */
    bool known;
    bool running; /* that build is still walking the table */
    /* rows reindexed so far (a resumed build: since it resumed) */
    uint64_t done;
    /* the table's rows as RocksDB estimated them at the start (never
     * below done; done itself once the build ended with OK) */
    uint64_t total;
    uint64_t elapsed_ms; /* since it started; to its end once over */
    troupe_err err;      /* its outcome once over; OK while running */
} troupe_index_progress;

/*
 * Fills *out for index `index` of `table` (asks the table's actor).
 * Errors: EINVAL (NULL, bad name), ENOTABLE (no such table), ENOINDEX
 * (no such index), EDEADLK (on a troupe thread),
 * ESTATE (stopped), ETIMEDOUT, ENOMEM. Blocks (briefly: the actor
 * answers from memory).
 */
troupe_err
troupe_tables_index_progress_wait(troupe_tables *t, const char *table,
                                  const char *index,
                                  troupe_index_progress *out);

/* ---- index queries ---------------------------------------------------- */

/*
 * A query (or count) on index `index` of `table`, answered by the table's
 * index actor (troupe/index.h describes q; the catalog supplies the
 * table's current index list). The callback owns *res (NULL on error)
 * and frees it with troupe_index_result_destroy. cb errors: those of a
 * query (ESTATE while the index is still building, and the rest that
 * troupe/index.h lists), ENOINDEX (no such index), ETIMEDOUT, ECLOSED.
 * Call errors: EINVAL (NULL, bad names, limit 0), EPROTO (q's values not
 * msgpack), ENOTABLE (no such table), ESTATE (stopping), ENOMEM.
 */
typedef void (*troupe_tables_query_cb)(troupe_err err, troupe_index_result *res,
                                       void *arg);
typedef void (*troupe_tables_count_cb)(troupe_err err, uint64_t n, void *arg);
troupe_err
troupe_tables_query(troupe_tables *t, const char *table, const char *index,
                    const troupe_index_query *q, troupe_tables_query_cb cb,
                    void *arg);
troupe_err
troupe_tables_count(troupe_tables *t, const char *table, const char *index,
                    const troupe_index_query *q, troupe_tables_count_cb cb,
                    void *arg);
/* Blocking twins; *out / *n are set on OK (*out NULL, *n 0 otherwise).
 * Block. */
troupe_err
troupe_tables_query_wait(troupe_tables *t, const char *table, const char *index,
                         const troupe_index_query *q,
                         troupe_index_result **out);
troupe_err
troupe_tables_count_wait(troupe_tables *t, const char *table, const char *index,
                         const troupe_index_query *q, uint64_t *n);

/*
 * AND of two indexes of one table (mokuroku's query_all_keys): the primary
 * keys that both `qa` on index_a and `qb` on index_b match, ascending,
 * deduplicated, at most `limit`, continuing strictly after the primary key
 * `after` (the previous result's cursor; NULL: from the start). Only
 * values / from / to of qa and qb are used; hits carry pk only. Each side
 * may match at most TROUPE_INDEX_AND_MAX entries (ETOOBIG beyond). Runs on
 * the calling thread. Errors: EINVAL (NULL, limit 0, bad query), ENOTABLE,
 * ENOINDEX, ESTATE (an index still building, or stopped), ETOOBIG,
 * ECORRUPT, EIO, ENOMEM, EDEADLK. Blocks.
 */
troupe_err
troupe_tables_query_and_wait(troupe_tables *t, const char *table,
                             const char *index_a, const troupe_index_query *qa,
                             const char *index_b, const troupe_index_query *qb,
                             const void *after, size_t after_len, size_t limit,
                             troupe_index_result **out);

/* ---- rows ------------------------------------------------------------- */

/* rows is NULL for writes and on error; otherwise the callback owns it. */
typedef void (*troupe_table_cb)(troupe_err err, troupe_rows *rows, void *arg);

typedef struct troupe_write_opts {
    troupe_sync sync;      /* DEFAULT: the db's option */
    int64_t expires_at_ms; /* 0: never expires */
    /* true: created_at / updated_at are stored as the document has them
     * (no stamping, not even of a stored created_at kept on update);
     * false (the default): the rule of "Timestamps" in data-model.md. */
    bool no_timestamps;
} troupe_write_opts;

/*
 * Row calls name the table by `table` (NUL-terminated). Keys are
 * 1..TROUPE_KEY_MAX bytes; wo may be NULL (defaults). The call itself
 * returns EINVAL (NULL, empty key, negative expiry), ETOOBIG (key or
 * document over its limit), EPROTO (doc is not one well-formed msgpack
 * object), EREADONLY (a write on read-only tables: troupe_tables_open),
 * ENOTABLE (no such table), ESTATE (stopping), ENOMEM; then cb never
 * fires. Otherwise cb gets the outcome listed at the top.
 */
troupe_err
troupe_table_insert(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const void *doc, size_t dlen,
                    const troupe_write_opts *wo, troupe_table_cb cb, void *arg);
troupe_err
troupe_table_update(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const void *doc, size_t dlen,
                    const troupe_write_opts *wo, troupe_table_cb cb, void *arg);
troupe_err
troupe_table_upsert(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const void *doc, size_t dlen,
                    const troupe_write_opts *wo, troupe_table_cb cb, void *arg);
/* wo->expires_at_ms is ignored. */
troupe_err
troupe_table_delete(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const troupe_write_opts *wo,
                    troupe_table_cb cb, void *arg);

/* The live row at key: rows->n == 1; or ENOENT (absent or expired),
 * ECORRUPT (malformed envelope), EIO. */
troupe_err
troupe_table_get(troupe_tables *t, const char *table, const void *key,
                 size_t klen, troupe_table_cb cb, void *arg);

/* The live rows among keys[0..n) (0..TROUPE_TABLE_PAGE_MAX), in the order
 * asked, absent and expired ones left out; ECORRUPT fails the call. n == 0
 * (keys and klens may then be NULL) is an empty result: rows->n == 0, cb
 * fires as for any read; the table must still exist (ENOTABLE). */
troupe_err
troupe_table_get_many(troupe_tables *t, const char *table,
                      const void *const *keys, const size_t *klens, size_t n,
                      troupe_table_cb cb, void *arg);

/* A bounded scan over [start, end) (NULL start: from the first key; NULL
 * end: to the last), forward or reverse. */
typedef struct troupe_scan_opts {
    const void *start;
    size_t start_len;
    const void *end;
    size_t end_len;
    /* The previous page's cursor (a scan of this table or a transaction's
     * scan of it: it names the table and the exact key to continue
     * after); NULL: from the start (forward) or end (reverse) of the
     * range. A cursor of another table (or of a dropped table of that
     * name), of another kind of page, or malformed is ERANGE. */
    const void *after;
    size_t after_len;
    size_t limit; /* 1..TROUPE_TABLE_PAGE_MAX; 0 is EINVAL */
    bool reverse;
} troupe_scan_opts;

/*
 * Up to limit live rows in key order (descending when reverse); expired
 * rows are skipped. The call returns EINVAL for limit 0 or over the
 * maximum, an empty (start == end) or inverted range, a pointer and
 * length that disagree; ERANGE for a cursor that is not one of this
 * table's. cb errors: ERANGE
 * (cursor outside the range), ECORRUPT (a malformed row: the page fails,
 * it is never shortened), EIO.
 */
troupe_err
troupe_table_scan(troupe_tables *t, const char *table,
                  const troupe_scan_opts *so, troupe_table_cb cb, void *arg);

/*
 * Blocking twins: same arguments minus the callback; they return what the
 * callback would get and, for reads, hand *rows (may be NULL for writes)
 * to the caller. On error *rows is NULL. Block.
 */
troupe_err
troupe_table_insert_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo);
troupe_err
troupe_table_update_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo);
troupe_err
troupe_table_upsert_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo);
troupe_err
troupe_table_delete_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const troupe_write_opts *wo);
troupe_err
troupe_table_get_wait(troupe_tables *t, const char *table, const void *key,
                      size_t klen, troupe_rows **rows);
troupe_err
troupe_table_get_many_wait(troupe_tables *t, const char *table,
                           const void *const *keys, const size_t *klens,
                           size_t n, troupe_rows **rows);
troupe_err
troupe_table_scan_wait(troupe_tables *t, const char *table,
                       const troupe_scan_opts *so, troupe_rows **rows);

/* ---- key-version TTL and counters ----------------------------------- */

typedef struct troupe_vevict_result {
    uint64_t evicted; /* records removed by the pass */
    uint32_t batches; /* non-empty batches it took */
    uint32_t largest; /* the largest batch (<= 256) */
} troupe_vevict_result;

typedef void (*troupe_vevict_cb)(troupe_err err, const troupe_vevict_result *r,
                                 void *arg);

/*
 * One eviction pass over the key-version records of `table` (the TTL
 * scanner, troupe/ttl.h, runs these on a timer). A record is evicted when
 * the TTL (troupe_tables_opts.version_ttl_us) has passed since its version
 * was last published (never earlier: a TTL is a minimum) and no running
 * transaction (begun, not yet destroyed) began before that version. The
 * pass works in batches of at most 256 records, each one message of the
 * table actor, so other requests run between them. With the TTL off it
 * evicts nothing. r (borrowed for the callback) says what it did. cb
 * errors: EBUSY (a pass of this table is running), ECLOSED, ETIMEDOUT.
 * Call errors: EINVAL (NULL, bad name), EREADONLY (read-only tables),
 * ENOTABLE (no such table), ESTATE, ENOMEM. Any thread.
 */
troupe_err
troupe_tables_evict_versions(troupe_tables *t, const char *table,
                             troupe_vevict_cb cb, void *arg);
/* Same, blocking; *r is zeroed on error. Blocks. */
troupe_err
troupe_tables_evict_versions_wait(troupe_tables *t, const char *table,
                                  troupe_vevict_result *r);

typedef struct troupe_purge_result {
    uint64_t scanned; /* rows looked at */
    uint64_t purged;  /* expired rows deleted */
    uint32_t steps;   /* scan steps of at most 256 rows each */
} troupe_purge_result;

typedef void (*troupe_purge_cb)(troupe_err err, const troupe_purge_result *r,
                                void *arg);

/*
 * One pass that deletes the expired rows of `table` (expires_at_ms > 0 and
 * <= the clock): it scans the rows in steps of at most 256 on a worker and
 * deletes each expired one behind its key's write lock, its row, manifest
 * and index entries in one batch, and only if the row is still there and
 * still expired then (a write since the scan may have renewed it). The
 * next step starts once every delete of this one finished. Expired rows
 * are invisible to reads already; this frees their space. r (borrowed for
 * the callback) says what it did. cb errors: EBUSY (a pass of this table
 * is running), ECLOSED, EIO, EFAILSTOP, ENOSPC, ECORRUPT (a manifest of an
 * expired row is malformed: that row stays), EUNKNOWN, ENOMEM, ETIMEDOUT. Call
 * errors: EINVAL (NULL, bad name), EREADONLY (read-only tables), ENOTABLE
 * (no such table), ESTATE, ENOMEM. Any thread.
 */
troupe_err
troupe_tables_purge_expired(troupe_tables *t, const char *table,
                            troupe_purge_cb cb, void *arg);
/* Same, blocking; *r is zeroed on error. Blocks. */
troupe_err
troupe_tables_purge_expired_wait(troupe_tables *t, const char *table,
                                 troupe_purge_result *r);

typedef struct troupe_table_stats {
    const char *name;         /* into the owning troupe_tables_stats */
    uint64_t version_records; /* key-version records in memory */
    uint64_t version_bytes;   /* their estimated heap bytes (record and
                                 key; not allocator rounding or buckets) */
    uint64_t version_evicted; /* records evicted since open */
} troupe_table_stats;

/* Counters since troupe_tables_open (version records and counters live
 * in memory only and start afresh on every open; versions themselves
 * never repeat: see version_reserve). */
typedef struct troupe_tables_stats {
    uint64_t qver_ok; /* troupe_txn_query_version callbacks, by result */
    uint64_t qver_failed;
    uint64_t vprepare_ok; /* versioned commits: prepare phase by result */
    uint64_t vprepare_failed;
    uint64_t vcommit_ok; /* and the commit phase of those prepared */
    uint64_t vcommit_failed;
    uint64_t txn_created; /* troupe_txn_begin successes */
    uint64_t txn_closed;  /* troupe_txn_destroy calls */
    uint64_t txn_running; /* begun and not yet destroyed */
    /* troupe_txn_commit and troupe_txn_commit_version callbacks by result
     * (failed: any error but a conflict) */
    uint64_t commit_ok;
    uint64_t commit_conflict;
    uint64_t commit_failed;
    /* Latencies in nanoseconds from a call that returned OK to its
     * callback (a blocking twin: to its return), of every table: get and
     * get_many; insert, update, upsert and delete; scan; index query and
     * count; transaction commits. Buckets from
     * TROUPE_TABLES_OP_NS_BASE, TROUPE_TABLES_OP_NS_BUCKETS of them. */
    troupe_hist_snapshot get_ns;
    troupe_hist_snapshot write_ns;
    troupe_hist_snapshot scan_ns;
    troupe_hist_snapshot query_ns;
    troupe_hist_snapshot commit_ns;
    size_t n; /* tables, sorted by name */
    troupe_table_stats *tables;
} troupe_tables_stats;

/*
 * Reads the counters and asks every table actor for its records. On OK
 * *out is owned by the caller (troupe_tables_stats_destroy). Errors:
 * EINVAL, ESTATE (stopped), ENOMEM, ETIMEDOUT. Blocks.
 */
troupe_err
troupe_tables_stats_wait(troupe_tables *t, troupe_tables_stats **out);
/* NULL is a no-op. Any thread. */
void
troupe_tables_stats_destroy(troupe_tables_stats *s);

#endif
