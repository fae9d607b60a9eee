/*
 * Writes the saved corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
 * from the real encoders: valid values of each format, plus the corrupt
 * cases the Check suites use. Run from the fuzz build:
 *   build-fuzz/tests/fuzz/fuzz_mkseeds tests/fuzz/corpus
 * Each file is one input as the target reads it (selector bytes first).
 * Deterministic: the same tree writes the same files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/gtx.h"
#include "troupe/internal/index.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/xa.h"
#include "troupe/kv.h"
#include "troupe/pack.h"

#include "fuzz_handshake.h"

static const char *root;

static void
put(const char *target, const char *name, const void *pre, size_t pl,
    const void *d, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fz_fail(__FILE__, __LINE__, "mkdir", "%s", path);
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (pl && fwrite(pre, 1, pl, f) != pl) ||
        (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0)
        fz_fail(__FILE__, __LINE__, "write", "%s", path);
}

/* A packer's bytes under a one-byte selector. */
static void
put_p(const char *target, const char *name, uint8_t sel, troupe_packer *p)
{
    size_t n;
    const void *d = troupe_pack_data(p, &n);
    FZ_CHECK(p->err == TROUPE_OK, "%s/%s", target, name);
    put(target, name, &sel, 1, d, n);
    troupe_pack_fini(p);
}

static troupe_index_def *
def(const char *name, bool unique, troupe_index_field *f, size_t nf,
    troupe_cond_op op, const char *cpath, const void *cval, size_t cvl,
    const char *fn, uint64_t id)
{
    troupe_index_spec s = {.name = name,
                           .unique = unique,
                           .fields = f,
                           .n_fields = nf,
                           .cond = {op, cpath, cval, cvl},
                           .fn_name = fn};
    troupe_index_def *d = NULL;
    FZ_ERR_IN(troupe_index_def_create(&s, id, &d), TROUPE_OK);
    return d;
}

/* ---- index definitions and catalog entries ---- */

static troupe_index_def *defs[6];

static void
index_defs(void)
{
    troupe_index_field name_f = {"name", TROUPE_FIELD_STRING};
    troupe_index_field comp[3] = {{"a.b", TROUPE_FIELD_INT},
                                  {"tags", TROUPE_FIELD_STRING_CASEFOLD},
                                  {"t", TROUPE_FIELD_TIMESTAMP}};
    troupe_index_field misc[3] = {{"f", TROUPE_FIELD_FLOAT},
                                  {"ok", TROUPE_FIELD_BOOL},
                                  {"raw", TROUPE_FIELD_BYTES}};
    defs[0] = def("by_name", false, &name_f, 1, 0, NULL, NULL, 0, NULL, 2);
    defs[1] = def("composite", true, comp, 3, TROUPE_COND_EXISTS, "a", NULL, 0,
                  NULL, 3);
    defs[2] = def("misc", false, misc, 3, TROUPE_COND_EQ, "kind", "\xa1x", 2,
                  NULL, 4);
    defs[3] =
        def("fnix", false, NULL, 0, TROUPE_COND_TRUE, "live", NULL, 0, "f", 5);
    defs[4] =
        def("ne", false, &name_f, 1, TROUPE_COND_NE, "k", "\x05", 1, NULL, 6);
    defs[5] = def("building", false, &name_f, 1, 0, NULL, NULL, 0, NULL, 7);
    troupe_index_def_set_ready(defs[5], false);
    for (int i = 0; i < 6; i++) {
        void *d;
        size_t n;
        FZ_ERR_IN(troupe_index_def_pack(defs[i], &d, &n), TROUPE_OK);
        char name[32];
        snprintf(name, sizeof(name), "def_%s", troupe_index_def_name(defs[i]));
        put("index_def", name, NULL, 0, d, n);
        troupe_free(d);
    }
    /* check_catalog's corrupt definition: "name" twice */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 7);
    troupe_pack_cstr(&p, "id");
    troupe_pack_uint(&p, 2);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "ix");
    troupe_pack_cstr(&p, "unique");
    troupe_pack_bool(&p, false);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "iy");
    troupe_pack_cstr(&p, "fields");
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, 2);
    troupe_pack_cstr(&p, "a");
    troupe_pack_cstr(&p, "string");
    troupe_pack_cstr(&p, "cond");
    troupe_pack_nil(&p);
    troupe_pack_cstr(&p, "fn");
    troupe_pack_nil(&p);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    put("index_def", "bad_repeated_name", NULL, 0, d, n);
    troupe_pack_fini(&p);
}

