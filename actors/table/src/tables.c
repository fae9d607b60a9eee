/*
 * The troupe_tables object: open (attached to its catalog: the version
 * floor, the stored table entries through the catalog's loader, their
 * actors, then the builds left unfinished), stop, stop_wait and
 * destroy, the in-memory map from name to table actor (`entries`, sorted
 * by name, guarded by `mu` and never held across I/O), the lookups every
 * table call starts with, and the environments of reads, queries and
 * transactions.
 *
 * On a read-only catalog there is no commit pipeline: open stores no
 * floor and resumes no build, and every call that would write checks
 * troupe__tables_writable first (EREADONLY at the call, nothing sent).
 *
 * Stopping waits for the catalog jobs (creates, drops, index changes,
 * builds, the version floor's raises: `ddl_jobs`): the last one to end
 * stops the actors (troupe__tables_ddl_dec).
 */
#include <stdlib.h>
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/names.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/xa.h"
#include "troupe/keycodec.h"

static int64_t
default_clock(void *ctx)
{
    (void)ctx;
    return troupe_now_ms();
}

troupe_err
troupe__tables_entry_start(troupe_tables *t, tentry *e)
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
    if ((err = troupe__tschema_families(t->db, e->schema)) != TROUPE_OK)
        return err;
    e->cf_t = c.cf_t;
    c.schema = troupe__tschema_retain(e->schema);
    if ((err = troupe__table_spawn(t->rt, &c, &e->addr)) != TROUPE_OK)
        return err;
    if ((err = troupe__tschema_spawn_index(t, e->id, e->schema, &e->iaddr)) !=
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

/* The loader's call for one stored table (troupe__catalog_load checks
 * the key and, after, the id): its entry parsed, its ids checked against
 * the counter, its actors started. */
static troupe_err
load_table(void *arg, const char *name, const void *v, size_t n, uint64_t *id)
{
    troupe_tables *t = arg;
    tentry *en = NULL;
    troupe_err e = troupe__tables_entry_parse(v, n, &en);
    if (e != TROUPE_OK)
        return e;
    /* Ids come from the counter; the entry sits under its own name (a
     * drop of the name it holds must find it). */
    uint64_t seq = troupe__catalog_seq(t->cat);
    if (en->id > seq || strcmp(en->name, name) != 0)
        e = TROUPE_ECORRUPT;
    for (size_t i = 0; i < en->ndropped; i++)
        if (en->dropped[i] > seq)
            e = TROUPE_ECORRUPT;
    for (size_t i = 0; i < en->schema->n; i++)
        if (troupe_index_def_id(en->schema->defs[i]) > seq)
            e = TROUPE_ECORRUPT;
    *id = en->id;
    if (e == TROUPE_OK)
        e = troupe__tables_entry_start(t, en);
    if (e != TROUPE_OK)
        troupe__tables_entry_free(en);
    return e;
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
    if (o == NULL || out == NULL || o->catalog == NULL ||
        o->version_reserve > TROUPE_VERSION_RESERVE_MAX)
        return TROUPE_EINVAL;
    /* A read-only db has no pipeline (troupe_commit_create refuses): one
     * given would be another db's. */
    bool ro = troupe_catalog_read_only(o->catalog);
    if ((o->commit == NULL) != ro)
        return troupe__errf(TROUPE_EINVAL, "%s",
                            ro ? "tables_opts.commit must be NULL on a "
                                 "read-only catalog"
                               : "tables_opts.commit is NULL");
    troupe_tables *t = troupe_calloc(1, sizeof(*t));
    if (t == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = troupe__catalog_attach(o->catalog);
    if (e != TROUPE_OK) {
        troupe_free(t);
        return e;
    }
    t->cat = o->catalog;
    t->rt = troupe__catalog_rt(t->cat);
    t->db = troupe__catalog_db(t->cat);
    t->meta = troupe__catalog_meta(t->cat);
    t->commit = o->commit;
    t->fns = o->fns;
    t->clock = o->clock ? o->clock : default_clock;
    t->clock_ctx = o->clock_ctx;
    t->timeout_ms = o->timeout_ms ? o->timeout_ms : 30000;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->ts.mu, NULL);
    for (int i = 0; i < TTABLES_OPS; i++)
        troupe_hist_init(&t->ts.op_ns[i], TROUPE_TABLES_OP_NS_BASE,
                         TROUPE_TABLES_OP_NS_BUCKETS);
    pthread_mutex_init(&t->vers.mu, NULL);
    t->vers.t = t;
    t->vers.reserve = o->version_reserve ? o->version_reserve
                                         : TROUPE_VERSION_RESERVE_DEFAULT;
    /* pi_db's quantum: 1 ms; below it rounds up, above it truncates. */
    t->ts.vttl_ms = o->version_ttl_us == 0     ? 0
                    : o->version_ttl_us < 1000 ? 1
                                               : o->version_ttl_us / 1000;
    e = troupe__vers_open(t);
    if (e == TROUPE_OK)
        e = troupe__catalog_load(t->cat, "table", load_table, t);
    /* prepared XA transactions hold their keys again before anything is
     * served (xa.c); a read-only open holds nothing and resolves nothing */
    if (e == TROUPE_OK && !ro)
        e = troupe__xa_open(t);
    if (e != TROUPE_OK) {
        stop_all_now(t);
        troupe_tables_destroy(t);
        return e;
    }
    /* Only now: a build refers to t, which a failed open frees. Read-
     * only, a build left unfinished stays so: its index answers as a
     * building one. */
    for (tentry *en = t->entries; en != NULL && !ro; en = en->next)
        troupe__tables_resume_builds(t, en);
    *out = t;
    return TROUPE_OK;
}

troupe_err
troupe__tables_writable(const troupe_tables *t, const char *call)
{
    return troupe__catalog_writable(t->cat, call);
}

static void
stop_done_cb(void *arg, troupe_runtime *rt)
{
    troupe_tables *t = arg;
    pthread_mutex_lock(&t->mu);
    t->state = TABLES_STOPPED;
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

/* On the table actor's thread once it is idle (or at once if gone; a
 * stop that found it gone or stopped only counts it). */
static void
quiesced_stop(void *arg, troupe_err err)
{
    (void)err;
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
    if (t->state != TABLES_RUNNING) {
        pthread_mutex_unlock(&t->mu);
        return TROUPE_ESTATE;
    }
    t->state = TABLES_STOPPING;
    t->stop_cb = cb;
    t->stop_arg = arg;
    /* Catalog jobs and builds use the actors: the last one to finish
     * stops them (troupe__tables_ddl_dec). */
    bool now = t->ddl_jobs == 0;
    t->stopping_actors = now;
    pthread_mutex_unlock(&t->mu);
    if (now)
        stop_actors(t);
    return TROUPE_OK;
}

void
troupe__tables_ddl_dec(troupe_tables *t)
{
    pthread_mutex_lock(&t->mu);
    bool go = --t->ddl_jobs == 0 && t->state == TABLES_STOPPING &&
              !t->stopping_actors;
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
    troupe_err be = troupe__block_check("troupe_tables_stop_wait");
    if (be != TROUPE_OK)
        return be;
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
    t->state = TABLES_STOPPED;
}

void
troupe_tables_destroy(troupe_tables *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    bool stopped = t->state == TABLES_STOPPED;
    pthread_mutex_unlock(&t->mu);
    if (!stopped)
        abort(); /* not stopped (actors, DDL jobs may run): stop first */
    troupe__xa_close(t);
    while (t->entries != NULL) {
        tentry *en = t->entries;
        t->entries = en->next;
        troupe__tables_entry_free(en);
    }
    troupe__catalog_detach(t->cat);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->ts.mu);
    pthread_mutex_destroy(&t->vers.mu);
    troupe_free(t);
}

troupe_err
troupe_tables_list(troupe_tables *t, char ***names, size_t *n)
{
    if (t == NULL || names == NULL || n == NULL)
        return TROUPE_EINVAL;
    *names = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    if (t->state != TABLES_RUNNING) {
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

troupe_err
troupe__tables_index_env(troupe_tables *t, const char *table, const char *index,
                         tindex_env *env)
{
    size_t len;
    if (t == NULL || index == NULL || env == NULL)
        return TROUPE_EINVAL;
    if (!troupe_catalog_name_valid(table, &len))
        return troupe__name_err("table name", table, TROUPE_TABLE_NAME_MAX);
    memset(env, 0, sizeof(*env));
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == TABLES_RUNNING ? TROUPE_ENOTABLE : TROUPE_ESTATE;
    tentry *en =
        e == TROUPE_ENOTABLE ? troupe__tables_entry_find(t, table) : NULL;
    if (en != NULL)
        e = TROUPE_ENOINDEX;
    for (size_t i = 0; en != NULL && e == TROUPE_ENOINDEX && i < en->schema->n;
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
    } else if (e == TROUPE_ENOTABLE) {
        troupe__err_named(e, "no table", table, len);
    } else if (e == TROUPE_ENOINDEX) {
        troupe__err_named(e, "the table has no index", index, strlen(index));
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
 * EINVAL (bad name), ESTATE (stopped), ENOTABLE; each with its detail. */
static troupe_err
entry_view(troupe_tables *t, const char *name, tentry_view *v)
{
    size_t len;
    if (t == NULL)
        return TROUPE_EINVAL;
    if (!troupe_catalog_name_valid(name, &len))
        return troupe__name_err("table name", name, TROUPE_TABLE_NAME_MAX);
    pthread_mutex_lock(&t->mu);
    troupe_err e = t->state == TABLES_RUNNING ? TROUPE_ENOTABLE : TROUPE_ESTATE;
    tentry *en =
        e == TROUPE_ENOTABLE ? troupe__tables_entry_find(t, name) : NULL;
    if (en != NULL) {
        *v = (tentry_view){en->addr, en->iaddr, en->cf_t, en->id};
        e = TROUPE_OK;
    }
    pthread_mutex_unlock(&t->mu);
    if (e == TROUPE_ENOTABLE)
        troupe__err_named(e, "no table", name, len);
    else if (e == TROUPE_ESTATE)
        troupe__errf(e, "tables are stopping");
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
    bool running = t->state == TABLES_RUNNING;
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
