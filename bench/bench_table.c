/*
 * bench_table: the data layer, side by side with raw
 * RocksDB on identical options and data (16 B keys, 100 B values).
 *
 *   bench table_put <v> rows/s peer rocksdb_put <v> ratio <r>
 *   bench table_put_random <v> rows/s peer rocksdb_put_random <v> ratio <r>
 *   bench table_get <v> gets/s peer rocksdb_get <v> ratio <r>
 *   bench table_scan100 <v> scans/s peer rocksdb_scan100 <v> ratio <r>
 *   bench index_put_1 <v> rows/s peer index_put_0 <v> ratio <r>
 *   bench index_put_3 <v> rows/s peer index_put_0 <v> ratio <r>
 *   bench index_query100 <v> queries/s peer raw_query100 <v> ratio <r>
 *
 * Goals: table_put >= 0.7x, table_get and table_scan100 >= 0.8x,
 * index_query100 >= 0.8x; index_put_1/_3 print the cost of indexes.
 *
 * Data. Keys are 16 ASCII digits (a counter, "%016llu"); a troupe document
 * is one 100-byte msgpack map, and the raw side stores the same 100 bytes
 * as the value. Puts insert fresh increasing keys; table_put_random
 * (informative) inserts fresh keys spread over the whole key space (a
 * counter times an odd constant, modulo 2^53), so that every insert lands
 * among stored keys and its absence check reads (storage.md, "Key
 * bounds"); gets read uniformly random keys of a preloaded, flushed set
 * (so from the block cache); scans read 100 rows from a uniformly random
 * start key.
 *
 * Writes are unsynced on both sides (troupe: wo.sync = TROUPE_SYNC_OFF;
 * RocksDB: WriteOptions.sync = false, WAL on): the figures measure the
 * write path, not fdatasync (bench_group_commit measures synced commits).
 *
 * Concurrency. troupe: a standalone runtime with default options (one
 * scheduler per core, 4 worker-pool threads). Raw: one thread per online
 * core, each calling the C API in a loop (rocksdb_put / rocksdb_get /
 * iterator seek + 100 nexts). On the 2-core machine that is 2 threads: as
 * many as can run at once, so the raw side gets all the CPU it can use.
 *  - Reads (table_get, table_scan100, index_query100): troupe runs the same
 *    shape as raw, one thread per core calling the blocking API in a loop
 *    (troupe_table_get_wait, _scan_wait, troupe_tables_query_wait), which
 *    reads on the calling thread. The *_async lines (informative) are the
 *    asynchronous API with 64 requests in flight from callbacks on
 *    scheduler 0: memory reads on scheduler 0's thread, one core.
 *  - Writes (table_put, index_put_*): the asynchronous API, 64 requests in
 *    flight, each callback issuing the next (a blocking write waits for
 *    its commit: two threads of those would measure latency, not the
 *    write path).
 *
 * index_query100 (rows = true, limit 100, one int value matching exactly
 * 100 rows): its peer uses the same database and families through the
 * storage module (troupe_db_scan over the tuple prefix of x.<id>, then 100
 * troupe_db_get of the rows in t.<id>), on the same threads as the raw peers.
 *
 * Each rep runs troupe for BENCH_SECONDS (default 1) then the peer for as
 * long, so a noisy neighbour hits both sides alike; figures are medians of
 * BENCH_REPS (default 5). Temporary directories are removed at the end.
 *
 * Knobs: argv[1] runs only the figures whose name contains it;
 * BENCH_SIDE=troupe|raw runs one side only (profiling);
 * BENCH_INFLIGHT (64) and BENCH_RAW_THREADS (online cores) change the
 * concurrency of each side. docs/performance.md, "Data layer", has the
 * figures and where the time goes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "bench_util.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/index.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/index.h"
#include "troupe/keycodec.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/table.h"

#define KEY_LEN 16
#define VAL_LEN 100
#define INFLIGHT_MAX 1024
#define MAX_THREADS 16
#define PRELOAD 100000 /* rows read by get and scan */
#define SCAN_N 100
#define GROUPS 200 /* index_query100: groups of 100 rows */

static double secs = 1.0;
static int nthreads = 2;
static int inflight = 64; /* $BENCH_INFLIGHT */
static const char *only;  /* argv[1]: run only figures containing it */
/* $BENCH_SIDE=troupe or raw: run one side only (for profiling). */
static const char *side_only;

static int
want(const char *name)
{
    return only == NULL || strstr(name, only) != NULL;
}

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "bench_table: %s: %s\n", what, troupe_err_name(e));
    exit(1);
}

static void
rdie(const char *what, char *err)
{
    fprintf(stderr, "bench_table: rocksdb %s: %s\n", what, err);
    exit(1);
}

