/*
 * Index definitions (troupe_index_def, the struct in index_int.h): the
 * spec's validation (names, paths, the condition and its value), create,
 * compare, the accessors (and the one mutable field, ready), destroy. The
 * catalog form of a def, and the clone made through it, are def_codec.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"

static bool
utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned min;
        if (c < 0x80) {
            if (c == 0)
                return false;
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            min = 0x80;
            c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            min = 0x800;
            c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            min = 0x10000;
            c &= 0x07;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return false;
            c = (c << 6) | (s[i + j] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

bool
troupe__index_name_ok(const char *s, size_t max)
{
    if (s == NULL)
        return false;
    size_t n = strnlen(s, max + 1);
    return n >= 1 && n <= max && utf8_valid((const unsigned char *)s, n);
}

static bool
path_ok(const char *p)
{
    if (!troupe__index_name_ok(p, INDEX_PATH_MAX))
        return false;
    size_t n = strlen(p);
    if (p[0] == '.' || p[n - 1] == '.' || strstr(p, "..") != NULL)
        return false;
    return true;
}

static troupe_field_type
kind_field_type(troupe_mp_type t, bool *ok)
{
    *ok = true;
    switch (t) {
    case TROUPE_MP_STR:
        return TROUPE_FIELD_STRING;
    case TROUPE_MP_BIN:
        return TROUPE_FIELD_BYTES;
    case TROUPE_MP_UINT:
    case TROUPE_MP_INT:
        return TROUPE_FIELD_INT;
    case TROUPE_MP_FLOAT:
        return TROUPE_FIELD_FLOAT;
    case TROUPE_MP_BOOL:
        return TROUPE_FIELD_BOOL;
    default:
        *ok = false;
        return TROUPE_FIELD_STRING;
    }
}

void
troupe_index_def_destroy(troupe_index_def *d)
{
    if (d == NULL)
        return;
    troupe_free(d->name);
    for (size_t i = 0; i < d->n_fields; i++)
        troupe_free(d->fields[i].path);
    troupe_free(d->cond_path);
    troupe_free(d->cond_val);
    troupe_free(d->fn_name);
    troupe_free(d);
}

/* The EQ/NE value must be one scalar msgpack object; when the condition's
 * path is one of the index's fields, of that field's kind. */
static bool
cond_value_ok(const troupe_index_spec *s)
{
    if (s->cond.value == NULL || s->cond.value_len == 0)
        return false;
    troupe_reader r;
    if (troupe_reader_init(&r, s->cond.value, s->cond.value_len) != TROUPE_OK)
        return false;
    bool ok;
    troupe_field_type k = kind_field_type(troupe_read_peek(&r), &ok);
    if (!ok)
        return false;
    for (size_t i = 0; i < s->n_fields; i++) {
        if (strcmp(s->fields[i].path, s->cond.path) != 0)
            continue;
        troupe_field_type ft = s->fields[i].type;
        if (ft == TROUPE_FIELD_TIMESTAMP)
            ft = TROUPE_FIELD_INT;
        else if (ft == TROUPE_FIELD_STRING_CASEFOLD)
            ft = TROUPE_FIELD_STRING;
        if (ft != k)
            return false;
    }
    return true;
}

static troupe_err
spec_check(const troupe_index_spec *s)
{
    if (s == NULL || !troupe__index_name_ok(s->name, INDEX_NAME_MAX))
        return TROUPE_EINVAL;
    if (s->fn_name != NULL) {
        if (s->fields != NULL || s->n_fields != 0 || s->unique ||
            !troupe__index_name_ok(s->fn_name, INDEX_NAME_MAX))
            return TROUPE_EINVAL;
    } else {
        if (s->fields == NULL || s->n_fields == 0 ||
            s->n_fields > INDEX_FIELDS_MAX)
            return TROUPE_EINVAL;
        for (size_t i = 0; i < s->n_fields; i++) {
            if (!path_ok(s->fields[i].path) ||
                (unsigned)s->fields[i].type > TROUPE_FIELD_STRING_CASEFOLD)
                return TROUPE_EINVAL;
        }
    }
    switch (s->cond.op) {
    case TROUPE_COND_NONE:
        if (s->cond.path != NULL || s->cond.value != NULL ||
            s->cond.value_len != 0)
            return TROUPE_EINVAL;
        break;
    case TROUPE_COND_EXISTS:
    case TROUPE_COND_TRUE:
        if (!path_ok(s->cond.path) || s->cond.value != NULL ||
            s->cond.value_len != 0)
            return TROUPE_EINVAL;
        break;
    case TROUPE_COND_EQ:
    case TROUPE_COND_NE:
        if (!path_ok(s->cond.path) || !cond_value_ok(s))
            return TROUPE_EINVAL;
        break;
    default:
        return TROUPE_EINVAL;
    }
    return TROUPE_OK;
}

