/*
 * Remote actors over nng: a node object carries messages between this
 * runtime and the runtimes of other nodes (docs/wire.md, "Transport";
 * who may connect and what that protects: docs/security.md).
 *
 * A node is attached to one runtime and installs itself as the runtime's
 * remote hook, so troupe_send, troupe_ask, troupe_reply and
 * troupe_runtime_send/ask to an address whose node is another node go out
 * over nng, and envelopes that arrive are handed to troupe_runtime_deliver.
 * ask/reply works across nodes unchanged: the reply envelope carries
 * TROUPE_MSG_REPLY and the ask's corr.
 *
 * Topology: each node has one inbox (listen on one or more URLs:
 * tcp://HOST:PORT, tls+tcp://HOST:PORT, ipc://PATH, inproc://NAME) and one
 * outgoing link per peer. troupe_node_connect dials a peer's inbox and
 * says HELLO (its id, incarnation, own listen URL and a nonce); the peer
 * answers HELLO_ACK (its id, incarnation, its nonce and its proof), we
 * answer AUTH (our proof), and the peer dials back, so every pair of nodes
 * talks over two one-way links. A node that never listens can send but
 * receives nothing, replies included.
 *
 * Authentication (docs/security.md). With a cluster secret each side
 * proves it knows it (HMAC-SHA256 over both nonces); with certificates
 * (tls_cert, tls_key, tls_ca) each side signs the handshake and shows a
 * certificate from the CA that names its node id as "troupe-node-<id>",
 * and tls+tcp:// URLs run over mutually authenticated TLS. An inbox
 * connection delivers nothing until its handshake completes; every
 * envelope it then delivers carries from.node = the authenticated id (an
 * envelope naming another node is dropped). With an allow-list (`peers`)
 * only those ids are accepted, and the node dials only their configured
 * URLs. With none of these the node accepts anyone and says so on stderr.
 *
 * Delivery is at most once and in order per pair of nodes. Queues are
 * bounded per peer and node-wide (EFULL); frames batch many envelopes; a
 * peer that restarts is redialed, and messages queued for its old
 * incarnation are not delivered to the new one. A message queued for a
 * peer that stays disconnected longer than unreachable_ms, or past its
 * deadline, is given up; an ask given up so gets an error reply (err
 * EUNREACHABLE, or ETIMEDOUT at its deadline, flags TROUPE_MSG_REPLY, the
 * ask's corr) so the asker learns early. Once a peer has been
 * disconnected for unreachable_ms, sends to it fail at once with
 * EUNREACHABLE.
 *
 * Bounds. Links are at most max_peers; a link the node made on its own (a
 * dial-back) that stays down, or never completes its handshake, for
 * reap_ms is freed with its dialer and queue. Inbox connections are at
 * most 2 * max_peers + max_pending, of which at most max_pending are still
 * in their handshake (a new one then evicts the oldest), each closed if
 * its handshake takes longer than hello_timeout_ms. A connection holds at
 * most one nng message of TROUPE_WIRE_PART_MAX (+ TROUPE_WIRE_PART_OVERHEAD)
 * bytes; frames reassembled from PART frames (authenticated connections
 * only) take at most reassembly_bytes node-wide and must progress within
 * frame_timeout_ms. Queued envelopes take at most queue_bytes per peer and
 * queue_bytes_total in all.
 *
 * Threads: every function may be called from any thread except nng's
 * callback threads; none blocks except troupe_node_wait_peer,
 * troupe_node_connect_wait, troupe_node_stop_wait and troupe_node_destroy
 * (documented below). The node's own work runs on nng's threads and on
 * one thread of its own (the sweep), which call troupe_runtime_deliver;
 * never on a runtime loop thread.
 *
 * Lifecycle: troupe_node_create, then troupe_node_stop (or its blocking
 * twin troupe_node_stop_wait), then troupe_node_destroy once stopped.
 */
#ifndef TROUPE_TRANSPORT_H
#define TROUPE_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/msg.h"
#include "troupe/runtime.h"

typedef struct troupe_node troupe_node;

/* One entry of an allow-list: a node id and the URL of its inbox. */
typedef struct troupe_node_peer {
    uint32_t id;     /* not 0, not this node's own */
    const char *url; /* 1..TROUPE_WIRE_URL_MAX bytes */
} troupe_node_peer;

