/*
 * Actors: slots and addresses, spawn, the turn, stop, failure and
 * supervision, monitors and timers.
 *
 * Lifecycle of an actor: spawn allocates it with an INIT message already in
 * its mailbox and publishes its slot; its first turn runs init on its own
 * scheduler. It dies only inside one of its own turns (stop, failure, init
 * error): the slot is cleared under its stripe lock (no sender can reach it
 * after that), the mailbox is drained (a queued STOP still gets its
 * callback, a queued MONITOR gets DOWN, a queued ask gets an EDEAD reply),
 * monitors get DOWN, the supervisor gets CHILD_DOWN, and the memory is
 * freed. See sched.c for why this cannot race with senders.
 *
 * Restart keeps the address and the mailbox: the stop hook runs, timers are
 * cancelled, state is zeroed and init runs again. Monitors do not fire on a
 * restart (the address stays valid); outstanding asks still complete.
 */
#include <stdio.h>
#include <string.h>

#include "rt.h"

struct timer {
    uv_timer_t h;
    struct timer *next;
    troupe_actor *a; /* NULL once cancelled */
    uint64_t id;
    uint32_t kind;
    bool repeat;
};

/* ---- slots ---- */

struct slot *
troupe__slot_get(troupe_runtime *rt, uint32_t idx)
{
    if (idx == 0)
        return NULL;
    uint32_t page = idx >> SLOT_PAGE_BITS;
    if (page >= SLOT_MAX_PAGES)
        return NULL;
    struct slot *p =
        atomic_load_explicit(&rt->pages[page], memory_order_acquire);
    return p ? &p[idx & (SLOT_PAGE_SIZE - 1)] : NULL;
}

static troupe_err
slot_alloc(troupe_runtime *rt, uint32_t *idx, uint32_t *gen)
{
    pthread_mutex_lock(&rt->slot_lock);
    uint32_t i = rt->free_head;
    struct slot *sl;
    if (i != 0) {
        sl = troupe__slot_get(rt, i);
        rt->free_head = sl->free_next;
    } else {
        i = rt->slot_hwm + 1;
        uint32_t page = i >> SLOT_PAGE_BITS;
        if (page >= SLOT_MAX_PAGES) {
            pthread_mutex_unlock(&rt->slot_lock);
            return TROUPE_ENOMEM;
        }
        if (atomic_load_explicit(&rt->pages[page], memory_order_relaxed) ==
            NULL) {
            struct slot *p = troupe_calloc(SLOT_PAGE_SIZE, sizeof(*p));
            if (p == NULL) {
                pthread_mutex_unlock(&rt->slot_lock);
                return TROUPE_ENOMEM;
            }
            atomic_store_explicit(&rt->pages[page], p, memory_order_release);
        }
        rt->slot_hwm = i;
        sl = troupe__slot_get(rt, i);
    }
    /* A fresh unguessable generation per allocation (ids.c): an address a
     * peer learned reveals nothing about any other actor's, and differs
     * from the slot's previous incarnation's so a stale send fails. The
     * actor pointer is still NULL here, so lock-free readers see no actor
     * whatever generation they read (sched.c). */
    uint32_t g = troupe__gen_next(rt, sl->last_gen);
    sl->last_gen = g;
    atomic_store_explicit(&sl->gen, g, memory_order_relaxed);
    pthread_mutex_unlock(&rt->slot_lock);
    *idx = i;
    *gen = g;
    return TROUPE_OK;
}

/* Clears a live slot so no sender can reach its actor, then frees it. */
void
troupe__slot_release(troupe_runtime *rt, uint32_t idx)
{
    struct slot *sl = troupe__slot_get(rt, idx);
    pthread_mutex_t *lk = &rt->stripes[idx % SLOT_STRIPES];
    pthread_mutex_lock(lk);
    /* Clear, then bump: lock-free readers rely on this order (sched.c). */
    atomic_store(&sl->actor, NULL);
    uint32_t g = atomic_load_explicit(&sl->gen, memory_order_relaxed) + 1;
    atomic_store(&sl->gen, g == 0 ? 1 : g);
    pthread_mutex_unlock(lk);
    pthread_mutex_lock(&rt->slot_lock);
    sl->free_next = rt->free_head;
    rt->free_head = idx;
    pthread_mutex_unlock(&rt->slot_lock);
}

