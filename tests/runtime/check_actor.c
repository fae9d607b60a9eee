/* Actors: spawn, delivery, order, registry, mailbox bound, batches,
 * monitors, supervision, stop, timers, worker pool. */
#include <pthread.h>
#include <stdatomic.h>

#include "rtest.h"

enum { K_REC, K_FAIL, K_STOPSELF, K_DOWN, K_TICK, K_DONE, K_NKINDS };

#define LOGN 4096
static struct {
    _Atomic int n;
    uint64_t v[LOGN];
    uint32_t who[LOGN];
    troupe_err err[LOGN];
    _Atomic int inits, stops;
    troupe_err stop_reason;
    _Atomic int stop_cbs;
    _Atomic int drops;
    pthread_t work_thread;
} lg;

typedef struct rec_state {
    uint32_t id;
    uint32_t seen;
} rec_state;

/* Entries are written under a lock and published by the counter, so the
 * test thread may read entry i once n > i (actors run on other threads). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void
log_add(uint32_t who, uint64_t v, troupe_err e)
{
    pthread_mutex_lock(&log_lock);
    int i = atomic_load(&lg.n);
    if (i < LOGN) {
        lg.v[i] = v;
        lg.who[i] = who;
        lg.err[i] = e;
    }
    atomic_store(&lg.n, i + 1);
    pthread_mutex_unlock(&log_lock);
}

static troupe_err
rec_init(troupe_actor *self, void *st, void *arg)
{
    rec_state *s = st;
    ck_assert_uint_eq(s->seen, 0); /* state is zeroed, also on restart */
    s->id = (uint32_t)(uintptr_t)arg;
    atomic_fetch_add(&lg.inits, 1);
    return TROUPE_OK;
}

static void
rec_stop(troupe_actor *self, void *st, troupe_err reason)
{
    atomic_fetch_add(&lg.stops, 1);
    lg.stop_reason = reason;
    log_add(((rec_state *)st)->id, 9999, reason);
}

static troupe_err
h_rec(troupe_actor *self, void *st, const troupe_msg *m)
{
    rec_state *s = st;
    s->seen++;
    log_add(s->id, msgv(m), m->err);
    return TROUPE_OK;
}

static troupe_err
h_fail(troupe_actor *self, void *st, const troupe_msg *m)
{
    return TROUPE_EIO;
}

static troupe_err
h_stopself(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_self_stop(self);
    return TROUPE_OK;
}

static troupe_err
h_down(troupe_actor *self, void *st, const troupe_msg *m)
{
    log_add(m->from.slot, 7777, m->err);
    return TROUPE_OK;
}

static const troupe_handler_fn rec_handlers[K_NKINDS] = {[K_REC] = h_rec,
                                                         [K_FAIL] = h_fail,
                                                         [K_STOPSELF] =
                                                             h_stopself,
                                                         [K_DOWN] = h_down,
                                                         [K_TICK] = h_rec};

static const troupe_actor_def rec_def = {
    .name = "rec",
    .state_size = sizeof(rec_state),
    .init = rec_init,
    .stop = rec_stop,
    .handlers = rec_handlers,
    .n_handlers = K_NKINDS,
    .remote_kinds = TROUPE_KIND_BIT(K_REC),
};

static troupe_addr
spawn_rec(troupe_runtime *rt, const troupe_actor_def *d, uint32_t id)
{
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = (void *)(uintptr_t)id;
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(rt, d, &o, &a));
    return a;
}

static int want_n;
static bool
log_has_n(void *arg)
{
    (void)arg;
    return atomic_load(&lg.n) >= want_n;
}

static void
drive_until_log(rt_fixture *f, int n)
{
    want_n = n;
    ck_assert_msg(ts_run_until(&f->loop, log_has_n, NULL, 5000),
                  "log has %d entries, want %d", atomic_load(&lg.n), n);
}

static void
send_v(troupe_runtime *rt, troupe_addr to, uint32_t kind, uint64_t v)
{
    troupe_msg *m = mkv(kind, v);
    ck_assert_ok(troupe_runtime_send(rt, to, &m));
    ck_assert_ptr_null(m);
}

