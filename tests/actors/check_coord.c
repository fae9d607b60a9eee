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
#include "troupe/barrier.h"
#include "troupe/branch.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/keycodec.h"
#include "troupe/table.h"
#include "troupe/transport.h"
#include "troupe/ttl.h"
#include "troupe/txn.h"
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
    char silent[64];  /* "gid branch op" the teller does not answer, once */
    char refuse[64];  /* ... answers with an error reply, once */
    uint32_t branch_timeout_ms;
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
    ck_assert(strcmp(mode, "saga") == 0 || strcmp(mode, "tcc") == 0 ||
              strcmp(mode, "msg") == 0);
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
    /* the payload is the step's (a query-back has none) */
    ck_assert_uint_eq(t->body_len, strcmp(op, "msg") == 0 ? 0 : 2);
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
                            .branch_timeout_ms = fx.branch_timeout_ms,
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

static bool
held_two(void *arg)
{
    (void)arg;
    return atomic_load(&fx.held) >= 2;
}

/* The position of call in the log of gid, -1 when absent. */
static int
call_at(const char *gid, const char *call)
{
    char key[64];
    snprintf(key, sizeof(key), "%s %s", gid, call);
    pthread_mutex_lock(&fx.mu);
    int at = -1;
    for (int i = 0; i < fx.n_log && at < 0; i++)
        if (strcmp(fx.log[i], key) == 0)
            at = i;
    pthread_mutex_unlock(&fx.mu);
    return at;
}

static const troupe_saga_step three[3] = {
    {{"bank", "\x81\x01", 2}, {"bank", "\x81\x02", 2}},
    {{"bank", "\x81\x03", 2}, {"bank", "\x81\x04", 2}},
    {{"bank", "\x81\x05", 2}, {"bank", "\x81\x06", 2}}};

/* Concurrent steps: 01 and 02 are called at once (both held in the
 * target together), 03, which waits for both, only after. */
START_TEST(test_concurrent_steps_run_together_after_their_dependencies)
{
    uint64_t after[3] = {0, 0, 0x3};
    troupe_saga_opts o = {.concurrent = true, .after = after};
    atomic_store(&fx.hold, 1);
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-cc", 4, three, 3, &o));
    ck_assert_msg(ts_wait_until(held_two, NULL, 10000),
                  "01 and 02 were not called at once");
    ck_assert_int_eq(call_at("s-cc", "03 action"), -1);
    atomic_store(&fx.hold, 0);
    ck_assert_int_eq(wait_final("s-cc").status, TROUPE_GTX_SUCCEED);
    int a1 = call_at("s-cc", "01 action"), a2 = call_at("s-cc", "02 action");
    int a3 = call_at("s-cc", "03 action");
    ck_assert(a1 >= 0 && a2 >= 0 && a3 > a1 && a3 > a2);
    /* stored as such: a reopened coordinator reads it back */
    coord_close();
    coord_open();
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-cc", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
}
END_TEST

/* A FAILURE in a concurrent saga compensates the step that waited for
 * the failed one (never run) before those it waited for. */
START_TEST(test_a_concurrent_failure_compensates_dependents_first)
{
    uint64_t after[3] = {0, 0, 0x3};
    troupe_saga_opts o = {.concurrent = true, .after = after};
    strcpy(fx.fail, "s-cf 02 action");
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-cf", 4, three, 3, &o));
    troupe_gtx_info in = wait_final("s-cf");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "branch 02 action: FAILURE");
    ck_assert_int_eq(call_at("s-cf", "03 action"), -1);
    int c3 = call_at("s-cf", "03 compensate");
    ck_assert_int_ge(c3, 0);
    ck_assert_int_gt(call_at("s-cf", "01 compensate"), c3);
    ck_assert_int_gt(call_at("s-cf", "02 compensate"), c3);
}
END_TEST

/* A step order is checked at submit: nothing is stored when it is bad. */
START_TEST(test_a_bad_step_order_is_refused)
{
    static const struct {
        uint64_t a[3];
        bool concurrent;
    } bad[] = {{{0x1, 0, 0}, true},   /* 01 after itself */
               {{0x2, 0x1, 0}, true}, /* a cycle */
               {{0, 0, 0x8}, true},   /* a step past the last */
               {{0, 0, 0x1}, false}}; /* an order, steps not concurrent */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        troupe_saga_opts o = {.concurrent = bad[i].concurrent,
                              .after = bad[i].a};
        ck_assert_err(
            troupe_saga_submit_wait(fx.coord, "s-bo", 4, three, 3, &o),
            TROUPE_EINVAL);
    }
    troupe_gtx_info in;
    ck_assert_err(troupe_gtx_query_wait(fx.coord, "s-bo", 4, &in),
                  TROUPE_ENOENT);
}
END_TEST

/* ---- actor targets (troupe/branch.h) ---- */

#define TELLER_KIND 3

/* The teller: an actor serving branches as the bank does, logging each
 * call with its attempt and answering from the script. */
static troupe_err
teller_branch(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)state;
    troupe_branch_call b;
    ck_assert_ok(troupe_branch_call_read(m, &b));
    ck_assert_uint_eq(b.payload_len, 2);
    char key[64]; /* the test's gids are short */
    snprintf(key, sizeof(key), "%.32s %s %.12s", b.gid, b.branch_id, b.op);
    pthread_mutex_lock(&fx.mu);
    if (fx.n_log < LOG_MAX)
        snprintf(fx.log[fx.n_log++], 64, "%.50s #%u", key, b.attempt % 1000);
    bool silent = strcmp(key, fx.silent) == 0;
    bool refuse = strcmp(key, fx.refuse) == 0;
    if (silent)
        fx.silent[0] = '\0';
    if (refuse)
        fx.refuse[0] = '\0';
    troupe_outcome o = strcmp(key, fx.fail) == 0 ? TROUPE_OUTCOME_FAILURE
                                                 : TROUPE_OUTCOME_SUCCESS;
    pthread_mutex_unlock(&fx.mu);
    if (silent)
        return TROUPE_OK; /* no reply: the ask times out */
    if (refuse)
        return troupe_reply_error(self, m, TROUPE_EBUSY);
    return troupe_branch_reply(self, m, o);
}

static const troupe_handler_fn teller_handlers[TELLER_KIND + 1] = {
    [TELLER_KIND] = teller_branch};
static const troupe_actor_def teller_def = {.name = "teller",
                                            .handlers = teller_handlers,
                                            .n_handlers = TELLER_KIND + 1};

static troupe_addr
teller_spawn(void)
{
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.name = "teller";
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(fx.node.rt, &teller_def, &so, &a));
    return a;
}

static const troupe_saga_step by_name[2] = {
    {{"actor:teller#3", "\x81\x01", 2}, {"actor:teller#3", "\x81\x02", 2}},
    {{"actor:teller#3", "\x81\x03", 2}, {"actor:teller#3", "\x81\x04", 2}}};

/* A saga over an actor named at submit and one given by its address:
 * each call an ask, each reply its outcome; FAILURE compensates. */
