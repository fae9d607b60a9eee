/*
 * The catalog: one per database, the record of what it holds (tables and
 * their indexes, queues) as entries (kind, name) of the `meta` family,
 * with one id counter for every kind and one order of catalog changes.
 * Formats: docs/data-model.md ("The catalog").
 *
 * Objects and owners: troupe_catalog is created by troupe_catalog_open
 * and owned by the caller. It borrows the runtime and the db of its
 * options: they must outlive it. troupe_tables and troupe_queues are
 * opened on it (their options name it) and must be destroyed before it
 * is stopped; then troupe_catalog_stop (or _stop_wait) and
 * troupe_catalog_destroy. Every function may be called from any thread.
 */
#ifndef TROUPE_CATALOG_H
#define TROUPE_CATALOG_H

#include <stdbool.h>
#include <stddef.h>

#include "troupe/runtime.h"
#include "troupe/storage.h"

/* Names of catalog entries (tables, queues): 1..TROUPE_CATALOG_NAME_MAX
 * bytes; TROUPE_TABLE_NAME_MAX and TROUPE_QUEUE_NAME_MAX are this. */
#define TROUPE_CATALOG_NAME_MAX 4096

typedef struct troupe_catalog troupe_catalog;

typedef struct troupe_catalog_opts {
    troupe_runtime *rt; /* borrowed */
    troupe_db *db;      /* borrowed */
} troupe_catalog_opts;

/*
 * The name rule of every catalog entry (tables, queues): 1..
 * TROUPE_CATALOG_NAME_MAX bytes of strict UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF) and no NUL. *len (may be NULL)
 * gets the length of a valid name. Any thread.
 */
bool
troupe_catalog_name_valid(const char *name, size_t *len);

/*
 * Opens the catalog of o->db: creates the `meta` family if missing, reads
 * the format marker ("catalog") and, for a database written in format 1
 * (queues in a family of their own, `queues`), migrates it to format 2 in
 * one synced batch before anything is served (docs/data-model.md, "The
 * catalog": there is no way back to format 1). On OK *out owns the
 * object. Errors: EINVAL (NULL or a missing option), ENOTSUP (written by a
 * newer troupe: a format above 2; nothing written), ECORRUPT (a malformed
 * marker or counter, or a format-1 database whose meta already holds
 * queue entries; nothing written), the errors of troupe_db_cf_create,
 * troupe_db_write and troupe_db_cf_drop, ENOMEM. Blocks.
 *
 * On a read-only db (troupe_db_opts.read_only) it writes nothing, now or
 * later: a db without `meta` opens as an empty catalog (nothing listed);
 * a format-1 database with a `queues` family (queues the migration would
 * move) is refused with ESTATE and troupe_errmsg saying to open it
 * read-write once to migrate it (it is left as it was); a format-1
 * database without one reads as it is (the migration would only add the
 * marker); format 2 loads as on a read-write db (a `queues` family left
 * by an interrupted migration stays). Every catalog change on it (a
 * table, index or queue create, drop or rebuild) fails at the call with
 * EREADONLY and a detail, nothing queued.
 */
troupe_err
troupe_catalog_open(const troupe_catalog_opts *o, troupe_catalog **out);

/* True when c was opened on a read-only db: it reads what the db holds
 * and refuses every change (EREADONLY). False for NULL. Any thread. */
bool
troupe_catalog_read_only(const troupe_catalog *c);

typedef void (*troupe_catalog_stop_cb)(troupe_catalog *c, void *arg);

/*
 * Stops the catalog: refuses catalog changes from now on, lets the ones
 * queued finish, then calls cb(c, arg) once on scheduler 0 (here and now
 * on the calling thread when scheduler 0 has closed). Errors (cb never
 * fires): EINVAL (NULL), ESTATE (already stopping, or tables or queues
 * are still open on it: destroy them first).
 */
troupe_err
troupe_catalog_stop(troupe_catalog *c, troupe_catalog_stop_cb cb, void *arg);

/* troupe_catalog_stop and a wait for its callback; its errors. Blocks
 * (for scheduler 0: not on a loop thread). */
troupe_err
troupe_catalog_stop_wait(troupe_catalog *c);

/* Frees a stopped catalog (its stop callback has fired). NULL is a no-op;
 * a catalog not stopped is a programming error: abort(). */
void
troupe_catalog_destroy(troupe_catalog *c);

#endif
