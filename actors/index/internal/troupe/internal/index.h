/*
 * The index module's side for the data layer (the table actor, the
 * catalog, transactions), its tests, benches and fuzz targets: index
 * definitions and their catalog form, derivation of entries, the index
 * family key's parts, the query runner, verify, and the index actor that
 * serves a table's queries. Formats: docs/data-model.md. The table actor
 * derives index entries with troupe_index_derive while it prepares a
 * write, so row, entries and manifest commit in one batch.
 */
#ifndef TROUPE_INTERNAL_INDEX_H
#define TROUPE_INTERNAL_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/actor.h"
#include "troupe/err.h"
#include "troupe/index.h"
#include "troupe/storage.h"

/* A validated, self-contained copy of a spec plus its catalog id. */
typedef struct troupe_index_def troupe_index_def;

/*
 * Validates and copies a spec. Errors: EINVAL (bad name, no fields and no
 * function, too many fields, empty path or path segment, unknown type or
 * op, EQ/NE value that is not one msgpack object of the field's kind,
 * unique function index), ENOMEM.
 */
troupe_err
troupe_index_def_create(const troupe_index_spec *spec, uint64_t id,
                        troupe_index_def **out);
void
troupe_index_def_destroy(troupe_index_def *d);
uint64_t
troupe_index_def_id(const troupe_index_def *d);
const char *
troupe_index_def_name(const troupe_index_def *d);
bool
troupe_index_def_unique(const troupe_index_def *d);
/* Catalog form (docs/data-model.md) of a def, and back. */
troupe_err
troupe_index_def_pack(const troupe_index_def *d, void **out, size_t *len);
troupe_err
troupe_index_def_unpack(const void *data, size_t len, troupe_index_def **out);

/* State in the catalog ("ready" or "building"). troupe_index_def_create
 * makes a ready def; the table actor marks a def it still has to build
 * with set_ready(d, false) before packing it. Queries on a building index
 * fail with ESTATE. Not synchronised: set it before sharing the def. */
bool
troupe_index_def_ready(const troupe_index_def *d);
void
troupe_index_def_set_ready(troupe_index_def *d, bool ready);
/* A copy of d (spec and state) under catalog id `id` (a rebuild gives the
 * index a fresh id and family). *out is the caller's. Errors: EINVAL (NULL,
 * id 0), ENOMEM. Pure; any thread. */
troupe_err
troupe_index_def_clone(const troupe_index_def *d, uint64_t id,
                       troupe_index_def **out);
/* Whether a and b come from the same spec (name, unique, fields with their
 * paths, types and options, condition, function): the catalog id and the
 * state are not compared. Pure; any thread. */
bool
troupe_index_def_same(const troupe_index_def *a, const troupe_index_def *b);
/* Declared fields (0 for a function index) and the function's name (NULL
 * for a declared index); the string lives as long as the def. */
size_t
troupe_index_def_n_fields(const troupe_index_def *d);
const char *
troupe_index_def_fn_name(const troupe_index_def *d);

/*
 * Splits an index family key: *values_len is the length of the values part
 * (the key minus its trailing bytes(pk) element), *pk_escaped (may be NULL)
 * tells whether the primary key holds 0x00 bytes, which the codec escapes.
 * Errors: EINVAL (NULL, empty), EPROTO (not values-then-pk: malformed, no
 * value, last element not non-empty bytes). Pure; any thread.
 *
 * troupe_index_key_pk above borrows *pk from `key`, which is only possible
 * when the primary key needs no unescaping: it returns ENOTSUP for a
 * primary key that holds a 0x00 byte (every tuple-codec primary key with a
 * string element does). troupe_index_key_pk_copy works for every key: *pk
 * is troupe_malloc'd (caller frees with troupe_free; non-NULL on OK).
 */
troupe_err
troupe_index_key_split(const void *key, size_t key_len, size_t *values_len,
                       bool *pk_escaped);
troupe_err
troupe_index_key_pk_copy(const void *key, size_t key_len, void **pk,
                         size_t *pk_len);

/* Whether `name` is registered in r (false for a NULL r or name). Reads
 * the registry: do not race a registration (fill it at start-up). */
