/*
 * Private: what the index module's files (defs, derivation, queries,
 * verify, the actor) share beyond its internal tier
 * (troupe/internal/index.h).
 */
#ifndef TROUPE_INDEX_INT_H
#define TROUPE_INDEX_INT_H

#include "troupe/internal/index.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

#define INDEX_FIELDS_MAX 16
#define INDEX_NAME_MAX 255
#define INDEX_PATH_MAX 1024

typedef struct index_field {
    char *path;
    troupe_field_type type;
} index_field;

struct troupe_index_def {
    uint64_t id;
    char *name;
    bool unique;
    bool ready;
    size_t n_fields;
    index_field fields[INDEX_FIELDS_MAX];
    troupe_cond_op op;
    char *cond_path;
    unsigned char *cond_val; /* one msgpack object, or NULL */
    size_t cond_val_len;
    char *fn_name;
};

/* def.c: whether s is a string of 1 to max bytes of valid UTF-8: the rule
 * for index and function names. */
bool
troupe__index_name_ok(const char *s, size_t max);

/* fns.c: one registered function. */
typedef struct fn_slot {
    char *name;
    troupe_index_fn fn;
    void *ctx;
} fn_slot;

/* fns.c: the function registered as `name` in r, or NULL (also for a NULL
 * r). Reads the registry: do not race a registration. */
const fn_slot *
troupe__index_fns_find(const troupe_index_fns *r, const char *name);

/* value.c (the rest of this block too): appends to w the string element
 * of s (n bytes) under the CASEFOLD collation. ENOMEM. */
troupe_err
troupe__index_put_folded(troupe_key_writer *w, const char *s, size_t n);

/*
 * Appends to w the key element for the msgpack value at r's position as
 * field type t would index it (the one encoding that derive and queries
 * share). Consumes the value. Returns 1 when written, 0 when the value is
 * not of the type or empty (sparse: no key), or a negative troupe_err.
 */
int
troupe__index_put_value(troupe_reader *r, troupe_field_type t,
                        troupe_key_writer *w);

/* Natural mapping for function indexes (no declared types): nil, bool,
 * ints, floats, str, bin. Returns 1, 0 (unsupported type) or -err. */
int
troupe__index_put_any(troupe_reader *r, troupe_key_writer *w);

/* A query value of a declared field: what troupe__index_put_value writes,
 * or, for a one-entry map {key: value} with a string key, the map entry's
 * element (the nested tuple (key, value) that derivation makes for a
 * field holding a map). Same returns. */
int
troupe__index_put_query_value(troupe_reader *r, troupe_field_type t,
                              troupe_key_writer *w);

/* An empty result (freed with troupe_index_result_destroy); NULL without
 * memory. */
troupe_index_result *
troupe__index_result_new(void);

/* A result being built: res and its hits' capacity. */
typedef struct hitbuf {
    troupe_index_result *res;
    size_t cap;
} hitbuf;

/* Sets r's cursor to (tag, id, key) in memory r owns (troupe/cursor.h).
 * ENOMEM. */
troupe_err
troupe__index_result_cursor(troupe_index_result *r, uint8_t tag, uint64_t id,
                            const void *key, size_t klen);

/* Appends one hit; its bytes (pk, then key and val when non-NULL) are
 * copied into one block that the result owns. ENOMEM. */
troupe_err
troupe__index_hit_push(hitbuf *h, const void *key, size_t key_len,
                       const void *pk, size_t pk_len, const void *val,
                       size_t val_len, uint64_t exp);

#endif
