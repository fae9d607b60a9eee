/*
 * Commit pipeline: exactly-once completion, grouping, order, backpressure,
 * shutdown. Grouping is made deterministic by holding the writer inside a
 * completion callback (a gate) while the test queues the next group.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "stest.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"

static char *dir;
static troupe_db *db;
static troupe_cf *cfa, *cfb;

static void
setup(void)
{
    dir = ts_tempdir("commit");
    const char *cfs[] = {"a", "b"};
    db = st_open(dir, cfs, 2);
    cfa = st_cf(db, "a");
    cfb = st_cf(db, "b");
}

static void
teardown(void)
{
    ck_assert_ok(troupe_db_close(db));
    ts_rmtree(dir);
    free(dir);
}

/* One completion slot per batch: how often it fired and with what. */
typedef struct slot {
    atomic_int fired;
    _Atomic troupe_err err;
    atomic_int order; /* completion sequence number */
} slot;

static atomic_int seq;

static void
slot_cb(troupe_err err, void *arg)
{
    slot *s = arg;
    atomic_store(&s->err, err);
    atomic_store(&s->order, atomic_fetch_add(&seq, 1));
    atomic_fetch_add(&s->fired, 1);
}

typedef struct slots {
    slot *v;
    int n;
} slots;

static bool
all_fired(void *arg)
{
    slots *s = arg;
    for (int i = 0; i < s->n; i++) {
        if (atomic_load(&s->v[i].fired) == 0)
            return false;
    }
    return true;
}

/* Holds the writer thread inside a completion until opened. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    atomic_bool entered;
    slot s;
} gate;

static void
gate_init(gate *g)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

static void
gate_cb(troupe_err err, void *arg)
{
    gate *g = arg;
    slot_cb(err, &g->s);
    atomic_store(&g->entered, true);
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static bool
gate_entered(void *arg)
{
    return atomic_load(&((gate *)arg)->entered);
}

static void
gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static troupe_batch *
batch_put(troupe_cf *cf, const char *k, const char *v)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cf, k, strlen(k), v, strlen(v)));
    return b;
}

static void
submit_ok(troupe_commit *c, troupe_batch *b, troupe_sync s, troupe_commit_cb cb,
          void *arg)
{
    ck_assert_ok(troupe_commit_submit(c, &b, s, cb, arg));
    ck_assert_ptr_null(b);
}

/* Submits one batch whose completion holds the writer; returns once the
 * writer is inside it. */
static void
hold_writer(troupe_commit *c, gate *g)
{
    gate_init(g);
    submit_ok(c, batch_put(cfa, "gate", "1"), TROUPE_SYNC_OFF, gate_cb, g);
    ck_assert(ts_wait_until(gate_entered, g, 10000));
}

/* ---- arguments ------------------------------------------------------- */

