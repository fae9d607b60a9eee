/*
 * Membership: one key per node under a lease, renewed by a thread of the
 * member's own (troupe/member.h).
 *
 * Why a thread and blocking calls, not callbacks on the client's thread:
 * the renewal is one small request every ttl/3 seconds, a plain loop
 * reads as what it does (renew; on a lost lease register again), and the
 * client's thread has no timers. The wait between renewals is a timed
 * condition wait that the stop signals, so a stop never waits a tick.
 *
 * Why compare-and-set on create: two processes started with one id must
 * not both believe they are that node; the second sees EEXIST while the
 * first's lease lives.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/alloc.h"
#include "troupe/internal/etcd.h"
#include "troupe/internal/runtime.h"
#include "troupe/log.h"
#include "troupe/member.h"

#define SYS "member"
#define LISTEN_MAX 1024

struct troupe_member {
    troupe_etcd *etcd;
    uint32_t id;
    uint32_t ttl_s;
    char key[64];
    char *value;
    _Atomic int64_t lease;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
};

/* Grants a lease and creates the key under it; on EEXIST or an error the
 * lease is revoked again. */
static troupe_err
register_once(troupe_member *m)
{
    troupe_etcd_result r;
    troupe_err e = troupe_etcd_lease_grant_wait(m->etcd, m->ttl_s, &r);
    if (e != TROUPE_OK)
        return e;
    int64_t lease = r.lease_id;
    e = troupe_etcd_cas_wait(m->etcd, m->key, strlen(m->key), 0, m->value,
                             strlen(m->value), lease, &r);
    if (e == TROUPE_OK && !r.succeeded)
        e = TROUPE_EEXIST;
    if (e != TROUPE_OK) {
        troupe_etcd_lease_revoke_wait(m->etcd, lease, NULL);
        return e;
    }
    atomic_store(&m->lease, lease);
    return TROUPE_OK;
}

static void *
renew_main(void *arg)
{
    troupe_member *m = arg;
    /* renew at a third of the TTL: two renewals may fail before it ends */
    uint64_t every_ms = (uint64_t)m->ttl_s * 1000 / 3;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (every_ms % 1000) * 1000000;
        ts.tv_sec += (time_t)(every_ms / 1000 + ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0)
            ;
        if (m->stop)
            break;
        pthread_mutex_unlock(&m->mu);
        int64_t lease = atomic_load(&m->lease);
        troupe_err e =
            lease > 0 ? troupe_etcd_lease_keepalive_wait(m->etcd, lease, NULL)
                      : TROUPE_ENOENT;
        if (e == TROUPE_ENOENT) {
            troupe_log(troupe__etcd_logger(m->etcd), TROUPE_LOG_WARN, SYS,
                       "node %u: lease %lld expired: registering again", m->id,
                       (long long)lease);
            e = register_once(m); /* sets m->lease when it lands */
        }
        if (e != TROUPE_OK && e != TROUPE_ECLOSED)
            troupe_log(troupe__etcd_logger(m->etcd), TROUPE_LOG_WARN, SYS,
                       "node %u: renewal: %s", m->id, troupe_err_name(e));
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static char *
value_of(uint32_t id, const char *listen)
{
    json_t *o = json_object();
    if (o == NULL || json_object_set_new(o, "id", json_integer(id)) != 0 ||
        json_object_set_new(o, "listen", json_string(listen)) != 0) {
        json_decref(o);
        return NULL;
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s == NULL)
        return NULL;
    char *v = troupe_malloc(strlen(s) + 1);
    if (v != NULL)
        strcpy(v, s);
    free(s); /* jansson's allocator is malloc */
    return v;
}

static void
member_free(troupe_member *m)
{
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    troupe_free(m->value);
    troupe_free(m);
}

troupe_err
troupe_member_start(troupe_etcd *etcd, uint32_t id, const char *listen,
                    uint32_t ttl_s, troupe_member **out)
{
    if (ttl_s == 0)
        ttl_s = TROUPE_MEMBER_TTL_DEFAULT;
    if (etcd == NULL || out == NULL || id == 0 || id == UINT32_MAX ||
        listen == NULL || listen[0] == 0 ||
        strnlen(listen, LISTEN_MAX + 1) > LISTEN_MAX ||
        ttl_s < TROUPE_MEMBER_TTL_MIN || ttl_s > TROUPE_MEMBER_TTL_MAX)
        return TROUPE_EINVAL;
    troupe_err e = troupe__block_check("troupe_member_start");
    if (e != TROUPE_OK)
        return e;
    troupe_member *m = troupe_calloc(1, sizeof(*m));
    if (m == NULL)
        return TROUPE_ENOMEM;
    m->etcd = etcd;
    m->id = id;
    m->ttl_s = ttl_s;
    snprintf(m->key, sizeof(m->key), TROUPE_MEMBER_PREFIX "%u", id);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* jansson takes UTF-8 only: another listen URL is no URL of ours */
    json_t *probe = json_string(listen);
    bool utf8 = probe != NULL;
    json_decref(probe);
    m->value = utf8 ? value_of(id, listen) : NULL;
    if (m->value == NULL) {
        member_free(m);
        return utf8 ? TROUPE_ENOMEM : TROUPE_EINVAL;
    }
    e = register_once(m);
    if (e != TROUPE_OK) {
        member_free(m);
        return e;
    }
    if (pthread_create(&m->thr, NULL, renew_main, m) != 0) {
        troupe_etcd_lease_revoke_wait(etcd, atomic_load(&m->lease), NULL);
        member_free(m);
        return TROUPE_ESYS;
    }
    *out = m;
    return TROUPE_OK;
}

void
troupe_member_stop(troupe_member *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thr, NULL);
    int64_t lease = atomic_load(&m->lease);
    if (lease > 0) {
        troupe_err e = troupe_etcd_lease_revoke_wait(m->etcd, lease, NULL);
        if (e != TROUPE_OK && e != TROUPE_ENOENT)
            troupe_log(troupe__etcd_logger(m->etcd), TROUPE_LOG_WARN, SYS,
                       "node %u: revoke lease %lld: %s (its key goes when "
                       "the lease expires)",
                       m->id, (long long)lease, troupe_err_name(e));
    }
    member_free(m);
}

