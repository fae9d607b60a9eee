/*
 * The sweep thread: giving up and reaping, and the node's stop.
 *
 * A sweep thread of our own runs every SWEEP_MS: it drops queued messages
 * past their deadline (or send_timeout_ms when they have none) and, once
 * a link has been down for unreachable_ms, everything it holds; asks
 * among them get an error reply through troupe_runtime_deliver (asks.c).
 * It closes inbox conns whose handshake is late, whose frame in parts
 * stalls, or that were refused (once nng has written the REFUSE, so that
 * it reaches the peer: close_written). It frees retired links and the links it
 * dialed back on its own that stayed down for reap_ms. It is a thread and not
 * an nng aio because freeing a link closes its socket and waits for its
 * callbacks, which must not happen on one of nng's callback threads. The
 * same thread watches the endpoints nng 1.5.2 may stop (watch.c).
 *
 * troupe_node_stop sets `closing` and wakes this thread, which leaves its
 * loop and tears the node down (node_stop_run): for the same reason, the
 * closes that wait for nng's callbacks run here and not on the caller's
 * thread, which may be a loop thread, or one of nng's own. Once nng's
 * callbacks have finished here, the stop callback fires on this thread,
 * its last touch of the node: the callback may destroy it (destroy then
 * detaches this thread instead of joining it).
 */
#include <sched.h>

#include "transport_int.h"

#define SWEEP_MS 20
#define HELLO_RETRY_MS 250
/* The longest a refused conn waits for nng to write its REFUSE. */
#define REFUSE_LINGER_MS 2000

/* What one sweep found under node->mu, acted on after it is released. */
struct sweep_out {
    struct link *reap; /* off the list: to close and free */
    troupe_msg *dropped;
    struct ask_ent *unreachable, *expired;
    struct link *kick[16]; /* HELLO retries, each with a reference */
    unsigned n_kick;
    uint32_t unanswered[16]; /* pipes whose HELLO went unanswered */
    unsigned n_unanswered;
    unsigned n_close, late, stalled; /* n->sweep_close[0..n_close) */
    struct {
        uint32_t pipe, sent;
    } linger[16]; /* refused conns whose REFUSE may not be written yet */
    unsigned n_linger;
};

/* The links: reaps, gives up, and retries or ends handshakes. Under
 * n->mu. */
static void
sweep_links(troupe_node *n, int64_t now, int64_t wall, struct sweep_out *s)
{
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
            l->next = s->reap;
            s->reap = l;
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
            if (!l->said_unreachable && !l->closed) {
                l->said_unreachable = true;
                if (l->peer != 0)
                    troupe__node_log(n, TROUPE_LOG_WARN,
                                     "node %u at %s has not answered for %u "
                                     "ms: messages to it are dropped and "
                                     "asks fail until it answers",
                                     l->peer, l->url, n->o.unreachable_ms);
                else
                    troupe__node_log(n, TROUPE_LOG_WARN,
                                     "%s has not answered for %u ms: "
                                     "messages to it are dropped and asks "
                                     "fail until it answers",
                                     l->url, n->o.unreachable_ms);
            }
            troupe__ring_filter(l, troupe__drop_all, NULL, &s->dropped);
            troupe__asks_drain(l, ASKS_ALL, wall, &s->unreachable);
        } else {
            if (wall >= l->min_expires)
                troupe__ring_filter(l, troupe__drop_expired, &wall,
                                    &s->dropped);
            if (wall >= l->asks_min_deadline)
                troupe__asks_drain(l, ASKS_EXPIRED, wall, &s->expired);
        }
        /* A pipe whose HELLO is not answered within the handshake timeout
         * is ended, and the dialer redials: the peer may never have seen
         * it (nng 1.5.2 can leave an accepted connection unreported, see
         * troupe__watch_listeners). */
        if (l->pipe_up && l->pipe_id != l->dead_pipe && !l->acked &&
            now - l->pipe_since >= (int64_t)n->o.hello_timeout_ms &&
            s->n_unanswered < 16) {
            l->pipe_since = now;
            s->unanswered[s->n_unanswered++] = l->pipe_id;
        }
        if (l->pipe_up && l->pipe_id != l->dead_pipe && !l->acked &&
            !l->hello_due && now - l->hello_sent >= HELLO_RETRY_MS) {
            l->hello_due = true;
            if (!l->tx_busy && s->n_kick < 16) {
                l->tx_busy = true;
                s->kick[s->n_kick++] = l;
                atomic_fetch_add(&l->refs, 1);
            }
        }
        pthread_mutex_unlock(&l->mu);
        pp = &l->next;
    }
}

