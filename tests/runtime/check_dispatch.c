/*
 * The dispatch (troupe/dispatch.h): targets in callback and pull mode,
 * the outcome rules (exactly once; deadlines, undefined codes, late
 * replies and a host that went away are UNKNOWN), credit, the wake fd's
 * edge, the wake callback's quiescence, stops and closes.
 */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "troupe/alloc.h"
#include "troupe/dispatch.h"
#include "troupe/internal/dispatch.h"
#include "tsupport.h"

#define MAXT 4096

static troupe_runtime *rt;

/* What producers heard, per task id slot in submit order. */
static struct {
    _Atomic int done;
    _Atomic int outcomes[5];
    _Atomic int calls[MAXT]; /* done calls per submit index */
    _Atomic int hold;        /* done returns true */
    _Atomic uint64_t last_id;
    char body[64];
    _Atomic size_t body_len;
} P;

static void
setup(void)
{
    memset(&P, 0, sizeof(P));
    troupe_runtime_opts o = {.schedulers = 1, .workers = 2, .host_workers = 4};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
}

static void
teardown(void)
{
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
    rt = NULL;
}

static bool
on_done(void *arg, uint64_t id, troupe_outcome o, const uint8_t *body,
        size_t len)
{
    size_t i = (size_t)(uintptr_t)arg;
    atomic_fetch_add(&P.calls[i], 1);
    atomic_fetch_add(&P.outcomes[o], 1);
    atomic_store(&P.last_id, id);
    if (len > 0 && len <= sizeof(P.body)) {
        memcpy(P.body, body, len);
        atomic_store(&P.body_len, len);
    }
    atomic_fetch_add(&P.done, 1);
    return atomic_load(&P.hold) != 0;
}

static troupe_err
submit(troupe_target *t, size_t i, const char *body, uint64_t *id)
{
    if (!troupe__target_credit_take(t, NULL))
        return TROUPE_EFULL;
    troupe__task_in in = {.kind = TROUPE_TASK_TEST,
                          .attempt = (uint32_t)i + 1,
                          .header = "h",
                          .header_len = 1,
                          .body = body,
                          .body_len = body ? strlen(body) : 0};
    return troupe__target_submit(t, &in, on_done, (void *)(uintptr_t)i, id);
}

static bool
done_at_least(void *arg)
{
    return atomic_load(&P.done) >= *(int *)arg;
}

static void
wait_done(int n)
{
    ck_assert_msg(ts_wait_until(done_at_least, &n, 10000),
                  "%d of %d tasks settled", atomic_load(&P.done), n);
}

static void
each_once(int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(atomic_load(&P.calls[i]), 1);
}

static void
stop_destroy(troupe_target *t)
{
    ck_assert_ok(troupe_target_stop_wait(t));
    troupe_target_destroy(t);
}

/* ---- callback mode ---- */

static _Atomic int cb_mode; /* what cb_fn returns */
static _Atomic int cb_block, cb_running, cb_returned;

static bool
unblocked(void *arg)
{
    (void)arg;
    return atomic_load(&cb_block) == 0;
}

static troupe_outcome
cb_fn(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)arg;
    atomic_fetch_add(&cb_running, 1);
    if (atomic_load(&cb_block))
        ts_wait_until(unblocked, NULL, 30000);
    char echo[64];
    size_t n = t->body_len < sizeof(echo) - 1 ? t->body_len : 0;
    memcpy(echo, t->body, n);
    ck_assert_int_eq(t->kind, TROUPE_TASK_TEST);
    ck_assert_uint_eq(t->header_len, 1);
    ck_assert_int_eq(t->header[0], 'h');
    ck_assert_ptr_nonnull(t->target);
    troupe_task_reply_set(r, echo, n);
    atomic_fetch_sub(&cb_running, 1);
    atomic_fetch_add(&cb_returned, 1);
    return (troupe_outcome)atomic_load(&cb_mode);
}

static troupe_target *
callback_target(const char *name, uint32_t credit, uint32_t timeout_ms)
{
    troupe_target_opts o = {
        .name = name, .fn = cb_fn, .credit = credit, .timeout_ms = timeout_ms};
    troupe_target *t = NULL;
    ck_assert_ok(troupe_target_create(rt, &o, &t));
    return t;
}

