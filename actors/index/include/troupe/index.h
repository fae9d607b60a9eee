/*
 * Secondary indexes, what a user declares and reads: specifications, the
 * function registry, queries and their results (run through the tables:
 * troupe/table.h). Formats: docs/data-model.md. The definitions,
 * derivation, the query runner, verify and the index actor are the data
 * layer's (troupe/internal/index.h).
 */
#ifndef TROUPE_INDEX_H
#define TROUPE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/actor.h"
#include "troupe/err.h"
#include "troupe/storage.h"

typedef enum troupe_field_type {
    TROUPE_FIELD_STRING = 0,
    TROUPE_FIELD_INT,
    TROUPE_FIELD_FLOAT,
    TROUPE_FIELD_BOOL,
    TROUPE_FIELD_TIMESTAMP,
    TROUPE_FIELD_BYTES,
    /* A string under the CASEFOLD collation (opt-in, case-insensitive):
     * keys and queries use its Unicode simple case folding, so strings
     * that differ only by case match each other; the original string is
     * kept in the key as a tiebreak (data-model.md says exactly what
     * compares equal). A unique index of such a field refuses two rows
     * whose strings fold alike. */
    TROUPE_FIELD_STRING_CASEFOLD
} troupe_field_type;

typedef struct troupe_index_field {
    /* dot-separated path into nested maps, through arrays (Tito's rules:
     * data-model.md, "Derivation") */
    const char *path;
    troupe_field_type type;
} troupe_index_field;

typedef enum troupe_cond_op {
    TROUPE_COND_NONE = 0, /* no condition: every row qualifies */
    TROUPE_COND_EXISTS,   /* the field is present and not nil */
    TROUPE_COND_EQ,       /* the field equals value (same kind) */
    TROUPE_COND_NE,       /* the field is absent or differs */
    TROUPE_COND_TRUE      /* the field is boolean true */
} troupe_cond_op;

typedef struct troupe_index_cond {
    troupe_cond_op op;
    const char *path;
    /* for EQ/NE: one msgpack object (borrowed for the call that copies
     * the spec) */
    const void *value;
    size_t value_len;
} troupe_index_cond;

/* Emits one entry: `values` is a tuple-codec encoding of the key values
 * (without the primary key; see keycodec.h), `val` an optional msgpack
 * value (NULL/0 for none). Returns what the emitter returns. */
typedef troupe_err (*troupe_index_emit_fn)(void *emit_ctx, const void *values,
                                           size_t values_len, const void *val,
                                           size_t val_len);

/* A function index (mokuroku's map/emit): called with the document (one
 * msgpack map) and its primary key; calls emit zero or more times. Runs on
 * the table actor's thread or a worker: it must not block or keep
 * pointers. */
typedef troupe_err (*troupe_index_fn)(void *fn_ctx, const void *doc,
                                      size_t doc_len, const void *pk,
                                      size_t pk_len, troupe_index_emit_fn emit,
                                      void *emit_ctx);

typedef struct troupe_index_spec {
    const char *name; /* 1..255 bytes */
    bool unique;
    /* declared: 1..16 fields; or a function (fields NULL, n_fields 0) */
    const troupe_index_field *fields;
    size_t n_fields;
    troupe_index_cond cond;
    const char *fn_name; /* registered with troupe_index_register_fn */
} troupe_index_spec;

/* Function indexes are resolved by name through a registry the host fills
 * at start-up; it belongs to the caller (one per database). */
typedef struct troupe_index_fns troupe_index_fns;
troupe_err
troupe_index_fns_create(troupe_index_fns **out);
void
troupe_index_fns_destroy(troupe_index_fns *r);
/* EEXIST when the name is taken; EINVAL for a bad name. */
troupe_err
troupe_index_register_fn(troupe_index_fns *r, const char *name,
                         troupe_index_fn fn, void *fn_ctx);

/* Most entries one row may derive for one index (an array or map field,
 * or the cartesian product of several, or a function's emits); more is
 * ETOOBIG, as is one field with more qualifying elements (leaf elements
 * of its arrays, entries of its map). */
