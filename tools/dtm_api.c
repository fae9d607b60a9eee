/*
 * The DTM HTTP API (dtm_api.h): DTM's transaction-manager paths over the
 * node's coordinator, with DTM's request shapes (dtmcli's TransBase, as
 * its SDKs post it) and its result conventions (dtmsvr's WrapHandler2):
 * 200 {"dtm_result":"SUCCESS"} when a call succeeded; 409
 * {"dtm_result":"FAILURE","message":...} when it can never succeed (the
 * client then rolls back); other statuses {"message":...}. A refused
 * request writes nothing: every field is checked before the coordinator
 * is called, and the coordinator checks its own rules before it commits.
 *
 * Threads. nng calls handle() on its own threads, which the node's
 * transport shares, so nothing there may block: the writes go to the
 * coordinator's asynchronous calls and their callback completes nng's aio;
 * query and all (blocking reads) are queued for one worker thread of this
 * file's, as the admin endpoint does for all its routes (a worker there
 * would cap every submit at one commit's latency). Teardown: no new
 * request is taken, the coordinator calls in flight are waited for (each
 * fires once; a commit does not wait for a branch), then the worker
 * drains its queue with 503 before nng's server stops: nng waits for
 * every handler aio of a connection it closes.
 */
#include "dtm_api.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "admin.h"
#include "troupe/coord.h"
#include "troupe/httpcall.h"
#include "troupe/log.h"

#define PREFIX "/api/dtmsvr/"
/* An http payload's bytes besides its url and body: the msgpack array
 * and the two headers (str 32 and bin 32 at most). */
#define PACK_OVERHEAD 11

typedef struct job {
    struct job *next;
    nng_aio *aio;
    nng_http_req *req;
    bool all; /* GET all, else GET query */
} job;

struct dtm_api {
    troupe_runtime *rt;
    troupe_coord *coord;
    nng_http_server *srv;
    int port;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail; /* mu */
    size_t queued;    /* mu */
    size_t inflight;  /* mu: coordinator calls not yet called back */
    bool stopping;    /* mu */
};

/* ---- replies ---- */

/* Completes aio with status and j (stolen) as its JSON body; on
 * allocation failure nng's own 500 goes out instead. */
static void
reply(nng_aio *aio, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    nng_http_res *res = NULL;
    int rv = s == NULL ? NNG_ENOMEM : nng_http_res_alloc(&res);
    if (rv == 0)
        rv = nng_http_res_set_status(res, (uint16_t)status);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Content-Type",
                                     "application/json; charset=utf-8");
    if (rv == 0)
        rv = nng_http_res_copy_data(res, s, strlen(s));
    free(s);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void
reply_success(nng_aio *aio)
{
    reply(aio, 200, json_pack("{s:s}", "dtm_result", "SUCCESS"));
}

/* An error as DTM words it: 409 carries dtm_result FAILURE, 425 ONGOING,
 * and the message then ends with that word, as DTM's wrapped errors do
 * (its clients look for "FAILURE" in the body). */
