/*
 * The node object: options, create, listen, the URL peers dial, stats,
 * stop (the sweep thread does the work: sweep.c), stop_wait and destroy.
 * It calls into every other file of the transport and none of them calls
 * into it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport_int.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

static uint64_t
pick_incarnation(const troupe_logger *lg)
{
    uint8_t r[TROUPE_WIRE_NONCE_LEN];
    uint64_t x = 0;
    if (troupe__auth_nonce(lg, r) == TROUPE_OK) {
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

/* Makes the node's fields from checked options (o's pointers are copied,
 * not kept). On error the caller frees n with node_free. */
static troupe_err
node_init(troupe_node *n, troupe_runtime *rt, const troupe_node_opts *o)
{
    n->rt = rt;
    n->lg = troupe_runtime_logger(rt);
    n->id = troupe_runtime_node_id(rt);
    n->inc = pick_incarnation(n->lg);
    n->o = *o;
    n->o.advertise = NULL;
    n->o.peers = NULL;
    n->o.secret = NULL;
    n->o.tls_cert = n->o.tls_key = n->o.tls_ca = NULL;
    n->conn_cap = 2 * o->max_peers + o->max_pending;
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
        return TROUPE_ENOMEM;
    if (o->advertise != NULL &&
        (n->advertise = troupe_strdup(o->advertise)) == NULL)
        return TROUPE_ENOMEM;
    if (o->n_peers > 0) {
        if ((n->peers = troupe_calloc(o->n_peers, sizeof(*n->peers))) == NULL)
            return TROUPE_ENOMEM;
        for (uint32_t i = 0; i < o->n_peers; i++) {
            n->peers[i].id = o->peers[i].id;
            n->n_peers = i + 1;
            if ((n->peers[i].url = troupe_strdup(o->peers[i].url)) == NULL)
                return TROUPE_ENOMEM;
        }
    }
    troupe__auth_cfg ac = {.node_id = n->id,
                           .secret = o->secret,
                           .secret_len = o->secret_len,
                           .cert_file = o->tls_cert,
                           .key_file = o->tls_key,
                           .ca_file = o->tls_ca,
                           .logger = n->lg};
    troupe_err e = troupe__auth_create(&ac, &n->auth);
    if (e == TROUPE_OK)
        e = troupe_wire_decoder_create(&n->dec);
    return e;
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
    e = node_init(n, rt, &o);
    bool sock = false;
    if (e == TROUPE_OK)
        e = troupe__inbox_open(n, &sock);
    if (e == TROUPE_OK)
        e = troupe__sweeper_start(n);
    if (e != TROUPE_OK) {
        if (sock)
            nng_close(n->inbox);
        node_free(n);
        return e;
    }
    n->open =
        !troupe__auth_has_secret(n->auth) && !troupe__auth_has_certs(n->auth);
    if (n->open)
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "this node accepts any peer that can reach it (no "
                         "cluster secret, no certificates%s): see "
                         "docs/security.md",
                         n->n_peers ? "; the allow-list trusts the node id a "
                                      "peer claims"
                                    : "");
    nng_recv_aio(n->inbox, n->inbox_rx);
    troupe_runtime_set_remote(rt, &troupe__hook_ops, n);
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

troupe_err
troupe_node_listen(troupe_node *n, const char *url)
{
    if (n == NULL || url == NULL || url[0] == '\0')
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    nng_listener l;
    troupe_err e = troupe__listener_open(n, url, &l);
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

troupe_err
troupe_node_stop(troupe_node *n, troupe_node_stop_cb cb, void *arg)
{
    if (n == NULL || cb == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&n->mu);
    bool first = !atomic_load(&n->closing);
    if (first) {
        /* The hook goes before the sweep is woken: once it is, the node
         * may be torn down and freed (by cb) before this call returns. */
        troupe_runtime_set_remote(n->rt, NULL, NULL);
        n->stop_cb = cb;
        n->stop_arg = arg;
        atomic_store(&n->closing, 1);
        pthread_cond_broadcast(&n->sweep_cv);
    }
    pthread_mutex_unlock(&n->mu);
    return first ? TROUPE_OK : TROUPE_ESTATE;
}

/* stop_wait's wait: the stop callback on the sweep thread releases it. */
static void
wake_stopped(troupe_node *n, void *arg)
{
    (void)n;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_node_stop_wait(troupe_node *n)
{
    troupe_err be = troupe__block_check("troupe_node_stop_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, troupe_node_stop(n, wake_stopped, &w),
                                 NULL);
}

void
troupe_node_destroy(troupe_node *n)
{
    if (n == NULL)
        return;
    if (!atomic_load(&n->stopped))
        abort(); /* still running: troupe_node_stop first */
    /* Called from the stop callback, the sweep thread ends right after it
     * without touching the node: it cannot join itself. */
    if (pthread_equal(pthread_self(), n->sweeper))
        pthread_detach(n->sweeper);
    else
        pthread_join(n->sweeper, NULL);
    node_free(n);
}