int64_t
troupe_member_lease(troupe_member *m)
{
    return m ? atomic_load(&m->lease) : 0;
}

troupe_err
troupe_member_parse(const troupe_etcd_kv *kv, troupe_member_info *out)
{
    if (kv == NULL || out == NULL)
        return TROUPE_EINVAL;
    memset(out, 0, sizeof(*out));
    size_t pl = strlen(TROUPE_MEMBER_PREFIX);
    if (kv->key_len <= pl || kv->key_len > pl + 10 ||
        memcmp(kv->key, TROUPE_MEMBER_PREFIX, pl) != 0)
        return TROUPE_EPROTO;
    uint64_t id = 0;
    for (size_t i = pl; i < kv->key_len; i++) {
        if (kv->key[i] < '0' || kv->key[i] > '9')
            return TROUPE_EPROTO;
        id = id * 10 + (kv->key[i] - '0');
    }
    if (id == 0 || id >= UINT32_MAX || kv->key[pl] == '0')
        return TROUPE_EPROTO;
    json_error_t je;
    json_t *o = kv->value != NULL && kv->value_len > 0
                    ? json_loadb((const char *)kv->value, kv->value_len, 0, &je)
                    : NULL;
    json_t *jid = json_object_get(o, "id");
    json_t *jl = json_object_get(o, "listen");
    troupe_err e = TROUPE_OK;
    if (!json_is_object(o) || !json_is_integer(jid) ||
        json_integer_value(jid) != (json_int_t)id || !json_is_string(jl) ||
        json_string_length(jl) == 0 || json_string_length(jl) > LISTEN_MAX ||
        strlen(json_string_value(jl)) != json_string_length(jl))
        e = TROUPE_EPROTO;
    if (e == TROUPE_OK) {
        out->id = (uint32_t)id;
        memcpy(out->listen, json_string_value(jl), json_string_length(jl));
        out->lease = kv->lease;
    }
    json_decref(o);
    return e;
}
