/*
 * Add, rebuild and drop of one index, as catalog jobs (one step each, in
 * the catalog's order of changes), and an index's state.
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
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"

/* Whether a build or sweep of en is running or pending, or a prepared XA
 * transaction holds parts of it (then an index change is EBUSY). Called
 * with mu held. */
static bool
entry_busy(const tentry *en)
{
    /* a prepared XA batch lacks the entries of an index added after it,
     * and keeps those of one dropped */
    if (en->ndropped > 0 || en->xa_holds > 0)
        return true;
    for (size_t i = 0; i < en->schema->n; i++)
        if (!troupe_index_def_ready(en->schema->defs[i]))
            return true;
    return false;
}

/* add, rebuild and drop of one index: validated at the call, run as a
 * catalog job, completed by the build (cb fires then) unless the job
 * itself fails. */
enum { IDX_ADD = 0, IDX_REBUILD, IDX_DROP };

typedef struct add_job {
    troupe__ddl ddl; /* first: the catalog's job */
    troupe_tables *t;
    troupe_tables_cb cb;
    void *arg;
    int op;
    uint64_t new_id;       /* add, rebuild: the id reserved */
    troupe_index_def *def; /* add: the new index */
    char index[256];       /* rebuild, drop: its name */
    bool existed;          /* add: the table has this index, ready */
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
 * caller's). Called from the job's step; errors: ENOINDEX, EBUSY,
 * ENOMEM. */
static troupe_err
replan(troupe_tables *t, tentry *en, const add_job *j, uint64_t *old_id,
       troupe_index_def **def)
{
    pthread_mutex_lock(&t->mu);
    const troupe_index_def *d = index_find(en, j->index, NULL);
    troupe_err e = d == NULL        ? TROUPE_ENOINDEX
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

static troupe__ddl_step
add_step(troupe__ddl *d)
{
    add_job *j = (add_job *)d;
    troupe_tables *t = j->t;
    pthread_mutex_lock(&t->mu);
    tentry *en = troupe__tables_entry_find(t, j->table);
    troupe_err e = en == NULL ? TROUPE_ENOTABLE : TROUPE_OK;
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
        j->ddl.err = TROUPE_OK; /* nothing written */
        return TROUPE__DDL_DONE;
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
        e = troupe__tables_write_meta(t, NULL, NULL, 0, true,
                                      0); /* the counter first */
        if (e == TROUPE_OK)
            e = troupe_db_cf_create(t->db, buf, NULL);
        fam = e == TROUPE_OK;
    }
    /* Not busy, so nothing was pending: the dropped list is just the
     * index replaced or removed. en->schema changes only in catalog jobs,
     * and only the head job runs. */
    tschema *s = NULL;
    if (e == TROUPE_OK) {
        if (j->op == IDX_ADD)
            troupe_index_def_set_ready(j->def, false);
        e = troupe__tschema_clone(t->db, en->schema, j->def, old_id, 0, &s);
        if (e == TROUPE_OK)
            j->def = NULL; /* s owns it */
    }
    tbuild *b = NULL;
    if (e == TROUPE_OK &&
        (b = troupe__tables_build_new(t, en, j->op == IDX_DROP ? 0 : j->new_id,
                                      j->cb, j->arg)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        /* The job's count moves to the build: finalize_done drops it. */
        pthread_mutex_lock(&t->mu);
        t->ddl_jobs++;
        pthread_mutex_unlock(&t->mu);
        e = troupe__tables_entry_update(t, en, s, &old_id, old_id != 0 ? 1 : 0,
                                        b);
        if (e != TROUPE_OK) {
            pthread_mutex_lock(&t->mu);
            t->ddl_jobs--;
            pthread_mutex_unlock(&t->mu);
            troupe__tables_build_free(b);
        }
    }
    if (e != TROUPE_OK && fam)
        troupe_db_cf_drop(t->db, buf);
    troupe__tschema_release(s);
    j->ddl.err = e;
    return TROUPE__DDL_DONE;
}

static void
add_end(add_job *j)
{
    troupe_tables *t = j->t;
    troupe_index_def_destroy(j->def);
    troupe_free(j);
    troupe__tables_ddl_dec(t);
}

static void
add_callback(void *arg, troupe_runtime *rt)
{
    add_job *j = arg;
    j->cb(j->t, j->ddl.err, j->arg);
    add_end(j);
}

static void
add_done(troupe__ddl *d)
{
    add_job *j = (add_job *)d;
    if (j->ddl.err != TROUPE_OK || j->existed) /* else the build calls back */
        troupe__post_or_run(j->t->rt, add_callback, j);
    else
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
    static const char *const calls[] = {
        [IDX_ADD] = "troupe_tables_add_index",
        [IDX_REBUILD] = "troupe_tables_rebuild_index",
        [IDX_DROP] = "troupe_tables_drop_index"};
    troupe_err we = troupe__tables_writable(t, calls[op]);
    if (we != TROUPE_OK)
        return we;
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
    troupe_err e = t->state == TABLES_RUNNING ? TROUPE_OK : TROUPE_ESTATE;
    if (e == TROUPE_OK && op != IDX_ADD) {
        /* Checked again by the job: a change queued before it may
         * still alter the answer. */
        tentry *en = troupe__tables_entry_find(t, table);
        e = en == NULL                            ? TROUPE_ENOTABLE
            : index_find(en, index, NULL) == NULL ? TROUPE_ENOINDEX
            : entry_busy(en)                      ? TROUPE_EBUSY
                                                  : TROUPE_OK;
    }
    if (e == TROUPE_OK && op != IDX_DROP)
        e = troupe__catalog_ids(t->cat, 1, &j->new_id);
    if (e == TROUPE_OK)
        t->ddl_jobs++;
    pthread_mutex_unlock(&t->mu);
    if (e == TROUPE_ENOTABLE)
        troupe__err_named(e, "no table", table, strlen(table));
    else if (e == TROUPE_ENOINDEX)
        troupe__err_named(e, "the table has no index", index, strlen(index));
    if (e != TROUPE_OK) {
        troupe_free(j);
        return e;
    }
    if (op == IDX_ADD)
        e = troupe_index_def_create(spec, j->new_id, &j->def);
    j->ddl.cat = t->cat;
    j->ddl.step = add_step;
    j->ddl.done = add_done;
    if (e == TROUPE_OK)
        e = troupe__ddl_submit(&j->ddl);
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

/* The blocking twin of index_change, refused on a troupe thread (call
 * names it). */
static troupe_err
index_change_wait(const char *call, troupe_tables *t, int op, const char *table,
                  const troupe_index_spec *spec, const char *index)
{
    troupe_err be = troupe__block_check(call);
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, index_change(t, op, table, spec, index, wake_ddl, &w), NULL);
}

troupe_err
troupe_tables_add_index_wait(troupe_tables *t, const char *table,
                             const troupe_index_spec *spec)
{
    return index_change_wait("troupe_tables_add_index_wait", t, IDX_ADD, table,
                             spec, NULL);
}

troupe_err
troupe_tables_rebuild_index_wait(troupe_tables *t, const char *table,
                                 const char *index)
{
    return index_change_wait("troupe_tables_rebuild_index_wait", t, IDX_REBUILD,
                             table, NULL, index);
}

troupe_err
troupe_tables_drop_index_wait(troupe_tables *t, const char *table,
                              const char *index)
{
    return index_change_wait("troupe_tables_drop_index_wait", t, IDX_DROP,
                             table, NULL, index);
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
    troupe_err e = t->state == TABLES_RUNNING ? TROUPE_ENOTABLE : TROUPE_ESTATE;
    tentry *en =
        e == TROUPE_ENOTABLE ? troupe__tables_entry_find(t, table) : NULL;
    if (en != NULL)
        e = TROUPE_ENOINDEX;
    for (size_t i = 0; en != NULL && i < en->schema->n; i++)
        if (strcmp(troupe_index_def_name(en->schema->defs[i]), index) == 0) {
            *ready = troupe_index_def_ready(en->schema->defs[i]);
            e = TROUPE_OK;
        }
    pthread_mutex_unlock(&t->mu);
    if (e == TROUPE_ENOTABLE)
        troupe__err_named(e, "no table", table, len);
    else if (e == TROUPE_ENOINDEX)
        troupe__err_named(e, "the table has no index", index, strlen(index));
    return e;
}
