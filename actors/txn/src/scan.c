/*
 * Scans in a transaction (troupe_txn_scan and its blocking twin): the
 * snapshot's rows merged with the transaction's buffered writes, read on
 * a worker, answered on scheduler 0.
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

/*
 * A scan merges the snapshot's rows of the range with the transaction's
 * buffered writes in it (a buffered document replaces or adds a row, a
 * buffered delete hides one), in key order, with the table scan's exact
 * cursor rules. The whole requested range [start, end) joins the read set
 * as a range, whatever the page covered: at commit, a key of it written
 * since the snapshot, or held by a write, is a conflict, and until the
 * commit is done no other write may enter it (no phantoms).
 */

typedef struct bitem {
    bool present;
    int64_t expires;
    const unsigned char *key;
    size_t klen;
    const unsigned char *doc;
    size_t dlen;
} bitem;

typedef struct sjob {
    troupe_db *db;
    troupe_cf *cf_t;
    ttxn_shared *sh;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    troupe_table_cb cb;
    void *arg;
    uint64_t table_id;
    const unsigned char *start, *end, *after;
    size_t slen, elen, alen;
    size_t limit;
    bool reverse;
    troupe_err err;
    troupe_body *body;
    size_t nb;
    bitem *b; /* buffered writes in the range past the cursor, in order */
} sjob;

/* The merge of the snapshot's rows (an iterator) with a job's buffered
 * writes, in scan order. */
typedef struct smerge {
    troupe_iter *it;
    troupe_kv kv; /* the snapshot's row in hand, when have */
    bool have, done;
    size_t bi; /* the next buffered write */
} smerge;

/* One candidate row. pe: the envelope's parse error of a snapshot row
 * (such a row is not present). */
typedef struct scand {
    const void *key, *doc;
    size_t klen, dlen;
    int64_t exp;
    troupe_err pe;
    bool present;
} scand;

/* The next candidate into *c: the snapshot's row or the buffered write,
 * whichever comes first in scan order (a buffered write replaces the row
 * of its key). ENOENT when both are exhausted; the iterator's errors. */
static troupe_err
scan_next(sjob *j, smerge *m, int64_t now, scand *c)
{
    if (!m->have && !m->done) {
        troupe_err ie = troupe_iter_next(m->it, &m->kv);
        if (ie == TROUPE_ENOENT)
            m->done = true;
        else if (ie != TROUPE_OK)
            return ie;
        else
            m->have = true;
    }
    if (!m->have && m->bi == j->nb)
        return TROUPE_ENOENT;
    bool from_buf = !m->have;
    if (m->have && m->bi < j->nb) {
        int cmp = troupe_key_cmp(m->kv.key, m->kv.key_len, j->b[m->bi].key,
                                 j->b[m->bi].klen);
        if (j->reverse)
            cmp = -cmp;
        if (cmp >= 0)
            from_buf = true;
        if (cmp == 0)
            m->have = false; /* the buffered write replaces the row */
    }
    *c = (scand){.pe = TROUPE_OK};
    if (from_buf) {
        const bitem *b = &j->b[m->bi++];
        c->key = b->key;
        c->klen = b->klen;
        c->present = b->present && troupe__row_live(b->expires, now);
        c->exp = b->expires;
        c->doc = b->doc;
        c->dlen = b->dlen;
    } else {
        c->key = m->kv.key;
        c->klen = m->kv.key_len;
        c->pe = troupe__envelope_parse(m->kv.val, m->kv.val_len, &c->exp,
                                       &c->doc, &c->dlen);
        c->present = c->pe == TROUPE_OK && troupe__row_live(c->exp, now);
        m->have = false;
    }
    return TROUPE_OK;
}

static void
scan_work(void *arg)
{
    sjob *j = arg;
    int64_t now = j->clock(j->clock_ctx);
    troupe_range rg;
    troupe_range_init_bounds(&rg, j->start, j->slen, j->end, j->elen);
    smerge m = {0};
    troupe_err e = troupe_iter_create(j->db, j->cf_t, j->sh->snap, &rg,
                                      j->after, j->alen, j->reverse, &m.it);
    troupe_packer rows;
    troupe_pack_init(&rows);
    size_t *off = troupe_calloc(j->limit, sizeof(*off));
    if (e == TROUPE_OK && off == NULL)
        e = TROUPE_ENOMEM;
    unsigned char *cur = NULL;
    size_t clen = 0, n = 0;
    bool more = false;
    while (e == TROUPE_OK) {
        scand c;
        troupe_err ne = scan_next(j, &m, now, &c);
        if (ne == TROUPE_ENOENT)
            break;
        if (ne != TROUPE_OK) {
            e = ne;
            break;
        }
        if (n == j->limit) {
            if (c.pe != TROUPE_OK || c.present) { /* the next page has a say */
                more = true;
                break;
            }
            continue;
        }
        if (c.pe != TROUPE_OK) {
            e = c.pe;
            break;
        }
        if (!c.present)
            continue;
        troupe_pack_data(&rows, &off[n++]);
        troupe__table_pack_row(&rows, c.key, c.klen, c.exp, c.doc, c.dlen);
        unsigned char *nc = troupe_realloc(cur, c.klen);
        if (nc == NULL) {
            e = TROUPE_ENOMEM;
            break;
        }
        cur = nc;
        memcpy(cur, c.key, c.klen);
        clen = c.klen;
    }
    if (e == TROUPE_OK)
        e = troupe__txn_rows_body(&rows, off, n, n > 0 ? cur : NULL, clen, more,
                                  &j->body);
    troupe_pack_fini(&rows);
    troupe_iter_destroy(m.it);
    troupe_free(cur);
    troupe_free(off);
    j->err = e;
}

