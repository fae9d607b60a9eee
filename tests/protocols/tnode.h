/*
 * Helpers for the transport and security suites: nodes with a test actor
 * in one process, host asks, name lookups, a raw peer that speaks the wire
 * by hand (the hostile side), certificates made with openssl, and the
 * process's resident memory.
 */
#ifndef TROUPE_TESTS_PROTOCOLS_TNODE_H
#define TROUPE_TESTS_PROTOCOLS_TNODE_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "auth.h"
#include "suites.h"
#include "troupe/actor.h"
#include "troupe/log.h"
#include "troupe/transport.h"
#include "troupe/wire.h"

/* ---- the test actor ---- */

enum { K_ECHO = 0, K_SINK = 1, K_GO = 2, K_REPLY = 3, K_COUNT = 4 };

struct shared {
    _Atomic uint64_t count;
    _Atomic uint64_t out_of_order;
    uint64_t next_seq;
    troupe_addr target;
    _Atomic int done;
    troupe_err err;
    size_t len;
    char body[64];
    troupe_addr last_from;  /* K_COUNT: the sender of the last one */
    uint64_t body_sum;      /* K_COUNT: a checksum of the bodies seen */
    _Atomic uint64_t bytes; /* K_COUNT: body bytes seen */
};

/* ---- nodes in this process ---- */

struct side {
    troupe_runtime *rt;
    troupe_node *node;
    struct shared sh;
    troupe_addr actor; /* a test actor registered as "test" */
};

/* A runtime (node `id`, 2 schedulers), its node (opts may be NULL),
 * listening on `listen` unless NULL, and the test actor. */
void
side_open(struct side *s, uint32_t id, const troupe_node_opts *o,
          const char *listen);
/* Like side_open, but returns node creation's error instead of failing
 * (then s->rt is still open: close it with side_close). */
troupe_err
side_try_open(struct side *s, uint32_t id, const troupe_node_opts *o,
              const char *listen);
void
side_close(struct side *s);
/* Connects a to b and waits until both directions are up. */
void
connect_pair(struct side *a, struct side *b);
/* tcp://127.0.0.1:0, a fresh ipc:// path or inproc:// name (malloc'd). */
char *
unique_url(const char *scheme, const char *tag);

struct ask_res {
    _Atomic int done;
    troupe_err err;
    size_t len;
    char body[128];
    troupe_addr addr;
    uint32_t kind;
};

void
ask_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg);
void
lookup_cb(troupe_runtime *rt, troupe_err err, troupe_addr a, void *arg);
bool
is_done(void *arg);
bool
shared_done(void *arg);

struct count_at_least {
    _Atomic uint64_t *count;
    uint64_t want;
};

bool
count_reached(void *arg);
/* A host ask of K_ECHO with `body` (a C string, may be NULL), waited for. */
troupe_err
host_ask(troupe_runtime *rt, troupe_addr to, const char *body,
         uint32_t timeout_ms, struct ask_res *r);
/* Looks `name` up on node `peer` from `from`; asserts it is found. */
troupe_addr
lookup(struct side *from, uint32_t peer, const char *name);
/* A message whose body is the uint `seq`. */
troupe_msg *
seq_msg(uint32_t kind, uint64_t seq);
/* Round trips of TROUPE_NODE_PING from a to node `peer`: the median in
 * microseconds of `n` asks, or UINT64_MAX when one failed. */
uint64_t
ping_median_us(struct side *a, uint32_t peer, int n, uint32_t timeout_ms);

/* ---- a raw peer ---- */

/*
 * A TCP connection to a node's inbox that speaks SP and the wire by hand
 * (no nng on this side: it never redials, and it can do what nng never
 * would), as node `id` with incarnation `inc`. With `auth` (may be NULL)
 * its proofs are made with it; without, they are empty (what open mode
 * takes).
 */
struct raw {
    int fd;
    uint32_t id;
    uint64_t inc;
    troupe__auth *auth;
    uint32_t send_timeout_ms; /* sends; 0: 5000 */
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    char url[TROUPE_WIRE_URL_MAX + 1]; /* the URL its HELLO names */
    /* the last control frame received (raw_recv) */
    uint8_t buf[TROUPE_WIRE_CTL_MAX + 64];
    size_t len;
    troupe_frame_hdr h;
    /* the AUTH it sent last, for replays */
    uint8_t auth_frame[TROUPE_WIRE_CTL_MAX];
    size_t auth_len;
};

