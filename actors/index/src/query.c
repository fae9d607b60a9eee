/*
 * Index queries over storage (blocking; run on a worker).
 *
 * A query becomes one key range of the index family "x.<id>": leading
 * values are encoded with the very function derivation uses
 * (troupe__index_put_value, through troupe__index_put_query_value for the
 * map-entry form), so a value a row could be indexed under and
 * the same value in a query always encode alike; a prefix of values is the
 * codec's exact tuple-prefix range [enc, enc + 0xFF), never a byte-prefix
 * range (which would also match strings continuing with 0x00). Cursors are
 * storage.h's exact-key cursors, passed straight to the iterator, which
 * also rejects a cursor outside the range.
 *
 * Rows are read by primary key in the same snapshot as the entries, so an
 * entry and its row always come from one consistent view; an entry whose
 * row is missing is then corruption, not a race, and fails the query.
 * An iterator rather than one storage page per query lets a page skip
 * expired rows and still fill up to its limit.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/datafmt.h"
#include "troupe/storage.h"

static troupe_err
family(troupe_db *db, char kind, uint64_t id, troupe_cf **cf)
{
    char name[TROUPE__CF_NAME_LEN];
    troupe__cf_name(kind, id, name, sizeof(name));
    return troupe_db_cf(db, name, cf);
}

static uint64_t
wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Encodes a msgpack array of leading values into w. */
static troupe_err
encode_values(const troupe_index_def *d, const void *mp, size_t len,
              troupe_key_writer *w)
{
    troupe_reader r;
    uint32_t n;
    if (troupe_reader_init(&r, mp, len) != TROUPE_OK ||
        troupe_read_peek(&r) != TROUPE_MP_ARRAY ||
        troupe_read_array(&r, &n) != TROUPE_OK)
        return TROUPE_EPROTO;
    if (n == 0 || (d->fn_name == NULL && n > d->n_fields))
        return TROUPE_EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        int rc = d->fn_name == NULL
                     ? troupe__index_put_query_value(&r, d->fields[i].type, w)
                     : troupe__index_put_any(&r, w);
        if (rc < 0)
            return (troupe_err)-rc == TROUPE_ENOMEM ? TROUPE_ENOMEM
                                                    : TROUPE_EINVAL;
        if (rc == 0)
            return TROUPE_EINVAL; /* wrong type: can never match */
    }
    const uint8_t *k;
    size_t kl;
    troupe_err e = troupe_key_writer_finish(w, &k, &kl);
    if (e == TROUPE_OK && kl > TROUPE_KEY_MAX)
        e = TROUPE_EINVAL;
    return e;
}

/* The key range of q. The writers own the bytes the range points at. */
typedef struct qrange {
    troupe_key_writer a, b;
    troupe_range r;
    bool all;
} qrange;

static void
qrange_fini(qrange *q)
{
    troupe_key_writer_fini(&q->a);
    troupe_key_writer_fini(&q->b);
}

static troupe_err
qrange_make(const troupe__index_run *run, qrange *out)
{
    troupe_key_writer_init(&out->a);
    troupe_key_writer_init(&out->b);
    out->all = false;
    const troupe_index_query *q = run->q;
    const troupe_index_def *d = run->def;
    bool has_range = q->from != NULL || q->to != NULL;
    if ((q->values != NULL && has_range) ||
        (q->values == NULL && q->values_len != 0) ||
        (q->from == NULL && q->from_len != 0) ||
        (q->to == NULL && q->to_len != 0))
        return TROUPE_EINVAL;
    if (!d->ready)
        return TROUPE_ESTATE;
    troupe_err e;
    if (q->values != NULL) {
        if ((e = encode_values(d, q->values, q->values_len, &out->a)) !=
            TROUPE_OK)
            return e;
        return troupe_key_writer_range(&out->a, &out->r);
    }
    if (!has_range) {
        out->all = true;
        return TROUPE_OK;
    }
    const uint8_t *s = NULL, *t = NULL;
    size_t sl = 0, tl = 0;
    if (q->from != NULL) {
        if ((e = encode_values(d, q->from, q->from_len, &out->a)) != TROUPE_OK)
            return e;
        troupe_key_writer_finish(&out->a, &s, &sl);
    }
    if (q->to != NULL) {
        if ((e = encode_values(d, q->to, q->to_len, &out->b)) != TROUPE_OK)
            return e;
        troupe_key_writer_finish(&out->b, &t, &tl);
    }
    if (s != NULL && t != NULL) {
        if (troupe_key_cmp(s, sl, t, tl) >= 0)
            return TROUPE_EINVAL; /* from at or after to: empty */
    }
    troupe_range_init_bounds(&out->r, s, sl, t, tl);
    return TROUPE_OK;
}

