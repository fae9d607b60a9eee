/*
 * bench_txn: transactions.
 *
 *   bench txn_commit_64 <v> commits/s peer txn_commit_1 <v> ratio <r>
 *   bench txn_transfer <v> commits/s  (+ a line with conflicts, retries)
 *   bench versioned_1   <v> txns/s peer ordinary_1   <v> ratio <r>
 *   bench versioned_16  <v> txns/s peer ordinary_16  <v> ratio <r>
 *   bench versioned_256 <v> txns/s peer ordinary_256 <v> ratio <r>
 *
 * txn_commit_64: synced commits/s of small transactions (get of one key,
 * insert of it: a fresh increasing 16 B key, a 100 B document), 64 in
 * flight through the asynchronous API against 1 at a time (the peer).
 * Group commit merges the 64 into few fdatasyncs. Keys are fresh, so the
 * only possible conflict is the spurious one every 65536 keys (the table
 * forgets its versions and raises its floor): counted and printed per
 * rep, not counted as a commit.
 *
 * txn_transfer: BENCH_ACCOUNTS (32) accounts, half in table acct_a, half
 * in acct_b, each {"b": int64}. BENCH_TRANSFER_THREADS (16) threads move a
 * random amount between two random distinct accounts (often across the
 * two tables) through troupe_txn_run_wait (get both, update both, synced
 * commit; replayed on ECONFLICT with its backoff, up to 64 attempts). A
 * checker thread sums every balance in one read-only transaction (a scan
 * of both tables from one snapshot) all along, and once more at the end:
 * any sum other than the initial one prints an error and the binary exits
 * 1. Printed: commits/s, conflicts (ECONFLICT commits), retries (replays),
 * transfers given up after 64 attempts.
 *
 * versioned_N: one client transaction reads N keys and writes all N back.
 * Ordinary (the peer): begin, get_many(N), N upserts, commit. Versioned
 * (pi_db's protocol): one query_versions call for the N keys (the batch
 * form of query_version: each value with its version), begin,
 * N read_version, N upserts, commit_version (N receipts checked). Ratio =
 * versioned throughput / ordinary throughput (1.0: no overhead; 0.87 is
 * the goal's +15%). Both sides use the same keys (BENCH_CLIENTS, default
 * 8, clients with disjoint key sets, so no conflicts) and unsynced
 * commits, so the figure is the protocol's cost and not fdatasync's.
 * A second, informative line, versioned_cached_N, is the versioned flow
 * of a client that keeps the versions from its receipts (pi_db's cache)
 * and so skips the queries after its first transaction.
 *
 * Each rep runs one side then the other for BENCH_SECONDS (default 1) each
 * (versioned_N: the three sides in an order that rotates from rep to rep,
 * each from a freshly flushed memtable); figures are medians of BENCH_REPS
 * (default 5). BENCH_SIDE=ordinary|versioned|cached runs one versioned_N
 * side only (profiling). BENCH_INFLIGHT (64) changes txn_commit_64's
 * concurrency, BENCH_ACCOUNTS / BENCH_TRANSFER_THREADS txn_transfer's,
 * BENCH_CLIENTS versioned_N's. argv[1] runs only the
 * figures whose name contains it. docs/performance.md, "Transactions".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/txn.h"

#define KEY_LEN 16
#define VAL_LEN 100
#define SLOTS_MAX 256
#define VKEYS_MAX 256
#define THREADS_MAX 64
#define START_BALANCE 1000

static double secs = 1.0;
static const char *only;
static troupe_tables *T;
static troupe_db *DB;

static int
want(const char *name)
{
    return only == NULL || strstr(name, only) != NULL;
}

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "bench_txn: %s: %s\n", what, troupe_err_name(e));
    exit(1);
}

static void
mkkey(char *k, char tag, unsigned long long i)
{
    char tmp[KEY_LEN + 1];
    snprintf(tmp, sizeof(tmp), "%c%015llu", tag, i);
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

/* {"v": u32, "p": str} of exactly VAL_LEN bytes */
static void
doc_make(uint8_t *d, uint32_t v)
{
    uint8_t *p = d;
    *p++ = 0x82;
    *p++ = 0xa1;
    *p++ = 'v';
    *p++ = 0xce;
    *p++ = (uint8_t)(v >> 24);
    *p++ = (uint8_t)(v >> 16);
    *p++ = (uint8_t)(v >> 8);
    *p++ = (uint8_t)v;
    *p++ = 0xa1;
    *p++ = 'p';
    *p++ = 0xd9;
    size_t pad = VAL_LEN - (size_t)(p + 1 - d);
    *p++ = (uint8_t)pad;
    memset(p, 'x', pad);
}

