/* Workflows (troupe/workflow.h) on a real runtime and database: a C
 * function registered by name, replayed with memoized steps, its
 * compensations registered before its actions and run in reverse on
 * FAILURE, a run interrupted by a stop resumed without running a
 * succeeded step again, a changed step name held as diverged, an
 * awakeable resolved from outside, version markers, and the bad uses.
 * The reply's rules themselves are check_gtx's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tnode.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/workflow.h"
#include "tsupport.h"

#define LOG_MAX 64

/* What the workflow function does (fx.code). */
enum {
    CODE_THREE = 0,    /* steps a, b, c, each with a compensation */
    CODE_PAYMENT = 1,  /* awakeable "payment", step "request", await, "ship" */
    CODE_OLD = 2,      /* steps a, c, awakeable go, await */
    CODE_NEW = 3,      /* steps a, version add-b [-1, 1], (b), c, go, await */
    CODE_NEW_ONLY = 4, /* as CODE_NEW with version add-b [1, 1] */
};

typedef struct wf_fx {
    tnode node;
    troupe_target *bank; /* compensations */
    troupe_workflow *wf;
    troupe_coord *coord;
    _Atomic int64_t clock;
    _Atomic int code;
    pthread_mutex_t mu;
    char log[LOG_MAX][64]; /* "gid branch what", in call order */
    int n_log;
    char fail[64];    /* "gid name" whose action answers FAILURE */
    char hold[64];    /* "gid name" whose action waits while held is 1 */
    _Atomic int held; /* 1: hold; 2: an action is holding */
    char second[16];  /* CODE_THREE's second step name, read per run */
    char awake_id[TROUPE_AWAKEABLE_ID_MAX + 1]; /* sent by "request" */
    char shipped[64];                           /* what "ship" was given */
    _Atomic int runs;
} wf_fx;

static wf_fx fx;

static int64_t
fake_clock(void *arg)
{
    (void)arg;
    return atomic_load(&fx.clock);
}

static void
logf_(const char *gid, const char *bid, const char *what)
{
    pthread_mutex_lock(&fx.mu);
    if (fx.n_log < LOG_MAX)
        snprintf(fx.log[fx.n_log++], 64, "%s %s %s", gid, bid, what);
    pthread_mutex_unlock(&fx.mu);
}

/* The compensations' target: logs "gid branch compensate". */
static troupe_outcome
bank_fn(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    (void)arg;
    const char *mode = (const char *)t->header;
    const char *gid = mode + strlen(mode) + 1;
    const char *bid = gid + strlen(gid) + 1;
    const char *op = bid + strlen(bid) + 1;
    ck_assert_int_eq(t->kind, TROUPE_TASK_BRANCH);
    ck_assert_str_eq(mode, "workflow");
    logf_(gid, bid, op);
    return TROUPE_OUTCOME_SUCCESS;
}

/* A step's action: logs "gid branch name", holds or fails as scripted,
 * its result "r:name". */