START_TEST(test_actor_targets_serve_a_sagas_branches)
{
    troupe_addr a = teller_spawn();
    ck_assert_ok(
        troupe_saga_submit_wait(fx.coord, "s-at", 4, by_name, 2, NULL));
    ck_assert_int_eq(wait_final("s-at").status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("s-at", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action #1, 02 action #1");

    char addr[64];
    snprintf(addr, sizeof(addr), "actor:@%u.%u.%u#%d", a.node, a.slot, a.gen,
             TELLER_KIND);
    troupe_saga_step by_addr[2] = {
        {{addr, "\x81\x01", 2}, {addr, "\x81\x02", 2}},
        {{addr, "\x81\x03", 2}, {addr, "\x81\x04", 2}}};
    strcpy(fx.fail, "s-af 02 action");
    ck_assert_ok(
        troupe_saga_submit_wait(fx.coord, "s-af", 4, by_addr, 2, NULL));
    troupe_gtx_info in = wait_final("s-af");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "branch 02 action: FAILURE");
    calls_of("s-af", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action #1, 02 action #1, 02 compensate #1, "
                            "01 compensate #1");
}
END_TEST

static bool
first_unknown(void *arg)
{
    troupe_gtx_detail *d = NULL;
    const char *gid = arg;
    if (troupe_gtx_detail_wait(fx.coord, gid, strlen(gid), &d) != TROUPE_OK)
        return false;
    bool u = d->branches[0].ops[0].last == TROUPE_OUTCOME_UNKNOWN &&
             d->branches[0].ops[0].state == TROUPE_GTX_CALL_TODO;
    troupe_gtx_detail_destroy(d);
    return u;
}

/* No reply by the branch timeout, or an error reply, is UNKNOWN: the call
 * waits for its backoff and runs again, nothing compensated. */
START_TEST(test_an_actor_that_does_not_answer_is_unknown_and_retried)
{
    coord_close();
    fx.branch_timeout_ms = 100;
    coord_open();
    (void)teller_spawn();
    static const char *const cases[][2] = {{"s-as", "silent"},
                                           {"s-ar", "refuse"}};
    for (int i = 0; i < 2; i++) {
        const char *gid = cases[i][0];
        pthread_mutex_lock(&fx.mu);
        snprintf(strcmp(cases[i][1], "silent") == 0 ? fx.silent : fx.refuse, 64,
                 "%s 01 action", gid);
        pthread_mutex_unlock(&fx.mu);
        ck_assert_ok(troupe_saga_submit_wait(fx.coord, gid, strlen(gid),
                                             by_name, 2, NULL));
        ck_assert_msg(ts_wait_until(first_unknown, (void *)gid, 10000),
                      "%s: no UNKNOWN", gid);
        ck_assert_ok(troupe_gtx_retry_wait(fx.coord, gid, strlen(gid)));
        ck_assert_int_eq(wait_final(gid).status, TROUPE_GTX_SUCCEED);
        char calls[512];
        calls_of(gid, calls, sizeof(calls));
        ck_assert_str_eq(calls, "01 action #1, 01 action #2, 02 action #1");
    }
}
END_TEST

/* A target that names no registered actor, or breaks the form, is
 * refused at submit with nothing stored; an address is taken on its form,
 * and one whose actor is gone makes its calls UNKNOWN. */
START_TEST(test_bad_actor_targets_are_refused_at_submit)
{
    static const struct {
        const char *target;
        troupe_err want;
    } bad[] = {
        {"actor:nobody#3", TROUPE_ENOENT},  {"actor:teller", TROUPE_EINVAL},
        {"actor:teller#64", TROUPE_EINVAL}, {"actor:teller#03", TROUPE_EINVAL},
        {"actor:#3", TROUPE_EINVAL},        {"actor:@1.0.7#3", TROUPE_EINVAL},
        {"actor:@1.2#3", TROUPE_EINVAL},    {"actor:@1.2.x#3", TROUPE_EINVAL}};
    (void)teller_spawn();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        troupe_saga_step st[1] = {
            {{bad[i].target, "\x81\x01", 2}, {NULL, NULL, 0}}};
        troupe_err e =
            troupe_saga_submit_wait(fx.coord, "s-bt", 4, st, 1, NULL);
        ck_assert_msg(e == bad[i].want, "%s: %s, want %s", bad[i].target,
                      troupe_err_name(e), troupe_err_name(bad[i].want));
    }
    troupe_gtx_info in;
    ck_assert_err(troupe_gtx_query_wait(fx.coord, "s-bt", 4, &in),
                  TROUPE_ENOENT);
    /* a gone actor's address: accepted, its call UNKNOWN */
    troupe_saga_step gone[1] = {
        {{"actor:@1.4000.9#3", "\x81\x01", 2}, {NULL, NULL, 0}}};
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-gone", 6, gone, 1, NULL));
    ck_assert(ts_wait_until(first_unknown, (void *)"s-gone", 10000));
}
END_TEST

static const troupe_actor_def teller_remote_def = {
    .name = "teller",
    .handlers = teller_handlers,
    .n_handlers = TELLER_KIND + 1,
    .remote_kinds = TROUPE_KIND_BIT(TELLER_KIND)};

/* A teller on another node (a second runtime over tcp loopback) serves a
 * saga by its address; once that node is gone its calls are UNKNOWN
 * (unreachable or past the deadline), never compensated. */
START_TEST(test_an_actor_on_another_node_serves_branches)
{
    coord_close();
    fx.branch_timeout_ms = 2000;
    coord_open();
    troupe_node *na = NULL, *nb = NULL;
    ck_assert_ok(troupe_node_create(&na, fx.node.rt, NULL));
    ck_assert_ok(troupe_node_listen(na, "tcp://127.0.0.1:0"));
    troupe_runtime *rb = NULL;
    troupe_runtime_opts ob = {.schedulers = 1, .workers = 1, .node_id = 2};
    ck_assert_ok(troupe_runtime_create(&rb, &ob));
    ck_assert_ok(troupe_node_create(&nb, rb, NULL));
    ck_assert_ok(troupe_node_listen(nb, "tcp://127.0.0.1:0"));
    uint32_t peer = 0;
    ck_assert_ok(
        troupe_node_connect_wait(nb, troupe_node_url(na), 10000, &peer));
    ck_assert_ok(troupe_node_wait_peer(na, 2, 10000));
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(rb, &teller_remote_def, NULL, &a));
    ck_assert_uint_eq(a.node, 2);
    char addr[64];
    snprintf(addr, sizeof(addr), "actor:@%u.%u.%u#%d", a.node, a.slot, a.gen,
             TELLER_KIND);
    troupe_saga_step st[2] = {{{addr, "\x81\x01", 2}, {addr, "\x81\x02", 2}},
                              {{addr, "\x81\x03", 2}, {addr, "\x81\x04", 2}}};
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-rm", 4, st, 2, NULL));
    ck_assert_int_eq(wait_final("s-rm").status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("s-rm", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action #1, 02 action #1");

    ck_assert_ok(troupe_runtime_shutdown_wait(rb));
    ck_assert_ok(troupe_node_stop_wait(nb));
    troupe_node_destroy(nb);
    troupe_runtime_destroy(rb);
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-rg", 4, st, 2, NULL));
    ck_assert(ts_wait_until(first_unknown, (void *)"s-rg", 10000));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-rg", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_SUBMITTED);
    coord_close(); /* nothing sends to another node from here on */
    ck_assert_ok(troupe_node_stop_wait(na));
    troupe_node_destroy(na);
}
END_TEST

/* What an actor reads is checked: a body that is no branch is EPROTO. */
START_TEST(test_a_branch_body_is_read_strictly)
{
#define B(lit)                                                                 \
    {                                                                          \
        lit, sizeof(lit) - 1                                                   \
    }
    static const struct {
        const char *body;
        size_t len;
    } bodies[] = {
        B("\x96\xa4saga\xa1g\xa2"
          "01\xa6"
          "action\x01\xc4\x00"), /* good */
        B("\x95\xa4saga\xa1g\xa2"
          "01\xa6"
          "action\x01"), /* five */
        B("\x96\xa4sagx\xa1g\xa2"
          "01\xa6"
          "action\x01\xc4\x00"), /* mode */
        B("\x96\xa4saga\xa1 \xa2"
          "01\xa6"
          "action\x01\xc4\x00"), /* gid */
        B("\x96\xa4saga\xa1g\xa2"
          "00\xa6"
          "action\x01\xc4\x00"), /* id */
        B("\x96\xa4saga\xa1g\xa2"
          "01\xa3"
          "try\x01\xc4\x00"), /* op */
        B("\x96\xa4saga\xa1g\xa2"
          "01\xa6"
          "action\x00\xc4\x00"), /* 0th */
        B("\x96\xa4saga\xa1g\xa2"
          "01\xa6"
          "action\x01\xc4\x00\xc0"),
    };
#undef B
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        troupe_msg *m = NULL;
        ck_assert_ok(
            troupe_msg_create(&m, TELLER_KIND, bodies[i].body, bodies[i].len));
        troupe_branch_call b;
        troupe_err e = troupe_branch_call_read(m, &b);
        troupe_msg_destroy(m);
        if (i == 0) {
            ck_assert_ok(e);
            ck_assert_str_eq(b.mode, "saga");
            ck_assert_str_eq(b.gid, "g");
            ck_assert_str_eq(b.op, "action");
            ck_assert_uint_eq(b.attempt, 1);
        } else {
            ck_assert_msg(e == TROUPE_EPROTO, "body %zu: %s", i,
                          troupe_err_name(e));
        }
    }
}
END_TEST

/* sync decides the durability of every transition: ON (the default)
 * fdatasyncs them, OFF leaves them in the page cache. */
static uint64_t
syncs_for_saga(const char *gid)
{
    troupe_commit_stats a, b;
    troupe_commit_get_stats(fx.node.commit, &a);
    ck_assert_ok(submit(gid));
    ck_assert_int_eq(wait_final(gid).status, TROUPE_GTX_SUCCEED);
    troupe_commit_get_stats(fx.node.commit, &b);
    return b.syncs - a.syncs;
}

