/*
 * Index definitions, their catalog form, the function registry and key
 * derivation (docs/data-model.md, "Sparse rules" and "Indexes").
 *
 * Derivation reads the document with a bounds-checked troupe_reader that
 * validates the whole map once; each field lookup then walks a copy of that
 * reader, so a hostile document can make derive fail with EPROTO but never
 * read outside its bytes. Every field yields a list of encoded key elements
 * (one per qualifying scalar, leaf array element or map entry: the path
 * rules below "derivation"); the keys are the cartesian product of those
 * lists, each followed by the tiebreaks of CASEFOLD fields and the
 * bytes(pk) element, then sorted and deduplicated. The product is capped
 * (TROUPE_INDEX_ROW_KEYS_MAX) because a document of a few kilobytes with
 * several arrays could otherwise ask for billions of keys.
 */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"
#include "troupe/storage.h"

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

static bool
name_ok(const char *s, size_t max)
{
    if (s == NULL)
        return false;
    size_t n = strnlen(s, max + 1);
    return n >= 1 && n <= max && utf8_valid((const unsigned char *)s, n);
}

static bool
path_ok(const char *p)
{
    if (!name_ok(p, INDEX_PATH_MAX))
        return false;
    size_t n = strlen(p);
    if (p[0] == '.' || p[n - 1] == '.' || strstr(p, "..") != NULL)
        return false;
    return true;
}

/* ---- msgpack value helpers --------------------------------------------- */

/* Positions *r (a copy of the document's reader, at the map) on the value
 * at `path`; false when any segment is missing or not inside a map. The
 * first matching key of a map wins (a map with duplicate keys is legal
 * msgpack; choosing one is what keeps derivation deterministic). */
static bool
find_path(const troupe_reader *doc, const char *path, troupe_reader *out)
{
    troupe_reader r = *doc;
    const char *seg = path;
    for (;;) {
        const char *dot = strchr(seg, '.');
        size_t slen = dot != NULL ? (size_t)(dot - seg) : strlen(seg);
        uint32_t n;
        if (troupe_read_peek(&r) != TROUPE_MP_MAP ||
            troupe_read_map(&r, &n) != TROUPE_OK)
            return false;
        bool hit = false;
        for (uint32_t i = 0; i < n; i++) {
            if (troupe_read_peek(&r) == TROUPE_MP_STR) {
                const char *k;
                size_t klen;
                if (troupe_read_str(&r, SIZE_MAX, &k, &klen) != TROUPE_OK)
                    return false;
                if (klen == slen && memcmp(k, seg, slen) == 0) {
                    hit = true;
                    break;
                }
            } else if (troupe_read_skip(&r) != TROUPE_OK) {
                return false;
            }
            if (troupe_read_skip(&r) != TROUPE_OK)
                return false;
        }
        if (!hit)
            return false;
        if (dot == NULL) {
            *out = r;
            return true;
        }
        seg = dot + 1;
    }
}

static int
put_int(troupe_reader *r, troupe_key_writer *w)
{
    troupe_err e;
    if (troupe_read_peek(r) == TROUPE_MP_UINT) {
        uint64_t u;
        if ((e = troupe_read_uint(r, &u)) != TROUPE_OK)
            return -(int)e;
        /* int64 sorts below uint64 in the codec, so values past INT64_MAX
         * as uint64 keep numeric order. */
        e = u <= (uint64_t)INT64_MAX ? troupe_key_put_int64(w, (int64_t)u)
                                     : troupe_key_put_uint64(w, u);
    } else {
        int64_t i;
        if ((e = troupe_read_int(r, &i)) != TROUPE_OK)
            return -(int)e;
        e = troupe_key_put_int64(w, i);
    }
    return e == TROUPE_OK ? 1 : -(int)e;
}

/* The string element of s under the CASEFOLD collation. */
static troupe_err
put_folded(troupe_key_writer *w, const char *s, size_t n)
{
    unsigned char small[256];
    size_t cap = troupe__index_casefold_max(n);
    unsigned char *b = cap <= sizeof(small) ? small : troupe_malloc(cap);
    if (b == NULL)
        return TROUPE_ENOMEM;
    size_t fl = troupe__index_casefold((const unsigned char *)s, n, b);
    troupe_err e = troupe_key_put_string(w, (const char *)b, fl);
    if (b != small)
        troupe_free(b);
    return e;
}

