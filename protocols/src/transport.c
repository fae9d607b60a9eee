/*
 * The nng transport: the only file that includes nng (docs/wire.md,
 * "Transport").
 *
 * Shape. Each node owns one inbox, a pair1 socket in polyamorous mode
 * that listens and only receives (plus one HELLO_ACK per incoming pipe),
 * and one link per peer: a plain pair1 socket whose dialer connects to
 * the peer's inbox. So every pair of nodes talks over two one-way links.
 * Why not one bidirectional connection: nng's SP sockets cannot accept
 * several peers and address one of them reliably. A pair1 listener takes
 * one peer; pair1 polyamorous mode takes many but silently drops a message
 * whenever that pipe's two-slot queue is full, which under load would lose
 * replies. Receiving through a polyamorous socket never drops (it applies
 * backpressure), and a plain pair1 dialer sends with backpressure and
 * redials on its own, so the link is the unit of flow control.
 *
 * Handshake. When a link's pipe comes up it sends HELLO (our id,
 * incarnation, listen URL) before any data; the peer's inbox answers
 * HELLO_ACK on the same pipe, which names the peer and its incarnation,
 * and dials our URL back if it has no link to us yet. Data frames carry
 * the incarnation of the receiver they are meant for, so frames queued for
 * a node that restarted are dropped by its new incarnation instead of
 * reaching new actors that reuse old addresses.
 *
 * Sending. node_send (the runtime's remote hook, also used for replies the
 * node itself sends) appends to the link's bounded ring and, if nobody
 * owns the link's transmitter, takes it and pumps. The owner (the sender
 * that found it idle, then nng's completion callback) encodes whatever
 * has accumulated, up to batch_max envelopes or frame_bytes, straight into
 * one nng message and sends it with the link's single aio. With nng's own
 * send buffer at zero, a frame waits in nng only while the previous one is
 * being written, so under load the ring fills and frames grow: batching
 * adapts to the load without a timer. Asks inside a frame are remembered
 * until nng takes it, so a frame cancelled when its pipe drops answers its
 * askers with EUNREACHABLE at once.
 *
 * Giving up. A sweep every SWEEP_MS drops queued messages past their
 * deadline (or send_timeout_ms when they have none) and, once a link has
 * been down for unreachable_ms, everything it holds; asks among them get
 * an error reply through troupe_runtime_deliver. From then on node_send
 * refuses that peer at once with EUNREACHABLE until the link is back.
 *
 * Locks: node->mu (links list, routing, inbox peers) is taken before a
 * link's mu, never after; no lock is held across an nng call that can run
 * callbacks (dialer start, close, aio stop) or across
 * troupe_runtime_deliver. Links are only freed by troupe_node_destroy, so
 * a link pointer found under node->mu stays valid.
 */
#include "troupe/transport.h"

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/wire.h"

#define SWEEP_MS 20
#define HELLO_RETRY_MS 250
#define HELLO_CAP 320
#define RECV_MAX ((size_t)TROUPE_WIRE_FRAME_MAX + 64)
#define NAME_MAX_LEN 255

struct qent {
    troupe_msg *m;
    int64_t expires; /* wall ms */
    size_t size;     /* envelope bytes */
};

/*
 * An ask this node sent (or queued) to the link's peer and whose reply
 * has not come back. Keyed by corr, which the runtime makes unique per
 * node. If the peer becomes unreachable or turns out to have restarted,
 * every such ask gets an EUNREACHABLE reply at once instead of waiting for
 * its deadline.
 */
struct ticket {
    uint64_t corr;
    troupe_addr asker;
};

struct ask_ent {
    struct ask_ent *next;
    uint64_t corr;
    troupe_addr asker;
    troupe_addr target;
    int64_t deadline; /* wall ms */
};

struct link {
    struct link *next; /* node->links, under node->mu */
    troupe_node *node;
    char *url;
    nng_socket sock;
    nng_dialer dialer;
    nng_aio *tx;
    nng_aio *rx;
    bool sock_open; /* under node->mu */
    bool retired;   /* under node->mu: a duplicate, closed by the sweep */

    pthread_mutex_t mu; /* everything below */
    uint32_t peer;      /* 0 until a HELLO_ACK (or the dial-back) names it */
    uint32_t answered;  /* the id the last HELLO_ACK gave, even if this link
                           was then retired as a duplicate */
    uint64_t peer_inc;
    bool pipe_up;
    bool acked; /* HELLO_ACK received on the current pipe */
    bool ever_up;
    bool hello_due;
    bool tx_busy; /* someone owns the transmitter */
    bool closed;
    int64_t down_since; /* mono ms when it last stopped being usable */
    int64_t hello_sent; /* mono ms */
    int64_t min_expires;
    struct qent *q;
    uint32_t qcap, qhead, qlen;
    size_t qbytes;
    struct ask_ent **asks; /* hash table by corr */
    uint32_t asks_cap, n_asks;
    int64_t asks_min_deadline;

    /* Owned by the transmitter's owner (tx_busy), no lock needed. */
    bool tx_hello;
    uint32_t tx_count;
    struct ticket *tix; /* the asks in the frame nng holds */
    uint32_t ntix;
    struct qent *scratch;
    const troupe_msg **ptrs;
};

/* A node whose HELLO reached our inbox. */
struct heard {
    uint32_t node;
    uint64_t inc;
    uint32_t pipe;
    bool connected;
};

struct troupe_node {
    troupe_runtime *rt;
    uint32_t id;
    uint64_t inc;
    troupe_node_opts o;
    char *advertise;

    pthread_mutex_t mu;
    struct link *links;
    struct heard *heard;
    uint32_t n_heard, cap_heard;

    nng_socket inbox;
    nng_aio *inbox_rx;
    nng_aio *sweep;
    troupe_wire_decoder *dec; /* inbox receive callback only */

    _Atomic int closing;
    _Atomic int in_send;

    _Atomic uint64_t msgs_sent, frames_sent, msgs_recv, frames_recv, bad_frames,
        stale_frames, deliver_fail, gave_up, error_replies, full;
};

/* ---- helpers ---- */

/*
 * The one translation of nng errors, with the detail logged. Expected
 * outcomes of teardown and cancellation are not logged.
 */