START_TEST(test_sync_decides_whether_transitions_are_synced)
{
    ck_assert_uint_ge(syncs_for_saga("s-on"), 1);
    coord_close();
    troupe_coord_opts co = {.rt = fx.node.rt,
                            .tables = fx.node.tables,
                            .shards = 4,
                            .clock = fake_clock,
                            .sync = TROUPE_SYNC_OFF};
    ck_assert_ok(troupe_coord_open_wait(&co, &fx.coord));
    ck_assert_uint_eq(syncs_for_saga("s-off"), 0);
    char calls[512];
    calls_of("s-off", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");
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

static const troupe_gtx_call confirm = {"bank", "\x81\x05", 2};
static const troupe_gtx_call cancel = {"bank", "\x81\x06", 2};

/* TCC: branches registered (committed) before their try, confirmed in
 * order on submit; zero branches end at once; prepare twice is OK. */
START_TEST(test_a_tcc_confirms_its_branches_in_order)
{
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-ok", 4));
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-ok", 4));
    char b1[8], b2[8];
    ck_assert_ok(
        troupe_tcc_register_wait(fx.coord, "t-ok", 4, &confirm, &cancel, b1));
    ck_assert_ok(
        troupe_tcc_register_wait(fx.coord, "t-ok", 4, &confirm, &cancel, b2));
    ck_assert_str_eq(b1, "01");
    ck_assert_str_eq(b2, "02");
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "t-ok", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_PREPARED);
    ck_assert_uint_eq(in.steps, 2);
    ck_assert_ok(troupe_gtx_submit_wait(fx.coord, "t-ok", 4));
    in = wait_final("t-ok");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("t-ok", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 confirm, 02 confirm");
    /* once ended: register and abort are conflicts, submit is OK */
    ck_assert_err(
        troupe_tcc_register_wait(fx.coord, "t-ok", 4, &confirm, &cancel, b1),
        TROUPE_ECONFLICT);
    ck_assert_err(troupe_gtx_abort_wait(fx.coord, "t-ok", 4, NULL),
                  TROUPE_ECONFLICT);
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-zero", 6));
    ck_assert_ok(troupe_gtx_submit_wait(fx.coord, "t-zero", 6));
    ck_assert_int_eq(wait_final("t-zero").status, TROUPE_GTX_SUCCEED);
}
END_TEST

/* TCC abort cancels every registered branch in reverse (their tries may
 * never have run); registering after a submit or an abort conflicts. */
START_TEST(test_a_tcc_abort_cancels_every_branch_in_reverse)
{
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-no", 4));
    char b[8];
    for (int i = 0; i < 3; i++)
        ck_assert_ok(troupe_tcc_register_wait(fx.coord, "t-no", 4, &confirm,
                                              &cancel, b));
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "t-no", 4, ""));
    ck_assert_err(
        troupe_tcc_register_wait(fx.coord, "t-no", 4, &confirm, &cancel, b),
        TROUPE_ECONFLICT);
    troupe_gtx_info in = wait_final("t-no");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "aborted");
    char calls[512];
    calls_of("t-no", calls, sizeof(calls));
    ck_assert_str_eq(calls, "03 cancel, 02 cancel, 01 cancel");
    /* register on a saga or an unknown gid */
    ck_assert_ok(submit("s-reg"));
    wait_final("s-reg");
    ck_assert_err(
        troupe_tcc_register_wait(fx.coord, "nobody", 6, &confirm, &cancel, b),
        TROUPE_ENOENT);
    ck_assert_err(troupe_gtx_submit_wait(fx.coord, "nobody", 6), TROUPE_ENOENT);
}
END_TEST

/* A saga waiting for the backoff of an UNKNOWN: retry runs it now; abort
 * compensates in reverse, naming why. */
START_TEST(test_retry_and_abort_act_on_a_waiting_saga)
{
    strcpy(fx.unknown, "s-op 02 action");
    ck_assert_ok(submit("s-op"));
    ck_assert(ts_wait_until(attempted, (void *)"s-op", 10000));
    fx.unknown[0] = '\0';
    ck_assert_ok(troupe_gtx_retry_wait(fx.coord, "s-op", 4));
    ck_assert_int_eq(wait_final("s-op").status, TROUPE_GTX_SUCCEED);
    ck_assert_err(troupe_gtx_retry_wait(fx.coord, "s-op", 4), TROUPE_ECONFLICT);

    strcpy(fx.unknown, "s-ab 02 action");
    ck_assert_ok(submit("s-ab"));
    ck_assert(ts_wait_until(attempted, (void *)"s-ab", 10000));
    atomic_store(&fx.hold, 1); /* the compensations wait: still aborting */
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "s-ab", 4, NULL));
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "s-ab", 4, NULL));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-ab", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_ABORTING);
    atomic_store(&fx.hold, 0);
    in = wait_final("s-ab");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "aborted");
    char calls[512];
    calls_of("s-ab", calls, sizeof(calls));
    ck_assert_str_eq(calls,
                     "01 action, 02 action, 02 compensate, 01 compensate");
    ck_assert_err(troupe_gtx_abort_wait(fx.coord, "s-ab", 4, NULL),
                  TROUPE_ECONFLICT);
    ck_assert_err(troupe_gtx_abort_wait(fx.coord, "nobody", 6, NULL),
                  TROUPE_ENOENT);
}
END_TEST

static const troupe_gtx_call msg_steps[2] = {{"bank", "\x81\x07", 2},
                                             {"bank", "\x81\x08", 2}};
static const troupe_gtx_call query = {"bank", NULL, 0};

/* A message submitted drives its steps; one left prepared past its grace
 * is queried back: SUCCESS drives it, FAILURE fails it with no step. */
START_TEST(test_a_message_is_driven_or_queried_back)
{
    ck_assert_ok(
        troupe_msg_prepare_wait(fx.coord, "m-ok", 4, msg_steps, 2, &query, 0));
    ck_assert_ok(troupe_gtx_submit_wait(fx.coord, "m-ok", 4));
    ck_assert_int_eq(wait_final("m-ok").status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("m-ok", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");

    pthread_mutex_lock(&fx.mu);
    strcpy(fx.fail, "m-no 00 msg");
    pthread_mutex_unlock(&fx.mu);
    ck_assert_ok(troupe_msg_prepare_wait(fx.coord, "m-late", 6, msg_steps, 2,
                                         &query, 50));
    ck_assert_ok(
        troupe_msg_prepare_wait(fx.coord, "m-no", 4, msg_steps, 2, &query, 50));
    atomic_fetch_add(&fx.clock, 100); /* past their grace */
    ck_assert_int_eq(wait_final("m-late").status, TROUPE_GTX_SUCCEED);
    calls_of("m-late", calls, sizeof(calls));
    ck_assert_str_eq(calls, "00 msg, 01 action, 02 action");
    troupe_gtx_info in = wait_final("m-no");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    calls_of("m-no", calls, sizeof(calls));
    ck_assert_str_eq(calls, "00 msg");
    /* a prepared message aborted fails at once; a submitted one cannot */
    ck_assert_ok(troupe_msg_prepare_wait(fx.coord, "m-ab", 4, msg_steps, 2,
                                         &query, 60000));
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "m-ab", 4, NULL));
    ck_assert_int_eq(wait_final("m-ab").status, TROUPE_GTX_FAILED);
    ck_assert_err(
        troupe_msg_prepare_wait(fx.coord, "m-x", 3, msg_steps, 2, NULL, 0),
        TROUPE_EINVAL);
}
END_TEST

/* Force-stop: a saga waiting out a backoff fails at once, with no
 * compensation called; on an ended one it conflicts. */
