/*
 * Dispatch targets: task slots, credit, settling, and callback mode.
 *
 * A target owns its slots, allocated at create: a task is a slot, so
 * the credit bounds both the tasks in flight and the memory they hold
 * beyond their bytes. A pull target has `credit` slots; a callback target
 * has up to twice that (at most 65536), because a callback that outlives
 * its deadline keeps its slot (the task's bytes it borrows) until it
 * returns, but not its credit: the producer heard UNKNOWN, and a
 * graceful stop is bounded by the deadline (the queue's handler timeout
 * frees the worker's credit at once). When every spare slot is taken by
 * such callbacks still running, a submit is refused (EBUSY). A slot's state
 * word (disp.h) carries its generation, and so does the task's id; every change
 * of state is one compare-and-swap on that word, so of the answer, the deadline
 * and a stop racing for a task exactly one settles it, and an id whose slot was
 * reused since names nothing (a late reply finds a newer generation).
 *
 *   FREE -submit-> READY -run (callback)-> TAKEN
 *                  READY -take (host)-> COPYING -copied-> TAKEN
 *   READY or TAKEN -settle-> SETTLING -done returns false-> FREE (gen+1)
 *                                     -done returns true-> HELD -end-> FREE
 * (COPYING settles only when the copy cannot be made: ETOOBIG.)
 *
 * The credit is given back when the slot is freed (or, for a callback
 * still running past its deadline, when its task settled), not when the
 * outcome is known: a producer that must make the outcome durable first (the
 * queue) holds the task (done returns true) until it is, so that neither
 * a new task nor a graceful stop overtakes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disp.h"
#include "rt.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

static void
target_free(troupe_target *t)
{
    for (uint32_t i = 0; i < t->nslots; i++)
        troupe_free(t->slots[i].data);
    troupe_free(t->slots);
    troupe_free(t->name);
    pthread_cond_destroy(&t->kick_cv);
    pthread_mutex_destroy(&t->mu);
    troupe_free(t);
}

void
troupe__target_retain(troupe_target *t)
{
    atomic_fetch_add(&t->refs, 1);
}

void
troupe__target_release(troupe_target *t)
{
    if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
        target_free(t);
}

static bool
name_ok(const char *name, size_t *len)
{
    if (name == NULL)
        return false;
    size_t n = strnlen(name, TROUPE_TARGET_NAME_MAX + 1);
    if (n == 0 || n > TROUPE_TARGET_NAME_MAX)
        return false;
    *len = n;
    return true;
}

troupe_err
troupe_target_create(troupe_runtime *rt, const troupe_target_opts *o,
                     troupe_target **out)
{
    if (out != NULL)
        *out = NULL;
    size_t len = 0;
    if (rt == NULL || o == NULL || out == NULL)
        return troupe__errf(TROUPE_EINVAL, "target: NULL argument");
    if (!name_ok(o->name, &len))
        return troupe__errf(TROUPE_EINVAL, "target name: 1..%d bytes, no NUL",
                            TROUPE_TARGET_NAME_MAX);
    if ((o->fn == NULL) == (o->host == NULL))
        return troupe__errf(TROUPE_EINVAL,
                            "target: exactly one of fn (callback) and host "
                            "(pull)");
    if (o->credit > TROUPE_TARGET_CREDIT_MAX)
        return troupe__errf(TROUPE_EINVAL, "target credit %u: at most %d",
                            o->credit, TROUPE_TARGET_CREDIT_MAX);
    if (atomic_load(&rt->phase) != RT_RUNNING)
        return troupe__errf(TROUPE_ECLOSED, "target: runtime shut down");
    troupe_err e = TROUPE_OK;
    struct troupe__disp *d = troupe__disp_get(rt, &e);
    if (d == NULL)
        return e;
    troupe_target *t = troupe_calloc(1, sizeof(*t));
    if (t == NULL)
        return TROUPE_ENOMEM;
    t->rt = rt;
    t->d = d;
    t->credit = o->credit ? o->credit : TROUPE_TARGET_CREDIT_DEFAULT;
    t->kick_free = t->credit >= 8 ? t->credit / 8 : 1;
    t->timeout_ms =
        o->timeout_ms ? o->timeout_ms : TROUPE_TARGET_TIMEOUT_DEFAULT_MS;
    t->timeout_ns = (uint64_t)t->timeout_ms * 1000000u;
    t->fn = o->fn;
    t->arg = o->arg;
    t->host = o->host;
    atomic_init(&t->refs, 1);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->kick_cv, NULL);
    t->name = troupe_malloc(len + 1);
    t->nslots = t->credit;
    if (t->fn != NULL)
        t->nslots = t->credit <= TROUPE_TARGET_CREDIT_MAX / 2
                        ? 2 * t->credit
                        : TROUPE_TARGET_CREDIT_MAX;
    t->slots = troupe_calloc(t->nslots, sizeof(*t->slots));
    if (t->name == NULL || t->slots == NULL) {
        target_free(t);
        return TROUPE_ENOMEM;
    }
    memcpy(t->name, o->name, len + 1);
    t->name_len = len;
    for (uint32_t i = 0; i < t->nslots; i++) {
        t->slots[i].t = t;
        t->slots[i].idx = i;
        atomic_init(&t->slots[i].word, WORD(1, SLOT_FREE));
        t->slots[i].free_next = i + 2 <= t->nslots ? i + 2 : 0;
    }
    t->free_head = 1;
    if (t->host != NULL && (e = troupe__host_attach(t->host, t)) != TROUPE_OK) {
        target_free(t);
        return e;
    }
    if ((e = troupe__disp_add(d, t)) != TROUPE_OK) {
        if (t->host != NULL)
            troupe__host_detach(t->host, t);
        target_free(t);
        return e;
    }
    *out = t;
    return TROUPE_OK;
}

/* ---- credit ---------------------------------------------------------- */