/* An entry as the catalog writes it, with defs[from..to). */
static void
entry(troupe_packer *p, uint64_t id, const char *name, size_t from, size_t to,
      size_t ndropped)
{
    troupe_pack_init(p);
    troupe_pack_map(p, ndropped ? 5 : 4);
    troupe_pack_cstr(p, "id");
    troupe_pack_uint(p, id);
    troupe_pack_cstr(p, "name");
    troupe_pack_cstr(p, name);
    troupe_pack_cstr(p, "version");
    troupe_pack_uint(p, 1);
    troupe_pack_cstr(p, "indexes");
    troupe_pack_array(p, (uint32_t)(to - from));
    for (size_t i = from; i < to; i++) {
        void *d;
        size_t n;
        FZ_ERR_IN(troupe_index_def_pack(defs[i], &d, &n), TROUPE_OK);
        troupe_pack_raw(p, d, n);
        troupe_free(d);
    }
    if (ndropped) {
        troupe_pack_cstr(p, "dropped");
        troupe_pack_array(p, (uint32_t)ndropped);
        for (size_t i = 0; i < ndropped; i++)
            troupe_pack_uint(p, 40 + i);
    }
}

static void
catalog(void)
{
    troupe_packer p;
    entry(&p, 1, "t", 0, 0, 0);
    put_p("catalog", "entry_plain", 0, &p);
    entry(&p, 9, "users", 0, 6, 0);
    put_p("catalog", "entry_indexes", 0, &p);
    entry(&p, 9, "caf\xc3\xa9", 1, 3, 2);
    put_p("catalog", "entry_dropped", 0, &p);
    entry(&p, 9, "a\0b", 0, 1, 0); /* packs "a": see entry_nul below */
    put_p("catalog", "entry_short", 0, &p);
    /* a name with a NUL inside, and an index repeated */
    troupe_pack_init(&p);
    troupe_pack_map(&p, 4);
    troupe_pack_cstr(&p, "id");
    troupe_pack_uint(&p, 1);
    troupe_pack_cstr(&p, "name");
    troupe_pack_str(&p, "a\0b", 3);
    troupe_pack_cstr(&p, "version");
    troupe_pack_uint(&p, 1);
    troupe_pack_cstr(&p, "indexes");
    troupe_pack_array(&p, 0);
    put_p("catalog", "bad_entry_nul", 0, &p);
    troupe_pack_init(&p);
    troupe_pack_map(&p, 4);
    troupe_pack_cstr(&p, "id");
    troupe_pack_uint(&p, 1);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "t");
    troupe_pack_cstr(&p, "version");
    troupe_pack_uint(&p, 1);
    troupe_pack_cstr(&p, "indexes");
    troupe_pack_array(&p, 2);
    for (int i = 0; i < 2; i++) {
        void *d;
        size_t n;
        FZ_ERR_IN(troupe_index_def_pack(defs[0], &d, &n), TROUPE_OK);
        troupe_pack_raw(&p, d, n);
        troupe_free(d);
    }
    put_p("catalog", "bad_entry_index_twice", 0, &p);
    /* check_catalog's: a key that is not a string, a repeated key */
    static const uint8_t bad_key[] = {0x00, 0x81, 0x01, 0x02};
    put("catalog", "bad_entry_int_key", NULL, 0, bad_key, sizeof(bad_key));
    static const uint8_t dup[] = {0x00, 0x82, 0xa2, 'i', 'd',
                                  0x01, 0xa2, 'i',  'd', 0x02};
    put("catalog", "bad_entry_repeated_key", NULL, 0, dup, sizeof(dup));
    troupe_pack_init(&p);
    troupe_pack_uint(&p, 12);
    put_p("catalog", "seq", 1, &p);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, UINT64_C(1) << 24);
    put_p("catalog", "floor", 2, &p);
    static const uint8_t bad_floor[][4] = {
        {2, 0x92, 0x02, 0x05}, {2, 0x91, 0x01}, {2, 0x92, 0x01, 0xff}};
    put("catalog", "bad_floor_version", NULL, 0, bad_floor[0], 4);
    put("catalog", "bad_floor_short", NULL, 0, bad_floor[1], 3);
    put("catalog", "bad_floor_negative", NULL, 0, bad_floor[2], 4);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, 3);
    troupe_pack_bin(&p, "\x21k\x00", 3);
    put_p("catalog", "position", 3, &p);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, 0);
    troupe_pack_bin(&p, "k", 1);
    put_p("catalog", "position_sweep", 3, &p);
    /* queue entries: key (2-byte length), value */
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_pack_init(&p);
    tq_entry qe = {.id = 3, .partitions = 4, .retention_ms = 86400000};
    FZ_ERR_IN(troupe__tq_entry_pack("emails", &qe, &w, &p), TROUPE_OK);
    const uint8_t *k;
    size_t kl, vl;
    FZ_ERR_IN(troupe_key_writer_finish(&w, &k, &kl), TROUPE_OK);
    const void *v = troupe_pack_data(&p, &vl);
    uint8_t buf[256];
    buf[0] = 4;
    buf[1] = (uint8_t)(kl >> 8);
    buf[2] = (uint8_t)kl;
    memcpy(buf + 3, k, kl);
    memcpy(buf + 3 + kl, v, vl);
    put("catalog", "queue_entry", NULL, 0, buf, 3 + kl + vl);
    troupe_pack_fini(&p);
    troupe_key_writer_reset(&w);
    troupe_key_put_string(&w, "queue", 5);
    troupe_key_put_string(&w, "a\0b", 3);
    FZ_ERR_IN(troupe_key_writer_finish(&w, &k, &kl), TROUPE_OK);
    buf[1] = (uint8_t)(kl >> 8);
    buf[2] = (uint8_t)kl;
    memcpy(buf + 3, k, kl);
    memcpy(buf + 3 + kl, v, 0);
    static const uint8_t qv[] = {0x94, 0x01, 0x02, 0x01, 0x00};
    memcpy(buf + 3 + kl, qv, sizeof(qv));
    put("catalog", "bad_queue_entry_nul", NULL, 0, buf, 3 + kl + sizeof(qv));
    troupe_key_writer_fini(&w);
    troupe_pack_init(&p);
    troupe_pack_uint(&p, (UINT64_C(1) << 32) + 1);
    put_p("catalog", "queue_mark", 5, &p);
}

