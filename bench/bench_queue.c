/*
 * bench_queue: the partitioned scheduled queue, side by
 * side with BullMQ on a local Redis (bench/peers/bullmq/peer_bullmq.mjs).
 *
 *   bench queue_e2e_sync    <v> events/s peer bullmq_sync_1    <v> ratio <r>
 *   bench queue_e2e_nosync  <v> events/s peer bullmq_nosync_1  <v> ratio <r>
 *   bench queue_e2e_4workers <v> events/s peer bullmq_sync_4   <v> ratio <r>
 *   bench queue_due_p50_us  <v> us peer bullmq_due_p50_us <v> ratio <r>
 *   bench queue_due_p99_us  <v> us peer bullmq_due_p99_us <v> ratio <r>
 *   bench queue_fairness_delay_ms <v> ms
 *
 * Goal (docs/performance.md): the e2e figures at least 2x BullMQ's events/s.
 * For the due latencies lower is better (ratio < 1 is troupe ahead).
 *
 * End to end (queue_e2e_*), per rep, the peer's workload one for one:
 * - a fresh queue of BENCH_QUEUE_PARTITIONS (4) partitions (BullMQ's
 *   FLUSHALL per rep); its workers are started, subscribed and idle
 *   (50 ms) before the clock starts;
 * - the main thread publishes N = BENCH_QUEUE_EVENTS (20000) events due
 *   now, through the asynchronous troupe_queue_publish, in chunks of 100
 *   (100 in flight, wait for all 100 callbacks, next chunk): BullMQ's
 *   addBulk of 100, one chunk at a time. Each event: id the decimal
 *   sequence number, business key "customer-NNNNNN" cycling over 1000
 *   keys, payload one msgpack map {key, seq, body} of exactly 100 bytes
 *   (the peer's JSON data is 100 bytes), no owner;
 * - the handler (on the runtime's worker pool) is a no-op that returns
 *   ACK: the outcome commit moves the pending row to the completed row
 *   (completed history kept, as the peer keeps completed jobs);
 * - the clock stops when the last outcome has committed: once the Nth
 *   handler has started, troupe_queue_worker_stop_wait drains it and
 *   commits its outcome (the peer stops at the Nth 'completed' event);
 *   events/s = N / that time. Then (untimed) the stats must show N
 *   completed and 0 pending, and the handler must have run exactly N
 *   times, or the bench fails.
 * queue_e2e_sync: publish and outcome commits synced (fdatasync of the
 * WAL, group commit); the peer runs Redis with AOF appendfsync everysec,
 * which is weaker (up to a second of acknowledged jobs lost on a power
 * cut). queue_e2e_nosync: both unsynced (troupe: in the page cache,
 * survives kill -9; peer: AOF off). One worker subscribed to every
 * partition with credit BENCH_QUEUE_CREDIT (32), and the peer's Worker
 * with the same concurrency (passed as its third word, "sync 1 32"; the
 * peer figure is named bullmq_sync_1_c32): 32 events in hand at a time on
 * both sides. BullMQ's rate levels off from concurrency 16 (15-18k
 * events/s here at 16, 32 and 64); troupe's synced rate grows with the
 * credit, since outcomes in flight share a group commit. At credit 1 each
 * synced outcome waits for its own fdatasync (about 3.6k events/s against
 * BullMQ's 5.7k, whose everysec never waits): BENCH_QUEUE_CREDIT=1 shows
 * it (docs/performance.md, "Queue"). queue_e2e_4workers: synced, 4
 * workers of that credit, each subscribed to a quarter of the partitions
 * (peer: "sync 4 32", 4 Workers).
 *
 * Partitions: 4, the fewest that give each of the 4 workers its own
 * partition. More partitions cost: a worker stalled for credit has every
 * partition of its range wait, and each runs its own pass. Business keys
 * hash (FNV-1a) exactly evenly over 4 partitions: 250 keys each.
 *
 * Due latency (queue_due_p50_us, queue_due_p99_us), per rep: one idle
 * worker (credit 1, all partitions); N = BENCH_QUEUE_DUE_N (500) events
 * are published (synced, chunks of 100) with runnable times 300 ms after
 * publishing starts, then 5 ms apart (the peer's BULLMQ_DUE_LEAD_MS and
 * BULLMQ_DUE_SPACING_MS defaults, passed to it explicitly), so each comes
 * due alone to an idle worker. Latency = handler start - due time, both on
 * the wall clock: the handler reads CLOCK_REALTIME in microseconds and
 * subtracts the event's runnable time (Unix ms, exact) x 1000; the queue's
 * own clock (troupe_now_ms) truncates to the millisecond, so an event is
 * never delivered before its due millisecond begins. The peer measures the
 * same way (performance.now() calibrated on Date.now()). p50 and p99 are
 * the peer's quantiles (the ceil(q n)-th smallest). The peer runs Redis at
 * its default hz 10, which dominates its figure (peer_bullmq.mjs).
 *
 * Fairness (queue_fairness_delay_ms), per rep, no peer: a queue of one
 * partition (so every event shares one pass); 1,000 events due now whose
 * handler always fails (error: no outcome, so they stay pending and are
 * delivered again and again), then one event due 500 ms later; one worker
 * of credit 1 started after publishing. Printed: the median delay from the
 * later event's due time to its handler's start, in ms (it waits for the
 * pass in progress and one whole pass over the 1,000 failures). Fails if
 * it is not delivered within 10 s of its due time.
 *
 * Reps: one warm-up (N/10 events, not counted), then BENCH_REPS (5) reps;
 * each troupe rep is followed by one run of the peer with BENCH_REPS=1
 * (after the peer's own warm-up), so neighbours on the shared machine load
 * both sides alike; figures are medians of each side's reps.
 *
 * Knobs: argv[1] runs only the figures whose name contains it (e2e, due,
 * fairness, sync, ...); BENCH_SIDE=troupe skips the peer (profiling);
 * BENCH_QUEUE_EVENTS, BENCH_QUEUE_CREDIT, BENCH_QUEUE_PARTITIONS,
 * BENCH_QUEUE_DUE_N, BENCH_QUEUE_POOL (worker pool threads; 0: the
 * runtime's default, 4). The runtime has one scheduler per core. One
 * database in a temporary directory, removed at the end (also on errors).
 * Any error, a failed check or a failed peer run exits 1; without
 * $TROUPE_PEERS_DIR (bench/run.sh sets it) the peer is skipped (figure
 * -1). docs/performance.md, "Queue", has figures and where the time goes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "peers/peer_run.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/msg.h"
#include "troupe/queue.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"

#define CHUNK 100       /* publishes in flight (the peer's addBulk size) */
#define KEYS 1000       /* business keys */
#define PAYLOAD_LEN 100 /* bytes of msgpack per event */
#define DUE_LEAD_MS 300
#define DUE_SPACING_MS 5
#define FAIR_FAILING 1000
#define FAIR_LATE_MS 500
#define FAIR_LIMIT_MS 10000
#define WAIT_LIMIT_S 300.0
#define MAX_REPS 64

