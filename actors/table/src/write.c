/*
 * The write state machine on the table actor (tstate.writes, a twrites:
 * this file's alone). A write is a small state machine:
 *   arrival -> per-key lock (locks.c: a later write to the same key
 *   queues behind it, so it reads what the earlier one committed) ->
 *   prepare on a worker (prepare.c: read row and manifest, check their
 *   integrity, apply insert/update semantics and expiry, stamp timestamps,
 *   derive index entries, check unique indexes, build the one batch) ->
 *   back on the actor: unique reservations -> commit pipeline -> the
 *   writer thread answers the asker and hands the op back -> the actor
 *   releases the key lock and starts the next write of that key.
 * Unique checks read the index family on the worker, which cannot see a
 * write of another key that is prepared but not yet committed, nor one
 * that committed after the check read. So the actor keeps the unique
 * values of every write between submit and commit, and parks a write that
 * claims one of them; parked writes are prepared again after the next
 * commit, when the check reads the winner's entry. It also remembers the
 * unique values of recent commits (until no write that started before
 * them is running, at most CLOG_MAX), and a write whose check predates a
 * commit of one of its values prepares again at once. A lock per index
 * value on arrival would be the alternative, but the values are only
 * known after reading the old row.
 *
 * The same machine runs a transaction's writes (from their reservation
 * to the finish, participant.c) and the actor's own ops (a build's reindex, a
 * purge's delete), which hear of their end through wop.done: this file
 * knows nothing of builds and purges beyond that, and that a release may
 * let a build waiting for older writes start.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

/* Unique values of a committed write, for writes whose check read the
 * index before that commit. */
typedef struct clog {
    struct clog *next; /* newer first */
    uint64_t seq;
    uniq *uq;
    size_t nuq;
} clog;

/* Committed writes remembered; an op that started before the oldest one
 * still remembered prepares again. */
#define CLOG_MAX 1024

wop *
troupe__wop_new(troupe_actor *self, const tstate *s, uint32_t kind,
                const void *key, size_t klen, const void *doc, size_t dlen,
                int64_t expires, bool nostamp)
{
    wop *op = troupe_calloc(1, sizeof(*op) + klen + dlen);
    if (op == NULL)
        return NULL;
    op->rt = troupe_actor_runtime(self);
    op->self = troupe_self(self);
    op->kind = kind;
    op->nostamp = nostamp;
    op->expires = expires;
    op->cfg = s->cfg;
    troupe__tschema_retain(op->cfg.schema);
    op->key = (unsigned char *)(op + 1);
    op->klen = klen;
    memcpy(op->key, key, klen);
    op->doc = op->key + klen;
    op->dlen = dlen;
    if (dlen)
        memcpy(op->doc, doc, dlen);
    return op;
}

void
troupe__wop_free(wop *op)
{
    if (!op->ext)
        troupe_batch_destroy(op->batch);
    troupe__prepare_uniq_free(op);
    troupe__tschema_release(op->cfg.schema);
    troupe_free(op);
}

void
troupe__wop_close(wop *op)
{
    troupe_runtime_reply(op->rt, op->asker, op->corr, TROUPE_ECLOSED, NULL);
    troupe__wop_free(op);
}

/* The actor is gone before the prepared write reached it: nothing was
 * submitted, so nothing is written. */
static void
prep_drop(void *arg)
{
    troupe__wop_close(arg);
}

/* The running write of a key is done: answer it unless the pipeline
 * already did, and start the next write of that key. An op of the
 * actor's own hears of its end only once the key's next write started,
 * so a purge pass that ends there never sees the actor idle while a write
 * of that key still waits. */
void
troupe__write_release(troupe_actor *self, tstate *s, wop *op, bool answered)
{
    if (!answered)
        troupe_runtime_reply(op->rt, op->asker, op->corr, op->err, NULL);
    klock *l = op->lock;
    if (op->counted) {
        s->writes.nrunning--;
        if (op->gen != s->writes.gen)
            s->writes.old_running--;
    }
    if (!op->build && s->build != NULL && !s->build->started)
        troupe__build_step(self, s);
    l->running = NULL;
    troupe__locks_advance(self, s, l);
    if (op->done != NULL)
        op->done(self, s, op);
    troupe__wop_free(op);
}

static troupe_err
prep_done(troupe_actor *self, tstate *s, wop *op);
static troupe_err
enqueue(troupe_actor *self, tstate *s, uint32_t kind, const void *key,
        size_t klen, const void *doc, size_t dlen, int64_t expires,
        troupe_sync sync, bool nostamp, troupe_addr asker, uint64_t corr);