/* ---- rows, manifests, queue rows ---- */

static void
put_key(const char *target, const char *name, const uint8_t *pre, size_t pl,
        troupe_key_writer *w)
{
    const uint8_t *k;
    size_t kl;
    FZ_ERR_IN(troupe_key_writer_finish(w, &k, &kl), TROUPE_OK);
    put(target, name, pre, pl, k, kl);
}

static void
rows(void)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_int(&p, 0);
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "ann");
    troupe_pack_cstr(&p, "created_at");
    troupe_pack_int(&p, 1700000000000);
    put_p("rows", "envelope", 0, &p);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_int(&p, 1700000000000);
    troupe_pack_map(&p, 0);
    put_p("rows", "envelope_expires", 0, &p);
    static const uint8_t bad_env[] = {0, 0x93, 0x01, 0xff, 0x80};
    put("rows", "bad_envelope_negative", NULL, 0, bad_env, sizeof(bad_env));
    /* a manifest of the row with primary key "k1", from derivation */
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_bytes(&w, "k1", 2);
    const uint8_t *pk;
    size_t pkl;
    FZ_ERR_IN(troupe_key_writer_finish(&w, &pk, &pkl), TROUPE_OK);
    uint8_t pre[64];
    pre[0] = 1;
    pre[1] = (uint8_t)pkl;
    memcpy(pre + 2, pk, pkl);
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "ann");
    size_t dl;
    const void *doc = troupe_pack_data(&p, &dl);
    troupe_index_entries en;
    troupe_index_entries_init(&en);
    FZ_ERR_IN(troupe_index_derive(defs[0], NULL, doc, dl, "k1", 2, &en),
              TROUPE_OK);
    troupe_packer m;
    troupe_pack_init(&m);
    troupe_pack_array(&m, 2);
    troupe_pack_uint(&m, 1);
    troupe_pack_array(&m, (uint32_t)en.n);
    for (size_t i = 0; i < en.n; i++) {
        troupe_pack_array(&m, 2);
        troupe_pack_uint(&m, troupe_index_def_id(defs[0]));
        troupe_pack_bin(&m, en.v[i].key, en.v[i].key_len);
    }
    size_t ml;
    const void *md = troupe_pack_data(&m, &ml);
    put("rows", "manifest", pre, 2 + pkl, md, ml);
    troupe_pack_fini(&m);
    troupe_index_entries_fini(&en);
    troupe_pack_fini(&p);
    static const uint8_t empty_man[] = {1, 0, 0x92, 0x01, 0x90};
    put("rows", "manifest_empty", NULL, 0, empty_man, sizeof(empty_man));
    /* queue rows */
    troupe_queue_event ev = {.id = "e1",
                             .id_len = 2,
                             .key = "k",
                             .key_len = 1,
                             .payload = "\x81\xa1x\x01",
                             .payload_len = 4,
                             .time_ms = 1700000000000,
                             .owner_kind = "user",
                             .owner_kind_len = 4,
                             .owner_id = "u\0"
                                         "7",
                             .owner_id_len = 3};
    uint8_t *v;
    size_t vl;
    FZ_ERR_IN(troupe__tq_value_pack(&ev, &v, &vl), TROUPE_OK);
    uint8_t sel = 2;
    put("rows", "queue_value", &sel, 1, v, vl);
    troupe_key_writer_reset(&w);
    troupe__tq_pkey(&w, 1, 1700000000000, 5, "e1", 2);
    sel = 3;
    put_key("rows", "pending_key", &sel, 1, &w);
    const uint8_t *k;
    size_t kl;
    FZ_ERR_IN(troupe_key_writer_finish(&w, &k, &kl), TROUPE_OK);
    uint8_t row[512];
    uint32_t part = troupe_queue_partition_of("k", 1, 2);
    troupe_key_writer_reset(&w);
    troupe__tq_pkey(&w, part, 1700000000000, 5, "e1", 2);
    FZ_ERR_IN(troupe_key_writer_finish(&w, &k, &kl), TROUPE_OK);
    row[0] = 5;
    row[1] = 1; /* 2 partitions */
    row[2] = (uint8_t)(kl >> 8);
    row[3] = (uint8_t)kl;
    memcpy(row + 4, k, kl);
    memcpy(row + 4 + kl, v, vl);
    put("rows", "queue_row_pending", NULL, 0, row, 4 + kl + vl);
    uint8_t skey[128];
    size_t sl = kl;
    memcpy(skey, k, kl);
    /* the id and owner entries of that row */
    troupe_key_writer_reset(&w);
    troupe__tq_ikey(&w, "e1", 2, skey, sl);
    uint8_t ipre[] = {6, 2, 'e', '1'};
    put_key("rows", "id_entry", ipre, sizeof(ipre), &w);
    troupe_key_writer_reset(&w);
    troupe__tq_okey(&w, "user", 4,
                    "u\0"
                    "7",
                    3, false, skey, sl);
    uint8_t opre[] = {7, 4, 'u', 's', 'e', 'r', 3, 'u', 0, '7'};
    put_key("rows", "owner_entry", opre, sizeof(opre), &w);
    troupe_key_writer_reset(&w);
    troupe__tq_ckey(&w, 1700000000500, 1700000000000, "e1", 2, 5);
    FZ_ERR_IN(troupe_key_writer_finish(&w, &k, &kl), TROUPE_OK);
    sel = 4;
    put("rows", "completed_key", &sel, 1, k, kl);
    row[2] = (uint8_t)(kl >> 8);
    row[3] = (uint8_t)kl;
    memcpy(row + 4, k, kl);
    memcpy(row + 4 + kl, v, vl);
    put("rows", "queue_row_completed", NULL, 0, row, 4 + kl + vl);
    memcpy(skey, k, kl);
    sl = kl;
    troupe_key_writer_reset(&w);
    troupe__tq_okey(&w, "user", 4,
                    "u\0"
                    "7",
                    3, true, skey, sl);
    put_key("rows", "owner_entry_completed", opre, sizeof(opre), &w);
    troupe_free(v);
    troupe_key_writer_fini(&w);
}

