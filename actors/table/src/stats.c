/*
 * Key-version eviction passes, expired-row purge passes and the data-layer
 * counters, as calls on a troupe_tables. The records, rows and their
 * counts live with each table actor (actor.c), so these calls are asks to
 * the actors; the transaction counters are relaxed atomics in the
 * catalog's ttables_shared, read here without a lock (a snapshot of
 * monotonic counters, not a consistent cut), as are the latency
 * histograms the client calls add to (troupe__tables_op_done). An index
 * build's progress is the table actor's (build.c), asked for like its
 * records.
 */
#include <string.h>
#include <time.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/pack.h"

/* ---- eviction ------------------------------------------------------------ */

/* Asks table's actor a request of `kind` without a body: on OK cb(arg)
 * fires exactly once; on error it never does. */
static troupe_err
ask_table(troupe_tables *t, const char *table, uint32_t kind,
          troupe_reply_cb cb, void *arg)
{
    troupe_addr a;
    uint32_t timeout = 0;
    troupe_runtime *rt = NULL;
    troupe_err e = troupe__tables_lookup(t, table, &a, &timeout, &rt);
    if (e != TROUPE_OK)
        return e;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, kind, NULL, 0) != TROUPE_OK)
        return TROUPE_ENOMEM;
    return troupe_runtime_ask(rt, a, &m, timeout, cb, arg);
}

typedef struct evcall {
    troupe_vevict_cb cb;
    void *arg;
} evcall;

static void
on_evicted(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    evcall *c = arg;
    troupe_vevict_result r = {0};
    if (err == TROUPE_OK && (reply == NULL || reply->body == NULL))
        err = TROUPE_EPROTO;
    if (err == TROUPE_OK) {
        troupe_reader rd;
        uint64_t b = 0, l = 0;
        troupe_reader_init(&rd, troupe_body_data(reply->body),
                           troupe_body_len(reply->body));
        troupe_read_array_n(&rd, 3);
        troupe_read_uint(&rd, &r.evicted);
        troupe_read_uint(&rd, &b);
        troupe_read_uint(&rd, &l);
        if (troupe_read_end(&rd) != TROUPE_OK || b > UINT32_MAX ||
            l > UINT32_MAX) {
            err = TROUPE_EPROTO;
            r = (troupe_vevict_result){0};
        } else {
            r.batches = (uint32_t)b;
            r.largest = (uint32_t)l;
        }
    }
    troupe_vevict_cb cb = c->cb;
    void *cb_arg = c->arg;
    troupe_free(c);
    cb(err, &r, cb_arg);
}

