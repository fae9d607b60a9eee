/*
 * actors/httpcall (troupe/httpcall.h) against a real HTTP server on
 * loopback (nng's, started per test): DTM's verdicts, the call's shape
 * (query parameters, body byte for byte, GET for op "msg"), the hostile
 * input rules (schemes, malformed payloads, redirects, capped bodies),
 * the deadline, a stop with requests in flight, credit.
 *
 * Tasks are submitted as the coordinator does, through the dispatch's
 * producer tier; a handler under /hold keeps its request unanswered
 * until the test releases it, so "in flight" is a state the test sees
 * (the server's count of held requests), never a guess by time.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "troupe/dispatch.h"
#include "troupe/httpcall.h"
#include "troupe/internal/dispatch.h"
#include "troupe/internal/http.h"
#include "troupe/internal/httpcall.h"
#include "troupe/pack.h"
#include "tsupport.h"

#define MAXT 64
#define HUGE_LEN (1u << 20)
#define HELD_MAX 64

/* ---- the server ---------------------------------------------------------- */

typedef struct seen {
    char method[8];
    char uri[1024];
    char ctype[64];
    uint8_t *body;
    size_t body_len;
} seen;

static struct {
    nng_http_server *srv;
    int port;
    pthread_mutex_t mu;
    seen reqs[MAXT];
    int n_reqs;
    int ok_hits; /* requests to /ok */
    nng_aio *held[HELD_MAX];
    int n_held, held_max;
    char *huge;
} S;

static void
respond(nng_aio *aio, uint16_t status, const char *loc, const void *body,
        size_t len)
{
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0)
        rv = nng_http_res_set_status(res, status);
    if (rv == 0 && loc != NULL)
        rv = nng_http_res_set_header(res, "Location", loc);
    /* nng sends no Content-Length for an empty body: the client would
     * wait for the connection to close */
    if (rv == 0 && len == 0)
        rv = nng_http_res_set_header(res, "Content-Length", "0");
    if (rv == 0 && len > 0)
        rv = nng_http_res_copy_data(res, body, len);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void
held_cancel(nng_aio *aio, void *arg, int rv)
{
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < S.n_held; i++) {
        if (S.held[i] == aio) {
            S.held[i] = S.held[--S.n_held];
            pthread_mutex_unlock(&S.mu);
            nng_aio_finish(aio, rv);
            return;
        }
    }
    pthread_mutex_unlock(&S.mu);
}

/* Answers the oldest held request 200 "held"; false when none is held. */
static bool
release_one(void)
{
    pthread_mutex_lock(&S.mu);
    if (S.n_held == 0) {
        pthread_mutex_unlock(&S.mu);
        return false;
    }
    nng_aio *aio = S.held[0];
    S.held[0] = S.held[--S.n_held];
    pthread_mutex_unlock(&S.mu);
    respond(aio, 200, NULL, "held", 4);
    return true;
}

static int
held_now(void)
{
    pthread_mutex_lock(&S.mu);
    int n = S.n_held;
    pthread_mutex_unlock(&S.mu);
    return n;
}

static void
record(nng_http_req *req, const char *uri)
{
    pthread_mutex_lock(&S.mu);
    if (S.n_reqs < MAXT) {
        seen *s = &S.reqs[S.n_reqs++];
        snprintf(s->method, sizeof(s->method), "%s",
                 nng_http_req_get_method(req));
        snprintf(s->uri, sizeof(s->uri), "%s", uri);
        const char *ct = nng_http_req_get_header(req, "Content-Type");
        snprintf(s->ctype, sizeof(s->ctype), "%s", ct ? ct : "");
        void *d = NULL;
        size_t n = 0;
        nng_http_req_get_data(req, &d, &n);
        s->body = malloc(n + 1);
        if (n > 0)
            memcpy(s->body, d, n);
        s->body_len = n;
    }
    pthread_mutex_unlock(&S.mu);
}

static bool
path_is(const char *uri, const char *path)
{
    size_t n = strlen(path);
    return strncmp(uri, path, n) == 0 && (uri[n] == 0 || uri[n] == '?');
}

static void
handle(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    const char *uri = nng_http_req_get_uri(req);
    record(req, uri);
    if (path_is(uri, "/ok")) {
        pthread_mutex_lock(&S.mu);
        S.ok_hits++;
        pthread_mutex_unlock(&S.mu);
        respond(aio, 200, NULL, "ok", 2);
    } else if (path_is(uri, "/created")) {
        respond(aio, 201, NULL, "{}", 2);
    } else if (path_is(uri, "/failure")) {
        respond(aio, 200, NULL, "{\"dtm_result\":\"FAILURE\"}", 24);
    } else if (path_is(uri, "/ongoing")) {
        respond(aio, 200, NULL, "{\"dtm_result\":\"ONGOING\"}", 24);
    } else if (path_is(uri, "/both")) {
        respond(aio, 200, NULL, "FAILURE ONGOING", 15);
    } else if (path_is(uri, "/409")) {
        respond(aio, 409, NULL, "conflict", 8);
    } else if (path_is(uri, "/425")) {
        respond(aio, 425, NULL, "too early", 9);
    } else if (path_is(uri, "/500")) {
        respond(aio, 500, NULL, "SUCCESS", 7);
    } else if (path_is(uri, "/redirect")) {
        respond(aio, 302, "/ok", NULL, 0);
    } else if (path_is(uri, "/huge_ok")) {
        respond(aio, 200, NULL, S.huge, HUGE_LEN);
    } else if (path_is(uri, "/huge_failure")) {
        /* the marker well past the cap */
        memcpy(S.huge + HUGE_LEN - 7, "FAILURE", 7);
        respond(aio, 200, NULL, S.huge, HUGE_LEN);
        memset(S.huge + HUGE_LEN - 7, 'a', 7);
    } else if (path_is(uri, "/hold")) {
        pthread_mutex_lock(&S.mu);
        if (S.n_held == HELD_MAX) {
            pthread_mutex_unlock(&S.mu);
            respond(aio, 503, NULL, NULL, 0);
            return;
        }
        S.held[S.n_held++] = aio;
        if (S.n_held > S.held_max)
            S.held_max = S.n_held;
        nng_aio_defer(aio, held_cancel, NULL);
        pthread_mutex_unlock(&S.mu);
    } else {
        respond(aio, 404, NULL, NULL, 0);
    }
}