/* ---- keys ---- */

static void
keys(void)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "table", 5);
    troupe_key_put_string(&w, "a\0b", 3);
    troupe_key_put_int64(&w, -5);
    troupe_key_put_uint64(&w, UINT64_MAX);
    troupe_key_put_double(&w, -1.5);
    troupe_key_begin_tuple(&w);
    troupe_key_put_null(&w);
    troupe_key_put_bool(&w, true);
    troupe_key_put_bytes(&w, "\0\xff", 2);
    troupe_key_end_tuple(&w);
    uint8_t cut = 30;
    put_key("keycodec", "mixed", &cut, 1, &w);
    troupe_key_writer_fini(&w);
}

/* ---- derivation: spec bytes, pk, doc ---- */

static void
derive(void)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 4);
    troupe_pack_cstr(&p, "a");
    troupe_pack_array(&p, 2);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "b");
    troupe_pack_int(&p, 3);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "b");
    troupe_pack_array(&p, 2);
    troupe_pack_int(&p, 4);
    troupe_pack_int(&p, 5);
    troupe_pack_cstr(&p, "b");
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "k");
    troupe_pack_cstr(&p, "FooBar");
    troupe_pack_cstr(&p, "c");
    troupe_pack_cstr(&p, "foo_bar");
    troupe_pack_cstr(&p, "c");
    troupe_pack_array(&p, 3);
    troupe_pack_cstr(&p, "\xc3\x89t\xc3\xa9");
    troupe_pack_double(&p, 2.5);
    troupe_pack_bool(&p, true);
    troupe_pack_cstr(&p, "d");
    troupe_pack_bin(&p, "\0\1", 2);
    size_t dl;
    const uint8_t *doc = troupe_pack_data(&p, &dl);
    /* mode: nf in bits 1-3 (nf 2: mode 4), unique in bit 0; then per
     * field a type byte and a path (length byte, segment bytes); the
     * condition byte; pk span */
    const uint8_t specs[][16] = {
        /* a.b int, c string */
        {4, 1, 3, 0, 7, 0, 0, 1, 2, 0, 2, 'k', '1'},
        /* b casefold over a map, unique */
        {3, 6, 1, 1, 0, 2, 'k', '1'},
        /* c float; cond exists on d */
        {2, 2, 1, 2, 1, 1, 3, 2, 'k', '1'},
        /* function index */
        {0, 0, 2, 'p', 'k'},
    };
    const size_t lens[] = {13, 8, 10, 5};
    for (int i = 0; i < 4; i++) {
        uint8_t buf[512];
        memcpy(buf, specs[i], lens[i]);
        memcpy(buf + lens[i], doc, dl);
        char name[16];
        snprintf(name, sizeof(name), "spec%d", i);
        put("derive", name, NULL, 0, buf, lens[i] + dl);
    }
    uint8_t ff = 0xff;
    put("derive", "casefold", &ff, 1, "\xc3\x89T\xc3\xa9 \xe1\xba\x9e", 9);
    troupe_pack_fini(&p);
}

