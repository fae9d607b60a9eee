/*
 * Opening, closing and column families of a troupe_db; the fail-stop
 * write path every write goes through.
 *
 * WAL recovery. RocksDB's default, kPointInTimeRecovery, opens a database
 * whose WAL holds a corrupt record by silently dropping that record and
 * every one after it; the only trace is a LOG warning (measured on 7.8.3:
 * one flipped byte mid-WAL lost half of 2,200 keys). An engine under a
 * transaction layer must not lose acknowledged commits without saying so.
 * So the first open uses kTolerateCorruptedTailRecords, which accepts only
 * a torn tail (a last record cut short, as a crash leaves it) and refuses
 * anything else with "Corruption". That refusal is ECORRUPT, and the
 * directory is left untouched for the operator. Only when the caller set
 * accept_wal_loss do we reopen with kPointInTimeRecovery and remember that
 * records were dropped (troupe_db_wal_loss). Repair is never run: on
 * 7.8.3 it "succeeded" after losing 2,000 of 2,200 keys.
 *
 * Fail-stop. After a failed write or sync the state of the WAL and of the
 * page cache is unknown (Linux may have dropped the dirty pages that
 * failed), and RocksDB itself keeps a sticky background error. Retrying
 * the sync could report success for data that is gone, as PostgreSQL
 * learned in 2018. So the first failure flips `failstop`, every later
 * write returns EFAILSTOP, and the way out is close and reopen, where
 * RocksDB's recovery decides what the WAL holds.
 *
 * Column family handles are never destroyed before close, even after a
 * drop: a reader racing the drop then gets ENOENT or RocksDB's answer, not
 * freed memory. Debian's RocksDB is built with assertions, and closing the
 * DB before destroying the handles aborts, so close destroys them first.
 *
 * A full disk (docs/storage.md, "Full disk"). Debian's assertion-enabled
 * RocksDB aborts the process on the log line after a failed write to its
 * own info LOG, so the info log is ours (rocks_log.cc) and cannot fail
 * that way. Writes are refused with ENOSPC while the filesystem has less
 * than min_free_bytes (space.c), which keeps room for RocksDB's flushes,
 * close and reopen; if RocksDB runs out anyway, the reserve file is
 * deleted to make that room. Three RocksDB defaults would eat it:
 *  - WAL preallocation: each new WAL is fallocate'd in blocks of 1.1 x
 *    write_buffer_size (~70 MB with the 64 MB default; ext4 keeps a
 *    partial allocation when it fails), and 7.8 offers no bound that does
 *    not also force memtable flushes (max_total_wal_size,
 *    db_write_buffer_size). Synced writes measured the same without it
 *    (docs/storage.md), so allow_fallocate is off (for tables files and
 *    the MANIFEST too);
 *  - the flush at recovery: a reopen would write the whole replayed WAL
 *    into table files before it returns, needing as much free space as
 *    the WAL holds; avoid_flush_during_recovery keeps the replayed data in
 *    the memtables (and its WAL until they flush), so a reopen needs only
 *    a new MANIFEST, OPTIONS file and WAL. The open then flushes itself,
 *    as RocksDB would have, when the filesystem has room for what the WAL
 *    holds (reopen_flush): otherwise every open would add a WAL that the
 *    next one replays again, and a database reopened often but written
 *    little would replay more at each open;
 *  - fail_if_options_file_error stays false (7.8's default, set so that a
 *    later default cannot change it): a column family whose OPTIONS file
 *    could not be rewritten still exists, and an error there would leave
 *    a created family behind an error.
 *
 * The directory is checked before RocksDB sees it: RocksDB reports a path
 * that is a plain file, or one it may not write, as an "IO error", which
 * would read as a failing disk. *
 * Read-only (opts.read_only) is a RocksDB secondary instance that never
 * catches up with its primary, not RocksDB's read-only open. Both open a
 * database a running node holds (neither takes the LOCK) and neither
 * writes in its directory (compared file by file before and after). But
 * measured on 7.8.3 against a writer that flushes and compacts every few
 * milliseconds, the read-only open failed in 36 of 60 tries ("IO error:
 * No such file or directory" for a WAL, or, worse, "Corruption: ... No
 * such file" for a table file the writer had just compacted away, which
 * would read as ECORRUPT), while the secondary open succeeded in 60 of
 * 60. So: secondary, with max_open_files -1, which keeps every table
 * file open from the start, so that files compacted away after the open
 * stay readable (a scan 7.5 s later, 270k keys rewritten meanwhile, read
 * the view of the open whole). Never catching up keeps the view fixed at
 * the open: every read sees the same state, which is also what a
 * snapshot would see, so snapshots need no RocksDB snapshot (which a
 * secondary refuses for iterators). The secondary wants a directory of
 * its own (for its info log): a fresh one under $TMPDIR, removed at
 * close; the info log itself is forwarded to the db's logger
 * (rocks_log.cc), so nothing is written there either.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rocks_log.h"
#include "storage_int.h"
#include "troupe/alloc.h"

#define DEFAULT_BLOCK_CACHE (32u * 1024u * 1024u)
/* Set on every db's options; see "A full disk" above. */
#define FULL_DISK_OPTIONS                                                      \
    "allow_fallocate=false;avoid_flush_during_recovery=true;"                  \
    "fail_if_options_file_error=false"

