/*
 * The etcd v3 client over the JSON gateway (the one adapter to jansson in
 * actors/). One operation is one POST; its answer is checked whole before
 * anything of it is believed.
 *
 * Why the gateway and not gRPC: the gateway is part of every etcd server
 * (Debian's included), needs nothing but HTTP and JSON, both already in
 * troupe (libcurl behind actors/httpcall, jansson), and the calls troupe
 * makes are few and small. A C gRPC stack would be a large dependency for
 * them. Watches (a streaming answer) are not built yet.
 *
 * Invariants:
 * - An op is allocated by the call that returned OK and freed after its
 *   callback, which fires once: from on_http (an answer, or the last
 *   endpoint's transport error) or from a retry's refusal.
 * - Numbers in answers are proto3 JSON int64s: strings of digits (plain
 *   integers are taken too); absent means 0, as proto3 leaves out
 *   defaults. A present field of another type is EPROTO.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/etcd.h"
#include "troupe/internal/etcd.h"
#include "troupe/internal/http.h"
#include "troupe/internal/runtime.h"
#include "troupe/log.h"

#define SYS "etcd"
#define ENDPOINT_MAX 512

struct troupe_etcd {
    troupe_httpcall *http;
    const troupe_logger *log;
    char *ep[TROUPE_ETCD_ENDPOINTS_MAX];
    uint32_t n_ep;
    _Atomic uint32_t cur; /* the endpoint the next request goes to */
    uint32_t timeout_ms;
    _Atomic bool stopped;
};

typedef struct etcd_op {
    troupe_etcd *c;
    troupe__etcd_op kind;
    const char *path;
    char *body; /* the JSON request */
    bool retry; /* safe to repeat on another endpoint */
    uint32_t ep, tries;
    troupe_etcd_cb cb;
    void *arg;
} etcd_op;

/* ---- base64 ----------------------------------------------------------- */

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void
troupe__etcd_b64_encode(const uint8_t *in, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64[v & 63] : '=';
    }
    out[o] = 0;
}

