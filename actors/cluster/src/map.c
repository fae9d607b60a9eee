/*
 * The partition map (troupe/map.h): one etcd key, one JSON document,
 * versioned by the key's mod_revision.
 *
 * Why one key and not a key per unit: a change that moves several units
 * (a rebalance, later) must be one atomic step that every node sees at
 * one revision, and a single compare-and-set on one key gives that with
 * nothing else to agree on. The map stays small (at most
 * TROUPE_MAP_UNITS_MAX units, well under etcd's request limit).
 *
 * The decoder is strict: the map is what every node acts on, so a
 * document with an unknown format, a bad unit name, an owner out of
 * range or a unit twice is EPROTO, never a partial map.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/map.h"

#define FORMAT 1
#define NAME_MAX_ 64
#define RETRIES 16

static bool
name_ok(const char *s, size_t n)
{
    if (n == 0 || n > NAME_MAX_)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static bool
shard_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    return v <= 65535;
}

bool
troupe_map_unit_ok(const char *unit)
{
    if (unit == NULL ||
        strnlen(unit, TROUPE_MAP_UNIT_MAX + 1) > TROUPE_MAP_UNIT_MAX)
        return false;
    if (strncmp(unit, "coord:", 6) == 0)
        return shard_ok(unit + 6);
    const char *rest = NULL;
    if (strncmp(unit, "table:", 6) == 0 || strncmp(unit, "queue:", 6) == 0)
        rest = unit + 6;
    if (rest == NULL)
        return false;
    const char *colon = strchr(rest, ':');
    return colon != NULL && name_ok(rest, (size_t)(colon - rest)) &&
           shard_ok(colon + 1);
}

static int
cmp_entry(const void *a, const void *b)
{
    return strcmp(((const troupe_map_entry *)a)->unit,
                  ((const troupe_map_entry *)b)->unit);
}

void
troupe_map_fini(troupe_map *m)
{
    if (m == NULL)
        return;
    troupe_free(m->units);
    memset(m, 0, sizeof(*m));
}

troupe_err
troupe_map_decode(const uint8_t *value, size_t len, troupe_map *m)
{
    if (m == NULL || (value == NULL && len > 0))
        return TROUPE_EINVAL;
    memset(m, 0, sizeof(*m));
    if (len == 0)
        return TROUPE_EPROTO;
    json_error_t je;
    json_t *doc =
        json_loadb((const char *)value, len, JSON_REJECT_DUPLICATES, &je);
    json_t *fmt = json_object_get(doc, "format");
    json_t *units = json_object_get(doc, "units");
    troupe_err e = TROUPE_OK;
    if (!json_is_object(doc) || !json_is_integer(fmt) ||
        json_integer_value(fmt) != FORMAT || !json_is_object(units) ||
        json_object_size(doc) != 2 ||
        json_object_size(units) > TROUPE_MAP_UNITS_MAX)
        e = TROUPE_EPROTO;
    size_t n = e == TROUPE_OK ? json_object_size(units) : 0;
    if (n > 0 && (m->units = troupe_calloc(n, sizeof(*m->units))) == NULL)
        e = TROUPE_ENOMEM;
    const char *k;
    json_t *v;
    if (e == TROUPE_OK) {
        json_object_foreach(units, k, v)
        {
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : 0;
            if (!troupe_map_unit_ok(k) || id < 1 || id >= UINT32_MAX) {
                e = TROUPE_EPROTO;
                break;
            }
            snprintf(m->units[m->n].unit, sizeof(m->units[m->n].unit), "%s", k);
            m->units[m->n++].node = (uint32_t)id;
        }
    }
    json_decref(doc);
    if (e != TROUPE_OK) {
        troupe_map_fini(m);
        return e;
    }
    qsort(m->units, m->n, sizeof(*m->units), cmp_entry);
    return TROUPE_OK;
}

troupe_err
troupe_map_encode(const troupe_map *m, char **out)
{
    if (m == NULL || out == NULL || m->n > TROUPE_MAP_UNITS_MAX)
        return TROUPE_EINVAL;
    json_t *doc = json_object();
    json_t *units = json_object();
    bool ok = doc != NULL && units != NULL &&
              json_object_set_new(doc, "format", json_integer(FORMAT)) == 0 &&
              json_object_set(doc, "units", units) == 0;
    troupe_err e = ok ? TROUPE_OK : TROUPE_ENOMEM;
    for (size_t i = 0; e == TROUPE_OK && i < m->n; i++) {
        if (!troupe_map_unit_ok(m->units[i].unit) || m->units[i].node == 0 ||
            m->units[i].node == UINT32_MAX ||
            json_object_get(units, m->units[i].unit) != NULL)
            e = TROUPE_EINVAL;
        else if (json_object_set_new(units, m->units[i].unit,
                                     json_integer(m->units[i].node)) != 0)
            e = TROUPE_ENOMEM;
    }
    char *s =
        e == TROUPE_OK ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(units);
    json_decref(doc);
    if (e == TROUPE_OK && s == NULL)
        e = TROUPE_ENOMEM;
    if (e != TROUPE_OK)
        return e;
    *out = troupe_malloc(strlen(s) + 1);
    if (*out != NULL)
        strcpy(*out, s);
    free(s); /* jansson's allocator is malloc */
    return *out ? TROUPE_OK : TROUPE_ENOMEM;
}