bool
troupe_index_fn_registered(const troupe_index_fns *r, const char *name);

/* One derived entry: the full index family key (values then pk, see
 * docs/data-model.md) and the msgpack value stored with it. */
typedef struct troupe_index_entry {
    unsigned char *key;
    size_t key_len;
    /* The leading bytes of key that hold the indexed values, which a unique
     * index compares: the key without bytes(pk) and without the original
     * strings of CASEFOLD fields (their tiebreaks). */
    size_t values_len;
    unsigned char *val; /* NULL: nil */
    size_t val_len;
} troupe_index_entry;

typedef struct troupe_index_entries {
    troupe_index_entry *v;
    size_t n, cap;
} troupe_index_entries;

void
troupe_index_entries_init(troupe_index_entries *e);
void
troupe_index_entries_fini(troupe_index_entries *e);

/*
 * Appends to *out the entries `d` derives from document `doc` (one msgpack
 * map) with primary key `pk`, following Tito's path and sparse rules
 * (arrays anywhere on the path, nested arrays one entry per leaf element,
 * a map value one entry per map entry, the cartesian product over the
 * fields: data-model.md, "Derivation"), sorted by key with duplicates
 * removed. A row that yields no key appends nothing. Errors: EPROTO (doc
 * is not one well-formed map), ENOENT (function index whose function is
 * not registered in fns), ETOOBIG (a key over TROUPE_KEY_MAX, or more than
 * TROUPE_INDEX_ROW_KEYS_MAX elements or keys), the function's own error,
 * ENOMEM. Pure: no I/O; any thread.
 */
troupe_err
troupe_index_derive(const troupe_index_def *d, const troupe_index_fns *fns,
                    const void *doc, size_t doc_len, const void *pk,
                    size_t pk_len, troupe_index_entries *out);

/* The primary key at the end of an index family key; EPROTO if the key is
 * not values-then-pk in the tuple codec. */
troupe_err
troupe_index_key_pk(const void *key, size_t key_len, const void **pk,
                    size_t *pk_len);

/* The CASEFOLD collation (casefold.c): folds s[0..n) into out, which has
 * room for troupe__index_casefold_max(n) bytes; returns the length (n
 * and the bytes as they are when s is not valid UTF-8). */
size_t
troupe__index_casefold_max(size_t n);
size_t
troupe__index_casefold(const unsigned char *s, size_t n, unsigned char *out);

/* ---- queries (blocking: call on a worker) ------------------------------ */

/*
 * A query as the data layer runs it: the user's query (troupe/index.h)
 * and what the caller adds from the catalog. def: the index (a building
 * one answers ESTATE); table_id: the table whose row family
 * "t.<table_id>" rows queries read; now_ms: the expiry clock of rows
 * queries (0: the wall clock); snap: the view to read (NULL: one snapshot
 * is taken for the call). Every pointer is borrowed for the call.
 */
typedef struct troupe__index_run {
    const troupe_index_query *q;
    const troupe_index_def *def;
    uint64_t table_id;
    uint64_t now_ms;
    const troupe_snapshot *snap;
} troupe__index_run;

/*
 * Runs q. On OK *out is a result (possibly with n == 0). Errors: EINVAL
 * (NULL, limit 0, values with from/to, a values array that is empty, too
 * long, or holds a value of the wrong type), EPROTO (values, from or to
 * not one msgpack array), ESTATE (the index is still building), ENOENT (a
 * family is missing), ERANGE (cursor outside the range), ECORRUPT (an
 * entry key not values-then-pk, an entry value that is not msgpack, a
 * missing or undecodable row), EIO, ENOMEM. Blocks: call on a worker.
 */
troupe_err
troupe_index_query_run(troupe_db *db, const troupe__index_run *q,
                       troupe_index_result **out);

/* Number of index entries q matches (values, from/to; limit, after, rows
 * and reverse are ignored). An array field counts a row once per element.
 * O(entries matched). Errors as query_run. Blocks. */
troupe_err
troupe_index_count(troupe_db *db, const troupe__index_run *q, uint64_t *out);