bool
troupe__addr_alive(troupe_runtime *rt, troupe_addr a)
{
    if (a.node != rt->node_id)
        return false;
    struct slot *sl = troupe__slot_get(rt, a.slot);
    if (sl == NULL)
        return false;
    pthread_mutex_t *lk = &rt->stripes[a.slot % SLOT_STRIPES];
    pthread_mutex_lock(lk);
    bool alive = atomic_load_explicit(&sl->actor, memory_order_acquire) &&
                 atomic_load_explicit(&sl->gen, memory_order_relaxed) == a.gen;
    pthread_mutex_unlock(lk);
    return alive;
}

/* ---- helpers ---- */

static inline void *
state_of(troupe_actor *a)
{
    return a->state_;
}

static inline troupe_addr
addr_of(const troupe_actor *a)
{
    return (troupe_addr){a->sched->rt->node_id, a->slot, a->gen};
}

troupe_msg *
troupe__internal_msg(uint32_t op, troupe_err err, void *ptr)
{
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, op, NULL, 0) != TROUPE_OK)
        return NULL;
    m->flags = TROUPE_MSG_SYSTEM;
    troupe__msg_of(m)->pflags = TROUPE__MSG_INTERNAL;
    m->err = err;
    m->ptr = ptr;
    return m;
}

static struct actor_ext *
ext_get(troupe_actor *a)
{
    if (a->ext == NULL)
        a->ext = troupe_calloc(1, sizeof(*a->ext));
    return a->ext;
}

static troupe_msg *
pop(troupe_actor *a)
{
    if (a->mhead == NULL) {
        troupe_msg *m =
            atomic_exchange_explicit(&a->inbox, NULL, memory_order_acquire);
        if (m == NULL)
            return NULL;
        /* Newest first on the stack: reverse into FIFO order. */
        troupe_msg *rev = NULL;
        a->mtail = m;
        while (m != NULL) {
            troupe_msg *next = atomic_load_explicit(&troupe__msg_of(m)->next,
                                                    memory_order_relaxed);
            atomic_store_explicit(&troupe__msg_of(m)->next, rev,
                                  memory_order_relaxed);
            rev = m;
            m = next;
        }
        a->mhead = rev;
    }
    troupe_msg *m = a->mhead;
    a->mhead =
        atomic_load_explicit(&troupe__msg_of(m)->next, memory_order_relaxed);
    if (a->mhead == NULL)
        a->mtail = NULL;
    return m;
}

/* Sends a system message from this actor's scheduler; failures only mean
 * the target is gone, which is fine for notifications. */
static void
notify(troupe_actor *a, troupe_addr to, troupe_msg *m)
{
    if (m == NULL)
        return;
    troupe__post(a->sched->rt, a->sched, to, &m, true);
}

static troupe_msg *
down_msg(troupe_addr target, uint32_t kind, troupe_err reason)
{
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, kind, NULL, 0) != TROUPE_OK)
        return NULL;
    m->from = target;
    m->err = reason;
    m->flags = TROUPE_MSG_SYSTEM;
    return m;
}

static void
timer_closed(uv_handle_t *h)
{
    troupe_free(h->data);
}

static void
timers_cancel_all(troupe_actor *a)
{
    if (a->ext == NULL)
        return;
    struct timer *t = a->ext->timers;
    a->ext->timers = NULL;
    while (t != NULL) {
        struct timer *next = t->next;
        t->a = NULL;
        uv_close((uv_handle_t *)&t->h, timer_closed);
        t = next;
    }
}

static void
ask_dead_reply(troupe_actor *a, troupe_msg *req)
{
    troupe_msg *r = NULL;
    if (troupe_msg_create(&r, 0, NULL, 0) != TROUPE_OK)
        return;
    r->corr = req->corr;
    r->from = addr_of(a);
    r->err = TROUPE_EDEAD;
    r->flags = TROUPE_MSG_REPLY | TROUPE_MSG_SYSTEM;
    troupe__post(a->sched->rt, a->sched, req->from, &r, true);
}

static void
run_stop_cbs(troupe_runtime *rt, troupe_addr self, struct actor_ext *ext)
{
    if (ext == NULL)
        return;
    for (uint32_t i = 0; i < ext->n_stop_reqs; i++) {
        struct stop_req *r = ext->stop_reqs[i];
        if (r->cb)
            r->cb(rt, self, r->arg);
        troupe_free(r);
    }
    ext->n_stop_reqs = 0;
}