START_TEST(test_create_and_calls_bad_args)
{
    troupe_commit *c = (troupe_commit *)db;
    ck_assert_err(troupe_commit_create(NULL, NULL, &c), TROUPE_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_err(troupe_commit_create(db, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_commit_stop(NULL, NULL, NULL), TROUPE_EINVAL);
    troupe_commit_destroy(NULL);
    troupe_commit_stats st = {1, 1, 1};
    troupe_commit_get_stats(NULL, &st);
    ck_assert_uint_eq(st.batches + st.groups + st.syncs, 0);
    troupe_commit_get_stats(NULL, NULL);
    troupe_hist_snapshot hw = {.count = 9}, hg = {.count = 9};
    troupe_commit_get_hists(NULL, &hw, &hg);
    ck_assert_uint_eq(hw.count + hg.count + hw.sum + hg.sum, 0);
    troupe_commit_get_hists(NULL, NULL, NULL);
}
END_TEST

START_TEST(test_submit_bad_args_keep_the_batch)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    slot s = {0};
    troupe_batch *b = batch_put(cfa, "k", "v"), *none = NULL;
    ck_assert_err(troupe_commit_submit(NULL, &b, 0, slot_cb, &s),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_commit_submit(c, NULL, 0, slot_cb, &s), TROUPE_EINVAL);
    ck_assert_err(troupe_commit_submit(c, &none, 0, slot_cb, &s),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_commit_submit(c, &b, 0, NULL, &s), TROUPE_EINVAL);
    ck_assert_err(troupe_commit_submit(c, &b, (troupe_sync)9, slot_cb, &s),
                  TROUPE_EINVAL);
    ck_assert_ptr_nonnull(b); /* still ours */

    char *dir2 = ts_tempdir("commit2");
    troupe_db *db2 = st_open(dir2, NULL, 0);
    troupe_batch *foreign = batch_put(st_cf(db2, TROUPE_CF_DEFAULT), "k", "v");
    ck_assert_err(troupe_commit_submit(c, &foreign, 0, slot_cb, &s),
                  TROUPE_EINVAL);
    ck_assert_ptr_nonnull(foreign);
    troupe_batch_destroy(foreign);
    ck_assert_ok(troupe_db_close(db2));
    ts_rmtree(dir2);
    free(dir2);

    troupe_commit_destroy(c);
    ck_assert_int_eq(atomic_load(&s.fired), 0); /* no error fired a cb */
    st_assert_value(db, cfa, "k", NULL);
    troupe_batch_destroy(b);
}
END_TEST

START_TEST(test_submit_sync_on_with_disable_wal_is_einval)
{
    char *d2 = ts_tempdir("commit_nowal");
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.disable_wal = true;
    o.sync = false;
    troupe_db *nw;
    ck_assert_ok(troupe_db_open(d2, &o, &nw));
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(nw, NULL, &c));
    slot s = {0};
    troupe_batch *b = batch_put(st_cf(nw, TROUPE_CF_DEFAULT), "k", "v");
    ck_assert_err(troupe_commit_submit(c, &b, TROUPE_SYNC_ON, slot_cb, &s),
                  TROUPE_EINVAL);
    ck_assert_ptr_nonnull(b);
    submit_ok(c, b, TROUPE_SYNC_DEFAULT, slot_cb, &s);
    troupe_commit_destroy(c);
    ck_assert_int_eq(atomic_load(&s.fired), 1);
    ck_assert_ok(atomic_load(&s.err));
    st_assert_value(nw, st_cf(nw, TROUPE_CF_DEFAULT), "k", "v");
    ck_assert_ok(troupe_db_close(nw));
    ts_rmtree(d2);
    free(d2);
}
END_TEST

/* ---- completion --------------------------------------------------------- */

START_TEST(test_single_synced_commit_completes_once_and_is_stored)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    slot s = {0};
    slots ss = {&s, 1};
    submit_ok(c, batch_put(cfa, "k", "v"), TROUPE_SYNC_ON, slot_cb, &s);
    ck_assert(ts_wait_until(all_fired, &ss, 10000));
    ck_assert_ok(atomic_load(&s.err));
    st_assert_value(db, cfa, "k", "v");
    troupe_commit_stats st;
    troupe_commit_get_stats(c, &st);
    ck_assert_uint_eq(st.batches, 1);
    ck_assert_uint_eq(st.groups, 1);
    ck_assert_uint_eq(st.syncs, 1);
    ck_assert_err(troupe_db_close(db), TROUPE_EBUSY); /* pipeline alive */
    troupe_commit_destroy(c);
    ck_assert_int_eq(atomic_load(&s.fired), 1);
}
END_TEST