static void
scan_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    sjob *j = arg;
    troupe_rows *rows = NULL;
    troupe_err e = j->err;
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(j->body, &rows);
    if (e == TROUPE_OK &&
        (e = troupe__rows_cursor_wrap(rows, j->table_id)) != TROUPE_OK) {
        troupe_rows_destroy(rows);
        rows = NULL;
    }
    troupe_body_release(j->body);
    troupe__ttxn_release(j->sh);
    troupe_table_cb cb = j->cb;
    void *cb_arg = j->arg;
    troupe_free(j);
    cb(e, rows, cb_arg);
}

/* Adds [start, end) of tab to the read set (once). */
static troupe_err
range_add(troupe_txn *tx, uint32_t tab, const troupe_scan_opts *so)
{
    for (size_t i = 0; i < tx->nranges; i++) {
        const xrange *r = &tx->ranges[i];
        if (r->tab == tab && (r->start == NULL) == (so->start == NULL) &&
            (r->end == NULL) == (so->end == NULL) &&
            (so->start == NULL || troupe_key_cmp(r->start, r->slen, so->start,
                                                 so->start_len) == 0) &&
            (so->end == NULL ||
             troupe_key_cmp(r->end, r->elen, so->end, so->end_len) == 0))
            return TROUPE_OK;
    }
    if (tx->nkeys + tx->nranges >= tx->max_keys)
        return TROUPE_ETOOBIG;
    xrange *v = troupe_realloc(tx->ranges, (tx->nranges + 1) * sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    tx->ranges = v;
    unsigned char *d = troupe_malloc(so->start_len + so->end_len + 1);
    if (d == NULL)
        return TROUPE_ENOMEM;
    xrange *r = &v[tx->nranges];
    *r = (xrange){.tab = tab};
    r->start = d; /* the block's owner, also when start is unbounded */
    if (so->start != NULL) {
        memcpy(d, so->start, so->start_len);
        r->slen = so->start_len;
    }
    if (so->end != NULL) {
        r->end = d + so->start_len;
        memcpy(r->end, so->end, so->end_len);
        r->elen = so->end_len;
    }
    tx->nranges++;
    tx->tabs[tab].nrg++;
    return TROUPE_OK;
}

static int
bitem_cmp(const void *a, const void *b)
{
    const xkey *x = *(const xkey *const *)a, *y = *(const xkey *const *)b;
    return troupe_key_cmp(x->key, x->klen, y->key, y->klen);
}

/* The buffered writes of tab in so's range and past its cursor, in scan
 * order: *out (troupe_malloc'ed, *nb_out of them; *bytes_out, the size of
 * their keys and documents). ENOMEM. */
static troupe_err
scan_buffered(const troupe_txn *tx, uint32_t tab, const troupe_scan_opts *so,
              xkey ***out, size_t *nb_out, size_t *bytes_out)
{
    size_t nb = 0, bytes = 0;
    xkey **v = troupe_malloc((tx->nkeys ? tx->nkeys : 1) * sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < tx->nkeys; i++) {
        xkey *x = tx->keys[i];
        if (x->tab != tab || x->kind == K_NONE)
            continue;
        if (so->start != NULL &&
            troupe_key_cmp(x->key, x->klen, so->start, so->start_len) < 0)
            continue;
        if (so->end != NULL &&
            troupe_key_cmp(x->key, x->klen, so->end, so->end_len) >= 0)
            continue;
        if (so->after != NULL) {
            int c = troupe_key_cmp(x->key, x->klen, so->after, so->after_len);
            if (so->reverse ? c >= 0 : c <= 0)
                continue;
        }
        v[nb++] = x;
        bytes += x->klen + x->dlen;
    }
    if (nb > 1)
        qsort(v, nb, sizeof(*v), bitem_cmp);
    if (so->reverse)
        for (size_t i = 0; i < nb / 2; i++) {
            xkey *t = v[i];
            v[i] = v[nb - 1 - i];
            v[nb - 1 - i] = t;
        }
    *out = v;
    *nb_out = nb;
    *bytes_out = bytes;
    return TROUPE_OK;
}

/* The scan's job over tab: copies of the buffered writes v[0..nb) (bytes:
 * their keys and documents) and of so's bounds and cursor in its one
 * block, and a reference to the snapshot. NULL: ENOMEM. */
static sjob *
sjob_new(const troupe_txn *tx, uint32_t tab, const troupe_scan_opts *so,
         xkey *const *v, size_t nb, size_t bytes)
{
    size_t rb = so->start_len + so->end_len + so->after_len;
    sjob *j =
        troupe_calloc(1, sizeof(*j) + nb * sizeof(bitem) + bytes + rb + 1);
    if (j == NULL)
        return NULL;
    j->b = (bitem *)(j + 1);
    unsigned char *d = (unsigned char *)&j->b[nb];
    for (size_t i = 0; i < nb; i++) {
        bitem *b = &j->b[i];
        b->present = v[i]->kind == TROUPE__PART_INSERT ||
                     v[i]->kind == TROUPE__PART_UPDATE ||
                     v[i]->kind == TROUPE__PART_UPSERT;
        b->expires = v[i]->expires;
        memcpy(d, v[i]->key, v[i]->klen);
        b->key = d;
        b->klen = v[i]->klen;
        d += v[i]->klen;
        if (b->present) {
            memcpy(d, v[i]->doc, v[i]->dlen);
            b->doc = d;
            b->dlen = v[i]->dlen;
            d += v[i]->dlen;
        }
    }
    j->nb = nb;
    if (so->start != NULL) {
        memcpy(d, so->start, so->start_len);
        j->start = d;
        j->slen = so->start_len;
        d += so->start_len;
    }
    if (so->end != NULL) {
        memcpy(d, so->end, so->end_len);
        j->end = d;
        j->elen = so->end_len;
        d += so->end_len;
    }
    if (so->after != NULL) {
        memcpy(d, so->after, so->after_len);
        j->after = d;
        j->alen = so->after_len;
    }
    j->limit = so->limit;
    j->reverse = so->reverse;
    j->db = tx->env.db;
    j->cf_t = tx->tabs[tab].cf_t;
    j->table_id = tx->tabs[tab].id;
    j->sh = troupe__ttxn_retain(tx->sh);
    j->clock = tx->env.clock;
    j->clock_ctx = tx->env.clock_ctx;
    return j;
}

troupe_err
troupe_txn_scan(troupe_txn *tx, const char *table, const troupe_scan_opts *sc,
                troupe_table_cb cb, void *arg)
{
    if (tx == NULL || table == NULL || cb == NULL)
        return TROUPE_EINVAL;
    troupe_err ce = troupe__scan_opts_check(sc);
    if (ce != TROUPE_OK)
        return ce;
    if (tx->state != TX_OPEN || tx->mode == MODE_VERSIONED)
        return TROUPE_ESTATE;
    uint32_t tab;
    troupe_scan_opts raw; /* the cursor's key: ERANGE for another table's */
    troupe_err e = troupe__txn_tab_of(tx, table, &tab);
    if (e == TROUPE_OK)
        e = troupe__scan_cursor_unwrap(sc, tx->tabs[tab].id, &raw);
    const troupe_scan_opts *so = &raw;
    if (e == TROUPE_OK)
        e = range_add(tx, tab, so);
    if (e != TROUPE_OK)
        return e;
    tx->mode = MODE_ORDINARY;
    xkey **v;
    size_t nb, bytes;
    if ((e = scan_buffered(tx, tab, so, &v, &nb, &bytes)) != TROUPE_OK)
        return e;
    sjob *j = sjob_new(tx, tab, so, v, nb, bytes);
    troupe_free(v);
    if (j == NULL)
        return TROUPE_ENOMEM;
    j->cb = cb;
    j->arg = arg;
    /* declared: the job with the buffered rows it merges */
    e = troupe_runtime_work_in(tx->env.rt, TROUPE_LANE_STORAGE,
                               sizeof(*j) + nb * sizeof(bitem) + bytes,
                               scan_work, scan_done, j);
    if (e != TROUPE_OK) {
        troupe__ttxn_release(j->sh);
        troupe_free(j);
    }
    return e;
}

troupe_err
troupe_txn_scan_wait(troupe_txn *tx, const char *table,
                     const troupe_scan_opts *so, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_txn_scan_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__txn_finish_rows(
        &w, troupe_txn_scan(tx, table, so, troupe__txn_wake_rows, &w), rows);
}
