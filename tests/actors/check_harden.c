/*
 * Hardening of the built-in actors.
 *
 * hostile: every built-in actor (kv, table, index, queue partition, TTL
 * scanner)
 * against every kind it has and many it has not, with bodies a peer can
 * send: empty, garbage, allocation bombs, deep nesting, and valid requests
 * truncated and bit-flipped. Each is sent from a simulated remote node
 * (troupe_runtime_deliver, as asks and as plain sends) and, for the
 * handlers' own checks, from this node without the payload its internal
 * kinds expect. Afterwards no actor has failed, every remote ask got
 * exactly one reply (a refusal at delivery or the handler's answer), and
 * each actor still serves a real request.
 *
 * lanes: queue handlers run on the HOST lane, so handlers that block (host
 * code waiting on something slow) never hold up the storage work behind
 * commits and reads. Every HOST thread is taken by a handler that blocks
 * until the test is done with the storage side, and table commits (a
 * unique index makes each write prepare on a worker), kv reads and index
 * counts (both always on a worker) must all complete meanwhile.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/index.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/ttl.h"
#include "troupe/txn.h"
#include "tsupport.h"
#include "twire.h"

#define PEER 7u
#define NTARGETS 6

static struct {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_queues *qs;
    troupe_ttl *ttl;
    char *dir;
    troupe_addr target[NTARGETS]; /* kv, table, index, 2 partitions, ttl */
} X;

/* ---- a watcher: DOWN of any target counts ---- */

enum { W_DOWN, W_N };
static _Atomic int downs;

static troupe_err
w_init(troupe_actor *self, void *st, void *arg)
{
    (void)st;
    (void)arg;
    for (int i = 0; i < NTARGETS; i++) {
        troupe_err e = troupe_monitor(self, X.target[i], W_DOWN);
        if (e != TROUPE_OK)
            return e;
    }
    return TROUPE_OK;
}

static troupe_err
w_down(troupe_actor *self, void *st, const troupe_msg *m)
{
    (void)self;
    (void)st;
    if (m->err != TROUPE_OK)
        fprintf(stderr, "hostile: actor %u failed: %s\n", m->from.slot,
                troupe_err_name(m->err));
    atomic_fetch_add(&downs, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn w_h[W_N] = {[W_DOWN] = w_down};
static const troupe_actor_def watch_def = {
    .name = "watch", .init = w_init, .handlers = w_h, .n_handlers = W_N};

/* ---- fixture: a node with every built-in actor ---- */

static const troupe_index_field name_f = {"name", TROUPE_FIELD_STRING};
static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};

/* Tables "t" (index by_name) and "u" (unique by_email: every write
 * prepares on a worker), queue "q" of two partitions, a kv actor. */
/* The lanes' byte budget of the next open_node; 0: the default. */
static uint64_t node_work_bytes;

static void
open_node(unsigned workers)
{
    memset(&X, 0, sizeof(X));
    atomic_store(&downs, 0);
    X.dir = ts_tempdir("harden");
    troupe_runtime_opts o = {
        .schedulers = 2, .workers = workers, .work_max_bytes = node_work_bytes};
    ck_assert_ok(troupe_runtime_create(&X.rt, &o));
    ts_wire_install(X.rt);
    ck_assert_ok(troupe_db_open(X.dir, NULL, &X.db));
    ck_assert_ok(troupe_commit_create(X.db, NULL, &X.commit));
    troupe_catalog_opts co = {.rt = X.rt, .db = X.db};
    ck_assert_ok(troupe_catalog_open(&co, &X.cat));
    troupe_tables_opts to = {.catalog = X.cat, .commit = X.commit};
    ck_assert_ok(troupe_tables_open(&to, &X.tables));
    troupe_index_spec by_name = {
        .name = "by_name", .fields = &name_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(X.tables, "t", &by_name, 1));
    troupe_index_spec by_email = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(X.tables, "u", &by_email, 1));
    troupe_queues_opts qo = {.catalog = X.cat, .commit = X.commit};
    ck_assert_ok(troupe_queues_open(&qo, &X.qs));
    troupe_queue_spec qs = {"q", 2, 0};
    ck_assert_ok(troupe_queues_create_wait(X.qs, &qs));
    troupe_kv_opts ko = {.db = X.db, .commit = X.commit, .cf = "kv"};
    ck_assert_ok(troupe_kv_spawn(X.rt, &ko, NULL, &X.target[0]));
}