void
troupe_db_opts_init(troupe_db_opts *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof(*o));
    o->create_if_missing = true;
    o->sync = true;
    o->min_free_bytes = TROUPE_DB_MIN_FREE_DEFAULT;
    o->reserve_bytes = TROUPE_DB_RESERVE_DEFAULT;
}

static bool
cf_name_ok(const char *name)
{
    if (name == NULL)
        return false;
    size_t n = strnlen(name, TROUPE_CF_NAME_MAX + 1);
    return n >= 1 && n <= TROUPE_CF_NAME_MAX;
}

/* Caller holds db->mu. Live families only. */
static troupe_cf *
cf_find_locked(troupe_db *db, const char *name)
{
    for (size_t i = 0; i < db->ncfs; i++) {
        troupe_cf *cf = db->cfs[i];
        if (!atomic_load(&cf->dropped) && strcmp(cf->name, name) == 0)
            return cf;
    }
    return NULL;
}

/* Caller holds db->mu (or is open, before anyone else sees db). Takes h. */
static troupe_err
cf_add_locked(troupe_db *db, const char *name,
              rocksdb_column_family_handle_t *h, troupe_cf **out)
{
    if (db->ncfs == db->cfs_cap) {
        size_t cap = db->cfs_cap ? db->cfs_cap * 2 : 8;
        troupe_cf **v = troupe_realloc(db->cfs, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        db->cfs = v;
        db->cfs_cap = cap;
    }
    troupe_cf *cf = troupe_calloc(1, sizeof(*cf));
    char *nm = troupe_strdup(name);
    if (cf == NULL || nm == NULL) {
        troupe_free(cf);
        troupe_free(nm);
        return TROUPE_ENOMEM;
    }
    cf->db = db;
    cf->h = h;
    cf->name = nm;
    cf->read_only = db->read_only;
    atomic_init(&cf->dropped, false);
    troupe__cf_bound_init(cf);
    db->cfs[db->ncfs++] = cf;
    if (out != NULL)
        *out = cf;
    return TROUPE_OK;
}

/* Removes the secondary instance's private directory and what RocksDB
 * put in it (nothing but files: it is ours alone). */
static void
secondary_dir_remove(const char *sdir)
{
    if (sdir == NULL)
        return;
    DIR *d = opendir(sdir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                (void)unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    }
    (void)rmdir(sdir);
}

/*
 * A read-only open is a RocksDB secondary instance, which wants a
 * directory of its own; a fresh one under $TMPDIR (or /tmp), so that
 * nothing is written in the db's directory.
 */
static troupe_err
secondary_dir_make(troupe_db *db)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0')
        tmp = "/tmp";
    size_t n = strlen(tmp) + sizeof("/troupe-secondary-XXXXXX");
    char *p = troupe_malloc(n);
    if (p == NULL)
        return TROUPE_ENOMEM;
    snprintf(p, n, "%s/troupe-secondary-XXXXXX", tmp);
    if (mkdtemp(p) == NULL) {
        troupe_log_fields(&db->log, TROUPE_LOG_WARN, "storage",
                          (troupe_log_field[]){{"dir", tmp}}, 1,
                          "read-only open: cannot make a directory for the "
                          "secondary instance under %s: %s",
                          tmp, strerror(errno));
        troupe_free(p);
        return TROUPE_ESYS;
    }
    db->secondary_dir = p;
    return TROUPE_OK;
}

