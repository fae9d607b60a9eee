/*
 * Private to tools/: the node's admin endpoint, an HTTP/1.1 server (nng's,
 * reached only through admin.c) answering JSON and Prometheus text about
 * the objects of one node (docs/operations.md, "The admin endpoint").
 *
 * Threads. nng's threads only hand each request to the endpoint's own
 * worker thread, which runs the routes one at a time: they call the
 * library's blocking `_wait` functions, which must never run on nng's
 * threads (the node's transport shares them) nor on a loop thread. At most
 * ADMIN_QUEUE_MAX requests wait for the worker; more are answered 503 at
 * once, so a flood holds at most that many request bodies in memory.
 */
#ifndef TROUPE_TOOLS_ADMIN_H
#define TROUPE_TOOLS_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/queue.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/transport.h"

/* Request bodies past this are refused (400, code "refused": nng answers
 * it before the body is read); the routes' bodies are small JSON
 * objects. */
#define ADMIN_BODY_MAX (64u * 1024u)
/* Requests waiting for the worker thread. */
#define ADMIN_QUEUE_MAX 64
/* The bearer token: 16..ADMIN_TOKEN_MAX bytes (one trailing newline of
 * the file is not part of it). */
#define ADMIN_TOKEN_MIN 16
#define ADMIN_TOKEN_MAX 4096

/* What the routes read and act on; all borrowed, and every one must
 * outlive admin_destroy. Only rt and db are required: a route whose object
 * is NULL (or kv TROUPE_ADDR_NONE) answers 404 naming what is missing. */
typedef struct admin_ctx {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_node *node;
    troupe_tables *tables;
    troupe_queues *queues;
    troupe_coord *coord; /* the node's coordinator (the /v1/gtx routes) */
    troupe_addr kv;      /* the node's kv actor */
} admin_ctx;

typedef struct admin admin;

/*
 * Starts serving on addr, "HOST:PORT" (HOST an IPv4 address or
 * "localhost", or [IPv6]; PORT 0: any free one, see admin_port). token
 * (may be NULL, then token_len 0) is copied: with one, every route wants
 * `Authorization: Bearer <token>` (401 without it, 403 with another one);
 * a HOST that is not loopback requires one. On OK *out owns the endpoint.
 * Errors: EINVAL (NULL, a malformed addr, a token outside
 * ADMIN_TOKEN_MIN..MAX), EAUTH (not loopback and no token), ESYS (nng
 * could not bind or start: its error is logged on the runtime's logger),
 * ENOMEM. One endpoint per HOST:PORT in a process (nng shares its server
 * by address). Any thread but a loop thread; blocks while it binds.
 */
troupe_err
admin_create(const admin_ctx *ctx, const char *addr, const char *token,
             size_t token_len, admin **out);

/* The port it listens on (the one chosen when addr said 0). */
int
admin_port(const admin *a);

/*
 * Stops serving: requests still queued are answered 503, the one running
 * finishes, then the listener closes and everything is freed. NULL is a
 * no-op. Blocks (for the running request). Call it before any object of
 * the context goes.
 */
void
admin_destroy(admin *a);

/* The status named s by the stored format's names ("prepared",
 * "submitted", "aborting", "succeed", "failed"; docs/coordinator.md), 0
 * for none; and the reverse ("unknown" for a value that is no status).
 * For the /v1/gtx routes and `troupe gtx`; any thread. */
troupe_gtx_status
admin_gtx_status_of(const char *s);
const char *
admin_gtx_status_name(troupe_gtx_status s);

/* Splits "HOST:PORT" / "[V6]:PORT" into host (brackets removed) and the
 * URL nng's HTTP server wants ("http://HOST:PORT"); false when malformed
 * or when either does not fit its buffer. Also for the DTM API's
 * --dtm (dtm_api.h). */
bool
admin_parse_addr(const char *addr, char *host, size_t host_cap, char *url,
                 size_t url_cap);

/* One HTTP listener as the admin endpoint and the DTM API run theirs:
 * url (admin_parse_addr's), one handler for every path and method
 * (fn, with data), request bodies collected up to body_max, `refused`
 * the body of nng's own 400 page. */
typedef struct admin_http {
    const char *url;
    void (*fn)(nng_aio *aio);
    void *data;
    size_t body_max;
    const char *refused;
} admin_http;

/*
 * Holds, sets up and starts the server h describes and reads the port it
 * listens on: OK with *srv (the caller's: stop and release it) and
 * *port; EINVAL (the url does not parse) or ESYS (an nng error, logged
 * on rt's logger under sys, naming what and addr), with *srv NULL and
 * nothing left held. Never blocks but for the bind.
 */
troupe_err
admin_http_serve(const admin_http *h, troupe_runtime *rt, const char *sys,
                 const char *what, const char *addr, nng_http_server **srv,
                 int *port);

/* Whether HOST (as in admin_create's addr, brackets removed) names the
 * loopback interface: 127.0.0.0/8, ::1 or "localhost". */
bool
admin_host_is_loopback(const char *host);

#endif
