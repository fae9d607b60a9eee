/*
 * Creating, dropping, pausing and resuming queues: catalog jobs
 * (troupe__ddl), in one order with the tables' changes; each call submits
 * one and waits for its end.
 *
 * Queues are entries of the catalog (actors/catalog) in its `meta`
 * family: key ("queue", name) -> msgpack [1, id, partitions,
 * retention_ms], or [2, ..., max_attempts, paused] once either is set
 * (format.c's codec). A pause or a resume rewrites the entry (synced)
 * and only then changes what the partitions see, so a pause a caller was
 * told of survives a crash. Ids come from the catalog's one
 * counter (never reused, so a dropped queue's family `q.<id>` never
 * collides with a new one's, nor with a table's families). A create
 * stores the counter (synced) before creating the family, then the entry
 * (synced): a crash in between leaves at worst an unused id or a family
 * no entry names. A step that stops partitions returns WAIT and their
 * stop callbacks resume the job: no thread waits for an actor.
 */
#include "queue_int.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

/* A create or a drop; on the stack of the _wait call that submitted it
 * and waits for it. */
typedef struct qjob {
    troupe__ddl ddl; /* first: the catalog's job */
    troupe_queues *qs;
    troupe__waiter done;
    const troupe_queue_spec *spec; /* create */
    const char *name;              /* drop, pause */
    bool paused;                   /* pause (true) or resume */
    tq_queue *q; /* create: the queue being undone; drop: the queue,
                    unlisted */
} qjob;

static void
qjob_done(troupe__ddl *d)
{
    troupe__waiter_release(&((qjob *)d)->done, d->err, NULL);
}

/* Submits j and waits for its end: its error. */
static troupe_err
qjob_run(qjob *j, troupe_queues *qs, troupe__ddl_step (*step)(troupe__ddl *))
{
    j->qs = qs;
    j->ddl.cat = qs->cat;
    j->ddl.step = step;
    j->ddl.done = qjob_done;
    troupe__waiter_init(&j->done, 1);
    return troupe__waiter_finish(&j->done, troupe__ddl_submit(&j->ddl), NULL);
}

static void
parts_stopped(void *arg)
{
    troupe__ddl_resume(arg);
}

/* A queue's entry (synced). */
static troupe_err
put_entry(troupe_queues *qs, const char *name, const tq_entry *en)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_err ke = troupe__tq_entry_pack(name, en, &w, &p);
    size_t n;
    const void *v = troupe_pack_data(&p, &n);
    troupe__meta_batch m;
    troupe__meta_begin(&m, qs->cat);
    troupe__meta_put_key(&m, &w, ke, v, n);
    troupe_err e = troupe__meta_commit(&m, TROUPE_SYNC_ON);
    troupe_pack_fini(&p);
    return e;
}

/* (0) the counter (synced), the family, the object, the partitions, the
 * entry (synced), the map -> DONE; on a failure once partitions run:
 * their stop -> WAIT; (1) the object goes -> DONE. */
static troupe__ddl_step
create_step(troupe__ddl *d)
{
    qjob *j = (qjob *)d;
    troupe_queues *qs = j->qs;
    const troupe_queue_spec *spec = j->spec;
    if (d->at++ > 0) {
        troupe__tq_release(j->q);
        return TROUPE__DDL_DONE;
    }
    troupe_err e = troupe__tq_map_absent(qs, spec->name);
    uint64_t id = 0;
    if (e == TROUPE_OK)
        e = troupe__catalog_ids(qs->cat, 1, &id);
    if (e == TROUPE_OK) { /* the counter first: see the design note */
        troupe__meta_batch m;
        troupe__meta_begin(&m, qs->cat);
        troupe__meta_put_seq(&m);
        e = troupe__meta_commit(&m, TROUPE_SYNC_ON);
    }
    char cfn[32];
    troupe__cf_name('q', id, cfn, sizeof(cfn));
    if (e == TROUPE_OK)
        e = troupe_db_cf_create(qs->db, cfn, NULL);
    tq_queue *q = NULL;
    tq_entry en = {.id = id,
                   .partitions = spec->partitions,
                   .retention_ms = spec->retention_ms,
                   .max_attempts = spec->max_attempts};
    if (e == TROUPE_OK)
        e = troupe__tq_queue_create(qs, spec->name, &en, &q);
    if (e == TROUPE_OK)
        e = troupe__tq_partitions_spawn(q);
    if (e == TROUPE_OK)
        e = put_entry(qs, spec->name, &en);
    if (e == TROUPE_OK)
        e = troupe__tq_map_add(qs, q);
    d->err = e;
    if (e == TROUPE_OK || q == NULL)
        return TROUPE__DDL_DONE;
    /* partitions that never delivered: their stop waits for no worker */
    j->q = q;
    troupe__tq_partitions_stop(q, parts_stopped, d);
    return TROUPE__DDL_WAIT;
}