static void
server_start(void)
{
    nng_url *u = NULL;
    nng_http_handler *h = NULL;
    ck_assert_int_eq(nng_url_parse(&u, "http://127.0.0.1:0"), 0);
    ck_assert_int_eq(nng_http_server_hold(&S.srv, u), 0);
    ck_assert_int_eq(nng_http_handler_alloc(&h, "/", handle), 0);
    ck_assert_int_eq(nng_http_handler_set_method(h, NULL), 0);
    ck_assert_int_eq(nng_http_handler_set_tree(h), 0);
    ck_assert_int_eq(nng_http_handler_collect_body(h, true, 1u << 20), 0);
    ck_assert_int_eq(nng_http_server_add_handler(S.srv, h), 0);
    ck_assert_int_eq(nng_http_server_start(S.srv), 0);
    nng_sockaddr sa;
    ck_assert_int_eq(nng_http_server_get_addr(S.srv, &sa), 0);
    S.port = ntohs(sa.s_in.sa_port);
    nng_url_free(u);
}

static void
server_stop(void)
{
    while (release_one())
        ;
    nng_http_server_stop(S.srv);
    nng_http_server_release(S.srv);
    for (int i = 0; i < S.n_reqs; i++)
        free(S.reqs[i].body);
}

/* ---- the producer -------------------------------------------------------- */

static troupe_runtime *rt;
static troupe_httpcall *hc;

static struct {
    _Atomic int done;
    _Atomic int calls[MAXT];
    _Atomic int outcome[MAXT];
    uint8_t *body[MAXT];
    size_t body_len[MAXT];
} P;

static bool
on_done(void *arg, uint64_t id, troupe_outcome o, const uint8_t *body,
        size_t len)
{
    size_t i = (size_t)(uintptr_t)arg;
    if (atomic_fetch_add(&P.calls[i], 1) == 0) {
        P.body[i] = malloc(len + 1);
        if (len > 0)
            memcpy(P.body[i], body, len);
        P.body_len[i] = len;
        atomic_store(&P.outcome[i], (int)o);
    }
    atomic_fetch_add(&P.done, 1);
    return false;
}

static void
setup(void)
{
    memset(&P, 0, sizeof(P));
    memset(&S, 0, sizeof(S));
    pthread_mutex_init(&S.mu, NULL);
    S.huge = malloc(HUGE_LEN);
    memset(S.huge, 'a', HUGE_LEN);
    server_start();
    troupe_runtime_opts o = {.schedulers = 1, .workers = 1, .host_workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
}

static void
teardown(void)
{
    if (hc != NULL) {
        troupe_httpcall_stop_wait(hc);
        troupe_httpcall_destroy(hc);
        hc = NULL;
    }
    server_stop();
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
    rt = NULL;
    for (int i = 0; i < MAXT; i++)
        free(P.body[i]);
    free(S.huge);
}

static void
open_hc(uint32_t credit, uint32_t timeout_ms)
{
    troupe_httpcall_opts o = {.credit = credit, .timeout_ms = timeout_ms};
    ck_assert_ok(troupe_httpcall_open(rt, &o, &hc));
}

static void
url_of(char *buf, size_t cap, const char *path)
{
    snprintf(buf, cap, "http://127.0.0.1:%d%s", S.port, path);
}

/* Submits task i of kind with header and body as given; false without
 * credit (nothing submitted). */
static bool
submit_raw(size_t i, troupe_task_kind kind, const void *header, size_t hl,
           const void *body, size_t bl)
{
    troupe_target *t = troupe_httpcall_target(hc);
    if (!troupe__target_credit_take(t, NULL))
        return false;
    troupe__task_in in = {.kind = kind,
                          .attempt = 1,
                          .header = header,
                          .header_len = hl,
                          .body = body,
                          .body_len = bl};
    ck_assert_ok(troupe__target_submit(t, &in, on_done, (void *)i, NULL));
    return true;
}

/* Header mode, gid, branch id, op (NUL-terminated each) into buf. */
static size_t
header_of(char *buf, const char *mode, const char *gid, const char *bid,
          const char *op)
{
    size_t n = 0;
    const char *parts[4] = {mode, gid, bid, op};
    for (int k = 0; k < 4; k++) {
        size_t l = strlen(parts[k]) + 1;
        memcpy(buf + n, parts[k], l);
        n += l;
    }
    return n;
}

static bool
submit_branch(size_t i, const char *url, const char *op, const void *body,
              size_t len)
{
    char h[256];
    size_t hl = header_of(h, "saga", "g-1", "01", op);
    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_ok(troupe_httpcall_payload_pack(&p, url, body, len));
    size_t pl = 0;
    const void *pd = troupe_pack_data(&p, &pl);
    bool ok = submit_raw(i, TROUPE_TASK_BRANCH, h, hl, pd, pl);
    troupe_pack_fini(&p);
    return ok;
}

static void
submit_path(size_t i, const char *path)
{
    char url[256];
    url_of(url, sizeof(url), path);
    ck_assert(submit_branch(i, url, "action", "{}", 2));
}

static bool
done_at_least(void *arg)
{
    return atomic_load(&P.done) >= *(int *)arg;
}

static void
wait_done(int n)
{
    ck_assert_msg(ts_wait_until(done_at_least, &n, 10000),
                  "%d of %d tasks settled", atomic_load(&P.done), n);
}

static bool
held_at_least(void *arg)
{
    return held_now() >= *(int *)arg;
}

static void
wait_held(int n)
{
    ck_assert_msg(ts_wait_until(held_at_least, &n, 10000),
                  "%d of %d requests held", held_now(), n);
}

static void
assert_outcome(size_t i, troupe_outcome want)
{
    ck_assert_int_eq(atomic_load(&P.calls[i]), 1);
    ck_assert_msg(atomic_load(&P.outcome[i]) == (int)want,
                  "task %zu: outcome %d, want %d", i,
                  atomic_load(&P.outcome[i]), (int)want);
}

/* The decoded value of key in a query string, into out; false if absent. */
static bool
query_get(const char *uri, const char *key, char *out, size_t cap)
{
    const char *q = strchr(uri, '?');
    size_t kl = strlen(key);
    while (q != NULL) {
        q++;
        if (strncmp(q, key, kl) == 0 && q[kl] == '=') {
            const char *v = q + kl + 1;
            size_t n = 0;
            while (*v && *v != '&' && n + 1 < cap) {
                if (*v == '%' && v[1] && v[2]) {
                    char hex[3] = {v[1], v[2], 0};
                    out[n++] = (char)strtol(hex, NULL, 16);
                    v += 3;
                } else {
                    out[n++] = *v++;
                }
            }
            out[n] = 0;
            return true;
        }
        q = strchr(q, '&');
    }
    return false;
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_verdicts_status_and_body_dtm_rules)
{
    open_hc(16, 10000);
    static const struct {
        const char *path;
        troupe_outcome want;
    } cases[] = {
        {"/ok", TROUPE_OUTCOME_SUCCESS},
        {"/created", TROUPE_OUTCOME_SUCCESS},
        {"/failure", TROUPE_OUTCOME_FAILURE},
        {"/ongoing", TROUPE_OUTCOME_ONGOING},
        {"/both", TROUPE_OUTCOME_ONGOING},
        {"/409", TROUPE_OUTCOME_FAILURE},
        {"/425", TROUPE_OUTCOME_ONGOING},
        {"/500", TROUPE_OUTCOME_UNKNOWN},
        {"/redirect", TROUPE_OUTCOME_UNKNOWN},
        {"/nowhere", TROUPE_OUTCOME_UNKNOWN},
    };
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < n; i++)
        submit_path((size_t)i, cases[i].path);
    wait_done(n);
    for (int i = 0; i < n; i++)
        assert_outcome((size_t)i, cases[i].want);
    /* the reply carries the response body */
    ck_assert_int_eq(P.body_len[0], 2);
    ck_assert_mem_eq(P.body[0], "ok", 2);
    ck_assert_int_eq(P.body_len[6], 9);
    ck_assert_mem_eq(P.body[6], "too early", 9);
    /* the redirect was not followed: /ok saw only the first task */
    pthread_mutex_lock(&S.mu);
    int ok_hits = S.ok_hits, reqs = S.n_reqs;
    pthread_mutex_unlock(&S.mu);
    ck_assert_int_eq(ok_hits, 1);
    ck_assert_int_eq(reqs, n);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, (uint64_t)n);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_SUCCESS], 2);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_FAILURE], 2);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_ONGOING], 3);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_UNKNOWN], 3);
    ck_assert_uint_eq(st.late, 0);
}
END_TEST

