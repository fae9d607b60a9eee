/*
 * Completions on a pull endpoint (troupe/internal/dispatch.h,
 * troupe__completion_*): records that need no reply, ahead of tasks,
 * bounded in count and bytes, delivered exactly once (an ENOMEM record
 * when the body cannot be allocated), dropped at close.
 */
#include <poll.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/dispatch.h"
#include "troupe/internal/dispatch.h"
#include "tsupport.h"

static troupe_runtime *rt;
static troupe_host *h;

static void
setup(void)
{
    troupe_runtime_opts o = {.schedulers = 1, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    ck_assert_ok(troupe_host_open(rt, NULL, &h));
}

static void
teardown(void)
{
    if (h != NULL) {
        troupe_host_close(h);
        troupe_host_destroy(h);
        h = NULL;
    }
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
}

static uint64_t
le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void
post(uint64_t id, troupe_err st, const char *body)
{
    troupe__completion *c;
    ck_assert_ok(troupe__completion_reserve(h, id, &c));
    troupe__completion_post(c, st, body, body ? strlen(body) : 0);
}

START_TEST(test_records_in_order_without_reply)
{
    int fd = troupe_host_wake_fd(h);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 0), 0);
    post(7, TROUPE_OK, "abc");
    ck_assert_int_eq(poll(&p, 1, 0), 1); /* the edge */
    post(8, TROUPE_ENOENT, NULL);
    uint8_t buf[256];
    size_t n, len;
    ck_assert_ok(troupe_host_next_batch(h, 0, buf, sizeof(buf), 8, &n, &len));
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(len, TROUPE_HOST_RECORD_SIZE(8, 3) +
                               TROUPE_HOST_RECORD_SIZE(8, 0));
    ck_assert_uint_eq(le(buf, 8), 7);
    ck_assert_uint_eq(le(buf + 8, 4), 0);
    ck_assert_uint_eq(le(buf + 12, 2), TROUPE_TASK_COMPLETION);
    ck_assert_uint_eq(le(buf + 14, 2), 8);
    ck_assert_uint_eq(le(buf + 20, 4), 3);
    ck_assert_uint_eq(le(buf + 32, 4), TROUPE_OK);
    ck_assert_mem_eq(buf + 40, "abc", 3);
    const uint8_t *r2 = buf + TROUPE_HOST_RECORD_SIZE(8, 3);
    ck_assert_uint_eq(le(r2, 8), 8);
    ck_assert_int_eq((int32_t)le(r2 + 32, 4), TROUPE_ENOENT);
    /* nothing to answer: a reply to it is refused */
    ck_assert_err(troupe_host_reply(h, 7, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                  TROUPE_ENOENT);
    ck_assert_ok(troupe_host_next(h, 0, buf, sizeof(buf), &len));
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(poll(&p, 1, 0), 0); /* re-armed */
}
END_TEST

START_TEST(test_bounds_by_count_and_bytes)
{
    troupe__host_completion_limits(h, 2, 0);
    troupe__completion *a, *b, *c;
    ck_assert_ok(troupe__completion_reserve(h, 1, &a));
    ck_assert_ok(troupe__completion_reserve(h, 2, &b));
    ck_assert_err(troupe__completion_reserve(h, 3, &c), TROUPE_EBUSY);
    ck_assert_ptr_null(c);
    troupe__completion_cancel(b); /* never posted: its place frees */
    ck_assert_ok(troupe__completion_reserve(h, 3, &c));
    troupe__completion_post(a, TROUPE_OK, NULL, 0);
    troupe__completion_post(c, TROUPE_OK, NULL, 0);
    ck_assert_err(troupe__completion_reserve(h, 4, &b), TROUPE_EBUSY);
    uint8_t buf[256];
    size_t n, len;
    ck_assert_ok(troupe_host_next_batch(h, 0, buf, sizeof(buf), 1, &n, &len));
    ck_assert_uint_eq(n, 1);
    ck_assert_ok(troupe__completion_reserve(h, 4, &b)); /* pulled: free */
    troupe__completion_cancel(b);
    ck_assert_ok(troupe_host_next_batch(h, 0, buf, sizeof(buf), 8, &n, &len));
    ck_assert_uint_eq(n, 1);
    /* bytes: 100 queued against a bound of 64 */
    troupe__host_completion_limits(h, 100, 64);
    char big[61];
    memset(big, 'x', 60);
    big[60] = '\0';
    post(5, TROUPE_OK, big);
    ck_assert_err(troupe__completion_reserve(h, 6, &b), TROUPE_EBUSY);
    ck_assert_ok(troupe_host_next_batch(h, 0, buf, sizeof(buf), 8, &n, &len));
    ck_assert_ok(troupe__completion_reserve(h, 6, &b));
    troupe__completion_cancel(b);
}
END_TEST

START_TEST(test_too_small_stays_first)
{
    post(1, TROUPE_OK, "0123456789abcdef");
    uint8_t buf[256];
    size_t n, len;
    ck_assert_err(troupe_host_next_batch(h, 0, buf, 40, 8, &n, &len),
                  TROUPE_ETOOBIG);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(len, TROUPE_HOST_RECORD_SIZE(8, 16));
    ck_assert_ok(troupe_host_next_batch(h, 0, buf, sizeof(buf), 8, &n, &len));
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(le(buf, 8), 1);
}
END_TEST

START_TEST(test_body_without_memory_is_enomem)
{
    troupe__completion *c;
    ck_assert_ok(troupe__completion_reserve(h, 9, &c));
    troupe_alloc_fail_after(0);
    troupe__completion_post(c, TROUPE_OK, "needs memory", 12);
    troupe_alloc_fail_after(-1);
    uint8_t buf[256];
    size_t len;
    ck_assert_ok(troupe_host_next(h, 0, buf, sizeof(buf), &len));
    ck_assert_uint_eq(len, TROUPE_HOST_RECORD_SIZE(8, 0));
    ck_assert_uint_eq(le(buf, 8), 9);
    ck_assert_int_eq((int32_t)le(buf + 32, 4), TROUPE_ENOMEM);
}
END_TEST

START_TEST(test_close_drops_and_refuses)
{
    troupe__completion *c, *d;
    post(1, TROUPE_OK, "queued");
    ck_assert_ok(troupe__completion_reserve(h, 2, &c));
    ck_assert_ok(troupe_host_close(h));
    ck_assert_err(troupe__completion_reserve(h, 3, &d), TROUPE_ECLOSED);
    troupe__completion_post(c, TROUPE_OK, "late", 4); /* freed */
    uint8_t buf[64];
    size_t len;
    ck_assert_err(troupe_host_next(h, 0, buf, sizeof(buf), &len),
                  TROUPE_ECLOSED);
    troupe_host_destroy(h); /* nothing reserved is left */
    h = NULL;
}
END_TEST

Suite *
completion_suite(void)
{
    Suite *s = suite_create("completion");
    TCase *tc = tcase_create("completion");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_records_in_order_without_reply);
    tcase_add_test(tc, test_bounds_by_count_and_bytes);
    tcase_add_test(tc, test_too_small_stays_first);
    tcase_add_test(tc, test_body_without_memory_is_enomem);
    tcase_add_test(tc, test_close_drops_and_refuses);
    suite_add_tcase(s, tc);
    return s;
}
