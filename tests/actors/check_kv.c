/* The kv actor: requests, replies, bad input, durability across reopen. */
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "tsupport.h"

typedef struct kv_fx {
    uv_loop_t loop;
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_addr kv;
    char *dir;
    int done;
    /* last reply */
    int replies;
    troupe_err err;
    char val[256];
    size_t vlen;
} kv_fx;

static kv_fx fx;

static void
open_all(void)
{
    ck_assert_int_eq(uv_loop_init(&fx.loop), 0);
    troupe_runtime_opts o = {.loop = &fx.loop, .schedulers = 2, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_kv_opts ko = {.db = fx.db, .commit = fx.commit, .cf = "kv"};
    ck_assert_ok(troupe_kv_spawn(fx.rt, &ko, NULL, &fx.kv));
}

static void
on_shutdown(troupe_runtime *rt, void *arg)
{
    fx.done = 1;
}

static bool
is_done(void *arg)
{
    return fx.done;
}

static void
close_all(void)
{
    fx.done = 0;
    ck_assert_ok(troupe_runtime_shutdown(fx.rt, on_shutdown, NULL));
    ck_assert(ts_run_until(&fx.loop, is_done, NULL, 10000));
    troupe_runtime_destroy(fx.rt);
    ck_assert_int_eq(ts_loop_close(&fx.loop), 0);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
}

static void
setup(void)
{
    memset(&fx, 0, sizeof(fx));
    fx.dir = ts_tempdir("kv");
    open_all();
}

static void
teardown(void)
{
    close_all();
    ts_rmtree(fx.dir);
    free(fx.dir);
}

static void
on_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    fx.replies++;
    fx.err = err;
    fx.vlen = 0;
    if (err == TROUPE_OK && reply != NULL && troupe_msg_len(reply) > 0) {
        troupe_reader r;
        const void *v;
        size_t n;
        troupe_reader_init_msg(&r, reply);
        if (troupe_read_bin(&r, sizeof(fx.val), &v, &n) == TROUPE_OK) {
            memcpy(fx.val, v, n);
            fx.vlen = n;
        }
    }
}

static int want;
static bool
have(void *arg)
{
    return fx.replies >= want;
}

/* Asks and waits for the reply; returns its err. */
static troupe_err
ask(troupe_msg *m)
{
    want = fx.replies + 1;
    ck_assert_ok(troupe_runtime_ask(fx.rt, fx.kv, &m, 5000, on_reply, NULL));
    ck_assert(ts_run_until(&fx.loop, have, NULL, 10000));
    return fx.err;
}

static troupe_err
put(const char *k, const char *v, bool sync)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_kv_put_msg(k, strlen(k), v, strlen(v), sync, &m));
    return ask(m);
}

static troupe_err
get(const char *k)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_kv_get_msg(k, strlen(k), &m));
    return ask(m);
}

START_TEST(test_kv_put_get_del_round_trip)
{
    ck_assert_ok(put("alpha", "one", false));
    ck_assert_ok(get("alpha"));
    ck_assert_uint_eq(fx.vlen, 3);
    ck_assert_int_eq(memcmp(fx.val, "one", 3), 0);
    ck_assert_ok(put("alpha", "two!", true));
    ck_assert_ok(get("alpha"));
    ck_assert_int_eq(memcmp(fx.val, "two!", 4), 0);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_kv_del_msg("alpha", 5, true, &m));
    ck_assert_ok(ask(m));
    ck_assert_err(get("alpha"), TROUPE_ENOENT);
    ck_assert_err(get("never"), TROUPE_ENOENT);
}
END_TEST

START_TEST(test_kv_empty_value_is_stored_not_absent)
{
    ck_assert_ok(put("k", "", true));
    ck_assert_ok(get("k"));
    ck_assert_uint_eq(fx.vlen, 0);
}
END_TEST

START_TEST(test_kv_synced_put_survives_reopen)
{
    ck_assert_ok(put("durable", "yes", true));
    close_all();
    open_all();
    ck_assert_ok(get("durable"));
    ck_assert_int_eq(memcmp(fx.val, "yes", 3), 0);
}
END_TEST

static troupe_msg *
raw(uint32_t kind, void (*build)(troupe_packer *))
{
    troupe_packer p;
    troupe_pack_init(&p);
    build(&p);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_pack_take_msg(&p, kind, &m));
    return m;
}

