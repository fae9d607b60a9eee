/*
 * The inbox: one polyamorous pair1 socket that listens and only receives,
 * its pipes (one `conn` each, transport_int.h) and the frames that arrive
 * on them. A pipe delivers nothing before its handshake completes
 * (handshake.c); an authenticated one delivers DATA frames, and PART
 * frames reassembled into one. Inbox conns are at most 2 * max_peers +
 * max_pending, at most max_pending of them in their handshake (a new one
 * evicts the oldest, so a flood of strangers cannot keep a real peer out
 * by merely holding connections open). Frames being reassembled take at
 * most reassembly_bytes.
 */

#include "transport_int.h"

#define INBOX_RECV_MAX                                                         \
    ((size_t)TROUPE_WIRE_PART_MAX + TROUPE_WIRE_PART_OVERHEAD)

/* What the inbox knows about the pipe a frame came from. */
struct rx_ctx {
    troupe_node *n;
    uint32_t pipe;
    uint32_t peer;     /* the authenticated node */
    struct link *link; /* our link to it (a reference), or NULL */
    troupe_frame_hdr h;
    bool stale;
};

static void
inbox_msg(void *arg, troupe_msg **mp)
{
    struct rx_ctx *c = arg;
    troupe_node *n = c->n;
    troupe_msg *m = *mp; /* left in *mp: destroyed by the decoder */
    if (c->h.sender != c->peer) {
        atomic_fetch_add(&n->spoofed, 1);
        return;
    }
    if (c->h.incarnation != 0 && c->h.incarnation != n->inc) {
        c->stale = true;
        return;
    }
    atomic_fetch_add(&n->msgs_recv, 1);
    /* The runtime trusts from.node to name the sending node (replies are
     * matched on it): an envelope claiming another node's actor is
     * dropped; one with no sender is stamped with the peer's id and stays
     * "none" (slot 0). */
    if (m->from.node != c->peer) {
        if (!troupe_addr_is_none(m->from)) {
            atomic_fetch_add(&n->spoofed, 1);
            return;
        }
        m->from.node = c->peer;
    }
    if (m->to.node != n->id) {
        atomic_fetch_add(&n->deliver_fail, 1);
        return;
    }
    if (m->to.slot == TROUPE_NODE_SLOT) {
        troupe__system_request(n, m);
        return;
    }
    if ((m->flags & TROUPE_MSG_REPLY) && c->link != NULL) {
        pthread_mutex_lock(&c->link->mu);
        struct ask_ent *e = troupe__asks_take(c->link, m->corr, m->to);
        pthread_mutex_unlock(&c->link->mu);
        troupe_free(e);
    }
    if (troupe_runtime_deliver(n->rt, mp) != TROUPE_OK)
        atomic_fetch_add(&n->deliver_fail, 1);
}

static void
deliver_frame(struct rx_ctx *c, const void *buf, size_t len, bool whole);

/* A PART frame from an authenticated pipe: appends its chunk; the last one
 * makes the whole frame, which is then handled like any DATA frame. */