static void
reply_error(nng_aio *aio, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
reply_error(nng_aio *aio, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* it may quote the request (a cut url, jansson's text of a bad body):
     * kept to printable ASCII, so that it is always a JSON string */
    for (char *c = msg; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
    const char *word = status == 409   ? "FAILURE"
                       : status == 425 ? "ONGOING"
                                       : NULL;
    json_t *j = json_object();
    if (j != NULL && word != NULL) {
        char full[1100];
        snprintf(full, sizeof(full), "%s %s", msg, word);
        json_object_set_new(j, "dtm_result", json_string(word));
        json_object_set_new(j, "message", json_string(full));
    } else if (j != NULL) {
        json_object_set_new(j, "message", json_string(msg));
    }
    reply(aio, status, j);
}

/* A call's own error (returned, so nothing was written): its reason. */
static void
reply_refused(nng_aio *aio, const char *what, troupe_err e)
{
    /* a full mailbox or a busy shard: the client may try again */
    bool busy = e == TROUPE_ECLOSED || e == TROUPE_EFULL || e == TROUPE_EBUSY;
    int status = e == TROUPE_EINVAL ? 400 : busy ? 503 : 500;
    reply_error(aio, status, "%s refused: %s (%s)", what, troupe_errmsg(e),
                troupe_err_name(e));
}

/* ---- the coordinator's calls ---- */

typedef enum verb { V_PREPARE, V_SUBMIT, V_ABORT, V_REGISTER } verb;

static const char *const verb_names[] = {"prepare", "submit", "abort",
                                         "registerBranch"};

typedef struct call {
    dtm_api *api;
    nng_aio *aio;
    verb v;
    bool then_submit; /* a msg's prepare, then its submit */
    char gid[TROUPE_GID_MAX + 1];
    char branch_id[8];
} call;

/* Gives back the place enter() took (a request that called nothing, or
 * whose call has called back). */
static void
leave(dtm_api *d)
{
    pthread_mutex_lock(&d->mu);
    if (--d->inflight == 0)
        pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void
call_done(call *k)
{
    dtm_api *d = k->api;
    free(k);
    leave(d);
}

/* The coordinator's outcome, as DTM's server would answer it. */
static void
call_reply(call *k, troupe_err err)
{
    const char *g = k->gid;
    switch (err) {
    case TROUPE_OK:
        reply_success(k->aio);
        break;
    case TROUPE_ECONFLICT:
        if (k->v == V_ABORT)
            reply_error(k->aio, 409,
                        "gid %s: cannot abort: it has ended, or it is a "
                        "submitted msg (which only goes forward).",
                        g);
        else if (k->v == V_REGISTER)
            reply_error(k->aio, 409,
                        "gid %s: cannot register a branch: it is no longer "
                        "prepared.",
                        g);
        else
            reply_error(k->aio, 409,
                        "gid %s: cannot %s: it has aborted or failed.", g,
                        verb_names[k->v]);
        break;
    case TROUPE_ENOENT:
        if (k->v == V_REGISTER)
            reply_error(k->aio, 409,
                        "no trans with gid: %s status: prepared found (or it "
                        "is not a tcc).",
                        g);
        else
            reply_error(k->aio, 409,
                        "no trans with gid: %s found (a tcc or msg is "
                        "prepared first).",
                        g);
        break;
    case TROUPE_ERANGE:
        reply_error(k->aio, 409,
                    "gid %s: branch_id %s is out of order: troupe registers "
                    "a tcc's branches in order (01, 02, ...) and %s is not "
                    "the next one.",
                    g, k->branch_id, k->branch_id);
        break;
    case TROUPE_EINVAL:
        reply_error(k->aio, 400, "gid %s: %s refused: %d branches at most.", g,
                    verb_names[k->v], TROUPE_GTX_STEPS_MAX);
        break;
    case TROUPE_ECLOSED:
        reply_error(k->aio, 503, "the node is stopping");
        break;
    default:
        reply_error(k->aio, 500, "gid %s: %s: %s (%s)", g, verb_names[k->v],
                    troupe_strerror(err), troupe_err_name(err));
    }
}

static void
call_cb(troupe_err err, void *arg)
{
    call *k = arg;
    if (err == TROUPE_OK && k->then_submit) {
        k->then_submit = false;
        k->v = V_SUBMIT;
        err = troupe_gtx_submit(k->api->coord, k->gid, strlen(k->gid), call_cb,
                                k);
        if (err == TROUPE_OK)
            return;
    }
    call_reply(k, err);
    call_done(k);
}

static void
register_cb(troupe_err err, const char *branch_id, void *arg)
{
    (void)branch_id; /* the client's own */
    call_cb(err, arg);
}

/* ---- request fields ---- */

/* A refused request's reason, for a 400. */
typedef struct why {
    char msg[512];
} why;

static bool
refuse(why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool
refuse(why *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
    va_end(ap);
    return false;
}

/* o[key] as a string: absent or null gives def; another type is refused. */
static bool
get_str(json_t *o, const char *key, const char *def, const char **out, why *w)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) {
        *out = def;
        return true;
    }
    if (!json_is_string(v))
        return refuse(w, "%s must be a string", key);
    *out = json_string_value(v);
    return true;
}

/* o[key] as an integer in 0..max (absent: 0). */
static bool
get_uint(json_t *o, const char *key, json_int_t max, json_int_t *out, why *w)
{
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (v == NULL || json_is_null(v))
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > max)
        return refuse(w, "%s must be an integer in 0..%lld", key,
                      (long long)max);
    *out = json_integer_value(v);
    return true;
}

/* An http branch's url: DTM's http protocol only (no topic://, no grpc). */
static bool
url_ok(const char *what, const char *url, why *w)
{
    size_t n = strlen(url);
    if (n == 0)
        return refuse(w, "%s: the url is empty", what);
    if (n > TROUPE_HTTPCALL_URL_MAX)
        return refuse(w, "%s: the url is longer than %d bytes", what,
                      TROUPE_HTTPCALL_URL_MAX);
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return refuse(w,
                      "%s: '%.64s' is not an http:// or https:// url (troupe "
                      "calls branches over HTTP only)",
                      what, url);
    return true;
}

/* The parsed request: its JSON and what the calls borrow from it. */
typedef struct treq {
    json_t *j;
    const char *gid, *trans_type;
    troupe_gtx_mode mode;
    size_t n; /* steps */
    const char *action[TROUPE_GTX_STEPS_MAX], *compensate[TROUPE_GTX_STEPS_MAX];
    const char *body[TROUPE_GTX_STEPS_MAX];
    size_t body_len[TROUPE_GTX_STEPS_MAX];
    uint64_t after[TROUPE_GTX_STEPS_MAX];
    bool concurrent, has_orders;
    json_int_t timeout_to_fail, retry_limit;
    const char *query_prepared, *rollback_reason;
} treq;

/* The fields every TransBase carries: gid, trans_type, protocol, and no
 * option troupe cannot honour. */
static bool
parse_base(treq *t, why *w)
{
    if (!get_str(t->j, "gid", "", &t->gid, w) ||
        !get_str(t->j, "trans_type", "", &t->trans_type, w))
        return false;
    if (t->gid[0] == '\0')
        return refuse(w, "gid is missing");
    if (!troupe_gid_valid(t->gid, strlen(t->gid)))
        return refuse(w,
                      "gid '%.64s' breaks troupe's gid rule: 1..%d bytes of "
                      "[A-Za-z0-9_.:-]",
                      t->gid, TROUPE_GID_MAX);
    if (t->trans_type[0] == '\0')
        return refuse(w, "trans_type is missing");
    t->mode = troupe_gtx_mode_of(t->trans_type);
    if (t->mode != TROUPE_MODE_SAGA && t->mode != TROUPE_MODE_TCC &&
        t->mode != TROUPE_MODE_MSG)
        return refuse(w,
                      "trans_type '%.32s' is not served: troupe's DTM API "
                      "takes saga, msg and tcc (xa and workflow are not "
                      "served over HTTP)",
                      t->trans_type);
    const char *proto = NULL;
    if (!get_str(t->j, "protocol", "", &proto, w))
        return false;
    if (proto[0] != '\0' && strcmp(proto, "http") != 0)
        return refuse(w, "protocol '%.32s' is not served: http only", proto);
    json_t *h = json_object_get(t->j, "branch_headers");
    if (h != NULL && !json_is_null(h) &&
        (!json_is_object(h) || json_object_size(h) != 0))
        return refuse(w, "branch_headers are not supported: troupe's http "
                         "branches send no custom header");
    if (!get_str(t->j, "rollback_reason", "", &t->rollback_reason, w) ||
        !get_str(t->j, "query_prepared", "", &t->query_prepared, w))
        return false;
    json_t *c = json_object_get(t->j, "concurrent");
    if (c != NULL && !json_is_null(c) && !json_is_boolean(c))
        return refuse(w, "concurrent must be true or false");
    t->concurrent = json_is_true(c);
    return get_uint(t->j, "timeout_to_fail", INT64_MAX / 1000,
                    &t->timeout_to_fail, w) &&
           get_uint(t->j, "retry_limit", UINT32_MAX, &t->retry_limit, w);
}

/* custom_data: a saga's {"orders": {"i": [j...]}, "concurrent": true}
 * (dtmcli's BuildCustomOptions); a msg's {"delay": s} is refused. */
static bool
parse_custom(treq *t, why *w)
{
    const char *cd = NULL;
    if (!get_str(t->j, "custom_data", "", &cd, w))
        return false;
    if (cd[0] == '\0')
        return true;
    json_error_t je;
    json_t *c = json_loads(cd, 0, &je);
    if (!json_is_object(c)) {
        json_decref(c);
        return refuse(w, "custom_data is not a JSON object");
    }
    bool ok = true;
    json_t *v = json_object_get(c, "delay");
    if (v != NULL && !(json_is_integer(v) && json_integer_value(v) == 0))
        ok = refuse(w, "custom_data: a msg's delay is not supported");
    v = json_object_get(c, "concurrent");
    if (ok && v != NULL && json_is_true(v))
        t->concurrent = true;
    json_t *orders = json_object_get(c, "orders");
    if (ok && orders != NULL && !json_is_null(orders)) {
        if (!json_is_object(orders)) {
            ok = refuse(w, "custom_data: orders must be an object");
        } else {
            const char *key;
            json_t *pre;
            json_object_foreach(orders, key, pre)
            {
                char *end;
                long i = strtol(key, &end, 10);
                if (*key == '\0' || *end != '\0' || i < 0 ||
                    (size_t)i >= t->n || !json_is_array(pre)) {
                    ok = refuse(w,
                                "custom_data: orders: '%.16s' is no step "
                                "index with an array of steps",
                                key);
                    break;
                }
                size_t k;
                json_t *e;
                json_array_foreach(pre, k, e)
                {
                    if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                        (size_t)json_integer_value(e) >= t->n) {
                        ok = refuse(w,
                                    "custom_data: orders of step %ld: not a "
                                    "step index",
                                    i);
                        break;
                    }
                    t->after[i] |= 1ull << json_integer_value(e);
                    t->has_orders = true;
                }
                if (!ok)
                    break;
            }
        }
    }
    json_decref(c);
    return ok;
}

/* steps and payloads of a saga (action, compensate) or a msg (action). */
static bool
parse_steps(treq *t, why *w)
{
    json_t *steps = json_object_get(t->j, "steps");
    json_t *pl = json_object_get(t->j, "payloads");
    if (steps == NULL || json_is_null(steps))
        return refuse(w, "steps are missing");
    if (!json_is_array(steps) || json_array_size(steps) == 0 ||
        json_array_size(steps) > TROUPE_GTX_STEPS_MAX)
        return refuse(w, "steps must be an array of 1..%d steps",
                      TROUPE_GTX_STEPS_MAX);
    t->n = json_array_size(steps);
    if (pl != NULL && !json_is_null(pl) &&
        (!json_is_array(pl) || json_array_size(pl) != t->n))
        return refuse(w,
                      "payloads must be an array of %zu strings, one a "
                      "step",
                      t->n);
    for (size_t i = 0; i < t->n; i++) {
        json_t *s = json_array_get(steps, i);
        if (!json_is_object(s))
            return refuse(w, "steps[%zu] is not an object", i);
        char what[48];
        snprintf(what, sizeof(what), "steps[%zu].action", i);
        if (!get_str(s, "action", "", &t->action[i], w) ||
            !url_ok(what, t->action[i], w))
            return false;
        if (!get_str(s, "compensate", "", &t->compensate[i], w))
            return false;
        if (t->mode == TROUPE_MODE_MSG && t->compensate[i][0] != '\0')
            return refuse(w, "steps[%zu]: a msg's step has no compensate", i);
        snprintf(what, sizeof(what), "steps[%zu].compensate", i);
        if (t->compensate[i][0] != '\0' && !url_ok(what, t->compensate[i], w))
            return false;
        json_t *b = pl && json_is_array(pl) ? json_array_get(pl, i) : NULL;
        if (b == NULL && !get_str(s, "data", "", &t->body[i], w))
            return false;
        if (b != NULL && !json_is_string(b))
            return refuse(w, "payloads[%zu] is not a string", i);
        if (b != NULL)
            t->body[i] = json_string_value(b);
        t->body_len[i] = b ? json_string_length(b) : strlen(t->body[i]);
        size_t url = strlen(t->action[i]) > strlen(t->compensate[i])
                         ? strlen(t->action[i])
                         : strlen(t->compensate[i]);
        if (t->body_len[i] + url + PACK_OVERHEAD > TROUPE_GTX_PAYLOAD_MAX)
            return refuse(w,
                          "payloads[%zu]: %zu bytes, with its url over the "
                          "%u bytes of a branch's payload",
                          i, t->body_len[i], TROUPE_GTX_PAYLOAD_MAX);
    }
    return true;
}

/* An http call's payload, [url, body], into p (init'ed here). */
static troupe_gtx_call
http_call(troupe_packer *p, const char *url, const char *body, size_t len)
{
    troupe_pack_init(p);
    troupe_gtx_call c = {.target = TROUPE_HTTPCALL_TARGET_DEFAULT};
    if (troupe_httpcall_payload_pack(p, url, body, len) == TROUPE_OK)
        c.payload = troupe_pack_data(p, &c.payload_len);
    return c;
}

/* Starts the coordinator call of k for t: OK (the callback replies) or
 * the call's error (nothing written). packs: 2 * TROUPE_GTX_STEPS_MAX. */
static troupe_err
start_write(dtm_api *d, call *k, treq *t, troupe_packer *packs)
{
    troupe_coord *c = d->coord;
    size_t gl = strlen(t->gid);
    troupe_err e = TROUPE_EINVAL;
    if (k->v == V_SUBMIT && t->mode == TROUPE_MODE_SAGA) {
        troupe_saga_step st[TROUPE_GTX_STEPS_MAX];
        memset(st, 0, sizeof(st));
        for (size_t i = 0; i < t->n; i++) {
            st[i].action = http_call(&packs[2 * i], t->action[i], t->body[i],
                                     t->body_len[i]);
            if (t->compensate[i][0] != '\0')
                st[i].compensate =
                    http_call(&packs[2 * i + 1], t->compensate[i], t->body[i],
                              t->body_len[i]);
        }
        troupe_saga_opts o = {
            .timeout_to_fail_ms = (int64_t)t->timeout_to_fail * 1000,
            .retry_limit = (uint32_t)t->retry_limit,
            .concurrent = t->concurrent,
            .after = t->concurrent && t->has_orders ? t->after : NULL};
        return troupe_saga_submit(c, t->gid, gl, st, t->n, &o, call_cb, k);
    }
    if (k->v == V_PREPARE && t->mode == TROUPE_MODE_TCC)
        return troupe_tcc_prepare(c, t->gid, gl, call_cb, k);
    if (t->mode == TROUPE_MODE_MSG &&
        (k->v == V_PREPARE || (k->v == V_SUBMIT && t->query_prepared[0]))) {
        /* A submit that names its query_prepared prepares first (OK and
         * unchanged when prepared already), so that a msg submitted
         * without its prepare (DTM allows it) still has its query-back. */
        troupe_gtx_call st[TROUPE_GTX_STEPS_MAX];
        for (size_t i = 0; i < t->n; i++)
            st[i] =
                http_call(&packs[i], t->action[i], t->body[i], t->body_len[i]);
        troupe_gtx_call q =
            http_call(&packs[TROUPE_GTX_STEPS_MAX], t->query_prepared, "", 0);
        k->then_submit = k->v == V_SUBMIT;
        k->v = V_PREPARE;
        return troupe_msg_prepare(c, t->gid, gl, st, t->n, &q, 0, call_cb, k);
    }
    if (k->v == V_SUBMIT)
        return troupe_gtx_submit(c, t->gid, gl, call_cb, k);
    if (k->v == V_ABORT) {
        const char *r = t->rollback_reason;
        /* DTM's clients send an error's text as the reason: one troupe
         * cannot store is dropped rather than refusing the abort */
        if (r[0] != '\0' && !troupe_gtx_abort_reason_valid(r, strlen(r)))
            r = NULL;
        return troupe_gtx_abort(c, t->gid, gl, r, call_cb, k);
    }
    return e;
}

/* registerBranch: DTM's map of strings (gid, trans_type, branch_id, data,
 * confirm, cancel). */
static void
do_register(dtm_api *d, nng_aio *aio, json_t *j)
{
    why w = {{0}};
    const char *gid = NULL, *tt = NULL, *bid = NULL, *data = NULL, *curl = NULL,
               *xurl = NULL;
    bool ok = get_str(j, "gid", "", &gid, &w) &&
              get_str(j, "trans_type", "", &tt, &w) &&
              get_str(j, "branch_id", "", &bid, &w) &&
              get_str(j, "data", "", &data, &w) &&
              get_str(j, "confirm", "", &curl, &w) &&
              get_str(j, "cancel", "", &xurl, &w);
    if (ok && gid[0] == '\0')
        ok = refuse(&w, "gid is missing");
    if (ok && !troupe_gid_valid(gid, strlen(gid)))
        ok = refuse(&w,
                    "gid '%.64s' breaks troupe's gid rule: 1..%d bytes of "
                    "[A-Za-z0-9_.:-]",
                    gid, TROUPE_GID_MAX);
    if (ok && strcmp(tt, "tcc") != 0)
        ok = refuse(&w,
                    "trans_type '%.32s': troupe registers branches of a tcc "
                    "only (xa and workflow are not served over HTTP)",
                    tt);
    if (ok && bid[0] == '\0')
        ok = refuse(&w, "branch_id is missing");
    if (ok && strlen(bid) != 2)
        ok = refuse(&w,
                    "branch_id '%.16s': troupe's tcc branch ids are two "
                    "digits, 01..%d, registered in order",
                    bid, TROUPE_GTX_STEPS_MAX);
    if (ok)
        ok = url_ok("confirm", curl, &w) && url_ok("cancel", xurl, &w);
    size_t dl = ok ? json_string_length(json_object_get(j, "data")) : 0;
    size_t url = !ok                           ? 0
                 : strlen(curl) > strlen(xurl) ? strlen(curl)
                                               : strlen(xurl);
    if (ok && dl + url + PACK_OVERHEAD > TROUPE_GTX_PAYLOAD_MAX)
        ok = refuse(&w,
                    "data: %zu bytes, with its url over the %u bytes of a "
                    "branch's payload",
                    dl, TROUPE_GTX_PAYLOAD_MAX);
    if (!ok) {
        reply_error(aio, 400, "registerBranch refused: %s", w.msg);
        leave(d);
        return;
    }
    call *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        reply_error(aio, 500, "out of memory");
        leave(d);
        return;
    }
    *k = (call){.api = d, .aio = aio, .v = V_REGISTER};
    snprintf(k->gid, sizeof(k->gid), "%s", gid);
    snprintf(k->branch_id, sizeof(k->branch_id), "%s", bid);
    troupe_packer p[2];
    troupe_gtx_call conf = http_call(&p[0], curl, data, dl);
    troupe_gtx_call canc = http_call(&p[1], xurl, data, dl);
    troupe_err e = troupe_tcc_register_at(d->coord, gid, strlen(gid), bid,
                                          &conf, &canc, register_cb, k);
    if (e != TROUPE_OK) { /* before the next troupe call: troupe_errmsg */
        reply_refused(aio, "registerBranch", e);
        call_done(k);
    }
    troupe_pack_fini(&p[0]);
    troupe_pack_fini(&p[1]);
}