static void
add_stop_req(troupe_actor *a, struct stop_req *r)
{
    if (r == NULL)
        return;
    struct actor_ext *ext = ext_get(a);
    /* troupe_actor_stop admits one request (ESTATE after); the slots are
     * for that one plus nothing else, but be defensive on allocation. */
    if (ext == NULL || ext->n_stop_reqs == 4) {
        if (r->cb)
            r->cb(a->sched->rt, addr_of(a), r->arg);
        troupe_free(r);
        return;
    }
    ext->stop_reqs[ext->n_stop_reqs++] = r;
}

/* Drains a dying actor's mailbox; see the design note. */
static void
drain_dead(troupe_actor *a, troupe_err reason)
{
    troupe_msg *m;
    /* count is not maintained any more: nothing can reach the actor. */
    while ((m = pop(a)) != NULL) {
        troupe__net_release(a->sched->rt, m);
        if (troupe__msg_cof(m)->pflags & TROUPE__MSG_INTERNAL) {
            if (m->kind == OP_STOP) {
                add_stop_req(a, m->ptr);
            } else if (m->kind == OP_MONITOR) {
                struct monitor *mon = m->ptr;
                notify(a, mon->watcher,
                       down_msg(addr_of(a), mon->down_kind, reason));
                troupe_free(mon);
            }
        } else if (m->corr != 0 && !(m->flags & TROUPE_MSG_REPLY) &&
                   !troupe_addr_is_none(m->from) &&
                   !(m->flags & TROUPE_MSG_SYSTEM)) {
            ask_dead_reply(a, m);
        }
        troupe_msg_destroy(m);
    }
}

static void
check_drained(struct sched *s)
{
    if (atomic_load(&s->rt->phase) != RT_RUNNING &&
        atomic_load(&s->n_actors) == 0)
        troupe__sched_drained(s);
}

/* The actor dies inside its own turn; after this `a` is freed. */
static void
die(troupe_actor *a, troupe_err reason, bool escalate)
{
    struct sched *s = a->sched;
    troupe_runtime *rt = s->rt;
    troupe_addr self = addr_of(a);
    if (a->state == A_RUNNING && a->def->stop)
        a->def->stop(a, state_of(a), reason);
    a->state = A_DEAD;
    timers_cancel_all(a);
    troupe__slot_release(rt, a->slot);
    drain_dead(a, reason);
    struct actor_ext *ext = a->ext;
    if (ext != NULL) {
        struct monitor *mon = ext->monitors;
        while (mon != NULL) {
            struct monitor *next = mon->next;
            notify(a, mon->watcher, down_msg(self, mon->down_kind, reason));
            troupe_free(mon);
            mon = next;
        }
        ext->monitors = NULL;
        if (!troupe_addr_is_none(ext->supervisor)) {
            notify(a, ext->supervisor,
                   troupe__internal_msg(OP_CHILD_DOWN, reason, NULL));
            if (escalate)
                notify(a, ext->supervisor,
                       troupe__internal_msg(OP_CHILD_FAILED, reason, NULL));
        }
    }
    if (a->prev)
        a->prev->next = a->next;
    else if (s->actors == a)
        s->actors = a->next;
    if (a->next)
        a->next->prev = a->prev;
    run_stop_cbs(rt, self, ext);
    if (ext != NULL && ext->arg_free != NULL)
        ext->arg_free(a->arg);
    bool counted = a != rt->proxy;
    troupe_free(ext);
    troupe_free(a);
    if (counted) {
        atomic_fetch_sub(&s->n_actors, 1);
        check_drained(s);
    }
}

static bool
fail(troupe_actor *a, troupe_err reason);

static bool
run_init(troupe_actor *a)
{
    a->state = A_RUNNING;
    if (a->def->init == NULL)
        return true;
    troupe_err e = a->def->init(a, state_of(a), a->arg);
    if (e == TROUPE_OK)
        return true;
    a->state = A_NEW; /* init failed: no stop hook for this incarnation */
    struct actor_ext *ext = a->ext;
    die(a, e, ext && ext->policy != TROUPE_SUPERVISE_STOP);
    return false;
}

