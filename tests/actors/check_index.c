/* The index module: specs, catalog form, derivation (sparse rules),
 * keys, queries over RocksDB, verify; and changing a table's indexes
 * online (rebuild, drop, resumed builds) through the catalog. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/index.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/index.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "tsupport.h"

/* ---- a tiny JSON-ish to msgpack converter --------------------------------
 * Grammar: {"k": v, ...} [v, ...] "str" ("\\z" is NUL) 12 -3 1.5 (float64) 1.5f
 * (float32) u18446744073709551615 (uint64) true false null b'bytes'. No
 * escapes. */

typedef struct jbuf {
    unsigned char *p;
    size_t n;
} jbuf;

static void
jv(const char **s, troupe_packer *p);

static void
jws(const char **s)
{
    while (**s == ' ' || **s == ',' || **s == ':' || **s == '\n')
        (*s)++;
}

static size_t
jcount(const char *s, char close)
{
    /* counts top-level elements up to the matching close bracket */
    int depth = 0;
    size_t n = 0;
    bool any = false, in_str = false;
    for (; *s; s++) {
        char c = *s;
        if (in_str) {
            if (c == '"' || c == '\'')
                in_str = false;
            continue;
        }
        if (c == '"' || c == '\'') {
            in_str = true;
            any = true;
        } else if (c == '{' || c == '[') {
            depth++;
            any = true;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                break;
            depth--;
        } else if (c == ',' && depth == 0) {
            n++;
        } else if (c != ' ' && c != '\n' && c != ':') {
            any = true;
        }
    }
    return any ? n + 1 : 0;
}

static void
jv(const char **s, troupe_packer *p)
{
    jws(s);
    const char *c = *s;
    if (*c == '{') {
        (*s)++;
        size_t n = jcount(*s, '}');
        /* pairs: count counts "k: v" as one element per comma */
        troupe_pack_map(p, (uint32_t)n);
        for (size_t i = 0; i < 2 * n; i++)
            jv(s, p);
        jws(s);
        ck_assert_int_eq(**s, '}');
        (*s)++;
    } else if (*c == '[') {
        (*s)++;
        size_t n = jcount(*s, ']');
        troupe_pack_array(p, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            jv(s, p);
        jws(s);
        ck_assert_int_eq(**s, ']');
        (*s)++;
    } else if (*c == '"') {
        /* the one escape: \z is a NUL byte */
        const char *e = strchr(c + 1, '"');
        char tmp[256];
        size_t n = 0;
        for (const char *q = c + 1; q < e; q++) {
            if (q[0] == '\\' && q[1] == 'z') {
                tmp[n++] = '\0';
                q++;
            } else {
                tmp[n++] = *q;
            }
        }
        troupe_pack_str(p, tmp, n);
        *s = e + 1;
    } else if (*c == 'b' && c[1] == '\'') {
        const char *e = strchr(c + 2, '\'');
        troupe_pack_bin(p, c + 2, (size_t)(e - c - 2));
        *s = e + 1;
    } else if (strncmp(c, "true", 4) == 0) {
        troupe_pack_bool(p, true);
        *s += 4;
    } else if (strncmp(c, "false", 5) == 0) {
        troupe_pack_bool(p, false);
        *s += 5;
    } else if (strncmp(c, "null", 4) == 0) {
        troupe_pack_nil(p);
        *s += 4;
    } else if (*c == 'u') {
        char *e;
        troupe_pack_uint(p, strtoull(c + 1, &e, 10));
        *s = e;
    } else {
        char *e;
        size_t span = strspn(c, "-+0123456789.eE");
        if (memchr(c, '.', span) || memchr(c, 'e', span)) {
            double d = strtod(c, &e);
            if (*e == 'f') {
                float f = (float)d;
                uint32_t u;
                memcpy(&u, &f, 4);
                unsigned char raw[5] = {
                    0xca, (unsigned char)(u >> 24), (unsigned char)(u >> 16),
                    (unsigned char)(u >> 8), (unsigned char)u};
                troupe_pack_raw(p, raw, 5);
                e++;
            } else {
                troupe_pack_double(p, d);
            }
        } else {
            troupe_pack_int(p, strtoll(c, &e, 10));
        }
        ck_assert_ptr_ne(e, c);
        *s = e;
    }
}

/* Packs one value; the caller frees j.p with free(). */
static jbuf
J(const char *text)
{
    troupe_packer p;
    troupe_pack_init(&p);
    const char *s = text;
    jv(&s, &p);
    jws(&s);
    ck_assert_msg(*s == '\0', "trailing json: %s", s);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    ck_assert_ok(p.err);
    jbuf b = {malloc(n), n};
    memcpy(b.p, d, n);
    troupe_pack_fini(&p);
    return b;
}

/* Independent encoder for expected keys: a JSON array of values, each
 * mapped naturally (int -> int64, float -> double, ..., an array -> a
 * nested tuple, as a map entry's element is). */
static void
enc_items(troupe_key_writer *w, troupe_reader *r, uint32_t n);

static void
enc_values(troupe_key_writer *w, const char *json_array)
{
    jbuf b = J(json_array);
    troupe_reader r;
    uint32_t n;
    ck_assert_ok(troupe_reader_init(&r, b.p, b.n));
    ck_assert_ok(troupe_read_array(&r, &n));
    enc_items(w, &r, n);
    ck_assert_ok(troupe_read_end(&r));
    free(b.p);
}

static void
enc_items(troupe_key_writer *w, troupe_reader *rr, uint32_t n)
{
    troupe_reader r = *rr;
    for (uint32_t i = 0; i < n; i++) {
        switch (troupe_read_peek(&r)) {
        case TROUPE_MP_ARRAY: {
            uint32_t m;
            troupe_read_array(&r, &m);
            troupe_key_begin_tuple(w);
            enc_items(w, &r, m); /* moves r past the elements */
            troupe_key_end_tuple(w);
            break;
        }
        case TROUPE_MP_STR: {
            const char *s;
            size_t l;
            troupe_read_str(&r, 1 << 20, &s, &l);
            troupe_key_put_string(w, s, l);
            break;
        }
        case TROUPE_MP_BIN: {
            const void *s;
            size_t l;
            troupe_read_bin(&r, 1 << 20, &s, &l);
            troupe_key_put_bytes(w, s, l);
            break;
        }
        case TROUPE_MP_UINT: {
            uint64_t u;
            troupe_read_uint(&r, &u);
            if (u > INT64_MAX)
                troupe_key_put_uint64(w, u);
            else
                troupe_key_put_int64(w, (int64_t)u);
            break;
        }
        case TROUPE_MP_INT: {
            int64_t v;
            troupe_read_int(&r, &v);
            troupe_key_put_int64(w, v);
            break;
        }
        case TROUPE_MP_FLOAT: {
            double d;
            troupe_read_double(&r, &d);
            troupe_key_put_double(w, d);
            break;
        }
        case TROUPE_MP_BOOL: {
            bool v;
            troupe_read_bool(&r, &v);
            troupe_key_put_bool(w, v);
            break;
        }
        default:
            ck_abort_msg("unsupported expected value");
        }
    }
    *rr = r;
}

/* Expected index key: values then bytes(pk). malloc'd. */
static jbuf
ekey(const char *json_values, const char *pk, size_t pk_len)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    enc_values(&w, json_values);
    troupe_key_put_bytes(&w, pk, pk_len);
    const uint8_t *k;
    size_t n;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &n));
    jbuf b = {malloc(n), n};
    memcpy(b.p, k, n);
    troupe_key_writer_fini(&w);
    return b;
}

/* The cursor (troupe/cursor.h) of kind tag and object id at key k, built
 * by hand; frees k. */
static jbuf
xc(uint8_t tag, uint64_t id, jbuf k)
{
    jbuf c = {malloc(k.n + TROUPE_CURSOR_OVERHEAD),
              k.n + TROUPE_CURSOR_OVERHEAD};
    troupe__cursor_put(c.p, tag, id, k.p, k.n);
    free(k.p);
    return c;
}

/* Values-only encoding (what a function index emits). */
static jbuf
evals(const char *json_values)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    enc_values(&w, json_values);
    const uint8_t *k;
    size_t n;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &n));
    jbuf b = {malloc(n), n};
    memcpy(b.p, k, n);
    troupe_key_writer_fini(&w);
    return b;
}

/* ---- spec helpers ---------------------------------------------------- */

typedef struct spec_buf {
    troupe_index_spec spec;
    troupe_index_field f[20];
    char paths[20][64];
    jbuf cv;
} spec_buf;

static troupe_field_type
type_of(const char *t)
{
    static const char *n[] = {"string",    "int",   "float",          "bool",
                              "timestamp", "bytes", "string_casefold"};
    for (int i = 0; i < 7; i++)
        if (strcmp(t, n[i]) == 0)
            return (troupe_field_type)i;
    ck_abort_msg("bad type %s", t);
    return TROUPE_FIELD_STRING;
}

/* fields: "path:type,path:type"; cond: "op path [json]" or NULL */
static void
spec_make(spec_buf *s, const char *fields, const char *cond)
{
    memset(s, 0, sizeof(*s));
    s->spec.name = "ix";
    size_t n = 0;
    const char *p = fields;
    while (p != NULL && *p) {
        const char *colon = strchr(p, ':');
        const char *comma = strchr(p, ',');
        size_t pl = (size_t)(colon - p);
        memcpy(s->paths[n], p, pl);
        s->paths[n][pl] = '\0';
        char t[32] = {0};
        size_t tl = comma ? (size_t)(comma - colon - 1) : strlen(colon + 1);
        memcpy(t, colon + 1, tl);
        s->f[n].path = s->paths[n];
        s->f[n].type = type_of(t);
        n++;
        p = comma ? comma + 1 : NULL;
    }
    s->spec.fields = n ? s->f : NULL;
    s->spec.n_fields = n;
    if (cond != NULL) {
        char op[8] = {0};
        static char cpath[64];
        const char *sp = strchr(cond, ' ');
        memcpy(op, cond, (size_t)(sp - cond));
        const char *sp2 = strchr(sp + 1, ' ');
        size_t pl = sp2 ? (size_t)(sp2 - sp - 1) : strlen(sp + 1);
        memcpy(s->paths[19], sp + 1, pl);
        s->paths[19][pl] = '\0';
        (void)cpath;
        s->spec.cond.path = s->paths[19];
        if (strcmp(op, "exists") == 0)
            s->spec.cond.op = TROUPE_COND_EXISTS;
        else if (strcmp(op, "true") == 0)
            s->spec.cond.op = TROUPE_COND_TRUE;
        else if (strcmp(op, "eq") == 0)
            s->spec.cond.op = TROUPE_COND_EQ;
        else if (strcmp(op, "ne") == 0)
            s->spec.cond.op = TROUPE_COND_NE;
        if (sp2 != NULL) {
            s->cv = J(sp2 + 1);
            s->spec.cond.value = s->cv.p;
            s->spec.cond.value_len = s->cv.n;
        }
    }
}

static void
spec_free(spec_buf *s)
{
    free(s->cv.p);
}

static troupe_index_def *
def_make(const char *fields, const char *cond, uint64_t id)
{
    spec_buf s;
    spec_make(&s, fields, cond);
    troupe_index_def *d = NULL;
    ck_assert_ok(troupe_index_def_create(&s.spec, id, &d));
    spec_free(&s);
    return d;
}

static troupe_index_def *
def_named(const char *fields, const char *name, uint64_t id)
{
    spec_buf s;
    spec_make(&s, fields, NULL);
    s.spec.name = name;
    troupe_index_def *d = NULL;
    ck_assert_ok(troupe_index_def_create(&s.spec, id, &d));
    spec_free(&s);
    return d;
}

/* ---- part 1: defs ---------------------------------------------------- */

START_TEST(test_def_create_valid_specs_ok)
{
    troupe_index_def *d = def_make("email:string", NULL, 7);
    ck_assert_uint_eq(troupe_index_def_id(d), 7);
    ck_assert_str_eq(troupe_index_def_name(d), "ix");
    ck_assert(!troupe_index_def_unique(d));
    ck_assert(troupe_index_def_ready(d));
    ck_assert_uint_eq(troupe_index_def_n_fields(d), 1);
    ck_assert_ptr_null(troupe_index_def_fn_name(d));
    troupe_index_def_set_ready(d, false);
    ck_assert(!troupe_index_def_ready(d));
    troupe_index_def_destroy(d);
    d = def_make("a.b.c:int,x:float,y:bool,t:timestamp,z:bytes,s:string",
                 "eq a.b.c 5", 8);
    ck_assert_uint_eq(troupe_index_def_n_fields(d), 6);
    troupe_index_def_destroy(d);
    troupe_index_def_destroy(NULL);
    ck_assert_uint_eq(troupe_index_def_id(NULL), 0);
    ck_assert_ptr_null(troupe_index_def_name(NULL));
}
END_TEST

static const struct bad_spec {
    const char *fields, *cond;
    const char *name;
    const char *fn;
    bool unique;
    int tweak; /* 1: type 99, 2: op 99, 3: n_fields 17, 4: fields NULL */
} bad_specs[] = {
    {"a:string", NULL, "", NULL, false, 0},
    {"a:string", NULL, NULL, NULL, false, 0},
    {"a:string", NULL, "bad\xff", NULL, false, 0},
    {NULL, NULL, "ix", NULL, false, 0},
    {"a:string", NULL, "ix", "f", false, 0},
    {NULL, NULL, "ix", "f", true, 0},
    {NULL, NULL, "ix", "", false, 0},
    {".a:string", NULL, "ix", NULL, false, 0},
    {"a.:string", NULL, "ix", NULL, false, 0},
    {"a..b:string", NULL, "ix", NULL, false, 0},
    {"a:string", NULL, "ix", NULL, false, 1},
    {"a:string", "exists a", "ix", NULL, false, 2},
    {"a:string", NULL, "ix", NULL, false, 3},
    {"a:string", NULL, "ix", NULL, false, 4},
    {"a:string", "exists .a", "ix", NULL, false, 0},
    {"a:string", "exists a 1", "ix", NULL, false, 0},
    {"a:string", "true a true", "ix", NULL, false, 0},
    {"a:string", "eq a", "ix", NULL, false, 0},
    {"a:string", "eq a 5", "ix", NULL, false, 0},
    {"a:int", "eq a 5.0", "ix", NULL, false, 0},
    {"a:float", "ne a 5", "ix", NULL, false, 0},
    {"a:bytes", "eq a \"x\"", "ix", NULL, false, 0},
    {"a:string", "eq b null", "ix", NULL, false, 0},
    {"a:string", "eq b [1]", "ix", NULL, false, 0},
    {"a:string", "ne b {\"x\": 1}", "ix", NULL, false, 0},
};

START_TEST(test_def_create_bad_spec_einval)
{
    const struct bad_spec *b = &bad_specs[_i];
    spec_buf s;
    spec_make(&s, b->fields, b->cond);
    s.spec.name = b->name;
    s.spec.fn_name = b->fn;
    s.spec.unique = b->unique;
    if (b->tweak == 1)
        s.f[0].type = (troupe_field_type)99;
    if (b->tweak == 2)
        s.spec.cond.op = (troupe_cond_op)99;
    if (b->tweak == 3) {
        for (int i = 0; i < 17; i++)
            s.f[i] = s.f[0];
        s.spec.n_fields = 17;
    }
    if (b->tweak == 4)
        s.spec.fields = NULL;
    troupe_index_def *d = (troupe_index_def *)&s; /* must be NULLed */
    ck_assert_err(troupe_index_def_create(&s.spec, 1, &d), TROUPE_EINVAL);
    ck_assert_ptr_null(d);
    spec_free(&s);
}
END_TEST

START_TEST(test_def_create_null_args_einval)
{
    spec_buf s;
    spec_make(&s, "a:int", NULL);
    troupe_index_def *d = NULL;
    ck_assert_err(troupe_index_def_create(NULL, 1, &d), TROUPE_EINVAL);
    ck_assert_err(troupe_index_def_create(&s.spec, 1, NULL), TROUPE_EINVAL);
    /* a condition path given with op NONE is a mistake, not ignored */
    s.spec.cond.path = "a";
    ck_assert_err(troupe_index_def_create(&s.spec, 1, &d), TROUPE_EINVAL);
    /* a 256-byte name */
    char name[257];
    memset(name, 'n', 256);
    name[256] = '\0';
    s.spec.cond.path = NULL;
    s.spec.name = name;
    ck_assert_err(troupe_index_def_create(&s.spec, 1, &d), TROUPE_EINVAL);
    name[255] = '\0';
    ck_assert_ok(troupe_index_def_create(&s.spec, 1, &d));
    troupe_index_def_destroy(d);
    spec_free(&s);
}
END_TEST

static jbuf
packed(const troupe_index_def *d)
{
    void *p;
    size_t n;
    ck_assert_ok(troupe_index_def_pack(d, &p, &n));
    jbuf b = {malloc(n), n};
    memcpy(b.p, p, n);
    troupe_free(p);
    return b;
}

START_TEST(test_def_pack_unpack_round_trip)
{
    troupe_index_def *ds[4];
    ds[0] = def_make("email:string", NULL, 1);
    ds[1] = def_make("address.city:string,age:int,score:float,ok:bool,"
                     "t:timestamp,raw:bytes",
                     "ne address.city \"Oslo\"", 2);
    ds[2] = def_make("a:int", "exists b.c", 3);
    troupe_index_def_set_ready(ds[2], false);
    spec_buf s;
    spec_make(&s, NULL, "true active");
    s.spec.name = "by_fn";
    s.spec.fn_name = "tags";
    ck_assert_ok(troupe_index_def_create(&s.spec, UINT64_MAX, &ds[3]));
    spec_free(&s);
    for (int i = 0; i < 4; i++) {
        jbuf a = packed(ds[i]);
        troupe_index_def *u = NULL;
        ck_assert_ok(troupe_index_def_unpack(a.p, a.n, &u));
        ck_assert_uint_eq(troupe_index_def_id(u), troupe_index_def_id(ds[i]));
        ck_assert_str_eq(troupe_index_def_name(u),
                         troupe_index_def_name(ds[i]));
        ck_assert_int_eq(troupe_index_def_ready(u),
                         troupe_index_def_ready(ds[i]));
        ck_assert_uint_eq(troupe_index_def_n_fields(u),
                          troupe_index_def_n_fields(ds[i]));
        jbuf b = packed(u);
        ck_assert_uint_eq(a.n, b.n);
        ck_assert_mem_eq(a.p, b.p, a.n);
        free(a.p);
        free(b.p);
        troupe_index_def_destroy(u);
    }
    ck_assert_str_eq(troupe_index_def_fn_name(ds[3]), "tags");
    /* the catalog form is the documented map */
    jbuf a = packed(ds[0]);
    jbuf want =
        J("{\"id\": 1, \"name\": \"ix\", \"unique\": false, "
          "\"state\": \"ready\", \"fields\": [[\"email\", \"string\"]], "
          "\"cond\": null, \"fn\": null}");
    ck_assert_uint_eq(a.n, want.n);
    ck_assert_mem_eq(a.p, want.p, a.n);
    free(a.p);
    free(want.p);
    for (int i = 0; i < 4; i++)
        troupe_index_def_destroy(ds[i]);
}
END_TEST

