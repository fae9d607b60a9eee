/*
 * Write preparation: what a write reads and decides before it can be
 * submitted, on a worker thread (or on the actor's from memory, when
 * write.c finds that it may). It reads the row and manifest, checks their
 * integrity, applies insert/update semantics and expiry, stamps
 * timestamps, derives index entries, checks unique indexes against the
 * index families and builds the one batch of the write (a transaction's
 * writes append to its shared batch). It owns no actor state: everything
 * it reads is in the op (its cfg holds the schema it prepares with), and
 * it writes only the op (batch, unique values, purge_hit).
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

/* The raw created_at value of a stored document, if it has one. */
static void
find_created(const void *doc, size_t len, const void **raw, size_t *rlen)
{
    troupe_reader r;
    uint32_t n = 0;
    *raw = NULL;
    troupe_reader_init(&r, doc, len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *s = NULL;
        size_t sl = 0;
        if (troupe_read_peek(&r) == TROUPE_MP_STR)
            troupe_read_str(&r, SIZE_MAX, &s, &sl);
        else
            troupe_read_skip(&r);
        if (s != NULL && sl == 10 && memcmp(s, "created_at", 10) == 0) {
            troupe_read_raw(&r, raw, rlen);
            return;
        }
        troupe_read_skip(&r);
    }
}

/* Packs doc into p, setting created_at / updated_at where doc has them. */
static troupe_err
stamp_doc(troupe_packer *p, const void *doc, size_t len, const void *created,
          size_t clen, int64_t now)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, doc, len);
    troupe_read_map(&r, &n);
    troupe_pack_map(p, n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const void *raw;
        size_t rl;
        if (troupe_read_peek(&r) == TROUPE_MP_STR) {
            const char *s = NULL;
            size_t sl = 0;
            if (troupe_read_str(&r, SIZE_MAX, &s, &sl) != TROUPE_OK)
                break;
            troupe_pack_str(p, s, sl);
            bool c = sl == 10 && memcmp(s, "created_at", 10) == 0;
            bool u = sl == 10 && memcmp(s, "updated_at", 10) == 0;
            if (c || u) {
                troupe_read_skip(&r);
                if (c && created != NULL)
                    troupe_pack_raw(p, created, clen);
                else
                    troupe_pack_int(p, now);
                continue;
            }
        } else if (troupe_read_raw(&r, &raw, &rl) == TROUPE_OK) {
            troupe_pack_raw(p, raw, rl);
        }
        if (troupe_read_raw(&r, &raw, &rl) == TROUPE_OK)
            troupe_pack_raw(p, raw, rl);
    }
    troupe_err e = troupe_read_end(&r);
    return e != TROUPE_OK ? TROUPE_EPROTO : p->err;
}

static troupe_cf *
schema_cf(const tschema *s, uint64_t id, size_t *idx)
{
    for (size_t i = 0; i < s->n; i++)
        if (troupe_index_def_id(s->defs[i]) == id) {
            if (idx != NULL)
                *idx = i;
            return s->xcf[i];
        }
    return NULL;
}

/* A unique index entry whose first vlen bytes are its values (entry.
 * values_len): ECONSTRAINT when the index already holds the same values
 * for another primary key. The entries with those values are walked, not
 * just the first two: under a CASEFOLD field this very row may hold
 * several (one per original string), and those are no clash; an entry is
 * another row's when its pk element differs from this row's (`suffix`,
 * the encoded pk, compared as a whole element: a byte suffix match could
 * be a longer pk). */
static troupe_err
unique_check(wop *op, troupe_cf *xcf, const unsigned char *key, size_t vlen,
             const uint8_t *suffix, size_t slen)
{
    unsigned char *end = troupe_malloc(vlen + 1);
    if (end == NULL)
        return TROUPE_ENOMEM;
    memcpy(end, key, vlen);
    end[vlen] = 0xFF;
    troupe_range rg;
    troupe_range_init_bounds(&rg, key, vlen, end, vlen + 1);
    troupe_iter *it = NULL;
    troupe_err e =
        troupe_iter_create(op->cfg.db, xcf, NULL, &rg, NULL, 0, false, &it);
    troupe_kv kv;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        size_t pv = 0;
        if (troupe_index_key_split(kv.key, kv.key_len, &pv, NULL) != TROUPE_OK)
            e = TROUPE_ECORRUPT;
        else if (troupe_key_cmp(kv.key + pv, kv.key_len - pv, suffix, slen) !=
                 0)
            e = TROUPE_ECONSTRAINT;
    }
    troupe_iter_destroy(it);
    troupe_free(end);
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}

