/*
 * The flat C ABI (bindings/c, troupe/abi.h) as a binding uses it: only
 * the header, records parsed from bytes, documents in msgpack.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <msgpack.h>

#include "troupe/abi.h"
#include "tsupport.h"

#define BUF 65536

typedef struct rec {
    uint64_t id;
    uint32_t target;
    uint16_t kind, hlen;
    uint32_t attempt, blen;
    const uint8_t *header, *body;
    size_t size;
} rec;

static uint64_t
le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static rec
parse(const uint8_t *p)
{
    rec r = {.id = le(p, 8),
             .target = (uint32_t)le(p + 8, 4),
             .kind = (uint16_t)le(p + 12, 2),
             .hlen = (uint16_t)le(p + 14, 2),
             .attempt = (uint32_t)le(p + 16, 4),
             .blen = (uint32_t)le(p + 20, 4)};
    r.header = p + TROUPE_HOST_RECORD_FIXED;
    r.body = r.header + r.hlen;
    r.size = TROUPE_HOST_RECORD_SIZE(r.hlen, r.blen);
    return r;
}

static int32_t
status_of(const rec *r)
{
    ck_assert_uint_eq(r->kind, TROUPE_TASK_COMPLETION);
    ck_assert_uint_eq(r->hlen, TROUPE_ABI_COMPLETION_HEADER);
    ck_assert_uint_eq(r->target, 0);
    return (int32_t)le(r->header, 4);
}

/* Queue tasks wait_rec pulled while it looked for a completion, for
 * wait_task (a test process runs one test at a time). */
#define STASH 8
static uint8_t stash[STASH][1024];
static int stashed;

/* Pulls (blocking, 30 s at most) until the record with id comes; earlier
 * completions must be of other ids, and queue tasks are kept for
 * wait_task. Copies it into out (BUF bytes). */
static rec
wait_rec(troupe_abi *n, uint64_t id, uint8_t *out)
{
    uint64_t until = ts_now_ms() + 30000;
    while (ts_now_ms() < until) {
        size_t len = 0;
        ck_assert_int_eq(troupe_abi_next_task(n, 100, out, BUF, &len), 0);
        if (len == 0)
            continue;
        rec r = parse(out);
        if (r.kind == TROUPE_TASK_QUEUE) {
            ck_assert_int_lt(stashed, STASH);
            ck_assert_uint_le(len, sizeof(stash[0]));
            memcpy(stash[stashed++], out, len);
            continue;
        }
        if (r.id == id)
            return r;
    }
    ck_abort_msg("no record %llu within 30 s", (unsigned long long)id);
    return (rec){0};
}

/* Pulls until a pull finds nothing (which re-arms the wake fd: after
 * it, the fd is readable only once a new record is queued). */
static void
drain_empty(troupe_abi *n)
{
    uint8_t *b = malloc(BUF);
    size_t len;
    do
        ck_assert_int_eq(troupe_abi_next_task(n, 0, b, BUF, &len), 0);
    while (len > 0);
    free(b);
}

/* Waits up to 30 s until a completion is queued, leaving it there: a
 * blocking pull into a buffer too small for any record is ETOOBIG once
 * one is (a completion stays first in line). The wake fd would not do: a
 * wake may be written late for an edge a pull already consumed, and a
 * host then finds nothing (harmless to one that drains). */
static void
wait_queued(troupe_abi *n)
{
    uint8_t tiny[8];
    size_t len;
    ck_assert_int_eq(troupe_abi_next_task(n, 30000, tiny, sizeof(tiny), &len),
                     TROUPE_ETOOBIG);
}

/* Pulls (30 s at most) until a task of kind comes, into out (BUF
 * bytes), skipping completions. */
static rec
wait_kind(troupe_abi *n, uint8_t *out, uint16_t kind)
{
    uint64_t until = ts_now_ms() + 30000;
    while (ts_now_ms() < until) {
        size_t len = 0;
        ck_assert_int_eq(troupe_abi_next_task(n, 100, out, BUF, &len), 0);
        if (len > 0 && parse(out).kind == kind)
            return parse(out);
    }
    ck_abort_msg("no task of kind %u within 30 s", kind);
    return (rec){0};
}

/* Pulls (30 s at most) until a queue task comes, into out (BUF bytes),
 * skipping completions (and taking first what wait_rec kept). */
static rec
wait_task(troupe_abi *n, uint8_t *out)
{
    if (stashed > 0) {
        memcpy(out, stash[0], sizeof(stash[0]));
        memmove(stash[0], stash[1], (size_t)--stashed * sizeof(stash[0]));
        return parse(out);
    }
    return wait_kind(n, out, TROUPE_TASK_QUEUE);
}

/* The status of request id's completion. */
static int32_t
wait_status(troupe_abi *n, uint64_t id)
{
    uint8_t *b = malloc(BUF);
    rec r = wait_rec(n, id, b);
    int32_t s = status_of(&r);
    free(b);
    return s;
}

/* A msgpack map {k: v} (v a string) in sb. */
static void
doc1(msgpack_sbuffer *sb, const char *k, const char *v)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, k, strlen(k));
    msgpack_pack_str_with_body(&pk, v, strlen(v));
}

static char *dir;

static troupe_abi *
node(void)
{
    troupe_abi *n = NULL;
    ck_assert_int_eq(troupe_abi_open(dir, 2, 2, 2, &n), 0);
    ck_assert_int_eq(troupe_abi_start(n), 0);
    return n;
}

static void
setup(void)
{
    stashed = 0;
    dir = ts_tempdir("abi");
}

static void
teardown(void)
{
    ts_rmtree(dir);
    free(dir);
}

/* A table "t" with index "by_name" on name. */
static void
make_table(troupe_abi *n)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "name", 4);
    msgpack_pack_str_with_body(&pk, "by_name", 7);
    msgpack_pack_str_with_body(&pk, "fields", 6);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "name", 4);
    msgpack_pack_str_with_body(&pk, "string", 6);
    ck_assert_int_eq(troupe_abi_table_create(n, 1, "t", sb.data, sb.size), 0);
    ck_assert_int_eq(wait_status(n, 1), 0);
    msgpack_sbuffer_destroy(&sb);
}

/* ---- bad input ---------------------------------------------------------- */

