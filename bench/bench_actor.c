/*
 * bench_actor: local actor messaging, side by side with the same two
 * programs written against CAF 0.17 (bench/peers/peer_caf_*.cpp), on the
 * same number of threads: a standalone runtime with 2 schedulers (CAF runs
 * 2 scheduler workers) and 1 worker-pool thread (idle here).
 *
 *   bench actor_pingpong <v> roundtrips/s peer caf <v> ratio <r>
 *   bench actor_pingpong_cross <v> roundtrips/s
 *   bench actor_fanout <v> msgs/s peer caf <v> ratio <r>
 *
 * Workloads mirror the peers message for message (read their header
 * comments): ping-pong is N round trips of one int64 each way, one in
 * flight; fan-out is one sender, four receivers round-robin, an ack per
 * 1024 messages per receiver, a window of 16384 unacknowledged messages,
 * bursts of at most 1024 sends per handler call with a self "more" message
 * in between, and time from the start message to the fourth "done". Every
 * message is a fresh troupe_msg whose body is the int64 as msgpack (9
 * bytes), as an application would send it; CAF's messages carry the int64
 * in a fresh mailbox element too.
 *
 * Placement. troupe places an actor on one scheduler for life and makes a
 * send to an actor on the same scheduler a plain enqueue (no lock, no
 * syscall); a send to another scheduler takes a stripe lock and, when the
 * target was idle, wakes that loop with uv_async_send (an eventfd write and
 * an epoll wakeup, tens of microseconds: NOTES.md). So actors that converse
 * belong together, which is what opts.near is for:
 *  - ping-pong spawns the second actor near the first. The figure with the
 *    two pinned to different schedulers is printed too (actor_pingpong_cross)
 *    so readers see what a bad placement costs.
 *  - fan-out puts the sender and its four receivers on one scheduler. All
 *    messages come from the one sender, so a second thread could take only
 *    the receivers' share of the work, while every message that crosses
 *    pays for it: a stripe lock per send, the message's cache lines moving
 *    between cores, an eventfd wakeup whenever a receiver ran dry between
 *    bursts, and a free() into the sender thread's malloc arena (glibc's
 *    slow path). On the 2-core machine all on one scheduler was the
 *    steadiest and, in all runs but one (2% behind there), the fastest
 *    (docs/performance.md); two spread placements are printed as
 *    human-readable information.
 *
 * Completion goes from an actor to the main thread through a mutex and a
 * condition variable (the main thread is not an actor loop); the end time is
 * taken by the actor that completes the run.
 *
 * Reps alternate with the peer's (each of ours is followed by one run of
 * the peer with BENCH_REPS=1), so that neighbours on the shared machine
 * load both sides alike; each figure is the median of its side's reps.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "peers/peer_run.h"
#include "troupe/actor.h"
#include "troupe/msg.h"
#include "troupe/runtime.h"

#define REP_SECONDS 1.0
#define CALIBRATE_SECONDS 0.1
#define REP_TIMEOUT_S 30
#define MAX_COUNT 50000000LL

/* ---- the int64 body: msgpack int 64 (0xd3 + 8 bytes big-endian) ---- */

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

/* EINVAL (fails the actor) unless the body is a msgpack int 64. */
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

static troupe_err
send_i64(troupe_actor *self, troupe_addr to, uint32_t kind, int64_t v)
{
    troupe_msg *m = NULL;
    troupe_err e = msg_i64(&m, kind, v);
    if (e != TROUPE_OK)
        return e;
    return troupe_send(self, to, &m);
}

/* ---- one run: completion from an actor to the main thread ---- */

struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done; /* reports received */
    int want; /* reports that end the run */
    double t_end;
};

static void
run_init(struct run *r, int want)
{
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->done = 0;
    r->want = want;
    r->t_end = 0;
}