static bool
credit_cas(troupe_target *t)
{
    uint32_t h = atomic_load(&t->held);
    while (h < t->credit)
        if (atomic_compare_exchange_weak(&t->held, &h, h + 1))
            return true;
    return false;
}

/* A credit is free now (taken when `take`). */
static bool
credit_free(troupe_target *t, bool take)
{
    return take ? credit_cas(t) : atomic_load(&t->held) < t->credit;
}

static bool
credit_look(troupe_target *t, troupe__credit_wait *w, bool take)
{
    if (credit_free(t, take))
        return true;
    if (w == NULL)
        return false;
    pthread_mutex_lock(&t->mu);
    if (t->state != TGT_RUNNING) {
        pthread_mutex_unlock(&t->mu);
        return false;
    }
    if (!w->queued) {
        w->queued = true;
        w->next = t->wait;
        t->wait = w;
        atomic_store(&t->waiters, true);
    }
    pthread_mutex_unlock(&t->mu);
    /* a credit freed before w was queued kicked nobody: look again */
    return credit_free(t, take);
}

bool
troupe__target_credit_take(troupe_target *t, troupe__credit_wait *w)
{
    return credit_look(t, w, true);
}

bool
troupe__target_credit_peek(troupe_target *t, troupe__credit_wait *w)
{
    return credit_look(t, w, false);
}

