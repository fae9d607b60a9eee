/*
 * Versioned queries of the table actor (pi_db's query with version,
 * docs/architecture.md): the current version of each key asked for, from
 * the actor's key versions (keyvers.c), with its latest value, read here
 * from memory or on a worker. A query on a key whose write is in flight
 * waits for that write (tstate.qver) and runs again after a release.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

typedef struct qdefer {
    struct qdefer *next;
    ttxn_qver *q;
    troupe_addr asker;
    uint64_t corr;
} qdefer;

ttxn_qver *
troupe__ttxn_qver_new(const void *const *keys, const size_t *klens, size_t n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += klens[i];
    ttxn_qver *q = troupe_malloc(sizeof(*q) +
                                 n * (sizeof(void *) + sizeof(size_t)) + bytes);
    if (q == NULL)
        return NULL;
    q->n = n;
    q->keys = (const unsigned char **)(q + 1);
    q->klens = (size_t *)(q->keys + n);
    unsigned char *k = (unsigned char *)(q->klens + n);
    for (size_t i = 0; i < n; i++) {
        memcpy(k, keys[i], klens[i]);
        q->keys[i] = k;
        q->klens[i] = klens[i];
        k += klens[i];
    }
    return q;
}

typedef struct qjob {
    troupe_runtime *rt;
    troupe_addr asker;
    uint64_t corr;
    ttable_cfg cfg;
    troupe_snapshot *snap;
    uint64_t *vers;
    ttxn_qver *q;
} qjob;

static void
qjob_free(void *arg)
{
    qjob *j = arg;
    troupe_snapshot_destroy(j->snap);
    troupe__tschema_release(j->cfg.schema);
    troupe_free(j->vers);
    troupe_free(j->q);
    troupe_free(j);
}

/* The reply [[version, ...], rows] from the storage's answers. */
static troupe_err
qver_body(const ttxn_qver *q, const uint64_t *vers, const troupe_err *errs,
          void *const *vals, const size_t *vlens, int64_t now,
          troupe_body **out)
{
    size_t found = 0;
    for (size_t i = 0; i < q->n; i++) {
        int64_t exp;
        const void *doc;
        size_t dlen;
        if (errs[i] == TROUPE_ENOENT)
            continue;
        if (errs[i] != TROUPE_OK)
            return errs[i];
        troupe_err e =
            troupe__envelope_parse(vals[i], vlens[i], &exp, &doc, &dlen);
        if (e != TROUPE_OK)
            return e;
        found += troupe__row_live(exp, now);
    }
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_array(&p, (uint32_t)q->n);
    for (size_t i = 0; i < q->n; i++)
        troupe_pack_uint(&p, vers[i]);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, (uint32_t)found);
    for (size_t i = 0; i < q->n; i++) {
        int64_t exp;
        const void *doc;
        size_t dlen;
        if (errs[i] == TROUPE_OK &&
            troupe__envelope_parse(vals[i], vlens[i], &exp, &doc, &dlen) ==
                TROUPE_OK &&
            troupe__row_live(exp, now))
            troupe__table_pack_row(&p, q->keys[i], q->klens[i], exp, doc, dlen);
    }
    troupe_pack_nil(&p);
    troupe_pack_bool(&p, false);
    return troupe_pack_take_body(&p, out); /* p.err, if any */
}

/* Reads q's keys (cached: memory only) and answers with vers, unless the
 * read needs the disk (EAGAIN: nothing answered). */
