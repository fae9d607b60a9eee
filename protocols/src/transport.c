/*
 * The nng transport: the only file that includes nng (docs/wire.md,
 * "Transport"; docs/security.md).
 *
 * Shape. Each node owns one inbox, a pair1 socket in polyamorous mode
 * that listens and only receives (plus one HELLO_ACK or REFUSE per
 * incoming pipe), and one link per peer: a plain pair1 socket whose dialer
 * connects to the peer's inbox. So every pair of nodes talks over two
 * one-way links. Why not one bidirectional connection: nng's SP sockets
 * cannot accept several peers and address one of them reliably. A pair1
 * listener takes one peer; pair1 polyamorous mode takes many but silently
 * drops a message whenever that pipe's two-slot queue is full, which under
 * load would lose replies. Receiving through a polyamorous socket never
 * drops (it applies backpressure), and a plain pair1 dialer sends with
 * backpressure and redials on its own, so the link is the unit of flow
 * control.
 *
 * Handshake. When a link's pipe comes up it sends HELLO (our id,
 * incarnation, listen URL, a fresh nonce) before any data; the peer's
 * inbox answers HELLO_ACK on the same pipe (its id, incarnation, its own
 * nonce and its proof over both), we check that proof and send AUTH (our
 * proof) ahead of any data. The inbox keeps one `conn` per pipe and
 * delivers nothing from it until AUTH checks; from then on every envelope
 * it delivers has from.node = that peer's id (an envelope naming another
 * node is dropped), which is what lets the runtime trust from.node. Only
 * then does the inbox dial back, and only to the allow-list's URL for that
 * id when there is an allow-list. Data frames carry the incarnation of the
 * receiver they are meant for, so frames queued for a node that restarted
 * are dropped by its new incarnation instead of reaching new actors that
 * reuse old addresses. The proofs themselves are auth.c's.
 *
 * Sending. node_send (the runtime's remote hook, also used for replies the
 * node itself sends) appends to the link's bounded ring and, if nobody
 * owns the link's transmitter, takes it and pumps. The owner (the sender
 * that found it idle, then nng's completion callback) encodes whatever
 * has accumulated, up to batch_max envelopes or frame_bytes, straight into
 * one nng message and sends it with the link's single aio. With nng's own
 * send buffer at zero, a frame waits in nng only while the previous one is
 * being written, so under load the ring fills and frames grow: batching
 * adapts to the load without a timer. A frame over TROUPE_WIRE_PART_MAX is
 * encoded once into a buffer and sent as PART frames, one per completion,
 * so that no connection ever needs a larger nng message: nng 1.5.2 has no
 * per-pipe receive limit (NNG_OPT_RECVMAXSZ is per listener), so the inbox
 * limit is what any stranger's connection can make us hold. Asks inside a
 * frame are remembered until nng takes its last byte, so a frame cancelled
 * when its pipe drops answers its askers with EUNREACHABLE at once.
 *
 * Budgets. Queued bytes are reserved node-wide (queue_bytes_total) with a
 * compare-and-swap before a message enters a ring, and released in bulk as
 * frames are built. Links are at most max_peers; inbox conns at most
 * 2 * max_peers + max_pending, at most max_pending of them in their
 * handshake (a new one evicts the oldest, so a flood of strangers cannot
 * keep a real peer out by merely holding connections open). Frames being
 * reassembled take at most reassembly_bytes.
 *
 * Giving up and reaping. A sweep thread of our own runs every SWEEP_MS: it
 * drops queued messages past their deadline (or send_timeout_ms when they
 * have none) and, once a link has been down for unreachable_ms, everything
 * it holds; asks among them get an error reply through
 * troupe_runtime_deliver. It closes inbox conns whose handshake is late,
 * whose frame in parts stalls, or that were refused (after a short linger
 * so the REFUSE reaches the peer). It frees retired links and the links it
 * dialed back on its own that stayed down for reap_ms. It is a thread and
 * not an nng aio because freeing a link closes its socket and waits for
 * its callbacks, which must not happen on one of nng's callback threads.
 *
 * Locks and lifetimes: node->mu (links list, conns, routing) is taken
 * before a link's mu, never after; no lock is held across an nng call that
 * can run callbacks (dialer start, close, aio stop, pipe close) or across
 * troupe_runtime_deliver. A link is reference-counted: node->links holds
 * one reference, route() hands out one more under node->mu, and the last
 * release frees it; the sweep unlinks a link, closes its socket and stops
 * its aios (so no nng callback can run on it again) before it drops the
 * list's reference.
 */
#include "troupe/transport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/wire.h"

#define SWEEP_MS 20
#define HELLO_RETRY_MS 250
#define REFUSE_LINGER_MS 50
#define LINK_RECV_MAX ((size_t)TROUPE_WIRE_CTL_MAX + 64)
#define INBOX_RECV_MAX                                                         \
    ((size_t)TROUPE_WIRE_PART_MAX + TROUPE_WIRE_PART_OVERHEAD)
#define NAME_MAX_LEN 255
#define LOG_PER_SEC 20
#define PIPE_END_MS 500 /* how long teardown waits for an ended pipe */
#define LISTENER_CHECK_MS 200

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

/* What the frame nng holds for a link is. */
enum tx_kind { TX_CTL, TX_DATA, TX_PART };

struct link {
    struct link *next; /* node->links, under node->mu */
    troupe_node *node;
    _Atomic uint32_t refs;
    char *url;
    nng_socket sock;
    nng_dialer dialer;
    nng_aio *tx;
    nng_aio *rx;
    bool sock_open; /* under node->mu */
    bool retired;   /* under node->mu: a duplicate or our own, to be freed */
    bool dynamic;   /* under node->mu: a dial-back, reaped when it stays
                       down */

    pthread_mutex_t mu; /* everything below */
    uint32_t peer;      /* expected or answered id; 0 until known */
    bool expect;        /* peer was known before dialing: another id
                           answering is refused, not adopted */
    uint32_t answered;  /* the id the last HELLO_ACK gave, even if this link
                           was then retired as a duplicate */
    uint64_t peer_inc;
    bool pipe_up;
    bool acked; /* HELLO_ACK checked on the current pipe */
    bool ever_up;
    bool hello_due;
    bool auth_due;
    bool tx_busy; /* someone owns the transmitter */
    bool closed;
    uint32_t pipe_id;                     /* the current pipe, 0 when none */
    uint32_t pipe_gen;                    /* counts pipes */
    uint32_t hello_gen;                   /* pipe_gen of the last HELLO sent */
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN]; /* our nonce on the current pipe */
    char hello_url[TROUPE_WIRE_URL_MAX + 1]; /* the URL that HELLO named */
    troupe_err refused;   /* the last refusal, for connect_wait; OK: none */
    uint32_t dead_pipe;   /* a pipe refused (by either side): nothing more is
                             sent on it while it goes away */
    bool backoff;         /* the dialer waits reconnect_max_ms after a
                             refusal */
    int64_t dial_started; /* mono ms the dialer was (re)started */
    int64_t down_since;   /* mono ms when it last stopped being usable */
    int64_t hello_sent;   /* mono ms */
    int64_t pipe_since;   /* mono ms the current pipe came up */
    int64_t min_expires;
    struct qent *q;
    uint32_t qcap, qhead, qlen;
    size_t qbytes;
    struct ask_ent **asks; /* hash table by corr */
    uint32_t asks_cap, n_asks;
    int64_t asks_min_deadline;
    uint8_t *auth_frame; /* AUTH for the current pipe (TROUPE_WIRE_CTL_MAX) */
    size_t auth_len;

    /* Owned by the transmitter's owner (tx_busy), no lock needed. */
    enum tx_kind tx_kind;
    uint32_t tx_count;
    struct ticket *tix; /* the asks in the frame nng holds (or in big) */
    uint32_t ntix;
    struct qent *scratch;
    const troupe_msg **ptrs;
    uint8_t *big; /* a frame being sent in PART frames */
    size_t big_len, big_off, big_chunk;
    uint32_t big_gen;
    uint64_t big_inc;
};

/* The state of an inbox pipe. */
enum conn_state {
    CONN_NEW,        /* no HELLO yet */
    CONN_CHALLENGED, /* HELLO answered, AUTH awaited */
    CONN_AUTHED,     /* delivers */
    CONN_CLOSING     /* refused or replaced: closed by the sweep */
};

struct conn {
    uint32_t pipe;
    enum conn_state st;
    bool close_now;    /* CLOSING: close without waiting for the linger */
    bool close_issued; /* nng_pipe_close called; removed at REM_POST */
    int64_t since;     /* mono ms: created, or CLOSING since */
    uint32_t peer;
    uint64_t inc;
    uint8_t nonce_d[TROUPE_WIRE_NONCE_LEN];
    uint8_t nonce_l[TROUPE_WIRE_NONCE_LEN];
    char url[TROUPE_WIRE_URL_MAX + 1];
    size_t url_len;
    uint8_t *part; /* a frame being reassembled */
    uint32_t part_total, part_len;
    int64_t part_at;
    bool part_out; /* the receive callback is copying into part */
};

/* A listener of the inbox. */
struct lst {
    nng_listener l;
    char *bound; /* the URL to listen on again (a tcp port 0 resolved) */
    bool watch;  /* tls or ipc: see watch_listeners */
};

struct troupe_node {
    troupe_runtime *rt;
    uint32_t id;
    uint64_t inc;
    troupe_node_opts o;
    char *advertise;
    troupe_node_peer *peers; /* the allow-list, urls copied */
    uint32_t n_peers;
    troupe__auth *auth;
    bool open; /* no secret, no certificates */

    pthread_mutex_t mu;
    struct link *links;
    uint32_t n_links;
    struct link *graveyard; /* evicted links the sweep has yet to close */
    struct conn *conns;
    uint32_t n_conns, conn_cap, n_pending;
    size_t part_bytes; /* reassembly buffers allocated */

    nng_socket inbox;
    struct lst *listeners; /* under mu */
    uint32_t n_listeners;
    int64_t lst_checked; /* mono ms of the last watch_listeners */
    nng_aio *inbox_rx;
    troupe_wire_decoder *dec; /* inbox receive callback only */

    pthread_t sweeper;
    uint32_t *sweep_close;   /* the sweep's scratch: pipes to close */
    pthread_cond_t sweep_cv; /* with mu */
    bool sweeper_running;

    _Atomic int closing;
    _Atomic int in_send;
    _Atomic size_t qbytes; /* reserved by every queued envelope */

    pthread_mutex_t log_mu;
    int64_t log_sec;
    uint32_t log_n, log_dropped;

