/*
 * Online index builds, both halves. The catalog's (any thread, under the
 * catalog's locks): an entry update that starts a build or sweep with the
 * new index list, the outcome recorded once the walk ends (finalize), the
 * walk's saved position ("build", table id) in meta, and the builds an
 * open resumes. The actor's (its thread; tstate.build while it runs one):
 * the schema switch, and the walk over the table's keys.
 *
 * A build lists the table's keys in batches of BUILD_BATCH (a scan on a
 * worker) and queues one reindex op per key behind that key's lock, so it
 * reads what the writes before it committed and writes after it see its
 * entries. It starts only once no write prepared with an older schema is
 * still running: every write that starts after the switch maintains the
 * new index itself, and every row committed before is listed by a later
 * scan step (the scan moves forward by key, one step after the other).
 *
 * Progress: the actor counts the rows of each completed step against
 * RocksDB's estimate of the table's keys taken at the start (no scan to
 * count them: the estimate is free, and a count would cost as much as the
 * build), raises the estimate when the count passes it, and sets it to
 * the count at a successful end. It logs a line at the start, at each
 * tenth of the estimate or every BUILD_LOG_NS, and at the end; an ask
 * (TABLE_PROGRESS) reads the figures of the build running, or else of
 * the last one.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

troupe_err
troupe__tables_entry_update(troupe_tables *t, tentry *en, tschema *s,
                            const uint64_t *dropped, size_t nd, tbuild *b)
{
    uint64_t *dc = NULL;
    if (nd > 0 && (dc = troupe_malloc(nd * sizeof(*dc))) == NULL)
        return TROUPE_ENOMEM;
    if (nd > 0)
        memcpy(dc, dropped, nd * sizeof(*dc));
    troupe_packer p;
    troupe_err e =
        troupe__tables_entry_pack_named(en->id, s, en->name, dropped, nd, &p);
    if (e == TROUPE_OK) {
        size_t len;
        const void *d = troupe_pack_data(&p, &len);
        e = troupe__tables_write_meta(t, en->name, d, len, false, en->id);
    }
    troupe_pack_fini(&p);
    if (e != TROUPE_OK) {
        troupe_free(dc);
        return e;
    }
    /* Queries see the new index list (and states) through a new index
     * actor; if none can be spawned the old one keeps answering. */
    troupe_addr ia;
    bool respawned =
        troupe__tschema_spawn_index(t, en->id, s, &ia) == TROUPE_OK;
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

void
troupe__tables_build_free(tbuild *b)
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
static troupe__ddl_step
finalize_step(troupe__ddl *d)
{
    tbuild *b = (tbuild *)d;
    troupe_tables *t = b->t;
    pthread_mutex_lock(&t->mu);
    tentry *en = troupe__tables_entry_find(t, b->table);
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
            b->err = TROUPE_ENOTABLE; /* dropped meanwhile */
    } else if (nomem) {
        if (b->err == TROUPE_OK)
            b->err = TROUPE_ENOMEM; /* still building: open resumes */
    } else if (b->err != TROUPE_ECLOSED) {
        bool ok = b->err == TROUPE_OK;
        tschema *s = NULL;
        troupe_err e =
            troupe__tschema_clone(t->db, en->schema, NULL, ok ? 0 : b->index_id,
                                  ok ? b->index_id : 0, &s);
        if (e == TROUPE_OK)
            e = troupe__tables_entry_update(t, en, s, NULL, 0, NULL);
        troupe__tschema_release(s);
        if (e == TROUPE_OK) {
            if (!ok && b->index_id != 0) {
                if (gone == NULL)
                    gone = troupe_malloc(sizeof(*gone));
                if (gone != NULL)
                    gone[ngone++] = b->index_id;
            }
            troupe__tables_drop_x_families(t, gone, ngone);
        }
        if (e != TROUPE_OK && ok)
            b->err = e;
    }
    troupe_free(gone);
    return TROUPE__DDL_DONE;
}

static void
finalize_callback(void *arg, troupe_runtime *rt)
{
    tbuild *b = arg;
    troupe_tables *t = b->t;
    if (b->cb != NULL)
        b->cb(t, b->err, b->arg);
    troupe__tables_build_free(b);
    troupe__tables_ddl_dec(t);
}

static void
finalize_done(troupe__ddl *d)
{
    troupe__post_or_run(((tbuild *)d)->t->rt, finalize_callback, d);
}

