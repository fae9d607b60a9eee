#include <string.h>

#include "troupe/alloc.h"
#include "troupe/msg.h"
#include "tsupport.h"

START_TEST(test_msg_create_copies_body)
{
    char buf[4] = "abc";
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 7, buf, 4));
    buf[0] = 'z';
    ck_assert_uint_eq(m->kind, 7);
    ck_assert_uint_eq(troupe_msg_len(m), 4);
    ck_assert_str_eq(troupe_msg_data(m), "abc");
    troupe_msg_destroy(m);
}
END_TEST

START_TEST(test_msg_bodiless_has_null_data)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 1, NULL, 0));
    ck_assert_ptr_null(troupe_msg_data(m));
    ck_assert_uint_eq(troupe_msg_len(m), 0);
    troupe_msg_destroy(m);
    troupe_msg_destroy(NULL);
}
END_TEST

START_TEST(test_msg_bad_args_rejected)
{
    troupe_msg *m = NULL;
    ck_assert_err(troupe_msg_create(NULL, 1, NULL, 0), TROUPE_EINVAL);
    ck_assert_err(troupe_msg_create(&m, 1, NULL, 5), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    troupe_body *b = NULL;
    void *d;
    ck_assert_err(troupe_body_alloc(4, NULL, &d), TROUPE_EINVAL);
    ck_assert_err(troupe_body_alloc(4, &b, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_body_copy(NULL, 3, &b), TROUPE_EINVAL);
    ck_assert_err(troupe_body_adopt(NULL, 3, &b), TROUPE_EINVAL);
    ck_assert_err(troupe_msg_create_body(NULL, 1, NULL), TROUPE_EINVAL);
    ck_assert_ptr_null(troupe_body_data(NULL));
    ck_assert_uint_eq(troupe_body_len(NULL), 0);
    troupe_body_release(NULL);
}
END_TEST

START_TEST(test_body_refcount_shared_by_fanout)
{
    troupe_body *b = NULL;
    void *data;
    ck_assert_ok(troupe_body_alloc(3, &b, &data));
    memcpy(data, "hi", 3);
    troupe_msg *m1 = NULL, *m2 = NULL;
    troupe_body *r = troupe_body_retain(b);
    ck_assert_ptr_eq(r, b);
    ck_assert_ok(troupe_msg_create_body(&m1, 1, &b));
    ck_assert_ptr_null(b);
    ck_assert_ok(troupe_msg_create_body(&m2, 2, &r));
    /* Both messages see the same bytes, not copies. */
    ck_assert_ptr_eq(troupe_msg_data(m1), troupe_msg_data(m2));
    troupe_msg_destroy(m1);
    ck_assert_str_eq(troupe_msg_data(m2), "hi"); /* still alive */
    troupe_msg_destroy(m2);
}
END_TEST

START_TEST(test_body_adopt_takes_ownership)
{
    char *p = troupe_malloc(5);
    memcpy(p, "abcd", 5);
    troupe_body *b = NULL;
    ck_assert_ok(troupe_body_adopt(p, 5, &b));
    ck_assert_ptr_eq(troupe_body_data(b), p);
    ck_assert_uint_eq(troupe_body_len(b), 5);
    troupe_body_release(b); /* frees p: ASan would flag a leak otherwise */
}
END_TEST

START_TEST(test_msg_create_oom_reports_enomem)
{
    troupe_msg *m = NULL;
    troupe_alloc_fail_after(0);
    ck_assert_err(troupe_msg_create(&m, 1, "x", 1), TROUPE_ENOMEM);
    static const char big[200];
    troupe_alloc_fail_after(1); /* header ok, out-of-line body fails */
    ck_assert_err(troupe_msg_create(&m, 1, big, sizeof big), TROUPE_ENOMEM);
    troupe_alloc_fail_after(-1);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(test_now_ms_is_unix_time)
{
    int64_t t = troupe_now_ms();
    ck_assert(t > 1600000000000LL); /* after 2020 */
}
END_TEST

Suite *
msg_suite(void)
{
    Suite *s = suite_create("msg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_msg_create_copies_body);
    tcase_add_test(tc, test_msg_bodiless_has_null_data);
    tcase_add_test(tc, test_msg_bad_args_rejected);
    tcase_add_test(tc, test_body_refcount_shared_by_fanout);
    tcase_add_test(tc, test_body_adopt_takes_ownership);
    tcase_add_test(tc, test_msg_create_oom_reports_enomem);
    tcase_add_test(tc, test_now_ms_is_unix_time);
    suite_add_tcase(s, tc);
    return s;
}