START_TEST(test_post_query_and_body_arrive_exactly)
{
    open_hc(4, 10000);
    /* values that need encoding: a space, '&', '=', '?', '#', '%', '+',
     * a byte over 0x7f */
    const char *gid = "g 1&x=y?#%+\xc3\xa9";
    char h[256];
    size_t hl = header_of(h, "saga", gid, "01", "compensate");
    uint8_t body[300];
    for (int i = 0; i < 256; i++)
        body[i] = (uint8_t)i;
    memcpy(body + 256, "{\"amount\":30}", 13);
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok?a=1&b=%%20#frag",
             S.port);
    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_ok(troupe_httpcall_payload_pack(&p, url, body, 269));
    size_t pl = 0;
    const void *pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(0, TROUPE_TASK_BRANCH, h, hl, pd, pl));
    troupe_pack_fini(&p);
    wait_done(1);
    assert_outcome(0, TROUPE_OUTCOME_SUCCESS);
    pthread_mutex_lock(&S.mu);
    ck_assert_int_eq(S.n_reqs, 1);
    seen *s = &S.reqs[0];
    ck_assert_str_eq(s->method, "POST");
    ck_assert_str_eq(s->ctype, "application/json");
    ck_assert_uint_eq(s->body_len, 269);
    ck_assert_mem_eq(s->body, body, 269);
    /* the url's own query first, untouched; then ours; no fragment */
    ck_assert_msg(strncmp(s->uri, "/ok?a=1&b=%20&gid=", 18) == 0, "uri %s",
                  s->uri);
    ck_assert_ptr_null(strchr(s->uri, '#'));
    char v[128];
    ck_assert(query_get(s->uri, "gid", v, sizeof(v)));
    ck_assert_str_eq(v, gid);
    ck_assert(query_get(s->uri, "trans_type", v, sizeof(v)));
    ck_assert_str_eq(v, "saga");
    ck_assert(query_get(s->uri, "branch_id", v, sizeof(v)));
    ck_assert_str_eq(v, "01");
    ck_assert(query_get(s->uri, "op", v, sizeof(v)));
    ck_assert_str_eq(v, "compensate");
    /* exactly six parameters: a, b and the four */
    int amps = 0;
    for (const char *c = s->uri; *c; c++)
        amps += *c == '&';
    ck_assert_int_eq(amps, 5);
    pthread_mutex_unlock(&S.mu);
}
END_TEST

START_TEST(test_op_msg_is_get_without_body)
{
    open_hc(4, 10000);
    char url[256];
    url_of(url, sizeof(url), "/ok");
    char h[64];
    size_t hl = header_of(h, "msg", "m-7", "00", "msg");
    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_ok(troupe_httpcall_payload_pack(&p, url, "{\"x\":1}", 7));
    size_t pl = 0;
    const void *pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(0, TROUPE_TASK_BRANCH, h, hl, pd, pl));
    troupe_pack_fini(&p);
    wait_done(1);
    assert_outcome(0, TROUPE_OUTCOME_SUCCESS);
    pthread_mutex_lock(&S.mu);
    ck_assert_int_eq(S.n_reqs, 1);
    ck_assert_str_eq(S.reqs[0].method, "GET");
    ck_assert_uint_eq(S.reqs[0].body_len, 0);
    ck_assert_str_eq(S.reqs[0].uri,
                     "/ok?gid=m-7&trans_type=msg&branch_id=00&op=msg");
    pthread_mutex_unlock(&S.mu);
}
END_TEST

