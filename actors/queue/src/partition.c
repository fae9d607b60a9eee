/*
 * queue_partition: one actor per partition of a queue. It owns the
 * partition's delivery: the fairness pass, the one due timer, the
 * workers subscribed to it and the attempts records. It is a producer of
 * dispatch tasks (troupe/internal/dispatch.h): each delivery is a task
 * for the worker's target, under that target's credit and deadline.
 * Storage is read on the worker pool's STORAGE lane, in chunks of at
 * most TROUPE_QUEUE_CHUNK rows; a handler worker's handlers run on the
 * HOST lane (its callback target), and their outcome is submitted to the
 * commit pipeline from there; it completes on the pipeline's callback
 * (job_committed), which ends the task, so neither an actor's loop nor a
 * pool thread waits on the disk, and outcomes in flight share a group
 * commit.
 *
 * The pass (Tito's): its first chunk freezes the due boundary (the clock
 * now) and the enqueue horizon (the queue's next order). The pass reads
 * [("p", part), ("p", part, boundary + 1)) in key order, that is due
 * order, and advances by raw row: a row whose key or value does not
 * decode is skipped and left in place; a row enqueued at or after the
 * horizon makes the pass jump past its whole due-time bucket (so a
 * handler that publishes same-time events cannot keep later buckets
 * behind them forever); an invocation in flight is skipped. When no
 * worker has credit the pass stops at that row and resumes there when
 * credit frees. At the end of the range the pass is over: if it
 * delivered anything (or a due event was published meanwhile) a new pass
 * wraps to the oldest due row at once; otherwise the actor reads the
 * first row due after the boundary and arms one timer for it. So nothing
 * polls while nothing is due, and an event that fails is delivered again
 * by the next pass, which the failed job starts. A pass starts at a
 * low-water key (tq_part.low), not at the partition's front, so it does
 * not step over the tombstones of every row acknowledged so far.
 *
 * Attempts (docs/queue.md, "Attempts and parking"). Each delivery writes
 * its invocation's attempts record, ("a", ...) -> [1, n, parked, error],
 * through the commit pipeline with the worker's durability, and submits
 * the task from that commit's callback: a handler never sees an attempt
 * number a crash could give it again. The scan reads each row's record
 * on the pool thread with the rows; a row whose record says parked is
 * skipped, and one whose stored attempts reached the queue's
 * max_attempts without being parked (its last attempt did not end: a
 * crash, a stop) is parked here, never delivered. A job that settles
 * while a read is on the pool is remembered with its attempt until that
 * read comes back (`gone`), as the read may predate its record.
 *
 * A claim (queue_int.h) keeps an invocation from a second delivery while
 * it is in flight. A chunk read before an outcome committed may still
 * show the row after its claim is released, so the pool thread reads the
 * row again once claimed and does not deliver one that is gone.
 *
 * Where the outcome is built and committed (worker.c does it).
 * Why on the pool thread rather than sent back to the partition
 * first: the row is at hand there, and the outcome must be durable before
 * the worker's credit frees and before a graceful stop may finish, which
 * the pipeline's callback guarantees without anyone waiting (the task is
 * held: done returns true, and the commit's callback ends it).
 *
 * Why in the task's done rather than in the callback's fn: for a
 * callback target done runs on the same HOST thread right after fn
 * returns (no hop, the row fn read still at hand, the same figures as
 * the handler's job before the dispatch), and the same done serves a
 * pull worker, where it runs on the thread of the host's reply (which
 * reads the row again there: a point read, not a hop). Building it in fn
 * would need a second path for pull workers and would hold the task
 * from inside fn, which the dispatch does not offer.
 */
#include <stdio.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

/* A job that settled while a read was on the pool: completed (done), or
 * left pending after `attempts` (parked or not). */
typedef struct tq_gone {
    uint8_t *key;
    size_t len;
    bool done, parked;
    uint32_t attempts;
} tq_gone;

/* A row's attempts record as the scan read it. */
typedef struct tq_seen {
    uint32_t attempts;
    bool parked;
    bool bad; /* the record does not decode: the row is left in place */
} tq_seen;

typedef struct tq_scan {
    tq_queue *q; /* a reference of the scan's */
    uint8_t *start, *end;
    size_t slen, elen;
    troupe_page *page;
    tq_seen *seen; /* [page->n] (TQ_SCAN_DONE) */
    troupe_err err;
} tq_scan;