/*
 * AND of two indexes of one table (mokuroku's query_all_keys): the primary
 * keys that both a and b match, ascending bytewise, deduplicated, at most
 * `limit`, continuing strictly after the primary key a previous AND
 * result's cursor names (`after`, a cursor of table a->table_id: ERANGE
 * for any other; NULL: from the start). Only the queries' values/from/to,
 * snap and a->table_id are used; hits carry pk only. Each side may match at
 * most TROUPE_INDEX_AND_MAX entries (ETOOBIG beyond). Errors as query_run, plus
 * EINVAL for limit 0. Blocks.
 */
troupe_err
troupe_index_query_and(troupe_db *db, const troupe__index_run *a,
                       const troupe__index_run *b, const void *after,
                       size_t after_len, size_t limit,
                       troupe_index_result **out);

/* ---- verify (blocking: call on a worker) ------------------------------- */

typedef enum troupe_index_mismatch_kind {
    TROUPE_VERIFY_MISSING_MANIFEST = 1, /* a row without a manifest */
    TROUPE_VERIFY_ORPHAN_MANIFEST,      /* a manifest without a row */
    TROUPE_VERIFY_BAD_MANIFEST,         /* not [1, [[id, key], ...]] sorted */
    TROUPE_VERIFY_CROSS_RECORD,  /* a listed key not ending with the pk */
    TROUPE_VERIFY_UNKNOWN_INDEX, /* a listed index the table lacks */
    TROUPE_VERIFY_MISSING_ENTRY, /* a listed key absent from x.<id> */
    TROUPE_VERIFY_ORPHAN_ENTRY,  /* an entry its row's manifest lacks */
    TROUPE_VERIFY_BAD_ENTRY,     /* an entry key not values-then-pk */
    TROUPE_VERIFY_BAD_ROW,       /* an undecodable row envelope (derive) */
    TROUPE_VERIFY_STALE_MANIFEST /* derive: the row derives `key` for the
                                    index but the manifest does not list
                                    it, or lists it and the row does not */
} troupe_index_mismatch_kind;

/* One mismatch; every pointer is borrowed for the callback only. pk is
 * NULL for BAD_ENTRY; key NULL for row-level kinds. */
typedef struct troupe_index_mismatch {
    troupe_index_mismatch_kind kind;
    const uint8_t *pk;
    size_t pk_len;
    uint64_t index_id; /* 0 for row-level kinds */
    const uint8_t *key;
    size_t key_len;
} troupe_index_mismatch;

typedef void (*troupe_index_verify_cb)(void *ctx,
                                       const troupe_index_mismatch *m);

typedef struct troupe_index_verify_opts {
    uint64_t table_id;
    /* The table's indexes (borrowed). Entries of building indexes are not
     * walked and not derived; their listed keys are still checked. */
    const troupe_index_def *const *defs;
    size_t n_defs;
    /* Also derive each row's entries for every ready index and compare
     * them with its manifest (STALE_MANIFEST); needs fns for function
     * indexes. */
    bool derive;
    const troupe_index_fns *fns;
    /* Records (rows, manifests, entries) examined per call; 0 is EINVAL. */
    size_t budget;
    troupe_index_verify_cb cb;
    void *cb_ctx;
    /* One view for every step (recommended while writes go on); NULL: a
     * snapshot per step. */
    const troupe_snapshot *snap;
} troupe_index_verify_opts;

/*
 * One bounded step of verify for one table: first every row and manifest
 * (pk order: a row without manifest, a manifest without row, a malformed
 * or cross-record manifest, each listed key present in its index), then
 * every entry of each ready index against its row's manifest. Each
 * mismatch is reported once through o->cb on the calling thread.
 * `cursor` is NULL to start, else the *next of the previous step. On OK
 * either *done is true (*next NULL) or *next is a troupe_malloc'd cursor
 * (the caller frees it) to pass to the next step. Errors: EINVAL (NULL,
 * budget 0, a cursor this table's verify did not make), ENOENT (a family
 * is missing), ECORRUPT/EIO (storage), ENOMEM; a mismatch is not an
 * error. Blocks: call on a worker.
 */
troupe_err
troupe_index_verify_step(troupe_db *db, const troupe_index_verify_opts *o,
                         const void *cursor, size_t cursor_len, void **next,
                         size_t *next_len, bool *done);