    _Atomic uint64_t msgs_sent, frames_sent, msgs_recv, frames_recv, bad_frames,
        stale_frames, deliver_fail, gave_up, error_replies, full, refused,
        auth_failed, unauth_frames, spoofed, reaped, relistened, redialed;
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
        e = TROUPE_EUNREACHABLE;
        break;
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
        e = TROUPE_EAUTH;
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

/*
 * A log line about what peers do, at most LOG_PER_SEC a second: a flood
 * of strangers must not turn into a flood of stderr writes. The count of
 * lines left out is reported with the next one.
 */
static void
node_log(troupe_node *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
node_log(troupe_node *n, const char *fmt, ...)
{
    int64_t sec = mono_ms() / 1000;
    uint32_t dropped = 0;
    pthread_mutex_lock(&n->log_mu);
    if (sec != n->log_sec) {
        n->log_sec = sec;
        n->log_n = 0;
    }
    bool say = n->log_n < LOG_PER_SEC;
    if (say) {
        n->log_n++;
        dropped = n->log_dropped;
        n->log_dropped = 0;
    } else {
        n->log_dropped++;
    }
    pthread_mutex_unlock(&n->log_mu);
    if (!say)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (dropped > 0)
        fprintf(stderr,
                "troupe: node %u: %s (and %u similar lines left "
                "out)\n",
                n->id, line, dropped);
    else
        fprintf(stderr, "troupe: node %u: %s\n", n->id, line);
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

static bool
is_tls_url(const char *url)
{
    return strncmp(url, "tls+tcp", 7) == 0;
}

/* The transports whose endpoints nng 1.5.2 may stop (watch_listeners). */
static bool
watched_url(const char *url)
{
    return is_tls_url(url) || strncmp(url, "ipc", 3) == 0;
}

static const troupe_node_peer *
allowed_peer(const troupe_node *n, uint32_t id)
{
    for (uint32_t i = 0; i < n->n_peers; i++)
        if (n->peers[i].id == id)
            return &n->peers[i];
    return NULL;
}

/* Reserves `size` bytes of the node-wide queue budget; false when full. */
static bool
budget_take(troupe_node *n, size_t size)
{
    size_t cur = atomic_load_explicit(&n->qbytes, memory_order_relaxed);
    do {
        if (size > n->o.queue_bytes_total - cur)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(
        &n->qbytes, &cur, cur + size, memory_order_relaxed,
        memory_order_relaxed));
    return true;
}

static void
budget_give(troupe_node *n, size_t size)
{
    if (size > 0)
        atomic_fetch_sub_explicit(&n->qbytes, size, memory_order_relaxed);
}

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

/* The caller gives the entry's bytes back to the node's budget. */
static struct qent
ring_pop(struct link *l)
{
    struct qent e = *ring_at(l, 0);
    l->qhead = (l->qhead + 1) % l->qcap;
    l->qlen--;
    l->qbytes -= e.size;
    return e;
}

/* Moves every queued message that drop() selects onto *list and gives
 * its bytes back to the node's budget; keeps the others in order. */
static void
ring_filter(struct link *l, bool (*drop)(const struct qent *, void *),
            void *arg, troupe_msg **list)
{
    uint32_t kept = 0, n = l->qlen;
    int64_t min = INT64_MAX;
    size_t bytes = 0, dropped = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct qent e = *ring_at(l, i);
        if (drop(&e, arg)) {
            set_next(e.m, *list);
            *list = e.m;
            dropped += e.size;
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
    budget_give(l->node, dropped);
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

/* Drops the frame being sent in parts (its pipe went away); the
 * transmitter's owner only. */
static void
abandon_big(struct link *l)
{
    troupe_free(l->big);
    l->big = NULL;
    fail_tickets(l, TROUPE_EUNREACHABLE);
    atomic_fetch_add(&l->node->gave_up, l->tx_count);
    l->tx_count = 0;
}

static void
send_frame(struct link *l, nng_msg *nm, enum tx_kind kind)
{
    l->tx_kind = kind;
    nng_aio_set_msg(l->tx, nm);
    nng_send_aio(l->sock, l->tx);
}

/* Sends the next PART of l->big; false when it could not be built. */
static bool
send_part(struct link *l)
{
    troupe_node *n = l->node;
    size_t chunk = l->big_len - l->big_off;
    if (chunk > TROUPE_WIRE_PART_MAX)
        chunk = TROUPE_WIRE_PART_MAX;
    size_t cap =
        troupe_wire_part_size(n->id, l->big_inc, l->big_len, l->big_off, chunk);
    nng_msg *nm;
    size_t len;
    if (nng_msg_alloc(&nm, cap) != 0)
        return false;
    if (troupe_wire_encode_part(n->id, l->big_inc, l->big, l->big_len,
                                l->big_off, chunk, nng_msg_body(nm), cap,
                                &len) != TROUPE_OK) {
        nng_msg_free(nm);
        return false;
    }
    nng_msg_chop(nm, cap - len);
    l->big_chunk = chunk;
    send_frame(l, nm, TX_PART);
    return true;
}

/* An nng message holding exactly the control frame c. */
static nng_msg *
ctl_msg(const troupe_wire_ctl *c)
{
    uint8_t buf[TROUPE_WIRE_CTL_MAX];
    size_t len;
    nng_msg *nm;
    if (troupe_wire_encode_ctl(c, buf, sizeof(buf), &len) != TROUPE_OK ||
        nng_msg_alloc(&nm, len) != 0)
        return NULL;
    memcpy(nng_msg_body(nm), buf, len);
    return nm;
}

/* Sends HELLO on the current pipe. Called with l->mu held; releases it.
 * True when a frame went to nng. */
static bool
send_hello(struct link *l)
{
    troupe_node *n = l->node;
    l->hello_due = false;
    l->hello_sent = mono_ms();
    l->hello_gen = l->pipe_gen;
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    memcpy(nonce, l->nonce, sizeof(nonce));
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_lock(&n->mu); /* advertise is set by listen */
    char url[TROUPE_WIRE_URL_MAX + 1] = "";
    if (n->advertise != NULL)
        snprintf(url, sizeof(url), "%s", n->advertise);
    pthread_mutex_unlock(&n->mu);
    pthread_mutex_lock(&l->mu);
    memcpy(l->hello_url, url, sizeof(url));
    pthread_mutex_unlock(&l->mu);
    troupe_wire_ctl c = {.type = TROUPE_FRAME_HELLO,
                         .sender = n->id,
                         .incarnation = n->inc,
                         .url = url,
                         .nonce = nonce};
    nng_msg *nm = ctl_msg(&c);
    if (nm == NULL)
        return false;
    send_frame(l, nm, TX_CTL);
    return true;
}

/*
 * Runs the transmitter; the caller owns it (tx_busy set). Sends one frame
 * and returns: the completion callback calls it again. Releases ownership
 * when there is nothing to send. Order on a new pipe: HELLO, then AUTH once
 * the HELLO_ACK checked, then data.
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
        bool live = l->pipe_up && l->pipe_id != l->dead_pipe;
        if (live && l->hello_due) {
            if (send_hello(l))
                return;
            /* the sweep retries the HELLO */
            pthread_mutex_lock(&l->mu);
            release_tx(l);
            return;
        }
        if (live && l->auth_due) {
            l->auth_due = false;
            nng_msg *nm;
            if (nng_msg_alloc(&nm, l->auth_len) != 0) {
                /* without AUTH the peer closes this pipe; the next one
                 * starts over */
                release_tx(l);
                return;
            }
            memcpy(nng_msg_body(nm), l->auth_frame, l->auth_len);
            pthread_mutex_unlock(&l->mu);
            send_frame(l, nm, TX_CTL);
            return;
        }
        if (l->big != NULL) {
            bool same = usable(l) && l->big_gen == l->pipe_gen;
            pthread_mutex_unlock(&l->mu);
            if (!same) {
                abandon_big(l);
                continue;
            }
            if (send_part(l))
                return;
            abandon_big(l);
            continue;
        }
        if (!usable(l) || l->qlen == 0) {
            release_tx(l);
            return;
        }
        int64_t wall = troupe_now_ms();
        uint64_t inc = l->peer_inc;
        uint32_t gen = l->pipe_gen;
        uint32_t k = 0;
        size_t taken = 0;
        troupe_msg *expired = NULL;
        size_t bytes = troupe_wire_data_overhead(n->id, inc, n->o.batch_max);
        while (l->qlen > 0 && k < n->o.batch_max) {
            struct qent *e = ring_at(l, 0);
            if (e->expires <= wall) {
                struct qent x = ring_pop(l);
                taken += x.size;
                set_next(x.m, expired);
                expired = x.m;
                continue;
            }
            if (k > 0 && bytes + e->size > n->o.frame_bytes)
                break;
            bytes += e->size;
            l->scratch[k] = ring_pop(l);
            taken += l->scratch[k++].size;
        }
        if (l->qlen == 0)
            l->min_expires = INT64_MAX;
        pthread_mutex_unlock(&l->mu);
        budget_give(n, taken);
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
        bool parts = bytes > TROUPE_WIRE_PART_MAX;
        nng_msg *nm = NULL;
        uint8_t *big = NULL;
        size_t len = 0;
        troupe_err e = TROUPE_ENOMEM;
        if (parts) {
            if ((big = troupe_malloc(bytes)) != NULL)
                e = troupe_wire_encode_data(n->id, inc, l->ptrs, k, big, bytes,
                                            &len);
        } else if (nng_msg_alloc(&nm, bytes) == 0) {
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
            troupe_free(big);
            fail_tickets(l, TROUPE_EUNREACHABLE);
            atomic_fetch_add(&n->gave_up, k);
            continue;
        }
        l->tx_count = k;
        if (!parts) {
            send_frame(l, nm, TX_DATA);
            return;
        }
        l->big = big;
        l->big_len = len;
        l->big_off = 0;
        l->big_gen = gen;
        l->big_inc = inc;
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
        if (l->tx_kind == TX_DATA) {
            fail_tickets(l, TROUPE_EUNREACHABLE);
            atomic_fetch_add(&n->gave_up, l->tx_count);
        } else if (l->tx_kind == TX_PART) {
            abandon_big(l);
        } else {
            pthread_mutex_lock(&l->mu);
            if (l->pipe_up && !l->acked)
                l->hello_due = true;
            pthread_mutex_unlock(&l->mu);
        }
    } else if (l->tx_kind == TX_DATA) {
        atomic_fetch_add(&n->frames_sent, 1);
        atomic_fetch_add(&n->msgs_sent, l->tx_count);
        l->ntix = 0;
    } else if (l->tx_kind == TX_PART) {
        l->big_off += l->big_chunk;
        if (l->big_off == l->big_len) {
            troupe_free(l->big);
            l->big = NULL;
            atomic_fetch_add(&n->frames_sent, 1);
            atomic_fetch_add(&n->msgs_sent, l->tx_count);
            l->ntix = 0;
        }
    }
    link_pump(l);
}

/* ---- links ---- */

static void
link_free(struct link *l)
{
    if (l == NULL)
        return;
    if (l->tx != NULL) {
        /* a send begun after the aio was stopped never completes and
         * leaves its message here */
        nng_msg *left = nng_aio_get_msg(l->tx);
        if (left != NULL)
            nng_msg_free(left);
        nng_aio_free(l->tx);
    }
    if (l->rx != NULL)
        nng_aio_free(l->rx);
    pthread_mutex_destroy(&l->mu);
    troupe_free(l->q);
    troupe_free(l->asks);
    troupe_free(l->tix);
    troupe_free(l->scratch);
    troupe_free(l->ptrs);
    troupe_free(l->big);
    troupe_free(l->auth_frame);
    troupe_free(l->url);
    troupe_free(l);
}

static void
link_unref(struct link *l)
{
    if (l != NULL && atomic_fetch_sub(&l->refs, 1) == 1)
        link_free(l);
}

static void
link_pipe_ev(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct link *l = arg;
    bool kick = false, cancel = false;
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    bool fresh =
        ev == NNG_PIPE_EV_ADD_POST && troupe__auth_nonce(nonce) == TROUPE_OK;
    pthread_mutex_lock(&l->mu);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        l->pipe_up = true;
        l->acked = false;
        l->auth_due = false;
        l->pipe_gen++;
        l->pipe_id = (uint32_t)nng_pipe_id(p);
        l->pipe_since = mono_ms();
        /* without a nonce no HELLO can be said: the pipe idles until the
         * handshake timeout closes it (sweep), and the dialer redials */
        l->hello_due = fresh;
        if (fresh)
            memcpy(l->nonce, nonce, sizeof(nonce));
        if (fresh && !l->tx_busy) {
            l->tx_busy = true;
            kick = true;
        }
    } else if (ev == NNG_PIPE_EV_REM_POST &&
               l->pipe_id == (uint32_t)nng_pipe_id(p)) {
        if (usable(l))
            l->down_since = mono_ms();
        l->pipe_up = false;
        l->acked = false;
        l->hello_due = false;
        l->auth_due = false;
        l->pipe_id = 0;
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

/* The link to `peer` with a reference the caller releases (link_unref),
 * or NULL. */
static struct link *
route(troupe_node *n, uint32_t peer)
{
    if (peer == 0)
        return NULL;
    pthread_mutex_lock(&n->mu);
    struct link *l = find_peer(n, peer, NULL);
    if (l != NULL)
        atomic_fetch_add(&l->refs, 1);
    pthread_mutex_unlock(&n->mu);
    return l;
}

static struct conn *
conn_find(troupe_node *n, uint32_t pipe)
{
    for (uint32_t i = 0; i < n->n_conns; i++)
        if (n->conns[i].pipe == pipe)
            return &n->conns[i];
    return NULL;
}

/* The authenticated inbox conn of node `peer`, or NULL. */
static struct conn *
conn_of_peer(troupe_node *n, uint32_t peer, const struct conn *except)
{
    for (uint32_t i = 0; i < n->n_conns; i++)
        if (&n->conns[i] != except && n->conns[i].st == CONN_AUTHED &&
            n->conns[i].peer == peer)
            return &n->conns[i];
    return NULL;
}

/* Marks a conn for the sweep to close; its frames are dropped from now on.
 * Under n->mu. */
static void
conn_close(troupe_node *n, struct conn *c, bool now)
{
    if (c->st == CONN_CLOSING)
        return;
    if (c->st != CONN_AUTHED)
        n->n_pending--;
    c->st = CONN_CLOSING;
    c->close_now = now;
    c->since = mono_ms();
    atomic_fetch_add(&n->refused, 1);
}

static bool
same_inet(const struct sockaddr_storage *ss, const nng_sockaddr *na)
{
    if (ss->ss_family == AF_INET && na->s_family == NNG_AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        return a->sin_port == na->s_in.sa_port &&
               a->sin_addr.s_addr == na->s_in.sa_addr;
    }
    if (ss->ss_family == AF_INET6 && na->s_family == NNG_AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        return a->sin6_port == na->s_in6.sa_port &&
               memcmp(&a->sin6_addr, na->s_in6.sa_addr, 16) == 0;
    }
    return false;
}

/* The descriptor of a tcp or tls pipe's socket: the one of ours whose two
 * addresses are the pipe's. -1 for other transports or when none is. */
static int
pipe_fd(nng_pipe p)
{
    nng_sockaddr la, ra;
    if (nng_pipe_get_addr(p, NNG_OPT_LOCADDR, &la) != 0 ||
        nng_pipe_get_addr(p, NNG_OPT_REMADDR, &ra) != 0 ||
        (la.s_family != NNG_AF_INET && la.s_family != NNG_AF_INET6))
        return -1;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int fd = atoi(e->d_name);
        struct sockaddr_storage a, b;
        socklen_t al = sizeof(a), bl = sizeof(b);
        if (fd != dirfd(d) &&
            getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
            same_inet(&a, &la) &&
            getpeername(fd, (struct sockaddr *)&b, &bl) == 0 &&
            same_inet(&b, &ra))
            found = fd;
    }
    closedir(d);
    return found;
}

/* Stops a listener from accepting without closing its pipes (nng would
 * close them itself, which end_pipe explains is unsafe): its socket is
 * shut down for reading, so the kernel refuses new connections at once and
 * nng's accept fails until the inbox is closed. An inproc listener, whose
 * pipes have no such hazard, is closed. */
static void
stop_listener(nng_listener l)
{
    nng_sockaddr la;
    if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &la) != 0)
        return;
    if (la.s_family == NNG_AF_INPROC) {
        nng_listener_close(l);
        return;
    }
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int fd = atoi(e->d_name), acc = 0;
        socklen_t sl = sizeof(acc);
        struct sockaddr_storage a;
        socklen_t al = sizeof(a);
        if (fd == dirfd(d) ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl) != 0 || !acc ||
            getsockname(fd, (struct sockaddr *)&a, &al) != 0)
            continue;
        bool same = same_inet(&a, &la);
        if (a.ss_family == AF_UNIX && la.s_family == NNG_AF_IPC) {
            const struct sockaddr_un *u = (const struct sockaddr_un *)&a;
            same = strncmp(u->sun_path, la.s_ipc.sa_path,
                           sizeof(u->sun_path)) == 0;
        }
        if (same) {
            shutdown(fd, SHUT_RD);
            break;
        }
    }
    closedir(d);
}

