/*
 * Expired-row purges of the table actor (tstate.purge): passes over the
 * row family that delete rows whose envelope expired, behind each key's
 * lock, a bounded number at a time.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

/*
 * A purge pass walks the row family in steps of PURGE_BATCH rows (a scan
 * on a worker that keeps the keys whose envelope expired by the clock)
 * and queues one TABLE_PURGE_OP per expired key behind that key's lock,
 * like an index build: the op reads row and manifest again and deletes
 * row, manifest and every index entry in one batch only if the row is
 * still there and still expired (a write since the scan may have renewed
 * it). The next step starts when every op of this one finished, so at
 * most PURGE_BATCH deletes are in flight and other requests run between
 * steps. A malformed envelope is left alone (verify reports it).
 */
#define PURGE_BATCH 256

typedef struct tpurge {
    troupe_addr asker;
    uint64_t corr;
    unsigned char *cursor;
    size_t clen;
    bool more;
    size_t outstanding;
    uint64_t scanned;
    uint64_t purged;
    uint32_t steps;
    troupe_err err;
} tpurge;

typedef struct pjob {
    troupe_db *db;
    troupe_cf *cf_t;
    int64_t now;
    unsigned char *after;
    size_t alen;
    troupe_err err;
    troupe_page *page;
    size_t nexp;
    size_t *exp; /* indexes into page->items of the expired rows */
} pjob;

static void
pjob_free(void *arg)
{
    pjob *j = arg;
    troupe_page_destroy(j->page);
    troupe_free(j->after);
    troupe_free(j->exp);
    troupe_free(j);
}

static void
purge_work(void *arg)
{
    pjob *j = arg;
    j->err = troupe_db_scan(j->db, j->cf_t, NULL, NULL, j->after, j->alen,
                            PURGE_BATCH, false, &j->page);
    if (j->err != TROUPE_OK || j->page->n == 0)
        return;
    j->exp = troupe_malloc(j->page->n * sizeof(*j->exp));
    if (j->exp == NULL) {
        j->err = TROUPE_ENOMEM;
        return;
    }
    for (size_t i = 0; i < j->page->n; i++) {
        int64_t exp = 0;
        const void *doc;
        size_t dl;
        const troupe_kv *kv = &j->page->items[i];
        if (troupe__envelope_parse(kv->val, kv->val_len, &exp, &doc, &dl) ==
                TROUPE_OK &&
            !troupe__row_live(exp, j->now))
            j->exp[j->nexp++] = i;
    }
}

static void
purge_finish(troupe_actor *self, tstate *s)
{
    tpurge *p = s->purge;
    s->purge = NULL;
    troupe_err e = p->err;
    troupe_body *b = NULL;
    if (e == TROUPE_OK) {
        troupe_packer pk;
        troupe_pack_init(&pk);
        troupe_pack_array(&pk, 3);
        troupe_pack_uint(&pk, p->scanned);
        troupe_pack_uint(&pk, p->purged);
        troupe_pack_uint(&pk, p->steps);
        e = troupe_pack_take_body(&pk, &b);
    }
    troupe_runtime_reply(troupe_actor_runtime(self), p->asker, p->corr, e,
                         e == TROUPE_OK ? &b : NULL);
    troupe_free(p->cursor);
    troupe_free(p);
}

static void
purge_step(troupe_actor *self, tstate *s)
{
    tpurge *p = s->purge;
    if (p->err == TROUPE_OK && s->life.closing)
        p->err = TROUPE_ECLOSED;
    if (p->err != TROUPE_OK || (p->steps > 0 && !p->more)) {
        purge_finish(self, s);
        return;
    }
    pjob *j = troupe_calloc(1, sizeof(*j));
    if (j != NULL && p->clen > 0 && (j->after = troupe_malloc(p->clen)))
        memcpy(j->after, p->cursor, j->alen = p->clen);
    if (j == NULL || (p->clen > 0 && j->after == NULL)) {
        troupe_free(j);
        p->err = TROUPE_ENOMEM;
        purge_finish(self, s);
        return;
    }
    j->db = s->cfg.db;
    j->cf_t = s->cfg.cf_t;
    j->now = s->cfg.clock(s->cfg.clock_ctx);
    troupe_err e =
        troupe_work_submit(self, purge_work, j, TABLE_PURGE_KEYS, pjob_free);
    if (e != TROUPE_OK) {
        pjob_free(j);
        p->err = e;
        purge_finish(self, s);
    }
}

