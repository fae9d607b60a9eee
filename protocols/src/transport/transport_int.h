/*
 * Private structures of the nng transport, shared by the files of this
 * folder only (docs/wire.md, "Transport"; docs/security.md). These files
 * are the only ones that include nng; troupe__nng_err (log.c) is the only
 * place an nng error becomes a troupe_err.
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
 * Files, one concept each: node.c (the node object: create, listen,
 * stats, stop, destroy), link.c (outgoing links, connect, peer state),
 * send.c (the ring, frames and the transmitter), asks.c (asks in flight
 * and giving up), handshake.c (HELLO, HELLO_ACK, AUTH, REFUSE; the proofs
 * are auth.c's), inbox.c (incoming pipes and frames), lookup.c (the node
 * address: remote name lookup, ping), sweep.c (the sweep thread, which also
 * runs the stop), watch.c (endpoints nng 1.5.2 stops), endpoint.c (TLS
 * configuration, listeners, ending pipes), log.c (nng errors, the rate-limited
 * log).
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
#ifndef TROUPE_TRANSPORT_INT_H
#define TROUPE_TRANSPORT_INT_H

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "troupe/alloc.h"
#include "troupe/internal/msg.h"
#include "troupe/transport.h"
#include "troupe/wire.h"

#define PIPE_END_MS 500 /* how long teardown waits for an ended pipe */
/* How long a relisten waits for the pipes it ended before it closes their
 * listener: a pipe still there is closed by nng itself, which can wedge
 * nng 1.5.2's reaper, and the sweep thread with it, for good (end_pipe
 * says why); under load ending a pipe takes more than PIPE_END_MS. */
#define RELISTEN_END_MS 5000

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
    bool said_unreachable; /* logged since it last stopped being usable */
    uint32_t pipe_id;      /* the current pipe, 0 when none */
    uint32_t pipe_gen;     /* counts pipes */
    uint32_t hello_gen;    /* pipe_gen of the last HELLO sent */
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];    /* our nonce on the current pipe */
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
    uint32_t sent;     /* messages handed to nng for this pipe */
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
    /* l's started pipes that have ended: each may have counted one error
     * against l (troupe__watch_listeners). Under n->mu. */
    uint64_t pipes_ended;
    bool suspect; /* an error no ended pipe explains, at the last check */
};

struct troupe_node {
    troupe_runtime *rt;
    const troupe_logger *lg; /* the runtime's (troupe_runtime_logger) */
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

    /* closing: troupe_node_stop was called (set under mu, with stop_cb
     * and stop_arg); stopped: the sweep has torn the node down and calls
     * stop_cb, or has called it */
    _Atomic int closing;
    _Atomic int stopped;
    troupe_node_stop_cb stop_cb;
    void *stop_arg;
    _Atomic int in_send;
    _Atomic size_t qbytes; /* reserved by every queued envelope */

    pthread_mutex_t log_mu;
    int64_t log_sec;
    uint32_t log_n, log_dropped;

    _Atomic uint64_t msgs_sent, frames_sent, msgs_recv, frames_recv, bad_frames,
        stale_frames, deliver_fail, gave_up, error_replies, full, refused,
        auth_failed, unauth_frames, spoofed, reaped, relistened, redialed;
};

/* ---- log.c ---- */

