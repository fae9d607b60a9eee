/*
 * Retention (troupe/coordinator.h, troupe_coord_purge): deleting the
 * transactions that ended long enough ago, with their barrier rows.
 *
 * Finding them: troupe.gtx has a declared index "finished" on
 * finished_ms. A declared index is sparse (docs/data-model.md, "Sparse
 * rules"): a document whose finished_ms is nil, every transaction not
 * ended, derives no entry, so the index holds exactly the ended ones in
 * the order they ended, and a purge is one covering range query
 * [oldest, now - retention] of at most limit entries: bounded work that
 * never reads a live transaction's row. Scanning troupe.gtx with a
 * cursor kept between passes was rejected: it reads every unfinished row
 * on every pass, and the cursor has to live somewhere across restarts.
 * The index costs a put and a delete of one entry per transaction, at
 * its final commit and at its purge.
 *
 * Deleting one: a troupe transaction of its own per gid (so a conflict
 * or a broken row holds back only that gid), started for every hit at
 * once so that the commit pipeline groups their syncs. It reads the
 * document again (the index entry says what was true when it was read)
 * and goes on only if it is still ended and past its retention; it scans
 * the barrier rows of (mode, gid), the tuple prefix of their keys
 * (troupe_key_writer_range), which puts that range in its read set, so a
 * barrier row written meanwhile fails the commit (ECONFLICT: left for
 * the next purge) rather than being left behind or deleted unseen. A
 * shard never writes a transaction after its final commit (it forgets it
 * once that commit is done), so the only writer racing a purge is a
 * submit of the same gid, whose insert either finds the row (EEXIST:
 * nothing driven) or finds it gone and starts the gid again.
 *
 * Everything after the call runs on scheduler 0 in the tables' and
 * transactions' callbacks. `pending` counts the gids in flight plus the
 * launcher's own share; the last release finishes the purge, calls the
 * caller back and gives back the hold on c->purges that the stop waits
 * for.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "troupe/alloc.h"
#include "troupe/barrier.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/txn.h"

#define FINISHED_INDEX "finished"
/* barrier rows read per scan page of one gid */
#define BARRIER_PAGE 256

static const troupe_index_field finished_field = {"finished_ms",
                                                  TROUPE_FIELD_TIMESTAMP};
static const troupe_index_spec finished_spec = {
    .name = FINISHED_INDEX, .fields = &finished_field, .n_fields = 1};

troupe_err
troupe__coord_table_create(troupe_tables *t)
{
    troupe_err e =
        troupe_tables_create_wait(t, TROUPE_GTX_TABLE, &finished_spec, 1);
    if (e != TROUPE_EEXIST)
        return e;
    /* stored before the index existed (or with more indexes): add it,
     * building it over the rows there; one still building from an open
     * before is EBUSY and goes on in the background (a purge meanwhile
     * is ESTATE) */
    e = troupe_tables_add_index_wait(t, TROUPE_GTX_TABLE, &finished_spec);
    return e == TROUPE_EBUSY ? TROUPE_OK : e;
}

typedef struct pg_job pg_job;

/* One gid's deletion. */
typedef struct pg_one {
    pg_job *j;
    troupe_txn *tx;
    const uint8_t *gid; /* into j->res */
    size_t gid_len;
    troupe_key_writer kw; /* the (mode, gid) prefix of its barrier rows */
    troupe_range range;
    uint8_t *after; /* the barrier scan's cursor */
    size_t after_len;
} pg_one;

struct pg_job {
    troupe_coord *c;
    troupe_coord_purge_cb cb;
    void *arg;
    size_t limit;
    int64_t cutoff; /* due: finished_ms <= cutoff */
    troupe_index_result *res;
    pg_one *ones;
    bool more;
    _Atomic size_t pending;
    _Atomic size_t purged;
    _Atomic int err; /* the first error */
};

static void
job_err(pg_job *j, troupe_err e)
{
    int ok = TROUPE_OK;
    if (e != TROUPE_OK)
        atomic_compare_exchange_strong(&j->err, &ok, (int)e);
}

static void
job_finish(void *arg, troupe_runtime *rt)
{
    (void)rt;
    pg_job *j = arg;
    troupe_coord *c = j->c;
    j->cb((troupe_err)atomic_load(&j->err), atomic_load(&j->purged), j->more,
          j->arg);
    if (j->ones != NULL)
        for (size_t i = 0; i < j->res->n; i++) {
            troupe_key_writer_fini(&j->ones[i].kw);
            troupe_free(j->ones[i].after);
        }
    troupe_free(j->ones);
    troupe_index_result_destroy(j->res);
    troupe_free(j);
    troupe__waiter_release(&c->purges, TROUPE_OK, NULL); /* last touch */
}

