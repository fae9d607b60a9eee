/*
 * Failure semantics under a dying disk: run only under the LD_PRELOAD fault
 * shim (tests/shims), as the CTest entry storage_faults does. Each test
 * fails if the shim is absent, rather than passing without injecting.
 *
 * Checked: a failed sync or write is EUNKNOWN (never a clean abort), or
 * ENOSPC when the disk is full and the write's data never reached the WAL
 * (then the batch is not stored); after it the db is fail-stop (EFAILSTOP
 * for every write, reads still work); nothing retries; close works; a
 * reopen with the disk healthy opens. A failing info LOG changes nothing
 * (the logger of Debian's assertion-enabled RocksDB aborts on it; troupe
 * gives RocksDB its own).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>

#include "fault_shim.h"
#include "stest.h"
#include "troupe/commit.h"

static char *dir;
static troupe_fault_arm_fn arm;
static troupe_fault_disarm_fn disarm;
static troupe_fault_hits_fn hits;

static void
setup(void)
{
    dir = ts_tempdir("faults");
    arm = (troupe_fault_arm_fn)dlsym(RTLD_DEFAULT, TROUPE_FAULT_ARM_SYM);
    disarm =
        (troupe_fault_disarm_fn)dlsym(RTLD_DEFAULT, TROUPE_FAULT_DISARM_SYM);
    hits = (troupe_fault_hits_fn)dlsym(RTLD_DEFAULT, TROUPE_FAULT_HITS_SYM);
    ck_assert_msg(arm != NULL && disarm != NULL && hits != NULL,
                  "fault shim not preloaded (LD_PRELOAD)");
}

static void
teardown(void)
{
    if (disarm != NULL)
        disarm();
    ts_rmtree(dir);
    free(dir);
}

/* Every write path answers EFAILSTOP; reads still work. */
static void
assert_failstop(troupe_db *db, troupe_cf *cf)
{
    ck_assert(troupe_db_failstop(db));
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "after", 5, "x", 1));
    ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_OFF), TROUPE_EFAILSTOP);
    ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_ON), TROUPE_EFAILSTOP);
    troupe_batch_destroy(b);
    ck_assert_err(troupe_db_cf_create(db, "newcf", NULL), TROUPE_EFAILSTOP);
    ck_assert_err(troupe_db_cf_drop(db, "a"), TROUPE_EFAILSTOP);
    ck_assert_err(troupe_db_flush(db), TROUPE_EFAILSTOP);
    st_assert_value(db, cf, "before", "ok");
}

/* The db with family "a" holding before = ok, synced. */
static troupe_db *
open_with_before(troupe_cf **cf)
{
    const char *cfs[] = {"a"};
    troupe_db *db = st_open(dir, cfs, 1);
    *cf = st_cf(db, "a");
    st_put(db, *cf, "before", "ok", TROUPE_SYNC_ON);
    return db;
}

/* A put of "failed" that the armed shim makes fail with `want`. */
static void
write_fails(troupe_db *db, troupe_cf *cf, troupe_sync sync, troupe_err want)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "failed", 6, "?", 1));
    ck_assert_err(troupe_db_write(db, b, sync), want);
    ck_assert_int_gt(hits(), 0);
    troupe_batch_destroy(b);
}

static void
reopen_healthy(const char *tag, troupe_db **db)
{
    disarm();
    ck_assert_ok(troupe_db_close(*db));
    *db = NULL;
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    ck_assert_ok(troupe_db_open(dir, &o, db));
    ck_assert(!troupe_db_failstop(*db));
    troupe_cf *cf = st_cf(*db, "a");
    st_assert_value(*db, cf, "before", "ok");
    st_assert_value(*db, cf, "after", NULL);
    char *v = st_get(*db, cf, NULL, "failed");
    /* The outcome really is unknown; say which one this run saw. */
    fprintf(stderr, "%s: the failed batch is %s after reopen\n", tag,
            v != NULL ? "present" : "absent");
    troupe_free(v);
    st_put(*db, cf, "again", "ok", TROUPE_SYNC_ON); /* writable again */
    st_assert_value(*db, cf, "again", "ok");
}

