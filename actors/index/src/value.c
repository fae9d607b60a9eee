/*
 * The one encoding of a msgpack value as an index key element, shared by
 * derivation (derive.c: every indexed write) and queries (query.c), so
 * that a value a row is indexed under and the same value in a query
 * always encode alike: by declared field type (sparse: an empty or
 * mistyped value gives no element), the CASEFOLD collation (casefold.c),
 * the map-entry form of a query value, and the natural mapping of
 * function indexes. Pure; holds no state.
 */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"

static int
put_int(troupe_reader *r, troupe_key_writer *w)
{
    troupe_err e;
    if (troupe_read_peek(r) == TROUPE_MP_UINT) {
        uint64_t u;
        if ((e = troupe_read_uint(r, &u)) != TROUPE_OK)
            return -(int)e;
        /* int64 sorts below uint64 in the codec, so values past INT64_MAX
         * as uint64 keep numeric order. */
        e = u <= (uint64_t)INT64_MAX ? troupe_key_put_int64(w, (int64_t)u)
                                     : troupe_key_put_uint64(w, u);
    } else {
        int64_t i;
        if ((e = troupe_read_int(r, &i)) != TROUPE_OK)
            return -(int)e;
        e = troupe_key_put_int64(w, i);
    }
    return e == TROUPE_OK ? 1 : -(int)e;
}

/* The string element of s under the CASEFOLD collation. */
troupe_err
troupe__index_put_folded(troupe_key_writer *w, const char *s, size_t n)
{
    unsigned char small[256];
    size_t cap = troupe__index_casefold_max(n);
    unsigned char *b = cap <= sizeof(small) ? small : troupe_malloc(cap);
    if (b == NULL)
        return TROUPE_ENOMEM;
    size_t fl = troupe__index_casefold((const unsigned char *)s, n, b);
    troupe_err e = troupe_key_put_string(w, (const char *)b, fl);
    if (b != small)
        troupe_free(b);
    return e;
}

int
troupe__index_put_value(troupe_reader *r, troupe_field_type t,
                        troupe_key_writer *w)
{
    troupe_mp_type mt = troupe_read_peek(r);
    troupe_err e = TROUPE_OK;
    switch (t) {
    case TROUPE_FIELD_STRING_CASEFOLD:
    case TROUPE_FIELD_STRING:
        if (mt == TROUPE_MP_STR) {
            const char *s;
            size_t n;
            if ((e = troupe_read_str(r, SIZE_MAX, &s, &n)) != TROUPE_OK)
                return -(int)e;
            if (n == 0)
                return 0;
            e = t == TROUPE_FIELD_STRING ? troupe_key_put_string(w, s, n)
                                         : troupe__index_put_folded(w, s, n);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    case TROUPE_FIELD_BYTES:
        if (mt == TROUPE_MP_BIN) {
            const void *b;
            size_t n;
            if ((e = troupe_read_bin(r, SIZE_MAX, &b, &n)) != TROUPE_OK)
                return -(int)e;
            if (n == 0)
                return 0;
            e = troupe_key_put_bytes(w, b, n);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    case TROUPE_FIELD_INT:
    case TROUPE_FIELD_TIMESTAMP:
        if (mt == TROUPE_MP_UINT || mt == TROUPE_MP_INT)
            return put_int(r, w);
        break;
    case TROUPE_FIELD_FLOAT:
        if (mt == TROUPE_MP_FLOAT) {
            double d;
            if ((e = troupe_read_double(r, &d)) != TROUPE_OK)
                return -(int)e;
            e = troupe_key_put_double(w, d);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    case TROUPE_FIELD_BOOL:
        if (mt == TROUPE_MP_BOOL) {
            bool b;
            if ((e = troupe_read_bool(r, &b)) != TROUPE_OK)
                return -(int)e;
            e = troupe_key_put_bool(w, b);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    }
    e = troupe_read_skip(r);
    return e == TROUPE_OK ? 0 : -(int)e;
}

int
troupe__index_put_query_value(troupe_reader *r, troupe_field_type t,
                              troupe_key_writer *w)
{
    if (troupe_read_peek(r) != TROUPE_MP_MAP)
        return troupe__index_put_value(r, t, w);
    uint32_t n = 0;
    const char *k = NULL;
    size_t kl = 0;
    troupe_err e = troupe_read_map(r, &n);
    if (e == TROUPE_OK && n != 1)
        return 0; /* only one map entry is a value */
    if (e == TROUPE_OK && troupe_read_peek(r) != TROUPE_MP_STR)
        return 0;
    if (e == TROUPE_OK)
        e = troupe_read_str(r, SIZE_MAX, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_key_begin_tuple(w);
    if (e == TROUPE_OK)
        e = troupe_key_put_string(w, k, kl);
    if (e != TROUPE_OK)
        return -(int)e;
    int rc = troupe__index_put_value(r, t, w);
    if (rc != 1)
        return rc;
    e = troupe_key_end_tuple(w);
    return e == TROUPE_OK ? 1 : -(int)e;
}

int
troupe__index_put_any(troupe_reader *r, troupe_key_writer *w)
{
    troupe_err e;
    switch (troupe_read_peek(r)) {
    case TROUPE_MP_NIL:
        troupe_read_nil(r);
        e = troupe_key_put_null(w);
        return e == TROUPE_OK ? 1 : -(int)e;
    case TROUPE_MP_BOOL:
        return troupe__index_put_value(r, TROUPE_FIELD_BOOL, w);
    case TROUPE_MP_UINT:
    case TROUPE_MP_INT:
        return put_int(r, w);
    case TROUPE_MP_FLOAT:
        return troupe__index_put_value(r, TROUPE_FIELD_FLOAT, w);
    case TROUPE_MP_STR: {
        const char *s;
        size_t n;
        if ((e = troupe_read_str(r, SIZE_MAX, &s, &n)) != TROUPE_OK)
            return -(int)e;
        e = troupe_key_put_string(w, s, n);
        return e == TROUPE_OK ? 1 : -(int)e;
    }
    case TROUPE_MP_BIN: {
        const void *b;
        size_t n;
        if ((e = troupe_read_bin(r, SIZE_MAX, &b, &n)) != TROUPE_OK)
            return -(int)e;
        e = troupe_key_put_bytes(w, b, n);
        return e == TROUPE_OK ? 1 : -(int)e;
    }
    default:
        return 0;
    }
}
