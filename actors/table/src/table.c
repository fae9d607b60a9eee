/*
 * The table actor: one per table, serving rows of families t.<id> (row
 * envelopes) and m.<id> (manifests) plus the x.<index id> families of its
 * indexes. Formats: docs/data-model.md.
 *
 * The actor's loop never touches the disk. Its state is a tstate
 * (table_int.h), one sub-struct per concept file: the write state machine
 * and its unique bookkeeping (write.c), write preparation (prepare.c, no
 * state), per-key locks and reservations (locks.c), key versions
 * (keyvers.c), versioned queries (qver.c), expired-row purges
 * (expiry.c). This file holds the actor's definition and lifecycle and
 * the concepts that have no file of their own yet: index builds, reads and
 * transactions (the participant of two-phase commit).
 *
 * Reads need no lock: they run on a worker against RocksDB's latest state
 * (a scan against one implicit snapshot) and answer from there.
 */
#include <stdio.h>
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/hash.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

/* Rows an index build reindexes per step. */
#define BUILD_BATCH 64

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
} tpart;

/* Calls the quiesce callback once nothing of this actor is in flight. */
void
troupe__table_check_quiesced(tstate *s)
{
    if (s->quiesced == NULL || s->writes.nrunning > 0 || s->nreads > 0 ||
        s->vers.evicting || s->purge != NULL || s->tparts != NULL ||
        s->tpwork != NULL || s->locks.rwait_head != NULL || s->build != NULL)
        return;
    void (*fn)(void *) = s->quiesced;
    s->quiesced = NULL;
    fn(s->quiesced_arg);
}

typedef struct rjob {
    troupe_runtime *rt;
    troupe_addr asker;
    uint64_t corr;
    uint32_t kind;
    ttable_cfg cfg;
    troupe_body *req;
    struct rjob *next; /* the rest of this job's batch */
} rjob;

/* An internal kind (a completion or a request from the data layer) that
 * came without its payload: these kinds are local-only, so only a local
 * sender's mistake can make one. Answered, never followed. */
troupe_err
troupe__table_no_payload(troupe_actor *self, const troupe_msg *m)
{
    troupe_reply_error(self, m, TROUPE_EINVAL);
    return TROUPE_OK;
}

/* ---- online index builds ----------------------------------------------- */

/*
 * A build lists the table's keys in batches of BUILD_BATCH (a scan on a
 * worker) and queues one reindex op per key behind that key's lock, so it
 * reads what the writes before it committed and writes after it see its
 * entries. It starts only once no write prepared with an older schema is
 * still running: every write that starts after the switch maintains the
 * new index itself, and every row committed before is listed by a later
 * scan step (the scan moves forward by key, one step after the other).
 */

typedef struct kjob {
    troupe_db *db;
    troupe_cf *cf_t;
    troupe_cf *meta; /* the build's, copied: the build may end first */
    uint64_t table_id, index_id;
    unsigned char *after;
    size_t alen;
    troupe_err err;
    troupe_page *page;
} kjob;

static void
kjob_free(void *arg)
{
    kjob *j = arg;
    troupe_page_destroy(j->page);
    troupe_free(j->after);
    troupe_free(j);
}

static void
keys_work(void *arg)
{
    kjob *j = arg;
    j->err = TROUPE_OK;
    if (j->meta != NULL && j->alen > 0)
        j->err = troupe__tables_build_save(j->db, j->meta, j->table_id,
                                           j->index_id, j->after, j->alen);
    if (j->err == TROUPE_OK)
        j->err = troupe_db_scan(j->db, j->cf_t, NULL, NULL, j->after, j->alen,
                                BUILD_BATCH, false, &j->page);
}

static void
build_finish(tstate *s, troupe_err err)
{
    tbuild *b = s->build;
    s->build = NULL;
    troupe_free(b->cursor);
    b->cursor = NULL;
    troupe__tables_build_done(b, err);
}

