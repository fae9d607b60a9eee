/* Byte budgets (mailboxes, the network, the worker pool), bounded shutdown
 * and worker lanes. Each flood test states the memory it may cost and
 * checks the process's resident set against it; a flood the runtime did
 * not bound stops early (at FLOOD_GUARD) and fails instead of eating the
 * machine. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "rtest.h"
#include "troupe/internal/msg.h"

enum { K_MSG, K_FLOOD, K_DONE, K_MARK, K_N };

#define MiB (UINT64_C(1) << 20)
#define FLOOD_GUARD (256 * MiB)
#define PEER 7u

static struct {
    _Atomic int msgs, marks, done, runs, drops;
    _Atomic uint64_t bytes;
} c;

static troupe_err
h_msg(troupe_actor *self, void *st, const troupe_msg *m)
{
    atomic_fetch_add(&c.msgs, 1);
    atomic_fetch_add(&c.bytes, troupe_msg_len(m));
    return TROUPE_OK;
}

static troupe_err
h_mark(troupe_actor *self, void *st, const troupe_msg *m)
{
    atomic_fetch_add(&c.marks, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn sink_h[K_N] = {
    [K_MSG] = h_msg, [K_MARK] = h_mark};
static const troupe_actor_def sink_def = {.name = "sink",
                                          .handlers = sink_h,
                                          .n_handlers = K_N,
                                          .remote_kinds =
                                              TROUPE_KIND_BIT(K_MSG)};
static const troupe_actor_def small_def = {.name = "small",
                                           .handlers = sink_h,
                                           .n_handlers = K_N,
                                           .mailbox_bytes = MiB};

static bool
at_least(void *arg)
{
    _Atomic int *p = ((void **)arg)[0];
    return atomic_load(p) >= *(int *)((void **)arg)[1];
}

/* Drives the loop until *ctr >= n. */
static void
drive(rt_fixture *f, _Atomic int *ctr, int n)
{
    void *a[2] = {ctr, &n};
    ck_assert(ts_run_until(&f->loop, at_least, a, 20000));
}

static troupe_addr
spawn0(rt_fixture *f, const troupe_actor_def *d)
{
    troupe_addr a = rtf_spawn_on(f->rt, d, 0);
    /* a handled marker: init ran, the mailbox is empty */
    int want = atomic_load(&c.marks) + 1;
    troupe_msg *m = mk(K_MARK);
    ck_assert_ok(troupe_runtime_send(f->rt, a, &m));
    drive(f, &c.marks, want);
    return a;
}

static void
start(rt_fixture *f, const troupe_runtime_opts *extra)
{
    memset(f, 0, sizeof(*f));
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    troupe_runtime_opts o = extra ? *extra : (troupe_runtime_opts){0};
    o.loop = &f->loop;
    if (o.schedulers == 0)
        o.schedulers = 1;
    if (o.workers == 0)
        o.workers = 1;
    ck_assert_ok(troupe_runtime_create(&f->rt, &o));
}

static troupe_msg *
big(uint32_t kind, size_t len)
{
    static unsigned char buf[1 << 21];
    troupe_msg *m = NULL;
    ck_assert(len <= sizeof(buf));
    ck_assert_ok(troupe_msg_create(&m, kind, buf, len));
    return m;
}

/* 50,001 messages of 64 KiB to one actor that does not run (its loop is
 * this thread's, which is busy sending) once reached 3 GB. */