static troupe_err
nng_err(int rv, const char *what)
{
    troupe_err e;
    switch (rv) {
    case 0:
        return TROUPE_OK;
    case NNG_ENOMEM:
        e = TROUPE_ENOMEM;
        break;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
    case NNG_EBADTYPE:
    case NNG_ENOENT:
        e = TROUPE_EINVAL;
        break;
    case NNG_EADDRINUSE:
    case NNG_EBUSY:
        e = TROUPE_EBUSY;
        break;
    case NNG_ECLOSED:
        return TROUPE_ECLOSED;
    case NNG_ECANCELED:
        return TROUPE_ECANCELED;
    case NNG_ETIMEDOUT:
        return TROUPE_ETIMEDOUT;
    case NNG_ECONNREFUSED:
    case NNG_EUNREACHABLE:
    case NNG_ECONNRESET:
    case NNG_ECONNSHUT:
    case NNG_ECONNABORTED:
    case NNG_EPEERAUTH:
        e = TROUPE_EUNREACHABLE;
        break;
    case NNG_EMSGSIZE:
        e = TROUPE_ETOOBIG;
        break;
    case NNG_EPROTO:
        e = TROUPE_EPROTO;
        break;
    case NNG_EAGAIN:
        e = TROUPE_EFULL;
        break;
    case NNG_ESTATE:
        e = TROUPE_ESTATE;
        break;
    default:
        e = TROUPE_EIO;
        break;
    }
    fprintf(stderr, "troupe: nng %s: %s (%s)\n", what, nng_strerror(rv),
            troupe_err_name(e));
    return e;
}

static int64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool
usable(const struct link *l)
{
    return l->pipe_up && l->acked;
}

static bool
is_ask(const troupe_msg *m)
{
    return m->corr != 0 && (m->flags & TROUPE_MSG_REPLY) == 0 &&
           !troupe_addr_is_none(m->from);
}

static void
set_next(troupe_msg *m, troupe_msg *next)
{
    atomic_store_explicit(&m->next, next, memory_order_relaxed);
}

static troupe_msg *
get_next(troupe_msg *m)
{
    return atomic_load_explicit(&m->next, memory_order_relaxed);
}

/* Answers an ask that will not be sent. Only local askers can be told. */
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
static void
give_up(troupe_node *n, troupe_msg *list)
{
    while (list != NULL) {
        troupe_msg *next = get_next(list);
        set_next(list, NULL);
        atomic_fetch_add(&n->gave_up, 1);
        troupe_msg_destroy(list);
        list = next;
    }
}

/* ---- outstanding asks per link (under l->mu) ---- */

static uint32_t
ask_hash(uint64_t corr, uint32_t cap)
{
    corr ^= corr >> 33;
    corr *= 0xff51afd7ed558ccdull;
    corr ^= corr >> 33;
    return (uint32_t)(corr & (cap - 1));
}

static void
asks_insert(struct link *l, struct ask_ent *e)
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
static void
asks_add(troupe_node *n, struct link *l, const troupe_msg *m)
{
    if (!is_ask(m) || m->from.node != n->id)
        return;
    struct ask_ent *e = troupe_malloc(sizeof(*e));
    if (e == NULL)
        return;
    *e = (struct ask_ent){NULL, m->corr, m->from, m->to,
                          m->deadline > 0 ? m->deadline : INT64_MAX};
    asks_insert(l, e);
}

/* Removes and returns the entry for corr (asker must match), or NULL. */
static struct ask_ent *
asks_take(struct link *l, uint64_t corr, troupe_addr asker)
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

enum asks_which { ASKS_ALL, ASKS_EXPIRED, ASKS_NOT_NODE_SLOT };

/* Unlinks the selected entries onto *out. */
static void
asks_drain(struct link *l, enum asks_which which, int64_t wall,
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
static void
asks_fail(troupe_node *n, struct ask_ent *list, troupe_err err)
{
    while (list != NULL) {
        struct ask_ent *next = list->next;
        reply_error(n, list->asker, list->target, list->corr, err);
        troupe_free(list);
        list = next;
    }
}

/* ---- the per-link ring ---- */

static struct qent *
ring_at(struct link *l, uint32_t i)
{
    return &l->q[(l->qhead + i) % l->qcap];
}

static troupe_err
ring_reserve(struct link *l, uint32_t cap_max)
{
    if (l->qlen < l->qcap)
        return TROUPE_OK;
    uint32_t cap = l->qcap ? l->qcap * 2 : 64;
    if (cap > cap_max)
        cap = cap_max;
    if (cap <= l->qcap)
        return TROUPE_EFULL;
    struct qent *q = troupe_malloc(sizeof(*q) * cap);
    if (q == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t i = 0; i < l->qlen; i++)
        q[i] = *ring_at(l, i);
    troupe_free(l->q);
    l->q = q;
    l->qcap = cap;
    l->qhead = 0;
    return TROUPE_OK;
}

static void
ring_push(struct link *l, troupe_msg *m, int64_t expires, size_t size)
{
    *ring_at(l, l->qlen) = (struct qent){m, expires, size};
    l->qlen++;
    l->qbytes += size;
    if (expires < l->min_expires)
        l->min_expires = expires;
}

static struct qent
ring_pop(struct link *l)
{
    struct qent e = *ring_at(l, 0);
    l->qhead = (l->qhead + 1) % l->qcap;
    l->qlen--;
    l->qbytes -= e.size;
    return e;
}

/* Moves every queued message onto *list (keep(m) false) or keeps it. */
static void
ring_filter(struct link *l, bool (*drop)(const struct qent *, void *),
            void *arg, troupe_msg **list)
{
    uint32_t kept = 0, n = l->qlen;
    int64_t min = INT64_MAX;
    size_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct qent e = *ring_at(l, i);
        if (drop(&e, arg)) {
            set_next(e.m, *list);
            *list = e.m;
            continue;
        }
        *ring_at(l, kept++) = e;
        bytes += e.size;
        if (e.expires < min)
            min = e.expires;
    }
    l->qlen = kept;
    l->qbytes = bytes;
    l->min_expires = min;
}

static bool
drop_all(const struct qent *e, void *arg)
{
    return true;
}

static bool
drop_expired(const struct qent *e, void *arg)
{
    return e->expires <= *(const int64_t *)arg;
}

/* Messages for a peer's previous incarnation, except those to the node
 * address, which means the same thing to every incarnation. */
static bool
drop_old_incarnation(const struct qent *e, void *arg)
{
    return e->m->to.slot != TROUPE_NODE_SLOT;
}

/* ---- transmitting ---- */

static void
link_pump(struct link *l);

static void
release_tx(struct link *l)
{
    l->tx_busy = false;
    pthread_mutex_unlock(&l->mu);
}

/* The frame holding these asks never reached nng's pipe: they were not
 * delivered, so their askers can be told now. */
static void
fail_tickets(struct link *l, troupe_err err)
{
    struct ask_ent *list = NULL;
    pthread_mutex_lock(&l->mu);
    for (uint32_t i = 0; i < l->ntix; i++) {
        struct ask_ent *e = asks_take(l, l->tix[i].corr, l->tix[i].asker);
        if (e != NULL) {
            e->next = list;
            list = e;
        }
    }
    pthread_mutex_unlock(&l->mu);
    l->ntix = 0;
    asks_fail(l->node, list, err);
}

static void
send_frame(struct link *l, nng_msg *nm)
{
    nng_aio_set_msg(l->tx, nm);
    nng_send_aio(l->sock, l->tx);
}

/*
 * Runs the transmitter; the caller owns it (tx_busy set). Sends one frame
 * and returns: the completion callback calls it again. Releases ownership
 * when there is nothing to send.
 */
