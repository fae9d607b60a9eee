/*
 * Host-implemented actors (troupe/hostactor.h): asks and sends to the
 * proxy become TROUPE_TASK_ACTOR tasks on a pull or callback target, the
 * outcome answers the ask once (SUCCESS, FAILURE -> EFAILED, UNKNOWN ->
 * EUNKNOWN), the byte bound of what waits for credit, the stop with asks
 * queued and in flight, and an ask from another node over the transport.
 * The test thread is the pull host: it blocks in troupe_host_next, which
 * it may (it is no troupe thread).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/hostactor.h"
#include "troupe/transport.h"
#include "tsupport.h"

static troupe_runtime *rt;
static troupe_host *host;

static void
setup(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    ck_assert_ok(troupe_host_open(rt, NULL, &host));
}

/* After the targets are destroyed. */
static void
finish(void)
{
    troupe_host_destroy(host);
    troupe_runtime_destroy(rt);
}

static troupe_target *
pull_target(const char *name, uint32_t credit, uint32_t timeout_ms)
{
    troupe_target_opts o = {
        .name = name, .host = host, .credit = credit, .timeout_ms = timeout_ms};
    troupe_target *t = NULL;
    ck_assert_ok(troupe_target_create(rt, &o, &t));
    return t;
}

static troupe_host_actor *
hactor(const char *name, const char *target, uint64_t queue_bytes)
{
    troupe_host_actor_opts o = {.name = name,
                                .target = target,
                                .tag = 42,
                                .queue_bytes = queue_bytes,
                                .scheduler = -1};
    troupe_host_actor *a = NULL;
    ck_assert_ok(troupe_host_actor_create(rt, &o, &a));
    return a;
}

/* ---- asks and their answers ---- */

struct res {
    _Atomic int calls; /* answers heard: must end at 1 */
    troupe_err err;
    size_t len;
    char body[128];
};

static void
res_cb(troupe_runtime *r, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)r;
    struct res *x = arg;
    x->err = err;
    x->len = 0;
    if (reply != NULL) {
        x->len = troupe_msg_len(reply);
        if (x->len > sizeof(x->body))
            x->len = sizeof(x->body);
        if (x->len)
            memcpy(x->body, troupe_msg_data(reply), x->len);
    }
    atomic_fetch_add(&x->calls, 1);
}

static bool
res_done(void *arg)
{
    return atomic_load(&((struct res *)arg)->calls) > 0;
}

static void
ask_on(troupe_runtime *r, troupe_addr to, uint32_t kind, const char *body,
       uint32_t timeout_ms, struct res *x)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, kind, body, body ? strlen(body) : 0));
    ck_assert_ok(troupe_runtime_ask(r, to, &m, timeout_ms, res_cb, x));
}

static void
ask(troupe_host_actor *a, uint32_t kind, const char *body, struct res *x)
{
    ask_on(rt, troupe_host_actor_addr(a), kind, body, 10000, x);
}

static void
res_wait(struct res *x, troupe_err want)
{
    ck_assert_msg(ts_wait_until(res_done, x, 10000), "no answer");
    ck_assert_err(x->err, want);
}

static void
res_body(const struct res *x, const char *want)
{
    ck_assert_uint_eq(x->len, strlen(want));
    ck_assert(memcmp(x->body, want, x->len) == 0);
}

/* ---- the pull host ---- */

/* A task as a pull host sees it. */
struct task {
    uint64_t id;
    uint16_t kind;
    uint32_t msg_kind, flags, from_node, from_slot, tag;
    int64_t deadline;
    char body[256];
    size_t len;
};

static uint8_t rbuf[4096];