void
troupe__target_credit_unwait(troupe_target *t, troupe__credit_wait *w)
{
    pthread_mutex_lock(&t->mu);
    for (troupe__credit_wait **pp = &t->wait; *pp != NULL; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    w->queued = false;
    atomic_store(&t->waiters, t->wait != NULL);
    /* a kick taken off the list before this lock runs on unlocked: wait
     * for it, so that w (and what its arg names) may go once this
     * returns; a kick that unwaits its own node does not wait for itself */
    while (w->kicks > 0 && !pthread_equal(w->kicker, pthread_self()))
        pthread_cond_wait(&t->kick_cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

/* Kicks the waiters queued now (t->mu not held), taking each off the
 * list under the lock just before its kick: a producer may queue its node
 * again as soon as it is off (its kick sends a message that another
 * thread handles at once), so a list taken off whole would be walked
 * through links being rewritten. At most as many as were queued when it
 * began, so a producer that queues itself again is kicked at most once
 * more here (harmless: it takes again). Each node is marked as kicked
 * until its kick returns, for troupe__target_credit_unwait. */
static void
kick_waiters(troupe_target *t)
{
    if (!atomic_load(&t->waiters))
        return;
    pthread_mutex_lock(&t->mu);
    size_t n = 0;
    for (troupe__credit_wait *x = t->wait; x != NULL; x = x->next)
        n++;
    while (n-- > 0 && t->wait != NULL) {
        troupe__credit_wait *w = t->wait;
        t->wait = w->next;
        atomic_store(&t->waiters, t->wait != NULL);
        w->queued = false;
        w->kicks++;
        w->kicker = pthread_self();
        pthread_mutex_unlock(&t->mu);
        w->kick(w->arg);
        pthread_mutex_lock(&t->mu);
        if (--w->kicks == 0)
            pthread_cond_broadcast(&t->kick_cv);
    }
    pthread_mutex_unlock(&t->mu);
}

/* Gives back n credits: the last one of a stopping target ends its stop
 * (t may be gone after), otherwise waiters for credit are kicked once
 * kick_free credits are free. A producer woken for each credit a reply
 * frees takes one, submits one and waits again: a context switch per task
 * (two threads trading one credit). Woken at an eighth of the credit, it
 * submits that many in one go. It cannot wait for ever: it queued while
 * none were free, so every credit is held by a task in flight (or by a
 * producer about to submit one), and each of those ends (a reply, its
 * deadline, a stop) and gives its credit back through here. */
static void
credit_put_n(troupe_target *t, uint32_t n)
{
    pthread_mutex_lock(&t->mu);
    uint32_t before = atomic_fetch_sub(&t->held, n);
    bool last = before == n;
    bool enough = t->credit - (before - n) >= t->kick_free;
    troupe_target_stop_cb cb = NULL;
    void *cb_arg = NULL;
    if (last && t->state == TGT_STOPPING) {
        t->state = TGT_STOPPED;
        cb = t->stop_cb;
        cb_arg = t->stop_arg;
    }
    pthread_mutex_unlock(&t->mu);
    if (cb != NULL)
        cb(t, cb_arg);
    else if (enough)
        kick_waiters(t);
}

static void
credit_put(troupe_target *t)
{
    credit_put_n(t, 1);
}

void
troupe__target_credit_give(troupe_target *t)
{
    credit_put(t);
}

/* ---- slots ----------------------------------------------------------- */

static tslot *
slot_of(troupe_target *t, uint64_t id)
{
    uint32_t i = ID_SLOT(id);
    return i < t->nslots ? &t->slots[i] : NULL;
}

/* Off the list of tasks in flight (t->mu held). */
static void
slot_unlink(troupe_target *t, tslot *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        t->first = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    else
        t->last = s->prev;
    s->prev = s->next = NULL;
}

/* Frees a settled slot (SETTLING or HELD): generation bumped, back on
 * the free list. `live`: it was still in flight, so also unlinked and its
 * credit given back (a stop waiting for the last one completes); not
 * live: slot_settled did both when the task settled. */
/* Bumps the generation of a settled slot and puts it back on the free
 * list (t->mu held). */
static void
slot_recycle(troupe_target *t, tslot *s)
{
    if (s->cap > 65536) { /* keep small buffers, give large ones back */
        troupe_free(s->data);
        s->data = NULL;
        s->cap = 0;
    }
    uint32_t gen = WORD_GEN(atomic_load(&s->word)) + 1;
    atomic_store(&s->word, WORD(gen ? gen : 1, SLOT_FREE));
    s->free_next = t->free_head;
    t->free_head = s->idx + 1;
}

static void
slot_free_as(troupe_target *t, tslot *s, bool live)
{
    pthread_mutex_lock(&t->mu);
    if (live)
        slot_unlink(t, s);
    slot_recycle(t, s);
    pthread_mutex_unlock(&t->mu);
    if (live)
        credit_put(t);
}

static void
slot_free(troupe_target *t, tslot *s)
{
    slot_free_as(t, s, true);
}

/* The settler is done with these slots: freed now, or, when a callback
 * job is still queued or running, left to that job, but out of flight
 * and their credit back at once (the producer heard the outcome). One
 * lock and one give-back for them all. Unlinked before the job may free
 * its slot (its free takes the lock held here): a new task may be linked
 * through a freed slot. */
static void
slots_settled(troupe_target *t, tslot *const *s, size_t n)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        slot_unlink(t, s[i]);
        if (atomic_exchange(&s[i]->running, 2) == 0)
            slot_recycle(t, s[i]);
        /* else its job frees it (it holds a reference on t: submit) */
    }
    pthread_mutex_unlock(&t->mu);
    credit_put_n(t, (uint32_t)n);
}

static void
slot_settled(troupe_target *t, tslot *s)
{
    slots_settled(t, &s, 1);
}

/* Settles id (see troupe__task_settle): true if this call settled it;
 * *ended is its slot when the settle ended it (to be freed: slot_settled),
 * NULL when the producer holds it. The caller holds a reference on t. */
static bool
settle_one(troupe_target *t, uint64_t id, int from, troupe_outcome outcome,
           const uint8_t *body, size_t len, bool timed_out, tslot **ended)
{
    *ended = NULL;
    tslot *s = slot_of(t, id);
    if (s == NULL)
        return false;
    uint64_t w = atomic_load(&s->word);
    for (;;) {
        int st = WORD_ST(w);
        if (WORD_GEN(w) != ID_GEN(id) ||
            (from < 0 ? st != SLOT_READY && st != SLOT_TAKEN : st != from))
            return false;
        if (atomic_compare_exchange_weak(&s->word, &w,
                                         WORD(WORD_GEN(w), SLOT_SETTLING)))
            break;
    }
    s->timed_out = timed_out;
    s->was_taken = WORD_ST(w) == SLOT_TAKEN;
    if (timed_out)
        atomic_store(&s->timeout_gen, ID_GEN(id));
    if (outcome < TROUPE_OUTCOME_SUCCESS || outcome > TROUPE_OUTCOME_UNKNOWN)
        outcome = TROUPE_OUTCOME_UNKNOWN;
    atomic_fetch_add_explicit(&t->st_settled[outcome], 1, memory_order_relaxed);
    if (timed_out)
        atomic_fetch_add_explicit(&t->st_timed_out, 1, memory_order_relaxed);
    bool hold = s->done(s->arg, id, outcome, body, len);
    uint64_t settling = WORD(ID_GEN(id), SLOT_SETTLING);
    /* held, unless the producer ended it already from inside done's
     * span (ENDED: troupe__target_task_end) */
    if (!hold || !atomic_compare_exchange_strong(&s->word, &settling,
                                                 WORD(ID_GEN(id), SLOT_HELD)))
        *ended = s;
    return true;
}

bool
troupe__task_settle(troupe_target *t, uint64_t id, int from,
                    troupe_outcome outcome, const uint8_t *body, size_t len,
                    bool timed_out)
{
    /* t stays alive through done: a stop's callback may come after */
    troupe__target_retain(t);
    tslot *ended;
    bool settled =
        settle_one(t, id, from, outcome, body, len, timed_out, &ended);
    if (ended != NULL)
        slot_settled(t, ended);
    troupe__target_release(t);
    return settled;
}

bool
troupe__task_settle_into(troupe_target *t, uint64_t id, int from,
                         troupe_outcome outcome, const uint8_t *body,
                         size_t len, troupe__settled *acc)
{
    tslot *ended;
    bool settled = settle_one(t, id, from, outcome, body, len, false, &ended);
    if (ended != NULL) {
        acc->s[acc->n++] = ended;
        if (acc->n == TROUPE__SETTLED_BATCH)
            troupe__task_settled_flush(t, acc);
    }
    return settled;
}

void
troupe__task_settled_flush(troupe_target *t, troupe__settled *acc)
{
    size_t n = acc->n;
    acc->n = 0;
    if (n > 0)
        slots_settled(t, acc->s, n);
}

void
troupe__target_task_end(troupe_target *t, uint64_t id)
{
    tslot *s = slot_of(t, id);
    if (s == NULL)
        return;
    uint64_t want = WORD(ID_GEN(id), SLOT_HELD);
    if (!atomic_compare_exchange_strong(&s->word, &want,
                                        WORD(ID_GEN(id), SLOT_SETTLING))) {
        /* its done still runs (and will return true): the settler frees
         * it; anything else is a producer's error, ignored */
        want = WORD(ID_GEN(id), SLOT_SETTLING);
        (void)atomic_compare_exchange_strong(&s->word, &want,
                                             WORD(ID_GEN(id), SLOT_ENDED));
        return;
    }
    troupe__target_retain(t);
    slot_settled(t, s);
    troupe__target_release(t);
}

bool
troupe__task_taken(troupe_target *t, uint64_t id)
{
    tslot *s = slot_of(t, id);
    return s != NULL && s->was_taken;
}

tslot *
troupe__task_take(troupe_target *t, uint64_t id)
{
    tslot *s = slot_of(t, id);
    if (s == NULL)
        return NULL;
    uint64_t want = WORD(ID_GEN(id), SLOT_READY);
    if (!atomic_compare_exchange_strong(&s->word, &want,
                                        WORD(ID_GEN(id), SLOT_COPYING)))
        return NULL;
    return s;
}

/* ids of t's READY or TAKEN tasks that pass `keep`, oldest first, into
 * *out (allocated; NULL when none). */
static size_t
collect(troupe_target *t, uint64_t now_ns, bool all, uint64_t **out,
        uint64_t *next_due)
{
    *out = NULL;
    *next_due = 0;
    pthread_mutex_lock(&t->mu);
    size_t n = 0;
    for (tslot *s = t->first; s != NULL; s = s->next) {
        if (!all && s->due_ns > now_ns) {
            *next_due = s->due_ns;
            break;
        }
        n++;
    }
    uint64_t *ids = n ? troupe_malloc(n * sizeof(*ids)) : NULL;
    size_t k = 0;
    if (ids != NULL)
        for (tslot *s = t->first; s != NULL && k < n; s = s->next) {
            uint64_t w = atomic_load(&s->word);
            int st = WORD_ST(w);
            if (st == SLOT_READY || st == SLOT_TAKEN)
                ids[k++] = ID_MAKE(t->hidx, s->idx, WORD_GEN(w));
        }
    else if (n > 0 && *next_due == 0)
        *next_due = troupe__mono_ns() + 1000000u; /* no memory: soon */
    pthread_mutex_unlock(&t->mu);
    *out = ids;
    return k;
}

uint64_t
troupe__target_expire(troupe_target *t, uint64_t now_ns)
{
    uint64_t *ids, next;
    size_t n = collect(t, now_ns, false, &ids, &next);
    for (size_t i = 0; i < n; i++)
        troupe__task_settle(t, ids[i], -1, TROUPE_OUTCOME_UNKNOWN, NULL, 0,
                            true);
    troupe_free(ids);
    return next;
}

void
troupe__target_abandon(troupe_target *t)
{
    uint64_t *ids, next;
    size_t n = collect(t, 0, true, &ids, &next);
    for (size_t i = 0; i < n; i++)
        troupe__task_settle(t, ids[i], -1, TROUPE_OUTCOME_UNKNOWN, NULL, 0,
                            false);
    troupe_free(ids);
}

/* ---- callback mode ---------------------------------------------------- */

static int64_t
unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A callback task's job: it owns its slot until it is done with it (the
 * slot is not freed, nor reused, while the job is queued or running), so
 * a callback past its deadline still reads its task's bytes safely. */