/*
 * Ends a started pipe. nng 1.5.2 can wedge for good when it closes a
 * tcp, tls or ipc pipe itself while a message is arriving on it (fixed
 * upstream after 1.5.2, "tcp: Finish receive aio on close"): the receive
 * it re-arms after the close never completes, pipe teardown waits for it,
 * and every later teardown in the process (nng_close included) waits
 * behind that one, so a peer that keeps sending while we refuse it could
 * stop this node from ever shutting down. A pipe whose peer went away is
 * torn down from the receive path instead, which is safe; so a tcp or tls
 * pipe is ended by shutting down its socket, and nng, seeing the end of
 * the stream, closes it. Other transports are closed directly (inproc has
 * no such path; ipc peers are local users of the socket file).
 */
static void
end_pipe(uint32_t id)
{
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = id;
    int fd = pipe_fd(p);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    else
        nng_pipe_close(p);
}

/*
 * Our link was refused (or the peer failed its proof): remember why for
 * connect_wait, send nothing more on that pipe and end it ourselves (so
 * that the refusing side's close meets no send of ours: nng 1.5.2 loses
 * the message of a send that races its pipe's close), and redial only
 * after reconnect_max_ms. No lock held.
 */
static void
link_refuse(struct link *l, uint32_t pipe, troupe_err why)
{
    bool slow = false;
    pthread_mutex_lock(&l->mu);
    l->refused = why;
    if (l->pipe_id == pipe) {
        if (usable(l))
            l->down_since = mono_ms();
        l->dead_pipe = pipe;
        l->acked = false;
        l->hello_due = false;
        l->auth_due = false;
    }
    slow = !l->backoff;
    l->backoff = true;
    nng_dialer d = l->dialer;
    pthread_mutex_unlock(&l->mu);
    if (slow)
        nng_dialer_set_ms(d, NNG_OPT_RECONNMINT,
                          (nng_duration)l->node->o.reconnect_max_ms);
    end_pipe(pipe);
}

/* A HELLO_ACK that checked arrived on link l's current pipe (generation
 * gen); auth holds our AUTH for it. Takes node->mu, then link locks. */
static void
link_acked(struct link *l, const troupe_frame_hdr *h, uint32_t gen,
           uint8_t *auth, size_t auth_len)
{
    troupe_node *n = l->node;
    troupe_msg *stale = NULL, *moved = NULL;
    struct ask_ent *moved_asks = NULL, *failed = NULL;
    bool kick = false;
    pthread_mutex_lock(&n->mu);
    if (l->retired) {
        pthread_mutex_unlock(&n->mu);
        troupe_free(auth);
        return;
    }
    /* peer is written under both locks, so reading it under either is
     * safe. */
    if ((l->peer != 0 && l->peer != h->sender) || h->sender == n->id) {
        if (h->sender != n->id)
            node_log(n, "%s answered as node %u, expected %u", l->url,
                     h->sender, l->peer);
        pthread_mutex_lock(&l->mu);
        l->answered = h->sender;
        pthread_mutex_unlock(&l->mu);
        l->retired = true;
        pthread_mutex_unlock(&n->mu);
        troupe_free(auth);
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
            if (!l->dynamic)
                other->dynamic = false; /* someone asked for this peer */
            pthread_mutex_unlock(&n->mu);
            troupe_free(auth);
            return;
        }
        other->retired = true;
        if (!other->dynamic)
            l->dynamic = false; /* it replaces a link someone asked for */
    }
    pthread_mutex_lock(&l->mu);
    l->peer = h->sender;
    l->answered = h->sender;
    l->refused = TROUPE_OK;
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
    bool current = l->pipe_up && l->pipe_gen == gen;
    bool fast = false;
    if (current) {
        fast = l->backoff;
        l->backoff = false;
        troupe_free(l->auth_frame);
        l->auth_frame = auth;
        l->auth_len = auth_len;
        auth = NULL;
        l->acked = true;
        l->auth_due = true;
        l->ever_up = true;
    }
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
        /* its bytes went back to the budget when it left the other
         * ring; they are taken again without a check (they fitted) */
        if (ring_reserve(l, n->o.queue_cap) == TROUPE_OK) {
            atomic_fetch_add(&n->qbytes, size);
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
    if (usable(l) && (l->auth_due || l->qlen > 0) && !l->tx_busy) {
        l->tx_busy = true;
        kick = true;
    }
    nng_dialer d = l->dialer;
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_unlock(&n->mu);
    if (fast)
        nng_dialer_set_ms(d, NNG_OPT_RECONNMINT,
                          (nng_duration)n->o.reconnect_min_ms);
    troupe_free(auth);
    give_up(n, stale);
    give_up(n, overflow);
    asks_fail(n, failed, TROUPE_EUNREACHABLE);
    if (kick)
        link_pump(l);
}

/* A HELLO_ACK arrived on pipe `pipe` of link l: check it, make our AUTH. */
static void
link_ack(struct link *l, const troupe_frame_hdr *h, uint32_t pipe)
{
    troupe_node *n = l->node;
    pthread_mutex_lock(&l->mu);
    bool current = l->pipe_up && l->pipe_id == pipe && !l->acked &&
                   l->hello_gen == l->pipe_gen;
    uint32_t gen = l->pipe_gen, expected = l->expect ? l->peer : 0;
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    char url[TROUPE_WIRE_URL_MAX + 1];
    memcpy(nonce, l->nonce, sizeof(nonce));
    memcpy(url, l->hello_url, sizeof(url));
    pthread_mutex_unlock(&l->mu);
    if (!current)
        return;
    if (h->sender == n->id) {
        /* we dialed ourselves: retired without a proof to check */
        link_acked(l, h, gen, NULL, 0);
        return;
    }
    if (expected != 0 && h->sender != expected) {
        node_log(n, "%s answered as node %u, expected %u: refused", l->url,
                 h->sender, expected);
        atomic_fetch_add(&n->auth_failed, 1);
        link_refuse(l, pipe, TROUPE_EAUTH);
        return;
    }
    troupe__transcript t = {.role = TROUPE__AUTH_LISTENER,
                            .dialer = n->id,
                            .listener = h->sender,
                            .dialer_inc = n->inc,
                            .listener_inc = h->incarnation,
                            .dialer_nonce = nonce,
                            .listener_nonce = h->nonce,
                            .url = url,
                            .url_len = strlen(url)};
    const char *why = "";
    if (troupe__auth_check(n->auth, &t, h->sender, &h->proof, &why) !=
        TROUPE_OK) {
        node_log(n, "node %u at %s did not prove its identity: %s", h->sender,
                 l->url, why);
        atomic_fetch_add(&n->auth_failed, 1);
        link_refuse(l, pipe, TROUPE_EAUTH);
        return;
    }
    t.role = TROUPE__AUTH_DIALER;
    troupe__proof pr;
    uint8_t *auth = troupe_malloc(TROUPE_WIRE_CTL_MAX);
    size_t len = 0;
    troupe_wire_ctl c = {
        .type = TROUPE_FRAME_AUTH, .sender = n->id, .incarnation = n->inc};
    if (auth == NULL || troupe__auth_prove(n->auth, &t, &pr) != TROUPE_OK ||
        (c.proof = pr.p, troupe_wire_encode_ctl(&c, auth, TROUPE_WIRE_CTL_MAX,
                                                &len)) != TROUPE_OK) {
        /* no AUTH: the peer times this pipe out and we start over */
        troupe_free(auth);
        return;
    }
    link_acked(l, h, gen, auth, len);
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
        uint32_t pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(nm));
        troupe_frame_hdr h;
        troupe_err e = troupe_wire_decode_frame(
            NULL, nng_msg_body(nm), nng_msg_len(nm), &h, NULL, NULL);
        if (e == TROUPE_OK && h.type == TROUPE_FRAME_HELLO_ACK) {
            link_ack(l, &h, pipe);
        } else if (e == TROUPE_OK && h.type == TROUPE_FRAME_REFUSE) {
            node_log(n, "node %u at %s refused us: %.*s (%s)", h.sender, l->url,
                     (int)h.reason_len, h.reason,
                     troupe_err_name(h.refuse_err));
            link_refuse(l, pipe, h.refuse_err);
        } else {
            uint64_t v;
            if (e != TROUPE_OK &&
                troupe_wire_frame_version(nng_msg_body(nm), nng_msg_len(nm),
                                          &v) == TROUPE_OK &&
                v != TROUPE_WIRE_VERSION)
                node_log(n, "%s speaks wire version %llu, this node %u", l->url,
                         (unsigned long long)v, TROUPE_WIRE_VERSION);
            atomic_fetch_add(&n->bad_frames, 1);
        }
        nng_msg_free(nm);
    }
    if (!atomic_load(&n->closing))
        nng_recv_aio(l->sock, l->rx);
}

