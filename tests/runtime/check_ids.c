/* Unguessable identifiers: generations and correlation ids. */
#include <stdatomic.h>
#include <stdlib.h>

#include "rt.h" /* the id cipher, for its known-answer test */
#include "rtest.h"

enum { K_NOTE, K_ASK, K_REPLY, K_N };

/* Speck64/128 against the vector of its specification (Beaulieu et al.,
 * "The SIMON and SPECK families of lightweight block ciphers", 2013). */
START_TEST(test_id_cipher_matches_speck64_128_vector)
{
    const uint32_t key[4] = {0x03020100, 0x0b0a0908, 0x13121110, 0x1b1a1918};
    uint32_t rk[TROUPE__SPECK_ROUNDS];
    troupe__speck_schedule(rk, key);
    ck_assert_uint_eq(troupe__speck_encrypt(rk, UINT64_C(0x3b7265747475432d)),
                      UINT64_C(0x8c6fa548454e028b));
    /* the batch form (vector registers) agrees with it, block by block,
     * on the vector's own counter and on random ones */
    uint64_t seed = ts_seed("ids");
    uint32_t xs[TROUPE__IDS_BATCH], ys[TROUPE__IDS_BATCH];
    for (int round = 0; round < 64; round++) {
        uint64_t first = round == 0 ? UINT64_C(0x3b7265747475432d) - 5
                                    : ts_rand(&seed) & ~UINT64_C(0xff);
        troupe__speck_encrypt_ctr(rk, first, xs, ys);
        for (int i = 0; i < TROUPE__IDS_BATCH; i++)
            ck_assert_uint_eq((uint64_t)xs[i] << 32 | ys[i],
                              troupe__speck_encrypt(rk, first + (uint64_t)i));
    }
    troupe__speck_encrypt_ctr(rk, UINT64_C(0x3b7265747475432d) - 5, xs, ys);
    ck_assert_uint_eq((uint64_t)xs[5] << 32 | ys[5],
                      UINT64_C(0x8c6fa548454e028b));
}
END_TEST

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* How many distinct values v[0..n) holds (sorts v). */
static size_t
distinct(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    size_t d = n > 0;
    for (size_t i = 1; i < n; i++)
        d += v[i] != v[i - 1];
    return d;
}

static const troupe_actor_def idle_def = {.name = "idle"};

#define NSPAWN 512

static troupe_runtime *the_rt;

static bool
is_dead(void *arg)
{
    troupe_msg *m = mk(K_NOTE);
    return troupe_runtime_send(the_rt, *(troupe_addr *)arg, &m) == TROUPE_EDEAD;
}

START_TEST(test_generations_are_fresh_per_spawn_and_per_reuse)
{
    rt_fixture f;
    rtf_start(&f, 1);
    the_rt = f.rt;
    static troupe_addr a[NSPAWN];
    uint64_t gens[NSPAWN];
    for (int i = 0; i < NSPAWN; i++) {
        ck_assert_ok(troupe_actor_spawn(f.rt, &idle_def, NULL, &a[i]));
        ck_assert_uint_ne(a[i].gen, 0);
        gens[i] = a[i].gen;
    }
    /* One address reveals nothing about the others: with 32 random bits
     * each, 512 generations collide with probability below 2^-13. */
    ck_assert_uint_ge(distinct(gens, NSPAWN), NSPAWN - 1);
    /* A reused slot gets a generation unrelated to its previous one. */
    troupe_addr old = a[NSPAWN - 1];
    ck_assert_ok(troupe_actor_stop(f.rt, old, NULL, NULL));
    ck_assert(ts_run_until(&f.loop, is_dead, &old, 5000));
    troupe_addr again;
    ck_assert_ok(troupe_actor_spawn(f.rt, &idle_def, NULL, &again));
    ck_assert_uint_eq(again.slot, old.slot); /* the free slot is reused */
    ck_assert_uint_ne(again.gen, 0);
    ck_assert_uint_ne(again.gen, old.gen);
    ck_assert_uint_ne(again.gen, old.gen + 1);
    /* The stale address fails cleanly. */
    troupe_msg *m = mk(K_NOTE);
    ck_assert_err(troupe_runtime_send(f.rt, old, &m), TROUPE_EDEAD);
    rtf_stop(&f);
}
END_TEST