static troupe_err
add_uniq(wop *op, uint64_t id, const unsigned char *key, size_t vlen)
{
    uniq *v = troupe_realloc(op->uq, (op->nuq + 1) * sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    op->uq = v;
    v[op->nuq].index_id = id;
    v[op->nuq].len = vlen;
    v[op->nuq].vals = troupe_malloc(vlen ? vlen : 1);
    if (v[op->nuq].vals == NULL)
        return TROUPE_ENOMEM;
    memcpy(v[op->nuq].vals, key, vlen);
    op->nuq++;
    return TROUPE_OK;
}

void
troupe__prepare_uniq_free(wop *op)
{
    for (size_t i = 0; i < op->nuq; i++)
        troupe_free(op->uq[i].vals);
    troupe_free(op->uq);
    op->uq = NULL;
    op->nuq = 0;
}

/* What prep_read found of the row a write replaces: the stored row and
 * manifest (owned, with what points into them), the encoded primary key
 * that ends every index key and manifest entry of the row (suffix, in kw:
 * needed for an old manifest or for indexes; a fresh row of a table
 * without indexes has neither), the old manifest's entries and the
 * envelope's expiry and document. prow_fini frees it. */
typedef struct prow {
    void *row, *man;
    size_t rlen, mlen;
    troupe_err er; /* the row read: OK, or ENOENT (no row) */
    troupe_key_writer kw;
    const uint8_t *suffix;
    size_t slen;
    mentry *old;
    size_t nold;
    int64_t exp;
    const void *doc;
    size_t dlen;
    bool live;
} prow;

/* Reads the row and manifest of op's key (from memory only when
 * op->cached: EAGAIN when either is not there), checks that both or
 * neither exist, and parses them into o (prow_fini it, also on error). */
static troupe_err
prep_read(wop *op, int64_t now, prow *o)
{
    *o = (prow){.er = TROUPE_ENOENT};
    troupe_key_writer_init(&o->kw);
    troupe_err e = TROUPE_OK;
    troupe_err em = TROUPE_ENOENT;
    if (op->cached) {
        o->er = troupe_db_get_cached(op->cfg.db, op->cfg.cf_t, op->key,
                                     op->klen, &o->row, &o->rlen);
        em = o->er == TROUPE_EAGAIN
                 ? o->er
                 : troupe_db_get_cached(op->cfg.db, op->cfg.cf_m, op->key,
                                        op->klen, &o->man, &o->mlen);
    } else {
        o->er = troupe_db_get(op->cfg.db, op->cfg.cf_t, NULL, op->key, op->klen,
                              &o->row, &o->rlen);
        em = troupe_db_get(op->cfg.db, op->cfg.cf_m, NULL, op->key, op->klen,
                           &o->man, &o->mlen);
    }
    if (o->er != TROUPE_OK && o->er != TROUPE_ENOENT)
        e = o->er;
    else if (em != TROUPE_OK && em != TROUPE_ENOENT)
        e = em;
    else if ((o->er == TROUPE_OK) != (em == TROUPE_OK))
        e = TROUPE_ECORRUPT; /* missing or orphaned manifest */
    if (e == TROUPE_OK && (o->er == TROUPE_OK || op->cfg.schema->n > 0)) {
        e = troupe_key_put_bytes(&o->kw, op->key, op->klen);
        if (e == TROUPE_OK)
            e = troupe_key_writer_finish(&o->kw, &o->suffix, &o->slen);
    }
    if (e == TROUPE_OK && o->er == TROUPE_OK) {
        e = troupe__envelope_parse(o->row, o->rlen, &o->exp, &o->doc, &o->dlen);
        if (e == TROUPE_OK)
            e = troupe__manifest_parse(o->man, o->mlen, o->suffix, o->slen,
                                       &o->old, &o->nold);
        o->live = troupe__row_live(o->exp, now);
    }
    return e;
}

static void
prow_fini(prow *o)
{
    troupe_free(o->old);
    troupe_free(o->row);
    troupe_free(o->man);
    troupe_key_writer_fini(&o->kw);
}

/* The envelope [1, expires, doc] of the new row into p (a reindex keeps
 * the stored one, o's: p stays empty): *env and *elen, its document from
 * *off. The document is stamped unless the write said no_timestamps;
 * created_at is kept from the live row it replaces. */
static troupe_err
put_envelope(wop *op, const prow *o, int64_t now, troupe_packer *p,
             const unsigned char **env, size_t *elen, size_t *off)
{
    const void *created = NULL;
    size_t clen = 0;
    troupe_err e = TROUPE_OK;
    if (o->live && op->kind != TABLE_INSERT)
        find_created(o->doc, o->dlen, &created, &clen);
    if (op->kind == TABLE_REINDEX) { /* the stored document, as it is */
        *env = o->doc;
        *elen = o->dlen;
        return TROUPE_OK;
    }
    troupe_pack_array(p, 3);
    troupe_pack_uint(p, 1);
    troupe_pack_int(p, op->expires);
    troupe_pack_data(p, off);
    if (op->nostamp)
        troupe_pack_raw(p, op->doc, op->dlen);
    else
        e = stamp_doc(p, op->doc, op->dlen, created, clen, now);
    *env = troupe_pack_data(p, elen);
    return e;
}

/* The index entries of the row's document doc into b, index by index
 * (ents[i], *total of them), each unique one checked against the index
 * and claimed in op->uq. */
static troupe_err
put_entries(wop *op, troupe_batch *b, const unsigned char *doc, size_t dlen,
            const prow *o, troupe_index_entries *ents, size_t *total)
{
    const tschema *s = op->cfg.schema;
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < s->n; i++) {
        /* A table loaded from disk may name a function this process did
         * not register (creates refuse that): it cannot maintain that
         * index, so it writes nothing but deletes, which derive nothing. */
        const char *fn = troupe_index_def_fn_name(s->defs[i]);
        if (fn != NULL && !troupe_index_fn_registered(op->cfg.fns, fn)) {
            e = TROUPE_ESTATE;
            break;
        }
        e = troupe_index_derive(s->defs[i], op->cfg.fns, doc, dlen, op->key,
                                op->klen, &ents[i]);
        *total += ents[i].n;
        bool uq = troupe_index_def_unique(s->defs[i]);
        uint64_t id = troupe_index_def_id(s->defs[i]);
        for (size_t j = 0; e == TROUPE_OK && j < ents[i].n; j++) {
            troupe_index_entry *x = &ents[i].v[j];
            if (x->key_len <= o->slen) {
                e = TROUPE_EPROTO;
                break;
            }
            static const unsigned char nil = 0xc0;
            e = troupe_batch_put(b, s->xcf[i], x->key, x->key_len,
                                 x->val ? x->val : &nil,
                                 x->val ? x->val_len : 1);
            if (e == TROUPE_OK && uq)
                e = unique_check(op, s->xcf[i], x->key, x->values_len,
                                 o->suffix, o->slen);
            if (e == TROUPE_OK && uq)
                e = add_uniq(op, id, x->key, x->values_len);
        }
    }
    return e;
}