/* Returns false when the actor died (and was freed). */
static bool
fail(troupe_actor *a, troupe_err reason)
{
    struct actor_ext *ext = a->ext;
    troupe_restart policy = ext ? ext->policy : TROUPE_SUPERVISE_STOP;
    if (policy == TROUPE_SUPERVISE_RESTART) {
        uint64_t now = uv_now(a->sched->loop);
        if (now - ext->window_start > ext->window_ms) {
            ext->window_start = now;
            ext->restarts = 0;
        }
        if (ext->restarts < ext->max_restarts) {
            ext->restarts++;
            const char *name = a->def->name ? a->def->name : "?";
            troupe_log_fields(
                &a->sched->rt->logger, TROUPE_LOG_WARN, "runtime",
                (troupe_log_field[]){{"actor", name},
                                     {"err", troupe_err_name(reason)}},
                2, "actor %s failed (%s); restarting", name,
                troupe_err_name(reason));
            if (a->def->stop)
                a->def->stop(a, state_of(a), reason);
            timers_cancel_all(a);
            memset(state_of(a), 0, a->def->state_size);
            return run_init(a);
        }
    }
    die(a, reason, policy != TROUPE_SUPERVISE_STOP);
    return false;
}

static void
link_actor(troupe_actor *a)
{
    struct sched *s = a->sched;
    a->prev = NULL;
    a->next = s->actors;
    if (s->actors)
        s->actors->prev = a;
    s->actors = a;
}

static void
stop_now_or_after_children(troupe_actor *a, bool *alive)
{
    if (atomic_load(&a->n_children) > 0 &&
        atomic_load(&a->sched->rt->phase) != RT_RUNNING) {
        a->stop_after_children = 1;
        return;
    }
    die(a, TROUPE_OK, false);
    *alive = false;
}

/* Returns false when the actor died. */
static bool
handle_internal(troupe_actor *a, troupe_msg *m)
{
    bool alive = true;
    switch (m->kind) {
    case OP_INIT:
        link_actor(a);
        troupe_msg_destroy(m);
        if (!run_init(a))
            return false;
        if (atomic_load(&a->sched->rt->phase) != RT_RUNNING &&
            a != a->sched->rt->proxy && atomic_exchange(&a->stopping, 1) == 0)
            troupe__local_enqueue(
                a, troupe__internal_msg(OP_STOP, TROUPE_OK, NULL));
        return true;
    case OP_STOP:
        add_stop_req(a, m->ptr);
        troupe_msg_destroy(m);
        stop_now_or_after_children(a, &alive);
        return alive;
    case OP_MONITOR: {
        struct monitor *mon = m->ptr;
        struct actor_ext *ext = ext_get(a);
        troupe_msg_destroy(m);
        if (ext == NULL) { /* cannot record it: report as if dead */
            notify(a, mon->watcher,
                   down_msg(addr_of(a), mon->down_kind, TROUPE_ENOMEM));
            troupe_free(mon);
            return true;
        }
        mon->next = ext->monitors;
        ext->monitors = mon;
        return true;
    }
    case OP_CHILD_DOWN:
        troupe_msg_destroy(m);
        if (atomic_load(&a->n_children) > 0)
            atomic_fetch_sub(&a->n_children, 1);
        if (a->stop_after_children && atomic_load(&a->n_children) == 0) {
            die(a, TROUPE_OK, false);
            return false;
        }
        return true;
    case OP_CHILD_FAILED:
        troupe_msg_destroy(m);
        return fail(a, TROUPE_EFAILED);
    default:
        troupe_msg_destroy(m);
        return true;
    }
}

/* Returns false when the actor died. */
static bool
handle(troupe_actor *a, troupe_msg *m, int64_t now_ms)
{
    if (troupe__msg_cof(m)->pflags & TROUPE__MSG_INTERNAL)
        return handle_internal(a, m);
    if ((m->flags & TROUPE_MSG_REPLY) &&
        !(troupe__msg_cof(m)->pflags & TROUPE__MSG_MATCHED)) {
        bool consumed = false;
        if (!troupe__ask_match(a->sched, m, &consumed) || consumed) {
            troupe_msg_destroy(m);
            return true;
        }
    }
    if (m->deadline != 0 && !(m->flags & TROUPE_MSG_REPLY) &&
        now_ms > m->deadline) {
        /* Expired before it could be handled: the asker times out. */
        troupe_msg_destroy(m);
        return true;
    }
    if (a->state != A_RUNNING) {
        troupe_msg_destroy(m);
        return true;
    }
    const troupe_actor_def *d = a->def;
    troupe_handler_fn h = m->kind < d->n_handlers ? d->handlers[m->kind] : NULL;
    if (h == NULL)
        h = d->on_unknown;
    troupe_err e = TROUPE_OK;
    if (h != NULL) {
        m->ptr_drop = NULL; /* the handler owns ptr now (msg.h) */
        e = h(a, state_of(a), m);
    }
    troupe_msg_destroy(m);
    if (e != TROUPE_OK)
        return fail(a, e);
    return true;
}

