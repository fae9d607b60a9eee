/*
 * What the actors share: the key order (troupe_key_cmp, storage.h),
 * FNV-1a 64 (troupe/internal/hash.h), the blocking waiter
 * (troupe/internal/waiter.h), finishing on scheduler 0
 * (troupe/internal/post.h) and the stored formats several modules read
 * (troupe/internal/datafmt.h).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/hash.h"
#include "troupe/internal/post.h"
#include "troupe/internal/waiter.h"
#include "troupe/storage.h"
#include "tsupport.h"

static int
sign(int c)
{
    return (c > 0) - (c < 0);
}

/* ---- key order ---------------------------------------------------------- */

/* Asserts a < b both ways round and a == a. */
static void
ck_before(const void *a, size_t an, const void *b, size_t bn)
{
    ck_assert_int_eq(sign(troupe_key_cmp(a, an, b, bn)), -1);
    ck_assert_int_eq(sign(troupe_key_cmp(b, bn, a, an)), 1);
    ck_assert_int_eq(troupe_key_cmp(a, an, a, an), 0);
}

START_TEST(test_key_cmp_prefix_sorts_first)
{
    ck_before("ab", 2, "abc", 3);
    ck_before("a", 1, "a\0", 2); /* a zero byte still makes it longer */
    ck_before("abc", 3, "abd", 3);
    ck_before("abz", 3, "ac", 2); /* bytes before lengths */
}
END_TEST

START_TEST(test_key_cmp_bytes_are_unsigned)
{
    ck_before("\x7f", 1, "\x80", 1);
    ck_before("\x00", 1, "\xff", 1);
    ck_before("a\xfe", 2, "a\xff", 2);
    ck_before("\xff\xff", 2, "\xff\xff\x00", 3);
    ck_before("\xff", 1, "\xff\xff", 2);
}
END_TEST

START_TEST(test_key_cmp_empty_and_null)
{
    ck_assert_int_eq(troupe_key_cmp(NULL, 0, NULL, 0), 0);
    ck_assert_int_eq(troupe_key_cmp("", 0, NULL, 0), 0);
    ck_assert_int_eq(troupe_key_cmp("x", 0, "y", 0), 0); /* length rules */
    ck_before(NULL, 0, "a", 1);
    ck_before("", 0, "\x00", 1);
    ck_before(NULL, 0, "\xff", 1);
}
END_TEST

/* Keys that stress the order: prefixes of each other, 0x00 and 0xFF runs,
 * one byte apart. */
static size_t
tricky_keys(uint8_t keys[][4], size_t *lens, size_t cap)
{
    static const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
    size_t n = 0;
    for (size_t len = 1; len <= 3; len++) {
        size_t combos = 1;
        for (size_t i = 0; i < len; i++)
            combos *= sizeof(bytes);
        for (size_t c = 0; c < combos && n < cap; c++) {
            size_t v = c;
            for (size_t i = 0; i < len; i++) {
                keys[n][i] = bytes[v % sizeof(bytes)];
                v /= sizeof(bytes);
            }
            lens[n++] = len;
        }
    }
    return n;
}

typedef struct kref {
    const uint8_t *k;
    size_t n;
} kref;

static int
kref_cmp(const void *a, const void *b)
{
    const kref *x = a, *y = b;
    return troupe_key_cmp(x->k, x->n, y->k, y->n);
}