void
troupe__build_step(troupe_actor *self, tstate *s)
{
    tbuild *b = s->build;
    if (b == NULL || b->scanning || b->outstanding > 0)
        return;
    if (!b->started) {
        if (s->writes.old_running > 0)
            return; /* writes of an older schema still running */
        b->started = true;
    }
    if (b->err != TROUPE_OK) {
        build_finish(s, b->err);
        return;
    }
    kjob *j = troupe_calloc(1, sizeof(*j));
    if (j != NULL && b->clen > 0 && (j->after = troupe_malloc(b->clen)))
        memcpy(j->after, b->cursor, j->alen = b->clen);
    if (j == NULL || (b->clen > 0 && j->after == NULL)) {
        troupe_free(j);
        build_finish(s, TROUPE_ENOMEM);
        return;
    }
    j->db = s->cfg.db;
    j->cf_t = s->cfg.cf_t;
    j->meta = b->meta;
    j->table_id = b->table_id;
    j->index_id = b->index_id;
    troupe_err e =
        troupe_work_submit(self, keys_work, j, TABLE_BUILD_KEYS, kjob_free);
    if (e != TROUPE_OK) {
        kjob_free(j);
        build_finish(s, e);
        return;
    }
    b->scanning = true;
}

static void
build_op_done(troupe_actor *self, tstate *s, troupe_err err)
{
    tbuild *b = s->build;
    if (b == NULL)
        return;
    if (err != TROUPE_OK && b->err == TROUPE_OK)
        b->err = err;
    if (--b->outstanding == 0)
        troupe__build_step(self, s);
}

/* A reindex op ended (its wop.done). */
static void
build_op_release(troupe_actor *self, tstate *s, wop *op)
{
    build_op_done(self, s, op->err);
}

static troupe_err
h_build_keys(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    kjob *j = m->ptr;
    tbuild *b = s->build;
    if (j == NULL)
        return troupe__table_no_payload(self, m);
    if (b == NULL) {
        kjob_free(j);
        return TROUPE_OK;
    }
    b->scanning = false;
    if (b->err != TROUPE_OK || j->err != TROUPE_OK || j->page->n == 0) {
        troupe_err e = b->err != TROUPE_OK ? b->err : j->err;
        kjob_free(j);
        build_finish(s, e);
        troupe__table_check_quiesced(s);
        return TROUPE_OK;
    }
    const troupe_page *pg = j->page;
    unsigned char *c = troupe_realloc(b->cursor, pg->cursor_len);
    if (c == NULL) {
        kjob_free(j);
        build_finish(s, TROUPE_ENOMEM);
        return TROUPE_OK;
    }
    memcpy(c, pg->cursor, pg->cursor_len);
    b->cursor = c;
    b->clen = pg->cursor_len;
    /* Count them all first: an op may finish inside enqueue. */
    b->outstanding = pg->n + 1;
    for (size_t i = 0; i < pg->n; i++) {
        wop *op = troupe__wop_new(self, s, TABLE_REINDEX, pg->items[i].key,
                                  pg->items[i].key_len, NULL, 0, 0, false);
        troupe_err e = TROUPE_ENOMEM;
        if (op != NULL) {
            op->build = true;
            op->done = build_op_release;
            e = troupe__write_enqueue(self, s, op);
        }
        if (e != TROUPE_OK)
            build_op_done(self, s, e);
    }
    kjob_free(j);
    build_op_done(self, s, TROUPE_OK);
    return TROUPE_OK;
}

static troupe_err
h_switch(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tswitch *sw = m->ptr;
    if (sw == NULL)
        return troupe__table_no_payload(self, m);
    troupe__tschema_release(s->cfg.schema);
    s->cfg.schema = sw->schema;
    s->writes.gen++;
    s->writes.old_running = s->writes.nrunning;
    if (sw->build != NULL) {
        if (s->build != NULL) /* one at a time: the catalog ensures it */
            troupe__tables_build_done(sw->build, TROUPE_EBUSY);
        else
            s->build = sw->build;
    }
    troupe_free(sw);
    troupe__build_step(self, s);
    return TROUPE_OK;
}

