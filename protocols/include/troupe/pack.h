/*
 * Message bodies: build them with a troupe_packer, read them with a
 * troupe_reader. A body is exactly one msgpack object (usually an array or
 * a map) of at most TROUPE_WIRE_BODY_MAX bytes, nested at most
 * TROUPE_WIRE_DEPTH_MAX deep.
 *
 * Both keep a sticky error: after the first failure every later call
 * returns the same error and does nothing, so a handler can read or write
 * a whole body and check once. Both live in caller storage and are used by
 * one thread at a time; neither blocks.
 *
 *   troupe_packer p;
 *   troupe_pack_init(&p);
 *   troupe_pack_array(&p, 2);
 *   troupe_pack_cstr(&p, "users");
 *   troupe_pack_uint(&p, 42);
 *   troupe_err e = troupe_pack_take_msg(&p, KIND_GET, &msg); // fini'd too
 *
 *   troupe_reader r;
 *   troupe_reader_init_msg(&r, msg);
 *   troupe_read_array_n(&r, 2);
 *   troupe_read_str(&r, 64, &name, &name_len);
 *   troupe_read_uint(&r, &id);
 *   if (troupe_read_end(&r) != TROUPE_OK) ... // EPROTO: reply with it
 */
#ifndef TROUPE_PACK_H
#define TROUPE_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/msg.h"

/* ---- packer ---- */

/* Fields are private; the struct is public only so it can live on the
 * stack. */
typedef struct troupe_packer {
    unsigned char *data; /* troupe_malloc'd, owned until taken */
    size_t len;
    size_t cap;
    troupe_err err;
} troupe_packer;

/* Starts an empty packer (allocates nothing yet). */
void
troupe_pack_init(troupe_packer *p);
/* Frees what the packer still owns; the packer may be init'ed again.
 * Safe after a take and on a packer in error. */
void
troupe_pack_fini(troupe_packer *p);

/*
 * Each appends one value. Errors (sticky): EINVAL (NULL packer, or NULL
 * data with a non-zero length), ENOMEM, ETOOBIG (the body would exceed
 * TROUPE_WIRE_BODY_MAX).
 */
troupe_err
troupe_pack_nil(troupe_packer *p);
troupe_err
troupe_pack_bool(troupe_packer *p, bool v);
troupe_err
troupe_pack_uint(troupe_packer *p, uint64_t v);
troupe_err
troupe_pack_int(troupe_packer *p, int64_t v);
troupe_err
troupe_pack_double(troupe_packer *p, double v);
troupe_err
troupe_pack_str(troupe_packer *p, const char *s, size_t len);
/* s is NUL-terminated; NULL is EINVAL. */
troupe_err
troupe_pack_cstr(troupe_packer *p, const char *s);
troupe_err
troupe_pack_bin(troupe_packer *p, const void *b, size_t len);
/* Container headers: the next n values (2n for a map: key, value, ...)
 * are the container's elements. */
troupe_err
troupe_pack_array(troupe_packer *p, uint32_t n);
troupe_err
troupe_pack_map(troupe_packer *p, uint32_t n);
/* Appends one complete msgpack object given as bytes (for example a value
 * read with troupe_read_raw). EPROTO unless raw[0..len) is exactly one
 * well-formed object. */
troupe_err
troupe_pack_raw(troupe_packer *p, const void *raw, size_t len);

/* The bytes packed so far (borrowed; valid until the next call). */
const void *
troupe_pack_data(const troupe_packer *p, size_t *len);

/*
 * Hands the packed bytes over as a new body (*out, one reference) and
 * fini's the packer, on success and on failure. The bytes must form exactly
 * one msgpack object, so a container whose declared count does not match
 * what was packed fails here with EPROTO. Errors: the sticky error, EINVAL,
 * EPROTO, ENOMEM; *out is untouched on error.
 */
troupe_err
troupe_pack_take_body(troupe_packer *p, troupe_body **out);
/* Same, wrapped in a new message of `kind` that the caller owns. */
troupe_err
troupe_pack_take_msg(troupe_packer *p, uint32_t kind, troupe_msg **out);

