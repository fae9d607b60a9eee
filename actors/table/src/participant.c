/*
 * The transaction participant: a transaction's part at this table (actors/txn
 * drives the two-phase commit through participant.h), from its prepare
 * through the reservation to its finish or expiry. Owns tstate.parts.
 *
 * A transaction's prepare (from actors/txn) names the keys it read and
 * will write at this table, sorted and distinct, and the version counter's
 * value when its snapshot was taken (seq0). On the actor thread, a key
 * conflicts when a write holds its lock (running, parked or in the
 * pipeline: it may commit after the snapshot), when another prepared
 * transaction read it and this one writes it, or when its version is newer
 * than seq0. Every conflicting key is reported, so the caller gets the
 * full set. Without conflicts the actor reserves: each write becomes a wop
 * holding its key's lock (later writes queue behind it, as behind any
 * write), each read a shared reservation (writes wait; other transactions
 * may read it, not write it). Reads are reserved, not only validated,
 * because the tables of one transaction prepare one after another: a read
 * validated at table A must not change before table B has reserved its
 * writes, or two transactions could each read what the other writes
 * (write skew). A worker then prepares every write as an ordinary write is
 * prepared (integrity, insert/update rules, index entries, unique checks),
 * into the transaction's one shared batch. Back on the actor, unique
 * values are checked against writes in flight, recent commits and the
 * other writes of the transaction. The reservations last until the finish
 * (publish: the batch was submitted) or until reserve_ms pass while the
 * transaction has not submitted (it died, or stalled: the shared state
 * decides once which of the two wins).
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"

/* A transaction's part at this table, from its prepare to its finish. */
typedef struct tpart {
    struct tpart *next;
    ttxn_shared *sh;
    troupe_runtime *rt;
    troupe_addr asker;
    uint64_t corr;
    uint64_t timer;
    uint32_t reserve_ms;
    bool timed;
    troupe_err err;
    size_t nops;
    wop **ops; /* writes, each holding its key's lock */
    size_t nr;
    klock **rlocks; /* read reservations */
    trsv rsv;       /* scanned ranges, reserved (copies, one block) */
    bool onwork;    /* its writes are being prepared on a worker */
    bool xa;        /* held for an XA xid: counted in tparts.nxa, xa_ops */
} tpart;

ttxn_shared *
troupe__ttxn_retain(ttxn_shared *sh)
{
    if (sh != NULL)
        atomic_fetch_add(&sh->refs, 1);
    return sh;
}

void
troupe__ttxn_release(ttxn_shared *sh)
{
    if (sh == NULL || atomic_fetch_sub(&sh->refs, 1) != 1)
        return;
    troupe_snapshot_destroy(sh->snap);
    troupe_batch_destroy(sh->batch);
    troupe_free(sh);
}

void
troupe__ttxn_prep_free(void *arg)
{
    ttxn_prep *p = arg;
    if (p == NULL)
        return;
    troupe__ttxn_release(p->sh);
    troupe_free(p);
}

void
troupe__ttxn_fin_free(void *arg)
{
    ttxn_fin *f = arg;
    if (f == NULL)
        return;
    troupe__ttxn_release(f->sh);
    troupe_free(f);
}

static void
tpart_free(tpart *tp)
{
    for (size_t i = 0; i < tp->nops; i++)
        if (tp->ops[i] != NULL)
            troupe__wop_free(tp->ops[i]);
    troupe_free(tp->ops);
    troupe_free(tp->rlocks);
    troupe_free(tp->rsv.v);
    troupe__ttxn_release(tp->sh);
    troupe_free(tp);
}

/* Ends tp's part here: publishes version `ver` of its writes when
 * `publish`, frees its locks and reservations (starting the writes behind
 * them). */
