/*
 * Reads by key in the transaction's snapshot: get and get_many (and their
 * blocking twins), each key joining the read set; a buffered write of the
 * key answers instead of the snapshot. The read runs on a worker and
 * answers on scheduler 0. Also the rows reply body and the rows waiter
 * that scans and versioned queries share.
 */
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "txn_int.h"

enum { SRC_SNAP = 0, SRC_BUF, SRC_ABSENT };

typedef struct ritem {
    int src;
    int64_t expires;
    const unsigned char *key;
    size_t klen;
    const unsigned char *doc;
    size_t dlen;
} ritem;

typedef struct rjob {
    troupe_db *db;
    troupe_cf *cf_t;
    ttxn_shared *sh; /* one reference: the snapshot */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    troupe_table_cb cb;
    void *arg;
    bool single;
    troupe_err err;
    troupe_body *body;
    size_t n;
    ritem items[];
} rjob;

/* The reply body [[rows...], cursor | nil, more] from rows packed one by
 * one into `items` (row i starts at off[i]). */
troupe_err
troupe__txn_rows_body(troupe_packer *items, const size_t *off, size_t n,
                      const void *cur, size_t clen, bool more,
                      troupe_body **out)
{
    if (items->err != TROUPE_OK)
        return items->err;
    size_t len = 0;
    const unsigned char *d = troupe_pack_data(items, &len);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        troupe_pack_raw(&p, d + off[i],
                        (i + 1 < n ? off[i + 1] : len) - off[i]);
    if (cur != NULL)
        troupe_pack_bin(&p, cur, clen);
    else
        troupe_pack_nil(&p);
    troupe_pack_bool(&p, more);
    return troupe_pack_take_body(&p, out);
}

static void
read_work(void *arg)
{
    rjob *j = arg;
    int64_t now = j->clock(j->clock_ctx);
    troupe_packer rows;
    troupe_pack_init(&rows);
    size_t cnt = 0;
    size_t *off = troupe_calloc(j->n ? j->n : 1, sizeof(*off));
    troupe_err e = off != NULL ? TROUPE_OK : TROUPE_ENOMEM;
    for (size_t i = 0; e == TROUPE_OK && i < j->n; i++) {
        ritem *it = &j->items[i];
        if (it->src == SRC_ABSENT)
            continue;
        if (it->src == SRC_BUF) {
            if (troupe__row_live(it->expires, now)) {
                troupe_pack_data(&rows, &off[cnt++]);
                troupe__table_pack_row(&rows, it->key, it->klen, it->expires,
                                       it->doc, it->dlen);
            }
            continue;
        }
        void *val = NULL;
        size_t vlen = 0;
        e = troupe_db_get(j->db, j->cf_t, j->sh->snap, it->key, it->klen, &val,
                          &vlen);
        if (e == TROUPE_ENOENT) {
            e = TROUPE_OK;
            continue;
        }
        int64_t exp = 0;
        const void *doc = NULL;
        size_t dlen = 0;
        if (e == TROUPE_OK)
            e = troupe__envelope_parse(val, vlen, &exp, &doc, &dlen);
        if (e == TROUPE_OK && troupe__row_live(exp, now)) {
            troupe_pack_data(&rows, &off[cnt++]);
            troupe__table_pack_row(&rows, it->key, it->klen, exp, doc, dlen);
        }
        troupe_free(val);
    }
    if (e == TROUPE_OK && j->single && cnt == 0)
        e = TROUPE_ENOENT;
    if (e == TROUPE_OK)
        e = troupe__txn_rows_body(&rows, off, cnt, NULL, 0, false, &j->body);
    troupe_pack_fini(&rows);
    troupe_free(off);
    j->err = e;
}

static void
read_done(void *arg, troupe_runtime *rt)
{
    rjob *j = arg;
    troupe_rows *rows = NULL;
    troupe_err e = j->err;
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(j->body, &rows);
    troupe_body_release(j->body);
    troupe__ttxn_release(j->sh);
    troupe_table_cb cb = j->cb;
    void *cb_arg = j->arg;
    troupe_free(j);
    cb(e, rows, cb_arg);
}

