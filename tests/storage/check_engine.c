/*
 * Engine: open/close, options, column families, WAL recovery, flush and
 * integrity errors.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stest.h"
#include "troupe/commit.h"

static char *dir;

static void
setup(void)
{
    dir = ts_tempdir("engine");
}

static void
teardown(void)
{
    ts_rmtree(dir);
    free(dir);
}

/* Number of keys in cf, through an iterator. */
static size_t
count_keys(troupe_db *db, troupe_cf *cf)
{
    troupe_iter *it;
    ck_assert_ok(troupe_iter_create(db, cf, NULL, NULL, NULL, 0, false, &it));
    size_t n = 0;
    troupe_kv kv;
    troupe_err e;
    while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK)
        n++;
    ck_assert_err(e, TROUPE_ENOENT);
    troupe_iter_destroy(it);
    return n;
}

/* Path of the one file in dir whose name ends with `suffix` and starts
 * with a digit (RocksDB's numbered files), or NULL. */
static char *
find_file(const char *d, const char *suffix)
{
    DIR *dh = opendir(d);
    ck_assert_ptr_nonnull(dh);
    char *found = NULL;
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        size_t n = strlen(e->d_name), s = strlen(suffix);
        if (n > s && strcmp(e->d_name + n - s, suffix) == 0 &&
            e->d_name[0] >= '0' && e->d_name[0] <= '9') {
            ck_assert_msg(found == NULL, "more than one %s file", suffix);
            found = malloc(strlen(d) + n + 2);
            sprintf(found, "%s/%s", d, e->d_name);
        }
    }
    closedir(dh);
    return found;
}

static off_t
file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_size;
}

static void
flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char c;
    ck_assert_int_eq(pread(fd, &c, 1, off), 1);
    c ^= 0x01;
    ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

#define WAL_KEYS 2200

static void
fill_keys(troupe_db *db, int n)
{
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    char k[32], v[101];
    memset(v, 'v', 100);
    v[100] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "key%08d", i);
        st_put(db, cf, k, v, TROUPE_SYNC_OFF); /* one WAL record each */
    }
}

/* ---- open / close ------------------------------------------------------ */

