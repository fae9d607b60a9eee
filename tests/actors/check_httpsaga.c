/*
 * Sagas whose branches are http calls, end to end: the coordinator
 * (actors/coord) on a real database dispatches each branch to the target
 * "http" that actors/httpcall serves, which calls a real HTTP server on
 * loopback (nng's, in this process). What the rules are is check_coord's
 * and check_httpcall's; this suite shows the two agree on the task (the
 * header the coordinator writes is the one httpcall reads, the payload
 * troupe_httpcall_payload_pack makes reaches the server) and that a
 * verdict drives the saga.
 */
#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tnode.h"
#include "troupe/coordinator.h"
#include "troupe/httpcall.h"
#include "troupe/pack.h"
#include "tsupport.h"

#define LOG_MAX 32

static struct {
    tnode node;
    troupe_httpcall *hc;
    troupe_coord *coord;
    nng_http_server *srv;
    int port;
    pthread_mutex_t mu;
    char log[LOG_MAX][160]; /* "METHOD path?query body", in arrival order */
    int n_log;
} hs;

static void
handle(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    const char *uri = nng_http_req_get_uri(req);
    void *d = NULL;
    size_t n = 0;
    nng_http_req_get_data(req, &d, &n);
    pthread_mutex_lock(&hs.mu);
    if (hs.n_log < LOG_MAX)
        snprintf(hs.log[hs.n_log++], sizeof(hs.log[0]), "%s %s %.*s",
                 nng_http_req_get_method(req), uri, (int)n, (char *)d);
    pthread_mutex_unlock(&hs.mu);
    bool no = strncmp(uri, "/no?", 4) == 0;
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0)
        rv = nng_http_res_set_status(res, no ? 409 : 200);
    if (rv == 0)
        rv = nng_http_res_copy_data(res, no ? "no" : "{}", 2);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void
setup(void)
{
    memset(&hs, 0, sizeof(hs));
    pthread_mutex_init(&hs.mu, NULL);
    nng_url *u = NULL;
    nng_http_handler *h = NULL;
    ck_assert_int_eq(nng_url_parse(&u, "http://127.0.0.1:0"), 0);
    ck_assert_int_eq(nng_http_server_hold(&hs.srv, u), 0);
    ck_assert_int_eq(nng_http_handler_alloc(&h, "/", handle), 0);
    ck_assert_int_eq(nng_http_handler_set_method(h, NULL), 0);
    ck_assert_int_eq(nng_http_handler_set_tree(h), 0);
    ck_assert_int_eq(nng_http_handler_collect_body(h, true, 65536), 0);
    ck_assert_int_eq(nng_http_server_add_handler(hs.srv, h), 0);
    ck_assert_int_eq(nng_http_server_start(hs.srv), 0);
    nng_sockaddr sa;
    ck_assert_int_eq(nng_http_server_get_addr(hs.srv, &sa), 0);
    hs.port = ntohs(sa.s_in.sa_port);
    nng_url_free(u);

    troupe_runtime_opts o = {.workers = 2, .host_workers = 2};
    tnode_open(&hs.node, "httpsaga", &o);
    ck_assert_ok(troupe_httpcall_open(hs.node.rt, NULL, &hs.hc));
    troupe_coord_opts co = {.rt = hs.node.rt,
                            .tables = hs.node.tables,
                            .shards = 2,
                            .retry_min_ms = 60000,
                            .retry_max_ms = 60000};
    ck_assert_ok(troupe_coord_open_wait(&co, &hs.coord));
}

static void
teardown(void)
{
    ck_assert_ok(troupe_coord_stop_wait(hs.coord));
    troupe_coord_destroy(hs.coord);
    ck_assert_ok(troupe_httpcall_stop_wait(hs.hc));
    troupe_httpcall_destroy(hs.hc);
    tnode_close(&hs.node);
    nng_http_server_stop(hs.srv);
    nng_http_server_release(hs.srv);
    pthread_mutex_destroy(&hs.mu);
}

/* A payload [url, body] for path on the server, into p (init'ed here). */
static troupe_gtx_call
call_to(troupe_packer *p, const char *path, const char *body)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", hs.port, path);
    troupe_pack_init(p);
    ck_assert_ok(troupe_httpcall_payload_pack(p, url, body, strlen(body)));
    troupe_gtx_call c = {.target = TROUPE_HTTPCALL_TARGET_DEFAULT};
    c.payload = troupe_pack_data(p, &c.payload_len);
    return c;
}

