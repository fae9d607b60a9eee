/*
 * Remove by index: up to q->limit rows that an index query matches, read
 * in one transaction's snapshot and deleted by that transaction's commit,
 * then handed back (Tito's delete-by-owner, for any index).
 *
 * The rows come from the index read with rows (so expired rows are left
 * out) in the transaction's own snapshot, page by page until enough
 * distinct primary keys were found (a row with an array field matches
 * through several entries). Each is deleted "if present", a write like any
 * other of the transaction: the commit conflicts when one of them changed
 * since the snapshot, so what is deleted is exactly what was read, and a
 * conflict is retried with a fresh transaction a few times before it is
 * reported. Rows that start to match after the snapshot are not seen (the
 * index range is not part of the read set: it lives in x.<id>, which the
 * key versions do not cover), as Tito's delete_by_owner does not see them.
 *
 * The asynchronous form reads on a worker and commits from scheduler 0;
 * its job owns everything until the callback.
 */
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/hash.h"
#include "troupe/internal/index.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "troupe/pack.h"
#include "troupe/txn.h"
#include "txn_int.h"

/* Attempts of a removal whose commit conflicts. */
#define REMOVE_ATTEMPTS 8

typedef struct rmjob {
    troupe_tables *t;
    char *table;
    char *index;
    troupe_index_query q; /* values, from, to: copies in the job's block */
    troupe_sync sync;
    troupe_table_cb cb;
    void *arg;
    uint32_t attempts;
    troupe_txn *tx;
    troupe_err err;
    /* the rows taken: every page read stays until the answer is built */
    troupe_index_result **pages;
    size_t npages;
    const troupe_index_hit **rows;
    size_t nrows;
    bool more;
    /* distinct primary keys taken: open addressing over rows */
    uint32_t *slots;
    size_t nslots;
} rmjob;

static void
rm_reset(rmjob *j)
{
    for (size_t i = 0; i < j->npages; i++)
        troupe_index_result_destroy(j->pages[i]);
    troupe_free(j->pages);
    troupe_free(j->rows);
    troupe_free(j->slots);
    j->pages = NULL;
    j->rows = NULL;
    j->slots = NULL;
    j->npages = j->nrows = j->nslots = 0;
    j->more = false;
    troupe_txn_destroy(j->tx);
    j->tx = NULL;
}

static void
rm_free(rmjob *j)
{
    rm_reset(j);
    troupe_free(j);
}

static size_t
pk_hash(const uint8_t *p, size_t n)
{
    uint64_t h = troupe__fnv1a64(p, n);
    return (size_t)(h ^ (h >> 29));
}

/* Adds hit h when its primary key is new: 1 taken, 0 seen, or -ENOMEM. */
static int
rm_take(rmjob *j, const troupe_index_hit *h)
{
    size_t mask = j->nslots - 1;
    for (size_t i = pk_hash(h->pk, h->pk_len) & mask;; i = (i + 1) & mask) {
        uint32_t s = j->slots[i];
        if (s == 0) {
            j->rows[j->nrows] = h;
            j->slots[i] = (uint32_t)++j->nrows;
            return 1;
        }
        const troupe_index_hit *o = j->rows[s - 1];
        if (o->pk_len == h->pk_len && memcmp(o->pk, h->pk, h->pk_len) == 0)
            return 0;
    }
}

/* Reads the matching rows in a fresh transaction and buffers their
 * deletes. Blocks (a worker, or the caller of the _wait form). */