START_TEST(bad_input)
{
    troupe_abi *n = NULL;
    ck_assert_int_eq(troupe_abi_version(), TROUPE_ABI_VERSION);
    ck_assert_int_eq(troupe_abi_open(NULL, 0, 0, 0, &n), TROUPE_EINVAL);
    ck_assert_ptr_null(n);
    ck_assert_str_ne(troupe_abi_errmsg(), "");
    ck_assert_int_eq(troupe_abi_open(dir, 0, 0, 3, &n), TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "sync 3"));
    ck_assert_int_eq(troupe_abi_open(dir, 300, 0, 0, &n), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_open(dir, 1, 1, 2, NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_open(dir, 1, 1, 2, &n), 0);
    ck_assert_str_eq(troupe_abi_errmsg(), "");
    /* requests before start */
    ck_assert_int_eq(troupe_abi_table_get(n, 1, "t", "k", 1), TROUPE_ESTATE);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "not started"));
    uint64_t tx = 9;
    ck_assert_int_eq(troupe_abi_txn_begin(n, &tx), TROUPE_ESTATE);
    ck_assert_uint_eq(tx, 0);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 1, 0, 0), TROUPE_ESTATE);
    ck_assert_int_eq(troupe_abi_start(NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_start(n), 0);
    ck_assert_int_eq(troupe_abi_start(n), TROUPE_ESTATE);
    /* NULL node everywhere */
    uint32_t idx;
    size_t len, cnt, d, r;
    int fd;
    uint8_t buf[64];
    ck_assert_int_eq(troupe_abi_wake_fd(NULL, &fd), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_wake_fd(n, NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_set_wake(NULL, NULL, NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_set_limits(NULL, 1, 1), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_register_pull(NULL, "p", 0, 0, &idx),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_register_pull(n, NULL, 0, 0, &idx),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_register_pull(n, "", 0, 0, &idx),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_register_pull(n, "p", 70000, 0, &idx),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_next_task(NULL, 0, buf, 64, &len),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_next_task(n, -1, buf, 64, &len), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_next_batch(n, 0, NULL, 64, 1, &cnt, &len),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_reply(NULL, 1, 1, NULL, 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_reply(n, 12345, 1, NULL, 0), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_reply_batch(NULL, buf, 16, &d, &r),
                     TROUPE_EINVAL);
    memset(buf, 0, sizeof(buf));
    ck_assert_int_eq(troupe_abi_reply_batch(n, buf, 12, &d, &r), TROUPE_EPROTO);
    ck_assert_int_eq(troupe_abi_table_create(NULL, 1, "t", NULL, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_table_create(n, 1, "t", NULL, 3),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_table_create(n, 1, "t", "\xc1", 1),
                     TROUPE_EPROTO);
    ck_assert_int_eq(troupe_abi_table_create(n, 1, "t", "\x91\x01", 2),
                     TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "index 0"));
    ck_assert_int_eq(troupe_abi_table_create(n, 1, NULL, NULL, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_table_get(NULL, 1, "t", "k", 1), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_table_get(n, 1, "nope", "k", 1),
                     TROUPE_ENOTABLE);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "nope"));
    make_table(n);
    ck_assert_int_eq(troupe_abi_table_get(n, 2, "t", NULL, 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_table_put(n, 2, "t", "k", 1, "\xc1", 1),
                     TROUPE_EPROTO);
    ck_assert_int_eq(troupe_abi_table_put(NULL, 2, "t", "k", 1, "\x80", 1),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_table_delete(n, 2, "t", "", 0), TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_table_scan(n, 2, "t", NULL, 0, NULL, 0, NULL, 0, 0, 0),
        TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_table_scan(n, 2, "t", NULL, 0, NULL, 0, NULL, 0, 5, 2),
        TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_index_query(n, 2, "t", "by_name", NULL, 3, NULL,
                                            0, NULL, 0, NULL, 0, 5, 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_index_query(n, 2, "t", "by_name", NULL, 0, NULL,
                                            0, NULL, 0, NULL, 0, 5, 0, 7),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_txn_begin(NULL, &tx), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_txn_begin(n, NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_txn_get(n, 2, 77, "t", "k", 1), TROUPE_ENOENT);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "77"));
    ck_assert_int_eq(troupe_abi_txn_put(n, 77, "t", "k", 1, "\x80", 1),
                     TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_txn_delete(n, 77, "t", "k", 1), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_txn_commit(n, 2, 77), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_txn_rollback(n, 77), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_txn_begin(n, &tx), 0);
    ck_assert_int_eq(troupe_abi_txn_put(n, tx, "t", "k", 1, "\x01", 1),
                     TROUPE_EPROTO);
    ck_assert_int_eq(troupe_abi_txn_rollback(n, tx), 0);
    ck_assert_int_eq(troupe_abi_txn_rollback(n, tx), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_queue_create(n, "", 1, 0, 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 0, 0, 0), TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 2, "nope", "i", 1, "k", 1, "\x01", 1, 0),
        TROUPE_ENOQUEUE);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 1, 0, 0), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 2, "q", "i", 1, "k", 1, "\xc1", 1, 0),
        TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 2, "q", "i", 1, "k", 1, "\x01", 1, -5),
        TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "nope", "p"),
                     TROUPE_ENOQUEUE);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "nope"), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, NULL, "p"), TROUPE_EINVAL);
    /* nothing was accepted, so nothing completes: the queue is empty */
    ck_assert_int_eq(troupe_abi_next_task(n, 0, buf, 64, &len), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(troupe_abi_close(NULL), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
    ck_assert_ptr_null(n);
    ck_assert_int_eq(troupe_abi_close(&n), TROUPE_ESTATE);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "closed already"));
}
END_TEST

/* ---- completions -----------------------------------------------------------
 */

/* The value of key k (a str) in the map at o, or NULL. */
static const msgpack_object *
get_key(const msgpack_object *o, const char *k)
{
    ck_assert_int_eq(o->type, MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *key = &o->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == strlen(k) &&
            memcmp(key->via.str.ptr, k, key->via.str.size) == 0)
            return &o->via.map.ptr[i].val;
    }
    return NULL;
}

