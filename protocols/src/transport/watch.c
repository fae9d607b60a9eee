/*
 * The endpoint watch: nng 1.5.2's tls and ipc transports can stop a
 * listener or a dialer for good after one connection closes during its
 * handshake (troupe__watch_listeners says how that is seen); the sweep
 * thread replaces such an endpoint with a new one (relisten, redial).
 */
#include <stdio.h>
#include <unistd.h>

#include "transport_int.h"

#define LISTENER_CHECK_MS 200

/* A listener's or dialer's count of the errors after which nng 1.5.2
 * stops it for good (troupe__watch_listeners): ECLOSED, which nng files as
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

/* An endpoint's nonzero statistics as "name=value ...", for a debug log
 * line; a static buffer (the sweep thread only). */
static const char *
ep_counts(nng_stat *ep)
{
    static char buf[256];
    size_t len = 0;
    buf[0] = '\0';
    for (nng_stat *c = ep ? nng_stat_child(ep) : NULL; c != NULL;
         c = nng_stat_next(c)) {
        if (nng_stat_type(c) != NNG_STAT_COUNTER || nng_stat_value(c) == 0)
            continue;
        int k =
            snprintf(buf + len, sizeof(buf) - len, "%s=%llu ", nng_stat_name(c),
                     (unsigned long long)nng_stat_value(c));
        if (k < 0 || (size_t)k >= sizeof(buf) - len)
            break;
        len += (size_t)k;
    }
    return buf;
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
        troupe__node_log(
            n, TROUPE_LOG_INFO,
            "the listener on %s stopped accepting (nng 1.5.2 does after "
            "a connection closes in its handshake); listening again",
            x.bound);
        atomic_fetch_add(&n->relistened, 1);
        for (uint32_t c = 0; c < k; c++)
            troupe__end_pipe(n->sweep_close[c]);
        struct pipes_of w = {n, n->sweep_close, k};
        troupe__wait_for(pipes_gone, &w, RELISTEN_END_MS);
        nng_listener_close(x.l);
        /* An ipc listener removes its socket file when nng finishes
         * closing it, which may be after close returns: binding the path
         * again first would have the new socket's file removed. */
        if (strncmp(x.bound, "ipc://", 6) == 0)
            troupe__wait_for(path_gone, x.bound + 6, PIPE_END_MS);
    }
    nng_listener l = NNG_LISTENER_INITIALIZER;
    troupe_err e = troupe__listener_open(n, x.bound, &l);
    if (e != TROUPE_OK)
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "cannot listen on %s again: %s (tried again shortly)",
                         x.bound, troupe_err_name(e));
    /* A listener that failed to open (id -1) is opened again by the next
     * watch_listeners. */
    pthread_mutex_lock(&n->mu);
    n->listeners[i].l = l;
    n->listeners[i].pipes_ended = 0;
    n->listeners[i].suspect = false;
    pthread_mutex_unlock(&n->mu);
}

/*
 * Gives link l a new dialer in place of one nng has stopped
 * (troupe__watch_listeners). Sweep thread only; no lock held.
 */
static void
redial(troupe_node *n, struct link *l)
{
    nng_tls_config *tls = NULL;
    nng_dialer d = NNG_DIALER_INITIALIZER;
    int rv = 0;
    if (is_tls_url(l->url) &&
        troupe__tls_config(n, NNG_TLS_MODE_CLIENT, l->expect ? l->peer : 0,
                           &tls) != TROUPE_OK)
        return;
    if ((rv = nng_dialer_create(&d, l->sock, l->url)) != 0 ||
        (tls != NULL &&
         (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tls)) != 0)) {
        if (tls != NULL)
            nng_tls_config_free(tls);
        if (nng_dialer_id(d) > 0)
            nng_dialer_close(d);
        troupe__nng_err(n, rv, "redial");
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
        troupe__nng_err(n, rv, "dialer start");
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
        troupe__node_log(n, TROUPE_LOG_INFO,
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
 * "canceled" ones, and each endpoint's counts start at 0. But nng also
 * counts there the error that ends each of the endpoint's started pipes
 * (a peer that disconnects), and replacing a listener ends every
 * connection it accepted: so a listener is taken as stopped only when it
 * has more such errors than it has had started pipes end (inbox.c counts
 * them), at two checks in a row (a pipe's error is counted a moment
 * before its end is reported). A dialer has at most one pipe, and is
 * replaced only when it has none (watch_dialers). An error after which
 * nng goes on by itself is counted too; replacing that endpoint costs a
 * reconnect, nothing more. The sweep thread only, every
 * LISTENER_CHECK_MS.
 */
void
troupe__watch_listeners(troupe_node *n, int64_t now)
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
        struct lst *x = &n->listeners[i];
        bool watch = x->watch, gone = nng_listener_id(x->l) <= 0;
        nng_stat *ls = gone ? NULL : nng_stat_find_listener(st, x->l);
        bool unexplained = stop_errors(ls) > x->pipes_ended;
        bool stopped = gone || (unexplained && x->suspect);
        x->suspect = unexplained && !stopped;
        pthread_mutex_unlock(&n->mu);
        if (!watch || !stopped)
            continue;
        troupe__node_log(n, TROUPE_LOG_DEBUG, "listener %u: %s", i,
                         ep_counts(ls));
        relisten(n, i);
    }
    nng_stats_free(st);
}