START_TEST(test_non_http_urls_refused_failure_nothing_sent)
{
    open_hc(8, 10000);
    char ftp[128], bare[128], gopher[128];
    snprintf(ftp, sizeof(ftp), "ftp://127.0.0.1:%d/ok", S.port);
    snprintf(bare, sizeof(bare), "127.0.0.1:%d/ok", S.port);
    snprintf(gopher, sizeof(gopher), "gopher://127.0.0.1:%d/ok", S.port);
    const char *urls[] = {"file:///etc/passwd", ftp, bare, gopher,
                          "http://exa mple/"};
    int n = (int)(sizeof(urls) / sizeof(urls[0]));
    for (int i = 0; i < n; i++)
        ck_assert(submit_branch((size_t)i, urls[i], "action", "{}", 2));
    wait_done(n);
    for (int i = 0; i < n; i++)
        assert_outcome((size_t)i, TROUPE_OUTCOME_FAILURE);
    /* the reply says why; /etc/passwd was not read into it */
    ck_assert_ptr_nonnull(memmem(P.body[0], P.body_len[0], "http", 4));
    ck_assert_ptr_null(memmem(P.body[0], P.body_len[0], "root:", 5));
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, 0);
    ck_assert_uint_eq(st.refused, (uint64_t)n);
    pthread_mutex_lock(&S.mu);
    ck_assert_int_eq(S.n_reqs, 0);
    pthread_mutex_unlock(&S.mu);
}
END_TEST

/* https passes the scheme rule: the call is made (a TLS handshake with a
 * plain-http server fails: UNKNOWN, not a refusal). */
START_TEST(test_https_url_called_not_refused)
{
    open_hc(4, 10000);
    char url[128];
    snprintf(url, sizeof(url), "HTTPS://127.0.0.1:%d/ok", S.port);
    ck_assert(submit_branch(0, url, "action", "{}", 2));
    wait_done(1);
    assert_outcome(0, TROUPE_OUTCOME_UNKNOWN);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, 1);
    ck_assert_uint_eq(st.refused, 0);
}
END_TEST

START_TEST(test_malformed_tasks_failure_nothing_sent)
{
    open_hc(16, 10000);
    char url[128];
    url_of(url, sizeof(url), "/ok");
    char h[64];
    size_t hl = header_of(h, "saga", "g-1", "01", "action");
    troupe_packer p;
    /* 0: not msgpack at all */
    ck_assert(submit_raw(0, TROUPE_TASK_BRANCH, h, hl, "\xc1", 1));
    /* 1: [url] alone */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_cstr(&p, url);
    size_t pl;
    const void *pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(1, TROUPE_TASK_BRANCH, h, hl, pd, pl));
    troupe_pack_fini(&p);
    /* 2: [url, body] with body a str, not a bin */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_cstr(&p, url);
    troupe_pack_cstr(&p, "{}");
    pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(2, TROUPE_TASK_BRANCH, h, hl, pd, pl));
    troupe_pack_fini(&p);
    /* 3: a url with a NUL inside */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_str(&p, "http://127.0.0.1/\0x", 19);
    troupe_pack_bin(&p, "{}", 2);
    pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(3, TROUPE_TASK_BRANCH, h, hl, pd, pl));
    troupe_pack_fini(&p);
    /* 4: a header of three strings; 5: a header without its last NUL;
     * 6: not a branch at all */
    troupe_pack_init(&p);
    ck_assert_ok(troupe_httpcall_payload_pack(&p, url, "{}", 2));
    pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(4, TROUPE_TASK_BRANCH,
                         "saga\0g\0"
                         "01\0",
                         10, pd, pl));
    ck_assert(submit_raw(5, TROUPE_TASK_BRANCH, h, hl - 1, pd, pl));
    ck_assert(submit_raw(6, TROUPE_TASK_TEST, h, hl, pd, pl));
    /* 7: the same payload and header, well formed: it is sent */
    ck_assert(submit_raw(7, TROUPE_TASK_BRANCH, h, hl, pd, pl));
    troupe_pack_fini(&p);
    /* 8, 9: a query-back (op msg) with no payload (what the coordinator
     * stores for a message's query-back today) and with a file:// url:
     * UNKNOWN, never a FAILURE that would drop the message */
    char qh[64];
    size_t qhl = header_of(qh, "msg", "m-1", "00", "msg");
    ck_assert(submit_raw(8, TROUPE_TASK_BRANCH, qh, qhl, NULL, 0));
    troupe_pack_init(&p);
    ck_assert_ok(troupe_httpcall_payload_pack(&p, "file:///etc/passwd", "", 0));
    pd = troupe_pack_data(&p, &pl);
    ck_assert(submit_raw(9, TROUPE_TASK_BRANCH, qh, qhl, pd, pl));
    troupe_pack_fini(&p);
    wait_done(10);
    for (size_t i = 0; i < 7; i++)
        assert_outcome(i, TROUPE_OUTCOME_FAILURE);
    assert_outcome(7, TROUPE_OUTCOME_SUCCESS);
    assert_outcome(8, TROUPE_OUTCOME_UNKNOWN);
    assert_outcome(9, TROUPE_OUTCOME_UNKNOWN);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.refused, 9);
    ck_assert_uint_eq(st.requests, 1);
    pthread_mutex_lock(&S.mu);
    ck_assert_int_eq(S.n_reqs, 1);
    pthread_mutex_unlock(&S.mu);
}
END_TEST

