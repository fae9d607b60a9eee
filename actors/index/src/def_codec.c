/*
 * The catalog form of an index definition (docs/data-model.md, "Indexes"):
 * troupe_index_def_pack writes the seven-key map the table catalog entry
 * embeds; troupe_index_def_unpack reads it back from the disk, where it
 * can be anything: exactly the seven keys, each once, and a spec that
 * troupe_index_def_create accepts, EPROTO otherwise with nothing kept.
 * troupe_index_def_clone copies a def through this form.
 */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"

/* ---- small helpers ---------------------------------------------------- */

static char *
dup_n(const char *s, size_t n)
{
    char *c = troupe_malloc(n + 1);
    if (c == NULL)
        return NULL;
    memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

static const char *const type_names[] = {
    "string", "int", "float", "bool", "timestamp", "bytes", "string_casefold"};
#define N_TYPES (sizeof(type_names) / sizeof(type_names[0]))
static const char *const op_names[] = {"", "exists", "eq", "ne", "true"};

troupe_err
troupe_index_def_pack(const troupe_index_def *d, void **out, size_t *len)
{
    if (d == NULL || out == NULL || len == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    *len = 0;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 7);
    troupe_pack_cstr(&p, "id");
    troupe_pack_uint(&p, d->id);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, d->name);
    troupe_pack_cstr(&p, "unique");
    troupe_pack_bool(&p, d->unique);
    troupe_pack_cstr(&p, "state");
    troupe_pack_cstr(&p, d->ready ? "ready" : "building");
    troupe_pack_cstr(&p, "fields");
    troupe_pack_array(&p, (uint32_t)d->n_fields);
    for (size_t i = 0; i < d->n_fields; i++) {
        troupe_pack_array(&p, 2);
        troupe_pack_cstr(&p, d->fields[i].path);
        troupe_pack_cstr(&p, type_names[d->fields[i].type]);
    }
    troupe_pack_cstr(&p, "cond");
    if (d->op == TROUPE_COND_NONE) {
        troupe_pack_nil(&p);
    } else {
        troupe_pack_array(&p, 3);
        troupe_pack_cstr(&p, d->cond_path);
        troupe_pack_cstr(&p, op_names[d->op]);
        if (d->cond_val != NULL)
            troupe_pack_raw(&p, d->cond_val, d->cond_val_len);
        else
            troupe_pack_nil(&p);
    }
    troupe_pack_cstr(&p, "fn");
    if (d->fn_name != NULL)
        troupe_pack_cstr(&p, d->fn_name);
    else
        troupe_pack_nil(&p);
    size_t n = 0;
    const void *data = troupe_pack_data(&p, &n);
    troupe_err e = p.err;
    if (e == TROUPE_OK && (*out = troupe_malloc(n)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        memcpy(*out, data, n);
        *len = n;
    }
    troupe_pack_fini(&p);
    return e;
}

static bool
str_is(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static troupe_err
read_cstr(troupe_reader *r, size_t max, char **out)
{
    const char *s;
    size_t n;
    troupe_err e = troupe_read_str(r, max, &s, &n);
    if (e != TROUPE_OK)
        return TROUPE_EPROTO;
    if (memchr(s, '\0', n) != NULL)
        return TROUPE_EPROTO;
    if ((*out = dup_n(s, n)) == NULL)
        return TROUPE_ENOMEM;
    return TROUPE_OK;
}

/* Parsed catalog entry: owns the strings the spec points at. */
typedef struct cat_entry {
    troupe_index_spec spec;
    troupe_index_field fields[INDEX_FIELDS_MAX];
    char *paths[INDEX_FIELDS_MAX];
    char *name, *fn, *cond_path;
    bool ready;
    uint64_t id;
} cat_entry;

static void
cat_fini(cat_entry *c)
{
    troupe_free(c->name);
    troupe_free(c->fn);
    troupe_free(c->cond_path);
    for (size_t i = 0; i < INDEX_FIELDS_MAX; i++)
        troupe_free(c->paths[i]);
}

static troupe_err
read_fields(troupe_reader *r, cat_entry *c)
{
    uint32_t n;
    if (troupe_read_array(r, &n) != TROUPE_OK || n > INDEX_FIELDS_MAX)
        return TROUPE_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        const char *t;
        size_t tn;
        troupe_err e;
        if (troupe_read_array_n(r, 2) != TROUPE_OK)
            return TROUPE_EPROTO;
        if ((e = read_cstr(r, INDEX_PATH_MAX, &c->paths[i])) != TROUPE_OK)
            return e;
        if (troupe_read_str(r, 16, &t, &tn) != TROUPE_OK)
            return TROUPE_EPROTO;
        size_t k = 0;
        while (k < N_TYPES && !str_is(t, tn, type_names[k]))
            k++;
        if (k == N_TYPES)
            return TROUPE_EPROTO;
        c->fields[i].path = c->paths[i];
        c->fields[i].type = (troupe_field_type)k;
    }
    c->spec.n_fields = n;
    c->spec.fields = n > 0 ? c->fields : NULL;
    return TROUPE_OK;
}

static troupe_err
read_cond(troupe_reader *r, cat_entry *c)
{
    if (troupe_read_try_nil(r))
        return TROUPE_OK;
    const char *op;
    size_t on;
    troupe_err e;
    if (troupe_read_array_n(r, 3) != TROUPE_OK)
        return TROUPE_EPROTO;
    if ((e = read_cstr(r, INDEX_PATH_MAX, &c->cond_path)) != TROUPE_OK)
        return e;
    if (troupe_read_str(r, 16, &op, &on) != TROUPE_OK)
        return TROUPE_EPROTO;
    size_t k = 1;
    while (k < 5 && !str_is(op, on, op_names[k]))
        k++;
    if (k == 5)
        return TROUPE_EPROTO;
    c->spec.cond.op = (troupe_cond_op)k;
    c->spec.cond.path = c->cond_path;
    if (troupe_read_try_nil(r))
        return TROUPE_OK;
    const void *raw;
    size_t rn;
    if (troupe_read_raw(r, &raw, &rn) != TROUPE_OK)
        return TROUPE_EPROTO;
    c->spec.cond.value = raw; /* points into the input: copied by create */
    c->spec.cond.value_len = rn;
    return TROUPE_OK;
}

enum {
    K_ID = 1,
    K_NAME = 2,
    K_UNIQUE = 4,
    K_STATE = 8,
    K_FIELDS = 16,
    K_COND = 32,
    K_FN = 64,
    K_ALL = 127
};

/* The bit of a catalog key, 0 for an unknown one. */
static unsigned
entry_bit(const char *k, size_t kn)
{
    static const char *const keys[] = {"id",     "name", "unique", "state",
                                       "fields", "cond", "fn"};
    for (unsigned i = 0; i < 7; i++)
        if (str_is(k, kn, keys[i]))
            return 1u << i;
    return 0;
}

/* Exactly the seven keys, each once: a repeated key is refused before its
 * value is read (a second "name" would otherwise replace, and leak, the
 * first one's copy). */
static troupe_err
read_entry(troupe_reader *r, cat_entry *c)
{
    uint32_t n;
    unsigned seen = 0;
    if (troupe_read_map(r, &n) != TROUPE_OK || n != 7)
        return TROUPE_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        troupe_err e = TROUPE_OK;
        if (troupe_read_str(r, 16, &k, &kn) != TROUPE_OK)
            return TROUPE_EPROTO;
        unsigned bit = entry_bit(k, kn);
        if (bit == 0 || (seen & bit))
            return TROUPE_EPROTO;
        seen |= bit;
        if (bit == K_ID) {
            if (troupe_read_uint(r, &c->id) != TROUPE_OK)
                e = TROUPE_EPROTO;
        } else if (bit == K_NAME) {
            e = read_cstr(r, INDEX_NAME_MAX, &c->name);
            c->spec.name = c->name;
        } else if (bit == K_UNIQUE) {
            if (troupe_read_bool(r, &c->spec.unique) != TROUPE_OK)
                e = TROUPE_EPROTO;
        } else if (bit == K_STATE) {
            const char *s;
            size_t sn;
            if (troupe_read_str(r, 16, &s, &sn) != TROUPE_OK)
                e = TROUPE_EPROTO;
            else if (str_is(s, sn, "ready"))
                c->ready = true;
            else if (!str_is(s, sn, "building"))
                e = TROUPE_EPROTO;
        } else if (bit == K_FIELDS) {
            e = read_fields(r, c);
        } else if (bit == K_COND) {
            e = read_cond(r, c);
        } else if (!troupe_read_try_nil(r)) { /* K_FN */
            e = read_cstr(r, INDEX_NAME_MAX, &c->fn);
            c->spec.fn_name = c->fn;
        }
        if (e != TROUPE_OK)
            return e;
    }
    return seen == K_ALL ? TROUPE_OK : TROUPE_EPROTO;
}

