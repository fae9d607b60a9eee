/*
 * Group commit: durable (synced) commits per second through the commit
 * pipeline, one small batch each (one 16 B key, one 100 B value).
 *
 *   group_commit_1   one submitter thread, waiting for each completion
 *                    before the next: one fdatasync per commit;
 *   group_commit_64  64 submitters doing the same at once: the writer
 *                    merges what queued during the previous sync.
 *
 * Submitters are actors (the way transactions submit: a completion comes
 * back as a message) for the headline figures, and plain threads blocked
 * on a semaphore for the _threads figures. The difference is the cost of
 * waking a submitter: a message enqueue (coalesced wakeups of 2 scheduler
 * loops) versus a futex wake per commit on the writer thread.
 *
 * Keys are unique and increasing across all submitters (a shared counter,
 * as in an id-keyed table or a time-ordered queue). With random keys the
 * RocksDB memtable insert (a few us per key once the memtable holds
 * millions) runs on the writer thread, on the critical path, and the
 * 64-submitter figure drops by about 15-20%; that cost is RocksDB's, not
 * group commit's.
 *
 * Each repetition runs both phases side by side (same files, same moment),
 * for BENCH_SECONDS (default 1.5) each; figures are medians over BENCH_REPS
 * (default 5). The last line is the machine-readable one (bench_util.h).
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "troupe/actor.h"
#include "troupe/commit.h"
#include "troupe/storage.h"

#define MAX_THREADS 64
#define KEY_LEN 16
#define VAL_LEN 100

typedef struct run run;

typedef struct submitter {
    run *r;
    int id;
    sem_t done;
    _Atomic troupe_err err;
    uint64_t commits;
    pthread_t th;
} submitter;

struct run {
    troupe_db *db;
    troupe_cf *cf;
    troupe_commit *c;
    atomic_bool stop;
    atomic_int ready;
    atomic_bool go;
    _Atomic unsigned long long next_key;
    submitter s[MAX_THREADS];
};

static void
on_commit(troupe_err err, void *arg)
{
    submitter *s = arg;
    atomic_store(&s->err, err);
    sem_post(&s->done);
}

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "bench_group_commit: %s: %s\n", what, troupe_err_name(e));
    exit(1);
}

static void *
submitter_main(void *arg)
{
    submitter *s = arg;
    run *r = s->r;
    char key[KEY_LEN + 1], val[VAL_LEN];
    memset(val, 'v', sizeof(val));
    atomic_fetch_add(&r->ready, 1);
    while (!atomic_load(&r->go))
        sched_yield();
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        snprintf(key, sizeof(key), "%016llu",
                 (unsigned long long)atomic_fetch_add(&r->next_key, 1));
        troupe_batch *b;
        troupe_err e = troupe_batch_create(&b);
        if (e == TROUPE_OK)
            e = troupe_batch_put(b, r->cf, key, KEY_LEN, val, VAL_LEN);
        if (e == TROUPE_OK)
            e = troupe_commit_submit(r->c, &b, TROUPE_SYNC_ON, on_commit, s);
        if (e != TROUPE_OK)
            die("submit", e);
        while (sem_wait(&s->done) != 0)
            ;
        if (atomic_load(&s->err) != TROUPE_OK)
            die("commit", atomic_load(&s->err));
        s->commits++;
    }
    return NULL;
}

/* Runs `threads` submitters for `seconds`; returns commits/s. */
static double
phase(run *r, int threads, double seconds, double *group_size)
{
    troupe_commit_stats before, after;
    troupe_commit_get_stats(r->c, &before);
    atomic_store(&r->stop, false);
    atomic_store(&r->ready, 0);
    atomic_store(&r->go, false);
    for (int i = 0; i < threads; i++) {
        submitter *s = &r->s[i];
        s->r = r;
        s->id = i;
        s->commits = 0;
        sem_init(&s->done, 0, 0);
        if (pthread_create(&s->th, NULL, submitter_main, s) != 0)
            die("pthread_create", TROUPE_ESYS);
    }
    while (atomic_load(&r->ready) < threads)
        sched_yield();
    double t0 = bench_now();
    atomic_store(&r->go, true);
    while (bench_now() - t0 < seconds)
        usleep(10000);
    atomic_store(&r->stop, true);
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(r->s[i].th, NULL);
        total += r->s[i].commits;
        sem_destroy(&r->s[i].done);
    }
    double dt = bench_now() - t0;
    troupe_commit_get_stats(r->c, &after);
    uint64_t groups = after.groups - before.groups;
    *group_size =
        groups ? (double)(after.batches - before.batches) / (double)groups : 0;
    return (double)total / dt;
}

