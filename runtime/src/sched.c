/*
 * Schedulers: one uv_loop_t each, a local run queue of actors, an inject
 * stack for actors made runnable by other threads, and a control queue of
 * deferred calls.
 *
 * Delivery protocol (the invariant everything here relies on): an actor's
 * `count` is the number of messages pushed and not yet accounted for by a
 * turn. A sender increments it before pushing; the sender that moves it
 * from 0 to 1 makes the actor runnable. A turn subtracts what it handled
 * and requeues the actor if anything is left. So an actor is in at most one
 * queue, and while a turn runs count >= 1: no other thread can schedule it,
 * and it can free itself at the end of a turn once its slot is cleared.
 *
 * Cross-thread sends hold the slot's stripe lock while they check the
 * generation and push, and an actor clears its slot under the same lock
 * before it drains and frees itself, so a send never touches freed memory.
 * A send from an actor to another actor on the same scheduler needs no
 * lock: only that thread can free the target.
 *
 * Mailboxes are a Treiber stack (senders CAS-push) grabbed whole by the
 * owner and reversed: no stub node, so an idle actor stays small, and order
 * per sender is kept.
 *
 * Bounds. A user message counts against its mailbox's message bound
 * (`count`) and, if its body is larger than an inline one, its byte bound
 * (`bytes`, the message flagged CHARGED so the turn that takes it knows to
 * give the bytes back). Headers and inline bodies (up to 64 bytes, in the
 * header's own allocation) are bounded by the message count alone: that
 * keeps the second atomic off the small sends that dominate.
 * System messages, replies and completions are exempt: they answer
 * something this node started and must not be lost. A message from
 * another node (NET) is admitted only with a kind its receiver declares
 * remote, and counts in the runtime-wide network budget until it leaves
 * the mailbox (pop), so that many actors cannot add up without a bound. A
 * peer cannot make anything exempt: deliver keeps only its REPLY flag, and
 * replies from the network still count in that budget.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rt.h"
#include "troupe/internal/runtime.h"

static void
on_run(uv_idle_t *h);

/* Set while a scheduler's loop callback runs on this thread: host code
 * called from an actor turn or a control call (a reply callback, say)
 * can tell it is on that scheduler. Per thread, like the message cache
 * (msg.c); only ever compared, never followed across threads. */
static _Thread_local struct sched *current;
/* Set for the life of a thread the runtime started for a scheduler. */
static _Thread_local bool sched_thread;

struct sched *
troupe__sched_current(void)
{
    return current;
}

void
troupe__sched_thread_mark(void)
{
    sched_thread = true;
}

troupe_err
troupe__block_check(const char *call)
{
    if (current == NULL && !sched_thread)
        return TROUPE_OK;
    return troupe__errf(TROUPE_EDEADLK,
                        "%s: blocking call on a troupe scheduler thread (in an "
                        "actor, a completion or a post callback) would wait "
                        "for that thread; use the asynchronous form",
                        call);
}

