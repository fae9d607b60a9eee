/*
 * The index actor. Its loop only decodes and validates a request; the
 * query itself blocks on RocksDB, so it runs on the runtime's worker pool,
 * and the worker thread answers with troupe_runtime_send of a REPLY that
 * carries the ask's correlation id (kv.c does the same, for the same
 * reason: one hop less, and a request in flight when the actor stops still
 * gets its one reply).
 *
 * A job outlives the handler that made it and maybe the actor itself, so
 * it keeps the request's body alive with a reference (the decoded strings
 * point into it) and the actor's configuration with an atomic reference
 * count: the defs are freed by whichever of the actor and its last job
 * goes last.
 */
#include <stdatomic.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"

enum { IX_WORK_DONE = TROUPE_INDEX_NKINDS_, IX_NKINDS };

typedef struct ix_cfg {
    atomic_uint refs;
    troupe_db *db;
    uint64_t table_id;
    troupe_index_def **defs;
    size_t n_defs;
    const troupe_index_fns *fns;
} ix_cfg;

typedef struct ix_state {
    ix_cfg *cfg;
} ix_state;

typedef struct ix_job {
    troupe_runtime *rt;
    troupe_addr asker;
    uint64_t corr;
    uint32_t kind;
    ix_cfg *cfg;
    troupe_body *body; /* the request's bytes, retained */
    troupe_index_query q;
    const troupe_index_def *def; /* the queried index */
    /* VERIFY */
    size_t budget;
    bool derive;
    const void *cursor;
    size_t cursor_len;
} ix_job;

static void
cfg_release(void *arg)
{
    ix_cfg *c = arg;
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (size_t i = 0; i < c->n_defs; i++)
        troupe_index_def_destroy(c->defs[i]);
    troupe_free(c->defs);
    troupe_free(c);
}

/* Bad input never fails the actor: it is answered. */
static troupe_err
reply_err(troupe_actor *self, const troupe_msg *req, troupe_err err)
{
    troupe_reply_error(self, req, err);
    return TROUPE_OK;
}

static void
job_free(void *arg)
{
    ix_job *j = arg;
    if (j == NULL)
        return;
    troupe_body_release(j->body);
    cfg_release(j->cfg);
    troupe_free(j);
}

/* ---- worker side --------------------------------------------------------- */

static troupe_err
pack_result(const troupe_index_result *r, troupe_body **out)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, (uint32_t)r->n);
    for (size_t i = 0; i < r->n; i++) {
        const troupe_index_hit *h = &r->hits[i];
        troupe_pack_array(&p, 4);
        troupe_pack_bin(&p, h->key, h->key_len);
        troupe_pack_bin(&p, h->pk, h->pk_len);
        if (h->val != NULL)
            troupe_pack_raw(&p, h->val, h->val_len);
        else
            troupe_pack_nil(&p);
        troupe_pack_uint(&p, h->expires_at_ms);
    }
    if (r->cursor != NULL)
        troupe_pack_bin(&p, r->cursor, r->cursor_len);
    else
        troupe_pack_nil(&p);
    troupe_pack_bool(&p, r->more);
    return troupe_pack_take_body(&p, out);
}

/* Mismatches of one step, copied (the callback's pointers are
 * borrowed), packed into the reply once the count is known. */
typedef struct vitem {
    troupe_index_mismatch_kind kind;
    uint64_t id;
    uint8_t *blk; /* pk bytes then key bytes; owned */
    bool has_pk, has_key;
    size_t pk_len, key_len;
} vitem;

typedef struct vitems {
    vitem *v;
    size_t n, cap;
    troupe_err err;
} vitems;

