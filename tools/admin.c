/*
 * The admin endpoint's HTTP server: the one file that reaches nng's HTTP
 * server (nng/supplemental/http/http.h).
 *
 * One handler takes every path and method ("/" as a tree, any method), so
 * that 404 and 405 are ours, with JSON bodies, rather than nng's HTML
 * pages. nng collects each body up to ADMIN_BODY_MAX and refuses a larger
 * Content-Length before reading the body; nng 1.5 answers that with 400
 * (the status it gives a malformed request too), so its page for 400 is
 * set to a JSON error naming both causes (nng still labels its own pages
 * text/html). Bodies are never read past the cap: memory per request is
 * bounded by it.
 *
 * nng calls the handler on its own threads, which the node's transport
 * shares, and a route may block for a scan or a synced write: so the
 * handler only queues the request (bounded, 503 past ADMIN_QUEUE_MAX) for
 * one worker thread that runs the routes and completes nng's aio. Teardown
 * drains that queue (answering 503) before nng's server is stopped: nng
 * waits for every handler aio of a connection it closes, so none may be
 * left waiting for a worker that is gone.
 */
#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_route.h"
#include "troupe/log.h"

typedef struct job {
    struct job *next;
    nng_aio *aio;
    nng_http_req *req;
} job;

struct admin {
    admin_ctx ctx;
    nng_http_server *srv;
    char *token;
    size_t token_len;
    int port;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail; /* mu */
    size_t queued;    /* mu */
    bool stopping;    /* mu */
};

static const char *
ctype_json(void)
{
    return "application/json";
}

/* Completes nng's aio with `status` and body; on allocation failure nng's
 * own 500 goes out instead. */
static void
finish(nng_aio *aio, int status, const char *ctype, const char *allow,
       const void *body, size_t len)
{
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0)
        rv = nng_http_res_set_status(res, (uint16_t)status);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Content-Type", ctype);
    if (rv == 0 && allow != NULL)
        rv = nng_http_res_set_header(res, "Allow", allow);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Cache-Control", "no-store");
    if (rv == 0)
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
finish_call(nng_aio *aio, admin_call *call)
{
    if (call->text != NULL) {
        finish(aio, call->status,
               call->content_type ? call->content_type : "text/plain",
               call->allow[0] ? call->allow : NULL, call->text, call->text_len);
        free(call->text);
        return;
    }
    char *s = call->json ? json_dumps(call->json, JSON_COMPACT) : NULL;
    if (s == NULL) {
        static const char oom[] = "{\"error\":{\"status\":500,\"code\":"
                                  "\"no_memory\",\"message\":\"out of "
                                  "memory\"}}";
        finish(aio, 500, ctype_json(), NULL, oom, sizeof(oom) - 1);
    } else {
        size_t n = strlen(s);
        s[n] = '\n'; /* json_dumps's NUL: a line for curl users */
        finish(aio, call->status, ctype_json(),
               call->allow[0] ? call->allow : NULL, s, n + 1);
        free(s);
    }
    json_decref(call->json);
}

static void
finish_error(nng_aio *aio, int status, const char *code, const char *msg)
{
    admin_call call = {0};
    admin_error(&call, status, code, "%s", msg);
    finish_call(aio, &call);
}

/* Compares the Authorization header with the token in time that depends
 * on the token's length only. 0: allowed; else the status to answer. */
static int
check_token(const admin *a, nng_http_req *req)
{
    if (a->token == NULL)
        return 0;
    const char *h = nng_http_req_get_header(req, "Authorization");
    static const char bearer[] = "Bearer ";
    if (h == NULL || strncmp(h, bearer, sizeof(bearer) - 1) != 0)
        return 401;
    h += sizeof(bearer) - 1;
    size_t n = strlen(h);
    unsigned char diff = n != a->token_len;
    for (size_t i = 0; i < a->token_len; i++)
        diff |= (unsigned char)(a->token[i] ^ (i < n ? h[i] : 0));
    return diff ? 403 : 0;
}

