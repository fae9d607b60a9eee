/*
 * Membership (troupe/member.h) against the real etcd ($TROUPE_ETCD): a
 * member's key and lease, one live owner per id, the stop's revoke, a lost
 * lease registered again by the renewal thread; and the entry parser fed
 * entries no node writes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/member.h"
#include "tsupport.h"

Suite *
member_suite(void);

static troupe_etcd *
open_real(void)
{
    const char *url = getenv("TROUPE_ETCD");
    ck_assert_msg(url != NULL, "TROUPE_ETCD is not set: run through "
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

/* A node id of this test process's own (tests share one etcd). */
static uint32_t
my_id(uint32_t k)
{
    return (uint32_t)getpid() * 8 + k;
}

/* The entry of id now: its lease, 0 when there is none. */
static int64_t
entry_lease(troupe_etcd *c, uint32_t id, troupe_member_info *info)
{
    char key[64];
    snprintf(key, sizeof(key), TROUPE_MEMBER_PREFIX "%u", id);
    troupe_etcd_result r;
    ck_assert_err(troupe_etcd_get_wait(c, key, strlen(key), &r), TROUPE_OK);
    int64_t lease = 0;
    if (r.n == 1) {
        troupe_member_info mi;
        ck_assert_err(troupe_member_parse(&r.kvs[0], &mi), TROUPE_OK);
        lease = mi.lease;
        if (info != NULL)
            *info = mi;
    }
    troupe_etcd_result_fini(&r);
    return lease;
}

START_TEST(test_member_registers_once_and_stop_revokes)
{
    troupe_etcd *c = open_real();
    uint32_t id = my_id(1);
    troupe_member *m = NULL, *dup = NULL;
    ck_assert_err(troupe_member_start(c, id, "tcp://127.0.0.1:7001", 5, &m),
                  TROUPE_OK);
    troupe_member_info info;
    ck_assert_int_eq(entry_lease(c, id, &info), troupe_member_lease(m));
    ck_assert_uint_eq(info.id, id);
    ck_assert_str_eq(info.listen, "tcp://127.0.0.1:7001");
    /* one live owner per id; the refused one leaves the entry alone */
    ck_assert_err(troupe_member_start(c, id, "tcp://127.0.0.1:7002", 5, &dup),
                  TROUPE_EEXIST);
    ck_assert_ptr_null(dup);
    ck_assert_int_eq(entry_lease(c, id, &info), troupe_member_lease(m));
    ck_assert_str_eq(info.listen, "tcp://127.0.0.1:7001");
    int64_t lease = troupe_member_lease(m);
    troupe_member_stop(m);
    ck_assert_int_eq(entry_lease(c, id, NULL), 0);
    ck_assert_err(troupe_etcd_lease_keepalive_wait(c, lease, NULL),
                  TROUPE_ENOENT);
    troupe_member_stop(NULL);
    close_client(c);
}
END_TEST

typedef struct relost {
    troupe_etcd *c;
    troupe_member *m;
    uint32_t id;
    int64_t old;
} relost;

/* The entry is back under a new lease, the one the member says it holds
 * (the member learns it just after etcd does: both are polled). */
static bool
registered_again(void *arg)
{
    relost *r = arg;
    int64_t now = entry_lease(r->c, r->id, NULL);
    return now != 0 && now != r->old && now == troupe_member_lease(r->m);
}

START_TEST(test_member_lost_lease_registers_again)
{
    troupe_etcd *c = open_real();
    uint32_t id = my_id(2);
    troupe_member *m = NULL;
    ck_assert_err(troupe_member_start(c, id, "tcp://127.0.0.1:7003",
                                      TROUPE_MEMBER_TTL_MIN, &m),
                  TROUPE_OK);
    int64_t old = troupe_member_lease(m);
    /* as if etcd had expired it while the node was cut off */
    ck_assert_err(troupe_etcd_lease_revoke_wait(c, old, NULL), TROUPE_OK);
    /* (no check that the entry is gone now: the renewal may already have
     * registered again, which is what is waited for) */
    relost r = {c, m, id, old};
    ck_assert(ts_wait_until(registered_again, &r, 15000));
    troupe_member_stop(m);
    ck_assert_int_eq(entry_lease(c, id, NULL), 0);
    close_client(c);
}
END_TEST

