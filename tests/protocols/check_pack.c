/* Body packer and reader: round trips at every encoding width, strict type
 * checks, sticky errors, limits, bad arguments. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/wire.h"

static const uint64_t uints[] = {0,
                                 1,
                                 127,
                                 128,
                                 255,
                                 256,
                                 65535,
                                 65536,
                                 UINT32_MAX,
                                 (uint64_t)UINT32_MAX + 1,
                                 (uint64_t)INT64_MAX,
                                 UINT64_MAX};
static const int64_t ints[] = {
    -1,        -31,    -32,    -33,      -127,      -128,
    -129,      -32767, -32768, -32769,   INT32_MIN, (int64_t)INT32_MIN - 1,
    INT64_MIN, 0,      5,      INT64_MAX};
static const size_t lens[] = {0, 1, 31, 32, 255, 256, 65535, 65536, 70000};
#define N(a) (sizeof(a) / sizeof((a)[0]))

START_TEST(test_pack_every_type_and_width_reads_back)
{
    char *big = malloc(70000);
    memset(big, 'z', 70000);
    troupe_packer p;
    troupe_pack_init(&p);
    uint32_t n = (uint32_t)(N(uints) + N(ints) + 2 * N(lens) + 6);
    ck_assert_ok(troupe_pack_array(&p, n));
    for (size_t i = 0; i < N(uints); i++)
        ck_assert_ok(troupe_pack_uint(&p, uints[i]));
    for (size_t i = 0; i < N(ints); i++)
        ck_assert_ok(troupe_pack_int(&p, ints[i]));
    for (size_t i = 0; i < N(lens); i++) {
        ck_assert_ok(troupe_pack_str(&p, big, lens[i]));
        ck_assert_ok(troupe_pack_bin(&p, big, lens[i]));
    }
    ck_assert_ok(troupe_pack_nil(&p));
    ck_assert_ok(troupe_pack_bool(&p, true));
    ck_assert_ok(troupe_pack_bool(&p, false));
    ck_assert_ok(troupe_pack_double(&p, -1.5e300));
    ck_assert_ok(troupe_pack_cstr(&p, "users"));
    ck_assert_ok(troupe_pack_map(&p, 1));
    ck_assert_ok(troupe_pack_cstr(&p, "k"));
    ck_assert_ok(troupe_pack_array(&p, 0));
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_pack_take_msg(&p, 42, &m));
    ck_assert_ptr_null(p.data); /* taken */
    ck_assert_uint_eq(m->kind, 42);

    troupe_reader r;
    ck_assert_ok(troupe_reader_init_msg(&r, m));
    uint32_t got_n;
    ck_assert_ok(troupe_read_array(&r, &got_n));
    ck_assert_uint_eq(got_n, n);
    for (size_t i = 0; i < N(uints); i++) {
        uint64_t v;
        ck_assert_int_eq(troupe_read_peek(&r), TROUPE_MP_UINT);
        ck_assert_ok(troupe_read_uint(&r, &v));
        ck_assert_uint_eq(v, uints[i]);
    }
    for (size_t i = 0; i < N(ints); i++) {
        int64_t v;
        ck_assert_ok(troupe_read_int(&r, &v));
        ck_assert_int_eq(v, ints[i]);
    }
    for (size_t i = 0; i < N(lens); i++) {
        const char *s;
        const void *b;
        size_t len;
        ck_assert_ok(troupe_read_str(&r, SIZE_MAX, &s, &len));
        ck_assert_uint_eq(len, lens[i]);
        ck_assert(len == 0 || memcmp(s, big, len) == 0);
        ck_assert_ok(troupe_read_bin(&r, lens[i], &b, &len));
        ck_assert_uint_eq(len, lens[i]);
        ck_assert(len == 0 || memcmp(b, big, len) == 0);
    }
    bool t, f;
    double d;
    ck_assert(troupe_read_try_nil(&r));
    ck_assert(!troupe_read_try_nil(&r));
    ck_assert_ok(troupe_read_bool(&r, &t));
    ck_assert_ok(troupe_read_bool(&r, &f));
    ck_assert(t && !f);
    ck_assert_ok(troupe_read_double(&r, &d));
    ck_assert(d == -1.5e300);
    const char *s;
    size_t len;
    ck_assert_ok(troupe_read_str(&r, 5, &s, &len));
    ck_assert_mem_eq(s, "users", 5);
    ck_assert_ok(troupe_read_map_n(&r, 1));
    ck_assert_ok(troupe_read_str(&r, 1, &s, &len));
    ck_assert_ok(troupe_read_array_n(&r, 0));
    ck_assert_int_eq(troupe_read_peek(&r), TROUPE_MP_NONE);
    ck_assert_ok(troupe_read_end(&r));
    troupe_msg_destroy(m);
    free(big);
}
END_TEST

