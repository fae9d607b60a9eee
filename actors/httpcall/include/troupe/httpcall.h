/*
 * http branches: the coordinator's calls to http:// and https:// URLs, as
 * DTM makes them, served by one dispatch target (troupe/dispatch.h) in
 * pull mode.
 *
 * troupe_httpcall_open opens a host endpoint, creates a pull target on it
 * (default name "http") and starts one thread of its own running a libuv
 * loop with libcurl's multi interface: the endpoint's wake fd tells it to
 * pull tasks, each task becomes one request, each request's end becomes
 * the task's reply (troupe_host_reply). A branch whose call names this
 * target (troupe_gtx_call.target "http") is called over HTTP.
 *
 * A task is of kind TROUPE_TASK_BRANCH: its header is four NUL-terminated
 * strings, mode, gid, branch id, op ("saga", "g-1", "01", "action"); its
 * body, the branch's payload, is one msgpack array of two:
 *
 *   [url: str, body: bin]
 *
 * (build it with troupe_httpcall_payload_pack). The request:
 *   - op "msg" (a two-phase message's query-back): GET url, no body;
 *   - any other op: POST url with the body byte for byte,
 *     Content-Type: application/json;
 *   - both with the query parameters gid, trans_type (the mode), branch_id
 *     and op appended, each value percent-encoded (RFC 3986: every byte
 *     but A-Z a-z 0-9 - . _ ~), after the URL's own query if it has one
 *     ('&' then, else '?'); a fragment is dropped (it is never sent);
 *   - only the schemes http and https, no redirect followed, no proxy
 *     (the environment's http_proxy and the like are ignored), the task's
 *     deadline_ms as the request's whole timeout.
 *
 * The verdict (DTM's), the task's outcome:
 *   2xx           SUCCESS, unless the response body contains "ONGOING"
 *                 (ONGOING) or else "FAILURE" (FAILURE); ONGOING is
 *                 looked for first, as DTM does, so a body with both asks
 *                 again rather than compensates;
 *   409           FAILURE;
 *   425           ONGOING;
 *   anything else UNKNOWN: another status (3xx included: no redirect is
 *                 followed), a connection refused or reset, a name that
 *                 does not resolve, the deadline, a stop with the request
 *                 in flight.
 * The whole response body is searched, however long; only its first
 * body_max bytes are kept and become the reply's body (so a capped body
 * never hides a marker past the cap). A call that got no response
 * replies libcurl's error text as the body.
 *
 * A task that can never make a request sends nothing and answers at once,
 * with a body saying why: a header that is not four strings, a payload
 * that is not [str, bin] (or whose url holds a NUL), a url whose scheme
 * is not http or https, a url libcurl cannot parse. Such a payload is
 * stored in the transaction and would come back unchanged on every
 * retry, so UNKNOWN would retry it for ever; nothing was sent, so the
 * answer is FAILURE (the call did not take effect: the producer may
 * compensate). Except for op "msg": a query-back's FAILURE would say the
 * message's local transaction did not commit, which nobody asked, so it
 * answers UNKNOWN (asked again after the backoff; an operator aborts or
 * force-stops the message). Both are counted in stats.refused.
 *
 * Memory is bounded: at most `credit` requests at once (the target holds
 * no more tasks than that either); each keeps its url, its request body
 * and at most body_max bytes of response.
 *
 * Objects and threads: troupe_httpcall_open allocates an object the
 * caller owns; it borrows the runtime, which must outlive it (stop and
 * destroy it before troupe_runtime_destroy). The calls may come from any
 * thread but the object's own; stop_wait blocks.
 */
#ifndef TROUPE_HTTPCALL_H
#define TROUPE_HTTPCALL_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/dispatch.h"
#include "troupe/err.h"
#include "troupe/pack.h"
#include "troupe/runtime.h"

#define TROUPE_HTTPCALL_TARGET_DEFAULT "http"
/* The response bytes kept by default, and the most body_max may be. */
#define TROUPE_HTTPCALL_BODY_MAX_DEFAULT (64u << 10)
#define TROUPE_HTTPCALL_BODY_MAX_MAX (1u << 20)
/* The longest url a payload may hold. */
#define TROUPE_HTTPCALL_URL_MAX 8192

typedef struct troupe_httpcall troupe_httpcall;

typedef struct troupe_httpcall_opts {
    const char *target;  /* the target's name; NULL: "http" */
    uint32_t credit;     /* requests at once (the target's credit);
                            0: TROUPE_TARGET_CREDIT_DEFAULT */
    uint32_t timeout_ms; /* the target's timeout, from submit to answer;
                            0: TROUPE_TARGET_TIMEOUT_DEFAULT_MS */
    uint32_t body_max;   /* response bytes kept; 0: 64 KiB; at most
                            TROUPE_HTTPCALL_BODY_MAX_MAX */
} troupe_httpcall_opts;

/*
 * Opens the endpoint, creates the target and starts the thread. o may be
 * NULL. Errors: EINVAL (NULL rt or out, a bad option), EEXIST (the
 * target's name is taken on rt), ECLOSED (rt shut down), ENOMEM, ESYS (no
 * eventfd, no thread, libcurl would not start: logged). Never blocks.
 */
troupe_err
troupe_httpcall_open(troupe_runtime *rt, const troupe_httpcall_opts *o,
                     troupe_httpcall **out);

/*
 * Stops: every request in flight is aborted and its task settles UNKNOWN
 * (it may have reached the server); the thread ends, its curl handles
 * freed; then the target stops (tasks still queued settle UNKNOWN) and
 * the endpoint closes. Every task the target took settles exactly once.
 * Returns once all of that is done. Errors: EINVAL (NULL), ESTATE
 * (stopped already), EDEADLK (on a troupe thread or the object's own).
 * Blocks (for the requests' abort: it does not wait for a server).
 */
troupe_err
troupe_httpcall_stop_wait(troupe_httpcall *h);

/* Frees a stopped object. NULL is a no-op; one not stopped is a
 * programming error: abort(). */
void
troupe_httpcall_destroy(troupe_httpcall *h);

/* Counters since open; relaxed reads. */
typedef struct troupe_httpcall_stats {
    uint64_t requests;    /* requests started */
    uint64_t answered[5]; /* replies made, by outcome (index 1..4) */
    uint64_t refused;     /* tasks answered FAILURE without a request */
    uint64_t capped;      /* responses whose body passed body_max */
    uint64_t late;        /* replies the dispatch refused (the task had
                             settled first: its deadline) */
    uint32_t in_flight;   /* requests running now */
    uint32_t in_flight_max;
} troupe_httpcall_stats;

/* NULL h: zeroes. */
void
troupe_httpcall_stats_get(const troupe_httpcall *h, troupe_httpcall_stats *out);

/* The target (borrowed, until troupe_httpcall_destroy), for its stats. */
troupe_target *
troupe_httpcall_target(const troupe_httpcall *h);

/*
 * Packs an http branch's payload, [url, body], into p (one value; the
 * caller takes the bytes as usual). url is NUL-terminated, at most
 * TROUPE_HTTPCALL_URL_MAX bytes; body may be NULL when len is 0. Checks
 * only the lengths: a url with another scheme packs, and its branch
 * answers FAILURE when it runs. Errors: EINVAL (NULL p or url, NULL body
 * with len > 0, an empty or too long url: p's error is left alone), the
 * packer's (sticky).
 */
troupe_err
troupe_httpcall_payload_pack(troupe_packer *p, const char *url,
                             const void *body, size_t len);

#endif