START_TEST(test_mailbox_byte_bound_stops_64k_flood_rss_under_96mib)
{
    rt_fixture f;
    start(&f, NULL);
    troupe_addr a = spawn0(&f, &sink_def);
    uint64_t base = rss_bytes();
    int ok = 0;
    troupe_err e = TROUPE_OK;
    for (int i = 0; i < 50001; i++) {
        troupe_msg *m = big(K_MSG, 64 << 10);
        e = troupe_runtime_send(f.rt, a, &m);
        if (e != TROUPE_OK || rss_bytes() - base > FLOOD_GUARD)
            break;
        ok++;
    }
    ck_assert_err(e, TROUPE_EFULL);
    uint64_t held = (uint64_t)ok << 16;
    ck_assert_uint_le(held, TROUPE_DEFAULT_MAILBOX_BYTES);
    ck_assert_uint_gt(held, TROUPE_DEFAULT_MAILBOX_BYTES - (64 << 10));
    uint64_t grew = rss_bytes() - base;
    ck_assert_msg(grew < 96 * MiB, "RSS grew %llu MiB",
                  (unsigned long long)(grew / MiB));
    /* a message without a body still fits (the count bound is apart) */
    troupe_msg *m = mk(K_MARK);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    drive(&f, &c.msgs, ok);
    ck_assert_uint_eq(atomic_load(&c.bytes), held);
    /* drained: the bytes are free again */
    m = big(K_MSG, 64 << 10);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    troupe_runtime_stats st;
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.mailbox_full, 1);
    rtf_stop(&f);
}
END_TEST

START_TEST(
    test_mailbox_bytes_of_a_def_override_and_one_big_message_passes_alone)
{
    rt_fixture f;
    start(&f, NULL);
    troupe_addr a = spawn0(&f, &small_def); /* 1 MiB */
    troupe_msg *m = big(K_MSG, 2 * MiB);    /* alone: admitted */
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    m = big(K_MSG, 65); /* the smallest body that is counted */
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_EFULL);
    m = big(K_MSG, 64); /* inline bodies are left to the message bound */
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    ck_assert_ptr_null(m);
    drive(&f, &c.msgs, 2);
    for (int i = 0; i < 16; i++) {
        m = big(K_MSG, 64 << 10);
        ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    }
    m = big(K_MSG, 65);
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_EFULL);
    /* system messages and completions are exempt */
    m = big(K_MSG, 64 << 10);
    m->ptr = &c;
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    drive(&f, &c.msgs, 19);
    rtf_stop(&f);
}
END_TEST

/* Many actors, each within its own mailbox bound, must not add up: the
 * network budget bounds them together. */
#define NSINKS 64
START_TEST(test_network_budget_bounds_many_mailboxes_rss_under_40mib)
{
    rt_fixture f;
    troupe_runtime_opts o = {.net_bytes = 16 * MiB};
    start(&f, &o);
    static troupe_addr a[NSINKS];
    for (int i = 0; i < NSINKS; i++)
        a[i] = spawn0(&f, &sink_def);
    uint64_t base = rss_bytes();
    int ok = 0;
    troupe_err e = TROUPE_OK;
    for (int i = 0; i < 50001; i++) {
        troupe_msg *m = big(K_MSG, 64 << 10);
        m->to = a[i % NSINKS];
        m->from = (troupe_addr){PEER, 1, 1};
        e = troupe_runtime_deliver(f.rt, &m);
        if (e != TROUPE_OK || rss_bytes() - base > FLOOD_GUARD)
            break;
        ok++;
    }
    ck_assert_err(e, TROUPE_EFULL);
    uint64_t per = (64 << 10) + sizeof(troupe__msg);
    ck_assert_uint_le((uint64_t)ok * per, 16 * MiB);
    ck_assert_uint_gt((uint64_t)(ok + 1) * per, 16 * MiB);
    uint64_t grew = rss_bytes() - base;
    ck_assert_msg(grew < 40 * MiB, "RSS grew %llu MiB",
                  (unsigned long long)(grew / MiB));
    troupe_runtime_stats st;
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.net_bytes, (uint64_t)ok * per);
    ck_assert_uint_eq(st.remote_refused_full, 1);
    /* local sends are not the network's: they still pass */
    troupe_msg *m = big(K_MSG, 64 << 10);
    ck_assert_ok(troupe_runtime_send(f.rt, a[0], &m));
    drive(&f, &c.msgs, ok + 1);
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.net_bytes, 0);
    m = big(K_MSG, 64 << 10);
    m->to = a[1];
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    rtf_stop(&f);
}
END_TEST

/* ---- the worker pool ---- */

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static _Atomic int gated;