static const char *bad_catalog[] = {
    "[]",
    "{\"id\": 1}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null}",
    /* extra key */
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null, \"fn\": null, "
    "\"x\": 1}",
    /* duplicate key instead of fn */
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null, \"id\": 2}",
    /* a repeated key whose value the decoder copies (it must free what
     * it copied: run under ASan, a leak fails the test) */
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null, \"name\": \"iy\"}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"fields\": [[\"b\", "
    "\"int\"]], \"fields\": [[\"a\", \"string\"]], \"cond\": null, \"fn\": "
    "null}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"cond\": [\"a\", \"exists\", null], \"cond\": [\"b\", \"exists\", null], "
    "\"fn\": null}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [], \"fn\": \"f\", \"fn\": \"g\"}",
    "{\"id\": -1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null, \"fn\": null}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"done\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null, \"fn\": null}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"text\"]], \"cond\": null, \"fn\": null}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": [\"a\", \"gt\", null], "
    "\"fn\": null}",
    "{\"id\": 1, \"name\": \"ix\", \"unique\": 1, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"string\"]], \"cond\": null, \"fn\": null}",
    /* valid shape, invalid spec: no fields and no fn */
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [], \"cond\": null, \"fn\": null}",
    /* eq value of the wrong kind */
    "{\"id\": 1, \"name\": \"ix\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"int\"]], \"cond\": [\"a\", \"eq\", \"x\"], "
    "\"fn\": null}",
    "{\"id\": 1, \"name\": \"\", \"unique\": false, \"state\": \"ready\", "
    "\"fields\": [[\"a\", \"int\"]], \"cond\": null, \"fn\": null}",
};

START_TEST(test_def_unpack_malformed_eproto)
{
    jbuf b = J(bad_catalog[_i]);
    troupe_index_def *d = NULL;
    ck_assert_err(troupe_index_def_unpack(b.p, b.n, &d), TROUPE_EPROTO);
    ck_assert_ptr_null(d);
    free(b.p);
}
END_TEST

START_TEST(test_def_unpack_truncated_and_flipped_never_crash)
{
    troupe_index_def *d0 =
        def_make("address.city:string,age:int", "eq age 3", 5);
    jbuf a = packed(d0);
    troupe_index_def *d = NULL;
    for (size_t n = 0; n < a.n; n++)
        ck_assert_err(troupe_index_def_unpack(a.p, n, &d), TROUPE_EPROTO);
    ck_assert_err(troupe_index_def_unpack(NULL, 3, &d), TROUPE_EINVAL);
    ck_assert_err(troupe_index_def_unpack(a.p, a.n, NULL), TROUPE_EINVAL);
    /* every single-byte corruption decodes or fails cleanly */
    for (size_t i = 0; i < a.n; i++) {
        for (int x = 1; x < 256; x *= 2) {
            a.p[i] ^= (unsigned char)x;
            troupe_err e = troupe_index_def_unpack(a.p, a.n, &d);
            ck_assert(e == TROUPE_OK || e == TROUPE_EPROTO);
            troupe_index_def_destroy(d);
            d = NULL;
            a.p[i] ^= (unsigned char)x;
        }
    }
    ck_assert_err(troupe_index_def_pack(NULL, (void **)&d, &a.n),
                  TROUPE_EINVAL);
    free(a.p);
    troupe_index_def_destroy(d0);
}
END_TEST

/* The CASEFOLD type has its catalog name and survives a round trip;
 * troupe_index_def_same compares specs, not ids or states. */
START_TEST(test_def_casefold_form_and_same_spec)
{
    troupe_index_def *a = def_make("s:string_casefold,n:int", "eq s \"X\"", 3);
    jbuf p = packed(a);
    jbuf want = J("{\"id\": 3, \"name\": \"ix\", \"unique\": false, "
                  "\"state\": \"ready\", \"fields\": [[\"s\", "
                  "\"string_casefold\"], [\"n\", \"int\"]], \"cond\": "
                  "[\"s\", \"eq\", \"X\"], \"fn\": null}");
    ck_assert_uint_eq(p.n, want.n);
    ck_assert_mem_eq(p.p, want.p, p.n);
    troupe_index_def *u = NULL;
    ck_assert_ok(troupe_index_def_unpack(p.p, p.n, &u));
    ck_assert(troupe_index_def_same(a, u));
    troupe_index_def *b = def_make("s:string_casefold,n:int", "eq s \"X\"", 9);
    troupe_index_def_set_ready(b, false);
    ck_assert(troupe_index_def_same(a, b)); /* id and state aside */
    troupe_index_def *c = def_make("s:string,n:int", "eq s \"X\"", 3);
    ck_assert(!troupe_index_def_same(a, c));
    troupe_index_def *d = def_make("s:string_casefold,n:int", "eq s \"Y\"", 3);
    ck_assert(!troupe_index_def_same(a, d));
    troupe_index_def *e = def_make("s:string_casefold,m:int", "eq s \"X\"", 3);
    ck_assert(!troupe_index_def_same(a, e));
    ck_assert(!troupe_index_def_same(a, NULL));
    troupe_index_def *fs[] = {u, b, c, d, e, a};
    for (size_t i = 0; i < 6; i++)
        troupe_index_def_destroy(fs[i]);
    free(p.p);
    free(want.p);
}
END_TEST

/* ---- function registry ----------------------------------------------- */

static troupe_err
fn_nothing(void *ctx, const void *doc, size_t doc_len, const void *pk,
           size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    return TROUPE_OK;
}

START_TEST(test_register_fn_duplicate_eexist_bad_einval)
{
    troupe_index_fns *r = NULL;
    ck_assert_err(troupe_index_fns_create(NULL), TROUPE_EINVAL);
    ck_assert_ok(troupe_index_fns_create(&r));
    ck_assert_ok(troupe_index_register_fn(r, "f", fn_nothing, NULL));
    ck_assert_err(troupe_index_register_fn(r, "f", fn_nothing, NULL),
                  TROUPE_EEXIST);
    ck_assert_err(troupe_index_register_fn(r, "", fn_nothing, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_register_fn(r, NULL, fn_nothing, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_register_fn(r, "g", NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_index_register_fn(NULL, "g", fn_nothing, NULL),
                  TROUPE_EINVAL);
    for (int i = 0; i < 40; i++) {
        char n[16];
        snprintf(n, sizeof(n), "fn%d", i);
        ck_assert_ok(troupe_index_register_fn(r, n, fn_nothing, NULL));
    }
    ck_assert_err(troupe_index_register_fn(r, "fn39", fn_nothing, NULL),
                  TROUPE_EEXIST);
    troupe_index_fns_destroy(r);
    troupe_index_fns_destroy(NULL);
}
END_TEST

/* ---- derivation: sparse rules, table-driven -------------------------- */

/* expect: JSON list of value tuples ("[[\"a\"], [\"b\"]]"), "" for none */
static const struct derive_case {
    const char *fields, *cond, *doc, *expect;
} derive_cases[] = {
    /* 0: strings */
    {"email:string", NULL, "{\"email\": \"a@x\"}", "[[\"a@x\"]]"},
    {"email:string", NULL, "{}", ""},
    {"email:string", NULL, "{\"email\": null}", ""},
    {"email:string", NULL, "{\"email\": \"\"}", ""},
    {"email:string", NULL, "{\"email\": 5}", ""},
    {"email:string", NULL, "{\"email\": b'a@x'}", ""},
    {"email:string", NULL, "{\"email\": {}}", ""},
    {"email:string", NULL, "{\"email\": []}", ""},
    {"email:string", NULL, "{\"email\": true}", ""},
    /* 9: ints: positive, negative, uint64 past int64; floats rejected */
    {"n:int", NULL, "{\"n\": 5}", "[[5]]"},
    {"n:int", NULL, "{\"n\": -5}", "[[-5]]"},
    {"n:int", NULL, "{\"n\": u18446744073709551615}",
     "[[u18446744073709551615]]"},
    {"n:int", NULL, "{\"n\": 5.0}", ""},
    {"n:int", NULL, "{\"n\": \"5\"}", ""},
    {"n:int", NULL, "{\"n\": 0}", "[[0]]"},
    /* 15: floats: float32 and float64 accepted, ints rejected */
    {"f:float", NULL, "{\"f\": 1.5}", "[[1.5]]"},
    {"f:float", NULL, "{\"f\": 1.5f}", "[[1.5]]"},
    {"f:float", NULL, "{\"f\": 1}", ""},
    {"f:float", NULL, "{\"f\": -2.25}", "[[-2.25]]"},
    /* 19: bool, timestamp, bytes */
    {"b:bool", NULL, "{\"b\": false}", "[[false]]"},
    {"b:bool", NULL, "{\"b\": 0}", ""},
    {"t:timestamp", NULL, "{\"t\": 1700000000000}", "[[1700000000000]]"},
    {"t:timestamp", NULL, "{\"t\": 1.7}", ""},
    {"t:timestamp", NULL, "{\"t\": \"2024\"}", ""},
    {"r:bytes", NULL, "{\"r\": b'xy'}", "[[b'xy']]"},
    {"r:bytes", NULL, "{\"r\": b''}", ""},
    {"r:bytes", NULL, "{\"r\": \"xy\"}", ""},
    /* 27: nested paths */
    {"address.city:string", NULL, "{\"address\": {\"city\": \"Oslo\"}}",
     "[[\"Oslo\"]]"},
    {"address.city:string", NULL, "{\"address\": \"Oslo\"}", ""},
    {"address.city:string", NULL, "{\"address\": {}}", ""},
    {"address.city:string", NULL, "{\"address.city\": \"Oslo\"}", ""},
    {"a.b.c:int", NULL, "{\"a\": {\"b\": {\"c\": 3}}, \"z\": 1}", "[[3]]"},
    {"a.b.c:int", NULL, "{\"a\": {\"b\": [{\"c\": 3}]}}", "[[3]]"},
    /* 33: first of duplicate keys wins; non-string keys are skipped */
    {"a:int", NULL, "{1: 9, \"a\": 1, \"a\": 2}", "[[1]]"},
    /* 34: arrays: once per element, empties and wrong types skipped */
    {"tags:string", NULL, "{\"tags\": [\"b\", \"a\", \"\", 3, null, \"b\"]}",
     "[[\"a\"], [\"b\"]]"},
    {"tags:string", NULL, "{\"tags\": [\"\", 3, [\"x\"], {}]}", "[[\"x\"]]"},
    {"tags:string", NULL, "{\"tags\": [[\"x\"]]}", "[[\"x\"]]"},
    {"n:int", NULL, "{\"n\": [3, -1, 2.5]}", "[[-1], [3]]"},
    /* 38: composites */
    {"a:string,b:int", NULL, "{\"a\": \"x\", \"b\": 1}", "[[\"x\", 1]]"},
    {"a:string,b:int", NULL, "{\"a\": \"x\"}", ""},
    {"a:string,b:int", NULL, "{\"a\": \"x\", \"b\": null}", ""},
    {"a:string,b:int", NULL, "{\"a\": \"\", \"b\": 1}", ""},
    {"a:string,b:int", NULL, "{\"a\": \"x\", \"b\": \"1\"}", ""},
    /* 43: cartesian product */
    {"a:string,b:int", NULL, "{\"a\": [\"x\", \"y\"], \"b\": [1, 2]}",
     "[[\"x\", 1], [\"x\", 2], [\"y\", 1], [\"y\", 2]]"},
    {"a:string,b:int", NULL, "{\"a\": [\"x\", \"y\"], \"b\": 7}",
     "[[\"x\", 7], [\"y\", 7]]"},
    {"a:string,b:int", NULL, "{\"a\": [\"x\", \"y\"], \"b\": []}", ""},
    /* 46: conditions */
    {"a:string", "exists s", "{\"a\": \"x\", \"s\": 0}", "[[\"x\"]]"},
    {"a:string", "exists s", "{\"a\": \"x\", \"s\": null}", ""},
    {"a:string", "exists s", "{\"a\": \"x\"}", ""},
    {"a:string", "true active", "{\"a\": \"x\", \"active\": true}",
     "[[\"x\"]]"},
    {"a:string", "true active", "{\"a\": \"x\", \"active\": false}", ""},
    {"a:string", "true active", "{\"a\": \"x\", \"active\": 1}", ""},
    {"a:string", "eq st \"paid\"", "{\"a\": \"x\", \"st\": \"paid\"}",
     "[[\"x\"]]"},
    {"a:string", "eq st \"paid\"", "{\"a\": \"x\", \"st\": \"new\"}", ""},
    {"a:string", "eq n 5", "{\"a\": \"x\", \"n\": 5}", "[[\"x\"]]"},
    {"a:string", "eq n 5", "{\"a\": \"x\", \"n\": 5.0}", ""},
    {"a:string", "eq n -5", "{\"a\": \"x\", \"n\": -5}", "[[\"x\"]]"},
    {"a:string", "eq n 1.5", "{\"a\": \"x\", \"n\": 1.5f}", "[[\"x\"]]"},
    {"a:string", "ne st \"gone\"", "{\"a\": \"x\"}", "[[\"x\"]]"},
    {"a:string", "ne st \"gone\"", "{\"a\": \"x\", \"st\": \"gone\"}", ""},
    {"a:string", "ne st \"gone\"", "{\"a\": \"x\", \"st\": \"here\"}",
     "[[\"x\"]]"},
    {"a:string", "eq p.q true", "{\"a\": \"x\", \"p\": {\"q\": true}}",
     "[[\"x\"]]"},
    /* 62: a true condition does not rescue a sparse field */
    {"a:string", "true on", "{\"a\": \"\", \"on\": true}", ""},
    {"a:string", "eq b b'k'", "{\"a\": \"x\", \"b\": b'k'}", "[[\"x\"]]"},
    /* 64: arrays anywhere on the path (Tito's rules), also nested */
    {"a.b.c:int", NULL,
     "{\"a\": {\"b\": [{\"c\": 3}, {\"c\": 1}, {\"d\": 2}, 5, [{\"c\": 4}]]}}",
     "[[1], [3], [4]]"},
    {"a.b:int", NULL, "{\"a\": [{\"b\": 2}, [{\"b\": 1}], {\"b\": [7, [8]]}]}",
     "[[1], [2], [7], [8]]"},
    {"a.b:int", NULL, "{\"a\": [[], {}, 5, {\"b\": null}]}", ""},
    /* 67: nested arrays at the leaf: one entry per leaf element */
    {"tags:string", NULL,
     "{\"tags\": [[\"x\", [\"y\", [[\"w\"]]]], \"z\", [[]]]}",
     "[[\"w\"], [\"x\"], [\"y\"], [\"z\"]]"},
    /* 68: a map field: one entry per entry, (key, value) the value */
    {"names:string", NULL,
     "{\"names\": {\"fr\": \"Salut\", \"en\": \"Hi\", \"de\": \"\", \"x\": 5, "
     "7: \"no\"}}",
     "[[[\"en\", \"Hi\"]], [[\"fr\", \"Salut\"]]]"},
    {"names:string", NULL,
     "{\"names\": {\"en\": [\"b\", [\"a\"]], \"e\": {\"z\": \"q\"}}}",
     "[[[\"en\", \"a\"]], [[\"en\", \"b\"]]]"},
    {"m:int", NULL, "{\"m\": [{\"k\": 1}, {\"k\": 1}, {\"j\": 2}]}",
     "[[[\"j\", 2]], [[\"k\", 1]]]"},
    {"m:int", NULL, "{\"m\": {}}", ""},
    /* 72: composites multiply map entries and arrays; sparse stays */
    {"m:string,n:int", NULL,
     "{\"m\": {\"a\": \"x\", \"b\": \"y\"}, \"n\": [2, 1]}",
     "[[[\"a\", \"x\"], 1], [[\"a\", \"x\"], 2], [[\"b\", \"y\"], 1], "
     "[[\"b\", \"y\"], 2]]"},
    {"m:string,n:int", NULL, "{\"m\": {\"a\": \"x\"}, \"n\": []}", ""},
    /* 74: CASEFOLD: the folded string, then the original as tiebreak */
    {"s:string_casefold", NULL, "{\"s\": \"FooBar\"}",
     "[[\"foobar\", \"FooBar\"]]"},
    {"s:string_casefold", NULL, "{\"s\": [\"a\", \"A\", \"a\"]}",
     "[[\"a\", \"A\"], [\"a\", \"a\"]]"},
    {"s:string_casefold", NULL, "{\"s\": \"\"}", ""},
    {"s:string_casefold", NULL, "{\"s\": 5}", ""},
    {"s:string_casefold,n:int", NULL, "{\"s\": \"Ab\", \"n\": 1}",
     "[[\"ab\", 1, \"Ab\"]]"},
    /* 79: simple folding: Kelvin sign and long s fold to ASCII, final
     * sigma to sigma, capital sharp s to sharp s, dotted I to itself */
    {"s:string_casefold", NULL, "{\"s\": \"\u212A\u017F\"}",
     "[[\"ks\", \"\u212A\u017F\"]]"},
    {"s:string_casefold", NULL, "{\"s\": \"\u03A3\u03B1\u03C2\"}",
     "[[\"\u03C3\u03B1\u03C3\", \"\u03A3\u03B1\u03C2\"]]"},
    {"s:string_casefold", NULL, "{\"s\": \"\u1E9E\"}",
     "[[\"\u00DF\", \"\u1E9E\"]]"},
    {"s:string_casefold", NULL, "{\"s\": \"\u0130\"}",
     "[[\"\u0130\", \"\u0130\"]]"},
    /* 83: invalid UTF-8 is kept as it is; map keys are not folded */
    {"s:string_casefold", NULL, "{\"s\": \"A\xff\"}",
     "[[\"A\xff\", \"A\xff\"]]"},
    {"s:string_casefold", NULL, "{\"s\": {\"K\": \"V\"}}",
     "[[[\"K\", \"v\"], \"V\"]]"},
};

static void
expect_entries(const troupe_index_entries *e, size_t from, const char *expect,
               const char *pk, size_t pk_len)
{
    if (expect[0] == '\0') {
        ck_assert_uint_eq(e->n, from);
        return;
    }
    /* walk the JSON list of tuples */
    jbuf list = J(expect);
    troupe_reader r;
    uint32_t n;
    ck_assert_ok(troupe_reader_init(&r, list.p, list.n));
    ck_assert_ok(troupe_read_array(&r, &n));
    ck_assert_uint_eq(e->n - from, n);
    /* expected keys are listed in value order, which must be key order */
    const char *p = expect + 1;
    for (uint32_t i = 0; i < n; i++) {
        while (*p != '[')
            p++;
        const char *q = p;
        int depth = 0;
        do {
            if (*q == '[')
                depth++;
            if (*q == ']')
                depth--;
            q++;
        } while (depth > 0);
        char one[256];
        memcpy(one, p, (size_t)(q - p));
        one[q - p] = '\0';
        jbuf k = ekey(one, pk, pk_len);
        const troupe_index_entry *got = &e->v[from + i];
        ck_assert_msg(got->key_len == k.n && memcmp(got->key, k.p, k.n) == 0,
                      "entry %u differs from %s", i, one);
        ck_assert_ptr_null(got->val);
        free(k.p);
        p = q;
    }
    free(list.p);
}

START_TEST(test_derive_sparse_rules_table)
{
    const struct derive_case *c = &derive_cases[_i];
    troupe_index_def *d = def_make(c->fields, c->cond, 1);
    jbuf doc = J(c->doc);
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    troupe_err err = troupe_index_derive(d, NULL, doc.p, doc.n, "pk", 2, &e);
    ck_assert_msg(err == TROUPE_OK, "case %d: %s", _i, troupe_err_name(err));
    expect_entries(&e, 0, c->expect, "pk", 2);
    troupe_index_entries_fini(&e);
    free(doc.p);
    troupe_index_def_destroy(d);
}
END_TEST

START_TEST(test_derive_appends_after_existing_entries)
{
    troupe_index_def *d = def_make("t:string", NULL, 1);
    jbuf d1 = J("{\"t\": [\"z\", \"y\"]}");
    jbuf d2 = J("{\"t\": [\"b\", \"a\"]}");
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    ck_assert_ok(troupe_index_derive(d, NULL, d1.p, d1.n, "p1", 2, &e));
    ck_assert_ok(troupe_index_derive(d, NULL, d2.p, d2.n, "p2", 2, &e));
    ck_assert_uint_eq(e.n, 4);
    expect_entries(&e, 2, "[[\"a\"], [\"b\"]]", "p2", 2);
    jbuf k = ekey("[\"y\"]", "p1", 2);
    ck_assert_mem_eq(e.v[0].key, k.p, k.n);
    free(k.p);
    /* a failed derive leaves what was there */
    jbuf bad = J("[1]");
    ck_assert_err(troupe_index_derive(d, NULL, bad.p, bad.n, "p3", 2, &e),
                  TROUPE_EPROTO);
    ck_assert_uint_eq(e.n, 4);
    troupe_index_entries_fini(&e);
    ck_assert_uint_eq(e.n, 0);
    troupe_index_entries_fini(NULL);
    free(d1.p);
    free(d2.p);
    free(bad.p);
    troupe_index_def_destroy(d);
}
END_TEST

START_TEST(test_derive_malformed_doc_eproto)
{
    troupe_index_def *d = def_make("a.b:string", NULL, 1);
    jbuf good = J("{\"a\": {\"b\": \"hello\"}, \"c\": [1, 2, 3]}");
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    /* every truncation */
    for (size_t n = 0; n < good.n; n++) {
        ck_assert_err(troupe_index_derive(d, NULL, good.p, n, "k", 1, &e),
                      TROUPE_EPROTO);
        ck_assert_uint_eq(e.n, 0);
    }
    /* trailing bytes, not a map */
    unsigned char two[64];
    memcpy(two, good.p, good.n);
    two[good.n] = 0xc0;
    ck_assert_err(troupe_index_derive(d, NULL, two, good.n + 1, "k", 1, &e),
                  TROUPE_EPROTO);
    jbuf arr = J("[\"hello\"]");
    ck_assert_err(troupe_index_derive(d, NULL, arr.p, arr.n, "k", 1, &e),
                  TROUPE_EPROTO);
    /* a reserved byte (0xc1) inside */
    unsigned char bad[] = {0x81, 0xa1, 'a', 0xc1};
    ck_assert_err(troupe_index_derive(d, NULL, bad, sizeof(bad), "k", 1, &e),
                  TROUPE_EPROTO);
    /* a map claiming more pairs than bytes */
    unsigned char big[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a'};
    ck_assert_err(troupe_index_derive(d, NULL, big, sizeof(big), "k", 1, &e),
                  TROUPE_EPROTO);
    /* every single-bit flip: OK or EPROTO, never a crash */
    for (size_t i = 0; i < good.n; i++) {
        for (int x = 1; x < 256; x *= 2) {
            good.p[i] ^= (unsigned char)x;
            troupe_err err =
                troupe_index_derive(d, NULL, good.p, good.n, "k", 1, &e);
            ck_assert(err == TROUPE_OK || err == TROUPE_EPROTO);
            good.p[i] ^= (unsigned char)x;
        }
    }
    troupe_index_entries_fini(&e);
    /* bad arguments */
    ck_assert_err(troupe_index_derive(NULL, NULL, good.p, good.n, "k", 1, &e),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_derive(d, NULL, good.p, good.n, "k", 0, &e),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_derive(d, NULL, good.p, good.n, NULL, 1, &e),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_derive(d, NULL, good.p, good.n, "k", 1, NULL),
                  TROUPE_EINVAL);
    free(good.p);
    free(arr.p);
    troupe_index_def_destroy(d);
}
END_TEST

static troupe_index_entries derived;

static troupe_index_entries *
derive_ok(const troupe_index_def *d, const char *doc, const char *pk)
{
    troupe_index_entries_fini(&derived);
    jbuf b = J(doc);
    ck_assert_ok(
        troupe_index_derive(d, NULL, b.p, b.n, pk, strlen(pk), &derived));
    free(b.p);
    return &derived;
}

static int
kcmp(const void *a, size_t an, const void *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c != 0 ? c : (an > bn) - (an < bn);
}

START_TEST(test_derive_key_order_equals_value_order)
{
    static const char *ints[] = {"-9223372036854775807",
                                 "-1000",
                                 "-1",
                                 "0",
                                 "1",
                                 "255",
                                 "65536",
                                 "9223372036854775807",
                                 "u9223372036854775808",
                                 "u18446744073709551615"};
    static const char *floats[] = {"-1e300", "-2.5", "-0.5", "0.0",
                                   "1e-300", "0.5",  "2.5",  "1e300"};
    static const char *strs[] = {"\"\"",   "\"a\"", "\"a b\"",
                                 "\"ab\"", "\"b\"", "\"ba\""};
    struct {
        const char *field;
        const char **v;
        size_t n;
    } sets[] = {
        {"v:int", ints, 10}, {"v:float", floats, 8}, {"v:string", strs + 1, 5}};
    for (size_t s = 0; s < 3; s++) {
        troupe_index_def *d = def_make(sets[s].field, NULL, 1);
        unsigned char prev[64];
        size_t prev_n = 0;
        for (size_t i = 0; i < sets[s].n; i++) {
            char doc[128];
            /* the larger pk first: value order must dominate pk order */
            snprintf(doc, sizeof(doc), "{\"v\": %s}", sets[s].v[i]);
            troupe_index_entries *e = derive_ok(d, doc, i % 2 ? "a" : "z");
            ck_assert_uint_eq(e->n, 1);
            if (i > 0) {
                size_t m = prev_n < e->v[0].key_len ? prev_n : e->v[0].key_len;
                int c = memcmp(prev, e->v[0].key, m);
                ck_assert_msg(c < 0 || (c == 0 && prev_n < e->v[0].key_len),
                              "%s !< %s", sets[s].v[i - 1], sets[s].v[i]);
            }
            memcpy(prev, e->v[0].key, e->v[0].key_len);
            prev_n = e->v[0].key_len;
        }
        troupe_index_def_destroy(d);
    }
    troupe_index_entries_fini(&derived);
}
END_TEST

START_TEST(test_derive_equal_values_sort_by_pk_and_prefix_holds)
{
    troupe_index_def *d = def_make("a:string,b:int", NULL, 1);
    troupe_index_entries *e = derive_ok(d, "{\"a\": \"x\", \"b\": 1}", "p1");
    jbuf k1 = {malloc(e->v[0].key_len), e->v[0].key_len};
    memcpy(k1.p, e->v[0].key, k1.n);
    e = derive_ok(d, "{\"a\": \"x\", \"b\": 1}", "p2");
    ck_assert_int_lt(memcmp(k1.p, e->v[0].key, k1.n), 0);
    /* the encoding of ("x") is a prefix of every ("x", ...) key */
    jbuf pre = evals("[\"x\"]");
    ck_assert_mem_eq(e->v[0].key, pre.p, pre.n);
    size_t vlen;
    ck_assert_ok(
        troupe_index_key_split(e->v[0].key, e->v[0].key_len, &vlen, NULL));
    jbuf full = evals("[\"x\", 1]");
    ck_assert_uint_eq(vlen, full.n);
    free(k1.p);
    free(pre.p);
    free(full.p);
    troupe_index_def_destroy(d);
    troupe_index_entries_fini(&derived);
}
END_TEST

START_TEST(test_derive_cartesian_over_cap_etoobig)
{
    troupe_index_def *d = def_make("a:int,b:int", NULL, 1);
    /* 70 x 70 = 4900 keys > TROUPE_INDEX_ROW_KEYS_MAX */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    for (int f = 0; f < 2; f++) {
        troupe_pack_cstr(&p, f ? "b" : "a");
        troupe_pack_array(&p, 70);
        for (int i = 0; i < 70; i++)
            troupe_pack_int(&p, i);
    }
    size_t n;
    const void *doc = troupe_pack_data(&p, &n);
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    ck_assert_err(troupe_index_derive(d, NULL, doc, n, "k", 1, &e),
                  TROUPE_ETOOBIG);
    ck_assert_uint_eq(e.n, 0);
    troupe_pack_fini(&p);
    /* 60 x 60 = 3600 fits */
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    for (int f = 0; f < 2; f++) {
        troupe_pack_cstr(&p, f ? "b" : "a");
        troupe_pack_array(&p, 60);
        for (int i = 0; i < 60; i++)
            troupe_pack_int(&p, i);
    }
    doc = troupe_pack_data(&p, &n);
    ck_assert_ok(troupe_index_derive(d, NULL, doc, n, "k", 1, &e));
    ck_assert_uint_eq(e.n, 3600);
    for (size_t i = 1; i < e.n; i++)
        ck_assert_int_lt(kcmp(e.v[i - 1].key, e.v[i - 1].key_len, e.v[i].key,
                              e.v[i].key_len),
                         0);
    troupe_pack_fini(&p);
    troupe_index_entries_fini(&e);
    troupe_index_def_destroy(d);
}
END_TEST

START_TEST(test_derive_key_over_key_max_etoobig)
{
    troupe_index_def *d = def_make("a:string", NULL, 1);
    size_t big = TROUPE_KEY_MAX;
    char *s = malloc(big);
    memset(s, 'q', big);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "a");
    troupe_pack_str(&p, s, big);
    size_t n;
    const void *doc = troupe_pack_data(&p, &n);
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    ck_assert_err(troupe_index_derive(d, NULL, doc, n, "k", 1, &e),
                  TROUPE_ETOOBIG);
    ck_assert_uint_eq(e.n, 0);
    troupe_pack_fini(&p);
    free(s);
    troupe_index_def_destroy(d);
}
END_TEST

/* ---- function indexes ------------------------------------------------ */

/* Emits one entry per element of the doc's "tags" array, each with the
 * value {"n": index}; "dup" emits "a" twice with different values; "bad"
 * emits malformed values. */
static troupe_err
fn_tags(void *ctx, const void *doc, size_t doc_len, const void *pk,
        size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    int *calls = ctx;
    (*calls)++;
    troupe_reader r;
    uint32_t n;
    troupe_reader_init(&r, doc, doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        troupe_read_str(&r, 64, &k, &kl);
        if (kl == 4 && memcmp(k, "tags", 4) == 0) {
            uint32_t m;
            troupe_read_array(&r, &m);
            for (uint32_t j = 0; j < m; j++) {
                const char *t;
                size_t tl;
                troupe_read_str(&r, 64, &t, &tl);
                troupe_key_writer w;
                troupe_key_writer_init(&w);
                troupe_key_put_string(&w, t, tl);
                const uint8_t *v;
                size_t vl;
                troupe_key_writer_finish(&w, &v, &vl);
                unsigned char val[] = {0x81, 0xa1, 'n', (unsigned char)j};
                troupe_err e = emit(emit_ctx, v, vl, val, sizeof(val));
                troupe_key_writer_fini(&w);
                if (e != TROUPE_OK)
                    return e;
            }
        } else if (kl == 3 && memcmp(k, "bad", 3) == 0) {
            int64_t how;
            troupe_read_int(&r, &how);
            unsigned char junk[] = {0xc1};
            troupe_err e;
            if (how == 1)
                e = emit(emit_ctx, junk, 1, NULL, 0); /* bad tuple */
            else if (how == 2)
                e = emit(emit_ctx, "\x10", 1, NULL, 0); /* truncated */
            else if (how == 3)
                e = emit(emit_ctx, "\x01", 1, junk, 1); /* bad value */
            else if (how == 4)
                e = emit(emit_ctx, "\x01", 1, NULL, 3);
            else
                e = emit(emit_ctx, NULL, 0, NULL, 0);
            (void)e; /* ignored on purpose: derive must still fail */
        } else if (kl == 4 && memcmp(k, "fail", 4) == 0) {
            troupe_read_skip(&r);
            return TROUPE_EFAILED;
        } else {
            troupe_read_skip(&r);
        }
    }
    return TROUPE_OK;
}

static troupe_index_def *
fn_def(const char *fn)
{
    troupe_index_spec s = {.name = "byfn", .fn_name = fn};
    troupe_index_def *d = NULL;
    ck_assert_ok(troupe_index_def_create(&s, 9, &d));
    return d;
}

START_TEST(test_derive_function_index_emits)
{
    int calls = 0;
    troupe_index_fns *fns;
    ck_assert_ok(troupe_index_fns_create(&fns));
    ck_assert_ok(troupe_index_register_fn(fns, "tags", fn_tags, &calls));
    troupe_index_def *d = fn_def("tags");
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    /* zero emits */
    jbuf doc = J("{\"x\": 1}");
    ck_assert_ok(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e));
    ck_assert_uint_eq(e.n, 0);
    free(doc.p);
    /* one */
    doc = J("{\"tags\": [\"cat\"]}");
    ck_assert_ok(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e));
    ck_assert_uint_eq(e.n, 1);
    jbuf k = ekey("[\"cat\"]", "k", 1);
    ck_assert_mem_eq(e.v[0].key, k.p, k.n);
    free(k.p);
    ck_assert_uint_eq(e.v[0].val_len, 4);
    ck_assert_int_eq(e.v[0].val[3], 0);
    troupe_index_entries_fini(&e);
    free(doc.p);
    /* many, sorted, duplicates removed keeping the first emitted value */
    doc = J("{\"tags\": [\"tail\", \"cat\", \"black\", \"cat\"]}");
    ck_assert_ok(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e));
    ck_assert_uint_eq(e.n, 3);
    const char *want[] = {"[\"black\"]", "[\"cat\"]", "[\"tail\"]"};
    int first[] = {2, 1, 0};
    for (int i = 0; i < 3; i++) {
        k = ekey(want[i], "k", 1);
        ck_assert_uint_eq(e.v[i].key_len, k.n);
        ck_assert_mem_eq(e.v[i].key, k.p, k.n);
        ck_assert_int_eq(e.v[i].val[3], first[i]);
        free(k.p);
    }
    troupe_index_entries_fini(&e);
    free(doc.p);
    ck_assert_int_eq(calls, 3);
    /* the function's own error, with nothing appended */
    doc = J("{\"tags\": [\"a\"], \"fail\": 1}");
    ck_assert_err(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e),
                  TROUPE_EFAILED);
    ck_assert_uint_eq(e.n, 0);
    free(doc.p);
    /* malformed emits fail the derive even when the function ignores it */
    for (int how = 1; how <= 5; how++) {
        char text[64];
        snprintf(text, sizeof(text), "{\"tags\": [\"a\"], \"bad\": %d}", how);
        doc = J(text);
        ck_assert_err(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e),
                      TROUPE_EINVAL);
        ck_assert_uint_eq(e.n, 0);
        free(doc.p);
    }
    /* an unregistered function */
    troupe_index_def *d2 = fn_def("nope");
    doc = J("{\"tags\": [\"a\"]}");
    ck_assert_err(troupe_index_derive(d2, fns, doc.p, doc.n, "k", 1, &e),
                  TROUPE_ENOENT);
    ck_assert_err(troupe_index_derive(d2, NULL, doc.p, doc.n, "k", 1, &e),
                  TROUPE_ENOENT);
    free(doc.p);
    troupe_index_def_destroy(d2);
    troupe_index_entries_fini(&e);
    troupe_index_def_destroy(d);
    troupe_index_fns_destroy(fns);
}
END_TEST

