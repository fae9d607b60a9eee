/*
 * The send path: the per-link ring, the transmitter and its frames.
 *
 * Sending. troupe__node_send (the runtime's remote hook, also used for
 * replies the node itself sends) appends to the link's bounded ring and,
 * if nobody owns the link's transmitter, takes it and pumps. The owner
 * (the sender that found it idle, then nng's completion callback) encodes
 * whatever has accumulated, up to batch_max envelopes or frame_bytes,
 * straight into one nng message and sends it with the link's single aio.
 * With nng's own send buffer at zero, a frame waits in nng only while the
 * previous one is being written, so under load the ring fills and frames
 * grow: batching adapts to the load without a timer. A frame over
 * TROUPE_WIRE_PART_MAX is encoded once into a buffer and sent as PART
 * frames, one per completion, so that no connection ever needs a larger
 * nng message: nng 1.5.2 has no per-pipe receive limit
 * (NNG_OPT_RECVMAXSZ is per listener), so the inbox limit is what any
 * stranger's connection can make us hold. Asks inside a frame are
 * remembered until nng takes its last byte, so a frame cancelled when its
 * pipe drops answers its askers with EUNREACHABLE at once (asks.c).
 *
 * Budgets. Queued bytes are reserved node-wide (queue_bytes_total) with a
 * compare-and-swap before a message enters a ring (budget_take), and
 * released in bulk as frames are built.
 */
#include <stdio.h>

#include "transport_int.h"

/* ---- the per-link ring (its hot operations: transport_int.h) ---- */

/* Moves every queued message that drop() selects onto *list and gives
 * its bytes back to the node's budget; keeps the others in order. */
void
troupe__ring_filter(struct link *l, bool (*drop)(const struct qent *, void *),
                    void *arg, troupe_msg **list)
{
    uint32_t kept = 0, n = l->qlen;
    int64_t min = INT64_MAX;
    size_t bytes = 0, dropped = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct qent e = *ring_at(l, i);
        if (drop(&e, arg)) {
            set_next(e.m, *list);
            *list = e.m;
            dropped += e.size;
            continue;
        }
        *ring_at(l, kept++) = e;
        bytes += e.size;
        if (e.expires < min)
            min = e.expires;
    }
    l->qlen = kept;
    l->qbytes = bytes;
    l->min_expires = min;
    budget_give(l->node, dropped);
}

bool
troupe__drop_all(const struct qent *e, void *arg)
{
    return true;
}

bool
troupe__drop_expired(const struct qent *e, void *arg)
{
    return e->expires <= *(const int64_t *)arg;
}

/* Messages for a peer's previous incarnation, except those to the node
 * address, which means the same thing to every incarnation. */
bool
troupe__drop_old_incarnation(const struct qent *e, void *arg)
{
    return e->m->to.slot != TROUPE_NODE_SLOT;
}

/* ---- transmitting ---- */

static void
release_tx(struct link *l)
{
    l->tx_busy = false;
    pthread_mutex_unlock(&l->mu);
}

/* Drops the frame being sent in parts (its pipe went away); the
 * transmitter's owner only. */
void
troupe__abandon_big(struct link *l)
{
    troupe_free(l->big);
    l->big = NULL;
    troupe__fail_tickets(l, TROUPE_EUNREACHABLE);
    atomic_fetch_add(&l->node->gave_up, l->tx_count);
    l->tx_count = 0;
}

static void
send_frame(struct link *l, nng_msg *nm, enum tx_kind kind)
{
    l->tx_kind = kind;
    nng_aio_set_msg(l->tx, nm);
    nng_send_aio(l->sock, l->tx);
}

