/*
 * The TTL scanner actor. A repeating timer (or a kick) starts a pass: the
 * actor lists the tables and asks each in turn for one key-version
 * eviction pass, then one expired-row purge pass; the table actor does
 * the work in batches of at most 256 (records, or rows), a message per
 * batch, so a large table never holds its loop. Tables go
 * one at a time so a pass costs one table's batch at a time across the
 * runtime, and a tick that arrives while a pass runs is dropped: passes
 * never pile up behind a slow table.
 *
 * The asynchronous evict call completes on scheduler 0, not on this
 * actor's thread, so its callback only sends the outcome here as a
 * message; it holds a copy of the address, never the scanner object,
 * which may be gone by then (a send to a dead actor fails cleanly).
 *
 * Queue retention is a second, independent pass: each batch scans and
 * builds its deletions on the worker pool (troupe_work_submit) and hands
 * them to the commit pipeline without waiting (no pool thread waits for
 * a sync); the commit's callback sends the outcome back as TTL_QPURGED
 * (TTL_QDONE only frees the job, or ends the pass when the job could not
 * start its batch); a full batch sends TTL_QNEXT to this actor, so the
 * next batch starts only after the mailbox had its turn (a long backlog
 * never holds the loop), and a short or failed one ends the pass. A batch
 * borrows the queues, so the stop waits for a running one before its
 * callback fires and the caller may stop the queues: `live` counts the
 * actor and the batches on the pool, and whichever of them ends last
 * finishes the stop (on scheduler 0, through troupe__post_or_run). A
 * count and not a blocking waiter, so that the asynchronous stop has
 * nothing to block on; stop_wait is the stop and a wait for its callback.
 *
 * Coordinator retention is a third pass of the same shape: each batch is
 * one troupe_coord_purge, asynchronous already (it finds what is due
 * through an index and deletes it in transactions, on scheduler 0), whose
 * callback sends TTL_CPURGED here and gives back the batch's share of
 * `live` (the purge borrows the coordinator); a batch that purged some
 * and found more goes on through TTL_CNEXT. One that purged none ends the
 * pass even if it found more (a transaction it cannot purge, a broken
 * document say, stays at the head of the index): the pass always moves.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/ttl.h"

enum {
    TTL_TICK = 0,
    TTL_DONE,
    TTL_QDONE,
    TTL_QNEXT,
    TTL_QPURGED,
    TTL_CPURGED,
    TTL_CNEXT,
    TTL_NKINDS
};

#define QUEUE_BATCH_DEFAULT 256
#define COORD_BATCH_DEFAULT 256

enum { ST_RUNNING = 0, ST_STOPPING, ST_STOPPED };

struct troupe_ttl {
    troupe_runtime *rt;
    troupe_tables *tables;
    troupe_queues *queues;
    uint32_t interval_ms;
    uint32_t queue_batch;
    troupe_coord *coord;
    uint32_t coord_batch;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    troupe_addr addr;
    _Atomic uint64_t passes;
    _Atomic uint64_t evicted;
    _Atomic uint64_t purged;
    _Atomic uint64_t qpurged;
    _Atomic uint64_t qbatches;
    _Atomic uint64_t qpasses;
    _Atomic uint64_t gpurged;
    _Atomic uint64_t gbatches;
    _Atomic uint64_t gpasses;
    _Atomic int state;
    /* what the stop waits for: 1 for the actor (given back once it has
     * stopped) and 1 per purge batch running (a queue batch on the pool,
     * a coordinator purge); the release that brings it to 0 finishes
     * the stop (live_release) */
    _Atomic size_t live;
    troupe_ttl_stop_cb stop_cb; /* set by troupe_ttl_stop, before the
                                   actor's share can be given back */
    void *stop_arg;
};

typedef struct sstate {
    troupe_ttl *o;
    char **names; /* the pass's tables (troupe_tables_list) */
    size_t n;
    size_t next;  /* the table being asked */
    bool purging; /* its purge pass (else its eviction pass) runs */
    bool busy;
    bool qbusy; /* a queue pass runs */
    bool cbusy; /* a coordinator pass runs */
} sstate;

typedef struct evarg {
    troupe_runtime *rt;
    troupe_addr to;
} evarg;

static void
stop_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    troupe_ttl *s = arg;
    troupe_ttl_stop_cb cb = s->stop_cb;
    void *cb_arg = s->stop_arg;
    atomic_store(&s->state, ST_STOPPED);
    cb(s, cb_arg); /* may destroy s */
}

