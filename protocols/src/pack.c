/*
 * Body packer: msgpack-c's packer writing into a growable troupe_malloc
 * buffer that becomes the body (troupe_body_adopt), so a packed body is
 * never copied.
 *
 * The error is sticky so callers can pack a whole body and check once.
 * Container counts are declared up front and msgpack cannot check them as
 * values arrive, so the take functions run the bounded walk over the result:
 * a body that leaves this file is exactly one well-formed object.
 */
#include "troupe/pack.h"

#include <msgpack.h>
#include <string.h>

#include "mpwalk.h"
#include "troupe/alloc.h"
#include "troupe/wire.h"

void
troupe_pack_init(troupe_packer *p)
{
    if (p == NULL)
        return;
    p->data = NULL;
    p->len = 0;
    p->cap = 0;
    p->err = TROUPE_OK;
}

void
troupe_pack_fini(troupe_packer *p)
{
    if (p == NULL)
        return;
    troupe_free(p->data);
    troupe_pack_init(p);
}

static int
grow_write(void *data, const char *buf, size_t len)
{
    troupe_packer *p = data;
    if (len == 0)
        return 0; /* an empty str/bin body may come with a NULL pointer */
    if (len > TROUPE_WIRE_BODY_MAX - p->len) {
        p->err = TROUPE_ETOOBIG;
        return -1;
    }
    if (len > p->cap - p->len) {
        size_t cap = p->cap ? p->cap : 64;
        while (cap - p->len < len)
            cap *= 2;
        if (cap > TROUPE_WIRE_BODY_MAX)
            cap = TROUPE_WIRE_BODY_MAX;
        unsigned char *d = troupe_realloc(p->data, cap);
        if (d == NULL) {
            p->err = TROUPE_ENOMEM;
            return -1;
        }
        p->data = d;
        p->cap = cap;
    }
    memcpy(p->data + p->len, buf, len);
    p->len += len;
    return 0;
}

/* Runs one packing step unless the packer is already in error. The
 * packer struct is two words; building it per call keeps msgpack-c's
 * types out of the public header. */
#define PACK(p, call)                                                          \
    do {                                                                       \
        if ((p) == NULL)                                                       \
            return TROUPE_EINVAL;                                              \
        if ((p)->err != TROUPE_OK)                                             \
            return (p)->err;                                                   \
        msgpack_packer pk_;                                                    \
        msgpack_packer_init(&pk_, (p), grow_write);                            \
        msgpack_packer *pk = &pk_;                                             \
        if ((call) != 0 && (p)->err == TROUPE_OK)                              \
            (p)->err = TROUPE_ENOMEM;                                          \
        return (p)->err;                                                       \
    } while (0)

static troupe_err
fail(troupe_packer *p, troupe_err e)
{
    if (p == NULL)
        return TROUPE_EINVAL;
    if (p->err == TROUPE_OK)
        p->err = e;
    return p->err;
}

troupe_err
troupe_pack_nil(troupe_packer *p)
{
    PACK(p, msgpack_pack_nil(pk));
}

troupe_err
troupe_pack_bool(troupe_packer *p, bool v)
{
    PACK(p, v ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

troupe_err
troupe_pack_uint(troupe_packer *p, uint64_t v)
{
    PACK(p, msgpack_pack_uint64(pk, v));
}

troupe_err
troupe_pack_int(troupe_packer *p, int64_t v)
{
    PACK(p, msgpack_pack_int64(pk, v));
}

troupe_err
troupe_pack_double(troupe_packer *p, double v)
{
    PACK(p, msgpack_pack_double(pk, v));
}

troupe_err
troupe_pack_str(troupe_packer *p, const char *s, size_t len)
{
    if (s == NULL && len > 0)
        return fail(p, TROUPE_EINVAL);
    if (len > UINT32_MAX)
        return fail(p, TROUPE_ETOOBIG);
    PACK(p, msgpack_pack_str(pk, len) | msgpack_pack_str_body(pk, s, len));
}

troupe_err
troupe_pack_cstr(troupe_packer *p, const char *s)
{
    if (s == NULL)
        return fail(p, TROUPE_EINVAL);
    return troupe_pack_str(p, s, strlen(s));
}

troupe_err
troupe_pack_bin(troupe_packer *p, const void *b, size_t len)
{
    if (b == NULL && len > 0)
        return fail(p, TROUPE_EINVAL);
    if (len > UINT32_MAX)
        return fail(p, TROUPE_ETOOBIG);
    PACK(p, msgpack_pack_bin(pk, len) | msgpack_pack_bin_body(pk, b, len));
}

troupe_err
troupe_pack_array(troupe_packer *p, uint32_t n)
{
    PACK(p, msgpack_pack_array(pk, n));
}

troupe_err
troupe_pack_map(troupe_packer *p, uint32_t n)
{
    PACK(p, msgpack_pack_map(pk, n));
}

troupe_err
troupe_pack_raw(troupe_packer *p, const void *raw, size_t len)
{
    if (p == NULL)
        return TROUPE_EINVAL;
    if (p->err != TROUPE_OK)
        return p->err;
    if (raw == NULL)
        return fail(p, TROUPE_EINVAL);
    size_t used;
    if (len > TROUPE_WIRE_BODY_MAX)
        return fail(p, TROUPE_ETOOBIG);
    troupe_err e = troupe__mp_walk(raw, len, TROUPE_WIRE_DEPTH_MAX, &used);
    if (e != TROUPE_OK || used != len)
        return fail(p, TROUPE_EPROTO);
    if (grow_write(p, raw, len) != 0)
        return p->err;
    return TROUPE_OK;
}

const void *
troupe_pack_data(const troupe_packer *p, size_t *len)
{
    if (len != NULL)
        *len = p ? p->len : 0;
    return p ? p->data : NULL;
}

troupe_err
troupe_pack_take_body(troupe_packer *p, troupe_body **out)
{
    if (p == NULL)
        return TROUPE_EINVAL;
    troupe_err e = p->err;
    size_t used = 0;
    if (e == TROUPE_OK && out == NULL)
        e = TROUPE_EINVAL;
    if (e == TROUPE_OK && p->len == 0)
        e = TROUPE_EPROTO;
    if (e == TROUPE_OK) {
        e = troupe__mp_walk(p->data, p->len, TROUPE_WIRE_DEPTH_MAX, &used);
        if (e == TROUPE_OK && used != p->len)
            e = TROUPE_EPROTO;
    }
    if (e != TROUPE_OK) {
        troupe_pack_fini(p);
        return e;
    }
    /* adopt takes the buffer on success and frees it on failure */
    e = troupe_body_adopt(p->data, p->len, out);
    p->data = NULL;
    troupe_pack_fini(p);
    return e;
}

troupe_err
troupe_pack_take_msg(troupe_packer *p, uint32_t kind, troupe_msg **out)
{
    if (p == NULL)
        return TROUPE_EINVAL;
    if (out == NULL) {
        troupe_pack_fini(p);
        return TROUPE_EINVAL;
    }
    troupe_body *b;
    troupe_err e = troupe_pack_take_body(p, &b);
    if (e != TROUPE_OK)
        return e;
    return troupe_msg_create_body(out, kind, &b);
}
