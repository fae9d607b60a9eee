/*
 * Read-only databases (troupe_db_opts.read_only): every write refused with
 * EREADONLY, nothing written (the directory's files, sizes, mtimes and
 * contents compared before and after), no family created, reads of data
 * both flushed and only in the WAL, and an open beside a writable handle
 * that holds the db, whose view stays that of the open.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stest.h"
#include "troupe/commit.h"
#include "troupe/log.h"

static int
entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* ---- a database to read ---------------------------------------------- */

static const char *const fams[] = {"a", "b"};

/* Families a and b; a:k1..k3 flushed to table files, a:w1 and b:x only
 * in the WAL (no flush after them), a:k2 deleted after the flush. */
static void
make_db(const char *dir)
{
    /* No reserve file: a read-only open that made one would show. */
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.cfs = fams;
    o.ncfs = 2;
    o.reserve_bytes = 0;
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    troupe_cf *a = st_cf(db, "a"), *b = st_cf(db, "b");
    st_put(db, a, "k1", "v1", TROUPE_SYNC_ON);
    st_put(db, a, "k2", "v2", TROUPE_SYNC_ON);
    st_put(db, a, "k3", "v3", TROUPE_SYNC_ON);
    ck_assert_ok(troupe_db_flush(db));
    st_put(db, a, "w1", "wal", TROUPE_SYNC_ON);
    st_put(db, b, "x", "y", TROUPE_SYNC_ON);
    troupe_batch *bt;
    ck_assert_ok(troupe_batch_create(&bt));
    ck_assert_ok(troupe_batch_delete(bt, a, "k2", 2));
    ck_assert_ok(troupe_db_write(db, bt, TROUPE_SYNC_ON));
    troupe_batch_destroy(bt);
    ck_assert_ok(troupe_db_close(db));
}

static troupe_db *
open_ro(const char *dir, const troupe_logger *lg)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.read_only = true;
    if (lg != NULL)
        o.logger = *lg;
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    ck_assert(troupe_db_read_only(db));
    return db;
}

/* Points $TMPDIR at a fresh directory, so that the secondary instance's
 * private directory can be watched. */
static char *
private_tmpdir(void)
{
    char *t = ts_tempdir("rotmp");
    ck_assert_int_eq(setenv("TMPDIR", t, 1), 0);
    return t;
}

/* Removes and frees a test's database and $TMPDIR directories. */
static void
done(char *dir, char *tmp)
{
    ts_rmtree(dir);
    ts_rmtree(tmp);
    free(dir);
    free(tmp);
}

START_TEST(test_readonly_reads_and_writes_nothing)
{
    char *dir = ts_tempdir("ro");
    char *tmp = private_tmpdir();
    make_db(dir);
    ts_listing before, after;
    ts_list_dir(dir, &before);
    ck_assert_int_gt(before.files, 3);
    ck_assert_ptr_nonnull(strstr(before.text, "LOG "));
    ck_assert_ptr_null(strstr(before.text, "TROUPE-RESERVE"));

    troupe_db *db = open_ro(dir, NULL);
    ck_assert_int_eq(entries(tmp), 1); /* the secondary's directory */
    troupe_cf *a = st_cf(db, "a"), *b = st_cf(db, "b");
    st_assert_value(db, a, "k1", "v1");
    st_assert_value(db, a, "w1", "wal"); /* replayed from the WAL */
    st_assert_value(db, b, "x", "y");
    ck_assert_ptr_null(st_get(db, a, NULL, "k2")); /* its delete too */

    /* A scan over a snapshot (what a secondary refuses in RocksDB). */
    troupe_snapshot *snap = NULL;
    ck_assert_ok(troupe_snapshot_create(db, &snap));
    troupe_page *pg = NULL;
    ck_assert_ok(troupe_db_scan(db, a, snap, NULL, NULL, 0, 10, false, &pg));
    ck_assert_uint_eq(pg->n, 3);
    ck_assert_int_eq(memcmp(pg->items[0].key, "k1", 2), 0);
    ck_assert_int_eq(memcmp(pg->items[1].key, "k3", 2), 0);
    ck_assert_int_eq(memcmp(pg->items[2].key, "w1", 2), 0);
    ck_assert(!pg->more);
    troupe_page_destroy(pg);
    st_assert_value(db, a, "k3", "v3");
    char *v = st_get(db, a, snap, "w1");
    ck_assert_str_eq(v, "wal");
    troupe_free(v);
    troupe_snapshot_destroy(snap);

    /* Every write is refused, and says so. */
    troupe_batch *bt;
    ck_assert_ok(troupe_batch_create(&bt));
    ck_assert_err(troupe_batch_put(bt, a, "n", 1, "v", 1), TROUPE_EREADONLY);
    ck_assert_err(troupe_batch_delete(bt, a, "k1", 2), TROUPE_EREADONLY);
    ck_assert_err(troupe_batch_delete_range(bt, a, "a", 1, "z", 1),
                  TROUPE_EREADONLY);
    ck_assert_uint_eq(troupe_batch_count(bt), 0);
    ck_assert_err(troupe_db_write(db, bt, TROUPE_SYNC_ON), TROUPE_EREADONLY);
    troupe_batch_destroy(bt);
    troupe_cf *made = NULL;
    ck_assert_err(troupe_db_cf_create(db, "c", &made), TROUPE_EREADONLY);
    ck_assert_ptr_null(made);
    ck_assert_err(troupe_db_cf_drop(db, "b"), TROUPE_EREADONLY);
    ck_assert_err(troupe_db_flush(db), TROUPE_EREADONLY);
    troupe_commit *c = NULL;
    ck_assert_err(troupe_commit_create(db, NULL, &c), TROUPE_EREADONLY);
    ck_assert_ptr_null(c);
    troupe_cf *none = NULL;
    ck_assert_err(troupe_db_cf(db, "c", &none), TROUPE_ENOENT);
    st_assert_value(db, b, "x", "y"); /* b is still there */
    ck_assert(!troupe_db_failstop(db));
    ck_assert_ok(troupe_db_close(db));

    ts_list_dir(dir, &after);
    ck_assert_str_eq(before.text, after.text);
    ck_assert_int_eq(entries(tmp), 0); /* removed at close */
    done(dir, tmp);
}
END_TEST

