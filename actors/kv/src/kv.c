/*
 * kv actor. The actor's own loop only decodes, validates and hands work
 * off: a write becomes a batch submitted to the commit pipeline, a read a
 * job on the worker pool. The outcome is answered by whichever thread
 * learns it (writer or worker), with troupe_runtime_send of a REPLY that
 * carries the ask's correlation id: one hop less than routing it back
 * through the actor, and the asker still gets exactly one reply when the
 * kv actor itself has stopped meanwhile.
 */
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/kv.h"
#include "troupe/pack.h"

/* The kv's own kinds follow the public ones (troupe/kv.h). */
enum { KV_READ_DONE = TROUPE_KV_DEL + 1, KV_NKINDS };

typedef struct kv_state {
    troupe_db *db;
    troupe_commit *commit;
    troupe_cf *cf;
} kv_state;

/* What the finishing thread needs to answer the asker. */
typedef struct kv_job {
    troupe_runtime *rt;
    troupe_addr asker;
    uint64_t corr;
    troupe_db *db;
    troupe_cf *cf;
    size_t klen;
    unsigned char key[];
} kv_job;

/* Bad input never fails the actor: it is answered. */
static troupe_err
reply_err(troupe_actor *self, const troupe_msg *req, troupe_err err)
{
    troupe_reply_error(self, req, err);
    return TROUPE_OK;
}

static kv_job *
job_new(troupe_actor *self, kv_state *s, const troupe_msg *req, const void *key,
        size_t klen)
{
    kv_job *j = troupe_malloc(sizeof(*j) + klen);
    if (j == NULL)
        return NULL;
    j->rt = troupe_actor_runtime(self);
    j->asker = req->from;
    j->corr = req->corr;
    j->db = s->db;
    j->cf = s->cf;
    j->klen = klen;
    memcpy(j->key, key, klen);
    return j;
}

static void
on_committed(troupe_err err, void *arg)
{
    kv_job *j = arg;
    troupe_runtime_reply(j->rt, j->asker, j->corr, err, NULL);
    troupe_free(j);
}

static troupe_err
submit(troupe_actor *self, kv_state *s, const troupe_msg *req, troupe_batch **b,
       bool sync, const void *key, size_t klen)
{
    kv_job *j = job_new(self, s, req, key, klen);
    if (j == NULL) {
        troupe_batch_destroy(*b);
        return reply_err(self, req, TROUPE_ENOMEM);
    }
    troupe_err e = troupe_commit_submit(
        s->commit, b, sync ? TROUPE_SYNC_ON : TROUPE_SYNC_OFF, on_committed, j);
    if (e != TROUPE_OK) {
        troupe_batch_destroy(*b);
        troupe_free(j);
        return reply_err(self, req, e);
    }
    return TROUPE_OK;
}

static troupe_err
h_put(troupe_actor *self, void *st, const troupe_msg *m)
{
    kv_state *s = st;
    troupe_reader r;
    const void *key, *val;
    size_t klen, vlen;
    bool sync;
    troupe_reader_init_msg(&r, m);
    troupe_read_array_n(&r, 3);
    troupe_read_bin(&r, TROUPE_KEY_MAX, &key, &klen);
    troupe_read_bin(&r, TROUPE_VALUE_MAX, &val, &vlen);
    troupe_read_bool(&r, &sync);
    troupe_err e = troupe_read_end(&r);
    if (e == TROUPE_OK && klen == 0)
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK)
        return reply_err(self, m, e);
    troupe_batch *b = NULL;
    if ((e = troupe_batch_create(&b)) != TROUPE_OK ||
        (e = troupe_batch_put(b, s->cf, key, klen, val, vlen)) != TROUPE_OK) {
        troupe_batch_destroy(b);
        return reply_err(self, m, e);
    }
    return submit(self, s, m, &b, sync, key, klen);
}

static troupe_err
h_del(troupe_actor *self, void *st, const troupe_msg *m)
{
    kv_state *s = st;
    troupe_reader r;
    const void *key;
    size_t klen;
    bool sync;
    troupe_reader_init_msg(&r, m);
    troupe_read_array_n(&r, 2);
    troupe_read_bin(&r, TROUPE_KEY_MAX, &key, &klen);
    troupe_read_bool(&r, &sync);
    troupe_err e = troupe_read_end(&r);
    if (e == TROUPE_OK && klen == 0)
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK)
        return reply_err(self, m, e);
    troupe_batch *b = NULL;
    if ((e = troupe_batch_create(&b)) != TROUPE_OK ||
        (e = troupe_batch_delete(b, s->cf, key, klen)) != TROUPE_OK) {
        troupe_batch_destroy(b);
        return reply_err(self, m, e);
    }
    return submit(self, s, m, &b, sync, key, klen);
}

/* On a worker thread: the read may miss the cache and wait on the disk. */
static void
do_read(void *arg)
{
    kv_job *j = arg;
    void *val = NULL;
    size_t vlen = 0;
    troupe_err e =
        troupe_db_get(j->db, j->cf, NULL, j->key, j->klen, &val, &vlen);
    troupe_body *body = NULL;
    if (e == TROUPE_OK) {
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_bin(&p, val, vlen);
        e = troupe_pack_take_body(&p, &body);
    }
    troupe_free(val);
    troupe_runtime_reply(j->rt, j->asker, j->corr, e,
                         e == TROUPE_OK ? &body : NULL);
}

static void
free_job(void *arg)
{
    troupe_free(arg);
}