static void
db_free(troupe_db *db)
{
    /* RocksDB's close writes to the info log: the logger outlives it. */
    for (size_t i = 0; i < db->ncfs; i++) {
        if (db->cfs[i]->h != NULL)
            rocksdb_column_family_handle_destroy(db->cfs[i]->h);
    }
    if (db->rdb != NULL)
        rocksdb_close(db->rdb);
    for (size_t i = 0; i < db->ncfs; i++) {
        troupe__cf_bound_fini(db->cfs[i]);
        troupe_free(db->cfs[i]->name);
        troupe_free(db->cfs[i]);
    }
    troupe_free(db->cfs);
    if (db->wo_sync != NULL)
        rocksdb_writeoptions_destroy(db->wo_sync);
    if (db->wo_nosync != NULL)
        rocksdb_writeoptions_destroy(db->wo_nosync);
    if (db->ro != NULL)
        rocksdb_readoptions_destroy(db->ro);
    if (db->ro_cached != NULL)
        rocksdb_readoptions_destroy(db->ro_cached);
    if (db->opts != NULL)
        rocksdb_options_destroy(db->opts);
    if (db->topts != NULL)
        rocksdb_block_based_options_destroy(db->topts);
    if (db->cache != NULL)
        rocksdb_cache_destroy(db->cache);
    troupe__rocks_log_destroy(db->rlog);
    troupe__space_fini(&db->space);
    secondary_dir_remove(db->secondary_dir);
    troupe_free(db->secondary_dir);
    pthread_mutex_destroy(&db->mu);
    troupe_free(db);
}

/* At open a full disk is ENOSPC whatever call failed: nothing that was
 * acknowledged depends on an open. */
static troupe_err
open_io_class(const char *err)
{
    return troupe__rocks_nospace(err) ? TROUPE_ENOSPC : TROUPE_EIO;
}

/* Bytes in the WAL files (<number>.log) of dir: what a recovery replays. */
static uint64_t
wal_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        struct stat st;
        if (n > 4 && strcmp(e->d_name + n - 4, ".log") == 0 &&
            e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
            fstatat(dirfd(d), e->d_name, &st, 0) == 0)
            total += (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}

/*
 * After an open that replayed `wal` bytes of WAL into the memtables: flush
 * them, retiring those WAL files, when the filesystem has room above
 * min_free for what they hold and a quarter more; otherwise leave them
 * (the next open, or the memtables filling up, flushes) and say so.
 */
static troupe_err
reopen_flush(troupe_db *db, const char *dir, uint64_t wal)
{
    if (wal == 0)
        return TROUPE_OK;
    if (!troupe__space_room_for(&db->space, wal + wal / 4)) {
        troupe_log_fields(&db->log, TROUPE_LOG_WARN, "storage",
                          (troupe_log_field[]){{"dir", dir}}, 1,
                          "open %s: the %llu bytes replayed from the WAL stay "
                          "in memory, not flushed: too little free space",
                          dir, (unsigned long long)wal);
        return TROUPE_OK;
    }
    return troupe_db_flush(db);
}

/*
 * The families RocksDB knows in dir, or just "default" when dir holds no
 * database yet. *names is RocksDB's list (free with
 * rocksdb_list_column_families_destroy) or NULL for the fresh case.
 */
static troupe_err
list_families(troupe_db *db, const char *dir, char ***names, size_t *n)
{
    char current[4096];
    struct stat st;
    *names = NULL;
    *n = 0;
    if (snprintf(current, sizeof(current), "%s/CURRENT", dir) >=
        (int)sizeof(current))
        return TROUPE_EINVAL;
    if (stat(current, &st) != 0) {
        if (!db->read_only)
            return TROUPE_OK; /* fresh (or absent): open decides */
        troupe_log_fields(&db->log, TROUPE_LOG_WARN, "storage",
                          (troupe_log_field[]){{"dir", dir}, {"err", "ENOENT"}},
                          2, "read-only open %s: no database there", dir);
        return TROUPE_ENOENT;
    }
    char *err = NULL;
    size_t len = 0;
    char **v = rocksdb_list_column_families(db->opts, dir, &len, &err);
    if (err != NULL)
        return troupe__rocks_err(&db->log, err, open_io_class(err),
                                 "list column families");
    *names = v;
    *n = len;
    return TROUPE_OK;
}