void
troupe__tables_build_done(tbuild *b, troupe_err err)
{
    b->err = err;
    b->ddl.cat = b->t->cat;
    b->ddl.step = finalize_step;
    b->ddl.done = finalize_done;
    if (troupe__ddl_submit(&b->ddl) != TROUPE_OK) {
        /* The catalog is stopping: nothing more can be recorded; open
         * resumes. */
        b->err = TROUPE_ECLOSED;
        finalize_callback(b, b->t->rt);
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
    troupe_err ke = troupe__tables_pos_key(&w, table_id);
    const uint8_t *k;
    size_t klen, vlen;
    const void *v = troupe_pack_data(&p, &vlen);
    troupe_batch *b = NULL;
    troupe_err e = p.err != TROUPE_OK ? p.err : ke;
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &klen);
    if (e == TROUPE_OK)
        e = troupe_batch_create(&b);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, meta, k, klen, v, vlen);
    /* Not synced: the reindexed rows it covers went through the WAL
     * before it, so a crash may lose the position (that part is redone)
     * but never keep it without them. */
    if (e == TROUPE_OK)
        e = troupe_db_write(db, b, TROUPE_SYNC_DEFAULT);
    troupe_batch_destroy(b);
    troupe_key_writer_fini(&w);
    troupe_pack_fini(&p);
    return e;
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
    troupe_err ke = troupe__tables_pos_key(&w, en->id);
    troupe_err e = troupe__meta_get(t->cat, &w, ke, &v, &vlen);
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

tbuild *
troupe__tables_build_new(troupe_tables *t, const tentry *en, uint64_t index_id,
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

void
troupe__tables_resume_builds(troupe_tables *t, tentry *en)
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
    tbuild *b = troupe__tables_build_new(t, en, id, NULL, NULL);
    if (b == NULL)
        return;
    load_position(t, en, id, b);
    pthread_mutex_lock(&t->mu);
    t->ddl_jobs++;
    pthread_mutex_unlock(&t->mu);
    troupe__table_switch(t->rt, en->addr, troupe__tschema_retain(en->schema),
                         b);
}

/* ---- the actor's half ------------------------------------------------- */

/* Rows an index build reindexes per step. */
#define BUILD_BATCH 64
/* Most time between two progress lines of a build. */
#define BUILD_LOG_NS (30ull * 1000000000u)

static uint64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The name of index `id` in the actor's schema ("?" when not there: a
 * sweep's dropped index). */
static const char *
index_name(const tstate *s, uint64_t id)
{
    for (size_t i = 0; s->cfg.schema != NULL && i < s->cfg.schema->n; i++)
        if (troupe_index_def_id(s->cfg.schema->defs[i]) == id)
            return troupe_index_def_name(s->cfg.schema->defs[i]);
    return "?";
}

/* One info line about the build b (what: "started", "progress", "done",
 * "failed"). */
static void
build_log(troupe_actor *self, const tstate *s, const tbuild *b,
          const char *what)
{
    const troupe_logger *lg = troupe_runtime_logger(troupe_actor_runtime(self));
    troupe_log_level lv =
        s->bfig.err == TROUPE_OK ? TROUPE_LOG_INFO : TROUPE_LOG_WARN;
    if (!troupe_log_enabled(lg, lv))
        return;
    const tbuild_fig *f = &s->bfig;
    uint64_t end = f->end_ns ? f->end_ns : mono_ns();
    char done[24], total[24], secs[32];
    snprintf(done, sizeof(done), "%llu", (unsigned long long)f->done);
    snprintf(total, sizeof(total), "%llu", (unsigned long long)f->total);
    snprintf(secs, sizeof(secs), "%.3f", (double)(end - f->t0_ns) / 1e9);
    troupe_log_field fl[] = {
        {"table", b->table},
        {"index", b->index_id ? index_name(s, b->index_id) : NULL},
        {"rows", done},
        {"total", total},
        {"seconds", secs},
        {"err", f->err != TROUPE_OK ? troupe_err_name(f->err) : NULL}};
    troupe_log_fields(lg, lv, "table", fl, sizeof(fl) / sizeof(fl[0]), "%s %s",
                      b->index_id ? "index build" : "index sweep", what);
}

/* A step's rows are all reindexed: count them, and log when a tenth of
 * the estimate more is done or BUILD_LOG_NS passed. */