static void
job_release(pg_job *j)
{
    if (atomic_fetch_sub(&j->pending, 1) == 1)
        job_finish(j, NULL);
}

/* The end of one gid: its transaction is destroyed (its commit, if any,
 * has called back). */
static void
one_done(pg_one *o, troupe_err e)
{
    job_err(o->j, e);
    troupe_txn_destroy(o->tx);
    o->tx = NULL;
    job_release(o->j);
}

static void
on_commit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *conf,
          size_t n, void *arg)
{
    (void)tx;
    (void)conf;
    (void)n;
    pg_one *o = arg;
    if (err == TROUPE_OK)
        atomic_fetch_add(&o->j->purged, 1);
    /* changed since its read: the next purge looks again */
    one_done(o, err == TROUPE_ECONFLICT ? TROUPE_OK : err);
}

/* The gid's row goes last, then the commit. */
static void
one_commit(pg_one *o)
{
    troupe_err e =
        troupe_txn_delete(o->tx, TROUPE_GTX_TABLE, o->gid, o->gid_len);
    if (e == TROUPE_OK)
        e = troupe_txn_commit(o->tx, o->j->c->sync, on_commit, o);
    if (e != TROUPE_OK)
        one_done(o, e);
}

static troupe_err
barrier_scan(pg_one *o);

static void
on_barrier(troupe_err err, troupe_rows *rows, void *arg)
{
    pg_one *o = arg;
    troupe_err e = err;
    for (size_t i = 0; e == TROUPE_OK && i < rows->n; i++)
        e = troupe_txn_delete(o->tx, TROUPE_BARRIER_TABLE, rows->rows[i].key,
                              rows->rows[i].key_len);
    bool more = e == TROUPE_OK && rows->more;
    if (more) {
        troupe_free(o->after);
        o->after_len = rows->cursor_len;
        if ((o->after = troupe_malloc(o->after_len)) == NULL)
            e = TROUPE_ENOMEM;
        else
            memcpy(o->after, rows->cursor, o->after_len);
    }
    troupe_rows_destroy(rows);
    if (e == TROUPE_OK && more)
        e = barrier_scan(o);
    else if (e == TROUPE_OK)
        one_commit(o);
    if (e != TROUPE_OK)
        one_done(o, e);
}

static troupe_err
barrier_scan(pg_one *o)
{
    troupe_scan_opts so = {.start = o->range.start,
                           .start_len = o->range.start_len,
                           .end = o->range.end,
                           .end_len = o->range.end_len,
                           .after = o->after,
                           .after_len = o->after_len,
                           .limit = BARRIER_PAGE};
    return troupe_txn_scan(o->tx, TROUPE_BARRIER_TABLE, &so, on_barrier, o);
}

/* The document as the transaction reads it: still ended and due? Then
 * its barrier rows (none when the barrier's table was never created). */
static void
on_doc(troupe_err err, troupe_rows *rows, void *arg)
{
    pg_one *o = arg;
    if (err != TROUPE_OK) {
        troupe_rows_destroy(rows);
        one_done(o, err == TROUPE_ENOENT ? TROUPE_OK : err); /* gone */
        return;
    }
    tc_gtx *g = NULL;
    troupe_err e =
        troupe__gtx_decode(rows->rows[0].doc, rows->rows[0].doc_len, &g);
    troupe_rows_destroy(rows);
    if (e != TROUPE_OK) {
        troupe_log(troupe_runtime_logger(o->j->c->rt), TROUPE_LOG_WARN, "coord",
                   "purge: the stored transaction %.*s: %s", (int)o->gid_len,
                   (const char *)o->gid, troupe_err_name(e));
        one_done(o, e);
        return;
    }
    bool due = troupe__gtx_final(g) && g->finished_ms <= o->j->cutoff;
    const char *mode = troupe_gtx_mode_name(g->mode);
    if (due && mode != NULL) {
        troupe_key_put_string(&o->kw, mode, strlen(mode));
        troupe_key_put_string(&o->kw, (const char *)o->gid, o->gid_len);
        e = troupe_key_writer_range(&o->kw, &o->range);
    }
    troupe__gtx_free(g);
    if (!due || mode == NULL) {
        one_done(o, TROUPE_OK);
        return;
    }
    if (e == TROUPE_OK)
        e = barrier_scan(o);
    if (e == TROUPE_ENOTABLE) {
        one_commit(o);
        return;
    }
    if (e != TROUPE_OK)
        one_done(o, e);
}