START_TEST(test_derive_function_index_condition_applies)
{
    int calls = 0;
    troupe_index_fns *fns;
    ck_assert_ok(troupe_index_fns_create(&fns));
    ck_assert_ok(troupe_index_register_fn(fns, "tags", fn_tags, &calls));
    spec_buf s;
    spec_make(&s, NULL, "true on");
    s.spec.name = "f";
    s.spec.fn_name = "tags";
    troupe_index_def *d;
    ck_assert_ok(troupe_index_def_create(&s.spec, 1, &d));
    spec_free(&s);
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    jbuf doc = J("{\"tags\": [\"a\"], \"on\": false}");
    ck_assert_ok(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e));
    ck_assert_uint_eq(e.n, 0);
    ck_assert_int_eq(calls, 0);
    free(doc.p);
    doc = J("{\"tags\": [\"a\"], \"on\": true}");
    ck_assert_ok(troupe_index_derive(d, fns, doc.p, doc.n, "k", 1, &e));
    ck_assert_uint_eq(e.n, 1);
    free(doc.p);
    troupe_index_entries_fini(&e);
    troupe_index_def_destroy(d);
    troupe_index_fns_destroy(fns);
}
END_TEST

/* ---- keys ---------------------------------------------------------------- */

START_TEST(test_key_pk_plain_escaped_and_malformed)
{
    jbuf k = ekey("[\"x\", 3]", "row-1", 5);
    const void *pk;
    size_t pk_len;
    ck_assert_ok(troupe_index_key_pk(k.p, k.n, &pk, &pk_len));
    ck_assert_uint_eq(pk_len, 5);
    ck_assert_mem_eq(pk, "row-1", 5);
    ck_assert_ptr_eq(pk, k.p + k.n - 6);
    free(k.p);
    /* a tuple-codec primary key holds 0x00 bytes: escaped in the key */
    const char tpk[] = {0x20, 'u', 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 1};
    k = ekey("[\"x\"]", tpk, sizeof(tpk));
    ck_assert_err(troupe_index_key_pk(k.p, k.n, &pk, &pk_len), TROUPE_ENOTSUP);
    void *copy;
    ck_assert_ok(troupe_index_key_pk_copy(k.p, k.n, &copy, &pk_len));
    ck_assert_uint_eq(pk_len, sizeof(tpk));
    ck_assert_mem_eq(copy, tpk, sizeof(tpk));
    troupe_free(copy);
    bool esc = false;
    size_t vlen;
    ck_assert_ok(troupe_index_key_split(k.p, k.n, &vlen, &esc));
    ck_assert(esc);
    ck_assert_uint_eq(vlen, 3);
    /* a truncation is rejected, or (cut right after an escaped 0x00)
     * reads as a shorter primary key: never as other values */
    for (size_t n = 1; n < k.n; n++) {
        troupe_err e = troupe_index_key_split(k.p, n, &vlen, NULL);
        ck_assert(e == TROUPE_EPROTO || (e == TROUPE_OK && vlen == 3));
    }
    free(k.p);
    /* only a pk, no values */
    k = evals("[b'pk']");
    ck_assert_err(troupe_index_key_pk(k.p, k.n, &pk, &pk_len), TROUPE_EPROTO);
    free(k.p);
    /* last element not bytes */
    k = evals("[\"x\", \"pk\"]");
    ck_assert_err(troupe_index_key_pk(k.p, k.n, &pk, &pk_len), TROUPE_EPROTO);
    ck_assert_err(troupe_index_key_pk_copy(k.p, k.n, &copy, &pk_len),
                  TROUPE_EPROTO);
    free(k.p);
    /* a nested tuple among the values */
    unsigned char nested[] = {0x30, 0x10, 0, 0,    0,    0,   0,
                              0,    0,    1, 0x00, 0x21, 'p', 0x00};
    ck_assert_ok(troupe_index_key_pk(nested, sizeof(nested), &pk, &pk_len));
    ck_assert_uint_eq(pk_len, 1);
    ck_assert_err(troupe_index_key_pk(NULL, 3, &pk, &pk_len), TROUPE_EINVAL);
    ck_assert_err(troupe_index_key_pk(nested, 0, &pk, &pk_len), TROUPE_EINVAL);
    ck_assert_err(troupe_index_key_pk(nested, sizeof(nested), NULL, &pk_len),
                  TROUPE_EINVAL);
    unsigned char junk[] = {0x77, 0x21, 'p', 0x00};
    ck_assert_err(troupe_index_key_pk(junk, sizeof(junk), &pk, &pk_len),
                  TROUPE_EPROTO);
}
END_TEST

/* ---- part 2: queries over RocksDB ------------------------------------ */

typedef struct qfx {
    char *dir;
    troupe_db *db;
    troupe_cf *t, *m;
    troupe_index_def *defs[4];
    troupe_cf *x[4];
    size_t ndefs;
    troupe_index_fns *fns;
} qfx;

static qfx Q;

static troupe_cf *
cf_of(char kind, uint64_t id)
{
    char name[TROUPE__CF_NAME_LEN];
    troupe_cf *cf;
    ck_assert_ok(troupe__cf_name(kind, id, name, sizeof(name)));
    troupe_err e = troupe_db_cf(Q.db, name, &cf);
    if (e == TROUPE_ENOENT)
        ck_assert_ok(troupe_db_cf_create(Q.db, name, &cf));
    else
        ck_assert_ok(e);
    return cf;
}

static troupe_err
fn_score(void *ctx, const void *doc, size_t doc_len, const void *pk,
         size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx);

static void
q_setup(void)
{
    memset(&Q, 0, sizeof(Q));
    Q.dir = ts_tempdir("index");
    ck_assert_ok(troupe_db_open(Q.dir, NULL, &Q.db));
    Q.t = cf_of('t', 1);
    Q.m = cf_of('m', 1);
    ck_assert_ok(troupe_index_fns_create(&Q.fns));
    ck_assert_ok(troupe_index_register_fn(Q.fns, "score", fn_score, NULL));
    Q.defs[0] = def_named("city:string", "city", 10);
    Q.defs[1] = def_named("cust:string,at:int", "cust_at", 11);
    Q.defs[2] = def_named("age:int", "age", 12);
    Q.defs[3] = fn_def("score");
    for (size_t i = 0; i < 4; i++) {
        if (i == 3) {
            troupe_index_def_destroy(Q.defs[3]);
            troupe_index_spec sp = {.name = "score", .fn_name = "score"};
            ck_assert_ok(troupe_index_def_create(&sp, 13, &Q.defs[3]));
        }
        Q.x[i] = cf_of('x', troupe_index_def_id(Q.defs[i]));
    }
    Q.ndefs = 4;
}

static void
q_teardown(void)
{
    for (size_t i = 0; i < Q.ndefs; i++)
        troupe_index_def_destroy(Q.defs[i]);
    troupe_index_fns_destroy(Q.fns);
    ck_assert_ok(troupe_db_close(Q.db));
    ts_rmtree(Q.dir);
    free(Q.dir);
}