/* Takes the next task (waiting up to 10 s) and decodes its header. */
static void
take(struct task *k)
{
    size_t len = 0;
    ck_assert_ok(troupe_host_next(host, 10000, rbuf, sizeof(rbuf), &len));
    ck_assert_msg(len > 0, "no task");
    memset(k, 0, sizeof(*k));
    k->id = ts_rd64(rbuf);
    k->kind = (uint16_t)(rbuf[12] | rbuf[13] << 8);
    uint16_t hl = (uint16_t)(rbuf[14] | rbuf[15] << 8);
    ck_assert_uint_eq(k->kind, TROUPE_TASK_ACTOR);
    ck_assert_uint_eq(hl, TROUPE_HOST_ACTOR_HEADER_LEN);
    ck_assert_uint_eq(ts_rd32(rbuf + 16), 1); /* attempt */
    k->len = ts_rd32(rbuf + 20);
    const uint8_t *h = rbuf + TROUPE_HOST_RECORD_FIXED;
    k->msg_kind = ts_rd32(h);
    k->flags = ts_rd32(h + 4);
    k->from_node = ts_rd32(h + 8);
    k->from_slot = ts_rd32(h + 12);
    k->tag = ts_rd32(h + 20);
    k->deadline = (int64_t)ts_rd64(h + 24);
    ck_assert_uint_le(k->len, sizeof(k->body));
    memcpy(k->body, h + hl, k->len);
}

/* Nothing ready for the host now. */
static void
none_ready(void)
{
    size_t len = 1;
    ck_assert_ok(troupe_host_next(host, 0, rbuf, sizeof(rbuf), &len));
    ck_assert_uint_eq(len, 0);
}

static void
reply(const struct task *k, troupe_outcome o, const char *body)
{
    ck_assert_ok(
        troupe_host_reply(host, k->id, o, body, body ? strlen(body) : 0));
}

static troupe_host_actor_stats
stats(troupe_host_actor *a)
{
    troupe_host_actor_stats s;
    troupe_host_actor_stats_get(a, &s);
    return s;
}

struct stat_at {
    troupe_host_actor *a;
    size_t off; /* of a uint64_t in troupe_host_actor_stats */
    uint64_t want;
};

static bool
stat_reached(void *arg)
{
    struct stat_at *s = arg;
    troupe_host_actor_stats st = stats(s->a);
    uint64_t v;
    memcpy(&v, (const char *)&st + s->off, sizeof(v));
    return v >= s->want;
}

#define STAT_WAIT(a, field, n)                                                 \
    do {                                                                       \
        struct stat_at sa_ = {(a), offsetof(troupe_host_actor_stats, field),   \
                              (n)};                                            \
        ck_assert_msg(ts_wait_until(stat_reached, &sa_, 10000),                \
                      "stat " #field " never reached %llu",                    \
                      (unsigned long long)(n));                                \
    } while (0)

/* The end of a test whose host actor has stopped. */
static void
end_stopped(troupe_host_actor *a, troupe_target *t)
{
    troupe_host_actor_destroy(a);
    ck_assert_ok(troupe_host_close(host));
    ck_assert_ok(troupe_target_stop_wait(t));
    troupe_target_destroy(t);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    finish();
}

static void
stop_all(troupe_host_actor *a, troupe_target *t)
{
    ck_assert_ok(troupe_host_actor_stop_wait(a));
    end_stopped(a, t);
}

START_TEST(test_ask_pull_host_replies_asker_gets_body)
{
    troupe_target *t = pull_target("svc.t", 4, 0);
    troupe_host_actor *a = hactor("svc", "svc.t", 0);
    troupe_addr found;
    ck_assert_ok(troupe_registry_lookup(rt, "svc", &found));
    ck_assert(troupe_addr_eq(found, troupe_host_actor_addr(a)));
    struct res x = {0};
    int64_t before = troupe_now_ms();
    ask(a, 7, "hello", &x);
    struct task k;
    take(&k);
    ck_assert_uint_eq(k.msg_kind, 7);
    ck_assert_uint_eq(k.flags, TROUPE_HOST_ACTOR_ASK);
    ck_assert_uint_eq(k.from_node, troupe_runtime_node_id(rt));
    ck_assert_uint_ne(k.from_slot, 0); /* the runtime's asker */
    ck_assert_uint_eq(k.tag, 42);
    ck_assert_int_ge(k.deadline, before + 10000);
    ck_assert_uint_eq(k.len, 5);
    ck_assert(memcmp(k.body, "hello", 5) == 0);
    ck_assert_int_eq(atomic_load(&x.calls), 0); /* waits for the host */
    reply(&k, TROUPE_OUTCOME_SUCCESS, "world");
    res_wait(&x, TROUPE_OK);
    res_body(&x, "world");
    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.received, 1);
    ck_assert_uint_eq(s.submitted, 1);
    ck_assert_uint_eq(s.replied, 1);
    ck_assert_uint_eq(s.in_flight, 0);
    stop_all(a, t);
}
END_TEST