START_TEST(test_queued_batches_merge_into_one_synced_write)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    st_put(db, cfb, "old", "x", TROUPE_SYNC_OFF);
    gate g;
    hold_writer(c, &g);
    enum { N = 10 };
    slot s[N + 1];
    memset(s, 0, sizeof(s));
    char k[16];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        troupe_batch *b = batch_put(i % 2 ? cfa : cfb, k, k);
        if (i == 3)
            ck_assert_ok(troupe_batch_delete(b, cfb, "old", 3));
        submit_ok(c, b, i == 7 ? TROUPE_SYNC_ON : TROUPE_SYNC_OFF, slot_cb,
                  &s[i]);
    }
    troupe_batch *empty;
    ck_assert_ok(troupe_batch_create(&empty));
    submit_ok(c, empty, TROUPE_SYNC_ON, slot_cb, &s[N]);
    /* Nothing of the queued group is visible while the writer is held. */
    st_assert_value(db, cfb, "k0", NULL);
    gate_open(&g);
    slots ss = {s, N + 1};
    ck_assert(ts_wait_until(all_fired, &ss, 10000));
    troupe_commit_stats st;
    troupe_commit_get_stats(c, &st);
    ck_assert_uint_eq(st.batches, N + 2);
    ck_assert_uint_eq(st.groups, 2); /* the gate's, then one for all */
    ck_assert_uint_eq(st.syncs, 1);
    /* the histograms: two writes; groups of 1 and N + 1 batches */
    troupe_hist_snapshot hw, hg;
    troupe_commit_get_hists(c, &hw, &hg);
    ck_assert_uint_eq(hw.count, 2);
    ck_assert_uint_gt(hw.sum, 0);
    ck_assert_uint_eq(hg.count, 2);
    ck_assert_uint_eq(hg.sum, N + 2);
    ck_assert_uint_eq(hg.counts[0], 1); /* <= 1 */
    ck_assert_uint_eq(hg.counts[4], 1); /* 11 in (8, 16] */
    int last = atomic_load(&g.s.order);
    for (int i = 0; i <= N; i++) {
        ck_assert_int_eq(atomic_load(&s[i].fired), 1);
        ck_assert_ok(atomic_load(&s[i].err));
        ck_assert_int_gt(atomic_load(&s[i].order), last); /* submit order */
        last = atomic_load(&s[i].order);
    }
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        st_assert_value(db, i % 2 ? cfa : cfb, k, k);
        st_assert_value(db, i % 2 ? cfb : cfa, k, NULL);
    }
    st_assert_value(db, cfb, "old", NULL);
    troupe_commit_destroy(c);
}
END_TEST

START_TEST(test_one_submitter_order_is_kept_across_groups)
{
    troupe_commit *c;
    troupe_commit_opts o = {.group_max_batches = 3};
    ck_assert_ok(troupe_commit_create(db, &o, &c));
    enum { N = 200 };
    slot *s = calloc(N, sizeof(slot));
    char v[16];
    for (int i = 0; i < N; i++) {
        snprintf(v, sizeof(v), "%d", i);
        submit_ok(c, batch_put(cfa, "k", v), TROUPE_SYNC_OFF, slot_cb, &s[i]);
    }
    slots ss = {s, N};
    ck_assert(ts_wait_until(all_fired, &ss, 20000));
    for (int i = 1; i < N; i++)
        ck_assert_int_gt(atomic_load(&s[i].order),
                         atomic_load(&s[i - 1].order));
    st_assert_value(db, cfa, "k", "199");
    troupe_commit_stats st;
    troupe_commit_get_stats(c, &st);
    ck_assert_uint_ge(st.groups, N / 3); /* group_max_batches honoured */
    troupe_commit_destroy(c);
    free(s);
}
END_TEST

/* Many threads, each waiting for its own completion before the next. */
typedef struct worker {
    troupe_commit *c;
    int id;
    int n;
    slot *s;
} worker;

static void *
worker_main(void *arg)
{
    worker *w = arg;
    char k[32];
    for (int i = 0; i < w->n; i++) {
        snprintf(k, sizeof(k), "w%02d-%04d", w->id, i);
        troupe_batch *b = batch_put(i % 2 ? cfa : cfb, k, k);
        ck_assert_ok(
            troupe_commit_submit(w->c, &b, TROUPE_SYNC_ON, slot_cb, &w->s[i]));
        slots one = {&w->s[i], 1};
        ck_assert(ts_wait_until(all_fired, &one, 20000));
    }
    return NULL;
}

START_TEST(test_concurrent_submitters_each_complete_exactly_once)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    enum { T = 8, N = 60 };
    pthread_t th[T];
    worker w[T];
    slot *s = calloc(T * N, sizeof(slot));
    for (int t = 0; t < T; t++) {
        w[t] = (worker){c, t, N, s + t * N};
        ck_assert_int_eq(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
    }
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    troupe_commit_stats st;
    troupe_commit_get_stats(c, &st);
    troupe_commit_destroy(c);
    ck_assert_uint_eq(st.batches, T * N);
    ck_assert_uint_le(st.groups, T * N);
    ck_assert_uint_eq(st.syncs, st.groups);
    fprintf(stderr, "commit: %d synced batches in %llu groups\n", T * N,
            (unsigned long long)st.groups);
    char k[32];
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(atomic_load(&s[t * N + i].fired), 1);
            ck_assert_ok(atomic_load(&s[t * N + i].err));
            snprintf(k, sizeof(k), "w%02d-%04d", t, i);
            st_assert_value(db, i % 2 ? cfa : cfb, k, k);
        }
    }
    free(s);
}
END_TEST

