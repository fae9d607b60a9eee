/*
 * The catalog: table entries in the `meta` family (docs/data-model.md) and
 * the in-memory map from name to table actor.
 *
 * Invariants. Ids come from one counter (`("seq")` in meta) and are never
 * reused: ids are reserved in memory when a create is called and the
 * counter is stored (synced) before any family named after them is
 * created, so a crash between the two leaves at worst unused ids, never a
 * family that a later create would collide with. The map is guarded by
 * `mu` and never held across I/O; `ddl` orders creates and drops so that
 * each sees the catalog the previous one left, and it is held across I/O
 * only on worker threads or by blocking callers.
 *
 * Catalog changes are not actor messages: they block on RocksDB's family
 * management, which has no asynchronous form, so they run on the worker
 * pool (the async forms) or on the caller's thread (the _wait forms).
 *
 * Index changes (add, rebuild, drop) write the new index list first and
 * then let the table actor walk the rows (a build, or for a drop a sweep
 * that only rewrites manifests). A rebuild is a drop plus an add under a
 * fresh id rather than clearing x.<id> in place: entries written by
 * writes during the rebuild would race a range delete, and a fresh family
 * makes "every orphan gone" a family drop. Removed ids stay in the entry's
 * "dropped" list until the walk is over, and the walk stores its position
 * under ("build", table id) as it goes, so both survive a crash; every
 * entry write that starts or ends a walk deletes that position with it.
 *
 * Key versions never repeat, also across opens, or a version a client
 * cached before a restart could name a newer value after it (a stale
 * versioned commit would then succeed: a lost update). Every version is
 * below a floor stored in meta under ("versions"); an open starts the
 * counter at the stored floor and, before it serves anything, stores a
 * new one `reserve` higher (synced). When half of that is used, a worker
 * stores the next floor in the background (counted as a catalog job, so
 * a stop waits for it). A version is handed out only below the durable
 * floor. Should the counter ever reach it before the background write
 * landed, the thread that needs the version decides: the commit
 * pipeline's writer (every ordinary and transactional commit takes its
 * version there, once the batch is written) may block, and stores the
 * floor itself; an actor's loop may not, so a versioned query that needs
 * a first version answers EBUSY. Neither can happen in practice: with the
 * default reserve (2^24) the background write has 2^23 versions of
 * headroom, minutes of commits at this machine's 200k/s, against the
 * milliseconds one synced write takes. A floor that cannot be stored (a
 * failing disk) leaves the versions past it unrevealed: a versioned query
 * answers that error and a versioned commit EUNKNOWN, so no client ever
 * holds a version a later open could hand out again. Storing a floor
 * instead of each version keeps commits free of extra writes; an epoch
 * per open in the high bits would have worked too, but it halves the
 * counter's range and changes every version's shape for nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

/* Most ids a catalog entry's "dropped" list may hold. */
#define DROPPED_MAX TROUPE_TABLE_INDEX_MAX

typedef struct tentry {
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
} tentry;

enum { RUNNING = 0, STOPPING, STOPPED };

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
    int state;            /* RUNNING, STOPPING, STOPPED */
    int ddl_jobs;         /* creates, drops and builds not yet completed */
    bool stopping_actors; /* the stop has reached the actors */
    atomic_size_t stops;  /* actors still stopping, +1 while starting */
    troupe_tables_stop_cb stop_cb;
    void *stop_arg;
    /* Catalog jobs run one at a time on the worker pool, queued here
     * rather than on `ddl`: a job may block its worker (a drop waits for
     * the table actor to wind down, which needs workers), so two of them
     * must never hold two workers. */
    struct ddl_item *dq_head, *dq_tail;
    bool dq_busy;
};

typedef struct ddl_item {
    struct ddl_item *next;
    troupe_tables *t;
    void (*fn)(void *arg);
    void (*done)(void *arg, troupe_runtime *rt);
    void *arg;
} ddl_item;

static void
ddl_item_run(void *arg)
{
    ddl_item *it = arg;
    it->fn(it->arg);
}

static void
ddl_item_done(void *arg, troupe_runtime *rt)
{
    ddl_item *it = arg;
    troupe_tables *t = it->t;
    pthread_mutex_lock(&t->mu);
    ddl_item *next = t->dq_head;
    if (next != NULL) {
        t->dq_head = next->next;
        if (t->dq_head == NULL)
            t->dq_tail = NULL;
    } else {
        t->dq_busy = false;
    }
    pthread_mutex_unlock(&t->mu);
    it->done(it->arg, rt);
    troupe_free(it);
    while (next != NULL) {
        if (troupe_runtime_work(t->rt, ddl_item_run, ddl_item_done, next) ==
            TROUPE_OK)
            return;
        /* Shutting down: no worker left to take it; run it here. */
        ddl_item *it2 = next;
        pthread_mutex_lock(&t->mu);
        next = t->dq_head;
        if (next != NULL) {
            t->dq_head = next->next;
            if (t->dq_head == NULL)
                t->dq_tail = NULL;
        } else {
            t->dq_busy = false;
        }
        pthread_mutex_unlock(&t->mu);
        it2->fn(it2->arg);
        it2->done(it2->arg, rt);
        troupe_free(it2);
    }
}

/* Runs fn(arg) on a worker after the catalog jobs queued before it, then
 * done(arg) on scheduler 0. Errors (nothing runs): ENOMEM, ECLOSED. */
static troupe_err
ddl_submit(troupe_tables *t, void (*fn)(void *),
           void (*done)(void *, troupe_runtime *), void *arg)
{
    ddl_item *it = troupe_calloc(1, sizeof(*it));
    if (it == NULL)
        return TROUPE_ENOMEM;
    it->t = t;
    it->fn = fn;
    it->done = done;
    it->arg = arg;
    pthread_mutex_lock(&t->mu);
    bool queue = t->dq_busy;
    if (queue) {
        if (t->dq_tail != NULL)
            t->dq_tail->next = it;
        else
            t->dq_head = it;
        t->dq_tail = it;
    } else {
        t->dq_busy = true;
    }
    pthread_mutex_unlock(&t->mu);
    if (queue)
        return TROUPE_OK;
    troupe_err e = troupe_runtime_work(t->rt, ddl_item_run, ddl_item_done, it);
    if (e != TROUPE_OK) {
        pthread_mutex_lock(&t->mu);
        t->dq_busy = false;
        pthread_mutex_unlock(&t->mu);
        troupe_free(it);
    }
    return e;
}

static troupe_err
index_actor_spawn(troupe_tables *t, uint64_t id, const tschema *s,
                  troupe_addr *out)
{
    troupe_index_actor_opts o = {.db = t->db,
                                 .table_id = id,
                                 .defs =
                                     (const troupe_index_def *const *)s->defs,
                                 .n_defs = s->n,
                                 .fns = t->fns};
    return troupe_index_spawn(t->rt, &o, NULL, out);
}

static int64_t
default_clock(void *ctx)
{
    (void)ctx;
    return troupe_now_ms();
}

bool
troupe_catalog_name_valid(const char *name, size_t *len)
{
    if (name == NULL)
        return false;
    size_t n = strnlen(name, TROUPE_TABLE_NAME_MAX + 1);
    if (n == 0 || n > TROUPE_TABLE_NAME_MAX)
        return false;
    const unsigned char *p = (const unsigned char *)name, *end = p + n;
    while (p < end) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        int k;
        unsigned min, cp;
        if ((c & 0xE0) == 0xC0) {
            k = 1, min = 0x80, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, min = 0x800, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, min = 0x10000, cp = c & 0x07;
        } else {
            return false;
        }
        if (end - p < k)
            return false;
        for (int i = 0; i < k; i++, p++) {
            if ((*p & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (*p & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
    }
    if (len != NULL)
        *len = n;
    return true;
}

/* meta key ("table", name) or ("seq") */
static troupe_err
meta_key(troupe_key_writer *w, const char *name)
{
    troupe_key_writer_init(w);
    if (name == NULL)
        return troupe_key_put_string(w, "seq", 3);
    troupe_key_put_string(w, "table", 5);
    return troupe_key_put_string(w, name, strlen(name));
}

/* meta key ("build", table id): the position of the table's running
 * build, [1, index id, last primary key done]. */
static troupe_err
pos_key(troupe_key_writer *w, uint64_t table_id)
{
    troupe_key_writer_init(w);
    troupe_key_put_string(w, "build", 5);
    return troupe_key_put_uint64(w, table_id);
}

/* ---- key versions: the durable floor (see the design note) ------------- */

static void
ddl_dec(troupe_tables *t);

/* meta ("versions") = [1, floor] */
static troupe_err
vers_key(troupe_key_writer *w)
{
    troupe_key_writer_init(w);
    return troupe_key_put_string(w, "versions", 8);
}

/* The value under w's key in meta (*v troupe_malloc'd), and finishes w
 * (ke: the key's error, if building it failed). ENOENT when absent. */
static troupe_err
meta_get(troupe_tables *t, troupe_key_writer *w, troupe_err ke, void **v,
         size_t *vlen)
{
    const uint8_t *k;
    size_t klen;
    troupe_err e = ke;
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(w, &k, &klen);
    if (e == TROUPE_OK)
        e = troupe_db_get(t->db, t->meta, NULL, k, klen, v, vlen);
    troupe_key_writer_fini(w);
    return e;
}

troupe_err
troupe__tables_floor_parse(const void *v, size_t len, uint64_t *floor)
{
    troupe_reader r;
    uint64_t ver = 0, f = 0;
    troupe_reader_init(&r, v, len);
    troupe_read_array_n(&r, 2);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, &f);
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1)
        return TROUPE_ECORRUPT;
    *floor = f;
    return TROUPE_OK;
}

troupe_err
troupe__tables_seq_parse(const void *v, size_t len, uint64_t *seq)
{
    troupe_reader r;
    troupe_reader_init(&r, v, len);
    troupe_read_uint(&r, seq); /* sticky: read_end reports its error */
    return troupe_read_end(&r) == TROUPE_OK ? TROUPE_OK : TROUPE_ECORRUPT;
}

/* The stored floor; 0 for a database that has none yet. */
static troupe_err
vers_load(troupe_tables *t, uint64_t *floor)
{
    troupe_key_writer w;
    void *v = NULL;
    size_t vlen = 0;
    *floor = 0;
    troupe_err ke = vers_key(&w);
    troupe_err e = meta_get(t, &w, ke, &v, &vlen);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    e = troupe__tables_floor_parse(v, vlen, floor);
    troupe_free(v);
    return e;
}

/* Writes p's bytes under w's key in meta, one write with `sync`, and
 * finishes both (ke: the key's error, if building it failed). Blocks. */
static troupe_err
meta_put(troupe_db *db, troupe_cf *meta, troupe_key_writer *w, troupe_err ke,
         troupe_packer *p, troupe_sync sync)
{
    troupe_batch *b = NULL;
    const uint8_t *k;
    size_t klen, vlen;
    const void *v = troupe_pack_data(p, &vlen);
    troupe_err e = p->err != TROUPE_OK ? p->err : ke;
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(w, &k, &klen);
    if (e == TROUPE_OK)
        e = troupe_batch_create(&b);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, meta, k, klen, v, vlen);
    if (e == TROUPE_OK)
        e = troupe_db_write(db, b, sync);
    troupe_batch_destroy(b);
    troupe_key_writer_fini(w);
    troupe_pack_fini(p);
    return e;
}

