/*
 * The table workload of the crash harness (docs/crash-testing.md, "The
 * table loop") and its check.
 *
 * Three tables, each with a unique index, a composite index and an array
 * or function index (table 2 has both). The child writes through the
 * table actors (insert, update, upsert, delete), one submitting thread
 * with a window in flight, and reports `REC_ACK <seq>` only after a
 * write's completion said OK. What every seq does is a pure function of
 * (cycle, seq) and of the rows the previous cycle left (its "targets"),
 * which the child reads at start and the parent kept from its previous
 * check, so the parent knows the exact document every row may hold:
 *
 *   seq s writes table s % 3; u = s / 3 is its number in that table.
 *   u % 4 == 3: an "old" write, o = u / 4: on the o-th row of the previous
 *               cycle (key order): update it (o even) or delete it (o odd);
 *               once the targets run out, an upsert creating a new row.
 *   otherwise:  a "fresh" write, f = u - u / 4, on row (cycle, slot), with
 *               32 rows in flight: step 0 inserts, step 1 updates (even
 *               slots) or upserts (odd slots), step 2 upserts.
 *
 * Writes to one key apply in arrival order (table.h), so a row of this
 * cycle holds the result of a prefix of its steps, identified by the
 * document's "v"; a target holds its old document, the update's, or is
 * gone (delete). Deletes only hit rows that were durable when the cycle
 * began, so an absent row is never ambiguous.
 *
 * The transaction mode (child-table-txn, when actors/txn is built): seq s
 * is one transaction that inserts row (cycle, s) in all three tables and,
 * while the previous cycle's rows last, updates its s-th row in all three
 * tables: four to six rows, all or nothing.
 */
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/index.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/index.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/runtime.h"
#include "troupe/table.h"
#ifdef TROUPE_CRASH_TXN
#include "troupe/txn.h"
#endif

#define NT 3
#define SLOTS 32
#define SPILL (1ull << 40) /* ids of the upserts past the targets */
#define TAG_OLD 1000       /* tag of an old update: TAG_OLD + cycle */
#define FN_NAME "crash_fn"
#define ROW_KEY_LEN 17

static const char *const tnames[NT] = {"crash_users", "crash_orders",
                                       "crash_items"};

/* ---- shared: keys, documents, the function index, the op mapping ------- */

static void
put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t
get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void
row_key(uint8_t *k, uint64_t cycle, uint64_t id)
{
    k[0] = 'r';
    put_be64(k + 1, cycle);
    put_be64(k + 9, id);
}

/*
 * The document of row (kc, id) of table t with tag v, packed into *p
 * (init'ed by the caller). Fields: c, id, v, email (unique), grp and n
 * (composite; grp left out when v % 3 == 2: the row leaves that index),
 * tags (array; empty when v % 4 == 3), meta.grp (table 1: a nested path),
 * pad (bin).
 */