/* prepare, submit, abort: a TransBase. */
static void
do_write(dtm_api *d, nng_aio *aio, verb v, json_t *j)
{
    why w = {{0}};
    treq *t = calloc(1, sizeof(*t));
    troupe_packer *packs = calloc(2 * TROUPE_GTX_STEPS_MAX, sizeof(*packs));
    call *k = calloc(1, sizeof(*k));
    if (t == NULL || packs == NULL || k == NULL) {
        free(t);
        free(packs);
        free(k);
        reply_error(aio, 500, "out of memory");
        leave(d);
        return;
    }
    *k = (call){.api = d, .aio = aio, .v = v};
    t->j = j;
    bool ok = parse_base(t, &w);
    if (ok && v == V_PREPARE && t->mode == TROUPE_MODE_SAGA)
        ok = refuse(&w, "a saga is not prepared: submit it");
    if (ok && v == V_ABORT && t->mode == TROUPE_MODE_SAGA) {
        /* DTM's answer: a saga goes on by itself, the client cannot stop
         * it (an operator can: troupe gtx abort) */
        reply_error(aio, 409, "trans type: 'saga' cannot abort.");
        call_done(k);
        goto out;
    }
    bool with_steps =
        ok && ((v == V_SUBMIT && t->mode == TROUPE_MODE_SAGA) ||
               (t->mode == TROUPE_MODE_MSG &&
                (v == V_PREPARE || t->query_prepared[0] != '\0')));
    if (with_steps)
        ok = parse_steps(t, &w) && parse_custom(t, &w);
    if (ok && t->mode == TROUPE_MODE_MSG && v == V_PREPARE)
        ok = url_ok("query_prepared", t->query_prepared, &w);
    if (ok && t->mode == TROUPE_MODE_MSG && v == V_SUBMIT &&
        t->query_prepared[0] != '\0')
        ok = url_ok("query_prepared", t->query_prepared, &w);
    if (!ok) {
        reply_error(aio, 400, "%s refused: %s", verb_names[v], w.msg);
        call_done(k);
    } else {
        snprintf(k->gid, sizeof(k->gid), "%s", t->gid);
        troupe_err e = start_write(d, k, t, packs);
        if (e != TROUPE_OK) {
            reply_refused(aio, verb_names[v], e);
            call_done(k);
        }
    }
out:
    for (size_t i = 0; i < 2 * TROUPE_GTX_STEPS_MAX; i++)
        troupe_pack_fini(&packs[i]);
    free(packs);
    free(t);
}

