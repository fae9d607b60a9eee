/*
 * The queue catalog and the shared objects: queues, claims, workers.
 *
 * Catalog. Queues are entries of the catalog (actors/catalog) in its
 * `meta` family: key ("queue", name) -> msgpack [1, id, partitions,
 * retention_ms]. Ids come from the catalog's one counter (never reused,
 * so a dropped queue's family `q.<id>` never collides with a new one's,
 * nor with a table's families). A create stores the counter (synced)
 * before creating the family, then the entry (synced): a crash in
 * between leaves at worst an unused id or a family no entry names.
 * Creates, drops and the partitions' stop are catalog jobs (troupe__ddl),
 * in one order with the tables' changes; each _wait form submits one and
 * waits for its end. A job that stops partitions waits for them as a WAIT
 * step (their callbacks resume it), never on a worker thread.
 *
 * Enqueue order. Each queue's family holds a mark ("s") -> uint: every
 * order below it may have been used. An open reserves the block [mark,
 * mark + 2^32) by storing mark + 2^32 (synced) before any publish, so
 * orders grow across restarts without a scan and without a write per
 * publish. A run that uses up its block gets EFULL from publish.
 */
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/names.h"
#include "troupe/internal/runtime.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

tq_queue *
troupe__tq_retain(tq_queue *q)
{
    atomic_fetch_add(&q->refs, 1);
    return q;
}

void
troupe__tq_release(tq_queue *q)
{
    if (q == NULL || atomic_fetch_sub(&q->refs, 1) != 1)
        return;
    for (size_t i = 0; i < q->nclaims; i++)
        troupe_free(q->claims[i].key);
    troupe_free(q->claims);
    pthread_mutex_destroy(&q->mu);
    troupe_free(q->parts);
    troupe_free(q->name);
    troupe_free(q);
}

void
troupe__tq_worker_release(troupe_queue_worker *w)
{
    if (w == NULL || atomic_fetch_sub(&w->refs, 1) != 1)
        return;
    troupe__tq_release(w->q);
    troupe__waiter_fini(&w->running);
    troupe_free(w);
}

uint32_t
troupe__tq_worker_held(troupe_queue_worker *w)
{
    return atomic_load(&w->held);
}

static troupe_err
find_locked(troupe_queues *qs, const char *name, size_t *at)
{
    for (size_t i = 0; i < qs->nq; i++)
        if (strcmp(qs->qs[i]->name, name) == 0) {
            *at = i;
            return TROUPE_OK;
        }
    return TROUPE_ENOENT;
}

troupe_err
troupe__tq_find(troupe_queues *qs, const char *name, tq_queue **out)
{
    size_t len = 0;
    if (qs == NULL)
        return TROUPE_EINVAL;
    if (!troupe_catalog_name_valid(name, &len))
        return troupe__name_err("queue name", name, TROUPE_QUEUE_NAME_MAX);
    pthread_mutex_lock(&qs->mu);
    size_t at = 0;
    troupe_err e = qs->stopped ? TROUPE_ESTATE : find_locked(qs, name, &at);
    if (e == TROUPE_OK)
        *out = troupe__tq_retain(qs->qs[at]);
    pthread_mutex_unlock(&qs->mu);
    if (e == TROUPE_ENOENT)
        e = troupe__err_named(TROUPE_ENOQUEUE, "no queue", name, len);
    return e;
}

/* ---- claims -------------------------------------------------------------
 * A short list under the queue's mutex: it holds the invocations being
 * delivered (bounded by the workers' credit) and the outcome or delete
 * calls in progress, so a linear search is cheap. */

static ssize_t
claim_at(tq_queue *q, const void *k, size_t len)
{
    for (size_t i = 0; i < q->nclaims; i++)
        if (q->claims[i].len == len && memcmp(q->claims[i].key, k, len) == 0)
            return (ssize_t)i;
    return -1;
}