static void
on_mismatch(void *ctx, const troupe_index_mismatch *m)
{
    vitems *v = ctx;
    if (v->err != TROUPE_OK)
        return;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        vitem *nv = troupe_realloc(v->v, cap * sizeof(*nv));
        if (nv == NULL) {
            v->err = TROUPE_ENOMEM;
            return;
        }
        v->v = nv;
        v->cap = cap;
    }
    size_t pl = m->pk != NULL ? m->pk_len : 0;
    size_t kl = m->key != NULL ? m->key_len : 0;
    uint8_t *blk = troupe_malloc(pl + kl + 1);
    if (blk == NULL) {
        v->err = TROUPE_ENOMEM;
        return;
    }
    if (pl > 0)
        memcpy(blk, m->pk, pl);
    if (kl > 0)
        memcpy(blk + pl, m->key, kl);
    v->v[v->n++] = (vitem){.kind = m->kind,
                           .id = m->index_id,
                           .blk = blk,
                           .has_pk = m->pk != NULL,
                           .has_key = m->key != NULL,
                           .pk_len = pl,
                           .key_len = kl};
}

static troupe_err
verify_work(ix_job *j, troupe_body **body)
{
    vitems v = {.err = TROUPE_OK};
    troupe_index_verify_opts o = {
        .table_id = j->cfg->table_id,
        .defs = (const troupe_index_def *const *)j->cfg->defs,
        .n_defs = j->cfg->n_defs,
        .derive = j->derive,
        .fns = j->cfg->fns,
        .budget = j->budget,
        .cb = on_mismatch,
        .cb_ctx = &v};
    void *next = NULL;
    size_t next_len = 0;
    bool done = false;
    troupe_err e = troupe_index_verify_step(
        j->cfg->db, &o, j->cursor, j->cursor_len, &next, &next_len, &done);
    if (e == TROUPE_OK)
        e = v.err;
    if (e == TROUPE_OK && v.n > UINT32_MAX)
        e = TROUPE_ETOOBIG;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_array(&p, (uint32_t)v.n);
    for (size_t i = 0; i < v.n; i++) {
        vitem *x = &v.v[i];
        troupe_pack_array(&p, 4);
        troupe_pack_uint(&p, (uint64_t)x->kind);
        if (x->has_pk)
            troupe_pack_bin(&p, x->blk, x->pk_len);
        else
            troupe_pack_nil(&p);
        troupe_pack_uint(&p, x->id);
        if (x->has_key)
            troupe_pack_bin(&p, x->blk + x->pk_len, x->key_len);
        else
            troupe_pack_nil(&p);
        troupe_free(x->blk);
    }
    troupe_free(v.v);
    if (next != NULL)
        troupe_pack_bin(&p, next, next_len);
    else
        troupe_pack_nil(&p);
    troupe_free(next);
    if (e != TROUPE_OK) {
        troupe_pack_fini(&p);
        return e;
    }
    return troupe_pack_take_body(&p, body);
}

static void
do_work(void *arg)
{
    ix_job *j = arg;
    troupe_body *body = NULL;
    troupe_err e;
    if (j->kind == TROUPE_INDEX_QUERY) {
        troupe_index_result *r = NULL;
        troupe__index_run run = {
            .q = &j->q, .def = j->def, .table_id = j->cfg->table_id};
        e = troupe_index_query_run(j->cfg->db, &run, &r);
        if (e == TROUPE_OK)
            e = pack_result(r, &body);
        troupe_index_result_destroy(r);
    } else if (j->kind == TROUPE_INDEX_VERIFY) {
        e = verify_work(j, &body);
    } else {
        uint64_t n = 0;
        troupe__index_run run = {
            .q = &j->q, .def = j->def, .table_id = j->cfg->table_id};
        e = troupe_index_count(j->cfg->db, &run, &n);
        if (e == TROUPE_OK) {
            troupe_packer p;
            troupe_pack_init(&p);
            troupe_pack_uint(&p, n);
            e = troupe_pack_take_body(&p, &body);
        }
    }
    troupe_runtime_reply(j->rt, j->asker, j->corr, e,
                         e == TROUPE_OK ? &body : NULL);
}

/* ---- actor side ---------------------------------------------------------- */

/* Reads an optional msgpack array as raw bytes (nil: none). */
static void
read_opt_array(troupe_reader *r, const void **p, size_t *n)
{
    *p = NULL;
    *n = 0;
    if (troupe_read_try_nil(r))
        return;
    if (troupe_read_peek(r) != TROUPE_MP_ARRAY) {
        troupe_read_nil(r); /* sets EPROTO */
        return;
    }
    troupe_read_raw(r, p, n);
}