typedef struct troupe_node_opts {
    uint32_t queue_cap;        /* messages queued per peer; 0: 65536 */
    size_t queue_bytes;        /* encoded bytes queued per peer; 0: 64 MiB */
    size_t queue_bytes_total;  /* encoded bytes queued for all peers
                                  together; 0: 256 MiB */
    uint32_t batch_max;        /* envelopes per frame; 0: 1024, at most
                                  TROUPE_WIRE_BATCH_MAX */
    size_t frame_bytes;        /* close a frame once it is this big;
                                  0: 256 KiB, at most TROUPE_WIRE_FRAME_MAX */
    uint32_t send_timeout_ms;  /* give up on a queued message that has no
                                  deadline after this; 0: 10000 */
    uint32_t unreachable_ms;   /* a peer disconnected this long is
                                  unreachable; 0: 2000 */
    uint32_t reconnect_min_ms; /* dialer backoff; 0: 20 */
    uint32_t reconnect_max_ms; /* 0: 1000 */
    const char *advertise;     /* URL peers dial back (copied); NULL: the
                                  first listen URL, a tcp port 0 replaced
                                  by the bound port */
    uint32_t max_peers;        /* outgoing links at most; 0: 64 */
    uint32_t max_pending;      /* inbox connections still in their
                                  handshake at most; 0: 16 */
    uint32_t hello_timeout_ms; /* close an inbox connection whose handshake
                                  takes longer; 0: 3000 */
    uint32_t reap_ms;          /* free a dial-back link down this long;
                                  0: 10000 */
    size_t reassembly_bytes;   /* frames being reassembled, all connections;
                                  0: 64 MiB, at least TROUPE_WIRE_FRAME_MAX */
    uint32_t frame_timeout_ms; /* close a connection whose frame in parts
                                  makes no progress this long; 0: 10000 */
    const troupe_node_peer *peers; /* allow-list (copied); NULL: anyone */
    uint32_t n_peers;              /* entries in peers, at most max_peers */
    const void *secret;            /* cluster secret (copied), at least 16
                                      bytes; NULL: none */
    size_t secret_len;
    const char *tls_cert; /* PEM file of this node's certificate, which must
                             name "troupe-node-<id>" (CN or DNS SAN) */
    const char *tls_key;  /* PEM file of its private key */
    const char *tls_ca;   /* PEM file of the CA that signs every node's
                             certificate; the three come together */
} troupe_node_opts;

/*
 * Creates a node for `rt` (opts may be NULL: defaults) and installs it as
 * rt's remote hook; one node per runtime. The node takes its id from
 * troupe_runtime_node_id. Certificates and the CA are read and checked
 * here (the key must match the certificate, which must chain to the CA
 * and name this node's id). Without a secret and certificates it warns on
 * stderr that it accepts any peer. Errors: EINVAL (NULL argument,
 * out-of-range option, a bad allow-list entry, a secret under 16 bytes,
 * some but not all of the TLS files, a file that does not load or check;
 * detail on stderr), ENOMEM, EIO (nng or the system failed).
 */
troupe_err
troupe_node_create(troupe_node **out, troupe_runtime *rt,
                   const troupe_node_opts *opts);

/*
 * Listens on `url` (synchronously bound). tcp port 0 picks a free port;
 * troupe_node_url tells which. A tls+tcp:// URL listens with TLS and
 * requires every client to show a certificate from the CA. Errors: EINVAL
 * (NULL or bad URL, tls+tcp:// without certificates), EBUSY (address in
 * use), ECLOSED, ENOMEM, EIO.
 */
troupe_err
troupe_node_listen(troupe_node *n, const char *url);

/*
 * The URL this node advertises in HELLO (NULL until it listens, unless
 * opts.advertise was set). Owned by the node, valid until it is destroyed.
 */
const char *
troupe_node_url(const troupe_node *n);

