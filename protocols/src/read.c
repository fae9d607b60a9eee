/*
 * Body reader: a cursor over msgpack bytes that type-checks every value.
 *
 * It does not use msgpack-c: reading a body needs no allocation and no
 * object tree, only the item headers that mpwalk.c already decodes with
 * bounds checks. init validates the whole body once (exactly one object,
 * depth-capped); each read still checks its own bounds, so a reader
 * misused after an error can never run past the end.
 */
#include <string.h>

#include "mpwalk.h"
#include "troupe/pack.h"
#include "troupe/wire.h"

static troupe_err
fail(troupe_reader *r, troupe_err e)
{
    if (r->err == TROUPE_OK)
        r->err = e;
    return r->err;
}

troupe_err
troupe_reader_init(troupe_reader *r, const void *data, size_t len)
{
    if (r == NULL)
        return TROUPE_EINVAL;
    r->p = data;
    r->end = data ? r->p + len : r->p;
    r->err = TROUPE_OK;
    if (data == NULL && len > 0)
        return fail(r, TROUPE_EINVAL);
    if (len > TROUPE_WIRE_BODY_MAX)
        return fail(r, TROUPE_ETOOBIG);
    if (len == 0)
        return fail(r, TROUPE_EPROTO);
    size_t used;
    troupe_err e = troupe__mp_walk(data, len, TROUPE_WIRE_DEPTH_MAX, &used);
    if (e != TROUPE_OK || used != len)
        return fail(r, TROUPE_EPROTO);
    return TROUPE_OK;
}

troupe_err
troupe_reader_init_msg(troupe_reader *r, const troupe_msg *m)
{
    if (r == NULL)
        return TROUPE_EINVAL;
    if (m == NULL) {
        r->p = r->end = NULL;
        r->err = TROUPE_EINVAL;
        return r->err;
    }
    return troupe_reader_init(r, troupe_msg_data(m), troupe_msg_len(m));
}

/* Decodes the next item header into *it without consuming it. */
static troupe_err
next(troupe_reader *r, struct mp_item *it)
{
    if (r->err != TROUPE_OK)
        return r->err;
    troupe_err e = troupe__mp_item(r->p, (size_t)(r->end - r->p), it);
    if (e != TROUPE_OK)
        return fail(r, e);
    return TROUPE_OK;
}

/* Consumes the next item if it has type t. */
static troupe_err
expect(troupe_reader *r, troupe_mp_type t, struct mp_item *it)
{
    troupe_err e = next(r, it);
    if (e != TROUPE_OK)
        return e;
    if (it->type != t)
        return fail(r, TROUPE_EPROTO);
    r->p += it->size;
    return TROUPE_OK;
}

troupe_mp_type
troupe_read_peek(const troupe_reader *r)
{
    struct mp_item it;
    if (r == NULL || r->err != TROUPE_OK || r->p == r->end)
        return TROUPE_MP_NONE;
    if (troupe__mp_item(r->p, (size_t)(r->end - r->p), &it) != TROUPE_OK)
        return TROUPE_MP_NONE;
    return it.type;
}

troupe_err
troupe_read_nil(troupe_reader *r)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    return expect(r, TROUPE_MP_NIL, &it);
}

bool
troupe_read_try_nil(troupe_reader *r)
{
    if (troupe_read_peek(r) != TROUPE_MP_NIL)
        return false;
    r->p++;
    return true;
}

troupe_err
troupe_read_bool(troupe_reader *r, bool *v)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (v == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = expect(r, TROUPE_MP_BOOL, &it);
    if (e == TROUPE_OK)
        *v = it.u != 0;
    return e;
}

troupe_err
troupe_read_uint(troupe_reader *r, uint64_t *v)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (v == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = expect(r, TROUPE_MP_UINT, &it);
    if (e == TROUPE_OK)
        *v = it.u;
    return e;
}

troupe_err
troupe_read_u32(troupe_reader *r, uint32_t *v)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (v == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = next(r, &it);
    if (e != TROUPE_OK)
        return e;
    if (it.type != TROUPE_MP_UINT || it.u > UINT32_MAX)
        return fail(r, TROUPE_EPROTO);
    r->p += it.size;
    *v = (uint32_t)it.u;
    return TROUPE_OK;
}

