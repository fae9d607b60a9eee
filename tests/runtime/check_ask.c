/* ask/reply: exactly one reply or timeout, late replies dropped, host
 * asks with callbacks, errors for dead and stopping targets. */
#include <stdatomic.h>

#include "rtest.h"

enum { K_Q, K_SLOW, K_LATE, K_GO, K_REPLY, K_N };

static struct {
    _Atomic int replies;
    troupe_err last_err;
    uint64_t last_v;
    uint64_t corr;
    int cb_calls;
    troupe_err cb_err;
    uint64_t cb_v;
    /* the slow server keeps the request to answer late */
    troupe_addr held_from;
    uint64_t held_corr;
} st;

static troupe_err
srv_q(troupe_actor *self, void *s, const troupe_msg *m)
{
    troupe_msg *r = mkv(0, msgv(m) + 1);
    return troupe_reply(self, m, &r);
}

static troupe_err
srv_slow(troupe_actor *self, void *s, const troupe_msg *m)
{
    st.held_from = m->from;
    st.held_corr = m->corr;
    return TROUPE_OK;
}

static troupe_err
srv_late(troupe_actor *self, void *s, const troupe_msg *m)
{
    troupe_msg req = {.from = st.held_from, .corr = st.held_corr};
    troupe_msg *r = mkv(0, 1);
    return troupe_reply(self, &req, &r);
}