static troupe_err
qver_answer(troupe_runtime *rt, troupe_addr asker, uint64_t corr,
            const ttable_cfg *cfg, const troupe_snapshot *snap, bool cached,
            const ttxn_qver *q, const uint64_t *vers)
{
    size_t n = q->n;
    void **vals = troupe_calloc(n, sizeof(*vals));
    size_t *vlens = troupe_calloc(n, sizeof(*vlens));
    troupe_err *errs = troupe_calloc(n, sizeof(*errs));
    troupe_err e = vals && vlens && errs ? TROUPE_OK : TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = cached ? troupe_db_multi_get_cached(cfg->db, cfg->cf_t, n,
                                                (const void *const *)q->keys,
                                                q->klens, vals, vlens, errs)
                   : troupe_db_multi_get(cfg->db, cfg->cf_t, snap, n,
                                         (const void *const *)q->keys, q->klens,
                                         vals, vlens, errs);
    for (size_t i = 0; e == TROUPE_OK && cached && i < n; i++)
        if (errs[i] == TROUPE_EAGAIN)
            e = TROUPE_EAGAIN;
    if (e != TROUPE_EAGAIN) {
        troupe_body *body = NULL;
        if (e == TROUPE_OK)
            e = qver_body(q, vers, errs, vals, vlens,
                          cfg->clock(cfg->clock_ctx), &body);
        troupe_runtime_reply(rt, asker, corr, e, e == TROUPE_OK ? &body : NULL);
    }
    for (size_t i = 0; vals != NULL && i < n; i++)
        troupe_free(vals[i]);
    troupe_free(vals);
    troupe_free(vlens);
    troupe_free(errs);
    return e;
}

static void
qver_work(void *arg)
{
    qjob *j = arg;
    qver_answer(j->rt, j->asker, j->corr, &j->cfg, j->snap, false, j->q,
                j->vers);
}

/* The key's version now (no write of it in flight: checked before), one
 * that may be shown to the client: below the durable floor (the error of
 * troupe__vers_check otherwise, EBUSY in practice never). */
static troupe_err
qver_of(tstate *s, const unsigned char *key, size_t klen, uint64_t *out)
{
    klock *l = *troupe__locks_slot(s, key, klen);
    const vent *v =
        troupe__keyvers_find(s, key, klen, troupe__fnv1a64(key, klen));
    uint64_t ver;
    if (l != NULL && l->running != NULL) { /* stored, not yet published */
        ver = atomic_load(&l->running->cver);
    } else if (v != NULL) {
        ver = v->ver;
    } else {
        /* the key's first version, created once; this loop must not
         * block, so a counter at the floor (never in practice) refuses */
        if ((ver = troupe__vers_try(s->cfg.vers)) == 0)
            return troupe__vers_check(s->cfg.vers, UINT64_MAX);
        troupe__keyvers_publish(s, key, klen, ver,
                                s->cfg.clock(s->cfg.clock_ctx), true);
        if (troupe__keyvers_get(s, key, klen) != ver)
            ver = troupe__keyvers_get(s, key, klen); /* map was full */
    }
    *out = ver;
    return troupe__vers_check(s->cfg.vers, ver);
}