START_TEST(test_readonly_missing_things_are_enoent_never_created)
{
    char *dir = ts_tempdir("ro");
    char *other = ts_tempdir("ronone");
    char *tmp = private_tmpdir();
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.read_only = true; /* create_if_missing stays true: ignored */
    troupe_db *db = NULL;

    char missing[600];
    snprintf(missing, sizeof(missing), "%s/none", other);
    ck_assert_err(troupe_db_open(missing, &o, &db), TROUPE_ENOENT);
    ck_assert_ptr_null(db);
    ck_assert_int_eq(access(missing, F_OK), -1);

    /* A directory without a database: nothing made in it. */
    ck_assert_int_eq(mkdir(missing, 0755), 0);
    ck_assert_err(troupe_db_open(missing, &o, &db), TROUPE_ENOENT);
    ck_assert_int_eq(entries(missing), 0);

    /* A listed family that does not exist. */
    make_db(dir);
    ts_listing before, after;
    ts_list_dir(dir, &before);
    const char *want[] = {"a", "nope"};
    o.cfs = want;
    o.ncfs = 2;
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_ENOENT);
    ck_assert_ptr_null(db);
    o.ncfs = 1; /* "a" exists */
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    ck_assert_ok(troupe_db_close(db));
    ts_list_dir(dir, &after);
    ck_assert_str_eq(before.text, after.text);
    ck_assert_int_eq(entries(tmp), 0); /* every failed open cleaned up */
    ts_rmtree(other);
    free(other);
    done(dir, tmp);
}
END_TEST

START_TEST(test_readonly_opens_beside_a_writer_with_the_view_of_its_open)
{
    char *dir = ts_tempdir("ro");
    char *tmp = private_tmpdir();
    troupe_db *rw = st_open(dir, fams, 2);
    troupe_cf *a = st_cf(rw, "a");
    st_put(rw, a, "before", "1", TROUPE_SYNC_ON);

    /* A second writable open is refused by the LOCK ... */
    troupe_db *again = NULL;
    ck_assert_err(troupe_db_open(dir, NULL, &again), TROUPE_EBUSY);
    /* ... a read-only one is not. */
    troupe_db *ro = open_ro(dir, NULL);
    troupe_cf *ra = st_cf(ro, "a");
    st_assert_value(ro, ra, "before", "1");

    /* The writer goes on (and flushes: files come and go); the reader
     * keeps the view of its open. */
    st_put(rw, a, "after", "2", TROUPE_SYNC_ON);
    ck_assert_ok(troupe_db_flush(rw));
    ck_assert_ok(troupe_db_cf_create(rw, "late", NULL));
    st_assert_value(rw, a, "after", "2");
    ck_assert_ptr_null(st_get(ro, ra, NULL, "after"));
    st_assert_value(ro, ra, "before", "1");
    troupe_cf *late = NULL;
    ck_assert_err(troupe_db_cf(ro, "late", &late), TROUPE_ENOENT);
    ck_assert_ok(troupe_db_close(ro));

    /* A new read-only open sees the newer state. */
    ro = open_ro(dir, NULL);
    ra = st_cf(ro, "a");
    st_assert_value(ro, ra, "after", "2");
    ck_assert_ok(troupe_db_cf(ro, "late", &late));
    ck_assert_ok(troupe_db_close(ro));
    ck_assert_ok(troupe_db_close(rw));
    done(dir, tmp);
}
END_TEST