void
troupe__table_switch(troupe_runtime *rt, troupe_addr a, tschema *schema,
                     tbuild *build)
{
    tswitch *sw = troupe_malloc(sizeof(*sw));
    troupe_msg *m = NULL;
    if (sw != NULL &&
        troupe_msg_create(&m, TABLE_SWITCH, NULL, 0) == TROUPE_OK) {
        sw->schema = schema;
        sw->build = build;
        m->ptr = sw;
        if (troupe_runtime_send(rt, a, &m) == TROUPE_OK)
            return;
    }
    troupe_free(sw);
    troupe__tschema_release(schema);
    if (build != NULL)
        troupe__tables_build_done(build, TROUPE_ECLOSED);
}

/* ---- reads (worker thread; read.c does the reading) -------------------- */

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

/* Sent to itself by h_read when the first read queues: runs after every
 * read already in the mailbox, and hands them to workers in jobs of
 * READ_BATCH (one wakeup and one READ_DONE per job, not per read). */
static troupe_err
h_read_flush(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (m->ptr != s) /* only the flush h_read sent counts */
        return troupe__table_no_payload(self, m);
    rjob *list = s->rq_head;
    s->rq_head = s->rq_tail = NULL;
    s->rq_flush_sent = false;
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
            s->nreads++;
        }
    }
    s->nreads--; /* the flush itself */
    troupe__table_check_quiesced(s);
    return TROUPE_OK;
}

static troupe_err
h_read(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    troupe_runtime *rt = troupe_actor_runtime(self);
    if (m->corr == 0)
        return TROUPE_OK; /* a read nobody waits for */
    if (m->body == NULL || s->closing) {
        troupe_runtime_reply(rt, m->from, m->corr,
                             s->closing ? TROUPE_ECLOSED : TROUPE_EPROTO, NULL);
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
    if (!s->rq_flush_sent) {
        troupe_msg *fm = NULL;
        troupe_err e = troupe_msg_create(&fm, TABLE_READ_FLUSH, NULL, 0);
        if (e == TROUPE_OK) {
            /* ptr set: a completion, exempt from the mailbox bound and
             * from shutdown's ECLOSED, as each read's own job was; no
             * drop (table_stop answers what is still queued) */
            fm->ptr = s;
            e = troupe_runtime_send(rt, troupe_self(self), &fm);
        }
        if (e != TROUPE_OK) {
            rjob_free(j);
            troupe_runtime_reply(rt, m->from, m->corr, e, NULL);
            return TROUPE_OK;
        }
        s->rq_flush_sent = true;
        s->nreads++; /* until the flush ran: quiescing waits for it */
    }
    if (s->rq_tail != NULL)
        s->rq_tail->next = j;
    else
        s->rq_head = j;
    s->rq_tail = j;
    return TROUPE_OK;
}

static troupe_err
h_read_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (m->ptr == NULL)
        return troupe__table_no_payload(self, m);
    rjob_free(m->ptr);
    s->nreads--;
    troupe__table_check_quiesced(s);
    return TROUPE_OK;
}

typedef struct tquiesce {
    void (*fn)(void *arg);
    void *arg;
} tquiesce;

static troupe_err
h_quiesce(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tquiesce *q = m->ptr;
    if (q == NULL)
        return troupe__table_no_payload(self, m);
    s->closing = true;
    if (s->build != NULL && s->build->err == TROUPE_OK)
        s->build->err = TROUPE_ECLOSED; /* winds down at its next step */
    if (s->quiesced != NULL) {          /* a second request: both are told */
        void (*fn)(void *) = s->quiesced;
        s->quiesced = NULL;
        fn(s->quiesced_arg);
    }
    s->quiesced = q->fn;
    s->quiesced_arg = q->arg;
    troupe_free(q);
    troupe__table_check_quiesced(s);
    return TROUPE_OK;
}