static void
tpart_end(troupe_actor *self, tstate *s, tpart *tp, bool publish, uint64_t ver)
{
    for (tpart **pp = tp->onwork ? &s->parts.working : &s->parts.prepared;
         *pp != NULL; pp = &(*pp)->next)
        if (*pp == tp) {
            *pp = tp->next;
            break;
        }
    troupe__locks_unreserve(s, &tp->rsv);
    tp->onwork = false;
    if (tp->xa) {
        s->parts.nxa--;
        s->parts.xa_ops -= tp->nops;
        tp->xa = false;
    }
    if (tp->timed)
        troupe_timer_cancel(self, tp->timer);
    publish = publish && ver != 0; /* a finish that publishes has one */
    s->parts.last_pub = publish && tp->nops > 0 ? ver : 0;
    for (size_t i = 0; i < tp->nops; i++) {
        wop *op = tp->ops[i];
        if (op == NULL)
            continue;
        tp->ops[i] = NULL;
        troupe__write_inflight_remove(s, op);
        if (publish) {
            if (op->nuq > 0)
                troupe__write_clog_add(s, op);
            troupe__keyvers_publish(s, op->key, op->klen, ver,
                                    s->cfg.clock(s->cfg.clock_ctx), false);
        }
        op->batch = NULL;
        troupe__write_release(self, s, op, true);
    }
    for (size_t i = 0; i < tp->nr; i++)
        troupe__locks_rsv_release(self, s, tp->rlocks[i]);
    tp->nr = 0;
    bool ranged = tp->rsv.n > 0;
    tpart_free(tp);
    if (ranged)
        troupe__locks_rwait_retry(self, s);
    troupe__qver_retry(self, s);
    if (s->writes.nrunning == 0)
        troupe__write_clog_clear(s);
    troupe__write_restart_parked(self, s);
}

static void
answer_keys(troupe_runtime *rt, troupe_addr to, uint64_t corr, const kref *keys,
            size_t n)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        troupe_pack_array(&p, 2);
        troupe_pack_bin(&p, keys[i].k, keys[i].n);
        troupe_pack_uint(&p, keys[i].kinds);
    }
    troupe_body *b = NULL;
    if (troupe_pack_take_body(&p, &b) != TROUPE_OK) {
        troupe_runtime_reply(rt, to, corr, TROUPE_ENOMEM, NULL);
        return;
    }
    troupe_runtime_reply(rt, to, corr, TROUPE_ECONFLICT, &b);
}

static void
tprep_work(void *arg)
{
    tpart *tp = arg;
    for (size_t i = 0; i < tp->nops && tp->err == TROUPE_OK; i++)
        tp->err = tp->ops[i]->err = troupe__prepare(tp->ops[i]);
}

/* The actor is gone before the prepared part reached it (its locks went
 * with it): the transaction learns ECLOSED and submits nothing. */
static void
tprep_drop(void *arg)
{
    tpart *tp = arg;
    troupe_runtime_reply(tp->rt, tp->asker, tp->corr, TROUPE_ECLOSED, NULL);
    tpart_free(tp);
}

/* A prepare whose write keys are held only by writes that are already
 * stored (their reply may have reached the caller before it began this
 * transaction) waits for those writes to release their locks: their
 * COMMIT_DONE is on its way, so the wait is short and bounded. */
typedef struct tdefer {
    struct tdefer *next;
    ttxn_prep *p;
    troupe_addr asker;
    uint64_t corr;
} tdefer;

static void
txn_prepare(troupe_actor *self, tstate *s, ttxn_prep *p, troupe_addr asker,
            uint64_t corr);

void
troupe__parts_retry(troupe_actor *self, tstate *s)
{
    tdefer *d = s->parts.deferred;
    s->parts.deferred = NULL;
    while (d != NULL) {
        tdefer *nx = d->next;
        txn_prepare(self, s, d->p, d->asker, d->corr);
        troupe_free(d);
        d = nx;
    }
}

/* The keys of range r that changed since seq0 (STALE) or that a write
 * holds (RESERVED: in flight or queued; a write stored since seq0 whose
 * version is not yet published is a change). */
static void
range_conflicts(const tstate *s, const ttxn_range *r, uint64_t seq0, kset *ks)
{
    if (!troupe__keyvers_range_stale(s, r, seq0, ks))
        troupe__locks_range_held(s, r, seq0, ks);
}

