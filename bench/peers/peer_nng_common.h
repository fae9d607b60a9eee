/*
 * Shared by the nng peers: size argument, loopback listener on a port the
 * kernel picks (no collisions between concurrent runs), error exits, and the
 * rep loop (warm-up to calibrate, then $BENCH_REPS reps; human lines on
 * stderr, the median alone on the last stdout line).
 */
#ifndef TROUPE_PEER_NNG_COMMON_H
#define TROUPE_PEER_NNG_COMMON_H

#include <nng/nng.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench_util.h"

/* Seconds one rep aims for; the count comes from a warm-up run. */
#define PEER_REP_SECONDS 1.0
/* A receive or round trip that takes longer than this is a failure. */
#define PEER_TIMEOUT_MS 10000

static const char *peer_name = "peer_nng";

static void
peer_die(const char *what, int rv)
{
    fprintf(stderr, "%s: %s: %s\n", peer_name, what, nng_strerror(rv));
    exit(1);
}

#define PEER_CHECK(call)                                                       \
    do {                                                                       \
        int rv_ = (call);                                                      \
        if (rv_ != 0)                                                          \
            peer_die(#call, rv_);                                              \
    } while (0)

/* SIZE argument: payload bytes per message, 1 .. 16 MiB. */
static size_t
peer_size_arg(int argc, char **argv)
{
    char *end;
    long v;
    if (argc != 2) {
        fprintf(stderr, "usage: %s SIZE   (payload bytes, e.g. 64 or 4096)\n",
                peer_name);
        exit(2);
    }
    v = strtol(argv[1], &end, 10);
    if (end == argv[1] || *end || v < 1 || v > (16L << 20)) {
        fprintf(stderr, "%s: bad SIZE \"%s\" (1 .. 16777216)\n", peer_name,
                argv[1]);
        exit(2);
    }
    return (size_t)v;
}

/* Listens on tcp://127.0.0.1 at a kernel-chosen port, dials it from `dialer`
 * (synchronously, so the pipe is up on return). */
static void
peer_connect(nng_socket listener, nng_socket dialer)
{
    nng_listener l;
    int port;
    char url[64];
    PEER_CHECK(nng_listen(listener, "tcp://127.0.0.1:0", &l, 0));
    PEER_CHECK(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port));
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    PEER_CHECK(nng_dial(dialer, url, NULL, 0));
    fprintf(stderr, "%s: connected over %s\n", peer_name, url);
}

/* Calls one(count, ctx) -> elapsed seconds (or < 0 on failure) once with
 * warmup_count to calibrate, then the reps; prints; returns exit status. */
static int
peer_reps(const char *unit, int64_t warmup_count,
          double (*one)(int64_t, void *), void *ctx)
{
    double v[64], t, rate, med;
    int64_t n;
    int i, reps = bench_reps(5);

    t = one(warmup_count, ctx);
    if (t <= 0) {
        fprintf(stderr, "%s: warm-up failed\n", peer_name);
        return 1;
    }
    rate = (double)warmup_count / t;
    n = (int64_t)(rate * PEER_REP_SECONDS);
    if (n < warmup_count)
        n = warmup_count;
    if (n > 20000000)
        n = 20000000;
    fprintf(stderr, "%s: warm-up %.0f %s, %d reps of %lld\n", peer_name, rate,
            unit, reps, (long long)n);
    for (i = 0; i < reps; i++) {
        t = one(n, ctx);
        if (t <= 0) {
            fprintf(stderr, "%s: rep %d failed\n", peer_name, i + 1);
            return 1;
        }
        v[i] = (double)n / t;
        fprintf(stderr, "%s: rep %d: %.0f %s (%.3f s)\n", peer_name, i + 1,
                v[i], unit, t);
    }
    med = bench_median(v, reps);
    fprintf(stderr, "%s: median %.0f %s\n", peer_name, med, unit);
    printf("%.0f\n", med);
    fflush(stdout);
    return 0;
}

#endif