static troupe_err
open_families(troupe_db *db, const char *dir, char **names, size_t n,
              int recovery_mode)
{
    static const char *const fresh[] = {TROUPE_CF_DEFAULT};
    const char *const *nm = names != NULL ? (const char *const *)names : fresh;
    size_t cnt = names != NULL ? n : 1;
    const rocksdb_options_t **cfo = troupe_calloc(cnt, sizeof(*cfo));
    rocksdb_column_family_handle_t **hs = troupe_calloc(cnt, sizeof(*hs));
    if (cfo == NULL || hs == NULL) {
        troupe_free(cfo);
        troupe_free(hs);
        return TROUPE_ENOMEM;
    }
    for (size_t i = 0; i < cnt; i++)
        cfo[i] = db->opts;
    rocksdb_options_set_wal_recovery_mode(db->opts, recovery_mode);
    char *err = NULL;
    if (db->read_only)
        db->rdb = rocksdb_open_as_secondary_column_families(
            db->opts, dir, db->secondary_dir, (int)cnt, nm, cfo, hs, &err);
    else
        db->rdb = rocksdb_open_column_families(db->opts, dir, (int)cnt, nm, cfo,
                                               hs, &err);
    troupe_free(cfo);
    troupe_err e = TROUPE_OK;
    if (err != NULL) {
        db->rdb = NULL;
        e = troupe__rocks_err(&db->log, err, open_io_class(err), "open");
        troupe_free(hs);
        return e;
    }
    /* "default" first, so names and lookups list it first. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < cnt; i++) {
            bool is_default = strcmp(nm[i], TROUPE_CF_DEFAULT) == 0;
            if ((pass == 0) != is_default || hs[i] == NULL)
                continue;
            if (e == TROUPE_OK)
                e = cf_add_locked(db, nm[i], hs[i], NULL);
            if (e != TROUPE_OK)
                rocksdb_column_family_handle_destroy(hs[i]);
            hs[i] = NULL;
        }
    }
    troupe_free(hs);
    return e;
}

static troupe_err
db_configure(troupe_db *db, const char *dir, const troupe_db_opts *o)
{
    rocksdb_options_t *base = rocksdb_options_create();
    if (base == NULL)
        return TROUPE_ENOMEM;
    db->opts = rocksdb_options_create();
    if (db->opts != NULL) {
        char *err = NULL;
        rocksdb_get_options_from_string(base, FULL_DISK_OPTIONS, db->opts,
                                        &err);
        if (err != NULL) {
            rocksdb_options_destroy(base);
            return troupe__rocks_err(&db->log, err, TROUPE_EIO, "options");
        }
    }
    rocksdb_options_destroy(base);
    db->rlog =
        o->read_only
            ? troupe__rocks_log_create_forward(&db->log)
            : troupe__rocks_log_create(dir, TROUPE_ROCKS_LOG_MAX, &db->log);
    db->topts = rocksdb_block_based_options_create();
    db->cache = rocksdb_cache_create_lru(
        o->block_cache_bytes ? o->block_cache_bytes : DEFAULT_BLOCK_CACHE);
    db->wo_sync = rocksdb_writeoptions_create();
    db->wo_nosync = rocksdb_writeoptions_create();
    db->ro = rocksdb_readoptions_create();
    db->ro_cached = rocksdb_readoptions_create();
    if (!db->opts || !db->rlog || !db->topts || !db->cache || !db->wo_sync ||
        !db->wo_nosync || !db->ro || !db->ro_cached)
        return TROUPE_ENOMEM;
    rocksdb_options_set_info_log(db->opts, db->rlog);
    rocksdb_options_set_info_log_level(db->opts, 1);     /* INFO, as the log */
    rocksdb_readoptions_set_read_tier(db->ro_cached, 1); /* kBlockCacheTier */
    rocksdb_block_based_options_set_block_cache(db->topts, db->cache);
    /* Bloom filters, whole keys, in table files and in the memtables: a
     * write checks its key is absent (a row and its manifest) and most of
     * those reads find nothing, which without a filter walks the memtable
     * skiplist and every level's index. 10 bits per key: ~1% false
     * positives. The table takes ownership of the policy. */
    rocksdb_block_based_options_set_filter_policy(
        db->topts, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(db->opts, 0.02);
    rocksdb_options_set_memtable_whole_key_filtering(db->opts, 1);
    rocksdb_options_set_block_based_table_factory(db->opts, db->topts);
    rocksdb_options_set_create_if_missing(db->opts, o->create_if_missing &&
                                                        !o->read_only);
    /* A secondary instance keeps every table file open, so that a file
     * the node holding the db compacts away stays readable. */
    if (o->read_only)
        rocksdb_options_set_max_open_files(db->opts, -1);
    rocksdb_options_set_paranoid_checks(db->opts, 1);
    rocksdb_options_set_keep_log_file_num(db->opts, 8);
    rocksdb_writeoptions_set_sync(db->wo_sync, 1);
    rocksdb_writeoptions_set_sync(db->wo_nosync, 0);
    if (o->disable_wal) {
        rocksdb_writeoptions_disable_WAL(db->wo_sync, 1);
        rocksdb_writeoptions_disable_WAL(db->wo_nosync, 1);
    }
    db->sync_default = o->sync;
    db->disable_wal = o->disable_wal;
    return TROUPE_OK;
}

static troupe_err
create_listed(troupe_db *db, const troupe_db_opts *o)
{
    for (size_t i = 0; i < o->ncfs; i++) {
        if (cf_find_locked(db, o->cfs[i]) != NULL)
            continue;
        if (db->read_only) {
            troupe_log_fields(
                &db->log, TROUPE_LOG_WARN, "storage",
                (troupe_log_field[]){{"family", o->cfs[i]}, {"err", "ENOENT"}},
                2,
                "read-only open: no column family %s (a "
                "read-only db creates none)",
                o->cfs[i]);
            return TROUPE_ENOENT;
        }
        char *err = NULL;
        rocksdb_column_family_handle_t *h =
            rocksdb_create_column_family(db->rdb, db->opts, o->cfs[i], &err);
        if (err != NULL) {
            /* The C API returns a wrapper even on failure (around no
             * family: RocksDB's CreateColumnFamily clears it first). */
            if (h != NULL)
                rocksdb_column_family_handle_destroy(h);
            return troupe__rocks_err(&db->log, err, open_io_class(err),
                                     "create column family");
        }
        troupe_err e = cf_add_locked(db, o->cfs[i], h, NULL);
        if (e != TROUPE_OK) {
            rocksdb_column_family_handle_destroy(h);
            return e;
        }
    }
    return TROUPE_OK;
}

static troupe_err
dir_refused(const troupe_logger *lg, const char *dir, const char *why,
            troupe_err e)
{
    troupe_log_fields(
        lg, TROUPE_LOG_WARN, "storage",
        (troupe_log_field[]){{"dir", dir}, {"err", troupe_err_name(e)}}, 2,
        "open %s: %s", dir, why);
    return e;
}

/*
 * The directory must be one we can use: an existing directory we may
 * read, write (unless `writable` is false: a read-only open) and search,
 * or (create_if_missing) one we can make, like
 * RocksDB only the last component. What stands in the way is the caller's
 * path, not a failing disk: EINVAL (not a directory, under a plain file,
 * permission denied, read-only), ENOENT (missing, or its parent is), the
 * detail logged through lg.
 */
static troupe_err
dir_check(const troupe_logger *lg, const char *dir, bool create_if_missing,
          bool writable)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return dir_refused(lg, dir, "not a directory", TROUPE_EINVAL);
        if (access(dir, writable ? R_OK | W_OK | X_OK : R_OK | X_OK) != 0)
            return dir_refused(lg, dir, strerror(errno), TROUPE_EINVAL);
        return TROUPE_OK;
    }
    int err = errno;
    if (err == ENOENT && create_if_missing) {
        if (mkdir(dir, 0755) == 0 || errno == EEXIST)
            return dir_check(lg, dir, false, writable);
        err = errno;
    }
    switch (err) {
    case ENOENT:
        return dir_refused(lg, dir,
                           create_if_missing
                               ? "its parent directory does not exist"
                               : "no such directory",
                           TROUPE_ENOENT);
    case ENOTDIR:
        return dir_refused(lg, dir,
                           "a component of the path is not a directory",
                           TROUPE_EINVAL);
    case ENOSPC:
        return dir_refused(lg, dir, strerror(err), TROUPE_ENOSPC);
    case ENOMEM:
        return TROUPE_ENOMEM;
    case EACCES:
    case EPERM:
    case EROFS:
    case ENAMETOOLONG:
    case ELOOP:
        return dir_refused(lg, dir, strerror(err), TROUPE_EINVAL);
    default:
        return dir_refused(lg, dir, strerror(err), TROUPE_EIO);
    }
}