static void
purge_op_done(troupe_actor *self, tstate *s, troupe_err err, bool hit)
{
    tpurge *p = s->purge;
    if (p == NULL)
        return;
    if (err != TROUPE_OK && p->err == TROUPE_OK)
        p->err = err;
    if (err == TROUPE_OK && hit)
        p->purged++;
    if (--p->outstanding == 0)
        purge_step(self, s);
}

/* A purge op ended (its wop.done). */
static void
purge_op_release(troupe_actor *self, tstate *s, wop *op)
{
    purge_op_done(self, s, op->err, op->purge_hit);
}

troupe_err
troupe__expiry_h_purge(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tpurge *p = NULL;
    if (s->life.closing || s->purge != NULL ||
        (p = troupe_calloc(1, sizeof(*p))) == NULL) {
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                             s->life.closing    ? TROUPE_ECLOSED
                             : s->purge != NULL ? TROUPE_EBUSY
                                                : TROUPE_ENOMEM,
                             NULL);
        return TROUPE_OK;
    }
    p->asker = m->from;
    p->corr = m->corr;
    s->purge = p;
    purge_step(self, s);
    return TROUPE_OK;
}

troupe_err
troupe__expiry_h_keys(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    pjob *j = m->ptr;
    tpurge *p = s->purge;
    if (j == NULL)
        return troupe__table_no_payload(self, m);
    if (p == NULL) {
        pjob_free(j);
        return TROUPE_OK;
    }
    p->steps++;
    if (j->err != TROUPE_OK || j->page->n == 0) {
        if (j->err != TROUPE_OK && p->err == TROUPE_OK)
            p->err = j->err;
        p->more = false;
        pjob_free(j);
        purge_finish(self, s);
        return TROUPE_OK;
    }
    const troupe_page *pg = j->page;
    unsigned char *c = troupe_realloc(p->cursor, pg->cursor_len);
    if (c == NULL) {
        pjob_free(j);
        p->err = TROUPE_ENOMEM;
        purge_finish(self, s);
        return TROUPE_OK;
    }
    memcpy(c, pg->cursor, pg->cursor_len);
    p->cursor = c;
    p->clen = pg->cursor_len;
    p->more = pg->more;
    p->scanned += pg->n;
    /* Count them all first: an op may finish inside enqueue. */
    p->outstanding = j->nexp + 1;
    for (size_t i = 0; i < j->nexp; i++) {
        const troupe_kv *kv = &pg->items[j->exp[i]];
        /* a prepared XA transaction holds it, maybe for ever: a later
         * pass purges it if it is still expired then */
        if (troupe__parts_xa_holder(s, kv->key, kv->key_len) != NULL) {
            purge_op_done(self, s, TROUPE_OK, false);
            continue;
        }
        wop *op = troupe__wop_new(self, s, TABLE_PURGE_OP, kv->key, kv->key_len,
                                  NULL, 0, 0, false);
        troupe_err e = TROUPE_ENOMEM;
        if (op != NULL) {
            op->done = purge_op_release;
            e = troupe__write_enqueue(self, s, op);
        }
        if (e != TROUPE_OK)
            purge_op_done(self, s, e, false);
    }
    pjob_free(j);
    purge_op_done(self, s, TROUPE_OK, false);
    return TROUPE_OK;
}

/* At a hard stop (quiescing waits for the pass): the pass running is
 * answered ECLOSED. */
void
troupe__expiry_stop(troupe_actor *self, tstate *s)
{
    if (s->purge != NULL) {
        troupe_runtime_reply(troupe_actor_runtime(self), s->purge->asker,
                             s->purge->corr, TROUPE_ECLOSED, NULL);
        troupe_free(s->purge->cursor);
        troupe_free(s->purge);
        s->purge = NULL;
    }
}
