/*
 * Batches, point reads, snapshots, iterators and scan pages (cursor rules).
 */
#include <stdio.h>

#include "stest.h"

static char *dir;
static troupe_db *db;
static troupe_cf *cfa, *cfb;

static void
setup(void)
{
    dir = ts_tempdir("scan");
    const char *cfs[] = {"a", "b"};
    db = st_open(dir, cfs, 2);
    cfa = st_cf(db, "a");
    cfb = st_cf(db, "b");
}

static void
teardown(void)
{
    ck_assert_ok(troupe_db_close(db));
    ts_rmtree(dir);
    free(dir);
}

static int
bytes_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    int c = (an && bn) ? memcmp(a, b, an < bn ? an : bn) : 0;
    if (c != 0)
        return c;
    return (an > bn) - (an < bn);
}

/* ---- batches and writes ----------------------------------------------- */

START_TEST(test_batch_bad_args)
{
    ck_assert_err(troupe_batch_create(NULL), TROUPE_EINVAL);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_err(troupe_batch_put(NULL, cfa, "k", 1, "v", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_put(b, NULL, "k", 1, "v", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_put(b, cfa, NULL, 1, "v", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_put(b, cfa, "k", 0, "v", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_put(b, cfa, "k", 1, NULL, 1), TROUPE_EINVAL);
    static char big[TROUPE_KEY_MAX + 1];
    ck_assert_err(troupe_batch_put(b, cfa, big, sizeof(big), "v", 1),
                  TROUPE_ETOOBIG);
    ck_assert_ok(troupe_batch_put(b, cfa, big, TROUPE_KEY_MAX, "v", 1));
    ck_assert_err(
        troupe_batch_put(b, cfa, "k", 1, big, (size_t)TROUPE_VALUE_MAX + 1),
        TROUPE_ETOOBIG);
    ck_assert_err(troupe_batch_delete(NULL, cfa, "k", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete(b, NULL, "k", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete(b, cfa, NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete(b, cfa, "k", 0), TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete(b, cfa, big, sizeof(big)),
                  TROUPE_ETOOBIG);
    ck_assert_err(troupe_batch_delete_range(NULL, cfa, "a", 1, "b", 1),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete_range(b, cfa, "b", 1, "a", 1),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete_range(b, cfa, "a", 1, "a", 1),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_batch_delete_range(b, cfa, NULL, 0, "a", 1),
                  TROUPE_EINVAL);
    ck_assert_uint_eq(troupe_batch_count(b), 1); /* errors changed nothing */
    ck_assert_uint_eq(troupe_batch_count(NULL), 0);
    troupe_batch_clear(NULL);
    troupe_batch_destroy(b);
    troupe_batch_destroy(NULL);
}
END_TEST

START_TEST(test_batch_rejects_family_of_another_db_until_cleared)
{
    char *dir2 = ts_tempdir("scan2");
    troupe_db *db2 = st_open(dir2, NULL, 0);
    troupe_cf *other = st_cf(db2, TROUPE_CF_DEFAULT);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cfa, "k", 1, "v", 1));
    ck_assert_err(troupe_batch_put(b, other, "k", 1, "v", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_db_write(db2, b, TROUPE_SYNC_OFF), TROUPE_EINVAL);
    troupe_batch_clear(b);
    ck_assert_uint_eq(troupe_batch_count(b), 0);
    ck_assert_ok(troupe_batch_put(b, other, "k", 1, "w", 1));
    ck_assert_ok(troupe_db_write(db2, b, TROUPE_SYNC_OFF));
    st_assert_value(db2, other, "k", "w");
    st_assert_value(db, cfa, "k", NULL);
    troupe_batch_destroy(b);
    ck_assert_ok(troupe_db_close(db2));
    ts_rmtree(dir2);
    free(dir2);
}
END_TEST

START_TEST(test_write_bad_args)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_err(troupe_db_write(NULL, b, TROUPE_SYNC_OFF), TROUPE_EINVAL);
    ck_assert_err(troupe_db_write(db, NULL, TROUPE_SYNC_OFF), TROUPE_EINVAL);
    ck_assert_ok(troupe_batch_put(b, cfa, "k", 1, "v", 1));
    ck_assert_err(troupe_db_write(db, b, (troupe_sync)7), TROUPE_EINVAL);
    st_assert_value(db, cfa, "k", NULL);
    troupe_batch_destroy(b);
}
END_TEST

START_TEST(test_write_cross_cf_batch_applies_puts_deletes_ranges)
{
    st_put(db, cfa, "old", "x", TROUPE_SYNC_OFF);
    st_put(db, cfb, "r1", "x", TROUPE_SYNC_OFF);
    st_put(db, cfb, "r2", "x", TROUPE_SYNC_OFF);
    st_put(db, cfb, "r3", "x", TROUPE_SYNC_OFF);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cfa, "row", 3, "doc", 3));
    ck_assert_ok(troupe_batch_put(b, cfb, "idx", 3, "", 0));
    ck_assert_ok(troupe_batch_delete(b, cfa, "old", 3));
    ck_assert_ok(troupe_batch_delete_range(b, cfb, "r1", 2, "r3", 2));
    ck_assert_uint_eq(troupe_batch_count(b), 4);
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
    st_assert_value(db, cfa, "row", "doc");
    st_assert_value(db, cfb, "idx", "");
    st_assert_value(db, cfa, "old", NULL);
    st_assert_value(db, cfb, "r1", NULL);
    st_assert_value(db, cfb, "r2", NULL);
    st_assert_value(db, cfb, "r3", "x");
    st_assert_value(db, cfa, "idx", NULL); /* families are separate */
}
END_TEST

START_TEST(test_write_empty_batch_is_ok)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
}
END_TEST

START_TEST(test_write_batch_with_dropped_cf_is_enoent_and_writes_nothing)
{
    troupe_cf *x;
    ck_assert_ok(troupe_db_cf_create(db, "x", &x));
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_put(b, cfa, "k", 1, "v", 1));
    ck_assert_ok(troupe_batch_put(b, x, "k", 1, "v", 1));
    ck_assert_ok(troupe_db_cf_drop(db, "x"));
    ck_assert_err(troupe_db_write(db, b, TROUPE_SYNC_OFF), TROUPE_ENOENT);
    st_assert_value(db, cfa, "k", NULL);
    ck_assert(!troupe_db_failstop(db));
    troupe_batch_destroy(b);
}
END_TEST

/* ---- point reads and snapshots ---------------------------------------- */

START_TEST(test_get_bad_args_and_absent)
{
    void *v = (void *)db;
    size_t n = 9;
    ck_assert_err(troupe_db_get(NULL, cfa, NULL, "k", 1, &v, &n),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(v);
    ck_assert_uint_eq(n, 0);
    ck_assert_err(troupe_db_get(db, NULL, NULL, "k", 1, &v, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_db_get(db, cfa, NULL, NULL, 1, &v, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_db_get(db, cfa, NULL, "k", 0, &v, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_db_get(db, cfa, NULL, "k", 1, NULL, &n),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_db_get(db, cfa, NULL, "k", 1, &v, NULL),
                  TROUPE_EINVAL);
    static char big[TROUPE_KEY_MAX + 1];
    ck_assert_err(troupe_db_get(db, cfa, NULL, big, sizeof(big), &v, &n),
                  TROUPE_ETOOBIG);
    ck_assert_err(troupe_db_get(db, cfa, NULL, "k", 1, &v, &n), TROUPE_ENOENT);
    ck_assert_ptr_null(v);

    char *dir2 = ts_tempdir("scan2");
    troupe_db *db2 = st_open(dir2, NULL, 0);
    troupe_snapshot *s2;
    ck_assert_ok(troupe_snapshot_create(db2, &s2));
    ck_assert_err(troupe_db_get(db, cfa, s2, "k", 1, &v, &n), TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_get(db, st_cf(db2, TROUPE_CF_DEFAULT), NULL, "k", 1, &v, &n),
        TROUPE_EINVAL);
    troupe_snapshot_destroy(s2);
    ck_assert_ok(troupe_db_close(db2));
    ts_rmtree(dir2);
    free(dir2);
}
END_TEST

START_TEST(test_get_empty_value_is_non_null)
{
    st_put(db, cfa, "k", "", TROUPE_SYNC_OFF);
    void *v = NULL;
    size_t n = 5;
    ck_assert_ok(troupe_db_get(db, cfa, NULL, "k", 1, &v, &n));
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(n, 0);
    troupe_free(v);
}
END_TEST

START_TEST(test_get_enomem_copies_nothing)
{
    st_put(db, cfa, "k", "value", TROUPE_SYNC_OFF);
    void *v = (void *)db;
    size_t n;
    troupe_alloc_fail_after(0);
    troupe_err e = troupe_db_get(db, cfa, NULL, "k", 1, &v, &n);
    troupe_alloc_fail_after(-1);
    ck_assert_err(e, TROUPE_ENOMEM);
    ck_assert_ptr_null(v);
}
END_TEST

START_TEST(test_multi_get_mixed_present_and_absent)
{
    st_put(db, cfa, "k1", "one", TROUPE_SYNC_OFF);
    st_put(db, cfa, "k3", "three", TROUPE_SYNC_OFF);
    const void *keys[] = {"k1", "k2", "k3"};
    size_t lens[] = {2, 2, 2};
    void *vals[3];
    size_t vlens[3];
    troupe_err errs[3];
    ck_assert_ok(
        troupe_db_multi_get(db, cfa, NULL, 3, keys, lens, vals, vlens, errs));
    ck_assert_ok(errs[0]);
    ck_assert_err(errs[1], TROUPE_ENOENT);
    ck_assert_ok(errs[2]);
    ck_assert_uint_eq(vlens[0], 3);
    ck_assert_int_eq(memcmp(vals[0], "one", 3), 0);
    ck_assert_ptr_null(vals[1]);
    ck_assert_uint_eq(vlens[2], 5);
    ck_assert_int_eq(memcmp(vals[2], "three", 5), 0);
    troupe_free(vals[0]);
    troupe_free(vals[2]);
}
END_TEST

START_TEST(test_multi_get_bad_args)
{
    const void *keys[] = {"k1", ""};
    size_t lens[] = {2, 0};
    void *vals[2];
    size_t vlens[2];
    troupe_err errs[2];
    ck_assert_err(
        troupe_db_multi_get(NULL, cfa, NULL, 1, keys, lens, vals, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, NULL, NULL, 1, keys, lens, vals, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 0, keys, lens, vals, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 1, NULL, lens, vals, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 1, keys, NULL, vals, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 1, keys, lens, NULL, vlens, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 1, keys, lens, vals, NULL, errs),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 1, keys, lens, vals, vlens, NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 2, keys, lens, vals, vlens, errs),
        TROUPE_EINVAL); /* empty second key */
    static char big[TROUPE_KEY_MAX + 1];
    const void *bkeys[] = {big};
    size_t blens[] = {sizeof(big)};
    ck_assert_err(
        troupe_db_multi_get(db, cfa, NULL, 1, bkeys, blens, vals, vlens, errs),
        TROUPE_ETOOBIG);
}
END_TEST

START_TEST(test_snapshot_reads_see_the_past)
{
    st_put(db, cfa, "k", "v1", TROUPE_SYNC_OFF);
    st_put(db, cfa, "gone", "x", TROUPE_SYNC_OFF);
    troupe_snapshot *s;
    ck_assert_ok(troupe_snapshot_create(db, &s));
    st_put(db, cfa, "k", "v2", TROUPE_SYNC_OFF);
    st_put(db, cfa, "new", "y", TROUPE_SYNC_OFF);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    ck_assert_ok(troupe_batch_delete(b, cfa, "gone", 4));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);

    char *old = st_get(db, cfa, s, "k");
    ck_assert_str_eq(old, "v1");
    troupe_free(old);
    st_assert_value(db, cfa, "k", "v2");
    ck_assert_ptr_null(st_get(db, cfa, s, "new"));
    char *g = st_get(db, cfa, s, "gone");
    ck_assert_str_eq(g, "x");
    troupe_free(g);

    troupe_page *p;
    ck_assert_ok(troupe_db_scan(db, cfa, s, NULL, NULL, 0, 10, false, &p));
    ck_assert_uint_eq(p->n, 2); /* "gone", "k" */
    ck_assert_int_eq(memcmp(p->items[0].key, "gone", 4), 0);
    ck_assert_int_eq(memcmp(p->items[1].val, "v1", 2), 0);
    troupe_page_destroy(p);

    const void *keys[] = {"k", "new"};
    size_t lens[] = {1, 3};
    void *vals[2];
    size_t vlens[2];
    troupe_err errs[2];
    ck_assert_ok(
        troupe_db_multi_get(db, cfa, s, 2, keys, lens, vals, vlens, errs));
    ck_assert_ok(errs[0]);
    ck_assert_int_eq(memcmp(vals[0], "v1", 2), 0);
    ck_assert_err(errs[1], TROUPE_ENOENT);
    troupe_free(vals[0]);
    troupe_snapshot_destroy(s);
}
END_TEST

START_TEST(test_snapshot_bad_args)
{
    troupe_snapshot *s = (troupe_snapshot *)db;
    ck_assert_err(troupe_snapshot_create(NULL, &s), TROUPE_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_err(troupe_snapshot_create(db, NULL), TROUPE_EINVAL);
    troupe_snapshot_destroy(NULL);
}
END_TEST

/* ---- iterators --------------------------------------------------------- */

START_TEST(test_iter_forward_reverse_and_sticky_end)
{
    const char *ks[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++)
        st_put(db, cfa, ks[i], ks[i], TROUPE_SYNC_OFF);
    for (int rev = 0; rev < 2; rev++) {
        troupe_iter *it;
        ck_assert_ok(
            troupe_iter_create(db, cfa, NULL, NULL, NULL, 0, rev, &it));
        troupe_kv kv;
        for (int i = 0; i < 3; i++) {
            ck_assert_ok(troupe_iter_next(it, &kv));
            const char *want = ks[rev ? 2 - i : i];
            ck_assert_uint_eq(kv.key_len, 1);
            ck_assert_int_eq(kv.key[0], want[0]);
            ck_assert_int_eq(kv.val[0], want[0]);
        }
        ck_assert_err(troupe_iter_next(it, &kv), TROUPE_ENOENT);
        ck_assert_err(troupe_iter_next(it, &kv), TROUPE_ENOENT);
        ck_assert_ptr_null(kv.key);
        troupe_iter_destroy(it);
    }
}
END_TEST

START_TEST(test_iter_bad_args)
{
    troupe_iter *it = (troupe_iter *)db;
    ck_assert_err(troupe_iter_create(NULL, cfa, NULL, NULL, NULL, 0, 0, &it),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(it);
    ck_assert_err(troupe_iter_create(db, NULL, NULL, NULL, NULL, 0, 0, &it),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_iter_create(db, cfa, NULL, NULL, NULL, 0, 0, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_iter_create(db, cfa, NULL, NULL, NULL, 3, 0, &it),
                  TROUPE_EINVAL); /* NULL cursor with a length */
    ck_assert_err(troupe_iter_create(db, cfa, NULL, NULL, "", 0, 0, &it),
                  TROUPE_EINVAL); /* empty cursor */
    troupe_range r;
    troupe_range_init_bounds(&r, "b", 1, "c", 1);
    ck_assert_err(troupe_iter_create(db, cfa, NULL, &r, "a", 1, 0, &it),
                  TROUPE_ERANGE);
    troupe_kv kv;
    ck_assert_err(troupe_iter_next(NULL, &kv), TROUPE_EINVAL);
    ck_assert_ok(troupe_iter_create(db, cfa, NULL, NULL, NULL, 0, 0, &it));
    ck_assert_err(troupe_iter_next(it, NULL), TROUPE_EINVAL);
    troupe_iter_destroy(it);
    troupe_iter_destroy(NULL);
    troupe_range_init_bounds(NULL, NULL, 0, NULL, 0);
    troupe_range_init_prefix(NULL, NULL, 0);
}
END_TEST

/* ---- scan pages ------------------------------------------------------- */

START_TEST(test_scan_bad_args)
{
    troupe_page *p = (troupe_page *)db;
    troupe_range r;
    ck_assert_err(troupe_db_scan(db, cfa, NULL, NULL, NULL, 0, 0, false, &p),
                  TROUPE_EINVAL); /* limit 0 */
    ck_assert_ptr_null(p);
    ck_assert_err(troupe_db_scan(NULL, cfa, NULL, NULL, NULL, 0, 1, false, &p),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_db_scan(db, NULL, NULL, NULL, NULL, 0, 1, false, &p),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_db_scan(db, cfa, NULL, NULL, NULL, 0, 1, false, NULL),
                  TROUPE_EINVAL);
    troupe_range_init_bounds(&r, "b", 1, "a", 1); /* start > end */
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 1, false, &p),
                  TROUPE_EINVAL);
    troupe_range_init_bounds(&r, NULL, 0, "", 0); /* end pointer, no bytes */
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 1, false, &p),
                  TROUPE_EINVAL);
    troupe_range_init_bounds(&r, NULL, 2, NULL, 0); /* NULL with length */
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 1, false, &p),
                  TROUPE_EINVAL);
    troupe_range_init_prefix(&r, "p", 1);
    r.end = "q";
    r.end_len = 1; /* prefix ranges have no end */
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 1, false, &p),
                  TROUPE_EINVAL);
    static char big[TROUPE_KEY_MAX + 1];
    ck_assert_err(
        troupe_db_scan(db, cfa, NULL, NULL, big, sizeof(big), 1, false, &p),
        TROUPE_EINVAL);
    ck_assert_err(troupe_db_scan(db, cfa, NULL, NULL, "", 0, 1, false, &p),
                  TROUPE_EINVAL);
    ck_assert_ptr_null(p);
    troupe_page_destroy(NULL);
}
END_TEST

