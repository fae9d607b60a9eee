/*
 * troupe_runtime_sched_stats_wait: actors per scheduler, mailbox depth
 * seen by the walk on the scheduler's own thread, and its refusals.
 *
 * The depth test is deterministic: a gate actor holds scheduler 1 in its
 * turn while messages for a second actor there and the walk are queued;
 * once the gate opens the scheduler's next wakeup moves the second actor
 * to its run queue and runs the walk before any turn (sched.c, on_wake),
 * so the walk sees every message still queued.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "rt.h"
#include "rtest.h"

enum { K_GATE, K_NOTE, K_ASK_SELF, K_NKINDS };

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_int in_gate;
static atomic_int handled;
static atomic_int self_err = -1;
static troupe_runtime *the_rt;

static troupe_err
on_gate(troupe_actor *self, void *state, const troupe_msg *m)
{
    atomic_store(&in_gate, 1);
    pthread_mutex_lock(&gate_mu);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return TROUPE_OK;
}

static troupe_err
on_note(troupe_actor *self, void *state, const troupe_msg *m)
{
    atomic_fetch_add(&handled, 1);
    return TROUPE_OK;
}

/* From a scheduler thread the call is refused: it could wait for itself. */
static troupe_err
on_ask_self(troupe_actor *self, void *state, const troupe_msg *m)
{
    troupe_sched_stats st;
    atomic_store(&self_err,
                 (int)troupe_runtime_sched_stats_wait(the_rt, 0, &st));
    return TROUPE_OK;
}

static const troupe_handler_fn handlers[K_NKINDS] = {on_gate, on_note,
                                                     on_ask_self};
static const troupe_actor_def def = {
    .name = "sstat", .handlers = handlers, .n_handlers = K_NKINDS};

static troupe_runtime *
start(void)
{
    troupe_runtime *rt = NULL;
    troupe_runtime_opts o = {.schedulers = 2, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    the_rt = rt;
    return rt;
}

static void
send_kind(troupe_runtime *rt, troupe_addr a, uint32_t kind)
{
    troupe_msg *m = mk(kind);
    ck_assert_ok(troupe_runtime_send(rt, a, &m));
}

typedef struct walk_arg {
    troupe_runtime *rt;
    troupe_sched_stats st;
    troupe_err e;
} walk_arg;

static void *
walk_main(void *p)
{
    walk_arg *w = p;
    w->e = troupe_runtime_sched_stats_wait(w->rt, 1, &w->st);
    return NULL;
}

static bool
ctl_queued(void *p)
{
    struct sched *s = p;
    pthread_mutex_lock(&s->ctl_lock);
    bool q = s->ctl_head != NULL;
    pthread_mutex_unlock(&s->ctl_lock);
    return q;
}

static bool
gate_entered(void *p)
{
    (void)p;
    return atomic_load(&in_gate) == 1;
}

static bool
all_handled(void *p)
{
    return atomic_load(&handled) == *(int *)p;
}

typedef struct rest_arg {
    troupe_runtime *rt;
    unsigned sched;
    uint32_t actors;
} rest_arg;

/* The scheduler holds `actors` actors (a spawn joins its list on the
 * scheduler's thread, after spawn returned) and nothing queued. */
static bool
at_rest(void *p)
{
    rest_arg *r = p;
    troupe_sched_stats st;
    return troupe_runtime_sched_stats_wait(r->rt, r->sched, &st) == TROUPE_OK &&
           st.actors == r->actors && st.queued == 0;
}

START_TEST(test_sched_stats_counts_actors_and_queued_messages)
{
    troupe_runtime *rt = start();
    troupe_addr gate = rtf_spawn_on(rt, &def, 1);
    troupe_addr busy = rtf_spawn_on(rt, &def, 1);
    troupe_addr other = rtf_spawn_on(rt, &def, 0);
    (void)other;
    rest_arg ra = {rt, 1, 2}, r0 = {rt, 0, 1};
    ck_assert(ts_wait_until(at_rest, &ra, 10000));
    ck_assert(ts_wait_until(at_rest, &r0, 10000));

    send_kind(rt, gate, K_GATE);
    ck_assert(ts_wait_until(gate_entered, NULL, 10000));
    for (int i = 0; i < 5; i++)
        send_kind(rt, busy, K_NOTE);
    walk_arg w = {.rt = rt};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, walk_main, &w), 0);
    ck_assert(ts_wait_until(ctl_queued, &rt->scheds[1], 10000));
    pthread_mutex_lock(&gate_mu);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    pthread_join(th, NULL);
    ck_assert_ok(w.e);
    ck_assert_uint_eq(w.st.actors, 2);
    ck_assert_uint_eq(w.st.queued, 5);
    ck_assert_uint_eq(w.st.max_queued, 5);

    int want = 5;
    ck_assert(ts_wait_until(all_handled, &want, 10000));
    ck_assert(ts_wait_until(at_rest, &ra, 10000));
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
}
END_TEST

static bool
self_done(void *p)
{
    (void)p;
    return atomic_load(&self_err) != -1;
}

START_TEST(test_sched_stats_bad_arguments)
{
    troupe_runtime *rt = start();
    troupe_sched_stats st;
    ck_assert_err(troupe_runtime_sched_stats_wait(NULL, 0, &st), TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_sched_stats_wait(rt, 0, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_runtime_sched_stats_wait(rt, 2, &st), TROUPE_EINVAL);
    troupe_addr a = rtf_spawn_on(rt, &def, 1);
    send_kind(rt, a, K_ASK_SELF);
    ck_assert(ts_wait_until(self_done, NULL, 10000));
    ck_assert_int_eq(atomic_load(&self_err), TROUPE_EDEADLK);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    /* after shutdown the schedulers have closed */
    ck_assert_err(troupe_runtime_sched_stats_wait(rt, 0, &st), TROUPE_ECLOSED);
    troupe_runtime_destroy(rt);
}
END_TEST

Suite *
sched_stats_suite(void)
{
    Suite *s = suite_create("sched_stats");
    TCase *tc = tcase_create("sched_stats");
    tcase_add_test(tc, test_sched_stats_counts_actors_and_queued_messages);
    tcase_add_test(tc, test_sched_stats_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}