static void
callback_run(void *arg)
{
    tslot *s = arg;
    troupe_target *t = s->t; /* the job's reference, taken at submit */
    uint64_t w = atomic_load(&s->word);
    uint64_t id = ID_MAKE(0, s->idx, WORD_GEN(w));
    if (WORD_ST(w) == SLOT_READY &&
        atomic_compare_exchange_strong(&s->word, &w,
                                       WORD(WORD_GEN(w), SLOT_TAKEN))) {
        troupe_task task = {.id = id,
                            .target = t->name,
                            .kind = s->kind,
                            .attempt = s->attempt,
                            .deadline_ms = s->deadline_ms,
                            .header = s->data,
                            .header_len = s->header_len,
                            .body = s->data + s->header_len,
                            .body_len = s->body_len};
        troupe_task_reply r = {0};
        troupe_outcome o = t->fn(&task, &r, t->arg);
        if (o < TROUPE_OUTCOME_SUCCESS || o > TROUPE_OUTCOME_UNKNOWN) {
            atomic_fetch_add_explicit(&t->st_bad, 1, memory_order_relaxed);
            o = TROUPE_OUTCOME_UNKNOWN;
        }
        if (!troupe__task_settle(t, id, SLOT_TAKEN, o, r.data, r.len, false))
            atomic_fetch_add_explicit(&t->st_late, 1, memory_order_relaxed);
        troupe_free(r.data);
    }
    /* else settled while it waited for a thread (deadline, stop) */
    if (atomic_exchange(&s->running, 0) == 2)
        slot_free_as(t, s, false);
    troupe__target_release(t);
}