START_TEST(test_scan_cursor_outside_range_is_erange)
{
    troupe_page *p;
    troupe_range r;
    troupe_range_init_bounds(&r, "b", 1, "d", 1);
    for (int rev = 0; rev < 2; rev++) {
        ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, "a", 1, 5, rev, &p),
                      TROUPE_ERANGE);
        ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, "d", 1, 5, rev, &p),
                      TROUPE_ERANGE); /* end is exclusive */
        ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, "z", 1, 5, rev, &p),
                      TROUPE_ERANGE);
        ck_assert_ok(troupe_db_scan(db, cfa, NULL, &r, "b", 1, 5, rev, &p));
        troupe_page_destroy(p);
        ck_assert_ok(troupe_db_scan(db, cfa, NULL, &r, "c\xff", 2, 5, rev, &p));
        troupe_page_destroy(p);
    }
    troupe_range_init_prefix(&r, "ab", 2);
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, "aa", 2, 5, false, &p),
                  TROUPE_ERANGE);
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, "ac", 2, 5, true, &p),
                  TROUPE_ERANGE);
    ck_assert_err(troupe_db_scan(db, cfa, NULL, &r, "a", 1, 5, true, &p),
                  TROUPE_ERANGE);
    ck_assert_ok(troupe_db_scan(db, cfa, NULL, &r, "ab", 2, 5, true, &p));
    troupe_page_destroy(p);
}
END_TEST