/* Stores floor `f` (synced). Blocks. */
static troupe_err
vers_store(troupe_tables *t, uint64_t f)
{
    troupe_key_writer w;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, f);
    troupe_err ke = vers_key(&w);
    return meta_put(t->db, t->meta, &w, ke, &p, TROUPE_SYNC_ON);
}

/* Moves the floor to `reserve` past the counter. Called with v->mu. */
static troupe_err
vers_raise_locked(tversions *v)
{
    uint64_t seq = atomic_load(&v->seq);
    uint64_t to = seq > UINT64_MAX - v->reserve ? UINT64_MAX : seq + v->reserve;
    if (to <= atomic_load(&v->limit))
        return TROUPE_OK; /* raised meanwhile */
    troupe_err e = vers_store(v->t, to);
    atomic_store(&v->err, (int)e);
    if (e == TROUPE_OK)
        atomic_store(&v->limit, to);
    return e;
}

/* Whether the counter at `cur` is in the upper half of the reservation. */
static bool
vers_low(const tversions *v, uint64_t cur)
{
    uint64_t lim = atomic_load(&v->limit);
    return cur >= lim || lim - cur <= v->reserve / 2;
}

static void
vers_raise_work(void *arg)
{
    tversions *v = arg;
    pthread_mutex_lock(&v->mu);
    if (vers_low(v, atomic_load(&v->seq)))
        vers_raise_locked(v);
    pthread_mutex_unlock(&v->mu);
    atomic_store(&v->raising, false);
}

static void
vers_raise_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    ddl_dec(((tversions *)arg)->t);
}

/* Queues the background raise once the counter is in the upper half
 * (only while the tables run: a stop waits for one already queued). */
static void
vers_kick(tversions *v, uint64_t cur)
{
    bool idle = false;
    if (!vers_low(v, cur) ||
        !atomic_compare_exchange_strong(&v->raising, &idle, true))
        return;
    troupe_tables *t = v->t;
    pthread_mutex_lock(&t->mu);
    bool run = t->state == RUNNING;
    if (run)
        t->ddl_jobs++;
    pthread_mutex_unlock(&t->mu);
    if (run && troupe_runtime_work(t->rt, vers_raise_work, vers_raise_done,
                                   v) == TROUPE_OK)
        return;
    atomic_store(&v->raising, false);
    if (run)
        ddl_dec(t);
}

uint64_t
troupe__vers_take(tversions *v)
{
    uint64_t ver = atomic_fetch_add(&v->seq, 1) + 1;
    vers_kick(v, ver);
    if (ver < atomic_load(&v->limit))
        return ver;
    pthread_mutex_lock(&v->mu);
    if (ver >= atomic_load(&v->limit))
        vers_raise_locked(v);
    pthread_mutex_unlock(&v->mu);
    return ver;
}

uint64_t
troupe__vers_try(tversions *v)
{
    uint64_t ver = atomic_fetch_add(&v->seq, 1) + 1;
    vers_kick(v, ver);
    return ver < atomic_load(&v->limit) ? ver : 0;
}

uint64_t
troupe__vers_now(tversions *v)
{
    return atomic_load(&v->seq);
}

troupe_err
troupe__vers_check(tversions *v, uint64_t ver)
{
    if (ver < atomic_load(&v->limit))
        return TROUPE_OK;
    troupe_err e = (troupe_err)atomic_load(&v->err);
    return e != TROUPE_OK ? e : TROUPE_EBUSY;
}

/* At open, before anything is served: the counter starts at the stored
 * floor and the next floor is stored. */
static troupe_err
vers_open(troupe_tables *t)
{
    uint64_t f = 0;
    troupe_err e = vers_load(t, &f);
    if (e != TROUPE_OK)
        return e;
    atomic_store(&t->vers.seq, f);
    atomic_store(&t->vers.limit, f);
    pthread_mutex_lock(&t->vers.mu);
    e = vers_raise_locked(&t->vers);
    pthread_mutex_unlock(&t->vers.mu);
    return e;
}

static tschema *
schema_new(size_t n)
{
    tschema *s = troupe_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    atomic_init(&s->refs, 1);
    s->defs = troupe_calloc(n ? n : 1, sizeof(*s->defs));
    s->xcf = troupe_calloc(n ? n : 1, sizeof(*s->xcf));
    if (s->defs == NULL || s->xcf == NULL) {
        troupe_free(s->defs);
        troupe_free(s->xcf);
        troupe_free(s);
        return NULL;
    }
    return s;
}

static void
entry_free(tentry *e)
{
    if (e == NULL)
        return;
    troupe__tschema_release(e->schema);
    troupe_free(e->dropped);
    troupe_free(e->name);
    troupe_free(e);
}

/* Spawns the actor of e (families looked up by id) and links e in. */
static troupe_err
entry_start(troupe_tables *t, tentry *e)
{
    char buf[32];
    ttable_cfg c = {.db = t->db,
                    .commit = t->commit,
                    .fns = t->fns,
                    .clock = t->clock,
                    .clock_ctx = t->clock_ctx,
                    .vers = &t->vers,
                    .ts = &t->ts};
    troupe_err err;
    troupe__cf_name('t', e->id, buf, sizeof(buf));
    if ((err = troupe_db_cf(t->db, buf, &c.cf_t)) != TROUPE_OK)
        return err == TROUPE_ENOENT ? TROUPE_ECORRUPT : err;
    troupe__cf_name('m', e->id, buf, sizeof(buf));
    if ((err = troupe_db_cf(t->db, buf, &c.cf_m)) != TROUPE_OK)
        return err == TROUPE_ENOENT ? TROUPE_ECORRUPT : err;
    for (size_t i = 0; i < e->schema->n; i++) {
        troupe__cf_name('x', troupe_index_def_id(e->schema->defs[i]), buf,
                        sizeof(buf));
        if ((err = troupe_db_cf(t->db, buf, &e->schema->xcf[i])) != TROUPE_OK)
            return err == TROUPE_ENOENT ? TROUPE_ECORRUPT : err;
    }
    e->cf_t = c.cf_t;
    c.schema = troupe__tschema_retain(e->schema);
    if ((err = troupe__table_spawn(t->rt, &c, &e->addr)) != TROUPE_OK)
        return err;
    if ((err = index_actor_spawn(t, e->id, e->schema, &e->iaddr)) !=
        TROUPE_OK) {
        troupe_actor_stop(t->rt, e->addr, NULL, NULL);
        return err;
    }
    pthread_mutex_lock(&t->mu);
    tentry **pp = &t->entries;
    while (*pp != NULL && strcmp((*pp)->name, e->name) < 0)
        pp = &(*pp)->next;
    e->next = *pp;
    *pp = e;
    pthread_mutex_unlock(&t->mu);
    return TROUPE_OK;
}

/* ---- open -------------------------------------------------------------- */

static void
resume_builds(troupe_tables *t, tentry *en);

/* Whether the n defs have distinct ids and distinct names. */
static bool
defs_distinct(troupe_index_def *const *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (troupe_index_def_id(d[i]) == troupe_index_def_id(d[j]) ||
                strcmp(troupe_index_def_name(d[i]),
                       troupe_index_def_name(d[j])) == 0)
                return false;
    return true;
}

void
troupe__tables_entry_free(tentry *e)
{
    entry_free(e);
}

const char *
troupe__tables_entry_name(const tentry *e)
{
    return e->name;
}