troupe_err
troupe_task_reply_set(troupe_task_reply *r, const void *data, size_t len)
{
    if (r == NULL || (data == NULL && len > 0))
        return troupe__errf(TROUPE_EINVAL, "task reply: NULL argument");
    if (len > TROUPE_TASK_BODY_MAX)
        return troupe__errf(TROUPE_ETOOBIG, "task reply: %zu bytes, at most %u",
                            len, TROUPE_TASK_BODY_MAX);
    uint8_t *p = troupe_malloc(len ? len : 1);
    if (p == NULL)
        return TROUPE_ENOMEM;
    if (len)
        memcpy(p, data, len);
    troupe_free(r->data);
    r->data = p;
    r->len = len;
    return TROUPE_OK;
}

/* ---- submit ---------------------------------------------------------- */

troupe_err
troupe__target_submit(troupe_target *t, const troupe__task_in *in,
                      troupe__task_done_fn done, void *arg, uint64_t *id)
{
    if (t == NULL || in == NULL || done == NULL ||
        in->header_len > TROUPE_TASK_HEADER_MAX ||
        in->body_len > TROUPE_TASK_BODY_MAX ||
        (in->header == NULL && in->header_len > 0) ||
        (in->body == NULL && in->body_len > 0)) {
        if (t != NULL)
            credit_put(t);
        return TROUPE_EINVAL;
    }
    pthread_mutex_lock(&t->mu);
    if (t->state != TGT_RUNNING || t->free_head == 0) {
        /* free_head 0 with a credit taken: every spare slot is a
         * callback still running past its deadline */
        bool running = t->state == TGT_RUNNING;
        pthread_mutex_unlock(&t->mu);
        credit_put(t);
        if (running)
            return troupe__errf(TROUPE_EBUSY,
                                "target %s: every slot is held by a callback "
                                "running past its deadline",
                                t->name);
        return TROUPE_ESTATE;
    }
    tslot *s = &t->slots[t->free_head - 1];
    t->free_head = s->free_next;
    pthread_mutex_unlock(&t->mu);
    size_t need = in->header_len + in->body_len;
    if (need > s->cap || s->data == NULL) {
        uint8_t *p = troupe_realloc(s->data, need ? need : 1);
        if (p == NULL) {
            pthread_mutex_lock(&t->mu);
            s->free_next = t->free_head;
            t->free_head = s->idx + 1;
            pthread_mutex_unlock(&t->mu);
            credit_put(t);
            return TROUPE_ENOMEM;
        }
        s->data = p;
        s->cap = need ? need : 1;
    }
    if (in->header_len)
        memcpy(s->data, in->header, in->header_len);
    if (in->body_len)
        memcpy(s->data + in->header_len, in->body, in->body_len);
    s->header_len = in->header_len;
    s->body_len = in->body_len;
    s->kind = in->kind;
    s->attempt = in->attempt;
    s->done = done;
    s->arg = arg;
    s->timed_out = false;
    atomic_store(&s->running, t->fn != NULL ? 1 : 0);
    s->due_ns = troupe__mono_ns() + t->timeout_ns;
    s->deadline_ms = unix_ms() + (int64_t)t->timeout_ms;
    uint32_t gen = WORD_GEN(atomic_load(&s->word));
    uint64_t tid = ID_MAKE(t->hidx, s->idx, gen);
    pthread_mutex_lock(&t->mu);
    s->prev = t->last;
    s->next = NULL;
    if (t->last != NULL)
        t->last->next = s;
    else
        t->first = s;
    t->last = s;
    atomic_store(&s->word, WORD(gen, SLOT_READY));
    pthread_mutex_unlock(&t->mu);
    atomic_fetch_add_explicit(&t->st_submitted, 1, memory_order_relaxed);
    if (id != NULL)
        *id = tid;
    /* Every submit tells the deadline thread (lock-free when it sleeps
     * to an earlier due already): only when the list was empty is not
     * enough, as a round that found the list's overdue slots all held,
     * settling or being copied sleeps for good while they stay linked. */
    troupe__disp_due(t->d, s->due_ns);
    troupe_err e;
    if (t->host != NULL) {
        e = troupe__host_push(t->host, tid);
    } else {
        /* the job's reference: it may outlive the task's settling (and
         * so the target's stop) when it runs past the deadline */
        troupe__target_retain(t);
        e = troupe_runtime_work_in(t->rt, TROUPE_LANE_HOST, need + sizeof(*s),
                                   callback_run, NULL, s);
    }
    if (e == TROUPE_OK)
        return TROUPE_OK;
    /* Nothing took it: back to free without a done, unless a stop or the
     * deadline settled it meanwhile (done fired: then it is OK), in which
     * case this stands in for the job that never ran. */
    uint64_t want = WORD(gen, SLOT_READY);
    if (atomic_compare_exchange_strong(&s->word, &want,
                                       WORD(gen, SLOT_SETTLING))) {
        atomic_store(&s->running, 0);
        slot_free(t, s);
        if (t->fn != NULL)
            troupe__target_release(t); /* the job's, never run */
        return e;
    }
    if (t->fn != NULL) {
        if (atomic_exchange(&s->running, 0) == 2)
            slot_free_as(t, s, false);
        troupe__target_release(t); /* the job's, never run */
    }
    return TROUPE_OK;
}