static troupe_outcome
act(troupe_wf *wf, const char *bid, void *arg)
{
    const char *name = arg;
    const char *gid = troupe_wf_gid(wf, NULL);
    char key[80];
    snprintf(key, sizeof(key), "%s %s", gid, name);
    logf_(gid, bid, name);
    if (strcmp(key, fx.hold) == 0 && atomic_load(&fx.held) == 1) {
        atomic_store(&fx.held, 2);
        while (atomic_load(&fx.held) == 2) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_lock(&fx.mu);
    if (strcmp(name, "b") == 0 && strcmp(fx.second, "flip") == 0)
        snprintf(fx.second, sizeof(fx.second), "x"); /* the code changes */
    pthread_mutex_unlock(&fx.mu);
    char res[32];
    snprintf(res, sizeof(res), "r:%s", name);
    ck_assert_ok(troupe_wf_result_set(wf, res, strlen(res)));
    return strcmp(key, fx.fail) == 0 ? TROUPE_OUTCOME_FAILURE
                                     : TROUPE_OUTCOME_SUCCESS;
}

/* The id an awakeable's requester hands on (once: it is a step). */
static troupe_outcome
request(troupe_wf *wf, const char *bid, void *arg)
{
    logf_(troupe_wf_gid(wf, NULL), bid, "request");
    pthread_mutex_lock(&fx.mu);
    snprintf(fx.awake_id, sizeof(fx.awake_id), "%s", (const char *)arg);
    pthread_mutex_unlock(&fx.mu);
    return TROUPE_OUTCOME_SUCCESS;
}

static troupe_outcome
ship(troupe_wf *wf, const char *bid, void *arg)
{
    logf_(troupe_wf_gid(wf, NULL), bid, "ship");
    pthread_mutex_lock(&fx.mu);
    snprintf(fx.shipped, sizeof(fx.shipped), "%s", (const char *)arg);
    pthread_mutex_unlock(&fx.mu);
    return TROUPE_OUTCOME_SUCCESS;
}

static const troupe_gtx_call undo = {"bank", "u", 1};

/* A step with the bank's compensation; OK or why the run stops. */
#define STEP(name, res)                                                        \
    do {                                                                       \
        troupe_err e_ = troupe_wf_step(wf, name, &undo, act, (void *)name,     \
                                       &res, &res##_len);                      \
        if (e_ == TROUPE_EFAILED)                                              \
            return TROUPE_OUTCOME_FAILURE;                                     \
        if (e_ != TROUPE_OK)                                                   \
            return TROUPE_OUTCOME_ONGOING;                                     \
    } while (0)

static troupe_outcome
three(troupe_wf *wf)
{
    char second[16];
    pthread_mutex_lock(&fx.mu);
    snprintf(second, sizeof(second), "%s",
             strcmp(fx.second, "x") == 0 ? "x" : "b");
    pthread_mutex_unlock(&fx.mu);
    const uint8_t *ra, *rb, *rc;
    size_t ra_len, rb_len, rc_len;
    STEP("a", ra);
    /* the memoized result, the same on every replay */
    ck_assert_uint_eq(ra_len, 3);
    ck_assert_int_eq(memcmp(ra, "r:a", 3), 0);
    troupe_err e = troupe_wf_step(
        wf, second, &undo, act, (void *)(strcmp(second, "x") == 0 ? "x" : "b"),
        &rb, &rb_len);
    if (e == TROUPE_EFAILED)
        return TROUPE_OUTCOME_FAILURE;
    if (e != TROUPE_OK)
        return TROUPE_OUTCOME_ONGOING;
    STEP("c", rc);
    return TROUPE_OUTCOME_SUCCESS;
}

static troupe_outcome
payment(troupe_wf *wf)
{
    char id[TROUPE_AWAKEABLE_ID_MAX + 1];
    if (troupe_wf_awakeable(wf, "payment", id) != TROUPE_OK)
        return TROUPE_OUTCOME_ONGOING;
    if (troupe_wf_step(wf, "request", NULL, request, id, NULL, NULL) !=
        TROUPE_OK)
        return TROUPE_OUTCOME_ONGOING;
    const uint8_t *p = NULL;
    size_t n = 0;
    troupe_err e = troupe_wf_await(wf, id, &p, &n);
    if (e == TROUPE_EFAILED) {
        ck_assert_err(troupe_wf_reason_set(wf, "bad\x01"), TROUPE_EINVAL);
        ck_assert_ok(troupe_wf_reason_set(wf, "payment rejected"));
        return TROUPE_OUTCOME_FAILURE;
    }
    if (e != TROUPE_OK)
        return TROUPE_OUTCOME_ONGOING;
    char paid[64];
    snprintf(paid, sizeof(paid), "%.*s", (int)n, (const char *)p);
    if (troupe_wf_step(wf, "ship", &undo, ship, paid, NULL, NULL) != TROUPE_OK)
        return TROUPE_OUTCOME_ONGOING;
    return TROUPE_OUTCOME_SUCCESS;
}

/* Old and new code of one workflow: the new one adds step b behind a
 * version marker. */
static troupe_outcome
versioned(troupe_wf *wf, int code)
{
    const uint8_t *r;
    size_t r_len;
    STEP("a", r);
    if (code != CODE_OLD) {
        int32_t v = 0;
        int32_t min = code == CODE_NEW_ONLY ? 1 : TROUPE_WF_VERSION_DEFAULT;
        if (troupe_wf_version(wf, "add-b", min, 1, &v) != TROUPE_OK)
            return TROUPE_OUTCOME_ONGOING;
        if (v >= 1)
            STEP("b", r);
    }
    STEP("c", r);
    char id[TROUPE_AWAKEABLE_ID_MAX + 1];
    if (troupe_wf_awakeable(wf, "go", id) != TROUPE_OK ||
        troupe_wf_await(wf, id, NULL, NULL) != TROUPE_OK)
        return TROUPE_OUTCOME_ONGOING;
    return TROUPE_OUTCOME_SUCCESS;
}

static troupe_outcome
flow(troupe_wf *wf, const uint8_t *input, size_t len, void *arg)
{
    ck_assert_ptr_eq(arg, &fx);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(memcmp(input, "in", 2), 0);
    atomic_fetch_add(&fx.runs, 1);
    int code = atomic_load(&fx.code);
    if (code == CODE_THREE)
        return three(wf);
    if (code == CODE_PAYMENT)
        return payment(wf);
    return versioned(wf, code);
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
wf_create(void)
{
    troupe_workflow_def d = {.name = "order", .fn = flow, .arg = &fx};
    ck_assert_ok(troupe_workflow_create(fx.node.rt, &d, &fx.wf));
}

static void
wf_destroy(void)
{
    ck_assert_ok(troupe_workflow_stop_wait(fx.wf));
    troupe_workflow_destroy(fx.wf);
    fx.wf = NULL;
}

static void
setup(void)
{
    memset(&fx, 0, sizeof(fx));
    pthread_mutex_init(&fx.mu, NULL);
    atomic_store(&fx.clock, 1700000000000);
    troupe_runtime_opts o = {.workers = 2, .host_workers = 2};
    tnode_open(&fx.node, "wf", &o);
    troupe_target_opts tg = {.name = "bank", .fn = bank_fn, .credit = 8};
    ck_assert_ok(troupe_target_create(fx.node.rt, &tg, &fx.bank));
    wf_create();
    coord_open();
}

static void
teardown(void)
{
    atomic_store(&fx.held, 0);
    if (fx.coord != NULL)
        coord_close();
    if (fx.wf != NULL)
        wf_destroy();
    ck_assert_ok(troupe_target_stop_wait(fx.bank));
    troupe_target_destroy(fx.bank);
    tnode_close(&fx.node);
    pthread_mutex_destroy(&fx.mu);
}

static troupe_err
submit(const char *gid)
{
    return troupe_workflow_submit_wait(fx.coord, gid, strlen(gid), "order",
                                       "in", 2);
}

static troupe_gtx_info
query(const char *gid)
{
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in));
    return in;
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
    if (!ts_wait_until(final_pred, (void *)gid, 10000)) {
        troupe_gtx_info in = query(gid); /* where it stands, to debug */
        ck_abort_msg("%s did not end: status %d, attempts %u, %u records, "
                     "hold %d, %d runs, reason \"%s\"",
                     gid, (int)in.status, in.attempts, in.steps, (int)in.hold,
                     atomic_load(&fx.runs), in.reason);
    }
    return query(gid);
}

typedef struct held_arg {
    const char *gid;
    troupe_wf_hold hold;
} held_arg;

static bool
held_pred(void *arg)
{
    const held_arg *h = arg;
    troupe_gtx_info in;
    return troupe_gtx_query_wait(fx.coord, h->gid, strlen(h->gid), &in) ==
               TROUPE_OK &&
           in.hold == h->hold;
}

static void
wait_held(const char *gid, troupe_wf_hold hold)
{
    held_arg h = {gid, hold};
    ck_assert_msg(ts_wait_until(held_pred, &h, 10000), "%s not held (%d)", gid,
                  (int)hold);
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

static void
calls_are(const char *gid, const char *want)
{
    char calls[1024];
    calls_of(gid, calls, sizeof(calls));
    ck_assert_str_eq(calls, want);
}

START_TEST(test_a_workflow_runs_each_step_once_and_succeeds)
{
    ck_assert_ok(submit("w-ok"));
    troupe_gtx_info in = wait_final("w-ok");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    ck_assert_int_eq(in.mode, TROUPE_MODE_WORKFLOW);
    ck_assert_uint_eq(in.steps, 3);
    calls_are("w-ok", "01 a, 02 b, 03 c"); /* nothing compensated */
    /* register a; run a + register b; run b + register c; run c: four
     * runs, each a's replay returning its stored result */
    ck_assert_int_eq(atomic_load(&fx.runs), 4);
    troupe_gtx_detail *d = NULL;
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, "w-ok", 4, &d));
    ck_assert_uint_eq(d->n_branches, 4);
    ck_assert_str_eq(d->branches[0].id, "00");
    ck_assert_str_eq(d->branches[0].ops[0].op, "run");
    ck_assert_str_eq(d->branches[0].ops[0].target, "order");
    ck_assert_ptr_null(d->branches[0].kind);
    const char *names[] = {"a", "b", "c"};
    for (size_t i = 1; i < 4; i++) {
        const troupe_gtx_branch *b = &d->branches[i];
        ck_assert_str_eq(b->kind, "step");
        ck_assert_str_eq(b->name, names[i - 1]);
        ck_assert_uint_eq(b->n_ops, 2);
        ck_assert_str_eq(b->ops[0].op, "action");
        ck_assert_int_eq(b->ops[0].state, TROUPE_GTX_CALL_SUCCEEDED);
        ck_assert_uint_eq(b->ops[0].payload_len, 3); /* "r:a" ... */
        ck_assert_str_eq(b->ops[1].op, "compensate");
        ck_assert_str_eq(b->ops[1].target, "bank");
        ck_assert_int_eq(b->ops[1].state, TROUPE_GTX_CALL_TODO);
    }
    troupe_gtx_detail_destroy(d);
    /* a second submit drives nothing twice */
    ck_assert_ok(submit("w-ok"));
    ck_assert_int_eq(atomic_load(&fx.runs), 4);
}
END_TEST

