/*
 * queue_worker: a durable queue and a worker that handles its events.
 *
 *   queue_worker DIR
 *
 * Creates the queue "jobs" (two partitions) on the first run, publishes
 * three events (each one synced: once publish returns, it survives a
 * crash), and starts a worker on both partitions. The handler runs on the
 * runtime's worker threads, one event at a time here (credit 1); it fails
 * the first delivery of "resize" on purpose, and the queue delivers that
 * event again (attempt 2) instead of losing it. An event is done when its
 * handler returns OK with an ACK outcome, committed before the next
 * delivery. The main thread waits until all three are done, stops the
 * worker and closes everything.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <troupe/troupe.h>

typedef struct jobs {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} jobs;

/* On a worker thread; borrows d. */
static troupe_err
handle(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    jobs *j = arg;
    troupe_reader r;
    const char *what = NULL;
    size_t len = 0;
    troupe_reader_init(&r, d->ev.payload, d->ev.payload_len);
    troupe_read_str(&r, 64, &what, &len);
    if (troupe_read_end(&r) != TROUPE_OK) {
        out->kind = TROUPE_QUEUE_ACK; /* a malformed event: drop it */
        return TROUPE_OK;
    }
    printf("job %.*s, attempt %u\n", (int)len, what, d->attempt);
    if (len == 6 && memcmp(what, "resize", 6) == 0 && d->attempt == 1)
        return TROUPE_EIO; /* not done: delivered again */
    out->kind = TROUPE_QUEUE_ACK;
    pthread_mutex_lock(&j->mu);
    j->done++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return TROUPE_OK;
}

static troupe_err
publish(troupe_queues *q, const char *job, int64_t run)
{
    char id[64];
    snprintf(id, sizeof(id), "%s-%lld", job, (long long)run);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_cstr(&p, job);
    size_t len = 0;
    const void *payload = troupe_pack_data(&p, &len);
    troupe_queue_event ev = {.id = id,
                             .id_len = strlen(id),
                             .key = job, /* the partition follows the key */
                             .key_len = strlen(job),
                             .payload = payload,
                             .payload_len = len,
                             .time_ms = troupe_now_ms()};
    troupe_err e =
        p.err != TROUPE_OK
            ? p.err
            : troupe_queue_publish_wait(q, "jobs", &ev, TROUPE_SYNC_ON);
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
run(troupe_queues *q)
{
    troupe_queue_spec spec = {.name = "jobs", .partitions = 2};
    troupe_err e = troupe_queues_create_wait(q, &spec);
    if (e == TROUPE_EEXIST) /* a later run: the queue is stored */
        e = TROUPE_OK;
    int64_t now = troupe_now_ms(); /* makes this run's event ids unique */
    const char *names[] = {"thumbnail", "resize", "email"};
    for (int i = 0; i < 3 && e == TROUPE_OK; i++)
        e = publish(q, names[i], now);
    if (e != TROUPE_OK)
        return e;
    jobs j = {.done = 0};
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    troupe_queue_worker_opts wo = {.queue = "jobs",
                                   .first = 0,
                                   .last = 1,
                                   .credit = 1,
                                   .handler = handle,
                                   .arg = &j};
    troupe_queue_worker *w = NULL;
    e = troupe_queue_worker_create(q, &wo, &w);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&j.mu);
    while (e == TROUPE_OK && j.done < 3)
        if (pthread_cond_timedwait(&j.cv, &j.mu, &deadline) != 0)
            e = TROUPE_ETIMEDOUT;
    pthread_mutex_unlock(&j.mu);
    if (w != NULL) {
        troupe_queue_worker_stop_wait(w); /* drains what is running */
        troupe_queue_worker_destroy(w);
    }
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    if (e == TROUPE_OK)
        printf("all 3 jobs done\n");
    return e;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: queue_worker DIR\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_queues *q = NULL;
    troupe_runtime_opts ro = {.schedulers = 1};
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e == TROUPE_OK)
        e = troupe_commit_create(db, NULL, &commit);
    if (e == TROUPE_OK)
        e = troupe_runtime_create(&rt, &ro);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    if (e == TROUPE_OK)
        e = troupe_catalog_open(&co, &cat);
    troupe_queues_opts qo = {.catalog = cat, .commit = commit};
    if (e == TROUPE_OK)
        e = troupe_queues_open(&qo, &q);
    if (e == TROUPE_OK)
        e = run(q);
    if (e != TROUPE_OK)
        fprintf(stderr, "queue_worker: %s\n", troupe_err_name(e));
    /* close in the reverse order of opening */
    if (q != NULL)
        troupe_queues_stop_wait(q);
    troupe_queues_destroy(q);
    if (cat != NULL)
        troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
    if (rt != NULL)
        troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    if (troupe_db_close(db) != TROUPE_OK)
        e = TROUPE_EBUSY;
    return e == TROUPE_OK ? 0 : 1;
}
