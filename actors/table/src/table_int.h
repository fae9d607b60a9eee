/* Private: what the catalog (catalog.c), the client calls (api.c) and the
 * table actor (table.c) share beyond the internal tier
 * (troupe/internal/tables.h, troupe/internal/participant.h). */
#ifndef TROUPE_TABLE_INT_H
#define TROUPE_TABLE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "troupe/actor.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/index.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/table.h"

/* The transaction kinds and op kinds are the participant protocol's. */
_Static_assert((int)TABLE_TXN_PREPARE == (int)TROUPE__PART_PREPARE &&
                   (int)TABLE_TXN_FINISH == (int)TROUPE__PART_FINISH &&
                   (int)TABLE_TXN_QVER == (int)TROUPE__PART_QVER,
               "transaction kinds");
_Static_assert((int)TABLE_INSERT == (int)TROUPE__PART_INSERT &&
                   (int)TABLE_UPDATE == (int)TROUPE__PART_UPDATE &&
                   (int)TABLE_UPSERT == (int)TROUPE__PART_UPSERT &&
                   (int)TABLE_DELETE == (int)TROUPE__PART_DELETE,
               "write kinds");

/* An online index build (catalog.c starts and finishes it, table.c runs
 * it). The catalog fields are set before the actor sees it; the actor
 * fields are touched only on the actor's thread. */
typedef struct tbuild {
    troupe_tables *t;
    troupe_tables_cb cb; /* may be NULL (a build resumed at open) */
    void *arg;
    uint64_t index_id; /* 0: a sweep that only rewrites manifests */
    char *table;
    /* Where each scan step first saves the position reached (the last
     * primary key of the steps before it, every row of which committed),
     * so an interrupted build resumes after it; NULL: not saved. */
    troupe_cf *meta;
    uint64_t table_id;
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

/* Stores build position `after` of index_id in meta (catalog.c owns the
 * format). Blocks: the table actor calls it on a worker. */
troupe_err
troupe__tables_build_save(troupe_db *db, troupe_cf *meta, uint64_t table_id,
                          uint64_t index_id, const void *after, size_t alen);

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
    /* The catalog's version counter: every committed write of a key
     * publishes the next value as the key's version. */
    tversions *vers;
    ttables_shared *ts;
} ttable_cfg;

troupe_err
troupe__table_spawn(troupe_runtime *rt, const ttable_cfg *cfg,
                    troupe_addr *out);

/* Where and how a read reads (read.c): memory only when cached (EAGAIN
 * when a block is not in memory); `now` (Unix ms) decides expiry. */
typedef struct tread_src {
    troupe_db *db;
    troupe_cf *cf; /* the table's row family */
    bool cached;
    int64_t now;
} tread_src;

/* The reads of table.h straight into troupe_rows (arguments checked by
 * the caller). Errors: get ENOENT (absent or expired), ECORRUPT, EIO,
 * ENOMEM, EAGAIN (cached); scans also EINVAL, ERANGE. Any thread; block
 * unless cached. */
troupe_err
troupe__read_get(const tread_src *s, const void *key, size_t klen,
                 troupe_rows **out);
troupe_err
troupe__read_get_many(const tread_src *s, const void *const *keys,
                      const size_t *klens, size_t n, troupe_rows **out);
troupe_err
troupe__read_scan(const tread_src *s, const troupe_scan_opts *so,
                  troupe_rows **out);

/* Runs one read request body (kind TABLE_GET, TABLE_GET_MANY or
 * TABLE_SCAN, bodies as above) from the disk: the reply body, or the
 * read's error, EPROTO for a malformed request. Blocks. */
troupe_err
troupe__table_read(troupe_db *db, troupe_cf *cf, int64_t now, uint32_t kind,
                   const void *req, size_t len, troupe_body **out);

#endif