void
troupe__actor_run(troupe_actor *a)
{
    uint32_t batch = a->def->batch ? a->def->batch : 64;
    uint32_t n = 0;
    uint64_t bytes = 0; /* charged bytes taken this turn */
    int64_t now_ms = 0;
    bool have_now = false;
    while (n < batch) {
        troupe_msg *m = pop(a);
        if (m == NULL)
            break;
        n++;
        /* what the message held of the budgets (sched.c) */
        if (troupe__msg_cof(m)->pflags &
            (TROUPE__MSG_CHARGED | TROUPE__MSG_NETHELD)) {
            if (troupe__msg_cof(m)->pflags & TROUPE__MSG_CHARGED)
                bytes += m->body->len;
            troupe__net_release(a->sched->rt, m);
        }
        if (m->deadline != 0 && !have_now) {
            now_ms = troupe_now_ms();
            have_now = true;
        }
        if (!handle(a, m, now_ms))
            return; /* freed */
    }
    /* Bytes before count: once count says the turn is over a sender may
     * find the mailbox empty, and must then find its bytes free too. */
    if (bytes > 0)
        atomic_fetch_sub_explicit(&a->bytes, bytes, memory_order_relaxed);
    uint32_t prev =
        atomic_fetch_sub_explicit(&a->count, n, memory_order_acq_rel);
    if (prev - n > 0)
        troupe__runq_push(a->sched, a);
}

/* ---- spawn and stop ---- */

static struct sched *
pick_sched(troupe_runtime *rt, const troupe_spawn_opts *o)
{
    if (o != NULL && !troupe_addr_is_none(o->near) &&
        o->near.node == rt->node_id) {
        struct slot *sl = troupe__slot_get(rt, o->near.slot);
        if (sl != NULL && atomic_load(&sl->actor) != NULL &&
            atomic_load(&sl->gen) == o->near.gen)
            return &rt->scheds[atomic_load(&sl->sched) % rt->n_sched];
    }
    if (o != NULL && o->scheduler >= 0)
        return &rt->scheds[o->scheduler];
    return &rt->scheds[atomic_fetch_add(&rt->rr, 1) % rt->n_sched];
}

static void
ctl_check_drained(struct sched *s, void *arg)
{
    (void)arg;
    check_drained(s);
}

/* Adds a child to a live supervisor; false if the supervisor is dead. */
static bool
adopt_child(troupe_runtime *rt, troupe_addr sup)
{
    struct slot *sl = troupe__slot_get(rt, sup.slot);
    if (sl == NULL || sup.node != rt->node_id)
        return false;
    pthread_mutex_t *lk = &rt->stripes[sup.slot % SLOT_STRIPES];
    pthread_mutex_lock(lk);
    troupe_actor *p = atomic_load(&sl->actor);
    bool ok = p && atomic_load(&sl->gen) == sup.gen;
    if (ok)
        atomic_fetch_add(&p->n_children, 1);
    pthread_mutex_unlock(lk);
    return ok;
}