static troupe_queues *QS;
static const char *only;
static bool no_peer;
static int n_events = 20000;
static uint32_t credit = 32;
static uint32_t parts = 4;
static int due_n = 500;
static unsigned qseq;  /* fresh queue names */
static char dir[4096]; /* the database's temporary directory */

static int
want(const char *name)
{
    return only == NULL || strstr(name, only) != NULL;
}

/* Errors: best-effort removal of the temporary directory, exit 1. */
static void
fail(const char *msg)
{
    fprintf(stderr, "bench_queue: %s\n", msg);
    if (dir[0] != '\0')
        bench_rmtree(dir);
    exit(1);
}

static void
die(const char *what, troupe_err e)
{
    char m[256];
    snprintf(m, sizeof(m), "%s: %s", what, troupe_err_name(e));
    fail(m);
}

static int
env_int(const char *name, int dflt, int lo, int hi)
{
    const char *s = getenv(name);
    int v = s && *s ? atoi(s) : dflt;
    return v < lo ? lo : v > hi ? hi : v;
}

static int64_t
real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- events -------------------------------------------------------------
 */

typedef struct evbuf {
    char id[24];
    char key[16];
    uint8_t payload[PAYLOAD_LEN];
} evbuf;

static void
put_str(uint8_t **p, const char *s)
{
    size_t n = strlen(s);
    *(*p)++ = (uint8_t)(0xa0 | n); /* fixstr: n < 32 */
    memcpy(*p, s, n);
    *p += n;
}

/* Event seq: key "customer-NNNNNN" (seq mod 1000), payload the msgpack map
 * {"key": key, "seq": u32, "body": "xx..."} of exactly PAYLOAD_LEN bytes. */