static void
close_node(void)
{
    if (X.ttl != NULL) {
        ck_assert_ok(troupe_ttl_stop_wait(X.ttl));
        troupe_ttl_destroy(X.ttl);
    }
    ck_assert_ok(troupe_queues_stop_wait(X.qs));
    troupe_queues_destroy(X.qs);
    ck_assert_ok(troupe_tables_stop_wait(X.tables));
    troupe_tables_destroy(X.tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(X.rt));
    ck_assert_ok(troupe_catalog_stop_wait(X.cat));
    troupe_catalog_destroy(X.cat);
    troupe_runtime_destroy(X.rt);
    troupe_commit_destroy(X.commit);
    ck_assert_ok(troupe_db_close(X.db));
    ts_rmtree(X.dir);
    free(X.dir);
    ts_wire_clear();
}

/* Publishes n due events e0.. with their ids as keys. */
static void
publish_n(int n)
{
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof(id), "e%d", i);
        troupe_queue_event ev = {.id = id,
                                 .id_len = strlen(id),
                                 .key = id,
                                 .key_len = strlen(id),
                                 .payload = "\x07",
                                 .payload_len = 1,
                                 .time_ms = 0};
        ck_assert_ok(
            troupe_queue_publish_wait(X.qs, "q", &ev, TROUPE_SYNC_OFF));
    }
}

static void
hostile_setup(void)
{
    open_node(2);
    troupe_ttl_opts tto = {
        .rt = X.rt, .tables = X.tables, .queues = X.qs, .interval_ms = 3600000};
    ck_assert_ok(troupe_ttl_start(&tto, &X.ttl));
    uint32_t tmo;
    troupe_runtime *rt;
    troupe_cf *cf;
    ck_assert_ok(troupe__tables_lookup_cf(X.tables, "t", &X.target[1], &cf));
    ck_assert_ok(
        troupe__tables_lookup_index(X.tables, "t", &X.target[2], &tmo, &rt));
    tq_queue *q = NULL;
    ck_assert_ok(troupe__tq_find(X.qs, "q", &q));
    X.target[3] = q->parts[0];
    X.target[4] = q->parts[1];
    troupe__tq_release(q);
    X.target[5] = troupe_ttl_addr(X.ttl);
    troupe_addr w;
    ck_assert_ok(troupe_actor_spawn(X.rt, &watch_def, NULL, &w));
}

/* ---- bodies ---- */

typedef struct body {
    unsigned char *p;
    size_t n;
} body;

static body bodies[1024];
static size_t nbodies;

static void
add_body(const void *p, size_t n)
{
    ck_assert_uint_lt(nbodies, sizeof(bodies) / sizeof(bodies[0]));
    body *b = &bodies[nbodies++];
    b->p = n > 0 ? malloc(n) : NULL;
    if (n > 0)
        memcpy(b->p, p, n);
    b->n = n;
}

/* A valid request, then its truncations and bit-flipped copies. */
static void
add_template(troupe_packer *p, uint64_t *seed)
{
    size_t n;
    const unsigned char *d = troupe_pack_data(p, &n);
    ck_assert_uint_gt(n, 0);
    add_body(d, n);
    size_t cuts[] = {1, n / 2, n - 1};
    for (size_t i = 0; i < 3; i++)
        if (cuts[i] > 0 && cuts[i] < n)
            add_body(d, cuts[i]);
    unsigned char tmp[256];
    ck_assert_uint_le(n, sizeof(tmp));
    for (int k = 0; k < 6; k++) {
        memcpy(tmp, d, n);
        uint64_t r = ts_rand(seed);
        tmp[r % n] ^= (unsigned char)(1u << ((r >> 32) % 8));
        add_body(tmp, n);
    }
    troupe_pack_fini(p);
}

