/*
 * Outstanding asks of one scheduler: a hash table by correlation id and a
 * binary min-heap by deadline with one uv_timer armed for the earliest.
 * Touched only on the scheduler's thread (asks are registered by the asking
 * actor's thread, replies are matched in the asker's turn, timeouts fire on
 * the same loop), so no locks.
 *
 * Exactly once: an entry leaves the table either when its reply is matched
 * or when its deadline fires, never both; a reply that finds no entry is
 * late and dropped.
 *
 * Matching. Correlation ids are unguessable and unique per runtime (ids.c),
 * and a reply must also name the asker. A reply from another node (NET)
 * must moreover come from the node the ask was sent to, as the transport
 * names the link it arrived on in from.node: a peer that learned or
 * guessed an id still cannot answer an ask sent to someone else. Replies
 * made on this node (actors, workers, the storage writer, which may
 * answer with from = NONE) need only the asker and the id: nothing local
 * is hostile. A reply that fails the check leaves the entry in place, so
 * the real reply (or the deadline) still completes the ask.
 */
#include <string.h>

#include "rt.h"

struct pending {
    struct pending *next; /* hash chain */
    uint64_t corr;
    uint64_t deadline; /* uv_now() ms */
    troupe_addr asker;
    troupe_addr target; /* where the ask went */
    uint32_t reply_kind;
    uint32_t heap_idx;
    troupe_reply_cb cb; /* host ask (proxy) when non-NULL */
    void *cb_arg;
};

static uint32_t
hash_corr(uint64_t c, uint32_t cap)
{
    c ^= c >> 33;
    c *= 0xff51afd7ed558ccdull;
    c ^= c >> 33;
    return (uint32_t)(c & (cap - 1));
}

static troupe_err
table_grow(struct sched *s)
{
    uint32_t cap = s->ptab_cap ? s->ptab_cap * 2 : 64;
    struct pending **t = troupe_calloc(cap, sizeof(*t));
    if (t == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t i = 0; i < s->ptab_cap; i++) {
        struct pending *p = s->ptab[i];
        while (p) {
            struct pending *next = p->next;
            uint32_t h = hash_corr(p->corr, cap);
            p->next = t[h];
            t[h] = p;
            p = next;
        }
    }
    troupe_free(s->ptab);
    s->ptab = t;
    s->ptab_cap = cap;
    return TROUPE_OK;
}

static void
heap_swap(struct sched *s, uint32_t i, uint32_t j)
{
    struct pending *t = s->heap[i];
    s->heap[i] = s->heap[j];
    s->heap[j] = t;
    s->heap[i]->heap_idx = i;
    s->heap[j]->heap_idx = j;
}

static void
heap_up(struct sched *s, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (s->heap[p]->deadline <= s->heap[i]->deadline)
            break;
        heap_swap(s, i, p);
        i = p;
    }
}

static void
heap_down(struct sched *s, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->heap_n && s->heap[l]->deadline < s->heap[m]->deadline)
            m = l;
        if (r < s->heap_n && s->heap[r]->deadline < s->heap[m]->deadline)
            m = r;
        if (m == i)
            return;
        heap_swap(s, i, m);
        i = m;
    }
}

static void
heap_remove(struct sched *s, struct pending *p)
{
    uint32_t i = p->heap_idx;
    s->heap_n--;
    if (i != s->heap_n) {
        s->heap[i] = s->heap[s->heap_n];
        s->heap[i]->heap_idx = i;
        heap_down(s, i);
        heap_up(s, i);
    }
}

static void
on_ask_timer(uv_timer_t *t);

static void
arm(struct sched *s)
{
    if (s->heap_n == 0) {
        uv_timer_stop(&s->ask_timer);
        return;
    }
    uint64_t now = uv_now(s->loop);
    uint64_t d = s->heap[0]->deadline;
    uv_timer_start(&s->ask_timer, on_ask_timer, d > now ? d - now : 0, 0);
}

static struct pending *
unlink_corr(struct sched *s, uint64_t corr)
{
    if (s->ptab_cap == 0)
        return NULL;
    struct pending **pp = &s->ptab[hash_corr(corr, s->ptab_cap)];
    for (; *pp; pp = &(*pp)->next) {
        struct pending *p = *pp;
        if (p->corr == corr) {
            *pp = p->next;
            s->ptab_n--;
            bool was_top = p->heap_idx == 0;
            heap_remove(s, p);
            if (was_top)
                arm(s);
            return p;
        }
    }
    return NULL;
}