static void
link_pump(struct link *l)
{
    troupe_node *n = l->node;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        if (l->closed || atomic_load(&n->closing)) {
            release_tx(l);
            return;
        }
        if (l->pipe_up && l->hello_due) {
            l->hello_due = false;
            l->hello_sent = mono_ms();
            pthread_mutex_unlock(&l->mu);
            pthread_mutex_lock(&n->mu); /* advertise is set by listen */
            const char *url = n->advertise;
            pthread_mutex_unlock(&n->mu);
            nng_msg *nm;
            size_t len;
            if (nng_msg_alloc(&nm, HELLO_CAP) != 0)
                goto hello_failed;
            if (troupe_wire_encode_hello(TROUPE_FRAME_HELLO, n->id, n->inc, url,
                                         nng_msg_body(nm), HELLO_CAP,
                                         &len) != TROUPE_OK) {
                nng_msg_free(nm);
                goto hello_failed;
            }
            nng_msg_chop(nm, HELLO_CAP - len);
            l->tx_hello = true;
            l->tx_count = 0;
            send_frame(l, nm);
            return;
        hello_failed:
            /* the sweep retries the HELLO */
            pthread_mutex_lock(&l->mu);
            release_tx(l);
            return;
        }
        if (!usable(l) || l->qlen == 0) {
            release_tx(l);
            return;
        }
        int64_t wall = troupe_now_ms();
        uint64_t inc = l->peer_inc;
        uint32_t k = 0;
        troupe_msg *expired = NULL;
        size_t bytes = troupe_wire_data_overhead(n->id, inc, n->o.batch_max);
        while (l->qlen > 0 && k < n->o.batch_max) {
            struct qent *e = ring_at(l, 0);
            if (e->expires <= wall) {
                struct qent x = ring_pop(l);
                set_next(x.m, expired);
                expired = x.m;
                continue;
            }
            if (k > 0 && bytes + e->size > n->o.frame_bytes)
                break;
            bytes += e->size;
            l->scratch[k++] = ring_pop(l);
        }
        if (l->qlen == 0)
            l->min_expires = INT64_MAX;
        pthread_mutex_unlock(&l->mu);
        give_up(n, expired);
        if (k == 0)
            continue;

        l->ntix = 0;
        for (uint32_t i = 0; i < k; i++) {
            const troupe_msg *m = l->scratch[i].m;
            l->ptrs[i] = m;
            if (is_ask(m))
                l->tix[l->ntix++] = (struct ticket){m->corr, m->from};
        }
        nng_msg *nm = NULL;
        size_t len = 0;
        troupe_err e = TROUPE_ENOMEM;
        if (nng_msg_alloc(&nm, bytes) == 0) {
            e = troupe_wire_encode_data(n->id, inc, l->ptrs, k,
                                        nng_msg_body(nm), bytes, &len);
            if (e == TROUPE_OK)
                nng_msg_chop(nm, bytes - len);
        }
        for (uint32_t i = 0; i < k; i++)
            troupe_msg_destroy(l->scratch[i].m);
        if (e != TROUPE_OK) {
            /* Only allocation can fail here (sizes were checked when
             * queued): the batch is lost, its askers are told. */
            if (nm != NULL)
                nng_msg_free(nm);
            fail_tickets(l, TROUPE_EUNREACHABLE);
            atomic_fetch_add(&n->gave_up, k);
            continue;
        }
        l->tx_hello = false;
        l->tx_count = k;
        send_frame(l, nm);
        return;
    }
}

static void
tx_done(void *arg)
{
    struct link *l = arg;
    troupe_node *n = l->node;
    int rv = nng_aio_result(l->tx);
    if (rv != 0) {
        nng_msg_free(nng_aio_get_msg(l->tx));
        nng_aio_set_msg(l->tx, NULL);
        fail_tickets(l, TROUPE_EUNREACHABLE);
        if (!l->tx_hello)
            atomic_fetch_add(&n->gave_up, l->tx_count);
        if (l->tx_hello) {
            pthread_mutex_lock(&l->mu);
            if (l->pipe_up && !l->acked)
                l->hello_due = true;
            pthread_mutex_unlock(&l->mu);
        }
    } else if (!l->tx_hello) {
        atomic_fetch_add(&n->frames_sent, 1);
        atomic_fetch_add(&n->msgs_sent, l->tx_count);
    }
    l->ntix = 0;
    link_pump(l);
}

/* ---- links ---- */

static void
link_pipe_ev(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct link *l = arg;
    bool kick = false, cancel = false;
    pthread_mutex_lock(&l->mu);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        l->pipe_up = true;
        l->acked = false;
        l->hello_due = true;
        if (!l->tx_busy) {
            l->tx_busy = true;
            kick = true;
        }
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        if (usable(l))
            l->down_since = mono_ms();
        l->pipe_up = false;
        l->acked = false;
        l->hello_due = false;
        cancel = l->tx_busy;
    }
    pthread_mutex_unlock(&l->mu);
    if (cancel)
        nng_aio_cancel(l->tx);
    if (kick)
        link_pump(l);
}

static struct link *
find_peer(troupe_node *n, uint32_t peer, const struct link *except)
{
    for (struct link *l = n->links; l != NULL; l = l->next)
        if (l != except && !l->retired && l->peer == peer)
            return l;
    return NULL;
}

static struct link *
route(troupe_node *n, uint32_t peer)
{
    if (peer == 0)
        return NULL;
    pthread_mutex_lock(&n->mu);
    struct link *l = find_peer(n, peer, NULL);
    pthread_mutex_unlock(&n->mu);
    return l;
}

static struct heard *
find_heard(troupe_node *n, uint32_t node)
{
    for (uint32_t i = 0; i < n->n_heard; i++)
        if (n->heard[i].node == node)
            return &n->heard[i];
    return NULL;
}