static void
gate_set(bool open)
{
    pthread_mutex_lock(&gate_mu);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static void
gate_wait(void)
{
    atomic_fetch_add(&gated, 1);
    pthread_mutex_lock(&gate_mu);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void
run_gated(void *arg)
{
    (void)arg;
    gate_wait();
    atomic_fetch_add(&c.runs, 1);
}

static void
run_plain(void *arg)
{
    (void)arg;
    atomic_fetch_add(&c.runs, 1);
}

/* A job that holds a 1 MiB buffer (its argument) until the gate opens. */
static void
run_holding(void *arg)
{
    (void)arg;
    gate_wait();
}

static void
drop_count(void *arg)
{
    (void)arg;
    atomic_fetch_add(&c.drops, 1);
}

static void
drop_free(void *arg)
{
    free(arg);
    atomic_fetch_add(&c.drops, 1);
}

static troupe_err
h_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    free(m->ptr);
    atomic_fetch_add(&c.done, 1);
    return TROUPE_OK;
}

/* What K_FLOOD does and what it saw. */
static struct {
    int mode; /* 0: a gated job then plain ones; 1: 1 MiB holders until
                 EFULL; 2: gated host-lane jobs; 3: plain storage jobs */
    int n;
    int accepted;
    troupe_err last;
    uint64_t base_rss;
} fl;

static troupe_err
h_flood(troupe_actor *self, void *st, const troupe_msg *m)
{
    fl.accepted = 0;
    fl.last = TROUPE_OK;
    for (int i = 0; i < fl.n; i++) {
        troupe_err e;
        if (fl.mode == 1) {
            unsigned char *b = malloc(MiB);
            ck_assert_ptr_nonnull(b);
            memset(b, 1, MiB); /* resident */
            e = troupe_work_submit_in(self, TROUPE_LANE_STORAGE, MiB,
                                      run_holding, b, K_DONE, drop_free);
            if (e != TROUPE_OK)
                free(b);
        } else if (fl.mode == 2) {
            e = troupe_work_submit_in(self, TROUPE_LANE_HOST, 0, run_gated,
                                      NULL, K_DONE, drop_count);
        } else if (fl.mode == 3) {
            e = troupe_work_submit(self, run_plain, NULL, K_DONE, drop_count);
        } else {
            e = troupe_work_submit(self, i == 0 ? run_gated : run_plain, NULL,
                                   K_DONE, drop_count);
        }
        if (e != TROUPE_OK) {
            fl.last = e;
            if (fl.mode == 1)
                break;
            continue;
        }
        fl.accepted++;
        if (fl.mode == 1 && rss_bytes() - fl.base_rss > FLOOD_GUARD)
            break;
    }
    atomic_fetch_add(&c.marks, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn pool_h[K_N] = {
    [K_FLOOD] = h_flood, [K_DONE] = h_done, [K_MARK] = h_mark};
static const troupe_actor_def pool_def = {
    .name = "pool", .handlers = pool_h, .n_handlers = K_N};

static void
flood(rt_fixture *f, troupe_addr a, int mode, int n)
{
    fl.mode = mode;
    fl.n = n;
    fl.base_rss = rss_bytes();
    int want = atomic_load(&c.marks) + 1;
    troupe_msg *m = mk(K_FLOOD);
    ck_assert_ok(troupe_runtime_send(f->rt, a, &m));
    drive(f, &c.marks, want);
}

START_TEST(test_work_lane_job_bound_refuses_with_efull_then_recovers)
{
    rt_fixture f;
    troupe_runtime_opts o = {.work_max_jobs = 16};
    start(&f, &o);
    gate_set(false);
    troupe_addr a = spawn0(&f, &pool_def);
    flood(&f, a, 0, 100);
    ck_assert_int_eq(fl.accepted, 16);
    ck_assert_err(fl.last, TROUPE_EFULL);
    troupe_runtime_stats st;
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.work_refused, 84);
    gate_set(true);
    drive(&f, &c.done, 16);
    ck_assert_int_eq(atomic_load(&c.runs), 16);
    flood(&f, a, 0, 16); /* room again */
    ck_assert_int_eq(fl.accepted, 16);
    drive(&f, &c.done, 32);
    rtf_stop(&f);
}
END_TEST

/* Jobs that each hold 1 MiB: a flood of them (a GET flood of 1 MiB values
 * once reached 5.4 GB) stops at the lane's byte budget. */
START_TEST(test_work_byte_budget_stops_1mib_flood_rss_under_40mib)
{
    rt_fixture f;
    troupe_runtime_opts o = {.work_max_bytes = 16 * MiB};
    start(&f, &o);
    gate_set(false);
    troupe_addr a = spawn0(&f, &pool_def);
    flood(&f, a, 1, 5000);
    ck_assert_err(fl.last, TROUPE_EFULL);
    ck_assert_int_eq(fl.accepted, 16);
    uint64_t grew = rss_bytes() - fl.base_rss;
    ck_assert_msg(grew < 40 * MiB, "RSS grew %llu MiB",
                  (unsigned long long)(grew / MiB));
    gate_set(true);
    drive(&f, &c.done, 16);
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&c.drops), 0);
}
END_TEST

