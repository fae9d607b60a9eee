/* Private: what the catalog (tables.c and the files below), the client
 * calls (client.c) and the table actor (actor.c and its concept files)
 * share beyond the internal tier (troupe/internal/tables.h,
 * troupe/internal/participant.h). */
#ifndef TROUPE_TABLE_INT_H
#define TROUPE_TABLE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/hash.h"
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

/* An online index build (build.c: the catalog starts and finishes it, the
 * actor runs it). The catalog fields are set before the actor sees it;
 * the actor fields are touched only on the actor's thread. */
typedef struct tbuild {
    troupe__ddl ddl; /* first: the finalize job (build.c) */
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
 * drains them unhandled) and with them some callers' replies.
 * fn(arg, err) is called exactly once: OK when the actor is idle; ECLOSED
 * when it never got there: it was gone already (then at once, on the
 * calling thread), its request was dropped undelivered, or it stopped
 * first (the runtime shut down: then on the thread that stopped it). With
 * ECLOSED work of the actor's may still be in flight.
 */
typedef void (*troupe__quiesce_fn)(void *arg, troupe_err err);
void
troupe__table_quiesce(troupe_runtime *rt, troupe_addr a, troupe__quiesce_fn fn,
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

/* ---- the tables' side of the catalog: tables.c, versions.c, entry.c,
 * schema.c, table_ddl.c, index_ddl.c, build.c (the catalog itself, with
 * its id counter, DDL order and loader, is actors/catalog) ------------- */

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
    /* Prepared XA transactions with parts at this table (xa.c): its DDL
     * is EBUSY while any is. Under the tables' mu. */
    size_t xa_holds;
};

enum { TABLES_RUNNING = 0, TABLES_STOPPING, TABLES_STOPPED };

/* xa.c: a resolved marker, in memory (the stored ones, oldest first). */
typedef struct txa_mark {
    char xid[TROUPE__XA_XID_MAX];
    size_t len;
    int outcome;
    uint64_t seq;
} txa_mark;

/* The tables' object. Read and written by the files above only (the
 * actor and the client calls go through the functions above): tables.c
 * owns it (the map `entries`, the state and stop fields, `ddl_jobs`),
 * versions.c owns `vers`. Ids come from the catalog's counter
 * (troupe__catalog_ids, under `mu` where a state check goes with it);
 * every catalog change is a catalog job (troupe__ddl), run in the
 * catalog's one order. */
