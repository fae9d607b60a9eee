/*
 * Key codec: fixed vectors (the documented format), property tests over
 * random tuples (order, no collisions, round trip, prefix), and hostile
 * input (strict decoding, never out of bounds: run it under ASan).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "stest.h"
#include "troupe/keycodec.h"

/* ---- a model of tuples ------------------------------------------------- */

typedef struct kval {
    troupe_key_type t;
    bool b;
    int64_t i;
    uint64_t u;
    double d;
    uint8_t s[512];
    size_t sn;
    struct kval *items; /* TUPLE */
    size_t n;
} kval;

static void
kval_free_items(kval *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].t == TROUPE_KEY_TUPLE)
            kval_free_items(v[i].items, v[i].n);
    }
    free(v);
}

static int
type_rank(const kval *v)
{
    return (int)v->t; /* enum order is the documented type order */
}

static int
dbl_cmp(double a, double b)
{
    bool na = isnan(a), nb = isnan(b);
    if (na || nb)
        return (int)na - (int)nb; /* NaN above everything, equal to NaN */
    return (a > b) - (a < b);     /* -0.0 == +0.0 */
}

static int
raw_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = (an && bn) ? memcmp(a, b, an < bn ? an : bn) : 0;
    if (c != 0)
        return c < 0 ? -1 : 1;
    return (an > bn) - (an < bn);
}

static int
tuple_cmp(const kval *a, size_t an, const kval *b, size_t bn);

static int
elem_cmp(const kval *a, const kval *b)
{
    int ra = type_rank(a), rb = type_rank(b);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    switch (a->t) {
    case TROUPE_KEY_NULL:
        return 0;
    case TROUPE_KEY_BOOL:
        return (int)a->b - (int)b->b;
    case TROUPE_KEY_INT64:
        return (a->i > b->i) - (a->i < b->i);
    case TROUPE_KEY_UINT64:
        return (a->u > b->u) - (a->u < b->u);
    case TROUPE_KEY_DOUBLE:
        return dbl_cmp(a->d, b->d);
    case TROUPE_KEY_STRING:
    case TROUPE_KEY_BYTES:
        return raw_cmp(a->s, a->sn, b->s, b->sn);
    case TROUPE_KEY_TUPLE:
        return tuple_cmp(a->items, a->n, b->items, b->n);
    }
    return 0;
}

static int
tuple_cmp(const kval *a, size_t an, const kval *b, size_t bn)
{
    for (size_t i = 0; i < an && i < bn; i++) {
        int c = elem_cmp(&a[i], &b[i]);
        if (c != 0)
            return c;
    }
    return (an > bn) - (an < bn);
}

static void
encode_items(troupe_key_writer *w, const kval *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (v[i].t) {
        case TROUPE_KEY_NULL:
            ck_assert_ok(troupe_key_put_null(w));
            break;
        case TROUPE_KEY_BOOL:
            ck_assert_ok(troupe_key_put_bool(w, v[i].b));
            break;
        case TROUPE_KEY_INT64:
            ck_assert_ok(troupe_key_put_int64(w, v[i].i));
            break;
        case TROUPE_KEY_UINT64:
            ck_assert_ok(troupe_key_put_uint64(w, v[i].u));
            break;
        case TROUPE_KEY_DOUBLE:
            ck_assert_ok(troupe_key_put_double(w, v[i].d));
            break;
        case TROUPE_KEY_STRING:
            ck_assert_ok(
                troupe_key_put_string(w, (const char *)v[i].s, v[i].sn));
            break;
        case TROUPE_KEY_BYTES:
            ck_assert_ok(troupe_key_put_bytes(w, v[i].s, v[i].sn));
            break;
        case TROUPE_KEY_TUPLE:
            ck_assert_ok(troupe_key_begin_tuple(w));
            encode_items(w, v[i].items, v[i].n);
            ck_assert_ok(troupe_key_end_tuple(w));
            break;
        }
    }
}