/* The case "increment the last byte" gets wrong: keys that extend the
 * cursor ("ab" -> "ab\0", "ab\1") must not be skipped. */
START_TEST(test_scan_exact_key_continuation_keeps_extensions)
{
    static const struct {
        const char *k;
        size_t n;
    } ks[] = {{"ab", 2},         {"ab\x00", 3},     {"ab\x00\x00", 4},
              {"ab\x01", 3},     {"ab\xfe\xff", 4}, {"ab\xff", 3},
              {"ab\xff\xff", 4}, {"ac", 2}};
    const size_t nk = sizeof(ks) / sizeof(ks[0]);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    for (size_t i = 0; i < nk; i++)
        ck_assert_ok(troupe_batch_put(b, cfa, ks[i].k, ks[i].n, "v", 1));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
    for (int rev = 0; rev < 2; rev++) {
        uint8_t cur[8];
        size_t curn = 0;
        size_t seen = 0;
        for (;;) {
            troupe_page *p;
            ck_assert_ok(troupe_db_scan(db, cfa, NULL, NULL, curn ? cur : NULL,
                                        curn, 1, rev, &p));
            if (p->n == 0) {
                ck_assert(!p->more);
                ck_assert_ptr_null(p->cursor);
                troupe_page_destroy(p);
                break;
            }
            size_t want = rev ? nk - 1 - seen : seen;
            ck_assert_uint_eq(p->items[0].key_len, ks[want].n);
            ck_assert_int_eq(memcmp(p->items[0].key, ks[want].k, ks[want].n),
                             0);
            ck_assert_ptr_eq(p->cursor, p->items[0].key);
            ck_assert(p->more == (seen + 1 < nk));
            memcpy(cur, p->cursor, p->cursor_len);
            curn = p->cursor_len;
            seen++;
            troupe_page_destroy(p);
        }
        ck_assert_uint_eq(seen, nk);
    }
}
END_TEST