/* A HELLO_ACK arrived on link l. Takes node->mu, then link locks. */
static void
link_acked(struct link *l, const troupe_frame_hdr *h)
{
    troupe_node *n = l->node;
    troupe_msg *stale = NULL, *moved = NULL;
    struct ask_ent *moved_asks = NULL, *failed = NULL;
    bool kick = false;
    pthread_mutex_lock(&n->mu);
    if (l->retired) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    /* peer is written under both locks, so reading it under either is
     * safe. */
    if ((l->peer != 0 && l->peer != h->sender) || h->sender == n->id) {
        if (h->sender != n->id)
            fprintf(stderr, "troupe: %s answered as node %u, expected %u\n",
                    l->url, h->sender, l->peer);
        pthread_mutex_lock(&l->mu);
        l->answered = h->sender;
        pthread_mutex_unlock(&l->mu);
        l->retired = true;
        pthread_mutex_unlock(&n->mu);
        return;
    }
    struct link *other = find_peer(n, h->sender, l);
    if (other != NULL) {
        pthread_mutex_lock(&other->mu);
        bool established = other->ever_up;
        if (!established) {
            /* the other link never worked: this one takes its queue */
            ring_filter(other, drop_all, NULL, &moved);
            asks_drain(other, ASKS_ALL, 0, &moved_asks);
            other->closed = true;
        }
        pthread_mutex_unlock(&other->mu);
        if (established) {
            pthread_mutex_lock(&l->mu);
            l->answered = h->sender;
            pthread_mutex_unlock(&l->mu);
            l->retired = true;
            pthread_mutex_unlock(&n->mu);
            return;
        }
        other->retired = true;
    }
    pthread_mutex_lock(&l->mu);
    l->peer = h->sender;
    l->answered = h->sender;
    if (l->ever_up && l->peer_inc != h->incarnation) {
        ring_filter(l, drop_old_incarnation, NULL, &stale);
        asks_drain(l, ASKS_NOT_NODE_SLOT, 0, &failed);
    }
    while (moved_asks != NULL) {
        struct ask_ent *next = moved_asks->next;
        asks_insert(l, moved_asks);
        moved_asks = next;
    }
    l->peer_inc = h->incarnation;
    l->acked = l->pipe_up;
    l->ever_up = true;
    /* moved came out newest first; re-queue oldest first */
    troupe_msg *rev = NULL;
    while (moved != NULL) {
        troupe_msg *next = get_next(moved);
        set_next(moved, rev);
        rev = moved;
        moved = next;
    }
    troupe_msg *overflow = NULL;
    int64_t wall = troupe_now_ms();
    while (rev != NULL) {
        troupe_msg *next = get_next(rev);
        set_next(rev, NULL);
        size_t size = troupe_wire_envelope_size(rev);
        if (ring_reserve(l, n->o.queue_cap) == TROUPE_OK) {
            ring_push(l, rev,
                      rev->deadline > 0 ? rev->deadline
                                        : wall + n->o.send_timeout_ms,
                      size);
        } else {
            struct ask_ent *e = asks_take(l, rev->corr, rev->from);
            if (e != NULL) {
                e->next = failed;
                failed = e;
            }
            set_next(rev, overflow);
            overflow = rev;
        }
        rev = next;
    }
    if (usable(l) && l->qlen > 0 && !l->tx_busy) {
        l->tx_busy = true;
        kick = true;
    }
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_unlock(&n->mu);
    give_up(n, stale);
    give_up(n, overflow);
    asks_fail(n, failed, TROUPE_EUNREACHABLE);
    if (kick)
        link_pump(l);
}

static void
link_rx_done(void *arg)
{
    struct link *l = arg;
    troupe_node *n = l->node;
    int rv = nng_aio_result(l->rx);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv == 0) {
        nng_msg *nm = nng_aio_get_msg(l->rx);
        nng_aio_set_msg(l->rx, NULL);
        troupe_frame_hdr h;
        troupe_err e = troupe_wire_decode_frame(
            NULL, nng_msg_body(nm), nng_msg_len(nm), &h, NULL, NULL);
        nng_msg_free(nm);
        if (e == TROUPE_OK && h.type == TROUPE_FRAME_HELLO_ACK)
            link_acked(l, &h);
        else
            atomic_fetch_add(&n->bad_frames, 1);
    }
    if (!atomic_load(&n->closing))
        nng_recv_aio(l->sock, l->rx);
}

static void
link_free(struct link *l)
{
    if (l == NULL)
        return;
    if (l->tx != NULL)
        nng_aio_free(l->tx);
    if (l->rx != NULL)
        nng_aio_free(l->rx);
    pthread_mutex_destroy(&l->mu);
    troupe_free(l->q);
    troupe_free(l->asks);
    troupe_free(l->tix);
    troupe_free(l->scratch);
    troupe_free(l->ptrs);
    troupe_free(l->url);
    troupe_free(l);
}

/*
 * Creates a link to `url` (peer: the expected node id, or 0) with its
 * socket, aios and dialer, not yet started. No lock held.
 */
static troupe_err
link_create(troupe_node *n, const char *url, uint32_t peer, struct link **out)
{
    struct link *l = troupe_calloc(1, sizeof(*l));
    if (l == NULL)
        return TROUPE_ENOMEM;
    l->node = n;
    l->peer = peer;
    l->min_expires = INT64_MAX;
    l->asks_min_deadline = INT64_MAX;
    l->down_since = mono_ms();
    pthread_mutex_init(&l->mu, NULL);
    l->url = troupe_strdup(url);
    l->tix = troupe_malloc(sizeof(*l->tix) * n->o.batch_max);
    l->scratch = troupe_malloc(sizeof(*l->scratch) * n->o.batch_max);
    l->ptrs = troupe_malloc(sizeof(*l->ptrs) * n->o.batch_max);
    if (l->url == NULL || l->tix == NULL || l->scratch == NULL ||
        l->ptrs == NULL) {
        link_free(l);
        return TROUPE_ENOMEM;
    }
    int rv;
    const char *what = "pair1 open";
    if ((rv = nng_pair1_open(&l->sock)) != 0) {
        link_free(l);
        return nng_err(rv, what);
    }
    l->sock_open = true;
    if ((rv = nng_socket_set_size(l->sock, NNG_OPT_RECVMAXSZ, RECV_MAX)) ||
        (rv = nng_socket_set_int(l->sock, NNG_OPT_SENDBUF, 0)) ||
        (rv = nng_socket_set_ms(l->sock, NNG_OPT_RECONNMINT,
                                (nng_duration)n->o.reconnect_min_ms)) ||
        (rv = nng_socket_set_ms(l->sock, NNG_OPT_RECONNMAXT,
                                (nng_duration)n->o.reconnect_max_ms)) ||
        (rv = nng_aio_alloc(&l->tx, tx_done, l)) ||
        (rv = nng_aio_alloc(&l->rx, link_rx_done, l)) ||
        (rv =
             nng_pipe_notify(l->sock, NNG_PIPE_EV_ADD_POST, link_pipe_ev, l)) ||
        (rv =
             nng_pipe_notify(l->sock, NNG_PIPE_EV_REM_POST, link_pipe_ev, l))) {
        what = "link setup";
    } else if ((rv = nng_dialer_create(&l->dialer, l->sock, url)) != 0) {
        what = "dialer create";
    }
    if (rv != 0) {
        nng_close(l->sock);
        link_free(l);
        return nng_err(rv, what);
    }
    *out = l;
    return TROUPE_OK;
}

/* Starts a link that is already on node->links. No lock held. */
static void
link_start(struct link *l)
{
    nng_recv_aio(l->sock, l->rx);
    int rv = nng_dialer_start(l->dialer, NNG_FLAG_NONBLOCK);
    if (rv != 0)
        nng_err(rv, "dialer start");
}

/* ---- receiving ---- */

static troupe_err
node_send(troupe_node *n, troupe_msg *m);