static void
qver_run(troupe_actor *self, tstate *s, ttxn_qver *q, troupe_addr asker,
         uint64_t corr)
{
    troupe_runtime *rt = troupe_actor_runtime(self);
    if (s->life.closing) {
        troupe_runtime_reply(rt, asker, corr, TROUPE_ECLOSED, NULL);
        troupe_free(q);
        return;
    }
    /* A write of one of the keys in flight: answer after it. (Checked for
     * every key first, so that no first version is created twice.) */
    for (size_t i = 0; i < q->n; i++) {
        klock *l = *troupe__locks_slot(s, q->keys[i], q->klens[i]);
        if (l != NULL && l->running != NULL &&
            (l->running->ext || atomic_load(&l->running->cver) == 0)) {
            /* a prepared XA transaction's write may wait for ever */
            if (troupe__parts_xa_holder(s, q->keys[i], q->klens[i]) != NULL) {
                troupe_runtime_reply(rt, asker, corr, TROUPE_EBUSY, NULL);
                troupe_free(q);
                return;
            }
            qdefer *d = troupe_malloc(sizeof(*d));
            if (d == NULL) {
                troupe_runtime_reply(rt, asker, corr, TROUPE_ENOMEM, NULL);
                troupe_free(q);
                return;
            }
            d->q = q;
            d->asker = asker;
            d->corr = corr;
            d->next = s->qver.deferred;
            s->qver.deferred = d;
            return;
        }
    }
    uint64_t *vers = troupe_calloc(q->n, sizeof(*vers));
    if (vers == NULL) {
        troupe_runtime_reply(rt, asker, corr, TROUPE_ENOMEM, NULL);
        troupe_free(q);
        return;
    }
    troupe_err ve = TROUPE_OK;
    for (size_t i = 0; i < q->n && ve == TROUPE_OK; i++)
        ve = qver_of(s, q->keys[i], q->klens[i], &vers[i]);
    if (ve != TROUPE_OK) {
        troupe_runtime_reply(rt, asker, corr, ve, NULL);
        troupe_free(vers);
        troupe_free(q);
        return;
    }
    /* No write of the keys is in flight, and none can start while this
     * handler runs: the latest values go with `vers`. Read them here when
     * they are in memory; else on a worker, from a snapshot taken now. */
    if (qver_answer(rt, asker, corr, &s->cfg, NULL, true, q, vers) !=
        TROUPE_EAGAIN) {
        troupe_free(vers);
        troupe_free(q);
        return;
    }
    qjob *j = troupe_calloc(1, sizeof(*j));
    troupe_err e =
        j != NULL ? troupe_snapshot_create(s->cfg.db, &j->snap) : TROUPE_ENOMEM;
    if (e != TROUPE_OK) {
        troupe_runtime_reply(rt, asker, corr, e, NULL);
        troupe_free(j);
        troupe_free(vers);
        troupe_free(q);
        return;
    }
    j->rt = rt;
    j->asker = asker;
    j->corr = corr;
    j->cfg = s->cfg;
    troupe__tschema_retain(j->cfg.schema);
    j->vers = vers;
    j->q = q;
    /* declared: the job, its keys and their versions; the answer it builds
     * holds one row per key, bounded by the storage limits */
    uint64_t held = sizeof(*j) + q->n * (sizeof(*vers) + sizeof(*q->keys) +
                                         sizeof(*q->klens));
    for (size_t i = 0; i < q->n; i++)
        held += q->klens[i];
    e = troupe_work_submit_in(self, TROUPE_LANE_STORAGE, held, qver_work, j,
                              TABLE_TXN_QVER_DONE, qjob_free);
    if (e != TROUPE_OK) {
        troupe_runtime_reply(rt, asker, corr, e, NULL);
        qjob_free(j);
        return;
    }
    troupe__table_job_begin(s);
}

void
troupe__qver_retry(troupe_actor *self, tstate *s)
{
    qdefer *d = s->qver.deferred;
    s->qver.deferred = NULL;
    while (d != NULL) {
        qdefer *nx = d->next;
        qver_run(self, s, d->q, d->asker, d->corr);
        troupe_free(d);
        d = nx;
    }
}

troupe_err
troupe__qver_h_query(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    ttxn_qver *q = m->ptr;
    if (q == NULL || q->n == 0) {
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                             TROUPE_EPROTO, NULL);
        troupe_free(q);
        return TROUPE_OK;
    }
    qver_run(self, s, q, m->from, m->corr);
    return TROUPE_OK;
}

troupe_err
troupe__qver_h_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (m->ptr == NULL)
        return troupe__table_no_payload(self, m);
    qjob_free(m->ptr);
    troupe__table_job_end(s);
    return TROUPE_OK;
}

/* At the actor's stop: every query still waiting for a write is answered
 * ECLOSED. */
void
troupe__qver_stop(troupe_actor *self, tstate *s)
{
    while (s->qver.deferred != NULL) {
        qdefer *d = s->qver.deferred;
        s->qver.deferred = d->next;
        troupe_runtime_reply(troupe_actor_runtime(self), d->asker, d->corr,
                             TROUPE_ECLOSED, NULL);
        troupe_free(d->q);
        troupe_free(d);
    }
}