START_TEST(test_member_bad_arguments_einval)
{
    troupe_etcd *c = open_real();
    troupe_member *m = NULL;
    static char longurl[1100];
    memset(longurl, 'u', sizeof(longurl) - 1);
    ck_assert_err(troupe_member_start(NULL, 1, "tcp://x:1", 5, &m),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 0, "tcp://x:1", 5, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, UINT32_MAX, "tcp://x:1", 5, &m),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, NULL, 5, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, "", 5, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, longurl, 5, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, "tcp://\xff\xfe:1", 5, &m),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, "tcp://x:1", 1, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, "tcp://x:1", 3601, &m),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_member_start(c, 1, "tcp://x:1", 5, NULL),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(troupe_member_lease(NULL), 0);
    close_client(c);
}
END_TEST

START_TEST(test_member_parse_foreign_entries_eproto)
{
    static const struct {
        const char *key, *value;
    } bad[] = {
        {"/troupe/nodes/", "{\"id\":1,\"listen\":\"u\"}"},
        {"/troupe/nodes/x", "{\"id\":1,\"listen\":\"u\"}"},
        {"/troupe/nodes/01", "{\"id\":1,\"listen\":\"u\"}"},
        {"/troupe/nodes/0", "{\"id\":0,\"listen\":\"u\"}"},
        {"/troupe/nodes/4294967295", "{\"id\":4294967295,\"listen\":\"u\"}"},
        {"/troupe/nodes/99999999999", "{\"id\":1,\"listen\":\"u\"}"},
        {"/troupe/other/1", "{\"id\":1,\"listen\":\"u\"}"},
        {"/troupe/nodes/1", ""},
        {"/troupe/nodes/1", "not json"},
        {"/troupe/nodes/1", "[]"},
        {"/troupe/nodes/1", "{\"id\":2,\"listen\":\"u\"}"},
        {"/troupe/nodes/1", "{\"id\":\"1\",\"listen\":\"u\"}"},
        {"/troupe/nodes/1", "{\"id\":1}"},
        {"/troupe/nodes/1", "{\"id\":1,\"listen\":5}"},
        {"/troupe/nodes/1", "{\"id\":1,\"listen\":\"\"}"},
        {"/troupe/nodes/1", "{\"id\":1,\"listen\":\"a\\u0000b\"}"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        troupe_etcd_kv kv = {.key = (const uint8_t *)bad[i].key,
                             .key_len = strlen(bad[i].key),
                             .value = (const uint8_t *)bad[i].value,
                             .value_len = strlen(bad[i].value)};
        troupe_member_info mi;
        ck_assert_msg(troupe_member_parse(&kv, &mi) == TROUPE_EPROTO,
                      "%s = %s taken", bad[i].key, bad[i].value);
    }
    troupe_etcd_kv good = {
        .key = (const uint8_t *)"/troupe/nodes/42",
        .key_len = 16,
        .value =
            (const uint8_t *)"{\"id\":42,\"listen\":\"tcp://h:1\",\"x\":1}",
        .value_len = 36,
        .lease = 9};
    troupe_member_info mi;
    ck_assert_err(troupe_member_parse(&good, &mi), TROUPE_OK);
    ck_assert_uint_eq(mi.id, 42);
    ck_assert_str_eq(mi.listen, "tcp://h:1");
    ck_assert_int_eq(mi.lease, 9);
    ck_assert_err(troupe_member_parse(NULL, &mi), TROUPE_EINVAL);
    ck_assert_err(troupe_member_parse(&good, NULL), TROUPE_EINVAL);
}
END_TEST

Suite *
member_suite(void)
{
    Suite *s = suite_create("member");
    TCase *t = tcase_create("member");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_member_registers_once_and_stop_revokes);
    tcase_add_test(t, test_member_lost_lease_registers_again);
    tcase_add_test(t, test_member_bad_arguments_einval);
    tcase_add_test(t, test_member_parse_foreign_entries_eproto);
    suite_add_tcase(s, t);
    return s;
}