/* ---- actor submitters ---- */

enum { K_GO, K_DONE, K_N };

typedef struct committer {
    run *r;
    troupe_runtime *rt;
    troupe_addr self;
} committer;

static _Atomic uint64_t actor_commits;
static _Atomic int actor_inflight;
static atomic_bool actor_stop;

static void
actor_committed(troupe_err err, void *arg)
{
    committer *c = arg;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, K_DONE, NULL, 0) != TROUPE_OK)
        die("msg", TROUPE_ENOMEM);
    m->err = err;
    m->ptr = c; /* a completion: accepted from any thread */
    troupe_err e = troupe_runtime_send(c->rt, c->self, &m);
    if (e != TROUPE_OK)
        die("completion send", e);
}

static troupe_err
actor_submit(committer *c)
{
    char key[KEY_LEN + 1], val[VAL_LEN];
    memset(val, 'v', sizeof(val));
    snprintf(key, sizeof(key), "%016llu",
             (unsigned long long)atomic_fetch_add(&c->r->next_key, 1));
    troupe_batch *b;
    troupe_err e = troupe_batch_create(&b);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, c->r->cf, key, KEY_LEN, val, VAL_LEN);
    if (e == TROUPE_OK) {
        atomic_fetch_add(&actor_inflight, 1);
        e = troupe_commit_submit(c->r->c, &b, TROUPE_SYNC_ON, actor_committed,
                                 c);
        if (e != TROUPE_OK)
            atomic_fetch_sub(&actor_inflight, 1);
    }
    return e;
}

static troupe_err
h_go(troupe_actor *self, void *st, const troupe_msg *m)
{
    return actor_submit(((committer **)st)[0]);
}

static troupe_err
h_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    committer *c = ((committer **)st)[0];
    if (m->err != TROUPE_OK)
        die("commit", m->err);
    atomic_fetch_sub(&actor_inflight, 1);
    if (atomic_load_explicit(&actor_stop, memory_order_relaxed))
        return TROUPE_OK;
    atomic_fetch_add_explicit(&actor_commits, 1, memory_order_relaxed);
    return actor_submit(c);
}

static troupe_err
committer_init(troupe_actor *self, void *st, void *arg)
{
    committer *c = arg;
    c->self = troupe_self(self);
    ((committer **)st)[0] = c;
    return TROUPE_OK;
}

static const troupe_handler_fn committer_handlers[K_N] = {
    [K_GO] = h_go, [K_DONE] = h_done};
static const troupe_actor_def committer_def = {
    .name = "committer",
    .state_size = sizeof(committer *),
    .init = committer_init,
    .handlers = committer_handlers,
    .n_handlers = K_N,
};