START_TEST(test_spawn_send_handler_sees_messages_in_order)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &rec_def, 1);
    for (uint64_t i = 0; i < 100; i++)
        send_v(f.rt, a, K_REC, i);
    drive_until_log(&f, 100);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(lg.v[i], (uint64_t)i);
    ck_assert_int_eq(atomic_load(&lg.inits), 1);
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&lg.stops), 1);
}
END_TEST

START_TEST(
    test_send_to_stopped_actor_fails_edead_and_stale_gen_never_reaches_new)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &rec_def, 1);
    ck_assert_ok(troupe_actor_stop(f.rt, a, NULL, NULL));
    drive_until_log(&f, 1); /* stop hook logged */
    troupe_msg *m = mk(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_EDEAD);
    ck_assert_ptr_null(m); /* consumed on failure too */
    /* The slot is reused with a new generation. */
    troupe_addr b = spawn_rec(f.rt, &rec_def, 2);
    ck_assert_uint_eq(b.slot, a.slot);
    ck_assert_uint_ne(b.gen, a.gen);
    m = mk(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_EDEAD);
    troupe_addr never = {1, 12345, 1};
    m = mk(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, never, &m), TROUPE_EDEAD);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_bad_args_rejected)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a;
    ck_assert_err(troupe_actor_spawn(NULL, &rec_def, NULL, &a), TROUPE_EINVAL);
    ck_assert_err(troupe_actor_spawn(f.rt, NULL, NULL, &a), TROUPE_EINVAL);
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, NULL, NULL),
                  TROUPE_EINVAL);
    troupe_actor_def bad = {.n_handlers = 3};
    ck_assert_err(troupe_actor_spawn(f.rt, &bad, NULL, &a), TROUPE_EINVAL);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.scheduler = 5;
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, &o, &a), TROUPE_EINVAL);
    o = TROUPE_SPAWN_OPTS_INIT;
    o.policy = (troupe_restart)9;
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, &o, &a), TROUPE_EINVAL);
    o = TROUPE_SPAWN_OPTS_INIT;
    o.name = "";
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, &o, &a), TROUPE_EINVAL);
    o = TROUPE_SPAWN_OPTS_INIT;
    o.supervisor = (troupe_addr){1, 999, 3};
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, &o, &a), TROUPE_EDEAD);
    troupe_msg *m = mk(0);
    ck_assert_err(troupe_runtime_send(NULL, a, &m), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    m = mk(0);
    ck_assert_err(troupe_runtime_send(f.rt, TROUPE_ADDR_NONE, &m),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_send(f.rt, a, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_actor_stop(NULL, a, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_actor_stop(f.rt, TROUPE_ADDR_NONE, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_registry_add(f.rt, NULL, a), TROUPE_EINVAL);
    ck_assert_err(troupe_registry_lookup(f.rt, "x", NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_registry_remove(NULL, "x"), TROUPE_EINVAL);
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[299] = 0;
    ck_assert_err(troupe_registry_lookup(f.rt, longname, &a), TROUPE_EINVAL);
    ck_assert_err(troupe_send(NULL, a, NULL), TROUPE_EINVAL);
    m = mk(0);
    ck_assert_err(troupe_send(NULL, a, &m), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_err(troupe_timer_start(NULL, 0, 1, 0, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_timer_cancel(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_monitor(NULL, a, 0), TROUPE_EINVAL);
    ck_assert_err(troupe_work_submit(NULL, NULL, NULL, 0, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_work(f.rt, NULL, NULL, NULL), TROUPE_EINVAL);
    ck_assert_ptr_null(troupe_actor_runtime(NULL));
    ck_assert(troupe_addr_is_none(troupe_self(NULL)));
    ck_assert_ptr_null(troupe_runtime_loop(f.rt, 7));
    ck_assert_uint_eq(troupe_runtime_schedulers(NULL), 0);
    troupe_runtime *rt2;
    troupe_runtime_opts bado = {.schedulers = 1000};
    ck_assert_err(troupe_runtime_create(&rt2, &bado), TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_create(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_shutdown(NULL, NULL, NULL), TROUPE_EINVAL);
    /* Embedded runtimes cannot block in shutdown_wait. */
    ck_assert_err(troupe_runtime_shutdown_wait(f.rt), TROUPE_ESTATE);
    troupe_runtime_destroy(NULL);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_registry_names_die_with_their_actor)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.name = "svc";
    troupe_addr a, b, got;
    ck_assert_ok(troupe_actor_spawn(f.rt, &rec_def, &o, &a));
    ck_assert_ok(troupe_registry_lookup(f.rt, "svc", &got));
    ck_assert(troupe_addr_eq(got, a));
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, &o, &b), TROUPE_EEXIST);
    ck_assert_err(troupe_registry_lookup(f.rt, "nope", &got), TROUPE_ENOENT);
    ck_assert_err(troupe_registry_remove(f.rt, "nope"), TROUPE_ENOENT);
    ck_assert_ok(troupe_actor_stop(f.rt, a, NULL, NULL));
    drive_until_log(&f, 1);
    ck_assert_err(troupe_registry_lookup(f.rt, "svc", &got), TROUPE_ENOENT);
    ck_assert_ok(troupe_actor_spawn(f.rt, &rec_def, &o, &b));
    ck_assert_ok(troupe_registry_lookup(f.rt, "svc", &got));
    ck_assert(troupe_addr_eq(got, b));
    ck_assert_ok(troupe_registry_remove(f.rt, "svc"));
    ck_assert_err(troupe_registry_lookup(f.rt, "svc", &got), TROUPE_ENOENT);
    rtf_stop(&f);
}
END_TEST

static const troupe_actor_def small_box_def = {
    .name = "small",
    .state_size = sizeof(rec_state),
    .handlers = rec_handlers,
    .n_handlers = K_NKINDS,
    .mailbox_cap = 4,
};

START_TEST(test_mailbox_bound_rejects_with_efull_then_accepts_after_drain)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &small_box_def, 1);
    /* The host loop is not running: nothing drains. INIT holds one place
     * but is a system message, so 4 user messages still... fit exactly up
     * to the capacity counted with INIT. */
    int ok = 0;
    troupe_err last = TROUPE_OK;
    for (int i = 0; i < 10; i++) {
        troupe_msg *m = mkv(K_REC, (uint64_t)i);
        last = troupe_runtime_send(f.rt, a, &m);
        if (last == TROUPE_OK)
            ok++;
        else
            break;
    }
    ck_assert_err(last, TROUPE_EFULL);
    ck_assert_int_le(ok, 4);
    ck_assert_int_ge(ok, 3);
    drive_until_log(&f, ok);
    troupe_msg *m = mkv(K_REC, 100);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    drive_until_log(&f, ok + 1);
    ck_assert_uint_eq(lg.v[ok], 100);
    rtf_stop(&f);
}
END_TEST

static const troupe_actor_def batch2_def = {
    .name = "batch2",
    .state_size = sizeof(rec_state),
    .init = rec_init,
    .handlers = rec_handlers,
    .n_handlers = K_NKINDS,
    .batch = 2,
};

START_TEST(test_batch_per_turn_interleaves_busy_actors)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &batch2_def, 1);
    troupe_addr b = spawn_rec(f.rt, &batch2_def, 2);
    drive_until_log(&f, 0);
    ck_assert(ts_run_until(&f.loop, log_has_n, NULL, 100) || 1);
    for (uint64_t i = 0; i < 6; i++)
        send_v(f.rt, a, K_REC, i);
    for (uint64_t i = 0; i < 6; i++)
        send_v(f.rt, b, K_REC, i);
    drive_until_log(&f, 12);
    /* With a batch of 2, neither actor runs more than 2 in a row while
     * the other has work. */
    int run = 1, maxrun = 1;
    for (int i = 1; i < 12; i++) {
        run = lg.who[i] == lg.who[i - 1] ? run + 1 : 1;
        if (run > maxrun)
            maxrun = run;
    }
    ck_assert_int_le(maxrun, 2);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_unknown_kind_goes_to_on_unknown_or_is_dropped)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &rec_def, 1);
    send_v(f.rt, a, 1000, 5); /* no on_unknown: dropped, actor lives */
    send_v(f.rt, a, K_REC, 6);
    drive_until_log(&f, 1);
    ck_assert_uint_eq(lg.v[0], 6);
    troupe_actor_def d = rec_def;
    d.on_unknown = h_rec;
    troupe_addr b = spawn_rec(f.rt, &d, 2);
    send_v(f.rt, b, 1000, 8);
    drive_until_log(&f, 2);
    ck_assert_uint_eq(lg.v[1], 8);
    rtf_stop(&f);
}
END_TEST