/* A callback target: kind 1 echoes the body back reversed (SUCCESS),
 * kind 2 fails with a detail, kind 3 returns a code no outcome has. */
static troupe_outcome
cb_fn(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)arg;
    if (t->kind != TROUPE_TASK_ACTOR ||
        t->header_len != TROUPE_HOST_ACTOR_HEADER_LEN)
        return TROUPE_OUTCOME_FAILURE;
    uint32_t kind = ts_rd32(t->header);
    if (kind == 2) {
        troupe_task_reply_set(r, "nope", 4);
        return TROUPE_OUTCOME_FAILURE;
    }
    if (kind == 3)
        return (troupe_outcome)77;
    char b[64];
    size_t n = t->body_len < sizeof(b) ? t->body_len : sizeof(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)t->body[n - 1 - i];
    troupe_task_reply_set(r, b, n);
    return TROUPE_OUTCOME_SUCCESS;
}

START_TEST(test_callback_target_answers_asks)
{
    troupe_target_opts o = {.name = "cb.t", .fn = cb_fn, .credit = 2};
    troupe_target *t = NULL;
    ck_assert_ok(troupe_target_create(rt, &o, &t));
    troupe_host_actor *a = hactor("cb", "cb.t", 0);
    struct res x = {0}, y = {0}, z = {0};
    ask(a, 1, "abc", &x);
    ask(a, 2, "abc", &y);
    ask(a, 3, "abc", &z);
    res_wait(&x, TROUPE_OK);
    res_body(&x, "cba");
    res_wait(&y, TROUPE_EFAILED);
    res_body(&y, "nope");
    res_wait(&z, TROUPE_EUNKNOWN);
    ck_assert_uint_eq(z.len, 0);
    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.replied, 1);
    ck_assert_uint_eq(s.failed, 1);
    ck_assert_uint_eq(s.unknown, 1);
    stop_all(a, t);
}
END_TEST

START_TEST(test_failure_and_deadline_map_and_late_reply_refused)
{
    troupe_target *t = pull_target("d.t", 4, 200);
    troupe_host_actor *a = hactor("d", "d.t", 0);
    struct res f = {0}, u = {0}, b = {0};
    ask(a, 1, "f", &f);
    struct task kf;
    take(&kf);
    reply(&kf, TROUPE_OUTCOME_FAILURE, "insufficient funds");
    res_wait(&f, TROUPE_EFAILED);
    res_body(&f, "insufficient funds");

    /* not answered: the target's deadline settles it UNKNOWN */
    ask(a, 1, "u", &u);
    struct task ku;
    take(&ku);
    res_wait(&u, TROUPE_EUNKNOWN);
    ck_assert_err(
        troupe_host_reply(host, ku.id, TROUPE_OUTCOME_SUCCESS, "x", 1),
        TROUPE_ETIMEDOUT);

    /* an undefined code: EINVAL to the host, EUNKNOWN to the asker */
    ask(a, 1, "b", &b);
    struct task kb;
    take(&kb);
    ck_assert_err(troupe_host_reply(host, kb.id, 9, NULL, 0), TROUPE_EINVAL);
    res_wait(&b, TROUPE_EUNKNOWN);
    ck_assert_err(
        troupe_host_reply(host, kb.id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
        TROUPE_ENOENT);

    /* ONGOING is no success either */
    struct res g = {0};
    ask(a, 1, "g", &g);
    struct task kg;
    take(&kg);
    reply(&kg, TROUPE_OUTCOME_ONGOING, "later");
    res_wait(&g, TROUPE_EUNKNOWN);

    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.failed, 1);
    ck_assert_uint_eq(s.unknown, 3);
    ck_assert_uint_eq(s.replied, 0);
    ck_assert_uint_eq(s.reply_lost, 0);
    /* each ask heard once, the refused late reply added nothing */
    ck_assert_int_eq(atomic_load(&f.calls), 1);
    ck_assert_int_eq(atomic_load(&u.calls), 1);
    ck_assert_int_eq(atomic_load(&b.calls), 1);
    ck_assert_int_eq(atomic_load(&g.calls), 1);
    stop_all(a, t);
}
END_TEST