/* Encodes into a malloc'ed copy of exactly the right size. */
static uint8_t *
encode(const kval *v, size_t n, size_t *len)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    encode_items(&w, v, n);
    const uint8_t *k;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, len));
    uint8_t *out = malloc(*len ? *len : 1);
    memcpy(out, k, *len);
    troupe_key_writer_fini(&w);
    return out;
}

/* Decodes the current tuple level into a malloc'ed array. */
static troupe_err
decode_items(troupe_key_reader *r, kval **out, size_t *n)
{
    size_t cap = 4;
    kval *v = calloc(cap, sizeof(kval));
    *n = 0;
    for (;;) {
        troupe_key_item it;
        troupe_err e = troupe_key_read(r, &it);
        if (e == TROUPE_ENOENT)
            break;
        if (e != TROUPE_OK) {
            kval_free_items(v, *n);
            return e;
        }
        if (*n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof(kval));
        }
        kval *x = &v[*n];
        memset(x, 0, sizeof(*x));
        x->t = it.type;
        switch (it.type) {
        case TROUPE_KEY_BOOL:
            x->b = it.v.b;
            break;
        case TROUPE_KEY_INT64:
            x->i = it.v.i64;
            break;
        case TROUPE_KEY_UINT64:
            x->u = it.v.u64;
            break;
        case TROUPE_KEY_DOUBLE:
            x->d = it.v.d;
            break;
        case TROUPE_KEY_STRING:
        case TROUPE_KEY_BYTES:
            ck_assert_uint_le(it.v.s.len, sizeof(x->s));
            memcpy(x->s, it.v.s.ptr, it.v.s.len);
            x->sn = it.v.s.len;
            break;
        case TROUPE_KEY_TUPLE: {
            troupe_err e2 = decode_items(r, &x->items, &x->n);
            if (e2 != TROUPE_OK) {
                kval_free_items(v, *n);
                return e2;
            }
            break;
        }
        default:
            break;
        }
        (*n)++;
    }
    *out = v;
    return TROUPE_OK;
}

static troupe_err
decode(const uint8_t *p, size_t len, kval **out, size_t *n)
{
    troupe_key_reader r;
    troupe_key_reader_init(&r, p, len);
    troupe_err e = decode_items(&r, out, n);
    troupe_key_reader_fini(&r);
    return e;
}

/* ---- random values ----------------------------------------------------- */

static uint64_t rng;

static double
rand_double(void)
{
    static const double edge[] = {
        0.0,      -0.0,    1.0,      -1.0,     0.5,       -0.5,  DBL_MIN,
        -DBL_MIN, DBL_MAX, -DBL_MAX, 4.9e-324, -4.9e-324, 1e300, -1e-300};
    uint64_t r = ts_rand(&rng) % 16;
    if (r < 14)
        return edge[r];
    if (r == 14) {
        double inf = INFINITY;
        return ts_rand(&rng) % 2 ? inf : -inf;
    }
    uint64_t bits = ts_rand(&rng); /* any pattern: NaNs with payloads too */
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
}

static void
rand_elem(kval *x, int depth)
{
    memset(x, 0, sizeof(*x));
    int t = 1 + (int)(ts_rand(&rng) % (depth < 3 ? 8 : 7));
    x->t = (troupe_key_type)t;
    switch (x->t) {
    case TROUPE_KEY_BOOL:
        x->b = ts_rand(&rng) % 2;
        break;
    case TROUPE_KEY_INT64: {
        static const int64_t edge[] = {
            INT64_MIN, INT64_MIN + 1, -256,          -1,       0, 1,
            255,       256,           INT64_MAX - 1, INT64_MAX};
        uint64_t r = ts_rand(&rng) % 14;
        x->i =
            r < 10 ? edge[r] : (int64_t)(ts_rand(&rng) >> (ts_rand(&rng) % 64));
        if (r >= 12)
            x->i = (int64_t)(0 - (uint64_t)x->i);
        break;
    }
    case TROUPE_KEY_UINT64: {
        static const uint64_t edge[] = {
            0, 1, 255, 256, UINT64_MAX / 2, UINT64_MAX / 2 + 1, UINT64_MAX};
        uint64_t r = ts_rand(&rng) % 10;
        x->u = r < 7 ? edge[r] : ts_rand(&rng) >> (ts_rand(&rng) % 64);
        break;
    }
    case TROUPE_KEY_DOUBLE:
        x->d = rand_double();
        break;
    case TROUPE_KEY_STRING:
    case TROUPE_KEY_BYTES: {
        static const uint8_t alpha[] = {0x00, 0x01, 'a', 0xfe, 0xff};
        x->sn = ts_rand(&rng) % 5;
        for (size_t i = 0; i < x->sn; i++)
            x->s[i] = alpha[ts_rand(&rng) % sizeof(alpha)];
        break;
    }
    case TROUPE_KEY_TUPLE:
        x->n = ts_rand(&rng) % 4;
        x->items = calloc(x->n ? x->n : 1, sizeof(kval));
        for (size_t i = 0; i < x->n; i++)
            rand_elem(&x->items[i], depth + 1);
        break;
    default:
        break;
    }
}