void
troupe__table_quiesce(troupe_runtime *rt, troupe_addr a, void (*fn)(void *),
                      void *arg)
{
    tquiesce *q = troupe_malloc(sizeof(*q));
    troupe_msg *m = NULL;
    if (q != NULL &&
        troupe_msg_create(&m, TABLE_QUIESCE, NULL, 0) == TROUPE_OK) {
        q->fn = fn;
        q->arg = arg;
        m->ptr = q;
        if (troupe_runtime_send(rt, a, &m) == TROUPE_OK)
            return;
    }
    troupe_free(q);
    fn(arg);
}

static troupe_err
h_unknown(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                         TROUPE_ENOTSUP, NULL);
    return TROUPE_OK;
}

/* ---- transactions: prepare, finish (two-phase commit) ------------------ */

/*
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
    for (tpart **pp = tp->onwork ? &s->tpwork : &s->tparts; *pp != NULL;
         pp = &(*pp)->next)
        if (*pp == tp) {
            *pp = tp->next;
            break;
        }
    troupe__locks_unreserve(s, &tp->rsv);
    tp->onwork = false;
    if (tp->timed)
        troupe_timer_cancel(self, tp->timer);
    publish = publish && ver != 0; /* a finish that publishes has one */
    s->last_pub = publish && tp->nops > 0 ? ver : 0;
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
    troupe__table_check_quiesced(s);
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
    tdefer *d = s->deferred;
    s->deferred = NULL;
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

static troupe_err
h_txn_prepare(troupe_actor *self, void *st, const troupe_msg *m)
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

