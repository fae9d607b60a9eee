/*
 * The proxy actor of a host actor: each message it receives becomes a
 * task of kind TROUPE_TASK_ACTOR on the target, and each task's outcome
 * answers its ask (troupe/hostactor.h has the header and the mapping).
 *
 * Answers go straight from the thread that settled the task (a host's
 * reply, the HOST lane after a callback, the dispatch's deadline thread,
 * a stop) through troupe_runtime_reply, which any thread may call: the
 * asker hears the outcome without a hop through the proxy's mailbox, and
 * a proxy that is gone (stopped, or stopped by the runtime's shutdown)
 * still answers what was in flight.
 *
 * Credit. The target's credit bounds the tasks in flight; the proxy takes
 * one per message. Without one, messages wait in the proxy's own FIFO,
 * bounded in bytes, and the proxy waits on the target (troupe__credit_wait):
 * the kick, on the thread that freed a credit, sends the proxy one message
 * (kick_pending keeps it to one in flight), which carries ptr so that the
 * mailbox bounds never refuse it; the proxy then submits until the credit
 * is out again. Only the head of the FIFO takes a credit, so messages keep
 * their order. A take refused because the target is stopping queues no
 * wait and no kick would come: the proxy then looks the target up (a
 * stopping target is off the registry) and refuses what waits.
 */
#include <string.h>

#include "hostactor_int.h"
#include "troupe/alloc.h"

/* The kick's kind; a message of this kind is the kick only when its ptr
 * is the host actor itself (no peer can set ptr, and only the kick knows
 * it), otherwise it is a user message like any other. */
#define HA_KICK UINT32_MAX

static void
put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* An answer to the ask (from, corr); body (len bytes) is copied. */
static void
answer(troupe_host_actor *ha, troupe_addr from, uint64_t corr, troupe_err err,
       const void *body, size_t len)
{
    troupe_body *b = NULL;
    if (len > 0 && troupe_body_copy(body, len, &b) != TROUPE_OK)
        err = err == TROUPE_OK ? TROUPE_EUNKNOWN : err; /* acted, unsaid */
    if (troupe_runtime_reply(ha->rt, from, corr, err, &b) != TROUPE_OK)
        troupe__ha_count(&ha->st_reply_lost, 1);
}

/* Refuses a message that never became a task: an ask is answered err
 * (counted by it), a send dropped. */
static void
refuse(troupe_host_actor *ha, troupe_addr from, uint64_t corr, troupe_err err)
{
    if (corr == 0) {
        troupe__ha_count(&ha->st_dropped, 1);
        return;
    }
    if (err == TROUPE_ECLOSED)
        troupe__ha_count(&ha->st_closed, 1);
    else if (err == TROUPE_EBUSY)
        troupe__ha_count(&ha->st_busy, 1);
    answer(ha, from, corr, err, NULL, 0);
}

typedef struct ha_task {
    troupe_host_actor *ha;
    troupe_addr from;
    uint64_t corr;
} ha_task;

/* The task's outcome, once (troupe__task_done_fn), on the thread that
 * settled it. */
static bool
task_done(void *arg, uint64_t id, troupe_outcome outcome, const uint8_t *body,
          size_t len)
{
    (void)id;
    ha_task *k = arg;
    troupe_host_actor *ha = k->ha;
    if (k->corr == 0) {
        troupe__ha_count(&ha->st_sends_done, 1);
    } else if (outcome == TROUPE_OUTCOME_SUCCESS) {
        troupe__ha_count(&ha->st_replied, 1);
        answer(ha, k->from, k->corr, TROUPE_OK, body, len);
    } else if (outcome == TROUPE_OUTCOME_FAILURE) {
        troupe__ha_count(&ha->st_failed, 1);
        answer(ha, k->from, k->corr, TROUPE_EFAILED, body, len);
    } else {
        troupe__ha_count(&ha->st_unknown, 1);
        answer(ha, k->from, k->corr, TROUPE_EUNKNOWN, NULL, 0);
    }
    troupe_free(k);
    atomic_fetch_sub_explicit(&ha->st_in_flight, 1, memory_order_relaxed);
    troupe__ha_done(ha);
    troupe__ha_release(ha);
    return false;
}

/* What a refused submit means to the asker: the target stopping or its
 * host closed is ECLOSED (never delivered); EBUSY and ENOMEM as they are. */
static troupe_err
submit_err(troupe_err e)
{
    return e == TROUPE_ESTATE || e == TROUPE_ECLOSED ? TROUPE_ECLOSED : e;
}