/* A watcher actor that monitors its arg address in init. */
static troupe_addr watch_target;
static troupe_err
watcher_init(troupe_actor *self, void *st, void *arg)
{
    ((rec_state *)st)->id = 77;
    troupe_err e = troupe_monitor(self, watch_target, K_DOWN);
    log_add(77, 1, e); /* the MONITOR request is queued at the target */
    return e;
}
static const troupe_actor_def watcher_def = {
    .name = "watcher",
    .state_size = sizeof(rec_state),
    .init = watcher_init,
    .handlers = rec_handlers,
    .n_handlers = K_NKINDS,
};

START_TEST(test_monitor_down_on_stop_and_on_failure_with_reason)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_addr t1 = spawn_rec(f.rt, &rec_def, 1);
    watch_target = t1;
    spawn_rec(f.rt, &watcher_def, 0);
    drive_until_log(&f, 1); /* watcher's init sent MONITOR */
    troupe_msg *m = mk(K_STOPSELF);
    ck_assert_ok(troupe_runtime_send(f.rt, t1, &m));
    /* stop hook (9999) + DOWN (7777) */
    drive_until_log(&f, 3);
    bool saw_down = false;
    for (int i = 0; i < 3; i++)
        if (lg.v[i] == 7777) {
            saw_down = true;
            ck_assert_uint_eq(lg.who[i], t1.slot);
            ck_assert_err(lg.err[i], TROUPE_OK);
        }
    ck_assert(saw_down);

    atomic_store(&lg.n, 0);
    troupe_addr t2 = spawn_rec(f.rt, &rec_def, 2);
    watch_target = t2;
    spawn_rec(f.rt, &watcher_def, 0);
    drive_until_log(&f, 1);
    m = mk(K_FAIL);
    ck_assert_ok(troupe_runtime_send(f.rt, t2, &m));
    drive_until_log(&f, 3);
    saw_down = false;
    for (int i = 0; i < 3; i++)
        if (lg.v[i] == 7777) {
            saw_down = true;
            ck_assert_err(lg.err[i], TROUPE_EIO);
        }
    ck_assert(saw_down);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_monitor_of_dead_actor_delivers_edead_at_once)
{
    rt_fixture f;
    rtf_start(&f, 1);
    watch_target = (troupe_addr){1, 4242, 9};
    spawn_rec(f.rt, &watcher_def, 0);
    drive_until_log(&f, 2);
    ck_assert_uint_eq(lg.v[1], 7777);
    ck_assert_err(lg.err[1], TROUPE_EDEAD);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_restart_policy_reinits_state_same_address)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.policy = TROUPE_SUPERVISE_RESTART;
    o.max_restarts = 2;
    o.restart_window_ms = 60000;
    o.arg = (void *)(uintptr_t)5;
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &rec_def, &o, &a));
    send_v(f.rt, a, K_REC, 1);
    troupe_msg *m = mk(K_FAIL);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    send_v(f.rt, a, K_REC, 2); /* handled by the restarted incarnation */
    drive_until_log(&f, 3);    /* 1, stop hook, 2 */
    ck_assert_uint_eq(lg.v[0], 1);
    ck_assert_uint_eq(lg.v[1], 9999);
    ck_assert_err(lg.err[1], TROUPE_EIO);
    ck_assert_uint_eq(lg.v[2], 2);
    ck_assert_int_eq(atomic_load(&lg.inits), 2);
    /* Two more failures: the second exceeds max_restarts=2 and stops it. */
    for (int i = 0; i < 2; i++) {
        m = mk(K_FAIL);
        ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    }
    drive_until_log(&f, 5);
    ck_assert_int_eq(atomic_load(&lg.inits), 3);
    m = mk(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_EDEAD);
    rtf_stop(&f);
}
END_TEST

