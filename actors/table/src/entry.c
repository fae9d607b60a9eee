/*
 * The tables' records in the catalog's `meta` family (formats in
 * docs/data-model.md): the entries ("table", name) and the build
 * positions ("build", table id), written through the catalog's meta
 * batch, and a table's entry (tentry):
 * its stored form {id, name, version, indexes, dropped?}, parsed and
 * packed here, and freed here. What is read is from the disk: anything
 * that is not the format is ECORRUPT, with nothing allocated.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

/* Most ids a catalog entry's "dropped" list may hold. */
#define DROPPED_MAX TROUPE_TABLE_INDEX_MAX

troupe_err
troupe__tables_pos_key(troupe_key_writer *w, uint64_t table_id)
{
    troupe_key_writer_init(w);
    troupe_key_put_string(w, "build", 5);
    return troupe_key_put_uint64(w, table_id);
}

troupe_err
troupe__tables_write_meta(troupe_tables *t, const char *name, const void *val,
                          size_t vlen, bool put_seq, uint64_t clear_pos)
{
    troupe__meta_batch m;
    troupe__meta_begin(&m, t->cat);
    if (put_seq)
        troupe__meta_put_seq(&m);
    if (name != NULL)
        troupe__meta_put_entry(&m, "table", name, val, vlen);
    if (clear_pos != 0) {
        troupe_key_writer w;
        troupe_err ke = troupe__tables_pos_key(&w, clear_pos);
        troupe__meta_del_key(&m, &w, ke);
    }
    return troupe__meta_commit(&m, TROUPE_SYNC_ON);
}

/* Whether the n defs have distinct ids and distinct names. */
static bool
defs_distinct(troupe_index_def *const *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (troupe_index_def_id(d[i]) == troupe_index_def_id(d[j]) ||
                strcmp(troupe_index_def_name(d[i]),
                       troupe_index_def_name(d[j])) == 0)
                return false;
    return true;
}

void
troupe__tables_entry_free(tentry *e)
{
    if (e == NULL)
        return;
    troupe__tschema_release(e->schema);
    troupe_free(e->dropped);
    troupe_free(e->name);
    troupe_free(e);
}

const char *
troupe__tables_entry_name(const tentry *e)
{
    return e->name;
}

/* The fields of a stored entry as the map walk finds them (pointers into
 * the input). */
typedef struct entry_fields {
    uint64_t id, ver;
    const char *name;
    size_t nlen;
    const void *idx, *drp;
    size_t idx_len, drp_len;
} entry_fields;

/* The map walk of an entry: its fields, ECORRUPT when they are not an
 * entry's (a version other than 1, no id, name or indexes, a name with a
 * NUL byte). */
static troupe_err
entry_keys(const void *val, size_t len, entry_fields *f)
{
    troupe_reader r;
    uint32_t n = 0;
    /* Each key at most once (which of two would count is no choice to
     * make for a corrupt entry); unknown keys are skipped. A key that is
     * not a string of at most 64 bytes ends the walk: nothing read from
     * it is looked at. */
    static const char *const known[] = {"id", "name", "version", "indexes",
                                        "dropped"};
    unsigned seen = 0;
    memset(f, 0, sizeof(*f));
    troupe_reader_init(&r, val, len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *k = NULL;
        size_t kl = 0;
        if (troupe_read_str(&r, 64, &k, &kl) != TROUPE_OK)
            break;
        unsigned which = 0;
        while (which < 5 &&
               (strlen(known[which]) != kl || memcmp(k, known[which], kl) != 0))
            which++;
        if (which < 5 && (seen & (1u << which)))
            return TROUPE_ECORRUPT;
        if (which < 5)
            seen |= 1u << which;
        if (which == 0)
            troupe_read_uint(&r, &f->id);
        else if (which == 1)
            troupe_read_str(&r, TROUPE_TABLE_NAME_MAX, &f->name, &f->nlen);
        else if (which == 2)
            troupe_read_uint(&r, &f->ver);
        else if (which == 3)
            troupe_read_raw(&r, &f->idx, &f->idx_len);
        else if (which == 4)
            troupe_read_raw(&r, &f->drp, &f->drp_len);
        else
            troupe_read_skip(&r);
    }
    /* The name is a valid catalog name, as every create checks: one with
     * a NUL byte would be cut short in memory, and an empty one is no
     * table's. */
    if (troupe_read_end(&r) != TROUPE_OK || f->ver != 1 || f->id == 0 ||
        f->name == NULL || f->idx == NULL || f->nlen == 0 ||
        memchr(f->name, '\0', f->nlen) != NULL)
        return TROUPE_ECORRUPT;
    return TROUPE_OK;
}

