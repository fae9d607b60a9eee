/*
 * The http branches' host: one pull target, one thread, one libuv loop
 * driving libcurl's multi interface (curl_multi_socket_action).
 *
 * The loop watches three kinds of things: the host endpoint's wake fd (a
 * uv_poll: tasks to pull), each socket libcurl asks about (a uv_poll per
 * socket, made and dropped in its socket callback) and libcurl's one
 * timeout (a uv_timer). A uv_async asks the loop to stop.
 *
 * Invariants:
 * - Every request is on `reqs` from its curl_multi_add_handle until its
 *   reply; finish() takes it off and replies once, so a task the host
 *   took is answered once: by its response, by its error, or by the stop
 *   (UNKNOWN). A task that never becomes a request is answered where it
 *   was pulled.
 * - At most `credit` requests at once: the loop pulls only while fewer
 *   run. The wake fd is edge-triggered but stays readable until a pull
 *   finds the queue empty, and libuv polls level-triggered, so when the
 *   requests are full the wake poll is stopped (else the loop would spin)
 *   and every request's end pulls again.
 * - Only this thread touches the loop, the multi handle and `reqs`; the
 *   other threads touch the atomics (stats, state) and the async.
 *
 * Why a thread of its own, not a runtime worker or a troupe loop: libcurl
 * runs name resolution and TLS handshakes on the thread that drives it,
 * and a slow server must never hold up an actor's turn or a storage
 * worker. Why pull, not a callback target: a callback target would hold
 * a HOST lane thread per request for its whole length.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "troupe/alloc.h"
#include "troupe/httpcall.h"
#include "troupe/internal/http.h"
#include "troupe/internal/httpcall.h"
#include "troupe/internal/runtime.h"
#include "troupe/log.h"

#define SYS "httpcall"
/* A record of the largest task the dispatch can hold: every one fits, so
 * a pull never settles a task UNKNOWN for want of room. */
#define RECORD_CAP                                                             \
    TROUPE_HOST_RECORD_SIZE(TROUPE_TASK_HEADER_MAX, TROUPE_TASK_BODY_MAX)

enum { HC_RUNNING = 0, HC_STOPPED = 1 };

typedef struct hc_req hc_req;
typedef struct hc_api hc_api;

struct troupe_httpcall {
    troupe_runtime *rt;
    const troupe_logger *log;
    troupe_host *host;
    troupe_target *target;
    uint32_t credit;
    uint32_t body_max;

    /* the loop thread's */
    uv_loop_t loop;
    uv_poll_t wake;
    uv_timer_t timer;
    uv_async_t stop_async;
    uv_async_t api_async; /* requests queued (troupe__http_request) */
    CURLM *multi;
    uint8_t *rec; /* RECORD_CAP bytes, one pulled record */
    hc_req *reqs; /* requests running, doubly linked */
    uint32_t n_reqs;
    bool wake_on;
    bool stopping;

    pthread_t thread;
    _Atomic int state;

    /* requests queued for the loop; api_n counts queued and running ones,
     * all under api_mu; api_closed refuses new ones once the stop began */
    pthread_mutex_t api_mu;
    hc_api *api_head, *api_tail;
    uint32_t api_n;
    bool api_closed;

    _Atomic uint64_t requests, answered[5], refused, capped, late;
    _Atomic uint32_t in_flight, in_flight_max;
};

struct hc_req {
    troupe_httpcall *hc;
    hc_req *prev, *next;
    uint64_t id;
    CURL *easy;
    struct curl_slist *headers;
    char *url;
    uint8_t *body; /* the request's, owned */
    size_t body_len;
    uint8_t *resp; /* at most hc->body_max bytes kept */
    size_t resp_len, resp_cap;
    bool capped;
    hc_scan scan;
    char err[CURL_ERROR_SIZE];
    /* a request of troupe__http_request: answered by cb, not reply() */
    troupe__http_cb cb;
    void *cb_arg;
};

struct hc_api {
    hc_api *next;
    char method[8];
    char *url;
    uint8_t *body;
    size_t len;
    char *ctype;
    uint32_t timeout_ms;
    troupe__http_cb cb;
    void *arg;
};

typedef struct hc_sock {
    uv_poll_t poll;
    curl_socket_t fd;
    troupe_httpcall *hc;
} hc_sock;

static void
drain(troupe_httpcall *hc);