START_TEST(test_pack_integers_use_the_smallest_form)
{
    const struct {
        int64_t v;
        size_t len;
    } cases[] = {{0, 1},     {127, 1},       {128, 2},      {-32, 1},
                 {-33, 2},   {-128, 2},      {-129, 3},     {65535, 3},
                 {65536, 5}, {INT64_MIN, 9}, {INT64_MAX, 9}};
    for (size_t i = 0; i < N(cases); i++) {
        troupe_packer p;
        troupe_pack_init(&p);
        ck_assert_ok(troupe_pack_int(&p, cases[i].v));
        size_t len;
        troupe_pack_data(&p, &len);
        ck_assert_uint_eq(len, cases[i].len);
        troupe_pack_fini(&p);
    }
}
END_TEST

START_TEST(test_pack_count_mismatch_fails_at_take)
{
    troupe_packer p;
    troupe_body *b = NULL;
    /* too few */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    ck_assert_err(troupe_pack_take_body(&p, &b), TROUPE_EPROTO);
    ck_assert_ptr_null(b);
    ck_assert_ptr_null(p.data);
    /* too many: two top-level objects */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, 2);
    ck_assert_err(troupe_pack_take_body(&p, &b), TROUPE_EPROTO);
    /* nothing */
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_take_body(&p, &b), TROUPE_EPROTO);
    /* a map needs two values per pair */
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_uint(&p, 1);
    troupe_msg *m = NULL;
    ck_assert_err(troupe_pack_take_msg(&p, 1, &m), TROUPE_EPROTO);
    ck_assert_ptr_null(m);
    ck_assert_ptr_null(b);
}
END_TEST

START_TEST(test_pack_error_is_sticky)
{
    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_ok(troupe_pack_array(&p, 2));
    ck_assert_err(troupe_pack_str(&p, NULL, 3), TROUPE_EINVAL);
    size_t len_before;
    troupe_pack_data(&p, &len_before);
    ck_assert_err(troupe_pack_uint(&p, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_cstr(&p, "x"), TROUPE_EINVAL);
    size_t len_after;
    troupe_pack_data(&p, &len_after);
    ck_assert_uint_eq(len_before, len_after); /* nothing appended */
    troupe_body *b = NULL;
    ck_assert_err(troupe_pack_take_body(&p, &b), TROUPE_EINVAL);
    ck_assert_ptr_null(b);
    /* fini'd: usable again */
    troupe_pack_init(&p);
    ck_assert_ok(troupe_pack_uint(&p, 3));
    ck_assert_ok(troupe_pack_take_body(&p, &b));
    ck_assert_uint_eq(troupe_body_len(b), 1);
    troupe_body_release(b);
}
END_TEST

START_TEST(test_pack_over_body_limit_is_etoobig)
{
    troupe_packer p;
    troupe_pack_init(&p);
    void *big = calloc(1, TROUPE_WIRE_BODY_MAX);
    ck_assert_err(troupe_pack_bin(&p, big, TROUPE_WIRE_BODY_MAX),
                  TROUPE_ETOOBIG); /* header + bytes exceed the cap */
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_ok(troupe_pack_bin(&p, big, TROUPE_WIRE_BODY_MAX - 5));
    troupe_body *b;
    ck_assert_ok(troupe_pack_take_body(&p, &b));
    ck_assert_uint_eq(troupe_body_len(b), TROUPE_WIRE_BODY_MAX);
    troupe_body_release(b);
    free(big);
}
END_TEST

START_TEST(test_pack_raw_copies_one_object_and_refuses_garbage)
{
    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_ok(troupe_pack_array(&p, 2));
    ck_assert_ok(troupe_pack_raw(&p, "\x92\x01\xa1x", 4));
    ck_assert_ok(troupe_pack_raw(&p, "\xc0", 1));
    troupe_body *b;
    ck_assert_ok(troupe_pack_take_body(&p, &b));
    ck_assert_uint_eq(troupe_body_len(b), 6);
    ck_assert_mem_eq(troupe_body_data(b), "\x92\x92\x01\xa1x\xc0", 6);
    troupe_body_release(b);

    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_raw(&p, "\x92\x01", 2), TROUPE_EPROTO);
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_raw(&p, "\x01\x02", 2), TROUPE_EPROTO);
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_raw(&p, "", 0), TROUPE_EPROTO);
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_raw(&p, "\xdd\xff\xff\xff\xff", 5),
                  TROUPE_EPROTO);
    troupe_pack_fini(&p);
}
END_TEST