/* {"b": int64} */
#define BAL_LEN 12
static void
bal_make(uint8_t *d, int64_t b)
{
    uint64_t u = (uint64_t)b;
    d[0] = 0x81;
    d[1] = 0xa1;
    d[2] = 'b';
    d[3] = 0xd3;
    for (int i = 0; i < 8; i++)
        d[4 + i] = (uint8_t)(u >> (56 - 8 * i));
}

static int
bal_read(const uint8_t *d, size_t n, int64_t *b)
{
    if (n != BAL_LEN || d[0] != 0x81 || d[1] != 0xa1 || d[2] != 'b' ||
        d[3] != 0xd3)
        return -1;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = (u << 8) | d[4 + i];
    *b = (int64_t)u;
    return 0;
}

/* ---- txn_commit: get + insert of a fresh key, synced ---- */

typedef struct cslot {
    troupe_txn *tx;
    char key[KEY_LEN];
} cslot;

static cslot cslots[SLOTS_MAX];
static _Atomic unsigned long long c_next;
static atomic_bool c_stop;
static atomic_int c_inflight;
static _Atomic uint64_t c_done;
static _Atomic uint64_t c_conflicts;

static void
c_issue(cslot *s);

static void
c_committed(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
            size_t n, void *arg)
{
    (void)c;
    (void)n;
    cslot *s = arg;
    troupe_txn_destroy(tx);
    s->tx = NULL;
    /* Keys are fresh, so a conflict can only be the spurious kind: the
     * table forgets its versions every 65536 keys and raises its floor
     * (data-model.md, "Key versions"); every transaction in flight that
     * began before then conflicts. Counted, not committed: next one. */
    if (err == TROUPE_ECONFLICT)
        atomic_fetch_add_explicit(&c_conflicts, 1, memory_order_relaxed);
    else if (err != TROUPE_OK)
        die("txn_commit commit", err);
    else
        atomic_fetch_add_explicit(&c_done, 1, memory_order_relaxed);
    if (!atomic_load_explicit(&c_stop, memory_order_relaxed))
        c_issue(s);
    else
        atomic_fetch_sub(&c_inflight, 1);
}

static void
c_got(troupe_err err, troupe_rows *rows, void *arg)
{
    cslot *s = arg;
    troupe_rows_destroy(rows);
    if (err != TROUPE_ENOENT)
        die("txn_commit get (expected ENOENT)", err);
    uint8_t doc[VAL_LEN];
    doc_make(doc, 1);
    troupe_err e =
        troupe_txn_insert(s->tx, "kv", s->key, KEY_LEN, doc, VAL_LEN, NULL);
    if (e == TROUPE_OK)
        e = troupe_txn_commit(s->tx, TROUPE_SYNC_ON, c_committed, s);
    if (e != TROUPE_OK)
        die("txn_commit insert/commit", e);
}

static void
c_issue(cslot *s)
{
    mkkey(s->key, 'c', atomic_fetch_add(&c_next, 1));
    troupe_err e = troupe_txn_begin(T, NULL, &s->tx);
    if (e == TROUPE_OK)
        e = troupe_txn_get(s->tx, "kv", s->key, KEY_LEN, c_got, s);
    if (e != TROUPE_OK)
        die("txn_commit begin/get", e);
}