/* ---- replies ---- */

static void
replies(void)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, 1);
    troupe__table_pack_row(&p, "k1", 2, 0, "\x81\xa1x\x01", 4);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_bool(&p, true);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    uint8_t pre[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
    put("replies", "rows", pre, sizeof(pre), d, n);
    troupe_pack_fini(&p);
    uint8_t cur[16];
    troupe__cursor_put(cur, TROUPE_CURSOR_INDEX, 2, "\x20x\x00", 3);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, 4);
    troupe_pack_bin(&p, "\x20x\x00", 3);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_nil(&p);
    troupe_pack_uint(&p, 0);
    troupe_pack_bin(&p, cur, 12);
    troupe_pack_bool(&p, false);
    put_p("replies", "query", 1, &p);
    troupe_pack_init(&p);
    troupe_pack_uint(&p, 42);
    put_p("replies", "count", 2, &p);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, 4);
    troupe_pack_uint(&p, TROUPE_VERIFY_ORPHAN_ENTRY);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_uint(&p, 2);
    troupe_pack_bin(&p, "\x20x\x00", 3);
    troupe_pack_bin(&p, "\x11\0\0\0\0\0\0\0\1", 9);
    put_p("replies", "verify", 3, &p);
}

/* ---- cursors: mode byte, then the key ---- */

static void
cursors(void)
{
    static const struct {
        uint8_t mode;
        const char *key;
        size_t len;
    } c[] = {
        {0x80, "k03", 3}, /* scan after k03 */
        {0xc0, "k10", 3}, /* reverse scan */
        {0xa1, "k07", 3}, /* txn scan in [k05, k15) */
        {0x82, "\x20n1\x00\x21k01\x00", 9},
        {0xa3, "\x10\x80\0\0\0\0\0\0\x16\x21k01\x00", 15},
        {0x84, "k01", 3},
        {0x85, "\x20p\x00\x10\x80\0\0\0\0\0\0\0", 12},
        {0x86, "\x10\x80\0\0\0\0\0\0\0\x10\x80\0\0\0\0\0\0\0\x21k02\x00", 23},
        {0x00, "r\0\0\0\0\0\0\0\1k", 10},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "cursor%zu", i);
        put("cursor", name, &c[i].mode, 1, c[i].key, c[i].len);
    }
}

/* ---- actor requests: target, kind, flags (ask from the peer), body ---- */

static void
req(const char *name, uint8_t target, uint8_t kind, troupe_packer *p)
{
    uint8_t pre[3] = {target, kind, 3};
    size_t n = 0;
    const void *d = p != NULL ? troupe_pack_data(p, &n) : NULL;
    put("actors", name, pre, 3, d, n);
    if (p != NULL)
        troupe_pack_fini(p);
}