typedef struct tq_part {
    tq_queue *q;
    uint32_t p;
    troupe_queue_worker **ws;
    size_t nws, rr;
    bool busy; /* a scan or peek is on the pool */
    /* Rows whose delivery completed them while a read was on the pool:
     * that read may still show them, and its completion skips them (a
     * pull worker's host would otherwise see an acknowledged event
     * again; a handler's job reads its row again anyway). */
    tq_gone *gone;
    size_t ngone;
    bool pass;
    bool dirty; /* a due event appeared while busy */
    int64_t boundary;
    uint64_t horizon;
    uint8_t *cur; /* the pass resumes at this key (inclusive) */
    size_t curlen;
    /* Where the next pass starts: no pending row lies below it (NULL:
     * the partition's start). Acknowledged rows leave tombstones at the
     * front of the partition, and a pass that started at the front would
     * step over all of them every time. It is the first row the last pass
     * saw (every row it saw may still be pending), lowered by every
     * publication's due time (`nlow` collects those during a pass). */
    uint8_t *low;
    size_t lowlen;
    uint8_t *nlow;
    size_t nlowlen;
    uint8_t *first; /* the first row this pass saw */
    size_t firstlen;
    uint8_t *end;
    size_t endlen;
    size_t delivered; /* in this pass */
    bool timer_on;
    int64_t timer_at;
    uint64_t timer_id;
} tq_part;

/* What a partition actor is spawned with. */
typedef struct tq_part_arg {
    tq_queue *q; /* a reference of the actor's */
    uint32_t p;
} tq_part_arg;

static void
part_arg_free(void *arg)
{
    tq_part_arg *a = arg;
    troupe__tq_release(a->q);
    troupe_free(a);
}

/* ---- small helpers ------------------------------------------------------- */

static bool
set_bytes(uint8_t **dst, size_t *dlen, const void *src, size_t n, bool zero)
{
    uint8_t *c = troupe_malloc(n + (zero ? 1 : 0));
    if (c == NULL)
        return false;
    memcpy(c, src, n);
    if (zero)
        c[n] = 0; /* key + 0x00: the first key strictly after */
    troupe_free(*dst);
    *dst = c;
    *dlen = n + (zero ? 1 : 0);
    return true;
}

/* Encodes ("p", part) or ("p", part, time) into a fresh copy. */
static bool
bucket_key(tq_part *s, int64_t time, bool with_time, uint8_t **out, size_t *len)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, TQ_PENDING, 1);
    troupe_key_put_int64(&w, s->p);
    if (with_time)
        troupe_key_put_int64(&w, time);
    const uint8_t *k;
    size_t kl;
    bool ok = troupe_key_writer_finish(&w, &k, &kl) == TROUPE_OK &&
              set_bytes(out, len, k, kl, false);
    troupe_key_writer_fini(&w);
    return ok;
}

static void
gone_add(tq_part *s, const tq_job *j)
{
    tq_gone *a = troupe_realloc(s->gone, (s->ngone + 1) * sizeof(*a));
    uint8_t *c = a != NULL ? troupe_malloc(j->sklen) : NULL;
    if (a != NULL)
        s->gone = a;
    if (c == NULL)
        return; /* then the read may offer it: a duplicate, not a loss */
    memcpy(c, j->skey, j->sklen);
    /* the attempt the next delivery follows: without max_attempts only a
     * failure whose record was written counts (deliver, below) */
    uint32_t att = j->attempt;
    if (j->q->max_attempts == 0 && !j->counted && att > 0)
        att--;
    s->gone[s->ngone++] = (tq_gone){c, j->sklen, j->completed, j->parked, att};
}

static const tq_gone *
gone_find(const tq_part *s, const uint8_t *k, size_t len)
{
    for (size_t i = 0; i < s->ngone; i++)
        if (s->gone[i].len == len && memcmp(s->gone[i].key, k, len) == 0)
            return &s->gone[i];
    return NULL;
}

static void
gone_clear(tq_part *s)
{
    for (size_t i = 0; i < s->ngone; i++)
        troupe_free(s->gone[i].key);
    troupe_free(s->gone);
    s->gone = NULL;
    s->ngone = 0;
}

/* ---- credit ------------------------------------------------------------ */

/* Drops workers that are stopping. */
static void
prune(tq_part *s)
{
    size_t j = 0;
    for (size_t i = 0; i < s->nws; i++) {
        if (atomic_load(&s->ws[i]->stopping))
            troupe__tq_worker_release(s->ws[i]);
        else
            s->ws[j++] = s->ws[i];
    }
    s->nws = j;
}