START_TEST(test_target_create_bad_arguments_are_einval)
{
    troupe_target *t = (troupe_target *)1;
    troupe_target_opts o = {.name = "x", .fn = cb_fn};
    ck_assert_err(troupe_target_create(NULL, &o, &t), TROUPE_EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_err(troupe_target_create(rt, NULL, &t), TROUPE_EINVAL);
    o.name = "";
    ck_assert_err(troupe_target_create(rt, &o, &t), TROUPE_EINVAL);
    o.name = NULL;
    ck_assert_err(troupe_target_create(rt, &o, &t), TROUPE_EINVAL);
    char long_name[TROUPE_TARGET_NAME_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = 0;
    o.name = long_name;
    ck_assert_err(troupe_target_create(rt, &o, &t), TROUPE_EINVAL);
    o.name = "x";
    o.fn = NULL;
    ck_assert_err(troupe_target_create(rt, &o, &t), TROUPE_EINVAL);
    troupe_host *h = NULL;
    ck_assert_ok(troupe_host_open(rt, NULL, &h));
    o.fn = cb_fn;
    o.host = h;
    ck_assert_err(troupe_target_create(rt, &o, &t), TROUPE_EINVAL);
    o.host = NULL;
    o.credit = TROUPE_TARGET_CREDIT_MAX + 1;
    ck_assert_err(troupe_target_create(rt, &o, &t), TROUPE_EINVAL);
    ck_assert_ok(troupe_host_close(h));
    troupe_host_destroy(h);
    troupe_target_destroy(NULL);
    troupe_host_destroy(NULL);
}
END_TEST

START_TEST(test_target_names_are_unique_until_stopped)
{
    troupe_target *a = callback_target("same", 0, 0), *b = NULL;
    troupe_target_opts o = {.name = "same", .fn = cb_fn};
    ck_assert_err(troupe_target_create(rt, &o, &b), TROUPE_EEXIST);
    troupe_target *f = troupe__target_find(rt, "same", 4);
    ck_assert_ptr_eq(f, a);
    troupe__target_release(f);
    ck_assert_ptr_null(troupe__target_find(rt, "other", 5));
    stop_destroy(a);
    ck_assert_ptr_null(troupe__target_find(rt, "same", 4));
    ck_assert_ok(troupe_target_create(rt, &o, &b));
    stop_destroy(b);
}
END_TEST

START_TEST(test_callback_tasks_settle_once_with_their_outcome_and_reply)
{
    atomic_store(&cb_mode, TROUPE_OUTCOME_SUCCESS);
    troupe_target *t = callback_target("cb", 8, 0);
    enum { N = 200 };
    int sent = 0;
    while (sent < N) {
        troupe_err e = submit(t, (size_t)sent, "echo", NULL);
        if (e == TROUPE_EFULL) {
            wait_done(sent - 7);
            continue;
        }
        ck_assert_ok(e);
        sent++;
    }
    wait_done(N);
    each_once(N);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_SUCCESS]), N);
    ck_assert_uint_eq(atomic_load(&P.body_len), 4);
    ck_assert_int_eq(memcmp(P.body, "echo", 4), 0);
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.submitted, N);
    ck_assert_uint_eq(st.settled[TROUPE_OUTCOME_SUCCESS], N);
    stop_destroy(t);
}
END_TEST

START_TEST(test_callback_returning_garbage_is_unknown)
{
    atomic_store(&cb_mode, 77);
    troupe_target *t = callback_target("garbage", 0, 0);
    ck_assert_ok(submit(t, 0, "x", NULL));
    wait_done(1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 1);
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.bad_outcome, 1);
    stop_destroy(t);
}
END_TEST

static bool
cb_returned_one(void *arg)
{
    (void)arg;
    return atomic_load(&cb_returned) >= 1;
}

/* A callback past its deadline: the producer hears UNKNOWN at the
 * deadline while the callback still runs; its later SUCCESS is dropped. */
START_TEST(test_callback_past_its_deadline_is_unknown_and_its_return_dropped)
{
    atomic_store(&cb_mode, TROUPE_OUTCOME_SUCCESS);
    atomic_store(&cb_block, 1);
    atomic_store(&cb_returned, 0);
    troupe_target *t = callback_target("slow", 0, 50);
    ck_assert_ok(submit(t, 0, "x", NULL));
    wait_done(1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 1);
    ck_assert_int_eq(atomic_load(&cb_returned), 0);
    atomic_store(&cb_block, 0);
    ck_assert(ts_wait_until(cb_returned_one, NULL, 10000));
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.late, 1);
    ck_assert_uint_eq(st.timed_out, 1);
    ck_assert_int_eq(atomic_load(&P.done), 1);
    each_once(1);
    stop_destroy(t);
}
END_TEST

/* ---- credit ---- */

static _Atomic int kicks;

static void
on_kick(void *arg)
{
    (void)arg;
    atomic_fetch_add(&kicks, 1);
}

static bool
kicked(void *arg)
{
    (void)arg;
    return atomic_load(&kicks) > 0;
}

START_TEST(test_credit_bounds_tasks_and_a_freed_credit_kicks_the_waiter)
{
    atomic_store(&cb_mode, TROUPE_OUTCOME_SUCCESS);
    atomic_store(&cb_block, 1);
    atomic_store(&kicks, 0);
    troupe_target *t = callback_target("credit", 3, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_ok(submit(t, (size_t)i, "x", NULL));
    troupe__credit_wait w = {.kick = on_kick};
    ck_assert(!troupe__target_credit_take(t, &w));
    ck_assert(w.queued);
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.held, 3);
    ck_assert_int_eq(atomic_load(&kicks), 0);
    atomic_store(&cb_block, 0);
    ck_assert(ts_wait_until(kicked, NULL, 10000));
    wait_done(3);
    each_once(3);
    stop_destroy(t);
}
END_TEST

/* An unwait waits for a kick of its node already taken off the list, so
 * the producer may free the node (and what the kick touches) on return;
 * a kick that unwaits its own node does not wait for itself. */
static _Atomic int uw_in_kick, uw_release, uw_kick_returned, uw_unwaited;
static _Atomic int uw_seen_returned = -1;
static troupe_target *uw_t;

