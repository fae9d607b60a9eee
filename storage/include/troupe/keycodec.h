/*
 * Order-preserving tuple codec for keys.
 *
 * A key is a tuple of elements: null, bool, int64, uint64, double, string,
 * bytes, or a nested tuple. Its encoding has three properties:
 *  1. order: memcmp order of encodings (shorter prefix first, RocksDB's
 *     bytewise comparator) equals the value order of the tuples;
 *  2. no collisions: distinct tuples have distinct encodings (after the
 *     canonicalisation of doubles below);
 *  3. round trip: decoding an encoding gives back the tuple; decoding
 *     anything else is EPROTO, and never reads outside the input.
 * And a prefix property: the encoding of (a, b) begins with that of (a).
 *
 * Tuple-prefix queries: use troupe_key_writer_range, not a byte-prefix
 * range. The encoding of ("a") is 20 61 00, which is also a byte prefix of
 * the encoding of ("a\0x") = 20 61 00 FF 78 00: a byte-prefix range over an
 * encoding that ends with a string or bytes element also matches longer
 * strings that continue with a 0x00 byte. The exact set of keys whose tuple
 * begins with the k encoded elements is [enc, enc + 0xFF): what follows a
 * complete element is a tag (< 0xFF), an end marker (0x00) or nothing,
 * while an escaped 0x00 continues with 0xFF.
 *
 * Value order. Elements compare first by type, in this order, then by
 * value within the type:
 *   null < false < true < int64 < uint64 < double < string < bytes < tuple
 * int64, uint64 and double are distinct types: int64 5 sorts before uint64
 * 1 and before double 0.5. Store a column with one numeric type. Tuples
 * compare element by element; a tuple that is a prefix of another sorts
 * first, nested or not.
 *
 * Format (docs/storage.md has it byte by byte): a tag byte per element;
 *   0x00 end of a nested tuple (only inside one; sorts below every tag)
 *   0x01 null   0x02 false   0x03 true
 *   0x10 int64  + 8 bytes big-endian, sign bit flipped
 *   0x11 uint64 + 8 bytes big-endian
 *   0x12 double + 8 bytes: IEEE bits big-endian; negative: all bits
 *        flipped, else the sign bit flipped
 *   0x20 string + bytes, 0x00 escaped as 0x00 0xFF, then 0x00
 *   0x21 bytes  + same as string
 *   0x30 tuple  + elements + 0x00
 * Doubles are canonicalised before encoding: -0.0 is stored as +0.0 and
 * every NaN as the quiet NaN 0x7FF8000000000000, which sorts above +inf.
 * So -0.0 decodes as +0.0 and NaN payloads are lost; the decoder rejects
 * the encodings of -0.0 and of other NaNs (EPROTO), keeping the format
 * canonical. Strings are bytes to the codec (no UTF-8 check); the string
 * and bytes types differ only by tag.
 *
 * Nesting is limited to TROUPE_KEY_DEPTH_MAX open tuples (ETOOBIG when
 * encoding, EPROTO when decoding).
 *
 * Threads: a writer or reader is used by one thread at a time; different
 * ones are independent. Nothing here blocks.
 */
#ifndef TROUPE_KEYCODEC_H
#define TROUPE_KEYCODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/storage.h"

#define TROUPE_KEY_DEPTH_MAX 32

/* Tag bytes (part of the stored format: never change them). */
#define TROUPE_KEY_TAG_END 0x00
#define TROUPE_KEY_TAG_NULL 0x01
#define TROUPE_KEY_TAG_FALSE 0x02
#define TROUPE_KEY_TAG_TRUE 0x03
#define TROUPE_KEY_TAG_INT64 0x10
#define TROUPE_KEY_TAG_UINT64 0x11
#define TROUPE_KEY_TAG_DOUBLE 0x12
#define TROUPE_KEY_TAG_STRING 0x20
#define TROUPE_KEY_TAG_BYTES 0x21
#define TROUPE_KEY_TAG_TUPLE 0x30

typedef enum troupe_key_type {
    TROUPE_KEY_NULL = 1,
    TROUPE_KEY_BOOL,
    TROUPE_KEY_INT64,
    TROUPE_KEY_UINT64,
    TROUPE_KEY_DOUBLE,
    TROUPE_KEY_STRING,
    TROUPE_KEY_BYTES,
    TROUPE_KEY_TUPLE /* the start of a nested tuple */
} troupe_key_type;

