/*
 * bench_remote: messaging between two nodes over tcp://127.0.0.1, side by
 * side with raw nng 1.5 tuned for the same job (bench/peers/peer_nng_*.c).
 *
 *   bench remote_oneway_64b <v> msgs/s peer nng_pair1 <v> ratio <r>
 *   bench remote_oneway_4k <v> msgs/s peer nng_pair1 <v> ratio <r>
 *   bench remote_ask_64b <v> roundtrips/s peer nng_reqrep <v> ratio <r>
 *   bench remote_ask_4k <v> roundtrips/s peer nng_reqrep <v> ratio <r>
 *
 * Setup. Two standalone runtimes in this process, node ids 1 and 2, each
 * with 1 scheduler and 1 worker-pool thread (idle here), and each with a
 * troupe_node (default options) listening on tcp://127.0.0.1:0; node 1 is
 * connected to node 2 with troupe_node_connect_wait. One scheduler per node
 * because the machine has 2 cores: the two loop threads plus nng's I/O
 * threads already fill them, the node's own work runs on nng's threads
 * (never on a loop), and the actors on each side converse only with the
 * transport, so a second scheduler per node would add threads that compete
 * for the same 2 cores and nothing for them to do (measured: 2 schedulers
 * per node gave the same figures within the noise). The raw nng peers run
 * the same shape: one process, one sending and one receiving thread plus
 * nng's own threads.
 *
 * Payload. Every message body is a msgpack bin holding SIZE payload bytes
 * (64 or 4096; the body is SIZE + 2 or SIZE + 3 bytes), built in place with
 * troupe_body_alloc: one allocation, as the nng peer makes one nng_msg per
 * message. The first 8 payload bytes are the sequence number, the rest zero,
 * as in the nng peer. Receivers read the body with troupe_reader (exactly
 * one bin of SIZE bytes) and the one-way receiver checks the sequence
 * (delivery is in order per pair of nodes). The envelope (kind, addresses,
 * corr, deadline, err) adds about 24 bytes per message on the wire (about
 * 36 for an ask) that raw nng does not carry.
 *
 * One-way (peer_nng_oneway: pair1, 1024-message send and receive buffers,
 * a sender thread blocking on the full buffer). A sender actor on node 1
 * sends N messages to a receiver actor on node 2, which acks every
 * OW_ACK_EVERY messages back; the sender keeps at most OW_WINDOW messages
 * sent and not yet acked. That is the troupe form of the peer's blocking
 * send: a troupe send never blocks, and a send past the per-peer queue's
 * bound fails with EFULL and loses the message, so the flow control is end
 * to end. The window bounds everything in flight at once (the sender's
 * per-peer queue, the frames in nng and TCP, the receiver's mailbox), so
 * neither bound (65536 messages or 64 MiB per peer queue, 65536 per
 * mailbox) is ever reached: the node's `full` and `deliver_fail` counters
 * are printed and stay 0. 4096 is of the order of what the raw peer keeps
 * in flight (2048 messages in its nng buffers, plus what the kernel's TCP
 * buffers hold). Other windows are printed for information (2048 and
 * 16384 at 64 B, 2048 and 8192 at 4 KiB, 3 reps, no peer; 16384 x 4 KiB
 * would pass the queue's 64 MiB bound and end in EFULL). The sender sends
 * at most OW_BURST messages per handler call, then a "more" message to
 * itself so acks are handled between bursts. Time runs from the start
 * message (sent by the main thread) until the receiver has all N; the
 * receiver then sends FIN, which reaches the sender after every ack, so
 * no ack is still in flight when the actors stop.
 *
 * Ask (peer_nng_ask: req/rep with 64 contexts in flight, the rep side
 * echoing the request message back). An asker actor on node 1 looks up the
 * echo actor on node 2 by name (troupe_node_lookup_msg asked of
 * troupe_node_addr(2)), then keeps ASK_INFLIGHT troupe_ask in flight to it;
 * each reply starts the next ask. The echo actor replies with the request's
 * own body (troupe_body_retain: no copy, as the nng rep sends the same
 * message back). Time runs from the first ask until the N-th reply.
 *
 * `bench_remote NAME...` runs only the figures whose names contain one of
 * the arguments (e.g. `bench_remote ask_4k` under perf); without arguments
 * it runs everything.
 *
 * Reps, as in bench_actor: warm-up runs grow until one lasts 0.1 s, each
 * rep is sized to about 1 s, and each of our reps is followed by one
 * single-rep run of the peer, so a neighbour's burst hits both sides alike.
 * Each figure is the median of its side's reps ($BENCH_REPS, default 5).
 */