/* Fills j with the request m (its asker, kind, body) and the actor's
 * configuration, and runs it on a STORAGE worker. The completion only
 * frees the job; the worker already answered. Declared: the job and the
 * request body it retains. On a refusal j is freed and m answered. */
static troupe_err
job_submit(troupe_actor *self, ix_state *s, const troupe_msg *m, ix_job *j)
{
    j->rt = troupe_actor_runtime(self);
    j->asker = m->from;
    j->corr = m->corr;
    j->kind = m->kind;
    j->body = troupe_body_retain(m->body);
    j->cfg = s->cfg;
    atomic_fetch_add(&s->cfg->refs, 1);
    troupe_err e = troupe_work_submit_in(self, TROUPE_LANE_STORAGE,
                                         sizeof(*j) + troupe_msg_len(m),
                                         do_work, j, IX_WORK_DONE, job_free);
    if (e != TROUPE_OK) {
        job_free(j);
        return reply_err(self, m, e);
    }
    return TROUPE_OK;
}

static troupe_err
h_request(troupe_actor *self, void *st, const troupe_msg *m)
{
    ix_state *s = st;
    if (m->corr == 0)
        return TROUPE_OK; /* a query nobody waits for */
    ix_job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL)
        return reply_err(self, m, TROUPE_ENOMEM);
    troupe_reader r;
    const char *name = NULL;
    size_t name_len = 0;
    bool count = m->kind == TROUPE_INDEX_COUNT;
    troupe_reader_init_msg(&r, m);
    troupe_read_array_n(&r, count ? 4 : 8);
    troupe_read_str(&r, INDEX_NAME_MAX, &name, &name_len);
    read_opt_array(&r, &j->q.values, &j->q.values_len);
    read_opt_array(&r, &j->q.from, &j->q.from_len);
    read_opt_array(&r, &j->q.to, &j->q.to_len);
    if (!count) {
        uint64_t limit = 0;
        troupe_read_bool(&r, &j->q.reverse);
        troupe_read_uint(&r, &limit);
        j->q.limit = limit > SIZE_MAX ? SIZE_MAX : (size_t)limit;
        if (!troupe_read_try_nil(&r))
            troupe_read_bin(&r, TROUPE_CURSOR_MAX, &j->q.after,
                            &j->q.after_len);
        troupe_read_bool(&r, &j->q.rows);
    }
    troupe_err e = troupe_read_end(&r);
    if (e != TROUPE_OK) {
        troupe_free(j);
        return reply_err(self, m, TROUPE_EPROTO);
    }
    for (size_t i = 0; i < s->cfg->n_defs && j->def == NULL; i++) {
        const char *dn = s->cfg->defs[i]->name;
        if (strlen(dn) == name_len && memcmp(dn, name, name_len) == 0)
            j->def = s->cfg->defs[i];
    }
    if (j->def == NULL) {
        troupe_free(j);
        return reply_err(self, m, TROUPE_ENOINDEX);
    }
    return job_submit(self, s, m, j);
}

static troupe_err
h_verify(troupe_actor *self, void *st, const troupe_msg *m)
{
    ix_state *s = st;
    if (m->corr == 0)
        return TROUPE_OK;
    ix_job *j = troupe_calloc(1, sizeof(*j));
    if (j == NULL)
        return reply_err(self, m, TROUPE_ENOMEM);
    troupe_reader r;
    uint64_t budget = 0;
    troupe_reader_init_msg(&r, m);
    troupe_read_array_n(&r, 3);
    troupe_read_uint(&r, &budget);
    troupe_read_bool(&r, &j->derive);
    if (!troupe_read_try_nil(&r))
        troupe_read_bin(&r, TROUPE_KEY_MAX, &j->cursor, &j->cursor_len);
    troupe_err e = troupe_read_end(&r);
    if (e == TROUPE_OK &&
        (budget == 0 || (j->cursor != NULL && j->cursor_len == 0)))
        e = TROUPE_EINVAL;
    if (e != TROUPE_OK) {
        troupe_free(j);
        return reply_err(self, m, e);
    }
    j->budget = budget > SIZE_MAX ? SIZE_MAX : (size_t)budget;
    return job_submit(self, s, m, j);
}