START_TEST(test_open_fresh_dir_has_only_default_cf)
{
    troupe_db *db = st_open(dir, NULL, 0);
    char **names;
    size_t n;
    ck_assert_ok(troupe_db_cf_names(db, &names, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(names[0], TROUPE_CF_DEFAULT);
    ck_assert_ptr_null(names[1]);
    troupe_free(names);
    ck_assert(!troupe_db_wal_loss(db));
    ck_assert(!troupe_db_failstop(db));
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_open_creates_listed_cfs_and_reopen_lists_them)
{
    const char *cfs[] = {"users", "idx", "users"};
    troupe_db *db = st_open(dir, cfs, 3);
    st_put(db, st_cf(db, "users"), "u1", "alice", TROUPE_SYNC_ON);
    ck_assert_ok(troupe_db_close(db));

    db = st_open(dir, NULL, 0); /* existing families open unlisted */
    char **names;
    size_t n;
    ck_assert_ok(troupe_db_cf_names(db, &names, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(names[0], TROUPE_CF_DEFAULT);
    int seen = 0;
    for (size_t i = 1; i < n; i++)
        seen |= strcmp(names[i], "users") == 0 ? 1
                : strcmp(names[i], "idx") == 0 ? 2
                                               : 4;
    ck_assert_int_eq(seen, 3);
    troupe_free(names);
    troupe_cf *users = st_cf(db, "users");
    ck_assert_str_eq(troupe_cf_name(users), "users");
    st_assert_value(db, users, "u1", "alice");
    st_assert_value(db, st_cf(db, "idx"), "u1", NULL);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_open_missing_without_create_is_enoent)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.create_if_missing = false;
    troupe_db *db = (troupe_db *)&o; /* must be NULLed */
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_ENOENT);
    ck_assert_ptr_null(db);
}
END_TEST

/*
 * Runs troupe_db_open(path) with stderr sent to a file; returns the error
 * and, in *logged (troupe_malloc'ed, NUL-terminated), what it printed.
 */
static troupe_err
open_logged(const char *path, bool create, char **logged)
{
    char log[4096];
    snprintf(log, sizeof(log), "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    close(fd);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.create_if_missing = create;
    troupe_db *db = (troupe_db *)&o; /* must be NULLed */
    troupe_err e = troupe_db_open(path, &o, &db);
    fflush(stderr);
    ck_assert_int_ge(dup2(saved, 2), 0);
    close(saved);
    ck_assert_ptr_null(db);
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    char *text = troupe_calloc(1, 4096);
    ck_assert_ptr_nonnull(text);
    size_t n = fread(text, 1, 4095, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_int_eq(truncate(log, 0), 0);
    *logged = text;
    return e;
}

static void
assert_open_refused(const char *path, bool create, troupe_err want,
                    const char *detail)
{
    char *logged;
    ck_assert_err(open_logged(path, create, &logged), want);
    ck_assert_msg(strstr(logged, detail) != NULL,
                  "open %s: want \"%s\" logged, got \"%s\"", path, detail,
                  logged);
    troupe_free(logged);
}

/* A path RocksDB cannot use is the caller's mistake, not a failing disk
 * (RocksDB says "IO error" for all of these): EINVAL or ENOENT, the reason
 * logged, nothing created. */
START_TEST(test_open_on_plain_file_or_under_one_is_einval)
{
    char file[4096], under[4096];
    snprintf(file, sizeof(file), "%s/plain", dir);
    snprintf(under, sizeof(under), "%s/plain/db", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not a db", f);
    fclose(f);
    for (int create = 0; create < 2; create++) {
        assert_open_refused(file, create, TROUPE_EINVAL, "not a directory");
        assert_open_refused(under, create, TROUPE_EINVAL,
                            "a component of the path is not a directory");
    }
    struct stat st;
    ck_assert_int_eq(stat(file, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_int_eq(st.st_size, 8); /* untouched */
}
END_TEST

START_TEST(test_open_under_missing_parent_is_enoent)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/missing/db", dir);
    assert_open_refused(path, true, TROUPE_ENOENT,
                        "its parent directory does not exist");
    assert_open_refused(path, false, TROUPE_ENOENT, "no such directory");
    snprintf(path, sizeof(path), "%s/missing", dir);
    struct stat st;
    ck_assert_int_ne(stat(path, &st), 0); /* nothing created */
}
END_TEST

/*
 * Without permission: EINVAL, "Permission denied" logged. As root the
 * mode bits do not apply, so the open runs in a child that dropped to
 * nobody (65534); its exit status is 10 + the error (a failed assertion
 * in the child exits 1), and the test dir is opened up for the child to
 * reach (mkdtemp makes it 0700), with a log file it may write.
 */
START_TEST(test_open_without_permission_is_einval)
{
    char ro[4096], noaccess[4096], inside[4096];
    snprintf(ro, sizeof(ro), "%s/ro", dir);
    snprintf(noaccess, sizeof(noaccess), "%s/noaccess", dir);
    snprintf(inside, sizeof(inside), "%s/noaccess/db", dir);
    ck_assert_int_eq(mkdir(ro, 0555), 0);
    ck_assert_int_eq(chmod(ro, 0555), 0); /* whatever the umask */
    ck_assert_int_eq(mkdir(noaccess, 0700), 0);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    char log[4096];
    snprintf(log, sizeof(log), "%s/stderr.txt", dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchmod(fd, 0666), 0);
    close(fd);
    const char *paths[] = {ro, inside};
    for (int i = 0; i < 2; i++) {
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
                _exit(100);
            char *logged;
            troupe_err e = open_logged(paths[i], true, &logged);
            bool said = strstr(logged, "Permission denied") != NULL;
            _exit(said ? 10 + (int)e : 101);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_msg(WEXITSTATUS(status) == 10 + TROUPE_EINVAL,
                      "open %s as nobody: exit %d (100: could not drop "
                      "root, 101: no \"Permission denied\" logged, 1: an "
                      "assertion failed; else 10 + a troupe_err)",
                      paths[i], WEXITSTATUS(status));
    }
    struct stat st;
    ck_assert_int_ne(stat(inside, &st), 0);
    snprintf(inside, sizeof(inside), "%s/ro/LOCK", dir);
    ck_assert_int_ne(stat(inside, &st), 0);
}
END_TEST

START_TEST(test_open_bad_args_einval)
{
    troupe_db *db = NULL;
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    ck_assert_err(troupe_db_open(NULL, &o, &db), TROUPE_EINVAL);
    ck_assert_err(troupe_db_open("", &o, &db), TROUPE_EINVAL);
    ck_assert_err(troupe_db_open(dir, &o, NULL), TROUPE_EINVAL);
    o.disable_wal = true; /* with sync still true */
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_EINVAL);
    troupe_db_opts_init(&o);
    o.ncfs = 1; /* cfs NULL */
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_EINVAL);
    const char *empty[] = {""};
    o.cfs = empty;
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_EINVAL);
    char longname[TROUPE_CF_NAME_MAX + 2];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    const char *toolong[] = {longname};
    o.cfs = toolong;
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_EINVAL);
    const char *null_name[] = {NULL};
    o.cfs = null_name;
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_EINVAL);
    ck_assert_ptr_null(db);
    troupe_db_opts_init(NULL); /* no crash */
}
END_TEST

START_TEST(test_open_twice_is_ebusy)
{
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_db *db2 = NULL;
    ck_assert_err(troupe_db_open(dir, NULL, &db2), TROUPE_EBUSY);
    ck_assert_ptr_null(db2);
    ck_assert_ok(troupe_db_close(db));
    db2 = st_open(dir, NULL, 0);
    ck_assert_ok(troupe_db_close(db2));
}
END_TEST

START_TEST(test_close_null_is_ok_and_getters_on_null_are_false)
{
    ck_assert_ok(troupe_db_close(NULL));
    ck_assert(!troupe_db_wal_loss(NULL));
    ck_assert(!troupe_db_failstop(NULL));
    ck_assert_ptr_null(troupe_cf_name(NULL));
}
END_TEST

START_TEST(test_close_with_live_snapshot_or_iterator_is_ebusy)
{
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_snapshot *s;
    ck_assert_ok(troupe_snapshot_create(db, &s));
    ck_assert_err(troupe_db_close(db), TROUPE_EBUSY);
    troupe_snapshot_destroy(s);
    troupe_iter *it;
    ck_assert_ok(troupe_iter_create(db, st_cf(db, TROUPE_CF_DEFAULT), NULL,
                                    NULL, NULL, 0, false, &it));
    ck_assert_err(troupe_db_close(db), TROUPE_EBUSY);
    troupe_iter_destroy(it);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_synced_write_survives_reopen)
{
    troupe_db *db = st_open(dir, NULL, 0);
    st_put(db, st_cf(db, TROUPE_CF_DEFAULT), "k", "v1", TROUPE_SYNC_ON);
    st_put(db, st_cf(db, TROUPE_CF_DEFAULT), "k2", "v2", TROUPE_SYNC_DEFAULT);
    ck_assert_ok(troupe_db_close(db));
    db = st_open(dir, NULL, 0);
    st_assert_value(db, st_cf(db, TROUPE_CF_DEFAULT), "k", "v1");
    st_assert_value(db, st_cf(db, TROUPE_CF_DEFAULT), "k2", "v2");
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* The free-space gate without a full disk: a threshold above what the
 * filesystem has makes every write ENOSPC (the pipeline's submit too,
 * leaving the batch with the caller), nothing written, the db not
 * fail-stop; reads and flushes go on; with the gate off (a reopen with
 * min_free_bytes 0) the same writes succeed. */
static void
never_fires(troupe_err err, void *arg)
{
    ck_abort_msg("a refused submit's callback fired (%s)",
                 troupe_err_name(err));
}

START_TEST(test_writes_below_min_free_are_enospc_and_db_stays_usable)
{
    struct statvfs v;
    ck_assert_int_eq(statvfs(dir, &v), 0);
    uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
    const char *cfs[] = {"a"};
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.cfs = cfs;
    o.ncfs = 1;
    o.min_free_bytes = 0; /* first a db with a row in it */
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    st_put(db, st_cf(db, "a"), "before", "ok", TROUPE_SYNC_ON);
    ck_assert_ok(troupe_db_close(db));

    o.min_free_bytes = avail + (1ull << 40);
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    troupe_cf *cf = st_cf(db, "a");
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "refused", 7, "x", 1));
    for (int i = 0; i < 3; i++)
        ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_ON), TROUPE_ENOSPC);
    ck_assert_err(troupe_db_cf_create(db, "b", NULL), TROUPE_ENOSPC);
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    ck_assert_err(
        troupe_commit_submit(c, &b, TROUPE_SYNC_ON, never_fires, NULL),
        TROUPE_ENOSPC);
    ck_assert_ptr_nonnull(b); /* still the caller's */
    troupe_batch_destroy(b);
    troupe_commit_destroy(c);
    ck_assert(!troupe_db_failstop(db));
    st_assert_value(db, cf, "before", "ok");
    st_assert_value(db, cf, "refused", NULL);
    ck_assert_ok(troupe_db_flush(db));
    ck_assert_ok(troupe_db_close(db));

    o.min_free_bytes = 0;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    cf = st_cf(db, "a");
    st_assert_value(db, cf, "refused", NULL);
    st_put(db, cf, "refused", "x", TROUPE_SYNC_ON);
    st_assert_value(db, cf, "refused", "x");
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_disable_wal_refuses_sync_writes)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.disable_wal = true;
    o.sync = false;
    o.block_cache_bytes = 1u << 20;
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "k", 1, "v", 1));
    ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_ON), TROUPE_EINVAL);
    st_assert_value(db, cf, "k", NULL);
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_DEFAULT));
    troupe_batch_destroy(b);
    st_assert_value(db, cf, "k", "v");
    /* Without a WAL only a flush makes it durable. */
    ck_assert_ok(troupe_db_flush(db));
    ck_assert_ok(troupe_db_close(db));
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    st_assert_value(db, st_cf(db, TROUPE_CF_DEFAULT), "k", "v");
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* ---- column families -------------------------------------------------- */