/* A worker with a credit taken on its target, or NULL: every worker's
 * wait is then queued on its target, so that the next credit freed
 * kicks its partition range (troupe__tq_worker_kick). The first round
 * takes without queueing anything. */
static troupe_queue_worker *
pick(tq_part *s)
{
    for (int round = 0; round < 2; round++)
        for (size_t k = 0; k < s->nws; k++) {
            troupe_queue_worker *w = s->ws[(s->rr + k) % s->nws];
            if (!atomic_load(&w->stopping) &&
                troupe__target_credit_take(w->target,
                                           round ? &w->wait : NULL)) {
                s->rr = (s->rr + k + 1) % s->nws;
                return w;
            }
        }
    return NULL;
}

/* Some worker has a credit free now; else each one's wait is queued. */
static bool
credit_any(tq_part *s)
{
    for (int round = 0; round < 2; round++)
        for (size_t k = 0; k < s->nws; k++) {
            troupe_queue_worker *w = s->ws[k];
            if (!atomic_load(&w->stopping) &&
                troupe__target_credit_peek(w->target, round ? &w->wait : NULL))
                return true;
        }
    return false;
}

/* ---- deliveries ------------------------------------------------------ */

static bool
attempt_commit(tq_job *j, const tq_att *a, troupe_sync sync,
               troupe_commit_cb cb);

/* The record of a delivery its target refused is back to what it was:
 * the job goes back to the partition, which tries again in a second (the
 * target's slots may stay held by callbacks past their deadline). */
static void
attempt_unwritten(troupe_err err, void *arg)
{
    tq_job *j = arg;
    /* what the partition remembers of it until a read in flight is back:
     * the number before (when not undone, the record's is higher, and that
     * number is skipped, never reused) */
    if (err == TROUPE_OK)
        j->attempt--;
    j->att_failed = true;
    troupe__tq_job_abort(j);
}

/* The delivery's attempts record committed (on the pipeline's writer):
 * the task goes to the worker's target now. A failed commit gives the
 * delivery up (the job settles; the row stays pending). A refused submit
 * (ESTATE: stopping; EBUSY: every slot held by callbacks past their
 * deadline, or not yet let go by ones that just returned) puts the record
 * back first, so that no attempt a handler never saw counts. */
static void
attempt_written(troupe_err err, void *arg)
{
    tq_job *j = arg;
    troupe_queue_worker *w = j->w;
    if (err != TROUPE_OK) {
        troupe__target_credit_give(w->target);
        j->att_failed = true;
        troupe__tq_job_abort(j);
        return;
    }
    troupe__task_in in = {.kind = TROUPE_TASK_QUEUE, .attempt = j->attempt};
    uint8_t hdr[TROUPE_TASK_HEADER_MAX];
    troupe_queue_item it;
    if (w->handler != NULL) {
        in.header = &j;
        in.header_len = sizeof(j);
    } else if (troupe__tq_item(j->q, j->skey, j->sklen, j->val, j->vlen, &it) ==
               TROUPE_OK) {
        in.header = hdr;
        in.header_len = troupe__tq_pull_header(j->q, &it, hdr);
        in.body = it.payload;
        in.body_len = it.payload_len;
    } else { /* decoded by the scan: not reached */
        troupe__target_credit_give(w->target);
        j->att_failed = true;
        troupe__tq_job_abort(j);
        return;
    }
    /* A callback's handler is host code that may block for long: the
     * dispatch runs it on the HOST lane, so that it never holds up the
     * storage work of reads and commits. */
    if (troupe__target_submit(w->target, &in, troupe__tq_job_done, j, NULL) ==
        TROUPE_OK)
        return;
    /* refused: the credit is back; done never fires, nor the handler */
    if (j->q->max_attempts == 0) { /* nothing was written */
        j->att_failed = true;
        troupe__tq_job_abort(j);
        return;
    }
    tq_att a = {.attempts = j->attempt - 1};
    if (!attempt_commit(j, j->attempt > 1 ? &a : NULL, w->sync,
                        attempt_unwritten))
        attempt_unwritten(TROUPE_EFULL, j);
}

/* A job for the claimed row kv (copied) to worker w, or NULL (nothing
 * taken: the caller gives the claim and the credit back). */
