/*
 * Create and drop of tables, as catalog jobs (troupe__ddl): each runs
 * after the catalog changes submitted before it (queue changes
 * included), so each sees the catalog the previous one left. A _wait form
 * is the asynchronous one plus a waiter that the job's end releases.
 *
 * Ids come from one counter (`("seq")` in meta) and are never reused: ids
 * are reserved in memory when a create is called and the counter is
 * stored (synced) before any family named after them is created, so a
 * crash between the two leaves at worst unused ids, never a family that a
 * later create would collide with.
 *
 * Catalog changes are not actor messages: they block on RocksDB's family
 * management, which has no asynchronous form, so their steps run on the
 * worker pool. A drop waits twice (for the table actor to quiesce, then to
 * stop); each wait is a WAIT step that frees its worker, since what it
 * waits for (the actor's write preparations) needs a worker too.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"

typedef struct ddl_job {
    troupe__ddl ddl; /* first: the catalog's job */
    troupe_tables *t;
    troupe_tables_cb cb; /* NULL: a _wait form, releasing `w` */
    void *arg;
    troupe__waiter *w;
    tentry *en; /* drop: the entry, unlinked */
    bool drop;
    troupe_err quiesced; /* drop: how the actor's quiesce ended */
    bool existed;        /* create: the table was there with this very spec */
    uint64_t id;
    tschema *schema; /* create: the new indexes */
    char name[];
} ddl_job;

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

void
troupe__tables_drop_x_families(troupe_tables *t, const uint64_t *ids, size_t n)
{
    char buf[32];
    for (size_t i = 0; i < n; i++) {
        troupe__cf_name('x', ids[i], buf, sizeof(buf));
        troupe_db_cf_drop(t->db, buf);
    }
}

static troupe_err
do_create(ddl_job *j)
{
    troupe_tables *t = j->t;
    troupe_err e = TROUPE_OK;
    pthread_mutex_lock(&t->mu);
    tentry *have = troupe__tables_entry_find(t, j->name);
    /* Creating a table again with the spec it has is done already
     * (nothing written); with another spec it is EEXIST. */
    if (have != NULL) {
        j->existed = troupe__tschema_same(have->schema, j->schema);
        e = j->existed ? TROUPE_OK : TROUPE_EEXIST;
    }
    pthread_mutex_unlock(&t->mu);
    if (e != TROUPE_OK || j->existed)
        return e;
    /* The counter first: see the design note. */
    if ((e = troupe__tables_write_meta(t, NULL, NULL, 0, true, 0)) != TROUPE_OK)
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
        e = troupe__tables_entry_pack_named(j->id, j->schema, j->name, NULL, 0,
                                            &p);
    if (e == TROUPE_OK) {
        size_t len;
        const void *d = troupe_pack_data(&p, &len);
        e = troupe__tables_write_meta(t, j->name, d, len, false, 0);
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
        e = troupe__tables_entry_start(t, en);
        if (e != TROUPE_OK)
            troupe__tables_write_meta(t, j->name, NULL, 0, false, 0);
    }
    if (e != TROUPE_OK) {
        troupe__tables_entry_free(en);
        drop_families(t, j->id, j->schema);
    }
    return e;
}

static void
drop_resume(void *arg, troupe_err err)
{
    ddl_job *j = arg;
    j->quiesced = err;
    troupe__ddl_resume(&j->ddl);
}

static void
drop_stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    troupe__ddl_resume(arg);
}

/* (0) unlink the entry, quiesce the actor -> WAIT; (1) stop the index
 * actor and the table actor -> WAIT; (2) delete the entry and the build
 * position, drop the families -> DONE. The actor must be gone before its
 * families are: a write racing the drop could be lost half-way
 * (storage.h). An actor that stopped before it was idle (the runtime shut
 * down first) may still have work in flight: the drop then ends with
 * ECLOSED, writes nothing and links the entry back (the table stays). */