START_TEST(test_connection_refused_unknown)
{
    /* a port bound but not listening: connect(2) is refused */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    open_hc(4, 10000);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok", ntohs(sa.sin_port));
    ck_assert(submit_branch(0, url, "action", "{}", 2));
    wait_done(1);
    close(fd);
    assert_outcome(0, TROUPE_OUTCOME_UNKNOWN);
    /* libcurl's error text is the body */
    ck_assert_uint_gt(P.body_len[0], 0);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, 1);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_UNKNOWN], 1);
}
END_TEST

static bool
no_request_in_flight(void *arg)
{
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    return st.requests == 1 && st.in_flight == 0;
}

START_TEST(test_deadline_ends_the_request_unknown)
{
    open_hc(4, 400);
    uint64_t t0 = ts_now_ms();
    submit_path(0, "/hold");
    wait_done(1);
    assert_outcome(0, TROUPE_OUTCOME_UNKNOWN);
    ck_assert_uint_ge(ts_now_ms() - t0, 350);
    /* libcurl gave up by the task's deadline, while the server still
     * holds the request: the request's timeout is the deadline */
    ck_assert(ts_wait_until(no_request_in_flight, NULL, 3000));
    ck_assert_uint_lt(ts_now_ms() - t0, 3000);
    ck_assert_int_eq(held_now(), 1);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_UNKNOWN], 1);
}
END_TEST

START_TEST(test_stop_in_flight_settles_each_once_unknown)
{
    open_hc(4, 60000);
    for (size_t i = 0; i < 4; i++)
        submit_path(i, "/hold");
    wait_held(4);
    /* the target holds its credit: a fifth waits for none */
    ck_assert(!submit_branch(4, "http://127.0.0.1/", "action", NULL, 0));
    uint64_t t0 = ts_now_ms();
    ck_assert_ok(troupe_httpcall_stop_wait(hc));
    ck_assert_uint_lt(ts_now_ms() - t0, 5000);
    /* settled by the stop, not by the 60 s deadline */
    ck_assert_int_eq(atomic_load(&P.done), 4);
    for (size_t i = 0; i < 4; i++)
        assert_outcome(i, TROUPE_OUTCOME_UNKNOWN);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, 4);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_UNKNOWN], 4);
    ck_assert_uint_eq(st.late, 0); /* no second reply to any */
    ck_assert_uint_eq(st.in_flight, 0);
    troupe_target_stats ts;
    troupe_target_stats_get(troupe_httpcall_target(hc), &ts);
    ck_assert_uint_eq(ts.settled[TROUPE_OUTCOME_UNKNOWN], 4);
    ck_assert_uint_eq(ts.timed_out, 0);
    ck_assert_uint_eq(ts.held, 0);
    ck_assert_err(troupe_httpcall_stop_wait(hc), TROUPE_ESTATE);
    troupe_httpcall_destroy(hc);
    hc = NULL;
}
END_TEST

START_TEST(test_more_tasks_than_credit_all_complete)
{
    enum { N = 24, CREDIT = 3 };
    open_hc(CREDIT, 20000);
    int submitted = 0;
    uint64_t end = ts_now_ms() + 20000;
    while (atomic_load(&P.done) < N && ts_now_ms() < end) {
        char url[128];
        url_of(url, sizeof(url), "/hold");
        while (submitted < N &&
               submit_branch((size_t)submitted, url, "action", "{}", 2))
            submitted++;
        int held = held_now();
        ck_assert_int_le(held, CREDIT);
        if (held > 0)
            release_one();
        else
            sched_yield();
    }
    ck_assert_int_eq(submitted, N);
    wait_done(N);
    for (size_t i = 0; i < N; i++)
        assert_outcome(i, TROUPE_OUTCOME_SUCCESS);
    pthread_mutex_lock(&S.mu);
    int held_max = S.held_max, reqs = S.n_reqs;
    pthread_mutex_unlock(&S.mu);
    ck_assert_int_le(held_max, CREDIT);
    ck_assert_int_eq(reqs, N);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, N);
    ck_assert_uint_le(st.in_flight_max, CREDIT);
    ck_assert_uint_eq(st.answered[TROUPE_OUTCOME_SUCCESS], N);
}
END_TEST

START_TEST(test_huge_body_capped_marker_past_cap_found)
{
    open_hc(4, 10000);
    submit_path(0, "/huge_ok");
    wait_done(1);
    submit_path(1, "/huge_failure");
    wait_done(2);
    assert_outcome(0, TROUPE_OUTCOME_SUCCESS);
    assert_outcome(1, TROUPE_OUTCOME_FAILURE);
    for (size_t i = 0; i < 2; i++) {
        ck_assert_uint_eq(P.body_len[i], TROUPE_HTTPCALL_BODY_MAX_DEFAULT);
        ck_assert_mem_eq(P.body[i], S.huge, TROUPE_HTTPCALL_BODY_MAX_DEFAULT);
    }
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.capped, 2);
}
END_TEST

/* Every way of cutting a body into three pieces: a marker split across
 * any seam, or fed byte by byte, is found; a near miss is not. */
