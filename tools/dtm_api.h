/*
 * Private to tools/: the DTM-compatible HTTP API of `troupe node --dtm`
 * (docs/coordinator.md, "The DTM HTTP API"): DTM's transaction-manager
 * paths (/api/dtmsvr/newGid, prepare, submit, abort, registerBranch,
 * query, all) over the node's coordinator, so that DTM's client SDKs can
 * use a troupe node as their coordinator. Branch urls become calls to the
 * node's http target (troupe/httpcall.h), which the node must serve.
 *
 * Threads. nng's threads parse each request; prepare, submit, abort and
 * registerBranch go to the coordinator's asynchronous calls, whose
 * callback (on a shard's thread) completes nng's aio. query and all call
 * blocking functions: they run one at a time on the API's own worker
 * thread (at most DTM_QUEUE_MAX waiting; more are answered 503), never on
 * an nng or troupe thread.
 */
#ifndef TROUPE_TOOLS_DTM_API_H
#define TROUPE_TOOLS_DTM_API_H

#include <stdbool.h>

#include "troupe/coordinator.h"
#include "troupe/runtime.h"

/* Request bodies past this are refused (400) before they are read. */
#define DTM_BODY_MAX (1u << 20)
/* query and all requests waiting for the worker thread. */
#define DTM_QUEUE_MAX 64
/* Coordinator calls (prepare, submit, abort, registerBranch) in flight at
 * once; more are answered 503 until one ends, so a client that sends as
 * fast as it likes holds a bounded share of the coordinator. */
#define DTM_INFLIGHT_MAX 1024

typedef struct dtm_api dtm_api;

/*
 * Serves the API on addr, "HOST:PORT" as admin_create's (PORT 0: any free
 * one, see dtm_api_port). DTM's protocol has no authentication: a HOST
 * that is not loopback is refused (EAUTH) unless allow_public. rt and c
 * are borrowed and must outlive dtm_api_destroy. Errors: EINVAL (NULL, a
 * malformed addr), EAUTH, ESYS (nng could not bind or start: logged on
 * rt's logger), ENOMEM. Any thread but a loop thread; blocks while it
 * binds.
 */
troupe_err
dtm_api_create(troupe_runtime *rt, troupe_coord *c, const char *addr,
               bool allow_public, dtm_api **out);

/* The port it listens on. */
int
dtm_api_port(const dtm_api *d);

/*
 * Stops serving: new requests are answered 503, the coordinator calls in
 * flight are waited for (each completes its request), queued queries are
 * answered 503, the running one finishes, then the listener closes and
 * everything is freed. NULL is a no-op. Blocks. Call it before the
 * coordinator stops.
 */
void
dtm_api_destroy(dtm_api *d);

#endif
