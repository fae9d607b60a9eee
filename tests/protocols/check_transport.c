/*
 * Remote actors: two runtimes in one process talking over inproc, ipc and
 * tcp loopback. Sends, asks (host and actor), name lookup, unreachable
 * nodes, bounded queues, batching, reconnect after a peer restarts, and
 * hostile frames arriving at an inbox.
 */
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "suites.h"
#include "tnode.h"
#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/transport.h"
#include "troupe/wire.h"

/* ---- tests ---- */

static bool
link_down_2(void *arg)
{
    troupe_peer_state st = troupe_node_peer_state(arg, 2);
    return st == TROUPE_PEER_DOWN || st == TROUPE_PEER_UNREACHABLE;
}

struct sent_at_least {
    troupe_node *node;
    uint64_t n;
};

/* For ts_wait_until: the node counts at least n messages sent. */
static bool
sent_reached(void *arg)
{
    const struct sent_at_least *s = arg;
    troupe_node_stats st;
    troupe_node_stats_get(s->node, &st);
    return st.msgs_sent >= s->n;
}

static void
send_in_order(const char *scheme)
{
    struct side a, b;
    char *ua = unique_url(scheme, "a"), *ub = unique_url(scheme, "b");
    side_open(&a, 1, NULL, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr sink = lookup(&a, 2, "test");
    ck_assert(troupe_addr_eq(sink, b.actor));
    ck_assert_int_eq(troupe_node_peer_state(a.node, 2), TROUPE_PEER_UP);
    const uint64_t n = 5000;
    for (uint64_t i = 0; i < n; i++) {
        troupe_msg *m = seq_msg(K_SINK, i);
        troupe_err e;
        /* EFULL is backpressure: wait and retry the same message */
        while ((e = troupe_runtime_send(a.rt, sink, &m)) == TROUPE_EFULL)
            m = seq_msg(K_SINK, i);
        ck_assert_ok(e);
        ck_assert_ptr_null(m);
    }
    struct count_at_least c = {&b.sh.count, n};
    ck_assert(ts_wait_until(count_reached, &c, 20000));
    ck_assert_uint_eq(atomic_load(&b.sh.count), n);
    ck_assert_uint_eq(atomic_load(&b.sh.out_of_order), 0);
    /* the sender counts a message once its send completed, which may be
     * after the receiver has it: wait for the count, do not sample it */
    struct sent_at_least s = {a.node, n};
    ck_assert(ts_wait_until(sent_reached, &s, 20000));
    troupe_node_stats st;
    troupe_node_stats_get(b.node, &st);
    ck_assert_uint_ge(st.msgs_recv, n);
    ck_assert_uint_eq(st.bad_frames, 0);
    side_close(&a);
    side_close(&b);
    free(ua);
    free(ub);
    nng_fini();
}

START_TEST(test_transport_inproc_sends_arrive_once_in_order)
{
    send_in_order("inproc");
}
END_TEST

START_TEST(test_transport_tcp_sends_arrive_once_in_order)
{
    send_in_order("tcp");
}
END_TEST

START_TEST(test_transport_ipc_sends_arrive_once_in_order)
{
    send_in_order("ipc");
}
END_TEST

static void
ask_both_ways(const char *scheme)
{
    struct side a, b;
    char *ua = unique_url(scheme, "a"), *ub = unique_url(scheme, "b");
    side_open(&a, 1, NULL, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr echo_b = lookup(&a, 2, "test");
    troupe_addr echo_a = lookup(&b, 1, "test");
    ck_assert(troupe_addr_eq(echo_a, a.actor));
    struct ask_res r;
    for (int i = 0; i < 200; i++) {
        char body[32];
        snprintf(body, sizeof(body), "\xa8ping%04d", i); /* a msgpack str */
        ck_assert_ok(host_ask(a.rt, echo_b, body, 5000, &r));
        ck_assert_uint_eq(r.len, strlen(body));
        ck_assert_mem_eq(r.body, body, r.len);
        ck_assert_ok(host_ask(b.rt, echo_a, body, 5000, &r));
        ck_assert_mem_eq(r.body, body, r.len);
    }
    /* actor to actor: a's actor asks b's, the reply arrives as K_REPLY */
    a.sh.target = echo_b;
    atomic_store(&a.sh.done, 0);
    troupe_msg *go;
    ck_assert_ok(troupe_msg_create(&go, K_GO,
                                   "\xa3"
                                   "abc",
                                   4));
    ck_assert_ok(troupe_runtime_send(a.rt, a.actor, &go));
    ck_assert(ts_wait_until(shared_done, &a.sh, 8000));
    ck_assert_ok(a.sh.err);
    ck_assert_uint_eq(a.sh.len, 4);
    ck_assert_mem_eq(a.sh.body,
                     "\xa3"
                     "abc",
                     4);
    side_close(&a);
    side_close(&b);
    free(ua);
    free(ub);
    nng_fini();
}

START_TEST(test_transport_inproc_ask_reply_both_ways)
{
    ask_both_ways("inproc");
}
END_TEST

START_TEST(test_transport_tcp_ask_reply_both_ways)
{
    ask_both_ways("tcp");
}
END_TEST

START_TEST(test_transport_lookup_and_node_address)
{
    struct side a, b;
    char *ua = unique_url("inproc", "a"), *ub = unique_url("inproc", "b");
    side_open(&a, 1, NULL, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    struct ask_res r = {0};
    ck_assert_ok(troupe_node_lookup(a.node, 2, "nobody", 3000, lookup_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_err(r.err, TROUPE_ENOENT);
    ck_assert(troupe_addr_is_none(r.addr));
    /* our own id: the local registry, still through the callback */
    memset(&r, 0, sizeof(r));
    ck_assert_ok(troupe_node_lookup(a.node, 1, "test", 3000, lookup_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_ok(r.err);
    ck_assert(troupe_addr_eq(r.addr, a.actor));
    /* the node address answers asks like an actor */
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, TROUPE_NODE_PING, NULL, 0));
    memset(&r, 0, sizeof(r));
    ck_assert_ok(
        troupe_runtime_ask(a.rt, troupe_node_addr(2), &m, 3000, ask_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_ok(r.err);
    ck_assert_ok(troupe_msg_create(&m, 77, NULL, 0));
    memset(&r, 0, sizeof(r));
    ck_assert_ok(
        troupe_runtime_ask(a.rt, troupe_node_addr(2), &m, 3000, ask_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_err(r.err, TROUPE_ENOTSUP);
    /* a malformed lookup body is EPROTO */
    ck_assert_ok(troupe_msg_create(&m, TROUPE_NODE_LOOKUP, "\x92\x01", 2));
    memset(&r, 0, sizeof(r));
    ck_assert_ok(
        troupe_runtime_ask(a.rt, troupe_node_addr(2), &m, 3000, ask_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_err(r.err, TROUPE_EPROTO);
    side_close(&a);
    side_close(&b);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

/* A job on the STORAGE lane that holds its worker until the gate opens
 * (or 20 s pass, so that a failing test still ends). */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    _Atomic int started, finished;
};

static void
gate_job(void *arg)
{
    struct gate *g = arg;
    atomic_store(&g->started, 1);
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += 20;
    pthread_mutex_lock(&g->mu);
    while (!g->open && pthread_cond_timedwait(&g->cv, &g->mu, &end) == 0)
        ;
    pthread_mutex_unlock(&g->mu);
}

static void
gate_done(void *arg, troupe_runtime *rt)
{
    atomic_store(&((struct gate *)arg)->finished, 1);
}

static bool
gate_started(void *arg)
{
    return atomic_load(&((struct gate *)arg)->started) != 0;
}

static bool
gate_finished(void *arg)
{
    return atomic_load(&((struct gate *)arg)->finished) != 0;
}

static void
gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

START_TEST(test_transport_lookup_of_own_id_needs_no_worker)
{
    struct side a;
    char *ua = unique_url("inproc", "a");
    side_open(&a, 1, NULL, ua); /* one STORAGE worker */
    struct gate g = {.mu = PTHREAD_MUTEX_INITIALIZER,
                     .cv = PTHREAD_COND_INITIALIZER};
    ck_assert_ok(troupe_runtime_work(a.rt, gate_job, gate_done, &g));
    ck_assert(ts_wait_until(gate_started, &g, 8000));
    /* the only worker is held: the answer must not wait for it */
    struct ask_res r = {0};
    ck_assert_ok(troupe_node_lookup(a.node, 1, "test", 3000, lookup_cb, &r));
    bool answered = ts_wait_until(is_done, &r, 3000);
    gate_open(&g);
    ck_assert(ts_wait_until(gate_finished, &g, 8000));
    ck_assert(answered);
    ck_assert_ok(r.err);
    ck_assert(troupe_addr_eq(r.addr, a.actor));
    side_close(&a);
    free(ua);
    nng_fini();
}
END_TEST

START_TEST(test_transport_unknown_node_is_eunreachable_at_once)
{
    struct side a;
    char *ua = unique_url("inproc", "a");
    side_open(&a, 1, NULL, ua);
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, K_SINK, NULL, 0));
    ck_assert_err(troupe_runtime_send(a.rt, (troupe_addr){9, 1, 1}, &m),
                  TROUPE_EUNREACHABLE);
    ck_assert_ptr_null(m);
    /* an ask fails through its callback, long before its deadline */
    struct ask_res r;
    uint64_t t0 = ts_now_ms();
    troupe_err e = host_ask(a.rt, (troupe_addr){9, 1, 1}, NULL, 10000, &r);
    ck_assert_err(e, TROUPE_EUNREACHABLE);
    ck_assert_uint_lt(ts_now_ms() - t0, 2000);
    r.done = 0;
    ck_assert_err(troupe_node_lookup(a.node, 9, "x", 1000, lookup_cb, &r),
                  TROUPE_EUNREACHABLE);
    /* dialing a URL where nobody listens does not make the node known */
    char *nowhere = unique_url("inproc", "nowhere");
    ck_assert_ok(troupe_node_connect(a.node, nowhere));
    ck_assert_err(troupe_node_wait_peer(a.node, 9, 100), TROUPE_ETIMEDOUT);
    side_close(&a);
    free(ua);
    free(nowhere);
    nng_fini();
}
END_TEST

START_TEST(test_transport_ask_to_vanished_peer_fails_before_deadline)
{
    troupe_node_opts o = {.unreachable_ms = 300};
    struct side a, b;
    char *ua = unique_url("tcp", "a"), *ub = unique_url("tcp", "b");
    side_open(&a, 1, &o, ua);
    side_open(&b, 2, &o, ub);
    connect_pair(&a, &b);
    troupe_addr echo_b = lookup(&a, 2, "test");
    side_close(&b);
    ck_assert(ts_wait_until(link_down_2, a.node, 5000));
    /* queued while the link may still come back, then given up */
    struct ask_res r;
    uint64_t t0 = ts_now_ms();
    ck_assert_err(host_ask(a.rt, echo_b, NULL, 10000, &r), TROUPE_EUNREACHABLE);
    uint64_t took = ts_now_ms() - t0;
    ck_assert_uint_lt(took, 3000);
    /* now the peer is known to be unreachable: fails at once */
    t0 = ts_now_ms();
    ck_assert_err(host_ask(a.rt, echo_b, NULL, 10000, &r), TROUPE_EUNREACHABLE);
    ck_assert_uint_lt(ts_now_ms() - t0, 1000);
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, K_SINK, NULL, 0));
    ck_assert_err(troupe_runtime_send(a.rt, echo_b, &m), TROUPE_EUNREACHABLE);
    /* an actor's ask learns it too, as an error reply */
    a.sh.target = echo_b;
    troupe_msg *go;
    ck_assert_ok(troupe_msg_create(&go, K_GO, NULL, 0));
    ck_assert_ok(troupe_runtime_send(a.rt, a.actor, &go));
    ck_assert(ts_wait_until(shared_done, &a.sh, 5000));
    ck_assert_err(a.sh.err, TROUPE_EUNREACHABLE);
    troupe_node_stats st;
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_ge(st.error_replies, 1);
    side_close(&a);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

START_TEST(test_transport_queued_ask_past_deadline_gets_error_reply)
{
    /* unreachable_ms far away: only the deadline can end the ask */
    troupe_node_opts o = {.unreachable_ms = 60000};
    struct side a, b;
    char *ua = unique_url("inproc", "a"), *ub = unique_url("inproc", "b");
    side_open(&a, 1, &o, ua);
    side_open(&b, 2, &o, ub);
    connect_pair(&a, &b);
    troupe_addr echo_b = lookup(&a, 2, "test");
    side_close(&b);
    ck_assert(ts_wait_until(link_down_2, a.node, 5000));
    struct ask_res r;
    uint64_t t0 = ts_now_ms();
    troupe_err e = host_ask(a.rt, echo_b, NULL, 300, &r);
    ck_assert_msg(e == TROUPE_ETIMEDOUT || e == TROUPE_EUNREACHABLE, "%s",
                  troupe_err_name(e));
    ck_assert_uint_lt(ts_now_ms() - t0, 3000);
    side_close(&a);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

START_TEST(test_transport_queue_to_a_down_peer_is_bounded)
{
    troupe_node_opts o = {.unreachable_ms = 60000, .queue_cap = 16};
    struct side a, b;
    char *ua = unique_url("inproc", "a"), *ub = unique_url("inproc", "b");
    side_open(&a, 1, &o, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr sink = lookup(&a, 2, "test");
    side_close(&b);
    /* until a has seen the link drop, sends would still go out */
    ck_assert(ts_wait_until(link_down_2, a.node, 5000));
    for (uint64_t i = 0; i < 16; i++) {
        troupe_msg *m = seq_msg(K_SINK, i);
        ck_assert_ok(troupe_runtime_send(a.rt, sink, &m));
    }
    troupe_msg *m = seq_msg(K_SINK, 16);
    ck_assert_err(troupe_runtime_send(a.rt, sink, &m), TROUPE_EFULL);
    ck_assert_ptr_null(m);
    troupe_node_stats st;
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_eq(st.full, 1);
    side_close(&a);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

START_TEST(test_transport_queue_bytes_are_bounded)
{
    troupe_node_opts o = {.unreachable_ms = 60000, .queue_bytes = 2000};
    struct side a, b;
    char *ua = unique_url("inproc", "a"), *ub = unique_url("inproc", "b");
    side_open(&a, 1, &o, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr sink = lookup(&a, 2, "test");
    side_close(&b);
    ck_assert(ts_wait_until(link_down_2, a.node, 5000));
    char body[500];
    memset(body, 0, sizeof(body));
    int sent = 0;
    troupe_err e = TROUPE_OK;
    while (e == TROUPE_OK && sent < 100) {
        troupe_msg *m;
        ck_assert_ok(troupe_msg_create(&m, K_SINK, body, sizeof(body)));
        e = troupe_runtime_send(a.rt, sink, &m);
        if (e == TROUPE_OK)
            sent++;
    }
    ck_assert_err(e, TROUPE_EFULL);
    ck_assert_int_eq(sent, 3); /* 3 x ~530 bytes fit in 2000, 4 do not */
    side_close(&a);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

struct sides {
    struct side *a, *b;
};

/* a's sends are all counted: b has received no envelope a has not yet
 * counted as sent (a counts a frame when nng completes it, which can be
 * after b has answered it). */
static bool
sends_counted(void *arg)
{
    struct sides *p = arg;
    troupe_node_stats a, b;
    troupe_node_stats_get(p->a->node, &a);
    troupe_node_stats_get(p->b->node, &b);
    return a.msgs_sent >= b.msgs_recv;
}

START_TEST(test_transport_frames_batch_under_load)
{
    struct side a, b;
    char *ua = unique_url("tcp", "a"), *ub = unique_url("tcp", "b");
    side_open(&a, 1, NULL, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr sink = lookup(&a, 2, "test");
    struct sides ab = {&a, &b};
    ck_assert(ts_wait_until(sends_counted, &ab, 5000));
    troupe_node_stats before;
    troupe_node_stats_get(a.node, &before);
    const uint64_t n = 20000;
    for (uint64_t i = 0; i < n; i++) {
        troupe_msg *m = seq_msg(K_SINK, i);
        ck_assert_ok(troupe_runtime_send(a.rt, sink, &m));
    }
    struct count_at_least c = {&b.sh.count, n};
    ck_assert(ts_wait_until(count_reached, &c, 20000));
    ck_assert_uint_eq(atomic_load(&b.sh.out_of_order), 0);
    troupe_node_stats st;
    troupe_node_stats_get(a.node, &st);
    uint64_t msgs = st.msgs_sent - before.msgs_sent;
    uint64_t frames = st.frames_sent - before.frames_sent;
    ck_assert_uint_eq(msgs, n);
    ck_assert_msg(frames * 2 < msgs, "%llu frames for %llu messages",
                  (unsigned long long)frames, (unsigned long long)msgs);
    side_close(&a);
    side_close(&b);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

START_TEST(test_transport_large_bodies_travel_and_oversized_are_etoobig)
{
    struct side a, b;
    char *ua = unique_url("tcp", "a"), *ub = unique_url("tcp", "b");
    side_open(&a, 1, NULL, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr sink = lookup(&a, 2, "test");
    /* 1 MiB: bigger than a frame's batching target, sent alone */
    size_t len = 1u << 20;
    unsigned char *big = malloc(TROUPE_WIRE_BODY_MAX + 1);
    memset(big, 0, TROUPE_WIRE_BODY_MAX + 1);
    big[0] = 0xc6; /* bin32 of len - 5 bytes: one msgpack value */
    big[1] = (unsigned char)((len - 5) >> 24);
    big[2] = (unsigned char)((len - 5) >> 16);
    big[3] = (unsigned char)((len - 5) >> 8);
    big[4] = (unsigned char)(len - 5);
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, K_COUNT, big, len));
    ck_assert_ok(troupe_runtime_send(a.rt, sink, &m));
    struct count_at_least c = {&b.sh.count, 1};
    ck_assert(ts_wait_until(count_reached, &c, 10000));
    ck_assert_ok(troupe_msg_create(&m, K_COUNT, big, TROUPE_WIRE_BODY_MAX + 1));
    ck_assert_err(troupe_runtime_send(a.rt, sink, &m), TROUPE_ETOOBIG);
    /* a local-only message never leaves its node */
    ck_assert_ok(troupe_msg_create(&m, K_COUNT, NULL, 0));
    m->ptr = big;
    ck_assert_err(troupe_runtime_send(a.rt, sink, &m), TROUPE_EINVAL);
    free(big);
    side_close(&a);
    side_close(&b);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

static bool
peer_up_2(void *arg)
{
    return troupe_node_peer_up(arg, 2);
}

START_TEST(test_transport_reconnects_after_peer_restarts)
{
    troupe_node_opts o = {.unreachable_ms = 500, .reconnect_max_ms = 100};
    struct side a, b;
    char *ua = unique_url("tcp", "a"), *ub = unique_url("tcp", "b");
    side_open(&a, 1, &o, ua);
    side_open(&b, 2, &o, ub);
    char burl[256];
    snprintf(burl, sizeof(burl), "%s", troupe_node_url(b.node));
    connect_pair(&a, &b);
    troupe_addr echo_b = lookup(&a, 2, "test");
    struct ask_res r;
    ck_assert_ok(host_ask(a.rt, echo_b, "\xa1x", 5000, &r));

    side_close(&b);
    ck_assert(ts_wait_until(link_down_2, a.node, 5000));

    /* same node id, same URL, new incarnation */
    side_open(&b, 2, &o, burl);
    ck_assert(ts_wait_until(peer_up_2, a.node, 10000));
    ck_assert_ok(troupe_node_wait_peer(b.node, 1, 10000));
    troupe_addr echo_b2 = lookup(&a, 2, "test");
    ck_assert_ok(host_ask(a.rt, echo_b2, "\xa1y", 5000, &r));
    ck_assert_mem_eq(r.body, "\xa1y", 2);
    /* and back: b reaches a over the link it dialed again */
    troupe_addr echo_a = lookup(&b, 1, "test");
    ck_assert_ok(host_ask(b.rt, echo_a, "\xa1z", 5000, &r));
    side_close(&a);
    side_close(&b);
    free(ua);
    free(ub);
    nng_fini();
}
END_TEST

static bool
bad_frames_at_least(void *arg)
{
    troupe_node_stats st;
    troupe_node_stats_get(arg, &st);
    return st.bad_frames >= 4;
}

START_TEST(test_transport_inbox_drops_malformed_and_stale_frames)
{
    struct side a;
    char *ua = unique_url("tcp", "a");
    side_open(&a, 1, NULL, ua);
    struct raw r;
    raw_open(&r, troupe_node_url(a.node), 7, 0x77);
    ck_assert_ok(raw_handshake(&r));
    char bomb[] = "\xdd\xff\xff\xff\xff", reserved[] = "\xc1", empty[] = "";
    ck_assert_int_eq(raw_send(&r, bomb, 5), 0);
    ck_assert_int_eq(raw_send(&r, reserved, 1), 0);
    ck_assert_int_eq(raw_send(&r, empty, 0), 0);
    unsigned char junk[3000];
    memset(junk, 0x91, sizeof(junk));
    ck_assert_int_eq(raw_send(&r, junk, sizeof(junk)), 0);
    ck_assert(ts_wait_until(bad_frames_at_least, a.node, 5000));

    /* a DATA frame for another incarnation is dropped; one for any
     * incarnation (0) is delivered */
    troupe_msg *m = seq_msg(K_COUNT, 0);
    m->to = a.actor;
    raw_data(&r, &m, 1, 0x5eed);
    raw_data(&r, &m, 1, 0);
    struct count_at_least c = {&a.sh.count, 1};
    ck_assert(ts_wait_until(count_reached, &c, 5000));
    troupe_node_stats st;
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_eq(st.stale_frames, 1);
    ck_assert_uint_eq(atomic_load(&a.sh.count), 1);
    /* misrouted: an envelope for another node is not delivered here */
    m->to = (troupe_addr){5, a.actor.slot, a.actor.gen};
    raw_data(&r, &m, 1, 0);
    troupe_msg_destroy(m);
    /* the node still works after all of that */
    m = seq_msg(K_COUNT, 1);
    m->to = a.actor;
    raw_data(&r, &m, 1, 0);
    troupe_msg_destroy(m);
    c.want = 2;
    ck_assert(ts_wait_until(count_reached, &c, 5000));
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_ge(st.deliver_fail, 1);
    raw_close(&r);
    side_close(&a);
    free(ua);
    nng_fini();
}
END_TEST

START_TEST(test_transport_bad_arguments)
{
    struct side a;
    char *ua = unique_url("inproc", "a");
    side_open(&a, 1, NULL, ua);
    troupe_node *n = NULL;
    ck_assert_err(troupe_node_create(NULL, a.rt, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_create(&n, NULL, NULL), TROUPE_EINVAL);
    troupe_node_opts bad = {.batch_max = TROUPE_WIRE_BATCH_MAX + 1};
    ck_assert_err(troupe_node_create(&n, a.rt, &bad), TROUPE_EINVAL);
    bad = (troupe_node_opts){.frame_bytes = (size_t)TROUPE_WIRE_FRAME_MAX + 1};
    ck_assert_err(troupe_node_create(&n, a.rt, &bad), TROUPE_EINVAL);
    bad = (troupe_node_opts){.reconnect_min_ms = 500, .reconnect_max_ms = 100};
    ck_assert_err(troupe_node_create(&n, a.rt, &bad), TROUPE_EINVAL);
    bad = (troupe_node_opts){.advertise = ""};
    ck_assert_err(troupe_node_create(&n, a.rt, &bad), TROUPE_EINVAL);
    ck_assert_ptr_null(n);

    ck_assert_err(troupe_node_listen(NULL, "inproc://x"), TROUPE_EINVAL);
    ck_assert_err(troupe_node_listen(a.node, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_listen(a.node, ""), TROUPE_EINVAL);
    ck_assert_err(troupe_node_listen(a.node, "bogus://x"), TROUPE_EINVAL);
    ck_assert_err(troupe_node_listen(a.node, ua), TROUPE_EBUSY);
    ck_assert_ptr_null(troupe_node_url(NULL));
    ck_assert_str_eq(troupe_node_url(a.node), ua);

    ck_assert_err(troupe_node_connect(NULL, ua), TROUPE_EINVAL);
    ck_assert_err(troupe_node_connect(a.node, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_connect(a.node, "bogus://x"), TROUPE_EINVAL);
    uint32_t peer = 0;
    ck_assert_err(troupe_node_connect_wait(NULL, ua, 1, &peer), TROUPE_EINVAL);
    ck_assert_err(troupe_node_connect_wait(a.node, NULL, 1, &peer),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_connect_wait(a.node, ua, 1, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_connect_wait(a.node, "bogus://x", 1, &peer),
                  TROUPE_EINVAL);
    char *nowhere = unique_url("inproc", "nowhere");
    ck_assert_err(troupe_node_connect_wait(a.node, nowhere, 50, &peer),
                  TROUPE_ETIMEDOUT);
    free(nowhere);
    /* our own URL: the HELLO comes back from ourselves */
    ck_assert_err(troupe_node_connect_wait(a.node, ua, 5000, &peer),
                  TROUPE_EINVAL);
    ck_assert_uint_eq(peer, 0);

    ck_assert(!troupe_node_peer_up(NULL, 2));
    ck_assert_int_eq(troupe_node_peer_state(NULL, 2), TROUPE_PEER_UNKNOWN);
    ck_assert_int_eq(troupe_node_peer_state(a.node, 0), TROUPE_PEER_UNKNOWN);
    ck_assert_int_eq(troupe_node_peer_state(a.node, 2), TROUPE_PEER_UNKNOWN);
    ck_assert(!troupe_node_peer_up(a.node, 0));
    ck_assert_err(troupe_node_wait_peer(NULL, 2, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_node_wait_peer(a.node, 0, 1), TROUPE_EINVAL);

    troupe_msg *m = NULL;
    ck_assert_err(troupe_node_lookup_msg(NULL, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup_msg("x", NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup_msg("", &m), TROUPE_EINVAL);
    char longname[300];
    memset(longname, 'n', sizeof(longname));
    longname[256] = '\0';
    ck_assert_err(troupe_node_lookup_msg(longname, &m), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    troupe_addr ad;
    ck_assert_err(troupe_node_lookup_result(NULL, &ad), TROUPE_EINVAL);
    ck_assert_ok(troupe_node_lookup_msg("x", &m));
    ck_assert_err(troupe_node_lookup_result(m, NULL), TROUPE_EINVAL);
    /* a request is not a well-formed answer */
    ck_assert_err(troupe_node_lookup_result(m, &ad), TROUPE_EPROTO);
    m->err = TROUPE_ENOENT;
    ck_assert_err(troupe_node_lookup_result(m, &ad), TROUPE_ENOENT);
    troupe_msg_destroy(m);

    struct ask_res r = {0};
    ck_assert_err(troupe_node_lookup(NULL, 1, "x", 1, lookup_cb, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup(a.node, 0, "x", 1, lookup_cb, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup(a.node, 1, NULL, 1, lookup_cb, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup(a.node, 1, "", 1, lookup_cb, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup(a.node, 1, longname, 1, lookup_cb, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup(a.node, 1, "x", 1, NULL, &r),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_node_lookup(a.node, 1, "x", 0, lookup_cb, &r),
                  TROUPE_EINVAL);

    troupe_node_stats st;
    memset(&st, 0xff, sizeof(st));
    troupe_node_stats_get(NULL, &st);
    ck_assert_uint_eq(st.msgs_sent, 0);
    troupe_node_stats_get(a.node, NULL);
    ck_assert_err(troupe_node_stop(NULL, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_stop(a.node, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_node_stop_wait(NULL), TROUPE_EINVAL);
    troupe_node_destroy(NULL);
    side_close(&a);
    free(ua);
    nng_fini();
}
END_TEST

START_TEST(test_transport_node_without_peers_shuts_down_cleanly)
{
    /* create, listen on all three schemes, destroy: no leak, no hang */
    struct side a;
    char *ua = unique_url("inproc", "a"), *ut = unique_url("tcp", "a"),
         *ui = unique_url("ipc", "a");
    side_open(&a, 1, NULL, ua);
    ck_assert_ok(troupe_node_listen(a.node, ut));
    ck_assert_ok(troupe_node_listen(a.node, ui));
    ck_assert_ok(troupe_node_connect(a.node, ua)); /* ourselves: retired */
    ck_assert_int_eq(troupe_node_peer_state(a.node, 1), TROUPE_PEER_UNKNOWN);
    side_close(&a);
    free(ua);
    free(ut);
    free(ui);
    nng_fini();
}
END_TEST

/* ---- stop, stop_wait, destroy ---- */

/* What a stop callback saw. */
struct stopped {
    _Atomic int calls;
    troupe_node *node;
    char thread[16];
    bool destroy; /* destroy the node from the callback */
};

static void
on_node_stopped(troupe_node *n, void *arg)
{
    struct stopped *st = arg;
    st->node = n;
    pthread_getname_np(pthread_self(), st->thread, sizeof(st->thread));
    if (st->destroy)
        troupe_node_destroy(n);
    atomic_fetch_add(&st->calls, 1);
}

static bool
stop_seen(void *arg)
{
    return atomic_load(&((struct stopped *)arg)->calls) > 0;
}

/* Two connected nodes; a's runtime shut down, as the contract asks. */
static void
stop_pair_open(struct side *a, struct side *b)
{
    char *ua = unique_url("tcp", "a"), *ub = unique_url("tcp", "b");
    side_open(a, 1, NULL, ua);
    side_open(b, 2, NULL, ub);
    connect_pair(a, b);
    free(ua);
    free(ub);
    ck_assert_ok(troupe_runtime_shutdown_wait(a->rt));
}

/* After a's node is gone: the rest of both sides. */
static void
stop_pair_close(struct side *a, struct side *b)
{
    troupe_runtime_destroy(a->rt);
    a->rt = NULL;
    side_close(b);
    nng_fini();
}

/* The callback fires once, on the sweep thread, never inside the call;
 * destroy (which joins that thread) shows no second call was on its way. */
START_TEST(test_transport_stop_calls_back_once_on_the_sweep_thread)
{
    struct side a, b;
    stop_pair_open(&a, &b);
    struct stopped st = {0};
    ck_assert_ok(troupe_node_stop(a.node, on_node_stopped, &st));
    ck_assert_err(troupe_node_listen(a.node, "inproc://late"), TROUPE_ECLOSED);
    ck_assert(ts_wait_until(stop_seen, &st, 10000));
    ck_assert_ptr_eq(st.node, a.node);
    ck_assert_str_eq(st.thread, "troupe-sweep");
    troupe_node_destroy(a.node);
    ck_assert_int_eq(atomic_load(&st.calls), 1);
    stop_pair_close(&a, &b);
}
END_TEST

START_TEST(test_transport_stop_callback_may_destroy_the_node)
{
    struct side a, b;
    stop_pair_open(&a, &b);
    struct stopped st = {.destroy = true};
    ck_assert_ok(troupe_node_stop(a.node, on_node_stopped, &st));
    ck_assert(ts_wait_until(stop_seen, &st, 10000));
    ck_assert_int_eq(atomic_load(&st.calls), 1);
    stop_pair_close(&a, &b);
}
END_TEST

START_TEST(test_transport_stop_wait_after_stop_is_estate)
{
    struct side a, b;
    stop_pair_open(&a, &b);
    struct stopped st = {0};
    ck_assert_ok(troupe_node_stop(a.node, on_node_stopped, &st));
    ck_assert_err(troupe_node_stop_wait(a.node), TROUPE_ESTATE);
    ck_assert_err(troupe_node_stop(a.node, on_node_stopped, &st),
                  TROUPE_ESTATE);
    ck_assert(ts_wait_until(stop_seen, &st, 10000));
    ck_assert_err(troupe_node_stop_wait(a.node), TROUPE_ESTATE);
    troupe_node_destroy(a.node);
    ck_assert_int_eq(atomic_load(&st.calls), 1);
    stop_pair_close(&a, &b);
}
END_TEST

struct block_post {
    troupe_node *node;
    _Atomic int err; /* -1 until the posted call ran */
};

static void
post_node_stop_wait(void *arg, troupe_runtime *rt)
{
    (void)rt;
    struct block_post *b = arg;
    atomic_store(&b->err, (int)troupe_node_stop_wait(b->node));
}

static bool
block_post_ran(void *arg)
{
    return atomic_load(&((struct block_post *)arg)->err) != -1;
}

/* On scheduler 0 the blocking twin refuses and stops nothing: the node
 * still listens; the test's thread then stops it (side_close). */
START_TEST(test_transport_stop_wait_on_a_scheduler_is_edeadlk)
{
    struct side a;
    char *ua = unique_url("inproc", "a"), *ua2 = unique_url("inproc", "a2");
    side_open(&a, 1, NULL, ua);
    struct block_post b = {.node = a.node};
    atomic_store(&b.err, -1);
    ck_assert_ok(troupe_runtime_post(a.rt, post_node_stop_wait, &b));
    ck_assert(ts_wait_until(block_post_ran, &b, 10000));
    ck_assert_err(atomic_load(&b.err), TROUPE_EDEADLK);
    ck_assert_ok(troupe_node_listen(a.node, ua2));
    side_close(&a);
    free(ua);
    free(ua2);
    nng_fini();
}
END_TEST

/* Run with SIGABRT expected. */
START_TEST(test_transport_destroy_of_a_running_node_aborts)
{
    struct side a;
    char *ua = unique_url("inproc", "a");
    side_open(&a, 1, NULL, ua);
    free(ua);
    troupe_node_destroy(a.node);
}
END_TEST

/* ---- the node's log goes to the runtime's logger ---- */

struct logged {
    troupe_runtime *rt;
    troupe_node *node;
    struct caplog log;
};

static void
logged_open(struct logged *s, uint32_t id, const char *listen)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->log.mu, NULL);
    troupe_runtime_opts ro = {
        .schedulers = 1,
        .workers = 1,
        .node_id = id,
        .logger = {.fn = cap_fn, .ctx = &s->log, .level = TROUPE_LOG_INFO}};
    ck_assert_ok(troupe_runtime_create(&s->rt, &ro));
    ck_assert_ok(troupe_node_create(&s->node, s->rt, NULL));
    ck_assert_ok(troupe_node_listen(s->node, listen));
}

static void
logged_close(struct logged *s)
{
    ck_assert_ok(troupe_runtime_shutdown_wait(s->rt));
    ck_assert_ok(troupe_node_stop_wait(s->node));
    troupe_node_destroy(s->node);
    troupe_runtime_destroy(s->rt);
    pthread_mutex_destroy(&s->log.mu);
}

/* Two logged nodes (ids ia, ib) listening on tcp loopback, with the
 * process's stderr captured until pair_close, which checks that the
 * library wrote nothing to it. */
struct pair {
    struct logged a, b;
    FILE *err;
    int old;
};

static void
pair_open(struct pair *p, uint32_t ia, uint32_t ib)
{
    p->old = stderr_capture(&p->err);
    char *ua = unique_url("tcp", "la"), *ub = unique_url("tcp", "lb");
    logged_open(&p->a, ia, ua);
    logged_open(&p->b, ib, ub);
    free(ua);
    free(ub);
}

static void
pair_close(struct pair *p)
{
    logged_close(&p->a);
    long n = stderr_restore(p->old, p->err);
    ck_assert_msg(n == 0, "the library wrote %ld bytes to stderr", n);
    nng_fini();
}

START_TEST(test_transport_node_logs_peers_through_the_runtime_logger)
{
    struct pair p;
    pair_open(&p, 1, 2);
    /* open mode is worth a warning, through the logger */
    cap_expect(&p.a.log, "warn transport this node accepts any peer");
    uint32_t peer = 0;
    ck_assert_ok(troupe_node_connect_wait(p.a.node, troupe_node_url(p.b.node),
                                          10000, &peer));
    ck_assert_uint_eq(peer, 2);
    ck_assert_ok(troupe_node_wait_peer(p.b.node, 1, 10000));
    cap_expect(&p.a.log, "info transport connected to node 2 at ");
    cap_expect(&p.b.log, "info transport node 1 connected");
    /* b dials back: a sees b's link arrive too */
    cap_expect(&p.a.log, "info transport node 2 connected");
    logged_close(&p.b);
    cap_expect(&p.a.log, "info transport lost the connection to node 2 at ");
    cap_expect(&p.a.log, "info transport node 2 disconnected");
    pair_close(&p);
}
END_TEST

START_TEST(test_transport_two_nodes_of_one_id_are_logged)
{
    struct pair p;
    pair_open(&p, 1, 1);
    /* b dials a: a answers as node 1, b's own id */
    ck_assert_ok(troupe_node_connect(p.b.node, troupe_node_url(p.a.node)));
    cap_expect(&p.b.log, "warn transport tcp://");
    cap_expect(&p.b.log, "two nodes share id 1");
    logged_close(&p.b);
    pair_close(&p);
}
END_TEST

Suite *
transport_suite(void)
{
    Suite *s = suite_create("transport");
    TCase *tc = tcase_create("nodes");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_transport_inproc_sends_arrive_once_in_order);
    tcase_add_test(tc, test_transport_tcp_sends_arrive_once_in_order);
    tcase_add_test(tc, test_transport_ipc_sends_arrive_once_in_order);
    tcase_add_test(tc, test_transport_inproc_ask_reply_both_ways);
    tcase_add_test(tc, test_transport_tcp_ask_reply_both_ways);
    tcase_add_test(tc, test_transport_lookup_and_node_address);
    tcase_add_test(tc, test_transport_lookup_of_own_id_needs_no_worker);
    tcase_add_test(tc, test_transport_unknown_node_is_eunreachable_at_once);
    tcase_add_test(tc,
                   test_transport_ask_to_vanished_peer_fails_before_deadline);
    tcase_add_test(tc,
                   test_transport_queued_ask_past_deadline_gets_error_reply);
    tcase_add_test(tc, test_transport_queue_to_a_down_peer_is_bounded);
    tcase_add_test(tc, test_transport_queue_bytes_are_bounded);
    tcase_add_test(tc, test_transport_frames_batch_under_load);
    tcase_add_test(
        tc, test_transport_large_bodies_travel_and_oversized_are_etoobig);
    tcase_add_test(tc, test_transport_reconnects_after_peer_restarts);
    tcase_add_test(tc, test_transport_inbox_drops_malformed_and_stale_frames);
    tcase_add_test(tc, test_transport_bad_arguments);
    tcase_add_test(tc, test_transport_node_without_peers_shuts_down_cleanly);
    tcase_add_test(tc, test_transport_stop_calls_back_once_on_the_sweep_thread);
    tcase_add_test(tc, test_transport_stop_callback_may_destroy_the_node);
    tcase_add_test(tc, test_transport_stop_wait_after_stop_is_estate);
    tcase_add_test(tc, test_transport_stop_wait_on_a_scheduler_is_edeadlk);
    tcase_add_test_raise_signal(
        tc, test_transport_destroy_of_a_running_node_aborts, SIGABRT);
    tcase_add_test(tc,
                   test_transport_node_logs_peers_through_the_runtime_logger);
    tcase_add_test(tc, test_transport_two_nodes_of_one_id_are_logged);
    suite_add_tcase(s, tc);
    return s;
}