/* A client TLS configuration for a link; it checks that the server's
 * certificate names `peer` when peer is not 0. */
static troupe_err
tls_config(troupe_node *n, nng_tls_mode mode, uint32_t peer,
           nng_tls_config **out)
{
    if (!troupe__auth_has_certs(n->auth)) {
        fprintf(stderr, "troupe: tls+tcp:// needs tls_cert, tls_key and "
                        "tls_ca\n");
        return TROUPE_EINVAL;
    }
    nng_tls_config *cfg;
    int rv = nng_tls_config_alloc(&cfg, mode);
    if (rv != 0)
        return nng_err(rv, "tls config");
    char name[32];
    snprintf(name, sizeof(name), "troupe-node-%u", peer);
    if ((rv = nng_tls_config_own_cert(cfg, troupe__auth_cert_pem(n->auth),
                                      troupe__auth_key_pem(n->auth), NULL)) ||
        (rv = nng_tls_config_ca_chain(cfg, troupe__auth_ca_pem(n->auth),
                                      NULL)) ||
        (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) ||
        (peer != 0 && (rv = nng_tls_config_server_name(cfg, name)))) {
        nng_tls_config_free(cfg);
        return nng_err(rv, "tls config");
    }
    *out = cfg;
    return TROUPE_OK;
}

/*
 * Creates a link to `url` (peer: the expected node id, or 0) with its
 * socket, aios and dialer, not yet started, holding one reference (the
 * list's). No lock held.
 */
static troupe_err
link_create(troupe_node *n, const char *url, uint32_t peer, struct link **out)
{
    struct link *l = troupe_calloc(1, sizeof(*l));
    if (l == NULL)
        return TROUPE_ENOMEM;
    l->node = n;
    atomic_init(&l->refs, 1);
    l->peer = peer;
    l->expect = peer != 0;
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
    nng_tls_config *tls = NULL;
    troupe_err e;
    if (is_tls_url(url) &&
        (e = tls_config(n, NNG_TLS_MODE_CLIENT, peer, &tls)) != TROUPE_OK) {
        link_free(l);
        return e;
    }
    int rv;
    const char *what = "pair1 open";
    if ((rv = nng_pair1_open(&l->sock)) != 0) {
        if (tls != NULL)
            nng_tls_config_free(tls);
        link_free(l);
        return nng_err(rv, what);
    }
    l->sock_open = true;
    if ((rv = nng_socket_set_size(l->sock, NNG_OPT_RECVMAXSZ, LINK_RECV_MAX)) ||
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
    } else if (tls != NULL && (rv = nng_dialer_set_ptr(
                                   l->dialer, NNG_OPT_TLS_CONFIG, tls)) != 0) {
        what = "dialer tls";
    }
    if (tls != NULL)
        nng_tls_config_free(tls); /* the dialer holds its own reference */
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
    pthread_mutex_lock(&l->mu);
    l->dial_started = mono_ms();
    pthread_mutex_unlock(&l->mu);
    int rv = nng_dialer_start(l->dialer, NNG_FLAG_NONBLOCK);
    if (rv != 0)
        nng_err(rv, "dialer start");
}

/* Closes a link taken off node->links (or all of them at destroy): no nng
 * callback runs on it afterwards. Gives up what it holds and drops the
 * list's reference. No lock held. */

/* Waits until pred(arg) or ms pass; for teardown only. */
static void
wait_for(bool (*pred)(void *), void *arg, int64_t ms)
{
    int64_t end = mono_ms() + ms;
    while (!pred(arg) && mono_ms() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

struct pipe_wait {
    struct link *l;
    uint32_t pipe;
};

/* The pipe has gone (a redial may have brought a new one meanwhile). */
static bool
link_pipe_ended(void *arg)
{
    struct pipe_wait *w = arg;
    pthread_mutex_lock(&w->l->mu);
    bool gone = w->l->pipe_id != w->pipe;
    pthread_mutex_unlock(&w->l->mu);
    return gone;
}

/*
 * Stops a link: nothing more is sent, its pipe is ended (end_pipe says
 * why not by nng_close) and, once it is gone, its dialer is closed so that
 * it cannot redial (nng 1.5.2 redials at once about half the time whatever
 * the reconnect time: its random back-off is computed on a signed int).
 * The socket itself is closed by the caller. No lock held.
 */
static void
link_quiesce(struct link *l)
{
    pthread_mutex_lock(&l->mu);
    l->closed = true; /* watch_dialers replaces no dialer from now on */
    uint32_t pipe = l->pipe_id;
    nng_dialer d = l->dialer;
    pthread_mutex_unlock(&l->mu);
    if (pipe != 0) {
        struct pipe_wait w = {l, pipe};
        end_pipe(pipe);
        wait_for(link_pipe_ended, &w, PIPE_END_MS);
    }
    nng_dialer_close(d);
}

static void
link_close(troupe_node *n, struct link *l)
{
    troupe_msg *rest = NULL;
    struct ask_ent *asks = NULL;
    link_quiesce(l);
    nng_close(l->sock);
    nng_aio_stop(l->tx);
    nng_aio_stop(l->rx);
    pthread_mutex_lock(&l->mu);
    ring_filter(l, drop_all, NULL, &rest);
    asks_drain(l, ASKS_ALL, 0, &asks);
    pthread_mutex_unlock(&l->mu);
    /* the transmitter is idle now: nng's callbacks are done */
    if (l->big != NULL)
        abandon_big(l);
    give_up(n, rest);
    asks_fail(n, asks, TROUPE_EUNREACHABLE);
    link_unref(l);
}

/* ---- receiving ---- */

static troupe_err
node_send(troupe_node *n, troupe_msg *m);

/* What the inbox knows about the pipe a frame came from. */
struct rx_ctx {
    troupe_node *n;
    uint32_t pipe;
    uint32_t peer;     /* the authenticated node */
    struct link *link; /* our link to it (a reference), or NULL */
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
    troupe_msg *m = *mp; /* left in *mp: destroyed by the decoder */
    if (c->h.sender != c->peer) {
        atomic_fetch_add(&n->spoofed, 1);
        return;
    }
    if (c->h.incarnation != 0 && c->h.incarnation != n->inc) {
        c->stale = true;
        return;
    }
    atomic_fetch_add(&n->msgs_recv, 1);
    /* The runtime trusts from.node to name the sending node (replies are
     * matched on it): an envelope claiming another node's actor is
     * dropped; one with no sender is stamped with the peer's id and stays
     * "none" (slot 0). */
    if (m->from.node != c->peer) {
        if (!troupe_addr_is_none(m->from)) {
            atomic_fetch_add(&n->spoofed, 1);
            return;
        }
        m->from.node = c->peer;
    }
    if (m->to.node != n->id) {
        atomic_fetch_add(&n->deliver_fail, 1);
        return;
    }
    if (m->to.slot == TROUPE_NODE_SLOT) {
        system_request(n, m);
        return;
    }
    if ((m->flags & TROUPE_MSG_REPLY) && c->link != NULL) {
        pthread_mutex_lock(&c->link->mu);
        struct ask_ent *e = asks_take(c->link, m->corr, m->to);
        pthread_mutex_unlock(&c->link->mu);
        troupe_free(e);
    }
    if (troupe_runtime_deliver(n->rt, mp) != TROUPE_OK)
        atomic_fetch_add(&n->deliver_fail, 1);
}

/* Sends a control frame on one inbox pipe, without blocking: if it cannot
 * be queued, the peer's HELLO retry (or its own timeout) covers it. */
static void
inbox_send(troupe_node *n, uint32_t pipe, const troupe_wire_ctl *c)
{
    nng_msg *nm = ctl_msg(c);
    if (nm == NULL)
        return;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = pipe;
    nng_msg_set_pipe(nm, p);
    if (nng_sendmsg(n->inbox, nm, NNG_FLAG_NONBLOCK) != 0)
        nng_msg_free(nm);
}

/*
 * Refuses an inbox pipe: tells the peer why (REFUSE) and lets the sweep
 * close it after a short linger, so the REFUSE gets out first. Frames from
 * it are dropped from now on. No lock held.
 */
static void
refuse(troupe_node *n, uint32_t pipe, troupe_err err, const char *reason)
{
    troupe_wire_ctl c = {.type = TROUPE_FRAME_REFUSE,
                         .sender = n->id,
                         .incarnation = n->inc,
                         .err = err,
                         .reason = reason};
    inbox_send(n, pipe, &c);
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, pipe);
    if (cn != NULL)
        conn_close(n, cn, false);
    pthread_mutex_unlock(&n->mu);
}

static troupe__transcript
conn_transcript(const troupe_node *n, const struct conn *c,
                enum troupe__auth_role role)
{
    return (troupe__transcript){.role = role,
                                .dialer = c->peer,
                                .listener = n->id,
                                .dialer_inc = c->inc,
                                .listener_inc = n->inc,
                                .dialer_nonce = c->nonce_d,
                                .listener_nonce = c->nonce_l,
                                .url = c->url,
                                .url_len = c->url_len};
}

static void
on_hello(troupe_node *n, uint32_t pipe, const troupe_frame_hdr *h)
{
    /* Answered even when it is our own (we dialed our own URL): the ack
     * then retires that link. */
    if (h->sender != n->id && n->n_peers > 0 &&
        allowed_peer(n, h->sender) == NULL) {
        node_log(n, "refused node %u: not in the allow-list", h->sender);
        refuse(n, pipe, TROUPE_EAUTH, "node id not allowed here");
        return;
    }
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    if (troupe__auth_nonce(nonce) != TROUPE_OK)
        return; /* the handshake timeout closes the pipe */
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, pipe);
    if (cn == NULL || cn->st == CONN_CLOSING) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    bool again = cn->st == CONN_CHALLENGED && cn->peer == h->sender &&
                 cn->inc == h->incarnation &&
                 memcmp(cn->nonce_d, h->nonce, TROUPE_WIRE_NONCE_LEN) == 0;
    if (cn->st != CONN_NEW && !again) {
        pthread_mutex_unlock(&n->mu);
        refuse(n, pipe, TROUPE_EPROTO, "unexpected HELLO");
        return;
    }
    if (cn->st == CONN_NEW) {
        cn->st = CONN_CHALLENGED;
        cn->peer = h->sender;
        cn->inc = h->incarnation;
        memcpy(cn->nonce_d, h->nonce, TROUPE_WIRE_NONCE_LEN);
        memcpy(cn->nonce_l, nonce, TROUPE_WIRE_NONCE_LEN);
        if (h->url_len > 0)
            memcpy(cn->url, h->url, h->url_len);
        cn->url[h->url_len] = '\0';
        cn->url_len = h->url_len;
    }
    struct conn snap = *cn;
    snap.part = NULL;
    pthread_mutex_unlock(&n->mu);
    troupe__transcript t = conn_transcript(n, &snap, TROUPE__AUTH_LISTENER);
    troupe__proof pr;
    if (troupe__auth_prove(n->auth, &t, &pr) != TROUPE_OK)
        return;
    troupe_wire_ctl c = {.type = TROUPE_FRAME_HELLO_ACK,
                         .sender = n->id,
                         .incarnation = n->inc,
                         .nonce = snap.nonce_l,
                         .proof = pr.p};
    inbox_send(n, pipe, &c);
}