/* A bijection of [0, 2^53): keys in counter order land all over the key
 * space ("%016llu" of a value below 2^53 < 10^16 keeps 16 digits). */
static unsigned long long
scatter_key(unsigned long long i)
{
    return (i * 0x9E3779B97F4A7C15ull) & ((1ull << 53) - 1);
}

static void
mkkey(char *k, unsigned long long i)
{
    char tmp[KEY_LEN + 1];
    snprintf(tmp, sizeof(tmp), "%016llu", i);
    memcpy(k, tmp, KEY_LEN);
}

static uint64_t
rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* ---- documents: each exactly VAL_LEN bytes of msgpack ---- */

static void
put_u32(uint8_t *p, uint32_t v)
{
    p[0] = 0xce;
    p[1] = (uint8_t)(v >> 24);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 8);
    p[4] = (uint8_t)v;
}

/* {"v": str(95)} */
static void
doc_plain(uint8_t *d)
{
    d[0] = 0x81;
    d[1] = 0xa1;
    d[2] = 'v';
    d[3] = 0xd9;
    d[4] = VAL_LEN - 5;
    memset(d + 5, 'x', VAL_LEN - 5);
}

/* {"a": u32, "b": str(6), "c": u32, "p": str(72)} */
static void
doc_indexed(uint8_t *d, unsigned long long i)
{
    uint8_t *p = d;
    *p++ = 0x84;
    *p++ = 0xa1;
    *p++ = 'a';
    put_u32(p, (uint32_t)(i % 1000));
    p += 5;
    *p++ = 0xa1;
    *p++ = 'b';
    *p++ = 0xa6;
    char s[8];
    snprintf(s, sizeof(s), "s%05u", (unsigned)(i % 100000));
    memcpy(p, s, 6);
    p += 6;
    *p++ = 0xa1;
    *p++ = 'c';
    put_u32(p, (uint32_t)i);
    p += 5;
    *p++ = 0xa1;
    *p++ = 'p';
    *p++ = 0xd9;
    size_t pad = VAL_LEN - (size_t)(p + 1 - d);
    *p++ = (uint8_t)pad;
    memset(p, 'x', pad);
}

/* {"g": u32, "p": str(86)} */
static void
doc_group(uint8_t *d, uint32_t g)
{
    uint8_t *p = d;
    *p++ = 0x82;
    *p++ = 0xa1;
    *p++ = 'g';
    put_u32(p, g);
    p += 5;
    *p++ = 0xa1;
    *p++ = 'p';
    *p++ = 0xd9;
    size_t pad = VAL_LEN - (size_t)(p + 1 - d);
    *p++ = (uint8_t)pad;
    memset(p, 'x', pad);
}

/* ---- troupe side: `inflight` async requests from host callbacks ---- */

typedef enum { OP_INSERT, OP_GET, OP_SCAN, OP_QUERY } op_kind;

typedef struct drive {
    troupe_tables *t;
    const char *table;
    op_kind op;
    int doc;                              /* 0 plain, 1 indexed */
    _Atomic unsigned long long *next_key; /* inserts */
    bool scatter;                         /* inserts: scatter_key(next) */
    uint64_t key_range;                   /* gets, scans: keys [0, range) */
    atomic_bool stop;
    atomic_int inflight;
    _Atomic uint64_t done;
    _Atomic uint64_t seed;
    _Atomic troupe_err err;
} drive;

static void
issue(drive *d);

static void
finish_one(drive *d, troupe_err err)
{
    if (err != TROUPE_OK) {
        troupe_err exp = TROUPE_OK;
        atomic_compare_exchange_strong(&d->err, &exp, err);
    }
    atomic_fetch_add_explicit(&d->done, 1, memory_order_relaxed);
    if (err == TROUPE_OK &&
        !atomic_load_explicit(&d->stop, memory_order_relaxed))
        issue(d);
    else
        atomic_fetch_sub(&d->inflight, 1);
}

static void
on_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    drive *d = arg;
    if (err == TROUPE_OK && rows != NULL) {
        if ((d->op == OP_GET && rows->n != 1) ||
            (d->op == OP_SCAN && rows->n != SCAN_N))
            err = TROUPE_EFAILED;
    }
    troupe_rows_destroy(rows);
    finish_one(d, err);
}

static void
on_query(troupe_err err, troupe_index_result *res, void *arg)
{
    drive *d = arg;
    if (err == TROUPE_OK && res->n != 100)
        err = TROUPE_EFAILED;
    troupe_index_result_destroy(res);
    finish_one(d, err);
}

