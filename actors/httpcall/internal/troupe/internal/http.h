/*
 * A small asynchronous HTTP request API on the httpcall thread, for troupe's
 * own clients of HTTP services (the etcd client, actors/cluster): the one
 * way into libcurl besides the http branches, so that libcurl stays behind
 * this module (STYLE.md: one adapter per foreign library).
 *
 * troupe__http_open makes an httpcall object with no target and no host
 * endpoint: only the thread, its libuv loop and libcurl's multi handle. An
 * object made by troupe_httpcall_open takes requests too, on the same
 * thread as its branches. Stop and free either with troupe_httpcall_stop_wait
 * and troupe_httpcall_destroy.
 *
 * A request: a method, an http:// or https:// url, a body (copied), a
 * timeout for the whole exchange. Its callback fires exactly once, on the
 * httpcall thread, when a call returned OK:
 *   e OK            a response came: status is its HTTP status (any, 3xx
 *                   included: no redirect is followed), body its bytes,
 *                   borrowed for the call (len 0: body may be NULL);
 *   e ETOOBIG       the response body passed the object's body_max (the
 *                   bytes are dropped: a cut JSON document must never be
 *                   parsed as whole);
 *   e ETIMEDOUT     the timeout passed;
 *   e EUNREACHABLE  no response: refused, reset, a name not resolved;
 *   e ECLOSED       the object stopped first (the request may have reached
 *                   its server);
 *   e ENOMEM        no memory for the transfer (nothing was sent).
 * The callback must not block; it may make further requests.
 *
 * Memory is bounded: at most TROUPE__HTTP_PENDING_MAX requests queued or
 * running per object (one more is refused with EFULL), each holding its
 * url, its body and at most body_max response bytes. No proxy, no
 * Expect: 100-continue, as for the branches.
 */
#ifndef TROUPE_INTERNAL_HTTP_H
#define TROUPE_INTERNAL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/httpcall.h"
#include "troupe/log.h"

#define TROUPE__HTTP_PENDING_MAX 256
/* The largest request body. */
#define TROUPE__HTTP_BODY_MAX (4u << 20)

typedef struct troupe__http_req {
    const char *method;       /* "GET", "POST", "PUT" or "DELETE" */
    const char *url;          /* NUL-terminated, at most URL_MAX bytes */
    const void *body;         /* NULL when len is 0 */
    size_t len;               /* at most TROUPE__HTTP_BODY_MAX */
    const char *content_type; /* NULL: application/json (POST and PUT) */
    uint32_t timeout_ms;      /* > 0 */
} troupe__http_req;

typedef void (*troupe__http_cb)(void *arg, troupe_err e, long status,
                                const uint8_t *body, size_t len);

/*
 * Starts a request-only object. log may be NULL (nothing logged); it must
 * outlive the object. body_max 0: TROUPE_HTTPCALL_BODY_MAX_DEFAULT; at
 * most TROUPE_HTTPCALL_BODY_MAX_MAX. Errors: EINVAL (NULL out, body_max
 * too big), ENOMEM, ESYS (no thread, libcurl would not start). Never
 * blocks.
 */
troupe_err
troupe__http_open(const troupe_logger *log, uint32_t body_max,
                  troupe_httpcall **out);

/*
 * Queues a request; rq and what it points to are copied. Any thread,
 * the object's own included. Errors (the callback never fires): EINVAL
 * (NULL h, rq, url or cb, another method, an empty or too long url, a
 * NULL body with len > 0, a body too big, timeout 0), ECLOSED (stopping
 * or stopped), EFULL (TROUPE__HTTP_PENDING_MAX outstanding), ENOMEM.
 */
troupe_err
troupe__http_request(troupe_httpcall *h, const troupe__http_req *rq,
                     troupe__http_cb cb, void *arg);

/* True on the object's own thread (a blocking wait there would never
 * return). */
bool
troupe__http_on_thread(const troupe_httpcall *h);

#endif
