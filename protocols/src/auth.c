/*
 * Handshake proofs with mbedTLS (auth.h, docs/security.md): the only file
 * that includes mbedTLS.
 *
 * No cryptography of our own: HMAC-SHA256, SHA-256, X.509 chain checks
 * and signatures are mbedTLS's; nonces come from getrandom(2). What is
 * ours is the protocol, and its invariants are:
 *  - a proof covers a fixed-layout transcript (a context string, the
 *    speaker's role, both ids, both incarnations, both nonces, the dialer's
 *    URL with its length), so no two different handshakes share one, and
 *    the listener's proof is never a valid dialer proof (the role byte);
 *  - every nonce is fresh per connection and comes from both sides, so a
 *    recorded proof is worthless on a new connection;
 *  - a mac is compared in constant time; a certificate must chain to the
 *    configured CA and name the claimed id ("troupe-node-<id>", checked by
 *    mbedtls_x509_crt_verify as the expected CN, which matches the subject
 *    CN or a DNS subjectAltName), and its key must have signed the
 *    transcript.
 * Why a signature on top of TLS: nng 1.5.2 does not expose the peer's
 * certificate of a TLS connection, only that it verified. A listener could
 * then not tell which node a verified client is, and any certificate
 * holder could claim any id. The signature binds the claimed id to a
 * certificate on every transport (tls+tcp, but also tcp and ipc).
 */
#include "auth.h"

#include <errno.h>
#include <mbedtls/constant_time.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/md.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "troupe/alloc.h"

#define CONTEXT "troupe-auth-v2"
#define CONTEXT_LEN (sizeof(CONTEXT) - 1)
#define TRANSCRIPT_MAX                                                         \
    (CONTEXT_LEN + 1 + 4 + 4 + 8 + 8 + 2 * TROUPE_WIRE_NONCE_LEN + 2 +         \
     TROUPE_WIRE_URL_MAX)
#define CN_MAX 32

struct troupe__auth {
    uint8_t *secret;
    size_t secret_len;
    bool certs;
    char *cert_pem, *key_pem, *ca_pem;
    mbedtls_x509_crt own; /* our certificate, sent as is (DER) */
    mbedtls_x509_crt ca;
    mbedtls_pk_context key;
    troupe_logger lg;       /* copy of cfg->logger */
    pthread_mutex_t rng_mu; /* the DRBG is not thread-safe */
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
};

#define SYS "auth"

static void
log_mbed(const troupe_logger *lg, const char *what, const char *detail, int rv)
{
    char buf[160];
    mbedtls_strerror(rv, buf, sizeof(buf));
    troupe_log(lg, TROUPE_LOG_ERROR, SYS, "%s%s%s: %s", what, detail ? " " : "",
               detail ? detail : "", buf);
}

