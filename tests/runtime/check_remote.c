/* Messages from other nodes (troupe_runtime_deliver): local-only kinds,
 * error replies at once, replies matched on the node that was asked. The
 * transport is simulated: a remote hook that keeps what it is handed. */
#include <stdatomic.h>

#include "rtest.h"
#include "twire.h"

enum { K_PUB, K_PRIV, K_ASK, K_REPLY, K_GO, K_HOLD, K_N };

#define PEER 7u  /* a node that talks to us */
#define OTHER 9u /* a node that was not asked */

static struct {
    _Atomic int pub, priv, replies;
    troupe_err reply_err;
    uint64_t reply_v;
} got;

/* Counts each kind it handles; answers an ask with its value + 1. */
static troupe_err
h_srv(troupe_actor *self, void *st, const troupe_msg *m)
{
    atomic_fetch_add(m->kind == K_PUB ? &got.pub : &got.priv, 1);
    if (m->corr != 0) {
        troupe_msg *r = mkv(0, msgv(m) + 1);
        return troupe_reply(self, m, &r);
    }
    return TROUPE_OK;
}

static const troupe_handler_fn srv_h[K_N] = {[K_PUB] = h_srv, [K_PRIV] = h_srv};
static const troupe_actor_def srv_def = {.name = "srv",
                                         .handlers = srv_h,
                                         .n_handlers = K_N,
                                         .remote_kinds = TROUPE_KIND_BIT(K_PUB),
                                         .mailbox_cap = 2};

static troupe_msg *
from_peer(uint32_t kind, troupe_addr to, uint64_t corr, uint64_t v)
{
    troupe_msg *m = mkv(kind, v);
    m->to = to;
    m->from = (troupe_addr){PEER, 3, 0xabcd};
    m->corr = corr;
    return m;
}

static troupe_addr
spawn0(rt_fixture *f, const troupe_actor_def *d)
{
    return rtf_spawn_on(f->rt, d, 0);
}

static void
start(rt_fixture *f, unsigned n)
{
    rtf_start(f, n);
    memset(&got, 0, sizeof(got));
    ts_wire_install(f->rt);
}

static void
stop(rt_fixture *f)
{
    rtf_stop(f);
    ts_wire_clear();
}

/* The reply the node sent for a refused ask. */
static void
assert_refusal(size_t i, troupe_addr target, uint64_t corr, troupe_err err)
{
    ts_wire_rec r = ts_wire_at(i);
    ck_assert(r.flags & TROUPE_MSG_REPLY);
    ck_assert_uint_eq(r.to.node, PEER);
    ck_assert_uint_eq(r.to.slot, 3);
    ck_assert(troupe_addr_eq(r.from, target));
    ck_assert_uint_eq(r.corr, corr);
    ck_assert_err(r.err, err);
    ck_assert_uint_eq(r.len, 0);
}

static bool
pub_seen(void *arg)
{
    return atomic_load(&got.pub) >= *(int *)arg;
}

static bool
priv_seen(void *arg)
{
    (void)arg;
    return atomic_load(&got.priv) >= 1;
}

/* Every message from the network has been taken out of its mailbox (and,
 * as that happens inside the turn that handles it, handled). */
static bool
net_drained(void *arg)
{
    troupe_runtime_stats st;
    troupe_runtime_stats_get(arg, &st);
    return st.net_bytes == 0;
}