#include <nng/nng.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "peers/peer_run.h"
#include "troupe/actor.h"
#include "troupe/msg.h"
#include "troupe/pack.h"
#include "troupe/runtime.h"
#include "troupe/transport.h"

#define REP_SECONDS 1.0
#define CALIBRATE_SECONDS 0.1
#define REP_TIMEOUT_S 30
#define MAX_COUNT 50000000LL

#define OW_BURST 1024
#define OW_ACK_EVERY 1024
#define OW_WINDOW 4096
#define ASK_INFLIGHT 64
#define ASK_TIMEOUT_MS 10000
#define ECHO_NAME "bench.echo"

/* ---- small int64 bodies (start, ack): msgpack int 64 ---- */

#define I64_LEN 9

static troupe_err
msg_i64(troupe_msg **out, uint32_t kind, int64_t v)
{
    uint8_t b[I64_LEN];
    uint64_t u = (uint64_t)v;
    b[0] = 0xd3;
    for (int i = 0; i < 8; i++)
        b[1 + i] = (uint8_t)(u >> (56 - 8 * i));
    return troupe_msg_create(out, kind, b, sizeof b);
}

static troupe_err
get_i64(const troupe_msg *m, int64_t *v)
{
    const uint8_t *b = troupe_msg_data(m);
    if (troupe_msg_len(m) != I64_LEN || b[0] != 0xd3)
        return TROUPE_EINVAL;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | b[1 + i];
    *v = (int64_t)u;
    return TROUPE_OK;
}

/* ---- payload bodies: msgpack bin of `size` bytes, seq first ---- */

static troupe_err
msg_payload(troupe_msg **out, uint32_t kind, size_t size, int64_t seq)
{
    size_t hdr = size <= 0xff ? 2 : 3; /* bin 8 / bin 16 (size < 64 KiB) */
    troupe_body *b = NULL;
    void *data = NULL;
    troupe_err e = troupe_body_alloc(hdr + size, &b, &data);
    if (e != TROUPE_OK)
        return e;
    uint8_t *p = data;
    if (hdr == 2) {
        p[0] = 0xc4;
        p[1] = (uint8_t)size;
    } else {
        p[0] = 0xc5;
        p[1] = (uint8_t)(size >> 8);
        p[2] = (uint8_t)size;
    }
    memset(p + hdr, 0, size);
    if (size >= sizeof seq)
        memcpy(p + hdr, &seq, sizeof seq);
    return troupe_msg_create_body(out, kind, &b);
}

/* EPROTO (fails the actor) unless the body is one bin of `size` bytes. */
static troupe_err
read_payload(const troupe_msg *m, size_t size, int64_t *seq)
{
    troupe_reader r;
    const void *bin = NULL;
    size_t len = 0;
    troupe_reader_init_msg(&r, m);
    troupe_read_bin(&r, size, &bin, &len);
    troupe_err e = troupe_read_end(&r);
    if (e != TROUPE_OK)
        return e;
    if (len != size)
        return TROUPE_EPROTO;
    if (seq != NULL && size >= sizeof *seq)
        memcpy(seq, bin, sizeof *seq);
    return TROUPE_OK;
}

/* ---- one run: completion from an actor to the main thread ---- */

struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    double t_start; /* set by an actor that times itself; else 0 */
    double t_end;
    troupe_err err; /* an actor's failure, reported instead of a result */
};

static void
run_init(struct run *r)
{
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->done = 0;
    r->t_start = r->t_end = 0;
    r->err = TROUPE_OK;
}