START_TEST(test_scan_markers_split_anywhere_found)
{
    const char body[] = "..FAILURE..ONGOING.";
    size_t n = sizeof(body) - 1;
    for (size_t i = 0; i <= n; i++) {
        for (size_t j = i; j <= n; j++) {
            hc_scan sc = {0};
            troupe__httpcall_scan(&sc, body, i);
            troupe__httpcall_scan(&sc, body + i, j - i);
            troupe__httpcall_scan(&sc, body + j, n - j);
            ck_assert_msg(sc.failure && sc.ongoing, "cut at %zu, %zu", i, j);
        }
    }
    hc_scan one = {0};
    for (size_t i = 0; i < n; i++)
        troupe__httpcall_scan(&one, body + i, 1);
    ck_assert(one.failure && one.ongoing);
    const char miss[] = "FAILUR.E ONGOIN ONGOINg AILURE";
    size_t m = sizeof(miss) - 1;
    for (size_t i = 0; i <= m; i++) {
        hc_scan sc = {0};
        troupe__httpcall_scan(&sc, miss, i);
        troupe__httpcall_scan(&sc, miss + i, m - i);
        ck_assert(!sc.failure && !sc.ongoing);
    }
    hc_scan none = {0}, fail = {.failure = true},
            both = {.failure = true, .ongoing = true};
    ck_assert_int_eq(troupe__httpcall_verdict(200, &none),
                     TROUPE_OUTCOME_SUCCESS);
    ck_assert_int_eq(troupe__httpcall_verdict(299, &fail),
                     TROUPE_OUTCOME_FAILURE);
    ck_assert_int_eq(troupe__httpcall_verdict(204, &both),
                     TROUPE_OUTCOME_ONGOING);
    ck_assert_int_eq(troupe__httpcall_verdict(300, &none),
                     TROUPE_OUTCOME_UNKNOWN);
    ck_assert_int_eq(troupe__httpcall_verdict(199, &none),
                     TROUPE_OUTCOME_UNKNOWN);
    ck_assert_int_eq(troupe__httpcall_verdict(409, &none),
                     TROUPE_OUTCOME_FAILURE);
    ck_assert_int_eq(troupe__httpcall_verdict(425, &fail),
                     TROUPE_OUTCOME_ONGOING);
    ck_assert_int_eq(troupe__httpcall_verdict(500, &fail),
                     TROUPE_OUTCOME_UNKNOWN);
}
END_TEST

START_TEST(test_body_max_option_caps_reply_not_verdict)
{
    troupe_httpcall_opts o = {.credit = 4, .body_max = 4};
    ck_assert_ok(troupe_httpcall_open(rt, &o, &hc));
    submit_path(0, "/failure"); /* {"dtm_result":"FAILURE"}: past byte 4 */
    wait_done(1);
    assert_outcome(0, TROUPE_OUTCOME_FAILURE);
    ck_assert_uint_eq(P.body_len[0], 4);
    ck_assert_mem_eq(P.body[0], "{\"dt", 4);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.capped, 1);
}
END_TEST

START_TEST(test_bad_arguments)
{
    troupe_httpcall *h = NULL;
    ck_assert_err(troupe_httpcall_open(NULL, NULL, &h), TROUPE_EINVAL);
    ck_assert_err(troupe_httpcall_open(rt, NULL, NULL), TROUPE_EINVAL);
    troupe_httpcall_opts o = {.body_max = TROUPE_HTTPCALL_BODY_MAX_MAX + 1};
    ck_assert_err(troupe_httpcall_open(rt, &o, &h), TROUPE_EINVAL);
    o = (troupe_httpcall_opts){.credit = TROUPE_TARGET_CREDIT_MAX + 1};
    ck_assert_err(troupe_httpcall_open(rt, &o, &h), TROUPE_EINVAL);
    ck_assert_ptr_null(h);
    /* the default name, then taken */
    ck_assert_ok(troupe_httpcall_open(rt, NULL, &hc));
    troupe_target *t = troupe__target_find(rt, "http", 4);
    ck_assert_ptr_eq(t, troupe_httpcall_target(hc));
    troupe__target_release(t);
    ck_assert_err(troupe_httpcall_open(rt, NULL, &h), TROUPE_EEXIST);
    o = (troupe_httpcall_opts){.target = "http2"};
    ck_assert_ok(troupe_httpcall_open(rt, &o, &h));
    ck_assert_ok(troupe_httpcall_stop_wait(h));
    troupe_httpcall_destroy(h);
    ck_assert_err(troupe_httpcall_stop_wait(NULL), TROUPE_EINVAL);
    troupe_httpcall_destroy(NULL);
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(NULL, &st);
    ck_assert_uint_eq(st.requests, 0);
    ck_assert_ptr_null(troupe_httpcall_target(NULL));

    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_err(troupe_httpcall_payload_pack(NULL, "http://a/", "", 0),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_httpcall_payload_pack(&p, NULL, "", 0), TROUPE_EINVAL);
    ck_assert_err(troupe_httpcall_payload_pack(&p, "", "", 0), TROUPE_EINVAL);
    ck_assert_err(troupe_httpcall_payload_pack(&p, "http://a/", NULL, 1),
                  TROUPE_EINVAL);
    char *long_url = malloc(TROUPE_HTTPCALL_URL_MAX + 2);
    memset(long_url, 'a', TROUPE_HTTPCALL_URL_MAX + 1);
    long_url[TROUPE_HTTPCALL_URL_MAX + 1] = 0;
    ck_assert_err(troupe_httpcall_payload_pack(&p, long_url, "", 0),
                  TROUPE_EINVAL);
    free(long_url);
    /* nothing packed by the refused calls; a good one reads back */
    size_t pl = 1;
    troupe_pack_data(&p, &pl);
    ck_assert_uint_eq(pl, 0);
    ck_assert_ok(troupe_httpcall_payload_pack(&p, "http://a/", "xy", 2));
    const void *pd = troupe_pack_data(&p, &pl);
    troupe_reader r;
    const char *u;
    const void *b;
    size_t ul, bl;
    troupe_reader_init(&r, pd, pl);
    troupe_read_array_n(&r, 2);
    troupe_read_str(&r, 64, &u, &ul);
    troupe_read_bin(&r, 64, &b, &bl);
    ck_assert_ok(troupe_read_end(&r));
    ck_assert_uint_eq(ul, 9);
    ck_assert_mem_eq(u, "http://a/", 9);
    ck_assert_uint_eq(bl, 2);
    ck_assert_mem_eq(b, "xy", 2);
    troupe_pack_fini(&p);
}
END_TEST

START_TEST(test_destroy_running_aborts)
{
    ck_assert_ok(troupe_httpcall_open(rt, NULL, &hc));
    troupe_httpcall_destroy(hc);
}
END_TEST

/* ---- the request API (troupe/internal/http.h) ------------------------------
 */

#define NR 300

static struct {
    _Atomic int done;
    _Atomic int calls[NR];
    troupe_err err[NR];
    long status[NR];
    char body[NR][64];
    size_t len[NR];
} R;