START_TEST(test_local_only_kind_from_network_is_refused_never_handled)
{
    rt_fixture f;
    start(&f, 1);
    troupe_addr a = spawn0(&f, &srv_def);
    /* an ask of a local-only kind: refused, answered at once */
    troupe_msg *m = from_peer(K_PRIV, a, 11, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    assert_refusal(0, a, 11, TROUPE_EINVAL);
    /* a plain send of it: dropped and counted, nobody to answer */
    m = from_peer(K_PRIV, a, 0, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EINVAL);
    /* kinds beyond the bitmap and beyond the handler table */
    m = from_peer(64, a, 0, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EINVAL);
    m = from_peer(1000, a, 12, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EINVAL);
    assert_refusal(1, a, 12, TROUPE_EINVAL);
    /* the declared kind goes through, and is answered by the handler */
    m = from_peer(K_PUB, a, 13, 41);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    int one = 1;
    size_t three = 3;
    ck_assert(ts_run_until(&f.loop, pub_seen, &one, 5000));
    ck_assert(ts_run_until(&f.loop, ts_wire_has, &three, 5000));
    ck_assert_uint_eq(ts_wire_at(2).corr, 13);
    ck_assert_uint_eq(ts_wire_at(2).v, 42);
    /* the same local-only kind sent locally is handled */
    m = mk(K_PRIV);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    ck_assert(ts_run_until(&f.loop, priv_seen, NULL, 5000));
    troupe_runtime_stats st;
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.remote_refused_kind, 4);
    ck_assert_uint_eq(st.error_replies, 2);
    stop(&f);
    ck_assert_int_eq(atomic_load(&got.priv), 1); /* only the local one */
}
END_TEST

START_TEST(test_remote_ask_to_missing_or_stale_actor_is_answered_edead_at_once)
{
    rt_fixture f;
    start(&f, 1);
    troupe_addr a = spawn0(&f, &srv_def);
    troupe_addr never = {1, 3000, 5};
    troupe_addr stale = {1, a.slot, a.gen + 1};
    troupe_msg *m = from_peer(K_PUB, never, 21, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EDEAD);
    m = from_peer(K_PUB, stale, 22, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EDEAD);
    /* answered inside the call, before any deadline could pass */
    ck_assert_uint_eq(ts_wire_count(), 2);
    assert_refusal(0, never, 21, TROUPE_EDEAD);
    assert_refusal(1, stale, 22, TROUPE_EDEAD);
    /* a refused reply is never answered (no reply to a reply) */
    m = from_peer(0, never, 23, 0);
    m->flags = TROUPE_MSG_REPLY;
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EDEAD);
    /* an ask claiming a local asker is not answered: the node would
     * answer itself */
    m = from_peer(K_PUB, never, 24, 0);
    m->from = (troupe_addr){1, a.slot, a.gen};
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EDEAD);
    ck_assert_uint_eq(ts_wire_count(), 2);
    /* the transport may refuse an error reply: counted, not retried */
    ts_wire_refuse(TROUPE_EFULL);
    m = from_peer(K_PUB, never, 25, 0);
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EDEAD);
    troupe_runtime_stats st;
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.remote_refused_dead, 5);
    ck_assert_uint_eq(st.error_replies, 2);
    ck_assert_uint_eq(st.error_replies_lost, 1);
    stop(&f);
}
END_TEST

START_TEST(test_remote_ask_to_full_mailbox_is_answered_efull_and_no_bypass)
{
    rt_fixture f;
    start(&f, 1);
    troupe_addr a = spawn0(&f, &srv_def); /* mailbox_cap 2 */
    troupe_msg *m = mk(K_PUB);            /* handled: the mailbox is empty */
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    int one = 1;
    ck_assert(ts_run_until(&f.loop, pub_seen, &one, 5000));
    /* The loop does not run: the mailbox fills. A peer's system flag is
     * stripped, so it cannot bypass the bound. */
    for (int i = 0; i < 2; i++) {
        m = from_peer(K_PUB, a, 0, 0);
        m->flags = 0xffffffffu & ~(uint32_t)TROUPE_MSG_REPLY;
        ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    }
    m = from_peer(K_PUB, a, 31, 0);
    m->flags = TROUPE_MSG_SYSTEM;
    ck_assert_err(troupe_runtime_deliver(f.rt, &m), TROUPE_EFULL);
    ck_assert_uint_eq(ts_wire_count(), 1);
    assert_refusal(0, a, 31, TROUPE_EFULL);
    int three = 3;
    ck_assert(ts_run_until(&f.loop, pub_seen, &three, 5000));
    ck_assert(ts_run_until(&f.loop, net_drained, f.rt, 5000));
    troupe_runtime_stats st;
    troupe_runtime_stats_get(f.rt, &st);
    ck_assert_uint_eq(st.remote_refused_full, 1);
    ck_assert_uint_eq(st.net_bytes, 0); /* all taken out again */
    stop(&f);
}
END_TEST