static troupe_err
h_get(troupe_actor *self, void *st, const troupe_msg *m)
{
    kv_state *s = st;
    troupe_reader r;
    const void *key;
    size_t klen;
    troupe_reader_init_msg(&r, m);
    troupe_read_array_n(&r, 1);
    troupe_read_bin(&r, TROUPE_KEY_MAX, &key, &klen);
    troupe_err e = troupe_read_end(&r);
    if (e == TROUPE_OK && (klen == 0 || m->corr == 0))
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK)
        return reply_err(self, m, e);
    kv_job *j = job_new(self, s, m, key, klen);
    if (j == NULL)
        return reply_err(self, m, TROUPE_ENOMEM);
    /* The completion only frees the job; the worker already answered.
     * Declared: the job (the value it reads lives only while a worker
     * runs it, so at most one per worker at a time). */
    e = troupe_work_submit_in(self, TROUPE_LANE_STORAGE, sizeof(*j) + klen,
                              do_read, j, KV_READ_DONE, free_job);
    if (e != TROUPE_OK) {
        troupe_free(j);
        return reply_err(self, m, e);
    }
    return TROUPE_OK;
}

static troupe_err
h_read_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_free(m->ptr); /* NULL from a stray local send: nothing to free */
    return TROUPE_OK;
}

static troupe_err
h_unknown(troupe_actor *self, void *st, const troupe_msg *m)
{
    return reply_err(self, m, TROUPE_ENOTSUP);
}

static troupe_err
kv_init(troupe_actor *self, void *st, void *arg)
{
    *(kv_state *)st = *(const kv_state *)arg;
    return TROUPE_OK;
}

static const troupe_handler_fn kv_handlers[KV_NKINDS] = {
    [TROUPE_KV_PUT] = h_put,
    [TROUPE_KV_GET] = h_get,
    [TROUPE_KV_DEL] = h_del,
    [KV_READ_DONE] = h_read_done,
};

static const troupe_actor_def kv_def = {
    .name = "troupe.kv",
    .state_size = sizeof(kv_state),
    .init = kv_init,
    .handlers = kv_handlers,
    .n_handlers = KV_NKINDS,
    .on_unknown = h_unknown,
    .remote_kinds = TROUPE_KIND_BIT(TROUPE_KV_PUT) |
                    TROUPE_KIND_BIT(TROUPE_KV_GET) |
                    TROUPE_KIND_BIT(TROUPE_KV_DEL),
};

troupe_err
troupe_kv_spawn(troupe_runtime *rt, const troupe_kv_opts *o,
                const troupe_spawn_opts *so, troupe_addr *out)
{
    if (rt == NULL || o == NULL || o->db == NULL || o->commit == NULL ||
        o->cf == NULL || out == NULL)
        return TROUPE_EINVAL;
    kv_state *init = troupe_malloc(sizeof(*init));
    if (init == NULL)
        return TROUPE_ENOMEM;
    init->db = o->db;
    init->commit = o->commit;
    troupe_err e = troupe_db_cf(o->db, o->cf, &init->cf);
    if (e == TROUPE_ENOENT)
        e = troupe_db_cf_create(o->db, o->cf, &init->cf);
    if (e != TROUPE_OK) {
        troupe_free(init);
        return e;
    }
    /* init runs later, on the actor's thread, and again after a restart:
     * the actor owns the argument and frees it when it is gone. */
    troupe_spawn_opts opts = so ? *so : TROUPE_SPAWN_OPTS_INIT;
    opts.arg = init;
    opts.arg_free = troupe_free;
    e = troupe_actor_spawn(rt, &kv_def, &opts, out);
    if (e != TROUPE_OK)
        troupe_free(init);
    return e;
}

static troupe_err
pack_key_msg(uint32_t kind, const void *key, size_t klen, const void *val,
             size_t vlen, int nfields, bool sync, troupe_msg **out)
{
    if (out == NULL || key == NULL || klen == 0 || (val == NULL && vlen > 0))
        return TROUPE_EINVAL;
    if (klen > TROUPE_KEY_MAX)
        return troupe__errf(TROUPE_ETOOBIG,
                            "key of %zu bytes over TROUPE_KEY_MAX (%zu)", klen,
                            (size_t)TROUPE_KEY_MAX);
    if (vlen > TROUPE_VALUE_MAX)
        return troupe__errf(TROUPE_ETOOBIG,
                            "value of %zu bytes over TROUPE_VALUE_MAX (%zu)",
                            vlen, (size_t)TROUPE_VALUE_MAX);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, (uint32_t)nfields);
    troupe_pack_bin(&p, key, klen);
    if (kind == TROUPE_KV_PUT)
        troupe_pack_bin(&p, val ? val : "", vlen);
    if (kind != TROUPE_KV_GET)
        troupe_pack_bool(&p, sync);
    return troupe_pack_take_msg(&p, kind, out);
}

troupe_err
troupe_kv_put_msg(const void *key, size_t klen, const void *val, size_t vlen,
                  bool sync, troupe_msg **out)
{
    return pack_key_msg(TROUPE_KV_PUT, key, klen, val, vlen, 3, sync, out);
}

troupe_err
troupe_kv_get_msg(const void *key, size_t klen, troupe_msg **out)
{
    return pack_key_msg(TROUPE_KV_GET, key, klen, NULL, 0, 1, false, out);
}

troupe_err
troupe_kv_del_msg(const void *key, size_t klen, bool sync, troupe_msg **out)
{
    return pack_key_msg(TROUPE_KV_DEL, key, klen, NULL, 0, 2, sync, out);
}