/* ---- reads (the worker's) ---- */

/* The value of key in a query string, percent-decoded into out; false
 * when absent. */
static bool
query_param(const char *q, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    while (q != NULL && *q != '\0') {
        const char *amp = strchr(q, '&');
        size_t seg = amp ? (size_t)(amp - q) : strlen(q);
        if (seg > kl && strncmp(q, key, kl) == 0 && q[kl] == '=') {
            size_t o = 0;
            for (size_t i = kl + 1; i < seg && o + 1 < cap; i++) {
                unsigned x;
                if (q[i] == '%' && i + 2 < seg &&
                    sscanf(q + i + 1, "%2x", &x) == 1) {
                    out[o++] = (char)x;
                    i += 2;
                } else {
                    out[o++] = q[i] == '+' ? ' ' : q[i];
                }
            }
            out[o] = '\0';
            return true;
        }
        if (seg == kl && strncmp(q, key, kl) == 0) {
            out[0] = '\0';
            return true;
        }
        q = amp ? amp + 1 : NULL;
    }
    return false;
}

static json_t *
time_of(int64_t ms)
{
    if (ms <= 0)
        return json_null();
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char buf[40];
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
    return json_string(buf);
}

/* A TransGlobalStore's fields, as DTM names them. */
static json_t *
trans_json(const char *gid, const troupe_gtx_info *in)
{
    json_t *j = json_object();
    if (j == NULL)
        return NULL;
    const char *m = troupe_gtx_mode_name(in->mode);
    json_object_set_new(j, "gid", json_string(gid));
    json_object_set_new(j, "trans_type", json_string(m ? m : "unknown"));
    json_object_set_new(j, "status",
                        json_string(admin_gtx_status_name(in->status)));
    json_object_set_new(j, "protocol", json_string("http"));
    json_object_set_new(j, "create_time", time_of(in->created_ms));
    json_object_set_new(j, "update_time", time_of(in->updated_ms));
    if (in->finished_ms > 0)
        json_object_set_new(j, "finish_time", time_of(in->finished_ms));
    if (in->reason[0] != '\0')
        json_object_set_new(j, "rollback_reason", json_string(in->reason));
    json_object_set_new(j, "retry_count", json_integer(in->attempts));
    return j;
}

