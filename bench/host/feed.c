/*
 * libtroupe_bench.so: all of troupe (the objects of libtroupe.so) plus a
 * producer of plain tasks for the host benches (bench/host/bench_node.js):
 * what a queue partition does for a pull target, without the queue, so
 * node_pull_batch measures the dispatch, the ABI and the binding's pull
 * loop against the raw koffi peer (bench/peers/rawpull).
 *
 *   troupe_bench_feed(n, "feed", 1000000, 16);   // returns at once
 *   ... the host pulls and replies ...
 *   troupe_bench_feed_wait(n, &ok);              // blocks until all settled
 *
 * The feed: a thread that submits `count` tasks of kind TROUPE_TASK_TEST
 * with a body of body_len zero bytes to the pull target named `target`,
 * as fast as the target's credit lets it (troupe/internal/dispatch.h:
 * take a credit, or wait for its kick; submit; hear each outcome once).
 * One feed per node at a time; the feeds of all nodes are found by node
 * in one list (the signature has no handle of its own: a bench library's
 * only process-wide state).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "troupe/abi.h"
#include "troupe/alloc.h"
#include "troupe/internal/abi.h"
#include "troupe/internal/dispatch.h"

#define FEED_STALL_S 60 /* no credit for this long: the feed gives up */

typedef struct feed {
    troupe_abi *n;
    troupe_target *t;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    troupe__credit_wait w;
    bool kicked;        /* mu */
    uint64_t count;     /* tasks to submit */
    uint64_t total;     /* mu: tasks that will settle (count, or fewer) */
    uint64_t settled;   /* mu */
    uint64_t succeeded; /* mu */
    troupe_err err;     /* the producer's, read after the join */
    uint8_t *body;
    uint32_t body_len;
    struct feed *next;
} feed;

static pthread_mutex_t feeds_mu = PTHREAD_MUTEX_INITIALIZER;
static feed *feeds;

int
troupe_bench_feed(troupe_abi *n, const char *target, uint64_t count,
                  uint32_t body_len);
int
troupe_bench_feed_wait(troupe_abi *n, uint64_t *succeeded);

static void
kick(void *arg)
{
    feed *f = arg;
    pthread_mutex_lock(&f->mu);
    f->kicked = true;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->mu);
}

static bool
done(void *arg, uint64_t id, troupe_outcome outcome, const uint8_t *body,
     size_t len)
{
    (void)id;
    (void)body;
    (void)len;
    feed *f = arg;
    pthread_mutex_lock(&f->mu);
    f->settled++;
    if (outcome == TROUPE_OUTCOME_SUCCESS)
        f->succeeded++;
    if (f->settled == f->total)
        pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    return false;
}

static bool
kicked(const feed *f)
{
    return f->kicked;
}

static bool
all_settled(const feed *f)
{
    return f->settled == f->total;
}

/* Waits until ready(f) holds (under f->mu), at most FEED_STALL_S; false
 * when it did not by then. */
static bool
wait_until(feed *f, bool (*ready)(const feed *))
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += FEED_STALL_S;
    bool late = false;
    pthread_mutex_lock(&f->mu);
    while (!ready(f) && !late)
        late = pthread_cond_timedwait(&f->cond, &f->mu, &ts) == ETIMEDOUT;
    bool ok = ready(f);
    pthread_mutex_unlock(&f->mu);
    return ok;
}

static void *
produce(void *arg)
{
    feed *f = arg;
    troupe__task_in in = {.kind = TROUPE_TASK_TEST,
                          .attempt = 1,
                          .body = f->body,
                          .body_len = f->body_len};
    uint64_t submitted = 0;
    while (submitted < f->count) {
        pthread_mutex_lock(&f->mu);
        f->kicked = false;
        pthread_mutex_unlock(&f->mu);
        if (!troupe__target_credit_take(f->t, &f->w)) {
            if (!wait_until(f, kicked)) {
                f->err = TROUPE_ETIMEDOUT;
                break;
            }
            continue;
        }
        troupe_err e = troupe__target_submit(f->t, &in, done, f, NULL);
        if (e != TROUPE_OK) {
            f->err = e;
            break;
        }
        submitted++;
    }
    troupe__target_credit_unwait(f->t, &f->w);
    pthread_mutex_lock(&f->mu);
    f->total = submitted;
    if (f->settled == f->total)
        pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void
feed_free(feed *f)
{
    troupe__target_release(f->t);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    troupe_free(f->body);
    troupe_free(f);
}

int
troupe_bench_feed(troupe_abi *n, const char *target, uint64_t count,
                  uint32_t body_len)
{
    troupe_runtime *rt = troupe__abi_runtime(n);
    if (rt == NULL || target == NULL || count == 0 ||
        body_len > TROUPE_TASK_BODY_MAX)
        return TROUPE_EINVAL;
    feed *f = troupe_calloc(1, sizeof(*f));
    if (f == NULL)
        return TROUPE_ENOMEM;
    f->body = troupe_calloc(1, body_len ? body_len : 1);
    f->t = troupe__target_find(rt, target, strlen(target));
    if (f->body == NULL || f->t == NULL) {
        troupe_err e = f->t == NULL ? TROUPE_ENOENT : TROUPE_ENOMEM;
        if (f->t != NULL)
            troupe__target_release(f->t);
        troupe_free(f->body);
        troupe_free(f);
        return e;
    }
    f->n = n;
    f->count = f->total = count;
    f->body_len = body_len;
    f->w.kick = kick;
    f->w.arg = f;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    pthread_mutex_lock(&feeds_mu);
    for (feed *o = feeds; o != NULL; o = o->next)
        if (o->n == n) {
            pthread_mutex_unlock(&feeds_mu);
            feed_free(f);
            return TROUPE_EBUSY;
        }
    if (pthread_create(&f->thread, NULL, produce, f) != 0) {
        pthread_mutex_unlock(&feeds_mu);
        feed_free(f);
        return TROUPE_ESYS;
    }
    f->next = feeds;
    feeds = f;
    pthread_mutex_unlock(&feeds_mu);
    return TROUPE_OK;
}

int
troupe_bench_feed_wait(troupe_abi *n, uint64_t *succeeded)
{
    pthread_mutex_lock(&feeds_mu);
    feed **pp = &feeds;
    while (*pp != NULL && (*pp)->n != n)
        pp = &(*pp)->next;
    feed *f = *pp;
    if (f != NULL)
        *pp = f->next;
    pthread_mutex_unlock(&feeds_mu);
    if (f == NULL)
        return TROUPE_ENOENT;
    pthread_join(f->thread, NULL);
    troupe_err e = f->err;
    bool all = wait_until(f, all_settled);
    if (!all && e == TROUPE_OK)
        e = TROUPE_ETIMEDOUT;
    pthread_mutex_lock(&f->mu);
    if (succeeded != NULL)
        *succeeded = f->succeeded;
    pthread_mutex_unlock(&f->mu);
    if (!all)
        return e; /* done may still fire: the feed is leaked, not freed */
    feed_free(f);
    return e;
}