static ttxn_range *
ranges_copy(const ttxn_range *r, size_t n)
{
    size_t bytes = n * sizeof(*r);
    for (size_t i = 0; i < n; i++)
        bytes += r[i].slen + r[i].elen;
    ttxn_range *v = troupe_malloc(bytes);
    if (v == NULL)
        return NULL;
    unsigned char *d = (unsigned char *)&v[n];
    for (size_t i = 0; i < n; i++) {
        v[i] = (ttxn_range){0};
        if (r[i].start != NULL) {
            memcpy(d, r[i].start, r[i].slen);
            v[i].start = d;
            v[i].slen = r[i].slen;
            d += r[i].slen;
        }
        if (r[i].end != NULL) {
            memcpy(d, r[i].end, r[i].elen);
            v[i].end = d;
            v[i].elen = r[i].elen;
            d += r[i].elen;
        }
    }
    return v;
}

troupe_err
troupe__parts_h_prepare(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    troupe_runtime *rt = troupe_actor_runtime(self);
    ttxn_prep *p = m->ptr;
    if (p == NULL || p->sh == NULL) {
        troupe_runtime_reply(rt, m->from, m->corr, TROUPE_EPROTO, NULL);
        troupe__ttxn_prep_free(p);
        return TROUPE_OK;
    }
    txn_prepare(self, s, p, m->from, m->corr);
    return TROUPE_OK;
}

/* The conflicts of p's keys and ranges with this table's writes,
 * reservations and versions, into bad; *wait when a key it writes is held
 * only by a write stored before its snapshot; *nw, *nr its writes and
 * reads. */
static void
part_conflicts(const tstate *s, const ttxn_prep *p, kset *bad, bool *wait,
               size_t *nw, size_t *nr)
{
    /* Every cause of a key's conflict is named: STALE when what the
     * transaction read (or the version it gave) no longer matches,
     * RESERVED when another transaction or a write in flight holds it. */
    for (size_t i = 0; i < p->n; i++) {
        const ttxn_key *k = &p->keys[i];
        bool w = k->kind != TROUPE__PART_READ;
        klock *l = *troupe__locks_slot(s, k->key, k->klen);
        uint32_t c = 0;
        if (k->ver != 0) { /* a versioned read: its version, exactly */
            uint64_t cur = troupe__keyvers_get(s, k->key, k->klen);
            if (l != NULL && l->running != NULL) {
                uint64_t cv =
                    l->running->ext ? 0 : atomic_load(&l->running->cver);
                if (cv == 0)
                    c |= TROUPE__PART_RESERVED;
                else
                    cur = cv;
            }
            if (cur != k->ver)
                c |= TROUPE__PART_STALE;
            else if (l != NULL && l->running != NULL && w)
                *wait = true;
        } else if (l != NULL && l->running != NULL) {
            uint64_t cv = l->running->ext ? 0 : atomic_load(&l->running->cver);
            if (cv == 0)
                c |= TROUPE__PART_RESERVED; /* may commit after seq0 */
            else if (cv > p->seq0)
                c |= TROUPE__PART_STALE; /* stored after the snapshot */
            else if (w)
                *wait = true; /* stored before it: wait for its release */
        }
        if (l != NULL && w && l->rsv > 0)
            c |= TROUPE__PART_RESERVED; /* another transaction read it */
        if (w && troupe__locks_in_range(s, k->key, k->klen))
            c |= TROUPE__PART_RESERVED; /* another one scanned over it */
        if (k->ver == 0 && troupe__keyvers_get(s, k->key, k->klen) > p->seq0)
            c |= TROUPE__PART_STALE;
        if (c != 0)
            troupe__kset_add(bad, k->key, k->klen, c);
        *nw += w;
        *nr += !w;
    }
    for (size_t i = 0; i < p->nranges; i++)
        range_conflicts(s, &p->ranges[i], p->seq0, bad);
}

/* Parks prepare p until a commit's release runs it again
 * (troupe__parts_retry). ENOMEM: p is still the caller's. */
static troupe_err
part_defer(tstate *s, ttxn_prep *p, troupe_addr asker, uint64_t corr)
{
    tdefer *d = troupe_malloc(sizeof(*d));
    if (d == NULL)
        return TROUPE_ENOMEM;
    d->p = p;
    d->asker = asker;
    d->corr = corr;
    d->next = s->parts.deferred;
    s->parts.deferred = d;
    return TROUPE_OK;
}

/* A part of p's transaction answering `asker`, with room for nw writes
 * and nr read reservations and its own copy of p's ranges; NULL when out
 * of memory. */