static void
do_query(dtm_api *d, nng_aio *aio, const char *q)
{
    char gid[TROUPE_GID_MAX + 2];
    if (!query_param(q, "gid", gid, sizeof(gid)) || gid[0] == '\0') {
        reply_error(aio, 400, "no gid specified");
        return;
    }
    if (!troupe_gid_valid(gid, strlen(gid))) {
        reply_error(aio, 400,
                    "gid breaks troupe's gid rule: 1..%d bytes of "
                    "[A-Za-z0-9_.:-]",
                    TROUPE_GID_MAX);
        return;
    }
    troupe_gtx_detail *dt = NULL;
    troupe_err e = troupe_gtx_detail_wait(d->coord, gid, strlen(gid), &dt);
    if (e == TROUPE_ENOENT) { /* DTM: no transaction, no branch */
        reply(aio, 200, json_pack("{s:n,s:[]}", "transaction", "branches"));
        return;
    }
    if (e != TROUPE_OK) {
        reply_error(aio, 500, "query %s: %s (%s)", gid, troupe_errmsg(e),
                    troupe_err_name(e));
        return;
    }
    json_t *br = json_array();
    for (size_t i = 0; br != NULL && i < dt->n_branches; i++) {
        const troupe_gtx_branch *b = &dt->branches[i];
        for (size_t o = 0; o < b->n_ops; o++) {
            const troupe_gtx_op *op = &b->ops[o];
            if (strcmp(op->op, "msg") == 0)
                continue; /* a msg's query-back: no branch in DTM */
            const char *st = op->state == TROUPE_GTX_CALL_SUCCEEDED ? "succeed"
                             : op->state == TROUPE_GTX_CALL_FAILED  ? "failed"
                                                                   : "prepared";
            json_array_append_new(
                br, json_pack("{s:s,s:s,s:s,s:s,s:i}", "gid", gid, "branch_id",
                              b->id, "op", op->op, "status", st, "attempts",
                              (json_int_t)op->attempts));
        }
    }
    json_t *j = json_object();
    if (j != NULL) {
        json_object_set_new(j, "transaction", trans_json(gid, &dt->info));
        json_object_set_new(j, "branches", br);
    } else {
        json_decref(br);
    }
    troupe_gtx_detail_destroy(dt);
    reply(aio, 200, j);
}

