/*
 * The partition map (troupe/map.h): unit names, the strict decoder fed
 * hostile documents, and against the real etcd ($TROUPE_ETCD) the
 * compare-and-set: two assigns from one revision, one wins; assigns
 * racing from many threads, none lost; a hostile stored map refused and
 * left alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/map.h"
#include "tsupport.h"

Suite *
map_suite(void);

START_TEST(test_unit_names_checked)
{
    static const char *const good[] = {"table:orders:0", "table:a.b-c_D:65535",
                                       "queue:jobs:12", "coord:0", "coord:7"};
    static const char *const bad[] = {
        "",
        "table",
        "table:orders",
        "table::0",
        "table:o:",
        "table:o:01",
        "table:o:65536",
        "table:o:-1",
        "table:o:x",
        "table:o p:1",
        "coord:",
        "coord:0:1",
        "coord:00",
        "tables:orders:0",
        "queue:a:b:1",
        "table:"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:"
        "1"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(troupe_map_unit_ok(good[i]), "'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(!troupe_map_unit_ok(bad[i]), "'%s' taken", bad[i]);
    ck_assert(!troupe_map_unit_ok(NULL));
}
END_TEST

START_TEST(test_decode_hostile_maps_eproto)
{
    static const char *const bad[] = {
        "",
        "nonsense",
        "[]",
        "{\"format\":1}",
        "{\"units\":{}}",
        "{\"format\":2,\"units\":{}}",
        "{\"format\":\"1\",\"units\":{}}",
        "{\"format\":1,\"units\":[]}",
        "{\"format\":1,\"units\":{},\"extra\":0}",
        "{\"format\":1,\"units\":{\"coord:0\":0}}",
        "{\"format\":1,\"units\":{\"coord:0\":-1}}",
        "{\"format\":1,\"units\":{\"coord:0\":4294967295}}",
        "{\"format\":1,\"units\":{\"coord:0\":\"1\"}}",
        "{\"format\":1,\"units\":{\"coord:0\":1.5}}",
        "{\"format\":1,\"units\":{\"bogus\":1}}",
        "{\"format\":1,\"units\":{\"coord:0\":1,\"coord:0\":2}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        troupe_map m;
        troupe_err e =
            troupe_map_decode((const uint8_t *)bad[i], strlen(bad[i]), &m);
        ck_assert_msg(e == TROUPE_EPROTO, "'%s': %s", bad[i],
                      troupe_err_name(e));
        ck_assert_ptr_null(m.units);
    }
}
END_TEST

START_TEST(test_encode_decode_roundtrip_sorted)
{
    troupe_map_entry u[3] = {
        {"table:t:1", 3}, {"coord:0", 1}, {"queue:q:0", 4294967294u}};
    troupe_map m = {.units = u, .n = 3};
    char *s = NULL;
    ck_assert_err(troupe_map_encode(&m, &s), TROUPE_OK);
    troupe_map d;
    ck_assert_err(troupe_map_decode((const uint8_t *)s, strlen(s), &d),
                  TROUPE_OK);
    troupe_free(s);
    ck_assert_uint_eq(d.n, 3);
    ck_assert_str_eq(d.units[0].unit, "coord:0");
    ck_assert_str_eq(d.units[2].unit, "table:t:1");
    ck_assert_uint_eq(troupe_map_owner(&d, "queue:q:0"), 4294967294u);
    ck_assert_uint_eq(troupe_map_owner(&d, "table:t:1"), 3);
    ck_assert_uint_eq(troupe_map_owner(&d, "table:t:2"), 0);
    troupe_map_fini(&d);
    /* a unit twice, an owner 0: refused */
    troupe_map_entry twice[2] = {{"coord:0", 1}, {"coord:0", 2}};
    troupe_map t = {.units = twice, .n = 2};
    ck_assert_err(troupe_map_encode(&t, &s), TROUPE_EINVAL);
    twice[1] = (troupe_map_entry){"coord:1", 0};
    ck_assert_err(troupe_map_encode(&t, &s), TROUPE_EINVAL);
    ck_assert_err(troupe_map_encode(NULL, &s), TROUPE_EINVAL);
}
END_TEST

static troupe_etcd *
open_fresh(void)
{
    const char *url = getenv("TROUPE_ETCD");
    ck_assert_msg(url != NULL, "TROUPE_ETCD is not set: run through "
                               "tests/cluster/with_etcd.sh (ctest does)");
    troupe_etcd_opts o = {.endpoints = url, .timeout_ms = 10000};
    troupe_etcd *c = NULL;
    ck_assert_err(troupe_etcd_open(&o, &c), TROUPE_OK);
    /* every test starts with no map */
    ck_assert_err(troupe_etcd_delete_wait(c, TROUPE_MAP_KEY,
                                          strlen(TROUPE_MAP_KEY), false, NULL),
                  TROUPE_OK);
    return c;
}

static void
close_client(troupe_etcd *c)
{
    ck_assert_err(troupe_etcd_stop_wait(c), TROUPE_OK);
    troupe_etcd_destroy(c);
}