static tq_job *
job_new(troupe_actor *self, tq_part *s, troupe_queue_worker *w,
        const troupe_kv *kv)
{
    tq_job *j = troupe_calloc(1, sizeof(*j));
    uint8_t *buf = troupe_malloc(kv->key_len + kv->val_len + 1);
    if (j == NULL || buf == NULL || (w != NULL && !troupe__tq_worker_hold(w))) {
        troupe_free(j);
        troupe_free(buf);
        return NULL;
    }
    memcpy(buf, kv->key, kv->key_len);
    memcpy(buf + kv->key_len, kv->val, kv->val_len);
    j->q = troupe__tq_retain(s->q);
    if (w != NULL)
        atomic_fetch_add(&w->refs, 1);
    j->w = w;
    j->rt = troupe_actor_runtime(self);
    j->part = troupe_self(self);
    j->resched_part = UINT32_MAX;
    /* done's side, and the handler's for a callback worker */
    atomic_init(&j->refs, w != NULL && w->handler != NULL ? 2 : 1);
    j->skey = buf;
    j->sklen = kv->key_len;
    j->val = buf + kv->key_len;
    j->vlen = kv->val_len;
    atomic_init(&j->state, J_RUN);
    return j;
}

/* Submits the commit of j's attempts record a; cb(err, j) then runs on
 * the pipeline's writer. false when it could not be submitted. */
static bool
attempt_commit(tq_job *j, const tq_att *a, troupe_sync sync,
               troupe_commit_cb cb)
{
    troupe_batch *b = NULL;
    troupe_err e = troupe_commit_batch(j->q->commit, &b);
    if (e == TROUPE_OK)
        e = troupe__tq_att_write(b, j->q->cf, j->skey, j->sklen, a);
    if (e == TROUPE_OK)
        e = troupe_commit_submit(j->q->commit, &b, sync, cb, j);
    troupe_batch_destroy(b); /* NULL once submitted */
    return e == TROUPE_OK;
}

/* Offers the claimed row kv to w, whose credit is taken, as attempt
 * `attempt`: its record first, then the task (attempt_written). false
 * when it was not offered (the claim and the credit are given back). */
static bool
deliver(troupe_actor *self, tq_part *s, troupe_queue_worker *w,
        const troupe_kv *kv, uint32_t attempt)
{
    tq_job *j = job_new(self, s, w, kv);
    if (j == NULL) {
        troupe__tq_unclaim(s->q, kv->key, kv->key_len);
        troupe__target_credit_give(w->target);
        return false;
    }
    j->attempt = attempt;
    if (s->q->max_attempts == 0) {
        /* Tito's queue, no limit: the attempt is counted when it fails
         * (worker.c, job_park), not before it, so a delivery costs no
         * commit of its own; one cut short by a crash comes again with
         * the same number. */
        attempt_written(TROUPE_OK, j);
        return true;
    }
    tq_att a = {.attempts = attempt};
    if (attempt_commit(j, &a, w->sync, attempt_written))
        return true;
    troupe__target_credit_give(w->target);
    troupe__tq_worker_done(w);
    troupe__tq_job_free(j); /* unclaims */
    return false;
}

/* The park of a row found at its limit committed (or not): the job goes
 * back to the partition, which unclaims the row. */
static void
parked_at_scan(troupe_err err, void *arg)
{
    tq_job *j = arg;
    j->parked = err == TROUPE_OK;
    j->att_failed = err != TROUPE_OK;
    troupe__tq_job_abort(j);
}

/* Parks the claimed row kv whose stored attempts reached the queue's
 * max_attempts while its last attempt never ended (a crash, a stop, an
 * outcome that did not commit): no worker, no delivery. */
static void
park(troupe_actor *self, tq_part *s, const troupe_kv *kv, uint32_t attempts)
{
    tq_job *j = job_new(self, s, NULL, kv);
    char msg[160];
    int n = snprintf(msg, sizeof(msg),
                     "attempt %u of %u ended without an outcome (a crash, a "
                     "stop, or an outcome that did not commit)",
                     attempts, s->q->max_attempts);
    tq_att a = {.attempts = attempts,
                .parked = true,
                .error = (const uint8_t *)msg,
                .error_len = n > 0 ? (size_t)n : 0};
    if (j != NULL) {
        j->attempt = attempts;
        if (attempt_commit(j, &a, TROUPE_SYNC_DEFAULT, parked_at_scan))
            return;
        troupe__tq_job_free(j); /* unclaims */
        return;
    }
    troupe__tq_unclaim(s->q, kv->key, kv->key_len);
}

static void
pump(troupe_actor *self, tq_part *s);

/* ---- the pass ------------------------------------------------------------ */

static void
scan_free(tq_scan *sc)
{
    troupe_page_destroy(sc->page);
    troupe_free(sc->start);
    troupe_free(sc->seen);
    troupe__tq_release(sc->q);
    troupe_free(sc);
}