START_TEST(completions)
{
    troupe_abi *n = node();
    uint8_t *b = malloc(BUF);
    make_table(n);
    msgpack_sbuffer d1, d2;
    doc1(&d1, "name", "ann");
    doc1(&d2, "name", "bob");
    ck_assert_int_eq(
        troupe_abi_table_put(n, 10, "t", "k1", 2, d1.data, d1.size), 0);
    ck_assert_int_eq(
        troupe_abi_table_put(n, 11, "t", "k2", 2, d2.data, d2.size), 0);
    ck_assert_int_eq(wait_status(n, 10), 0);
    ck_assert_int_eq(wait_status(n, 11), 0);
    /* get: the document itself */
    ck_assert_int_eq(troupe_abi_table_get(n, 12, "t", "k1", 2), 0);
    rec r = wait_rec(n, 12, b);
    ck_assert_int_eq(status_of(&r), 0);
    ck_assert_uint_eq(r.blen, d1.size);
    ck_assert_mem_eq(r.body, d1.data, d1.size);
    ck_assert_int_eq(troupe_abi_table_get(n, 13, "t", "zz", 2), 0);
    r = wait_rec(n, 13, b);
    ck_assert_int_eq(status_of(&r), TROUPE_ENOENT);
    ck_assert_uint_eq(r.blen, 0);
    /* scan: two rows, in key order */
    ck_assert_int_eq(
        troupe_abi_table_scan(n, 14, "t", NULL, 0, NULL, 0, NULL, 0, 10, 0), 0);
    r = wait_rec(n, 14, b);
    ck_assert_int_eq(status_of(&r), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    ck_assert_int_eq(
        msgpack_unpack_next(&u, (const char *)r.body, r.blen, &off),
        MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *rows = get_key(&u.data, "rows");
    ck_assert_ptr_nonnull(rows);
    ck_assert_uint_eq(rows->via.array.size, 2);
    const msgpack_object *k0 = &rows->via.array.ptr[0].via.array.ptr[0];
    ck_assert_int_eq(k0->type, MSGPACK_OBJECT_BIN);
    ck_assert_mem_eq(k0->via.bin.ptr, "k1", 2);
    ck_assert_int_eq(get_key(&u.data, "more")->via.boolean, false);
    msgpack_unpacked_destroy(&u);
    /* index query by name = "bob": k2, with its row */
    msgpack_sbuffer v;
    msgpack_sbuffer_init(&v);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &v, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_str_with_body(&pk, "bob", 3);
    ck_assert_int_eq(troupe_abi_index_query(n, 15, "t", "by_name", v.data,
                                            v.size, NULL, 0, NULL, 0, NULL, 0,
                                            10, 0, 1),
                     0);
    r = wait_rec(n, 15, b);
    ck_assert_int_eq(status_of(&r), 0);
    msgpack_unpacked_init(&u);
    off = 0;
    ck_assert_int_eq(
        msgpack_unpack_next(&u, (const char *)r.body, r.blen, &off),
        MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *hits = get_key(&u.data, "hits");
    ck_assert_uint_eq(hits->via.array.size, 1);
    const msgpack_object *h0 = hits->via.array.ptr[0].via.array.ptr;
    ck_assert_mem_eq(h0[1].via.bin.ptr, "k2", 2);
    ck_assert_int_eq(h0[2].type, MSGPACK_OBJECT_MAP);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&v);
    /* delete, then get is ENOENT */
    ck_assert_int_eq(troupe_abi_table_delete(n, 16, "t", "k2", 2), 0);
    ck_assert_int_eq(wait_status(n, 16), 0);
    ck_assert_int_eq(troupe_abi_table_delete(n, 17, "t", "k2", 2), 0);
    ck_assert_int_eq(wait_status(n, 17), TROUPE_ENOENT);
    /* a transaction: read, write, commit; a second one conflicts */
    uint64_t t1, t2;
    ck_assert_int_eq(troupe_abi_txn_begin(n, &t1), 0);
    ck_assert_int_eq(troupe_abi_txn_begin(n, &t2), 0);
    ck_assert_uint_ne(t1, t2);
    ck_assert_int_eq(troupe_abi_txn_get(n, 20, t1, "t", "k1", 2), 0);
    r = wait_rec(n, 20, b);
    ck_assert_int_eq(status_of(&r), 0);
    ck_assert_mem_eq(r.body, d1.data, d1.size);
    ck_assert_int_eq(troupe_abi_txn_get(n, 21, t2, "t", "k1", 2), 0);
    ck_assert_int_eq(wait_status(n, 21), 0);
    ck_assert_int_eq(troupe_abi_txn_put(n, t1, "t", "k1", 2, d2.data, d2.size),
                     0);
    ck_assert_int_eq(troupe_abi_txn_put(n, t2, "t", "k1", 2, d1.data, d1.size),
                     0);
    ck_assert_int_eq(troupe_abi_txn_commit(n, 22, t1), 0);
    ck_assert_int_eq(wait_status(n, 22), 0);
    ck_assert_int_eq(troupe_abi_txn_commit(n, 23, t2), 0);
    r = wait_rec(n, 23, b);
    ck_assert_int_eq(status_of(&r), TROUPE_ECONFLICT);
    msgpack_unpacked_init(&u);
    off = 0;
    ck_assert_int_eq(
        msgpack_unpack_next(&u, (const char *)r.body, r.blen, &off),
        MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(u.data.via.array.size, 1);
    const msgpack_object *c0 = u.data.via.array.ptr[0].via.array.ptr;
    ck_assert_mem_eq(c0[0].via.str.ptr, "t", 1);
    ck_assert_mem_eq(c0[1].via.bin.ptr, "k1", 2);
    msgpack_unpacked_destroy(&u);
    /* t1's write is the row now; the committed ids are gone */
    ck_assert_int_eq(troupe_abi_table_get(n, 24, "t", "k1", 2), 0);
    r = wait_rec(n, 24, b);
    ck_assert_mem_eq(r.body, d2.data, d2.size);
    uint64_t until = ts_now_ms() + 30000; /* the end job runs after */
    int rc;
    while ((rc = troupe_abi_txn_rollback(n, t1)) == TROUPE_ESTATE &&
           ts_now_ms() < until)
        ;
    ck_assert_int_eq(rc, TROUPE_ENOENT);
    /* publish */
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 2, 0, 0), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 25, "q", "e1", 2, "k", 1, "\x07", 1, 0), 0);
    ck_assert_int_eq(wait_status(n, 25), 0);
    msgpack_sbuffer_destroy(&d1);
    msgpack_sbuffer_destroy(&d2);
    free(b);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

/* ---- the bound, a small buffer, close with work in flight ---------------- */

START_TEST(busy_bound)
{
    troupe_abi *n = node();
    make_table(n);
    ck_assert_int_eq(troupe_abi_set_limits(n, 2, 0), 0);
    ck_assert_int_eq(troupe_abi_table_get(n, 1, "t", "a", 1), 0);
    ck_assert_int_eq(troupe_abi_table_get(n, 2, "t", "a", 1), 0);
    ck_assert_int_eq(troupe_abi_table_get(n, 3, "t", "a", 1), TROUPE_EBUSY);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "limit"));
    ck_assert_int_eq(wait_status(n, 1), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_table_get(n, 3, "t", "a", 1), 0);
    ck_assert_int_eq(wait_status(n, 2), TROUPE_ENOENT);
    ck_assert_int_eq(wait_status(n, 3), TROUPE_ENOENT);
    /* bytes: one completion not pulled (40 bytes) reaches a 1-byte bound */
    ck_assert_int_eq(troupe_abi_set_limits(n, 100, 1), 0);
    drain_empty(n);
    ck_assert_int_eq(troupe_abi_table_get(n, 4, "t", "a", 1), 0);
    wait_queued(n); /* it is queued, not pulled */
    ck_assert_int_eq(troupe_abi_table_get(n, 5, "t", "a", 1), TROUPE_EBUSY);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "bytes"));
    ck_assert_int_eq(wait_status(n, 4), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_table_get(n, 5, "t", "a", 1), 0);
    ck_assert_int_eq(wait_status(n, 5), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

START_TEST(small_buffer)
{
    troupe_abi *n = node();
    make_table(n);
    msgpack_sbuffer d;
    doc1(&d, "name", "a rather long name for a small buffer");
    ck_assert_int_eq(troupe_abi_table_put(n, 1, "t", "k", 1, d.data, d.size),
                     0);
    ck_assert_int_eq(wait_status(n, 1), 0);
    ck_assert_int_eq(troupe_abi_table_get(n, 2, "t", "k", 1), 0);
    uint8_t small[48];
    size_t len = 0;
    ck_assert_int_eq(troupe_abi_next_task(n, 30000, small, sizeof(small), &len),
                     TROUPE_ETOOBIG);
    size_t need = TROUPE_HOST_RECORD_SIZE(8, d.size);
    ck_assert_uint_eq(len, need);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "bytes"));
    /* it stays first: the next pull with room gets it */
    uint8_t *b = malloc(BUF);
    size_t cnt;
    ck_assert_int_eq(troupe_abi_next_batch(n, 0, b, BUF, 8, &cnt, &len), 0);
    ck_assert_uint_eq(cnt, 1);
    ck_assert_uint_eq(len, need);
    rec r = parse(b);
    ck_assert_uint_eq(r.id, 2);
    ck_assert_mem_eq(r.body, d.data, d.size);
    /* a task too big comes again; the host never had it, so it was no
     * attempt (docs/queue.md, "Attempts and parking") */
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 4, 0, &idx), 0);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 1, 0, 0), 0);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "w"), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 3, "q", "e1", 2, "k", 1, d.data, d.size, 0),
        0);
    /* the publish's completion (40 bytes) fits; the task does not */
    uint64_t until = ts_now_ms() + 30000;
    int rc;
    while ((rc = troupe_abi_next_task(n, 100, small, sizeof(small), &len)) ==
               0 &&
           ts_now_ms() < until)
        ;
    ck_assert_int_eq(rc, TROUPE_ETOOBIG);
    ck_assert_uint_gt(len, sizeof(small));
    r = wait_task(n, b);
    ck_assert_uint_eq(r.target, idx);
    ck_assert_uint_eq(r.attempt, 1);
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                     0);
    free(b);
    msgpack_sbuffer_destroy(&d);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

/* A queue's max_attempts reaches the queue: with 1, an event its host
 * failed once is parked, so the next event after it comes next (without
 * the limit the failed one, first in due order, would come again). */