static void
run_fini(struct run *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

/* Called by an actor: the measured work is complete (the clock stops). */
static void
run_end(struct run *r)
{
    double now = bench_now();
    pthread_mutex_lock(&r->mu);
    r->t_end = now;
    pthread_mutex_unlock(&r->mu);
}

/* Called by an actor: the run is over (err OK) or failed; the first
 * report wins. With OK, no actor touches `r` afterwards. */
static void
run_report(struct run *r, troupe_err err)
{
    double now = bench_now();
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        r->done = 1;
        if (r->t_end == 0)
            r->t_end = now;
        r->err = err;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static int
run_wait(struct run *r)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += REP_TIMEOUT_S;
    int ok = 1;
    pthread_mutex_lock(&r->mu);
    while (!r->done && ok)
        ok = pthread_cond_timedwait(&r->cv, &r->mu, &dl) == 0 || r->done;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* ---- the two nodes ---- */

struct nodes {
    troupe_runtime *rt[2];
    troupe_node *node[2];
    troupe_addr echo; /* on node 2, registered as ECHO_NAME */
};

static void
stop_actor(troupe_runtime *rt, troupe_addr a)
{
    troupe_err e = troupe_actor_stop(rt, a, NULL, NULL);
    if (e != TROUPE_OK && e != TROUPE_EDEAD)
        fprintf(stderr, "bench_remote: stop: %s\n", troupe_err_name(e));
}

static void
print_stats(const char *label, const struct nodes *ns, troupe_node_stats *b1,
            troupe_node_stats *b2)
{
    troupe_node_stats s1, s2;
    troupe_node_stats_get(ns->node[0], &s1);
    troupe_node_stats_get(ns->node[1], &s2);
    uint64_t m1 = s1.msgs_sent - b1->msgs_sent;
    uint64_t f1 = s1.frames_sent - b1->frames_sent;
    uint64_t m2 = s2.msgs_sent - b2->msgs_sent;
    uint64_t f2 = s2.frames_sent - b2->frames_sent;
    printf("%s: node 1 sent %llu msgs in %llu frames (%.1f per frame), "
           "node 2 sent %llu in %llu (%.1f per frame); full %llu, "
           "deliver_fail %llu, gave_up %llu\n",
           label, (unsigned long long)m1, (unsigned long long)f1,
           f1 ? (double)m1 / (double)f1 : 0.0, (unsigned long long)m2,
           (unsigned long long)f2, f2 ? (double)m2 / (double)f2 : 0.0,
           (unsigned long long)(s1.full + s2.full - b1->full - b2->full),
           (unsigned long long)(s1.deliver_fail + s2.deliver_fail -
                                b1->deliver_fail - b2->deliver_fail),
           (unsigned long long)(s1.gave_up + s2.gave_up - b1->gave_up -
                                b2->gave_up));
    *b1 = s1;
    *b2 = s2;
}

/* ---- one-way ---- */

enum { OW_START, OW_MORE, OW_ACK, OW_FIN, OW_DATA, OW_KINDS };

struct ow_recv_arg {
    struct run *run;
    int64_t expect;
    size_t size;
};

struct ow_recv_state {
    int64_t got, expect;
    size_t size;
    struct run *run;
};

static troupe_err
ow_recv_init(troupe_actor *self, void *state, void *arg)
{
    struct ow_recv_state *st = state;
    const struct ow_recv_arg *a = arg;
    st->run = a->run;
    st->expect = a->expect;
    st->size = a->size;
    return TROUPE_OK;
}

static troupe_err
ow_recv_on_data(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ow_recv_state *st = state;
    int64_t seq = st->got;
    troupe_err e = read_payload(msg, st->size, &seq);
    if (e == TROUPE_OK && seq != st->got)
        e = TROUPE_EPROTO; /* lost or reordered */
    if (e != TROUPE_OK) {
        run_report(st->run, e);
        return e;
    }
    int64_t got = ++st->got;
    troupe_msg *m = NULL;
    if (got == st->expect) {
        /* The clock stops here. FIN tells the sender, after every ack
         * (delivery is in order), that the run is over, so no ack is left
         * in flight to an actor about to stop. */
        run_end(st->run);
        e = troupe_msg_create(&m, OW_FIN, NULL, 0);
    } else if (got % OW_ACK_EVERY == 0) {
        e = msg_i64(&m, OW_ACK, OW_ACK_EVERY);
    } else {
        return TROUPE_OK;
    }
    if (e == TROUPE_OK)
        e = troupe_send(self, msg->from, &m);
    if (e != TROUPE_OK)
        run_report(st->run, e);
    return e;
}

struct ow_send_arg {
    troupe_addr to;
    size_t size;
    int64_t window;
    struct run *run;
};

struct ow_send_state {
    troupe_addr to;
    size_t size;
    int64_t window;
    struct run *run;
    int64_t sent, acked, total;
    int more_pending;
};

static troupe_err
ow_send_init(troupe_actor *self, void *state, void *arg)
{
    struct ow_send_state *st = state;
    const struct ow_send_arg *a = arg;
    st->to = a->to;
    st->size = a->size;
    st->window = a->window;
    st->run = a->run;
    return TROUPE_OK;
}

static troupe_err
ow_pump(troupe_actor *self, struct ow_send_state *st)
{
    int64_t end = st->sent + OW_BURST;
    if (end > st->total)
        end = st->total;
    if (end > st->acked + st->window)
        end = st->acked + st->window;
    troupe_err e = TROUPE_OK;
    for (; st->sent < end && e == TROUPE_OK; st->sent++) {
        troupe_msg *m = NULL;
        e = msg_payload(&m, OW_DATA, st->size, st->sent);
        if (e == TROUPE_OK)
            e = troupe_send(self, st->to, &m);
    }
    if (e == TROUPE_OK && st->sent < st->total &&
        st->sent < st->acked + st->window) {
        st->more_pending = 1;
        troupe_msg *m = NULL;
        e = troupe_msg_create(&m, OW_MORE, NULL, 0);
        if (e == TROUPE_OK)
            e = troupe_send(self, troupe_self(self), &m);
    }
    if (e != TROUPE_OK)
        run_report(st->run, e);
    return e;
}

static troupe_err
ow_send_on_start(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ow_send_state *st = state;
    troupe_err e = get_i64(msg, &st->total);
    return e ? e : ow_pump(self, st);
}

static troupe_err
ow_send_on_more(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ow_send_state *st = state;
    st->more_pending = 0;
    return ow_pump(self, st);
}

static troupe_err
ow_send_on_ack(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ow_send_state *st = state;
    int64_t k;
    troupe_err e = get_i64(msg, &k);
    if (e != TROUPE_OK)
        return e;
    st->acked += k;
    return st->more_pending ? TROUPE_OK : ow_pump(self, st);
}

static troupe_err
ow_send_on_fin(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ow_send_state *st = state;
    run_report(st->run, TROUPE_OK);
    return TROUPE_OK;
}

static const troupe_handler_fn ow_send_handlers[OW_KINDS] = {
    [OW_START] = ow_send_on_start,
    [OW_MORE] = ow_send_on_more,
    [OW_ACK] = ow_send_on_ack,
    [OW_FIN] = ow_send_on_fin,
};
static const troupe_actor_def ow_send_def = {
    .name = "bench.remote.sender",
    .state_size = sizeof(struct ow_send_state),
    .init = ow_send_init,
    .handlers = ow_send_handlers,
    .n_handlers = OW_KINDS,
    .remote_kinds = TROUPE_KIND_BIT(OW_ACK) | TROUPE_KIND_BIT(OW_FIN),
};
static const troupe_handler_fn ow_recv_handlers[OW_KINDS] = {
    [OW_DATA] = ow_recv_on_data,
};
static const troupe_actor_def ow_recv_def = {
    .name = "bench.remote.receiver",
    .state_size = sizeof(struct ow_recv_state),
    .init = ow_recv_init,
    .handlers = ow_recv_handlers,
    .n_handlers = OW_KINDS,
    .remote_kinds = TROUPE_KIND_BIT(OW_DATA),
};

struct cfg {
    struct nodes *ns;
    size_t size;
    int64_t window; /* one-way only */
};

static double
oneway_one(void *cfgp, int64_t n)
{
    const struct cfg *c = cfgp;
    struct run run;
    run_init(&run);
    struct ow_recv_arg ra = {&run, n, c->size};
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = &ra;
    troupe_addr recv, send;
    troupe_err e = troupe_actor_spawn(c->ns->rt[1], &ow_recv_def, &o, &recv);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_remote: spawn: %s\n", troupe_err_name(e));
        return -1;
    }
    struct ow_send_arg sa = {recv, c->size, c->window, &run};
    o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = &sa;
    e = troupe_actor_spawn(c->ns->rt[0], &ow_send_def, &o, &send);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_remote: spawn: %s\n", troupe_err_name(e));
        return -1;
    }
    double t0 = 0, t = -1;
    troupe_msg *m = NULL;
    e = msg_i64(&m, OW_START, n);
    if (e == TROUPE_OK) {
        t0 = bench_now();
        e = troupe_runtime_send(c->ns->rt[0], send, &m);
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_remote: start: %s\n", troupe_err_name(e));
    } else if (!run_wait(&run)) {
        fprintf(stderr, "bench_remote: one-way timed out (%lld messages)\n",
                (long long)n);
        fflush(NULL);
        _Exit(1); /* actors may be stuck: do not wait for them */
    } else if (run.err != TROUPE_OK) {
        fprintf(stderr, "bench_remote: one-way failed: %s\n",
                troupe_err_name(run.err));
    } else {
        t = run.t_end - t0;
    }
    stop_actor(c->ns->rt[0], send);
    stop_actor(c->ns->rt[1], recv);
    /* After a failure an actor may still touch `run`: end the benchmark. */
    if (t < 0) {
        fflush(NULL);
        _Exit(1);
    }
    run_fini(&run);
    return t;
}