typedef struct rtuple {
    kval *v;
    size_t n;
    uint8_t *enc;
    size_t len;
} rtuple;

static void
rand_tuple(rtuple *t)
{
    t->n = ts_rand(&rng) % 5;
    t->v = calloc(t->n ? t->n : 1, sizeof(kval));
    for (size_t i = 0; i < t->n; i++)
        rand_elem(&t->v[i], 1);
    t->enc = encode(t->v, t->n, &t->len);
}

#define NPROP 3000

/* ---- fixed vectors ----------------------------------------------------- */

static void
expect_bytes(troupe_key_writer *w, const char *what, const uint8_t *want,
             size_t n)
{
    const uint8_t *k;
    size_t len;
    ck_assert_ok(troupe_key_writer_finish(w, &k, &len));
    ck_assert_msg(len == n && memcmp(k, want, n) == 0, "%s: wrong encoding",
                  what);
    ck_assert_ok(troupe_key_validate(k, len));
    troupe_key_writer_reset(w);
}

START_TEST(test_encoding_matches_documented_vectors)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    ck_assert_ok(troupe_key_put_int64(&w, 0));
    expect_bytes(&w, "int64 0",
                 (const uint8_t[]){0x10, 0x80, 0, 0, 0, 0, 0, 0, 0}, 9);
    ck_assert_ok(troupe_key_put_int64(&w, -1));
    expect_bytes(
        &w, "int64 -1",
        (const uint8_t[]){0x10, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
        9);
    ck_assert_ok(troupe_key_put_uint64(&w, 258));
    expect_bytes(&w, "uint64 258",
                 (const uint8_t[]){0x11, 0, 0, 0, 0, 0, 0, 0x01, 0x02}, 9);
    ck_assert_ok(troupe_key_put_double(&w, 1.0));
    expect_bytes(&w, "double 1.0",
                 (const uint8_t[]){0x12, 0xbf, 0xf0, 0, 0, 0, 0, 0, 0}, 9);
    ck_assert_ok(troupe_key_put_double(&w, -1.0));
    expect_bytes(
        &w, "double -1.0",
        (const uint8_t[]){0x12, 0x40, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
        9);
    ck_assert_ok(troupe_key_put_double(&w, -0.0));
    expect_bytes(&w, "double -0.0 as +0.0",
                 (const uint8_t[]){0x12, 0x80, 0, 0, 0, 0, 0, 0, 0}, 9);
    ck_assert_ok(troupe_key_put_double(&w, -NAN));
    expect_bytes(&w, "NaN canonical",
                 (const uint8_t[]){0x12, 0xff, 0xf8, 0, 0, 0, 0, 0, 0}, 9);
    ck_assert_ok(troupe_key_put_string(&w, "a\0b", 3));
    expect_bytes(&w, "string a\\0b",
                 (const uint8_t[]){0x20, 'a', 0x00, 0xff, 'b', 0x00}, 6);
    ck_assert_ok(troupe_key_put_bytes(&w, "", 0));
    expect_bytes(&w, "empty bytes", (const uint8_t[]){0x21, 0x00}, 2);
    ck_assert_ok(troupe_key_put_null(&w));
    ck_assert_ok(troupe_key_put_bool(&w, false));
    ck_assert_ok(troupe_key_put_bool(&w, true));
    ck_assert_ok(troupe_key_begin_tuple(&w));
    ck_assert_ok(troupe_key_put_null(&w));
    ck_assert_ok(troupe_key_end_tuple(&w));
    expect_bytes(&w, "null false true (null)",
                 (const uint8_t[]){0x01, 0x02, 0x03, 0x30, 0x01, 0x00}, 6);
    const uint8_t *k;
    size_t len = 9;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &len));
    ck_assert_uint_eq(len, 0); /* the empty tuple */
    ck_assert_ptr_nonnull(k);
    troupe_key_writer_fini(&w);
}
END_TEST