troupe_err
troupe__ask_register(struct sched *s, uint64_t corr, troupe_addr asker,
                     troupe_addr target, uint32_t reply_kind,
                     uint32_t timeout_ms, troupe_reply_cb cb, void *cb_arg)
{
    if (s->ptab_n + 1 > s->ptab_cap / 2 && table_grow(s) != TROUPE_OK)
        return TROUPE_ENOMEM;
    if (s->heap_n == s->heap_cap) {
        uint32_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        struct pending **h = troupe_realloc(s->heap, cap * sizeof(*h));
        if (h == NULL)
            return TROUPE_ENOMEM;
        s->heap = h;
        s->heap_cap = cap;
    }
    struct pending *p = troupe_malloc(sizeof(*p));
    if (p == NULL)
        return TROUPE_ENOMEM;
    uv_update_time(s->loop);
    p->corr = corr;
    p->deadline = uv_now(s->loop) + timeout_ms;
    p->asker = asker;
    p->target = target;
    p->reply_kind = reply_kind;
    p->cb = cb;
    p->cb_arg = cb_arg;
    uint32_t h = hash_corr(corr, s->ptab_cap);
    p->next = s->ptab[h];
    s->ptab[h] = p;
    s->ptab_n++;
    p->heap_idx = s->heap_n;
    s->heap[s->heap_n++] = p;
    heap_up(s, p->heap_idx);
    if (p->heap_idx == 0)
        arm(s);
    return TROUPE_OK;
}

void
troupe__ask_unregister(struct sched *s, uint64_t corr)
{
    troupe_free(unlink_corr(s, corr));
}

/* See the design note. */
static bool
reply_fits(const troupe_runtime *rt, const struct pending *p,
           const troupe_msg *m)
{
    if (!troupe_addr_eq(p->asker, m->to))
        return false;
    if (!(troupe__msg_cof(m)->pflags & TROUPE__MSG_NET))
        return true;
    return p->target.node != rt->node_id && m->from.node == p->target.node;
}

bool
troupe__ask_match(struct sched *s, troupe_msg *m, bool *consumed)
{
    struct pending *p = unlink_corr(s, m->corr);
    if (p == NULL)
        return false;
    if (!reply_fits(s->rt, p, m)) {
        /* A forged or misrouted reply must not complete someone else's
         * ask: put the entry back. */
        uint32_t h = hash_corr(p->corr, s->ptab_cap);
        p->next = s->ptab[h];
        s->ptab[h] = p;
        s->ptab_n++;
        p->heap_idx = s->heap_n;
        s->heap[s->heap_n++] = p;
        heap_up(s, p->heap_idx);
        arm(s);
        return false;
    }
    if (p->cb != NULL) {
        p->cb(s->rt, m->err, m, p->cb_arg);
        *consumed = true;
    } else {
        m->kind = p->reply_kind;
        troupe__msg_of(m)->pflags |= TROUPE__MSG_MATCHED;
    }
    troupe_free(p);
    return true;
}

static void
expire(struct sched *s, struct pending *p)
{
    if (p->cb != NULL) {
        p->cb(s->rt, TROUPE_ETIMEDOUT, NULL, p->cb_arg);
        return;
    }
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, p->reply_kind, NULL, 0) != TROUPE_OK)
        return;
    m->corr = p->corr;
    m->err = TROUPE_ETIMEDOUT;
    m->flags = TROUPE_MSG_REPLY | TROUPE_MSG_SYSTEM;
    troupe__msg_of(m)->pflags = TROUPE__MSG_MATCHED;
    troupe__post(s->rt, s, p->asker, &m, true);
}

static void
on_ask_timer(uv_timer_t *t)
{
    struct sched *s = t->data;
    uint64_t now = uv_now(s->loop);
    while (s->heap_n > 0 && s->heap[0]->deadline <= now) {
        struct pending *p = unlink_corr(s, s->heap[0]->corr);
        expire(s, p);
        troupe_free(p);
    }
    arm(s);
}

void
troupe__ask_close_all(struct sched *s)
{
    while (s->heap_n > 0) {
        struct pending *p = unlink_corr(s, s->heap[0]->corr);
        if (p->cb != NULL)
            p->cb(s->rt, TROUPE_ECLOSED, NULL, p->cb_arg);
        troupe_free(p);
    }
    uv_timer_stop(&s->ask_timer);
    troupe_free(s->ptab);
    troupe_free(s->heap);
    s->ptab = NULL;
    s->heap = NULL;
    s->ptab_cap = s->ptab_n = s->heap_n = s->heap_cap = 0;
}
