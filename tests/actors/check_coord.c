/* The coordinator (actors/coord: troupe/coordinator.h) on a real runtime
 * and database: sagas driven through a callback target, every transition
 * committed, a submit twice driving nothing twice, bad submits refused,
 * and what was unfinished (or in flight) at a stop driven again after the
 * next open. The rules themselves are check_gtx's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tnode.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/table.h"
#include "tsupport.h"

#define LOG_MAX 64

typedef struct co_fx {
    tnode node; /* tnode.h: a runtime, a database, tables */
    troupe_target *bank;
    troupe_coord *coord;
    _Atomic int64_t clock;
    pthread_mutex_t mu;
    char log[LOG_MAX][64]; /* "gid branch op", in call order */
    int n_log;
    char fail[64];    /* "gid branch op" answered FAILURE */
    char unknown[64]; /* "gid branch op" answered UNKNOWN */
    _Atomic int hold; /* calls wait while set */
    _Atomic int held; /* calls waiting */
} co_fx;

static co_fx fx;

static int64_t
fake_clock(void *arg)
{
    (void)arg;
    return atomic_load(&fx.clock);
}

/* The bank: logs each branch call and answers from the script. */
static troupe_outcome
bank_fn(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    (void)arg;
    ck_assert_int_eq(t->kind, TROUPE_TASK_BRANCH);
    const char *mode = (const char *)t->header;
    const char *gid = mode + strlen(mode) + 1;
    const char *bid = gid + strlen(gid) + 1;
    const char *op = bid + strlen(bid) + 1;
    ck_assert_str_eq(mode, "saga");
    ck_assert_uint_eq((size_t)(op + strlen(op) + 1 - mode), t->header_len);
    char key[64];
    snprintf(key, sizeof(key), "%s %s %s", gid, bid, op);
    pthread_mutex_lock(&fx.mu);
    if (fx.n_log < LOG_MAX)
        snprintf(fx.log[fx.n_log++], 64, "%s", key);
    troupe_outcome o = strcmp(key, fx.fail) == 0      ? TROUPE_OUTCOME_FAILURE
                       : strcmp(key, fx.unknown) == 0 ? TROUPE_OUTCOME_UNKNOWN
                                                      : TROUPE_OUTCOME_SUCCESS;
    pthread_mutex_unlock(&fx.mu);
    if (atomic_load(&fx.hold)) {
        atomic_fetch_add(&fx.held, 1);
        while (atomic_load(&fx.hold)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    /* the payload is the step's */
    ck_assert_uint_eq(t->body_len, 2);
    return o;
}

static void
coord_open(void)
{
    troupe_coord_opts co = {.rt = fx.node.rt,
                            .tables = fx.node.tables,
                            .shards = 4,
                            .retry_min_ms = 60000,
                            .retry_max_ms = 60000,
                            .clock = fake_clock};
    ck_assert_ok(troupe_coord_open_wait(&co, &fx.coord));
}

static void
coord_close(void)
{
    ck_assert_ok(troupe_coord_stop_wait(fx.coord));
    troupe_coord_destroy(fx.coord);
    fx.coord = NULL;
}

static void
setup(void)
{
    memset(&fx, 0, sizeof(fx));
    pthread_mutex_init(&fx.mu, NULL);
    atomic_store(&fx.clock, 1700000000000);
    troupe_runtime_opts o = {.workers = 2, .host_workers = 2};
    tnode_open(&fx.node, "coord", &o);
    troupe_target_opts tg = {.name = "bank", .fn = bank_fn, .credit = 8};
    ck_assert_ok(troupe_target_create(fx.node.rt, &tg, &fx.bank));
    coord_open();
}

static void
teardown(void)
{
    atomic_store(&fx.hold, 0);
    if (fx.coord != NULL)
        coord_close();
    ck_assert_ok(troupe_target_stop_wait(fx.bank));
    troupe_target_destroy(fx.bank);
    tnode_close(&fx.node);
    pthread_mutex_destroy(&fx.mu);
}

static const troupe_saga_step two[2] = {
    {{"bank", "\x81\x01", 2}, {"bank", "\x81\x02", 2}},
    {{"bank", "\x81\x03", 2}, {"bank", "\x81\x04", 2}}};

static troupe_err
submit(const char *gid)
{
    return troupe_saga_submit_wait(fx.coord, gid, strlen(gid), two, 2, NULL);
}

static bool
final_pred(void *arg)
{
    troupe_gtx_info in;
    const char *gid = arg;
    if (troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in) != TROUPE_OK)
        return false;
    return in.status == TROUPE_GTX_SUCCEED || in.status == TROUPE_GTX_FAILED;
}

static troupe_gtx_info
wait_final(const char *gid)
{
    ck_assert_msg(ts_wait_until(final_pred, (void *)gid, 10000),
                  "%s did not end", gid);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in));
    return in;
}