static void
on_part(struct rx_ctx *c)
{
    troupe_node *n = c->n;
    const troupe_frame_hdr *h = &c->h;
    if (h->sender != c->peer) {
        atomic_fetch_add(&n->spoofed, 1);
        troupe__refuse(n, c->pipe, TROUPE_EPROTO, "PART from another sender");
        return;
    }
    const char *bad = NULL;
    troupe_err bad_err = TROUPE_EPROTO;
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, c->pipe);
    if (cn == NULL || cn->st != CONN_AUTHED) {
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (cn->part == NULL) {
        if (h->part_offset != 0) {
            bad = "PART does not start at 0";
        } else if (h->part_total > n->o.reassembly_bytes - n->part_bytes) {
            bad = "reassembly budget exhausted";
            bad_err = TROUPE_EFULL;
        } else if ((cn->part = troupe_malloc(h->part_total)) == NULL) {
            bad = "out of memory";
            bad_err = TROUPE_ENOMEM;
        } else {
            n->part_bytes += h->part_total;
            cn->part_total = h->part_total;
            cn->part_len = 0;
            /* now, not at the copy's end: the sweep may look before the
             * copy is done, and a stale part_at (0, or the previous
             * frame's) reads as a stall */
            cn->part_at = mono_ms();
        }
    } else if (h->part_total != cn->part_total ||
               h->part_offset != cn->part_len) {
        bad = "PART out of sequence";
    }
    if (bad != NULL) {
        pthread_mutex_unlock(&n->mu);
        troupe__node_log(n, TROUPE_LOG_WARN,
                         "closing the connection of node %u: %s", c->peer, bad);
        troupe__refuse(n, c->pipe, bad_err, bad);
        return;
    }
    uint8_t *buf = cn->part;
    uint32_t off = cn->part_len, total = cn->part_total;
    cn->part_out = true;
    pthread_mutex_unlock(&n->mu);
    /* copied without the node lock: only this callback writes into part,
     * and a conn removed meanwhile leaves the buffer to us */
    memcpy(buf + off, h->chunk, h->chunk_len);
    bool done = false;
    pthread_mutex_lock(&n->mu);
    cn = conn_find(n, c->pipe);
    if (cn == NULL || cn->part != buf) {
        n->part_bytes -= total;
        pthread_mutex_unlock(&n->mu);
        troupe_free(buf);
        return;
    }
    cn->part_out = false;
    cn->part_len += (uint32_t)h->chunk_len;
    cn->part_at = mono_ms();
    if (cn->part_len == cn->part_total) {
        cn->part = NULL;
        n->part_bytes -= total;
        done = true;
    }
    pthread_mutex_unlock(&n->mu);
    if (done) {
        deliver_frame(c, buf, total, true);
        troupe_free(buf);
    }
}

/* A frame from an authenticated pipe: DATA or PART as it came (`whole`
 * false), or the frame its PARTs made, which must be DATA. */
static void
deliver_frame(struct rx_ctx *c, const void *buf, size_t len, bool whole)
{
    troupe_node *n = c->n;
    c->stale = false;
    troupe_err e =
        troupe_wire_decode_frame(n->dec, buf, len, &c->h, inbox_msg, c);
    if (e != TROUPE_OK) {
        if (!troupe__other_version(n, c->pipe, buf, len))
            atomic_fetch_add(&n->bad_frames, 1);
    } else if (c->h.type == TROUPE_FRAME_DATA) {
        atomic_fetch_add(c->stale ? &n->stale_frames : &n->frames_recv, 1);
    } else if (c->h.type == TROUPE_FRAME_PART && !whole) {
        on_part(c);
    } else {
        atomic_fetch_add(&n->bad_frames, 1);
    }
}

/* One nng message from the inbox. */
static void
inbox_frame(troupe_node *n, nng_msg *nm)
{
    struct rx_ctx c = {.n = n,
                       .pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(nm))};
    const void *buf = nng_msg_body(nm);
    size_t len = nng_msg_len(nm);
    pthread_mutex_lock(&n->mu);
    struct conn *cn = conn_find(n, c.pipe);
    enum conn_state st = cn ? cn->st : CONN_CLOSING;
    if (cn != NULL)
        c.peer = cn->peer;
    pthread_mutex_unlock(&n->mu);
    if (st == CONN_AUTHED) {
        c.link = route(n, c.peer);
        deliver_frame(&c, buf, len, false);
        link_unref(c.link);
        return;
    }
    if (st == CONN_CLOSING) {
        atomic_fetch_add(&n->unauth_frames, 1);
        return;
    }
    /* Not authenticated: validated only, never turned into messages. */
    troupe_err e = troupe_wire_decode_frame(n->dec, buf, len, &c.h, NULL, NULL);
    if (e != TROUPE_OK) {
        if (!troupe__other_version(n, c.pipe, buf, len))
            atomic_fetch_add(&n->bad_frames, 1);
    } else if (c.h.type == TROUPE_FRAME_HELLO) {
        troupe__on_hello(n, c.pipe, &c.h);
    } else if (c.h.type == TROUPE_FRAME_AUTH) {
        troupe__on_auth(n, c.pipe, &c.h);
    } else {
        atomic_fetch_add(&n->unauth_frames, 1);
    }
}

/*
 * Inbox pipes: ADD_PRE admits a pipe into the conns table (evicting the
 * oldest connection still in its handshake when max_pending are, refusing
 * the pipe when the table is full); REM_POST removes it.
 */