bool
troupe__tq_claim(tq_queue *q, const void *k, size_t len)
{
    bool ok = false;
    pthread_mutex_lock(&q->mu);
    if (claim_at(q, k, len) < 0) {
        if (q->nclaims == q->capclaims) {
            size_t nc = q->capclaims ? 2 * q->capclaims : 16;
            tq_claim *c = troupe_realloc(q->claims, nc * sizeof(*c));
            if (c != NULL) {
                q->claims = c;
                q->capclaims = nc;
            }
        }
        uint8_t *copy = q->nclaims < q->capclaims ? troupe_malloc(len) : NULL;
        if (copy != NULL) {
            memcpy(copy, k, len);
            q->claims[q->nclaims++] = (tq_claim){copy, len};
            ok = true;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

bool
troupe__tq_claimed(tq_queue *q, const void *k, size_t len)
{
    pthread_mutex_lock(&q->mu);
    bool c = claim_at(q, k, len) >= 0;
    pthread_mutex_unlock(&q->mu);
    return c;
}

void
troupe__tq_unclaim(tq_queue *q, const void *k, size_t len)
{
    pthread_mutex_lock(&q->mu);
    ssize_t i = claim_at(q, k, len);
    if (i >= 0) {
        troupe_free(q->claims[i].key);
        q->claims[i] = q->claims[--q->nclaims];
    }
    pthread_mutex_unlock(&q->mu);
}

void
troupe__tq_notify(tq_queue *q, uint32_t p, int64_t time_ms)
{
    troupe_packer pk;
    troupe_msg *m = NULL;
    troupe_pack_init(&pk);
    troupe_pack_int(&pk, time_ms);
    if (troupe_pack_take_msg(&pk, TQ_NOTIFY, &m) == TROUPE_OK)
        (void)troupe_runtime_send(q->rt, q->parts[p], &m);
    /* a lost notice (actor gone, shutdown) only delays delivery to the
     * next pass the partition makes for another reason, or to a restart */
}

troupe_err
troupe__tq_order(tq_queue *q, uint64_t *out)
{
    uint64_t o = atomic_fetch_add(&q->next_order, 1);
    if (o >= q->order_end)
        return TROUPE_EFULL;
    *out = o;
    return TROUPE_OK;
}

/* ---- catalog --------------------------------------------------------- */

static troupe_err
entry_key(troupe_key_writer *w, const char *name)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, "queue", 5);
    if (name != NULL)
        troupe_key_put_string(w, name, strlen(name));
    return w->err;
}

troupe_err
troupe__tq_entry_pack(const char *name, uint64_t id, uint32_t parts,
                      int64_t retention, troupe_key_writer *w, troupe_packer *p)
{
    entry_key(w, name);
    troupe_pack_array(p, 4);
    troupe_pack_uint(p, 1);
    troupe_pack_uint(p, id);
    troupe_pack_uint(p, parts);
    troupe_pack_int(p, retention);
    return w->err != TROUPE_OK ? w->err : p->err;
}

static troupe_err
entry_value_decode(const void *v, size_t vlen, uint64_t *id, uint32_t *parts,
                   int64_t *retention);

troupe_err
troupe__tq_entry_decode(const void *k, size_t klen, const void *v, size_t vlen,
                        char name[TROUPE_QUEUE_NAME_MAX + 1], uint64_t *id,
                        uint32_t *parts, int64_t *retention)
{
    troupe_key_reader kr;
    troupe_key_item a, b;
    troupe_key_reader_init(&kr, k, klen);
    bool ok =
        troupe_key_read(&kr, &a) == TROUPE_OK && a.type == TROUPE_KEY_STRING &&
        a.v.s.len == 5 && memcmp(a.v.s.ptr, "queue", 5) == 0 &&
        troupe_key_read(&kr, &b) == TROUPE_OK && b.type == TROUPE_KEY_STRING &&
        b.v.s.len > 0 && b.v.s.len <= TROUPE_QUEUE_NAME_MAX;
    if (ok) {
        memcpy(name, b.v.s.ptr, b.v.s.len);
        name[b.v.s.len] = 0;
        /* a NUL inside would cut the name short: no create makes one */
        ok = strlen(name) == b.v.s.len &&
             troupe_catalog_name_valid(name, NULL) &&
             troupe_key_read(&kr, &a) == TROUPE_ENOENT;
    }
    troupe_key_reader_fini(&kr);
    troupe_err e = entry_value_decode(v, vlen, id, parts, retention);
    return ok ? e : TROUPE_ECORRUPT;
}

/* The value [1, id, partitions, retention_ms] of a queue's entry. */
static troupe_err
entry_value_decode(const void *v, size_t vlen, uint64_t *id, uint32_t *parts,
                   int64_t *retention)
{
    troupe_reader r;
    uint64_t ver = 0, i = 0;
    uint32_t n = 0;
    int64_t ret = -1;
    troupe_reader_init(&r, v, vlen);
    troupe_read_array_n(&r, 4);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, &i);
    troupe_read_u32(&r, &n);
    troupe_read_int(&r, &ret);
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1 || i == 0 || n == 0 ||
        n > TROUPE_QUEUE_PARTITIONS_MAX || ret < 0)
        return TROUPE_ECORRUPT;
    *id = i;
    *parts = n;
    *retention = ret;
    return TROUPE_OK;
}