static int64_t
now_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t
rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Answers task id once; counts it, and a reply the dispatch refused. */
static void
reply(troupe_httpcall *hc, uint64_t id, troupe_outcome o, const void *body,
      size_t len)
{
    /* counted first: the producer hears the outcome inside the reply */
    atomic_fetch_add_explicit(&hc->answered[o], 1, memory_order_relaxed);
    troupe_err e = troupe_host_reply(hc->host, id, o, body, len);
    if (e == TROUPE_ETIMEDOUT || e == TROUPE_ENOENT)
        atomic_fetch_add_explicit(&hc->late, 1, memory_order_relaxed);
    else if (e != TROUPE_OK)
        troupe_log(hc->log, TROUPE_LOG_WARN, SYS, "reply to task %llu: %s",
                   (unsigned long long)id, troupe_err_name(e));
}

static void
req_free(hc_req *r)
{
    if (r->easy != NULL)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    if (r->cb != NULL)
        troupe_free(r->url); /* troupe_strdup's, not libcurl's URL API */
    else
        troupe__httpcall_url_free(r->url);
    troupe_free(r->body);
    troupe_free(r->resp);
    troupe_free(r);
}

static void
unlink_req(hc_req *r)
{
    troupe_httpcall *hc = r->hc;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        hc->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    curl_multi_remove_handle(hc->multi, r->easy);
}

/* Takes r off the list, answers its task, frees it. */
static void
finish(hc_req *r, troupe_outcome o, const void *body, size_t len)
{
    troupe_httpcall *hc = r->hc;
    unlink_req(r);
    hc->n_reqs--;
    atomic_fetch_sub_explicit(&hc->in_flight, 1, memory_order_relaxed);
    reply(hc, r->id, o, body, len);
    req_free(r);
}

static void
api_release(troupe_httpcall *hc)
{
    pthread_mutex_lock(&hc->api_mu);
    hc->api_n--;
    pthread_mutex_unlock(&hc->api_mu);
}

/* Takes a request of troupe__http_request off the list, calls its
 * callback once, frees it. */
static void
api_finish(hc_req *r, troupe_err e, long status)
{
    troupe_httpcall *hc = r->hc;
    unlink_req(r);
    troupe__http_cb cb = r->cb;
    void *arg = r->cb_arg;
    const uint8_t *body = e == TROUPE_OK ? r->resp : NULL;
    size_t len = e == TROUPE_OK ? r->resp_len : 0;
    /* the slot first: a callback that asks again must find room */
    api_release(hc);
    cb(arg, e, status, body, len);
    req_free(r);
}

static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
    hc_req *r = arg;
    size_t len = size * n;
    troupe__httpcall_scan(&r->scan, data, len);
    size_t room = r->hc->body_max - r->resp_len;
    size_t keep = len < room ? len : room;
    if (keep < len)
        r->capped = true;
    if (r->capped && r->cb != NULL)
        return 0; /* nothing past the cap is wanted: ETOOBIG */
    if (keep == 0)
        return len;
    if (r->resp_len + keep > r->resp_cap) {
        size_t cap = r->resp_cap ? r->resp_cap : 4096;
        while (cap < r->resp_len + keep)
            cap *= 2;
        if (cap > r->hc->body_max)
            cap = r->hc->body_max;
        uint8_t *p = troupe_realloc(r->resp, cap);
        if (p == NULL)
            return 0; /* CURLE_WRITE_ERROR: UNKNOWN */
        r->resp = p;
        r->resp_cap = cap;
    }
    memcpy(r->resp + r->resp_len, data, keep);
    r->resp_len += keep;
    return len;
}

/* The transfer's options; false when libcurl refuses one. */
static bool
req_setup(hc_req *r, const hc_branch *b, long timeout_ms)
{
    CURL *e = r->easy;
    bool ok =
        curl_easy_setopt(e, CURLOPT_URL, r->url) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PRIVATE, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") ==
            CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PROXY, "") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->err) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_USERAGENT, "troupe-httpcall") == CURLE_OK;
    if (!ok)
        return false;
    if (b->get)
        return curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK;
    /* "Expect:" off: curl would wait for a 100 Continue before a large
     * body, which some servers never send. */
    struct curl_slist *h =
        curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h2 = h ? curl_slist_append(h, "Expect:") : NULL;
    if (h2 == NULL) {
        curl_slist_free_all(h);
        return false;
    }
    r->headers = h2;
    static const char empty[1] = {0};
    return curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers) == CURLE_OK &&
           curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                            (curl_off_t)r->body_len) == CURLE_OK &&
           curl_easy_setopt(e, CURLOPT_POSTFIELDS,
                            r->body ? (const char *)r->body : empty) ==
               CURLE_OK;
}

