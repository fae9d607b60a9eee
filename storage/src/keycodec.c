/*
 * The order-preserving tuple codec (format in keycodec.h and
 * docs/storage.md).
 *
 * Why these choices:
 *  - One tag per type, types ordered by tag. Ordering int64, uint64 and
 *    double by numeric value across types would need a shared numeric
 *    encoding (e.g. a 128-bit or decimal form) and would make 1 (int) and
 *    1.0 (double) either collide or need a tie-break; a key column has one
 *    type anyway.
 *  - Strings terminate with 0x00 and escape 0x00 as 0x00 0xFF (FoundationDB
 *    style) rather than carrying a length prefix, because a length prefix
 *    orders by length first ("b" < "aa"), which breaks order.
 *  - 0x00 ends a nested tuple so that (a) < (a, x) also inside a nested
 *    tuple; every tag is below 0xFF, so a string terminator (0x00 followed
 *    by a tag, by 0x00 or by nothing) sorts below an escaped 0x00 (0x00
 *    0xFF): "a" < "a\0".
 *  - Doubles: IEEE bits compare as sign-magnitude integers; flipping the
 *    sign bit of positives and every bit of negatives makes them compare as
 *    unsigned integers in numeric order. -0.0 and NaNs are canonicalised
 *    first so that equal values have one encoding, and the decoder rejects
 *    the non-canonical forms so every valid encoding is the image of
 *    exactly one value.
 *
 * The reader never reads past `end`: every access is preceded by a length
 * check, and a string is scanned for its terminator before anything is
 * copied.
 */
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/keycodec.h"

#define CANON_NAN 0x7FF8000000000000ull
#define NEG_ZERO 0x8000000000000000ull
#define SIGN_BIT 0x8000000000000000ull
#define EXP_MASK 0x7FF0000000000000ull
#define MANT_MASK 0x000FFFFFFFFFFFFFull

void
troupe_key_writer_init(troupe_key_writer *w)
{
    if (w != NULL)
        memset(w, 0, sizeof(*w));
}

void
troupe_key_writer_fini(troupe_key_writer *w)
{
    if (w == NULL)
        return;
    troupe_free(w->buf);
    memset(w, 0, sizeof(*w));
}

void
troupe_key_writer_reset(troupe_key_writer *w)
{
    if (w == NULL)
        return;
    w->len = 0;
    w->depth = 0;
    w->err = TROUPE_OK;
}

/* Makes room for `extra` more bytes, or records ENOMEM. */
static troupe_err
reserve(troupe_key_writer *w, size_t extra)
{
    if (w->err != TROUPE_OK)
        return w->err;
    if (extra > SIZE_MAX / 2 - w->len) {
        w->err = TROUPE_ENOMEM;
        return w->err;
    }
    if (w->len + extra <= w->cap)
        return TROUPE_OK;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < w->len + extra)
        cap *= 2;
    uint8_t *b = troupe_realloc(w->buf, cap);
    if (b == NULL) {
        w->err = TROUPE_ENOMEM;
        return w->err;
    }
    w->buf = b;
    w->cap = cap;
    return TROUPE_OK;
}

static troupe_err
put_tag(troupe_key_writer *w, uint8_t tag)
{
    if (w == NULL)
        return TROUPE_EINVAL;
    troupe_err e = reserve(w, 1);
    if (e == TROUPE_OK)
        w->buf[w->len++] = tag;
    return e;
}

static troupe_err
put_u64(troupe_key_writer *w, uint8_t tag, uint64_t v)
{
    if (w == NULL)
        return TROUPE_EINVAL;
    troupe_err e = reserve(w, 9);
    if (e != TROUPE_OK)
        return e;
    uint8_t *p = w->buf + w->len;
    p[0] = tag;
    for (int i = 0; i < 8; i++)
        p[1 + i] = (uint8_t)(v >> (56 - 8 * i));
    w->len += 9;
    return TROUPE_OK;
}

troupe_err
troupe_key_put_null(troupe_key_writer *w)
{
    return put_tag(w, TROUPE_KEY_TAG_NULL);
}

troupe_err
troupe_key_put_bool(troupe_key_writer *w, bool v)
{
    return put_tag(w, v ? TROUPE_KEY_TAG_TRUE : TROUPE_KEY_TAG_FALSE);
}

troupe_err
troupe_key_put_int64(troupe_key_writer *w, int64_t v)
{
    return put_u64(w, TROUPE_KEY_TAG_INT64, (uint64_t)v ^ SIGN_BIT);
}

troupe_err
troupe_key_put_uint64(troupe_key_writer *w, uint64_t v)
{
    return put_u64(w, TROUPE_KEY_TAG_UINT64, v);
}

static uint64_t
double_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    if (b == NEG_ZERO)
        b = 0;
    else if ((b & EXP_MASK) == EXP_MASK && (b & MANT_MASK) != 0)
        b = CANON_NAN;
    return b;
}

