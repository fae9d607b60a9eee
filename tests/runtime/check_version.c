#include <stdio.h>
#include <string.h>

#include "troupe/version.h"
#include "tsupport.h"

START_TEST(test_version_macros_match_project_version)
{
    char want[64];
    snprintf(want, sizeof(want), "%d.%d.%d", TROUPE_VERSION_MAJOR,
             TROUPE_VERSION_MINOR, TROUPE_VERSION_PATCH);
    ck_assert_str_eq(want, TROUPE_TEST_PROJECT_VERSION);
    ck_assert_str_eq(TROUPE_VERSION_STRING, TROUPE_TEST_PROJECT_VERSION);
    ck_assert_int_eq(TROUPE_VERSION_NUMBER, TROUPE_VERSION_MAJOR * 1000000 +
                                                TROUPE_VERSION_MINOR * 1000 +
                                                TROUPE_VERSION_PATCH);
}
END_TEST

START_TEST(test_version_library_reports_its_version)
{
    /* The library was built from the same tree as this test. */
    ck_assert_ptr_nonnull(troupe_version());
    ck_assert_str_eq(troupe_version(), TROUPE_VERSION_STRING);
    ck_assert_ptr_eq(troupe_version(), troupe_version()); /* static */
    ck_assert_int_eq(troupe_version_number(), TROUPE_VERSION_NUMBER);
}
END_TEST

START_TEST(test_version_number_orders_versions)
{
    /* Each part gets three digits: 0.999.0 sorts below 1.0.0. */
    ck_assert_int_lt(TROUPE_VERSION_MINOR, 1000);
    ck_assert_int_lt(TROUPE_VERSION_PATCH, 1000);
    ck_assert_int_ge(TROUPE_VERSION_NUMBER, TROUPE_VERSION_MAJOR * 1000000);
    ck_assert_int_lt(TROUPE_VERSION_NUMBER,
                     (TROUPE_VERSION_MAJOR + 1) * 1000000);
}
END_TEST

Suite *
version_suite(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_version_macros_match_project_version);
    tcase_add_test(tc, test_version_library_reports_its_version);
    tcase_add_test(tc, test_version_number_orders_versions);
    suite_add_tcase(s, tc);
    return s;
}