START_TEST(test_assign_versions_by_revision)
{
    troupe_etcd *c = open_fresh();
    troupe_map m;
    ck_assert_err(troupe_map_read_wait(c, &m), TROUPE_OK);
    ck_assert_int_eq(m.revision, 0);
    ck_assert_uint_eq(m.n, 0);
    int64_t r1 = 0, r2 = 0, r3 = 0;
    ck_assert_err(troupe_map_assign_wait(c, "table:t:0", 1, 0, &r1), TROUPE_OK);
    ck_assert_err(troupe_map_assign_wait(c, "table:t:1", 2, r1, &r2),
                  TROUPE_OK);
    ck_assert_int_gt(r2, r1);
    /* the same base revision a second time: someone came first */
    ck_assert_err(troupe_map_assign_wait(c, "table:t:1", 3, r1, NULL),
                  TROUPE_ECONFLICT);
    ck_assert_err(troupe_map_assign_wait(c, "table:t:0", 2, -1, &r3),
                  TROUPE_OK); /* a move */
    ck_assert_err(troupe_map_read_wait(c, &m), TROUPE_OK);
    ck_assert_int_eq(m.revision, r3);
    ck_assert_uint_eq(m.n, 2);
    ck_assert_uint_eq(troupe_map_owner(&m, "table:t:0"), 2);
    ck_assert_uint_eq(troupe_map_owner(&m, "table:t:1"), 2);
    troupe_map_fini(&m);
    ck_assert_err(troupe_map_assign_wait(c, "nope", 1, -1, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_map_assign_wait(c, "coord:0", 0, -1, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_map_assign_wait(c, "coord:0", 1, -2, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_map_assign_wait(NULL, "coord:0", 1, -1, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_map_read_wait(NULL, &m), TROUPE_EINVAL);
    close_client(c);
}
END_TEST

typedef struct racer {
    troupe_etcd *c;
    char unit[32];
    uint32_t node;
    int64_t from;
    pthread_barrier_t *go;
    troupe_err e;
} racer;

static void *
race_main(void *arg)
{
    racer *r = arg;
    pthread_barrier_wait(r->go);
    r->e = troupe_map_assign_wait(r->c, r->unit, r->node, r->from, NULL);
    return NULL;
}

static void
race(racer *rs, int n)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n);
    pthread_t t[16];
    for (int i = 0; i < n; i++) {
        rs[i].go = &go;
        ck_assert(pthread_create(&t[i], NULL, race_main, &rs[i]) == 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
}

START_TEST(test_assigns_from_one_revision_one_wins)
{
    troupe_etcd *c = open_fresh();
    int64_t r0 = 0;
    ck_assert_err(troupe_map_assign_wait(c, "coord:0", 1, 0, &r0), TROUPE_OK);
    racer rs[8];
    for (int i = 0; i < 8; i++)
        rs[i] = (racer){.c = c, .node = (uint32_t)(i + 2), .from = r0};
    for (int i = 0; i < 8; i++)
        snprintf(rs[i].unit, sizeof(rs[i].unit), "coord:%d", i % 2 + 1);
    race(rs, 8);
    int won = 0;
    uint32_t winner = 0;
    for (int i = 0; i < 8; i++) {
        if (rs[i].e == TROUPE_OK) {
            won++;
            winner = rs[i].node;
        } else {
            ck_assert_err(rs[i].e, TROUPE_ECONFLICT);
        }
    }
    ck_assert_int_eq(won, 1);
    troupe_map m;
    ck_assert_err(troupe_map_read_wait(c, &m), TROUPE_OK);
    ck_assert_uint_eq(m.n, 2); /* coord:0 and the winner's unit */
    ck_assert(troupe_map_owner(&m, "coord:1") == winner ||
              troupe_map_owner(&m, "coord:2") == winner);
    troupe_map_fini(&m);
    close_client(c);
}
END_TEST

START_TEST(test_assigns_racing_none_lost)
{
    troupe_etcd *c = open_fresh();
    racer rs[8];
    for (int i = 0; i < 8; i++) {
        rs[i] = (racer){.c = c, .node = (uint32_t)(i + 1), .from = -1};
        snprintf(rs[i].unit, sizeof(rs[i].unit), "table:t:%d", i);
    }
    race(rs, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_err(rs[i].e, TROUPE_OK);
    troupe_map m;
    ck_assert_err(troupe_map_read_wait(c, &m), TROUPE_OK);
    ck_assert_uint_eq(m.n, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(troupe_map_owner(&m, rs[i].unit), (uint32_t)(i + 1));
    troupe_map_fini(&m);
    close_client(c);
}
END_TEST

START_TEST(test_hostile_stored_map_refused_and_kept)
{
    troupe_etcd *c = open_fresh();
    static const char junk[] = "{\"format\":1,\"units\":{\"coord:0\":0}}";
    ck_assert_err(troupe_etcd_put_wait(c, TROUPE_MAP_KEY,
                                       strlen(TROUPE_MAP_KEY), junk,
                                       strlen(junk), 0, NULL),
                  TROUPE_OK);
    troupe_map m;
    ck_assert_err(troupe_map_read_wait(c, &m), TROUPE_EPROTO);
    ck_assert_err(troupe_map_assign_wait(c, "coord:1", 1, -1, NULL),
                  TROUPE_EPROTO);
    troupe_etcd_result r;
    ck_assert_err(
        troupe_etcd_get_wait(c, TROUPE_MAP_KEY, strlen(TROUPE_MAP_KEY), &r),
        TROUPE_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert(r.kvs[0].value_len == strlen(junk) &&
              memcmp(r.kvs[0].value, junk, strlen(junk)) == 0);
    troupe_etcd_result_fini(&r);
    close_client(c);
}
END_TEST

Suite *
map_suite(void)
{
    Suite *s = suite_create("map");
    TCase *t = tcase_create("codec");
    tcase_add_test(t, test_unit_names_checked);
    tcase_add_test(t, test_decode_hostile_maps_eproto);
    tcase_add_test(t, test_encode_decode_roundtrip_sorted);
    suite_add_tcase(s, t);
    t = tcase_create("real");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_assign_versions_by_revision);
    tcase_add_test(t, test_assigns_from_one_revision_one_wins);
    tcase_add_test(t, test_assigns_racing_none_lost);
    tcase_add_test(t, test_hostile_stored_map_refused_and_kept);
    suite_add_tcase(s, t);
    return s;
}