troupe_err
troupe__spawn(troupe_runtime *rt, const troupe_actor_def *def,
              const troupe_spawn_opts *o, troupe_addr *out, bool counted)
{
    if (rt == NULL || def == NULL || out == NULL)
        return TROUPE_EINVAL;
    if ((def->n_handlers > 0 && def->handlers == NULL) ||
        def->state_size > (1u << 30))
        return TROUPE_EINVAL;
    if (o != NULL) {
        if (o->scheduler >= (int)rt->n_sched || o->scheduler < -1 ||
            (unsigned)o->policy > TROUPE_SUPERVISE_ESCALATE)
            return TROUPE_EINVAL;
        if (o->name != NULL && (o->name[0] == '\0' || strlen(o->name) > 255))
            return TROUPE_EINVAL;
    }
    struct sched *s = pick_sched(rt, o);
    atomic_fetch_add(&s->n_actors, counted ? 1 : 0);
    troupe_err e = TROUPE_OK;
    if (counted && atomic_load(&rt->phase) != RT_RUNNING) {
        e = TROUPE_ECLOSED;
        goto fail_count;
    }
    size_t st = ((size_t)def->state_size + 15u) & ~(size_t)15u;
    troupe_actor *a = troupe_calloc(1, sizeof(*a) + st);
    if (a == NULL) {
        e = TROUPE_ENOMEM;
        goto fail_count;
    }
    a->def = def;
    a->sched = s;
    a->arg = o ? o->arg : NULL;
    a->byte_cap = def->mailbox_bytes ? def->mailbox_bytes : rt->mailbox_bytes;
    bool supervised = o && !troupe_addr_is_none(o->supervisor);
    if (supervised ||
        (o && (o->policy != TROUPE_SUPERVISE_STOP || o->arg_free != NULL))) {
        struct actor_ext *ext = ext_get(a);
        if (ext == NULL) {
            e = TROUPE_ENOMEM;
            goto fail_actor;
        }
        ext->supervisor = supervised ? o->supervisor : TROUPE_ADDR_NONE;
        ext->policy = o->policy;
        ext->max_restarts = o->max_restarts ? o->max_restarts : 3;
        ext->window_ms = o->restart_window_ms ? o->restart_window_ms : 5000;
        ext->arg_free = o->arg_free;
    }
    troupe_msg *init = troupe__internal_msg(OP_INIT, TROUPE_OK, NULL);
    if (init == NULL) {
        e = TROUPE_ENOMEM;
        goto fail_actor;
    }
    e = slot_alloc(rt, &a->slot, &a->gen);
    if (e != TROUPE_OK) {
        troupe_msg_destroy(init);
        goto fail_actor;
    }
    troupe_addr self = {rt->node_id, a->slot, a->gen};
    if (o != NULL && o->name != NULL) {
        e = troupe_registry_add(rt, o->name, self);
        if (e != TROUPE_OK) {
            troupe_msg_destroy(init);
            troupe__slot_release(rt, a->slot);
            goto fail_actor;
        }
    }
    if (supervised && !adopt_child(rt, o->supervisor)) {
        if (o->name != NULL)
            troupe_registry_remove(rt, o->name);
        troupe_msg_destroy(init);
        troupe__slot_release(rt, a->slot);
        e = TROUPE_EDEAD;
        goto fail_actor;
    }
    atomic_init(&a->count, 1);
    atomic_store_explicit(&a->inbox, init, memory_order_relaxed);
    struct slot *sl = troupe__slot_get(rt, a->slot);
    atomic_store(&sl->sched, s->idx);
    atomic_store(&sl->actor, a);
    *out = self;
    /* We own the 0 -> 1 transition (the INIT message): queue it. */
    troupe_actor *head = atomic_load(&s->inject);
    do {
        atomic_store_explicit(&a->qnext, head, memory_order_relaxed);
    } while (!atomic_compare_exchange_weak(&s->inject, &head, a));
    troupe__sched_wake(s);
    return TROUPE_OK;

fail_actor:
    troupe_free(a->ext);
    troupe_free(a);
fail_count:
    if (counted) {
        atomic_fetch_sub(&s->n_actors, 1);
        if (atomic_load(&rt->phase) != RT_RUNNING)
            troupe__ctl(s, ctl_check_drained, NULL);
    }
    return e;
}

troupe_err
troupe_actor_spawn(troupe_runtime *rt, const troupe_actor_def *def,
                   const troupe_spawn_opts *opts, troupe_addr *out)
{
    return troupe__spawn(rt, def, opts, out, true);
}

troupe_err
troupe_actor_stop(troupe_runtime *rt, troupe_addr a, troupe_stop_cb cb,
                  void *arg)
{
    if (rt == NULL || troupe_addr_is_none(a) || a.node != rt->node_id)
        return TROUPE_EINVAL;
    struct slot *sl = troupe__slot_get(rt, a.slot);
    if (sl == NULL)
        return TROUPE_EDEAD;
    pthread_mutex_t *lk = &rt->stripes[a.slot % SLOT_STRIPES];
    pthread_mutex_lock(lk);
    troupe_actor *act = atomic_load(&sl->actor);
    if (act == NULL || atomic_load(&sl->gen) != a.gen) {
        pthread_mutex_unlock(lk);
        return TROUPE_EDEAD;
    }
    if (atomic_exchange(&act->stopping, 1) != 0) {
        pthread_mutex_unlock(lk);
        return TROUPE_ESTATE;
    }
    pthread_mutex_unlock(lk);
    struct stop_req *r = NULL;
    if (cb != NULL) {
        r = troupe_malloc(sizeof(*r));
        if (r == NULL)
            return TROUPE_ENOMEM;
        r->cb = cb;
        r->arg = arg;
    }
    troupe_msg *m = troupe__internal_msg(OP_STOP, TROUPE_OK, r);
    if (m == NULL) {
        troupe_free(r);
        return TROUPE_ENOMEM;
    }
    troupe_err e = troupe__post(rt, NULL, a, &m, true);
    if (e != TROUPE_OK)
        troupe_free(r); /* died meanwhile: cb never fires */
    return e;
}