/* Reads a whole PEM file, NUL-terminated; NULL (logged) on failure. */
static char *
read_pem(const troupe_logger *lg, const char *path, troupe_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        troupe_log(lg, TROUPE_LOG_ERROR, SYS, "cannot read %s", path);
        *err = TROUPE_EINVAL;
        return NULL;
    }
    char *buf = troupe_malloc(TROUPE__AUTH_PEM_MAX + 1);
    size_t n = buf ? fread(buf, 1, TROUPE__AUTH_PEM_MAX + 1, f) : 0;
    bool bad = ferror(f) || n == 0 || n > TROUPE__AUTH_PEM_MAX;
    fclose(f);
    if (buf == NULL) {
        *err = TROUPE_ENOMEM;
        return NULL;
    }
    if (bad) {
        troupe_log(lg, TROUPE_LOG_ERROR, SYS,
                   "%s is empty, unreadable or over %u bytes", path,
                   TROUPE__AUTH_PEM_MAX);
        troupe_free(buf);
        *err = TROUPE_EINVAL;
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static void
node_cn(uint32_t id, char out[CN_MAX])
{
    snprintf(out, CN_MAX, "troupe-node-%u", id);
}

/* Chain to the CA and the expected name; 0 or mbedTLS's flags. */
static uint32_t
verify_cert(troupe__auth *a, mbedtls_x509_crt *crt, uint32_t id)
{
    char cn[CN_MAX];
    node_cn(id, cn);
    uint32_t flags = 0;
    if (mbedtls_x509_crt_verify(crt, &a->ca, NULL, cn, &flags, NULL, NULL) !=
            0 &&
        flags == 0)
        flags = UINT32_MAX;
    return flags;
}

static troupe_err
load_certs(troupe__auth *a, const troupe__auth_cfg *cfg)
{
    troupe_err e = TROUPE_OK;
    if ((a->cert_pem = read_pem(&a->lg, cfg->cert_file, &e)) == NULL ||
        (a->key_pem = read_pem(&a->lg, cfg->key_file, &e)) == NULL ||
        (a->ca_pem = read_pem(&a->lg, cfg->ca_file, &e)) == NULL)
        return e;
    int rv;
    if ((rv = mbedtls_x509_crt_parse(&a->own, (const uint8_t *)a->cert_pem,
                                     strlen(a->cert_pem) + 1)) != 0) {
        log_mbed(&a->lg, "certificate", cfg->cert_file, rv);
        return TROUPE_EINVAL;
    }
    if ((rv = mbedtls_x509_crt_parse(&a->ca, (const uint8_t *)a->ca_pem,
                                     strlen(a->ca_pem) + 1)) != 0) {
        log_mbed(&a->lg, "CA", cfg->ca_file, rv);
        return TROUPE_EINVAL;
    }
    if ((rv = mbedtls_pk_parse_key(&a->key, (const uint8_t *)a->key_pem,
                                   strlen(a->key_pem) + 1, NULL, 0)) != 0) {
        log_mbed(&a->lg, "key", cfg->key_file, rv);
        return TROUPE_EINVAL;
    }
    if ((rv = mbedtls_pk_check_pair(&a->own.pk, &a->key)) != 0) {
        log_mbed(&a->lg, "key does not match the certificate", cfg->key_file,
                 rv);
        return TROUPE_EINVAL;
    }
    if (a->own.raw.len > TROUPE_WIRE_CERT_MAX) {
        troupe_log(&a->lg, TROUPE_LOG_ERROR, SYS,
                   "certificate %s is over %u bytes (DER)", cfg->cert_file,
                   TROUPE_WIRE_CERT_MAX);
        return TROUPE_EINVAL;
    }
    uint32_t flags = verify_cert(a, &a->own, cfg->node_id);
    if (flags != 0) {
        char info[256];
        if (flags == UINT32_MAX ||
            mbedtls_x509_crt_verify_info(info, sizeof(info), "", flags) < 0)
            snprintf(info, sizeof(info), "verification failed");
        /* mbedTLS ends each reason with a newline: one line here */
        for (char *c = info; *c != '\0'; c++)
            if (*c == '\n')
                *c = c[1] == '\0' ? '\0' : ';';
        troupe_log(&a->lg, TROUPE_LOG_ERROR, SYS,
                   "certificate %s is not valid for node %u under CA %s: %s",
                   cfg->cert_file, cfg->node_id, cfg->ca_file, info);
        return TROUPE_EINVAL;
    }
    if ((rv = mbedtls_ctr_drbg_seed(&a->drbg, mbedtls_entropy_func, &a->entropy,
                                    (const uint8_t *)CONTEXT, CONTEXT_LEN)) !=
        0) {
        log_mbed(&a->lg, "random generator", NULL, rv);
        return TROUPE_EIO;
    }
    a->certs = true;
    return TROUPE_OK;
}

troupe_err
troupe__auth_create(const troupe__auth_cfg *cfg, troupe__auth **out)
{
    if (cfg == NULL || out == NULL)
        return TROUPE_EINVAL;
    bool any = cfg->cert_file || cfg->key_file || cfg->ca_file;
    bool all = cfg->cert_file && cfg->key_file && cfg->ca_file;
    if (any && !all) {
        troupe_log(cfg->logger, TROUPE_LOG_ERROR, SYS,
                   "TLS needs a certificate, its key and a CA, all three");
        return TROUPE_EINVAL;
    }
    if (cfg->secret != NULL && cfg->secret_len < TROUPE__AUTH_SECRET_MIN) {
        troupe_log(cfg->logger, TROUPE_LOG_ERROR, SYS,
                   "the cluster secret must be at least %u bytes",
                   TROUPE__AUTH_SECRET_MIN);
        return TROUPE_EINVAL;
    }
    if (cfg->secret == NULL && cfg->secret_len != 0)
        return TROUPE_EINVAL;
    troupe__auth *a = troupe_calloc(1, sizeof(*a));
    if (a == NULL)
        return TROUPE_ENOMEM;
    if (cfg->logger != NULL)
        a->lg = *cfg->logger;
    mbedtls_x509_crt_init(&a->own);
    mbedtls_x509_crt_init(&a->ca);
    mbedtls_pk_init(&a->key);
    mbedtls_entropy_init(&a->entropy);
    mbedtls_ctr_drbg_init(&a->drbg);
    pthread_mutex_init(&a->rng_mu, NULL);
    troupe_err e = TROUPE_OK;
    if (cfg->secret != NULL) {
        if ((a->secret = troupe_malloc(cfg->secret_len)) == NULL)
            e = TROUPE_ENOMEM;
        else {
            memcpy(a->secret, cfg->secret, cfg->secret_len);
            a->secret_len = cfg->secret_len;
        }
    }
    if (e == TROUPE_OK && all)
        e = load_certs(a, cfg);
    if (e != TROUPE_OK) {
        troupe__auth_destroy(a);
        return e;
    }
    *out = a;
    return TROUPE_OK;
}

void
troupe__auth_destroy(troupe__auth *a)
{
    if (a == NULL)
        return;
    if (a->secret != NULL) {
        mbedtls_platform_zeroize(a->secret, a->secret_len);
        troupe_free(a->secret);
    }
    if (a->key_pem != NULL) {
        mbedtls_platform_zeroize(a->key_pem, strlen(a->key_pem));
        troupe_free(a->key_pem);
    }
    troupe_free(a->cert_pem);
    troupe_free(a->ca_pem);
    mbedtls_x509_crt_free(&a->own);
    mbedtls_x509_crt_free(&a->ca);
    mbedtls_pk_free(&a->key);
    mbedtls_ctr_drbg_free(&a->drbg);
    mbedtls_entropy_free(&a->entropy);
    pthread_mutex_destroy(&a->rng_mu);
    troupe_free(a);
}

bool
troupe__auth_has_secret(const troupe__auth *a)
{
    return a != NULL && a->secret != NULL;
}

bool
troupe__auth_has_certs(const troupe__auth *a)
{
    return a != NULL && a->certs;
}

const char *
troupe__auth_cert_pem(const troupe__auth *a)
{
    return a && a->certs ? a->cert_pem : NULL;
}

const char *
troupe__auth_key_pem(const troupe__auth *a)
{
    return a && a->certs ? a->key_pem : NULL;
}

const char *
troupe__auth_ca_pem(const troupe__auth *a)
{
    return a && a->certs ? a->ca_pem : NULL;
}

troupe_err
troupe__auth_nonce(const troupe_logger *lg,
                   uint8_t nonce[TROUPE_WIRE_NONCE_LEN])
{
    size_t got = 0;
    while (got < TROUPE_WIRE_NONCE_LEN) {
        ssize_t n = getrandom(nonce + got, TROUPE_WIRE_NONCE_LEN - got, 0);
        if (n <= 0) {
            troupe_log(lg, TROUPE_LOG_ERROR, SYS, "getrandom: %s",
                       n < 0 ? strerror(errno) : "no bytes");
            return TROUPE_EIO;
        }
        got += (size_t)n;
    }
    return TROUPE_OK;
}

static void
put_be(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned k = 0; k < n; k++)
        p[k] = (uint8_t)(v >> (8 * (n - 1 - k)));
}