troupe_err
troupe_map_read_wait(troupe_etcd *etcd, troupe_map *out)
{
    if (etcd == NULL || out == NULL)
        return TROUPE_EINVAL;
    memset(out, 0, sizeof(*out));
    troupe_etcd_result r;
    troupe_err e =
        troupe_etcd_get_wait(etcd, TROUPE_MAP_KEY, strlen(TROUPE_MAP_KEY), &r);
    if (e != TROUPE_OK)
        return e;
    if (r.n == 1) {
        e = troupe_map_decode(r.kvs[0].value, r.kvs[0].value_len, out);
        out->revision = r.kvs[0].mod_revision;
    }
    troupe_etcd_result_fini(&r);
    return e;
}

uint32_t
troupe_map_owner(const troupe_map *m, const char *unit)
{
    if (m == NULL || unit == NULL)
        return 0;
    troupe_map_entry key;
    snprintf(key.unit, sizeof(key.unit), "%s", unit);
    troupe_map_entry *hit =
        m->n ? bsearch(&key, m->units, m->n, sizeof(*m->units), cmp_entry)
             : NULL;
    return hit ? hit->node : 0;
}

/* m with unit set to node (added in order, or changed). */
static troupe_err
map_set(troupe_map *m, const char *unit, uint32_t node)
{
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->units[i].unit, unit) == 0) {
            m->units[i].node = node;
            return TROUPE_OK;
        }
    }
    if (m->n == TROUPE_MAP_UNITS_MAX)
        return TROUPE_EFULL;
    troupe_map_entry *u =
        troupe_realloc(m->units, (m->n + 1) * sizeof(*m->units));
    if (u == NULL)
        return TROUPE_ENOMEM;
    m->units = u;
    snprintf(u[m->n].unit, sizeof(u[m->n].unit), "%s", unit);
    u[m->n++].node = node;
    qsort(m->units, m->n, sizeof(*m->units), cmp_entry);
    return TROUPE_OK;
}

troupe_err
troupe_map_assign_wait(troupe_etcd *etcd, const char *unit, uint32_t node,
                       int64_t expect_rev, int64_t *new_rev)
{
    if (etcd == NULL || !troupe_map_unit_ok(unit) || node == 0 ||
        node == UINT32_MAX || expect_rev < -1)
        return TROUPE_EINVAL;
    troupe_err e = troupe__block_check("troupe_map_assign_wait");
    if (e != TROUPE_OK)
        return e;
    for (int attempt = 0; attempt < RETRIES; attempt++) {
        troupe_map m;
        if ((e = troupe_map_read_wait(etcd, &m)) != TROUPE_OK)
            return e;
        if (expect_rev >= 0 && m.revision != expect_rev) {
            troupe_map_fini(&m);
            return TROUPE_ECONFLICT;
        }
        int64_t from = m.revision;
        char *doc = NULL;
        e = map_set(&m, unit, node);
        if (e == TROUPE_OK)
            e = troupe_map_encode(&m, &doc);
        troupe_map_fini(&m);
        if (e != TROUPE_OK)
            return e;
        troupe_etcd_result r;
        e = troupe_etcd_cas_wait(etcd, TROUPE_MAP_KEY, strlen(TROUPE_MAP_KEY),
                                 from, doc, strlen(doc), 0, &r);
        troupe_free(doc);
        if (e != TROUPE_OK)
            return e;
        if (r.succeeded) {
            /* the txn's revision is the put's: the map's new version */
            if (new_rev != NULL)
                *new_rev = r.revision;
            return TROUPE_OK;
        }
        if (expect_rev >= 0)
            return TROUPE_ECONFLICT;
    }
    return TROUPE_ECONFLICT;
}