/* Gives back one share of live: the last touch of the scanner object
 * unless it is the last share, which finishes the stop on scheduler 0. */
static void
live_release(troupe_ttl *s)
{
    if (atomic_fetch_sub(&s->live, 1) == 1)
        troupe__post_or_run(s->rt, stop_done, s);
}

static void
done_send(evarg *a, troupe_err err, uint64_t n)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, (uint64_t)err);
    troupe_pack_uint(&p, err == TROUPE_OK ? n : 0);
    troupe_msg *m = NULL;
    if (troupe_pack_take_msg(&p, TTL_DONE, &m) == TROUPE_OK)
        troupe_runtime_send(a->rt, a->to, &m); /* fails once we are gone */
    troupe_free(a);
}

static void
on_evicted(troupe_err err, const troupe_vevict_result *r, void *arg)
{
    done_send(arg, err, r->evicted);
}

static void
on_purged(troupe_err err, const troupe_purge_result *r, void *arg)
{
    done_send(arg, err, r->purged);
}

static void
pass_end(sstate *s)
{
    troupe_free(s->names);
    s->names = NULL;
    s->n = s->next = 0;
    s->busy = false;
    atomic_fetch_add(&s->o->passes, 1);
}

/* Moves to the next step: the current table's purge after its eviction,
 * else the next table. */
static void
advance(sstate *s)
{
    if (!s->purging) {
        s->purging = true;
    } else {
        s->purging = false;
        s->next++;
    }
}

/* Asks for the current step of a table that still exists; ends the pass
 * after the last table. */
static void
pass_step(troupe_actor *self, sstate *s)
{
    while (s->next < s->n) {
        evarg *a = troupe_malloc(sizeof(*a));
        if (a == NULL)
            break;
        a->rt = troupe_actor_runtime(self);
        a->to = troupe_self(self);
        const char *name = s->names[s->next];
        troupe_err e =
            s->purging
                ? troupe_tables_purge_expired(s->o->tables, name, on_purged, a)
                : troupe_tables_evict_versions(s->o->tables, name, on_evicted,
                                               a);
        if (e == TROUPE_OK)
            return; /* TTL_DONE goes on */
        troupe_free(a);
        advance(s); /* dropped meanwhile: skip it */
    }
    pass_end(s);
}

/* ---- queue retention ---- */

typedef struct qjob {
    troupe_ttl *o;
    troupe_runtime *rt;
    troupe_addr self;
    troupe_err err;
    bool ran;    /* qjob_run has started: the hold on live is its own */
    bool handed; /* the pass's result comes as TTL_QPURGED */
} qjob;

/* A pass's outcome, from the commit callback to the actor. */
typedef struct qres {
    troupe_err err;
    size_t purged;
    bool full;
} qres;

/* The pipeline's writer (or qjob_run's thread when nothing was to be
 * deleted): tells the actor, then gives back the batch's share of live,
 * the last touch of the scanner object (the stop may finish after it). */
static void
qjob_purged(troupe_err err, size_t purged, bool full, void *arg)
{
    qjob *j = arg;
    troupe_ttl *o = j->o;
    qres *r = troupe_malloc(sizeof(*r));
    troupe_msg *m = NULL;
    if (r != NULL && troupe_msg_create(&m, TTL_QPURGED, NULL, 0) == TROUPE_OK) {
        *r = (qres){.err = err, .purged = purged, .full = full};
        m->ptr = r;
        m->ptr_drop = troupe_free; /* the actor is gone: dropped unread */
        (void)troupe_runtime_send(j->rt, j->self, &m);
        troupe_msg_destroy(m); /* NULL once sent */
    } else {
        troupe_free(r); /* the pass ends here; the next tick retries */
    }
    troupe_free(j);
    live_release(o);
}

/* On a STORAGE thread: the scan and the batch; the commit is not waited
 * for, so the thread is free as soon as the batch is submitted. */
static void
qjob_run(void *arg)
{
    qjob *j = arg;
    troupe_ttl *o = j->o;
    j->ran = true;
    qjob *h = troupe_malloc(sizeof(*h));
    if (h == NULL) {
        j->err = TROUPE_ENOMEM;
        live_release(o);
        return;
    }
    *h = *j;
    j->handed = true;
    int64_t now = o->clock != NULL ? o->clock(o->clock_ctx) : troupe_now_ms();
    troupe__queues_purge_submit(o->queues, now, o->queue_batch, qjob_purged, h);
}

