/* Runtime lifecycle: standalone threads, shutdown rules, load from several
 * threads, many actors. */
#include <pthread.h>
#include <stdatomic.h>

#include "rtest.h"

enum { K_HIT, K_PING, K_PONG, K_N };

static _Atomic long hits;

static troupe_err
h_hit(troupe_actor *self, void *s, const troupe_msg *m)
{
    atomic_fetch_add(&hits, 1);
    return TROUPE_OK;
}

typedef struct pp_state {
    troupe_addr peer;
    long left;
} pp_state;

static troupe_err
h_ping(troupe_actor *self, void *s, const troupe_msg *m)
{
    pp_state *p = s;
    if (troupe_addr_is_none(p->peer))
        p->peer = m->from;
    atomic_fetch_add(&hits, 1);
    troupe_msg *r = mk(K_PONG);
    return troupe_send(self, m->from, &r);
}

static troupe_err
h_pong(troupe_actor *self, void *s, const troupe_msg *m)
{
    pp_state *p = s;
    if (--p->left <= 0)
        return TROUPE_OK;
    troupe_msg *r = mk(K_PING);
    return troupe_send(self, m->from, &r);
}

static const troupe_handler_fn hs[K_N] = {
    [K_HIT] = h_hit, [K_PING] = h_ping, [K_PONG] = h_pong};
static const troupe_actor_def def = {.name = "lc",
                                     .state_size = sizeof(pp_state),
                                     .handlers = hs,
                                     .n_handlers = K_N};

static bool
hits_at_least(void *arg)
{
    return atomic_load(&hits) >= *(long *)arg;
}