/* A supervisor that spawns an escalating child in init. */
static troupe_addr child_addr;
static troupe_err
sup_init(troupe_actor *self, void *st, void *arg)
{
    ((rec_state *)st)->id = 100;
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.supervisor = troupe_self(self);
    o.policy = (troupe_restart)(uintptr_t)arg;
    o.arg = (void *)(uintptr_t)200;
    o.scheduler = 1;
    return troupe_actor_spawn(troupe_actor_runtime(self), &rec_def, &o,
                              &child_addr);
}
static const troupe_actor_def sup_def = {
    .name = "sup",
    .state_size = sizeof(rec_state),
    .init = sup_init,
    .stop = rec_stop,
    .handlers = rec_handlers,
    .n_handlers = K_NKINDS,
};

static bool
child_known(void *arg)
{
    (void)arg;
    return !troupe_addr_is_none(child_addr) && atomic_load(&lg.inits) >= 1;
}

START_TEST(test_escalate_fails_the_supervisor)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = (void *)(uintptr_t)TROUPE_SUPERVISE_ESCALATE;
    o.scheduler = 0;
    troupe_addr sup;
    child_addr = TROUPE_ADDR_NONE;
    ck_assert_ok(troupe_actor_spawn(f.rt, &sup_def, &o, &sup));
    ck_assert(ts_run_until(&f.loop, child_known, NULL, 5000));
    troupe_msg *m = mk(K_FAIL);
    ck_assert_ok(troupe_runtime_send(f.rt, child_addr, &m));
    drive_until_log(&f, 2); /* child's stop hook, then supervisor's */
    bool sup_failed = false;
    for (int i = 0; i < 2; i++)
        if (lg.who[i] == 100) {
            sup_failed = true;
            ck_assert_err(lg.err[i], TROUPE_EFAILED);
        }
    ck_assert(sup_failed);
    m = mk(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, sup, &m), TROUPE_EDEAD);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_shutdown_stops_children_before_supervisor)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = (void *)(uintptr_t)TROUPE_SUPERVISE_STOP;
    o.scheduler = 0;
    troupe_addr sup;
    child_addr = TROUPE_ADDR_NONE;
    ck_assert_ok(troupe_actor_spawn(f.rt, &sup_def, &o, &sup));
    ck_assert(ts_run_until(&f.loop, child_known, NULL, 5000));
    rtf_stop(&f);
    /* Stop hooks logged in order: child (200) before supervisor (100),
     * although they ran on different schedulers. */
    ck_assert_int_eq(atomic_load(&lg.n), 2);
    ck_assert_uint_eq(lg.who[0], 200);
    ck_assert_uint_eq(lg.who[1], 100);
}
END_TEST