int
troupe__index_put_value(troupe_reader *r, troupe_field_type t,
                        troupe_key_writer *w)
{
    troupe_mp_type mt = troupe_read_peek(r);
    troupe_err e = TROUPE_OK;
    switch (t) {
    case TROUPE_FIELD_STRING_CASEFOLD:
    case TROUPE_FIELD_STRING:
        if (mt == TROUPE_MP_STR) {
            const char *s;
            size_t n;
            if ((e = troupe_read_str(r, SIZE_MAX, &s, &n)) != TROUPE_OK)
                return -(int)e;
            if (n == 0)
                return 0;
            e = t == TROUPE_FIELD_STRING ? troupe_key_put_string(w, s, n)
                                         : put_folded(w, s, n);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    case TROUPE_FIELD_BYTES:
        if (mt == TROUPE_MP_BIN) {
            const void *b;
            size_t n;
            if ((e = troupe_read_bin(r, SIZE_MAX, &b, &n)) != TROUPE_OK)
                return -(int)e;
            if (n == 0)
                return 0;
            e = troupe_key_put_bytes(w, b, n);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    case TROUPE_FIELD_INT:
    case TROUPE_FIELD_TIMESTAMP:
        if (mt == TROUPE_MP_UINT || mt == TROUPE_MP_INT)
            return put_int(r, w);
        break;
    case TROUPE_FIELD_FLOAT:
        if (mt == TROUPE_MP_FLOAT) {
            double d;
            if ((e = troupe_read_double(r, &d)) != TROUPE_OK)
                return -(int)e;
            e = troupe_key_put_double(w, d);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    case TROUPE_FIELD_BOOL:
        if (mt == TROUPE_MP_BOOL) {
            bool b;
            if ((e = troupe_read_bool(r, &b)) != TROUPE_OK)
                return -(int)e;
            e = troupe_key_put_bool(w, b);
            return e == TROUPE_OK ? 1 : -(int)e;
        }
        break;
    }
    e = troupe_read_skip(r);
    return e == TROUPE_OK ? 0 : -(int)e;
}

int
troupe__index_put_query_value(troupe_reader *r, troupe_field_type t,
                              troupe_key_writer *w)
{
    if (troupe_read_peek(r) != TROUPE_MP_MAP)
        return troupe__index_put_value(r, t, w);
    uint32_t n = 0;
    const char *k = NULL;
    size_t kl = 0;
    troupe_err e = troupe_read_map(r, &n);
    if (e == TROUPE_OK && n != 1)
        return 0; /* only one map entry is a value */
    if (e == TROUPE_OK && troupe_read_peek(r) != TROUPE_MP_STR)
        return 0;
    if (e == TROUPE_OK)
        e = troupe_read_str(r, SIZE_MAX, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_key_begin_tuple(w);
    if (e == TROUPE_OK)
        e = troupe_key_put_string(w, k, kl);
    if (e != TROUPE_OK)
        return -(int)e;
    int rc = troupe__index_put_value(r, t, w);
    if (rc != 1)
        return rc;
    e = troupe_key_end_tuple(w);
    return e == TROUPE_OK ? 1 : -(int)e;
}

int
troupe__index_put_any(troupe_reader *r, troupe_key_writer *w)
{
    troupe_err e;
    switch (troupe_read_peek(r)) {
    case TROUPE_MP_NIL:
        troupe_read_nil(r);
        e = troupe_key_put_null(w);
        return e == TROUPE_OK ? 1 : -(int)e;
    case TROUPE_MP_BOOL:
        return troupe__index_put_value(r, TROUPE_FIELD_BOOL, w);
    case TROUPE_MP_UINT:
    case TROUPE_MP_INT:
        return put_int(r, w);
    case TROUPE_MP_FLOAT:
        return troupe__index_put_value(r, TROUPE_FIELD_FLOAT, w);
    case TROUPE_MP_STR: {
        const char *s;
        size_t n;
        if ((e = troupe_read_str(r, SIZE_MAX, &s, &n)) != TROUPE_OK)
            return -(int)e;
        e = troupe_key_put_string(w, s, n);
        return e == TROUPE_OK ? 1 : -(int)e;
    }
    case TROUPE_MP_BIN: {
        const void *b;
        size_t n;
        if ((e = troupe_read_bin(r, SIZE_MAX, &b, &n)) != TROUPE_OK)
            return -(int)e;
        e = troupe_key_put_bytes(w, b, n);
        return e == TROUPE_OK ? 1 : -(int)e;
    }
    default:
        return 0;
    }
}

/* Kind of a scalar for condition equality: ints of either sign are one
 * kind, float32/64 another (int 1 never equals float 1.0). */
static bool
scalar_equal(troupe_reader *a, troupe_reader *b)
{
    troupe_mp_type ta = troupe_read_peek(a), tb = troupe_read_peek(b);
    bool ia = ta == TROUPE_MP_UINT || ta == TROUPE_MP_INT;
    bool ib = tb == TROUPE_MP_UINT || tb == TROUPE_MP_INT;
    if (ia && ib) {
        if (ta != tb)
            return false; /* negative vs non-negative */
        if (ta == TROUPE_MP_UINT) {
            uint64_t x, y;
            return troupe_read_uint(a, &x) == TROUPE_OK &&
                   troupe_read_uint(b, &y) == TROUPE_OK && x == y;
        }
        int64_t x, y;
        return troupe_read_int(a, &x) == TROUPE_OK &&
               troupe_read_int(b, &y) == TROUPE_OK && x == y;
    }
    if (ta != tb)
        return false;
    switch (ta) {
    case TROUPE_MP_FLOAT: {
        double x, y;
        return troupe_read_double(a, &x) == TROUPE_OK &&
               troupe_read_double(b, &y) == TROUPE_OK && x == y;
    }
    case TROUPE_MP_BOOL: {
        bool x, y;
        return troupe_read_bool(a, &x) == TROUPE_OK &&
               troupe_read_bool(b, &y) == TROUPE_OK && x == y;
    }
    case TROUPE_MP_STR: {
        const char *x, *y;
        size_t nx, ny;
        return troupe_read_str(a, SIZE_MAX, &x, &nx) == TROUPE_OK &&
               troupe_read_str(b, SIZE_MAX, &y, &ny) == TROUPE_OK && nx == ny &&
               memcmp(x, y, nx) == 0;
    }
    case TROUPE_MP_BIN: {
        const void *x, *y;
        size_t nx, ny;
        return troupe_read_bin(a, SIZE_MAX, &x, &nx) == TROUPE_OK &&
               troupe_read_bin(b, SIZE_MAX, &y, &ny) == TROUPE_OK && nx == ny &&
               memcmp(x, y, nx) == 0;
    }
    default:
        return false;
    }
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

/* ---- defs -------------------------------------------------------------- */

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
    if (s == NULL || !name_ok(s->name, INDEX_NAME_MAX))
        return TROUPE_EINVAL;
    if (s->fn_name != NULL) {
        if (s->fields != NULL || s->n_fields != 0 || s->unique ||
            !name_ok(s->fn_name, INDEX_NAME_MAX))
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

/* ---- catalog form ------------------------------------------------------ */

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

/* ---- function registry -------------------------------------------------- */

typedef struct fn_slot {
    char *name;
    troupe_index_fn fn;
    void *ctx;
} fn_slot;

struct troupe_index_fns {
    fn_slot *v;
    size_t n, cap;
};

troupe_err
troupe_index_fns_create(troupe_index_fns **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = troupe_calloc(1, sizeof(**out));
    return *out != NULL ? TROUPE_OK : TROUPE_ENOMEM;
}

void
troupe_index_fns_destroy(troupe_index_fns *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        troupe_free(r->v[i].name);
    troupe_free(r->v);
    troupe_free(r);
}

static const fn_slot *
fns_find(const troupe_index_fns *r, const char *name)
{
    for (size_t i = 0; r != NULL && i < r->n; i++) {
        if (strcmp(r->v[i].name, name) == 0)
            return &r->v[i];
    }
    return NULL;
}

bool
troupe_index_fn_registered(const troupe_index_fns *r, const char *name)
{
    return name != NULL && fns_find(r, name) != NULL;
}

troupe_err
troupe_index_register_fn(troupe_index_fns *r, const char *name,
                         troupe_index_fn fn, void *fn_ctx)
{
    if (r == NULL || fn == NULL || !name_ok(name, INDEX_NAME_MAX))
        return TROUPE_EINVAL;
    if (fns_find(r, name) != NULL)
        return TROUPE_EEXIST;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        fn_slot *v = troupe_realloc(r->v, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        r->v = v;
        r->cap = cap;
    }
    char *n = troupe_strdup(name);
    if (n == NULL)
        return TROUPE_ENOMEM;
    r->v[r->n++] = (fn_slot){.name = n, .fn = fn, .ctx = fn_ctx};
    return TROUPE_OK;
}

/* ---- entries ------------------------------------------------------------ */

void
troupe_index_entries_init(troupe_index_entries *e)
{
    if (e != NULL)
        memset(e, 0, sizeof(*e));
}

static void
entries_truncate(troupe_index_entries *e, size_t n)
{
    while (e->n > n) {
        e->n--;
        troupe_free(e->v[e->n].key);
        troupe_free(e->v[e->n].val);
    }
}

void
troupe_index_entries_fini(troupe_index_entries *e)
{
    if (e == NULL)
        return;
    entries_truncate(e, 0);
    troupe_free(e->v);
    memset(e, 0, sizeof(*e));
}

/* Appends key = values ‖ pk_enc (copied) and an optional value (copied);
 * the first cmp_len bytes of values are what a unique index compares. */
static troupe_err
entries_push(troupe_index_entries *e, const void *values, size_t values_len,
             size_t cmp_len, const void *pk_enc, size_t pk_enc_len,
             const void *val, size_t val_len)
{
    size_t klen = values_len + pk_enc_len;
    if (klen > TROUPE_KEY_MAX)
        return TROUPE_ETOOBIG;
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        troupe_index_entry *v = troupe_realloc(e->v, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    unsigned char *k = troupe_malloc(klen);
    unsigned char *vv = NULL;
    if (k == NULL)
        return TROUPE_ENOMEM;
    if (val != NULL) {
        if ((vv = troupe_malloc(val_len > 0 ? val_len : 1)) == NULL) {
            troupe_free(k);
            return TROUPE_ENOMEM;
        }
        memcpy(vv, val, val_len);
    }
    memcpy(k, values, values_len);
    memcpy(k + values_len, pk_enc, pk_enc_len);
    e->v[e->n++] = (troupe_index_entry){.key = k,
                                        .key_len = klen,
                                        .values_len = cmp_len,
                                        .val = vv,
                                        .val_len = vv ? val_len : 0};
    return TROUPE_OK;
}

/* Sort key: the entry key, then emission order, so that the first of
 * several entries with one key (a function emitting it twice) is kept. */
typedef struct sort_item {
    troupe_index_entry e;
    size_t order;
} sort_item;

static int
sort_cmp(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int c = troupe_key_cmp(a->e.key, a->e.key_len, b->e.key, b->e.key_len);
    if (c != 0)
        return c;
    return a->order < b->order ? -1 : a->order > b->order;
}

static troupe_err
sort_dedup(troupe_index_entries *e, size_t from)
{
    size_t n = e->n - from;
    if (n < 2)
        return TROUPE_OK;
    sort_item *s = troupe_malloc(n * sizeof(*s));
    if (s == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < n; i++)
        s[i] = (sort_item){.e = e->v[from + i], .order = i};
    qsort(s, n, sizeof(*s), sort_cmp);
    size_t out = from;
    for (size_t i = 0; i < n; i++) {
        if (out > from &&
            troupe_key_cmp(e->v[out - 1].key, e->v[out - 1].key_len, s[i].e.key,
                           s[i].e.key_len) == 0) {
            troupe_free(s[i].e.key);
            troupe_free(s[i].e.val);
            continue;
        }
        e->v[out++] = s[i].e;
    }
    e->n = out;
    troupe_free(s);
    return TROUPE_OK;
}

/* ---- derivation --------------------------------------------------------- */

/*
 * Path rules (Tito's). A field's path walks the document from the root:
 * a map is looked up by the segment (the first matching string key), an
 * array on the way applies the rest of the path to each element (arrays
 * of arrays too), anything else ends the walk (missing). What the path
 * reaches is the field's value: a scalar gives one element (sparse rules:
 * only a non-empty value of the declared type), an array gives one
 * element per leaf element however deeply nested, and a map gives one
 * element per entry with a string key whose value qualifies, the element
 * being the nested tuple (key, value) so that the entry's key is part of
 * the indexed value (a map inside such an entry is another type). The
 * walk is bounded by the document (each value is visited at most once per
 * field) and its depth by the reader's nesting limit.
 */

/* Encoded key elements of one field: one per qualifying value, with the
 * original string of a CASEFOLD field beside each (its tiebreak). The
 * common field, one short value, lives in the inline buffers: a derive
 * costs no allocation per field then (writes derive on the table actor's
 * thread, so this is every indexed write's path). */
#define ELEMS_INL_BYTES 64
#define ELEMS_INL_N 4
typedef struct elems {
    unsigned char *bytes; /* element i is bytes[off[i], off[i + 1]) */
    size_t len, cap;
    size_t *off;
    unsigned char *tb; /* CASEFOLD only: tiebreak i is tb[toff[i], ..) */
    size_t tblen, tbcap;
    size_t *toff; /* CASEFOLD only */
    size_t n, ncap;
    unsigned char bytes_inl[ELEMS_INL_BYTES];
    size_t off_inl[ELEMS_INL_N + 1];
} elems;

/* Room for `need` bytes at *p (cap *cap), which may be the inline buffer
 * `inl` (never freed or realloc'ed). */
static troupe_err
grow(unsigned char **p, size_t *cap, size_t need, unsigned char *inl)
{
    if (need <= *cap)
        return TROUPE_OK;
    size_t c = *cap ? *cap * 2 : 256;
    while (c < need)
        c *= 2;
    bool in = inl != NULL && *p == inl;
    unsigned char *q = in ? troupe_malloc(c) : troupe_realloc(*p, c);
    if (q == NULL)
        return TROUPE_ENOMEM;
    if (in)
        memcpy(q, inl, *cap);
    *p = q;
    *cap = c;
    return TROUPE_OK;
}

static void
elems_init(elems *el)
{
    el->bytes = el->bytes_inl;
    el->cap = ELEMS_INL_BYTES;
    el->off = el->off_inl;
    el->ncap = ELEMS_INL_N + 1;
}

/* Appends one element `v` and its tiebreak `t` (NULL: none). */
static troupe_err
elems_push(elems *el, const uint8_t *v, size_t vlen, const uint8_t *t,
           size_t tlen)
{
    if (el->n == TROUPE_INDEX_ROW_KEYS_MAX)
        return TROUPE_ETOOBIG;
    troupe_err e = grow(&el->bytes, &el->cap, el->len + vlen, el->bytes_inl);
    if (e == TROUPE_OK && t != NULL)
        e = grow(&el->tb, &el->tbcap, el->tblen + tlen, NULL);
    if (e == TROUPE_OK && el->n + 2 > el->ncap) {
        size_t nc = el->ncap * 2;
        size_t *o = el->off == el->off_inl
                        ? troupe_malloc(nc * sizeof(*o))
                        : troupe_realloc(el->off, nc * sizeof(*o));
        if (o == NULL)
            return TROUPE_ENOMEM;
        if (el->off == el->off_inl)
            memcpy(o, el->off_inl, sizeof(el->off_inl));
        el->off = o;
        el->ncap = nc;
        if (el->toff != NULL) {
            size_t *to = troupe_realloc(el->toff, nc * sizeof(*to));
            if (to == NULL)
                return TROUPE_ENOMEM;
            el->toff = to;
        }
    }
    if (e == TROUPE_OK && t != NULL && el->toff == NULL &&
        (el->toff = troupe_calloc(el->ncap, sizeof(*el->toff))) == NULL)
        e = TROUPE_ENOMEM;
    if (e != TROUPE_OK)
        return e;
    if (el->n == 0)
        el->off[0] = 0;
    memcpy(el->bytes + el->len, v, vlen);
    el->len += vlen;
    if (t != NULL) {
        memcpy(el->tb + el->tblen, t, tlen);
        el->tblen += tlen;
    }
    el->n++;
    el->off[el->n] = el->len;
    if (el->toff != NULL)
        el->toff[el->n] = el->tblen;
    return TROUPE_OK;
}

static void
elems_fini(elems *el)
{
    if (el->bytes != el->bytes_inl)
        troupe_free(el->bytes);
    if (el->off != el->off_inl)
        troupe_free(el->off);
    troupe_free(el->tb);
    troupe_free(el->toff);
}

typedef struct walk {
    const index_field *f;
    elems *el;
    troupe_key_writer w;  /* scratch: one element */
    troupe_key_writer tw; /* scratch: its tiebreak */
} walk;

/* One scalar at r (consumed) under map key mk (NULL: none). */
static troupe_err
walk_scalar(walk *wk, troupe_reader *r, const char *mk, size_t mkl)
{
    troupe_key_writer *w = &wk->w;
    troupe_key_writer_reset(w);
    troupe_err e = TROUPE_OK;
    if (mk != NULL) {
        e = troupe_key_begin_tuple(w);
        if (e == TROUPE_OK)
            e = troupe_key_put_string(w, mk, mkl);
        if (e != TROUPE_OK)
            return e;
    }
    bool fold = wk->f->type == TROUPE_FIELD_STRING_CASEFOLD;
    const char *orig = NULL;
    size_t olen = 0;
    int rc = 0;
    if (fold && troupe_read_peek(r) == TROUPE_MP_STR) {
        if ((e = troupe_read_str(r, SIZE_MAX, &orig, &olen)) != TROUPE_OK)
            return e;
        if (olen > 0)
            rc = (e = put_folded(w, orig, olen)) == TROUPE_OK ? 1 : -(int)e;
    } else {
        rc = troupe__index_put_value(r, wk->f->type, w);
    }
    if (rc <= 0)
        return rc < 0 ? (troupe_err)-rc : TROUPE_OK;
    if (mk != NULL && (e = troupe_key_end_tuple(w)) != TROUPE_OK)
        return e;
    const uint8_t *k, *t = NULL;
    size_t kl, tl = 0;
    if ((e = troupe_key_writer_finish(w, &k, &kl)) != TROUPE_OK)
        return e;
    if (fold) { /* the original string: the tiebreak */
        troupe_key_writer_reset(&wk->tw);
        troupe_key_put_string(&wk->tw, orig, olen);
        if ((e = troupe_key_writer_finish(&wk->tw, &t, &tl)) != TROUPE_OK)
            return e;
    }
    return elems_push(wk->el, k, kl, t, tl);
}

/* The field's value at r (consumed): scalar, array (flattened) or map
 * (one element per entry); mk is the map key it is under (NULL: none). */
static troupe_err
walk_leaf(walk *wk, troupe_reader *r, const char *mk, size_t mkl)
{
    troupe_mp_type t = troupe_read_peek(r);
    uint32_t n = 0;
    troupe_err e = TROUPE_OK;
    if (t == TROUPE_MP_ARRAY) {
        if ((e = troupe_read_array(r, &n)) != TROUPE_OK)
            return e;
        for (uint32_t i = 0; i < n && e == TROUPE_OK; i++)
            e = walk_leaf(wk, r, mk, mkl);
        return e;
    }
    if (t == TROUPE_MP_MAP && mk == NULL) {
        if ((e = troupe_read_map(r, &n)) != TROUPE_OK)
            return e;
        for (uint32_t i = 0; i < n && e == TROUPE_OK; i++) {
            if (troupe_read_peek(r) != TROUPE_MP_STR) {
                e = troupe_read_skip(r);
                if (e == TROUPE_OK)
                    e = troupe_read_skip(r);
                continue;
            }
            const char *k;
            size_t kl;
            e = troupe_read_str(r, SIZE_MAX, &k, &kl);
            if (e == TROUPE_OK)
                e = walk_leaf(wk, r, k, kl);
        }
        return e;
    }
    if (t == TROUPE_MP_MAP)
        return troupe_read_skip(r); /* a map in a map entry: no element */
    return walk_scalar(wk, r, mk, mkl);
}

/* The path from `seg` on, applied to the value at r. `consume`: leave r
 * past that value (an array's elements are walked with one reader);
 * otherwise a map lookup stops at its match, as reading on would cost
 * every write a walk of the rest of the document. */
static troupe_err
walk_path(walk *wk, troupe_reader *r, const char *seg, bool consume)
{
    if (seg == NULL)
        return walk_leaf(wk, r, NULL, 0); /* always consumes */
    troupe_mp_type t = troupe_read_peek(r);
    uint32_t n = 0;
    troupe_err e = TROUPE_OK;
    if (t == TROUPE_MP_ARRAY) {
        if ((e = troupe_read_array(r, &n)) != TROUPE_OK)
            return e;
        for (uint32_t i = 0; i < n && e == TROUPE_OK; i++)
            e = walk_path(wk, r, seg, true);
        return e;
    }
    if (t != TROUPE_MP_MAP)
        return consume ? troupe_read_skip(r) : TROUPE_OK; /* missing */
    const char *dot = strchr(seg, '.');
    size_t slen = dot != NULL ? (size_t)(dot - seg) : strlen(seg);
    if ((e = troupe_read_map(r, &n)) != TROUPE_OK)
        return e;
    bool hit = false;
    for (uint32_t i = 0; i < n && e == TROUPE_OK; i++) {
        bool match = false;
        if (!hit && troupe_read_peek(r) == TROUPE_MP_STR) {
            const char *k;
            size_t kl;
            e = troupe_read_str(r, SIZE_MAX, &k, &kl);
            match = e == TROUPE_OK && kl == slen && memcmp(k, seg, slen) == 0;
        } else {
            e = troupe_read_skip(r);
        }
        if (e != TROUPE_OK)
            break;
        if (match) { /* the first matching key wins */
            hit = true;
            e = walk_path(wk, r, dot != NULL ? dot + 1 : NULL, consume);
            if (!consume)
                break;
        } else {
            e = troupe_read_skip(r);
        }
    }
    return e;
}

/* The elements of field f; wk's scratch writers serve every field. */
static troupe_err
elems_collect(const troupe_reader *doc, const index_field *f, elems *el,
              walk *wk)
{
    wk->f = f;
    wk->el = el;
    troupe_reader r = *doc;
    el->n = el->len = el->tblen = 0;
    return walk_path(wk, &r, f->path, false);
}

static bool
cond_holds(const troupe_index_def *d, const troupe_reader *doc)
{
    troupe_reader r;
    bool found = d->op != TROUPE_COND_NONE && find_path(doc, d->cond_path, &r);
    switch (d->op) {
    case TROUPE_COND_NONE:
        return true;
    case TROUPE_COND_EXISTS:
        return found && troupe_read_peek(&r) != TROUPE_MP_NIL;
    case TROUPE_COND_TRUE: {
        bool b = false;
        return found && troupe_read_peek(&r) == TROUPE_MP_BOOL &&
               troupe_read_bool(&r, &b) == TROUPE_OK && b;
    }
    case TROUPE_COND_EQ:
    case TROUPE_COND_NE: {
        bool eq = false;
        if (found) {
            troupe_reader v;
            if (troupe_reader_init(&v, d->cond_val, d->cond_val_len) ==
                TROUPE_OK)
                eq = scalar_equal(&r, &v);
        }
        return d->op == TROUPE_COND_EQ ? eq : !eq;
    }
    }
    return false;
}

/*
 * The keys are the cartesian product of the fields' elements (the last
 * field fastest), each key the elements in field order, then the original
 * strings of the CASEFOLD fields (the tiebreaks, in field order: after
 * every value, so that leading values stay a tuple prefix of the key and
 * a unique index compares the folded values alone), then bytes(pk).
 */
static troupe_err
derive_declared(const troupe_index_def *d, const troupe_reader *doc,
                const uint8_t *pk_enc, size_t pk_enc_len,
                troupe_index_entries *out)
{
    elems *el = troupe_calloc(d->n_fields, sizeof(*el));
    troupe_err e = TROUPE_OK;
    if (el == NULL)
        return TROUPE_ENOMEM;
    walk wk;
    troupe_key_writer_init(&wk.w);
    troupe_key_writer_init(&wk.tw);
    for (size_t i = 0; i < d->n_fields; i++)
        elems_init(&el[i]);
    size_t total = 1;
    for (size_t i = 0; i < d->n_fields && e == TROUPE_OK && total > 0; i++) {
        e = elems_collect(doc, &d->fields[i], &el[i], &wk);
        total *= el[i].n;
        if (total > TROUPE_INDEX_ROW_KEYS_MAX)
            e = TROUPE_ETOOBIG;
    }
    size_t idx[INDEX_FIELDS_MAX] = {0};
    size_t cap = 0;
    for (size_t i = 0; i < d->n_fields && e == TROUPE_OK; i++) {
        size_t widest = 0;
        for (size_t j = 0; j < el[i].n; j++) {
            size_t l = el[i].off[j + 1] - el[i].off[j];
            if (d->fields[i].type == TROUPE_FIELD_STRING_CASEFOLD)
                l += el[i].toff[j + 1] - el[i].toff[j];
            widest = l > widest ? l : widest;
        }
        cap += widest;
    }
    unsigned char *key = NULL;
    if (e == TROUPE_OK && total > 0 && (key = troupe_malloc(cap + 1)) == NULL)
        e = TROUPE_ENOMEM;
    for (size_t k = 0; e == TROUPE_OK && k < total; k++) {
        /* Complete encoded elements concatenate into a tuple encoding. */
        size_t len = 0;
        for (size_t i = 0; i < d->n_fields; i++) {
            size_t a = el[i].off[idx[i]], b = el[i].off[idx[i] + 1];
            memcpy(key + len, el[i].bytes + a, b - a);
            len += b - a;
        }
        size_t values = len;
        for (size_t i = 0; i < d->n_fields; i++) {
            if (d->fields[i].type != TROUPE_FIELD_STRING_CASEFOLD)
                continue;
            size_t a = el[i].toff[idx[i]], b = el[i].toff[idx[i] + 1];
            memcpy(key + len, el[i].tb + a, b - a);
            len += b - a;
        }
        e = entries_push(out, key, len, values, pk_enc, pk_enc_len, NULL, 0);
        /* odometer, last field fastest */
        for (size_t i = d->n_fields; i-- > 0;) {
            if (++idx[i] < el[i].n)
                break;
            idx[i] = 0;
        }
    }
    troupe_free(key);
    for (size_t i = 0; i < d->n_fields; i++)
        elems_fini(&el[i]);
    troupe_free(el);
    troupe_key_writer_fini(&wk.w);
    troupe_key_writer_fini(&wk.tw);
    return e;
}

typedef struct emit_ctx {
    troupe_index_entries *out;
    size_t first;
    const uint8_t *pk_enc;
    size_t pk_enc_len;
    troupe_err err; /* first failure, sticky: the function may ignore it */
} emit_ctx;

static troupe_err
emit_one(void *arg, const void *values, size_t values_len, const void *val,
         size_t val_len)
{
    emit_ctx *c = arg;
    troupe_err e = c->err;
    if (e != TROUPE_OK)
        return e;
    if (values == NULL || values_len == 0 ||
        troupe_key_validate(values, values_len) != TROUPE_OK)
        e = TROUPE_EINVAL;
    else if (val == NULL && val_len != 0)
        e = TROUPE_EINVAL;
    if (e == TROUPE_OK && val != NULL) {
        troupe_reader r;
        if (troupe_reader_init(&r, val, val_len) != TROUPE_OK)
            e = TROUPE_EINVAL;
    }
    if (e == TROUPE_OK && c->out->n - c->first >= TROUPE_INDEX_ROW_KEYS_MAX)
        e = TROUPE_ETOOBIG;
    if (e == TROUPE_OK)
        e = entries_push(c->out, values, values_len, values_len, c->pk_enc,
                         c->pk_enc_len, val, val_len);
    c->err = e;
    return e;
}

troupe_err
troupe_index_derive(const troupe_index_def *d, const troupe_index_fns *fns,
                    const void *doc, size_t doc_len, const void *pk,
                    size_t pk_len, troupe_index_entries *out)
{
    if (d == NULL || out == NULL || (doc == NULL && doc_len > 0) ||
        pk == NULL || pk_len == 0 || pk_len > TROUPE_KEY_MAX)
        return TROUPE_EINVAL;
    troupe_reader r;
    troupe_err e = troupe_reader_init(&r, doc, doc_len);
    if (e == TROUPE_EINVAL)
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK)
        return e;
    if (troupe_read_peek(&r) != TROUPE_MP_MAP)
        return TROUPE_EPROTO;
    const fn_slot *fs = NULL;
    if (d->fn_name != NULL && (fs = fns_find(fns, d->fn_name)) == NULL)
        return TROUPE_ENOENT;
    if (!cond_holds(d, &r))
        return TROUPE_OK;
    troupe_key_writer pw;
    troupe_key_writer_init(&pw);
    const uint8_t *pk_enc;
    size_t pk_enc_len;
    troupe_key_put_bytes(&pw, pk, pk_len);
    e = troupe_key_writer_finish(&pw, &pk_enc, &pk_enc_len);
    size_t first = out->n;
    if (e == TROUPE_OK && fs != NULL) {
        emit_ctx c = {.out = out,
                      .first = first,
                      .pk_enc = pk_enc,
                      .pk_enc_len = pk_enc_len};
        e = fs->fn(fs->ctx, doc, doc_len, pk, pk_len, emit_one, &c);
        if (e == TROUPE_OK)
            e = c.err;
    } else if (e == TROUPE_OK) {
        e = derive_declared(d, &r, pk_enc, pk_enc_len, out);
    }
    if (e == TROUPE_OK)
        e = sort_dedup(out, first);
    if (e != TROUPE_OK)
        entries_truncate(out, first);
    troupe_key_writer_fini(&pw);
    return e;
}

/* ---- keys ---------------------------------------------------------------- */

troupe_err
troupe_index_key_split(const void *key, size_t key_len, size_t *values_len,
                       bool *pk_escaped)
{
    if (key == NULL || key_len == 0 || values_len == NULL)
        return TROUPE_EINVAL;
    troupe_key_reader r;
    troupe_key_reader_init(&r, key, key_len);
    troupe_key_item it;
    troupe_err e;
    unsigned depth = 0;
    size_t top = 0, last_len = 0;
    size_t last_zeros = 0;
    bool last_bytes = false;
    while ((e = troupe_key_read(&r, &it)) == TROUPE_OK ||
           (e == TROUPE_ENOENT && depth > 0)) {
        if (e == TROUPE_ENOENT) {
            depth--;
            continue;
        }
        if (depth == 0) {
            top++;
            last_bytes = it.type == TROUPE_KEY_BYTES;
            if (last_bytes) {
                last_len = it.v.s.len;
                last_zeros = 0;
                for (size_t i = 0; i < it.v.s.len; i++)
                    last_zeros += it.v.s.ptr[i] == 0;
            }
        }
        if (it.type == TROUPE_KEY_TUPLE)
            depth++;
    }
    troupe_key_reader_fini(&r);
    if (e != TROUPE_ENOENT || top < 2 || !last_bytes || last_len == 0)
        return TROUPE_EPROTO;
    *values_len = key_len - (last_len + last_zeros + 2);
    if (pk_escaped != NULL)
        *pk_escaped = last_zeros > 0;
    return TROUPE_OK;
}

troupe_err
troupe_index_key_pk(const void *key, size_t key_len, const void **pk,
                    size_t *pk_len)
{
    if (pk == NULL || pk_len == NULL)
        return TROUPE_EINVAL;
    size_t vlen;
    bool esc;
    troupe_err e = troupe_index_key_split(key, key_len, &vlen, &esc);
    if (e != TROUPE_OK)
        return e;
    if (esc)
        return TROUPE_ENOTSUP;
    *pk = (const unsigned char *)key + vlen + 1;
    *pk_len = key_len - vlen - 2;
    return TROUPE_OK;
}

troupe_err
troupe_index_key_pk_copy(const void *key, size_t key_len, void **pk,
                         size_t *pk_len)
{
    if (pk == NULL || pk_len == NULL)
        return TROUPE_EINVAL;
    *pk = NULL;
    *pk_len = 0;
    size_t vlen;
    troupe_err e = troupe_index_key_split(key, key_len, &vlen, NULL);
    if (e != TROUPE_OK)
        return e;
    troupe_key_reader r;
    troupe_key_item it;
    troupe_key_reader_init(&r, (const uint8_t *)key + vlen, key_len - vlen);
    e = troupe_key_read(&r, &it);
    if (e == TROUPE_OK) {
        if ((*pk = troupe_malloc(it.v.s.len)) == NULL)
            e = TROUPE_ENOMEM;
        else {
            memcpy(*pk, it.v.s.ptr, it.v.s.len);
            *pk_len = it.v.s.len;
        }
    }
    troupe_key_reader_fini(&r);
    return e;
}