troupe_err
troupe__tables_entry_parse(const void *val, size_t len, tentry **out)
{
    troupe_reader r;
    uint32_t n = 0, nidx = 0;
    uint64_t id = 0, ver = 0;
    const char *name = NULL;
    size_t nlen = 0;
    const void *idx = NULL, *drp = NULL;
    size_t idx_len = 0, drp_len = 0;
    /* Each key at most once (which of two would count is no choice to
     * make for a corrupt entry); unknown keys are skipped. A key that is
     * not a string of at most 64 bytes ends the walk: nothing read from
     * it is looked at. */
    static const char *const known[] = {"id", "name", "version", "indexes",
                                        "dropped"};
    unsigned seen = 0;
    troupe_reader_init(&r, val, len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *k = NULL;
        size_t kl = 0;
        if (troupe_read_str(&r, 64, &k, &kl) != TROUPE_OK)
            break;
        unsigned which = 0;
        while (which < 5 &&
               (strlen(known[which]) != kl || memcmp(k, known[which], kl) != 0))
            which++;
        if (which < 5 && (seen & (1u << which)))
            return TROUPE_ECORRUPT;
        if (which < 5)
            seen |= 1u << which;
        if (which == 0)
            troupe_read_uint(&r, &id);
        else if (which == 1)
            troupe_read_str(&r, TROUPE_TABLE_NAME_MAX, &name, &nlen);
        else if (which == 2)
            troupe_read_uint(&r, &ver);
        else if (which == 3)
            troupe_read_raw(&r, &idx, &idx_len);
        else if (which == 4)
            troupe_read_raw(&r, &drp, &drp_len);
        else
            troupe_read_skip(&r);
    }
    /* The name is a valid catalog name, as every create checks: one with
     * a NUL byte would be cut short in memory, and an empty one is no
     * table's. */
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1 || id == 0 ||
        name == NULL || idx == NULL || nlen == 0 ||
        memchr(name, '\0', nlen) != NULL)
        return TROUPE_ECORRUPT;
    troupe_reader_init(&r, idx, idx_len);
    troupe_read_array(&r, &nidx);
    if (r.err != TROUPE_OK || nidx > TROUPE_TABLE_INDEX_MAX)
        return TROUPE_ECORRUPT;
    tentry *e = troupe_calloc(1, sizeof(*e));
    if (e == NULL || (e->schema = schema_new(nidx)) == NULL ||
        (e->name = troupe_malloc(nlen + 1)) == NULL) {
        entry_free(e);
        return TROUPE_ENOMEM;
    }
    memcpy(e->name, name, nlen);
    e->name[nlen] = '\0';
    e->id = id;
    troupe_err err =
        troupe_catalog_name_valid(e->name, NULL) ? TROUPE_OK : TROUPE_ECORRUPT;
    for (uint32_t i = 0; i < nidx && err == TROUPE_OK; i++) {
        const void *d;
        size_t dl;
        if (troupe_read_raw(&r, &d, &dl) != TROUPE_OK)
            err = TROUPE_ECORRUPT;
        else if ((err = troupe_index_def_unpack(d, dl, &e->schema->defs[i])) ==
                 TROUPE_OK)
            e->schema->n++;
        else if (err != TROUPE_ENOMEM)
            err = TROUPE_ECORRUPT;
    }
    /* Two indexes of one id would share a family and list every key
     * twice in a manifest; two of one name would make queries ambiguous. */
    if (err == TROUPE_OK && (troupe_read_end(&r) != TROUPE_OK ||
                             !defs_distinct(e->schema->defs, e->schema->n)))
        err = TROUPE_ECORRUPT;
    if (err == TROUPE_OK && drp != NULL) {
        uint32_t nd = 0;
        troupe_reader_init(&r, drp, drp_len);
        troupe_read_array(&r, &nd);
        if (r.err != TROUPE_OK || nd > DROPPED_MAX)
            err = TROUPE_ECORRUPT;
        else if (nd > 0 &&
                 (e->dropped = troupe_calloc(nd, sizeof(uint64_t))) == NULL)
            err = TROUPE_ENOMEM;
        for (uint32_t i = 0; err == TROUPE_OK && i < nd; i++) {
            troupe_read_uint(&r, &e->dropped[i]);
            if (r.err != TROUPE_OK || e->dropped[i] == 0)
                err = TROUPE_ECORRUPT;
            else
                e->ndropped++;
        }
        if (err == TROUPE_OK && troupe_read_end(&r) != TROUPE_OK)
            err = TROUPE_ECORRUPT;
    }
    if (err != TROUPE_OK) {
        entry_free(e);
        return err;
    }
    *out = e;
    return TROUPE_OK;
}

/* Whether key is meta_key(name). */
static bool
entry_key_is(const void *key, size_t klen, const char *name)
{
    troupe_key_writer w;
    const uint8_t *k;
    size_t n;
    bool same = meta_key(&w, name) == TROUPE_OK &&
                troupe_key_writer_finish(&w, &k, &n) == TROUPE_OK &&
                n == klen && memcmp(k, key, n) == 0;
    troupe_key_writer_fini(&w);
    return same;
}

static troupe_err
load(troupe_tables *t)
{
    troupe_key_writer w;
    void *v = NULL;
    size_t vlen = 0;
    troupe_err ke = meta_key(&w, NULL);
    troupe_err e = meta_get(t, &w, ke, &v, &vlen);
    if (e == TROUPE_OK) {
        e = troupe__tables_seq_parse(v, vlen, &t->seq);
        troupe_free(v);
    } else if (e == TROUPE_ENOENT) {
        e = TROUPE_OK;
    }
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "table", 5);
    troupe_range rg;
    troupe_iter *it = NULL;
    e = troupe_key_writer_range(&w, &rg);
    if (e == TROUPE_OK)
        e = troupe_iter_create(t->db, t->meta, NULL, &rg, NULL, 0, false, &it);
    troupe_kv kv;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        tentry *en = NULL;
        if ((e = troupe__tables_entry_parse(kv.val, kv.val_len, &en)) !=
            TROUPE_OK)
            break;
        /* Ids come from the counter; the entry sits under its own name
         * (a drop of the name it holds must find it). */
        if (en->id > t->seq || !entry_key_is(kv.key, kv.key_len, en->name))
            e = TROUPE_ECORRUPT;
        for (size_t i = 0; i < en->ndropped; i++)
            if (en->dropped[i] > t->seq)
                e = TROUPE_ECORRUPT;
        for (size_t i = 0; i < en->schema->n; i++)
            if (troupe_index_def_id(en->schema->defs[i]) > t->seq)
                e = TROUPE_ECORRUPT;
        if (e == TROUPE_OK)
            e = entry_start(t, en);
        if (e != TROUPE_OK)
            entry_free(en);
    }
    troupe_iter_destroy(it);
    troupe_key_writer_fini(&w);
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}

static void
stop_all_now(troupe_tables *t);
static void
stop_actors(troupe_tables *t);

troupe_err
troupe_tables_open(const troupe_tables_opts *o, troupe_tables **out)
{
    if (out != NULL)
        *out = NULL;
    if (o == NULL || out == NULL || o->rt == NULL || o->db == NULL ||
        o->commit == NULL || o->version_reserve > TROUPE_VERSION_RESERVE_MAX)
        return TROUPE_EINVAL;
    troupe_tables *t = troupe_calloc(1, sizeof(*t));
    if (t == NULL)
        return TROUPE_ENOMEM;
    t->rt = o->rt;
    t->db = o->db;
    t->commit = o->commit;
    t->fns = o->fns;
    t->clock = o->clock ? o->clock : default_clock;
    t->clock_ctx = o->clock_ctx;
    t->timeout_ms = o->timeout_ms ? o->timeout_ms : 30000;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->ddl, NULL);
    pthread_mutex_init(&t->ts.mu, NULL);
    pthread_mutex_init(&t->vers.mu, NULL);
    t->vers.t = t;
    t->vers.reserve = o->version_reserve ? o->version_reserve
                                         : TROUPE_VERSION_RESERVE_DEFAULT;
    /* pi_db's quantum: 1 ms; below it rounds up, above it truncates. */
    t->ts.vttl_ms = o->version_ttl_us == 0     ? 0
                    : o->version_ttl_us < 1000 ? 1
                                               : o->version_ttl_us / 1000;
    troupe_err e = troupe_db_cf(t->db, "meta", &t->meta);
    if (e == TROUPE_ENOENT)
        e = troupe_db_cf_create(t->db, "meta", &t->meta);
    if (e == TROUPE_OK)
        e = vers_open(t);
    if (e == TROUPE_OK)
        e = load(t);
    if (e != TROUPE_OK) {
        stop_all_now(t);
        troupe_tables_destroy(t);
        return e;
    }
    /* Only now: a build refers to t, which a failed open frees. */
    for (tentry *en = t->entries; en != NULL; en = en->next)
        resume_builds(t, en);
    *out = t;
    return TROUPE_OK;
}

/* ---- stop / destroy ---------------------------------------------------- */

static void
stop_done_cb(void *arg, troupe_runtime *rt)
{
    troupe_tables *t = arg;
    pthread_mutex_lock(&t->mu);
    t->state = STOPPED;
    pthread_mutex_unlock(&t->mu);
    t->stop_cb(t, t->stop_arg);
}

static void
one_stopped(troupe_tables *t)
{
    if (atomic_fetch_sub(&t->stops, 1) != 1)
        return;
    /* To scheduler 0, as promised; once scheduler 0 has closed at
     * shutdown there is no hop to take, and this thread is as good as
     * any. */
    troupe__post_or_run(t->rt, stop_done_cb, t);
}