static double
c_run(int n)
{
    atomic_store(&c_stop, false);
    atomic_store(&c_done, 0);
    atomic_store(&c_conflicts, 0);
    atomic_store(&c_inflight, n);
    double t0 = bench_now();
    for (int i = 0; i < n; i++)
        c_issue(&cslots[i]);
    while (bench_now() - t0 < secs)
        usleep(2000);
    uint64_t done = atomic_load(&c_done);
    double dt = bench_now() - t0;
    atomic_store(&c_stop, true);
    while (atomic_load(&c_inflight) > 0)
        usleep(1000);
    return (double)done / dt;
}

/* ---- txn_transfer ---- */

static int n_accounts = 32;
static int n_tthreads = 16;
static atomic_bool t_stop;
static atomic_bool t_bad;
static _Atomic uint64_t t_commits, t_conflicts, t_retries, t_gaveup, t_checks;

static void
acct_key(int i, const char **table, char *key)
{
    *table = i % 2 ? "acct_b" : "acct_a";
    mkkey(key, 'a', (unsigned long long)i);
}

typedef struct xfer {
    int from, to;
    int64_t amount;
} xfer;

static troupe_err
xfer_fn(troupe_txn *tx, void *arg)
{
    xfer *x = arg;
    const char *tf, *tt;
    char kf[KEY_LEN], kt[KEY_LEN];
    acct_key(x->from, &tf, kf);
    acct_key(x->to, &tt, kt);
    troupe_rows *rf = NULL, *rt = NULL;
    troupe_err e = troupe_txn_get_wait(tx, tf, kf, KEY_LEN, &rf);
    if (e == TROUPE_OK)
        e = troupe_txn_get_wait(tx, tt, kt, KEY_LEN, &rt);
    int64_t bf = 0, bt = 0;
    if (e == TROUPE_OK &&
        (bal_read(rf->rows[0].doc, rf->rows[0].doc_len, &bf) != 0 ||
         bal_read(rt->rows[0].doc, rt->rows[0].doc_len, &bt) != 0))
        e = TROUPE_ECORRUPT;
    troupe_rows_destroy(rf);
    troupe_rows_destroy(rt);
    if (e != TROUPE_OK)
        return e;
    if (bf < x->amount)
        return TROUPE_OK; /* insufficient funds: a read-only commit */
    uint8_t d[BAL_LEN];
    bal_make(d, bf - x->amount);
    e = troupe_txn_update(tx, tf, kf, KEY_LEN, d, BAL_LEN, NULL);
    if (e == TROUPE_OK) {
        bal_make(d, bt + x->amount);
        e = troupe_txn_update(tx, tt, kt, KEY_LEN, d, BAL_LEN, NULL);
    }
    return e;
}

static void *
xfer_thread(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    while (!atomic_load_explicit(&t_stop, memory_order_relaxed)) {
        xfer x;
        x.from = (int)(rnd(&seed) % (uint64_t)n_accounts);
        do
            x.to = (int)(rnd(&seed) % (uint64_t)n_accounts);
        while (x.to == x.from);
        x.amount = (int64_t)(rnd(&seed) % 50) + 1;
        uint32_t attempts = 0;
        troupe_txn_retry r = {.max_attempts = 64,
                              .base_ms = 1,
                              .max_ms = 20,
                              .sync = TROUPE_SYNC_ON,
                              .attempts = &attempts};
        troupe_err e = troupe_txn_run_wait(T, NULL, &r, xfer_fn, &x);
        if (attempts > 1) {
            atomic_fetch_add(&t_retries, attempts - 1);
            atomic_fetch_add(&t_conflicts, attempts - 1);
        }
        if (e == TROUPE_OK)
            atomic_fetch_add(&t_commits, 1);
        else if (e == TROUPE_ECONFLICT) {
            atomic_fetch_add(&t_conflicts, 1);
            atomic_fetch_add(&t_gaveup, 1);
        } else
            die("transfer", e);
    }
    return NULL;
}

