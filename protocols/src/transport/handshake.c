/*
 * The handshake: HELLO, HELLO_ACK, AUTH and REFUSE, on both sides (the
 * proofs themselves are auth.c's; docs/security.md).
 *
 * When a link's pipe comes up it sends HELLO (our id, incarnation, listen
 * URL, a fresh nonce) before any data; the peer's inbox answers HELLO_ACK
 * on the same pipe (its id, incarnation, its own nonce and its proof over
 * both), we check that proof and send AUTH (our proof) ahead of any data.
 * The inbox keeps one `conn` per pipe and delivers nothing from it until
 * AUTH checks; from then on every envelope it delivers has from.node =
 * that peer's id (an envelope naming another node is dropped, inbox.c),
 * which is what lets the runtime trust from.node. Only then does the
 * inbox dial back, and only to the allow-list's URL for that id when
 * there is an allow-list. Data frames carry the incarnation of the
 * receiver they are meant for, so frames queued for a node that restarted
 * are dropped by its new incarnation instead of reaching new actors that
 * reuse old addresses.
 */
#include <stdio.h>

#include "transport_int.h"

static const troupe_node_peer *
allowed_peer(const troupe_node *n, uint32_t id)
{
    for (uint32_t i = 0; i < n->n_peers; i++)
        if (n->peers[i].id == id)
            return &n->peers[i];
    return NULL;
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
    troupe__end_pipe(pipe);
}

/*
 * Settles, under node->mu, which link carries node h->sender now that l's
 * HELLO_ACK checked. False when l is not to carry it: retired already,
 * answered by another node than the one it expected or by this node, or
 * a duplicate of an established link to that node (then l is retired).
 * A link to that node that never worked is retired instead, and its queue
 * and asks move to l (*moved, newest first, and *moved_asks).
 */
static bool
ack_settle(struct link *l, const troupe_frame_hdr *h, troupe_msg **moved,
           struct ask_ent **moved_asks)
{
    troupe_node *n = l->node;
    if (l->retired)
        return false;
    /* peer is written under both locks, so reading it under either is
     * safe. */
    if ((l->peer != 0 && l->peer != h->sender) || h->sender == n->id) {
        if (h->sender == n->id && h->incarnation != n->inc)
            troupe__node_log(n, TROUPE_LOG_WARN,
                             "%s answered as node %u, this node's own id, "
                             "from another process: two nodes share id %u",
                             l->url, h->sender, h->sender);
        else if (h->sender != n->id)
            troupe__node_log(n, TROUPE_LOG_WARN,
                             "%s answered as node %u, expected %u", l->url,
                             h->sender, l->peer);
        pthread_mutex_lock(&l->mu);
        l->answered = h->sender;
        pthread_mutex_unlock(&l->mu);
        l->retired = true;
        return false;
    }
    struct link *other = find_peer(n, h->sender, l);
    if (other == NULL)
        return true;
    pthread_mutex_lock(&other->mu);
    bool established = other->ever_up;
    if (!established) {
        /* the other link never worked: this one takes its queue */
        troupe__ring_filter(other, troupe__drop_all, NULL, moved);
        troupe__asks_drain(other, ASKS_ALL, 0, moved_asks);
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
        return false;
    }
    other->retired = true;
    if (!other->dynamic)
        l->dynamic = false; /* it replaces a link someone asked for */
    return true;
}

/* Queues on l (under l->mu) the messages ack_settle moved from a retired
 * link, oldest first again. Returns those that do not fit, their asks
 * taken onto *failed. */