START_TEST(test_standalone_ping_pong_across_schedulers_then_shutdown_wait)
{
    troupe_runtime *rt;
    troupe_runtime_opts o = {.schedulers = 2, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    ck_assert_uint_eq(troupe_runtime_schedulers(rt), 2);
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    troupe_addr a, b;
    so.scheduler = 0;
    ck_assert_ok(troupe_actor_spawn(rt, &def, &so, &a));
    so.scheduler = 1;
    ck_assert_ok(troupe_actor_spawn(rt, &def, &so, &b));
    /* b pings a 1000 times; a answers each. b's "left" starts at 0, so
     * every pong is answered with another ping only while left > 0: seed
     * it by sending b a PONG from a. */
    for (int i = 0; i < 1000; i++) {
        troupe_msg *m = mk(K_PING);
        m->from = b;
        ck_assert_ok(troupe_runtime_send(rt, a, &m));
    }
    long want = 1000;
    ck_assert(ts_wait_until(hits_at_least, &want, 10000));
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_msg *m = mk(K_HIT);
    ck_assert_err(troupe_runtime_send(rt, a, &m), TROUPE_ECLOSED);
    troupe_runtime_destroy(rt);
}
END_TEST

START_TEST(test_shutdown_rejects_new_work_and_second_shutdown)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &def, NULL, &a));
    ck_assert_ok(troupe_runtime_shutdown(f.rt, rtf_shutdown_cb, &f));
    ck_assert_err(troupe_runtime_shutdown(f.rt, rtf_shutdown_cb, &f),
                  TROUPE_ESTATE);
    troupe_addr b;
    ck_assert_err(troupe_actor_spawn(f.rt, &def, NULL, &b), TROUPE_ECLOSED);
    troupe_msg *m = mk(K_HIT);
    ck_assert_err(troupe_runtime_send(f.rt, a, &m), TROUPE_ECLOSED);
    m = mk(K_HIT);
    ck_assert_err(troupe_runtime_ask(f.rt, a, &m, 10, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert(ts_run_until(&f.loop, rtf_shutdown_done, &f, 10000));
    ck_assert_int_eq(f.shutdown_fired, 1);
    troupe_runtime_destroy(f.rt);
    ck_assert_int_eq(uv_loop_close(&f.loop), 0);
}
END_TEST

struct sender_arg {
    troupe_runtime *rt;
    troupe_addr *targets;
    int n_targets;
    int per_thread;
};

static void *
sender(void *p)
{
    struct sender_arg *a = p;
    for (int i = 0; i < a->per_thread; i++) {
        troupe_msg *m = mk(K_HIT);
        troupe_err e;
        while ((e = troupe_runtime_send(a->rt, a->targets[i % a->n_targets],
                                        &m)) == TROUPE_EFULL)
            m = mk(K_HIT); /* backpressure: retry */
        ck_assert_ok(e);
    }
    return NULL;
}

START_TEST(test_many_threads_send_to_actors_on_all_schedulers)
{
    troupe_runtime *rt;
    troupe_runtime_opts o = {.schedulers = 3, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    troupe_addr t[6];
    for (int i = 0; i < 6; i++)
        ck_assert_ok(troupe_actor_spawn(rt, &def, NULL, &t[i]));
    pthread_t th[4];
    struct sender_arg sa = {rt, t, 6, 20000};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, sender, &sa);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    long want = 80000;
    ck_assert(ts_wait_until(hits_at_least, &want, 20000));
    ck_assert_int_eq(atomic_load(&hits), 80000);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
}
END_TEST

START_TEST(test_ten_thousand_actors_spawn_receive_and_stop)
{
    rt_fixture f;
    rtf_start(&f, 2);
    for (int i = 0; i < 10000; i++) {
        troupe_addr a;
        ck_assert_ok(troupe_actor_spawn(f.rt, &def, NULL, &a));
        troupe_msg *m = mk(K_HIT);
        ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    }
    long want = 10000;
    ck_assert(ts_run_until(&f.loop, hits_at_least, &want, 20000));
    rtf_stop(&f);
}
END_TEST

START_TEST(test_embedded_actor_runs_only_when_host_drives_loop)
{
    rt_fixture f;
    rtf_start(&f, 1);
    troupe_addr a;
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.scheduler = 0;
    ck_assert_ok(troupe_actor_spawn(f.rt, &def, &so, &a));
    troupe_msg *m = mk(K_HIT);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    ck_assert_int_eq(atomic_load(&hits), 0); /* host has not run its loop */
    long want = 1;
    ck_assert(ts_run_until(&f.loop, hits_at_least, &want, 5000));
    ck_assert_ptr_eq(troupe_runtime_loop(f.rt, 0), &f.loop);
    rtf_stop(&f);
}
END_TEST

START_TEST(test_restarted_runtime_does_not_reuse_old_addresses)
{
    troupe_addr first = TROUPE_ADDR_NONE;
    for (int round = 0; round < 2; round++) {
        rt_fixture f;
        rtf_start(&f, 1);
        troupe_addr a;
        ck_assert_ok(troupe_actor_spawn(f.rt, &def, NULL, &a));
        if (round == 0)
            first = a;
        else /* same slot, but not the same address (random gen base) */
            ck_assert(a.slot == first.slot && a.gen != first.gen);
        rtf_stop(&f);
    }
}
END_TEST

/* troupe_runtime_post: fn runs on scheduler 0 (the host's loop here),
 * never inside the call, once per post, in post order per thread; calls
 * posted before the shutdown closed scheduler 0 still run; after, ECLOSED. */
typedef struct post_log {
    uv_thread_t loop_thread;
    int order[64];
    atomic_int n;
    atomic_int wrong_thread;
} post_log;

static post_log plog;

static void
post_fn(void *arg, troupe_runtime *rt)
{
    (void)rt;
    uv_thread_t self = uv_thread_self();
    if (!uv_thread_equal(&self, &plog.loop_thread))
        atomic_fetch_add(&plog.wrong_thread, 1);
    int i = atomic_fetch_add(&plog.n, 1);
    if (i < 64)
        plog.order[i] = (int)(intptr_t)arg;
}

static void
post_from_thread(void *arg)
{
    troupe_runtime *rt = arg;
    for (intptr_t i = 32; i < 64; i++)
        ck_assert_ok(troupe_runtime_post(rt, post_fn, (void *)i));
}

static bool
posts_at_least(void *arg)
{
    return atomic_load(&plog.n) >= *(int *)arg;
}

START_TEST(test_post_runs_on_scheduler0_once_in_order)
{
    rt_fixture f;
    rtf_start(&f, 2);
    memset(&plog, 0, sizeof(plog));
    plog.loop_thread = uv_thread_self(); /* the host drives the loop here */
    for (intptr_t i = 0; i < 32; i++)
        ck_assert_ok(troupe_runtime_post(f.rt, post_fn, (void *)i));
    ck_assert_int_eq(atomic_load(&plog.n), 0); /* never inside the call */
    uv_thread_t th;
    ck_assert_int_eq(uv_thread_create(&th, post_from_thread, f.rt), 0);
    uv_thread_join(&th);
    int want = 64;
    ck_assert(ts_run_until(&f.loop, posts_at_least, &want, 10000));
    uv_run(&f.loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(atomic_load(&plog.n), 64); /* once each */
    ck_assert_int_eq(atomic_load(&plog.wrong_thread), 0);
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(plog.order[i], i);
    ck_assert_err(troupe_runtime_post(NULL, post_fn, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_post(f.rt, NULL, NULL), TROUPE_EINVAL);
    /* posted, then shut down before the loop ran it: it still runs */
    ck_assert_ok(troupe_runtime_post(f.rt, post_fn, (void *)64));
    rtf_stop(&f);
    ck_assert_int_eq(atomic_load(&plog.n), 65);
}
END_TEST

Suite *
lifecycle_suite(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(
        tc, test_standalone_ping_pong_across_schedulers_then_shutdown_wait);
    tcase_add_test(tc, test_shutdown_rejects_new_work_and_second_shutdown);
    tcase_add_test(tc, test_many_threads_send_to_actors_on_all_schedulers);
    tcase_add_test(tc, test_ten_thousand_actors_spawn_receive_and_stop);
    tcase_add_test(tc, test_embedded_actor_runs_only_when_host_drives_loop);
    tcase_add_test(tc, test_restarted_runtime_does_not_reuse_old_addresses);
    tcase_add_test(tc, test_post_runs_on_scheduler0_once_in_order);
    suite_add_tcase(s, tc);
    return s;
}