START_TEST(test_key_cmp_is_the_order_a_family_scans_in)
{
    enum { CAP = 6 + 36 + 216 };
    static uint8_t keys[CAP][4];
    static size_t lens[CAP];
    size_t n = tricky_keys(keys, lens, CAP);
    ck_assert_uint_eq(n, CAP);

    char *dir = ts_tempdir("keyorder");
    troupe_db *db = NULL;
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_open(dir, NULL, &db));
    ck_assert_ok(troupe_db_cf_create(db, "k", &cf));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_batch_create(&b));
    for (size_t i = 0; i < n; i++)
        ck_assert_ok(troupe_batch_put(b, cf, keys[i], lens[i], "", 0));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_DEFAULT));
    troupe_batch_destroy(b);

    kref *want = malloc(n * sizeof(*want));
    ck_assert_ptr_nonnull(want);
    for (size_t i = 0; i < n; i++)
        want[i] = (kref){keys[i], lens[i]};
    qsort(want, n, sizeof(*want), kref_cmp);

    troupe_range all;
    troupe_range_init_bounds(&all, NULL, 0, NULL, 0);
    troupe_iter *it = NULL;
    ck_assert_ok(troupe_iter_create(db, cf, NULL, &all, NULL, 0, false, &it));
    troupe_kv kv;
    size_t got = 0;
    troupe_err e;
    while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        ck_assert_uint_lt(got, n);
        ck_assert_uint_eq(kv.key_len, want[got].n);
        ck_assert_int_eq(memcmp(kv.key, want[got].k, kv.key_len), 0);
        got++;
    }
    ck_assert_err(e, TROUPE_ENOENT);
    ck_assert_uint_eq(got, n);
    troupe_iter_destroy(it);
    free(want);
    ck_assert_ok(troupe_db_close(db));
    ts_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- FNV-1a 64 ---------------------------------------------------------- */

START_TEST(test_fnv1a64_published_vectors)
{
    /* From the FNV authors' test suite (isthe.com/chongo/tech/comp/fnv). */
    ck_assert_uint_eq(troupe__fnv1a64("", 0), UINT64_C(0xcbf29ce484222325));
    ck_assert_uint_eq(troupe__fnv1a64(NULL, 0), UINT64_C(0xcbf29ce484222325));
    ck_assert_uint_eq(troupe__fnv1a64("a", 1), UINT64_C(0xaf63dc4c8601ec8c));
    ck_assert_uint_eq(troupe__fnv1a64("foobar", 6),
                      UINT64_C(0x85944171f73967e8));
    /* a byte above 0x7f is taken unsigned */
    ck_assert_uint_eq(troupe__fnv1a64("\xff\x00\x00\x01", 4),
                      UINT64_C(0x6961196491cc682d));
}
END_TEST

START_TEST(test_fnv1a64_from_continues_a_hash)
{
    uint64_t h = troupe__fnv1a64("foo", 3);
    ck_assert_uint_eq(troupe__fnv1a64_from(h, "bar", 3),
                      troupe__fnv1a64("foobar", 6));
    ck_assert_uint_eq(troupe__fnv1a64_from(h, NULL, 0), h);
    ck_assert_uint_eq(troupe__fnv1a64_from(TROUPE__FNV1A64_BASIS, "foobar", 6),
                      troupe__fnv1a64("foobar", 6));
}
END_TEST

/* ---- the blocking waiter ------------------------------------------------ */

static int token_a, token_b; /* results, compared by address */

START_TEST(test_waiter_release_before_wait_returns_at_once)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe__waiter_release(&w, TROUPE_EIO, &token_a);
    void *r = NULL;
    ck_assert_err(troupe__waiter_wait(&w, &r), TROUPE_EIO);
    ck_assert_ptr_eq(r, &token_a);
    /* a wait on a count already at 0 does not block either */
    ck_assert_err(troupe__waiter_wait(&w, NULL), TROUPE_EIO);
    troupe__waiter_fini(&w);

    troupe__waiter_init(&w, 0);
    ck_assert_ok(troupe__waiter_wait(&w, &r));
    ck_assert_ptr_null(r);
    troupe__waiter_fini(&w);
}
END_TEST

typedef struct releaser {
    troupe__waiter *w;
    atomic_int *go; /* released once *go is nonzero */
    troupe_err err;
    void *result;
} releaser;

