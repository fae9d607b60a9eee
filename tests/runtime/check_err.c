#include <string.h>

#include "troupe/alloc.h"
#include "tsupport.h"

START_TEST(test_err_every_code_has_name_and_text)
{
#define CHECK_ONE(name, num, text)                                             \
    ck_assert_str_eq(troupe_err_name(TROUPE_##name), #name);                   \
    ck_assert_str_eq(troupe_strerror(TROUPE_##name), text);                    \
    ck_assert_int_eq(TROUPE_##name, num);
    TROUPE_ERR_LIST(CHECK_ONE)
#undef CHECK_ONE
}
END_TEST

START_TEST(test_err_unknown_code_is_named_unknown)
{
    ck_assert_str_eq(troupe_err_name((troupe_err)9999), "UNKNOWN_ERROR");
    ck_assert_str_eq(troupe_strerror((troupe_err)-1), "unknown error");
}
END_TEST

START_TEST(test_alloc_fault_hook_fails_after_countdown)
{
    troupe_alloc_fail_after(2);
    void *a = troupe_malloc(8), *b = troupe_malloc(8), *c = troupe_malloc(8);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(c);
    ck_assert_ptr_null(troupe_strdup("x"));
    troupe_alloc_fail_after(-1);
    void *d = troupe_malloc(8);
    ck_assert_ptr_nonnull(d);
    troupe_free(a);
    troupe_free(b);
    troupe_free(d);
}
END_TEST

Suite *
err_suite(void)
{
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_err_every_code_has_name_and_text);
    tcase_add_test(tc, test_err_unknown_code_is_named_unknown);
    tcase_add_test(tc, test_alloc_fault_hook_fails_after_countdown);
    suite_add_tcase(s, tc);
    return s;
}