static void
push_msg(troupe_actor *a, troupe_msg *m)
{
    troupe_msg *head = atomic_load_explicit(&a->inbox, memory_order_relaxed);
    do {
        atomic_store_explicit(&troupe__msg_of(m)->next, head,
                              memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(
        &a->inbox, &head, m, memory_order_release, memory_order_relaxed));
}

static void
inject_push(struct sched *s, troupe_actor *a)
{
    troupe_actor *head = atomic_load_explicit(&s->inject, memory_order_relaxed);
    do {
        atomic_store_explicit(&a->qnext, head, memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(
        &s->inject, &head, a, memory_order_seq_cst, memory_order_relaxed));
    troupe__sched_wake(s);
}

void
troupe__runq_push(struct sched *s, troupe_actor *a)
{
    atomic_store_explicit(&a->qnext, NULL, memory_order_relaxed);
    if (s->rq_tail != NULL)
        atomic_store_explicit(&s->rq_tail->qnext, a, memory_order_relaxed);
    else
        s->rq_head = a;
    s->rq_tail = a;
    if (!s->runner_on) {
        s->runner_on = true;
        uv_idle_start(&s->runner, on_run);
    }
}

/* Charges m's body to a's byte bound; false when it does not fit. Out of
 * line: the sends of small messages, which never get here, keep a short
 * enqueue. */
static __attribute__((noinline)) bool
charge_bytes(troupe_actor *a, troupe_msg *m)
{
    uint64_t len = m->body->len;
    uint64_t held =
        atomic_fetch_add_explicit(&a->bytes, len, memory_order_relaxed);
    /* alone, a message larger than the bound still passes */
    if (held != 0 && held + len > a->byte_cap) {
        atomic_fetch_sub_explicit(&a->bytes, len, memory_order_relaxed);
        return false;
    }
    troupe__msg_of(m)->pflags |= TROUPE__MSG_CHARGED;
    return true;
}

/* Takes back the count of a message that does not fit (out of line: the
 * rare path, kept out of the inlined enqueue). */
static __attribute__((noinline)) uint32_t
refuse(troupe_actor *a)
{
    atomic_fetch_sub_explicit(&a->count, 1, memory_order_acq_rel);
    atomic_fetch_add_explicit(&a->sched->rt->st_mailbox_full, 1,
                              memory_order_relaxed);
    return UINT32_MAX;
}

/* Counts and pushes; returns the previous count, or UINT32_MAX if full.
 * Inlined in every send: GCC otherwise keeps it apart since it has three
 * callers, a call on the hottest path. */
static inline __attribute__((always_inline)) uint32_t
enqueue(troupe_actor *a, troupe_msg *m, bool system)
{
    uint32_t cap = a->def->mailbox_cap ? a->def->mailbox_cap : 65536u;
    uint32_t prev =
        atomic_fetch_add_explicit(&a->count, 1, memory_order_acq_rel);
    if (!system && (prev >= cap || (m->body != NULL &&
                                    m->body->len > TROUPE__INLINE_BODY_MAX &&
                                    !charge_bytes(a, m))))
        return refuse(a);
    push_msg(a, m);
    return prev;
}

static uint64_t
net_cost(const troupe_msg *m)
{
    return TROUPE__NET_MSG_COST + (m->body != NULL ? m->body->len : 0);
}

/* A message from the network may enter a's mailbox: its kind is declared
 * remote (or it is a reply) and the network budget has room. On OK the
 * cost is charged; troupe__net_release gives it back. */
static troupe_err
net_admit(troupe_runtime *rt, troupe_actor *a, troupe_msg *m)
{
    if (!(m->flags & TROUPE_MSG_REPLY) &&
        (m->kind >= 64 || !(a->def->remote_kinds & TROUPE_KIND_BIT(m->kind))))
        return TROUPE_EINVAL;
    uint64_t c = net_cost(m);
    uint64_t held =
        atomic_fetch_add_explicit(&rt->net_bytes, c, memory_order_relaxed);
    if (held + c > rt->net_cap) {
        atomic_fetch_sub_explicit(&rt->net_bytes, c, memory_order_relaxed);
        atomic_fetch_add_explicit(&rt->st_mailbox_full, 1,
                                  memory_order_relaxed);
        return TROUPE_EFULL;
    }
    troupe__msg_of(m)->pflags |= TROUPE__MSG_NETHELD;
    return TROUPE_OK;
}

void
troupe__net_release(troupe_runtime *rt, troupe_msg *m)
{
    if (troupe__msg_cof(m)->pflags & TROUPE__MSG_NETHELD) {
        troupe__msg_of(m)->pflags &= ~(uint32_t)TROUPE__MSG_NETHELD;
        atomic_fetch_sub_explicit(&rt->net_bytes, net_cost(m),
                                  memory_order_relaxed);
    }
}

void
troupe__local_enqueue(troupe_actor *a, troupe_msg *m)
{
    if (enqueue(a, m, true) == 0)
        troupe__runq_push(a->sched, a);
}

troupe_err
troupe__post(troupe_runtime *rt, struct sched *from, troupe_addr to,
             troupe_msg **mp, bool system)
{
    troupe_msg *m = *mp;
    *mp = NULL;
    m->to = to;
    if (to.node != rt->node_id) {
        if (m->ptr != NULL ||
            (troupe__msg_cof(m)->pflags & TROUPE__MSG_INTERNAL)) {
            troupe_msg_destroy(m);
            return TROUPE_EINVAL;
        }
        const troupe_remote_ops *ops = atomic_load(&rt->remote);
        if (ops == NULL) {
            troupe_msg_destroy(m);
            return TROUPE_EUNREACHABLE;
        }
        return ops->send(atomic_load(&rt->remote_ctx), &m);
    }
    struct slot *sl = troupe__slot_get(rt, to.slot);
    if (sl == NULL) {
        troupe_msg_destroy(m);
        return TROUPE_EDEAD;
    }
    if (from != NULL) {
        /* Lock-free when the target lives on the sending thread. The
         * generation is read before and after the actor pointer: a slot
         * clears its actor before bumping gen and publishes a new actor
         * only after, so equal reads prove `a` is the incarnation `to`
         * names, and the slot's scheduler says whose thread owns it. Only
         * the owner frees an actor, so if that is us it stays alive. */
        uint32_t g1 = atomic_load(&sl->gen);
        troupe_actor *a = atomic_load(&sl->actor);
        uint32_t sc = atomic_load(&sl->sched);
        uint32_t g2 = atomic_load(&sl->gen);
        if (a != NULL && g1 == to.gen && g2 == to.gen && sc == from->idx) {
            uint32_t prev = enqueue(a, m, system);
            if (prev == UINT32_MAX) {
                troupe_msg_destroy(m);
                return TROUPE_EFULL;
            }
            if (prev == 0)
                troupe__runq_push(from, a);
            return TROUPE_OK;
        }
    }
    pthread_mutex_t *lk = &rt->stripes[to.slot % SLOT_STRIPES];
    pthread_mutex_lock(lk);
    troupe_actor *a = atomic_load_explicit(&sl->actor, memory_order_acquire);
    if (a == NULL ||
        atomic_load_explicit(&sl->gen, memory_order_relaxed) != to.gen) {
        pthread_mutex_unlock(lk);
        troupe_msg_destroy(m);
        return TROUPE_EDEAD;
    }
    /* From the network: only ever on this locked path (from is NULL). */
    if (troupe__msg_cof(m)->pflags & TROUPE__MSG_NET) {
        troupe_err e = net_admit(rt, a, m);
        if (e != TROUPE_OK) {
            pthread_mutex_unlock(lk);
            troupe_msg_destroy(m);
            return e;
        }
    }
    uint32_t prev = enqueue(a, m, system);
    pthread_mutex_unlock(lk);
    if (prev == UINT32_MAX) {
        troupe__net_release(rt, m);
        troupe_msg_destroy(m);
        return TROUPE_EFULL;
    }
    if (prev == 0) {
        /* We moved count 0 -> 1: the actor is idle and only we may queue
         * it, so it cannot be freed before it runs. */
        if (a->sched == from)
            troupe__runq_push(from, a);
        else
            inject_push(a->sched, a);
    }
    return TROUPE_OK;
}

static troupe_err
ctl_push(struct sched *s, void (*fn)(struct sched *, void *),
         void (*post)(void *, troupe_runtime *), void *arg)
{
    struct ctl *c = troupe_malloc(sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->next = NULL;
    c->fn = fn;
    c->post = post;
    c->arg = arg;
    pthread_mutex_lock(&s->ctl_lock);
    if (s->ctl_closed) {
        pthread_mutex_unlock(&s->ctl_lock);
        troupe_free(c);
        return TROUPE_ECLOSED;
    }
    if (s->ctl_tail)
        s->ctl_tail->next = c;
    else
        s->ctl_head = c;
    s->ctl_tail = c;
    pthread_mutex_unlock(&s->ctl_lock);
    troupe__sched_wake(s);
    return TROUPE_OK;
}

troupe_err
troupe__ctl(struct sched *s, void (*fn)(struct sched *, void *), void *arg)
{
    return ctl_push(s, fn, NULL, arg);
}

troupe_err
troupe__ctl_post(struct sched *s, void (*post)(void *, troupe_runtime *),
                 void *arg)
{
    return ctl_push(s, NULL, post, arg);
}

void
troupe__run_ctl(struct sched *s)
{
    pthread_mutex_lock(&s->ctl_lock);
    struct ctl *c = s->ctl_head;
    s->ctl_head = s->ctl_tail = NULL;
    pthread_mutex_unlock(&s->ctl_lock);
    while (c != NULL) {
        struct ctl *next = c->next;
        if (c->fn != NULL)
            c->fn(s, c->arg);
        else
            c->post(c->arg, s->rt);
        troupe_free(c);
        c = next;
    }
}

void
troupe__sched_wake(struct sched *s)
{
    /* seq_cst with the push before it and with on_wake's clear: a wake
     * that finds the flag set is one whose push on_wake will still see. */
    if (atomic_exchange(&s->wake_pending, true))
        return;
    uint64_t one = 1;
    while (write(s->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ; /* EAGAIN: the counter is full, so a wakeup is pending anyway */
}

static void
on_wake(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    struct sched *s = h->data;
    uint64_t n;
    while (read(s->wake_fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    atomic_store(&s->wake_pending, false); /* before looking: see above */
    troupe_actor *a = atomic_exchange(&s->inject, NULL);
    /* The stack is newest first: reverse it so actors run in wake order. */
    troupe_actor *rev = NULL;
    while (a != NULL) {
        troupe_actor *next =
            atomic_load_explicit(&a->qnext, memory_order_relaxed);
        atomic_store_explicit(&a->qnext, rev, memory_order_relaxed);
        rev = a;
        a = next;
    }
    while (rev != NULL) {
        troupe_actor *next =
            atomic_load_explicit(&rev->qnext, memory_order_relaxed);
        troupe__runq_push(s, rev);
        rev = next;
    }
    struct sched *prev = current;
    current = s;
    troupe__run_ctl(s);
    current = prev;
}

/* Turns per loop iteration: enough to amortise the poll, few enough that
 * I/O and timers are served promptly. */
#define TURNS_PER_ITERATION 256

static void
on_run(uv_idle_t *h)
{
    struct sched *s = h->data;
    struct sched *prev = current;
    current = s;
    for (int turns = 0; turns < TURNS_PER_ITERATION && s->rq_head; turns++) {
        troupe_actor *a = s->rq_head;
        s->rq_head = atomic_load_explicit(&a->qnext, memory_order_relaxed);
        if (s->rq_head == NULL)
            s->rq_tail = NULL;
        troupe__actor_run(a);
    }
    current = prev;
    if (s->rq_head == NULL && s->runner_on) {
        s->runner_on = false;
        uv_idle_stop(&s->runner);
    }
}

troupe_err
troupe__sched_init(troupe_runtime *rt, struct sched *s, uv_loop_t *host)
{
    s->rt = rt;
    if (host != NULL) {
        s->loop = host;
        s->embedded = true;
    } else {
        if (uv_loop_init(&s->own_loop) != 0)
            return TROUPE_ESYS;
        s->loop = &s->own_loop;
    }
    if (pthread_mutex_init(&s->ctl_lock, NULL) != 0)
        return TROUPE_ESYS;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0 || uv_poll_init(s->loop, &s->wake, s->wake_fd) != 0) {
        if (s->wake_fd >= 0)
            close(s->wake_fd);
        s->wake_fd = -1;
        pthread_mutex_destroy(&s->ctl_lock);
        if (!s->embedded)
            uv_loop_close(&s->own_loop);
        return TROUPE_ESYS;
    }
    atomic_init(&s->wake_pending, false);
    s->wake.data = s;
    uv_poll_start(&s->wake, UV_READABLE, on_wake);
    uv_idle_init(s->loop, &s->runner);
    s->runner.data = s;
    uv_timer_init(s->loop, &s->ask_timer);
    s->ask_timer.data = s;
    atomic_init(&s->inject, NULL);
    return TROUPE_OK;
}