START_TEST(test_scan_prefix_all_ff_and_empty_prefix)
{
    static const struct {
        const char *k;
        size_t n;
    } ks[] = {{"\xfe", 1},
              {"\xff", 1},
              {"\xff\x00", 2},
              {"\xff\xff", 2},
              {"\xff\xff\x01", 3}};
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    for (size_t i = 0; i < 5; i++)
        ck_assert_ok(troupe_batch_put(b, cfa, ks[i].k, ks[i].n, "v", 1));
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
    troupe_range r;
    troupe_page *p;
    troupe_range_init_prefix(&r, "\xff\xff", 2); /* no prefix_end exists */
    ck_assert_ok(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 10, false, &p));
    ck_assert_uint_eq(p->n, 2);
    ck_assert_uint_eq(p->items[1].key_len, 3);
    troupe_page_destroy(p);
    troupe_range_init_prefix(&r, "\xff", 1);
    ck_assert_ok(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 10, true, &p));
    ck_assert_uint_eq(p->n, 4);
    ck_assert_uint_eq(p->items[0].key_len, 3); /* reverse: largest first */
    troupe_page_destroy(p);
    troupe_range_init_prefix(&r, NULL, 0);
    ck_assert_ok(troupe_db_scan(db, cfa, NULL, &r, NULL, 0, 10, false, &p));
    ck_assert_uint_eq(p->n, 5);
    ck_assert(!p->more);
    troupe_page_destroy(p);
}
END_TEST