static void
scan_drop(void *arg)
{
    scan_free(arg);
}

static void
scan_run(void *arg)
{
    tq_scan *sc = arg;
    troupe_range r;
    troupe_range_init_bounds(&r, sc->start, sc->slen, sc->end, sc->elen);
    sc->err = troupe_db_scan(sc->q->db, sc->q->cf, NULL, &r, NULL, 0,
                             TROUPE_QUEUE_CHUNK, false, &sc->page);
}

/* A chunk of the pass: the rows, then each pending row's attempts record
 * (point reads; a row that is not a pending key has none). */
static void
scan_pass_run(void *arg)
{
    tq_scan *sc = arg;
    scan_run(sc);
    if (sc->err != TROUPE_OK || sc->page->n == 0)
        return;
    sc->seen = troupe_calloc(sc->page->n, sizeof(*sc->seen));
    if (sc->seen == NULL) {
        sc->err = TROUPE_ENOMEM;
        return;
    }
    for (size_t i = 0; i < sc->page->n; i++) {
        const troupe_kv *kv = &sc->page->items[i];
        tq_att a;
        void *buf = NULL;
        troupe_err e =
            troupe__tq_att_get(sc->q, NULL, kv->key, kv->key_len, &a, &buf);
        if (e == TROUPE_EINVAL)
            continue; /* not a pending key: the pass skips it anyway */
        if (e != TROUPE_OK && e != TROUPE_ECORRUPT) {
            sc->err = e;
            return;
        }
        sc->seen[i] = (tq_seen){a.attempts, a.parked, e == TROUPE_ECORRUPT};
        troupe_free(buf);
    }
}

/* Reads [start, end) (end NULL: to the partition's end) on the pool. */
static bool
scan_start(troupe_actor *self, tq_part *s, const uint8_t *start, size_t slen,
           const uint8_t *end, size_t elen, uint32_t kind)
{
    tq_scan *sc = troupe_calloc(1, sizeof(*sc));
    if (sc == NULL)
        return false;
    sc->q = troupe__tq_retain(s->q);
    sc->start = troupe_malloc(slen + elen);
    if (sc->start == NULL) {
        scan_free(sc);
        return false;
    }
    memcpy(sc->start, start, slen);
    memcpy(sc->start + slen, end, elen);
    sc->slen = slen;
    sc->end = sc->start + slen;
    sc->elen = elen;
    if (troupe_work_submit(self,
                           kind == TQ_SCAN_DONE ? scan_pass_run : scan_run, sc,
                           kind, scan_drop) != TROUPE_OK) {
        scan_free(sc);
        return false;
    }
    s->busy = true;
    return true;
}

static void
arm(troupe_actor *self, tq_part *s, int64_t t)
{
    /* A timer already set for t or before fires in time, unless t is due
     * now: that timer's delay came from an older reading of the clock
     * (an injected clock that jumped), so it may be far off. */
    int64_t now = troupe__tq_now(s->q);
    if (s->timer_on && s->timer_at <= t && t > now)
        return;
    if (s->timer_on)
        (void)troupe_timer_cancel(self, s->timer_id);
    uint64_t after = t > now ? (uint64_t)(t - now) : 0;
    s->timer_on =
        troupe_timer_start(self, TQ_DUE, after, 0, &s->timer_id) == TROUPE_OK;
    s->timer_at = t;
}

/* Reads the first row due after the boundary, to arm the timer. */
static void
peek(troupe_actor *self, tq_part *s)
{
    uint8_t *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    if (s->boundary < INT64_MAX &&
        bucket_key(s, s->boundary + 1, true, &a, &al)) {
        /* the end: ("p", part + 1) */
        tq_part t = *s;
        t.p = s->p + 1;
        if (bucket_key(&t, 0, false, &b, &bl))
            (void)scan_start(self, s, a, al, b, bl, TQ_PEEK_DONE);
    }
    troupe_free(a);
    troupe_free(b);
}

/* Lowers *k to (a copy of) c when c is below it or *k is unset. */
static void
lower_to(uint8_t **k, size_t *kl, const uint8_t *c, size_t cl)
{
    if (*k == NULL || troupe_key_cmp(c, cl, *k, *kl) < 0)
        (void)set_bytes(k, kl, c, cl, false);
}