static troupe_err
srv_notask(troupe_actor *self, void *s, const troupe_msg *m)
{
    troupe_msg *r = mk(0);
    ck_assert_err(troupe_reply(self, m, &r), TROUPE_EINVAL);
    ck_assert_ptr_null(r);
    ck_assert_err(troupe_reply(self, m, NULL), TROUPE_EINVAL);
    atomic_fetch_add(&st.replies, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn srv_h[K_N] = {[K_Q] = srv_q,
                                             [K_SLOW] = srv_slow,
                                             [K_LATE] = srv_late,
                                             [K_GO] = srv_notask};
static const troupe_actor_def srv_def = {
    .name = "srv", .handlers = srv_h, .n_handlers = K_N};

static troupe_addr server;
static uint32_t ask_kind;
static uint32_t ask_timeout = 5000;

static troupe_err
cli_go(troupe_actor *self, void *s, const troupe_msg *m)
{
    troupe_msg *q = mkv(ask_kind, 41);
    uint64_t corr = 0;
    troupe_err e = troupe_ask(self, server, &q, ask_timeout, K_REPLY, &corr);
    ck_assert_ptr_null(q);
    if (e != TROUPE_OK) {
        st.last_err = e;
        atomic_fetch_add(&st.replies, 1);
        return TROUPE_OK;
    }
    ck_assert_uint_ne(corr, 0);
    st.corr = corr;
    return TROUPE_OK;
}

static troupe_err
cli_reply(troupe_actor *self, void *s, const troupe_msg *m)
{
    ck_assert_uint_eq(m->corr, st.corr);
    ck_assert(m->flags & TROUPE_MSG_REPLY);
    st.last_err = m->err;
    st.last_v = msgv(m);
    atomic_fetch_add(&st.replies, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn cli_h[K_N] = {
    [K_GO] = cli_go, [K_REPLY] = cli_reply};
static const troupe_actor_def cli_def = {
    .name = "cli", .handlers = cli_h, .n_handlers = K_N};

static int want;
static bool
have_replies(void *arg)
{
    (void)arg;
    return atomic_load(&st.replies) >= want;
}

static void
run_client(rt_fixture *f, troupe_addr cli, int n)
{
    troupe_msg *m = mk(K_GO);
    ck_assert_ok(troupe_runtime_send(f->rt, cli, &m));
    want = n;
    ck_assert(ts_run_until(&f->loop, have_replies, NULL, 5000));
}

START_TEST(test_ask_reply_across_schedulers)
{
    rt_fixture f;
    rtf_start(&f, 2);
    server = rtf_spawn_on(f.rt, &srv_def, 1);
    troupe_addr cli = rtf_spawn_on(f.rt, &cli_def, 0);
    ask_kind = K_Q;
    run_client(&f, cli, 1);
    ck_assert_err(st.last_err, TROUPE_OK);
    ck_assert_uint_eq(st.last_v, 42);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_ask_timeout_fires_once_and_late_reply_is_dropped)
{
    rt_fixture f;
    rtf_start(&f, 1);
    server = rtf_spawn_on(f.rt, &srv_def, 0);
    troupe_addr cli = rtf_spawn_on(f.rt, &cli_def, 0);
    ask_kind = K_SLOW;
    ask_timeout = 20;
    run_client(&f, cli, 1);
    ck_assert_err(st.last_err, TROUPE_ETIMEDOUT);
    ck_assert_uint_eq(st.last_v, 0);
    /* Now the server answers: the reply is late and must not arrive. */
    troupe_msg *m = mk(K_LATE);
    ck_assert_ok(troupe_runtime_send(f.rt, server, &m));
    want = 2;
    ts_run_until(&f.loop, have_replies, NULL, 50);
    ck_assert_int_eq(atomic_load(&st.replies), 1);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_ask_dead_target_returns_edead_and_delivers_nothing)
{
    rt_fixture f;
    rtf_start(&f, 1);
    server = (troupe_addr){1, 999, 1};
    troupe_addr cli = rtf_spawn_on(f.rt, &cli_def, 0);
    ask_kind = K_Q;
    ask_timeout = 10;
    run_client(&f, cli, 1);
    ck_assert_err(st.last_err, TROUPE_EDEAD);
    want = 2;
    ts_run_until(&f.loop, have_replies, NULL, 40); /* past the timeout */
    ck_assert_int_eq(atomic_load(&st.replies), 1);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_ask_bad_args)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_msg *m = mk(0);
    ck_assert_err(troupe_ask(NULL, server, &m, 10, 0, NULL), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_err(troupe_ask(NULL, server, NULL, 10, 0, NULL), TROUPE_EINVAL);
    m = mk(0);
    ck_assert_err(troupe_runtime_ask(f.rt, server, &m, 0, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_err(troupe_reply(NULL, NULL, NULL), TROUPE_EINVAL);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_reply_to_plain_send_is_einval)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr srv = rtf_spawn_on(f.rt, &srv_def, 0);
    troupe_msg *m = mk(K_GO);
    ck_assert_ok(troupe_runtime_send(f.rt, srv, &m));
    want = 1;
    ck_assert(ts_run_until(&f.loop, have_replies, NULL, 5000));
    rtf_stop(&f);
}
END_TEST

static void
host_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    st.cb_calls++;
    st.cb_err = err;
    st.cb_v = reply ? msgv(reply) : 0;
    ck_assert(err != TROUPE_OK || reply != NULL);
    ck_assert_ptr_eq(arg, &st);
}

static bool
cb_called(void *arg)
{
    (void)arg;
    return st.cb_calls > 0;
}

START_TEST(test_host_ask_callback_reply)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_addr srv = rtf_spawn_on(f.rt, &srv_def, 1);
    troupe_msg *m = mkv(K_Q, 9);
    ck_assert_ok(troupe_runtime_ask(f.rt, srv, &m, 5000, host_cb, &st));
    ck_assert(ts_run_until(&f.loop, cb_called, NULL, 5000));
    ck_assert_err(st.cb_err, TROUPE_OK);
    ck_assert_uint_eq(st.cb_v, 10);
    rtf_stop(&f);
    ck_assert_int_eq(st.cb_calls, 1);
}
END_TEST

START_TEST(test_host_ask_timeout_then_shutdown_closes_pending)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr srv = rtf_spawn_on(f.rt, &srv_def, 0);
    troupe_msg *m = mk(K_SLOW);
    ck_assert_ok(troupe_runtime_ask(f.rt, srv, &m, 10, host_cb, &st));
    ck_assert(ts_run_until(&f.loop, cb_called, NULL, 5000));
    ck_assert_err(st.cb_err, TROUPE_ETIMEDOUT);
    st.cb_calls = 0;
    m = mk(K_SLOW);
    ck_assert_ok(troupe_runtime_ask(f.rt, srv, &m, 600000, host_cb, &st));
    uv_run(&f.loop, UV_RUN_NOWAIT);
    rtf_stop(&f);
    ck_assert_int_eq(st.cb_calls, 1);
    ck_assert_err(st.cb_err, TROUPE_ECLOSED);
}
END_TEST

START_TEST(test_ask_queued_behind_stop_gets_edead_reply)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr srv = rtf_spawn_on(f.rt, &srv_def, 0);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    ck_assert_ok(troupe_actor_stop(f.rt, srv, NULL, NULL));
    troupe_msg *m = mk(K_Q);
    ck_assert_ok(troupe_runtime_ask(f.rt, srv, &m, 600000, host_cb, &st));
    ck_assert(ts_run_until(&f.loop, cb_called, NULL, 5000));
    ck_assert_err(st.cb_err, TROUPE_EDEAD);
    rtf_stop(&f);
    ck_assert_int_eq(st.cb_calls, 1);
}
END_TEST

START_TEST(test_host_ask_to_dead_actor_returns_edead_without_callback)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_msg *m = mk(K_Q);
    ck_assert_err(troupe_runtime_ask(f.rt, (troupe_addr){1, 50, 1}, &m, 100,
                                     host_cb, &st),
                  TROUPE_EDEAD);
    ck_assert_ptr_null(m);
    rtf_stop(&f);
    ck_assert_int_eq(st.cb_calls, 0);
}
END_TEST