static void
inbox_pipe_ev(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    troupe_node *n = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    uint32_t evict = 0, gone = 0;
    bool reject = false;
    uint8_t *part = NULL;
    pthread_mutex_lock(&n->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        if (atomic_load(&n->closing)) {
            reject = true;
        } else if (n->n_pending >= n->o.max_pending) {
            struct conn *old = NULL;
            for (uint32_t i = 0; i < n->n_conns; i++) {
                struct conn *c = &n->conns[i];
                if ((c->st == CONN_NEW || c->st == CONN_CHALLENGED) &&
                    (old == NULL || c->since < old->since))
                    old = c;
            }
            if (old != NULL) {
                conn_close(n, old, true);
                old->close_issued = true;
                evict = old->pipe;
            }
        }
        if (!reject && n->n_conns >= n->conn_cap) {
            reject = true;
            atomic_fetch_add(&n->refused, 1);
        }
        if (!reject) {
            struct conn *c = &n->conns[n->n_conns++];
            memset(c, 0, sizeof(*c));
            c->pipe = id;
            c->st = CONN_NEW;
            c->since = mono_ms();
            n->n_pending++;
        }
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        struct conn *c = conn_find(n, id);
        int lid = nng_listener_id(nng_pipe_listener(p));
        for (uint32_t i = 0; c != NULL && i < n->n_listeners; i++)
            if (nng_listener_id(n->listeners[i].l) == lid)
                n->listeners[i].pipes_ended++;
        if (c != NULL) {
            if (c->st == CONN_NEW || c->st == CONN_CHALLENGED)
                n->n_pending--;
            if (c->st == CONN_AUTHED && c->peer != n->id &&
                !atomic_load(&n->closing))
                gone = c->peer;
            if (c->part != NULL && !c->part_out) {
                part = c->part;
                n->part_bytes -= c->part_total;
            }
            /* a buffer being copied into is freed by that copier */
            *c = n->conns[--n->n_conns];
        }
    }
    pthread_mutex_unlock(&n->mu);
    troupe__node_log(n, TROUPE_LOG_DEBUG, "inbox pipe %u %s%s", id,
                     ev == NNG_PIPE_EV_ADD_PRE ? "added" : "removed",
                     reject ? " (rejected)" : "");
    if (gone != 0)
        troupe__node_log(n, TROUPE_LOG_INFO, "node %u disconnected", gone);
    troupe_free(part);
    if (evict != 0)
        troupe__end_pipe(evict);
    if (reject)
        nng_pipe_close(p);
}

static void
inbox_rx_done(void *arg)
{
    troupe_node *n = arg;
    int rv = nng_aio_result(n->inbox_rx);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv == 0) {
        nng_msg *nm = nng_aio_get_msg(n->inbox_rx);
        nng_aio_set_msg(n->inbox_rx, NULL);
        inbox_frame(n, nm);
        nng_msg_free(nm);
    }
    if (!atomic_load(&n->closing))
        nng_recv_aio(n->inbox, n->inbox_rx);
}

/* Opens the inbox socket (*opened then true, also on a later error: the
 * caller closes it) with its pipe events and receive aio, not yet
 * receiving. */
troupe_err
troupe__inbox_open(troupe_node *n, bool *opened)
{
    int rv;
    *opened = false;
    if ((rv = nng_pair1_open_poly(&n->inbox)) == 0) {
        *opened = true;
        if ((rv = nng_socket_set_size(n->inbox, NNG_OPT_RECVMAXSZ,
                                      INBOX_RECV_MAX)) == 0 &&
            (rv = nng_socket_set_int(n->inbox, NNG_OPT_SENDBUF, 64)) == 0 &&
            (rv = nng_pipe_notify(n->inbox, NNG_PIPE_EV_ADD_PRE, inbox_pipe_ev,
                                  n)) == 0 &&
            (rv = nng_pipe_notify(n->inbox, NNG_PIPE_EV_REM_POST, inbox_pipe_ev,
                                  n)) == 0)
            rv = nng_aio_alloc(&n->inbox_rx, inbox_rx_done, n);
    }
    return rv != 0 ? troupe__nng_err(n, rv, "inbox setup") : TROUPE_OK;
}