/* Sends the next PART of l->big; false when it could not be built. */
static bool
send_part(struct link *l)
{
    troupe_node *n = l->node;
    size_t chunk = l->big_len - l->big_off;
    if (chunk > TROUPE_WIRE_PART_MAX)
        chunk = TROUPE_WIRE_PART_MAX;
    size_t cap =
        troupe_wire_part_size(n->id, l->big_inc, l->big_len, l->big_off, chunk);
    nng_msg *nm;
    size_t len;
    if (nng_msg_alloc(&nm, cap) != 0)
        return false;
    if (troupe_wire_encode_part(n->id, l->big_inc, l->big, l->big_len,
                                l->big_off, chunk, nng_msg_body(nm), cap,
                                &len) != TROUPE_OK) {
        nng_msg_free(nm);
        return false;
    }
    nng_msg_chop(nm, cap - len);
    l->big_chunk = chunk;
    send_frame(l, nm, TX_PART);
    return true;
}

/* An nng message holding exactly the control frame c. */
nng_msg *
troupe__ctl_msg(const troupe_wire_ctl *c)
{
    uint8_t buf[TROUPE_WIRE_CTL_MAX];
    size_t len;
    nng_msg *nm;
    if (troupe_wire_encode_ctl(c, buf, sizeof(buf), &len) != TROUPE_OK ||
        nng_msg_alloc(&nm, len) != 0)
        return NULL;
    memcpy(nng_msg_body(nm), buf, len);
    return nm;
}

/* Sends HELLO on the current pipe. Called with l->mu held; releases it.
 * True when a frame went to nng. */
static bool
send_hello(struct link *l)
{
    troupe_node *n = l->node;
    l->hello_due = false;
    l->hello_sent = mono_ms();
    l->hello_gen = l->pipe_gen;
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    memcpy(nonce, l->nonce, sizeof(nonce));
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_lock(&n->mu); /* advertise is set by listen */
    char url[TROUPE_WIRE_URL_MAX + 1] = "";
    if (n->advertise != NULL)
        snprintf(url, sizeof(url), "%s", n->advertise);
    pthread_mutex_unlock(&n->mu);
    pthread_mutex_lock(&l->mu);
    memcpy(l->hello_url, url, sizeof(url));
    pthread_mutex_unlock(&l->mu);
    troupe_wire_ctl c = {.type = TROUPE_FRAME_HELLO,
                         .sender = n->id,
                         .incarnation = n->inc,
                         .url = url,
                         .nonce = nonce};
    nng_msg *nm = troupe__ctl_msg(&c);
    if (nm == NULL)
        return false;
    send_frame(l, nm, TX_CTL);
    return true;
}

/* Sends the HELLO or AUTH due on the live pipe, HELLO first. Called with
 * l->mu held by the transmitter's owner; releases it, and the transmitter
 * too when nothing went to nng. */
static void
send_ctl(struct link *l)
{
    if (l->hello_due) {
        if (send_hello(l))
            return;
        /* the sweep retries the HELLO */
        pthread_mutex_lock(&l->mu);
        release_tx(l);
        return;
    }
    l->auth_due = false;
    nng_msg *nm;
    if (nng_msg_alloc(&nm, l->auth_len) != 0) {
        /* without AUTH the peer closes this pipe; the next one starts over */
        release_tx(l);
        return;
    }
    memcpy(nng_msg_body(nm), l->auth_frame, l->auth_len);
    pthread_mutex_unlock(&l->mu);
    send_frame(l, nm, TX_CTL);
}

/* The envelopes of the next DATA frame, taken off the ring. */
struct batch {
    uint32_t k;   /* in l->scratch */
    size_t bytes; /* the frame's size bound */
    uint64_t inc; /* the peer incarnation it is for */
    uint32_t gen; /* the pipe it is for */
};

/* Takes up to batch_max envelopes (and frame_bytes) off the ring into
 * l->scratch, giving up those past their deadline on the way. Called with
 * l->mu held by the transmitter's owner, on a usable link with a queue;
 * releases it. */