/* Host callbacks run on scheduler 0 and ask again from there (a client
 * keeping requests in flight): each of those asks completes exactly once,
 * never inside the call that made it, and one that fails returns its
 * error without a callback. */
typedef struct chain {
    troupe_addr srv;
    int left;        /* asks still to make */
    int done;        /* callbacks */
    bool in_ask;     /* inside troupe_runtime_ask, made from a callback */
    bool reentered;  /* a callback ran inside that call */
    troupe_err dead; /* what an ask of a dead address returned */
    int bad_calls;   /* callbacks of that failed ask */
} chain;

static void
chain_bad_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)err;
    (void)reply;
    ((chain *)arg)->bad_calls++;
}

static void
chain_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    chain *c = arg;
    if (c->in_ask)
        c->reentered = true;
    ck_assert_err(err, TROUPE_OK);
    ck_assert_uint_eq(msgv(reply), (uint64_t)c->done + 1);
    c->done++;
    if (c->done == 1) {
        troupe_msg *m = mk(K_Q);
        c->dead = troupe_runtime_ask(rt, (troupe_addr){1, 50, 1}, &m, 100,
                                     chain_bad_cb, c);
        ck_assert_ptr_null(m);
    }
    if (c->left == 0)
        return;
    c->left--;
    troupe_msg *m = mkv(K_Q, (uint64_t)c->done);
    c->in_ask = true;
    ck_assert_ok(troupe_runtime_ask(rt, c->srv, &m, 5000, chain_cb, c));
    c->in_ask = false;
}

static bool
chain_done(void *arg)
{
    chain *c = arg;
    return c->left == 0 && c->done == 101;
}

START_TEST(test_host_ask_from_a_callback_completes_once_later)
{
    rt_fixture f;
    rtf_start(&f, 2);
    chain c = {.left = 100};
    /* one server beside the host on scheduler 0, and one elsewhere */
    for (int on = 0; on < 2; on++) {
        memset(&c, 0, sizeof(c));
        c.left = 100;
        c.srv = rtf_spawn_on(f.rt, &srv_def, (unsigned)on);
        troupe_msg *m = mkv(K_Q, 0);
        ck_assert_ok(troupe_runtime_ask(f.rt, c.srv, &m, 5000, chain_cb, &c));
        ck_assert(ts_run_until(&f.loop, chain_done, &c, 10000));
        ck_assert(!c.reentered);
        ck_assert_err(c.dead, TROUPE_EDEAD);
    }
    rtf_stop(&f);
    ck_assert_int_eq(c.done, 101);
    ck_assert_int_eq(c.bad_calls, 0);
}
END_TEST