/* FAILURE compensates every registered step in reverse (the failed one
 * too: its action may have half happened; the barrier makes that null),
 * and no step after it is registered. */
START_TEST(test_a_failed_step_compensates_every_registered_step_in_reverse)
{
    strcpy(fx.fail, "w-f b");
    ck_assert_ok(submit("w-f"));
    troupe_gtx_info in = wait_final("w-f");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_uint_eq(in.steps, 2);
    ck_assert_ptr_nonnull(strstr(in.reason, "FAILURE"));
    calls_are("w-f", "01 a, 02 b, 02 compensate, 01 compensate");
}
END_TEST

static bool
holding(void *arg)
{
    (void)arg;
    return atomic_load(&fx.held) == 2;
}

/* A run interrupted by a stop (step b's action running) resumes after the
 * next open from what was committed: a's action never runs again, b's
 * (whose result was never committed) does. */
START_TEST(test_a_run_interrupted_by_a_stop_resumes_without_rerunning_a_step)
{
    strcpy(fx.hold, "w-i b");
    atomic_store(&fx.held, 1);
    ck_assert_ok(submit("w-i"));
    ck_assert(ts_wait_until(holding, NULL, 10000));
    coord_close();
    atomic_store(&fx.held, 0); /* its reply goes nowhere */
    coord_open();
    troupe_gtx_info in = wait_final("w-i");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    calls_are("w-i", "01 a, 02 b, 02 b, 03 c");
}
END_TEST