static int host_done_calls;
static void
host_done(void *arg, troupe_runtime *rt)
{
    (void)arg;
    (void)rt;
    host_done_calls++;
}

static bool
cancelled_n(void *arg)
{
    troupe_runtime_stats st;
    troupe_runtime_stats_get(((rt_fixture *)arg)->rt, &st);
    return st.work_cancelled >= 1000;
}

/* A backlog at shutdown is cancelled through drop, not run: shutdown
 * waits for the job that runs, not for the queue. */
START_TEST(test_shutdown_cancels_unstarted_actor_jobs_through_drop)
{
    rt_fixture f;
    start(&f, NULL);
    gate_set(false);
    host_done_calls = 0;
    atomic_store(&gated, 0);
    troupe_addr a = spawn0(&f, &pool_def);
    flood(&f, a, 0, 1001); /* the first blocks the only worker */
    ck_assert_int_eq(fl.accepted, 1001);
    drive(&f, &gated, 1);
    ck_assert_ok(troupe_runtime_work(f.rt, run_plain, host_done, NULL));
    ck_assert_ok(troupe_runtime_shutdown(f.rt, rtf_shutdown_cb, &f));
    ck_assert(ts_run_until(&f.loop, cancelled_n, &f, 10000));
    ck_assert_int_eq(atomic_load(&c.drops), 1000);
    ck_assert_int_eq(atomic_load(&c.runs), 0);
    gate_set(true);
    ck_assert(ts_run_until(&f.loop, rtf_shutdown_done, &f, 10000));
    troupe_runtime_destroy(f.rt);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&f.loop), 0);
    /* the running job finished (its completion dropped: its actor had
     * gone), and the adapter job still ran and called back once */
    ck_assert_int_eq(atomic_load(&c.runs), 2);
    ck_assert_int_eq(atomic_load(&c.drops), 1001);
    ck_assert_int_eq(host_done_calls, 1);
    ck_assert_int_eq(atomic_load(&c.done), 0);
}
END_TEST

static _Atomic int finished_in_fn;
static void
run_finishing(void *arg)
{
    atomic_fetch_add((_Atomic int *)arg, 1);
}

/* A job with no completion: fn finishes it and nothing runs on scheduler
 * 0. One queued before a shutdown still runs, as adapter jobs do. */
START_TEST(test_null_done_job_runs_and_runs_at_shutdown)
{
    rt_fixture f;
    start(&f, NULL);
    gate_set(false);
    atomic_store(&gated, 0);
    atomic_store(&finished_in_fn, 0);
    ck_assert_ok(troupe_runtime_work_in(f.rt, TROUPE_LANE_STORAGE, 0,
                                        run_finishing, NULL, &finished_in_fn));
    drive(&f, &finished_in_fn, 1);
    /* the only worker blocked, the next NULL-done job queued behind it */
    ck_assert_ok(troupe_runtime_work(f.rt, run_gated, NULL, NULL));
    drive(&f, &gated, 1);
    ck_assert_ok(
        troupe_runtime_work(f.rt, run_finishing, NULL, &finished_in_fn));
    ck_assert_ok(troupe_runtime_shutdown(f.rt, rtf_shutdown_cb, &f));
    ck_assert_int_eq(atomic_load(&finished_in_fn), 1);
    gate_set(true);
    ck_assert(ts_run_until(&f.loop, rtf_shutdown_done, &f, 10000));
    ck_assert_int_eq(atomic_load(&finished_in_fn), 2);
    ck_assert_int_eq(atomic_load(&c.runs), 1);
    troupe_runtime_destroy(f.rt);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&f.loop), 0);
}
END_TEST