START_TEST(test_sync_failure_is_eunknown_then_failstop_until_reopen)
{
    troupe_cf *cf;
    troupe_db *db = open_with_before(&cf);
    arm(TROUPE_FAULT_SYNC, 0, dir, EIO);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "failed", 6, "?", 1));
    ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_ON), TROUPE_EUNKNOWN);
    ck_assert_int_gt(hits(), 0);
    long h = hits();
    /* Fail-stop, and no retry: not one more sync reaches the disk. */
    ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_ON), TROUPE_EFAILSTOP);
    troupe_batch_destroy(b);
    assert_failstop(db, cf);
    ck_assert_int_eq(hits(), h);
    reopen_healthy("sync failure", &db);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

START_TEST(test_write_failure_is_eunknown_then_failstop_until_reopen)
{
    troupe_cf *cf;
    troupe_db *db = open_with_before(&cf);
    /* Every file of the db, the info LOG included: its failures must
     * cost nothing but log lines. */
    arm(TROUPE_FAULT_WRITE, 0, dir, EIO);
    write_fails(db, cf, TROUPE_SYNC_OFF, TROUPE_EUNKNOWN);
    assert_failstop(db, cf);
    reopen_healthy("write failure", &db);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

static bool
reserve_present(void)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof(p), "%s/TROUPE-RESERVE", dir);
    return stat(p, &st) == 0;
}

/* A full disk under RocksDB (the free-space gate sees plenty: only the
 * shim says ENOSPC, to every write in the db's directory, the info LOG
 * included): the write is ENOSPC, not stored, the db fail-stop, the
 * reserve released, and the process alive. */
START_TEST(test_write_enospc_is_enospc_not_stored_then_failstop)
{
    troupe_cf *cf;
    troupe_db *db = open_with_before(&cf);
    ck_assert(reserve_present());
    arm(TROUPE_FAULT_WRITE, 0, dir, ENOSPC);
    write_fails(db, cf, TROUPE_SYNC_ON, TROUPE_ENOSPC);
    ck_assert(!reserve_present());
    assert_failstop(db, cf);

    disarm();
    ck_assert_ok(troupe_db_close(db));
    db = st_open(dir, NULL, 0);
    ck_assert(!troupe_db_failstop(db));
    cf = st_cf(db, "a");
    st_assert_value(db, cf, "before", "ok");
    st_assert_value(db, cf, "failed", NULL); /* ENOSPC: not stored */
    ck_assert(reserve_present());            /* made again at open */
    st_put(db, cf, "again", "ok", TROUPE_SYNC_ON);
    st_assert_value(db, cf, "again", "ok");
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* Only the info LOG fails (every write to LOG and LOG.old): RocksDB's
 * own logger would abort the process at its next line; troupe's drops
 * lines and the db goes on, not fail-stop, writes, flushes and family
 * creations (which all log) working. */
START_TEST(test_info_log_write_failure_drops_lines_db_works)
{
    troupe_cf *cf;
    troupe_db *db = open_with_before(&cf);
    char log[4096];
    snprintf(log, sizeof(log), "%s/LOG", dir);
    arm(TROUPE_FAULT_WRITE, 0, log, ENOSPC);
    char k[32];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 50; i++) {
            snprintf(k, sizeof(k), "k%d-%02d", round, i);
            st_put(db, cf, k, "v", TROUPE_SYNC_ON);
        }
        ck_assert_ok(troupe_db_flush(db)); /* a flush logs several lines */
        ck_assert_ok(troupe_db_cf_create(db,
                                         round == 0   ? "x0"
                                         : round == 1 ? "x1"
                                                      : "x2",
                                         NULL));
    }
    ck_assert_int_gt(hits(), 0);
    ck_assert(!troupe_db_failstop(db));
    disarm();
    ck_assert_ok(troupe_db_close(db));
    const char *more[] = {"a", "x0", "x1", "x2"};
    db = st_open(dir, more, 4);
    cf = st_cf(db, "a");
    st_assert_value(db, cf, "k2-49", "v");
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

