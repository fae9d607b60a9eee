/*
 * Group commit: durable (synced) commits per second through the commit
 * pipeline, one small batch each (one 16 B key, one 100 B value).
 *
 *   group_commit_1   one submitter thread, waiting for each completion
 *                    before the next: one fdatasync per commit;
 *   group_commit_64  64 submitter threads doing the same at once: the
 *                    writer merges what queued during the previous sync.
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
#include <ftw.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
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

static int
rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
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
    double v1[64], v64[64];
    for (int i = 0; i < reps; i++) {
        double g1, g64;
        v1[i] = phase(&r, 1, secs, &g1);
        v64[i] = phase(&r, 64, secs, &g64);
        printf("  rep %d: 1 submitter %.0f commits/s (%.1f per sync), "
               "64 submitters %.0f commits/s (%.1f per sync), ratio %.1f\n",
               i + 1, v1[i], g1, v64[i], g64, v1[i] > 0 ? v64[i] / v1[i] : 0);
        fflush(stdout);
    }
    double m1 = bench_median(v1, reps), m64 = bench_median(v64, reps);
    printf("median: 1 submitter %.0f commits/s, 64 submitters %.0f "
           "commits/s\n",
           m1, m64);
    troupe_commit_destroy(r.c);
    if ((e = troupe_db_close(r.db)) != TROUPE_OK)
        die("close", e);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    bench_line_peer("group_commit_64", m64, "commits/s", "group_commit_1", m1);
    return 0;
}