/* The calls logged for gid, joined with ", ". */
static void
calls_of(const char *gid, char *out, size_t cap)
{
    out[0] = '\0';
    pthread_mutex_lock(&fx.mu);
    for (int i = 0; i < fx.n_log; i++) {
        size_t gl = strlen(gid);
        if (strncmp(fx.log[i], gid, gl) != 0 || fx.log[i][gl] != ' ')
            continue;
        if (out[0] != '\0')
            strncat(out, ", ", cap - strlen(out) - 1);
        strncat(out, fx.log[i] + gl + 1, cap - strlen(out) - 1);
    }
    pthread_mutex_unlock(&fx.mu);
}

START_TEST(test_a_saga_runs_its_actions_and_succeeds)
{
    ck_assert_ok(submit("s-ok"));
    troupe_gtx_info in = wait_final("s-ok");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    ck_assert_int_eq(in.mode, TROUPE_MODE_SAGA);
    ck_assert_uint_eq(in.steps, 2);
    ck_assert_str_eq(in.reason, "");
    ck_assert_int_gt(in.finished_ms, 0);
    char calls[512];
    calls_of("s-ok", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");
}
END_TEST

START_TEST(test_a_saga_failure_compensates_in_reverse)
{
    strcpy(fx.fail, "s-no 02 action");
    ck_assert_ok(submit("s-no"));
    troupe_gtx_info in = wait_final("s-no");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "branch 02 action: FAILURE");
    char calls[512];
    calls_of("s-no", calls, sizeof(calls));
    ck_assert_str_eq(calls,
                     "01 action, 02 action, 02 compensate, 01 compensate");
}
END_TEST

/* A submit of a gid that exists succeeds and drives nothing again, live
 * or finished; many at once drive it once. */
START_TEST(test_a_submit_twice_drives_nothing_twice)
{
    for (int i = 0; i < 5; i++)
        ck_assert_ok(submit("s-twice"));
    wait_final("s-twice");
    ck_assert_ok(submit("s-twice"));
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-twice", 7, two, 1, NULL));
    /* a later saga runs after them: the coordinator has moved on */
    ck_assert_ok(submit("s-after"));
    wait_final("s-after");
    char calls[512];
    calls_of("s-twice", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");
}
END_TEST

START_TEST(test_bad_submits_are_refused)
{
    ck_assert_err(submit(""), TROUPE_EINVAL);
    ck_assert_err(submit("bad gid"), TROUPE_EINVAL);
    troupe_saga_step nowhere[1] = {
        {{"nobody", "\x81\x01", 2}, {NULL, NULL, 0}}};
    ck_assert_err(troupe_saga_submit_wait(fx.coord, "s-x", 3, nowhere, 1, NULL),
                  TROUPE_ENOENT);
    troupe_saga_step noaction[1] = {{{NULL, NULL, 0}, {"bank", "\x81\x01", 2}}};
    ck_assert_err(
        troupe_saga_submit_wait(fx.coord, "s-x", 3, noaction, 1, NULL),
        TROUPE_EINVAL);
    troupe_saga_step many[65];
    for (int i = 0; i < 65; i++)
        many[i] = two[0];
    ck_assert_err(troupe_saga_submit_wait(fx.coord, "s-x", 3, many, 65, NULL),
                  TROUPE_EINVAL);
    troupe_saga_opts neg = {.timeout_to_fail_ms = -1};
    ck_assert_err(troupe_saga_submit_wait(fx.coord, "s-x", 3, two, 2, &neg),
                  TROUPE_EINVAL);
    troupe_gtx_info in;
    ck_assert_err(troupe_gtx_query_wait(fx.coord, "s-x", 3, &in),
                  TROUPE_ENOENT); /* nothing was stored */
}
END_TEST

static bool
attempted(void *arg)
{
    troupe_gtx_info in;
    const char *gid = arg;
    return troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in) ==
               TROUPE_OK &&
           in.attempts >= 1;
}