static void
uw_kick(void *arg)
{
    atomic_store(&uw_in_kick, 1);
    uint64_t end = ts_now_ms() + 10000;
    while (!atomic_load(&uw_release) && ts_now_ms() < end)
        sched_yield();
    if (arg != NULL) /* the self case */
        troupe__target_credit_unwait(uw_t, arg);
    atomic_store(&uw_kick_returned, 1);
}

static void *
uw_give(void *arg)
{
    troupe__target_credit_give(arg);
    return NULL;
}

static void *
uw_unwait(void *arg)
{
    troupe__target_credit_unwait(uw_t, arg);
    atomic_store(&uw_seen_returned, atomic_load(&uw_kick_returned));
    atomic_store(&uw_unwaited, 1);
    return NULL;
}

static bool
uw_flag(void *arg)
{
    return atomic_load((_Atomic int *)arg) != 0;
}

START_TEST(test_unwait_waits_for_a_kick_in_flight)
{
    uw_t = callback_target("unwait", 1, 0);
    ck_assert(troupe__target_credit_take(uw_t, NULL));
    troupe__credit_wait w = {.kick = uw_kick};
    ck_assert(!troupe__target_credit_take(uw_t, &w));
    pthread_t g, u;
    ck_assert_int_eq(pthread_create(&g, NULL, uw_give, uw_t), 0);
    ck_assert(ts_wait_until(uw_flag, &uw_in_kick, 10000));
    ck_assert_int_eq(pthread_create(&u, NULL, uw_unwait, &w), 0);
    /* while the kick runs, the unwait must not return */
    ck_assert(!ts_wait_until(uw_flag, &uw_unwaited, 200));
    atomic_store(&uw_release, 1);
    pthread_join(g, NULL);
    pthread_join(u, NULL);
    ck_assert_int_eq(atomic_load(&uw_seen_returned), 1);

    /* the kick unwaits its own node: it returns */
    atomic_store(&uw_kick_returned, 0);
    ck_assert(troupe__target_credit_take(uw_t, NULL));
    troupe__credit_wait self = {.kick = uw_kick, .arg = &self};
    ck_assert(!troupe__target_credit_take(uw_t, &self));
    troupe__target_credit_give(uw_t); /* kicks here, released already */
    ck_assert_int_eq(atomic_load(&uw_kick_returned), 1);
    stop_destroy(uw_t);
}
END_TEST

START_TEST(test_a_refused_submit_gives_its_credit_back)
{
    troupe_target *t = callback_target("refused", 1, 0);
    ck_assert(troupe__target_credit_take(t, NULL));
    ck_assert(!troupe__target_credit_take(t, NULL));
    troupe__task_in bad = {.kind = TROUPE_TASK_TEST,
                           .header = "h",
                           .header_len = TROUPE_TASK_HEADER_MAX + 1};
    ck_assert_err(troupe__target_submit(t, &bad, on_done, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert(troupe__target_credit_take(t, NULL));
    bad.header_len = 0;
    bad.body_len = 1; /* NULL body */
    ck_assert_err(troupe__target_submit(t, &bad, on_done, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_int_eq(atomic_load(&P.done), 0);
    stop_destroy(t);
}
END_TEST

/* ---- stop ---- */

static _Atomic int stops;

static void
on_stop(troupe_target *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&stops, 1);
}

/* A producer that holds its task (done returns true) keeps the credit
 * and the stop until it ends the task. */
START_TEST(test_a_held_task_keeps_its_credit_and_the_stop_until_ended)
{
    atomic_store(&cb_mode, TROUPE_OUTCOME_SUCCESS);
    atomic_store(&P.hold, 1);
    atomic_store(&stops, 0);
    troupe_target *t = callback_target("held", 1, 0);
    ck_assert_ok(submit(t, 0, "x", NULL));
    wait_done(1);
    ck_assert(!troupe__target_credit_take(t, NULL));
    ck_assert_ok(troupe_target_stop(t, on_stop, NULL));
    ck_assert_int_eq(atomic_load(&stops), 0);
    troupe__target_task_end(t, atomic_load(&P.last_id));
    ck_assert_int_eq(atomic_load(&stops), 1);
    troupe__target_task_end(t, atomic_load(&P.last_id)); /* ignored */
    troupe_target_destroy(t);
}
END_TEST

static bool
cb_is_running(void *arg)
{
    (void)arg;
    return atomic_load(&cb_running) > 0;
}

START_TEST(test_stop_waits_for_the_running_callback_and_fires_once)
{
    atomic_store(&cb_mode, TROUPE_OUTCOME_SUCCESS);
    atomic_store(&cb_block, 1);
    atomic_store(&cb_running, 0);
    atomic_store(&stops, 0);
    troupe_target *t = callback_target("stopper", 0, 0);
    ck_assert_ok(submit(t, 0, "x", NULL));
    ck_assert(ts_wait_until(cb_is_running, NULL, 10000));
    ck_assert_ok(troupe_target_stop(t, on_stop, NULL));
    ck_assert_err(troupe_target_stop(t, on_stop, NULL), TROUPE_ESTATE);
    ck_assert_err(troupe_target_stop_wait(t), TROUPE_ESTATE);
    ck_assert_err(submit(t, 1, "y", NULL), TROUPE_ESTATE);
    ck_assert_int_eq(atomic_load(&stops), 0);
    atomic_store(&cb_block, 0);
    wait_done(1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_SUCCESS]), 1);
    troupe_target_destroy(t);
    ck_assert_int_eq(atomic_load(&stops), 1);
}
END_TEST

static bool
cb_running_two(void *arg)
{
    (void)arg;
    return atomic_load(&cb_running) >= 2;
}

static bool
cb_returned_two(void *arg)
{
    (void)arg;
    return atomic_load(&cb_returned) >= 2;
}

/* A callback past its deadline gives its credit back at the deadline
 * (the queue's handler timeout frees the worker's credit) while it keeps
 * its slot: a second task runs beside it, a stop ends at the deadlines
 * although both still run, and with the spare slots all held a submit is
 * EBUSY. The target's memory outlives its destroy until they return. */
START_TEST(test_a_callback_past_its_deadline_frees_its_credit_not_its_slot)
{
    atomic_store(&cb_mode, TROUPE_OUTCOME_SUCCESS);
    atomic_store(&cb_block, 1);
    atomic_store(&cb_running, 0);
    atomic_store(&cb_returned, 0);
    atomic_store(&stops, 0);
    troupe_target *t = callback_target("zombie", 1, 50);
    ck_assert_ok(submit(t, 0, "x", NULL));
    wait_done(1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 1);
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.held, 0);
    ck_assert_ok(submit(t, 1, "y", NULL));
    ck_assert(ts_wait_until(cb_running_two, NULL, 10000));
    wait_done(2);
    ck_assert(troupe__target_credit_take(t, NULL));
    troupe__task_in in = {
        .kind = TROUPE_TASK_TEST, .header = "h", .header_len = 1};
    ck_assert_err(troupe__target_submit(t, &in, on_done, (void *)2, NULL),
                  TROUPE_EBUSY);
    ck_assert_ok(troupe_target_stop(t, on_stop, NULL));
    ck_assert_int_eq(atomic_load(&stops), 1);
    ck_assert_int_eq(atomic_load(&cb_running), 2);
    troupe_target_destroy(t);
    atomic_store(&cb_block, 0);
    ck_assert(ts_wait_until(cb_returned_two, NULL, 10000));
    each_once(2);
    ck_assert_int_eq(atomic_load(&P.done), 2);
}
END_TEST