START_TEST(test_force_stop_ends_a_saga_with_nothing_compensated)
{
    strcpy(fx.unknown, "s-fs 02 action");
    ck_assert_ok(submit("s-fs"));
    ck_assert(ts_wait_until(attempted, (void *)"s-fs", 10000));
    ck_assert_ok(troupe_gtx_force_stop_wait(fx.coord, "s-fs", 4));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-fs", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "force-stopped");
    ck_assert_err(troupe_gtx_force_stop_wait(fx.coord, "s-fs", 4),
                  TROUPE_ECONFLICT);
    ck_assert_err(troupe_gtx_force_stop_wait(fx.coord, "nobody", 6),
                  TROUPE_ENOENT);
    atomic_fetch_add(&fx.clock, 120000); /* its retry would be due */
    ck_assert_ok(submit("s-fs2"));       /* the shard goes on */
    wait_final("s-fs2");
    char calls[512];
    calls_of("s-fs", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");
}
END_TEST

/* List: every stored transaction in gid order, a page at a time with its
 * cursor, filtered by status and mode. */
START_TEST(test_list_pages_through_every_transaction_with_filters)
{
    static const char *const gids[] = {"l-a", "l-b", "l-c", "l-d", "l-e"};
    strcpy(fx.fail, "l-c 01 action");
    for (int i = 0; i < 5; i++) {
        ck_assert_ok(submit(gids[i]));
        wait_final(gids[i]);
    }
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "l-t", 3));
    troupe_gtx_page *pg = NULL;
    const char *after = NULL;
    char cur[TROUPE_GID_MAX + 1] = "";
    char seen[256] = "";
    int pages = 0;
    do {
        ck_assert_ok(troupe_gtx_list_wait(fx.coord, NULL, after, 2, &pg));
        ck_assert_uint_le(pg->n, 2);
        for (size_t i = 0; i < pg->n; i++) {
            strcat(seen, pg->items[i].gid);
            strcat(seen, " ");
        }
        strcpy(cur, pg->cursor);
        after = cur;
        bool more = pg->more;
        troupe_gtx_page_destroy(pg);
        pages++;
        if (!more)
            break;
    } while (pages < 10);
    ck_assert_str_eq(seen, "l-a l-b l-c l-d l-e l-t ");
    ck_assert_int_eq(pages, 3);
    troupe_gtx_filter failed = {.status = TROUPE_GTX_FAILED};
    ck_assert_ok(troupe_gtx_list_wait(fx.coord, &failed, NULL, 10, &pg));
    ck_assert_uint_eq(pg->n, 1);
    ck_assert_str_eq(pg->items[0].gid, "l-c");
    ck_assert_str_eq(pg->items[0].info.reason, "branch 01 action: FAILURE");
    ck_assert(!pg->more);
    troupe_gtx_page_destroy(pg);
    troupe_gtx_filter tcc = {.mode = TROUPE_MODE_TCC};
    ck_assert_ok(troupe_gtx_list_wait(fx.coord, &tcc, "l-b", 10, &pg));
    ck_assert_uint_eq(pg->n, 1);
    ck_assert_str_eq(pg->items[0].gid, "l-t");
    ck_assert_int_eq(pg->items[0].info.status, TROUPE_GTX_PREPARED);
    troupe_gtx_page_destroy(pg);
    ck_assert_err(troupe_gtx_list_wait(fx.coord, NULL, NULL, 0, &pg),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_gtx_list_wait(fx.coord, NULL, NULL,
                                       TROUPE_GTX_LIST_MAX + 1, &pg),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_gtx_list_wait(fx.coord, NULL, "bad gid", 5, &pg),
                  TROUPE_EINVAL);
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
    bad = (troupe_coord_opts){.rt = fx.node.rt,
                              .tables = fx.node.tables,
                              .sync = (troupe_sync)(TROUPE_SYNC_OFF + 1)};
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

/* ---- detail: every branch's ops as stored ---- */

static troupe_gtx_detail *
detail(const char *gid)
{
    troupe_gtx_detail *d = NULL;
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, gid, strlen(gid), &d));
    ck_assert_ptr_nonnull(d);
    return d;
}

/* op k of branch b is `op` on the bank with that state, attempts and last
 * outcome (0: none), and carries plen payload bytes. */
static void
op_is(const troupe_gtx_detail *d, size_t b, size_t k, const char *id,
      const char *op, troupe_gtx_call_state st, uint32_t attempts,
      troupe_outcome last, size_t plen)
{
    ck_assert_uint_lt(b, d->n_branches);
    ck_assert_str_eq(d->branches[b].id, id);
    ck_assert_uint_lt(k, d->branches[b].n_ops);
    const troupe_gtx_op *o = &d->branches[b].ops[k];
    ck_assert_msg(strcmp(o->op, op) == 0 && o->state == st &&
                      o->attempts == attempts && o->last == last &&
                      o->payload_len == plen,
                  "branch %s op %zu: %s state %d attempts %u last %d "
                  "payload %zu; want %s %d %u %d %zu",
                  id, k, o->op, (int)o->state, o->attempts, (int)o->last,
                  o->payload_len, op, (int)st, attempts, (int)last, plen);
    ck_assert_str_eq(o->target, "bank");
}

/* A saga whose second action failed: every op as it ended (the failed
 * action, both compensations run), nothing due; a step without a
 * compensation lists its action only. */
START_TEST(test_detail_gives_a_failed_sagas_branches_op_by_op)
{
    strcpy(fx.fail, "s-d 02 action");
    ck_assert_ok(submit("s-d"));
    ck_assert_int_eq(wait_final("s-d").status, TROUPE_GTX_FAILED);
    troupe_gtx_detail *d = detail("s-d");
    ck_assert_int_eq(d->info.status, TROUPE_GTX_FAILED);
    ck_assert_int_eq(d->info.mode, TROUPE_MODE_SAGA);
    ck_assert_str_eq(d->info.reason, "branch 02 action: FAILURE");
    ck_assert_int_eq(d->next_due_ms, 0);
    ck_assert_uint_eq(d->n_branches, 2);
    ck_assert_uint_eq(d->branches[0].n_ops, 2);
    ck_assert_uint_eq(d->branches[1].n_ops, 2);
    const troupe_gtx_call_state ok = TROUPE_GTX_CALL_SUCCEEDED;
    op_is(d, 0, 0, "01", "action", ok, 1, TROUPE_OUTCOME_SUCCESS, 2);
    op_is(d, 0, 1, "01", "compensate", ok, 1, TROUPE_OUTCOME_SUCCESS, 2);
    op_is(d, 1, 0, "02", "action", TROUPE_GTX_CALL_FAILED, 1,
          TROUPE_OUTCOME_FAILURE, 2);
    op_is(d, 1, 1, "02", "compensate", ok, 1, TROUPE_OUTCOME_SUCCESS, 2);
    troupe_gtx_detail_destroy(d);

    troupe_saga_step one[1] = {{{"bank", "\x81\x09", 2}, {NULL, NULL, 0}}};
    ck_assert_ok(troupe_saga_submit_wait(fx.coord, "s-d1", 4, one, 1, NULL));
    ck_assert_int_eq(wait_final("s-d1").status, TROUPE_GTX_SUCCEED);
    d = detail("s-d1");
    ck_assert_uint_eq(d->n_branches, 1);
    ck_assert_uint_eq(d->branches[0].n_ops, 1);
    op_is(d, 0, 0, "01", "action", ok, 1, TROUPE_OUTCOME_SUCCESS, 2);
    troupe_gtx_detail_destroy(d);
    troupe_gtx_detail_destroy(NULL);
}
END_TEST

/* A tcc whose second confirm answered UNKNOWN: branch 01 confirmed, 02's
 * confirm called once and waiting out its backoff (the next due time),
 * no cancel called; retried, both are confirmed and nothing is due. A
 * tcc aborted before its submit: its cancel ran, its confirm never. */
START_TEST(test_detail_tells_a_tccs_confirmed_branches_from_the_rest)
{
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-d", 3));
    char b[8];
    for (int i = 0; i < 2; i++)
        ck_assert_ok(
            troupe_tcc_register_wait(fx.coord, "t-d", 3, &confirm, &cancel, b));
    troupe_gtx_detail *d = detail("t-d");
    ck_assert_int_eq(d->info.status, TROUPE_GTX_PREPARED);
    /* it waits for its submit, at most until its timeout-to-fail */
    ck_assert_int_eq(d->next_due_ms,
                     1700000000000 + TROUPE_TCC_TIMEOUT_DEFAULT_MS);
    ck_assert_uint_eq(d->n_branches, 2);
    op_is(d, 1, 0, "02", "confirm", TROUPE_GTX_CALL_TODO, 0, 0, 2);
    troupe_gtx_detail_destroy(d);

    strcpy(fx.unknown, "t-d 02 confirm");
    ck_assert_ok(troupe_gtx_submit_wait(fx.coord, "t-d", 3));
    ck_assert(ts_wait_until(attempted, (void *)"t-d", 10000));
    d = detail("t-d");
    ck_assert_int_eq(d->info.status, TROUPE_GTX_SUBMITTED);
    ck_assert_int_eq(d->next_due_ms, atomic_load(&fx.clock) + 60000);
    const troupe_gtx_call_state todo = TROUPE_GTX_CALL_TODO;
    ck_assert_uint_eq(d->branches[0].n_ops, 2); /* the try is not stored */
    op_is(d, 0, 0, "01", "confirm", TROUPE_GTX_CALL_SUCCEEDED, 1,
          TROUPE_OUTCOME_SUCCESS, 2);
    op_is(d, 0, 1, "01", "cancel", todo, 0, 0, 2);
    op_is(d, 1, 0, "02", "confirm", todo, 1, TROUPE_OUTCOME_UNKNOWN, 2);
    op_is(d, 1, 1, "02", "cancel", todo, 0, 0, 2);
    troupe_gtx_detail_destroy(d);

    fx.unknown[0] = '\0';
    ck_assert_ok(troupe_gtx_retry_wait(fx.coord, "t-d", 3));
    ck_assert_int_eq(wait_final("t-d").status, TROUPE_GTX_SUCCEED);
    d = detail("t-d");
    ck_assert_int_eq(d->next_due_ms, 0);
    op_is(d, 1, 0, "02", "confirm", TROUPE_GTX_CALL_SUCCEEDED, 2,
          TROUPE_OUTCOME_SUCCESS, 2);
    op_is(d, 1, 1, "02", "cancel", todo, 0, 0, 2);
    troupe_gtx_detail_destroy(d);

    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-dx", 4));
    ck_assert_ok(
        troupe_tcc_register_wait(fx.coord, "t-dx", 4, &confirm, &cancel, b));
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "t-dx", 4, NULL));
    ck_assert_int_eq(wait_final("t-dx").status, TROUPE_GTX_FAILED);
    d = detail("t-dx");
    op_is(d, 0, 0, "01", "confirm", todo, 0, 0, 2);
    op_is(d, 0, 1, "01", "cancel", TROUPE_GTX_CALL_SUCCEEDED, 1,
          TROUPE_OUTCOME_SUCCESS, 2);
    troupe_gtx_detail_destroy(d);
}
END_TEST