/* n may be NULL (the default logger). */
troupe_err
troupe__nng_err(troupe_node *n, int rv, const char *what);
void
troupe__node_log(troupe_node *n, troupe_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- endpoint.c ---- */

troupe_err
troupe__tls_config(troupe_node *n, nng_tls_mode mode, uint32_t peer,
                   nng_tls_config **out);
troupe_err
troupe__listener_open(troupe_node *n, const char *url, nng_listener *out);
void
troupe__stop_listener(nng_listener l);
void
troupe__end_pipe(uint32_t id);
void
troupe__wait_for(bool (*pred)(void *), void *arg, int64_t ms);

/* ---- asks.c (the asks table: under l->mu unless said) ---- */

enum asks_which { ASKS_ALL, ASKS_EXPIRED, ASKS_NOT_NODE_SLOT };

void
troupe__give_up(troupe_node *n, troupe_msg *list);
void
troupe__asks_insert(struct link *l, struct ask_ent *e);
void
troupe__asks_add(troupe_node *n, struct link *l, const troupe_msg *m);
struct ask_ent *
troupe__asks_take(struct link *l, uint64_t corr, troupe_addr asker);
void
troupe__asks_drain(struct link *l, enum asks_which which, int64_t wall,
                   struct ask_ent **out);
void
troupe__asks_fail(troupe_node *n, struct ask_ent *list, troupe_err err);
void
troupe__fail_tickets(struct link *l, troupe_err err);

/* ---- send.c ---- */

void
troupe__ring_filter(struct link *l, bool (*drop)(const struct qent *, void *),
                    void *arg, troupe_msg **list);
bool
troupe__drop_all(const struct qent *e, void *arg);
bool
troupe__drop_expired(const struct qent *e, void *arg);
bool
troupe__drop_old_incarnation(const struct qent *e, void *arg);
void
troupe__abandon_big(struct link *l);
nng_msg *
troupe__ctl_msg(const troupe_wire_ctl *c);
void
troupe__link_pump(struct link *l);
void
troupe__tx_done(void *arg);
troupe_err
troupe__node_send(troupe_node *n, troupe_msg *m);
extern const troupe_remote_ops troupe__hook_ops;

/* ---- link.c ---- */

void
troupe__link_free(struct link *l);
void
troupe__link_quiesce(struct link *l);
void
troupe__link_close(troupe_node *n, struct link *l);
void
troupe__dial_back(troupe_node *n, uint32_t peer, const char *url);

/* ---- handshake.c ---- */

void
troupe__link_rx_done(void *arg);
void
troupe__refuse(troupe_node *n, uint32_t pipe, troupe_err err,
               const char *reason);
void
troupe__on_hello(troupe_node *n, uint32_t pipe, const troupe_frame_hdr *h);
void
troupe__on_auth(troupe_node *n, uint32_t pipe, const troupe_frame_hdr *h);
bool
troupe__other_version(troupe_node *n, uint32_t pipe, const void *buf,
                      size_t len);

/* ---- inbox.c ---- */

troupe_err
troupe__inbox_open(troupe_node *n, bool *opened);

/* ---- lookup.c ---- */

void
troupe__system_request(troupe_node *n, const troupe_msg *m);

/* ---- sweep.c, watch.c ---- */

/* Starts the sweep thread, which also runs the stop (sweep.c). EIO. */
troupe_err
troupe__sweeper_start(troupe_node *n);
void
troupe__watch_listeners(troupe_node *n, int64_t now);

/* ---- small helpers, inline: the send and receive paths use them ---- */

static inline int64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline bool
usable(const struct link *l)
{
    return l->pipe_up && l->acked;
}

static inline bool
is_ask(const troupe_msg *m)
{
    return m->corr != 0 && (m->flags & TROUPE_MSG_REPLY) == 0 &&
           !troupe_addr_is_none(m->from);
}

static inline void
set_next(troupe_msg *m, troupe_msg *next)
{
    atomic_store_explicit(&troupe__msg_of(m)->next, next, memory_order_relaxed);
}

static inline troupe_msg *
get_next(troupe_msg *m)
{
    return atomic_load_explicit(&troupe__msg_of(m)->next, memory_order_relaxed);
}

static inline bool
is_tls_url(const char *url)
{
    return strncmp(url, "tls+tcp", 7) == 0;
}

/* The transports whose endpoints nng 1.5.2 may stop (troupe__watch_listeners).
 */
static inline bool
watched_url(const char *url)
{
    return is_tls_url(url) || strncmp(url, "ipc", 3) == 0;
}

/* Reserves `size` bytes of the node-wide queue budget; false when full. */
static inline bool
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

static inline void
budget_give(troupe_node *n, size_t size)
{
    if (size > 0)
        atomic_fetch_sub_explicit(&n->qbytes, size, memory_order_relaxed);
}

/* ---- the per-link ring ---- */

static inline struct qent *
ring_at(struct link *l, uint32_t i)
{
    return &l->q[(l->qhead + i) % l->qcap];
}

static inline troupe_err
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

static inline void
ring_push(struct link *l, troupe_msg *m, int64_t expires, size_t size)
{
    *ring_at(l, l->qlen) = (struct qent){m, expires, size};
    l->qlen++;
    l->qbytes += size;
    if (expires < l->min_expires)
        l->min_expires = expires;
}

/* The caller gives the entry's bytes back to the node's budget. */
static inline struct qent
ring_pop(struct link *l)
{
    struct qent e = *ring_at(l, 0);
    l->qhead = (l->qhead + 1) % l->qcap;
    l->qlen--;
    l->qbytes -= e.size;
    return e;
}

/* ---- link references and routing ---- */

/* Drops a reference to l (NULL: nothing); the last one frees it. */
static inline void
link_unref(struct link *l)
{
    if (l != NULL && atomic_fetch_sub(&l->refs, 1) == 1)
        troupe__link_free(l);
}

/* The link that carries `peer`, other than `except`, or NULL. Under
 * n->mu. */
static inline struct link *
find_peer(troupe_node *n, uint32_t peer, const struct link *except)
{
    for (struct link *l = n->links; l != NULL; l = l->next)
        if (l != except && !l->retired && l->peer == peer)
            return l;
    return NULL;
}

/* The link to `peer` with a reference the caller releases (link_unref),
 * or NULL. */
static inline struct link *
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

/* ---- the inbox's conns (under n->mu) ---- */

static inline struct conn *
conn_find(troupe_node *n, uint32_t pipe)
{
    for (uint32_t i = 0; i < n->n_conns; i++)
        if (n->conns[i].pipe == pipe)
            return &n->conns[i];
    return NULL;
}

/* The authenticated inbox conn of node `peer`, or NULL. */
static inline struct conn *
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
static inline void
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

#endif