static void
doc_pack(troupe_packer *p, int t, uint64_t kc, uint64_t id, uint64_t v)
{
    bool grp = v % 3 != 2;
    troupe_pack_map(p, 7 + (grp ? 1 : 0) + (t == 1 ? 1 : 0));
    troupe_pack_cstr(p, "c");
    troupe_pack_uint(p, kc);
    troupe_pack_cstr(p, "id");
    troupe_pack_uint(p, id);
    troupe_pack_cstr(p, "v");
    troupe_pack_uint(p, v);
    char s[96];
    snprintf(s, sizeof(s), "e%d.%llu.%llu.%llu", t, (unsigned long long)kc,
             (unsigned long long)id, (unsigned long long)v);
    troupe_pack_cstr(p, "email");
    troupe_pack_cstr(p, s);
    char g[16];
    snprintf(g, sizeof(g), "g%llu", (unsigned long long)((id + v) % 5));
    if (grp) {
        troupe_pack_cstr(p, "grp");
        troupe_pack_cstr(p, g);
    }
    troupe_pack_cstr(p, "n");
    troupe_pack_int(p, (int64_t)((id % 1000) * 7 + v % 100) - 50);
    troupe_pack_cstr(p, "tags");
    if (v % 4 == 3) {
        troupe_pack_array(p, 0);
    } else {
        char a[16], b[16];
        snprintf(a, sizeof(a), "a%llu", (unsigned long long)(id % 3));
        snprintf(b, sizeof(b), "b%llu", (unsigned long long)(v % 4));
        troupe_pack_array(p, 3);
        troupe_pack_cstr(p, a);
        troupe_pack_cstr(p, b);
        troupe_pack_cstr(p, ""); /* skipped by the index */
    }
    if (t == 1) {
        troupe_pack_cstr(p, "meta");
        troupe_pack_map(p, 1);
        troupe_pack_cstr(p, "grp");
        troupe_pack_cstr(p, g);
    }
    uint8_t pad[256];
    size_t n = 8 + (size_t)((id * 31 + v * 7 + kc) % 200);
    uint64_t x =
        (kc + 1) * 0x9E3779B97F4A7C15ull ^ (id + 1) * 0xBF58476D1CE4E5B9ull ^ v;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        pad[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
    troupe_pack_cstr(p, "pad");
    troupe_pack_bin(p, pad, n);
}

/* The function index: (id % 7, "x") with the tag as value; odd tags also
 * emit (100 + c % 3) with no value. */
static troupe_err
crash_fn(void *fn_ctx, const void *doc, size_t doc_len, const void *pk,
         size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    (void)fn_ctx;
    (void)pk;
    (void)pk_len;
    troupe_reader r;
    uint32_t n = 0;
    uint64_t c = 0, id = 0, v = 0;
    troupe_reader_init(&r, doc, doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *k;
        size_t kl;
        troupe_read_str(&r, 64, &k, &kl);
        if (kl == 1 && k[0] == 'c')
            troupe_read_uint(&r, &c);
        else if (kl == 2 && memcmp(k, "id", 2) == 0)
            troupe_read_uint(&r, &id);
        else if (kl == 1 && k[0] == 'v')
            troupe_read_uint(&r, &v);
        else
            troupe_read_skip(&r);
    }
    if (r.err != TROUPE_OK)
        return r.err;
    troupe_key_writer w;
    const uint8_t *key;
    size_t klen;
    uint8_t val[9];
    troupe_packer vp;
    troupe_pack_init(&vp);
    troupe_pack_uint(&vp, v);
    size_t vl;
    const void *vd = troupe_pack_data(&vp, &vl);
    memcpy(val, vd, vl);
    troupe_pack_fini(&vp);
    troupe_key_writer_init(&w);
    troupe_key_put_int64(&w, (int64_t)(id % 7));
    troupe_key_put_string(&w, "x", 1);
    troupe_err e = troupe_key_writer_finish(&w, &key, &klen);
    if (e == TROUPE_OK)
        e = emit(emit_ctx, key, klen, val, vl);
    if (e == TROUPE_OK && v % 2 == 1) {
        troupe_key_writer_reset(&w);
        troupe_key_put_int64(&w, (int64_t)(100 + c % 3));
        e = troupe_key_writer_finish(&w, &key, &klen);
        if (e == TROUPE_OK)
            e = emit(emit_ctx, key, klen, NULL, 0);
    }
    troupe_key_writer_fini(&w);
    return e;
}

static troupe_err
make_fns(troupe_index_fns **out)
{
    troupe_err e = troupe_index_fns_create(out);
    if (e == TROUPE_OK)
        e = troupe_index_register_fn(*out, FN_NAME, crash_fn, NULL);
    return e;
}

enum op_kind { OP_INSERT, OP_UPDATE, OP_UPSERT, OP_DELETE };

typedef struct op {
    int t;
    enum op_kind kind;
    bool old;        /* on target `o` of the previous cycle */
    uint64_t o;      /* target index (old) */
    uint64_t kc, id; /* the row's key */
    uint64_t v;      /* tag written (not for deletes) */
    uint64_t step;   /* fresh rows: step 0..2 */
} op;

/* n_targets[t]: rows of the previous cycle in table t. */
static op
op_of(uint64_t cycle, uint64_t seq, const uint64_t *n_targets)
{
    op x = {0};
    x.t = (int)(seq % NT);
    uint64_t u = seq / NT;
    if (u % 4 == 3) {
        x.o = u / 4;
        if (x.o < n_targets[x.t]) {
            x.old = true;
            x.kind = x.o % 2 == 0 ? OP_UPDATE : OP_DELETE;
            x.v = TAG_OLD + cycle;
            return x; /* kc, id: the target's */
        }
        x.kc = cycle;
        x.id = SPILL | x.o;
        x.kind = OP_UPSERT;
        x.v = 0;
        return x;
    }
    uint64_t f = u - u / 4;
    uint64_t slot = (f / (3 * SLOTS)) * SLOTS + f % SLOTS;
    x.step = (f % (3 * SLOTS)) / SLOTS;
    x.kc = cycle;
    x.id = slot;
    x.v = x.step;
    x.kind = x.step == 0   ? OP_INSERT
             : x.step == 2 ? OP_UPSERT
             : slot % 2    ? OP_UPSERT
                           : OP_UPDATE;
    return x;
}

/* Index specs of table t. */
static const troupe_index_field f_email[] = {{"email", TROUPE_FIELD_STRING}};
static const troupe_index_field f_grp_n[] = {{"grp", TROUPE_FIELD_STRING},
                                             {"n", TROUPE_FIELD_INT}};
static const troupe_index_field f_meta_n[] = {{"meta.grp", TROUPE_FIELD_STRING},
                                              {"n", TROUPE_FIELD_INT}};
static const troupe_index_field f_tags[] = {{"tags", TROUPE_FIELD_STRING}};
static const troupe_index_field f_tags_grp[] = {{"tags", TROUPE_FIELD_STRING},
                                                {"grp", TROUPE_FIELD_STRING}};

static size_t
specs_of(int t, troupe_index_spec *s)
{
    memset(s, 0, 4 * sizeof(*s));
    s[0] = (troupe_index_spec){
        .name = "email", .unique = true, .fields = f_email, .n_fields = 1};
    s[1] = (troupe_index_spec){
        .name = "grp_n", .fields = t == 1 ? f_meta_n : f_grp_n, .n_fields = 2};
    if (t == 1) {
        s[2] = (troupe_index_spec){.name = "fn", .fn_name = FN_NAME};
        return 3;
    }
    s[2] = (troupe_index_spec){.name = "tags",
                               .fields = t == 0 ? f_tags : f_tags_grp,
                               .n_fields = t == 0 ? 1 : 2};
    if (t == 0)
        return 3;
    /* table 2: a function index with a condition as well */
    s[3] =
        (troupe_index_spec){.name = "fn",
                            .fn_name = FN_NAME,
                            .cond = {.op = TROUPE_COND_EXISTS, .path = "grp"}};
    return 4;
}

/* ---- the catalog, read straight from `meta` (data-model.md) ------------ */

typedef struct tinfo {
    bool exists;
    uint64_t id;
    troupe_index_def *defs[8];
    size_t ndefs;
} tinfo;

static void
tinfo_fini(tinfo *ti)
{
    for (size_t i = 0; i < ti->ndefs; i++)
        troupe_index_def_destroy(ti->defs[i]);
    memset(ti, 0, sizeof(*ti));
}

/* Loads table `name`'s entry: exists false when there is none. */
static troupe_err
catalog_load(troupe_db *db, const char *name, tinfo *ti)
{
    memset(ti, 0, sizeof(*ti));
    troupe_cf *meta;
    troupe_err e = troupe_db_cf(db, "meta", &meta);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "table", 5);
    troupe_key_put_string(&w, name, strlen(name));
    void *val = NULL;
    size_t vl = 0;
    e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_db_get(db, meta, NULL, k, kl, &val, &vl);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    troupe_reader r;
    uint32_t n = 0;
    bool have_id = false;
    troupe_reader_init(&r, val, vl);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *key;
        size_t klen;
        troupe_read_str(&r, 64, &key, &klen);
        if (klen == 2 && memcmp(key, "id", 2) == 0) {
            troupe_read_uint(&r, &ti->id);
            have_id = true;
        } else if (klen == 7 && memcmp(key, "indexes", 7) == 0) {
            uint32_t m = 0;
            troupe_read_array(&r, &m);
            for (uint32_t j = 0; j < m && r.err == TROUPE_OK; j++) {
                const void *raw;
                size_t rl;
                troupe_read_raw(&r, &raw, &rl);
                if (r.err != TROUPE_OK || ti->ndefs == 8) {
                    r.err = TROUPE_EPROTO;
                    break;
                }
                troupe_err de =
                    troupe_index_def_unpack(raw, rl, &ti->defs[ti->ndefs]);
                if (de != TROUPE_OK)
                    r.err = de;
                else
                    ti->ndefs++;
            }
        } else {
            troupe_read_skip(&r);
        }
    }
    e = troupe_read_end(&r);
    troupe_free(val);
    if (e == TROUPE_OK && !have_id)
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK) {
        tinfo_fini(ti);
        return e;
    }
    ti->exists = true;
    return TROUPE_OK;
}