static troupe_err
h_work_done(troupe_actor *self, void *st, const troupe_msg *m)
{
    job_free(m->ptr); /* NULL from a stray local send: nothing to free */
    return TROUPE_OK;
}

static troupe_err
h_unknown(troupe_actor *self, void *st, const troupe_msg *m)
{
    return reply_err(self, m, TROUPE_ENOTSUP);
}

static troupe_err
ix_init(troupe_actor *self, void *st, void *arg)
{
    ((ix_state *)st)->cfg = arg;
    return TROUPE_OK;
}

static const troupe_handler_fn ix_handlers[IX_NKINDS] = {
    [TROUPE_INDEX_QUERY] = h_request,
    [TROUPE_INDEX_COUNT] = h_request,
    [TROUPE_INDEX_VERIFY] = h_verify,
    [IX_WORK_DONE] = h_work_done,
};

static const troupe_actor_def ix_def = {
    .name = "troupe.index",
    .state_size = sizeof(ix_state),
    .init = ix_init,
    .handlers = ix_handlers,
    .n_handlers = IX_NKINDS,
    .on_unknown = h_unknown,
    .remote_kinds = TROUPE_KIND_BIT(TROUPE_INDEX_QUERY) |
                    TROUPE_KIND_BIT(TROUPE_INDEX_COUNT) |
                    TROUPE_KIND_BIT(TROUPE_INDEX_VERIFY),
};

/* A copy of a def through its catalog form (keeps the ready state). */
static troupe_err
def_copy(const troupe_index_def *d, troupe_index_def **out)
{
    void *p;
    size_t n;
    troupe_err e = troupe_index_def_pack(d, &p, &n);
    if (e != TROUPE_OK)
        return e;
    e = troupe_index_def_unpack(p, n, out);
    troupe_free(p);
    return e;
}

troupe_err
troupe_index_spawn(troupe_runtime *rt, const troupe_index_actor_opts *o,
                   const troupe_spawn_opts *so, troupe_addr *out)
{
    if (rt == NULL || o == NULL || o->db == NULL || out == NULL ||
        (o->defs == NULL && o->n_defs > 0))
        return TROUPE_EINVAL;
    for (size_t i = 0; i < o->n_defs; i++) {
        if (o->defs[i] == NULL)
            return TROUPE_EINVAL;
    }
    ix_cfg *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    atomic_init(&c->refs, 1);
    c->db = o->db;
    c->table_id = o->table_id;
    c->fns = o->fns;
    troupe_err e = TROUPE_OK;
    if (o->n_defs > 0 &&
        (c->defs = troupe_calloc(o->n_defs, sizeof(*c->defs))) == NULL)
        e = TROUPE_ENOMEM;
    for (size_t i = 0; e == TROUPE_OK && i < o->n_defs; i++) {
        e = def_copy(o->defs[i], &c->defs[i]);
        if (e == TROUPE_OK)
            c->n_defs = i + 1;
    }
    if (e != TROUPE_OK) {
        cfg_release(c);
        return e;
    }
    /* init runs later on the actor's thread (and again after a restart):
     * the actor holds the first reference and drops it when gone. */
    troupe_spawn_opts opts = so ? *so : TROUPE_SPAWN_OPTS_INIT;
    opts.arg = c;
    opts.arg_free = cfg_release;
    e = troupe_actor_spawn(rt, &ix_def, &opts, out);
    if (e != TROUPE_OK)
        cfg_release(c);
    return e;
}

/* ---- host helpers -----------------------------------------------------------
 */

static void
pack_opt_raw(troupe_packer *p, const void *raw, size_t len)
{
    if (raw != NULL)
        troupe_pack_raw(p, raw, len);
    else
        troupe_pack_nil(p);
}