/* A message lists its query-back as branch "00" before its steps: not
 * called while its grace runs (due at its end), then called, and the
 * steps after it. */
START_TEST(test_detail_gives_a_messages_query_back_as_branch_00)
{
    int64_t t0 = atomic_load(&fx.clock);
    ck_assert_ok(
        troupe_msg_prepare_wait(fx.coord, "m-d", 3, msg_steps, 2, &query, 50));
    troupe_gtx_detail *d = detail("m-d");
    ck_assert_int_eq(d->info.status, TROUPE_GTX_PREPARED);
    ck_assert_int_eq(d->next_due_ms, t0 + 50);
    ck_assert_uint_eq(d->n_branches, 3);
    ck_assert_uint_eq(d->branches[0].n_ops, 1);
    op_is(d, 0, 0, "00", "msg", TROUPE_GTX_CALL_TODO, 0, 0, 0);
    op_is(d, 1, 0, "01", "action", TROUPE_GTX_CALL_TODO, 0, 0, 2);
    troupe_gtx_detail_destroy(d);
    atomic_fetch_add(&fx.clock, 100); /* past its grace */
    ck_assert_int_eq(wait_final("m-d").status, TROUPE_GTX_SUCCEED);
    d = detail("m-d");
    const troupe_gtx_call_state ok = TROUPE_GTX_CALL_SUCCEEDED;
    op_is(d, 0, 0, "00", "msg", ok, 1, TROUPE_OUTCOME_SUCCESS, 0);
    op_is(d, 1, 0, "01", "action", ok, 1, TROUPE_OUTCOME_SUCCESS, 2);
    op_is(d, 2, 0, "02", "action", ok, 1, TROUPE_OUTCOME_SUCCESS, 2);
    troupe_gtx_detail_destroy(d);
}
END_TEST

START_TEST(test_detail_refuses_bad_use)
{
    troupe_gtx_detail *d = (troupe_gtx_detail *)&fx; /* must be NULLed */
    ck_assert_err(troupe_gtx_detail_wait(fx.coord, "nobody", 6, &d),
                  TROUPE_ENOENT);
    ck_assert_ptr_null(d);
    ck_assert_err(troupe_gtx_detail_wait(fx.coord, "bad gid", 7, &d),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_gtx_detail_wait(fx.coord, "x", 0, &d), TROUPE_EINVAL);
    ck_assert_err(troupe_gtx_detail_wait(NULL, "x", 1, &d), TROUPE_EINVAL);
    ck_assert_err(troupe_gtx_detail_wait(fx.coord, "x", 1, NULL),
                  TROUPE_EINVAL);
}
END_TEST

/* ---- abort with a reason ---- */

/* A saga waiting out a backoff, aborted with the operator's reason: it is
 * stored as "aborted: <reason>" and shown; a second abort keeps the
 * first; a reason of the full length is whole. */
START_TEST(test_abort_stores_the_operators_reason)
{
    strcpy(fx.unknown, "s-why 02 action");
    ck_assert_ok(submit("s-why"));
    ck_assert(ts_wait_until(attempted, (void *)"s-why", 10000));
    atomic_store(&fx.hold, 1); /* the compensations wait: still aborting */
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "s-why", 5,
                                       "bank down, ticket \xc3\xa9-42"));
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "s-why", 5, "second"));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-why", 5, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_ABORTING);
    ck_assert_str_eq(in.reason, "aborted: bank down, ticket \xc3\xa9-42");
    atomic_store(&fx.hold, 0);
    in = wait_final("s-why");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "aborted: bank down, ticket \xc3\xa9-42");

    char full[TROUPE_GTX_ABORT_REASON_MAX + 1];
    memset(full, 'r', TROUPE_GTX_ABORT_REASON_MAX);
    full[TROUPE_GTX_ABORT_REASON_MAX] = '\0';
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-why", 5));
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "t-why", 5, full));
    in = wait_final("t-why");
    ck_assert_uint_eq(strlen(in.reason),
                      strlen("aborted: ") + sizeof(full) - 1);
    ck_assert_int_eq(strncmp(in.reason, "aborted: rrr", 12), 0);
}
END_TEST

/* A reason that breaks the rule is EINVAL and the transaction is as it
 * was: still submitted, no reason, nothing compensated. */
START_TEST(test_a_bad_abort_reason_is_refused_and_changes_nothing)
{
    strcpy(fx.unknown, "s-bad 02 action");
    ck_assert_ok(submit("s-bad"));
    ck_assert(ts_wait_until(attempted, (void *)"s-bad", 10000));
    char longer[TROUPE_GTX_ABORT_REASON_MAX + 2];
    memset(longer, 'r', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    static const char *const bad[] = {
        "two\nlines", "tab\there",    "del\x7f",      "c1 \xc2\x85",     "\xff",
        "\xc0\xaf",   "\xed\xa0\x80", "cut \xe2\x82", "\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(!troupe_gtx_abort_reason_valid(bad[i], strlen(bad[i])),
                      "reason %zu taken", i);
        ck_assert_err(troupe_gtx_abort_wait(fx.coord, "s-bad", 5, bad[i]),
                      TROUPE_EINVAL);
    }
    ck_assert_err(troupe_gtx_abort_wait(fx.coord, "s-bad", 5, longer),
                  TROUPE_EINVAL);
    ck_assert(!troupe_gtx_abort_reason_valid(NULL, 0));
    ck_assert(!troupe_gtx_abort_reason_valid("", 0));
    ck_assert(!troupe_gtx_abort_reason_valid("a\0b", 3));
    ck_assert(troupe_gtx_abort_reason_valid("\xf0\x9f\x99\x82 ok", 7));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "s-bad", 5, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_SUBMITTED);
    ck_assert_str_eq(in.reason, "");
    char calls[512];
    calls_of("s-bad", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");
    /* a good abort still goes through afterwards */
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "s-bad", 5, NULL));
    ck_assert_str_eq(wait_final("s-bad").reason, "aborted");
}
END_TEST

static TCase *
purge_tcase(void);

/* ---- the asynchronous forms ---- */

typedef struct acall {
    _Atomic int calls;
    troupe_err err;
    char branch_id[8];
    pthread_t thread;
} acall;

static void
acall_cb(troupe_err err, void *arg)
{
    acall *a = arg;
    a->err = err;
    a->thread = pthread_self();
    atomic_fetch_add(&a->calls, 1);
}

static void
acall_reg_cb(troupe_err err, const char *branch_id, void *arg)
{
    acall *a = arg;
    ck_assert((err == TROUPE_OK) == (branch_id != NULL));
    if (branch_id != NULL)
        snprintf(a->branch_id, sizeof(a->branch_id), "%s", branch_id);
    acall_cb(err, arg);
}

static bool
acall_done(void *arg)
{
    return atomic_load(&((acall *)arg)->calls) > 0;
}

/* Waits for a's one callback (on another thread than this one) and
 * returns its error. */
static troupe_err
acall_wait(acall *a)
{
    ck_assert(ts_wait_until(acall_done, a, 10000));
    ck_assert_int_eq(atomic_load(&a->calls), 1);
    ck_assert(!pthread_equal(a->thread, pthread_self()));
    troupe_err e = a->err;
    memset(a, 0, sizeof(*a));
    return e;
}

/* register_at, DTM's client-chosen branch ids: the next one registers, a
 * repeat is OK and adds nothing (its first calls stay), one out of order
 * is ERANGE, a malformed id is refused at the call. */