static troupe_err
rows_cf(troupe_db *db, uint64_t id, troupe_cf **cf)
{
    char name[TROUPE__CF_NAME_LEN];
    troupe_err e = troupe__cf_name('t', id, name, sizeof(name));
    return e == TROUPE_OK ? troupe_db_cf(db, name, cf) : e;
}

/* ---- the child ---------------------------------------------------------- */

typedef struct tw {
    int fd;
    sem_t window;
} tw;

static tw TW;

static void
tdie(const char *what, troupe_err e)
{
    fprintf(stderr, "crash table child: %s: %s\n", what, troupe_err_name(e));
    _exit(2);
}

static void
table_cb(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe_rows_destroy(rows);
    if (err != TROUPE_OK)
        tdie("write completion", err);
    crash_report(TW.fd, REC_ACK, 0, (uint64_t)(uintptr_t)arg);
    sem_post(&TW.window);
}

/* ids of table t's rows of cycle `kc`, in key order. */
static uint64_t *
rows_of_cycle(troupe_db *db, uint64_t id, uint64_t kc, uint64_t *n)
{
    troupe_cf *cf;
    troupe_err e = rows_cf(db, id, &cf);
    if (e != TROUPE_OK)
        tdie("rows family", e);
    uint8_t pre[9];
    pre[0] = 'r';
    put_be64(pre + 1, kc);
    troupe_range rg = {.start = pre, .start_len = 9, .prefix = true};
    troupe_iter *it;
    if ((e = troupe_iter_create(db, cf, NULL, &rg, NULL, 0, false, &it)) !=
        TROUPE_OK)
        tdie("iter", e);
    uint64_t *v = NULL, cap = 0;
    *n = 0;
    troupe_kv kv;
    while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        if (kv.key_len != ROW_KEY_LEN)
            tdie("a row key of another length", TROUPE_ECORRUPT);
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            v = realloc(v, cap * sizeof(*v));
            if (v == NULL)
                tdie("realloc", TROUPE_ENOMEM);
        }
        v[(*n)++] = get_be64(kv.key + 9);
    }
    if (e != TROUPE_ENOENT)
        tdie("iter next", e);
    troupe_iter_destroy(it);
    return v;
}

