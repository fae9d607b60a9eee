/*
 * An etcd v3 client over etcd's JSON gateway (POST /v3/kv/..., /v3/lease/
 * ...; keys and values base64 in JSON), for what the nodes of a cluster
 * must agree on: membership (a key per node under a lease) and the
 * partition map. Its HTTP goes through actors/httpcall's request API
 * (one thread of the client's own running libcurl), its JSON through
 * jansson.
 *
 * Every operation comes twice: asynchronous, whose callback fires exactly
 * once on the client's thread when the call returned OK (never when it
 * returned an error), and blocking (_wait), which refuses troupe's loop
 * threads and the client's own thread with EDEADLK.
 *
 * Every answer is checked: a response that is not the JSON etcd sends
 * (a missing header, a number that is not one, bad base64, a wrong type)
 * is EPROTO, never a crash nor a guess. etcd's own errors (a JSON body
 * with "code"): 5 (not found: a lease) ENOENT, 3 (invalid argument)
 * EINVAL, 4 ETIMEDOUT, 14 (unavailable: no leader) EUNREACHABLE, 9
 * (failed precondition) ESTATE, 8 (resource exhausted) EFULL, any other
 * EIO; each logged with etcd's message. The transport's: ETIMEDOUT (the
 * request's timeout), EUNREACHABLE (no answer), ETOOBIG (an answer past
 * 1 MiB: ask for fewer keys), ECLOSED (the client stopped first).
 *
 * Endpoints: the reads (get, list) and the lease grant and keepalive,
 * which are safe to repeat, move to the next endpoint when one is
 * unreachable, each endpoint tried once; writes (put, cas, delete,
 * revoke) never repeat on their own (one may have landed): they fail
 * EUNREACHABLE and the next call goes to the next endpoint.
 *
 * Ownership: troupe_etcd_open allocates the client, the caller owns it;
 * key and value bytes are copied by each call. A result passed to a
 * callback is borrowed for the call; one filled by a _wait call is the
 * caller's, freed with troupe_etcd_result_fini.
 */
#ifndef TROUPE_ETCD_H
#define TROUPE_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/log.h"

#define TROUPE_ETCD_ENDPOINTS_MAX 8
#define TROUPE_ETCD_KEY_MAX 4096
#define TROUPE_ETCD_VALUE_MAX (256u << 10)
#define TROUPE_ETCD_LIST_MAX 10000
#define TROUPE_ETCD_TIMEOUT_DEFAULT_MS 5000

typedef struct troupe_etcd troupe_etcd;

typedef struct troupe_etcd_opts {
    /* comma-separated base URLs, http:// or https://, e.g.
     * "http://127.0.0.1:2379,http://127.0.0.1:22379"; required */
    const char *endpoints;
    uint32_t timeout_ms;      /* each request's; 0: TIMEOUT_DEFAULT_MS */
    const troupe_logger *log; /* NULL: the default; outlives the client */
} troupe_etcd_opts;

typedef struct troupe_etcd_kv {
    const uint8_t *key; /* key_len bytes, then a NUL (not counted) */
    size_t key_len;
    const uint8_t *value; /* value_len bytes, then a NUL (not counted) */
    size_t value_len;
    int64_t create_revision, mod_revision, version;
    int64_t lease; /* 0: none */
} troupe_etcd_kv;

typedef struct troupe_etcd_result {
    int64_t revision;    /* the store's revision the answer was made at */
    troupe_etcd_kv *kvs; /* get, list: n pairs in key order */
    size_t n;
    bool more;        /* list: keys past the limit */
    bool succeeded;   /* cas: the compare held and the put was made */
    int64_t deleted;  /* delete: keys removed */
    int64_t lease_id; /* lease grant */
    int64_t ttl;      /* lease grant, keepalive: seconds granted */
    void *mem_;       /* the kvs' storage */
} troupe_etcd_result;

/* e OK: r holds the answer (borrowed for the call); else r is NULL. */
typedef void (*troupe_etcd_cb)(void *arg, troupe_err e,
                               const troupe_etcd_result *r);

/* Starts the client's thread. Errors: EINVAL (NULL o, endpoints or out,
 * an endpoint that is not http(s)://host[:port] or too many), ENOMEM,
 * ESYS. Never blocks (nothing is sent). */
troupe_err
troupe_etcd_open(const troupe_etcd_opts *o, troupe_etcd **out);

/* Stops: requests in flight complete ECLOSED; returns once the thread
 * ended. Errors: EINVAL (NULL), ESTATE (stopped already), EDEADLK (a
 * troupe loop thread or the client's own). Blocks. */
