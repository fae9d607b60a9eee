/*
 * The table actor: one per table, serving rows of families t.<id> (row
 * envelopes) and m.<id> (manifests) plus the x.<index id> families of its
 * indexes. Formats: docs/data-model.md. This file is the actor itself:
 * its definition and handler table, init, stop (composed of each
 * concept's stop), quiesce, unknown kinds, spawn; it owns tstate.cfg and
 * tstate.life.
 *
 * The actor's loop never touches the disk. Its state is a tstate
 * (table_int.h), one sub-struct per concept file: the write state machine
 * and its unique bookkeeping (write.c), write preparation (prepare.c, no
 * state), per-key locks and reservations (locks.c), key versions
 * (keyvers.c), the transaction participant (participant.c), versioned
 * queries (qver.c), the disk reads (read.c), index builds
 * (build.c), expired-row purges (expiry.c). This file calls every
 * concept and none calls it.
 *
 * Reads need no lock: they run on a worker against RocksDB's latest state
 * (a scan against one implicit snapshot) and answer from there.
 */
#include <stdio.h>
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"

/* Calls a pending quiesce callback with err, once. */
static void
quiesced_call(tstate *s, troupe_err err)
{
    troupe__quiesce_fn fn = s->life.quiesced;
    if (fn == NULL)
        return;
    s->life.quiesced = NULL;
    fn(s->life.quiesced_arg, err);
}

/* Calls the quiesce callback once nothing of this actor is in flight. */
static void
check_quiesced(tstate *s)
{
    if (s->life.quiesced == NULL || s->writes.nrunning > s->parts.xa_ops ||
        s->life.jobs > 0 || s->vers.evicting || s->purge != NULL ||
        !troupe__parts_quiet(s) || s->locks.rwait_head != NULL ||
        s->build != NULL)
        return;
    quiesced_call(s, TROUPE_OK);
}

typedef struct tquiesce {
    troupe__quiesce_fn fn;
    void *arg;
} tquiesce;

/* The request was never handled (the actor went first). */
static void
quiesce_drop(void *arg)
{
    tquiesce *q = arg;
    troupe__quiesce_fn fn = q->fn;
    void *fa = q->arg;
    troupe_free(q);
    fn(fa, TROUPE_ECLOSED);
}

static troupe_err
h_quiesce(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tquiesce *q = m->ptr;
    if (q == NULL)
        return troupe__table_no_payload(self, m);
    s->life.closing = true;
    if (s->build != NULL && s->build->err == TROUPE_OK)
        s->build->err = TROUPE_ECLOSED; /* winds down at its next step */
    quiesced_call(s, TROUPE_OK);        /* a second request: both are told */
    s->life.quiesced = q->fn;
    s->life.quiesced_arg = q->arg;
    troupe_free(q);
    return TROUPE_OK;
}

void
troupe__table_quiesce(troupe_runtime *rt, troupe_addr a, troupe__quiesce_fn fn,
                      void *arg)
{
    tquiesce *q = troupe_malloc(sizeof(*q));
    troupe_msg *m = NULL;
    if (q != NULL &&
        troupe_msg_create(&m, TABLE_QUIESCE, NULL, 0) == TROUPE_OK) {
        q->fn = fn;
        q->arg = arg;
        m->ptr = q;
        m->ptr_drop = quiesce_drop;
        /* a failed send drops m, and with it q: fn is told there */
        (void)troupe_runtime_send(rt, a, &m);
        return;
    }
    troupe_free(q);
    fn(arg, TROUPE_ECLOSED);
}

static troupe_err
h_unknown(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                         TROUPE_ENOTSUP, NULL);
    return TROUPE_OK;
}

static troupe_err
table_init(troupe_actor *self, void *st, void *arg)
{
    tstate *s = st;
    memset(s, 0, sizeof(*s));
    s->cfg = *(const ttable_cfg *)arg;
    troupe__tschema_retain(s->cfg.schema);
    troupe_err e = troupe__locks_init(s);
    if (e == TROUPE_OK && (e = troupe__keyvers_init(s)) != TROUPE_OK)
        troupe__locks_stop(self, s);
    if (e != TROUPE_OK)
        troupe__tschema_release(s->cfg.schema);
    return e;
}

/* A hard stop: each concept answers what it still holds with ECLOSED and
 * frees its state. Work on a worker or in the pipeline answers from there
 * (quiescing, troupe__table_quiesce, waits for it). */