/* Opens runtime, db, pipeline and catalog, creates the tables if missing
 * and reads the previous cycle's rows of each: targets[t][0..nt[t]). */
static void
child_open(const char *dir, uint64_t cycle, bool sync, troupe_db **dbp,
           troupe_tables **tbp, uint64_t *nt, uint64_t **targets)
{
    troupe_runtime *rt;
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        tdie("runtime", e);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.sync = sync;
    troupe_db *db;
    if ((e = troupe_db_open(dir, &o, &db)) != TROUPE_OK)
        tdie("open", e);
    troupe_commit *c;
    if ((e = troupe_commit_create(db, NULL, &c)) != TROUPE_OK)
        tdie("commit_create", e);
    troupe_index_fns *fns;
    if ((e = make_fns(&fns)) != TROUPE_OK)
        tdie("fns", e);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    troupe_catalog *cat;
    if ((e = troupe_catalog_open(&co, &cat)) != TROUPE_OK)
        tdie("catalog_open", e);
    troupe_tables_opts to = {.catalog = cat, .commit = c, .fns = fns};
    troupe_tables *tb;
    if ((e = troupe_tables_open(&to, &tb)) != TROUPE_OK)
        tdie("tables_open", e);
    for (int t = 0; t < NT; t++) {
        troupe_index_spec s[4];
        size_t ns = specs_of(t, s);
        e = troupe_tables_create_wait(tb, tnames[t], s, ns);
        if (e != TROUPE_OK && e != TROUPE_EEXIST)
            tdie("create", e);
        tinfo ti;
        if ((e = catalog_load(db, tnames[t], &ti)) != TROUPE_OK || !ti.exists)
            tdie("catalog", e != TROUPE_OK ? e : TROUPE_ENOENT);
        if (cycle > 0)
            targets[t] = rows_of_cycle(db, ti.id, cycle - 1, &nt[t]);
        tinfo_fini(&ti);
    }
    *dbp = db;
    *tbp = tb;
}

/* argv: DIR CYCLE SYNC FD WINDOW */
int
crash_child_table(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *dir = argv[0];
    uint64_t cycle = strtoull(argv[1], NULL, 10);
    bool sync = atoi(argv[2]) != 0;
    TW.fd = atoi(argv[3]);
    sem_init(&TW.window, 0, (unsigned)atoi(argv[4]));
    troupe_tables *tb;
    troupe_db *db;
    uint64_t nt[NT] = {0};
    uint64_t *targets[NT] = {NULL};
    child_open(dir, cycle, sync, &db, &tb, nt, targets);
    crash_report(TW.fd, REC_READY, 0, 0);
    troupe_write_opts wo = {.sync = sync ? TROUPE_SYNC_ON : TROUPE_SYNC_OFF};
    for (uint64_t seq = 0;; seq++) {
        op x = op_of(cycle, seq, nt);
        if (x.old) {
            x.kc = cycle - 1;
            x.id = targets[x.t][x.o];
        }
        uint8_t k[ROW_KEY_LEN];
        row_key(k, x.kc, x.id);
        troupe_packer p;
        troupe_pack_init(&p);
        size_t dl = 0;
        const void *d = NULL;
        if (x.kind != OP_DELETE) {
            doc_pack(&p, x.t, x.kc, x.id, x.v);
            if (p.err != TROUPE_OK)
                tdie("doc", p.err);
            d = troupe_pack_data(&p, &dl);
        }
        sem_wait(&TW.window);
        void *arg = (void *)(uintptr_t)seq;
        const char *tn = tnames[x.t];
        troupe_err e;
        switch (x.kind) {
        case OP_INSERT:
            e = troupe_table_insert(tb, tn, k, sizeof(k), d, dl, &wo, table_cb,
                                    arg);
            break;
        case OP_UPDATE:
            e = troupe_table_update(tb, tn, k, sizeof(k), d, dl, &wo, table_cb,
                                    arg);
            break;
        case OP_UPSERT:
            e = troupe_table_upsert(tb, tn, k, sizeof(k), d, dl, &wo, table_cb,
                                    arg);
            break;
        default:
            e = troupe_table_delete(tb, tn, k, sizeof(k), &wo, table_cb, arg);
            break;
        }
        troupe_pack_fini(&p);
        if (e != TROUPE_OK)
            tdie("submit", e);
    }
}