START_TEST(test_destroy_of_a_running_target_aborts)
{
    troupe_target *t = callback_target("running", 0, 0);
    troupe_target_destroy(t);
}
END_TEST

/* ---- pull mode ---- */

static troupe_host *host;

static troupe_target *
pull_target(const char *name, uint32_t credit, uint32_t timeout_ms)
{
    troupe_target_opts o = {
        .name = name, .host = host, .credit = credit, .timeout_ms = timeout_ms};
    troupe_target *t = NULL;
    ck_assert_ok(troupe_target_create(rt, &o, &t));
    return t;
}

static void
pull_setup(void)
{
    setup();
    ck_assert_ok(troupe_host_open(rt, NULL, &host));
}

static void
pull_teardown(void)
{
    if (host != NULL) {
        troupe_host_close(host);
        troupe_host_destroy(host);
        host = NULL;
    }
    teardown();
}

/* The host goes away first: what it holds settles, so the stop is quick. */
static void
close_then_stop(troupe_target *t)
{
    ck_assert_ok(troupe_host_close(host));
    stop_destroy(t);
}

static bool
fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

START_TEST(test_pull_records_carry_the_task_and_replies_settle_it_once)
{
    troupe_target *t = pull_target("pull", 0, 0);
    uint64_t ids[3];
    ck_assert(!fd_readable(troupe_host_wake_fd(host)));
    for (int i = 0; i < 3; i++)
        ck_assert_ok(submit(t, (size_t)i, i == 1 ? "body-1" : "b", &ids[i]));
    ck_assert(fd_readable(troupe_host_wake_fd(host)));
    uint8_t buf[4096];
    size_t n = 0, len = 0;
    ck_assert_ok(
        troupe_host_next_batch(host, 0, buf, sizeof(buf), 16, &n, &len));
    ck_assert_uint_eq(n, 3);
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        const uint8_t *r = buf + off;
        ck_assert_uint_eq(ts_rd64(r), ids[i]);
        ck_assert_str_eq(troupe_host_target_name(host, ts_rd32(r + 8)), "pull");
        ck_assert_uint_eq(r[12] | r[13] << 8, TROUPE_TASK_TEST);
        ck_assert_uint_eq(r[14] | r[15] << 8, 1);
        ck_assert_uint_eq(ts_rd32(r + 16), (uint32_t)i + 1);
        uint32_t bl = ts_rd32(r + 20);
        ck_assert_uint_eq(bl, i == 1 ? 6 : 1);
        ck_assert_int_eq(r[TROUPE_HOST_RECORD_FIXED], 'h');
        if (i == 1)
            ck_assert_int_eq(
                memcmp(r + TROUPE_HOST_RECORD_FIXED + 1, "body-1", 6), 0);
        off += TROUPE_HOST_RECORD_SIZE(1, bl);
        ck_assert_uint_eq(off % 8, 0);
    }
    ck_assert_uint_eq(off, len);
    ck_assert_int_eq(atomic_load(&P.done), 0);
    ck_assert_ok(
        troupe_host_reply(host, ids[0], TROUPE_OUTCOME_SUCCESS, "ok", 2));
    ck_assert_err(
        troupe_host_reply(host, ids[0], TROUPE_OUTCOME_SUCCESS, NULL, 0),
        TROUPE_ENOENT);
    ck_assert_ok(
        troupe_host_reply(host, ids[1], TROUPE_OUTCOME_FAILURE, NULL, 0));
    ck_assert_err(troupe_host_reply(host, ids[2], 0, NULL, 0), TROUPE_EINVAL);
    ck_assert_err(
        troupe_host_reply(host, ids[2], TROUPE_OUTCOME_SUCCESS, NULL, 0),
        TROUPE_ENOENT);
    wait_done(3);
    each_once(3);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_SUCCESS]), 1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_FAILURE]), 1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 1);
    ck_assert_err(
        troupe_host_reply(host, 12345, TROUPE_OUTCOME_SUCCESS, NULL, 0),
        TROUPE_ENOENT);
    stop_destroy(t);
}
END_TEST