troupe_err
troupe_db_open(const char *dir, const troupe_db_opts *opts, troupe_db **out)
{
    if (out != NULL)
        *out = NULL;
    if (dir == NULL || *dir == '\0' || out == NULL)
        return TROUPE_EINVAL;
    troupe_db_opts o;
    if (opts != NULL)
        o = *opts;
    else
        troupe_db_opts_init(&o);
    if (o.disable_wal && o.sync)
        return TROUPE_EINVAL;
    if (o.ncfs > 0 && o.cfs == NULL)
        return TROUPE_EINVAL;
    for (size_t i = 0; i < o.ncfs; i++) {
        if (!cf_name_ok(o.cfs[i]))
            return TROUPE_EINVAL;
    }

    if (o.logger.level < TROUPE_LOG_DEFAULT ||
        o.logger.level > TROUPE_LOG_DEBUG)
        return TROUPE_EINVAL;
    troupe_err e = dir_check(&o.logger, dir,
                             o.create_if_missing && !o.read_only, !o.read_only);
    if (e != TROUPE_OK)
        return e;

    troupe_db *db = troupe_calloc(1, sizeof(*db));
    if (db == NULL)
        return TROUPE_ENOMEM;
    pthread_mutex_init(&db->mu, NULL);
    atomic_init(&db->failstop, false);
    atomic_init(&db->users, 0);
    db->log = o.logger;
    db->read_only = o.read_only;
    /* Read-only: no free-space gate (nothing is written) and no reserve
     * file (it would be written in dir). */
    e = troupe__space_init(&db->space, &db->log, dir,
                           o.read_only ? 0 : o.min_free_bytes,
                           o.read_only ? 0 : o.reserve_bytes);
    if (e == TROUPE_OK && o.read_only)
        e = secondary_dir_make(db);
    if (e == TROUPE_OK)
        e = db_configure(db, dir, &o);
    char **names = NULL;
    size_t n = 0;
    uint64_t wal = 0;
    if (e == TROUPE_OK) {
        wal = wal_bytes(dir);
        e = list_families(db, dir, &names, &n);
    }
    if (e == TROUPE_OK) {
        e = open_families(db, dir, names, n,
                          rocksdb_tolerate_corrupted_tail_records_recovery);
        if (e == TROUPE_ENOSPC && !o.read_only &&
            troupe__space_release_for_open(&db->space))
            e = open_families(db, dir, names, n,
                              rocksdb_tolerate_corrupted_tail_records_recovery);
        if (e == TROUPE_ECORRUPT && o.accept_wal_loss) {
            troupe_log_fields(&db->log, TROUPE_LOG_WARN, "storage",
                              (troupe_log_field[]){{"dir", dir}}, 1,
                              "open %s: corrupt WAL; accept_wal_loss is set, "
                              "recovering to the last consistent point "
                              "(records after it are lost)",
                              dir);
            e = open_families(db, dir, names, n,
                              rocksdb_point_in_time_recovery);
            db->wal_loss = e == TROUPE_OK;
            /* avoid_flush_during_recovery kept the recovered records in
             * the memtables and the corrupt WAL with them: flush, so the
             * WAL is retired and the loss is final, as documented (the
             * next strict open would refuse the same WAL again), space or
             * not. */
            if (e == TROUPE_OK && !o.read_only)
                e = troupe_db_flush(db);
            wal = 0;
        }
    }
    if (names != NULL)
        rocksdb_list_column_families_destroy(names, n);
    if (e == TROUPE_OK)
        e = create_listed(db, &o);
    if (e == TROUPE_OK && !o.read_only)
        e = reopen_flush(db, dir, wal);
    if (e != TROUPE_OK) {
        db_free(db);
        return e;
    }
    if (!o.read_only)
        troupe__space_after_open(&db->space);
    *out = db;
    return TROUPE_OK;
}

