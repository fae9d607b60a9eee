/*
 * Remote actors: two runtimes in one process talking over inproc, ipc and
 * tcp loopback. Sends, asks (host and actor), name lookup, unreachable
 * nodes, bounded queues, batching, reconnect after a peer restarts, and
 * hostile frames arriving at an inbox.
 */
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "suites.h"
#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/transport.h"
#include "troupe/wire.h"

/* ---- test actors ---- */

enum { K_ECHO = 0, K_SINK = 1, K_GO = 2, K_REPLY = 3, K_COUNT = 4 };

struct shared {
    _Atomic uint64_t count;
    _Atomic uint64_t out_of_order;
    uint64_t next_seq;
    troupe_addr target;
    _Atomic int done;
    troupe_err err;
    size_t len;
    char body[64];
};

struct st {
    struct shared *sh;
};

static troupe_err
st_init(troupe_actor *self, void *state, void *arg)
{
    ((struct st *)state)->sh = arg;
    return TROUPE_OK;
}

static troupe_err
on_echo(troupe_actor *self, void *state, const troupe_msg *msg)
{
    troupe_msg *r = NULL;
    troupe_err e = troupe_msg_create(&r, msg->kind, troupe_msg_data(msg),
                                     troupe_msg_len(msg));
    if (e != TROUPE_OK)
        return e;
    return troupe_reply(self, msg, &r) == TROUPE_OK ? TROUPE_OK : TROUPE_OK;
}

/* Counts messages whose body is a uint sequence number; checks order. */
static troupe_err
on_sink(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    troupe_reader r;
    uint64_t seq = 0;
    troupe_reader_init_msg(&r, msg);
    troupe_read_uint(&r, &seq);
    if (troupe_read_end(&r) != TROUPE_OK || seq != sh->next_seq)
        atomic_fetch_add(&sh->out_of_order, 1);
    sh->next_seq = seq + 1;
    atomic_fetch_add(&sh->count, 1);
    return TROUPE_OK;
}

/* Asks sh->target with the GO message's body; the reply lands in K_REPLY. */
static troupe_err
on_go(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, K_ECHO, troupe_msg_data(msg),
                                     troupe_msg_len(msg));
    if (e == TROUPE_OK)
        e = troupe_ask(self, sh->target, &m, 3000, K_REPLY, NULL);
    if (e != TROUPE_OK) {
        sh->err = e;
        atomic_store(&sh->done, 1);
    }
    return TROUPE_OK;
}

static troupe_err
on_reply(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    sh->err = msg->err;
    sh->len = troupe_msg_len(msg);
    if (sh->len > 0 && sh->len <= sizeof(sh->body))
        memcpy(sh->body, troupe_msg_data(msg), sh->len);
    atomic_store(&sh->done, 1);
    return TROUPE_OK;
}