/* UNKNOWN never compensates: the saga waits for its retry; one reopened
 * past that time drives it on from what it committed. */
START_TEST(test_an_unfinished_saga_is_driven_again_after_reopen)
{
    strcpy(fx.unknown, "s-re 02 action");
    ck_assert_ok(submit("s-re"));
    ck_assert(ts_wait_until(attempted, (void *)"s-re", 10000));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-re", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_SUBMITTED);
    coord_close();
    fx.unknown[0] = '\0';
    atomic_fetch_add(&fx.clock, 60000); /* its retry is due */
    coord_open();
    in = wait_final("s-re");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("s-re", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action, 02 action");
}
END_TEST

static bool
one_held(void *arg)
{
    (void)arg;
    return atomic_load(&fx.held) >= 1;
}

/* A call in flight when the coordinator stops has no committed outcome:
 * after the next open it runs again (at least once; the barrier makes
 * it once). */
START_TEST(test_a_call_in_flight_at_stop_runs_again_after_open)
{
    atomic_store(&fx.hold, 1);
    ck_assert_ok(submit("s-fly"));
    ck_assert(ts_wait_until(one_held, NULL, 10000));
    coord_close();
    atomic_store(&fx.hold, 0); /* its outcome goes nowhere */
    coord_open();
    troupe_gtx_info in = wait_final("s-fly");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("s-fly", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 01 action, 02 action");
}
END_TEST

START_TEST(test_open_and_stop_refuse_bad_use)
{
    troupe_coord *c = NULL;
    troupe_coord_opts bad = {.rt = fx.node.rt,
                             .tables = fx.node.tables,
                             .retry_min_ms = 10,
                             .retry_max_ms = 5};
    ck_assert_err(troupe_coord_open_wait(&bad, &c), TROUPE_EINVAL);
    bad = (troupe_coord_opts){.rt = fx.node.rt,
                              .tables = fx.node.tables,
                              .shards = TROUPE_COORD_SHARDS_MAX + 1};
    ck_assert_err(troupe_coord_open_wait(&bad, &c), TROUPE_EINVAL);
    ck_assert_err(troupe_coord_open_wait(NULL, &c), TROUPE_EINVAL);
    ck_assert_err(troupe_coord_stop_wait(NULL), TROUPE_EINVAL);
    coord_close();
    troupe_coord_opts co = {.rt = fx.node.rt, .tables = fx.node.tables};
    ck_assert_ok(troupe_coord_open_wait(&co, &c));
    ck_assert_ok(troupe_coord_stop_wait(c));
    ck_assert_err(troupe_coord_stop_wait(c), TROUPE_ESTATE);
    ck_assert_err(troupe_saga_submit_wait(c, "s", 1, two, 2, NULL),
                  TROUPE_ECLOSED);
    troupe_coord_destroy(c);
}
END_TEST

Suite *
coord_suite(void)
{
    Suite *s = suite_create("coord");
    TCase *c = tcase_create("saga");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, test_a_saga_runs_its_actions_and_succeeds);
    tcase_add_test(c, test_a_saga_failure_compensates_in_reverse);
    tcase_add_test(c, test_a_submit_twice_drives_nothing_twice);
    tcase_add_test(c, test_bad_submits_are_refused);
    tcase_add_test(c, test_an_unfinished_saga_is_driven_again_after_reopen);
    tcase_add_test(c, test_a_call_in_flight_at_stop_runs_again_after_open);
    tcase_add_test(c, test_open_and_stop_refuse_bad_use);
    suite_add_tcase(s, c);
    return s;
}