/* A run that takes another path than the records is held as diverged:
 * it neither succeeds nor compensates; after a fix, a retry runs it on. */
START_TEST(test_a_changed_step_name_holds_the_workflow_as_diverged)
{
    strcpy(fx.second, "flip"); /* b's action makes the next run call "x" */
    ck_assert_ok(submit("w-d"));
    wait_held("w-d", TROUPE_WF_DIVERGED);
    troupe_gtx_info in = query("w-d");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUBMITTED);
    ck_assert_msg(strstr(in.reason, "\"b\"") != NULL &&
                      strstr(in.reason, "\"x\"") != NULL &&
                      strstr(in.reason, "position 02") != NULL,
                  "%s", in.reason);
    calls_are("w-d", "01 a, 02 b"); /* nothing compensated */
    ck_assert_uint_eq(in.steps, 3); /* c registered, never run */
    /* the fix: the recorded name again; an operator's retry runs it on */
    pthread_mutex_lock(&fx.mu);
    strcpy(fx.second, "b");
    pthread_mutex_unlock(&fx.mu);
    ck_assert_ok(troupe_gtx_retry_wait(fx.coord, "w-d", 3));
    in = wait_final("w-d");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    calls_are("w-d", "01 a, 02 b, 03 c");
}
END_TEST

static bool
id_sent(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fx.mu);
    bool s = fx.awake_id[0] != '\0';
    pthread_mutex_unlock(&fx.mu);
    return s;
}

/* An awakeable: the workflow hands its id on from a step and waits; it
 * is held (no run, no backoff) until someone resolves it, and then goes
 * on with the payload. */