static tpart *
tpart_new(troupe_runtime *rt, const ttxn_prep *p, size_t nw, size_t nr,
          troupe_addr asker, uint64_t corr)
{
    tpart *tp = troupe_calloc(1, sizeof(*tp));
    if (tp == NULL)
        return NULL;
    tp->ops = nw ? troupe_calloc(nw, sizeof(*tp->ops)) : NULL;
    tp->rlocks = nr ? troupe_calloc(nr, sizeof(*tp->rlocks)) : NULL;
    tp->rsv.v = p->nranges ? ranges_copy(p->ranges, p->nranges) : NULL;
    if ((nw && tp->ops == NULL) || (nr && tp->rlocks == NULL) ||
        (p->nranges && tp->rsv.v == NULL)) {
        troupe_free(tp->ops);
        troupe_free(tp->rlocks);
        troupe_free(tp->rsv.v);
        troupe_free(tp);
        return NULL;
    }
    tp->sh = troupe__ttxn_retain(p->sh);
    tp->rt = rt;
    tp->asker = asker;
    tp->corr = corr;
    tp->reserve_ms = p->reserve_ms ? p->reserve_ms : 30000;
    tp->rsv.n = p->nranges;
    return tp;
}

/* What a part holds while its writes are prepared, declared to the lane
 * as a write's preparation is (write.c): the part, its ops with their
 * keys and documents, its read reservations; the batch it builds is
 * bounded by the storage limits. */
static uint64_t
tpart_bytes(const tpart *tp)
{
    uint64_t n = sizeof(*tp) + tp->nops * sizeof(*tp->ops) +
                 tp->nr * sizeof(*tp->rlocks);
    for (size_t i = 0; i < tp->nops; i++)
        if (tp->ops[i] != NULL)
            n += sizeof(*tp->ops[i]) + tp->ops[i]->klen + tp->ops[i]->dlen;
    return n;
}

/* Reserves p's keys for tp: a read reservation on each key it reads, and
 * on each key it writes a write (troupe__wop_new) that holds the key's
 * lock. ENOMEM when a lock or an op cannot be allocated; what was taken is
 * tp's, undone by its end. */
static troupe_err
part_reserve(troupe_actor *self, tstate *s, tpart *tp, const ttxn_prep *p)
{
    for (size_t i = 0; i < p->n; i++) {
        const ttxn_key *k = &p->keys[i];
        klock *l = troupe__locks_get(s, k->key, k->klen);
        if (l == NULL)
            return TROUPE_ENOMEM;
        if (k->kind == TROUPE__PART_READ) {
            l->rsv++;
            tp->rlocks[tp->nr++] = l;
            continue;
        }
        wop *op = troupe__wop_new(self, s, k->kind, k->key, k->klen, k->doc,
                                  k->dlen, k->expires, k->nostamp);
        if (op == NULL) {
            if (l->running == NULL && l->rsv == 0 && l->whead == NULL) {
                klock **pp = troupe__locks_slot(s, l->key, l->klen);
                *pp = l->next;
                troupe_free(l);
            }
            return TROUPE_ENOMEM;
        }
        op->ext = true;
        op->batch = p->sh->batch;
        op->lock = l;
        l->running = op;
        op->counted = true;
        s->writes.nrunning++;
        op->gen = s->writes.gen;
        op->cseq0 = s->writes.cseq;
        tp->ops[tp->nops++] = op;
    }
    return TROUPE_OK;
}

/* A prepare: its conflicts answered, or it waits (part_defer), or its
 * keys are reserved and its writes prepared on a worker
 * (TABLE_TXN_PREP_DONE). */
