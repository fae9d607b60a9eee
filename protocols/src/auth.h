/*
 * Peer authentication for the transport (docs/security.md): the proofs a
 * HELLO_ACK and an AUTH frame carry, made and checked with mbedTLS. The
 * only file that includes mbedTLS is auth.c.
 *
 * A proof covers a transcript of the handshake (both node ids, both
 * incarnations, both nonces, the dialer's URL, and which side speaks), so
 * it is good for one connection only: a captured HELLO_ACK or AUTH cannot
 * be replayed on another, and one side's proof cannot be reflected back as
 * the other's. With a cluster secret the proof holds an HMAC-SHA256 of the
 * transcript keyed by the secret; with certificates it holds the node's
 * certificate (DER) and its signature over SHA-256 of the transcript, and
 * the certificate must chain to the CA and name the claimed node id as
 * "troupe-node-<id>" (subject CN or a DNS subjectAltName). Both may be
 * configured; then both are required.
 *
 * Threads: every function may be called from any thread; an auth object is
 * shared by all of a node's threads (signing takes its own lock).
 */
#ifndef TROUPE_AUTH_H
#define TROUPE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/log.h"
#include "troupe/wire.h"

/* Shortest cluster secret accepted, in bytes. */
#define TROUPE__AUTH_SECRET_MIN 16u
/* Longest certificate, key or CA file read, in bytes. */
#define TROUPE__AUTH_PEM_MAX (1u << 20)

typedef struct troupe__auth troupe__auth;

typedef struct troupe__auth_cfg {
    uint32_t node_id;      /* our own id: our certificate must name it */
    const void *secret;    /* NULL: no secret */
    size_t secret_len;     /* >= TROUPE__AUTH_SECRET_MIN when secret is set */
    const char *cert_file; /* PEM paths: all three, or none */
    const char *key_file;
    const char *ca_file;
    /* Where failures are logged (sys "auth"; borrowed for create, then
     * copied); NULL: the default logger. */
    const troupe_logger *logger;
} troupe__auth_cfg;

/*
 * Loads the secret (copied) and the certificate, key and CA. Checks that
 * the key matches the certificate, that the certificate chains to the CA
 * and names node_id. Errors: EINVAL (secret too short, only some of the
 * three files, a file that cannot be read or parsed, a mismatch; the
 * detail logged through cfg->logger), ENOMEM. With nothing configured the
 * object makes and accepts empty proofs (open mode).
 */
troupe_err
troupe__auth_create(const troupe__auth_cfg *cfg, troupe__auth **out);

/* NULL is a no-op. Wipes the secret. */
void
troupe__auth_destroy(troupe__auth *a);

bool
troupe__auth_has_secret(const troupe__auth *a);
bool
troupe__auth_has_certs(const troupe__auth *a);

/* The PEM texts loaded (NUL-terminated, owned by a), or NULL without
 * certificates: for nng's TLS configuration. */
const char *
troupe__auth_cert_pem(const troupe__auth *a);
const char *
troupe__auth_key_pem(const troupe__auth *a);
const char *
troupe__auth_ca_pem(const troupe__auth *a);

/* Fills a fresh nonce from the kernel's random source. EIO on failure,
 * logged through lg (NULL: the default logger). */
troupe_err
troupe__auth_nonce(const troupe_logger *lg,
                   uint8_t nonce[TROUPE_WIRE_NONCE_LEN]);

/* Who speaks in a proof. */
enum troupe__auth_role {
    TROUPE__AUTH_LISTENER = 'A', /* the HELLO_ACK's proof */
    TROUPE__AUTH_DIALER = 'H'    /* the AUTH's proof */
};

/* The handshake a proof covers. */
typedef struct troupe__transcript {
    enum troupe__auth_role role;
    uint32_t dialer, listener;
    uint64_t dialer_inc, listener_inc;
    const uint8_t *dialer_nonce;   /* TROUPE_WIRE_NONCE_LEN bytes */
    const uint8_t *listener_nonce; /* TROUPE_WIRE_NONCE_LEN bytes */
    const char *url;               /* the dialer's HELLO URL */
    size_t url_len;
} troupe__transcript;

/* A proof made by troupe__auth_prove: `p` points into mac and sig, and at
 * the node's own certificate (valid while the auth object is). */
typedef struct troupe__proof {
    uint8_t mac[TROUPE_WIRE_MAC_LEN];
    uint8_t sig[TROUPE_WIRE_SIG_MAX];
    troupe_wire_proof p;
} troupe__proof;

/*
 * Our proof for transcript t (t's speaker is this node). Errors: EIO
 * (mbedTLS failed; the detail logged).
 */
troupe_err
troupe__auth_prove(troupe__auth *a, const troupe__transcript *t,
                   troupe__proof *out);

/*
 * Checks the proof p made by node `claimed` for transcript t, by our
 * configuration: a mac when we have a secret, a certificate naming
 * `claimed` and a signature when we have certificates. OK, or EAUTH with
 * *why (a static string) saying what failed.
 */
troupe_err
troupe__auth_check(troupe__auth *a, const troupe__transcript *t,
                   uint32_t claimed, const troupe_wire_proof *p,
                   const char **why);

#endif
