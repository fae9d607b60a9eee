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

 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tnode.h"
#include "troupe/alloc.h"
#include "troupe/internal/index.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/ttl.h"
#include "tsupport.h"
#include "twire.h"

#define PEER 7u
#define NTARGETS 6

static tnode X;
static troupe_addr target[NTARGETS]; /* kv, table, index, 2 partitions, ttl */

/* ---- a watcher: DOWN of any target counts ---- */

enum { W_DOWN, W_N };
static _Atomic int downs;

static troupe_err
w_init(troupe_actor *self, void *st, void *arg)
{
    (void)st;
    (void)arg;
    for (int i = 0; i < NTARGETS; i++) {
        troupe_err e = troupe_monitor(self, target[i], W_DOWN);
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

/* ---- fixture: a node with every built-in actor (tnode.h) ---- */

static void
hostile_teardown(void)
{
    tnode_close(&X);
}

static void
hostile_setup(void)
{
    atomic_store(&downs, 0);
    troupe_runtime_opts o = {.workers = 2};
    tnode_open(&X, "harden", &o);
    target[0] = X.kv;
    troupe_ttl_opts tto = {
        .rt = X.rt, .tables = X.tables, .queues = X.qs, .interval_ms = 3600000};
    ck_assert_ok(troupe_ttl_create(&tto, &X.ttl));
    uint32_t tmo;
    troupe_runtime *rt;
    troupe_cf *cf;
    ck_assert_ok(troupe__tables_lookup_cf(X.tables, "t", &target[1], &cf));
    ck_assert_ok(
        troupe__tables_lookup_index(X.tables, "t", &target[2], &tmo, &rt));
    tq_queue *q = NULL;
    ck_assert_ok(troupe__tq_find(X.qs, "q", &q));
    target[3] = q->parts[0];
    target[4] = q->parts[1];
    troupe__tq_release(q);
    target[5] = troupe_ttl_addr(X.ttl);
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
    ck_assert_ok(ask_wait(target[0], m));
    ck_assert_ok(troupe_kv_get_msg("real", 4, &m));
    ck_assert_ok(ask_wait(target[0], m));
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
    ck_assert_ok(ask_wait(target[2], m));
    /* queue: both partitions deliver */
    troupe_queue_worker_opts wo = {
        .queue = "q", .first = 0, .last = 1, .credit = 4, .handler = q_handler};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_create(X.qs, &wo, &w));
    int want = 16;
    tnode_publish(&X, want);
    ck_assert(ts_wait_until(handled_n, &want, 15000));
    ck_assert_ok(troupe_queue_worker_stop_wait(w));
    troupe_queue_worker_destroy(w);
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
        barrage(target[t], true);
        barrage(target[t], false);
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
    tcase_add_checked_fixture(tc, hostile_setup, hostile_teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_every_kind_and_hostile_body_answered_never_crashes);
    suite_add_tcase(s, tc);
    return s;
}