START_TEST(test_pack_allocation_failure_is_enomem)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_alloc_fail_after(0);
    ck_assert_err(troupe_pack_uint(&p, 1), TROUPE_ENOMEM);
    troupe_alloc_fail_after(-1);
    ck_assert_err(troupe_pack_uint(&p, 1), TROUPE_ENOMEM); /* sticky */
    troupe_pack_fini(&p);

    /* adopting the buffer, then creating the message */
    for (long at = 0; at < 2; at++) {
        troupe_pack_init(&p);
        ck_assert_ok(troupe_pack_uint(&p, 7));
        troupe_msg *m = NULL;
        troupe_alloc_fail_after(at);
        troupe_err e = troupe_pack_take_msg(&p, 1, &m);
        troupe_alloc_fail_after(-1);
        ck_assert_err(e, TROUPE_ENOMEM);
        ck_assert_ptr_null(m);
        ck_assert_ptr_null(p.data);
    }
}
END_TEST

START_TEST(test_pack_bad_arguments)
{
    troupe_pack_init(NULL);
    troupe_pack_fini(NULL);
    ck_assert_err(troupe_pack_nil(NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_bool(NULL, true), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_uint(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_int(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_double(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_str(NULL, "x", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_cstr(NULL, "x"), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_bin(NULL, "x", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_array(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_map(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_raw(NULL, "\xc0", 1), TROUPE_EINVAL);
    ck_assert_ptr_null(troupe_pack_data(NULL, NULL));
    size_t len = 9;
    ck_assert_ptr_null(troupe_pack_data(NULL, &len));
    ck_assert_uint_eq(len, 0);
    troupe_body *b = NULL;
    troupe_msg *m = NULL;
    ck_assert_err(troupe_pack_take_body(NULL, &b), TROUPE_EINVAL);
    ck_assert_err(troupe_pack_take_msg(NULL, 1, &m), TROUPE_EINVAL);

    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_cstr(&p, NULL), TROUPE_EINVAL);
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_bin(&p, NULL, 2), TROUPE_EINVAL);
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_err(troupe_pack_raw(&p, NULL, 1), TROUPE_EINVAL);
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    ck_assert_ok(troupe_pack_str(&p, NULL, 0)); /* empty is fine */
    ck_assert_ok(troupe_pack_bin(&p, NULL, 0));
    troupe_pack_fini(&p);
    troupe_pack_init(&p);
    troupe_pack_uint(&p, 1);
    ck_assert_err(troupe_pack_take_body(&p, NULL), TROUPE_EINVAL);
    ck_assert_ptr_null(p.data); /* fini'd on failure too */
    troupe_pack_init(&p);
    troupe_pack_uint(&p, 1);
    ck_assert_err(troupe_pack_take_msg(&p, 1, NULL), TROUPE_EINVAL);
    ck_assert_ptr_null(p.data);
}
END_TEST

Suite *
pack_suite(void)
{
    Suite *s = suite_create("pack");
    TCase *tc = tcase_create("packer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pack_every_type_and_width_reads_back);
    tcase_add_test(tc, test_pack_integers_use_the_smallest_form);
    tcase_add_test(tc, test_pack_count_mismatch_fails_at_take);
    tcase_add_test(tc, test_pack_error_is_sticky);
    tcase_add_test(tc, test_pack_over_body_limit_is_etoobig);
    tcase_add_test(tc, test_pack_raw_copies_one_object_and_refuses_garbage);
    tcase_add_test(tc, test_pack_allocation_failure_is_enomem);
    tcase_add_test(tc, test_pack_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- reader ---- */

/* One value of each type, for mismatch checks. */
static const struct {
    troupe_mp_type type;
    const char *bytes;
    size_t len;
} samples[] = {
    {TROUPE_MP_NIL, "\xc0", 1},
    {TROUPE_MP_BOOL, "\xc3", 1},
    {TROUPE_MP_UINT, "\x05", 1},
    {TROUPE_MP_INT, "\xff", 1},
    {TROUPE_MP_FLOAT, "\xca\x3f\x80\x00\x00", 5},
    {TROUPE_MP_STR, "\xa1x", 2},
    {TROUPE_MP_BIN, "\xc4\x01x", 3},
    {TROUPE_MP_ARRAY, "\x91\x01", 2},
    {TROUPE_MP_MAP, "\x81\x01\x02", 3},
    {TROUPE_MP_EXT, "\xd4\x01\x02", 3},
};

/* Calls the reader for type t; returns its error. */
static troupe_err
read_as(troupe_reader *r, troupe_mp_type t)
{
    bool b;
    uint64_t u;
    int64_t i;
    double d;
    const char *s;
    const void *v;
    size_t len;
    uint32_t n;
    switch (t) {
    case TROUPE_MP_NIL:
        return troupe_read_nil(r);
    case TROUPE_MP_BOOL:
        return troupe_read_bool(r, &b);
    case TROUPE_MP_UINT:
        return troupe_read_uint(r, &u);
    case TROUPE_MP_INT:
        return troupe_read_int(r, &i);
    case TROUPE_MP_FLOAT:
        return troupe_read_double(r, &d);
    case TROUPE_MP_STR:
        return troupe_read_str(r, 100, &s, &len);
    case TROUPE_MP_BIN:
        return troupe_read_bin(r, 100, &v, &len);
    case TROUPE_MP_ARRAY:
        return troupe_read_array(r, &n);
    case TROUPE_MP_MAP:
        return troupe_read_map(r, &n);
    default:
        return troupe_read_skip(r);
    }
}

START_TEST(test_read_every_type_mismatch_is_eproto)
{
    int checked = 0;
    for (size_t v = 0; v < N(samples); v++) {
        for (size_t t = 0; t < N(samples); t++) {
            troupe_reader r;
            ck_assert_ok(
                troupe_reader_init(&r, samples[v].bytes, samples[v].len));
            ck_assert_int_eq(troupe_read_peek(&r), samples[v].type);
            troupe_mp_type want = samples[t].type;
            troupe_err e = read_as(&r, want);
            bool match =
                want == samples[v].type || want == TROUPE_MP_EXT ||
                /* read_int takes non-negative integers too */
                (want == TROUPE_MP_INT && samples[v].type == TROUPE_MP_UINT);
            if (match) {
                ck_assert_ok(e);
            } else {
                ck_assert_err(e, TROUPE_EPROTO);
                /* sticky, and the value was not consumed */
                ck_assert_err(troupe_read_skip(&r), TROUPE_EPROTO);
                ck_assert_err(troupe_read_end(&r), TROUPE_EPROTO);
                ck_assert_int_eq(troupe_read_peek(&r), TROUPE_MP_NONE);
                ck_assert(!troupe_read_try_nil(&r));
            }
            checked++;
        }
    }
    ck_assert_int_eq(checked, (int)(N(samples) * N(samples)));
}
END_TEST

START_TEST(test_read_integer_ranges)
{
    troupe_reader r;
    uint32_t u32;
    uint64_t u;
    int64_t i;
    /* UINT32_MAX + 1 */
    ck_assert_ok(
        troupe_reader_init(&r, "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 9));
    ck_assert_err(troupe_read_u32(&r, &u32), TROUPE_EPROTO);
    ck_assert_ok(troupe_reader_init(&r, "\xce\xff\xff\xff\xff", 5));
    ck_assert_ok(troupe_read_u32(&r, &u32));
    ck_assert_uint_eq(u32, UINT32_MAX);
    /* negatives are not uints */
    ck_assert_ok(troupe_reader_init(&r, "\xd0\xff", 2));
    ck_assert_err(troupe_read_uint(&r, &u), TROUPE_EPROTO);
    ck_assert_ok(troupe_reader_init(&r, "\xd0\xff", 2));
    ck_assert_err(troupe_read_u32(&r, &u32), TROUPE_EPROTO);
    /* UINT64_MAX is not an int64 */
    ck_assert_ok(
        troupe_reader_init(&r, "\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9));
    ck_assert_err(troupe_read_int(&r, &i), TROUPE_EPROTO);
    /* a non-negative value in a signed form is a uint */
    ck_assert_ok(
        troupe_reader_init(&r, "\xd3\x00\x00\x00\x00\x00\x00\x00\x05", 9));
    ck_assert_int_eq(troupe_read_peek(&r), TROUPE_MP_UINT);
    ck_assert_ok(troupe_read_uint(&r, &u));
    ck_assert_uint_eq(u, 5);
    ck_assert_ok(troupe_reader_init(&r, "\xd1\x80\x00", 3));
    ck_assert_ok(troupe_read_int(&r, &i));
    ck_assert_int_eq(i, -32768);
    ck_assert_ok(
        troupe_reader_init(&r, "\xd3\x80\x00\x00\x00\x00\x00\x00\x00", 9));
    ck_assert_ok(troupe_read_int(&r, &i));
    ck_assert_int_eq(i, INT64_MIN);
    /* float 32 */
    double d;
    ck_assert_ok(troupe_reader_init(&r, "\xca\x3f\xc0\x00\x00", 5));
    ck_assert_ok(troupe_read_double(&r, &d));
    ck_assert(d == 1.5);
}
END_TEST

START_TEST(test_read_length_bounds_are_etoobig)
{
    troupe_reader r;
    const char *s;
    const void *b;
    size_t len;
    ck_assert_ok(troupe_reader_init(&r,
                                    "\xa3"
                                    "abc",
                                    4));
    ck_assert_err(troupe_read_str(&r, 2, &s, &len), TROUPE_ETOOBIG);
    ck_assert_err(troupe_read_str(&r, 3, &s, &len), TROUPE_ETOOBIG);
    ck_assert_ok(troupe_reader_init(&r,
                                    "\xa3"
                                    "abc",
                                    4));
    ck_assert_ok(troupe_read_str(&r, 3, &s, &len));
    ck_assert_uint_eq(len, 3);
    ck_assert_ok(troupe_reader_init(&r, "\xc4\x02xy", 4));
    ck_assert_err(troupe_read_bin(&r, 1, &b, &len), TROUPE_ETOOBIG);
    ck_assert_ok(troupe_reader_init(&r, "\xc4\x00", 2));
    ck_assert_ok(troupe_read_bin(&r, 0, &b, &len));
    ck_assert_uint_eq(len, 0);
}
END_TEST

START_TEST(test_read_init_refuses_malformed_bodies)
{
    troupe_reader r;
    const struct {
        const char *b;
        size_t len;
        troupe_err want;
    } cases[] = {
        {"", 0, TROUPE_EPROTO},
        {"\x92\x01", 2, TROUPE_EPROTO},                 /* truncated */
        {"\x01\x02", 2, TROUPE_EPROTO},                 /* trailing */
        {"\xc1", 1, TROUPE_EPROTO},                     /* reserved */
        {"\xdd\xff\xff\xff\xff", 5, TROUPE_EPROTO},     /* array32 bomb */
        {"\xdf\xff\xff\xff\xff", 5, TROUPE_EPROTO},     /* map32 bomb */
        {"\xdb\xff\xff\xff\xff", 5, TROUPE_EPROTO},     /* str32 */
        {"\xc6\xff\xff\xff\xff", 5, TROUPE_EPROTO},     /* bin32 */
        {"\xc9\xff\xff\xff\xff\x00", 6, TROUPE_EPROTO}, /* ext32 */
        {"\x92\x91\x91", 3, TROUPE_EPROTO},
    };
    for (size_t i = 0; i < N(cases); i++) {
        ck_assert_err(troupe_reader_init(&r, cases[i].b, cases[i].len),
                      cases[i].want);
        /* the reader is left in error */
        uint64_t u;
        ck_assert_err(troupe_read_uint(&r, &u), cases[i].want);
    }
    ck_assert_err(troupe_reader_init(&r, NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_reader_init(&r, "x", (size_t)TROUPE_WIRE_BODY_MAX + 1),
                  TROUPE_ETOOBIG);
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, 1, NULL, 0));
    ck_assert_err(troupe_reader_init_msg(&r, m), TROUPE_EPROTO);
    troupe_msg_destroy(m);
}
END_TEST

START_TEST(test_read_skip_and_raw_cover_nested_values)
{
    /* [ {"a": [1, 2, {"b": nil}]}, "tail" ] */
    const char body[] = "\x92\x81\xa1"
                        "a\x93\x01\x02\x81\xa1"
                        "b\xc0\xa4"
                        "tail";
    size_t blen = sizeof(body) - 1;
    troupe_reader r;
    ck_assert_ok(troupe_reader_init(&r, body, blen));
    ck_assert_ok(troupe_read_array_n(&r, 2));
    const void *raw;
    size_t rlen;
    ck_assert_ok(troupe_read_raw(&r, &raw, &rlen));
    ck_assert_ptr_eq(raw, body + 1);
    ck_assert_uint_eq(rlen, blen - 1 - 5);
    const char *s;
    size_t len;
    ck_assert_ok(troupe_read_str(&r, 10, &s, &len));
    ck_assert_mem_eq(s, "tail", 4);
    ck_assert_ok(troupe_read_end(&r));
    /* read past the end */
    ck_assert_err(troupe_read_skip(&r), TROUPE_EPROTO);

    ck_assert_ok(troupe_reader_init(&r, body, blen));
    ck_assert_ok(troupe_read_array_n(&r, 2));
    ck_assert_ok(troupe_read_skip(&r));
    ck_assert_err(troupe_read_end(&r), TROUPE_EPROTO); /* "tail" unread */

    /* wrong exact counts */
    ck_assert_ok(troupe_reader_init(&r, body, blen));
    ck_assert_err(troupe_read_array_n(&r, 3), TROUPE_EPROTO);
    ck_assert_ok(troupe_reader_init(&r, "\x81\x01\x02", 3));
    ck_assert_err(troupe_read_map_n(&r, 2), TROUPE_EPROTO);
}
END_TEST

START_TEST(test_read_bad_arguments)
{
    ck_assert_err(troupe_reader_init(NULL, "\xc0", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_reader_init_msg(NULL, NULL), TROUPE_EINVAL);
    troupe_reader r;
    ck_assert_err(troupe_reader_init_msg(&r, NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_read_peek(NULL), TROUPE_MP_NONE);
    ck_assert(!troupe_read_try_nil(NULL));
    ck_assert_err(troupe_read_nil(NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_bool(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_uint(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_u32(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_int(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_double(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_str(NULL, 1, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_bin(NULL, 1, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_array(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_map(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_array_n(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_read_map_n(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_read_skip(NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_raw(NULL, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_read_end(NULL), TROUPE_EINVAL);

    /* NULL outputs put the reader in error and consume nothing */
    const struct {
        const char *b;
        size_t len;
    } v[] = {{"\xc3", 1},
             {"\x01", 1},
             {"\x01", 1},
             {"\x01", 1},
             {"\xca\x00\x00\x00\x00", 5},
             {"\xa1x", 2},
             {"\xc4\x00", 2},
             {"\x90", 1},
             {"\x80", 1},
             {"\x01", 1}};
    for (int k = 0; k < 10; k++) {
        ck_assert_ok(troupe_reader_init(&r, v[k].b, v[k].len));
        troupe_err e;
        const void *raw;
        size_t len;
        switch (k) {
        case 0:
            e = troupe_read_bool(&r, NULL);
            break;
        case 1:
            e = troupe_read_uint(&r, NULL);
            break;
        case 2:
            e = troupe_read_u32(&r, NULL);
            break;
        case 3:
            e = troupe_read_int(&r, NULL);
            break;
        case 4:
            e = troupe_read_double(&r, NULL);
            break;
        case 5:
            e = troupe_read_str(&r, 9, NULL, &len);
            break;
        case 6:
            e = troupe_read_bin(&r, 9, &raw, NULL);
            break;
        case 7:
            e = troupe_read_array(&r, NULL);
            break;
        case 8:
            e = troupe_read_map(&r, NULL);
            break;
        default:
            e = troupe_read_raw(&r, NULL, &len);
            break;
        }
        ck_assert_err(e, TROUPE_EINVAL);
        ck_assert_err(troupe_read_end(&r), TROUPE_EINVAL);
    }
}
END_TEST

Suite *
read_suite(void)
{
    Suite *s = suite_create("read");
    TCase *tc = tcase_create("reader");
    tcase_add_test(tc, test_read_every_type_mismatch_is_eproto);
    tcase_add_test(tc, test_read_integer_ranges);
    tcase_add_test(tc, test_read_length_bounds_are_etoobig);
    tcase_add_test(tc, test_read_init_refuses_malformed_bodies);
    tcase_add_test(tc, test_read_skip_and_raw_cover_nested_values);
    tcase_add_test(tc, test_read_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}