/* ---- ask ---- */

enum { AK_START, AK_LOOKUP, AK_REPLY, AK_KINDS };
enum { ECHO_REQ, ECHO_KINDS };

static troupe_err
echo_on_req(troupe_actor *self, void *state, const troupe_msg *msg)
{
    troupe_msg *r = NULL;
    troupe_body *b = troupe_body_retain(msg->body);
    troupe_err e = troupe_msg_create_body(&r, ECHO_REQ, &b);
    return e ? e : troupe_reply(self, msg, &r);
}

static const troupe_handler_fn echo_handlers[ECHO_KINDS] = {
    [ECHO_REQ] = echo_on_req,
};
static const troupe_actor_def echo_def = {
    .name = "bench.remote.echo",
    .handlers = echo_handlers,
    .n_handlers = ECHO_KINDS,
    .remote_kinds = TROUPE_KIND_BIT(ECHO_REQ),
};

struct ask_arg {
    size_t size;
    struct run *run;
};

struct ask_state {
    troupe_addr echo;
    size_t size;
    struct run *run;
    int64_t issued, answered, total;
};

static troupe_err
ask_init(troupe_actor *self, void *state, void *arg)
{
    struct ask_state *st = state;
    const struct ask_arg *a = arg;
    st->size = a->size;
    st->run = a->run;
    return TROUPE_OK;
}