/* The fd is written once per edge: readable after the first task, not
 * written again while the host has not found the queue empty, read back
 * by the pull that finds it empty, written again by the next task. */
START_TEST(test_wake_fd_is_edge_triggered_and_rearmed_by_an_empty_pull)
{
    troupe_target *t = pull_target("edge", 0, 0);
    int fd = troupe_host_wake_fd(host);
    uint8_t buf[256];
    size_t len = 0;
    ck_assert_ok(submit(t, 0, "a", NULL));
    ck_assert_ok(submit(t, 1, "b", NULL));
    ck_assert(fd_readable(fd));
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_gt(len, 0);
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_gt(len, 0);
    ck_assert(fd_readable(fd)); /* not yet found empty */
    ck_assert_ok(submit(t, 2, "c", NULL));
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_gt(len, 0);
    uint64_t v = 0;
    ck_assert_int_eq(read(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
    ck_assert_uint_eq(v, 1); /* written once for the three */
    ck_assert_ok(submit(t, 3, "d", NULL));
    ck_assert(!fd_readable(fd)); /* not re-armed: no empty pull yet */
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_gt(len, 0);
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_eq(len, 0); /* empty: re-armed */
    ck_assert(!fd_readable(fd));
    ck_assert_ok(submit(t, 4, "e", NULL));
    ck_assert(fd_readable(fd));
    ck_assert_ok(troupe_host_close(host));
    wait_done(5);
    each_once(5);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 5);
    stop_destroy(t);
}
END_TEST

static bool
timed_out_one(void *arg)
{
    troupe_target_stats st;
    troupe_target_stats_get(arg, &st);
    return st.timed_out >= 1;
}

/* A task submitted behind an overdue one its producer holds (settled,
 * still linked) times out all the same: the deadline thread, whose last
 * round found nothing left to expire, hears of every submit, not only of
 * one to an empty list (the host actors' stress test hung on this). */
START_TEST(test_a_task_behind_a_held_overdue_one_still_times_out)
{
    atomic_store(&P.hold, 1);
    troupe_target *t = pull_target("heldover", 2, 50);
    uint64_t id0;
    ck_assert_ok(submit(t, 0, "x", &id0));
    wait_done(1); /* UNKNOWN at its deadline, and held */
    atomic_store(&P.hold, 0);
    ck_assert_ok(submit(t, 1, "y", NULL));
    wait_done(2);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 2);
    troupe__target_task_end(t, id0);
    stop_destroy(t);
}
END_TEST

START_TEST(test_a_reply_after_the_deadline_is_refused_and_changes_nothing)
{
    troupe_target *t = pull_target("late", 0, 30);
    uint64_t id;
    ck_assert_ok(submit(t, 0, "x", &id));
    uint8_t buf[256];
    size_t len;
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_gt(len, 0);
    wait_done(1);
    ck_assert(ts_wait_until(timed_out_one, t, 10000));
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 1);
    ck_assert_err(troupe_host_reply(host, id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                  TROUPE_ETIMEDOUT);
    ck_assert_int_eq(atomic_load(&P.done), 1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_SUCCESS]), 0);
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.late, 1);
    stop_destroy(t);
}
END_TEST

START_TEST(test_a_task_too_big_for_the_buffer_is_etoobig_and_unknown)
{
    troupe_target *t = pull_target("big", 0, 0);
    char b80[81], b60[61];
    memset(b80, 'x', 80);
    b80[80] = 0;
    memset(b60, 'y', 60);
    b60[60] = 0;
    ck_assert_ok(submit(t, 0, b80, NULL));
    ck_assert_ok(submit(t, 1, "s", NULL));
    uint8_t buf[96];
    size_t len = 0;
    ck_assert_err(troupe_host_next(host, 0, buf, sizeof(buf), &len),
                  TROUPE_ETOOBIG);
    ck_assert_uint_eq(len, TROUPE_HOST_RECORD_SIZE(1, 80));
    wait_done(1);
    ck_assert_int_eq(atomic_load(&P.calls[0]), 1);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 1);
    /* a batch stops before a record that does not fit, and keeps it */
    ck_assert_ok(submit(t, 2, b60, NULL));
    size_t n = 0;
    ck_assert_ok(
        troupe_host_next_batch(host, 0, buf, sizeof(buf), 8, &n, &len));
    ck_assert_uint_eq(n, 1); /* "s" fits, the 60-byte one not after it */
    ck_assert_ok(
        troupe_host_next_batch(host, 0, buf, sizeof(buf), 8, &n, &len));
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(ts_rd32(buf + 20), 60);
    close_then_stop(t); /* the two taken settle at the close */
}
END_TEST