static void
on_actor_stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    one_stopped(arg);
}

typedef struct qstop {
    troupe_tables *t;
    troupe_addr addr;
} qstop;

/* On the table actor's thread once it is idle (or at once if gone). */
static void
quiesced_stop(void *arg)
{
    qstop *q = arg;
    troupe_tables *t = q->t;
    troupe_addr a = q->addr;
    troupe_free(q);
    if (troupe_actor_stop(t->rt, a, on_actor_stopped, t) != TROUPE_OK)
        one_stopped(t); /* already gone */
}

troupe_err
troupe_tables_stop(troupe_tables *t, troupe_tables_stop_cb cb, void *arg)
{
    if (t == NULL || cb == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&t->mu);
    if (t->state != RUNNING) {
        pthread_mutex_unlock(&t->mu);
        return TROUPE_ESTATE;
    }
    t->state = STOPPING;
    t->stop_cb = cb;
    t->stop_arg = arg;
    /* Catalog jobs and builds use the actors: the last one to finish
     * stops them (ddl_dec). */
    bool now = t->ddl_jobs == 0;
    t->stopping_actors = now;
    pthread_mutex_unlock(&t->mu);
    if (now)
        stop_actors(t);
    return TROUPE_OK;
}

static void
ddl_dec(troupe_tables *t)
{
    pthread_mutex_lock(&t->mu);
    bool go = --t->ddl_jobs == 0 && t->state == STOPPING && !t->stopping_actors;
    if (go)
        t->stopping_actors = true;
    pthread_mutex_unlock(&t->mu);
    if (go)
        stop_actors(t);
}

static void
stop_actors(troupe_tables *t)
{
    pthread_mutex_lock(&t->mu);
    size_t n = 0;
    for (tentry *en = t->entries; en != NULL; en = en->next)
        n++;
    atomic_store(&t->stops, 2 * n + 1);
    for (tentry *en = t->entries; en != NULL; en = en->next) {
        if (troupe_actor_stop(t->rt, en->iaddr, on_actor_stopped, t) !=
            TROUPE_OK)
            atomic_fetch_sub(&t->stops, 1);
        qstop *q = troupe_malloc(sizeof(*q));
        if (q == NULL) { /* stop it as it is */
            if (troupe_actor_stop(t->rt, en->addr, on_actor_stopped, t) !=
                TROUPE_OK)
                atomic_fetch_sub(&t->stops, 1);
            continue;
        }
        q->t = t;
        q->addr = en->addr;
        troupe__table_quiesce(t->rt, en->addr, quiesced_stop, q);
    }
    pthread_mutex_unlock(&t->mu);
    one_stopped(t);
}

static void
wake_stopped(troupe_tables *t, void *arg)
{
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_tables_stop_wait(troupe_tables *t)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, troupe_tables_stop(t, wake_stopped, &w),
                                 NULL);
}

/* open failed: stop what load spawned, without waiting (the actors hold
 * no reference to t). */
static void
stop_all_now(troupe_tables *t)
{
    for (tentry *en = t->entries; en != NULL; en = en->next) {
        troupe_actor_stop(t->rt, en->addr, NULL, NULL);
        troupe_actor_stop(t->rt, en->iaddr, NULL, NULL);
    }
    t->state = STOPPED;
}

void
troupe_tables_destroy(troupe_tables *t)
{
    if (t == NULL)
        return;
    if (t->state != STOPPED && t->entries != NULL)
        abort(); /* the actors still run: stop first */
    while (t->entries != NULL) {
        tentry *en = t->entries;
        t->entries = en->next;
        entry_free(en);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->ddl);
    pthread_mutex_destroy(&t->ts.mu);
    pthread_mutex_destroy(&t->vers.mu);
    troupe_free(t);
}

/* ---- list / lookup ----------------------------------------------------- */

troupe_err
troupe_tables_list(troupe_tables *t, char ***names, size_t *n)
{
    if (t == NULL || names == NULL || n == NULL)
        return TROUPE_EINVAL;
    *names = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    if (t->state != RUNNING) {
        pthread_mutex_unlock(&t->mu);
        return TROUPE_ESTATE;
    }
    size_t cnt = 0, bytes = 0;
    for (tentry *en = t->entries; en != NULL; en = en->next) {
        cnt++;
        bytes += strlen(en->name) + 1;
    }
    char **v = troupe_malloc((cnt + 1) * sizeof(char *) + bytes);
    if (v == NULL) {
        pthread_mutex_unlock(&t->mu);
        return TROUPE_ENOMEM;
    }
    char *p = (char *)(v + cnt + 1);
    size_t i = 0;
    for (tentry *en = t->entries; en != NULL; en = en->next) {
        size_t l = strlen(en->name) + 1;
        memcpy(p, en->name, l);
        v[i++] = p;
        p += l;
    }
    v[cnt] = NULL;
    pthread_mutex_unlock(&t->mu);
    *names = v;
    *n = cnt;
    return TROUPE_OK;
}

static tentry *
entry_find(troupe_tables *t, const char *name);

troupe_err
troupe__tables_index_env(troupe_tables *t, const char *table, const char *index,
                         tindex_env *env)
{
    size_t len;
    if (t == NULL || index == NULL || env == NULL ||
        !troupe_catalog_name_valid(table, &len))
        return TROUPE_EINVAL;
    memset(env, 0, sizeof(*env));
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == RUNNING ? TROUPE_ENOENT : TROUPE_ESTATE;
    tentry *en = e == TROUPE_ENOENT ? entry_find(t, table) : NULL;
    for (size_t i = 0; en != NULL && e == TROUPE_ENOENT && i < en->schema->n;
         i++)
        if (strcmp(troupe_index_def_name(en->schema->defs[i]), index) == 0) {
            env->schema = troupe__tschema_retain(en->schema);
            env->def = en->schema->defs[i];
            env->table_id = en->id;
            e = TROUPE_OK;
        }
    pthread_mutex_unlock(&t->mu);
    if (e == TROUPE_OK) {
        env->db = t->db;
        env->now_ms = t->clock(t->clock_ctx);
    }
    return e;
}

/* What the lookups below copy out of a live table's entry. */
typedef struct tentry_view {
    troupe_addr addr;
    troupe_addr iaddr;
    troupe_cf *cf_t;
    uint64_t id;
} tentry_view;

/* Finds the live table `name` under the lock and copies its view:
 * EINVAL (bad name), ESTATE (stopped), ENOENT. */
static troupe_err
entry_view(troupe_tables *t, const char *name, tentry_view *v)
{
    size_t len;
    if (t == NULL || !troupe_catalog_name_valid(name, &len))
        return TROUPE_EINVAL;
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == RUNNING ? TROUPE_ENOENT : TROUPE_ESTATE;
    tentry *en = e == TROUPE_ENOENT ? entry_find(t, name) : NULL;
    if (en != NULL) {
        *v = (tentry_view){en->addr, en->iaddr, en->cf_t, en->id};
        e = TROUPE_OK;
    }
    pthread_mutex_unlock(&t->mu);
    return e;
}

/* The table actor's (or, with index, the index actor's) address of a
 * table, with what an ask of it needs. */
static troupe_err
lookup_addr(troupe_tables *t, const char *name, bool index, troupe_addr *a,
            uint32_t *timeout_ms, troupe_runtime **rt)
{
    tentry_view v;
    troupe_err e = entry_view(t, name, &v);
    if (e == TROUPE_EINVAL)
        return e;
    if (e == TROUPE_OK)
        *a = index ? v.iaddr : v.addr;
    *timeout_ms = t->timeout_ms;
    *rt = t->rt;
    return e;
}

troupe_err
troupe__tables_lookup_index(troupe_tables *t, const char *name, troupe_addr *a,
                            uint32_t *timeout_ms, troupe_runtime **rt)
{
    return lookup_addr(t, name, true, a, timeout_ms, rt);
}

troupe_err
troupe__tables_lookup(troupe_tables *t, const char *name, troupe_addr *a,
                      uint32_t *timeout_ms, troupe_runtime **rt)
{
    return lookup_addr(t, name, false, a, timeout_ms, rt);
}

troupe_err
troupe__tables_lookup_cf(troupe_tables *t, const char *name, troupe_addr *a,
                         troupe_cf **cf_t)
{
    return troupe__tables_lookup_id(t, name, a, cf_t, NULL);
}

troupe_err
troupe__tables_lookup_id(troupe_tables *t, const char *name, troupe_addr *a,
                         troupe_cf **cf_t, uint64_t *id)
{
    tentry_view v;
    troupe_err e = entry_view(t, name, &v);
    if (e == TROUPE_OK) {
        *a = v.addr;
        *cf_t = v.cf_t;
        if (id != NULL)
            *id = v.id;
    }
    return e;
}

troupe_err
troupe__tables_read_env(troupe_tables *t, const char *name, tread_env *env)
{
    if (env == NULL)
        return TROUPE_EINVAL;
    tentry_view v;
    troupe_err e = entry_view(t, name, &v);
    if (e == TROUPE_EINVAL)
        return e;
    env->cf_t = e == TROUPE_OK ? v.cf_t : NULL;
    env->table_id = e == TROUPE_OK ? v.id : 0;
    env->rt = t->rt;
    env->db = t->db;
    env->clock = t->clock;
    env->clock_ctx = t->clock_ctx;
    return e;
}