static int
b64_val(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

troupe_err
troupe__etcd_b64_decode(const char *in, size_t len, uint8_t *out,
                        size_t *out_len)
{
    if (len % 4 != 0)
        return TROUPE_EPROTO;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int v[4];
        for (int j = 0; j < 4; j++)
            v[j] = b64_val(in[i + j]);
        if (v[0] < 0 || v[1] < 0)
            return TROUPE_EPROTO;
        int pad = 0;
        if (last && in[i + 3] == '=') {
            pad = in[i + 2] == '=' ? 2 : 1;
        }
        if ((pad < 2 && v[2] < 0) || (pad < 1 && v[3] < 0))
            return TROUPE_EPROTO;
        /* the bits padding drops must be zero: one encoding per value */
        if ((pad == 2 && (v[1] & 15) != 0) || (pad == 1 && (v[2] & 3) != 0))
            return TROUPE_EPROTO;
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12;
        if (pad < 2)
            w |= (uint32_t)v[2] << 6;
        if (pad < 1)
            w |= (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    *out_len = o;
    return TROUPE_OK;
}

/* ---- the answer --------------------------------------------------------- */

static void
set_why(char *why, size_t n, const char *s)
{
    if (why != NULL && n > 0)
        snprintf(why, n, "%s", s);
}

/* A proto3 int64 field: absent 0, a string of digits or an integer. */
static bool
get_i64(json_t *o, const char *name, int64_t *out)
{
    json_t *v = json_object_get(o, name);
    *out = 0;
    if (v == NULL)
        return true;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > 20 || strlen(s) != n)
        return false;
    size_t i = s[0] == '-' ? 1 : 0;
    if (i == n)
        return false;
    for (size_t k = i; k < n; k++)
        if (s[k] < '0' || s[k] > '9')
            return false;
    errno = 0;
    char *end;
    long long x = strtoll(s, &end, 10);
    if (errno != 0 || *end != 0)
        return false;
    *out = x;
    return true;
}

/* A uint64 id (lease IDs are positive int64s in etcd). */
static bool
get_pos(json_t *o, const char *name, int64_t *out)
{
    return get_i64(o, name, out) && *out >= 0;
}

static troupe_err
code_err(int64_t code)
{
    switch (code) {
    case 3:
        return TROUPE_EINVAL;
    case 4:
        return TROUPE_ETIMEDOUT;
    case 5:
        return TROUPE_ENOENT;
    case 8:
        return TROUPE_EFULL;
    case 9:
        return TROUPE_ESTATE;
    case 14:
        return TROUPE_EUNREACHABLE;
    default:
        return TROUPE_EIO;
    }
}

/* The kvs array: each pair's bytes decoded into one block (mem_). */
static troupe_err
parse_kvs(json_t *arr, troupe_etcd_result *r, char *why, size_t wl)
{
    if (arr == NULL)
        return TROUPE_OK;
    if (!json_is_array(arr)) {
        set_why(why, wl, "kvs is not an array");
        return TROUPE_EPROTO;
    }
    size_t n = json_array_size(arr);
    if (n == 0)
        return TROUPE_OK;
    size_t bytes = n * sizeof(troupe_etcd_kv);
    for (size_t i = 0; i < n; i++) {
        json_t *kv = json_array_get(arr, i);
        json_t *k = json_object_get(kv, "key");
        json_t *v = json_object_get(kv, "value");
        if (!json_is_object(kv) || !json_is_string(k) ||
            (v != NULL && !json_is_string(v))) {
            set_why(why, wl, "a kv without a string key");
            return TROUPE_EPROTO;
        }
        bytes += json_string_length(k) / 4 * 3 + 1;
        if (v != NULL)
            bytes += json_string_length(v) / 4 * 3 + 1;
        else
            bytes += 1;
    }
    uint8_t *mem = troupe_malloc(bytes);
    if (mem == NULL)
        return TROUPE_ENOMEM;
    troupe_etcd_kv *kvs = (troupe_etcd_kv *)mem;
    uint8_t *p = mem + n * sizeof(troupe_etcd_kv);
    for (size_t i = 0; i < n; i++) {
        json_t *kv = json_array_get(arr, i);
        json_t *k = json_object_get(kv, "key");
        json_t *v = json_object_get(kv, "value");
        troupe_etcd_kv *o = &kvs[i];
        size_t kl, vl = 0;
        bool ok =
            troupe__etcd_b64_decode(json_string_value(k), json_string_length(k),
                                    p, &kl) == TROUPE_OK &&
            kl > 0;
        if (ok) {
            p[kl] = 0;
            o->key = p;
            o->key_len = kl;
            p += kl + 1;
        }
        if (ok && v != NULL)
            ok = troupe__etcd_b64_decode(json_string_value(v),
                                         json_string_length(v), p,
                                         &vl) == TROUPE_OK;
        if (ok) {
            p[vl] = 0;
            o->value = p;
            o->value_len = vl;
            p += vl + 1;
        }
        ok = ok && get_pos(kv, "create_revision", &o->create_revision) &&
             get_pos(kv, "mod_revision", &o->mod_revision) &&
             get_pos(kv, "version", &o->version) &&
             get_pos(kv, "lease", &o->lease);
        if (!ok) {
            troupe_free(mem);
            set_why(why, wl, "a kv with bad base64 or a bad number");
            return TROUPE_EPROTO;
        }
    }
    r->kvs = kvs;
    r->n = n;
    r->mem_ = mem;
    return TROUPE_OK;
}

static troupe_err
parse_doc(troupe__etcd_op op, json_t *doc, troupe_etcd_result *r, char *why,
          size_t wl)
{
    if (op == TROUPE__ETCD_KEEPALIVE) {
        /* a stream of {"result": ...}; one asked, one answered. A stream
         * fails in its body, with HTTP 200: {"error": {"grpc_code": N,
         * "message": ...}} */
        json_t *err = json_object_get(doc, "error");
        int64_t gc = 0;
        if (json_is_object(err) && get_i64(err, "grpc_code", &gc) && gc > 0) {
            json_t *msg = json_object_get(err, "message");
            set_why(why, wl,
                    json_is_string(msg) ? json_string_value(msg)
                                        : "a keepalive stream error");
            return code_err(gc);
        }
        json_t *res = json_object_get(doc, "result");
        if (!json_is_object(res)) {
            set_why(why, wl, "keepalive answer without a result");
            return TROUPE_EPROTO;
        }
        doc = res;
    }
    json_t *h = json_object_get(doc, "header");
    if (!json_is_object(h) || !get_pos(h, "revision", &r->revision) ||
        r->revision == 0) {
        set_why(why, wl, "an answer without a header and its revision");
        return TROUPE_EPROTO;
    }
    switch (op) {
    case TROUPE__ETCD_PUT:
        return TROUPE_OK;
    case TROUPE__ETCD_RANGE: {
        json_t *more = json_object_get(doc, "more");
        int64_t count;
        if ((more != NULL && !json_is_boolean(more)) ||
            !get_pos(doc, "count", &count)) {
            set_why(why, wl, "a range answer with a bad more or count");
            return TROUPE_EPROTO;
        }
        r->more = json_is_true(more);
        troupe_err e = parse_kvs(json_object_get(doc, "kvs"), r, why, wl);
        if (e == TROUPE_OK && (int64_t)r->n > count) {
            set_why(why, wl, "a range answer with more kvs than its count");
            troupe_etcd_result_fini(r);
            return TROUPE_EPROTO;
        }
        return e;
    }
    case TROUPE__ETCD_DELETE:
        if (!get_pos(doc, "deleted", &r->deleted)) {
            set_why(why, wl, "a delete answer with a bad count");
            return TROUPE_EPROTO;
        }
        return TROUPE_OK;
    case TROUPE__ETCD_TXN: {
        json_t *s = json_object_get(doc, "succeeded");
        if (s != NULL && !json_is_boolean(s)) {
            set_why(why, wl, "a txn answer whose succeeded is no boolean");
            return TROUPE_EPROTO;
        }
        r->succeeded = json_is_true(s);
        return TROUPE_OK;
    }
    case TROUPE__ETCD_GRANT:
        if (!get_pos(doc, "ID", &r->lease_id) ||
            !get_pos(doc, "TTL", &r->ttl) || r->lease_id == 0 || r->ttl <= 0) {
            set_why(why, wl, "a lease grant without an ID and a TTL");
            return TROUPE_EPROTO;
        }
        return TROUPE_OK;
    case TROUPE__ETCD_KEEPALIVE:
        if (!get_pos(doc, "ID", &r->lease_id) ||
            !get_pos(doc, "TTL", &r->ttl)) {
            set_why(why, wl, "a keepalive answer with a bad ID or TTL");
            return TROUPE_EPROTO;
        }
        if (r->ttl == 0) {
            set_why(why, wl, "the lease has expired");
            return TROUPE_ENOENT;
        }
        return TROUPE_OK;
    case TROUPE__ETCD_REVOKE:
        return TROUPE_OK;
    }
    set_why(why, wl, "unknown operation");
    return TROUPE_EINVAL;
}

troupe_err
troupe__etcd_parse(troupe__etcd_op op, long status, const uint8_t *body,
                   size_t len, troupe_etcd_result *r, char *why, size_t wl)
{
    memset(r, 0, sizeof(*r));
    set_why(why, wl, "");
    json_error_t je;
    json_t *doc =
        body && len ? json_loadb((const char *)body, len, 0, &je) : NULL;
    if (!json_is_object(doc)) {
        char m[96];
        snprintf(m, sizeof(m), "HTTP %ld: the answer is not a JSON object",
                 status);
        set_why(why, wl, m);
        json_decref(doc);
        return TROUPE_EPROTO;
    }
    troupe_err e;
    json_t *code = json_object_get(doc, "code");
    if (status != 200 || code != NULL) {
        int64_t c = 0;
        json_t *msg = json_object_get(doc, "message");
        if (code == NULL || !get_i64(doc, "code", &c) || c == 0) {
            char m[96];
            snprintf(m, sizeof(m), "HTTP %ld without an etcd error code",
                     status);
            set_why(why, wl, m);
            e = TROUPE_EPROTO;
        } else {
            set_why(why, wl,
                    json_is_string(msg) ? json_string_value(msg)
                                        : "no message");
            e = code_err(c);
        }
    } else {
        e = parse_doc(op, doc, r, why, wl);
    }
    json_decref(doc);
    if (e != TROUPE_OK)
        troupe_etcd_result_fini(r);
    return e;
}

void
troupe_etcd_result_fini(troupe_etcd_result *r)
{
    if (r == NULL)
        return;
    troupe_free(r->mem_);
    memset(r, 0, sizeof(*r));
}

/* ---- the client ---------------------------------------------------------- */

static const char *const paths[] = {
    [TROUPE__ETCD_PUT] = "/v3/kv/put",
    [TROUPE__ETCD_RANGE] = "/v3/kv/range",
    [TROUPE__ETCD_DELETE] = "/v3/kv/deleterange",
    [TROUPE__ETCD_TXN] = "/v3/kv/txn",
    [TROUPE__ETCD_GRANT] = "/v3/lease/grant",
    [TROUPE__ETCD_KEEPALIVE] = "/v3/lease/keepalive",
    [TROUPE__ETCD_REVOKE] = "/v3/lease/revoke",
};

static troupe_err
send_op(etcd_op *op);

static void
op_free(etcd_op *op)
{
    if (op == NULL)
        return;
    troupe_free(op->body);
    troupe_free(op);
}

static void
op_done(etcd_op *op, troupe_err e, const troupe_etcd_result *r)
{
    op->cb(op->arg, e, e == TROUPE_OK ? r : NULL);
    op_free(op);
}

static void
on_http(void *arg, troupe_err e, long status, const uint8_t *body, size_t len)
{
    etcd_op *op = arg;
    troupe_etcd *c = op->c;
    if (e == TROUPE_EUNREACHABLE || e == TROUPE_ETIMEDOUT) {
        /* the next call goes elsewhere; a read or a lease call goes now */
        uint32_t next = (op->ep + 1) % c->n_ep;
        uint32_t was = op->ep;
        atomic_compare_exchange_strong(&c->cur, &was, next);
        troupe_log(c->log, TROUPE_LOG_WARN, SYS, "%s%s: %s", c->ep[op->ep],
                   op->path, troupe_err_name(e));
        if (op->retry && op->tries < c->n_ep) {
            op->ep = next;
            troupe_err se = send_op(op);
            if (se == TROUPE_OK)
                return;
            e = se;
        }
        op_done(op, e, NULL);
        return;
    }
    if (e != TROUPE_OK) {
        op_done(op, e, NULL);
        return;
    }
    troupe_etcd_result r;
    char why[200];
    e = troupe__etcd_parse(op->kind, status, body, len, &r, why, sizeof(why));
    if (e != TROUPE_OK && e != TROUPE_ENOENT)
        troupe_log(c->log, TROUPE_LOG_WARN, SYS, "%s%s: %s: %s", c->ep[op->ep],
                   op->path, troupe_err_name(e), why);
    op_done(op, e, &r);
    troupe_etcd_result_fini(&r);
}

static troupe_err
send_op(etcd_op *op)
{
    troupe_etcd *c = op->c;
    char url[ENDPOINT_MAX + 32];
    snprintf(url, sizeof(url), "%s%s", c->ep[op->ep], op->path);
    op->tries++;
    troupe__http_req rq = {.method = "POST",
                           .url = url,
                           .body = op->body,
                           .len = strlen(op->body),
                           .timeout_ms = c->timeout_ms};
    return troupe__http_request(c->http, &rq, on_http, op);
}

/* Takes doc (decref'd on every path) and starts the op. */
static troupe_err
start(troupe_etcd *c, troupe__etcd_op kind, json_t *doc, bool retry,
      troupe_etcd_cb cb, void *arg)
{
    if (doc == NULL)
        return TROUPE_ENOMEM;
    if (atomic_load(&c->stopped)) {
        json_decref(doc);
        return TROUPE_ECLOSED;
    }
    etcd_op *op = troupe_calloc(1, sizeof(*op));
    char *body = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (op == NULL || body == NULL) {
        troupe_free(op);
        free(body);
        return TROUPE_ENOMEM;
    }
    op->body = troupe_malloc(strlen(body) + 1);
    if (op->body == NULL) {
        troupe_free(op);
        free(body);
        return TROUPE_ENOMEM;
    }
    strcpy(op->body, body);
    free(body); /* jansson's allocator is malloc */
    op->c = c;
    op->kind = kind;
    op->path = paths[kind];
    op->retry = retry;
    op->ep = atomic_load(&c->cur) % c->n_ep;
    op->cb = cb;
    op->arg = arg;
    troupe_err e = send_op(op);
    if (e != TROUPE_OK)
        op_free(op);
    return e;
}

/* A base64 string of bytes, as a new JSON string; NULL: no memory. */
static json_t *
b64_json(const void *p, size_t n)
{
    char *s = troupe_malloc(4 * ((n + 2) / 3) + 1);
    if (s == NULL)
        return NULL;
    troupe__etcd_b64_encode(p, n, s);
    json_t *j = json_string(s);
    troupe_free(s);
    return j;
}

/* A proto3 int64 as etcd's gateway takes it: a decimal string. */
static json_t *
i64_json(int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%lld", (long long)v);
    return json_string(s);
}

/* The range end that makes [key, end) every key starting with key: key
 * with its last byte below 0xff incremented and the rest dropped; all
 * 0xff: "\0" (to the end of the key space). */
static json_t *
prefix_end(const uint8_t *k, size_t n)
{
    uint8_t *e = troupe_malloc(n);
    if (e == NULL)
        return NULL;
    memcpy(e, k, n);
    size_t i = n;
    while (i > 0 && e[i - 1] == 0xff)
        i--;
    json_t *j;
    if (i == 0) {
        uint8_t zero = 0;
        j = b64_json(&zero, 1);
    } else {
        e[i - 1]++;
        j = b64_json(e, i);
    }
    troupe_free(e);
    return j;
}

static bool
key_ok(const void *k, size_t n)
{
    return k != NULL && n > 0 && n <= TROUPE_ETCD_KEY_MAX;
}

static bool
value_ok(const void *v, size_t n)
{
    return (v != NULL || n == 0) && n <= TROUPE_ETCD_VALUE_MAX;
}

/* o's "key" (and more) set; false: no memory. */
static bool
set_new(json_t *o, const char *name, json_t *v)
{
    return v != NULL && json_object_set_new(o, name, v) == 0;
}

static json_t *
put_doc(const void *key, size_t klen, const void *value, size_t vlen,
        int64_t lease)
{
    json_t *o = json_object();
    if (o == NULL || !set_new(o, "key", b64_json(key, klen)) ||
        !set_new(o, "value", b64_json(value ? value : "", vlen)) ||
        (lease != 0 && !set_new(o, "lease", i64_json(lease)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

troupe_err
troupe_etcd_put(troupe_etcd *c, const void *key, size_t klen, const void *value,
                size_t vlen, int64_t lease, troupe_etcd_cb cb, void *arg)
{
    if (c == NULL || cb == NULL || !key_ok(key, klen) ||
        !value_ok(value, vlen) || lease < 0)
        return TROUPE_EINVAL;
    return start(c, TROUPE__ETCD_PUT, put_doc(key, klen, value, vlen, lease),
                 false, cb, arg);
}

troupe_err
troupe_etcd_get(troupe_etcd *c, const void *key, size_t klen, troupe_etcd_cb cb,
                void *arg)
{
    if (c == NULL || cb == NULL || !key_ok(key, klen))
        return TROUPE_EINVAL;
    json_t *o = json_object();
    if (o != NULL && !set_new(o, "key", b64_json(key, klen))) {
        json_decref(o);
        o = NULL;
    }
    return start(c, TROUPE__ETCD_RANGE, o, true, cb, arg);
}

troupe_err
troupe_etcd_list(troupe_etcd *c, const void *prefix, size_t plen,
                 uint32_t limit, troupe_etcd_cb cb, void *arg)
{
    if (c == NULL || cb == NULL || !key_ok(prefix, plen) || limit == 0 ||
        limit > TROUPE_ETCD_LIST_MAX)
        return TROUPE_EINVAL;
    json_t *o = json_object();
    if (o != NULL && (!set_new(o, "key", b64_json(prefix, plen)) ||
                      !set_new(o, "range_end", prefix_end(prefix, plen)) ||
                      !set_new(o, "limit", i64_json(limit)))) {
        json_decref(o);
        o = NULL;
    }
    return start(c, TROUPE__ETCD_RANGE, o, true, cb, arg);
}

troupe_err
troupe_etcd_delete(troupe_etcd *c, const void *key, size_t klen, bool prefix,
                   troupe_etcd_cb cb, void *arg)
{
    if (c == NULL || cb == NULL || !key_ok(key, klen))
        return TROUPE_EINVAL;
    json_t *o = json_object();
    if (o != NULL &&
        (!set_new(o, "key", b64_json(key, klen)) ||
         (prefix && !set_new(o, "range_end", prefix_end(key, klen))))) {
        json_decref(o);
        o = NULL;
    }
    return start(c, TROUPE__ETCD_DELETE, o, false, cb, arg);
}

troupe_err
troupe_etcd_cas(troupe_etcd *c, const void *key, size_t klen,
                int64_t expect_mod, const void *value, size_t vlen,
                int64_t lease, troupe_etcd_cb cb, void *arg)
{
    if (c == NULL || cb == NULL || !key_ok(key, klen) ||
        !value_ok(value, vlen) || lease < 0 || expect_mod < 0)
        return TROUPE_EINVAL;
    /* compare: mod_revision(key) == expect_mod (a missing key's is 0);
     * success: the put; failure: nothing */
    json_t *o = json_object();
    json_t *cmp = json_object();
    json_t *cmps = json_array();
    json_t *put = json_object();
    json_t *ops = json_array();
    bool ok =
        o && cmp && cmps && put && ops &&
        set_new(cmp, "key", b64_json(key, klen)) &&
        set_new(cmp, "target", json_string("MOD")) &&
        set_new(cmp, "result", json_string("EQUAL")) &&
        set_new(cmp, "mod_revision", i64_json(expect_mod)) &&
        json_array_append(cmps, cmp) == 0 &&
        set_new(put, "request_put", put_doc(key, klen, value, vlen, lease)) &&
        json_array_append(ops, put) == 0 &&
        json_object_set(o, "compare", cmps) == 0 &&
        json_object_set(o, "success", ops) == 0;
    json_decref(cmp);
    json_decref(cmps);
    json_decref(put);
    json_decref(ops);
    if (!ok) {
        json_decref(o);
        o = NULL;
    }
    return start(c, TROUPE__ETCD_TXN, o, false, cb, arg);
}

static troupe_err
lease_call(troupe_etcd *c, troupe__etcd_op kind, const char *name, int64_t v,
           bool retry, troupe_etcd_cb cb, void *arg)
{
    json_t *o = json_object();
    if (o != NULL && !set_new(o, name, i64_json(v))) {
        json_decref(o);
        o = NULL;
    }
    return start(c, kind, o, retry, cb, arg);
}

troupe_err
troupe_etcd_lease_grant(troupe_etcd *c, int64_t ttl_s, troupe_etcd_cb cb,
                        void *arg)
{
    if (c == NULL || cb == NULL || ttl_s < 1 || ttl_s > 86400)
        return TROUPE_EINVAL;
    return lease_call(c, TROUPE__ETCD_GRANT, "TTL", ttl_s, true, cb, arg);
}

troupe_err
troupe_etcd_lease_keepalive(troupe_etcd *c, int64_t lease_id, troupe_etcd_cb cb,
                            void *arg)
{
    if (c == NULL || cb == NULL || lease_id <= 0)
        return TROUPE_EINVAL;
    return lease_call(c, TROUPE__ETCD_KEEPALIVE, "ID", lease_id, true, cb, arg);
}

troupe_err
troupe_etcd_lease_revoke(troupe_etcd *c, int64_t lease_id, troupe_etcd_cb cb,
                         void *arg)
{
    if (c == NULL || cb == NULL || lease_id <= 0)
        return TROUPE_EINVAL;
    return lease_call(c, TROUPE__ETCD_REVOKE, "ID", lease_id, false, cb, arg);
}

/* ---- blocking twins ------------------------------------------------------ */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    troupe_err e;
    troupe_etcd_result r;
} waiter;

static void
on_wait(void *arg, troupe_err e, const troupe_etcd_result *r)
{
    waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->e = e;
    if (r != NULL) {
        /* the result's storage moves to the waiter: the op's copy is
         * finied after this with mem_ gone */
        w->r = *r;
        ((troupe_etcd_result *)r)->mem_ = NULL;
    }
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static troupe_err
wait_check(troupe_etcd *c, const char *call)
{
    if (c == NULL)
        return TROUPE_EINVAL;
    troupe_err e = troupe__block_check(call);
    if (e != TROUPE_OK)
        return e;
    return troupe__http_on_thread(c->http) ? TROUPE_EDEADLK : TROUPE_OK;
}

static void
waiter_init(waiter *w)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

/* Waits for the op a call started (e its return), hands out the result. */
static troupe_err
waiter_end(waiter *w, troupe_err e, troupe_etcd_result *out)
{
    if (e == TROUPE_OK) {
        pthread_mutex_lock(&w->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        e = w->e;
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    if (out != NULL)
        *out = w->r;
    else
        troupe_etcd_result_fini(&w->r);
    return e;
}

#define WAIT_TWIN(call, ...)                                                   \
    troupe_err e = wait_check(c, #call "_wait");                               \
    if (e != TROUPE_OK)                                                        \
        return e;                                                              \
    if (out != NULL)                                                           \
        memset(out, 0, sizeof(*out));                                          \
    waiter w;                                                                  \
    waiter_init(&w);                                                           \
    return waiter_end(&w, call(c, __VA_ARGS__, on_wait, &w), out)

troupe_err
troupe_etcd_put_wait(troupe_etcd *c, const void *key, size_t klen,
                     const void *value, size_t vlen, int64_t lease,
                     troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_put, key, klen, value, vlen, lease);
}

troupe_err
troupe_etcd_get_wait(troupe_etcd *c, const void *key, size_t klen,
                     troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_get, key, klen);
}

troupe_err
troupe_etcd_list_wait(troupe_etcd *c, const void *prefix, size_t plen,
                      uint32_t limit, troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_list, prefix, plen, limit);
}

troupe_err
troupe_etcd_delete_wait(troupe_etcd *c, const void *key, size_t klen,
                        bool prefix, troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_delete, key, klen, prefix);
}

troupe_err
troupe_etcd_cas_wait(troupe_etcd *c, const void *key, size_t klen,
                     int64_t expect_mod, const void *value, size_t vlen,
                     int64_t lease, troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_cas, key, klen, expect_mod, value, vlen, lease);
}

troupe_err
troupe_etcd_lease_grant_wait(troupe_etcd *c, int64_t ttl_s,
                             troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_lease_grant, ttl_s);
}

troupe_err
troupe_etcd_lease_keepalive_wait(troupe_etcd *c, int64_t lease_id,
                                 troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_lease_keepalive, lease_id);
}

troupe_err
troupe_etcd_lease_revoke_wait(troupe_etcd *c, int64_t lease_id,
                              troupe_etcd_result *out)
{
    WAIT_TWIN(troupe_etcd_lease_revoke, lease_id);
}

/* ---- open, stop ---------------------------------------------------------- */

/* One endpoint: http(s)://host[:port], no path, query or user part. */
static bool
endpoint_ok(const char *s, size_t n)
{
    size_t skip = 0;
    if (n > 7 && strncmp(s, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncmp(s, "https://", 8) == 0)
        skip = 8;
    if (skip == 0 || n >= ENDPOINT_MAX)
        return false;
    for (size_t i = skip; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' ||
                  ch == ':' || ch == '[' || ch == ']' || ch == '_';
        if (!ok)
            return false;
    }
    return true;
}

static void
free_eps(troupe_etcd *c)
{
    for (uint32_t i = 0; i < c->n_ep; i++)
        troupe_free(c->ep[i]);
}

troupe_err
troupe_etcd_open(const troupe_etcd_opts *o, troupe_etcd **out)
{
    if (o == NULL || o->endpoints == NULL || out == NULL)
        return TROUPE_EINVAL;
    troupe_etcd *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->log = o->log;
    c->timeout_ms =
        o->timeout_ms ? o->timeout_ms : TROUPE_ETCD_TIMEOUT_DEFAULT_MS;
    const char *p = o->endpoints;
    troupe_err e = TROUPE_OK;
    while (e == TROUPE_OK) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n > 0 && p[n - 1] == '/')
            n--; /* "http://h:2379/" names the same server */
        if (!endpoint_ok(p, n) || c->n_ep == TROUPE_ETCD_ENDPOINTS_MAX) {
            e = TROUPE_EINVAL;
            break;
        }
        char *ep = troupe_malloc(n + 1);
        if (ep == NULL) {
            e = TROUPE_ENOMEM;
            break;
        }
        memcpy(ep, p, n);
        ep[n] = 0;
        c->ep[c->n_ep++] = ep;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (e == TROUPE_OK)
        e = troupe__http_open(o->log, TROUPE_HTTPCALL_BODY_MAX_MAX, &c->http);
    if (e != TROUPE_OK) {
        free_eps(c);
        troupe_free(c);
        return e;
    }
    *out = c;
    return TROUPE_OK;
}

troupe_err
troupe_etcd_stop_wait(troupe_etcd *c)
{
    troupe_err e = wait_check(c, "troupe_etcd_stop_wait");
    if (e != TROUPE_OK)
        return e;
    bool was = false;
    if (!atomic_compare_exchange_strong(&c->stopped, &was, true))
        return TROUPE_ESTATE;
    return troupe_httpcall_stop_wait(c->http);
}

const troupe_logger *
troupe__etcd_logger(const troupe_etcd *c)
{
    return c ? c->log : NULL;
}

void
troupe_etcd_destroy(troupe_etcd *c)
{
    if (c == NULL)
        return;
    if (!atomic_load(&c->stopped)) {
        atomic_store(&c->stopped, true);
        troupe_httpcall_stop_wait(c->http);
    }
    troupe_httpcall_destroy(c->http);
    free_eps(c);
    troupe_free(c);
}