static void
actors(void)
{
    troupe_packer p;
    troupe_msg *m = NULL;
    /* kv: the builders' bodies */
    FZ_ERR_IN(troupe_kv_put_msg("k", 1, "v", 1, false, &m), TROUPE_OK);
    uint8_t pre[3] = {0, TROUPE_KV_PUT, 3};
    put("actors", "kv_put", pre, 3, troupe_msg_data(m), troupe_msg_len(m));
    troupe_msg_destroy(m);
    FZ_ERR_IN(troupe_kv_get_msg("k", 1, &m), TROUPE_OK);
    pre[1] = TROUPE_KV_GET;
    put("actors", "kv_get", pre, 3, troupe_msg_data(m), troupe_msg_len(m));
    troupe_msg_destroy(m);
    /* table: table_int.h's shapes */
    for (uint8_t t = 1; t <= 2; t++) {
        char name[32];
        troupe_pack_init(&p);
        troupe_pack_array(&p, 5);
        troupe_pack_bin(&p, "k99", 3);
        troupe_pack_map(&p, 2);
        troupe_pack_cstr(&p, "name");
        troupe_pack_cstr(&p, "zed");
        troupe_pack_cstr(&p, "email");
        troupe_pack_cstr(&p, "e1@x");
        troupe_pack_int(&p, 0);
        troupe_pack_uint(&p, 2);
        troupe_pack_bool(&p, true);
        snprintf(name, sizeof(name), "table%u_upsert", t);
        req(name, t, TABLE_UPSERT, &p);
        troupe_pack_init(&p);
        troupe_pack_array(&p, 2);
        troupe_pack_bin(&p, "k01", 3);
        troupe_pack_uint(&p, 2);
        snprintf(name, sizeof(name), "table%u_delete", t);
        req(name, t, TABLE_DELETE, &p);
        troupe_pack_init(&p);
        troupe_pack_array(&p, 1);
        troupe_pack_bin(&p, "k02", 3);
        snprintf(name, sizeof(name), "table%u_get", t);
        req(name, t, TABLE_GET, &p);
        troupe_pack_init(&p);
        troupe_pack_array(&p, 1);
        troupe_pack_array(&p, 2);
        troupe_pack_bin(&p, "k02", 3);
        troupe_pack_bin(&p, "k03", 3);
        snprintf(name, sizeof(name), "table%u_get_many", t);
        req(name, t, TABLE_GET_MANY, &p);
        troupe_pack_init(&p);
        troupe_pack_array(&p, 5);
        troupe_pack_bin(&p, "k01", 3);
        troupe_pack_bin(&p, "k20", 3);
        troupe_pack_bin(&p, "k04", 3);
        troupe_pack_uint(&p, 4);
        troupe_pack_bool(&p, false);
        snprintf(name, sizeof(name), "table%u_scan", t);
        req(name, t, TABLE_SCAN, &p);
    }
    /* index: the builders' bodies */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_cstr(&p, "n1");
    size_t vl;
    const void *v = troupe_pack_data(&p, &vl);
    troupe_index_query q = {.values = v, .values_len = vl, .limit = 3};
    FZ_ERR_IN(troupe_index_query_msg("by_name", &q, &m), TROUPE_OK);
    pre[0] = 3;
    pre[1] = TROUPE_INDEX_QUERY;
    put("actors", "index_query", pre, 3, troupe_msg_data(m), troupe_msg_len(m));
    troupe_msg_destroy(m);
    FZ_ERR_IN(troupe_index_count_msg("by_name", &q, &m), TROUPE_OK);
    pre[1] = TROUPE_INDEX_COUNT;
    put("actors", "index_count", pre, 3, troupe_msg_data(m), troupe_msg_len(m));
    troupe_msg_destroy(m);
    troupe_pack_fini(&p);
    FZ_ERR_IN(troupe_index_verify_msg(10, true, NULL, 0, &m), TROUPE_OK);
    pre[1] = TROUPE_INDEX_VERIFY;
    put("actors", "index_verify", pre, 3, troupe_msg_data(m),
        troupe_msg_len(m));
    troupe_msg_destroy(m);
    /* queue partitions and the TTL scanner: their own kinds, locally */
    troupe_pack_init(&p);
    troupe_pack_int(&p, 5);
    uint8_t loc[3] = {4, TQ_NOTIFY, 1};
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    put("actors", "partition_notify", loc, 3, d, n);
    troupe_pack_fini(&p);
    uint8_t tick[3] = {6, 0, 0};
    put("actors", "ttl_tick", tick, 3, NULL, 0);
    uint8_t stale[3] = {1, TABLE_GET, 3 | 8};
    put("actors", "stale_generation", stale, 3, NULL, 0);
}

/* HELLO_ACK and AUTH frames carrying the proof the real peer would send
 * for the transcript fuzz_handshake checks them against, and one whose
 * mac is a bit off. */