START_TEST(test_a_tcc_register_at_takes_the_next_id_and_repeats)
{
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-at", 4));
    acall a = {0};
    static const troupe_gtx_call other = {"bank", "\x81\x07", 2};
    const char *ids[] = {"01", "01", "02", "01"};
    for (int i = 0; i < 4; i++) {
        ck_assert_ok(troupe_tcc_register_at(fx.coord, "t-at", 4, ids[i],
                                            i ? &other : &confirm, &cancel,
                                            acall_reg_cb, &a));
        ck_assert(ts_wait_until(acall_done, &a, 10000));
        ck_assert_str_eq(a.branch_id, ids[i]);
        ck_assert_ok(acall_wait(&a));
    }
    ck_assert_ok(troupe_tcc_register_at(fx.coord, "t-at", 4, "04", &confirm,
                                        &cancel, acall_reg_cb, &a));
    ck_assert_err(acall_wait(&a), TROUPE_ERANGE);
    ck_assert_err(troupe_tcc_register_at(fx.coord, "t-at", 4, "1", &confirm,
                                         &cancel, acall_reg_cb, &a),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tcc_register_at(fx.coord, "t-at", 4, "00", &confirm,
                                         &cancel, acall_reg_cb, &a),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tcc_register_at(fx.coord, "t-at", 4, "65", &confirm,
                                         &cancel, acall_reg_cb, &a),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tcc_register_at(fx.coord, "t-at", 4, NULL, &confirm,
                                         &cancel, acall_reg_cb, &a),
                  TROUPE_EINVAL);
    troupe_gtx_detail *d = NULL;
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, "t-at", 4, &d));
    ck_assert_uint_eq(d->info.steps, 2);
    ck_assert_uint_eq(d->branches[0].ops[0].payload_len, 2);
    troupe_gtx_detail_destroy(d);
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "t-at", 4, NULL));
    ck_assert_int_eq(wait_final("t-at").status, TROUPE_GTX_FAILED);
    char calls[512];
    calls_of("t-at", calls, sizeof(calls));
    ck_assert_str_eq(calls, "02 cancel, 01 cancel");
    ck_assert_ok(troupe_tcc_register_at(fx.coord, "t-at", 4, "01", &confirm,
                                        &cancel, acall_reg_cb, &a));
    ck_assert_err(acall_wait(&a), TROUPE_ECONFLICT); /* ended: no repeat */
}
END_TEST

/* Every submit and operator call has an asynchronous form: it returns at
 * once, and its callback fires exactly once, on a thread of troupe's,
 * with what the blocking twin returns. */
START_TEST(test_the_asynchronous_forms_call_back_once)
{
    acall a = {0};
    ck_assert_ok(
        troupe_saga_submit(fx.coord, "a-s", 3, two, 2, NULL, acall_cb, &a));
    ck_assert_ok(acall_wait(&a));
    ck_assert_int_eq(wait_final("a-s").status, TROUPE_GTX_SUCCEED);
    /* a submit twice: OK, nothing driven twice */
    ck_assert_ok(
        troupe_saga_submit(fx.coord, "a-s", 3, two, 2, NULL, acall_cb, &a));
    ck_assert_ok(acall_wait(&a));
    char calls[512];
    calls_of("a-s", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action");
    /* an ended one: ECONFLICT; an unknown one: ENOENT */
    ck_assert_ok(troupe_gtx_abort(fx.coord, "a-s", 3, "late", acall_cb, &a));
    ck_assert_err(acall_wait(&a), TROUPE_ECONFLICT);
    ck_assert_ok(troupe_gtx_retry(fx.coord, "a-none", 6, acall_cb, &a));
    ck_assert_err(acall_wait(&a), TROUPE_ENOENT);

    /* tcc: prepare, two registers with their ids, submit */
    ck_assert_ok(troupe_tcc_prepare(fx.coord, "a-t", 3, acall_cb, &a));
    ck_assert_ok(acall_wait(&a));
    for (int i = 1; i <= 2; i++) {
        ck_assert_ok(troupe_tcc_register(fx.coord, "a-t", 3, &confirm, &cancel,
                                         acall_reg_cb, &a));
        char want[8];
        snprintf(want, sizeof(want), "%02d", i);
        ck_assert(ts_wait_until(acall_done, &a, 10000));
        ck_assert_str_eq(a.branch_id, want);
        ck_assert_ok(acall_wait(&a));
    }
    ck_assert_ok(troupe_gtx_submit(fx.coord, "a-t", 3, acall_cb, &a));
    ck_assert_ok(acall_wait(&a));
    ck_assert_int_eq(wait_final("a-t").status, TROUPE_GTX_SUCCEED);
    ck_assert_ok(troupe_tcc_register(fx.coord, "a-t", 3, &confirm, &cancel,
                                     acall_reg_cb, &a));
    ck_assert_err(acall_wait(&a), TROUPE_ECONFLICT); /* ended */

    /* a message, then force-stop before its grace ends */
    troupe_gtx_call q = {"bank", NULL, 0};
    ck_assert_ok(troupe_msg_prepare(fx.coord, "a-m", 3, &two[0].action, 1, &q,
                                    60000, acall_cb, &a));
    ck_assert_ok(acall_wait(&a));
    ck_assert_ok(troupe_gtx_force_stop(fx.coord, "a-m", 3, acall_cb, &a));
    ck_assert_ok(acall_wait(&a));
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "a-m", 3, &in));
    ck_assert_str_eq(in.reason, "force-stopped");

    /* refused at the call: the callback never fires */
    ck_assert_err(
        troupe_saga_submit(fx.coord, "a-x", 3, two, 2, NULL, NULL, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_saga_submit(fx.coord, "bad gid", 7, two, 2, NULL, acall_cb, &a),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_gtx_abort(fx.coord, "a-s", 3, "bad\x01reason", acall_cb, &a),
        TROUPE_EINVAL);
    coord_close();
    coord_open();
    troupe_coord *old = fx.coord;
    ck_assert_ok(troupe_coord_stop_wait(old));
    ck_assert_err(troupe_gtx_submit(old, "a-t", 3, acall_cb, &a),
                  TROUPE_ECLOSED);
    troupe_coord_destroy(old);
    fx.coord = NULL;
    ck_assert_int_eq(atomic_load(&a.calls), 0);
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
    tcase_add_test(c,
                   test_concurrent_steps_run_together_after_their_dependencies);
    tcase_add_test(c, test_a_concurrent_failure_compensates_dependents_first);
    tcase_add_test(c, test_a_bad_step_order_is_refused);
    tcase_add_test(c, test_actor_targets_serve_a_sagas_branches);
    tcase_add_test(c,
                   test_an_actor_that_does_not_answer_is_unknown_and_retried);
    tcase_add_test(c, test_bad_actor_targets_are_refused_at_submit);
    tcase_add_test(c, test_a_branch_body_is_read_strictly);
    tcase_add_test(c, test_an_actor_on_another_node_serves_branches);
    tcase_add_test(c, test_the_asynchronous_forms_call_back_once);
    tcase_add_test(c, test_sync_decides_whether_transitions_are_synced);
    tcase_add_test(c, test_a_submit_twice_drives_nothing_twice);
    tcase_add_test(c, test_bad_submits_are_refused);
    tcase_add_test(c, test_an_unfinished_saga_is_driven_again_after_reopen);
    tcase_add_test(c, test_a_call_in_flight_at_stop_runs_again_after_open);
    tcase_add_test(c, test_open_and_stop_refuse_bad_use);
    tcase_add_test(c, test_a_tcc_confirms_its_branches_in_order);
    tcase_add_test(c, test_a_tcc_abort_cancels_every_branch_in_reverse);
    tcase_add_test(c, test_a_tcc_register_at_takes_the_next_id_and_repeats);
    tcase_add_test(c, test_retry_and_abort_act_on_a_waiting_saga);
    tcase_add_test(c, test_a_message_is_driven_or_queried_back);
    tcase_add_test(c, test_force_stop_ends_a_saga_with_nothing_compensated);
    tcase_add_test(c, test_list_pages_through_every_transaction_with_filters);
    tcase_add_test(c, test_detail_gives_a_failed_sagas_branches_op_by_op);
    tcase_add_test(c,
                   test_detail_tells_a_tccs_confirmed_branches_from_the_rest);
    tcase_add_test(c, test_detail_gives_a_messages_query_back_as_branch_00);
    tcase_add_test(c, test_detail_refuses_bad_use);
    tcase_add_test(c, test_abort_stores_the_operators_reason);
    tcase_add_test(c, test_a_bad_abort_reason_is_refused_and_changes_nothing);
    suite_add_tcase(s, c);
    suite_add_tcase(s, purge_tcase());
    return s;
}

/* ---- retention: troupe_coord_purge and the TTL scanner's pass ---- */

