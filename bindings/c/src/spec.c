/*
 * Index specs from msgpack: [{"name": str, "fields": [[path, type], ...],
 * "unique": bool}, ...], the form troupe_abi_table_create takes (no
 * struct crosses the ABI). Every type and length is checked: the bytes
 * come from a host. Strings are copied NUL-terminated into one block, so
 * the specs need nothing of the input once parsed.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

#define SPEC_FIELDS_MAX 16

static const struct {
    const char *name;
    troupe_field_type type;
} types[] = {{"string", TROUPE_FIELD_STRING},
             {"int", TROUPE_FIELD_INT},
             {"float", TROUPE_FIELD_FLOAT},
             {"bool", TROUPE_FIELD_BOOL},
             {"timestamp", TROUPE_FIELD_TIMESTAMP},
             {"bytes", TROUPE_FIELD_BYTES},
             {"string_casefold", TROUPE_FIELD_STRING_CASEFOLD}};

static bool
is_str(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* Copies a msgpack str as a C string at *pos in out->strings. */
static const char *
copy_str(abi_specs *out, size_t *pos, const msgpack_object *o)
{
    char *d = out->strings + *pos;
    memcpy(d, o->via.str.ptr, o->via.str.size);
    d[o->via.str.size] = '\0';
    *pos += o->via.str.size + 1;
    return d;
}

static troupe_err
bad(const char *what, size_t i)
{
    return troupe__errf(TROUPE_EINVAL, "table create: index %zu: %s", i, what);
}

/* Checks spec i (a map) and counts its fields and string bytes. */
static troupe_err
check_one(const msgpack_object *m, size_t i, size_t *nf, size_t *bytes)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return bad("not a map", i);
    bool named = false, fields = false;
    for (uint32_t k = 0; k < m->via.map.size; k++) {
        const msgpack_object *key = &m->via.map.ptr[k].key;
        const msgpack_object *v = &m->via.map.ptr[k].val;
        if (is_str(key, "name")) {
            if (v->type != MSGPACK_OBJECT_STR || v->via.str.size == 0 ||
                memchr(v->via.str.ptr, 0, v->via.str.size) != NULL)
                return bad("\"name\" is not a non-empty string", i);
            *bytes += v->via.str.size + 1;
            named = true;
        } else if (is_str(key, "unique")) {
            if (v->type != MSGPACK_OBJECT_BOOLEAN)
                return bad("\"unique\" is not a bool", i);
        } else if (is_str(key, "fields")) {
            if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size == 0 ||
                v->via.array.size > SPEC_FIELDS_MAX)
                return bad("\"fields\" is not an array of 1..16", i);
            for (uint32_t f = 0; f < v->via.array.size; f++) {
                const msgpack_object *p = &v->via.array.ptr[f];
                if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2 ||
                    p->via.array.ptr[0].type != MSGPACK_OBJECT_STR ||
                    p->via.array.ptr[0].via.str.size == 0 ||
                    memchr(p->via.array.ptr[0].via.str.ptr, 0,
                           p->via.array.ptr[0].via.str.size) != NULL)
                    return bad("a field is not [path, type]", i);
                bool known = false;
                for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
                    known |= is_str(&p->via.array.ptr[1], types[t].name);
                if (!known)
                    return bad("a field's type is not one of string, int, "
                               "float, bool, timestamp, bytes, "
                               "string_casefold",
                               i);
                *bytes += p->via.array.ptr[0].via.str.size + 1;
            }
            *nf += v->via.array.size;
            fields = true;
        } else {
            return bad("a key other than name, fields, unique", i);
        }
    }
    if (!named || !fields)
        return bad("\"name\" and \"fields\" are required", i);
    return TROUPE_OK;
}

static void
fill_one(const msgpack_object *m, abi_specs *out, size_t i, size_t *fpos,
         size_t *spos)
{
    troupe_index_spec *s = &out->specs[i];
    for (uint32_t k = 0; k < m->via.map.size; k++) {
        const msgpack_object *key = &m->via.map.ptr[k].key;
        const msgpack_object *v = &m->via.map.ptr[k].val;
        if (is_str(key, "name")) {
            s->name = copy_str(out, spos, v);
        } else if (is_str(key, "unique")) {
            s->unique = v->via.boolean;
        } else {
            s->fields = &out->fields[*fpos];
            s->n_fields = v->via.array.size;
            for (uint32_t f = 0; f < v->via.array.size; f++) {
                const msgpack_object *p = v->via.array.ptr[f].via.array.ptr;
                troupe_index_field *d = &out->fields[(*fpos)++];
                d->path = copy_str(out, spos, &p[0]);
                for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
                    if (is_str(&p[1], types[t].name))
                        d->type = types[t].type;
            }
        }
    }
}

troupe_err
abi_specs_parse(const void *buf, size_t len, abi_specs *out)
{
    memset(out, 0, sizeof(*out));
    if (len == 0)
        return TROUPE_OK;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    troupe_err e = TROUPE_OK;
    if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != len || u.data.type != MSGPACK_OBJECT_ARRAY) {
        e = troupe__errf(TROUPE_EPROTO, "table create: the indexes are not "
                                        "one msgpack array");
        goto out;
    }
    const msgpack_object_array *a = &u.data.via.array;
    if (a->size > TROUPE_TABLE_INDEX_MAX) {
        e = troupe__errf(TROUPE_EINVAL, "table create: %u indexes, at most %d",
                         a->size, TROUPE_TABLE_INDEX_MAX);
        goto out;
    }
    size_t nf = 0, bytes = 0;
    for (uint32_t i = 0; i < a->size && e == TROUPE_OK; i++)
        e = check_one(&a->ptr[i], i, &nf, &bytes);
    if (e != TROUPE_OK)
        goto out;
    out->specs = troupe_calloc(a->size ? a->size : 1, sizeof(*out->specs));
    out->fields = troupe_calloc(nf ? nf : 1, sizeof(*out->fields));
    out->strings = troupe_malloc(bytes ? bytes : 1);
    if (out->specs == NULL || out->fields == NULL || out->strings == NULL) {
        abi_specs_free(out);
        e = TROUPE_ENOMEM;
        goto out;
    }
    out->n = a->size;
    size_t fpos = 0, spos = 0;
    for (uint32_t i = 0; i < a->size; i++)
        fill_one(&a->ptr[i], out, i, &fpos, &spos);
out:
    msgpack_unpacked_destroy(&u);
    return e;
}

void
abi_specs_free(abi_specs *s)
{
    troupe_free(s->specs);
    troupe_free(s->fields);
    troupe_free(s->strings);
    memset(s, 0, sizeof(*s));
}