/* A TCP connection to 127.0.0.1:port past the SP header exchange (pair1),
 * or -1. */
int
sp_connect_try(uint16_t port);
/* The port of a tcp://HOST:PORT URL. */
uint16_t
url_port(const char *url);

/* Connects to url, a tcp://127.0.0.1:PORT listen URL of a node. */
void
raw_open(struct raw *r, const char *url, uint32_t id, uint64_t inc);
void
raw_close(struct raw *r);
/* Sends bytes as one SP message; 0 or an errno. */
int
raw_send(struct raw *r, const void *buf, size_t len);
/* True once the node has closed the connection (reads and drops what it
 * sent before). Never blocks. */
bool
raw_dropped(void *arg);
/* Sends HELLO (naming r->url) with a fresh nonce; 0 or an errno. */
int
raw_hello(struct raw *r);
/* Waits up to timeout_ms for a frame from the node; OK and r->h (EPROTO
 * for one that does not decode), or ETIMEDOUT, or ECLOSED when the node
 * closed the connection. */
troupe_err
raw_recv(struct raw *r, uint32_t timeout_ms);
/* Answers the HELLO_ACK in r->h with AUTH (proof from r->auth); 0 or an
 * errno. */
int
raw_auth(struct raw *r);
/* HELLO, HELLO_ACK, AUTH: OK, or the REFUSE's error, ETIMEDOUT, or
 * ECLOSED when a send found no connection. */
troupe_err
raw_handshake(struct raw *r);
/* Sends msgs as one DATA frame for receiver incarnation `inc`. */
void
raw_data(struct raw *r, troupe_msg *const *msgs, size_t n, uint64_t inc);

/* ---- certificates ---- */

/*
 * A CA and node certificates made with openssl in a temp dir: ca.pem,
 * and for each id n<id>.pem and n<id>.key naming "troupe-node-<id>" (CN
 * and DNS SAN). ids[] is 0-terminated. Returns the dir (malloc'd), or
 * NULL when openssl fails.
 */
char *
certs_make(const uint32_t *ids, const char *tag);
/* Another CA (other-ca.pem) and a certificate for `id` under it
 * (other<id>.pem/.key) in dir. */
bool
certs_make_other(const char *dir, uint32_t id);
/* dir/name into buf. */
const char *
certs_path(const char *dir, const char *name, char *buf, size_t cap);

/*
 * Ends a test that used nng: waits until nng has freed every socket,
 * dialer, listener and pipe (its statistics tree is then empty; teardown
 * finishes on nng's reaper thread after nng_close returns), then calls
 * nng_fini. A connection flood leaves nng tearing down for a while, and a
 * fini that overtakes it drops objects that LeakSanitizer would report.
 * Fails the test if nng does not settle within 10 s.
 */
void
nng_end(void);

/* ---- memory ---- */

/* This process's resident set, in bytes (from /proc/self/status). */
size_t
rss_bytes(void);

/*
 * An RSS bound for a test: `bytes` as is, or more under a sanitizer,
 * which holds freed blocks in a quarantine (ASan: up to 256 MiB) and
 * shadow memory on top of what the code holds. The sanitized bound still
 * catches growth of the order of the attacks (hundreds of MB to GB).
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TN_SANITIZED 1
#endif
#endif
#ifdef TN_SANITIZED
#define RSS_BOUND(bytes) ((size_t)(bytes)*2 + ((size_t)320 << 20))
#else
#define RSS_BOUND(bytes) ((size_t)(bytes))
#endif

/* ---- log capture ---- */

/* A logger's ctx that keeps "level sys msg" lines (cap_fn is its fn);
 * thread-safe, as the logger's contract asks. Init mu before use. */
struct caplog {
    pthread_mutex_t mu;
    char buf[32768];
    size_t len;
};

void
cap_fn(void *ctx, const troupe_log_record *rec);
/* Waits (10 s at most) until a kept line holds `line`; fails otherwise. */
void
cap_expect(struct caplog *c, const char *line);
/* The test process's stderr goes to a temporary file until the returned
 * descriptor (the old stderr) is handed to stderr_restore, which returns
 * how many bytes were written to it meanwhile. */
int
stderr_capture(FILE **file);
long
stderr_restore(int old, FILE *file);

#endif