/* ---- results ------------------------------------------------------------ */

/* A result as allocated here: what the user sees, then the cursor's
 * memory, which stays out of the public struct. */
typedef struct ires {
    troupe_index_result pub;
    uint8_t *cursor; /* pub.cursor's bytes, or NULL */
} ires;

troupe_index_result *
troupe__index_result_new(void)
{
    ires *r = troupe_calloc(1, sizeof(*r));
    return r != NULL ? &r->pub : NULL;
}

void
troupe_index_result_destroy(troupe_index_result *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        troupe_free((void *)r->hits[i].pk); /* one block per hit */
    troupe_free(r->hits);
    ires *ir = (ires *)r;
    troupe_free(ir->cursor);
    troupe_free(ir);
}

troupe_err
troupe__index_result_cursor(troupe_index_result *r, uint8_t tag, uint64_t id,
                            const void *key, size_t klen)
{
    uint8_t *c = troupe_malloc(klen + TROUPE_CURSOR_OVERHEAD);
    if (c == NULL)
        return TROUPE_ENOMEM;
    troupe__cursor_put(c, tag, id, key, klen);
    ires *ir = (ires *)r;
    troupe_free(ir->cursor);
    ir->cursor = c;
    r->cursor = c;
    r->cursor_len = klen + TROUPE_CURSOR_OVERHEAD;
    return TROUPE_OK;
}