/* Emits (score) with value [score, name] when the doc has both. */
static troupe_err
fn_score(void *ctx, const void *doc, size_t doc_len, const void *pk,
         size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    troupe_reader r;
    uint32_t n;
    int64_t score = 0;
    const char *name = NULL;
    size_t nl = 0;
    bool has = false;
    troupe_reader_init(&r, doc, doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        troupe_read_str(&r, 64, &k, &kl);
        if (kl == 5 && memcmp(k, "score", 5) == 0 &&
            troupe_read_peek(&r) != TROUPE_MP_STR)
            has = troupe_read_int(&r, &score) == TROUPE_OK;
        else if (kl == 4 && memcmp(k, "name", 4) == 0)
            troupe_read_str(&r, 64, &name, &nl);
        else
            troupe_read_skip(&r);
    }
    if (!has || name == NULL)
        return TROUPE_OK;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_int64(&w, score);
    const uint8_t *v;
    size_t vl;
    troupe_key_writer_finish(&w, &v, &vl);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_int(&p, score);
    troupe_pack_str(&p, name, nl);
    size_t pl;
    const void *pv = troupe_pack_data(&p, &pl);
    troupe_err e = emit(emit_ctx, v, vl, pv, pl);
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
    return e;
}

/* Writes a row the way the table actor does: row envelope, entries of
 * every index, manifest, in one batch. */
static void
put_row(const char *pk, const char *doc, uint64_t exp)
{
    jbuf d = J(doc);
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, exp);
    troupe_pack_raw(&p, d.p, d.n);
    size_t n;
    const void *row = troupe_pack_data(&p, &n);
    ck_assert_ok(troupe_batch_put(b, Q.t, pk, strlen(pk), row, n));
    troupe_pack_fini(&p);
    troupe_index_entries all[4];
    size_t total = 0;
    for (size_t i = 0; i < Q.ndefs; i++) {
        troupe_index_entries_init(&all[i]);
        ck_assert_ok(troupe_index_derive(Q.defs[i], Q.fns, d.p, d.n, pk,
                                         strlen(pk), &all[i]));
        for (size_t j = 0; j < all[i].n; j++) {
            troupe_index_entry *x = &all[i].v[j];
            ck_assert_ok(troupe_batch_put(b, Q.x[i], x->key, x->key_len,
                                          x->val ? x->val : (void *)"\xc0",
                                          x->val ? x->val_len : 1));
        }
        total += all[i].n;
    }
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_array(&p, (uint32_t)total);
    for (size_t i = 0; i < Q.ndefs; i++) {
        for (size_t j = 0; j < all[i].n; j++) {
            troupe_pack_array(&p, 2);
            troupe_pack_uint(&p, troupe_index_def_id(Q.defs[i]));
            troupe_pack_bin(&p, all[i].v[j].key, all[i].v[j].key_len);
        }
        troupe_index_entries_fini(&all[i]);
    }
    const void *man = troupe_pack_data(&p, &n);
    ck_assert_ok(troupe_batch_put(b, Q.m, pk, strlen(pk), man, n));
    troupe_pack_fini(&p);
    ck_assert_ok(troupe_db_write(Q.db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
    free(d.p);
}

static void
load_people(void)
{
    put_row("p01",
            "{\"city\": \"Oslo\", \"age\": 30, \"cust\": \"c1\", "
            "\"at\": 300, \"score\": 5, \"name\": \"ann\"}",
            0);
    put_row("p02",
            "{\"city\": \"Bergen\", \"age\": -4, \"cust\": \"c2\", "
            "\"at\": 100, \"score\": -2, \"name\": \"bob\"}",
            0);
    put_row("p03",
            "{\"city\": \"Oslo\", \"age\": 45, \"cust\": \"c1\", "
            "\"at\": 100, \"score\": 7, \"name\": \"cid\"}",
            0);
    put_row("p04",
            "{\"city\": \"Oslo\", \"age\": 20, \"cust\": \"c1\", "
            "\"at\": 200}",
            0);
    put_row("p05",
            "{\"city\": \"\", \"age\": \"x\", \"cust\": \"c10\", "
            "\"at\": 50}",
            0);
    put_row("p06", "{\"city\": \"Oslo\\z\", \"age\": 39}", 0);
}

/* The primary keys of a result, joined with spaces. */
static const char *
pks(const troupe_index_result *r)
{
    static char buf[1024];
    buf[0] = '\0';
    for (size_t i = 0; i < r->n; i++) {
        if (i)
            strcat(buf, " ");
        strncat(buf, (const char *)r->hits[i].pk, r->hits[i].pk_len);
    }
    return buf;
}

/* A query as these tests build it: the user's part and what the caller
 * adds (def, table_id, now_ms, snap), made into a run for each call. */
typedef struct iq {
    troupe_index_query u;
    const troupe_index_def *def;
    uint64_t table_id;
    uint64_t now_ms;
    const troupe_snapshot *snap;
} iq;

/* q as the runner takes it (into *r; NULL for NULL). */
static const troupe__index_run *
iq_run(const iq *q, troupe__index_run *r)
{
    if (q == NULL)
        return NULL;
    *r = (troupe__index_run){.q = &q->u,
                             .def = q->def,
                             .table_id = q->table_id,
                             .now_ms = q->now_ms,
                             .snap = q->snap};
    return r;
}

static troupe_err
iq_query(troupe_db *db, const iq *q, troupe_index_result **out)
{
    troupe__index_run r;
    return troupe_index_query_run(db, iq_run(q, &r), out);
}

static troupe_err
iq_count(troupe_db *db, const iq *q, uint64_t *out)
{
    troupe__index_run r;
    return troupe_index_count(db, iq_run(q, &r), out);
}

static troupe_err
iq_and(troupe_db *db, const iq *a, const iq *b, const void *after,
       size_t after_len, size_t limit, troupe_index_result **out)
{
    troupe__index_run ra, rb;
    return troupe_index_query_and(db, iq_run(a, &ra), iq_run(b, &rb), after,
                                  after_len, limit, out);
}

static iq
qmk(size_t def, const char *values, const char *from, const char *to)
{
    static jbuf keep[3];
    for (int i = 0; i < 3; i++) {
        free(keep[i].p);
        keep[i].p = NULL;
    }
    iq q = {.def = Q.defs[def], .table_id = 1, .u.limit = 100};
    if (values) {
        keep[0] = J(values);
        q.u.values = keep[0].p;
        q.u.values_len = keep[0].n;
    }
    if (from) {
        keep[1] = J(from);
        q.u.from = keep[1].p;
        q.u.from_len = keep[1].n;
    }
    if (to) {
        keep[2] = J(to);
        q.u.to = keep[2].p;
        q.u.to_len = keep[2].n;
    }
    return q;
}

static const char *
run(const iq *q)
{
    troupe_index_result *r = NULL;
    ck_assert_ok(iq_query(Q.db, q, &r));
    const char *s = pks(r);
    troupe_index_result_destroy(r);
    return s;
}

START_TEST(test_query_exact_prefix_range_orders)
{
    load_people();
    iq q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    /* exact, pk order; "Oslo\0" is not a tuple-prefix match of "Oslo" */
    ck_assert_str_eq(run(&q), "p01 p03 p04");
    q.u.reverse = true;
    ck_assert_str_eq(run(&q), "p04 p03 p01");
    q = qmk(0, "[\"Bergen\"]", NULL, NULL);
    ck_assert_str_eq(run(&q), "p02");
    q = qmk(0, "[\"Paris\"]", NULL, NULL);
    ck_assert_str_eq(run(&q), "");
    /* leading-field prefix of a composite: ordered by the second field */
    q = qmk(1, "[\"c1\"]", NULL, NULL);
    ck_assert_str_eq(run(&q), "p03 p04 p01");
    q = qmk(1, "[\"c1\", 200]", NULL, NULL);
    ck_assert_str_eq(run(&q), "p04");
    /* "c1" does not match "c10" */
    q = qmk(1, "[\"c10\"]", NULL, NULL);
    ck_assert_str_eq(run(&q), "p05");
    /* range over the first field, negative ints below positive */
    q = qmk(2, NULL, "[-10]", "[31]");
    ck_assert_str_eq(run(&q), "p02 p04 p01");
    q = qmk(2, NULL, "[20]", "[30]");
    ck_assert_str_eq(run(&q), "p04");
    q = qmk(2, NULL, "[31]", NULL);
    ck_assert_str_eq(run(&q), "p06 p03");
    q = qmk(2, NULL, NULL, "[0]");
    ck_assert_str_eq(run(&q), "p02");
    q.u.reverse = true;
    q = qmk(2, NULL, NULL, NULL);
    ck_assert_str_eq(run(&q), "p02 p04 p01 p06 p03");
    /* full-tuple range inside a prefix */
    q = qmk(1, NULL, "[\"c1\", 150]", "[\"c1\", 300]");
    ck_assert_str_eq(run(&q), "p04");
    /* ("c10") sorts between ("c1", ...) and ("c2") */
    q = qmk(1, NULL, "[\"c1\", 150]", "[\"c2\"]");
    ck_assert_str_eq(run(&q), "p04 p01 p05");
}
END_TEST

START_TEST(test_query_rows_and_covering_values)
{
    load_people();
    iq q = qmk(0, "[\"Bergen\"]", NULL, NULL);
    q.u.rows = true;
    troupe_index_result *r;
    ck_assert_ok(iq_query(Q.db, &q, &r));
    ck_assert_uint_eq(r->n, 1);
    jbuf want = J("{\"city\": \"Bergen\", \"age\": -4, \"cust\": \"c2\", "
                  "\"at\": 100, \"score\": -2, \"name\": \"bob\"}");
    ck_assert_uint_eq(r->hits[0].val_len, want.n);
    ck_assert_mem_eq(r->hits[0].val, want.p, want.n);
    free(want.p);
    jbuf k = ekey("[\"Bergen\"]", "p02", 3);
    ck_assert_mem_eq(r->hits[0].key, k.p, k.n);
    k = xc(TROUPE_CURSOR_INDEX, troupe_index_def_id(Q.defs[0]), k);
    ck_assert_uint_eq(r->cursor_len, k.n);
    ck_assert_mem_eq(r->cursor, k.p, k.n);
    free(k.p);
    ck_assert(!r->more);
    troupe_index_result_destroy(r);
    /* covering: the emitted values, in score order */
    q = qmk(3, NULL, NULL, NULL);
    ck_assert_ok(iq_query(Q.db, &q, &r));
    ck_assert_str_eq(pks(r), "p02 p01 p03");
    want = J("[5, \"ann\"]");
    ck_assert_uint_eq(r->hits[1].val_len, want.n);
    ck_assert_mem_eq(r->hits[1].val, want.p, want.n);
    free(want.p);
    troupe_index_result_destroy(r);
    /* a declared index stores nil */
    q = qmk(0, "[\"Bergen\"]", NULL, NULL);
    ck_assert_ok(iq_query(Q.db, &q, &r));
    ck_assert_uint_eq(r->hits[0].val_len, 1);
    ck_assert_int_eq(r->hits[0].val[0], 0xc0);
    troupe_index_result_destroy(r);
    /* function index queried by value (natural mapping) */
    q = qmk(3, "[7]", NULL, NULL);
    ck_assert_str_eq(run(&q), "p03");
    q = qmk(3, NULL, "[-100]", "[6]");
    ck_assert_str_eq(run(&q), "p02 p01");
}
END_TEST

START_TEST(test_query_limit_cursor_pages_both_directions)
{
    for (int i = 0; i < 23; i++) {
        char pk[8], doc[64];
        snprintf(pk, sizeof(pk), "k%02d", i);
        snprintf(doc, sizeof(doc), "{\"city\": \"%s\", \"age\": %d}",
                 i % 3 ? "A" : "B", i % 5);
        put_row(pk, doc, 0);
    }
    for (int rev = 0; rev < 2; rev++) {
        iq q = qmk(2, NULL, "[1]", "[4]");
        q.u.reverse = rev;
        q.u.limit = 4;
        char all[512] = "";
        troupe_index_result *r = NULL;
        uint8_t cur[64];
        size_t cur_len = 0;
        int pages = 0;
        for (;;) {
            q.u.after = cur_len ? cur : NULL;
            q.u.after_len = cur_len;
            ck_assert_ok(iq_query(Q.db, &q, &r));
            ck_assert_uint_le(r->n, 4);
            if (all[0] && r->n)
                strcat(all, " ");
            strcat(all, pks(r));
            pages++;
            bool more = r->more;
            if (r->n) {
                memcpy(cur, r->cursor, r->cursor_len);
                cur_len = r->cursor_len;
            }
            troupe_index_result_destroy(r);
            if (!more)
                break;
        }
        /* ages 1, 2, 3: 14 rows, in (age, pk) order */
        iq whole = qmk(2, NULL, "[1]", "[4]");
        whole.u.reverse = rev;
        ck_assert_str_eq(all, run(&whole));
        ck_assert_int_eq(pages, 4); /* 4 + 4 + 4 + 2 */
        ck_assert_uint_eq(strlen(all), 14 * 4 - 1);
    }
    /* a cursor outside the range */
    iq q = qmk(2, NULL, "[1]", "[4]");
    jbuf k = xc(TROUPE_CURSOR_INDEX, 12, ekey("[4]", "k04", 3));
    q.u.after = k.p;
    q.u.after_len = k.n;
    troupe_index_result *r = (troupe_index_result *)&q;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ERANGE);
    ck_assert_ptr_null(r);
    q.u.reverse = true;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ERANGE);
    free(k.p);
    k = xc(TROUPE_CURSOR_INDEX, 12, ekey("[0]", "k00", 3));
    q.u.after = k.p;
    q.u.after_len = k.n;
    q.u.reverse = false;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ERANGE);
    free(k.p);
    /* an exact cursor continues strictly after itself */
    q = qmk(0, "[\"B\"]", NULL, NULL);
    k = xc(TROUPE_CURSOR_INDEX, 10, ekey("[\"B\"]", "k03", 3));
    q.u.after = k.p;
    q.u.after_len = k.n;
    q.u.limit = 2;
    ck_assert_str_eq(run(&q), "k06 k09");
    q.u.reverse = true;
    ck_assert_str_eq(run(&q), "k00");
    free(k.p);
}
END_TEST

START_TEST(test_query_bad_arguments_clear_errors)
{
    load_people();
    troupe_index_result *r = NULL;
    iq q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    q.u.limit = 0;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_EINVAL);
    q.u.limit = 1;
    ck_assert_err(iq_query(NULL, &q, &r), TROUPE_EINVAL);
    ck_assert_err(iq_query(Q.db, NULL, &r), TROUPE_EINVAL);
    ck_assert_err(iq_query(Q.db, &q, NULL), TROUPE_EINVAL);
    q.def = NULL;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_EINVAL);
    static const struct {
        size_t def;
        const char *values, *from, *to;
        troupe_err want;
    } bad[] = {
        {0, "[5]", NULL, NULL, TROUPE_EINVAL},            /* wrong type */
        {0, "[\"\"]", NULL, NULL, TROUPE_EINVAL},         /* never indexed */
        {0, "[\"a\", \"b\"]", NULL, NULL, TROUPE_EINVAL}, /* too many */
        {0, "[]", NULL, NULL, TROUPE_EINVAL},
        {0, "\"Oslo\"", NULL, NULL, TROUPE_EPROTO}, /* not an array */
        {1, "[\"c1\", 1.5]", NULL, NULL, TROUPE_EINVAL},
        {1, "[\"c1\", 1, 2]", NULL, NULL, TROUPE_EINVAL},
        {2, "[20]", "[1]", NULL, TROUPE_EINVAL},  /* values + range */
        {2, NULL, "[40]", "[20]", TROUPE_EINVAL}, /* from after to */
        {2, NULL, "[20]", "[20]", TROUPE_EINVAL}, /* from == to: empty */
        {2, NULL, "[\"x\"]", NULL, TROUPE_EINVAL},
        {2, NULL, NULL, "{}", TROUPE_EPROTO},
        {3, "[[1]]", NULL, NULL, TROUPE_EINVAL}, /* no nested */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        q = qmk(bad[i].def, bad[i].values, bad[i].from, bad[i].to);
        troupe_err e = iq_query(Q.db, &q, &r);
        ck_assert_msg(e == bad[i].want, "case %zu: %s", i, troupe_err_name(e));
        ck_assert_ptr_null(r);
        uint64_t n = 99;
        ck_assert_err(iq_count(Q.db, &q, &n), bad[i].want);
    }
    /* truncated msgpack */
    q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    q.u.values_len--;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_EPROTO);
    q.u.values = NULL;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_EINVAL);
    /* a building index says so */
    q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    troupe_index_def_set_ready(Q.defs[0], false);
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ESTATE);
    uint64_t n;
    ck_assert_err(iq_count(Q.db, &q, &n), TROUPE_ESTATE);
    troupe_index_def_set_ready(Q.defs[0], true);
    /* an index whose family does not exist */
    troupe_index_def *lost = def_make("city:string", NULL, 999);
    q.def = lost;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ENOENT);
    troupe_index_def_destroy(lost);
    /* rows of a table that does not exist */
    q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    q.u.rows = true;
    q.table_id = 77;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ENOENT);
    ck_assert_err(iq_count(Q.db, &q, NULL), TROUPE_EINVAL);
    char name[TROUPE__CF_NAME_LEN];
    ck_assert_err(troupe__cf_name('z', 1, name, sizeof(name)), TROUPE_EINVAL);
    ck_assert_err(troupe__cf_name('t', 1, name, 4), TROUPE_EINVAL);
    ck_assert_ok(troupe__cf_name('x', UINT64_MAX, name, sizeof(name)));
    ck_assert_str_eq(name, "x.18446744073709551615");
}
END_TEST

START_TEST(test_query_rows_corrupt_or_missing_ecorrupt)
{
    load_people();
    iq q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    q.u.rows = true;
    troupe_index_result *r = NULL;
    static const char *bad_rows[] = {
        NULL,               /* deleted: entry without its row */
        "\x93\x01\x00",     /* truncated envelope */
        "\x93\x02\x00\x80", /* version 2 */
        "\x93\x01\x00\x90", /* doc not a map */
        "\x92\x01\x00",     /* two elements */
        "\xc1",             /* not msgpack */
        "\x93\x01\xff\x80", /* negative expiry */
    };
    static const size_t bad_len[] = {0, 3, 4, 4, 3, 1, 4};
    for (size_t i = 0; i < 7; i++) {
        troupe_batch *b;
        ck_assert_ok(troupe_batch_create(&b));
        if (bad_rows[i] == NULL)
            ck_assert_ok(troupe_batch_delete(b, Q.t, "p03", 3));
        else
            ck_assert_ok(
                troupe_batch_put(b, Q.t, "p03", 3, bad_rows[i], bad_len[i]));
        ck_assert_ok(troupe_db_write(Q.db, b, TROUPE_SYNC_OFF));
        troupe_batch_destroy(b);
        ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ECORRUPT);
        ck_assert_ptr_null(r);
        /* a page that stops before the bad row is fine */
        q.u.limit = 1;
        ck_assert_str_eq(run(&q), "p01");
        q.u.limit = 100;
    }
    /* covering queries do not read rows */
    q.u.rows = false;
    ck_assert_str_eq(run(&q), "p01 p03 p04");
    /* an entry key that is not values-then-pk, and a non-msgpack value */
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    jbuf k = evals("[\"Oslo\", \"zz\"]");
    ck_assert_ok(troupe_batch_put(b, Q.x[0], k.p, k.n, "\xc0", 1));
    ck_assert_ok(troupe_db_write(Q.db, b, TROUPE_SYNC_OFF));
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ECORRUPT);
    troupe_batch_clear(b);
    ck_assert_ok(troupe_batch_delete(b, Q.x[0], k.p, k.n));
    free(k.p);
    k = ekey("[\"Oslo\"]", "p01", 3);
    ck_assert_ok(troupe_batch_put(b, Q.x[0], k.p, k.n, "\xc1", 1));
    ck_assert_ok(troupe_db_write(Q.db, b, TROUPE_SYNC_OFF));
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ECORRUPT);
    free(k.p);
    troupe_batch_destroy(b);
}
END_TEST

START_TEST(test_query_rows_expired_skipped_limit_filled)
{
    put_row("a1", "{\"city\": \"X\"}", 0);
    put_row("a2", "{\"city\": \"X\"}", 1000); /* expired at 2000 */
    put_row("a3", "{\"city\": \"X\"}", 5000); /* live at 2000 */
    put_row("a4", "{\"city\": \"X\"}", 0);
    iq q = qmk(0, "[\"X\"]", NULL, NULL);
    q.u.rows = true;
    q.now_ms = 2000;
    q.u.limit = 2;
    troupe_index_result *r;
    ck_assert_ok(iq_query(Q.db, &q, &r));
    ck_assert_str_eq(pks(r), "a1 a3");
    ck_assert_uint_eq(r->hits[1].expires_at_ms, 5000);
    ck_assert(r->more);
    troupe_index_result_destroy(r);
    q.now_ms = 6000;
    q.u.limit = 10;
    ck_assert_str_eq(run(&q), "a1 a4");
    /* covering queries still list them (the TTL scanner removes them) */
    q.u.rows = false;
    ck_assert_str_eq(run(&q), "a1 a2 a3 a4");
}
END_TEST

