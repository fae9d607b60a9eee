/*
 * actors/cluster's etcd client (troupe/etcd.h): the codec fed hostile
 * answers byte for byte; then against a real single-member etcd (its URL
 * in $TROUPE_ETCD: tests/cluster/with_etcd.sh starts one) every
 * operation, the compare-and-set racing itself, a lease's keys going with
 * it; and against a canned server on loopback (a thread that answers
 * every connection with fixed bytes, or holds it silent): garbage and
 * oversized answers, the timeout, a stop with requests in flight,
 * failover to the next endpoint.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "troupe/etcd.h"
#include "troupe/internal/etcd.h"
#include "troupe/map.h"
#include "troupe/member.h"
#include "troupe/runtime.h"
#include "tsupport.h"

/* ---- the codec ------------------------------------------------------------
 */

START_TEST(test_b64_every_length_roundtrips)
{
    uint8_t in[64], dec[64];
    char enc[100];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(i * 37 + 255);
    for (size_t n = 0; n <= sizeof(in); n++) {
        troupe__etcd_b64_encode(in, n, enc);
        ck_assert_uint_eq(strlen(enc), 4 * ((n + 2) / 3));
        size_t got = 0;
        ck_assert_err(troupe__etcd_b64_decode(enc, strlen(enc), dec, &got),
                      TROUPE_OK);
        ck_assert_uint_eq(got, n);
        ck_assert(memcmp(in, dec, n) == 0);
    }
    troupe__etcd_b64_encode((const uint8_t *)"foo", 3, enc);
    ck_assert_str_eq(enc, "Zm9v");
}
END_TEST

START_TEST(test_b64_malformed_refused)
{
    static const char *const bad[] = {
        "Zm9",  "Zm9v=", "Zm=v", "Z===",     "Zm9-", "Zm9v\nAA",
        "Zh==", "Zm9w=", "=AAA", "Zm==Zm9v", "Zg=A"};
    uint8_t out[16];
    size_t n;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(troupe__etcd_b64_decode(bad[i], strlen(bad[i]), out,
                                              &n) == TROUPE_EPROTO,
                      "'%s' decoded", bad[i]);
}
END_TEST

static troupe_err
parse(troupe__etcd_op op, long status, const char *body, troupe_etcd_result *r)
{
    char why[200];
    troupe_err e = troupe__etcd_parse(op, status, (const uint8_t *)body,
                                      strlen(body), r, why, sizeof(why));
    if (e != TROUPE_OK)
        ck_assert_msg(why[0] != 0, "no reason for %s", body);
    return e;
}

#define HDR "\"header\":{\"revision\":\"7\"}"