static troupe_err
rm_collect(rmjob *j)
{
    size_t limit = j->q.limit;
    tindex_env env;
    troupe_err e = troupe__tables_index_env(j->t, j->table, j->index, &env);
    if (e != TROUPE_OK)
        return e;
    if ((e = troupe_txn_begin(j->t, NULL, &j->tx)) != TROUPE_OK) {
        troupe__tschema_release(env.schema);
        return e;
    }
    j->nslots = 16;
    while (j->nslots < 2 * limit)
        j->nslots *= 2;
    j->slots = troupe_calloc(j->nslots, sizeof(*j->slots));
    j->rows = troupe_malloc(limit * sizeof(*j->rows));
    if (j->slots == NULL || j->rows == NULL)
        e = TROUPE_ENOMEM;
    troupe_index_query q = j->q;
    q.rows = true;
    q.after = NULL;
    q.after_len = 0;
    troupe__index_run run = {.q = &q,
                             .def = env.def,
                             .table_id = env.table_id,
                             .now_ms =
                                 env.now_ms > 0 ? (uint64_t)env.now_ms : 0,
                             .snap = troupe__txn_snapshot(j->tx)};
    while (e == TROUPE_OK) {
        troupe_index_result *r = NULL;
        q.limit = limit - j->nrows;
        if ((e = troupe_index_query_run(env.db, &run, &r)) != TROUPE_OK)
            break;
        troupe_index_result **pv =
            troupe_realloc(j->pages, (j->npages + 1) * sizeof(*pv));
        if (pv == NULL) {
            troupe_index_result_destroy(r);
            e = TROUPE_ENOMEM;
            break;
        }
        j->pages = pv;
        j->pages[j->npages++] = r;
        size_t i = 0;
        for (; e == TROUPE_OK && i < r->n && j->nrows < limit; i++)
            if (rm_take(j, &r->hits[i]) == 1)
                e = troupe__txn_delete_any(j->tx, j->table, env.table_id,
                                           r->hits[i].pk, r->hits[i].pk_len);
        j->more = i < r->n || r->more;
        if (j->nrows == limit || !r->more || r->n == 0)
            break;
        q.after = r->cursor; /* the page stays: the cursor points in it */
        q.after_len = r->cursor_len;
    }
    troupe__tschema_release(env.schema);
    return e;
}

/* The answer: the rows taken, as a read reply body makes them. */
static troupe_err
rm_rows(const rmjob *j, troupe_rows **out)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, (uint32_t)j->nrows);
    for (size_t i = 0; i < j->nrows; i++) {
        const troupe_index_hit *h = j->rows[i];
        troupe__table_pack_row(&p, h->pk, h->pk_len, (int64_t)h->expires_at_ms,
                               h->val, h->val_len);
    }
    troupe_pack_nil(&p);
    troupe_pack_bool(&p, j->more);
    troupe_body *b = NULL;
    troupe_err e = troupe_pack_take_body(&p, &b);
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(b, out);
    troupe_body_release(b);
    return e;
}

static troupe_err
rm_check(troupe_tables *t, const char *table, const char *index,
         const troupe_index_query *q, troupe_sync sync)
{
    if (t == NULL || q == NULL || index == NULL || q->limit == 0 ||
        q->limit > TROUPE_TABLE_PAGE_MAX || (unsigned)sync > TROUPE_SYNC_OFF ||
        (q->values != NULL && (q->from != NULL || q->to != NULL)) ||
        (q->values == NULL && q->values_len != 0) ||
        (q->from == NULL && q->from_len != 0) ||
        (q->to == NULL && q->to_len != 0))
        return TROUPE_EINVAL;
    troupe_err e = troupe__tables_writable(t, "troupe_txn_remove_by_index");
    if (e != TROUPE_OK)
        return e;
    tindex_env env;
    e = troupe__tables_index_env(t, table, index, &env);
    if (e != TROUPE_OK)
        return e;
    if (!troupe_index_def_ready(env.def))
        e = TROUPE_ESTATE; /* still building */
    troupe__tschema_release(env.schema);
    return e;
}