START_TEST(test_count_matches_entries)
{
    load_people();
    put_row("p07", "{\"city\": [\"Oslo\", \"Rome\"]}", 0);
    uint64_t n = 0;
    iq q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    ck_assert_ok(iq_count(Q.db, &q, &n));
    ck_assert_uint_eq(n, 4);
    q = qmk(0, NULL, NULL, NULL);
    ck_assert_ok(iq_count(Q.db, &q, &n));
    ck_assert_uint_eq(n, 7); /* 4 Oslo, Bergen, Oslo\0, Rome */
    q = qmk(2, NULL, "[0]", "[40]");
    ck_assert_ok(iq_count(Q.db, &q, &n));
    ck_assert_uint_eq(n, 3);
    q = qmk(1, "[\"zz\"]", NULL, NULL);
    ck_assert_ok(iq_count(Q.db, &q, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_err(iq_count(NULL, &q, &n), TROUPE_EINVAL);
}
END_TEST

START_TEST(test_query_and_intersects_two_indexes)
{
    load_people();
    put_row("p08", "{\"city\": [\"Oslo\", \"Rome\"], \"age\": 30}", 0);
    jbuf oslo = J("[\"Oslo\"]");
    iq a = {.def = Q.defs[0],
            .table_id = 1, /* its cursors name the table */
            .u.values = oslo.p,
            .u.values_len = oslo.n,
            .u.limit = 1};
    iq b = {.def = Q.defs[2], .table_id = 1, .u.limit = 1};
    jbuf from = J("[25]");
    b.u.from = from.p;
    b.u.from_len = from.n;
    troupe_index_result *r;
    ck_assert_ok(iq_and(Q.db, &a, &b, NULL, 0, 10, &r));
    ck_assert_str_eq(pks(r), "p01 p03 p08");
    ck_assert(!r->more);
    ck_assert_ptr_null(r->hits[0].key);
    troupe_index_result_destroy(r);
    /* paging by primary key */
    ck_assert_ok(iq_and(Q.db, &a, &b, NULL, 0, 2, &r));
    ck_assert_str_eq(pks(r), "p01 p03");
    ck_assert(r->more);
    jbuf p03 =
        xc(TROUPE_CURSOR_AND, 1, (jbuf){(unsigned char *)strdup("p03"), 3});
    ck_assert_uint_eq(r->cursor_len, p03.n);
    ck_assert_mem_eq(r->cursor, p03.p, p03.n);
    troupe_index_result_destroy(r);
    ck_assert_ok(iq_and(Q.db, &a, &b, p03.p, p03.n, 2, &r));
    free(p03.p);
    ck_assert_str_eq(pks(r), "p08");
    ck_assert(!r->more);
    troupe_index_result_destroy(r);
    /* a row listed twice on one side (array) appears once */
    iq c = qmk(0, NULL, NULL, NULL);
    ck_assert_ok(iq_and(Q.db, &c, &c, NULL, 0, 100, &r));
    ck_assert_str_eq(pks(r), "p01 p02 p03 p04 p06 p08");
    troupe_index_result_destroy(r);
    ck_assert_err(iq_and(Q.db, &a, &b, NULL, 0, 0, &r), TROUPE_EINVAL);
    ck_assert_err(iq_and(Q.db, &a, NULL, NULL, 0, 1, &r), TROUPE_EINVAL);
    ck_assert_err(iq_and(Q.db, &a, &b, NULL, 3, 1, &r), TROUPE_EINVAL);
    jbuf bad = J("[5]");
    b.u.from = bad.p;
    b.u.from_len = bad.n;
    b.def = Q.defs[0];
    ck_assert_err(iq_and(Q.db, &a, &b, NULL, 0, 1, &r), TROUPE_EINVAL);
    ck_assert_ptr_null(r);
    free(bad.p);
    free(from.p);
    free(oslo.p);
}
END_TEST

/* ---- part 3: verify --------------------------------------------------- */

static const char *kind_names[] = {"",
                                   "MISSING_MANIFEST",
                                   "ORPHAN_MANIFEST",
                                   "BAD_MANIFEST",
                                   "CROSS_RECORD",
                                   "UNKNOWN_INDEX",
                                   "MISSING_ENTRY",
                                   "ORPHAN_ENTRY",
                                   "BAD_ENTRY",
                                   "BAD_ROW",
                                   "STALE_MANIFEST"};

typedef struct vlog {
    char text[4096];
    int n;
} vlog;

static void
on_mismatch(void *ctx, const troupe_index_mismatch *m)
{
    vlog *l = ctx;
    char one[128];
    bool keyed = m->kind >= TROUPE_VERIFY_CROSS_RECORD &&
                 m->kind != TROUPE_VERIFY_BAD_ROW;
    ck_assert(!keyed || (m->key != NULL && m->key_len > 0));
    snprintf(one, sizeof(one), "%s%s %.*s %llu", l->n ? "; " : "",
             kind_names[m->kind], m->pk ? (int)m->pk_len : 1,
             m->pk ? (const char *)m->pk : "-",
             (unsigned long long)m->index_id);
    strcat(l->text, one);
    l->n++;
}

/* Runs verify to the end with `budget` per step; returns the report. */
static const char *
verify_all(size_t budget, bool derive, int *steps)
{
    static vlog l;
    memset(&l, 0, sizeof(l));
    troupe_index_verify_opts o = {.table_id = 1,
                                  .defs =
                                      (const troupe_index_def *const *)Q.defs,
                                  .n_defs = Q.ndefs,
                                  .derive = derive,
                                  .fns = Q.fns,
                                  .budget = budget,
                                  .cb = on_mismatch,
                                  .cb_ctx = &l};
    void *cur = NULL;
    size_t cur_len = 0;
    bool done = false;
    int n = 0;
    while (!done) {
        void *next;
        size_t next_len;
        ck_assert_ok(troupe_index_verify_step(Q.db, &o, cur, cur_len, &next,
                                              &next_len, &done));
        troupe_free(cur);
        cur = next;
        cur_len = next_len;
        ck_assert(done == (next == NULL));
        ck_assert_int_lt(++n, 10000);
    }
    if (steps)
        *steps = n;
    return l.text;
}

static void
raw_put(troupe_cf *cf, const void *k, size_t kn, const void *v, size_t vn)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    if (v != NULL)
        ck_assert_ok(troupe_batch_put(b, cf, k, kn, v, vn));
    else
        ck_assert_ok(troupe_batch_delete(b, cf, k, kn));
    ck_assert_ok(troupe_db_write(Q.db, b, TROUPE_SYNC_OFF));
    troupe_batch_destroy(b);
}

START_TEST(test_query_rows_expiry_past_int64_is_ecorrupt)
{
    /* The envelope's expiry is an int64 (what writes store, and what table
     * reads accept): a row past it is as corrupt to a rows query as to a
     * get of that row. */
    load_people();
    iq q = qmk(0, "[\"Oslo\"]", NULL, NULL);
    q.u.rows = true;
    static const char row[] =
        "\x93\x01\xcf\x80\x00\x00\x00\x00\x00\x00\x00\x80";
    raw_put(Q.t, "p03", 3, row, sizeof(row) - 1);
    troupe_index_result *r = NULL;
    ck_assert_err(iq_query(Q.db, &q, &r), TROUPE_ECORRUPT);
    ck_assert_ptr_null(r);
    q.u.limit = 1; /* a page that stops before the row is fine */
    ck_assert_str_eq(run(&q), "p01");
}
END_TEST

/* Compares the report at budget 1000 and at budget 1 (resumed). */
static void
expect_verify(bool derive, const char *want)
{
    int steps;
    ck_assert_str_eq(verify_all(1000, derive, &steps), want);
    ck_assert_int_eq(steps, 1);
    ck_assert_str_eq(verify_all(1, derive, &steps), want);
    ck_assert_int_gt(steps, 10);
}

START_TEST(test_verify_clean_table_reports_nothing)
{
    load_people();
    expect_verify(false, "");
    expect_verify(true, "");
    int steps;
    verify_all(3, true, &steps);
    /* 6 rows, 6 + 3 + 4 + 3 = 16 entries: 22 records, 3 per step */
    ck_assert_int_ge(steps, 8);
}
END_TEST

START_TEST(test_verify_row_without_manifest)
{
    load_people();
    raw_put(Q.m, "p02", 3, NULL, 0);
    expect_verify(false, "MISSING_MANIFEST p02 0; ORPHAN_ENTRY p02 10; "
                         "ORPHAN_ENTRY p02 11; ORPHAN_ENTRY p02 12; "
                         "ORPHAN_ENTRY p02 13");
}
END_TEST

START_TEST(test_verify_manifest_without_row)
{
    load_people();
    raw_put(Q.t, "p04", 3, NULL, 0);
    expect_verify(true, "ORPHAN_MANIFEST p04 0");
}
END_TEST

START_TEST(test_verify_malformed_manifests)
{
    load_people();
    static const char *bad[] = {
        "\xc1",                                           /* not msgpack */
        "\x92\x02\x90",                                   /* version 2 */
        "\x92\x01\x91\x92\x0a\xc4\x00",                   /* empty key */
        "\x92\x01\x91\x92\x0a\xa1x",                      /* key as str */
        "\x92\x01\x92\x92\x0b\xc4\x01x\x92\x0a\xc4\x01x", /* unsorted */
        "\x92\x01\x92\x92\x0a\xc4\x01x\x92\x0a\xc4\x01x", /* duplicate */
    };
    static const size_t bad_len[] = {1, 3, 7, 7, 13, 13};
    for (size_t i = 0; i < 6; i++) {
        raw_put(Q.m, "p06", 3, bad[i], bad_len[i]);
        expect_verify(false, "BAD_MANIFEST p06 0; ORPHAN_ENTRY p06 10; "
                             "ORPHAN_ENTRY p06 12");
    }
}
END_TEST

/* Rewrites pk's manifest as [1, list] given as raw pairs. */
static void
put_manifest(const char *pk, size_t n, const uint64_t *ids, const jbuf *keys)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_array(&p, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        troupe_pack_array(&p, 2);
        troupe_pack_uint(&p, ids[i]);
        troupe_pack_bin(&p, keys[i].p, keys[i].n);
    }
    size_t len;
    const void *d = troupe_pack_data(&p, &len);
    raw_put(Q.m, pk, strlen(pk), d, len);
    troupe_pack_fini(&p);
}

START_TEST(test_verify_cross_record_unknown_and_missing_entries)
{
    load_people();
    /* p06 = {"city": "Oslo\0", "age": 39}: entries in 10 and 12 */
    jbuf keys[4] = {ekey("[\"Oslo\"]", "p01", 3),    /* another row's */
                    ekey("[\"Oslo\\z\"]", "p06", 3), /* replaced below */
                    ekey("[39]", "p06", 3), ekey("[1]", "p06", 3)};
    free(keys[1].p);
    /* the real key of p06 in index 10 ("Oslo\0" as the doc holds it) */
    troupe_index_entries e;
    troupe_index_entries_init(&e);
    jbuf doc = J("{\"city\": \"Oslo\\z\", \"age\": 39}");
    ck_assert_ok(
        troupe_index_derive(Q.defs[0], NULL, doc.p, doc.n, "p06", 3, &e));
    keys[1] = (jbuf){e.v[0].key, e.v[0].key_len};
    uint64_t ids[4] = {10, 10, 12, 99};
    /* sorted by (id, key): ("Oslo", p01) < ("Oslo\0", p06) */
    put_manifest("p06", 4, ids, keys);
    expect_verify(false, "CROSS_RECORD p06 10; UNKNOWN_INDEX p06 99");
    /* drop p06's age entry: the manifest lists a missing key */
    raw_put(Q.x[2], keys[2].p, keys[2].n, NULL, 0);
    expect_verify(false, "CROSS_RECORD p06 10; MISSING_ENTRY p06 12; "
                         "UNKNOWN_INDEX p06 99");
    free(keys[0].p);
    free(keys[2].p);
    free(keys[3].p);
    free(doc.p);
    troupe_index_entries_fini(&e);
}
END_TEST

START_TEST(test_verify_orphan_and_bad_entries)
{
    load_people();
    jbuf k = ekey("[\"Zz\"]", "p01", 3);
    raw_put(Q.x[0], k.p, k.n, "\xc0", 1);
    free(k.p);
    k = ekey("[\"Zz\"]", "nobody", 6);
    raw_put(Q.x[0], k.p, k.n, "\xc0", 1);
    free(k.p);
    k = evals("[\"Zzz\", \"no pk\"]");
    raw_put(Q.x[0], k.p, k.n, "\xc0", 1);
    free(k.p);
    /* entry order: ("Zz", "nobody") < ("Zz", "p01") < ("Zzz", ...) */
    expect_verify(false, "ORPHAN_ENTRY nobody 10; ORPHAN_ENTRY p01 10; "
                         "BAD_ENTRY - 10");
}
END_TEST

START_TEST(test_verify_derive_finds_stale_manifest_and_bad_row)
{
    load_people();
    /* p04's row changes city without its entries and manifest */
    put_row("tmp", "{}", 0);
    jbuf doc = J("{\"city\": \"Rome\", \"age\": 20, \"cust\": \"c1\", "
                 "\"at\": 200}");
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, 0);
    troupe_pack_raw(&p, doc.p, doc.n);
    size_t n;
    const void *row = troupe_pack_data(&p, &n);
    raw_put(Q.t, "p04", 3, row, n);
    troupe_pack_fini(&p);
    free(doc.p);
    /* without derive nothing is visibly wrong */
    expect_verify(false, "");
    /* ("Oslo", p04) listed but not derived; ("Rome", p04) the reverse */
    expect_verify(true, "STALE_MANIFEST p04 10; STALE_MANIFEST p04 10");
    raw_put(Q.t, "tmp", 3, "\x93\x01\x00\xc1", 4);
    expect_verify(true, "STALE_MANIFEST p04 10; STALE_MANIFEST p04 10; "
                        "BAD_ROW tmp 0");
}
END_TEST

START_TEST(test_verify_bad_arguments_and_cursors)
{
    load_people();
    troupe_index_verify_opts o = {.table_id = 1,
                                  .defs =
                                      (const troupe_index_def *const *)Q.defs,
                                  .n_defs = Q.ndefs,
                                  .budget = 2};
    void *next = NULL;
    size_t nl;
    bool done;
    ck_assert_ok(
        troupe_index_verify_step(Q.db, &o, NULL, 0, &next, &nl, &done));
    ck_assert(!done);
    ck_assert_ptr_nonnull(next);
    /* the cursor belongs to table 1 */
    o.table_id = 2;
    void *n2;
    ck_assert_err(troupe_index_verify_step(Q.db, &o, next, nl, &n2, &nl, &done),
                  TROUPE_EINVAL);
    o.table_id = 1;
    ck_assert_err(
        troupe_index_verify_step(Q.db, &o, "\x21x\x00", 3, &n2, &nl, &done),
        TROUPE_EINVAL);
    ck_assert_err(troupe_index_verify_step(Q.db, &o, next, 0, &n2, &nl, &done),
                  TROUPE_EINVAL);
    o.budget = 0;
    ck_assert_err(troupe_index_verify_step(Q.db, &o, NULL, 0, &n2, &nl, &done),
                  TROUPE_EINVAL);
    o.budget = 1;
    ck_assert_err(troupe_index_verify_step(NULL, &o, NULL, 0, &n2, &nl, &done),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_index_verify_step(Q.db, NULL, NULL, 0, &n2, &nl, &done),
        TROUPE_EINVAL);
    ck_assert_err(troupe_index_verify_step(Q.db, &o, NULL, 0, NULL, &nl, &done),
                  TROUPE_EINVAL);
    o.table_id = 5; /* no such families */
    ck_assert_err(troupe_index_verify_step(Q.db, &o, NULL, 0, &n2, &nl, &done),
                  TROUPE_ENOENT);
    troupe_free(next);
}
END_TEST

/* ---- part 4: the index actor ------------------------------------------ */

typedef struct afx {
    uv_loop_t loop;
    troupe_runtime *rt;
    troupe_addr ix;
    int done, replies;
    troupe_err err;
    troupe_index_result *res;
    uint64_t count;
} afx;

static afx A;

static void
a_setup(void)
{
    q_setup();
    memset(&A, 0, sizeof(A));
    ck_assert_int_eq(uv_loop_init(&A.loop), 0);
    troupe_runtime_opts o = {.loop = &A.loop, .schedulers = 2, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&A.rt, &o));
    troupe_index_actor_opts io = {.db = Q.db,
                                  .table_id = 1,
                                  .defs =
                                      (const troupe_index_def *const *)Q.defs,
                                  .n_defs = Q.ndefs,
                                  .fns = Q.fns};
    ck_assert_ok(troupe_index_spawn(A.rt, &io, NULL, &A.ix));
}

static void
a_on_shutdown(troupe_runtime *rt, void *arg)
{
    A.done = 1;
}

static bool
a_is_done(void *arg)
{
    return A.done;
}

static void
a_teardown(void)
{
    troupe_index_result_destroy(A.res);
    ck_assert_ok(troupe_runtime_shutdown(A.rt, a_on_shutdown, NULL));
    ck_assert(ts_run_until(&A.loop, a_is_done, NULL, 10000));
    troupe_runtime_destroy(A.rt);
    ck_assert_int_eq(ts_loop_close(&A.loop), 0);
    q_teardown();
}

static void
a_on_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    A.replies++;
    A.err = err;
    troupe_index_result_destroy(A.res);
    A.res = NULL;
    if (err != TROUPE_OK || reply == NULL)
        return;
    if (arg != NULL)
        A.err = troupe_index_count_reply(reply, &A.count);
    else
        A.err = troupe_index_query_reply(reply, &A.res);
}

static int a_want;
static bool
a_have(void *arg)
{
    return A.replies >= a_want;
}

static troupe_err
a_ask(troupe_msg *m, bool count)
{
    a_want = A.replies + 1;
    ck_assert_ok(troupe_runtime_ask(A.rt, A.ix, &m, 5000, a_on_reply,
                                    count ? (void *)1 : NULL));
    ck_assert(ts_run_until(&A.loop, a_have, NULL, 10000));
    return A.err;
}

START_TEST(test_actor_query_count_and_pages)
{
    load_people();
    iq q = qmk(1, "[\"c1\"]", NULL, NULL);
    q.u.limit = 2;
    q.u.rows = true;
    troupe_msg *m;
    ck_assert_ok(troupe_index_query_msg("cust_at", &q.u, &m));
    ck_assert_ok(a_ask(m, false));
    ck_assert_str_eq(pks(A.res), "p03 p04");
    ck_assert(A.res->more);
    jbuf want = J("{\"city\": \"Oslo\", \"age\": 20, \"cust\": \"c1\", "
                  "\"at\": 200}");
    ck_assert_uint_eq(A.res->hits[1].val_len, want.n);
    ck_assert_mem_eq(A.res->hits[1].val, want.p, want.n);
    free(want.p);
    /* next page from the decoded cursor */
    uint8_t cur[64];
    memcpy(cur, A.res->cursor, A.res->cursor_len);
    q.u.after = cur;
    q.u.after_len = A.res->cursor_len;
    ck_assert_ok(troupe_index_query_msg("cust_at", &q.u, &m));
    ck_assert_ok(a_ask(m, false));
    ck_assert_str_eq(pks(A.res), "p01");
    ck_assert(!A.res->more);
    /* the index is addressed by name */
    q = qmk(3, NULL, NULL, NULL);
    ck_assert_ok(troupe_index_count_msg("score", &q.u, &m));
    ck_assert_ok(a_ask(m, true));
    ck_assert_uint_eq(A.count, 3);
    q.u.limit = 5;
    ck_assert_ok(troupe_index_query_msg("score", &q.u, &m));
    ck_assert_ok(a_ask(m, false));
    ck_assert_str_eq(pks(A.res), "p02 p01 p03");
    jbuf v = J("[7, \"cid\"]");
    ck_assert_mem_eq(A.res->hits[2].val, v.p, v.n);
    free(v.p);
}
END_TEST