/* The nidx index definitions left in r into e's schema. ECORRUPT, ENOMEM. */
static troupe_err
entry_indexes(troupe_reader *r, uint32_t nidx, tentry *e)
{
    troupe_err err = TROUPE_OK;
    for (uint32_t i = 0; i < nidx && err == TROUPE_OK; i++) {
        const void *d;
        size_t dl;
        if (troupe_read_raw(r, &d, &dl) != TROUPE_OK)
            err = TROUPE_ECORRUPT;
        else if ((err = troupe_index_def_unpack(d, dl, &e->schema->defs[i])) ==
                 TROUPE_OK)
            e->schema->n++;
        else if (err != TROUPE_ENOMEM)
            err = TROUPE_ECORRUPT;
    }
    /* Two indexes of one id would share a family and list every key
     * twice in a manifest; two of one name would make queries ambiguous. */
    if (err == TROUPE_OK && (troupe_read_end(r) != TROUPE_OK ||
                             !defs_distinct(e->schema->defs, e->schema->n)))
        err = TROUPE_ECORRUPT;
    return err;
}

/* The "dropped" list (drp_len bytes at drp) into e. ECORRUPT, ENOMEM. */
static troupe_err
entry_dropped(const void *drp, size_t drp_len, tentry *e)
{
    troupe_reader r;
    troupe_err err = TROUPE_OK;
    uint32_t nd = 0;
    troupe_reader_init(&r, drp, drp_len);
    troupe_read_array(&r, &nd);
    if (r.err != TROUPE_OK || nd > DROPPED_MAX)
        err = TROUPE_ECORRUPT;
    else if (nd > 0 &&
             (e->dropped = troupe_calloc(nd, sizeof(uint64_t))) == NULL)
        err = TROUPE_ENOMEM;
    for (uint32_t i = 0; err == TROUPE_OK && i < nd; i++) {
        troupe_read_uint(&r, &e->dropped[i]);
        if (r.err != TROUPE_OK || e->dropped[i] == 0)
            err = TROUPE_ECORRUPT;
        else
            e->ndropped++;
    }
    if (err == TROUPE_OK && troupe_read_end(&r) != TROUPE_OK)
        err = TROUPE_ECORRUPT;
    return err;
}

troupe_err
troupe__tables_entry_parse(const void *val, size_t len, tentry **out)
{
    troupe_reader r;
    uint32_t nidx = 0;
    entry_fields f;
    troupe_err err = entry_keys(val, len, &f);
    if (err != TROUPE_OK)
        return err;
    troupe_reader_init(&r, f.idx, f.idx_len);
    troupe_read_array(&r, &nidx);
    if (r.err != TROUPE_OK || nidx > TROUPE_TABLE_INDEX_MAX)
        return TROUPE_ECORRUPT;
    tentry *e = troupe_calloc(1, sizeof(*e));
    if (e == NULL || (e->schema = troupe__tschema_new(nidx)) == NULL ||
        (e->name = troupe_malloc(f.nlen + 1)) == NULL) {
        troupe__tables_entry_free(e);
        return TROUPE_ENOMEM;
    }
    memcpy(e->name, f.name, f.nlen);
    e->name[f.nlen] = '\0';
    e->id = f.id;
    err =
        troupe_catalog_name_valid(e->name, NULL) ? TROUPE_OK : TROUPE_ECORRUPT;
    if (err == TROUPE_OK)
        err = entry_indexes(&r, nidx, e);
    if (err == TROUPE_OK && f.drp != NULL)
        err = entry_dropped(f.drp, f.drp_len, e);
    if (err != TROUPE_OK) {
        troupe__tables_entry_free(e);
        return err;
    }
    *out = e;
    return TROUPE_OK;
}

troupe_err
troupe__tables_entry_pack_named(uint64_t id, const tschema *s, const char *name,
                                const uint64_t *dropped, size_t nd,
                                troupe_packer *p)
{
    troupe_pack_init(p);
    troupe_pack_map(p, nd > 0 ? 5 : 4);
    troupe_pack_cstr(p, "id");
    troupe_pack_uint(p, id);
    troupe_pack_cstr(p, "name");
    troupe_pack_cstr(p, name);
    troupe_pack_cstr(p, "version");
    troupe_pack_uint(p, 1);
    troupe_pack_cstr(p, "indexes");
    troupe_pack_array(p, (uint32_t)s->n);
    for (size_t i = 0; i < s->n && p->err == TROUPE_OK; i++) {
        void *d = NULL;
        size_t dl = 0;
        troupe_err e = troupe_index_def_pack(s->defs[i], &d, &dl);
        if (e != TROUPE_OK)
            return e;
        troupe_pack_raw(p, d, dl);
        troupe_free(d);
    }
    if (nd > 0) {
        troupe_pack_cstr(p, "dropped");
        troupe_pack_array(p, (uint32_t)nd);
        for (size_t i = 0; i < nd; i++)
            troupe_pack_uint(p, dropped[i]);
    }
    return p->err;
}

troupe_err
troupe__tables_entry_pack(const tentry *e, void **out, size_t *len)
{
    troupe_packer p;
    troupe_err err = troupe__tables_entry_pack_named(
        e->id, e->schema, e->name, e->dropped, e->ndropped, &p);
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    void *c = NULL;
    if (err == TROUPE_OK && (c = troupe_malloc(n)) == NULL)
        err = TROUPE_ENOMEM;
    if (err == TROUPE_OK) {
        memcpy(c, d, n);
        *out = c;
        *len = n;
    }
    troupe_pack_fini(&p);
    return err;
}