static const troupe_remote_ops fake_remote_ops = {0};

START_TEST(test_more_bad_args_and_remote_without_transport)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &rec_def, 1);
    ck_assert_uint_eq(troupe_runtime_node_id(NULL), 0);
    ck_assert_uint_eq(troupe_runtime_node_id(f.rt), 1);
    ck_assert_ptr_null(troupe_runtime_loop(NULL, 0));
    ck_assert_ptr_null(troupe_actor_loop(NULL));
    troupe_self_stop(NULL);
    troupe_runtime_set_remote(NULL, &fake_remote_ops, NULL);
    /* deliver: only messages for this node, never local-only payloads */
    troupe_msg *m = mk(K_REC);
    ck_assert_err(troupe_runtime_deliver(NULL, &m), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_err(troupe_runtime_deliver(f.rt, NULL), TROUPE_EINVAL);
    m = mk(K_REC);
    m->to = (troupe_addr){7, a.slot, a.gen};
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EINVAL);
    m = mk(K_REC);
    m->to = a;
    m->ptr = &f;
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EINVAL);
    /* internal flags from the wire are stripped, the message delivered */
    m = mkv(K_REC, 5);
    m->to = a;
    m->flags = 0xffffffffu & ~(uint32_t)TROUPE_MSG_REPLY;
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    drive_until_log(&f, 1);
    ck_assert_uint_eq(lg.v[0], 5);
    /* another node with no transport installed */
    m = mk(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, (troupe_addr){9, 1, 1}, &m),
                  TROUPE_EUNREACHABLE);
    ck_assert_ptr_null(m);
    rtf_stop(&f);
}
END_TEST

static _Atomic int payload_drops;
static void
payload_drop(void *p)
{
    ck_assert_ptr_eq(p, &payload_drops);
    atomic_fetch_add(&payload_drops, 1);
}