static void
txn_prepare(troupe_actor *self, tstate *s, ttxn_prep *p, troupe_addr asker,
            uint64_t corr)
{
    troupe_runtime *rt = troupe_actor_runtime(self);
    troupe_err e = TROUPE_OK;
    bool wait = false;
    kset bad = {0};
    size_t nw = 0, nr = 0;
    if (s->life.closing)
        e = TROUPE_ECLOSED;
    else if (atomic_load(&p->sh->state) != TTXN_OPEN)
        e = TROUPE_ECANCELED;
    else
        part_conflicts(s, p, &bad, &wait, &nw, &nr);
    if (e == TROUPE_OK && bad.err != TROUPE_OK)
        e = bad.err;
    if (e == TROUPE_OK && bad.n > 0) {
        answer_keys(rt, asker, corr, bad.v, bad.n);
        troupe_free(bad.v);
        troupe__ttxn_prep_free(p);
        return;
    }
    troupe_free(bad.v);
    if (e == TROUPE_OK && wait && !p->check_only &&
        (e = part_defer(s, p, asker, corr)) == TROUPE_OK)
        return;
    if (e != TROUPE_OK || p->check_only) {
        troupe_runtime_reply(rt, asker, corr, e, NULL);
        troupe__ttxn_prep_free(p);
        return;
    }
    tpart *tp = tpart_new(rt, p, nw, nr, asker, corr);
    if (tp == NULL) {
        troupe_runtime_reply(rt, asker, corr, TROUPE_ENOMEM, NULL);
        troupe__ttxn_prep_free(p);
        return;
    }
    tp->onwork = true;
    tp->next = s->parts.working;
    s->parts.working = tp;
    troupe__locks_reserve(s, &tp->rsv);
    e = part_reserve(self, s, tp, p);
    troupe__ttxn_prep_free(p);
    if (e == TROUPE_OK)
        e = troupe_work_submit_in(self, TROUPE_LANE_STORAGE, tpart_bytes(tp),
                                  tprep_work, tp, TABLE_TXN_PREP_DONE,
                                  tprep_drop);
    if (e != TROUPE_OK) {
        troupe_runtime_reply(rt, tp->asker, tp->corr, e, NULL);
        tpart_end(self, s, tp, false, 0);
    }
}

troupe_err
troupe__parts_h_prep_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tpart *tp = m->ptr;
    troupe_runtime *rt = troupe_actor_runtime(self);
    if (tp == NULL)
        return troupe__table_no_payload(self, m);
    for (tpart **pp = &s->parts.working; *pp != NULL; pp = &(*pp)->next)
        if (*pp == tp) {
            *pp = tp->next;
            break;
        }
    tp->onwork = false;
    tp->next = s->parts.prepared;
    s->parts.prepared = tp;
    troupe_err e = tp->err;
    if (e == TROUPE_OK && atomic_load(&tp->sh->state) != TTXN_OPEN)
        e = TROUPE_ECANCELED; /* aborted while on the worker */
    if (e != TROUPE_OK) {
        troupe_runtime_reply(rt, tp->asker, tp->corr, e, NULL);
        tpart_end(self, s, tp, false, 0);
        return TROUPE_OK;
    }
    /* Unique values: against writes in flight and recent commits (a
     * conflict: retry), and among this transaction's own writes (two rows
     * claiming one value: ECONSTRAINT). */
    for (size_t i = 0; e == TROUPE_OK && i < tp->nops; i++) {
        wop *op = tp->ops[i];
        if (op->nuq == 0)
            continue;
        for (size_t j = 0; j < i; j++)
            if (troupe__write_uniq_overlap(op->uq, op->nuq, tp->ops[j]->uq,
                                           tp->ops[j]->nuq))
                e = TROUPE_ECONSTRAINT;
        int clash = e == TROUPE_OK ? troupe__write_uniq_clash(s, op) : 0;
        if (clash != 0) {
            /* a write in the pipeline claims one of its unique values,
             * or one committed since the check read the index */
            kref k = {op->key, op->klen,
                      clash == 1 ? TROUPE__PART_RESERVED : TROUPE__PART_STALE};
            answer_keys(rt, tp->asker, tp->corr, &k, 1);
            tpart_end(self, s, tp, false, 0);
            return TROUPE_OK;
        }
    }
    /* An XA part is held until its xid is resolved: no deadline. */
    if (e == TROUPE_OK && !tp->sh->xa) {
        e = troupe_timer_start(self, TABLE_TXN_EXPIRE, tp->reserve_ms, 0,
                               &tp->timer);
        tp->timed = e == TROUPE_OK;
    }
    if (e != TROUPE_OK) {
        troupe_runtime_reply(rt, tp->asker, tp->corr, e, NULL);
        tpart_end(self, s, tp, false, 0);
        return TROUPE_OK;
    }
    for (size_t i = 0; i < tp->nops; i++)
        troupe__write_inflight_add(s, tp->ops[i]);
    if (tp->sh->xa) {
        tp->xa = true;
        s->parts.nxa++;
        s->parts.xa_ops += tp->nops;
    }
    troupe_runtime_reply(rt, tp->asker, tp->corr, TROUPE_OK, NULL);
    return TROUPE_OK;
}