troupe_err
troupe_db_close(troupe_db *db)
{
    if (db == NULL)
        return TROUPE_OK;
    if (atomic_load(&db->users) != 0)
        return TROUPE_EBUSY;
    db_free(db);
    return TROUPE_OK;
}

bool
troupe_db_wal_loss(const troupe_db *db)
{
    return db != NULL && db->wal_loss;
}

bool
troupe_db_read_only(const troupe_db *db)
{
    return db != NULL && db->read_only;
}

bool
troupe_db_failstop(const troupe_db *db)
{
    return db != NULL && atomic_load(&((troupe_db *)db)->failstop);
}

troupe_err
troupe__db_resolve_sync(const troupe_db *db, troupe_sync s, bool *sync)
{
    switch (s) {
    case TROUPE_SYNC_DEFAULT:
        *sync = db->sync_default;
        return TROUPE_OK;
    case TROUPE_SYNC_ON:
        if (db->disable_wal)
            return TROUPE_EINVAL;
        *sync = true;
        return TROUPE_OK;
    case TROUPE_SYNC_OFF:
        *sync = false;
        return TROUPE_OK;
    }
    return TROUPE_EINVAL;
}

troupe_err
troupe__db_change_failed(troupe_db *db, char *errptr, troupe_err io_class,
                         const char *what)
{
    bool nospace = troupe__rocks_nospace(errptr);
    troupe_err e = troupe__rocks_err(&db->log, errptr, io_class, what);
    if (e == TROUPE_ENOSPC || e == io_class)
        atomic_store(&db->failstop, true);
    if (nospace)
        troupe__space_release(&db->space);
    return e;
}