static troupe_msg *
with_payload(uint32_t kind)
{
    troupe_msg *m = mkv(kind, 1);
    m->ptr = &payload_drops;
    m->ptr_drop = payload_drop;
    return m;
}

START_TEST(test_ptr_payload_released_once_when_discarded_never_when_handled)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &rec_def, 1);
    /* Handled: the handler owns ptr, nothing is dropped. */
    troupe_msg *m = with_payload(K_REC);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    drive_until_log(&f, 1);
    ck_assert_int_eq(atomic_load(&payload_drops), 0);
    /* Queued behind a STOP: discarded unhandled, released once. */
    ck_assert_ok(troupe_actor_stop(f.rt, a, NULL, NULL));
    m = with_payload(K_REC);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    drive_until_log(&f, 2); /* the stop hook */
    ck_assert_int_eq(atomic_load(&payload_drops), 1);
    /* Sent to a dead actor: the failed send releases it. */
    m = with_payload(K_REC);
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_EDEAD);
    ck_assert_int_eq(atomic_load(&payload_drops), 2);
    /* No handler for the kind: dropped, released. */
    troupe_addr b = spawn_rec(f.rt, &rec_def, 2);
    m = with_payload(900);
    ck_assert_ok(troupe_runtime_send(f.rt, b, &m));
    send_v(f.rt, b, K_REC, 3);
    drive_until_log(&f, 3);
    ck_assert_int_eq(atomic_load(&payload_drops), 3);
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&payload_drops), 3);
}
END_TEST

static bool
five_inits(void *arg)
{
    (void)arg;
    return atomic_load(&lg.inits) == 5;
}

START_TEST(test_shutdown_stops_in_reverse_spawn_order)
{
    rt_fixture f;
    rtf_start(&f, 1);
    for (uint32_t i = 1; i <= 5; i++)
        spawn_rec(f.rt, &rec_def, i);
    ck_assert(ts_run_until(&f.loop, five_inits, NULL, 5000));
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&lg.n), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(lg.who[i], (uint32_t)(5 - i));
}
END_TEST

static void
on_stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    atomic_fetch_add(&lg.stop_cbs, 1);
    log_add(a.slot, 5555, TROUPE_OK);
}

static bool
stop_cb_fired(void *arg)
{
    (void)arg;
    return atomic_load(&lg.stop_cbs) > 0;
}

START_TEST(test_stop_drains_queued_then_calls_back_once)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a = spawn_rec(f.rt, &rec_def, 1);
    for (uint64_t i = 0; i < 10; i++)
        send_v(f.rt, a, K_REC, i);
    ck_assert_ok(troupe_actor_stop(f.rt, a, on_stopped, NULL));
    ck_assert_err(troupe_actor_stop(f.rt, a, on_stopped, NULL), TROUPE_ESTATE);
    ck_assert(ts_run_until(&f.loop, stop_cb_fired, NULL, 5000));
    /* 10 messages, the stop hook, then the callback. */
    ck_assert_int_eq(atomic_load(&lg.n), 12);
    for (int i = 0; i < 10; i++)
        ck_assert_uint_eq(lg.v[i], (uint64_t)i);
    ck_assert_uint_eq(lg.v[10], 9999);
    ck_assert_uint_eq(lg.v[11], 5555);
    ck_assert_err(troupe_actor_stop(f.rt, a, on_stopped, NULL), TROUPE_EDEAD);
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&lg.stop_cbs), 1);
}
END_TEST

/* Timers */
typedef struct tick_state {
    uint64_t rep, once;
    int ticks;
} tick_state;

static troupe_err
tick_init(troupe_actor *self, void *st, void *arg)
{
    tick_state *s = st;
    troupe_err e = troupe_timer_start(self, K_TICK, 1, 1, &s->rep);
    if (e == TROUPE_OK)
        e = troupe_timer_start(self, K_DONE, 1, 0, &s->once);
    return e;
}

