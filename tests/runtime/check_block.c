/* Blocking calls on a scheduler thread fail with EDEADLK instead of
 * waiting for themselves; the thread's error detail (troupe_errmsg). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "rtest.h"
#include "troupe/internal/runtime.h"

enum { K_BLOCK, K_N };

typedef struct block_log {
    atomic_int handler_err; /* -1 until the handler ran */
    char handler_msg[TROUPE_ERRMSG_MAX];
    atomic_int post_err;
    atomic_int outside_err;
} block_log;

static block_log blog;

static troupe_err
h_block(troupe_actor *self, void *s, const troupe_msg *m)
{
    troupe_err e = troupe_runtime_shutdown_wait(troupe_actor_runtime(self));
    snprintf(blog.handler_msg, sizeof(blog.handler_msg), "%s",
             troupe_errmsg(e));
    atomic_store(&blog.handler_err, (int)e);
    return TROUPE_OK;
}

static const troupe_handler_fn bhs[K_N] = {[K_BLOCK] = h_block};
static const troupe_actor_def bdef = {
    .name = "blocker", .handlers = bhs, .n_handlers = K_N};

static void
post_check(void *arg, troupe_runtime *rt)
{
    atomic_store(&blog.post_err, (int)troupe__block_check("post"));
}

static bool
set(void *arg)
{
    return atomic_load((atomic_int *)arg) != -1;
}

static void
reset(void)
{
    memset(&blog, 0, sizeof(blog));
    atomic_store(&blog.handler_err, -1);
    atomic_store(&blog.post_err, -1);
    atomic_store(&blog.outside_err, -1);
}

/* A handler that waits for its own runtime's shutdown would hang: it gets
 * EDEADLK with a detail that names the call, and nothing was started
 * (the runtime still takes sends, and shuts down from outside). */
START_TEST(test_shutdown_wait_in_a_handler_is_edeadlk_and_starts_nothing)
{
    reset();
    troupe_runtime *rt;
    troupe_runtime_opts o = {.schedulers = 2, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    troupe_addr a = rtf_spawn_on(rt, &bdef, 1);
    troupe_msg *m = mk(K_BLOCK);
    ck_assert_ok(troupe_runtime_send(rt, a, &m));
    ck_assert(ts_wait_until(set, &blog.handler_err, 10000));
    ck_assert_err(atomic_load(&blog.handler_err), TROUPE_EDEADLK);
    ck_assert_ptr_nonnull(
        strstr(blog.handler_msg, "troupe_runtime_shutdown_wait"));
    ck_assert_ok(troupe_runtime_post(rt, post_check, NULL));
    ck_assert(ts_wait_until(set, &blog.post_err, 10000));
    ck_assert_err(atomic_load(&blog.post_err), TROUPE_EDEADLK);
    ck_assert_ok(troupe__block_check("test"));
    m = mk(K_BLOCK); /* still running: a send is taken */
    ck_assert_ok(troupe_runtime_send(rt, a, &m));
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
}
END_TEST

/* Embedded: the host's thread may block between turns of its loop (a
 * blocking twin that does not need scheduler 0 works there), but not
 * inside a troupe callback that the loop runs. */
START_TEST(test_embedded_host_thread_blocks_only_outside_callbacks)
{
    reset();
    rt_fixture f;
    rtf_start(&f, 2);
    ck_assert_ok(troupe__block_check("between turns"));
    ck_assert_ok(troupe_runtime_post(f.rt, post_check, NULL));
    ck_assert(ts_run_until(&f.loop, set, &blog.post_err, 10000));
    ck_assert_err(atomic_load(&blog.post_err), TROUPE_EDEADLK);
    ck_assert_ok(troupe__block_check("after the callback"));
    rtf_stop(&f);
}
END_TEST

static void *
other_thread(void *arg)
{
    /* The main thread's detail is not this thread's. */
    atomic_store(&blog.outside_err, strcmp(troupe_errmsg(TROUPE_EINVAL),
                                           troupe_strerror(TROUPE_EINVAL)) == 0
                                        ? 0
                                        : 1);
    troupe__errf(TROUPE_EINVAL, "other thread");
    return NULL;
}

START_TEST(test_errmsg_is_keyed_by_code_and_per_thread)
{
    reset();
    ck_assert_err(troupe__errf(TROUPE_EINVAL, "limit %d exceeded", 7),
                  TROUPE_EINVAL);
    ck_assert_str_eq(troupe_errmsg(TROUPE_EINVAL), "limit 7 exceeded");
    /* another code: its generic text, never the old detail */
    ck_assert_str_eq(troupe_errmsg(TROUPE_ENOENT),
                     troupe_strerror(TROUPE_ENOENT));
    ck_assert_str_eq(troupe_errmsg(TROUPE_OK), troupe_strerror(TROUPE_OK));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, other_thread, NULL), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&blog.outside_err), 0);
    ck_assert_str_eq(troupe_errmsg(TROUPE_EINVAL), "limit 7 exceeded");
    /* a later detail with another code replaces it */
    troupe__errf(TROUPE_ENOENT, "second");
    ck_assert_str_eq(troupe_errmsg(TROUPE_EINVAL),
                     troupe_strerror(TROUPE_EINVAL));
    ck_assert_str_eq(troupe_errmsg(TROUPE_ENOENT), "second");
}
END_TEST

START_TEST(test_err_named_escapes_the_name_and_cuts_long_ones)
{
    const char name[] = "a\"b\\c\nd\0e\x7f";
    troupe__err_named(TROUPE_ENOENT, "no table", name, sizeof(name) - 1);
    ck_assert_str_eq(troupe_errmsg(TROUPE_ENOENT),
                     "no table \"a\\\"b\\\\c\\x0ad\\x00e\\x7f\"");
    char big[1000];
    memset(big, '\n', sizeof(big)); /* each byte escapes to four */
    troupe__err_named(TROUPE_ENOENT, "no queue", big, sizeof(big));
    const char *s = troupe_errmsg(TROUPE_ENOENT);
    size_t n = strlen(s);
    ck_assert_uint_lt(n, TROUPE_ERRMSG_MAX);
    ck_assert_uint_gt(n, TROUPE_ERRMSG_MAX - 12);
    ck_assert_str_eq(s + n - 4, "...\"");
    ck_assert_int_eq(strncmp(s, "no queue \"\\x0a", 14), 0);
    /* a prefix longer than the buffer still leaves a closed message */
    char what[400];
    memset(what, 'w', sizeof(what) - 1);
    what[sizeof(what) - 1] = '\0';
    troupe__err_named(TROUPE_EINVAL, what, "n", 1);
    s = troupe_errmsg(TROUPE_EINVAL);
    n = strlen(s);
    ck_assert_uint_lt(n, TROUPE_ERRMSG_MAX);
    ck_assert_int_eq(s[n - 1], '"');
}
END_TEST

Suite *
block_suite(void)
{
    Suite *s = suite_create("block");
    TCase *tc = tcase_create("core");
    tcase_add_test(
        tc, test_shutdown_wait_in_a_handler_is_edeadlk_and_starts_nothing);
    tcase_add_test(tc, test_embedded_host_thread_blocks_only_outside_callbacks);
    tcase_add_test(tc, test_errmsg_is_keyed_by_code_and_per_thread);
    tcase_add_test(tc, test_err_named_escapes_the_name_and_cuts_long_ones);
    suite_add_tcase(s, tc);
    return s;
}