static uint64_t
drive_rand(drive *d)
{
    /* Callbacks run on scheduler 0 only; the first `inflight` issues run on
     * the main thread before any callback. Relaxed is enough. */
    uint64_t s = atomic_load_explicit(&d->seed, memory_order_relaxed);
    uint64_t r = rnd(&s);
    atomic_store_explicit(&d->seed, s, memory_order_relaxed);
    return r;
}

static void
issue(drive *d)
{
    char key[KEY_LEN];
    uint8_t doc[VAL_LEN];
    troupe_err e;
    switch (d->op) {
    case OP_INSERT: {
        unsigned long long i = atomic_fetch_add(d->next_key, 1);
        mkkey(key, d->scatter ? scatter_key(i) : i);
        if (d->doc)
            doc_indexed(doc, i);
        else
            doc_plain(doc);
        troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
        e = troupe_table_insert(d->t, d->table, key, KEY_LEN, doc, VAL_LEN, &wo,
                                on_rows, d);
        break;
    }
    case OP_GET:
        mkkey(key, drive_rand(d) % d->key_range);
        e = troupe_table_get(d->t, d->table, key, KEY_LEN, on_rows, d);
        break;
    case OP_SCAN: {
        mkkey(key, drive_rand(d) % (d->key_range - SCAN_N));
        troupe_scan_opts so = {
            .start = key, .start_len = KEY_LEN, .limit = SCAN_N};
        e = troupe_table_scan(d->t, d->table, &so, on_rows, d);
        break;
    }
    default: {
        uint8_t v[6] = {0x91};
        put_u32(v + 1, (uint32_t)(drive_rand(d) % GROUPS));
        troupe_index_query q = {
            .values = v, .values_len = sizeof(v), .limit = 100, .rows = true};
        e = troupe_tables_query(d->t, d->table, "g", &q, on_query, d);
        break;
    }
    }
    if (e != TROUPE_OK)
        die("issue", e);
}

/* Runs op for `seconds` (0: until *next_key reaches `upto`, inserts);
 * returns operations/s. */
static double
drive_run(drive *d, double seconds)
{
    if (side_only && strcmp(side_only, "troupe") != 0)
        return 0;
    atomic_store(&d->stop, false);
    atomic_store(&d->done, 0);
    atomic_store(&d->err, TROUPE_OK);
    atomic_store(&d->inflight, inflight);
    double t0 = bench_now();
    for (int i = 0; i < inflight; i++)
        issue(d);
    while (bench_now() - t0 < seconds)
        usleep(2000);
    uint64_t n = atomic_load(&d->done);
    double dt = bench_now() - t0;
    atomic_store(&d->stop, true);
    while (atomic_load(&d->inflight) > 0)
        usleep(1000);
    if (atomic_load(&d->err) != TROUPE_OK)
        die(d->table, atomic_load(&d->err));
    return (double)n / dt;
}

/* ---- raw RocksDB side ---- */

typedef struct raw {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_block_based_table_options_t *topts;
    rocksdb_cache_t *cache;
    rocksdb_writeoptions_t *wo;
    rocksdb_readoptions_t *ro;
} raw;

/* The options troupe_db_open sets (storage/src/db.c), defaults otherwise. */
static void
raw_open(raw *r, const char *dir)
{
    rocksdb_options_t *base = rocksdb_options_create();
    r->opts = rocksdb_options_create();
    char *err = NULL;
    rocksdb_get_options_from_string(
        base,
        "allow_fallocate=false;avoid_flush_during_recovery=true;"
        "fail_if_options_file_error=false",
        r->opts, &err);
    if (err)
        rdie("options", err);
    rocksdb_options_destroy(base);
    r->topts = rocksdb_block_based_options_create();
    r->cache = rocksdb_cache_create_lru(32u << 20);
    rocksdb_block_based_options_set_block_cache(r->topts, r->cache);
    rocksdb_block_based_options_set_filter_policy(
        r->topts, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(r->opts, 0.02);
    rocksdb_options_set_memtable_whole_key_filtering(r->opts, 1);
    rocksdb_options_set_block_based_table_factory(r->opts, r->topts);
    rocksdb_options_set_create_if_missing(r->opts, 1);
    rocksdb_options_set_paranoid_checks(r->opts, 1);
    rocksdb_options_set_keep_log_file_num(r->opts, 8);
    r->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(r->wo, 0);
    r->ro = rocksdb_readoptions_create();
    r->db = rocksdb_open(r->opts, dir, &err);
    if (err)
        rdie("open", err);
}

static void
raw_close(raw *r)
{
    rocksdb_close(r->db);
    rocksdb_writeoptions_destroy(r->wo);
    rocksdb_readoptions_destroy(r->ro);
    rocksdb_options_destroy(r->opts);
    rocksdb_block_based_options_destroy(r->topts);
    rocksdb_cache_destroy(r->cache);
}

typedef struct rctx {
    raw *r;
    troupe_tables *t; /* blocking troupe side */
    troupe_db *tdb;   /* query peer */
    troupe_cf *xcf, *tcf;
    op_kind op;
    _Atomic unsigned long long *next_key;
    bool scatter;
    uint64_t key_range;
    atomic_bool *stop;
    uint64_t n;
    uint64_t seed;
    pthread_t th;
} rctx;

static void
raw_query_once(rctx *c)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_int64(&w, (int64_t)(rnd(&c->seed) % GROUPS));
    troupe_range rg;
    troupe_err e = troupe_key_writer_range(&w, &rg);
    troupe_page *pg = NULL;
    if (e == TROUPE_OK)
        e = troupe_db_scan(c->tdb, c->xcf, NULL, &rg, NULL, 0, 100, false, &pg);
    if (e != TROUPE_OK)
        die("raw query scan", e);
    if (pg->n != 100)
        die("raw query: rows in group", TROUPE_EFAILED);
    for (size_t i = 0; i < pg->n; i++) {
        const void *pk;
        size_t pkl;
        void *v;
        size_t vl;
        e = troupe_index_key_pk(pg->items[i].key, pg->items[i].key_len, &pk,
                                &pkl);
        if (e == TROUPE_OK)
            e = troupe_db_get(c->tdb, c->tcf, NULL, pk, pkl, &v, &vl);
        if (e != TROUPE_OK)
            die("raw query get", e);
        troupe_free(v);
    }
    troupe_page_destroy(pg);
    troupe_key_writer_fini(&w);
}