static troupe_err
ask_fail(struct ask_state *st, troupe_err e)
{
    run_report(st->run, e);
    return e;
}

static troupe_err
ask_issue(troupe_actor *self, struct ask_state *st)
{
    troupe_msg *m = NULL;
    troupe_err e = msg_payload(&m, ECHO_REQ, st->size, st->issued);
    if (e == TROUPE_OK)
        e = troupe_ask(self, st->echo, &m, ASK_TIMEOUT_MS, AK_REPLY, NULL);
    if (e != TROUPE_OK)
        return ask_fail(st, e);
    st->issued++;
    return TROUPE_OK;
}

/* Start: the count; looks the echo actor up by name on node 2. */
static troupe_err
ask_on_start(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ask_state *st = state;
    troupe_err e = get_i64(msg, &st->total);
    troupe_msg *m = NULL;
    if (e == TROUPE_OK)
        e = troupe_node_lookup_msg(ECHO_NAME, &m);
    if (e == TROUPE_OK)
        e = troupe_ask(self, troupe_node_addr(2), &m, ASK_TIMEOUT_MS, AK_LOOKUP,
                       NULL);
    return e ? ask_fail(st, e) : TROUPE_OK;
}

/* The echo actor's address: the clock starts and the asks go out. */
static troupe_err
ask_on_lookup(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ask_state *st = state;
    troupe_err e = troupe_node_lookup_result(msg, &st->echo);
    if (e != TROUPE_OK)
        return ask_fail(st, e);
    st->run->t_start = bench_now();
    while (st->issued < st->total && st->issued < ASK_INFLIGHT)
        if ((e = ask_issue(self, st)) != TROUPE_OK)
            return e;
    return TROUPE_OK;
}