START_TEST(test_send_becomes_task_and_its_reply_is_dropped)
{
    troupe_target *t = pull_target("s.t", 4, 0);
    troupe_host_actor *a = hactor("s", "s.t", 0);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 9, "fire", 4));
    ck_assert_ok(troupe_runtime_send(rt, troupe_host_actor_addr(a), &m));
    struct task k;
    take(&k);
    ck_assert_uint_eq(k.msg_kind, 9);
    ck_assert_uint_eq(k.flags, 0);
    ck_assert_int_eq(k.deadline, 0);
    ck_assert_uint_eq(k.len, 4);
    reply(&k, TROUPE_OUTCOME_SUCCESS, "ignored");
    STAT_WAIT(a, sends_done, 1);
    /* then an ask: the send's reply answered nothing */
    struct res x = {0};
    ask(a, 1, "q", &x);
    take(&k);
    ck_assert_uint_eq(k.flags, TROUPE_HOST_ACTOR_ASK);
    reply(&k, TROUPE_OUTCOME_SUCCESS, "a");
    res_wait(&x, TROUPE_OK);
    res_body(&x, "a");
    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.sends_done, 1);
    ck_assert_uint_eq(s.replied, 1);
    ck_assert_uint_eq(s.reply_lost, 0);
    stop_all(a, t);
}
END_TEST

START_TEST(test_queue_past_byte_bound_ask_ebusy_send_dropped)
{
    troupe_target *t = pull_target("b.t", 1, 0);
    /* room for two waiting messages of 10 body bytes, not three */
    uint64_t cost = 10 + TROUPE_HOST_ACTOR_ENTRY_BYTES;
    troupe_host_actor *a = hactor("b", "b.t", 2 * cost + cost / 2);
    struct res r[4] = {{0}};
    ask(a, 1, "0123456789", &r[0]); /* takes the one credit */
    struct task k0;
    take(&k0);
    ask(a, 1, "1123456789", &r[1]);
    ask(a, 1, "2123456789", &r[2]);
    STAT_WAIT(a, queued, 2);
    ck_assert_uint_eq(stats(a).queued_bytes, 2 * cost);
    ask(a, 1, "3123456789", &r[3]);
    res_wait(&r[3], TROUPE_EBUSY);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 1, "4123456789", 10));
    ck_assert_ok(troupe_runtime_send(rt, troupe_host_actor_addr(a), &m));
    STAT_WAIT(a, dropped, 1);
    none_ready(); /* the credit bounds what the host sees */
    ck_assert_int_eq(atomic_load(&r[1].calls), 0);
    /* credit back: the waiting ones follow, in order */
    reply(&k0, TROUPE_OUTCOME_SUCCESS, "r0");
    for (int i = 1; i <= 2; i++) {
        struct task k;
        take(&k);
        ck_assert(k.body[0] == (char)('0' + i));
        none_ready();
        char b[4] = {'r', (char)('0' + i), 0, 0};
        reply(&k, TROUPE_OUTCOME_SUCCESS, b);
        res_wait(&r[i], TROUPE_OK);
        res_body(&r[i], b);
    }
    res_wait(&r[0], TROUPE_OK);
    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.busy, 1);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_eq(s.queued, 0);
    ck_assert_uint_eq(s.queued_bytes, 0);
    ck_assert_uint_eq(s.submitted, 3);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(atomic_load(&r[i].calls), 1);
    stop_all(a, t);
}
END_TEST

static _Atomic int stop_calls;

static void
stop_cb(troupe_host_actor *a, void *arg)
{
    (void)a;
    (void)arg;
    atomic_fetch_add(&stop_calls, 1);
}

static bool
stopped(void *arg)
{
    (void)arg;
    return atomic_load(&stop_calls) > 0;
}