static troupe_queue_event
ev_make(evbuf *b, const char *idpfx, uint32_t seq, int64_t time_ms)
{
    snprintf(b->id, sizeof(b->id), "%s%u", idpfx, seq);
    snprintf(b->key, sizeof(b->key), "customer-%06u", seq % KEYS);
    uint8_t *p = b->payload;
    *p++ = 0x83;
    put_str(&p, "key");
    put_str(&p, b->key);
    put_str(&p, "seq");
    *p++ = 0xce;
    *p++ = (uint8_t)(seq >> 24);
    *p++ = (uint8_t)(seq >> 16);
    *p++ = (uint8_t)(seq >> 8);
    *p++ = (uint8_t)seq;
    put_str(&p, "body");
    *p++ = 0xd9; /* str8 */
    size_t pad = PAYLOAD_LEN - (size_t)(p + 1 - b->payload);
    *p++ = (uint8_t)pad;
    memset(p, 'x', pad);
    troupe_queue_event e = {.id = b->id,
                            .id_len = strlen(b->id),
                            .key = b->key,
                            .key_len = strlen(b->key),
                            .payload = b->payload,
                            .payload_len = PAYLOAD_LEN,
                            .time_ms = time_ms};
    return e;
}

/* ---- publishing in chunks of CHUNK ------------------------------------ */

typedef struct chunk_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
    troupe_err err;
} chunk_wait;

static chunk_wait CW = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
                        TROUPE_OK};

static void
published(troupe_err err, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&CW.mu);
    if (err != TROUPE_OK && CW.err == TROUPE_OK)
        CW.err = err;
    if (--CW.pending == 0)
        pthread_cond_broadcast(&CW.cv);
    pthread_mutex_unlock(&CW.mu);
}

/* Publishes events [0, n) of `fn` CHUNK at a time; dies on any error. */
typedef troupe_queue_event (*ev_fn)(evbuf *b, uint32_t i, void *arg);

static void
publish_all(const char *queue, int n, ev_fn fn, void *arg, troupe_sync sync)
{
    static evbuf bufs[CHUNK];
    for (int i = 0; i < n; i += CHUNK) {
        int m = n - i < CHUNK ? n - i : CHUNK;
        pthread_mutex_lock(&CW.mu);
        CW.pending = m;
        pthread_mutex_unlock(&CW.mu);
        for (int j = 0; j < m; j++) {
            troupe_queue_event e = fn(&bufs[j], (uint32_t)(i + j), arg);
            troupe_err err =
                troupe_queue_publish(QS, queue, &e, sync, published, NULL);
            if (err != TROUPE_OK)
                die("publish", err);
        }
        pthread_mutex_lock(&CW.mu);
        while (CW.pending > 0)
            pthread_cond_wait(&CW.cv, &CW.mu);
        troupe_err err = CW.err;
        pthread_mutex_unlock(&CW.mu);
        if (err != TROUPE_OK)
            die("publish callback", err);
    }
}

/* ---- handler-side counting ---------------------------------------------
 */

typedef struct counter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int64_t n;
    int64_t target;
} counter;

static counter CT = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void
counter_reset(int64_t target)
{
    atomic_store(&CT.n, 0);
    pthread_mutex_lock(&CT.mu);
    CT.target = target;
    pthread_mutex_unlock(&CT.mu);
}

/* Counts one; returns the count. */
static int64_t
counter_hit(void)
{
    int64_t c = atomic_fetch_add(&CT.n, 1) + 1;
    if (c == CT.target) {
        pthread_mutex_lock(&CT.mu);
        pthread_cond_broadcast(&CT.cv);
        pthread_mutex_unlock(&CT.mu);
    }
    return c;
}

/* Waits until the count reaches the target or `limit_s` passes; false on
 * timeout. */
static bool
counter_wait(double limit_s)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)limit_s;
    bool ok = true;
    pthread_mutex_lock(&CT.mu);
    while (atomic_load(&CT.n) < CT.target)
        if (pthread_cond_timedwait(&CT.cv, &CT.mu, &dl) != 0 &&
            atomic_load(&CT.n) < CT.target) {
            ok = false;
            break;
        }
    pthread_mutex_unlock(&CT.mu);
    return ok;
}

/* ---- queues and workers ------------------------------------------------- */