static void
do_all(dtm_api *d, nng_aio *aio, const char *q)
{
    char gid[TROUPE_GID_MAX + 2], pos[TROUPE_GID_MAX + 2], lim[16], st[16],
        tt[16], unused[8];
    if (query_param(q, "createTimeStart", unused, sizeof(unused)) ||
        query_param(q, "createTimeEnd", unused, sizeof(unused))) {
        reply_error(aio, 400,
                    "createTimeStart and createTimeEnd are not supported");
        return;
    }
    long limit = 100;
    if (query_param(q, "limit", lim, sizeof(lim)) && lim[0] != '\0') {
        char *end;
        limit = strtol(lim, &end, 10);
        if (*end != '\0' || limit < 1 || limit > TROUPE_GTX_LIST_MAX) {
            reply_error(aio, 400, "limit must be a number in 1..%d",
                        TROUPE_GTX_LIST_MAX);
            return;
        }
    }
    troupe_gtx_filter f = {0};
    if (query_param(q, "status", st, sizeof(st)) && st[0] != '\0' &&
        (f.status = admin_gtx_status_of(st)) == 0) {
        reply_error(aio, 400,
                    "status must be prepared, submitted, aborting, succeed "
                    "or failed");
        return;
    }
    if (query_param(q, "transType", tt, sizeof(tt)) && tt[0] != '\0' &&
        (f.mode = troupe_gtx_mode_of(tt)) == 0) {
        reply_error(aio, 400, "transType names no mode");
        return;
    }
    json_t *list = json_array();
    if (query_param(q, "gid", gid, sizeof(gid)) && gid[0] != '\0') {
        troupe_gtx_info in;
        troupe_err e =
            troupe_gid_valid(gid, strlen(gid))
                ? troupe_gtx_query_wait(d->coord, gid, strlen(gid), &in)
                : TROUPE_ENOENT;
        if (e == TROUPE_OK)
            json_array_append_new(list, trans_json(gid, &in));
        else if (e != TROUPE_ENOENT) {
            json_decref(list);
            reply_error(aio, 500, "all: %s (%s)", troupe_errmsg(e),
                        troupe_err_name(e));
            return;
        }
        reply(
            aio, 200,
            json_pack("{s:o,s:s}", "transactions", list, "next_position", ""));
        return;
    }
    bool has_pos = query_param(q, "position", pos, sizeof(pos)) && pos[0];
    if (has_pos && !troupe_gid_valid(pos, strlen(pos))) {
        json_decref(list);
        reply_error(aio, 400, "position is not a gid");
        return;
    }
    troupe_gtx_page *p = NULL;
    troupe_err e = troupe_gtx_list_wait(d->coord, &f, has_pos ? pos : NULL,
                                        (size_t)limit, &p);
    if (e != TROUPE_OK) {
        json_decref(list);
        reply_error(aio, e == TROUPE_EINVAL ? 400 : 500, "all: %s (%s)",
                    troupe_errmsg(e), troupe_err_name(e));
        return;
    }
    for (size_t i = 0; i < p->n; i++)
        json_array_append_new(list,
                              trans_json(p->items[i].gid, &p->items[i].info));
    json_t *j = json_pack("{s:o,s:s}", "transactions", list, "next_position",
                          p->more ? p->cursor : "");
    troupe_gtx_page_destroy(p);
    reply(aio, 200, j);
}

