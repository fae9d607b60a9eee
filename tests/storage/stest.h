/*
 * Shared by the storage suites: suite constructors and small helpers that
 * assert as they go (each test runs in its own forked process).
 */
#ifndef TROUPE_STEST_H
#define TROUPE_STEST_H

#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/storage.h"
#include "tsupport.h"

Suite *
storage_engine_suite(void);
Suite *
storage_scan_suite(void);
Suite *
storage_keycodec_suite(void);
Suite *
storage_commit_suite(void);
Suite *
storage_faults_suite(void);
Suite *
storage_log_suite(void);
Suite *
storage_readonly_suite(void);

/* Per-test timeout (s): generous for ASan on a loaded 2-core machine. */
#define ST_TIMEOUT 60

static inline troupe_db *
st_open(const char *dir, const char *const *cfs, size_t ncfs)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.cfs = cfs;
    o.ncfs = ncfs;
    troupe_db *db = NULL;
    ck_assert_ok(troupe_db_open(dir, &o, &db));
    ck_assert_ptr_nonnull(db);
    return db;
}

static inline troupe_cf *
st_cf(troupe_db *db, const char *name)
{
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_cf(db, name, &cf));
    return cf;
}

static inline void
st_put(troupe_db *db, troupe_cf *cf, const char *k, const char *v,
       troupe_sync sync)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, k, strlen(k), v, strlen(v)));
    ck_assert_ok(troupe_db_write(db, b, sync));
    troupe_batch_destroy(b);
}

/* The value as a NUL-terminated troupe_malloc'ed string, NULL if absent. */
static inline char *
st_get(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap, const char *k)
{
    void *v = NULL;
    size_t n = 0;
    troupe_err e = troupe_db_get(db, cf, snap, k, strlen(k), &v, &n);
    if (e == TROUPE_ENOENT)
        return NULL;
    ck_assert_ok(e);
    char *s = troupe_malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memcpy(s, v, n);
    s[n] = '\0';
    troupe_free(v);
    return s;
}

static inline void
st_assert_value(troupe_db *db, troupe_cf *cf, const char *k, const char *want)
{
    char *got = st_get(db, cf, NULL, k);
    if (want == NULL) {
        ck_assert_msg(got == NULL, "key %s: want absent, got \"%s\"", k, got);
    } else {
        ck_assert_msg(got != NULL, "key %s: want \"%s\", absent", k, want);
        ck_assert_str_eq(got, want);
    }
    troupe_free(got);
}

#endif