static troupe_err
put_uint(troupe_queues *qs, troupe_cf *cf, const char *k1, uint64_t v)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, k1, strlen(k1));
    const uint8_t *k;
    size_t kl;
    troupe_err e = troupe_key_writer_finish(&w, &k, &kl);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, v);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    troupe_batch *b = NULL;
    if (e == TROUPE_OK)
        e = troupe_batch_create(&b);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, cf, k, kl, d, n);
    if (e == TROUPE_OK)
        e = troupe_db_write(qs->db, b, TROUPE_SYNC_ON);
    troupe_batch_destroy(b);
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
    return e;
}

/* ENOENT when absent, ECORRUPT when not one uint. */
static troupe_err
get_uint(troupe_queues *qs, troupe_cf *cf, const char *k1, uint64_t *v)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, k1, strlen(k1));
    const uint8_t *k;
    size_t kl;
    void *val = NULL;
    size_t vl = 0;
    troupe_err e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_db_get(qs->db, cf, NULL, k, kl, &val, &vl);
    if (e == TROUPE_OK)
        e = troupe__catalog_uint_parse(val, vl, v);
    troupe_free(val);
    troupe_key_writer_fini(&w);
    return e;
}

/* Builds a queue object, reserves its order block and spawns its
 * partition actors. On error nothing is left running. */
static troupe_err
queue_start(troupe_queues *qs, uint64_t id, const char *name, uint32_t parts,
            int64_t retention, tq_queue **out)
{
    char cfn[32];
    troupe__cf_name('q', id, cfn, sizeof(cfn));
    tq_queue *q = troupe_calloc(1, sizeof(*q));
    if (q == NULL)
        return TROUPE_ENOMEM;
    atomic_init(&q->refs, 1);
    pthread_mutex_init(&q->mu, NULL);
    troupe_hist_init(&q->attempts, 1, TQ_ATTEMPT_BUCKETS);
    q->qs = qs;
    q->rt = qs->rt;
    q->db = qs->db;
    q->commit = qs->commit;
    q->clock = qs->clock;
    q->clock_ctx = qs->clock_ctx;
    q->id = id;
    q->partitions = parts;
    q->retention_ms = retention;
    q->name = troupe_strdup(name);
    q->parts = troupe_calloc(parts, sizeof(*q->parts));
    troupe_err e = q->name && q->parts ? TROUPE_OK : TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = troupe_db_cf(qs->db, cfn, &q->cf);
    uint64_t mark = 0;
    if (e == TROUPE_OK) {
        e = get_uint(qs, q->cf, TQ_MARK, &mark);
        if (e == TROUPE_ENOENT) {
            mark = 1;
            e = TROUPE_OK;
        }
    }
    if (e == TROUPE_OK && mark > UINT64_MAX - TQ_ORDER_BLOCK)
        e = TROUPE_EFULL;
    if (e == TROUPE_OK)
        e = put_uint(qs, q->cf, TQ_MARK, mark + TQ_ORDER_BLOCK);
    atomic_init(&q->next_order, mark);
    q->order_end = mark + TQ_ORDER_BLOCK;
    unsigned ns = troupe_runtime_schedulers(qs->rt);
    uint32_t spawned = 0;
    for (; e == TROUPE_OK && spawned < parts; spawned++) {
        tq_part_arg *a = troupe_malloc(sizeof(*a));
        if (a == NULL) {
            e = TROUPE_ENOMEM;
            break;
        }
        a->q = troupe__tq_retain(q);
        a->p = spawned;
        troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
        so.arg = a;
        so.arg_free = troupe__tq_part_arg_free;
        so.scheduler = (int)((id + spawned) % ns);
        e = troupe_actor_spawn(qs->rt, &troupe__tq_partition_def, &so,
                               &q->parts[spawned]);
        if (e != TROUPE_OK)
            troupe__tq_part_arg_free(a);
    }
    if (e != TROUPE_OK) {
        for (uint32_t i = 0; i < spawned; i++)
            (void)troupe_actor_stop(qs->rt, q->parts[i], NULL, NULL);
        troupe__tq_release(q);
        return e;
    }
    *out = q;
    return TROUPE_OK;
}