START_TEST(test_stop_answers_queued_closed_and_in_flight_once)
{
    troupe_target *t = pull_target("st.t", 2, 300);
    troupe_host_actor *a = hactor("st", "st.t", 0);
    struct res r[5] = {{0}};
    for (int i = 0; i < 4; i++)
        ask(a, 1, "x", &r[i]);
    struct task k0, k1;
    take(&k0); /* in flight, answered by the host after the stop */
    take(&k1); /* in flight, left to the deadline */
    STAT_WAIT(a, queued, 2);
    ck_assert_ok(troupe_host_actor_stop(a, stop_cb, NULL));
    ck_assert_err(troupe_host_actor_stop(a, stop_cb, NULL), TROUPE_ESTATE);
    res_wait(&r[2], TROUPE_ECLOSED);
    res_wait(&r[3], TROUPE_ECLOSED);
    /* the name went with the proxy; in flight still hold the stop */
    troupe_addr none;
    ck_assert_int_eq(atomic_load(&stop_calls), 0);
    reply(&k0, TROUPE_OUTCOME_SUCCESS, "done");
    res_wait(&r[0], TROUPE_OK);
    res_body(&r[0], "done");
    ck_assert_int_eq(atomic_load(&stop_calls), 0);
    res_wait(&r[1], TROUPE_EUNKNOWN); /* its deadline */
    ck_assert(ts_wait_until(stopped, NULL, 10000));
    ck_assert_err(troupe_registry_lookup(rt, "st", &none), TROUPE_ENOENT);
    /* after the stop: the proxy is gone */
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 1, "late", 4));
    ck_assert_err(troupe_runtime_ask(rt, troupe_host_actor_addr(a), &m, 10000,
                                     res_cb, &r[4]),
                  TROUPE_EDEAD);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(atomic_load(&r[i].calls), 1);
    ck_assert_int_eq(atomic_load(&stop_calls), 1);
    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.closed, 2);
    ck_assert_uint_eq(s.replied, 1);
    ck_assert_uint_eq(s.unknown, 1);
    ck_assert_uint_eq(s.in_flight, 0);
    end_stopped(a, t);
}
END_TEST

/* A host thread that answers what it pulls: every fifth task left to its
 * deadline, every fifth FAILURE, the rest SUCCESS with the request body. */
static _Atomic int host_quit;

static void *
host_loop(void *arg)
{
    (void)arg;
    static uint8_t buf[4096];
    uint64_t n = 0;
    while (!atomic_load(&host_quit)) {
        size_t len = 0;
        troupe_err e = troupe_host_next(host, 20, buf, sizeof(buf), &len);
        if (e != TROUPE_OK || len == 0)
            continue;
        uint64_t id = ts_rd64(buf);
        uint32_t bl = ts_rd32(buf + 20);
        const uint8_t *body =
            buf + TROUPE_HOST_RECORD_FIXED + TROUPE_HOST_ACTOR_HEADER_LEN;
        switch (n++ % 5) {
        case 0:
            break;
        case 1:
            (void)troupe_host_reply(host, id, TROUPE_OUTCOME_FAILURE, body, bl);
            break;
        default:
            (void)troupe_host_reply(host, id, TROUPE_OUTCOME_SUCCESS, body, bl);
        }
    }
    return NULL;
}

#define N_STRESS 400
static struct res sres[N_STRESS];

static bool
answered(void *arg)
{
    int want = *(int *)arg;
    for (int i = 0; i < want; i++)
        if (atomic_load(&sres[i].calls) == 0)
            return false;
    return true;
}

