/* The barrier (actors/coord, troupe/barrier.h) inside business
 * transactions: a duplicate delivery runs the business logic once (also
 * when two race), a compensation before its action is null and the late
 * action is discarded, a rolled-back transaction leaves no row, the
 * two-phase message's query-back, and every field rule. Real RocksDB in a
 * temp dir; blocking twins on the test thread. */
#include <stdlib.h>
#include <string.h>

#include "tnode.h"
#include "troupe/barrier.h"
#include "troupe/coord.h"
#include "troupe/keycodec.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "tsupport.h"

/* A node of every built-in actor (tnode.h) plus the barrier's table and
 * an account table. */
static tnode node;

static void
setup(void)
{
    troupe_runtime_opts o = {.workers = 4};
    tnode_open(&node, "barrier", &o);
    ck_assert_ok(troupe_barrier_create_wait(node.tables));
    ck_assert_ok(troupe_barrier_create_wait(node.tables)); /* idempotent */
    ck_assert_ok(troupe_tables_create_wait(node.tables, "acct", NULL, 0));
}

static void
teardown(void)
{
    tnode_close(&node);
}

static troupe_barrier_branch
br(const char *mode, const char *gid, const char *branch, const char *op)
{
    return (troupe_barrier_branch){.mode = mode,
                                   .gid = gid,
                                   .gid_len = gid ? strlen(gid) : 0,
                                   .branch_id = branch,
                                   .op = op};
}

/* {"v": v} in 12 bytes */
static const void *
docv(unsigned char b[12], int64_t v)
{
    b[0] = 0x81;
    b[1] = 0xa1;
    b[2] = 'v';
    b[3] = 0xd3;
    for (int i = 0; i < 8; i++)
        b[4 + i] = (unsigned char)((uint64_t)v >> (56 - 8 * i));
    return b;
}

/* The account's balance (0 when absent). */
static int64_t
balance(void)
{
    troupe_rows *r = NULL;
    troupe_err e = troupe_table_get_wait(node.tables, "acct", "a", 1, &r);
    if (e == TROUPE_ENOENT)
        return 0;
    ck_assert_ok(e);
    ck_assert_uint_eq(r->rows[0].doc_len, 12);
    const uint8_t *d = r->rows[0].doc;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | d[4 + i];
    troupe_rows_destroy(r);
    return (int64_t)v;
}

/* One delivery of branch b: the barrier, then (on EXECUTE) the business
 * write adding delta to the balance, then the commit, whose error is
 * returned; *v gets the verdict. */
static troupe_err
deliver(troupe_barrier_branch b, int64_t delta, troupe_barrier_verdict *v)
{
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &tx));
    ck_assert_ok(troupe_barrier_check_wait(tx, &b, v));
    if (*v == TROUPE_BARRIER_EXECUTE) {
        int64_t cur = 0;
        troupe_rows *r = NULL;
        troupe_err ge = troupe_txn_get_wait(tx, "acct", "a", 1, &r);
        if (ge == TROUPE_OK) {
            const uint8_t *d = r->rows[0].doc;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++)
                u = u << 8 | d[4 + i];
            cur = (int64_t)u;
        } else {
            ck_assert_int_eq(ge, TROUPE_ENOENT);
        }
        troupe_rows_destroy(r);
        unsigned char buf[12];
        ck_assert_ok(troupe_txn_upsert(tx, "acct", "a", 1,
                                       docv(buf, cur + delta), 12, NULL));
    }
    troupe_err e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
    troupe_txn_destroy(tx);
    return e;
}