static troupe_err
ask_on_reply(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ask_state *st = state;
    troupe_err e = msg->err;
    if (e == TROUPE_OK)
        e = read_payload(msg, st->size, NULL);
    if (e != TROUPE_OK)
        return ask_fail(st, e);
    if (++st->answered == st->total) {
        run_report(st->run, TROUPE_OK);
        return TROUPE_OK;
    }
    return st->issued < st->total ? ask_issue(self, st) : TROUPE_OK;
}

static const troupe_handler_fn ask_handlers[AK_KINDS] = {
    [AK_START] = ask_on_start,
    [AK_LOOKUP] = ask_on_lookup,
    [AK_REPLY] = ask_on_reply,
};
static const troupe_actor_def ask_def = {
    .name = "bench.remote.asker",
    .state_size = sizeof(struct ask_state),
    .init = ask_init,
    .handlers = ask_handlers,
    .n_handlers = AK_KINDS,
};

static double
ask_one(void *cfgp, int64_t n)
{
    const struct cfg *c = cfgp;
    struct run run;
    run_init(&run);
    struct ask_arg aa = {c->size, &run};
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = &aa;
    troupe_addr asker;
    troupe_err e = troupe_actor_spawn(c->ns->rt[0], &ask_def, &o, &asker);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_remote: spawn: %s\n", troupe_err_name(e));
        return -1;
    }
    double t = -1;
    troupe_msg *m = NULL;
    e = msg_i64(&m, AK_START, n);
    if (e == TROUPE_OK)
        e = troupe_runtime_send(c->ns->rt[0], asker, &m);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_remote: start: %s\n", troupe_err_name(e));
    } else if (!run_wait(&run)) {
        fprintf(stderr, "bench_remote: ask timed out (%lld round trips)\n",
                (long long)n);
        fflush(NULL);
        _Exit(1);
    } else if (run.err != TROUPE_OK) {
        fprintf(stderr, "bench_remote: ask failed: %s\n",
                troupe_err_name(run.err));
    } else {
        t = run.t_end - run.t_start;
    }
    stop_actor(c->ns->rt[0], asker);
    if (t < 0) {
        fflush(NULL);
        _Exit(1);
    }
    run_fini(&run);
    return t;
}

/* ---- rep loop (as bench_actor's), peers run with one rep each ---- */

typedef double (*one_fn)(void *cfg, int64_t n);

static double
peer_once(const char *peer, const char *arg)
{
    const char *old = getenv("BENCH_REPS");
    char *saved = old ? strdup(old) : NULL;
    setenv("BENCH_REPS", "1", 1);
    double v = bench_run_peer(peer, arg);
    if (saved) {
        setenv("BENCH_REPS", saved, 1);
        free(saved);
    } else {
        unsetenv("BENCH_REPS");
    }
    return v;
}