static void
txn_prepare(troupe_actor *self, tstate *s, ttxn_prep *p, troupe_addr asker,
            uint64_t corr)
{
    troupe_runtime *rt = troupe_actor_runtime(self);
    troupe_err e = TROUPE_OK;
    bool wait = false;
    if (s->closing)
        e = TROUPE_ECLOSED;
    else if (atomic_load(&p->sh->state) != TTXN_OPEN)
        e = TROUPE_ECANCELED;
    kset bad = {0};
    size_t nw = 0, nr = 0;
    /* Every cause of a key's conflict is named: STALE when what the
     * transaction read (or the version it gave) no longer matches,
     * RESERVED when another transaction or a write in flight holds it. */
    for (size_t i = 0; e == TROUPE_OK && i < p->n; i++) {
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
                wait = true;
        } else if (l != NULL && l->running != NULL) {
            uint64_t cv = l->running->ext ? 0 : atomic_load(&l->running->cver);
            if (cv == 0)
                c |= TROUPE__PART_RESERVED; /* may commit after seq0 */
            else if (cv > p->seq0)
                c |= TROUPE__PART_STALE; /* stored after the snapshot */
            else if (w)
                wait = true; /* stored before it: wait for its release */
        }
        if (l != NULL && w && l->rsv > 0)
            c |= TROUPE__PART_RESERVED; /* another transaction read it */
        if (w && troupe__locks_in_range(s, k->key, k->klen))
            c |= TROUPE__PART_RESERVED; /* another one scanned over it */
        if (k->ver == 0 && troupe__keyvers_get(s, k->key, k->klen) > p->seq0)
            c |= TROUPE__PART_STALE;
        if (c != 0)
            troupe__kset_add(&bad, k->key, k->klen, c);
        nw += w;
        nr += !w;
    }
    for (size_t i = 0; e == TROUPE_OK && i < p->nranges; i++)
        range_conflicts(s, &p->ranges[i], p->seq0, &bad);
    if (e == TROUPE_OK && bad.err != TROUPE_OK)
        e = bad.err;
    if (e == TROUPE_OK && bad.n > 0) {
        answer_keys(rt, asker, corr, bad.v, bad.n);
        troupe_free(bad.v);
        troupe__ttxn_prep_free(p);
        return;
    }
    troupe_free(bad.v);
    if (e == TROUPE_OK && wait && !p->check_only) {
        tdefer *d = troupe_malloc(sizeof(*d));
        if (d != NULL) {
            d->p = p;
            d->asker = asker;
            d->corr = corr;
            d->next = s->deferred;
            s->deferred = d;
            return;
        }
        e = TROUPE_ENOMEM;
    }
    if (e != TROUPE_OK || p->check_only) {
        troupe_runtime_reply(rt, asker, corr, e, NULL);
        troupe__ttxn_prep_free(p);
        return;
    }
    tpart *tp = troupe_calloc(1, sizeof(*tp));
    if (tp != NULL) {
        tp->ops = nw ? troupe_calloc(nw, sizeof(*tp->ops)) : NULL;
        tp->rlocks = nr ? troupe_calloc(nr, sizeof(*tp->rlocks)) : NULL;
        tp->rsv.v = p->nranges ? ranges_copy(p->ranges, p->nranges) : NULL;
        if ((nw && tp->ops == NULL) || (nr && tp->rlocks == NULL) ||
            (p->nranges && tp->rsv.v == NULL)) {
            troupe_free(tp->ops);
            troupe_free(tp->rlocks);
            troupe_free(tp->rsv.v);
            troupe_free(tp);
            tp = NULL;
        }
    }
    if (tp == NULL) {
        troupe_runtime_reply(rt, asker, corr, TROUPE_ENOMEM, NULL);
        troupe__ttxn_prep_free(p);
        return;
    }
    tp->sh = troupe__ttxn_retain(p->sh);
    tp->rt = rt;
    tp->asker = asker;
    tp->corr = corr;
    tp->reserve_ms = p->reserve_ms ? p->reserve_ms : 30000;
    tp->rsv.n = p->nranges;
    tp->onwork = true;
    tp->next = s->tpwork;
    s->tpwork = tp;
    troupe__locks_reserve(s, &tp->rsv);
    /* Reserve. A lock allocation that fails undoes what was taken. */
    for (size_t i = 0; e == TROUPE_OK && i < p->n; i++) {
        const ttxn_key *k = &p->keys[i];
        klock *l = troupe__locks_get(s, k->key, k->klen);
        if (l == NULL) {
            e = TROUPE_ENOMEM;
            break;
        }
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
            e = TROUPE_ENOMEM;
            break;
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
    troupe__ttxn_prep_free(p);
    if (e == TROUPE_OK)
        e = troupe_work_submit(self, tprep_work, tp, TABLE_TXN_PREP_DONE,
                               tprep_drop);
    if (e != TROUPE_OK) {
        troupe_runtime_reply(rt, tp->asker, tp->corr, e, NULL);
        tpart_end(self, s, tp, false, 0);
    }
}

static troupe_err
h_txn_prep_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tpart *tp = m->ptr;
    troupe_runtime *rt = troupe_actor_runtime(self);
    if (tp == NULL)
        return troupe__table_no_payload(self, m);
    for (tpart **pp = &s->tpwork; *pp != NULL; pp = &(*pp)->next)
        if (*pp == tp) {
            *pp = tp->next;
            break;
        }
    tp->onwork = false;
    tp->next = s->tparts;
    s->tparts = tp;
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
    if (e == TROUPE_OK) {
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
    troupe_runtime_reply(rt, tp->asker, tp->corr, TROUPE_OK, NULL);
    return TROUPE_OK;
}

/* The reservation deadline: the part is dropped unless the transaction
 * submitted its batch first (then its finish is on the way). */