static troupe_msg *
ack_requeue(struct link *l, troupe_msg *moved, struct ask_ent **failed)
{
    troupe_node *n = l->node;
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
            struct ask_ent *e = troupe__asks_take(l, rev->corr, rev->from);
            if (e != NULL) {
                e->next = *failed;
                *failed = e;
            }
            set_next(rev, overflow);
            overflow = rev;
        }
        rev = next;
    }
    return overflow;
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
    if (!ack_settle(l, h, &moved, &moved_asks)) {
        pthread_mutex_unlock(&n->mu);
        troupe_free(auth);
        return;
    }
    pthread_mutex_lock(&l->mu);
    l->peer = h->sender;
    l->answered = h->sender;
    l->refused = TROUPE_OK;
    if (l->ever_up && l->peer_inc != h->incarnation) {
        troupe__ring_filter(l, troupe__drop_old_incarnation, NULL, &stale);
        troupe__asks_drain(l, ASKS_NOT_NODE_SLOT, 0, &failed);
    }
    while (moved_asks != NULL) {
        struct ask_ent *next = moved_asks->next;
        troupe__asks_insert(l, moved_asks);
        moved_asks = next;
    }
    l->peer_inc = h->incarnation;
    bool current = l->pipe_up && l->pipe_gen == gen;
    bool fast = false, again = l->ever_up;
    if (current) {
        l->said_unreachable = false;
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
    troupe_msg *overflow = ack_requeue(l, moved, &failed);
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
    if (current)
        troupe__node_log(n, TROUPE_LOG_INFO, "connected%s to node %u at %s",
                         again ? " again" : "", h->sender, l->url);
    troupe_free(auth);
    troupe__give_up(n, stale);
    troupe__give_up(n, overflow);
    troupe__asks_fail(n, failed, TROUPE_EUNREACHABLE);
    if (kick)
        troupe__link_pump(l);
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
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "%s answered as node %u, expected %u: refused", l->url,
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
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "node %u at %s did not prove its identity: %s",
                         h->sender, l->url, why);
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

void
troupe__link_rx_done(void *arg)
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
            troupe__node_log(n, TROUPE_LOG_WARN,
                             "node %u at %s refused us: %.*s (%s)", h.sender,
                             l->url, (int)h.reason_len, h.reason,
                             troupe_err_name(h.refuse_err));
            link_refuse(l, pipe, h.refuse_err);
        } else {
            uint64_t v;
            if (e != TROUPE_OK &&
                troupe_wire_frame_version(nng_msg_body(nm), nng_msg_len(nm),
                                          &v) == TROUPE_OK &&
                v != TROUPE_WIRE_VERSION)
                troupe__node_log(n, TROUPE_LOG_WARN,
                                 "%s speaks wire version %llu, this node %u",
                                 l->url, (unsigned long long)v,
                                 TROUPE_WIRE_VERSION);
            atomic_fetch_add(&n->bad_frames, 1);
        }
        nng_msg_free(nm);
    }
    if (!atomic_load(&n->closing))
        nng_recv_aio(l->sock, l->rx);
}

/* Sends a control frame on one inbox pipe, without blocking: if it cannot
 * be queued, the peer's HELLO retry (or its own timeout) covers it. */
static bool
inbox_send(troupe_node *n, uint32_t pipe, const troupe_wire_ctl *c)
{
    nng_msg *nm = troupe__ctl_msg(c);
    if (nm == NULL)
        return false;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = pipe;
    nng_msg_set_pipe(nm, p);
    if (nng_sendmsg(n->inbox, nm, NNG_FLAG_NONBLOCK) != 0) {
        nng_msg_free(nm);
        return false;
    }
    return true;
}

/*
 * Refuses an inbox pipe: tells the peer why (REFUSE) and lets the sweep
 * close it once nng has written everything sent on it (the sweep's
 * close_written), so the REFUSE gets out first. Frames from it are
 * dropped from now on. No lock held.
 */
void
troupe__refuse(troupe_node *n, uint32_t pipe, troupe_err err,
               const char *reason)
{
    troupe_wire_ctl c = {.type = TROUPE_FRAME_REFUSE,
                         .sender = n->id,
                         .incarnation = n->inc,
                         .err = err,
                         .reason = reason};
    bool sent = inbox_send(n, pipe, &c);
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, pipe);
    if (cn != NULL) {
        cn->sent += sent;
        conn_close(n, cn, false);
    }
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

/* HELLO on an inbox pipe: answered with HELLO_ACK (our nonce and proof),
 * unless the allow-list refuses the node. A repeat of the same HELLO
 * (the dialer's retry) is answered again. */
