/*
 * troupe/hist.h: bucket placement at and around every bound, the overflow
 * bucket, sums and counts, clamped shapes, and adds from several threads.
 */
#include <pthread.h>

#include "troupe/hist.h"
#include "tsupport.h"

START_TEST(test_hist_values_land_in_the_bucket_of_their_bound)
{
    troupe_hist h;
    troupe_hist_init(&h, 1000, 4); /* <= 1000, 2000, 4000, 8000, more */
    static const struct {
        uint64_t v;
        unsigned bucket;
    } cases[] = {{0, 0},    {1, 0},    {1000, 0},          {1001, 1}, {1500, 1},
                 {2000, 1}, {2001, 2}, {3999, 2},          {4000, 2}, {4001, 3},
                 {8000, 3}, {8001, 4}, {UINT64_MAX / 2, 4}};
    uint64_t sum = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        troupe_hist_snapshot before, after;
        troupe_hist_read(&h, &before);
        troupe_hist_add(&h, cases[i].v);
        sum += cases[i].v;
        troupe_hist_read(&h, &after);
        for (unsigned b = 0; b <= 4; b++)
            ck_assert_msg(
                after.counts[b] - before.counts[b] == (b == cases[i].bucket),
                "value %llu: bucket %u", (unsigned long long)cases[i].v, b);
    }
    troupe_hist_snapshot s;
    troupe_hist_read(&h, &s);
    ck_assert_uint_eq(s.count, sizeof(cases) / sizeof(cases[0]));
    ck_assert_uint_eq(s.sum, sum);
    ck_assert_uint_eq(s.n, 4);
    for (unsigned b = 0; b < 4; b++)
        ck_assert_uint_eq(troupe_hist_bound(&s, b), 1000ull << b);
}
END_TEST

START_TEST(test_hist_init_clamps_its_shape)
{
    troupe_hist h;
    troupe_hist_init(&h, 0, 0);
    troupe_hist_snapshot s;
    troupe_hist_read(&h, &s);
    ck_assert_uint_eq(s.base, 1);
    ck_assert_uint_eq(s.n, 1);
    ck_assert_uint_eq(s.count, 0);
    troupe_hist_add(&h, 1);
    troupe_hist_add(&h, 2);
    troupe_hist_read(&h, &s);
    ck_assert_uint_eq(s.counts[0], 1);
    ck_assert_uint_eq(s.counts[1], 1);
    troupe_hist_init(&h, 1, 1000);
    troupe_hist_read(&h, &s);
    ck_assert_uint_eq(s.n, TROUPE_HIST_MAX);
    troupe_hist_add(&h, UINT64_MAX);
    troupe_hist_read(&h, &s);
    ck_assert_uint_eq(s.counts[TROUPE_HIST_MAX], 1);
}
END_TEST

#define ADDERS 4
#define ADDS 100000

static void *
adder(void *arg)
{
    troupe_hist *h = arg;
    for (uint64_t i = 0; i < ADDS; i++)
        troupe_hist_add(h, i % 64);
    return NULL;
}

START_TEST(test_hist_concurrent_adds_are_all_counted)
{
    troupe_hist h;
    troupe_hist_init(&h, 1, 8);
    pthread_t t[ADDERS];
    for (int i = 0; i < ADDERS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, adder, &h), 0);
    for (int i = 0; i < ADDERS; i++)
        pthread_join(t[i], NULL);
    troupe_hist_snapshot s;
    troupe_hist_read(&h, &s);
    ck_assert_uint_eq(s.count, (uint64_t)ADDERS * ADDS);
    uint64_t per = 0;
    for (uint64_t i = 0; i < ADDS; i++)
        per += i % 64;
    ck_assert_uint_eq(s.sum, per * ADDERS);
    /* 0 and 1 in bucket 0, 2 in 1, 3..4 in 2, ..., 33..63 in 6 */
    ck_assert_uint_eq(s.counts[0],
                      2ull * (ADDS / 64) * ADDERS +
                          (ADDS % 64 > 1 ? 2 : ADDS % 64) * ADDERS);
    ck_assert_uint_eq(s.counts[7], 0);
}
END_TEST

Suite *
hist_suite(void)
{
    Suite *s = suite_create("hist");
    TCase *tc = tcase_create("hist");
    tcase_add_test(tc, test_hist_values_land_in_the_bucket_of_their_bound);
    tcase_add_test(tc, test_hist_init_clamps_its_shape);
    tcase_add_test(tc, test_hist_concurrent_adds_are_all_counted);
    suite_add_tcase(s, tc);
    return s;
}