static troupe_err
h_txn_expire(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    for (tpart *tp = s->tparts; tp != NULL; tp = tp->next)
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

static troupe_err
h_txn_finish(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    ttxn_fin *f = m->ptr;
    uint64_t ver = 0;
    if (f != NULL) {
        for (tpart *tp = s->tparts; tp != NULL; tp = tp->next)
            if (tp->sh == f->sh) {
                tpart_end(self, s, tp, f->publish, f->ver);
                ver = s->last_pub;
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

/* ---- lifecycle --------------------------------------------------------- */

static troupe_err
table_init(troupe_actor *self, void *st, void *arg)
{
    tstate *s = st;
    memset(s, 0, sizeof(*s));
    s->cfg = *(const ttable_cfg *)arg;
    troupe__tschema_retain(s->cfg.schema);
    s->locks.nbuckets = 256;
    s->locks.buckets =
        troupe_calloc(s->locks.nbuckets, sizeof(*s->locks.buckets));
    s->vers.vnb = VMAP_BUCKETS_MIN;
    s->vers.vmap = troupe_calloc(s->vers.vnb, sizeof(*s->vers.vmap));
    if (s->locks.buckets == NULL || s->vers.vmap == NULL) {
        troupe_free(s->locks.buckets);
        troupe_free(s->vers.vmap);
        troupe__tschema_release(s->cfg.schema);
        return TROUPE_ENOMEM;
    }
    return TROUPE_OK;
}

/* Writes still queued behind a key (and parked ones) were never
 * submitted: they fail with ECLOSED. A key's running write is in a
 * worker or the pipeline and answers from there. */
static void
table_stop(troupe_actor *self, void *st, troupe_err reason)
{
    tstate *s = st;
    /* Reads still waiting for their READ_FLUSH: answered, never run. */
    while (s->rq_head != NULL) {
        rjob *j = s->rq_head;
        s->rq_head = j->next;
        j->next = NULL;
        troupe_runtime_reply(j->rt, j->asker, j->corr, TROUPE_ECLOSED, NULL);
        rjob_free(j);
    }
    s->rq_tail = NULL;
    /* Prepared transactions lose their part: their finish finds nothing,
     * and one not yet submitted cannot be (the prepare's locks are gone). */
    while (s->tparts != NULL) {
        tpart *tp = s->tparts;
        s->tparts = tp->next;
        int want = TTXN_OPEN;
        atomic_compare_exchange_strong(&tp->sh->state, &want, TTXN_ABORTED);
        tpart_free(tp);
    }
    troupe__qver_stop(self, s);
    while (s->deferred != NULL) {
        struct tdefer *d = s->deferred;
        s->deferred = d->next;
        troupe_runtime_reply(troupe_actor_runtime(self), d->asker, d->corr,
                             TROUPE_ECLOSED, NULL);
        troupe__ttxn_prep_free(d->p);
        troupe_free(d);
    }
    for (wop *w = s->locks.rwait_head; w != NULL;) {
        wop *nx = w->next;
        troupe_runtime_reply(w->rt, w->asker, w->corr, TROUPE_ECLOSED, NULL);
        troupe__wop_free(w);
        w = nx;
    }
    troupe__keyvers_clear(s);
    troupe_free(s->vers.vmap);
    for (wop *p = s->writes.parked; p != NULL;) {
        wop *nx = p->pnext;
        troupe_runtime_reply(p->rt, p->asker, p->corr, TROUPE_ECLOSED, NULL);
        troupe__wop_free(p);
        p = nx;
    }
    for (size_t i = 0; i < s->locks.nbuckets; i++) {
        klock *l = s->locks.buckets[i];
        while (l != NULL) {
            klock *ln = l->next;
            for (wop *w = l->whead; w != NULL;) {
                wop *nx = w->next;
                troupe_runtime_reply(w->rt, w->asker, w->corr, TROUPE_ECLOSED,
                                     NULL);
                troupe__wop_free(w);
                w = nx;
            }
            troupe_free(l);
            l = ln;
        }
    }
    troupe_free(s->locks.buckets);
    troupe__tschema_release(s->cfg.schema);
    troupe__write_clog_clear(s);
    if (s->build != NULL)
        build_finish(s, TROUPE_ECLOSED);
    troupe__expiry_stop(self, s);
}

static const troupe_handler_fn table_handlers[TABLE_NKINDS] = {
    [TABLE_INSERT] = troupe__write_h_write,
    [TABLE_UPDATE] = troupe__write_h_write,
    [TABLE_UPSERT] = troupe__write_h_write,
    [TABLE_DELETE] = troupe__write_h_write,
    [TABLE_GET] = h_read,
    [TABLE_GET_MANY] = h_read,
    [TABLE_SCAN] = h_read,
    [TABLE_PREP_DONE] = troupe__write_h_prep_done,
    [TABLE_COMMIT_DONE] = troupe__write_h_commit_done,
    [TABLE_READ_DONE] = h_read_done,
    [TABLE_READ_FLUSH] = h_read_flush,
    [TABLE_SWITCH] = h_switch,
    [TABLE_BUILD_KEYS] = h_build_keys,
    [TABLE_QUIESCE] = h_quiesce,
    [TABLE_TXN_PREPARE] = h_txn_prepare,
    [TABLE_TXN_FINISH] = h_txn_finish,
    [TABLE_TXN_PREP_DONE] = h_txn_prep_done,
    [TABLE_TXN_EXPIRE] = h_txn_expire,
    [TABLE_TXN_QVER] = troupe__qver_h_query,
    [TABLE_TXN_QVER_DONE] = troupe__qver_h_done,
    [TABLE_VEVICT] = troupe__keyvers_h_vevict,
    [TABLE_VEVICT_NEXT] = troupe__keyvers_h_vevict_next,
    [TABLE_STATS] = troupe__keyvers_h_stats,
    [TABLE_PURGE] = troupe__expiry_h_purge,
    [TABLE_PURGE_KEYS] = troupe__expiry_h_keys,
};

static const troupe_actor_def table_def = {
    .name = "troupe.table",
    .state_size = sizeof(tstate),
    .init = table_init,
    .stop = table_stop,
    .handlers = table_handlers,
    .n_handlers = TABLE_NKINDS,
    .on_unknown = h_unknown,
    /* the requests whose whole input is their body (table_int.h); the
     * transaction kinds carry a ptr, the rest are the actor's own */
    .remote_kinds =
        TROUPE_KIND_BIT(TABLE_INSERT) | TROUPE_KIND_BIT(TABLE_UPDATE) |
        TROUPE_KIND_BIT(TABLE_UPSERT) | TROUPE_KIND_BIT(TABLE_DELETE) |
        TROUPE_KIND_BIT(TABLE_GET) | TROUPE_KIND_BIT(TABLE_GET_MANY) |
        TROUPE_KIND_BIT(TABLE_SCAN),
};

static void
cfg_free(void *arg)
{
    ttable_cfg *c = arg;
    troupe__tschema_release(c->schema);
    troupe_free(c);
}

troupe_err
troupe__table_spawn(troupe_runtime *rt, const ttable_cfg *cfg, troupe_addr *out)
{
    ttable_cfg *c = troupe_malloc(sizeof(*c));
    if (c == NULL) {
        troupe__tschema_release(cfg->schema);
        return TROUPE_ENOMEM;
    }
    *c = *cfg;
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = c;
    so.arg_free = cfg_free;
    /* Scheduler 0 runs the host's callbacks (and in embedded mode is the
     * host's own loop): tables go to the others, spread by table id
     * (family "t.<id>"), so a host and its busiest table use two cores. */
    unsigned n = troupe_runtime_schedulers(rt);
    unsigned long long id = 0;
    if (n > 1 && sscanf(troupe_cf_name(cfg->cf_t), "t.%llu", &id) == 1)
        so.scheduler = (int)(1 + id % (n - 1));
    troupe_err e = troupe_actor_spawn(rt, &table_def, &so, out);
    if (e != TROUPE_OK)
        cfg_free(c);
    return e;
}