/* Submits one message as a task under a credit taken (given back by the
 * dispatch when the submit fails). */
static void
submit(troupe_host_actor *ha, uint32_t kind, troupe_addr from, uint64_t corr,
       int64_t deadline, const void *body, size_t len)
{
    uint8_t h[TROUPE_HOST_ACTOR_HEADER_LEN];
    put32(h, kind);
    put32(h + 4, corr != 0 ? TROUPE_HOST_ACTOR_ASK : 0);
    put32(h + 8, from.node);
    put32(h + 12, from.slot);
    put32(h + 16, from.gen);
    put32(h + 20, ha->tag);
    put32(h + 24, (uint32_t)(uint64_t)deadline);
    put32(h + 28, (uint32_t)((uint64_t)deadline >> 32));
    ha_task *k = troupe_malloc(sizeof(*k));
    if (k == NULL) {
        troupe__target_credit_give(ha->target);
        refuse(ha, from, corr, TROUPE_ENOMEM);
        return;
    }
    *k = (ha_task){.ha = ha, .from = from, .corr = corr};
    /* the proxy's share keeps running above 0 here */
    atomic_fetch_add(&ha->running, 1);
    atomic_fetch_add(&ha->refs, 1);
    atomic_fetch_add_explicit(&ha->st_in_flight, 1, memory_order_relaxed);
    troupe__task_in in = {.kind = TROUPE_TASK_ACTOR,
                          .attempt = 1,
                          .header = h,
                          .header_len = sizeof(h),
                          .body = body,
                          .body_len = len};
    troupe_err e = troupe__target_submit(ha->target, &in, task_done, k, NULL);
    if (e == TROUPE_OK) {
        troupe__ha_count(&ha->st_submitted, 1);
        return;
    }
    atomic_fetch_sub_explicit(&ha->st_in_flight, 1, memory_order_relaxed);
    troupe_free(k);
    troupe__ha_done(ha);
    troupe__ha_release(ha);
    refuse(ha, from, corr, submit_err(e));
}

static ha_entry *
entry_pop(troupe_host_actor *ha)
{
    ha_entry *e = ha->head;
    ha->head = e->next;
    if (ha->head == NULL)
        ha->tail = NULL;
    atomic_fetch_sub_explicit(&ha->st_queued, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&ha->st_queued_bytes, e->cost,
                              memory_order_relaxed);
    return e;
}

static void
entry_free(ha_entry *e)
{
    troupe_body_release(e->body);
    troupe_free(e);
}

/* Refuses everything that waits with err. */
static void
flush(troupe_host_actor *ha, troupe_err err)
{
    while (ha->head != NULL) {
        ha_entry *e = entry_pop(ha);
        refuse(ha, e->from, e->corr, err);
        entry_free(e);
    }
}

void
troupe__ha_proxy_gone(void *arg)
{
    troupe_host_actor *ha = arg;
    flush(ha, TROUPE_ECLOSED);
    troupe__ha_done(ha);
    troupe__ha_release(ha);
}

/* A take was refused: true when no kick will come because the target is
 * stopping (or gone): it is no longer the one registered under its name. */
static bool
target_gone(troupe_host_actor *ha)
{
    troupe_target *t =
        troupe__target_find(ha->rt, ha->target_name, ha->target_len);
    troupe__target_release(t);
    return t != ha->target;
}

/* Submits what waits, in order, while credit lasts. */
static void
drain(troupe_host_actor *ha)
{
    int64_t now = troupe_now_ms();
    while (ha->head != NULL) {
        if (atomic_load(&ha->stopping)) {
            flush(ha, TROUPE_ECLOSED);
            return;
        }
        ha_entry *e = ha->head;
        if (e->deadline != 0 && e->deadline < now) {
            entry_pop(ha);
            troupe__ha_count(e->corr ? &ha->st_expired : &ha->st_dropped, 1);
            entry_free(e);
            continue;
        }
        if (!troupe__target_credit_take(ha->target, &ha->wait)) {
            if (target_gone(ha))
                flush(ha, TROUPE_ECLOSED);
            return;
        }
        entry_pop(ha);
        submit(ha, e->kind, e->from, e->corr, e->deadline,
               e->body ? troupe_body_data(e->body) : NULL,
               e->body ? troupe_body_len(e->body) : 0);
        entry_free(e);
    }
}

