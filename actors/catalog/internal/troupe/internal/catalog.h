/*
 * The catalog for its owners (actors/table, actors/queue, and what the
 * tests and fuzz targets check): the objects it lends, attach and detach,
 * the one id counter, writes and reads of `meta`, the one loader, and the
 * one order of catalog changes (DDL). Entry formats are the owners':
 * the catalog knows keys (kind, name) and the counter ("seq"), not what
 * an entry's value says.
 */
#ifndef TROUPE_INTERNAL_CATALOG_H
#define TROUPE_INTERNAL_CATALOG_H

#include <stdint.h>

#include "troupe/catalog.h"
#include "troupe/keycodec.h"
#include "troupe/storage.h"

/* The catalog's format (the value of meta key ("catalog")). */
#define TROUPE__CATALOG_FORMAT 2

/* What the catalog lends its owners, for its life. Any thread. */
troupe_runtime *
troupe__catalog_rt(const troupe_catalog *c);
troupe_db *
troupe__catalog_db(const troupe_catalog *c);
troupe_cf *
troupe__catalog_meta(const troupe_catalog *c);

/* An owner (tables, queues) opens on c: ESTATE once c is stopping. Each
 * OK is matched by one detach when the owner is destroyed; a stop is
 * refused while any is attached. Any thread. */
troupe_err
troupe__catalog_attach(troupe_catalog *c);
void
troupe__catalog_detach(troupe_catalog *c);

/* Reserves n ids (n >= 1) for any kind: *first .. *first + n - 1, above
 * every id handed out before, in memory. The owner stores the counter
 * (troupe__meta_put_seq, synced) before it creates anything named after
 * them. EFULL when the counter would wrap. Never blocks (the catalog's
 * mutex only: an owner may call it under its own). */
troupe_err
troupe__catalog_ids(troupe_catalog *c, uint64_t n, uint64_t *first);
/* The highest id handed out (0: none). */
uint64_t
troupe__catalog_seq(troupe_catalog *c);

/* The value of meta key ("seq") and of the marker: one msgpack uint,
 * nothing after it; ECORRUPT otherwise. Pure. */
troupe_err
troupe__catalog_uint_parse(const void *v, size_t len, uint64_t *out);

/* The meta key (kind, name) into w (initialised here). */
troupe_err
troupe__catalog_entry_key(troupe_key_writer *w, const char *kind,
                          const char *name);

/*
 * A batch of meta changes, written as one WAL record by commit. The calls
 * between begin and commit never fail: the first error sticks and commit
 * returns it (writing nothing). Caller's storage; commit finishes it
 * whatever happens.
 */
typedef struct troupe__meta_batch {
    troupe_catalog *c;
    troupe_batch *b;
    troupe_err err;
} troupe__meta_batch;

void
troupe__meta_begin(troupe__meta_batch *m, troupe_catalog *c);
/* ("seq") = the counter as it is now (>= every id handed out). */
void
troupe__meta_put_seq(troupe__meta_batch *m);
void
troupe__meta_put_entry(troupe__meta_batch *m, const char *kind,
                       const char *name, const void *v, size_t n);
void
troupe__meta_del_entry(troupe__meta_batch *m, const char *kind,
                       const char *name);
/* Any other meta key of an owner's (a table's build position, the
 * version floor): the key is w's, finished and finied here (ke: the
 * error of building it, if any). */
void
troupe__meta_put_key(troupe__meta_batch *m, troupe_key_writer *w, troupe_err ke,
                     const void *v, size_t n);
void
troupe__meta_del_key(troupe__meta_batch *m, troupe_key_writer *w,
                     troupe_err ke);
/* Writes the batch with `sync` (the first error of the calls before if
 * any, else troupe_db_write's) and frees it. Blocks. */
troupe_err
troupe__meta_commit(troupe__meta_batch *m, troupe_sync sync);

/* The value under w's key in meta (*v troupe_malloc'd), and finishes w
 * (ke: the key's error, if building it failed). ENOENT when absent.
 * Blocks. */
troupe_err
troupe__meta_get(troupe_catalog *c, troupe_key_writer *w, troupe_err ke,
                 void **v, size_t *vlen);

/*
 * The one loader: walks the entries (kind, name) of meta in key order and
 * calls fn(arg, name, value, len, &id) for each (name NUL-terminated, the
 * value borrowed for the call); fn parses its own format, starts what the
 * entry describes and sets id. Every kind gets the same checks: a key of
 * exactly two strings whose name passes troupe_catalog_name_valid, and
 * 0 < id <= the counter; ECORRUPT otherwise. Stops at fn's first error
 * and returns it; what fn started before is the owner's to undo. Blocks.
 */
typedef troupe_err (*troupe__catalog_load_fn)(void *arg, const char *name,
                                              const void *v, size_t n,
                                              uint64_t *id);
troupe_err
troupe__catalog_load(troupe_catalog *c, const char *kind,
                     troupe__catalog_load_fn fn, void *arg);

/*
 * The one order of catalog changes, for every owner. Each change runs
 * under the catalog's DDL lock for its whole length, so each sees the
 * catalog the previous one left: the blocking forms take it on the
 * caller's thread (ddl_lock/ddl_unlock); the asynchronous ones are jobs,
 * queued here in submission order and run one at a time on the worker
 * pool (a job may block its worker waiting for an actor that needs
 * another worker, so two jobs must never hold two workers), each taking
 * the lock itself.
 *
 * troupe__catalog_ddl_submit runs fn(arg) on a worker after the jobs
 * submitted before it, then done(arg) on scheduler 0 (on the finishing
 * thread once the pool has stopped). Errors (nothing runs): ENOMEM,
 * ECLOSED (the runtime is shutting down). Any thread.
 */
troupe_err
troupe__catalog_ddl_submit(troupe_catalog *c, void (*fn)(void *arg),
                           void (*done)(void *arg, troupe_runtime *rt),
                           void *arg);
void
troupe__catalog_ddl_lock(troupe_catalog *c);
void
troupe__catalog_ddl_unlock(troupe_catalog *c);

#endif