/* The scanner is gone before the batch came back, or the runtime
 * cancelled the batch before it ran (shutdown): then its share of live,
 * which the stop waits on, is given back here. */
static void
qjob_drop(void *arg)
{
    qjob *j = arg;
    troupe_ttl *o = j->o;
    bool ran = j->ran;
    troupe_free(j);
    if (!ran)
        live_release(o);
}

/* Submits the next purge batch; ends the pass when that fails. */
static void
queue_step(troupe_actor *self, sstate *s)
{
    troupe_ttl *o = s->o;
    qjob *j = troupe_calloc(1, sizeof(*j));
    if (j != NULL) {
        j->o = o;
        j->rt = troupe_actor_runtime(self);
        j->self = troupe_self(self);
        /* stopping: no new batch. The share is taken on the actor's own
         * thread, so the actor's share keeps the count above 0 here. */
        bool running = atomic_load(&o->state) == ST_RUNNING;
        if (running)
            atomic_fetch_add(&o->live, 1);
        if (running && troupe_work_submit(self, qjob_run, j, TTL_QDONE,
                                          qjob_drop) == TROUPE_OK)
            return;
        if (running)
            live_release(o);
        troupe_free(j);
    }
    s->qbusy = false; /* try again next tick */
    atomic_fetch_add(&o->qpasses, 1);
}

/* A batch's outcome: a full one goes on from the mailbox, after whatever
 * queued up behind it; a short or failed one ends the pass. */
static void
queue_result(troupe_actor *self, sstate *s, troupe_err err, size_t purged,
             bool full)
{
    atomic_fetch_add(&s->o->qpurged, purged);
    atomic_fetch_add(&s->o->qbatches, 1);
    if (err == TROUPE_OK && full) {
        troupe_msg *next = NULL;
        if (troupe_msg_create(&next, TTL_QNEXT, NULL, 0) == TROUPE_OK &&
            troupe_runtime_send(troupe_actor_runtime(self), troupe_self(self),
                                &next) == TROUPE_OK)
            return;
    }
    s->qbusy = false;
    atomic_fetch_add(&s->o->qpasses, 1);
}

/* The pool job is over: its result follows as TTL_QPURGED, unless the job
 * failed before it submitted anything. */
static troupe_err
h_qdone(troupe_actor *self, void *st, const troupe_msg *m)
{
    qjob *j = m->ptr;
    if (j == NULL)
        return TROUPE_OK;
    bool handed = j->handed;
    troupe_err err = j->err;
    troupe_free(j);
    if (!handed)
        queue_result(self, st, err, 0, false);
    return TROUPE_OK;
}

static troupe_err
h_qpurged(troupe_actor *self, void *st, const troupe_msg *m)
{
    qres *r = m->ptr;
    if (r == NULL)
        return TROUPE_OK;
    queue_result(self, st, r->err, r->purged, r->full);
    troupe_free(r);
    return TROUPE_OK;
}

static troupe_err
h_qnext(troupe_actor *self, void *st, const troupe_msg *m)
{
    (void)m;
    sstate *s = st;
    if (s->qbusy)
        queue_step(self, s);
    return TROUPE_OK;
}

/* ---- coordinator retention ---- */

typedef struct cjob {
    troupe_ttl *o;
    troupe_runtime *rt;
    troupe_addr self;
} cjob;

/* Scheduler 0, the purge's callback: tells the actor, then gives back
 * the batch's share of live, the last touch of the scanner object. */
static void
cjob_purged(troupe_err err, size_t purged, bool more, void *arg)
{
    cjob *j = arg;
    troupe_ttl *o = j->o;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, (uint64_t)err);
    troupe_pack_uint(&p, purged);
    troupe_pack_bool(&p, more);
    troupe_msg *m = NULL;
    if (troupe_pack_take_msg(&p, TTL_CPURGED, &m) == TROUPE_OK)
        troupe_runtime_send(j->rt, j->self, &m); /* fails once we are gone */
    troupe_free(j);
    live_release(o);
}

static void
coord_end(sstate *s)
{
    s->cbusy = false; /* again next tick */
    atomic_fetch_add(&s->o->gpasses, 1);
}