/* ---- replies matched on the node that was asked ---- */

static troupe_addr ask_to;
static uint64_t last_corr;

static troupe_err
cli_go(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_msg *q = mkv(K_ASK, 1);
    return troupe_ask(self, ask_to, &q, 60000, K_REPLY, &last_corr);
}

static troupe_err
cli_reply(troupe_actor *self, void *st, const troupe_msg *m)
{
    ck_assert_uint_eq(m->corr, last_corr);
    got.reply_err = m->err;
    got.reply_v = msgv(m);
    atomic_fetch_add(&got.replies, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn cli_h[K_N] = {
    [K_GO] = cli_go, [K_REPLY] = cli_reply};
static const troupe_actor_def cli_def = {
    .name = "cli", .handlers = cli_h, .n_handlers = K_N};

/* holds the request it is asked, to answer later */
static troupe_msg held;

static troupe_err
srv_hold(troupe_actor *self, void *st, const troupe_msg *m)
{
    held.from = m->from;
    held.corr = m->corr;
    atomic_fetch_add(&got.priv, 1);
    return TROUPE_OK;
}

static troupe_err
srv_answer(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_msg *r = mkv(0, 500);
    return troupe_reply(self, &held, &r);
}

static const troupe_handler_fn hold_h[K_N] = {
    [K_ASK] = srv_hold, [K_GO] = srv_answer};
static const troupe_actor_def hold_def = {
    .name = "hold", .handlers = hold_h, .n_handlers = K_N};

static bool
replies_seen(void *arg)
{
    return atomic_load(&got.replies) >= *(int *)arg;
}

static bool
held_seen(void *arg)
{
    (void)arg;
    return atomic_load(&got.priv) >= 1;
}

/* A reply from the network with corr, claiming to come from `from`. */
static troupe_msg *
net_reply(troupe_addr to, troupe_addr from, uint64_t corr, uint64_t v)
{
    troupe_msg *r = mkv(0, v);
    r->flags = TROUPE_MSG_REPLY;
    r->to = to;
    r->from = from;
    r->corr = corr;
    return r;
}

START_TEST(test_remote_reply_completes_an_ask_only_from_the_asked_node)
{
    rt_fixture f;
    start(&f, 1);
    troupe_addr cli = spawn0(&f, &cli_def);
    ask_to = (troupe_addr){PEER, 40, 41};
    troupe_msg *m = mk(K_GO);
    ck_assert_ok(troupe_runtime_send(f.rt, cli, &m));
    int one = 1;
    size_t sent = 1;
    ck_assert(ts_run_until(&f.loop, ts_wire_has, &sent, 5000));
    uint64_t corr = ts_wire_at(0).corr;
    ck_assert_uint_eq(corr, last_corr);
    /* Another node that learned the id: its reply must not complete the
     * ask (if it did, the client would see 666 and drop the real one as
     * late). */
    m = net_reply(cli, (troupe_addr){OTHER, 40, 41}, corr, 666);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    /* nor one naming this node */
    m = net_reply(cli, (troupe_addr){1, 40, 41}, corr, 667);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    ck_assert(ts_run_until(&f.loop, net_drained, f.rt, 5000));
    ck_assert_int_eq(atomic_load(&got.replies), 0);
    /* the asked node's reply, from a worker there (slot 0), completes it */
    m = net_reply(cli, (troupe_addr){PEER, 0, 0}, corr, 42);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    ck_assert(ts_run_until(&f.loop, replies_seen, &one, 5000));
    ck_assert_uint_eq(got.reply_v, 42);
    ck_assert_err(got.reply_err, TROUPE_OK);
    /* a second reply is late and dropped */
    m = net_reply(cli, (troupe_addr){PEER, 40, 41}, corr, 43);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    ck_assert(ts_run_until(&f.loop, net_drained, f.rt, 5000));
    stop(&f);
    ck_assert_int_eq(atomic_load(&got.replies), 1);
}
END_TEST

START_TEST(test_network_reply_never_completes_an_ask_sent_to_a_local_actor)
{
    rt_fixture f;
    start(&f, 1);
    troupe_addr srv = spawn0(&f, &hold_def);
    troupe_addr cli = spawn0(&f, &cli_def);
    ask_to = srv;
    troupe_msg *m = mk(K_GO);
    ck_assert_ok(troupe_runtime_send(f.rt, cli, &m));
    ck_assert(ts_run_until(&f.loop, held_seen, NULL, 5000));
    /* A peer forges the reply with the right id, claiming the server's
     * own address, and then the server answers for real. */
    m = net_reply(cli, srv, held.corr, 666);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    m = net_reply(cli, (troupe_addr){PEER, 0, 0}, held.corr, 667);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    ck_assert(ts_run_until(&f.loop, net_drained, f.rt, 5000));
    ck_assert_int_eq(atomic_load(&got.replies), 0);
    m = mk(K_GO);
    ck_assert_ok(troupe_runtime_send(f.rt, srv, &m));
    int one = 1;
    ck_assert(ts_run_until(&f.loop, replies_seen, &one, 5000));
    ck_assert_uint_eq(got.reply_v, 500);
    stop(&f);
    ck_assert_int_eq(atomic_load(&got.replies), 1);
}
END_TEST

static struct {
    int calls;
    troupe_err err;
    uint64_t v;
} hc;

static void
host_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)arg;
    hc.calls++;
    hc.err = err;
    hc.v = reply != NULL ? msgv(reply) : 0;
}