static void
queue_new(char *name, size_t cap, const char *tag, uint32_t np)
{
    snprintf(name, cap, "%s_%u", tag, ++qseq);
    troupe_queue_spec s = {name, np, 24 * 3600 * 1000, 0};
    troupe_err e = troupe_queues_create_wait(QS, &s);
    if (e != TROUPE_OK)
        die("create queue", e);
}

static void
queue_drop(const char *name)
{
    troupe_err e = troupe_queues_drop_wait(QS, name);
    if (e != TROUPE_OK)
        die("drop queue", e);
}

static troupe_queue_worker *
worker_new(const char *queue, uint32_t first, uint32_t last, uint32_t cr,
           troupe_queue_handler h, troupe_sync sync)
{
    troupe_queue_worker_opts o = {.queue = queue,
                                  .first = first,
                                  .last = last,
                                  .credit = cr,
                                  .handler = h,
                                  .sync = sync};
    troupe_queue_worker *w = NULL;
    troupe_err e = troupe_queue_worker_create(QS, &o, &w);
    if (e != TROUPE_OK)
        die("worker create", e);
    return w;
}

/* Stops w (its running handlers settle and their outcomes commit), then
 * frees it. */
static void
worker_end(troupe_queue_worker *w)
{
    troupe_err e = troupe_queue_worker_stop_wait(w);
    if (e != TROUPE_OK)
        die("worker stop", e);
    troupe_queue_worker_destroy(w);
}

static void
expect_counts(const char *queue, uint64_t completed, uint64_t pending)
{
    troupe_queue_stats *st = NULL;
    troupe_err e = troupe_queue_stats_wait(QS, queue, &st);
    if (e != TROUPE_OK)
        die("stats", e);
    if (st->completed != completed || st->pending != pending ||
        st->malformed != 0) {
        fprintf(stderr,
                "bench_queue: %s: %llu completed, %llu pending, %llu "
                "malformed; expected %llu, %llu, 0\n",
                queue, (unsigned long long)st->completed,
                (unsigned long long)st->pending,
                (unsigned long long)st->malformed,
                (unsigned long long)completed, (unsigned long long)pending);
        fail("stats mismatch");
    }
    troupe_free(st);
}

/* ---- peer --------------------------------------------------------------- */

/* One run of the peer with a single rep (after its own warm-up), with
 * BULLMQ_* set to this bench's workload. -1 when skipped or failed. */
static double
peer_once(const char *arg)
{
    if (no_peer)
        return -1;
    const char *old = getenv("BENCH_REPS");
    char *saved = old ? strdup(old) : NULL;
    char buf[32];
    setenv("BENCH_REPS", "1", 1);
    snprintf(buf, sizeof(buf), "%d", n_events);
    setenv("BULLMQ_EVENTS", buf, 1);
    snprintf(buf, sizeof(buf), "%d", DUE_LEAD_MS);
    setenv("BULLMQ_DUE_LEAD_MS", buf, 1);
    snprintf(buf, sizeof(buf), "%d", DUE_SPACING_MS);
    setenv("BULLMQ_DUE_SPACING_MS", buf, 1);
    double v = bench_run_peer("peer_bullmq", arg);
    if (saved) {
        setenv("BENCH_REPS", saved, 1);
        free(saved);
    } else {
        unsetenv("BENCH_REPS");
    }
    return v;
}

/* Median of the peer's reps, or -1 if any failed (the line then shows a
 * peer value of -1 and ratio 0). */
static double
peer_median(const double *v, int n, int *peer_failed)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 0) {
            if (!no_peer)
                *peer_failed = 1;
            return -1;
        }
    return bench_median(v, n);
}

/* ---- end to end --------------------------------------------------------- */