/* One pulled record: a request, or an answer at once. */
static void
take(troupe_httpcall *hc, const uint8_t *rec, size_t len)
{
    uint64_t id = rd_le(rec, 8);
    unsigned kind = (unsigned)rd_le(rec + 12, 2);
    size_t hl = (size_t)rd_le(rec + 14, 2);
    size_t bl = (size_t)rd_le(rec + 20, 4);
    int64_t deadline = (int64_t)rd_le(rec + 24, 8);
    if (TROUPE_HOST_RECORD_SIZE(hl, bl) > len) {
        /* never (the dispatch wrote it); answered, so it is not held */
        reply(hc, id, TROUPE_OUTCOME_UNKNOWN, NULL, 0);
        return;
    }
    const char *why = "httpcall: the task is not a branch";
    hc_branch b = {0};
    char *url = NULL;
    troupe_err e = kind == TROUPE_TASK_BRANCH ? TROUPE_OK : TROUPE_EPROTO;
    if (e == TROUPE_OK)
        e = troupe__httpcall_parse(rec + TROUPE_HOST_RECORD_FIXED, hl,
                                   rec + TROUPE_HOST_RECORD_FIXED + hl, bl, &b,
                                   &why);
    if (e == TROUPE_OK)
        e = troupe__httpcall_url(&b, &url, &why);
    if (e == TROUPE_EPROTO) {
        /* FAILURE says the call did not take effect, true when nothing
         * was sent; but a query-back's FAILURE says the message's local
         * transaction did not commit, which nobody asked: UNKNOWN. */
        bool query = b.op != NULL && strcmp(b.op, "msg") == 0;
        atomic_fetch_add_explicit(&hc->refused, 1, memory_order_relaxed);
        reply(hc, id, query ? TROUPE_OUTCOME_UNKNOWN : TROUPE_OUTCOME_FAILURE,
              why, strlen(why));
        return;
    }
    long left = (long)(deadline - now_unix_ms());
    hc_req *r = e == TROUPE_OK ? troupe_calloc(1, sizeof(*r)) : NULL;
    if (r == NULL || left <= 0) {
        /* no memory (UNKNOWN: a retry may find some), or the deadline
         * passed already (the dispatch refuses the reply: counted late) */
        troupe__httpcall_url_free(url);
        troupe_free(r);
        reply(hc, id, TROUPE_OUTCOME_UNKNOWN, NULL, 0);
        return;
    }
    r->hc = hc;
    r->id = id;
    r->url = url;
    r->body_len = b.get ? 0 : b.body_len;
    bool ok =
        (r->body_len == 0 || (r->body = troupe_malloc(r->body_len)) != NULL) &&
        (r->easy = curl_easy_init()) != NULL;
    if (ok && r->body_len > 0)
        memcpy(r->body, b.body, r->body_len);
    if (!ok || !req_setup(r, &b, left) ||
        curl_multi_add_handle(hc->multi, r->easy) != CURLM_OK) {
        troupe_log(hc->log, TROUPE_LOG_WARN, SYS,
                   "task %llu: libcurl refused the transfer",
                   (unsigned long long)id);
        req_free(r);
        reply(hc, id, TROUPE_OUTCOME_UNKNOWN, NULL, 0);
        return;
    }
    r->next = hc->reqs;
    if (hc->reqs != NULL)
        hc->reqs->prev = r;
    hc->reqs = r;
    hc->n_reqs++;
    atomic_fetch_add_explicit(&hc->requests, 1, memory_order_relaxed);
    uint32_t now =
        atomic_fetch_add_explicit(&hc->in_flight, 1, memory_order_relaxed) + 1;
    if (now > atomic_load_explicit(&hc->in_flight_max, memory_order_relaxed))
        atomic_store_explicit(&hc->in_flight_max, now, memory_order_relaxed);
}

static void
api_free(hc_api *a)
{
    troupe_free(a->url);
    troupe_free(a->body);
    troupe_free(a->ctype);
    troupe_free(a);
}

