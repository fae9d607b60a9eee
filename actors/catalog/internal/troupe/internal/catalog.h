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

/* OK on a catalog that may change; on a read-only one (troupe_catalog_
 * read_only) EREADONLY with the detail "<call>: the database is open
 * read-only". Every owner's catalog change (create, drop, rebuild,
 * anything that would write meta or a family) checks it first, on the
 * calling thread, before it reserves ids or queues a job. On a read-only
 * catalog meta (troupe__catalog_meta) may be NULL: a db that never had
 * one. Any thread; never blocks. */
troupe_err
troupe__catalog_writable(const troupe_catalog *c, const char *call);

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
 * them. EFULL when the counter would wrap; EREADONLY (nothing reserved)
 * on a read-only catalog. Never blocks (the catalog's
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
 * returns it (writing nothing); on a read-only catalog that is EREADONLY,
 * from begin. Caller's storage; commit finishes it whatever happens.
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
 * (ke: the key's error, if building it failed). ENOENT when absent
 * (also when a read-only catalog has no meta). Blocks. */
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
 * and returns it; what fn started before is the owner's to undo. No call
 * (OK) when a read-only catalog has no meta. Blocks.
 */
typedef troupe_err (*troupe__catalog_load_fn)(void *arg, const char *name,
                                              const void *v, size_t n,
                                              uint64_t *id);
troupe_err
troupe__catalog_load(troupe_catalog *c, const char *kind,
                     troupe__catalog_load_fn fn, void *arg);

/*
 * The one order of catalog changes, for every owner: a FIFO of jobs per
 * catalog, of which only the head runs, so each change sees the catalog
 * the previous one left. A job is a state machine of short steps: each
 * step runs on a STORAGE thread (it may block on the disk, never on an
 * actor or another job) and returns NEXT (run the next step now), WAIT
 * (it started something asynchronous whose completion calls
 * troupe__ddl_resume; the thread is free meanwhile) or DONE (the job is
 * over; done(job) runs once, on the thread of the last step, and may free
 * the job). Nothing runs on scheduler 0: an asynchronous form's done posts
 * its callback there, a _wait form's releases its waiter. When the lane
 * refuses a step (the runtime is shutting down), it runs on the thread
 * that submitted or resumed the job.
 *
 * The job is the caller's (usually the first member of its own struct)
 * from submit until done; the caller sets cat, step and done, and may use
 * `at` and `err` as it likes (zeroed by the caller).
 */
typedef enum {
    TROUPE__DDL_NEXT,
    TROUPE__DDL_WAIT,
    TROUPE__DDL_DONE
} troupe__ddl_step;
typedef struct troupe__ddl troupe__ddl;
struct troupe__ddl {
    troupe__ddl *next; /* the catalog's FIFO */
    troupe_catalog *cat;
    troupe__ddl_step (*step)(troupe__ddl *job);
    void (*done)(troupe__ddl *job);
    int at; /* the job's own step index */
    troupe_err err;
};

/* Queues the job behind the catalog's others; its first step runs once
 * they are done. ESTATE (the catalog is stopping: nothing runs). It takes
 * any job on a read-only catalog too (an owner's stop writes nothing):
 * the owner's call refuses a change before, with troupe__catalog_writable.
 * Any thread; never blocks (but see above for a refusing lane). */
troupe_err
troupe__ddl_submit(troupe__ddl *job);

/* The asynchronous thing a WAIT step started has finished: the job's next
 * step goes to the lane. Any thread; never blocks (but see above). Called
 * once per WAIT. */
void
troupe__ddl_resume(troupe__ddl *job);

#endif