#define TROUPE_INDEX_ROW_KEYS_MAX 4096

/* ---- queries ---------------------------------------------------------- */

/*
 * One query over one index. Every pointer is borrowed for the call.
 *
 * What it matches, in the index's key order:
 *  - values: a msgpack array of 1..n leading values of the index (n the
 *    number of declared fields): all n is an exact match, fewer a prefix
 *    of a composite. Each value must be of its field's declared type and
 *    one that the index can hold (a non-empty string or bytes, an int for
 *    int and timestamp, a float32/64 for float, a bool; a CASEFOLD string
 *    is folded), or a one-entry map {key: value} with a string key and
 *    such a value, which matches the entries derived from a map field.
 *    Function indexes take any number of nil, bool, int, float, str or
 *    bin values, mapped as a function would emit them with the tuple
 *    codec (int: int64, or uint64 past INT64_MAX; float: double; str:
 *    string; bin: bytes).
 *  - from/to: msgpack arrays of leading values with the same rules: the
 *    half-open range [from, to) in value order, a bound NULL for open
 *    (from at or after to is EINVAL: an empty range is refused);
 *    from = [a], to = [b] is "first field in [a, b)".
 *  - neither: the whole index. values together with from/to is EINVAL.
 *
 * limit: at most this many hits (0 is EINVAL). after: a previous result's
 * cursor (troupe/cursor.h), which names the index and the exact key to
 * continue after, as storage.h's cursor rules: forward continues strictly
 * after it, reverse before it; a cursor of another index (or of another
 * kind of page, or malformed) and one outside the matched range are
 * ERANGE.
 *
 * rows false ("covering"): each hit carries the entry's stored value (the
 * emitted msgpack value, nil for a declared index) and no row is read, so
 * an expired row's entries still appear until the TTL scanner removes
 * them. rows true: each hit carries the row's document, read by primary
 * key in the same snapshot; a row that has expired (expires_at_ms != 0
 * and <= now) is skipped (invisible), a missing row or an undecodable row
 * envelope is ECORRUPT (the page is never silently shortened).
 *
 * Errors of a query: EINVAL (limit 0, values with from/to, a values array
 * that is empty, too long, or holds a value of the wrong type), EPROTO
 * (values, from or to not one msgpack array), ESTATE (the index is still
 * building), ERANGE (a cursor outside the range, or not this index's),
 * ECORRUPT (an entry key not values-then-pk, an entry value that is not
 * msgpack, a missing or undecodable row), EIO, ENOMEM.
 */
typedef struct troupe_index_query {
    const void *values;
    size_t values_len;
    const void *from;
    size_t from_len;
    const void *to;
    size_t to_len;
    bool reverse;
    size_t limit;
    const void *after;
    size_t after_len;
    bool rows;
} troupe_index_query;

typedef struct troupe_index_hit {
    const uint8_t *key; /* the index key (NULL in an AND result) */
    size_t key_len;
    const uint8_t *pk;
    size_t pk_len;
    const uint8_t *val; /* entry value, or the row's doc (rows) */
    size_t val_len;
    uint64_t expires_at_ms; /* rows only */
} troupe_index_hit;

/* One allocation tree owned by the caller; every pointer in it lives until
 * troupe_index_result_destroy. Only troupe allocates one (it carries more
 * than the struct shows): destroy the pointer handed out, never a copy. */
typedef struct troupe_index_result {
    size_t n;
    troupe_index_hit *hits;
    /* Continue-after cursor (troupe/cursor.h): it names this index (this
     * table in an AND result) and the last hit's index key (its primary
     * key in an AND result); NULL when n == 0. */
    const uint8_t *cursor;
    size_t cursor_len;
    /* True when the range holds at least one more entry past the cursor
     * (with rows, that entry's row may turn out expired). */
    bool more;
} troupe_index_result;

/* NULL is a no-op. */
void
troupe_index_result_destroy(troupe_index_result *r);

/* Most entries each side of an AND query may match (ETOOBIG beyond). */
#define TROUPE_INDEX_AND_MAX (1u << 20)

#endif