START_TEST(test_scan_more_flag_false_on_exactly_full_last_page)
{
    st_put(db, cfa, "a", "1", TROUPE_SYNC_OFF);
    st_put(db, cfa, "b", "2", TROUPE_SYNC_OFF);
    troupe_page *p;
    ck_assert_ok(troupe_db_scan(db, cfa, NULL, NULL, NULL, 0, 2, false, &p));
    ck_assert_uint_eq(p->n, 2);
    ck_assert(!p->more);
    troupe_page_destroy(p);
    ck_assert_ok(troupe_db_scan(db, cfa, NULL, NULL, NULL, 0, 1, false, &p));
    ck_assert_uint_eq(p->n, 1);
    ck_assert(p->more);
    troupe_page_destroy(p);
}
END_TEST

START_TEST(test_scan_enomem_returns_no_page)
{
    st_put(db, cfa, "a", "1", TROUPE_SYNC_OFF);
    troupe_page *p = (troupe_page *)db;
    bool ok = false;
    /* Fail each of our allocation sites in turn, then none. */
    for (long n = 0; n < 32 && !ok; n++) {
        troupe_alloc_fail_after(n);
        troupe_err e =
            troupe_db_scan(db, cfa, NULL, NULL, NULL, 0, 10, false, &p);
        troupe_alloc_fail_after(-1);
        if (e == TROUPE_OK) {
            ck_assert_uint_eq(p->n, 1);
            troupe_page_destroy(p);
            ok = true;
            ck_assert_int_gt(n, 0);
        } else {
            ck_assert_err(e, TROUPE_ENOMEM);
            ck_assert_ptr_null(p);
        }
    }
    ck_assert(ok);
}
END_TEST