static troupe_err
request_msg(uint32_t kind, const char *index, const troupe_index_query *q,
            troupe_msg **out)
{
    if (out == NULL || q == NULL || index == NULL)
        return TROUPE_EINVAL;
    size_t nl = strnlen(index, INDEX_NAME_MAX + 1);
    if (nl == 0 || nl > INDEX_NAME_MAX ||
        (q->values == NULL && q->values_len > 0) ||
        (q->from == NULL && q->from_len > 0) ||
        (q->to == NULL && q->to_len > 0) ||
        (kind == TROUPE_INDEX_QUERY &&
         (q->limit == 0 || (q->after == NULL && q->after_len > 0))))
        return TROUPE_EINVAL;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, kind == TROUPE_INDEX_COUNT ? 4 : 8);
    troupe_pack_str(&p, index, nl);
    pack_opt_raw(&p, q->values, q->values_len);
    pack_opt_raw(&p, q->from, q->from_len);
    pack_opt_raw(&p, q->to, q->to_len);
    if (kind == TROUPE_INDEX_QUERY) {
        troupe_pack_bool(&p, q->reverse);
        troupe_pack_uint(&p, q->limit);
        if (q->after != NULL)
            troupe_pack_bin(&p, q->after, q->after_len);
        else
            troupe_pack_nil(&p);
        troupe_pack_bool(&p, q->rows);
    }
    return troupe_pack_take_msg(&p, kind, out);
}

troupe_err
troupe_index_query_msg(const char *index, const troupe_index_query *q,
                       troupe_msg **out)
{
    return request_msg(TROUPE_INDEX_QUERY, index, q, out);
}

troupe_err
troupe_index_count_msg(const char *index, const troupe_index_query *q,
                       troupe_msg **out)
{
    return request_msg(TROUPE_INDEX_COUNT, index, q, out);
}

troupe_err
troupe_index_query_reply(const troupe_msg *reply, troupe_index_result **out)
{
    if (reply == NULL || out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    hitbuf h = {0};
    if ((h.res = troupe__index_result_new()) == NULL)
        return TROUPE_ENOMEM;
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init_msg(&r, reply);
    troupe_read_array_n(&r, 3);
    troupe_read_array(&r, &n);
    troupe_err e = TROUPE_OK;
    for (uint32_t i = 0; i < n && e == TROUPE_OK; i++) {
        const void *key = NULL, *pk = NULL, *val = NULL;
        size_t kl = 0, pl = 0, vl = 0;
        uint64_t exp = 0;
        troupe_read_array_n(&r, 4);
        troupe_read_bin(&r, TROUPE_KEY_MAX, &key, &kl);
        troupe_read_bin(&r, TROUPE_KEY_MAX, &pk, &pl);
        troupe_read_raw(&r, &val, &vl);
        /* errors are sticky: the last read reports any earlier one */
        e = troupe_read_uint(&r, &exp);
        if (e == TROUPE_OK && (kl == 0 || pl == 0))
            e = TROUPE_EPROTO;
        if (e == TROUPE_OK)
            e = troupe__index_hit_push(&h, key, kl, pk, pl, val, vl, exp);
    }
    const uint8_t *cur = NULL;
    size_t cl = 0;
    if (e == TROUPE_OK && !troupe_read_try_nil(&r))
        troupe_read_bin(&r, TROUPE_CURSOR_MAX, (const void **)&cur, &cl);
    if (e == TROUPE_OK)
        troupe_read_bool(&r, &h.res->more);
    if (e == TROUPE_OK)
        e = troupe_read_end(&r);
    if (e == TROUPE_OK && h.res->n > 0) {
        /* the cursor names an index and the last hit's key */
        troupe_index_hit *last = &h.res->hits[h.res->n - 1];
        uint64_t id = 0;
        if (cur == NULL || cl != last->key_len + TROUPE_CURSOR_OVERHEAD ||
            cur[0] != TROUPE_CURSOR_INDEX ||
            memcmp(cur + TROUPE_CURSOR_OVERHEAD, last->key, last->key_len) != 0)
            e = TROUPE_EPROTO;
        for (int i = 0; e == TROUPE_OK && i < 8; i++)
            id = (id << 8) | cur[1 + i];
        if (e == TROUPE_OK)
            e = troupe__index_result_cursor(h.res, TROUPE_CURSOR_INDEX, id,
                                            last->key, last->key_len);
    } else if (e == TROUPE_OK && cur != NULL) {
        e = TROUPE_EPROTO;
    }
    if (e != TROUPE_OK) {
        troupe_index_result_destroy(h.res);
        return e == TROUPE_ENOMEM ? e : TROUPE_EPROTO;
    }
    *out = h.res;
    return TROUPE_OK;
}

troupe_err
troupe_index_count_reply(const troupe_msg *reply, uint64_t *n)
{
    if (reply == NULL || n == NULL)
        return TROUPE_EINVAL;
    troupe_reader r;
    troupe_reader_init_msg(&r, reply);
    troupe_read_uint(&r, n);
    return troupe_read_end(&r) == TROUPE_OK ? TROUPE_OK : TROUPE_EPROTO;
}

troupe_err
troupe_index_verify_msg(size_t budget, bool derive, const void *cursor,
                        size_t cursor_len, troupe_msg **out)
{
    if (out == NULL || budget == 0 || (cursor == NULL && cursor_len > 0) ||
        (cursor != NULL && (cursor_len == 0 || cursor_len > TROUPE_KEY_MAX)))
        return TROUPE_EINVAL;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, budget);
    troupe_pack_bool(&p, derive);
    if (cursor != NULL)
        troupe_pack_bin(&p, cursor, cursor_len);
    else
        troupe_pack_nil(&p);
    return troupe_pack_take_msg(&p, TROUPE_INDEX_VERIFY, out);
}