/* Starts the next purge batch; ends the pass when that fails. */
static void
coord_step(troupe_actor *self, sstate *s)
{
    troupe_ttl *o = s->o;
    cjob *j = troupe_malloc(sizeof(*j));
    /* stopping: no new batch; the share is taken on the actor's thread,
     * where the actor's own share keeps the count above 0 */
    if (j != NULL && atomic_load(&o->state) == ST_RUNNING) {
        *j = (cjob){.o = o,
                    .rt = troupe_actor_runtime(self),
                    .self = troupe_self(self)};
        atomic_fetch_add(&o->live, 1);
        if (troupe_coord_purge(o->coord, o->coord_batch, cjob_purged, j) ==
            TROUPE_OK)
            return;
        live_release(o);
    }
    troupe_free(j);
    coord_end(s);
}

static troupe_err
h_cpurged(troupe_actor *self, void *st, const troupe_msg *m)
{
    sstate *s = st;
    uint64_t err = TROUPE_EPROTO, n = 0;
    bool more = false;
    if (m->body != NULL) {
        troupe_reader r;
        troupe_reader_init(&r, troupe_body_data(m->body),
                           troupe_body_len(m->body));
        troupe_read_array_n(&r, 3);
        troupe_read_uint(&r, &err);
        troupe_read_uint(&r, &n);
        troupe_read_bool(&r, &more);
        if (troupe_read_end(&r) != TROUPE_OK)
            err = TROUPE_EPROTO;
    }
    atomic_fetch_add(&s->o->gpurged, n);
    atomic_fetch_add(&s->o->gbatches, 1);
    if (!s->cbusy)
        return TROUPE_OK;
    if (err == TROUPE_OK && more && n > 0) {
        troupe_msg *next = NULL;
        if (troupe_msg_create(&next, TTL_CNEXT, NULL, 0) == TROUPE_OK &&
            troupe_runtime_send(troupe_actor_runtime(self), troupe_self(self),
                                &next) == TROUPE_OK)
            return TROUPE_OK;
    }
    coord_end(s);
    return TROUPE_OK;
}

static troupe_err
h_cnext(troupe_actor *self, void *st, const troupe_msg *m)
{
    (void)m;
    sstate *s = st;
    if (s->cbusy)
        coord_step(self, s);
    return TROUPE_OK;
}

static troupe_err
h_tick(troupe_actor *self, void *st, const troupe_msg *m)
{
    (void)m;
    sstate *s = st;
    if (s->o->queues != NULL && !s->qbusy) {
        s->qbusy = true;
        queue_step(self, s);
    }
    if (s->o->coord != NULL && !s->cbusy) {
        s->cbusy = true;
        coord_step(self, s);
    }
    if (s->busy || s->o->tables == NULL)
        return TROUPE_OK;
    if (troupe_tables_list(s->o->tables, &s->names, &s->n) != TROUPE_OK)
        return TROUPE_OK; /* stopping, or no memory: try next tick */
    s->busy = true;
    s->next = 0;
    s->purging = false;
    pass_step(self, s);
    return TROUPE_OK;
}

static troupe_err
h_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    sstate *s = st;
    uint64_t err = 0, n = 0;
    if (m->body != NULL) {
        troupe_reader r;
        troupe_reader_init(&r, troupe_body_data(m->body),
                           troupe_body_len(m->body));
        troupe_read_array_n(&r, 2);
        troupe_read_uint(&r, &err);
        troupe_read_uint(&r, &n);
        if (troupe_read_end(&r) == TROUPE_OK && err == TROUPE_OK)
            atomic_fetch_add(s->purging ? &s->o->purged : &s->o->evicted, n);
    }
    if (!s->busy)
        return TROUPE_OK;
    advance(s);
    pass_step(self, s);
    return TROUPE_OK;
}

static troupe_err
s_init(troupe_actor *self, void *st, void *arg)
{
    sstate *s = st;
    s->o = arg;
    s->names = NULL;
    s->n = s->next = 0;
    s->busy = false;
    s->qbusy = false;
    s->cbusy = false;
    return troupe_timer_start(self, TTL_TICK, s->o->interval_ms,
                              s->o->interval_ms, NULL);
}

static void
s_stop(troupe_actor *self, void *st, troupe_err reason)
{
    (void)self;
    (void)reason;
    sstate *s = st;
    troupe_free(s->names);
    s->names = NULL;
}

static const troupe_handler_fn s_handlers[TTL_NKINDS] = {
    [TTL_TICK] = h_tick,   [TTL_DONE] = h_done,       [TTL_QDONE] = h_qdone,
    [TTL_QNEXT] = h_qnext, [TTL_QPURGED] = h_qpurged, [TTL_CPURGED] = h_cpurged,
    [TTL_CNEXT] = h_cnext,
};

