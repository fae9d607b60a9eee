/*
 * The engine's log records reach the logger given in troupe_db_opts:
 * real triggers (an open refused for its directory, an open of a db held
 * by another handle), with the level, sys, message and fields right.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "stest.h"
#include "troupe/log.h"

typedef struct seen {
    pthread_mutex_t mu;
    int n;
    troupe_log_level level[8];
    char sys[8][32];
    char msg[8][512];
    char fields[8][256]; /* "k=v k=v" */
} seen;

static void
keep(void *ctx, const troupe_log_record *r)
{
    seen *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (s->n < 8) {
        int i = s->n++;
        s->level[i] = r->level;
        snprintf(s->sys[i], sizeof(s->sys[i]), "%s", r->sys);
        snprintf(s->msg[i], sizeof(s->msg[i]), "%s", r->msg);
        size_t off = 0;
        for (size_t f = 0; f < r->nfields; f++)
            off += (size_t)snprintf(
                s->fields[i] + off, sizeof(s->fields[i]) - off, "%s%s=%s",
                f ? " " : "", r->fields[f].key, r->fields[f].value);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Opens dir with a logger that keeps its records in *s (cleared):
 * the open's result. */
static troupe_err
open_seen(const char *dir, seen *s, troupe_db **db)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.logger = (troupe_logger){.fn = keep, .ctx = s};
    *db = NULL;
    return troupe_db_open(dir, &o, db);
}

/* The first record: a warning of the storage engine, with these fields. */
static void
assert_first_warning(const seen *s, const char *fields)
{
    ck_assert_int_ge(s->n, 1);
    ck_assert_int_eq(s->level[0], TROUPE_LOG_WARN);
    ck_assert_str_eq(s->sys[0], "storage");
    ck_assert_str_eq(s->fields[0], fields);
}

START_TEST(test_storage_log_open_refused_dir_goes_to_db_logger)
{
    char *dir = ts_tempdir("slog");
    char file[512];
    snprintf(file, sizeof(file), "%s/plain", dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    seen s;
    troupe_db *db = NULL;
    ck_assert_err(open_seen(file, &s, &db), TROUPE_EINVAL);
    ck_assert_int_eq(s.n, 1);
    char want[600];
    snprintf(want, sizeof(want), "dir=%s err=EINVAL", file);
    assert_first_warning(&s, want);
    ck_assert_ptr_nonnull(strstr(s.msg[0], file));
    ck_assert_ptr_nonnull(strstr(s.msg[0], "not a directory"));

    /* The level filter applies: at ERROR the same refusal is silent. */
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.logger =
        (troupe_logger){.fn = keep, .ctx = &s, .level = TROUPE_LOG_ERROR};
    ck_assert_err(troupe_db_open(file, &o, &db), TROUPE_EINVAL);
    ck_assert_int_eq(s.n, 1);
    ts_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_storage_log_busy_lock_is_a_warning_from_rocksdb_adapter)
{
    char *dir = ts_tempdir("slog");
    troupe_db *held = st_open(dir, NULL, 0);
    seen s;
    troupe_db *db = NULL;
    ck_assert_err(open_seen(dir, &s, &db), TROUPE_EBUSY);
    assert_first_warning(&s, "op=open err=EBUSY");
    ck_assert_ptr_nonnull(strstr(s.msg[0], "LOCK"));
    ck_assert_ok(troupe_db_close(held));
    ts_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_storage_log_bad_level_is_einval)
{
    char *dir = ts_tempdir("slog");
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.logger.level = (troupe_log_level)(TROUPE_LOG_DEBUG + 1);
    troupe_db *db = NULL;
    ck_assert_err(troupe_db_open(dir, &o, &db), TROUPE_EINVAL);
    ck_assert_ptr_null(db);
    ts_rmtree(dir);
    free(dir);
}
END_TEST

Suite *
storage_log_suite(void)
{
    Suite *s = suite_create("storage_log");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc, test_storage_log_open_refused_dir_goes_to_db_logger);
    tcase_add_test(
        tc, test_storage_log_busy_lock_is_a_warning_from_rocksdb_adapter);
    tcase_add_test(tc, test_storage_log_bad_level_is_einval);
    suite_add_tcase(s, tc);
    return s;
}