void
troupe__shutdown_sched(struct sched *s, void *arg)
{
    (void)arg;
    for (troupe_actor *a = s->actors; a != NULL; a = a->next) {
        if (a == s->rt->proxy)
            continue;
        if (atomic_load(&a->n_children) > 0) {
            a->stop_after_children = 1;
            continue;
        }
        if (atomic_exchange(&a->stopping, 1) == 0)
            troupe__local_enqueue(
                a, troupe__internal_msg(OP_STOP, TROUPE_OK, NULL));
    }
    check_drained(s);
}

/* ---- calls on the actor's own thread ---- */

troupe_addr
troupe_self(const troupe_actor *self)
{
    return self ? addr_of(self) : TROUPE_ADDR_NONE;
}

troupe_runtime *
troupe_actor_runtime(const troupe_actor *self)
{
    return self ? self->sched->rt : NULL;
}

uv_loop_t *
troupe_actor_loop(const troupe_actor *self)
{
    return self ? self->sched->loop : NULL;
}

void
troupe_self_stop(troupe_actor *self)
{
    if (self == NULL || atomic_exchange(&self->stopping, 1) != 0)
        return;
    troupe_msg *m = troupe__internal_msg(OP_STOP, TROUPE_OK, NULL);
    if (m != NULL)
        troupe__local_enqueue(self, m);
}

troupe_err
troupe_send(troupe_actor *self, troupe_addr to, troupe_msg **m)
{
    if (m == NULL || *m == NULL)
        return TROUPE_EINVAL;
    if (self == NULL) {
        troupe_msg_destroy(*m);
        *m = NULL;
        return TROUPE_EINVAL;
    }
    (*m)->from = addr_of(self);
    (*m)->flags &= ~(uint32_t)TROUPE_MSG_SYSTEM;
    troupe__msg_of(*m)->pflags = 0;
    return troupe__post(self->sched->rt, self->sched, to, m, false);
}

troupe_err
troupe_ask(troupe_actor *self, troupe_addr to, troupe_msg **m,
           uint32_t timeout_ms, uint32_t reply_kind, uint64_t *corr)
{
    if (m == NULL || *m == NULL)
        return TROUPE_EINVAL;
    if (self == NULL || timeout_ms == 0) {
        troupe_msg_destroy(*m);
        *m = NULL;
        return TROUPE_EINVAL;
    }
    troupe_runtime *rt = self->sched->rt;
    uint64_t c = troupe__corr_next(self->sched);
    troupe_msg *msg = *m;
    msg->corr = c;
    msg->deadline = troupe_now_ms() + timeout_ms;
    msg->from = addr_of(self);
    msg->flags &= ~(uint32_t)(TROUPE_MSG_SYSTEM | TROUPE_MSG_REPLY);
    troupe__msg_of(msg)->pflags = 0;
    troupe_err e = troupe__ask_register(self->sched, c, addr_of(self), to,
                                        reply_kind, timeout_ms, NULL, NULL);
    if (e != TROUPE_OK) {
        troupe_msg_destroy(msg);
        *m = NULL;
        return e;
    }
    e = troupe__post(rt, self->sched, to, m, false);
    if (e != TROUPE_OK) {
        troupe__ask_unregister(self->sched, c);
        return e;
    }
    if (corr != NULL)
        *corr = c;
    return TROUPE_OK;
}

troupe_err
troupe_reply(troupe_actor *self, const troupe_msg *req, troupe_msg **reply)
{
    if (reply == NULL || *reply == NULL)
        return TROUPE_EINVAL;
    if (self == NULL || req == NULL || req->corr == 0 ||
        troupe_addr_is_none(req->from) || (req->flags & TROUPE_MSG_REPLY)) {
        troupe_msg_destroy(*reply);
        *reply = NULL;
        return TROUPE_EINVAL;
    }
    troupe_msg *r = *reply;
    r->corr = req->corr;
    r->from = addr_of(self);
    r->flags = TROUPE_MSG_REPLY;
    troupe__msg_of(r)->pflags = 0;
    return troupe__post(self->sched->rt, self->sched, req->from, reply, true);
}