/* `n` committer actors on rt for `seconds`; returns commits/s. */
static double
actor_phase(run *r, troupe_runtime *rt, int n, double seconds,
            double *group_size)
{
    static committer cs[MAX_THREADS];
    troupe_addr addrs[MAX_THREADS];
    troupe_commit_stats before, after;
    atomic_store(&actor_stop, false);
    atomic_store(&actor_commits, 0);
    for (int i = 0; i < n; i++) {
        cs[i] = (committer){.r = r, .rt = rt};
        troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
        o.arg = &cs[i];
        troupe_err e = troupe_actor_spawn(rt, &committer_def, &o, &addrs[i]);
        if (e != TROUPE_OK)
            die("spawn", e);
    }
    troupe_commit_get_stats(r->c, &before);
    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, K_GO, NULL, 0) != TROUPE_OK ||
            troupe_runtime_send(rt, addrs[i], &m) != TROUPE_OK)
            die("go", TROUPE_EFAILED);
    }
    while (bench_now() - t0 < seconds)
        usleep(10000);
    atomic_store(&actor_stop, true);
    double dt = bench_now() - t0;
    uint64_t total = atomic_load(&actor_commits);
    troupe_commit_get_stats(r->c, &after);
    while (atomic_load(&actor_inflight) > 0)
        usleep(1000);
    for (int i = 0; i < n; i++)
        troupe_actor_stop(rt, addrs[i], NULL, NULL);
    uint64_t groups = after.groups - before.groups;
    *group_size =
        groups ? (double)(after.batches - before.batches) / (double)groups : 0;
    return (double)total / dt;
}

int
main(void)
{
    int reps = bench_reps(5);
    const char *secs_env = getenv("BENCH_SECONDS");
    double secs = secs_env ? atof(secs_env) : 1.5;
    if (secs <= 0)
        secs = 1.5;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/troupe-bench-gc-XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    static run r;
    troupe_err e = troupe_db_open(dir, NULL, &r.db);
    if (e != TROUPE_OK)
        die("open", e);
    if ((e = troupe_db_cf(r.db, TROUPE_CF_DEFAULT, &r.cf)) != TROUPE_OK)
        die("cf", e);
    if ((e = troupe_commit_create(r.db, NULL, &r.c)) != TROUPE_OK)
        die("commit_create", e);

    printf("group commit: synced commits of one %d B key + %d B value, "
           "%d reps x %.1f s per phase, dir %s\n",
           KEY_LEN, VAL_LEN, reps, secs, dir);
    troupe_runtime *rt;
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 1};
    if ((e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK)
        die("runtime", e);
    double a1[64], a64[64], v1[64], v64[64];
    for (int i = 0; i < reps; i++) {
        double g1, g64, ga1, ga64;
        a1[i] = actor_phase(&r, rt, 1, secs, &ga1);
        a64[i] = actor_phase(&r, rt, 64, secs, &ga64);
        v1[i] = phase(&r, 1, secs, &g1);
        v64[i] = phase(&r, 64, secs, &g64);
        printf("  rep %d: actors 1: %.0f/s (%.1f per sync), 64: %.0f/s "
               "(%.1f per sync), ratio %.1f | threads 1: %.0f/s, 64: %.0f/s "
               "(%.1f per sync), ratio %.1f\n",
               i + 1, a1[i], ga1, a64[i], ga64, a1[i] > 0 ? a64[i] / a1[i] : 0,
               v1[i], v64[i], g64, v1[i] > 0 ? v64[i] / v1[i] : 0);
        fflush(stdout);
    }
    troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
    double am1 = bench_median(a1, reps), am64 = bench_median(a64, reps);
    double m1 = bench_median(v1, reps), m64 = bench_median(v64, reps);
    printf("median: actors 1 %.0f, 64 %.0f commits/s; threads 1 %.0f, 64 "
           "%.0f commits/s\n",
           am1, am64, m1, m64);
    troupe_commit_destroy(r.c);
    if ((e = troupe_db_close(r.db)) != TROUPE_OK)
        die("close", e);
    bench_rmtree(dir);
    bench_line_peer("group_commit_64", am64, "commits/s", "group_commit_1",
                    am1);
    bench_line_peer("group_commit_64_threads", m64, "commits/s",
                    "group_commit_1_threads", m1);
    return 0;
}