static void *
release_main(void *arg)
{
    releaser *r = arg;
    while (r->go != NULL && atomic_load(r->go) == 0)
        sched_yield();
    troupe__waiter_release(r->w, r->err, r->result);
    return NULL;
}

START_TEST(test_waiter_release_from_another_thread_wakes_wait)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    atomic_int go = 0;
    releaser rl = {&w, &go, TROUPE_ENOENT, &token_b};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, release_main, &rl), 0);
    atomic_store(&go, 1); /* it releases while we wait, or just before */
    void *r = NULL;
    ck_assert_err(troupe__waiter_wait(&w, &r), TROUPE_ENOENT);
    ck_assert_ptr_eq(r, &token_b);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    troupe__waiter_fini(&w);
}
END_TEST

typedef struct waiting {
    troupe__waiter *w;
    atomic_int returned;
    troupe_err err;
    void *result;
} waiting;

static void *
wait_main(void *arg)
{
    waiting *x = arg;
    x->err = troupe__waiter_wait(x->w, &x->result);
    atomic_store(&x->returned, 1);
    return NULL;
}

START_TEST(test_waiter_count_of_3_waits_for_every_release)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe__waiter_hold(&w);
    troupe__waiter_hold(&w);
    ck_assert_uint_eq(atomic_load(&w.count), 3);
    waiting x = {.w = &w};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_main, &x), 0);
    /* the first error and the last non-NULL result are kept */
    troupe__waiter_release(&w, TROUPE_OK, &token_a);
    ck_assert_uint_eq(atomic_load(&w.count), 2);
    ck_assert_int_eq(atomic_load(&x.returned), 0);
    troupe__waiter_release(&w, TROUPE_EIO, NULL);
    ck_assert_uint_eq(atomic_load(&w.count), 1);
    ck_assert_int_eq(atomic_load(&x.returned), 0);
    troupe__waiter_release(&w, TROUPE_ENOENT, &token_b);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(atomic_load(&x.returned), 1);
    ck_assert_err(x.err, TROUPE_EIO);
    ck_assert_ptr_eq(x.result, &token_b);
    troupe__waiter_fini(&w);
}
END_TEST

START_TEST(test_waiter_hold_after_zero_rearms_it)
{
    /* the queue worker's use: the count of deliveries goes back to 0 and
     * up again while nobody waits */
    troupe__waiter w;
    troupe__waiter_init(&w, 0);
    for (int i = 0; i < 3; i++) {
        troupe__waiter_hold(&w);
        ck_assert_uint_eq(atomic_load(&w.count), 1);
        releaser rl = {&w, NULL, TROUPE_OK, NULL};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, release_main, &rl), 0);
        ck_assert_ok(troupe__waiter_wait(&w, NULL));
        ck_assert_uint_eq(atomic_load(&w.count), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
    }
    troupe__waiter_fini(&w);
}
END_TEST

START_TEST(test_waiter_finish_with_start_error_returns_it_at_once)
{
    /* the call that failed to start never fires its callback: finish
     * must not wait for a release */
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    void *r = &token_a;
    ck_assert_err(troupe__waiter_finish(&w, TROUPE_ESTATE, &r), TROUPE_ESTATE);
    ck_assert_ptr_null(r);
    troupe__waiter_init(&w, 1);
    ck_assert_err(troupe__waiter_finish(&w, TROUPE_EINVAL, NULL),
                  TROUPE_EINVAL);
}
END_TEST

START_TEST(test_waiter_finish_started_returns_the_release)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    releaser rl = {&w, NULL, TROUPE_ECONFLICT, &token_a};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, release_main, &rl), 0);
    void *r = NULL;
    ck_assert_err(troupe__waiter_finish(&w, TROUPE_OK, &r), TROUPE_ECONFLICT);
    ck_assert_ptr_eq(r, &token_a);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
}
END_TEST

/* The waiter is freed the moment its wait returns, while the threads that
 * released it may still be on their way out. The test spins until the
 * count reads 0, as early as it can be seen: a last release that brought
 * it to 0 before taking the mutex would then lock a mutex already
 * destroyed and freed (a hang here, or an ASan report). */