/* Starts the transaction of hit i; the launcher holds a share of
 * pending meanwhile, so a gid that ends at once cannot finish the job. */
static void
one_start(pg_job *j, size_t i)
{
    pg_one *o = &j->ones[i];
    o->j = j;
    o->gid = j->res->hits[i].pk;
    o->gid_len = j->res->hits[i].pk_len;
    troupe_key_writer_init(&o->kw);
    atomic_fetch_add(&j->pending, 1);
    troupe_err e = troupe_txn_begin(j->c->tables, NULL, &o->tx);
    if (e == TROUPE_OK)
        e = troupe_txn_get(o->tx, TROUPE_GTX_TABLE, o->gid, o->gid_len, on_doc,
                           o);
    if (e != TROUPE_OK)
        one_done(o, e);
}

static void
on_due(troupe_err err, troupe_index_result *res, void *arg)
{
    pg_job *j = arg;
    j->res = res;
    if (err != TROUPE_OK || res->n == 0) {
        job_err(j, err);
        job_release(j);
        return;
    }
    j->more = res->more;
    if ((j->ones = troupe_calloc(res->n, sizeof(*j->ones))) == NULL) {
        job_err(j, TROUPE_ENOMEM);
        job_release(j);
        return;
    }
    for (size_t i = 0; i < res->n; i++)
        one_start(j, i);
    job_release(j);
}

troupe_err
troupe_coord_purge(troupe_coord *c, size_t limit, troupe_coord_purge_cb cb,
                   void *arg)
{
    if (c == NULL || cb == NULL || limit == 0 || limit > TROUPE_GTX_PURGE_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "coord purge: NULL, or a limit not in 1..%d",
                            TROUPE_GTX_PURGE_MAX);
    /* held before the state is read: a stop that sets it after this
     * waits for the release */
    troupe__waiter_hold(&c->purges);
    if (atomic_load(&c->state) != 0) {
        troupe__waiter_release(&c->purges, TROUPE_OK, NULL);
        return troupe__errf(TROUPE_ECLOSED,
                            "coord purge: the coordinator stopped");
    }
    pg_job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL) {
        troupe__waiter_release(&c->purges, TROUPE_OK, NULL);
        return TROUPE_ENOMEM;
    }
    j->c = c;
    j->cb = cb;
    j->arg = arg;
    j->limit = limit;
    atomic_init(&j->pending, 1);
    atomic_init(&j->purged, 0);
    atomic_init(&j->err, TROUPE_OK);
    if (c->retention_ms < 0) { /* kept for ever: nothing is ever due */
        troupe__post_or_run(c->rt, job_finish, j);
        return TROUPE_OK;
    }
    j->cutoff = troupe__coord_now(c) - c->retention_ms;
    /* [oldest, cutoff]: the half-open range up to cutoff + 1 */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_int(&p, j->cutoff + 1);
    size_t tl = 0;
    const void *to = troupe_pack_data(&p, &tl);
    troupe_index_query q = {.to = to, .to_len = tl, .limit = limit};
    troupe_err e = troupe_tables_query(c->tables, TROUPE_GTX_TABLE,
                                       FINISHED_INDEX, &q, on_due, j);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK) {
        troupe_free(j);
        troupe__waiter_release(&c->purges, TROUPE_OK, NULL);
    }
    return e;
}

typedef struct pg_wait {
    troupe__waiter w;
    size_t purged;
    bool more;
} pg_wait;

static void
wake(troupe_err err, size_t purged, bool more, void *arg)
{
    pg_wait *pw = arg;
    pw->purged = purged;
    pw->more = more;
    troupe__waiter_release(&pw->w, err, NULL);
}

troupe_err
troupe_coord_purge_wait(troupe_coord *c, size_t limit, size_t *purged,
                        bool *more)
{
    if (purged != NULL)
        *purged = 0;
    if (more != NULL)
        *more = false;
    troupe_err be = troupe__block_check("troupe_coord_purge_wait");
    if (be != TROUPE_OK)
        return be;
    pg_wait pw = {.purged = 0};
    troupe__waiter_init(&pw.w, 1);
    troupe_err e = troupe__waiter_finish(
        &pw.w, troupe_coord_purge(c, limit, wake, &pw), NULL);
    if (purged != NULL)
        *purged = pw.purged;
    if (more != NULL)
        *more = pw.more;
    return e;
}