/* Whether op may be prepared on the actor's thread: a plain write whose
 * reads may all hit memory, with no unique index (its check scans) and no
 * function index (a host callback, which may block). */
static bool
prepare_here(const tstate *s, const wop *op)
{
    if (s->writes.inlining || s->life.closing || op->ext ||
        (op->kind != TABLE_INSERT && op->kind != TABLE_UPDATE &&
         op->kind != TABLE_UPSERT && op->kind != TABLE_DELETE))
        return false;
    const tschema *sc = op->cfg.schema;
    for (size_t i = 0; i < sc->n; i++)
        if (troupe_index_def_unique(sc->defs[i]) ||
            troupe_index_def_fn_name(sc->defs[i]) != NULL)
            return false;
    return true;
}

void
troupe__write_start(troupe_actor *self, tstate *s, wop *op)
{
    /* Prepare with the current schema, also after waiting or parking. */
    if (op->cfg.schema != s->cfg.schema) {
        troupe__tschema_release(op->cfg.schema);
        op->cfg.schema = troupe__tschema_retain(s->cfg.schema);
    }
    if (!op->counted) {
        op->counted = true;
        s->writes.nrunning++;
    } else if (op->gen != s->writes.gen) {
        s->writes.old_running--;
    }
    op->gen = s->writes.gen;
    op->cseq0 = s->writes.cseq;
    if (prepare_here(s, op)) {
        /* Prepared on this thread from memory: no worker round trip. Not
         * nested (a failed write starts the next one of its key, which
         * then goes to a worker), so the stack stays flat. */
        s->writes.inlining = true;
        op->cached = true;
        troupe_err pe = troupe__prepare(op);
        op->cached = false;
        if (pe != TROUPE_EAGAIN) {
            op->err = pe;
            prep_done(self, s, op);
            s->writes.inlining = false;
            return;
        }
        s->writes.inlining = false;
    }
    /* declared: the request it holds; the batch it builds is bounded by
     * the storage limits and held only while a worker runs it */
    troupe_err e = troupe_work_submit_in(
        self, TROUPE_LANE_STORAGE, sizeof(*op) + op->klen + op->dlen,
        troupe__prepare_work, op, TABLE_PREP_DONE, prep_drop);
    if (e != TROUPE_OK) {
        op->err = e;
        troupe__write_release(self, s, op, false);
    }
}

/* Answers EBUSY for a write that a prepared XA transaction's hold would
 * keep waiting, the body naming the xid (client.c makes it the detail). */
static void
xa_refuse(troupe_runtime *rt, troupe_addr to, uint64_t corr, const char *xid)
{
    troupe_packer p;
    troupe_body *b = NULL;
    troupe_pack_init(&p);
    troupe_pack_cstr(&p, xid);
    (void)troupe_pack_take_body(&p, &b);
    troupe_pack_fini(&p);
    troupe_runtime_reply(rt, to, corr, TROUPE_EBUSY, b != NULL ? &b : NULL);
}

/* The xid of a prepared XA transaction whose write claims one of op's
 * unique values, or NULL. */
static const char *
uniq_xa_holder(const tstate *s, const wop *op)
{
    for (const wop *o = s->writes.inflight; o != NULL; o = o->inext)
        if (o->ext &&
            troupe__write_uniq_overlap(op->uq, op->nuq, o->uq, o->nuq)) {
            const char *xid = troupe__parts_xa_holder(s, o->key, o->klen);
            if (xid != NULL)
                return xid;
        }
    return NULL;
}

troupe_err
troupe__write_h_write(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    troupe_reader r;
    const void *key, *doc = NULL;
    size_t klen, dlen = 0;
    int64_t expires = 0;
    uint32_t sync = 0;
    bool del = m->kind == TABLE_DELETE, stamp = true;
    troupe_reader_init_msg(&r, m);
    troupe_read_array_n(&r, del ? 2 : 5);
    troupe_read_bin(&r, TROUPE_KEY_MAX, &key, &klen);
    if (!del) {
        if (r.err == TROUPE_OK && troupe_read_peek(&r) != TROUPE_MP_MAP)
            r.err = TROUPE_EPROTO;
        troupe_read_raw(&r, &doc, &dlen);
        troupe_read_int(&r, &expires);
    }
    troupe_read_u32(&r, &sync);
    if (!del)
        troupe_read_bool(&r, &stamp);
    troupe_err e = troupe_read_end(&r);
    if (e == TROUPE_OK && (klen == 0 || expires < 0 || sync > TROUPE_SYNC_OFF))
        e = TROUPE_EPROTO;
    if (e == TROUPE_OK && s->life.closing)
        e = TROUPE_ECLOSED;
    if (e != TROUPE_OK) {
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr, e,
                             NULL);
        return TROUPE_OK;
    }
    /* A prepared XA transaction holds the key until its xid is resolved,
     * which may take for ever: refused. */
    const char *xid = troupe__parts_xa_holder(s, key, klen);
    if (xid != NULL) {
        xa_refuse(troupe_actor_runtime(self), m->from, m->corr, xid);
        return TROUPE_OK;
    }
    e = enqueue(self, s, m->kind, key, klen, doc, dlen, expires,
                (troupe_sync)sync, !stamp, m->from, m->corr);
    if (e != TROUPE_OK)
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr, e,
                             NULL);
    return TROUPE_OK;
}