troupe_err
troupe_index_verify_reply(const troupe_msg *reply, troupe_index_verify_cb cb,
                          void *ctx, void **next, size_t *next_len, bool *done)
{
    if (reply == NULL || next == NULL || next_len == NULL || done == NULL)
        return TROUPE_EINVAL;
    *next = NULL;
    *next_len = 0;
    *done = false;
    /* Validate the whole reply before calling cb once. */
    for (int pass = 0; pass < 2; pass++) {
        troupe_reader r;
        uint32_t n = 0;
        troupe_reader_init_msg(&r, reply);
        troupe_read_array_n(&r, 2);
        troupe_read_array(&r, &n);
        for (uint32_t i = 0; i < n; i++) {
            troupe_index_mismatch m = {0};
            uint64_t kind = 0;
            const void *pk = NULL, *key = NULL;
            troupe_read_array_n(&r, 4);
            troupe_read_uint(&r, &kind);
            if (!troupe_read_try_nil(&r))
                troupe_read_bin(&r, TROUPE_KEY_MAX, &pk, &m.pk_len);
            troupe_read_uint(&r, &m.index_id);
            if (!troupe_read_try_nil(&r))
                troupe_read_bin(&r, TROUPE_KEY_MAX, &key, &m.key_len);
            if (kind < TROUPE_VERIFY_MISSING_MANIFEST ||
                kind > TROUPE_VERIFY_STALE_MANIFEST)
                return TROUPE_EPROTO;
            m.kind = (troupe_index_mismatch_kind)kind;
            m.pk = pk;
            m.key = key;
            if (pass == 1 && cb != NULL)
                cb(ctx, &m);
        }
        const void *cur = NULL;
        size_t cl = 0;
        if (!troupe_read_try_nil(&r))
            troupe_read_bin(&r, TROUPE_KEY_MAX, &cur, &cl);
        if (troupe_read_end(&r) != TROUPE_OK || (cur != NULL && cl == 0))
            return TROUPE_EPROTO;
        if (pass == 1) {
            if (cur == NULL) {
                *done = true;
            } else {
                if ((*next = troupe_malloc(cl)) == NULL)
                    return TROUPE_ENOMEM;
                memcpy(*next, cur, cl);
                *next_len = cl;
            }
        }
    }
    return TROUPE_OK;
}