/* The manifest [1, [[id, key], ...]] of ents (total keys) into m; a row
 * without index keys packs nothing (its manifest is a constant). */
static void
put_manifest(const tschema *s, const troupe_index_entries *ents, size_t total,
             troupe_packer *m)
{
    if (total > 0) {
        troupe_pack_array(m, 2);
        troupe_pack_uint(m, 1);
        troupe_pack_array(m, (uint32_t)total);
    }
    for (size_t i = 0; i < s->n; i++)
        for (size_t j = 0; j < ents[i].n; j++) {
            troupe_pack_array(m, 2);
            troupe_pack_uint(m, troupe_index_def_id(s->defs[i]));
            troupe_pack_bin(m, ents[i].v[j].key, ents[i].v[j].key_len);
        }
}

/* The new row, its index entries and manifest into b. */
static troupe_err
prepare_put(wop *op, troupe_batch *b, const prow *o, int64_t now)
{
    const tschema *s = op->cfg.schema;
    bool reindex = op->kind == TABLE_REINDEX;
    troupe_packer p;
    troupe_pack_init(&p);
    size_t off = 0, elen = 0;
    const unsigned char *env;
    troupe_err e = put_envelope(op, o, now, &p, &env, &elen, &off);
    troupe_index_entries *ents =
        s->n ? troupe_calloc(s->n, sizeof(*ents)) : NULL;
    if (e == TROUPE_OK && s->n && ents == NULL)
        e = TROUPE_ENOMEM;
    size_t total = 0;
    for (size_t i = 0; ents != NULL && i < s->n; i++)
        troupe_index_entries_init(&ents[i]);
    if (e == TROUPE_OK)
        e = put_entries(op, b, env + off, elen - off, o, ents, &total);
    /* a row without index keys has the constant manifest [1, []] */
    static const unsigned char no_keys[] = {0x92, 0x01, 0x90};
    troupe_packer m;
    troupe_pack_init(&m);
    if (e == TROUPE_OK)
        put_manifest(s, ents, total, &m);
    if (e == TROUPE_OK)
        e = m.err != TROUPE_OK ? m.err : p.err;
    if (e == TROUPE_OK && !reindex)
        e = troupe_batch_put(b, op->cfg.cf_t, op->key, op->klen, env, elen);
    if (e == TROUPE_OK) {
        size_t mlen = sizeof(no_keys);
        const void *md = total > 0 ? troupe_pack_data(&m, &mlen) : no_keys;
        e = troupe_batch_put(b, op->cfg.cf_m, op->key, op->klen, md, mlen);
    }
    for (size_t i = 0; ents != NULL && i < s->n; i++)
        troupe_index_entries_fini(&ents[i]);
    troupe_free(ents);
    troupe_pack_fini(&m);
    troupe_pack_fini(&p);
    return e;
}