static void *
worker(void *arg)
{
    dtm_api *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->head == NULL && !d->stopping)
            pthread_cond_wait(&d->cv, &d->mu);
        job *j = d->head;
        if (j == NULL)
            break;
        if ((d->head = j->next) == NULL)
            d->tail = NULL;
        d->queued--;
        bool stopping = d->stopping;
        pthread_mutex_unlock(&d->mu);
        if (stopping) {
            reply_error(j->aio, 503, "the node is stopping");
        } else {
            const char *uri = nng_http_req_get_uri(j->req);
            const char *q = strchr(uri, '?');
            if (j->all)
                do_all(d, j->aio, q ? q + 1 : "");
            else
                do_query(d, j->aio, q ? q + 1 : "");
        }
        free(j);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- routing (nng's threads) ---- */

/* newGid: 128 random bits in hex, under troupe's gid rule. */
static void
do_new_gid(nng_aio *aio)
{
    unsigned char r[16];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        reply_error(aio, 500, "no random bytes for a gid");
        return;
    }
    char gid[40];
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(gid + 2 * i, 3, "%02x", r[i]);
    reply(aio, 200,
          json_pack("{s:s,s:s}", "gid", gid, "dtm_result", "SUCCESS"));
}

/* Takes a coordinator call's place; NULL, or why it is refused (the node
 * stopping, DTM_INFLIGHT_MAX calls in flight). */
static const char *
enter(dtm_api *d)
{
    pthread_mutex_lock(&d->mu);
    const char *refusal = d->stopping ? "the node is stopping"
                          : d->inflight >= DTM_INFLIGHT_MAX
                              ? "too many calls in "
                                "flight"
                              : NULL;
    if (refusal == NULL)
        d->inflight++;
    pthread_mutex_unlock(&d->mu);
    return refusal;
}

