/*
 * The table actor: one per table, serving rows of families t.<id> (row
 * envelopes) and m.<id> (manifests) plus the x.<index id> families of its
 * indexes. Formats: docs/data-model.md.
 *
 * The actor's loop never touches the disk. Its state is a tstate
 * (table_int.h), one sub-struct per concept file: the write state machine
 * and its unique bookkeeping (write.c), write preparation (prepare.c, no
 * state), per-key locks and reservations (locks.c), key versions
 * (keyvers.c), the transaction participant (participant.c), versioned
 * queries (qver.c), expired-row purges (expiry.c). This file holds the
 * actor's definition and lifecycle and the concepts that have no file of
 * their own yet: index builds and the actor's disk reads.
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

/* Calls the quiesce callback once nothing of this actor is in flight. */
void
troupe__table_check_quiesced(tstate *s)
{
    if (s->quiesced == NULL || s->writes.nrunning > 0 || s->nreads > 0 ||
        s->vers.evicting || s->purge != NULL || s->parts.prepared != NULL ||
        s->parts.working != NULL || s->locks.rwait_head != NULL ||
        s->build != NULL)
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
    troupe__parts_stop(self, s);
    troupe__qver_stop(self, s);
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
    [TABLE_TXN_PREPARE] = troupe__parts_h_prepare,
    [TABLE_TXN_FINISH] = troupe__parts_h_finish,
    [TABLE_TXN_PREP_DONE] = troupe__parts_h_prep_done,
    [TABLE_TXN_EXPIRE] = troupe__parts_h_expire,
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