/* A queued request's transfer options; false when libcurl refuses one. */
static bool
api_setup(hc_req *r, const hc_api *a)
{
    CURL *e = r->easy;
    bool ok =
        curl_easy_setopt(e, CURLOPT_URL, r->url) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PRIVATE, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PROXY, "") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)a->timeout_ms) ==
            CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->err) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_USERAGENT, "troupe") == CURLE_OK;
    if (!ok)
        return false;
    if (strcmp(a->method, "GET") == 0)
        return curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK;
    if (strcmp(a->method, "POST") != 0 &&
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, a->method) != CURLE_OK)
        return false;
    char ct[300];
    snprintf(ct, sizeof(ct), "Content-Type: %s",
             a->ctype ? a->ctype : "application/json");
    struct curl_slist *h = curl_slist_append(NULL, ct);
    struct curl_slist *h2 = h ? curl_slist_append(h, "Expect:") : NULL;
    if (h2 == NULL) {
        curl_slist_free_all(h);
        return false;
    }
    r->headers = h2;
    static const char empty[1] = {0};
    return curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers) == CURLE_OK &&
           curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                            (curl_off_t)r->body_len) == CURLE_OK &&
           curl_easy_setopt(e, CURLOPT_POSTFIELDS,
                            r->body ? (const char *)r->body : empty) ==
               CURLE_OK;
}

/* One queued request to a transfer; a's url and body move to it. On
 * failure its callback fires here (ENOMEM: nothing was sent). */
static void
api_start(troupe_httpcall *hc, hc_api *a)
{
    hc_req *r = troupe_calloc(1, sizeof(*r));
    if (r == NULL) {
        a->cb(a->arg, TROUPE_ENOMEM, 0, NULL, 0);
        api_free(a);
        api_release(hc);
        return;
    }
    r->hc = hc;
    r->cb = a->cb;
    r->cb_arg = a->arg;
    r->url = a->url;
    r->body = a->body;
    r->body_len = a->len;
    a->url = NULL;
    a->body = NULL;
    bool ok = (r->easy = curl_easy_init()) != NULL && api_setup(r, a) &&
              curl_multi_add_handle(hc->multi, r->easy) == CURLM_OK;
    if (!ok) {
        troupe__http_cb cb = a->cb;
        void *arg = a->arg;
        req_free(r);
        api_free(a);
        cb(arg, TROUPE_ENOMEM, 0, NULL, 0);
        api_release(hc);
        return;
    }
    api_free(a);
    r->next = hc->reqs;
    if (hc->reqs != NULL)
        hc->reqs->prev = r;
    hc->reqs = r;
}

static void
on_api(uv_async_t *as)
{
    troupe_httpcall *hc = as->data;
    pthread_mutex_lock(&hc->api_mu);
    hc_api *a = hc->api_head;
    hc->api_head = hc->api_tail = NULL;
    pthread_mutex_unlock(&hc->api_mu);
    while (a != NULL) {
        hc_api *next = a->next;
        if (hc->stopping) {
            a->cb(a->arg, TROUPE_ECLOSED, 0, NULL, 0);
            api_free(a);
            api_release(hc);
        } else {
            api_start(hc, a);
        }
        a = next;
    }
}

static void
on_wake(uv_poll_t *p, int status, int events)
{
    drain(p->data);
}

/* Pulls while requests are fewer than credit (see the invariants). */
static void
drain(troupe_httpcall *hc)
{
    if (hc->host == NULL)
        return; /* a request-only object (troupe__http_open) */
    while (!hc->stopping && hc->n_reqs < hc->credit) {
        size_t len = 0;
        troupe_err e = troupe_host_next(hc->host, 0, hc->rec, RECORD_CAP, &len);
        if (e == TROUPE_ECLOSED)
            break;
        if (e != TROUPE_OK) {
            troupe_log(hc->log, TROUPE_LOG_WARN, SYS, "pull: %s",
                       troupe_err_name(e));
            break;
        }
        if (len == 0)
            break;
        take(hc, hc->rec, len);
    }
    bool want = !hc->stopping && hc->n_reqs < hc->credit;
    if (want && !hc->wake_on)
        uv_poll_start(&hc->wake, UV_READABLE, on_wake);
    else if (!want && hc->wake_on)
        uv_poll_stop(&hc->wake);
    hc->wake_on = want;
}

