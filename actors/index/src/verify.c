/*
 * verify: rows, manifests and index entries of one table checked against
 * each other, in bounded steps (blocking; run on a worker).
 *
 * Two phases, both in key order so that a step can stop anywhere and the
 * next resume from an exact-key cursor:
 *  0. rows ("t.<id>") and manifests ("m.<id>") merged by primary key: each
 *     pk must have both; each manifest must be well formed, list only keys
 *     ending with its own pk, of known indexes, each present in its index
 *     family; optionally the row's derived entries must equal the listed
 *     ones. This direction finds missing entries.
 *  1. each ready index's entries: each must be listed by the manifest of
 *     the pk it ends with. This direction finds orphaned entries, which
 *     phase 0 cannot see.
 * The cursor is a tuple-codec key (table id, phase, index position, last
 * key done), so a cursor of another table or a forged one is rejected
 * rather than silently skipping records.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "index_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/storage.h"

typedef struct vstate {
    troupe_db *db;
    const troupe_index_verify_opts *o;
    const troupe_snapshot *snap;
    troupe_cf *t, *m;
    troupe_cf **x; /* per def */
    size_t budget;
} vstate;

static void
report(vstate *s, troupe_index_mismatch_kind kind, const void *pk,
       size_t pk_len, uint64_t id, const void *key, size_t key_len)
{
    troupe_index_mismatch m = {.kind = kind,
                               .pk = pk,
                               .pk_len = pk_len,
                               .index_id = id,
                               .key = key,
                               .key_len = key_len};
    if (s->o->cb != NULL)
        s->o->cb(s->o->cb_ctx, &m);
}

static ssize_t
def_pos(const vstate *s, uint64_t id)
{
    for (size_t i = 0; i < s->o->n_defs; i++) {
        if (s->o->defs[i]->id == id)
            return (ssize_t)i;
    }
    return -1;
}

/* Whether key is values-then-pk ending with exactly this pk. */
static troupe_err
key_is_for(const uint8_t *key, size_t key_len, const uint8_t *pk, size_t pk_len,
           bool *yes)
{
    void *kp;
    size_t kn;
    troupe_err e = troupe_index_key_pk_copy(key, key_len, &kp, &kn);
    *yes = false;
    if (e == TROUPE_EPROTO)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    *yes = kn == pk_len && memcmp(kp, pk, kn) == 0;
    troupe_free(kp);
    return TROUPE_OK;
}

/* The row's entries for ready index d against the manifest's run. */
static troupe_err
check_derived(vstate *s, const troupe_index_def *d, const uint8_t *pk,
              size_t pk_len, const void *doc, size_t doc_len, const mentry *m,
              size_t mn)
{
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    troupe_err err =
        troupe_index_derive(d, s->o->fns, doc, doc_len, pk, pk_len, &e);
    if (err == TROUPE_EPROTO || err == TROUPE_ENOENT) {
        report(s, TROUPE_VERIFY_BAD_ROW, pk, pk_len, d->id, NULL, 0);
        return TROUPE_OK;
    }
    if (err != TROUPE_OK)
        return err;
    size_t i = 0, j = 0;
    while (j < mn && m[j].id != d->id)
        j++;
    while (i < e.n || (j < mn && m[j].id == d->id)) {
        bool has_l = j < mn && m[j].id == d->id;
        int c = i == e.n ? 1
                : !has_l ? -1
                         : troupe_key_cmp(e.v[i].key, e.v[i].key_len, m[j].key,
                                          m[j].len);
        if (c < 0) {
            report(s, TROUPE_VERIFY_STALE_MANIFEST, pk, pk_len, d->id,
                   e.v[i].key, e.v[i].key_len);
            i++;
        } else if (c > 0) {
            report(s, TROUPE_VERIFY_STALE_MANIFEST, pk, pk_len, d->id, m[j].key,
                   m[j].len);
            j++;
        } else {
            i++;
            j++;
        }
    }
    troupe_index_entries_fini(&e);
    return TROUPE_OK;
}