troupe_err
troupe_read_int(troupe_reader *r, int64_t *v)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (v == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = next(r, &it);
    if (e != TROUPE_OK)
        return e;
    if (it.type == TROUPE_MP_INT)
        *v = it.i;
    else if (it.type == TROUPE_MP_UINT && it.u <= INT64_MAX)
        *v = (int64_t)it.u;
    else
        return fail(r, TROUPE_EPROTO);
    r->p += it.size;
    return TROUPE_OK;
}

troupe_err
troupe_read_double(troupe_reader *r, double *v)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (v == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = expect(r, TROUPE_MP_FLOAT, &it);
    if (e == TROUPE_OK)
        *v = it.f;
    return e;
}

static troupe_err
read_bytes(troupe_reader *r, troupe_mp_type t, size_t max, const void **out,
           size_t *len)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (out == NULL || len == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = next(r, &it);
    if (e != TROUPE_OK)
        return e;
    if (it.type != t)
        return fail(r, TROUPE_EPROTO);
    if (it.u > max)
        return fail(r, TROUPE_ETOOBIG);
    r->p += it.size;
    *out = it.data;
    *len = (size_t)it.u;
    return TROUPE_OK;
}

troupe_err
troupe_read_str(troupe_reader *r, size_t max, const char **s, size_t *len)
{
    const void *v = NULL;
    troupe_err e = read_bytes(r, TROUPE_MP_STR, max, s ? &v : NULL, len);
    if (e == TROUPE_OK)
        *s = v;
    return e;
}

troupe_err
troupe_read_bin(troupe_reader *r, size_t max, const void **b, size_t *len)
{
    return read_bytes(r, TROUPE_MP_BIN, max, b, len);
}

static troupe_err
read_container(troupe_reader *r, troupe_mp_type t, uint32_t *n, bool exact,
               uint32_t want)
{
    struct mp_item it;
    if (r == NULL)
        return TROUPE_EINVAL;
    if (!exact && n == NULL)
        return fail(r, TROUPE_EINVAL);
    troupe_err e = next(r, &it);
    if (e != TROUPE_OK)
        return e;
    if (it.type != t || (exact && it.u != want))
        return fail(r, TROUPE_EPROTO);
    r->p += it.size;
    if (n != NULL)
        *n = (uint32_t)it.u;
    return TROUPE_OK;
}

troupe_err
troupe_read_array(troupe_reader *r, uint32_t *n)
{
    return read_container(r, TROUPE_MP_ARRAY, n, false, 0);
}

troupe_err
troupe_read_map(troupe_reader *r, uint32_t *n)
{
    return read_container(r, TROUPE_MP_MAP, n, false, 0);
}

troupe_err
troupe_read_array_n(troupe_reader *r, uint32_t n)
{
    return read_container(r, TROUPE_MP_ARRAY, NULL, true, n);
}

troupe_err
troupe_read_map_n(troupe_reader *r, uint32_t n)
{
    return read_container(r, TROUPE_MP_MAP, NULL, true, n);
}

troupe_err
troupe_read_raw(troupe_reader *r, const void **raw, size_t *len)
{
    if (r == NULL)
        return TROUPE_EINVAL;
    if (raw == NULL || len == NULL)
        return fail(r, TROUPE_EINVAL);
    if (r->err != TROUPE_OK)
        return r->err;
    size_t used;
    troupe_err e = troupe__mp_walk(r->p, (size_t)(r->end - r->p),
                                   TROUPE_WIRE_DEPTH_MAX, &used);
    if (e != TROUPE_OK)
        return fail(r, e);
    *raw = r->p;
    *len = used;
    r->p += used;
    return TROUPE_OK;
}

troupe_err
troupe_read_skip(troupe_reader *r)
{
    const void *raw;
    size_t len;
    return troupe_read_raw(r, &raw, &len);
}

troupe_err
troupe_read_end(troupe_reader *r)
{
    if (r == NULL)
        return TROUPE_EINVAL;
    if (r->err != TROUPE_OK)
        return r->err;
    if (r->p != r->end)
        return fail(r, TROUPE_EPROTO);
    return TROUPE_OK;
}