struct troupe_tables {
    troupe_catalog *cat; /* attached: detached by destroy */
    troupe_runtime *rt;  /* the catalog's */
    troupe_db *db;       /* the catalog's */
    troupe_commit *commit;
    const troupe_index_fns *fns;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    uint32_t timeout_ms;
    tversions vers; /* key versions (txn.c), floor in meta */
    ttables_shared ts;
    troupe_cf *meta; /* the catalog's */
    pthread_mutex_t mu;
    tentry *entries;
    int state;            /* TABLES_RUNNING, _STOPPING, _STOPPED */
    int ddl_jobs;         /* creates, drops and builds not yet completed */
    bool stopping_actors; /* the stop has reached the actors */
    atomic_size_t stops;  /* actors still stopping, +1 while starting */
    troupe_tables_stop_cb stop_cb;
    void *stop_arg;
    /* xa.c's: the prepared xids and the resolved markers, under mu. */
    struct {
        struct txa_entry *entries;
        txa_mark *marks; /* TROUPE__XA_MARKS_MAX slots, oldest first */
        size_t nmarks;
        uint64_t mark_seq; /* the newest marker's */
    } xa;
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
/* meta key ("build", table id): the position of the table's running
 * build, [1, index id, last primary key done]. */
troupe_err
troupe__tables_pos_key(troupe_key_writer *w, uint64_t table_id);
/* One synced batch: the counter (put_seq), the entry of table `name`
 * (val NULL: deleted) and, when clear_pos is a table id, that table's build
 * position deleted with it, so a catalog change that starts or ends a build
 * never leaves a position another build could resume from. */
troupe_err
troupe__tables_write_meta(troupe_tables *t, const char *name, const void *val,
                          size_t vlen, bool put_seq, uint64_t clear_pos);
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

/* table_ddl.c */
/* Drops the x families of the n index ids. Blocks. */
void
troupe__tables_drop_x_families(troupe_tables *t, const uint64_t *ids, size_t n);

/* build.c */
/* Writes en's catalog entry with schema s and dropped list (copied), and
 * clears the table's build position in the same batch; then makes s
 * current (also for the actor, with build b to run). Called from a
 * catalog job's step. */
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

/* ---- the table actor's state, by concept (actor.c, keyvers.c, locks.c,
 * prepare.c, write.c, participant.c, qver.c, read.c, build.c,
 * expiry.c) -------------------------------------------------------------- */

/* The actor's own kinds (completions and messages to itself), after the
 * request kinds, and two op kinds that never arrive as messages. */
enum {
    TABLE_PREP_DONE = TABLE_NKINDS_,
    TABLE_COMMIT_DONE,
    TABLE_READ_DONE,
    TABLE_SWITCH,
    TABLE_BUILD_KEYS,
    TABLE_QUIESCE,
    TABLE_TXN_PREP_DONE,
    TABLE_TXN_EXPIRE,
    TABLE_TXN_QVER_DONE,
    TABLE_VEVICT_NEXT, /* the next batch of the running eviction pass */
    TABLE_PURGE_KEYS,  /* a purge step's expired keys, back from a worker */
    TABLE_READ_FLUSH,  /* hand the queued reads to workers */
    TABLE_NKINDS,
    TABLE_REINDEX, /* an op kind only: rewrite a row's index entries */
    TABLE_PURGE_OP /* an op kind only: delete the row if still expired */
};

typedef struct tstate tstate;
typedef struct klock klock;

/* prepare.c, write.c: a unique value a write claims (prepare.c finds it,
 * write.c checks it against writes in flight and recent commits). */
typedef struct uniq {
    uint64_t index_id;
    unsigned char *vals; /* the index key without its primary key */
    size_t len;
} uniq;

/* write.c: one write of one key (a client's, a transaction's, or the
 * actor's own: a build's reindex, a purge's delete), from its arrival to
 * its release. */
typedef struct wop {
    struct wop *next;  /* in its key's queue, or the parked list */
    struct wop *inext; /* in the in-flight list (writes with uniques) */
    struct wop *pnext; /* in the parked list */
    uint64_t gen;      /* schema generation it was prepared with */
    uint64_t cseq0;    /* commits with uniques seen when it started */
    bool counted;      /* counted in nrunning */
    bool build;        /* a build's reindex op */
    bool ext;          /* a transaction's op: batch is the shared one */
    bool purge_hit;    /* TABLE_PURGE_OP: prepared a delete */
    bool cached;       /* prepare on the actor: memory-only reads */
    bool nostamp;      /* store created_at / updated_at as given */
    /* The version this write publishes, taken on the writer thread once
     * the write is stored and before its caller hears of it (0 until
     * then): a transaction that began after the reply has seq0 >= cver. */
    _Atomic uint64_t cver;
    /* The clock when cver was taken: the publish time its TTL counts
     * from (the actor records the version only later). */
    _Atomic int64_t cms;
    /* An op of the actor's own (REINDEX, PURGE_OP): called once when it
     * ends, with op->err its outcome, after the key's next write started
     * (or when it could not be queued); op is freed after. NULL for
     * client and transaction ops. */
    void (*done)(troupe_actor *self, tstate *s, struct wop *op);
    klock *lock;
    troupe_runtime *rt;
    troupe_addr self;
    troupe_addr asker;
    uint64_t corr;
    uint32_t kind;
    troupe_sync sync;
    int64_t expires;
    ttable_cfg cfg; /* holds one schema reference */
    troupe_err err;
    troupe_batch *batch;
    uniq *uq;
    size_t nuq;
    unsigned char *key;
    size_t klen;
    unsigned char *doc;
    size_t dlen;
} wop;

/* locks.c: a key's lock. */
struct klock {
    klock *next;  /* bucket chain */
    wop *running; /* in a worker, parked, or in the pipeline, or a
                     prepared transaction's write */
    size_t rsv;   /* prepared transactions that read the key: writes wait */
    wop *whead;   /* writes waiting behind it, in arrival order */
    wop *wtail;
    size_t klen;
    unsigned char key[];
};

/* locks.c: reserved ranges (a prepared transaction's scans): a write
 * into one of them waits until they are released. Owned by whoever
 * embeds it (v too); linked in tlocks while reserved. */
typedef struct trsv {
    struct trsv *next;
    struct trsv **pprev;
    size_t n;
    ttxn_range *v;
} trsv;

/* locks.c: per-key locks and what waits for reservations. */
typedef struct tlocks {
    klock **buckets;
    size_t nbuckets;
    wop *rwait_head; /* writes into a reserved range, waiting for its end */
    wop *rwait_tail;
    trsv *ranges; /* the reserved ranges */
} tlocks;

/* keyvers.c: a key's version record (the map's design: keyvers.c). */
typedef struct vent {
    struct vent *next;
    struct vent **pprev; /* the pointer to it in its chain: O(1) removal */
    size_t hash;         /* troupe__fnv1a64 of key */
    struct vent *lprev;  /* publish order */
    struct vent *lnext;
    int64_t pub_ms; /* when it was last published */
    uint64_t ver;
    size_t klen;
    unsigned char key[];
} vent;

#define VMAP_BUCKETS_MIN 256

/* keyvers.c: the key-version map and its eviction pass. */
typedef struct tkeyvers {
    vent **vmap;
    size_t vnb; /* buckets of vmap: a power of two, grown with nv */
    size_t nv;
    size_t vbytes;     /* estimated bytes of the records */
    uint64_t vevicted; /* records evicted since spawn */
    vent *lhead;       /* oldest publish */
    vent *ltail;
    /* the eviction pass running, if any */
    bool evicting;
    troupe_addr ev_asker;
    uint64_t ev_corr;
    uint64_t ev_total;
    uint32_t ev_batches;
    uint32_t ev_largest;
    uint64_t vfloor;
    uint64_t vmax;
} tkeyvers;

/* write.c: the writes between start and release, and the unique values
 * of recent commits. */
typedef struct twrites {
    wop *inflight;
    wop *parked;
    uint64_t gen;       /* bumped by every schema switch */
    size_t nrunning;    /* ops between start and release */
    size_t old_running; /* of which prepared with an older schema */
    bool inlining;      /* a write is being prepared on the actor's thread */
    uint64_t cseq;      /* commits of writes with unique values */
    uint64_t clog_floor;
    struct clog *clog;
    size_t nclog;
} twrites;

/* participant.c: the transactions' parts at this table. */
typedef struct tparts {
    struct tpart *prepared;  /* prepared, waiting for their finish */
    struct tpart *working;   /* reserved, their writes being prepared on a
                                worker (owned by the worker job, never freed
                                by stop) */
    struct tdefer *deferred; /* prepares waiting for a commit's release */
    uint64_t last_pub;       /* the version the last part's end published */
    /* XA parts among prepared (held until resolved, troupe/xa.h), and
     * their writes, which count in writes.nrunning: neither keeps a
     * quiesce waiting (a stop must not wait for a resolution). */
    size_t nxa;
    size_t xa_ops;
} tparts;

/* qver.c: versioned queries waiting for a write. */
typedef struct tqver {
    struct qdefer *deferred;
} tqver;

/* read.c: reads waiting for the actor's READ_FLUSH. */
typedef struct treads {
    struct rjob *head, *tail;
    bool flush_sent;
} treads;

/* actor.c: the actor's lifecycle. */
typedef struct tlife {
    size_t jobs;  /* read and query jobs on workers, and a pending
                     READ_FLUSH (troupe__table_job_begin/_end) */
    bool closing; /* quiescing: new requests get ECLOSED */
    troupe__quiesce_fn quiesced;
    void *quiesced_arg;
} tlife;

/* actor.c: the actor's state; each sub-struct is its file's. */
/* What the running index build, or else the last one, has done (build.c;
 * troupe_tables_index_progress_wait asks for it). */
typedef struct tbuild_fig {
    uint64_t index_id; /* 0: none yet, or a sweep */
    uint64_t done;     /* rows reindexed by its steps completed */
    uint64_t inflight; /* rows of the step running */
    uint64_t total;    /* RocksDB's estimate at its start, never below done;
                          done itself once it ended with OK */
    uint64_t t0_ns, end_ns; /* CLOCK_MONOTONIC; end 0 while it runs */
    uint64_t logged_ns;     /* its last progress line */
    uint64_t logged_tenths; /* of total, in that line */
    troupe_err err;
    bool running;
} tbuild_fig;

struct tstate {
    ttable_cfg cfg; /* actor.c; cfg.schema is switched by build.c */
    tkeyvers vers;
    tlocks locks;
    twrites writes;
    tparts parts;
    tqver qver;
    treads reads;
    tbuild *build;        /* build.c: the build running, if any */
    tbuild_fig bfig;      /* build.c: its figures, or the last one's */
    struct tpurge *purge; /* expiry.c: the expired-row pass running, if any */
    tlife life;
};

/* A growing list of conflicting keys (borrowed bytes), filled by the
 * conflict checks of a transaction's prepare (participant.c, keyvers.c,
 * locks.c). */
typedef struct kref {
    const unsigned char *k;
    size_t n;
    uint32_t kinds; /* TROUPE__PART_* bits */
} kref;

typedef struct kset {
    kref *v;
    size_t n;
    size_t cap;
    troupe_err err;
} kset;

static inline void
troupe__kset_add(kset *ks, const void *k, size_t n, uint32_t kinds)
{
    if (ks->err != TROUPE_OK)
        return;
    if (ks->n == ks->cap) {
        size_t cap = ks->cap ? ks->cap * 2 : 16;
        kref *v = troupe_realloc(ks->v, cap * sizeof(*v));
        if (v == NULL) {
            ks->err = TROUPE_ENOMEM;
            return;
        }
        ks->v = v;
        ks->cap = cap;
    }
    ks->v[ks->n++] = (kref){k, n, kinds};
}

/* Whether key lies in the scanned range r. */
static inline bool
troupe__range_has(const ttxn_range *r, const void *key, size_t klen)
{
    if (r->start != NULL && troupe_key_cmp(key, klen, r->start, r->slen) < 0)
        return false;
    return r->end == NULL || troupe_key_cmp(key, klen, r->end, r->elen) < 0;
}

/* actor.c: the actor's definition and lifecycle. Every handler runs
 * through its handler table, which checks after each one whether a
 * quiesce can complete, so no concept calls actor.c. */

/* A job of the actor's on a worker begins or ends: quiescing waits until
 * none is left. */
static inline void
troupe__table_job_begin(tstate *s)
{
    s->life.jobs++;
}

static inline void
troupe__table_job_end(tstate *s)
{
    s->life.jobs--;
}

/* Answers an internal kind that came without its payload: these kinds
 * are local-only, so only a local sender's mistake can make one. Inline:
 * the handlers of every concept share it. */
static inline troupe_err
troupe__table_no_payload(troupe_actor *self, const troupe_msg *m)
{
    troupe_reply_error(self, m, TROUPE_EINVAL);
    return TROUPE_OK;
}

/* build.c: index builds, the actor's half. */
/* A build waiting for the writes of an older schema, or between its
 * steps, moves on if it can. */
void
troupe__build_step(troupe_actor *self, tstate *s);
troupe_err
troupe__build_h_keys(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__build_h_switch(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__build_h_progress(troupe_actor *self, void *st, const troupe_msg *m);
/* The build running, if any, ends with ECLOSED. */
void
troupe__build_stop(troupe_actor *self, tstate *s);

/* participant.c: the transaction participant. */
/* A commit's release: deferred transaction prepares run again. */
void
troupe__parts_retry(troupe_actor *self, tstate *s);
troupe_err
troupe__parts_h_prepare(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__parts_h_prep_done(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__parts_h_expire(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__parts_h_finish(troupe_actor *self, void *st, const troupe_msg *m);
/* Prepared parts are dropped (their transaction aborted, their finish
 * finds nothing) and deferred prepares answered ECLOSED. */
void
troupe__parts_stop(troupe_actor *self, tstate *s);
/* Whether nothing but held XA parts is in flight among the parts (a
 * quiesce does not wait for those: actor.c). */
bool
troupe__parts_quiet(const tstate *s);
/* The xid of a prepared XA part here that holds key (writes it, read it,
 * or scanned a range over it), or NULL: a single-key write of it is
 * refused (EBUSY) rather than queued behind a part that may be held for
 * ever. */
const char *
troupe__parts_xa_holder(const tstate *s, const void *key, size_t klen);

/* read.c: the actor's disk reads. */
troupe_err
troupe__reads_h_read(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__reads_h_flush(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__reads_h_done(troupe_actor *self, void *st, const troupe_msg *m);
/* Reads still queued are answered ECLOSED, never run. */
void
troupe__reads_stop(troupe_actor *self, tstate *s);

/* qver.c: versioned queries. */
/* A commit's release: deferred versioned queries run again. */
void
troupe__qver_retry(troupe_actor *self, tstate *s);
troupe_err
troupe__qver_h_query(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__qver_h_done(troupe_actor *self, void *st, const troupe_msg *m);
void
troupe__qver_stop(troupe_actor *self, tstate *s);

/* expiry.c: expired-row purges. */
troupe_err
troupe__expiry_h_purge(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__expiry_h_keys(troupe_actor *self, void *st, const troupe_msg *m);
void
troupe__expiry_stop(troupe_actor *self, tstate *s);

/* keyvers.c: key versions. Actor thread. */

/* The record of key (hash h = troupe__fnv1a64(key, klen)), or NULL. On
 * the write path and in every conflict check: kept inline. */
static inline vent *
troupe__keyvers_find(const tstate *s, const void *key, size_t klen, size_t h)
{
    for (vent *v = s->vers.vmap[h & (s->vers.vnb - 1)]; v != NULL; v = v->next)
        if (v->hash == h && v->klen == klen && memcmp(v->key, key, klen) == 0)
            return v;
    return NULL;
}

/* The version of key: its record's, else the floor. */
static inline uint64_t
troupe__keyvers_get(const tstate *s, const void *key, size_t klen)
{
    const vent *v =
        troupe__keyvers_find(s, key, klen, troupe__fnv1a64(key, klen));
    return v != NULL ? v->ver : s->vers.vfloor;
}

/* Records that key got version ver at `now` (`create`: a versioned
 * query's first version, always recorded). */
void
troupe__keyvers_publish(tstate *s, const void *key, size_t klen, uint64_t ver,
                        int64_t now, bool create);
/* Forgets every record (the floor stays). */
void
troupe__keyvers_clear(tstate *s);
/* The version half of a scanned range's conflicts: the keys of r with a
 * version newer than seq0 (STALE, and RESERVED when a write holds one),
 * into ks. True when versions newer than seq0 may have been forgotten:
 * the whole range is reported as changed, by its start, and there is
 * nothing more to check. */
bool
troupe__keyvers_range_stale(const tstate *s, const ttxn_range *r, uint64_t seq0,
                            kset *ks);
troupe_err
troupe__keyvers_h_vevict(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__keyvers_h_vevict_next(troupe_actor *self, void *st,
                              const troupe_msg *m);
troupe_err
troupe__keyvers_h_stats(troupe_actor *self, void *st, const troupe_msg *m);
/* The map of a new actor (ENOMEM), and freed at its stop. */
troupe_err
troupe__keyvers_init(tstate *s);
void
troupe__keyvers_stop(troupe_actor *self, tstate *s);

/* prepare.c: write preparation. Any thread: it touches only the op. */

/* Prepares op (read, check, build its batch into op->batch; its unique
 * values into op->uq): the write's error, or EAGAIN when op->cached and a
 * read needs the disk. Blocks unless op->cached. */
troupe_err
troupe__prepare(wop *op);
/* troupe__prepare as a worker job: the outcome in op->err. */
void
troupe__prepare_work(void *arg);
/* Frees op's unique values. */
void
troupe__prepare_uniq_free(wop *op);

/* locks.c: per-key locks, read reservations, reserved ranges. Actor
 * thread. */

/* Where key's lock is, or would be linked, in its bucket. On the write
 * path: kept inline. */
static inline klock **
troupe__locks_slot(const tstate *s, const void *key, size_t klen)
{
    klock **pp =
        &s->locks.buckets[troupe__fnv1a64(key, klen) & (s->locks.nbuckets - 1)];
    while (*pp != NULL &&
           ((*pp)->klen != klen || memcmp((*pp)->key, key, klen)))
        pp = &(*pp)->next;
    return pp;
}

/* key's lock, created when absent; NULL when out of memory. */
klock *
troupe__locks_get(tstate *s, const void *key, size_t klen);
/* l runs no write: unless a read reservation holds writes back, starts
 * its next waiting write, or frees l when none waits. */
void
troupe__locks_advance(troupe_actor *self, tstate *s, klock *l);
/* Queues op behind its key's lock (or behind a reserved range that holds
 * its key) and starts it when nothing holds the key. ENOMEM (op is the
 * caller's again). */
troupe_err
troupe__locks_attach(troupe_actor *self, tstate *s, wop *op);
/* Drops one read reservation; starts a write that waited for it. */
void
troupe__locks_rsv_release(troupe_actor *self, tstate *s, klock *l);
/* Whether a reserved range holds key. */
bool
troupe__locks_in_range(const tstate *s, const void *key, size_t klen);
/* Reserves r's ranges (none: nothing); unreserve before r goes. */
void
troupe__locks_reserve(tstate *s, trsv *r);
void
troupe__locks_unreserve(tstate *s, trsv *r);
/* Writes that waited for reserved ranges try again. */
void
troupe__locks_rwait_retry(troupe_actor *self, tstate *s);
/* The lock half of a scanned range's conflicts: the keys of r without a
 * version newer than seq0 that a write holds (RESERVED) or stored after
 * seq0 without publishing it yet (STALE), into ks. */
void
troupe__locks_range_held(const tstate *s, const ttxn_range *r, uint64_t seq0,
                         kset *ks);
/* The buckets of a new actor (ENOMEM); at its stop, the writes waiting
 * for a lock or a range are answered ECLOSED and every lock is freed. */
troupe_err
troupe__locks_init(tstate *s);
void
troupe__locks_stop(troupe_actor *self, tstate *s);

/* write.c: the write state machine. Actor thread. */

/* A new op of `kind` at this actor for key (and doc), with its own copies
 * of both and one reference to the current schema; asker, corr, sync,
 * build, done and the rest are the caller's to set (zero: no asker).
 * NULL when out of memory. */
wop *
troupe__wop_new(troupe_actor *self, const tstate *s, uint32_t kind,
                const void *key, size_t klen, const void *doc, size_t dlen,
                int64_t expires, bool nostamp);
/* Frees op (its batch unless it is a transaction's, its unique values,
 * its schema reference). */
void
troupe__wop_free(wop *op);
/* Answers op's asker ECLOSED (op was never submitted) and frees it. */
void
troupe__wop_close(wop *op);
/* Queues op behind its key's lock and starts it when nothing holds the
 * key; ENOMEM when it cannot be queued (op is freed, done not called). */
troupe_err
troupe__write_enqueue(troupe_actor *self, tstate *s, wop *op);
/* Starts op, which holds its key's lock: prepares it with the current
 * schema, on this thread from memory when it may, else on a worker. */
void
troupe__write_start(troupe_actor *self, tstate *s, wop *op);
/* The running write op of a key is done: answers it unless `answered`,
 * starts the next write of that key, calls op->done, frees op. */
void
troupe__write_release(troupe_actor *self, tstate *s, wop *op, bool answered);
/* Whether two lists of unique values share one. */
bool
troupe__write_uniq_overlap(const uniq *a, size_t na, const uniq *b, size_t nb);
/* 1: a write in the pipeline claims one of op's unique values (wait for
 * its commit); 2: one committed after op's check read the index (check
 * again now); 0: neither. */
int
troupe__write_uniq_clash(const tstate *s, const wop *op);
/* op committed: remembers its unique values (moved out of op). */
void
troupe__write_clog_add(tstate *s, wop *op);
/* Forgets the committed unique values (no running write can have read
 * before them). */
void
troupe__write_clog_clear(tstate *s);
/* Tracks op's unique values (if any) while it is in the pipeline, or
 * stops tracking them. */
void
troupe__write_inflight_add(tstate *s, wop *op);
void
troupe__write_inflight_remove(tstate *s, wop *op);
/* Parked writes (their unique values were claimed) prepare again. */
void
troupe__write_restart_parked(troupe_actor *self, tstate *s);
troupe_err
troupe__write_h_write(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__write_h_prep_done(troupe_actor *self, void *st, const troupe_msg *m);
troupe_err
troupe__write_h_commit_done(troupe_actor *self, void *st, const troupe_msg *m);
/* Parked writes are answered ECLOSED; the commit log is forgotten. */
void
troupe__writes_stop(troupe_actor *self, tstate *s);

/* Where and how a read reads (read.c): memory only when cached (EAGAIN
 * when a block is not in memory); `now` (Unix ms) decides expiry. */
typedef struct tread_src {
    troupe_db *db;
    troupe_cf *cf; /* the table's row family */
    bool cached;
    int64_t now;
} tread_src;

/* A troupe_rows as rows.c allocates it: what a user sees, then what the
 * rows point into and troupe_rows_destroy frees. */
typedef struct trows {
    troupe_rows pub;
    troupe_body *body; /* a reply body (retained), or NULL */
    void *mem;         /* a buffer (troupe_free), or NULL */
    void *cur;         /* the wrapped cursor (troupe_free), or NULL */
} trows;

/* Rows with room for n rows (pub.rows, zeroed; pub.n is left 0) and then
 * extra bytes at *tail (tail may be NULL when extra is 0); the rest
 * zeroed. NULL without memory. Freed with troupe_rows_destroy. */
trows *
troupe__rows_alloc(size_t n, size_t extra, void **tail);

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