/*
 * An encoder in the caller's storage (init/fini). It owns its buffer.
 * The first error sticks: later calls return it and do nothing, and
 * finish reports it, so a caller may check only finish.
 */
typedef struct troupe_key_writer {
    uint8_t *buf;
    size_t len;
    size_t cap;
    unsigned depth;
    troupe_err err;
} troupe_key_writer;

void
troupe_key_writer_init(troupe_key_writer *w);
/* Frees the buffer; the writer may be init'ed again. */
void
troupe_key_writer_fini(troupe_key_writer *w);
/* Empties the writer (keeps the buffer) and clears a sticky error. */
void
troupe_key_writer_reset(troupe_key_writer *w);

/* Appending one element. Errors: EINVAL (NULL writer, or NULL data with a
 * non-zero length), ENOMEM, and the sticky error. */
troupe_err
troupe_key_put_null(troupe_key_writer *w);
troupe_err
troupe_key_put_bool(troupe_key_writer *w, bool v);
troupe_err
troupe_key_put_int64(troupe_key_writer *w, int64_t v);
troupe_err
troupe_key_put_uint64(troupe_key_writer *w, uint64_t v);
troupe_err
troupe_key_put_double(troupe_key_writer *w, double v);
troupe_err
troupe_key_put_string(troupe_key_writer *w, const char *s, size_t len);
troupe_err
troupe_key_put_bytes(troupe_key_writer *w, const void *p, size_t len);
/* Opens a nested tuple; ETOOBIG past TROUPE_KEY_DEPTH_MAX. */
troupe_err
troupe_key_begin_tuple(troupe_key_writer *w);
/* Closes the innermost nested tuple; ESTATE when none is open. */
troupe_err
troupe_key_end_tuple(troupe_key_writer *w);

/*
 * The encoded key: *key points into the writer's buffer (valid until the
 * next call on the writer or fini). Errors: EINVAL (NULL), ESTATE (a
 * nested tuple is still open), or the sticky error.
 */
troupe_err
troupe_key_writer_finish(troupe_key_writer *w, const uint8_t **key,
                         size_t *len);

/*
 * The range of every key whose tuple begins with the elements written so
 * far: [enc, enc + 0xFF) (see "Tuple-prefix queries" above), stored in *r
 * as a bounds range. Both bounds point into the writer's buffer: valid
 * until the next call on the writer or fini. Errors as
 * troupe_key_writer_finish.
 */
troupe_err
troupe_key_writer_range(troupe_key_writer *w, troupe_range *r);

/* One decoded element. */
typedef struct troupe_key_item {
    troupe_key_type type;
    union {
        bool b;
        int64_t i64;
        uint64_t u64;
        double d;
        struct {
            /* Points into the input or into the reader's scratch buffer:
             * valid until the next read or fini. */
            const uint8_t *ptr;
            size_t len;
        } s;
    } v;
} troupe_key_item;

/* A decoder in the caller's storage; borrows the input bytes. */
typedef struct troupe_key_reader {
    const uint8_t *p;
    const uint8_t *end;
    unsigned depth;
    troupe_err err;
    uint8_t *scratch; /* unescaped strings; owned */
    size_t scratch_cap;
} troupe_key_reader;

/* data may be NULL only with len 0 (the empty tuple). */
void
troupe_key_reader_init(troupe_key_reader *r, const void *data, size_t len);
void
troupe_key_reader_fini(troupe_key_reader *r);

/*
 * Reads the next element into *item. TROUPE_KEY_TUPLE means a nested
 * tuple begins: the following reads return its elements, then ENOENT once
 * at its end, after which reads continue in the enclosing tuple.
 * Returns OK; ENOENT at the end of the current tuple (at top level: the
 * end of the input, on every later call too); EPROTO for malformed input
 * (unknown tag, truncated element, unterminated string or tuple, stray end
 * marker, non-canonical double, nesting too deep), after which every call
 * returns EPROTO; ENOMEM; EINVAL (NULL).
 */
troupe_err
troupe_key_read(troupe_key_reader *r, troupe_key_item *item);

/* Checks that data is exactly one well-formed key: OK or EPROTO (EINVAL
 * for NULL with len > 0, ENOMEM). */
troupe_err
troupe_key_validate(const void *data, size_t len);

#endif