static void
on_resp(void *arg, troupe_err e, long status, const uint8_t *body, size_t len)
{
    size_t i = (size_t)(uintptr_t)arg;
    if (atomic_fetch_add(&R.calls[i], 1) == 0) {
        R.err[i] = e;
        R.status[i] = status;
        R.len[i] = len;
        if (len > 0)
            memcpy(R.body[i], body, len < 63 ? len : 63);
    }
    atomic_fetch_add(&R.done, 1);
}

static int want_done;

static bool
resp_done(void *arg)
{
    return atomic_load(&R.done) >= want_done;
}

static void
request(troupe_httpcall *h, size_t i, const char *method, const char *path,
        const char *body, const char *ctype, uint32_t timeout_ms)
{
    char url[128];
    url_of(url, sizeof(url), path);
    troupe__http_req rq = {.method = method,
                           .url = url,
                           .body = body,
                           .len = body ? strlen(body) : 0,
                           .content_type = ctype,
                           .timeout_ms = timeout_ms};
    ck_assert_ok(troupe__http_request(h, &rq, on_resp, (void *)(uintptr_t)i));
}

static void
wait_resps(int n)
{
    want_done = n;
    ck_assert(ts_wait_until(resp_done, NULL, 20000));
}

static void
close_req_only(troupe_httpcall *h)
{
    ck_assert_ok(troupe_httpcall_stop_wait(h));
    troupe_httpcall_destroy(h);
}

START_TEST(test_request_methods_bodies_statuses_as_sent)
{
    memset(&R, 0, sizeof(R));
    troupe_httpcall *h = NULL;
    ck_assert_ok(troupe__http_open(NULL, 0, &h));
    request(h, 0, "POST", "/ok", "{\"a\":1}", NULL, 5000);
    wait_resps(1);
    request(h, 1, "PUT", "/created", "x", "text/plain", 5000);
    wait_resps(2);
    request(h, 2, "DELETE", "/409", NULL, NULL, 5000);
    wait_resps(3);
    request(h, 3, "GET", "/nothing-here", NULL, NULL, 5000);
    wait_resps(4);
    request(h, 4, "GET", "/redirect", NULL, NULL, 5000);
    wait_resps(5);
    ck_assert_err(R.err[0], TROUPE_OK);
    ck_assert_int_eq(R.status[0], 200);
    ck_assert_uint_eq(R.len[0], 2);
    ck_assert_str_eq(R.body[0], "ok");
    ck_assert_int_eq(R.status[1], 201);
    ck_assert_int_eq(R.status[2], 409); /* a status, not a verdict */
    ck_assert_str_eq(R.body[2], "conflict");
    ck_assert_int_eq(R.status[3], 404);
    ck_assert_err(R.err[3], TROUPE_OK);
    ck_assert_int_eq(R.status[4], 302); /* not followed */
    pthread_mutex_lock(&S.mu);
    ck_assert_int_eq(S.ok_hits, 1);
    ck_assert_int_eq(S.n_reqs, 5);
    ck_assert_str_eq(S.reqs[0].method, "POST");
    ck_assert_str_eq(S.reqs[0].ctype, "application/json");
    ck_assert_uint_eq(S.reqs[0].body_len, 7);
    ck_assert(memcmp(S.reqs[0].body, "{\"a\":1}", 7) == 0);
    ck_assert_str_eq(S.reqs[1].method, "PUT");
    ck_assert_str_eq(S.reqs[1].ctype, "text/plain");
    ck_assert_str_eq(S.reqs[2].method, "DELETE");
    ck_assert_str_eq(S.reqs[3].method, "GET");
    ck_assert_uint_eq(S.reqs[3].body_len, 0);
    pthread_mutex_unlock(&S.mu);
    close_req_only(h);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(atomic_load(&R.calls[i]), 1);
}
END_TEST

START_TEST(test_request_beside_branches_on_one_thread)
{
    memset(&R, 0, sizeof(R));
    open_hc(2, 5000);
    request(hc, 0, "POST", "/ok", "b", NULL, 5000);
    wait_resps(1);
    ck_assert_err(R.err[0], TROUPE_OK);
    ck_assert_int_eq(R.status[0], 200);
    /* a request counts in no branch statistic */
    troupe_httpcall_stats st;
    troupe_httpcall_stats_get(hc, &st);
    ck_assert_uint_eq(st.requests, 0);
}
END_TEST

START_TEST(test_request_past_body_max_etoobig)
{
    memset(&R, 0, sizeof(R));
    troupe_httpcall *h = NULL;
    ck_assert_ok(troupe__http_open(NULL, 64u << 10, &h));
    request(h, 0, "GET", "/huge_ok", NULL, NULL, 10000);
    request(h, 1, "GET", "/ok", NULL, NULL, 10000);
    wait_resps(2);
    ck_assert_err(R.err[0], TROUPE_ETOOBIG);
    ck_assert_uint_eq(R.len[0], 0);
    ck_assert_err(R.err[1], TROUPE_OK);
    close_req_only(h);
}
END_TEST

START_TEST(test_request_deadline_etimedout)
{
    memset(&R, 0, sizeof(R));
    troupe_httpcall *h = NULL;
    ck_assert_ok(troupe__http_open(NULL, 0, &h));
    uint64_t t0 = ts_now_ms();
    request(h, 0, "GET", "/hold", NULL, NULL, 300);
    wait_resps(1);
    ck_assert_err(R.err[0], TROUPE_ETIMEDOUT);
    ck_assert_uint_ge(ts_now_ms() - t0, 250);
    close_req_only(h);
}
END_TEST

static bool
four_held(void *arg)
{
    return held_now() >= 4;
}