static double
reps_median(const char *name, const char *unit, void *cfg, one_fn one,
            int64_t warmup, int reps, const char *peer, const char *peer_arg,
            double *peer_med)
{
    int64_t n = warmup;
    double t;
    for (;;) {
        t = one(cfg, n);
        if (t <= 0) {
            printf("%s: warm-up failed\n", name);
            return -1;
        }
        if (t >= CALIBRATE_SECONDS || n >= MAX_COUNT / 4)
            break;
        n *= 4;
    }
    double rate = (double)n / t;
    n = (int64_t)(rate * REP_SECONDS);
    n = n < warmup ? warmup : n > MAX_COUNT ? MAX_COUNT : n;
    printf("%s: warm-up %.0f %s, %d reps of %lld%s%s %s\n", name, rate, unit,
           reps, (long long)n, peer ? ", alternating with " : "",
           peer ? peer : "", peer ? peer_arg : "");
    fflush(stdout);
    double v[64], pv[64];
    int peer_ok = peer != NULL;
    for (int i = 0; i < reps; i++) {
        t = one(cfg, n);
        if (t <= 0) {
            printf("%s: rep %d failed\n", name, i + 1);
            return -1;
        }
        v[i] = (double)n / t;
        printf("%s: rep %d: %.0f %s (%.3f s)\n", name, i + 1, v[i], unit, t);
        fflush(stdout);
        if (peer_ok) {
            pv[i] = peer_once(peer, peer_arg);
            peer_ok = pv[i] >= 0;
        }
    }
    double med = bench_median(v, reps);
    printf("%s: median %.0f %s\n", name, med, unit);
    if (peer != NULL) {
        *peer_med = peer_ok ? bench_median(pv, reps) : -1;
        printf("%s %s: median %.0f %s\n", peer, peer_arg, *peer_med, unit);
    }
    fflush(stdout);
    return med;
}

/* ---- setup and teardown ---- */

/*
 * With $BENCH_TLS_DIR (ca.pem, n1.pem, n1.key, n2.pem, n2.key: certificates
 * naming troupe-node-1 and -2, as docs/security.md makes them), the nodes
 * talk over tls+tcp:// with mutual authentication instead: informative,
 * beside the plain tcp figures.
 */
static int
nodes_up(struct nodes *ns)
{
    troupe_err e = TROUPE_OK;
    const char *tls = getenv("BENCH_TLS_DIR");
    char files[2][3][512];
    for (int i = 0; i < 2 && e == TROUPE_OK; i++) {
        troupe_runtime_opts ro = {
            .schedulers = 1, .workers = 1, .node_id = (uint32_t)i + 1};
        troupe_node_opts no = {0};
        if (tls != NULL) {
            snprintf(files[i][0], sizeof(files[i][0]), "%s/n%d.pem", tls,
                     i + 1);
            snprintf(files[i][1], sizeof(files[i][1]), "%s/n%d.key", tls,
                     i + 1);
            snprintf(files[i][2], sizeof(files[i][2]), "%s/ca.pem", tls);
            no.tls_cert = files[i][0];
            no.tls_key = files[i][1];
            no.tls_ca = files[i][2];
        }
        e = troupe_runtime_create(&ns->rt[i], &ro);
        if (e == TROUPE_OK)
            e = troupe_node_create(&ns->node[i], ns->rt[i], &no);
        if (e == TROUPE_OK)
            e = troupe_node_listen(ns->node[i], tls ? "tls+tcp://127.0.0.1:0"
                                                    : "tcp://127.0.0.1:0");
    }
    uint32_t peer = 0;
    if (e == TROUPE_OK)
        e = troupe_node_connect_wait(ns->node[0], troupe_node_url(ns->node[1]),
                                     10000, &peer);
    if (e == TROUPE_OK && peer != 2)
        e = TROUPE_EPROTO;
    if (e == TROUPE_OK) {
        troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
        o.name = ECHO_NAME;
        e = troupe_actor_spawn(ns->rt[1], &echo_def, &o, &ns->echo);
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_remote: setup: %s\n", troupe_err_name(e));
        return 0;
    }
    printf("bench_remote: nodes 1 (%s) and 2 (%s) connected; each a runtime "
           "with 1 scheduler and 1 worker; %d reps per figure\n",
           troupe_node_url(ns->node[0]), troupe_node_url(ns->node[1]),
           bench_reps(5));
    fflush(stdout);
    return 1;
}

static troupe_err
nodes_down(struct nodes *ns)
{
    troupe_err e1 = troupe_runtime_shutdown_wait(ns->rt[0]);
    troupe_err e2 = troupe_runtime_shutdown_wait(ns->rt[1]);
    for (int i = 0; i < 2; i++) {
        troupe_node_stop_wait(ns->node[i]);
        troupe_node_destroy(ns->node[i]);
    }
    troupe_runtime_destroy(ns->rt[0]);
    troupe_runtime_destroy(ns->rt[1]);
    nng_fini();
    return e1 != TROUPE_OK ? e1 : e2;
}