/*
 * Makes room for one more link when max_peers are there: the link made on
 * our own (a dial-back) that has been down the longest goes to the
 * graveyard, which the sweep closes (a link is closed off nng's threads).
 * A link that is up, or that someone asked for, is never evicted. Under
 * n->mu; false when there is no such link.
 */
static bool
evict_down_link(troupe_node *n)
{
    struct link **victim = NULL;
    int64_t oldest = INT64_MAX;
    for (struct link **pp = &n->links; *pp != NULL; pp = &(*pp)->next) {
        struct link *l = *pp;
        if (!l->dynamic && !l->retired)
            continue;
        pthread_mutex_lock(&l->mu);
        bool down = !usable(l);
        int64_t since = l->down_since;
        pthread_mutex_unlock(&l->mu);
        if (down && (l->retired || since < oldest)) {
            victim = pp;
            oldest = l->retired ? INT64_MIN : since;
        }
    }
    if (victim == NULL)
        return false;
    struct link *l = *victim;
    *victim = l->next;
    l->retired = true; /* its callbacks leave it alone now */
    l->next = n->graveyard;
    n->graveyard = l;
    n->n_links--;
    return true;
}

/* Dials `url` for `peer` once it has authenticated, unless a link to it
 * exists or the node has no room. No lock held. */
static void
dial_back(troupe_node *n, uint32_t peer, const char *url)
{
    struct link *l;
    troupe_err e = link_create(n, url, peer, &l);
    if (e != TROUPE_OK)
        return;
    bool start = false, full = false;
    pthread_mutex_lock(&n->mu);
    if (!atomic_load(&n->closing) && find_peer(n, peer, NULL) == NULL) {
        if (n->n_links >= n->o.max_peers && !evict_down_link(n)) {
            full = true;
        } else {
            l->dynamic = true;
            l->next = n->links;
            n->links = l;
            n->n_links++;
            start = true;
        }
    }
    pthread_mutex_unlock(&n->mu);
    if (start) {
        link_start(l);
        return;
    }
    if (full)
        node_log(n, "not dialing node %u back: %u links already (max_peers)",
                 peer, n->o.max_peers);
    nng_close(l->sock);
    link_unref(l);
}

static void
on_auth(troupe_node *n, uint32_t pipe, const troupe_frame_hdr *h)
{
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, pipe);
    if (cn == NULL || cn->st == CONN_CLOSING) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (cn->st != CONN_CHALLENGED || h->sender != cn->peer ||
        h->incarnation != cn->inc) {
        pthread_mutex_unlock(&n->mu);
        refuse(n, pipe, TROUPE_EPROTO, "AUTH does not follow its HELLO");
        return;
    }
    struct conn snap = *cn;
    snap.part = NULL;
    pthread_mutex_unlock(&n->mu);
    troupe__transcript t = conn_transcript(n, &snap, TROUPE__AUTH_DIALER);
    const char *why = "";
    if (troupe__auth_check(n->auth, &t, snap.peer, &h->proof, &why) !=
        TROUPE_OK) {
        atomic_fetch_add(&n->auth_failed, 1);
        node_log(n, "refused node %u: %s", snap.peer, why);
        refuse(n, pipe, TROUPE_EAUTH, why);
        return;
    }
    uint32_t replaced[8];
    unsigned n_replaced = 0;
    const char *no = NULL;
    troupe_err no_err = TROUPE_EAUTH;
    char url[TROUPE_WIRE_URL_MAX + 1] = "";
    pthread_mutex_lock(&n->mu);
    cn = conn_find(n, pipe);
    if (cn == NULL || cn->st != CONN_CHALLENGED) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    /* One node id, one node: another incarnation holding the id is
     * either the same node restarted (it proved who it is: the old
     * connection is replaced) or, without proofs, someone else. Two
     * connections of one incarnation are that node's two links to us. */
    uint32_t authed = 0;
    for (uint32_t i = 0; i < n->n_conns; i++) {
        struct conn *o = &n->conns[i];
        if (o->st != CONN_AUTHED)
            continue;
        authed++;
        if (o->peer != cn->peer || o->inc == cn->inc)
            continue;
        if (n->open) {
            no = "node id held by another connection";
            break;
        }
        conn_close(n, o, true);
        authed--;
        if (n_replaced < 8)
            replaced[n_replaced++] = o->pipe;
    }
    if (no == NULL && authed >= 2 * n->o.max_peers) {
        no = "too many peers";
        no_err = TROUPE_EFULL;
    }
    if (no == NULL) {
        cn->st = CONN_AUTHED;
        n->n_pending--;
        const troupe_node_peer *ap = allowed_peer(n, cn->peer);
        /* with an allow-list, only its URL is ever dialed */
        const char *back = n->n_peers > 0 ? (ap ? ap->url : "") : cn->url;
        bool have = find_peer(n, cn->peer, NULL) != NULL;
        for (struct link *l = n->links; l != NULL && !have; l = l->next)
            if (!l->retired && l->peer == 0 && strcmp(l->url, back) == 0)
                have = true; /* our own dial to that URL is on its way */
        if (!have)
            snprintf(url, sizeof(url), "%s", back);
        if (ap != NULL && ap->url != NULL && cn->url_len > 0 &&
            strcmp(ap->url, cn->url) != 0)
            node_log(n,
                     "node %u says it listens on %s; dialing %s (the "
                     "allow-list's)",
                     cn->peer, cn->url, ap->url);
    }
    uint32_t peer = cn->peer;
    pthread_mutex_unlock(&n->mu);
    if (no != NULL) {
        node_log(n, "refused node %u: %s", peer, no);
        refuse(n, pipe, no_err, no);
        return;
    }
    for (unsigned i = 0; i < n_replaced; i++) {
        node_log(n,
                 "node %u connected again as a new incarnation: its old "
                 "connection is closed",
                 peer);
        end_pipe(replaced[i]);
    }
    if (url[0] != '\0' && peer != n->id)
        dial_back(n, peer, url);
}

static void
deliver_frame(struct rx_ctx *c, const void *buf, size_t len, bool whole);

/* A PART frame from an authenticated pipe: appends its chunk; the last one
 * makes the whole frame, which is then handled like any DATA frame. */
static void
on_part(struct rx_ctx *c)
{
    troupe_node *n = c->n;
    const troupe_frame_hdr *h = &c->h;
    if (h->sender != c->peer) {
        atomic_fetch_add(&n->spoofed, 1);
        refuse(n, c->pipe, TROUPE_EPROTO, "PART from another sender");
        return;
    }
    const char *bad = NULL;
    troupe_err bad_err = TROUPE_EPROTO;
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, c->pipe);
    if (cn == NULL || cn->st != CONN_AUTHED) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (cn->part == NULL) {
        if (h->part_offset != 0) {
            bad = "PART does not start at 0";
        } else if (h->part_total > n->o.reassembly_bytes - n->part_bytes) {
            bad = "reassembly budget exhausted";
            bad_err = TROUPE_EFULL;
        } else if ((cn->part = troupe_malloc(h->part_total)) == NULL) {
            bad = "out of memory";
            bad_err = TROUPE_ENOMEM;
        } else {
            n->part_bytes += h->part_total;
            cn->part_total = h->part_total;
            cn->part_len = 0;
        }
    } else if (h->part_total != cn->part_total ||
               h->part_offset != cn->part_len) {
        bad = "PART out of sequence";
    }
    if (bad != NULL) {
        pthread_mutex_unlock(&n->mu);
        node_log(n, "closing the connection of node %u: %s", c->peer, bad);
        refuse(n, c->pipe, bad_err, bad);
        return;
    }
    uint8_t *buf = cn->part;
    uint32_t off = cn->part_len, total = cn->part_total;
    cn->part_out = true;
    pthread_mutex_unlock(&n->mu);
    /* copied without the node lock: only this callback writes into part,
     * and a conn removed meanwhile leaves the buffer to us */
    memcpy(buf + off, h->chunk, h->chunk_len);
    bool done = false;
    pthread_mutex_lock(&n->mu);
    cn = conn_find(n, c->pipe);
    if (cn == NULL || cn->part != buf) {
        n->part_bytes -= total;
        pthread_mutex_unlock(&n->mu);
        troupe_free(buf);
        return;
    }
    cn->part_out = false;
    cn->part_len += (uint32_t)h->chunk_len;
    cn->part_at = mono_ms();
    if (cn->part_len == cn->part_total) {
        cn->part = NULL;
        n->part_bytes -= total;
        done = true;
    }
    pthread_mutex_unlock(&n->mu);
    if (done) {
        deliver_frame(c, buf, total, true);
        troupe_free(buf);
    }
}

/* Logs a frame of another wire version once per pipe and refuses it. */
static bool
other_version(troupe_node *n, uint32_t pipe, const void *buf, size_t len)
{
    uint64_t v;
    if (troupe_wire_frame_version(buf, len, &v) != TROUPE_OK ||
        v == TROUPE_WIRE_VERSION)
        return false;
    node_log(n,
             "refused a peer that speaks wire version %llu (this node "
             "speaks %u): an older or newer troupe",
             (unsigned long long)v, TROUPE_WIRE_VERSION);
    refuse(n, pipe, TROUPE_EPROTO, "wire version not spoken here");
    return true;
}

/* A frame from an authenticated pipe: DATA or PART as it came (`whole`
 * false), or the frame its PARTs made, which must be DATA. */
static void
deliver_frame(struct rx_ctx *c, const void *buf, size_t len, bool whole)
{
    troupe_node *n = c->n;
    c->stale = false;
    troupe_err e =
        troupe_wire_decode_frame(n->dec, buf, len, &c->h, inbox_msg, c);
    if (e != TROUPE_OK) {
        if (!other_version(n, c->pipe, buf, len))
            atomic_fetch_add(&n->bad_frames, 1);
    } else if (c->h.type == TROUPE_FRAME_DATA) {
        atomic_fetch_add(c->stale ? &n->stale_frames : &n->frames_recv, 1);
    } else if (c->h.type == TROUPE_FRAME_PART && !whole) {
        on_part(c);
    } else {
        atomic_fetch_add(&n->bad_frames, 1);
    }
}

/* One nng message from the inbox. */
static void
inbox_frame(troupe_node *n, nng_msg *nm)
{
    struct rx_ctx c = {.n = n,
                       .pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(nm))};
    const void *buf = nng_msg_body(nm);
    size_t len = nng_msg_len(nm);
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, c.pipe);
    enum conn_state st = cn ? cn->st : CONN_CLOSING;
    if (cn != NULL)
        c.peer = cn->peer;
    pthread_mutex_unlock(&n->mu);
    if (st == CONN_AUTHED) {
        c.link = route(n, c.peer);
        deliver_frame(&c, buf, len, false);
        link_unref(c.link);
        return;
    }
    if (st == CONN_CLOSING) {
        atomic_fetch_add(&n->unauth_frames, 1);
        return;
    }
    /* Not authenticated: validated only, never turned into messages. */
    troupe_err e = troupe_wire_decode_frame(n->dec, buf, len, &c.h, NULL, NULL);
    if (e != TROUPE_OK) {
        if (!other_version(n, c.pipe, buf, len))
            atomic_fetch_add(&n->bad_frames, 1);
    } else if (c.h.type == TROUPE_FRAME_HELLO) {
        on_hello(n, c.pipe, &c.h);
    } else if (c.h.type == TROUPE_FRAME_AUTH) {
        on_auth(n, c.pipe, &c.h);
    } else {
        atomic_fetch_add(&n->unauth_frames, 1);
    }
}