static void
stopped_one(troupe_runtime *rt, troupe_addr a, void *arg)
{
    (void)rt;
    (void)a;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

/* Stops q's partition actors and waits for them. */
static void
queue_stop(troupe_queues *qs, tq_queue *q)
{
    troupe__waiter s;
    troupe__waiter_init(&s, 1);
    for (uint32_t i = 0; i < q->partitions; i++) {
        troupe__waiter_hold(&s);
        if (troupe_actor_stop(qs->rt, q->parts[i], stopped_one, &s) !=
            TROUPE_OK)
            troupe__waiter_release(&s, TROUPE_OK, NULL);
    }
    troupe__waiter_release(&s, TROUPE_OK, NULL);
    troupe__waiter_finish(&s, TROUPE_OK, NULL);
}

static troupe_err
map_add(troupe_queues *qs, tq_queue *q)
{
    tq_queue **n = troupe_realloc(qs->qs, (qs->nq + 1) * sizeof(*n));
    if (n == NULL)
        return TROUPE_ENOMEM;
    qs->qs = n;
    qs->qs[qs->nq++] = q;
    return TROUPE_OK;
}

/* The loader's call for one stored queue (troupe__catalog_load checks the
 * key and, after, the id): its value decoded, its actors started. */
static troupe_err
load_queue(void *arg, const char *name, const void *v, size_t n, uint64_t *id)
{
    troupe_queues *qs = arg;
    uint32_t parts = 0;
    int64_t ret = 0;
    troupe_err e = entry_value_decode(v, n, id, &parts, &ret);
    if (e == TROUPE_OK && *id > troupe__catalog_seq(qs->cat))
        return TROUPE_ECORRUPT; /* checked before queue_start writes the
                                   order mark into q.<id> */
    tq_queue *q = NULL;
    if (e == TROUPE_OK)
        e = queue_start(qs, *id, name, parts, ret, &q);
    if (e == TROUPE_OK && (e = map_add(qs, q)) != TROUPE_OK) {
        queue_stop(qs, q);
        troupe__tq_release(q);
    }
    return e;
}

troupe_err
troupe_queues_open(const troupe_queues_opts *o, troupe_queues **out)
{
    if (o == NULL || out == NULL || o->catalog == NULL || o->commit == NULL)
        return TROUPE_EINVAL;
    troupe_queues *qs = troupe_calloc(1, sizeof(*qs));
    if (qs == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = troupe__catalog_attach(o->catalog);
    if (e != TROUPE_OK) {
        troupe_free(qs);
        return e;
    }
    qs->cat = o->catalog;
    qs->rt = troupe__catalog_rt(qs->cat);
    qs->db = troupe__catalog_db(qs->cat);
    qs->commit = o->commit;
    qs->clock = o->clock;
    qs->clock_ctx = o->clock_ctx;
    pthread_mutex_init(&qs->mu, NULL);
    e = troupe__catalog_load(qs->cat, "queue", load_queue, qs);
    if (e != TROUPE_OK) {
        for (size_t i = 0; i < qs->nq; i++) {
            queue_stop(qs, qs->qs[i]);
            troupe__tq_release(qs->qs[i]);
        }
        troupe_free(qs->qs);
        pthread_mutex_destroy(&qs->mu);
        troupe__catalog_detach(qs->cat);
        troupe_free(qs);
        return e;
    }
    *out = qs;
    return TROUPE_OK;
}

/* A catalog job of the queues (create, drop, the partitions' stop); on
 * the stack of the _wait call that submitted it and waits for it. */
typedef struct qjob {
    troupe__ddl ddl; /* first: the catalog's job */
    troupe_queues *qs;
    troupe__waiter done;
    const troupe_queue_spec *spec; /* create */
    const char *name;              /* drop */
    tq_queue *q;                   /* drop: the queue, unlisted */
    _Atomic size_t stopping;       /* partitions not stopped yet, + 1 */
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
qjob_part_stopped(qjob *j)
{
    if (atomic_fetch_sub(&j->stopping, 1) == 1)
        troupe__ddl_resume(&j->ddl);
}

static void
part_stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    qjob_part_stopped(arg);
}

/* Starts the stop of the partitions of qv[0..n): the job resumes once
 * every one has stopped. The step returns WAIT after it. */
static void
qjob_stop_parts(qjob *j, tq_queue *const *qv, size_t n)
{
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += qv[i]->partitions;
    atomic_store(&j->stopping, total);
    for (size_t i = 0; i < n; i++)
        for (uint32_t p = 0; p < qv[i]->partitions; p++)
            if (troupe_actor_stop(j->qs->rt, qv[i]->parts[p], part_stopped,
                                  j) != TROUPE_OK)
                qjob_part_stopped(j); /* gone already */
    qjob_part_stopped(j);
}

/* (0) stop every queue's partitions -> WAIT; (1) DONE. The map is not
 * changed after `stopped` is set but by jobs before this one. */
static troupe__ddl_step
stop_step(troupe__ddl *d)
{
    qjob *j = (qjob *)d;
    if (d->at++ > 0)
        return TROUPE__DDL_DONE;
    qjob_stop_parts(j, j->qs->qs, j->qs->nq);
    return TROUPE__DDL_WAIT;
}

troupe_err
troupe_queues_stop_wait(troupe_queues *qs)
{
    if (qs == NULL)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_queues_stop_wait");
    if (be != TROUPE_OK)
        return be;
    pthread_mutex_lock(&qs->mu);
    if (qs->stopped) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ESTATE;
    }
    qs->stopped = true;
    pthread_mutex_unlock(&qs->mu);
    /* workers first: their handlers' outcomes need the partitions */
    for (;;) {
        pthread_mutex_lock(&qs->mu);
        troupe_queue_worker *w = qs->nws ? qs->ws[qs->nws - 1] : NULL;
        if (w != NULL)
            atomic_fetch_add(&w->refs, 1);
        pthread_mutex_unlock(&qs->mu);
        if (w == NULL)
            break;
        troupe_queue_worker *tmp = w;
        troupe_queue_worker_stop_wait(&tmp); /* unlists it; caller's ref
                                                stays for its own stop */
    }
    /* then the partitions, after the creates and drops queued before */
    qjob j = {0};
    return qjob_run(&j, qs, stop_step);
}

void
troupe_queues_destroy(troupe_queues *qs)
{
    if (qs == NULL)
        return;
    pthread_mutex_lock(&qs->mu);
    bool stopped = qs->stopped;
    pthread_mutex_unlock(&qs->mu);
    if (!stopped) /* the partition actors point back at qs */
        (void)troupe_queues_stop_wait(qs);
    for (size_t i = 0; i < qs->nq; i++)
        troupe__tq_release(qs->qs[i]);
    troupe_free(qs->qs);
    troupe_free(qs->ws);
    pthread_mutex_destroy(&qs->mu);
    troupe__catalog_detach(qs->cat);
    troupe_free(qs);
}

/* One step: the counter (synced), the family, the partitions, the
 * entry (synced), the map. */
static troupe__ddl_step
create_step(troupe__ddl *d)
{
    qjob *j = (qjob *)d;
    troupe_queues *qs = j->qs;
    const troupe_queue_spec *spec = j->spec;
    pthread_mutex_lock(&qs->mu);
    size_t at;
    troupe_err e = qs->stopped ? TROUPE_ESTATE
                   : find_locked(qs, spec->name, &at) == TROUPE_OK
                       ? TROUPE_EEXIST
                       : TROUPE_OK;
    pthread_mutex_unlock(&qs->mu);
    uint64_t id = 0;
    if (e == TROUPE_OK)
        e = troupe__catalog_ids(qs->cat, 1, &id);
    troupe__meta_batch m;
    if (e == TROUPE_OK) { /* the counter first: see the design note */
        troupe__meta_begin(&m, qs->cat);
        troupe__meta_put_seq(&m);
        e = troupe__meta_commit(&m, TROUPE_SYNC_ON);
    }
    char cfn[32];
    troupe__cf_name('q', id, cfn, sizeof(cfn));
    if (e == TROUPE_OK)
        e = troupe_db_cf_create(qs->db, cfn, NULL);
    tq_queue *q = NULL;
    if (e == TROUPE_OK)
        e = queue_start(qs, id, spec->name, spec->partitions,
                        spec->retention_ms, &q);
    if (e == TROUPE_OK) {
        troupe_key_writer w;
        troupe_key_writer_init(&w);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_err ke = troupe__tq_entry_pack(spec->name, id, spec->partitions,
                                              spec->retention_ms, &w, &p);
        size_t n;
        const void *v = troupe_pack_data(&p, &n);
        troupe__meta_begin(&m, qs->cat);
        troupe__meta_put_key(&m, &w, ke, v, n);
        e = troupe__meta_commit(&m, TROUPE_SYNC_ON);
        troupe_pack_fini(&p);
        if (e == TROUPE_OK) {
            pthread_mutex_lock(&qs->mu);
            e = qs->stopped ? TROUPE_ESTATE : map_add(qs, q);
            pthread_mutex_unlock(&qs->mu);
        }
        if (e != TROUPE_OK) {
            /* partitions that never delivered: their stop waits for no
             * worker */
            queue_stop(qs, q);
            troupe__tq_release(q);
        }
    }
    d->err = e;
    return TROUPE__DDL_DONE;
}

troupe_err
troupe_queues_create_wait(troupe_queues *qs, const troupe_queue_spec *spec)
{
    if (qs == NULL || spec == NULL ||
        !troupe_catalog_name_valid(spec->name, NULL) || spec->partitions == 0 ||
        spec->partitions > TROUPE_QUEUE_PARTITIONS_MAX ||
        spec->retention_ms < 0)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_queues_create_wait");
    if (be != TROUPE_OK)
        return be;
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
        pthread_mutex_lock(&qs->mu);
        size_t at = 0;
        troupe_err e =
            qs->stopped ? TROUPE_ESTATE : find_locked(qs, j->name, &at);
        if (e == TROUPE_ENOENT)
            e = TROUPE_ENOQUEUE;
        if (e == TROUPE_OK && qs->qs[at]->workers > 0)
            e = TROUPE_EBUSY;
        if (e == TROUPE_OK) {
            j->q = qs->qs[at];
            qs->qs[at] = qs->qs[--qs->nq]; /* gone for lookups from now on */
        }
        pthread_mutex_unlock(&qs->mu);
        if ((d->err = e) != TROUPE_OK)
            return TROUPE__DDL_DONE;
        qjob_stop_parts(j, &j->q, 1);
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
    troupe_err be = troupe__block_check("troupe_queues_drop_wait");
    if (be != TROUPE_OK)
        return be;
    qjob j = {.name = name};
    return qjob_run(&j, qs, drop_step);
}

static int
info_cmp(const void *a, const void *b)
{
    return strcmp(((const troupe_queue_info *)a)->name,
                  ((const troupe_queue_info *)b)->name);
}

troupe_err
troupe_queues_list(troupe_queues *qs, troupe_queue_info **out, size_t *n)
{
    if (qs == NULL || out == NULL || n == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&qs->mu);
    if (qs->stopped) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ESTATE;
    }
    size_t bytes = qs->nq * sizeof(troupe_queue_info);
    for (size_t i = 0; i < qs->nq; i++)
        bytes += strlen(qs->qs[i]->name) + 1;
    troupe_queue_info *a = qs->nq ? troupe_malloc(bytes) : NULL;
    if (qs->nq && a == NULL) {
        pthread_mutex_unlock(&qs->mu);
        return TROUPE_ENOMEM;
    }
    char *s = a != NULL ? (char *)(a + qs->nq) : NULL; /* none: no names */
    for (size_t i = 0; i < qs->nq; i++) {
        tq_queue *q = qs->qs[i];
        size_t l = strlen(q->name) + 1;
        memcpy(s, q->name, l);
        a[i] = (troupe_queue_info){s, q->id, q->partitions, q->retention_ms,
                                   atomic_load(&q->paused)};
        s += l;
    }
    *n = qs->nq;
    pthread_mutex_unlock(&qs->mu);
    if (*n > 1)
        qsort(a, *n, sizeof(*a), info_cmp);
    *out = a;
    return TROUPE_OK;
}