/* The figures, in the order they run. */
struct figure {
    const char *name; /* the bench line's name */
    const char *label;
    const char *unit, *line_unit;
    one_fn one;
    size_t size;
    int64_t warmup;
    const char *peer, *peer_arg, *peer_label;
};

static const struct figure figures[] = {
    {"remote_oneway_64b", "troupe oneway 64 B", "msgs/s", "msgs/s", oneway_one,
     64, 20000, "peer_nng_oneway", "64", "nng_pair1"},
    {"remote_oneway_4k", "troupe oneway 4 KiB", "msgs/s", "msgs/s", oneway_one,
     4096, 20000, "peer_nng_oneway", "4096", "nng_pair1"},
    {"remote_ask_64b", "troupe ask 64 B", "round trips/s", "roundtrips/s",
     ask_one, 64, 5000, "peer_nng_ask", "64", "nng_reqrep"},
    {"remote_ask_4k", "troupe ask 4 KiB", "round trips/s", "roundtrips/s",
     ask_one, 4096, 5000, "peer_nng_ask", "4096", "nng_reqrep"},
};
#define N_FIGURES (sizeof figures / sizeof figures[0])

/* One-way windows other than OW_WINDOW, printed for information (3 reps,
 * no peer). At 4 KiB a window of 16384 would exceed the per-peer queue's
 * default 64 MiB byte bound (each envelope is about 4.1 KB) and end in
 * EFULL, so 8192 is the largest there. */
static const struct {
    size_t size;
    int64_t window;
} windows[] = {{64, 2048}, {64, 16384}, {4096, 2048}, {4096, 8192}};

/* With arguments, only the figures whose names contain one of them run
 * (e.g. `bench_remote ask_4k`, for profiling); without, all of them and
 * the window figures. */
static int
selected(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i]) != NULL)
            return 1;
    return 0;
}

int
main(int argc, char **argv)
{
    int reps = bench_reps(5);
    struct nodes ns = {0};
    if (!nodes_up(&ns))
        return 1;
    troupe_node_stats b1, b2;
    troupe_node_stats_get(ns.node[0], &b1);
    troupe_node_stats_get(ns.node[1], &b2);

    double v[N_FIGURES], pv[N_FIGURES];
    int ran[N_FIGURES] = {0}, ok = 1;
    for (size_t i = 0; i < N_FIGURES; i++) {
        const struct figure *f = &figures[i];
        if (!selected(argc, argv, f->name))
            continue;
        struct cfg c = {&ns, f->size, OW_WINDOW};
        pv[i] = -1;
        v[i] = reps_median(f->label, f->unit, &c, f->one, f->warmup, reps,
                           f->peer, f->peer_arg, &pv[i]);
        print_stats(f->label, &ns, &b1, &b2);
        ran[i] = 1;
        ok &= v[i] > 0;
    }

    double wv[sizeof windows / sizeof windows[0]];
    int wran = argc < 2;
    for (size_t i = 0; wran && i < sizeof windows / sizeof windows[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "troupe oneway %s, window %lld",
                 windows[i].size == 64 ? "64 B" : "4 KiB",
                 (long long)windows[i].window);
        struct cfg c = {&ns, windows[i].size, windows[i].window};
        wv[i] = reps_median(label, "msgs/s", &c, oneway_one, 20000,
                            reps < 3 ? reps : 3, NULL, NULL, NULL);
        print_stats(label, &ns, &b1, &b2);
    }

    troupe_err e = nodes_down(&ns);

    if (wran) {
        printf("\noneway by window (messages sent and not yet acked):");
        for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++)
            printf("%s %lld: %.0f", i ? ";" : "", (long long)windows[i].window,
                   wv[i]);
        printf(" msgs/s (64 B, 64 B, 4 KiB, 4 KiB); the figures below use "
               "%d\n",
               OW_WINDOW);
    }
    for (size_t i = 0; i < N_FIGURES; i++)
        if (ran[i])
            bench_line_peer(figures[i].name, v[i], figures[i].line_unit,
                            figures[i].peer_label, pv[i]);
    return ok && e == TROUPE_OK ? 0 : 1;
}