/* The transcript's bytes into buf[TRANSCRIPT_MAX]; returns the length. */
static size_t
transcript_bytes(const troupe__transcript *t, uint8_t *buf)
{
    size_t ulen =
        t->url_len > TROUPE_WIRE_URL_MAX ? TROUPE_WIRE_URL_MAX : t->url_len;
    uint8_t *p = buf;
    memcpy(p, CONTEXT, CONTEXT_LEN);
    p += CONTEXT_LEN;
    *p++ = (uint8_t)t->role;
    put_be(p, t->dialer, 4);
    put_be(p + 4, t->listener, 4);
    put_be(p + 8, t->dialer_inc, 8);
    put_be(p + 16, t->listener_inc, 8);
    p += 24;
    memcpy(p, t->dialer_nonce, TROUPE_WIRE_NONCE_LEN);
    memcpy(p + TROUPE_WIRE_NONCE_LEN, t->listener_nonce, TROUPE_WIRE_NONCE_LEN);
    p += 2 * TROUPE_WIRE_NONCE_LEN;
    put_be(p, ulen, 2);
    p += 2;
    if (ulen > 0)
        memcpy(p, t->url, ulen);
    return (size_t)(p - buf) + ulen;
}

static const mbedtls_md_info_t *
sha256(void)
{
    return mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
}