struct rx_ctx {
    troupe_node *n;
    troupe_frame_hdr h;
    bool stale;
};

static void
system_request(troupe_node *n, const troupe_msg *m)
{
    if (m->corr == 0 || (m->flags & TROUPE_MSG_REPLY))
        return;
    troupe_err err = TROUPE_OK;
    troupe_packer p;
    troupe_pack_init(&p);
    if (m->kind == TROUPE_NODE_LOOKUP) {
        troupe_reader r;
        const char *s;
        size_t len;
        char name[NAME_MAX_LEN + 1];
        troupe_addr a;
        troupe_reader_init_msg(&r, m);
        troupe_read_array_n(&r, 1);
        troupe_read_str(&r, NAME_MAX_LEN, &s, &len);
        if (troupe_read_end(&r) != TROUPE_OK || len == 0) {
            err = TROUPE_EPROTO;
        } else {
            memcpy(name, s, len);
            name[len] = '\0';
            err = troupe_registry_lookup(n->rt, name, &a);
        }
        if (err == TROUPE_OK) {
            troupe_pack_array(&p, 3);
            troupe_pack_uint(&p, a.node);
            troupe_pack_uint(&p, a.slot);
            troupe_pack_uint(&p, a.gen);
        }
    } else if (m->kind != TROUPE_NODE_PING) {
        err = TROUPE_ENOTSUP;
    }
    troupe_msg *r = NULL;
    troupe_err e = p.len > 0 ? troupe_pack_take_msg(&p, m->kind, &r)
                             : troupe_msg_create(&r, m->kind, NULL, 0);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return;
    r->flags = TROUPE_MSG_REPLY;
    r->corr = m->corr;
    r->from = m->to;
    r->to = m->from;
    r->err = err;
    /* The answer goes out through the same queues as everything else;
     * if it cannot, the asker's own deadline answers it. */
    if (r->to.node == n->id)
        troupe_runtime_deliver(n->rt, &r);
    else
        node_send(n, r);
}

static void
inbox_msg(void *arg, troupe_msg **mp)
{
    struct rx_ctx *c = arg;
    troupe_node *n = c->n;
    if (c->h.incarnation != 0 && c->h.incarnation != n->inc) {
        c->stale = true; /* left in *mp: destroyed by the decoder */
        return;
    }
    troupe_msg *m = *mp;
    atomic_fetch_add(&n->msgs_recv, 1);
    if (m->to.node != n->id) {
        atomic_fetch_add(&n->deliver_fail, 1);
        return;
    }
    if (m->to.slot == TROUPE_NODE_SLOT) {
        system_request(n, m);
        return;
    }
    if (m->flags & TROUPE_MSG_REPLY) {
        struct link *l = route(n, c->h.sender);
        if (l != NULL) {
            pthread_mutex_lock(&l->mu);
            struct ask_ent *e = asks_take(l, m->corr, m->to);
            pthread_mutex_unlock(&l->mu);
            troupe_free(e);
        }
    }
    if (troupe_runtime_deliver(n->rt, mp) != TROUPE_OK)
        atomic_fetch_add(&n->deliver_fail, 1);
}

static void
send_ack(troupe_node *n, nng_pipe pipe)
{
    nng_msg *nm;
    size_t len;
    if (nng_msg_alloc(&nm, HELLO_CAP) != 0)
        return;
    if (troupe_wire_encode_hello(TROUPE_FRAME_HELLO_ACK, n->id, n->inc, NULL,
                                 nng_msg_body(nm), HELLO_CAP,
                                 &len) != TROUPE_OK) {
        nng_msg_free(nm);
        return;
    }
    nng_msg_chop(nm, HELLO_CAP - len);
    nng_msg_set_pipe(nm, pipe);
    /* Non-blocking: if the ack cannot be queued, the peer's HELLO retry
     * asks again. */
    if (nng_sendmsg(n->inbox, nm, NNG_FLAG_NONBLOCK) != 0)
        nng_msg_free(nm);
}

static void
hello_received(troupe_node *n, const troupe_frame_hdr *h, nng_pipe pipe)
{
    /* Answered even when it is our own (we dialed our own URL): the ack
     * then retires that link. */
    send_ack(n, pipe);
    if (h->sender == n->id)
        return;
    struct link *start = NULL;
    char url[TROUPE_WIRE_URL_MAX + 1];
    memcpy(url, h->url, h->url_len);
    url[h->url_len] = '\0';
    pthread_mutex_lock(&n->mu);
    if (atomic_load(&n->closing)) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    struct heard *hd = find_heard(n, h->sender);
    if (hd == NULL) {
        if (n->n_heard == n->cap_heard) {
            uint32_t cap = n->cap_heard ? n->cap_heard * 2 : 8;
            struct heard *t = troupe_realloc(n->heard, sizeof(*t) * cap);
            if (t != NULL) {
                n->heard = t;
                n->cap_heard = cap;
            }
        }
        if (n->n_heard < n->cap_heard) {
            hd = &n->heard[n->n_heard++];
            hd->node = h->sender;
        }
    }
    if (hd != NULL) {
        hd->inc = h->incarnation;
        hd->pipe = (uint32_t)nng_pipe_id(pipe);
        hd->connected = true;
    }
    bool have = find_peer(n, h->sender, NULL) != NULL;
    for (struct link *l = n->links; l != NULL && !have; l = l->next)
        if (!l->retired && l->peer == 0 && strcmp(l->url, url) == 0)
            have = true; /* our own dial to that URL is on its way */
    pthread_mutex_unlock(&n->mu);
    if (have || h->url_len == 0)
        return;
    /* Dial back. Created without locks (nng may run callbacks), then
     * published unless someone else linked that peer meanwhile. */
    struct link *l;
    if (link_create(n, url, h->sender, &l) != TROUPE_OK)
        return;
    pthread_mutex_lock(&n->mu);
    if (!atomic_load(&n->closing) && find_peer(n, h->sender, NULL) == NULL) {
        l->next = n->links;
        n->links = l;
        start = l;
    }
    pthread_mutex_unlock(&n->mu);
    if (start != NULL) {
        link_start(start);
    } else {
        nng_close(l->sock);
        link_free(l);
    }
}

static void
inbox_pipe_ev(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    troupe_node *n = arg;
    if (ev != NNG_PIPE_EV_REM_POST)
        return;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    pthread_mutex_lock(&n->mu);
    for (uint32_t i = 0; i < n->n_heard; i++)
        if (n->heard[i].pipe == id)
            n->heard[i].connected = false;
    pthread_mutex_unlock(&n->mu);
}