/* A worker answers the ask the server handed off, from its own thread. */
static troupe_addr handed_from;
static uint64_t handed_corr;
static troupe_runtime *handed_rt;

static void
answer_off_thread(void *arg)
{
    troupe_body *b = NULL;
    uint64_t v = 77;
    ck_assert_ok(troupe_body_copy(&v, sizeof(v), &b));
    ck_assert_ok(troupe_runtime_reply(handed_rt, handed_from, handed_corr,
                                      TROUPE_EIO, &b));
    ck_assert_ptr_null(b);
}

static troupe_err
srv_handoff(troupe_actor *self, void *s, const troupe_msg *m)
{
    handed_from = m->from;
    handed_corr = m->corr;
    handed_rt = troupe_actor_runtime(self);
    return troupe_work_submit(self, answer_off_thread, NULL, 99, NULL);
}

static troupe_err
srv_bad(troupe_actor *self, void *s, const troupe_msg *m)
{
    return troupe_reply_error(self, m, TROUPE_EPROTO);
}

static const troupe_handler_fn off_h[K_N] = {
    [K_Q] = srv_handoff, [K_SLOW] = srv_bad};
static const troupe_actor_def off_def = {
    .name = "off", .handlers = off_h, .n_handlers = K_N};

START_TEST(test_reply_from_another_thread_and_reply_error)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_addr srv = rtf_spawn_on(f.rt, &off_def, 1);
    troupe_msg *m = mk(K_Q);
    ck_assert_ok(troupe_runtime_ask(f.rt, srv, &m, 5000, host_cb, &st));
    ck_assert(ts_run_until(&f.loop, cb_called, NULL, 5000));
    ck_assert_err(st.cb_err, TROUPE_EIO);
    ck_assert_uint_eq(st.cb_v, 77);
    st.cb_calls = 0;
    m = mk(K_SLOW);
    ck_assert_ok(troupe_runtime_ask(f.rt, srv, &m, 5000, host_cb, &st));
    ck_assert(ts_run_until(&f.loop, cb_called, NULL, 5000));
    ck_assert_err(st.cb_err, TROUPE_EPROTO);
    /* bad arguments; corr 0 is a plain send: nothing to answer */
    troupe_body *b = NULL;
    ck_assert_ok(troupe_body_copy("x", 1, &b));
    ck_assert_err(troupe_runtime_reply(NULL, srv, 5, TROUPE_OK, &b),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_err(
        troupe_runtime_reply(f.rt, TROUPE_ADDR_NONE, 5, TROUPE_OK, NULL),
        TROUPE_EINVAL);
    ck_assert_ok(troupe_runtime_reply(f.rt, srv, 0, TROUPE_OK, NULL));
    ck_assert_err(troupe_reply_error(NULL, NULL, TROUPE_OK), TROUPE_EINVAL);
    rtf_stop(&f);
}
END_TEST

Suite *
ask_suite(void)
{
    Suite *s = suite_create("ask");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ask_reply_across_schedulers);
    tcase_add_test(tc, test_ask_timeout_fires_once_and_late_reply_is_dropped);
    tcase_add_test(tc, test_ask_dead_target_returns_edead_and_delivers_nothing);
    tcase_add_test(tc, test_ask_bad_args);
    tcase_add_test(tc, test_reply_to_plain_send_is_einval);
    tcase_add_test(tc, test_host_ask_callback_reply);
    tcase_add_test(tc, test_host_ask_timeout_then_shutdown_closes_pending);
    tcase_add_test(tc, test_ask_queued_behind_stop_gets_edead_reply);
    tcase_add_test(tc,
                   test_host_ask_to_dead_actor_returns_edead_without_callback);
    tcase_add_test(tc, test_reply_from_another_thread_and_reply_error);
    tcase_add_test(tc, test_host_ask_from_a_callback_completes_once_later);
    suite_add_tcase(s, tc);
    return s;
}