troupe_err
troupe_queues_create_wait(troupe_queues *qs, const troupe_queue_spec *spec)
{
    if (qs == NULL || spec == NULL ||
        !troupe_catalog_name_valid(spec->name, NULL) || spec->partitions == 0 ||
        spec->partitions > TROUPE_QUEUE_PARTITIONS_MAX ||
        spec->retention_ms < 0)
        return TROUPE_EINVAL;
    if (spec->max_attempts > TROUPE_QUEUE_ATTEMPTS_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "max_attempts %u over TROUPE_QUEUE_ATTEMPTS_MAX "
                            "(%u)",
                            spec->max_attempts, TROUPE_QUEUE_ATTEMPTS_MAX);
    troupe_err e = troupe__tq_writable(qs, "troupe_queues_create_wait");
    if (e == TROUPE_OK)
        e = troupe__block_check("troupe_queues_create_wait");
    if (e != TROUPE_OK)
        return e;
    qjob j = {.spec = spec};
    return qjob_run(&j, qs, create_step);
}

/* (0) unlist the queue, stop its partitions -> WAIT; (1) delete the
 * entry (synced), drop q.<id> -> DONE. */
static troupe__ddl_step
drop_step(troupe__ddl *d)
{
    qjob *j = (qjob *)d;
    troupe_queues *qs = j->qs;
    if (d->at++ == 0) {
        if ((d->err = troupe__tq_map_take(qs, j->name, &j->q)) != TROUPE_OK)
            return TROUPE__DDL_DONE;
        troupe__tq_partitions_stop(j->q, parts_stopped, d);
        return TROUPE__DDL_WAIT;
    }
    troupe__meta_batch m;
    troupe__meta_begin(&m, qs->cat);
    troupe__meta_del_entry(&m, "queue", j->name);
    troupe_err e = troupe__meta_commit(&m, TROUPE_SYNC_ON);
    char cfn[32];
    troupe__cf_name('q', j->q->id, cfn, sizeof(cfn));
    if (e == TROUPE_OK)
        e = troupe_db_cf_drop(qs->db, cfn);
    troupe__tq_release(j->q);
    d->err = e;
    return TROUPE__DDL_DONE;
}

troupe_err
troupe_queues_drop_wait(troupe_queues *qs, const char *name)
{
    if (qs == NULL || !troupe_catalog_name_valid(name, NULL))
        return TROUPE_EINVAL;
    troupe_err e = troupe__tq_writable(qs, "troupe_queues_drop_wait");
    if (e == TROUPE_OK)
        e = troupe__block_check("troupe_queues_drop_wait");
    if (e != TROUPE_OK)
        return e;
    qjob j = {.name = name};
    return qjob_run(&j, qs, drop_step);
}

/* (0) the entry rewritten with the new state (synced), then the state
 * the partitions see; a resume kicks them -> DONE. */
static troupe__ddl_step
pause_step(troupe__ddl *d)
{
    qjob *j = (qjob *)d;
    tq_queue *q = NULL;
    d->err = troupe__tq_find(j->qs, j->name, &q);
    if (d->err != TROUPE_OK)
        return TROUPE__DDL_DONE;
    tq_entry en = {.id = q->id,
                   .partitions = q->partitions,
                   .retention_ms = q->retention_ms,
                   .max_attempts = q->max_attempts,
                   .paused = j->paused};
    d->err = put_entry(j->qs, q->name, &en);
    if (d->err == TROUPE_OK) {
        atomic_store(&q->paused, j->paused);
        if (!j->paused)
            troupe__tq_kick_range(q, 0, q->partitions - 1, TQ_KICK);
    }
    troupe__tq_release(q);
    return TROUPE__DDL_DONE;
}

static troupe_err
pause_run(troupe_queues *qs, const char *name, bool paused, const char *call)
{
    if (qs == NULL)
        return TROUPE_EINVAL;
    tq_queue *q = NULL; /* the name's errors, before anything is queued */
    troupe_err e = troupe__tq_find_writable(qs, name, call, &q);
    if (e != TROUPE_OK)
        return e;
    troupe__tq_release(q);
    if ((e = troupe__block_check(call)) != TROUPE_OK)
        return e;
    qjob j = {.name = name, .paused = paused};
    return qjob_run(&j, qs, pause_step);
}

troupe_err
troupe_queue_pause(troupe_queues *qs, const char *queue)
{
    return pause_run(qs, queue, true, "troupe_queue_pause");
}

troupe_err
troupe_queue_resume(troupe_queues *qs, const char *queue)
{
    return pause_run(qs, queue, false, "troupe_queue_resume");
}