static void
build_count(troupe_actor *self, tstate *s, const tbuild *b)
{
    tbuild_fig *f = &s->bfig;
    if (f->inflight == 0)
        return;
    f->done += f->inflight;
    f->inflight = 0;
    if (f->total < f->done)
        f->total = f->done;
    uint64_t now = mono_ns();
    uint64_t tenths = f->total ? f->done * 10 / f->total : 0;
    if (tenths > f->logged_tenths || now - f->logged_ns >= BUILD_LOG_NS) {
        f->logged_tenths = tenths;
        f->logged_ns = now;
        build_log(self, s, b, "progress");
    }
}

/* The build starts walking the table. */
static void
build_begin(troupe_actor *self, tstate *s, const tbuild *b)
{
    troupe_cf_stats cs = {0};
    (void)troupe_db_cf_stats(s->cfg.db, s->cfg.cf_t, &cs); /* 0 if unknown */
    uint64_t now = mono_ns();
    s->bfig = (tbuild_fig){.index_id = b->index_id,
                           .total = cs.keys,
                           .t0_ns = now,
                           .logged_ns = now,
                           .running = true};
    build_log(self, s, b, "started");
}

typedef struct kjob {
    troupe_db *db;
    troupe_cf *cf_t;
    troupe_cf *meta; /* the build's, copied: the build may end first */
    uint64_t table_id, index_id;
    unsigned char *after;
    size_t alen;
    troupe_err err;
    troupe_page *page;
} kjob;

static void
kjob_free(void *arg)
{
    kjob *j = arg;
    troupe_page_destroy(j->page);
    troupe_free(j->after);
    troupe_free(j);
}

static void
keys_work(void *arg)
{
    kjob *j = arg;
    j->err = TROUPE_OK;
    if (j->meta != NULL && j->alen > 0)
        j->err = troupe__tables_build_save(j->db, j->meta, j->table_id,
                                           j->index_id, j->after, j->alen);
    if (j->err == TROUPE_OK)
        j->err = troupe_db_scan(j->db, j->cf_t, NULL, NULL, j->after, j->alen,
                                BUILD_BATCH, false, &j->page);
}

static void
build_finish(troupe_actor *self, tstate *s, troupe_err err)
{
    tbuild *b = s->build;
    s->build = NULL;
    if (s->bfig.running) {
        tbuild_fig *f = &s->bfig;
        f->done += err == TROUPE_OK ? f->inflight : 0;
        f->inflight = 0;
        f->running = false;
        f->end_ns = mono_ns();
        f->err = err;
        if (err == TROUPE_OK)
            f->total = f->done;
        build_log(self, s, b, err == TROUPE_OK ? "done" : "failed");
    }
    troupe_free(b->cursor);
    b->cursor = NULL;
    troupe__tables_build_done(b, err);
}

void
troupe__build_step(troupe_actor *self, tstate *s)
{
    tbuild *b = s->build;
    if (b == NULL || b->scanning || b->outstanding > 0)
        return;
    if (!b->started) {
        if (s->writes.old_running > 0)
            return; /* writes of an older schema still running */
        b->started = true;
        build_begin(self, s, b);
    }
    if (b->err != TROUPE_OK) {
        build_finish(self, s, b->err);
        return;
    }
    build_count(self, s, b);
    kjob *j = troupe_calloc(1, sizeof(*j));
    if (j != NULL && b->clen > 0 && (j->after = troupe_malloc(b->clen)))
        memcpy(j->after, b->cursor, j->alen = b->clen);
    if (j == NULL || (b->clen > 0 && j->after == NULL)) {
        troupe_free(j);
        build_finish(self, s, TROUPE_ENOMEM);
        return;
    }
    j->db = s->cfg.db;
    j->cf_t = s->cfg.cf_t;
    j->meta = b->meta;
    j->table_id = b->table_id;
    j->index_id = b->index_id;
    troupe_err e =
        troupe_work_submit(self, keys_work, j, TABLE_BUILD_KEYS, kjob_free);
    if (e != TROUPE_OK) {
        kjob_free(j);
        build_finish(self, s, e);
        return;
    }
    b->scanning = true;
}

static void
build_op_done(troupe_actor *self, tstate *s, troupe_err err)
{
    tbuild *b = s->build;
    if (b == NULL)
        return;
    if (err != TROUPE_OK && b->err == TROUPE_OK)
        b->err = err;
    if (--b->outstanding == 0)
        troupe__build_step(self, s);
}