START_TEST(test_an_awakeable_holds_a_workflow_until_it_is_resolved)
{
    atomic_store(&fx.code, CODE_PAYMENT);
    ck_assert_ok(submit("w-pay"));
    ck_assert(ts_wait_until(id_sent, NULL, 10000));
    ck_assert_str_eq(fx.awake_id, "w-pay/01");
    wait_held("w-pay", TROUPE_WF_AWAITING);
    troupe_gtx_detail *d = NULL; /* held: no time is waited for */
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, "w-pay", 5, &d));
    ck_assert_int_eq(d->next_due_ms, 0);
    ck_assert_str_eq(d->branches[1].kind, "awakeable");
    ck_assert_int_eq(d->branches[1].ops[0].state, TROUPE_GTX_CALL_TODO);
    troupe_gtx_detail_destroy(d);
    ck_assert_ok(
        troupe_awakeable_resolve_wait(fx.coord, "w-pay/01", 8, "paid-42", 7));
    troupe_gtx_info in = wait_final("w-pay");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    ck_assert_str_eq(fx.shipped, "paid-42");
    calls_are("w-pay", "02 request, 03 ship");
    /* once it ended, a resolution conflicts */
    ck_assert_err(
        troupe_awakeable_resolve_wait(fx.coord, "w-pay/01", 8, "other", 5),
        TROUPE_ECONFLICT);
}
END_TEST

START_TEST(test_a_rejected_awakeable_fails_and_compensates)
{
    atomic_store(&fx.code, CODE_PAYMENT);
    ck_assert_ok(submit("w-rej"));
    wait_held("w-rej", TROUPE_WF_AWAITING);
    /* an id of a step, of no record, of no workflow: refused */
    ck_assert_err(
        troupe_awakeable_resolve_wait(fx.coord, "w-rej/02", 8, NULL, 0),
        TROUPE_ENOENT);
    ck_assert_err(
        troupe_awakeable_resolve_wait(fx.coord, "w-rej/09", 8, NULL, 0),
        TROUPE_ENOENT);
    ck_assert_err(
        troupe_awakeable_resolve_wait(fx.coord, "w-none/01", 9, NULL, 0),
        TROUPE_ENOENT);
    ck_assert_ok(troupe_awakeable_reject_wait(fx.coord, "w-rej/01", 8,
                                              "card declined", 13));
    troupe_gtx_info in = wait_final("w-rej");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "payment rejected");
    calls_are("w-rej", "02 request"); /* request has no compensation */
    ck_assert_str_eq(fx.shipped, "");
}
END_TEST

/* Version markers: an instance that predates the marker replays the old
 * path (its record at the marker's position is a step), one started
 * after takes the new path, and a marker whose minimum excludes the old
 * path holds the old instance as diverged, visibly. */
START_TEST(test_version_markers_keep_old_instances_on_their_path)
{
    atomic_store(&fx.code, CODE_OLD);
    ck_assert_ok(submit("w-v1"));
    wait_held("w-v1", TROUPE_WF_AWAITING);
    atomic_store(&fx.code, CODE_NEW);
    ck_assert_ok(submit("w-v2"));
    wait_held("w-v2", TROUPE_WF_AWAITING);
    calls_are("w-v1", "01 a, 02 c");
    calls_are("w-v2", "01 a, 03 b, 04 c"); /* 02 is the marker */
    troupe_gtx_detail *d = NULL;
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, "w-v2", 4, &d));
    ck_assert_str_eq(d->branches[2].kind, "version");
    ck_assert_str_eq(d->branches[2].name, "add-b");
    ck_assert_int_eq(d->branches[2].version, 1);
    troupe_gtx_detail_destroy(d);
    /* the old path excluded: the old instance diverges */
    atomic_store(&fx.code, CODE_NEW_ONLY);
    ck_assert_ok(
        troupe_awakeable_resolve_wait(fx.coord, "w-v1/03", 7, NULL, 0));
    wait_held("w-v1", TROUPE_WF_DIVERGED);
    ck_assert_ptr_nonnull(strstr(query("w-v1").reason, "add-b"));
    /* allowed again: it succeeds on the old path, b never run */
    atomic_store(&fx.code, CODE_NEW);
    ck_assert_ok(troupe_gtx_retry_wait(fx.coord, "w-v1", 4));
    ck_assert_int_eq(wait_final("w-v1").status, TROUPE_GTX_SUCCEED);
    calls_are("w-v1", "01 a, 02 c");
    ck_assert_ok(
        troupe_awakeable_resolve_wait(fx.coord, "w-v2/05", 7, NULL, 0));
    ck_assert_int_eq(wait_final("w-v2").status, TROUPE_GTX_SUCCEED);
    calls_are("w-v2", "01 a, 03 b, 04 c");
}
END_TEST