troupe_err
troupe_key_put_double(troupe_key_writer *w, double v)
{
    uint64_t b = double_bits(v);
    b = (b & SIGN_BIT) ? ~b : (b | SIGN_BIT);
    return put_u64(w, TROUPE_KEY_TAG_DOUBLE, b);
}

static troupe_err
put_escaped(troupe_key_writer *w, uint8_t tag, const uint8_t *p, size_t len)
{
    if (w == NULL || (p == NULL && len > 0))
        return TROUPE_EINVAL;
    size_t zeros = 0;
    for (size_t i = 0; i < len; i++)
        zeros += p[i] == 0x00;
    if (len > SIZE_MAX / 4) {
        if (w->err == TROUPE_OK)
            w->err = TROUPE_ENOMEM;
        return w->err;
    }
    troupe_err e = reserve(w, 2 + len + zeros);
    if (e != TROUPE_OK)
        return e;
    uint8_t *o = w->buf + w->len;
    *o++ = tag;
    for (size_t i = 0; i < len; i++) {
        *o++ = p[i];
        if (p[i] == 0x00)
            *o++ = 0xFF;
    }
    *o++ = 0x00;
    w->len = (size_t)(o - w->buf);
    return TROUPE_OK;
}

troupe_err
troupe_key_put_string(troupe_key_writer *w, const char *s, size_t len)
{
    return put_escaped(w, TROUPE_KEY_TAG_STRING, (const uint8_t *)s, len);
}

troupe_err
troupe_key_put_bytes(troupe_key_writer *w, const void *p, size_t len)
{
    return put_escaped(w, TROUPE_KEY_TAG_BYTES, p, len);
}

troupe_err
troupe_key_begin_tuple(troupe_key_writer *w)
{
    if (w == NULL)
        return TROUPE_EINVAL;
    if (w->err != TROUPE_OK)
        return w->err;
    if (w->depth >= TROUPE_KEY_DEPTH_MAX) {
        w->err = TROUPE_ETOOBIG;
        return w->err;
    }
    troupe_err e = put_tag(w, TROUPE_KEY_TAG_TUPLE);
    if (e == TROUPE_OK)
        w->depth++;
    return e;
}

troupe_err
troupe_key_end_tuple(troupe_key_writer *w)
{
    if (w == NULL)
        return TROUPE_EINVAL;
    if (w->err != TROUPE_OK)
        return w->err;
    if (w->depth == 0) {
        w->err = TROUPE_ESTATE;
        return w->err;
    }
    troupe_err e = put_tag(w, TROUPE_KEY_TAG_END);
    if (e == TROUPE_OK)
        w->depth--;
    return e;
}

troupe_err
troupe_key_writer_finish(troupe_key_writer *w, const uint8_t **key, size_t *len)
{
    if (w == NULL || key == NULL || len == NULL)
        return TROUPE_EINVAL;
    *key = NULL;
    *len = 0;
    if (w->err != TROUPE_OK)
        return w->err;
    if (w->depth != 0)
        return TROUPE_ESTATE;
    /* The empty tuple encodes to zero bytes; hand out a valid pointer. */
    *key = w->buf != NULL ? w->buf : (const uint8_t *)"";
    *len = w->len;
    return TROUPE_OK;
}

troupe_err
troupe_key_writer_range(troupe_key_writer *w, troupe_range *r)
{
    if (w == NULL || r == NULL)
        return TROUPE_EINVAL;
    const uint8_t *k;
    size_t len;
    troupe_err e = troupe_key_writer_finish(w, &k, &len);
    if (e == TROUPE_OK)
        e = reserve(w, 1);
    if (e != TROUPE_OK)
        return e;
    /* The 0xFF sits past len: the next put overwrites it. */
    w->buf[w->len] = 0xFF;
    troupe_range_init_bounds(r, w->buf, w->len, w->buf, w->len + 1);
    return TROUPE_OK;
}

void
troupe_key_reader_init(troupe_key_reader *r, const void *data, size_t len)
{
    if (r == NULL)
        return;
    memset(r, 0, sizeof(*r));
    if (data == NULL && len > 0) {
        r->err = TROUPE_EINVAL;
        return;
    }
    r->p = data;
    r->end = data != NULL ? (const uint8_t *)data + len : NULL;
}

void
troupe_key_reader_fini(troupe_key_reader *r)
{
    if (r == NULL)
        return;
    troupe_free(r->scratch);
    memset(r, 0, sizeof(*r));
}

static troupe_err
fail(troupe_key_reader *r)
{
    r->err = TROUPE_EPROTO;
    return r->err;
}

static uint64_t
load_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/*
 * Reads one escaped string. With copy == false only validates (no
 * allocation), for troupe_key_validate.
 */