static troupe__ddl_step
drop_step(ddl_job *j)
{
    troupe_tables *t = j->t;
    tentry *en = j->en;
    switch (j->ddl.at++) {
    case 0:
        pthread_mutex_lock(&t->mu);
        bool held = false;
        for (tentry **pp = &t->entries; *pp != NULL; pp = &(*pp)->next)
            if (strcmp((*pp)->name, j->name) == 0) {
                /* a prepared XA transaction's batch writes into its
                 * families: resolve it first */
                held = (*pp)->xa_holds > 0;
                if (!held) {
                    en = *pp;
                    *pp = en->next;
                }
                break;
            }
        pthread_mutex_unlock(&t->mu);
        if (held) {
            j->ddl.err = TROUPE_EBUSY;
            return TROUPE__DDL_DONE;
        }
        if (en == NULL) {
            j->ddl.err = TROUPE_ENOTABLE;
            return TROUPE__DDL_DONE;
        }
        j->en = en;
        troupe__table_quiesce(t->rt, en->addr, drop_resume, j);
        return TROUPE__DDL_WAIT;
    case 1:
        if (j->quiesced != TROUPE_OK) {
            pthread_mutex_lock(&t->mu);
            en->next = t->entries;
            t->entries = en;
            pthread_mutex_unlock(&t->mu);
            j->en = NULL;
            j->ddl.err = TROUPE_ECLOSED;
            return TROUPE__DDL_DONE;
        }
        troupe_actor_stop(t->rt, en->iaddr, NULL, NULL);
        if (troupe_actor_stop(t->rt, en->addr, drop_stopped, j) != TROUPE_OK)
            return TROUPE__DDL_NEXT; /* gone already */
        return TROUPE__DDL_WAIT;
    default:
        j->ddl.err =
            troupe__tables_write_meta(t, en->name, NULL, 0, false, en->id);
        if (j->ddl.err == TROUPE_OK) {
            drop_families(t, en->id, en->schema);
            troupe__tables_drop_x_families(t, en->dropped, en->ndropped);
        }
        troupe__tables_entry_free(en);
        j->en = NULL;
        return TROUPE__DDL_DONE;
    }
}

static troupe__ddl_step
ddl_step(troupe__ddl *d)
{
    ddl_job *j = (ddl_job *)d;
    if (j->drop)
        return drop_step(j);
    j->ddl.err = do_create(j);
    return TROUPE__DDL_DONE;
}

static void
ddl_end(ddl_job *j)
{
    troupe_tables *t = j->t;
    troupe__tschema_release(j->schema);
    troupe_free(j);
    troupe__tables_ddl_dec(t);
}

static void
ddl_callback(void *arg, troupe_runtime *rt)
{
    ddl_job *j = arg;
    j->cb(j->t, j->ddl.err, j->arg);
    ddl_end(j);
}

static void
ddl_done(troupe__ddl *d)
{
    ddl_job *j = (ddl_job *)d;
    if (j->cb != NULL) {
        troupe__post_or_run(j->t->rt, ddl_callback, j);
        return;
    }
    troupe__waiter *w = j->w;
    troupe_err e = j->ddl.err;
    ddl_end(j);
    troupe__waiter_release(w, e, NULL);
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
    troupe_err we = troupe__tables_writable(t, drop ? "troupe_tables_drop"
                                                    : "troupe_tables_create");
    if (we != TROUPE_OK)
        return we;
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
    tschema *s = drop ? NULL : troupe__tschema_new(n_idx);
    if (j == NULL || (!drop && s == NULL)) {
        troupe_free(j);
        troupe__tschema_release(s);
        return TROUPE_ENOMEM;
    }
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == TABLES_RUNNING ? TROUPE_OK : TROUPE_ESTATE;
    uint64_t first = 0;
    if (e == TROUPE_OK && !drop)
        e = troupe__catalog_ids(t->cat, 1 + n_idx, &first);
    bool counted = e == TROUPE_OK;
    if (counted)
        t->ddl_jobs++;
    uint64_t base = first - 1;
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
        if (counted)
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

/* Submits j: cb(arg) fires on scheduler 0 once it ran, or (cb NULL) w
 * is released. */
static troupe_err
ddl_submit(ddl_job *j, troupe_tables_cb cb, void *arg, troupe__waiter *w)
{
    j->cb = cb;
    j->arg = arg;
    j->w = w;
    j->ddl.cat = j->t->cat;
    j->ddl.step = ddl_step;
    j->ddl.done = ddl_done;
    troupe_err e = troupe__ddl_submit(&j->ddl);
    if (e != TROUPE_OK)
        ddl_end(j);
    return e;
}

static troupe_err
ddl_sync(ddl_job *j)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, ddl_submit(j, NULL, NULL, &w), NULL);
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
    return e != TROUPE_OK ? e : ddl_submit(j, cb, arg, NULL);
}

troupe_err
troupe_tables_create_wait(troupe_tables *t, const char *name,
                          const troupe_index_spec *idx, size_t n_idx)
{
    troupe_err be = troupe__block_check("troupe_tables_create_wait");
    if (be != TROUPE_OK)
        return be;
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
    return e != TROUPE_OK ? e : ddl_submit(j, cb, arg, NULL);
}

troupe_err
troupe_tables_drop_wait(troupe_tables *t, const char *name)
{
    troupe_err be = troupe__block_check("troupe_tables_drop_wait");
    if (be != TROUPE_OK)
        return be;
    ddl_job *j = NULL;
    troupe_err e = ddl_job_new(t, name, true, NULL, 0, &j);
    if (e == TROUPE_OK && (e = ddl_sync(j)) == TROUPE_ENOTABLE)
        troupe__err_named(e, "no table", name, strlen(name));
    return e;
}