static void
make_bodies(uint64_t seed)
{
    nbodies = 0;
    add_body(NULL, 0);
    add_body("\xc0", 1);                     /* nil */
    add_body("\xdd\xff\xff\xff\xff", 5);     /* array32 of 2^32 - 1 */
    add_body("\xdf\xff\xff\xff\xff", 5);     /* map32 of 2^32 - 1 */
    add_body("\xdb\xff\xff\xff\xff", 5);     /* str32 past the end */
    add_body("\xc6\xff\xff\xff\xff", 5);     /* bin32 past the end */
    add_body("\xc9\xff\xff\xff\xff\x01", 6); /* ext32 past the end */
    add_body("\x93\xc4\x01k", 4);            /* array cut inside */
    unsigned char deep[4096];
    memset(deep, 0x91, sizeof(deep) - 1); /* 4095 nested arrays */
    deep[sizeof(deep) - 1] = 0xc0;
    add_body(deep, sizeof(deep));
    unsigned char junk[64];
    for (int k = 0; k < 24; k++) {
        size_t n = 1 + ts_rand(&seed) % sizeof(junk);
        for (size_t i = 0; i < n; i++)
            junk[i] = (unsigned char)ts_rand(&seed);
        add_body(junk, n);
    }
    troupe_packer p;
    /* the shapes of every request kind (kv.h, table_int.h, index.h,
     * queue notify, ttl done) */
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_bin(&p, "k1", 2);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_bin(&p, "v", 1);
    troupe_pack_bool(&p, false);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_uint(&p, 0);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 4);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, "x");
    troupe_pack_int(&p, 0);
    troupe_pack_uint(&p, 0);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, 2);
    troupe_pack_bin(&p, "k1", 2);
    troupe_pack_bin(&p, "k2", 2);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 5);
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    troupe_pack_uint(&p, 10);
    troupe_pack_bool(&p, false);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 4);
    troupe_pack_cstr(&p, "by_name");
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 8);
    troupe_pack_cstr(&p, "by_name");
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    troupe_pack_nil(&p);
    troupe_pack_bool(&p, false);
    troupe_pack_uint(&p, 10);
    troupe_pack_nil(&p);
    troupe_pack_bool(&p, true);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 100);
    troupe_pack_bool(&p, true);
    troupe_pack_nil(&p);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_int(&p, 5);
    add_template(&p, &seed);
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 0);
    troupe_pack_uint(&p, 3);
    add_template(&p, &seed);
}

static void
free_bodies(void)
{
    for (size_t i = 0; i < nbodies; i++)
        free(bodies[i].p);
    nbodies = 0;
}

/* ---- the barrage ---- */

static const uint32_t extra_kinds[] = {63, 64, 65, 100, 1000, UINT32_MAX};
#define PLAIN_KINDS 40 /* 0..39: every built-in actor's kinds and more */

static uint64_t next_corr;
static size_t remote_asks;

static void
send_one(troupe_addr to, uint32_t kind, const body *b, bool remote, bool ask)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, kind, b->p, b->n));
    if (remote) {
        m->corr = ask ? ++next_corr : 0;
        m->to = to;
        m->from = (troupe_addr){PEER, 9, 9};
        remote_asks += ask;
        (void)troupe_runtime_deliver(X.rt, &m);
    } else {
        /* local sends without a payload: the internal kinds' handlers
         * must not follow the ptr they expect and did not get */
        m->corr = ask ? UINT64_C(1) << 40 | next_corr : 0;
        (void)troupe_runtime_send(X.rt, to, &m);
    }
    ck_assert_ptr_null(m);
}

static void
barrage(troupe_addr to, bool remote)
{
    size_t nk = PLAIN_KINDS + sizeof(extra_kinds) / sizeof(extra_kinds[0]);
    for (size_t k = 0; k < nk; k++) {
        uint32_t kind =
            k < PLAIN_KINDS ? (uint32_t)k : extra_kinds[k - PLAIN_KINDS];
        for (size_t i = 0; i < nbodies; i++)
            for (int ask = 0; ask < 2; ask++)
                send_one(to, kind, &bodies[i], remote, ask);
    }
}