START_TEST(test_host_close_settles_ready_and_taken_tasks_unknown)
{
    troupe_target *t = pull_target("close", 0, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_ok(submit(t, (size_t)i, "x", NULL));
    uint8_t buf[256];
    size_t len;
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_host_close(host));
    wait_done(4);
    each_once(4);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]), 4);
    ck_assert_err(troupe_host_next(host, 0, buf, sizeof(buf), &len),
                  TROUPE_ECLOSED);
    ck_assert_err(submit(t, 5, "x", NULL), TROUPE_ECLOSED);
    ck_assert_err(troupe_host_close(host), TROUPE_ESTATE);
    ck_assert_int_eq(atomic_load(&P.done), 4);
    stop_destroy(t);
}
END_TEST

START_TEST(test_stop_settles_ready_tasks_and_waits_for_taken_ones)
{
    atomic_store(&stops, 0);
    troupe_target *t = pull_target("pstop", 0, 0);
    uint64_t a, b;
    ck_assert_ok(submit(t, 0, "x", &a));
    ck_assert_ok(submit(t, 1, "y", &b));
    uint8_t buf[256];
    size_t len;
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_uint_eq(ts_rd64(buf), a);
    ck_assert_ok(troupe_target_stop(t, on_stop, NULL));
    wait_done(1);
    ck_assert_int_eq(atomic_load(&P.calls[1]), 1); /* the ready one */
    ck_assert_int_eq(atomic_load(&stops), 0);
    ck_assert_ptr_null(troupe__target_find(rt, "pstop", 5));
    ck_assert_ok(troupe_host_reply(host, a, TROUPE_OUTCOME_SUCCESS, NULL, 0));
    ck_assert_int_eq(atomic_load(&stops), 1);
    each_once(2);
    troupe_target_destroy(t);
}
END_TEST

static void *
submit_later(void *arg)
{
    usleep(20000); /* the pull is waiting by then, or finds it at once */
    ck_assert_ok(submit(arg, 0, "late", NULL));
    return NULL;
}

/* A producer waiting for credit is kicked once an eighth of the credit is
 * free, not for each credit a reply frees (a context switch per task):
 * with 16, the first reply kicks nobody and the second does. */
START_TEST(test_a_waiting_producer_is_kicked_once_an_eighth_is_free)
{
    atomic_store(&kicks, 0);
    troupe_target *t = pull_target("eighth", 16, 0);
    uint64_t ids[16];
    for (int i = 0; i < 16; i++)
        ck_assert_ok(submit(t, (size_t)i, "x", &ids[i]));
    troupe__credit_wait w = {.kick = on_kick};
    ck_assert(!troupe__target_credit_take(t, &w));
    uint8_t buf[4096];
    size_t n = 0, len = 0;
    ck_assert_ok(
        troupe_host_next_batch(host, 0, buf, sizeof(buf), 16, &n, &len));
    ck_assert_uint_eq(n, 16);
    ck_assert_ok(
        troupe_host_reply(host, ids[0], TROUPE_OUTCOME_SUCCESS, NULL, 0));
    ck_assert_int_eq(atomic_load(&kicks), 0);
    ck_assert(w.queued);
    ck_assert_ok(
        troupe_host_reply(host, ids[1], TROUPE_OUTCOME_SUCCESS, NULL, 0));
    ck_assert_int_eq(atomic_load(&kicks), 1);
    ck_assert(!w.queued);
    ck_assert(troupe__target_credit_take(t, NULL));
    ck_assert(troupe__target_credit_take(t, NULL));
    ck_assert(!troupe__target_credit_take(t, NULL));
    troupe__target_credit_give(t);
    troupe__target_credit_give(t);
    for (int i = 2; i < 16; i++)
        ck_assert_ok(
            troupe_host_reply(host, ids[i], TROUPE_OUTCOME_SUCCESS, NULL, 0));
    wait_done(16);
    close_then_stop(t);
}
END_TEST

