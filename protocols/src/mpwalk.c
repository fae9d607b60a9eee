/*
 * Bounded msgpack scanning.
 *
 * Why our own walk in front of msgpack-c: msgpack-c trusts declared sizes.
 * A 5-byte array32 header makes its unpacker reserve 2 GiB before it sees
 * a single element, and its streaming unpacker can crash when called again
 * after a parse error (NOTES.md). So every frame and body is walked here
 * first, without allocating: each declared count must fit in the bytes
 * that remain (an element is at least one byte), each str/bin/ext length
 * too, nesting is capped, and the walk is an explicit stack so hostile
 * nesting cannot exhaust the C stack. Once a buffer passes, the memory
 * msgpack-c can be made to allocate is bounded by the buffer's length.
 */
#include "mpwalk.h"

#include <stdbool.h>
#include <string.h>

static uint64_t
be(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < n; k++)
        v = (v << 8) | p[k];
    return v;
}

/* Sets a scalar whose payload of `plen` bytes follows a `hlen`-byte
 * header; EPROTO if it does not fit. */
static troupe_err
payload(struct mp_item *it, const unsigned char *p, size_t avail, size_t hlen,
        uint64_t plen)
{
    if (avail < hlen || plen > avail - hlen)
        return TROUPE_EPROTO;
    it->data = p + hlen;
    it->u = plen;
    it->size = hlen + (size_t)plen;
    return TROUPE_OK;
}

static troupe_err
container(struct mp_item *it, troupe_mp_type t, size_t avail, size_t hlen,
          uint64_t n)
{
    if (avail < hlen)
        return TROUPE_EPROTO;
    uint64_t elems = t == TROUPE_MP_MAP ? 2 * n : n;
    if (elems > avail - hlen)
        return TROUPE_EPROTO;
    it->type = t;
    it->u = n;
    it->size = hlen;
    return TROUPE_OK;
}

static troupe_err
fixed(struct mp_item *it, size_t avail, size_t size)
{
    if (avail < size)
        return TROUPE_EPROTO;
    it->size = size;
    return TROUPE_OK;
}

static troupe_err
ext(struct mp_item *it, const unsigned char *p, size_t avail, size_t hlen,
    uint64_t dlen)
{
    /* header, then the type byte, then dlen bytes of data */
    if (avail < hlen + 1 || dlen > avail - hlen - 1)
        return TROUPE_EPROTO;
    it->type = TROUPE_MP_EXT;
    it->ext_type = (int8_t)p[hlen];
    it->data = p + hlen + 1;
    it->u = dlen;
    it->size = hlen + 1 + (size_t)dlen;
    return TROUPE_OK;
}

troupe_err
troupe__mp_item(const unsigned char *p, size_t avail, struct mp_item *it)
{
    memset(it, 0, sizeof(*it));
    if (p == NULL || avail == 0)
        return TROUPE_EPROTO;
    unsigned b = p[0];
    if (b <= 0x7f) {
        it->type = TROUPE_MP_UINT;
        it->u = b;
        it->size = 1;
        return TROUPE_OK;
    }
    if (b >= 0xe0) {
        it->type = TROUPE_MP_INT;
        it->i = (int64_t)(int8_t)b;
        it->size = 1;
        return TROUPE_OK;
    }
    if (b <= 0x8f)
        return container(it, TROUPE_MP_MAP, avail, 1, b & 0x0f);
    if (b <= 0x9f)
        return container(it, TROUPE_MP_ARRAY, avail, 1, b & 0x0f);
    if (b <= 0xbf) {
        it->type = TROUPE_MP_STR;
        return payload(it, p, avail, 1, b & 0x1f);
    }
    troupe_err e;
    switch (b) {
    case 0xc0:
        it->type = TROUPE_MP_NIL;
        it->size = 1;
        return TROUPE_OK;
    case 0xc2:
    case 0xc3:
        it->type = TROUPE_MP_BOOL;
        it->u = b & 1;
        it->size = 1;
        return TROUPE_OK;
    case 0xc4:
    case 0xc5:
    case 0xc6: {
        unsigned n = 1u << (b - 0xc4); /* length bytes: 1, 2, 4 */
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        it->type = TROUPE_MP_BIN;
        return payload(it, p, avail, 1 + n, be(p + 1, n));
    }
    case 0xc7:
    case 0xc8:
    case 0xc9: {
        unsigned n = 1u << (b - 0xc7);
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        return ext(it, p, avail, 1 + n, be(p + 1, n));
    }
    case 0xca:
        if ((e = fixed(it, avail, 5)) != TROUPE_OK)
            return e;
        {
            uint32_t w = (uint32_t)be(p + 1, 4);
            float f;
            memcpy(&f, &w, sizeof(f));
            it->type = TROUPE_MP_FLOAT;
            it->f = f;
        }
        return TROUPE_OK;
    case 0xcb:
        if ((e = fixed(it, avail, 9)) != TROUPE_OK)
            return e;
        {
            uint64_t w = be(p + 1, 8);
            double d;
            memcpy(&d, &w, sizeof(d));
            it->type = TROUPE_MP_FLOAT;
            it->f = d;
        }
        return TROUPE_OK;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf: {
        unsigned n = 1u << (b - 0xcc);
        if ((e = fixed(it, avail, 1 + n)) != TROUPE_OK)
            return e;
        it->type = TROUPE_MP_UINT;
        it->u = be(p + 1, n);
        return TROUPE_OK;
    }
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        unsigned n = 1u << (b - 0xd0);
        if ((e = fixed(it, avail, 1 + n)) != TROUPE_OK)
            return e;
        uint64_t raw = be(p + 1, n);
        int64_t v;
        if (n == 8) {
            memcpy(&v, &raw, sizeof(v));
        } else {
            /* sign-extend an n-byte two's complement value */
            uint64_t sign = 1ull << (8 * n - 1);
            v = (int64_t)((raw ^ sign) - sign);
        }
        if (v >= 0) {
            it->type = TROUPE_MP_UINT;
            it->u = (uint64_t)v;
        } else {
            it->type = TROUPE_MP_INT;
            it->i = v;
        }
        return TROUPE_OK;
    }
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        return ext(it, p, avail, 1, 1u << (b - 0xd4));
    case 0xd9:
    case 0xda:
    case 0xdb: {
        unsigned n = 1u << (b - 0xd9);
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        it->type = TROUPE_MP_STR;
        return payload(it, p, avail, 1 + n, be(p + 1, n));
    }
    case 0xdc:
    case 0xdd: {
        unsigned n = b == 0xdc ? 2 : 4;
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        return container(it, TROUPE_MP_ARRAY, avail, 1 + n, be(p + 1, n));
    }
    case 0xde:
    case 0xdf: {
        unsigned n = b == 0xde ? 2 : 4;
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        return container(it, TROUPE_MP_MAP, avail, 1 + n, be(p + 1, n));
    }
    default: /* 0xc1: never used */
        return TROUPE_EPROTO;
    }
}