#ifdef TROUPE_CRASH_TXN
/* ---- the child, transaction mode ---------------------------------------- */

static void
txn_cb(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *conflicts,
       size_t n, void *arg)
{
    (void)conflicts;
    (void)n;
    if (err != TROUPE_OK)
        tdie("transaction commit", err);
    /* The transaction is done when its callback runs (txn.h). */
    troupe_txn_destroy(tx);
    uint64_t seq = (uint64_t)(uintptr_t)arg;
    crash_report(TW.fd, REC_ACK, 0, seq);
    sem_post(&TW.window);
}

static void
txn_put(troupe_txn *tx, int t, uint64_t kc, uint64_t id, uint64_t v,
        bool update)
{
    uint8_t k[ROW_KEY_LEN];
    row_key(k, kc, id);
    troupe_packer p;
    troupe_pack_init(&p);
    doc_pack(&p, t, kc, id, v);
    size_t dl;
    const void *d = troupe_pack_data(&p, &dl);
    troupe_err e =
        p.err != TROUPE_OK ? p.err
        : update ? troupe_txn_update(tx, tnames[t], k, sizeof(k), d, dl, NULL)
                 : troupe_txn_insert(tx, tnames[t], k, sizeof(k), d, dl, NULL);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        tdie("transaction write", e);
}
#endif

/* argv: DIR CYCLE SYNC FD WINDOW */
int
crash_child_table_txn(int argc, char **argv)
{
#ifndef TROUPE_CRASH_TXN
    (void)argc;
    (void)argv;
    fprintf(stderr, "crash table child: built without actors/txn\n");
    return 2;
#else
    if (argc != 5)
        return 2;
    const char *dir = argv[0];
    uint64_t cycle = strtoull(argv[1], NULL, 10);
    bool sync = atoi(argv[2]) != 0;
    TW.fd = atoi(argv[3]);
    sem_init(&TW.window, 0, (unsigned)atoi(argv[4]));
    troupe_tables *tb;
    troupe_db *db;
    uint64_t nt[NT] = {0};
    uint64_t *targets[NT] = {NULL};
    child_open(dir, cycle, sync, &db, &tb, nt, targets);
    crash_report(TW.fd, REC_READY, 0, 0);
    troupe_sync sy = sync ? TROUPE_SYNC_ON : TROUPE_SYNC_OFF;
    for (uint64_t seq = 0;; seq++) {
        sem_wait(&TW.window);
        troupe_txn *tx;
        troupe_err e = troupe_txn_begin(tb, NULL, &tx);
        if (e != TROUPE_OK)
            tdie("txn_begin", e);
        for (int t = 0; t < NT; t++)
            txn_put(tx, t, cycle, seq, 0, false);
        if (seq < nt[0]) {
            for (int t = 0; t < NT; t++)
                txn_put(tx, t, cycle - 1, targets[0][seq], TAG_OLD + cycle,
                        true);
        }
        e = troupe_txn_commit(tx, sy, txn_cb, (void *)(uintptr_t)seq);
        if (e != TROUPE_OK)
            tdie("txn_commit", e);
    }
#endif
}

/* ---- the parent's check ------------------------------------------------- */

/* One row the previous check saw in table t with the previous cycle's key:
 * the targets of this cycle. */
typedef struct prow {
    uint64_t id, v;
} prow;

typedef struct tstate {
    bool exists; /* the catalog held the table at the last check */
    uint64_t id;
    prow *prev; /* rows of cycle c-1 as the check of c-1 saw them */
    uint64_t nprev;
    /* hash of the rows of cycles < c-1 as the check of c-1 saw them: no
     * later cycle writes them, so every later check must see the same */
    uint64_t digest;
    bool have_digest;
} tstate;

static tstate TS[NT];

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

typedef struct vctx {
    uint64_t n;
    char *msg;
    size_t cap;
    const char *table;
} vctx;