/* ---- reader ---- */

typedef enum troupe_mp_type {
    TROUPE_MP_NONE = 0, /* end of input, or the reader is in error */
    TROUPE_MP_NIL,
    TROUPE_MP_BOOL,
    TROUPE_MP_UINT,  /* a non-negative integer, whatever its encoding */
    TROUPE_MP_INT,   /* a negative integer */
    TROUPE_MP_FLOAT, /* float 32 or float 64 */
    TROUPE_MP_STR,
    TROUPE_MP_BIN,
    TROUPE_MP_ARRAY,
    TROUPE_MP_MAP,
    TROUPE_MP_EXT
} troupe_mp_type;

/* Fields are private. The reader borrows the bytes: they must outlive it
 * and everything it returns (strings and binaries point into them). */
typedef struct troupe_reader {
    const unsigned char *p;
    const unsigned char *end;
    troupe_err err;
} troupe_reader;

/*
 * Starts reading data[0..len), which must be exactly one well-formed
 * msgpack object nested at most TROUPE_WIRE_DEPTH_MAX deep (checked here,
 * in one bounded pass). Errors: EINVAL (NULL r, or NULL data with len >
 * 0), EPROTO (empty, malformed, too deep or trailing bytes), ETOOBIG (len
 * over TROUPE_WIRE_BODY_MAX). On error the reader is in that error.
 */
troupe_err
troupe_reader_init(troupe_reader *r, const void *data, size_t len);
/* Same over a message's body; a bodiless message is EPROTO. */
troupe_err
troupe_reader_init_msg(troupe_reader *r, const troupe_msg *m);

/* Type of the next value without consuming it. */
troupe_mp_type
troupe_read_peek(const troupe_reader *r);

/*
 * Each reads the next value, which must have the named type, and fails
 * with EPROTO (sticky) on any other type or when input ends. Integer reads
 * accept any msgpack integer encoding whose value is in range: read_uint
 * and read_u32 reject negative values, read_u32 values over UINT32_MAX,
 * read_int values over INT64_MAX. read_double accepts float 32 and 64.
 * Strings and binaries point into the input (not NUL-terminated) and fail
 * with ETOOBIG when longer than `max` bytes.
 */
troupe_err
troupe_read_nil(troupe_reader *r);
/* Consumes a nil and returns true if the next value is nil; else false,
 * consuming nothing (for optional fields). */
bool
troupe_read_try_nil(troupe_reader *r);
troupe_err
troupe_read_bool(troupe_reader *r, bool *v);
troupe_err
troupe_read_uint(troupe_reader *r, uint64_t *v);
troupe_err
troupe_read_u32(troupe_reader *r, uint32_t *v);
troupe_err
troupe_read_int(troupe_reader *r, int64_t *v);
troupe_err
troupe_read_double(troupe_reader *r, double *v);
troupe_err
troupe_read_str(troupe_reader *r, size_t max, const char **s, size_t *len);
troupe_err
troupe_read_bin(troupe_reader *r, size_t max, const void **b, size_t *len);
/* Container headers; *n receives the element count (pairs for a map). */
troupe_err
troupe_read_array(troupe_reader *r, uint32_t *n);
troupe_err
troupe_read_map(troupe_reader *r, uint32_t *n);
/* Same, but the count must be exactly n (EPROTO otherwise). */
troupe_err
troupe_read_array_n(troupe_reader *r, uint32_t n);
troupe_err
troupe_read_map_n(troupe_reader *r, uint32_t n);
/* Skips the next value, containers included. */
troupe_err
troupe_read_skip(troupe_reader *r);
/* The bytes of the next value, containers included (for example to store
 * or forward it untouched); they point into the input. */
troupe_err
troupe_read_raw(troupe_reader *r, const void **raw, size_t *len);
/* OK when no error occurred and every byte was read; EPROTO for unread
 * bytes; else the sticky error. */
troupe_err
troupe_read_end(troupe_reader *r);

#endif
