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
 * queries (qver.c), the disk reads (read.c), index builds
 * (build_actor.c), expired-row purges (expiry.c). This file holds the
 * actor's definition and lifecycle.
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

/* An internal kind (a completion or a request from the data layer) that
 * came without its payload: these kinds are local-only, so only a local
 * sender's mistake can make one. Answered, never followed. */
troupe_err
troupe__table_no_payload(troupe_actor *self, const troupe_msg *m)
{
    troupe_reply_error(self, m, TROUPE_EINVAL);
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
    troupe__reads_stop(self, s);
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
    troupe__build_stop(self, s);
    troupe__expiry_stop(self, s);
}

static const troupe_handler_fn table_handlers[TABLE_NKINDS] = {
    [TABLE_INSERT] = troupe__write_h_write,
    [TABLE_UPDATE] = troupe__write_h_write,
    [TABLE_UPSERT] = troupe__write_h_write,
    [TABLE_DELETE] = troupe__write_h_write,
    [TABLE_GET] = troupe__reads_h_read,
    [TABLE_GET_MANY] = troupe__reads_h_read,
    [TABLE_SCAN] = troupe__reads_h_read,
    [TABLE_PREP_DONE] = troupe__write_h_prep_done,
    [TABLE_COMMIT_DONE] = troupe__write_h_commit_done,
    [TABLE_READ_DONE] = troupe__reads_h_done,
    [TABLE_READ_FLUSH] = troupe__reads_h_flush,
    [TABLE_SWITCH] = troupe__build_h_switch,
    [TABLE_BUILD_KEYS] = troupe__build_h_keys,
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