START_TEST(queue_max_attempts)
{
    troupe_abi *n = node();
    ck_assert_int_eq(
        troupe_abi_queue_create(n, "q", 1, 0, 1000001), /* over the max */
        TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 1, 0, 1), 0);
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 4, 0, &idx), 0);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "w"), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 1, "q", "e1", 2, "k", 1, "\x01", 1, 0), 0);
    ck_assert_int_eq(wait_status(n, 1), 0);
    uint8_t *b = malloc(BUF);
    rec r = wait_task(n, b);
    ck_assert_uint_eq(r.attempt, 1);
    ck_assert_mem_eq(r.body, "\x01", 1);
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_FAILURE, NULL, 0),
                     0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 2, "q", "e2", 2, "k", 1, "\x02", 1, 0), 0);
    ck_assert_int_eq(wait_status(n, 2), 0);
    r = wait_task(n, b);
    ck_assert_mem_eq(r.body, "\x02", 1);
    ck_assert_uint_eq(r.attempt, 1);
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                     0);
    free(b);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

START_TEST(close_in_flight)
{
    troupe_abi *n = node();
    make_table(n);
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 8, 60000, &idx), 0);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 2, 0, 0), 0);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "w"), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 1, "q", "e1", 2, "k", 1, "\x07", 1, 0), 0);
    /* a task held (60 s timeout) must not hold close up */
    uint8_t *b = malloc(BUF);
    wait_task(n, b);
    uint64_t tx;
    ck_assert_int_eq(troupe_abi_txn_begin(n, &tx), 0);
    ck_assert_int_eq(troupe_abi_txn_put(n, tx, "t", "x", 1, "\x80", 1), 0);
    ck_assert_int_eq(troupe_abi_txn_commit(n, 2, tx), 0);
    uint64_t open_tx;
    ck_assert_int_eq(troupe_abi_txn_begin(n, &open_tx), 0);
    for (uint64_t i = 0; i < 200; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%llu", (unsigned long long)i);
        ck_assert_int_eq(
            troupe_abi_table_put(n, 100 + i, "t", k, strlen(k), "\x80", 1), 0);
    }
    uint64_t t0 = ts_now_ms();
    ck_assert_int_eq(troupe_abi_close(&n), 0);
    ck_assert_uint_lt(ts_now_ms() - t0, 20000); /* not the task's 60 s */
    ck_assert_ptr_null(n);
    /* what committed is there, the held event is pending again */
    n = node();
    ck_assert_int_eq(troupe_abi_table_get(n, 1, "t", "x", 1), 0);
    ck_assert_int_eq(wait_status(n, 1), 0);
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 8, 0, &idx), 0);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "w"), 0);
    rec r = wait_task(n, b);
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                     0);
    free(b);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

/* ---- queue events through the ABI ---------------------------------------- */

static _Atomic int wakes;

static void
on_wake(void *arg)
{
    atomic_fetch_add(&wakes, 1);
}

static bool
woke(void *arg)
{
    return atomic_load(&wakes) > 0;
}

START_TEST(queue_events)
{
    troupe_abi *n = node();
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 4, 0, &idx), 0);
    ck_assert_uint_gt(idx, 0);
    uint32_t again = 7;
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 4, 0, &again),
                     TROUPE_EEXIST);
    ck_assert_uint_eq(again, 0);
    ck_assert_int_eq(troupe_abi_queue_create(n, "q", 2, 0, 0), 0);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "w"), 0);
    atomic_store(&wakes, 0);
    ck_assert_int_eq(troupe_abi_set_wake(n, on_wake, NULL), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 1, "q", "e1", 2, "k1", 2, "\x07", 1, 0), 0);
    ck_assert(ts_wait_until(woke, NULL, 10000));
    ck_assert_int_eq(troupe_abi_set_wake(n, NULL, NULL), 0);
    ck_assert_int_eq(wait_status(n, 1), 0);
    /* the event: FAILURE leaves it pending, it comes again */
    uint8_t *b = malloc(BUF);
    rec r = {0};
    for (int round = 1; round <= 2; round++) {
        r = wait_task(n, b);
        ck_assert_uint_eq(r.target, idx);
        ck_assert_uint_eq(r.attempt, (uint32_t)round);
        ck_assert_uint_eq(r.blen, 1);
        ck_assert_uint_eq(r.body[0], 0x07);
        /* header: queue name "q", id "e1", key "k1" */
        ck_assert_uint_eq(le(r.header + 20, 2), 1);
        ck_assert_uint_eq(le(r.header + 22, 2), 2);
        ck_assert_mem_eq(r.header + 32, "qe1k1", 5);
        if (round == 1) {
            ck_assert_int_eq(
                troupe_abi_reply(n, r.id, TROUPE_OUTCOME_FAILURE, NULL, 0), 0);
            ck_assert_int_eq(
                troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                TROUPE_ENOENT);
        }
    }
    /* SUCCESS acks, through reply_batch */
    uint8_t rb[16] = {0};
    for (int i = 0; i < 8; i++)
        rb[i] = (uint8_t)(r.id >> (8 * i));
    rb[8] = TROUPE_OUTCOME_SUCCESS;
    size_t done, refused;
    ck_assert_int_eq(troupe_abi_reply_batch(n, rb, 16, &done, &refused), 0);
    ck_assert_uint_eq(done, 1);
    ck_assert_uint_eq(refused, 0);
    /* acknowledged: after a reopen only the second event comes */
    ck_assert_int_eq(troupe_abi_close(&n), 0);
    n = node();
    ck_assert_int_eq(troupe_abi_register_pull(n, "w", 4, 0, &idx), 0);
    ck_assert_int_eq(troupe_abi_queue_subscribe(n, "q", "w"), 0);
    ck_assert_int_eq(
        troupe_abi_queue_publish(n, 2, "q", "e2", 2, "k1", 2, "\x08", 1, 0), 0);
    r = wait_task(n, b);
    ck_assert_mem_eq(r.header + 32, "qe2", 3); /* e1 is gone (one key) */
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS, NULL, 0),
                     0);
    free(b);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

/* ---- actors the host serves ------------------------------------------------
 */

START_TEST(host_actors)
{
    troupe_abi *n = NULL;
    ck_assert_int_eq(troupe_abi_open(dir, 2, 2, 2, &n), 0); /* no start */
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "a", 4, 0, &idx), 0);
    ck_assert_int_eq(troupe_abi_actor_serve(n, "greeter", "nope", 0),
                     TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_actor_serve(NULL, "greeter", "a", 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_actor_serve(n, "", "a", 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_actor_serve(n, "greeter", "a", 77), 0);
    ck_assert_int_eq(troupe_abi_actor_serve(n, "greeter", "a", 0),
                     TROUPE_EEXIST);
    ck_assert_int_eq(troupe_abi_actor_ask(n, 1, "nobody", 5, "x", 1, 0),
                     TROUPE_ENOENT);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "nobody"));
    ck_assert_int_eq(troupe_abi_actor_ask(n, 1, "greeter", 5, NULL, 1, 0),
                     TROUPE_EINVAL);
    uint8_t *b = malloc(BUF);
    /* an ask: the host's SUCCESS is the reply, its FAILURE EFAILED */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(
            troupe_abi_actor_ask(n, 10 + i, "greeter", 5, "hi", 2, 0), 0);
        rec t = wait_kind(n, b, TROUPE_TASK_ACTOR);
        ck_assert_uint_eq(t.target, idx);
        ck_assert_uint_eq(le(t.header, 4), 5);
        ck_assert_uint_eq(le(t.header + 4, 4) & 1u, 1u); /* an ask */
        ck_assert_uint_eq(le(t.header + 20, 4), 77);     /* the tag */
        ck_assert_uint_eq(t.blen, 2);
        ck_assert_mem_eq(t.body, "hi", 2);
        ck_assert_int_eq(troupe_abi_reply(n, t.id,
                                          i == 0 ? TROUPE_OUTCOME_SUCCESS
                                                 : TROUPE_OUTCOME_FAILURE,
                                          "yo", 2),
                         0);
        rec c = wait_rec(n, 10 + i, b);
        ck_assert_int_eq(status_of(&c), i == 0 ? TROUPE_OK : TROUPE_EFAILED);
        ck_assert_uint_eq(c.blen, 2);
        ck_assert_mem_eq(c.body, "yo", 2);
    }
    /* an ask held at close: close does not wait for its reply */
    ck_assert_int_eq(troupe_abi_actor_ask(n, 20, "greeter", 5, "hi", 2, 0), 0);
    wait_kind(n, b, TROUPE_TASK_ACTOR);
    free(b);
    uint64_t t0 = ts_now_ms();
    ck_assert_int_eq(troupe_abi_close(&n), 0);
    ck_assert_uint_lt(ts_now_ms() - t0, 20000);
}
END_TEST