static troupe_err
on_count(troupe_actor *self, void *state, const troupe_msg *msg)
{
    atomic_fetch_add(&((struct st *)state)->sh->count, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn handlers[] = {on_echo, on_sink, on_go, on_reply,
                                             on_count};
static const troupe_actor_def test_actor = {
    .name = "test",
    .state_size = sizeof(struct st),
    .init = st_init,
    .handlers = handlers,
    .n_handlers = 5,
    .remote_kinds = TROUPE_KIND_BIT(K_ECHO) | TROUPE_KIND_BIT(K_SINK) |
                    TROUPE_KIND_BIT(K_COUNT),
};

/* ---- two nodes ---- */

struct side {
    troupe_runtime *rt;
    troupe_node *node;
    struct shared sh;
    troupe_addr actor;
};

static void
side_open(struct side *s, uint32_t id, const troupe_node_opts *o,
          const char *listen)
{
    memset(s, 0, sizeof(*s));
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 1, .node_id = id};
    ck_assert_ok(troupe_runtime_create(&s->rt, &ro));
    ck_assert_ok(troupe_node_create(&s->node, s->rt, o));
    if (listen != NULL)
        ck_assert_ok(troupe_node_listen(s->node, listen));
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = &s->sh;
    so.name = "test";
    ck_assert_ok(troupe_actor_spawn(s->rt, &test_actor, &so, &s->actor));
}

static void
side_close(struct side *s)
{
    if (s->rt == NULL)
        return;
    ck_assert_ok(troupe_runtime_shutdown_wait(s->rt));
    troupe_node_destroy(s->node);
    troupe_runtime_destroy(s->rt);
    s->rt = NULL;
    s->node = NULL;
}

static void
connect_pair(struct side *a, struct side *b)
{
    uint32_t peer = 0;
    ck_assert_ok(troupe_node_connect_wait(a->node, troupe_node_url(b->node),
                                          10000, &peer));
    ck_assert_uint_eq(peer, troupe_runtime_node_id(b->rt));
    ck_assert(troupe_node_peer_up(a->node, peer));
    ck_assert_ok(
        troupe_node_wait_peer(a->node, troupe_runtime_node_id(b->rt), 10000));
    ck_assert_ok(
        troupe_node_wait_peer(b->node, troupe_runtime_node_id(a->rt), 10000));
}

static char *
unique_url(const char *scheme, const char *tag)
{
    static int seq;
    char *u = malloc(256);
    if (strcmp(scheme, "tcp") == 0)
        snprintf(u, 256, "tcp://127.0.0.1:0");
    else if (strcmp(scheme, "ipc") == 0)
        snprintf(u, 256, "ipc:///tmp/troupe-%s-%d-%d.ipc", tag, (int)getpid(),
                 seq++);
    else
        snprintf(u, 256, "inproc://troupe-%s-%d-%d", tag, (int)getpid(), seq++);
    return u;
}

/* Host ask with a blocking wait. */
struct ask_res {
    _Atomic int done;
    troupe_err err;
    size_t len;
    char body[128];
    troupe_addr addr;
    uint32_t kind;
};

static void
ask_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    struct ask_res *r = arg;
    r->err = err;
    if (reply != NULL) {
        r->len = troupe_msg_len(reply);
        r->kind = reply->kind;
        if (r->len <= sizeof(r->body) && r->len > 0)
            memcpy(r->body, troupe_msg_data(reply), r->len);
    }
    atomic_store(&r->done, 1);
}

static void
lookup_cb(troupe_runtime *rt, troupe_err err, troupe_addr a, void *arg)
{
    struct ask_res *r = arg;
    r->err = err;
    r->addr = a;
    atomic_store(&r->done, 1);
}

static bool
is_done(void *arg)
{
    return atomic_load(&((struct ask_res *)arg)->done) != 0;
}

static bool
shared_done(void *arg)
{
    return atomic_load(&((struct shared *)arg)->done) != 0;
}

struct count_at_least {
    _Atomic uint64_t *count;
    uint64_t want;
};

static bool
count_reached(void *arg)
{
    struct count_at_least *c = arg;
    return atomic_load(c->count) >= c->want;
}

static troupe_err
host_ask(troupe_runtime *rt, troupe_addr to, const char *body,
         uint32_t timeout_ms, struct ask_res *r)
{
    memset(r, 0, sizeof(*r));
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, K_ECHO, body, body ? strlen(body) : 0));
    troupe_err e = troupe_runtime_ask(rt, to, &m, timeout_ms, ask_cb, r);
    if (e != TROUPE_OK)
        return e;
    ck_assert(ts_wait_until(is_done, r, timeout_ms + 5000));
    return r->err;
}