troupe_err
troupe__tables_txn_env(troupe_tables *t, ttxn_env *env)
{
    if (t == NULL || env == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&t->mu);
    bool running = t->state == RUNNING;
    pthread_mutex_unlock(&t->mu);
    if (!running)
        return TROUPE_ESTATE;
    env->rt = t->rt;
    env->db = t->db;
    env->commit = t->commit;
    env->clock = t->clock;
    env->clock_ctx = t->clock_ctx;
    env->timeout_ms = t->timeout_ms;
    env->vers = &t->vers;
    env->ts = &t->ts;
    return TROUPE_OK;
}

void
troupe__tables_txn_enter(ttables_shared *ts, tversions *vers, ttxn_active *a)
{
    pthread_mutex_lock(&ts->mu);
    a->seq0 = troupe__vers_now(vers);
    a->next = NULL;
    a->prev = ts->tail;
    if (ts->tail != NULL)
        ts->tail->next = a;
    else
        ts->head = a;
    ts->tail = a;
    pthread_mutex_unlock(&ts->mu);
}

void
troupe__tables_txn_leave(ttables_shared *ts, ttxn_active *a)
{
    pthread_mutex_lock(&ts->mu);
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        ts->head = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    else
        ts->tail = a->prev;
    a->prev = a->next = NULL;
    pthread_mutex_unlock(&ts->mu);
}

uint64_t
troupe__tables_txn_oldest(ttables_shared *ts)
{
    pthread_mutex_lock(&ts->mu);
    uint64_t v = ts->head != NULL ? ts->head->seq0 : UINT64_MAX;
    pthread_mutex_unlock(&ts->mu);
    return v;
}

/* ---- create / drop ----------------------------------------------------- */

typedef struct ddl_job {
    troupe_tables *t;
    troupe_tables_cb cb;
    void *arg;
    troupe_err err;
    bool drop;
    bool existed; /* create: the table was there with this very spec */
    uint64_t id;
    tschema *schema; /* create: the new indexes */
    char name[];
} ddl_job;

/* One synced batch: the counter (put_seq), the entry of table `name`
 * (val NULL: deleted) and, when clear_pos is a table id, that table's build
 * position deleted with it, so a catalog change that starts or ends a build
 * never leaves a position another build could resume from. */
static troupe_err
write_meta(troupe_tables *t, const char *name, const void *val, size_t vlen,
           bool put_seq, uint64_t clear_pos)
{
    troupe_batch *b = NULL;
    troupe_key_writer w;
    const uint8_t *k;
    size_t klen;
    troupe_err e = troupe_batch_create(&b);
    if (e == TROUPE_OK && put_seq) {
        troupe_packer p;
        troupe_pack_init(&p);
        pthread_mutex_lock(&t->mu);
        troupe_pack_uint(&p, t->seq);
        pthread_mutex_unlock(&t->mu);
        size_t plen;
        const void *pd = troupe_pack_data(&p, &plen);
        e = meta_key(&w, NULL);
        if (e == TROUPE_OK)
            e = troupe_key_writer_finish(&w, &k, &klen);
        if (e == TROUPE_OK)
            e = p.err != TROUPE_OK
                    ? p.err
                    : troupe_batch_put(b, t->meta, k, klen, pd, plen);
        troupe_key_writer_fini(&w);
        troupe_pack_fini(&p);
    }
    if (e == TROUPE_OK && name != NULL) {
        e = meta_key(&w, name);
        if (e == TROUPE_OK)
            e = troupe_key_writer_finish(&w, &k, &klen);
        if (e == TROUPE_OK)
            e = val != NULL ? troupe_batch_put(b, t->meta, k, klen, val, vlen)
                            : troupe_batch_delete(b, t->meta, k, klen);
        troupe_key_writer_fini(&w);
    }
    if (e == TROUPE_OK && clear_pos != 0) {
        e = pos_key(&w, clear_pos);
        if (e == TROUPE_OK)
            e = troupe_key_writer_finish(&w, &k, &klen);
        if (e == TROUPE_OK)
            e = troupe_batch_delete(b, t->meta, k, klen);
        troupe_key_writer_fini(&w);
    }
    if (e == TROUPE_OK)
        e = troupe_db_write(t->db, b, TROUPE_SYNC_ON);
    troupe_batch_destroy(b);
    return e;
}

/* The catalog entry; "dropped" only when a sweep is pending, so a table
 * that never dropped an index keeps the four-key form. */
static troupe_err
entry_pack_named(uint64_t id, const tschema *s, const char *name,
                 const uint64_t *dropped, size_t nd, troupe_packer *p)
{
    troupe_pack_init(p);
    troupe_pack_map(p, nd > 0 ? 5 : 4);
    troupe_pack_cstr(p, "id");
    troupe_pack_uint(p, id);
    troupe_pack_cstr(p, "name");
    troupe_pack_cstr(p, name);
    troupe_pack_cstr(p, "version");
    troupe_pack_uint(p, 1);
    troupe_pack_cstr(p, "indexes");
    troupe_pack_array(p, (uint32_t)s->n);
    for (size_t i = 0; i < s->n && p->err == TROUPE_OK; i++) {
        void *d = NULL;
        size_t dl = 0;
        troupe_err e = troupe_index_def_pack(s->defs[i], &d, &dl);
        if (e != TROUPE_OK)
            return e;
        troupe_pack_raw(p, d, dl);
        troupe_free(d);
    }
    if (nd > 0) {
        troupe_pack_cstr(p, "dropped");
        troupe_pack_array(p, (uint32_t)nd);
        for (size_t i = 0; i < nd; i++)
            troupe_pack_uint(p, dropped[i]);
    }
    return p->err;
}

troupe_err
troupe__tables_entry_pack(const tentry *e, void **out, size_t *len)
{
    troupe_packer p;
    troupe_err err = entry_pack_named(e->id, e->schema, e->name, e->dropped,
                                      e->ndropped, &p);
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    void *c = NULL;
    if (err == TROUPE_OK && (c = troupe_malloc(n)) == NULL)
        err = TROUPE_ENOMEM;
    if (err == TROUPE_OK) {
        memcpy(c, d, n);
        *out = c;
        *len = n;
    }
    troupe_pack_fini(&p);
    return err;
}

static void
drop_families(troupe_tables *t, uint64_t id, const tschema *s)
{
    char buf[32];
    troupe__cf_name('t', id, buf, sizeof(buf));
    troupe_db_cf_drop(t->db, buf);
    troupe__cf_name('m', id, buf, sizeof(buf));
    troupe_db_cf_drop(t->db, buf);
    for (size_t i = 0; i < s->n; i++) {
        troupe__cf_name('x', troupe_index_def_id(s->defs[i]), buf, sizeof(buf));
        troupe_db_cf_drop(t->db, buf);
    }
}

static void
drop_x_families(troupe_tables *t, const uint64_t *ids, size_t n)
{
    char buf[32];
    for (size_t i = 0; i < n; i++) {
        troupe__cf_name('x', ids[i], buf, sizeof(buf));
        troupe_db_cf_drop(t->db, buf);
    }
}

/* Whether schema a (a table's) holds exactly the indexes of b (a create's
 * request), in any order: same names, same specs (ids and states aside). */
static bool
schema_same(const tschema *a, const tschema *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < b->n; i++) {
        bool found = false;
        for (size_t k = 0; k < a->n && !found; k++)
            found = troupe_index_def_same(a->defs[k], b->defs[i]);
        if (!found)
            return false;
    }
    return true;
}

static troupe_err
do_create(ddl_job *j)
{
    troupe_tables *t = j->t;
    troupe_err e = TROUPE_OK;
    pthread_mutex_lock(&t->mu);
    tentry *have = entry_find(t, j->name);
    /* Creating a table again with the spec it has is done already
     * (nothing written); with another spec it is EEXIST. */
    if (have != NULL) {
        j->existed = schema_same(have->schema, j->schema);
        e = j->existed ? TROUPE_OK : TROUPE_EEXIST;
    }
    pthread_mutex_unlock(&t->mu);
    if (e != TROUPE_OK || j->existed)
        return e;
    /* The counter first: see the design note. */
    if ((e = write_meta(t, NULL, NULL, 0, true, 0)) != TROUPE_OK)
        return e;
    char buf[32];
    troupe__cf_name('t', j->id, buf, sizeof(buf));
    e = troupe_db_cf_create(t->db, buf, NULL);
    troupe__cf_name('m', j->id, buf, sizeof(buf));
    if (e == TROUPE_OK)
        e = troupe_db_cf_create(t->db, buf, NULL);
    for (size_t i = 0; e == TROUPE_OK && i < j->schema->n; i++) {
        troupe__cf_name('x', troupe_index_def_id(j->schema->defs[i]), buf,
                        sizeof(buf));
        e = troupe_db_cf_create(t->db, buf, NULL);
    }
    troupe_packer p;
    if (e == TROUPE_OK)
        e = entry_pack_named(j->id, j->schema, j->name, NULL, 0, &p);
    if (e == TROUPE_OK) {
        size_t len;
        const void *d = troupe_pack_data(&p, &len);
        e = write_meta(t, j->name, d, len, false, 0);
    }
    troupe_pack_fini(&p);
    tentry *en = NULL;
    if (e == TROUPE_OK) {
        en = troupe_calloc(1, sizeof(*en));
        if (en == NULL || (en->name = troupe_strdup(j->name)) == NULL)
            e = TROUPE_ENOMEM;
    }
    if (e == TROUPE_OK) {
        en->id = j->id;
        en->schema = troupe__tschema_retain(j->schema);
        e = entry_start(t, en);
        if (e != TROUPE_OK)
            write_meta(t, j->name, NULL, 0, false, 0);
    }
    if (e != TROUPE_OK) {
        entry_free(en);
        drop_families(t, j->id, j->schema);
    }
    return e;
}

