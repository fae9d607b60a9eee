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
#include <stdint.h>

#include "troupe/commit.h"
#include "troupe/storage.h"

/*
 * A key bound (bound.c): the first 16 bytes of a key, zero-padded, as a
 * big-endian 128-bit number in two halves. If bound(k) > bound(x), then
 * k > x bytewise (they differ within 16 bytes, or x is a prefix of k).
 */
typedef struct troupe_kbound {
    uint64_t hi, lo;
    bool any; /* false: no key at all, below every key */
} troupe_kbound;

struct troupe_cf {
    troupe_db *db;
    rocksdb_column_family_handle_t *h;
    char *name;
    /* Set once by drop; the handle itself lives until close so that a
     * racing reader never touches freed memory. */
    atomic_bool dropped;
    /* The db is read-only: a copy here, so that a batch refuses the
     * family without touching the db's cache lines. */
    bool read_only;
    /* The bound of the largest key the family may hold: of its last key
     * at open or create, raised before every write that puts a key above
     * it (troupe__batch_raise_bounds), never lowered. A point read of a
     * key above it is ENOENT without RocksDB (bound.c). Writers hold
     * bound_mu; readers use the sequence (odd while a raise runs). */
    pthread_mutex_t bound_mu;
    _Atomic uint64_t bound_seq;
    _Atomic uint64_t bound_hi, bound_lo;
    atomic_bool bound_any;
};

/*
 * The free-space gate and the reserve file of one db (space.c). Writes are
 * admitted while the filesystem holding the db has at least min_free bytes
 * available (0: no gate); the reserve file is released when RocksDB runs
 * out of space.
 */
#define TROUPE_RESERVE_FILE "TROUPE-RESERVE"

typedef struct troupe_space {
    const troupe_logger *log; /* the db's */
    char *dir;
    char *reserve_path;
    uint64_t min_free;
    uint64_t reserve_bytes;
    pthread_mutex_t mu; /* one statvfs at a time; reserve create, release */
    _Atomic int64_t next_ns; /* CLOCK_MONOTONIC_COARSE: next statvfs due */
    _Atomic int64_t budget;  /* bytes admitted before the next statvfs */
    atomic_bool low;         /* the last statvfs found < min_free */
    atomic_bool have_reserve;
    bool ready; /* init done: fini has something to free */
} troupe_space;

troupe_err
troupe__space_init(troupe_space *s, const troupe_logger *log, const char *dir,
                   uint64_t min_free, uint64_t reserve_bytes);
void
troupe__space_fini(troupe_space *s);
/* ENOSPC when a write of `bytes` would leave less than min_free (nothing
 * may be written then), else OK. Any thread; usually no system call. */
troupe_err
troupe__space_admit(troupe_space *s, uint64_t bytes);
/* Whether writes are being refused now: a relaxed load while they are
 * not (a submit's check, about a nanosecond), troupe__space_admit's
 * verdict while they are (so that freed space is noticed). */
bool
troupe__space_refusing(troupe_space *s);
/* RocksDB's open failed with ENOSPC: deletes the reserve file if there is
 * one (true: then try the open again). */
bool
troupe__space_release_for_open(troupe_space *s);
/* After a successful open: keeps a whole reserve file, or makes one when
 * the filesystem has room for it twice over above min_free (deletes it
 * when reserve_bytes is 0). */
void
troupe__space_after_open(troupe_space *s);
/* RocksDB reported ENOSPC: delete the reserve so close and reopen find
 * room. */
void
troupe__space_release(troupe_space *s);
/* Whether the filesystem has min_free + bytes available now (statvfs). */
bool
troupe__space_room_for(troupe_space *s, uint64_t bytes);

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
    rocksdb_logger_t *rlog; /* RocksDB's info log (rocks_log.cc) */
    troupe_logger log;      /* opts.logger: the engine's records */
    troupe_space space;
    bool sync_default;
    bool disable_wal;
    /* Opened read-only (a RocksDB secondary instance that never catches
     * up: the view is the database as it was at open). */
    bool read_only;
    char *secondary_dir; /* its private directory, removed at close */
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
    troupe_db *db;       /* bound by the first put/delete; NULL when empty */
    troupe_cf **cfs;     /* distinct families touched */
    troupe_kbound *puts; /* [i]: bound of the keys put in cfs[i] */
    size_t ncfs;
    size_t cfs_cap;
    /* Pipeline fields: valid while the commit pipeline owns the batch. */
    struct troupe_batch *next;
    troupe_commit_cb cb;
    void *cb_arg;
    troupe_err result;
    size_t pipe_bytes; /* encoded size at submit (the byte budget) */
    bool sync;
};

struct troupe_snapshot {
    troupe_db *db;
    const rocksdb_snapshot_t *snap;
    rocksdb_readoptions_t *ro;
};

/* Key bounds (bound.c). */
void
troupe__kbound_of(const void *key, size_t len, troupe_kbound *out);
/* *acc = the larger of *acc and the key's bound. */
void
troupe__kbound_max(troupe_kbound *acc, const void *key, size_t len);
/* Sets cf's bound from its last key (blocking; at open and create). A
 * family whose last key cannot be read gets the highest bound: no key is
 * ever above it, so reads always ask RocksDB. */
void
troupe__cf_bound_init(troupe_cf *cf);
void
troupe__cf_bound_fini(troupe_cf *cf);
/* Raises cf's bound to at least *b. Before the write that stores b's key. */
void
troupe__cf_bound_raise(troupe_cf *cf, const troupe_kbound *b);
/* Whether key is above every key cf holds: then it is absent. */
bool
troupe__cf_above(troupe_cf *cf, const void *key, size_t len);
/* Raises the bounds of every family b puts keys in. Before writing b. */
void
troupe__batch_raise_bounds(const troupe_batch *b);

/*
 * The RocksDB adapter (rocks_err.c): translates an errptr string to a
 * troupe_err, logs "<what>: <detail>" through lg (ERROR for a failing
 * disk or corrupt data, WARN otherwise; nothing for EAGAIN), and frees
 * the string. An "IO error" becomes io_class (EIO on most paths), except
 * that running out of space while writing data (an append, a pwrite, the
 * creation of a file: the bytes never reached the file) is ENOSPC.
 */
troupe_err
troupe__rocks_err(const troupe_logger *lg, char *errptr, troupe_err io_class,
                  const char *what);

/* Whether errptr is RocksDB's "No space left on device" (any call). */
bool
troupe__rocks_nospace(const char *errptr);

/*
 * A change (write, flush, family create or drop) failed in RocksDB with
 * errptr: the db goes fail-stop, the reserve is released when the disk is
 * full, and the error is translated (io_class for I/O errors; see
 * troupe__rocks_err) and freed.
 */
troupe_err
troupe__db_change_failed(troupe_db *db, char *errptr, troupe_err io_class,
                         const char *what);

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