static void
run_fini(struct run *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

/* Called by an actor: one report (a "done"). */
static void
run_report(struct run *r)
{
    double now = bench_now();
    pthread_mutex_lock(&r->mu);
    if (++r->done == r->want) {
        r->t_end = now;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Main thread: waits for the last report; false on timeout. */
static int
run_wait(struct run *r)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += REP_TIMEOUT_S;
    int ok = 1;
    pthread_mutex_lock(&r->mu);
    while (r->done < r->want && ok)
        ok = pthread_cond_timedwait(&r->cv, &r->mu, &dl) == 0 ||
             r->done >= r->want;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* ---- rep loop, like the peers': warm-up calibrates the count ---- */

typedef double (*one_fn)(troupe_runtime *rt, void *cfg, int64_t n);

/* One run of a peer with a single rep (after its own warm-up), so that its
 * reps can alternate with ours: a noisy neighbour then hits both sides
 * alike instead of whichever happened to run during the burst. */
static double
peer_once(const char *peer)
{
    const char *old = getenv("BENCH_REPS");
    char *saved = old ? strdup(old) : NULL;
    setenv("BENCH_REPS", "1", 1);
    double v = bench_run_peer(peer, NULL);
    if (saved) {
        setenv("BENCH_REPS", saved, 1);
        free(saved);
    } else {
        unsetenv("BENCH_REPS");
    }
    return v;
}

/* Runs one(n) once to warm up and calibrate a count for ~REP_SECONDS, then
 * `reps` times; prints each rate; returns the median (or -1). With `peer`,
 * each of our reps is followed by one rep of the peer, and *peer_med gets
 * the peer's median (-1 if it failed). */
static double
reps_median(const char *name, const char *unit, troupe_runtime *rt, void *cfg,
            one_fn one, int64_t warmup, int64_t granule, int reps,
            const char *peer, double *peer_med)
{
    /* Warm up until a run lasts long enough to calibrate on: the peers'
     * fixed warm-up counts take a few milliseconds here, and one
     * descheduling then skews every rep's length. */
    int64_t n = warmup;
    double t;
    for (;;) {
        t = one(rt, cfg, n);
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
    n -= n % granule;
    printf("%s: warm-up %.0f %s, %d reps of %lld%s%s\n", name, rate, unit, reps,
           (long long)n, peer ? ", alternating with " : "", peer ? peer : "");
    double v[64], pv[64];
    int peer_ok = peer != NULL;
    for (int i = 0; i < reps; i++) {
        t = one(rt, cfg, n);
        if (t <= 0) {
            printf("%s: rep %d failed\n", name, i + 1);
            return -1;
        }
        v[i] = (double)n / t;
        printf("%s: rep %d: %.0f %s (%.3f s)\n", name, i + 1, v[i], unit, t);
        fflush(stdout);
        if (peer_ok) {
            pv[i] = peer_once(peer);
            peer_ok = pv[i] >= 0;
        }
    }
    double med = bench_median(v, reps);
    printf("%s: median %.0f %s\n", name, med, unit);
    if (peer != NULL) {
        *peer_med = peer_ok ? bench_median(pv, reps) : -1;
        printf("%s: median %.0f %s\n", peer, *peer_med, unit);
    }
    fflush(stdout);
    return med;
}

static void
stop_actor(troupe_runtime *rt, troupe_addr a)
{
    troupe_err e = troupe_actor_stop(rt, a, NULL, NULL);
    if (e != TROUPE_OK && e != TROUPE_EDEAD)
        fprintf(stderr, "bench_actor: stop: %s\n", troupe_err_name(e));
}

static int
start_run(troupe_runtime *rt, troupe_addr to, uint32_t kind, int64_t n,
          double *t0)
{
    troupe_msg *m = NULL;
    if (msg_i64(&m, kind, n) != TROUPE_OK)
        return 0;
    *t0 = bench_now();
    troupe_err e = troupe_runtime_send(rt, to, &m);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_actor: start: %s\n", troupe_err_name(e));
        return 0;
    }
    return 1;
}

/* ---- ping-pong ---- */

enum { PP_START, PP_BALL, PP_KINDS };

struct ping_arg {
    troupe_addr pong;
    struct run *run;
};

struct ping_state {
    troupe_addr pong;
    struct run *run;
};

static troupe_err
ping_init(troupe_actor *self, void *state, void *arg)
{
    struct ping_state *st = state;
    const struct ping_arg *a = arg;
    st->pong = a->pong;
    st->run = a->run;
    return TROUPE_OK;
}

/* Start: n; sends n to pong (n round trips: n-1 .. 0 after the first). */
static troupe_err
ping_on_start(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ping_state *st = state;
    int64_t n;
    troupe_err e = get_i64(msg, &n);
    return e ? e : send_i64(self, st->pong, PP_BALL, n);
}

static troupe_err
ping_on_ball(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct ping_state *st = state;
    int64_t n;
    troupe_err e = get_i64(msg, &n);
    if (e != TROUPE_OK)
        return e;
    if (n == 0) {
        run_report(st->run);
        return TROUPE_OK;
    }
    return send_i64(self, st->pong, PP_BALL, n - 1);
}

/* Pong answers with a new message carrying the same number, as CAF's pong
 * returns n. */
static troupe_err
pong_on_ball(troupe_actor *self, void *state, const troupe_msg *msg)
{
    int64_t n;
    troupe_err e = get_i64(msg, &n);
    return e ? e : send_i64(self, msg->from, PP_BALL, n);
}

static const troupe_handler_fn ping_handlers[PP_KINDS] = {
    [PP_START] = ping_on_start,
    [PP_BALL] = ping_on_ball,
};
static const troupe_actor_def ping_def = {
    .name = "bench.ping",
    .state_size = sizeof(struct ping_state),
    .init = ping_init,
    .handlers = ping_handlers,
    .n_handlers = PP_KINDS,
};
static const troupe_handler_fn pong_handlers[PP_KINDS] = {
    [PP_BALL] = pong_on_ball,
};
static const troupe_actor_def pong_def = {
    .name = "bench.pong",
    .handlers = pong_handlers,
    .n_handlers = PP_KINDS,
};

/* Placement: near (ping spawned near pong) or pinned apart. */
struct pp_cfg {
    int cross;
};

static double
pingpong_one(troupe_runtime *rt, void *cfgp, int64_t n)
{
    const struct pp_cfg *cfg = cfgp;
    struct run run;
    run_init(&run, 1);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    troupe_addr pong, ping;
    o.scheduler = cfg->cross ? 0 : -1;
    troupe_err e = troupe_actor_spawn(rt, &pong_def, &o, &pong);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_actor: spawn: %s\n", troupe_err_name(e));
        return -1;
    }
    struct ping_arg pa = {pong, &run};
    o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = &pa;
    if (cfg->cross)
        o.scheduler = 1;
    else
        o.near = pong;
    e = troupe_actor_spawn(rt, &ping_def, &o, &ping);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_actor: spawn: %s\n", troupe_err_name(e));
        return -1;
    }
    double t0 = 0, t = -1;
    if (start_run(rt, ping, PP_START, n - 1, &t0)) {
        if (run_wait(&run))
            t = run.t_end - t0;
        else {
            fprintf(stderr,
                    "bench_actor: ping-pong timed out (%lld round "
                    "trips)\n",
                    (long long)n);
            fflush(NULL);
            _Exit(1); /* actors may be stuck: do not wait for them */
        }
    }
    stop_actor(rt, ping);
    stop_actor(rt, pong);
    /* No actor touches `run` after its last report. */
    run_fini(&run);
    return t;
}

/* ---- fan-out ---- */

#define FO_RECEIVERS 4
#define FO_BURST 1024
#define FO_ACK_EVERY 1024
#define FO_WINDOW 16384

enum { FO_START, FO_MORE, FO_ACK, FO_DATA, FO_KINDS };

struct recv_arg {
    struct run *run;
    int64_t expect;
};

struct recv_state {
    int64_t got, expect;
    struct run *run;
};

static troupe_err
recv_init(troupe_actor *self, void *state, void *arg)
{
    struct recv_state *st = state;
    const struct recv_arg *a = arg;
    st->run = a->run;
    st->expect = a->expect;
    return TROUPE_OK;
}

static troupe_err
recv_on_data(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct recv_state *st = state;
    int64_t seq;
    troupe_err e = get_i64(msg, &seq);
    if (e != TROUPE_OK)
        return e;
    int64_t got = ++st->got;
    if (got % FO_ACK_EVERY == 0) {
        e = send_i64(self, msg->from, FO_ACK, FO_ACK_EVERY);
        if (e != TROUPE_OK)
            return e;
    }
    if (got == st->expect)
        run_report(st->run);
    return TROUPE_OK;
}

struct send_state {
    troupe_addr to[FO_RECEIVERS];
    int64_t sent, acked, total;
    int more_pending;
};

static troupe_err
send_init(troupe_actor *self, void *state, void *arg)
{
    struct send_state *st = state;
    memcpy(st->to, arg, sizeof st->to);
    return TROUPE_OK;
}

static troupe_err
pump(troupe_actor *self, struct send_state *st)
{
    int64_t end = st->sent + FO_BURST;
    if (end > st->total)
        end = st->total;
    if (end > st->acked + FO_WINDOW)
        end = st->acked + FO_WINDOW;
    for (; st->sent < end; st->sent++) {
        troupe_err e =
            send_i64(self, st->to[st->sent % FO_RECEIVERS], FO_DATA, st->sent);
        if (e != TROUPE_OK)
            return e;
    }
    if (st->sent < st->total && st->sent < st->acked + FO_WINDOW) {
        st->more_pending = 1;
        troupe_msg *m = NULL;
        troupe_err e = troupe_msg_create(&m, FO_MORE, NULL, 0);
        return e ? e : troupe_send(self, troupe_self(self), &m);
    }
    return TROUPE_OK;
}

static troupe_err
send_on_start(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct send_state *st = state;
    troupe_err e = get_i64(msg, &st->total);
    return e ? e : pump(self, st);
}

static troupe_err
send_on_more(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct send_state *st = state;
    st->more_pending = 0;
    return pump(self, st);
}

static troupe_err
send_on_ack(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct send_state *st = state;
    int64_t k;
    troupe_err e = get_i64(msg, &k);
    if (e != TROUPE_OK)
        return e;
    st->acked += k;
    return st->more_pending ? TROUPE_OK : pump(self, st);
}

static const troupe_handler_fn send_handlers[FO_KINDS] = {
    [FO_START] = send_on_start,
    [FO_MORE] = send_on_more,
    [FO_ACK] = send_on_ack,
};
static const troupe_actor_def send_def = {
    .name = "bench.fanout.sender",
    .state_size = sizeof(struct send_state),
    .init = send_init,
    .handlers = send_handlers,
    .n_handlers = FO_KINDS,
};
static const troupe_handler_fn recv_handlers[FO_KINDS] = {
    [FO_DATA] = recv_on_data,
};
static const troupe_actor_def recv_def = {
    .name = "bench.fanout.receiver",
    .state_size = sizeof(struct recv_state),
    .init = recv_init,
    .handlers = recv_handlers,
    .n_handlers = FO_KINDS,
};

/* Scheduler of the sender and of each receiver. */
struct fo_cfg {
    const char *label;
    int sender;
    int recv[FO_RECEIVERS];
};

/* The placement the bench line reports (see the note at the top). */
static const struct fo_cfg fo_chosen = {
    "all five on scheduler 0", 0, {0, 0, 0, 0}};
/* Alternatives, printed for information. */
static const struct fo_cfg fo_others[] = {
    {"sender on 0, receivers split 0,1,0,1", 0, {0, 1, 0, 1}},
    {"sender on 0, receivers all on 1", 0, {1, 1, 1, 1}},
};

static double
fanout_one(troupe_runtime *rt, void *cfgp, int64_t m)
{
    const struct fo_cfg *cfg = cfgp;
    struct run run;
    run_init(&run, FO_RECEIVERS);
    struct recv_arg ra = {&run, m / FO_RECEIVERS};
    troupe_addr rs[FO_RECEIVERS], s;
    troupe_spawn_opts o;
    troupe_err e = TROUPE_OK;
    for (int i = 0; i < FO_RECEIVERS && e == TROUPE_OK; i++) {
        o = TROUPE_SPAWN_OPTS_INIT;
        o.scheduler = cfg->recv[i];
        o.arg = &ra;
        e = troupe_actor_spawn(rt, &recv_def, &o, &rs[i]);
    }
    if (e == TROUPE_OK) {
        o = TROUPE_SPAWN_OPTS_INIT;
        o.scheduler = cfg->sender;
        o.arg = rs;
        e = troupe_actor_spawn(rt, &send_def, &o, &s);
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_actor: spawn: %s\n", troupe_err_name(e));
        return -1;
    }
    double t0 = 0, t = -1;
    if (start_run(rt, s, FO_START, m, &t0)) {
        if (run_wait(&run))
            t = run.t_end - t0;
        else {
            fprintf(stderr,
                    "bench_actor: fan-out timed out with %d of %d "
                    "receivers done\n",
                    run.done, FO_RECEIVERS);
            fflush(NULL);
            _Exit(1);
        }
    }
    stop_actor(rt, s);
    for (int i = 0; i < FO_RECEIVERS; i++)
        stop_actor(rt, rs[i]);
    run_fini(&run);
    return t;
}

int
main(void)
{
    int reps = bench_reps(5);
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 1};
    troupe_runtime *rt = NULL;
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_actor: runtime: %s\n", troupe_err_name(e));
        return 1;
    }
    printf("bench_actor: troupe runtime with %u schedulers, 1 worker; "
           "CAF peers with 2 scheduler workers; %d reps per figure\n",
           troupe_runtime_schedulers(rt), reps);
    fflush(stdout);

    struct pp_cfg near = {0}, cross = {1};
    double pp_caf = -1, fo_caf = -1;
    double pp = reps_median("troupe pingpong (ping spawned near pong)",
                            "round trips/s", rt, &near, pingpong_one, 20000, 1,
                            reps, "peer_caf_pingpong", &pp_caf);
    double pp_x = reps_median("troupe pingpong (pinned to schedulers 0 and 1)",
                              "round trips/s", rt, &cross, pingpong_one, 20000,
                              1, reps, NULL, NULL);

    double fo = reps_median("troupe fanout (all five on scheduler 0)", "msgs/s",
                            rt, (void *)&fo_chosen, fanout_one, 100000,
                            FO_RECEIVERS, reps, "peer_caf_fanout", &fo_caf);
    double fo_alt[sizeof fo_others / sizeof fo_others[0]];
    for (size_t i = 0; i < sizeof fo_others / sizeof fo_others[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "troupe fanout (%s)", fo_others[i].label);
        fo_alt[i] =
            reps_median(label, "msgs/s", rt, (void *)&fo_others[i], fanout_one,
                        100000, FO_RECEIVERS, reps < 3 ? reps : 3, NULL, NULL);
    }

    e = troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);

    printf("\npingpong: near %.0f, cross-scheduler %.0f round trips/s "
           "(placement costs %.1fx); CAF %.0f\n",
           pp, pp_x, pp_x > 0 ? pp / pp_x : 0, pp_caf);
    printf("fanout: all on one scheduler %.0f msgs/s", fo);
    for (size_t i = 0; i < sizeof fo_others / sizeof fo_others[0]; i++)
        printf("; %s %.0f", fo_others[i].label, fo_alt[i]);
    printf("; CAF %.0f\n", fo_caf);
    bench_line_peer("actor_pingpong", pp, "roundtrips/s", "caf", pp_caf);
    bench_line("actor_pingpong_cross", pp_x, "roundtrips/s");
    bench_line_peer("actor_fanout", fo, "msgs/s", "caf", fo_caf);
    return pp > 0 && pp_x > 0 && fo > 0 && e == TROUPE_OK ? 0 : 1;
}