static troupe_err
h_ack(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    (void)d;
    (void)arg;
    counter_hit();
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

static troupe_queue_event
e2e_ev(evbuf *b, uint32_t i, void *arg)
{
    (void)arg;
    return ev_make(b, "", i, troupe_now_ms());
}

/* One rep: n events, `nw` workers, sync; returns events/s. */
static double
e2e_rep(int n, int nw, troupe_sync sync)
{
    char q[64];
    queue_new(q, sizeof(q), "e2e", parts);
    troupe_queue_worker *ws[16];
    for (int i = 0; i < nw; i++) {
        uint32_t first = parts * (uint32_t)i / (uint32_t)nw;
        uint32_t last = parts * (uint32_t)(i + 1) / (uint32_t)nw - 1;
        ws[i] = worker_new(q, first, last, credit, h_ack, sync);
    }
    counter_reset(n);
    usleep(50000); /* every partition has its subscriptions */
    double t0 = bench_now();
    publish_all(q, n, e2e_ev, NULL, sync);
    double tpub = bench_now();
    if (!counter_wait(WAIT_LIMIT_S))
        fail("e2e: not every event was delivered in time");
    for (int i = 0; i < nw; i++)
        worker_end(ws[i]); /* drains the outcomes */
    double t1 = bench_now();
    if (atomic_load(&CT.n) != n) {
        fprintf(stderr, "bench_queue: e2e: %lld deliveries for %d events\n",
                (long long)atomic_load(&CT.n), n);
        fail("e2e: wrong delivery count");
    }
    expect_counts(q, (uint64_t)n, 0);
    queue_drop(q);
    double rate = n / (t1 - t0);
    printf("  e2e %s %d worker(s): %.0f events/s (published in %.0f ms, all "
           "completed in %.0f ms)\n",
           sync == TROUPE_SYNC_ON ? "sync" : "nosync", nw, rate,
           (tpub - t0) * 1e3, (t1 - t0) * 1e3);
    fflush(stdout);
    return rate;
}

static int
e2e_figure(const char *name, const char *peer_mode, int nw, troupe_sync sync,
           int reps)
{
    char parg[64], pname[64];
    if (credit > 1) { /* the peer's Worker concurrency = our credit */
        snprintf(pname, sizeof(pname), "bullmq_%s_%d_c%u", peer_mode, nw,
                 credit);
        snprintf(parg, sizeof(parg), "%s %d %u", peer_mode, nw, credit);
    } else {
        snprintf(pname, sizeof(pname), "bullmq_%s_%d", peer_mode, nw);
        snprintf(parg, sizeof(parg), "%s %d", peer_mode, nw);
    }
    int warm = n_events / 10 < 2000 ? n_events / 10 : 2000;
    (void)e2e_rep(warm > 0 ? warm : 1, nw, sync);
    double v[MAX_REPS], pv[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        v[r] = e2e_rep(n_events, nw, sync);
        pv[r] = peer_once(parg);
        printf("  %s rep %d: troupe %.0f events/s, BullMQ (%s) %.0f "
               "events/s\n",
               name, r + 1, v[r], parg, pv[r]);
        fflush(stdout);
    }
    int peer_failed = 0;
    bench_line_peer(name, bench_median(v, reps), "events/s", pname,
                    peer_median(pv, reps, &peer_failed));
    return peer_failed;
}

/* ---- due latency -------------------------------------------------------- */

static int64_t *due_lat; /* [due_n], microseconds */

static troupe_err
h_due(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    (void)arg;
    int64_t lat = real_us() - d->ev.time_ms * 1000;
    int64_t i = atomic_load(&CT.n);
    if (i < due_n)
        due_lat[i] = lat;
    counter_hit(); /* credit 1: one handler at a time */
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

static troupe_queue_event
due_ev(evbuf *b, uint32_t i, void *arg)
{
    int64_t base = *(const int64_t *)arg;
    return ev_make(b, "", i, base + (int64_t)i * DUE_SPACING_MS);
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double
quantile(const int64_t *sorted, int n, double q)
{
    int idx = (int)(q * n + 0.999999) - 1;
    idx = idx < 0 ? 0 : idx >= n ? n - 1 : idx;
    return (double)sorted[idx];
}

static void
due_rep(int n, double *p50, double *p99)
{
    char q[64];
    queue_new(q, sizeof(q), "due", parts);
    troupe_queue_worker *w =
        worker_new(q, 0, parts - 1, 1, h_due, TROUPE_SYNC_ON);
    counter_reset(n);
    usleep(50000);
    int64_t base = troupe_now_ms() + DUE_LEAD_MS;
    publish_all(q, n, due_ev, &base, TROUPE_SYNC_ON);
    int64_t late = troupe_now_ms() - base;
    if (!counter_wait(WAIT_LIMIT_S))
        fail("due: not every event was delivered in time");
    worker_end(w);
    if (atomic_load(&CT.n) != n)
        fail("due: an event was delivered more than once");
    expect_counts(q, (uint64_t)n, 0);
    queue_drop(q);
    if (late > 0)
        printf("  warning: publishing took %lld ms past the first due time\n",
               (long long)late);
    qsort(due_lat, (size_t)n, sizeof(*due_lat), cmp_i64);
    *p50 = quantile(due_lat, n, 0.5);
    *p99 = quantile(due_lat, n, 0.99);
    printf("  due: %d events, p50 %.0f us, p99 %.0f us (min %lld, max %lld)\n",
           n, *p50, *p99, (long long)due_lat[0], (long long)due_lat[n - 1]);
    fflush(stdout);
}

static int
due_figures(int reps)
{
    due_lat = calloc((size_t)due_n, sizeof(*due_lat));
    if (due_lat == NULL)
        fail("out of memory");
    double a, b;
    int warm = due_n / 10 < 200 ? due_n / 10 : 200;
    due_rep(warm > 0 ? warm : 1, &a, &b);
    double v50[MAX_REPS], v99[MAX_REPS], p50[MAX_REPS], p99[MAX_REPS];
    char arg50[64], arg99[64];
    snprintf(arg50, sizeof(arg50), "due %d p50", due_n);
    snprintf(arg99, sizeof(arg99), "due %d p99", due_n);
    for (int r = 0; r < reps; r++) {
        due_rep(due_n, &v50[r], &v99[r]);
        p50[r] = want("queue_due_p50") ? peer_once(arg50) : -1;
        p99[r] = want("queue_due_p99") ? peer_once(arg99) : -1;
        printf("  due rep %d: troupe p50 %.0f us, p99 %.0f us; BullMQ p50 "
               "%.0f us, p99 %.0f us\n",
               r + 1, v50[r], v99[r], p50[r], p99[r]);
        fflush(stdout);
    }
    int peer_failed = 0;
    if (want("queue_due_p50"))
        bench_line_peer("queue_due_p50_us", bench_median(v50, reps), "us",
                        "bullmq_due_p50_us",
                        peer_median(p50, reps, &peer_failed));
    if (want("queue_due_p99"))
        bench_line_peer("queue_due_p99_us", bench_median(v99, reps), "us",
                        "bullmq_due_p99_us",
                        peer_median(p99, reps, &peer_failed));
    free(due_lat);
    return peer_failed;
}

/* ---- fairness ----------------------------------------------------------- */

static _Atomic int64_t fair_seen_us; /* handler start of the late event */
static _Atomic int64_t fair_failures;

static troupe_err
h_fair(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    (void)arg;
    if (d->ev.id_len == 4 && memcmp(d->ev.id, "late", 4) == 0) {
        atomic_store(&fair_seen_us, real_us());
        counter_hit();
        out->kind = TROUPE_QUEUE_ACK;
        return TROUPE_OK;
    }
    atomic_fetch_add(&fair_failures, 1);
    return TROUPE_EFAILED; /* no outcome: stays pending, delivered again */
}

static troupe_queue_event
fair_ev(evbuf *b, uint32_t i, void *arg)
{
    (void)arg;
    troupe_queue_event e = ev_make(b, "fail-", i, troupe_now_ms());
    e.key = "customer-000000"; /* one partition anyway */
    e.key_len = strlen(e.key);
    return e;
}

static double
fair_rep(void)
{
    char q[64];
    queue_new(q, sizeof(q), "fair", 1);
    publish_all(q, FAIR_FAILING, fair_ev, NULL, TROUPE_SYNC_ON);
    evbuf b;
    int64_t due = troupe_now_ms() + FAIR_LATE_MS;
    troupe_queue_event late = ev_make(&b, "late", 0, due);
    b.id[4] = '\0'; /* "late" */
    late.id_len = 4;
    troupe_err e = troupe_queue_publish_wait(QS, q, &late, TROUPE_SYNC_ON);
    if (e != TROUPE_OK)
        die("publish late", e);
    counter_reset(1);
    atomic_store(&fair_seen_us, 0);
    atomic_store(&fair_failures, 0);
    troupe_queue_worker *w = worker_new(q, 0, 0, 1, h_fair, TROUPE_SYNC_ON);
    double wait_s = (double)(due - troupe_now_ms() + FAIR_LIMIT_MS) / 1e3 + 1;
    bool ok = counter_wait(wait_s > 0 ? wait_s : 1);
    int64_t failures_before = atomic_load(&fair_failures);
    worker_end(w);
    int64_t seen = atomic_load(&fair_seen_us);
    double delay_ms = (double)(seen - due * 1000) / 1e3;
    if (!ok || seen == 0 || delay_ms > FAIR_LIMIT_MS) {
        fprintf(stderr,
                "bench_queue: fairness: the later event was %s within %d "
                "ms of its due time (%lld failed deliveries meanwhile)\n",
                seen == 0 ? "not delivered" : "delivered, but not",
                FAIR_LIMIT_MS, (long long)failures_before);
        fail("fairness failed");
    }
    expect_counts(q, 1, FAIR_FAILING);
    queue_drop(q);
    printf("  fairness: later event delivered %.1f ms after its due time; "
           "%lld failed deliveries of the %d failing events by then\n",
           delay_ms, (long long)failures_before, FAIR_FAILING);
    fflush(stdout);
    return delay_ms;
}

/* ---- main --------------------------------------------------------------- */

int
main(int argc, char **argv)
{
    int reps = bench_reps(5);
    only = argc > 1 ? argv[1] : NULL;
    const char *side = getenv("BENCH_SIDE");
    no_peer = side != NULL && strcmp(side, "troupe") == 0;
    n_events = env_int("BENCH_QUEUE_EVENTS", 20000, 1, 10000000);
    credit = (uint32_t)env_int("BENCH_QUEUE_CREDIT", 32, 1, 65536);
    parts = (uint32_t)env_int("BENCH_QUEUE_PARTITIONS", 4, 4, 65536);
    due_n = env_int("BENCH_QUEUE_DUE_N", 500, 1, 1000000);
    unsigned pool = (unsigned)env_int("BENCH_QUEUE_POOL", 0, 0, 256);

    const char *pd = getenv("TROUPE_PEERS_DIR");
    if (!no_peer && (pd == NULL || *pd == '\0')) {
        fprintf(stderr, "bench_queue: TROUPE_PEERS_DIR is not set (run "
                        "through bench/run.sh): no peer figures\n");
        no_peer = true;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/troupe-bench-queue-XXXXXX",
             tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    troupe_db *db;
    troupe_err e = troupe_db_open(dir, NULL, &db);
    if (e != TROUPE_OK)
        die("open", e);
    troupe_commit *cm;
    if ((e = troupe_commit_create(db, NULL, &cm)) != TROUPE_OK)
        die("commit_create", e);
    troupe_runtime *rt;
    troupe_runtime_opts ro = {.workers = pool};
    if ((e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK)
        die("runtime", e);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    troupe_catalog *cat;
    if ((e = troupe_catalog_open(&co, &cat)) != TROUPE_OK)
        die("catalog_open", e);
    troupe_queues_opts qo = {.catalog = cat, .commit = cm};
    if ((e = troupe_queues_open(&qo, &QS)) != TROUPE_OK)
        die("queues_open", e);
    printf("bench_queue: %d reps, %d events of %d B, %u partitions, credit "
           "%u, due %d events; dir %s\n",
           reps, n_events, PAYLOAD_LEN, parts, credit, due_n, dir);
    fflush(stdout);

    int peer_failed = 0;
    if (want("queue_e2e_sync"))
        peer_failed |=
            e2e_figure("queue_e2e_sync", "sync", 1, TROUPE_SYNC_ON, reps);
    if (want("queue_e2e_nosync"))
        peer_failed |=
            e2e_figure("queue_e2e_nosync", "nosync", 1, TROUPE_SYNC_OFF, reps);
    if (want("queue_e2e_4workers"))
        peer_failed |=
            e2e_figure("queue_e2e_4workers", "sync", 4, TROUPE_SYNC_ON, reps);
    if (want("queue_due_p50_us") || want("queue_due_p99_us"))
        peer_failed |= due_figures(reps);
    if (want("queue_fairness_delay_ms")) {
        double v[MAX_REPS];
        for (int r = 0; r < reps; r++)
            v[r] = fair_rep();
        bench_line("queue_fairness_delay_ms", bench_median(v, reps), "ms");
    }

    if ((e = troupe_queues_stop_wait(QS)) != TROUPE_OK)
        die("queues_stop", e);
    troupe_queues_destroy(QS);
    troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
    if ((e = troupe_runtime_shutdown_wait(rt)) != TROUPE_OK)
        die("shutdown", e);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(cm);
    if ((e = troupe_db_close(db)) != TROUPE_OK)
        die("close", e);
    bench_rmtree(dir);
    if (peer_failed)
        fprintf(stderr, "bench_queue: the BullMQ peer failed (see above)\n");
    return peer_failed ? 1 : 0;
}