static void
wake_stop(troupe_runtime *rt, troupe_addr a, void *arg)
{
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

static void
wake_quiesced(void *arg)
{
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

static troupe_err
do_drop(ddl_job *j)
{
    troupe_tables *t = j->t;
    tentry *en = NULL;
    pthread_mutex_lock(&t->mu);
    for (tentry **pp = &t->entries; *pp != NULL; pp = &(*pp)->next)
        if (strcmp((*pp)->name, j->name) == 0) {
            en = *pp;
            *pp = en->next;
            break;
        }
    pthread_mutex_unlock(&t->mu);
    if (en == NULL)
        return TROUPE_ENOENT;
    /* The actor must be gone before its families are: a write racing the
     * drop could be lost half-way (storage.h). */
    troupe__waiter q, w;
    troupe__waiter_init(&q, 1);
    troupe__table_quiesce(t->rt, en->addr, wake_quiesced, &q);
    troupe__waiter_finish(&q, TROUPE_OK, NULL);
    troupe_actor_stop(t->rt, en->iaddr, NULL, NULL);
    troupe__waiter_init(&w, 1);
    if (troupe_actor_stop(t->rt, en->addr, wake_stop, &w) != TROUPE_OK)
        troupe__waiter_release(&w, TROUPE_OK, NULL);
    troupe__waiter_finish(&w, TROUPE_OK, NULL);
    troupe_err e = write_meta(t, en->name, NULL, 0, false, en->id);
    if (e == TROUPE_OK) {
        drop_families(t, en->id, en->schema);
        drop_x_families(t, en->dropped, en->ndropped);
    }
    entry_free(en);
    return e;
}

static void
ddl_work(void *arg)
{
    ddl_job *j = arg;
    pthread_mutex_lock(&j->t->ddl);
    j->err = j->drop ? do_drop(j) : do_create(j);
    pthread_mutex_unlock(&j->t->ddl);
}

static void
ddl_end(ddl_job *j)
{
    troupe_tables *t = j->t;
    troupe__tschema_release(j->schema);
    troupe_free(j);
    ddl_dec(t);
}

static void
ddl_done(void *arg, troupe_runtime *rt)
{
    ddl_job *j = arg;
    troupe_tables_cb cb = j->cb;
    troupe_tables *t = j->t;
    void *cb_arg = j->arg;
    troupe_err e = j->err;
    cb(t, e, cb_arg);
    ddl_end(j);
}

/* Validates, reserves ids and builds the job; the caller runs it. */
static troupe_err
ddl_job_new(troupe_tables *t, const char *name, bool drop,
            const troupe_index_spec *idx, size_t n_idx, ddl_job **out)
{
    size_t len;
    if (t == NULL || !troupe_catalog_name_valid(name, &len) ||
        n_idx > TROUPE_TABLE_INDEX_MAX || (idx == NULL && n_idx > 0))
        return TROUPE_EINVAL;
    for (size_t i = 0; i < n_idx; i++) {
        for (size_t k = 0; k < i; k++)
            if (idx[i].name != NULL && idx[k].name != NULL &&
                strcmp(idx[i].name, idx[k].name) == 0)
                return TROUPE_EINVAL;
        /* a function index must name a registered function: refused
         * here, not on every write */
        if (idx[i].fn_name != NULL &&
            !troupe_index_fn_registered(t->fns, idx[i].fn_name))
            return TROUPE_EINVAL;
    }
    ddl_job *j = troupe_calloc(1, sizeof(*j) + len + 1);
    tschema *s = drop ? NULL : schema_new(n_idx);
    if (j == NULL || (!drop && s == NULL)) {
        troupe_free(j);
        troupe__tschema_release(s);
        return TROUPE_ENOMEM;
    }
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == RUNNING ? TROUPE_OK : TROUPE_ESTATE;
    uint64_t base = t->seq;
    if (e == TROUPE_OK) {
        if (!drop)
            t->seq += 1 + n_idx;
        t->ddl_jobs++;
    }
    pthread_mutex_unlock(&t->mu);
    j->t = t;
    j->drop = drop;
    j->schema = s;
    j->id = base + 1;
    memcpy(j->name, name, len + 1);
    for (size_t i = 0; e == TROUPE_OK && i < n_idx; i++) {
        e = troupe_index_def_create(&idx[i], base + 2 + i, &s->defs[i]);
        if (e == TROUPE_OK)
            s->n++;
    }
    if (e != TROUPE_OK) {
        if (e != TROUPE_ESTATE)
            ddl_end(j);
        else {
            troupe__tschema_release(s);
            troupe_free(j);
        }
        return e;
    }
    *out = j;
    return TROUPE_OK;
}

static troupe_err
ddl_async(ddl_job *j, troupe_tables_cb cb, void *arg)
{
    j->cb = cb;
    j->arg = arg;
    troupe_err e = ddl_submit(j->t, ddl_work, ddl_done, j);
    if (e != TROUPE_OK)
        ddl_end(j);
    return e;
}

static troupe_err
ddl_sync(ddl_job *j)
{
    ddl_work(j);
    troupe_err e = j->err;
    ddl_end(j);
    return e;
}

troupe_err
troupe_tables_create(troupe_tables *t, const char *name,
                     const troupe_index_spec *idx, size_t n_idx,
                     troupe_tables_cb cb, void *arg)
{
    ddl_job *j = NULL;
    if (cb == NULL)
        return TROUPE_EINVAL;
    troupe_err e = ddl_job_new(t, name, false, idx, n_idx, &j);
    return e != TROUPE_OK ? e : ddl_async(j, cb, arg);
}

troupe_err
troupe_tables_create_wait(troupe_tables *t, const char *name,
                          const troupe_index_spec *idx, size_t n_idx)
{
    ddl_job *j = NULL;
    troupe_err e = ddl_job_new(t, name, false, idx, n_idx, &j);
    return e != TROUPE_OK ? e : ddl_sync(j);
}

troupe_err
troupe_tables_drop(troupe_tables *t, const char *name, troupe_tables_cb cb,
                   void *arg)
{
    ddl_job *j = NULL;
    if (cb == NULL)
        return TROUPE_EINVAL;
    troupe_err e = ddl_job_new(t, name, true, NULL, 0, &j);
    return e != TROUPE_OK ? e : ddl_async(j, cb, arg);
}

troupe_err
troupe_tables_drop_wait(troupe_tables *t, const char *name)
{
    ddl_job *j = NULL;
    troupe_err e = ddl_job_new(t, name, true, NULL, 0, &j);
    return e != TROUPE_OK ? e : ddl_sync(j);
}

/* ---- online index builds ----------------------------------------------- */

/* A copy of s (defs copied through their catalog form) plus `extra` (may
 * be NULL), leaving out index `drop_id` (0: none), with index `ready_id`
 * marked ready. The x families are looked up again by entry_start or set
 * by the caller. */
static troupe_err
schema_clone(troupe_db *db, const tschema *s, troupe_index_def *extra,
             uint64_t drop_id, uint64_t ready_id, tschema **out)
{
    tschema *c = schema_new(s->n + 1);
    if (c == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < s->n; i++) {
        uint64_t id = troupe_index_def_id(s->defs[i]);
        if (id == drop_id)
            continue;
        void *d = NULL;
        size_t dl = 0;
        e = troupe_index_def_pack(s->defs[i], &d, &dl);
        if (e == TROUPE_OK)
            e = troupe_index_def_unpack(d, dl, &c->defs[c->n]);
        troupe_free(d);
        if (e != TROUPE_OK)
            break;
        if (id == ready_id)
            troupe_index_def_set_ready(c->defs[c->n], true);
        c->xcf[c->n++] = s->xcf[i];
    }
    if (e == TROUPE_OK && extra != NULL) {
        char buf[32];
        troupe__cf_name('x', troupe_index_def_id(extra), buf, sizeof(buf));
        e = troupe_db_cf(db, buf, &c->xcf[c->n]);
        if (e == TROUPE_OK)
            c->defs[c->n++] = extra;
    }
    if (e != TROUPE_OK) {
        troupe__tschema_release(c);
        return e;
    }
    *out = c;
    return TROUPE_OK;
}

static tentry *
entry_find(troupe_tables *t, const char *name)
{
    for (tentry *en = t->entries; en != NULL; en = en->next)
        if (strcmp(en->name, name) == 0)
            return en;
    return NULL;
}

/* Whether a build or sweep of en is running or pending (then another
 * index change is EBUSY). Called with mu held. */
static bool
entry_busy(const tentry *en)
{
    if (en->ndropped > 0)
        return true;
    for (size_t i = 0; i < en->schema->n; i++)
        if (!troupe_index_def_ready(en->schema->defs[i]))
            return true;
    return false;
}

/* Writes en's catalog entry with schema s and dropped list (copied), and
 * clears the table's build position in the same batch; then makes s
 * current (also for the actor, with build b to run). Called with ddl
 * held. */
static troupe_err
entry_update(troupe_tables *t, tentry *en, tschema *s, const uint64_t *dropped,
             size_t nd, tbuild *b)
{
    uint64_t *dc = NULL;
    if (nd > 0 && (dc = troupe_malloc(nd * sizeof(*dc))) == NULL)
        return TROUPE_ENOMEM;
    if (nd > 0)
        memcpy(dc, dropped, nd * sizeof(*dc));
    troupe_packer p;
    troupe_err e = entry_pack_named(en->id, s, en->name, dropped, nd, &p);
    if (e == TROUPE_OK) {
        size_t len;
        const void *d = troupe_pack_data(&p, &len);
        e = write_meta(t, en->name, d, len, false, en->id);
    }
    troupe_pack_fini(&p);
    if (e != TROUPE_OK) {
        troupe_free(dc);
        return e;
    }
    /* Queries see the new index list (and states) through a new index
     * actor; if none can be spawned the old one keeps answering. */
    troupe_addr ia;
    bool respawned = index_actor_spawn(t, en->id, s, &ia) == TROUPE_OK;
    pthread_mutex_lock(&t->mu);
    tschema *old = en->schema;
    en->schema = troupe__tschema_retain(s);
    troupe_free(en->dropped);
    en->dropped = dc;
    en->ndropped = nd;
    troupe_addr old_ia = en->iaddr;
    if (respawned)
        en->iaddr = ia;
    pthread_mutex_unlock(&t->mu);
    troupe__tschema_release(old);
    if (respawned)
        troupe_actor_stop(t->rt, old_ia, NULL, NULL);
    troupe__table_switch(t->rt, en->addr, troupe__tschema_retain(s), b);
    return TROUPE_OK;
}

static void
build_free(tbuild *b)
{
    troupe_free(b->table);
    troupe_free(b);
}

/*
 * Records a build's outcome. OK: the index (if any) becomes ready and the
 * families of the dropped indexes go, their manifest keys being swept.
 * ECLOSED (the actor stopped): nothing changes, so the next open resumes
 * from the saved position. Any other error (a duplicate in a unique index,
 * a corrupt row): the index being built is removed as well, and the
 * dropped families go anyway (the manifests of rows not reached yet keep
 * naming them; writes skip such keys and drop them, as ids are never
 * reused).
 */
static void
finalize_work(void *arg)
{
    tbuild *b = arg;
    troupe_tables *t = b->t;
    pthread_mutex_lock(&t->ddl);
    pthread_mutex_lock(&t->mu);
    tentry *en = entry_find(t, b->table);
    uint64_t *gone = NULL;
    size_t ngone = 0;
    if (en != NULL && en->ndropped > 0 &&
        (gone = troupe_malloc((en->ndropped + 1) * sizeof(*gone))) != NULL) {
        memcpy(gone, en->dropped, en->ndropped * sizeof(*gone));
        ngone = en->ndropped;
    }
    bool nomem = en != NULL && en->ndropped > 0 && gone == NULL;
    pthread_mutex_unlock(&t->mu);
    if (en == NULL) {
        if (b->err == TROUPE_OK)
            b->err = TROUPE_ENOENT; /* dropped meanwhile */
    } else if (nomem) {
        if (b->err == TROUPE_OK)
            b->err = TROUPE_ENOMEM; /* still building: open resumes */
    } else if (b->err != TROUPE_ECLOSED) {
        bool ok = b->err == TROUPE_OK;
        tschema *s = NULL;
        troupe_err e =
            schema_clone(t->db, en->schema, NULL, ok ? 0 : b->index_id,
                         ok ? b->index_id : 0, &s);
        if (e == TROUPE_OK)
            e = entry_update(t, en, s, NULL, 0, NULL);
        troupe__tschema_release(s);
        if (e == TROUPE_OK) {
            if (!ok && b->index_id != 0) {
                if (gone == NULL)
                    gone = troupe_malloc(sizeof(*gone));
                if (gone != NULL)
                    gone[ngone++] = b->index_id;
            }
            drop_x_families(t, gone, ngone);
        }
        if (e != TROUPE_OK && ok)
            b->err = e;
    }
    troupe_free(gone);
    pthread_mutex_unlock(&t->ddl);
}

static void
finalize_done(void *arg, troupe_runtime *rt)
{
    tbuild *b = arg;
    troupe_tables *t = b->t;
    if (b->cb != NULL)
        b->cb(t, b->err, b->arg);
    build_free(b);
    ddl_dec(t);
}

void
troupe__tables_build_done(tbuild *b, troupe_err err)
{
    b->err = err;
    if (ddl_submit(b->t, finalize_work, finalize_done, b) != TROUPE_OK) {
        /* Shutting down: nothing more can be recorded; open resumes. */
        b->err = TROUPE_ECLOSED;
        finalize_done(b, b->t->rt);
    }
}

troupe_err
troupe__tables_build_save(troupe_db *db, troupe_cf *meta, uint64_t table_id,
                          uint64_t index_id, const void *after, size_t alen)
{
    troupe_key_writer w;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, index_id);
    troupe_pack_bin(&p, after, alen);
    troupe_err ke = pos_key(&w, table_id);
    /* Not synced: the reindexed rows it covers went through the WAL
     * before it, so a crash may lose the position (that part is redone)
     * but never keep it without them. */
    return meta_put(db, meta, &w, ke, &p, TROUPE_SYNC_DEFAULT);
}

troupe_err
troupe__tables_pos_parse(const void *v, size_t len, uint64_t *index_id,
                         const void **after, size_t *alen)
{
    troupe_reader r;
    uint64_t ver = 0, id = 0;
    const void *a = NULL;
    size_t n = 0;
    troupe_reader_init(&r, v, len);
    troupe_read_array_n(&r, 3);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, &id);
    troupe_read_bin(&r, TROUPE_KEY_MAX, &a, &n);
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1 || n == 0)
        return TROUPE_ECORRUPT;
    *index_id = id;
    *after = a;
    *alen = n;
    return TROUPE_OK;
}