static troupe_err
read_start(troupe_txn *tx, const char *table, const void *const *keys,
           const size_t *klens, size_t n, bool single, troupe_table_cb cb,
           void *arg)
{
    if (tx == NULL || table == NULL || cb == NULL ||
        (n > 0 && (keys == NULL || klens == NULL)) || (single && n != 1) ||
        n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        troupe_err e = troupe__table_key_check(keys[i], klens[i]);
        if (e != TROUPE_OK)
            return e;
    }
    if (tx->state != TX_OPEN || tx->mode == MODE_VERSIONED)
        return TROUPE_ESTATE;
    uint32_t tab;
    troupe_err e = troupe__txn_tab_of(tx, table, &tab);
    if (e != TROUPE_OK)
        return e;
    tx->mode = MODE_ORDINARY;
    /* Every key joins the read set first; a limit reached leaves the
     * keys added so far in it (reading more can only add conflicts). */
    for (size_t i = 0; i < n; i++) {
        xkey *x;
        if ((e = troupe__txn_kget(tx, tab, keys[i], klens[i], &x)) != TROUPE_OK)
            return e;
        bytes += klens[i] + (x->kind != K_NONE ? x->dlen : 0);
    }
    rjob *j = troupe_calloc(1, sizeof(*j) + n * sizeof(ritem) + bytes);
    if (j == NULL)
        return TROUPE_ENOMEM;
    unsigned char *p = (unsigned char *)&j->items[n];
    for (size_t i = 0; i < n; i++) {
        xkey *x = troupe__txn_kfind(tx, tab, keys[i], klens[i]);
        ritem *it = &j->items[i];
        memcpy(p, keys[i], klens[i]);
        it->key = p;
        it->klen = klens[i];
        p += klens[i];
        switch (x->kind) {
        case K_NONE:
            it->src = SRC_SNAP;
            break;
        case TROUPE__PART_INSERT:
        case TROUPE__PART_UPDATE:
        case TROUPE__PART_UPSERT:
            it->src = SRC_BUF;
            it->expires = x->expires;
            memcpy(p, x->doc, x->dlen);
            it->doc = p;
            it->dlen = x->dlen;
            p += x->dlen;
            break;
        default:
            it->src = SRC_ABSENT;
        }
    }
    j->n = n;
    j->single = single;
    j->db = tx->env.db;
    j->cf_t = tx->tabs[tab].cf_t;
    j->sh = troupe__ttxn_retain(tx->sh);
    j->clock = tx->env.clock;
    j->clock_ctx = tx->env.clock_ctx;
    j->cb = cb;
    j->arg = arg;
    /* declared: the job with its keys and buffered documents */
    e = troupe_runtime_work_in(tx->env.rt, TROUPE_LANE_STORAGE,
                               sizeof(*j) + n * sizeof(ritem) + bytes,
                               read_work, read_done, j);
    if (e != TROUPE_OK) {
        troupe__ttxn_release(j->sh);
        troupe_free(j);
    }
    return e;
}

troupe_err
troupe_txn_get(troupe_txn *tx, const char *table, const void *key, size_t klen,
               troupe_table_cb cb, void *arg)
{
    return read_start(tx, table, &key, &klen, 1, true, cb, arg);
}

troupe_err
troupe_txn_get_many(troupe_txn *tx, const char *table, const void *const *keys,
                    const size_t *klens, size_t n, troupe_table_cb cb,
                    void *arg)
{
    return read_start(tx, table, keys, klens, n, false, cb, arg);
}

void
troupe__txn_wake_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe__waiter_release(arg, err, rows);
}

/* troupe__waiter_finish for the calls that answer rows. */
troupe_err
troupe__txn_finish_rows(troupe__waiter *w, troupe_err started,
                        troupe_rows **rows)
{
    void *r = NULL;
    troupe_err e = troupe__waiter_finish(w, started, &r);
    *rows = r;
    return e;
}

troupe_err
troupe_txn_get_wait(troupe_txn *tx, const char *table, const void *key,
                    size_t klen, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_txn_get_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__txn_finish_rows(
        &w, troupe_txn_get(tx, table, key, klen, troupe__txn_wake_rows, &w),
        rows);
}

troupe_err
troupe_txn_get_many_wait(troupe_txn *tx, const char *table,
                         const void *const *keys, const size_t *klens, size_t n,
                         troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_txn_get_many_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__txn_finish_rows(&w,
                                   troupe_txn_get_many(tx, table, keys, klens,
                                                       n, troupe__txn_wake_rows,
                                                       &w),
                                   rows);
}