/*
 * Starts dialing a peer's listen URL and returns; the dialer retries until
 * the node is destroyed (a link made here is never reaped). Connecting
 * again to a URL that already has a link reuses it. With an allow-list the
 * URL must be one of its entries: the link then expects that node id (and
 * over tls+tcp:// checks that the server's certificate names it). The peer
 * becomes reachable once the handshake completes (troupe_node_peer_up,
 * troupe_node_wait_peer). Errors: EINVAL (NULL or bad URL, tls+tcp://
 * without certificates), EAUTH (not in the allow-list), EFULL (max_peers
 * links exist), ECLOSED, ENOMEM, EIO.
 */
troupe_err
troupe_node_connect(troupe_node *n, const char *url);

/*
 * Blocking form for tools and tests (never on a loop thread): connects to
 * `url` and waits until the node there has answered and both links are up
 * (troupe_node_peer_up); *peer receives its node id. On ETIMEDOUT the link
 * keeps dialing in the background. Errors: those of troupe_node_connect,
 * ETIMEDOUT, EINVAL also when the URL turns out to be this node's own,
 * EAUTH when the node there refused our proof or its own did not check
 * (or another node id answered than the allow-list names), EFULL when it
 * refused us for lack of room, EDEADLK (called on a troupe scheduler's
 * thread or inside a troupe callback: nothing is started).
 */
troupe_err
troupe_node_connect_wait(troupe_node *n, const char *url, uint32_t timeout_ms,
                         uint32_t *peer);

/*
 * True when both links with node `peer` are established: our handshake
 * with its inbox completed and its handshake with ours did too, with the
 * same incarnation.
 */
bool
troupe_node_peer_up(troupe_node *n, uint32_t peer);

/* The state of our outgoing link to a peer. */
typedef enum troupe_peer_state {
    TROUPE_PEER_UNKNOWN = 0, /* no link names that node (sends fail with
                                EUNREACHABLE) */
    TROUPE_PEER_CONNECTING,  /* dialing or saying HELLO: sends queue */
    TROUPE_PEER_UP,          /* sends go out */
    TROUPE_PEER_DOWN,        /* disconnected less than unreachable_ms ago
                                (or never up yet): sends queue */
    TROUPE_PEER_UNREACHABLE  /* disconnected longer: sends fail at once */
} troupe_peer_state;

troupe_peer_state
troupe_node_peer_state(troupe_node *n, uint32_t peer);

/*
 * Blocks the calling thread (never a loop thread) until
 * troupe_node_peer_up(n, peer) or timeout_ms pass. ETIMEDOUT, EINVAL,
 * EDEADLK (on a troupe scheduler's thread or inside a troupe callback).
 */
troupe_err
troupe_node_wait_peer(troupe_node *n, uint32_t peer, uint32_t timeout_ms);

/* ---- remote name lookup ---- */

/* Every node answers at this address, as if it were an actor: node
 * `node`, slot TROUPE_NODE_SLOT, generation 0. */
#define TROUPE_NODE_SLOT UINT32_MAX

/* Kinds the node address understands (asks only; anything else is
 * answered with err ENOTSUP). */
enum {
    TROUPE_NODE_LOOKUP = 1, /* body [name]; reply body [node, slot, gen],
                               or err ENOENT and no body */
    TROUPE_NODE_PING = 2    /* any body; reply with an empty body */
};

static inline troupe_addr
troupe_node_addr(uint32_t node)
{
    return (troupe_addr){node, TROUPE_NODE_SLOT, 0};
}

/*
 * Builds a TROUPE_NODE_LOOKUP request for `name` (1..255 bytes) that an
 * actor sends with troupe_ask to troupe_node_addr(peer). The caller owns
 * *out. Errors: EINVAL, ENOMEM.
 */
troupe_err
troupe_node_lookup_msg(const char *name, troupe_msg **out);

/*
 * Reads the answer to a lookup: OK and *a, the reply's err (ENOENT,
 * EUNREACHABLE, ETIMEDOUT, ...), or EPROTO for a malformed body. The reply
 * is only read.
 */
troupe_err
troupe_node_lookup_result(const troupe_msg *reply, troupe_addr *a);

typedef void (*troupe_lookup_cb)(troupe_runtime *rt, troupe_err err,
                                 troupe_addr a, void *arg);