START_TEST(test_actor_bad_requests_clear_errors)
{
    load_people();
    iq q = qmk(3, NULL, NULL, NULL);
    troupe_msg *m;
    ck_assert_ok(troupe_index_query_msg("nope", &q.u, &m));
    ck_assert_err(a_ask(m, false), TROUPE_ENOINDEX);
    jbuf bad = J("[\"x\"]");
    q = qmk(2, NULL, NULL, NULL);
    q.u.values = bad.p;
    q.u.values_len = bad.n;
    ck_assert_ok(troupe_index_count_msg("score", &q.u, &m));
    ck_assert_ok(a_ask(m, true)); /* a function index takes strings */
    ck_assert_uint_eq(A.count, 0);
    /* a declared int index does not */
    ck_assert_ok(troupe_index_query_msg("age", &q.u, &m));
    ck_assert_err(a_ask(m, false), TROUPE_EINVAL);
    /* nor a string index an int */
    jbuf five = J("[5]");
    q.u.values = five.p;
    q.u.values_len = five.n;
    ck_assert_ok(troupe_index_query_msg("city", &q.u, &m));
    ck_assert_err(a_ask(m, false), TROUPE_EINVAL);
    /* malformed bodies */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_cstr(&p, "city");
    troupe_pack_nil(&p);
    ck_assert_ok(troupe_pack_take_msg(&p, TROUPE_INDEX_COUNT, &m));
    ck_assert_err(a_ask(m, true), TROUPE_EPROTO);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 4);
    troupe_pack_cstr(&p, "city");
    troupe_pack_cstr(&p, "not an array");
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    ck_assert_ok(troupe_pack_take_msg(&p, TROUPE_INDEX_COUNT, &m));
    ck_assert_err(a_ask(m, true), TROUPE_EPROTO);
    ck_assert_ok(troupe_msg_create(&m, 77, NULL, 0));
    ck_assert_err(a_ask(m, false), TROUPE_ENOTSUP);
    /* builders */
    q = qmk(0, NULL, NULL, NULL);
    q.u.limit = 0;
    m = NULL;
    ck_assert_err(troupe_index_query_msg("ix", &q.u, &m), TROUPE_EINVAL);
    ck_assert_ptr_null(m);
    q.u.limit = 1;
    ck_assert_err(troupe_index_query_msg("", &q.u, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_index_query_msg(NULL, &q.u, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_index_query_msg("ix", NULL, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_index_count_msg("ix", &q.u, NULL), TROUPE_EINVAL);
    q.u.values = "\xc1";
    q.u.values_len = 1;
    ck_assert_err(troupe_index_query_msg("ix", &q.u, &m), TROUPE_EPROTO);
    /* reply decoders reject other shapes */
    ck_assert_ok(troupe_msg_create(&m, 0, "\x93\x90\xc0\x01", 4));
    troupe_index_result *r = NULL;
    ck_assert_err(troupe_index_query_reply(m, &r), TROUPE_EPROTO);
    ck_assert_ptr_null(r);
    uint64_t n;
    ck_assert_err(troupe_index_count_reply(m, &n), TROUPE_EPROTO);
    troupe_msg_destroy(m);
    ck_assert_ok(troupe_msg_create(&m, 0, "\x93\x90\xc0\xc2", 4));
    ck_assert_ok(troupe_index_query_reply(m, &r));
    ck_assert_uint_eq(r->n, 0);
    troupe_index_result_destroy(r);
    troupe_msg_destroy(m);
    ck_assert_err(troupe_index_spawn(A.rt, NULL, NULL, &A.ix), TROUPE_EINVAL);
    free(bad.p);
    free(five.p);
}
END_TEST

static vlog a_vlog;
static void *a_next;
static size_t a_next_len;
static bool a_done;

static void
a_on_verify(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    A.replies++;
    A.err = err;
    if (err == TROUPE_OK)
        A.err = troupe_index_verify_reply(reply, on_mismatch, &a_vlog, &a_next,
                                          &a_next_len, &a_done);
}

START_TEST(test_actor_verify_in_steps_reports_mismatches)
{
    load_people();
    raw_put(Q.m, "p02", 3, NULL, 0);
    raw_put(Q.t, "p04", 3, NULL, 0);
    const char *want = verify_all(1000, true, NULL);
    ck_assert_str_eq(want, "MISSING_MANIFEST p02 0; ORPHAN_MANIFEST p04 0; "
                           "ORPHAN_ENTRY p02 10; ORPHAN_ENTRY p02 11; "
                           "ORPHAN_ENTRY p02 12; ORPHAN_ENTRY p02 13");
    memset(&a_vlog, 0, sizeof(a_vlog));
    void *cur = NULL;
    size_t cur_len = 0;
    int steps = 0;
    a_done = false;
    while (!a_done) {
        troupe_msg *m;
        ck_assert_ok(troupe_index_verify_msg(2, true, cur, cur_len, &m));
        a_want = A.replies + 1;
        ck_assert_ok(
            troupe_runtime_ask(A.rt, A.ix, &m, 5000, a_on_verify, NULL));
        ck_assert(ts_run_until(&A.loop, a_have, NULL, 10000));
        ck_assert_ok(A.err);
        troupe_free(cur);
        cur = a_next;
        cur_len = a_next_len;
        ck_assert_int_lt(++steps, 1000);
    }
    ck_assert_ptr_null(cur);
    ck_assert_int_gt(steps, 5);
    ck_assert_str_eq(a_vlog.text, want);
    /* bad requests */
    troupe_msg *m;
    ck_assert_err(troupe_index_verify_msg(0, false, NULL, 0, &m),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_verify_msg(1, false, NULL, 1, &m),
                  TROUPE_EINVAL);
    ck_assert_ok(troupe_index_verify_msg(1, false, "\x01", 1, &m));
    a_want = A.replies + 1;
    ck_assert_ok(troupe_runtime_ask(A.rt, A.ix, &m, 5000, a_on_verify, NULL));
    ck_assert(ts_run_until(&A.loop, a_have, NULL, 10000));
    ck_assert_err(A.err, TROUPE_EINVAL); /* not this table's cursor */
    ck_assert_ok(troupe_msg_create(&m, TROUPE_INDEX_VERIFY, "\x90", 1));
    a_want = A.replies + 1;
    ck_assert_ok(troupe_runtime_ask(A.rt, A.ix, &m, 5000, a_on_verify, NULL));
    ck_assert(ts_run_until(&A.loop, a_have, NULL, 10000));
    ck_assert_err(A.err, TROUPE_EPROTO);
    /* the reply decoder rejects an unknown kind */
    ck_assert_ok(
        troupe_msg_create(&m, 0, "\x92\x91\x94\x63\xc0\x00\xc0\xc0", 8));
    ck_assert_err(troupe_index_verify_reply(m, on_mismatch, &a_vlog, &cur,
                                            &cur_len, &a_done),
                  TROUPE_EPROTO);
    troupe_msg_destroy(m);
}
END_TEST

START_TEST(test_null_arguments_are_noops_or_einval)
{
    troupe_index_result_destroy(NULL);
    troupe_index_entries_init(NULL);
    troupe_index_def_set_ready(NULL, true);
    ck_assert(!troupe_index_def_ready(NULL));
    ck_assert(!troupe_index_def_unique(NULL));
    ck_assert_uint_eq(troupe_index_def_n_fields(NULL), 0);
    ck_assert_ptr_null(troupe_index_def_fn_name(NULL));
    size_t n;
    void *p;
    ck_assert_err(troupe_index_key_split(NULL, 1, &n, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_index_key_split("\x21x\x00", 3, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_key_pk_copy("\x21x\x00", 3, NULL, &n),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_key_pk_copy(NULL, 0, &p, &n), TROUPE_EINVAL);
    ck_assert_err(troupe__cf_name('t', 1, NULL, 64), TROUPE_EINVAL);
    ck_assert_err(troupe_index_query_reply(NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_index_count_reply(NULL, &n), TROUPE_EINVAL);
    bool done;
    ck_assert_err(troupe_index_verify_reply(NULL, NULL, NULL, &p, &n, &done),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_index_verify_msg(1, false, NULL, 0, NULL),
                  TROUPE_EINVAL);
}
END_TEST

/* ---- part 5: rebuild, drop and resumed builds through the catalog -------
 * Real RocksDB in a temp dir, the runtime embedded on the test's loop
 * (scheduler 0), except for the blocking twins' test. The function index
 * "gate" is the test's handle on a running build: it counts its calls, can
 * hold one call on its worker until the test opens it (a build paused
 * deterministically), and can fail its Nth call with ECLOSED, which ends
 * the build exactly as a stopping actor does. */

#include <stdatomic.h>

#include "troupe/table.h"

typedef struct ifx {
    uv_loop_t loop;
    bool embedded;
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_index_fns *fns;
    troupe_catalog *cat;
    troupe_tables *tables;
    char *dir;
    int done;
    int calls, want;
    troupe_err err, werr;
    int built;
    troupe_err built_err;
    uint64_t count;
    troupe_index_result *res;
} ifx;

static ifx X;

static atomic_int g_calls;
static atomic_int g_fail_at; /* 0: never; else this call returns ECLOSED */
static atomic_int g_armed;   /* the next call waits for the gate */
static atomic_int g_held;    /* a call is waiting */
static int g_open;
static pthread_mutex_t g_mu;
static pthread_cond_t g_cv;

/* The string at key "email" of doc, if any. */
static bool
doc_email(const void *doc, size_t len, const char **s, size_t *sl)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, doc, len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *k;
        size_t kl;
        troupe_read_str(&r, 64, &k, &kl);
        if (kl == 5 && memcmp(k, "email", 5) == 0 &&
            troupe_read_peek(&r) == TROUPE_MP_STR) {
            troupe_read_str(&r, 256, s, sl);
            return r.err == TROUPE_OK;
        }
        troupe_read_skip(&r);
    }
    return false;
}

static troupe_err
fn_gate(void *ctx, const void *doc, size_t doc_len, const void *pk,
        size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    (void)ctx;
    int n = atomic_fetch_add(&g_calls, 1) + 1;
    int one = 1;
    if (atomic_compare_exchange_strong(&g_armed, &one, 0)) {
        pthread_mutex_lock(&g_mu);
        atomic_store(&g_held, 1);
        while (!g_open)
            pthread_cond_wait(&g_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
    }
    if (n == atomic_load(&g_fail_at))
        return TROUPE_ECLOSED;
    const char *s;
    size_t sl;
    if (!doc_email(doc, doc_len, &s, &sl) || sl == 0)
        return TROUPE_OK;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, s, sl);
    const uint8_t *v;
    size_t vl;
    troupe_err e = troupe_key_writer_finish(&w, &v, &vl);
    if (e == TROUPE_OK)
        e = emit(emit_ctx, v, vl, NULL, 0);
    troupe_key_writer_fini(&w);
    return e;
}

static int
gate_calls(void)
{
    return atomic_load(&g_calls);
}

static void
gate_open(void)
{
    pthread_mutex_lock(&g_mu);
    g_open = 1;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static bool
gate_held(void *arg)
{
    return atomic_load(&g_held) != 0;
}

/* The runtime's logger at the next i_open (zeroed: the default). */
static troupe_logger i_logger;

static void
i_open(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 4, .logger = i_logger};
    if (X.embedded) {
        ck_assert_int_eq(uv_loop_init(&X.loop), 0);
        o.loop = &X.loop;
    }
    ck_assert_ok(troupe_runtime_create(&X.rt, &o));
    ck_assert_ok(troupe_db_open(X.dir, NULL, &X.db));
    ck_assert_ok(troupe_commit_create(X.db, NULL, &X.commit));
    troupe_catalog_opts co = {.rt = X.rt, .db = X.db};
    ck_assert_ok(troupe_catalog_open(&co, &X.cat));
    troupe_tables_opts to = {
        .catalog = X.cat, .commit = X.commit, .fns = X.fns};
    ck_assert_ok(troupe_tables_open(&to, &X.tables));
}

static bool
i_is_done(void *arg)
{
    return X.done != 0;
}

static void
i_on_stopped(troupe_tables *t, void *arg)
{
    X.done = 1;
}

static void
i_on_shutdown(troupe_runtime *rt, void *arg)
{
    X.done = 1;
}

static void
i_close(void)
{
    gate_open();
    if (X.embedded) {
        X.done = 0;
        ck_assert_ok(troupe_tables_stop(X.tables, i_on_stopped, NULL));
        ck_assert(ts_run_until(&X.loop, i_is_done, NULL, 20000));
        troupe_tables_destroy(X.tables);
        X.done = 0;
        ck_assert_ok(troupe_runtime_shutdown(X.rt, i_on_shutdown, NULL));
        ck_assert(ts_run_until(&X.loop, i_is_done, NULL, 10000));
        ck_assert_ok(troupe_catalog_stop_wait(X.cat));
        troupe_catalog_destroy(X.cat);
        troupe_runtime_destroy(X.rt);
        ck_assert_int_eq(ts_loop_close(&X.loop), 0);
    } else {
        ck_assert_ok(troupe_tables_stop_wait(X.tables));
        troupe_tables_destroy(X.tables);
        ck_assert_ok(troupe_runtime_shutdown_wait(X.rt));
        ck_assert_ok(troupe_catalog_stop_wait(X.cat));
        troupe_catalog_destroy(X.cat);
        troupe_runtime_destroy(X.rt);
    }
    X.tables = NULL;
    troupe_commit_destroy(X.commit);
    ck_assert_ok(troupe_db_close(X.db));
}

/* The gate closed again for the next use (after a reopen). */
static void
gate_reset(void)
{
    pthread_mutex_lock(&g_mu);
    g_open = 0;
    pthread_mutex_unlock(&g_mu);
    atomic_store(&g_held, 0);
    atomic_store(&g_armed, 0);
}

static void
i_setup_common(bool embedded)
{
    memset(&X, 0, sizeof(X));
    X.embedded = embedded;
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_armed, 0);
    atomic_store(&g_held, 0);
    g_open = 0;
    ck_assert_int_eq(pthread_mutex_init(&g_mu, NULL), 0);
    ck_assert_int_eq(pthread_cond_init(&g_cv, NULL), 0);
    X.dir = ts_tempdir("index");
    ck_assert_ok(troupe_index_fns_create(&X.fns));
    ck_assert_ok(troupe_index_register_fn(X.fns, "gate", fn_gate, NULL));
    i_open();
}

static void
i_setup(void)
{
    i_setup_common(true);
}

static void
i_setup_standalone(void)
{
    i_setup_common(false);
}

static void
i_teardown(void)
{
    troupe_index_result_destroy(X.res);
    i_close();
    troupe_index_fns_destroy(X.fns);
    pthread_cond_destroy(&g_cv);
    pthread_mutex_destroy(&g_mu);
    ts_rmtree(X.dir);
    free(X.dir);
}

static bool
i_have(void *arg)
{
    return X.calls >= X.want;
}

static void
i_on_write(troupe_err err, troupe_rows *rows, void *arg)
{
    X.calls++;
    if (err != TROUPE_OK)
        X.werr = err;
    troupe_rows_destroy(rows);
}

static void
i_on_ddl(troupe_tables *t, troupe_err err, void *arg)
{
    X.calls++;
    X.err = err;
}

static void
i_on_built(troupe_tables *t, troupe_err err, void *arg)
{
    X.built++;
    X.built_err = err;
}

static bool
i_is_built(void *arg)
{
    return X.built > 0;
}

static void
i_on_count(troupe_err err, uint64_t n, void *arg)
{
    X.calls++;
    X.err = err;
    X.count = n;
}

static void
i_on_query(troupe_err err, troupe_index_result *res, void *arg)
{
    X.calls++;
    X.err = err;
    troupe_index_result_destroy(X.res);
    X.res = res;
}

static troupe_err
i_drive(troupe_err started)
{
    if (started != TROUPE_OK)
        return started;
    X.want = X.calls + 1;
    ck_assert(ts_run_until(&X.loop, i_have, NULL, 20000));
    return X.err;
}

/* Waits for the build callback started by the last call. */
static troupe_err
i_wait_built(troupe_err started)
{
    if (started != TROUPE_OK)
        return started;
    ck_assert(ts_run_until(&X.loop, i_is_built, NULL, 30000));
    X.built = 0;
    return X.built_err;
}

static const troupe_index_field i_email_f = {"email", TROUPE_FIELD_STRING};
static const troupe_index_field i_city_f = {"city", TROUPE_FIELD_STRING};

static troupe_index_spec
spec_email(bool unique)
{
    troupe_index_spec s = {.name = "by_email",
                           .unique = unique,
                           .fields = &i_email_f,
                           .n_fields = 1};
    return s;
}

static troupe_index_spec
spec_city(void)
{
    troupe_index_spec s = {
        .name = "by_city", .fields = &i_city_f, .n_fields = 1};
    return s;
}

static troupe_index_spec
spec_gate(void)
{
    troupe_index_spec s = {.name = "gate", .fn_name = "gate"};
    return s;
}

/* {"email": email, "city": city}; NULL leaves a field out. */
static void
i_doc(troupe_packer *p, const char *email, const char *city)
{
    troupe_pack_init(p);
    troupe_pack_map(p, (email != NULL) + (city != NULL));
    if (email != NULL) {
        troupe_pack_cstr(p, "email");
        troupe_pack_cstr(p, email);
    }
    if (city != NULL) {
        troupe_pack_cstr(p, "city");
        troupe_pack_cstr(p, city);
    }
}

/* Starts a write (kind 'i'nsert, 'u'psert, 'd'elete); the caller drives. */
static void
i_write(char kind, const char *table, const char *key, const char *email,
        const char *city)
{
    troupe_packer p;
    i_doc(&p, email, city);
    size_t dl;
    const void *d = troupe_pack_data(&p, &dl);
    troupe_err e;
    if (kind == 'i')
        e = troupe_table_insert(X.tables, table, key, strlen(key), d, dl, NULL,
                                i_on_write, NULL);
    else if (kind == 'u')
        e = troupe_table_upsert(X.tables, table, key, strlen(key), d, dl, NULL,
                                i_on_write, NULL);
    else
        e = troupe_table_delete(X.tables, table, key, strlen(key), NULL,
                                i_on_write, NULL);
    ck_assert_ok(e);
    troupe_pack_fini(&p);
}

static void
i_wait_writes(int n)
{
    X.want = X.calls + n;
    ck_assert(ts_run_until(&X.loop, i_have, NULL, 30000));
    ck_assert_ok(X.werr);
}

/* Rows <prefix>000.. with email e<i>@x and city c<i % 7>. */
static void
i_fill(const char *table, const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char k[16], e[32], c[8];
        snprintf(k, sizeof(k), "%s%03d", prefix, i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        snprintf(c, sizeof(c), "c%d", i % 7);
        i_write('i', table, k, e, c);
    }
    i_wait_writes(n);
}

static void
i_on_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    X.calls++;
    X.err = err;
    troupe_rows_destroy(rows);
}

static troupe_err
i_ins(const char *table, const char *key, const char *email)
{
    troupe_packer p;
    i_doc(&p, email, NULL);
    size_t dl;
    const void *d = troupe_pack_data(&p, &dl);
    troupe_err e = i_drive(troupe_table_insert(
        X.tables, table, key, strlen(key), d, dl, NULL, i_on_rows, NULL));
    troupe_pack_fini(&p);
    return e;
}

static troupe_err
i_count(const char *table, const char *index, uint64_t *n)
{
    troupe_index_query q = {.limit = 1};
    troupe_err e = i_drive(
        troupe_tables_count(X.tables, table, index, &q, i_on_count, NULL));
    *n = X.count;
    return e;
}

/* Exact query on a one-string index; returns the error, X.res the hits. */
static troupe_err
i_query(const char *table, const char *index, const char *value)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_cstr(&p, value);
    size_t vl;
    const void *v = troupe_pack_data(&p, &vl);
    troupe_index_query q = {.values = v, .values_len = vl, .limit = 10};
    troupe_err e = i_drive(
        troupe_tables_query(X.tables, table, index, &q, i_on_query, NULL));
    troupe_pack_fini(&p);
    return e;
}

typedef struct vcount {
    int by_kind[16];
    int total;
} vcount;

static void
i_on_mismatch(void *ctx, const troupe_index_mismatch *m)
{
    vcount *c = ctx;
    ck_assert_int_lt((int)m->kind, 16);
    c->by_kind[m->kind]++;
    c->total++;
}

/* Verify (with derive) of table 1 whose indexes are specs[i] under ids[i],
 * all ready. */
static vcount
i_verify(const troupe_index_spec *specs, const uint64_t *ids, size_t n)
{
    troupe_index_def *defs[8];
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++)
        ck_assert_ok(troupe_index_def_create(&specs[i], ids[i], &defs[i]));
    vcount c;
    memset(&c, 0, sizeof(c));
    troupe_index_verify_opts o = {.table_id = 1,
                                  .defs = (const troupe_index_def *const *)defs,
                                  .n_defs = n,
                                  .derive = true,
                                  .fns = X.fns,
                                  .budget = 100,
                                  .cb = i_on_mismatch,
                                  .cb_ctx = &c};
    void *cur = NULL;
    size_t cur_len = 0;
    bool done = false;
    for (int steps = 0; !done; steps++) {
        void *next;
        size_t next_len;
        ck_assert_ok(troupe_index_verify_step(X.db, &o, cur, cur_len, &next,
                                              &next_len, &done));
        troupe_free(cur);
        cur = next;
        cur_len = next_len;
        ck_assert_int_lt(steps, 100000);
    }
    for (size_t i = 0; i < n; i++)
        troupe_index_def_destroy(defs[i]);
    return c;
}