/* ---- stop ------------------------------------------------------------ */

troupe_err
troupe_target_stop(troupe_target *t, troupe_target_stop_cb cb, void *arg)
{
    if (t == NULL || cb == NULL)
        return troupe__errf(TROUPE_EINVAL, "target stop: NULL argument");
    pthread_mutex_lock(&t->mu);
    if (t->state != TGT_RUNNING) {
        pthread_mutex_unlock(&t->mu);
        return troupe__errf(TROUPE_ESTATE, "target %s: stopping already",
                            t->name);
    }
    t->state = TGT_STOPPING;
    t->stop_cb = cb;
    t->stop_arg = arg;
    pthread_mutex_unlock(&t->mu);
    troupe__disp_unlist(t->d, t);
    /* producers waiting for credit hear that it will not come (none
     * queues again: credit_look refuses a stopping target) */
    kick_waiters(t);
    /* Tasks queued for a host settle now; those running settle as they
     * would. A credit held by a producer between take and submit is
     * refused at submit (ESTATE) and given back. The held count is the
     * reference: the last slot freed (or this, when none) ends the stop. */
    pthread_mutex_lock(&t->mu);
    uint64_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (tslot *s = t->first; s != NULL; s = s->next) {
        uint64_t wd = atomic_load(&s->word);
        if (WORD_ST(wd) != SLOT_READY)
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            uint64_t *a = troupe_realloc(ids, nc * sizeof(*a));
            if (a == NULL)
                break; /* those left settle by their deadline */
            ids = a;
            cap = nc;
        }
        ids[n++] = ID_MAKE(t->hidx, s->idx, WORD_GEN(wd));
    }
    pthread_mutex_unlock(&t->mu);
    troupe__target_retain(t);
    for (size_t i = 0; i < n; i++)
        troupe__task_settle(t, ids[i], SLOT_READY, TROUPE_OUTCOME_UNKNOWN, NULL,
                            0, false);
    troupe_free(ids);
    pthread_mutex_lock(&t->mu);
    bool now = t->state == TGT_STOPPING && atomic_load(&t->held) == 0;
    if (now)
        t->state = TGT_STOPPED;
    pthread_mutex_unlock(&t->mu);
    if (now)
        cb(t, arg);
    troupe__target_release(t);
    return TROUPE_OK;
}