/* A reindex op ended (its wop.done). */
static void
build_op_release(troupe_actor *self, tstate *s, wop *op)
{
    build_op_done(self, s, op->err);
}

troupe_err
troupe__build_h_keys(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    kjob *j = m->ptr;
    tbuild *b = s->build;
    if (j == NULL)
        return troupe__table_no_payload(self, m);
    if (b == NULL) {
        kjob_free(j);
        return TROUPE_OK;
    }
    b->scanning = false;
    if (b->err != TROUPE_OK || j->err != TROUPE_OK || j->page->n == 0) {
        troupe_err e = b->err != TROUPE_OK ? b->err : j->err;
        kjob_free(j);
        build_finish(self, s, e);
        return TROUPE_OK;
    }
    const troupe_page *pg = j->page;
    unsigned char *c = troupe_realloc(b->cursor, pg->cursor_len);
    if (c == NULL) {
        kjob_free(j);
        build_finish(self, s, TROUPE_ENOMEM);
        return TROUPE_OK;
    }
    memcpy(c, pg->cursor, pg->cursor_len);
    b->cursor = c;
    b->clen = pg->cursor_len;
    /* Count them all first: an op may finish inside enqueue. */
    b->outstanding = pg->n + 1;
    s->bfig.inflight = pg->n;
    for (size_t i = 0; i < pg->n; i++) {
        wop *op = troupe__wop_new(self, s, TABLE_REINDEX, pg->items[i].key,
                                  pg->items[i].key_len, NULL, 0, 0, false);
        troupe_err e = TROUPE_ENOMEM;
        if (op != NULL) {
            op->build = true;
            op->done = build_op_release;
            e = troupe__write_enqueue(self, s, op);
        }
        if (e != TROUPE_OK)
            build_op_done(self, s, e);
    }
    kjob_free(j);
    build_op_done(self, s, TROUPE_OK);
    return TROUPE_OK;
}

troupe_err
troupe__build_h_switch(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tswitch *sw = m->ptr;
    if (sw == NULL)
        return troupe__table_no_payload(self, m);
    troupe__tschema_release(s->cfg.schema);
    s->cfg.schema = sw->schema;
    s->writes.gen++;
    s->writes.old_running = s->writes.nrunning;
    if (sw->build != NULL) {
        if (s->build != NULL) /* one at a time: the catalog ensures it */
            troupe__tables_build_done(sw->build, TROUPE_EBUSY);
        else
            s->build = sw->build;
    }
    troupe_free(sw);
    troupe__build_step(self, s);
    return TROUPE_OK;
}

void
troupe__table_switch(troupe_runtime *rt, troupe_addr a, tschema *schema,
                     tbuild *build)
{
    tswitch *sw = troupe_malloc(sizeof(*sw));
    troupe_msg *m = NULL;
    if (sw != NULL &&
        troupe_msg_create(&m, TABLE_SWITCH, NULL, 0) == TROUPE_OK) {
        sw->schema = schema;
        sw->build = build;
        m->ptr = sw;
        if (troupe_runtime_send(rt, a, &m) == TROUPE_OK)
            return;
    }
    troupe_free(sw);
    troupe__tschema_release(schema);
    if (build != NULL)
        troupe__tables_build_done(build, TROUPE_ECLOSED);
}

void
troupe__build_stop(troupe_actor *self, tstate *s)
{
    if (s->build != NULL)
        build_finish(self, s, TROUPE_ECLOSED);
}

troupe_err
troupe__build_h_progress(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    const tbuild_fig *f = &s->bfig;
    uint64_t end = f->running ? mono_ns() : f->end_ns;
    troupe_packer pk;
    troupe_pack_init(&pk);
    troupe_pack_array(&pk, 6);
    troupe_pack_uint(&pk, f->index_id);
    troupe_pack_uint(&pk, f->done);
    troupe_pack_uint(&pk, f->total);
    troupe_pack_uint(&pk, f->t0_ns ? (end - f->t0_ns) / 1000000u : 0);
    troupe_pack_bool(&pk, f->running);
    troupe_pack_int(&pk, f->err);
    troupe_body *b = NULL;
    troupe_err e = troupe_pack_take_body(&pk, &b);
    troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr, e,
                         e == TROUPE_OK ? &b : NULL);
    return TROUPE_OK;
}