static troupe_err
check_pair(vstate *s, const uint8_t *pk, size_t pk_len, const troupe_kv *row,
           const troupe_kv *man)
{
    mentry *m = NULL;
    size_t mn = 0;
    troupe_err e =
        troupe__manifest_parse(man->val, man->val_len, NULL, 0, &m, &mn);
    if (e == TROUPE_ECORRUPT) {
        report(s, TROUPE_VERIFY_BAD_MANIFEST, pk, pk_len, 0, NULL, 0);
        return TROUPE_OK;
    }
    if (e != TROUPE_OK)
        return e;
    for (size_t i = 0; i < mn && e == TROUPE_OK; i++) {
        const mentry *x = &m[i];
        ssize_t p = def_pos(s, x->id);
        bool mine;
        if (p < 0) {
            report(s, TROUPE_VERIFY_UNKNOWN_INDEX, pk, pk_len, x->id, x->key,
                   x->len);
            continue;
        }
        if ((e = key_is_for(x->key, x->len, pk, pk_len, &mine)) != TROUPE_OK)
            break;
        if (!mine) {
            report(s, TROUPE_VERIFY_CROSS_RECORD, pk, pk_len, x->id, x->key,
                   x->len);
            continue;
        }
        void *v = NULL;
        size_t vl;
        e = troupe_db_get(s->db, s->x[p], s->snap, x->key, x->len, &v, &vl);
        troupe_free(v);
        if (e == TROUPE_ENOENT) {
            report(s, TROUPE_VERIFY_MISSING_ENTRY, pk, pk_len, x->id, x->key,
                   x->len);
            e = TROUPE_OK;
        }
    }
    if (e == TROUPE_OK && s->o->derive) {
        int64_t exp;
        const void *doc = NULL;
        size_t doc_len = 0;
        bool ok = troupe__envelope_parse(row->val, row->val_len, &exp, &doc,
                                         &doc_len) == TROUPE_OK;
        if (!ok)
            report(s, TROUPE_VERIFY_BAD_ROW, pk, pk_len, 0, NULL, 0);
        for (size_t i = 0; ok && i < s->o->n_defs && e == TROUPE_OK; i++) {
            if (s->o->defs[i]->ready)
                e = check_derived(s, s->o->defs[i], pk, pk_len, doc, doc_len, m,
                                  mn);
        }
    }
    troupe_free(m);
    return e;
}

/* The position of the last key done, copied (iterator keys move on). */
typedef struct lastkey {
    uint8_t *p;
    size_t n, cap;
} lastkey;

static troupe_err
last_set(lastkey *l, const uint8_t *k, size_t n)
{
    if (n > l->cap) {
        uint8_t *p = troupe_realloc(l->p, n);
        if (p == NULL)
            return TROUPE_ENOMEM;
        l->p = p;
        l->cap = n;
    }
    if (n > 0)
        memcpy(l->p, k, n);
    l->n = n;
    return TROUPE_OK;
}

/* Phase 0. Returns OK with *finished when both families are done. */
static troupe_err
phase_rows(vstate *s, lastkey *last, bool *finished)
{
    troupe_iter *ti = NULL, *mi = NULL;
    const void *after = last->n ? last->p : NULL;
    troupe_err e = troupe_iter_create(s->db, s->t, s->snap, NULL, after,
                                      last->n, false, &ti);
    if (e == TROUPE_OK)
        e = troupe_iter_create(s->db, s->m, s->snap, NULL, after, last->n,
                               false, &mi);
    troupe_kv rk, mk;
    troupe_err re = TROUPE_ENOENT, me = TROUPE_ENOENT;
    if (e == TROUPE_OK) {
        re = troupe_iter_next(ti, &rk);
        me = troupe_iter_next(mi, &mk);
    }
    while (e == TROUPE_OK && s->budget > 0) {
        if (re != TROUPE_OK && re != TROUPE_ENOENT)
            e = re;
        else if (me != TROUPE_OK && me != TROUPE_ENOENT)
            e = me;
        if (e != TROUPE_OK || (re == TROUPE_ENOENT && me == TROUPE_ENOENT))
            break;
        int c = re == TROUPE_ENOENT ? 1
                : me == TROUPE_ENOENT
                    ? -1
                    : troupe_key_cmp(rk.key, rk.key_len, mk.key, mk.key_len);
        s->budget--;
        if (c < 0) {
            report(s, TROUPE_VERIFY_MISSING_MANIFEST, rk.key, rk.key_len, 0,
                   NULL, 0);
            e = last_set(last, rk.key, rk.key_len);
            re = troupe_iter_next(ti, &rk);
        } else if (c > 0) {
            report(s, TROUPE_VERIFY_ORPHAN_MANIFEST, mk.key, mk.key_len, 0,
                   NULL, 0);
            e = last_set(last, mk.key, mk.key_len);
            me = troupe_iter_next(mi, &mk);
        } else {
            e = check_pair(s, rk.key, rk.key_len, &rk, &mk);
            if (e == TROUPE_OK)
                e = last_set(last, rk.key, rk.key_len);
            re = troupe_iter_next(ti, &rk);
            me = troupe_iter_next(mi, &mk);
        }
    }
    *finished = e == TROUPE_OK && re == TROUPE_ENOENT && me == TROUPE_ENOENT;
    troupe_iter_destroy(ti);
    troupe_iter_destroy(mi);
    return e;
}

