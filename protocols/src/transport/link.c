/*
 * Outgoing links: one pair1 socket per peer whose dialer connects to the
 * peer's inbox, reference-counted (transport_int.h). Their lifecycle
 * (create, start, quiesce, close), the pipe events that start a
 * handshake, connecting on request, dialing back a peer that connected
 * to us, and the state of a peer as its link shows it. Links are at most
 * max_peers; to make room, the dial-back that has been down the longest
 * is evicted (a link someone asked for, or one that is up, never is).
 */

#include "transport_int.h"
#include "troupe/internal/runtime.h"

#define LINK_RECV_MAX ((size_t)TROUPE_WIRE_CTL_MAX + 64)

void
troupe__link_free(struct link *l)
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
link_pipe_ev(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct link *l = arg;
    bool kick = false, cancel = false, lost = false;
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    bool fresh = ev == NNG_PIPE_EV_ADD_POST &&
                 troupe__auth_nonce(l->node->lg, nonce) == TROUPE_OK;
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
        lost = usable(l);
        if (lost)
            l->down_since = mono_ms();
        l->pipe_up = false;
        l->acked = false;
        l->hello_due = false;
        l->auth_due = false;
        l->pipe_id = 0;
        cancel = l->tx_busy;
    }
    uint32_t peer = l->peer;
    pthread_mutex_unlock(&l->mu);
    troupe__node_log(l->node, TROUPE_LOG_DEBUG, "link to %s: pipe %d %s",
                     l->url, nng_pipe_id(p),
                     ev == NNG_PIPE_EV_ADD_POST ? "up" : "down");
    if (lost && !atomic_load(&l->node->closing))
        troupe__node_log(l->node, TROUPE_LOG_INFO,
                         "lost the connection to node %u at %s", peer, l->url);
    if (cancel)
        nng_aio_cancel(l->tx);
    if (kick)
        troupe__link_pump(l);
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
        troupe__link_free(l);
        return TROUPE_ENOMEM;
    }
    nng_tls_config *tls = NULL;
    troupe_err e;
    if (is_tls_url(url) && (e = troupe__tls_config(n, NNG_TLS_MODE_CLIENT, peer,
                                                   &tls)) != TROUPE_OK) {
        troupe__link_free(l);
        return e;
    }
    int rv;
    const char *what = "pair1 open";
    if ((rv = nng_pair1_open(&l->sock)) != 0) {
        if (tls != NULL)
            nng_tls_config_free(tls);
        troupe__link_free(l);
        return troupe__nng_err(n, rv, what);
    }
    l->sock_open = true;
    if ((rv = nng_socket_set_size(l->sock, NNG_OPT_RECVMAXSZ, LINK_RECV_MAX)) ||
        (rv = nng_socket_set_int(l->sock, NNG_OPT_SENDBUF, 0)) ||
        (rv = nng_socket_set_ms(l->sock, NNG_OPT_RECONNMINT,
                                (nng_duration)n->o.reconnect_min_ms)) ||
        (rv = nng_socket_set_ms(l->sock, NNG_OPT_RECONNMAXT,
                                (nng_duration)n->o.reconnect_max_ms)) ||
        (rv = nng_aio_alloc(&l->tx, troupe__tx_done, l)) ||
        (rv = nng_aio_alloc(&l->rx, troupe__link_rx_done, l)) ||
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
        troupe__link_free(l);
        return troupe__nng_err(n, rv, what);
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
        troupe__nng_err(l->node, rv, "dialer start");
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
void
troupe__link_quiesce(struct link *l)
{
    pthread_mutex_lock(&l->mu);
    l->closed = true; /* watch_dialers replaces no dialer from now on */
    uint32_t pipe = l->pipe_id;
    nng_dialer d = l->dialer;
    pthread_mutex_unlock(&l->mu);
    if (pipe != 0) {
        struct pipe_wait w = {l, pipe};
        troupe__end_pipe(pipe);
        troupe__wait_for(link_pipe_ended, &w, PIPE_END_MS);
    }
    nng_dialer_close(d);
}

/* Closes a link taken off node->links (or all of them at the stop): no nng
 * callback runs on it afterwards. Gives up what it holds and drops the
 * list's reference. No lock held. */
void
troupe__link_close(troupe_node *n, struct link *l)
{
    troupe_msg *rest = NULL;
    struct ask_ent *asks = NULL;
    troupe__link_quiesce(l);
    nng_close(l->sock);
    nng_aio_stop(l->tx);
    nng_aio_stop(l->rx);
    pthread_mutex_lock(&l->mu);
    troupe__ring_filter(l, troupe__drop_all, NULL, &rest);
    troupe__asks_drain(l, ASKS_ALL, 0, &asks);
    pthread_mutex_unlock(&l->mu);
    /* the transmitter is idle now: nng's callbacks are done */
    if (l->big != NULL)
        troupe__abandon_big(l);
    troupe__give_up(n, rest);
    troupe__asks_fail(n, asks, TROUPE_EUNREACHABLE);
    link_unref(l);
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
void
troupe__dial_back(troupe_node *n, uint32_t peer, const char *url)
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
        troupe__node_log(
            n, TROUPE_LOG_WARN,
            "not dialing node %u back: %u links already (max_peers)", peer,
            n->o.max_peers);
    nng_close(l->sock);
    link_unref(l);
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
            troupe__node_log(n, TROUPE_LOG_WARN,
                             "not dialing %s: not in the allow-list", url);
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
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "not dialing %s: %u links already (max_peers)", url,
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
    troupe_err be = troupe__block_check("troupe_node_connect_wait");
    if (be != TROUPE_OK)
        return be;
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
    troupe_err be = troupe__block_check("troupe_node_wait_peer");
    if (be != TROUPE_OK)
        return be;
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