/* The saved position of en's build of index_id, if there is one (a
 * malformed or foreign record is ignored: the build starts over). */
static void
load_position(troupe_tables *t, const tentry *en, uint64_t index_id, tbuild *b)
{
    troupe_key_writer w;
    void *v = NULL;
    size_t vlen = 0;
    troupe_err ke = pos_key(&w, en->id);
    troupe_err e = meta_get(t, &w, ke, &v, &vlen);
    if (e != TROUPE_OK)
        return;
    uint64_t id = 0;
    const void *after = NULL;
    size_t alen = 0;
    if (troupe__tables_pos_parse(v, vlen, &id, &after, &alen) == TROUPE_OK &&
        id == index_id && (b->cursor = troupe_malloc(alen)) != NULL) {
        memcpy(b->cursor, after, alen);
        b->clen = alen;
    }
    troupe_free(v);
}

static tbuild *
build_new(troupe_tables *t, const tentry *en, uint64_t index_id,
          troupe_tables_cb cb, void *arg)
{
    tbuild *b = troupe_calloc(1, sizeof(*b));
    if (b == NULL || (b->table = troupe_strdup(en->name)) == NULL) {
        troupe_free(b);
        return NULL;
    }
    b->t = t;
    b->cb = cb;
    b->arg = arg;
    b->index_id = index_id;
    b->meta = t->meta;
    b->table_id = en->id;
    return b;
}

/* At open: a build or sweep left unfinished resumes after its saved
 * position. */
static void
resume_builds(troupe_tables *t, tentry *en)
{
    bool pending = en->ndropped > 0;
    uint64_t id = 0;
    for (size_t i = 0; i < en->schema->n; i++)
        if (!troupe_index_def_ready(en->schema->defs[i])) {
            /* one at a time (EBUSY otherwise): the first is the one */
            id = troupe_index_def_id(en->schema->defs[i]);
            pending = true;
            break;
        }
    if (!pending)
        return;
    tbuild *b = build_new(t, en, id, NULL, NULL);
    if (b == NULL)
        return;
    load_position(t, en, id, b);
    pthread_mutex_lock(&t->mu);
    t->ddl_jobs++;
    pthread_mutex_unlock(&t->mu);
    troupe__table_switch(t->rt, en->addr, troupe__tschema_retain(en->schema),
                         b);
}

/* add, rebuild and drop of one index: validated at the call, run as a
 * catalog job, completed by the build (cb fires then) unless the job
 * itself fails. */
enum { IDX_ADD = 0, IDX_REBUILD, IDX_DROP };

typedef struct add_job {
    troupe_tables *t;
    troupe_tables_cb cb;
    void *arg;
    int op;
    uint64_t new_id;       /* add, rebuild: the id reserved */
    troupe_index_def *def; /* add: the new index */
    char index[256];       /* rebuild, drop: its name */
    bool existed;          /* add: the table has this index, ready */
    troupe_err err;
    char table[];
} add_job;

/* The index of en named `name`; its position in *at. Called with mu. */
static const troupe_index_def *
index_find(const tentry *en, const char *name, size_t *at)
{
    for (size_t i = 0; i < en->schema->n; i++)
        if (strcmp(troupe_index_def_name(en->schema->defs[i]), name) == 0) {
            if (at != NULL)
                *at = i;
            return en->schema->defs[i];
        }
    return NULL;
}

/* Checks a rebuild or drop of index j->index of en: *old_id is its id;
 * for a rebuild *def is its copy, building, under id j->new_id (the
 * caller's). Called with ddl held; errors: ENOENT, EBUSY, ENOMEM. */