/* ---- backpressure and shutdown ----------------------------------------- */

START_TEST(test_full_queue_is_efull_and_leaves_the_batch)
{
    troupe_commit *c;
    troupe_commit_opts o = {.queue_max = 4};
    ck_assert_ok(troupe_commit_create(db, &o, &c));
    gate g;
    hold_writer(c, &g);
    slot s[5];
    memset(s, 0, sizeof(s));
    for (int i = 0; i < 4; i++)
        submit_ok(c, batch_put(cfa, "q", "v"), TROUPE_SYNC_OFF, slot_cb, &s[i]);
    troupe_batch *b = batch_put(cfa, "q5", "v");
    ck_assert_err(troupe_commit_submit(c, &b, TROUPE_SYNC_OFF, slot_cb, &s[4]),
                  TROUPE_EFULL);
    ck_assert_ptr_nonnull(b);
    gate_open(&g);
    slots ss = {s, 4};
    ck_assert(ts_wait_until(all_fired, &ss, 10000));
    /* Room again: the same batch goes in now. */
    submit_ok(c, b, TROUPE_SYNC_OFF, slot_cb, &s[4]);
    troupe_commit_destroy(c);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(atomic_load(&s[i].fired), 1);
    st_assert_value(db, cfa, "q5", "v");
}
END_TEST

/* VmRSS or VmHWM (its peak) of this process, the forked test, in bytes;
 * 0 if unreadable. Any thread (no assertion inside). */
static uint64_t
proc_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return 0;
    char line[256];
    uint64_t kb = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            kb = strtoull(line + n + 1, NULL, 10);
    }
    fclose(f);
    return kb * 1024;
}

static uint64_t
proc_kb(const char *field)
{
    uint64_t v = proc_bytes(field);
    ck_assert_uint_gt(v, 0);
    return v;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_MEANINGFUL 0 /* the sanitizer's quarantine and shadow grow it */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RSS_MEANINGFUL 0
#else
#define RSS_MEANINGFUL 1
#endif
#else
#define RSS_MEANINGFUL 1
#endif

/* A batch of one put of val_len bytes; touched, so resident. */
static troupe_batch *
batch_big(const char *k, const char *val, size_t val_len)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cfa, k, strlen(k), val, val_len));
    return b;
}

/* Bytes, not only batches: a queue of a few big batches is full. The
 * payload leaves more than 100 KiB of slack per batch for the encoding's
 * few bytes of overhead, so exactly budget / payload of them fit. A batch
 * larger than the whole budget gets into an empty queue only. */
START_TEST(test_byte_budget_is_efull_and_leaves_the_batch)
{
    const size_t budget = 1u << 20, payload = 300u << 10;
    const int fit = (int)(budget / payload);
    troupe_commit *c;
    troupe_commit_opts o = {.queue_max_bytes = budget};
    ck_assert_ok(troupe_commit_create(db, &o, &c));
    char *val = malloc(2 * budget);
    ck_assert_ptr_nonnull(val);
    memset(val, 'v', 2 * budget);
    gate g;
    hold_writer(c, &g);
    slot s[8];
    memset(s, 0, sizeof(s));
    char k[16];
    for (int i = 0; i < fit; i++) {
        snprintf(k, sizeof(k), "big%d", i);
        submit_ok(c, batch_big(k, val, payload), TROUPE_SYNC_OFF, slot_cb,
                  &s[i]);
    }
    troupe_batch *over = batch_big("over", val, payload);
    ck_assert_err(
        troupe_commit_submit(c, &over, TROUPE_SYNC_OFF, slot_cb, &s[fit]),
        TROUPE_EFULL);
    ck_assert_ptr_nonnull(over);
    /* A small one still fits (the count budget is far away). */
    submit_ok(c, batch_put(cfa, "small", "1"), TROUPE_SYNC_OFF, slot_cb,
              &s[fit + 1]);
    troupe_batch *huge = batch_big("huge", val, 2 * budget - 64);
    ck_assert_err(
        troupe_commit_submit(c, &huge, TROUPE_SYNC_OFF, slot_cb, &s[fit + 2]),
        TROUPE_EFULL);
    ck_assert_ptr_nonnull(huge);
    gate_open(&g);
    slots head = {s, fit};
    ck_assert(ts_wait_until(all_fired, &head, 10000));
    slots small = {&s[fit + 1], 1};
    ck_assert(ts_wait_until(all_fired, &small, 10000));
    /* Drained: the refused ones go in now, the huge one alone. */
    submit_ok(c, huge, TROUPE_SYNC_OFF, slot_cb, &s[fit + 2]);
    slots hs = {&s[fit + 2], 1};
    ck_assert(ts_wait_until(all_fired, &hs, 10000));
    submit_ok(c, over, TROUPE_SYNC_OFF, slot_cb, &s[fit]);
    troupe_commit_destroy(c);
    for (int i = 0; i < fit + 3; i++) {
        ck_assert_int_eq(atomic_load(&s[i].fired), 1);
        ck_assert_ok(atomic_load(&s[i].err));
    }
    void *v;
    size_t vl;
    ck_assert_ok(troupe_db_get(db, cfa, NULL, "huge", 4, &v, &vl));
    ck_assert_uint_eq(vl, 2 * budget - 64);
    troupe_free(v);
    ck_assert_ok(troupe_db_get(db, cfa, NULL, "over", 4, &v, &vl));
    ck_assert_uint_eq(vl, payload);
    troupe_free(v);
    free(val);
}
END_TEST