static bool
tried(void *arg)
{
    troupe_gtx_info in;
    const char *gid = arg;
    return troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in) ==
               TROUPE_OK &&
           in.attempts >= 1;
}

/* A workflow whose name no target has (its code not deployed) is tried
 * again after the backoff, never rolled back. */
START_TEST(test_an_unregistered_workflow_retries_and_never_rolls_back)
{
    strcpy(fx.hold, "w-u a");
    atomic_store(&fx.held, 1);
    ck_assert_ok(submit("w-u"));
    ck_assert(ts_wait_until(holding, NULL, 10000));
    coord_close();
    atomic_store(&fx.held, 0);
    wf_destroy(); /* the workflow's code is gone */
    coord_open();
    ck_assert(ts_wait_until(tried, (void *)"w-u", 10000));
    troupe_gtx_info in = query("w-u");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUBMITTED);
    wf_create();
    atomic_fetch_add(&fx.clock, 60000);
    ck_assert_ok(troupe_gtx_retry_wait(fx.coord, "w-u", 3));
    ck_assert_int_eq(wait_final("w-u").status, TROUPE_GTX_SUCCEED);
    calls_are("w-u", "01 a, 01 a, 02 b, 03 c"); /* nothing compensated */
}
END_TEST

START_TEST(test_bad_workflow_calls_are_refused)
{
    ck_assert_err(
        troupe_workflow_submit_wait(fx.coord, "w-b", 3, "nobody", "in", 2),
        TROUPE_ENOENT);
    ck_assert_err(troupe_workflow_submit_wait(fx.coord, "w-b", 3,
                                              "actor:teller#1", "in", 2),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_workflow_submit_wait(fx.coord, "w b", 3, "order", "in", 2),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_workflow_submit_wait(fx.coord, "w-b", 3, NULL, "in", 2),
        TROUPE_EINVAL);
    static uint8_t big[TROUPE_GTX_PAYLOAD_MAX + 1];
    ck_assert_err(troupe_workflow_submit_wait(fx.coord, "w-b", 3, "order", big,
                                              sizeof(big)),
                  TROUPE_EINVAL);
    troupe_gtx_info in;
    ck_assert_err(troupe_gtx_query_wait(fx.coord, "w-b", 3, &in),
                  TROUPE_ENOENT); /* nothing was stored */
    const char *ids[] = {"w-b",    "w-b/", "w-b/1",    "w-b/00x",
                         "w b/01", "/01",  "w-b/10000"};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        ck_assert_err(troupe_awakeable_resolve_wait(fx.coord, ids[i],
                                                    strlen(ids[i]), NULL, 0),
                      TROUPE_EINVAL);
    ck_assert_err(
        troupe_awakeable_resolve_wait(fx.coord, "w-b/01", 6, big, sizeof(big)),
        TROUPE_EINVAL);
    troupe_workflow *w = NULL;
    troupe_workflow_def dup = {.name = "order", .fn = flow, .arg = &fx};
    ck_assert_err(troupe_workflow_create(fx.node.rt, &dup, &w), TROUPE_EEXIST);
    troupe_workflow_def nofn = {.name = "other"};
    ck_assert_err(troupe_workflow_create(fx.node.rt, &nofn, &w), TROUPE_EINVAL);
}
END_TEST

Suite *
workflow_suite(void)
{
    Suite *s = suite_create("workflow");
    TCase *c = tcase_create("workflow");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, test_a_workflow_runs_each_step_once_and_succeeds);
    tcase_add_test(
        c, test_a_failed_step_compensates_every_registered_step_in_reverse);
    tcase_add_test(
        c, test_a_run_interrupted_by_a_stop_resumes_without_rerunning_a_step);
    tcase_add_test(c, test_a_changed_step_name_holds_the_workflow_as_diverged);
    tcase_add_test(c, test_an_awakeable_holds_a_workflow_until_it_is_resolved);
    tcase_add_test(c, test_a_rejected_awakeable_fails_and_compensates);
    tcase_add_test(c, test_version_markers_keep_old_instances_on_their_path);
    tcase_add_test(c,
                   test_an_unregistered_workflow_retries_and_never_rolls_back);
    tcase_add_test(c, test_bad_workflow_calls_are_refused);
    suite_add_tcase(s, c);
    return s;
}