troupe_err
troupe_index_def_unpack(const void *data, size_t len, troupe_index_def **out)
{
    if (out == NULL || (data == NULL && len > 0))
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_reader r;
    if (troupe_reader_init(&r, data, len) != TROUPE_OK)
        return TROUPE_EPROTO;
    cat_entry c;
    memset(&c, 0, sizeof(c));
    troupe_err e = read_entry(&r, &c);
    if (e == TROUPE_OK && troupe_read_end(&r) != TROUPE_OK)
        e = TROUPE_EPROTO;
    if (e == TROUPE_OK) {
        e = troupe_index_def_create(&c.spec, c.id, out);
        if (e == TROUPE_EINVAL)
            e = TROUPE_EPROTO; /* stored entry that no valid spec makes */
        if (e == TROUPE_OK)
            (*out)->ready = c.ready;
    }
    cat_fini(&c);
    return e;
}

troupe_err
troupe_index_def_clone(const troupe_index_def *d, uint64_t id,
                       troupe_index_def **out)
{
    if (out != NULL)
        *out = NULL;
    if (d == NULL || out == NULL || id == 0)
        return TROUPE_EINVAL;
    /* Through the catalog form: one copy routine to keep right, and the
     * copy is exactly what a reopen would load. */
    void *p = NULL;
    size_t len = 0;
    troupe_err e = troupe_index_def_pack(d, &p, &len);
    if (e == TROUPE_OK)
        e = troupe_index_def_unpack(p, len, out);
    troupe_free(p);
    if (e == TROUPE_OK)
        (*out)->id = id;
    return e;
}