static void
pass_end(troupe_actor *self, tq_part *s)
{
    s->pass = false;
    /* The next pass starts at the first row this one saw, or, when it saw
     * none, at its end; lowered by what was published meanwhile. On a
     * copy failure the start stays where it was (lower: still correct). */
    const uint8_t *nl = s->first != NULL ? s->first : s->end;
    size_t nll = s->first != NULL ? s->firstlen : s->endlen;
    if (s->nlow != NULL && troupe_key_cmp(s->nlow, s->nlowlen, nl, nll) < 0) {
        nl = s->nlow;
        nll = s->nlowlen;
    }
    (void)set_bytes(&s->low, &s->lowlen, nl, nll, false);
    /* Wrap at once when this pass delivered (failures come round again)
     * or something was published meanwhile (maybe behind the cursor). */
    if (s->delivered > 0 || s->dirty || s->nlow != NULL) {
        pump(self, s);
        return;
    }
    peek(self, s);
}

static void
pump(troupe_actor *self, tq_part *s)
{
    if (s->busy) {
        s->dirty = true;
        return;
    }
    if (atomic_load(&s->q->paused))
        return;
    prune(s);
    if (s->nws == 0)
        return;
    if (!s->pass) {
        s->boundary = troupe__tq_now(s->q);
        s->horizon = atomic_load(&s->q->next_order);
        s->delivered = 0;
        s->dirty = false;
        if (s->boundary < 0 || s->boundary == INT64_MAX ||
            !(s->low != NULL
                  ? set_bytes(&s->cur, &s->curlen, s->low, s->lowlen, false)
                  : bucket_key(s, 0, false, &s->cur, &s->curlen)) ||
            !bucket_key(s, s->boundary + 1, true, &s->end, &s->endlen))
            return;
        troupe_free(s->first);
        s->first = NULL;
        troupe_free(s->nlow);
        s->nlow = NULL;
        s->pass = true;
    }
    /* no credit anywhere: wait for a kick (the workers' waits queued) */
    if (!credit_any(s))
        return;
    if (troupe_key_cmp(s->cur, s->curlen, s->end, s->endlen) >= 0) {
        pass_end(self, s);
        return;
    }
    if (!scan_start(self, s, s->cur, s->curlen, s->end, s->endlen,
                    TQ_SCAN_DONE))
        arm(self, s, troupe__tq_now(s->q) + 1000); /* try again */
}

static troupe_err
on_scan(troupe_actor *self, void *state, const troupe_msg *m)
{
    tq_part *s = state;
    tq_scan *sc = m->ptr;
    if (sc == NULL) /* not a completion: a stray local send */
        return TROUPE_OK;
    s->busy = false;
    if (sc->err != TROUPE_OK) {
        /* a read error: end the pass, try again in a second */
        s->pass = false;
        scan_free(sc);
        gone_clear(s);
        arm(self, s, troupe__tq_now(s->q) + 1000);
        return TROUPE_OK;
    }
    troupe_page *pg = sc->page;
    bool stalled = false;
    for (size_t i = 0; i < pg->n && !stalled; i++) {
        const troupe_kv *kv = &pg->items[i];
        if (s->first == NULL) /* may still be pending after this pass */
            (void)set_bytes(&s->first, &s->firstlen, kv->key, kv->key_len,
                            false);
        if (troupe_key_cmp(kv->key, kv->key_len, s->cur, s->curlen) < 0)
            continue; /* inside a bucket the pass jumped over */
        uint32_t part;
        int64_t time;
        uint64_t order;
        troupe_queue_item it;
        if (troupe__tq_pkey_decode(kv->key, kv->key_len, &part, &time,
                                   &order) != TROUPE_OK ||
            part != s->p) {
            set_bytes(&s->cur, &s->curlen, kv->key, kv->key_len, true);
            continue; /* malformed: skipped, left in place */
        }
        if (order >= s->horizon) {
            uint8_t *k = NULL;
            size_t kl = 0;
            if (bucket_key(s, time + 1, true, &k, &kl)) {
                troupe_free(s->cur);
                s->cur = k;
                s->curlen = kl;
            } else {
                set_bytes(&s->cur, &s->curlen, kv->key, kv->key_len, true);
            }
            continue;
        }
        /* the stored attempts, or a later count of a job that settled
         * while this read was out */
        tq_seen seen = sc->seen[i];
        const tq_gone *g = gone_find(s, kv->key, kv->key_len);
        if (g != NULL && g->attempts > seen.attempts)
            seen.attempts = g->attempts;
        if (g != NULL && g->parked)
            seen.parked = true;
        if (troupe__tq_claimed(s->q, kv->key, kv->key_len) ||
            (g != NULL && g->done) || seen.parked || seen.bad ||
            troupe__tq_item(s->q, kv->key, kv->key_len, kv->val, kv->val_len,
                            &it) != TROUPE_OK) {
            set_bytes(&s->cur, &s->curlen, kv->key, kv->key_len, true);
            continue; /* in flight, parked, or malformed: left in place */
        }
        if (s->q->max_attempts != 0 && seen.attempts >= s->q->max_attempts) {
            if (troupe__tq_claim(s->q, kv->key, kv->key_len))
                park(self, s, kv, seen.attempts);
            set_bytes(&s->cur, &s->curlen, kv->key, kv->key_len, true);
            continue;
        }
        troupe_queue_worker *w = pick(s);
        if (w == NULL) {
            set_bytes(&s->cur, &s->curlen, kv->key, kv->key_len, false);
            stalled = true;
            break;
        }
        uint32_t attempt =
            seen.attempts < UINT32_MAX ? seen.attempts + 1 : UINT32_MAX;
        if (troupe__tq_claim(s->q, kv->key, kv->key_len)) {
            if (deliver(self, s, w, kv, attempt))
                s->delivered++;
        } else {
            troupe__target_credit_give(w->target);
        }
        set_bytes(&s->cur, &s->curlen, kv->key, kv->key_len, true);
    }
    bool more = pg->more;
    scan_free(sc);
    gone_clear(s);
    if (!stalled && !more)
        pass_end(self, s);
    else
        pump(self, s);
    return TROUPE_OK;
}