static troupe_err
replan(troupe_tables *t, tentry *en, const add_job *j, uint64_t *old_id,
       troupe_index_def **def)
{
    pthread_mutex_lock(&t->mu);
    const troupe_index_def *d = index_find(en, j->index, NULL);
    troupe_err e = d == NULL        ? TROUPE_ENOENT
                   : entry_busy(en) ? TROUPE_EBUSY
                                    : TROUPE_OK;
    if (e == TROUPE_OK) {
        *old_id = troupe_index_def_id(d);
        if (j->op == IDX_REBUILD &&
            (e = troupe_index_def_clone(d, j->new_id, def)) == TROUPE_OK)
            troupe_index_def_set_ready(*def, false);
    }
    pthread_mutex_unlock(&t->mu);
    return e;
}

static void
add_work(void *arg)
{
    add_job *j = arg;
    troupe_tables *t = j->t;
    pthread_mutex_lock(&t->ddl);
    pthread_mutex_lock(&t->mu);
    tentry *en = entry_find(t, j->table);
    troupe_err e = en == NULL ? TROUPE_ENOENT : TROUPE_OK;
    const troupe_index_def *have =
        e == TROUPE_OK && j->op == IDX_ADD
            ? index_find(en, troupe_index_def_name(j->def), NULL)
            : NULL;
    if (have != NULL) {
        /* the same index again: done once it is built; another spec
         * under that name: EEXIST */
        bool same = troupe_index_def_same(have, j->def);
        j->existed = same && troupe_index_def_ready(have);
        e = !same ? TROUPE_EEXIST : j->existed ? TROUPE_OK : TROUPE_EBUSY;
    } else if (e == TROUPE_OK && j->op == IDX_ADD) {
        if (entry_busy(en))
            e = TROUPE_EBUSY;
        else if (en->schema->n >= TROUPE_TABLE_INDEX_MAX)
            e = TROUPE_EINVAL;
    }
    pthread_mutex_unlock(&t->mu);
    if (j->existed) {
        pthread_mutex_unlock(&t->ddl);
        j->err = TROUPE_OK; /* nothing written */
        return;
    }
    char buf[32];
    troupe__cf_name('x', j->new_id, buf, sizeof(buf));
    uint64_t old_id = 0;
    if (e == TROUPE_OK && j->op == IDX_REBUILD)
        e = replan(t, en, j, &old_id, &j->def);
    else if (e == TROUPE_OK && j->op == IDX_DROP)
        e = replan(t, en, j, &old_id, NULL);
    bool fam = false;
    if (e == TROUPE_OK && j->op != IDX_DROP) {
        e = write_meta(t, NULL, NULL, 0, true, 0); /* the counter first */
        if (e == TROUPE_OK)
            e = troupe_db_cf_create(t->db, buf, NULL);
        fam = e == TROUPE_OK;
    }
    /* Not busy, so nothing was pending: the dropped list is just the
     * index replaced or removed. en->schema changes only under ddl. */
    tschema *s = NULL;
    if (e == TROUPE_OK) {
        if (j->op == IDX_ADD)
            troupe_index_def_set_ready(j->def, false);
        e = schema_clone(t->db, en->schema, j->def, old_id, 0, &s);
        if (e == TROUPE_OK)
            j->def = NULL; /* s owns it */
    }
    tbuild *b = NULL;
    if (e == TROUPE_OK &&
        (b = build_new(t, en, j->op == IDX_DROP ? 0 : j->new_id, j->cb,
                       j->arg)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        /* The job's count moves to the build: finalize_done drops it. */
        pthread_mutex_lock(&t->mu);
        t->ddl_jobs++;
        pthread_mutex_unlock(&t->mu);
        e = entry_update(t, en, s, &old_id, old_id != 0 ? 1 : 0, b);
        if (e != TROUPE_OK) {
            pthread_mutex_lock(&t->mu);
            t->ddl_jobs--;
            pthread_mutex_unlock(&t->mu);
            build_free(b);
        }
    }
    if (e != TROUPE_OK && fam)
        troupe_db_cf_drop(t->db, buf);
    troupe__tschema_release(s);
    pthread_mutex_unlock(&t->ddl);
    j->err = e;
}

static void
add_end(add_job *j)
{
    troupe_tables *t = j->t;
    troupe_index_def_destroy(j->def);
    troupe_free(j);
    ddl_dec(t);
}

static void
add_done(void *arg, troupe_runtime *rt)
{
    add_job *j = arg;
    troupe_tables *t = j->t;
    troupe_tables_cb cb = j->cb;
    void *cb_arg = j->arg;
    troupe_err e = j->err;
    if (e != TROUPE_OK || j->existed) /* else the build calls back */
        cb(t, e, cb_arg);
    add_end(j);
}

/* Validates and starts add (spec), rebuild or drop (index) of `table`. */
static troupe_err
index_change(troupe_tables *t, int op, const char *table,
             const troupe_index_spec *spec, const char *index,
             troupe_tables_cb cb, void *arg)
{
    size_t len, ilen = 0;
    if (t == NULL || cb == NULL || !troupe_catalog_name_valid(table, &len))
        return TROUPE_EINVAL;
    if (op == IDX_ADD &&
        (spec == NULL || (spec->fn_name != NULL &&
                          !troupe_index_fn_registered(t->fns, spec->fn_name))))
        return TROUPE_EINVAL;
    if (op != IDX_ADD &&
        (index == NULL || (ilen = strnlen(index, 256)) == 0 || ilen > 255))
        return TROUPE_EINVAL;
    add_job *j = troupe_calloc(1, sizeof(*j) + len + 1);
    if (j == NULL)
        return TROUPE_ENOMEM;
    memcpy(j->table, table, len + 1);
    if (op != IDX_ADD)
        memcpy(j->index, index, ilen + 1);
    j->t = t;
    j->cb = cb;
    j->arg = arg;
    j->op = op;
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == RUNNING ? TROUPE_OK : TROUPE_ESTATE;
    if (e == TROUPE_OK && op != IDX_ADD) {
        /* Checked again by the job: a change queued before it may
         * still alter the answer. */
        tentry *en = entry_find(t, table);
        e = en == NULL                            ? TROUPE_ENOENT
            : index_find(en, index, NULL) == NULL ? TROUPE_ENOENT
            : entry_busy(en)                      ? TROUPE_EBUSY
                                                  : TROUPE_OK;
    }
    if (e == TROUPE_OK) {
        if (op != IDX_DROP)
            j->new_id = ++t->seq;
        t->ddl_jobs++;
    }
    pthread_mutex_unlock(&t->mu);
    if (e != TROUPE_OK) {
        troupe_free(j);
        return e;
    }
    if (op == IDX_ADD)
        e = troupe_index_def_create(spec, j->new_id, &j->def);
    if (e == TROUPE_OK)
        e = ddl_submit(t, add_work, add_done, j);
    if (e != TROUPE_OK)
        add_end(j);
    return e;
}

troupe_err
troupe_tables_add_index(troupe_tables *t, const char *table,
                        const troupe_index_spec *spec, troupe_tables_cb cb,
                        void *arg)
{
    return index_change(t, IDX_ADD, table, spec, NULL, cb, arg);
}

troupe_err
troupe_tables_rebuild_index(troupe_tables *t, const char *table,
                            const char *index, troupe_tables_cb cb, void *arg)
{
    return index_change(t, IDX_REBUILD, table, NULL, index, cb, arg);
}

troupe_err
troupe_tables_drop_index(troupe_tables *t, const char *table, const char *index,
                         troupe_tables_cb cb, void *arg)
{
    return index_change(t, IDX_DROP, table, NULL, index, cb, arg);
}

static void
wake_ddl(troupe_tables *t, troupe_err err, void *arg)
{
    troupe__waiter_release(arg, err, NULL);
}

static troupe_err
index_change_wait(troupe_tables *t, int op, const char *table,
                  const troupe_index_spec *spec, const char *index)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, index_change(t, op, table, spec, index, wake_ddl, &w), NULL);
}

troupe_err
troupe_tables_add_index_wait(troupe_tables *t, const char *table,
                             const troupe_index_spec *spec)
{
    return index_change_wait(t, IDX_ADD, table, spec, NULL);
}

troupe_err
troupe_tables_rebuild_index_wait(troupe_tables *t, const char *table,
                                 const char *index)
{
    return index_change_wait(t, IDX_REBUILD, table, NULL, index);
}

troupe_err
troupe_tables_drop_index_wait(troupe_tables *t, const char *table,
                              const char *index)
{
    return index_change_wait(t, IDX_DROP, table, NULL, index);
}

troupe_err
troupe_tables_index_state(troupe_tables *t, const char *table,
                          const char *index, bool *ready)
{
    size_t len;
    if (t == NULL || index == NULL || ready == NULL ||
        !troupe_catalog_name_valid(table, &len))
        return TROUPE_EINVAL;
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == RUNNING ? TROUPE_ENOENT : TROUPE_ESTATE;
    tentry *en = e == TROUPE_ENOENT ? entry_find(t, table) : NULL;
    for (size_t i = 0; en != NULL && i < en->schema->n; i++)
        if (strcmp(troupe_index_def_name(en->schema->defs[i]), index) == 0) {
            *ready = troupe_index_def_ready(en->schema->defs[i]);
            e = TROUPE_OK;
        }
    pthread_mutex_unlock(&t->mu);
    return e;
}
