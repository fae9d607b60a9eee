/*
 * peer_nng_ask SIZE: raw nng 1.5 req/rep over tcp loopback, one process,
 * 64 requests in flight. The req socket has 64 contexts (nng_ctx), each
 * with an aio whose callback sends a SIZE-byte request, receives the reply,
 * and sends the next request while any remain. The rep socket also has 64
 * contexts whose callbacks receive a request and send the same message
 * back (echo). Time runs from the first request until the last reply.
 * Prints round trips/s.
 */
#include "peer_nng_common.h"

#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

#include <stdatomic.h>

#define INFLIGHT 64

enum { SENDING, RECEIVING };

struct ask;

struct slot {
    struct ask *a;
    nng_ctx ctx;
    nng_aio *aio;
    int state;
};

struct ask {
    nng_socket req, rep;
    size_t size;
    int64_t n;
    atomic_llong issued;   /* requests handed out this rep */
    atomic_llong answered; /* replies received this rep */
    atomic_int failed;
    nng_mtx *mtx;
    nng_cv *cv;
    int active; /* req slots still working, under mtx */
    struct slot reqs[INFLIGHT], reps[INFLIGHT];
};

static void
req_idle(struct slot *s)
{
    struct ask *a = s->a;
    nng_mtx_lock(a->mtx);
    if (--a->active == 0)
        nng_cv_wake(a->cv);
    nng_mtx_unlock(a->mtx);
}

/* Takes one request from the budget and sends it on this slot (reusing m if
 * given), or goes idle when none are left. */
static void
req_next(struct slot *s, nng_msg *m)
{
    struct ask *a = s->a;
    int rv;
    if (atomic_fetch_add(&a->issued, 1) >= a->n) {
        if (m)
            nng_msg_free(m);
        req_idle(s);
        return;
    }
    if (!m) {
        rv = nng_msg_alloc(&m, a->size);
        if (rv != 0) {
            fprintf(stderr, "%s: nng_msg_alloc: %s\n", peer_name,
                    nng_strerror(rv));
            atomic_store(&a->failed, 1);
            req_idle(s);
            return;
        }
        memset(nng_msg_body(m), 0, a->size);
    }
    nng_msg_header_clear(m);
    s->state = SENDING;
    nng_aio_set_msg(s->aio, m);
    nng_ctx_send(s->ctx, s->aio);
}

static void
req_cb(void *arg)
{
    struct slot *s = arg;
    struct ask *a = s->a;
    int rv = nng_aio_result(s->aio);
    nng_msg *m;

    if (rv != 0) {
        if (s->state == SENDING)
            nng_msg_free(nng_aio_get_msg(s->aio));
        fprintf(stderr, "%s: request %s: %s\n", peer_name,
                s->state == SENDING ? "send" : "receive", nng_strerror(rv));
        atomic_store(&a->failed, 1);
        req_idle(s);
        return;
    }
    if (s->state == SENDING) {
        s->state = RECEIVING;
        nng_ctx_recv(s->ctx, s->aio);
        return;
    }
    m = nng_aio_get_msg(s->aio);
    if (nng_msg_len(m) != a->size) {
        fprintf(stderr, "%s: reply of %zu bytes, want %zu\n", peer_name,
                nng_msg_len(m), a->size);
        nng_msg_free(m);
        atomic_store(&a->failed, 1);
        req_idle(s);
        return;
    }
    atomic_fetch_add(&a->answered, 1);
    req_next(s, m);
}

static void
rep_cb(void *arg)
{
    struct slot *s = arg;
    int rv = nng_aio_result(s->aio);

    if (rv != 0) {
        if (s->state == SENDING)
            nng_msg_free(nng_aio_get_msg(s->aio));
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
            return; /* shutting down */
        fprintf(stderr, "%s: reply %s: %s\n", peer_name,
                s->state == SENDING ? "send" : "receive", nng_strerror(rv));
        s->state = RECEIVING;
        nng_ctx_recv(s->ctx, s->aio);
        return;
    }
    if (s->state == RECEIVING) {
        /* Echo: the request's body goes back as the reply. */
        s->state = SENDING;
        nng_aio_set_msg(s->aio, nng_aio_get_msg(s->aio));
        nng_ctx_send(s->ctx, s->aio);
        return;
    }
    s->state = RECEIVING;
    nng_ctx_recv(s->ctx, s->aio);
}

static double
one(int64_t n, void *ctx)
{
    struct ask *a = ctx;
    double t0, t;
    int i;

    a->n = n;
    atomic_store(&a->issued, 0);
    atomic_store(&a->answered, 0);
    atomic_store(&a->failed, 0);
    a->active = INFLIGHT;
    t0 = bench_now();
    for (i = 0; i < INFLIGHT; i++)
        req_next(&a->reqs[i], NULL);
    nng_mtx_lock(a->mtx);
    while (a->active > 0)
        nng_cv_wait(a->cv);
    nng_mtx_unlock(a->mtx);
    t = bench_now() - t0;
    if (atomic_load(&a->failed))
        return -1;
    if (atomic_load(&a->answered) != n) {
        fprintf(stderr, "%s: %lld replies for %lld requests\n", peer_name,
                (long long)atomic_load(&a->answered), (long long)n);
        return -1;
    }
    return t;
}

int
main(int argc, char **argv)
{
    static struct ask a;
    int i, rc;

    peer_name = "peer_nng_ask";
    a.size = peer_size_arg(argc, argv);
    PEER_CHECK(nng_mtx_alloc(&a.mtx));
    PEER_CHECK(nng_cv_alloc(&a.cv, a.mtx));
    PEER_CHECK(nng_req0_open(&a.req));
    PEER_CHECK(nng_rep0_open(&a.rep));
    /* No resends: a lost reply is a failure (aio timeout), not a retry. */
    PEER_CHECK(nng_socket_set_ms(a.req, NNG_OPT_REQ_RESENDTIME,
                                 NNG_DURATION_INFINITE));
    for (i = 0; i < INFLIGHT; i++) {
        struct slot *q = &a.reqs[i], *p = &a.reps[i];
        q->a = p->a = &a;
        PEER_CHECK(nng_ctx_open(&q->ctx, a.req));
        PEER_CHECK(nng_ctx_open(&p->ctx, a.rep));
        PEER_CHECK(nng_aio_alloc(&q->aio, req_cb, q));
        PEER_CHECK(nng_aio_alloc(&p->aio, rep_cb, p));
        nng_aio_set_timeout(q->aio, PEER_TIMEOUT_MS);
        nng_aio_set_timeout(p->aio, NNG_DURATION_INFINITE);
    }
    fprintf(stderr,
            "%s: nng %s req/rep, %zu-byte payloads, %d requests in "
            "flight (contexts)\n",
            peer_name, nng_version(), a.size, INFLIGHT);
    peer_connect(a.rep, a.req);
    for (i = 0; i < INFLIGHT; i++) {
        a.reps[i].state = RECEIVING;
        nng_ctx_recv(a.reps[i].ctx, a.reps[i].aio);
    }
    rc = peer_reps("round trips/s", 5000, one, &a);
    nng_close(a.req);
    nng_close(a.rep);
    for (i = 0; i < INFLIGHT; i++) {
        nng_aio_free(a.reqs[i].aio);
        nng_aio_free(a.reps[i].aio);
    }
    nng_cv_free(a.cv);
    nng_mtx_free(a.mtx);
    return rc;
}