static void *
raw_thread(void *arg)
{
    rctx *c = arg;
    raw *r = c->r;
    char key[KEY_LEN];
    uint8_t val[VAL_LEN];
    doc_plain(val);
    char *err = NULL;
    while (!atomic_load_explicit(c->stop, memory_order_relaxed)) {
        switch (c->op) {
        case OP_INSERT: {
            unsigned long long i = atomic_fetch_add(c->next_key, 1);
            mkkey(key, c->scatter ? scatter_key(i) : i);
            rocksdb_put(r->db, r->wo, key, KEY_LEN, (const char *)val, VAL_LEN,
                        &err);
            if (err)
                rdie("put", err);
            break;
        }
        case OP_GET: {
            mkkey(key, rnd(&c->seed) % c->key_range);
            size_t vl;
            char *v = rocksdb_get(r->db, r->ro, key, KEY_LEN, &vl, &err);
            if (err)
                rdie("get", err);
            if (v == NULL || vl != VAL_LEN)
                die("raw get: missing", TROUPE_EFAILED);
            rocksdb_free(v);
            break;
        }
        case OP_SCAN: {
            mkkey(key, rnd(&c->seed) % (c->key_range - SCAN_N));
            rocksdb_iterator_t *it = rocksdb_create_iterator(r->db, r->ro);
            rocksdb_iter_seek(it, key, KEY_LEN);
            size_t got = 0, bytes = 0;
            for (; got < SCAN_N && rocksdb_iter_valid(it); got++) {
                size_t kl, vl;
                const char *k = rocksdb_iter_key(it, &kl);
                const char *v = rocksdb_iter_value(it, &vl);
                bytes += kl + vl + (size_t)(k[0] + v[0]);
                rocksdb_iter_next(it);
            }
            rocksdb_iter_get_error(it, &err);
            if (err)
                rdie("scan", err);
            rocksdb_iter_destroy(it);
            if (got != SCAN_N || bytes == 0)
                die("raw scan: short", TROUPE_EFAILED);
            break;
        }
        default:
            raw_query_once(c);
            break;
        }
        c->n++;
    }
    return NULL;
}

/* The troupe side of table_get / table_scan100: like raw_thread, each
 * thread calls the blocking API in a loop. */
static void *
twait_thread(void *arg)
{
    rctx *c = arg;
    char key[KEY_LEN];
    while (!atomic_load_explicit(c->stop, memory_order_relaxed)) {
        troupe_rows *rows = NULL;
        troupe_err e;
        size_t want_n;
        if (c->op == OP_QUERY) {
            uint8_t v[6] = {0x91};
            put_u32(v + 1, (uint32_t)(rnd(&c->seed) % GROUPS));
            troupe_index_query q = {.values = v,
                                    .values_len = sizeof(v),
                                    .limit = 100,
                                    .rows = true};
            troupe_index_result *res = NULL;
            e = troupe_tables_query_wait(c->t, "q", "g", &q, &res);
            if (e != TROUPE_OK)
                die("blocking query", e);
            if (res->n != 100)
                die("blocking query: rows", TROUPE_EFAILED);
            troupe_index_result_destroy(res);
            c->n++;
            continue;
        }
        if (c->op == OP_GET) {
            mkkey(key, rnd(&c->seed) % c->key_range);
            e = troupe_table_get_wait(c->t, "kv", key, KEY_LEN, &rows);
            want_n = 1;
        } else {
            mkkey(key, rnd(&c->seed) % (c->key_range - SCAN_N));
            troupe_scan_opts so = {
                .start = key, .start_len = KEY_LEN, .limit = SCAN_N};
            e = troupe_table_scan_wait(c->t, "kv", &so, &rows);
            want_n = SCAN_N;
        }
        if (e != TROUPE_OK)
            die("blocking read", e);
        if (rows->n != want_n)
            die("blocking read: rows", TROUPE_EFAILED);
        troupe_rows_destroy(rows);
        c->n++;
    }
    return NULL;
}