START_TEST(test_cross_type_order_follows_tags)
{
    /* null < false < true < int64 < uint64 < double < string < bytes <
     * tuple, whatever the values. */
    kval v[9];
    memset(v, 0, sizeof(v));
    v[0].t = TROUPE_KEY_NULL;
    v[1].t = TROUPE_KEY_BOOL;
    v[2].t = TROUPE_KEY_BOOL;
    v[2].b = true;
    v[3].t = TROUPE_KEY_INT64;
    v[3].i = INT64_MAX;
    v[4].t = TROUPE_KEY_UINT64;
    v[5].t = TROUPE_KEY_DOUBLE;
    v[5].d = -INFINITY;
    v[6].t = TROUPE_KEY_STRING;
    v[6].sn = 1;
    v[6].s[0] = 0xff;
    v[7].t = TROUPE_KEY_BYTES;
    v[8].t = TROUPE_KEY_TUPLE;
    v[8].items = NULL;
    uint8_t *prev = NULL;
    size_t prevn = 0;
    for (int i = 0; i < 9; i++) {
        size_t n;
        uint8_t *e = encode(&v[i], 1, &n);
        if (prev != NULL)
            ck_assert_int_lt(raw_cmp(prev, prevn, e, n), 0);
        free(prev);
        prev = e;
        prevn = n;
    }
    free(prev);
}
END_TEST

/* ---- properties --------------------------------------------------------- */

START_TEST(test_random_tuples_order_collisions_roundtrip)
{
    rng = ts_seed("keycodec_props");
    rtuple *t = calloc(NPROP, sizeof(rtuple));
    for (int i = 0; i < NPROP; i++)
        rand_tuple(&t[i]);
    int equal_pairs = 0;
    for (int i = 0; i < NPROP; i++) {
        /* Neighbours and random partners: order and collisions. */
        for (int k = 0; k < 3; k++) {
            int j = k == 0 ? (i + 1) % NPROP : (int)(ts_rand(&rng) % NPROP);
            int vc = tuple_cmp(t[i].v, t[i].n, t[j].v, t[j].n);
            int bc = raw_cmp(t[i].enc, t[i].len, t[j].enc, t[j].len);
            ck_assert_msg(vc == bc, "pair %d,%d: value order %d, bytes %d", i,
                          j, vc, bc);
            equal_pairs += vc == 0 && i != j;
        }
        /* Round trip, up to the documented canonicalisation. */
        kval *d;
        size_t dn;
        ck_assert_ok(decode(t[i].enc, t[i].len, &d, &dn));
        ck_assert_int_eq(tuple_cmp(d, dn, t[i].v, t[i].n), 0);
        size_t rn;
        uint8_t *re = encode(d, dn, &rn);
        ck_assert_int_eq(raw_cmp(re, rn, t[i].enc, t[i].len), 0);
        free(re);
        kval_free_items(d, dn);
        ck_assert_ok(troupe_key_validate(t[i].enc, t[i].len));
        /* Prefix: (a) encodes to a prefix of (a, b). */
        for (size_t k = 0; k <= t[i].n; k++) {
            size_t pn;
            uint8_t *pe = encode(t[i].v, k, &pn);
            ck_assert_uint_le(pn, t[i].len);
            ck_assert_int_eq(memcmp(pe, t[i].enc, pn), 0);
            free(pe);
        }
    }
    /* Small domains make equal values common: collisions were exercised. */
    ck_assert_int_gt(equal_pairs, 0);
    for (int i = 0; i < NPROP; i++) {
        kval_free_items(t[i].v, t[i].n);
        free(t[i].enc);
    }
    free(t);
}
END_TEST