/* ---- real requests afterwards ---- */

static struct {
    pthread_mutex_t mu;
    int calls;
    troupe_err err;
    unsigned char v[64];
    size_t n;
} hr = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void
host_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)arg;
    pthread_mutex_lock(&hr.mu);
    hr.err = err;
    hr.n = 0;
    if (reply != NULL && troupe_msg_len(reply) <= sizeof(hr.v)) {
        hr.n = troupe_msg_len(reply);
        if (hr.n > 0)
            memcpy(hr.v, troupe_msg_data(reply), hr.n);
    }
    hr.calls++;
    pthread_mutex_unlock(&hr.mu);
}

static bool
hr_called(void *arg)
{
    pthread_mutex_lock(&hr.mu);
    bool ok = hr.calls >= *(int *)arg;
    pthread_mutex_unlock(&hr.mu);
    return ok;
}

static troupe_err
ask_wait(troupe_addr to, troupe_msg *m)
{
    pthread_mutex_lock(&hr.mu);
    int want = hr.calls + 1;
    pthread_mutex_unlock(&hr.mu);
    ck_assert_ok(troupe_runtime_ask(X.rt, to, &m, 10000, host_cb, NULL));
    ck_assert(ts_wait_until(hr_called, &want, 15000));
    return hr.err;
}

static _Atomic int handled;

static troupe_err
q_handler(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    (void)d;
    (void)arg;
    out->kind = TROUPE_QUEUE_ACK;
    atomic_fetch_add(&handled, 1);
    return TROUPE_OK;
}

static bool
handled_n(void *arg)
{
    return atomic_load(&handled) >= *(int *)arg;
}

static bool
ttl_passed(void *arg)
{
    return troupe_ttl_passes(X.ttl) > *(uint64_t *)arg;
}

static void
check_all_serve(void)
{
    /* kv: a put, then a get of it */
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_kv_put_msg("real", 4, "value", 5, false, &m));
    ck_assert_ok(ask_wait(X.target[0], m));
    ck_assert_ok(troupe_kv_get_msg("real", 4, &m));
    ck_assert_ok(ask_wait(X.target[0], m));
    ck_assert_uint_eq(hr.n, 7); /* bin8 of "value" */
    ck_assert_mem_eq(hr.v + 2, "value", 5);
    /* table: a write through its actor, read back */
    static const unsigned char doc[] = {0x81, 0xa4, 'n',  'a',
                                        'm',  'e',  0xa1, 'y'};
    ck_assert_ok(troupe_table_upsert_wait(X.tables, "t", "real", 4, doc,
                                          sizeof(doc), NULL));
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(X.tables, "t", "real", 4, &rows));
    ck_assert_uint_eq(rows->n, 1);
    troupe_rows_destroy(rows);
    /* index: a count through its actor */
    troupe_index_query q = {0};
    ck_assert_ok(troupe_index_count_msg("by_name", &q, &m));
    ck_assert_ok(ask_wait(X.target[2], m));
    /* queue: both partitions deliver */
    troupe_queue_worker_opts wo = {
        .queue = "q", .first = 0, .last = 1, .credit = 4, .handler = q_handler};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_start(X.qs, &wo, &w));
    int want = 16;
    publish_n(want);
    ck_assert(ts_wait_until(handled_n, &want, 15000));
    troupe_queue_worker_stop_wait(&w);
    /* ttl: a pass on request */
    uint64_t passes = troupe_ttl_passes(X.ttl);
    ck_assert_ok(troupe_ttl_kick(X.ttl));
    ck_assert(ts_wait_until(ttl_passed, &passes, 15000));
}