/* ---- randomised pagination against a model ---------------------------- */

#define MODEL_KEYS 300

typedef struct mkey {
    uint8_t b[6];
    size_t n;
} mkey;

static int
mkey_cmp(const void *x, const void *y)
{
    const mkey *a = x, *b = y;
    return bytes_cmp(a->b, a->n, b->b, b->n);
}

static void
rand_bytes(uint64_t *rng, uint8_t *out, size_t n)
{
    static const uint8_t alpha[] = {0x00, 0x01, 'a', 'b', 0xfe, 0xff};
    for (size_t i = 0; i < n; i++)
        out[i] = alpha[ts_rand(rng) % sizeof(alpha)];
}

static bool
in_range(const mkey *k, const troupe_range *r)
{
    if (r == NULL)
        return true;
    if (r->prefix)
        return k->n >= r->start_len &&
               (r->start_len == 0 || memcmp(k->b, r->start, r->start_len) == 0);
    if (r->start_len > 0 && bytes_cmp(k->b, k->n, r->start, r->start_len) < 0)
        return false;
    if (r->end != NULL && bytes_cmp(k->b, k->n, r->end, r->end_len) >= 0)
        return false;
    return true;
}

START_TEST(test_scan_random_pagination_matches_model)
{
    uint64_t rng = ts_seed("scan_model");
    mkey *keys = malloc(sizeof(mkey) * MODEL_KEYS);
    size_t nk = 0;
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    while (nk < MODEL_KEYS) {
        mkey k;
        k.n = 1 + ts_rand(&rng) % 5;
        rand_bytes(&rng, k.b, k.n);
        bool dup = false;
        for (size_t i = 0; i < nk && !dup; i++)
            dup = mkey_cmp(&keys[i], &k) == 0;
        if (dup)
            continue;
        keys[nk++] = k;
        ck_assert_ok(troupe_batch_put(b, cfa, k.b, k.n, k.b, k.n));
    }
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
    qsort(keys, nk, sizeof(mkey), mkey_cmp);

    mkey *want = malloc(sizeof(mkey) * MODEL_KEYS);
    for (int round = 0; round < 150; round++) {
        uint8_t s[4], e[4];
        size_t sn = ts_rand(&rng) % 4, en = 1 + ts_rand(&rng) % 3;
        rand_bytes(&rng, s, sn);
        rand_bytes(&rng, e, en);
        troupe_range r, *rp = &r;
        switch (ts_rand(&rng) % 4) {
        case 0:
            rp = NULL;
            break;
        case 1:
            troupe_range_init_prefix(&r, s, sn);
            break;
        case 2:
            troupe_range_init_bounds(&r, sn ? s : NULL, sn, NULL, 0);
            break;
        default:
            if (bytes_cmp(s, sn, e, en) > 0)
                troupe_range_init_bounds(&r, e, en, s, sn); /* sn > 0 */
            else
                troupe_range_init_bounds(&r, s, sn, e, en);
            break;
        }
        bool rev = ts_rand(&rng) % 2;
        size_t limit = 1 + ts_rand(&rng) % 40;
        /* Snapshot or not: deletions of the cursor key must not matter. */
        troupe_snapshot *snap = NULL;
        if (ts_rand(&rng) % 2)
            ck_assert_ok(troupe_snapshot_create(db, &snap));

        size_t nw = 0;
        for (size_t i = 0; i < nk; i++) {
            size_t j = rev ? nk - 1 - i : i;
            if (in_range(&keys[j], rp))
                want[nw++] = keys[j];
        }
        size_t got = 0;
        uint8_t cur[8];
        size_t curn = 0;
        bool more = true;
        while (more) {
            troupe_page *p;
            ck_assert_ok(troupe_db_scan(db, cfa, snap, rp, curn ? cur : NULL,
                                        curn, limit, rev, &p));
            ck_assert_uint_le(p->n, limit);
            for (size_t i = 0; i < p->n; i++, got++) {
                ck_assert_msg(got < nw, "round %d: extra key", round);
                ck_assert_int_eq(bytes_cmp(p->items[i].key, p->items[i].key_len,
                                           want[got].b, want[got].n),
                                 0);
                ck_assert_int_eq(bytes_cmp(p->items[i].val, p->items[i].val_len,
                                           want[got].b, want[got].n),
                                 0);
            }
            more = p->more;
            ck_assert(more == (got < nw));
            if (p->n > 0) {
                memcpy(cur, p->cursor, p->cursor_len);
                curn = p->cursor_len;
            }
            troupe_page_destroy(p);
            if (more && ts_rand(&rng) % 3 == 0) {
                /* Delete the cursor key, then put it back after the next
                 * page is read (keeps the model unchanged). */
                troupe_batch *d;
                ck_assert_ok(troupe_batch_create(&d));
                ck_assert_ok(troupe_batch_delete(d, cfa, cur, curn));
                ck_assert_ok(troupe_db_write(db, d, TROUPE_SYNC_OFF));
                troupe_batch_clear(d);
                troupe_page *q;
                ck_assert_ok(troupe_db_scan(db, cfa, snap, rp, cur, curn, limit,
                                            rev, &q));
                ck_assert_uint_gt(q->n, 0);
                ck_assert_int_eq(bytes_cmp(q->items[0].key, q->items[0].key_len,
                                           want[got].b, want[got].n),
                                 0);
                troupe_page_destroy(q);
                ck_assert_ok(troupe_batch_put(d, cfa, cur, curn, cur, curn));
                ck_assert_ok(troupe_db_write(db, d, TROUPE_SYNC_OFF));
                troupe_batch_destroy(d);
            }
        }
        ck_assert_uint_eq(got, nw);
        troupe_snapshot_destroy(snap);
    }
    free(want);
    free(keys);
}
END_TEST