/* Sum of every balance, from one snapshot. */
static int64_t
sum_balances(void)
{
    troupe_txn *tx;
    troupe_err e = troupe_txn_begin(T, NULL, &tx);
    if (e != TROUPE_OK)
        die("sum begin", e);
    int64_t sum = 0;
    size_t seen = 0;
    const char *tabs[2] = {"acct_a", "acct_b"};
    for (int t = 0; t < 2; t++) {
        troupe_rows *rows = NULL;
        troupe_scan_opts so = {.limit = TROUPE_TABLE_PAGE_MAX};
        if ((e = troupe_txn_scan_wait(tx, tabs[t], &so, &rows)) != TROUPE_OK)
            die("sum scan", e);
        for (size_t i = 0; i < rows->n; i++) {
            int64_t b;
            if (bal_read(rows->rows[i].doc, rows->rows[i].doc_len, &b) != 0)
                die("sum: malformed balance", TROUPE_ECORRUPT);
            sum += b;
        }
        seen += rows->n;
        troupe_rows_destroy(rows);
    }
    troupe_txn_destroy(tx);
    if (seen != (size_t)n_accounts) {
        fprintf(stderr, "bench_txn: sum: %zu accounts seen, %d expected\n",
                seen, n_accounts);
        atomic_store(&t_bad, true);
    }
    return sum;
}

static void *
checker_thread(void *arg)
{
    (void)arg;
    int64_t want_sum = (int64_t)n_accounts * START_BALANCE;
    while (!atomic_load(&t_stop)) {
        int64_t s = sum_balances();
        atomic_fetch_add(&t_checks, 1);
        if (s != want_sum) {
            fprintf(stderr,
                    "bench_txn: SUM OF BALANCES CHANGED: %lld, "
                    "expected %lld\n",
                    (long long)s, (long long)want_sum);
            atomic_store(&t_bad, true);
        }
        usleep(20000);
    }
    return NULL;
}

static double
t_run(uint64_t *conflicts, uint64_t *retries, uint64_t *gaveup)
{
    pthread_t th[THREADS_MAX], ck;
    atomic_store(&t_stop, false);
    atomic_store(&t_commits, 0);
    atomic_store(&t_conflicts, 0);
    atomic_store(&t_retries, 0);
    atomic_store(&t_gaveup, 0);
    double t0 = bench_now();
    for (int i = 0; i < n_tthreads; i++)
        if (pthread_create(&th[i], NULL, xfer_thread,
                           (void *)(uintptr_t)(i + 1 + 1000 * rand())) != 0)
            die("pthread_create", TROUPE_ESYS);
    if (pthread_create(&ck, NULL, checker_thread, NULL) != 0)
        die("pthread_create", TROUPE_ESYS);
    while (bench_now() - t0 < secs)
        usleep(2000);
    uint64_t n = atomic_load(&t_commits);
    double dt = bench_now() - t0;
    atomic_store(&t_stop, true);
    for (int i = 0; i < n_tthreads; i++)
        pthread_join(th[i], NULL);
    pthread_join(ck, NULL);
    *conflicts = atomic_load(&t_conflicts);
    *retries = atomic_load(&t_retries);
    *gaveup = atomic_load(&t_gaveup);
    return (double)n / dt;
}

/* ---- versioned vs ordinary ---- */

typedef struct vslot {
    int idx;
    troupe_txn *tx;
    uint32_t round;
    bool have_versions;
    char keys[VKEYS_MAX][KEY_LEN];
    uint64_t ver[VKEYS_MAX];
} vslot;

static vslot vslots[SLOTS_MAX];
static int v_clients = 8;
static int v_n;    /* keys per transaction */
static int v_mode; /* 0 ordinary, 1 versioned, 2 versioned with cache */
static atomic_bool v_stop;
static atomic_int v_inflight;
static _Atomic uint64_t v_done;

static void
v_issue(vslot *s);

static void
v_next(vslot *s)
{
    atomic_fetch_add_explicit(&v_done, 1, memory_order_relaxed);
    if (!atomic_load_explicit(&v_stop, memory_order_relaxed))
        v_issue(s);
    else
        atomic_fetch_sub(&v_inflight, 1);
}

static void
v_write_all(vslot *s)
{
    uint8_t doc[VAL_LEN];
    doc_make(doc, ++s->round);
    for (int i = 0; i < v_n; i++) {
        troupe_err e = troupe_txn_upsert(s->tx, "vkv", s->keys[i], KEY_LEN, doc,
                                         VAL_LEN, NULL);
        if (e != TROUPE_OK)
            die("versioned upsert", e);
    }
}