/* The barrier row of (mode, gid, branch, op) is committed. */
static bool
row_exists(const char *mode, const char *gid, const char *branch,
           const char *op)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, mode, strlen(mode));
    troupe_key_put_string(&w, gid, strlen(gid));
    troupe_key_put_string(&w, branch, strlen(branch));
    ck_assert_ok(troupe_key_put_string(&w, op, strlen(op)));
    troupe_rows *r = NULL;
    troupe_err e = troupe_table_get_wait(node.tables, TROUPE_BARRIER_TABLE,
                                         w.buf, w.len, &r);
    troupe_key_writer_fini(&w);
    troupe_rows_destroy(r);
    ck_assert(e == TROUPE_OK || e == TROUPE_ENOENT);
    return e == TROUPE_OK;
}

START_TEST(test_a_duplicate_delivery_runs_the_business_logic_once)
{
    troupe_barrier_verdict v = 0;
    for (int i = 0; i < 3; i++) {
        ck_assert_ok(deliver(br("saga", "g1", "01", "action"), 10, &v));
        ck_assert_int_eq(v, i == 0 ? TROUPE_BARRIER_EXECUTE
                                   : TROUPE_BARRIER_DUPLICATED);
    }
    ck_assert_int_eq(balance(), 10);
    ck_assert(row_exists("saga", "g1", "01", "action"));
    /* another branch, op or gid is another row */
    ck_assert_ok(deliver(br("saga", "g1", "02", "action"), 1, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(deliver(br("saga", "g2", "01", "action"), 1, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(deliver(br("tcc", "g1", "01", "try"), 1, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_int_eq(balance(), 13);
}
END_TEST

/* Two deliveries of one op racing: both see no row, one commits, the
 * other's commit fails and writes nothing; its retry is DUPLICATED. */
START_TEST(test_racing_duplicates_commit_once)
{
    troupe_barrier_branch b = br("saga", "race", "01", "action");
    troupe_txn *t1 = NULL, *t2 = NULL;
    troupe_barrier_verdict v1 = 0, v2 = 0;
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &t1));
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &t2));
    ck_assert_ok(troupe_barrier_check_wait(t1, &b, &v1));
    ck_assert_ok(troupe_barrier_check_wait(t2, &b, &v2));
    ck_assert_int_eq(v1, TROUPE_BARRIER_EXECUTE);
    ck_assert_int_eq(v2, TROUPE_BARRIER_EXECUTE);
    unsigned char buf[12];
    ck_assert_ok(troupe_txn_upsert(t1, "acct", "a", 1, docv(buf, 5), 12, NULL));
    ck_assert_ok(troupe_txn_upsert(t2, "acct", "a", 1, docv(buf, 7), 12, NULL));
    ck_assert_ok(troupe_txn_commit_wait(t1, TROUPE_SYNC_DEFAULT));
    troupe_err e = troupe_txn_commit_wait(t2, TROUPE_SYNC_DEFAULT);
    ck_assert_msg(e == TROUPE_ECONFLICT || e == TROUPE_EEXIST,
                  "the second commit: %s", troupe_err_name(e));
    troupe_txn_destroy(t1);
    troupe_txn_destroy(t2);
    ck_assert_int_eq(balance(), 5);
    troupe_barrier_verdict v = 0;
    ck_assert_ok(deliver(b, 7, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_DUPLICATED);
    ck_assert_int_eq(balance(), 5);
}
END_TEST

/* A compensation whose action never ran is null, and the action arriving
 * after it is discarded (no hanging reservation); in every mode that
 * compensates. */
START_TEST(
    test_a_compensation_before_its_action_is_null_and_the_action_is_discarded)
{
    static const char *const pairs[][3] = {{"saga", "action", "compensate"},
                                           {"workflow", "action", "compensate"},
                                           {"tcc", "try", "cancel"},
                                           {"xa", "action", "rollback"}};
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        const char *mode = pairs[i][0], *fwd = pairs[i][1], *back = pairs[i][2];
        troupe_barrier_verdict v = 0;
        ck_assert_ok(deliver(br(mode, "early", "01", back), -3, &v));
        ck_assert_int_eq(v, TROUPE_BARRIER_NULL_COMPENSATION);
        ck_assert(row_exists(mode, "early", "01", fwd));
        ck_assert(row_exists(mode, "early", "01", back));
        ck_assert_ok(deliver(br(mode, "early", "01", fwd), 3, &v));
        ck_assert_int_eq(v, TROUPE_BARRIER_DUPLICATED);
        ck_assert_ok(deliver(br(mode, "early", "01", back), -3, &v));
        ck_assert_int_eq(v, TROUPE_BARRIER_DUPLICATED);
    }
    ck_assert_int_eq(balance(), 0);
}
END_TEST

/* The ordinary order: the action runs, its compensation runs once. */
START_TEST(test_a_compensation_after_its_action_runs_once)
{
    troupe_barrier_verdict v = 0;
    ck_assert_ok(deliver(br("tcc", "late", "03", "try"), 4, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(deliver(br("tcc", "late", "03", "cancel"), -4, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(deliver(br("tcc", "late", "03", "cancel"), -4, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_DUPLICATED);
    /* confirm is a forward op of its own */
    ck_assert_ok(deliver(br("tcc", "late", "04", "try"), 2, &v));
    ck_assert_ok(deliver(br("tcc", "late", "04", "confirm"), 0, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(deliver(br("tcc", "late", "04", "confirm"), 0, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_DUPLICATED);
    ck_assert_int_eq(balance(), 2);
}
END_TEST

START_TEST(test_a_rolled_back_business_transaction_leaves_no_barrier_row)
{
    troupe_barrier_branch b = br("saga", "rb", "01", "action");
    troupe_txn *tx = NULL;
    troupe_barrier_verdict v = 0;
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &tx));
    ck_assert_ok(troupe_barrier_check_wait(tx, &b, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(troupe_txn_rollback(tx));
    troupe_txn_destroy(tx);
    ck_assert(!row_exists("saga", "rb", "01", "action"));
    /* a null compensation rolled back leaves neither row */
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &tx));
    troupe_barrier_branch c = br("saga", "rb", "02", "compensate");
    ck_assert_ok(troupe_barrier_check_wait(tx, &c, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_NULL_COMPENSATION);
    troupe_txn_destroy(tx);
    ck_assert(!row_exists("saga", "rb", "02", "action"));
    ck_assert(!row_exists("saga", "rb", "02", "compensate"));
    ck_assert_ok(deliver(b, 1, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_int_eq(balance(), 1);
}
END_TEST

/* The two-phase message: a local transaction that committed is SUCCESS;
 * one that has not is FAILURE for good, and committing it later is
 * DUPLICATED (its business writes must not land). */
START_TEST(test_a_message_query_back_sees_its_local_transaction)
{
    troupe_barrier_verdict v = 0;
    troupe_outcome o = 0;
    ck_assert_ok(deliver(br("msg", "m1", "00", "msg"), 8, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_ok(troupe_barrier_msg_query_wait(node.tables, "m1", 2, &o));
    ck_assert_int_eq(o, TROUPE_OUTCOME_SUCCESS);
    ck_assert_ok(troupe_barrier_msg_query_wait(node.tables, "m1", 2, &o));
    ck_assert_int_eq(o, TROUPE_OUTCOME_SUCCESS);
    ck_assert_ok(troupe_barrier_msg_query_wait(node.tables, "m2", 2, &o));
    ck_assert_int_eq(o, TROUPE_OUTCOME_FAILURE);
    ck_assert_ok(deliver(br("msg", "m2", "00", "msg"), 8, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_DUPLICATED);
    ck_assert_ok(troupe_barrier_msg_query_wait(node.tables, "m2", 2, &o));
    ck_assert_int_eq(o, TROUPE_OUTCOME_FAILURE);
    ck_assert_int_eq(balance(), 8);
    /* a message's steps use ordinary branch ids */
    ck_assert_ok(deliver(br("msg", "m1", "01", "action"), 1, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    ck_assert_int_eq(balance(), 9);
}
END_TEST

/* A local transaction and the query racing: whichever commits first wins
 * and the other side sees it. */
START_TEST(test_a_message_query_racing_its_local_transaction)
{
    troupe_barrier_branch b = br("msg", "m3", "00", "msg");
    troupe_txn *tx = NULL;
    troupe_barrier_verdict v = 0;
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &tx));
    ck_assert_ok(troupe_barrier_check_wait(tx, &b, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    troupe_outcome o = 0;
    ck_assert_ok(troupe_barrier_msg_query_wait(node.tables, "m3", 2, &o));
    ck_assert_int_eq(o, TROUPE_OUTCOME_FAILURE);
    troupe_err e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
    ck_assert_msg(e == TROUPE_ECONFLICT || e == TROUPE_EEXIST,
                  "the late local commit: %s", troupe_err_name(e));
    troupe_txn_destroy(tx);
    ck_assert_ok(troupe_barrier_msg_query_wait(node.tables, "m3", 2, &o));
    ck_assert_int_eq(o, TROUPE_OUTCOME_FAILURE);
}
END_TEST

START_TEST(test_bad_fields_are_refused_and_nothing_is_buffered)
{
    char long_gid[TROUPE_GID_MAX + 2];
    memset(long_gid, 'g', sizeof(long_gid) - 1);
    long_gid[sizeof(long_gid) - 1] = '\0';
    char max_gid[TROUPE_GID_MAX + 1];
    memset(max_gid, 'g', TROUPE_GID_MAX);
    max_gid[TROUPE_GID_MAX] = '\0';
    troupe_barrier_branch bad[] = {
        br(NULL, "g", "01", "action"),
        br("sagas", "g", "01", "action"),
        br("saga", NULL, "01", "action"),
        br("saga", "", "01", "action"),
        br("saga", long_gid, "01", "action"),
        br("saga", "g/1", "01", "action"),
        br("saga", "g 1", "01", "action"),
        br("saga", "g", NULL, "action"),
        br("saga", "g", "1", "action"),
        br("saga", "g", "001", "action"),
        br("saga", "g", "00", "action"),
        br("saga", "g", "10000", "action"),
        br("saga", "g", "0100", "action"),
        br("saga", "g", "1a", "action"),
        br("saga", "g", "01", NULL),
        br("saga", "g", "01", "try"),
        br("tcc", "g", "01", "action"),
        br("msg", "g", "01", "msg"),
        br("msg", "g", "00", "action"),
        br("xa", "g", "01", "cancel"),
    };
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &tx));
    troupe_barrier_verdict v = 0;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(troupe_barrier_check_wait(tx, &bad[i], &v) ==
                          TROUPE_EINVAL,
                      "bad field set %zu accepted", i);
    ck_assert_err(troupe_barrier_check_wait(NULL, &bad[0], &v), TROUPE_EINVAL);
    ck_assert_err(troupe_barrier_check_wait(tx, NULL, &v), TROUPE_EINVAL);
    troupe_barrier_branch good = br("saga", max_gid, "9999", "action");
    ck_assert_err(troupe_barrier_check_wait(tx, &good, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_barrier_check(tx, &good, NULL, NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT));
    troupe_txn_destroy(tx);
    troupe_rows *r = NULL;
    troupe_scan_opts so = {.limit = 10};
    ck_assert_ok(
        troupe_table_scan_wait(node.tables, TROUPE_BARRIER_TABLE, &so, &r));
    ck_assert_uint_eq(r->n, 0);
    troupe_rows_destroy(r);
    /* the longest gid and branch id are accepted */
    ck_assert_ok(deliver(good, 1, &v));
    ck_assert_int_eq(v, TROUPE_BARRIER_EXECUTE);
    troupe_outcome o = 0;
    ck_assert_err(troupe_barrier_msg_query_wait(node.tables, long_gid,
                                                strlen(long_gid), &o),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_barrier_msg_query_wait(node.tables, "m", 1, NULL),
                  TROUPE_EINVAL);
}
END_TEST

/* Without troupe_barrier_create the check says which table is missing. */
START_TEST(test_the_check_without_the_table_is_enotable)
{
    ck_assert_ok(troupe_tables_drop_wait(node.tables, TROUPE_BARRIER_TABLE));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(node.tables, NULL, &tx));
    troupe_barrier_branch b = br("saga", "g", "01", "action");
    troupe_barrier_verdict v = 0;
    ck_assert_err(troupe_barrier_check_wait(tx, &b, &v), TROUPE_ENOTABLE);
    troupe_txn_destroy(tx);
}
END_TEST

/* The id rules of troupe/coord.h, at their edges. */
START_TEST(test_gid_and_branch_id_rules)
{
    ck_assert(troupe_gid_valid("A-z_0.9:x", 9));
    ck_assert(!troupe_gid_valid("a\0b", 3));
    ck_assert(!troupe_gid_valid("\xc3\xa9", 2));
    static const char *const ok[] = {"01",  "09",  "10",   "99",
                                     "100", "999", "1000", "9999"};
    static const char *const no[] = {"",    "0",   "1",    "00",    "000",
                                     "001", "099", "0999", "10000", "+1",
                                     "-1",  " 1",  "1 "};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        ck_assert_msg(troupe_branch_id_valid(ok[i]), "%s refused", ok[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        ck_assert_msg(!troupe_branch_id_valid(no[i]), "%s accepted", no[i]);
    ck_assert_int_eq(troupe_gtx_mode_of("workflow"), TROUPE_MODE_WORKFLOW);
    ck_assert_str_eq(troupe_gtx_mode_name(TROUPE_MODE_TCC), "tcc");
    ck_assert_ptr_null(troupe_gtx_mode_name(0));
    ck_assert_ptr_null(troupe_gtx_mode_name(6));
    ck_assert_str_eq(troupe_gtx_op_undoes(TROUPE_MODE_TCC, "cancel"), "try");
    /* the shard hash is the format's: FNV-1a 64 of "a" is
     * 0xaf63dc4c8601ec8c, of "" the offset basis */
    ck_assert_uint_eq(troupe_gtx_shard_of("a", 1, 1000),
                      (uint32_t)(UINT64_C(0xaf63dc4c8601ec8c) % 1000));
    ck_assert_uint_eq(troupe_gtx_shard_of("", 0, 7),
                      (uint32_t)(UINT64_C(0xcbf29ce484222325) % 7));
    ck_assert_uint_eq(troupe_gtx_shard_of("a", 1, 0), 0);
    ck_assert_uint_eq(troupe_gtx_shard_of("a", 1, 1), 0);
    ck_assert_ptr_null(troupe_gtx_op_undoes(TROUPE_MODE_TCC, "confirm"));
}
END_TEST

Suite *
barrier_suite(void)
{
    Suite *s = suite_create("barrier");
    TCase *c = tcase_create("barrier");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, test_a_duplicate_delivery_runs_the_business_logic_once);
    tcase_add_test(c, test_racing_duplicates_commit_once);
    tcase_add_test(
        c,
        test_a_compensation_before_its_action_is_null_and_the_action_is_discarded);
    tcase_add_test(c, test_a_compensation_after_its_action_runs_once);
    tcase_add_test(
        c, test_a_rolled_back_business_transaction_leaves_no_barrier_row);
    tcase_add_test(c, test_a_message_query_back_sees_its_local_transaction);
    tcase_add_test(c, test_a_message_query_racing_its_local_transaction);
    tcase_add_test(c, test_bad_fields_are_refused_and_nothing_is_buffered);
    tcase_add_test(c, test_the_check_without_the_table_is_enotable);
    tcase_add_test(c, test_gid_and_branch_id_rules);
    suite_add_tcase(s, c);
    return s;
}
