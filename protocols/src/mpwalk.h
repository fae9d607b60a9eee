/*
 * Bounded msgpack scanning without allocation, shared by the frame decoder
 * (pre-validation before msgpack-c sees the bytes), the body reader and the
 * packer. Input is hostile: nothing here trusts a declared length.
 */
#ifndef TROUPE_MPWALK_H
#define TROUPE_MPWALK_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/pack.h"

/* Deepest nesting any caller may ask troupe__mp_walk for. */
#define TROUPE__MP_DEPTH_LIMIT 64u

/* One decoded item header. */
struct mp_item {
    troupe_mp_type type;
    size_t size; /* bytes of the item: header and payload for scalars,
                    the header only for arrays and maps */
    uint64_t u;  /* UINT: value; ARRAY, MAP: element count (map: pairs);
                    STR, BIN, EXT: payload length; BOOL: 0 or 1 */
    int64_t i;   /* INT: value (negative) */
    double f;    /* FLOAT */
    const unsigned char *data; /* STR, BIN, EXT: payload (EXT: after the
                                  type byte) */
    int8_t ext_type;
};

/*
 * Decodes the item header at p[0..avail). EPROTO when avail is 0, the
 * header or a scalar's payload is cut short, the byte is 0xc1, or a
 * container declares more elements than bytes remain after its header
 * (every element needs at least one byte).
 */
troupe_err
troupe__mp_item(const unsigned char *p, size_t avail, struct mp_item *it);

/*
 * Validates that p[0..len) begins with exactly one complete object whose
 * containers nest at most depth_max deep (a top-level array is depth 1).
 * Iterative: an explicit stack of remaining counts, never recursion. At
 * every container header the sum of elements still owed by all open
 * containers is checked against the bytes that remain. *used receives the
 * object's size (the caller decides whether trailing bytes are an error).
 * EPROTO on anything malformed or too deep.
 */
troupe_err
troupe__mp_walk(const unsigned char *p, size_t len, unsigned depth_max,
                size_t *used);

#endif