/* The transfers libcurl says are done: verdict, reply, pull again. */
static void
reap(troupe_httpcall *hc)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(hc->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        hc_req *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        CURLcode rc = m->data.result;
        if (r->cb != NULL) {
            long status = 0;
            troupe_err e = TROUPE_OK;
            if (r->capped)
                e = TROUPE_ETOOBIG;
            else if (rc == CURLE_OPERATION_TIMEDOUT)
                e = TROUPE_ETIMEDOUT;
            else if (rc == CURLE_OUT_OF_MEMORY)
                e = TROUPE_ENOMEM;
            else if (rc != CURLE_OK)
                e = TROUPE_EUNREACHABLE;
            else
                curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
            if (e != TROUPE_OK && e != TROUPE_ETOOBIG && hc->log != NULL)
                troupe_log(hc->log, TROUPE_LOG_DEBUG, SYS, "%s: %s", r->url,
                           r->err[0] ? r->err : curl_easy_strerror(rc));
            api_finish(r, e, status);
            continue;
        }
        if (rc != CURLE_OK) {
            const char *t = r->err[0] ? r->err : curl_easy_strerror(rc);
            finish(r, TROUPE_OUTCOME_UNKNOWN, t, strlen(t));
            continue;
        }
        long status = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
        if (r->capped)
            atomic_fetch_add_explicit(&hc->capped, 1, memory_order_relaxed);
        finish(r, troupe__httpcall_verdict(status, &r->scan), r->resp,
               r->resp_len);
    }
    drain(hc);
}

static void
on_sock_event(uv_poll_t *p, int status, int events)
{
    hc_sock *k = p->data;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running;
    curl_multi_socket_action(k->hc->multi, k->fd, flags, &running);
    reap(k->hc);
}

static void
sock_closed(uv_handle_t *h)
{
    troupe_free(h->data);
}

static int
on_curl_socket(CURL *easy, curl_socket_t s, int what, void *arg, void *sockp)
{
    troupe_httpcall *hc = arg;
    hc_sock *k = sockp;
    if (what == CURL_POLL_REMOVE) {
        if (k != NULL) {
            uv_close((uv_handle_t *)&k->poll, sock_closed);
            curl_multi_assign(hc->multi, s, NULL);
        }
        return 0;
    }
    if (k == NULL) {
        k = troupe_calloc(1, sizeof(*k));
        if (k == NULL)
            return -1; /* libcurl fails the transfer: UNKNOWN */
        if (uv_poll_init_socket(&hc->loop, &k->poll, s) != 0) {
            troupe_free(k);
            return -1;
        }
        k->fd = s;
        k->hc = hc;
        k->poll.data = k;
        curl_multi_assign(hc->multi, s, k);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&k->poll, ev, on_sock_event);
    return 0;
}