/* The job, with copies of the names and of q's values, from and to. */
static troupe_err
rm_job(troupe_tables *t, const char *table, const char *index,
       const troupe_index_query *q, troupe_sync sync, rmjob **out)
{
    troupe_err e = rm_check(t, table, index, q, sync);
    if (e != TROUPE_OK)
        return e;
    size_t tl = strlen(table) + 1, il = strlen(index) + 1;
    rmjob *j = troupe_calloc(1, sizeof(*j) + tl + il + q->values_len +
                                    q->from_len + q->to_len);
    if (j == NULL)
        return TROUPE_ENOMEM;
    char *d = (char *)(j + 1);
    j->t = t;
    j->sync = sync;
    j->table = memcpy(d, table, tl);
    j->index = memcpy(d + tl, index, il);
    unsigned char *v = (unsigned char *)d + tl + il;
    j->q = (troupe_index_query){.limit = q->limit, .reverse = q->reverse};
    if (q->values != NULL) {
        j->q.values = memcpy(v, q->values, q->values_len);
        j->q.values_len = q->values_len;
        v += q->values_len;
    }
    if (q->from != NULL) {
        j->q.from = memcpy(v, q->from, q->from_len);
        j->q.from_len = q->from_len;
        v += q->from_len;
    }
    if (q->to != NULL) {
        j->q.to = memcpy(v, q->to, q->to_len);
        j->q.to_len = q->to_len;
    }
    *out = j;
    return TROUPE_OK;
}

/* ---- asynchronous ------------------------------------------------------ */

static void
rm_start(rmjob *j);

static void
rm_answer(rmjob *j, troupe_err e)
{
    troupe_rows *rows = NULL;
    if (e == TROUPE_OK)
        e = rm_rows(j, &rows);
    troupe_table_cb cb = j->cb;
    void *arg = j->arg;
    rm_free(j);
    cb(e, rows, arg);
}

static void
rm_committed(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
             size_t n, void *arg)
{
    (void)tx;
    (void)c;
    (void)n;
    rmjob *j = arg;
    if (err == TROUPE_ECONFLICT && ++j->attempts < REMOVE_ATTEMPTS) {
        rm_reset(j); /* a fresh snapshot sees what changed */
        rm_start(j);
        return;
    }
    rm_answer(j, err);
}

static void
rm_work(void *arg)
{
    rmjob *j = arg;
    j->err = rm_collect(j);
}

static void
rm_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    rmjob *j = arg;
    troupe_err e = j->err;
    if (e == TROUPE_OK)
        e = troupe_txn_commit(j->tx, j->sync, rm_committed, j);
    if (e != TROUPE_OK)
        rm_answer(j, e);
}

static void
rm_start(rmjob *j)
{
    ttxn_env env;
    troupe_err e = troupe__tables_txn_env(j->t, &env);
    if (e == TROUPE_OK)
        e = troupe_runtime_work(env.rt, rm_work, rm_done, j);
    if (e != TROUPE_OK)
        rm_answer(j, e);
}

troupe_err
troupe_txn_remove_by_index(troupe_tables *t, const char *table,
                           const char *index, const troupe_index_query *q,
                           troupe_sync sync, troupe_table_cb cb, void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    rmjob *j = NULL;
    troupe_err e = rm_job(t, table, index, q, sync, &j);
    if (e != TROUPE_OK)
        return e;
    j->cb = cb;
    j->arg = arg;
    ttxn_env env;
    if ((e = troupe__tables_txn_env(t, &env)) == TROUPE_OK)
        e = troupe_runtime_work(env.rt, rm_work, rm_done, j);
    if (e != TROUPE_OK)
        rm_free(j);
    return e;
}

troupe_err
troupe_txn_remove_by_index_wait(troupe_tables *t, const char *table,
                                const char *index, const troupe_index_query *q,
                                troupe_sync sync, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    *rows = NULL;
    troupe_err be = troupe__block_check("troupe_txn_remove_by_index_wait");
    if (be != TROUPE_OK)
        return be;
    rmjob *j = NULL;
    troupe_err e = rm_job(t, table, index, q, sync, &j);
    if (e != TROUPE_OK)
        return e;
    for (;;) {
        e = rm_collect(j);
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(j->tx, sync);
        if (e != TROUPE_ECONFLICT || ++j->attempts == REMOVE_ATTEMPTS)
            break;
        rm_reset(j);
    }
    if (e == TROUPE_OK)
        e = rm_rows(j, rows);
    rm_free(j);
    return e;
}