static void
inbox_rx_done(void *arg)
{
    troupe_node *n = arg;
    int rv = nng_aio_result(n->inbox_rx);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv == 0) {
        nng_msg *nm = nng_aio_get_msg(n->inbox_rx);
        nng_aio_set_msg(n->inbox_rx, NULL);
        struct rx_ctx c = {.n = n};
        troupe_err e = troupe_wire_decode_frame(
            n->dec, nng_msg_body(nm), nng_msg_len(nm), &c.h, inbox_msg, &c);
        if (e != TROUPE_OK) {
            atomic_fetch_add(&n->bad_frames, 1);
        } else if (c.h.type == TROUPE_FRAME_DATA) {
            atomic_fetch_add(c.stale ? &n->stale_frames : &n->frames_recv, 1);
        } else if (c.h.type == TROUPE_FRAME_HELLO) {
            hello_received(n, &c.h, nng_msg_get_pipe(nm));
        }
        nng_msg_free(nm);
    }
    if (!atomic_load(&n->closing))
        nng_recv_aio(n->inbox, n->inbox_rx);
}

/* ---- the sweep ---- */

static void
sweep_done(void *arg)
{
    troupe_node *n = arg;
    if (nng_aio_result(n->sweep) != 0 || atomic_load(&n->closing))
        return;
    int64_t now = mono_ms(), wall = troupe_now_ms();
    troupe_msg *dropped = NULL;
    struct ask_ent *unreachable = NULL, *expired = NULL;
    struct link *kick[16];
    unsigned n_kick = 0;
    struct link *to_close = NULL;
    pthread_mutex_lock(&n->mu);
    for (struct link *l = n->links; l != NULL; l = l->next) {
        if (l->retired) {
            if (l->sock_open && to_close == NULL)
                to_close = l; /* one per sweep keeps the sweep short */
            continue;
        }
        pthread_mutex_lock(&l->mu);
        if (!usable(l) && now - l->down_since >= n->o.unreachable_ms) {
            ring_filter(l, drop_all, NULL, &dropped);
            asks_drain(l, ASKS_ALL, wall, &unreachable);
        } else {
            if (wall >= l->min_expires)
                ring_filter(l, drop_expired, &wall, &dropped);
            if (wall >= l->asks_min_deadline)
                asks_drain(l, ASKS_EXPIRED, wall, &expired);
        }
        if (l->pipe_up && !l->acked && !l->hello_due &&
            now - l->hello_sent >= HELLO_RETRY_MS) {
            l->hello_due = true;
            if (!l->tx_busy && n_kick < 16) {
                l->tx_busy = true;
                kick[n_kick++] = l;
            }
        }
        pthread_mutex_unlock(&l->mu);
    }
    if (to_close != NULL)
        to_close->sock_open = false;
    pthread_mutex_unlock(&n->mu);
    if (to_close != NULL) {
        pthread_mutex_lock(&to_close->mu);
        to_close->closed = true;
        ring_filter(to_close, drop_all, NULL, &dropped);
        asks_drain(to_close, ASKS_ALL, wall, &unreachable);
        pthread_mutex_unlock(&to_close->mu);
        nng_close(to_close->sock);
    }
    give_up(n, dropped);
    asks_fail(n, unreachable, TROUPE_EUNREACHABLE);
    /* The runtime times these out on its own as well; whichever reply
     * comes first completes the ask, the other is dropped as late. */
    asks_fail(n, expired, TROUPE_ETIMEDOUT);
    for (unsigned i = 0; i < n_kick; i++)
        link_pump(kick[i]);
    nng_sleep_aio(SWEEP_MS, n->sweep);
}

/* ---- sending ---- */

/* Queues m for its node's link. Consumes m. */
static troupe_err
node_send(troupe_node *n, troupe_msg *m)
{
    troupe_err e;
    if (atomic_load(&n->closing)) {
        e = TROUPE_ECLOSED;
        goto fail;
    }
    size_t size = troupe_wire_envelope_size(m);
    if (size == 0) {
        e = troupe_msg_len(m) > TROUPE_WIRE_BODY_MAX ? TROUPE_ETOOBIG
                                                     : TROUPE_EINVAL;
        goto fail;
    }
    struct link *l = route(n, m->to.node);
    if (l == NULL) {
        e = TROUPE_EUNREACHABLE;
        goto fail;
    }
    int64_t now = mono_ms();
    pthread_mutex_lock(&l->mu);
    if (l->closed ||
        (!usable(l) && now - l->down_since >= n->o.unreachable_ms)) {
        pthread_mutex_unlock(&l->mu);
        e = TROUPE_EUNREACHABLE;
        goto fail;
    }
    if (l->qlen >= n->o.queue_cap || size > n->o.queue_bytes - l->qbytes) {
        pthread_mutex_unlock(&l->mu);
        atomic_fetch_add(&n->full, 1);
        e = TROUPE_EFULL;
        goto fail;
    }
    if ((e = ring_reserve(l, n->o.queue_cap)) != TROUPE_OK) {
        pthread_mutex_unlock(&l->mu);
        goto fail;
    }
    int64_t expires =
        m->deadline > 0 ? m->deadline : troupe_now_ms() + n->o.send_timeout_ms;
    ring_push(l, m, expires, size);
    asks_add(n, l, m);
    bool kick = usable(l) && !l->tx_busy;
    if (kick)
        l->tx_busy = true;
    pthread_mutex_unlock(&l->mu);
    if (kick)
        link_pump(l);
    return TROUPE_OK;
fail:
    troupe_msg_destroy(m);
    return e;
}

static troupe_err
hook_send(void *ctx, troupe_msg **mp)
{
    troupe_node *n = ctx;
    if (mp == NULL || *mp == NULL)
        return TROUPE_EINVAL;
    troupe_msg *m = *mp;
    *mp = NULL;
    /* Counted so destroy can wait for senders already inside. */
    atomic_fetch_add(&n->in_send, 1);
    troupe_err e = node_send(n, m);
    atomic_fetch_sub(&n->in_send, 1);
    return e;
}

static const troupe_remote_ops hook_ops = {.send = hook_send};

/* ---- public API ---- */

static uint64_t
pick_incarnation(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)(uintptr_t)&ts;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x ? x : 1;
}