static bool
i_has_cf(const char *name)
{
    troupe_cf *c = NULL;
    troupe_err e = troupe_db_cf(X.db, name, &c);
    ck_assert(e == TROUPE_OK || e == TROUPE_ENOENT);
    return e == TROUPE_OK;
}

static troupe_cf *
i_cf(const char *name)
{
    troupe_cf *c = NULL;
    ck_assert_ok(troupe_db_cf(X.db, name, &c));
    return c;
}

static void
i_raw(const char *cf, const void *k, size_t kn, const void *v, size_t vn)
{
    troupe_batch *b;
    ck_assert_ok(troupe_batch_create(&b));
    if (v != NULL)
        ck_assert_ok(troupe_batch_put(b, i_cf(cf), k, kn, v, vn));
    else
        ck_assert_ok(troupe_batch_delete(b, i_cf(cf), k, kn));
    ck_assert_ok(troupe_db_write(X.db, b, TROUPE_SYNC_ON));
    troupe_batch_destroy(b);
}

/* The by_email entry key of (email, pk) as derive makes it. */
static void
i_email_key(const char *email, const char *pk, unsigned char *out, size_t *len)
{
    troupe_index_spec s = spec_email(false);
    troupe_index_def *d;
    ck_assert_ok(troupe_index_def_create(&s, 2, &d));
    troupe_packer p;
    i_doc(&p, email, NULL);
    size_t dl;
    const void *doc = troupe_pack_data(&p, &dl);
    troupe_index_entries es;
    troupe_index_entries_init(&es);
    ck_assert_ok(troupe_index_derive(d, NULL, doc, dl, pk, strlen(pk), &es));
    ck_assert_uint_eq(es.n, 1);
    ck_assert_uint_le(es.v[0].key_len, 256);
    memcpy(out, es.v[0].key, es.v[0].key_len);
    *len = es.v[0].key_len;
    troupe_index_entries_fini(&es);
    troupe_pack_fini(&p);
    troupe_index_def_destroy(d);
}

static size_t
i_family_count(const char *cf)
{
    troupe_page *pg = NULL;
    ck_assert_ok(
        troupe_db_scan(X.db, i_cf(cf), NULL, NULL, NULL, 0, 10000, false, &pg));
    size_t n = pg->n;
    troupe_page_destroy(pg);
    return n;
}

START_TEST(test_rebuild_repairs_entries_while_writes_go_on)
{
    troupe_index_spec specs[] = {spec_email(true), spec_gate()};
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "u", specs, 2, i_on_ddl, NULL)));
    i_fill("u", "p", 200); /* table 1, by_email 2, gate 3 */
    /* damage x.2: three entries gone, two orphans */
    troupe_page *pg = NULL;
    ck_assert_ok(
        troupe_db_scan(X.db, i_cf("x.2"), NULL, NULL, NULL, 0, 3, false, &pg));
    ck_assert_uint_eq(pg->n, 3);
    for (size_t i = 0; i < pg->n; i++)
        i_raw("x.2", pg->items[i].key, pg->items[i].key_len, NULL, 0);
    troupe_page_destroy(pg);
    unsigned char k[256];
    size_t kl;
    i_email_key("ghost1@x", "p010", k, &kl);
    i_raw("x.2", k, kl, "\xc0", 1);
    i_email_key("ghost2@x", "p011", k, &kl);
    i_raw("x.2", k, kl, "\xc0", 1);
    uint64_t ids0[] = {2, 3};
    vcount c = i_verify(specs, ids0, 2);
    ck_assert_int_eq(c.by_kind[TROUPE_VERIFY_MISSING_ENTRY], 3);
    ck_assert_int_eq(c.by_kind[TROUPE_VERIFY_ORPHAN_ENTRY], 2);
    ck_assert_int_eq(c.total, 5);

    /* rebuild, held at its first row */
    atomic_store(&g_armed, 1);
    ck_assert_ok(troupe_tables_rebuild_index(X.tables, "u", "by_email",
                                             i_on_built, NULL));
    ck_assert(ts_run_until(&X.loop, gate_held, NULL, 20000));
    bool ready = true;
    ck_assert_ok(troupe_tables_index_state(X.tables, "u", "by_email", &ready));
    ck_assert(!ready);
    ck_assert_err(i_query("u", "by_email", "e001@x"), TROUPE_ESTATE);
    uint64_t n = 0;
    ck_assert_err(i_count("u", "by_email", &n), TROUPE_ESTATE);
    ck_assert_ok(i_query("u", "gate", "e001@x")); /* the others answer */
    ck_assert_uint_eq(X.res->n, 1);
    ck_assert_err(troupe_tables_rebuild_index(X.tables, "u", "by_email",
                                              i_on_built, NULL),
                  TROUPE_EBUSY);
    ck_assert_err(
        troupe_tables_drop_index(X.tables, "u", "gate", i_on_built, NULL),
        TROUPE_EBUSY);
    troupe_index_spec more = spec_city();
    ck_assert_err(
        i_drive(troupe_tables_add_index(X.tables, "u", &more, i_on_ddl, NULL)),
        TROUPE_EBUSY);
    /* writes during the rebuild: changed emails, new rows, deletes, and a
     * duplicate the building unique index refuses */
    int sent = 0;
    for (int i = 0; i < 40; i++) {
        char key[16], e[32];
        snprintf(key, sizeof(key), "p%03d", i * 3);
        snprintf(e, sizeof(e), "new%03d@x", i);
        i_write('u', "u", key, e, "moved");
        snprintf(key, sizeof(key), "q%03d", i);
        snprintf(e, sizeof(e), "q%03d@x", i);
        i_write('i', "u", key, e, NULL);
        sent += 2;
    }
    for (int i = 150; i < 160; i++) {
        char key[16];
        snprintf(key, sizeof(key), "p%03d", i);
        i_write('d', "u", key, NULL, NULL);
        sent++;
    }
    gate_open();
    i_wait_writes(sent);
    ck_assert_ok(i_wait_built(TROUPE_OK));
    ck_assert_err(i_ins("u", "z", "q001@x"), TROUPE_ECONSTRAINT);
    ck_assert_ok(troupe_tables_index_state(X.tables, "u", "by_email", &ready));
    ck_assert(ready);
    /* a fresh family; the old one with its orphans is gone */
    ck_assert(!i_has_cf("x.2"));
    ck_assert(i_has_cf("x.4"));
    uint64_t ids1[] = {4, 3};
    c = i_verify(specs, ids1, 2);
    ck_assert_int_eq(c.total, 0);
    ck_assert_uint_eq(i_family_count("x.4"), 230);
    ck_assert_ok(i_count("u", "by_email", &n));
    ck_assert_uint_eq(n, 230);
    ck_assert_ok(i_query("u", "by_email", "new007@x"));
    ck_assert_uint_eq(X.res->n, 1);
    ck_assert_mem_eq(X.res->hits[0].pk, "p021", 4);
    ck_assert_ok(i_query("u", "by_email", "e021@x")); /* moved away */
    ck_assert_uint_eq(X.res->n, 0);
    ck_assert_ok(i_query("u", "by_email", "e001@x")); /* entry was deleted */
    ck_assert_uint_eq(X.res->n, 1);
    ck_assert_mem_eq(X.res->hits[0].pk, "p001", 4);
    ck_assert_ok(i_query("u", "by_email", "ghost1@x"));
    ck_assert_uint_eq(X.res->n, 0);
    ck_assert_ok(i_query("u", "by_email", "e155@x"));
    ck_assert_uint_eq(X.res->n, 0);
    /* and it survives a reopen as it is */
    i_close();
    i_open();
    ck_assert_ok(troupe_tables_index_state(X.tables, "u", "by_email", &ready));
    ck_assert(ready);
    ck_assert_int_eq(i_verify(specs, ids1, 2).total, 0);
}
END_TEST

START_TEST(test_rebuild_unique_duplicate_removes_index)
{
    troupe_index_spec specs[] = {spec_email(true), spec_city()};
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "u", specs, 2, i_on_ddl, NULL)));
    i_fill("u", "p", 20); /* table 1, by_email 2, by_city 3 */
    /* a row written behind the table's back, duplicating e005@x */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_int(&p, 0);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "email");
    troupe_pack_cstr(&p, "e005@x");
    size_t el;
    const void *env = troupe_pack_data(&p, &el);
    i_raw("t.1", "zz", 2, env, el);
    troupe_pack_fini(&p);
    i_raw("m.1", "zz", 2, "\x92\x01\x90", 3); /* [1, []] */
    ck_assert_err(i_wait_built(troupe_tables_rebuild_index(
                      X.tables, "u", "by_email", i_on_built, NULL)),
                  TROUPE_ECONSTRAINT);
    bool ready;
    ck_assert_err(troupe_tables_index_state(X.tables, "u", "by_email", &ready),
                  TROUPE_ENOINDEX);
    ck_assert_err(i_query("u", "by_email", "e005@x"), TROUPE_ENOINDEX);
    ck_assert(!i_has_cf("x.2"));
    ck_assert(!i_has_cf("x.4"));
    /* the other index is untouched, the constraint gone */
    ck_assert_ok(troupe_tables_index_state(X.tables, "u", "by_city", &ready));
    ck_assert(ready);
    ck_assert_ok(i_ins("u", "y", "e006@x"));
    uint64_t n = 0;
    ck_assert_ok(i_count("u", "by_city", &n));
    ck_assert_uint_eq(n, 20);
    /* the name is free again: adding it back finds the duplicate too */
    troupe_index_spec again = spec_email(true);
    ck_assert_err(i_wait_built(troupe_tables_add_index(X.tables, "u", &again,
                                                       i_on_built, NULL)),
                  TROUPE_ECONSTRAINT);
}
END_TEST

START_TEST(test_drop_index_gone_at_once_then_swept)
{
    troupe_index_spec specs[] = {spec_email(true), spec_city(), spec_gate()};
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "u", specs, 3, i_on_ddl, NULL)));
    i_fill("u", "p", 150); /* table 1, by_email 2, by_city 3, gate 4 */
    ck_assert_uint_eq(i_family_count("x.2"), 150);
    ck_assert_err(i_ins("u", "dup", "e001@x"), TROUPE_ECONSTRAINT);
    atomic_store(&g_armed, 1);
    ck_assert_ok(
        troupe_tables_drop_index(X.tables, "u", "by_email", i_on_built, NULL));
    ck_assert(ts_run_until(&X.loop, gate_held, NULL, 20000));
    /* the sweep is held at its first row: the index is gone already */
    bool ready;
    ck_assert_err(troupe_tables_index_state(X.tables, "u", "by_email", &ready),
                  TROUPE_ENOINDEX);
    ck_assert_err(i_query("u", "by_email", "e001@x"), TROUPE_ENOINDEX);
    ck_assert_ok(i_ins("u", "dup", "e001@x")); /* no constraint */
    ck_assert_err(
        troupe_tables_drop_index(X.tables, "u", "by_email", i_on_built, NULL),
        TROUPE_ENOINDEX);
    ck_assert_err(
        troupe_tables_drop_index(X.tables, "u", "by_city", i_on_built, NULL),
        TROUPE_EBUSY);
    troupe_index_spec rest[] = {spec_city(), spec_gate()};
    uint64_t ids[] = {3, 4};
    vcount c = i_verify(rest, ids, 2);
    ck_assert_int_gt(c.by_kind[TROUPE_VERIFY_UNKNOWN_INDEX], 0);
    ck_assert_int_eq(c.total, c.by_kind[TROUPE_VERIFY_UNKNOWN_INDEX]);
    gate_open();
    ck_assert_ok(i_wait_built(TROUPE_OK));
    ck_assert(!i_has_cf("x.2"));
    ck_assert_int_eq(i_verify(rest, ids, 2).total, 0);
    uint64_t n = 0;
    ck_assert_ok(i_count("u", "by_city", &n));
    ck_assert_uint_eq(n, 150);
    ck_assert_ok(i_count("u", "gate", &n));
    ck_assert_uint_eq(n, 151);
    /* the catalog has nothing pending: a reopen starts no sweep */
    i_close();
    gate_reset();
    atomic_store(&g_calls, 0);
    i_open();
    ck_assert_err(troupe_tables_index_state(X.tables, "u", "by_email", &ready),
                  TROUPE_ENOINDEX);
    ck_assert_ok(troupe_tables_index_state(X.tables, "u", "by_city", &ready));
    ck_assert(ready);
    ck_assert_ok(i_ins("u", "dup2", "e001@x"));
    ck_assert_int_eq(gate_calls(), 1); /* that insert only */
    /* the name can be used again, under a new id */
    troupe_index_spec again = spec_email(false);
    ck_assert_ok(i_wait_built(
        troupe_tables_add_index(X.tables, "u", &again, i_on_built, NULL)));
    ck_assert_ok(i_count("u", "by_email", &n));
    ck_assert_uint_eq(n, 152);
}
END_TEST

/* The build position stored in meta for table 1: [1, index id, after]. */
static bool
i_position(uint64_t *index_id, char *after, size_t cap)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "build", 5);
    troupe_key_put_uint64(&w, 1);
    const uint8_t *k;
    size_t kl;
    ck_assert_ok(troupe_key_writer_finish(&w, &k, &kl));
    void *v = NULL;
    size_t vl = 0;
    troupe_err e = troupe_db_get(X.db, i_cf("meta"), NULL, k, kl, &v, &vl);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_ENOENT)
        return false;
    ck_assert_ok(e);
    troupe_reader r;
    uint64_t ver = 0;
    const void *a;
    size_t al;
    troupe_reader_init(&r, v, vl);
    troupe_read_array_n(&r, 3);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, index_id);
    troupe_read_bin(&r, 64, &a, &al);
    ck_assert_ok(troupe_read_end(&r));
    ck_assert_uint_eq(ver, 1);
    ck_assert_uint_lt(al, cap);
    memcpy(after, a, al);
    after[al] = '\0';
    troupe_free(v);
    return true;
}

static bool
i_gate_ready(void *arg)
{
    bool ready = false;
    return troupe_tables_index_state(X.tables, "r", "gate", &ready) ==
               TROUPE_OK &&
           ready;
}

START_TEST(test_build_interrupted_resumes_after_saved_position)
{
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "r", NULL, 0, i_on_ddl, NULL)));
    i_fill("r", "r", 300); /* table 1 */
    /* steps of 64 rows: calls 1..128 finish two steps, call 150 (in the
     * third) fails it and so ends the build as a stopping actor would */
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 150);
    troupe_index_spec g = spec_gate();
    ck_assert_err(i_wait_built(troupe_tables_add_index(X.tables, "r", &g,
                                                       i_on_built, NULL)),
                  TROUPE_ECLOSED);
    ck_assert_int_eq(gate_calls(), 192); /* three steps, no more */
    bool ready = true;
    ck_assert_ok(troupe_tables_index_state(X.tables, "r", "gate", &ready));
    ck_assert(!ready);
    uint64_t id = 0;
    char after[64];
    ck_assert(i_position(&id, after, sizeof(after)));
    ck_assert_uint_eq(id, 2);
    ck_assert_str_eq(after, "r127"); /* the last row of step two */
    /* a crash here, then an open: the build goes on from r128 */
    i_close();
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 0);
    i_open();
    ck_assert(ts_run_until(&X.loop, i_gate_ready, NULL, 30000));
    ck_assert_int_eq(gate_calls(), 300 - 128);
    ck_assert(!i_position(&id, after, sizeof(after))); /* cleared */
    troupe_index_spec specs[] = {spec_gate()};
    uint64_t ids[] = {2};
    ck_assert_int_eq(i_verify(specs, ids, 1).total, 0);
    uint64_t n = 0;
    ck_assert_ok(i_count("r", "gate", &n));
    ck_assert_uint_eq(n, 300);
}
END_TEST

static bool
i_x2_gone(void *arg)
{
    troupe_cf *c;
    return troupe_db_cf(X.db, "x.2", &c) == TROUPE_ENOENT;
}

START_TEST(test_drop_sweep_interrupted_resumes_at_open)
{
    troupe_index_spec specs[] = {spec_email(false), spec_gate()};
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "s", specs, 2, i_on_ddl, NULL)));
    i_fill("s", "s", 200); /* table 1, by_email 2, gate 3 */
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 100); /* in the sweep's second step */
    ck_assert_err(i_wait_built(troupe_tables_drop_index(
                      X.tables, "s", "by_email", i_on_built, NULL)),
                  TROUPE_ECLOSED);
    ck_assert(i_has_cf("x.2")); /* still listed as dropped */
    uint64_t id = 9;
    char after[64];
    ck_assert(i_position(&id, after, sizeof(after)));
    ck_assert_uint_eq(id, 0); /* a sweep */
    ck_assert_str_eq(after, "s063");
    ck_assert_err(
        troupe_tables_drop_index(X.tables, "s", "gate", i_on_built, NULL),
        TROUPE_EBUSY);
    i_close();
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 0);
    i_open();
    ck_assert(ts_run_until(&X.loop, i_x2_gone, NULL, 30000));
    ck_assert_int_eq(gate_calls(), 200 - 64);
    troupe_index_spec rest[] = {spec_gate()};
    uint64_t ids[] = {3};
    ck_assert_int_eq(i_verify(rest, ids, 1).total, 0);
    /* nothing pending any more: another change is accepted */
    ck_assert_ok(i_wait_built(
        troupe_tables_rebuild_index(X.tables, "s", "gate", i_on_built, NULL)));
    uint64_t ids2[] = {4};
    ck_assert_int_eq(i_verify(rest, ids2, 1).total, 0);
}
END_TEST

static bool
i_email_ready(void *arg)
{
    bool ready = false;
    return troupe_tables_index_state(X.tables, "u", "by_email", &ready) ==
               TROUPE_OK &&
           ready;
}

START_TEST(test_rebuild_interrupted_resumes_and_drops_old_family)
{
    troupe_index_spec specs[] = {spec_email(true), spec_gate()};
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "u", specs, 2, i_on_ddl, NULL)));
    i_fill("u", "p", 200); /* table 1, by_email 2, gate 3 */
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 70); /* in the rebuild's second step */
    ck_assert_err(i_wait_built(troupe_tables_rebuild_index(
                      X.tables, "u", "by_email", i_on_built, NULL)),
                  TROUPE_ECLOSED);
    ck_assert(i_has_cf("x.2") && i_has_cf("x.4"));
    uint64_t id = 0;
    char after[64];
    ck_assert(i_position(&id, after, sizeof(after)));
    ck_assert_uint_eq(id, 4);
    ck_assert_str_eq(after, "p063");
    i_close();
    atomic_store(&g_calls, 0);
    atomic_store(&g_fail_at, 0);
    i_open();
    ck_assert(ts_run_until(&X.loop, i_email_ready, NULL, 30000));
    ck_assert_int_eq(gate_calls(), 200 - 64);
    ck_assert(ts_run_until(&X.loop, i_x2_gone, NULL, 30000));
    uint64_t ids[] = {4, 3};
    ck_assert_int_eq(i_verify(specs, ids, 2).total, 0);
    ck_assert_err(i_ins("u", "z", "e001@x"), TROUPE_ECONSTRAINT);
}
END_TEST