START_TEST(test_every_kind_and_hostile_body_answered_never_crashes)
{
    make_bodies(ts_seed("hostile"));
    next_corr = 0;
    remote_asks = 0;
    for (int t = 0; t < NTARGETS; t++) {
        barrage(X.target[t], true);
        barrage(X.target[t], false);
    }
    /* Every remote ask, exactly one reply: refused at delivery or
     * answered by its handler. */
    ck_assert_msg(ts_wait_until(ts_wire_has, &remote_asks, 60000),
                  "%zu of %zu remote asks answered", ts_wire_count(),
                  remote_asks);
    size_t n;
    uint64_t *corrs = ts_wire_sorted_corrs(&n);
    ck_assert_uint_eq(n, remote_asks);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(corrs[i], i + 1);
    free(corrs);
    troupe_runtime_stats st;
    troupe_runtime_stats_get(X.rt, &st);
    fprintf(stderr,
            "hostile: %zu bodies, %zu remote asks answered; refused at "
            "delivery: %llu local-only kind, %llu dead, %llu full\n",
            nbodies, remote_asks, (unsigned long long)st.remote_refused_kind,
            (unsigned long long)st.remote_refused_dead,
            (unsigned long long)st.remote_refused_full);
    ck_assert_uint_gt(st.remote_refused_kind, 0);
    ck_assert_uint_eq(st.error_replies_lost, 0);
    check_all_serve();
    ck_assert_int_eq(atomic_load(&downs), 0);
    free_bodies();
}
END_TEST

Suite *
hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, hostile_setup, close_node);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_every_kind_and_hostile_body_answered_never_crashes);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- lanes ---- */

#define WORKERS 2 /* per lane */

static struct {
    _Atomic int live, handled, release;
} H;

static bool
released(void *arg)
{
    (void)arg;
    return atomic_load(&H.release) != 0;
}

static troupe_err
blocking_handler(const troupe_queue_delivery *d, troupe_queue_outcome *out,
                 void *arg)
{
    (void)d;
    (void)arg;
    atomic_fetch_add(&H.live, 1);
    /* host code that takes a long time: until the test lets it go (the
     * deadline only bounds a broken run) */
    ts_wait_until(released, NULL, 60000);
    atomic_fetch_sub(&H.live, 1);
    atomic_fetch_add(&H.handled, 1);
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

static void
lanes_setup(void)
{
    memset(&H, 0, sizeof(H));
    open_node(WORKERS);
}

static void
lanes_teardown(void)
{
    atomic_store(&H.release, 1);
    close_node();
}

/* Completions of the storage-side requests, from whichever thread. */
static struct {
    _Atomic int writes, reads, counts, errors;
} S;

static void
on_write(troupe_err err, troupe_rows *rows, void *arg)
{
    (void)arg;
    troupe_rows_destroy(rows);
    atomic_fetch_add(err == TROUPE_OK ? &S.writes : &S.errors, 1);
}

static void
on_kv(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)reply;
    (void)arg;
    atomic_fetch_add(err == TROUPE_OK ? &S.reads : &S.errors, 1);
}

static void
on_count(troupe_err err, uint64_t n, void *arg)
{
    (void)n;
    (void)arg;
    atomic_fetch_add(err == TROUPE_OK ? &S.counts : &S.errors, 1);
}

static bool
live_full(void *arg)
{
    (void)arg;
    return atomic_load(&H.live) == WORKERS;
}

#define NOPS 32

static bool
storage_done(void *arg)
{
    (void)arg;
    return atomic_load(&S.errors) > 0 ||
           (atomic_load(&S.writes) == NOPS && atomic_load(&S.reads) == NOPS &&
            atomic_load(&S.counts) == NOPS);
}

static bool
read_seen(void *arg)
{
    return atomic_load(&S.reads) + atomic_load(&S.errors) >= *(int *)arg;
}

static bool
all_handled(void *arg)
{
    return atomic_load(&H.handled) >= *(int *)arg;
}