troupe_err
troupe_reply_error(troupe_actor *self, const troupe_msg *req, troupe_err err)
{
    if (self == NULL || req == NULL)
        return TROUPE_EINVAL;
    if (req->corr == 0 || (req->flags & TROUPE_MSG_REPLY))
        return TROUPE_OK; /* a plain send or a reply: nobody to tell */
    troupe_msg *r = NULL;
    troupe_err e = troupe_msg_create(&r, 0, NULL, 0);
    if (e != TROUPE_OK)
        return e;
    r->err = err;
    return troupe_reply(self, req, &r);
}

static void
on_timer(uv_timer_t *h)
{
    struct timer *t = h->data;
    troupe_actor *a = t->a;
    if (a == NULL)
        return;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, t->kind, NULL, 0) == TROUPE_OK) {
        m->corr = t->id;
        m->flags = TROUPE_MSG_SYSTEM;
        troupe__local_enqueue(a, m);
    }
    if (!t->repeat) {
        struct timer **pp = &a->ext->timers;
        while (*pp != t)
            pp = &(*pp)->next;
        *pp = t->next;
        t->a = NULL;
        uv_close((uv_handle_t *)&t->h, timer_closed);
    }
}

troupe_err
troupe_timer_start(troupe_actor *self, uint32_t kind, uint64_t after_ms,
                   uint64_t repeat_ms, uint64_t *id)
{
    if (self == NULL)
        return TROUPE_EINVAL;
    struct actor_ext *ext = ext_get(self);
    struct timer *t = troupe_malloc(sizeof(*t));
    if (ext == NULL || t == NULL) {
        troupe_free(t);
        return TROUPE_ENOMEM;
    }
    uv_timer_init(self->sched->loop, &t->h);
    t->h.data = t;
    t->a = self;
    t->id = atomic_fetch_add(&self->sched->rt->next_timer, 1) + 1;
    t->kind = kind;
    t->repeat = repeat_ms != 0;
    t->next = ext->timers;
    ext->timers = t;
    uv_timer_start(&t->h, on_timer, after_ms, repeat_ms);
    if (id != NULL)
        *id = t->id;
    return TROUPE_OK;
}

troupe_err
troupe_timer_cancel(troupe_actor *self, uint64_t id)
{
    if (self == NULL)
        return TROUPE_EINVAL;
    if (self->ext == NULL)
        return TROUPE_ENOENT;
    for (struct timer **pp = &self->ext->timers; *pp; pp = &(*pp)->next) {
        struct timer *t = *pp;
        if (t->id == id) {
            *pp = t->next;
            t->a = NULL;
            uv_close((uv_handle_t *)&t->h, timer_closed);
            return TROUPE_OK;
        }
    }
    return TROUPE_ENOENT;
}

troupe_err
troupe_monitor(troupe_actor *self, troupe_addr target, uint32_t down_kind)
{
    if (self == NULL || troupe_addr_is_none(target))
        return TROUPE_EINVAL;
    troupe_runtime *rt = self->sched->rt;
    if (target.node != rt->node_id || troupe_addr_eq(target, addr_of(self)))
        return TROUPE_EINVAL;
    struct monitor *mon = troupe_malloc(sizeof(*mon));
    if (mon == NULL)
        return TROUPE_ENOMEM;
    mon->next = NULL;
    mon->watcher = addr_of(self);
    mon->down_kind = down_kind;
    troupe_msg *m = troupe__internal_msg(OP_MONITOR, TROUPE_OK, mon);
    if (m == NULL) {
        troupe_free(mon);
        return TROUPE_ENOMEM;
    }
    troupe_err e = troupe__post(rt, self->sched, target, &m, true);
    if (e == TROUPE_EDEAD) {
        troupe_free(mon);
        troupe_msg *d = down_msg(target, down_kind, TROUPE_EDEAD);
        if (d == NULL)
            return TROUPE_ENOMEM;
        troupe__local_enqueue(self, d);
        return TROUPE_OK;
    }
    if (e != TROUPE_OK)
        troupe_free(mon);
    return e;
}