START_TEST(test_rebuild_drop_bad_arguments_write_nothing)
{
    troupe_index_spec specs[] = {spec_city()};
    ck_assert_ok(
        i_drive(troupe_tables_create(X.tables, "u", specs, 1, i_on_ddl, NULL)));
    char long_name[300];
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    troupe_err (*fns[])(troupe_tables *, const char *, const char *,
                        troupe_tables_cb, void *) = {
        troupe_tables_rebuild_index, troupe_tables_drop_index};
    troupe_err (*waits[])(troupe_tables *, const char *, const char *) = {
        troupe_tables_rebuild_index_wait, troupe_tables_drop_index_wait};
    for (int i = 0; i < 2; i++) {
        ck_assert_err(fns[i](NULL, "u", "by_city", i_on_built, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, NULL, "by_city", i_on_built, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, "", "by_city", i_on_built, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, "u", NULL, i_on_built, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, "u", "", i_on_built, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, "u", long_name, i_on_built, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, "u", "by_city", NULL, NULL),
                      TROUPE_EINVAL);
        ck_assert_err(fns[i](X.tables, "nope", "by_city", i_on_built, NULL),
                      TROUPE_ENOTABLE);
        ck_assert_err(fns[i](X.tables, "u", "nope", i_on_built, NULL),
                      TROUPE_ENOINDEX);
        ck_assert_err(waits[i](NULL, "u", "by_city"), TROUPE_EINVAL);
        ck_assert_err(waits[i](X.tables, "u", ""), TROUPE_EINVAL);
        ck_assert_err(waits[i](X.tables, "nope", "by_city"), TROUPE_ENOTABLE);
        ck_assert_err(waits[i](X.tables, "u", "nope"), TROUPE_ENOINDEX);
    }
    ck_assert_int_eq(X.built, 0);
    /* nothing written: the index is as it was, and no id was used up */
    bool ready;
    ck_assert_ok(troupe_tables_index_state(X.tables, "u", "by_city", &ready));
    ck_assert(ready);
    ck_assert(i_has_cf("x.2"));
    troupe_index_spec e = spec_email(false);
    ck_assert_ok(i_wait_built(
        troupe_tables_add_index(X.tables, "u", &e, i_on_built, NULL)));
    ck_assert(i_has_cf("x.3"));
    i_close();
    i_open();
    X.done = 0;
    ck_assert_ok(troupe_tables_stop(X.tables, i_on_stopped, NULL));
    ck_assert_err(
        troupe_tables_rebuild_index(X.tables, "u", "by_city", i_on_built, NULL),
        TROUPE_ESTATE);
    ck_assert_err(
        troupe_tables_drop_index(X.tables, "u", "by_city", i_on_built, NULL),
        TROUPE_ESTATE);
    ck_assert(ts_run_until(&X.loop, i_is_done, NULL, 20000));
    troupe_tables_destroy(X.tables);
    troupe_tables_opts to = {
        .catalog = X.cat, .commit = X.commit, .fns = X.fns};
    ck_assert_ok(troupe_tables_open(&to, &X.tables));
}
END_TEST

START_TEST(test_rebuild_and_drop_wait_twins)
{
    troupe_index_spec specs[] = {spec_email(true), spec_city()};
    ck_assert_ok(troupe_tables_create_wait(X.tables, "u", specs, 2));
    for (int i = 0; i < 100; i++) {
        char k[16], e[32];
        snprintf(k, sizeof(k), "p%03d", i);
        snprintf(e, sizeof(e), "e%03d@x", i);
        troupe_packer p;
        i_doc(&p, e, "c");
        size_t dl;
        const void *d = troupe_pack_data(&p, &dl);
        ck_assert_ok(
            troupe_table_insert_wait(X.tables, "u", k, strlen(k), d, dl, NULL));
        troupe_pack_fini(&p);
    }
    /* damage, then repair */
    unsigned char k[256];
    size_t kl;
    i_email_key("e050@x", "p050", k, &kl);
    i_raw("x.2", k, kl, NULL, 0);
    uint64_t ids0[] = {2, 3};
    ck_assert_int_eq(i_verify(specs, ids0, 2).total, 1);
    ck_assert_ok(troupe_tables_rebuild_index_wait(X.tables, "u", "by_email"));
    uint64_t ids1[] = {4, 3};
    ck_assert_int_eq(i_verify(specs, ids1, 2).total, 0);
    troupe_index_query q = {.limit = 1};
    uint64_t n = 0;
    ck_assert_ok(troupe_tables_count_wait(X.tables, "u", "by_email", &q, &n));
    ck_assert_uint_eq(n, 100);
    ck_assert_ok(troupe_tables_drop_index_wait(X.tables, "u", "by_email"));
    ck_assert_err(troupe_tables_count_wait(X.tables, "u", "by_email", &q, &n),
                  TROUPE_ENOINDEX);
    ck_assert(!i_has_cf("x.4"));
    troupe_index_spec rest[] = {spec_city()};
    uint64_t ids2[] = {3};
    ck_assert_int_eq(i_verify(rest, ids2, 1).total, 0);
    ck_assert_err(troupe_tables_drop_index_wait(X.tables, "u", "by_email"),
                  TROUPE_ENOINDEX);
}
END_TEST

/* ---- build progress ------------------------------------------------ */

/* The build's log lines a test logger kept: message and rows. */
#define PL_MAX 64
static pthread_mutex_t pl_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char msg[64];
    long long rows, total;
    char index[32];
} pl_lines[PL_MAX];
static int pl_n;

static void
pl_log(void *ctx, const troupe_log_record *r)
{
    (void)ctx;
    if (strcmp(r->sys, "table") != 0 || strncmp(r->msg, "index ", 6) != 0)
        return;
    pthread_mutex_lock(&pl_mu);
    if (pl_n < PL_MAX) {
        snprintf(pl_lines[pl_n].msg, sizeof(pl_lines[pl_n].msg), "%s", r->msg);
        pl_lines[pl_n].rows = pl_lines[pl_n].total = -1;
        for (size_t i = 0; i < r->nfields; i++) {
            const troupe_log_field *f = &r->fields[i];
            if (strcmp(f->key, "rows") == 0)
                pl_lines[pl_n].rows = atoll(f->value);
            else if (strcmp(f->key, "total") == 0)
                pl_lines[pl_n].total = atoll(f->value);
            else if (strcmp(f->key, "index") == 0)
                snprintf(pl_lines[pl_n].index, sizeof(pl_lines[pl_n].index),
                         "%s", f->value);
        }
        pl_n++;
    }
    pthread_mutex_unlock(&pl_mu);
}

static bool
pl_is_added(void *arg)
{
    return atomic_load((atomic_int *)arg) != 0;
}

static void
pl_added(troupe_tables *t, troupe_err err, void *arg)
{
    (void)t;
    atomic_store((atomic_int *)arg, err == TROUPE_OK ? 1 : 2);
}

/* An index build on a table of a few thousand rows reports its progress:
 * rows done grow monotonically, never past the estimate while it runs,
 * and reach done == total when the index is ready; the log has a line at
 * its start, lines as it goes (each with more rows) and one at its end. */
START_TEST(test_build_progress_grows_to_total_and_is_logged)
{
    i_close();
    i_logger =
        (troupe_logger){.fn = pl_log, .ctx = NULL, .level = TROUPE_LOG_INFO};
    pl_n = 0;
    i_open();
    i_logger = (troupe_logger){0};
    ck_assert_ok(troupe_tables_create_wait(X.tables, "u", NULL, 0));
    enum { ROWS = 3000 };
    troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
    for (int i = 0; i < ROWS; i++) {
        char k[16];
        snprintf(k, sizeof(k), "p%05d", i);
        troupe_packer p;
        i_doc(&p, NULL, i % 2 ? "Oslo" : "Rome");
        size_t dl;
        const void *d = troupe_pack_data(&p, &dl);
        ck_assert_ok(
            troupe_table_insert_wait(X.tables, "u", k, strlen(k), d, dl, &wo));
        troupe_pack_fini(&p);
    }
    troupe_index_progress pr;
    ck_assert_err(
        troupe_tables_index_progress_wait(X.tables, "u", "by_city", &pr),
        TROUPE_ENOINDEX);
    troupe_index_spec city = spec_city();
    atomic_int added = 0;
    ck_assert_ok(
        troupe_tables_add_index(X.tables, "u", &city, pl_added, &added));
    uint64_t last = 0, t0 = ts_now_ms();
    bool seen = false;
    for (;;) {
        /* the index appears (building) once the catalog job runs */
        troupe_err e =
            troupe_tables_index_progress_wait(X.tables, "u", "by_city", &pr);
        if (e == TROUPE_ENOINDEX && !seen) {
            ck_assert_msg(ts_now_ms() - t0 < 30000, "no index");
            continue;
        }
        ck_assert_ok(e);
        seen = true;
        ck_assert_uint_ge(pr.done, last);
        last = pr.done;
        if (pr.known && pr.running)
            ck_assert_uint_le(pr.done, pr.total);
        if (pr.ready)
            break;
        ck_assert_msg(ts_now_ms() - t0 < 30000, "not ready: done %llu",
                      (unsigned long long)pr.done);
    }
    ck_assert(pr.known);
    ck_assert(!pr.running);
    ck_assert_err(pr.err, TROUPE_OK);
    ck_assert_uint_eq(pr.done, ROWS);
    ck_assert_uint_eq(pr.total, ROWS);
    ck_assert(ts_wait_until(pl_is_added, &added, 10000));
    ck_assert_int_eq(atomic_load(&added), 1);
    /* the log: started, progress with growing rows, done with them all */
    pthread_mutex_lock(&pl_mu);
    int n = pl_n;
    pthread_mutex_unlock(&pl_mu);
    ck_assert_int_ge(n, 3);
    ck_assert_str_eq(pl_lines[0].msg, "index build started");
    ck_assert_str_eq(pl_lines[0].index, "by_city");
    ck_assert_int_eq(pl_lines[0].rows, 0);
    ck_assert_int_gt(pl_lines[0].total, 0); /* RocksDB's estimate */
    ck_assert_str_eq(pl_lines[n - 1].msg, "index build done");
    ck_assert_int_eq(pl_lines[n - 1].rows, ROWS);
    ck_assert_int_eq(pl_lines[n - 1].total, ROWS);
    for (int i = 1; i < n - 1; i++) {
        ck_assert_str_eq(pl_lines[i].msg, "index build progress");
        ck_assert_int_gt(pl_lines[i].rows, pl_lines[i - 1].rows);
    }
    ck_assert_int_ge(n - 2, 5); /* about one line per tenth */
    ck_assert_int_le(n - 2, 11);
    /* bad arguments */
    ck_assert_err(troupe_tables_index_progress_wait(NULL, "u", "by_city", &pr),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_index_progress_wait(X.tables, "u", NULL, &pr),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_tables_index_progress_wait(X.tables, "", "x", &pr),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_tables_index_progress_wait(X.tables, "u", "by_city", NULL),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_tables_index_progress_wait(X.tables, "nope", "by_city", &pr),
        TROUPE_ENOTABLE);
    ck_assert_err(troupe_tables_index_progress_wait(X.tables, "u", "nope", &pr),
                  TROUPE_ENOINDEX);
    ck_assert_str_eq(troupe_errmsg(TROUPE_ENOINDEX),
                     "the table has no index \"nope\"");
}
END_TEST

/* ---- suite ---------------------------------------------------------- */

/* The primary keys a query on table "p" finds, sorted, joined by ','. */
static const char *
p_hits(const char *index, const char *values_json)
{
    static char out[256];
    jbuf v = J(values_json);
    troupe_index_query q = {.values = v.p, .values_len = v.n, .limit = 100};
    troupe_index_result *r = NULL;
    ck_assert_ok(troupe_tables_query_wait(X.tables, "p", index, &q, &r));
    char pks[16][16];
    size_t n = r->n < 16 ? r->n : 16;
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_lt(r->hits[i].pk_len, 16);
        memcpy(pks[i], r->hits[i].pk, r->hits[i].pk_len);
        pks[i][r->hits[i].pk_len] = '\0';
    }
    qsort(pks, n, sizeof(pks[0]), (int (*)(const void *, const void *))strcmp);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(pks[i], pks[i - 1]) == 0)
            continue; /* one row may match through several entries */
        if (out[0] != '\0')
            strcat(out, ",");
        strcat(out, pks[i]);
    }
    troupe_index_result_destroy(r);
    free(v.p);
    return out;
}

static troupe_err
p_put(const char *k, const char *json, bool insert)
{
    jbuf d = J(json);
    troupe_err e = insert ? troupe_table_insert_wait(X.tables, "p", k,
                                                     strlen(k), d.p, d.n, NULL)
                          : troupe_table_upsert_wait(X.tables, "p", k,
                                                     strlen(k), d.p, d.n, NULL);
    free(d.p);
    return e;
}

/* Tito's path rules and the CASEFOLD collation end to end: queries find a
 * row by an array element anywhere on its path, by a map entry (key and
 * value), and by any case of a string; a unique CASEFOLD index refuses
 * another row whose string folds alike, but not a row's own change of
 * case; "fooBar" and "foo_bar" stay apart. */
START_TEST(test_paths_and_casefold_through_tables)
{
    troupe_index_field tf = {.path = "items.tags", .type = TROUPE_FIELD_STRING};
    troupe_index_field nf = {.path = "names", .type = TROUPE_FIELD_STRING};
    troupe_index_field ef = {.path = "email",
                             .type = TROUPE_FIELD_STRING_CASEFOLD};
    troupe_index_spec ix[3] = {
        {.name = "by_tag", .fields = &tf, .n_fields = 1},
        {.name = "by_name", .fields = &nf, .n_fields = 1},
        {.name = "by_email", .unique = true, .fields = &ef, .n_fields = 1}};
    ck_assert_ok(troupe_tables_create_wait(X.tables, "p", ix, 3));
    ck_assert_ok(p_put("a",
                       "{\"items\": [{\"tags\": [\"red\", [\"blue\"]]}, "
                       "{\"tags\": \"green\"}], \"names\": {\"en\": "
                       "\"Apple\", \"fr\": \"Pomme\"}, \"email\": "
                       "\"Ann@Example.com\"}",
                       true));
    ck_assert_ok(p_put("b",
                       "{\"items\": {\"tags\": [\"blue\"]}, \"names\": "
                       "{\"en\": \"Berry\"}, \"email\": \"fooBar\"}",
                       true));
    ck_assert_str_eq(p_hits("by_tag", "[\"blue\"]"), "a,b");
    ck_assert_str_eq(p_hits("by_tag", "[\"green\"]"), "a");
    ck_assert_str_eq(p_hits("by_tag", "[\"red\"]"), "a");
    ck_assert_str_eq(p_hits("by_name", "[{\"en\": \"Apple\"}]"), "a");
    ck_assert_str_eq(p_hits("by_name", "[{\"fr\": \"Pomme\"}]"), "a");
    ck_assert_str_eq(p_hits("by_name", "[{\"fr\": \"Apple\"}]"), "");
    ck_assert_str_eq(p_hits("by_name", "[\"Apple\"]"), "");
    ck_assert_str_eq(p_hits("by_email", "[\"ANN@EXAMPLE.COM\"]"), "a");
    ck_assert_str_eq(p_hits("by_email", "[\"ann@example.com\"]"), "a");
    ck_assert_str_eq(p_hits("by_email", "[\"FOOBAR\"]"), "b");
    ck_assert_str_eq(p_hits("by_email", "[\"foo_bar\"]"), "");
    /* unique under folding: another row, another case, refused */
    ck_assert_err(p_put("c", "{\"email\": \"ann@example.COM\"}", true),
                  TROUPE_ECONSTRAINT);
    ck_assert_ok(p_put("c", "{\"email\": \"foo_bar\"}", true));
    /* the row's own change of case is no clash */
    ck_assert_ok(p_put("a", "{\"email\": \"ANN@example.com\"}", false));
    ck_assert_str_eq(p_hits("by_email", "[\"Ann@Example.Com\"]"), "a");
    ck_assert_str_eq(p_hits("by_tag", "[\"red\"]"), "");
    uint64_t n = 0;
    jbuf v = J("[\"foo_bar\"]");
    troupe_index_query q = {.values = v.p, .values_len = v.n};
    ck_assert_ok(troupe_tables_count_wait(X.tables, "p", "by_email", &q, &n));
    ck_assert_uint_eq(n, 1);
    free(v.p);
    /* a map-entry value must be one entry with a string key */
    v = J("[{\"en\": \"Apple\", \"fr\": \"Pomme\"}]");
    q = (troupe_index_query){.values = v.p, .values_len = v.n, .limit = 1};
    troupe_index_result *r = NULL;
    ck_assert_err(troupe_tables_query_wait(X.tables, "p", "by_name", &q, &r),
                  TROUPE_EINVAL);
    free(v.p);
    v = J("[{1: \"Apple\"}]");
    q = (troupe_index_query){.values = v.p, .values_len = v.n, .limit = 1};
    ck_assert_err(troupe_tables_query_wait(X.tables, "p", "by_name", &q, &r),
                  TROUPE_EINVAL);
    free(v.p);
}
END_TEST

Suite *
index_suite(void);

Suite *
index_suite(void)
{
    Suite *s = suite_create("index");
    TCase *t = tcase_create("defs");
    tcase_add_test(t, test_def_create_valid_specs_ok);
    tcase_add_loop_test(t, test_def_create_bad_spec_einval, 0,
                        (int)(sizeof(bad_specs) / sizeof(bad_specs[0])));
    tcase_add_test(t, test_def_create_null_args_einval);
    tcase_add_test(t, test_def_pack_unpack_round_trip);
    tcase_add_test(t, test_def_casefold_form_and_same_spec);
    tcase_add_loop_test(t, test_def_unpack_malformed_eproto, 0,
                        (int)(sizeof(bad_catalog) / sizeof(bad_catalog[0])));
    tcase_add_test(t, test_def_unpack_truncated_and_flipped_never_crash);
    tcase_add_test(t, test_register_fn_duplicate_eexist_bad_einval);
    suite_add_tcase(s, t);
    t = tcase_create("derive");
    tcase_add_loop_test(t, test_derive_sparse_rules_table, 0,
                        (int)(sizeof(derive_cases) / sizeof(derive_cases[0])));
    tcase_add_test(t, test_derive_appends_after_existing_entries);
    tcase_add_test(t, test_derive_malformed_doc_eproto);
    tcase_add_test(t, test_derive_key_order_equals_value_order);
    tcase_add_test(t, test_derive_equal_values_sort_by_pk_and_prefix_holds);
    tcase_add_test(t, test_derive_cartesian_over_cap_etoobig);
    tcase_add_test(t, test_derive_key_over_key_max_etoobig);
    tcase_add_test(t, test_derive_function_index_emits);
    tcase_add_test(t, test_derive_function_index_condition_applies);
    tcase_add_test(t, test_key_pk_plain_escaped_and_malformed);
    tcase_add_test(t, test_null_arguments_are_noops_or_einval);
    suite_add_tcase(s, t);
    t = tcase_create("query");
    tcase_add_checked_fixture(t, q_setup, q_teardown);
    tcase_add_test(t, test_query_exact_prefix_range_orders);
    tcase_add_test(t, test_query_rows_and_covering_values);
    tcase_add_test(t, test_query_limit_cursor_pages_both_directions);
    tcase_add_test(t, test_query_bad_arguments_clear_errors);
    tcase_add_test(t, test_query_rows_corrupt_or_missing_ecorrupt);
    tcase_add_test(t, test_query_rows_expiry_past_int64_is_ecorrupt);
    tcase_add_test(t, test_query_rows_expired_skipped_limit_filled);
    tcase_add_test(t, test_count_matches_entries);
    tcase_add_test(t, test_query_and_intersects_two_indexes);
    suite_add_tcase(s, t);
    t = tcase_create("verify");
    tcase_add_checked_fixture(t, q_setup, q_teardown);
    tcase_add_test(t, test_verify_clean_table_reports_nothing);
    tcase_add_test(t, test_verify_row_without_manifest);
    tcase_add_test(t, test_verify_manifest_without_row);
    tcase_add_test(t, test_verify_malformed_manifests);
    tcase_add_test(t, test_verify_cross_record_unknown_and_missing_entries);
    tcase_add_test(t, test_verify_orphan_and_bad_entries);
    tcase_add_test(t, test_verify_derive_finds_stale_manifest_and_bad_row);
    tcase_add_test(t, test_verify_bad_arguments_and_cursors);
    suite_add_tcase(s, t);
    t = tcase_create("actor");
    tcase_add_checked_fixture(t, a_setup, a_teardown);
    tcase_add_test(t, test_actor_query_count_and_pages);
    tcase_add_test(t, test_actor_bad_requests_clear_errors);
    tcase_add_test(t, test_actor_verify_in_steps_reports_mismatches);
    suite_add_tcase(s, t);
    t = tcase_create("change");
    tcase_add_checked_fixture(t, i_setup, i_teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_rebuild_repairs_entries_while_writes_go_on);
    tcase_add_test(t, test_rebuild_unique_duplicate_removes_index);
    tcase_add_test(t, test_drop_index_gone_at_once_then_swept);
    tcase_add_test(t, test_build_interrupted_resumes_after_saved_position);
    tcase_add_test(t, test_drop_sweep_interrupted_resumes_at_open);
    tcase_add_test(t, test_rebuild_interrupted_resumes_and_drops_old_family);
    tcase_add_test(t, test_rebuild_drop_bad_arguments_write_nothing);
    suite_add_tcase(s, t);
    t = tcase_create("change_wait");
    tcase_add_checked_fixture(t, i_setup_standalone, i_teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_rebuild_and_drop_wait_twins);
    tcase_add_test(t, test_build_progress_grows_to_total_and_is_logged);
    tcase_add_test(t, test_paths_and_casefold_through_tables);
    suite_add_tcase(s, t);
    return s;
}