/* The walk's view of one item, without decoding it: its header-plus-
 * payload size and, for a container, the elements it owes (2n for a map
 * of n). The same checks as troupe__mp_item, item for item (the fuzz
 * target holds the walk to msgpack-c's verdicts); twice as fast on the
 * read path, where every stored row is walked. */
static inline troupe_err
skip_item(const unsigned char *p, size_t avail, size_t *size, bool *cont,
          uint64_t *elems)
{
    if (avail == 0)
        return TROUPE_EPROTO;
    unsigned b = p[0];
    uint64_t plen;
    size_t hlen;
    *cont = false;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        *size = 1;
        return TROUPE_OK;
    }
    if (b <= 0x9f) { /* fixmap, fixarray */
        *elems = b <= 0x8f ? 2u * (b & 0x0f) : (b & 0x0f);
        if (*elems > avail - 1)
            return TROUPE_EPROTO;
        *size = 1;
        *cont = true;
        return TROUPE_OK;
    }
    if (b <= 0xbf) { /* fixstr */
        hlen = 1;
        plen = b & 0x1f;
    } else if (b >= 0xc4 && b <= 0xc6) { /* bin */
        unsigned n = 1u << (b - 0xc4);
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        hlen = 1 + n;
        plen = be(p + 1, n);
    } else if (b >= 0xd9 && b <= 0xdb) { /* str */
        unsigned n = 1u << (b - 0xd9);
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        hlen = 1 + n;
        plen = be(p + 1, n);
    } else if (b >= 0xc7 && b <= 0xc9) { /* ext 8/16/32 */
        unsigned n = 1u << (b - 0xc7);
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        hlen = 1 + n + 1; /* and the type byte */
        if (avail < hlen)
            return TROUPE_EPROTO;
        plen = be(p + 1, n);
    } else if (b >= 0xd4 && b <= 0xd8) { /* fixext */
        hlen = 2;
        if (avail < hlen)
            return TROUPE_EPROTO;
        plen = 1u << (b - 0xd4);
    } else if (b == 0xca || b == 0xcb || (b >= 0xcc && b <= 0xd3)) {
        size_t n = b == 0xca   ? 5
                   : b == 0xcb ? 9
                   : b <= 0xcf ? 1 + (1u << (b - 0xcc))
                               : 1 + (1u << (b - 0xd0));
        if (avail < n)
            return TROUPE_EPROTO;
        *size = n;
        return TROUPE_OK;
    } else if (b >= 0xdc && b <= 0xdf) { /* array 16/32, map 16/32 */
        unsigned n = (b == 0xdc || b == 0xde) ? 2 : 4;
        if (avail < 1 + n)
            return TROUPE_EPROTO;
        uint64_t cnt = be(p + 1, n);
        *elems = b >= 0xde ? 2 * cnt : cnt;
        if (*elems > avail - 1 - n)
            return TROUPE_EPROTO;
        *size = 1 + n;
        *cont = true;
        return TROUPE_OK;
    } else { /* 0xc1: never used */
        return TROUPE_EPROTO;
    }
    if (plen > avail - hlen)
        return TROUPE_EPROTO;
    *size = hlen + (size_t)plen;
    return TROUPE_OK;
}

troupe_err
troupe__mp_walk(const unsigned char *p, size_t len, unsigned depth_max,
                size_t *used)
{
    if (p == NULL || depth_max > TROUPE__MP_DEPTH_LIMIT)
        return TROUPE_EINVAL;
    /* left[d]: elements still owed by the container open at depth d;
     * left[0] is the single top-level object. */
    uint64_t left[TROUPE__MP_DEPTH_LIMIT + 1];
    unsigned d = 0;
    uint64_t owed = 1; /* sum of left[] */
    size_t pos = 0;
    left[0] = 1;
    for (;;) {
        while (left[d] == 0) {
            if (d == 0) {
                if (used != NULL)
                    *used = pos;
                return TROUPE_OK;
            }
            d--;
        }
        left[d]--;
        owed--;
        size_t size;
        bool cont;
        uint64_t n = 0;
        troupe_err e = skip_item(p + pos, len - pos, &size, &cont, &n);
        if (e != TROUPE_OK)
            return e;
        pos += size;
        if (!cont)
            continue;
        /* An empty container counts as a level too: msgpack-c checks its
         * stack before it looks at the count. */
        if (d == depth_max)
            return TROUPE_EPROTO;
        if (n == 0)
            continue;
        owed += n;
        if (owed > len - pos)
            return TROUPE_EPROTO;
        left[++d] = n;
    }
}