static void
batch_take(struct link *l, struct batch *b)
{
    troupe_node *n = l->node;
    int64_t wall = troupe_now_ms();
    size_t taken = 0;
    troupe_msg *expired = NULL;
    b->inc = l->peer_inc;
    b->gen = l->pipe_gen;
    b->k = 0;
    b->bytes = troupe_wire_data_overhead(n->id, b->inc, n->o.batch_max);
    while (l->qlen > 0 && b->k < n->o.batch_max) {
        struct qent *e = ring_at(l, 0);
        if (e->expires <= wall) {
            struct qent x = ring_pop(l);
            taken += x.size;
            set_next(x.m, expired);
            expired = x.m;
            continue;
        }
        if (b->k > 0 && b->bytes + e->size > n->o.frame_bytes)
            break;
        b->bytes += e->size;
        l->scratch[b->k] = ring_pop(l);
        taken += l->scratch[b->k++].size;
    }
    if (l->qlen == 0)
        l->min_expires = INT64_MAX;
    pthread_mutex_unlock(&l->mu);
    budget_give(n, taken);
    troupe__give_up(n, expired);
}

/* Encodes a batch into one frame and frees its messages: sent (true), or
 * kept in l->big for PART frames, or lost to an allocation failure with
 * its askers told (false: the pump goes on). The transmitter's owner. */
static bool
batch_send(struct link *l, const struct batch *b)
{
    troupe_node *n = l->node;
    uint32_t k = b->k;
    l->ntix = 0;
    for (uint32_t i = 0; i < k; i++) {
        const troupe_msg *m = l->scratch[i].m;
        l->ptrs[i] = m;
        if (is_ask(m))
            l->tix[l->ntix++] = (struct ticket){m->corr, m->from};
    }
    bool parts = b->bytes > TROUPE_WIRE_PART_MAX;
    nng_msg *nm = NULL;
    uint8_t *big = NULL;
    size_t len = 0;
    troupe_err e = TROUPE_ENOMEM;
    if (parts) {
        if ((big = troupe_malloc(b->bytes)) != NULL)
            e = troupe_wire_encode_data(n->id, b->inc, l->ptrs, k, big,
                                        b->bytes, &len);
    } else if (nng_msg_alloc(&nm, b->bytes) == 0) {
        e = troupe_wire_encode_data(n->id, b->inc, l->ptrs, k, nng_msg_body(nm),
                                    b->bytes, &len);
        if (e == TROUPE_OK)
            nng_msg_chop(nm, b->bytes - len);
    }
    for (uint32_t i = 0; i < k; i++)
        troupe_msg_destroy(l->scratch[i].m);
    if (e != TROUPE_OK) {
        /* Only allocation can fail here (sizes were checked when
         * queued): the batch is lost, its askers are told. */
        if (nm != NULL)
            nng_msg_free(nm);
        troupe_free(big);
        troupe__fail_tickets(l, TROUPE_EUNREACHABLE);
        atomic_fetch_add(&n->gave_up, k);
        return false;
    }
    l->tx_count = k;
    if (!parts) {
        send_frame(l, nm, TX_DATA);
        return true;
    }
    l->big = big;
    l->big_len = len;
    l->big_off = 0;
    l->big_gen = b->gen;
    l->big_inc = b->inc;
    return false;
}

/*
 * Runs the transmitter; the caller owns it (tx_busy set). Sends one frame
 * and returns: the completion callback calls it again. Releases ownership
 * when there is nothing to send. Order on a new pipe: HELLO, then AUTH once
 * the HELLO_ACK checked, then data (a frame in parts to its end first).
 */
void
troupe__link_pump(struct link *l)
{
    troupe_node *n = l->node;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        if (l->closed || atomic_load(&n->closing)) {
            release_tx(l);
            return;
        }
        bool live = l->pipe_up && l->pipe_id != l->dead_pipe;
        if (live && (l->hello_due || l->auth_due)) {
            send_ctl(l);
            return;
        }
        if (l->big != NULL) {
            bool same = usable(l) && l->big_gen == l->pipe_gen;
            pthread_mutex_unlock(&l->mu);
            if (same && send_part(l))
                return;
            troupe__abandon_big(l);
            continue;
        }
        if (!usable(l) || l->qlen == 0) {
            release_tx(l);
            return;
        }
        struct batch b;
        batch_take(l, &b);
        if (b.k > 0 && batch_send(l, &b))
            return;
    }
}