START_TEST(test_blocked_queue_handlers_never_delay_commits_or_reads)
{
    memset(&S, 0, sizeof(S));
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_kv_put_msg("k", 1, "v", 1, false, &m));
    ck_assert_ok(troupe_runtime_ask(X.rt, X.target[0], &m, 60000, on_kv, NULL));
    int one = 1;
    ck_assert(ts_wait_until(read_seen, &one, 10000)); /* for the reads */
    ck_assert_int_eq(atomic_load(&S.errors), 0);
    atomic_store(&S.reads, 0);
    /* more events than HOST threads, each handler blocking */
    troupe_queue_worker_opts wo = {.queue = "q",
                                   .last = 1, /* both partitions */
                                   .credit = 8,
                                   .handler = blocking_handler,
                                   .timeout_ms = 120000};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_start(X.qs, &wo, &w));
    int nev = 8;
    publish_n(nev);
    ck_assert(ts_wait_until(live_full, NULL, 10000));
    /* every HOST thread is blocked now: storage work must go on */
    for (int i = 0; i < NOPS; i++) {
        char key[16], email[16];
        snprintf(key, sizeof(key), "u%d", i);
        snprintf(email, sizeof(email), "a%d", i);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 1);
        troupe_pack_cstr(&p, "email");
        troupe_pack_cstr(&p, email);
        size_t dlen;
        const void *doc = troupe_pack_data(&p, &dlen);
        ck_assert_ok(troupe_table_upsert(X.tables, "u", key, strlen(key), doc,
                                         dlen, NULL, on_write, NULL));
        troupe_pack_fini(&p);
        ck_assert_ok(troupe_kv_get_msg("k", 1, &m));
        ck_assert_ok(
            troupe_runtime_ask(X.rt, X.target[0], &m, 60000, on_kv, NULL));
        troupe_index_query q = {0};
        ck_assert_ok(
            troupe_tables_count(X.tables, "u", "by_email", &q, on_count, NULL));
    }
    ck_assert_msg(ts_wait_until(storage_done, NULL, 10000),
                  "storage work stalled behind blocked handlers: %d writes, "
                  "%d reads, %d counts of %d (%d errors)",
                  atomic_load(&S.writes), atomic_load(&S.reads),
                  atomic_load(&S.counts), NOPS, atomic_load(&S.errors));
    ck_assert_int_eq(atomic_load(&S.errors), 0);
    /* the handlers were blocked all along */
    ck_assert_int_eq(atomic_load(&H.live), WORKERS);
    ck_assert_int_eq(atomic_load(&H.handled), 0);
    troupe_rows *rows = NULL;
    ck_assert_ok(troupe_table_get_wait(X.tables, "u", "u7", 2, &rows));
    troupe_rows_destroy(rows);
    atomic_store(&H.release, 1);
    ck_assert(ts_wait_until(all_handled, &nev, 20000));
    troupe_queue_worker_stop_wait(&w);
}
END_TEST

/* ---- one STORAGE thread ---- */

#define ONE_WORKER_BYTES (1u << 20)

static void
one_worker_setup(void)
{
    memset(&H, 0, sizeof(H));
    node_work_bytes = ONE_WORKER_BYTES;
    open_node(1);
    node_work_bytes = 0;
}

static struct {
    _Atomic int stalled, lane_ran, acked, ack_errors, gate_done;
} G;

/* Holds the pipeline's writer (the callback runs on it) until the test
 * lets go: every later commit waits behind it. */
static void
stall_cb(troupe_err err, void *arg)
{
    (void)err;
    (void)arg;
    atomic_store(&G.stalled, 1);
    ts_wait_until(released, NULL, 60000);
}

static bool
stalled(void *arg)
{
    (void)arg;
    return atomic_load(&G.stalled) != 0;
}

static void
lane_fn(void *arg)
{
    (void)arg;
    atomic_store(&G.lane_ran, 1);
}

static void
lane_done(void *arg, troupe_runtime *rt)
{
    (void)arg;
    (void)rt;
}

static bool
lane_ran(void *arg)
{
    (void)arg;
    return atomic_load(&G.lane_ran) != 0;
}

static void
on_ack(troupe_err err, void *arg)
{
    (void)arg;
    atomic_fetch_add(err == TROUPE_OK ? &G.acked : &G.ack_errors, 1);
}