/* Phase 1 over def i. */
static troupe_err
phase_entries(vstate *s, size_t i, lastkey *last, bool *finished)
{
    const troupe_index_def *d = s->o->defs[i];
    troupe_iter *it = NULL;
    troupe_err e =
        troupe_iter_create(s->db, s->x[i], s->snap, NULL,
                           last->n ? last->p : NULL, last->n, false, &it);
    troupe_kv kv;
    troupe_err ie = TROUPE_ENOENT;
    if (e == TROUPE_OK)
        ie = troupe_iter_next(it, &kv);
    while (e == TROUPE_OK && s->budget > 0 && ie == TROUPE_OK) {
        s->budget--;
        void *pk = NULL;
        size_t pk_len = 0;
        troupe_err ke =
            troupe_index_key_pk_copy(kv.key, kv.key_len, &pk, &pk_len);
        if (ke == TROUPE_EPROTO) {
            report(s, TROUPE_VERIFY_BAD_ENTRY, NULL, 0, d->id, kv.key,
                   kv.key_len);
        } else if (ke != TROUPE_OK) {
            e = ke;
        } else {
            void *mv = NULL;
            size_t ml = 0;
            bool listed_here = false;
            ke = troupe_db_get(s->db, s->m, s->snap, pk, pk_len, &mv, &ml);
            if (ke == TROUPE_OK) {
                mentry *m = NULL;
                size_t mn = 0;
                ke = troupe__manifest_parse(mv, ml, NULL, 0, &m, &mn);
                for (size_t j = 0; ke == TROUPE_OK && j < mn; j++)
                    listed_here |= m[j].id == d->id &&
                                   troupe_key_cmp(m[j].key, m[j].len, kv.key,
                                                  kv.key_len) == 0;
                if (ke == TROUPE_OK)
                    troupe_free(m);
                if (ke == TROUPE_ECORRUPT)
                    ke = TROUPE_OK; /* reported as BAD_MANIFEST in phase 0 */
            } else if (ke == TROUPE_ENOENT) {
                ke = TROUPE_OK;
            }
            troupe_free(mv);
            if (ke != TROUPE_OK)
                e = ke;
            else if (!listed_here)
                report(s, TROUPE_VERIFY_ORPHAN_ENTRY, pk, pk_len, d->id, kv.key,
                       kv.key_len);
            troupe_free(pk);
        }
        if (e == TROUPE_OK)
            e = last_set(last, kv.key, kv.key_len);
        if (e == TROUPE_OK)
            ie = troupe_iter_next(it, &kv);
    }
    if (e == TROUPE_OK && ie != TROUPE_OK && ie != TROUPE_ENOENT)
        e = ie;
    *finished = e == TROUPE_OK && ie == TROUPE_ENOENT;
    troupe_iter_destroy(it);
    return e;
}

/* Cursor: tuple (table_id, phase, index position, last key). */
static troupe_err
cursor_read(const void *c, size_t n, uint64_t table, int64_t *phase,
            int64_t *pos, lastkey *last)
{
    troupe_key_reader r;
    troupe_key_item it;
    troupe_err e = TROUPE_EINVAL;
    troupe_key_reader_init(&r, c, n);
    if (troupe_key_read(&r, &it) != TROUPE_OK || it.type != TROUPE_KEY_UINT64 ||
        it.v.u64 != table)
        goto out;
    if (troupe_key_read(&r, &it) != TROUPE_OK || it.type != TROUPE_KEY_INT64 ||
        it.v.i64 < 0 || it.v.i64 > 1)
        goto out;
    *phase = it.v.i64;
    if (troupe_key_read(&r, &it) != TROUPE_OK || it.type != TROUPE_KEY_INT64 ||
        it.v.i64 < 0)
        goto out;
    *pos = it.v.i64;
    if (troupe_key_read(&r, &it) != TROUPE_OK || it.type != TROUPE_KEY_BYTES ||
        it.v.s.len > TROUPE_KEY_MAX)
        goto out;
    if (last_set(last, it.v.s.ptr, it.v.s.len) != TROUPE_OK) {
        e = TROUPE_ENOMEM;
        goto out;
    }
    if (troupe_key_read(&r, &it) != TROUPE_ENOENT)
        goto out;
    e = TROUPE_OK;
out:
    troupe_key_reader_fini(&r);
    return e;
}