static troupe_err
read_escaped(troupe_key_reader *r, troupe_key_item *item, bool copy)
{
    const uint8_t *s = r->p;
    size_t avail = (size_t)(r->end - s);
    size_t i = 0, zeros = 0;
    for (;;) {
        if (i >= avail)
            return fail(r); /* no terminator */
        if (s[i] != 0x00) {
            i++;
            continue;
        }
        if (i + 1 < avail && s[i + 1] == 0xFF) {
            zeros++;
            i += 2;
            continue;
        }
        break; /* s[i] is the terminator */
    }
    size_t out_len = i - zeros;
    r->p = s + i + 1;
    if (!copy)
        return TROUPE_OK;
    if (zeros == 0) {
        item->v.s.ptr = s;
        item->v.s.len = out_len;
        return TROUPE_OK;
    }
    if (out_len > r->scratch_cap) {
        uint8_t *b = troupe_realloc(r->scratch, out_len);
        if (b == NULL)
            return TROUPE_ENOMEM; /* not sticky: the input is fine */
        r->scratch = b;
        r->scratch_cap = out_len;
    }
    size_t o = 0;
    for (size_t j = 0; j < i; j++) {
        r->scratch[o++] = s[j];
        if (s[j] == 0x00)
            j++; /* skip the 0xFF */
    }
    item->v.s.ptr = r->scratch;
    item->v.s.len = out_len;
    return TROUPE_OK;
}

static troupe_err
key_read(troupe_key_reader *r, troupe_key_item *item, bool copy)
{
    if (r->err != TROUPE_OK)
        return r->err;
    if (r->p == r->end) {
        if (r->depth > 0)
            return fail(r); /* unterminated nested tuple */
        return TROUPE_ENOENT;
    }
    const uint8_t *start = r->p;
    uint8_t tag = *r->p++;
    switch (tag) {
    case TROUPE_KEY_TAG_END:
        if (r->depth == 0)
            return fail(r);
        r->depth--;
        return TROUPE_ENOENT;
    case TROUPE_KEY_TAG_NULL:
        item->type = TROUPE_KEY_NULL;
        return TROUPE_OK;
    case TROUPE_KEY_TAG_FALSE:
    case TROUPE_KEY_TAG_TRUE:
        item->type = TROUPE_KEY_BOOL;
        item->v.b = tag == TROUPE_KEY_TAG_TRUE;
        return TROUPE_OK;
    case TROUPE_KEY_TAG_INT64:
    case TROUPE_KEY_TAG_UINT64:
    case TROUPE_KEY_TAG_DOUBLE: {
        if (r->end - r->p < 8)
            return fail(r);
        uint64_t v = load_be64(r->p);
        r->p += 8;
        if (tag == TROUPE_KEY_TAG_INT64) {
            item->type = TROUPE_KEY_INT64;
            item->v.i64 = (int64_t)(v ^ SIGN_BIT);
        } else if (tag == TROUPE_KEY_TAG_UINT64) {
            item->type = TROUPE_KEY_UINT64;
            item->v.u64 = v;
        } else {
            uint64_t b = (v & SIGN_BIT) ? (v & ~SIGN_BIT) : ~v;
            if (b == NEG_ZERO || ((b & EXP_MASK) == EXP_MASK &&
                                  (b & MANT_MASK) != 0 && b != CANON_NAN))
                return fail(r);
            item->type = TROUPE_KEY_DOUBLE;
            memcpy(&item->v.d, &b, sizeof(b));
        }
        return TROUPE_OK;
    }
    case TROUPE_KEY_TAG_STRING:
    case TROUPE_KEY_TAG_BYTES: {
        item->type =
            tag == TROUPE_KEY_TAG_STRING ? TROUPE_KEY_STRING : TROUPE_KEY_BYTES;
        troupe_err e = read_escaped(r, item, copy);
        if (e == TROUPE_ENOMEM)
            r->p = start; /* retryable */
        return e;
    }
    case TROUPE_KEY_TAG_TUPLE:
        if (r->depth >= TROUPE_KEY_DEPTH_MAX)
            return fail(r);
        r->depth++;
        item->type = TROUPE_KEY_TUPLE;
        return TROUPE_OK;
    default:
        return fail(r);
    }
}

troupe_err
troupe_key_read(troupe_key_reader *r, troupe_key_item *item)
{
    if (r == NULL || item == NULL)
        return TROUPE_EINVAL;
    return key_read(r, item, true);
}

troupe_err
troupe_key_validate(const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return TROUPE_EINVAL;
    troupe_key_reader r;
    troupe_key_reader_init(&r, data, len);
    troupe_key_item item;
    troupe_err e;
    /* ENOENT at depth 0 with p == end is the only clean finish; a nested
     * tuple's ENOENT just continues. */
    while ((e = key_read(&r, &item, false)) == TROUPE_OK ||
           (e == TROUPE_ENOENT && (r.depth > 0 || r.p != r.end)))
        ;
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}
