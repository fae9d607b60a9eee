/*
 * Asks in flight and giving up. Every ask this node sends to a peer is
 * remembered in its link's table (by corr) until the reply comes back, so
 * that when the peer turns out to be unreachable or restarted, or the
 * frame holding the ask is lost before nng took it, its asker gets an
 * error reply at once instead of waiting for its deadline. Tracking is
 * best effort: an ask that cannot be remembered (no memory) still goes
 * out and ends at its deadline. The table is under l->mu unless a
 * function says otherwise.
 */
#include "transport_int.h"

static void
reply_error(troupe_node *n, troupe_addr asker, troupe_addr target,
            uint64_t corr, troupe_err err)
{
    if (asker.node != n->id)
        return;
    troupe_msg *r = NULL;
    if (troupe_msg_create(&r, 0, NULL, 0) != TROUPE_OK)
        return;
    r->flags = TROUPE_MSG_REPLY;
    r->from = target;
    r->to = asker;
    r->corr = corr;
    r->err = err;
    atomic_fetch_add(&n->error_replies, 1);
    troupe_runtime_deliver(n->rt, &r);
}

/* Gives up on a list of messages threaded through m->next. Their askers
 * are answered through the asks table, not here. */
void
troupe__give_up(troupe_node *n, troupe_msg *list)
{
    while (list != NULL) {
        troupe_msg *next = get_next(list);
        set_next(list, NULL);
        atomic_fetch_add(&n->gave_up, 1);
        troupe_msg_destroy(list);
        list = next;
    }
}

static uint32_t
ask_hash(uint64_t corr, uint32_t cap)
{
    corr ^= corr >> 33;
    corr *= 0xff51afd7ed558ccdull;
    corr ^= corr >> 33;
    return (uint32_t)(corr & (cap - 1));
}

void
troupe__asks_insert(struct link *l, struct ask_ent *e)
{
    if (l->n_asks >= l->asks_cap) {
        uint32_t cap = l->asks_cap ? l->asks_cap * 2 : 64;
        struct ask_ent **t = troupe_calloc(cap, sizeof(*t));
        if (t != NULL) {
            for (uint32_t i = 0; i < l->asks_cap; i++) {
                struct ask_ent *x = l->asks[i];
                while (x != NULL) {
                    struct ask_ent *next = x->next;
                    uint32_t h = ask_hash(x->corr, cap);
                    x->next = t[h];
                    t[h] = x;
                    x = next;
                }
            }
            troupe_free(l->asks);
            l->asks = t;
            l->asks_cap = cap;
        }
    }
    if (l->asks_cap == 0) {
        troupe_free(e); /* tracking is best effort */
        return;
    }
    uint32_t h = ask_hash(e->corr, l->asks_cap);
    e->next = l->asks[h];
    l->asks[h] = e;
    l->n_asks++;
    if (e->deadline < l->asks_min_deadline)
        l->asks_min_deadline = e->deadline;
}

/* Remembers m if it is an ask from this node. */
void
troupe__asks_add(troupe_node *n, struct link *l, const troupe_msg *m)
{
    if (!is_ask(m) || m->from.node != n->id)
        return;
    struct ask_ent *e = troupe_malloc(sizeof(*e));
    if (e == NULL)
        return;
    *e = (struct ask_ent){NULL, m->corr, m->from, m->to,
                          m->deadline > 0 ? m->deadline : INT64_MAX};
    troupe__asks_insert(l, e);
}

/* Removes and returns the entry for corr (asker must match), or NULL. */
struct ask_ent *
troupe__asks_take(struct link *l, uint64_t corr, troupe_addr asker)
{
    if (l->asks_cap == 0)
        return NULL;
    struct ask_ent **pp = &l->asks[ask_hash(corr, l->asks_cap)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        struct ask_ent *e = *pp;
        if (e->corr == corr && troupe_addr_eq(e->asker, asker)) {
            *pp = e->next;
            l->n_asks--;
            e->next = NULL;
            return e;
        }
    }
    return NULL;
}

/* Unlinks the selected entries onto *out. */
void
troupe__asks_drain(struct link *l, enum asks_which which, int64_t wall,
                   struct ask_ent **out)
{
    int64_t min = INT64_MAX;
    for (uint32_t i = 0; i < l->asks_cap; i++) {
        struct ask_ent **pp = &l->asks[i];
        while (*pp != NULL) {
            struct ask_ent *e = *pp;
            bool take = which == ASKS_ALL ||
                        (which == ASKS_EXPIRED && e->deadline <= wall) ||
                        (which == ASKS_NOT_NODE_SLOT &&
                         e->target.slot != TROUPE_NODE_SLOT);
            if (take) {
                *pp = e->next;
                e->next = *out;
                *out = e;
                l->n_asks--;
            } else {
                if (e->deadline < min)
                    min = e->deadline;
                pp = &e->next;
            }
        }
    }
    l->asks_min_deadline = min;
}

/* Answers and frees drained entries. No lock held. */
void
troupe__asks_fail(troupe_node *n, struct ask_ent *list, troupe_err err)
{
    while (list != NULL) {
        struct ask_ent *next = list->next;
        reply_error(n, list->asker, list->target, list->corr, err);
        troupe_free(list);
        list = next;
    }
}

/* The frame holding these asks never reached nng's pipe: they were not
 * delivered, so their askers can be told now. */
void
troupe__fail_tickets(struct link *l, troupe_err err)
{
    struct ask_ent *list = NULL;
    pthread_mutex_lock(&l->mu);
    for (uint32_t i = 0; i < l->ntix; i++) {
        struct ask_ent *e =
            troupe__asks_take(l, l->tix[i].corr, l->tix[i].asker);
        if (e != NULL) {
            e->next = list;
            list = e;
        }
    }
    pthread_mutex_unlock(&l->mu);
    l->ntix = 0;
    troupe__asks_fail(l->node, list, err);
}