/* A host job that blocks does not hold up storage work. */
START_TEST(test_blocked_host_lane_never_delays_storage_lane)
{
    rt_fixture f;
    troupe_runtime_opts o = {.host_workers = 1};
    start(&f, &o);
    gate_set(false);
    atomic_store(&gated, 0);
    troupe_addr a = spawn0(&f, &pool_def);
    flood(&f, a, 2, 1); /* a host job that blocks its lane's one thread */
    ck_assert_int_eq(fl.accepted, 1);
    drive(&f, &gated, 1);
    flood(&f, a, 3, 8); /* storage jobs complete meanwhile */
    ck_assert_int_eq(fl.accepted, 8);
    drive(&f, &c.done, 8);
    ck_assert_int_eq(atomic_load(&c.runs), 8);
    gate_set(true);
    drive(&f, &c.done, 9);
    rtf_stop(&f);
}
END_TEST

static troupe_err
h_badlane(troupe_actor *self, void *st, const troupe_msg *m)
{
    ck_assert_err(troupe_work_submit_in(self, (troupe_lane)2, 0, run_plain,
                                        NULL, K_DONE, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_work_submit_in(NULL, TROUPE_LANE_HOST, 0, run_plain,
                                        NULL, K_DONE, NULL),
                  TROUPE_EINVAL);
    atomic_fetch_add(&c.marks, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn badlane_h[K_N] = {[K_MARK] = h_badlane};
static const troupe_actor_def badlane_def = {
    .name = "badlane", .handlers = badlane_h, .n_handlers = K_N};

START_TEST(test_budget_and_lane_bad_args)
{
    troupe_runtime *rt = NULL;
    troupe_runtime_opts bad = {.host_workers = 257};
    ck_assert_err(troupe_runtime_create(&rt, &bad), TROUPE_EINVAL);
    troupe_runtime_stats st;
    memset(&st, 0xff, sizeof(st));
    troupe_runtime_stats_get(NULL, &st);
    ck_assert_uint_eq(st.net_bytes, 0);
    ck_assert_uint_eq(st.work_refused, 0);
    troupe_runtime_stats_get(NULL, NULL);
    rt_fixture f;
    start(&f, NULL);
    ck_assert_err(troupe_runtime_work_in(f.rt, (troupe_lane)7, 0, run_plain,
                                         host_done, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_work_in(NULL, TROUPE_LANE_HOST, 0, run_plain,
                                         host_done, NULL),
                  TROUPE_EINVAL);
    spawn0(&f, &badlane_def); /* its marker runs the checks */
    rtf_stop(&f);
}
END_TEST

Suite *
budget_suite(void)
{
    Suite *s = suite_create("budget");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_mailbox_byte_bound_stops_64k_flood_rss_under_96mib);
    tcase_add_test(
        tc,
        test_mailbox_bytes_of_a_def_override_and_one_big_message_passes_alone);
    tcase_add_test(tc,
                   test_network_budget_bounds_many_mailboxes_rss_under_40mib);
    tcase_add_test(tc,
                   test_work_lane_job_bound_refuses_with_efull_then_recovers);
    tcase_add_test(tc, test_work_byte_budget_stops_1mib_flood_rss_under_40mib);
    tcase_add_test(tc, test_shutdown_cancels_unstarted_actor_jobs_through_drop);
    tcase_add_test(tc, test_null_done_job_runs_and_runs_at_shutdown);
    tcase_add_test(tc, test_blocked_host_lane_never_delays_storage_lane);
    tcase_add_test(tc, test_budget_and_lane_bad_args);
    suite_add_tcase(s, tc);
    return s;
}
