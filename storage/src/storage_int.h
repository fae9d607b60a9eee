/*
 * Private to storage/src: the structs behind the opaque handles of
 * storage.h and commit.h, and the few functions shared across files.
 */
#ifndef TROUPE_STORAGE_INT_H
#define TROUPE_STORAGE_INT_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "troupe/commit.h"
#include "troupe/storage.h"

struct troupe_cf {
    troupe_db *db;
    rocksdb_column_family_handle_t *h;
    char *name;
    /* Set once by drop; the handle itself lives until close so that a
     * racing reader never touches freed memory. */
    atomic_bool dropped;
};

struct troupe_db {
    rocksdb_t *rdb;
    rocksdb_options_t *opts;
    rocksdb_block_based_table_options_t *topts;
    rocksdb_cache_t *cache;
    rocksdb_writeoptions_t *wo_sync;
    rocksdb_writeoptions_t *wo_nosync;
    rocksdb_readoptions_t *ro; /* latest view; shared read-only */
    /* latest view, block-cache tier: never reads the disk */
    rocksdb_readoptions_t *ro_cached;
    bool sync_default;
    bool disable_wal;
    bool wal_loss;
    atomic_bool failstop;
    /* Snapshots, iterators and commit pipelines alive: close needs 0. */
    atomic_size_t users;
    /* Guards cfs/ncfs/cfs_cap: lookups, create, drop, names. */
    pthread_mutex_t mu;
    troupe_cf **cfs; /* live and dropped, in open/create order */
    size_t ncfs;
    size_t cfs_cap;
};

struct troupe_batch {
    rocksdb_writebatch_t *wb;
    troupe_db *db;   /* bound by the first put/delete; NULL when empty */
    troupe_cf **cfs; /* distinct families touched */
    size_t ncfs;
    size_t cfs_cap;
    /* Pipeline fields: valid while the commit pipeline owns the batch. */
    struct troupe_batch *next;
    troupe_commit_cb cb;
    void *cb_arg;
    troupe_err result;
    bool sync;
};

struct troupe_snapshot {
    troupe_db *db;
    const rocksdb_snapshot_t *snap;
    rocksdb_readoptions_t *ro;
};

/*
 * The RocksDB adapter (rocks_err.c): translates an errptr string to a
 * troupe_err, logs "troupe storage: <what>: <detail>" to stderr, and frees
 * the string. An "IO error" becomes io_class (EIO on most paths).
 */
troupe_err
troupe__rocks_err(char *errptr, troupe_err io_class, const char *what);

/*
 * Writes wb through RocksDB with the fail-stop rule: EFAILSTOP when the db
 * already stopped; any RocksDB error sets fail-stop and returns EUNKNOWN.
 */
troupe_err
troupe__db_write_wb(troupe_db *db, rocksdb_writebatch_t *wb, bool sync);

/* Resolves a troupe_sync against the db's options: EINVAL for SYNC_ON
 * with disable_wal, or a value outside the enum. */
troupe_err
troupe__db_resolve_sync(const troupe_db *db, troupe_sync s, bool *sync);

/* ENOENT when a family the batch touched was dropped since. */
troupe_err
troupe__batch_check_cfs(const troupe_batch *b);

/* Encoded size of the batch (RocksDB's rep, header included). */
size_t
troupe__batch_bytes(const troupe_batch *b);

/* ENOENT for a dropped family, EINVAL for NULL or a foreign db. */
troupe_err
troupe__cf_check(const troupe_db *db, const troupe_cf *cf);

#endif