static troupe_addr
lookup(struct side *from, uint32_t peer, const char *name)
{
    struct ask_res r = {0};
    ck_assert_ok(
        troupe_node_lookup(from->node, peer, name, 3000, lookup_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_ok(r.err);
    ck_assert(!troupe_addr_is_none(r.addr));
    return r.addr;
}

static troupe_msg *
seq_msg(uint32_t kind, uint64_t seq)
{
    troupe_packer p;
    troupe_msg *m = NULL;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, seq);
    ck_assert_ok(troupe_pack_take_msg(&p, kind, &m));
    return m;
}

/* ---- tests ---- */

static bool
link_down_2(void *arg)
{
    troupe_peer_state st = troupe_node_peer_state(arg, 2);
    return st == TROUPE_PEER_DOWN || st == TROUPE_PEER_UNREACHABLE;
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
    troupe_node_stats st;
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_ge(st.msgs_sent, n);
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

START_TEST(test_transport_frames_batch_under_load)
{
    struct side a, b;
    char *ua = unique_url("tcp", "a"), *ub = unique_url("tcp", "b");
    side_open(&a, 1, NULL, ua);
    side_open(&b, 2, NULL, ub);
    connect_pair(&a, &b);
    troupe_addr sink = lookup(&a, 2, "test");
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

/* A raw pair1 socket dialing a node's inbox, for hostile frames. */
static nng_socket
raw_dial(const char *url)
{
    nng_socket s;
    ck_assert_int_eq(nng_pair1_open(&s), 0);
    ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
    return s;
}

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
    char *ua = unique_url("inproc", "a");
    side_open(&a, 1, NULL, ua);
    nng_socket s = raw_dial(ua);
    char bomb[] = "\xdd\xff\xff\xff\xff", reserved[] = "\xc1", empty[] = "";
    ck_assert_int_eq(nng_send(s, bomb, 5, 0), 0);
    ck_assert_int_eq(nng_send(s, reserved, 1, 0), 0);
    ck_assert_int_eq(nng_send(s, empty, 0, 0), 0);
    unsigned char junk[3000];
    memset(junk, 0x91, sizeof(junk));
    ck_assert_int_eq(nng_send(s, junk, sizeof(junk), 0), 0);
    ck_assert(ts_wait_until(bad_frames_at_least, a.node, 5000));

    /* a DATA frame for another incarnation is dropped; one for any
     * incarnation (0) is delivered */
    troupe_msg *m = seq_msg(K_COUNT, 0);
    m->to = a.actor;
    unsigned char buf[256];
    size_t len;
    const troupe_msg *one[1] = {m};
    ck_assert_ok(
        troupe_wire_encode_data(7, 0x5eed, one, 1, buf, sizeof(buf), &len));
    ck_assert_int_eq(nng_send(s, buf, len, 0), 0);
    ck_assert_ok(troupe_wire_encode_data(7, 0, one, 1, buf, sizeof(buf), &len));
    ck_assert_int_eq(nng_send(s, buf, len, 0), 0);
    struct count_at_least c = {&a.sh.count, 1};
    ck_assert(ts_wait_until(count_reached, &c, 5000));
    troupe_node_stats st;
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_eq(st.stale_frames, 1);
    ck_assert_uint_eq(atomic_load(&a.sh.count), 1);
    /* misrouted: an envelope for another node is not delivered here */
    m->to = (troupe_addr){5, a.actor.slot, a.actor.gen};
    ck_assert_ok(troupe_wire_encode_data(7, 0, one, 1, buf, sizeof(buf), &len));
    ck_assert_int_eq(nng_send(s, buf, len, 0), 0);
    troupe_msg_destroy(m);
    /* the node still works after all of that */
    m = seq_msg(K_COUNT, 1);
    m->to = a.actor;
    one[0] = m;
    ck_assert_ok(troupe_wire_encode_data(7, 0, one, 1, buf, sizeof(buf), &len));
    troupe_msg_destroy(m);
    ck_assert_int_eq(nng_send(s, buf, len, 0), 0);
    c.want = 2;
    ck_assert(ts_wait_until(count_reached, &c, 5000));
    troupe_node_stats_get(a.node, &st);
    ck_assert_uint_ge(st.deliver_fail, 1);
    nng_close(s);
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
    suite_add_tcase(s, tc);
    return s;
}