typedef struct rocks_lines {
    pthread_mutex_t mu;
    int rocksdb, other;
} rocks_lines;

static void
count_sys(void *ctx, const troupe_log_record *r)
{
    rocks_lines *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (strcmp(r->sys, "rocksdb") == 0 && r->level == TROUPE_LOG_DEBUG)
        c->rocksdb++;
    else
        c->other++;
    pthread_mutex_unlock(&c->mu);
}

START_TEST(test_readonly_rocksdb_info_lines_go_to_the_logger)
{
    char *dir = ts_tempdir("ro");
    char *tmp = private_tmpdir();
    make_db(dir);
    rocks_lines c = {.mu = PTHREAD_MUTEX_INITIALIZER};
    troupe_logger lg = {.fn = count_sys, .ctx = &c, .level = TROUPE_LOG_DEBUG};
    troupe_db *db = open_ro(dir, &lg);
    ck_assert_ok(troupe_db_close(db));
    pthread_mutex_lock(&c.mu);
    ck_assert_int_gt(c.rocksdb, 10); /* RocksDB logs its options at open */
    ck_assert_int_eq(c.other, 0);
    pthread_mutex_unlock(&c.mu);

    /* At the default level none of them is even formatted into a line. */
    c.rocksdb = 0;
    lg.level = TROUPE_LOG_DEFAULT;
    db = open_ro(dir, &lg);
    ck_assert_ok(troupe_db_close(db));
    ck_assert_int_eq(c.rocksdb, 0);
    done(dir, tmp);
}
END_TEST

START_TEST(test_readonly_cf_stats_count_what_the_writer_wrote)
{
    char *dir = ts_tempdir("ro");
    char *tmp = private_tmpdir();
    troupe_db *rw = st_open(dir, fams, 2);
    troupe_cf *a = st_cf(rw, "a"), *b = st_cf(rw, "b");
    char k[16];
    for (int i = 0; i < 500; i++) {
        snprintf(k, sizeof(k), "k%04d", i);
        st_put(rw, a, k, "0123456789abcdef", TROUPE_SYNC_OFF);
    }
    ck_assert_ok(troupe_db_flush(rw));
    for (int i = 500; i < 600; i++) {
        snprintf(k, sizeof(k), "k%04d", i);
        st_put(rw, a, k, "0123456789abcdef", TROUPE_SYNC_OFF);
    }
    troupe_cf_stats st;
    ck_assert_ok(troupe_db_cf_stats(rw, a, &st));
    ck_assert_uint_eq(st.keys, 600);
    ck_assert_uint_gt(st.file_bytes, 500 * 16 / 4); /* compressed */
    ck_assert_uint_gt(st.live_bytes, 0);
    ck_assert_uint_gt(st.mem_bytes, 100 * 16);
    ck_assert_ok(troupe_db_cf_stats(rw, b, &st));
    ck_assert_uint_eq(st.keys, 0);
    ck_assert_uint_eq(st.file_bytes, 0);

    /* The same figures through a read-only open beside the writer. */
    troupe_db *ro = open_ro(dir, NULL);
    ck_assert_ok(troupe_db_cf_stats(ro, st_cf(ro, "a"), &st));
    ck_assert_uint_eq(st.keys, 600);
    ck_assert_uint_gt(st.file_bytes, 0);
    /* Bad arguments. */
    ck_assert_err(troupe_db_cf_stats(NULL, a, &st), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_stats(ro, a, &st), TROUPE_EINVAL); /* rw's */
    ck_assert_err(troupe_db_cf_stats(ro, NULL, &st), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_stats(ro, st_cf(ro, "a"), NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_db_close(ro));
    ck_assert_ok(troupe_db_cf_drop(rw, "b"));
    ck_assert_err(troupe_db_cf_stats(rw, b, &st), TROUPE_ENOENT);
    ck_assert_uint_eq(st.keys, 0);
    ck_assert_ok(troupe_db_close(rw));
    done(dir, tmp);
}
END_TEST

Suite *
storage_readonly_suite(void)
{
    Suite *s = suite_create("storage_readonly");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc, test_readonly_reads_and_writes_nothing);
    tcase_add_test(tc, test_readonly_missing_things_are_enoent_never_created);
    tcase_add_test(
        tc, test_readonly_opens_beside_a_writer_with_the_view_of_its_open);
    tcase_add_test(tc, test_readonly_rocksdb_info_lines_go_to_the_logger);
    tcase_add_test(tc, test_readonly_cf_stats_count_what_the_writer_wrote);
    suite_add_tcase(s, tc);
    return s;
}