/* ---- the thread's message --------------------------------------------------
 */

static void *
other_thread(void *arg)
{
    troupe_abi *n = arg;
    int fd;
    int rc = troupe_abi_wake_fd(n, &fd);
    char *seen = strdup(troupe_abi_errmsg());
    return rc == 0 ? seen : NULL;
}

START_TEST(thread_errmsg)
{
    troupe_abi *n = node();
    ck_assert_int_eq(troupe_abi_table_get(n, 1, "missing", "k", 1),
                     TROUPE_ENOTABLE);
    char *mine = strdup(troupe_abi_errmsg());
    ck_assert_ptr_nonnull(strstr(mine, "missing"));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, other_thread, n), 0);
    void *seen;
    pthread_join(th, &seen);
    ck_assert_ptr_nonnull(seen);
    ck_assert_str_eq(seen, "");                  /* a success there */
    ck_assert_str_eq(troupe_abi_errmsg(), mine); /* still this thread's */
    free(seen);
    free(mine);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
    ck_assert_str_eq(troupe_abi_errmsg(), "");
}
END_TEST

/* ---- the coordinator ------------------------------------------------------
 */

/* What the coordinator test's pump saw: completions by request id (< 128),
 * and the branch calls, in order, as "mode gid branch op body". */
typedef struct pump {
    int32_t status[128];
    bool done[128];
    char body[128][1024];
    size_t body_len[128];
    char calls[16][128];
    int ncalls;
    /* the outcome for a branch whose body is fail_body; SUCCESS else */
    const char *fail_body;
} pump;

static void
pump_once(troupe_abi *n, pump *p, uint8_t *b)
{
    size_t len = 0;
    ck_assert_int_eq(troupe_abi_next_task(n, 100, b, BUF, &len), 0);
    if (len == 0)
        return;
    rec r = parse(b);
    if (r.kind == TROUPE_TASK_COMPLETION) {
        ck_assert_uint_lt(r.id, 128);
        p->done[r.id] = true;
        p->status[r.id] = status_of(&r);
        ck_assert_uint_lt(r.blen, sizeof(p->body[0]));
        memcpy(p->body[r.id], r.body, r.blen);
        p->body_len[r.id] = r.blen;
        return;
    }
    ck_assert_uint_eq(r.kind, TROUPE_TASK_BRANCH);
    /* the header: mode, gid, branch id, op, each NUL-terminated */
    const char *f[4];
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_lt(off, r.hlen);
        f[i] = (const char *)r.header + off;
        const char *z = memchr(f[i], '\0', r.hlen - off);
        ck_assert_ptr_nonnull(z);
        off += (size_t)(z - f[i]) + 1;
    }
    ck_assert_uint_eq(off, r.hlen);
    ck_assert_int_lt(p->ncalls, 16);
    snprintf(p->calls[p->ncalls++], sizeof(p->calls[0]), "%s %s %s %s %.*s",
             f[0], f[1], f[2], f[3], (int)r.blen, (const char *)r.body);
    bool fail = p->fail_body != NULL && r.blen == strlen(p->fail_body) &&
                memcmp(r.body, p->fail_body, r.blen) == 0;
    ck_assert_int_eq(
        troupe_abi_reply(n, r.id,
                         fail ? TROUPE_OUTCOME_FAILURE : TROUPE_OUTCOME_SUCCESS,
                         NULL, 0),
        0);
}

/* Pumps (30 s at most) until request id completed. */
static int32_t
pump_until(troupe_abi *n, pump *p, uint64_t id)
{
    uint8_t *b = malloc(BUF);
    uint64_t until = ts_now_ms() + 30000;
    while (!p->done[id] && ts_now_ms() < until)
        pump_once(n, p, b);
    free(b);
    ck_assert_msg(p->done[id], "no completion %llu", (unsigned long long)id);
    return p->status[id];
}

static bool
map_str(const void *buf, size_t len, const char *k, char *out, size_t cap);

/* Queries gid (request id 127, again and again) until its status is
 * final; returns it. */
static const char *
final_status(troupe_abi *n, pump *p, const char *gid)
{
    static char st[32];
    uint64_t until = ts_now_ms() + 30000;
    while (ts_now_ms() < until) {
        p->done[127] = false;
        ck_assert_int_eq(troupe_abi_gtx_query(n, 127, gid, strlen(gid)), 0);
        ck_assert_int_eq(pump_until(n, p, 127), 0);
        ck_assert(
            map_str(p->body[127], p->body_len[127], "status", st, sizeof(st)));
        if (strcmp(st, "succeed") == 0 || strcmp(st, "failed") == 0)
            return st;
    }
    ck_abort_msg("gtx %s not final within 30 s", gid);
    return NULL;
}

/* The str at key k of the msgpack map in buf, into out (cap bytes). */
static bool
map_str(const void *buf, size_t len, const char *k, char *out, size_t cap)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    bool found = false;
    if (msgpack_unpack_next(&up, buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        up.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < up.data.via.map.size; i++) {
            msgpack_object_kv *kv = &up.data.via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR &&
                kv->key.via.str.size == strlen(k) &&
                memcmp(kv->key.via.str.ptr, k, strlen(k)) == 0 &&
                kv->val.type == MSGPACK_OBJECT_STR &&
                kv->val.via.str.size < cap) {
                memcpy(out, kv->val.via.str.ptr, kv->val.via.str.size);
                out[kv->val.via.str.size] = '\0';
                found = true;
            }
        }
    msgpack_unpacked_destroy(&up);
    return found;
}

/* A call [target, payload bin]. */
static void
pack_call(msgpack_packer *pk, const char *target, const char *payload)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_str_with_body(pk, target, strlen(target));
    msgpack_pack_bin_with_body(pk, payload, strlen(payload));
}