START_TEST(test_waiter_freed_right_after_wait_with_concurrent_releases)
{
    enum { ROUNDS = 200, THREADS = 4 };
    for (int round = 0; round < ROUNDS; round++) {
        troupe__waiter *w = malloc(sizeof(*w));
        ck_assert_ptr_nonnull(w);
        troupe__waiter_init(w, 1);
        for (int i = 1; i < THREADS; i++)
            troupe__waiter_hold(w);
        atomic_int go = 0;
        releaser rl[THREADS];
        pthread_t th[THREADS];
        for (int i = 0; i < THREADS; i++) {
            rl[i] = (releaser){w, &go, i == 2 ? TROUPE_EIO : TROUPE_OK, NULL};
            ck_assert_int_eq(pthread_create(&th[i], NULL, release_main, &rl[i]),
                             0);
        }
        atomic_store(&go, 1);
        while (atomic_load(&w->count) != 0)
            continue;
        ck_assert_err(troupe__waiter_finish(w, TROUPE_OK, NULL), TROUPE_EIO);
        free(w);
        for (int i = 0; i < THREADS; i++)
            ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    }
}
END_TEST

/* ---- finishing on scheduler 0 ------------------------------------------- */

typedef struct posted {
    atomic_int runs;
    pthread_t on;
    troupe_runtime *rt;
} posted;

static void
posted_fn(void *arg, troupe_runtime *rt)
{
    posted *p = arg;
    p->on = pthread_self();
    p->rt = rt;
    atomic_fetch_add(&p->runs, 1);
}

static bool
posted_ran(void *arg)
{
    return atomic_load(&((posted *)arg)->runs) > 0;
}

/* ---- stored formats ---------------------------------------------------- */

START_TEST(test_cf_name_every_kind_and_its_bounds)
{
    char b[TROUPE__CF_NAME_LEN];
    const char kinds[] = {'t', 'm', 'x', 'q'};
    for (size_t i = 0; i < sizeof(kinds); i++) {
        ck_assert_ok(troupe__cf_name(kinds[i], 42, b, sizeof(b)));
        char want[8] = {kinds[i], '.', '4', '2', 0};
        ck_assert_str_eq(b, want);
    }
    ck_assert_ok(troupe__cf_name('x', UINT64_MAX, b, sizeof(b)));
    ck_assert_str_eq(b, "x.18446744073709551615");
    ck_assert_err(troupe__cf_name('z', 1, b, sizeof(b)), TROUPE_EINVAL);
    ck_assert_err(troupe__cf_name('t', 1, b, sizeof(b) - 1), TROUPE_EINVAL);
    ck_assert_err(troupe__cf_name('t', 1, NULL, 64), TROUPE_EINVAL);
}
END_TEST

typedef struct envcase {
    const char *what;
    const char *b;
    size_t n;
    troupe_err want;
    int64_t expires;
    size_t doc_at; /* where the doc starts (OK only) */
} envcase;

