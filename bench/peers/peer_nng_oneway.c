/*
 * peer_nng_oneway SIZE: raw nng 1.5 pair1 over tcp loopback, one process:
 * a sender thread sends N messages of SIZE payload bytes (one message per
 * payload, nng_sendmsg) on one socket, the main thread receives them
 * (nng_recvmsg) on the other. Both sockets have 1024-message send and
 * receive buffers (NNG_OPT_SENDBUF/RECVBUF). Time runs from the sender's
 * start until the N-th message is received. Prints messages/s received.
 */
#include "peer_nng_common.h"

#include <nng/protocol/pair1/pair.h>

#include <pthread.h>

struct oneway {
    nng_socket tx, rx;
    size_t size;
    int64_t n;
    int failed;
};

static void *
sender_main(void *arg)
{
    struct oneway *o = arg;
    int64_t i;
    for (i = 0; i < o->n; i++) {
        nng_msg *m;
        int rv = nng_msg_alloc(&m, o->size);
        if (rv == 0) {
            memset(nng_msg_body(m), 0, o->size);
            if (o->size >= sizeof i)
                memcpy(nng_msg_body(m), &i, sizeof i);
            rv = nng_sendmsg(o->tx, m, 0);
            if (rv != 0)
                nng_msg_free(m);
        }
        if (rv != 0) {
            fprintf(stderr, "%s: send %lld of %lld: %s\n", peer_name,
                    (long long)i + 1, (long long)o->n, nng_strerror(rv));
            o->failed = 1;
            break;
        }
    }
    return NULL;
}

static double
one(int64_t n, void *ctx)
{
    struct oneway *o = ctx;
    pthread_t th;
    int64_t i, seq;
    double t0, t = -1;

    o->n = n;
    o->failed = 0;
    t0 = bench_now();
    if (pthread_create(&th, NULL, sender_main, o) != 0) {
        fprintf(stderr, "%s: pthread_create failed\n", peer_name);
        return -1;
    }
    for (i = 0; i < n; i++) {
        nng_msg *m;
        int rv = nng_recvmsg(o->rx, &m, 0);
        if (rv != 0) {
            fprintf(stderr, "%s: receive %lld of %lld: %s\n", peer_name,
                    (long long)i + 1, (long long)n, nng_strerror(rv));
            break;
        }
        if (nng_msg_len(m) != o->size) {
            fprintf(stderr, "%s: got %zu bytes, want %zu\n", peer_name,
                    nng_msg_len(m), o->size);
            nng_msg_free(m);
            break;
        }
        if (o->size >= sizeof seq) {
            memcpy(&seq, nng_msg_body(m), sizeof seq);
            if (seq != i) {
                fprintf(stderr,
                        "%s: message %lld arrived as number %lld "
                        "(lost or reordered)\n",
                        peer_name, (long long)seq, (long long)i);
                nng_msg_free(m);
                break;
            }
        }
        nng_msg_free(m);
    }
    if (i == n)
        t = bench_now() - t0;
    /* On failure the sender may be blocked; its send times out. */
    pthread_join(th, NULL);
    return o->failed ? -1 : t;
}

int
main(int argc, char **argv)
{
    struct oneway o = {0};
    nng_socket *s[2] = {&o.tx, &o.rx};
    int i;

    peer_name = "peer_nng_oneway";
    o.size = peer_size_arg(argc, argv);
    for (i = 0; i < 2; i++) {
        PEER_CHECK(nng_pair1_open(s[i]));
        PEER_CHECK(nng_socket_set_int(*s[i], NNG_OPT_SENDBUF, 1024));
        PEER_CHECK(nng_socket_set_int(*s[i], NNG_OPT_RECVBUF, 1024));
        PEER_CHECK(
            nng_socket_set_ms(*s[i], NNG_OPT_SENDTIMEO, PEER_TIMEOUT_MS));
        PEER_CHECK(
            nng_socket_set_ms(*s[i], NNG_OPT_RECVTIMEO, PEER_TIMEOUT_MS));
    }
    fprintf(stderr,
            "%s: nng %s pair1, %zu-byte payloads, buffers 1024 "
            "messages\n",
            peer_name, nng_version(), o.size);
    peer_connect(o.rx, o.tx);
    i = peer_reps("messages/s", 20000, one, &o);
    nng_close(o.tx);
    nng_close(o.rx);
    return i;
}
