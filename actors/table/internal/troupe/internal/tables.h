/*
 * What the table module lends the modules above it (txn), its tests, the
 * benches and the fuzz targets: the table actor's request kinds, lookups
 * in the catalog, the environments of reads and queries run on the
 * caller's thread, the rows helpers and the catalog's stored-value
 * codecs. The two-phase protocol is troupe/internal/participant.h.
 */
#ifndef TROUPE_INTERNAL_TABLES_H
#define TROUPE_INTERNAL_TABLES_H

#include <stdbool.h>
#include <stdint.h>

#include "troupe/actor.h"
#include "troupe/pack.h"
#include "troupe/table.h"

/* Request kinds of the table actor. Bodies:
 *   INSERT/UPDATE/UPSERT [key bin, doc raw map, expires int, sync u32,
 *                         stamp bool (false: no created_at / updated_at)]
 *   DELETE   [key bin, sync u32]
 *   GET      [key bin]
 *   GET_MANY [[key bin, ...]]
 *   SCAN     [start bin|nil, end bin|nil, after bin|nil, limit u32, rev]
 * Replies: nil for writes; [[[key bin, expires int, doc raw], ...],
 * cursor bin|nil, more bool] for reads; err set on failure. */
enum table_kind {
    TABLE_INSERT = 0,
    TABLE_UPDATE,
    TABLE_UPSERT,
    TABLE_DELETE,
    TABLE_GET,
    TABLE_GET_MANY,
    TABLE_SCAN,
    TABLE_TXN_PREPARE, /* ptr: ttxn_prep (txn's commit.c) */
    TABLE_TXN_FINISH,  /* ptr: ttxn_fin */
    TABLE_TXN_QVER,    /* ptr: ttxn_qver (query with version) */
    TABLE_VEVICT,      /* one eviction pass over key-version records;
                          replies [evicted u64, batches u32, largest u32] */
    TABLE_STATS,       /* replies [records u64, bytes u64, evicted u64] */
    TABLE_PURGE,       /* one expired-row pass; replies [scanned u64,
                          purged u64, steps u32] */
    TABLE_PROGRESS,    /* the running or last index build; replies
                          [index id u64, done u64, total u64, elapsed ms
                          u64, running bool, err int] */
    TABLE_NKINDS_
};

/* OK when t may write; on tables of a read-only catalog EREADONLY with
 * the detail "<call>: the database is open read-only". Every call of
 * table.h and txn.h that would write (rows, passes, catalog changes,
 * buffered and committed transaction writes, versions handed out) checks
 * it after its argument checks and before anything is sent or buffered.
 * Any thread; never blocks. */
troupe_err
troupe__tables_writable(const troupe_tables *t, const char *call);

/* The refusal of a key that failed troupe__table_key_check, with its
 * detail (what was wrong, the size and the limit). Cold. */
troupe_err
troupe__table_key_err(const void *key, size_t klen);

/* A primary key as every call of table.h and txn.h checks it: EINVAL
 * (NULL, empty), ETOOBIG (over TROUPE_KEY_MAX), each with its detail. */
static inline troupe_err
troupe__table_key_check(const void *key, size_t klen)
{
    if (key == NULL || klen == 0 || klen > TROUPE_KEY_MAX)
        return troupe__table_key_err(key, klen);
    return TROUPE_OK;
}

/* What a read on the caller's thread needs, from one lookup: the live
 * table `name`'s row family, the db, runtime and clock. EINVAL, ENOENT,
 * ESTATE. */
typedef struct tread_env {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_cf *cf_t;
    uint64_t table_id; /* its cursors name it (troupe/cursor.h) */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
} tread_env;

troupe_err
troupe__tables_read_env(troupe_tables *t, const char *name, tread_env *env);
/* The live table `name`: its actor and row family. EINVAL, ENOENT,
 * ESTATE. */
troupe_err
troupe__tables_lookup_cf(troupe_tables *t, const char *name, troupe_addr *a,
                         troupe_cf **cf_t);
/* The same, with the table's catalog id (id may be NULL). */
troupe_err
troupe__tables_lookup_id(troupe_tables *t, const char *name, troupe_addr *a,
                         troupe_cf **cf_t, uint64_t *id);

/* A troupe_rows over a read reply body (retains the body). */
troupe_err
troupe__rows_from_body(troupe_body *body, troupe_rows **out);

