/*
 * Private to tools/admin*.c: one request as the routes see it, the route
 * tables, and the helpers every route answers with. The server adapter
 * (admin.c) fills an admin_call from nng's request, admin_dispatch picks
 * the route, and the adapter turns the answer into nng's response. Routes
 * run on the endpoint's worker thread only (admin.h), one at a time.
 *
 * Every answer is JSON (`/metrics` excepted): success is the route's
 * object, failure is {"error": {"status": N, "code": "...", "message":
 * "..."}} with "troupe_error" (the troupe_err name) when a library call
 * failed.
 */
#ifndef TROUPE_TOOLS_ADMIN_ROUTE_H
#define TROUPE_TOOLS_ADMIN_ROUTE_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "admin.h"

/* Path segments a pattern may capture ("{}" segments). */
#define ADMIN_PARAMS_MAX 4
/* Segments of a path; longer paths are 404. */
#define ADMIN_SEGS_MAX 8

typedef struct admin_call {
    /* request */
    const char *method;
    const char *query; /* after '?', raw; "" when none */
    const void *body;  /* borrowed; body_len bytes, not NUL-terminated */
    size_t body_len;
    /* The captured segments, percent-decoded; param_len[i] bytes, NUL at
     * the end (a segment holding %00 is refused before any route runs). */
    char *param[ADMIN_PARAMS_MAX];
    size_t param_len[ADMIN_PARAMS_MAX];
    /* answer: status and either json (owned) or text */
    int status;
    json_t *json;
    char *text; /* malloc'd; text_len bytes */
    size_t text_len;
    const char *content_type; /* static; NULL: application/json */
    char allow[64];           /* 405: the methods the path takes */
} admin_call;

typedef void (*admin_fn)(const admin_ctx *c, admin_call *call);

typedef struct admin_route {
    const char *method;  /* GET, POST, PUT */
    const char *pattern; /* "/v1/queues/{}/pause": {} is one segment */
    admin_fn fn;
} admin_route;

/* The tables admin_dispatch looks in; each ends with a NULL method. */
extern const admin_route admin_stats_routes[];   /* admin_stats.c */
extern const admin_route admin_queue_routes[];   /* admin_queue.c */
extern const admin_route admin_gtx_routes[];     /* admin_gtx.c */
extern const admin_route admin_data_routes[];    /* admin_data.c */
extern const admin_route admin_metrics_routes[]; /* admin_metrics.c */

/*
 * Matches path (raw, without the query) against the route tables and runs
 * the route, or answers 404 (no pattern matches; also a segment that does
 * not percent-decode or holds NUL) or 405 (a pattern matches, not with
 * this method: call->allow lists the ones that do). call's request fields
 * are set; its params are freed here.
 */
void
admin_dispatch(const admin_ctx *c, const char *path, admin_call *call);

/* Answers 200 with *j (taken; NULL means the JSON could not be built: 500
 * out of memory). */
void
admin_ok(admin_call *call, json_t *j);

/* Answers `status` with the error body: code is a short
 * snake_case word (not_found, bad_json, ...), the message says what was
 * wrong, naming the value. */
void
admin_error(admin_call *call, int status, const char *code, const char *fmt,
            ...) __attribute__((format(printf, 4, 5)));

/* A library call's failure: the status its error means (ENOENT,
 * ENOTABLE, ENOINDEX, ENOQUEUE 404, EINVAL/ERANGE/ETOOBIG/EPROTO 400,
 * EEXIST/EBUSY/ESTATE/ECONSTRAINT/ECONFLICT 409, ETIMEDOUT 504,
 * EFULL/ECLOSED 503, others 500), `what` in the message with the call's detail
 * (troupe_errmsg, so call it on the thread that made the call, right
 * after it), and troupe_error set. */
void
admin_fail(admin_call *call, const char *what, troupe_err e);

/* The body parsed as one JSON object, or NULL with 400 answered (empty,
 * malformed with jansson's line, column and text, or not an object). The
 * caller owns the result (json_decref). */
json_t *
admin_body_object(admin_call *call);

/* A query parameter (decoded, NUL-terminated, malloc'd: free it), NULL
 * when absent. *bad is set when present but malformed (400 answered). */
char *
admin_query(admin_call *call, const char *name, bool *bad);

/* A decimal query parameter in [lo, hi], dflt when absent; false with 400
 * answered otherwise. */
bool
admin_query_num(admin_call *call, const char *name, long lo, long hi, long dflt,
                long *out);

/*
 * Bytes as JSON: a string when they are valid UTF-8 without control
 * characters, else {"hex": "..."}. NULL on ENOMEM.
 */
json_t *
admin_json_bytes(const void *p, size_t n);

/*
 * The reverse, for request fields: a string (its UTF-8 bytes) or
 * {"hex": "..."}; 1..max bytes. Returns a malloc'd copy (free it) or NULL
 * with 400 answered naming `field`.
 */
uint8_t *
admin_field_bytes(admin_call *call, json_t *obj, const char *field, size_t max,
                  size_t *len);

/* Unix ms as ISO 8601 UTC with milliseconds ("2026-01-02T03:04:05.678Z"),
 * JSON null for negative times. */
json_t *
admin_json_time(int64_t ms);

/* Hex of n bytes into a new string (free it), NULL on ENOMEM. */
char *
admin_hex(const void *p, size_t n);

/* Decodes hex; malloc'd result (free it) or NULL when s is not an even
 * number (at least 2) of hex digits. */
uint8_t *
admin_unhex(const char *s, size_t *n);

/*
 * One msgpack object as JSON, bounded: nesting past TROUPE_WIRE_DEPTH_MAX
 * (32) levels, more than 256 Ki values, or an estimated 4 MiB of JSON
 * text fails. Strings that are not UTF-8 and bin become {"bin": "<hex>"},
 * ext {"ext": "<hex of its msgpack bytes>"}; map keys that are not strings are
 * written as their JSON text (an integer key 1 becomes "1"); integers past
 * int64 and floats that JSON cannot hold (NaN, inf) become strings. Returns
 * NULL and sets *why (a static string) on malformed or trailing input, or past
 * a bound.
 */
json_t *
admin_msgpack_to_json(const void *p, size_t n, const char **why);

#endif