/*
 * Host form: asks node `peer` for the actor registered as `name` and calls
 * cb exactly once on scheduler 0 with OK and its address, or ENOENT,
 * EUNREACHABLE, ETIMEDOUT (after timeout_ms), ECLOSED, EPROTO. A call that
 * returns an error never fires cb. `peer` may be this node's own id (a
 * local registry lookup, still answered through cb, never inside this
 * call; it needs no worker thread). Errors: EINVAL, ENOMEM, ECLOSED,
 * EUNREACHABLE.
 */
troupe_err
troupe_node_lookup(troupe_node *n, uint32_t peer, const char *name,
                   uint32_t timeout_ms, troupe_lookup_cb cb, void *arg);

/* ---- observation and teardown ---- */

typedef struct troupe_node_stats {
    uint64_t msgs_sent; /* envelopes handed to nng */
    uint64_t frames_sent;
    uint64_t msgs_recv; /* envelopes received and delivered or handled */
    uint64_t frames_recv;
    uint64_t bad_frames;    /* received frames refused by strict decoding */
    uint64_t stale_frames;  /* frames meant for another incarnation */
    uint64_t deliver_fail;  /* received envelopes troupe_runtime_deliver
                               refused (EDEAD, EFULL, ...) */
    uint64_t gave_up;       /* queued messages given up (deadline, peer
                               unreachable or restarted) */
    uint64_t error_replies; /* error replies sent to askers for those */
    uint64_t full;          /* sends refused with EFULL */
    uint64_t refused;       /* inbox connections refused or closed: over a
                               cap, handshake timeout, not allowed, failed
                               proof, stalled or over-budget frame */
    uint64_t auth_failed;   /* proofs that did not check, either side */
    uint64_t unauth_frames; /* frames dropped because their connection had
                               not completed its handshake */
    uint64_t spoofed;       /* envelopes dropped: from.node was not the
                               authenticated peer's id */
    uint64_t reaped;        /* links freed while the node runs */
    uint64_t relistened;    /* tls or ipc listeners replaced after nng
                               stopped them (docs/wire.md, "Shutdown") */
    uint64_t redialed;      /* tls or ipc dialers replaced likewise */
    uint32_t links;         /* outgoing links now */
    uint32_t conns;         /* inbox connections now */
    uint32_t pending;       /* of which still in their handshake */
} troupe_node_stats;

/* A snapshot of the node's counters (each read atomically). */
void
troupe_node_stats_get(const troupe_node *n, troupe_node_stats *out);

typedef void (*troupe_node_stop_cb)(troupe_node *n, void *arg);

/*
 * Stops the node and returns at once: removes the remote hook (sends to
 * other nodes fail from now on; listen and connect are ECLOSED), and the
 * node's sweep thread waits for the senders already inside the hook,
 * closes every listener, connection and socket, waits until nng's
 * callbacks have finished and gives up on what is still queued (asks get
 * an EUNREACHABLE reply through troupe_runtime_deliver). Then cb(n, arg)
 * fires once, on that sweep thread (named "troupe-sweep"; never inside
 * this call): from then on nothing of the node runs and cb may destroy
 * it. The work is bounded by max_peers links and the inbox connections
 * (docs/security.md has the measured figure under a flood). Call it
 * after the runtime's shutdown has completed (or when no actor can still
 * send remotely); the runtime must outlive cb. Any thread, nng's
 * callback threads included. Errors (cb never fires): EINVAL (NULL n or
 * cb), ESTATE (already stopping or stopped).
 */
troupe_err
troupe_node_stop(troupe_node *n, troupe_node_stop_cb cb, void *arg);

/*
 * troupe_node_stop and a wait for its callback; its errors, and EDEADLK
 * (on a troupe scheduler's thread or inside a troupe callback, refused
 * there as every blocking call of troupe is: nothing is stopped). Blocks
 * briefly. nng's callback threads cannot be told from others (nng has no
 * call for it), and the node runs no user code on them: a host that uses
 * nng itself must not call this from one of its callbacks.
 */
troupe_err
troupe_node_stop_wait(troupe_node *n);

/*
 * Frees a stopped node (its stop callback has fired, or stop_wait
 * returned); may be called from the stop callback itself. Blocks only
 * until the sweep thread has returned from the stop callback. Call it
 * before troupe_runtime_destroy. NULL is a no-op; a node not stopped is
 * a programming error: abort().
 */
void
troupe_node_destroy(troupe_node *n);

#endif