/*
 * A flood of 8 MiB batches against a writer that cannot keep up (held in
 * a completion): the default byte budget refuses with EFULL after 64 MiB,
 * and the process's resident size grows by no more than the budget plus
 * the batch in hand. With a count budget alone (4,096 batches) the same
 * flood queued everything; the loop stops at FLOOD_MAX batches (1 GiB) so
 * that a broken budget fails the test instead of the machine. The payload
 * is 4 KiB short of 8 MiB, so that the encoding's overhead cannot change
 * how many fit.
 */
#define FLOOD_BATCH (8u << 20)
#define FLOOD_PAYLOAD (FLOOD_BATCH - 4096)
#define FLOOD_MAX 128
#define DEFAULT_BUDGET (64u << 20)

/* A default pipeline, and a touched buffer of FLOOD_BATCH bytes. */
static troupe_commit *
flood_start(char **val)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    *val = malloc(FLOOD_BATCH);
    ck_assert_ptr_nonnull(*val);
    memset(*val, 'f', FLOOD_BATCH);
    return c;
}

START_TEST(test_flood_of_big_batches_is_bounded_in_bytes)
{
    char *val;
    troupe_commit *c = flood_start(&val);
    gate g;
    hold_writer(c, &g);
    uint64_t base = proc_kb("VmRSS");
    slot *s = calloc(FLOOD_MAX, sizeof(*s));
    ck_assert_ptr_nonnull(s);
    int accepted = 0;
    troupe_err e = TROUPE_OK;
    troupe_batch *b = NULL;
    char k[16];
    while (accepted < FLOOD_MAX) {
        snprintf(k, sizeof(k), "f%03d", accepted);
        b = batch_big(k, val, FLOOD_PAYLOAD);
        e = troupe_commit_submit(c, &b, TROUPE_SYNC_OFF, slot_cb, &s[accepted]);
        if (e != TROUPE_OK)
            break;
        accepted++;
    }
    uint64_t grown = proc_kb("VmRSS") - base;
    fprintf(stderr,
            "flood: %d batches of 8 MiB accepted, then %s; resident +%llu "
            "MiB\n",
            accepted, troupe_err_name(e), (unsigned long long)(grown >> 20));
    ck_assert_err(e, TROUPE_EFULL);
    ck_assert_int_eq(accepted, (int)(DEFAULT_BUDGET / FLOOD_BATCH));
    if (RSS_MEANINGFUL)
        ck_assert_msg(grown < DEFAULT_BUDGET + 2 * FLOOD_BATCH,
                      "resident grew by %llu MiB",
                      (unsigned long long)(grown >> 20));
    troupe_batch_destroy(b);
    gate_open(&g);
    slots ss = {s, accepted};
    ck_assert(ts_wait_until(all_fired, &ss, 30000));
    troupe_commit_destroy(c);
    for (int i = 0; i < accepted; i++)
        ck_assert_ok(atomic_load(&s[i].err));
    free(s);
    free(val);
}
END_TEST