static bool
acks_in(void *arg)
{
    return atomic_load(&G.acked) + atomic_load(&G.ack_errors) >= *(int *)arg;
}

/* An asynchronous ack never holds a pool thread for its commit: with one
 * STORAGE thread and the commit pipeline held, 64 acks with sync on are
 * taken and a later job on the same lane still runs; none of the acks
 * calls back before its commit; once the pipeline goes on, all 64 are
 * acknowledged and their rows completed. */
START_TEST(test_async_acks_never_hold_the_one_storage_thread)
{
    memset(&G, 0, sizeof(G));
    enum { N = 64 };
    publish_n(N);
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_list_wait(X.qs, "q", TROUPE_QUEUE_PENDING, NULL,
                                        0, N, &pg));
    ck_assert_uint_eq(pg->n, N);
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_cf(X.db, "kv", &cf));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_commit_batch(X.commit, &b));
    ck_assert_ok(troupe_batch_put(b, cf, "stall", 5, "x", 1));
    ck_assert_ok(
        troupe_commit_submit(X.commit, &b, TROUPE_SYNC_OFF, stall_cb, NULL));
    ck_assert(ts_wait_until(stalled, NULL, 10000));
    for (size_t i = 0; i < pg->n; i++)
        ck_assert_ok(troupe_queue_ack(X.qs, "q", pg->items[i].skey,
                                      pg->items[i].skey_len, TROUPE_SYNC_ON,
                                      on_ack, NULL));
    troupe_queue_page_destroy(pg);
    ck_assert_ok(troupe_runtime_work(X.rt, lane_fn, lane_done, NULL));
    ck_assert_msg(ts_wait_until(lane_ran, NULL, 10000),
                  "the STORAGE thread is held by an ack waiting for its "
                  "commit");
    ck_assert_int_eq(atomic_load(&G.acked) + atomic_load(&G.ack_errors), 0);
    atomic_store(&H.release, 1);
    int want = N;
    ck_assert(ts_wait_until(acks_in, &want, 20000));
    ck_assert_int_eq(atomic_load(&G.ack_errors), 0);
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(X.qs, "q", &st));
    ck_assert_uint_eq(st->pending, 0);
    ck_assert_uint_eq(st->completed, N);
    troupe_free(st);
}
END_TEST

static int64_t acked_at;

static bool
clock_past_acks(void *arg)
{
    (void)arg;
    return troupe_now_ms() > acked_at;
}

static bool
qpass_ended(void *arg)
{
    return troupe_ttl_queue_passes(X.ttl) >= *(uint64_t *)arg;
}

/* Queue retention never holds a pool thread for its commit: with one
 * STORAGE thread and the pipeline held, a retention pass scans and
 * submits its deletions, a later lane job still runs, and the pass's
 * result (rows purged) is counted only once its commit is done. */