/* Completion slots, as in check_commit.c. */
typedef struct slot {
    atomic_int fired;
    _Atomic troupe_err err;
} slot;

static void
slot_cb(troupe_err err, void *arg)
{
    slot *s = arg;
    atomic_store(&s->err, err);
    atomic_fetch_add(&s->fired, 1);
}

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    atomic_bool entered;
} gate;

static void
gate_cb(troupe_err err, void *arg)
{
    gate *g = arg;
    ck_assert_ok(err);
    atomic_store(&g->entered, true);
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static bool
gate_entered(void *arg)
{
    return atomic_load(&((gate *)arg)->entered);
}

typedef struct slots {
    slot *v;
    int n;
} slots;

static bool
all_fired(void *arg)
{
    slots *s = arg;
    for (int i = 0; i < s->n; i++) {
        if (atomic_load(&s->v[i].fired) == 0)
            return false;
    }
    return true;
}

START_TEST(test_pipeline_failed_group_eunknown_later_groups_efailstop)
{
    troupe_cf *cf;
    troupe_db *db = open_with_before(&cf);
    troupe_commit *c;
    troupe_commit_opts o = {.group_max_batches = 2};
    ck_assert_ok(troupe_commit_create(db, &o, &c));

    /* Hold the writer so that five batches queue up: groups of two. */
    gate g;
    memset(&g, 0, sizeof(g));
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "gate", 4, "1", 1));
    ck_assert_ok(troupe_commit_submit(c, &b, TROUPE_SYNC_OFF, gate_cb, &g));
    ck_assert(ts_wait_until(gate_entered, &g, 10000));
    enum { N = 5 };
    slot s[N];
    memset(s, 0, sizeof(s));
    for (int i = 0; i < N; i++) {
        ck_assert_ok(troupe_batch_create(&b));
        ck_assert_ok(troupe_batch_put(b, cf, "failed", 6, "?", 1));
        ck_assert_ok(
            troupe_commit_submit(c, &b, TROUPE_SYNC_ON, slot_cb, &s[i]));
    }
    arm(TROUPE_FAULT_SYNC, 0, dir, EIO);
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    slots ss = {s, N};
    ck_assert(ts_wait_until(all_fired, &ss, 10000));
    /* The group that hit the failure: unknown. The ones queued behind it:
     * fail-stop, nothing written. Each exactly once. */
    ck_assert_err(atomic_load(&s[0].err), TROUPE_EUNKNOWN);
    ck_assert_err(atomic_load(&s[1].err), TROUPE_EUNKNOWN);
    for (int i = 2; i < N; i++)
        ck_assert_err(atomic_load(&s[i].err), TROUPE_EFAILSTOP);
    /* New submits are refused at once. */
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, "after", 5, "x", 1));
    slot late = {0};
    ck_assert_err(troupe_commit_submit(c, &b, TROUPE_SYNC_OFF, slot_cb, &late),
                  TROUPE_EFAILSTOP);
    troupe_batch_destroy(b);
    troupe_commit_stats st;
    troupe_commit_get_stats(c, &st);
    ck_assert_uint_eq(st.groups, 2); /* gate + the failed one; no retry */
    troupe_commit_destroy(c);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(atomic_load(&s[i].fired), 1);
    ck_assert_int_eq(atomic_load(&late.fired), 0);
    assert_failstop(db, cf);
    reopen_healthy("pipeline sync failure", &db);
    ck_assert_ok(troupe_db_close(db));
}
END_TEST

Suite *
storage_faults_suite(void)
{
    Suite *s = suite_create("storage_faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc,
                   test_sync_failure_is_eunknown_then_failstop_until_reopen);
    tcase_add_test(tc,
                   test_write_failure_is_eunknown_then_failstop_until_reopen);
    tcase_add_test(tc, test_write_enospc_is_enospc_not_stored_then_failstop);
    tcase_add_test(tc, test_info_log_write_failure_drops_lines_db_works);
    tcase_add_test(tc,
                   test_pipeline_failed_group_eunknown_later_groups_efailstop);
    suite_add_tcase(s, tc);
    return s;
}
