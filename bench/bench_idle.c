/*
 * bench_idle: what an idle actor costs. Spawns 1,000,000 actors with no
 * state and one handler on a standalone runtime (2 schedulers, 1 worker,
 * as bench_actor), waits until every init has run (only then is a spawn
 * complete: the INIT message is consumed and the actor is linked on its
 * scheduler), and divides the growth of the resident set by the count.
 *
 *   bench actor_idle_bytes <v> bytes      (goal: at most 256)
 *   bench actor_spawn_rate <v> spawns/s   (spawn calls to last init)
 *
 * RSS is read from /proc/self/statm, so the figure includes what the
 * allocator keeps around the actors: malloc's chunk headers and rounding,
 * the slot table, and holes left by the INIT messages that were freed.
 * $BENCH_REPS waves, each on a fresh runtime; the spawn rate is their
 * median, the memory figure comes from the first wave only: later waves
 * reuse the heap the earlier ones freed and show almost no growth.
 *
 * Also prints, as information, how long the graceful shutdown of all these
 * actors takes (each one gets a STOP message and dies in its own turn).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "troupe/actor.h"
#include "troupe/msg.h"
#include "troupe/runtime.h"

#define N_ACTORS 1000000
#define WAIT_TIMEOUT_S 60

struct counters {
    _Atomic long inits;
};

/* The handler has no state to reach a counter through (state_size 0). */
static _Atomic long pings;

static troupe_err
idle_init(troupe_actor *self, void *state, void *arg)
{
    struct counters *c = arg;
    atomic_fetch_add_explicit(&c->inits, 1, memory_order_relaxed);
    return TROUPE_OK;
}

static troupe_err
idle_on_ping(troupe_actor *self, void *state, const troupe_msg *msg)
{
    atomic_fetch_add_explicit(&pings, 1, memory_order_release);
    return TROUPE_OK;
}

enum { IDLE_PING, IDLE_KINDS };

static const troupe_handler_fn idle_handlers[IDLE_KINDS] = {
    [IDLE_PING] = idle_on_ping,
};
static const troupe_actor_def idle_def = {
    .name = "bench.idle",
    .state_size = 0,
    .init = idle_init,
    .handlers = idle_handlers,
    .n_handlers = IDLE_KINDS,
};

static long
rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static void
nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls until *v reaches want (the main thread is not an actor loop). */
static int
wait_for(_Atomic long *v, long want)
{
    double deadline = bench_now() + WAIT_TIMEOUT_S;
    while (atomic_load_explicit(v, memory_order_acquire) < want) {
        if (bench_now() > deadline)
            return 0;
        nap_ms(1);
    }
    return 1;
}

/* One wave: a fresh runtime, N spawns, wait for every init, probe, then
 * a timed graceful shutdown. Returns 0 on success. */
struct wave {
    long rss0, rss1;
    double calls_s, inits_s, shutdown_s, destroy_s;
};

static int
run_wave(struct wave *w, troupe_addr *addrs)
{
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 1};
    troupe_runtime *rt = NULL;
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK) {
        fprintf(stderr, "bench_idle: runtime: %s\n", troupe_err_name(e));
        return -1;
    }
    static struct counters c;
    atomic_store(&c.inits, 0);
    atomic_store(&pings, 0);
    nap_ms(50); /* let the scheduler threads settle */

    w->rss0 = rss_bytes();
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.arg = &c;
    double t0 = bench_now();
    for (long i = 0; i < N_ACTORS; i++) {
        e = troupe_actor_spawn(rt, &idle_def, &o, &addrs[i]);
        if (e != TROUPE_OK) {
            fprintf(stderr, "bench_idle: spawn %ld: %s\n", i,
                    troupe_err_name(e));
            return -1;
        }
    }
    double t_calls = bench_now();
    if (!wait_for(&c.inits, N_ACTORS)) {
        fprintf(stderr, "bench_idle: only %ld of %d inits ran after %d s\n",
                atomic_load(&c.inits), N_ACTORS, WAIT_TIMEOUT_S);
        fflush(NULL);
        _Exit(1); /* the runtime may be stuck: do not wait for it */
    }
    double t_inits = bench_now();
    w->rss1 = rss_bytes();
    w->calls_s = t_calls - t0;
    w->inits_s = t_inits - t0;

    /* Prove they are live actors: one message to the first and the last. */
    troupe_addr probe[2] = {addrs[0], addrs[N_ACTORS - 1]};
    for (int i = 0; i < 2; i++) {
        troupe_msg *m = NULL;
        e = troupe_msg_create(&m, IDLE_PING, NULL, 0);
        if (e == TROUPE_OK)
            e = troupe_runtime_send(rt, probe[i], &m);
        if (e != TROUPE_OK) {
            fprintf(stderr, "bench_idle: probe send: %s\n", troupe_err_name(e));
            return -1;
        }
    }
    if (!wait_for(&pings, 2)) {
        fprintf(stderr, "bench_idle: probes not handled\n");
        fflush(NULL);
        _Exit(1);
    }

    double t_sd = bench_now();
    e = troupe_runtime_shutdown_wait(rt);
    double t_sd1 = bench_now();
    troupe_runtime_destroy(rt);
    w->shutdown_s = t_sd1 - t_sd;
    w->destroy_s = bench_now() - t_sd1;
    return e == TROUPE_OK ? 0 : -1;
}

int
main(void)
{
    int reps = bench_reps(5);
    troupe_addr *addrs = malloc(sizeof(*addrs) * N_ACTORS);
    if (addrs == NULL) {
        fprintf(stderr, "bench_idle: out of memory\n");
        return 1;
    }
    /* Touch the address array now so it is not part of the growth. */
    for (long i = 0; i < N_ACTORS; i++)
        addrs[i] = TROUPE_ADDR_NONE;
    printf("bench_idle: %d idle actors (state 0 B, 1 handler) per wave on "
           "2 schedulers; %d waves, memory from the first\n",
           N_ACTORS, reps);

    double rates[64], first_per = 0;
    for (int i = 0; i < reps; i++) {
        struct wave w;
        if (run_wave(&w, addrs) != 0)
            return 1;
        rates[i] = N_ACTORS / w.inits_s;
        if (i == 0) {
            first_per = (double)(w.rss1 - w.rss0) / N_ACTORS;
            printf("bench_idle: RSS %.1f MiB -> %.1f MiB: %.1f bytes per "
                   "actor (goal <= 256)\n",
                   w.rss0 / 1048576.0, w.rss1 / 1048576.0, first_per);
        }
        printf("bench_idle: wave %d: spawn calls %.3f s, all inits ran "
               "after %.3f s (%.0f spawns/s); shutdown %.3f s, destroy "
               "%.3f s\n",
               i + 1, w.calls_s, w.inits_s, rates[i], w.shutdown_s,
               w.destroy_s);
        fflush(stdout);
    }
    free(addrs);
    double rate = bench_median(rates, reps);
    printf("bench_idle: median %.0f spawns/s\n", rate);
    bench_line("actor_idle_bytes", first_per, "bytes");
    bench_line("actor_spawn_rate", rate, "spawns/s");
    return 0;
}