static void
o_committed(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
            size_t n, void *arg)
{
    (void)c;
    (void)n;
    vslot *s = arg;
    troupe_txn_destroy(tx);
    if (err != TROUPE_OK)
        die("ordinary commit", err);
    v_next(s);
}

static void
o_got(troupe_err err, troupe_rows *rows, void *arg)
{
    vslot *s = arg;
    if (err != TROUPE_OK)
        die("ordinary get_many", err);
    if (rows->n != (size_t)v_n)
        die("ordinary get_many: rows missing", TROUPE_EFAILED);
    troupe_rows_destroy(rows);
    v_write_all(s);
    troupe_err e = troupe_txn_commit(s->tx, TROUPE_SYNC_OFF, o_committed, s);
    if (e != TROUPE_OK)
        die("ordinary commit call", e);
}

static void
vv_committed(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
             size_t n, const troupe_txn_receipt *r, size_t nr, void *arg)
{
    (void)c;
    (void)n;
    vslot *s = arg;
    if (err != TROUPE_OK)
        die("commit_version", err);
    if (nr != (size_t)v_n)
        die("commit_version: receipts", TROUPE_EFAILED);
    /* keys are generated sorted, one table: receipts come in key order */
    for (size_t i = 0; i < nr; i++) {
        if (r[i].key_len != KEY_LEN ||
            memcmp(r[i].key, s->keys[i], KEY_LEN) != 0 || r[i].deleted)
            die("commit_version: receipt order", TROUPE_EFAILED);
        s->ver[i] = r[i].version;
    }
    s->have_versions = true;
    troupe_txn_destroy(tx);
    v_next(s);
}

static void
vv_commit(vslot *s)
{
    troupe_err e = troupe_txn_begin(T, NULL, &s->tx);
    if (e != TROUPE_OK)
        die("versioned begin", e);
    for (int i = 0; i < v_n; i++)
        if ((e = troupe_txn_read_version(s->tx, "vkv", s->keys[i], KEY_LEN,
                                         s->ver[i])) != TROUPE_OK)
            die("read_version", e);
    v_write_all(s);
    if ((e = troupe_txn_commit_version(s->tx, TROUPE_SYNC_OFF, vv_committed,
                                       s)) != TROUPE_OK)
        die("commit_version call", e);
}

static void
vv_queried(troupe_err err, troupe_rows *rows, uint64_t *versions, void *arg)
{
    vslot *s = arg;
    if (err != TROUPE_OK)
        die("query_versions", err);
    if (rows->n != (size_t)v_n)
        die("query_versions: row missing", TROUPE_EFAILED);
    troupe_rows_destroy(rows);
    memcpy(s->ver, versions, sizeof(uint64_t) * (size_t)v_n);
    troupe_free(versions);
    vv_commit(s);
}

static void
v_issue(vslot *s)
{
    troupe_err e;
    if (v_mode == 0) {
        const void *ks[VKEYS_MAX];
        size_t kl[VKEYS_MAX];
        for (int i = 0; i < v_n; i++) {
            ks[i] = s->keys[i];
            kl[i] = KEY_LEN;
        }
        if ((e = troupe_txn_begin(T, NULL, &s->tx)) == TROUPE_OK)
            e = troupe_txn_get_many(s->tx, "vkv", ks, kl, (size_t)v_n, o_got,
                                    s);
        if (e != TROUPE_OK)
            die("ordinary begin/get_many", e);
        return;
    }
    if (v_mode == 2 && s->have_versions) {
        vv_commit(s);
        return;
    }
    const void *ks[VKEYS_MAX];
    size_t kl[VKEYS_MAX];
    for (int i = 0; i < v_n; i++) {
        ks[i] = s->keys[i];
        kl[i] = KEY_LEN;
    }
    if ((e = troupe_txn_query_versions(T, "vkv", ks, kl, (size_t)v_n,
                                       vv_queried, s)) != TROUPE_OK)
        die("query_versions call", e);
}

