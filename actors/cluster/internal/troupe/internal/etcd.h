/*
 * The etcd client's codec, for src/etcd.c and the tests: base64 and the
 * check of one gateway answer, so that hostile answers can be fed to it
 * byte for byte without a server.
 */
#ifndef TROUPE_INTERNAL_ETCD_H
#define TROUPE_INTERNAL_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/etcd.h"

typedef enum troupe__etcd_op {
    TROUPE__ETCD_PUT,
    TROUPE__ETCD_RANGE,
    TROUPE__ETCD_DELETE,
    TROUPE__ETCD_TXN,
    TROUPE__ETCD_GRANT,
    TROUPE__ETCD_KEEPALIVE,
    TROUPE__ETCD_REVOKE,
} troupe__etcd_op;

/* Standard base64 with padding (what the gateway sends and takes). out
 * holds 4 * ((len + 2) / 3) + 1 bytes; NUL-terminated. */
void
troupe__etcd_b64_encode(const uint8_t *in, size_t len, char *out);

/* Strict: only the standard alphabet, padding where it must be, nothing
 * after it. out holds len / 4 * 3 bytes. EPROTO when not base64. */
troupe_err
troupe__etcd_b64_decode(const char *in, size_t len, uint8_t *out,
                        size_t *out_len);

/* One answer (HTTP status and body) to op: OK with r filled (finied by
 * the caller), or the error the header names. why, when not NULL, says
 * what was wrong (static or etcd's message copied into why_buf). */
troupe_err
troupe__etcd_parse(troupe__etcd_op op, long status, const uint8_t *body,
                   size_t len, troupe_etcd_result *r, char *why,
                   size_t why_len);

/* The logger the client was opened with (NULL: the default), for the
 * module's other parts (membership). */
const troupe_logger *
troupe__etcd_logger(const troupe_etcd *c);

#endif
