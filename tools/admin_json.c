/*
 * msgpack to JSON for the admin endpoint: queue payloads and table
 * documents (admin_route.h has the mapping).
 *
 * The input is stored data, so anything: troupe_reader checks it in one
 * bounded pass first (well-formed, one object, at most
 * TROUPE_WIRE_DEPTH_MAX deep). The output is bounded separately, because
 * a small msgpack document can make a large JSON tree: every value costs
 * jansson an allocation, so both the values and an estimate of the JSON
 * text (strings and hex counted at their size) have a budget, and the
 * conversion fails past either instead of growing memory with the input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_route.h"
#include "troupe/pack.h"

#define JSON_TEXT_MAX (4u * 1024u * 1024u)
#define JSON_VALUES_MAX (256u * 1024u)

typedef struct conv {
    troupe_reader r;
    size_t text, values;
    const char *why;
} conv;

static bool
charge(conv *c, size_t bytes)
{
    c->values++;
    c->text += bytes + 2;
    if (c->values > JSON_VALUES_MAX || c->text > JSON_TEXT_MAX) {
        c->why = "the document is too large to show as JSON";
        return false;
    }
    return true;
}

static json_t *
hexobj(const char *key, const void *p, size_t n)
{
    char *h = admin_hex(p, n);
    json_t *o = h ? json_pack("{s:s}", key, h) : NULL;
    free(h);
    return o;
}

static json_t *
value(conv *c);

/* A map key as text: strings as they are, anything else as its JSON. */
static char *
key_text(conv *c, size_t *len)
{
    if (troupe_read_peek(&c->r) == TROUPE_MP_STR) {
        const char *s;
        if (troupe_read_str(&c->r, SIZE_MAX, &s, len) != TROUPE_OK)
            return NULL;
        char *k = malloc(*len + 1);
        if (k != NULL) {
            memcpy(k, s, *len);
            k[*len] = '\0';
        }
        return k;
    }
    json_t *v = value(c);
    if (v == NULL)
        return NULL;
    char *k = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    if (k != NULL)
        *len = strlen(k);
    return k;
}

static json_t *
container(conv *c, bool map)
{
    uint32_t n;
    troupe_err e =
        map ? troupe_read_map(&c->r, &n) : troupe_read_array(&c->r, &n);
    if (e != TROUPE_OK || !charge(c, 0))
        return NULL;
    json_t *out = map ? json_object() : json_array();
    for (uint32_t i = 0; out != NULL && i < n; i++) {
        if (!map) {
            json_t *v = value(c);
            if (v == NULL || json_array_append_new(out, v) != 0) {
                json_decref(out);
                out = NULL;
            }
            continue;
        }
        size_t kl = 0;
        char *k = key_text(c, &kl);
        json_t *v = k && charge(c, kl) ? value(c) : NULL;
        /* jansson wants UTF-8 keys: others are refused */
        if (v == NULL || json_object_setn_new(out, k, kl, v) != 0) {
            if (v != NULL && c->why == NULL)
                c->why = "a map key is not UTF-8";
            json_decref(out);
            out = NULL;
        }
        free(k);
    }
    return out;
}

static json_t *
value(conv *c)
{
    bool b;
    uint64_t u;
    int64_t i;
    double d;
    const void *p;
    size_t n;
    json_t *v = NULL;
    switch (troupe_read_peek(&c->r)) {
    case TROUPE_MP_NIL:
        if (troupe_read_nil(&c->r) == TROUPE_OK && charge(c, 4))
            v = json_null();
        break;
    case TROUPE_MP_BOOL:
        if (troupe_read_bool(&c->r, &b) == TROUPE_OK && charge(c, 5))
            v = json_boolean(b);
        break;
    case TROUPE_MP_UINT:
        if (troupe_read_uint(&c->r, &u) != TROUPE_OK || !charge(c, 20))
            break;
        if (u <= INT64_MAX) {
            v = json_integer((json_int_t)u);
        } else {
            char buf[24];
            snprintf(buf, sizeof(buf), "%llu", (unsigned long long)u);
            v = json_string(buf);
        }
        break;
    case TROUPE_MP_INT:
        if (troupe_read_int(&c->r, &i) == TROUPE_OK && charge(c, 20))
            v = json_integer((json_int_t)i);
        break;
    case TROUPE_MP_FLOAT:
        if (troupe_read_double(&c->r, &d) != TROUPE_OK || !charge(c, 24))
            break;
        v = isfinite(d) ? json_real(d)
            : isnan(d)  ? json_string("NaN")
                        : json_string(d > 0 ? "Infinity" : "-Infinity");
        break;
    case TROUPE_MP_STR:
        if (troupe_read_str(&c->r, SIZE_MAX, (const char **)&p, &n) !=
                TROUPE_OK ||
            !charge(c, 2 * n))
            break;
        v = json_stringn(p, n);
        if (v == NULL) /* not UTF-8 */
            v = hexobj("bin", p, n);
        break;
    case TROUPE_MP_BIN:
        if (troupe_read_bin(&c->r, SIZE_MAX, &p, &n) == TROUPE_OK &&
            charge(c, 2 * n))
            v = hexobj("bin", p, n);
        break;
    case TROUPE_MP_ARRAY:
        return container(c, false);
    case TROUPE_MP_MAP:
        return container(c, true);
    case TROUPE_MP_EXT:
        /* the raw bytes: header (type, length) then data */
        if (troupe_read_raw(&c->r, &p, &n) == TROUPE_OK && charge(c, 2 * n))
            v = hexobj("ext", p, n);
        break;
    default:
        break;
    }
    if (v == NULL && c->why == NULL)
        c->why = "out of memory";
    return v;
}

json_t *
admin_msgpack_to_json(const void *p, size_t n, const char **why)
{
    conv c = {.why = NULL};
    if (troupe_reader_init(&c.r, p, n) != TROUPE_OK) {
        *why = "not one well-formed msgpack object (or nested too deep)";
        return NULL;
    }
    json_t *v = value(&c);
    if (v != NULL && troupe_read_end(&c.r) != TROUPE_OK) {
        json_decref(v);
        v = NULL;
        c.why = "trailing bytes";
    }
    if (v == NULL)
        *why = c.why ? c.why : "malformed msgpack";
    return v;
}