troupe_err
troupe_tables_evict_versions(troupe_tables *t, const char *table,
                             troupe_vevict_cb cb, void *arg)
{
    if (t == NULL || table == NULL || cb == NULL)
        return TROUPE_EINVAL;
    troupe_err we = troupe__tables_writable(t, "troupe_tables_evict_versions");
    if (we != TROUPE_OK)
        return we;
    evcall *c = troupe_malloc(sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->cb = cb;
    c->arg = arg;
    troupe_err e = ask_table(t, table, TABLE_VEVICT, on_evicted, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

typedef struct evwait {
    troupe__waiter w;
    troupe_vevict_result r;
} evwait;

static void
wake_evict(troupe_err err, const troupe_vevict_result *r, void *arg)
{
    evwait *w = arg;
    w->r = *r;
    troupe__waiter_release(&w->w, err, NULL);
}

troupe_err
troupe_tables_evict_versions_wait(troupe_tables *t, const char *table,
                                  troupe_vevict_result *r)
{
    if (r == NULL)
        return TROUPE_EINVAL;
    *r = (troupe_vevict_result){0};
    troupe_err be = troupe__block_check("troupe_tables_evict_versions_wait");
    if (be != TROUPE_OK)
        return be;
    evwait w = {0};
    troupe__waiter_init(&w.w, 1);
    troupe_err e = troupe__waiter_finish(
        &w.w, troupe_tables_evict_versions(t, table, wake_evict, &w), NULL);
    if (e == TROUPE_OK)
        *r = w.r;
    return e;
}

/* ---- expired rows ------------------------------------------------------ */

typedef struct pucall {
    troupe_purge_cb cb;
    void *arg;
} pucall;

static void
on_purged(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    pucall *c = arg;
    troupe_purge_result r = {0};
    if (err == TROUPE_OK && (reply == NULL || reply->body == NULL))
        err = TROUPE_EPROTO;
    if (err == TROUPE_OK) {
        troupe_reader rd;
        uint64_t st = 0;
        troupe_reader_init(&rd, troupe_body_data(reply->body),
                           troupe_body_len(reply->body));
        troupe_read_array_n(&rd, 3);
        troupe_read_uint(&rd, &r.scanned);
        troupe_read_uint(&rd, &r.purged);
        troupe_read_uint(&rd, &st);
        if (troupe_read_end(&rd) != TROUPE_OK || st > UINT32_MAX) {
            err = TROUPE_EPROTO;
            r = (troupe_purge_result){0};
        } else {
            r.steps = (uint32_t)st;
        }
    }
    troupe_purge_cb cb = c->cb;
    void *cb_arg = c->arg;
    troupe_free(c);
    cb(err, &r, cb_arg);
}

troupe_err
troupe_tables_purge_expired(troupe_tables *t, const char *table,
                            troupe_purge_cb cb, void *arg)
{
    if (t == NULL || table == NULL || cb == NULL)
        return TROUPE_EINVAL;
    troupe_err we = troupe__tables_writable(t, "troupe_tables_purge_expired");
    if (we != TROUPE_OK)
        return we;
    pucall *c = troupe_malloc(sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->cb = cb;
    c->arg = arg;
    troupe_err e = ask_table(t, table, TABLE_PURGE, on_purged, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

typedef struct puwait {
    troupe__waiter w;
    troupe_purge_result r;
} puwait;

static void
wake_purge(troupe_err err, const troupe_purge_result *r, void *arg)
{
    puwait *w = arg;
    w->r = *r;
    troupe__waiter_release(&w->w, err, NULL);
}

troupe_err
troupe_tables_purge_expired_wait(troupe_tables *t, const char *table,
                                 troupe_purge_result *r)
{
    if (r == NULL)
        return TROUPE_EINVAL;
    *r = (troupe_purge_result){0};
    troupe_err be = troupe__block_check("troupe_tables_purge_expired_wait");
    if (be != TROUPE_OK)
        return be;
    puwait w = {0};
    troupe__waiter_init(&w.w, 1);
    troupe_err e = troupe__waiter_finish(
        &w.w, troupe_tables_purge_expired(t, table, wake_purge, &w), NULL);
    if (e == TROUPE_OK)
        *r = w.r;
    return e;
}

/* ---- index build progress ------------------------------------------- */

typedef struct prwait {
    troupe__waiter w;
    uint64_t v[4];
    bool running;
    int64_t err;
} prwait;

static void
on_progress(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    prwait *w = arg;
    if (err == TROUPE_OK && (reply == NULL || reply->body == NULL))
        err = TROUPE_EPROTO;
    if (err == TROUPE_OK) {
        troupe_reader rd;
        troupe_reader_init(&rd, troupe_body_data(reply->body),
                           troupe_body_len(reply->body));
        troupe_read_array_n(&rd, 6);
        for (int i = 0; i < 4; i++)
            troupe_read_uint(&rd, &w->v[i]);
        troupe_read_bool(&rd, &w->running);
        troupe_read_int(&rd, &w->err);
        if (troupe_read_end(&rd) != TROUPE_OK)
            err = TROUPE_EPROTO;
    }
    troupe__waiter_release(&w->w, err, NULL);
}

troupe_err
troupe_tables_index_progress_wait(troupe_tables *t, const char *table,
                                  const char *index, troupe_index_progress *out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = (troupe_index_progress){0};
    size_t len;
    if (t == NULL || index == NULL || !troupe_catalog_name_valid(table, &len))
        return TROUPE_EINVAL;
    troupe_err e = troupe__block_check("troupe_tables_index_progress_wait");
    if (e != TROUPE_OK)
        return e;
    /* the state first: a build the catalog calls ready has ended in the
     * actor, so its figures read after are final */
    pthread_mutex_lock(&t->mu);
    e = t->state == TABLES_RUNNING ? TROUPE_ENOTABLE : TROUPE_ESTATE;
    tentry *en =
        e == TROUPE_ENOTABLE ? troupe__tables_entry_find(t, table) : NULL;
    if (en != NULL)
        e = TROUPE_ENOINDEX;
    uint64_t id = 0;
    bool ready = false;
    for (size_t i = 0; en != NULL && i < en->schema->n; i++)
        if (strcmp(troupe_index_def_name(en->schema->defs[i]), index) == 0) {
            ready = troupe_index_def_ready(en->schema->defs[i]);
            id = troupe_index_def_id(en->schema->defs[i]);
            e = TROUPE_OK;
        }
    pthread_mutex_unlock(&t->mu);
    if (e == TROUPE_ENOTABLE)
        return troupe__err_named(e, "no table", table, len);
    if (e == TROUPE_ENOINDEX)
        return troupe__err_named(e, "the table has no index", index,
                                 strlen(index));
    if (e != TROUPE_OK)
        return e;
    prwait w = {0};
    troupe__waiter_init(&w.w, 1);
    e = troupe__waiter_finish(
        &w.w, ask_table(t, table, TABLE_PROGRESS, on_progress, &w), NULL);
    if (e != TROUPE_OK)
        return e;
    out->index_id = id;
    out->ready = ready;
    if (w.v[0] == id && id != 0) {
        out->known = true;
        out->done = w.v[1];
        out->total = w.v[2];
        out->elapsed_ms = w.v[3];
        out->running = w.running;
        out->err = (troupe_err)w.err;
    }
    return TROUPE_OK;
}

/* ---- stats ------------------------------------------------------------- */

uint64_t
troupe__tables_op_clock(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

void
troupe__tables_op_done(ttables_shared *ts, int op, uint64_t t0)
{
    uint64_t t1 = troupe__tables_op_clock();
    troupe_hist_add(&ts->op_ns[op], t1 > t0 ? t1 - t0 : 0);
}

typedef struct stwait {
    troupe__waiter w;
    uint64_t v[3];
} stwait;

static void
on_stats(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    stwait *w = arg;
    uint64_t v[3] = {0};
    if (err == TROUPE_OK && (reply == NULL || reply->body == NULL))
        err = TROUPE_EPROTO;
    if (err == TROUPE_OK) {
        troupe_reader rd;
        troupe_reader_init(&rd, troupe_body_data(reply->body),
                           troupe_body_len(reply->body));
        troupe_read_array_n(&rd, 3);
        for (int i = 0; i < 3; i++)
            troupe_read_uint(&rd, &v[i]);
        if (troupe_read_end(&rd) != TROUPE_OK)
            err = TROUPE_EPROTO;
    }
    memcpy(w->v, v, sizeof(v));
    troupe__waiter_release(&w->w, err, NULL);
}

/* One table's counters; ENOENT when it was dropped meanwhile. */
static troupe_err
table_stats(troupe_tables *t, const char *name, troupe_table_stats *ts)
{
    stwait w = {0};
    troupe__waiter_init(&w.w, 1);
    troupe_err e = troupe__waiter_finish(
        &w.w, ask_table(t, name, TABLE_STATS, on_stats, &w), NULL);
    if (e == TROUPE_OK) {
        ts->name = name;
        ts->version_records = w.v[0];
        ts->version_bytes = w.v[1];
        ts->version_evicted = w.v[2];
    }
    return e;
}

/* The stats and, behind them, the tables array and the list of names the
 * entries point into. */
typedef struct stats_block {
    troupe_tables_stats s;
    char **names;
} stats_block;

troupe_err
troupe_tables_stats_wait(troupe_tables *t, troupe_tables_stats **out)
{
    troupe_err be = troupe__block_check("troupe_tables_stats_wait");
    if (be != TROUPE_OK)
        return be;
    if (out != NULL)
        *out = NULL;
    if (t == NULL || out == NULL)
        return TROUPE_EINVAL;
    ttxn_env env;
    troupe_err e = troupe__tables_txn_env(t, &env);
    if (e != TROUPE_OK)
        return e;
    stats_block *b = troupe_calloc(1, sizeof(*b));
    if (b == NULL)
        return TROUPE_ENOMEM;
    size_t n = 0;
    if ((e = troupe_tables_list(t, &b->names, &n)) != TROUPE_OK) {
        troupe_free(b);
        return e;
    }
    b->s.tables = troupe_calloc(n ? n : 1, sizeof(*b->s.tables));
    if (b->s.tables == NULL) {
        troupe_tables_stats_destroy(&b->s);
        return TROUPE_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        e = table_stats(t, b->names[i], &b->s.tables[b->s.n]);
        if (e == TROUPE_OK)
            b->s.n++;
        else if (e != TROUPE_ENOENT) { /* dropped meanwhile: left out */
            troupe_tables_stats_destroy(&b->s);
            return e;
        }
    }
    ttables_shared *ts = env.ts;
#define LOAD(f) atomic_load_explicit(&ts->f, memory_order_relaxed)
    b->s.qver_ok = LOAD(qver_ok);
    b->s.qver_failed = LOAD(qver_fail);
    b->s.vprepare_ok = LOAD(vprep_ok);
    b->s.vprepare_failed = LOAD(vprep_fail);
    b->s.vcommit_ok = LOAD(vcommit_ok);
    b->s.vcommit_failed = LOAD(vcommit_fail);
    /* closed first: created >= closed in the snapshot */
    b->s.txn_closed = LOAD(txn_closed);
    b->s.txn_created = LOAD(txn_created);
    b->s.commit_ok = LOAD(commit_ok);
    b->s.commit_conflict = LOAD(commit_conflict);
    b->s.commit_failed = LOAD(commit_fail);
#undef LOAD
    troupe_hist_read(&ts->op_ns[TTABLES_OP_GET], &b->s.get_ns);
    troupe_hist_read(&ts->op_ns[TTABLES_OP_WRITE], &b->s.write_ns);
    troupe_hist_read(&ts->op_ns[TTABLES_OP_SCAN], &b->s.scan_ns);
    troupe_hist_read(&ts->op_ns[TTABLES_OP_QUERY], &b->s.query_ns);
    troupe_hist_read(&ts->op_ns[TTABLES_OP_COMMIT], &b->s.commit_ns);
    b->s.txn_running = b->s.txn_created - b->s.txn_closed;
    *out = &b->s;
    return TROUPE_OK;
}

void
troupe_tables_stats_destroy(troupe_tables_stats *s)
{
    if (s == NULL)
        return;
    stats_block *b = (stats_block *)s; /* s is b's first member */
    troupe_free(b->s.tables);
    troupe_free(b->names);
    troupe_free(b);
}