void
troupe__tq_kick_range(tq_queue *q, uint32_t first, uint32_t last, uint32_t kind)
{
    for (uint32_t p = first; p <= last && p < q->partitions; p++) {
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, kind, NULL, 0) == TROUPE_OK)
            (void)troupe_runtime_send(q->rt, q->parts[p], &m);
    }
}

static troupe_err
set_paused(troupe_queues *qs, const char *name, int paused)
{
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, name, &q);
    if (e != TROUPE_OK)
        return e;
    if (paused >= 0)
        atomic_store(&q->paused, paused != 0);
    if (paused <= 0)
        troupe__tq_kick_range(q, 0, q->partitions - 1, TQ_KICK);
    troupe__tq_release(q);
    return TROUPE_OK;
}

troupe_err
troupe_queue_pause(troupe_queues *q, const char *queue)
{
    return set_paused(q, queue, 1);
}

troupe_err
troupe_queue_resume(troupe_queues *q, const char *queue)
{
    return set_paused(q, queue, 0);
}

troupe_err
troupe_queue_kick(troupe_queues *q, const char *queue)
{
    return set_paused(q, queue, -1);
}

/* ---- workers ----------------------------------------------------------- */

troupe_err
troupe_queue_worker_start(troupe_queues *qs, const troupe_queue_worker_opts *o,
                          troupe_queue_worker **out)
{
    if (qs == NULL || o == NULL || out == NULL || o->handler == NULL ||
        o->credit == 0 || o->credit > 65536 || o->first > o->last ||
        (unsigned)o->sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    tq_queue *q = NULL;
    troupe_err e = troupe__tq_find(qs, o->queue, &q);
    if (e != TROUPE_OK)
        return e;
    if (o->last >= q->partitions) {
        troupe__tq_release(q);
        return TROUPE_EINVAL;
    }
    troupe_queue_worker *w = troupe_calloc(1, sizeof(*w));
    if (w == NULL) {
        troupe__tq_release(q);
        return TROUPE_ENOMEM;
    }
    atomic_init(&w->refs, 1);
    w->qs = qs;
    w->q = q;
    w->first = o->first;
    w->last = o->last;
    w->credit = o->credit;
    w->handler = o->handler;
    w->arg = o->arg;
    w->timeout_ms = o->timeout_ms ? o->timeout_ms : TROUPE_QUEUE_TIMEOUT_MS;
    w->sync = o->sync;
    troupe__waiter_init(&w->running, 0);
    pthread_mutex_lock(&qs->mu);
    troupe_queue_worker **nw =
        qs->stopped ? NULL
                    : troupe_realloc(qs->ws, (qs->nws + 1) * sizeof(*nw));
    if (nw == NULL) {
        e = qs->stopped ? TROUPE_ESTATE : TROUPE_ENOMEM;
        pthread_mutex_unlock(&qs->mu);
        troupe__tq_worker_release(w);
        return e;
    }
    qs->ws = nw;
    qs->ws[qs->nws++] = w;
    q->workers++;
    pthread_mutex_unlock(&qs->mu);
    for (uint32_t p = w->first; p <= w->last; p++) {
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, TQ_SUBSCRIBE, NULL, 0) != TROUPE_OK)
            continue; /* that partition never delivers to w */
        atomic_fetch_add(&w->refs, 1);
        m->ptr = w;
        m->ptr_drop = (void (*)(void *))troupe__tq_worker_release;
        (void)troupe_runtime_send(qs->rt, q->parts[p], &m);
    }
    *out = w;
    return TROUPE_OK;
}

void
troupe_queue_worker_stop_wait(troupe_queue_worker **wp)
{
    if (wp == NULL || *wp == NULL)
        return;
    troupe_queue_worker *w = *wp;
    *wp = NULL;
    troupe_queues *qs = w->qs;
    atomic_store(&w->stopping, true);
    troupe__waiter_wait(&w->running, NULL);
    /* the first stop unlists it; a second one (the owner's, after
     * troupe_queues_stop_wait stopped it, maybe after the queues' destroy)
     * only frees */
    if (!atomic_exchange(&w->unlisted, true)) {
        pthread_mutex_lock(&qs->mu);
        for (size_t i = 0; i < qs->nws; i++)
            if (qs->ws[i] == w) {
                qs->ws[i] = qs->ws[--qs->nws];
                w->q->workers--;
                break;
            }
        pthread_mutex_unlock(&qs->mu);
    }
    troupe__tq_worker_release(w);
}