static void
on_mismatch(void *ctx, const troupe_index_mismatch *m)
{
    vctx *v = ctx;
    if (v->n++ == 0) {
        uint64_t kc = 0, id = 0;
        if (m->pk != NULL && m->pk_len == ROW_KEY_LEN) {
            kc = get_be64(m->pk + 1);
            id = get_be64(m->pk + 9);
        }
        snprintf(v->msg, v->cap,
                 "verify of %s: mismatch kind %d on row (%llu, %llu), index "
                 "%llu",
                 v->table, (int)m->kind, (unsigned long long)kc,
                 (unsigned long long)id, (unsigned long long)m->index_id);
    }
}

/* Decodes a row envelope [1, 0, doc] and the doc's tag; checks the doc is
 * byte for byte the one (t, kc, id, tag) writes. */
static bool
row_ok(int t, uint64_t kc, uint64_t id, const uint8_t *val, size_t vl,
       uint64_t *tag)
{
    troupe_reader r;
    uint64_t ver = 0;
    int64_t exp = -1;
    const void *doc;
    size_t dl;
    troupe_reader_init(&r, val, vl);
    troupe_read_array_n(&r, 3);
    troupe_read_uint(&r, &ver);
    troupe_read_int(&r, &exp);
    troupe_read_raw(&r, &doc, &dl);
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1 || exp != 0)
        return false;
    troupe_reader_init(&r, doc, dl);
    uint32_t n = 0;
    bool have = false;
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *k;
        size_t kl;
        troupe_read_str(&r, 64, &k, &kl);
        if (kl == 1 && k[0] == 'v') {
            troupe_read_uint(&r, tag);
            have = true;
        } else {
            troupe_read_skip(&r);
        }
    }
    if (r.err != TROUPE_OK || !have)
        return false;
    troupe_packer p;
    troupe_pack_init(&p);
    doc_pack(&p, t, kc, id, *tag);
    size_t el;
    const void *exp_doc = troupe_pack_data(&p, &el);
    bool ok = p.err == TROUPE_OK && el == dl && memcmp(exp_doc, doc, dl) == 0;
    troupe_pack_fini(&p);
    return ok;
}

#define FAIL(...)                                                              \
    do {                                                                       \
        snprintf(msg, cap, __VA_ARGS__);                                       \
        goto out;                                                              \
    } while (0)

static bool
acked(const uint8_t *bits, uint64_t max, uint64_t s)
{
    return s < max && ((bits[s / 8] >> (s % 8)) & 1);
}