/* Queues a message for credit within the byte bound, or refuses it. */
static void
enqueue(troupe_host_actor *ha, const troupe_msg *m)
{
    size_t len = troupe_msg_len(m);
    uint64_t cost = len + TROUPE_HOST_ACTOR_ENTRY_BYTES;
    uint64_t used =
        atomic_load_explicit(&ha->st_queued_bytes, memory_order_relaxed);
    if (used + cost > ha->queue_max) {
        refuse(ha, m->from, m->corr, TROUPE_EBUSY);
        return;
    }
    ha_entry *e = troupe_calloc(1, sizeof(*e));
    troupe_err err = e == NULL ? TROUPE_ENOMEM : TROUPE_OK;
    if (e != NULL && m->body != NULL)
        e->body = troupe_body_retain(m->body);
    else if (e != NULL && len > 0) /* inline bytes: copied */
        err = troupe_body_copy(troupe_msg_data(m), len, &e->body);
    if (err != TROUPE_OK) {
        troupe_free(e);
        refuse(ha, m->from, m->corr, err);
        return;
    }
    e->kind = m->kind;
    e->from = m->from;
    e->corr = m->corr;
    e->deadline = m->deadline;
    e->cost = cost;
    if (ha->tail != NULL)
        ha->tail->next = e;
    else
        ha->head = e;
    ha->tail = e;
    troupe__ha_count(&ha->st_queued, 1);
    troupe__ha_count(&ha->st_queued_bytes, cost);
}

static void
on_user(troupe_host_actor *ha, const troupe_msg *m)
{
    troupe__ha_count(&ha->st_received, 1);
    size_t len = troupe_msg_len(m);
    if (atomic_load(&ha->stopping)) {
        refuse(ha, m->from, m->corr, TROUPE_ECLOSED);
        return;
    }
    if (len > TROUPE_TASK_BODY_MAX) {
        refuse(ha, m->from, m->corr, TROUPE_ETOOBIG);
        return;
    }
    if (ha->head != NULL && !atomic_load(&ha->kick_pending))
        drain(ha); /* a kick that could not be sent */
    if (ha->head == NULL) {
        if (troupe__target_credit_take(ha->target, &ha->wait)) {
            submit(ha, m->kind, m->from, m->corr, m->deadline,
                   troupe_msg_data(m), len);
            return;
        }
        if (target_gone(ha)) {
            refuse(ha, m->from, m->corr, TROUPE_ECLOSED);
            return;
        }
    }
    enqueue(ha, m);
}

/* Every kind comes here (the definition has no handler table). */
static troupe_err
on_msg(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    troupe_host_actor *ha = *(troupe_host_actor **)state;
    if (m->kind == HA_KICK && m->ptr == ha) {
        atomic_store(&ha->kick_pending, false);
        drain(ha);
        troupe__ha_release(ha); /* the kick message's */
        return TROUPE_OK;
    }
    if (m->flags & TROUPE_MSG_REPLY)
        return TROUPE_OK; /* the proxy asks nothing: a stray reply */
    on_user(ha, m);
    return TROUPE_OK;
}

static void
kick_drop(void *ptr)
{
    troupe_host_actor *ha = ptr;
    atomic_store(&ha->kick_pending, false);
    troupe__ha_release(ha);
}

/* The credit wait's kick, on the thread that freed a credit (or stopped
 * the target): one message to the proxy. Never blocks. */
static void
kick(void *arg)
{
    troupe_host_actor *ha = arg;
    if (atomic_exchange(&ha->kick_pending, true))
        return;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, HA_KICK, NULL, 0) != TROUPE_OK) {
        atomic_store(&ha->kick_pending, false);
        return;
    }
    atomic_fetch_add(&ha->refs, 1);
    m->ptr = ha;
    m->ptr_drop = kick_drop;
    (void)troupe_runtime_send(ha->rt, ha->self, &m); /* a failed send drops
                                                         it: kick_drop */
}

void
troupe__ha_wait_init(troupe_host_actor *ha)
{
    ha->wait.kick = kick;
    ha->wait.arg = ha;
}

static troupe_err
proxy_init(troupe_actor *self, void *state, void *arg)
{
    troupe_host_actor *ha = arg;
    ha->self = troupe_self(self);
    *(troupe_host_actor **)state = ha;
    return TROUPE_OK;
}

const troupe_actor_def troupe__ha_proxy_def = {
    .name = "troupe.hostactor",
    .state_size = sizeof(troupe_host_actor *),
    .init = proxy_init,
    .on_unknown = on_msg,
    .remote_kinds = UINT64_MAX,
};
