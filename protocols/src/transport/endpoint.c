/*
 * nng's endpoints as the transport uses them: TLS configurations, the
 * inbox's listeners, and ending pipes and listeners without nng's own
 * close, which nng 1.5.2 cannot always survive (troupe__end_pipe says why;
 * docs/wire.md, "Shutdown").
 */
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport_int.h"

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
void
troupe__stop_listener(nng_listener l)
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
void
troupe__end_pipe(uint32_t id)
{
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = id;
    int fd = pipe_fd(p);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    else
        nng_pipe_close(p);
}

/* A TLS configuration with this node's certificate: NNG_TLS_MODE_CLIENT
 * for a link's dialer, where it checks that the server's certificate names
 * `peer` when peer is not 0, or NNG_TLS_MODE_SERVER for a listener. */
troupe_err
troupe__tls_config(troupe_node *n, nng_tls_mode mode, uint32_t peer,
                   nng_tls_config **out)
{
    if (!troupe__auth_has_certs(n->auth)) {
        troupe__node_log(n, TROUPE_LOG_ERROR,
                         "tls+tcp:// needs tls_cert, tls_key and tls_ca");
        return TROUPE_EINVAL;
    }
    nng_tls_config *cfg;
    int rv = nng_tls_config_alloc(&cfg, mode);
    if (rv != 0)
        return troupe__nng_err(n, rv, "tls config");
    char name[32];
    snprintf(name, sizeof(name), "troupe-node-%u", peer);
    if ((rv = nng_tls_config_own_cert(cfg, troupe__auth_cert_pem(n->auth),
                                      troupe__auth_key_pem(n->auth), NULL)) ||
        (rv = nng_tls_config_ca_chain(cfg, troupe__auth_ca_pem(n->auth),
                                      NULL)) ||
        (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) ||
        (peer != 0 && (rv = nng_tls_config_server_name(cfg, name)))) {
        nng_tls_config_free(cfg);
        return troupe__nng_err(n, rv, "tls config");
    }
    *out = cfg;
    return TROUPE_OK;
}

/* Waits until pred(arg) or ms pass; for teardown only. */
void
troupe__wait_for(bool (*pred)(void *), void *arg, int64_t ms)
{
    int64_t end = mono_ms() + ms;
    while (!pred(arg) && mono_ms() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Creates and starts a listener of the inbox on url. No lock held. */
troupe_err
troupe__listener_open(troupe_node *n, const char *url, nng_listener *out)
{
    nng_tls_config *tls = NULL;
    troupe_err e;
    if (is_tls_url(url) &&
        (e = troupe__tls_config(n, NNG_TLS_MODE_SERVER, 0, &tls)) != TROUPE_OK)
        return e;
    nng_listener l;
    int rv = nng_listener_create(&l, n->inbox, url);
    if (rv == 0 && tls != NULL)
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls);
    if (tls != NULL)
        nng_tls_config_free(tls); /* the listener holds its own reference */
    if (rv != 0)
        return troupe__nng_err(n, rv, "listener create");
    if ((rv = nng_listener_start(l, 0)) != 0) {
        nng_listener_close(l);
        return troupe__nng_err(n, rv, "listen");
    }
    *out = l;
    return TROUPE_OK;
}