int
crash_table_check(const char *dir, uint64_t cycle, bool txn,
                  const uint8_t *bits, uint64_t max, crash_table_stats *st,
                  char *msg, size_t cap)
{
    int rc = -1;
    msg[0] = '\0';
    memset(st, 0, sizeof(*st));
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    troupe_db *db = NULL;
    troupe_index_fns *fns = NULL;
    troupe_err e = troupe_db_open(dir, &o, &db);
    if (e != TROUPE_OK)
        FAIL("reopen after the crash: %s", troupe_err_name(e));
    if ((e = make_fns(&fns)) != TROUPE_OK)
        FAIL("fns: %s", troupe_err_name(e));
    uint64_t nt[NT];
    for (int t = 0; t < NT; t++)
        nt[t] = TS[t].nprev;
    /* Per table: applied step prefix of each fresh slot, spill rows seen,
     * targets' outcome (0 untouched, 1 updated, 2 gone). */
    /* Room for the writes that were durable but not yet acknowledged when
     * the kill landed (at most a window past the last ack). */
    uint64_t nslots = max + 65536;
    uint8_t *prefix[NT] = {NULL}, *spill[NT] = {NULL}, *tout[NT] = {NULL};
    prow *next[NT] = {NULL};
    uint64_t nnext[NT] = {0};
    uint64_t nspill = (max + 65536) / 12 + 2;
    for (int t = 0; t < NT; t++) {
        prefix[t] = calloc(nslots, 1);
        spill[t] = calloc(nspill, 1);
        tout[t] = calloc(nt[t] + 1, 1);
    }
    for (int t = 0; t < NT; t++) {
        tinfo ti;
        if ((e = catalog_load(db, tnames[t], &ti)) != TROUPE_OK)
            FAIL("catalog entry of %s: %s", tnames[t], troupe_err_name(e));
        if (!ti.exists) {
            if (TS[t].exists)
                FAIL("table %s vanished from the catalog", tnames[t]);
            continue; /* acks for it are checked below: none may exist */
        }
        uint64_t id0 = ti.id;
        if (TS[t].exists && TS[t].id != ti.id) {
            tinfo_fini(&ti);
            FAIL("table %s changed id %llu -> %llu", tnames[t],
                 (unsigned long long)TS[t].id, (unsigned long long)id0);
        }
        if (ti.ndefs != (t == 2 ? 4u : 3u)) {
            size_t nd = ti.ndefs;
            tinfo_fini(&ti);
            FAIL("table %s has %zu indexes", tnames[t], nd);
        }
        TS[t].exists = true;
        TS[t].id = ti.id;
        /* verify: every row against its manifest, every manifest against
         * the entries, every entry against its row, and (derive) every
         * manifest against what the row derives. */
        vctx vc = {.msg = msg, .cap = cap, .table = tnames[t]};
        troupe_index_verify_opts vo = {
            .table_id = ti.id,
            .defs = (const troupe_index_def *const *)ti.defs,
            .n_defs = ti.ndefs,
            .derive = true,
            .fns = fns,
            .budget = 4096,
            .cb = on_mismatch,
            .cb_ctx = &vc};
        void *cur = NULL;
        size_t cl = 0;
        bool done = false;
        while (!done && e == TROUPE_OK) {
            void *nx = NULL;
            size_t nl = 0;
            e = troupe_index_verify_step(db, &vo, cur, cl, &nx, &nl, &done);
            troupe_free(cur);
            cur = nx;
            cl = nl;
            st->verify_steps++;
        }
        troupe_free(cur);
        tinfo_fini(&ti);
        if (e != TROUPE_OK)
            FAIL("verify of %s: %s", tnames[t], troupe_err_name(e));
        if (vc.n > 0) {
            size_t l = strlen(msg);
            snprintf(msg + l, cap - l, " (%llu mismatches in all)",
                     (unsigned long long)vc.n);
            goto out;
        }
        /* the rows, exactly */
        troupe_cf *cf;
        if ((e = rows_cf(db, TS[t].id, &cf)) != TROUPE_OK)
            FAIL("rows of %s: %s", tnames[t], troupe_err_name(e));
        troupe_iter *it;
        if ((e = troupe_iter_create(db, cf, NULL, NULL, NULL, 0, false, &it)) !=
            TROUPE_OK)
            FAIL("iter: %s", troupe_err_name(e));
        uint64_t d_old = 0xcbf29ce484222325ull, d_new = d_old, pi = 0, capn = 0;
        troupe_kv kv;
        while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
            st->rows++;
            if (kv.key_len != ROW_KEY_LEN || kv.key[0] != 'r') {
                troupe_iter_destroy(it);
                FAIL("%s: a row key no write made", tnames[t]);
            }
            uint64_t kc = get_be64(kv.key + 1), id = get_be64(kv.key + 9);
            uint64_t tag = 0;
            if (!row_ok(t, kc, id, kv.val, kv.val_len, &tag)) {
                troupe_iter_destroy(it);
                FAIL("%s: row (%llu, %llu) is not a document any write made",
                     tnames[t], (unsigned long long)kc, (unsigned long long)id);
            }
            if (kc + 1 < cycle)
                d_old = fnv(fnv(d_old, kv.key, kv.key_len), kv.val, kv.val_len);
            if (kc < cycle)
                d_new = fnv(fnv(d_new, kv.key, kv.key_len), kv.val, kv.val_len);
            const char *bad = NULL;
            if (kc > cycle) {
                bad = "a row of a cycle that has not run";
            } else if (kc + 1 == cycle) {
                /* a target: untouched, updated by this cycle, or gone */
                while (pi < nt[t] && TS[t].prev[pi].id < id) {
                    tout[t][pi] = 2; /* absent: deleted */
                    pi++;
                }
                if (pi == nt[t] || TS[t].prev[pi].id != id)
                    bad = "a row of the previous cycle its check did not see";
                else if (tag == TS[t].prev[pi].v)
                    tout[t][pi++] = 0;
                else if (tag == TAG_OLD + cycle && (txn || pi % 2 == 0))
                    tout[t][pi++] = 1;
                else
                    bad = "a row of the previous cycle with a foreign "
                          "document";
            } else if (kc == cycle) {
                if (txn) {
                    if (id >= nslots || tag != 0)
                        bad = "a row no transaction wrote";
                    else
                        prefix[t][id] = 1;
                } else if (id >= SPILL) {
                    uint64_t so = id - SPILL;
                    if (so >= nspill || tag != 0 || so < nt[t])
                        bad = "a created row no write made";
                    else
                        spill[t][so] = 1;
                } else if (id >= nslots || tag > 2) {
                    bad = "a row past every acknowledged write's slot";
                } else {
                    prefix[t][id] = (uint8_t)(tag + 1);
                }
                if (bad == NULL) {
                    if (nnext[t] == capn) {
                        capn = capn ? capn * 2 : 1024;
                        next[t] = realloc(next[t], capn * sizeof(prow));
                    }
                    next[t][nnext[t]++] = (prow){id, tag};
                }
            }
            if (bad != NULL) {
                troupe_iter_destroy(it);
                FAIL("%s: row (%llu, %llu) tag %llu: %s", tnames[t],
                     (unsigned long long)kc, (unsigned long long)id,
                     (unsigned long long)tag, bad);
            }
        }
        troupe_iter_destroy(it);
        if (e != TROUPE_ENOENT)
            FAIL("%s: iteration ended with %s", tnames[t], troupe_err_name(e));
        for (; pi < nt[t]; pi++)
            tout[t][pi] = 2;
        for (uint64_t i = 0; i < nt[t]; i++) {
            if (tout[t][i] == 2 && (txn || i % 2 == 0))
                FAIL("%s: row (%llu, %llu) is gone, but this cycle only "
                     "updates it",
                     tnames[t], (unsigned long long)(cycle - 1),
                     (unsigned long long)TS[t].prev[i].id);
        }
        if (TS[t].have_digest && d_old != TS[t].digest)
            FAIL("%s: rows of earlier cycles changed since their check",
                 tnames[t]);
        TS[t].digest = d_new;
        TS[t].have_digest = true;
    }
    if (txn) {
        /* all or nothing: transaction s inserted (cycle, s) in every table
         * and updated the s-th row of the previous cycle in every table */
        for (int t = 1; t < NT; t++) {
            if (nt[t] != nt[0])
                FAIL("the previous cycle left %llu rows in %s, %llu in %s: "
                     "a transaction was split",
                     (unsigned long long)nt[0], tnames[0],
                     (unsigned long long)nt[t], tnames[t]);
            for (uint64_t i = 0; i < nt[0]; i++)
                if (TS[t].prev[i].id != TS[0].prev[i].id)
                    FAIL("the previous cycle's rows differ between %s and "
                         "%s: a transaction was split",
                         tnames[0], tnames[t]);
        }
        for (uint64_t s = 0; s < nslots; s++) {
            uint8_t p0 = prefix[0][s];
            for (int t = 1; t < NT; t++)
                if (prefix[t][s] != p0)
                    FAIL("transaction %llu: its row is in %s %s, in %s %s: "
                         "applied in part",
                         (unsigned long long)s, tnames[0],
                         p0 ? "present" : "absent", tnames[t],
                         prefix[t][s] ? "present" : "absent");
            for (int t = 0; t < NT && s < nt[0]; t++)
                if ((tout[t][s] == 1) != (p0 != 0))
                    FAIL("transaction %llu: its insert is %s but its update "
                         "of %s (%llu, %llu) is %s: applied in part",
                         (unsigned long long)s, p0 ? "there" : "missing",
                         tnames[t], (unsigned long long)(cycle - 1),
                         (unsigned long long)TS[t].prev[s].id,
                         tout[t][s] == 1 ? "there" : "missing");
            if (p0)
                st->txns++;
        }
    }
    /* every acknowledged write is there */
    for (uint64_t s = 0; s < max; s++) {
        if (!acked(bits, max, s))
            continue;
        st->acked++;
        if (txn) {
            for (int t = 0; t < NT; t++)
                if (!TS[t].exists)
                    FAIL("transaction %llu acknowledged, but table %s does "
                         "not exist",
                         (unsigned long long)s, tnames[t]);
            st->lost += prefix[0][s] == 0;
            continue;
        }
        op x = op_of(cycle, s, nt);
        if (!TS[x.t].exists)
            FAIL("write %llu to %s acknowledged, but the table does not "
                 "exist",
                 (unsigned long long)s, tnames[x.t]);
        bool there;
        if (x.old)
            there = tout[x.t][x.o] == (x.kind == OP_DELETE ? 2 : 1);
        else if (x.id >= SPILL)
            there = spill[x.t][x.id - SPILL] != 0;
        else
            there = prefix[x.t][x.id] > x.step;
        if (!there)
            st->lost++;
    }
    /* what this check saw of this cycle: the next cycle's targets */
    for (int t = 0; t < NT; t++) {
        free(TS[t].prev);
        TS[t].prev = next[t];
        TS[t].nprev = nnext[t];
        next[t] = NULL;
    }
    rc = 0;
out:
    for (int t = 0; t < NT; t++) {
        free(prefix[t]);
        free(spill[t]);
        free(tout[t]);
        free(next[t]);
    }
    troupe_index_fns_destroy(fns);
    if (db != NULL) {
        e = troupe_db_close(db);
        if (e != TROUPE_OK && rc == 0) {
            snprintf(msg, cap, "close: %s", troupe_err_name(e));
            rc = -1;
        }
    }
    return rc;
}

void
crash_table_reset(void)
{
    for (int t = 0; t < NT; t++)
        free(TS[t].prev);
    memset(TS, 0, sizeof(TS));
}