/* The server records the correlation id of every ask it answers. */
#define NASK 256
static struct {
    uint64_t corr[2 * NASK];
    _Atomic int n;
    int replies;
} seen;

static troupe_err
srv_ask(troupe_actor *self, void *st, const troupe_msg *m)
{
    int i = atomic_fetch_add(&seen.n, 1);
    if (i < 2 * NASK)
        seen.corr[i] = m->corr;
    troupe_msg *r = mk(0);
    return troupe_reply(self, m, &r);
}

static const troupe_handler_fn srv_h[K_N] = {[K_ASK] = srv_ask};
static const troupe_actor_def srv_def = {
    .name = "srv", .handlers = srv_h, .n_handlers = K_N};

static troupe_addr server;

/* The client asks NASK times, one at a time. */
static troupe_err
cli_next(troupe_actor *self, void *st, const troupe_msg *m)
{
    if (m->kind == K_REPLY)
        ck_assert_err(m->err, TROUPE_OK);
    if (atomic_load(&seen.n) >= NASK)
        return TROUPE_OK;
    troupe_msg *q = mk(K_ASK);
    return troupe_ask(self, server, &q, 5000, K_REPLY, NULL);
}

static const troupe_handler_fn cli_h[K_N] = {
    [K_NOTE] = cli_next, [K_REPLY] = cli_next};
static const troupe_actor_def cli_def = {
    .name = "cli", .handlers = cli_h, .n_handlers = K_N};

static void
host_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)reply;
    (void)arg;
    ck_assert_err(err, TROUPE_OK);
    seen.replies++;
}

static bool
seen_n(void *arg)
{
    return atomic_load(&seen.n) >= *(int *)arg;
}

static bool
host_replies(void *arg)
{
    return seen.replies >= *(int *)arg;
}

START_TEST(test_correlation_ids_are_unique_nonzero_and_not_a_counter)
{
    rt_fixture f;
    rtf_start(&f, 2);
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.scheduler = 1;
    ck_assert_ok(troupe_actor_spawn(f.rt, &srv_def, &o, &server));
    troupe_addr cli;
    ck_assert_ok(troupe_actor_spawn(f.rt, &cli_def, NULL, &cli));
    troupe_msg *m = mk(K_NOTE);
    ck_assert_ok(troupe_runtime_send(f.rt, cli, &m));
    int want = NASK;
    ck_assert(ts_run_until(&f.loop, seen_n, &want, 10000));
    /* host asks draw from the same runtime-wide sequence */
    for (int i = 0; i < NASK; i++) {
        m = mk(K_ASK);
        ck_assert_ok(troupe_runtime_ask(f.rt, server, &m, 5000, host_cb, NULL));
    }
    want = NASK;
    ck_assert(ts_run_until(&f.loop, host_replies, &want, 10000));
    int n = atomic_load(&seen.n);
    ck_assert_int_eq(n, 2 * NASK);
    /* Successive ids of one asker are not a counter: with a keyed
     * permutation two of them differ by one with probability 2^-63. */
    for (int i = 1; i < NASK; i++) {
        ck_assert_uint_ne(seen.corr[i], 0);
        ck_assert_uint_ne(seen.corr[i] - seen.corr[i - 1], 1);
    }
    ck_assert_uint_eq(distinct(seen.corr, (size_t)n), (size_t)n);
    rtf_stop(&f);
}
END_TEST

Suite *
ids_suite(void)
{
    Suite *s = suite_create("ids");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_id_cipher_matches_speck64_128_vector);
    tcase_add_test(tc, test_generations_are_fresh_per_spawn_and_per_reuse);
    tcase_add_test(tc,
                   test_correlation_ids_are_unique_nonzero_and_not_a_counter);
    suite_add_tcase(s, tc);
    return s;
}