START_TEST(test_request_stop_in_flight_ecloses_each_once)
{
    memset(&R, 0, sizeof(R));
    troupe_httpcall *h = NULL;
    ck_assert_ok(troupe__http_open(NULL, 0, &h));
    for (size_t i = 0; i < 4; i++)
        request(h, i, "GET", "/hold", NULL, NULL, 60000);
    ck_assert(ts_wait_until(four_held, NULL, 10000));
    ck_assert_int_eq(atomic_load(&R.done), 0);
    ck_assert_ok(troupe_httpcall_stop_wait(h));
    ck_assert_int_eq(atomic_load(&R.done), 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(atomic_load(&R.calls[i]), 1);
        ck_assert_err(R.err[i], TROUPE_ECLOSED);
    }
    char url[64];
    url_of(url, sizeof(url), "/ok");
    troupe__http_req rq = {.method = "GET", .url = url, .timeout_ms = 100};
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_ECLOSED);
    troupe_httpcall_destroy(h);
    ck_assert_int_eq(atomic_load(&R.done), 4);
}
END_TEST

START_TEST(test_request_refused_connection_eunreachable)
{
    memset(&R, 0, sizeof(R));
    troupe_httpcall *h = NULL;
    ck_assert_ok(troupe__http_open(NULL, 0, &h));
    troupe__http_req rq = {
        .method = "GET", .url = "http://127.0.0.1:1/x", .timeout_ms = 5000};
    ck_assert_ok(troupe__http_request(h, &rq, on_resp, (void *)0));
    wait_resps(1);
    ck_assert_err(R.err[0], TROUPE_EUNREACHABLE);
    close_req_only(h);
}
END_TEST

START_TEST(test_request_queue_bounded_efull)
{
    memset(&R, 0, sizeof(R));
    /* a listener that never accepts: every request stays in flight */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    ck_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    ck_assert(listen(fd, 1) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", ntohs(a.sin_port));
    troupe_httpcall *h = NULL;
    ck_assert_ok(troupe__http_open(NULL, 0, &h));
    troupe__http_req rq = {.method = "GET", .url = url, .timeout_ms = 60000};
    for (size_t i = 0; i < TROUPE__HTTP_PENDING_MAX; i++)
        ck_assert_ok(
            troupe__http_request(h, &rq, on_resp, (void *)(uintptr_t)i));
    ck_assert_err(troupe__http_request(h, &rq, on_resp, (void *)0),
                  TROUPE_EFULL);
    ck_assert_ok(troupe_httpcall_stop_wait(h));
    ck_assert_int_eq(atomic_load(&R.done), TROUPE__HTTP_PENDING_MAX);
    for (size_t i = 0; i < TROUPE__HTTP_PENDING_MAX; i++)
        ck_assert_int_eq(atomic_load(&R.calls[i]), 1);
    troupe_httpcall_destroy(h);
    close(fd);
}
END_TEST

START_TEST(test_request_bad_arguments_einval)
{
    troupe_httpcall *h = NULL;
    ck_assert_err(troupe__http_open(NULL, 0, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe__http_open(NULL, TROUPE_HTTPCALL_BODY_MAX_MAX + 1, &h),
                  TROUPE_EINVAL);
    ck_assert_ok(troupe__http_open(NULL, 0, &h));
    static char longurl[TROUPE_HTTPCALL_URL_MAX + 2];
    memset(longurl, 'a', sizeof(longurl) - 1);
    troupe__http_req ok = {
        .method = "GET", .url = "http://127.0.0.1:1/", .timeout_ms = 10};
    troupe__http_req rq = ok;
    ck_assert_err(troupe__http_request(NULL, &rq, on_resp, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe__http_request(h, NULL, on_resp, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe__http_request(h, &rq, NULL, NULL), TROUPE_EINVAL);
    rq.method = "PATCH";
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq = ok;
    rq.method = NULL;
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq = ok;
    rq.url = NULL;
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq.url = "";
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq.url = longurl;
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq = ok;
    rq.timeout_ms = 0;
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq = ok;
    rq.len = 3;
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq.body = "abc";
    rq.len = TROUPE__HTTP_BODY_MAX + 1;
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    rq = ok;
    rq.content_type = "text/plain\r\nX-Evil: 1";
    ck_assert_err(troupe__http_request(h, &rq, on_resp, NULL), TROUPE_EINVAL);
    close_req_only(h);
    ck_assert(!troupe__http_on_thread(NULL));
}
END_TEST

Suite *
httpcall_suite(void)
{
    Suite *s = suite_create("httpcall");
    TCase *tc = tcase_create("httpcall");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_verdicts_status_and_body_dtm_rules);
    tcase_add_test(tc, test_post_query_and_body_arrive_exactly);
    tcase_add_test(tc, test_op_msg_is_get_without_body);
    tcase_add_test(tc, test_non_http_urls_refused_failure_nothing_sent);
    tcase_add_test(tc, test_https_url_called_not_refused);
    tcase_add_test(tc, test_malformed_tasks_failure_nothing_sent);
    tcase_add_test(tc, test_connection_refused_unknown);
    tcase_add_test(tc, test_deadline_ends_the_request_unknown);
    tcase_add_test(tc, test_stop_in_flight_settles_each_once_unknown);
    tcase_add_test(tc, test_more_tasks_than_credit_all_complete);
    tcase_add_test(tc, test_huge_body_capped_marker_past_cap_found);
    tcase_add_test(tc, test_body_max_option_caps_reply_not_verdict);
    tcase_add_test(tc, test_scan_markers_split_anywhere_found);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test_raise_signal(tc, test_destroy_running_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    tc = tcase_create("request");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_request_methods_bodies_statuses_as_sent);
    tcase_add_test(tc, test_request_beside_branches_on_one_thread);
    tcase_add_test(tc, test_request_past_body_max_etoobig);
    tcase_add_test(tc, test_request_deadline_etimedout);
    tcase_add_test(tc, test_request_stop_in_flight_ecloses_each_once);
    tcase_add_test(tc, test_request_refused_connection_eunreachable);
    tcase_add_test(tc, test_request_queue_bounded_efull);
    tcase_add_test(tc, test_request_bad_arguments_einval);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    Suite *s[] = {httpcall_suite()};
    return ts_run_suites(s, 1);
}