static double
v_run(int n, int mode)
{
    /* $BENCH_SIDE=ordinary|versioned|cached: one side only (profiling) */
    static const char *const side_names[3] = {"ordinary", "versioned",
                                              "cached"};
    const char *side = getenv("BENCH_SIDE");
    if (side != NULL && strcmp(side, side_names[mode]) != 0)
        return 0;
    v_n = n;
    v_mode = mode;
    /* Every phase starts from an empty memtable: these phases rewrite the
     * same keys, and a memtable holding many versions of them makes
     * RocksDB's inserts and gets slower as it fills (skiplist search),
     * which would favour whichever side ran first. */
    troupe_err fe = troupe_db_flush(DB);
    if (fe != TROUPE_OK)
        die("flush", fe);
    atomic_store(&v_stop, false);
    atomic_store(&v_done, 0);
    atomic_store(&v_inflight, v_clients);
    for (int c = 0; c < v_clients; c++) {
        vslot *s = &vslots[c];
        s->idx = c;
        s->have_versions = false;
        for (int i = 0; i < n; i++)
            mkkey(s->keys[i], 'v', (unsigned long long)c * VKEYS_MAX + i);
    }
    double t0 = bench_now();
    for (int c = 0; c < v_clients; c++)
        v_issue(&vslots[c]);
    while (bench_now() - t0 < secs)
        usleep(2000);
    uint64_t done = atomic_load(&v_done);
    double dt = bench_now() - t0;
    atomic_store(&v_stop, true);
    while (atomic_load(&v_inflight) > 0)
        usleep(1000);
    return (double)done / dt;
}

/* ---- main ---- */

static int
env_int(const char *name, int dflt, int lo, int hi)
{
    const char *s = getenv(name);
    int v = s ? atoi(s) : dflt;
    return v < lo ? lo : v > hi ? hi : v;
}