/* ---- the index actor ----------------------------------------------------
 *
 * Serves queries on the indexes of one table asynchronously: the actor's
 * loop decodes and validates a request, a runtime worker runs it, and the
 * worker thread replies (as the kv actor does), so a request in flight when
 * the actor stops still gets exactly one reply. Requests are asks
 * (troupe_ask / troupe_runtime_ask) with bodies from the builders below:
 *   QUERY [index: str, values: array | nil, from: array | nil,
 *          to: array | nil, reverse: bool, limit: uint, after: bin | nil,
 *          rows: bool]
 *     reply [[[key: bin, pk: bin, val: any, expires_at_ms: uint], ...],
 *            cursor: bin | nil, more: bool]
 *   COUNT [index: str, values: array | nil, from: array | nil,
 *          to: array | nil]
 *     reply uint
 *   VERIFY [budget: uint, derive: bool, cursor: bin | nil]
 *     one troupe_index_verify_step over every index of the table
 *     reply [[[kind: uint, pk: bin | nil, index_id: uint, key: bin | nil],
 *             ...], cursor: bin | nil (nil: verify is done)]
 * Errors travel in the reply's err: ENOENT (no index of that name),
 * EPROTO (malformed body), ETOOBIG (reply over the body limit), and every
 * error of troupe_index_query_run / troupe_index_count.
 */
enum troupe_index_kind {
    TROUPE_INDEX_QUERY = 0,
    TROUPE_INDEX_COUNT = 1,
    TROUPE_INDEX_VERIFY = 2,
    TROUPE_INDEX_NKINDS_ /* internal kinds follow */
};

typedef struct troupe_index_actor_opts {
    troupe_db *db; /* borrowed; outlives the actor and its jobs */
    uint64_t table_id;
    /* The table's indexes: copied at spawn (the actor never shares the
     * caller's defs). */
    const troupe_index_def *const *defs;
    size_t n_defs;
    const troupe_index_fns *fns; /* borrowed; may be NULL */
} troupe_index_actor_opts;

/* Spawns an index actor (spawn options as troupe_actor_spawn; may be
 * NULL). Errors: EINVAL (NULL, a NULL def), ENOMEM, the errors of
 * troupe_actor_spawn. Does not block; any thread. */
troupe_err
troupe_index_spawn(troupe_runtime *rt, const troupe_index_actor_opts *o,
                   const troupe_spawn_opts *so, troupe_addr *out);

/* Request builders from a user's query (for COUNT reverse, limit, after
 * and rows are not sent). *out is owned by
 * the caller until sent. Errors: EINVAL (NULL, bad name, limit 0 for a
 * QUERY, a NULL buffer with a length), EPROTO (values, from or to not one
 * msgpack object), ETOOBIG, ENOMEM. */
troupe_err
troupe_index_query_msg(const char *index, const troupe_index_query *q,
                       troupe_msg **out);
troupe_err
troupe_index_count_msg(const char *index, const troupe_index_query *q,
                       troupe_msg **out);

/* Reply decoders (the reply is borrowed). query: *out is a new result the
 * caller destroys; count: *n. Errors: EPROTO (not the reply described
 * above), ENOMEM, EINVAL (NULL). */
troupe_err
troupe_index_query_reply(const troupe_msg *reply, troupe_index_result **out);
troupe_err
troupe_index_count_reply(const troupe_msg *reply, uint64_t *n);

/* VERIFY request (cursor NULL: start) and reply: each reported mismatch is
 * passed to cb (pointers borrowed from the reply for the call); *next is
 * a troupe_malloc'd cursor for the next step, or NULL with *done true.
 * Errors: EINVAL (NULL, budget 0, bad cursor buffer), EPROTO, ENOMEM. */
troupe_err
troupe_index_verify_msg(size_t budget, bool derive, const void *cursor,
                        size_t cursor_len, troupe_msg **out);
troupe_err
troupe_index_verify_reply(const troupe_msg *reply, troupe_index_verify_cb cb,
                          void *ctx, void **next, size_t *next_len, bool *done);

#endif