static void
run_job(admin *a, job *j)
{
    nng_http_req *req = j->req;
    int denied = check_token(a, req);
    if (denied == 401) {
        finish_error(j->aio, 401, "unauthorized",
                     "this endpoint wants Authorization: Bearer <token>");
        return;
    }
    if (denied != 0) {
        finish_error(j->aio, 403, "forbidden", "wrong token");
        return;
    }
    const char *uri = nng_http_req_get_uri(req);
    const char *q = strchr(uri, '?');
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    char *path = malloc(plen + 1);
    if (path == NULL) {
        finish_error(j->aio, 500, "no_memory", "out of memory");
        return;
    }
    memcpy(path, uri, plen);
    path[plen] = '\0';
    admin_call call = {.method = nng_http_req_get_method(req),
                       .query = q ? q + 1 : ""};
    void *body = NULL;
    nng_http_req_get_data(req, &body, &call.body_len);
    call.body = body;
    admin_dispatch(&a->ctx, path, &call);
    free(path);
    finish_call(j->aio, &call);
}

static void *
worker(void *arg)
{
    admin *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->head == NULL && !a->stopping)
            pthread_cond_wait(&a->cv, &a->mu);
        job *j = a->head;
        if (j == NULL)
            break; /* stopping and drained */
        a->head = j->next;
        if (a->head == NULL)
            a->tail = NULL;
        a->queued--;
        bool stopping = a->stopping;
        pthread_mutex_unlock(&a->mu);
        if (stopping)
            finish_error(j->aio, 503, "stopping", "the node is stopping");
        else
            run_job(a, j);
        free(j);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* nng's thread: queue the request for the worker, or refuse it. */
static void
handle(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    admin *a = nng_http_handler_get_data(h);
    job *j = malloc(sizeof(*j));
    if (j == NULL) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    *j = (job){.aio = aio, .req = req};
    pthread_mutex_lock(&a->mu);
    const char *refuse = a->stopping                    ? "the node is stopping"
                         : a->queued >= ADMIN_QUEUE_MAX ? "too many requests "
                                                          "waiting"
                                                        : NULL;
    if (refuse == NULL) {
        if (a->tail != NULL)
            a->tail->next = j;
        else
            a->head = j;
        a->tail = j;
        a->queued++;
        pthread_cond_signal(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    if (refuse != NULL) {
        free(j);
        finish_error(aio, 503, "unavailable", refuse);
    }
}

bool
admin_host_is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0)
        return true;
    unsigned b[4];
    char tail;
    if (sscanf(host, "%u.%u.%u.%u%c", &b[0], &b[1], &b[2], &b[3], &tail) != 4)
        return false;
    return b[0] == 127 && b[1] < 256 && b[2] < 256 && b[3] < 256;
}

bool
admin_parse_addr(const char *addr, char *host, size_t host_cap, char *url,
                 size_t url_cap)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr)
        return false;
    const char *port = colon + 1;
    size_t np = strlen(port);
    if (np == 0 || np > 5 || strspn(port, "0123456789") != np ||
        atoi(port) > 65535)
        return false;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    bool v6 = h[0] == '[';
    if (v6) {
        if (hl < 3 || h[hl - 1] != ']')
            return false;
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= host_cap ||
        strcspn(h, v6 ? "[]/?#@ " : "[]/?#@: ") < hl)
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    int n = snprintf(url, url_cap, v6 ? "http://[%s]:%s" : "http://%s:%s", host,
                     port);
    return n > 0 && (size_t)n < url_cap;
}