static troupe_err
on_peek(troupe_actor *self, void *state, const troupe_msg *m)
{
    tq_part *s = state;
    tq_scan *sc = m->ptr;
    if (sc == NULL)
        return TROUPE_OK;
    s->busy = false;
    if (sc->err == TROUPE_OK)
        for (size_t i = 0; i < sc->page->n; i++) {
            uint32_t part;
            int64_t time;
            uint64_t order;
            const troupe_kv *kv = &sc->page->items[i];
            if (troupe__tq_pkey_decode(kv->key, kv->key_len, &part, &time,
                                       &order) == TROUPE_OK) {
                arm(self, s, time);
                break;
            }
        }
    scan_free(sc);
    gone_clear(s);
    if (s->dirty)
        pump(self, s);
    return TROUPE_OK;
}

/* A job is over: its outcome committed, failed or given up, and a
 * handler that outlived its deadline has returned (job_unref). */
static troupe_err
on_settled(troupe_actor *self, void *state, const troupe_msg *m)
{
    tq_part *s = state;
    tq_job *j = m->ptr;
    if (j == NULL)
        return TROUPE_OK;
    bool done = j->completed;
    bool failed = j->att_failed;
    if (s->busy)
        gone_add(s, j);
    troupe__tq_job_free(j);
    /* The attempts record could not be written (the pipeline is full or
     * failing): try again in a second rather than at once. */
    if (failed) {
        arm(self, s, troupe__tq_now(s->q) + 1000);
        return TROUPE_OK;
    }
    /* An outcome left the row pending (error, timeout): the next pass
     * delivers it again; continue or start one. A completed row needs no
     * pass (a reschedule's replacement comes with its notice). */
    if (!done || s->pass)
        pump(self, s);
    return TROUPE_OK;
}

static troupe_err
on_credit(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)m;
    tq_part *s = state;
    if (s->pass) /* a pass stalled for credit: go on (else nothing waits) */
        pump(self, s);
    return TROUPE_OK;
}

static troupe_err
on_kick(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)m;
    tq_part *s = state;
    /* A pass under way keeps its boundary, read from the clock before the
     * kick: its end must start a new pass with a new reading. */
    if (s->pass)
        s->dirty = true;
    pump(self, s);
    return TROUPE_OK;
}

static troupe_err
on_due(troupe_actor *self, void *state, const troupe_msg *m)
{
    tq_part *s = state;
    if (s->timer_on && m->corr == s->timer_id)
        s->timer_on = false;
    pump(self, s);
    return TROUPE_OK;
}