static void
handshake(void)
{
    troupe__auth_cfg c = {.node_id = FZ_HS_SELF,
                          .secret = FZ_HS_SECRET,
                          .secret_len = strlen(FZ_HS_SECRET)};
    troupe__auth *a = NULL;
    FZ_CHECK(troupe__auth_create(&c, &a) == TROUPE_OK, "auth");
    static const uint8_t nonce[TROUPE_WIRE_NONCE_LEN] = {9, 8, 7};
    static const troupe_frame_type types[] = {TROUPE_FRAME_HELLO_ACK,
                                              TROUPE_FRAME_AUTH};
    for (int i = 0; i < 2; i++) {
        for (int bad = 0; bad < 2; bad++) {
            uint8_t sel = (uint8_t)(5 + 20 * i);
            troupe_frame_hdr h = {.type = types[i],
                                  .sender = 3,
                                  .incarnation = 99,
                                  .nonce = i == 0 ? nonce : NULL};
            troupe__transcript t = fz_hs_transcript(&h, sel);
            troupe__proof pr;
            FZ_CHECK(troupe__auth_prove(a, &t, &pr) == TROUPE_OK, "prove");
            pr.mac[0] ^= (uint8_t)bad;
            troupe_wire_ctl ctl = {
                .type = h.type,
                .sender = h.sender,
                .incarnation = h.incarnation,
                .nonce = h.nonce,
                .proof = {.mac = pr.mac, .mac_len = TROUPE_WIRE_MAC_LEN}};
            uint8_t buf[TROUPE_WIRE_CTL_MAX];
            size_t len = 0;
            FZ_CHECK(troupe_wire_encode_ctl(&ctl, buf, sizeof(buf), &len) ==
                         TROUPE_OK,
                     "encode");
            char name[32];
            snprintf(name, sizeof(name), "%s%s", i == 0 ? "hello_ack" : "auth",
                     bad ? "_bad_mac" : "");
            put("handshake", name, &sel, 1, buf, len);
        }
    }
    troupe__auth_destroy(a);
}

/* ---- global transactions (troupe.gtx) ---- */

/* A document as the coordinator writes it: mode m, n steps whose every
 * op is set, final or not. No selector byte: the target reads it whole. */
static void
gtx_doc(const char *name, troupe_gtx_mode m, uint32_t n, bool final)
{
    tc_step steps[4];
    memset(steps, 0, sizeof(steps));
    static char target[] = "bank.t";
    static uint8_t payload[] = {0x81, 0xa1, 'n', 0x01};
    for (uint32_t i = 0; i < n; i++)
        for (unsigned o = 0; troupe_gtx_op_at(m, o) != NULL; o++)
            steps[i].call[o] = (tc_call){.target = target,
                                         .payload = payload,
                                         .payload_len = sizeof(payload),
                                         .state = o == 0 ? TC_DONE : TC_TODO,
                                         .attempts = o == 0 ? 1 : 0,
                                         .last = o == 0 ? 1 : 0};
    /* a workflow's records: steps, an awakeable, a version marker */
    static char *wf_names[4] = {"reserve", "charge", "payment", "v-ship"};
    static const tc_wf_kind wf_kinds[4] = {TC_WF_STEP, TC_WF_STEP, TC_WF_AWAKE,
                                           TC_WF_VERSION};
    bool wf = m == TROUPE_MODE_WORKFLOW;
    for (uint32_t i = 0; wf && i < n; i++) {
        steps[i].name = wf_names[i];
        steps[i].kind = wf_kinds[i];
        steps[i].version = wf_kinds[i] == TC_WF_VERSION ? 2 : 0;
        if (wf_kinds[i] != TC_WF_STEP)
            steps[i].call[1] = (tc_call){0}; /* a step alone compensates */
        steps[i].call[0].state = i == 2 ? TC_TODO : TC_DONE;
    }
    static char query[] = "shop.query";
    static char reason[] = "branch 02 action: FAILURE";
    tc_gtx g = {.mode = m,
                .status = final ? TC_FAILED : TC_SUBMITTED,
                .n_steps = n,
                .steps = steps,
                .reason = final ? reason : NULL,
                .query = {.target = m == TROUPE_MODE_MSG || wf ? query : NULL,
                          .payload = wf ? payload : NULL,
                          .payload_len = wf ? sizeof(payload) : 0,
                          .state = TC_TODO},
                .hold = wf ? TC_HOLD_AWAIT : TC_HOLD_NONE,
                .attempts = 2,
                .due_ms = 1700000000500,
                .created_ms = 1700000000000,
                .updated_ms = 1700000000400,
                .finished_ms = final ? 1700000000450 : 0,
                .opts = {0, 0, 10000, 300000, 30000}};
    troupe_packer p;
    troupe_pack_init(&p);
    FZ_CHECK(troupe__gtx_encode(&g, &p) == TROUPE_OK, "gtx %s", name);
    size_t len = 0;
    const void *d = troupe_pack_data(&p, &len);
    tc_gtx *back = NULL; /* a seed the decoder takes */
    FZ_CHECK(troupe__gtx_decode(d, len, &back) == TROUPE_OK, "gtx %s decodes",
             name);
    troupe__gtx_free(back);
    put("gtx", name, NULL, 0, d, len);
    troupe_pack_fini(&p);
}