/*
 * The same flood with the writer running: 4 threads submit synced 8 MiB
 * batches for FLOOD_MS, retrying on EFULL. The peak resident size grows by
 * less than FLOOD_RSS_MAX: the budget (64 MiB), the batches the threads
 * hold and the group in flight (40 MiB), RocksDB's memtables (two of 64
 * MiB) and the flush writing one out, and the allocator's slack; 300-440
 * MiB measured. Without a byte budget the threads, which fill a batch in
 * a few milliseconds, outrun a writer of ~35 synced batches per second by
 * gigabytes: each stops as soon as the process holds FLOOD_RSS_MAX more
 * than at the start, so that the test fails instead of the machine.
 */
#define FLOOD_THREADS 4
#define FLOOD_MS 1500
#define FLOOD_RSS_MAX (640ull << 20)

typedef struct flooder {
    troupe_commit *c;
    const char *val;
    int id;
    atomic_int done;
    atomic_int fulls;
    int sent;
    pthread_t th;
    troupe_err bad;
    uint64_t rss_stop; /* stop submitting beyond this resident size */
    bool over;
} flooder;

static void
flood_cb(troupe_err err, void *arg)
{
    flooder *f = arg;
    if (err != TROUPE_OK)
        f->bad = err;
    atomic_fetch_add(&f->done, 1);
}

static void *
flood_main(void *arg)
{
    flooder *f = arg;
    uint64_t end = ts_now_ms() + FLOOD_MS;
    char k[32];
    troupe_batch *b = NULL;
    while (ts_now_ms() < end) {
        if (b == NULL) {
            snprintf(k, sizeof(k), "t%d-%06d", f->id, f->sent);
            if (troupe_batch_create(&b) != TROUPE_OK ||
                troupe_batch_put(b, cfa, k, strlen(k), f->val, FLOOD_PAYLOAD) !=
                    TROUPE_OK) {
                f->bad = TROUPE_ENOMEM;
                break;
            }
        }
        troupe_err e =
            troupe_commit_submit(f->c, &b, TROUPE_SYNC_ON, flood_cb, f);
        if (e == TROUPE_OK) {
            f->sent++;
            if (proc_bytes("VmRSS") > f->rss_stop) {
                f->over = true;
                break;
            }
        } else if (e == TROUPE_EFULL) {
            atomic_fetch_add(&f->fulls, 1);
            sched_yield();
        } else {
            f->bad = e;
            break;
        }
    }
    troupe_batch_destroy(b);
    return NULL;
}

static bool
floods_done(void *arg)
{
    flooder *f = arg;
    for (int i = 0; i < FLOOD_THREADS; i++) {
        if (atomic_load(&f[i].done) != f[i].sent)
            return false;
    }
    return true;
}

START_TEST(test_flood_with_running_writer_peak_rss_is_bounded)
{
    char *val;
    troupe_commit *c = flood_start(&val);
    uint64_t base = proc_kb("VmRSS");
    /* Sanitizers' shadow memory and quarantine make the figure moot; the
     * guard stays, looser, so that a broken budget cannot eat the box. */
    uint64_t limit = RSS_MEANINGFUL ? FLOOD_RSS_MAX : 4 * FLOOD_RSS_MAX;
    flooder f[FLOOD_THREADS];
    memset(f, 0, sizeof(f));
    for (int i = 0; i < FLOOD_THREADS; i++) {
        f[i].c = c;
        f[i].val = val;
        f[i].id = i;
        f[i].rss_stop = base + limit;
        ck_assert_int_eq(pthread_create(&f[i].th, NULL, flood_main, &f[i]), 0);
    }
    for (int i = 0; i < FLOOD_THREADS; i++)
        pthread_join(f[i].th, NULL);
    ck_assert(ts_wait_until(floods_done, f, 60000));
    uint64_t peak = proc_kb("VmHWM");
    int sent = 0, fulls = 0;
    bool over = false;
    for (int i = 0; i < FLOOD_THREADS; i++) {
        ck_assert_ok(f[i].bad);
        sent += f[i].sent;
        fulls += atomic_load(&f[i].fulls);
        over |= f[i].over;
    }
    fprintf(stderr,
            "flood: %d synced 8 MiB batches in %d ms, %d EFULL retries; peak "
            "resident %llu MiB, %llu MiB at the start (limit +%llu)\n",
            sent, FLOOD_MS, fulls, (unsigned long long)(peak >> 20),
            (unsigned long long)(base >> 20),
            (unsigned long long)(limit >> 20));
    ck_assert_msg(!over, "a flooder saw the process grow past +%llu MiB",
                  (unsigned long long)(limit >> 20));
    ck_assert_int_gt(sent, 0);
    ck_assert_int_gt(fulls, 0); /* the budget, not the disk, held them */
    ck_assert_msg(peak - base < limit, "peak resident %llu MiB over base",
                  (unsigned long long)((peak - base) >> 20));
    troupe_commit_destroy(c);
    free(val);
}
END_TEST