START_TEST(test_envelope_both_paths_and_what_is_corrupt)
{
    static const envcase cases[] = {
        {"fast path", "\x93\x01\x05\x81\xa1k\x01", 7, TROUPE_OK, 5, 3},
        {"general path", "\x93\xcc\x01\xcd\x01\x00\x80", 7, TROUPE_OK, 256, 6},
        {"largest expiry", "\x93\x01\xcf\x7f\xff\xff\xff\xff\xff\xff\xff\x80",
         12, TROUPE_OK, INT64_MAX, 11},
        {"expiry past int64",
         "\x93\x01\xcf\x80\x00\x00\x00\x00\x00\x00\x00\x80", 12,
         TROUPE_ECORRUPT, 0, 0},
        {"negative expiry", "\x93\x01\xff\x80", 4, TROUPE_ECORRUPT, 0, 0},
        {"version 2", "\x93\x02\x00\x80", 4, TROUPE_ECORRUPT, 0, 0},
        {"doc not a map", "\x93\x01\x00\x90", 4, TROUPE_ECORRUPT, 0, 0},
        {"four elements", "\x94\x01\x00\x80\xc0", 5, TROUPE_ECORRUPT, 0, 0},
        {"bytes after it", "\x93\x01\x00\x80\xc0", 5, TROUPE_ECORRUPT, 0, 0},
        {"truncated doc", "\x93\x01\x00\x81\xa1", 5, TROUPE_ECORRUPT, 0, 0},
        {"empty", "", 0, TROUPE_ECORRUPT, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const envcase *c = &cases[i];
        int64_t exp = -1;
        const void *doc = NULL;
        size_t dl = 0;
        troupe_err e = troupe__envelope_parse(c->b, c->n, &exp, &doc, &dl);
        ck_assert_msg(e == c->want, "%s: %s", c->what, troupe_err_name(e));
        if (e != TROUPE_OK)
            continue;
        ck_assert_msg(exp == c->expires, "%s: expires %lld", c->what,
                      (long long)exp);
        ck_assert_ptr_eq(doc, c->b + c->doc_at);
        ck_assert_uint_eq(dl, c->n - c->doc_at);
    }
    ck_assert(troupe__row_live(0, INT64_MAX));
    ck_assert(troupe__row_live(11, 10));
    ck_assert(!troupe__row_live(10, 10));
}
END_TEST

/* Parses m with the suffix (NULL: verify's mode), checks the entry count,
 * frees the entries. */
static troupe_err
man_parse(const char *m, size_t n, const char *suffix, size_t *count)
{
    mentry *v = (mentry *)1;
    size_t cnt = 99;
    troupe_err e = troupe__manifest_parse(
        m, n, (const uint8_t *)suffix, suffix ? strlen(suffix) : 0, &v, &cnt);
    if (e != TROUPE_OK)
        ck_assert(v == NULL && cnt == 0);
    *count = cnt;
    troupe_free(v);
    return e;
}

START_TEST(test_manifest_suffix_rule_and_verify_mode)
{
    size_t n;
    /* [1, [[1, "ab"], [1, "cb"], [2, "b"]]] */
    const char ok3[] = "\x92\x01\x93\x92\x01\xc4\x02"
                       "ab"
                       "\x92\x01\xc4\x02"
                       "cb"
                       "\x92\x02\xc4\x01"
                       "b";
    ck_assert_ok(man_parse(ok3, sizeof(ok3) - 1, NULL, &n));
    ck_assert_uint_eq(n, 3);
    /* "b" is the third key whole: a row's keys are longer than its pk */
    ck_assert_err(man_parse(ok3, sizeof(ok3) - 1, "b", &n), TROUPE_ECORRUPT);
    ck_assert_err(man_parse(ok3, sizeof(ok3) - 1, "c", &n), TROUPE_ECORRUPT);
    /* [1, [[1, "ab"], [1, "cb"]]] */
    const char ok2[] = "\x92\x01\x92\x92\x01\xc4\x02"
                       "ab"
                       "\x92\x01\xc4\x02"
                       "cb";
    ck_assert_ok(man_parse(ok2, sizeof(ok2) - 1, "b", &n));
    ck_assert_uint_eq(n, 2);
    ck_assert_ok(man_parse(ok2, sizeof(ok2) - 1, "", &n));
    /* [1, []] */
    ck_assert_ok(man_parse("\x92\x01\x90", 3, "b", &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_ok(man_parse("\x92\x01\x90", 3, NULL, &n));
    /* refused in both modes: out of order, repeated, an empty key, a
     * string key, version 2, bytes after it */
    const char *bad[] = {
        "\x92\x01\x92\x92\x01\xc4\x02"
        "cb"
        "\x92\x01\xc4\x02"
        "ab",
        "\x92\x01\x92\x92\x01\xc4\x02"
        "ab"
        "\x92\x01\xc4\x02"
        "ab",
        "\x92\x01\x91\x92\x01\xc4\x00",
        "\x92\x01\x91\x92\x01\xa2"
        "ab",
        "\x92\x02\x90",
        "\x92\x01\x90\xc0",
    };
    const size_t blen[] = {15, 15, 7, 8, 3, 4};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_err(man_parse(bad[i], blen[i], NULL, &n), TROUPE_ECORRUPT);
        ck_assert_err(man_parse(bad[i], blen[i], "b", &n), TROUPE_ECORRUPT);
    }
}
END_TEST

START_TEST(test_post_or_run_posts_to_scheduler_0_then_runs_here_once_closed)
{
    troupe_runtime *rt = NULL;
    troupe_runtime_opts o = {.schedulers = 2, .workers = 1};
    ck_assert_ok(troupe_runtime_create(&rt, &o));
    /* running: on scheduler 0's thread, not this one */
    posted p = {0};
    troupe__post_or_run(rt, posted_fn, &p);
    ck_assert(ts_wait_until(posted_ran, &p, 10000));
    ck_assert_int_eq(atomic_load(&p.runs), 1);
    ck_assert(!pthread_equal(p.on, pthread_self()));
    ck_assert_ptr_eq(p.rt, rt);
    /* scheduler 0 has closed: post refuses, so it runs here, at once */
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    ck_assert_err(troupe_runtime_post(rt, posted_fn, &p), TROUPE_ECLOSED);
    posted q = {0};
    troupe__post_or_run(rt, posted_fn, &q);
    ck_assert_int_eq(atomic_load(&q.runs), 1);
    ck_assert(pthread_equal(q.on, pthread_self()));
    ck_assert_ptr_eq(q.rt, rt);
    troupe_runtime_destroy(rt);
    ck_assert_int_eq(atomic_load(&p.runs), 1);
}
END_TEST

Suite *
common_suite(void);

Suite *
common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("key_order");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_key_cmp_prefix_sorts_first);
    tcase_add_test(tc, test_key_cmp_bytes_are_unsigned);
    tcase_add_test(tc, test_key_cmp_empty_and_null);
    tcase_add_test(tc, test_key_cmp_is_the_order_a_family_scans_in);
    suite_add_tcase(s, tc);
    tc = tcase_create("datafmt");
    tcase_add_test(tc, test_cf_name_every_kind_and_its_bounds);
    tcase_add_test(tc, test_envelope_both_paths_and_what_is_corrupt);
    tcase_add_test(tc, test_manifest_suffix_rule_and_verify_mode);
    suite_add_tcase(s, tc);
    tc = tcase_create("fnv1a64");
    tcase_add_test(tc, test_fnv1a64_published_vectors);
    tcase_add_test(tc, test_fnv1a64_from_continues_a_hash);
    suite_add_tcase(s, tc);
    tc = tcase_create("waiter");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_waiter_release_before_wait_returns_at_once);
    tcase_add_test(tc, test_waiter_release_from_another_thread_wakes_wait);
    tcase_add_test(tc, test_waiter_count_of_3_waits_for_every_release);
    tcase_add_test(tc, test_waiter_hold_after_zero_rearms_it);
    tcase_add_test(tc, test_waiter_finish_with_start_error_returns_it_at_once);
    tcase_add_test(tc, test_waiter_finish_started_returns_the_release);
    tcase_add_test(tc,
                   test_waiter_freed_right_after_wait_with_concurrent_releases);
    suite_add_tcase(s, tc);
    tc = tcase_create("post");
    tcase_set_timeout(tc, 60);
    tcase_add_test(
        tc, test_post_or_run_posts_to_scheduler_0_then_runs_here_once_closed);
    suite_add_tcase(s, tc);
    return s;
}