/*
 * Inbox pipes: ADD_PRE admits a pipe into the conns table (evicting the
 * oldest connection still in its handshake when max_pending are, refusing
 * the pipe when the table is full); REM_POST removes it.
 */
static void
inbox_pipe_ev(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    troupe_node *n = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    uint32_t evict = 0;
    bool reject = false;
    uint8_t *part = NULL;
    pthread_mutex_lock(&n->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        if (atomic_load(&n->closing)) {
            reject = true;
        } else if (n->n_pending >= n->o.max_pending) {
            struct conn *old = NULL;
            for (uint32_t i = 0; i < n->n_conns; i++) {
                struct conn *c = &n->conns[i];
                if ((c->st == CONN_NEW || c->st == CONN_CHALLENGED) &&
                    (old == NULL || c->since < old->since))
                    old = c;
            }
            if (old != NULL) {
                conn_close(n, old, true);
                old->close_issued = true;
                evict = old->pipe;
            }
        }
        if (!reject && n->n_conns >= n->conn_cap) {
            reject = true;
            atomic_fetch_add(&n->refused, 1);
        }
        if (!reject) {
            struct conn *c = &n->conns[n->n_conns++];
            memset(c, 0, sizeof(*c));
            c->pipe = id;
            c->st = CONN_NEW;
            c->since = mono_ms();
            n->n_pending++;
        }
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        struct conn *c = conn_find(n, id);
        if (c != NULL) {
            if (c->st == CONN_NEW || c->st == CONN_CHALLENGED)
                n->n_pending--;
            if (c->part != NULL && !c->part_out) {
                part = c->part;
                n->part_bytes -= c->part_total;
            }
            /* a buffer being copied into is freed by that copier */
            *c = n->conns[--n->n_conns];
        }
    }
    pthread_mutex_unlock(&n->mu);
    troupe_free(part);
    if (evict != 0)
        end_pipe(evict);
    if (reject)
        nng_pipe_close(p);
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
        inbox_frame(n, nm);
        nng_msg_free(nm);
    }
    if (!atomic_load(&n->closing))
        nng_recv_aio(n->inbox, n->inbox_rx);
}

/* ---- the sweep ---- */

static void
sweep(troupe_node *n)
{
    int64_t now = mono_ms(), wall = troupe_now_ms();
    troupe_msg *dropped = NULL;
    struct ask_ent *unreachable = NULL, *expired = NULL;
    struct link *kick[16];
    unsigned n_kick = 0;
    uint32_t unanswered[16];
    unsigned n_unanswered = 0;
    uint32_t *close_ids = n->sweep_close;
    unsigned n_close = 0, late = 0, stalled = 0;
    pthread_mutex_lock(&n->mu);
    struct link *reap = n->graveyard;
    n->graveyard = NULL;
    struct link **pp = &n->links;
    while (*pp != NULL) {
        struct link *l = *pp;
        pthread_mutex_lock(&l->mu);
        bool gone =
            l->retired || (l->dynamic && !usable(l) &&
                           now - l->down_since >= (int64_t)n->o.reap_ms);
        if (gone) {
            pthread_mutex_unlock(&l->mu);
            *pp = l->next;
            l->next = reap;
            reap = l;
            n->n_links--;
            /* a peer we cannot reach back at the URL it gave is dropped
             * as a whole: it reconnects if it is real */
            for (uint32_t i = 0; !l->retired && i < n->n_conns; i++)
                if (n->conns[i].st == CONN_AUTHED &&
                    n->conns[i].peer == l->peer)
                    conn_close(n, &n->conns[i], true);
            continue;
        }
        if (!usable(l) && now - l->down_since >= n->o.unreachable_ms) {
            ring_filter(l, drop_all, NULL, &dropped);
            asks_drain(l, ASKS_ALL, wall, &unreachable);
        } else {
            if (wall >= l->min_expires)
                ring_filter(l, drop_expired, &wall, &dropped);
            if (wall >= l->asks_min_deadline)
                asks_drain(l, ASKS_EXPIRED, wall, &expired);
        }
        /* A pipe whose HELLO is not answered within the handshake timeout
         * is ended, and the dialer redials: the peer may never have seen
         * it (nng 1.5.2 can leave an accepted connection unreported, see
         * watch_listeners). */
        if (l->pipe_up && l->pipe_id != l->dead_pipe && !l->acked &&
            now - l->pipe_since >= (int64_t)n->o.hello_timeout_ms &&
            n_unanswered < 16) {
            l->pipe_since = now;
            unanswered[n_unanswered++] = l->pipe_id;
        }
        if (l->pipe_up && l->pipe_id != l->dead_pipe && !l->acked &&
            !l->hello_due && now - l->hello_sent >= HELLO_RETRY_MS) {
            l->hello_due = true;
            if (!l->tx_busy && n_kick < 16) {
                l->tx_busy = true;
                kick[n_kick++] = l;
                atomic_fetch_add(&l->refs, 1);
            }
        }
        pthread_mutex_unlock(&l->mu);
        pp = &l->next;
    }
    for (uint32_t i = 0; i < n->n_conns; i++) {
        struct conn *c = &n->conns[i];
        if (c->close_issued)
            continue;
        bool close = false;
        if (c->st == CONN_CLOSING) {
            close = c->close_now || now - c->since >= REFUSE_LINGER_MS;
        } else if (c->st != CONN_AUTHED &&
                   now - c->since >= (int64_t)n->o.hello_timeout_ms) {
            conn_close(n, c, true);
            close = true;
            late++;
        } else if (c->st == CONN_AUTHED && c->part != NULL &&
                   now - c->part_at >= (int64_t)n->o.frame_timeout_ms) {
            conn_close(n, c, true);
            close = true;
            stalled++;
        }
        if (close) {
            c->close_issued = true;
            close_ids[n_close++] = c->pipe;
        }
    }
    pthread_mutex_unlock(&n->mu);
    if (late > 0)
        node_log(n,
                 "closed %u connection(s) that did not complete the "
                 "handshake within %u ms",
                 late, n->o.hello_timeout_ms);
    if (stalled > 0)
        node_log(n,
                 "closed %u connection(s) whose frame in parts stalled "
                 "for %u ms",
                 stalled, n->o.frame_timeout_ms);
    for (unsigned i = 0; i < n_close; i++)
        end_pipe(close_ids[i]);
    for (unsigned i = 0; i < n_unanswered; i++)
        end_pipe(unanswered[i]);
    while (reap != NULL) {
        struct link *next = reap->next;
        atomic_fetch_add(&n->reaped, 1);
        link_close(n, reap);
        reap = next;
    }
    give_up(n, dropped);
    asks_fail(n, unreachable, TROUPE_EUNREACHABLE);
    /* The runtime times these out on its own as well; whichever reply
     * comes first completes the ask, the other is dropped as late. */
    asks_fail(n, expired, TROUPE_ETIMEDOUT);
    for (unsigned i = 0; i < n_kick; i++) {
        link_pump(kick[i]);
        link_unref(kick[i]);
    }
}

static void
watch_listeners(troupe_node *n, int64_t now);

