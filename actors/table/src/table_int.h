/* Private: what the catalog (catalog.c), the client calls (api.c) and the
 * table actor (table.c) share. */
#ifndef TROUPE_TABLE_INT_H
#define TROUPE_TABLE_INT_H

#include <stdatomic.h>

#include "troupe/actor.h"
#include "troupe/table.h"

/* Request kinds of the table actor. Bodies:
 *   INSERT/UPDATE/UPSERT [key bin, doc raw map, expires int, sync u32]
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
    TABLE_NKINDS_
};

typedef struct tschema tschema;

/* An online index build (catalog.c starts and finishes it, table.c runs
 * it). The catalog fields are set before the actor sees it; the actor
 * fields are touched only on the actor's thread. */
typedef struct tbuild {
    troupe_tables *t;
    troupe_tables_cb cb; /* may be NULL (a build resumed at open) */
    void *arg;
    uint64_t index_id;
    char *table;
    /* actor side */
    bool started;
    bool scanning;
    unsigned char *cursor;
    size_t clen;
    size_t outstanding;
    troupe_err err;
} tbuild;

/* A new schema for a table actor (and a build to run once every write
 * prepared with an older schema has finished); sent as a message's ptr. */
typedef struct tswitch {
    tschema *schema; /* one reference, moved to the actor */
    tbuild *build;   /* may be NULL */
} tswitch;

/*
 * Asks a table actor to wind down before it is stopped: it answers every
 * later request with ECLOSED, finishes what it accepted (writes, reads on
 * workers, a build, which ends with ECLOSED), then calls fn(arg) on its
 * own thread. Stopping an actor while work of its is on a worker or in the
 * pipeline would lose the completions queued behind its STOP (the runtime
 * drains them unhandled) and with them some callers' replies. If the actor
 * is gone already, fn(arg) runs at once on the calling thread.
 */
void
troupe__table_quiesce(troupe_runtime *rt, troupe_addr a, void (*fn)(void *),
                      void *arg);

/* Sends a switch to a table actor; on failure completes the build with
 * ECLOSED and frees the switch. Any thread. */
void
troupe__table_switch(troupe_runtime *rt, troupe_addr a, tschema *schema,
                     tbuild *build);

/* The actor finished (or abandoned) build b: the catalog records the
 * outcome on a worker, then calls b->cb on scheduler 0. Any thread. */
void
troupe__tables_build_done(tbuild *b, troupe_err err);

/* The indexes of a table: immutable once built, shared by the catalog,
 * the actor and in-flight jobs through a refcount. */
struct tschema {
    atomic_int refs;
    size_t n;
    troupe_index_def **defs; /* ascending id */
    troupe_cf **xcf;
};

tschema *
troupe__tschema_retain(tschema *s);
void
troupe__tschema_release(tschema *s);

/* What a table actor needs; copied by spawn, which takes over one
 * reference to schema (also on failure). */
typedef struct ttable_cfg {
    troupe_db *db;
    troupe_commit *commit;
    const troupe_index_fns *fns;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    troupe_cf *cf_t;
    troupe_cf *cf_m;
    tschema *schema;
} ttable_cfg;

troupe_err
troupe__table_spawn(troupe_runtime *rt, const ttable_cfg *cfg,
                    troupe_addr *out);

/* The address of a live table and the request deadline; ENOENT/ESTATE. */
troupe_err
troupe__tables_lookup(troupe_tables *t, const char *name, troupe_addr *a,
                      uint32_t *timeout_ms, troupe_runtime **rt);

/* The same for the table's index actor (queries). */
troupe_err
troupe__tables_lookup_index(troupe_tables *t, const char *name, troupe_addr *a,
                            uint32_t *timeout_ms, troupe_runtime **rt);

/* The row envelope [1, expires, doc]: *doc points into env. */
troupe_err
troupe__envelope_parse(const void *env, size_t len, int64_t *expires,
                       const void **doc, size_t *doc_len);

/* A blocking waiter for the _wait twins. */
typedef struct twaiter {
    uv_mutex_t mu;
    uv_cond_t cv;
    int done;
    troupe_err err;
    troupe_rows *rows;
} twaiter;

void
troupe__twaiter_init(twaiter *w);
void
troupe__twaiter_wake(twaiter *w, troupe_err err, troupe_rows *rows);
troupe_err
troupe__twaiter_wait(twaiter *w, troupe_rows **rows);

#endif