void
troupe__tx_done(void *arg)
{
    struct link *l = arg;
    troupe_node *n = l->node;
    int rv = nng_aio_result(l->tx);
    if (rv != 0) {
        nng_msg_free(nng_aio_get_msg(l->tx));
        nng_aio_set_msg(l->tx, NULL);
        if (l->tx_kind == TX_DATA) {
            troupe__fail_tickets(l, TROUPE_EUNREACHABLE);
            atomic_fetch_add(&n->gave_up, l->tx_count);
        } else if (l->tx_kind == TX_PART) {
            troupe__abandon_big(l);
        } else {
            pthread_mutex_lock(&l->mu);
            if (l->pipe_up && !l->acked)
                l->hello_due = true;
            pthread_mutex_unlock(&l->mu);
        }
    } else if (l->tx_kind == TX_DATA) {
        atomic_fetch_add(&n->frames_sent, 1);
        atomic_fetch_add(&n->msgs_sent, l->tx_count);
        l->ntix = 0;
    } else if (l->tx_kind == TX_PART) {
        l->big_off += l->big_chunk;
        if (l->big_off == l->big_len) {
            troupe_free(l->big);
            l->big = NULL;
            atomic_fetch_add(&n->frames_sent, 1);
            atomic_fetch_add(&n->msgs_sent, l->tx_count);
            l->ntix = 0;
        }
    }
    troupe__link_pump(l);
}

/* ---- sending ---- */

/* Queues m for its node's link. Consumes m. */
troupe_err
troupe__node_send(troupe_node *n, troupe_msg *m)
{
    troupe_err e;
    struct link *l = NULL;
    if (atomic_load(&n->closing)) {
        e = TROUPE_ECLOSED;
        goto fail;
    }
    size_t size = troupe_wire_envelope_size(m);
    if (size == 0) {
        e = troupe_msg_len(m) > TROUPE_WIRE_BODY_MAX ? TROUPE_ETOOBIG
                                                     : TROUPE_EINVAL;
        goto fail;
    }
    if ((l = route(n, m->to.node)) == NULL) {
        e = TROUPE_EUNREACHABLE;
        goto fail;
    }
    int64_t now = mono_ms();
    pthread_mutex_lock(&l->mu);
    if (l->closed ||
        (!usable(l) && now - l->down_since >= n->o.unreachable_ms)) {
        pthread_mutex_unlock(&l->mu);
        e = TROUPE_EUNREACHABLE;
        goto fail;
    }
    if (l->qlen >= n->o.queue_cap || size > n->o.queue_bytes - l->qbytes ||
        !budget_take(n, size)) {
        pthread_mutex_unlock(&l->mu);
        atomic_fetch_add(&n->full, 1);
        e = TROUPE_EFULL;
        goto fail;
    }
    if ((e = ring_reserve(l, n->o.queue_cap)) != TROUPE_OK) {
        pthread_mutex_unlock(&l->mu);
        budget_give(n, size);
        goto fail;
    }
    int64_t expires =
        m->deadline > 0 ? m->deadline : troupe_now_ms() + n->o.send_timeout_ms;
    ring_push(l, m, expires, size);
    troupe__asks_add(n, l, m);
    bool kick = usable(l) && !l->tx_busy;
    if (kick)
        l->tx_busy = true;
    pthread_mutex_unlock(&l->mu);
    if (kick)
        troupe__link_pump(l);
    link_unref(l);
    return TROUPE_OK;
fail:
    link_unref(l);
    troupe_msg_destroy(m);
    return e;
}

static troupe_err
hook_send(void *ctx, troupe_msg **mp)
{
    troupe_node *n = ctx;
    if (mp == NULL || *mp == NULL)
        return TROUPE_EINVAL;
    troupe_msg *m = *mp;
    *mp = NULL;
    /* Counted so the stop can wait for senders already inside. */
    atomic_fetch_add(&n->in_send, 1);
    troupe_err e = troupe__node_send(n, m);
    atomic_fetch_sub(&n->in_send, 1);
    return e;
}

const troupe_remote_ops troupe__hook_ops = {.send = hook_send};