static bool
host_called(void *arg)
{
    (void)arg;
    return hc.calls > 0;
}

START_TEST(test_host_ask_to_remote_node_matches_only_that_node)
{
    rt_fixture f;
    start(&f, 1);
    memset(&hc, 0, sizeof(hc));
    troupe_addr peer = {PEER, 40, 41};
    troupe_msg *m = mk(K_ASK);
    ck_assert_ok(troupe_runtime_ask(f.rt, peer, &m, 60000, host_cb, NULL));
    size_t sent = 1;
    ck_assert(ts_run_until(&f.loop, ts_wire_has, &sent, 5000));
    uint64_t corr = ts_wire_at(0).corr;
    troupe_addr asker = ts_wire_at(0).from;
    m = net_reply(asker, (troupe_addr){OTHER, 40, 41}, corr, 666);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    m = net_reply(asker, peer, corr, 42);
    ck_assert_ok(troupe_runtime_deliver(f.rt, &m));
    ck_assert(ts_run_until(&f.loop, host_called, NULL, 5000));
    ck_assert_err(hc.err, TROUPE_OK);
    ck_assert_uint_eq(hc.v, 42);
    stop(&f);
    ck_assert_int_eq(hc.calls, 1);
}
END_TEST

Suite *
remote_suite(void)
{
    Suite *s = suite_create("remote");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc,
                   test_local_only_kind_from_network_is_refused_never_handled);
    tcase_add_test(
        tc,
        test_remote_ask_to_missing_or_stale_actor_is_answered_edead_at_once);
    tcase_add_test(
        tc, test_remote_ask_to_full_mailbox_is_answered_efull_and_no_bypass);
    tcase_add_test(tc,
                   test_remote_reply_completes_an_ask_only_from_the_asked_node);
    tcase_add_test(
        tc, test_network_reply_never_completes_an_ask_sent_to_a_local_actor);
    tcase_add_test(tc, test_host_ask_to_remote_node_matches_only_that_node);
    suite_add_tcase(s, tc);
    return s;
}