START_TEST(test_a_blocking_pull_wakes_for_a_task)
{
    troupe_target *t = pull_target("block", 0, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, submit_later, t), 0);
    uint8_t buf[256];
    size_t len = 0;
    ck_assert_ok(troupe_host_next(host, 10000, buf, sizeof(buf), &len));
    ck_assert_uint_gt(len, 0);
    pthread_join(th, NULL);
    ck_assert_ok(
        troupe_host_reply(host, ts_rd64(buf), TROUPE_OUTCOME_SUCCESS, NULL, 0));
    ck_assert_ok(troupe_host_next(host, 20, buf, sizeof(buf), &len));
    ck_assert_uint_eq(len, 0); /* nothing came: the timeout */
    ck_assert_err(troupe_host_next(host, -1, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    stop_destroy(t);
}
END_TEST

/* ---- wake callback ---- */

static _Atomic int wakes, in_wake;
static _Atomic unsigned long wake_thread;

static void
on_wake(void *arg)
{
    (void)arg;
    atomic_store(&in_wake, 1);
    atomic_store(&wake_thread, (unsigned long)pthread_self());
    atomic_fetch_add(&wakes, 1);
    usleep(10000); /* a slow callback: clearing must wait for it */
    atomic_store(&in_wake, 0);
}

static bool
woke(void *arg)
{
    (void)arg;
    return atomic_load(&wakes) > 0;
}

START_TEST(test_wake_callback_runs_on_its_own_thread_and_clearing_quiesces)
{
    atomic_store(&wakes, 0);
    troupe_target *t = pull_target("wcb", 0, 0);
    ck_assert_ok(troupe_host_set_wake(host, on_wake, NULL));
    ck_assert_ok(submit(t, 0, "x", NULL));
    ck_assert(ts_wait_until(woke, NULL, 10000));
    ck_assert(atomic_load(&wake_thread) != (unsigned long)pthread_self());
    ck_assert_ok(troupe_host_set_wake(host, NULL, NULL));
    ck_assert_int_eq(atomic_load(&in_wake), 0); /* returned: none running */
    int w = atomic_load(&wakes);
    uint8_t buf[256];
    size_t len;
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_host_next(host, 0, buf, sizeof(buf), &len));
    ck_assert_ok(submit(t, 1, "y", NULL)); /* an edge, no callback now */
    ck_assert(fd_readable(troupe_host_wake_fd(host)));
    ck_assert_int_eq(atomic_load(&wakes), w);
    close_then_stop(t);
}
END_TEST

static _Atomic int post_next_err = -1, post_stop_err = -1;

static void
blocking_on_scheduler(void *arg, troupe_runtime *r)
{
    (void)r;
    uint8_t buf[64];
    size_t len;
    atomic_store(&post_next_err,
                 (int)troupe_host_next(host, 100, buf, sizeof(buf), &len));
    atomic_store(&post_stop_err, (int)troupe_target_stop_wait(arg));
}

static bool
posted(void *arg)
{
    (void)arg;
    return atomic_load(&post_stop_err) != -1;
}

/* On a troupe thread the blocking forms refuse (EDEADLK) and start
 * nothing; the non-blocking pull works there. */
START_TEST(test_blocking_calls_on_a_scheduler_thread_are_edeadlk)
{
    troupe_target *t = pull_target("deadlk", 0, 0);
    ck_assert_ok(troupe_runtime_post(rt, blocking_on_scheduler, t));
    ck_assert(ts_wait_until(posted, NULL, 10000));
    ck_assert_err((troupe_err)atomic_load(&post_next_err), TROUPE_EDEADLK);
    ck_assert_err((troupe_err)atomic_load(&post_stop_err), TROUPE_EDEADLK);
    ck_assert_ok(submit(t, 0, "x", NULL)); /* not stopped */
    stop_destroy(t);
}
END_TEST