static void
gtxs(void)
{
    gtx_doc("saga_2", TROUPE_MODE_SAGA, 2, false);
    gtx_doc("saga_failed", TROUPE_MODE_SAGA, 3, true);
    gtx_doc("tcc_2", TROUPE_MODE_TCC, 2, false);
    gtx_doc("msg_1", TROUPE_MODE_MSG, 1, false);
    gtx_doc("xa_2", TROUPE_MODE_XA, 2, true);
    gtx_doc("workflow_4", TROUPE_MODE_WORKFLOW, 4, false);
}

/* ---- workflow runs' replies (fuzz_wfrun) ---- */

/* A reply [end, reason, updates(, awaited)] for document sel of
 * fuzz_wfrun.c, with one update at pos (kind, name, state; a
 * compensation when comp). */
static void
wf_reply(const char *name, uint8_t sel, uint32_t end, uint32_t pos,
         uint32_t kind, const char *rname, uint32_t state, bool comp)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, end == TC_WF_AWAIT ? 4 : 3);
    troupe_pack_uint(&p, end);
    troupe_pack_nil(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, 7);
    troupe_pack_uint(&p, pos);
    troupe_pack_uint(&p, kind);
    troupe_pack_cstr(&p, rname);
    troupe_pack_uint(&p, state);
    troupe_pack_bin(&p, "ok", 2);
    if (comp) {
        troupe_pack_array(&p, 2);
        troupe_pack_cstr(&p, "bank.undo");
        troupe_pack_bin(&p, "u", 1);
    } else {
        troupe_pack_nil(&p);
    }
    troupe_pack_int(&p, 0);
    if (end == TC_WF_AWAIT)
        troupe_pack_uint(&p, 1);
    size_t len = 0;
    const void *d = troupe_pack_data(&p, &len);
    put("wfrun", name, &sel, 1, d, len);
    troupe_pack_fini(&p);
}

static void
wfruns(void)
{
    wf_reply("register", 0, TC_WF_CONTINUE, 0, TC_WF_STEP, "reserve", TC_TODO,
             true);
    wf_reply("verdict", 1, TC_WF_SUCCEEDED, 0, TC_WF_STEP, "reserve", TC_DONE,
             false);
    wf_reply("refused", 1, TC_WF_FAILED, 0, TC_WF_STEP, "reserve", TC_REFUSED,
             false);
    wf_reply("await", 2, TC_WF_AWAIT, 3, TC_WF_VERSION, "v-ship", TC_DONE,
             false);
}

/* ---- prepared XA records (fuzz_xarec) ---- */

static void
xarecs(void)
{
    static const unsigned char ka[] = "alice", kb[] = "bob", kz[] = "zed";
    static const unsigned char doc[] = {0x81, 0xa1, 'v', 0x05};
    /* an upsert and a delete; an update with an expiry */
    ttxn_key a[2] = {{.kind = TROUPE__PART_UPSERT,
                      .key = ka,
                      .klen = 5,
                      .doc = doc,
                      .dlen = sizeof(doc)},
                     {.kind = TROUPE__PART_DELETE, .key = kz, .klen = 3}};
    ttxn_key b[1] = {{.kind = TROUPE__PART_UPDATE,
                      .expires = 1700000009000,
                      .nostamp = true,
                      .key = kb,
                      .klen = 3,
                      .doc = doc,
                      .dlen = sizeof(doc)}};
    ttxn_range rg[1] = {{.start = ka, .slen = 5, .end = kz, .elen = 3}};
    txa_tab tabs[2] = {{.name = "accounts", .id = 7, .keys = a, .n = 2},
                       {.name = "audit",
                        .id = 9,
                        .keys = b,
                        .n = 1,
                        .ranges = rg,
                        .nranges = 1}};
    static const unsigned char batch[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    txa_rec r = {.xid = "order-7/01",
                 .xlen = 10,
                 .prep_ms = 1700000000000,
                 .tabs = tabs,
                 .ntabs = 2,
                 .batch = batch,
                 .blen = sizeof(batch)};
    troupe_packer p;
    troupe_pack_init(&p);
    troupe__xa_rec_pack(&r, &p);
    size_t len = 0;
    const void *d = troupe_pack_data(&p, &len);
    txa_rec back; /* a seed the parser takes */
    FZ_CHECK(troupe__xa_rec_parse(d, len, &back) == TROUPE_OK, "xa seed");
    troupe__xa_rec_fini(&back);
    put("xarec", "two_tables", NULL, 0, d, len);
    troupe_pack_fini(&p);
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    root = argv[1];
    index_defs();
    catalog();
    rows();
    keys();
    derive();
    replies();
    cursors();
    actors();
    handshake();
    gtxs();
    wfruns();
    xarecs();
    for (int i = 0; i < 6; i++)
        troupe_index_def_destroy(defs[i]);
    return 0;
}