static double
raw_run(rctx *tmpl, double seconds)
{
    if (side_only && strcmp(side_only, tmpl->t ? "troupe" : "raw") != 0)
        return 0;
    rctx cs[MAX_THREADS];
    atomic_bool stop = false;
    double t0 = bench_now();
    for (int i = 0; i < nthreads; i++) {
        cs[i] = *tmpl;
        cs[i].stop = &stop;
        cs[i].n = 0;
        cs[i].seed = tmpl->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        if (pthread_create(&cs[i].th, NULL, tmpl->t ? twait_thread : raw_thread,
                           &cs[i]) != 0)
            die("pthread_create", TROUPE_ESYS);
    }
    while (bench_now() - t0 < seconds)
        usleep(2000);
    atomic_store(&stop, true);
    uint64_t n = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(cs[i].th, NULL);
        n += cs[i].n;
    }
    return (double)n / (bench_now() - t0);
}

/* ---- setup helpers ---- */

static void
load_table(troupe_tables *t, const char *table, int doc,
           _Atomic unsigned long long *next, unsigned long long upto)
{
    drive d = {
        .t = t, .table = table, .op = OP_INSERT, .doc = doc, .next_key = next};
    /* Run in slices until enough keys were inserted. */
    while (atomic_load(next) < upto) {
        atomic_store(&d.stop, false);
        atomic_store(&d.inflight, inflight);
        for (int i = 0; i < inflight; i++)
            issue(&d);
        while (atomic_load(next) < upto)
            usleep(1000);
        atomic_store(&d.stop, true);
        while (atomic_load(&d.inflight) > 0)
            usleep(1000);
    }
    if (atomic_load(&d.err) != TROUPE_OK)
        die("load", atomic_load(&d.err));
}