bool
troupe__parts_quiet(const tstate *s)
{
    if (s->parts.working != NULL)
        return false;
    for (const tpart *tp = s->parts.prepared; tp != NULL; tp = tp->next)
        if (!tp->xa)
            return false;
    return true;
}

static bool
in_range(const ttxn_range *r, const void *key, size_t klen)
{
    return (r->start == NULL ||
            troupe_key_cmp(r->start, r->slen, key, klen) <= 0) &&
           (r->end == NULL || troupe_key_cmp(key, klen, r->end, r->elen) < 0);
}

const char *
troupe__parts_xa_holder(const tstate *s, const void *key, size_t klen)
{
    if (s->parts.nxa == 0)
        return NULL; /* the common case: one load, no walk */
    for (const tpart *tp = s->parts.prepared; tp != NULL; tp = tp->next) {
        if (!tp->xa)
            continue;
        for (size_t i = 0; i < tp->nops; i++)
            if (tp->ops[i] != NULL &&
                troupe_key_cmp(tp->ops[i]->key, tp->ops[i]->klen, key, klen) ==
                    0)
                return tp->sh->xid;
        for (size_t i = 0; i < tp->nr; i++)
            if (troupe_key_cmp(tp->rlocks[i]->key, tp->rlocks[i]->klen, key,
                               klen) == 0)
                return tp->sh->xid;
        for (size_t i = 0; i < tp->rsv.n; i++)
            if (in_range(&tp->rsv.v[i], key, klen))
                return tp->sh->xid;
    }
    return NULL;
}

/* The reservation deadline: the part is dropped unless the transaction
 * submitted its batch first (then its finish is on the way). */
troupe_err
troupe__parts_h_expire(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    for (tpart *tp = s->parts.prepared; tp != NULL; tp = tp->next)
        if (tp->timed && tp->timer == m->corr) {
            tp->timed = false;
            int want = TTXN_OPEN;
            if (atomic_compare_exchange_strong(&tp->sh->state, &want,
                                               TTXN_ABORTED) ||
                want == TTXN_ABORTED)
                tpart_end(self, s, tp, false, 0);
            break;
        }
    return TROUPE_OK;
}

troupe_err
troupe__parts_h_finish(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    ttxn_fin *f = m->ptr;
    uint64_t ver = 0;
    if (f != NULL) {
        for (tpart *tp = s->parts.prepared; tp != NULL; tp = tp->next)
            if (tp->sh == f->sh) {
                tpart_end(self, s, tp, f->publish, f->ver);
                ver = s->parts.last_pub;
                break;
            }
    }
    troupe__ttxn_fin_free(f);
    troupe_packer pk;
    troupe_pack_init(&pk);
    troupe_pack_uint(&pk, ver);
    troupe_body *b = NULL;
    if (f == NULL || troupe_pack_take_body(&pk, &b) != TROUPE_OK)
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                             f != NULL ? TROUPE_ENOMEM : TROUPE_EPROTO, NULL);
    else
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                             TROUPE_OK, &b);
    troupe_pack_fini(&pk); /* what was not taken (a finish without one) */
    return TROUPE_OK;
}

void
troupe__parts_stop(troupe_actor *self, tstate *s)
{
    /* Prepared transactions lose their part: their finish finds nothing,
     * and one not yet submitted cannot be (the prepare's locks are gone). */
    while (s->parts.prepared != NULL) {
        tpart *tp = s->parts.prepared;
        s->parts.prepared = tp->next;
        int want = TTXN_OPEN;
        atomic_compare_exchange_strong(&tp->sh->state, &want, TTXN_ABORTED);
        tpart_free(tp);
    }
    while (s->parts.deferred != NULL) {
        tdefer *d = s->parts.deferred;
        s->parts.deferred = d->next;
        troupe_runtime_reply(troupe_actor_runtime(self), d->asker, d->corr,
                             TROUPE_ECLOSED, NULL);
        troupe__ttxn_prep_free(d->p);
        troupe_free(d);
    }
}