START_TEST(coordinator)
{
    troupe_abi *n = NULL;
    ck_assert_int_eq(troupe_abi_open(dir, 2, 2, 2, &n), 0);
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "bank", 8, 5000, &idx), 0);
    ck_assert_int_eq(troupe_abi_coord_options(n, 0, 0, 0, 5), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_coord_options(n, 2000, 0, 0, 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_coord_options(n, 2, 100, 50, 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_coord_options(n, 2, 100, 1000, 2), 0);
    ck_assert_int_eq(troupe_abi_tcc_prepare(n, 1, "g", 1), TROUPE_ESTATE);
    ck_assert_int_eq(troupe_abi_start(n), 0);
    ck_assert_int_eq(troupe_abi_coord_options(n, 2, 0, 0, 0), TROUPE_ESTATE);

    /* two steps: the first succeeds, the second fails */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "action", 6);
    pack_call(&pk, "bank", "debit");
    msgpack_pack_str_with_body(&pk, "compensate", 10);
    pack_call(&pk, "bank", "undebit");
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "action", 6);
    pack_call(&pk, "bank", "credit");
    msgpack_pack_str_with_body(&pk, "compensate", 10);
    msgpack_pack_nil(&pk);

    /* refused at the call: nothing submitted */
    const char *okgid = "t-1";
    ck_assert_int_eq(
        troupe_abi_saga_submit(n, 1, "bad gid", 7, sb.data, sb.size, NULL, 0),
        TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_saga_submit(n, 1, okgid, 3, NULL, 0, NULL, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_saga_submit(n, 1, okgid, 3, sb.data, sb.size - 1, NULL, 0),
        TROUPE_EPROTO);
    ck_assert_int_eq(
        troupe_abi_saga_submit(n, 1, okgid, 3, "\x91\x01", 2, NULL, 0),
        TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "not a map"));
    ck_assert_int_eq(
        troupe_abi_saga_submit(n, 1, okgid, 3, "\x91\x80", 2, NULL, 0),
        TROUPE_EINVAL); /* a step with no action */
    ck_assert_int_eq(troupe_abi_saga_submit(n, 1, okgid, 3, sb.data, sb.size,
                                            "\x81\xa1x\x01", 4),
                     TROUPE_EINVAL); /* an unknown option */
    ck_assert_int_eq(troupe_abi_gtx_query(n, 1, "", 0), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_gtx_abort(n, 1, okgid, 3, "bad\nreason"),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_msg_prepare(n, 1, okgid, 3, "\x90", 1, NULL, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_tcc_register(n, 1, okgid, 3, "\x90", 1),
                     TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_txn_barrier(n, 1, 999, "saga", okgid, 3, "01", "action"),
        TROUPE_ENOENT);

    pump p = {.fail_body = "credit"};
    ck_assert_int_eq(troupe_abi_gtx_query(n, 2, okgid, 3), 0);
    ck_assert_int_eq(pump_until(n, &p, 2), TROUPE_ENOENT);
    ck_assert_int_eq(
        troupe_abi_saga_submit(n, 3, okgid, 3, sb.data, sb.size, NULL, 0), 0);
    ck_assert_int_eq(pump_until(n, &p, 3), 0);
    /* until it failed: the compensation of step 1 ran, none of step 2
     * (bounded by time, not by a count of queries: a slow machine takes
     * more of them) */
    ck_assert_str_eq(final_status(n, &p, okgid), "failed");
    ck_assert_int_eq(p.ncalls, 3);
    ck_assert_str_eq(p.calls[0], "saga t-1 01 action debit");
    ck_assert_str_eq(p.calls[1], "saga t-1 02 action credit");
    ck_assert_str_eq(p.calls[2], "saga t-1 01 compensate undebit");
    /* a final one: abort is a conflict, with the message as body */
    ck_assert_int_eq(troupe_abi_gtx_abort(n, 60, okgid, 3, "late"), 0);
    ck_assert_int_eq(pump_until(n, &p, 60), TROUPE_ECONFLICT);
    ck_assert_uint_gt(p.body_len[60], 1);
    /* a target nobody registered: refused by the coordinator */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "action", 6);
    pack_call(&pk, "nobody", "x");
    ck_assert_int_eq(
        troupe_abi_saga_submit(n, 61, "t-2", 3, sb.data, sb.size, NULL, 0), 0);
    ck_assert_int_eq(pump_until(n, &p, 61), TROUPE_ENOENT);
    msgpack_sbuffer_destroy(&sb);

    /* the barrier in a transaction: a second delivery is DUPLICATED */
    for (int i = 0; i < 2; i++) {
        uint64_t tx;
        ck_assert_int_eq(troupe_abi_txn_begin(n, &tx), 0);
        ck_assert_int_eq(
            troupe_abi_txn_barrier(n, 62, tx, "saga", okgid, 3, "01", "bogus"),
            TROUPE_EINVAL);
        p.done[62] = false;
        ck_assert_int_eq(
            troupe_abi_txn_barrier(n, 62, tx, "saga", okgid, 3, "01", "action"),
            0);
        ck_assert_int_eq(pump_until(n, &p, 62), 0);
        ck_assert_uint_ge(p.body_len[62], 1);
        ck_assert_mem_eq(p.body[62] + 1, i == 0 ? "execute" : "duplicated",
                         p.body_len[62] - 1);
        p.done[63] = false;
        ck_assert_int_eq(troupe_abi_txn_commit(n, 63, tx), 0);
        ck_assert_int_eq(pump_until(n, &p, 63), 0);
    }

    /* a two-phase message: its step runs once submitted */
    msgpack_sbuffer_init(&sb);
    msgpack_pack_array(&pk, 1);
    pack_call(&pk, "bank", "m");
    ck_assert_int_eq(troupe_abi_msg_prepare(n, 64, "m-1", 3, sb.data, sb.size,
                                            "bank", 60000),
                     0);
    ck_assert_int_eq(pump_until(n, &p, 64), 0);
    ck_assert_int_eq(troupe_abi_gtx_submit(n, 65, "m-1", 3), 0);
    ck_assert_int_eq(pump_until(n, &p, 65), 0);
    ck_assert_str_eq(final_status(n, &p, "m-1"), "succeed");
    ck_assert_int_eq(p.ncalls, 4);
    ck_assert_str_eq(p.calls[3], "msg m-1 01 action m");

    /* concurrent steps, step 2 after step 1: passed through */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_array(&pk, 2);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str_with_body(&pk, "action", 6);
        pack_call(&pk, "bank", i == 0 ? "c1" : "c2");
    }
    msgpack_sbuffer ob;
    msgpack_sbuffer_init(&ob);
    msgpack_packer opk;
    msgpack_packer_init(&opk, &ob, msgpack_sbuffer_write);
    msgpack_pack_map(&opk, 3);
    msgpack_pack_str_with_body(&opk, "concurrent", 10);
    msgpack_pack_true(&opk);
    msgpack_pack_str_with_body(&opk, "retry_limit", 11);
    msgpack_pack_uint32(&opk, 5);
    msgpack_pack_str_with_body(&opk, "after", 5);
    msgpack_pack_array(&opk, 1); /* one mask for two steps */
    msgpack_pack_uint64(&opk, 0);
    ck_assert_int_eq(troupe_abi_saga_submit(n, 66, "c-1", 3, sb.data, sb.size,
                                            ob.data, ob.size),
                     TROUPE_EINVAL);
    ck_assert_ptr_nonnull(strstr(troupe_abi_errmsg(), "after"));
    msgpack_sbuffer_clear(&ob);
    msgpack_pack_map(&opk, 2);
    msgpack_pack_str_with_body(&opk, "concurrent", 10);
    msgpack_pack_true(&opk);
    msgpack_pack_str_with_body(&opk, "after", 5);
    msgpack_pack_array(&opk, 2);
    msgpack_pack_uint64(&opk, 0);
    msgpack_pack_uint64(&opk, 1); /* step 2 after step 1 */
    ck_assert_int_eq(troupe_abi_saga_submit(n, 66, "c-1", 3, sb.data, sb.size,
                                            ob.data, ob.size),
                     0);
    ck_assert_int_eq(pump_until(n, &p, 66), 0);
    ck_assert_str_eq(final_status(n, &p, "c-1"), "succeed");
    ck_assert_int_eq(p.ncalls, 6);
    ck_assert_str_eq(p.calls[4], "saga c-1 01 action c1");
    ck_assert_str_eq(p.calls[5], "saga c-1 02 action c2");
    /* a cycle is the coordinator's EINVAL, in the completion */
    msgpack_sbuffer_clear(&ob);
    msgpack_pack_map(&opk, 2);
    msgpack_pack_str_with_body(&opk, "concurrent", 10);
    msgpack_pack_true(&opk);
    msgpack_pack_str_with_body(&opk, "after", 5);
    msgpack_pack_array(&opk, 2);
    msgpack_pack_uint64(&opk, 2);
    msgpack_pack_uint64(&opk, 1);
    ck_assert_int_eq(troupe_abi_saga_submit(n, 67, "c-2", 3, sb.data, sb.size,
                                            ob.data, ob.size),
                     0);
    ck_assert_int_eq(pump_until(n, &p, 67), TROUPE_EINVAL);
    msgpack_sbuffer_destroy(&ob);
    msgpack_sbuffer_destroy(&sb);

    /* list: what was stored (t-2 and c-2 were refused), filtered */
    ck_assert_int_eq(troupe_abi_gtx_list(n, 68, "done", NULL, NULL, 10),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_gtx_list(n, 68, NULL, "nope", NULL, 10),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_gtx_list(n, 68, NULL, NULL, "bad gid", 10),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_gtx_list(n, 68, NULL, NULL, NULL, 0),
                     TROUPE_EINVAL);
    const char *want[4] = {"c-1 m-1 t-1", "t-1", "m-1", "t-1"};
    for (int i = 0; i < 4; i++) {
        uint64_t id = 70 + (uint64_t)i;
        ck_assert_int_eq(troupe_abi_gtx_list(n, id, i == 1 ? "failed" : NULL,
                                             i == 2 ? "msg" : NULL,
                                             i == 3 ? "m-1" : NULL, 100),
                         0);
        ck_assert_int_eq(pump_until(n, &p, id), 0);
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        ck_assert_int_eq(
            msgpack_unpack_next(&up, p.body[id], p.body_len[id], NULL),
            MSGPACK_UNPACK_SUCCESS);
        ck_assert_int_eq(up.data.type, MSGPACK_OBJECT_MAP);
        const msgpack_object *items = &up.data.via.map.ptr[0].val;
        ck_assert_int_eq(items->type, MSGPACK_OBJECT_ARRAY);
        char got[64] = "";
        for (uint32_t k = 0; k < items->via.array.size; k++) {
            const msgpack_object_kv *kv =
                &items->via.array.ptr[k].via.map.ptr[0];
            ck_assert_int_eq(kv->val.type, MSGPACK_OBJECT_STR);
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%.*s",
                     k > 0 ? " " : "", (int)kv->val.via.str.size,
                     kv->val.via.str.ptr);
        }
        ck_assert_str_eq(got, want[i]);
        msgpack_unpacked_destroy(&up);
    }
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