static troupe_err
tick_h(troupe_actor *self, void *st, const troupe_msg *m)
{
    tick_state *s = st;
    ck_assert_uint_eq(m->corr, s->rep);
    if (++s->ticks == 3) {
        ck_assert_ok(troupe_timer_cancel(self, s->rep));
        ck_assert_err(troupe_timer_cancel(self, s->rep), TROUPE_ENOENT);
        log_add(0, (uint64_t)s->ticks, TROUPE_OK);
    }
    ck_assert_int_le(s->ticks, 3); /* no tick after cancel */
    return TROUPE_OK;
}

static troupe_err
once_h(troupe_actor *self, void *st, const troupe_msg *m)
{
    tick_state *s = st;
    ck_assert_uint_eq(m->corr, s->once);
    /* A fired one-shot timer is no longer armed. */
    ck_assert_err(troupe_timer_cancel(self, s->once), TROUPE_ENOENT);
    log_add(1, 1, TROUPE_OK);
    return TROUPE_OK;
}

static const troupe_handler_fn tick_handlers[K_NKINDS] = {
    [K_TICK] = tick_h, [K_DONE] = once_h};
static const troupe_actor_def tick_def = {
    .name = "tick",
    .state_size = sizeof(tick_state),
    .init = tick_init,
    .handlers = tick_handlers,
    .n_handlers = K_NKINDS,
};

START_TEST(test_timers_repeat_oneshot_and_cancel)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &tick_def, NULL, &a));
    drive_until_log(&f, 2);
    /* Run a while longer: a cancelled timer must not tick again (the
     * handler asserts it). */
    want_n = 3;
    ts_run_until(&f.loop, log_has_n, NULL, 30);
    ck_assert_int_eq(atomic_load(&lg.n), 2);
    rtf_stop(&f);
}
END_TEST

/* Worker pool */
static void
work_fn(void *arg)
{
    lg.work_thread = pthread_self();
    *(int *)arg = 42;
}

static troupe_err
work_init(troupe_actor *self, void *st, void *arg)
{
    static int slot;
    return troupe_work_submit(self, work_fn, &slot, K_DONE, NULL);
}

static troupe_err
work_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    ck_assert(!pthread_equal(pthread_self(), lg.work_thread));
    log_add(0, (uint64_t) * (int *)m->ptr, TROUPE_OK);
    return TROUPE_OK;
}

static const troupe_handler_fn work_handlers[K_NKINDS] = {[K_DONE] = work_done};
static const troupe_actor_def work_def = {
    .name = "work",
    .init = work_init,
    .handlers = work_handlers,
    .n_handlers = K_NKINDS,
};

START_TEST(test_work_runs_off_loop_and_completes_as_message)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &work_def, NULL, &a));
    drive_until_log(&f, 1);
    ck_assert_uint_eq(lg.v[0], 42);
    rtf_stop(&f);
}
END_TEST

static void
drop_fn(void *arg)
{
    atomic_fetch_add(&lg.drops, 1);
}

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static void
gated_work(void *arg)
{
    pthread_mutex_lock(&gate);
    pthread_mutex_unlock(&gate);
}

static troupe_err
gated_init(troupe_actor *self, void *st, void *arg)
{
    troupe_err e = troupe_work_submit(self, gated_work, NULL, K_DONE, drop_fn);
    troupe_self_stop(self);
    return e;
}

static const troupe_actor_def gated_def = {
    .name = "gated",
    .init = gated_init,
    .stop = rec_stop,
    .state_size = sizeof(rec_state),
    .handlers = work_handlers,
    .n_handlers = K_NKINDS,
};

static bool
dropped(void *arg)
{
    (void)arg;
    return atomic_load(&lg.drops) == 1;
}

START_TEST(test_work_for_dead_actor_is_dropped_not_delivered)
{
    rt_fixture f;
    rtf_start(&f, 1);
    pthread_mutex_lock(&gate);
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &gated_def, NULL, &a));
    drive_until_log(&f, 1); /* stopped while its work is blocked */
    pthread_mutex_unlock(&gate);
    ck_assert(ts_run_until(&f.loop, dropped, NULL, 5000));
    rtf_stop(&f);
}
END_TEST

static int host_work_done;
static void
host_done(void *arg, troupe_runtime *rt)
{
    ck_assert_int_eq(*(int *)arg, 42);
    host_work_done++;
}
static bool
host_work_fired(void *arg)
{
    (void)arg;
    return host_work_done == 1;
}