void
troupe__on_hello(troupe_node *n, uint32_t pipe, const troupe_frame_hdr *h)
{
    /* Answered even when it is our own (we dialed our own URL): the ack
     * then retires that link. */
    if (h->sender != n->id && n->n_peers > 0 &&
        allowed_peer(n, h->sender) == NULL) {
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "refused node %u: not in the allow-list", h->sender);
        troupe__refuse(n, pipe, TROUPE_EAUTH, "node id not allowed here");
        return;
    }
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    if (troupe__auth_nonce(n->lg, nonce) != TROUPE_OK)
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
        troupe__refuse(n, pipe, TROUPE_EPROTO, "unexpected HELLO");
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
    if (!inbox_send(n, pipe, &c))
        return;
    pthread_mutex_lock(&n->mu);
    if ((cn = conn_find(n, pipe)) != NULL)
        cn->sent++;
    pthread_mutex_unlock(&n->mu);
}

/* The URL to dial the node of conn cn back at, just authenticated, into
 * url; left empty when a link to it exists or our own dial to that URL is
 * on its way. Under n->mu. */
static void
dial_back_url(troupe_node *n, const struct conn *cn, char *url, size_t cap)
{
    const troupe_node_peer *ap = allowed_peer(n, cn->peer);
    /* with an allow-list, only its URL is ever dialed */
    const char *back = n->n_peers > 0 ? (ap ? ap->url : "") : cn->url;
    bool have = find_peer(n, cn->peer, NULL) != NULL;
    for (struct link *l = n->links; l != NULL && !have; l = l->next)
        if (!l->retired && l->peer == 0 && strcmp(l->url, back) == 0)
            have = true; /* our own dial to that URL is on its way */
    if (!have)
        snprintf(url, cap, "%s", back);
    if (ap != NULL && ap->url != NULL && cn->url_len > 0 &&
        strcmp(ap->url, cn->url) != 0)
        troupe__node_log(n, TROUPE_LOG_INFO,
                         "node %u says it listens on %s; dialing %s (the "
                         "allow-list's)",
                         cn->peer, cn->url, ap->url);
}

/* AUTH on an inbox pipe: the dialer's proof over the transcript of its
 * HELLO and our HELLO_ACK. Once it checks, the conn delivers, a previous
 * incarnation's conn is closed, and the node is dialed back. */
void
troupe__on_auth(troupe_node *n, uint32_t pipe, const troupe_frame_hdr *h)
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
        troupe__refuse(n, pipe, TROUPE_EPROTO,
                       "AUTH does not follow its HELLO");
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
        troupe__node_log(n, TROUPE_LOG_WARN, "refused node %u: %s", snap.peer,
                         why);
        troupe__refuse(n, pipe, TROUPE_EAUTH, why);
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
        dial_back_url(n, cn, url, sizeof(url));
    }
    uint32_t peer = cn->peer;
    uint64_t inc = cn->inc;
    pthread_mutex_unlock(&n->mu);
    if (no != NULL) {
        troupe__node_log(n, TROUPE_LOG_WARN, "refused node %u: %s%s", peer, no,
                         no_err == TROUPE_EAUTH
                             ? " (another node of that id is connected: a "
                               "duplicate node id?)"
                             : "");
        troupe__refuse(n, pipe, no_err, no);
        return;
    }
    for (unsigned i = 0; i < n_replaced; i++) {
        troupe__node_log(
            n, TROUPE_LOG_INFO,
            "node %u connected again as a new incarnation: its old "
            "connection is closed",
            peer);
        troupe__end_pipe(replaced[i]);
    }
    if (peer == n->id && inc != n->inc)
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "a peer connected as node %u, this node's own id, "
                         "from another process: two nodes share id %u",
                         peer, peer);
    else if (peer != n->id)
        troupe__node_log(n, TROUPE_LOG_INFO, "node %u connected", peer);
    if (url[0] != '\0' && peer != n->id)
        troupe__dial_back(n, peer, url);
}

/* Logs a frame of another wire version once per pipe and refuses it. */
bool
troupe__other_version(troupe_node *n, uint32_t pipe, const void *buf,
                      size_t len)
{
    uint64_t v;
    if (troupe_wire_frame_version(buf, len, &v) != TROUPE_OK ||
        v == TROUPE_WIRE_VERSION)
        return false;
    troupe__node_log(n, TROUPE_LOG_WARN,
                     "refused a peer that speaks wire version %llu (this node "
                     "speaks %u): an older or newer troupe",
                     (unsigned long long)v, TROUPE_WIRE_VERSION);
    troupe__refuse(n, pipe, TROUPE_EPROTO, "wire version not spoken here");
    return true;
}