troupe_err
troupe__auth_prove(troupe__auth *a, const troupe__transcript *t,
                   troupe__proof *out)
{
    if (a == NULL || t == NULL || out == NULL)
        return TROUPE_EINVAL;
    memset(&out->p, 0, sizeof(out->p));
    if (a->secret == NULL && !a->certs)
        return TROUPE_OK;
    uint8_t tr[TRANSCRIPT_MAX];
    size_t len = transcript_bytes(t, tr);
    int rv;
    if (a->secret != NULL) {
        if ((rv = mbedtls_md_hmac(sha256(), a->secret, a->secret_len, tr, len,
                                  out->mac)) != 0) {
            log_mbed(&a->lg, "hmac", NULL, rv);
            return TROUPE_EIO;
        }
        out->p.mac = out->mac;
        out->p.mac_len = TROUPE_WIRE_MAC_LEN;
    }
    if (a->certs) {
        uint8_t hash[32];
        uint8_t sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
        size_t slen = 0;
        if ((rv = mbedtls_md(sha256(), tr, len, hash)) != 0) {
            log_mbed(&a->lg, "sha256", NULL, rv);
            return TROUPE_EIO;
        }
        pthread_mutex_lock(&a->rng_mu);
        rv = mbedtls_pk_sign(&a->key, MBEDTLS_MD_SHA256, hash, sizeof(hash),
                             sig, &slen, mbedtls_ctr_drbg_random, &a->drbg);
        pthread_mutex_unlock(&a->rng_mu);
        if (rv != 0 || slen == 0 || slen > TROUPE_WIRE_SIG_MAX) {
            log_mbed(&a->lg, "sign", NULL, rv);
            return TROUPE_EIO;
        }
        memcpy(out->sig, sig, slen);
        out->p.sig = out->sig;
        out->p.sig_len = slen;
        out->p.cert = a->own.raw.p;
        out->p.cert_len = a->own.raw.len;
    }
    return TROUPE_OK;
}

static troupe_err
check_sig(troupe__auth *a, const uint8_t *tr, size_t len, uint32_t claimed,
          const troupe_wire_proof *p, const char **why)
{
    if (p->cert == NULL || p->sig == NULL) {
        *why = "no certificate in the proof";
        return TROUPE_EAUTH;
    }
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    troupe_err e = TROUPE_EAUTH;
    uint8_t hash[32];
    if (mbedtls_x509_crt_parse_der(&crt, p->cert, p->cert_len) != 0)
        *why = "certificate does not parse";
    else if (verify_cert(a, &crt, claimed) != 0)
        *why = "certificate is not from our CA or does not name the node id";
    else if (mbedtls_md(sha256(), tr, len, hash) != 0 ||
             mbedtls_pk_verify(&crt.pk, MBEDTLS_MD_SHA256, hash, sizeof(hash),
                               p->sig, p->sig_len) != 0)
        *why = "signature does not verify";
    else
        e = TROUPE_OK;
    mbedtls_x509_crt_free(&crt);
    return e;
}

troupe_err
troupe__auth_check(troupe__auth *a, const troupe__transcript *t,
                   uint32_t claimed, const troupe_wire_proof *p,
                   const char **why)
{
    static const char *unused;
    if (why == NULL)
        why = &unused;
    *why = "";
    if (a == NULL || t == NULL || p == NULL) {
        *why = "bad argument";
        return TROUPE_EAUTH;
    }
    if (a->secret == NULL && !a->certs)
        return TROUPE_OK;
    uint8_t tr[TRANSCRIPT_MAX];
    size_t len = transcript_bytes(t, tr);
    if (a->secret != NULL) {
        uint8_t mac[TROUPE_WIRE_MAC_LEN];
        if (p->mac == NULL || p->mac_len != TROUPE_WIRE_MAC_LEN) {
            *why = "no secret proof (is the peer configured with the "
                   "cluster secret?)";
            return TROUPE_EAUTH;
        }
        if (mbedtls_md_hmac(sha256(), a->secret, a->secret_len, tr, len, mac) !=
                0 ||
            mbedtls_ct_memcmp(mac, p->mac, sizeof(mac)) != 0) {
            *why = "secret proof does not match (another secret?)";
            return TROUPE_EAUTH;
        }
    }
    if (a->certs)
        return check_sig(a, tr, len, claimed, p, why);
    return TROUPE_OK;
}