/* The inbox conns: picks those to close (refused ones after their
 * linger, late handshakes, stalled frames in parts). Under n->mu. */
static void
sweep_conns(troupe_node *n, int64_t now, struct sweep_out *s)
{
    for (uint32_t i = 0; i < n->n_conns; i++) {
        struct conn *c = &n->conns[i];
        if (c->close_issued)
            continue;
        bool close = false;
        if (c->st == CONN_CLOSING) {
            close = c->close_now || now - c->since >= REFUSE_LINGER_MS;
            if (!close && s->n_linger < 16) {
                s->linger[s->n_linger].pipe = c->pipe;
                s->linger[s->n_linger++].sent = c->sent;
            }
        } else if (c->st != CONN_AUTHED &&
                   now - c->since >= (int64_t)n->o.hello_timeout_ms) {
            conn_close(n, c, true);
            close = true;
            s->late++;
        } else if (c->st == CONN_AUTHED && c->part != NULL &&
                   now - c->part_at >= (int64_t)n->o.frame_timeout_ms) {
            conn_close(n, c, true);
            close = true;
            s->stalled++;
        }
        if (close) {
            c->close_issued = true;
            n->sweep_close[s->n_close++] = c->pipe;
        }
    }
}

/* The messages nng has written on pipe `id` (its tx_msgs statistic), or
 * UINT64_MAX when the pipe is not among the statistics (gone). */
static uint64_t
pipe_tx_msgs(nng_stat *st, uint32_t id)
{
    for (nng_stat *p = nng_stat_child(st); p != NULL; p = nng_stat_next(p)) {
        nng_stat *pid = nng_stat_find(p, "id");
        if (strcmp(nng_stat_name(p), "pipe") != 0 || pid == NULL ||
            nng_stat_value(pid) != id)
            continue;
        nng_stat *tx = nng_stat_find(p, "tx_msgs");
        return tx ? nng_stat_value(tx) : UINT64_MAX;
    }
    return UINT64_MAX;
}

/* Closes the refused conns nng has written every message to, the REFUSE
 * last. Without statistics they wait out REFUSE_LINGER_MS. No lock
 * held. */
static void
close_written(troupe_node *n, const struct sweep_out *s)
{
    nng_stat *st = NULL;
    if (nng_stats_get(&st) != 0)
        return;
    for (unsigned i = 0; i < s->n_linger; i++) {
        if (pipe_tx_msgs(st, s->linger[i].pipe) < s->linger[i].sent)
            continue;
        pthread_mutex_lock(&n->mu);
        struct conn *c = conn_find(n, s->linger[i].pipe);
        bool end = c != NULL && c->st == CONN_CLOSING && !c->close_issued;
        if (end)
            c->close_issued = true;
        pthread_mutex_unlock(&n->mu);
        if (end)
            troupe__end_pipe(s->linger[i].pipe);
    }
    nng_stats_free(st);
}