static const troupe_actor_def ttl_def = {
    .name = "troupe.ttl_scanner",
    .state_size = sizeof(sstate),
    .init = s_init,
    .stop = s_stop,
    .handlers = s_handlers,
    .n_handlers = TTL_NKINDS,
    .remote_kinds = 0, /* every kind is the scanner's own */
};

troupe_err
troupe_ttl_create(const troupe_ttl_opts *o, troupe_ttl **out)
{
    if (out != NULL)
        *out = NULL;
    if (o == NULL || out == NULL || o->rt == NULL ||
        (o->tables == NULL && o->queues == NULL && o->coord == NULL) ||
        o->coord_batch > TROUPE_GTX_PURGE_MAX)
        return TROUPE_EINVAL;
    troupe_ttl *s = troupe_calloc(1, sizeof(*s));
    if (s == NULL)
        return TROUPE_ENOMEM;
    s->rt = o->rt;
    s->tables = o->tables;
    s->queues = o->queues;
    s->interval_ms = o->interval_ms ? o->interval_ms : 1000;
    s->queue_batch = o->queue_batch ? o->queue_batch : QUEUE_BATCH_DEFAULT;
    s->coord = o->coord;
    s->coord_batch = o->coord_batch ? o->coord_batch : COORD_BATCH_DEFAULT;
    s->clock = o->clock;
    s->clock_ctx = o->clock_ctx;
    atomic_init(&s->state, ST_RUNNING);
    atomic_init(&s->live, 1);
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = s;
    troupe_err e = troupe_actor_spawn(s->rt, &ttl_def, &so, &s->addr);
    if (e != TROUPE_OK) {
        atomic_store(&s->state, ST_STOPPED);
        troupe_ttl_destroy(s);
        return e;
    }
    *out = s;
    return TROUPE_OK;
}

troupe_addr
troupe_ttl_addr(const troupe_ttl *s)
{
    return s != NULL ? s->addr : TROUPE_ADDR_NONE;
}

troupe_err
troupe_ttl_kick(troupe_ttl *s)
{
    if (s == NULL)
        return TROUPE_EINVAL;
    if (atomic_load(&s->state) != ST_RUNNING)
        return TROUPE_ESTATE;
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, TTL_TICK, NULL, 0);
    return e == TROUPE_OK ? troupe_runtime_send(s->rt, s->addr, &m) : e;
}

uint64_t
troupe_ttl_passes(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->passes) : 0;
}

uint64_t
troupe_ttl_evicted(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->evicted) : 0;
}

uint64_t
troupe_ttl_purged(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->purged) : 0;
}

uint64_t
troupe_ttl_queue_purged(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->qpurged) : 0;
}

uint64_t
troupe_ttl_queue_batches(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->qbatches) : 0;
}

uint64_t
troupe_ttl_queue_passes(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->qpasses) : 0;
}

uint64_t
troupe_ttl_gtx_purged(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->gpurged) : 0;
}

uint64_t
troupe_ttl_gtx_batches(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->gbatches) : 0;
}

uint64_t
troupe_ttl_gtx_passes(const troupe_ttl *s)
{
    return s != NULL ? atomic_load(&((troupe_ttl *)s)->gpasses) : 0;
}

static void
on_stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    (void)rt;
    (void)a;
    live_release(arg);
}

troupe_err
troupe_ttl_stop(troupe_ttl *s, troupe_ttl_stop_cb cb, void *arg)
{
    if (s == NULL || cb == NULL)
        return TROUPE_EINVAL;
    int running = ST_RUNNING;
    if (!atomic_compare_exchange_strong(&s->state, &running, ST_STOPPING))
        return TROUPE_ESTATE;
    s->stop_cb = cb;
    s->stop_arg = arg;
    if (troupe_actor_stop(s->rt, s->addr, on_stopped, s) != TROUPE_OK)
        on_stopped(s->rt, s->addr, s); /* already gone */
    return TROUPE_OK;
}

static void
wake_stopped(troupe_ttl *s, void *arg)
{
    (void)s;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_ttl_stop_wait(troupe_ttl *s)
{
    troupe_err be = troupe__block_check("troupe_ttl_stop_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, troupe_ttl_stop(s, wake_stopped, &w),
                                 NULL);
}

void
troupe_ttl_destroy(troupe_ttl *s)
{
    if (s == NULL)
        return;
    if (atomic_load(&s->state) != ST_STOPPED)
        abort(); /* the actor or a batch still runs: stop first */
    troupe_free(s);
}
