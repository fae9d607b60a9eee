/* Private: what the catalog (tables.c and the files below), the client
 * calls (api.c) and the table actor (table.c) share beyond the internal tier
 * (troupe/internal/tables.h, troupe/internal/participant.h). */
#ifndef TROUPE_TABLE_INT_H
#define TROUPE_TABLE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "troupe/actor.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/index.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/keycodec.h"
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

/* An online index build (build.c starts and finishes it, table.c runs
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

/* Stores build position `after` of index_id in meta (build.c owns the
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

/* ---- the catalog: tables.c, versions.c, entry.c, schema.c, ddl.c,
 * table_ddl.c, index_ddl.c, build.c, catalog.c ---------------------------- */

/* A table in the catalog: its entry in meta and its actors. The name map
 * (tables.c) holds it; index changes (index_ddl.c, build.c) replace its
 * schema and dropped list under the tables' `mu`. */
struct tentry {
    struct tentry *next; /* sorted by name */
    char *name;
    uint64_t id;
    troupe_addr addr;  /* the table actor */
    troupe_addr iaddr; /* the index actor (queries), respawned on every
                          change of the table's indexes */
    tschema *schema;
    troupe_cf *cf_t;
    /* Indexes removed from the schema (dropped, or replaced by a rebuild)
     * whose manifest keys a sweep still has to clear; their families are
     * dropped once it is done. Stored in the catalog entry. */
    uint64_t *dropped;
    size_t ndropped;
};

enum { TABLES_RUNNING = 0, TABLES_STOPPING, TABLES_STOPPED };

/* The catalog's object. Read and written by the catalog's files only (the
 * actor and the client calls go through the functions above): tables.c
 * owns it (the map `entries`, the state and stop fields, `ddl_jobs`),
 * versions.c owns `vers`, ddl.c the DDL queue (dq_*); `seq`, the id
 * counter, is taken by the DDL files and stored by entry.c. */
struct troupe_tables {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    const troupe_index_fns *fns;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    uint32_t timeout_ms;
    tversions vers; /* key versions (txn.c), floor in meta */
    ttables_shared ts;
    troupe_cf *meta;
    pthread_mutex_t mu;
    pthread_mutex_t ddl;
    tentry *entries;
    uint64_t seq;         /* highest id handed out */
    int state;            /* TABLES_RUNNING, _STOPPING, _STOPPED */
    int ddl_jobs;         /* creates, drops and builds not yet completed */
    bool stopping_actors; /* the stop has reached the actors */
    atomic_size_t stops;  /* actors still stopping, +1 while starting */
    troupe_tables_stop_cb stop_cb;
    void *stop_arg;
    /* Catalog jobs run one at a time on the worker pool (ddl.c). */
    struct ddl_item *dq_head, *dq_tail;
    bool dq_busy;
};

/* tables.c */
/* The entry of `name` in the map, or NULL. Called with mu held. Inline:
 * every table call's lookup runs it under mu. */
static inline tentry *
troupe__tables_entry_find(troupe_tables *t, const char *name)
{
    for (tentry *en = t->entries; en != NULL; en = en->next)
        if (strcmp(en->name, name) == 0)
            return en;
    return NULL;
}
/* Spawns the actor of e (families looked up by id) and links e in. */
troupe_err
troupe__tables_entry_start(troupe_tables *t, tentry *e);
/* A catalog job is over (counted in ddl_jobs when it began): the last one
 * of a stop that waits for them stops the actors. */
void
troupe__tables_ddl_dec(troupe_tables *t);

/* versions.c */
/* At open, before anything is served: the counter starts at the stored
 * floor and the next floor is stored. */
troupe_err
troupe__vers_open(troupe_tables *t);

/* entry.c */
/* meta key ("table", name) or ("seq") */
troupe_err
troupe__tables_meta_key(troupe_key_writer *w, const char *name);
/* meta key ("build", table id): the position of the table's running
 * build, [1, index id, last primary key done]. */
troupe_err
troupe__tables_pos_key(troupe_key_writer *w, uint64_t table_id);
/* The value under w's key in meta (*v troupe_malloc'd), and finishes w
 * (ke: the key's error, if building it failed). ENOENT when absent. */