/* Applies op's kind to the row o found: refuses what the kind forbids
 * (EEXIST, ENOENT), or builds the batch (op->batch, or the transaction's
 * own) that deletes the row's old index entries and deletes the row or
 * puts the new one. Some ops find nothing to write (OK, no batch). */
static troupe_err
prep_apply(wop *op, const prow *o, int64_t now)
{
    troupe_err e = TROUPE_OK;
    if (op->kind == TABLE_INSERT && o->live)
        e = TROUPE_EEXIST;
    else if ((op->kind == TABLE_UPDATE || op->kind == TABLE_DELETE) && !o->live)
        e = TROUPE_ENOENT;
    else if (op->kind == TROUPE__PART_ABSENT && o->live)
        e = TROUPE_EEXIST;
    if (e != TROUPE_OK)
        return e;
    if (op->kind == TROUPE__PART_ABSENT ||
        (op->kind == TROUPE__PART_DEL_ANY && !o->live))
        return TROUPE_OK; /* nothing to write */
    if (op->kind == TABLE_REINDEX && o->er == TROUPE_ENOENT)
        return TROUPE_OK; /* deleted since the build listed it: nothing to do */
    /* gone, or rewritten since the scan: not expired now */
    if (op->kind == TABLE_PURGE_OP && (o->er == TROUPE_ENOENT || o->live))
        return TROUPE_OK;
    troupe_batch *b = NULL;
    if (op->ext)
        b = op->batch; /* the transaction's one batch, borrowed */
    else
        e = troupe_commit_batch(op->cfg.commit, &b);
    for (size_t i = 0; e == TROUPE_OK && i < o->nold; i++) {
        troupe_cf *xcf = schema_cf(op->cfg.schema, o->old[i].id, NULL);
        if (xcf != NULL) /* else the index is gone with its family */
            e = troupe_batch_delete(b, xcf, o->old[i].key, o->old[i].len);
    }
    if (e == TROUPE_OK &&
        (op->kind == TABLE_DELETE || op->kind == TROUPE__PART_DEL_ANY ||
         op->kind == TABLE_PURGE_OP)) {
        e = troupe_batch_delete(b, op->cfg.cf_t, op->key, op->klen);
        if (e == TROUPE_OK)
            e = troupe_batch_delete(b, op->cfg.cf_m, op->key, op->klen);
        op->purge_hit = op->kind == TABLE_PURGE_OP && e == TROUPE_OK;
    } else if (e == TROUPE_OK) {
        e = prepare_put(op, b, o, now);
    }
    if (e == TROUPE_OK) {
        op->batch = b;
        b = NULL;
    }
    if (!op->ext)
        troupe_batch_destroy(b);
    return e;
}

troupe_err
troupe__prepare(wop *op)
{
    int64_t now = op->cfg.clock(op->cfg.clock_ctx);
    prow o;
    troupe_err e = prep_read(op, now, &o);
    if (e == TROUPE_OK)
        e = prep_apply(op, &o, now);
    prow_fini(&o);
    return e;
}

void
troupe__prepare_work(void *arg)
{
    wop *op = arg;
    op->err = troupe__prepare(op);
}