troupe_err
troupe__db_write_wb(troupe_db *db, rocksdb_writebatch_t *wb, bool sync)
{
    if (atomic_load(&db->failstop))
        return TROUPE_EFAILSTOP;
    char *err = NULL;
    rocksdb_write(db->rdb, sync ? db->wo_sync : db->wo_nosync, wb, &err);
    if (err == NULL)
        return TROUPE_OK;
    /* The WAL may hold the record, unless RocksDB never got to write it:
     * EUNKNOWN, or ENOSPC for a data write that found no space. Any other
     * answer than ENOSPC is unknown too. */
    troupe_err e = troupe__db_change_failed(db, err, TROUPE_EUNKNOWN, "write");
    atomic_store(&db->failstop, true);
    return e == TROUPE_ENOSPC ? TROUPE_ENOSPC : TROUPE_EUNKNOWN;
}

troupe_err
troupe_db_write(troupe_db *db, troupe_batch *b, troupe_sync sync)
{
    if (db == NULL || b == NULL)
        return TROUPE_EINVAL;
    if (b->db != NULL && b->db != db)
        return TROUPE_EINVAL;
    if (db->read_only)
        return TROUPE_EREADONLY;
    bool s;
    troupe_err e = troupe__db_resolve_sync(db, sync, &s);
    if (e != TROUPE_OK)
        return e;
    if (atomic_load(&db->failstop))
        return TROUPE_EFAILSTOP;
    if (b->db == NULL || rocksdb_writebatch_count(b->wb) == 0)
        return TROUPE_OK;
    e = troupe__batch_check_cfs(b);
    if (e == TROUPE_OK)
        e = troupe__space_admit(&db->space, troupe__batch_bytes(b));
    if (e != TROUPE_OK)
        return e;
    troupe__batch_raise_bounds(b);
    return troupe__db_write_wb(db, b->wb, s);
}

troupe_err
troupe_db_flush(troupe_db *db)
{
    if (db == NULL)
        return TROUPE_EINVAL;
    if (db->read_only)
        return TROUPE_EREADONLY;
    if (atomic_load(&db->failstop))
        return TROUPE_EFAILSTOP;
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    if (fo == NULL)
        return TROUPE_ENOMEM;
    rocksdb_flushoptions_set_wait(fo, 1);
    troupe_err e = TROUPE_OK;
    pthread_mutex_lock(&db->mu);
    for (size_t i = 0; i < db->ncfs && e == TROUPE_OK; i++) {
        troupe_cf *cf = db->cfs[i];
        if (atomic_load(&cf->dropped))
            continue;
        char *err = NULL;
        rocksdb_flush_cf(db->rdb, fo, cf->h, &err);
        if (err != NULL)
            e = troupe__db_change_failed(db, err, TROUPE_EIO, "flush");
    }
    pthread_mutex_unlock(&db->mu);
    rocksdb_flushoptions_destroy(fo);
    return e;
}

troupe_err
troupe__cf_check(const troupe_db *db, const troupe_cf *cf)
{
    if (cf == NULL || (db != NULL && cf->db != db))
        return TROUPE_EINVAL;
    if (atomic_load(&((troupe_cf *)cf)->dropped))
        return TROUPE_ENOENT;
    return TROUPE_OK;
}

troupe_err
troupe_db_cf(troupe_db *db, const char *name, troupe_cf **out)
{
    if (out != NULL)
        *out = NULL;
    if (db == NULL || out == NULL || !cf_name_ok(name))
        return TROUPE_EINVAL;
    pthread_mutex_lock(&db->mu);
    troupe_cf *cf = cf_find_locked(db, name);
    pthread_mutex_unlock(&db->mu);
    *out = cf;
    return cf != NULL ? TROUPE_OK : TROUPE_ENOENT;
}

