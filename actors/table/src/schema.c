/*
 * A table's index list (tschema): immutable once built and shared through
 * a refcount by the entry in the name map, the table actor, in-flight
 * jobs and queries. New, clone (for an index change), same (a repeated
 * create), retain and release; the lookup of its indexes' x families; and
 * the index actor that answers queries over it.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"

tschema *
troupe__tschema_retain(tschema *s)
{
    if (s != NULL)
        atomic_fetch_add(&s->refs, 1);
    return s;
}

void
troupe__tschema_release(tschema *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    for (size_t i = 0; i < s->n; i++)
        troupe_index_def_destroy(s->defs[i]);
    troupe_free(s->defs);
    troupe_free(s->xcf);
    troupe_free(s);
}

const troupe_index_def *const *
troupe__tschema_defs(const tschema *s, size_t *n)
{
    *n = s->n;
    return (const troupe_index_def *const *)s->defs;
}

tschema *
troupe__tschema_new(size_t n)
{
    tschema *s = troupe_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    atomic_init(&s->refs, 1);
    s->defs = troupe_calloc(n ? n : 1, sizeof(*s->defs));
    s->xcf = troupe_calloc(n ? n : 1, sizeof(*s->xcf));
    if (s->defs == NULL || s->xcf == NULL) {
        troupe_free(s->defs);
        troupe_free(s->xcf);
        troupe_free(s);
        return NULL;
    }
    return s;
}

bool
troupe__tschema_same(const tschema *a, const tschema *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < b->n; i++) {
        bool found = false;
        for (size_t k = 0; k < a->n && !found; k++)
            found = troupe_index_def_same(a->defs[k], b->defs[i]);
        if (!found)
            return false;
    }
    return true;
}

troupe_err
troupe__tschema_clone(troupe_db *db, const tschema *s, troupe_index_def *extra,
                      uint64_t drop_id, uint64_t ready_id, tschema **out)
{
    tschema *c = troupe__tschema_new(s->n + 1);
    if (c == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < s->n; i++) {
        uint64_t id = troupe_index_def_id(s->defs[i]);
        if (id == drop_id)
            continue;
        void *d = NULL;
        size_t dl = 0;
        e = troupe_index_def_pack(s->defs[i], &d, &dl);
        if (e == TROUPE_OK)
            e = troupe_index_def_unpack(d, dl, &c->defs[c->n]);
        troupe_free(d);
        if (e != TROUPE_OK)
            break;
        if (id == ready_id)
            troupe_index_def_set_ready(c->defs[c->n], true);
        c->xcf[c->n++] = s->xcf[i];
    }
    if (e == TROUPE_OK && extra != NULL) {
        char buf[32];
        troupe__cf_name('x', troupe_index_def_id(extra), buf, sizeof(buf));
        e = troupe_db_cf(db, buf, &c->xcf[c->n]);
        if (e == TROUPE_OK)
            c->defs[c->n++] = extra;
    }
    if (e != TROUPE_OK) {
        troupe__tschema_release(c);
        return e;
    }
    *out = c;
    return TROUPE_OK;
}

troupe_err
troupe__tschema_spawn_index(troupe_tables *t, uint64_t id, const tschema *s,
                            troupe_addr *out)
{
    troupe_index_actor_opts o = {.db = t->db,
                                 .table_id = id,
                                 .defs =
                                     (const troupe_index_def *const *)s->defs,
                                 .n_defs = s->n,
                                 .fns = t->fns};
    return troupe_index_spawn(t->rt, &o, NULL, out);
}

troupe_err
troupe__tschema_families(troupe_db *db, tschema *s)
{
    char buf[32];
    troupe_err err;
    for (size_t i = 0; i < s->n; i++) {
        troupe__cf_name('x', troupe_index_def_id(s->defs[i]), buf, sizeof(buf));
        if ((err = troupe_db_cf(db, buf, &s->xcf[i])) != TROUPE_OK)
            return err == TROUPE_ENOENT ? TROUPE_ECORRUPT : err;
    }
    return TROUPE_OK;
}