troupe_err
troupe__meta_get(troupe_tables *t, troupe_key_writer *w, troupe_err ke,
                 void **v, size_t *vlen);
/* Writes p's bytes under w's key in meta, one write with `sync`, and
 * finishes both (ke: the key's error, if building it failed). Blocks. */
troupe_err
troupe__meta_put(troupe_db *db, troupe_cf *meta, troupe_key_writer *w,
                 troupe_err ke, troupe_packer *p, troupe_sync sync);
/* One synced batch: the counter (put_seq), the entry of table `name`
 * (val NULL: deleted) and, when clear_pos is a table id, that table's build
 * position deleted with it, so a catalog change that starts or ends a build
 * never leaves a position another build could resume from. */
troupe_err
troupe__tables_write_meta(troupe_tables *t, const char *name, const void *val,
                          size_t vlen, bool put_seq, uint64_t clear_pos);
/* Whether key is troupe__tables_meta_key(name). */
bool
troupe__tables_entry_key_is(const void *key, size_t klen, const char *name);
/* The catalog entry; "dropped" only when a sweep is pending, so a table
 * that never dropped an index keeps the four-key form. */
troupe_err
troupe__tables_entry_pack_named(uint64_t id, const tschema *s, const char *name,
                                const uint64_t *dropped, size_t nd,
                                troupe_packer *p);

/* schema.c */
/* A schema with room for n indexes and none yet (one reference); NULL when
 * out of memory. */
tschema *
troupe__tschema_new(size_t n);
/* Whether schema a (a table's) holds exactly the indexes of b (a create's
 * request), in any order: same names, same specs (ids and states aside). */
bool
troupe__tschema_same(const tschema *a, const tschema *b);
/* A copy of s (defs copied through their catalog form) plus `extra` (may
 * be NULL), leaving out index `drop_id` (0: none), with index `ready_id`
 * marked ready. The x families are looked up again by
 * troupe__tables_entry_start or set by the caller. */
troupe_err
troupe__tschema_clone(troupe_db *db, const tschema *s, troupe_index_def *extra,
                      uint64_t drop_id, uint64_t ready_id, tschema **out);
/* Looks up the x family of each of s's indexes (s not shared yet):
 * ECORRUPT when one is missing (the catalog names it), or the lookup's
 * error. */
troupe_err
troupe__tschema_families(troupe_db *db, tschema *s);
/* Spawns the index actor (queries) of table `id` over the indexes of s. */
troupe_err
troupe__tschema_spawn_index(troupe_tables *t, uint64_t id, const tschema *s,
                            troupe_addr *out);

/* ddl.c */
/* Runs fn(arg) on a worker after the catalog jobs queued before it, then
 * done(arg) on scheduler 0. Errors (nothing runs): ENOMEM, ECLOSED. */
troupe_err
troupe__ddl_submit(troupe_tables *t, void (*fn)(void *),
                   void (*done)(void *, troupe_runtime *), void *arg);

/* table_ddl.c */
/* Drops the x families of the n index ids. Blocks. */
void
troupe__tables_drop_x_families(troupe_tables *t, const uint64_t *ids, size_t n);

/* build.c */
/* Writes en's catalog entry with schema s and dropped list (copied), and
 * clears the table's build position in the same batch; then makes s
 * current (also for the actor, with build b to run). Called with ddl
 * held. */
troupe_err
troupe__tables_entry_update(troupe_tables *t, tentry *en, tschema *s,
                            const uint64_t *dropped, size_t nd, tbuild *b);
/* A build of index_id (0: a sweep) of en, calling cb(arg) when it ends
 * (cb may be NULL); NULL when out of memory. */
tbuild *
troupe__tables_build_new(troupe_tables *t, const tentry *en, uint64_t index_id,
                         troupe_tables_cb cb, void *arg);
void
troupe__tables_build_free(tbuild *b);
/* At open: a build or sweep left unfinished resumes after its saved
 * position. */
void
troupe__tables_resume_builds(troupe_tables *t, tentry *en);

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