START_TEST(test_double_order_including_canonical_values)
{
    rng = ts_seed("keycodec_double");
    for (int i = 0; i < 20000; i++) {
        kval a = {.t = TROUPE_KEY_DOUBLE, .d = rand_double()};
        kval b = {.t = TROUPE_KEY_DOUBLE, .d = rand_double()};
        size_t an, bn;
        uint8_t *ea = encode(&a, 1, &an), *eb = encode(&b, 1, &bn);
        ck_assert_msg(dbl_cmp(a.d, b.d) == raw_cmp(ea, an, eb, bn), "%a vs %a",
                      a.d, b.d);
        kval *d;
        size_t dn;
        ck_assert_ok(decode(ea, an, &d, &dn));
        ck_assert_uint_eq(dn, 1);
        if (isnan(a.d)) {
            uint64_t bits;
            memcpy(&bits, &d[0].d, 8);
            ck_assert_uint_eq(bits, 0x7FF8000000000000ull);
        } else {
            ck_assert(d[0].d == a.d);
            ck_assert(!signbit(d[0].d) || d[0].d != 0.0);
        }
        kval_free_items(d, dn);
        free(ea);
        free(eb);
    }
}
END_TEST

/* ---- hostile input ------------------------------------------------------ */

static troupe_err
decode_reencode(const uint8_t *p, size_t n)
{
    kval *d;
    size_t dn;
    troupe_err e = decode(p, n, &d, &dn);
    troupe_err v = troupe_key_validate(p, n);
    ck_assert_msg(e == v || (e == TROUPE_OK && v == TROUPE_OK),
                  "decode %s vs validate %s", troupe_err_name(e),
                  troupe_err_name(v));
    if (e != TROUPE_OK) {
        ck_assert_err(e, TROUPE_EPROTO);
        return e;
    }
    /* Anything accepted is canonical: it re-encodes to the same bytes. */
    size_t rn;
    uint8_t *re = encode(d, dn, &rn);
    ck_assert_msg(raw_cmp(re, rn, p, n) == 0, "accepted a non-canonical key");
    free(re);
    kval_free_items(d, dn);
    return e;
}

START_TEST(test_random_bytes_decode_strictly_in_bounds)
{
    rng = ts_seed("keycodec_hostile");
    static const uint8_t alpha[] = {0x00, 0x01, 0x02, 0x03, 0x10, 0x11,
                                    0x12, 0x20, 0x21, 0x30, 0xff, 0x7f};
    int accepted = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = ts_rand(&rng) % 24;
        uint8_t *p = malloc(n ? n : 1); /* exact size: ASan sees overreads */
        for (size_t j = 0; j < n; j++)
            p[j] = ts_rand(&rng) % 4 ? alpha[ts_rand(&rng) % sizeof(alpha)]
                                     : (uint8_t)ts_rand(&rng);
        accepted += decode_reencode(p, n) == TROUPE_OK;
        free(p);
    }
    ck_assert_int_gt(accepted, 0);
}
END_TEST

START_TEST(test_truncated_and_mutated_valid_keys)
{
    rng = ts_seed("keycodec_mutate");
    for (int i = 0; i < 1500; i++) {
        rtuple t;
        rand_tuple(&t);
        for (size_t cut = 0; cut <= t.len; cut++) {
            uint8_t *p = malloc(cut ? cut : 1);
            memcpy(p, t.enc, cut);
            decode_reencode(p, cut);
            free(p);
        }
        if (t.len > 0) {
            uint8_t *p = malloc(t.len);
            memcpy(p, t.enc, t.len);
            p[ts_rand(&rng) % t.len] ^= (uint8_t)(1u << (ts_rand(&rng) % 8));
            decode_reencode(p, t.len);
            free(p);
        }
        kval_free_items(t.v, t.n);
        free(t.enc);
    }
}
END_TEST