/* ---- workflows: the pull side of a run, spoken by hand ---- */

/* Pumps (30 s at most) until a workflow run comes, into b; completions go
 * to p. */
static rec
pump_run(troupe_abi *n, pump *p, uint8_t *b)
{
    uint64_t until = ts_now_ms() + 30000;
    while (ts_now_ms() < until) {
        size_t len = 0;
        ck_assert_int_eq(troupe_abi_next_task(n, 100, b, BUF, &len), 0);
        if (len == 0)
            continue;
        rec r = parse(b);
        if (r.kind == TROUPE_TASK_WORKFLOW)
            return r;
        ck_assert_uint_eq(r.kind, TROUPE_TASK_COMPLETION);
        ck_assert_uint_lt(r.id, 128);
        p->done[r.id] = true;
        p->status[r.id] = status_of(&r);
        memcpy(p->body[r.id], r.body, r.blen < 1024 ? r.blen : 1024);
        p->body_len[r.id] = r.blen;
    }
    ck_abort_msg("no workflow run within 30 s");
    return (rec){0};
}

/* The records of a run's body [input bin, records]: their count, and the
 * state and result of record 0 (when there is one). */
static uint32_t
run_records(const rec *r, const char *input, uint64_t *state0, char *res0)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    ck_assert_int_eq(
        msgpack_unpack_next(&up, (const char *)r->body, r->blen, &off),
        MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *o = &up.data;
    ck_assert_int_eq(o->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(o->via.array.size, 2);
    const msgpack_object *in = &o->via.array.ptr[0], *recs = &in[1];
    ck_assert_int_eq(in->type, MSGPACK_OBJECT_BIN);
    ck_assert_uint_eq(in->via.bin.size, strlen(input));
    ck_assert_mem_eq(in->via.bin.ptr, input, strlen(input));
    ck_assert_int_eq(recs->type, MSGPACK_OBJECT_ARRAY);
    uint32_t nr = recs->via.array.size;
    if (nr > 0) {
        const msgpack_object *k = recs->via.array.ptr[0].via.array.ptr;
        ck_assert_uint_eq(recs->via.array.ptr[0].via.array.size, 5);
        *state0 = k[2].via.u64;
        memcpy(res0, k[3].via.bin.ptr, k[3].via.bin.size);
        res0[k[3].via.bin.size] = '\0';
    }
    msgpack_unpacked_destroy(&up);
    return nr;
}

START_TEST(workflow_run)
{
    troupe_abi *n = NULL;
    ck_assert_int_eq(troupe_abi_open(dir, 2, 2, 2, &n), 0);
    uint32_t idx;
    ck_assert_int_eq(troupe_abi_register_pull(n, "wfa", 8, 5000, &idx), 0);
    ck_assert_int_eq(troupe_abi_coord_options(n, 2, 50, 200, 2), 0);
    ck_assert_int_eq(troupe_abi_workflow_submit(n, 1, "w-1", 3, "wfa", "in", 2),
                     TROUPE_ESTATE); /* no coordinator before start */
    ck_assert_int_eq(troupe_abi_start(n), 0);
    /* refused at the call: nothing submitted */
    static char big[65537]; /* a payload over 64 KiB */
    ck_assert_int_eq(troupe_abi_workflow_submit(NULL, 1, "w-1", 3, "wfa", 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_workflow_submit(n, 1, "w 1", 3, "wfa", 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_workflow_submit(n, 1, "w-1", 3, NULL, 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_workflow_submit(n, 1, "w-1", 3, "wfa", NULL, 2),
                     TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_workflow_submit(n, 1, "w-1", 3, "wfa", big, sizeof(big)),
        TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_awakeable_resolve(NULL, 1, "w-1/01", 6, 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_awakeable_resolve(n, 1, "", 0, 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_awakeable_reject(n, 1, "w\0/01", 5, 0, 0),
                     TROUPE_EINVAL);
    ck_assert_int_eq(
        troupe_abi_awakeable_reject(n, 1, "w-1/01", 6, big, sizeof(big)),
        TROUPE_EINVAL);

    pump p = {0};
    uint8_t *b = malloc(BUF);
    /* refused by the coordinator: no target of that name, no such id */
    ck_assert_int_eq(
        troupe_abi_workflow_submit(n, 2, "w-0", 3, "nobody", "x", 1), 0);
    ck_assert_int_eq(pump_until(n, &p, 2), TROUPE_ENOENT);
    ck_assert_uint_gt(p.body_len[2], 1); /* the message */
    ck_assert_int_eq(troupe_abi_awakeable_resolve(n, 3, "w-0/01", 6, "x", 1),
                     0);
    ck_assert_int_eq(pump_until(n, &p, 3), TROUPE_ENOENT);

    ck_assert_int_eq(troupe_abi_workflow_submit(n, 4, "w-1", 3, "wfa", "in", 2),
                     0);
    rec r = pump_run(n, &p, b);
    ck_assert_uint_eq(r.target, idx);
    ck_assert_uint_eq(r.hlen, 20);
    ck_assert_mem_eq(r.header,
                     "workflow\0w-1\0"
                     "00\0run\0",
                     20);
    uint64_t st = 0;
    char res[64] = "";
    ck_assert_uint_eq(run_records(&r, "in", &st, res), 0);
    /* CONTINUE: an awakeable "pay" registered at position 0 */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint8(&pk, 3);
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 7);
    msgpack_pack_uint8(&pk, 0);
    msgpack_pack_uint8(&pk, 2);
    msgpack_pack_str_with_body(&pk, "pay", 3);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_bin_with_body(&pk, "", 0);
    msgpack_pack_nil(&pk);
    msgpack_pack_int8(&pk, 0);
    ck_assert_int_eq(
        troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS, sb.data, sb.size), 0);
    /* the next run sees it pending and awaits it: held */
    r = pump_run(n, &p, b);
    ck_assert_uint_eq(run_records(&r, "in", &st, res), 1);
    ck_assert_uint_eq(st, 1);
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS,
                                      "\x94\x06\xc0\x90\x00", 5),
                     0);
    char hold[32] = "";
    uint64_t until = ts_now_ms() + 30000;
    while (strcmp(hold, "awaiting") != 0 && ts_now_ms() < until) {
        p.done[5] = false;
        ck_assert_int_eq(troupe_abi_gtx_query(n, 5, "w-1", 3), 0);
        ck_assert_int_eq(pump_until(n, &p, 5), 0);
        (void)map_str(p.body[5], p.body_len[5], "hold", hold, sizeof(hold));
    }
    ck_assert_str_eq(hold, "awaiting");
    /* resolved from the host: it runs again with the payload */
    ck_assert_int_eq(troupe_abi_awakeable_resolve(n, 6, "w-1/01", 6, "paid", 4),
                     0);
    /* the same resolution again is OK and changes nothing (the run may
     * come before either completion: both are taken while it is held) */
    ck_assert_int_eq(troupe_abi_awakeable_resolve(n, 7, "w-1/01", 6, "paid", 4),
                     0);
    r = pump_run(n, &p, b);
    ck_assert_int_eq(pump_until(n, &p, 6), 0);
    ck_assert_uint_eq(run_records(&r, "in", &st, res), 1);
    ck_assert_uint_eq(st, 3);
    ck_assert_str_eq(res, "paid");
    ck_assert_int_eq(pump_until(n, &p, 7), 0); /* before the run ends */
    ck_assert_int_eq(troupe_abi_reply(n, r.id, TROUPE_OUTCOME_SUCCESS,
                                      "\x93\x01\xc0\x90", 4),
                     0);
    ck_assert_str_eq(final_status(n, &p, "w-1"), "succeed");
    /* another verdict, once it ended: a conflict */
    ck_assert_int_eq(troupe_abi_awakeable_reject(n, 8, "w-1/01", 6, "no", 2),
                     0);
    ck_assert_int_eq(pump_until(n, &p, 8), TROUPE_ECONFLICT);
    msgpack_sbuffer_destroy(&sb);
    free(b);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

/* The msgpack str a completion's body holds, into out. */
static void
body_str(const pump *p, uint64_t id, char *out, size_t cap)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    out[0] = '\0';
    if (msgpack_unpack_next(&up, p->body[id], p->body_len[id], &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        up.data.type == MSGPACK_OBJECT_STR && up.data.via.str.size < cap) {
        memcpy(out, up.data.via.str.ptr, up.data.via.str.size);
        out[up.data.via.str.size] = '\0';
    }
    msgpack_unpacked_destroy(&up);
}

/* XA from a host: two open transactions prepared as branches of one xa
 * (each ended by it), held until the submit commits both; a branch whose
 * prepare conflicts with a held key, then an abort that rolls back. */
START_TEST(xa_branches)
{
    troupe_abi *n = node();
    pump *p = calloc(1, sizeof(*p));
    for (int t = 0; t < 2; t++) {
        ck_assert_int_eq(
            troupe_abi_table_create(n, 1 + (uint64_t)t, t ? "b" : "a", NULL, 0),
            0);
        ck_assert_int_eq(pump_until(n, p, 1 + (uint64_t)t), 0);
    }
    ck_assert_int_eq(troupe_abi_xa_begin(n, 3, "x-1", 3), 0);
    ck_assert_int_eq(pump_until(n, p, 3), 0);
    msgpack_sbuffer doc;
    doc1(&doc, "v", "moved");
    uint64_t tx[3];
    for (int t = 0; t < 2; t++) {
        ck_assert_int_eq(troupe_abi_txn_begin(n, &tx[t]), 0);
        ck_assert_int_eq(troupe_abi_txn_put(n, tx[t], t ? "b" : "a", "k", 1,
                                            doc.data, doc.size),
                         0);
        ck_assert_int_eq(
            troupe_abi_xa_branch(n, 4 + (uint64_t)t, "x-1", 3, tx[t]), 0);
        ck_assert_int_eq(pump_until(n, p, 4 + (uint64_t)t), 0);
        char bid[8];
        body_str(p, 4 + (uint64_t)t, bid, sizeof(bid));
        ck_assert_str_eq(bid, t ? "02" : "01");
        /* the prepare ended the transaction: gone, or (its destroy not
         * run yet on scheduler 0) still marked as ending */
        int rb = troupe_abi_txn_rollback(n, tx[t]);
        ck_assert_msg(rb == TROUPE_ENOENT || rb == TROUPE_ESTATE,
                      "a prepared transaction rolled back: %d", rb);
    }
    /* held: another branch on the same key loses its prepare */
    ck_assert_int_eq(troupe_abi_xa_begin(n, 6, "x-2", 3), 0);
    ck_assert_int_eq(pump_until(n, p, 6), 0);
    ck_assert_int_eq(troupe_abi_txn_begin(n, &tx[2]), 0);
    ck_assert_int_eq(
        troupe_abi_txn_put(n, tx[2], "a", "k", 1, doc.data, doc.size), 0);
    ck_assert_int_eq(troupe_abi_xa_branch(n, 7, "x-2", 3, tx[2]), 0);
    ck_assert_int_eq(pump_until(n, p, 7), TROUPE_ECONFLICT);
    ck_assert_int_eq(troupe_abi_gtx_abort(n, 8, "x-2", 3, NULL), 0);
    ck_assert_int_eq(pump_until(n, p, 8), 0);
    ck_assert_str_eq(final_status(n, p, "x-2"), "failed");
    /* nothing visible before the submit, both rows after */
    ck_assert_int_eq(troupe_abi_table_get(n, 9, "a", "k", 1), 0);
    ck_assert_int_eq(pump_until(n, p, 9), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_gtx_submit(n, 10, "x-1", 3), 0);
    ck_assert_int_eq(pump_until(n, p, 10), 0);
    ck_assert_str_eq(final_status(n, p, "x-1"), "succeed");
    for (int t = 0; t < 2; t++) {
        uint64_t id = 11 + (uint64_t)t;
        ck_assert_int_eq(troupe_abi_table_get(n, id, t ? "b" : "a", "k", 1), 0);
        ck_assert_int_eq(pump_until(n, p, id), 0);
        ck_assert_uint_eq(p->body_len[id], doc.size);
        ck_assert_int_eq(memcmp(p->body[id], doc.data, doc.size), 0);
    }
    /* bad calls */
    ck_assert_int_eq(troupe_abi_xa_begin(n, 13, "bad gid", 7), TROUPE_EINVAL);
    ck_assert_int_eq(troupe_abi_xa_branch(n, 13, "x-1", 3, 999), TROUPE_ENOENT);
    ck_assert_int_eq(troupe_abi_xa_begin(n, 13, NULL, 0), TROUPE_EINVAL);
    msgpack_sbuffer_destroy(&doc);
    free(p);
    ck_assert_int_eq(troupe_abi_close(&n), 0);
}
END_TEST

static Suite *
abi_suite(void)
{
    Suite *s = suite_create("abi");
    TCase *tc = tcase_create("abi");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, completions);
    tcase_add_test(tc, busy_bound);
    tcase_add_test(tc, small_buffer);
    tcase_add_test(tc, close_in_flight);
    tcase_add_test(tc, queue_events);
    tcase_add_test(tc, queue_max_attempts);
    tcase_add_test(tc, thread_errmsg);
    tcase_add_test(tc, host_actors);
    tcase_add_test(tc, coordinator);
    tcase_add_test(tc, workflow_run);
    tcase_add_test(tc, xa_branches);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    Suite *s[] = {abi_suite()};
    return ts_run_suites(s, 1);
}