troupe_err
troupe_index_def_create(const troupe_index_spec *spec, uint64_t id,
                        troupe_index_def **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_err e = spec_check(spec);
    if (e != TROUPE_OK)
        return e;
    troupe_index_def *d = troupe_calloc(1, sizeof(*d));
    if (d == NULL)
        return TROUPE_ENOMEM;
    d->id = id;
    d->unique = spec->unique;
    d->ready = true;
    d->op = spec->cond.op;
    bool oom = (d->name = troupe_strdup(spec->name)) == NULL;
    for (size_t i = 0; i < spec->n_fields && !oom; i++) {
        d->fields[i].type = spec->fields[i].type;
        oom = (d->fields[i].path = troupe_strdup(spec->fields[i].path)) == NULL;
        d->n_fields = i + 1;
    }
    if (!oom && spec->cond.path != NULL)
        oom = (d->cond_path = troupe_strdup(spec->cond.path)) == NULL;
    if (!oom && spec->cond.value != NULL) {
        d->cond_val = troupe_malloc(spec->cond.value_len);
        oom = d->cond_val == NULL;
        if (!oom) {
            memcpy(d->cond_val, spec->cond.value, spec->cond.value_len);
            d->cond_val_len = spec->cond.value_len;
        }
    }
    if (!oom && spec->fn_name != NULL)
        oom = (d->fn_name = troupe_strdup(spec->fn_name)) == NULL;
    if (oom) {
        troupe_index_def_destroy(d);
        return TROUPE_ENOMEM;
    }
    *out = d;
    return TROUPE_OK;
}

uint64_t
troupe_index_def_id(const troupe_index_def *d)
{
    return d != NULL ? d->id : 0;
}

const char *
troupe_index_def_name(const troupe_index_def *d)
{
    return d != NULL ? d->name : NULL;
}

bool
troupe_index_def_unique(const troupe_index_def *d)
{
    return d != NULL && d->unique;
}

bool
troupe_index_def_ready(const troupe_index_def *d)
{
    return d != NULL && d->ready;
}

void
troupe_index_def_set_ready(troupe_index_def *d, bool ready)
{
    if (d != NULL)
        d->ready = ready;
}

static bool
opt_str_eq(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

bool
troupe_index_def_same(const troupe_index_def *a, const troupe_index_def *b)
{
    if (a == NULL || b == NULL || a->unique != b->unique || a->op != b->op ||
        a->n_fields != b->n_fields || strcmp(a->name, b->name) != 0 ||
        !opt_str_eq(a->fn_name, b->fn_name) ||
        !opt_str_eq(a->cond_path, b->cond_path) ||
        a->cond_val_len != b->cond_val_len ||
        (a->cond_val_len > 0 &&
         memcmp(a->cond_val, b->cond_val, a->cond_val_len) != 0))
        return false;
    for (size_t i = 0; i < a->n_fields; i++)
        if (a->fields[i].type != b->fields[i].type ||
            strcmp(a->fields[i].path, b->fields[i].path) != 0)
            return false;
    return true;
}

size_t
troupe_index_def_n_fields(const troupe_index_def *d)
{
    return d != NULL ? d->n_fields : 0;
}

const char *
troupe_index_def_fn_name(const troupe_index_def *d)
{
    return d != NULL ? d->fn_name : NULL;
}