static void
on_timeout(uv_timer_t *t)
{
    troupe_httpcall *hc = t->data;
    int running;
    curl_multi_socket_action(hc->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    reap(hc);
}

static int
on_curl_timer(CURLM *multi, long ms, void *arg)
{
    troupe_httpcall *hc = arg;
    if (ms < 0)
        uv_timer_stop(&hc->timer);
    else
        uv_timer_start(&hc->timer, on_timeout, (uint64_t)ms, 0);
    return 0;
}

static void
close_any(uv_handle_t *h, void *arg)
{
    troupe_httpcall *hc = arg;
    if (uv_is_closing(h))
        return;
    bool own = h == (uv_handle_t *)&hc->wake ||
               h == (uv_handle_t *)&hc->timer ||
               h == (uv_handle_t *)&hc->stop_async ||
               h == (uv_handle_t *)&hc->api_async;
    uv_close(h, own ? NULL : sock_closed);
}

/* The stop, on the loop: every request answered UNKNOWN, libcurl's
 * handles freed, the loop's handles closed so that uv_run returns. */
static void
on_stop(uv_async_t *a)
{
    troupe_httpcall *hc = a->data;
    hc->stopping = true;
    static const char why[] = "httpcall: stopped with the request in flight";
    while (hc->reqs != NULL) {
        if (hc->reqs->cb != NULL)
            api_finish(hc->reqs, TROUPE_ECLOSED, 0);
        else
            finish(hc->reqs, TROUPE_OUTCOME_UNKNOWN, why, sizeof(why) - 1);
    }
    /* api_closed was set before this ran: nothing queues after this */
    on_api(&hc->api_async);
    /* may call on_curl_socket to drop sockets of cached connections */
    curl_multi_cleanup(hc->multi);
    hc->multi = NULL;
    uv_walk(&hc->loop, close_any, hc);
}

static void *
loop_main(void *arg)
{
    troupe_httpcall *hc = arg;
    uv_run(&hc->loop, UV_RUN_DEFAULT);
    return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

/* Process-wide and never undone: other users of libcurl in the process
 * may need it, and curl_global_cleanup is not safe while they run. */
static void
curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The loop, its handles and the multi handle; on error nothing stays. */
static troupe_err
loop_init(troupe_httpcall *hc)
{
    if (uv_loop_init(&hc->loop) != 0)
        return TROUPE_ESYS;
    hc->multi = curl_multi_init();
    if (hc->multi == NULL ||
        (hc->host != NULL &&
         uv_poll_init(&hc->loop, &hc->wake, troupe_host_wake_fd(hc->host)) !=
             0) ||
        uv_timer_init(&hc->loop, &hc->timer) != 0 ||
        uv_async_init(&hc->loop, &hc->stop_async, on_stop) != 0 ||
        uv_async_init(&hc->loop, &hc->api_async, on_api) != 0) {
        if (hc->multi != NULL)
            curl_multi_cleanup(hc->multi);
        uv_walk(&hc->loop, close_any, hc);
        uv_run(&hc->loop, UV_RUN_DEFAULT);
        uv_loop_close(&hc->loop);
        return TROUPE_ESYS;
    }
    hc->wake.data = hc;
    hc->timer.data = hc;
    hc->stop_async.data = hc;
    hc->api_async.data = hc;
    curl_multi_setopt(hc->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(hc->multi, CURLMOPT_SOCKETDATA, hc);
    curl_multi_setopt(hc->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(hc->multi, CURLMOPT_TIMERDATA, hc);
    /* A task submitted before the thread runs wrote the fd: the poll
     * sees it once the loop runs. */
    if (hc->host != NULL) {
        uv_poll_start(&hc->wake, UV_READABLE, on_wake);
        hc->wake_on = true;
    }
    return TROUPE_OK;
}

static void
target_stopped(troupe_target *t, void *arg)
{
}

static troupe_err
opts_check(const troupe_httpcall_opts *o, troupe_httpcall_opts *out)
{
    troupe_httpcall_opts d = {0};
    if (o != NULL)
        d = *o;
    if (d.target == NULL)
        d.target = TROUPE_HTTPCALL_TARGET_DEFAULT;
    if (d.credit == 0)
        d.credit = TROUPE_TARGET_CREDIT_DEFAULT;
    if (d.body_max == 0)
        d.body_max = TROUPE_HTTPCALL_BODY_MAX_DEFAULT;
    if (d.credit > TROUPE_TARGET_CREDIT_MAX ||
        d.body_max > TROUPE_HTTPCALL_BODY_MAX_MAX)
        return TROUPE_EINVAL;
    *out = d;
    return TROUPE_OK;
}

troupe_err
troupe_httpcall_open(troupe_runtime *rt, const troupe_httpcall_opts *o,
                     troupe_httpcall **out)
{
    troupe_httpcall_opts d;
    if (rt == NULL || out == NULL || opts_check(o, &d) != TROUPE_OK)
        return TROUPE_EINVAL;
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        troupe_log(troupe_runtime_logger(rt), TROUPE_LOG_ERROR, SYS,
                   "curl_global_init: %s", curl_easy_strerror(curl_init_rc));
        return TROUPE_ESYS;
    }
    troupe_httpcall *hc = troupe_calloc(1, sizeof(*hc));
    if (hc == NULL)
        return TROUPE_ENOMEM;
    hc->rt = rt;
    hc->log = troupe_runtime_logger(rt);
    hc->credit = d.credit;
    hc->body_max = d.body_max;
    pthread_mutex_init(&hc->api_mu, NULL);
    hc->rec = troupe_malloc(RECORD_CAP);
    troupe_err e =
        hc->rec ? troupe_host_open(rt, NULL, &hc->host) : TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        troupe_target_opts to = {.name = d.target,
                                 .host = hc->host,
                                 .credit = d.credit,
                                 .timeout_ms = d.timeout_ms};
        e = troupe_target_create(rt, &to, &hc->target);
    }
    if (e == TROUPE_OK)
        e = loop_init(hc);
    if (e == TROUPE_OK &&
        pthread_create(&hc->thread, NULL, loop_main, hc) != 0) {
        /* the loop never ran: close what loop_init made, here */
        uv_close((uv_handle_t *)&hc->stop_async, NULL);
        hc->stopping = true;
        curl_multi_cleanup(hc->multi);
        uv_walk(&hc->loop, close_any, hc);
        uv_run(&hc->loop, UV_RUN_DEFAULT);
        uv_loop_close(&hc->loop);
        e = TROUPE_ESYS;
    }
    if (e != TROUPE_OK) {
        /* The host's close settles what it holds, so the target's stop
         * completes at once, here (open never blocks). */
        if (hc->host != NULL)
            troupe_host_close(hc->host);
        if (hc->target != NULL) {
            troupe_target_stop(hc->target, target_stopped, NULL);
            troupe_target_destroy(hc->target);
        }
        troupe_host_destroy(hc->host);
        troupe_free(hc->rec);
        pthread_mutex_destroy(&hc->api_mu);
        troupe_free(hc);
        return e;
    }
    *out = hc;
    return TROUPE_OK;
}

troupe_err
troupe__http_open(const troupe_logger *log, uint32_t body_max,
                  troupe_httpcall **out)
{
    if (out == NULL || body_max > TROUPE_HTTPCALL_BODY_MAX_MAX)
        return TROUPE_EINVAL;
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        troupe_log(log, TROUPE_LOG_ERROR, SYS, "curl_global_init: %s",
                   curl_easy_strerror(curl_init_rc));
        return TROUPE_ESYS;
    }
    troupe_httpcall *hc = troupe_calloc(1, sizeof(*hc));
    if (hc == NULL)
        return TROUPE_ENOMEM;
    hc->log = log;
    hc->body_max = body_max ? body_max : TROUPE_HTTPCALL_BODY_MAX_DEFAULT;
    pthread_mutex_init(&hc->api_mu, NULL);
    troupe_err e = loop_init(hc);
    if (e == TROUPE_OK &&
        pthread_create(&hc->thread, NULL, loop_main, hc) != 0) {
        hc->stopping = true;
        curl_multi_cleanup(hc->multi);
        uv_walk(&hc->loop, close_any, hc);
        uv_run(&hc->loop, UV_RUN_DEFAULT);
        uv_loop_close(&hc->loop);
        e = TROUPE_ESYS;
    }
    if (e != TROUPE_OK) {
        pthread_mutex_destroy(&hc->api_mu);
        troupe_free(hc);
        return e;
    }
    *out = hc;
    return TROUPE_OK;
}

static const char *const methods[] = {"GET", "POST", "PUT", "DELETE"};

troupe_err
troupe__http_request(troupe_httpcall *hc, const troupe__http_req *rq,
                     troupe__http_cb cb, void *arg)
{
    if (hc == NULL || rq == NULL || rq->url == NULL || rq->method == NULL ||
        cb == NULL || rq->timeout_ms == 0 || (rq->body == NULL && rq->len) ||
        rq->len > TROUPE__HTTP_BODY_MAX)
        return TROUPE_EINVAL;
    size_t ul = strnlen(rq->url, TROUPE_HTTPCALL_URL_MAX + 1);
    if (ul == 0 || ul > TROUPE_HTTPCALL_URL_MAX)
        return TROUPE_EINVAL;
    bool known = false;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        known = known || strcmp(rq->method, methods[i]) == 0;
    if (!known || (rq->content_type != NULL &&
                   (strlen(rq->content_type) > 200 ||
                    strpbrk(rq->content_type, "\r\n") != NULL)))
        return TROUPE_EINVAL;
    hc_api *a = troupe_calloc(1, sizeof(*a));
    if (a == NULL)
        return TROUPE_ENOMEM;
    snprintf(a->method, sizeof(a->method), "%s", rq->method);
    a->url = troupe_malloc(ul + 1);
    a->len = rq->len;
    a->body = rq->len ? troupe_malloc(rq->len) : NULL;
    a->ctype =
        rq->content_type ? troupe_malloc(strlen(rq->content_type) + 1) : NULL;
    if (a->url == NULL || (rq->len && a->body == NULL) ||
        (rq->content_type && a->ctype == NULL)) {
        api_free(a);
        return TROUPE_ENOMEM;
    }
    memcpy(a->url, rq->url, ul + 1);
    if (rq->len)
        memcpy(a->body, rq->body, rq->len);
    if (a->ctype)
        strcpy(a->ctype, rq->content_type);
    a->timeout_ms = rq->timeout_ms;
    a->cb = cb;
    a->arg = arg;
    pthread_mutex_lock(&hc->api_mu);
    troupe_err e = TROUPE_OK;
    if (hc->api_closed)
        e = TROUPE_ECLOSED;
    else if (hc->api_n >= TROUPE__HTTP_PENDING_MAX)
        e = TROUPE_EFULL;
    if (e == TROUPE_OK) {
        hc->api_n++;
        if (hc->api_tail != NULL)
            hc->api_tail->next = a;
        else
            hc->api_head = a;
        hc->api_tail = a;
        /* under the lock: the stop cannot close the async before this */
        uv_async_send(&hc->api_async);
    }
    pthread_mutex_unlock(&hc->api_mu);
    if (e != TROUPE_OK)
        api_free(a);
    return e;
}

bool
troupe__http_on_thread(const troupe_httpcall *hc)
{
    return hc != NULL && atomic_load(&hc->state) == HC_RUNNING &&
           pthread_equal(pthread_self(), hc->thread);
}

troupe_err
troupe_httpcall_stop_wait(troupe_httpcall *hc)
{
    if (hc == NULL)
        return TROUPE_EINVAL;
    troupe_err e = troupe__block_check("troupe_httpcall_stop_wait");
    if (e != TROUPE_OK)
        return e;
    if (pthread_equal(pthread_self(), hc->thread))
        return TROUPE_EDEADLK;
    int running = HC_RUNNING;
    if (!atomic_compare_exchange_strong(&hc->state, &running, HC_STOPPED))
        return TROUPE_ESTATE;
    pthread_mutex_lock(&hc->api_mu);
    hc->api_closed = true;
    pthread_mutex_unlock(&hc->api_mu);
    uv_async_send(&hc->stop_async);
    pthread_join(hc->thread, NULL);
    uv_loop_close(&hc->loop);
    if (hc->host == NULL)
        return TROUPE_OK; /* request-only: no target, no endpoint */
    /* No task is in our hands now; those still queued settle UNKNOWN. */
    e = troupe_target_stop_wait(hc->target);
    if (e != TROUPE_OK)
        troupe_log(hc->log, TROUPE_LOG_WARN, SYS, "target stop: %s",
                   troupe_err_name(e));
    e = troupe_host_close(hc->host);
    if (e != TROUPE_OK)
        troupe_log(hc->log, TROUPE_LOG_WARN, SYS, "host close: %s",
                   troupe_err_name(e));
    return TROUPE_OK;
}

void
troupe_httpcall_destroy(troupe_httpcall *hc)
{
    if (hc == NULL)
        return;
    if (atomic_load(&hc->state) != HC_STOPPED) {
        fprintf(stderr, "troupe: httpcall_destroy of one not stopped\n");
        abort();
    }
    if (hc->target != NULL)
        troupe_target_destroy(hc->target);
    troupe_host_destroy(hc->host);
    troupe_free(hc->rec);
    pthread_mutex_destroy(&hc->api_mu);
    troupe_free(hc);
}

void
troupe_httpcall_stats_get(const troupe_httpcall *hc, troupe_httpcall_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (hc == NULL)
        return;
    troupe_httpcall *m = (troupe_httpcall *)hc;
    out->requests = atomic_load_explicit(&m->requests, memory_order_relaxed);
    for (int i = 0; i < 5; i++)
        out->answered[i] =
            atomic_load_explicit(&m->answered[i], memory_order_relaxed);
    out->refused = atomic_load_explicit(&m->refused, memory_order_relaxed);
    out->capped = atomic_load_explicit(&m->capped, memory_order_relaxed);
    out->late = atomic_load_explicit(&m->late, memory_order_relaxed);
    out->in_flight = atomic_load_explicit(&m->in_flight, memory_order_relaxed);
    out->in_flight_max =
        atomic_load_explicit(&m->in_flight_max, memory_order_relaxed);
}

troupe_target *
troupe_httpcall_target(const troupe_httpcall *hc)
{
    return hc ? hc->target : NULL;
}