static void
enqueue(dtm_api *d, nng_aio *aio, nng_http_req *req, bool all)
{
    job *j = malloc(sizeof(*j));
    if (j == NULL) {
        reply_error(aio, 500, "out of memory");
        return;
    }
    *j = (job){.aio = aio, .req = req, .all = all};
    pthread_mutex_lock(&d->mu);
    const char *refuse = d->stopping                  ? "the node is stopping"
                         : d->queued >= DTM_QUEUE_MAX ? "too many queries "
                                                        "waiting"
                                                      : NULL;
    if (refuse == NULL) {
        if (d->tail != NULL)
            d->tail->next = j;
        else
            d->head = j;
        d->tail = j;
        d->queued++;
        pthread_cond_signal(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    if (refuse != NULL) {
        free(j);
        reply_error(aio, 503, "%s", refuse);
    }
}

static void
handle(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    dtm_api *d = nng_http_handler_get_data(h);
    const char *uri = nng_http_req_get_uri(req);
    const char *method = nng_http_req_get_method(req);
    size_t plen = strcspn(uri, "?#");
    bool ours = strncmp(uri, PREFIX, strlen(PREFIX)) == 0;
    const char *name = ours ? uri + strlen(PREFIX) : uri;
    size_t nlen = ours ? plen - strlen(PREFIX) : 0;
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
#define IS(s) (ours && nlen == strlen(s) && strncmp(name, s, nlen) == 0)
    if (IS("newGid")) {
        if (get || post)
            do_new_gid(aio);
        else
            reply_error(aio, 405, "newGid wants GET or POST");
        return;
    }
    if (IS("query") || IS("all")) {
        if (get)
            enqueue(d, aio, req, IS("all"));
        else
            reply_error(aio, 405, "%.*s wants GET", (int)nlen, name);
        return;
    }
    int v = IS("prepare")                                     ? V_PREPARE
            : IS("submit")                                    ? V_SUBMIT
            : IS("abort")                                     ? V_ABORT
            : IS("registerBranch") || IS("registerTccBranch") ? V_REGISTER
                                                              : -1;
#undef IS
    if (v < 0) {
        reply_error(aio, 404,
                    "no such path: %.*s (troupe serves newGid, prepare, "
                    "submit, abort, registerBranch, query and all under "
                    "/api/dtmsvr/)",
                    (int)(plen > 200 ? 200 : plen), uri);
        return;
    }
    if (!post) {
        reply_error(aio, 405, "%s wants POST", verb_names[v]);
        return;
    }
    void *body = NULL;
    size_t len = 0;
    nng_http_req_get_data(req, &body, &len);
    json_error_t je;
    json_t *j = body ? json_loadb(body, len, 0, &je) : NULL;
    if (!json_is_object(j)) {
        /* je is filled only when the text did not parse */
        const char *what = j != NULL ? "another JSON value"
                           : body    ? je.text
                                     : "no body";
        json_decref(j);
        reply_error(aio, 400, "%s refused: the body is not a JSON object: %s",
                    verb_names[v], what);
        return;
    }
    const char *busy = enter(d);
    if (busy != NULL) {
        json_decref(j);
        reply_error(aio, 503, "%s", busy);
        return;
    }
    if (v == V_REGISTER)
        do_register(d, aio, j);
    else
        do_write(d, aio, (verb)v, j);
    json_decref(j);
}

/* ---- lifecycle ---- */

troupe_err
dtm_api_create(troupe_runtime *rt, troupe_coord *c, const char *addr,
               bool allow_public, dtm_api **out)
{
    if (rt == NULL || c == NULL || addr == NULL || out == NULL)
        return TROUPE_EINVAL;
    char host[256], url[300];
    if (!admin_parse_addr(addr, host, sizeof(host), url, sizeof(url)))
        return TROUPE_EINVAL;
    if (!allow_public && !admin_host_is_loopback(host))
        return TROUPE_EAUTH;
    dtm_api *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return TROUPE_ENOMEM;
    d->rt = rt;
    d->coord = c;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    static const char refused[] =
        "{\"message\":\"refused before routing: a request body over 1048576 "
        "bytes, or a malformed HTTP request\"}";
    _Static_assert(DTM_BODY_MAX == 1048576, "refused's text");
    troupe_err e = TROUPE_ESYS;
    /* the worker first: a request may come as soon as the server starts */
    if (pthread_create(&d->thread, NULL, worker, d) != 0)
        goto fail;
    d->thread_started = true;
    admin_http hs = {.url = url,
                     .fn = handle,
                     .data = d,
                     .body_max = DTM_BODY_MAX,
                     .refused = refused};
    if ((e = admin_http_serve(&hs, rt, "dtm", "DTM API", addr, &d->srv,
                              &d->port)) != TROUPE_OK)
        goto fail;
    *out = d;
    return TROUPE_OK;
fail:
    if (d->thread_started) {
        pthread_mutex_lock(&d->mu);
        d->stopping = true;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
    }
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
    return e;
}

int
dtm_api_port(const dtm_api *d)
{
    return d ? d->port : 0;
}

void
dtm_api_destroy(dtm_api *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_broadcast(&d->cv);
    while (d->inflight > 0)
        pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    nng_http_server_stop(d->srv);
    nng_http_server_release(d->srv);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