START_TEST(test_queue_retention_never_holds_the_one_storage_thread)
{
    memset(&G, 0, sizeof(G));
    enum { N = 8 };
    publish_n(N);
    troupe_queue_page *pg = NULL;
    ck_assert_ok(troupe_queue_list_wait(X.qs, "q", TROUPE_QUEUE_PENDING, NULL,
                                        0, N, &pg));
    ck_assert_uint_eq(pg->n, N);
    for (size_t i = 0; i < pg->n; i++)
        ck_assert_ok(troupe_queue_ack_wait(X.qs, "q", pg->items[i].skey,
                                           pg->items[i].skey_len,
                                           TROUPE_SYNC_OFF));
    troupe_queue_page_destroy(pg);
    acked_at = troupe_now_ms();
    ck_assert(ts_wait_until(clock_past_acks, NULL, 10000)); /* retention 0 */
    troupe_ttl_opts tto = {
        .rt = X.rt, .queues = X.qs, .interval_ms = 3600000 /* kicks only */};
    ck_assert_ok(troupe_ttl_start(&tto, &X.ttl));
    troupe_cf *cf = NULL;
    ck_assert_ok(troupe_db_cf(X.db, "kv", &cf));
    troupe_batch *b = NULL;
    ck_assert_ok(troupe_commit_batch(X.commit, &b));
    ck_assert_ok(troupe_batch_put(b, cf, "stall", 5, "x", 1));
    ck_assert_ok(
        troupe_commit_submit(X.commit, &b, TROUPE_SYNC_OFF, stall_cb, NULL));
    ck_assert(ts_wait_until(stalled, NULL, 10000));
    uint64_t passes = troupe_ttl_queue_passes(X.ttl) + 1;
    ck_assert_ok(troupe_ttl_kick(X.ttl));
    ck_assert_ok(troupe_runtime_work(X.rt, lane_fn, lane_done, NULL));
    ck_assert_msg(ts_wait_until(lane_ran, NULL, 10000),
                  "the STORAGE thread is held by a retention pass waiting for "
                  "its commit");
    ck_assert_uint_eq(troupe_ttl_queue_purged(X.ttl), 0);
    atomic_store(&H.release, 1);
    ck_assert(ts_wait_until(qpass_ended, &passes, 20000));
    ck_assert_uint_eq(troupe_ttl_queue_purged(X.ttl), N);
    troupe_queue_stats *st = NULL;
    ck_assert_ok(troupe_queue_stats_wait(X.qs, "q", &st));
    ck_assert_uint_eq(st->completed, 0);
    troupe_free(st);
}
END_TEST

static void
gate_fn(void *arg)
{
    (void)arg;
    atomic_store(&G.lane_ran, 1);
    ts_wait_until(released, NULL, 60000);
}

static void
gate_done(void *arg, troupe_runtime *rt)
{
    (void)arg;
    (void)rt;
    atomic_store(&G.gate_done, 1);
}

static bool
gate_over(void *arg)
{
    (void)arg;
    return atomic_load(&G.gate_done) != 0;
}

/* A transaction's reads declare what their jobs hold to the STORAGE
 * lane: while a job holds the lane's whole byte budget, a get and a scan
 * are refused with EFULL at the call (and work again once it is gone),
 * instead of queueing without bound. */
START_TEST(test_txn_reads_declare_their_bytes_to_the_lane)
{
    memset(&G, 0, sizeof(G));
    ck_assert_ok(troupe_runtime_work_in(
        X.rt, TROUPE_LANE_STORAGE, ONE_WORKER_BYTES, gate_fn, gate_done, NULL));
    ck_assert(ts_wait_until(lane_ran, NULL, 10000));
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(X.tables, NULL, &tx));
    ck_assert_err(troupe_txn_get(tx, "t", "k", 1, on_write, NULL),
                  TROUPE_EFULL);
    troupe_scan_opts so = {.limit = 10};
    ck_assert_err(troupe_txn_scan(tx, "t", &so, on_write, NULL), TROUPE_EFULL);
    atomic_store(&H.release, 1);
    troupe_txn_destroy(tx);
    ck_assert(ts_wait_until(gate_over, NULL, 10000));
    ck_assert_ok(troupe_txn_begin(X.tables, NULL, &tx));
    troupe_rows *rows = NULL;
    ck_assert_err(troupe_txn_get_wait(tx, "t", "k", 1, &rows), TROUPE_ENOENT);
    troupe_txn_destroy(tx);
}
END_TEST

Suite *
lanes_suite(void)
{
    Suite *s = suite_create("lanes");
    TCase *tc = tcase_create("lanes");
    tcase_add_checked_fixture(tc, lanes_setup, lanes_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_blocked_queue_handlers_never_delay_commits_or_reads);
    suite_add_tcase(s, tc);
    TCase *one = tcase_create("one worker");
    tcase_add_checked_fixture(one, one_worker_setup, lanes_teardown);
    tcase_set_timeout(one, 120);
    tcase_add_test(one, test_async_acks_never_hold_the_one_storage_thread);
    tcase_add_test(one,
                   test_queue_retention_never_holds_the_one_storage_thread);
    tcase_add_test(one, test_txn_reads_declare_their_bytes_to_the_lane);
    suite_add_tcase(s, one);
    return s;
}