static troupe_err
cursor_make(uint64_t table, int64_t phase, int64_t pos, const lastkey *last,
            void **out, size_t *len)
{
    troupe_key_writer w;
    const uint8_t *k;
    size_t n;
    troupe_key_writer_init(&w);
    troupe_key_put_uint64(&w, table);
    troupe_key_put_int64(&w, phase);
    troupe_key_put_int64(&w, pos);
    troupe_key_put_bytes(&w, last->p, last->n);
    troupe_err e = troupe_key_writer_finish(&w, &k, &n);
    if (e == TROUPE_OK && (*out = troupe_malloc(n)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        memcpy(*out, k, n);
        *len = n;
    }
    troupe_key_writer_fini(&w);
    return e;
}

troupe_err
troupe_index_verify_step(troupe_db *db, const troupe_index_verify_opts *o,
                         const void *cursor, size_t cursor_len, void **next,
                         size_t *next_len, bool *done)
{
    if (next == NULL || next_len == NULL || done == NULL)
        return TROUPE_EINVAL;
    *next = NULL;
    *next_len = 0;
    *done = false;
    if (db == NULL || o == NULL || o->budget == 0 ||
        (o->defs == NULL && o->n_defs > 0) ||
        (cursor == NULL && cursor_len > 0) ||
        (cursor != NULL && cursor_len == 0))
        return TROUPE_EINVAL;
    for (size_t i = 0; i < o->n_defs; i++) {
        if (o->defs[i] == NULL)
            return TROUPE_EINVAL;
    }
    lastkey last = {0};
    int64_t phase = 0, pos = 0;
    troupe_err e = TROUPE_OK;
    if (cursor != NULL)
        e = cursor_read(cursor, cursor_len, o->table_id, &phase, &pos, &last);
    if (e == TROUPE_OK && (size_t)pos > o->n_defs)
        e = TROUPE_EINVAL;
    vstate s = {.db = db, .o = o, .snap = o->snap, .budget = o->budget};
    troupe_snapshot *own = NULL;
    if (e == TROUPE_OK && o->n_defs > 0 &&
        (s.x = troupe_calloc(o->n_defs, sizeof(*s.x))) == NULL)
        e = TROUPE_ENOMEM;
    char name[TROUPE__CF_NAME_LEN];
    if (e == TROUPE_OK) {
        troupe__cf_name('t', o->table_id, name, sizeof(name));
        e = troupe_db_cf(db, name, &s.t);
    }
    if (e == TROUPE_OK) {
        troupe__cf_name('m', o->table_id, name, sizeof(name));
        e = troupe_db_cf(db, name, &s.m);
    }
    for (size_t i = 0; e == TROUPE_OK && i < o->n_defs; i++) {
        troupe__cf_name('x', o->defs[i]->id, name, sizeof(name));
        e = troupe_db_cf(db, name, &s.x[i]);
    }
    if (e == TROUPE_OK && s.snap == NULL) {
        e = troupe_snapshot_create(db, &own);
        s.snap = own;
    }
    bool finished = false;
    while (e == TROUPE_OK && s.budget > 0 && !*done) {
        if (phase == 0) {
            e = phase_rows(&s, &last, &finished);
            if (e == TROUPE_OK && finished) {
                phase = 1;
                pos = 0;
                last.n = 0;
            }
        } else if ((size_t)pos >= o->n_defs) {
            *done = true;
        } else if (!o->defs[pos]->ready) {
            pos++;
            last.n = 0;
        } else {
            e = phase_entries(&s, (size_t)pos, &last, &finished);
            if (e == TROUPE_OK && finished) {
                pos++;
                last.n = 0;
            }
        }
    }
    /* the budget ran out exactly at the end */
    if (e == TROUPE_OK && !*done && phase == 1 && (size_t)pos >= o->n_defs)
        *done = true;
    if (e == TROUPE_OK && !*done)
        e = cursor_make(o->table_id, phase, pos, &last, next, next_len);
    troupe_snapshot_destroy(own);
    troupe_free(s.x);
    troupe_free(last.p);
    return e;
}