static void
sweep(troupe_node *n)
{
    int64_t now = mono_ms(), wall = troupe_now_ms();
    struct sweep_out s = {0};
    pthread_mutex_lock(&n->mu);
    s.reap = n->graveyard;
    n->graveyard = NULL;
    sweep_links(n, now, wall, &s);
    sweep_conns(n, now, &s);
    pthread_mutex_unlock(&n->mu);
    if (s.late > 0)
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "closed %u connection(s) that did not complete the "
                         "handshake within %u ms",
                         s.late, n->o.hello_timeout_ms);
    if (s.stalled > 0)
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "closed %u connection(s) whose frame in parts "
                         "stalled for %u ms",
                         s.stalled, n->o.frame_timeout_ms);
    for (unsigned i = 0; i < s.n_close; i++)
        troupe__end_pipe(n->sweep_close[i]);
    if (s.n_linger > 0)
        close_written(n, &s);
    for (unsigned i = 0; i < s.n_unanswered; i++)
        troupe__end_pipe(s.unanswered[i]);
    while (s.reap != NULL) {
        struct link *next = s.reap->next;
        atomic_fetch_add(&n->reaped, 1);
        troupe__link_close(n, s.reap);
        s.reap = next;
    }
    troupe__give_up(n, s.dropped);
    troupe__asks_fail(n, s.unreachable, TROUPE_EUNREACHABLE);
    /* The runtime times these out on its own as well; whichever reply
     * comes first completes the ask, the other is dropped as late. */
    troupe__asks_fail(n, s.expired, TROUPE_ETIMEDOUT);
    for (unsigned i = 0; i < s.n_kick; i++) {
        troupe__link_pump(s.kick[i]);
        link_unref(s.kick[i]);
    }
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

/* The stop's work, once the sweep has left its loop: nothing can queue
 * for the node or make a link any more (closing is set, the hook is
 * gone). Waits for the senders already inside the hook, closes every
 * endpoint and socket, waits for nng's callbacks and gives up what is
 * still queued; then the stop callback. */
static void
node_stop_run(troupe_node *n)
{
    while (atomic_load(&n->in_send) > 0)
        sched_yield();
    /* Listeners stop accepting first, so that peers redialing us meet a
     * refused connection rather than one accepted and closed at once (a
     * send that races such a close loses its message in nng 1.5.2, and a
     * pipe still negotiating when its listener closes is never freed).
     * Then inbox pipes are ended (end_pipe says why) and closed by nng; a
     * pipe that slips in meanwhile is refused at ADD_PRE. */
    for (uint32_t i = 0; i < n->n_listeners; i++)
        troupe__stop_listener(n->listeners[i].l);
    pthread_mutex_lock(&n->mu);
    for (uint32_t i = 0; i < n->n_conns; i++)
        n->sweep_close[i] = n->conns[i].pipe;
    uint32_t nc = n->n_conns;
    pthread_mutex_unlock(&n->mu);
    for (uint32_t i = 0; i < nc; i++)
        troupe__end_pipe(n->sweep_close[i]);
    troupe__wait_for(conns_gone_pred, n, PIPE_END_MS);
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
        troupe__link_quiesce(l);
    for (struct link *l = n->links; l != NULL; l = l->next)
        nng_close(l->sock);
    struct link *l = n->links;
    n->links = NULL;
    while (l != NULL) {
        struct link *next = l->next;
        troupe__link_close(n, l);
        l = next;
    }
    for (uint32_t i = 0; i < n->n_conns; i++) {
        troupe_free(n->conns[i].part);
        n->conns[i].part = NULL;
    }
    troupe_node_stop_cb cb = n->stop_cb;
    void *cb_arg = n->stop_arg;
    atomic_store(&n->stopped, 1);
    cb(n, cb_arg); /* may destroy n */
}

static void *
sweeper_main(void *arg)
{
    troupe_node *n = arg;
    /* for perf, top, gdb, and where the stop callback runs */
    pthread_setname_np(pthread_self(), "troupe-sweep");
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
        troupe__watch_listeners(n, mono_ms());
        pthread_mutex_lock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    node_stop_run(n);
    return NULL;
}

/* Starts the sweep thread (n->sweeper). It leaves its loop when
 * n->closing is set and sweep_cv signalled (troupe_node_stop), runs the
 * stop and ends; destroy joins it. */
troupe_err
troupe__sweeper_start(troupe_node *n)
{
    if (pthread_create(&n->sweeper, NULL, sweeper_main, n) != 0)
        return TROUPE_EIO;
    return TROUPE_OK;
}