/* A new write behind its key's lock; ENOMEM when it cannot be queued. */
static troupe_err
enqueue(troupe_actor *self, tstate *s, uint32_t kind, const void *key,
        size_t klen, const void *doc, size_t dlen, int64_t expires,
        troupe_sync sync, bool nostamp, troupe_addr asker, uint64_t corr)
{
    wop *op =
        troupe__wop_new(self, s, kind, key, klen, doc, dlen, expires, nostamp);
    if (op == NULL)
        return TROUPE_ENOMEM;
    op->asker = asker;
    op->corr = corr;
    op->sync = sync;
    return troupe__write_enqueue(self, s, op);
}

troupe_err
troupe__write_enqueue(troupe_actor *self, tstate *s, wop *op)
{
    troupe_err e = troupe__locks_attach(self, s, op);
    if (e != TROUPE_OK)
        troupe__wop_free(op);
    return e;
}

static void
on_commit(troupe_err err, void *arg)
{
    wop *op = arg;
    if (op->kind == TABLE_PURGE_OP)
        op->err = err; /* counted by purge_op_done */
    if (!op->build && op->cfg.vers != NULL) {
        atomic_store(&op->cms, op->cfg.clock(op->cfg.clock_ctx));
        /* the writer thread may block: a version below the durable
         * floor, always */
        atomic_store(&op->cver, troupe__vers_take(op->cfg.vers));
    }
    /* The actor hears first, so that whatever the caller asks it after
     * the reply finds this write's version recorded. The op is the
     * actor's once sent: copy what the reply needs. */
    troupe_runtime *rt = op->rt;
    troupe_addr asker = op->asker;
    uint64_t corr = op->corr;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, TABLE_COMMIT_DONE, NULL, 0) == TROUPE_OK) {
        m->ptr = op;
        if (troupe_runtime_send(rt, op->self, &m) == TROUPE_OK) {
            troupe_runtime_reply(rt, asker, corr, err, NULL);
            return;
        }
    }
    /* The actor is gone (its locks with it), or no memory: only the op is
     * left to free. */
    troupe_runtime_reply(rt, asker, corr, err, NULL);
    troupe__wop_free(op);
}

bool
troupe__write_uniq_overlap(const uniq *a, size_t na, const uniq *b, size_t nb)
{
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (a[i].index_id == b[j].index_id && a[i].len == b[j].len &&
                memcmp(a[i].vals, b[j].vals, b[j].len) == 0)
                return true;
    return false;
}

/* 1: a write in the pipeline claims one of op's unique values (wait for
 * its commit); 2: one committed after op's check read the index (check
 * again now); 0: neither. */
int
troupe__write_uniq_clash(const tstate *s, const wop *op)
{
    for (const wop *o = s->writes.inflight; o != NULL; o = o->inext)
        if (troupe__write_uniq_overlap(op->uq, op->nuq, o->uq, o->nuq))
            return 1;
    if (op->cseq0 == s->writes.cseq)
        return 0;
    if (op->cseq0 < s->writes.clog_floor)
        return 2;
    for (const clog *c = s->writes.clog; c != NULL && c->seq > op->cseq0;
         c = c->next)
        if (troupe__write_uniq_overlap(op->uq, op->nuq, c->uq, c->nuq))
            return 2;
    return 0;
}

static void
clog_free(clog *c)
{
    for (size_t i = 0; i < c->nuq; i++)
        troupe_free(c->uq[i].vals);
    troupe_free(c->uq);
    troupe_free(c);
}