Suite *
storage_scan_suite(void)
{
    Suite *s = suite_create("storage_scan");
    TCase *tc = tcase_create("batch_read_scan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc, test_batch_bad_args);
    tcase_add_test(tc, test_batch_rejects_family_of_another_db_until_cleared);
    tcase_add_test(tc, test_write_bad_args);
    tcase_add_test(tc, test_write_cross_cf_batch_applies_puts_deletes_ranges);
    tcase_add_test(tc, test_write_empty_batch_is_ok);
    tcase_add_test(
        tc, test_write_batch_with_dropped_cf_is_enoent_and_writes_nothing);
    tcase_add_test(tc, test_get_bad_args_and_absent);
    tcase_add_test(tc, test_get_empty_value_is_non_null);
    tcase_add_test(tc, test_get_enomem_copies_nothing);
    tcase_add_test(tc, test_multi_get_mixed_present_and_absent);
    tcase_add_test(tc, test_multi_get_bad_args);
    tcase_add_test(tc, test_snapshot_reads_see_the_past);
    tcase_add_test(tc, test_snapshot_bad_args);
    tcase_add_test(tc, test_iter_forward_reverse_and_sticky_end);
    tcase_add_test(tc, test_iter_bad_args);
    tcase_add_test(tc, test_scan_bad_args);
    tcase_add_test(tc, test_scan_cursor_outside_range_is_erange);
    tcase_add_test(tc, test_scan_exact_key_continuation_keeps_extensions);
    tcase_add_test(tc, test_scan_prefix_all_ff_and_empty_prefix);
    tcase_add_test(tc, test_scan_more_flag_false_on_exactly_full_last_page);
    tcase_add_test(tc, test_scan_enomem_returns_no_page);
    tcase_add_test(tc, test_scan_random_pagination_matches_model);
    suite_add_tcase(s, tc);
    return s;
}