troupe_err
troupe_etcd_stop_wait(troupe_etcd *c);

/* Frees a stopped client (one not stopped is stopped first, from a
 * thread where that may block). NULL is a no-op. */
void
troupe_etcd_destroy(troupe_etcd *c);

/* Frees what a _wait call put in r, and zeroes it. NULL is a no-op. */
void
troupe_etcd_result_fini(troupe_etcd_result *r);

/*
 * The operations. Keys are 1..KEY_MAX bytes, values 0..VALUE_MAX (value
 * NULL only with vlen 0). Errors of the call itself (no callback):
 * EINVAL (NULL c or cb, a bad key or value, a bad number), ECLOSED,
 * EFULL (too many requests outstanding), ENOMEM.
 *
 * put: key = value, under lease (0: none). r->revision: the put's.
 * get: r->n is 0 (no such key) or 1.
 * list: the keys starting with prefix, in key order, at most limit
 *   (1..LIST_MAX); r->more when there are others.
 * delete: the key, or with prefix true every key starting with it;
 *   r->deleted counts them.
 * cas: puts key = value (under lease) only if the key's mod_revision is
 *   expect_mod (0: only if the key does not exist), in one etcd txn;
 *   r->succeeded says which, r->revision is the store's after it.
 * lease_grant: a lease of ttl_s seconds (1..86400): r->lease_id, r->ttl.
 * lease_keepalive: renews it: r->ttl; ENOENT when it has expired or
 *   never was.
 * lease_revoke: ends it and deletes its keys; ENOENT when unknown.
 */
troupe_err
troupe_etcd_put(troupe_etcd *c, const void *key, size_t klen, const void *value,
                size_t vlen, int64_t lease, troupe_etcd_cb cb, void *arg);
troupe_err
troupe_etcd_get(troupe_etcd *c, const void *key, size_t klen, troupe_etcd_cb cb,
                void *arg);
troupe_err
troupe_etcd_list(troupe_etcd *c, const void *prefix, size_t plen,
                 uint32_t limit, troupe_etcd_cb cb, void *arg);
troupe_err
troupe_etcd_delete(troupe_etcd *c, const void *key, size_t klen, bool prefix,
                   troupe_etcd_cb cb, void *arg);
troupe_err
troupe_etcd_cas(troupe_etcd *c, const void *key, size_t klen,
                int64_t expect_mod, const void *value, size_t vlen,
                int64_t lease, troupe_etcd_cb cb, void *arg);
troupe_err
troupe_etcd_lease_grant(troupe_etcd *c, int64_t ttl_s, troupe_etcd_cb cb,
                        void *arg);
troupe_err
troupe_etcd_lease_keepalive(troupe_etcd *c, int64_t lease_id, troupe_etcd_cb cb,
                            void *arg);
troupe_err
troupe_etcd_lease_revoke(troupe_etcd *c, int64_t lease_id, troupe_etcd_cb cb,
                         void *arg);

/* The blocking twins: the same arguments, the answer in out (may be NULL;
 * the caller finis it), the operation's error returned. Also EDEADLK. */
troupe_err
troupe_etcd_put_wait(troupe_etcd *c, const void *key, size_t klen,
                     const void *value, size_t vlen, int64_t lease,
                     troupe_etcd_result *out);
troupe_err
troupe_etcd_get_wait(troupe_etcd *c, const void *key, size_t klen,
                     troupe_etcd_result *out);
troupe_err
troupe_etcd_list_wait(troupe_etcd *c, const void *prefix, size_t plen,
                      uint32_t limit, troupe_etcd_result *out);
troupe_err
troupe_etcd_delete_wait(troupe_etcd *c, const void *key, size_t klen,
                        bool prefix, troupe_etcd_result *out);
troupe_err
troupe_etcd_cas_wait(troupe_etcd *c, const void *key, size_t klen,
                     int64_t expect_mod, const void *value, size_t vlen,
                     int64_t lease, troupe_etcd_result *out);
troupe_err
troupe_etcd_lease_grant_wait(troupe_etcd *c, int64_t ttl_s,
                             troupe_etcd_result *out);
troupe_err
troupe_etcd_lease_keepalive_wait(troupe_etcd *c, int64_t lease_id,
                                 troupe_etcd_result *out);
troupe_err
troupe_etcd_lease_revoke_wait(troupe_etcd *c, int64_t lease_id,
                              troupe_etcd_result *out);

#endif