troupe_err
troupe__index_hit_push(hitbuf *h, const void *key, size_t key_len,
                       const void *pk, size_t pk_len, const void *val,
                       size_t val_len, uint64_t exp)
{
    troupe_index_result *r = h->res;
    if (r->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        troupe_index_hit *v = troupe_realloc(r->hits, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        r->hits = v;
        h->cap = cap;
    }
    uint8_t *blk = troupe_malloc(pk_len + key_len + val_len + 1);
    if (blk == NULL)
        return TROUPE_ENOMEM;
    troupe_index_hit *x = &r->hits[r->n++];
    memset(x, 0, sizeof(*x));
    memcpy(blk, pk, pk_len);
    x->pk = blk;
    x->pk_len = pk_len;
    if (key != NULL) {
        memcpy(blk + pk_len, key, key_len);
        x->key = blk + pk_len;
        x->key_len = key_len;
    }
    if (val != NULL) {
        memcpy(blk + pk_len + key_len, val, val_len);
        x->val = blk + pk_len + key_len;
        x->val_len = val_len;
    }
    x->expires_at_ms = exp;
    return TROUPE_OK;
}

static troupe_err
query_check(troupe_db *db, const troupe__index_run *r)
{
    if (db == NULL || r == NULL || r->q == NULL || r->def == NULL ||
        (r->q->after == NULL && r->q->after_len != 0))
        return TROUPE_EINVAL;
    return TROUPE_OK;
}

/* One matched entry, in rows or covering form. */
static troupe_err
take_entry(troupe_db *db, troupe_cf *tcf, const troupe_snapshot *snap,
           const troupe_index_query *q, uint64_t now, const troupe_kv *kv,
           hitbuf *h)
{
    void *pk = NULL;
    size_t pk_len;
    troupe_err e = troupe_index_key_pk_copy(kv->key, kv->key_len, &pk, &pk_len);
    if (e != TROUPE_OK)
        return e == TROUPE_ENOMEM ? e : TROUPE_ECORRUPT;
    if (!q->rows) {
        troupe_reader r;
        if (troupe_reader_init(&r, kv->val, kv->val_len) != TROUPE_OK)
            e = TROUPE_ECORRUPT;
        else
            e = troupe__index_hit_push(h, kv->key, kv->key_len, pk, pk_len,
                                       kv->val, kv->val_len, 0);
        troupe_free(pk);
        return e;
    }
    void *row = NULL;
    size_t row_len = 0;
    e = troupe_db_get(db, tcf, snap, pk, pk_len, &row, &row_len);
    if (e == TROUPE_ENOENT)
        e = TROUPE_ECORRUPT; /* an entry without its row */
    int64_t exp = 0;
    const void *doc = NULL;
    size_t doc_len = 0;
    if (e == TROUPE_OK)
        e = troupe__envelope_parse(row, row_len, &exp, &doc, &doc_len);
    if (e == TROUPE_OK && !(exp != 0 && (uint64_t)exp <= now))
        e = troupe__index_hit_push(h, kv->key, kv->key_len, pk, pk_len, doc,
                                   doc_len, (uint64_t)exp);
    troupe_free(row);
    troupe_free(pk);
    return e;
}

troupe_err
troupe_index_query_run(troupe_db *db, const troupe__index_run *run,
                       troupe_index_result **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_err e = query_check(db, run);
    if (e != TROUPE_OK)
        return e;
    const troupe_index_query *q = run->q;
    if (q->limit == 0)
        return TROUPE_EINVAL;
    const void *after = NULL; /* the key of q->after: a cursor of this index */
    size_t alen = 0;
    if (q->after != NULL &&
        (e = troupe__cursor_key(q->after, q->after_len, TROUPE_CURSOR_INDEX,
                                run->def->id, &after, &alen)) != TROUPE_OK)
        return e;
    qrange qr;
    troupe_cf *xcf = NULL, *tcf = NULL;
    troupe_snapshot *own = NULL;
    troupe_iter *it = NULL;
    hitbuf h = {0};
    e = qrange_make(run, &qr);
    if (e == TROUPE_OK)
        e = family(db, 'x', run->def->id, &xcf);
    if (e == TROUPE_OK && q->rows)
        e = family(db, 't', run->table_id, &tcf);
    const troupe_snapshot *snap = run->snap;
    if (e == TROUPE_OK && snap == NULL && q->rows) {
        e = troupe_snapshot_create(db, &own);
        snap = own;
    }
    if (e == TROUPE_OK && (h.res = troupe__index_result_new()) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = troupe_iter_create(db, xcf, snap, qr.all ? NULL : &qr.r, after,
                               alen, q->reverse, &it);
    uint64_t now = run->now_ms != 0 ? run->now_ms : wall_ms();
    troupe_kv kv;
    bool end = false;
    while (e == TROUPE_OK && !end && h.res->n < q->limit) {
        troupe_err ie = troupe_iter_next(it, &kv);
        if (ie == TROUPE_ENOENT)
            end = true;
        else if (ie != TROUPE_OK)
            e = ie;
        else
            e = take_entry(db, tcf, snap, q, now, &kv, &h);
    }
    if (e == TROUPE_OK && !end) {
        troupe_err ie = troupe_iter_next(it, &kv);
        h.res->more = ie == TROUPE_OK;
        if (ie != TROUPE_OK && ie != TROUPE_ENOENT)
            e = ie;
    }
    if (e == TROUPE_OK && h.res->n > 0) {
        troupe_index_hit *last = &h.res->hits[h.res->n - 1];
        e = troupe__index_result_cursor(h.res, TROUPE_CURSOR_INDEX,
                                        run->def->id, last->key, last->key_len);
    }
    troupe_iter_destroy(it);
    troupe_snapshot_destroy(own);
    qrange_fini(&qr);
    if (e != TROUPE_OK) {
        troupe_index_result_destroy(h.res);
        return e;
    }
    *out = h.res;
    return TROUPE_OK;
}

/* Calls each(kv) for every entry q's range matches. */
static troupe_err
walk(troupe_db *db, const troupe__index_run *run,
     troupe_err (*each)(void *arg, const troupe_kv *kv), void *arg)
{
    qrange qr;
    troupe_cf *xcf = NULL;
    troupe_iter *it = NULL;
    troupe_err e = qrange_make(run, &qr);
    if (e == TROUPE_OK)
        e = family(db, 'x', run->def->id, &xcf);
    if (e == TROUPE_OK)
        e = troupe_iter_create(db, xcf, run->snap, qr.all ? NULL : &qr.r, NULL,
                               0, false, &it);
    troupe_kv kv;
    while (e == TROUPE_OK) {
        troupe_err ie = troupe_iter_next(it, &kv);
        if (ie == TROUPE_ENOENT)
            break;
        e = ie == TROUPE_OK ? each(arg, &kv) : ie;
    }
    troupe_iter_destroy(it);
    qrange_fini(&qr);
    return e;
}

static troupe_err
count_one(void *arg, const troupe_kv *kv)
{
    (*(uint64_t *)arg)++;
    return TROUPE_OK;
}

troupe_err
troupe_index_count(troupe_db *db, const troupe__index_run *run, uint64_t *out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = 0;
    troupe_err e = query_check(db, run);
    if (e != TROUPE_OK)
        return e;
    uint64_t n = 0;
    e = walk(db, run, count_one, &n);
    if (e == TROUPE_OK)
        *out = n;
    return e;
}

/* ---- AND ---------------------------------------------------------------- */

typedef struct pkset {
    struct pkref {
        uint8_t *p;
        size_t n;
    } * v;
    size_t n, cap;
} pkset;

static void
pkset_fini(pkset *s)
{
    for (size_t i = 0; i < s->n; i++)
        troupe_free(s->v[i].p);
    troupe_free(s->v);
}

static troupe_err
pk_collect(void *arg, const troupe_kv *kv)
{
    pkset *s = arg;
    if (s->n == TROUPE_INDEX_AND_MAX)
        return TROUPE_ETOOBIG;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct pkref *v = troupe_realloc(s->v, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    void *pk;
    size_t n;
    troupe_err e = troupe_index_key_pk_copy(kv->key, kv->key_len, &pk, &n);
    if (e != TROUPE_OK)
        return e == TROUPE_ENOMEM ? e : TROUPE_ECORRUPT;
    s->v[s->n].p = pk;
    s->v[s->n++].n = n;
    return TROUPE_OK;
}

static int
pk_cmp(const void *pa, const void *pb)
{
    const struct pkref *a = pa, *b = pb;
    return troupe_key_cmp(a->p, a->n, b->p, b->n);
}

static void
pkset_sort(pkset *s)
{
    if (s->n < 2)
        return;
    qsort(s->v, s->n, sizeof(*s->v), pk_cmp);
    size_t o = 1;
    for (size_t i = 1; i < s->n; i++) {
        if (pk_cmp(&s->v[o - 1], &s->v[i]) == 0)
            troupe_free(s->v[i].p);
        else
            s->v[o++] = s->v[i];
    }
    s->n = o;
}

troupe_err
troupe_index_query_and(troupe_db *db, const troupe__index_run *a,
                       const troupe__index_run *b, const void *after,
                       size_t after_len, size_t limit,
                       troupe_index_result **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_err e = query_check(db, a);
    if (e == TROUPE_OK)
        e = query_check(db, b);
    if (e == TROUPE_OK && (limit == 0 || (after == NULL && after_len != 0) ||
                           (after != NULL && after_len == 0)))
        e = TROUPE_EINVAL;
    if (e == TROUPE_OK && after != NULL) /* its pk: a cursor of this table */
        e = troupe__cursor_key(after, after_len, TROUPE_CURSOR_AND, a->table_id,
                               &after, &after_len);
    if (e != TROUPE_OK)
        return e;
    pkset sa = {0}, sb = {0};
    hitbuf h = {0};
    e = walk(db, a, pk_collect, &sa);
    if (e == TROUPE_OK)
        e = walk(db, b, pk_collect, &sb);
    if (e == TROUPE_OK && (h.res = troupe__index_result_new()) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        pkset_sort(&sa);
        pkset_sort(&sb);
        struct pkref cur = {(uint8_t *)after, after_len};
        size_t i = 0, j = 0;
        while (e == TROUPE_OK && i < sa.n && j < sb.n) {
            int c = pk_cmp(&sa.v[i], &sb.v[j]);
            if (c < 0) {
                i++;
            } else if (c > 0) {
                j++;
            } else {
                if (after == NULL || pk_cmp(&sa.v[i], &cur) > 0) {
                    if (h.res->n == limit) {
                        h.res->more = true;
                        break;
                    }
                    e = troupe__index_hit_push(&h, NULL, 0, sa.v[i].p,
                                               sa.v[i].n, NULL, 0, 0);
                }
                i++;
                j++;
            }
        }
    }
    if (e == TROUPE_OK && h.res->n > 0)
        e = troupe__index_result_cursor(h.res, TROUPE_CURSOR_AND, a->table_id,
                                        h.res->hits[h.res->n - 1].pk,
                                        h.res->hits[h.res->n - 1].pk_len);
    pkset_fini(&sa);
    pkset_fini(&sb);
    if (e != TROUPE_OK) {
        troupe_index_result_destroy(h.res);
        return e;
    }
    *out = h.res;
    return TROUPE_OK;
}