troupe_err
troupe_db_cf_create(troupe_db *db, const char *name, troupe_cf **out)
{
    if (out != NULL)
        *out = NULL;
    if (db == NULL || !cf_name_ok(name))
        return TROUPE_EINVAL;
    if (db->read_only)
        return TROUPE_EREADONLY;
    if (atomic_load(&db->failstop))
        return TROUPE_EFAILSTOP;
    troupe_err e;
    pthread_mutex_lock(&db->mu);
    if (cf_find_locked(db, name) != NULL) {
        e = TROUPE_EEXIST;
    } else if ((e = troupe__space_admit(&db->space, 0)) == TROUPE_OK) {
        char *err = NULL;
        rocksdb_column_family_handle_t *h =
            rocksdb_create_column_family(db->rdb, db->opts, name, &err);
        if (err != NULL) {
            /* See create_listed: a wrapper around no family. */
            if (h != NULL)
                rocksdb_column_family_handle_destroy(h);
            e = troupe__db_change_failed(db, err, TROUPE_EIO,
                                         "create column family");
        } else {
            e = cf_add_locked(db, name, h, out);
            if (e != TROUPE_OK)
                rocksdb_column_family_handle_destroy(h);
        }
    }
    pthread_mutex_unlock(&db->mu);
    return e;
}

troupe_err
troupe_db_cf_drop(troupe_db *db, const char *name)
{
    if (db == NULL || !cf_name_ok(name) || strcmp(name, TROUPE_CF_DEFAULT) == 0)
        return TROUPE_EINVAL;
    if (db->read_only)
        return TROUPE_EREADONLY;
    if (atomic_load(&db->failstop))
        return TROUPE_EFAILSTOP;
    troupe_err e = TROUPE_OK;
    pthread_mutex_lock(&db->mu);
    troupe_cf *cf = cf_find_locked(db, name);
    if (cf == NULL) {
        e = TROUPE_ENOENT;
    } else {
        char *err = NULL;
        rocksdb_drop_column_family(db->rdb, cf->h, &err);
        if (err != NULL) {
            e = troupe__db_change_failed(db, err, TROUPE_EIO,
                                         "drop column family");
        } else {
            atomic_store(&cf->dropped, true);
        }
    }
    pthread_mutex_unlock(&db->mu);
    return e;
}

troupe_err
troupe_db_cf_names(troupe_db *db, char ***names, size_t *n)
{
    if (names != NULL)
        *names = NULL;
    if (n != NULL)
        *n = 0;
    if (db == NULL || names == NULL || n == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&db->mu);
    size_t cnt = 0, bytes = 0;
    for (size_t i = 0; i < db->ncfs; i++) {
        if (!atomic_load(&db->cfs[i]->dropped)) {
            cnt++;
            bytes += strlen(db->cfs[i]->name) + 1;
        }
    }
    char **v = troupe_malloc((cnt + 1) * sizeof(char *) + bytes);
    if (v == NULL) {
        pthread_mutex_unlock(&db->mu);
        return TROUPE_ENOMEM;
    }
    char *s = (char *)(v + cnt + 1);
    size_t k = 0;
    for (size_t i = 0; i < db->ncfs; i++) {
        troupe_cf *cf = db->cfs[i];
        if (atomic_load(&cf->dropped))
            continue;
        size_t len = strlen(cf->name) + 1;
        memcpy(s, cf->name, len);
        v[k++] = s;
        s += len;
    }
    v[k] = NULL;
    pthread_mutex_unlock(&db->mu);
    *names = v;
    *n = cnt;
    return TROUPE_OK;
}

const char *
troupe_cf_name(const troupe_cf *cf)
{
    return cf != NULL ? cf->name : NULL;
}

static uint64_t
cf_prop(troupe_db *db, troupe_cf *cf, const char *name)
{
    uint64_t v = 0;
    if (rocksdb_property_int_cf(db->rdb, cf->h, name, &v) != 0)
        return 0; /* every name below is one RocksDB 7.8 knows */
    return v;
}

troupe_err
troupe_db_cf_stats(troupe_db *db, troupe_cf *cf, troupe_cf_stats *out)
{
    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if (db == NULL || out == NULL)
        return TROUPE_EINVAL;
    troupe_err e = troupe__cf_check(db, cf);
    if (e != TROUPE_OK)
        return e;
    out->keys = cf_prop(db, cf, "rocksdb.estimate-num-keys");
    out->live_bytes = cf_prop(db, cf, "rocksdb.estimate-live-data-size");
    out->file_bytes = cf_prop(db, cf, "rocksdb.total-sst-files-size");
    out->mem_bytes = cf_prop(db, cf, "rocksdb.cur-size-all-mem-tables");
    return TROUPE_OK;
}