static void
stop_woken(troupe_target *t, void *arg)
{
    (void)t;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_target_stop_wait(troupe_target *t)
{
    troupe_err e = troupe__block_check("troupe_target_stop_wait");
    if (e != TROUPE_OK)
        return e;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, troupe_target_stop(t, stop_woken, &w),
                                 NULL);
}

void
troupe_target_destroy(troupe_target *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    bool stopped = t->state == TGT_STOPPED;
    pthread_mutex_unlock(&t->mu);
    if (!stopped) {
        /* a programming error; written directly (the logger may be what
         * is being torn down) */
        fprintf(stderr, "troupe: target_destroy of a target not stopped\n");
        abort();
    }
    troupe__disp_remove(t->d, t);
    if (t->host != NULL)
        troupe__host_detach(t->host, t);
    troupe__target_release(t);
}

void
troupe_target_stats_get(const troupe_target *t, troupe_target_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (t == NULL)
        return;
    troupe_target *m = (troupe_target *)t; /* relaxed reads only */
    out->submitted =
        atomic_load_explicit(&m->st_submitted, memory_order_relaxed);
    for (int i = 0; i < 5; i++)
        out->settled[i] =
            atomic_load_explicit(&m->st_settled[i], memory_order_relaxed);
    out->timed_out =
        atomic_load_explicit(&m->st_timed_out, memory_order_relaxed);
    out->late = atomic_load_explicit(&m->st_late, memory_order_relaxed);
    out->bad_outcome = atomic_load_explicit(&m->st_bad, memory_order_relaxed);
    out->held = atomic_load_explicit(&m->held, memory_order_relaxed);
}

uint32_t
troupe_target_host_index(const troupe_target *t)
{
    return t != NULL && t->host != NULL ? t->hidx : 0;
}