START_TEST(test_host_calls_bad_arguments_are_einval_or_eproto)
{
    uint8_t buf[64];
    size_t n, len, done, refused;
    ck_assert_err(troupe_host_next(NULL, 0, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_host_next(host, 0, NULL, 8, &len), TROUPE_EINVAL);
    ck_assert_err(
        troupe_host_next_batch(host, 0, buf, sizeof(buf), 4, NULL, &len),
        TROUPE_EINVAL);
    ck_assert_err(troupe_host_reply(NULL, 1, 1, NULL, 0), TROUPE_EINVAL);
    ck_assert_err(troupe_host_reply(host, 1, 1, NULL, 3), TROUPE_EINVAL);
    ck_assert_err(troupe_host_reply_batch(host, buf, 8, NULL, &refused),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_host_set_wake(NULL, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_host_close(NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_host_wake_fd(NULL), -1);
    ck_assert_ptr_null(troupe_host_target_name(host, 7));
    ck_assert_err(troupe_host_open(rt, NULL, NULL), TROUPE_EINVAL);
    troupe_host_opts bad = {.reserved = 1};
    troupe_host *h2 = (troupe_host *)1;
    ck_assert_err(troupe_host_open(rt, &bad, &h2), TROUPE_EINVAL);
    ck_assert_ptr_null(h2);
    /* a reply record cut short: those before it answered, then EPROTO */
    memset(buf, 0, sizeof(buf));
    buf[12] = 40; /* body_len 40 in a 24-byte buffer */
    ck_assert_err(troupe_host_reply_batch(host, buf, 24, &done, &refused),
                  TROUPE_EPROTO);
    ck_assert_uint_eq(done + refused, 0);
    ck_assert_err(troupe_host_reply_batch(host, buf, 10, &done, &refused),
                  TROUPE_EPROTO);
    (void)n;
}
END_TEST

/* ---- exactly once under races ---- */

static _Atomic int stress_stop;

static void *
puller(void *arg)
{
    (void)arg;
    uint8_t buf[8192];
    uint8_t rep[8192];
    while (!atomic_load(&stress_stop)) {
        size_t n = 0, len = 0;
        if (troupe_host_next_batch(host, 5, buf, sizeof(buf), 64, &n, &len) !=
            TROUPE_OK)
            break;
        size_t off = 0, ro = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t id = ts_rd64(buf + off);
            uint32_t bl = ts_rd32(buf + off + 20);
            off += TROUPE_HOST_RECORD_SIZE(buf[off + 14], bl);
            for (int k = 0; k < 8; k++)
                rep[ro + k] = (uint8_t)(id >> (8 * k));
            uint32_t o = TROUPE_OUTCOME_SUCCESS;
            memcpy(rep + ro + 8, &o, 4);
            memset(rep + ro + 12, 0, 4);
            ro += 16;
        }
        size_t done = 0, refused = 0;
        if (ro > 0)
            ck_assert_ok(
                troupe_host_reply_batch(host, rep, ro, &done, &refused));
        ck_assert_uint_eq(done + refused, n);
    }
    return NULL;
}

/* Replies (batched) race deadlines of 1 ms: every task settles exactly
 * once, as SUCCESS or UNKNOWN, and the target ends holding nothing. */
START_TEST(test_replies_racing_deadlines_settle_each_task_once)
{
    troupe_target *t = pull_target("race", 32, 1);
    atomic_store(&stress_stop, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, puller, NULL), 0);
    enum { N = MAXT };
    int sent = 0;
    while (sent < N) {
        troupe_err e = submit(t, (size_t)sent, "r", NULL);
        if (e == TROUPE_EFULL) {
            int want = sent - 16;
            ts_wait_until(done_at_least, &want, 10000);
            continue;
        }
        ck_assert_ok(e);
        sent++;
    }
    wait_done(N);
    atomic_store(&stress_stop, 1);
    pthread_join(th, NULL);
    each_once(N);
    ck_assert_int_eq(atomic_load(&P.outcomes[TROUPE_OUTCOME_SUCCESS]) +
                         atomic_load(&P.outcomes[TROUPE_OUTCOME_UNKNOWN]),
                     N);
    troupe_target_stats st;
    troupe_target_stats_get(t, &st);
    ck_assert_uint_eq(st.held, 0);
    ck_assert_uint_eq(st.submitted, N);
    stop_destroy(t);
}
END_TEST

Suite *
dispatch_suite(void)
{
    Suite *s = suite_create("dispatch");
    TCase *cb = tcase_create("callback");
    tcase_add_checked_fixture(cb, setup, teardown);
    tcase_set_timeout(cb, 60);
    tcase_add_test(cb, test_target_create_bad_arguments_are_einval);
    tcase_add_test(cb, test_target_names_are_unique_until_stopped);
    tcase_add_test(
        cb, test_callback_tasks_settle_once_with_their_outcome_and_reply);
    tcase_add_test(cb, test_callback_returning_garbage_is_unknown);
    tcase_add_test(
        cb, test_callback_past_its_deadline_is_unknown_and_its_return_dropped);
    tcase_add_test(
        cb, test_credit_bounds_tasks_and_a_freed_credit_kicks_the_waiter);
    tcase_add_test(cb, test_a_refused_submit_gives_its_credit_back);
    tcase_add_test(cb, test_unwait_waits_for_a_kick_in_flight);
    tcase_add_test(cb,
                   test_a_held_task_keeps_its_credit_and_the_stop_until_ended);
    tcase_add_test(cb, test_stop_waits_for_the_running_callback_and_fires_once);
    tcase_add_test(
        cb, test_a_callback_past_its_deadline_frees_its_credit_not_its_slot);
    tcase_add_test_raise_signal(cb, test_destroy_of_a_running_target_aborts,
                                SIGABRT);
    suite_add_tcase(s, cb);
    TCase *pull = tcase_create("pull");
    tcase_add_checked_fixture(pull, pull_setup, pull_teardown);
    tcase_set_timeout(pull, 60);
    tcase_add_test(pull,
                   test_pull_records_carry_the_task_and_replies_settle_it_once);
    tcase_add_test(pull,
                   test_wake_fd_is_edge_triggered_and_rearmed_by_an_empty_pull);
    tcase_add_test(
        pull, test_a_reply_after_the_deadline_is_refused_and_changes_nothing);
    tcase_add_test(pull, test_a_task_behind_a_held_overdue_one_still_times_out);
    tcase_add_test(pull,
                   test_a_task_too_big_for_the_buffer_is_etoobig_and_unknown);
    tcase_add_test(pull, test_host_close_settles_ready_and_taken_tasks_unknown);
    tcase_add_test(pull,
                   test_stop_settles_ready_tasks_and_waits_for_taken_ones);
    tcase_add_test(pull, test_a_blocking_pull_wakes_for_a_task);
    tcase_add_test(pull,
                   test_a_waiting_producer_is_kicked_once_an_eighth_is_free);
    tcase_add_test(
        pull, test_wake_callback_runs_on_its_own_thread_and_clearing_quiesces);
    tcase_add_test(pull, test_replies_racing_deadlines_settle_each_task_once);
    tcase_add_test(pull, test_blocking_calls_on_a_scheduler_thread_are_edeadlk);
    tcase_add_test(pull, test_host_calls_bad_arguments_are_einval_or_eproto);
    suite_add_tcase(s, pull);
    return s;
}