static void *
sweeper_main(void *arg)
{
    troupe_node *n = arg;
    pthread_mutex_lock(&n->mu);
    while (!atomic_load(&n->closing)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&n->sweep_cv, &n->mu, &ts);
        if (atomic_load(&n->closing))
            break;
        pthread_mutex_unlock(&n->mu);
        sweep(n);
        watch_listeners(n, mono_ms());
        pthread_mutex_lock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

/* ---- sending ---- */

/* Queues m for its node's link. Consumes m. */
static troupe_err
node_send(troupe_node *n, troupe_msg *m)
{
    troupe_err e;
    struct link *l = NULL;
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
    if ((l = route(n, m->to.node)) == NULL) {
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
    if (l->qlen >= n->o.queue_cap || size > n->o.queue_bytes - l->qbytes ||
        !budget_take(n, size)) {
        pthread_mutex_unlock(&l->mu);
        atomic_fetch_add(&n->full, 1);
        e = TROUPE_EFULL;
        goto fail;
    }
    if ((e = ring_reserve(l, n->o.queue_cap)) != TROUPE_OK) {
        pthread_mutex_unlock(&l->mu);
        budget_give(n, size);
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
    link_unref(l);
    return TROUPE_OK;
fail:
    link_unref(l);
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
    uint8_t r[TROUPE_WIRE_NONCE_LEN];
    uint64_t x = 0;
    if (troupe__auth_nonce(r) == TROUPE_OK) {
        memcpy(&x, r, sizeof(x));
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
    }
    return x ? x : 1;
}

static bool
url_ok(const char *url)
{
    return url != NULL && url[0] != '\0' && strlen(url) <= TROUPE_WIRE_URL_MAX;
}

/* Fills in defaults and checks every option. */
static troupe_err
opts_check(troupe_node_opts *o, uint32_t self)
{
    if (o->queue_cap == 0)
        o->queue_cap = 65536;
    if (o->queue_bytes == 0)
        o->queue_bytes = 64u << 20;
    if (o->queue_bytes_total == 0)
        o->queue_bytes_total = 256u << 20;
    if (o->batch_max == 0)
        o->batch_max = 1024;
    if (o->frame_bytes == 0)
        o->frame_bytes = 256u << 10;
    if (o->send_timeout_ms == 0)
        o->send_timeout_ms = 10000;
    if (o->unreachable_ms == 0)
        o->unreachable_ms = 2000;
    if (o->reconnect_min_ms == 0)
        o->reconnect_min_ms = 20;
    if (o->reconnect_max_ms == 0)
        o->reconnect_max_ms = 1000;
    if (o->max_peers == 0)
        o->max_peers = 64;
    if (o->max_pending == 0)
        o->max_pending = 16;
    if (o->hello_timeout_ms == 0)
        o->hello_timeout_ms = 3000;
    if (o->reap_ms == 0)
        o->reap_ms = 10000;
    if (o->reassembly_bytes == 0)
        o->reassembly_bytes = 64u << 20;
    if (o->frame_timeout_ms == 0)
        o->frame_timeout_ms = 10000;
    if (o->batch_max > TROUPE_WIRE_BATCH_MAX ||
        o->frame_bytes > TROUPE_WIRE_FRAME_MAX ||
        o->reconnect_min_ms > o->reconnect_max_ms ||
        (o->advertise != NULL && !url_ok(o->advertise)) ||
        o->max_peers > 65536 || o->max_pending > 65536 ||
        o->reassembly_bytes < TROUPE_WIRE_FRAME_MAX ||
        o->n_peers > o->max_peers || (o->n_peers > 0 && o->peers == NULL) ||
        (o->peers != NULL && o->n_peers == 0) ||
        (o->secret == NULL) != (o->secret_len == 0))
        return TROUPE_EINVAL;
    for (uint32_t i = 0; i < o->n_peers; i++) {
        const troupe_node_peer *p = &o->peers[i];
        if (p->id == 0 || p->id == self || !url_ok(p->url))
            return TROUPE_EINVAL;
        for (uint32_t k = 0; k < i; k++)
            if (o->peers[k].id == p->id || strcmp(o->peers[k].url, p->url) == 0)
                return TROUPE_EINVAL;
    }
    return TROUPE_OK;
}

static void
node_free(troupe_node *n)
{
    if (n->inbox_rx != NULL)
        nng_aio_free(n->inbox_rx);
    troupe_wire_decoder_destroy(n->dec);
    troupe__auth_destroy(n->auth);
    if (n->peers != NULL)
        for (uint32_t i = 0; i < n->n_peers; i++)
            troupe_free((char *)n->peers[i].url);
    troupe_free(n->peers);
    troupe_free(n->conns);
    for (uint32_t i = 0; i < n->n_listeners; i++)
        troupe_free(n->listeners[i].bound);
    troupe_free(n->listeners);
    troupe_free(n->sweep_close);
    troupe_free(n->advertise);
    pthread_cond_destroy(&n->sweep_cv);
    pthread_mutex_destroy(&n->log_mu);
    pthread_mutex_destroy(&n->mu);
    troupe_free(n);
}

troupe_err
troupe_node_create(troupe_node **out, troupe_runtime *rt,
                   const troupe_node_opts *opts)
{
    if (out == NULL || rt == NULL)
        return TROUPE_EINVAL;
    troupe_node_opts o = opts ? *opts : (troupe_node_opts){0};
    uint32_t self = troupe_runtime_node_id(rt);
    troupe_err e = opts_check(&o, self);
    if (e != TROUPE_OK)
        return e;
    troupe_node *n = troupe_calloc(1, sizeof(*n));
    if (n == NULL)
        return TROUPE_ENOMEM;
    n->rt = rt;
    n->id = self;
    n->inc = pick_incarnation();
    n->o = o;
    n->o.advertise = NULL;
    n->o.peers = NULL;
    n->o.secret = NULL;
    n->o.tls_cert = n->o.tls_key = n->o.tls_ca = NULL;
    n->conn_cap = 2 * o.max_peers + o.max_pending;
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->log_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->sweep_cv, &ca);
    pthread_condattr_destroy(&ca);
    n->conns = troupe_calloc(n->conn_cap, sizeof(*n->conns));
    n->sweep_close = troupe_calloc(n->conn_cap, sizeof(*n->sweep_close));
    if (n->conns == NULL || n->sweep_close == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK && o.advertise != NULL &&
        (n->advertise = troupe_strdup(o.advertise)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK && o.n_peers > 0) {
        if ((n->peers = troupe_calloc(o.n_peers, sizeof(*n->peers))) == NULL)
            e = TROUPE_ENOMEM;
        for (uint32_t i = 0; e == TROUPE_OK && i < o.n_peers; i++) {
            n->peers[i].id = o.peers[i].id;
            if ((n->peers[i].url = troupe_strdup(o.peers[i].url)) == NULL)
                e = TROUPE_ENOMEM;
            n->n_peers = i + 1;
        }
    }
    if (e == TROUPE_OK) {
        troupe__auth_cfg ac = {.node_id = self,
                               .secret = o.secret,
                               .secret_len = o.secret_len,
                               .cert_file = o.tls_cert,
                               .key_file = o.tls_key,
                               .ca_file = o.tls_ca};
        e = troupe__auth_create(&ac, &n->auth);
    }
    if (e == TROUPE_OK)
        e = troupe_wire_decoder_create(&n->dec);
    int rv = 0;
    bool sock = false;
    if (e == TROUPE_OK) {
        if ((rv = nng_pair1_open_poly(&n->inbox)) == 0) {
            sock = true;
            if ((rv = nng_socket_set_size(n->inbox, NNG_OPT_RECVMAXSZ,
                                          INBOX_RECV_MAX)) == 0 &&
                (rv = nng_socket_set_int(n->inbox, NNG_OPT_SENDBUF, 64)) == 0 &&
                (rv = nng_pipe_notify(n->inbox, NNG_PIPE_EV_ADD_PRE,
                                      inbox_pipe_ev, n)) == 0 &&
                (rv = nng_pipe_notify(n->inbox, NNG_PIPE_EV_REM_POST,
                                      inbox_pipe_ev, n)) == 0)
                rv = nng_aio_alloc(&n->inbox_rx, inbox_rx_done, n);
        }
        if (rv != 0)
            e = nng_err(rv, "inbox setup");
    }
    if (e == TROUPE_OK) {
        if (pthread_create(&n->sweeper, NULL, sweeper_main, n) != 0)
            e = TROUPE_EIO;
        else
            n->sweeper_running = true;
    }
    if (e != TROUPE_OK) {
        if (sock)
            nng_close(n->inbox);
        node_free(n);
        return e;
    }
    n->open =
        !troupe__auth_has_secret(n->auth) && !troupe__auth_has_certs(n->auth);
    if (n->open)
        fprintf(stderr,
                "troupe: node %u accepts any peer that can reach it (no "
                "cluster secret, no certificates%s): see docs/security.md\n",
                self,
                n->n_peers ? "; the allow-list trusts the node id a peer "
                             "claims"
                           : "");
    nng_recv_aio(n->inbox, n->inbox_rx);
    troupe_runtime_set_remote(rt, &hook_ops, n);
    *out = n;
    return TROUPE_OK;
}

/* The URL peers can dial for a listener bound to `url`. */
static char *
advertised_url(const char *url, nng_listener l)
{
    nng_sockaddr sa;
    const char *sep = strstr(url, "://");
    bool tcp = strncmp(url, "tcp", 3) == 0 || is_tls_url(url);
    if (!tcp || sep == NULL || (size_t)(sep - url) > 16 ||
        nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        return troupe_strdup(url);
    char scheme[17];
    memcpy(scheme, url, (size_t)(sep - url));
    scheme[sep - url] = '\0';
    char host[INET6_ADDRSTRLEN];
    char buf[TROUPE_WIRE_URL_MAX + 1];
    if (sa.s_family == NNG_AF_INET) {
        if (inet_ntop(AF_INET, &sa.s_in.sa_addr, host, sizeof(host)) == NULL)
            return troupe_strdup(url);
        snprintf(buf, sizeof(buf), "%s://%s:%u", scheme, host,
                 (unsigned)ntohs(sa.s_in.sa_port));
    } else if (sa.s_family == NNG_AF_INET6) {
        if (inet_ntop(AF_INET6, sa.s_in6.sa_addr, host, sizeof(host)) == NULL)
            return troupe_strdup(url);
        snprintf(buf, sizeof(buf), "%s://[%s]:%u", scheme, host,
                 (unsigned)ntohs(sa.s_in6.sa_port));
    } else {
        return troupe_strdup(url);
    }
    return troupe_strdup(buf);
}

/* Creates and starts a listener of the inbox on url. No lock held. */
static troupe_err
listener_open(troupe_node *n, const char *url, nng_listener *out)
{
    nng_tls_config *tls = NULL;
    troupe_err e;
    if (is_tls_url(url) &&
        (e = tls_config(n, NNG_TLS_MODE_SERVER, 0, &tls)) != TROUPE_OK)
        return e;
    nng_listener l;
    int rv = nng_listener_create(&l, n->inbox, url);
    if (rv == 0 && tls != NULL)
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls);
    if (tls != NULL)
        nng_tls_config_free(tls); /* the listener holds its own reference */
    if (rv != 0)
        return nng_err(rv, "listener create");
    if ((rv = nng_listener_start(l, 0)) != 0) {
        nng_listener_close(l);
        return nng_err(rv, "listen");
    }
    *out = l;
    return TROUPE_OK;
}

/* A listener's or dialer's count of the errors after which nng 1.5.2
 * stops it for good (watch_listeners): ECLOSED, which nng files as
 * "other", and ECANCELED. 0 without statistics. */
static uint64_t
stop_errors(nng_stat *ep)
{
    static const char *const names[] = {"other", "canceled"};
    uint64_t sum = 0;
    for (size_t i = 0; ep != NULL && i < sizeof(names) / sizeof(names[0]);
         i++) {
        nng_stat *o = nng_stat_find(ep, names[i]);
        sum += o ? nng_stat_value(o) : 0;
    }
    return sum;
}

troupe_err
troupe_node_listen(troupe_node *n, const char *url)
{
    if (n == NULL || url == NULL || url[0] == '\0')
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    nng_listener l;
    troupe_err e = listener_open(n, url, &l);
    if (e != TROUPE_OK)
        return e;
    /* A listener's counts start at 0, and a snapshot taken now would hide
     * a connection that had stopped it already. */
    struct lst x = {
        .l = l, .bound = advertised_url(url, l), .watch = watched_url(url)};
    pthread_mutex_lock(&n->mu);
    struct lst *ls =
        x.bound
            ? troupe_realloc(n->listeners, sizeof(*ls) * (n->n_listeners + 1))
            : NULL;
    if (ls != NULL) {
        n->listeners = ls;
        n->listeners[n->n_listeners++] = x;
        if (n->advertise == NULL) {
            char *adv = advertised_url(url, l);
            if (adv != NULL && strlen(adv) > TROUPE_WIRE_URL_MAX) {
                troupe_free(adv);
                adv = NULL;
            }
            n->advertise = adv;
        }
    }
    pthread_mutex_unlock(&n->mu);
    if (ls == NULL) {
        troupe_free(x.bound);
        nng_listener_close(l); /* nothing can have connected to it yet */
        return TROUPE_ENOMEM;
    }
    return TROUPE_OK;
}

static bool
path_gone(void *arg)
{
    return access(arg, F_OK) != 0;
}

struct pipes_of {
    troupe_node *n;
    const uint32_t *ids;
    uint32_t n_ids;
};

static bool
pipes_gone(void *arg)
{
    struct pipes_of *w = arg;
    bool gone = true;
    pthread_mutex_lock(&w->n->mu);
    for (uint32_t i = 0; i < w->n_ids && gone; i++)
        gone = conn_find(w->n, w->ids[i]) == NULL;
    pthread_mutex_unlock(&w->n->mu);
    return gone;
}

/*
 * Listens again in place of listener i, which has stopped accepting: its
 * connections are ended first (end_pipe says why), so that closing it
 * closes none of them, then it is closed and a new one opened on its bound
 * URL. The sweep thread only.
 */
static void
relisten(troupe_node *n, uint32_t i)
{
    pthread_mutex_lock(&n->mu);
    struct lst x = n->listeners[i];
    bool open = nng_listener_id(x.l) > 0; /* not after a failed relisten */
    uint32_t k = 0;
    for (uint32_t c = 0; open && c < n->n_conns; c++) {
        nng_pipe p = NNG_PIPE_INITIALIZER;
        p.id = n->conns[c].pipe;
        if (nng_listener_id(nng_pipe_listener(p)) == nng_listener_id(x.l))
            n->sweep_close[k++] = p.id;
    }
    pthread_mutex_unlock(&n->mu);
    if (open) {
        node_log(n,
                 "the listener on %s stopped accepting (nng 1.5.2 does after "
                 "a connection closes in its handshake); listening again",
                 x.bound);
        atomic_fetch_add(&n->relistened, 1);
        for (uint32_t c = 0; c < k; c++)
            end_pipe(n->sweep_close[c]);
        struct pipes_of w = {n, n->sweep_close, k};
        wait_for(pipes_gone, &w, PIPE_END_MS);
        nng_listener_close(x.l);
        /* An ipc listener removes its socket file when nng finishes
         * closing it, which may be after close returns: binding the path
         * again first would have the new socket's file removed. */
        if (strncmp(x.bound, "ipc://", 6) == 0)
            wait_for(path_gone, x.bound + 6, PIPE_END_MS);
    }
    nng_listener l = NNG_LISTENER_INITIALIZER;
    troupe_err e = listener_open(n, x.bound, &l);
    if (e != TROUPE_OK)
        node_log(n, "cannot listen on %s again: %s (tried again shortly)",
                 x.bound, troupe_err_name(e));
    /* A listener that failed to open (id -1) is opened again by the next
     * watch_listeners. */
    pthread_mutex_lock(&n->mu);
    n->listeners[i].l = l;
    pthread_mutex_unlock(&n->mu);
}

/*
 * Gives link l a new dialer in place of one nng has stopped
 * (watch_listeners). Sweep thread only; no lock held.
 */
static void
redial(troupe_node *n, struct link *l)
{
    nng_tls_config *tls = NULL;
    nng_dialer d = NNG_DIALER_INITIALIZER;
    int rv = 0;
    if (is_tls_url(l->url) &&
        tls_config(n, NNG_TLS_MODE_CLIENT, l->expect ? l->peer : 0, &tls) !=
            TROUPE_OK)
        return;
    if ((rv = nng_dialer_create(&d, l->sock, l->url)) != 0 ||
        (tls != NULL &&
         (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tls)) != 0)) {
        if (tls != NULL)
            nng_tls_config_free(tls);
        if (nng_dialer_id(d) > 0)
            nng_dialer_close(d);
        nng_err(rv, "redial");
        return;
    }
    if (tls != NULL)
        nng_tls_config_free(tls);
    pthread_mutex_lock(&l->mu);
    bool closed = l->closed;
    nng_dialer old = l->dialer;
    if (!closed) {
        l->dialer = d;
        l->dial_started = mono_ms();
        if (l->backoff)
            nng_dialer_set_ms(d, NNG_OPT_RECONNMINT,
                              (nng_duration)n->o.reconnect_max_ms);
    }
    pthread_mutex_unlock(&l->mu);
    if (closed) {
        nng_dialer_close(d);
        return;
    }
    nng_dialer_close(old);
    atomic_fetch_add(&n->redialed, 1);
    rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
    if (rv != 0)
        nng_err(rv, "dialer start");
}

/* The links whose dialer nng has stopped and that have waited their
 * reconnect time since it started: given new ones. */
static void
watch_dialers(troupe_node *n, nng_stat *st, int64_t now)
{
    struct link *due[64];
    unsigned k = 0;
    pthread_mutex_lock(&n->mu);
    for (struct link *l = n->links; l != NULL && k < 64; l = l->next) {
        if (l->retired || !watched_url(l->url))
            continue;
        pthread_mutex_lock(&l->mu);
        int64_t wait = (int64_t)(l->backoff ? n->o.reconnect_max_ms
                                            : n->o.reconnect_min_ms);
        bool stopped = !l->closed && l->pipe_id == 0 &&
                       now - l->dial_started >= wait &&
                       stop_errors(nng_stat_find_dialer(st, l->dialer)) > 0;
        pthread_mutex_unlock(&l->mu);
        if (stopped) {
            atomic_fetch_add(&l->refs, 1);
            due[k++] = l;
        }
    }
    pthread_mutex_unlock(&n->mu);
    for (unsigned i = 0; i < k; i++) {
        node_log(n,
                 "the dialer to %s stopped (nng 1.5.2 does after a "
                 "connection closes in its handshake); dialing again",
                 due[i]->url);
        redial(n, due[i]);
        link_unref(due[i]);
    }
}

/*
 * nng 1.5.2's tls and ipc transports report a connection that closes
 * during their handshake as if the listener or dialer itself had been
 * closed (fixed upstream after 1.5.2, "disconnect during negotiation
 * breaks listener"), and the listener stops accepting, or the dialer
 * dialing, for good: one connection opened and closed at once would cut a
 * node off, and a peer whose listener is being replaced would never be
 * dialed again. nng counts those errors among an endpoint's "other" and
 * "canceled" ones, and each endpoint's counts start at 0, so any such
 * error is taken as the endpoint having stopped, and it is replaced
 * (relisten, redial). An error after which nng goes on by itself is
 * counted there too; replacing that endpoint costs a reconnect, nothing
 * more. The sweep thread only, every LISTENER_CHECK_MS.
 */
static void
watch_listeners(troupe_node *n, int64_t now)
{
    if (now - n->lst_checked < LISTENER_CHECK_MS)
        return;
    n->lst_checked = now;
    nng_stat *st = NULL;
    pthread_mutex_lock(&n->mu);
    uint32_t count = n->n_listeners;
    bool any = false;
    for (uint32_t i = 0; i < count; i++)
        any = any || n->listeners[i].watch;
    for (struct link *l = n->links; l != NULL && !any; l = l->next)
        any = watched_url(l->url);
    pthread_mutex_unlock(&n->mu);
    if (!any || nng_stats_get(&st) != 0)
        return;
    watch_dialers(n, st, now);
    for (uint32_t i = 0; i < count && !atomic_load(&n->closing); i++) {
        pthread_mutex_lock(&n->mu);
        struct lst x = n->listeners[i];
        pthread_mutex_unlock(&n->mu);
        if (!x.watch)
            continue;
        if (nng_listener_id(x.l) <= 0 ||
            stop_errors(nng_stat_find_listener(st, x.l)) > 0)
            relisten(n, i);
    }
    nng_stats_free(st);
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

/* A link someone asked for, to `url` (or the one that exists), with a
 * reference for the caller. */
static troupe_err
connect_link(troupe_node *n, const char *url, struct link **out)
{
    if (n == NULL || url == NULL || url[0] == '\0')
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    uint32_t expect = 0;
    if (n->n_peers > 0) {
        for (uint32_t i = 0; i < n->n_peers && expect == 0; i++)
            if (strcmp(n->peers[i].url, url) == 0)
                expect = n->peers[i].id;
        if (expect == 0) {
            node_log(n, "not dialing %s: not in the allow-list", url);
            return TROUPE_EAUTH;
        }
    }
    struct link *l = NULL, *made = NULL;
    troupe_err e = TROUPE_OK;
    for (int pass = 0; pass < 2 && l == NULL && e == TROUPE_OK; pass++) {
        pthread_mutex_lock(&n->mu);
        if (atomic_load(&n->closing)) {
            e = TROUPE_ECLOSED;
        } else {
            for (struct link *x = n->links; x != NULL && l == NULL; x = x->next)
                if (!x->retired && (strcmp(x->url, url) == 0 ||
                                    (expect != 0 && x->peer == expect)))
                    l = x;
            if (l != NULL) {
                l->dynamic = false;
                atomic_fetch_add(&l->refs, 1);
            } else if (n->n_links >= n->o.max_peers && !evict_down_link(n)) {
                e = TROUPE_EFULL;
            } else if (made != NULL) {
                l = made;
                made = NULL;
                l->next = n->links;
                n->links = l;
                n->n_links++;
                atomic_fetch_add(&l->refs, 1);
                pthread_mutex_unlock(&n->mu);
                link_start(l);
                *out = l;
                return TROUPE_OK;
            }
        }
        pthread_mutex_unlock(&n->mu);
        /* Created without locks (nng may run callbacks), then published
         * unless a link to that URL appeared meanwhile. */
        if (l == NULL && e == TROUPE_OK && pass == 0)
            e = link_create(n, url, expect, &made);
    }
    if (made != NULL) {
        nng_close(made->sock);
        link_unref(made);
    }
    if (e == TROUPE_EFULL)
        node_log(n, "not dialing %s: %u links already (max_peers)", url,
                 n->o.max_peers);
    if (e != TROUPE_OK)
        return e;
    *out = l;
    return TROUPE_OK;
}

troupe_err
troupe_node_connect(troupe_node *n, const char *url)
{
    struct link *l;
    troupe_err e = connect_link(n, url, &l);
    if (e == TROUPE_OK)
        link_unref(l);
    return e;
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
    int64_t end = mono_ms() + timeout_ms;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        uint32_t id = l->answered;
        troupe_err refused = l->refused;
        pthread_mutex_unlock(&l->mu);
        if (id == n->id) {
            e = TROUPE_EINVAL;
            break;
        }
        if (id != 0 && troupe_node_peer_up(n, id)) {
            *peer = id;
            e = TROUPE_OK;
            break;
        }
        if (refused == TROUPE_EAUTH || refused == TROUPE_EFULL) {
            e = refused;
            break;
        }
        if (mono_ms() >= end) {
            e = TROUPE_ETIMEDOUT;
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    link_unref(l);
    return e;
}

bool
troupe_node_peer_up(troupe_node *n, uint32_t peer)
{
    if (n == NULL || peer == 0)
        return false;
    bool up = false;
    pthread_mutex_lock(&n->mu);
    struct link *l = find_peer(n, peer, NULL);
    struct conn *c = conn_of_peer(n, peer, NULL);
    if (l != NULL && c != NULL) {
        pthread_mutex_lock(&l->mu);
        up = usable(l) && l->peer_inc == c->inc;
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

static bool
has_route(troupe_node *n, uint32_t peer)
{
    pthread_mutex_lock(&n->mu);
    bool have = find_peer(n, peer, NULL) != NULL;
    pthread_mutex_unlock(&n->mu);
    return have;
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
    if (peer != n->id && !has_route(n, peer))
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
    out->refused = atomic_load(&w->refused);
    out->auth_failed = atomic_load(&w->auth_failed);
    out->unauth_frames = atomic_load(&w->unauth_frames);
    out->spoofed = atomic_load(&w->spoofed);
    out->reaped = atomic_load(&w->reaped);
    out->relistened = atomic_load(&w->relistened);
    out->redialed = atomic_load(&w->redialed);
    pthread_mutex_lock(&w->mu);
    out->links = w->n_links;
    out->conns = w->n_conns;
    out->pending = w->n_pending;
    pthread_mutex_unlock(&w->mu);
}

static bool
conns_gone_pred(void *arg)
{
    troupe_node *n = arg;
    pthread_mutex_lock(&n->mu);
    bool gone = n->n_conns == 0;
    pthread_mutex_unlock(&n->mu);
    return gone;
}

void
troupe_node_destroy(troupe_node *n)
{
    if (n == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    atomic_store(&n->closing, 1);
    pthread_cond_broadcast(&n->sweep_cv);
    pthread_mutex_unlock(&n->mu);
    troupe_runtime_set_remote(n->rt, NULL, NULL);
    while (atomic_load(&n->in_send) > 0)
        sched_yield();
    if (n->sweeper_running)
        pthread_join(n->sweeper, NULL);
    /* Listeners stop accepting first, so that peers redialing us meet a
     * refused connection rather than one accepted and closed at once (a
     * send that races such a close loses its message in nng 1.5.2, and a
     * pipe still negotiating when its listener closes is never freed).
     * Then inbox pipes are ended (end_pipe says why) and closed by nng; a
     * pipe that slips in meanwhile is refused at ADD_PRE. */
    for (uint32_t i = 0; i < n->n_listeners; i++)
        stop_listener(n->listeners[i].l);
    pthread_mutex_lock(&n->mu);
    for (uint32_t i = 0; i < n->n_conns; i++)
        n->sweep_close[i] = n->conns[i].pipe;
    uint32_t nc = n->n_conns;
    pthread_mutex_unlock(&n->mu);
    for (uint32_t i = 0; i < nc; i++)
        end_pipe(n->sweep_close[i]);
    wait_for(conns_gone_pred, n, PIPE_END_MS);
    nng_close(n->inbox);
    nng_aio_stop(n->inbox_rx);
    /* the graveyard's links go with the others */
    while (n->graveyard != NULL) {
        struct link *g = n->graveyard;
        n->graveyard = g->next;
        g->next = n->links;
        n->links = g;
    }
    /* No link appears or goes once closing is set and the sweep has
     * stopped. Every link's pipe is ended, then every socket closed, so
     * that no link's callback can still send on another while it is being
     * freed. */
    for (struct link *l = n->links; l != NULL; l = l->next)
        link_quiesce(l);
    for (struct link *l = n->links; l != NULL; l = l->next)
        nng_close(l->sock);
    struct link *l = n->links;
    n->links = NULL;
    while (l != NULL) {
        struct link *next = l->next;
        link_close(n, l);
        l = next;
    }
    for (uint32_t i = 0; i < n->n_conns; i++)
        troupe_free(n->conns[i].part);
    node_free(n);
}