static troupe_err
on_notify(troupe_actor *self, void *state, const troupe_msg *m)
{
    tq_part *s = state;
    troupe_reader r;
    int64_t t = 0;
    troupe_reader_init_msg(&r, m);
    troupe_read_int(&r, &t);
    if (troupe_read_end(&r) != TROUPE_OK)
        return TROUPE_OK; /* not ours: ignore */
    uint8_t *k = NULL;
    size_t kl = 0;
    if (t >= 0 && bucket_key(s, t, true, &k, &kl)) {
        lower_to(&s->nlow, &s->nlowlen, k, kl);
        if (!s->pass)
            lower_to(&s->low, &s->lowlen, k, kl);
    } else { /* cannot place it: the next pass starts at the front */
        troupe_free(s->low);
        s->low = NULL;
        troupe_free(s->nlow);
        s->nlow = NULL;
        if (bucket_key(s, 0, false, &k, &kl))
            (void)set_bytes(&s->nlow, &s->nlowlen, k, kl, false);
    }
    troupe_free(k);
    if (t <= troupe__tq_now(s->q))
        pump(self, s);
    else
        arm(self, s, t);
    return TROUPE_OK;
}

static troupe_err
on_subscribe(troupe_actor *self, void *state, const troupe_msg *m)
{
    tq_part *s = state;
    troupe_queue_worker *w = m->ptr;
    if (w == NULL)
        return TROUPE_OK;
    troupe_queue_worker **a = troupe_realloc(s->ws, (s->nws + 1) * sizeof(*a));
    if (a == NULL) {
        troupe__tq_worker_release(w);
        return TROUPE_OK;
    }
    s->ws = a;
    s->ws[s->nws++] = w;
    pump(self, s);
    return TROUPE_OK;
}

static troupe_err
part_init(troupe_actor *self, void *state, void *arg)
{
    (void)self;
    tq_part *s = state;
    tq_part_arg *a = arg;
    memset(s, 0, sizeof(*s));
    s->q = a->q;
    s->p = a->p;
    return TROUPE_OK;
}

static void
part_stop(troupe_actor *self, void *state, troupe_err reason)
{
    (void)self;
    (void)reason;
    tq_part *s = state;
    for (size_t i = 0; i < s->nws; i++)
        troupe__tq_worker_release(s->ws[i]);
    troupe_free(s->ws);
    troupe_free(s->cur);
    troupe_free(s->end);
    troupe_free(s->low);
    troupe_free(s->nlow);
    troupe_free(s->first);
    gone_clear(s);
    memset(s, 0, sizeof(*s));
}

static const troupe_handler_fn part_handlers[TQ_KINDS] = {
    [TQ_KICK] = on_kick,           [TQ_NOTIFY] = on_notify,
    [TQ_SUBSCRIBE] = on_subscribe, [TQ_SCAN_DONE] = on_scan,
    [TQ_PEEK_DONE] = on_peek,      [TQ_DUE] = on_due,
    [TQ_CREDIT] = on_credit,       [TQ_SETTLED] = on_settled,
};

const troupe_actor_def troupe__tq_partition_def = {
    .name = "queue_partition",
    .state_size = sizeof(tq_part),
    .init = part_init,
    .stop = part_stop,
    .handlers = part_handlers,
    .n_handlers = TQ_KINDS,
    .remote_kinds = 0, /* every kind is the queue's own */
};

/* ---- spawn and stop (the set's open, create, drop and stop) ------------ */

troupe_err
troupe__tq_partitions_spawn(tq_queue *q)
{
    unsigned ns = troupe_runtime_schedulers(q->rt);
    troupe_err e = TROUPE_OK;
    while (e == TROUPE_OK && q->spawned < q->partitions) {
        tq_part_arg *a = troupe_malloc(sizeof(*a));
        if (a == NULL)
            return TROUPE_ENOMEM;
        a->q = troupe__tq_retain(q);
        a->p = q->spawned;
        troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
        so.arg = a;
        so.arg_free = part_arg_free;
        so.scheduler = (int)((q->id + q->spawned) % ns);
        e = troupe_actor_spawn(q->rt, &troupe__tq_partition_def, &so,
                               &q->parts[q->spawned]);
        if (e == TROUPE_OK)
            q->spawned++;
        else
            part_arg_free(a);
    }
    return e;
}

static void
part_left(tq_queue *q)
{
    if (atomic_fetch_sub(&q->parts_left, 1) == 1)
        q->parts_stopped(q->parts_stopped_arg);
}

static void
part_stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    (void)rt;
    (void)a;
    part_left(arg);
}

void
troupe__tq_partitions_stop(tq_queue *q, void (*cb)(void *arg), void *arg)
{
    q->parts_stopped = cb;
    q->parts_stopped_arg = arg;
    atomic_store(&q->parts_left, q->spawned + 1);
    /* the caller holds a reference on q until cb has run */
    for (uint32_t p = 0; p < q->spawned; p++)
        if (troupe_actor_stop(q->rt, q->parts[p], part_stopped, q) != TROUPE_OK)
            part_left(q); /* gone already */
    part_left(q);
}
