/*
 * The table's reads: get, get_many and scan of the row family, straight
 * into troupe_rows. The client calls (client.c) run them on the caller's
 * thread (memory only on a loop thread: `cached`, EAGAIN when a block is
 * not in memory); the table actor runs the rest on workers and packs the
 * rows into its reply body (troupe__table_read). The actor's half, at the
 * end of this file, owns tstate.reads: reads queue until the actor's
 * READ_FLUSH hands them to workers in batches.
 *
 * The rows of one read live in one buffer (keys and documents copied out
 * of the iterator) or, for a get, in the value the storage handed out;
 * the rows own it (trows.mem, table_int.h).
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

/* ---- building troupe_rows ---------------------------------------------- */

typedef struct rent {
    size_t koff, klen, doff, dlen;
    int64_t exp;
} rent;

typedef struct rbuild {
    unsigned char *data;
    size_t len, cap;
    rent *ents;
    size_t n, ecap;
    troupe_err err;
} rbuild;

static bool
rb_reserve(rbuild *b, size_t more)
{
    if (b->len + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + more)
        cap *= 2;
    unsigned char *d = troupe_realloc(b->data, cap);
    if (d == NULL) {
        b->err = TROUPE_ENOMEM;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

/* Room for at least cap entries. */
static bool
rb_ents(rbuild *b, size_t cap)
{
    if (cap <= b->ecap)
        return true;
    rent *e = troupe_realloc(b->ents, cap * sizeof(*e));
    if (e == NULL) {
        b->err = TROUPE_ENOMEM;
        return false;
    }
    b->ents = e;
    b->ecap = cap;
    return true;
}

static void
rb_add(rbuild *b, const void *key, size_t klen, int64_t exp, const void *doc,
       size_t dlen)
{
    if (b->err != TROUPE_OK)
        return;
    if (b->n == b->ecap && !rb_ents(b, b->ecap ? b->ecap * 2 : 16))
        return;
    if (!rb_reserve(b, klen + dlen))
        return;
    rent *e = &b->ents[b->n++];
    e->koff = b->len;
    e->klen = klen;
    memcpy(b->data + b->len, key, klen);
    b->len += klen;
    e->doff = b->len;
    e->dlen = dlen;
    memcpy(b->data + b->len, doc, dlen);
    b->len += dlen;
    e->exp = exp;
}

static void
rb_fini(rbuild *b)
{
    troupe_free(b->data);
    troupe_free(b->ents);
}

/* The rows; for scans the cursor is the last row's key. Frees b. */
static troupe_err
rb_finish(rbuild *b, bool scan, bool more, troupe_rows **out)
{
    troupe_err e = b->err;
    trows *t = NULL;
    if (e == TROUPE_OK) {
        t = troupe__rows_alloc(b->n, 0, NULL);
        if (t == NULL)
            e = TROUPE_ENOMEM;
    }
    if (e != TROUPE_OK) {
        rb_fini(b);
        return e;
    }
    troupe_rows *r = &t->pub;
    troupe_row *v = (troupe_row *)r->rows;
    for (size_t i = 0; i < b->n; i++) {
        const rent *en = &b->ents[i];
        v[i] = (troupe_row){b->data + en->koff, en->klen, b->data + en->doff,
                            en->dlen, en->exp};
    }
    r->n = b->n;
    if (scan && b->n > 0) {
        r->cursor = v[b->n - 1].key;
        r->cursor_len = v[b->n - 1].key_len;
    }
    r->more = more;
    t->mem = b->data;
    troupe_free(b->ents);
    *out = r;
    return TROUPE_OK;
}

/* ---- reads -------------------------------------------------------------- */

troupe_err
troupe__read_get(const tread_src *s, const void *key, size_t klen,
                 troupe_rows **out)
{
    void *val = NULL;
    size_t vlen = 0;
    troupe_err e =
        s->cached ? troupe_db_get_cached(s->db, s->cf, key, klen, &val, &vlen)
                  : troupe_db_get(s->db, s->cf, NULL, key, klen, &val, &vlen);
    int64_t exp = 0;
    const void *doc = NULL;
    size_t dlen = 0;
    if (e == TROUPE_OK)
        e = troupe__envelope_parse(val, vlen, &exp, &doc, &dlen);
    if (e == TROUPE_OK && !troupe__row_live(exp, s->now))
        e = TROUPE_ENOENT;
    /* One block: rows, the row and the key; the doc stays in val. */
    trows *t = NULL;
    void *k = NULL;
    if (e == TROUPE_OK) {
        t = troupe__rows_alloc(1, klen, &k);
        if (t == NULL)
            e = TROUPE_ENOMEM;
    }
    if (e != TROUPE_OK) {
        troupe_free(val);
        return e;
    }
    memcpy(k, key, klen);
    *(troupe_row *)t->pub.rows = (troupe_row){k, klen, doc, dlen, exp};
    t->pub.n = 1;
    t->mem = val;
    *out = &t->pub;
    return TROUPE_OK;
}

troupe_err
troupe__read_get_many(const tread_src *s, const void *const *keys,
                      const size_t *klens, size_t n, troupe_rows **out)
{
    if (n == 0) { /* no keys: an empty result, nothing read */
        rbuild none = {0};
        return rb_finish(&none, false, false, out);
    }
    void **vals = troupe_calloc(n, sizeof(*vals));
    size_t *vlens = troupe_calloc(n, sizeof(*vlens));
    troupe_err *errs = troupe_calloc(n, sizeof(*errs));
    troupe_err e = TROUPE_OK;
    if (!vals || !vlens || !errs)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = s->cached ? troupe_db_multi_get_cached(s->db, s->cf, n, keys, klens,
                                                   vals, vlens, errs)
                      : troupe_db_multi_get(s->db, s->cf, NULL, n, keys, klens,
                                            vals, vlens, errs);
    rbuild b = {0};
    for (size_t i = 0; e == TROUPE_OK && i < n; i++) {
        if (errs[i] == TROUPE_ENOENT)
            continue;
        if ((e = errs[i]) != TROUPE_OK)
            break;
        int64_t exp;
        const void *doc;
        size_t dlen;
        e = troupe__envelope_parse(vals[i], vlens[i], &exp, &doc, &dlen);
        if (e == TROUPE_OK && troupe__row_live(exp, s->now))
            rb_add(&b, keys[i], klens[i], exp, doc, dlen);
    }
    for (size_t i = 0; vals != NULL && i < n; i++)
        troupe_free(vals[i]);
    troupe_free(vals);
    troupe_free(vlens);
    troupe_free(errs);
    if (e != TROUPE_OK) {
        rb_fini(&b);
        return e;
    }
    return rb_finish(&b, false, false, out);
}

troupe_err
troupe__scan_opts_check(const troupe_scan_opts *so)
{
    if (so == NULL || so->limit == 0 || so->limit > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    if ((so->start == NULL) != (so->start_len == 0) ||
        (so->end == NULL) != (so->end_len == 0) ||
        (so->after == NULL) != (so->after_len == 0))
        return TROUPE_EINVAL;
    if (so->start_len > TROUPE_KEY_MAX || so->end_len > TROUPE_KEY_MAX ||
        so->after_len > TROUPE_CURSOR_MAX)
        return TROUPE_ETOOBIG;
    if (so->start != NULL && so->end != NULL) {
        if (troupe_key_cmp(so->start, so->start_len, so->end, so->end_len) >= 0)
            return TROUPE_EINVAL; /* inverted, or empty: start == end */
    }
    return TROUPE_OK;
}

troupe_err
troupe__scan_cursor_unwrap(const troupe_scan_opts *so, uint64_t table_id,
                           troupe_scan_opts *raw)
{
    *raw = *so;
    if (so->after == NULL)
        return TROUPE_OK;
    return troupe__cursor_key(so->after, so->after_len, TROUPE_CURSOR_ROWS,
                              table_id, &raw->after, &raw->after_len);
}

troupe_err
troupe__read_scan(const tread_src *s, const troupe_scan_opts *so,
                  troupe_rows **out)
{
    if (so->limit == 0 || so->limit > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    troupe_range rg;
    troupe_range_init_bounds(&rg, so->start, so->start_len, so->end,
                             so->end_len);
    troupe_iter *it = NULL;
    troupe_err e =
        s->cached
            ? troupe_iter_create_cached(s->db, s->cf, NULL, &rg, so->after,
                                        so->after_len, so->reverse, &it)
            : troupe_iter_create(s->db, s->cf, NULL, &rg, so->after,
                                 so->after_len, so->reverse, &it);
    if (e != TROUPE_OK)
        return e;
    rbuild b = {0};
    /* room for a typical page at once (rows of ~100 B): growing the
     * buffer row by row showed up as realloc copies in scan profiles
     * (a 100-row page outgrew a 64-row reserve by one 8 KiB copy) */
    size_t hint = so->limit < 256 ? so->limit : 256;
    if (!rb_reserve(&b, hint * 128) || !rb_ents(&b, so->limit)) {
        rb_fini(&b);
        troupe_iter_destroy(it);
        return TROUPE_ENOMEM;
    }
    bool more = false;
    troupe_kv kv;
    while (b.err == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        int64_t exp;
        const void *doc;
        size_t dlen;
        troupe_err pe =
            troupe__envelope_parse(kv.val, kv.val_len, &exp, &doc, &dlen);
        if (b.n == so->limit) {
            /* one row past the page: corrupt or live, the next page has
             * something to say; expired ones do not count */
            if (pe != TROUPE_OK || troupe__row_live(exp, s->now)) {
                more = true;
                break;
            }
            continue;
        }
        if (pe != TROUPE_OK) {
            e = pe;
            break;
        }
        if (troupe__row_live(exp, s->now))
            rb_add(&b, kv.key, kv.key_len, exp, doc, dlen);
    }
    troupe_iter_destroy(it);
    if (e == TROUPE_ENOENT)
        e = TROUPE_OK;
    if (e != TROUPE_OK) {
        rb_fini(&b);
        return e;
    }
    return rb_finish(&b, true, more, out);
}

/* ---- the actor's side: request bodies --------------------------------- */

/* A get's key from its request body [key]; EPROTO if malformed. */
static troupe_err
get_key(troupe_reader *r, const void **key, size_t *klen)
{
    troupe_read_array_n(r, 1);
    troupe_read_bin(r, TROUPE_KEY_MAX, key, klen);
    if (troupe_read_end(r) != TROUPE_OK || *klen == 0)
        return TROUPE_EPROTO;
    return TROUPE_OK;
}

static troupe_err
parse_get_many(troupe_reader *r, const void ***keys, size_t **klens, size_t *n)
{
    uint32_t cnt = 0;
    troupe_read_array_n(r, 1);
    troupe_read_array(r, &cnt);
    if (r->err != TROUPE_OK || cnt == 0 || cnt > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EPROTO;
    *keys = troupe_calloc(cnt, sizeof(**keys));
    *klens = troupe_calloc(cnt, sizeof(**klens));
    if (*keys == NULL || *klens == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t i = 0; i < cnt; i++) {
        troupe_read_bin(r, TROUPE_KEY_MAX, &(*keys)[i], &(*klens)[i]);
        if (r->err == TROUPE_OK && (*klens)[i] == 0)
            return TROUPE_EPROTO;
    }
    if (troupe_read_end(r) != TROUPE_OK)
        return TROUPE_EPROTO;
    *n = cnt;
    return TROUPE_OK;
}

static void
read_opt_bin(troupe_reader *r, const void **p, size_t *n)
{
    *p = NULL;
    *n = 0;
    if (!troupe_read_try_nil(r)) {
        troupe_read_bin(r, TROUPE_KEY_MAX, p, n);
        if (r->err == TROUPE_OK && *n == 0)
            r->err = TROUPE_EPROTO;
    }
}

static troupe_err
parse_scan(troupe_reader *r, troupe_scan_opts *so)
{
    uint32_t limit = 0;
    troupe_read_array_n(r, 5);
    read_opt_bin(r, &so->start, &so->start_len);
    read_opt_bin(r, &so->end, &so->end_len);
    read_opt_bin(r, &so->after, &so->after_len);
    troupe_read_u32(r, &limit);
    troupe_read_bool(r, &so->reverse);
    if (troupe_read_end(r) != TROUPE_OK)
        return TROUPE_EPROTO;
    so->limit = limit;
    return TROUPE_OK;
}

troupe_err
troupe__table_read(troupe_db *db, troupe_cf *cf, int64_t now, uint32_t kind,
                   const void *req, size_t len, troupe_body **out)
{
    const tread_src s = {db, cf, false, now};
    troupe_reader r;
    if (troupe_reader_init(&r, req, len) != TROUPE_OK)
        return TROUPE_EPROTO;
    troupe_rows *rows = NULL;
    troupe_err e;
    if (kind == TABLE_GET) {
        const void *key;
        size_t klen;
        e = get_key(&r, &key, &klen);
        if (e == TROUPE_OK)
            e = troupe__read_get(&s, key, klen, &rows);
    } else if (kind == TABLE_GET_MANY) {
        const void **keys = NULL;
        size_t *klens = NULL, n = 0;
        e = parse_get_many(&r, &keys, &klens, &n);
        if (e == TROUPE_OK)
            e = troupe__read_get_many(&s, keys, klens, n, &rows);
        troupe_free(keys);
        troupe_free(klens);
    } else if (kind == TABLE_SCAN) {
        troupe_scan_opts so = {0};
        e = parse_scan(&r, &so);
        if (e == TROUPE_OK)
            e = troupe__read_scan(&s, &so, &rows);
    } else {
        e = TROUPE_EINVAL;
    }
    if (e == TROUPE_OK)
        e = troupe__rows_pack(rows, out);
    troupe_rows_destroy(rows);
    return e;
}

/* ---- the actor's disk reads (worker thread) ---------------------------- */

typedef struct rjob {
    troupe_runtime *rt;
    troupe_addr asker;
    uint64_t corr;
    uint32_t kind;
    ttable_cfg cfg;
    troupe_body *req;
    struct rjob *next; /* the rest of this job's batch */
} rjob;

static void
read_work(void *arg)
{
    rjob *j = arg;
    troupe_body *body = NULL;
    troupe_err e = troupe__table_read(
        j->cfg.db, j->cfg.cf_t, j->cfg.clock(j->cfg.clock_ctx), j->kind,
        troupe_body_data(j->req), troupe_body_len(j->req), &body);
    troupe_runtime_reply(j->rt, j->asker, j->corr, e,
                         e == TROUPE_OK ? &body : NULL);
}

static void
rjob_free(void *arg)
{
    rjob *j = arg;
    while (j != NULL) {
        rjob *nx = j->next;
        troupe_body_release(j->req);
        troupe__tschema_release(j->cfg.schema);
        troupe_free(j);
        j = nx;
    }
}

/* Reads per worker job: enough to amortise the wakeup, few enough that
 * a burst of scans still spreads over the workers. */
#define READ_BATCH 16

/* One worker job: the batch's reads one after another. (They are the
 * reads the caller could not serve from memory: each needs the disk.) */
static void
read_batch_work(void *arg)
{
    for (rjob *j = arg; j != NULL; j = j->next)
        read_work(j);
}

/* Sent to itself by troupe__reads_h_read when the first read queues:
 * runs after every read already in the mailbox, and hands them to
 * workers in jobs of READ_BATCH (one wakeup and one READ_DONE per job,
 * not per read). */
troupe_err
troupe__reads_h_flush(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (m->ptr != s) /* only the flush troupe__reads_h_read sent counts */
        return troupe__table_no_payload(self, m);
    rjob *list = s->reads.head;
    s->reads.head = s->reads.tail = NULL;
    s->reads.flush_sent = false;
    while (list != NULL) {
        rjob *head = list, *t = list;
        for (int k = 1; k < READ_BATCH && t->next != NULL; k++)
            t = t->next;
        list = t->next;
        t->next = NULL;
        uint64_t held = 0;
        for (rjob *j = head; j != NULL; j = j->next)
            held += sizeof(*j) + troupe_body_len(j->req);
        troupe_err e = troupe_work_submit_in(self, TROUPE_LANE_STORAGE, held,
                                             read_batch_work, head,
                                             TABLE_READ_DONE, rjob_free);
        if (e != TROUPE_OK) {
            for (rjob *j = head; j != NULL; j = j->next)
                troupe_runtime_reply(j->rt, j->asker, j->corr, e, NULL);
            rjob_free(head);
        } else {
            troupe__table_job_begin(s);
        }
    }
    troupe__table_job_end(s); /* the flush itself */
    return TROUPE_OK;
}

troupe_err
troupe__reads_h_read(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    troupe_runtime *rt = troupe_actor_runtime(self);
    if (m->corr == 0)
        return TROUPE_OK; /* a read nobody waits for */
    if (m->body == NULL || s->life.closing) {
        troupe_runtime_reply(rt, m->from, m->corr,
                             s->life.closing ? TROUPE_ECLOSED : TROUPE_EPROTO,
                             NULL);
        return TROUPE_OK;
    }
    rjob *j = troupe_malloc(sizeof(*j));
    if (j == NULL) {
        troupe_runtime_reply(rt, m->from, m->corr, TROUPE_ENOMEM, NULL);
        return TROUPE_OK;
    }
    j->rt = rt;
    j->asker = m->from;
    j->corr = m->corr;
    j->kind = m->kind;
    j->cfg = s->cfg;
    troupe__tschema_retain(j->cfg.schema);
    j->req = troupe_body_retain(m->body);
    j->next = NULL;
    if (!s->reads.flush_sent) {
        troupe_msg *fm = NULL;
        troupe_err e = troupe_msg_create(&fm, TABLE_READ_FLUSH, NULL, 0);
        if (e == TROUPE_OK) {
            /* ptr set: a completion, exempt from the mailbox bound and
             * from shutdown's ECLOSED, as each read's own job was; no
             * drop (troupe__reads_stop answers what is still queued) */
            fm->ptr = s;
            e = troupe_runtime_send(rt, troupe_self(self), &fm);
        }
        if (e != TROUPE_OK) {
            rjob_free(j);
            troupe_runtime_reply(rt, m->from, m->corr, e, NULL);
            return TROUPE_OK;
        }
        s->reads.flush_sent = true;
        /* until the flush ran: quiescing waits for it */
        troupe__table_job_begin(s);
    }
    if (s->reads.tail != NULL)
        s->reads.tail->next = j;
    else
        s->reads.head = j;
    s->reads.tail = j;
    return TROUPE_OK;
}

troupe_err
troupe__reads_h_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (m->ptr == NULL)
        return troupe__table_no_payload(self, m);
    rjob_free(m->ptr);
    troupe__table_job_end(s);
    return TROUPE_OK;
}

/* Reads still waiting for their READ_FLUSH: answered, never run. */
void
troupe__reads_stop(troupe_actor *self, tstate *s)
{
    while (s->reads.head != NULL) {
        rjob *j = s->reads.head;
        s->reads.head = j->next;
        j->next = NULL;
        troupe_runtime_reply(j->rt, j->asker, j->corr, TROUPE_ECLOSED, NULL);
        rjob_free(j);
    }
    s->reads.tail = NULL;
}