troupe_err
admin_http_serve(const admin_http *h, troupe_runtime *rt, const char *sys,
                 const char *what, const char *addr, nng_http_server **srv,
                 int *port)
{
    const troupe_logger *log = troupe_runtime_logger(rt);
    *srv = NULL;
    nng_url *u = NULL;
    nng_http_server *s = NULL;
    nng_http_handler *hd = NULL;
    const char *step = "cannot listen on";
    int rv = nng_url_parse(&u, h->url);
    if (rv != 0)
        return TROUPE_EINVAL;
    if ((rv = nng_http_server_hold(&s, u)) != 0) {
        step = "cannot hold";
    } else if ((rv = nng_http_handler_alloc(&hd, "/", h->fn)) != 0 ||
               (rv = nng_http_handler_set_method(hd, NULL)) != 0 ||
               (rv = nng_http_handler_set_tree(hd)) != 0 ||
               (rv = nng_http_handler_collect_body(hd, true, h->body_max)) !=
                   0 ||
               (rv = nng_http_handler_set_data(hd, h->data, NULL)) != 0 ||
               (rv = nng_http_server_set_error_page(s, 400, h->refused)) != 0 ||
               (rv = nng_http_server_add_handler(s, hd)) != 0) {
        nng_http_handler_free(hd); /* NULL or not taken */
        step = "cannot serve (is the address taken?)";
    } else if ((rv = nng_http_server_start(s)) == 0) {
        nng_sockaddr sa;
        if ((rv = nng_http_server_get_addr(s, &sa)) == 0) {
            *port = sa.s_family == NNG_AF_INET6 ? ntohs(sa.s_in6.sa_port)
                                                : ntohs(sa.s_in.sa_port);
            nng_url_free(u);
            *srv = s;
            return TROUPE_OK;
        }
        nng_http_server_stop(s);
        step = "no address for";
    }
    troupe_log(log, TROUPE_LOG_ERROR, sys, "%s: %s %s: %s", what, step, addr,
               nng_strerror(rv));
    if (s != NULL)
        nng_http_server_release(s);
    nng_url_free(u);
    return TROUPE_ESYS;
}

troupe_err
admin_create(const admin_ctx *ctx, const char *addr, const char *token,
             size_t token_len, admin **out)
{
    if (ctx == NULL || ctx->rt == NULL || ctx->db == NULL || addr == NULL ||
        out == NULL || (token == NULL) != (token_len == 0) ||
        (token != NULL &&
         (token_len < ADMIN_TOKEN_MIN || token_len > ADMIN_TOKEN_MAX)))
        return TROUPE_EINVAL;
    char host[256], url[300];
    if (!admin_parse_addr(addr, host, sizeof(host), url, sizeof(url)))
        return TROUPE_EINVAL;
    if (token == NULL && !admin_host_is_loopback(host))
        return TROUPE_EAUTH;
    admin *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return TROUPE_ENOMEM;
    a->ctx = *ctx;
    if (token != NULL) {
        if ((a->token = malloc(token_len + 1)) == NULL) {
            free(a);
            return TROUPE_ENOMEM;
        }
        memcpy(a->token, token, token_len);
        a->token[token_len] = '\0';
        a->token_len = token_len;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    static const char refused[] =
        "{\"error\":{\"status\":400,\"code\":\"refused\",\"message\":"
        "\"refused before routing: a request body over 65536 bytes, or a "
        "malformed HTTP request\"}}\n";
    _Static_assert(ADMIN_BODY_MAX == 65536, "refused's text");
    troupe_err e = TROUPE_ESYS;
    /* the worker first: a request may come as soon as the server starts */
    if (pthread_create(&a->thread, NULL, worker, a) != 0)
        goto fail;
    a->thread_started = true;
    admin_http hs = {.url = url,
                     .fn = handle,
                     .data = a,
                     .body_max = ADMIN_BODY_MAX,
                     .refused = refused};
    if ((e = admin_http_serve(&hs, ctx->rt, "admin", "admin endpoint", addr,
                              &a->srv, &a->port)) != TROUPE_OK)
        goto fail;
    *out = a;
    return TROUPE_OK;
fail:
    if (a->thread_started) {
        pthread_mutex_lock(&a->mu);
        a->stopping = true;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
    }
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->token);
    free(a);
    return e;
}

int
admin_port(const admin *a)
{
    return a ? a->port : 0;
}

void
admin_destroy(admin *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->stopping = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    nng_http_server_stop(a->srv);
    nng_http_server_release(a->srv);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    if (a->token != NULL)
        memset(a->token, 0, a->token_len);
    free(a->token);
    free(a);
}