int
main(int argc, char **argv)
{
    int reps = bench_reps(5);
    only = argc > 1 ? argv[1] : NULL;
    const char *se = getenv("BENCH_SECONDS");
    if (se && atof(se) > 0)
        secs = atof(se);
    n_accounts = env_int("BENCH_ACCOUNTS", 32, 2, 100000);
    n_tthreads = env_int("BENCH_TRANSFER_THREADS", 16, 1, THREADS_MAX);
    v_clients = env_int("BENCH_CLIENTS", 8, 1, SLOTS_MAX);
    int c_hi = env_int("BENCH_INFLIGHT", 64, 1, SLOTS_MAX);

    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/troupe-bench-txn-XXXXXX",
             tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    troupe_db *db;
    troupe_err e = troupe_db_open(dir, NULL, &db);
    DB = db;
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
    if ((e = troupe_tables_open(&to, &T)) != TROUPE_OK)
        die("tables_open", e);
    const char *names[] = {"kv", "acct_a", "acct_b", "vkv"};
    for (int i = 0; i < 4; i++)
        if ((e = troupe_tables_create_wait(T, names[i], NULL, 0)) != TROUPE_OK)
            die("create", e);
    printf("bench_txn: %d reps x %.1f s per side, dir %s\n", reps, secs, dir);
    fflush(stdout);
    int status = 0;

    if (want("txn_commit")) {
        double v1[64], v64[64];
        for (int r = 0; r < reps; r++) {
            v1[r] = c_run(1);
            v64[r] = c_run(c_hi);
            uint64_t cf64 = atomic_load(&c_conflicts);
            printf("  txn_commit rep %d: 1: %.0f/s, %d: %.0f/s (%llu "
                   "spurious conflicts)\n",
                   r + 1, v1[r], c_hi, v64[r], (unsigned long long)cf64);
            fflush(stdout);
        }
        bench_line_peer("txn_commit_64", bench_median(v64, reps), "commits/s",
                        "txn_commit_1", bench_median(v1, reps));
    }

    if (want("txn_transfer")) {
        troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
        for (int i = 0; i < n_accounts; i++) {
            const char *tb;
            char k[KEY_LEN];
            uint8_t d[BAL_LEN];
            acct_key(i, &tb, k);
            bal_make(d, START_BALANCE);
            if ((e = troupe_table_upsert_wait(T, tb, k, KEY_LEN, d, BAL_LEN,
                                              &wo)) != TROUPE_OK)
                die("account upsert", e);
        }
        double v[64];
        uint64_t tc = 0, tr = 0, tg = 0, tn = 0;
        for (int r = 0; r < reps; r++) {
            uint64_t c, rr, g;
            v[r] = t_run(&c, &rr, &g);
            tc += c;
            tr += rr;
            tg += g;
            tn += (uint64_t)(v[r] * secs + 0.5);
            printf("  txn_transfer rep %d: %.0f commits/s, %llu conflicts, "
                   "%llu retries, %llu given up\n",
                   r + 1, v[r], (unsigned long long)c, (unsigned long long)rr,
                   (unsigned long long)g);
            fflush(stdout);
        }
        int64_t final = sum_balances();
        int64_t want_sum = (int64_t)n_accounts * START_BALANCE;
        bool ok = final == want_sum && !atomic_load(&t_bad);
        printf("txn_transfer: %d accounts in 2 tables, %d threads; totals: "
               "~%llu commits, %llu conflicts, %llu retries, %llu given up; "
               "%llu sum checks during the run, final sum %lld (expected "
               "%lld): %s\n",
               n_accounts, n_tthreads, (unsigned long long)tn,
               (unsigned long long)tc, (unsigned long long)tr,
               (unsigned long long)tg,
               (unsigned long long)atomic_load(&t_checks), (long long) final,
               (long long)want_sum, ok ? "sum unchanged" : "SUM CHANGED");
        bench_line("txn_transfer", bench_median(v, reps), "commits/s");
        if (!ok)
            status = 1;
    }

    int sizes[3] = {1, 16, 256};
    bool need_load = true;
    for (int si = 0; si < 3; si++) {
        char name[64];
        snprintf(name, sizeof(name), "versioned_%d", sizes[si]);
        if (!want(name))
            continue;
        if (need_load) { /* every client's keys, VKEYS_MAX each */
            troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
            uint8_t d[VAL_LEN];
            doc_make(d, 0);
            for (int c = 0; c < v_clients; c++)
                for (int i = 0; i < VKEYS_MAX; i++) {
                    char k[KEY_LEN];
                    mkkey(k, 'v', (unsigned long long)c * VKEYS_MAX + i);
                    if ((e = troupe_table_upsert_wait(T, "vkv", k, KEY_LEN, d,
                                                      VAL_LEN, &wo)) !=
                        TROUPE_OK)
                        die("vkv upsert", e);
                }
            need_load = false;
        }
        double vo[64], vv[64], vc[64];
        for (int r = 0; r < reps; r++) {
            /* the order of the three sides rotates from rep to rep */
            double *out[3] = {vo, vv, vc};
            for (int k = 0; k < 3; k++) {
                int m = (k + r) % 3;
                out[m][r] = v_run(sizes[si], m);
            }
            printf("  %s rep %d: ordinary %.0f/s, versioned %.0f/s (%.3f), "
                   "versioned cached %.0f/s (%.3f)\n",
                   name, r + 1, vo[r], vv[r], vo[r] > 0 ? vv[r] / vo[r] : 0,
                   vc[r], vo[r] > 0 ? vc[r] / vo[r] : 0);
            fflush(stdout);
        }
        char peer[64], cname[64];
        snprintf(peer, sizeof(peer), "ordinary_%d", sizes[si]);
        snprintf(cname, sizeof(cname), "versioned_cached_%d", sizes[si]);
        double mo = bench_median(vo, reps);
        bench_line_peer(name, bench_median(vv, reps), "txns/s", peer, mo);
        bench_line_peer(cname, bench_median(vc, reps), "txns/s", peer, mo);
    }

    if ((e = troupe_tables_stop_wait(T)) != TROUPE_OK)
        die("tables_stop", e);
    troupe_tables_destroy(T);
    troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
    troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(cm);
    if ((e = troupe_db_close(db)) != TROUPE_OK)
        die("close", e);
    bench_rmtree(dir);
    return status;
}