typedef struct stop_state {
    atomic_int fired;
    atomic_int completed_before; /* batches completed when stop cb ran */
    slots *ss;
} stop_state;

static void
stop_cb(void *arg)
{
    stop_state *st = arg;
    int n = 0;
    for (int i = 0; i < st->ss->n; i++)
        n += atomic_load(&st->ss->v[i].fired);
    atomic_store(&st->completed_before, n);
    atomic_fetch_add(&st->fired, 1);
}

static bool
stop_fired(void *arg)
{
    return atomic_load(&((stop_state *)arg)->fired) > 0;
}

START_TEST(test_stop_writes_queued_batches_then_fires_stop_cb)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    gate g;
    hold_writer(c, &g);
    enum { N = 50 };
    slot s[N];
    memset(s, 0, sizeof(s));
    char k[16];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "s%d", i);
        submit_ok(c, batch_put(cfa, k, k), TROUPE_SYNC_ON, slot_cb, &s[i]);
    }
    slots ss = {s, N};
    stop_state st = {0};
    st.ss = &ss;
    ck_assert_ok(troupe_commit_stop(c, stop_cb, &st));
    ck_assert_err(troupe_commit_stop(c, stop_cb, &st), TROUPE_ESTATE);
    troupe_batch *late = batch_put(cfa, "late", "x");
    ck_assert_err(troupe_commit_submit(c, &late, 0, slot_cb, &s[0]),
                  TROUPE_ECLOSED);
    troupe_batch_destroy(late);
    gate_open(&g);
    ck_assert(ts_wait_until(stop_fired, &st, 10000));
    ck_assert_int_eq(atomic_load(&st.completed_before), N);
    troupe_commit_destroy(c);
    ck_assert_int_eq(atomic_load(&st.fired), 1);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(atomic_load(&s[i].fired), 1);
        ck_assert_ok(atomic_load(&s[i].err));
        snprintf(k, sizeof(k), "s%d", i);
        st_assert_value(db, cfa, k, k);
    }
    st_assert_value(db, cfa, "late", NULL);
}
END_TEST

START_TEST(test_destroy_drains_pending_batches)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    enum { N = 100 };
    slot s[N];
    memset(s, 0, sizeof(s));
    char k[16];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        submit_ok(c, batch_put(cfb, k, k), TROUPE_SYNC_OFF, slot_cb, &s[i]);
    }
    troupe_commit_destroy(c); /* no stop first */
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(atomic_load(&s[i].fired), 1);
        ck_assert_ok(atomic_load(&s[i].err));
    }
    st_assert_value(db, cfb, "d99", "d99");
}
END_TEST

START_TEST(test_batch_on_dropped_cf_completes_enoent_rest_of_group_ok)
{
    troupe_cf *x;
    ck_assert_ok(troupe_db_cf_create(db, "x", &x));
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    gate g;
    hold_writer(c, &g);
    slot s[3];
    memset(s, 0, sizeof(s));
    submit_ok(c, batch_put(cfa, "before", "1"), TROUPE_SYNC_OFF, slot_cb,
              &s[0]);
    submit_ok(c, batch_put(x, "k", "v"), TROUPE_SYNC_OFF, slot_cb, &s[1]);
    submit_ok(c, batch_put(cfa, "after", "1"), TROUPE_SYNC_OFF, slot_cb, &s[2]);
    ck_assert_ok(troupe_db_cf_drop(db, "x"));
    gate_open(&g);
    slots ss = {s, 3};
    ck_assert(ts_wait_until(all_fired, &ss, 10000));
    ck_assert_ok(atomic_load(&s[0].err));
    ck_assert_err(atomic_load(&s[1].err), TROUPE_ENOENT);
    ck_assert_ok(atomic_load(&s[2].err));
    st_assert_value(db, cfa, "before", "1");
    st_assert_value(db, cfa, "after", "1");
    ck_assert(!troupe_db_failstop(db));
    troupe_commit_destroy(c);
}
END_TEST