static void
b_wrong_type(troupe_packer *p)
{
    troupe_pack_array(p, 3);
    troupe_pack_cstr(p, "key-as-str");
    troupe_pack_bin(p, "v", 1);
    troupe_pack_bool(p, true);
}
static void
b_short(troupe_packer *p)
{
    troupe_pack_array(p, 2);
    troupe_pack_bin(p, "k", 1);
    troupe_pack_bin(p, "v", 1);
}
static void
b_empty_key(troupe_packer *p)
{
    troupe_pack_array(p, 3);
    troupe_pack_bin(p, "", 0);
    troupe_pack_bin(p, "v", 1);
    troupe_pack_bool(p, false);
}
static void
b_map(troupe_packer *p)
{
    troupe_pack_map(p, 0);
}

START_TEST(test_kv_malformed_requests_get_eproto_and_write_nothing)
{
    ck_assert_err(ask(raw(TROUPE_KV_PUT, b_wrong_type)), TROUPE_EPROTO);
    ck_assert_err(ask(raw(TROUPE_KV_PUT, b_short)), TROUPE_EPROTO);
    ck_assert_err(ask(raw(TROUPE_KV_PUT, b_empty_key)), TROUPE_EPROTO);
    ck_assert_err(ask(raw(TROUPE_KV_GET, b_map)), TROUPE_EPROTO);
    ck_assert_err(ask(raw(TROUPE_KV_DEL, b_short)), TROUPE_EPROTO);
    /* Garbage bytes, not msgpack at all. */
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, TROUPE_KV_PUT, "\xc1\xc1", 2));
    ck_assert_err(ask(m), TROUPE_EPROTO);
    /* Trailing bytes after a valid request. */
    unsigned char buf[64];
    troupe_msg *ok = NULL;
    ck_assert_ok(troupe_kv_put_msg("k", 1, "v", 1, false, &ok));
    size_t n = troupe_msg_len(ok);
    memcpy(buf, troupe_msg_data(ok), n);
    buf[n] = 0xc0;
    troupe_msg_destroy(ok);
    ck_assert_ok(troupe_msg_create(&m, TROUPE_KV_PUT, buf, n + 1));
    ck_assert_err(ask(m), TROUPE_EPROTO);
    ck_assert_err(get("k"), TROUPE_ENOENT); /* nothing was written */
    ck_assert_err(get("key-as-str"), TROUPE_ENOENT);
    /* The actor is still serving. */
    ck_assert_ok(put("k", "v", false));
}
END_TEST

START_TEST(test_kv_unknown_kind_gets_enotsup)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, 77, NULL, 0));
    ck_assert_err(ask(m), TROUPE_ENOTSUP);
}
END_TEST

START_TEST(test_kv_bad_args)
{
    troupe_msg *m = NULL;
    ck_assert_err(troupe_kv_put_msg(NULL, 1, "v", 1, false, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_kv_put_msg("k", 0, "v", 1, false, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_kv_put_msg("k", 1, NULL, 1, false, &m), TROUPE_EINVAL);
    ck_assert_err(troupe_kv_get_msg("k", 1, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_kv_del_msg(NULL, 0, false, &m), TROUPE_EINVAL);
    static char big[TROUPE_KEY_MAX + 1];
    ck_assert_err(troupe_kv_get_msg(big, sizeof(big), &m), TROUPE_ETOOBIG);
    ck_assert_ptr_null(m);
    troupe_addr a;
    troupe_kv_opts ko = {.db = fx.db, .commit = fx.commit, .cf = NULL};
    ck_assert_err(troupe_kv_spawn(fx.rt, &ko, NULL, &a), TROUPE_EINVAL);
    ck_assert_err(troupe_kv_spawn(NULL, &ko, NULL, &a), TROUPE_EINVAL);
    ck_assert_err(troupe_kv_spawn(fx.rt, NULL, NULL, &a), TROUPE_EINVAL);
    ko.cf = "";
    ck_assert_err(troupe_kv_spawn(fx.rt, &ko, NULL, &a), TROUPE_EINVAL);
}
END_TEST

Suite *
kv_suite(void)
{
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_kv_put_get_del_round_trip);
    tcase_add_test(tc, test_kv_empty_value_is_stored_not_absent);
    tcase_add_test(tc, test_kv_synced_put_survives_reopen);
    tcase_add_test(tc, test_kv_malformed_requests_get_eproto_and_write_nothing);
    tcase_add_test(tc, test_kv_unknown_kind_gets_enotsup);
    tcase_add_test(tc, test_kv_bad_args);
    suite_add_tcase(s, tc);
    return s;
}