troupe_err
troupe_node_create(troupe_node **out, troupe_runtime *rt,
                   const troupe_node_opts *opts)
{
    if (out == NULL || rt == NULL)
        return TROUPE_EINVAL;
    troupe_node_opts o = opts ? *opts : (troupe_node_opts){0};
    if (o.queue_cap == 0)
        o.queue_cap = 65536;
    if (o.queue_bytes == 0)
        o.queue_bytes = 64u << 20;
    if (o.batch_max == 0)
        o.batch_max = 1024;
    if (o.frame_bytes == 0)
        o.frame_bytes = 256u << 10;
    if (o.send_timeout_ms == 0)
        o.send_timeout_ms = 10000;
    if (o.unreachable_ms == 0)
        o.unreachable_ms = 2000;
    if (o.reconnect_min_ms == 0)
        o.reconnect_min_ms = 20;
    if (o.reconnect_max_ms == 0)
        o.reconnect_max_ms = 1000;
    if (o.batch_max > TROUPE_WIRE_BATCH_MAX ||
        o.frame_bytes > TROUPE_WIRE_FRAME_MAX ||
        o.reconnect_min_ms > o.reconnect_max_ms ||
        (o.advertise != NULL &&
         (o.advertise[0] == '\0' || strlen(o.advertise) > TROUPE_WIRE_URL_MAX)))
        return TROUPE_EINVAL;
    troupe_node *n = troupe_calloc(1, sizeof(*n));
    if (n == NULL)
        return TROUPE_ENOMEM;
    n->rt = rt;
    n->id = troupe_runtime_node_id(rt);
    n->inc = pick_incarnation();
    n->o = o;
    n->o.advertise = NULL;
    pthread_mutex_init(&n->mu, NULL);
    troupe_err e = TROUPE_OK;
    if (o.advertise != NULL &&
        (n->advertise = troupe_strdup(o.advertise)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = troupe_wire_decoder_create(&n->dec);
    int rv = 0;
    bool sock = false;
    if (e == TROUPE_OK) {
        if ((rv = nng_pair1_open_poly(&n->inbox)) == 0) {
            sock = true;
            if ((rv = nng_socket_set_size(n->inbox, NNG_OPT_RECVMAXSZ,
                                          RECV_MAX)) == 0 &&
                (rv = nng_socket_set_int(n->inbox, NNG_OPT_SENDBUF, 64)) == 0 &&
                (rv = nng_pipe_notify(n->inbox, NNG_PIPE_EV_REM_POST,
                                      inbox_pipe_ev, n)) == 0 &&
                (rv = nng_aio_alloc(&n->inbox_rx, inbox_rx_done, n)) == 0)
                rv = nng_aio_alloc(&n->sweep, sweep_done, n);
        }
        if (rv != 0)
            e = nng_err(rv, "inbox setup");
    }
    if (e != TROUPE_OK) {
        if (sock)
            nng_close(n->inbox);
        if (n->inbox_rx != NULL)
            nng_aio_free(n->inbox_rx);
        if (n->sweep != NULL)
            nng_aio_free(n->sweep);
        troupe_wire_decoder_destroy(n->dec);
        troupe_free(n->advertise);
        pthread_mutex_destroy(&n->mu);
        troupe_free(n);
        return e;
    }
    nng_recv_aio(n->inbox, n->inbox_rx);
    nng_sleep_aio(SWEEP_MS, n->sweep);
    troupe_runtime_set_remote(rt, &hook_ops, n);
    *out = n;
    return TROUPE_OK;
}

/* The URL peers can dial for a listener bound to `url`. */
static char *
advertised_url(const char *url, nng_listener l)
{
    nng_sockaddr sa;
    if (strncmp(url, "tcp", 3) != 0 ||
        nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        return troupe_strdup(url);
    char host[INET6_ADDRSTRLEN];
    char buf[TROUPE_WIRE_URL_MAX + 1];
    if (sa.s_family == NNG_AF_INET) {
        if (inet_ntop(AF_INET, &sa.s_in.sa_addr, host, sizeof(host)) == NULL)
            return troupe_strdup(url);
        snprintf(buf, sizeof(buf), "tcp://%s:%u", host,
                 (unsigned)ntohs(sa.s_in.sa_port));
    } else if (sa.s_family == NNG_AF_INET6) {
        if (inet_ntop(AF_INET6, sa.s_in6.sa_addr, host, sizeof(host)) == NULL)
            return troupe_strdup(url);
        snprintf(buf, sizeof(buf), "tcp://[%s]:%u", host,
                 (unsigned)ntohs(sa.s_in6.sa_port));
    } else {
        return troupe_strdup(url);
    }
    return troupe_strdup(buf);
}

troupe_err
troupe_node_listen(troupe_node *n, const char *url)
{
    if (n == NULL || url == NULL || url[0] == '\0')
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    nng_listener l;
    int rv = nng_listener_create(&l, n->inbox, url);
    if (rv != 0)
        return nng_err(rv, "listener create");
    if ((rv = nng_listener_start(l, 0)) != 0) {
        nng_listener_close(l);
        return nng_err(rv, "listen");
    }
    pthread_mutex_lock(&n->mu);
    if (n->advertise == NULL) {
        char *adv = advertised_url(url, l);
        if (adv != NULL && strlen(adv) > TROUPE_WIRE_URL_MAX) {
            troupe_free(adv);
            adv = NULL;
        }
        n->advertise = adv;
    }
    pthread_mutex_unlock(&n->mu);
    return TROUPE_OK;
}

const char *
troupe_node_url(const troupe_node *n)
{
    if (n == NULL)
        return NULL;
    pthread_mutex_lock((pthread_mutex_t *)&n->mu);
    const char *u = n->advertise;
    pthread_mutex_unlock((pthread_mutex_t *)&n->mu);
    return u;
}

static troupe_err
connect_link(troupe_node *n, const char *url, struct link **out)
{
    if (n == NULL || url == NULL || url[0] == '\0')
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    struct link *l;
    troupe_err e = link_create(n, url, 0, &l);
    if (e != TROUPE_OK)
        return e;
    pthread_mutex_lock(&n->mu);
    bool closing = atomic_load(&n->closing);
    if (!closing) {
        l->next = n->links;
        n->links = l;
    }
    pthread_mutex_unlock(&n->mu);
    if (closing) {
        nng_close(l->sock);
        link_free(l);
        return TROUPE_ECLOSED;
    }
    link_start(l);
    *out = l;
    return TROUPE_OK;
}

troupe_err
troupe_node_connect(troupe_node *n, const char *url)
{
    struct link *l;
    return connect_link(n, url, &l);
}

troupe_err
troupe_node_connect_wait(troupe_node *n, const char *url, uint32_t timeout_ms,
                         uint32_t *peer)
{
    if (peer == NULL)
        return TROUPE_EINVAL;
    struct link *l;
    troupe_err e = connect_link(n, url, &l);
    if (e != TROUPE_OK)
        return e;
    /* The link stays valid until the node is destroyed. */
    int64_t end = mono_ms() + timeout_ms;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        uint32_t id = l->answered;
        pthread_mutex_unlock(&l->mu);
        if (id == n->id)
            return TROUPE_EINVAL;
        if (id != 0 && troupe_node_peer_up(n, id)) {
            *peer = id;
            return TROUPE_OK;
        }
        if (mono_ms() >= end)
            return TROUPE_ETIMEDOUT;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

bool
troupe_node_peer_up(troupe_node *n, uint32_t peer)
{
    if (n == NULL || peer == 0)
        return false;
    bool up = false;
    pthread_mutex_lock(&n->mu);
    struct link *l = find_peer(n, peer, NULL);
    struct heard *h = find_heard(n, peer);
    if (l != NULL && h != NULL && h->connected) {
        pthread_mutex_lock(&l->mu);
        up = usable(l) && l->peer_inc == h->inc;
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return up;
}

troupe_peer_state
troupe_node_peer_state(troupe_node *n, uint32_t peer)
{
    if (n == NULL || peer == 0)
        return TROUPE_PEER_UNKNOWN;
    troupe_peer_state st = TROUPE_PEER_UNKNOWN;
    int64_t now = mono_ms();
    pthread_mutex_lock(&n->mu);
    struct link *l = find_peer(n, peer, NULL);
    if (l != NULL) {
        pthread_mutex_lock(&l->mu);
        if (usable(l))
            st = TROUPE_PEER_UP;
        else if (l->closed || now - l->down_since >= n->o.unreachable_ms)
            st = TROUPE_PEER_UNREACHABLE;
        else if (l->pipe_up)
            st = TROUPE_PEER_CONNECTING;
        else
            st = l->ever_up ? TROUPE_PEER_DOWN : TROUPE_PEER_CONNECTING;
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return st;
}

troupe_err
troupe_node_wait_peer(troupe_node *n, uint32_t peer, uint32_t timeout_ms)
{
    if (n == NULL || peer == 0)
        return TROUPE_EINVAL;
    int64_t end = mono_ms() + timeout_ms;
    while (!troupe_node_peer_up(n, peer)) {
        if (mono_ms() >= end)
            return TROUPE_ETIMEDOUT;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return TROUPE_OK;
}

troupe_err
troupe_node_lookup_msg(const char *name, troupe_msg **out)
{
    if (name == NULL || out == NULL)
        return TROUPE_EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > NAME_MAX_LEN)
        return TROUPE_EINVAL;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_str(&p, name, len);
    return troupe_pack_take_msg(&p, TROUPE_NODE_LOOKUP, out);
}

troupe_err
troupe_node_lookup_result(const troupe_msg *reply, troupe_addr *a)
{
    if (reply == NULL || a == NULL)
        return TROUPE_EINVAL;
    if (reply->err != TROUPE_OK)
        return reply->err;
    troupe_reader r;
    troupe_addr got;
    troupe_reader_init_msg(&r, reply);
    troupe_read_array_n(&r, 3);
    troupe_read_u32(&r, &got.node);
    troupe_read_u32(&r, &got.slot);
    troupe_read_u32(&r, &got.gen);
    troupe_err e = troupe_read_end(&r);
    if (e != TROUPE_OK)
        return TROUPE_EPROTO;
    *a = got;
    return TROUPE_OK;
}

struct lookup {
    troupe_lookup_cb cb;
    void *arg;
    troupe_runtime *rt;
    troupe_err err;
    troupe_addr a;
    char name[NAME_MAX_LEN + 1];
};

static void
lookup_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    struct lookup *lk = arg;
    troupe_addr a = TROUPE_ADDR_NONE;
    if (err == TROUPE_OK)
        err = troupe_node_lookup_result(reply, &a);
    lk->cb(rt, err, err == TROUPE_OK ? a : TROUPE_ADDR_NONE, lk->arg);
    troupe_free(lk);
}

static void
lookup_local(void *arg)
{
    struct lookup *lk = arg;
    lk->err = troupe_registry_lookup(lk->rt, lk->name, &lk->a);
}

static void
lookup_local_done(void *arg, troupe_runtime *rt)
{
    struct lookup *lk = arg;
    lk->cb(rt, lk->err, lk->err == TROUPE_OK ? lk->a : TROUPE_ADDR_NONE,
           lk->arg);
    troupe_free(lk);
}

troupe_err
troupe_node_lookup(troupe_node *n, uint32_t peer, const char *name,
                   uint32_t timeout_ms, troupe_lookup_cb cb, void *arg)
{
    if (n == NULL || peer == 0 || name == NULL || cb == NULL || timeout_ms == 0)
        return TROUPE_EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > NAME_MAX_LEN)
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    if (peer != n->id && route(n, peer) == NULL)
        return TROUPE_EUNREACHABLE;
    struct lookup *lk = troupe_calloc(1, sizeof(*lk));
    if (lk == NULL)
        return TROUPE_ENOMEM;
    lk->cb = cb;
    lk->arg = arg;
    lk->rt = n->rt;
    memcpy(lk->name, name, len + 1);
    troupe_err e;
    if (peer == n->id) {
        e = troupe_runtime_work(n->rt, lookup_local, lookup_local_done, lk);
    } else {
        troupe_msg *m = NULL;
        e = troupe_node_lookup_msg(name, &m);
        if (e == TROUPE_OK)
            e = troupe_runtime_ask(n->rt, troupe_node_addr(peer), &m,
                                   timeout_ms, lookup_reply, lk);
    }
    if (e != TROUPE_OK)
        troupe_free(lk);
    return e;
}

void
troupe_node_stats_get(const troupe_node *n, troupe_node_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (n == NULL)
        return;
    troupe_node *w = (troupe_node *)n;
    out->msgs_sent = atomic_load(&w->msgs_sent);
    out->frames_sent = atomic_load(&w->frames_sent);
    out->msgs_recv = atomic_load(&w->msgs_recv);
    out->frames_recv = atomic_load(&w->frames_recv);
    out->bad_frames = atomic_load(&w->bad_frames);
    out->stale_frames = atomic_load(&w->stale_frames);
    out->deliver_fail = atomic_load(&w->deliver_fail);
    out->gave_up = atomic_load(&w->gave_up);
    out->error_replies = atomic_load(&w->error_replies);
    out->full = atomic_load(&w->full);
}

void
troupe_node_destroy(troupe_node *n)
{
    if (n == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    atomic_store(&n->closing, 1);
    pthread_mutex_unlock(&n->mu);
    troupe_runtime_set_remote(n->rt, NULL, NULL);
    while (atomic_load(&n->in_send) > 0)
        sched_yield();
    nng_aio_stop(n->sweep);
    nng_close(n->inbox);
    nng_aio_stop(n->inbox_rx);
    /* No new links appear once closing is set (under n->mu). */
    for (struct link *l = n->links; l != NULL; l = l->next) {
        if (l->sock_open) {
            l->sock_open = false;
            nng_close(l->sock);
        }
        nng_aio_stop(l->tx);
        nng_aio_stop(l->rx);
    }
    struct link *l = n->links;
    while (l != NULL) {
        struct link *next = l->next;
        troupe_msg *rest = NULL;
        struct ask_ent *asks = NULL;
        pthread_mutex_lock(&l->mu);
        ring_filter(l, drop_all, NULL, &rest);
        asks_drain(l, ASKS_ALL, 0, &asks);
        pthread_mutex_unlock(&l->mu);
        give_up(n, rest);
        asks_fail(n, asks, TROUPE_EUNREACHABLE);
        link_free(l);
        l = next;
    }
    nng_aio_free(n->sweep);
    nng_aio_free(n->inbox_rx);
    troupe_wire_decoder_destroy(n->dec);
    troupe_free(n->heard);
    troupe_free(n->advertise);
    pthread_mutex_destroy(&n->mu);
    troupe_free(n);
}