static void
expect_eproto(const char *what, const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, p, n);
    ck_assert_msg(troupe_key_validate(c, n) == TROUPE_EPROTO, "%s accepted",
                  what);
    troupe_key_reader r;
    troupe_key_reader_init(&r, c, n);
    troupe_key_item it;
    troupe_err e;
    int steps = 0;
    while ((e = troupe_key_read(&r, &it)) == TROUPE_OK ||
           (e == TROUPE_ENOENT && r.depth > 0) ||
           (e == TROUPE_ENOENT && r.p != r.end))
        ck_assert_int_lt(++steps, 100);
    ck_assert_err(e, TROUPE_EPROTO);
    /* Sticky. */
    ck_assert_err(troupe_key_read(&r, &it), TROUPE_EPROTO);
    troupe_key_reader_fini(&r);
    free(c);
}

START_TEST(test_malformed_keys_are_eproto)
{
    expect_eproto("unknown tag", (const uint8_t[]){0x04}, 1);
    expect_eproto("tag 0xff", (const uint8_t[]){0xff}, 1);
    expect_eproto("short int64", (const uint8_t[]){0x10, 0, 0, 0, 0, 0, 0, 0},
                  8);
    expect_eproto("short uint64", (const uint8_t[]){0x11}, 1);
    expect_eproto("unterminated string", (const uint8_t[]){0x20, 'a', 'b'}, 3);
    expect_eproto("escape at end", (const uint8_t[]){0x20, 'a', 0x00, 0xff}, 4);
    expect_eproto("stray end marker", (const uint8_t[]){0x01, 0x00}, 2);
    expect_eproto("unterminated tuple", (const uint8_t[]){0x30, 0x01}, 2);
    expect_eproto(
        "-0.0 encoding",
        (const uint8_t[]){0x12, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
        9);
    expect_eproto("NaN with payload",
                  (const uint8_t[]){0x12, 0xff, 0xf8, 0, 0, 0, 0, 0, 1}, 9);
    expect_eproto(
        "negative NaN",
        (const uint8_t[]){0x12, 0x00, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
        9);
    uint8_t deep[2 * (TROUPE_KEY_DEPTH_MAX + 1)];
    for (int i = 0; i <= TROUPE_KEY_DEPTH_MAX; i++) {
        deep[i] = 0x30;
        deep[TROUPE_KEY_DEPTH_MAX + 1 + i] = 0x00;
    }
    expect_eproto("too deep", deep, sizeof(deep));
    /* One level less is fine. */
    ck_assert_ok(troupe_key_validate(deep + 1, sizeof(deep) - 2));
}
END_TEST

/* ---- API misuse and allocation failure ---------------------------------- */

START_TEST(test_writer_bad_args_and_sticky_errors)
{
    ck_assert_err(troupe_key_put_null(NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_bool(NULL, true), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_int64(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_uint64(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_double(NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_string(NULL, "a", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_bytes(NULL, "a", 1), TROUPE_EINVAL);
    ck_assert_err(troupe_key_begin_tuple(NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_key_end_tuple(NULL), TROUPE_EINVAL);
    troupe_key_writer_init(NULL);
    troupe_key_writer_fini(NULL);
    troupe_key_writer_reset(NULL);

    troupe_key_writer w;
    troupe_key_writer_init(&w);
    const uint8_t *k;
    size_t n;
    ck_assert_err(troupe_key_writer_finish(NULL, &k, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_key_writer_finish(&w, NULL, &n), TROUPE_EINVAL);
    ck_assert_err(troupe_key_writer_finish(&w, &k, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_string(&w, NULL, 1), TROUPE_EINVAL);
    ck_assert_err(troupe_key_put_bytes(&w, NULL, 2), TROUPE_EINVAL);
    ck_assert_ok(troupe_key_put_bytes(&w, NULL, 0));
    ck_assert_ok(troupe_key_begin_tuple(&w));
    ck_assert_err(troupe_key_writer_finish(&w, &k, &n), TROUPE_ESTATE);
    ck_assert_ok(troupe_key_end_tuple(&w));
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &n));
    /* end without begin: sticky until reset. */
    ck_assert_err(troupe_key_end_tuple(&w), TROUPE_ESTATE);
    ck_assert_err(troupe_key_put_null(&w), TROUPE_ESTATE);
    ck_assert_err(troupe_key_writer_finish(&w, &k, &n), TROUPE_ESTATE);
    troupe_key_writer_reset(&w);
    for (int i = 0; i < TROUPE_KEY_DEPTH_MAX; i++)
        ck_assert_ok(troupe_key_begin_tuple(&w));
    ck_assert_err(troupe_key_begin_tuple(&w), TROUPE_ETOOBIG);
    ck_assert_err(troupe_key_writer_finish(&w, &k, &n), TROUPE_ETOOBIG);
    troupe_key_writer_fini(&w);
}
END_TEST

START_TEST(test_reader_bad_args)
{
    troupe_key_reader r;
    troupe_key_item it;
    troupe_key_reader_init(NULL, "x", 1);
    troupe_key_reader_fini(NULL);
    ck_assert_err(troupe_key_read(NULL, &it), TROUPE_EINVAL);
    troupe_key_reader_init(&r, NULL, 0);
    ck_assert_err(troupe_key_read(&r, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_key_read(&r, &it), TROUPE_ENOENT); /* empty tuple */
    ck_assert_err(troupe_key_read(&r, &it), TROUPE_ENOENT);
    troupe_key_reader_fini(&r);
    troupe_key_reader_init(&r, NULL, 3);
    ck_assert_err(troupe_key_read(&r, &it), TROUPE_EINVAL);
    troupe_key_reader_fini(&r);
    ck_assert_err(troupe_key_validate(NULL, 1), TROUPE_EINVAL);
    ck_assert_ok(troupe_key_validate(NULL, 0));
}
END_TEST

START_TEST(test_enomem_is_sticky_in_writer_and_retryable_in_reader)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_alloc_fail_after(0);
    troupe_err e = troupe_key_put_string(&w, "abc", 3);
    troupe_alloc_fail_after(-1);
    ck_assert_err(e, TROUPE_ENOMEM);
    ck_assert_err(troupe_key_put_null(&w), TROUPE_ENOMEM);
    const uint8_t *k;
    size_t n;
    ck_assert_err(troupe_key_writer_finish(&w, &k, &n), TROUPE_ENOMEM);
    troupe_key_writer_reset(&w);
    ck_assert_ok(troupe_key_put_string(&w, "a\0c", 3));
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &n));

    troupe_key_reader r;
    troupe_key_item it;
    troupe_key_reader_init(&r, k, n);
    troupe_alloc_fail_after(0);
    e = troupe_key_read(&r, &it); /* unescaping needs scratch */
    troupe_alloc_fail_after(-1);
    ck_assert_err(e, TROUPE_ENOMEM);
    ck_assert_ok(troupe_key_read(&r, &it));
    ck_assert_int_eq(it.type, TROUPE_KEY_STRING);
    ck_assert_uint_eq(it.v.s.len, 3);
    ck_assert_int_eq(memcmp(it.v.s.ptr, "a\0c", 3), 0);
    ck_assert_err(troupe_key_read(&r, &it), TROUPE_ENOENT);
    troupe_key_reader_fini(&r);
    troupe_key_writer_fini(&w);
}
END_TEST

/* Keys built with the codec sort in RocksDB as their values do. */
START_TEST(test_codec_keys_scan_in_value_order)
{
    char *dir = ts_tempdir("keycodec");
    troupe_db *db = st_open(dir, NULL, 0);
    troupe_cf *cf = st_cf(db, TROUPE_CF_DEFAULT);
    static const int64_t ints[] = {5, -3, INT64_MIN, 0, 42, -1, INT64_MAX};
    static const char *names[] = {"b", "a", "", "a\0x", "ab"};
    static const size_t name_len[] = {1, 1, 0, 3, 2};
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    for (int i = 0; i < 7; i++) {
        for (int j = 0; j < 5; j++) {
            troupe_key_writer_reset(&w);
            ck_assert_ok(troupe_key_put_string(&w, names[j], name_len[j]));
            ck_assert_ok(troupe_key_put_int64(&w, ints[i]));
            const uint8_t *k;
            size_t n;
            ck_assert_ok(troupe_key_writer_finish(&w, &k, &n));
            ck_assert_ok(troupe_batch_put(b, cf, k, n, "", 0));
        }
    }
    ck_assert_ok(troupe_db_write(db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    /* The tuple range of ("a"): its 7 rows, ints ascending; "a\0x" and "ab"
     * are other names, not extensions. */
    troupe_key_writer_init(&w);
    ck_assert_ok(troupe_key_put_string(&w, "a", 1));
    const uint8_t *pfx;
    size_t pn;
    ck_assert_ok(troupe_key_writer_finish(&w, &pfx, &pn));
    troupe_range r;
    troupe_page *p;
    /* The documented pitfall: a byte prefix also matches "a\0x". */
    troupe_range_init_prefix(&r, pfx, pn);
    ck_assert_ok(troupe_db_scan(db, cf, NULL, &r, NULL, 0, 100, false, &p));
    ck_assert_uint_eq(p->n, 14);
    troupe_page_destroy(p);
    ck_assert_err(troupe_key_writer_range(NULL, &r), TROUPE_EINVAL);
    ck_assert_err(troupe_key_writer_range(&w, NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_key_writer_range(&w, &r));
    ck_assert_ok(troupe_db_scan(db, cf, NULL, &r, NULL, 0, 100, false, &p));
    ck_assert_uint_eq(p->n, 7);
    int64_t prev = INT64_MIN;
    for (size_t i = 0; i < p->n; i++) {
        troupe_key_reader rd;
        troupe_key_item it;
        troupe_key_reader_init(&rd, p->items[i].key, p->items[i].key_len);
        ck_assert_ok(troupe_key_read(&rd, &it));
        ck_assert_uint_eq(it.v.s.len, 1);
        ck_assert_ok(troupe_key_read(&rd, &it));
        ck_assert_int_eq(it.type, TROUPE_KEY_INT64);
        ck_assert(i == 0 || it.v.i64 > prev);
        prev = it.v.i64;
        troupe_key_reader_fini(&rd);
    }
    ck_assert_int_eq(prev, INT64_MAX);
    troupe_page_destroy(p);
    troupe_key_writer_fini(&w);
    ck_assert_ok(troupe_db_close(db));
    ts_rmtree(dir);
    free(dir);
}
END_TEST

Suite *
storage_keycodec_suite(void)
{
    Suite *s = suite_create("storage_keycodec");
    TCase *tc = tcase_create("keycodec");
    tcase_set_timeout(tc, ST_TIMEOUT);
    tcase_add_test(tc, test_encoding_matches_documented_vectors);
    tcase_add_test(tc, test_cross_type_order_follows_tags);
    tcase_add_test(tc, test_random_tuples_order_collisions_roundtrip);
    tcase_add_test(tc, test_double_order_including_canonical_values);
    tcase_add_test(tc, test_random_bytes_decode_strictly_in_bounds);
    tcase_add_test(tc, test_truncated_and_mutated_valid_keys);
    tcase_add_test(tc, test_malformed_keys_are_eproto);
    tcase_add_test(tc, test_writer_bad_args_and_sticky_errors);
    tcase_add_test(tc, test_reader_bad_args);
    tcase_add_test(tc, test_enomem_is_sticky_in_writer_and_retryable_in_reader);
    tcase_add_test(tc, test_codec_keys_scan_in_value_order);
    suite_add_tcase(s, tc);
    return s;
}