static void
table_stop(troupe_actor *self, void *st, troupe_err reason)
{
    tstate *s = st;
    troupe__reads_stop(self, s);
    troupe__parts_stop(self, s);
    troupe__qver_stop(self, s);
    troupe__locks_stop(self, s);
    troupe__writes_stop(self, s);
    troupe__keyvers_stop(self, s);
    troupe__build_stop(self, s);
    troupe__expiry_stop(self, s);
    troupe__tschema_release(s->cfg.schema);
    quiesced_call(s, TROUPE_ECLOSED); /* stopped before it was idle */
}

/*
 * Each handler runs through a wrapper that checks after it whether a
 * quiesce asked for can complete (one load and a branch when none is), so
 * no concept calls back into this file, and the callback fires after the
 * handler whose work was the last, never in its middle.
 */
#define QUIESCE_AFTER(h)                                                       \
    static troupe_err h##_q(troupe_actor *self, void *st, const troupe_msg *m) \
    {                                                                          \
        troupe_err e = h(self, st, m);                                         \
        check_quiesced(st);                                                    \
        return e;                                                              \
    }

QUIESCE_AFTER(troupe__write_h_write)
QUIESCE_AFTER(troupe__reads_h_read)
QUIESCE_AFTER(troupe__write_h_prep_done)
QUIESCE_AFTER(troupe__write_h_commit_done)
QUIESCE_AFTER(troupe__reads_h_done)
QUIESCE_AFTER(troupe__reads_h_flush)
QUIESCE_AFTER(troupe__build_h_switch)
QUIESCE_AFTER(troupe__build_h_keys)
QUIESCE_AFTER(troupe__build_h_progress)
QUIESCE_AFTER(h_quiesce)
QUIESCE_AFTER(troupe__parts_h_prepare)
QUIESCE_AFTER(troupe__parts_h_finish)
QUIESCE_AFTER(troupe__parts_h_prep_done)
QUIESCE_AFTER(troupe__parts_h_expire)
QUIESCE_AFTER(troupe__qver_h_query)
QUIESCE_AFTER(troupe__qver_h_done)
QUIESCE_AFTER(troupe__keyvers_h_vevict)
QUIESCE_AFTER(troupe__keyvers_h_vevict_next)
QUIESCE_AFTER(troupe__keyvers_h_stats)
QUIESCE_AFTER(troupe__expiry_h_purge)
QUIESCE_AFTER(troupe__expiry_h_keys)

static const troupe_handler_fn table_handlers[TABLE_NKINDS] = {
    [TABLE_INSERT] = troupe__write_h_write_q,
    [TABLE_UPDATE] = troupe__write_h_write_q,
    [TABLE_UPSERT] = troupe__write_h_write_q,
    [TABLE_DELETE] = troupe__write_h_write_q,
    [TABLE_GET] = troupe__reads_h_read_q,
    [TABLE_GET_MANY] = troupe__reads_h_read_q,
    [TABLE_SCAN] = troupe__reads_h_read_q,
    [TABLE_PREP_DONE] = troupe__write_h_prep_done_q,
    [TABLE_COMMIT_DONE] = troupe__write_h_commit_done_q,
    [TABLE_READ_DONE] = troupe__reads_h_done_q,
    [TABLE_READ_FLUSH] = troupe__reads_h_flush_q,
    [TABLE_SWITCH] = troupe__build_h_switch_q,
    [TABLE_BUILD_KEYS] = troupe__build_h_keys_q,
    [TABLE_PROGRESS] = troupe__build_h_progress_q,
    [TABLE_QUIESCE] = h_quiesce_q,
    [TABLE_TXN_PREPARE] = troupe__parts_h_prepare_q,
    [TABLE_TXN_FINISH] = troupe__parts_h_finish_q,
    [TABLE_TXN_PREP_DONE] = troupe__parts_h_prep_done_q,
    [TABLE_TXN_EXPIRE] = troupe__parts_h_expire_q,
    [TABLE_TXN_QVER] = troupe__qver_h_query_q,
    [TABLE_TXN_QVER_DONE] = troupe__qver_h_done_q,
    [TABLE_VEVICT] = troupe__keyvers_h_vevict_q,
    [TABLE_VEVICT_NEXT] = troupe__keyvers_h_vevict_next_q,
    [TABLE_STATS] = troupe__keyvers_h_stats_q,
    [TABLE_PURGE] = troupe__expiry_h_purge_q,
    [TABLE_PURGE_KEYS] = troupe__expiry_h_keys_q,
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