/* Seconds of CPU the whole process has used. */
static double
cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
report_rep(const char *name, int i, double a, const char *pname, double b)
{
    printf("  %s rep %d: %.0f/s, %s %.0f/s, ratio %.2f\n", name, i + 1, a,
           pname, b, b > 0 ? a / b : 0);
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    only = argc > 1 ? argv[1] : NULL;
    side_only = getenv("BENCH_SIDE");
    int reps = bench_reps(5);
    const char *s = getenv("BENCH_SECONDS");
    if (s && atof(s) > 0)
        secs = atof(s);
    long np = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = np < 1 ? 1 : np > MAX_THREADS ? MAX_THREADS : (int)np;
    if ((s = getenv("BENCH_RAW_THREADS")) && atoi(s) > 0)
        nthreads = atoi(s) > MAX_THREADS ? MAX_THREADS : atoi(s);
    if ((s = getenv("BENCH_INFLIGHT")) && atoi(s) > 0)
        inflight = atoi(s) > INFLIGHT_MAX ? INFLIGHT_MAX : atoi(s);
    const char *tmp = getenv("TMPDIR");
    char base[4096], tdir[4200], rdir[4200];
    snprintf(base, sizeof(base), "%s/troupe-bench-table-XXXXXX",
             tmp ? tmp : "/tmp");
    if (mkdtemp(base) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(tdir, sizeof(tdir), "%s/troupe", base);
    snprintf(rdir, sizeof(rdir), "%s/raw", base);

    troupe_db_opts dbo;
    troupe_db_opts_init(&dbo);
    dbo.sync = false;
    troupe_db *db;
    troupe_err e = troupe_db_open(tdir, &dbo, &db);
    if (e != TROUPE_OK)
        die("open", e);
    troupe_commit *cm;
    if ((e = troupe_commit_create(db, NULL, &cm)) != TROUPE_OK)
        die("commit_create", e);
    troupe_runtime *rt;
    if ((e = troupe_runtime_create(&rt, NULL)) != TROUPE_OK)
        die("runtime", e);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    troupe_catalog *cat;
    if ((e = troupe_catalog_open(&co, &cat)) != TROUPE_OK)
        die("catalog_open", e);
    troupe_tables_opts to = {.catalog = cat, .commit = cm};
    troupe_tables *t;
    if ((e = troupe_tables_open(&to, &t)) != TROUPE_OK)
        die("tables_open", e);
    raw r;
    raw_open(&r, rdir);

    troupe_index_field fa = {"a", TROUPE_FIELD_INT};
    troupe_index_field fb = {"b", TROUPE_FIELD_STRING};
    troupe_index_field fc = {"c", TROUPE_FIELD_INT};
    troupe_index_field fg = {"g", TROUPE_FIELD_INT};
    troupe_index_spec ia = {.name = "a", .fields = &fa, .n_fields = 1};
    troupe_index_spec ib = {.name = "b", .fields = &fb, .n_fields = 1};
    troupe_index_spec ic = {.name = "c", .fields = &fc, .n_fields = 1};
    troupe_index_spec ig = {.name = "g", .fields = &fg, .n_fields = 1};
    troupe_index_spec i3[3] = {ia, ib, ic};
    if ((e = troupe_tables_create_wait(t, "kv", NULL, 0)) != TROUPE_OK ||
        (e = troupe_tables_create_wait(t, "kr", NULL, 0)) != TROUPE_OK ||
        (e = troupe_tables_create_wait(t, "i0", NULL, 0)) != TROUPE_OK ||
        (e = troupe_tables_create_wait(t, "i1", &ia, 1)) != TROUPE_OK ||
        (e = troupe_tables_create_wait(t, "i3", i3, 3)) != TROUPE_OK ||
        (e = troupe_tables_create_wait(t, "q", &ig, 1)) != TROUPE_OK)
        die("create", e);

    printf("table: %d B keys, %d B values (msgpack docs), unsynced writes; "
           "troupe %d requests in flight, raw %d threads; %d reps x %.1f s "
           "per side; dir %s\n",
           KEY_LEN, VAL_LEN, inflight, nthreads, reps, secs, base);

    /* Preload: PRELOAD rows in "kv" and in the raw db; GROUPS x 100 rows
     * in "q". Keys of "q" spread the groups: row i has group i % GROUPS. */
    double tl = bench_now();
    static _Atomic unsigned long long kv_next, raw_next;
    load_table(t, "kv", 0, &kv_next, PRELOAD);
    {
        uint8_t val[VAL_LEN];
        doc_plain(val);
        char key[KEY_LEN], *err = NULL;
        for (unsigned long long i = 0; i < PRELOAD; i++) {
            mkkey(key, i);
            rocksdb_put(r.db, r.wo, key, KEY_LEN, (const char *)val, VAL_LEN,
                        &err);
            if (err)
                rdie("put", err);
        }
        atomic_store(&raw_next, PRELOAD);
    }
    for (unsigned long long i = 0; i < (unsigned long long)GROUPS * 100; i++) {
        char key[KEY_LEN];
        uint8_t doc[VAL_LEN];
        mkkey(key, i);
        doc_group(doc, (uint32_t)(i % GROUPS));
        troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
        if ((e = troupe_table_insert_wait(t, "q", key, KEY_LEN, doc, VAL_LEN,
                                          &wo)) != TROUPE_OK)
            die("load q", e);
    }
    if ((e = troupe_db_flush(db)) != TROUPE_OK)
        die("flush", e);
    {
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flushoptions_set_wait(fo, 1);
        char *err = NULL;
        rocksdb_flush(r.db, fo, &err);
        rocksdb_flushoptions_destroy(fo);
        if (err)
            rdie("flush", err);
    }
    printf("preload %.1f s\n", bench_now() - tl);
    fflush(stdout);

    /* Families of "q" for the query peer: t.<id> holds 20000 rows, x.<id>
     * is the one index family with them; find them by name. */
    troupe_cf *qt = NULL, *qx = NULL;
    {
        char **names;
        size_t n;
        if ((e = troupe_db_cf_names(db, &names, &n)) != TROUPE_OK)
            die("cf_names", e);
        /* "q" was created last: the highest t.<id> and x.<id>. */
        unsigned long long best_t = 0, best_x = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned long long id;
            if (sscanf(names[i], "t.%llu", &id) == 1 && id >= best_t)
                best_t = id;
            if (sscanf(names[i], "x.%llu", &id) == 1 && id >= best_x)
                best_x = id;
        }
        troupe_free(names);
        char nm[TROUPE__CF_NAME_LEN];
        troupe__cf_name('t', best_t, nm, sizeof(nm));
        if ((e = troupe_db_cf(db, nm, &qt)) != TROUPE_OK)
            die("cf t", e);
        troupe__cf_name('x', best_x, nm, sizeof(nm));
        if ((e = troupe_db_cf(db, nm, &qx)) != TROUPE_OK)
            die("cf x", e);
    }

    double vt[64], vr[64];
    double get_t = 0, get_r = 0, scan_t = 0, scan_r = 0, q_t = 0, q_r = 0,
           ip0 = 0, ip1 = 0, ip3 = 0, get_a = 0, scan_a = 0, q_a = 0;

    if (want("table_get")) {
        /* table_get */
        drive dg = {.t = t,
                    .table = "kv",
                    .op = OP_GET,
                    .key_range = PRELOAD,
                    .seed = 88172645463325252ull};
        rctx rg = {.r = &r, .op = OP_GET, .key_range = PRELOAD, .seed = 12345};
        rctx tg = rg;
        tg.t = t;
        double va[64];
        drive_run(&dg, secs / 4); /* warm the caches */
        raw_run(&rg, secs / 4);
        for (int i = 0; i < reps; i++) {
            vt[i] = raw_run(&tg, secs);
            vr[i] = raw_run(&rg, secs);
            va[i] = drive_run(&dg, secs);
            report_rep("table_get", i, vt[i], "rocksdb_get", vr[i]);
            report_rep("table_get_async", i, va[i], "rocksdb_get", vr[i]);
        }
        get_t = bench_median(vt, reps);
        get_r = bench_median(vr, reps);
        get_a = bench_median(va, reps);
        bench_line_peer("table_get", get_t, "gets/s", "rocksdb_get", get_r);
        bench_line_peer("table_get_async", get_a, "gets/s", "rocksdb_get",
                        get_r);
    }

    if (want("table_scan100")) {
        /* table_scan100 */
        drive ds = {.t = t,
                    .table = "kv",
                    .op = OP_SCAN,
                    .key_range = PRELOAD,
                    .seed = 0x2545F4914F6CDD1Dull};
        rctx rs = {.r = &r, .op = OP_SCAN, .key_range = PRELOAD, .seed = 777};
        rctx ts = rs;
        ts.t = t;
        double va[64];
        for (int i = 0; i < reps; i++) {
            vt[i] = raw_run(&ts, secs);
            vr[i] = raw_run(&rs, secs);
            va[i] = drive_run(&ds, secs);
            report_rep("table_scan100", i, vt[i], "rocksdb_scan100", vr[i]);
            report_rep("table_scan100_async", i, va[i], "rocksdb_scan100",
                       vr[i]);
        }
        scan_t = bench_median(vt, reps);
        scan_r = bench_median(vr, reps);
        scan_a = bench_median(va, reps);
        bench_line_peer("table_scan100", scan_t, "scans/s", "rocksdb_scan100",
                        scan_r);
        bench_line_peer("table_scan100_async", scan_a, "scans/s",
                        "rocksdb_scan100", scan_r);
    }

    if (want("index_query100")) {
        /* index_query100 */
        drive dq = {.t = t, .table = "q", .op = OP_QUERY, .seed = 99991};
        rctx rq = {.r = &r,
                   .tdb = db,
                   .xcf = qx,
                   .tcf = qt,
                   .op = OP_QUERY,
                   .seed = 4242};
        rctx tq = rq;
        tq.t = t;
        double va[64];
        for (int i = 0; i < reps; i++) {
            vt[i] = raw_run(&tq, secs);
            vr[i] = raw_run(&rq, secs);
            va[i] = drive_run(&dq, secs);
            report_rep("index_query100", i, vt[i], "raw_query100", vr[i]);
            report_rep("index_query100_async", i, va[i], "raw_query100", vr[i]);
        }
        q_t = bench_median(vt, reps);
        q_r = bench_median(vr, reps);
        q_a = bench_median(va, reps);
        bench_line_peer("index_query100", q_t, "queries/s", "raw_query100",
                        q_r);
        bench_line_peer("index_query100_async", q_a, "queries/s",
                        "raw_query100", q_r);
    }

    /* table_put: fresh keys past the preloaded ones, in "kv"; then
     * table_put_random: fresh keys all over the key space, in "kr" (the
     * raw side puts them in its one database) */
    static _Atomic unsigned long long kr_next, rr_next;
    const struct {
        const char *name, *peer, *table;
        _Atomic unsigned long long *tnext, *rnext;
        bool scatter;
    } putv[2] = {
        {"table_put", "rocksdb_put", "kv", &kv_next, &raw_next, false},
        {"table_put_random", "rocksdb_put_random", "kr", &kr_next, &rr_next,
         true},
    };
    double put_tv[2] = {0, 0}, put_rv[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        if (!want(putv[v].name))
            continue;
        drive dp = {.t = t,
                    .table = putv[v].table,
                    .op = OP_INSERT,
                    .doc = 0,
                    .next_key = putv[v].tnext,
                    .scatter = putv[v].scatter};
        rctx rp = {.r = &r,
                   .op = OP_INSERT,
                   .next_key = putv[v].rnext,
                   .scatter = putv[v].scatter};
        for (int i = 0; i < reps; i++) {
            /* CPU per row (all threads of the process, background
             * flushes included): steadier than the rates on a busy
             * machine, and what the ratio comes down to when the side
             * uses every core. */
            double c0 = cpu_now();
            vt[i] = drive_run(&dp, secs);
            double c1 = cpu_now();
            vr[i] = raw_run(&rp, secs);
            double c2 = cpu_now();
            report_rep(putv[v].name, i, vt[i], putv[v].peer, vr[i]);
            if (vt[i] > 0 && vr[i] > 0)
                printf("  %s rep %d: cpu per row %.2f us, raw %.2f us\n",
                       putv[v].name, i + 1, (c1 - c0) * 1e6 / (vt[i] * secs),
                       (c2 - c1) * 1e6 / (vr[i] * secs));
        }
        put_tv[v] = bench_median(vt, reps);
        put_rv[v] = bench_median(vr, reps);
        bench_line_peer(putv[v].name, put_tv[v], "rows/s", putv[v].peer,
                        put_rv[v]);
    }

    if (want("index_put")) {
        /* index_put_1, index_put_3 against index_put_0, same documents */
        static _Atomic unsigned long long n0, n1, n3;
        drive d0 = {
            .t = t, .table = "i0", .op = OP_INSERT, .doc = 1, .next_key = &n0};
        drive d1 = d0, d3 = d0;
        d1.table = "i1";
        d1.next_key = &n1;
        d3.table = "i3";
        d3.next_key = &n3;
        double v0[64], v1[64], v3[64];
        for (int i = 0; i < reps; i++) {
            v0[i] = drive_run(&d0, secs);
            v1[i] = drive_run(&d1, secs);
            v3[i] = drive_run(&d3, secs);
            printf("  index_put rep %d: 0 indexes %.0f/s, 1: %.0f/s (%.2f), "
                   "3: %.0f/s (%.2f)\n",
                   i + 1, v0[i], v1[i], v0[i] > 0 ? v1[i] / v0[i] : 0, v3[i],
                   v0[i] > 0 ? v3[i] / v0[i] : 0);
            fflush(stdout);
        }
        ip0 = bench_median(v0, reps);
        ip1 = bench_median(v1, reps);
        ip3 = bench_median(v3, reps);
        bench_line_peer("index_put_1", ip1, "rows/s", "index_put_0", ip0);
        bench_line_peer("index_put_3", ip3, "rows/s", "index_put_0", ip0);
    }

    if ((e = troupe_tables_stop_wait(t)) != TROUPE_OK)
        die("stop", e);
    troupe_tables_destroy(t);
    troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
    troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
    troupe_commit_stats cst;
    troupe_commit_get_stats(cm, &cst);
    printf("commit pipeline: %llu batches in %llu groups (%.1f per group)\n",
           (unsigned long long)cst.batches, (unsigned long long)cst.groups,
           cst.groups ? (double)cst.batches / (double)cst.groups : 0.0);
    troupe_commit_destroy(cm);
    if ((e = troupe_db_close(db)) != TROUPE_OK)
        die("close", e);
    raw_close(&r);
    bench_rmtree(base);

    printf("summary (medians):\n");
    for (int v = 0; v < 2; v++)
        if (want(putv[v].name))
            bench_line_peer(putv[v].name, put_tv[v], "rows/s", putv[v].peer,
                            put_rv[v]);
    if (want("table_get")) {
        bench_line_peer("table_get", get_t, "gets/s", "rocksdb_get", get_r);
        bench_line_peer("table_get_async", get_a, "gets/s", "rocksdb_get",
                        get_r);
    }
    if (want("table_scan100")) {
        bench_line_peer("table_scan100", scan_t, "scans/s", "rocksdb_scan100",
                        scan_r);
        bench_line_peer("table_scan100_async", scan_a, "scans/s",
                        "rocksdb_scan100", scan_r);
    }
    if (want("index_put")) {
        bench_line_peer("index_put_1", ip1, "rows/s", "index_put_0", ip0);
        bench_line_peer("index_put_3", ip3, "rows/s", "index_put_0", ip0);
    }
    if (want("index_query100")) {
        bench_line_peer("index_query100", q_t, "queries/s", "raw_query100",
                        q_r);
        bench_line_peer("index_query100_async", q_a, "queries/s",
                        "raw_query100", q_r);
    }
    return 0;
}