static bool
final_pred(void *arg)
{
    troupe_gtx_info in;
    const char *gid = arg;
    if (troupe_gtx_query_wait(hs.coord, gid, strlen(gid), &in) != TROUPE_OK)
        return false;
    return in.status == TROUPE_GTX_SUCCEED || in.status == TROUPE_GTX_FAILED;
}

static troupe_gtx_info
run_saga(const char *gid, const char *second_action)
{
    troupe_packer p[4];
    troupe_saga_step steps[2] = {
        {call_to(&p[0], "/out", "{\"amount\":30}"),
         call_to(&p[1], "/out-undo", "{\"amount\":30}")},
        {call_to(&p[2], second_action, "{\"amount\":30}"),
         call_to(&p[3], "/in-undo", "{\"amount\":30}")}};
    ck_assert_ok(
        troupe_saga_submit_wait(hs.coord, gid, strlen(gid), steps, 2, NULL));
    for (int i = 0; i < 4; i++)
        troupe_pack_fini(&p[i]);
    ck_assert_msg(ts_wait_until(final_pred, (void *)gid, 10000),
                  "%s did not end", gid);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(hs.coord, gid, strlen(gid), &in));
    return in;
}

static void
assert_log(int n, const char *const *want)
{
    pthread_mutex_lock(&hs.mu);
    int got = hs.n_log;
    for (int i = 0; i < n && i < got; i++)
        ck_assert_str_eq(hs.log[i], want[i]);
    pthread_mutex_unlock(&hs.mu);
    ck_assert_int_eq(got, n);
}

START_TEST(test_http_saga_succeeds_calls_in_order)
{
    troupe_gtx_info in = run_saga("h-ok", "/in");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    static const char *const want[] = {
        "POST /out?gid=h-ok&trans_type=saga&branch_id=01&op=action "
        "{\"amount\":30}",
        "POST /in?gid=h-ok&trans_type=saga&branch_id=02&op=action "
        "{\"amount\":30}"};
    assert_log(2, want);
}
END_TEST

START_TEST(test_http_409_fails_the_saga_compensates_in_reverse)
{
    troupe_gtx_info in = run_saga("h-no", "/no");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "branch 02 action: FAILURE");
    static const char *const want[] = {
        "POST /out?gid=h-no&trans_type=saga&branch_id=01&op=action "
        "{\"amount\":30}",
        "POST /no?gid=h-no&trans_type=saga&branch_id=02&op=action "
        "{\"amount\":30}",
        "POST /in-undo?gid=h-no&trans_type=saga&branch_id=02&op=compensate "
        "{\"amount\":30}",
        "POST /out-undo?gid=h-no&trans_type=saga&branch_id=01&op=compensate "
        "{\"amount\":30}"};
    assert_log(4, want);
}
END_TEST

/* A message never submitted is queried back over http once its grace
 * passed: the GET carries the query-back's own url (its payload, kept at
 * prepare), and its SUCCESS drives the step. */
START_TEST(test_http_query_back_of_a_message_drives_its_step)
{
    troupe_packer p[2];
    troupe_gtx_call step = call_to(&p[0], "/step", "{\"n\":1}");
    troupe_gtx_call query = call_to(&p[1], "/query", "");
    ck_assert_ok(
        troupe_msg_prepare_wait(hs.coord, "h-m", 3, &step, 1, &query, 50));
    troupe_pack_fini(&p[0]);
    troupe_pack_fini(&p[1]);
    ck_assert_msg(ts_wait_until(final_pred, (void *)"h-m", 10000),
                  "h-m did not end");
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(hs.coord, "h-m", 3, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    static const char *const want[] = {
        "GET /query?gid=h-m&trans_type=msg&branch_id=00&op=msg ",
        "POST /step?gid=h-m&trans_type=msg&branch_id=01&op=action "
        "{\"n\":1}"};
    assert_log(2, want);
}
END_TEST

Suite *
httpsaga_suite(void)
{
    Suite *s = suite_create("httpsaga");
    TCase *tc = tcase_create("httpsaga");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_http_saga_succeeds_calls_in_order);
    tcase_add_test(tc, test_http_409_fails_the_saga_compensates_in_reverse);
    tcase_add_test(tc, test_http_query_back_of_a_message_drives_its_step);
    suite_add_tcase(s, tc);
    return s;
}