START_TEST(test_stress_each_ask_answered_once_through_stop)
{
    troupe_target *t = pull_target("x.t", 3, 100);
    troupe_host_actor *a = hactor("x", "x.t", 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, host_loop, NULL), 0);
    char b[N_STRESS][16];
    for (int i = 0; i < N_STRESS; i++) {
        snprintf(b[i], sizeof(b[i]), "m%d", i);
        ask(a, 1, b[i], &sres[i]);
    }
    int half = N_STRESS / 2;
    ck_assert(ts_wait_until(answered, &half, 30000));
    ck_assert_ok(troupe_host_actor_stop(a, stop_cb, NULL));
    int all = N_STRESS;
    ck_assert(ts_wait_until(answered, &all, 30000));
    ck_assert(ts_wait_until(stopped, NULL, 10000));
    atomic_store(&host_quit, 1);
    pthread_join(th, NULL);
    uint64_t ok = 0, failed = 0, unknown = 0, closed = 0;
    for (int i = 0; i < N_STRESS; i++) {
        ck_assert_int_eq(atomic_load(&sres[i].calls), 1);
        switch (sres[i].err) {
        case TROUPE_OK:
            res_body(&sres[i], b[i]);
            ok++;
            break;
        case TROUPE_EFAILED:
            res_body(&sres[i], b[i]);
            failed++;
            break;
        case TROUPE_EUNKNOWN:
            unknown++;
            break;
        case TROUPE_ECLOSED:
            closed++;
            break;
        default:
            ck_abort_msg("ask %d: %s", i, troupe_err_name(sres[i].err));
        }
    }
    troupe_host_actor_stats s = stats(a);
    ck_assert_uint_eq(s.replied, ok);
    ck_assert_uint_eq(s.failed, failed);
    ck_assert_uint_eq(s.unknown, unknown);
    ck_assert_uint_eq(s.closed, closed);
    ck_assert_uint_eq(ok + failed + unknown + closed, N_STRESS);
    ck_assert_uint_eq(s.in_flight, 0);
    ck_assert_uint_gt(unknown, 0);
    ck_assert_uint_gt(ok, 0);
    ck_assert_int_eq(atomic_load(&stop_calls), 1);
    end_stopped(a, t);
}
END_TEST

START_TEST(test_target_stopping_refuses_waiting_asks_closed)
{
    troupe_target *t = pull_target("ts.t", 1, 0);
    troupe_host_actor *a = hactor("ts", "ts.t", 0);
    struct res r[3] = {{0}};
    ask(a, 1, "0", &r[0]);
    struct task k0;
    take(&k0);
    ask(a, 1, "1", &r[1]);
    STAT_WAIT(a, queued, 1);
    /* the host closes: the task it holds settles UNKNOWN, and the target
     * stops, so what waits for its credit can never go */
    ck_assert_ok(troupe_host_close(host));
    res_wait(&r[0], TROUPE_EUNKNOWN);
    ck_assert_ok(troupe_target_stop_wait(t));
    res_wait(&r[1], TROUPE_ECLOSED);
    ask(a, 1, "2", &r[2]);
    res_wait(&r[2], TROUPE_ECLOSED);
    troupe_target_destroy(t); /* before the host actor: its memory stays */
    ck_assert_ok(troupe_host_actor_stop_wait(a));
    troupe_host_actor_destroy(a);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    finish();
}
END_TEST

/* The runtime's shutdown stops the proxy first: what waits is answered,
 * a task in flight still settles, and the stop after it completes. */
START_TEST(test_runtime_shutdown_before_stop)
{
    troupe_target *t = pull_target("sd.t", 1, 0);
    troupe_host_actor *a = hactor("sd", "sd.t", 0);
    struct res r[2] = {{0}};
    ask(a, 1, "0", &r[0]);
    struct task k0;
    take(&k0);
    ask(a, 1, "1", &r[1]);
    STAT_WAIT(a, queued, 1);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    res_wait(&r[1], TROUPE_ECLOSED);
    res_wait(&r[0], TROUPE_ECLOSED); /* the runtime's asker went away */
    ck_assert_uint_eq(stats(a).queued, 0);
    ck_assert_uint_eq(stats(a).in_flight, 1);
    reply(&k0, TROUPE_OUTCOME_SUCCESS, "late"); /* nobody to answer */
    ck_assert_uint_eq(stats(a).in_flight, 0);
    ck_assert_ok(troupe_host_actor_stop(a, stop_cb, NULL));
    ck_assert_int_eq(atomic_load(&stop_calls), 1); /* no scheduler 0 left */
    troupe_host_actor_destroy(a);
    ck_assert_ok(troupe_host_close(host));
    ck_assert_ok(troupe_target_stop_wait(t));
    troupe_target_destroy(t);
    finish();
}
END_TEST