/* Remembers op's unique values as committed (moved out of op). */
void
troupe__write_clog_add(tstate *s, wop *op)
{
    s->writes.cseq++;
    clog *c = troupe_malloc(sizeof(*c));
    if (c == NULL) {
        /* forget: everyone older checks again */
        s->writes.clog_floor = s->writes.cseq;
        return;
    }
    c->seq = s->writes.cseq;
    c->uq = op->uq;
    c->nuq = op->nuq;
    op->uq = NULL;
    op->nuq = 0;
    c->next = s->writes.clog;
    s->writes.clog = c;
    if (++s->writes.nclog > CLOG_MAX) {
        clog **pp = &s->writes.clog;
        while ((*pp)->next != NULL)
            pp = &(*pp)->next;
        s->writes.clog_floor = (*pp)->seq;
        clog_free(*pp);
        *pp = NULL;
        s->writes.nclog--;
    }
}

void
troupe__write_clog_clear(tstate *s)
{
    while (s->writes.clog != NULL) {
        clog *c = s->writes.clog;
        s->writes.clog = c->next;
        clog_free(c);
    }
    s->writes.nclog = 0;
    s->writes.clog_floor = s->writes.cseq;
}

void
troupe__write_inflight_add(tstate *s, wop *op)
{
    if (op->nuq > 0) {
        op->inext = s->writes.inflight;
        s->writes.inflight = op;
    }
}

void
troupe__write_inflight_remove(tstate *s, wop *op)
{
    for (wop **pp = &s->writes.inflight; *pp != NULL; pp = &(*pp)->inext)
        if (*pp == op) {
            *pp = op->inext;
            break;
        }
}

void
troupe__write_restart_parked(troupe_actor *self, tstate *s)
{
    wop *p = s->writes.parked;
    s->writes.parked = NULL;
    while (p != NULL) {
        wop *nx = p->pnext;
        p->err = TROUPE_OK;
        troupe__write_start(self, s, p);
        p = nx;
    }
}

static troupe_err
prep_done(troupe_actor *self, tstate *s, wop *op)
{
    if (op->err != TROUPE_OK || op->batch == NULL) {
        troupe__write_release(self, s, op, false);
        return TROUPE_OK;
    }
    int clash = op->nuq > 0 ? troupe__write_uniq_clash(s, op) : 0;
    /* a client's write would be parked until a prepared XA transaction
     * that claims the value is resolved, maybe for ever: refused */
    const char *xid =
        clash == 1 && op->done == NULL ? uniq_xa_holder(s, op) : NULL;
    if (xid != NULL) {
        troupe_batch_destroy(op->batch);
        op->batch = NULL;
        xa_refuse(op->rt, op->asker, op->corr, xid);
        troupe__write_release(self, s, op, true);
        return TROUPE_OK;
    }
    if (clash != 0) {
        troupe_batch_destroy(op->batch);
        op->batch = NULL;
        troupe__prepare_uniq_free(op);
        if (clash == 2) {
            troupe__write_start(self, s, op);
            return TROUPE_OK;
        }
        op->pnext = s->writes.parked;
        s->writes.parked = op;
        return TROUPE_OK;
    }
    troupe_err e = troupe_commit_submit(op->cfg.commit, &op->batch, op->sync,
                                        on_commit, op);
    if (e != TROUPE_OK) {
        op->err = e;
        troupe__write_release(self, s, op, false);
        return TROUPE_OK;
    }
    troupe__write_inflight_add(s, op);
    return TROUPE_OK;
}

troupe_err
troupe__write_h_prep_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (m->ptr == NULL)
        return troupe__table_no_payload(self, m);
    prep_done(self, s, m->ptr);
    return TROUPE_OK;
}

troupe_err
troupe__write_h_commit_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    wop *op = m->ptr;
    if (op == NULL)
        return troupe__table_no_payload(self, m);
    troupe__write_inflight_remove(s, op);
    if (op->nuq > 0)
        troupe__write_clog_add(s, op);
    if (!op->build && atomic_load(&op->cver) != 0)
        troupe__keyvers_publish(s, op->key, op->klen, atomic_load(&op->cver),
                                atomic_load(&op->cms), false);
    troupe__write_release(self, s, op, true);
    if (s->writes.nrunning == 0)
        troupe__write_clog_clear(
            s); /* nobody can have read before those commits */
    troupe__parts_retry(self, s);
    troupe__qver_retry(self, s);
    /* The winner's entries are readable now: parked writes check again. */
    troupe__write_restart_parked(self, s);
    return TROUPE_OK;
}

/* Parked writes were never submitted: they fail with ECLOSED. */
void
troupe__writes_stop(troupe_actor *self, tstate *s)
{
    for (wop *p = s->writes.parked; p != NULL;) {
        wop *nx = p->pnext;
        troupe__wop_close(p);
        p = nx;
    }
    troupe__write_clog_clear(s);
}