START_TEST(test_cf_create_drop_lifecycle)
{
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_cf *x = NULL, *again = NULL;
    ck_assert_ok(troupe_db_cf_create(db, "x", &x));
    ck_assert_ptr_nonnull(x);
    ck_assert_err(troupe_db_cf_create(db, "x", &again), TROUPE_EEXIST);
    ck_assert_ptr_null(again);
    ck_assert_err(troupe_db_cf_create(db, TROUPE_CF_DEFAULT, NULL),
                  TROUPE_EEXIST);
    st_put(db, x, "k", "v", TROUPE_SYNC_OFF);
    ck_assert_ptr_eq(st_cf(db, "x"), x);

    ck_assert_ok(troupe_db_cf_drop(db, "x"));
    troupe_cf *gone = (troupe_cf *)db;
    ck_assert_err(troupe_db_cf(db, "x", &gone), TROUPE_ENOENT);
    ck_assert_ptr_null(gone);
    /* The dropped handle stays valid memory and answers ENOENT. */
    void *v;
    size_t vn;
    ck_assert_err(troupe_db_get(db, x, NULL, "k", 1, &v, &vn), TROUPE_ENOENT);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_err(troupe_batch_put(b, x, "k", 1, "v", 1), TROUPE_ENOENT);
    ck_assert_uint_eq(troupe_batch_count(b), 0);
    troupe_batch_destroy(b);
    troupe_page *p;
    ck_assert_err(troupe_db_scan(db, x, NULL, NULL, NULL, 0, 10, false, &p),
                  TROUPE_ENOENT);
    ck_assert_err(troupe_db_cf_drop(db, "x"), TROUPE_ENOENT);

    /* Re-created under the same name: a new, empty family. */
    troupe_cf *x2;
    ck_assert_ok(troupe_db_cf_create(db, "x", &x2));
    ck_assert_ptr_ne(x2, x);
    st_assert_value(db, x2, "k", NULL);
    ck_assert_ok(troupe_db_close(db));

    db = st_open(dir, NULL, 0);
    char **names;
    size_t n;
    ck_assert_ok(troupe_db_cf_names(db, &names, &n));
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(names[1], "x");
    troupe_free(names);
    st_assert_value(db, st_cf(db, "x"), "k", NULL);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_cf_calls_bad_args_einval)
{
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_cf *cf = NULL;
    ck_assert_err(troupe_db_cf(NULL, "default", &cf), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf(db, NULL, &cf), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf(db, "", &cf), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf(db, "default", NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf(db, "nope", &cf), TROUPE_ENOENT);
    ck_assert_err(troupe_db_cf_create(NULL, "a", NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_create(db, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_create(db, "", NULL), TROUPE_EINVAL);
    char longname[TROUPE_CF_NAME_MAX + 2];
    memset(longname, 'y', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    ck_assert_err(troupe_db_cf_create(db, longname, NULL), TROUPE_EINVAL);
    longname[TROUPE_CF_NAME_MAX] = '\0'; /* exactly the maximum */
    ck_assert_ok(troupe_db_cf_create(db, longname, NULL));
    ck_assert_err(troupe_db_cf_drop(NULL, "a"), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_drop(db, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_drop(db, TROUPE_CF_DEFAULT), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_drop(db, "nope"), TROUPE_ENOENT);
    char **names = (char **)db;
    size_t n = 7;
    ck_assert_err(troupe_db_cf_names(NULL, &names, &n), TROUPE_EINVAL);
    ck_assert_ptr_null(names);
    ck_assert_uint_eq(n, 0);
    ck_assert_err(troupe_db_cf_names(db, NULL, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_db_cf_names(db, &names, NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_cf_names_enomem)
{
    troupe_db *db = st_open(dir, NULL, 0);
    char **names;
    size_t n;
    troupe_alloc_fail_after(0);
    troupe_err e = troupe_db_cf_names(db, &names, &n);
    troupe_alloc_fail_after(-1);
    ck_assert_err(e, TROUPE_ENOMEM);
    ck_assert_ptr_null(names);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* ---- flush -------------------------------------------------------------- */

START_TEST(test_flush_bad_args_einval)
{
    ck_assert_err(troupe_db_flush(NULL), TROUPE_EINVAL);
}
END_TEST

START_TEST(test_corrupt_table_file_fails_reads_with_ecorrupt)
{
    troupe_db *db = st_open(dir, NULL, 0);
    fill_keys(db, 1000);
    ck_assert_ok(troupe_db_flush(db));
    ck_assert_ok(troupe_db_close(db));
    char *sst = find_file(dir, ".sst");
    ck_assert_ptr_nonnull(sst);
    flip_byte(sst, file_size(sst) / 3);
    free(sst);

    db = st_open(dir, NULL, 0);
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    /* A scan over the corrupt block fails as a whole: no short page. */
    troupe_page *p = (troupe_page *)db;
    ck_assert_err(troupe_db_scan(db, cf, NULL, NULL, NULL, 0, 5000, false, &p),
                  TROUPE_ECORRUPT);
    ck_assert_ptr_null(p);
    /* Point reads: corrupt is never "not found". */
    int corrupt = 0;
    char k[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof(k), "key%08d", i);
        void *v = NULL;
        size_t vn;
        troupe_err e = troupe_db_get(db, cf, NULL, k, strlen(k), &v, &vn);
        ck_assert_msg(e == TROUPE_OK || e == TROUPE_ECORRUPT, "%s: %s", k,
                      troupe_err_name(e));
        corrupt += e == TROUPE_ECORRUPT;
        troupe_free(v);
    }
    ck_assert_int_gt(corrupt, 0);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* ---- WAL recovery ----------------------------------------------------- */

START_TEST(test_wal_flipped_byte_open_ecorrupt_then_accept_wal_loss)
{
    troupe_db *db = st_open(dir, NULL, 0);
    fill_keys(db, WAL_KEYS);
    ck_assert_ok(troupe_db_close(db)); /* WAL not flushed: keys live in it */
    char *wal = find_file(dir, ".log");
    ck_assert_ptr_nonnull(wal);
    flip_byte(wal, file_size(wal) / 2);
    free(wal);

    /* The default refuses, twice: the failed open changed nothing. */
    ck_assert_err(troupe_db_open(dir, NULL, &db), TROUPE_ECORRUPT);
    ck_assert_ptr_null(db);
    ck_assert_err(troupe_db_open(dir, NULL, &db), TROUPE_ECORRUPT);

    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.accept_wal_loss = true;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    ck_assert(troupe_db_wal_loss(db));
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    size_t n = count_keys(db, cf);
    fprintf(stderr, "wal flip: %zu of %d keys recovered\n", n, WAL_KEYS);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_lt(n, WAL_KEYS);
    /* Point in time: exactly the keys written before the corrupt record. */
    char k[32];
    snprintf(k, sizeof(k), "key%08zu", n - 1);
    char *got = st_get(db, cf, NULL, k);
    ck_assert_ptr_nonnull(got);
    troupe_free(got);
    snprintf(k, sizeof(k), "key%08zu", n);
    st_assert_value(db, cf, k, NULL);
    ck_assert_ok(troupe_db_close(db));

    /* The loss is permanent and reported once; the next open is clean. */
    db = st_open(dir, NULL, 0);
    ck_assert(!troupe_db_wal_loss(db));
    ck_assert_uint_eq(count_keys(db, st_cf(db, TROUPE_CF_DEFAULT)), n);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_wal_torn_tail_opens_clean_without_loss_signal)
{
    troupe_db *db = st_open(dir, NULL, 0);
    fill_keys(db, WAL_KEYS);
    ck_assert_ok(troupe_db_close(db));
    char *wal = find_file(dir, ".log");
    ck_assert_ptr_nonnull(wal);
    /* Cut the last record short, as a crash mid-append leaves it. */
    ck_assert_int_eq(truncate(wal, file_size(wal) - 50), 0);
    free(wal);
    db = st_open(dir, NULL, 0);
    ck_assert(!troupe_db_wal_loss(db));
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    ck_assert_uint_eq(count_keys(db, cf), WAL_KEYS - 1);
    /* The open kept the torn WAL (no flush at recovery) and started a new
     * one: a torn tail that is no longer the last record of the last WAL
     * must still open clean, with the later writes. */
    st_put(db, cf, "zz-after-reopen", "v", TROUPE_SYNC_ON);
    ck_assert_ok(troupe_db_close(db));
    db = st_open(dir, NULL, 0);
    ck_assert(!troupe_db_wal_loss(db));
    cf = st_cf(db, TROUPE_CF_DEFAULT);
    ck_assert_uint_eq(count_keys(db, cf), WAL_KEYS);
    st_assert_value(db, cf, "zz-after-reopen", "v");
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

static int
count_wal_files(const char *d)
{
    DIR *dh = opendir(d);
    ck_assert_ptr_nonnull(dh);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".log") == 0)
            n++;
    }
    closedir(dh);
    return n;
}

/* Recovery itself does not flush (so that a reopen on a full disk needs
 * little room); the open flushes afterwards when there is room. Without
 * that, each open would keep the WAL it replayed and add one: a database
 * opened often but written little would replay ever more. */
START_TEST(test_reopens_do_not_pile_up_wal_files)
{
    char k[32];
    for (int round = 0; round < 12; round++) {
        troupe_db *db = st_open(dir, NULL, 0);
        troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
        snprintf(k, sizeof(k), "round%02d", round);
        st_put(db, cf, k, "v", TROUPE_SYNC_ON);
        ck_assert_ok(troupe_db_close(db));
        ck_assert_int_le(count_wal_files(dir), 2);
    }
    troupe_db *db = st_open(dir, NULL, 0);
    ck_assert_uint_eq(count_keys(db, st_cf(db, TROUPE_CF_DEFAULT)), 12);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* Key bounds (bound.c): a point read of a key above every key a family
 * holds answers ENOENT without RocksDB. The bound must be exact: what is
 * written above it, by a direct write or through the commit pipeline, or
 * before a reopen, is found; keys that share their first 16 bytes with it
 * are read. Finding the last key at open leaves the block cache alone. */
static bool
fired(void *arg)
{
    return atomic_load((atomic_int *)arg) != 0;
}

static void
on_done(troupe_err err, void *arg)
{
    ck_assert_ok(err);
    atomic_store((atomic_int *)arg, 1);
}

/* troupe_batch_from_data over `len` bytes of d: its error. */
static troupe_err
from_data(troupe_db *db, const void *d, size_t len)
{
    troupe_batch *b = NULL;
    troupe_err e = troupe_batch_from_data(db, d, len, &b);
    ck_assert(e == TROUPE_OK ? b != NULL : b == NULL);
    troupe_batch_destroy(b);
    return e;
}

START_TEST(test_batch_bytes_rebuild_the_same_batch_and_bad_bytes_are_ecorrupt)
{
    const char *cfs[] = {"a", "b"};
    troupe_db *db = st_open(dir, cfs, 2);
    troupe_cf *a = st_cf(db, "a"), *b = st_cf(db, "b");
    troupe_cf *d = st_cf(db, TROUPE_CF_DEFAULT);
    st_put(db, b, "gone", "x", TROUPE_SYNC_ON);
    st_put(db, a, "r2", "x", TROUPE_SYNC_ON);
    troupe_batch *b1 = NULL, *b2 = NULL;
    ck_assert_ok(troupe_batch_create(&b1));
    ck_assert_ok(troupe_batch_put(b1, a, "k", 1, "v1", 2));
    ck_assert_ok(troupe_batch_put(b1, a, "zzzz", 4, "", 0)); /* above a's
                                                                 bound */
    ck_assert_ok(troupe_batch_put(b1, d, "dk", 2, "dv", 2));
    ck_assert_ok(troupe_batch_delete(b1, b, "gone", 4));
    ck_assert_ok(troupe_batch_delete_range(b1, a, "r1", 2, "r3", 2));
    size_t n1 = 0, n2 = 0;
    const unsigned char *d1 = troupe_batch_data(b1, &n1);
    ck_assert_ptr_nonnull(d1);
    ck_assert_uint_gt(n1, 12);
    ck_assert_ok(troupe_batch_from_data(db, d1, n1, &b2));
    const void *d2 = troupe_batch_data(b2, &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(d1, d2, n1) == 0);
    ck_assert_uint_eq(troupe_batch_count(b2), 5);
    ck_assert_ok(troupe_db_write(db, b2, TROUPE_SYNC_ON));
    troupe_batch_destroy(b2);
    st_assert_value(db, a, "k", "v1");
    st_assert_value(db, a, "zzzz", ""); /* the rebuilt batch raised the bound */
    st_assert_value(db, d, "dk", "dv");
    st_assert_value(db, b, "gone", NULL);
    st_assert_value(db, a, "r2", NULL);
    /* bytes that are not a troupe batch */
    unsigned char *bad = malloc(n1 + 1);
    ck_assert_err(from_data(db, d1, 11), TROUPE_ECORRUPT);     /* no header */
    ck_assert_err(from_data(db, d1, n1 - 1), TROUPE_ECORRUPT); /* cut */
    memcpy(bad, d1, n1);
    bad[n1] = 0x01;
    ck_assert_err(from_data(db, bad, n1 + 1), TROUPE_ECORRUPT); /* more */
    bad[8]++;
    ck_assert_err(from_data(db, bad, n1), TROUPE_ECORRUPT); /* count */
    memcpy(bad, d1, n1);
    bad[12] = 0x03; /* a log-data record: never troupe's */
    ck_assert_err(from_data(db, bad, n1), TROUPE_ECORRUPT);
    memcpy(bad, d1, 12);
    bad[8] = 1; /* one put of an empty key in family 0 */
    memcpy(bad + 12, "\x01\x00\x00", 3);
    ck_assert_err(from_data(db, bad, 15), TROUPE_ECORRUPT);
    memcpy(bad + 12, "\x05\x7f\x01k\x00", 5); /* family id 127 */
    ck_assert_err(from_data(db, bad, 17), TROUPE_ENOENT);
    free(bad);
    /* a family dropped since */
    ck_assert_ok(troupe_db_cf_drop(db, "b"));
    ck_assert_err(from_data(db, d1, n1), TROUPE_ENOENT);
    troupe_batch_destroy(b1);
    size_t n = 7;
    ck_assert_ptr_null(troupe_batch_data(NULL, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(troupe_batch_data(b2 = NULL, NULL));
    ck_assert_err(troupe_batch_from_data(NULL, "x", 1, &b2), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_from_data(db, NULL, 12, &b2), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_from_data(db, "x", 1, NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_key_bounds_are_exact)
{
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    void *v = NULL;
    size_t n = 0;
    /* an empty family: every key is above */
    st_assert_value(db, cf, "a", NULL);
    st_put(db, cf, "m", "1", TROUPE_SYNC_ON);
    /* above, and sharing 16 bytes with the keys read next */
    st_put(db, cf, "pppppppppppppppp1", "2", TROUPE_SYNC_ON);
    st_put(db, cf, "q", "3", TROUPE_SYNC_ON);
    st_assert_value(db, cf, "m", "1");
    st_assert_value(db, cf, "pppppppppppppppp1", "2");
    st_assert_value(db, cf, "pppppppppppppppp2", NULL);
    st_assert_value(db, cf, "pppppppppppppppp", NULL);
    st_assert_value(db, cf, "q", "3");
    /* "q" then a zero byte: its bound equals "q"'s, so it is read, and
     * written above "q", found */
    const char q0[2] = {'q', 0};
    ck_assert_err(troupe_db_get(db, cf, NULL, q0, 2, &v, &n), TROUPE_ENOENT);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, q0, 2, "5", 1));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    ck_assert_ok(troupe_db_get(db, cf, NULL, q0, 2, &v, &n));
    ck_assert_int_eq(memcmp(v, "5", 1), 0);
    troupe_free(v);
    /* a delete does not lower the bound */
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_delete(b, cf, "q", 1));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    st_assert_value(db, cf, "q", NULL);
    ck_assert_ok(troupe_db_get(db, cf, NULL, q0, 2, &v, &n));
    troupe_free(v);
    /* the commit pipeline raises the bound before its write */
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    atomic_int done = 0;
    ck_assert_ok(troupe_commit_batch(c, &b));
    ck_assert_ok(troupe_batch_put(b, cf, "zz", 2, "6", 1));
    ck_assert_ok(troupe_commit_submit(c, &b, TROUPE_SYNC_OFF, on_done, &done));
    ck_assert(ts_wait_until(fired, &done, 10000));
    st_assert_value(db, cf, "zz", "6");
    troupe_commit_destroy(c);
    ck_assert_ok(troupe_db_flush(db));
    ck_assert_ok(troupe_db_close(db));
    /* reopened: the bound is the last key on disk, and reading it did not
     * fill the cache (a memory-only read of it still needs the disk) */
    db = st_open(dir, NULL, 0);
    cf = st_cf(db, TROUPE_CF_DEFAULT);
    ck_assert_err(troupe_db_get_cached(db, cf, "zz", 2, &v, &n), TROUPE_EAGAIN);
    ck_assert_err(troupe_db_get_cached(db, cf, "zzz", 3, &v, &n),
                  TROUPE_ENOENT);
    st_assert_value(db, cf, "zz", "6");
    st_assert_value(db, cf, "m", "1");
    st_assert_value(db, cf, "zzz", NULL);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* Cached reads serve the memtable and the block cache and answer EAGAIN,
 * never touching the disk, for a key whose block is not in memory. */
START_TEST(test_cached_reads_never_touch_the_disk)
{
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    st_put(db, cf, "a", "1", TROUPE_SYNC_ON);
    st_put(db, cf, "b", "2", TROUPE_SYNC_ON);
    void *v = NULL;
    size_t n = 0;
    /* in the memtable */
    ck_assert_ok(troupe_db_get_cached(db, cf, "a", 1, &v, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(memcmp(v, "1", 1), 0);
    troupe_free(v);
    ck_assert_ok(troupe_db_flush(db));
    ck_assert_ok(troupe_db_close(db));
    /* reopened: in a table file, nothing cached */
    db = st_open(dir, NULL, 0);
    cf = st_cf(db, TROUPE_CF_DEFAULT);
    ck_assert_err(troupe_db_get_cached(db, cf, "a", 1, &v, &n), TROUPE_EAGAIN);
    ck_assert_ptr_null(v);
    const void *keys[2] = {"a", "b"};
    size_t klens[2] = {1, 1};
    void *vals[2];
    size_t vlens[2];
    troupe_err errs[2];
    ck_assert_ok(
        troupe_db_multi_get_cached(db, cf, 2, keys, klens, vals, vlens, errs));
    ck_assert_err(errs[0], TROUPE_EAGAIN);
    ck_assert_err(errs[1], TROUPE_EAGAIN);
    troupe_iter *it = NULL;
    troupe_kv kv;
    ck_assert_ok(
        troupe_iter_create_cached(db, cf, NULL, NULL, NULL, 0, false, &it));
    ck_assert_err(troupe_iter_next(it, &kv), TROUPE_EAGAIN);
    ck_assert_err(troupe_iter_next(it, &kv), TROUPE_EAGAIN); /* stays */
    troupe_iter_destroy(it);
    /* a blocking read loads the block; then the cached reads hit */
    st_assert_value(db, cf, "a", "1");
    ck_assert_ok(troupe_db_get_cached(db, cf, "b", 1, &v, &n));
    ck_assert_int_eq(memcmp(v, "2", 1), 0);
    troupe_free(v);
    ck_assert_err(troupe_db_get_cached(db, cf, "zz", 2, &v, &n), TROUPE_ENOENT);
    ck_assert_ok(
        troupe_iter_create_cached(db, cf, NULL, NULL, NULL, 0, false, &it));
    ck_assert_ok(troupe_iter_next(it, &kv));
    ck_assert_ok(troupe_iter_next(it, &kv));
    ck_assert_err(troupe_iter_next(it, &kv), TROUPE_ENOENT);
    troupe_iter_destroy(it);
    /* argument checks as the blocking twins */
    ck_assert_err(troupe_db_get_cached(NULL, cf, "a", 1, &v, &n),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_db_get_cached(db, cf, "a", 0, &v, &n), TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get_cached(db, cf, 0, keys, klens, vals, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

Suite *
storage_engine_suite(void)
{
    Suite *s = suite_create("storage_engine");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc, test_open_fresh_dir_has_only_default_cf);
    tcase_add_test(tc, test_open_creates_listed_cfs_and_reopen_lists_them);
    tcase_add_test(tc, test_open_missing_without_create_is_enoent);
    tcase_add_test(tc, test_open_bad_args_einval);
    tcase_add_test(tc, test_open_on_plain_file_or_under_one_is_einval);
    tcase_add_test(tc, test_open_under_missing_parent_is_enoent);
    tcase_add_test(tc, test_open_without_permission_is_einval);
    tcase_add_test(tc, test_open_twice_is_ebusy);
    tcase_add_test(tc, test_close_null_is_ok_and_getters_on_null_are_false);
    tcase_add_test(tc, test_close_with_live_snapshot_or_iterator_is_ebusy);
    tcase_add_test(tc, test_synced_write_survives_reopen);
    tcase_add_test(tc, test_cached_reads_never_touch_the_disk);
    tcase_add_test(tc, test_key_bounds_are_exact);
    tcase_add_test(
        tc, test_batch_bytes_rebuild_the_same_batch_and_bad_bytes_are_ecorrupt);
    tcase_add_test(tc, test_disable_wal_refuses_sync_writes);
    tcase_add_test(tc, test_cf_create_drop_lifecycle);
    tcase_add_test(tc, test_cf_calls_bad_args_einval);
    tcase_add_test(tc, test_cf_names_enomem);
    tcase_add_test(tc, test_flush_bad_args_einval);
    tcase_add_test(tc, test_corrupt_table_file_fails_reads_with_ecorrupt);
    tcase_add_test(tc,
                   test_wal_flipped_byte_open_ecorrupt_then_accept_wal_loss);
    tcase_add_test(tc, test_wal_torn_tail_opens_clean_without_loss_signal);
    tcase_add_test(tc, test_reopens_do_not_pile_up_wal_files);
    tcase_add_test(tc,
                   test_writes_below_min_free_are_enospc_and_db_stays_usable);
    suite_add_tcase(s, tc);
    return s;
}