START_TEST(test_create_stop_bad_arguments)
{
    troupe_target *t = pull_target("x.t", 1, 0);
    troupe_host_actor *a = (troupe_host_actor *)1;
    troupe_host_actor_opts o = {.name = "x", .target = "x.t", .scheduler = -1};
    ck_assert_err(troupe_host_actor_create(NULL, &o, &a), TROUPE_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert_err(troupe_host_actor_create(rt, NULL, &a), TROUPE_EINVAL);
    ck_assert_err(troupe_host_actor_create(rt, &o, NULL), TROUPE_EINVAL);
    o.name = "";
    ck_assert_err(troupe_host_actor_create(rt, &o, &a), TROUPE_EINVAL);
    char longname[300];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    o.name = longname;
    ck_assert_err(troupe_host_actor_create(rt, &o, &a), TROUPE_EINVAL);
    o.name = "x";
    o.target = NULL;
    ck_assert_err(troupe_host_actor_create(rt, &o, &a), TROUPE_EINVAL);
    o.target = "no.such";
    ck_assert_err(troupe_host_actor_create(rt, &o, &a), TROUPE_ENOENT);
    ck_assert(strstr(troupe_errmsg(TROUPE_ENOENT), "no.such") != NULL);
    o.target = "x.t";
    o.scheduler = 99;
    ck_assert_err(troupe_host_actor_create(rt, &o, &a), TROUPE_EINVAL);
    o.scheduler = -1;
    ck_assert_ok(troupe_host_actor_create(rt, &o, &a));
    troupe_host_actor *b = NULL;
    ck_assert_err(troupe_host_actor_create(rt, &o, &b), TROUPE_EEXIST);
    ck_assert_ptr_null(b);
    ck_assert_err(troupe_host_actor_stop(NULL, stop_cb, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_host_actor_stop(a, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_host_actor_stop_wait(NULL), TROUPE_EINVAL);
    ck_assert(troupe_addr_is_none(troupe_host_actor_addr(NULL)));
    troupe_host_actor_stats s;
    troupe_host_actor_stats_get(NULL, &s);
    ck_assert_uint_eq(s.received, 0);
    troupe_host_actor_destroy(NULL);
    /* a body no task may carry: ETOOBIG, nothing submitted */
    size_t big = TROUPE_TASK_BODY_MAX + 1;
    char *bb = calloc(1, big);
    ck_assert_ptr_nonnull(bb);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 1, bb, big));
    free(bb);
    struct res x = {0};
    ck_assert_ok(troupe_runtime_ask(rt, troupe_host_actor_addr(a), &m, 10000,
                                    res_cb, &x));
    res_wait(&x, TROUPE_ETOOBIG);
    ck_assert_uint_eq(stats(a).submitted, 0);
    ck_assert_ok(troupe_host_actor_stop_wait(a));
    ck_assert_err(troupe_host_actor_stop_wait(a), TROUPE_ESTATE);
    troupe_host_actor_destroy(a);
    /* the name is free again */
    ck_assert_ok(troupe_host_actor_create(rt, &o, &a));
    stop_all(a, t);
}
END_TEST

START_TEST(test_destroy_running_aborts)
{
    troupe_target *t = pull_target("ab.t", 1, 0);
    (void)t;
    troupe_host_actor_destroy(hactor("ab", "ab.t", 0));
}
END_TEST

/* stop_wait from inside a troupe callback would wait for itself. */
static troupe_host_actor *deadlk_a;
static _Atomic int deadlk_err = -1;

static void
deadlk_post(void *arg, troupe_runtime *r)
{
    (void)arg;
    (void)r;
    atomic_store(&deadlk_err, (int)troupe_host_actor_stop_wait(deadlk_a));
}

static bool
deadlk_done(void *arg)
{
    (void)arg;
    return atomic_load(&deadlk_err) != -1;
}

START_TEST(test_stop_wait_on_troupe_thread_edeadlk)
{
    troupe_target *t = pull_target("dl.t", 1, 0);
    deadlk_a = hactor("dl", "dl.t", 0);
    ck_assert_ok(troupe_runtime_post(rt, deadlk_post, NULL));
    ck_assert(ts_wait_until(deadlk_done, NULL, 10000));
    ck_assert_int_eq(atomic_load(&deadlk_err), TROUPE_EDEADLK);
    stop_all(deadlk_a, t); /* not stopped by the refused call */
}
END_TEST

static void
lookup_cb(troupe_runtime *r, troupe_err err, troupe_addr a, void *arg)
{
    (void)r;
    struct res *x = arg;
    x->err = err;
    memcpy(x->body, &a, sizeof(a));
    x->len = sizeof(a);
    atomic_fetch_add(&x->calls, 1);
}

/* Node B asks the host actor on node A by name over tcp loopback. */
START_TEST(test_remote_node_asks_host_actor_by_name)
{
    troupe_target *t = pull_target("r.t", 4, 0);
    troupe_host_actor *a = hactor("remote.svc", "r.t", 0);
    troupe_node *na = NULL, *nb = NULL;
    ck_assert_ok(troupe_node_create(&na, rt, NULL));
    ck_assert_ok(troupe_node_listen(na, "tcp://127.0.0.1:0"));
    troupe_runtime *rb = NULL;
    troupe_runtime_opts ob = {.schedulers = 1, .workers = 1, .node_id = 2};
    ck_assert_ok(troupe_runtime_create(&rb, &ob));
    ck_assert_ok(troupe_node_create(&nb, rb, NULL));
    ck_assert_ok(troupe_node_listen(nb, "tcp://127.0.0.1:0"));
    uint32_t peer = 0;
    ck_assert_ok(
        troupe_node_connect_wait(nb, troupe_node_url(na), 10000, &peer));
    ck_assert_uint_eq(peer, 1);
    ck_assert_ok(troupe_node_wait_peer(na, 2, 10000));

    struct res x = {0}, y = {0}, lr = {0};
    troupe_addr to = TROUPE_ADDR_NONE;
    ck_assert_ok(
        troupe_node_lookup(nb, 1, "remote.svc", 10000, lookup_cb, &lr));
    res_wait(&lr, TROUPE_OK);
    memcpy(&to, lr.body, sizeof(to));
    ck_assert(troupe_addr_eq(to, troupe_host_actor_addr(a)));

    ask_on(rb, to, 4, "ping", 10000, &x);
    struct task k;
    take(&k);
    ck_assert_uint_eq(k.from_node, 2);
    ck_assert_uint_eq(k.flags, TROUPE_HOST_ACTOR_ASK);
    ck_assert_uint_eq(k.len, 4);
    ck_assert(memcmp(k.body, "ping", 4) == 0);
    reply(&k, TROUPE_OUTCOME_SUCCESS, "pong");
    res_wait(&x, TROUPE_OK);
    res_body(&x, "pong");

    ask_on(rb, to, 4, "no", 10000, &y);
    take(&k);
    reply(&k, TROUPE_OUTCOME_FAILURE, "refused");
    res_wait(&y, TROUPE_EFAILED);
    res_body(&y, "refused");

    ck_assert_ok(troupe_runtime_shutdown_wait(rb));
    ck_assert_ok(troupe_node_stop_wait(nb));
    troupe_node_destroy(nb);
    troupe_runtime_destroy(rb);
    ck_assert_ok(troupe_host_actor_stop_wait(a));
    troupe_host_actor_destroy(a);
    ck_assert_ok(troupe_host_close(host));
    ck_assert_ok(troupe_target_stop_wait(t));
    troupe_target_destroy(t);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    ck_assert_ok(troupe_node_stop_wait(na));
    troupe_node_destroy(na);
    finish();
}
END_TEST

Suite *
hostactor_suite(void)
{
    Suite *s = suite_create("hostactor");
    TCase *tc = tcase_create("hostactor");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ask_pull_host_replies_asker_gets_body);
    tcase_add_test(tc, test_callback_target_answers_asks);
    tcase_add_test(tc, test_failure_and_deadline_map_and_late_reply_refused);
    tcase_add_test(tc, test_send_becomes_task_and_its_reply_is_dropped);
    tcase_add_test(tc, test_queue_past_byte_bound_ask_ebusy_send_dropped);
    tcase_add_test(tc, test_stop_answers_queued_closed_and_in_flight_once);
    tcase_add_test(tc, test_target_stopping_refuses_waiting_asks_closed);
    tcase_add_test(tc, test_stress_each_ask_answered_once_through_stop);
    tcase_add_test(tc, test_runtime_shutdown_before_stop);
    tcase_add_test(tc, test_create_stop_bad_arguments);
    tcase_add_test_raise_signal(tc, test_destroy_running_aborts, SIGABRT);
    tcase_add_test(tc, test_stop_wait_on_troupe_thread_edeadlk);
    tcase_add_test(tc, test_remote_node_asks_host_actor_by_name);
    suite_add_tcase(s, tc);
    return s;
}