START_TEST(test_parse_hostile_answers_are_errors)
{
    static const struct {
        troupe__etcd_op op;
        long status;
        const char *body;
        troupe_err want;
    } cases[] = {
        {TROUPE__ETCD_PUT, 200, "", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "not json", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "[1,2]", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{}", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{\"header\":5}", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{\"header\":{\"revision\":true}}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{\"header\":{\"revision\":\"12a\"}}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{\"header\":{\"revision\":\"-3\"}}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200,
         "{\"header\":{\"revision\":\"99999999999999999999\"}}", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{\"header\":{}}", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 500, "<html>oops</html>", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 500, "{\"message\":\"x\"}", TROUPE_EPROTO},
        {TROUPE__ETCD_PUT, 200, "{" HDR ",\"code\":\"x\"}", TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200, "{" HDR ",\"kvs\":{}}", TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200, "{" HDR ",\"kvs\":[5],\"count\":\"1\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200,
         "{" HDR ",\"kvs\":[{\"key\":\"!!!!\"}],\"count\":\"1\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200,
         "{" HDR ",\"kvs\":[{\"key\":\"\"}],\"count\":\"1\"}", TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200,
         "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"value\":7}],\"count\":\"1\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200,
         "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"mod_revision\":\"x\"}],"
         "\"count\":\"1\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200,
         "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\"},{\"key\":\"Zm9w\"}],"
         "\"count\":\"1\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_RANGE, 200, "{" HDR ",\"more\":\"yes\"}", TROUPE_EPROTO},
        {TROUPE__ETCD_TXN, 200, "{" HDR ",\"succeeded\":\"true\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_GRANT, 200, "{" HDR "}", TROUPE_EPROTO},
        {TROUPE__ETCD_GRANT, 200, "{" HDR ",\"ID\":\"5\",\"TTL\":\"-1\"}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_KEEPALIVE, 200, "{" HDR ",\"TTL\":\"5\"}", TROUPE_EPROTO},
        {TROUPE__ETCD_KEEPALIVE, 200, "{\"result\":{" HDR ",\"ID\":\"5\"}}",
         TROUPE_ENOENT},
        {TROUPE__ETCD_KEEPALIVE, 200,
         "{\"error\":{\"grpc_code\":14,\"http_code\":503,"
         "\"message\":\"etcdserver: no leader\"}}",
         TROUPE_EUNREACHABLE},
        {TROUPE__ETCD_KEEPALIVE, 200, "{\"error\":{\"grpc_code\":\"x\"}}",
         TROUPE_EPROTO},
        {TROUPE__ETCD_REVOKE, 404,
         "{\"error\":\"x\",\"code\":5,\"message\":\"lease not found\"}",
         TROUPE_ENOENT},
        {TROUPE__ETCD_PUT, 400, "{\"code\":3,\"message\":\"bad\"}",
         TROUPE_EINVAL},
        {TROUPE__ETCD_PUT, 503, "{\"code\":14,\"message\":\"no leader\"}",
         TROUPE_EUNREACHABLE},
        {TROUPE__ETCD_PUT, 500, "{\"code\":13,\"message\":\"internal\"}",
         TROUPE_EIO},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        troupe_etcd_result r;
        troupe_err e = parse(cases[i].op, cases[i].status, cases[i].body, &r);
        ck_assert_msg(e == cases[i].want, "case %zu (%s): got %s want %s", i,
                      cases[i].body, troupe_err_name(e),
                      troupe_err_name(cases[i].want));
        ck_assert_ptr_null(r.mem_); /* nothing kept on an error */
    }
}
END_TEST

START_TEST(test_parse_good_answers_are_read)
{
    troupe_etcd_result r;
    ck_assert_err(
        parse(TROUPE__ETCD_RANGE, 200,
              "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"value\":\"AP8=\","
              "\"create_revision\":\"2\",\"mod_revision\":\"5\","
              "\"version\":\"3\",\"lease\":\"77\"},{\"key\":\"Zm9w\"}],"
              "\"count\":\"3\",\"more\":true}",
              &r),
        TROUPE_OK);
    ck_assert_int_eq(r.revision, 7);
    ck_assert_uint_eq(r.n, 2);
    ck_assert(r.more);
    ck_assert_uint_eq(r.kvs[0].key_len, 3);
    ck_assert(memcmp(r.kvs[0].key, "foo", 4) == 0);
    ck_assert_uint_eq(r.kvs[0].value_len, 2);
    ck_assert_uint_eq(r.kvs[0].value[0], 0);
    ck_assert_uint_eq(r.kvs[0].value[1], 0xff);
    ck_assert_int_eq(r.kvs[0].mod_revision, 5);
    ck_assert_int_eq(r.kvs[0].lease, 77);
    ck_assert_uint_eq(r.kvs[1].value_len, 0);
    troupe_etcd_result_fini(&r);
    ck_assert_ptr_null(r.kvs);
    ck_assert_err(parse(TROUPE__ETCD_KEEPALIVE, 200,
                        "{\"result\":{" HDR ",\"ID\":\"5\",\"TTL\":\"9\"}}\n",
                        &r),
                  TROUPE_OK);
    ck_assert_int_eq(r.ttl, 9);
    ck_assert_err(parse(TROUPE__ETCD_TXN, 200, "{" HDR "}", &r), TROUPE_OK);
    ck_assert(!r.succeeded);
    troupe_etcd_result_fini(NULL);
}
END_TEST

/* ---- against the real etcd ------------------------------------------------
 */

static troupe_etcd *
open_real(void)
{
    const char *url = getenv("TROUPE_ETCD");
    ck_assert_msg(url != NULL && url[0] != 0,
                  "TROUPE_ETCD is not set: run through "
                  "tests/cluster/with_etcd.sh (ctest does)");
    troupe_etcd_opts o = {.endpoints = url, .timeout_ms = 10000};
    troupe_etcd *c = NULL;
    ck_assert_err(troupe_etcd_open(&o, &c), TROUPE_OK);
    return c;
}

static void
close_client(troupe_etcd *c)
{
    ck_assert_err(troupe_etcd_stop_wait(c), TROUPE_OK);
    troupe_etcd_destroy(c);
}

/* A key of this test run's own, so that tests sharing one etcd never see
 * each other's keys. */
static void
key_of(char *buf, size_t n, const char *tag)
{
    snprintf(buf, n, "/test/%d/%s", (int)getpid(), tag);
}

START_TEST(test_put_get_binary_roundtrip)
{
    troupe_etcd *c = open_real();
    char k[64];
    key_of(k, sizeof(k), "bin");
    const uint8_t val[] = {0, 0xff, 'a', 0, 0x80, '\n'};
    troupe_etcd_result r;
    ck_assert_err(
        troupe_etcd_put_wait(c, k, strlen(k), val, sizeof(val), 0, &r),
        TROUPE_OK);
    int64_t rev = r.revision;
    ck_assert_int_gt(rev, 0);
    troupe_etcd_result_fini(&r);
    ck_assert_err(troupe_etcd_get_wait(c, k, strlen(k), &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_uint_eq(r.kvs[0].value_len, sizeof(val));
    ck_assert(memcmp(r.kvs[0].value, val, sizeof(val)) == 0);
    ck_assert_int_eq(r.kvs[0].mod_revision, rev);
    ck_assert_int_eq(r.kvs[0].version, 1);
    troupe_etcd_result_fini(&r);
    /* an empty value is a value, not an absent key */
    ck_assert_err(troupe_etcd_put_wait(c, k, strlen(k), NULL, 0, 0, NULL),
                  TROUPE_OK);
    ck_assert_err(troupe_etcd_get_wait(c, k, strlen(k), &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_uint_eq(r.kvs[0].value_len, 0);
    ck_assert_int_eq(r.kvs[0].version, 2);
    troupe_etcd_result_fini(&r);
    key_of(k, sizeof(k), "absent");
    ck_assert_err(troupe_etcd_get_wait(c, k, strlen(k), &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 0);
    troupe_etcd_result_fini(&r);
    close_client(c);
}
END_TEST

START_TEST(test_list_prefix_in_order_with_limit_and_delete)
{
    troupe_etcd *c = open_real();
    char pre[64], k[80];
    key_of(pre, sizeof(pre), "list/");
    /* a neighbour just past the prefix's range must not be listed */
    key_of(k, sizeof(k), "list0");
    ck_assert_err(troupe_etcd_put_wait(c, k, strlen(k), "x", 1, 0, NULL),
                  TROUPE_OK);
    const char *names[] = {"c", "a", "b", "d"};
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "%s%s", pre, names[i]);
        ck_assert_err(
            troupe_etcd_put_wait(c, k, strlen(k), names[i], 1, 0, NULL),
            TROUPE_OK);
    }
    troupe_etcd_result r;
    ck_assert_err(troupe_etcd_list_wait(c, pre, strlen(pre), 100, &r),
                  TROUPE_OK);
    ck_assert_uint_eq(r.n, 4);
    ck_assert(!r.more);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(r.kvs[i].value[0], (uint8_t)('a' + i));
    troupe_etcd_result_fini(&r);
    ck_assert_err(troupe_etcd_list_wait(c, pre, strlen(pre), 3, &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 3);
    ck_assert(r.more);
    troupe_etcd_result_fini(&r);
    ck_assert_err(troupe_etcd_delete_wait(c, pre, strlen(pre), true, &r),
                  TROUPE_OK);
    ck_assert_int_eq(r.deleted, 4);
    ck_assert_err(troupe_etcd_list_wait(c, pre, strlen(pre), 100, &r),
                  TROUPE_OK);
    ck_assert_uint_eq(r.n, 0);
    key_of(k, sizeof(k), "list0");
    ck_assert_err(troupe_etcd_delete_wait(c, k, strlen(k), false, &r),
                  TROUPE_OK);
    ck_assert_int_eq(r.deleted, 1);
    close_client(c);
}
END_TEST

START_TEST(test_cas_create_and_update_one_winner)
{
    troupe_etcd *c = open_real();
    char k[64];
    key_of(k, sizeof(k), "cas");
    troupe_etcd_result r;
    ck_assert_err(troupe_etcd_cas_wait(c, k, strlen(k), 0, "v1", 2, 0, &r),
                  TROUPE_OK);
    ck_assert(r.succeeded);
    int64_t rev1 = r.revision;
    ck_assert_err(troupe_etcd_cas_wait(c, k, strlen(k), 0, "v2", 2, 0, &r),
                  TROUPE_OK);
    ck_assert(!r.succeeded); /* it exists now */
    ck_assert_err(
        troupe_etcd_cas_wait(c, k, strlen(k), rev1 + 1000, "v2", 2, 0, &r),
        TROUPE_OK);
    ck_assert(!r.succeeded);
    ck_assert_err(troupe_etcd_cas_wait(c, k, strlen(k), rev1, "v2", 2, 0, &r),
                  TROUPE_OK);
    ck_assert(r.succeeded);
    /* the same expected revision a second time loses */
    ck_assert_err(troupe_etcd_cas_wait(c, k, strlen(k), rev1, "v3", 2, 0, &r),
                  TROUPE_OK);
    ck_assert(!r.succeeded);
    ck_assert_err(troupe_etcd_get_wait(c, k, strlen(k), &r), TROUPE_OK);
    ck_assert(r.n == 1 && memcmp(r.kvs[0].value, "v2", 2) == 0);
    troupe_etcd_result_fini(&r);
    close_client(c);
}
END_TEST

/* Async results gathered by the callbacks. */
typedef struct gather {
    _Atomic int calls;
    _Atomic int ok, won;
    _Atomic int errs[64];
} gather;

static void
on_gather(void *arg, troupe_err e, const troupe_etcd_result *r)
{
    gather *g = arg;
    if (e == TROUPE_OK) {
        ck_assert_ptr_nonnull(r);
        atomic_fetch_add(&g->ok, 1);
        if (r->succeeded)
            atomic_fetch_add(&g->won, 1);
    } else {
        ck_assert_ptr_null(r);
    }
    if ((int)e < 64)
        atomic_fetch_add(&g->errs[e], 1);
    atomic_fetch_add(&g->calls, 1);
}

typedef struct want_calls {
    gather *g;
    int n;
} want_calls;

static bool
calls_reach(void *arg)
{
    want_calls *w = arg;
    return atomic_load(&w->g->calls) >= w->n;
}

START_TEST(test_cas_racing_itself_has_one_winner)
{
    troupe_etcd *c = open_real();
    char k[64];
    key_of(k, sizeof(k), "race");
    gather g = {0};
    for (int i = 0; i < 16; i++) {
        char v[8];
        snprintf(v, sizeof(v), "n%d", i);
        ck_assert_err(
            troupe_etcd_cas(c, k, strlen(k), 0, v, strlen(v), 0, on_gather, &g),
            TROUPE_OK);
    }
    want_calls w = {&g, 16};
    ck_assert(ts_wait_until(calls_reach, &w, 20000));
    ck_assert_int_eq(atomic_load(&g.ok), 16);
    ck_assert_int_eq(atomic_load(&g.won), 1);
    close_client(c);
    ck_assert_int_eq(atomic_load(&g.calls), 16); /* once each */
}
END_TEST

START_TEST(test_lease_keys_go_with_it)
{
    troupe_etcd *c = open_real();
    char k[64];
    key_of(k, sizeof(k), "leased");
    troupe_etcd_result r;
    ck_assert_err(troupe_etcd_lease_grant_wait(c, 30, &r), TROUPE_OK);
    int64_t id = r.lease_id;
    ck_assert_int_gt(id, 0);
    ck_assert_int_eq(r.ttl, 30);
    ck_assert_err(troupe_etcd_put_wait(c, k, strlen(k), "up", 2, id, NULL),
                  TROUPE_OK);
    ck_assert_err(troupe_etcd_get_wait(c, k, strlen(k), &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_int_eq(r.kvs[0].lease, id);
    troupe_etcd_result_fini(&r);
    ck_assert_err(troupe_etcd_lease_keepalive_wait(c, id, &r), TROUPE_OK);
    ck_assert_int_eq(r.ttl, 30);
    ck_assert_err(troupe_etcd_lease_revoke_wait(c, id, NULL), TROUPE_OK);
    ck_assert_err(troupe_etcd_get_wait(c, k, strlen(k), &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_err(troupe_etcd_lease_keepalive_wait(c, id, NULL), TROUPE_ENOENT);
    ck_assert_err(troupe_etcd_lease_revoke_wait(c, id, NULL), TROUPE_ENOENT);
    /* a put under a lease that is gone: etcd's not found */
    ck_assert_err(troupe_etcd_put_wait(c, k, strlen(k), "x", 1, id, NULL),
                  TROUPE_ENOENT);
    close_client(c);
}
END_TEST

/* A wait from the client's own thread would never return. */
typedef struct nested {
    troupe_etcd *c;
    _Atomic int got;
    _Atomic int done;
} nested;

static void
on_nested(void *arg, troupe_err e, const troupe_etcd_result *r)
{
    nested *n = arg;
    atomic_store(&n->got, troupe_etcd_get_wait(n->c, "k", 1, NULL));
    atomic_store(&n->done, 1);
}

static bool
nested_done(void *arg)
{
    return atomic_load(&((nested *)arg)->done) != 0;
}

START_TEST(test_wait_on_client_thread_edeadlk)
{
    troupe_etcd *c = open_real();
    nested n = {.c = c};
    ck_assert_err(troupe_etcd_get(c, "k", 1, on_nested, &n), TROUPE_OK);
    ck_assert(ts_wait_until(nested_done, &n, 10000));
    ck_assert_err((troupe_err)atomic_load(&n.got), TROUPE_EDEADLK);
    close_client(c);
}
END_TEST

/* On a troupe scheduler thread every blocking call refuses, sending
 * nothing. */
typedef struct on_sched {
    troupe_etcd *c;
    _Atomic int get, map, member, stop, done;
} on_sched;

static void
sched_calls(void *arg, troupe_runtime *rt)
{
    on_sched *o = arg;
    troupe_member *mb = NULL;
    atomic_store(&o->get, troupe_etcd_get_wait(o->c, "k", 1, NULL));
    atomic_store(&o->map, troupe_map_assign_wait(o->c, "coord:0", 1, -1, NULL));
    atomic_store(&o->member, troupe_member_start(o->c, 7, "tcp://h:1", 5, &mb));
    atomic_store(&o->stop, troupe_etcd_stop_wait(o->c));
    atomic_store(&o->done, 1);
}

static bool
sched_done(void *arg)
{
    return atomic_load(&((on_sched *)arg)->done) != 0;
}

START_TEST(test_waits_on_a_troupe_thread_edeadlk)
{
    troupe_etcd *c = open_real();
    troupe_runtime *rt = NULL;
    troupe_runtime_opts ro = {.schedulers = 1, .workers = 1};
    ck_assert_err(troupe_runtime_create(&rt, &ro), TROUPE_OK);
    on_sched o = {.c = c};
    ck_assert_err(troupe_runtime_post(rt, sched_calls, &o), TROUPE_OK);
    ck_assert(ts_wait_until(sched_done, &o, 10000));
    ck_assert_err((troupe_err)atomic_load(&o.get), TROUPE_EDEADLK);
    ck_assert_err((troupe_err)atomic_load(&o.map), TROUPE_EDEADLK);
    ck_assert_err((troupe_err)atomic_load(&o.member), TROUPE_EDEADLK);
    ck_assert_err((troupe_err)atomic_load(&o.stop), TROUPE_EDEADLK);
    ck_assert_err(troupe_runtime_shutdown_wait(rt), TROUPE_OK);
    troupe_runtime_destroy(rt);
    /* nothing was registered, the client still runs */
    troupe_etcd_result r;
    ck_assert_err(troupe_etcd_get_wait(c, TROUPE_MEMBER_PREFIX "7",
                                       strlen(TROUPE_MEMBER_PREFIX "7"), &r),
                  TROUPE_OK);
    ck_assert_uint_eq(r.n, 0);
    troupe_etcd_result_fini(&r);
    close_client(c);
}
END_TEST

/* ---- a canned server on loopback ------------------------------------------
 */

static struct {
    int fd, port;
    pthread_t thr;
    const char *answer; /* NULL: hold every connection silent */
    size_t answer_len;
    int held[32];
    _Atomic int n_held;
    _Atomic int accepted;
} K;

static void *
canned_main(void *arg)
{
    for (;;) {
        int s = accept(K.fd, NULL, NULL);
        if (s < 0)
            return NULL;
        atomic_fetch_add(&K.accepted, 1);
        if (K.answer == NULL) {
            int i = atomic_fetch_add(&K.n_held, 1);
            if (i < 32)
                K.held[i] = s;
            continue;
        }
        char buf[4096];
        (void)!read(s, buf, sizeof(buf)); /* the request: small, one read */
        size_t off = 0;
        while (off < K.answer_len) {
            ssize_t w = write(s, K.answer + off, K.answer_len - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        close(s);
    }
}

static void
canned_start(const char *answer, size_t len)
{
    signal(SIGPIPE, SIG_IGN);
    K.answer = answer;
    K.answer_len = len;
    K.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    ck_assert(bind(K.fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    ck_assert(listen(K.fd, 64) == 0);
    ck_assert(getsockname(K.fd, (struct sockaddr *)&a, &al) == 0);
    K.port = ntohs(a.sin_port);
    ck_assert(pthread_create(&K.thr, NULL, canned_main, NULL) == 0);
}

static troupe_etcd *
open_canned(uint32_t timeout_ms)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", K.port);
    troupe_etcd_opts o = {.endpoints = url, .timeout_ms = timeout_ms};
    troupe_etcd *c = NULL;
    ck_assert_err(troupe_etcd_open(&o, &c), TROUPE_OK);
    return c;
}

START_TEST(test_garbage_answer_eproto)
{
    static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n"
                              "Connection: close\r\n\r\n{\"kvs\":[";
    canned_start(ans, sizeof(ans) - 1);
    troupe_etcd *c = open_canned(5000);
    ck_assert_err(troupe_etcd_get_wait(c, "k", 1, NULL), TROUPE_EPROTO);
    ck_assert_err(troupe_etcd_put_wait(c, "k", 1, "v", 1, 0, NULL),
                  TROUPE_EPROTO);
    ck_assert_err(troupe_etcd_lease_grant_wait(c, 5, NULL), TROUPE_EPROTO);
    close_client(c);
}
END_TEST

START_TEST(test_oversized_answer_etoobig)
{
    size_t body = (2u << 20);
    char *ans = malloc(body + 200);
    int h = snprintf(ans, 200,
                     "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     body);
    memset(ans + h, ' ', body);
    canned_start(ans, (size_t)h + body);
    troupe_etcd *c = open_canned(10000);
    ck_assert_err(troupe_etcd_get_wait(c, "k", 1, NULL), TROUPE_ETOOBIG);
    close_client(c);
}
END_TEST

START_TEST(test_silent_server_times_out)
{
    canned_start(NULL, 0);
    troupe_etcd *c = open_canned(300);
    uint64_t t0 = ts_now_ms();
    ck_assert_err(troupe_etcd_put_wait(c, "k", 1, "v", 1, 0, NULL),
                  TROUPE_ETIMEDOUT);
    ck_assert_uint_ge(ts_now_ms() - t0, 250);
    close_client(c);
}
END_TEST

static bool
five_accepted(void *arg)
{
    return atomic_load(&K.accepted) >= 5;
}

START_TEST(test_stop_with_requests_in_flight_ecloses_each_once)
{
    canned_start(NULL, 0);
    troupe_etcd *c = open_canned(60000);
    gather g = {0};
    for (int i = 0; i < 5; i++)
        ck_assert_err(troupe_etcd_get(c, "k", 1, on_gather, &g), TROUPE_OK);
    /* in flight: the server holds five connections */
    want_calls none = {&g, 1};
    ck_assert(!calls_reach(&none));
    ck_assert(ts_wait_until(five_accepted, NULL, 10000));
    ck_assert(!calls_reach(&none));
    ck_assert_err(troupe_etcd_stop_wait(c), TROUPE_OK);
    ck_assert_int_eq(atomic_load(&g.calls), 5);
    ck_assert_int_eq(atomic_load(&g.errs[TROUPE_ECLOSED]), 5);
    ck_assert_err(troupe_etcd_get(c, "k", 1, on_gather, &g), TROUPE_ECLOSED);
    ck_assert_err(troupe_etcd_stop_wait(c), TROUPE_ESTATE);
    troupe_etcd_destroy(c);
    ck_assert_int_eq(atomic_load(&g.calls), 5);
}
END_TEST

START_TEST(test_reads_fail_over_writes_do_not)
{
    /* a port nothing listens on: bind, note it, close */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    ck_assert(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    ck_assert(getsockname(s, (struct sockaddr *)&a, &al) == 0);
    close(s);
    const char *real = getenv("TROUPE_ETCD");
    ck_assert_ptr_nonnull(real);
    char eps[600];
    snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,%s", ntohs(a.sin_port),
             real);
    troupe_etcd_opts o = {.endpoints = eps, .timeout_ms = 5000};
    troupe_etcd *c = NULL;
    ck_assert_err(troupe_etcd_open(&o, &c), TROUPE_OK);
    ck_assert_err(troupe_etcd_put_wait(c, "/test/fo", 8, "v", 1, 0, NULL),
                  TROUPE_EUNREACHABLE);
    /* the next goes to the next endpoint */
    ck_assert_err(troupe_etcd_put_wait(c, "/test/fo", 8, "v", 1, 0, NULL),
                  TROUPE_OK);
    close_client(c);
    c = NULL;
    ck_assert_err(troupe_etcd_open(&o, &c), TROUPE_OK);
    troupe_etcd_result r;
    ck_assert_err(troupe_etcd_get_wait(c, "/test/fo", 8, &r), TROUPE_OK);
    ck_assert_uint_eq(r.n, 1);
    troupe_etcd_result_fini(&r);
    close_client(c);
}
END_TEST

/* ---- bad arguments ---------------------------------------------------------
 */

static void
noop(void *arg, troupe_err e, const troupe_etcd_result *r)
{
    ck_abort_msg("a refused call's callback fired");
}

START_TEST(test_bad_arguments_einval)
{
    troupe_etcd *c = NULL;
    troupe_etcd_opts o = {.endpoints = "http://127.0.0.1:1"};
    ck_assert_err(troupe_etcd_open(NULL, &c), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_open(&o, NULL), TROUPE_EINVAL);
    static const char *const bad[] = {
        "",
        "ftp://h:1",
        "127.0.0.1:2379",
        "http://",
        "http://h:1/v3",
        "http://h:1?x",
        "http://u@h:1",
        "http://h:1,",
        "http://a:1,http://b:1,http://c:1,http://d:1,http://e:1,http://f:1,"
        "http://g:1,http://h:1,http://i:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        troupe_etcd_opts b = {.endpoints = bad[i]};
        ck_assert_msg(troupe_etcd_open(&b, &c) == TROUPE_EINVAL, "'%s' taken",
                      bad[i]);
    }
    o.endpoints = "http://127.0.0.1:1/,https://[::1]:2379";
    ck_assert_err(troupe_etcd_open(&o, &c), TROUPE_OK);
    static char big[TROUPE_ETCD_VALUE_MAX + 1];
    static char longkey[TROUPE_ETCD_KEY_MAX + 1];
    memset(longkey, 'k', sizeof(longkey));
    ck_assert_err(troupe_etcd_put(NULL, "k", 1, "v", 1, 0, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put(c, "k", 1, "v", 1, 0, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put(c, NULL, 1, "v", 1, 0, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put(c, "k", 0, "v", 1, 0, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_etcd_put(c, longkey, sizeof(longkey), "v", 1, 0, noop, NULL),
        TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put(c, "k", 1, NULL, 1, 0, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put(c, "k", 1, big, sizeof(big), 0, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put(c, "k", 1, "v", 1, -1, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_get(c, "k", 0, noop, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_list(c, "k", 1, 0, noop, NULL), TROUPE_EINVAL);
    ck_assert_err(
        troupe_etcd_list(c, "k", 1, TROUPE_ETCD_LIST_MAX + 1, noop, NULL),
        TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_delete(c, NULL, 0, true, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_cas(c, "k", 1, -1, "v", 1, 0, noop, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_lease_grant(c, 0, noop, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_lease_grant(c, 86401, noop, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_lease_keepalive(c, 0, noop, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_lease_revoke(c, -5, noop, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_get_wait(NULL, "k", 1, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_put_wait(c, "k", 0, "v", 1, 0, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_etcd_stop_wait(NULL), TROUPE_EINVAL);
    close_client(c);
    troupe_etcd_destroy(NULL);
}
END_TEST

static Suite *
etcd_suite(void)
{
    Suite *s = suite_create("etcd");
    TCase *t = tcase_create("codec");
    tcase_add_test(t, test_b64_every_length_roundtrips);
    tcase_add_test(t, test_b64_malformed_refused);
    tcase_add_test(t, test_parse_hostile_answers_are_errors);
    tcase_add_test(t, test_parse_good_answers_are_read);
    suite_add_tcase(s, t);
    t = tcase_create("real");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_put_get_binary_roundtrip);
    tcase_add_test(t, test_list_prefix_in_order_with_limit_and_delete);
    tcase_add_test(t, test_cas_create_and_update_one_winner);
    tcase_add_test(t, test_cas_racing_itself_has_one_winner);
    tcase_add_test(t, test_lease_keys_go_with_it);
    tcase_add_test(t, test_wait_on_client_thread_edeadlk);
    tcase_add_test(t, test_waits_on_a_troupe_thread_edeadlk);
    tcase_add_test(t, test_reads_fail_over_writes_do_not);
    suite_add_tcase(s, t);
    t = tcase_create("canned");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_garbage_answer_eproto);
    tcase_add_test(t, test_oversized_answer_etoobig);
    tcase_add_test(t, test_silent_server_times_out);
    tcase_add_test(t, test_stop_with_requests_in_flight_ecloses_each_once);
    tcase_add_test(t, test_bad_arguments_einval);
    suite_add_tcase(s, t);
    return s;
}

Suite *
map_suite(void); /* check_map.c */
Suite *
member_suite(void); /* check_member.c */

int
main(void)
{
    Suite *s[] = {etcd_suite(), map_suite(), member_suite()};
    return ts_run_suites(s, 3);
}