START_TEST(test_runtime_work_completes_on_scheduler0)
{
    rt_fixture f;
    rtf_start(&f, 2);
    static int v;
    ck_assert_ok(troupe_runtime_work(f.rt, work_fn, host_done, &v));
    ck_assert(ts_run_until(&f.loop, host_work_fired, NULL, 5000));
    rtf_stop(&f);
}
END_TEST

START_TEST(test_spawn_oom_fails_cleanly)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a;
    for (long k = 0; k < 2; k++) {
        troupe_alloc_fail_after(k);
        troupe_err e = troupe_actor_spawn(f.rt, &rec_def, NULL, &a);
        troupe_alloc_fail_after(-1);
        ck_assert_err(e, TROUPE_ENOMEM);
    }
    a = spawn_rec(f.rt, &rec_def, 1);
    send_v(f.rt, a, K_REC, 3);
    drive_until_log(&f, 1);
    rtf_stop(&f);
}
END_TEST

static _Atomic int arg_frees;
static void
count_free(void *arg)
{
    ck_assert_ptr_eq(arg, &arg_frees);
    atomic_fetch_add(&arg_frees, 1);
}

START_TEST(test_arg_free_runs_once_after_final_stop_not_on_restart)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.policy = TROUPE_SUPERVISE_RESTART;
    o.arg = &arg_frees;
    o.arg_free = count_free;
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &rec_def, &o, &a));
    troupe_msg *m = mk(K_FAIL);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    send_v(f.rt, a, K_REC, 1);
    drive_until_log(&f, 2); /* stop hook of the failed incarnation, then 1 */
    ck_assert_int_eq(atomic_load(&lg.inits), 2);
    ck_assert_int_eq(atomic_load(&arg_frees), 0);
    ck_assert_ok(troupe_actor_stop(f.rt, a, NULL, NULL));
    drive_until_log(&f, 3);
    ck_assert_int_eq(atomic_load(&arg_frees), 1);
    /* A failed spawn leaves arg with the caller: never freed. */
    o.name = "";
    ck_assert_err(troupe_actor_spawn(f.rt, &rec_def, &o, &a), TROUPE_EINVAL);
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&arg_frees), 1);
}
END_TEST

Suite *
actor_suite(void)
{
    Suite *s = suite_create("actor");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_spawn_send_handler_sees_messages_in_order);
    tcase_add_test(
        tc,
        test_send_to_stopped_actor_fails_edead_and_stale_gen_never_reaches_new);
    tcase_add_test(tc, test_bad_args_rejected);
    tcase_add_test(tc, test_more_bad_args_and_remote_without_transport);
    tcase_add_test(tc, test_registry_names_die_with_their_actor);
    tcase_add_test(
        tc, test_mailbox_bound_rejects_with_efull_then_accepts_after_drain);
    tcase_add_test(tc, test_batch_per_turn_interleaves_busy_actors);
    tcase_add_test(tc, test_unknown_kind_goes_to_on_unknown_or_is_dropped);
    tcase_add_test(tc, test_monitor_down_on_stop_and_on_failure_with_reason);
    tcase_add_test(tc, test_monitor_of_dead_actor_delivers_edead_at_once);
    tcase_add_test(tc, test_restart_policy_reinits_state_same_address);
    tcase_add_test(tc, test_escalate_fails_the_supervisor);
    tcase_add_test(tc, test_shutdown_stops_children_before_supervisor);
    tcase_add_test(tc, test_shutdown_stops_in_reverse_spawn_order);
    tcase_add_test(tc, test_stop_drains_queued_then_calls_back_once);
    tcase_add_test(tc, test_timers_repeat_oneshot_and_cancel);
    tcase_add_test(tc, test_work_runs_off_loop_and_completes_as_message);
    tcase_add_test(tc, test_work_for_dead_actor_is_dropped_not_delivered);
    tcase_add_test(tc, test_runtime_work_completes_on_scheduler0);
    tcase_add_test(tc, test_spawn_oom_fails_cleanly);
    tcase_add_test(
        tc, test_ptr_payload_released_once_when_discarded_never_when_handled);
    tcase_add_test(tc, test_arg_free_runs_once_after_final_stop_not_on_restart);
    suite_add_tcase(s, tc);
    return s;
}
