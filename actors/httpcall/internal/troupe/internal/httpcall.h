/*
 * httpcall's internal tier: what httpcall.c (the object, its thread and
 * loop, libcurl's multi interface) calls in request.c (a task to a
 * request, a response to a verdict), the parts that know DTM's call
 * shape; here rather than in src/ so that the tests can drive the
 * marker scan piece by piece, which a real server cannot split at will.
 * Any thread; nothing here blocks or keeps state but its arguments.
 */
#ifndef TROUPE_INTERNAL_HTTPCALL_H
#define TROUPE_INTERNAL_HTTPCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/dispatch.h"
#include "troupe/err.h"

/* A branch task read: every pointer points into the task's record. */
typedef struct hc_branch {
    const char *mode, *gid, *branch_id, *op; /* NUL-terminated */
    const char *url;                         /* url_len bytes, no NUL */
    size_t url_len;
    const uint8_t *body;
    size_t body_len;
    bool get; /* op "msg": a GET without a body */
} hc_branch;

/* Reads a task's header and body. EPROTO (with *why, a static text) when
 * they are not a branch's: never worth a request. */
troupe_err
troupe__httpcall_parse(const uint8_t *header, size_t header_len,
                       const uint8_t *body, size_t body_len, hc_branch *b,
                       const char **why);

/* The request's URL, query appended, in *out (free it with
 * troupe__httpcall_url_free). EPROTO (with *why) for a url that is not
 * http or https or does not parse: it never will; ENOMEM. */
troupe_err
troupe__httpcall_url(const hc_branch *b, char **out, const char **why);
void
troupe__httpcall_url_free(char *url);

/* Looks for the verdict's markers in a response body given in pieces; a
 * marker split between two pieces is found. Zero-initialise. */
typedef struct hc_scan {
    char carry[6]; /* the last bytes seen, one short of the longest */
    size_t carry_len;
    bool ongoing, failure;
} hc_scan;

void
troupe__httpcall_scan(hc_scan *s, const char *data, size_t len);

/* The outcome of a request that got an HTTP response with status (a
 * transport error never gets here: UNKNOWN). */
troupe_outcome
troupe__httpcall_verdict(long status, const hc_scan *s);

#endif