#define DAY_MS (24 * 3600 * 1000LL)

/* Commits the barrier row of (mode, gid, bid, op), as a branch would. */
static void
barrier_put(const char *mode, const char *gid, const char *bid, const char *op)
{
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.node.tables, NULL, &tx));
    troupe_barrier_branch b = {.mode = mode,
                               .gid = gid,
                               .gid_len = strlen(gid),
                               .branch_id = bid,
                               .op = op};
    troupe_barrier_verdict v;
    ck_assert_ok(troupe_barrier_check_wait(tx, &b, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
}

/* The barrier rows of (mode, gid). */
static size_t
barrier_rows(const char *mode, const char *gid)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, mode, strlen(mode));
    troupe_key_put_string(&w, gid, strlen(gid));
    troupe_range r;
    ck_assert_ok(troupe_key_writer_range(&w, &r));
    troupe_scan_opts so = {.start = r.start,
                           .start_len = r.start_len,
                           .end = r.end,
                           .end_len = r.end_len,
                           .limit = 1000};
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_scan_wait(fx.node.tables, TROUPE_BARRIER_TABLE,
                                        &so, &rows));
    size_t n = rows->n;
    troupe_rows_destroy(rows);
    troupe_key_writer_fini(&w);
    return n;
}

/* The gids in the index "finished" of troupe.gtx, joined with " ". */
static void
finished_index(char *out, size_t cap)
{
    troupe_index_query q = {.limit = 100};
    troupe_index_result *res = NULL;
    ck_assert_ok(troupe_tables_query_wait(fx.node.tables, "troupe.gtx",
                                          "finished", &q, &res));
    out[0] = '\0';
    for (size_t i = 0; i < res->n; i++) {
        if (out[0] != '\0')
            strncat(out, " ", cap - strlen(out) - 1);
        strncat(out, (const char *)res->hits[i].pk,
                res->hits[i].pk_len < cap - strlen(out) - 1
                    ? res->hits[i].pk_len
                    : cap - strlen(out) - 1);
    }
    troupe_index_result_destroy(res);
}

typedef struct purge_seen {
    _Atomic int calls;
    troupe_err err;
    size_t purged;
} purge_seen;

static void
purge_seen_cb(troupe_err err, size_t purged, bool more, void *arg)
{
    (void)more;
    purge_seen *ps = arg;
    ps->err = err;
    ps->purged = purged;
    atomic_fetch_add(&ps->calls, 1);
}

static bool
gone_pred(void *arg)
{
    troupe_gtx_info in;
    const char *gid = arg;
    return troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in) ==
           TROUPE_ENOENT;
}

static void
coord_reopen(int64_t retention_ms)
{
    coord_close();
    troupe_coord_opts co = {.rt = fx.node.rt,
                            .tables = fx.node.tables,
                            .shards = 4,
                            .retry_min_ms = 60000,
                            .retry_max_ms = 60000,
                            .clock = fake_clock,
                            .retention_ms = retention_ms};
    ck_assert_ok(troupe_coord_open_wait(&co, &fx.coord));
}

/* Kept until finished_ms + retention (7 days by default), then deleted
 * with its barrier rows, and only those: another gid's (one whose gid
 * starts with this one's too) and another mode's stay. A submit of the
 * gid then starts it again (DTM's behaviour after FinishedDataExpire). */
START_TEST(test_purge_deletes_an_ended_saga_past_its_retention_only)
{
    ck_assert_ok(troupe_barrier_create_wait(fx.node.tables));
    int64_t t0 = atomic_load(&fx.clock);
    ck_assert_ok(submit("p-ok"));
    ck_assert_int_eq(wait_final("p-ok").finished_ms, t0);
    barrier_put("saga", "p-ok", "01", "action");
    barrier_put("saga", "p-ok", "02", "action");
    barrier_put("saga", "p-ok", "02", "compensate");
    barrier_put("saga", "p-okx", "01", "action");
    barrier_put("tcc", "p-ok", "01", "try");
    ck_assert_uint_eq(barrier_rows("saga", "p-ok"), 3);
    size_t purged = 9;
    bool more = true;
    atomic_store(&fx.clock, t0 + 7 * DAY_MS - 1);
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 0);
    ck_assert(!more);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "p-ok", 4, &in));
    ck_assert_uint_eq(barrier_rows("saga", "p-ok"), 3);
    atomic_store(&fx.clock, t0 + 7 * DAY_MS);
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 1);
    ck_assert(!more);
    ck_assert_err(troupe_gtx_query_wait(fx.coord, "p-ok", 4, &in),
                  TROUPE_ENOENT);
    ck_assert_uint_eq(barrier_rows("saga", "p-ok"), 0);
    ck_assert_uint_eq(barrier_rows("saga", "p-okx"), 1);
    ck_assert_uint_eq(barrier_rows("tcc", "p-ok"), 1);
    char idx[256];
    finished_index(idx, sizeof(idx));
    ck_assert_str_eq(idx, "");
    /* nothing more to do; a submit of the gid starts it again */
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 0);
    ck_assert_ok(submit("p-ok"));
    ck_assert_int_eq(wait_final("p-ok").status, TROUPE_GTX_SUCCEED);
    char calls[512];
    calls_of("p-ok", calls, sizeof(calls));
    ck_assert_str_eq(calls, "01 action, 02 action, 01 action, 02 action");
}
END_TEST

/* Every barrier row of the gid goes, also past one scan page (256). */
START_TEST(test_purge_deletes_every_barrier_row_of_a_gid)
{
    ck_assert_ok(troupe_barrier_create_wait(fx.node.tables));
    ck_assert_ok(submit("p-big"));
    wait_final("p-big");
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.node.tables, NULL, &tx));
    for (int i = 1; i <= 300; i++) {
        char bid[8];
        snprintf(bid, sizeof(bid), "%02d", i);
        troupe_barrier_branch b = {.mode = "saga",
                                   .gid = "p-big",
                                   .gid_len = 5,
                                   .branch_id = bid,
                                   .op = "action"};
        troupe_barrier_verdict v;
        ck_assert_ok(troupe_barrier_check_wait(tx, &b, &v));
    }
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    ck_assert_uint_eq(barrier_rows("saga", "p-big"), 300);
    atomic_fetch_add(&fx.clock, 7 * DAY_MS);
    size_t purged = 0;
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 1, &purged, NULL));
    ck_assert_uint_eq(purged, 1);
    ck_assert_uint_eq(barrier_rows("saga", "p-big"), 0);
}
END_TEST

/* A transaction that has not ended is never purged, however old, nor are
 * its barrier rows; the index holds only the ended ones. */
START_TEST(test_purge_never_touches_an_unfinished_transaction)
{
    ck_assert_ok(troupe_barrier_create_wait(fx.node.tables));
    strcpy(fx.unknown, "p-wait 01 action");
    ck_assert_ok(submit("p-wait"));
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "p-tcc", 5));
    ck_assert_ok(submit("p-done"));
    ck_assert_int_eq(wait_final("p-done").status, TROUPE_GTX_SUCCEED);
    barrier_put("saga", "p-wait", "01", "action");
    barrier_put("tcc", "p-tcc", "01", "try");
    barrier_put("saga", "p-done", "01", "action");
    char idx[256];
    finished_index(idx, sizeof(idx));
    ck_assert_str_eq(idx, "p-done");
    atomic_store(&fx.clock, atomic_load(&fx.clock) + 3650 * DAY_MS);
    size_t purged = 0;
    bool more = true;
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 1);
    ck_assert(!more);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "p-wait", 6, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_SUBMITTED);
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "p-tcc", 5, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_PREPARED);
    ck_assert_uint_eq(barrier_rows("saga", "p-wait"), 1);
    ck_assert_uint_eq(barrier_rows("tcc", "p-tcc"), 1);
    ck_assert_uint_eq(barrier_rows("saga", "p-done"), 0);
    ck_assert_err(troupe_gtx_query_wait(fx.coord, "p-done", 6, &in),
                  TROUPE_ENOENT);
    /* once it ends, it enters the index, and is purged after its time */
    ck_assert_ok(troupe_gtx_force_stop_wait(fx.coord, "p-tcc", 5));
    finished_index(idx, sizeof(idx));
    ck_assert_str_eq(idx, "p-tcc");
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 0);
    atomic_store(&fx.clock, atomic_load(&fx.clock) + 7 * DAY_MS);
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 1);
    ck_assert_uint_eq(barrier_rows("tcc", "p-tcc"), 0);
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "p-wait", 6, &in));
    ck_assert_uint_eq(barrier_rows("saga", "p-wait"), 1);
}
END_TEST