/* troupe_commit_batch hands out the batches the writer completed, cleared:
 * with allocation failing, an empty pool fails, and a pool holding a
 * completed batch still serves it. A recycled batch is empty and binds
 * anew. */
START_TEST(test_commit_batch_recycles_completed_batches)
{
    troupe_commit *c;
    ck_assert_ok(troupe_commit_create(db, NULL, &c));
    troupe_batch *b = NULL;
    ck_assert_err(troupe_commit_batch(NULL, &b), TROUPE_EINVAL);
    ck_assert_err(troupe_commit_batch(c, NULL), TROUPE_EINVAL);
    troupe_alloc_fail_after(0);
    troupe_err e = troupe_commit_batch(c, &b); /* nothing to recycle yet */
    troupe_alloc_fail_after(-1);
    ck_assert_err(e, TROUPE_ENOMEM);
    ck_assert_ptr_null(b);
    ck_assert_ok(troupe_commit_batch(c, &b));
    ck_assert_ok(troupe_batch_put(b, cfa, "k1", 2, "v1", 2));
    slot s[3];
    memset(s, 0, sizeof(s));
    submit_ok(c, b, TROUPE_SYNC_OFF, slot_cb, &s[0]);
    slots s0 = {s, 1};
    ck_assert(ts_wait_until(all_fired, &s0, 10000));
    /* The writer recycles a group after its callbacks, before it takes
     * the next group: once this second commit completed, the first batch
     * is in the pool. */
    submit_ok(c, batch_put(cfa, "k2", "v2"), TROUPE_SYNC_OFF, slot_cb, &s[1]);
    slots s1 = {s, 2};
    ck_assert(ts_wait_until(all_fired, &s1, 10000));
    troupe_batch *r = NULL;
    troupe_alloc_fail_after(0);
    e = troupe_commit_batch(c, &r);
    troupe_alloc_fail_after(-1);
    ck_assert_ok(e);
    ck_assert_uint_eq(troupe_batch_count(r), 0);
    ck_assert_ok(troupe_batch_put(r, cfb, "k3", 2, "v3", 2));
    submit_ok(c, r, TROUPE_SYNC_OFF, slot_cb, &s[2]);
    slots s2 = {s, 3};
    ck_assert(ts_wait_until(all_fired, &s2, 10000));
    for (int i = 0; i < 3; i++)
        ck_assert_ok(atomic_load(&s[i].err));
    st_assert_value(db, cfa, "k1", "v1");
    st_assert_value(db, cfa, "k2", "v2");
    st_assert_value(db, cfb, "k3", "v3");
    troupe_commit_destroy(c);
}
END_TEST

Suite *
storage_commit_suite(void)
{
    Suite *s = suite_create("storage_commit");
    TCase *tc = tcase_create("commit");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc, test_create_and_calls_bad_args);
    tcase_add_test(tc, test_submit_bad_args_keep_the_batch);
    tcase_add_test(tc, test_submit_sync_on_with_disable_wal_is_einval);
    tcase_add_test(tc, test_single_synced_commit_completes_once_and_is_stored);
    tcase_add_test(tc, test_queued_batches_merge_into_one_synced_write);
    tcase_add_test(tc, test_one_submitter_order_is_kept_across_groups);
    tcase_add_test(tc, test_concurrent_submitters_each_complete_exactly_once);
    tcase_add_test(tc, test_full_queue_is_efull_and_leaves_the_batch);
    tcase_add_test(tc, test_byte_budget_is_efull_and_leaves_the_batch);
    tcase_add_test(tc, test_flood_of_big_batches_is_bounded_in_bytes);
    tcase_add_test(tc, test_flood_with_running_writer_peak_rss_is_bounded);
    tcase_add_test(tc, test_stop_writes_queued_batches_then_fires_stop_cb);
    tcase_add_test(tc, test_destroy_drains_pending_batches);
    tcase_add_test(tc, test_commit_batch_recycles_completed_batches);
    tcase_add_test(tc,
                   test_batch_on_dropped_cf_completes_enoent_rest_of_group_ok);
    suite_add_tcase(s, tc);
    return s;
}