/* Replaces r's cursor (an exact key, when there is one) by the cursor of
 * table `table_id` at that key (troupe/cursor.h), owned by r. ENOMEM. */
troupe_err
troupe__rows_cursor_wrap(troupe_rows *r, uint64_t table_id);

/* The exact key of scan cursor so->after of table `table_id`, in *raw (a
 * copy of *so pointing into the cursor): ERANGE when it is not a cursor
 * of that table. No cursor: *raw is *so. */
troupe_err
troupe__scan_cursor_unwrap(const troupe_scan_opts *so, uint64_t table_id,
                           troupe_scan_opts *raw);

/* The indexes of a table (immutable, refcounted): a query's environment
 * holds one reference. */
typedef struct tschema tschema;

void
troupe__tschema_release(tschema *s);
/* The table's indexes, ascending id (*n of them), as long as s lives. */
const struct troupe_index_def *const *
troupe__tschema_defs(const tschema *s, size_t *n);

/* The address of a live table and the request deadline; ENOENT/ESTATE. */
troupe_err
troupe__tables_lookup(troupe_tables *t, const char *name, troupe_addr *a,
                      uint32_t *timeout_ms, troupe_runtime **rt);

/* What a query run on the caller's thread needs: the index's def in a
 * retained schema (immutable: a change of the table's indexes publishes
 * a new schema), the table's id, the db and the tables' clock now. */
typedef struct tindex_env {
    tschema *schema; /* one reference: troupe__tschema_release it */
    const struct troupe_index_def *def; /* troupe/internal/index.h */
    uint64_t table_id;
    troupe_db *db;
    int64_t now_ms;
} tindex_env;

/* EINVAL, ENOENT (no such table or index), ESTATE (tables stopped). */
troupe_err
troupe__tables_index_env(troupe_tables *t, const char *table, const char *index,
                         tindex_env *env);

/* The same for the table's index actor (queries). */
troupe_err
troupe__tables_lookup_index(troupe_tables *t, const char *name, troupe_addr *a,
                            uint32_t *timeout_ms, troupe_runtime **rt);

/*
 * Decoders of the catalog's stored values in `meta` (entry.c, versions.c,
 * build.c; formats in docs/data-model.md), exposed for the fuzz targets
 * and tests. Each reads input from the disk: anything that is not the
 * format is ECORRUPT, with nothing allocated; pointers returned point into
 * the input. Pure; any thread.
 *  - entry_parse: a table's entry {id, name, version, indexes, dropped?}
 *    into a new tentry (*out, entry_free it): each key at most once, a
 *    valid catalog name, index definitions with distinct ids and names.
 *    ENOMEM.
 *  - entry_pack: the entry's stored form (troupe_malloc'd *out), as a
 *    create or an index change writes it. ENOMEM.
 *  - floor_parse: ("versions"), the key-version floor: [1, floor].
 *  - pos_parse: ("build", table id), a build's position: [1, index id
 *    (0: a sweep), last primary key done (bin, not empty)].
 */
typedef struct tentry tentry;
troupe_err
troupe__tables_entry_parse(const void *val, size_t len, tentry **out);
troupe_err
troupe__tables_entry_pack(const tentry *e, void **out, size_t *len);
void
troupe__tables_entry_free(tentry *e);
const char *
troupe__tables_entry_name(const tentry *e);
troupe_err
troupe__tables_floor_parse(const void *v, size_t len, uint64_t *floor);
troupe_err
troupe__tables_pos_parse(const void *v, size_t len, uint64_t *index_id,
                         const void **after, size_t *alen);

/* A scan's options, as troupe_table_scan and troupe_txn_scan check them:
 * EINVAL (NULL, limit 0 or above the page maximum, a pointer without a
 * length or the reverse, start at or above end), ETOOBIG (a bound over
 * TROUPE_KEY_MAX, a cursor over TROUPE_CURSOR_MAX). */
troupe_err
troupe__scan_opts_check(const troupe_scan_opts *so);

/* The reply body of rows: [[[key, expires, doc], ...], cursor, more]. */
troupe_err
troupe__rows_pack(const troupe_rows *r, troupe_body **out);

/* Appends [key, expires, doc] to p (a row of a reply body). */
void
troupe__table_pack_row(troupe_packer *p, const void *key, size_t klen,
                       int64_t exp, const void *doc, size_t dlen);

#endif