static void
five_ended(void)
{
    char gid[16];
    for (int i = 0; i < 5; i++) {
        snprintf(gid, sizeof(gid), "p-%d", i);
        ck_assert_ok(submit(gid));
        wait_final(gid);
    }
}

START_TEST(test_purge_deletes_at_most_its_limit_oldest_first)
{
    for (int i = 0; i < 5; i++) { /* p-4 ended first ... p-0 last */
        char gid[16];
        snprintf(gid, sizeof(gid), "p-%d", 4 - i);
        ck_assert_ok(submit(gid));
        wait_final(gid);
        atomic_fetch_add(&fx.clock, 1);
    }
    atomic_fetch_add(&fx.clock, 7 * DAY_MS);
    size_t purged = 0;
    bool more = false;
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 2, &purged, &more));
    ck_assert_uint_eq(purged, 2);
    ck_assert(more);
    char idx[256];
    finished_index(idx, sizeof(idx));
    ck_assert_str_eq(idx, "p-2 p-1 p-0"); /* in the order they ended */
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 3);
    ck_assert(!more);
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 0);
    ck_assert(!more);
}
END_TEST

START_TEST(test_a_negative_retention_keeps_ended_transactions_for_ever)
{
    coord_reopen(-1);
    five_ended();
    atomic_fetch_add(&fx.clock, 36500 * DAY_MS);
    size_t purged = 9;
    bool more = true;
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 0);
    ck_assert(!more);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "p-3", 3, &in));
    /* a retention of its own: 1 day */
    coord_reopen(DAY_MS);
    ck_assert_ok(troupe_coord_purge_wait(fx.coord, 10, &purged, &more));
    ck_assert_uint_eq(purged, 5);
}
END_TEST

/* A database whose troupe.gtx was stored without the index gets it at
 * open, built over the ended transactions already there. */
START_TEST(test_open_adds_the_finished_index_to_an_older_table)
{
    five_ended();
    ck_assert_ok(submit("p-x"));
    wait_final("p-x");
    ck_assert_ok(troupe_tables_drop_index_wait(fx.node.tables, "troupe.gtx",
                                               "finished"));
    coord_reopen(0);
    char idx[256];
    finished_index(idx, sizeof(idx));
    ck_assert_str_eq(idx, "p-0 p-1 p-2 p-3 p-4 p-x");
}
END_TEST

static void
purge_cb_unused(troupe_err err, size_t purged, bool more, void *arg)
{
    (void)err;
    (void)purged;
    (void)more;
    (void)arg;
    ck_abort_msg("a refused purge called back");
}

START_TEST(test_purge_refuses_bad_use)
{
    size_t purged = 0;
    ck_assert_err(troupe_coord_purge_wait(NULL, 1, &purged, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_coord_purge_wait(fx.coord, 0, &purged, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_coord_purge_wait(fx.coord, TROUPE_GTX_PURGE_MAX + 1,
                                          &purged, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_coord_purge(fx.coord, 1, NULL, NULL), TROUPE_EINVAL);
    ck_assert_ok(
        troupe_coord_purge_wait(fx.coord, TROUPE_GTX_PURGE_MAX, NULL, NULL));
    troupe_coord_opts co = {.rt = fx.node.rt,
                            .tables = fx.node.tables,
                            .retention_ms = TROUPE_GTX_RETENTION_MAX_MS + 1};
    troupe_coord *c2 = NULL;
    ck_assert_err(troupe_coord_open_wait(&co, &c2), TROUPE_EINVAL);
    ck_assert_ptr_null(c2);
    ck_assert_ok(troupe_coord_stop_wait(fx.coord));
    ck_assert_err(troupe_coord_purge(fx.coord, 1, purge_cb_unused, NULL),
                  TROUPE_ECLOSED);
    troupe_coord_destroy(fx.coord);
    fx.coord = NULL;
}
END_TEST

typedef struct ttl_wait {
    troupe_ttl *t;
    uint64_t passes;
} ttl_wait;

static bool
ttl_passes_pred(void *arg)
{
    const ttl_wait *w = arg;
    return troupe_ttl_gtx_passes(w->t) >= w->passes;
}

START_TEST(test_the_ttl_scanner_purges_ended_transactions)
{
    ck_assert_ok(troupe_barrier_create_wait(fx.node.tables));
    five_ended();
    barrier_put("saga", "p-2", "01", "action");
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "p-tcc", 5));
    barrier_put("tcc", "p-tcc", "01", "try");
    troupe_ttl_opts bad = {.rt = fx.node.rt,
                           .coord = fx.coord,
                           .coord_batch = TROUPE_GTX_PURGE_MAX + 1};
    troupe_ttl *t = NULL;
    ck_assert_err(troupe_ttl_create(&bad, &t), TROUPE_EINVAL);
    ck_assert_uint_eq(troupe_ttl_gtx_purged(NULL), 0);
    ck_assert_uint_eq(troupe_ttl_gtx_batches(NULL), 0);
    ck_assert_uint_eq(troupe_ttl_gtx_passes(NULL), 0);
    troupe_ttl_opts o = {.rt = fx.node.rt,
                         .coord = fx.coord,
                         .coord_batch = 2,
                         .interval_ms = 3600000};
    ck_assert_ok(troupe_ttl_create(&o, &t));
    /* not due yet: one batch, nothing purged, the pass ends */
    ck_assert_ok(troupe_ttl_kick(t));
    ttl_wait w = {t, 1};
    ck_assert(ts_wait_until(ttl_passes_pred, &w, 10000));
    ck_assert_uint_eq(troupe_ttl_gtx_purged(t), 0);
    ck_assert_uint_eq(troupe_ttl_gtx_batches(t), 1);
    ck_assert_ok(
        troupe_gtx_query_wait(fx.coord, "p-4", 3, &(troupe_gtx_info){0}));
    atomic_fetch_add(&fx.clock, 7 * DAY_MS);
    ck_assert_ok(troupe_ttl_kick(t));
    w.passes = 2;
    ck_assert(ts_wait_until(ttl_passes_pred, &w, 10000));
    ck_assert_uint_eq(troupe_ttl_gtx_purged(t), 5);
    /* then 2 + 2 + 1: each full one went on, the short one ended it */
    ck_assert_uint_eq(troupe_ttl_gtx_batches(t), 4);
    ck_assert_uint_eq(troupe_ttl_gtx_passes(t), 2);
    for (int i = 0; i < 5; i++) {
        char gid[16];
        snprintf(gid, sizeof(gid), "p-%d", i);
        ck_assert(gone_pred(gid));
    }
    ck_assert_uint_eq(barrier_rows("saga", "p-2"), 0);
    ck_assert_uint_eq(barrier_rows("tcc", "p-tcc"), 1);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "p-tcc", 5, &in));
    /* the scanner stops before the coordinator */
    ck_assert_ok(troupe_ttl_stop_wait(t));
    troupe_ttl_destroy(t);
}
END_TEST

/* A stop waits for the purge in flight: its callback has fired (once)
 * by the time the stop returns, and the coordinator may be destroyed. */
START_TEST(test_stop_waits_for_a_purge_in_flight)
{
    ck_assert_ok(troupe_barrier_create_wait(fx.node.tables));
    five_ended();
    barrier_put("saga", "p-1", "01", "action");
    atomic_fetch_add(&fx.clock, 7 * DAY_MS);
    purge_seen ps = {.err = TROUPE_EINVAL};
    ck_assert_ok(troupe_coord_purge(fx.coord, 10, purge_seen_cb, &ps));
    ck_assert_ok(troupe_coord_stop_wait(fx.coord));
    int calls = atomic_load(&ps.calls);
    ck_assert_int_eq(calls, 1);
    ck_assert_ok(ps.err);
    ck_assert_uint_eq(ps.purged, 5);
    troupe_coord_destroy(fx.coord);
    fx.coord = NULL;
    ck_assert_uint_eq(barrier_rows("saga", "p-1"), 0);
}
END_TEST

static TCase *
purge_tcase(void)
{
    TCase *c = tcase_create("retention");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, test_purge_deletes_an_ended_saga_past_its_retention_only);
    tcase_add_test(c, test_purge_deletes_every_barrier_row_of_a_gid);
    tcase_add_test(c, test_purge_never_touches_an_unfinished_transaction);
    tcase_add_test(c, test_purge_deletes_at_most_its_limit_oldest_first);
    tcase_add_test(c,
                   test_a_negative_retention_keeps_ended_transactions_for_ever);
    tcase_add_test(c, test_open_adds_the_finished_index_to_an_older_table);
    tcase_add_test(c, test_purge_refuses_bad_use);
    tcase_add_test(c, test_the_ttl_scanner_purges_ended_transactions);
    tcase_add_test(c, test_stop_waits_for_a_purge_in_flight);
    return c;
}
